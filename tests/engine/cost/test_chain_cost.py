"""The sampled chain's cost model (cost/chain_cost.py): survival sums, per-depth prices, the depth each round drafts."""

from __future__ import annotations

import pytest

from tevviz.engine.cost import chain_cost as cc
from tevviz.engine.records.round_time import WINDOW, Fit

# Round ms = overhead 1 + (draft_fixed 0.5 + 2 per level, 0 without a draft) + target 10 + 1 per token (h + 1).
FIT = Fit(target_fixed=10.0, target_per_token=1.0, draft_level=2.0, overhead=1.0, calibration=1.0, rounds=10,
          plain=12.0, draft_fixed=0.5)
LINE = [12.0, 15.5, 18.5, 21.5]


def test_tokens_before_any_chain_halve_at_each_depth():
    # Every ratio is drawn toward the one above it, 1/2 at depth 1: reach 1/2, 1/4, 1/8.
    assert cc.ChainCost().tokens(3) == pytest.approx([0.0, 0.5, 0.75, 0.875])


def test_learn_one_chain_and_read_its_survival_ratios():
    cost = cc.ChainCost()
    cost.learn([1.0, 0.8, 0.5])  # reaches depth 1 with 0.8, depth 2 with 0.4
    assert cost.reached_before[1:4] == pytest.approx([1.0, 0.8, 0.0])
    assert cost.reached[1:4] == pytest.approx([0.8, 0.4, 0.0])
    r1 = (0.8 + 0.5) / (1.0 + 1.0)
    r2 = (0.4 + r1) / (0.8 + 1.0)
    r3 = r2  # depth 3 was never drafted: priced like depth 2
    want = [0.0, r1, r1 + r1 * r2, r1 + r1 * r2 + r1 * r2 * r3]
    assert cost.tokens(3) == pytest.approx(want)
    assert cost.tokens(1) == pytest.approx(want[:2])


def test_learn_decays_every_depth_and_takes_no_chain():
    cost = cc.ChainCost()
    cost.learn([1.0, 0.5, 0.5])
    cost.learn(None)
    d = 1 - 1 / WINDOW
    assert cost.reached[1:3] == pytest.approx([0.5 * d, 0.25 * d])
    assert cost.reached_before[1:3] == pytest.approx([d, 0.5 * d])


def test_learn_keeps_only_the_deepest_depth_it_can_hold():
    cost = cc.ChainCost()
    cost.learn([1.0] * (cc.MAX_CHAIN + 5))
    assert cost.reached[cc.MAX_CHAIN] == 1.0 and len(cost.reached) == cc.MAX_CHAIN + 1
    assert len(cost.tokens(cc.MAX_CHAIN + 10)) == cc.MAX_CHAIN + 1


def test_ms_before_any_round_is_the_cost_models_line():
    assert cc.ChainCost().ms(FIT, 3) == pytest.approx(LINE)


def test_time_round_without_a_fit_sets_the_depths_mean_and_the_price_halves_toward_it():
    cost = cc.ChainCost()
    cost.time_round(2, 30.0, None)
    assert cost.load == 1.0 and cost.depth_rounds[2] == 1 and cost.depth_ms[2] == 30.0
    assert cost.price(FIT, 2) == pytest.approx((30.0 + LINE[2]) / 2)
    cost.time_round(2, 120.0, None)  # a geometric mean of 30 and 120
    assert cost.depth_ms[2] == pytest.approx(60.0)
    assert cost.price(FIT, 2) == pytest.approx((2 * 60.0 + LINE[2]) / 3)


def test_time_round_with_a_fit_moves_the_load_by_a_clamped_ratio():
    cost = cc.ChainCost()
    cost.time_round(0, 48.0, FIT)  # four times its price 12: counts as twice
    load = 2.0 ** (1 / cc.LOAD_WINDOW)
    assert cost.load == pytest.approx(load)
    assert cost.depth_ms[0] == pytest.approx(24.0 / load)
    # The load carries the depth's mean into every price, a depth's own rounds or not.
    assert cost.price(FIT, 0) == pytest.approx((load * 24.0 / load + LINE[0]) / 2)
    cost.time_round(1, 1.0, FIT)  # far under its price 15.5: counts as half
    assert cost.load == pytest.approx(load * 0.5 ** (1 / cc.LOAD_WINDOW))


def test_a_depths_mean_remembers_at_most_its_window():
    cost = cc.ChainCost()
    for _ in range(cc.SHAPE_WINDOW + 3):
        cost.time_round(1, 10.0, None)
    assert cost.depth_rounds[1] == cc.SHAPE_WINDOW and cost.depth_ms[1] == pytest.approx(10.0)


def test_best_depth_takes_the_best_tokens_per_ms():
    # Before any chain: rates 1/12, 1.5/15.5, 1.75/18.5, 1.875/21.5; depth 1 is best.
    cost = cc.ChainCost()
    assert cost.best_depth(FIT, 3) == 1
    # Chains that always reach their depth make the deepest one best.
    for _ in range(20):
        cost.learn([1.0, 1.0, 1.0, 1.0])
    assert cost.best_depth(FIT, 3) == 3
    assert cost.best_depth(FIT, 2) == 2
    # Chains that never get a token make a plain step best.
    bad = cc.ChainCost()
    for _ in range(20):
        bad.learn([1.0, 0.0, 0.0, 0.0])
    assert bad.best_depth(FIT, 3) == 0


@pytest.mark.parametrize("rounds,want", [(1, 1), (3, 1), (4, 2), (8, 0), (12, 2), (13, 1)])
def test_depth_explores_up_then_down_every_explore_th_round(rounds, want):
    assert cc.EXPLORE == 4
    assert cc.ChainCost().depth(FIT, 3, rounds) == want


def test_depth_exploring_stays_within_zero_and_max_depth():
    cost = cc.ChainCost()
    assert cost.depth(FIT, 1, 4) == 1  # best 1, one deeper is past max_depth 1
    bad = cc.ChainCost()
    for _ in range(20):
        bad.learn([1.0, 0.0])
    assert bad.depth(FIT, 3, 8) == 0  # best 0, one shallower is not a depth
