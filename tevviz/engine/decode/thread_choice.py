"""How many CPU threads decoding runs on, chosen by measurement: the target's passes, as decoding runs them, timed
at each count worth trying, once per machine and target, and kept in the cache (as the row paths are,
row_paths.py).

Why measured: on a quiet two-core machine SmolLM2-135M decoded plainly 1.6x faster on two threads than on one
(docs/experiments/2026-12-06-does-smollm2s-default-hold-on-twelve-prompts-a-set.md), while on a busy one, or beside a
browser on the same cores, two threads that must meet at every op stall (docs/app-latency.md). A fixed rule (one
fewer than the cores) lost the first case; a speed-up divided by a baseline at a better count then read 0.65x.
Why through the passes decoding takes: on another two-core machine the model's own layers ran a one-token pass no
faster on two threads (58 ms on either), while the few-row path ran it 1.5x faster there; the row paths are chosen
at each count first (row_paths.py), then the counts compared.

`TEVVIZ_THREADS`: `auto` (the default: the kept choice, confirmed by a short re-timing against one thread, else a
probe), `probe` (probe again and keep it), `spare`
(one fewer than the cores, at least one, unmeasured). `--threads N` and $OMP_NUM_THREADS decide before any of these.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..core.kv import new_cache
from ..core.timing import env_mode, keep_json, machine_key, median_ms, model_key
from ..load import threads as threads_policy
from ..load.threads import TORCH_DEFAULT_THREADS, thread_count
from .target_pass import TargetPass

logger = logging.getLogger("tevviz")
MODES = ("auto", "probe", "spare")
PROBE_CONTEXT = 48  # tokens in the cache under each timed pass
PROBE_ROWS = (1, 3, 16)  # a plain decoding step, a short chain's verification, a tree's
PROBE_REPEATS = 4
# More threads must be this much faster to be taken: where counts tie, the fewer win and a core stays free. Not a
# hair's breadth, since a count chosen on a quiet machine is kept, and threads that must meet at every op lose
# badly once something else takes a core (a notebook example: 13-15 s on two threads of a busy two-core machine,
# 2.9 s on one).
MARGIN = 0.15


def mode(environ=os.environ) -> str:
    """The thread mode `TEVVIZ_THREADS` asks for (auto when unset)."""
    return env_mode("TEVVIZ_THREADS", MODES, environ)


def candidates(cores: int, cap: int | None = None) -> list[int]:
    """The counts worth timing on `cores` cores, at most `cap`: one, the powers of two below, all but one, all."""
    top = max(1, min(cores, cap or cores))
    counts = {1, top, max(top - 1, 1)} | {2 ** i for i in range(1, top.bit_length()) if 2 ** i <= top}
    return sorted(counts)


def choose(ms: dict[int, dict[int, float]], margin: float = MARGIN) -> int:
    """The count whose passes took the least time (the geometric mean over the pass sizes timed), or the fewest
    threads within `margin` of it."""
    score = {k: math.exp(sum(math.log(max(t, 1e-9)) for t in by_rows.values()) / len(by_rows))
             for k, by_rows in ms.items()}
    best = min(score.values())
    return min(k for k, s in score.items() if s <= (1.0 + margin) * best)


@dataclass(frozen=True)
class ThreadChoice:
    """The thread count decoding runs on and what chose it."""

    threads: int
    source: str  # asked (--threads), env ($OMP_NUM_THREADS), spare, probe, cache, only (one count allowed), device
    ms: dict[int, dict[int, float]] = field(default_factory=dict)  # probe's median ms per count and rows
    cap: int | None = None  # the most the choice could take
    cores: int = TORCH_DEFAULT_THREADS
    cap_why: str = "the processes on this machine share them"  # why the cap: its words in `describe`

    def describe(self) -> str:
        """One line for a person: the count and why."""
        n = f"{self.threads} thread" + ("s" if self.threads != 1 else "")
        why = {"asked": "--threads", "env": "$OMP_NUM_THREADS", "device": "the models run on an accelerator",
               "spare": "TEVVIZ_THREADS=spare: one fewer than the cores",
               "probe": "the fastest target passes, timed on this machine now",
               "cache": "the fastest target passes, timed on this machine before",
               "only": "the only count allowed"}[self.source]
        if self.ms:
            why += "; a one-token pass took " + ", ".join(f"{t[1]:.1f} ms on {k}" for k, t in sorted(self.ms.items()))
        if self.cap is not None and self.cap < self.cores:
            why += f"; at most {self.cap} of the {self.cores} cores: {self.cap_why}"
        return f"{n} ({why})"

    def to_dict(self) -> dict:
        return {"threads": self.threads, "source": self.source, "cap": self.cap, "cap_why": self.cap_why,
                "ms": {str(k): {str(r): t for r, t in v.items()} for k, v in sorted(self.ms.items())}}


def probe_ms(model, counts, rows=PROBE_ROWS, repeats: int = PROBE_REPEATS) -> dict[int, dict[int, float]]:
    """Median ms of `model`'s target passes (TargetPass, its row paths chosen at each count) of each row count on a
    cached context, at each thread count, interleaved."""
    device = model.device
    vocab = min(model.config.vocab_size, 1000)
    tokens = (torch.arange(PROBE_CONTEXT + max(rows), device=device) * 7 + 3) % vocab
    context, block = tokens[None, :PROBE_CONTEXT], tokens[None, PROBE_CONTEXT:]
    cache = new_cache(model)
    before = torch.get_num_threads()
    passes = {}
    try:
        for k in counts:  # each count's row paths are its own (probed at that count the first time, then kept)
            torch.set_num_threads(k)
            passes[k] = TargetPass(model)
        with torch.inference_mode():
            model(input_ids=context, cache=cache, use_cache=True)

            def run(key) -> None:
                k, n = key
                if torch.get_num_threads() != k:
                    torch.set_num_threads(k)
                passes[k](block[:, :n], None, None, cache)
                cache.crop(-n)

            medians = median_ms(run, [(k, n) for k in counts for n in rows], repeats, device)
    finally:
        torch.set_num_threads(before)
    return {k: {n: medians[(k, n)] for n in rows} for k in counts}


def still_wins(model, threads: int, repeats: int = 1) -> bool:
    """Whether a kept count above one still beats one thread now (a short re-timing at each load): a machine that
    has since got busy makes more threads lose (README, *Use*: 0.5 against 3.2 tokens/s)."""
    if threads == 1:
        return True
    return choose(probe_ms(model, [1, threads], repeats=repeats)) == threads


def cache_file(pair, root: Path | None = None) -> Path:
    """Where the choice for `pair` on this machine is kept."""
    if root is None:
        from ..load.pairs import cache_root

        root = cache_root()
    key = f"{machine_key(threads=False)}\n{model_key(pair.target)}"  # the probe times the target alone
    return root / "threads" / f"{hashlib.sha256(key.encode()).hexdigest()[:24]}.json"


def read_cached(path: Path) -> dict[int, dict[int, float]] | None:
    """The probe's timings kept at `path`, or None where there are none or they do not parse."""
    try:
        data = json.loads(path.read_text())
        return {int(k): {int(r): float(t) for r, t in v.items()} for k, v in data["ms"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def write_cached(path: Path, ms: dict[int, dict[int, float]]) -> None:
    """Keep a probe's timings (core.timing.keep_json: whole or not at all)."""
    keep_json(path, {"machine": machine_key(threads=False),
                     "ms": {str(k): {str(r): t for r, t in v.items()} for k, v in ms.items()}})


def _kept_or_probed(pair, counts: list[int], how: str) -> tuple[dict[int, dict[int, float]], str]:
    """The timings of `counts`: the kept ones where they hold them all and their choice still wins, else a probe's,
    kept beside the other counts' (a capped app and an uncapped decode then share one file)."""
    path = cache_file(pair)
    kept = read_cached(path) or {}
    if how == "auto" and set(counts) <= set(kept):
        ms = {k: kept[k] for k in counts}
        if still_wins(pair.target, choose(ms)):
            return ms, "cache"
    # The first time on a machine each count's row paths are probed too: seconds for SmolLM2, more for a model of
    # billions of weights on many cores (kept after).
    logger.info("timing the target's passes at %s threads, once for this machine", ", ".join(map(str, counts)))
    ms = probe_ms(pair.target, counts)
    write_cached(path, kept | ms)
    return ms, "probe"


def settle(pair, requested: int | None = None, cap: int | None = None, environ=os.environ,
           cores: int | None = None, cap_why: str = ThreadChoice.cap_why) -> ThreadChoice:
    """Set torch's threads for decoding `pair`: `requested`, else $OMP_NUM_THREADS's, else the count whose target
    passes are fastest here (kept per machine and pair; at most `cap`); the choice made."""
    cores = threads_policy.TORCH_DEFAULT_THREADS if cores is None else cores  # read now: tests set it

    def made(threads: int, source: str, ms=None) -> ThreadChoice:
        return ThreadChoice(threads, source, ms or {}, cap, cores, cap_why)

    asked = thread_count(requested, cores, environ)
    if requested is not None or asked is None:
        if asked is not None and asked != torch.get_num_threads():
            torch.set_num_threads(asked)
        return made(torch.get_num_threads(), "asked" if requested is not None else "env")
    if pair.target.device.type != "cpu":
        return made(torch.get_num_threads(), "device")
    counts = candidates(cores, cap)
    how = mode(environ)
    if how == "spare" or len(counts) == 1:
        choice = made(min(asked, counts[-1]), "spare" if how == "spare" else "only")
    else:
        ms, source = _kept_or_probed(pair, counts, how)
        choice = made(choose(ms), source, ms)
    if choice.threads != torch.get_num_threads():
        torch.set_num_threads(choice.threads)
    return choice
