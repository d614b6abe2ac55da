"""--budget auto: the online cost model, the rate rule, its limits, and exactness with it on."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import random_prompts, tiny_pair
from test_exactness import assert_greedy, greedy_cfg

from tevviz.engine import BuilderConfig, DecodeConfig, DecodeSession, SamplingConfig, TevvizError
from tevviz.engine.auto_budget import WARMUP_FRACTIONS, AutoBudget, Plan
from tevviz.engine.io import loads, session_dict


def plan(**kw) -> Plan:
    base = {"max_budget": 8, "max_depth": 4, "target_fixed": 10.0, "target_per_token": 1.0, "draft_level": 2.0, "overhead": 1.0,
                "calibration": 1.0}
    return Plan(**(base | kw))


def test_best_subtree_maximises_expected_tokens_per_ms_by_brute_force():
    g = torch.Generator().manual_seed(0)
    for _ in range(50):
        scores = -torch.rand(12, generator=g) * 4
        p = plan(target_per_token=float(torch.rand(1, generator=g)) * 3, calibration=float(torch.rand(1, generator=g)))
        k, rate = p.best(scores, depth=3)
        q = sorted(torch.exp(scores).tolist(), reverse=True)[:8]
        rates = [(1 + p.calibration * sum(q[:j])) / p.round_ms(j, 3) for j in range(1, len(q) + 1)]
        assert k == 1 + max(range(len(rates)), key=rates.__getitem__) and rate == pytest.approx(max(rates), rel=1e-5)
    cheap, dear = plan(target_per_token=1e-6), plan(target_per_token=1e3)
    assert cheap.best(torch.zeros(12) - 0.1, 3)[0] == 8  # nodes nearly free: the whole limit
    assert dear.best(torch.zeros(12) - 0.1, 3)[0] == 1  # nodes dearer than what they bring: one


def test_cost_model_recovers_a_line_and_the_calibration():
    auto = AutoBudget(64, 8)
    for n in (65, 17, 33, 9, 41, 25):
        auto.observe(n, levels=4, stage_ms={"draft": 8.0, "target": 20.0 + 0.5 * n, "verify": 1.0, "other": 2.0},
                     C_p=1.5, q_sum=3.0)
    fit = auto.fit()
    assert fit.target_fixed == pytest.approx(20.0) and fit.target_per_token == pytest.approx(0.5)
    assert fit.draft_level == pytest.approx(2.0) and fit.overhead == pytest.approx(3.0)
    assert fit.calibration == pytest.approx(0.5) and fit.rounds == 6


@pytest.fixture(scope="module")
def pair():
    return tiny_pair("llama", seed=4)


def test_auto_trees_respect_the_limits_and_record_their_sizing(pair):
    cfg = DecodeConfig(sampling=SamplingConfig(temperature=1.0), max_new_tokens=60, seed=1, stop_on_eos=False,
                       builder=BuilderConfig(budget=12, depth=4, auto=True))
    s = DecodeSession(pair, random_prompts(1, 3)[0], cfg)
    records = s.run()
    assert len(records) > len(WARMUP_FRACTIONS)
    for i, r in enumerate(records):
        assert r.size - 1 <= 12 and max(r.depths) <= 4
        assert r.sizing["B"] == r.size - 1 and r.sizing["H"] == max(r.depths)
        if i < len(WARMUP_FRACTIONS):  # the first rounds try fixed shares of the limit, to give the fit a slope
            assert r.sizing["warmup"] and r.size - 1 == round(12 * WARMUP_FRACTIONS[i])
        else:
            assert not r.sizing["warmup"]
    assert records[-1].sizing["rounds"] == len(records)
    assert len({r.size for r in records}) > 1, "the sizes should vary with the cost model"
    back = loads(json.dumps(session_dict({}, "", s.prompt_ids, s.generated, "", records)))
    assert [r.sizing for r in back.rounds] == [r.sizing for r in records]


def test_auto_needs_best_first():
    with pytest.raises(TevvizError, match="best-first"):
        BuilderConfig(kind="chain", auto=True)


@pytest.mark.parametrize("family", ["llama", "qwen2", "gpt2"])
def test_greedy_exact_with_auto_budget(family):
    from test_exactness import pair_of

    pair = pair_of(family)
    assert_greedy(pair, random_prompts(3, seed=900), greedy_cfg(BuilderConfig(budget=24, depth=6, auto=True)))


def test_greedy_exact_with_a_compiled_draft():
    """--compile-draft: the tree builder runs torch.compile's draft; outputs stay the target's greedy ones."""
    from test_exactness import pair_of

    from tevviz.engine.models import compiled_draft

    pair = compiled_draft(pair_of("llama"))
    assert pair.drafting is not pair.draft
    assert_greedy(pair, random_prompts(2, seed=901), greedy_cfg(BuilderConfig(budget=16, depth=5)))
