"""A block drafter's session state (docs/math.md, *Block drafters*): the target features it has read and one
drafting pass a round, whose per-depth rows DDTree's builder turns into the round's tree.

Invariant between rounds: the context positions the drafter has read plus those it holds pending are exactly the
committed tokens before the root; the root (the last committed token) enters only as the block's first token.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .block_model import BlockDraftModel, ContextKV
from .builders import DraftResult, root_only
from .ddtree import ddtree_tree
from .drafters import DrafterKind, DraftRequest, register


@dataclass(frozen=True)
class BlockRows:
    """A block pass's per-depth output: row d - 1 the drafter's log-probabilities of the token at depth d."""

    logprobs: torch.Tensor  # (H, V) float32


def target_features(hidden_states: tuple[torch.Tensor, ...], layer_ids: tuple[int, ...]) -> torch.Tensor:
    """(N, F): the outputs of decoder layers `layer_ids` (hidden_states[l + 1]) of batch row 0, concatenated."""
    return torch.cat([hidden_states[i + 1][0] for i in layer_ids], dim=-1)


def block_rows(model: BlockDraftModel, target, root: int, start: int, depth: int, cache: ContextKV) -> BlockRows:
    """One drafting pass: the block `[root, MASK x (bs - 1)]` at positions start.. over the cached context; the
    target's head on the first `depth` drafted rows only (the head can cost more than the drafter's layers).
    """
    cfg, device = model.block, model.device
    ids = torch.full((1, cfg.block_size), cfg.mask_token_id, dtype=torch.long, device=device)
    ids[0, 0] = root
    embeds = target.get_input_embeddings()(ids).to(model.dtype)
    block_pos = torch.arange(start, start + cfg.block_size, device=device).unsqueeze(0)
    hidden = model(embeds, block_pos, cache=cache)  # (1, bs, H)
    logits = target.get_output_embeddings()(hidden[0, 1 : 1 + depth].to(target.dtype))
    return BlockRows(torch.log_softmax(logits.float(), dim=-1))


class BlockDrafter:
    """The drafter's context cache, the features of committed positions not read yet, and the root token."""

    kind = "block"

    def __init__(self, pair, seed: int):
        self.model: BlockDraftModel = pair.draft
        self.target = pair.target
        self.target_layers = tuple(self.model.block.target_layer_ids)
        self.cache = ContextKV(len(self.model.layers))
        self.pending = None  # (m, F) features of committed positions the drafter has not read yet
        self.read: list[torch.Tensor] = []  # features read into the cache, in order (kept for inspection and tests)
        self.root = 0
        self.start = 0  # the root's position
        self.last: BlockRows | None = None  # the last pass's rows (the app shows the drafter's side of a round)

    @property
    def max_depth(self) -> int:
        """The deepest node a block can draft: bs - 1."""
        return self.model.block.max_depth

    @property
    def features(self) -> torch.Tensor:
        """(n, F): the features of every committed position before the root, read or pending."""
        parts = self.read + ([] if self.pending is None else [self.pending])
        return torch.cat(parts) if parts else torch.zeros(0, 0)

    def prefill(self, prompt_ids: list[int], features: torch.Tensor | None) -> None:
        self.root, self.start = prompt_ids[-1], len(prompt_ids) - 1
        self.pending = features

    def draft(self, request: DraftRequest) -> DraftResult:
        plan = request.plan
        depth = min(request.max_depth, request.builder.max_depth, self.model.block.max_depth)
        device = self.target.device
        if depth <= 0 or (plan is not None and plan.skip_draft):
            return root_only(self.root, self.start, device)
        self._read()
        rows = self.last = block_rows(self.model, self.target, self.root, self.start, depth, self.cache)
        budget = request.builder.keep if plan is None else plan.max_budget
        tree, ranks, rows_top = ddtree_tree(self.root, rows.logprobs[:, : request.width], budget)
        reach = tree.scores
        if plan is not None:
            plan = plan.to(device)
            edge = [0.0] + plan.edge_values(tree.draft_logprobs[1:], ranks[1:]).tolist()
            for v, p in enumerate(tree.parents.tolist()[1:], start=1):  # parents first: one pass sums the paths
                edge[v] += edge[p]
            reach = torch.tensor(edge, device=device)
            keep = plan.best(reach[1:], 1)[0]
            if keep < tree.size - 1:  # pop order is score order: the first k pops are DDTree's tree of budget k
                tree = _first(tree, keep + 1)
                ranks, reach = ranks[: keep + 1], reach[: keep + 1]
        none = torch.full((tree.size,), -1, dtype=torch.long, device=device)
        return DraftResult(tree, none, self.start, 1, ranks, reach, rows_top)

    def _read(self) -> None:
        """Read the pending features into the cache (each position once, at its own position)."""
        if self.pending is not None and self.pending.shape[0] > 0:
            block_rows_read(self.model, self.cache, self.pending)
            self.read.append(self.pending)
        self.pending = None

    def commit(self, drafted: DraftResult, accepted: list[int], bonus: int, features: torch.Tensor | None) -> None:
        kept = features[accepted]  # the root's and the accepted nodes' features, from the verification pass
        self.pending = kept if self.pending is None else torch.cat([self.pending, kept])
        self.start += len(accepted)
        self.root = bonus

    def mark(self) -> object:
        return self.cache.length, len(self.read), self.pending, self.root, self.start

    def rollback(self, mark: object) -> None:
        length, n_read, self.pending, self.root, self.start = mark
        self.cache.crop(length)
        del self.read[n_read:]


def block_rows_read(model: BlockDraftModel, cache: ContextKV, feats: torch.Tensor) -> None:
    """Append the keys and values of context features (m, F) to `cache`, at the positions after it."""
    ctx = model.hidden_norm(model.fc(feats.unsqueeze(0).to(model.dtype)))
    pos = torch.arange(cache.length, cache.length + feats.shape[0], device=model.device).unsqueeze(0)
    cos, sin = model.rotary(ctx, pos)
    for i, layer in enumerate(model.layers):
        k, v = layer.self_attn.kv(ctx, cos, sin)
        cache.append(i, k, v)


def _first(tree, n: int):
    """The tree of its first n nodes (parents come first, so it is closed under ancestors)."""
    from .tree import DraftTree

    return DraftTree(tree.tokens[:n], tree.parents[:n], tree.depths[:n], tree.draft_logprobs[:n], tree.scores[:n])


register(DrafterKind("block", lambda model: isinstance(model, BlockDraftModel), BlockDrafter, "ddtree"))
