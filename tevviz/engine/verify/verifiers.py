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


@register("tev")
def tev(tree, logits, cfg, gen, anc=None) -> Decision:
    """Tree Exit Verification (paper Algorithm 1): exit V ~ w over all nodes at once, then Y ~ p_V_res.

    One softmax over the (N, V) logits; the edge probabilities and the exit row are read from it, so the bonus
    row is not processed a second time. No per-node samples and no host round trip.
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
    p = processed_probs(logits, cfg)  # temperature, top-k and top-p applied once for every row
    edge = p[tree.parents.clamp(min=0), tree.tokens]
    edge[0] = 1.0
    ex = law.exit_law_from_edges(tree, edge, anc)
    if not float64_sampling(logits.device):
        node = sample_categorical(ex.w, gen)
        return Decision(node, sample_categorical(_residual_or_row(tree, p, node), gen), ex)
    u = torch.rand(2, 1, generator=gen, device=logits.device, dtype=torch.float64)  # the exit's and the bonus's
    node = inverse_cdf(ex.w, u[0])
    return Decision(node, inverse_cdf(_residual_or_row(tree, p, node), u[1]), ex)


def _root_alone(logits: torch.Tensor, cfg: SamplingConfig, gen: torch.Generator) -> Decision:
    """A tree of the root alone (a round without a draft): w = 1 at the root, the bonus ~ p_root, as plain decoding."""
    law_ = torch.ones(4, 1, device=logits.device)
    ex = law.ExitLaw(p_edge=law_[0], P=law_[1], rho=law_[2], w=law_[3], C_p=torch.zeros((), device=logits.device))
    bonus = greedy_rows(logits)[0] if cfg.greedy else sample_categorical(processed_probs(logits, cfg)[0], gen)
    return Decision(torch.zeros((), dtype=torch.long, device=logits.device), bonus, ex)


def _residual_or_row(tree: DraftTree, p: torch.Tensor, node: torch.Tensor) -> torch.Tensor:
    """The residual at `node` from the processed rows `p` (N, V) (see `_or_row`)."""
    row = p.index_select(0, node.view(1))[0]  # p_V, (V,); no host read of the node
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
    if tree.parents.tolist() != list(range(-1, n - 1)):
        raise TevvizError("the speculative verifier takes a sampled chain (builder 'sampled'), not a branching tree")
    if cfg.greedy:
        return tev(tree, logits, cfg, gen, anc)  # p and q are one-hot: accept while the tokens agree, as TEV does
    device = logits.device
    dtype = torch.float64 if float64_sampling(device) else torch.float32
    p = processed_probs(logits, cfg)  # (N, V): p_v at every chain node
    q = tree.draft_probs[1:].to(device)  # (N - 1, V): the law node v was drawn from, v >= 1
    if q.shape[-1] > p.shape[-1]:
        raise TevvizError(f"the chain was drawn over {q.shape[-1]} ids, but the target scores {p.shape[-1]}")
    x = tree.tokens[1:].to(device).unsqueeze(1)
    # The few numbers the walk needs, read in one host copy: p(x) and q(x), each row's total in the working
    # precision, by which they are normalised where they are read (the sampler drew x in proportion to q, whatever
    # q's float32 sum), and the uniforms. Right after the target pass every tensor op runs on cold caches at several
    # times its warm cost, so the walk down the chain is a few lines of host arithmetic rather than a dozen ops on
    # the device; on an accelerator that is one more wait for it in the round (the round waits for the decision).
    u = torch.rand(n - 1, 1, generator=gen, device=device, dtype=dtype)
    rows = torch.cat([p[:-1].gather(1, x).to(dtype), q.gather(1, x).to(dtype),
                      p[:-1].sum(-1, keepdim=True, dtype=dtype), q.sum(-1, keepdim=True, dtype=dtype), u], 1).tolist()
    accept, p_edge, node = [1.0], [1.0], 0
    for v, (px, qx, p_total, q_total, u_v) in enumerate(rows, start=1):
        # p(x) / q(x), both normalised; qx > 0 where the chain drew x (a hand-made law with q(x) = 0 accepts)
        accept.append(min(1.0, px * q_total / (p_total * qx)) if qx > 0 else 1.0)
        p_edge.append(px / p_total)
        if node == v - 1 and u_v < accept[v]:
            node = v  # the deepest node reached by accepting every node above it
    row = p[node].to(dtype)
    if node < n - 1:
        # The bonus ~ max(0, p/P - q/Q), drawn as max(0, p - q P/Q) in the working precision (where p and q nearly
        # cancel, float32 would not do): the sampler normalises what it is given. Below the last node nothing was
        # drawn: the residual is p there.
        p_total, q_total = rows[node][2:4]
        res = row.clone()
        res[: q.shape[-1]].sub_(q[node], alpha=p_total / q_total)  # a narrower draft output layer: nothing past it
        row = _or_row(res.clamp_(min=0), row)
    bonus = sample_categorical(row, gen)
    # The edges read here, p_{v-1}(x_v), for the record; the exit law itself is left to it, not drawn by drawn.
    return Decision(torch.tensor(node, device=device), bonus, accept=torch.tensor(accept, device=device),
                    p_edge=torch.tensor(p_edge, device=device))
