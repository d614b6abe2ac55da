"""The processed target distribution: logits after temperature, top-k and top-p (docs/math.md, *Notation*).

Every verifier and the autoregressive baseline go through this module, so they sample from the
same law.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..errors import TevvizError


@dataclass(frozen=True)
class SamplingConfig:
    """Sampling settings of plain autoregressive decoding; temperature 0 means greedy."""

    temperature: float = 1.0
    top_k: int = 0  # 0 disables top-k
    top_p: float = 1.0  # 1 disables top-p

    def __post_init__(self):
        t = self.temperature
        if not isinstance(t, (int, float)) or math.isnan(t) or math.isinf(t) or t < 0:
            raise TevvizError(f"temperature must be a finite number >= 0 (0 = greedy), got {t!r}")
        if not isinstance(self.top_k, int) or self.top_k < 0:
            raise TevvizError(f"top-k must be an integer >= 0 (0 = off), got {self.top_k!r}")
        p = self.top_p
        if not isinstance(p, (int, float)) or math.isnan(p) or not 0 < p <= 1:
            raise TevvizError(f"top-p must lie in (0, 1], got {p!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def check_finite(reduced: torch.Tensor, model: str = "the target") -> None:
    # Checked on a per-row reduction (max or log-normaliser), which any NaN or +inf logit poisons;
    # such a logit would otherwise turn into a silently wrong sample. Read as one number on the host (bool() of an
    # isfinite kernel reads one too, at three times the cost on a CPU): every entry times 0, summed, is exactly 0
    # when all are finite and NaN when one is not, in any dtype (a plain sum of float16 maxima overflows).
    if not math.isfinite(float((reduced * 0).sum())):
        raise TevvizError(f"{model} produced NaN or inf logits (try dtype float32 or bfloat16 instead of float16)")


def processed_logits(logits: torch.Tensor, cfg: SamplingConfig) -> torch.Tensor:
    """Float32 logits of rows (..., V) after temperature, top-k and top-p; removed tokens are -inf."""
    x = logits.float()
    if cfg.greedy:
        return x
    if cfg.temperature != 1:
        x = x / cfg.temperature
    if cfg.top_k and cfg.top_k < x.shape[-1]:
        # Every token tied with the k-th logit stays (transformers' TopKLogitsWarper does the same).
        kth = torch.topk(x, cfg.top_k, dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    if cfg.top_p < 1:
        # transformers' TopPLogitsWarper rule, op for op, so that the kept set is the same one, ties included:
        # sort ascending (torch.sort's own order among equal logits, as transformers sorts), and drop every
        # token whose ascending cumulative mass is <= 1 - top_p; the most probable token always stays.
        # This is the smallest prefix (from the top) whose mass reaches top_p.
        sorted_x, order = torch.sort(x, dim=-1, descending=False)
        cum = torch.softmax(sorted_x, dim=-1).cumsum(dim=-1)
        drop_sorted = cum <= 1 - cfg.top_p
        drop_sorted[..., -1] = False
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        x = x.masked_fill(drop, float("-inf"))
    return x


def greedy_rows(logits: torch.Tensor, model: str = "the target") -> torch.Tensor:
    """Each row's argmax (first maximum on ties, as torch.argmax), with the finite check: the T = 0 draw."""
    top, idx = logits.max(dim=-1)
    check_finite(top, model)
    return idx


def one_hot(idx: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Float32 rows shaped as `like` (..., V), 1 at each row's `idx` (...,) and 0 elsewhere: the law at T = 0."""
    return torch.zeros_like(like, dtype=torch.float32).scatter_(-1, idx.unsqueeze(-1), 1.0)


def processed_probs(logits: torch.Tensor, cfg: SamplingConfig, check: bool = True) -> torch.Tensor:
    """Processed target distribution of rows (..., V); one-hot on argmax at temperature 0.

    `check=False` leaves out the NaN and inf check at T > 0, for a caller that checks what it draws instead: such a
    row comes out NaN everywhere."""
    x = processed_logits(logits, cfg)
    if cfg.greedy:
        return one_hot(greedy_rows(x), x)
    # One softmax kernel rather than a log-normaliser and exp(x - lse): a third of the cost on a few rows of a
    # CPU. The check reads each row's max, which is non-finite exactly when the log-normaliser would be.
    if check:
        check_finite(x.amax(dim=-1))
    return torch.softmax(x, dim=-1)


def edge_probs(logits: torch.Tensor, rows: torch.Tensor, tokens: torch.Tensor, cfg: SamplingConfig) -> torch.Tensor:
    """p_rows[i](tokens[i]): the processed rows' entries that the edges read (one softmax over the rows)."""
    if cfg.greedy:
        return (greedy_rows(logits)[rows] == tokens).float()
    return processed_probs(logits, cfg)[rows, tokens]


def float64_sampling(device: torch.device | str) -> bool:
    """Whether sampling may use float64 on `device`: everywhere but Apple's mps, which has no float64."""
    return torch.device(device).type != "mps"


def sample_categorical(weights: torch.Tensor, gen: torch.Generator, float32: bool | None = None) -> torch.Tensor:
    """One index per row of non-negative weights (..., n) with a positive, finite total; zero weights are never drawn.

    Float64 inverse CDF by default; `float32` (chosen on mps, where float64 does not exist) uses an
    exponential race instead, whose law is exact without any cumulative sum.
    """
    if float32 is None:
        float32 = not float64_sampling(weights.device)
    if float32:
        return _exponential_race(weights, gen)
    u = torch.rand((*weights.shape[:-1], 1), generator=gen, device=weights.device, dtype=torch.float64)
    return inverse_cdf(weights, u)


def inverse_cdf(weights: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """The index whose float64 CDF interval holds `u` (..., 1), uniform on [0, 1), scaled by the row's total.

    Rows must have a positive, finite total (callers check logits for NaN and inf and fall back from a
    residual of zero mass).
    """
    cdf = torch.cumsum(weights, dim=-1, dtype=torch.float64)
    # The first index whose CDF reaches (1 - u) * total, in (0, total]: rounding a product is monotone, so the
    # threshold never passes the total, and a CDF that reaches a positive threshold first at i has weight i > 0.
    # The clamp only keeps a row that breaks the contract (a NaN) inside the vocabulary.
    idx = torch.searchsorted(cdf, (1 - u) * cdf[..., -1:])
    return idx.clamp_(max=weights.shape[-1] - 1).squeeze(-1)


def _exponential_race(weights: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """argmin_i E_i / w_i over i.i.d. E_i ~ Exp(1): index i wins with probability w_i / sum(w), in float32.

    A float32 CDF would carry the rounding of a sum over the whole vocabulary (about 1e-5 of the
    total over 150k tokens) into every interval, and a float32 uniform cuts the total into 2^24 steps.
    Here each weight only meets its own exponential: the law is off by float32 rounding of
    log(w_i) - log(E_i), a relative 1e-7 per token however small its weight.
    """
    w = weights.float()
    u = torch.rand(w.shape, generator=gen, device=w.device)  # [0, 1)
    e = -torch.log1p(-u)  # Exp(1); 0 only when u = 0, and then that token arrives first (log w - log 0 = +inf)
    key = torch.where(w > 0, torch.log(w) - torch.log(e), float("-inf"))  # log(w_i / E_i)
    return key.argmax(dim=-1)


def to_width(p: torch.Tensor, width: int) -> torch.Tensor:
    """Target rows as distributions over the draft's `width` output ids, renormalised.

    Tokenizers agree, but output layers may be padded differently (Qwen2.5-7B has 152,064 rows,
    Qwen2.5-0.5B 151,936); ids past the tokenizer carry no real mass.
    """
    if p.shape[-1] > width:
        p = p[..., :width]
    elif p.shape[-1] < width:
        p = torch.nn.functional.pad(p, (0, width - p.shape[-1]))
    return p / p.sum(-1, keepdim=True).clamp(min=1e-12)
