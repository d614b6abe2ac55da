"""Plain autoregressive decoding of the target, and the fastest way to do it on this machine: the baseline every
speed-up divides by.

A speed-up is only honest against the best plain decoding the machine has. Which one that is depends on the machine
and its load: on one two-core machine SmolLM2-135M decoded plainly at 8.8 tokens/s through the few-row path and at
18.1 through its own layers (docs/experiments/2026-12-05-is-the-plain-baseline-the-best.md). So `best_plain` times
every way it knows on the same prompt (tevviz's loop through each target path, transformers' `generate`, at each
thread count worth trying), short and interleaved, then decodes the whole length the fastest way.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from ..core.kv import new_cache
from ..core.sampling import SamplingConfig, processed_probs, sample_categorical
from ..core.timing import sync
from ..load.models import ModelPair
from ..load.threads import TORCH_DEFAULT_THREADS
from .target_pass import TargetPass, takes_split

PROBE_TOKENS = 12  # tokens each way decodes per probe pass (two passes, in turned order)
PATH_WORDS = {"auto": "the row paths chosen for this machine", "stock": "the model's own layers",
              "few_rows": "few-row layers"}


@dataclass(frozen=True)
class BaselineResult:
    """Plain autoregressive decoding of the target: the generated tokens and the wall time (prefill left out)."""

    token_ids: list[int]
    seconds: float

    @property
    def tokens_per_s(self) -> float:
        return len(self.token_ids) / self.seconds if self.seconds > 0 else 0.0


def _stops(pair: ModelPair, cfg) -> set[int]:
    from .session import stop_ids

    return stop_ids(pair) if cfg.stop_on_eos else set()


@torch.inference_mode()
def autoregressive(pair: ModelPair, prompt_ids: list[int], cfg, path: str = "auto",
                   max_new_tokens: int | None = None) -> BaselineResult:
    """Token-by-token decoding of the target with the same processed distribution as the verifiers, its passes
    through `path` (TargetPass's: auto, stock or few_rows).

    The prompt's prefill (all but its last token) is left out of the time, as `DecodeSession` does it before its
    first round: speed-ups compare like with like."""
    model, device = pair.target, pair.target.device
    stop = _stops(pair, cfg)
    gen = torch.Generator(device=device).manual_seed(cfg.seed)
    n = min(cfg.max_new_tokens if max_new_tokens is None else max_new_tokens, pair.context_length - len(prompt_ids))
    cache = new_cache(model)
    forward = TargetPass(model, path)
    if len(prompt_ids) > 1:
        forward(torch.tensor([prompt_ids[:-1]], device=device), None, None, cache, logits=False)
    ids = torch.tensor([prompt_ids[-1:]], device=device)
    sync(device)
    t0 = time.perf_counter()
    out: list[int] = []
    for _ in range(n):
        logits = forward(ids, None, None, cache).logits[0, -1:]
        tok = sample_categorical(processed_probs(logits, cfg.sampling), gen)
        out.append(int(tok))
        if out[-1] in stop:
            break
        ids = tok.view(1, 1)
    sync(device)
    return BaselineResult(out, time.perf_counter() - t0)


class _Clock:
    """A logits processor that reads the clock at each step of `generate`: the first read comes after the prefill,
    so the reads between the first and the last time the one-token passes alone."""

    def __init__(self, device):
        self.device, self.reads = device, []

    def __call__(self, input_ids, scores):
        sync(self.device)
        self.reads.append(time.perf_counter())
        return scores


@torch.inference_mode()
def generated(pair: ModelPair, prompt_ids: list[int], cfg, max_new_tokens: int | None = None) -> BaselineResult:
    """transformers' `generate` on the target at `cfg`'s sampling settings, timed from its first token on (the
    prefill and the first token's pass left out: n - 1 tokens over the passes after it)."""
    from transformers import LogitsProcessorList

    n = min(cfg.max_new_tokens if max_new_tokens is None else max_new_tokens,
            pair.context_length - len(prompt_ids))
    s: SamplingConfig = cfg.sampling
    kw = {"do_sample": not s.greedy, "max_new_tokens": n, "pad_token_id": pair.tokenizer.eos_token_id}
    if not cfg.stop_on_eos:
        kw["min_new_tokens"] = n
    if not s.greedy:
        kw.update(temperature=s.temperature, top_k=s.top_k, top_p=s.top_p)
    clock = _Clock(pair.target.device)
    torch.manual_seed(cfg.seed)
    ids = torch.tensor([prompt_ids], device=pair.target.device)
    out = pair.target.generate(ids, logits_processor=LogitsProcessorList([clock]), **kw)[0, len(prompt_ids):]
    sync(pair.target.device)
    end = time.perf_counter()
    tokens = out.tolist()
    # The first read is after the prefill's pass; each later one after one more one-token pass.
    seconds = end - clock.reads[0] if clock.reads else 0.0
    return BaselineResult(tokens[1:], seconds) if len(tokens) > 1 else BaselineResult(tokens, 0.0)


@dataclass(frozen=True)
class PlainWay:
    """One way to decode plainly: tevviz's loop or transformers' `generate`, the target's path, the thread count."""

    loop: str  # "tevviz" or "generate"
    path: str  # "stock", "few_rows" or "auto"
    threads: int | None  # None: whatever torch runs at (an accelerator)

    def label(self) -> str:
        loop = "tevviz's loop" if self.loop == "tevviz" else "transformers' generate"
        threads = "" if self.threads is None else f", {self.threads} thread" + ("s" if self.threads != 1 else "")
        return f"{loop}, {PATH_WORDS[self.path]}{threads}"

    def run(self, pair: ModelPair, prompt_ids: list[int], cfg, max_new_tokens: int | None = None) -> BaselineResult:
        before = torch.get_num_threads()
        if self.threads is not None:
            torch.set_num_threads(self.threads)
        try:
            if self.loop == "generate":
                return generated(pair, prompt_ids, cfg, max_new_tokens)
            return autoregressive(pair, prompt_ids, cfg, self.path, max_new_tokens)
        finally:
            torch.set_num_threads(before)


def plain_ways(model, threads: int | None = None) -> list[PlainWay]:
    """The ways worth timing for `model`: both target paths where the few-row one applies, `generate`, at the
    current thread count, one thread and torch's default count (on a CPU)."""
    paths = ["stock", "few_rows"] if takes_split(model) else ["stock"]
    if model.device.type != "cpu":
        counts: list[int | None] = [None]
    else:
        counts = sorted({threads or torch.get_num_threads(), 1, TORCH_DEFAULT_THREADS})
    return [PlainWay("tevviz", p, k) for k in counts for p in paths] + [PlainWay("generate", "stock", k)
                                                                          for k in counts]


@dataclass(frozen=True)
class BestPlain:
    """The fastest plain decoding of one prompt: the way chosen, its timing over the whole length, and each way's
    tokens/s over the short probe that chose it."""

    way: PlainWay
    result: BaselineResult
    probe: dict[str, float]  # each way's label -> tokens/s over the probe
    probe_tokens: int

    @property
    def tokens_per_s(self) -> float:
        return self.result.tokens_per_s

    @property
    def token_ids(self) -> list[int]:
        return self.result.token_ids

    @property
    def seconds(self) -> float:
        return self.result.seconds

    def describe(self) -> str:
        """One line for a person: the rate and the way that reached it."""
        return (f"{self.tokens_per_s:.1f} tok/s, {self.way.label()} (the fastest of {len(self.probe)} ways timed on "
                "this prompt)")

    def to_dict(self) -> dict:
        return {"tokens_per_s": self.tokens_per_s, "tokens": len(self.result.token_ids),
                "seconds": self.result.seconds, "way": self.way.label(), "loop": self.way.loop,
                "path": self.way.path, "threads": self.way.threads, "probe_tokens": self.probe_tokens,
                "probe_tokens_per_s": dict(self.probe)}


def fastest(rates: dict[PlainWay, float]) -> PlainWay:
    """The way with the highest rate; a tie goes to the way listed first."""
    return max(rates, key=lambda w: rates[w])


def best_plain(pair: ModelPair, prompt_ids: list[int], cfg, ways: list[PlainWay] | None = None,
               probe_tokens: int = PROBE_TOKENS, progress=None) -> BestPlain:
    """Time every way in `ways` (plain_ways by default) on `prompt_ids` for `probe_tokens` tokens, twice in turned
    order, then decode the whole length the fastest way; `progress(done, total)` is told after each timing."""
    from dataclasses import replace

    ways = ways or plain_ways(pair.target)
    probe_cfg = replace(cfg, stop_on_eos=False)  # every way writes the same tokens' worth
    n = max(2, min(probe_tokens, cfg.max_new_tokens))
    tokens = {w: 0 for w in ways}
    seconds = {w: 0.0 for w in ways}
    total, done = 2 * len(ways) + 1, 0
    for order in (ways, ways[::-1]):
        for w in order:
            r = w.run(pair, prompt_ids, probe_cfg, n)
            tokens[w] += len(r.token_ids)
            seconds[w] += r.seconds
            done += 1
            if progress is not None:
                progress(done, total)
    rates = {w: tokens[w] / seconds[w] if seconds[w] > 0 else 0.0 for w in ways}
    best = fastest(rates)
    result = best.run(pair, prompt_ids, cfg)
    if progress is not None:
        progress(total, total)
    return BestPlain(best, result, {w.label(): rates[w] for w in ways}, n)
