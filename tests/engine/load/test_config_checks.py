"""The configs refuse bad settings naming the field, and take their limits: BuilderConfig
(tevviz/engine/draft/builders.py), SamplingConfig (engine/core/sampling.py), DecodeConfig (engine/decode/session.py)."""

from __future__ import annotations

import pytest

from tevviz.engine import BuilderConfig, DecodeConfig, SamplingConfig, TevvizError
from tevviz.engine.draft.builders import MAX_BUDGET, MAX_CHILDREN, MAX_DEPTH, MAX_WIDTH


@pytest.mark.parametrize("kwargs,field", [
    ({"budget": 0}, "budget"), ({"budget": -3}, "budget"), ({"budget": MAX_BUDGET + 1}, "budget"),
    ({"depth": 0}, "depth"), ({"depth": MAX_DEPTH + 1}, "depth"), ({"depth": 2.5}, "depth"),
    ({"children": 0}, "children K"), ({"children": MAX_CHILDREN + 1}, "children K"),
    ({"width": 0}, "width"), ({"width": MAX_WIDTH + 1}, "width"), ({"budget": True}, "budget"),
    ({"name": "beam"}, "builder"),
    ({"name": "static", "branching": ()}, "branching"), ({"name": "static", "branching": (2, 0)}, "branching"),
    ({"name": "static", "branching": (MAX_CHILDREN + 1,)}, "branching"),
    ({"name": "static", "branching": (64, 64, 64)}, "nodes"),
    ({"name": "chain", "depth": 0}, "depth"),
])
def test_bad_builder_config(kwargs, field):
    with pytest.raises(TevvizError, match=field):
        BuilderConfig(**kwargs)


def test_builder_limits_are_inclusive():
    BuilderConfig(budget=MAX_BUDGET, depth=MAX_DEPTH, children=MAX_CHILDREN, width=MAX_WIDTH)
    BuilderConfig(budget=1, depth=1, children=1, width=1)


@pytest.mark.parametrize("kwargs,field", [
    ({"temperature": -0.1}, "temperature"), ({"temperature": float("nan")}, "temperature"),
    ({"temperature": float("inf")}, "temperature"), ({"temperature": "1"}, "temperature"),
    ({"top_p": 0.0}, "top-p"), ({"top_p": 1.5}, "top-p"), ({"top_p": -0.2}, "top-p"),
    ({"top_p": float("nan")}, "top-p"), ({"top_k": -1}, "top-k"), ({"top_k": 2.0}, "top-k"),
])
def test_bad_sampling_config(kwargs, field):
    with pytest.raises(TevvizError, match=field):
        SamplingConfig(**kwargs)


def test_sampling_limits_are_inclusive():
    SamplingConfig(temperature=0.0, top_p=1.0)
    SamplingConfig(temperature=3.0, top_p=1e-6, top_k=1)


@pytest.mark.parametrize("kwargs,field", [
    ({"verifier": "beam"}, "unknown verifier"), ({"max_new_tokens": 0}, "max new tokens"),
    ({"max_new_tokens": 10**6}, "max new tokens"), ({"seed": "x"}, "seed"),
])
def test_bad_decode_config(kwargs, field):
    with pytest.raises(TevvizError, match=field) as e:
        DecodeConfig(**kwargs)
    if "verifier" in kwargs:
        assert all(name in str(e.value) for name in ("tev", "predraw", "residual")), "the message lists the choices"


@pytest.mark.parametrize("make, message", [
    (lambda: BuilderConfig(budget=0), "budget must be"),
    (lambda: BuilderConfig(budget=5000), "budget must be"),
    (lambda: BuilderConfig(depth=0), "depth must be"),
    (lambda: BuilderConfig(depth=65), "depth must be"),
    (lambda: BuilderConfig(name="static", branching=(0,)), "static branching"),
    (lambda: BuilderConfig(name="bushy"), "unknown builder"),
    (lambda: SamplingConfig(temperature=float("nan")), "temperature"),
    (lambda: SamplingConfig(temperature=-0.1), "temperature"),
    (lambda: SamplingConfig(top_p=0.0), "top-p"),
    (lambda: SamplingConfig(top_k=-2), "top-k"),
    (lambda: DecodeConfig(verifier="magic"), "unknown verifier"),
    (lambda: DecodeConfig(max_new_tokens=0), "max new tokens"),
])
def test_settings_out_of_range(make, message):
    with pytest.raises(TevvizError, match=message):
        make()
