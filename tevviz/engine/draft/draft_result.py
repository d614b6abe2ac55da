"""What a level-by-level draft hands the round: the tree with its drafter bookkeeping (`DraftResult`), the step a
drafter supplies for each level (`LevelStep`), and the round that drafts nothing (`root_only`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from ..core.tree import DraftTree


@dataclass(frozen=True)
class DraftResult:
    """A built tree, which nodes the draft forwarded (their cache slots), and where the tree slots start."""

    tree: DraftTree
    slots: torch.Tensor  # (N,) long; draft-cache offset past `base` of each forwarded node, -1 if never forwarded
    base: int  # draft cache length after the pending tokens (root included)
    levels: int  # draft forwards, the pending tokens' included
    ranks: torch.Tensor  # (N,) long; each node's rank among its parent's drafted children (root 0)
    reach: torch.Tensor  # (N,) log predicted reach (from the plan's acceptance table; without a plan, the path score)
    # A block drafter's per-depth rows the tree was built from: (H, K) top token ids and their log-probabilities
    # (DDTree's K = min(B, V), enough to rebuild the tree); None for level-by-level drafting.
    rows: tuple[torch.Tensor, torch.Tensor] | None = None


class LevelStep(Protocol):
    """One level of drafting, supplied by the drafter: its rows for new tokens under tree attention, its state grown
    by them (a causal LM's KV cache; a drafter that feeds back its own hidden state keeps those rows too)."""

    device: torch.device

    def length(self) -> int:
        """Positions the drafter's state holds before this round (its cache length)."""

    def __call__(self, tokens: torch.Tensor, positions: torch.Tensor, visible: torch.Tensor,
                 sources: torch.Tensor | None) -> torch.Tensor:
        """(q, V) rows for `tokens` (q,) at `positions` seeing `visible` (q, state + q) slots; `sources[i]` is the row
        of the previous call that drafted tokens[i] (None: committed tokens, read in order after the state; the last
        of their rows is the root's)."""


def root_only(root: int, base: int, device) -> DraftResult:
    """A round without a draft (auto budget): the tree is the root alone and the draft cache is not touched."""
    zero = torch.zeros(1, dtype=torch.long, device=device)
    tree = DraftTree(torch.tensor([root], device=device), zero - 1, zero, torch.zeros(1, device=device),
                     torch.zeros(1, device=device))
    return DraftResult(tree, zero - 1, base, levels=0, ranks=zero, reach=torch.zeros(1, device=device))
