"""DDTree's builder (docs/math.md, *DDTree's builder*): the top-B prefixes under the product of per-depth marginals.

A block drafter gives one row per depth, `q_d`; a prefix u scores `log q(u) = sum_d log q_d(u_d)`. A heap pops
prefixes in order of that score (ties to the lexicographically smaller ranks tuple), so the first B pops are the
top-B tree, closed under ancestors and in parent-before-child order. The heap is host work over (H, K) floats.
"""

from __future__ import annotations

import torch

from ..core.tree import DraftTree
from ..records.draft_rows import ddtree_heap
from .builder_kinds import BuilderKind, register

register(BuilderKind(
    "ddtree", frozenset({"block"}), "DDTree's heap over a block drafter's per-depth marginals (one draft pass a round)",
    why_not_verifier="speculative sampling needs each token drawn from the law it carries, and a DDTree node's "
                     "row is its depth's marginal, shared by every node of that depth whatever its parent",
    auto=True))


def ddtree_tree(root: int, logprobs: torch.Tensor, budget: int) -> tuple[DraftTree, torch.Tensor, tuple]:
    """The DDTree of `budget` nodes below `root` from (H, V) per-depth log-probabilities, each node's rank, and
    the per-depth top-K rows it was built from.

    Node draft log-probs are the marginals `log q_d(x_v)`; scores their sums along the path.
    """
    k = min(budget, logprobs.shape[-1])
    top = torch.topk(logprobs.float(), k, dim=-1)  # sorted descending, ties to the lower id
    values, ids = top.values.tolist(), top.indices.tolist()  # one host copy: the heap is host work anyway
    pops = ddtree_heap(values, budget)
    parents, depths, ranks = [-1], [0], [0]
    tokens, logq, scores = [root], [0.0], [0.0]
    for p, d, r in pops:
        parents.append(p)
        depths.append(d)
        ranks.append(r)
        tokens.append(ids[d - 1][r])
        logq.append(values[d - 1][r])
        scores.append(scores[p] + values[d - 1][r])
    as_t = lambda xs, dt: torch.tensor(xs, dtype=dt, device=logprobs.device)
    tree = DraftTree(as_t(tokens, torch.long), as_t(parents, torch.long), as_t(depths, torch.long),
                     as_t(logq, torch.float32), as_t(scores, torch.float32))
    return tree, as_t(ranks, torch.long), (top.indices, top.values)  # rows: (H, K) ids and log-probs
