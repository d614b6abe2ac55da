"""`--builder mixed`: which arm drafts each round, a best-first tree or a sampled chain.

Each arm keeps its own cost model (auto_budget.AutoBudget), which sizes its own rounds. Which of the two drafts a
round is decided by their measured rates: each arm's expected tokens over its round ms, decayed over the session's
recent rounds. The arm of the higher rate drafts; the other drafts one round after 1, 2, 4 ... 32 rounds while it
keeps losing, so that a change (another prompt, another load) is seen. The choice depends only on earlier rounds,
never on the current round's draws, so every round stays exact.
"""

from __future__ import annotations

from .auto_budget import WARMUP_FRACTIONS, AutoBudget

# --builder mixed: a sampled chain or a best-first tree each round (warm-ups in this order)
ARMS = ("sampled", "best-first")
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

