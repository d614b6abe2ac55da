"""The draft tree: one frozen record in parent-array order, and pure functions derived from it."""

from __future__ import annotations

from dataclasses import InitVar, dataclass

import torch

from ..errors import TevvizError
from ..records import records


@dataclass(frozen=True)
class DraftTree:
    """A token tree below the root; node 0 is the root token, parents come before children.

    All fields are 1-D tensors of length N (root included) on one device. Siblings carry distinct
    tokens (docs/math.md, *Notation*): a tree that repeats one is refused when it is made, since the
    exit law would count that token's target mass once per copy.
    """

    tokens: torch.Tensor  # (N,) long; tokens[0] is the root token
    parents: torch.Tensor  # (N,) long; -1 at the root
    depths: torch.Tensor  # (N,) long; 0 at the root
    draft_logprobs: torch.Tensor  # (N,) float; log q_pa(v)(x_v), 0 at the root
    scores: torch.Tensor  # (N,) float; path score s(v), sum of draft log-probs along the path (at the builder's
    # draft temperature, BuilderConfig.draft_temperature; 1 unless set)
    # A sampled tree only (the `sampled` builder): (N, V) float, row v the draft's processed law that node v was drawn
    # from (row 0 unused). The speculative verifier needs it; None for a deterministic tree.
    draft_probs: torch.Tensor | None = None
    # False only where the tree has no siblings by construction (a chain), so there is nothing to check: the check
    # is a sort and a host read, a tenth of a sampled chain's own work in a round.
    check_siblings: InitVar[bool] = True

    def __post_init__(self, check_siblings: bool):
        clash = repeated_siblings(self) if check_siblings else []
        if clash:
            said = "; ".join(f"nodes {', '.join(map(str, nodes))} under node {p} repeat token {t}"
                             for p, t, nodes in clash[:5])
            more = f" and {len(clash) - 5} more" if len(clash) > 5 else ""
            raise TevvizError(f"siblings must carry distinct tokens: {said}{more}")

    @property
    def size(self) -> int:
        """Number of nodes, root included."""
        return self.tokens.shape[0]

    @property
    def device(self) -> torch.device:
        return self.tokens.device

    def to(self, device) -> DraftTree:
        if self.tokens.device == torch.device(device):
            return self  # already there: no copy, and no second check
        probs = None if self.draft_probs is None else self.draft_probs.to(device)
        return DraftTree(*(t.to(device)
                           for t in (self.tokens, self.parents, self.depths, self.draft_logprobs, self.scores)),
                         probs, check_siblings=False)  # checked when it was made (or a chain): the same tree


def repeated_siblings(tree: DraftTree) -> list[tuple[int, int, list[int]]]:
    """(parent, token, nodes) for each token that two or more children of one parent carry; [] if none.

    One sort of the (parent, token) keys and one host read, whatever the size of the tree; the
    per-node host work only happens when there is a clash to report.
    """
    key = tree.parents[1:] * (1 << 32) + tree.tokens[1:]  # distinct for distinct pairs while |token| < 2^31
    if key.numel() < 2:
        return []
    sorted_key, order = torch.sort(key, stable=True)
    same = sorted_key[1:] == sorted_key[:-1]
    if not bool(same.any()):
        return []
    groups: dict[int, list[int]] = {}
    for i in same.nonzero().flatten().tolist():
        k = int(sorted_key[i])
        groups.setdefault(k, [int(order[i]) + 1]).append(int(order[i + 1]) + 1)
    return [(int(tree.parents[nodes[0]]), int(tree.tokens[nodes[0]]), nodes) for nodes in groups.values()]


def from_parents(
    tokens: list[int],
    parents: list[int],
    draft_logprobs: list[float] | None = None,
    device: torch.device | str = "cpu",
) -> DraftTree:
    """Build a tree from plain lists (node 0 the root, parent -1); checks parent-before-child order."""
    n = len(tokens)
    if len(parents) != n:
        raise ValueError("a tree needs a root and one parent per node")
    depths = records.tree_depths([int(p) for p in parents])
    lp = [0.0] * n if draft_logprobs is None else [0.0] + [float(x) for x in draft_logprobs[1:]]
    scores = [0.0] * n
    for v in range(1, n):
        scores[v] = scores[parents[v]] + lp[v]
    as_t = lambda xs, dt: torch.tensor(xs, dtype=dt, device=device)
    return DraftTree(
        as_t(tokens, torch.long), as_t(parents, torch.long), as_t(depths, torch.long),
        as_t(lp, torch.float32), as_t(scores, torch.float32),
    )


def ancestor_mask(tree: DraftTree) -> torch.Tensor:
    """(N, N) bool: [i, j] is True when j is i itself or an ancestor of i (the tree attention pattern)."""
    n = tree.size
    depth = int(tree.depths.max()) if n > 1 else 0
    if depth == n - 1:
        # One node a level, each below the one before (parents come first): a chain, whose pattern is causal.
        return torch.ones(n, n, dtype=torch.bool, device=tree.device).tril_()
    reach = torch.eye(n, dtype=torch.bool, device=tree.device)  # covers distance < span
    jump = tree.parents.clamp(min=0)  # span-th ancestor (the root is its own parent here)
    span = 1
    # Pointer doubling: log2(depth) vector passes instead of one pass per generation.
    while span <= depth:
        reach = reach | reach[jump]
        jump = jump[jump]
        span *= 2
    return reach


def position_ids(tree: DraftTree, past_length: int) -> torch.Tensor:
    """(1, N) position ids: the cache length plus each node's depth."""
    return (tree.depths + past_length).unsqueeze(0)


def children(tree: DraftTree) -> list[list[int]]:
    """Children of each node, in node order (host lists; for display and sequential verifiers)."""
    out: list[list[int]] = [[] for _ in range(tree.size)]
    for v, p in enumerate(tree.parents.tolist()):
        if p >= 0:
            out[p].append(v)
    return out


def path_to(tree: DraftTree, node: int) -> list[int]:
    """Node ids from the root down to `node`, root first (the walk of records.path_to, on the tree's parents)."""
    return records.path_to(tree.parents.tolist(), node)
