"""Acceptance by depth (both curves), tau and mean E[L] of two runs' rounds with B - A and its standard error: the
per-depth half of a run comparison (engine/records/run_compare.py). Torch-free."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from .records import RoundRecord
from .stats import Estimate, share
from .summary import acceptance_curves


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
    lengths = lambda rs: Estimate.of([r.expected_length for r in rs if r.expected_length is not None])
    return DepthTable(rows,
                      Contrast(Estimate.of([r.block_length for r in a]), Estimate.of([r.block_length for r in b])),
                      Contrast(lengths(a), lengths(b)))


