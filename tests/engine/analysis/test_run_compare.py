"""Two runs compared round by round (engine/analysis/run_compare.py), on hand-made runs."""

from __future__ import annotations

import math

import pytest

from tevviz.engine.analysis.run_compare import (
    A_ONLY,
    B_ONLY,
    BOTH,
    Run,
    compare_runs,
    match_nodes,
    missing_table,
    missing_tokens,
    round_table,
)
from tevviz.engine.analysis.run_depths import depth_curves
from tevviz.engine.analysis.stats import share
from tevviz.engine.errors import TevvizError
from tevviz.engine.records.records import RoundRecord, tree_depths


def rec(index: int, tokens: list[int], parents: list[int], exit_node: int, bonus: int, C_p: float | None = None,
        missing: dict[int, list[tuple[int, float]]] | None = None, committed: list[int] | None = None) -> RoundRecord:
    """A round with token texts "t<id>", exiting at `exit_node` with bonus token `bonus`."""
    n = len(tokens)
    r = RoundRecord.unscored(index, "tev", tokens, parents, tree_depths(parents), texts=[f"t{t}" for t in tokens],
                             exit_node=exit_node, bonus_token=bonus)
    accepted_tokens = [tokens[v] for v in r.accepted[1:]]
    rows = [[{"token_id": t, "text": f"t{t}", "gain": g} for t, g in (missing or {}).get(v, [])] for v in range(n)]
    return RoundRecord(**{**r.__dict__, "bonus_text": f"t{bonus}", "C_p": C_p, "missing": rows,
                          "committed": accepted_tokens + [bonus] if committed is None else committed})


def run(name: str, rounds: list[RoundRecord], prompt: str = "p", meta: dict | None = None) -> Run:
    return Run(name=name, prompt=prompt, token_ids=[t for r in rounds for t in r.committed], rounds=rounds,
               meta=meta or {})


# Round 0 of A: root -> 5 -> 7, root -> 6 (exit at 7, bonus 9). Of B: root -> 5 -> 8, root -> 5 -> 7 in another
# node order (exit at 5, bonus 8).
A0 = rec(0, [1, 5, 6, 7], [-1, 0, 0, 1], exit_node=3, bonus=9, C_p=1.2, missing={1: [(8, 0.3)], 0: [(4, 0.1)]})
B0 = rec(0, [1, 5, 8, 7], [-1, 0, 1, 1], exit_node=1, bonus=8, C_p=0.9, missing={3: [(2, 0.2)], 0: [(6, 0.25)]})


def test_nodes_match_by_token_path():
    nodes = match_nodes(A0, B0)
    by_path = {n.path: n for n in nodes}
    assert set(by_path) == {(), (5,), (6,), (5, 7), (5, 8)}
    assert {p: n.side for p, n in by_path.items()} == {(): BOTH, (5,): BOTH, (6,): A_ONLY, (5, 7): BOTH,
                                                       (5, 8): B_ONLY}
    assert (by_path[(5, 7)].node_a, by_path[(5, 7)].node_b) == (3, 3)
    assert (by_path[(5, 8)].node_a, by_path[(5, 8)].node_b) == (None, 2)
    assert by_path[(6,)].node_b is None and by_path[(5, 8)].text == "t8" and by_path[(5, 8)].depth == 2
    # Union ids are 0..N-1 with every parent before its child and the parent's path one token shorter.
    assert [n.id for n in nodes] == list(range(len(nodes)))
    for n in nodes[1:]:
        assert n.parent < n.id and nodes[n.parent].path == n.path[:-1]


def test_a_round_compared_with_itself_has_no_difference():
    c = compare_runs(run("A", [A0]), run("A", [A0])).round(0)
    assert c.identical and c.count(BOTH) == 4 and c.count(A_ONLY) == c.count(B_ONLY) == 0
    assert c.C_p.diff == 0 and c.block_length.diff == 0 and c.same_context is True
    assert [m.drafted_by_other for m in c.missing_a] == [False, False]


def test_round_differences_and_missing_tokens():
    cmp = compare_runs(run("A", [A0]), run("B", [B0]))
    c = cmp.round(0)
    assert not c.identical
    assert c.C_p.diff == pytest.approx(-0.3) and c.expected_length.diff == pytest.approx(-0.3)
    assert (c.block_length.a, c.block_length.b, c.block_length.diff) == (3, 2, -1)
    assert c.accepted_a == "t5t7t9" and c.accepted_b == "t5t8"
    # A misses 5 -> 8, which B drafted; B misses the root's 6, which A drafted; 5 -> 7 -> 2 and root -> 4 nobody has.
    assert [(m.path, m.drafted_by_other) for m in c.missing_a] == [((5, 8), True), ((4,), False)]
    assert [(m.path, m.drafted_by_other) for m in c.missing_b] == [((6,), True), ((5, 7, 2), False)]
    assert c.missing_b[1].path_text == "t5t7t2" and c.missing_b[1].gain == 0.2
    assert missing_tokens(A0, top=1)[0].path == (5, 8)


def test_a_rounds_numbers_and_missing_tokens_are_tables_of_the_comparison():
    """round_table and missing_table (what `tevviz compare --round` and the app draw): the same numbers as the
    comparison, B - A signed, the registry's labels, and the other tree's tokens marked."""
    from tevviz.engine.records.round_numbers import NUMBERS

    c = compare_runs(run("A", [A0]), run("B", [B0])).round(0)
    t = round_table(c)
    assert [r["number"] for r in t.rows] == [NUMBERS[k].label for k in ("C_p", "expected_length", "L")]
    assert [(r["a"], r["b"]) for r in t.rows][2] == (3, 2) and t.rows[2]["diff"] == -1
    assert t.rows[0]["diff"] == pytest.approx(-0.3) and [col.kind for col in t.columns][-1] == "signed"
    assert t.notes == ("A accepted 't5t7t9'", "B accepted 't5t8'")
    m = missing_table(c, "B")
    assert m.columns[-1].heading == "in A's tree"
    assert [(r["path"], r["other"]) for r in m.rows] == [("'t6'", "yes"), ("'t5t7t2'", "")]
    assert [r["gain"] for r in m.rows] == [x.gain for x in c.missing_b]


def test_missing_round_is_a_clear_error():
    cmp = compare_runs(run("A", [A0]), run("B", [B0, rec(1, [8, 3], [-1, 0], 1, 4)]))
    assert cmp.round_indices == [0]
    with pytest.raises(TevvizError, match="A has no round 1 \\(rounds 0-0\\)"):
        cmp.round(1)


def test_divergence_is_said_plainly_and_marks_later_rounds():
    # Both runs commit t5 t7 in round 0 (A with bonus 7 after 5, B with 5 and 7 drafted and bonus 2): then they part.
    a = [rec(0, [1, 5], [-1, 0], 1, 7), rec(1, [7, 3], [-1, 0], 1, 4)]
    b = [rec(0, [1, 5, 7], [-1, 0, 1], 2, 2), rec(1, [2, 3], [-1, 0], 0, 6)]
    cmp = compare_runs(run("A", a), run("B", b))
    d = cmp.divergence
    assert (d.common, d.position, d.token_a, d.token_b, d.text_a, d.text_b) == (2, 2, 3, 2, "t3", "t2")
    assert (d.round_a, d.round_b) == (1, 0)
    assert "agree on the first 2 generated tokens" in d.sentence and "A wrote 't3' (round 1)" in d.sentence
    assert "B wrote 't2' (round 0)" in d.sentence and "different contexts" in d.sentence
    # Round 0 starts at token 0 of both runs; round 1 starts at token 2 of A and token 3 of B: another context.
    assert cmp.round(0).same_context is True and cmp.round(1).same_context is False


def test_different_prompts_are_said_and_no_round_shares_a_context():
    cmp = compare_runs(run("A", [A0], prompt="x"), run("B", [A0], prompt="y"))
    assert not cmp.divergence.same_prompt and "different prompts" in cmp.divergence.sentence
    assert cmp.round(0).same_context is False


def test_a_run_without_its_text_says_so():
    cmp = compare_runs(run("A", [A0]), Run("B", "p", [], [B0]))  # B read from a round file
    assert "B carries no generated text" in cmp.divergence.sentence
    assert cmp.round(0).same_context is None


def test_capped_history_maps_kept_rounds_to_the_tail_of_the_text():
    kept = rec(4, [7, 3], [-1, 0], 1, 4)
    a = Run("A", "p", [9, 9, 9, 3, 4], [kept])  # three tokens from dropped rounds, then round 4's two
    b = Run("B", "p", [9, 9, 9, 3, 5], [rec(4, [7, 3], [-1, 0], 1, 5)])
    cmp = compare_runs(a, b)
    assert cmp.divergence.round_a == 4 and cmp.divergence.position == 4
    assert cmp.round(4).same_context is True


def test_settings_that_differ_are_listed():
    ma = {"verifier": "tev", "sampling": {"temperature": 0.0, "top_k": 0}, "seed": 0, "tevviz": "0.1"}
    mb = {"verifier": "predraw", "sampling": {"temperature": 1.0, "top_k": 0}, "seed": 0, "tevviz": "0.2"}
    cmp = compare_runs(run("A", [A0], meta=ma), run("B", [A0], meta=mb))
    assert cmp.settings == [("sampling.temperature", 0.0, 1.0), ("verifier", "tev", "predraw")]


def test_share_is_the_standard_error_of_zero_one_values():
    from tevviz.engine.analysis.stats import mean_se

    for k, n in ((3, 7), (0, 5), (5, 5), (1, 2)):
        mean, se = mean_se([1.0] * k + [0.0] * (n - k))
        got = share(k, n)
        assert got.mean == pytest.approx(mean) and got.se == pytest.approx(se) and got.n == n
    assert share(1, 1).se is None and share(0, 0).mean is None


def test_conditional_and_marginal_acceptance_by_hand():
    # Four rounds of a depth-3 chain: blocks reached depth 0, 1, 3, 3.
    chain = lambda i, exit_node: rec(i, [1, 2, 3, 4], [-1, 0, 1, 2], exit_node, 9)
    rounds = [chain(0, 0), chain(1, 1), chain(2, 3), chain(3, 3)]
    conditional, marginal = depth_curves(rounds, 4)
    assert [m.mean for m in marginal] == [0.75, 0.5, 0.5, 0.0]
    assert [c.mean for c in conditional] == [pytest.approx(0.75), pytest.approx(2 / 3), 1.0, 0.0]
    assert [c.n for c in conditional] == [4, 3, 2, 2] and all(m.n == 4 for m in marginal)


def test_depth_table_of_a_run_with_itself_shows_no_difference():
    rounds = [rec(i, [1, 2, 3, 4], [-1, 0, 1, 1], e, 9, C_p=0.5 + i / 10) for i, e in enumerate((0, 1, 2, 3, 1))]
    table = compare_runs(run("A", rounds), run("A", rounds)).table
    assert [row.depth for row in table.rows] == [1, 2]
    for contrast in [table.tau, table.expected_length, *(c for r in table.rows for c in (r.conditional, r.marginal))]:
        assert contrast.diff == 0 and contrast.a == contrast.b
    assert table.tau.se == pytest.approx(math.sqrt(2) * table.tau.a.se)


def test_depth_table_differences_and_standard_errors():
    a = [rec(i, [1, 2, 3], [-1, 0, 1], e, 9) for i, e in enumerate((0, 1, 2, 2))]
    b = [rec(i, [1, 2], [-1, 0], e, 9) for i, e in enumerate((1, 1))]
    table = compare_runs(run("A", a), run("B", b)).table
    d1, d2 = table.rows
    assert (d1.marginal.a.mean, d1.marginal.b.mean, d1.marginal.diff) == (0.75, 1.0, 0.25)
    assert d1.marginal.se == pytest.approx(math.hypot(share(3, 4).se, 0.0))
    # B's trees never reach depth 2: no rounds had reached depth 1 and then accepted at 2, so 0 of B's 2 rounds.
    assert (d2.conditional.a.mean, d2.conditional.b.mean) == (pytest.approx(2 / 3), 0.0)
    assert table.tau.diff == pytest.approx(2.0 - 2.25)
    assert table.expected_length.a.mean is None and table.expected_length.diff is None  # unscored rounds


def test_to_dict_is_plain_json():
    import json

    cmp = compare_runs(run("A", [A0]), run("B", [B0]))
    text = json.dumps({**cmp.to_dict(), "round": cmp.round(0).to_dict()})
    back = json.loads(text)
    assert back["round"]["counts"] == {BOTH: 3, A_ONLY: 1, B_ONLY: 1}
    assert back["table"]["rows"][0]["conditional"]["a"]["mean"] == 1.0


def test_compare_modules_load_no_torch():
    import subprocess
    import sys

    code = ("import sys; import tevviz.engine.analysis.run_compare, tevviz.engine.analysis.speed, "
            "tevviz.render.compare_figure, "
            "tevviz.render.compare_report; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
