"""A cheaper level step for Llama-family draft models: the same forward, written out over the model's own weights.

A draft forward of a few rows is mostly per-call overhead in the generic modules (module calls, mask building, a
rotary embedding per call, a cache that concatenates per layer), not arithmetic: on the embedded pair four
8-row forwards cost about 1.5 times as much through the model's modules as written out here. The step keeps its keys
and values in buffers grown by doubling (`StaticKV`, read like a DynamicCache: `layers[i].keys`, `crop`), reads
RoPE from a table the model's own rotary module filled once, and takes the boolean visibility as the attention mask.

The draft only shapes the tree; every verifier reads the laws the step returns, so exactness does not rest on this
forward. Acceptance does: a model is used here only after one forward of a few tokens agrees with its own modules
(`fast_step`), else drafting stays on `builders.ModelStep`.
"""

from __future__ import annotations

import os
import weakref

import torch
import torch.nn.functional as F

from ..core.few_rows import head_rows, layer_rows, same_logits

# Model types whose decoder layer is: RMSNorm, attention (optional q/k/v bias, no per-head norms), residual,
# RMSNorm, SiLU-gated MLP, residual; embeddings unscaled.
FAMILIES = frozenset({"llama", "qwen2", "mistral"})
STATIC_ROPE = frozenset({"default", "linear", "llama3", "yarn"})  # RoPE whose tables do not depend on the length
MIN_CAPACITY = 256
CHECK_TOKENS = 6
ENABLED = os.environ.get("TEVVIZ_FAST_DRAFT", "1") != "0"  # 0: draft through the model's modules (to compare)


class _Layer:
    """One layer's keys and values: buffers of the capacity, read as their first `length` entries."""

    is_initialized = True

    def __init__(self, kv: StaticKV, k: torch.Tensor, v: torch.Tensor):
        self.kv, self.k, self.v = kv, k, v

    @property
    def keys(self) -> torch.Tensor:
        return self.k[..., : self.kv.length, :]

    @property
    def values(self) -> torch.Tensor:
        return self.v[..., : self.kv.length, :]


class StaticKV:
    """A draft model's keys and values in buffers (1, kv heads, capacity, head dim) per layer, grown by doubling."""

    def __init__(self, layers: int, kv_heads: int, head_dim: int, dtype: torch.dtype, device):
        self.shape, self.dtype, self.device = (kv_heads, head_dim), dtype, device
        self.length = 0
        self.layers = [self._layer(MIN_CAPACITY) for _ in range(layers)]

    def _layer(self, capacity: int) -> _Layer:
        h, d = self.shape
        k = torch.zeros(1, h, capacity, d, dtype=self.dtype, device=self.device)
        return _Layer(self, k, torch.zeros_like(k))

    def get_seq_length(self, layer: int = 0) -> int:
        return self.length

    def reserve(self, n: int) -> None:
        """Room for `n` entries (existing ones copied into larger buffers)."""
        capacity = self.layers[0].k.shape[-2]
        if n <= capacity:
            return
        while capacity < n:
            capacity *= 2
        for layer in self.layers:
            grown = self._layer(capacity)
            grown.k[..., : self.length, :] = layer.keys
            grown.v[..., : self.length, :] = layer.values
            layer.k, layer.v = grown.k, grown.v

    def crop(self, tokens_to_remove: int) -> None:
        """As DynamicCache.crop: drop the last -`tokens_to_remove` entries (a negative count, as it takes)."""
        if tokens_to_remove > 0:
            raise ValueError(f"crop takes the negative count of entries to drop, not {tokens_to_remove}")
        self.length = max(0, self.length + tokens_to_remove)


def unsupported(model) -> str | None:
    """Why `model` does not take the written-out forward (None: it does)."""
    config = model.config
    if getattr(config, "model_type", None) not in FAMILIES:
        return f"model type {getattr(config, 'model_type', None)!r}"
    if getattr(config, "hidden_act", "silu") != "silu" or getattr(config, "mlp_bias", False):
        return "its MLP"
    if getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True):
        return "a sliding window"
    rope = getattr(config, "rope_parameters", None) or {}
    if rope.get("rope_type", "default") not in STATIC_ROPE:
        return f"RoPE of type {rope.get('rope_type')!r}"
    if getattr(config, "pretraining_tp", 1) != 1 or getattr(model, "hf_device_map", None):
        return "a split model"
    return None


class LlamaStep:
    """A level step (draft_result.LevelStep) over a Llama-family model's weights and a StaticKV."""

    def __init__(self, model, kv: StaticKV | None = None):
        c = model.config
        inner = model.model
        self.model, self.device, self.dtype = model, model.device, model.dtype
        self.heads, self.kv_heads = c.num_attention_heads, c.num_key_value_heads
        self.head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        self.eps = c.rms_norm_eps
        self.embed, self.norm, self.head = inner.embed_tokens.weight, inner.norm.weight, model.lm_head
        self.layers = [_weights(layer) for layer in inner.layers]
        self.rotary = inner.rotary_emb
        self.cos = self.sin = torch.empty(0, self.head_dim, device=self.device)
        self.kv = kv if kv is not None else StaticKV(len(self.layers), self.kv_heads, self.head_dim, self.dtype,
                                                     self.device)

    @property
    def cache(self) -> StaticKV:
        return self.kv

    def length(self) -> int:
        return self.kv.length

    def _rope(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        need = int(positions.max()) + 1
        if need > self.cos.shape[0]:
            n = max(MIN_CAPACITY, 2 * need)
            probe = torch.zeros(1, 1, self.head_dim, dtype=self.dtype, device=self.device)
            cos, sin = self.rotary(probe, torch.arange(n, device=self.device)[None])
            self.cos, self.sin = cos[0], sin[0]
        return self.cos[positions][None, None], self.sin[positions][None, None]

    @torch.no_grad()
    def __call__(self, tokens, positions, visible, sources=None) -> torch.Tensor:
        q_len, start = tokens.shape[0], self.kv.length
        self.kv.reserve(start + q_len)
        cos, sin = self._rope(positions)
        x = self.embed[tokens]
        mask = visible[None, None]
        h, hd = self.heads, self.head_dim
        for w, layer in zip(self.layers, self.kv.layers):
            y = _rms(x, w["in_norm"], self.eps)
            q = layer_rows(y, w["q"], w["q_bias"]).view(q_len, h, hd).transpose(0, 1)[None]
            k = layer_rows(y, w["k"], w["k_bias"]).view(q_len, self.kv_heads, hd).transpose(0, 1)[None]
            v = layer_rows(y, w["v"], w["v_bias"]).view(q_len, self.kv_heads, hd).transpose(0, 1)[None]
            q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
            layer.k[..., start : start + q_len, :] = k
            layer.v[..., start : start + q_len, :] = v
            end = start + q_len
            a = F.scaled_dot_product_attention(q, layer.k[..., :end, :], layer.v[..., :end, :], attn_mask=mask,
                                               enable_gqa=self.kv_heads != h)
            x = x + layer_rows(a[0].transpose(0, 1).reshape(q_len, h * hd), w["o"], w["o_bias"])
            y = _rms(x, w["post_norm"], self.eps)
            x = x + layer_rows(F.silu(layer_rows(y, w["gate"])) * layer_rows(y, w["up"]), w["down"])
        self.kv.length = start + q_len
        return head_rows(_rms(x, self.norm, self.eps), self.head.weight, self.head.bias)


def _weights(layer) -> dict:
    att, mlp = layer.self_attn, layer.mlp
    return {"in_norm": layer.input_layernorm.weight, "post_norm": layer.post_attention_layernorm.weight,
            "q": att.q_proj.weight, "k": att.k_proj.weight, "v": att.v_proj.weight, "o": att.o_proj.weight,
            "q_bias": att.q_proj.bias, "k_bias": att.k_proj.bias, "v_bias": att.v_proj.bias,
            "o_bias": att.o_proj.bias, "gate": mlp.gate_proj.weight, "up": mlp.up_proj.weight,
            "down": mlp.down_proj.weight}


def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    # As the Llama family's RMSNorm: the statistics in float32, the scale in the input's dtype.
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


_CHECKED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> its forward agreed with the model's


def agrees(model) -> bool:
    """Whether the written-out forward gives the model's own logits on a few tokens (checked once a model)."""
    if model not in _CHECKED:
        from ..core.kv import new_cache

        with torch.no_grad():
            vocab = min(model.config.vocab_size, 1000)
            ids = torch.arange(3, 3 + CHECK_TOKENS, device=model.device) % vocab
            ref = model(input_ids=ids[None], cache=new_cache(model), use_cache=True).logits[0]
            step = LlamaStep(model)
            n = CHECK_TOKENS
            got = step(ids, torch.arange(n, device=model.device),
                       torch.ones(n, n, dtype=torch.bool, device=model.device).tril_())
        _CHECKED[model] = same_logits(got, ref, model.dtype)
    return _CHECKED[model]


def fast_step(model) -> LlamaStep | None:
    """The written-out step for `model` when its family takes it and its forward agrees with the model's own."""
    if not ENABLED or not isinstance(model, torch.nn.Module) or unsupported(model) is not None:
        return None
    try:
        return LlamaStep(model) if agrees(model) else None
    except (AttributeError, RuntimeError, TypeError):  # a module laid out otherwise than the family's
        _CHECKED[model] = False
        return None
