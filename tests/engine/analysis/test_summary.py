"""A session's summary (analysis/summary.py) over hand-made scored rounds: acceptance by depth counted to a depth
asked for, the mean exit mass by depth over rounds of different depths, and the summary's dict-like access."""

from __future__ import annotations

import pytest
from conftest import scored_round

from tevviz.engine.analysis.summary import (
    DepthAcceptance,
    SessionSummary,
    acceptance_curves,
    drafted_flags,
    exit_by_depth,
    summarize,
)
from tevviz.engine.records.records import STAGES, RoundRecord

CHAIN, CHAIN_P = [-1, 0, 1, 2], [1.0, 0.8, 0.5, 0.2]  # w = 0.2, 0.3, 0.3 (internal), 0.2 (the leaf at depth 3)
FORK, FORK_P = [-1, 0, 0, 1], [1.0, 0.6, 0.3, 0.4]  # depths 0 1 1 2; w = 0.1, 0.2 | leaves 0.3 (d1), 0.4 (d2)


def test_counted_acceptance_goes_to_the_depth_asked_with_zeros_past_the_deepest_path():
    # paths accepted to depths 3, 1 and 0
    rounds = [scored_round(i, CHAIN, CHAIN_P, exit_node=e) for i, e in enumerate((3, 1, 0))]
    curves = acceptance_curves(rounds, depths=5)
    assert [(c.depth, c.reached, c.prior, c.rounds) for c in curves] == [
        (1, 2, 3, 3), (2, 1, 2, 3), (3, 1, 1, 3), (4, 0, 1, 3), (5, 0, 0, 3)]
    # conditional rises at d = 3 (the one round that got to 2 went on), the marginal never does
    assert [c.conditional for c in curves] == pytest.approx([2 / 3, 1 / 2, 1.0, 0.0, None])
    assert [c.marginal for c in curves] == pytest.approx([2 / 3, 1 / 3, 1 / 3, 0.0, 0.0])
    # every round has the same tree: exact reach is its P by depth, 0 past the tree
    assert [c.expected for c in curves] == pytest.approx([0.8, 0.5, 0.2, 0.0, 0.0])
    assert all(c.optimal is None for c in curves)
    assert [c.depth for c in acceptance_curves(rounds)] == [1, 2, 3]  # by default as deep as the deepest tree


def test_depth_acceptance_without_rounds_or_priors_is_undefined_not_zero():
    empty = DepthAcceptance(2, reached=0, prior=0, rounds=0)
    assert (empty.conditional, empty.marginal, empty.conditional_se, empty.marginal_se) == (None,) * 4
    assert acceptance_curves([]) == []
    d = DepthAcceptance(1, reached=1, prior=4, rounds=4).to_dict()
    assert d["conditional"] == d["marginal"] == 0.25
    assert d["conditional_se"] == pytest.approx((1 * 3 / (16 * 3)) ** 0.5)


def test_exit_mass_is_averaged_over_the_scored_rounds_with_zero_where_a_round_is_shallower():
    chain = scored_round(0, CHAIN, CHAIN_P, exit_node=3)
    fork = scored_round(1, FORK, FORK_P, exit_node=1)
    unscored = RoundRecord.unscored(2, "tev", [1, 2], [-1, 0], [0, 1], exit_node=1)
    split = exit_by_depth([chain, fork, unscored])
    assert split["rounds"] == 2  # the unscored round has no exit mass to average
    assert split["width"] == pytest.approx([(0.2 + 0.1) / 2, (0.3 + 0.2) / 2, 0.3 / 2, 0.0])
    assert split["leaf"] == pytest.approx([0.0, 0.3 / 2, 0.4 / 2, 0.2 / 2])
    assert exit_by_depth([unscored]) == {"width": [], "leaf": [], "rounds": 0}


def test_drafted_flags_mark_the_accepted_nodes_and_not_the_bonus():
    rounds = [scored_round(0, CHAIN, CHAIN_P, exit_node=2), scored_round(1, CHAIN, CHAIN_P, exit_node=0)]
    assert drafted_flags(rounds) == [True, True, False, False]


def test_the_summary_reads_like_the_dict_it_once_was():
    rounds = [scored_round(0, CHAIN, CHAIN_P, exit_node=3, stage_ms={"draft": 2.0}),
              scored_round(1, CHAIN, CHAIN_P, exit_node=1, stage_ms={"draft": 1.0})]
    s = summarize(rounds)
    assert s["tau"] == s.tau == pytest.approx((4 + 2) / 2) and s["rounds"] == 2 and s["tokens"] == 6
    assert s.stage_ms["draft"] == pytest.approx(3.0)  # stage times add up over rounds
    with pytest.raises(KeyError):
        s["to_dict"]  # a method is no summary field
    d = s.to_dict()
    d["stage_ms"]["draft"] = -1.0  # the dict is a copy: writing to it leaves the frozen summary as it was
    assert s.stage_ms["draft"] == pytest.approx(3.0)
    empty = SessionSummary()
    assert empty.rounds == 0 and empty.tau is None and empty.stage_ms == dict.fromkeys(STAGES, 0.0)
