"""Training a block drafter on target-written text (docs/math.md, *Training a block drafter*).

Random anchors in each sequence; each block `[token at anchor, MASK x (bs - 1)]` sits at positions anchor.. and
sees the target's features of the positions before its anchor and itself (bidirectionally), other blocks not;
slot k >= 1 predicts the token at anchor + k, its cross-entropy decayed by depth `exp(-(k - 1) / gamma)`.
The target's embedding and head are shared and frozen.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..draft.block_model import BlockDraftModel


@dataclass(frozen=True)
class BlockBatch:
    """Blocks of a batch of sequences, ready for one forward."""

    ctx_feats: torch.Tensor  # (S, L, F) the target's features of each sequence
    ctx_pos: torch.Tensor  # (S, L)
    block_ids: torch.Tensor  # (S, A * bs) the blocks' input tokens
    block_pos: torch.Tensor  # (S, A * bs)
    mask: torch.Tensor  # (S, A * bs, L + A * bs) bool: what each block row sees
    labels: torch.Tensor  # (S, A, bs - 1) the tokens at anchor + 1 .. anchor + bs - 1


def block_batch(tokens: torch.Tensor, feats: torch.Tensor, anchors: torch.Tensor, block_size: int,
                mask_id: int) -> BlockBatch:
    """Blocks at `anchors` (S, A) of sequences `tokens` (S, L) with target features `feats` (S, L, F)."""
    s, length = tokens.shape
    a, bs = anchors.shape[1], block_size
    device = tokens.device
    k = torch.arange(bs, device=device)
    pos = anchors.unsqueeze(-1) + k  # (S, A, bs)
    ids = torch.full((s, a, bs), mask_id, dtype=torch.long, device=device)
    ids[..., 0] = tokens.gather(1, anchors)
    labels = tokens.gather(1, pos[..., 1:].reshape(s, -1)).view(s, a, bs - 1)
    ctx_visible = torch.arange(length, device=device).view(1, 1, 1, length) < anchors.view(s, a, 1, 1)
    ctx_visible = ctx_visible.expand(s, a, bs, length).reshape(s, a * bs, length)
    own = torch.arange(a, device=device).repeat_interleave(bs)
    block_visible = (own.view(-1, 1) == own.view(1, -1)).expand(s, -1, -1)
    mask = torch.cat([ctx_visible, block_visible], dim=-1)
    ctx_pos = torch.arange(length, device=device).expand(s, -1)
    return BlockBatch(feats, ctx_pos, ids.view(s, -1), pos.view(s, -1), mask, labels)


def padded_blocks(tokens: list[torch.Tensor], feats: list[torch.Tensor], anchors: torch.Tensor, block_size: int,
                  mask_id: int) -> BlockBatch:
    """Blocks at `anchors` (S, A) of sequences of different lengths (L_i,) with features (L_i, F), right-padded;
    a label past its sequence's end is -100 (cross-entropy ignores it)."""
    width = max(t.numel() for t in tokens) + block_size  # room for every block's labels
    device = feats[0].device
    ids = torch.zeros(len(tokens), width, dtype=torch.long, device=device)
    ctx = torch.zeros(len(tokens), width, feats[0].shape[-1], dtype=feats[0].dtype, device=device)
    lengths = torch.tensor([t.numel() for t in tokens], device=device)
    for r, (t, f) in enumerate(zip(tokens, feats)):
        ids[r, : t.numel()], ctx[r, : t.numel()] = t, f
    batch = block_batch(ids, ctx, anchors, block_size, mask_id)
    pos = anchors.unsqueeze(-1) + torch.arange(1, block_size, device=device)
    labels = batch.labels.masked_fill(pos >= lengths.view(-1, 1, 1), -100)
    return BlockBatch(batch.ctx_feats, batch.ctx_pos, batch.block_ids, batch.block_pos, batch.mask, labels)


def block_logits(model: BlockDraftModel, target, batch: BlockBatch, depth: int | None = None) -> torch.Tensor:
    """(S, A, D, V) the drafter's logits of depths 1..D (D = bs - 1 unless `depth` is smaller)."""
    s, a, d_all = batch.labels.shape
    d = d_all if depth is None else min(depth, d_all)
    embeds = target.get_input_embeddings()(batch.block_ids).to(model.dtype)
    hidden = model(embeds, batch.block_pos, batch.ctx_feats.to(model.dtype), batch.ctx_pos, mask=batch.mask)
    # One 2-D matrix product: a strided 4-D view would make torch.matmul expand the head into a batched
    # product (measured 5-8x slower on a CPU, and its strided logits slow the softmax after it).
    rows = hidden.view(s, a, d_all + 1, -1)[:, :, 1 : 1 + d].reshape(s * a * d, -1)
    return target.get_output_embeddings()(rows.to(target.dtype)).float().view(s, a, d, -1)


def depth_weights(depths: int, gamma: float | None, device=None) -> torch.Tensor:
    """(D,) exp(-(k - 1) / gamma) for k = 1..D (all ones without gamma)."""
    k = torch.arange(depths, dtype=torch.float32, device=device)
    return torch.ones_like(k) if not gamma else torch.exp(-k / gamma)


def block_loss(logits: torch.Tensor, labels: torch.Tensor, gamma: float | None) -> torch.Tensor:
    """The depth-decayed cross-entropy: sum(w_k CE_k) / sum(w_k) over every block slot."""
    d = logits.shape[2]
    ce = F.cross_entropy(logits.flatten(0, 2), labels[:, :, :d].flatten(), reduction="none").view(labels.shape[0],
                                                                                                 labels.shape[1], d)
    w = depth_weights(d, gamma, logits.device) * (labels[:, :, :d] != -100)
    return (ce * w).sum() / w.sum().clamp(min=1e-12)


def chain_acceptance(logits: torch.Tensor, labels: torch.Tensor) -> list[float]:
    """Share of blocks whose top-1 rows match the labels at depths 1..d, for each d (T = 0 chain acceptance)."""
    d = logits.shape[2]
    hit = (logits.argmax(-1) == labels[:, :, :d]).float().flatten(0, 1)  # (S * A, D)
    return torch.cumprod(hit, dim=1).mean(0).tolist()

