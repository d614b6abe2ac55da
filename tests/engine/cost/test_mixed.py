"""--builder mixed: each round a best-first tree (the chosen verifier) or a sampled chain (speculative sampling),
whichever the session measures faster. The arm rule, and exactness with both arms in one session."""

from __future__ import annotations

import itertools
import json

import pytest
import torch
from conftest import assert_caches_in_line, random_prompts
from test_exactness import FAMILIES, assert_greedy, greedy_cfg, pair_of

from tevviz.engine import BuilderConfig, DecodeConfig, DecodeSession, SamplingConfig, TevvizError
from tevviz.engine.cost.arm_choice import ARM_MIN, ARMS, MAX_ARM_WAIT, MixedBudget
from tevviz.engine.cost.auto_budget import WARMUP_FRACTIONS, AutoBudget
from tevviz.engine.records.io import export_session, loads

pytestmark = pytest.mark.usefixtures("one_thread")

MIXED = BuilderConfig(name="mixed", budget=12, depth=4, children=3, width=4, auto=True)


def drive(model: MixedBudget, rates: dict[str, float], rounds: int) -> list[str]:
    """The arms `model` chooses over `rounds` rounds where each arm commits rates[arm] expected tokens per 10 ms."""
    chosen = []
    for _ in range(rounds):
        arm = model.choose()
        inner = model.models[arm]
        warmup = inner.rounds < len(WARMUP_FRACTIONS)
        inner.rounds += 1  # what the arm's own observe() counts
        model.observe(arm, rates[arm], 10.0, warmup)
        chosen.append(arm)
    return chosen


def test_each_arm_warms_up_and_is_measured_before_the_rates_decide():
    model = MixedBudget(16, 6)
    first = drive(model, {"best-first": 1.0, "sampled": 3.0}, 2 * (len(WARMUP_FRACTIONS) + ARM_MIN))
    # Warm-ups alternate, then each arm's first sized rounds: the losing arm is not dropped before it is measured.
    assert first[: 2 * len(WARMUP_FRACTIONS)] == list(ARMS) * len(WARMUP_FRACTIONS)
    assert first.count("best-first") == first.count("sampled") == len(WARMUP_FRACTIONS) + ARM_MIN
    assert model.sized == dict.fromkeys(ARMS, ARM_MIN)  # warm-up rounds (forced sizes) are not counted
    assert model.rate("sampled") == pytest.approx(0.3) and model.rate("best-first") == pytest.approx(0.1)


def test_the_faster_arm_drafts_and_the_other_is_tried_ever_less_often():
    model = MixedBudget(16, 6)
    rates = {"best-first": 1.0, "sampled": 3.0}
    drive(model, rates, 2 * (len(WARMUP_FRACTIONS) + ARM_MIN))
    later = drive(model, rates, 400)
    tries = [i for i, a in enumerate(later) if a == "best-first"]
    gaps = [b - a for a, b in itertools.pairwise(tries)]
    assert gaps == sorted(gaps) and gaps[-1] == MAX_ARM_WAIT + 1, gaps  # 1, 2, 4 ... rounds between tries, capped
    assert len(tries) <= 400 / MAX_ARM_WAIT + 6


def test_the_choice_follows_when_the_other_arm_becomes_faster():
    model = MixedBudget(16, 6)
    drive(model, {"best-first": 1.0, "sampled": 3.0}, 300)
    later = drive(model, {"best-first": 6.0, "sampled": 3.0}, 150)
    switched = later.index("best-first")
    assert switched <= MAX_ARM_WAIT and later[-50:].count("best-first") >= 48, later


def test_mixed_needs_an_automatic_budget_and_its_own_cost_model():
    with pytest.raises(TevvizError, match="--budget auto"):
        BuilderConfig(name="mixed")
    pair = pair_of("llama")
    cfg = DecodeConfig(builder=MIXED, max_new_tokens=4, stop_on_eos=False)
    with pytest.raises(TevvizError, match="MixedBudget"):
        DecodeSession(pair, [3, 4], cfg, cost_model=AutoBudget(12, 4))
    auto = DecodeConfig(builder=BuilderConfig(auto=True), max_new_tokens=4, stop_on_eos=False)
    with pytest.raises(TevvizError, match="AutoBudget"):
        DecodeSession(pair, [3, 4], auto, cost_model=MixedBudget(12, 4))


@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_mixed_equals_generate(family):
    """At T = 0 both arms (TEV on trees, the greedy chain for speculative) give the target's greedy output."""
    pair = pair_of(family)
    assert_greedy(pair, random_prompts(2, seed=1300 + FAMILIES.index(family)), greedy_cfg(MIXED))


def test_caches_in_line_with_both_arms_at_t1_and_rounds_say_their_verifier():
    """T = 1 with top-k and top-p: caches equal a fresh prefill after every round, trees and chains alike; a round's
    record names the verifier that decided it, and the session JSON keeps the arm."""
    pair = pair_of("llama")
    cfg = DecodeConfig(sampling=SamplingConfig(temperature=1.0, top_k=8, top_p=0.9), builder=MIXED, verifier="tev",
                       max_new_tokens=40, seed=3, stop_on_eos=False, missing_top=0)
    s = DecodeSession(pair, random_prompts(1, seed=1310)[0], cfg)
    while not s.done:
        s.step()
        assert_caches_in_line(pair, s)
    chains = [r for r in s.rounds if r.sizing.chain]
    trees = [r for r in s.rounds if not r.sizing.chain]
    assert chains and trees, "test setup: both arms draft in one session"
    assert {r.verifier for r in chains} == {"speculative"} and {r.verifier for r in trees} == {"tev"}
    assert all(r.accept is not None for r in chains if r.size > 1)
    assert all(max(r.parents[1:], default=-1) == r.size - 2 for r in chains if r.size > 1)  # chains: a path
    back = loads(json.dumps(export_session(s, "p")))
    assert [r.sizing.chain for r in back.rounds] == [r.sizing.chain for r in s.rounds]
    assert [r.verifier for r in back.rounds] == [r.verifier for r in s.rounds]


def test_a_carried_mixed_model_keeps_what_it_measured_across_sessions():
    pair = pair_of("llama")
    model = MixedBudget(12, 4)
    cfg = DecodeConfig(sampling=SamplingConfig(temperature=1.0), builder=MIXED, max_new_tokens=30, seed=1,
                       stop_on_eos=False, missing_top=0)
    for prompt in random_prompts(3, seed=1320):
        DecodeSession(pair, prompt, cfg, cost_model=model).run()
    sized = model.sized["best-first"] + model.sized["sampled"]
    assert sized > 2 * ARM_MIN and model.rate("best-first") > 0 and model.rate("sampled") > 0
    with torch.inference_mode():
        s = DecodeSession(pair, random_prompts(1, seed=1321)[0], cfg, cost_model=model)
        s.step()
    assert not s.rounds[0].sizing.warmup  # the warm-ups were the earlier sessions'
