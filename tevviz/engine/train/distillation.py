"""Distillation, an optional warm start before ExitTrain (not the paper's).

`distill` trains the drafter on its cross-entropy
against the target's T = 1 distribution at every position of windows of training text, one target
forward for a whole batch of windows. It gives L_tok's signal at ~100x the positions per second of the
tree steps, which on a small drafter is what moves tau at T = 1 (MODEL_CARD.md). With `DistillConfig.top_k`
the target's law is computed once over the text and kept as its top k tokens (`target_law`), so a long warm
start costs the drafter's passes alone.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from ..core.sampling import SamplingConfig, processed_probs, to_width
from ..errors import TevvizError
from .schedule import lr_scale


@dataclass(frozen=True)
class DistillConfig:
    """The dense warm start: `steps` optimiser steps on `batch` random windows of `window` tokens each."""

    steps: int = 0
    batch: int = 16
    window: int = 256
    lr: float = 1e-3  # peak; 5% warm-up, cosine to 10%
    temperature: float = 1.0  # the target law the drafter learns
    seed: int = 0
    # 0: one target forward per step on random windows (the full law). k > 0: the target's law over the whole text,
    # cut into consecutive windows, computed once and kept as its k most likely tokens plus the rest as one bucket
    # (`target_law`); the steps then go over those windows epoch by epoch at the cost of the drafter's pass alone.
    top_k: int = 0

    def __post_init__(self):
        if not isinstance(self.steps, int) or self.steps < 0 or self.batch < 1 or self.window < 2:
            raise TevvizError("distillation needs steps >= 0, batch >= 1 and windows of at least 2 tokens")
        if not isinstance(self.top_k, int) or self.top_k < 0:
            raise TevvizError("distillation's top_k must be an int >= 0 (0: the full law)")
        if not self.lr > 0 or not self.temperature > 0:
            raise TevvizError("distillation needs lr > 0 and a temperature > 0")


@dataclass(frozen=True)
class TargetLaw:
    """The target's law at every position of consecutive windows of a text, as its k most likely tokens; the rest of
    the mass is one bucket. 4 bytes per position and kept token, 6 past 32,767 ids (3.4 M tokens x 128: 1.75 GB)."""

    windows: torch.Tensor  # [N, window] token ids
    probs: torch.Tensor  # [N, window, k] float16
    ids: torch.Tensor  # [N, window, k] int16 where the vocabulary allows, else int32


def target_law(target, stream: list[int], cfg: DistillConfig, width: int) -> TargetLaw:
    """`stream` cut into consecutive windows of `cfg.window` tokens and the target's law at each position, over the
    drafter's `width` output ids, kept as its `cfg.top_k` most likely tokens."""
    n = len(stream) // cfg.window
    if n < 1 or not 0 < cfg.top_k < width:
        raise TevvizError(f"a cached target law needs a window of text ({len(stream)} tokens for {cfg.window}) and "
                          f"0 < top_k < {width}")
    windows = torch.tensor(stream[: n * cfg.window], dtype=torch.long).view(n, cfg.window)
    kind = torch.int16 if width <= torch.iinfo(torch.int16).max else torch.int32
    probs = torch.empty(n, cfg.window, cfg.top_k, dtype=torch.float16)
    ids = torch.empty(n, cfg.window, cfg.top_k, dtype=kind)
    fast = target.device.type == "cpu"
    for i in range(0, n, cfg.batch):
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=fast):
            tl = target(input_ids=windows[i : i + cfg.batch].to(target.device)).logits.float()
        top = to_width(processed_probs(tl, SamplingConfig(temperature=cfg.temperature)), width).topk(cfg.top_k, -1)
        probs[i : i + cfg.batch], ids[i : i + cfg.batch] = top.values.cpu().half(), top.indices.cpu().to(kind)
    return TargetLaw(windows, probs, ids)


def coarse_cross_entropy(logits: torch.Tensor, probs: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of the drafter's law (`logits`) against a target law given as k tokens (`ids`, `probs`)
    and the rest of its mass on one bucket: the full cross-entropy with the unkept tokens merged into one outcome."""
    logits = logits.float()
    logz = torch.logsumexp(logits, -1, keepdim=True)
    logq = logits.gather(-1, ids) - logz
    rest_mass = (1 - probs.sum(-1)).clamp(min=0)
    # log(1 - q(kept)) without a second pass over the vocabulary; clamped where the kept tokens hold all of q
    log_rest = torch.log1p(-torch.logsumexp(logq, -1).exp().clamp(max=1 - 1e-6))
    return -((probs * logq).sum(-1) + rest_mass * log_rest).mean()


def distill(target, draft, stream: list[int], cfg: DistillConfig, on_step=None, law: TargetLaw | None = None
            ) -> list[float]:
    """Train `draft` in place toward the target's law at every position of windows of `stream`; the losses.

    `stream` is training text as one token list (separate texts joined with an end-of-text token). The
    target runs under bfloat16 autocast on a CPU (its AMX units; the labels are a law, not exact figures).
    With `cfg.top_k` the law is computed once (`target_law`, or the `law` given) and the windows taken in a
    shuffled order, epoch after epoch.
    """
    if len(stream) <= cfg.window:
        raise TevvizError(f"distillation needs more than {cfg.window} tokens of text, got {len(stream)}")
    width = draft.get_output_embeddings().weight.shape[0]
    if cfg.top_k and law is None:
        law = target_law(target, stream, cfg, width)
    data = torch.tensor(stream, dtype=torch.long) if law is None else None  # random windows are cut from it
    gen = torch.Generator().manual_seed(cfg.seed)
    opt = torch.optim.AdamW(draft.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.0)
    warmup = max(int(0.05 * cfg.steps), 1)
    draft.requires_grad_(True).train()
    fast = target.device.type == "cpu"
    order: list[int] = []
    losses = []
    for step in range(cfg.steps):
        for group in opt.param_groups:
            group["lr"] = cfg.lr * lr_scale(step + 1, cfg.steps, warmup, 0.1)
        if law is not None:
            while len(order) < cfg.batch:
                order += torch.randperm(len(law.windows), generator=gen).tolist()
            rows, order = torch.tensor(order[: cfg.batch]), order[cfg.batch :]
            # with the target out of the step the drafter's pass is all of it: bfloat16 autocast on a CPU halves it
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=draft.device.type == "cpu"):
                logits = draft(input_ids=law.windows[rows].to(draft.device)).logits
            loss = coarse_cross_entropy(logits, law.probs[rows].to(logits.device).float(),
                                        law.ids[rows].to(logits.device).long())
        else:
            starts = torch.randint(0, len(stream) - cfg.window + 1, (cfg.batch,), generator=gen)
            ids = torch.stack([data[i : i + cfg.window] for i in starts.tolist()])
            with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=fast):
                tl = target(input_ids=ids.to(target.device)).logits.float()
            p = processed_probs(tl, SamplingConfig(temperature=cfg.temperature)).to(draft.device)  # the decoders' law
            logq = torch.log_softmax(draft(input_ids=ids.to(draft.device)).logits.float(), -1)
            loss = -(to_width(p, logq.shape[-1]) * logq).sum(-1).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(draft.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        if on_step is not None:
            on_step(step + 1, losses[-1])
    draft.eval()
    return losses


def warm_start(target, draft, stream: list[int], cfg: DistillConfig, on_step=None, law: TargetLaw | None = None
               ) -> tuple:
    """A distilled copy of `draft` (which stays untouched), frozen, and the losses of `distill`."""
    student = copy.deepcopy(draft)
    losses = distill(target, student, stream, cfg, on_step, law)
    return student.requires_grad_(False), losses
