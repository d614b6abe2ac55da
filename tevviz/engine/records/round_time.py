"""What a round costs in ms: lines fitted online to the measured stage times, and the fit as the app shows it.

A round costs `overhead + draft_fixed + H * draft_level + target(n)` (docs/auto-budget.md); a plain target step (one
token, no draft) is timed on its own, since on a CPU a pass over two tokens already costs half a step more than one.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

WINDOW = 48  # rounds the cost model remembers: recent enough to follow load, enough to fit a line


def round_cost(c, nodes, levels: int):
    """ms of a round of `nodes` non-root nodes and `levels` draft forwards under a cost model `c` (Plan or Fit)."""
    draft = c.draft_fixed + levels * c.draft_level if levels else 0.0
    return c.overhead + draft + c.target_fixed + c.target_per_token * (nodes + 1)


@dataclass(frozen=True)
class Fit:
    """The cost model as the app shows it (ms)."""

    target_fixed: float
    target_per_token: float
    draft_level: float
    overhead: float
    calibration: float  # realised C_p over the predicted reach of the same trees: 1 when the table is right
    rounds: int
    plain: float  # a round without a draft: measured, or from the tree line until one has run
    first_accept: float = 0.0  # mean target probability of the draft's first-choice children (0: none yet)
    first_q: float = 0.0  # and their mean draft q (never 0 once one is seen; JSON keeps finite numbers only)
    draft_fixed: float = 0.0  # draft ms of a drafted round beyond its levels (sessions saved before it: 0)

    @classmethod
    def from_sizing(cls, sizing: dict) -> Fit:
        """The fit in a round's sizing as the JSON holds it (graph.sizing: RoundSizing.to_dict())."""
        kw = {k: sizing[k] for k in cls.__dataclass_fields__ if k in sizing}
        # Sessions saved before plain steps were timed on their own priced them on the line.
        kw.setdefault("plain", kw["overhead"] + kw["target_fixed"] + kw["target_per_token"])
        return cls(**kw)


# The keys a round's sizing must hold in the JSON (the rest have defaults): the chosen size and the fit's lines.
SIZING_KEYS = ("B", "H", "target_fixed", "target_per_token", "draft_level", "overhead", "calibration", "rounds")


@dataclass(frozen=True)
class RoundSizing:
    """How --budget auto sized one round (RoundRecord.sizing; flat in the JSON, `graph.sizing`)."""

    B: int  # non-root nodes the round drafted
    H: int  # its depth
    warmup: bool  # one of the cost model's first rounds, sized to fit its lines
    drafted: bool  # False: a plain target step, no draft
    fit: Fit  # the cost model after the round
    chain: bool | None = None  # the mixed builder: whether a sampled chain drafted this round (None: not mixed)
    tree_rate: float | None = None  # the mixed builder: each arm's measured expected tokens per ms
    chain_rate: float | None = None

    def to_dict(self) -> dict:
        mixed = {} if self.chain is None else {"chain": self.chain, "tree_rate": self.tree_rate,
                                               "chain_rate": self.chain_rate}
        return {"B": self.B, "H": self.H, "warmup": self.warmup, "drafted": self.drafted, **vars(self.fit), **mixed}

    @classmethod
    def from_dict(cls, d: dict) -> RoundSizing:
        """Inverse of to_dict; sessions saved before `warmup`, `drafted` or the fit's later fields read as then."""
        mixed = {k: d[k] for k in ("chain", "tree_rate", "chain_rate") if k in d}
        return cls(B=d["B"], H=d["H"], warmup=bool(d.get("warmup", False)), drafted=bool(d.get("drafted", True)),
                   fit=Fit.from_sizing(d), **mixed)


class Points:
    """The last `size` points (x, y) of a measurement and their running sums: a line or a mean costs the same
    at any window, once a round (the cost model's bookkeeping is part of every round it sizes)."""

    def __init__(self, size: int = WINDOW):
        self.points: deque = deque(maxlen=size)
        self.sx, self.sxx = 0, 0  # x are counts (tokens, levels) where a line is fitted: exact sums
        self.sy = self.sxy = 0.0

    @property
    def n(self) -> int:
        return len(self.points)

    def append(self, x, y: float) -> None:
        if len(self.points) == self.points.maxlen:
            self._add(*self.points[0], -1)
        self.points.append((x, y))
        self._add(x, y, 1)

    def _add(self, x, y: float, sign: int) -> None:
        self.sx += sign * x
        self.sxx += sign * x * x
        self.sy += sign * y
        self.sxy += sign * x * y

    def mean_y(self) -> float:
        return self.sy / self.n

    def line(self, share: float = 0.1) -> tuple[float, float]:
        """(intercept, slope) through the points; a slope kept positive, and `share` of the mean per x when the x
        do not vary."""
        if not self.n:
            return 1.0, 0.01
        n, mx, my = self.n, self.sx / self.n, self.sy / self.n
        spread = n * self.sxx - self.sx * self.sx  # n * sum (x - mx)^2, exact for integer x
        if spread <= 1e-9 * n * self.sxx:  # x that do not vary (for float x, up to rounding)
            slope = max(my / max(mx, 1) * share, 1e-6)
            return max(my - slope * mx, 0.0), slope
        slope = (n * self.sxy - self.sx * self.sy) / spread
        slope = max(slope, 1e-6)  # noise must not make bigger trees look free
        return max(my - slope * mx, 0.0), slope


def plain_rate(fit: Fit) -> float:
    """Expected tokens per ms of a round without a draft: one target pass over the root, one token."""
    return 1.0 / max(fit.plain, 1e-9)


def describe(fit: Fit) -> str:
    if not math.isfinite(fit.target_per_token):
        return "no rounds yet"
    return (f"a target pass {fit.target_fixed:.1f} ms + {fit.target_per_token:.2f} ms a draft token, "
            f"drafting {fit.draft_fixed:.1f} ms + {fit.draft_level:.1f} ms a level, "
            f"other {fit.overhead:.1f} ms, a plain step {fit.plain:.1f} ms; "
            + (f"the target takes the draft's top choice {fit.first_accept:.0%} of the time (the draft gives it "
               f"{fit.first_q:.0%}), " if fit.first_q else "")
            + f"trees held {fit.calibration:.2f} times the accepted tokens predicted (last {fit.rounds} rounds)")

