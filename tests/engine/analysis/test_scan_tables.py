"""A scan's tables (analysis/scan_tables.py) built from hand-made scan numbers: which columns show, which value each
cell takes, where the by-depth tables stop, and how the worst rounds' heading reads."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tevviz.engine.analysis import scan_tables as st
from tevviz.engine.analysis.scan_stats import GroupComparison, GroupStats, MissedToken, RoundLoss, ScanSummary
from tevviz.engine.analysis.stats import Estimate, PairedDiff
from tevviz.engine.records.round_numbers import SCAN

NONE = Estimate(None, None, 0)


def group(name, metrics=None, seconds=2.0, tokens=50, conditional=(), marginal=(), expected=(), width=(), leaf=()):
    """A GroupStats with every scan metric (unmeasured ones as n = 0) and the by-depth lists given."""
    every = {n.scan: NONE for n in SCAN} | (metrics or {})
    return GroupStats(name=name, prompts=3, rounds=12, tokens=tokens, seconds=seconds, metrics=every,
                      acceptance_conditional=list(conditional), acceptance_marginal=list(marginal), width=list(width),
                      leaf=list(leaf), lengths={}, acceptance_expected=list(expected))


def keys(table) -> list[str]:
    return [c.key for c in table.columns]


def test_the_category_table_shows_the_numbers_some_category_measured():
    tau_a, tau_b, el = Estimate(2.5, 0.1, 3), Estimate(1.5, 0.2, 3), Estimate(2.4, 0.1, 3)
    groups = {"all": group("all", {"tau": tau_a, "expected_length": el}),
              # gap measured by one category only: the column shows, and the other's cell is its empty estimate
              "code": group("code", {"tau": tau_b, "gap": Estimate(0.3, 0.05, 2)}, seconds=0.0)}
    t = st.category_table(groups)
    assert keys(t) == ["category", "prompts", "rounds", "L", "expected_length", "gap", "tokens_per_s"]
    assert [c.heading for c in t.columns[3:6]] == ["tau", "mean E[L]", "mean drafter gap"]
    all_, code = t.rows
    assert (all_["category"], all_["prompts"], all_["rounds"]) == ("all", 3, 12)
    assert all_["L"] is tau_a and all_["expected_length"] is el and all_["gap"] is NONE
    assert code["L"] is tau_b and code["expected_length"] is NONE
    assert all_["tokens_per_s"] == pytest.approx(25.0) and code["tokens_per_s"] is None  # no wall time, no rate
    assert t.notes == (st.ESTIMATES_NOTE,) and t.id == "categories"


def test_the_acceptance_table_reads_each_depth_as_conditional_marginal_exact():
    groups = {"all": group("all", conditional=[0.8, 0.5, 0.4], marginal=[0.8, 0.4, 0.16], expected=[0.7, 0.3]),
              "short": group("short", conditional=[0.6], marginal=[0.6])}
    t = st.acceptance_table(groups)
    assert keys(t) == ["category", "d1", "d2", "d3"] and t.columns[1].kind == "split"
    deep, short = t.rows
    # The exact curve stops a depth early: its cell there is None, the counted ones stay.
    assert (deep["d1"], deep["d2"], deep["d3"]) == ((0.8, 0.8, 0.7), (0.5, 0.4, 0.3), (0.4, 0.16, None))
    assert short["d1"] == (0.6, 0.6, None) and short["d2"] is None and short["d3"] is None


def test_the_by_depth_tables_stop_at_the_depths_shown():
    deep = [0.5] * (st.DEPTHS_SHOWN + 5)
    groups = {"all": group("all", conditional=deep, marginal=deep, width=deep, leaf=deep)}
    assert keys(st.acceptance_table(groups))[-1] == f"d{st.DEPTHS_SHOWN}"
    assert len(st.acceptance_table(groups).columns) == 1 + st.DEPTHS_SHOWN
    # the loss table starts at the root's depth 0, so it shows one column more
    assert keys(st.loss_table(groups))[2:] == [f"d{d}" for d in range(st.DEPTHS_SHOWN + 1)]
    assert keys(st.acceptance_table({})) == ["category"]  # no groups: no depth columns


def test_the_loss_table_has_a_width_and_a_leaf_row_per_category():
    groups = {"all": group("all", width=[0.1, 0.2], leaf=[0.0, 0.05, 0.3]),
              "x": group("x", width=[0.4], leaf=[0.5])}
    t = st.loss_table(groups)
    assert keys(t) == ["category", "exits", "d0", "d1"]  # as deep as the deepest width list
    assert [(r["category"], r["exits"], r["d0"], r["d1"]) for r in t.rows] == [
        ("all", "width", 0.1, 0.2), ("all", "leaf", 0.0, 0.05), ("x", "width", 0.4, None), ("x", "leaf", 0.5, None)]


def summary(missed=(), worst=(), rounds=(10, 30)):
    prompts = [SimpleNamespace(rounds=n) for n in rounds]
    return ScanSummary(groups={}, missed=list(missed), worst=list(worst), prompts=prompts)


def test_the_missed_tokens_share_is_of_every_round_of_the_scan():
    missed = [MissedToken(7, "a b", 8, 1.25), MissedToken(3, "\n", 2, 0.5), MissedToken(9, "z", 1, 0.1)]
    t = st.missed_table(summary(missed), top=2)
    assert [r["id"] for r in t.rows] == [7, 3]  # the first `top`, in the order given
    assert t.rows[0] == {"token": "'a b'", "id": 7, "rounds": 8, "share": 0.2, "mass": 1.25}
    assert t.rows[1]["token"] == r"'\n'" and t.rows[1]["share"] == pytest.approx(0.05)
    # a scan without rounds divides by 1, not by 0
    assert st.missed_table(summary(missed, rounds=()), top=1).rows[0]["share"] == 8


def loss(lost, lost_as="gap", C_p_star=2.0, prompt="p1"):
    return RoundLoss(prompt=prompt, category="code", round=4, lost=lost, C_p=1.5, C_p_star=C_p_star, L=2, size=9,
                     line=17, lost_as=lost_as)


def test_the_worst_rounds_heading_names_what_they_lost():
    gap, short = loss(0.5), loss(3.0, "shortfall", None)
    assert st.worst_heading([gap]) == "lost: the drafter gap C_p* - C_p"
    assert st.worst_heading([short, short]) == "lost: H - C_p, the tree's depth less its coverage"
    both = st.worst_heading([short, gap])
    assert both.startswith("lost: the drafter gap C_p* - C_p where the optimal tree bounds the round, else H - C_p")
    assert st.worst_heading([]) == "lost"


def test_the_worst_table_writes_ceilings_as_block_lengths():
    t = st.worst_table(summary(worst=[loss(0.5), loss(3.0, "shortfall", None, "p2"), loss(0.1)]), top=2)
    assert len(t.rows) == 2
    a, b = t.rows
    assert a == {"prompt": "p1", "category": "code", "round": 4, "lost": 0.5, "lost_is": "drafter gap",
                 "ceiling": 2.5, "optimal": 3.0, "L": 2, "nodes": 9}
    assert b["lost_is"] == "H - C_p" and b["optimal"] is None and b["ceiling"] == 2.5
    # the heading reads every worst round, not only the `top` shown
    assert t.title == ("rounds that lost most (lost: the drafter gap C_p* - C_p where the optimal tree bounds the "
                       "round, else H - C_p, the tree's depth less its coverage)")


def paired(mean, n=4, a=1.0):
    return PairedDiff(mean, 0.1, n, a, None if mean is None else a + mean)


def comparison(name, metrics, **depths):
    every = {n.scan: PairedDiff(None, None, 0, None, None) for n in SCAN} | metrics
    lists = {k: depths.get(k, []) for k in ("acceptance_conditional", "acceptance_marginal", "width", "leaf")}
    return GroupComparison(name=name, metrics=every, **lists)


def test_the_paired_table_gives_as_mean_and_b_minus_a_per_number():
    tau, gap = paired(0.25, n=5, a=2.0), paired(-0.1, n=3, a=0.4)
    result = SimpleNamespace(groups={"all": comparison("all", {"tau": tau, "gap": gap})})
    t = st.paired_table(result)
    assert keys(t) == ["category", "paired", "L_a", "L_d", "gap_a", "gap_d"]
    assert [c.heading for c in t.columns[2:]] == ["tau A", "B - A", "mean drafter gap A", "B - A"]
    (row,) = t.rows
    # the prompts paired are tau's: every paired prompt has a tau
    assert row == {"category": "all", "paired": 5, "L_a": 2.0, "L_d": tau, "gap_a": 0.4, "gap_d": gap}


@pytest.mark.parametrize("kind, first", [("acceptance_marginal", 1), ("acceptance_conditional", 1), ("width", 0),
                                         ("leaf", 0)])
def test_the_paired_depth_table_numbers_acceptance_from_1_and_exit_mass_from_0(kind, first):
    d0, d1 = paired(0.1), paired(-0.2)
    result = SimpleNamespace(groups={"all": comparison("all", {}, **{kind: [d0, d1]}),
                                     "x": comparison("x", {}, **{kind: [d0]})})
    t = st.paired_depth_table(result, kind)
    assert keys(t) == ["category", f"d{first}", f"d{first + 1}"]
    assert [(r[f"d{first}"], r[f"d{first + 1}"]) for r in t.rows] == [(d0, d1), (d0, None)]
    assert t.title == st.PAIRED_DEPTH_TITLES[kind] and t.id == f"paired-{kind.replace('_', '-')}"
