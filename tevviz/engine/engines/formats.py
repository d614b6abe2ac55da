"""Every engine format by name, told apart by content; files read into one EngineAcceptance (docs/engines.md)."""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import TevvizError
from . import llamacpp, sglang, trtllm, vllm
from .acceptance import EngineAcceptance, EngineFigure
from .reading import FormatError

# Detection order: the JSON formats whose keys are unmistakable first, logs and metrics text after.
_MODULES = (trtllm, sglang, vllm, llamacpp)
PARSERS = {fmt: parse for m in _MODULES for fmt, parse in m.PARSERS.items()}
ACCEPTANCE_JSON = "acceptance-json"  # EngineAcceptance.to_dict(), as `tevviz engine import --json` prints it


def detect(text: str) -> str | None:
    """The format whose marks the text carries, or None."""
    if _record(text) is not None:
        return ACCEPTANCE_JSON
    return next((fmt for m in _MODULES if (fmt := m.detect(text)) is not None), None)


def _record(text: str) -> dict | None:
    """The text as one EngineAcceptance.to_dict() object, or None; in an object of several runs by engine (as
    `tevviz engine run --json` prints, its last line), the first engine's that is not tevviz's own."""
    try:
        d = json.loads(text)
    except json.JSONDecodeError:
        try:  # a command's saved output: the JSON object is its last line
            d = json.loads(text.strip().splitlines()[-1]) if text.strip() else None
        except json.JSONDecodeError:
            return None
    is_record = lambda x: isinstance(x, dict) and {"engine", "format", "steps", "accepted"} <= x.keys()
    if is_record(d) or not isinstance(d, dict):
        return d if is_record(d) else None
    return next((x for key, x in d.items() if key != "tevviz" and is_record(x)), None)


def _read_record(text: str, name: str) -> EngineAcceptance:
    d = _record(text)
    if d is None:
        raise FormatError(name, "expected one JSON object as `tevviz engine import --json` prints it")
    try:
        return EngineAcceptance.from_dict(d)
    except TevvizError as e:
        raise FormatError(name, str(e)) from None


PARSERS[ACCEPTANCE_JSON] = _read_record
FORMATS = tuple(sorted(PARSERS))


def read_text(text: str, name: str, fmt: str | None = None) -> EngineAcceptance:
    """One file's text as an engine's acceptance; `name` is the file as errors call it."""
    if not text.strip():
        raise FormatError(name, "the file is empty; expected an engine's log, /metrics text or responses")
    if fmt is None:
        fmt = detect(text)
        if fmt is None:
            raise FormatError(name, "not a known engine format; expected vLLM's 'SpecDecoding metrics:' log lines "
                                    "or vllm:spec_decode_* /metrics, SGLang responses with spec_verify_ct, "
                                    "llama-server's log, llamacpp:spec_decode_* /metrics or timings.draft_n, or "
                                    "TensorRT-LLM's specDecodingStats iteration log (or name one with --format)")
    elif fmt not in PARSERS:
        raise FormatError(name, f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
    return PARSERS[fmt](text, name)


def read_file(path: str | Path, fmt: str | None = None) -> EngineAcceptance:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise FormatError(str(path), f"cannot be read as text ({e.__class__.__name__}: {e})") from None
    return read_text(text, str(path), fmt)


def combine(records: list[EngineAcceptance]) -> EngineAcceptance:
    """Several files of one engine as one run: counts summed, depths padded, rows and notes kept in order."""
    if len(records) == 1:
        return records[0]
    engines = {r.engine for r in records}
    if len(engines) > 1:
        raise FormatError(", ".join(sorted(engines)), "files of different engines; import each engine's apart")
    first = records[0]
    fmt = first.format if len({r.format for r in records}) == 1 else "+".join(dict.fromkeys(r.format for r in records))
    per_depth = all(r.reached for r in records)
    depth = max(r.depth for r in records)
    reached = tuple(sum(r.reached[k] if k < r.depth else 0 for r in records) for k in range(depth)) if per_depth \
        else ()
    keeps_steps = all(r.per_step_accepted is not None for r in records)
    drafted_steps = keeps_steps and all(r.per_step_drafted is not None for r in records)
    notes = tuple(dict.fromkeys(n for r in records for n in r.notes))
    if not per_depth and any(r.reached for r in records):
        notes += ("no per-position figures: not every file has them",)
    return EngineAcceptance(
        first.engine, fmt,
        None if any(r.steps is None for r in records) else sum(r.steps for r in records),
        sum(r.accepted for r in records),
        None if any(r.drafted is None for r in records) else sum(r.drafted for r in records),
        reached,
        tuple(a for r in records for a in r.per_step_accepted) if keeps_steps else None,
        tuple(d for r in records for d in r.per_step_drafted) if drafted_steps else None,
        tuple(p for r in records for p in r.prompts),
        notes,
        _figures(records),
    )


def _figures(records: list[EngineAcceptance]) -> tuple[EngineFigure, ...]:
    """Each engine figure of the same name as one, its values weighted by their files' steps."""
    out = []
    for name in dict.fromkeys(f.name for r in records for f in r.engine_figures):
        pairs = [(f, r.steps or 0) for r in records for f in r.engine_figures if f.name == name]
        weight = sum(w for _, w in pairs)
        value = sum(f.value * w for f, w in pairs) / weight if weight else pairs[0][0].value
        out.append(EngineFigure(name, value, pairs[0][0].meaning))
    return tuple(out)
