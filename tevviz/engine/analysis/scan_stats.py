"""What a scan says, computed from its round records: per category and overall, tau, E[L], 1 + C_p* and the
drafter gap with standard errors over prompts; acceptance and the loss by depth; block lengths; tokens/s; the target
tokens the trees miss most; the rounds that lost most; and the paired comparison of two scans of the same prompts.

No torch: the CLI, the app and the report read the same numbers.
"""

from __future__ import annotations

import heapq
from collections import Counter
from dataclasses import asdict, dataclass, field

from ..records.records import RoundRecord
from ..records.round_numbers import NUMBERS, SCAN
from .stats import Estimate, PairedDiff

ALL = "all"  # the group of every prompt, first in every table
# The per-prompt means a scan estimates (and a compare pairs): the per-round numbers with a scan key.
METRICS = tuple(n.scan for n in SCAN)
METRIC_LABELS = {n.scan: n.heading for n in SCAN}


class _Metrics:
    """`stats.tau`, `stats.gap`...: the scan metrics (METRICS) held in `metrics`, read as attributes."""

    def __getattr__(self, key: str):
        metrics = self.__dict__.get("metrics")
        if metrics is None or key not in metrics:
            raise AttributeError(key)
        return metrics[key]

    def to_dict(self) -> dict:
        """Plain values, the metrics beside the other fields (as the scan's JSON has them)."""
        d = asdict(self)
        return {**{k: v for k, v in d.items() if k != "metrics"}, **d["metrics"]}


@dataclass(frozen=True)
class PromptStats(_Metrics):
    """One prompt's rounds reduced to means and per-depth counts (what aggregation and pairing need)."""

    id: str
    category: str
    position: int
    rounds: int
    tokens: int
    seconds: float  # decoding wall time (optimal trees left out)
    # Per scan metric, its aggregate over this prompt's rounds (round_numbers.SCAN): tau (the mean block length L),
    # expected_length, optimal (1 + C_p*), gap (the drafter gap, over the rounds whose C_p* bounds them).
    metrics: dict[str, float | None]
    reach: list[int]  # per depth d = 1, 2, ...: rounds whose accepted path reached d
    present: list[int]  # per depth d = 1, 2, ...: rounds whose tree has a node at d
    width: list[float]  # per depth 0, 1, ...: exit mass at internal nodes, summed over scored rounds
    leaf: list[float]  # per depth 0, 1, ...: exit mass at leaves, summed over scored rounds
    scored: int  # rounds with target scores
    lengths: dict[int, int]  # block length L -> rounds
    # per depth d = 1, 2, ...: the exact probability of reaching d (RoundRecord.reach_by_depth) summed over the
    # `exact_rounds` rounds that have it
    expected: list[float] = field(default_factory=list)
    exact_rounds: int = 0

    def conditional(self, d: int) -> float | None:
        """Of this prompt's rounds that reached depth d - 1, the share that accepted at d (summary.DepthAcceptance)."""
        prior = self.rounds if d == 1 else (self.reach[d - 2] if d - 2 < len(self.reach) else 0)
        return _reached(self.reach, d) / prior if prior else None

    def marginal(self, d: int) -> float | None:
        """The share of all this prompt's rounds that reached depth d."""
        return _reached(self.reach, d) / self.rounds if self.rounds else None

    def exit_mass(self, kind: str, d: int) -> float | None:
        """Mean width or leaf exit mass per round at depth d (0 where the trees are shallower)."""
        sums = self.width if kind == "width" else self.leaf
        return (sums[d] if d < len(sums) else 0.0) / self.scored if self.scored else None


def _reached(reach: list[int], d: int) -> int:
    return reach[d - 1] if d <= len(reach) else 0


def _add(into: list, values: list) -> None:
    into.extend([0] * (len(values) - len(into)))
    for i, x in enumerate(values):
        into[i] += x


def prompt_stats(id: str, category: str, position: int, rounds: list[RoundRecord], seconds: float) -> PromptStats:
    """Reduce one prompt's rounds (docs/math.md: block length, coverage, optimal tree, loss by depth)."""
    reach: list[int] = []
    present: list[int] = []
    width: list[float] = []
    leaf: list[float] = []
    expected: list[float] = []
    scored = exact = 0
    for r in rounds:
        if (reach_d := r.reach_by_depth()) is not None:
            exact += 1
            _add(expected, reach_d)
        top, exit_depth = max(r.depths), r.block_length - 1
        _add(present, [1] * top)
        _add(reach, [int(exit_depth >= d) for d in range(1, top + 1)])
        w, lf = r.exit_by_depth()
        if w:
            scored += 1
            _add(width, w)
            _add(leaf, lf)
    return PromptStats(
        id=id, category=category, position=position, rounds=len(rounds), tokens=NUMBERS["tokens"].over(rounds),
        seconds=seconds, metrics={n.scan: n.over(rounds) for n in SCAN}, reach=reach, present=present, width=width,
        leaf=leaf, scored=scored,
        lengths=dict(Counter(r.block_length for r in rounds)), expected=expected, exact_rounds=exact,
    )


@dataclass(frozen=True)
class GroupStats(_Metrics):
    """A category's (or every prompt's) numbers: estimates over prompts, the rest pooled over rounds."""

    name: str
    prompts: int
    rounds: int
    tokens: int
    seconds: float
    metrics: dict[str, Estimate]  # per scan metric (METRICS), its mean over prompts and standard error
    # Per depth d = 1, 2, ..., pooled over rounds (summary.DepthAcceptance): of the rounds that reached d - 1 the share
    # that accepted at d, and the share of all rounds that reached d.
    acceptance_conditional: list[float | None]
    acceptance_marginal: list[float | None]
    width: list[float]  # per depth 0, 1, ...: mean exit mass per scored round at internal nodes
    leaf: list[float]  # per depth 0, 1, ...: mean exit mass per scored round at leaves
    lengths: dict[int, int]  # block-length histogram
    # per depth d = 1, 2, ...: the exact probability of reaching d, the mean over the rounds that have it
    acceptance_expected: list[float | None] = field(default_factory=list)

    @property
    def tokens_per_s(self) -> float | None:
        return self.tokens / self.seconds if self.seconds > 0 else None

    def to_dict(self) -> dict:
        return {**super().to_dict(), "tokens_per_s": self.tokens_per_s,
                "lengths": {str(k): v for k, v in sorted(self.lengths.items())}}


def group_stats(name: str, prompts: list[PromptStats]) -> GroupStats:
    """Pool prompts: means and SEs over prompts for tau, 1 + C_p, 1 + C_p*, gap; sums per depth over rounds."""
    reach: list[int] = []
    present: list[int] = []
    width: list[float] = []
    leaf: list[float] = []
    expected: list[float] = []
    lengths: Counter = Counter()
    for p in prompts:
        _add(expected, p.expected)
        _add(reach, p.reach)
        _add(present, p.present)
        _add(width, p.width)
        _add(leaf, p.leaf)
        lengths.update(p.lengths)
    scored, rounds = sum(p.scored for p in prompts), sum(p.rounds for p in prompts)
    # Every scan metric adds up over prompts as a mean of the values defined (checked in round_numbers' tests).
    values = {m: [p.metrics[m] for p in prompts if p.metrics[m] is not None] for m in METRICS}
    return GroupStats(
        name=name, prompts=len(prompts), rounds=rounds,
        tokens=sum(p.tokens for p in prompts), seconds=sum(p.seconds for p in prompts),
        metrics={m: Estimate.of(values[m]) for m in METRICS},
        acceptance_conditional=[(a / n if n else None) for a, n in zip(reach, [rounds, *reach[:-1]])],
        acceptance_marginal=[a / rounds if rounds else None for a in reach],
        width=[x / scored for x in width] if scored else [], leaf=[x / scored for x in leaf] if scored else [],
        lengths=dict(lengths),
        acceptance_expected=[x / exact for x in expected] if (exact := sum(p.exact_rounds for p in prompts)) else [],
    )


def categories(prompts: list[PromptStats]) -> list[str]:
    """The categories in the order of their first prompt."""
    return list(dict.fromkeys(p.category for p in sorted(prompts, key=lambda p: p.position)))


def by_category(prompts: list[PromptStats]) -> dict[str, GroupStats]:
    """"all" first, then each category in the order of its first prompt."""
    groups = {ALL: group_stats(ALL, prompts)}
    for c in categories(prompts):
        groups[c] = group_stats(c, [p for p in prompts if p.category == c])
    return groups


@dataclass(frozen=True)
class MissedToken:
    """A target token that was a round's best missing child: how often, and the mass it carried in all."""

    token_id: int
    text: str
    rounds: int  # rounds where it was the best missing token
    mass: float  # sum over those rounds of its coverage gain P(v) p_v(a)


@dataclass(frozen=True)
class RoundLoss:
    """A round ranked by what it lost, and where it lies in the scan's records."""

    prompt: str
    category: str
    round: int
    lost: float  # the drafter gap C_p* - C_p where the optimal tree bounds the round, else H - C_p
    C_p: float
    C_p_star: float | None
    L: int
    size: int
    line: int  # line number in the records file
    lost_as: str = "gap"  # the per-round number `lost` is (round_numbers.NUMBERS): "gap" or "shortfall"


def round_loss(r: RoundRecord) -> tuple[float, float | None, str] | None:
    """(lost, C_p*, the number lost is) of a scored round: the drafter gap where the optimal tree bounds it, else
    the shortfall H - C_p, the expected depth the target's continuation falls short of the tree's own depth."""
    for name in ("gap", "shortfall"):
        lost = NUMBERS[name].value(r)
        if lost is not None:
            return lost, NUMBERS["C_p_star"].value(r) if name == "gap" else None, name
    return None


def best_missing(r: RoundRecord) -> dict | None:
    """The missing child of largest coverage gain anywhere in the round's tree (its `missing` record)."""
    best = None
    for row in r.missing or []:
        for m in row:
            if best is None or m["gain"] > best["gain"]:
                best = m
    return best


@dataclass
class ScanAccumulator:
    """Reads a scan prompt by prompt with flat memory: keeps per-prompt stats, a token tally and the worst rounds."""

    worst_k: int = 20
    prompts: list[PromptStats] = field(default_factory=list)
    missed: dict[int, list] = field(default_factory=dict)  # token id -> [text, rounds, mass]
    _worst: list[tuple] = field(default_factory=list)  # a min-heap of (lost, tie..., RoundLoss)
    _added: int = 0  # rounds offered to the heap so far

    def add(self, id: str, category: str, position: int, rounds: list[RoundRecord], seconds: float,
            lines: list[int] | None = None) -> PromptStats:
        """Add one prompt's rounds; `lines` are their line numbers in the records file."""
        stats = prompt_stats(id, category, position, rounds, seconds)
        self.prompts.append(stats)
        for k, r in enumerate(rounds):
            best = best_missing(r)
            if best is not None:
                entry = self.missed.setdefault(best["token_id"], [best.get("text", ""), 0, 0.0])
                entry[1] += 1
                entry[2] += best["gain"]
            loss = round_loss(r)
            if loss is not None and self.worst_k > 0:
                item = RoundLoss(id, category, r.index, loss[0], r.C_p, loss[1], r.block_length, r.size,
                                 lines[k] if lines else 0, loss[2])
                # The tie-breaker keeps the first of equal losses; the running count makes every key distinct, so
                # RoundLoss objects are never compared (a repeated round or position would reach them).
                self._added += 1
                key = (loss[0], -position, -r.index, -self._added, item)
                if len(self._worst) < self.worst_k:
                    heapq.heappush(self._worst, key)
                elif key[:4] > self._worst[0][:4]:
                    heapq.heapreplace(self._worst, key)
        return stats

    def worst(self) -> list[RoundLoss]:
        return [k[-1] for k in sorted(self._worst, key=lambda k: k[:4], reverse=True)]

    def missed_tokens(self, top: int = 20) -> list[MissedToken]:
        rows = [MissedToken(t, text, n, mass) for t, (text, n, mass) in self.missed.items()]
        return sorted(rows, key=lambda m: (-m.mass, -m.rounds, m.token_id))[:top]

    def summary(self) -> ScanSummary:
        prompts = sorted(self.prompts, key=lambda p: p.position)
        return ScanSummary(groups=by_category(prompts), missed=self.missed_tokens(), worst=self.worst(),
                           prompts=prompts)


@dataclass(frozen=True)
class ScanSummary:
    """Everything a scan says (docs: the scan section of the README)."""

    groups: dict[str, GroupStats]  # "all" first, then the categories
    missed: list[MissedToken]
    worst: list[RoundLoss]
    prompts: list[PromptStats]

    def to_dict(self) -> dict:
        return {"groups": {k: g.to_dict() for k, g in self.groups.items()},
                "missed_tokens": [asdict(m) for m in self.missed], "worst_rounds": [asdict(w) for w in self.worst],
                "prompts": [p.to_dict() | {"lengths": {str(k): v for k, v in p.lengths.items()}} for p in self.prompts]}


# --- two scans, paired by prompt ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GroupComparison:
    """One category's paired differences: the per-prompt metrics and, per depth, acceptance and exit mass."""

    name: str
    metrics: dict[str, PairedDiff]  # tau, expected_length, optimal, gap
    acceptance_conditional: list[PairedDiff]  # depth d = 1, 2, ... (summary.DepthAcceptance)
    acceptance_marginal: list[PairedDiff]
    width: list[PairedDiff]  # depth 0, 1, ...
    leaf: list[PairedDiff]


@dataclass(frozen=True)
class ScanComparison:
    """B against A on the prompts both scanned (matched by id)."""

    groups: dict[str, GroupComparison]
    only_a: list[str]
    only_b: list[str]

    def to_dict(self) -> dict:
        return asdict(self)


def _paired(pairs: list[tuple[PromptStats, PromptStats]], value) -> PairedDiff:
    kept = [(value(a), value(b)) for a, b in pairs]
    return PairedDiff.of([(x, y) for x, y in kept if x is not None and y is not None])


def compare_group(name: str, pairs: list[tuple[PromptStats, PromptStats]]) -> GroupComparison:
    """Paired differences B - A over prompts; a depth counts a prompt only where both scans have a value there."""
    top = max((max(len(a.present), len(b.present)) for a, b in pairs), default=0)
    deep = max((max(len(a.width), len(b.width)) for a, b in pairs), default=0)
    return GroupComparison(
        name=name, metrics={m: _paired(pairs, lambda p, m=m: p.metrics[m]) for m in METRICS},
        acceptance_conditional=[_paired(pairs, lambda p, d=d: p.conditional(d)) for d in range(1, top + 1)],
        acceptance_marginal=[_paired(pairs, lambda p, d=d: p.marginal(d)) for d in range(1, top + 1)],
        width=[_paired(pairs, lambda p, d=d: p.exit_mass("width", d)) for d in range(deep)],
        leaf=[_paired(pairs, lambda p, d=d: p.exit_mass("leaf", d)) for d in range(deep)],
    )


def compare_scans(a: list[PromptStats], b: list[PromptStats]) -> ScanComparison:
    """Pair the prompts of two scans by id; per category (A's) and overall, the paired B - A differences."""
    by_id = {p.id: p for p in b}
    pairs = [(p, by_id[p.id]) for p in sorted(a, key=lambda p: p.position) if p.id in by_id]
    groups = {ALL: compare_group(ALL, pairs)}
    for c in categories([x for x, _ in pairs]):
        groups[c] = compare_group(c, [(x, y) for x, y in pairs if x.category == c])
    a_ids = {p.id for p in a}
    return ScanComparison(groups, only_a=[p.id for p in a if p.id not in by_id],
                          only_b=[p.id for p in b if p.id not in a_ids])
