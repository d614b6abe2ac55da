"""Where exit mass moved between two drafters' trees (train/exit_mass.py), by hand and on a tiny pair."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from conftest import scored_round, tiny_pair

from tevviz.engine.draft.builders import BuilderConfig
from tevviz.engine.train.exit_mass import exit_mass_changes, exit_mass_move, weighted_tree


def tree(tokens: list[int], parents: list[int], P: list[float]):
    r = scored_round(0, parents, P, exit_node=0)
    return dataclasses.replace(r, tokens=tokens, texts=[f"t{t}" for t in tokens])


# Before: root -> 5 -> 7 (listed before root -> 6). w: root 1 - 0.75, 5: 0.5 - 0.25, 7: 0.25, 6: 0.25.
BEFORE = tree([1, 5, 7, 6], [-1, 0, 1, 0], [1.0, 0.5, 0.25, 0.25])
# After: root -> 6, root -> 5 -> 8 (7 gone). w: root 1 - 0.875, 6: 0.5, 5: 0.375 - 0.125, 8: 0.125.
AFTER = tree([1, 6, 5, 8], [-1, 0, 0, 2], [1.0, 0.5, 0.375, 0.125])


def test_changes_by_token_path_largest_first_and_shallower_first_on_a_tie():
    rows = exit_mass_changes(BEFORE, AFTER)
    # |0.25|: t6 (depth 1) before t5 t7 (depth 2); |0.125|: the root before t5 t8; then t5, unchanged.
    assert [r["texts"] for r in rows] == [["t6"], ["t5", "t7"], [], ["t5", "t8"], ["t5"]]
    assert [r["delta"] for r in rows] == [0.25, -0.25, -0.125, 0.125, 0.0]
    assert [r["depth"] for r in rows] == [1, 2, 0, 2, 1]
    assert [(r["w_before"], r["w_after"]) for r in rows] == [(0.25, 0.5), (0.25, 0.0), (0.25, 0.125), (0.0, 0.125),
                                                            (0.25, 0.25)]
    # Node ids on each side, None where the path is in one tree only.
    assert [(r["node_before"], r["node_after"]) for r in rows] == [(3, 1), (2, None), (0, 0), (None, 3), (1, 2)]
    # Both trees' w sum to 1, so the changes sum to 0.
    assert sum(r["delta"] for r in rows) == pytest.approx(0.0)


def test_a_tree_against_itself_moves_nothing():
    rows = exit_mass_changes(BEFORE, BEFORE)
    assert len(rows) == BEFORE.size and all(r["delta"] == 0.0 for r in rows)
    assert all(r["node_before"] == r["node_after"] for r in rows)


@pytest.fixture(scope="module")
def pair():
    return tiny_pair("llama", seed=3)


CONTEXT = [4, 9, 17, 2, 30]
BUILDER = BuilderConfig(budget=6, depth=3, children=3)


def test_the_weighted_tree_is_scored_by_the_target_and_exits_at_its_largest_w(pair):
    r = weighted_tree(pair, pair.draft, CONTEXT, BUILDER, index=7, temperature=0.5)
    assert (r.index, r.verifier, r.tokens[0]) == (7, "ExitTrain", CONTEXT[-1])
    assert 2 <= r.size <= 7
    # P of a root's child is the target's probability of its token after the context, at the temperature.
    with torch.no_grad():
        logits = pair.target(torch.tensor([CONTEXT], device=pair.target.device)).logits[0, -1].double()
    probs = torch.softmax(logits / 0.5, -1)
    children = [v for v in range(r.size) if r.parents[v] == 0]
    assert [r.P[v] for v in children] == pytest.approx([float(probs[r.tokens[v]]) for v in children], abs=1e-5)
    assert r.w[0] == pytest.approx(1 - sum(float(probs[r.tokens[v]]) for v in children), abs=1e-5)
    assert sum(r.w) == pytest.approx(1.0, abs=1e-5)
    # No verifier draw: the exit is the node of largest w, the bonus its best missing token.
    assert r.w[r.exit_node] == max(r.w) and r.accepted == r.path_to(r.exit_node)
    best = max(r.missing[r.exit_node], key=lambda m: m["gain"])
    assert (r.bonus_token, r.bonus_text) == (best["token_id"], best["text"])


def test_the_move_compares_the_two_drafters_trees_on_one_context(pair):
    same = exit_mass_move(pair, pair.draft, CONTEXT, BUILDER, index=2)
    assert same.round_index == 2 and same.before == same.after
    assert all(c["delta"] == 0.0 for c in same.changes)
    # The target as its own drafter: another tree, scored the same way.
    other = exit_mass_move(pair, pair.target, CONTEXT, BUILDER, index=2)
    assert other.before == same.before
    assert other.after == weighted_tree(pair, pair.target, CONTEXT, BUILDER, 2)
    assert other.changes == exit_mass_changes(other.before, other.after)
