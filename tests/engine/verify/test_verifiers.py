"""The verifiers' exact decisions on a hand tree (verify/verifiers.py): given uniforms, given draws, T = 0, registry.

test_laws.py checks each verifier's law by drawing; here each decision is worked out from the uniforms it reads.
"""

from __future__ import annotations

import pytest
import torch

from tevviz.engine import SamplingConfig, TevvizError
from tevviz.engine.core.tree import ancestor_mask, from_parents
from tevviz.engine.verify import verifiers as vf

# Root (token 3) with children 1 (token 1) and 2 (token 2); node 1 with children 3 (token 3) and 4 (token 0).
TOKENS, PARENTS = [3, 1, 2, 3, 0], [-1, 0, 0, 1, 1]
PROBS = torch.tensor([
    [0.15, 0.50, 0.30, 0.05],
    [0.20, 0.10, 0.30, 0.40],
    [0.40, 0.30, 0.20, 0.10],
    [0.40, 0.30, 0.20, 0.10],
    [0.10, 0.20, 0.30, 0.40],
])
W = [0.2, 0.2, 0.3, 0.2, 0.1]  # exit law by hand: P = 1, .5, .3, .2, .1 times rho = .2, .4, 1, 1, 1
RESIDUAL = [  # p_v with v's children's tokens removed (unnormalised)
    [0.15, 0.0, 0.0, 0.05],
    [0.0, 0.10, 0.30, 0.0],
    PROBS[2].tolist(), PROBS[3].tolist(), PROBS[4].tolist(),
]


@pytest.fixture
def tree():
    return from_parents(TOKENS, PARENTS)


def first_reaching(weights: list[float], u: float) -> tuple[int, float]:
    """Index whose cumulative interval holds (1 - u) * total, and the distance to the nearest interval end."""
    total = sum(weights)
    t, cum = (1 - u) * total, 0.0
    ends = []
    for i, x in enumerate(weights):
        cum += x
        ends.append(cum)
    i = next(i for i, c in enumerate(ends) if c >= t)
    return i, min(abs(t - c) for c in [0.0, *ends])


def test_tev_exits_by_the_first_uniform_and_draws_the_bonus_from_the_exit_residual_by_the_second(tree):
    logits, cfg = PROBS.log(), SamplingConfig(temperature=1.0)
    seen = set()
    for seed in range(200):
        u = torch.rand(2, 1, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)[:, 0].tolist()
        node, gap = first_reaching(W, u[0])
        bonus, gap_b = first_reaching(RESIDUAL[node], u[1])
        if min(gap, gap_b) < 1e-4:
            continue  # too close to an interval's end for float32 probabilities to decide
        d = vf.tev(tree, logits, cfg, torch.Generator().manual_seed(seed))
        assert (int(d.exit_node), int(d.bonus_token)) == (node, bonus), f"seed {seed}, u {u}"
        seen.add(node)
    assert seen == {0, 1, 2, 3, 4}
    assert torch.allclose(d.exit_law.w, torch.tensor(W), atol=1e-6)


def test_tev_bonus_is_never_a_token_of_the_exit_nodes_children(tree):
    logits, cfg = PROBS.log(), SamplingConfig(temperature=1.0)
    g = torch.Generator().manual_seed(0)
    for _ in range(300):
        d = vf.tev(tree, logits, cfg, g)
        kids = [TOKENS[u] for u in range(1, 5) if PARENTS[u] == int(d.exit_node)]
        assert int(d.bonus_token) not in kids


@pytest.mark.parametrize("name", list(vf.VERIFIERS))
def test_temperature_zero_follows_the_greedy_path_and_bonus_is_its_argmax(tree, name):
    cfg, g = SamplingConfig(temperature=0), torch.Generator().manual_seed(0)
    # Argmax: root token 1 (node 1), node 1 token 3 (node 3), node 3 token 0.
    d = vf.VERIFIERS[name](tree, PROBS.log(), cfg, g)
    assert (int(d.exit_node), int(d.bonus_token)) == (3, 0)
    # With the root's argmax on token 0, which no child carries, the walk stops at the root.
    logits = PROBS.log().clone()
    logits[0, 0] = 2.0
    d = vf.VERIFIERS[name](tree, logits, cfg, g)
    assert (int(d.exit_node), int(d.bonus_token)) == (0, 0)


def test_tev_at_temperature_zero_hands_over_its_one_hot_exit_law(tree):
    d = vf.tev(tree, PROBS.log(), SamplingConfig(temperature=0), torch.Generator())
    assert d.exit_law.w.tolist() == [0.0, 0.0, 0.0, 1.0, 0.0] and float(d.exit_law.C_p) == 2.0


@pytest.mark.parametrize("name", list(vf.VERIFIERS))
def test_a_root_alone_exits_at_the_root_with_the_roots_argmax(name):
    root = from_parents([5], [-1])
    d = vf.VERIFIERS[name](root, PROBS[:1].log(), SamplingConfig(temperature=0), torch.Generator())
    assert (int(d.exit_node), int(d.bonus_token)) == (0, 1)


@pytest.mark.parametrize("draws,node", [
    ([1, 3, 0, 0, 0], 3),
    ([1, 0, 0, 0, 0], 4),
    ([2, 3, 0, 0, 0], 2),  # node 3 matches its parent's draw, but its parent is not reached
    ([0, 3, 0, 0, 0], 0),
    ([1, 2, 0, 0, 0], 1),
])
def test_follow_walks_down_the_children_matching_each_draw(tree, draws, node):
    assert int(vf._follow(tree, torch.tensor(draws), ancestor_mask(tree))) == node


def test_predraw_bonus_is_the_exit_nodes_own_draw(tree, monkeypatch):
    draws = torch.tensor([1, 0, 2, 1, 3])
    monkeypatch.setattr(vf, "sample_categorical", lambda weights, gen: draws)
    d = vf.predraw(tree, PROBS.log(), SamplingConfig(temperature=1.0), torch.Generator())
    assert (int(d.exit_node), int(d.bonus_token)) == (4, 3)


def test_or_row_falls_back_to_the_row_only_where_the_residual_has_no_mass():
    row = torch.tensor([0.5, 0.5])
    assert vf._or_row(torch.tensor([0.0, 0.25]), row).tolist() == [0.0, 0.25]
    assert vf._or_row(torch.zeros(2), row).tolist() == [0.5, 0.5]


def test_get_verifier_and_register():
    assert vf.get_verifier("tev") is vf.tev and vf.get_verifier("residual") is vf.residual
    with pytest.raises(TevvizError, match="unknown verifier 'nope'; choose one of tev, predraw"):
        vf.get_verifier("nope")
    try:
        fn = vf.register("test-only")(vf.tev)
        assert fn is vf.tev and vf.get_verifier("test-only") is vf.tev
    finally:
        vf.VERIFIERS.pop("test-only", None)
