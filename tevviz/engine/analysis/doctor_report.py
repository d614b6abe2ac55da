"""What the drafter doctor found (engine/scan/doctor.py measures it): each reading's acceptance by depth, the best, and
whether the checkpoint's own reading stands. Plain Python, no torch: the renderers read it."""

from __future__ import annotations

from dataclasses import dataclass

from .stats import Estimate
from .table import Column, Table

Z = 2.0  # combined standard errors a reading must beat the own reading by
FLOOR = 0.05  # and at least this many accepted drafted tokens per round

MEASURE = ("top-1 chain acceptance under greedy decoding: at depth 1, the share of rounds whose most likely drafted "
           "token is the target's; at depth 2, of those rounds, the share whose most likely next drafted token is "
           "too; and the drafted tokens accepted per round along that chain (both depths together), which the verdict "
           "compares; standard errors over prompts (rounds grouped by prompt), never below the SE over rounds")


@dataclass(frozen=True)
class DepthRate:
    """Top-1 chain acceptance at one depth: `accepted` of `trials` rounds, with its standard error."""

    depth: int
    accepted: int
    trials: int
    rate: float | None  # None when no round had a trial at this depth
    se: float | None
    binomial_se: float | None  # the SE were the rounds independent
    by_prompt: tuple[tuple[int, int], ...] = ()  # (accepted, trials) of each prompt, in order

    def to_dict(self) -> dict:
        return {"depth": self.depth, "rate": self.rate, "se": self.se, "accepted": self.accepted,
                "trials": self.trials, "by_prompt": [list(x) for x in self.by_prompt]}


@dataclass(frozen=True)
class ChainYield:
    """Drafted tokens accepted per round along the top-1 chain (every depth measured together), with its SE."""

    accepted: int  # drafted tokens accepted over all rounds
    trials: int  # rounds that tried depth 1
    rate: float | None  # None when no round drafted
    se: float | None
    binomial_se: float | None  # the SE were the rounds independent (from the per-round counts' variance)
    by_prompt: tuple[tuple[int, int], ...] = ()  # (accepted tokens, rounds) of each prompt, in order

    def to_dict(self) -> dict:
        return {"rate": self.rate, "se": self.se, "accepted": self.accepted, "rounds": self.trials,
                "by_prompt": [list(x) for x in self.by_prompt]}


@dataclass(frozen=True)
class ReadingResult:
    """One reading and what it measured."""

    name: str
    layer_ids: tuple[int, ...]  # hidden_states indices (0: the embedding output)
    options: tuple[tuple[str, object], ...]
    own: bool
    why: str
    depths: tuple[DepthRate, ...]  # depths 1..DEPTHS
    rounds: int  # rounds decoded over all prompts
    per_round: ChainYield  # what the verdict compares

    def rate(self, depth: int = 1) -> DepthRate:
        return self.depths[depth - 1]

    def to_dict(self) -> dict:
        return {"name": self.name, "layer_ids": list(self.layer_ids), "options": dict(self.options),
                "own": self.own, "why": self.why, "rounds": self.rounds,
                "acceptance": [d.to_dict() for d in self.depths],
                "tokens_per_round": self.per_round.to_dict()}


@dataclass(frozen=True)
class DoctorReport:
    """Every reading's acceptance, the best, and whether the checkpoint's own reading stands."""

    kind: str
    draft_name: str
    layout: str  # what was checked before decoding
    readings: tuple[ReadingResult, ...]  # empty: nothing to doctor
    best: str | None  # the name of the reading with the most accepted drafted tokens per round
    margin: float | None  # the strongest other reading's tokens per round minus the own's (None: no other)
    threshold: float | None  # what the margin must exceed to be clear: max(Z x its SE, FLOOR)
    ok: bool  # no reading beats the own one by a clear margin
    verdict: str
    prompts: int = 0
    max_new_tokens: int = 0
    builder: str = ""
    measure: str = MEASURE
    margin_rule: str = (f"the best other reading's accepted drafted tokens per round (top-1 chain, depths 1 and 2) "
                        f"minus the own's > max({Z:g} x the SE of that paired difference, {FLOOR:g})")

    @property
    def own(self) -> ReadingResult | None:
        return next((r for r in self.readings if r.own), None)

    @property
    def underpowered(self) -> bool:
        """Not shown wrong, but the prompts measured too loosely to tell readings FLOOR apart (threshold > FLOOR)."""
        return self.ok and self.threshold is not None and self.threshold > FLOOR

    def to_dict(self) -> dict:
        return {"kind": self.kind, "draft": self.draft_name, "layout": self.layout,
                "readings": [r.to_dict() for r in self.readings], "best": self.best, "margin": self.margin,
                "threshold": self.threshold, "margin_rule": self.margin_rule, "ok": self.ok, "verdict": self.verdict,
                "prompts": self.prompts, "max_new_tokens": self.max_new_tokens, "builder": self.builder,
                "measure": self.measure, "underpowered": self.underpowered}


OWN_MARK = "*"  # after the name of the checkpoint's own reading
READINGS_NOTE = ("± one standard error over prompts (never below the SE over rounds); rounds: those that tried the "
                 "depth")


def doctor_table(report: DoctorReport) -> Table:
    """The readings as one table: name (own marked), hidden_states indices, options, top-1 chain acceptance by depth
    with the rounds that tried it, and accepted drafted tokens per round (what the verdict compares)."""
    depths = len(report.readings[0].depths) if report.readings else 0
    cols = (Column("reading", "reading", "text"), Column("hidden_states", "hidden_states", "text"),
            Column("options", "options", "text"),
            *(c for d in range(1, depths + 1) for c in (Column(f"depth_{d}", f"depth {d}", "estimate"),
                                                         Column(f"trials_{d}", f"depth {d} rounds", "count"))),
            Column("tokens_per_round", "tokens / round", "estimate"), Column("rounds", "rounds", "count"))
    rows = tuple({"reading": r.name + (OWN_MARK if r.own else ""), "hidden_states": ", ".join(map(str, r.layer_ids)),
                  "options": ", ".join(f"{k}={v}" for k, v in r.options) or "-",
                  **{k: v for d in r.depths for k, v in ((f"depth_{d.depth}", Estimate(d.rate, d.se, d.trials)),
                                                         (f"trials_{d.depth}", d.trials))},
                  "tokens_per_round": Estimate(r.per_round.rate, r.per_round.se, r.per_round.trials),
                  "rounds": r.rounds} for r in report.readings)
    return Table("readings", cols, rows, (READINGS_NOTE,), id="readings")
