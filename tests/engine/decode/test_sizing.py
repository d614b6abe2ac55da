"""How a session sizes its rounds (decode/sizing.py): the fixed policy, --budget auto's cost model limits, what a
round's record feeds back (observe_auto) and the mixed builder's arms, with the cost models faked where they learn."""

from __future__ import annotations

import math
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch
from conftest import scored_round

from tevviz.engine.cost.arm_choice import MixedBudget
from tevviz.engine.cost.auto_budget import AutoBudget
from tevviz.engine.decode import sizing
from tevviz.engine.draft.builders import BuilderConfig
from tevviz.engine.errors import TevvizError
from tevviz.engine.verify import verifiers

PARENTS, P = [-1, 0, 1, 0], [1.0, 0.6, 0.3, 0.2]  # C_p = 1.1, depth 2
STAGES = {"draft": 2.0, "target": 3.0, "verify": 0.5, "other": 0.5}


def settings(name="best-first", auto=True, budget=8, depth=4) -> sizing.RoundPlan:
    return sizing.RoundPlan(BuilderConfig(name=name, auto=auto, budget=budget, depth=depth), "tev", verifiers.tev)


def drafted(levels=2, reach=(1.0, 0.5, 0.25, 0.125)):
    return SimpleNamespace(reach=torch.tensor(reach).log(), levels=levels, ranks=torch.tensor([0, 0, 0, 1]))


def record(accept=None):
    r = scored_round(3, PARENTS, P, exit_node=2, stage_ms=STAGES)
    return r if accept is None else replace(r, accept=accept)


class FakeModel:
    """A cost model that records what it is fed and returns a marker for its fit."""

    def __init__(self):
        self.calls = []
        self.fit = object()

    def observe(self, *args):
        self.calls.append(args)
        return self.fit

    def plan(self):
        return SimpleNamespace(warmup=False, marker=id(self))


def test_fixed_settings_run_every_round_as_given_and_record_no_sizing():
    plan = settings(auto=False)
    policy = sizing.FixedSizing(plan)
    assert policy.round() is plan and policy.round() is plan
    assert policy.observe(plan, drafted(), record()) is None


def test_an_exact_verifiers_round_feeds_back_its_coverage_and_edge_probabilities():
    model, r = FakeModel(), record()
    got, covered = sizing.observe_auto(model, SimpleNamespace(warmup=True), drafted(), r)
    (args,) = model.calls
    tokens, levels, ms, C_p, predicted, ranks, logq, accept = args
    assert (tokens, levels, ms) == (4, 2, STAGES)
    assert C_p == covered == pytest.approx(1.1)
    # what the plan predicted: the reach below the root, 0.5 + 0.25 + 0.125 (the root's certain 1 left out)
    assert predicted == pytest.approx(0.875)
    assert ranks == [0, 0, 0, 1] and logq == r.draft_logprobs and accept == r.p_edge
    assert got == sizing.RoundSizing(B=3, H=2, warmup=True, drafted=True, fit=model.fit)


def test_a_speculative_round_feeds_back_the_reach_of_its_acceptance():
    """min(1, p / q) can exceed the target's own flow: the model learns that, not C_p."""
    model = FakeModel()
    _, covered = sizing.observe_auto(model, SimpleNamespace(warmup=False), drafted(), record([1.0, 0.5, 0.5, 0.25]))
    assert covered == pytest.approx(0.5 + 0.5 * 0.5 + 0.25)  # 1.0 by hand, against C_p = 1.1
    assert model.calls[0][3] == pytest.approx(1.0) and model.calls[0][7] == [1.0, 0.5, 0.5, 0.25]


def test_a_round_without_a_draft_says_so():
    model = FakeModel()
    got, _ = sizing.observe_auto(model, SimpleNamespace(warmup=False), drafted(levels=0), record())
    assert got.drafted is False and model.calls[0][1] == 0


def test_auto_sizing_limits_its_model_to_the_builders_budget_and_depth():
    carried = AutoBudget(50, 9)  # a model carried over from another session, with other limits
    policy = sizing.AutoSizing(settings(budget=8, depth=4), carried)
    assert policy.model is carried and (carried.max_budget, carried.max_depth) == (8, 4) and not carried.chain
    fresh = sizing.AutoSizing(settings("sampled", budget=8, depth=5), None).model
    assert (fresh.max_budget, fresh.max_depth, fresh.chain) == (5, 5, True)  # a chain keeps H nodes, not B


def test_auto_sizing_plans_each_round_and_keeps_the_rest_of_the_settings():
    plan = settings()
    policy = sizing.AutoSizing(plan, None)
    policy.model = FakeModel()
    rp = policy.round()
    assert rp.plan.marker == id(policy.model)
    assert (rp.builder, rp.verifier, rp.verify, rp.arm) == (plan.builder, "tev", verifiers.tev, None)
    assert policy.observe(rp, drafted(), record()).fit is policy.model.fit


def test_each_policy_refuses_the_other_kind_of_cost_model():
    with pytest.raises(TevvizError, match="MixedBudget sizes a mixed builder"):
        sizing.AutoSizing(settings(), MixedBudget(8, 4))
    with pytest.raises(TevvizError, match="not an AutoBudget"):
        sizing.MixedSizing(settings("mixed"), AutoBudget(8, 4))


def test_the_mixed_builder_limits_both_arms_and_sends_chains_to_speculative_sampling():
    carried = MixedBudget(50, 9)
    policy = sizing.MixedSizing(settings("mixed", budget=8, depth=4), carried)
    tree, chain = carried.models["best-first"], carried.models["sampled"]
    assert (tree.max_budget, tree.max_depth, chain.max_budget, chain.max_depth) == (8, 4, 4, 4)
    arms = policy.arms
    assert (arms["best-first"].builder.name, arms["best-first"].verifier) == ("best-first", "tev")
    assert (arms["sampled"].builder.name, arms["sampled"].verifier, arms["sampled"].verify) == (
        "sampled", "speculative", verifiers.speculative)


@pytest.mark.parametrize("arm", ["best-first", "sampled"])
def test_a_mixed_round_rates_its_arm_by_its_expected_length_and_whole_time(arm, monkeypatch):
    policy = sizing.MixedSizing(settings("mixed", budget=8, depth=4), None)
    fake = FakeModel()
    policy.model.models[arm] = fake
    monkeypatch.setattr(policy.model, "choose", lambda: arm)
    rated = []
    monkeypatch.setattr(policy.model, "observe", lambda *a: rated.append(a))
    monkeypatch.setattr(policy.model, "summary", lambda: {"tree_rate": 0.25, "chain_rate": 0.5})
    rp = policy.round()
    assert rp.arm == arm and rp.plan.marker == id(fake) and rp.builder.name == arm
    got = policy.observe(rp, drafted(), record())
    # 1 + C_p expected tokens over the round's 6 ms, the plan's warm-up flag passed on
    assert rated == [(arm, pytest.approx(2.1), 6.0, False)]
    assert got.chain is (arm == "sampled") and (got.tree_rate, got.chain_rate) == (0.25, 0.5)
    assert (got.B, got.H, got.fit) == (3, 2, fake.fit) and len(fake.calls) == 1


def test_a_real_cost_model_after_one_round_has_a_fit():
    """The fake models stand in for a real one: a real AutoBudget takes the same call."""
    policy = sizing.AutoSizing(settings(), None)
    rp = policy.round()
    got = policy.observe(rp, drafted(), record())
    assert got.B == 3 and got.H == 2 and got.fit.rounds == 1 and not math.isnan(got.fit.target_fixed)
