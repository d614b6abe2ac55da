"""Tree attention masks and the KV-cache commit (core/kv.py), on caches filled with known numbers."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from conftest import tiny_config
from transformers import DynamicCache, Qwen2Config
from transformers.cache_utils import DynamicLayer

from tevviz.engine import TevvizError
from tevviz.engine.core import kv


def test_additive_mask_is_zero_where_visible_and_the_dtypes_minimum_elsewhere():
    visible = torch.tensor([[True, False], [True, True]])
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        m = kv.additive_mask(visible, dtype)
        lo = torch.finfo(dtype).min
        assert m.shape == (1, 1, 2, 2) and m.dtype == dtype
        assert m[0, 0].tolist() == [[0.0, lo], [0.0, 0.0]]


def test_tree_visibility_shows_the_whole_cache_then_the_ancestors():
    anc = torch.tensor([[True, False, False], [True, True, False], [True, False, True]])
    got = kv.tree_visibility(anc, 2)
    assert got.int().tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 0, 1]]
    assert kv.tree_visibility(anc, 0).tolist() == anc.tolist()


def test_causal_visibility_is_causal_inside_the_block():
    assert kv.causal_visibility(3, 1, "cpu").int().tolist() == [[1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]]


def test_new_cache_has_one_full_layer_per_model_layer():
    cache = kv.new_cache(SimpleNamespace(config=tiny_config("llama", layers=3)))
    assert isinstance(cache, DynamicCache) and [type(x) for x in cache.layers] == [DynamicLayer] * 3
    kv.check_gatherable(cache)


def test_check_gatherable_refuses_other_caches_and_sliding_layers():
    with pytest.raises(TevvizError, match="needs a DynamicCache"):
        kv.check_gatherable(object())
    sliding = Qwen2Config(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                          num_key_value_heads=2, vocab_size=96, use_sliding_window=True, sliding_window=4,
                          max_window_layers=1)
    with pytest.raises(TevvizError, match="layer 1 keeps a DynamicSlidingWindowLayer"):
        kv.check_gatherable(DynamicCache(config=sliding))


def filled(length: int, layers: int = 2) -> DynamicCache:
    """A cache whose keys at position i are i (and values -i) in every head and channel, layer l offset by 100 l."""
    cache = DynamicCache(config=tiny_config("llama", layers=layers))
    pos = torch.arange(float(length)).view(1, 1, length, 1).expand(1, 2, length, 3)
    for layer in range(layers):
        cache.update((pos + 100 * layer).contiguous(), (-pos - 100 * layer).contiguous(), layer)
    return cache


def positions(cache: DynamicCache, layer: int = 0) -> tuple[list[float], list[float]]:
    x = cache.layers[layer]
    return x.keys[0, 1, :, 2].tolist(), x.values[0, 0, :, 0].tolist()


def test_keep_entries_gathers_the_kept_offsets_after_start_and_crops():
    cache = filled(8)
    # Cache of 8 with a tree block from position 3: keep the block's nodes 0, 2, 3 (positions 3, 5, 6).
    kv.keep_entries(cache, 3, [0, 2, 3], 8)
    assert cache.get_seq_length() == 6
    assert positions(cache, 0) == ([0, 1, 2, 3, 5, 6], [0, -1, -2, -3, -5, -6])
    assert positions(cache, 1) == ([100, 101, 102, 103, 105, 106], [-100, -101, -102, -103, -105, -106])


def test_keep_entries_of_a_kept_prefix_only_crops():
    cache = filled(7)
    kv.keep_entries(cache, 2, [0, 1], 7)
    assert positions(cache) == ([0, 1, 2, 3], [0, -1, -2, -3])
    cache = filled(5)
    kv.keep_entries(cache, 2, [0, 1, 2], 5)  # everything kept: nothing to crop
    assert positions(cache) == ([0, 1, 2, 3, 4], [0, -1, -2, -3, -4])


def test_keep_entries_skips_layers_never_written():
    cache = DynamicCache(config=tiny_config("llama", layers=2))
    pos = torch.arange(6.0).view(1, 1, 6, 1).expand(1, 2, 6, 3).contiguous()
    cache.update(pos, -pos, 0)
    kv.keep_entries(cache, 1, [1, 4], 6)
    assert positions(cache) == ([0, 2, 5], [0, -2, -5])
    assert not cache.layers[1].is_initialized
