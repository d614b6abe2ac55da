"""The sampled chain's cost model (speculative sampling): how deep a chain pays this round.

A chain's acceptances are strongly correlated along it (a run of predictable text accepts every token), which a
product of per-node means misses by far. Every drafted chain of length h gives, from its exact acceptances
`a_1..a_h`, its chance of reaching each depth; decayed sums of those over recent rounds give a survival ratio per
depth, and their products the expected accepted tokens of each depth. Each round drafts the depth of the best expected
rate (none when a plain step is better), one deeper or one shallower every EXPLORE-th round so the neighbouring depths
stay measured. Each depth's round time is its own mean over many rounds (on a CPU a target pass over 5 tokens can
cost less than over 4, which no line shows), kept in units of the machine's current load: one scalar that every round
updates, so that a depth not drafted lately (a plain step, say) is not priced at the speed of an hour ago. A chain
learns no acceptance table (its depth is forced, nothing is ranked), and every sum is kept running: the model's
bookkeeping is part of each round it sizes, and on a CPU it was 2-3% of a round.
"""

from __future__ import annotations

from ..records.round_time import WINDOW, Fit, round_cost

MAX_CHAIN = 64  # the deepest sampled chain the survival sums keep (builders.MAX_DEPTH)
EXPLORE = 4  # every EXPLORE-th round drafts one deeper or (every other time) one shallower
SHAPE_WINDOW = 64  # rounds of a chain depth its mean time remembers (in load units: the machine's shape)
SHAPE_PRIOR = 1.0  # rounds' worth of the cost model's line that a depth's mean starts from
LOAD_WINDOW = 16  # rounds the load (measured over predicted round time) follows
MAX_RATIO = 2.0  # the most one round's measured over predicted time counts for, either way


class ChainCost:
    """Survival sums and per-depth round times of the session's sampled chains."""

    def __init__(self):
        # Decayed sums over drafted chains: for each depth h, over the rounds that drafted at least h, the chance
        # of reaching h - 1 (1 for h = 1) and of reaching h, exact from each round's acceptances.
        self.reached_before, self.reached = [0.0] * (MAX_CHAIN + 1), [0.0] * (MAX_CHAIN + 1)
        self.prefix_window = WINDOW  # drafted chains the survival sums remember
        # For each chain depth (0: no draft): its rounds (at most SHAPE_WINDOW) and the running geometric mean of
        # their ms over the load then. A depth not drafted keeps its mean: the load carries the machine's speed since.
        self.depth_rounds, self.depth_ms = [0] * (MAX_CHAIN + 1), [0.0] * (MAX_CHAIN + 1)
        self.load = 1.0  # the machine's speed now against the depths' means: 2 when every round takes twice as long

    def tokens(self, max_depth: int) -> list[float]:
        """Expected accepted draft tokens of a sampled chain of each depth 0..max_depth, from the chains measured.

        The chance of reaching depth h is a product of survival ratios, P(reach h) / P(reach h - 1), each from the
        chains that drafted h, drawn toward the ratio of depth h - 1 (one chain's worth; 1/2 for depth 1). So the
        expected tokens never fall with depth, and a depth drafted seldom or long ago is priced like its shallower
        neighbour rather than by the few chains that last drafted it.
        """
        reached, before = self.reached, self.reached_before
        out, reach, ratio = [0.0], 1.0, 0.5
        for h in range(1, min(max_depth, MAX_CHAIN) + 1):
            ratio = (reached[h] + ratio) / (before[h] + 1.0)
            reach *= ratio
            out.append(out[-1] + reach)
        return out

    def ms(self, fit: Fit, max_depth: int) -> list[float]:
        """Predicted ms of a chain round of each depth 0..max_depth (0: no draft): the depth's mean at the current
        load, drawn toward the cost model's line while the depth has few rounds.

        Depth 0 is priced this way too, not by the plain steps' recent times: those are measured only while plain
        steps win, and go stale when the load moves.
        """
        return [self.price(fit, h) for h in range(min(max_depth, MAX_CHAIN) + 1)]

    def best_depth(self, fit: Fit, max_depth: int) -> int:
        """The chain depth of the best expected tokens per ms (0: a plain step is better)."""
        rates = [(1 + e) / max(ms, 1e-9) for e, ms in zip(self.tokens(max_depth), self.ms(fit, max_depth), strict=True)]
        return max(range(len(rates)), key=rates.__getitem__)

    def depth(self, fit: Fit, max_depth: int, rounds: int) -> int:
        """The depth round number `rounds` drafts: the best one, or every EXPLORE-th round a neighbour."""
        depth = self.best_depth(fit, max_depth)
        if rounds % EXPLORE == 0:
            # Up keeps the next depth's survival ratio measured; down keeps the shallower depth's time measured
            # (its ratio is measured by every chain), which a slow round would otherwise fix for good.
            step = 1 if (rounds // EXPLORE) % 2 else -1
            depth = min(max(depth + step, 0), max_depth)
        return depth

    def price(self, fit: Fit, h: int) -> float:
        n = self.depth_rounds[h]
        return (self.load * self.depth_ms[h] * n + SHAPE_PRIOR * round_cost(fit, h, h)) / (n + SHAPE_PRIOR)

    def time_round(self, h: int, ms: float, fit: Fit | None) -> None:
        """A chain round of depth h took ms: the load follows its time over its price under `fit` (None while the
        line is not fitted yet), then the depth's mean."""
        ms = max(ms, 1e-9)
        if fit is not None:
            predicted = max(self.price(fit, h), 1e-9)
            # One stalled round (a pause, a swap) counts as twice its price at most: the load and a depth's mean
            # share one scale, so a shock kept in one would misprice every depth not drafted since.
            ms = predicted * min(max(ms / predicted, 1 / MAX_RATIO), MAX_RATIO)
            self.load *= (ms / predicted) ** (1 / LOAD_WINDOW)  # in logs: a slow round and a fast one cancel
        self.depth_rounds[h] = n = min(self.depth_rounds[h] + 1, SHAPE_WINDOW)
        y = ms / self.load
        self.depth_ms[h] = y if n == 1 else self.depth_ms[h] * (y / self.depth_ms[h]) ** (1 / n)  # geometric mean

    def learn(self, p_edge: list[float] | None) -> None:
        """One drafted chain's acceptances (`p_edge[0]` is the root's): the chance of reaching each of its depths
        1..h, and each one's depth before. A handful of floats, cheaper in Python than as tensors."""
        decay = 1 - 1 / self.prefix_window
        reached, before = self.reached, self.reached_before
        for h in range(1, MAX_CHAIN + 1):
            reached[h] *= decay
            before[h] *= decay
        reach = 1.0
        for h, a in enumerate(p_edge[1:MAX_CHAIN + 1] if p_edge is not None else [], start=1):
            before[h] += reach
            reach *= a
            reached[h] += reach
