"""Block drafters in DFlash's checkpoint layout (docs/math.md, *Block drafters*): the module, its loader and writer.

A block drafter drafts every depth of a block in one pass: the block `[root, MASK x (bs - 1)]` (the target's
embedding) attends bidirectionally to itself and to the target's hidden states of the committed context
(`target_layer_ids`, concatenated, projected by `fc`, normalised by `hidden_norm`); the final `norm`, then the
target's own head, gives row d - 1 = the drafter's marginal law of the token at depth d. Written here from the
published layout; no remote code.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import TevvizError
from .block_fields import check_block_fields

ARCHITECTURE = "DFlashDraftModel"
WEIGHTS = "model.safetensors"


@dataclass(frozen=True)
class BlockConfig:
    """What a block drafter's config.json says, checked; `raw` is the whole file (a Qwen3 decoder config)."""

    block_size: int  # bs: the root plus bs - 1 drafted depths
    mask_token_id: int
    target_layer_ids: tuple[int, ...]  # decoder layers whose outputs are the context features (hidden_states[l + 1])
    num_target_layers: int | None
    raw: dict

    @property
    def hidden_size(self) -> int:
        return self.raw["hidden_size"]

    @property
    def max_depth(self) -> int:
        return self.block_size - 1


def is_block_config(raw: dict) -> bool:
    """Whether a config.json describes a block drafter (any DFlash-like architecture or a dflash_config)."""
    return "dflash_config" in raw or any("dflash" in str(a).lower() for a in raw.get("architectures") or [])


def default_layer_ids(draft_layers: int, target_layers: int) -> list[int]:
    """DFlash's rule when a config names no ids: the middle layer for one, else spread from 1 to T - 3."""
    if draft_layers == 1:
        return [target_layers // 2]
    return [round(1 + i * (target_layers - 4) / (draft_layers - 1)) for i in range(draft_layers)]


def target_shape(target) -> tuple[int, int, int]:
    """(decoder layers, hidden size, vocabulary rows of the head) of a loaded causal LM, or of its config."""
    if not hasattr(target, "get_input_embeddings"):
        cfg = target.get_text_config()
        return cfg.num_hidden_layers, cfg.hidden_size, cfg.vocab_size
    cfg = target.config.get_text_config()
    return cfg.num_hidden_layers, target.get_input_embeddings().weight.shape[1], \
        target.get_output_embeddings().weight.shape[0]


def parse_config(raw: dict, where: str, target=None) -> BlockConfig:
    """Check a block drafter's config (against `target`, a model or its config, when given); a clear error names
    the field."""
    check_block_fields(raw, where)
    arch = raw.get("architectures") or []
    if arch != [ARCHITECTURE]:
        raise TevvizError(f"{where}: architecture {', '.join(map(str, arch)) or '(none)'} is not a block drafter "
                          f"tevviz can run; it loads {ARCHITECTURE} (DFlash's layout)")
    dcfg = raw.get("dflash_config") or {}
    if not isinstance(dcfg, dict):
        raise TevvizError(f"{where}: dflash_config must be an object (mask_token_id, target_layer_ids), got "
                          f"{type(dcfg).__name__}")
    bs = raw.get("block_size", dcfg.get("block_size"))
    if not isinstance(bs, int) or isinstance(bs, bool) or not 2 <= bs <= 65:
        raise TevvizError(f"{where}: block_size must be an integer in [2, 65], got {bs!r}")
    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size"):
        if not _positive_int(raw.get(key)):
            raise TevvizError(f"{where}: config field {key} must be a positive integer, got {raw.get(key)!r}")
    _check_attention_fields(raw, where)
    n_target = raw.get("num_target_layers")
    ids = dcfg.get("target_layer_ids")
    if ids is None:
        if n_target is None:
            raise TevvizError(f"{where}: dflash_config.target_layer_ids is missing and so is num_target_layers")
        ids = default_layer_ids(raw["num_hidden_layers"], n_target)
    if not isinstance(ids, list) or not ids or any(not isinstance(i, int) or isinstance(i, bool) for i in ids):
        raise TevvizError(f"{where}: dflash_config.target_layer_ids must be a non-empty list of integers, got {ids!r}")
    mask = dcfg.get("mask_token_id", raw.get("mask_token_id"))
    if not isinstance(mask, int) or isinstance(mask, bool):
        raise TevvizError(f"{where}: dflash_config.mask_token_id must be an integer, got {mask!r}")
    cfg = BlockConfig(bs, mask, tuple(ids), n_target, raw)
    import huggingface_hub.errors

    # transformers validates a config with errors of its own (newer releases), and KeyError, ValueError...
    refused = (KeyError, ValueError, TypeError, AttributeError,
               getattr(huggingface_hub.errors, "StrictDataclassError", ValueError))
    try:  # the layers built on the meta device (no memory): what transformers' own checks refuse, said here
        with torch.device("meta"):
            BlockDraftModel(cfg)
    except refused as e:
        said = " ".join(str(e).split())[:300]
        raise TevvizError(f"{where}: config.json does not make a {ARCHITECTURE} ({type(e).__name__}: {said})") \
            from None
    if target is not None:
        check_against_target(cfg, target, where)
    return cfg


def _positive_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 1


def _check_attention_fields(raw: dict, where: str) -> None:
    """The optional decoder fields whose bad values would otherwise fail later, in other words (a division by zero,
    a drafter that loads and then fails at its first draft, a validation error of transformers)."""
    heads = raw["num_attention_heads"]
    for key in ("num_key_value_heads", "head_dim", "max_position_embeddings"):
        if key in raw and raw[key] is not None and not _positive_int(raw[key]):
            raise TevvizError(f"{where}: config field {key} must be a positive integer, got {raw[key]!r}")
    kv = raw.get("num_key_value_heads") or heads
    if heads % kv:
        raise TevvizError(f"{where}: config field num_key_value_heads ({kv}) must divide num_attention_heads "
                          f"({heads})")
    if not raw.get("head_dim") and raw["hidden_size"] % heads:
        raise TevvizError(f"{where}: config field hidden_size ({raw['hidden_size']}) must be a multiple of "
                          f"num_attention_heads ({heads}) when head_dim is not given")
    for key in ("rms_norm_eps", "rope_theta"):
        x = raw.get(key)
        if key in raw and x is not None and (isinstance(x, bool) or not isinstance(x, (int, float)) or not x > 0):
            raise TevvizError(f"{where}: config field {key} must be a positive number, got {x!r}")
    act = raw.get("hidden_act", "silu")
    from transformers.activations import ACT2FN

    if not isinstance(act, str) or act not in ACT2FN:
        raise TevvizError(f"{where}: config field hidden_act {act!r} is not an activation transformers knows "
                          "(silu, gelu, relu...)")


def check_against_target(cfg: BlockConfig, target, where: str) -> None:
    """Refuse a drafter whose layer ids, hidden size, vocabulary or mask token do not fit `target`."""
    layers, hidden, vocab = target_shape(target)
    bad = [i for i in cfg.target_layer_ids if not 0 <= i < layers]
    if bad:
        raise TevvizError(f"{where}: dflash_config.target_layer_ids {bad} lie beyond the target's {layers} layers "
                          f"(ids are 0-based decoder layers, 0 to {layers - 1})")
    if cfg.hidden_size != hidden:
        raise TevvizError(f"{where}: hidden_size {cfg.hidden_size} does not match the target's {hidden}; a block "
                          "drafter reads the target's embedding and hidden states, so the sizes must be equal")
    if cfg.raw["vocab_size"] != vocab:
        raise TevvizError(f"{where}: vocab_size {cfg.raw['vocab_size']} does not match the target's head "
                          f"({vocab} rows)")
    if not 0 <= cfg.mask_token_id < vocab:
        raise TevvizError(f"{where}: dflash_config.mask_token_id {cfg.mask_token_id} lies outside the vocabulary "
                          f"[0, {vocab})")


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos.unsqueeze(1) + rotated * sin.unsqueeze(1)


class ContextKV:
    """Per layer, the keys and values of the context features the drafter has read (batch 1, committed only)."""

    def __init__(self, layers: int):
        self.k: list[torch.Tensor | None] = [None] * layers
        self.v: list[torch.Tensor | None] = [None] * layers

    @property
    def length(self) -> int:
        return 0 if self.k[0] is None else self.k[0].shape[-2]

    def append(self, i: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.k[i] is not None:
            k, v = torch.cat([self.k[i], k], dim=-2), torch.cat([self.v[i], v], dim=-2)
        self.k[i], self.v[i] = k, v
        return k, v

    def crop(self, n: int) -> None:
        """Keep the first n context positions."""
        for i in range(len(self.k)):
            if self.k[i] is not None:
                self.k[i], self.v[i] = self.k[i][..., :n, :], self.v[i][..., :n, :]


class BlockAttention(nn.Module):
    """Queries from the block; keys and values from the context features and the block (q/k RMSNorm, RoPE)."""

    def __init__(self, c):
        super().__init__()
        from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm

        self.heads, self.kv_heads = c.num_attention_heads, c.num_key_value_heads
        self.head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        bias = bool(getattr(c, "attention_bias", False))
        self.q_proj = nn.Linear(c.hidden_size, self.heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(c.hidden_size, self.kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(c.hidden_size, self.kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.heads * self.head_dim, c.hidden_size, bias=bias)
        self.q_norm = Qwen3RMSNorm(self.head_dim, eps=c.rms_norm_eps)
        self.k_norm = Qwen3RMSNorm(self.head_dim, eps=c.rms_norm_eps)

    def kv(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b, n, _ = h.shape
        k = self.k_norm(self.k_proj(h).view(b, n, self.kv_heads, self.head_dim)).transpose(1, 2)
        v = self.v_proj(h).view(b, n, self.kv_heads, self.head_dim).transpose(1, 2)
        return _rope(k, cos, sin), v  # (b, kv_heads, n, hd) each

    def forward(self, h, ctx, rope_block, rope_ctx, cache: ContextKV | None, i: int, mask):
        b, q_len, _ = h.shape
        q = self.q_norm(self.q_proj(h).view(b, q_len, self.heads, self.head_dim)).transpose(1, 2)
        q = _rope(q, *rope_block)
        k, v = self.kv(h, *rope_block)
        if ctx is not None:
            kc, vc = self.kv(ctx, *rope_ctx)
            if cache is not None:
                kc, vc = cache.append(i, kc, vc)
        elif cache is not None and cache.k[i] is not None:
            kc, vc = cache.k[i], cache.v[i]
        else:
            kc = vc = None
        if kc is not None:
            k, v = torch.cat([kc, k], dim=-2), torch.cat([vc, v], dim=-2)
        if self.kv_heads != self.heads:
            rep = self.heads // self.kv_heads
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=None if mask is None else mask[:, None])
        return self.o_proj(out.transpose(1, 2).reshape(b, q_len, -1))


class BlockLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        from transformers.models.qwen3.modeling_qwen3 import Qwen3MLP, Qwen3RMSNorm

        self.input_layernorm = Qwen3RMSNorm(c.hidden_size, eps=c.rms_norm_eps)
        self.self_attn = BlockAttention(c)
        self.post_attention_layernorm = Qwen3RMSNorm(c.hidden_size, eps=c.rms_norm_eps)
        self.mlp = Qwen3MLP(c)

    def forward(self, x, ctx, rope_block, rope_ctx, cache, i, mask):
        x = x + self.self_attn(self.input_layernorm(x), ctx, rope_block, rope_ctx, cache, i, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class BlockDraftModel(nn.Module):
    """DFlash's drafter: `fc`, `hidden_norm`, decoder `layers`, `norm`; no embedding and no head of its own."""

    def __init__(self, cfg: BlockConfig):
        super().__init__()
        from transformers import Qwen3Config
        from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm, Qwen3RotaryEmbedding

        self.block = cfg
        self.config = Qwen3Config.from_dict({k: v for k, v in cfg.raw.items() if k != "architectures"})
        c = self.config
        self.fc = nn.Linear(len(cfg.target_layer_ids) * c.hidden_size, c.hidden_size, bias=False)
        self.hidden_norm = Qwen3RMSNorm(c.hidden_size, eps=c.rms_norm_eps)
        self.layers = nn.ModuleList(BlockLayer(c) for _ in range(c.num_hidden_layers))
        self.norm = Qwen3RMSNorm(c.hidden_size, eps=c.rms_norm_eps)
        self.rotary = Qwen3RotaryEmbedding(c)

    @property
    def device(self) -> torch.device:
        return self.fc.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.fc.weight.dtype

    def forward(self, block_embeds: torch.Tensor, block_pos: torch.Tensor, ctx_feats: torch.Tensor | None = None,
                ctx_pos: torch.Tensor | None = None, cache: ContextKV | None = None,
                mask: torch.Tensor | None = None) -> torch.Tensor:
        """(B, Q, H) hidden states of the block rows, before the target's head.

        `ctx_feats` (B, C, F) are raw target features (the layers' outputs, concatenated) at `ctx_pos`. With a
        `cache` they are appended to it and every block row sees the whole cached context; `mask` (B, Q, C + Q)
        bool instead says what each row sees (training: other blocks and later context hidden).
        """
        ctx = None
        rope_ctx = None
        if ctx_feats is not None and ctx_feats.shape[1] > 0:
            ctx = self.hidden_norm(self.fc(ctx_feats))
            rope_ctx = self.rotary(ctx, ctx_pos)
        rope_block = self.rotary(block_embeds, block_pos)
        x = block_embeds
        for i, layer in enumerate(self.layers):
            x = layer(x, ctx, rope_block, rope_ctx, cache, i, mask)
        return self.norm(x)


def read_config(folder: Path) -> dict:
    """The config.json of a model folder as a dict ({} when there is none or it is not JSON)."""
    try:
        return json.loads((Path(folder) / "config.json").read_text())
    except (OSError, ValueError):
        return {}


def is_block_drafter(path: str | Path) -> bool:
    """Whether `path` is a local folder holding a block drafter's config."""
    p = Path(str(path)).expanduser()
    return p.is_dir() and is_block_config(read_config(p))


def load_block_drafter(path: str | Path, target) -> BlockDraftModel:
    """A block drafter folder checked against `target`, on its device and in its dtype; loads nothing on error."""
    from safetensors.torch import load_file

    folder = Path(str(path)).expanduser()
    where = f"block drafter {str(path)!r}"
    raw = read_config(folder)
    if not raw:
        raise TevvizError(f"{where} has no readable config.json")
    cfg = parse_config(raw, where, target)
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise TevvizError(f"{where} has no weights (*.safetensors)")
    state = {}
    for f in files:
        state.update(load_file(str(f)))
    # The target's embedding and head are the drafter's; a checkpoint that carries copies has them ignored.
    state = {k: v for k, v in state.items() if not k.startswith(("embed_tokens.", "lm_head.", "model.embed_tokens."))}
    with torch.device("meta"):
        model = BlockDraftModel(cfg)
    expected = {k for k in model.state_dict() if not k.startswith("rotary.")}
    missing, extra = sorted(expected - set(state)), sorted(set(state) - expected)
    if missing:
        raise TevvizError(f"{where} is missing weights: {', '.join(missing[:6])}{' ...' if len(missing) > 6 else ''}")
    if extra:
        raise TevvizError(f"{where} has weights a {ARCHITECTURE} does not: {', '.join(extra[:6])}")
    shapes = model.state_dict()
    for k in expected:
        if tuple(state[k].shape) != tuple(shapes[k].shape):
            raise TevvizError(f"{where}: weight {k} has shape {tuple(state[k].shape)}, the config says "
                              f"{tuple(shapes[k].shape)}")
    model = BlockDraftModel(cfg)  # real tensors now that the checks passed (the rotary buffers are computed)
    model.load_state_dict(state, strict=False)
    emb = target.get_input_embeddings().weight
    return model.to(device=emb.device, dtype=emb.dtype).eval().requires_grad_(False)


def block_config_dict(hidden: int, layers: int, heads: int, kv_heads: int, intermediate: int, vocab: int,
                      block_size: int, mask_token_id: int, target_layer_ids: list[int], num_target_layers: int,
                      rope_theta: float = 10000.0, max_positions: int = 4096, eps: float = 1e-6) -> dict:
    """A config.json in DFlash's layout (a Qwen3 decoder config plus the block fields)."""
    return {
        "architectures": [ARCHITECTURE], "model_type": "qwen3", "hidden_size": hidden, "num_hidden_layers": layers,
        "num_attention_heads": heads, "num_key_value_heads": kv_heads, "head_dim": hidden // heads,
        "intermediate_size": intermediate, "vocab_size": vocab, "hidden_act": "silu", "rms_norm_eps": eps,
        "rope_theta": rope_theta, "rope_scaling": None, "max_position_embeddings": max_positions,
        "attention_bias": False, "tie_word_embeddings": True, "block_size": block_size,
        "num_target_layers": num_target_layers,
        "dflash_config": {"mask_token_id": mask_token_id, "target_layer_ids": list(target_layer_ids)},
    }


def save_block_drafter(model: BlockDraftModel, out: str | Path, dtype: torch.dtype | None = None) -> None:
    """Write `model` as a DFlash-layout folder: config.json and model.safetensors (in `dtype` if given)."""
    from safetensors.torch import save_file

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(model.block.raw, indent=2) + "\n")
    state = {k: v.detach().to(dtype or v.dtype).contiguous().cpu() for k, v in model.state_dict().items()
             if not k.startswith("rotary.")}
    save_file(state, str(out / WEIGHTS))
