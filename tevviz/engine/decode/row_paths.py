"""Which path a target pass of n rows takes on a CPU: the model's own layers, or its linear layers as the few-row
transposed product (core/few_rows.py). Chosen per model and row count by timing both on this machine, as a BLAS
library or an autotuner chooses a kernel, and kept per machine, model and thread count in the cache.

Why measured and not fixed: on one machine the few-row path ran SmolLM2-135M's 2- and 3-token passes twice as fast,
and on another, or the same machine under another load, its one-token pass took 142 ms against 71 ms through the
model's own layers, which halved plain decoding (docs/experiments/2026-12-05-is-the-plain-baseline-the-best.md).

`TEVVIZ_ROW_PATHS`: `auto` (the default: the cached choice, else a probe), `probe` (probe again and keep it), `few`
(the few-row path at every row count up to its limit, unmeasured), `stock` (the model's own layers everywhere).
`TEVVIZ_FEW_ROWS=0` turns the few-row path off as before.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from ..core.timing import env_mode, keep_json, machine_key, median_ms, model_key

PATHS = ("stock", "few_rows")
MODES = ("auto", "probe", "few", "stock")
PROBE_CONTEXT = 48  # tokens in the cache under each timed pass (a short prompt's worth)
PROBE_REPEATS = 4
# The few-row path must be this much faster to be taken: where the two tie, the model's own layers stay.
MARGIN = 0.05


def mode(environ=os.environ) -> str:
    """The row-path mode `TEVVIZ_ROW_PATHS` asks for (auto when unset)."""
    return env_mode("TEVVIZ_ROW_PATHS", MODES, environ)


def choose(ms: dict[int, dict[str, float]], margin: float = MARGIN) -> frozenset[int]:
    """The row counts whose few-row pass beat the model's own by more than `margin` of its time."""
    return frozenset(n for n, t in ms.items() if t["few_rows"] < (1.0 - margin) * t["stock"])


@dataclass(frozen=True)
class RowPaths:
    """A model's target-pass path per row count: the counts that take the few-row path, and what chose them."""

    few_rows: frozenset[int] = frozenset()
    ms: dict[int, dict[str, float]] = field(default_factory=dict)  # the probe's median ms, per row count and path
    source: str = "off"  # probe, cache, few (forced), stock (forced) or off (the model does not take the path)

    def takes(self, rows: int) -> bool:
        """Whether a pass of `rows` tokens takes the few-row path."""
        return rows in self.few_rows

    def describe(self) -> str:
        """One line for a person: which row counts take which path, and why."""
        if self.source == "off":
            return "the model's own layers (the few-row path does not apply to this model or device)"
        few = sorted(self.few_rows)
        rest = [n for n in sorted(self.ms) if n not in self.few_rows]
        why = {"probe": "timed on this machine now", "cache": "timed on this machine before",
               "few": "TEVVIZ_ROW_PATHS=few", "stock": "TEVVIZ_ROW_PATHS=stock"}[self.source]
        if not few:
            return f"the model's own layers at every row count ({why})"
        taken = f"few-row path for {_counts(few)} rows"
        return taken + (f", the model's own layers for {_counts(rest)}" if rest else "") + f" ({why})"

    def to_dict(self) -> dict:
        return {"few_rows": sorted(self.few_rows), "source": self.source,
                "ms": {str(n): t for n, t in sorted(self.ms.items())}}

    @classmethod
    def from_dict(cls, data: dict, source: str = "cache") -> RowPaths:
        ms = {int(n): {p: float(t[p]) for p in PATHS} for n, t in data["ms"].items()}
        return cls(frozenset(int(n) for n in data["few_rows"]), ms, source)


def _counts(ns: list[int]) -> str:
    return ", ".join(str(n) for n in ns)


def probe_ms(run, rows, repeats: int = PROBE_REPEATS, device="cpu", clock=None) -> dict[int, dict[str, float]]:
    """Median ms of `run(path, n)` for both paths at every row count, paths and counts interleaved."""
    sizes = [(path, n) for n in rows for path in PATHS]
    kw = {} if clock is None else {"clock": clock}
    medians = median_ms(lambda key: run(*key), sizes, repeats, device, **kw)
    return {n: {path: medians[(path, n)] for path in PATHS} for n in rows}


def cache_file(model, root: Path | None = None) -> Path:
    """Where the choice for `model` on this machine is kept."""
    if root is None:
        from ..load.pairs import cache_root

        root = cache_root()
    digest = hashlib.sha256(f"{machine_key()}\n{model_key(model)}".encode()).hexdigest()[:24]
    return root / "row_paths" / f"{digest}.json"


def read_cached(path: Path) -> RowPaths | None:
    """The choice kept at `path`, or None where there is none or it does not parse (it is probed again)."""
    try:
        return RowPaths.from_dict(json.loads(path.read_text()), "cache")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def write_cached(path: Path, paths: RowPaths) -> None:
    """Keep a probe's choice (core.timing.keep_json: whole or not at all)."""
    keep_json(path, paths.to_dict() | {"machine": machine_key()})
