"""Acceptance by depth (both curves), tau and mean E[L] of two runs' rounds with B - A and its standard error: the
per-depth half of a run comparison (engine/analysis/run_compare.py). Torch-free."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from ..records.records import RoundRecord
from ..records.round_numbers import NUMBERS, SESSION
from .stats import Estimate, share
from .summary import acceptance_curves
from .table import Column, Table


@dataclass(frozen=True)
class Contrast:
    """A number estimated on each run's rounds, and B - A with its standard error (the runs taken as independent)."""

    a: Estimate
    b: Estimate

    @property
    def diff(self) -> float | None:
        return None if self.a.mean is None or self.b.mean is None else self.b.mean - self.a.mean

    @property
    def se(self) -> float | None:
        return None if self.a.se is None or self.b.se is None else math.hypot(self.a.se, self.b.se)

    def to_dict(self) -> dict:
        return {"a": asdict(self.a), "b": asdict(self.b), "diff": self.diff, "se": self.se}


@dataclass(frozen=True)
class DepthRow:
    """Acceptance at depth d of both runs, as two curves.

    conditional: of the rounds whose block reached depth d - 1, the share that accepted a token at d;
    marginal: the share of all rounds whose block reached depth d."""

    depth: int
    conditional: Contrast
    marginal: Contrast

    def to_dict(self) -> dict:
        return {"depth": self.depth, "conditional": self.conditional.to_dict(), "marginal": self.marginal.to_dict()}


@dataclass(frozen=True)
class DepthTable:
    """Both runs over their rounds: acceptance by depth, tau (mean L) and mean E[L], each with standard errors."""

    rows: list[DepthRow]
    tau: Contrast
    expected_length: Contrast
    # Every session number (round_numbers.SESSION) that either run has, by name, tau and mean E[L] among them.
    numbers: dict[str, Contrast] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"rows": [r.to_dict() for r in self.rows], "tau": self.tau.to_dict(),
                "expected_length": self.expected_length.to_dict()}


def depth_curves(rounds: list[RoundRecord], depths: int) -> tuple[list[Estimate], list[Estimate]]:
    """(conditional, marginal) acceptance at depths 1..`depths` of one run's rounds (DepthRow says which is which)."""
    curves = acceptance_curves(rounds, depths)
    return [share(a.reached, a.prior) for a in curves], [share(a.reached, a.rounds) for a in curves]


def depth_table(a: list[RoundRecord], b: list[RoundRecord]) -> DepthTable:
    """Acceptance by depth (both curves), tau and mean E[L] of two runs' rounds, with B - A and its SE."""
    depths = max((max(r.depths) for r in (*a, *b)), default=0)
    cond_a, marg_a = depth_curves(a, depths)
    cond_b, marg_b = depth_curves(b, depths)
    rows = [DepthRow(d + 1, Contrast(cond_a[d], cond_b[d]), Contrast(marg_a[d], marg_b[d])) for d in range(depths)]
    numbers = {n.name: number_contrast(n.name, a, b) for n in SESSION}
    numbers = {k: c for k, c in numbers.items() if c.a.n or c.b.n or k in ("L", "expected_length")}
    return DepthTable(rows, numbers["L"], numbers["expected_length"], numbers)


def number_contrast(name: str, a: list[RoundRecord], b: list[RoundRecord]) -> Contrast:
    """A registered number's mean ± SE over each run's rounds that have it."""
    values = lambda rs: Estimate.of([x for x in map(NUMBERS[name].value, rs) if x is not None])
    return Contrast(values(a), values(b))


DEPTH_NOTE = ("Conditional: of the rounds whose block reached depth d - 1, the share that accepted a token at d; "
              "marginal: the share of all rounds whose block reached d. ± one standard error over rounds, the two "
              "runs taken as independent.")


def depth_analysis(t: DepthTable, a: str = "A", b: str = "B") -> tuple[Table, Table]:
    """The analysis of two runs' rounds as two tables: acceptance by depth (both curves, B - A), and tau and mean E[L]
    (their headings the registry's) with B - A; `a` and `b` name the runs."""
    cols = (Column("depth", "depth", "count"), Column("cond_a", f"conditional {a}", "estimate"),
            Column("cond_b", f"conditional {b}", "estimate"), Column("cond_d", "B − A", "difference"),
            Column("marg_a", f"marginal {a}", "estimate"), Column("marg_b", f"marginal {b}", "estimate"),
            Column("marg_d", "B − A", "difference"))
    rows = tuple({"depth": r.depth, "cond_a": r.conditional.a, "cond_b": r.conditional.b, "cond_d": r.conditional,
                  "marg_a": r.marginal.a, "marg_b": r.marginal.b, "marg_d": r.marginal} for r in t.rows)
    depths = Table("acceptance by depth", cols, rows, (DEPTH_NOTE,), id="depths",
                   row_ids=tuple(f"depth-{r.depth}" for r in t.rows))
    number = (Column("number", "", "text"), Column("a", a, "estimate"), Column("n_a", f"{a} rounds", "count"),
              Column("b", b, "estimate"), Column("n_b", f"{b} rounds", "count"), Column("d", "B − A", "difference"))
    means = tuple({"number": NUMBERS[k].heading, "a": c.a, "n_a": c.a.n, "b": c.b, "n_b": c.b.n, "d": c}
                  for k, c in (t.numbers or {"L": t.tau, "expected_length": t.expected_length}).items())
    return depths, Table("both runs over their rounds", number, means, id="summary")
