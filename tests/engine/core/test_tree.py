"""The draft tree record and its derived functions (core/tree.py) on trees drawn by hand."""

from __future__ import annotations

import pytest
import torch

from tevviz.engine import TevvizError
from tevviz.engine.core import tree as t
from tevviz.engine.records.records import TreeShapeError

#        0
#      /   \
#     1     2
#     |
#     3
#    / \
#   4   5
PARENTS = [-1, 0, 0, 1, 3, 3]
TOKENS = [9, 4, 5, 4, 7, 8]  # token 4 twice, under different parents: allowed
LOGPROBS = [0.7, -0.5, -1.0, -0.25, -2.0, -0.125]  # the root's entry is ignored
ANC = [  # [i, j]: j is i or an ancestor of i
    [1, 0, 0, 0, 0, 0],
    [1, 1, 0, 0, 0, 0],
    [1, 0, 1, 0, 0, 0],
    [1, 1, 0, 1, 0, 0],
    [1, 1, 0, 1, 1, 0],
    [1, 1, 0, 1, 0, 1],
]


@pytest.fixture
def tree():
    return t.from_parents(TOKENS, PARENTS, LOGPROBS)


def test_from_parents_fills_depths_logprobs_and_path_scores(tree):
    assert tree.tokens.tolist() == TOKENS and tree.parents.tolist() == PARENTS
    assert tree.depths.tolist() == [0, 1, 1, 2, 3, 3]
    assert tree.draft_logprobs.tolist() == [0.0, -0.5, -1.0, -0.25, -2.0, -0.125]
    assert tree.scores.tolist() == [0.0, -0.5, -1.0, -0.75, -2.75, -0.875]
    assert tree.tokens.dtype == torch.long and tree.scores.dtype == torch.float32
    assert tree.size == 6 and tree.device == torch.device("cpu") and tree.draft_probs is None


def test_from_parents_without_logprobs_scores_zero():
    tree = t.from_parents([1, 2], [-1, 0])
    assert tree.draft_logprobs.tolist() == [0.0, 0.0] and tree.scores.tolist() == [0.0, 0.0]


def test_from_parents_refuses_a_bad_shape():
    with pytest.raises(ValueError):
        t.from_parents([1, 2, 3], [-1, 0])
    with pytest.raises(TreeShapeError):
        t.from_parents([1, 2, 3], [-1, 2, 0])  # a parent after its child


def test_repeated_siblings_lists_each_clash_with_all_its_nodes():
    tokens = torch.tensor([0, 5, 6, 5, 7, 5, 5, 6])
    parents = torch.tensor([-1, 0, 0, 0, 1, 0, 4, 4])
    zeros = torch.zeros(8)
    raw = t.DraftTree(tokens, parents, torch.zeros(8, dtype=torch.long), zeros, zeros, check_siblings=False)
    # Token 5 three times under the root; under node 4 tokens 5 and 6 differ; node 4's token 7 is alone.
    assert t.repeated_siblings(raw) == [(0, 5, [1, 3, 5])]
    with pytest.raises(TevvizError, match="nodes 1, 3, 5 under node 0 repeat token 5"):
        t.DraftTree(tokens, parents, torch.zeros(8, dtype=torch.long), zeros, zeros)


def test_repeated_siblings_is_empty_for_distinct_siblings_and_tiny_trees(tree):
    assert t.repeated_siblings(tree) == []
    assert t.repeated_siblings(t.from_parents([3], [-1])) == []
    assert t.repeated_siblings(t.from_parents([3, 3], [-1, 0])) == []  # a child may repeat its parent's token


def test_to_the_same_device_is_the_same_tree(tree):
    assert tree.to("cpu") is tree


def test_ancestor_mask_by_hand(tree):
    assert t.ancestor_mask(tree).int().tolist() == ANC


def test_ancestor_mask_of_a_chain_and_of_the_root_alone():
    assert t.ancestor_mask(t.from_parents([1], [-1])).tolist() == [[True]]
    chain = t.from_parents([1, 2, 3, 4], [-1, 0, 1, 2])
    assert torch.equal(t.ancestor_mask(chain), torch.ones(4, 4, dtype=torch.bool).tril())


@pytest.mark.parametrize("depth", [4, 6])
def test_ancestor_mask_reaches_ancestors_several_doublings_up(depth):
    # A chain with one side node under the root is not a chain, so pointer doubling must reach `depth` levels
    # (a power of two is the case a loop that stops one doubling early misses).
    parents = [-1, *range(depth), 0]
    n = len(parents)
    deep = t.from_parents(list(range(n)), parents)
    want = torch.zeros(n, n, dtype=torch.bool)
    for v in range(n):
        for u in t.path_to(deep, v):
            want[v, u] = True
    assert want[depth].tolist() == [True] * (depth + 1) + [False]  # the walk itself, to be sure of what is compared
    assert torch.equal(t.ancestor_mask(deep), want)


def test_position_ids_are_depth_past_the_cache(tree):
    assert t.position_ids(tree, 10).tolist() == [[10, 11, 11, 12, 13, 13]]


def test_children_and_path_to(tree):
    assert t.children(tree) == [[1, 2], [3], [], [4, 5], [], []]
    assert t.path_to(tree, 5) == [0, 1, 3, 5]
    assert t.path_to(tree, 2) == [0, 2]
    assert t.path_to(tree, 0) == [0]
