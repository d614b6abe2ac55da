"""What a session's rounds add up to: its summary, acceptance by depth (both curves) and where the exit mass went
by depth.

No torch here: the app, the CLI, the report and the figures read the same numbers from the same rounds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..records.records import STAGES, RoundRecord
from ..records.round_numbers import NUMBERS, SESSION, numbers_over
from .stats import share_se


@dataclass(frozen=True)
class SessionSummary:
    """Rounds, tokens committed, tau (mean L), the mean expected block length and stage totals (means: None when
    undefined). `expected_length` is each round's under its verifier (RoundRecord.expected_length): 1 + C_p for an
    exact path verifier on a fixed tree, more or less than that for speculative sampling on a sampled chain.

    `mean_optimal` averages C_p* over the `optimal_rounds` with an optimal tree; `mean_gap` the drafter gap over the
    `bounded_rounds` whose C_p* bounds them: a sampled chain's round has no drafter gap. `numbers` holds every
    per-round number's aggregate (round_numbers.NUMBERS), by name; the named fields are read from it."""

    rounds: int = 0
    tau: float | None = None
    mean_expected_length: float | None = None
    stage_ms: dict[str, float] = field(default_factory=lambda: dict.fromkeys(STAGES, 0.0))
    tokens: int = 0
    mean_optimal: float | None = None
    mean_gap: float | None = None
    optimal_rounds: int = 0
    bounded_rounds: int = 0
    numbers: dict[str, float | int | None] = field(default_factory=lambda: numbers_over([]))

    def to_dict(self) -> dict:
        return {**self.__dict__, "stage_ms": dict(self.stage_ms), "numbers": dict(self.numbers)}

    def session_values(self) -> dict[str, float | None]:
        """The means the session's summary shows (round_numbers.SESSION), by their keys there."""
        return {n.session: self.numbers[n.name] for n in SESSION}

    def __getitem__(self, key: str):
        """`summary["tau"]`: the field, as notebooks written when summarize() returned a dict read it."""
        if key not in self.__dataclass_fields__:
            raise KeyError(key)
        return getattr(self, key)


def summarize(rounds: list[RoundRecord]) -> SessionSummary:
    """The session summary of `rounds`: each number aggregated as round_numbers declares it."""
    numbers = numbers_over(rounds)
    return SessionSummary(
        rounds=len(rounds), tau=numbers["L"], mean_expected_length=numbers["expected_length"],
        stage_ms={s: numbers[f"{s}_ms"] for s in STAGES}, tokens=numbers["tokens"],
        mean_optimal=numbers["C_p_star"], mean_gap=numbers["gap"],
        optimal_rounds=NUMBERS["C_p_star"].defined(rounds), bounded_rounds=bounded_rounds(rounds), numbers=numbers,
    )


def bounded_rounds(rounds: list[RoundRecord]) -> int:
    """Rounds with an optimal tree that bounds them: those that summarize's mean drafter gap is taken over."""
    return NUMBERS["gap"].defined(rounds)


@dataclass(frozen=True)
class DepthAcceptance:
    """Acceptance at depth d under its two names (docs/json-schema.md, *acceptance by depth*):

    conditional = reached / prior: of the rounds that reached depth d - 1, the share that accepted a token at d;
    marginal = reached / rounds: the share of all rounds that reached d. The marginal never rises with d; the
    conditional can (the rounds that got deep are the easy ones). Beside them, exact rather than counted:
    expected = the target's probability of reaching d given each round's tree (RoundRecord.reach_by_depth), the
    mean over the scored rounds, whose sum over d is E[L] - 1; optimal = the same of the rounds' optimal trees
    (where every round has one that bounds it), whose sum over d is C_p*."""

    depth: int
    reached: int  # rounds whose accepted path reached depth d
    prior: int  # rounds whose accepted path reached d - 1 (every round at d = 1)
    rounds: int
    expected: float | None = None
    optimal: float | None = None

    @property
    def conditional(self) -> float | None:
        return self.reached / self.prior if self.prior else None

    @property
    def marginal(self) -> float | None:
        return self.reached / self.rounds if self.rounds else None

    @property
    def conditional_se(self) -> float | None:
        return share_se(self.reached, self.prior)

    @property
    def marginal_se(self) -> float | None:
        return share_se(self.reached, self.rounds)

    def to_dict(self) -> dict:
        return {"depth": self.depth, "conditional": self.conditional, "conditional_se": self.conditional_se,
                "marginal": self.marginal, "marginal_se": self.marginal_se, "expected": self.expected,
                "optimal": self.optimal, "reached": self.reached, "prior": self.prior, "rounds": self.rounds}


def acceptance_curves(rounds: list[RoundRecord], depths: int | None = None) -> list[DepthAcceptance]:
    """Acceptance at depths 1..`depths` (default: the deepest tree's depth), both curves."""
    depths = max((max(r.depths) for r in rounds), default=0) if depths is None else depths
    reach = [0] * (depths + 1)
    for r in rounds:
        for d in range(min(r.block_length - 1, depths) + 1):
            reach[d] += 1
    expected = _mean_by_depth([r.reach_by_depth() for r in rounds], depths)
    bounded = [r.optimal.reach_by_depth() if r.optimal is not None and r.optimal_bounds else None for r in rounds]
    optimal = _mean_by_depth(bounded if all(b is not None for b in bounded) else [], depths)
    return [DepthAcceptance(d, reach[d], reach[d - 1], len(rounds), expected[d - 1], optimal[d - 1])
            for d in range(1, depths + 1)]


def _mean_by_depth(rows: list[list[float] | None], depths: int) -> list[float | None]:
    """Per depth 1..`depths`, the mean over the rows given (None rows left out; 0 past a row's end)."""
    rows = [r for r in rows if r is not None]
    if not rows:
        return [None] * depths
    return [sum(r[d] for r in rows if d < len(r)) / len(rows) for d in range(depths)]


def exit_by_depth(rounds: list[RoundRecord]) -> dict:
    """Session means per depth of the width and leaf exit mass (over scored rounds; 0 where a round is shallower)."""
    splits = [r.exit_by_depth() for r in rounds]
    splits = [s for s in splits if s[0]]
    top = max((len(s[0]) for s in splits), default=0)
    n = len(splits)
    mean = lambda k, d: sum(s[k][d] for s in splits if d < len(s[k])) / n
    return {"width": [mean(0, d) for d in range(top)], "leaf": [mean(1, d) for d in range(top)], "rounds": n}



def drafted_flags(rounds: list[RoundRecord]) -> list[bool] | None:
    """Per committed token of these rounds in order, whether an accepted draft node wrote it (False: the target's own
    bonus token); None where a round does not carry its committed tokens."""
    flags: list[bool] = []
    for r in rounds:
        if not r.committed:
            return None
        drafted = r.block_length - 1  # the accepted path's nodes below the root; then the bonus token
        flags += [i < drafted for i in range(len(r.committed))]
    return flags
