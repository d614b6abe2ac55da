"""The optimal tree of a round (docs/math.md, *The optimal tree*): the top-B target prefixes of length <= H.

Best-first expansion with the target's own distributions. The prefixes evaluated in pass k are all
at depth k (a node is selected only once its parent has been evaluated), so at most H target
passes are needed, each over the newly selected nodes only, under tree attention on a private
copy of the cache: a live session is never touched.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
from transformers import DynamicCache

from ..errors import TevvizError
from ..records.records import OptimalTree
from .kv import additive_mask, new_cache
from .sampling import SamplingConfig, processed_probs

# Target distributions after each requested node, (n, V). A request is (parent, token, depth): parent
# is the order in which that parent was itself evaluated (None for the root), so ids stay stable.
Expand = Callable[[list[tuple[int | None, int, int]]], torch.Tensor]


def top_prefixes(expand: Expand, budget: int, depth: int) -> tuple[list[int], list[int], list[int], list[float], int]:
    """(tokens, parents, depths, P) of the optimal tree below a root (token -1 here), and the passes used.

    The order is P descending, then depth, then token id, then the parent's place: a parent
    precedes its child, so every top-B set is prefix-closed, and what leaves the top B never
    returns (the candidates only grow), so only the kept nodes and their children are tracked.
    """
    if budget < 0 or depth < 0:
        raise TevvizError("the optimal tree needs a budget and a depth of at least 0")
    # The pool: root first, then the kept nodes in order, then the candidates of this pass.
    tok, par, dep, P, ev = [-1], [-1], [0], [1.0], [None]  # ev: evaluation id once expanded
    next_ev, passes, frontier = 0, 0, [0] if budget and depth else []
    while frontier:
        probs = expand([(None if par[u] < 0 else ev[par[u]], tok[u], dep[u]) for u in frontier]).double()
        passes += 1
        for u in frontier:
            ev[u], next_ev = next_ev, next_ev + 1
        base = torch.tensor([P[u] for u in frontier], dtype=torch.float64, device=probs.device)
        values, ids = (probs * base[:, None]).topk(min(budget, probs.shape[-1]), dim=-1)  # top-B children by P
        for u, row_p, row_t in zip(frontier, values.tolist(), ids.tolist()):
            for q, t in zip(row_p, row_t):
                if q <= 0:
                    break
                tok.append(t), par.append(u), dep.append(dep[u] + 1), P.append(q), ev.append(None)
        # Pool order (parents before children) breaks the last ties: a parent's place is fixed before its children's.
        kept = sorted(range(1, len(tok)), key=lambda u: (-P[u], dep[u], tok[u], par[u]))[:budget]
        nodes = [0] + sorted(kept)  # a parent has a smaller pool id than its child
        new = {u: i for i, u in enumerate(nodes)}
        tok, dep, P, ev = ([xs[u] for u in nodes] for xs in (tok, dep, P, ev))
        par = [-1] + [new[par[u]] for u in nodes[1:]]
        frontier = [i for i in range(1, len(nodes)) if ev[i] is None and dep[i] < depth]
    return tok, par, dep, P, passes


class _TargetExpander:
    """Target distributions of requested nodes, one forward per call over them on a private cache."""

    def __init__(self, target, context: list[int], sampling: SamplingConfig, cache: DynamicCache | None):
        self.target, self.sampling, self.device = target, sampling, target.device
        self.root, self.past = context[-1], len(context) - 1
        self.cache = _prefix_copy(target, cache, self.past) if cache is not None else new_cache(target)
        if cache is None and self.past > 0:
            target(input_ids=torch.tensor([context[:-1]], device=self.device), cache=self.cache, use_cache=True)
        self.parent: list[int] = []  # per evaluated node (in evaluation order = cache slot), its parent's slot

    def __call__(self, requests: list[tuple[int | None, int, int]]) -> torch.Tensor:
        n, m = len(requests), len(self.parent)
        visible = torch.zeros(n, self.past + m + n, dtype=torch.bool)
        visible[:, : self.past] = True
        for i, (a, _, _) in enumerate(requests):
            visible[i, self.past + m + i] = True
            while a is not None and a >= 0:
                visible[i, self.past + a] = True
                a = self.parent[a]
        self.parent.extend(-1 if a is None else a for a, _, _ in requests)
        ids = [self.root if a is None else t for a, t, _ in requests]
        pos = [self.past + d for _, _, d in requests]
        out = self.target(input_ids=torch.tensor([ids], device=self.device),
                          attention_mask=additive_mask(visible.to(self.device), self.target.dtype),
                          position_ids=torch.tensor([pos], device=self.device), cache=self.cache, use_cache=True)
        return processed_probs(out.logits[0], self.sampling)


def _prefix_copy(model, cache: DynamicCache, length: int) -> DynamicCache:
    """A new cache that starts as the first `length` entries of `cache`; appending to it never writes to `cache`."""
    if cache.get_seq_length() < length:
        raise TevvizError(f"the cache holds {cache.get_seq_length()} positions, fewer than the context's {length}")
    out = new_cache(model)
    for i, layer in enumerate(cache.layers):
        if layer.is_initialized:
            # Views: a dynamic layer concatenates on update, so the live tensors are only ever read.
            out.update(layer.keys[..., :length, :], layer.values[..., :length, :], i)
    return out


@torch.inference_mode()
def optimal_tree(target, tokenizer, context: list[int], sampling: SamplingConfig, budget: int, depth: int,
                 cache: DynamicCache | None = None) -> OptimalTree:
    """The optimal tree below `context[-1]` (the round's root) with the target's processed distributions.

    `cache`, if given, holds at least `context[:-1]` and is only read; otherwise the prefix is prefilled.
    """
    if not context:
        raise TevvizError("the optimal tree needs a context")
    t0 = time.perf_counter()
    tok, par, dep, P, passes = top_prefixes(_TargetExpander(target, context, sampling, cache), budget, depth)
    tok[0] = context[-1]
    texts = tokenizer.batch_decode([[t] for t in tok]) if tokenizer is not None else [""] * len(tok)
    return OptimalTree(tokens=tok, texts=texts, parents=par, depths=dep, P=P, budget=budget, depth=depth,
                       ms=(time.perf_counter() - t0) * 1e3, passes=passes)
