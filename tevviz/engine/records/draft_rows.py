"""A block round's per-depth draft rows: DDTree's heap over them (pure Python), and their check on import.

Row d - 1 lists the drafter's top tokens of depth d by rank, each {token_id, text, logprob}; with K = min(B, V)
entries per depth they are enough to rebuild the round's DDTree, which is how an import is checked.
"""

from __future__ import annotations

import heapq
import math

from ..errors import TevvizError

MAX_ROW = 4096  # entries kept per depth (DDTree's K = min(B, V) for budgets up to 4096)
TEXT_RANKS = 16  # ranks per depth whose token text is recorded (what a person reads); deeper ranks carry ""


def ddtree_heap(top_logprobs: list[list[float]], budget: int) -> list[tuple[int, int, int]]:
    """(parent, depth, rank) of each node in pop order, from per-depth top-K log-probabilities sorted descending.

    `top_logprobs[d - 1][r]` is the log-probability of the rank-r token at depth d. Node ids are pop order + 1
    (the root is 0).
    """
    depths, k = len(top_logprobs), len(top_logprobs[0]) if top_logprobs else 0
    if budget <= 0 or depths == 0 or k == 0:
        return []
    lp = top_logprobs
    heap = [(-lp[0][0], (0,), 0, 1, 0, lp[0][0])]
    out: list[tuple[int, int, int]] = []
    while heap and len(out) < budget:
        _, ranks, parent, depth, rank, logw = heapq.heappop(heap)
        out.append((parent, depth, rank))
        node = len(out)
        if rank + 1 < k:  # the next sibling: same parent, the next rank of this depth
            w = logw - lp[depth - 1][rank] + lp[depth - 1][rank + 1]
            heapq.heappush(heap, (-w, ranks[:-1] + (rank + 1,), parent, depth, rank + 1, w))
        if depth < depths:  # the first child: one deeper, rank 0
            w = logw + lp[depth][0]
            heapq.heappush(heap, (-w, ranks + (0,), node, depth + 1, 0, w))
    return out


def rebuild(rows: list[list[dict]], budget: int) -> tuple[list[int], list[int]]:
    """(tokens below the root, parents) of the DDTree of `budget` nodes over recorded rows, in pop order."""
    pops = ddtree_heap([[e["logprob"] for e in row] for row in rows], budget)
    tokens, parents = [], []
    for parent, depth, rank in pops:
        tokens.append(rows[depth - 1][rank]["token_id"])
        parents.append(parent)
    return tokens, parents


def check_draft_rows(rows, where: str, tokens: list[int], parents: list[int]) -> list[list[dict]]:
    """Validate recorded rows against the round's tree: well formed, sorted, and rebuilding exactly its nodes."""
    def fail(field: str, msg: str):
        raise TevvizError(f"{field}: {msg}")

    if not isinstance(rows, list) or not 1 <= len(rows) <= 64:
        fail(where, "must be a list of 1 to 64 depths, each a list of the drafter's top tokens")
    for d, row in enumerate(rows):
        if not isinstance(row, list) or not 1 <= len(row) <= MAX_ROW:
            fail(f"{where}[{d}]", f"must be a list of 1 to {MAX_ROW} entries")
        last = math.inf
        for r, e in enumerate(row):
            at = f"{where}[{d}][{r}]"
            if not isinstance(e, dict):
                fail(at, "must be an object {token_id, text, logprob}")
            t, x, lp = e.get("token_id"), e.get("text"), e.get("logprob")
            if type(t) is not int or t < 0:
                fail(f"{at}.token_id", f"must be a non-negative integer, got {t!r}")
            if not isinstance(x, str):
                fail(f"{at}.text", "must be a string")
            if isinstance(lp, bool) or not isinstance(lp, (int, float)) or not -math.inf < lp <= 1e-4:
                fail(f"{at}.logprob", f"must be a log-probability (<= 0), got {lp!r}")
            if lp > last + 1e-6:
                fail(f"{at}.logprob", "rows must be sorted by rank (log-probabilities not increasing)")
            last = lp
    got_tokens, got_parents = rebuild(rows, len(tokens) - 1)
    if got_tokens != tokens[1:] or got_parents != parents[1:]:
        fail(where, "do not rebuild this round's tree with DDTree's heap (nodes, tokens or order differ)")
    return rows
