"""Block drafters in DFlash's layout for the tests: a config.json as DFlash writes it, random weights under its
names, a folder holding both, a Qwen3 target for them, and the DDTree decode config the block tests run."""

from __future__ import annotations

import json

import torch
from conftest import VOCAB
from safetensors.torch import save_file

from tevviz.engine import BuilderConfig, DecodeConfig, SamplingConfig

BS = 6  # block size of the test drafters: the root and 5 drafted depths
HIDDEN = 32


def dflash_config(layer_ids=(0, 2), hidden=HIDDEN, vocab=VOCAB, mask=VOCAB - 2, arch="DFlashDraftModel",
                  layers=1) -> dict:
    """A config.json as DFlash writes it: a Qwen3 decoder config plus the block fields."""
    return {"architectures": [arch], "model_type": "qwen3", "hidden_size": hidden, "intermediate_size": 64,
            "num_hidden_layers": layers, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
            "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "max_position_embeddings": 512, "vocab_size": vocab,
            "attention_bias": False, "tie_word_embeddings": True, "block_size": BS, "num_target_layers": 3,
            "dflash_config": {"mask_token_id": mask, "target_layer_ids": list(layer_ids)}}


def dflash_weights(cfg: dict, seed: int) -> dict[str, torch.Tensor]:
    """Random weights under DFlash's names: no embedding, no head."""
    g = torch.Generator().manual_seed(seed)
    h, heads, kv, hd, inter = (cfg[k] for k in ("hidden_size", "num_attention_heads", "num_key_value_heads",
                                                  "head_dim", "intermediate_size"))
    rnd = lambda *shape: torch.randn(*shape, generator=g) * 0.3
    n_ids = len(cfg["dflash_config"]["target_layer_ids"])
    w = {"fc.weight": rnd(h, n_ids * h), "hidden_norm.weight": torch.ones(h), "norm.weight": torch.ones(h)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"layers.{i}."
        w |= {p + "input_layernorm.weight": torch.ones(h), p + "post_attention_layernorm.weight": torch.ones(h),
              p + "self_attn.q_proj.weight": rnd(heads * hd, h), p + "self_attn.k_proj.weight": rnd(kv * hd, h),
              p + "self_attn.v_proj.weight": rnd(kv * hd, h), p + "self_attn.o_proj.weight": rnd(h, heads * hd),
              p + "self_attn.q_norm.weight": torch.ones(hd), p + "self_attn.k_norm.weight": torch.ones(hd),
              p + "mlp.gate_proj.weight": rnd(inter, h), p + "mlp.up_proj.weight": rnd(inter, h),
              p + "mlp.down_proj.weight": rnd(h, inter)}
    return w


def write_drafter(folder, cfg: dict, seed: int = 0, weights: dict | None = None):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg))
    save_file(dflash_weights(cfg, seed) if weights is None else weights, str(folder / "model.safetensors"))
    return folder


def qwen3_target(seed: int, layers: int = 3):
    from transformers import AutoModelForCausalLM, Qwen3Config

    torch.manual_seed(seed)
    cfg = Qwen3Config(hidden_size=HIDDEN, intermediate_size=64, num_hidden_layers=layers, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=8, max_position_embeddings=512, vocab_size=VOCAB,
                      eos_token_id=VOCAB - 1, bos_token_id=VOCAB - 1, pad_token_id=VOCAB - 1,
                      tie_word_embeddings=False)
    model = AutoModelForCausalLM.from_config(cfg)
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(6.0)  # sharp rows: drafts get accepted
    return model.eval()


def greedy_cfg(verifier: str, n: int = 40, budget: int = 24) -> DecodeConfig:
    return DecodeConfig(sampling=SamplingConfig(temperature=0.0), verifier=verifier, max_new_tokens=n,
                        builder=BuilderConfig(name="ddtree", budget=budget, depth=BS - 1), stop_on_eos=False)
