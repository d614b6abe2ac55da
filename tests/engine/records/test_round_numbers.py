"""The per-round numbers' registry (engine/records/round_numbers.py): every number is defined, reads its hand-computed
value on hand-made rounds, adds up over rounds and prompts as it declares, and every surface (the session summary, the
scan statistics, tevviz inspect's JSON and text, the report, the app's statistics) shows the same numbers; `tevviz scan`
with speculative chains and optimal trees (whose rounds have no drafter gap) runs to its tables."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest
from conftest import scored_round as scored

from tevviz.engine.analysis.scan_stats import ScanAccumulator, group_stats, prompt_stats
from tevviz.engine.analysis.summary import summarize
from tevviz.engine.records.records import STAGES, OptimalTree, RoundRecord
from tevviz.engine.records.round_numbers import (
    COLUMNS,
    MEAN,
    NUMBERS,
    RATIO,
    SCAN,
    SESSION,
    SUM,
    numbers_over,
    pool,
    round_row,
)
from tevviz.engine.records.round_time import Fit, RoundSizing

CHAIN = [-1, 0, 1]
FORK = [-1, 0, 0, 1]
FIT = Fit(target_fixed=1.0, target_per_token=0.1, draft_level=0.5, overhead=0.1, calibration=1.0, rounds=1, plain=1.0)



def optimal(tokens, P, ms) -> OptimalTree:
    return OptimalTree(tokens=tokens, texts=[""] * len(tokens), parents=CHAIN[:len(tokens)],
                       depths=list(range(len(tokens))), P=P, budget=len(tokens) - 1, depth=len(tokens) - 1, ms=ms)


def sized(B, H, drafted, chain) -> RoundSizing:
    rates = {} if chain is None else {"tree_rate": 0.1, "chain_rate": 0.2}  # the mixed builder's arms
    return RoundSizing(B=B, H=H, warmup=False, drafted=drafted, fit=FIT, chain=chain, **rates)


def hand_rounds() -> list[RoundRecord]:
    """Five rounds that between them leave every number undefined somewhere: a TEV chain with an optimal tree that
    holds one of its two nodes; a fork, no stage times; a speculative chain (`accept`) whose optimal tree bounds
    nothing; an unscored imported tree; a plain target step sized by --budget auto."""
    miss = [[{"token_id": 7, "text": "x", "gain": 0.3}], [{"token_id": 8, "text": "y", "gain": 0.1}], []]
    r0 = scored(0, CHAIN, [1.0, 0.8, 0.4], 2, missing=miss, optimal=optimal([10, 11, 13], [1.0, 0.9, 0.7], 5.0),
                stage_ms={"draft": 2.0, "target": 6.0, "verify": 1.0, "other": 1.0})
    r1 = scored(1, FORK, [1.0, 0.6, 0.3, 0.3], 3, sizing=sized(3, 2, True, False))
    r2 = dataclasses.replace(
        scored(2, CHAIN, [1.0, 0.5, 0.25], 1, optimal=optimal([10, 11, 12], [1.0, 0.6, 0.3], 3.0),
               stage_ms={"draft": 1.0, "target": 3.0, "verify": 0.5, "other": 0.5}, sizing=sized(2, 2, True, True)),
        verifier="speculative", accept=[1.0, 0.9, 0.5])
    r3 = RoundRecord.unscored(3, "ddtree-trace", [1, 2, 3], [-1, 0, 0], [0, 1, 1], exit_node=1)
    r4 = scored(4, [-1], [1.0], 0, stage_ms={"draft": 0.0, "target": 4.0, "verify": 0.0, "other": 1.0},
                sizing=sized(0, 0, False, False))
    return [r0, r1, r2, r3, r4]


N = None
# Each number's value on each hand round, worked out by hand from the rounds above (docs/math.md).
PER_ROUND = {
    "nodes": [3, 4, 3, 3, 1],
    "depth": [2, 2, 2, 1, 0],
    "L": [3, 3, 2, 2, 1],
    "tokens": [3, 3, 2, 2, 1],
    "expected_length": [2.2, 2.2, 1 + 0.9 + 0.9 * 0.5, N, 1.0],  # 1 + C_p; the chain: 1 + the reach of `accept`
    "C_p": [1.2, 1.2, 0.75, N, 0.0],
    "shortfall": [2 - 1.2, 2 - 1.2, 2 - 0.75, N, 0.0],
    "width_exit": [0.2 + 0.4, 0.1 + 0.3, 0.5 + 0.25, N, 0.0],  # w at nodes with children
    "leaf_exit": [0.4, 0.3 + 0.3, 0.25, N, 1.0],
    "best_missing": [0.3, N, N, N, N],
    "C_p_star": [1.6, N, 0.9, N, N],
    "optimal_ceiling": [2.6, N, 1.9, N, N],
    "gap": [1.6 - 1.2, N, N, N, N],  # the chain's optimal tree bounds nothing
    "held": [0.9 / 1.6, N, 1.0, N, N],  # r0's draft lacks the optimal tree's token 13
    "optimal_ms": [5.0, N, 3.0, N, N],
    "draft_ms": [2.0, N, 1.0, N, 0.0],
    "target_ms": [6.0, N, 3.0, N, 4.0],
    "verify_ms": [1.0, N, 0.5, N, 0.0],
    "other_ms": [1.0, N, 0.5, N, 1.0],
    "ms": [10.0, N, 5.0, N, 5.0],
    "tokens_per_s": [300.0, N, 400.0, N, 200.0],
    "sized_B": [N, 3, 2, N, 0],
    "sized_H": [N, 2, 2, N, 0],
    "undrafted": [N, 0, 0, N, 1],
    "chain": [N, 0, 1, N, 0],
}
# Each number over the five rounds, by hand: a mean of the values defined, a sum, or (tokens/s) a ratio of sums,
# which is not the mean of the per-round ratios (300, 400, 200).
OVER = {
    "nodes": 14 / 5, "depth": 7 / 5, "L": 11 / 5, "tokens": 11, "expected_length": (4.4 + 2.35 + 1) / 4,
    "C_p": 3.15 / 4, "shortfall": 2.85 / 4, "width_exit": 1.75 / 4, "leaf_exit": 2.25 / 4, "best_missing": 0.3,
    "C_p_star": 1.25, "optimal_ceiling": 2.25, "gap": 0.4, "held": (0.5625 + 1) / 2, "optimal_ms": 4.0,
    "draft_ms": 3.0, "target_ms": 13.0, "verify_ms": 1.5, "other_ms": 2.5, "ms": 20.0,
    "tokens_per_s": (3 + 2 + 1) / 20 * 1e3, "sized_B": 5 / 3, "sized_H": 4 / 3, "undrafted": 1, "chain": 1,
}


def test_every_number_is_defined_and_has_its_hand_computed_values():
    assert set(NUMBERS) == set(PER_ROUND) == set(OVER), "a new number needs its values by hand in this file"
    for key in ("session", "scan"):
        keys = [getattr(n, key) for n in NUMBERS.values() if getattr(n, key)]
        assert len(keys) == len(set(keys)), f"two numbers share a {key} key"
    for n in NUMBERS.values():
        assert n.label and n.unit and len(n.definition) > 20 and "\n" not in n.definition, n.name
        assert n.over_rounds in (MEAN, SUM, RATIO) and n.over_prompts in (MEAN, SUM, RATIO), n.name
        if n.over_rounds == RATIO:  # a ratio of two registered sums
            assert n.read is None and all(NUMBERS[k].over_rounds == SUM for k in n.ratio[:2]), n.name
        else:
            assert n.read is not None and n.ratio is None, n.name
        if n.scan:  # the scan's tables estimate a mean over prompts with its standard error
            assert n.over_prompts == MEAN and n.over_rounds == MEAN, n.name


def test_each_number_reads_its_value_on_each_round():
    rounds = hand_rounds()
    for name, expected in PER_ROUND.items():
        got = [NUMBERS[name].value(r) for r in rounds]
        assert [g is None for g in got] == [e is None for e in expected], name
        assert [g for g in got if g is not None] == pytest.approx([e for e in expected if e is not None]), name
        if NUMBERS[name].whole:
            assert all(type(g) is int for g in got if g is not None), name


def test_a_number_that_needs_the_optimal_tree_is_undefined_without_it_and_the_rest_do_not_read_it():
    rounds = hand_rounds()
    bare = [dataclasses.replace(r, optimal=None) for r in rounds]
    for n in NUMBERS.values():
        if n.needs_optimal:
            assert all(n.value(r) is None for r in bare), n.name
        else:
            assert [n.value(r) for r in bare] == [n.value(r) for r in rounds], n.name


def test_each_number_adds_up_over_rounds_as_declared():
    rounds = hand_rounds()
    over = numbers_over(rounds)
    for name, value in OVER.items():
        assert over[name] == pytest.approx(value), name
        n = NUMBERS[name]
        if n.over_rounds == MEAN:  # undefined rounds are left out, not counted as 0
            defined = [x for x in PER_ROUND[name] if x is not None]
            assert n.defined(rounds) == len(defined) and value == pytest.approx(sum(defined) / len(defined)), name
    alone = numbers_over(rounds[3:4])  # the unscored round: a mean of nothing is undefined, a sum of nothing 0
    assert all(alone[k] is None for k, v in PER_ROUND.items() if v[3] is None and NUMBERS[k].over_rounds != SUM)
    assert all(alone[k] == 0 for k, v in PER_ROUND.items() if v[3] is None and NUMBERS[k].over_rounds == SUM)


def test_each_number_adds_up_over_prompts_as_declared():
    """Two prompts: rounds 0-1 and rounds 2-4. A mean over prompts is the mean of each prompt's value, which is not
    the mean over rounds (tau: (3 + 5/3) / 2 against 11/5)."""
    rounds = hand_rounds()
    prompts = [rounds[:2], rounds[2:]]
    assert NUMBERS["L"].over_prompt_rounds(prompts) == pytest.approx((3 + 5 / 3) / 2)
    assert NUMBERS["tokens"].over_prompt_rounds(prompts) == 11
    assert NUMBERS["tokens_per_s"].over_prompt_rounds(prompts) == pytest.approx(300.0)
    assert NUMBERS["gap"].over_prompt_rounds(prompts) == pytest.approx(0.4)  # the second prompt has none
    for n in NUMBERS.values():
        each = [n.over(p) for p in prompts]
        kept = [x for x in each if x is not None]
        if n.over_prompts == MEAN:
            want = sum(kept) / len(kept) if kept else None
        elif n.over_prompts == SUM:
            want = sum(kept)
        else:
            want = n.over(rounds)  # a ratio of sums pools every round
            with pytest.raises(ValueError, match="ratio of sums"):
                pool(n, each)
        assert n.over_prompt_rounds(prompts) == pytest.approx(want), n.name


def test_undefined_values_are_left_out_by_construction():
    """The scan crash (a speculative chain's None drafter gap summed with the rest) cannot come back: every
    aggregate goes through the registry, which never adds an undefined value, whatever the mix of rounds."""
    rounds = hand_rounds()
    chains = [r for r in rounds if r.accept is not None] * 3
    s = summarize(chains)
    assert s.mean_gap is None and s.bounded_rounds == 0 and s.mean_optimal == pytest.approx(0.9)
    stats = prompt_stats("p", "c", 0, chains, 1.0)
    assert stats.gap is None and stats.optimal_ceiling == pytest.approx(1.9)
    group = group_stats("all", [stats, prompt_stats("q", "c", 1, rounds, 1.0)])
    assert group.gap.n == 1 and group.gap.mean == pytest.approx(0.4)


def test_the_summary_and_the_scan_statistics_agree():
    rounds = hand_rounds()
    s = summarize(rounds)
    assert s.numbers == numbers_over(rounds)
    assert (s.tau, s.mean_expected_length, s.tokens, s.mean_optimal, s.mean_gap) == pytest.approx(
        (OVER["L"], OVER["expected_length"], OVER["tokens"], OVER["C_p_star"], OVER["gap"]))
    assert s.stage_ms == pytest.approx({st: OVER[f"{st}_ms"] for st in STAGES})
    assert (s.optimal_rounds, s.bounded_rounds) == (2, 1)
    assert s.session_values() == pytest.approx({n.session: OVER[n.name] for n in SESSION})
    acc = ScanAccumulator(worst_k=5)
    p = acc.add("p", "c", 0, rounds, 1.0)
    assert p.metrics == pytest.approx({n.scan: OVER[n.name] for n in SCAN}) and p.tokens == s.tokens
    assert acc.summary().to_dict()["prompts"][0]["tau"] == pytest.approx(s.tau)
    # The worst rounds: the TEV chain lost its drafter gap, the speculative chain (no gap) its shortfall H - C_p.
    lost = {w.round: (w.lost_as, w.lost) for w in acc.worst()}
    assert lost[0] == ("gap", pytest.approx(0.4)) and lost[2] == ("shortfall", pytest.approx(1.25))
    assert 3 not in lost  # an unscored round loses nothing it can name


def test_inspect_the_report_and_the_app_show_the_summary_numbers(tmp_path, capsys):
    from tevviz.app.state import AppState
    from tevviz.app.views import stats_markdown
    from tevviz.cli import main
    from tevviz.engine.analysis.session_tables import summary_table
    from tevviz.engine.records import io as tio
    from tevviz.render.report import report_html
    from tevviz.render.table import html, rows
    from tevviz.render.table import text as table_text

    rounds = [r for r in hand_rounds() if r.C_p is not None]  # a session file's rounds are all scored or none
    path = tmp_path / "s.json"
    path.write_text(json.dumps(tio.session_dict({}, "p", [1], [], "", rounds)))
    s = summarize(tio.load(path).rounds)
    assert s.numbers == pytest.approx(numbers_over(rounds))
    assert main(["inspect", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["rounds"] == [pytest.approx(round_row(r)) for r in rounds]
    assert doc["summary"]["numbers"] == pytest.approx(s.numbers) and doc["summary"]["tau"] == pytest.approx(s.tau)
    assert main(["inspect", str(path)]) == 0
    text = capsys.readouterr().out.splitlines()
    summary = summary_table(tio.load(path).rounds)  # the report's summary, as it writes it
    assert text[1:1 + len(table_text(summary))] == table_text(summary)  # inspect's summary is the same table
    # below the summary, the rounds table's title and header: round 0 has every column number
    at = text.index("rounds")
    assert text[at + 2].split()[2:2 + len(COLUMNS)] == [n.text(n.value(rounds[0])) for n in COLUMNS]
    assert html(summary, titled=False) in report_html(tio.load(path))
    cells = dict(zip([c.key for c in summary.columns], rows(summary)[1][0]))
    assert {n.name: cells[n.name] for n in SESSION} == {n.name: n.text(s.numbers[n.name]) for n in SESSION}
    assert cells["tokens_per_s"] == NUMBERS["tokens_per_s"].text(s.numbers["tokens_per_s"])
    table = stats_markdown(AppState(origin="live", rounds=rounds, view=0))
    for n in SESSION:
        if not n.needs_optimal:
            assert f"| {n.text(s.numbers[n.name])} |" in table, n.name


def test_the_registry_needs_no_torch():
    code = ("import sys, tevviz.engine.records.round_numbers, tevviz.engine.analysis.summary, "
            "tevviz.engine.analysis.scan_stats; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_a_speculative_scan_with_optimal_trees_runs_through_tevviz_scan(tmp_path, capsys):
    """`tevviz scan P.jsonl --builder sampled --verifier speculative --temperature 1 --depth 4 --optimal` on the
    embedded pair: its chains' optimal trees bound nothing, so they have no drafter gap (summing those gaps ended in
    a TypeError); the scan prints its tables, and its numbers are the registry's over the records it wrote."""
    from tevviz.cli import main
    from tevviz.engine.records.io import parse_round
    from tevviz.engine.scan.scan_files import RECORDS

    prompts = tmp_path / "P.jsonl"
    prompts.write_text("".join(json.dumps({"id": i, "prompt": p}) + "\n" for i, p in
                               (("a", "def add(a, b):"), ("b", "import os\n"), ("c", "class Point:"))))
    flags = ["--builder", "sampled", "--verifier", "speculative", "--temperature", "1", "--depth", "4", "--optimal",
             "--budget", "4", "--max-new-tokens", "10", "--seed", "0", "--threads", "1", "--device", "cpu"]
    assert main(["scan", str(prompts), "-o", str(tmp_path / "scan"), *flags]) == 0
    heading = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("rounds that lost most"))
    assert main(["scan", "show", str(tmp_path / "scan"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)["summary"]
    lines = [json.loads(x) for x in (tmp_path / "scan" / RECORDS).read_text().splitlines()]
    rounds = {pid: [parse_round(d["round"]) for d in lines if d["type"] == "round" and d["prompt"] == pid]
              for pid in "abc"}
    chains = [r for rs in rounds.values() for r in rs if r.size > 1]
    assert chains and all(r.optimal is not None and r.accept is not None for r in chains), "test setup"
    assert all(NUMBERS["gap"].value(r) is None for r in chains)
    for p in out["prompts"]:
        for n in SCAN:
            assert p[n.scan] == pytest.approx(n.over(rounds[p["id"]])), (p["id"], n.name)
    group = out["groups"]["all"]
    for n in SCAN:
        assert group[n.scan]["mean"] == pytest.approx(n.over_prompt_rounds(list(rounds.values()))), n.name
    assert all(w["lost_as"] == "shortfall" and w["C_p_star"] is None for w in out["worst_rounds"] if w["size"] > 1)
    # The heading names what the rows are ranked by: H - C_p for the chains (the drafter gap only beside it).
    assert "H - C_p, the tree's depth less its coverage" in heading
    assert ("drafter gap" in heading) == any(w["lost_as"] == "gap" for w in out["worst_rounds"])
