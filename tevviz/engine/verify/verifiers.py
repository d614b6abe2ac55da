"""Exact verifiers behind one interface, registered by name (docs/math.md, *Verifiers*).

Each takes the tree, the target logits of its nodes and the sampling settings, and returns the
exit node and the bonus token as 0-d tensors on the logits' device. All share one law: exit
node ~ w, bonus ~ the residual law at the exit node.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch

from ..core import exit_law as law
from ..core.sampling import (
    SamplingConfig,
    float64_sampling,
    greedy_rows,
    inverse_cdf,
    log_normalisers,
    processed_probs,
    sample_categorical,
)
from ..core.tree import DraftTree, ancestor_mask, children
from ..errors import TevvizError


@dataclass(frozen=True)
class Decision:
    """Exit node and bonus token, still on the device (one host copy per round happens later)."""

    exit_node: torch.Tensor  # () long
    bonus_token: torch.Tensor  # () long
    exit_law: law.ExitLaw | None = None  # the tree's exit law when the verifier computed it (TEV), so no one redoes it
    # (N,) the verifier's probability of accepting each node once its parent is accepted, where that is not the
    # target edge probability p_pa(v)(x_v) (speculative sampling on a sampled chain: min(1, p / q)); 1 at the root.
    accept: torch.Tensor | None = None
    # (N,) the target edge probabilities p_pa(v)(x_v) where the verifier read them without the exit law (speculative):
    # the round's record builds its exit law from them instead of normalising the logits again.
    p_edge: torch.Tensor | None = None


class Verifier(Protocol):
    def __call__(
        self, tree: DraftTree, logits: torch.Tensor, cfg: SamplingConfig, gen: torch.Generator,
        anc: torch.Tensor | None = None,
    ) -> Decision: ...


VERIFIERS: dict[str, Verifier] = {}


def register(name: str) -> Callable[[Verifier], Verifier]:
    def put(fn: Verifier) -> Verifier:
        VERIFIERS[name] = fn
        return fn

    return put


def get_verifier(name: str) -> Verifier:
    """The verifier registered under `name`."""
    if name not in VERIFIERS:
        raise TevvizError(f"unknown verifier {name!r}; choose one of {', '.join(VERIFIERS)}")
    return VERIFIERS[name]


def bonus_from(
    tree: DraftTree, logits: torch.Tensor, cfg: SamplingConfig, node: torch.Tensor, gen: torch.Generator
) -> torch.Tensor:
    """Y ~ p_v_res at `node` (p_v itself at a leaf), normalising only that one row."""
    row = processed_probs(logits.index_select(0, node.view(1)), cfg)[0]  # (V,)
    return sample_categorical(_or_row(law.residual(tree, row, node), row), gen)


@register("tev")
def tev(tree, logits, cfg, gen, anc=None) -> Decision:
    """Tree Exit Verification (paper Algorithm 1): exit V ~ w over all nodes at once, then Y ~ p_V_res.

    One pass over the (N, V) logits for the rows' log-normalisers; the edge probabilities and the
    exit row are read from it, so the bonus row is not processed a second time. No per-node samples
    and no host round trip.
    """
    if tree.size == 1:
        return _root_alone(logits, cfg, gen)
    if cfg.greedy:
        # w is one-hot at T = 0 (P and rho are 0 or 1, siblings being distinct): the exit is its argmax and
        # the bonus the argmax there, which no child carries. Nothing to sample.
        idx = greedy_rows(logits)
        edge = torch.ones(tree.size, device=logits.device)
        edge[1:] = (idx[tree.parents[1:]] == tree.tokens[1:]).float()
        ex = law.exit_law_from_edges(tree, edge, anc)
        node = ex.w.argmax()
        return Decision(node, idx[node], ex)
    if cfg.top_p < 1:
        ex = law.exit_law_from_logits(tree, logits, cfg, anc)
        node = sample_categorical(ex.w, gen)
        return Decision(node, bonus_from(tree, logits, cfg, node, gen), ex)
    x, lse = log_normalisers(logits, cfg)  # temperature and top-k applied once for every row
    up = tree.parents.clamp(min=0)
    edge = torch.exp(x[up, tree.tokens] - lse[up])
    edge[0] = 1.0
    ex = law.exit_law_from_edges(tree, edge, anc)
    if not float64_sampling(logits.device):
        node = sample_categorical(ex.w, gen)
        return Decision(node, sample_categorical(_residual_or_row(tree, x, lse, node), gen), ex)
    u = torch.rand(2, 1, generator=gen, device=logits.device, dtype=torch.float64)  # the exit's and the bonus's
    node = inverse_cdf(ex.w, u[0])
    return Decision(node, inverse_cdf(_residual_or_row(tree, x, lse, node), u[1]), ex)


def _root_alone(logits: torch.Tensor, cfg: SamplingConfig, gen: torch.Generator) -> Decision:
    """A tree of the root alone (a round without a draft): w = 1 at the root, the bonus ~ p_root, as plain decoding."""
    law_ = torch.ones(4, 1, device=logits.device)
    ex = law.ExitLaw(p_edge=law_[0], P=law_[1], rho=law_[2], w=law_[3], C_p=torch.zeros((), device=logits.device))
    bonus = greedy_rows(logits)[0] if cfg.greedy else sample_categorical(processed_probs(logits, cfg)[0], gen)
    return Decision(torch.zeros((), dtype=torch.long, device=logits.device), bonus, ex)


def _residual_or_row(tree: DraftTree, x: torch.Tensor, lse: torch.Tensor, node: torch.Tensor) -> torch.Tensor:
    """The residual at `node` from processed logits and log-normalisers (see `_or_row`)."""
    at = node.view(1)
    row = torch.exp(x.index_select(0, at)[0] - lse.index_select(0, at))  # p_V, (V,); no host read of the node
    return _or_row(law.residual_of_row(tree, row, node), row)


def _or_row(res: torch.Tensor, row: torch.Tensor) -> torch.Tensor:
    # p_v itself where the residual rounds to zero mass; such a node has w = 0 and is drawn with probability 0.
    return torch.where(res.sum() > 0, res, row)


def _follow(tree: DraftTree, draws: torch.Tensor, anc: torch.Tensor) -> torch.Tensor:
    """Deepest node reached by following, from the root, the child whose token equals the parent's draw."""
    match = tree.tokens == draws[tree.parents.clamp(min=0)]
    match[0] = True
    # A node is reached when every node on its path matched; reached nodes form one chain from the root.
    reached = ~(anc & ~match.unsqueeze(0)).any(dim=-1)
    return torch.where(reached, tree.depths, -1).argmax()


@register("predraw")
def predraw(tree, logits, cfg, gen, anc=None) -> Decision:
    """Predraw-and-follow (DDTree): one target draw D_v ~ p_v per node, then follow the matching child."""
    anc = ancestor_mask(tree) if anc is None else anc
    # At T = 0 each node's draw is its argmax; drawing it from a one-hot row would cost an (N, V) cumulative sum.
    draws = greedy_rows(logits) if cfg.greedy else sample_categorical(processed_probs(logits, cfg), gen)  # (N,)
    node = _follow(tree, draws, anc)
    return Decision(node, draws[node])


@register("predraw-loop")
def predraw_loop(tree, logits, cfg, gen, anc=None) -> Decision:
    """Predraw-and-follow as reference code writes it: a multinomial draw per node, then a host walk."""
    probs = processed_probs(logits, cfg)
    draws = [int(torch.multinomial(probs[v], 1, generator=gen)) for v in range(tree.size)]
    kids = children(tree)
    tokens = tree.tokens.tolist()
    v = 0
    while True:
        nxt = next((u for u in kids[v] if tokens[u] == draws[v]), None)
        if nxt is None:
            return Decision(torch.tensor(v, device=logits.device), torch.tensor(draws[v], device=logits.device))
        v = nxt


@register("residual")
def residual(tree, logits, cfg, gen, anc=None) -> Decision:
    """Exact sequential residual verification (EAGLE style): test children in draft order, renormalise on rejection."""
    probs = processed_probs(logits, cfg)
    kids = children(tree)
    tokens = tree.tokens.tolist()
    v = 0
    while True:
        g = probs[v].clone()
        for u in kids[v]:
            mass = g.sum()
            accept_p = g[tokens[u]] / mass if mass > 0 else mass
            if float(torch.rand((), generator=gen, device=g.device)) < float(accept_p):
                v = u
                break
            g[tokens[u]] = 0.0
        else:
            node = torch.tensor(v, device=logits.device)
            g = torch.where(g.sum() > 0, g, probs[v])
            return Decision(node, sample_categorical(g, gen))


@register("speculative")
def speculative(tree, logits, cfg, gen, anc=None) -> Decision:
    """Speculative sampling (Leviathan et al. 2023) on a sampled chain: accept node v with probability
    min(1, p(x_v) / q(x_v)); at the first rejection the bonus is drawn from max(0, p - q), renormalised.

    Exact because each node was drawn from the q that the chain carries (`draft_probs`). On a deterministic tree
    each child's q is a point mass on its token and the rule is the residual verifier's, which it then runs.
    """
    if tree.draft_probs is None:
        return residual(tree, logits, cfg, gen, anc)
    if tree.size == 1:
        return _root_alone(logits, cfg, gen)
    n = tree.size
    if not torch.equal(tree.parents, torch.arange(-1, n - 1, device=tree.parents.device)):
        raise TevvizError("the speculative verifier takes a sampled chain (builder 'sampled'), not a branching tree")
    if cfg.greedy:
        return tev(tree, logits, cfg, gen, anc)  # p and q are one-hot: accept while the tokens agree, as TEV does
    dtype = torch.float64 if float64_sampling(logits.device) else torch.float32
    p = processed_probs(logits, cfg).to(dtype)  # (N, V): p_v at every chain node
    q = tree.draft_probs[1:].to(logits.device, dtype)  # (N - 1, V): the law node v was drawn from, v >= 1
    if q.shape[-1] < p.shape[-1]:  # a draft with a narrower output layer: no weight on the ids it lacks
        q = torch.nn.functional.pad(q, (0, p.shape[-1] - q.shape[-1]))
    elif q.shape[-1] > p.shape[-1]:
        raise TevvizError(f"the chain was drawn over {q.shape[-1]} ids, but the target scores {p.shape[-1]}")
    x = tree.tokens[1:].to(logits.device).unsqueeze(1)
    # Normalised in the working precision: the sampler drew x in proportion to q, whatever q's float32 sum.
    p, q = p / p.sum(-1, keepdim=True), q / q.sum(-1, keepdim=True)
    px, qx = p[:-1].gather(1, x)[:, 0], q.gather(1, x)[:, 0]
    accept = (px / qx).clamp(max=1)  # qx > 0: a token of zero draft weight is never drawn
    u = torch.rand(n - 1, generator=gen, device=logits.device, dtype=dtype)
    node = (u < accept).long().cumprod(0).sum()  # the deepest accepted node (node ids are depths in a chain)
    at = node.view(1)
    row = p.index_select(0, at)[0]
    drawn_from = torch.cat([q, torch.zeros_like(q[:1])]).index_select(0, at)[0]
    res = (row - drawn_from).clamp(min=0)  # below the last node nothing was drawn: p itself
    bonus = sample_categorical(_or_row(res, row), gen)
    one = torch.ones(1, device=logits.device)
    # The edges read here, p_{v-1}(x_v), for the record; the exit law itself is left to it, not drawn by drawn.
    return Decision(node, bonus, accept=torch.cat([one, accept.float()]), p_edge=torch.cat([one, px.float()]))
