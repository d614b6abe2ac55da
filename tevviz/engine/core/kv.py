"""Attention masks for tree forwards and the KV-cache commit (gather, then crop)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from ..errors import TevvizError


def additive_mask(visible: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(1, 1, q, kv) float mask in the model's dtype: 0 where visible, the dtype's minimum elsewhere.

    A bool or 3-D mask is read differently by eager attention and by some models (GPT-2); an additive
    4-D mask means the same thing to all of them.
    """
    mask = torch.zeros(visible.shape, dtype=dtype, device=visible.device)
    mask.masked_fill_(~visible, torch.finfo(dtype).min)
    return mask[None, None]


def tree_visibility(anc: torch.Tensor, past_length: int) -> torch.Tensor:
    """(q, past + q) bool: every query sees the whole cache and its own ancestors in the block."""
    ones = torch.ones(anc.shape[0], past_length, dtype=torch.bool, device=anc.device)
    return torch.cat([ones, anc], dim=-1)


def causal_visibility(q: int, past_length: int, device) -> torch.Tensor:
    """(q, past + q) bool for a plain left-to-right block on top of a cache."""
    block = torch.ones(q, q, dtype=torch.bool, device=device).tril_()
    return tree_visibility(block, past_length)


def new_cache(model) -> DynamicCache:
    """An empty dynamic cache for `model`."""
    return DynamicCache(config=model.config)


def check_gatherable(cache) -> None:
    """Refuse caches whose entries cannot be gathered by position (sliding windows, recurrent state)."""
    if not isinstance(cache, DynamicCache):
        raise TevvizError(f"tree decoding needs a DynamicCache; this model returned {type(cache).__name__}")
    for i, layer in enumerate(cache.layers):
        if type(layer) is not DynamicLayer:
            raise TevvizError(
                f"layer {i} keeps a {type(layer).__name__} cache (sliding window or recurrent state), whose entries "
                "cannot be gathered along a tree path; tevviz supports full-attention models only"
            )


def keep_entries(cache: DynamicCache, start: int, keep: Sequence[int], length: int) -> None:
    """Keep cache entries start + keep (ascending offsets) in place of [start, length), then crop the rest."""
    m = len(keep)
    # A kept prefix (a chain, or an exit at depth <= 1) is already in place: only the crop is needed, which
    # spares two gathers per layer in the rounds that small trees at T = 1 are made of.
    if list(keep) != list(range(m)):
        idx = None
        for layer in cache.layers:
            if not layer.is_initialized:
                continue
            if idx is None or idx.device != layer.keys.device:
                idx = torch.tensor(keep, dtype=torch.long, device=layer.keys.device) + start
            # Gathered first (a copy), so the in-place write may overlap its source.
            layer.keys[..., start : start + m, :] = layer.keys.index_select(-2, idx)
            layer.values[..., start : start + m, :] = layer.values.index_select(-2, idx)
    drop = length - (start + m)
    if drop > 0:
        cache.crop(-drop)
