"""A session's summary and round tables (engine/analysis/session_tables.py) on hand-made rounds: every cell as the
report and `tevviz inspect` write it, the means some rounds lack saying over how many rounds they are, and a number
added to the registry reaching both tables."""

from __future__ import annotations

import dataclasses

from conftest import scored_round as scored

from tevviz.engine.analysis.session_tables import rounds_table, summary_table
from tevviz.engine.records.records import OptimalTree, RoundRecord
from tevviz.engine.records.round_numbers import NUMBERS, RoundNumber
from tevviz.render.table import html, rows

CHAIN = [-1, 0, 1]
FORK = [-1, 0, 0, 1]
STAGES_MS = {"draft": 2.0, "target": 6.0, "verify": 1.0, "other": 1.0}


def best_tree() -> OptimalTree:
    """An optimal chain of C_p* 0.9 + 0.7 = 1.6."""
    return OptimalTree(tokens=[10, 11, 13], texts=["", "", ""], parents=CHAIN, depths=[0, 1, 2], P=[1.0, 0.9, 0.7],
                       budget=2, depth=2, ms=5.0)


def hand_rounds() -> list[RoundRecord]:
    """A chain with stage times and an optimal tree of C_p* 1.6 (C_p 1.2: gap 0.4); a fork, C_p 1.2, neither; an
    unscored imported tree exiting at depth 1."""
    return [scored(0, CHAIN, [1.0, 0.8, 0.4], 2, optimal=best_tree(), stage_ms=STAGES_MS),
            scored(1, FORK, [1.0, 0.6, 0.3, 0.3], 3),
            RoundRecord.unscored(2, "ddtree-trace", [1, 2, 3], [-1, 0, 0], [0, 1, 1], exit_node=1)]


def cells(table) -> list[dict[str, str]]:
    """Each row's cells as render/table.py writes them, by heading."""
    heads, body = rows(table)
    return [dict(zip(heads, row)) for row in body]


def test_summary_of_hand_rounds():
    table = summary_table(hand_rounds())
    assert table.id == "summary" and [c.key for c in table.columns] == [
        "rounds", "tokens", "L", "expected_length", "optimal_ceiling", "gap", "optimal_ms", "tokens_per_s"]
    # 3 + 3 + 2 tokens; tau (3 + 3 + 2) / 3; E[L] 1 + 1.2 on both scored rounds; 3 tokens in 10 ms of stage time.
    assert cells(table) == [{
        "rounds": "3", "tokens": "8", "tau": "2.667", "mean E[L] (2 of 3 rounds)": "2.200",
        "mean 1 + C_p* (1 of 3 rounds)": "2.600", "mean drafter gap (1 of 3 rounds)": "0.400",
        "mean optimal ms (1 of 3 rounds)": "5", "tokens/s": "300.0"}]
    assert table.rows[0]["tokens_per_s"] == 300.0 and isinstance(table.rows[0]["tokens"], int)
    assert table.notes[0] == ("tokens: tokens the round appended to the stream: its block, cut at EOS or the token "
                              "limit (the sum of the values defined over the rounds)")
    assert table.notes[1] == ("tau: L, block length: accepted draft tokens plus the bonus token, d(exit) + 1 (the mean "
                              "of the values defined over the rounds)")
    assert table.notes[-1].startswith("tokens/s: tokens committed per second") and "(a ratio of sums" in table.notes[-1]
    assert len(table.notes) == len(table.columns) - 1  # every number but the count of rounds is defined


def test_summary_leaves_out_the_optimal_tree_and_the_speed_where_no_round_has_them():
    table = summary_table(hand_rounds()[1:])
    assert cells(table) == [{"rounds": "2", "tokens": "5", "tau": "2.500", "mean E[L] (1 of 2 rounds)": "2.200"}]


def test_summary_of_rounds_without_scores_and_of_none():
    assert cells(summary_table(hand_rounds()[2:])) == [
        {"rounds": "1", "tokens": "2", "tau": "2.000", "mean E[L] (no target scores)": "—"}]
    assert cells(summary_table([])) == [{"rounds": "0", "tokens": "0", "tau": "—", "mean E[L]": "—"}]


def test_rounds_of_hand_rounds():
    table = rounds_table(hand_rounds())
    assert table.id == "rounds" and [c.heading for c in table.columns] == [
        "round", "exit node", "nodes", "depth", "L", "E[L]", "1 + C_p*", "drafter gap", "stage ms"]
    assert [list(c.values()) for c in cells(table)] == [
        ["0", "2", "3", "2", "3", "2.200", "2.600", "0.400", "10.0"],
        ["1", "3", "4", "2", "3", "2.200", "—", "—", "—"],
        ["2", "1", "3", "1", "2", "—", "—", "—", "—"]]
    assert table.notes[0] == "exit node: the node where verification stopped"
    assert "drafter gap: C_p* - C_p, the expected block length the drafter lost at its budget; undefined where C_p* " \
           "bounds nothing (a speculative chain)" in table.notes
    assert rounds_table([]).rows == ()


def speculative_chain(index: int) -> RoundRecord:
    """A sampled chain under speculative sampling (`accept` set), exiting at depth 1, with the optimal tree above:
    1 + C_p* is no ceiling on it."""
    return dataclasses.replace(scored(index, CHAIN, [1.0, 0.5, 0.25], 1, optimal=best_tree()),
                               verifier="speculative", accept=[1.0, 0.9, 0.5])


def test_the_rounds_table_marks_the_rounds_whose_optimal_tree_is_no_ceiling():
    # Every optimal tree of the hand rounds bounds its round: no note column. The report and inspect share the table.
    assert "note" not in [c.key for c in rounds_table(hand_rounds()).columns]
    table = rounds_table([*hand_rounds()[:2], speculative_chain(3)])
    assert [c.heading for c in table.columns][-2:] == ["stage ms", "note"] and table.columns[-1].kind == "text"
    # the chain: E[L] 1 + 0.9 + 0.9 x 0.5 = 2.35, 1 + C_p* 2.6 but no drafter gap; the other rounds unmarked
    assert [list(c.values()) for c in cells(table)] == [
        ["0", "2", "3", "2", "3", "2.200", "2.600", "0.400", "10.0", ""],
        ["1", "3", "4", "2", "3", "2.200", "—", "—", "—", ""],
        ["3", "1", "3", "2", "2", "2.350", "2.600", "—", "—", "best fixed tree, not a ceiling"]]
    assert table.notes == rounds_table(hand_rounds()).notes and table.id == "rounds"


def test_the_html_is_the_generic_tables():
    page = html(summary_table(hand_rounds()), titled=False)
    assert page.startswith('<table class="rounds" id="summary"><tr><th>rounds</th><th>tokens</th><th>tau</th>')
    assert "<tr><td>3</td><td>8</td><td>2.667</td>" in page and '<p class="note">tau: L, block length' in page
    assert "<tr><td>2</td><td>1</td><td>3</td><td>1</td><td>2</td><td>—</td>" in html(rounds_table(hand_rounds()))


def test_a_number_added_to_the_registry_reaches_both(monkeypatch):
    probe = RoundNumber("probe", "probe L", "the block length plus a quarter, a number no table knows by name",
                        "tokens", lambda r: r.block_length + 0.25, session="mean_probe", column=True)
    monkeypatch.setitem(NUMBERS, probe.name, probe)
    rounds = hand_rounds()
    assert cells(summary_table(rounds))[0]["mean probe L"] == "2.917"  # (3.25 + 3.25 + 2.25) / 3
    assert [c["probe L"] for c in cells(rounds_table(rounds))] == ["3.250", "3.250", "2.250"]
    assert "probe L: the block length plus a quarter, a number no table knows by name" in rounds_table(rounds).notes
