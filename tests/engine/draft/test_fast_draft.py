"""The written-out draft forward (engine/draft/fast_draft.py): the model's own laws on the same tokens, positions and
tree visibility, a cache read like the model's, and a fall back to the model's modules for everything it does not
cover."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_model, tiny_pair
from transformers import AutoModelForCausalLM, LlamaConfig

from tevviz.engine.core.kv import causal_visibility, keep_entries, new_cache
from tevviz.engine.draft import fast_draft
from tevviz.engine.draft.autoregressive_drafting import AutoregressiveDrafter
from tevviz.engine.draft.builders import BuilderConfig, ModelStep, draft_levels
from tevviz.engine.draft.fast_draft import MIN_CAPACITY, LlamaStep, StaticKV, fast_step, unsupported


def _biased_qwen2(seed: int):
    model = tiny_model("qwen2", seed)
    with torch.no_grad():  # Qwen2's q/k/v carry biases (zero at init): make them count
        for layer in model.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                proj.bias.normal_(0, 0.5)
    return model


@pytest.mark.parametrize("make", [lambda: tiny_model("llama", 3), lambda: _biased_qwen2(4)], ids=["llama", "qwen2"])
def test_the_written_out_forward_gives_the_models_own_laws_on_a_tree(make):
    model = make()
    ref, fast = ModelStep(model, new_cache(model)), LlamaStep(model)
    context = torch.arange(5, 5 + 40) % 90
    vis = causal_visibility(40, 0, "cpu")
    for step in (ref, fast):  # the context, then one tree level of 5 siblings and one of their children
        step.out = [step(context, torch.arange(40), vis, None)]
        tokens = torch.tensor([7, 8, 9, 10, 11])
        level = torch.cat([torch.ones(5, 40, dtype=torch.bool), torch.eye(5, dtype=torch.bool)], dim=1)
        step.out.append(step(tokens, torch.full((5,), 40), level, None))
        below = torch.cat([torch.ones(1, 40, dtype=torch.bool), torch.tensor([[False, False, True, False, False]]),
                           torch.ones(1, 1, dtype=torch.bool)], dim=1)
        step.out.append(step(torch.tensor([12]), torch.tensor([41]), below, None))
    for a, b in zip(ref.out, fast.out):
        assert torch.allclose(a, b, atol=1e-4, rtol=1e-4), (a - b).abs().max()
    for i, layer in enumerate(fast.cache.layers):
        assert torch.allclose(layer.keys, ref.cache.layers[i].keys, atol=1e-5)
        assert torch.allclose(layer.values, ref.cache.layers[i].values, atol=1e-5)


def test_the_cache_grows_past_its_first_buffers_and_keeps_and_crops_like_the_models():
    model = tiny_model("llama", 5)
    ref, fast = ModelStep(model, new_cache(model)), LlamaStep(model)
    n = MIN_CAPACITY + 30  # past the first buffers: the entries are copied into larger ones
    ids = torch.arange(n) % 90
    for step in (ref, fast):
        step(ids, torch.arange(n), causal_visibility(n, 0, "cpu"), None)
        keep_entries(step.cache, n - 10, [1, 4, 6], n)  # a tree's accepted path kept, the rest cropped
    assert fast.cache.get_seq_length() == ref.cache.get_seq_length() == n - 7
    for a, b in zip(fast.cache.layers, ref.cache.layers):
        assert torch.allclose(a.keys, b.keys, atol=1e-5) and torch.allclose(a.values, b.values, atol=1e-5)
    fast.cache.crop(-3)
    assert fast.cache.get_seq_length() == n - 10 and fast.cache.layers[0].keys.shape[-2] == n - 10
    with pytest.raises(ValueError):  # as the model's own cache: a count to drop, never a length to keep
        fast.cache.crop(4)


def test_a_draft_tree_is_the_same_through_either_forward():
    model = tiny_model("llama", 6)
    pending = [3, 17, 22, 41, 9]
    cfg = BuilderConfig(budget=12, depth=4, width=4)
    slow = draft_levels(ModelStep(model, new_cache(model)), pending, cfg)
    fast = draft_levels(LlamaStep(model), pending, cfg)
    assert torch.equal(slow.tree.tokens, fast.tree.tokens) and torch.equal(slow.tree.parents, fast.tree.parents)
    assert torch.allclose(slow.tree.scores, fast.tree.scores, atol=1e-4)


def test_what_it_does_not_cover_drafts_through_the_models_modules():
    assert "model type 'gpt2'" in unsupported(tiny_model("gpt2", 1))
    cfg = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                      vocab_size=100, rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 1e4})
    assert "RoPE of type 'dynamic'" in unsupported(AutoModelForCausalLM.from_config(cfg))
    assert fast_step(tiny_model("gpt2", 1)) is None
    pair = tiny_pair("gpt2")
    assert isinstance(AutoregressiveDrafter(pair, 0).step, ModelStep)


def test_a_model_whose_forward_disagrees_is_not_written_out(monkeypatch):
    model = tiny_model("llama", 7)
    forward = model.forward

    def shifted(*args, **kwargs):  # a family member that does something the written-out forward does not
        out = forward(*args, **kwargs)
        out.logits = out.logits + torch.arange(out.logits.shape[-1], dtype=out.logits.dtype)
        return out

    monkeypatch.setattr(model, "forward", shifted)
    assert fast_step(model) is None
    monkeypatch.setattr(fast_draft, "ENABLED", False)
    assert fast_step(tiny_model("llama", 8)) is None  # TEVVIZ_FAST_DRAFT=0: always the model's modules


def test_the_session_drafts_through_the_written_out_forward_for_a_llama_draft():
    pair = tiny_pair("llama")
    drafter = AutoregressiveDrafter(pair, 0)
    assert isinstance(drafter.step, LlamaStep) and isinstance(drafter.cache, StaticKV)
