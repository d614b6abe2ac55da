"""The best-first tree's acceptance table: what a drafted node is worth to the target, learnt in the session.

Expected committed tokens of a tree are `1 + sum of R(v)`, with `R(v)` the predicted reach of node `v`: the product,
along its path, of each edge's expected target probability. That is read from this table: for each child rank among
its siblings (the draft's first, second, later choice) and each bin of the draft's own probability `q`, the mean
target edge probability `p_pa(v)(x_v)` of such nodes in the verified trees (exact for every node, reached or not).
At T = 0 the draft's first choice is the target's far more often than its `q` says, its siblings less; so the table,
not the draft's path probability, decides how deep and how wide a tree pays.
"""

from __future__ import annotations

import torch

from ..records.round_time import WINDOW

# The table's rows: a child's rank among its siblings (first, second, third or later choice of the draft), and its
# columns: bins of the draft's own q. Until a bin has seen nodes it answers q itself (PRIOR nodes' worth).
RANKS = 3
Q_EDGES = (0.02, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95)
PRIOR = 2.0
_MID_Q = torch.tensor((0.0, *Q_EDGES)) + torch.diff(torch.tensor((0.0, *Q_EDGES, 1.0))) / 2  # each bin's middle q
MIN_ACCEPT = 1e-6  # keeps the table's log finite
PRIOR_TABLE = _MID_Q.clamp(MIN_ACCEPT, 1.0).log().expand(RANKS, -1).contiguous()  # the table before any node


def q_bins(logq: torch.Tensor, edges: torch.Tensor | None = None) -> torch.Tensor:
    """Column of the acceptance table for each draft log-probability (`edges`: Q_EDGES on its device)."""
    edges = torch.tensor(Q_EDGES, device=logq.device) if edges is None else edges
    return torch.bucketize(logq.float().exp(), edges)


class AcceptanceTable:
    """Decayed sums over drafted rounds' nodes (about WINDOW rounds' worth): count, target edge probability, q."""

    def __init__(self):
        shape = (RANKS, len(Q_EDGES) + 1)
        self.nodes, self.hits, self.qs = torch.zeros(shape), torch.zeros(shape), torch.zeros(shape)

    def log_accept(self) -> torch.Tensor:
        """Each bin's mean target edge probability, drawn toward its mean q while it has few nodes (as logs)."""
        prior_q = torch.where(self.nodes > 0, self.qs / self.nodes.clamp(min=1e-9), _MID_Q)
        accept = (self.hits + PRIOR * prior_q) / (self.nodes + PRIOR)
        return accept.clamp(MIN_ACCEPT, 1.0).log()

    def learn(self, ranks: list[int], logq: list[float], p_edge: list[float]) -> None:
        """Add one tree's non-root nodes to the decayed sums."""
        lq = torch.tensor(logq)
        cell = torch.tensor(ranks).clamp(max=RANKS - 1) * (len(Q_EDGES) + 1) + q_bins(lq)
        decay = 1 - 1 / WINDOW
        for sums, x in ((self.nodes, torch.ones_like(lq)), (self.hits, torch.tensor(p_edge)), (self.qs, lq.exp())):
            sums.mul_(decay).view(-1).index_add_(0, cell, x.float())

    def first_choice(self) -> tuple[float, float]:
        """Mean target probability and mean draft q of the draft's first-choice children ((0, 0): none yet)."""
        n = float(self.nodes[0].sum())
        return (float(self.hits[0].sum()) / n, float(self.qs[0].sum()) / n) if n > 0 else (0.0, 0.0)
