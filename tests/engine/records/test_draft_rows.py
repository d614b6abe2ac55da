"""Block rounds' draft rows (records/draft_rows.py): DDTree's heap by hand, its rebuild, and refused rows."""

from __future__ import annotations

import copy
import math

import pytest

from tevviz.engine.errors import TevvizError
from tevviz.engine.records.draft_rows import MAX_ROW, check_draft_rows, ddtree_heap, rebuild

# Depth 1 ranks have probabilities 0.6, 0.3, 0.1; depth 2 ranks 0.7, 0.2, 0.1 (every prefix shares the row).
PROBS = [[0.6, 0.3, 0.1], [0.7, 0.2, 0.1]]
LOGP = [[math.log(p) for p in row] for row in PROBS]
ROWS = [[{"token_id": t, "text": f"t{t}", "logprob": lp} for t, lp in zip(tokens, row)]
        for tokens, row in zip([[5, 6, 7], [8, 9, 10]], LOGP)]


def test_the_heap_pops_the_most_likely_prefixes_first():
    # Pops by path probability: 0.6 (rank 0), 0.42 (0 -> 0), 0.3 (rank 1), 0.21 (1 -> 0), 0.12 (0 -> 1), then
    # 0.1 (rank 2) before 0.06 (1 -> 1, 0 -> 2). Node ids are pop order + 1, so a child names its parent's pop.
    assert ddtree_heap(LOGP, 4) == [(0, 1, 0), (1, 2, 0), (0, 1, 1), (3, 2, 0)]
    assert ddtree_heap(LOGP, 6) == [(0, 1, 0), (1, 2, 0), (0, 1, 1), (3, 2, 0), (1, 2, 1), (0, 1, 2)]


def test_the_heap_stops_when_every_node_is_drafted():
    pops = ddtree_heap(LOGP, 100)
    assert len(pops) == 3 + 3 * 3  # K nodes at depth 1, K children of each at depth 2
    assert sorted((d, r) for _, d, r in pops).count((2, 0)) == 3
    assert all(pops[p - 1][1] == d - 1 for p, d, _ in pops if p)  # each parent one level up
    assert ddtree_heap([[0.0], [0.0], [0.0]], 5) == [(0, 1, 0), (1, 2, 0), (2, 3, 0)]  # K = 1: a chain


@pytest.mark.parametrize("logprobs, budget", [([], 4), ([[]], 4), (LOGP, 0), (LOGP, -1)])
def test_nothing_to_draft_gives_no_nodes(logprobs, budget):
    assert ddtree_heap(logprobs, budget) == []


def test_rebuild_reads_the_tokens_of_the_popped_ranks():
    assert rebuild(ROWS, 4) == ([5, 8, 6, 8], [0, 1, 0, 3])
    assert rebuild(ROWS, 1) == ([5], [0])


TOKENS = [1, 5, 8, 6, 8]  # the root, then the heap's four nodes
PARENTS = [-1, 0, 1, 0, 3]


def test_rows_that_rebuild_the_round_are_returned():
    assert check_draft_rows(ROWS, "r", TOKENS, PARENTS) is ROWS
    # A logprob a hair above 0 from rounding is still a log-probability.
    nearly = copy.deepcopy(ROWS)
    nearly[0][0]["logprob"] = 5e-5
    assert check_draft_rows(nearly, "r", TOKENS, PARENTS) is nearly


def edited(depth: int, rank: int, **entry):
    rows = copy.deepcopy(ROWS)
    rows[depth][rank] |= entry
    return rows


@pytest.mark.parametrize("rows, where, words", [
    ({"0": ROWS[0]}, "g.rows", "must be a list of 1 to 64 depths"),
    ([], "g.rows", "must be a list of 1 to 64 depths"),
    ([ROWS[0]] * 65, "g.rows", "must be a list of 1 to 64 depths"),
    ([ROWS[0], []], "g.rows[1]", f"must be a list of 1 to {MAX_ROW} entries"),
    ([ROWS[0], "abc"], "g.rows[1]", "must be a list of 1"),
    ([ROWS[0], [ROWS[1][0], 3]], "g.rows[1][1]", "must be an object {token_id, text, logprob}"),
    (edited(0, 1, token_id=-1), "g.rows[0][1].token_id", "must be a non-negative integer, got -1"),
    (edited(0, 1, token_id=True), "g.rows[0][1].token_id", "got True"),
    (edited(0, 1, token_id=6.0), "g.rows[0][1].token_id", "got 6.0"),
    (edited(1, 2, text=None), "g.rows[1][2].text", "must be a string"),
    (edited(1, 0, logprob=0.5), "g.rows[1][0].logprob", "must be a log-probability (<= 0), got 0.5"),
    (edited(1, 0, logprob=-math.inf), "g.rows[1][0].logprob", "got -inf"),
    (edited(1, 0, logprob=math.nan), "g.rows[1][0].logprob", "got nan"),
    (edited(1, 0, logprob=False), "g.rows[1][0].logprob", "got False"),
    (edited(1, 0, logprob="-1"), "g.rows[1][0].logprob", "got '-1'"),
    (edited(0, 2, logprob=-0.5), "g.rows[0][2].logprob", "rows must be sorted by rank"),
])
def test_malformed_rows_are_refused_naming_the_entry(rows, where, words):
    with pytest.raises(TevvizError) as e:
        check_draft_rows(rows, "g.rows", TOKENS, PARENTS)
    assert str(e.value).startswith(f"{where}: ") and words in str(e.value)


@pytest.mark.parametrize("tokens, parents", [
    ([1, 5, 8, 6, 9], PARENTS),  # a token the rows do not put there
    ([1, 5, 8, 6, 8], [-1, 0, 1, 0, 1]),  # the same tokens under another parent
    ([1, 5, 6, 8, 8], [-1, 0, 0, 1, 2]),  # the same nodes in another order
    ([1, 5, 8, 6, 8, 9], PARENTS + [3]),  # the fifth pop is rank 1 under node 1, not under node 3
])
def test_rows_that_rebuild_another_tree_are_refused(tokens, parents):
    with pytest.raises(TevvizError, match=r"^g\.rows: do not rebuild this round's tree"):
        check_draft_rows(ROWS, "g.rows", tokens, parents)


def test_the_budget_is_the_trees_own_size():
    # Rows hold enough ranks for bigger trees: a tree of the heap's first 3 or 5 pops is as valid as one of 4.
    assert check_draft_rows(ROWS, "g.rows", TOKENS[:4], PARENTS[:4]) is ROWS
    assert check_draft_rows(ROWS, "g.rows", [1, 5, 8, 6, 8, 9], PARENTS + [1]) is ROWS


def test_equal_log_probabilities_are_sorted():
    tied = [[{"token_id": 5, "text": "a", "logprob": -1.0}, {"token_id": 6, "text": "b", "logprob": -1.0}]]
    assert check_draft_rows(tied, "r", [0, 5, 6], [-1, 0, 0]) is tied
