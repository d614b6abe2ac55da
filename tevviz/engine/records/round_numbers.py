"""Every per-round number, defined once: its name, one-line definition and unit, whether it needs the round's optimal
tree, how it is read from a round record and how it adds up over rounds and over a scan's prompts.

A number is None on a round where it is undefined (an unscored tree has no C_p, a round without its optimal tree no
C_p*, a round its optimal tree does not bound no drafter gap). It adds up over rounds as it declares:

- MEAN: the mean of the values defined (rounds without one are left out; None where no round has one);
- SUM: the sum of the values defined (0 where none is);
- RATIO: a ratio of sums, the sum of one number over the sum of another over the rounds that have both.

Over a scan's prompts it adds up as it declares too: MEAN is the mean over prompts of each prompt's value (the scan's
tables give its standard error), SUM the sum, RATIO the ratio of the sums over every round. Scans add up as their
prompts do: `tevviz scan merge` pools the shards' prompts, `tevviz scan compare` pairs each prompt's value.

The session summary (summary.py), the scan statistics (scan_stats.py), `tevviz decode` and `inspect`, the app's
statistics and the report read this table: a new derived number is one entry here. No torch here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from .records import STAGES, RoundRecord

MEAN, SUM, RATIO = "mean", "sum", "ratio"
AGGREGATIONS = {MEAN: "the mean of the values defined", SUM: "the sum of the values defined",
                RATIO: "a ratio of sums"}

Reader = Callable[[RoundRecord], "float | None"]


@dataclass(frozen=True)
class RoundNumber:
    """One per-round number and where the surfaces show it."""

    name: str  # its key in a round's row (tevviz inspect --json) and in this registry
    label: str  # a table's heading for it
    definition: str
    unit: str
    read: Reader | None  # its value on a round (None where undefined); None for a RATIO, read from its ratio
    over_rounds: str = MEAN
    over_prompts: str = MEAN
    needs_optimal: bool = False  # undefined on a round without its optimal tree (tevviz decode --optimal)
    digits: int = 3  # decimals a surface shows
    whole: bool = False  # a count: a round's value is a whole number (its means are not)
    mean_label: str = ""  # the heading of its mean where it has a name of its own (tau, the mean of L)
    undefined: str = ""  # what a surface says where no round has it
    session: str | None = None  # its key in the session's summary (decode --json, the report); None: not shown there
    scan: str | None = None  # its key in the scan statistics (estimated per category, paired by scan compare)
    column: bool = False  # a column of the per-round tables (tevviz inspect, the report)
    ratio: tuple[str, str, float] | None = None  # RATIO: numerator and denominator numbers, and a scale

    @property
    def heading(self) -> str:
        """The heading of its aggregate over rounds: `tau` for L, `mean E[L]` for E[L], `draft ms` for a sum."""
        if self.mean_label:
            return self.mean_label
        return f"mean {self.label}" if self.over_rounds == MEAN else self.label

    def value(self, r: RoundRecord) -> float | None:
        """Its value on round `r`; None where undefined."""
        if self.ratio is None:
            x = self.read(r)
            return x if x is None or self.whole else float(x)
        num, den, scale = self.ratio
        top, bottom = NUMBERS[num].value(r), NUMBERS[den].value(r)
        return None if top is None or not bottom else top / bottom * scale

    def defined(self, rounds: Iterable[RoundRecord]) -> int:
        """The rounds that have it."""
        return sum(self.value(r) is not None for r in rounds)

    def over(self, rounds: Sequence[RoundRecord]) -> float | None:
        """Its aggregate over `rounds`, as `over_rounds` declares."""
        if self.over_rounds == RATIO:
            return self._ratio(rounds)
        values = [x for x in map(self.value, rounds) if x is not None]
        if self.over_rounds == SUM:
            return sum(values) if self.whole else float(sum(values))
        return sum(values) / len(values) if values else None

    def over_prompt_rounds(self, prompts: Sequence[Sequence[RoundRecord]]) -> float | None:
        """Its aggregate over prompts, each given by its rounds, as `over_prompts` declares."""
        if self.over_prompts == RATIO:
            return self._ratio([r for rounds in prompts for r in rounds])
        return pool(self, [self.over(rounds) for rounds in prompts])

    def text(self, x: float | None, none: str = "-") -> str:
        """`x` as every surface writes this number: its decimals, whole numbers as they are, `none` where undefined."""
        if x is None:
            return none
        return str(x) if isinstance(x, int) and not isinstance(x, bool) else f"{x:.{self.digits}f}"

    def _ratio(self, rounds: Sequence[RoundRecord]) -> float | None:
        num, den, scale = self.ratio
        pairs = [(NUMBERS[num].value(r), NUMBERS[den].value(r)) for r in rounds]
        pairs = [(a, b) for a, b in pairs if a is not None and b is not None]
        bottom = sum(b for _, b in pairs)
        return sum(a for a, _ in pairs) / bottom * scale if bottom else None


def pool(number: RoundNumber, per_prompt: Sequence[float | None]) -> float | None:
    """Per-prompt values of a MEAN or SUM number added up over prompts as it declares (a RATIO needs the rounds)."""
    values = [x for x in per_prompt if x is not None]
    if number.over_prompts == SUM:
        return sum(values)
    if number.over_prompts == MEAN:
        return sum(values) / len(values) if values else None
    raise ValueError(f"{number.name} adds up over prompts as a ratio of sums: pool its rounds (over_prompt_rounds)")


def _exits(r: RoundRecord, k: int) -> float | None:
    split = r.exit_by_depth()[k]
    return sum(split) if split else None


def _best_missing(r: RoundRecord) -> float | None:
    gains = [m["gain"] for row in r.missing or [] for m in row]
    return max(gains) if gains else None


def _sized(field: str) -> Reader:
    return lambda r: None if r.sizing is None else getattr(r.sizing, field)


def _optimal(read: Callable) -> Reader:
    return lambda r: None if r.optimal is None else read(r.optimal)


def _stage(stage: str) -> RoundNumber:
    return RoundNumber(f"{stage}_ms", f"{stage} ms", f"wall time of the round's {stage} stage", "ms",
                       lambda r, s=stage: r.stage_ms.get(s), over_rounds=SUM, over_prompts=SUM, digits=1)


_NUMBERS = (
    RoundNumber("nodes", "nodes", "the tree's nodes, its root included", "nodes", lambda r: r.size, digits=1,
                whole=True, column=True),
    RoundNumber("depth", "depth", "the tree's depth H: its deepest node's depth", "tokens", lambda r: max(r.depths),
                digits=1, whole=True, column=True),
    RoundNumber("L", "L", "block length: accepted draft tokens plus the bonus token, d(exit) + 1", "tokens",
                lambda r: r.block_length, whole=True, mean_label="tau", session="tau", scan="tau", column=True),
    RoundNumber("tokens", "tokens", "tokens the round appended to the stream: its block, cut at EOS or the token "
                "limit", "tokens", lambda r: r.tokens_committed, over_rounds=SUM, over_prompts=SUM, whole=True),
    RoundNumber("expected_length", "E[L]", "expected block length under the round's verifier: 1 + C_p for an exact "
                "path verifier on a fixed tree, 1 + the reach of `accept` on a speculative chain", "tokens",
                lambda r: r.expected_length, undefined="no target scores", session="mean_expected_length",
                scan="expected_length", column=True),
    RoundNumber("C_p", "C_p", "target coverage: the sum of P over the non-root nodes (the expected accepted draft "
                "tokens of an exact path verifier)", "tokens", lambda r: r.C_p, undefined="no target scores"),
    RoundNumber("shortfall", "H - C_p", "the tree's depth less its coverage, sum_v w(v) (H - d(v)): how far short of "
                "the tree's own depth the target's continuation leaves it, on average", "tokens",
                lambda r: None if r.C_p is None else max(r.depths) - r.C_p, undefined="no target scores"),
    RoundNumber("width_exit", "width exits", "exit mass at internal nodes: the target's token was not among the "
                "children", "probability", lambda r: _exits(r, 0), undefined="no target scores"),
    RoundNumber("leaf_exit", "leaf exits", "exit mass at leaves: the tree ended there (its depth or budget)",
                "probability", lambda r: _exits(r, 1), undefined="no target scores"),
    RoundNumber("best_missing", "best missing gain", "the largest coverage gain P(v) p_v(a) of a target token a "
                "missing from the tree: the most C_p one more node could add", "tokens", _best_missing,
                undefined="no missing tokens recorded"),
    RoundNumber("C_p_star", "C_p*", "coverage of the optimal tree of the round's budget B and depth H", "tokens",
                _optimal(lambda o: o.C_p), needs_optimal=True, undefined="no optimal tree"),
    RoundNumber("optimal_ceiling", "1 + C_p*", "one plus the optimal tree's coverage: a ceiling on E[L] where that "
                "tree bounds the round, on a speculative chain only the best fixed tree of its budget", "tokens",
                _optimal(lambda o: 1 + o.C_p), needs_optimal=True, undefined="no optimal tree",
                session="mean_optimal_ceiling", scan="optimal_ceiling", column=True),
    RoundNumber("gap", "drafter gap", "C_p* - C_p, the expected block length the drafter lost at its budget; "
                "undefined where C_p* bounds nothing (a speculative chain)", "tokens",
                lambda r: None if (g := r.coverage_gap()) is None else g.gap, needs_optimal=True,
                undefined="no round it bounds", session="mean_gap", scan="gap", column=True),
    RoundNumber("held", "optimal mass held", "the share of the optimal tree's mass C_p* that the draft tree holds",
                "share", lambda r: None if (g := r.coverage_gap()) is None else g.held, needs_optimal=True,
                undefined="no optimal tree"),
    RoundNumber("optimal_ms", "optimal ms", "wall time of the optimal tree's computation (analysis, not decoding)",
                "ms", _optimal(lambda o: o.ms), needs_optimal=True, digits=0, undefined="no optimal tree",
                session="optimal_ms"),
    *(_stage(s) for s in STAGES),
    RoundNumber("ms", "stage ms", "the round's recorded stage times together", "ms",
                lambda r: sum(r.stage_ms.values()) if r.stage_ms else None, over_rounds=SUM, over_prompts=SUM,
                digits=1, column=True),
    RoundNumber("tokens_per_s", "tokens/s", "tokens committed per second, from the recorded stage times", "tokens/s",
                None, over_rounds=RATIO, over_prompts=RATIO, digits=1, ratio=("tokens", "ms", 1e3)),
    RoundNumber("sized_B", "B", "--budget auto: the non-root nodes the round was sized to", "nodes", _sized("B"),
                digits=1, whole=True, undefined="no auto budget"),
    RoundNumber("sized_H", "H", "--budget auto: the depth the round was sized to", "tokens", _sized("H"), digits=1,
                whole=True, undefined="no auto budget"),
    RoundNumber("undrafted", "undrafted rounds", "--budget auto: 1 where the round drafted nothing (a plain target "
                "step was priced above any tree)", "rounds",
                lambda r: None if r.sizing is None else int(not r.sizing.drafted), over_rounds=SUM, over_prompts=SUM,
                whole=True),
    RoundNumber("chain", "chain rounds", "the mixed builder: 1 where a sampled chain drafted the round, 0 where a "
                "tree did", "rounds", lambda r: None if r.sizing is None or r.sizing.chain is None
                else int(r.sizing.chain), over_rounds=SUM, over_prompts=SUM, whole=True),
)

NUMBERS: dict[str, RoundNumber] = {n.name: n for n in _NUMBERS}


class Selection(Sequence):
    """The registered numbers that show on one kind of surface, read from NUMBERS each time: a number added to the
    registry (one entry) reaches every surface that iterates a selection, wherever it was imported."""

    def __init__(self, field: str):
        self.field = field

    def _numbers(self) -> tuple[RoundNumber, ...]:
        return tuple(n for n in NUMBERS.values() if getattr(n, self.field))

    def __getitem__(self, i):
        return self._numbers()[i]

    def __len__(self) -> int:
        return len(self._numbers())

    def __iter__(self):
        return iter(self._numbers())


COLUMNS = Selection("column")  # the per-round tables' numbers, in registry order
SESSION = Selection("session")  # the session summary's means, in registry order
SCAN = Selection("scan")  # the scan's per-prompt means, in registry order


def numbers_over(rounds: Sequence[RoundRecord]) -> dict[str, float | None]:
    """Every number's aggregate over `rounds`, by name."""
    return {n.name: n.over(rounds) for n in NUMBERS.values()}


def round_row(r: RoundRecord) -> dict[str, float | None]:
    """A round's row of the per-round tables: its index and exit node, then each column number."""
    return {"round": r.index, "exit": r.exit_node, **{n.name: n.value(r) for n in COLUMNS}}


def mean_text(n: RoundNumber, value: float | None, defined: int, rounds: int) -> str:
    """How the text surfaces write a session aggregate: `mean drafter gap 0.120 (3 of 5 rounds)`, or
    `mean drafter gap - (no round it bounds)` where no round has it."""
    if value is None:
        return f"{n.heading} -" + (f" ({n.undefined})" if n.undefined else "")
    part = f" ({defined} of {rounds} rounds)" if n.over_rounds == MEAN and 0 < defined < rounds else ""
    return f"{n.heading} {n.text(value)}{part}"
