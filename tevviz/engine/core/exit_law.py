"""Target flow and the canonical exit law of a fixed tree (docs/math.md, *The exit law*; paper section 3).

All functions are vectorised over nodes; `probs` rows are the processed target distributions
p_v(.) of the nodes in tree order.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .sampling import SamplingConfig, edge_probs
from .tree import DraftTree, ancestor_mask


def p_edge(tree: DraftTree, probs: torch.Tensor) -> torch.Tensor:
    """p_pa(v)(x_v) for every node; 1 at the root."""
    pe = probs[tree.parents.clamp(min=0), tree.tokens].float()
    pe[0] = 1.0
    return pe


def P(tree: DraftTree, edge: torch.Tensor, anc: torch.Tensor | None = None) -> torch.Tensor:
    """Target prefix probability P(v) = P(pa(v)) * p_pa(v)(x_v), P(root) = 1: product along the path."""
    anc = ancestor_mask(tree) if anc is None else anc
    return torch.where(anc, edge, 1.0).prod(dim=-1)


def child_sum(tree: DraftTree, values: torch.Tensor) -> torch.Tensor:
    """Sum of `values` over each node's children (0 at a leaf)."""
    out = torch.zeros_like(values)
    return out.index_add_(0, tree.parents[1:], values[1:])


RHO_FLOOR = 1e-6  # below this, 1 - sum of child edges is float32 rounding, not residual mass


def rho(tree: DraftTree, edge: torch.Tensor) -> torch.Tensor:
    """Local exit probability rho(v) = 1 - sum over children u of p_v(x_u); 1 at a leaf.

    Values under RHO_FLOOR become 0, so that a node whose residual mass rounds away is never drawn.
    """
    r = 1.0 - child_sum(tree, edge)
    return r.masked_fill_(r < RHO_FLOOR, 0.0)


def w(P_: torch.Tensor, rho_: torch.Tensor) -> torch.Tensor:
    """Exit law w(v) = P(v) * rho(v) = P(v) - sum of children's P (paper Lemma 1); sums to 1.

    Never negative: P is a product of probabilities and rho is floored at 0.
    """
    return P_ * rho_


def coverage(tree: DraftTree, P_: torch.Tensor) -> torch.Tensor:
    """Target coverage C_p(T) = sum of P(u) over non-root u = sum_v w(v) d(v)."""
    return P_[1:].sum()


def child_token_counts(tree: DraftTree, node: torch.Tensor, vocab: int) -> torch.Tensor:
    """(V,) count of `node`'s children carrying each token (0 or 1, as siblings are distinct)."""
    is_child = (tree.parents[1:] == node).float()
    return torch.zeros(vocab, device=tree.device).index_add_(0, tree.tokens[1:], is_child)


def residual(tree: DraftTree, probs_row: torch.Tensor, node: torch.Tensor) -> torch.Tensor:
    """Unnormalised residual law at `node`: p_v(a) with the children's tokens A(v) removed.

    Normalising it by rho(v) gives p_v_res; at a leaf it is p_v itself.
    """
    counts = child_token_counts(tree, node, probs_row.shape[-1])
    return probs_row * (counts == 0)


def residual_of_row(tree: DraftTree, probs_row: torch.Tensor, node: torch.Tensor) -> torch.Tensor:
    """`residual`, zeroing the children's tokens with one N-sized scatter instead of a V-sized count.

    Other nodes may carry a child's token too (under other parents); their entries scatter the row's own
    value, and the minimum makes the child's 0 win whatever the order.
    """
    mine = tree.parents[1:] == node
    kept = torch.where(mine, torch.zeros((), device=probs_row.device), probs_row[tree.tokens[1:]])
    return probs_row.scatter_reduce(0, tree.tokens[1:], kept, reduce="amin", include_self=True)


def missing_tokens(
    tree: DraftTree, probs: torch.Tensor, P_: torch.Tensor, k: int = 5
) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k tokens a of each node v not among its children, by coverage gain P(v) * p_v(a) (eq. 12-13).

    Returns (gains, token ids), each (N, k).
    """
    taken = torch.zeros(probs.shape, dtype=torch.bool, device=probs.device)
    taken[tree.parents[1:], tree.tokens[1:]] = True
    gains = (P_.unsqueeze(-1) * probs.float()).masked_fill_(taken, 0.0)
    top = torch.topk(gains, min(k, probs.shape[-1]), dim=-1)
    return top.values, top.indices


@dataclass(frozen=True)
class ExitLaw:
    """Target flow of one tree: per-node p_edge, P, rho, w, and the coverage C_p."""

    p_edge: torch.Tensor
    P: torch.Tensor
    rho: torch.Tensor
    w: torch.Tensor
    C_p: torch.Tensor


def exit_law_from_edges(tree: DraftTree, edge: torch.Tensor, anc: torch.Tensor | None = None) -> ExitLaw:
    """The exit law from the edge probabilities p_pa(v)(x_v) alone (all that TEV needs)."""
    P_ = P(tree, edge, anc)
    rho_ = rho(tree, edge)
    return ExitLaw(p_edge=edge, P=P_, rho=rho_, w=w(P_, rho_), C_p=coverage(tree, P_))


def exit_law_from_logits(tree: DraftTree, logits: torch.Tensor, cfg: SamplingConfig,
                         anc: torch.Tensor | None = None) -> ExitLaw:
    """The exit law from the target logits of the tree's nodes, normalising only what the edges need."""
    edge = torch.ones(tree.size, device=logits.device)
    edge[1:] = edge_probs(logits, tree.parents[1:], tree.tokens[1:], cfg)
    return exit_law_from_edges(tree, edge, anc)


def exit_law(tree: DraftTree, probs: torch.Tensor) -> ExitLaw:
    """The exit law from full processed target distributions (N, V)."""
    return exit_law_from_edges(tree, p_edge(tree, probs))
