"""DDTree's builder (tevviz/engine/draft/ddtree.py): its heap is the top-B prefixes of an independent brute force
(ties included), its tree from logits keeps the best paths, and every fixed-tree verifier follows the exact law on it.

Faults each test was checked against once (planted by hand, then removed):
- the heap pushing a node's next sibling without its rank bump, or never pushing siblings: the brute-force
  comparison fails;
- a bonus token drawn without removing the exit node's children: the law check rejects it.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from test_laws import assert_law, bonus_without_removal, draw, exact_law, law_rejected

from tevviz.engine import SamplingConfig
from tevviz.engine.draft.ddtree import ddtree_heap, ddtree_tree
from tevviz.engine.verify.verifiers import VERIFIERS

pytestmark = pytest.mark.usefixtures("one_thread")


# the builder ---------------------------------------------------------------------------------------------------------


def brute_force_top(lp: list[list[float]], budget: int) -> list[tuple[int, ...]]:
    """Every prefix (as a ranks tuple) sorted by (-sum of log-probs, ranks), the first `budget`."""
    depth, k = len(lp), len(lp[0])
    prefixes = [r for d in range(1, depth + 1) for r in itertools.product(range(k), repeat=d)]
    prefixes.sort(key=lambda r: (-sum(lp[i][x] for i, x in enumerate(r)), r))
    return prefixes[:budget]


@pytest.mark.parametrize("seed", range(12))
def test_ddtree_heap_equals_an_independent_top_b_with_ties(seed):
    """Log-probs on a 0.5 grid (sums exact in floats), so ties are real and fall to the smaller ranks tuple."""
    g = torch.Generator().manual_seed(seed)
    depth, k = int(torch.randint(1, 5, (1,), generator=g)), int(torch.randint(1, 5, (1,), generator=g))
    lp = [sorted((-0.5 * torch.randint(0, 5, (k,), generator=g)).tolist(), reverse=True) for _ in range(depth)]
    budget = int(torch.randint(1, 30, (1,), generator=g))
    pops = ddtree_heap(lp, budget)
    ranks = {0: ()}
    got = []
    for i, (parent, d, r) in enumerate(pops, start=1):
        ranks[i] = ranks[parent] + (r,)
        assert len(ranks[i]) == d
        got.append(ranks[i])
    assert got == brute_force_top(lp, budget)


def test_ddtree_tree_from_logits_is_the_top_b_under_the_marginals():
    g = torch.Generator().manual_seed(3)
    logprobs = torch.log_softmax(torch.randn(4, 7, generator=g) * 2, dim=-1)
    tree, ranks, _ = ddtree_tree(42, logprobs, 20)
    assert tree.size == 21 and tree.tokens[0] == 42
    top = torch.topk(logprobs, 7, dim=-1)
    for v in range(1, tree.size):
        d, r, p = int(tree.depths[v]), int(ranks[v]), int(tree.parents[v])
        assert p < v and int(tree.depths[p]) == d - 1
        assert int(tree.tokens[v]) == int(top.indices[d - 1, r])
        assert float(tree.draft_logprobs[v]) == pytest.approx(float(logprobs[d - 1, tree.tokens[v]]))
        assert float(tree.scores[v]) == pytest.approx(float(tree.scores[p] + tree.draft_logprobs[v]), abs=1e-5)
    # the kept prefixes are the 20 best by path score: none left out scores above the worst kept
    worst = float(tree.scores[1:].min())
    paths = {tuple(int(ranks[u]) for u in _path(tree, v)) for v in range(1, tree.size)}
    lp = top.values.tolist()
    for r in itertools.product(range(7), repeat=2):
        if r not in paths:
            assert lp[0][r[0]] + lp[1][r[1]] <= worst + 1e-6


def _path(tree, v):
    out = []
    while v > 0:
        out.append(v)
        v = int(tree.parents[v])
    return out[::-1]


# laws ----------------------------------------------------------------------------------------------------------------

LAW_SETTINGS = {"t1": SamplingConfig(temperature=1.0), "t0.8-top-p": SamplingConfig(temperature=0.8, top_p=0.9)}


@pytest.mark.parametrize("setting", list(LAW_SETTINGS))
@pytest.mark.parametrize("name", ["tev", "predraw", "residual"])
def test_verifier_law_on_a_ddtree_tree(name, setting):
    """(exit, bonus) over 24,000 draws on a DDTree tree against the exact law w(v) p_v_res(a)."""
    g = torch.Generator().manual_seed(5)
    tree, _, _ = ddtree_tree(0, torch.log_softmax(torch.randn(3, 6, generator=g) * 1.5, dim=-1), 9)
    logits = -2.0 + 1.5 * torch.randn(tree.size, 6, generator=g)
    cfg = LAW_SETTINGS[setting]
    law = exact_law(tree.tokens.tolist(), tree.parents.tolist(), logits, cfg)
    assert_law(draw(VERIFIERS[name], tree, logits, cfg, 24_000, seed=1), law, f"{name} on a DDTree tree")
    if name == "tev":  # the check has power: a bonus drawn without removing the children is rejected
        assert law_rejected(draw(bonus_without_removal, tree, logits, cfg, 24_000, seed=1), law)
