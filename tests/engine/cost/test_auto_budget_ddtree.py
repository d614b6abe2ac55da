"""--budget auto on a block drafter's DDTree rounds (tevviz/engine/cost/auto_budget.py with
engine/draft/block_drafting.py): each round keeps DDTree's first k pops, is priced as the tree it keeps, and the output
stays the target's greedy output."""

from __future__ import annotations

import pytest
import torch
from _dflash import BS
from conftest import greedy_generate

from tevviz.engine import BuilderConfig, DecodeConfig, DecodeSession, SamplingConfig

pytestmark = pytest.mark.usefixtures("one_thread")


def test_tevviz_decode_budget_auto_prices_the_ddtree_it_keeps(saved_pair, monkeypatch, capsys):
    """`tevviz decode --budget auto` with a block drafter keeps DDTree's first k nodes (its tree of budget k); the
    rate that chose k is that tree's, 1 + sum of its nodes' reach over the round's cost, not the rate of the k nodes
    of largest reach (which priced a tree it did not keep, 0.3-5% high in most rounds)."""
    from tevviz.cli import main
    from tevviz.engine.cost import auto_budget
    from tevviz.engine.draft import block_drafting
    from tevviz.engine.records.round_time import round_cost

    pending, pairs = [], []  # pricings since the last draft; (the round's pricing, the tree it drafted)
    real_best, real_draft = auto_budget.Plan.best, block_drafting.BlockDrafter.draft

    def best(plan, values, depth, *args, **kwargs):
        out = real_best(plan, values, depth, *args, **kwargs)
        if plan.forced_budget is None:
            pending.append((plan, values.clone(), out))
        return out

    def draft(self, request):
        out = real_draft(self, request)
        plan = request.plan
        # A round priced and drafted in full: not the floor's plain step, nor a last round with no room left.
        if pending and plan is not None and not plan.skip_draft and out.tree.size - 1 == min(pending[-1][2][0],
                                                                                            out.reach.numel() - 1):
            pairs.append((pending[-1], out))
        pending.clear()
        return out

    monkeypatch.setattr(auto_budget.Plan, "best", best)
    monkeypatch.setattr(block_drafting.BlockDrafter, "draft", draft)
    # Every round after the warm-up sized: on tiny random models the floor (test_auto_budget) would send most of them
    # to plain steps, and how many it leaves depends on measured times.
    monkeypatch.setattr(auto_budget.AutoBudget, "back_off", lambda *args: None)
    target, drafter = saved_pair
    assert main(["decode", "--target", target, "--draft", drafter, "--prompt", "a b c d", "--max-new-tokens", "60",
                 "--budget", "auto", "--temperature", "0", "--device", "cpu", "--threads", "1"]) == 0
    capsys.readouterr()
    assert len(pairs) >= 5, "test setup: sized rounds after the warm-up"
    reordered = 0
    for (plan, values, (k, rate)), d in pairs:
        reordered += not torch.equal(values.sort(descending=True).values, values)
        assert d.tree.size - 1 == k
        assert rate == pytest.approx(float(1 + d.reach[1:].exp().sum()) / float(round_cost(plan, k, 1)), rel=1e-5)
    assert reordered, "test setup: a round whose pop order is not the order of reach"


def test_auto_budget_sizes_ddtree_rounds_and_stays_exact(block_pair):
    """--budget auto on a block drafter: each round keeps the first k pops (DDTree's tree of budget k), the
    output is the target's greedy output, and the sizing is recorded."""
    prompt = [7, 3, 9]
    cfg = DecodeConfig(sampling=SamplingConfig(temperature=0.0), max_new_tokens=40, stop_on_eos=False,
                       builder=BuilderConfig(name="ddtree", budget=32, depth=BS - 1, auto=True))
    s = DecodeSession(block_pair, prompt, cfg)
    s.run()
    assert s.generated == greedy_generate(block_pair.target, prompt, 40)
    assert all(r.sizing is not None and r.sizing.B == r.size - 1 <= 32 for r in s.rounds)
    for r in s.rounds:
        if r.size > 1:  # the kept nodes are the first pops of the full-budget heap over the same rows
            from tevviz.engine.records.draft_rows import rebuild

            assert rebuild(r.draft_rows, r.size - 1) == (r.tokens[1:], r.parents[1:])
