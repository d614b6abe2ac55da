"""A block drafter's session state (docs/math.md, *Block drafters*): the target features it has read and one
drafting pass a round, whose per-depth rows DDTree's builder turns into the round's tree.

Invariant between rounds: the context positions the drafter has read plus those it holds pending are exactly the
committed tokens before the root; the root (the last committed token) enters only as the block's first token.
"""

from __future__ import annotations

import torch

from .block_model import BlockDraftModel, ContextKV
from .builders import DraftResult
from .ddtree import ddtree_tree
from .draft_result import root_only
from .drafters import DraftRequest


def block_rows(model: BlockDraftModel, target, root: int, start: int, depth: int, cache: ContextKV,
               new_context: torch.Tensor | None) -> torch.Tensor:
    """(depth, V) log-probabilities: one drafting pass of the block `[root, MASK x (bs - 1)]` at positions start..,
    after reading `new_context` (m, F features of the committed positions after the cached ones) into `cache`; the
    target's head on the first `depth` drafted rows only (the head can cost more than the drafter's layers).
    """
    cfg, device = model.block, model.device
    ids = torch.full((1, cfg.block_size), cfg.mask_token_id, dtype=torch.long, device=device)
    ids[0, 0] = root
    embeds = target.get_input_embeddings()(ids).to(model.dtype)
    block_pos = torch.arange(start, start + cfg.block_size, device=device).unsqueeze(0)
    feats = ctx_pos = None
    if new_context is not None and new_context.shape[0] > 0:
        feats = new_context.unsqueeze(0).to(model.dtype)
        ctx_pos = torch.arange(cache.length, cache.length + feats.shape[1], device=device).unsqueeze(0)
    hidden = model(embeds, block_pos, feats, ctx_pos, cache)  # (1, bs, H); the new context's keys join the cache
    logits = target.get_output_embeddings()(hidden[0, 1 : 1 + depth].to(target.dtype))
    return torch.log_softmax(logits.float(), dim=-1)


class BlockDrafter:
    """The drafter's context cache, the features of committed positions not read yet, and the root token."""

    kind = "block"

    def __init__(self, pair, seed: int):
        self.model: BlockDraftModel = pair.draft
        self.target = pair.target
        self.target_layers = tuple(self.model.block.target_layer_ids)
        self.cache = ContextKV(len(self.model.layers))
        self.pending = None  # (m, F) features of committed positions the drafter has not read yet
        self.root = 0
        self.start = 0  # the root's position

    @property
    def max_depth(self) -> int:
        """The deepest node a block can draft: bs - 1."""
        return self.model.block.max_depth

    def prefill(self, prompt_ids: list[int], features: torch.Tensor | None) -> None:
        self.root, self.start = prompt_ids[-1], len(prompt_ids) - 1
        self.pending = features

    def draft(self, request: DraftRequest) -> DraftResult:
        plan = request.plan
        depth = min(request.max_depth, request.builder.max_depth, self.model.block.max_depth)
        device = self.target.device
        if depth <= 0 or (plan is not None and plan.skip_draft):
            return root_only(self.root, self.start, device)
        rows = block_rows(self.model, self.target, self.root, self.start, depth, self.cache, self.pending)
        self.pending = None  # read: the cache now holds every committed position before the root
        budget = request.builder.keep if plan is None else plan.max_budget
        tree, ranks, rows_top = ddtree_tree(self.root, rows[:, : request.width], budget)
        reach = tree.scores
        if plan is not None:
            plan = plan.to(device)
            edge = [0.0] + plan.edge_values(tree.draft_logprobs[1:], ranks[1:]).tolist()
            for v, p in enumerate(tree.parents.tolist()[1:], start=1):  # parents first: one pass sums the paths
                edge[v] += edge[p]
            reach = torch.tensor(edge, device=device)
            # The tree kept is DDTree's first k pops (its tree of budget k), so the first k are what is priced.
            keep = plan.best(reach[1:], 1, in_order=True)[0]
            if keep < tree.size - 1:  # pop order is score order: the first k pops are DDTree's tree of budget k
                tree = _first(tree, keep + 1)
                ranks, reach = ranks[: keep + 1], reach[: keep + 1]
        none = torch.full((tree.size,), -1, dtype=torch.long, device=device)
        return DraftResult(tree, none, self.start, 1, ranks, reach, rows_top)

    def commit(self, drafted: DraftResult, accepted: list[int], bonus: int, features: torch.Tensor | None) -> None:
        kept = features[accepted]  # the root's and the accepted nodes' features, from the verification pass
        self.pending = kept if self.pending is None else torch.cat([self.pending, kept])
        self.start += len(accepted)
        self.root = bonus

    def mark(self) -> object:
        return self.cache.length, self.pending, self.root, self.start

    def rollback(self, mark: object) -> None:
        length, self.pending, self.root, self.start = mark
        self.cache.crop(length)


def _first(tree, n: int):
    """The tree of its first n nodes (parents come first, so it is closed under ancestors)."""
    from ..core.tree import DraftTree

    return DraftTree(tree.tokens[:n], tree.parents[:n], tree.depths[:n], tree.draft_logprobs[:n], tree.scores[:n])

