"""The residual-distillation objective (SPEC section 5, ours): each node's law is pulled toward p_v_res, the target's
law with the tree's children removed and renormalised by rho(v), weighted by w(v)."""

from __future__ import annotations

import torch
from conftest import tiny_pair

from tevviz.engine import BuilderConfig
from tevviz.engine.draft.drafters import tree_for
from tevviz.engine.train.exittrain import exit_loss_terms, target_weights, tree_logits


def test_residual_objective_uses_the_renormalised_residual_law():
    pair = tiny_pair("llama", seed=4)
    context = [5, 9, 17, 33, 2, 40]
    tree = tree_for(pair, context, BuilderConfig(budget=12, depth=3, children=3, width=4))
    ex, probs = target_weights(pair.target, context, tree, temperature=1.0)
    with torch.no_grad():
        got = exit_loss_terms(pair.draft, context, tree, ex, probs, "residual")
        logq = torch.log_softmax(tree_logits(pair.draft, context[:-1], tree).float(), dim=-1)
    # by hand, node by node: p_v without the tokens of v's children, over rho(v)
    want, rows = 0.0, 0
    for v in range(tree.size):
        p = probs[v].clone()
        kids = [u for u in range(1, tree.size) if int(tree.parents[u]) == v]
        p[[int(tree.tokens[u]) for u in kids]] = 0.0
        rho = float(ex.rho[v])
        if rho <= 1e-9:
            continue
        res = p / rho
        assert abs(float(res.sum()) - 1.0) < 1e-4, f"node {v}: the residual law sums to {float(res.sum())}"
        rows += bool(kids)
        want -= float(ex.w[v]) * float((res * logq[v]).sum())
    assert rows >= 2, "the tree must have inner nodes whose residual differs from p_v"
    assert abs(float(got) - want) <= 1e-4 * max(1.0, abs(want)), f"{float(got)} vs {want}"
