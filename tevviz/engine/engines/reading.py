"""What every engine's parser shares: a file's name in its errors, JSON documents and JSON lines, Prometheus text, and
the verification steps rebuilt from the rounded figures an engine's log prints. Torch-free."""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from dataclasses import dataclass

from ..errors import TevvizError


class FormatError(TevvizError):
    """A file that is not what its format says; the message names the file and what was expected."""

    def __init__(self, name: str, expected: str):
        super().__init__(f"{name}: {expected}")


def json_documents(text: str, name: str) -> list:
    """The JSON values of a file: one document (a list is its items), or one per non-empty line (JSON lines, or a
    saved event stream's `data: {...}` lines); a streamed response's chunks of one `id` count once, as its last."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as whole:
        rows = []
        for i, line in enumerate(text.splitlines(), 1):
            line = line.removeprefix("data:").strip()
            if not line or line == "[DONE]" or line.startswith(("event:", "id:", ":")):
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                where = f"line {i}" if len(text.splitlines()) > 1 else f"character {whole.pos}"
                raise FormatError(name, f"truncated or malformed JSON at {where} ({e.msg}); expected a JSON "
                                        "document or one JSON object per line") from None
        return _last_chunks(rows)
    return value if isinstance(value, list) else [value]


def _last_chunks(rows: list) -> list:
    """Rows with an `id` (a response's, or SGLang's meta_info's) seen again are a stream's chunks: the last one holds
    the figures so far, so it alone is kept, where its first chunk stood."""
    ident = lambda r: r.get("id", (r.get("meta_info") or {}).get("id")) if isinstance(r, dict) else None
    last = {ident(r): i for i, r in enumerate(rows) if ident(r) is not None}
    first = {}
    for i, r in enumerate(rows):
        first.setdefault(ident(r), i)
    return [rows[last[ident(r)]] if ident(r) is not None else r for i, r in enumerate(rows)
            if ident(r) is None or first[ident(r)] == i]


def number(value, name: str, field: str, *, integer: bool = True):
    """A counter read from JSON or text: a non-negative number (an int where `integer`), else a FormatError."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise FormatError(name, f"{field} should be a number, got {value!r}") from None
    if not math.isfinite(x) or x < 0 or (integer and x != round(x)):
        raise FormatError(name, f"{field} should be a non-negative {'count' if integer else 'number'}, got {value!r}")
    return round(x) if integer else x


_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{([^}]*)\})?\s+(\S+)")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def prometheus(text: str, name: str, prefix: str) -> dict[tuple[str, str | None], float]:
    """Samples whose metric starts with `prefix`, summed over every label but `position` (engines, models):
    {(metric, position or None): value}."""
    out: dict[tuple[str, str | None], float] = defaultdict(float)
    for i, line in enumerate(text.splitlines(), 1):
        if not line.startswith(prefix):
            continue
        m = _SAMPLE.match(line)
        if m is None:
            raise FormatError(name, f"line {i} is not a Prometheus sample (metric{{labels}} value): {line[:80]!r}")
        labels = dict(_LABEL.findall(m.group(3) or ""))
        out[m.group(1), labels.get("position")] += number(m.group(4), name, m.group(1), integer=False)
    return dict(out)


@dataclass(frozen=True)
class SpecCounters:
    """A server's speculative-decoding counters since it started: drafts (verification steps), tokens drafted and
    accepted, and how many steps accepted a token at each draft position (empty where it has no such counter)."""

    drafts: int
    draft_tokens: int
    accepted_tokens: int
    reached: list[int]


def spec_counters(text: str, name: str, prefix: str, server: str, per_pos: tuple[str, ...]) -> SpecCounters:
    """The counters `prefix`drafts/draft_tokens/accepted_tokens (`_total`) and the per-position counter named in
    `per_pos` (suffixes after `prefix`) of a /metrics text; a missing total is a FormatError naming `server`."""
    samples = prometheus(text, name, prefix)
    total = {metric[len(prefix):].removesuffix("_total"): v for (metric, pos), v in samples.items() if pos is None}
    for key in ("drafts", "draft_tokens", "accepted_tokens"):
        if key not in total:
            raise FormatError(name, f"expected the counter {prefix}{key}_total in {server}'s /metrics text")
    names = {prefix + p for p in per_pos}
    counts = {int(pos): v for (metric, pos), v in samples.items() if pos is not None and metric in names}
    reached = [round(counts.get(k, 0)) for k in range(max(counts, default=-1) + 1)]
    return SpecCounters(round(total["drafts"]), round(total["draft_tokens"]), round(total["accepted_tokens"]), reached)


@dataclass(frozen=True)
class Rebuilt:
    """Verification steps and per-position counts rebuilt from a log's rounded figures."""

    steps: int
    reached: tuple[int, ...]
    candidates: tuple[int, int]  # the least and most steps the printed figures allow
    exact: bool  # one step count fits (or the drafted count pins it)


def rebuild_steps(name: str, where: str, accepted: int, mean_length: float, mean_digits: int,
                  rates: list[float], rate_digits: int, drafted: int | None) -> Rebuilt:
    """The step counts S that reproduce a printed mean length 1 + accepted / S and per-position rates count / S at
    their printed precision, the counts summing to `accepted` (each step accepts a prefix of at most K = len(rates)).
    Where drafted = S * K fits it is taken (every step drafted K); else the S nearest the printed mean."""
    half_mean, half_rate = 0.5 * 10 ** -mean_digits + 1e-9, 0.5 * 10 ** -rate_digits + 1e-9
    k = len(rates)
    lo = max(1, math.ceil(drafted / k)) if drafted and k else 1
    hi = drafted if drafted else max(accepted, 1) * 10 ** mean_digits + 1
    if accepted:  # only the S within the printed mean's rounding can fit
        lo = max(lo, math.floor(accepted / (mean_length - 1 + half_mean)))
        if mean_length - 1 - half_mean > 0:
            hi = min(hi, math.ceil(accepted / (mean_length - 1 - half_mean)))
    fits: list[tuple[int, tuple[int, ...]]] = []
    for s in range(lo, hi + 1):
        if abs(1 + accepted / s - mean_length) > half_mean:
            continue
        counts = tuple(round(r * s) for r in rates)
        if any(abs(c / s - r) > half_rate for c, r in zip(counts, rates)):
            continue
        if rates and sum(counts) != accepted:
            continue
        fits.append((s, counts))
    if not fits:
        raise FormatError(name, f"{where}: no number of steps gives mean length {mean_length} with {accepted} "
                                f"accepted tokens and per-position rates {rates}; the figures disagree")
    by_steps = dict(fits)
    if drafted and k and drafted % k == 0 and drafted // k in by_steps:
        s = drafted // k
    else:
        s = min(by_steps, key=lambda s: (abs(1 + accepted / s - mean_length), s))
    return Rebuilt(s, by_steps[s], (fits[0][0], fits[-1][0]), len(fits) == 1 or (bool(drafted) and s * k == drafted))
