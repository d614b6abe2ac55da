"""Names resolved once: the configs hold the registered builder kind and verifier they name, refuse a bad name when
built, keep only the names in their JSON; a round's cost model learns from the round's record; the report turns each
round into a graph once."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, replace

import pytest
from conftest import random_prompts, tiny_pair

from tevviz.engine import BuilderConfig, DecodeConfig, DecodeSession, SamplingConfig, TevvizError
from tevviz.engine.cost.arm_choice import MixedBudget
from tevviz.engine.cost.auto_budget import AutoBudget
from tevviz.engine.decode import sizing
from tevviz.engine.draft import builder_kinds
from tevviz.engine.draft.builder_kinds import builder_kind, builder_names
from tevviz.engine.records import io as tio
from tevviz.engine.records.records import expected_accepted
from tevviz.engine.scan.scan_run import settings_dict
from tevviz.engine.verify import verifiers
from tevviz.engine.verify.verifiers import VERIFIERS

T1 = SamplingConfig(temperature=1.0)


@pytest.fixture(scope="module")
def pair():
    return tiny_pair("llama", seed=7)


def builder(name: str, **kw) -> BuilderConfig:
    """A valid config of the builder `name` (one that sizes every round itself is auto-sized)."""
    return BuilderConfig(name=name, auto=builder_kind(name).auto_only, **kw)


# --- the configs hold the kinds ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", builder_names())
def test_a_builder_config_holds_the_kind_it_names(name):
    cfg = builder(name)
    assert cfg.spec is builder_kind(name) and cfg.spec.name == name
    other = next(b for b in ("chain", "static") if b != name)
    assert replace(cfg, name=other, auto=False).spec is builder_kind(other)  # replace() resolves the new name


@pytest.mark.parametrize("name", list(VERIFIERS))
def test_a_decode_config_holds_the_verifier_it_names(name):
    cfg = DecodeConfig(builder=BuilderConfig(name="chain"), verifier=name)
    assert cfg.verify is VERIFIERS[name]
    assert replace(cfg, verifier="tev").verify is verifiers.tev


def test_the_resolved_kinds_stay_out_of_equality_repr_and_the_json():
    a, b = DecodeConfig(), DecodeConfig()
    assert a == b and hash(a) == hash(b) and a.builder.spec is b.builder.spec
    assert "spec" not in repr(a) and "verify=" not in repr(a) and "function" not in repr(a)
    assert asdict(a.builder) == {"name": "best-first", "budget": 32, "depth": 6, "children": 8, "width": 8,
                                 "branching": (4, 2, 2, 1, 1), "auto": False, "draft_temperature": 1.0,
                                 "stop_below": 0.0}
    assert set(asdict(a)) == {"sampling", "builder", "verifier", "max_new_tokens", "seed", "stop_on_eos",
                              "missing_top", "chat", "optimal"}


@pytest.mark.parametrize("make, said", [
    (lambda: BuilderConfig(name="best_first"), "unknown builder 'best_first'; choose one of best-first, "),
    (lambda: DecodeConfig(verifier="TEV"), "unknown verifier 'TEV'; choose one of tev, "),
    (lambda: replace(DecodeConfig(), verifier="exit"), "unknown verifier 'exit'"),
    (lambda: replace(BuilderConfig(), name="tree"), "unknown builder 'tree'"),
    (lambda: DecodeConfig(builder=BuilderConfig(name="ddtree"), verifier="speculative"),
     "the ddtree builder takes the tev, predraw, residual verifiers, not speculative"),
])
def test_a_bad_name_is_refused_when_the_config_is_built(make, said):
    with pytest.raises(TevvizError) as e:
        make()
    assert said in str(e.value) and "\n" not in str(e.value)


def test_a_config_round_trips_through_json_by_its_names():
    cfg = DecodeConfig(sampling=SamplingConfig(temperature=0.7, top_k=5), verifier="predraw", seed=3,
                       builder=BuilderConfig(name="static", branching=(3, 2), depth=4))
    text = json.dumps(settings_dict(cfg, None))
    d = json.loads(text)
    assert d["builder"]["name"] == "static" and d["verifier"] == "predraw"
    assert "spec" not in text and "_verify" not in text and "function" not in text
    b = d["builder"]
    back = DecodeConfig(sampling=SamplingConfig(**d["sampling"]), verifier=d["verifier"], seed=d["seed"],
                        max_new_tokens=d["max_new_tokens"], missing_top=d["missing_top"],
                        stop_on_eos=d["stop_on_eos"], optimal=d["optimal"],
                        builder=BuilderConfig(**{**b, "branching": tuple(b["branching"])}))
    assert back == cfg and back.builder.spec is cfg.builder.spec and back.verify is verifiers.predraw


# --- nothing resolves a name again ------------------------------------------------------------------------------------


def test_a_session_decides_with_the_verifier_its_config_holds(pair, monkeypatch):
    """With the registry emptied once the config is built, the session still verifies every round (no lookup by
    name), and decodes what it decodes with the registry in place."""
    cfg = DecodeConfig(sampling=T1, max_new_tokens=12, seed=2, stop_on_eos=False, missing_top=0,
                       builder=BuilderConfig(budget=6, depth=3), verifier="residual")
    prompt = random_prompts(1, 11)[0]
    expected = DecodeSession(pair, prompt, cfg).run()
    monkeypatch.setattr(verifiers, "VERIFIERS", {})
    got = DecodeSession(pair, prompt, cfg).run()
    assert [r.committed for r in got] == [r.committed for r in expected] and got
    assert {r.verifier for r in got} == {"residual"}


@pytest.mark.parametrize("name, auto, policy", [
    ("best-first", False, sizing.FixedSizing), ("best-first", True, sizing.AutoSizing),
    ("sampled", True, sizing.AutoSizing), ("mixed", True, sizing.MixedSizing),
])
def test_the_sizing_policy_reads_the_resolved_kind(name, auto, policy, monkeypatch):
    cfg = DecodeConfig(builder=BuilderConfig(name=name, auto=auto, budget=8, depth=4))
    if policy is not sizing.MixedSizing:  # (the mixed builder builds its two arms' configs: each resolves its name)
        monkeypatch.setattr(builder_kinds, "_KINDS", {})  # any lookup by name now fails
    chosen = sizing.make_sizing(sizing.RoundPlan(cfg.builder, cfg.verifier, cfg.verify))
    assert type(chosen) is policy
    if policy is sizing.AutoSizing:
        assert chosen.model.chain == (name == "sampled")
    if policy is sizing.MixedSizing:  # the sampled arm goes to speculative sampling
        assert [(a.builder.name, a.verifier, a.verify) for a in chosen.arms.values()] == \
            [("best-first", "tev", verifiers.tev), ("sampled", "speculative", verifiers.speculative)]


# --- the cost model learns from the record ----------------------------------------------------------------------------


def watched(monkeypatch, cls, method: str) -> list[tuple]:
    """Every call of `cls.method` from now on, as (args, kwargs); the calls still happen."""
    calls, real = [], getattr(cls, method)

    def spy(self, *args, **kwargs):
        calls.append((args, kwargs))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(cls, method, spy)
    return calls


@pytest.mark.parametrize("name, verifier", [("best-first", "tev"), ("sampled", "speculative")])
def test_the_cost_model_sees_the_numbers_of_the_record_it_returns(pair, monkeypatch, name, verifier):
    calls = watched(monkeypatch, AutoBudget, "observe")
    cfg = DecodeConfig(sampling=T1, max_new_tokens=40, seed=5, stop_on_eos=False, verifier=verifier,
                       builder=BuilderConfig(name=name, budget=8, depth=4, auto=True))
    records = DecodeSession(pair, random_prompts(1, 5)[0], cfg).run()
    assert len(calls) == len(records) > 4
    for r, (args, kwargs) in zip(records, calls):
        tokens, levels, ms, covered, _, ranks, logq, accept = args
        assert not kwargs and tokens == r.size and ms is r.stage_ms and logq == r.draft_logprobs
        assert len(ranks) == r.size and r.sizing.B == r.size - 1 and r.sizing.H == max(r.depths)
        assert r.sizing.drafted == (levels > 0)
        if r.accept is None:  # an exact path verifier on a fixed tree: it learns p_edge and C_p
            assert accept == r.p_edge and covered == r.C_p
        else:  # speculative sampling on a sampled chain: min(1, p / q) and its reach
            assert accept == r.accept and covered == expected_accepted(r.parents, r.accept)
            assert covered == pytest.approx(r.expected_length - 1)
    assert any(r.accept is not None for r in records) == (name == "sampled")
    assert records[-1].sizing.fit.rounds == len(records)


def test_the_mixed_builder_rates_its_arms_from_the_records(pair, monkeypatch):
    calls = watched(monkeypatch, MixedBudget, "observe")
    cfg = DecodeConfig(sampling=T1, max_new_tokens=60, seed=4, stop_on_eos=False,
                       builder=BuilderConfig(name="mixed", budget=8, depth=4, auto=True))
    records = DecodeSession(pair, random_prompts(1, 6)[0], cfg).run()
    assert len(calls) == len(records)
    for r, ((arm, expected_tokens, ms, warmup), _) in zip(records, calls):
        assert arm == ("sampled" if r.sizing.chain else "best-first")
        assert r.verifier == ("speculative" if r.sizing.chain else "tev")
        assert ms == sum(r.stage_ms.values()) and warmup == r.sizing.warmup
        assert expected_tokens == pytest.approx(r.expected_length)
    assert {r.sizing.chain for r in records} == {True, False}


# --- the report converts each round once ------------------------------------------------------------------------------


def test_the_report_turns_each_round_into_a_graph_once(pair, monkeypatch):
    from tevviz.render import report
    from tevviz.render.graph import round_graph

    figures = sys.modules["tevviz.render.tree_figure"]  # (the package hands on a function of that name)

    cfg = DecodeConfig(sampling=T1, max_new_tokens=20, seed=1, stop_on_eos=False, missing_top=2,
                       builder=BuilderConfig(budget=6, depth=3))
    s = DecodeSession(pair, random_prompts(1, 8)[0], cfg)
    records = s.run()
    imported = tio.loads(json.dumps(tio.session_dict({}, "", s.prompt_ids, s.generated, "", records)))
    before = report.report_html(imported)
    made = []

    def counted(rd):
        made.append(rd["graph"]["round"])
        return round_graph(rd)

    monkeypatch.setattr(report, "round_graph", counted)
    monkeypatch.setattr(figures, "round_graph", counted)
    assert report.report_html(imported) == before  # the same page
    assert sorted(made) == [r.index for r in records] and len(records) > 2
