"""Acceptance by depth, counted and exact (RoundRecord.reach_by_depth, summary.DepthAcceptance): the target's
probability of reaching each depth of a tree, worked by hand, and what decode, eval and scan say of it."""

from __future__ import annotations

import dataclasses
import math

import pytest
from _cli import DECODE, run_json
from test_render import ROUNDS, SMALL, SMALL_PARENTS, make_round

from tevviz.engine.analysis.scan_stats import group_stats, prompt_stats
from tevviz.engine.analysis.summary import acceptance_curves
from tevviz.engine.records.records import OptimalTree, RoundRecord

# SMALL: root -> {1, 2} with p_edge 0.6, 0.3; 1 -> {3, 4} with 0.6, 0.3; 2 -> {5} and 5 -> {6} with 0.9.
# P: depth 1 0.6 + 0.3; depth 2 0.36 + 0.18 + 0.27; depth 3 0.27 * 0.9.
SMALL_REACH = [0.9, 0.81, 0.243]


def test_reach_by_depth_by_hand():
    r = RoundRecord.from_dict(SMALL)
    assert r.reach_by_depth() == pytest.approx(SMALL_REACH)
    assert sum(r.reach_by_depth()) == pytest.approx(sum(p for p in r.P[1:]))  # = C_p: E[L] - 1
    assert RoundRecord.from_dict(make_round(SMALL_PARENTS, accepted=[0], scored=False)).reach_by_depth() is None


def test_a_sampled_chain_reaches_by_its_acceptance():
    # A chain under speculative sampling accepts node v with min(1, p / q) once its parent is: 0.5, then 0.4, then 1.
    chain = RoundRecord.unscored(0, "speculative", [1, 2, 3, 4], [-1, 0, 1, 2], [0, 1, 2, 3])
    chain = dataclasses.replace(chain, accept=[1.0, 0.5, 0.4, 1.0])
    assert chain.reach_by_depth() == pytest.approx([0.5, 0.2, 0.2])
    assert chain.expected_length == pytest.approx(1 + 0.9)


def test_curves_carry_both_counted_and_exact_with_standard_errors():
    rounds = [RoundRecord.from_dict(r) for r in ROUNDS]  # paths reach depths 3, 1 and 0
    d1, d2, d3 = acceptance_curves(rounds)
    assert (d1.reached, d1.rounds) == (2, 3)
    assert d1.marginal_se == pytest.approx(math.sqrt(2 * 1 / (9 * 2)))  # 2 of 3: sqrt(p (1 - p) / (n - 1))
    assert d3.conditional == 1 and d3.conditional_se is None  # 1 of 1: no spread to estimate
    assert d1.expected == pytest.approx(0.9) and d2.expected == pytest.approx(2 * 0.81 / 3)
    assert d1.optimal is None  # no round has an optimal tree
    row = d2.to_dict()
    assert {"conditional", "conditional_se", "marginal", "marginal_se", "expected", "optimal"} <= set(row)


def test_optimal_trees_per_depth_where_every_round_has_one():
    # An optimal chain of two: P 0.95, then 0.9 -> 0.95 at depth 1, 0.9 at depth 2 (C_p* = 1.85).
    opt = OptimalTree(tokens=[0, 1, 2], texts=["", "a", "b"], parents=[-1, 0, 1], depths=[0, 1, 2],
                      P=[1.0, 0.95, 0.9], budget=2, depth=2)
    assert opt.reach_by_depth() == pytest.approx([0.95, 0.9]) and sum(opt.reach_by_depth()) == pytest.approx(opt.C_p)
    r = dataclasses.replace(RoundRecord.from_dict(SMALL), optimal=opt)
    curves = acceptance_curves([r, r])
    assert [a.optimal for a in curves] == pytest.approx([0.95, 0.9, 0.0])
    assert acceptance_curves([r, RoundRecord.from_dict(SMALL)])[0].optimal is None  # one round without


def test_scan_groups_pool_the_exact_reach_over_rounds():
    rounds = [RoundRecord.from_dict(r) for r in ROUNDS]
    a = prompt_stats("a", "x", 0, rounds[:2], 1.0)  # two rounds of SMALL's tree
    b = prompt_stats("b", "x", 1, rounds[2:], 1.0)  # one round of a single child, P 0.9
    assert a.expected == pytest.approx([1.8, 1.62, 0.486]) and a.exact_rounds == 2
    g = group_stats("x", [a, b])
    assert g.acceptance_expected == pytest.approx([2.7 / 3, 1.62 / 3, 0.486 / 3])
    assert g.to_dict()["acceptance_expected"] == g.acceptance_expected


def test_decode_json_and_text_show_both(capsys):
    out = run_json([*DECODE, "--builder", "best-first", "--verifier", "tev", "--temperature", "1", "--seed", "3"],
                   capsys)
    rows = out["acceptance_by_depth"]
    assert [r["depth"] for r in rows] == list(range(1, len(rows) + 1))
    # the exact reach sums to the session's mean E[L] - 1; the counted marginal to tau - 1 (docs/math.md)
    assert sum(r["expected"] for r in rows) == pytest.approx(out["mean_expected_length"] - 1)
    assert sum(r["marginal"] for r in rows) == pytest.approx(out["tau"] - 1)
    from tevviz.cli import main

    assert main([a for a in DECODE if a != "--json"]) == 0
    assert "as shares of the rounds that got to d - 1 / of all rounds, then the share expected" in \
        capsys.readouterr().err
