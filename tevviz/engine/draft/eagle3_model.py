"""The EAGLE-3 head as a module (docs/eagle3.md), written from the published layout: `fc` over the target's states,
one decoder layer (`midlayer`) over `[input_layernorm(embed(token)), hidden_norm(h_in)]`, `norm`, and `lm_head` over
the draft vocabulary, mapped into the target's by `d2t`. Parameter names are the checkpoint's own; no remote code.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import TevvizError
from .eagle3_config import HeadConfig


@dataclass(frozen=True)
class LayerReading:
    """Which target states the head reads (`hidden_states` indices) and how its inputs are normed, with why."""

    layer_ids: tuple[int, ...]
    why: str  # the dialect's convention, the first-id rule, or an override
    norm_before_fc: bool  # input_norm over the concatenated states before fc


class HeadKV:
    """The head's own keys and values (batch 1): the committed pairs, then the nodes of the round being drafted."""

    def __init__(self):
        self.k: torch.Tensor | None = None  # (1, kv_heads, L, head_dim)
        self.v: torch.Tensor | None = None

    @property
    def length(self) -> int:
        return 0 if self.k is None else self.k.shape[-2]

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.k is not None:
            k, v = torch.cat([self.k, k], dim=-2), torch.cat([self.v, v], dim=-2)
        self.k, self.v = k, v
        return k, v

    def crop(self, n: int) -> None:
        """Keep the first n positions."""
        if self.k is not None:
            self.k, self.v = self.k[..., :n, :], self.v[..., :n, :]


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE on (1, heads, q, d) with (1, q, d) tables, halves rotated (Llama's layout)."""
    half = x.shape[-1] // 2
    turned = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos.unsqueeze(1) + turned * sin.unsqueeze(1)


class HeadAttention(nn.Module):
    """Self-attention whose q, k, v read the 2H-wide input; causal or tree-shaped over the head's own cache."""

    def __init__(self, c):
        super().__init__()
        self.heads, self.kv_heads = c.num_attention_heads, c.num_key_value_heads or c.num_attention_heads
        self.head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        bias = bool(getattr(c, "attention_bias", False))
        self.q_proj = nn.Linear(2 * c.hidden_size, self.heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(2 * c.hidden_size, self.kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(2 * c.hidden_size, self.kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.heads * self.head_dim, c.hidden_size, bias=bias)

    def forward(self, x, rope, visible: torch.Tensor, cache: HeadKV) -> torch.Tensor:
        q_len = x.shape[1]
        shape = lambda t, n: t.view(1, q_len, n, self.head_dim).transpose(1, 2)
        q = _rotate(shape(self.q_proj(x), self.heads), *rope)
        k = _rotate(shape(self.k_proj(x), self.kv_heads), *rope)
        k, v = cache.append(k, shape(self.v_proj(x), self.kv_heads))
        if self.kv_heads != self.heads:
            rep = self.heads // self.kv_heads
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=visible[None, None])
        return self.o_proj(out.transpose(1, 2).reshape(1, q_len, -1))


class MidLayer(nn.Module):
    """The head's one decoder layer; its residual stream starts from h_in (fc's output, or the head's own h)."""

    def __init__(self, c):
        super().__init__()
        from transformers.models.llama.modeling_llama import LlamaMLP, LlamaRMSNorm

        self.hidden_norm = LlamaRMSNorm(c.hidden_size, eps=c.rms_norm_eps)
        self.input_layernorm = LlamaRMSNorm(c.hidden_size, eps=c.rms_norm_eps)
        self.self_attn = HeadAttention(c)
        self.post_attention_layernorm = LlamaRMSNorm(c.hidden_size, eps=c.rms_norm_eps)
        self.mlp = LlamaMLP(c)


class Eagle3Head(nn.Module):
    """An EAGLE-3 head beside its target: its weights, its config, and the reading of the target it uses."""

    def __init__(self, cfg: HeadConfig, target_hidden: int, n_target_layers: int, reading: LayerReading,
                 own_embedding: bool, fc_norm: bool, input_norm: bool):
        super().__init__()
        from transformers import LlamaConfig
        from transformers.models.llama.modeling_llama import LlamaRMSNorm, LlamaRotaryEmbedding

        self.head = cfg
        self.config = LlamaConfig.from_dict({k: v for k, v in cfg.decoder.items() if k != "architectures"})
        c = self.config
        H, n_aux = c.hidden_size, len(reading.layer_ids)
        self.target_hidden, self.n_target_layers = target_hidden, n_target_layers
        self.own_reading = self.reading = reading
        self.fc = nn.Linear(n_aux * target_hidden, H, bias=False)
        self.fc_norm = (nn.ModuleList(LlamaRMSNorm(target_hidden, eps=c.rms_norm_eps) for _ in range(n_aux))
                        if fc_norm else None)
        self.input_norm = LlamaRMSNorm(n_aux * target_hidden, eps=c.rms_norm_eps) if input_norm else None
        self.midlayer = MidLayer(c)
        self.norm = LlamaRMSNorm(H, eps=c.rms_norm_eps)
        self.lm_head = nn.Linear(H, cfg.draft_vocab_size, bias=False)
        self.embed_tokens = nn.Embedding(cfg.vocab_size, H) if own_embedding else None
        self.register_buffer("d2t", torch.zeros(cfg.draft_vocab_size, dtype=torch.long))
        self.register_buffer("t2d", torch.zeros(cfg.vocab_size, dtype=torch.bool))
        self.rotary = LlamaRotaryEmbedding(c)
        self._target_embedding: list[nn.Module] = []  # the target's, when the head has none (kept out of its state)
        self.identity_vocab = False  # set by the loader: the draft vocabulary is the target's, in order

    @property
    def device(self) -> torch.device:
        return self.fc.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.fc.weight.dtype

    @property
    def layer_ids(self) -> tuple[int, ...]:
        return self.reading.layer_ids

    @property
    def target_layers(self) -> tuple[int, ...]:
        """The target decoder layers whose outputs are read (hidden_states index h is layer h - 1's output)."""
        return tuple(h - 1 for h in self.reading.layer_ids)

    def use_target_embedding(self, embedding: nn.Module) -> None:
        self._target_embedding = [embedding]

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        table = self.embed_tokens if self.embed_tokens is not None else self._target_embedding[0]
        return table(tokens).to(self.dtype)

    def fuse(self, feats: torch.Tensor) -> torch.Tensor:
        """(q, n_aux * Ht) target states -> (q, H): the norms the head was trained with, then fc."""
        x = feats.to(self.dtype)
        if self.reading.norm_before_fc:
            x = self.input_norm(x)
        if self.head.flag("fc_norm"):
            x = torch.cat([norm(part) for norm, part in zip(self.fc_norm, x.chunk(len(self.fc_norm), dim=-1))], -1)
        return self.fc(x)

    def layer(self, h_in: torch.Tensor, tokens: torch.Tensor, positions: torch.Tensor, visible: torch.Tensor,
              cache: HeadKV) -> torch.Tensor:
        """(q, H) h_in of the pairs (state, token) at `positions`, seeing `visible` (q, cache + q) -> (q, H) h."""
        m = self.midlayer
        h_in = h_in.unsqueeze(0)
        residual = m.hidden_norm(h_in) if self.head.flag("norm_before_residual") else h_in
        x = torch.cat([m.input_layernorm(self.embed(tokens).unsqueeze(0)), m.hidden_norm(h_in)], dim=-1)
        rope = self.rotary(x, positions.unsqueeze(0))
        h = residual + m.self_attn(x, rope, visible, cache)
        return (h + m.mlp(m.post_attention_layernorm(h)))[0]

    def feedback(self, h: torch.Tensor) -> torch.Tensor:
        """The state a deeper level reads in place of fc's output (normed where the head says norm_output)."""
        return self.norm(h) if self.head.flag("norm_output") else h

    def target_logits(self, h: torch.Tensor, width: int | None = None) -> torch.Tensor:
        """(q, V) draft logits over the target's vocabulary: lm_head over the draft vocabulary at target ids
        arange(Vd) + d2t, -inf elsewhere (q = 0 outside the draft vocabulary)."""
        logits = self.lm_head(self.norm(h))
        width = width or self.head.vocab_size
        if self.identity_vocab and logits.shape[-1] == width:
            return logits
        full = logits.new_full((logits.shape[0], width), float("-inf"))
        ids = torch.arange(logits.shape[-1], device=logits.device) + self.d2t
        keep = ids < width
        full[:, ids[keep]] = logits[:, keep]
        return full


def parse_layer_ids(text: str) -> tuple[int, ...]:
    """`--layer-ids 2,16,29` as a tuple of integers (hidden_states indices)."""
    try:
        ids = tuple(int(x) for x in str(text).split(","))
    except ValueError:
        raise TevvizError(f"--layer-ids must be comma-separated integers (hidden_states indices), got {text!r}") \
            from None
    return ids


def check_layer_ids(ids, n_aux: int, n_layers: int, field: str = "layer ids") -> tuple[int, ...]:
    """Refuse ids that are not `n_aux` hidden_states indices of a target of `n_layers` decoder layers."""
    if not isinstance(ids, (list, tuple)) or any(not isinstance(i, int) or isinstance(i, bool) for i in ids):
        raise TevvizError(f"{field} must be a list of integers (hidden_states indices), got {ids!r}")
    if len(ids) != n_aux:
        raise TevvizError(f"{field} {list(ids)} name {len(ids)} target states; the head's fc reads {n_aux}")
    bad = [i for i in ids if not 0 <= i <= n_layers]
    if bad:
        raise TevvizError(f"{field} {bad} lie beyond the target's {n_layers} layers (hidden_states indices run from "
                          f"0, the embedding output, to {n_layers}, the last layer's output)")
    return tuple(ids)


def set_layer_ids(model: Eagle3Head, ids, why: str = "", norm_before_fc: bool | None = None) -> None:
    """Make the head read the target states `ids` (hidden_states indices), e.g. from `--layer-ids`; `why` is shown
    with the drafter. Sessions made after this read the new states; the checkpoint's own reading stays known."""
    ids = check_layer_ids(ids, len(model.own_reading.layer_ids), model.n_target_layers)
    nbf = model.reading.norm_before_fc if norm_before_fc is None else bool(norm_before_fc)
    if nbf and model.input_norm is None:
        raise TevvizError("norm_before_fc needs the head's input_norm.weight, which this checkpoint does not have")
    why = why or f"override: hidden_states {list(ids)} (--layer-ids)"
    model.reading = replace(model.reading, layer_ids=ids, why=why, norm_before_fc=nbf)
