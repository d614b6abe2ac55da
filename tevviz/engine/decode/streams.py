"""Target continuations of many prompts at once: left-padded rows on one KV cache, plain autoregressive sampling.

Training data for drafters (ExitTrain's streams, the SmolLM2 drafter recipe) only needs text that follows
the target's law; sampling the target token by token in batches gives exactly that law, at a fraction of
the cost of decoding each prompt alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ..core.kv import new_cache
from ..core.sampling import SamplingConfig, processed_probs, sample_categorical
from ..errors import TevvizError

if TYPE_CHECKING:
    from ..load.models import ModelPair


@torch.inference_mode()
def continue_batch(target, ids: torch.Tensor, mask: torch.Tensor, sampling: SamplingConfig, new_tokens: int,
                   gen: torch.Generator, stop: set[int], top_k: int = 0
                   ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Left-padded prompts (B x n, mask 1 on real tokens) continued by up to `new_tokens` target draws each.

    Returns the continuations (B x m; a row that has drawn a stop id repeats it) and, when `top_k`, the
    target's own (T = 1, unprocessed) top-k log-probabilities and token ids at every drawn position
    (B x m x k, float16 and int32), which a distilled drafter learns from.
    """
    cache = new_cache(target)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    logits = target(input_ids=ids, attention_mask=mask, position_ids=pos, cache=cache, use_cache=True,
                    logits_to_keep=1).logits[:, -1]
    stops = torch.tensor(sorted(stop), dtype=torch.long, device=ids.device)
    answers, logps, tops = [], [], []
    done = torch.zeros(ids.shape[0], dtype=torch.bool, device=ids.device)
    for _ in range(new_tokens):
        if top_k:
            v, i = torch.log_softmax(logits.float(), -1).topk(top_k, -1)
            logps.append(v.half())
            tops.append(i.int())
        probs = processed_probs(logits, sampling)
        nxt = probs.argmax(-1) if sampling.greedy else sample_categorical(probs, gen)
        if answers:  # a finished row repeats its stop id, which the caller cuts off
            nxt = torch.where(done, answers[-1][:, 0], nxt)
        answers.append(nxt[:, None])
        done |= torch.isin(nxt, stops)
        if bool(done.all()):
            break
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], 1)
        pos = pos[:, -1:] + 1
        logits = target(input_ids=nxt[:, None], attention_mask=mask, position_ids=pos, cache=cache,
                        use_cache=True).logits[:, -1]
    out = torch.cat(answers, 1) if answers else ids.new_zeros(ids.shape[0], 0)
    if not top_k:
        return out, None, None
    return out, torch.stack(logps, 1), torch.stack(tops, 1)


def cut_at_stop(tokens: list[int], stop: set[int]) -> list[int]:
    """`tokens` up to and including the first stop id."""
    for j, t in enumerate(tokens):
        if t in stop:
            return tokens[: j + 1]
    return tokens


def continuations(target, prompts: list[list[int]], sampling: SamplingConfig, new_tokens: int, seed: int,
                  stop: set[int], batch: int = 32, pad_id: int = 0, context_length: int | None = None
                  ) -> list[list[int]]:
    """Up to `new_tokens` target tokens after each prompt (cut after a stop id), in the prompts' order.

    Prompts of similar length share a batch, so little compute goes to padding; a batch draws no more
    tokens than its longest prompt leaves room for under `context_length`.
    """
    device = target.device
    gen = torch.Generator(device=device).manual_seed(seed)
    out: list[list[int]] = [[] for _ in prompts]
    order = sorted(range(len(prompts)), key=lambda j: len(prompts[j]))
    for start in range(0, len(order), batch):
        rows = order[start:start + batch]
        width = max(len(prompts[j]) for j in rows)
        n = new_tokens if context_length is None else min(new_tokens, context_length - width)
        if n <= 0:
            continue
        ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
        mask = torch.zeros(len(rows), width, dtype=torch.long)
        for b, j in enumerate(rows):
            ids[b, width - len(prompts[j]):] = torch.tensor(prompts[j])
            mask[b, width - len(prompts[j]):] = 1
        drawn, _, _ = continue_batch(target, ids.to(device), mask.to(device), sampling, n, gen, stop)
        for b, j in enumerate(rows):
            out[j] = cut_at_stop(drawn[b].tolist(), stop)
    return out


def collect_streams(pair: ModelPair, prompts: list[list[int]], temperature: float = 1.0, max_new_tokens: int = 96,
                    seed: int = 0, batch: int = 32) -> list[tuple[list[int], list[int]]]:
    """Target continuations of each prompt, sampled token by token in batches (so they follow the target's law)."""
    from .session import stop_ids

    pad = pair.tokenizer.pad_token_id if pair.tokenizer.pad_token_id is not None else 0
    got = continuations(pair.target, prompts, SamplingConfig(temperature=temperature), max_new_tokens, seed,
                        stop_ids(pair), batch, pad, pair.context_length)
    return [(list(ids), cont) for ids, cont in zip(prompts, got)]


def collect_mixed_streams(pair: ModelPair, prompts: list[list[int]], temperatures: list[float],
                          max_new_tokens: int = 96, seed: int = 0) -> list[tuple[list[int], list[int]]]:
    """Target continuations with the temperatures taken in turn over the prompts (prompt i at temperatures[i % k]).

    Greedy and sampled continuations both: decoding at T = 0 and at T = 1 runs on such contexts.
    """
    if not temperatures:
        raise TevvizError("give at least one collection temperature")
    k = len(temperatures)
    streams: list = [None] * len(prompts)
    for j, t in enumerate(temperatures):
        idx = list(range(j, len(prompts), k))
        got = collect_streams(pair, [prompts[i] for i in idx], t, max_new_tokens, seed + j * 100_000)
        for i, st in zip(idx, got):
            streams[i] = st
    return streams
