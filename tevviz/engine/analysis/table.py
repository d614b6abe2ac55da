"""An analysis's result as one typed table: named columns (a per-round number's column takes its name and heading
from the number registry) and rows of plain values. Text, markdown and HTML are three generic renderings of any
table (render/table.py), so an analysis is one engine function that returns a Table. Torch-free.

A cell holds a plain number, text, None (nothing to show), a stats.Estimate (mean ± SE) or a run_depths.Contrast
(its B - A ± SE, signed; a stats.PairedDiff too), a share written as a percent, or a split: a tuple of numbers
read together (`conditional/marginal/exact`); `Column.kind` says which, so every face writes a value the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field

KINDS = ("text", "count", "number", "signed", "estimate", "difference", "percent", "split")


@dataclass(frozen=True)
class Column:
    """One column: the key rows hold its values under, the heading a person reads, how its values are written."""

    key: str
    heading: str
    kind: str = "number"  # one of KINDS
    digits: int = 3

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"a column's kind is one of {', '.join(KINDS)}, not {self.kind!r}")

    @classmethod
    def of_number(cls, name: str, kind: str = "estimate") -> Column:
        """A column for the registered per-round number `name` (round_numbers.NUMBERS): its key and heading."""
        from ..records.round_numbers import NUMBERS

        n = NUMBERS[name]
        return cls(name, n.heading, kind, n.digits)


@dataclass(frozen=True)
class Table:
    """A titled table of rows (dicts keyed by column key), with notes that say how to read it."""

    title: str
    columns: tuple[Column, ...]
    rows: tuple[dict, ...]
    notes: tuple[str, ...] = ()
    id: str = ""  # an HTML id where a page links to it
    row_ids: tuple[str, ...] = field(default=())  # one per row where a page links to rows

    def __post_init__(self):
        keys = {c.key for c in self.columns}
        for i, row in enumerate(self.rows):
            missing = keys - set(row)
            if missing:
                raise ValueError(f"table {self.title!r}, row {i}: no value for {sorted(missing)}")

    def to_dict(self) -> dict:
        """Plain JSON: each estimate as {mean, se, n}, each contrast as {diff, se}."""
        def plain(v):
            if hasattr(v, "diff"):
                return {"diff": v.diff, "se": v.se}
            if hasattr(v, "mean") and hasattr(v, "se"):
                return {"mean": v.mean, "se": v.se, "n": v.n}
            return v

        return {"title": self.title, "columns": [c.key for c in self.columns],
                "rows": [{c.key: plain(r[c.key]) for c in self.columns} for r in self.rows], "notes": list(self.notes)}
