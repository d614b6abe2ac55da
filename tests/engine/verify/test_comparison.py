"""The verifier comparison: batched draws follow each verifier's law, progress is reported, a stop keeps the draws."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import tiny_pair

from tevviz.engine import BuilderConfig, DecodeConfig, DecodeSession, SamplingConfig
from tevviz.engine.core.exit_law import exit_law
from tevviz.engine.core.sampling import processed_probs
from tevviz.engine.core.tree import ancestor_mask, from_parents
from tevviz.engine.verify import comparison as cmp
from tevviz.engine.verify.verifiers import VERIFIERS, _follow

pytestmark = pytest.mark.usefixtures("one_thread")

PARENTS = [-1, 0, 0, 0, 1, 1, 2, 4, 4, 7]
TOKENS = [0, 3, 5, 1, 2, 6, 6, 0, 7, 4]
SETTINGS = [SamplingConfig(temperature=1.0), SamplingConfig(temperature=0.7, top_k=5),
            SamplingConfig(temperature=1.3, top_p=0.9)]


def hand_made(seed: int = 0):
    """A ten-node tree over an eight-token vocabulary and logits that spread the exit law over most nodes."""
    tree = from_parents(TOKENS, PARENTS, [0.0] * len(TOKENS))
    logits = torch.randn(len(TOKENS), 8, generator=torch.Generator().manual_seed(seed))
    for v, parent in enumerate(PARENTS[1:], 1):
        logits[parent, TOKENS[v]] += 1.5  # the drafted tokens likely, as a fair draft makes them
    return tree, logits, ancestor_mask(tree)


@pytest.mark.parametrize("cfg", SETTINGS, ids=["T1", "topk", "topp"])
@pytest.mark.parametrize("name", ["tev", "predraw", "residual"])
def test_batched_draws_follow_the_exit_law(name, cfg):
    """20,000 batched draws of each verifier pass the chi-square test against w (the law every verifier shares)."""
    tree, logits, anc = hand_made()
    w = exit_law(tree, processed_probs(logits, cfg)).w.tolist()
    assert sum(x > 0.02 for x in w) >= 5, "the test needs an exit law spread over several nodes"
    draw = cmp.BATCHED[name](tree, logits, cfg, anc)
    exits = torch.cat([draw(m, g) for g in [torch.Generator().manual_seed(1)] for m in (1, 7, 19_992)])
    counts = torch.bincount(exits, minlength=tree.size).tolist()
    _, df, p = cmp.chi_square_p(counts, w)
    assert df >= 4 and p > 1e-3, f"{name}: counts {counts} against w {[round(x, 3) for x in w]}, p = {p:.2g}"


@pytest.mark.parametrize("name", ["tev", "predraw", "residual"])
def test_batched_draws_at_temperature_0_take_the_greedy_exit(name):
    tree, logits, anc = hand_made()
    greedy = SamplingConfig(temperature=0.0)
    expected = int(VERIFIERS[name](tree, logits, greedy, torch.Generator(), anc).exit_node)
    exits = cmp.BATCHED[name](tree, logits, greedy, anc)(50, torch.Generator().manual_seed(0))
    assert exits.tolist() == [expected] * 50


def test_follow_many_is_predraws_walk_row_by_row():
    tree, _, anc = hand_made()
    draws = torch.randint(0, 8, (300, tree.size), generator=torch.Generator().manual_seed(2))
    draws[::3, 0], draws[::5, 1] = 3, 2  # many walks go past the root
    assert cmp.follow_many(tree, draws, anc).tolist() == [int(_follow(tree, d, anc)) for d in draws]


@pytest.fixture(scope="module")
def round_on_tiny_pair():
    """(pair, prefix, record): the first round with a drafted tree at T = 1 on a tiny Llama pair."""
    pair = tiny_pair("llama")
    cfg = DecodeConfig(sampling=SamplingConfig(temperature=1.0), builder=BuilderConfig(budget=12, depth=4),
                       max_new_tokens=16, seed=0, missing_top=0)
    s = DecodeSession(pair, [3, 4, 5], cfg)
    prefix = s.tokens[:-1]
    return pair, prefix, s.step()


def test_comparison_draws_predraw_and_residual_without_a_call_per_draw(round_on_tiny_pair, monkeypatch):
    pair, prefix, record = round_on_tiny_pair
    calls = {"predraw": 0, "residual": 0}
    for name in calls:
        def counted(*a, _verify=VERIFIERS[name], _name=name, **k):
            calls[_name] += 1
            return _verify(*a, **k)
        monkeypatch.setitem(VERIFIERS, name, counted)
    c = cmp.compare_verifiers(pair, prefix, record, SamplingConfig(temperature=1.0), 500, 0)
    assert calls == {"predraw": 0, "residual": 0}
    assert c.draws == 500 and not c.stopped and [x.name for x in c.laws] == list(cmp.COMPARED_VERIFIERS)
    assert all(x.p > 1e-4 for x in c.laws), [(x.name, x.p) for x in c.laws]


def test_comparison_stopped_midway_returns_its_partial_statistics(round_on_tiny_pair):
    pair, prefix, record = round_on_tiny_pair
    reports = []
    c = cmp.compare_verifiers(pair, prefix, record, SamplingConfig(temperature=1.0), 100_000, 0,
                              progress=lambda done, desc="": reports.append(done), stop=lambda: len(reports) >= 2)
    assert c.stopped and c.requested == 100_000 and 0 < c.draws < 100_000
    assert reports[-1] == (c.draws, 100_000) and reports[0][0] < reports[1][0]
    assert "stopped after" in c.note and f"{c.draws} of 100000" in c.note
    for law in c.laws:
        assert sum(law.freqs) == pytest.approx(1.0)
        assert 0 <= law.tv <= 1 and 0 <= law.p <= 1 and law.us_per_draw > 0


def test_per_draw_reference_is_kept(round_on_tiny_pair):
    pair, prefix, record = round_on_tiny_pair
    c = cmp.compare_verifiers(pair, prefix, record, SamplingConfig(temperature=1.0), 300, 0,
                              names=("predraw-loop", "residual"), batched=False)
    assert c.draws == 300 and all(x.p > 1e-4 for x in c.laws)


def test_batched_residual_walks_down_to_a_leaf_that_carries_real_mass():
    """A chain whose leaf holds about 5% of the exit law: a walk that stops one level short never reaches it.

    (The hand-made tree's deepest node carries about 1e-4, too little for its loss to show in 20,000 draws.)"""
    tree = from_parents([0, 3, 5, 1], [-1, 0, 1, 2], [0.0] * 4)
    logits = torch.zeros(4, 8)
    for v, token in enumerate([3, 5, 1]):
        logits[v, token] = math.log(0.37 * 7 / 0.63)  # p_v(x_child) = 0.37, the rest spread evenly
    w = exit_law(tree, processed_probs(logits, SamplingConfig(temperature=1.0))).w.tolist()
    assert w[3] == pytest.approx(0.37 ** 3, rel=1e-4) and w[3] > 0.04
    draw = cmp.BATCHED["residual"](tree, logits, SamplingConfig(temperature=1.0), ancestor_mask(tree))
    counts = torch.bincount(draw(20_000, torch.Generator().manual_seed(3)), minlength=4).tolist()
    _, df, p = cmp.chi_square_p(counts, w)
    assert counts[3] > 0 and df == 3 and p > 1e-3, f"counts {counts} against w {[round(x, 4) for x in w]}"
