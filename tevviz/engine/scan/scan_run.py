"""Running a scan: decode every prompt of a prompt file with one pair and one DecodeConfig, appending each finished
prompt's rounds to the scan folder (scan_files.py), skipping the prompts already there."""

from __future__ import annotations

import datetime
import hashlib
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

from ..decode.session import DecodeConfig, DecodeSession, encode_prompt, has_chat_template
from ..errors import TevvizError
from ..load.models import ModelPair
from ..records.round_numbers import NUMBERS
from .prompt_files import ScanPrompt
from .scan_files import RECORDS, SCAN_SCHEMA, RecordWriter, block_bytes, done_hashes, prompt_hash

SAMPLE = 4096  # elements hashed per weight tensor for a model's fingerprint


@torch.no_grad()
def model_identity(model: torch.nn.Module, name: str) -> dict:
    """A model's name and a fingerprint of its weights as loaded (names, shapes, dtype and a strided sample of each
    tensor): equal weights give equal fingerprints wherever they were loaded from."""
    h = hashlib.sha256()
    count = 0
    for key, t in sorted(model.state_dict().items()):
        flat = t.detach().reshape(-1)
        count += flat.numel()
        sample = flat[:: max(1, flat.numel() // SAMPLE)].to("cpu", torch.float32)
        h.update(f"{key}{tuple(t.shape)}{t.dtype}".encode())
        h.update(sample.numpy().tobytes())
    return {"name": name, "class": type(model).__name__, "dtype": str(model.dtype).removeprefix("torch."),
            "parameters": count, "fingerprint": h.hexdigest()[:24]}


def settings_dict(cfg: DecodeConfig, chat: bool | None) -> dict:
    """A scan's settings as plain values: everything that decides its records besides the models and prompts."""
    return {"sampling": asdict(cfg.sampling),
            "builder": {**asdict(cfg.builder), "branching": list(cfg.builder.branching)},
            "verifier": cfg.verifier, "max_new_tokens": cfg.max_new_tokens, "seed": cfg.seed, "optimal": cfg.optimal,
            "missing_top": cfg.missing_top, "stop_on_eos": cfg.stop_on_eos, "chat": chat}


def scan_manifest(pair: ModelPair, cfg: DecodeConfig, chat: bool | None, prompts_file: Path, digest: str, count: int,
                  scanned: int, shard: tuple[int, int] | str | None, skipped: list[str]) -> dict:
    """The manifest of a new scan folder (`shard`: I/N, "auto" for a file a rank, or None)."""
    from ... import __version__

    return {
        "schema": SCAN_SCHEMA, "tevviz": __version__,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "settings": settings_dict(cfg, chat),
        "models": {"target": model_identity(pair.target, pair.target_name),
                   "draft": model_identity(pair.draft, pair.draft_name)},
        "device": str(pair.device),
        "prompts": {"file": str(prompts_file), "sha256": digest, "count": count, "skipped": skipped},
        "shard": shard if shard is None or isinstance(shard, str) else {"index": shard[0], "count": shard[1]},
        "scanned": scanned,
    }


@dataclass(frozen=True)
class PlannedPrompt:
    """A prompt with its token ids and whether it goes through the chat template."""

    prompt: ScanPrompt
    ids: list[int]
    chat: bool

    @property
    def hash(self) -> str:
        """What a resume compares with the finished prompts' lines (scan_files.prompt_hash)."""
        return prompt_hash(self.prompt.id, self.prompt.position, self.chat, self.prompt.text)


def plan_prompts(pair: ModelPair, prompts: list[ScanPrompt], chat: bool | None, skip_bad: bool = False,
                 where: str = "") -> tuple[list[PlannedPrompt], list[str]]:
    """Encode every prompt before anything is decoded; a prompt the models cannot take is an error naming its line,
    or is left out with `skip_bad` (returned as a problem)."""
    default = has_chat_template(pair.tokenizer) if chat is None else chat
    planned, problems = [], []
    for p in prompts:
        use_chat = default if p.chat is None else p.chat
        try:
            ids = encode_prompt(pair.tokenizer, p.text, chat=use_chat)
            if len(ids) + 1 > pair.context_length:
                raise TevvizError(f"{len(ids)} tokens, more than the models' {pair.context_length} positions allow")
        except TevvizError as e:
            msg = f"{where}:{p.line}: prompt {p.id!r}: {e}"
            if not skip_bad:
                raise TevvizError(msg + " (--skip-bad leaves such prompts out)") from None
            problems.append(msg)
            continue
        planned.append(PlannedPrompt(p, ids, use_chat))
    return planned, problems


@dataclass(frozen=True)
class ScanProgress:
    """Where a running scan stands after a prompt."""

    done: int  # prompts finished in the folder
    total: int  # prompts of this scan (its shard)
    prompt: str  # the id just finished
    category: str
    rounds: int
    tau: float
    seconds: float  # that prompt's decoding time
    elapsed: float  # wall time of this run so far
    eta: float | None  # seconds left at this run's pace

    def line(self) -> str:
        eta = "" if self.eta is None else f"  ETA {_clock(self.eta)}"
        return (f"[{self.done}/{self.total}] {self.prompt} ({self.category}): {self.rounds} rounds, "
                f"tau {self.tau:.2f}, {self.seconds:.1f} s{eta}")


def _clock(seconds: float) -> str:
    m, s = divmod(round(seconds), 60)
    return f"{m // 60}h{m % 60:02d}m" if m >= 60 else f"{m}m{s:02d}s"


def decode_prompt(pair: ModelPair, planned: PlannedPrompt, cfg: DecodeConfig,
                  stop: Callable[[], bool] | None = None) -> tuple[bytes, int, float, float] | None:
    """Decode one prompt as `tevviz decode` does (its seed: the scan's plus its position in the file); returns its
    block, rounds, tau and seconds, or None when `stop` said so before it finished."""
    p = planned.prompt
    c = replace(cfg, seed=cfg.seed + p.position, chat=planned.chat)
    t0 = time.perf_counter()
    session = DecodeSession(pair, planned.ids, c)
    t_prefill = time.perf_counter() - t0
    while not session.done:
        if stop is not None and stop():
            return None
        session.step()
    # As tevviz decode: the prefill and the optimal trees (analysis, not decoding) are left out of the time.
    seconds = time.perf_counter() - t0 - t_prefill - sum(r.optimal.ms for r in session.rounds if r.optimal) / 1e3
    rounds = session.rounds
    line = {"id": p.id, "position": p.position, "category": p.category, "chat": planned.chat, "seed": c.seed,
            "prompt": p.text, "prompt_token_ids": session.prompt_ids, "token_ids": session.generated,
            "text": pair.tokenizer.decode(session.generated), "rounds": len(rounds), "seconds": seconds,
            "notice": session.notice}
    tau = NUMBERS["L"].over(rounds) or 0.0  # the registry's mean L (round_numbers.py)
    return block_bytes(line, [r.to_dict() for r in rounds]), len(rounds), tau, seconds


def unfinished(planned: list[PlannedPrompt], folder: Path) -> list[PlannedPrompt]:
    """The prompts of `planned` whose block is in none of the folder's records files (by prompt hash)."""
    done = done_hashes(folder)
    return [p for p in planned if p.hash not in done]


def scan_steps(pair: ModelPair, planned: list[PlannedPrompt], cfg: DecodeConfig, folder: Path,
               stop: Callable[[], bool] | None = None, call: Callable | None = None,
               records: str = RECORDS) -> Iterator[ScanProgress]:
    """Decode the prompts not yet in `folder`, appending each to its file `records` as it finishes and yielding
    where the scan stands.

    Ends early, keeping every finished prompt, when `stop()` turns true (checked every round) or on an exception;
    `call(fn, *args)` runs each prompt's decoding (the app passes its model thread's).
    """
    todo = unfinished(planned, folder)
    finished = len(planned) - len(todo)
    t0 = time.perf_counter()
    with RecordWriter(folder, records) as writer:
        for k, item in enumerate(todo):
            result = (call or _direct)(decode_prompt, pair, item, cfg, stop)
            if result is None:
                return
            block, rounds, tau, seconds = result
            writer.append(block)
            finished += 1
            elapsed = time.perf_counter() - t0
            yield ScanProgress(finished, len(planned), item.prompt.id, item.prompt.category, rounds, tau, seconds,
                               elapsed, elapsed / (k + 1) * (len(todo) - k - 1))


def _direct(fn, *args):
    return fn(*args)


def run_scan(pair: ModelPair, planned: list[PlannedPrompt], cfg: DecodeConfig, folder: Path,
             progress: Callable[[ScanProgress], None] | None = None, stop: Callable[[], bool] | None = None,
             records: str = RECORDS) -> int:
    """`scan_steps` to the end; returns the prompts of `planned` finished in the folder."""
    finished = len(planned) - len(unfinished(planned, folder))
    for step in scan_steps(pair, planned, cfg, folder, stop, records=records):
        finished = step.done
        if progress is not None:
            progress(step)
    return finished
