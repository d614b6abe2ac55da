"""The best-first tree's acceptance table (cost/tree_cost.py): its q bins, its prior and its decayed sums."""

from __future__ import annotations

import math

import pytest
import torch

from tevviz.engine.cost import tree_cost as tc
from tevviz.engine.records.round_time import WINDOW

LN = math.log


@pytest.mark.parametrize("q,col", [(0.001, 0), (0.03, 1), (0.15, 3), (0.55, 7), (0.93, 11), (0.97, 12), (1.0, 12)])
def test_q_bins_puts_each_draft_probability_in_its_column(q, col):
    assert int(tc.q_bins(torch.tensor([LN(q)]))) == col
    assert int(tc.q_bins(torch.tensor([LN(q)]), torch.tensor(tc.Q_EDGES))) == col


def test_prior_table_is_each_bins_middle_q_for_every_rank():
    assert tc.PRIOR_TABLE.shape == (tc.RANKS, len(tc.Q_EDGES) + 1)
    mids = [0.01, 0.035, 0.075, 0.15, 0.25, 0.35, 0.45, 0.55, 0.65, 0.75, 0.85, 0.925, 0.975]
    for rank in range(tc.RANKS):
        assert tc.PRIOR_TABLE[rank].exp().tolist() == pytest.approx(mids)


def test_a_new_table_answers_the_prior_and_has_no_first_choice():
    table = tc.AcceptanceTable()
    assert torch.allclose(table.log_accept(), tc.PRIOR_TABLE)
    assert table.first_choice() == (0.0, 0.0)


def test_learn_adds_each_node_to_its_rank_and_q_cell_drawn_toward_its_mean_q():
    table = tc.AcceptanceTable()
    # A first choice at q 0.55 the target takes with 0.9; a second at q 0.03 with 0.1; a sixth (rank row 2) at 0.97.
    table.learn([0, 1, 5], [LN(0.55), LN(0.03), LN(0.97)], [0.9, 0.1, 0.4])
    acc = table.log_accept().exp()
    assert float(acc[0, 7]) == pytest.approx((0.9 + tc.PRIOR * 0.55) / (1 + tc.PRIOR))
    assert float(acc[1, 1]) == pytest.approx((0.1 + tc.PRIOR * 0.03) / (1 + tc.PRIOR))
    assert float(acc[2, 12]) == pytest.approx((0.4 + tc.PRIOR * 0.97) / (1 + tc.PRIOR))
    untouched = torch.ones_like(acc, dtype=torch.bool)
    untouched[0, 7] = untouched[1, 1] = untouched[2, 12] = False
    assert torch.allclose(acc[untouched], tc.PRIOR_TABLE.exp()[untouched])
    assert table.first_choice() == pytest.approx((0.9, 0.55))


def test_learn_decays_earlier_trees_by_one_window():
    table = tc.AcceptanceTable()
    table.learn([0], [LN(0.55)], [1.0])
    table.learn([0, 0], [LN(0.52), LN(0.58)], [0.0, 0.5])
    decay = 1 - 1 / WINDOW
    nodes, hits, qs = decay + 2, decay * 1.0 + 0.5, decay * 0.55 + 0.52 + 0.58
    assert float(table.nodes[0, 7]) == pytest.approx(nodes)
    assert float(table.hits[0, 7]) == pytest.approx(hits)
    assert float(table.log_accept()[0, 7].exp()) == pytest.approx((hits + tc.PRIOR * qs / nodes) / (nodes + tc.PRIOR))
    assert table.first_choice() == pytest.approx((hits / nodes, qs / nodes))


def test_log_accept_stays_finite_where_nothing_is_accepted():
    table = tc.AcceptanceTable()
    table.learn([0], [LN(1e-9)], [0.0])
    assert float(table.log_accept()[0, 0]) == pytest.approx(LN(tc.MIN_ACCEPT))
