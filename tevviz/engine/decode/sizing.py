"""How a session sizes each round: fixed settings, the --budget auto cost model, or the mixed builder's arm choice.

One policy behind the session: `round()` before a round says which builder, verifier and plan it runs;
`observe()` after it feeds the measurements back and returns what the round's record shows of its sizing.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..cost.arm_choice import MixedBudget
from ..cost.auto_budget import AutoBudget, Plan
from ..draft.builder_kinds import builder_kind
from ..draft.builders import BuilderConfig, DraftResult
from ..errors import TevvizError
from ..records.records import expected_accepted
from ..records.round_time import RoundSizing
from ..verify.verifiers import Verifier, get_verifier


@dataclass(frozen=True)
class RoundPlan:
    """One round's builder, verifier and cost-model plan (None: fixed settings)."""

    builder: BuilderConfig
    verifier: str
    verify: Verifier
    plan: Plan | None = None
    arm: str | None = None  # the mixed builder's arm this round


class FixedSizing:
    """Every round as the settings say."""

    def __init__(self, builder: BuilderConfig, verifier: str):
        self.fixed = RoundPlan(builder, verifier, get_verifier(verifier))

    def round(self) -> RoundPlan:
        return self.fixed

    def observe(self, rp: RoundPlan, drafted: DraftResult, fields: dict, ms: dict[str, float]) -> RoundSizing | None:
        return None


class AutoSizing:
    """--budget auto: the online cost model plans each round's tree and learns from it."""

    def __init__(self, builder: BuilderConfig, verifier: str, cost_model: AutoBudget | None):
        if isinstance(cost_model, MixedBudget):
            raise TevvizError("a MixedBudget sizes a mixed builder's rounds; this builder takes an AutoBudget")
        self.model = cost_model if cost_model is not None else AutoBudget(builder.keep, builder.depth)
        self.model.max_budget, self.model.max_depth = builder.keep, builder.depth
        self.model.chain = builder.kind == "sampled"
        self.builder, self.verifier, self.verify = builder, verifier, get_verifier(verifier)

    def round(self) -> RoundPlan:
        return RoundPlan(self.builder, self.verifier, self.verify, self.model.plan())

    def observe(self, rp: RoundPlan, drafted: DraftResult, fields: dict, ms: dict[str, float]) -> RoundSizing | None:
        return observe_auto(self.model, rp.plan, drafted, fields, ms)[0]


def observe_auto(model: AutoBudget, plan: Plan, drafted: DraftResult, fields: dict,
                 ms: dict[str, float]) -> tuple[RoundSizing, float]:
    """Feed one round to `model`; the round's sizing record (chosen B and H, the cost model after it) and its
    expected accepted nodes."""
    predicted = float(drafted.reach[1:].exp().sum())
    # The table learns what this verifier accepts a node with: the target edge probability, or min(1, p / q).
    accept = fields.get("accept") or fields["p_edge"]
    covered = fields["C_p"] if "accept" not in fields else expected_accepted(fields["parents"], accept)
    fit = model.observe(len(fields["tokens"]), drafted.levels, ms, covered, predicted, drafted.ranks.tolist(),
                        fields["draft_logprobs"], accept)
    sizing = RoundSizing(B=len(fields["tokens"]) - 1, H=max(fields["depths"]), warmup=plan.warmup,
                         drafted=drafted.levels > 0, fit=fit)
    return sizing, covered


class MixedSizing:
    """The mixed builder: each round a best-first tree (the chosen verifier) or a sampled chain (speculative)."""

    def __init__(self, builder: BuilderConfig, verifier: str, cost_model: MixedBudget | None):
        if cost_model is not None and not isinstance(cost_model, MixedBudget):
            raise TevvizError("a mixed builder carries a MixedBudget from session to session, not an AutoBudget")
        self.model = cost_model if cost_model is not None else MixedBudget(builder.keep, builder.depth)
        self.model.limit(builder.keep, builder.depth)
        # Trees go to the chosen verifier; a sampled chain to speculative sampling, which it is drawn for.
        self.arms = {"best-first": (builder.arm("best-first"), verifier, get_verifier(verifier)),
                     "sampled": (builder.arm("sampled"), "speculative", get_verifier("speculative"))}

    def round(self) -> RoundPlan:
        arm = self.model.choose()
        builder, verifier, verify = self.arms[arm]
        return RoundPlan(builder, verifier, verify, self.model.models[arm].plan(), arm)

    def observe(self, rp: RoundPlan, drafted: DraftResult, fields: dict, ms: dict[str, float]) -> RoundSizing | None:
        sizing, covered = observe_auto(self.model.models[rp.arm], rp.plan, drafted, fields, ms)
        self.model.observe(rp.arm, 1 + covered, sum(ms.values()), rp.plan.warmup)
        return replace(sizing, chain=rp.arm == "sampled", **self.model.summary())


def make_sizing(builder: BuilderConfig, verifier: str, cost_model=None) -> FixedSizing | AutoSizing | MixedSizing:
    """The sizing policy a session's settings call for."""
    if builder_kind(builder.kind).auto_only:
        return MixedSizing(builder, verifier, cost_model)
    if builder.auto:
        return AutoSizing(builder, verifier, cost_model)
    return FixedSizing(builder, verifier)
