"""A tree that sizes itself (`--budget auto`): each round's B and H chosen for expected tokens per second.

Expected committed tokens of a tree are `1 + c * sum of Q(v)`, with `Q(v) = exp(s(v))` the draft's
own path probability (as DDTree and OPT-Tree score candidate nodes) and `c` a calibration measured
in the session: the target's actual coverage `C_p` of the verified trees over their summed `Q`.
A round costs `overhead + H * draft_level + target(n)`, each term measured online (docs/auto-budget.md);
a plain target step (one token, no draft) is timed on its own, since on a CPU a pass over two tokens
already costs half a step more than one. When drafted trees have lately been worth less than a plain
step, rounds go without a draft (the tree is the root alone), probing again after 1, 2, 4 ... such rounds.
The verifier still sees one fixed tree, so exactness is untouched.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import torch

WINDOW = 48  # rounds the cost model remembers: recent enough to follow load, enough to fit a line
# The first rounds try these shares of the budget, to give the fit a slope; the 0 is a round without a draft,
# which times a plain step.
WARMUP_FRACTIONS = (1.0, 0.25, 0.5, 0.0)
MAX_WAIT = 16  # most rounds without a draft before drafting is tried again


@dataclass(frozen=True)
class Plan:
    """What the builder needs from the cost model for one round (plain floats; ms)."""

    max_budget: int
    max_depth: int
    target_fixed: float  # target pass: fixed + per_token * tokens
    target_per_token: float
    draft_level: float  # one draft forward (one tree level)
    overhead: float  # verify and the rest of a round
    calibration: float  # realised C_p per unit of summed draft path probability
    forced_budget: int | None = None  # warm-up: this budget, full depth
    skip_draft: bool = False  # no draft this round: the tree is the root alone (one plain target step)

    def round_ms(self, nodes: int, depth: int) -> float:
        return self.overhead + depth * self.draft_level + self.target_fixed + self.target_per_token * (nodes + 1)

    def best(self, scores: torch.Tensor, depth: int) -> tuple[int, float]:
        """(k, expected tokens per ms) of the best top-k subtree by path score, k <= max_budget."""
        if self.forced_budget is not None or scores.numel() == 0:
            return min(self.forced_budget or 0, scores.numel()), 0.0
        q = torch.sort(scores.float(), descending=True).values[: self.max_budget].exp()
        gain = 1 + self.calibration * torch.cumsum(q, 0)
        k = torch.arange(1, q.numel() + 1, device=q.device, dtype=torch.float32)
        cost = self.overhead + depth * self.draft_level + self.target_fixed + self.target_per_token * (k + 1)
        rate = gain / cost
        i = int(torch.argmax(rate))
        return i + 1, float(rate[i])


@dataclass(frozen=True)
class Fit:
    """The cost model as the app shows it (ms)."""

    target_fixed: float
    target_per_token: float
    draft_level: float
    overhead: float
    calibration: float
    rounds: int
    plain: float  # a round without a draft: measured, or from the tree line until one has run

    @classmethod
    def from_sizing(cls, sizing: dict) -> Fit:
        """The fit stored in a round's `sizing` (RoundRecord.sizing, graph.sizing in the JSON)."""
        kw = {k: sizing[k] for k in cls.__dataclass_fields__ if k != "plain"}
        # Sessions saved before plain steps were timed on their own priced them on the line.
        kw["plain"] = sizing.get("plain", kw["overhead"] + kw["target_fixed"] + kw["target_per_token"])
        return cls(**kw)


class AutoBudget:
    """The session's online cost model and calibration; `plan()` before a round, `observe()` after it."""

    def __init__(self, max_budget: int, max_depth: int):
        self.max_budget, self.max_depth = max_budget, max_depth
        self.target = deque(maxlen=WINDOW)  # (tokens, ms) of drafted trees' target passes
        self.plain = deque(maxlen=WINDOW)  # ms of rounds without a draft (target pass over the root, verify, commit)
        self.levels = deque(maxlen=WINDOW)  # (levels, ms)
        self.overheads = deque(maxlen=WINDOW)
        self.coverage = deque(maxlen=WINDOW)  # (C_p, sum of Q)
        self.rounds = 0
        self.skip_left = 0  # rounds still to go without a draft
        self.wait = 1  # rounds without a draft after the next drafted round that loses to a plain step

    def plan(self) -> Plan:
        fit = self.fit()
        forced, skip = None, self.skip_left > 0
        if self.rounds < len(WARMUP_FRACTIONS):
            share = WARMUP_FRACTIONS[self.rounds]
            forced, skip = (max(1, round(self.max_budget * share)), False) if share > 0 else (0, True)
        return Plan(self.max_budget, self.max_depth, fit.target_fixed, fit.target_per_token, fit.draft_level,
                    fit.overhead, fit.calibration, forced, skip_draft=skip)

    def observe(self, tokens: int, levels: int, stage_ms: dict[str, float], C_p: float, q_sum: float) -> Fit:
        """One verified round: its tree size (root included), draft levels (0: not drafted), stage times, C_p, summed Q.

        Returns the cost model after it (what the round's record shows).
        """
        rest = stage_ms.get("verify", 0.0) + stage_ms.get("other", 0.0)
        self.rounds += 1
        if levels == 0:
            self.plain.append(stage_ms["target"] + rest)
            self.skip_left = max(self.skip_left - 1, 0)
            return self.fit()
        self.target.append((tokens, stage_ms["target"]))
        self.overheads.append(rest)
        self.levels.append((levels, stage_ms["draft"]))
        self.coverage.append((C_p, q_sum))
        # Was this tree worth its round? Both rates from the cost model, so that one slow round does not decide.
        fit = self.fit()
        drafted = (1 + C_p) / max(fit.overhead + levels * fit.draft_level + fit.target_fixed
                                  + fit.target_per_token * tokens, 1e-9)
        if drafted >= plain_rate(fit):
            self.skip_left, self.wait = 0, 1
        else:  # back off: each losing probe doubles the rounds without a draft before the next one
            self.skip_left, self.wait = self.wait, min(2 * self.wait, MAX_WAIT)
        return fit

    def fit(self) -> Fit:
        """Least squares of target ms on tree tokens; per-level draft ms; mean overhead; C_p / sum Q; plain step ms."""
        fixed, per = _line(list(self.target))
        level = sum(ms for _, ms in self.levels) / max(sum(n for n, _ in self.levels), 1) if self.levels else 1.0
        overhead = sum(self.overheads) / len(self.overheads) if self.overheads else 0.0
        cov, qs = sum(c for c, _ in self.coverage), sum(q for _, q in self.coverage)
        calibration = min(cov / qs, 1.0) if qs > 0 else 1.0  # a drafter is never trusted beyond its own law
        plain = sum(self.plain) / len(self.plain) if self.plain else overhead + fixed + per
        return Fit(fixed, per, level, overhead, calibration, self.rounds, plain)


def _line(points: list[tuple[int, float]]) -> tuple[float, float]:
    """(intercept, slope) through the points; a slope kept positive and small when the sizes do not vary."""
    if not points:
        return 1.0, 0.01
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx == 0:
        return my, max(my / max(mx, 1) * 0.1, 1e-6)
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx
    slope = max(slope, 1e-6)  # noise must not make bigger trees look free
    return max(my - slope * mx, 0.0), slope


def plain_rate(fit: Fit) -> float:
    """Expected tokens per ms of a round without a draft: one target pass over the root, one token."""
    return 1.0 / max(fit.plain, 1e-9)


def draft_mass(scores: torch.Tensor) -> float:
    """Summed draft path probability of a tree's non-root nodes."""
    return float(torch.exp(scores[1:].float()).sum()) if scores.numel() > 1 else 0.0


def describe(fit: Fit) -> str:
    if not math.isfinite(fit.target_per_token):
        return "no rounds yet"
    return (f"target {fit.target_fixed:.1f} + {fit.target_per_token:.2f}·n ms, draft {fit.draft_level:.1f} ms a level, "
            f"other {fit.overhead:.1f} ms, plain step {fit.plain:.1f} ms, calibration C_p/ΣQ {fit.calibration:.2f} "
            f"({fit.rounds} rounds)")
