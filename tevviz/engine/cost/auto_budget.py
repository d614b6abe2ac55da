"""A tree that sizes itself (`--budget auto`): each round's B and H chosen for expected tokens per second.

Expected committed tokens of a tree are `1 + sum of R(v)`, with `R(v)` each node's predicted reach from the
acceptance table learnt in the session (tree_cost.py).
A round costs `overhead + draft_fixed + H * draft_level + target(n)`, each term measured online (docs/auto-budget.md);
a plain target step (one token, no draft) is timed on its own, since on a CPU a pass over two tokens
already costs half a step more than one. When drafted trees have lately been worth less than a plain
step, rounds go without a draft (the tree is the root alone), probing again after 1, 2, 4 ... 64 such rounds.
The verifier still sees one fixed tree, so exactness is untouched.
A sampled chain (the speculative verifier's) is sized by its own model (chain_cost.py); the mixed builder's choice
between a tree and a chain each round is arm_choice.py's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from ..records.round_time import Fit, Points, plain_rate, round_cost
from .chain_cost import MAX_CHAIN, ChainCost
from .tree_cost import PRIOR_TABLE, Q_EDGES, RANKS, AcceptanceTable, q_bins

# The first rounds try these shares of the budget, to give the fit a slope; the 0 is a round without a draft,
# which times a plain step.
WARMUP_FRACTIONS = (1.0, 0.25, 0.5, 0.0)
# A tree's warm-up takes its shares of the limit up to WARMUP_CAP nodes: at T = 1 a warm-up tree of the CLI's limit
# (64) cost the stdlib pair three plain steps for 1.5 tokens, and the small trees' line prices a large tree high, not
# low, where a pass's time is concave in its tokens (a CPU); where it is flat (a GPU), the line is flat too.
WARMUP_CAP = 16
MAX_WAIT = 64  # most rounds without a draft before drafting is tried again


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

    def best(self, values: torch.Tensor, depth: int, in_order: bool = False) -> tuple[int, float]:
        """(k, expected tokens per ms) of the best tree of the top-k nodes by log reach `values`, k <= max_budget.

        `in_order`: the tree kept is the first k nodes of `values` as given (DDTree's pop order), so those are
        priced, not the k of largest reach (price what is kept)."""
        if self.forced_budget is not None or values.numel() == 0:
            return min(self.forced_budget or 0, values.numel()), 0.0
        ordered = values.float() if in_order else torch.sort(values.float(), descending=True).values
        reach = ordered[: self.max_budget].exp()
        gain = 1 + torch.cumsum(reach, 0)
        k = torch.arange(1, reach.numel() + 1, device=reach.device, dtype=torch.float32)
        cost = round_cost(self, k, depth)
        rate = gain / cost
        i = int(torch.argmax(rate))
        return i + 1, float(rate[i])



class AutoBudget:
    """The session's online cost model: `plan()` before a round, `observe()` after it. Round times are fitted lines
    (round_time.py); a best-first tree is sized by the acceptance table (tree_cost.py), a sampled chain (`chain`) by
    its survival ratios and per-depth times (chain_cost.py)."""

    def __init__(self, max_budget: int, max_depth: int, chain: bool = False):
        self.max_budget, self.max_depth = max_budget, max_depth
        self.chain = chain  # the session's builder drafts sampled chains (a carried-over model keeps both kinds' sums)
        self.table = AcceptanceTable()
        self.chains = ChainCost()
        self._fit: Fit | None = None  # fit() of the current measurements (plan() and observe() share it)
        self.target = Points()  # (tokens, ms) of drafted trees' target passes
        self.plain = Points()  # ms of rounds without a draft (target pass over the root, verify, commit)
        self.levels = Points()  # (levels, ms)
        self.overheads = Points()
        self.coverage = Points()  # (predicted reach, C_p)
        self.rounds = 0
        self.skip_left = 0  # rounds still to go without a draft
        self.wait = 1  # rounds without a draft after the next drafted round that loses to a plain step

    def warming_up(self) -> bool:
        """Whether the next round is one of the warm-up's (forced sizes)."""
        return self.rounds < len(WARMUP_FRACTIONS)

    def plan(self) -> Plan:
        fit = self.fit()
        forced, skip, warmup = None, self.skip_left > 0, self.warming_up()
        if warmup:
            share = WARMUP_FRACTIONS[self.rounds]
            size = self.max_budget if self.chain else min(self.max_budget, WARMUP_CAP)  # a chain's depth: no cap
            forced, skip = (max(1, round(size * share)), False) if share > 0 else (0, True)
        elif self.chain:
            depth = self.chains.depth(fit, self.max_depth, self.rounds)
            forced, skip = (depth, False) if depth > 0 else (0, True)
        table = PRIOR_TABLE if self.chain else self.table.log_accept()  # a chain's depth is forced: nothing to rank
        return Plan(self.max_budget, self.max_depth, fit.target_fixed, fit.target_per_token, fit.draft_level,
                    fit.overhead, table, forced_budget=forced, skip_draft=skip, warmup=warmup,
                    draft_fixed=fit.draft_fixed)

    def observe(self, tokens: int, levels: int, stage_ms: dict[str, float], C_p: float, predicted: float,
                ranks: list[int] | None = None, logq: list[float] | None = None,
                p_edge: list[float] | None = None) -> Fit:
        """One verified round: its tree size (root included), draft levels (0: not drafted), stage times, C_p, and
        the predicted reach; with its nodes' ranks, draft log q and target edge probabilities, the table learns.

        Returns the cost model after it (what the round's record shows).
        """
        rest = stage_ms.get("verify", 0.0) + stage_ms.get("other", 0.0)
        if self.chain:
            fitted = None if self.warming_up() else self.fit()  # before that: no line yet
            self.chains.time_round(min(tokens - 1, MAX_CHAIN) if levels else 0, sum(stage_ms.values()), fitted)
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
            if tokens > 1:  # a chain cut to no token (the last token of a budget) measured no acceptance
                self.chains.learn(p_edge)
            return self.fit()  # each round picks its depth against a plain step itself: no back-off
        if ranks is not None and len(ranks) > 1:
            self.table.learn(ranks[1:], logq[1:], p_edge[1:])
        fit = self.fit()
        if self.rounds <= len(WARMUP_FRACTIONS):
            return fit  # a warm-up tree's size was forced: it says nothing of the best size's worth
        self.back_off(fit, tokens, levels, predicted)
        return fit

    def back_off(self, fit: Fit, tokens: int, levels: int, predicted: float) -> None:
        """Was a tree like this round's worth its round? Its expected worth, not what this round's draws realised
        (at T = 0 one missed first token gives C_p 0 among trees that pay; at T = 1 one lucky round kept a weak
        drafter drafting), and both rates from the cost model, so that one slow round does not decide. When it
        loses, the next rounds go without a draft: twice as many as after the last losing probe, up to MAX_WAIT."""
        worth = 1 + predicted * fit.calibration  # the table's reach, scaled by what such trees realised lately
        cost = max(round_cost(fit, tokens - 1, levels), 1e-9)
        if worth / cost >= plain_rate(fit):
            self.skip_left, self.wait = 0, 1
            return
        self.skip_left, self.wait = self.wait, min(2 * self.wait, MAX_WAIT)

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
        return Fit(fixed, per, level, overhead, calibration, self.rounds, plain, *self.table.first_choice(),
                   draft_fixed=draft_fixed)
