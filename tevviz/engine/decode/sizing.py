"""How a session sizes each round: fixed settings, the --budget auto cost model, or the mixed builder's arm choice.
(A sampled chain stopped where the draft is unsure sizes itself as it is drawn: BuilderConfig.stop_below.)

One policy behind the session: `round()` before a round says which builder, verifier and plan it runs;
`observe()` after it feeds the round's record back and returns what the round's record shows of its sizing.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..cost.arm_choice import MixedBudget
from ..cost.auto_budget import AutoBudget, Plan
from ..draft.builders import BuilderConfig, DraftResult
from ..errors import TevvizError
from ..records.records import RoundRecord, expected_accepted
from ..records.round_time import RoundSizing
from ..verify.verifiers import Verifier, speculative


@dataclass(frozen=True)
class RoundPlan:
    """One round's builder, verifier (its name and the verifier it names) and cost-model plan (None: fixed settings)."""

    builder: BuilderConfig
    verifier: str
    verify: Verifier
    plan: Plan | None = None
    arm: str | None = None  # the mixed builder's arm this round


class FixedSizing:
    """Every round as the settings say."""

    def __init__(self, settings: RoundPlan):
        self.fixed = settings

    def round(self) -> RoundPlan:
        return self.fixed

    def observe(self, rp: RoundPlan, drafted: DraftResult, record: RoundRecord) -> RoundSizing | None:
        return None


class AutoSizing:
    """--budget auto: the online cost model plans each round's tree and learns from it."""

    def __init__(self, settings: RoundPlan, cost_model: AutoBudget | None):
        if isinstance(cost_model, MixedBudget):
            raise TevvizError("a MixedBudget sizes a mixed builder's rounds; this builder takes an AutoBudget")
        builder = settings.builder
        self.model = cost_model if cost_model is not None else AutoBudget(builder.keep, builder.depth)
        self.model.max_budget, self.model.max_depth = builder.keep, builder.depth
        self.model.chain = builder.spec.chain
        self.settings = settings

    def round(self) -> RoundPlan:
        return replace(self.settings, plan=self.model.plan())

    def observe(self, rp: RoundPlan, drafted: DraftResult, record: RoundRecord) -> RoundSizing | None:
        return observe_auto(self.model, rp.plan, drafted, record)[0]


def observe_auto(model: AutoBudget, plan: Plan, drafted: DraftResult, record: RoundRecord) -> tuple[RoundSizing, float]:
    """Feed one round's record to `model`; the round's sizing record (chosen B and H, the cost model after it) and
    its expected accepted nodes."""
    predicted = float(drafted.reach[1:].exp().sum())
    # The table learns what this verifier accepts a node with: the target edge probability, or min(1, p / q).
    accept = record.accept or record.p_edge
    covered = record.C_p if record.accept is None else expected_accepted(record.parents, accept)
    fit = model.observe(record.size, drafted.levels, record.stage_ms, covered, predicted, drafted.ranks.tolist(),
                        record.draft_logprobs, accept)
    sizing = RoundSizing(B=record.size - 1, H=max(record.depths), warmup=plan.warmup, drafted=drafted.levels > 0,
                         fit=fit)
    return sizing, covered


class MixedSizing:
    """The mixed builder: each round a best-first tree (the chosen verifier) or a sampled chain (speculative)."""

    def __init__(self, settings: RoundPlan, cost_model: MixedBudget | None):
        if cost_model is not None and not isinstance(cost_model, MixedBudget):
            raise TevvizError("a mixed builder carries a MixedBudget from session to session, not an AutoBudget")
        builder = settings.builder
        self.model = cost_model if cost_model is not None else MixedBudget(builder.keep, builder.depth)
        self.model.limit(builder.keep, builder.depth)
        # Trees go to the chosen verifier; a sampled chain to speculative sampling, which it is drawn for.
        self.arms = {"best-first": replace(settings, builder=builder.arm("best-first")),
                     "sampled": RoundPlan(builder.arm("sampled"), "speculative", speculative)}

    def round(self) -> RoundPlan:
        arm = self.model.choose()
        return replace(self.arms[arm], plan=self.model.models[arm].plan(), arm=arm)

    def observe(self, rp: RoundPlan, drafted: DraftResult, record: RoundRecord) -> RoundSizing | None:
        sizing, covered = observe_auto(self.model.models[rp.arm], rp.plan, drafted, record)
        self.model.observe(rp.arm, 1 + covered, sum(record.stage_ms.values()), rp.plan.warmup)
        return replace(sizing, chain=rp.arm == "sampled", **self.model.summary())


def make_sizing(settings: RoundPlan, cost_model=None) -> FixedSizing | AutoSizing | MixedSizing:
    """The sizing policy a session's settings (its builder and verifier, resolved) call for."""
    if settings.builder.spec.auto_only:
        return MixedSizing(settings, cost_model)
    if settings.builder.auto:
        return AutoSizing(settings, cost_model)
    return FixedSizing(settings)
