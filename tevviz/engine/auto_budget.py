"""A tree that sizes itself (`--budget auto`): each round's B and H chosen for expected tokens per second.

Expected committed tokens of a tree are `1 + sum of R(v)`, with `R(v)` the predicted reach of node `v`: the product,
along its path, of each edge's expected target probability. That is read from an acceptance table learnt in the
session: for each child rank among its siblings (the draft's first, second, later choice) and each bin of the draft's
own probability `q`, the mean target edge probability `p_pa(v)(x_v)` of such nodes in the verified trees (exact for
every node, reached or not). At T = 0 the draft's first choice is the target's far more often than its `q` says,
its siblings less; so the table, not the draft's path probability, decides how deep and how wide a tree pays.
A round costs `overhead + draft_fixed + H * draft_level + target(n)`, each term measured online (docs/auto-budget.md);
a plain target step (one token, no draft) is timed on its own, since on a CPU a pass over two tokens
already costs half a step more than one. When drafted trees have lately been worth less than a plain
step, rounds go without a draft (the tree is the root alone), probing again after 1, 2, 4 ... such rounds.
The verifier still sees one fixed tree, so exactness is untouched.

A sampled chain (the speculative verifier's) is sized differently: its tokens' acceptances are strongly correlated
along the chain (a run of predictable text accepts every token), which a product of per-node means misses by far.
Every drafted chain of length h gives, from its exact acceptances `a_1..a_h`, its chance of reaching each depth;
decayed sums of those over recent rounds give a survival ratio per depth, and their products the expected accepted
tokens of each depth. Each round drafts the depth of the best expected rate (none when a plain step is better), one
deeper or one shallower every EXPLORE-th round so the neighbouring depths stay measured. Each depth's round time is
its own mean over many rounds (on a CPU a target pass over 5 tokens can cost less than over 4, which no line
shows), kept in units of the machine's current load: one scalar that every round updates, so that a depth not
drafted lately (a plain step, say) is not priced at the speed of an hour ago. A chain learns no acceptance table
(its depth is forced, nothing is ranked), and every sum is kept running: the model's bookkeeping is part of each
round it sizes, and on a CPU it was 2-3% of a round.

`--builder mixed` keeps one such model for best-first trees and one for sampled chains, and each model sizes its
own rounds. Which of the two drafts a round is decided by their measured rates: each arm's expected tokens over its
round ms, decayed over the session's recent rounds. The arm of the higher rate drafts; the other drafts one round after
1, 2, 4 ... 32 rounds while it keeps losing, so that a change (another prompt, another load) is seen. The choice
depends only on earlier rounds, never on the current round's draws, so every round stays exact.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, replace

import torch

WINDOW = 48  # rounds the cost model remembers: recent enough to follow load, enough to fit a line
# The first rounds try these shares of the budget, to give the fit a slope; the 0 is a round without a draft,
# which times a plain step.
WARMUP_FRACTIONS = (1.0, 0.25, 0.5, 0.0)
MAX_WAIT = 16  # most rounds without a draft before drafting is tried again
# The acceptance table's rows: a child's rank among its siblings (first, second, third or later choice of the draft),
# and its columns: bins of the draft's own q. Until a bin has seen nodes it answers q itself (PRIOR nodes' worth).
RANKS = 3
Q_EDGES = (0.02, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95)
PRIOR = 2.0
_MID_Q = torch.tensor((0.0, *Q_EDGES)) + torch.diff(torch.tensor((0.0, *Q_EDGES, 1.0))) / 2  # each bin's middle q
MIN_ACCEPT = 1e-6  # keeps the table's log finite
_PRIOR_TABLE = _MID_Q.clamp(MIN_ACCEPT, 1.0).log().expand(RANKS, -1).contiguous()  # the table before any node
MAX_CHAIN = 64  # the deepest sampled chain the survival sums keep (builders.MAX_DEPTH)
EXPLORE = 4  # sampled chains: every EXPLORE-th round drafts one deeper or (every other time) one shallower
SHAPE_WINDOW = 64  # rounds of a chain depth its mean time remembers (in load units: the machine's shape)
SHAPE_PRIOR = 1.0  # rounds' worth of the cost model's line that a depth's mean starts from
LOAD_WINDOW = 16  # rounds the load (measured over predicted round time) follows
MAX_RATIO = 2.0  # the most one round's measured over predicted time counts for, either way


@dataclass(frozen=True)
class Plan:
    """What the builder needs from the cost model for one round (ms; the acceptance table as log-probabilities)."""

    max_budget: int
    max_depth: int
    target_fixed: float  # target pass: fixed + per_token * tokens
    target_per_token: float
    draft_level: float  # one more draft forward (one more tree level)
    overhead: float  # verify and the rest of a round
    log_accept: torch.Tensor  # (RANKS, len(Q_EDGES) + 1): the acceptance table, as log-probabilities
    forced_budget: int | None = None  # warm-up: this budget, full depth
    skip_draft: bool = False  # no draft this round: the tree is the root alone (one plain target step)
    q_edges: torch.Tensor | None = None  # Q_EDGES on the table's device
    warmup: bool = False  # one of the first rounds, sized to fit the cost model (a chain's depth is forced always)
    draft_fixed: float = 0.0  # a drafted round's draft time beyond its levels (the catch-up forward, the set-up)

    def round_ms(self, nodes: int, depth: int) -> float:
        return round_cost(self, nodes, depth)

    def edge_values(self, logq: torch.Tensor, ranks: torch.Tensor) -> torch.Tensor:
        """log of each new edge's expected target probability, from its draft log q and its rank among siblings."""
        return self.log_accept[ranks.clamp(max=RANKS - 1), q_bins(logq, self.q_edges)]

    def to(self, device) -> Plan:
        """This plan with its table on `device` (one copy a round, not one a level)."""
        return replace(self, log_accept=self.log_accept.to(device), q_edges=torch.tensor(Q_EDGES, device=device))

    def best(self, values: torch.Tensor, depth: int) -> tuple[int, float]:
        """(k, expected tokens per ms) of the best tree of the top-k nodes by log reach `values`, k <= max_budget."""
        if self.forced_budget is not None or values.numel() == 0:
            return min(self.forced_budget or 0, values.numel()), 0.0
        reach = torch.sort(values.float(), descending=True).values[: self.max_budget].exp()
        gain = 1 + torch.cumsum(reach, 0)
        k = torch.arange(1, reach.numel() + 1, device=reach.device, dtype=torch.float32)
        cost = round_cost(self, k, depth)
        rate = gain / cost
        i = int(torch.argmax(rate))
        return i + 1, float(rate[i])


def round_cost(c, nodes, levels: int):
    """ms of a round of `nodes` non-root nodes and `levels` draft forwards under a cost model `c` (Plan or Fit)."""
    draft = c.draft_fixed + levels * c.draft_level if levels else 0.0
    return c.overhead + draft + c.target_fixed + c.target_per_token * (nodes + 1)


def q_bins(logq: torch.Tensor, edges: torch.Tensor | None = None) -> torch.Tensor:
    """Column of the acceptance table for each draft log-probability (`edges`: Q_EDGES on its device)."""
    edges = torch.tensor(Q_EDGES, device=logq.device) if edges is None else edges
    return torch.bucketize(logq.float().exp(), edges)


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
        """The fit stored in a round's `sizing` (RoundRecord.sizing, graph.sizing in the JSON)."""
        kw = {k: sizing[k] for k in cls.__dataclass_fields__ if k in sizing}
        # Sessions saved before plain steps were timed on their own priced them on the line.
        kw.setdefault("plain", kw["overhead"] + kw["target_fixed"] + kw["target_per_token"])
        return cls(**kw)


class AutoBudget:
    """The session's online cost model and acceptance table; `plan()` before a round, `observe()` after it."""

    def __init__(self, max_budget: int, max_depth: int, chain: bool = False):
        self.max_budget, self.max_depth = max_budget, max_depth
        self.chain = chain  # sampled chains: each round's depth from the measured survival ratios, not the table
        # Decayed sums over drafted chains: for each depth h, over the rounds that drafted at least h, the chance
        # of reaching h - 1 (1 for h = 1) and of reaching h, exact from each round's acceptances.
        self.reached_before, self.reached = [0.0] * (MAX_CHAIN + 1), [0.0] * (MAX_CHAIN + 1)
        self.prefix_window = WINDOW  # drafted chains the survival sums remember
        # For each chain depth (0: no draft): its rounds (at most SHAPE_WINDOW) and the running geometric mean of
        # their ms over the load then. A depth not drafted keeps its mean: the load carries the machine's speed since.
        self.depth_rounds, self.depth_ms = [0] * (MAX_CHAIN + 1), [0.0] * (MAX_CHAIN + 1)
        self.load = 1.0  # the machine's speed now against the depths' means: 2 when every round takes twice as long
        self._fit: Fit | None = None  # fit() of the current measurements (plan() and observe() share it)
        self.target = Points()  # (tokens, ms) of drafted trees' target passes
        self.plain = Points()  # ms of rounds without a draft (target pass over the root, verify, commit)
        self.levels = Points()  # (levels, ms)
        self.overheads = Points()
        self.coverage = Points()  # (predicted reach, C_p)
        shape = (RANKS, len(Q_EDGES) + 1)
        # Decayed sums over drafted rounds' nodes (about WINDOW rounds' worth): count, target edge probability, q.
        self.nodes, self.hits, self.qs = torch.zeros(shape), torch.zeros(shape), torch.zeros(shape)
        self.rounds = 0
        self.skip_left = 0  # rounds still to go without a draft
        self.wait = 1  # rounds without a draft after the next drafted round that loses to a plain step

    def plan(self) -> Plan:
        fit = self.fit()
        forced, skip, warmup = None, self.skip_left > 0, self.rounds < len(WARMUP_FRACTIONS)
        if warmup:
            share = WARMUP_FRACTIONS[self.rounds]
            forced, skip = (max(1, round(self.max_budget * share)), False) if share > 0 else (0, True)
        elif self.chain:
            depth = self.chain_depth(fit)
            if self.rounds % EXPLORE == 0:
                # Up keeps the next depth's survival ratio measured; down keeps the shallower depth's time measured
                # (its ratio is measured by every chain), which a slow round would otherwise fix for good.
                step = 1 if (self.rounds // EXPLORE) % 2 else -1
                depth = min(max(depth + step, 0), self.max_depth)
            forced, skip = (depth, False) if depth > 0 else (0, True)
        table = _PRIOR_TABLE if self.chain else self.log_accept()  # a chain's depth is forced: no table to rank by
        return Plan(self.max_budget, self.max_depth, fit.target_fixed, fit.target_per_token, fit.draft_level,
                    fit.overhead, table, forced_budget=forced, skip_draft=skip, warmup=warmup,
                    draft_fixed=fit.draft_fixed)

    def chain_tokens(self) -> list[float]:
        """Expected accepted draft tokens of a sampled chain of each depth 0..max_depth, from the chains measured.

        The chance of reaching depth h is a product of survival ratios, P(reach h) / P(reach h - 1), each from the
        chains that drafted h, drawn toward the ratio of depth h - 1 (one chain's worth; 1/2 for depth 1). So the
        expected tokens never fall with depth, and a depth drafted seldom or long ago is priced like its shallower
        neighbour rather than by the few chains that last drafted it.
        """
        top = min(self.max_depth, MAX_CHAIN)
        reached, before = self.reached, self.reached_before
        out, reach, ratio = [0.0], 1.0, 0.5
        for h in range(1, top + 1):
            ratio = (reached[h] + ratio) / (before[h] + 1.0)
            reach *= ratio
            out.append(out[-1] + reach)
        return out

    def chain_depth(self, fit: Fit) -> int:
        """The sampled chain depth of the best expected tokens per ms (0: a plain step is better)."""
        rates = [(1 + e) / max(ms, 1e-9) for e, ms in zip(self.chain_tokens(), self.chain_ms(fit), strict=True)]
        return max(range(len(rates)), key=rates.__getitem__)

    def chain_ms(self, fit: Fit) -> list[float]:
        """Predicted ms of a chain round of each depth 0..max_depth (0: no draft): the depth's mean at the current
        load, drawn toward the cost model's line while the depth has few rounds.

        Depth 0 is priced this way too, not by the plain steps' recent times: those are measured only while plain
        steps win, and go stale when the load moves.
        """
        return [self._price(fit, h) for h in range(min(self.max_depth, MAX_CHAIN) + 1)]

    def _price(self, fit: Fit, h: int) -> float:
        n = self.depth_rounds[h]
        return (self.load * self.depth_ms[h] * n + SHAPE_PRIOR * round_cost(fit, h, h)) / (n + SHAPE_PRIOR)

    def _time_depth(self, h: int, ms: float) -> None:
        """A chain round of depth h took ms: the load follows its time over its price, then the depth's mean."""
        ms = max(ms, 1e-9)
        if self.rounds >= len(WARMUP_FRACTIONS):  # before that the line, and so the price, is not fitted yet
            predicted = max(self._price(self.fit(), h), 1e-9)
            # One stalled round (a pause, a swap) counts as twice its price at most: the load and a depth's mean
            # share one scale, so a shock kept in one would misprice every depth not drafted since.
            ms = predicted * min(max(ms / predicted, 1 / MAX_RATIO), MAX_RATIO)
            self.load *= (ms / predicted) ** (1 / LOAD_WINDOW)  # in logs: a slow round and a fast one cancel
        self.depth_rounds[h] = n = min(self.depth_rounds[h] + 1, SHAPE_WINDOW)
        y = ms / self.load
        self.depth_ms[h] = y if n == 1 else self.depth_ms[h] * (y / self.depth_ms[h]) ** (1 / n)  # geometric mean

    def log_accept(self) -> torch.Tensor:
        """The acceptance table: each bin's mean target edge probability, drawn toward its mean q while it has few nodes."""
        prior_q = torch.where(self.nodes > 0, self.qs / self.nodes.clamp(min=1e-9), _MID_Q)
        accept = (self.hits + PRIOR * prior_q) / (self.nodes + PRIOR)
        return accept.clamp(MIN_ACCEPT, 1.0).log()

    def observe(self, tokens: int, levels: int, stage_ms: dict[str, float], C_p: float, predicted: float,
                ranks: list[int] | None = None, logq: list[float] | None = None,
                p_edge: list[float] | None = None) -> Fit:
        """One verified round: its tree size (root included), draft levels (0: not drafted), stage times, C_p, and
        the predicted reach; with its nodes' ranks, draft log q and target edge probabilities, the table learns.

        Returns the cost model after it (what the round's record shows).
        """
        rest = stage_ms.get("verify", 0.0) + stage_ms.get("other", 0.0)
        if self.chain:
            self._time_depth(min(tokens - 1, MAX_CHAIN) if levels else 0, sum(stage_ms.values()))
        self._fit = None
        self.rounds += 1
        if levels == 0:
            self.plain.append(0, stage_ms["target"] + rest)
            self.skip_left = max(self.skip_left - 1, 0)
            return self.fit()
        self.target.append(tokens, stage_ms["target"])
        self.overheads.append(0, rest)
        self.levels.append(levels, stage_ms["draft"])
        self.coverage.append(predicted, C_p)
        if self.chain:
            # The chance of reaching each of the chain's depths 1..h, and each one's depth before: a handful of
            # floats, cheaper in Python than as tensors. The acceptance table is for trees; a chain is not ranked.
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
            return self.fit()  # each round picks its depth against a plain step itself: no back-off
        if ranks is not None and len(ranks) > 1:
            self._learn(ranks[1:], logq[1:], p_edge[1:])
        # Was this tree worth its round? Both rates from the cost model, so that one slow round does not decide.
        fit = self.fit()
        drafted = (1 + C_p) / max(round_cost(fit, tokens - 1, levels), 1e-9)
        if drafted >= plain_rate(fit):
            self.skip_left, self.wait = 0, 1
        else:  # back off: each losing probe doubles the rounds without a draft before the next one
            self.skip_left, self.wait = self.wait, min(2 * self.wait, MAX_WAIT)
        return fit

    def _learn(self, ranks: list[int], logq: list[float], p_edge: list[float]) -> None:
        """Add one tree's non-root nodes to the decayed sums of the acceptance table."""
        lq = torch.tensor(logq)
        cell = torch.tensor(ranks).clamp(max=RANKS - 1) * (len(Q_EDGES) + 1) + q_bins(lq)
        decay = 1 - 1 / WINDOW
        for sums, x in ((self.nodes, torch.ones_like(lq)), (self.hits, torch.tensor(p_edge)), (self.qs, lq.exp())):
            sums.mul_(decay).view(-1).index_add_(0, cell, x.float())

    def fit(self) -> Fit:
        """Least squares of target ms on tree tokens and of draft ms on levels; mean overhead; C_p / predicted;
        plain ms."""
        if self._fit is None:
            self._fit = self._fitted()
        return self._fit

    def _fitted(self) -> Fit:
        fixed, per = self.target.line()
        # A line, not a mean per level: the first forward of a round also catches the draft up on the tokens
        # committed since, so the mean per level overprices each extra level and draws chains too short.
        draft_fixed, level = self.levels.line(share=1.0) if self.levels.n else (0.0, 1.0)
        overhead = self.overheads.mean_y() if self.overheads.n else 0.0
        pred, cov = self.coverage.sx, self.coverage.sy
        calibration = cov / pred if pred > 0 else 1.0
        plain = self.plain.mean_y() if self.plain.n else overhead + fixed + per
        n = float(self.nodes[0].sum())
        first = (float(self.hits[0].sum()) / n, float(self.qs[0].sum()) / n) if n > 0 else (0.0, 0.0)
        return Fit(fixed, per, level, overhead, calibration, self.rounds, plain, *first, draft_fixed=draft_fixed)


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
    return (f"target {fit.target_fixed:.1f} + {fit.target_per_token:.2f}·n ms, "
            f"draft {fit.draft_fixed:.1f} + {fit.draft_level:.1f} ms a level, "
            f"other {fit.overhead:.1f} ms, plain step {fit.plain:.1f} ms; "
            + (f"the draft's first choice accepted {fit.first_accept:.0%} (its q {fit.first_q:.0%}), " if fit.first_q
               else "") + f"realised / predicted C_p {fit.calibration:.2f} ({fit.rounds} rounds)")


ARMS = ("sampled", "best-first")  # --builder mixed: a sampled chain or a best-first tree each round (warm-ups in this order)
ARM_WINDOW = 32  # session rounds an arm's measured rate remembers
ARM_MIN = 6  # sized rounds each arm runs (after its warm-up) before the rates decide
MAX_ARM_WAIT = 32  # most rounds of the leading arm before the other drafts again


class MixedBudget:
    """`--builder mixed`: a cost model per arm (best-first trees, sampled chains), and which arm drafts each round."""

    def __init__(self, max_budget: int, max_depth: int):
        self.models = {"best-first": AutoBudget(max_budget, max_depth), "sampled": AutoBudget(max_depth, max_depth,
                                                                                              chain=True)}
        self.tokens = dict.fromkeys(ARMS, 0.0)  # decayed sums over each arm's sized rounds: expected tokens, ms
        self.ms = dict.fromkeys(ARMS, 0.0)
        self.sized = dict.fromkeys(ARMS, 0)  # sized (not warm-up) rounds each arm has run
        self.wait, self.since = 1, 0  # rounds the leader runs before the other tries again; and since it last did
        self.exploring: str | None = None

    def limit(self, max_budget: int, max_depth: int) -> None:
        """This session's limits (a model carried over from another session keeps what it measured)."""
        tree, chain = self.models["best-first"], self.models["sampled"]  # each arm's kind is fixed at construction
        tree.max_budget, tree.max_depth = max_budget, max_depth
        chain.max_budget = chain.max_depth = max_depth

    def rate(self, arm: str) -> float:
        """The arm's measured expected tokens per ms (0 before it has run a sized round)."""
        return self.tokens[arm] / self.ms[arm] if self.ms[arm] > 0 else 0.0

    def leader(self) -> str:
        return max(ARMS, key=self.rate)

    def choose(self) -> str:
        """The arm that drafts the next round: warm-ups first, then each arm's first sized rounds, then the leader,
        and the other arm once after `wait` rounds of the leader."""
        behind = [a for a in ARMS if self.models[a].rounds < len(WARMUP_FRACTIONS)] or \
                 [a for a in ARMS if self.sized[a] < ARM_MIN]
        self.exploring = None
        if behind:
            return min(behind, key=lambda a: (self.models[a].rounds, self.sized[a]))
        lead = self.leader()
        if self.since >= self.wait:
            self.exploring = next(a for a in ARMS if a != lead)
            return self.exploring
        return lead

    def observe(self, arm: str, expected_tokens: float, ms: float, warmup: bool) -> None:
        """One verified round of `arm`: its expected block length under its verifier and its whole time."""
        if warmup:
            return  # forced sizes: not what the arm does once sized
        before = self.leader()
        # Both arms' sums decay with the session's rounds, not with their own: decay keeps an arm's rate as it was,
        # and the more rounds since the arm last drafted, the more its next round says (a try after 32 rounds of
        # the other arm counts for about two thirds of its rate).
        for a in ARMS:
            self.tokens[a] *= 1 - 1 / ARM_WINDOW
            self.ms[a] *= 1 - 1 / ARM_WINDOW
        self.tokens[arm] += expected_tokens
        self.ms[arm] += max(ms, 1e-9)
        self.sized[arm] += 1
        if self.exploring is None:
            self.since += 1
        elif self.leader() == before:  # the other arm tried and still lost: try it less often
            self.since, self.wait = 0, min(2 * self.wait, MAX_ARM_WAIT)
        else:
            self.since, self.wait = 0, 1

    def summary(self) -> dict:
        """What a round's sizing shows of the choice: each arm's measured rate."""
        return {"tree_rate": self.rate("best-first"), "chain_rate": self.rate("sampled")}

