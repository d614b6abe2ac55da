"""--budget auto: the online cost model, the rate rule, its limits, and exactness with it on."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest
import torch
from conftest import assert_caches_in_line, greedy_generate, losing_cost_model, random_prompts, tiny_pair
from test_exactness import assert_greedy, greedy_cfg

from tevviz.engine import BuilderConfig, DecodeConfig, DecodeSession, SamplingConfig, TevvizError
from tevviz.engine.core.kv import new_cache
from tevviz.engine.cost.auto_budget import MAX_WAIT, WARMUP_CAP, WARMUP_FRACTIONS, AutoBudget, Plan
from tevviz.engine.cost.tree_cost import Q_EDGES, RANKS, q_bins
from tevviz.engine.draft.builders import build_tree
from tevviz.engine.records.io import loads, session_dict
from tevviz.engine.records.round_time import Points, plain_rate, round_cost


def plan(**kw) -> Plan:
    base = {"max_budget": 8, "max_depth": 4, "target_fixed": 10.0, "target_per_token": 1.0, "draft_level": 2.0,
            "overhead": 1.0, "log_accept": torch.zeros(RANKS, len(Q_EDGES) + 1)}
    return Plan(**(base | kw))


def test_best_subtree_maximises_expected_tokens_per_ms_by_brute_force():
    g = torch.Generator().manual_seed(0)
    for _ in range(50):
        scores = -torch.rand(12, generator=g) * 4
        p = plan(target_per_token=float(torch.rand(1, generator=g)) * 3)
        k, rate = p.best(scores, depth=3)
        q = sorted(torch.exp(scores).tolist(), reverse=True)[:8]
        rates = [(1 + sum(q[:j])) / p.round_ms(j, 3) for j in range(1, len(q) + 1)]
        assert k == 1 + max(range(len(rates)), key=rates.__getitem__) and rate == pytest.approx(max(rates), rel=1e-5)
    cheap, dear = plan(target_per_token=1e-6), plan(target_per_token=1e3)
    assert cheap.best(torch.zeros(12) - 0.1, 3)[0] == 8  # nodes nearly free: the whole limit
    assert dear.best(torch.zeros(12) - 0.1, 3)[0] == 1  # nodes dearer than what they bring: one


def test_cost_model_recovers_a_line_and_the_realised_over_predicted_coverage():
    auto = AutoBudget(64, 8)
    for n in (65, 17, 33, 9, 41, 25):
        auto.observe(n, levels=4, stage_ms={"draft": 8.0, "target": 20.0 + 0.5 * n, "verify": 1.0, "other": 2.0},
                     C_p=1.5, predicted=3.0)
    fit = auto.fit()
    assert fit.target_fixed == pytest.approx(20.0) and fit.target_per_token == pytest.approx(0.5)
    assert fit.draft_level == pytest.approx(2.0) and fit.overhead == pytest.approx(3.0)
    assert fit.calibration == pytest.approx(0.5) and fit.rounds == 6


def test_the_running_line_is_least_squares_over_the_last_window_of_points():
    """The cost model's lines are kept as running sums (its bookkeeping is part of every round): after many points
    they agree with a least-squares fit from scratch over the window's points, through stretches where x does not
    vary (where the slope is `share` of the mean per x)."""
    g = torch.Generator().manual_seed(0)
    pts = Points(size=16)
    for i in range(3000):
        x = 5 if 1000 <= i < 1100 else int(torch.randint(1, 10, (1,), generator=g))
        y = 10.0 + 2.0 * x + float(torch.randn(1, generator=g)) * 3.0
        pts.append(x, y)
        if i in (999, 1099, 2999):
            xs = torch.tensor([p[0] for p in pts.points], dtype=torch.float64)
            ys = torch.tensor([p[1] for p in pts.points], dtype=torch.float64)
            assert len(xs) == pts.n == 16 and pts.mean_y() == pytest.approx(float(ys.mean()))
            if i == 1099:  # the window holds x = 5 alone
                assert pts.line(share=0.5) == pytest.approx((float(ys.mean()) / 2, float(ys.mean()) / 10))
                continue
            slope = float(((xs - xs.mean()) * (ys - ys.mean())).sum() / ((xs - xs.mean()) ** 2).sum())
            assert pts.line() == pytest.approx((float(ys.mean() - slope * xs.mean()), slope), rel=1e-9)
    flat = Points(size=8)
    for _ in range(12):
        flat.append(0.1, 4.0)  # float x that do not vary: the share branch, not a slope from rounding noise
    assert flat.line(share=1.0) == pytest.approx((3.6, 4.0))  # mean 4 per max(x, 1) = 1, through the mean


def test_draft_time_is_a_line_in_levels_so_each_extra_level_is_priced_at_its_own_cost():
    """A round's first draft forward also catches the draft up on the committed tokens: 3 ms of set-up and 0.5 ms
    a level is priced so, not at the mean per level (1.5 ms at 3 levels), which draws chains and trees too shallow."""
    auto = AutoBudget(64, 8)
    for levels in (1, 5, 2, 4, 3):
        auto.observe(9, levels, {"draft": 3.0 + 0.5 * levels, "target": 20.0, "verify": 1.0, "other": 1.0},
                     C_p=1.0, predicted=1.0)
    fit = auto.fit()
    assert (fit.draft_fixed, fit.draft_level) == pytest.approx((3.0, 0.5))
    assert round_cost(fit, 8, 6) - round_cost(fit, 8, 5) == pytest.approx(0.5)
    assert round_cost(fit, 0, 0) == pytest.approx(fit.overhead + fit.target_fixed + fit.target_per_token), \
        "a round without a draft pays no draft set-up"
    assert auto.plan().draft_fixed == pytest.approx(3.0)


def test_a_plain_step_is_timed_on_its_own():
    """On a CPU a pass over 2 tokens costs half a step more than over 1: the tree line, extended to one token,
    would price a plain step at twice its cost and keep drafting trees that lose to it."""
    auto = AutoBudget(32, 8)
    for n in (33, 9, 17):  # CPU-like: a steep first extra token, then a gentle slope
        auto.observe(n, 4, {"draft": 40.0, "target": 200.0 + 6.0 * n, "verify": 2.0, "other": 1.0},
                     C_p=1.0, predicted=2.0)
    assert auto.fit().plain == pytest.approx(3.0 + 200.0 + 6.0), "before any plain step: the line's price"
    auto.observe(1, 0, {"draft": 0.0, "target": 100.0, "verify": 0.5, "other": 0.5}, C_p=0.0, predicted=0.0)
    fit = auto.fit()
    assert fit.plain == pytest.approx(101.0) and plain_rate(fit) == pytest.approx(1 / 101.0)
    assert (fit.target_fixed, fit.target_per_token) == pytest.approx((200.0, 6.0)), "the plain step is not on the line"
    # A tree of tau 2 at 9 tokens (40 + 254 + 3 ms): better than the line's plain step (209 ms a token), worse
    # than the measured one (101 ms): the next round goes without a draft.
    auto.observe(9, 4, {"draft": 40.0, "target": 254.0, "verify": 2.0, "other": 1.0}, C_p=1.0, predicted=2.0)
    assert auto.plan().skip_draft


def test_the_acceptance_table_learns_each_rank_and_q_bin_from_target_edge_probabilities():
    """A first choice at q 0.55 that the target always takes, a second choice at q 0.3 it never takes: the table
    learns both, leaves unseen bins at their q, and C_p over the predicted reach is what the rounds realised."""
    auto = AutoBudget(8, 4)
    prior = auto.table.log_accept().exp()
    mid = (torch.tensor((0.0, *Q_EDGES)) + torch.tensor((*Q_EDGES, 1.0))) / 2
    assert torch.allclose(prior, mid.expand(RANKS, -1)), "before any node: each bin answers its own q"
    json.dumps(asdict(auto.fit()), allow_nan=False)  # a round's sizing goes into the session JSON: finite numbers
    lq = [0.0, 0.55, 0.3]
    first, second = (int(q_bins(torch.tensor([x]).log())) for x in lq[1:])
    for _ in range(60):
        auto.observe(3, 1, {"draft": 1.0, "target": 10.0, "verify": 1.0, "other": 1.0}, C_p=1.0, predicted=0.8,
                     ranks=[0, 0, 1], logq=torch.tensor(lq).log().tolist(), p_edge=[1.0, 1.0, 0.0])
    table = auto.table.log_accept().exp()
    assert table[0, first] > 0.95 and table[1, second] < 0.05
    untouched = torch.ones(RANKS, len(Q_EDGES) + 1, dtype=torch.bool)
    untouched[0, first] = untouched[1, second] = False
    assert torch.allclose(table[untouched], prior[untouched])
    fit = auto.fit()
    json.dumps(asdict(fit), allow_nan=False)
    assert fit.calibration == pytest.approx(1.0 / 0.8)
    assert fit.first_accept == pytest.approx(1.0) and fit.first_q == pytest.approx(0.55)
    # Later ranks share the last row.
    assert torch.equal(Plan(8, 4, 1.0, 1.0, 1.0, 1.0, auto.table.log_accept()).edge_values(
        torch.tensor([0.3, 0.3]).log(), torch.tensor([1, 7]))[1], auto.table.log_accept()[RANKS - 1, second])


def _table(first: float, later: float) -> torch.Tensor:
    """An acceptance table that puts every first choice at `first` and every later choice at `later`."""
    t = torch.full((RANKS, len(Q_EDGES) + 1), later)
    t[0] = first
    return t.log()


def test_trees_follow_the_table_a_chain_where_first_choices_hold_and_a_bush_where_they_do_not(pair):
    """The same draft and limits give a deep chain when first choices are taken (T = 0 on a good drafter) and a
    wide shallow tree when only the root's alternatives pay; the kept nodes are always closed under ancestors."""
    ctx = random_prompts(1, 11)[0]
    cfg = BuilderConfig(budget=8, depth=8, children=4, width=8, auto=True)

    def built(table):
        p = Plan(8, 8, target_fixed=10.0, target_per_token=0.01, draft_level=0.01, overhead=1.0, log_accept=table)
        return build_tree(pair.draft, new_cache(pair.draft), ctx, cfg, plan=p)

    chain = built(_table(0.95, 1e-4))
    assert chain.tree.size - 1 == 8 and sorted(chain.tree.depths.tolist()) == list(range(9))
    assert chain.ranks.tolist() == [0] * 9
    bush = built(_table(0.2, 0.15))
    assert max(bush.tree.depths.tolist()) <= 2 and (bush.tree.depths == 1).sum() >= 4
    for r in (chain, bush):
        parents = r.tree.parents.tolist()
        assert all(0 <= parents[v] < v for v in range(1, len(parents))), "parents kept, first: closed under ancestors"
        expect = torch.zeros(r.tree.size)
        for v in range(1, r.tree.size):
            expect[v] = expect[parents[v]] + _table(*((0.95, 1e-4) if r is chain else (0.2, 0.15)))[
                min(int(r.ranks[v]), RANKS - 1), int(q_bins(r.tree.draft_logprobs[v:v + 1]))]
        assert torch.allclose(r.reach, expect), "reach is the product of the table's edge values along the path"


@pytest.fixture(scope="module")
def pair():
    return tiny_pair("llama", seed=4)


def test_auto_trees_respect_the_limits_and_record_their_sizing(pair):
    cfg = DecodeConfig(sampling=SamplingConfig(temperature=1.0), max_new_tokens=60, seed=1, stop_on_eos=False,
                       builder=BuilderConfig(budget=12, depth=4, auto=True))
    s = DecodeSession(pair, random_prompts(1, 3)[0], cfg)
    records = s.run()
    assert len(records) > len(WARMUP_FRACTIONS)
    for i, r in enumerate(records):
        assert r.size - 1 <= 12 and max(r.depths) <= 4
        assert r.sizing.B == r.size - 1 and r.sizing.H == max(r.depths)
        if i < len(WARMUP_FRACTIONS):  # the first rounds try fixed shares of the limit, to give the fit a slope
            assert r.sizing.warmup and r.size - 1 == round(12 * WARMUP_FRACTIONS[i])
        else:
            assert not r.sizing.warmup
    assert records[-1].sizing.fit.rounds == len(records)
    assert len({r.size for r in records}) > 1, "the sizes should vary with the cost model"
    back = loads(json.dumps(session_dict({}, "", s.prompt_ids, s.generated, "", records)))
    assert [r.sizing for r in back.rounds] == [r.sizing for r in records]


def test_auto_needs_best_first():
    with pytest.raises(TevvizError, match="best-first"):
        BuilderConfig(name="chain", auto=True)


@pytest.mark.parametrize("family", ["llama", "qwen2", "gpt2"])
def test_greedy_exact_with_auto_budget(family):
    from test_exactness import pair_of

    pair = pair_of(family)
    assert_greedy(pair, random_prompts(3, seed=900), greedy_cfg(BuilderConfig(budget=24, depth=6, auto=True)))


def test_greedy_exact_with_a_compiled_draft():
    """--compile-draft: the tree builder runs torch.compile's draft; outputs stay the target's greedy ones."""
    from test_exactness import pair_of

    from tevviz.engine.load.models import compiled_draft

    pair = compiled_draft(pair_of("llama"))
    assert pair.drafting is not pair.draft
    assert_greedy(pair, random_prompts(2, seed=901), greedy_cfg(BuilderConfig(budget=16, depth=5)))


def paying_warmup(auto: AutoBudget) -> None:
    """Three warm-up trees and a sized one that pays: a target line 10 + 0.5 ms a token, 2 ms a draft level."""
    for n in (9, 3, 5, 7):
        auto.observe(n, 2, {"draft": 2.0, "target": 10.0 + 0.5 * n, "verify": 1.0, "other": 1.0},
                     C_p=2.0, predicted=2.0)


def test_rounds_without_a_draft_back_off_while_trees_lose_and_stop_when_one_wins():
    auto = AutoBudget(8, 4)
    lose = {"draft": 50.0, "target": 10.0, "verify": 1.0, "other": 1.0}
    paying_warmup(auto)
    assert not auto.plan().skip_draft, "trees that pay are drafted"
    plain = {"draft": 0.0, "target": 9.0, "verify": 0.5, "other": 0.5}

    def probes(n_probes: int, round_ms: dict, worth: float) -> list[int]:
        """Rounds without a draft after each of `n_probes` losing trees expected to commit 1 + `worth` tokens."""
        waits = []
        for _ in range(n_probes):
            auto.observe(5, 2, round_ms, C_p=worth, predicted=worth)
            n = 0
            while auto.plan().skip_draft:
                auto.observe(1, 0, plain, C_p=0.0, predicted=0.0)
                n += 1
            waits.append(n)
        return waits

    # A 5-node tree costs 16.5 ms against 10 for a plain step: expected 1.63 tokens, it loses (a little), so the
    # rounds without a draft double after each losing probe, up to MAX_WAIT.
    small = {"draft": 2.0, "target": 12.5, "verify": 1.0, "other": 1.0}
    auto.observe(1, 0, plain, C_p=0.0, predicted=0.0)
    assert probes(9, small, 0.63) == [1, 2, 4, 8, 16, 32, 64, MAX_WAIT, MAX_WAIT]
    assert MAX_WAIT == 64
    # Decided on the tree's expected worth, not on this round's draws: a tree whose first token missed (C_p 0, as
    # at T = 0) but whose like have paid is drafted again at once.
    auto = AutoBudget(8, 4)
    paying_warmup(auto)
    auto.observe(7, 2, {"draft": 2.0, "target": 13.5, "verify": 1.0, "other": 1.0}, C_p=0.0, predicted=2.0)
    assert not auto.plan().skip_draft
    auto = AutoBudget(8, 4)
    paying_warmup(auto)
    for _ in range(7):
        auto.observe(5, 3, lose | {"draft": 5000.0}, C_p=0.1, predicted=2.0)
        while auto.plan().skip_draft:
            auto.observe(1, 0, plain, C_p=0.0, predicted=0.0)
    fit = auto.fit()
    assert plain_rate(fit) == pytest.approx(1 / 10.0), "a plain step is priced by its own time"
    # Undrafted rounds leave the draft cost alone: it is what the drafted rounds alone give.
    drafted_only = AutoBudget(8, 4)
    paying_warmup(drafted_only)
    for _ in range(7):
        drafted_only.observe(5, 3, lose | {"draft": 5000.0}, C_p=0.1, predicted=2.0)
    alone = drafted_only.fit()
    assert (fit.draft_fixed, fit.draft_level) == pytest.approx((alone.draft_fixed, alone.draft_level))
    assert fit.draft_level == pytest.approx(4998.0), "draft ms is a line in levels: 2 ms at 2 levels, 5000 at 3"
    # A tree that wins (here: cheap levels, good coverage) ends the back-off.
    auto = AutoBudget(8, 4)
    paying_warmup(auto)
    auto.wait = 8
    auto.observe(5, 2, {"draft": 2.0, "target": 12.5, "verify": 1.0, "other": 1.0}, C_p=2.0, predicted=2.0)
    assert not auto.plan().skip_draft and auto.wait == 1


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_rounds_without_a_draft_keep_caches_in_line_and_greedy_output_exact(pair, temperature):
    """Undrafted rounds commit one target token and leave the draft cache behind; the next draft catches up."""
    prompt = random_prompts(1, 6)[0]
    cfg = DecodeConfig(sampling=SamplingConfig(temperature=temperature), max_new_tokens=48, seed=2, stop_on_eos=False,
                       missing_top=0, builder=BuilderConfig(budget=8, depth=3, auto=True))
    s = DecodeSession(pair, prompt, cfg, cost_model=losing_cost_model(8, 3))
    while not s.done:
        r = s.step()
        assert_caches_in_line(pair, s)
        if not r.sizing.drafted:
            assert r.size == 1 and r.sizing.B == 0 and len(r.committed) == 1
    drafted = [r.sizing.drafted for r in s.rounds]
    assert drafted[:2] == [False, True] and drafted.count(False) >= 10 and drafted.count(True) >= 3
    if temperature == 0.0:
        assert s.generated == greedy_generate(pair.target, prompt, 48)


def test_a_trees_warm_up_stays_small_and_a_chains_takes_its_whole_depth():
    """A tree's warm-up tries its shares of the limit up to WARMUP_CAP nodes (a tree of 64 cost three plain steps at
    T = 1 for 1.5 tokens); a sampled chain's warm-up takes its shares of the whole depth."""
    tree, chain = AutoBudget(64, 6), AutoBudget(8, 8, chain=True)
    for model, size in ((tree, WARMUP_CAP), (chain, 8)):
        plans = []
        for _ in WARMUP_FRACTIONS:
            p = model.plan()
            plans.append(p)
            model.observe(1 + (p.forced_budget or 0), 0 if p.skip_draft else 2,
                          {"draft": 2.0, "target": 10.0, "verify": 1.0, "other": 1.0}, C_p=0.0, predicted=0.0)
        assert all(p.warmup for p in plans) and plans[-1].skip_draft
        assert [p.forced_budget for p in plans] == [max(1, round(size * f)) if f else 0 for f in WARMUP_FRACTIONS]
    assert WARMUP_CAP < 64
