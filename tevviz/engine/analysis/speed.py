"""The speed-up explained: a run's time per generated token by stage against plain decoding's time per token, and
the tau a round of this cost must beat to pay (its break-even).

No torch: the numbers come from the rounds' recorded stage times (RoundRecord.stage_ms) and a baseline timing.

speed-up = baseline ms per token / ms per token = (tokens per round) / (round ms / baseline ms per token): a round
pays when it commits more tokens than the number of plain target steps its time would have bought.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..records.records import STAGES, RoundRecord

STAGE_NAMES = {"draft": "the draft", "target": "the target pass", "verify": "the verifier", "other": "the rest"}


@dataclass(frozen=True)
class SpeedBreakdown:
    """Where a run's time per generated token goes, against plain decoding's (all times in ms)."""

    rounds: int
    tokens: int  # tokens the rounds committed
    stage_ms_per_token: dict[str, float]  # each stage's recorded time over the rounds / tokens
    measured_ms_per_token: float | None  # wall time around whole rounds / tokens, where measured
    baseline_ms_per_token: float | None  # plain autoregressive decoding of the target
    drafting: str | None = None  # why no speed-up is claimed (no round drafted, or no drafted token accepted)

    @property
    def recorded_ms_per_token(self) -> float:
        """The stages' times per token added up."""
        return sum(self.stage_ms_per_token.values())

    @property
    def ms_per_token(self) -> float:
        """Time per token: measured where it was, else the stages' sum."""
        return self.recorded_ms_per_token if self.measured_ms_per_token is None else self.measured_ms_per_token

    @property
    def unrecorded_ms_per_token(self) -> float | None:
        """Measured time outside the recorded stages (a round's bookkeeping around them), per token."""
        return None if self.measured_ms_per_token is None else self.measured_ms_per_token - self.recorded_ms_per_token

    @property
    def tokens_per_round(self) -> float | None:
        return self.tokens / self.rounds if self.rounds else None

    @property
    def round_ms(self) -> float | None:
        """A round's mean time."""
        return self.ms_per_token * self.tokens / self.rounds if self.rounds else None

    @property
    def break_even(self) -> float | None:
        """The tokens a round must commit to pay: its time in baseline token times (round ms / baseline ms per
        token)."""
        if self.round_ms is None or not self.baseline_ms_per_token:
            return None
        return self.round_ms / self.baseline_ms_per_token

    @property
    def speedup(self) -> float | None:
        """Baseline time per token / this run's; None where drafting did not run or did not pay (no ratio is
        claimed for speculation that committed nothing)."""
        if self.drafting or not self.baseline_ms_per_token or not self.tokens or self.ms_per_token <= 0:
            return None
        return self.baseline_ms_per_token / self.ms_per_token

    def relative(self) -> dict[str, float] | None:
        """Each stage's time per token in baseline token times (they add up to 1 / speed-up with the unrecorded
        rest)."""
        if not self.baseline_ms_per_token:
            return None
        return {k: v / self.baseline_ms_per_token for k, v in self.stage_ms_per_token.items()}

    @property
    def sentence(self) -> str:
        """Why the run is faster or slower than plain decoding, in one sentence."""
        if not self.rounds or not self.tokens:
            return "No rounds with recorded times yet."
        stages = self.stage_ms_per_token
        top = max(stages, key=stages.get)
        share = stages[top] / self.recorded_ms_per_token if self.recorded_ms_per_token > 0 else 0.0
        where = f"{STAGE_NAMES[top]} takes {share:.0%} of its time"
        if self.drafting:
            return f"No speed-up to claim: {self.drafting} ({self.ms_per_token:.1f} ms a token; {where})."
        if self.break_even is None:
            return (f"Each round takes {self.round_ms:.1f} ms and committed {self.tokens_per_round:.2f} tokens "
                    f"({self.ms_per_token:.1f} ms a token; {where}); time the baseline to see the tau it must beat.")
        verdict = "faster" if self.speedup >= 1 else "slower"
        return (f"Each round costs {self.break_even:.1f} target-token times and committed {self.tokens_per_round:.2f} "
                f"tokens: {self.speedup:.2f}x, {verdict} than plain decoding (to pay, a round must commit more than "
                f"{self.break_even:.1f}; {where}).")

    def to_dict(self) -> dict:
        return {**asdict(self), **{k: getattr(self, k) for k in (
            "recorded_ms_per_token", "ms_per_token", "unrecorded_ms_per_token", "tokens_per_round", "round_ms",
            "break_even", "speedup", "sentence")}, "relative": self.relative()}


def ms_per_token(seconds: float, tokens: int) -> float | None:
    """Milliseconds per token of a timing (a baseline's, or a run's), None without tokens."""
    return seconds * 1e3 / tokens if tokens > 0 else None


def speed_breakdown(rounds: list[RoundRecord], baseline_ms_per_token: float | None = None,
                    seconds: float | None = None) -> SpeedBreakdown:
    """The breakdown of `rounds`; `seconds` is the wall time measured around these same rounds (the app's session
    seconds), `baseline_ms_per_token` plain decoding's (ms_per_token of a baseline timing)."""
    tokens = sum(r.tokens_committed for r in rounds)
    totals = {s: sum(r.stage_ms.get(s, 0.0) for r in rounds) for s in STAGES}
    per_token = {s: (v / tokens if tokens else 0.0) for s, v in totals.items()}
    measured = None if seconds is None else ms_per_token(seconds, tokens)
    return SpeedBreakdown(len(rounds), tokens, per_token, measured, baseline_ms_per_token, drafting_note(rounds))


def drafting_note(rounds: list[RoundRecord]) -> str | None:
    """Why `rounds` can claim no speed-up from speculation: none drafted, or none of their drafted tokens was
    accepted (a ratio then measures the loop's overhead, not a drafter); None where drafted tokens were accepted."""
    if not rounds:
        return None
    drafted = sum(len(r.tokens) - 1 for r in rounds)
    if drafted == 0:
        return "drafting did not run (every round was a plain target step)"
    if not any(len(r.accepted) > 1 for r in rounds):
        return f"drafting did not pay (none of the {drafted} drafted tokens was accepted)"
    return None


@dataclass(frozen=True)
class PassCosts:
    """Measured ms of one target pass by the tokens it takes and of one draft forward by the rows it takes, on top of
    a cached context (benchmarks/pass_cost.py measures them); between and beyond the sizes measured, linear."""

    target_ms: dict[int, float]
    draft_ms: dict[int, float]

    def target(self, tokens: int) -> float:
        return _interpolate(self.target_ms, tokens)

    def draft(self, rows: int) -> float:
        return _interpolate(self.draft_ms, rows)


def _interpolate(points: dict[int, float], x: int) -> float:
    """The piecewise-linear curve through `points` at x (the nearest two points' line outside them)."""
    xs = sorted(points)
    if len(xs) == 1:
        return points[xs[0]] * max(x, 1) / max(xs[0], 1)
    i = next((k for k in range(1, len(xs) - 1) if x <= xs[k]), len(xs) - 1)
    a, b = xs[i - 1], xs[i]
    return max(points[a] + (points[b] - points[a]) * (x - a) / (b - a), 0.0)


def level_rows(record: RoundRecord) -> list[int]:
    """The draft rows each level of the round's kept tree needs: level d takes the kept nodes at depth d - 1 that
    have a kept child (a chain: 1 a level; a round without a draft: none)."""
    parents = {p for p in record.parents[1:] if p >= 0}
    depth = max(record.depths, default=0)
    return [sum(1 for v in parents if record.depths[v] == d - 1) for d in range(1, depth + 1)]


def ideal_round_ms(record: RoundRecord, costs: PassCosts) -> float:
    """What the round would cost if it cost only its forwards (pass_cost.py's model): one draft forward a level of
    its kept tree, over the rows that level needs, and one target pass over the tree's nodes."""
    return sum(costs.draft(r) for r in level_rows(record)) + costs.target(record.size)


@dataclass(frozen=True)
class IdealSpeed:
    """A run against its limit: the tokens/s it would reach if a round cost only its forwards at the measured
    pass costs (its own rounds' trees, hence its own tau), and the share of it achieved."""

    tokens: int
    ideal_ms: float  # the rounds' forwards (and the prefill's, where priced)
    measured_ms: float

    @property
    def ideal_tokens_per_s(self) -> float | None:
        return 1e3 * self.tokens / self.ideal_ms if self.ideal_ms > 0 else None

    @property
    def tokens_per_s(self) -> float | None:
        return 1e3 * self.tokens / self.measured_ms if self.measured_ms > 0 else None

    @property
    def share(self) -> float | None:
        """Achieved tokens/s over the ideal's (the ideal's time over the measured)."""
        return self.ideal_ms / self.measured_ms if self.measured_ms > 0 and self.ideal_ms > 0 else None


def ideal_speed(rounds: list[RoundRecord], costs: PassCosts, seconds: float, prefill_tokens: int = 0) -> IdealSpeed:
    """`rounds` (measured over `seconds`) against their ideal; `prefill_tokens` > 0 prices a prefill inside `seconds`
    as one target pass over that many tokens."""
    ideal = sum(ideal_round_ms(r, costs) for r in rounds)
    if prefill_tokens > 0:
        ideal += costs.target(prefill_tokens)
    return IdealSpeed(sum(r.tokens_committed for r in rounds), ideal, seconds * 1e3)
