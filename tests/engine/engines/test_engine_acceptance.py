"""An engine's acceptance record (tevviz.engine.engines.acceptance): the three constructors agree, and the curves
match numbers worked by hand."""

import json
import math

import pytest

from tevviz.engine.engines.acceptance import EngineAcceptance, EngineFigure, PromptAcceptance
from tevviz.engine.errors import TevvizError


def test_histogram_by_hand():
    # [2, 1, 1]: 4 steps; 0*2 + 1*1 + 2*1 = 3 accepted; at least 1: 2 steps, at least 2: 1 step.
    a = EngineAcceptance.from_histogram("sglang", "sglang-meta-info", [2, 1, 1], drafted=8)
    assert (a.steps, a.accepted, a.drafted, a.reached, a.depth) == (4, 3, 8, (2, 1), 2)
    assert a.acceptance_length == 1.75
    assert a.acceptance_rate == 3 / 8
    assert a.marginal == [0.5, 0.25]
    assert a.conditional == [0.5, 0.5]
    # A share p of n 0/1 values: SE = sqrt(p (1 - p) / (n - 1)).
    assert a.marginal_se[0] == pytest.approx(math.sqrt(0.25 / 3))
    assert a.marginal_se[1] == pytest.approx(math.sqrt(0.25 * 0.75 / 3))
    assert a.conditional_se[1] == pytest.approx(math.sqrt(0.25 / 1))  # 1 of the 2 steps that reached depth 1


def test_per_step_lengths_give_the_same_record_and_keep_the_order():
    a = EngineAcceptance.from_steps("vllm", "vllm-response", [2, 0, 1, 0], drafted=[2, 2, 2, 2])
    b = EngineAcceptance.from_histogram("vllm", "vllm-response", [2, 1, 1], drafted=8)
    assert (a.steps, a.accepted, a.drafted, a.reached) == (b.steps, b.accepted, b.drafted, b.reached)
    assert a.per_step_accepted == (2, 0, 1, 0) and a.per_step_drafted == (2, 2, 2, 2)
    d = a.to_dict()
    assert d["per_step_accepted"] == [2, 0, 1, 0] and d["per_step_drafted"] == [2, 2, 2, 2]
    assert "per_step_accepted" not in b.to_dict()


def test_depth_comes_from_the_drafts_when_nothing_reached_the_end():
    # Drafts of 3, never more than 1 accepted: m_2 = m_3 = 0 and c_3 is undefined (no step reached depth 2).
    a = EngineAcceptance.from_steps("llama.cpp", "llamacpp-response", [1, 0], drafted=[3, 3])
    assert a.marginal == [0.5, 0.0, 0.0]
    assert a.conditional == [0.5, 0.0, None]
    assert a.conditional_se[2] is None


def test_position_counts_by_hand():
    # 10 steps; position 1 accepted in 6, position 2 in 3, position 3 in 0.
    a = EngineAcceptance.from_position_counts("vllm", "vllm-metrics", 10, [6, 3, 0], drafted=30)
    assert a.accepted == 9 and a.acceptance_length == 1.9
    assert a.marginal == [0.6, 0.3, 0.0]
    assert a.conditional == [0.6, 0.5, 0.0]
    assert a.acceptance_rate == pytest.approx(0.3)


def test_no_per_position_figures():
    a = EngineAcceptance("llama.cpp", "llamacpp-metrics", steps=5, accepted=4, drafted=20,
                         notes=("no per-position figures",))
    d = a.to_dict()
    assert d["marginal"] == [] and d["conditional"] == [] and d["acceptance_length"] == 1.8
    assert d["notes"] == ["no per-position figures"]


def test_to_dict_has_the_keys_scripts_read_and_round_trips():
    a = EngineAcceptance.from_histogram(
        "sglang", "sglang-meta-info", [1, 0, 3], drafted=6,
        prompts=(PromptAcceptance("0", 4, 6, 6),),
        engine_figures=(EngineFigure("SGLang accept length", 2.5, "completion tokens / verify steps"),))
    d = json.loads(json.dumps(a.to_dict()))
    for key in ("engine", "format", "steps", "drafted", "accepted", "acceptance_length", "marginal", "conditional"):
        assert key in d
    assert d["prompts"][0]["acceptance_length"] == 2.5
    assert EngineAcceptance.from_dict(d) == a


def test_bad_counts_are_refused():
    with pytest.raises(TevvizError, match="must not rise"):
        EngineAcceptance("vllm", "vllm-metrics", steps=3, accepted=5, reached=(2, 3))
    with pytest.raises(TevvizError, match="more than it drafted"):
        EngineAcceptance.from_steps("vllm", "vllm-response", [3], drafted=[2])
    with pytest.raises(TevvizError, match="negative"):
        EngineAcceptance.from_histogram("sglang", "sglang-meta-info", [1, -1])
    with pytest.raises(TevvizError, match="engine, format, steps"):
        EngineAcceptance.from_dict({"engine": "x"})
