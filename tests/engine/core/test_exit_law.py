"""The exit law's functions (core/exit_law.py) on one five-node tree whose flow is worked out by hand."""

from __future__ import annotations

import pytest
import torch

from tevviz.engine import SamplingConfig
from tevviz.engine.core import exit_law as law
from tevviz.engine.core.tree import ancestor_mask, from_parents

# Root (token 3) with children 1 (token 1) and 2 (token 2); node 1 with children 3 (token 3) and 4 (token 0).
TOKENS = [3, 1, 2, 3, 0]
PARENTS = [-1, 0, 0, 1, 1]
PROBS = torch.tensor([
    [0.15, 0.50, 0.30, 0.05],  # root: edges 0.5, 0.3, rho 0.2; its own token 3 has 0.05, which p_edge must not read
    [0.20, 0.10, 0.30, 0.40],  # node 1: edges 0.4 (token 3), 0.2 (token 0), rho 0.4
    [0.40, 0.30, 0.20, 0.10],
    [0.25, 0.25, 0.25, 0.25],
    [0.10, 0.20, 0.30, 0.40],
])
# By hand: P(v) = P(pa) * p_pa(x_v); rho(v) = 1 - children's edges; w = P * rho.
EDGE = [1.0, 0.5, 0.3, 0.4, 0.2]
P_HAND = [1.0, 0.5, 0.3, 0.2, 0.1]
RHO_HAND = [0.2, 0.4, 1.0, 1.0, 1.0]
W_HAND = [0.2, 0.2, 0.3, 0.2, 0.1]
C_P_HAND = 0.5 + 0.3 + 0.2 + 0.1


@pytest.fixture
def tree():
    return from_parents(TOKENS, PARENTS)


def close(got: torch.Tensor, want) -> bool:
    return torch.allclose(got.float(), torch.tensor(want, dtype=torch.float32), atol=1e-6)


def test_p_edge_reads_each_parents_row_and_sets_the_root_to_one(tree):
    assert close(law.p_edge(tree, PROBS), EDGE)


def test_P_is_the_product_of_edges_along_the_path(tree):
    edge = torch.tensor(EDGE)
    assert close(law.P(tree, edge), P_HAND)
    # A caller's mask is used as given: with only the diagonal, P is each node's own edge.
    assert close(law.P(tree, edge, torch.eye(5, dtype=torch.bool)), EDGE)


def test_child_sum_adds_children_only(tree):
    assert law.child_sum(tree, torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0])).tolist() == [5.0, 9.0, 0.0, 0.0, 0.0]


def test_rho_is_one_minus_the_children_edges_and_one_at_leaves(tree):
    assert close(law.rho(tree, torch.tensor(EDGE)), RHO_HAND)


def test_rho_floors_float_rounding_but_keeps_a_real_residual():
    bush = from_parents([0, 1, 2], [-1, 0, 0])
    rounded = law.rho(bush, torch.tensor([1.0, 0.6, 0.4 - 5e-7]))
    assert rounded[0] == 0.0, "a residual below RHO_FLOOR is float32 rounding and must not be drawn"
    kept = law.rho(bush, torch.tensor([1.0, 0.6, 0.4 - 1e-5]))
    assert kept[0] == pytest.approx(1e-5, rel=1e-2)


def test_w_is_P_times_rho_sums_to_one_and_coverage_is_mean_depth(tree):
    w = law.w(torch.tensor(P_HAND), torch.tensor(RHO_HAND))
    assert close(w, W_HAND)
    assert float(w.sum()) == pytest.approx(1.0)
    c = law.coverage(tree, torch.tensor(P_HAND))
    assert float(c) == pytest.approx(C_P_HAND)
    # Lemma: C_p = sum_v w(v) d(v); the root's P (1) is not part of the coverage.
    assert float(c) == pytest.approx(float((w * tree.depths).sum()))


def test_child_token_counts_marks_only_that_nodes_children(tree):
    assert law.child_token_counts(tree, torch.tensor(0), 4).tolist() == [0, 1, 1, 0]
    assert law.child_token_counts(tree, torch.tensor(1), 4).tolist() == [1, 0, 0, 1]
    assert law.child_token_counts(tree, torch.tensor(3), 4).tolist() == [0, 0, 0, 0]


@pytest.mark.parametrize("fn", [law.residual, law.residual_of_row])
def test_residual_removes_the_nodes_children_tokens_only(tree, fn):
    # Tokens 3 and 0 are children of node 1, not of the root: the root's residual keeps them.
    assert close(fn(tree, PROBS[0], torch.tensor(0)), [0.15, 0.0, 0.0, 0.05])
    assert close(fn(tree, PROBS[1], torch.tensor(1)), [0.0, 0.1, 0.3, 0.0])
    assert close(fn(tree, PROBS[2], torch.tensor(2)), PROBS[2].tolist())
    assert float(fn(tree, PROBS[1], torch.tensor(1)).sum()) == pytest.approx(RHO_HAND[1])


def test_missing_tokens_ranks_gains_P_times_p_without_children(tree):
    gains, ids = law.missing_tokens(tree, PROBS, torch.tensor(P_HAND), k=2)
    assert ids[0].tolist() == [0, 3] and close(gains[0], [0.15, 0.05])
    assert ids[1].tolist() == [2, 1] and close(gains[1], [0.5 * 0.3, 0.5 * 0.1])
    assert ids[2].tolist() == [0, 1] and close(gains[2], [0.3 * 0.4, 0.3 * 0.3])
    # k past the vocabulary asks for every token, children's at gain 0.
    gains, ids = law.missing_tokens(tree, PROBS, torch.tensor(P_HAND), k=10)
    assert gains.shape == (5, 4) and close(gains[0], [0.15, 0.05, 0.0, 0.0])


def test_exit_law_from_probs_edges_and_logits_agree_with_the_hand_flow(tree):
    for ex in (law.exit_law(tree, PROBS), law.exit_law_from_edges(tree, torch.tensor(EDGE)),
               law.exit_law_from_logits(tree, PROBS.log(), SamplingConfig(temperature=1.0)),
               law.exit_law_from_edges(tree, torch.tensor(EDGE), ancestor_mask(tree))):
        assert close(ex.p_edge, EDGE) and close(ex.P, P_HAND) and close(ex.rho, RHO_HAND) and close(ex.w, W_HAND)
        assert float(ex.C_p) == pytest.approx(C_P_HAND)


def test_exit_law_from_logits_at_temperature_zero_is_one_hot_on_the_greedy_path(tree):
    # Argmax of the root is token 1 (node 1), of node 1 token 3 (node 3): the greedy path ends at node 3.
    ex = law.exit_law_from_logits(tree, PROBS.log(), SamplingConfig(temperature=0))
    assert ex.p_edge.tolist() == [1.0, 1.0, 0.0, 1.0, 0.0]
    assert ex.P.tolist() == [1.0, 1.0, 0.0, 1.0, 0.0]
    assert ex.w.tolist() == [0.0, 0.0, 0.0, 1.0, 0.0]
    assert float(ex.C_p) == 2.0
