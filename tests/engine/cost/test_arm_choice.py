"""`--builder mixed`'s arm choice (cost/arm_choice.py) step by step: rates, decay, and the wait between tries."""

from __future__ import annotations

import pytest

from tevviz.engine.cost.arm_choice import ARM_MIN, ARM_WINDOW, ARMS, MAX_ARM_WAIT, MixedBudget
from tevviz.engine.cost.auto_budget import WARMUP_FRACTIONS

D = 1 - 1 / ARM_WINDOW


def sized(max_budget: int = 16, max_depth: int = 6) -> MixedBudget:
    """A model whose arms are past their warm-ups and first sized rounds, with nothing measured yet."""
    model = MixedBudget(max_budget, max_depth)
    for arm in ARMS:
        model.models[arm].rounds = len(WARMUP_FRACTIONS)
        model.sized[arm] = ARM_MIN
    return model


def test_each_arm_has_its_own_cost_model_of_its_own_kind():
    model = MixedBudget(16, 6)
    tree, chain = model.models["best-first"], model.models["sampled"]
    assert (tree.chain, tree.max_budget, tree.max_depth) == (False, 16, 6)
    assert (chain.chain, chain.max_budget, chain.max_depth) == (True, 6, 6)  # a chain's budget is its depth
    model.limit(20, 3)
    assert (tree.max_budget, tree.max_depth, chain.max_budget, chain.max_depth) == (20, 3, 3, 3)
    assert not tree.chain and chain.chain


def test_rate_is_tokens_over_ms_and_zero_before_a_sized_round():
    model = sized()
    assert model.rate("sampled") == 0.0 and model.summary() == {"tree_rate": 0.0, "chain_rate": 0.0}
    model.observe("sampled", 3.0, 10.0, warmup=False)
    assert model.rate("sampled") == pytest.approx(0.3) and model.rate("best-first") == 0.0
    assert model.summary() == pytest.approx({"tree_rate": 0.0, "chain_rate": 0.3})


def test_observe_decays_both_arms_then_adds_the_round():
    model = sized()
    model.observe("sampled", 3.0, 10.0, warmup=False)
    model.observe("best-first", 2.0, 4.0, warmup=False)
    assert model.tokens == pytest.approx({"sampled": 3.0 * D, "best-first": 2.0})
    assert model.ms == pytest.approx({"sampled": 10.0 * D, "best-first": 4.0})
    model.observe("best-first", 1.0, 4.0, warmup=False)
    assert model.tokens["best-first"] == pytest.approx(2.0 * D + 1.0)
    assert model.rate("best-first") == pytest.approx((2.0 * D + 1.0) / (4.0 * D + 4.0))
    assert model.rate("sampled") == pytest.approx(0.3)  # decay alone keeps a rate
    assert model.sized == {"sampled": ARM_MIN + 1, "best-first": ARM_MIN + 2}


def test_a_warm_up_round_is_not_measured():
    model = sized()
    model.observe("sampled", 3.0, 10.0, warmup=True)
    assert model.tokens["sampled"] == 0.0 and model.sized["sampled"] == ARM_MIN and model.since == 0


def test_a_zero_ms_round_still_gives_a_finite_rate():
    model = sized()
    model.observe("sampled", 1.0, 0.0, warmup=False)
    assert model.rate("sampled") == pytest.approx(1e9)


def test_leader_is_the_higher_rate_and_sampled_on_a_tie():
    model = sized()
    assert model.leader() == "sampled"
    model.observe("best-first", 1.0, 10.0, warmup=False)
    assert model.leader() == "best-first"


def test_choose_runs_warm_ups_and_first_sized_rounds_of_the_arm_furthest_behind():
    model = MixedBudget(16, 6)
    assert model.choose() == "sampled"  # both at 0 rounds: the first arm
    model.models["sampled"].rounds = 1
    assert model.choose() == "best-first"
    model.models["best-first"].rounds = model.models["sampled"].rounds = len(WARMUP_FRACTIONS)
    model.sized["sampled"] = ARM_MIN
    assert model.choose() == "best-first"  # warmed up, but not yet sized ARM_MIN times
    # An arm still in its warm-up comes before an arm only short of sized rounds.
    model.models["sampled"].rounds = len(WARMUP_FRACTIONS) - 1
    assert model.choose() == "sampled" and model.exploring is None


def test_the_other_arm_is_tried_after_wait_rounds_and_then_waits_twice_as_long_while_it_loses():
    model = sized()
    model.observe("sampled", 3.0, 10.0, warmup=False)
    model.observe("best-first", 1.0, 10.0, warmup=False)  # sampled leads
    assert (model.wait, model.since) == (1, 2)
    assert model.choose() == "best-first" and model.exploring == "best-first"
    model.observe("best-first", 1.0, 10.0, warmup=False)  # tried and still behind
    assert (model.wait, model.since) == (2, 0)
    assert model.choose() == "sampled" and model.exploring is None
    model.observe("sampled", 3.0, 10.0, warmup=False)
    assert model.since == 1 and model.choose() == "sampled"
    model.observe("sampled", 3.0, 10.0, warmup=False)
    assert model.since == 2 and model.choose() == "best-first"


def test_a_try_that_takes_the_lead_resets_the_wait():
    model = sized()
    model.observe("sampled", 3.0, 10.0, warmup=False)
    model.wait, model.since = 8, 8
    assert model.choose() == "best-first"
    model.observe("best-first", 50.0, 10.0, warmup=False)
    assert model.leader() == "best-first" and (model.wait, model.since) == (1, 0)


def test_the_wait_never_passes_its_cap():
    model = sized()
    model.observe("sampled", 3.0, 10.0, warmup=False)
    model.wait = model.since = MAX_ARM_WAIT
    assert model.choose() == "best-first"
    model.observe("best-first", 0.1, 10.0, warmup=False)
    assert model.wait == MAX_ARM_WAIT
