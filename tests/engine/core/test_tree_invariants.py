"""Property tests: the exit law on random trees and the draft-tree builders.

The laws are those of docs/math.md, *The exit law* and *Draft trees*.
"""

from __future__ import annotations

import itertools
import json
import math

import pytest
import torch
from conftest import VOCAB, tiny_model, tiny_pair
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tevviz.engine import BuilderConfig, DecodeConfig, DecodeSession, SamplingConfig, TevvizError
from tevviz.engine.core import exit_law as law
from tevviz.engine.core.kv import new_cache
from tevviz.engine.core.sampling import edge_probs, processed_probs
from tevviz.engine.core.tree import DraftTree, ancestor_mask, children, from_parents, path_to, position_ids
from tevviz.engine.draft.builders import build_tree

pytestmark = pytest.mark.usefixtures("one_thread")

V = 16


@st.composite
def random_trees(draw, max_nodes: int = 14):
    """(tree, logits): parents before children, distinct sibling tokens, logits of varied sharpness."""
    n = draw(st.integers(1, max_nodes))
    parents = [-1] + [draw(st.integers(0, v - 1)) for v in range(1, n)]
    vocab = max(V, max_nodes)  # room for distinct tokens under a root with every other node as its child
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    tokens = [int(torch.randint(vocab, (1,), generator=g))]
    taken: dict[int, set[int]] = {}
    for v in range(1, n):
        free = [t for t in range(vocab) if t not in taken.setdefault(parents[v], set())]
        tokens.append(free[int(torch.randint(len(free), (1,), generator=g))])
        taken[parents[v]].add(tokens[-1])
    logits = torch.randn(n, vocab, generator=g) * draw(st.sampled_from([0.3, 1.0, 3.0, 10.0]))
    if draw(st.booleans()):  # put most of each parent's mass on its children, as a good draft would
        for v in range(1, n):
            logits[parents[v], tokens[v]] += 4.0
    return from_parents(tokens, parents), logits


SAMPLINGS = st.sampled_from([
    SamplingConfig(1.0), SamplingConfig(0.0), SamplingConfig(0.7, top_k=3), SamplingConfig(1.2, top_p=0.8),
    SamplingConfig(0.5, top_k=5, top_p=0.9),
])


def naive_ancestors(parents: list[int]) -> list[list[bool]]:
    n = len(parents)
    out = [[False] * n for _ in range(n)]
    for i in range(n):
        j = i
        while j >= 0:
            out[i][j] = True
            j = parents[j]
    return out


@settings(max_examples=150, deadline=None)
@given(random_trees(), SAMPLINGS)
def test_exit_law_identities(tree_logits, cfg):
    tree, logits = tree_logits
    probs = processed_probs(logits, cfg)
    ex = law.exit_law(tree, probs)
    parents, tokens, depths = tree.parents.tolist(), tree.tokens.tolist(), tree.depths.tolist()
    n = tree.size
    # P by its recursion, node by node.
    P = [1.0] * n
    for v in range(1, n):
        P[v] = P[parents[v]] * float(probs[parents[v], tokens[v]])
    assert ex.P.tolist() == pytest.approx(P, abs=1e-6)
    w = ex.w.tolist()
    assert min(w) >= 0.0
    assert sum(w) == pytest.approx(1.0, abs=1e-5), "Lemma 1: the exit law sums to 1"
    kids = children(tree)
    for v in range(n):
        assert w[v] + sum(P[u] for u in kids[v]) == pytest.approx(P[v], abs=1e-5), f"w(v) + sum P(children) at {v}"
        if not kids[v]:
            assert float(ex.rho[v]) == 1.0 and w[v] == pytest.approx(P[v], abs=1e-7), "a leaf exits with all its mass"
    C_p = float(ex.C_p)
    assert C_p == pytest.approx(sum(P[1:]), abs=1e-5)
    assert C_p == pytest.approx(sum(wv * d for wv, d in zip(w, depths)), rel=1e-5, abs=1e-5)
    # The subtree of u carries P(u) of exit mass.
    anc = naive_ancestors(parents)
    for u in range(n):
        assert sum(w[v] for v in range(n) if anc[v][u]) == pytest.approx(P[u], abs=1e-5)
    # Missing tokens: their gains P(v) p_v(a), a not in A(v), add up to w(v) (paper eq. 12-13).
    gains, ids = law.missing_tokens(tree, probs, ex.P, k=probs.shape[-1])
    for v in range(n):
        assert not set(ids[v][gains[v] > 0].tolist()) & {tokens[u] for u in kids[v]}
        if float(ex.rho[v]) > 0:
            assert float(gains[v].sum()) == pytest.approx(w[v], abs=1e-5)
    # TEV's route (edge probabilities only) gives the same law as the full rows.
    edge = torch.ones(n)
    edge[1:] = edge_probs(logits, tree.parents[1:], tree.tokens[1:], cfg)
    assert torch.allclose(law.exit_law_from_edges(tree, edge).w, ex.w, atol=1e-6)


@settings(max_examples=150, deadline=None)
@given(random_trees(max_nodes=24))
def test_tree_structure_functions(tree_logits):
    tree, _ = tree_logits
    parents = tree.parents.tolist()
    n = tree.size
    assert ancestor_mask(tree).tolist() == naive_ancestors(parents)
    kids = children(tree)
    assert sorted(u for ks in kids for u in ks) == list(range(1, n))
    assert all(parents[u] == v for v, ks in enumerate(kids) for u in ks)
    for v in range(n):
        path = path_to(tree, v)
        assert path[0] == 0 and path[-1] == v and len(path) == int(tree.depths[v]) + 1
        assert all(parents[b] == a for a, b in itertools.pairwise(path))
    assert position_ids(tree, 7).tolist() == [[7 + d for d in tree.depths.tolist()]]


@pytest.mark.parametrize("n", [1, 2, 3, 5, 9])
def test_a_chains_ancestor_mask_is_causal_and_a_tree_as_deep_as_a_chain_is_one(n):
    """A tree with one node a level takes the chain's short cut; a tree as deep but with a branch does not."""
    chain = from_parents(list(range(n)), [-1] + list(range(n - 1)))
    assert ancestor_mask(chain).tolist() == naive_ancestors([-1] + list(range(n - 1)))
    if n >= 3:  # one node fewer than a chain's depth: node 2 hangs off the root beside node 1
        parents = [-1, 0, 0] + list(range(2, n - 1))
        assert ancestor_mask(from_parents(list(range(n)), parents)).tolist() == naive_ancestors(parents)


def test_from_parents_rejects_bad_orders():
    for tokens, parents in (([], []), ([1, 2], [0, -1]), ([1, 2, 3], [-1, 2, 0]), ([1, 2], [-1, 1])):
        with pytest.raises(ValueError):
            from_parents(tokens, parents)


# ---------------------------------------------------------------------------------------------------- builders

_PAIR = []


def draft_model():
    if not _PAIR:
        _PAIR.append(tiny_pair("llama", seed=4))
    return _PAIR[0].draft


@st.composite
def builder_configs(draw):
    kind = draw(st.sampled_from(["best-first", "best-first", "static", "chain"]))
    if kind == "best-first":
        return BuilderConfig(name=kind, budget=draw(st.integers(1, 40)), depth=draw(st.integers(1, 6)),
                             children=draw(st.integers(1, 5)), width=draw(st.integers(1, 8)),
                             draft_temperature=draw(st.sampled_from([1.0, 1.0, 0.5, 2.5])))
    if kind == "static":
        return BuilderConfig(name=kind, branching=tuple(draw(st.lists(st.integers(1, 3), min_size=1, max_size=4))))
    return BuilderConfig(name=kind, depth=draw(st.integers(1, 8)))


def generated_count(cfg: BuilderConfig, H: int) -> int:
    """Nodes a builder creates before the final budget cut: frontier f_d expands into f_d * k_d children."""
    total, frontier = 0, 1
    for d in range(1, H + 1):
        k, width = cfg.level(d)
        made = frontier * min(k, VOCAB)
        total += made
        frontier = min(made, width)
    return total


@torch.no_grad()
def causal_logprobs(model, tokens: list[int]) -> torch.Tensor:
    return torch.log_softmax(model(input_ids=torch.tensor([tokens])).logits[0, -1].float(), dim=-1)


@torch.no_grad()
def last_keys(model, tokens: list[int]) -> list[torch.Tensor]:
    cache = new_cache(model)
    model(input_ids=torch.tensor([tokens]), cache=cache, use_cache=True)
    return [layer.keys[..., -1, :] for layer in cache.layers]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cfg=builder_configs(),
    prefix=st.lists(st.integers(0, VOCAB - 1), max_size=5),
    pending=st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=5),
    cap=st.one_of(st.none(), st.integers(0, 8)),
)
def test_builder_invariants(cfg, prefix, pending, cap):
    model = draft_model()
    cache = new_cache(model)
    if prefix:
        with torch.no_grad():
            model(input_ids=torch.tensor([prefix]), cache=cache, use_cache=True)
    r = build_tree(model, cache, pending, cfg, cap)
    tree = r.tree
    n = tree.size
    parents, tokens, depths = tree.parents.tolist(), tree.tokens.tolist(), tree.depths.tolist()
    H = cfg.max_depth if cap is None else min(cfg.max_depth, cap)

    assert tokens[0] == pending[-1] and parents[0] == -1 and depths[0] == 0
    assert all(0 <= parents[v] < v for v in range(1, n)), "parents before children (hence closed under ancestors)"
    assert all(depths[v] == depths[parents[v]] + 1 for v in range(1, n))
    assert max(depths) <= H
    kids = children(tree)
    for v in range(n):
        sib = [tokens[u] for u in kids[v]]
        assert len(sib) == len(set(sib)), f"node {v} has repeated child tokens {sib}"

    # Shapes.
    made = generated_count(cfg, H)
    if cfg.name == "best-first":
        assert n - 1 == min(cfg.budget, made)
    elif cfg.name == "chain":
        assert parents == list(range(-1, n - 1)) and n - 1 == H
    else:
        per_depth = [sum(1 for d in depths if d == k) for k in range(H + 1)]
        assert per_depth == [math.prod(cfg.branching[:k]) for k in range(H + 1)]
        assert all(len(kids[v]) == (cfg.branching[depths[v]] if depths[v] < H else 0) for v in range(n))

    # Draft log-probs are the draft's own, under each node's real context; children are its top tokens; a path
    # score adds the draft's log-probs at the builder's draft temperature.
    context = prefix + pending
    step = {}
    for v in {p for p in parents if p >= 0}:
        path = [tokens[u] for u in path_to(tree, v)[1:]]
        lq = causal_logprobs(model, context + path)
        kid_tokens = [tokens[u] for u in kids[v]]
        assert torch.allclose(tree.draft_logprobs[kids[v]], lq[kid_tokens], atol=1e-4)
        top = torch.topk(lq, len(kid_tokens)).indices.tolist()
        assert set(kid_tokens) == set(top), f"children of node {v} are not its top-{len(kid_tokens)} draft tokens"
        tempered = torch.log_softmax(lq / cfg.draft_temperature, dim=-1)
        step.update({u: float(tempered[tokens[u]]) for u in kids[v]})
    scores = tree.scores.tolist()
    for v in range(1, n):
        assert scores[v] == pytest.approx(scores[parents[v]] + step[v], abs=1e-4)
        assert scores[v] <= scores[parents[v]] + 1e-6

    # Draft cache: the pending tokens, then each forwarded node at its slot, with its path's keys.
    assert r.base == len(context)
    slots = r.slots.tolist()
    assert slots[0] == -1
    forwarded = [v for v in range(n) if slots[v] >= 0]
    assert len({slots[v] for v in forwarded}) == len(forwarded)
    assert all(depths[v] < H for v in forwarded), "nodes of the last level are never forwarded"
    assert all(parents[v] == 0 or slots[parents[v]] >= 0 for v in forwarded)
    assert all(slots[parents[v]] >= 0 for v in range(1, n) if parents[v] > 0), (
        "a parent was forwarded to get its children")
    length = cache.get_seq_length()
    assert length >= r.base + 1 + max(slots) and (n - 1 < made or length == r.base + len(forwarded))
    for v in forwarded[:6]:
        want = last_keys(model, context + [tokens[u] for u in path_to(tree, v)[1:]])
        for layer, k in zip(cache.layers, want):
            assert torch.allclose(layer.keys[..., r.base + slots[v], :], k, atol=1e-5)

    # Deterministic: crop back and build again.
    if length > len(prefix):
        cache.crop(len(prefix) - length)  # a negative count: entries removed from the end
    again = build_tree(model, cache, pending, cfg, cap).tree
    for a, b in zip((tree.tokens, tree.parents, tree.depths), (again.tokens, again.parents, again.depths)):
        assert torch.equal(a, b)


def test_draft_temperature_is_checked_and_makes_a_sharp_drafts_tree_shallower():
    for bad in (0, -1.0, True, 100.0, "2"):
        with pytest.raises(TevvizError, match="draft temperature"):
            BuilderConfig(draft_temperature=bad)
    with pytest.raises(TevvizError, match="a sampled chain draws from the decoding's own sampling law"):
        BuilderConfig(name="sampled", depth=3, draft_temperature=2.0)  # it would be ignored: refused instead
    mixed = BuilderConfig(name="mixed", auto=True, draft_temperature=2.0)  # the best-first arm's ranking only
    assert mixed.arm("best-first").draft_temperature == 2.0 and mixed.arm("sampled").draft_temperature == 1.0
    sharp = tiny_model("llama", seed=0, scale=40.0)  # nearly one-hot: at T 1 its best-first tree is deep
    depths = [build_tree(sharp, new_cache(sharp), [1, 2, 3], BuilderConfig(budget=8, depth=6, children=8, width=2,
                                                                         draft_temperature=t)).tree.depths.tolist()
              for t in (1.0, 3.0, 20.0)]
    assert max(depths[0]) >= 3 and max(depths[1]) < max(depths[0]) and depths[2] == [0] + [1] * 8


def test_chain_is_the_greedy_draft_path():
    model = draft_model()
    context = [5, 9, 13]
    r = build_tree(model, new_cache(model), context, BuilderConfig(name="chain", depth=7))
    seq = list(context)
    for _ in range(7):
        seq.append(int(causal_logprobs(model, seq).argmax()))
    assert r.tree.tokens.tolist() == seq[len(context) - 1:]


def test_best_first_keeps_the_best_scores():
    """With a budget below what is drafted, every kept node scores at least as high as a dropped one."""
    model = draft_model()
    full = build_tree(model, new_cache(model), [1, 2, 3], BuilderConfig(budget=1024, depth=4, children=3, width=4)).tree
    cut = build_tree(model, new_cache(model), [1, 2, 3], BuilderConfig(budget=10, depth=4, children=3, width=4)).tree
    assert cut.size == 11
    best = sorted(full.scores[1:].tolist(), reverse=True)[:10]
    assert sorted(cut.scores[1:].tolist(), reverse=True) == pytest.approx(best, abs=1e-6)


def test_best_first_drafts_no_deeper_than_its_budget():
    """A kept tree of B nodes is at most B deep: deeper levels are not drafted, and the tree is the same."""
    model = draft_model()
    for b in (1, 2, 3):
        deep = build_tree(model, new_cache(model), [1, 2, 3], BuilderConfig(budget=b, depth=8, children=3, width=4))
        capped = build_tree(model, new_cache(model), [1, 2, 3], BuilderConfig(budget=b, depth=b, children=3, width=4))
        assert deep.levels == capped.levels == b
        for name in ("tokens", "parents", "depths", "scores"):
            assert torch.equal(getattr(deep.tree, name), getattr(capped.tree, name))


# -------------------------------------------------------------------------------------------- repeated siblings


def test_repeated_sibling_tokens_are_refused():
    """Siblings carry distinct tokens; a tree that repeats one is refused and the message names the nodes.

    The exit law would count the repeated token's mass once per copy: root mass 1/2 on token 5, children
    5 and 5 give C_p = 1 where the truth is 1/2."""
    with pytest.raises(TevvizError, match=r"nodes 1, 3 under node 0 repeat token 5"):
        from_parents([9, 5, 6, 5], [-1, 0, 0, 0])
    with pytest.raises(TevvizError, match=r"nodes 4, 6 under node 2 repeat token 8"):
        from_parents([9, 5, 6, 1, 8, 2, 8], [-1, 0, 0, 1, 2, 2, 2])
    t = torch.tensor
    with pytest.raises(TevvizError, match=r"nodes 1, 2 under node 0 repeat token 3"):
        DraftTree(t([0, 3, 3]), t([-1, 0, 0]), t([0, 1, 1]), torch.zeros(3), torch.zeros(3))
    # Cousins, and a child with its parent's token, are fine.
    from_parents([5, 5, 6, 5, 5], [-1, 0, 0, 1, 2])


def test_import_refuses_repeated_siblings_and_names_the_round():
    from tevviz.engine.records.io import loads, session_dict

    pair = tiny_pair("llama")
    s = DecodeSession(pair, [3, 4, 5], DecodeConfig(sampling=SamplingConfig(0.0), max_new_tokens=12, missing_top=0))
    s.run()
    data = session_dict({}, "", s.prompt_ids, s.generated, "", s.rounds)
    assert len(data["rounds"]) >= 2
    loads(json.dumps(data))  # the real session imports
    nodes = data["rounds"][1]["nodes"]
    kids = [n["id"] for n in nodes if n["parent"] == 0]
    assert len(kids) >= 2, "test setup: the root has two children"
    nodes[kids[1]]["token_id"] = nodes[kids[0]]["token_id"]
    with pytest.raises(TevvizError, match=rf"rounds\[1\]: nodes {kids[0]} and {kids[1]} .*both carry token"):
        loads(json.dumps(data))
    trace = {"node_token_ids": [6, 7, 7], "node_depths": [1, 1, 1], "parents": [-1, -1, -1], "accepted_indices": [0]}
    ok = {"node_token_ids": [6, 7, 8], "node_depths": [1, 1, 1], "parents": [-1, -1, -1], "accepted_indices": [0]}
    with pytest.raises(TevvizError, match=r"trace\[1\]: nodes 2 and 3 \(node_token_ids\[1\] and node_token_ids\[2\]\)"):
        loads(json.dumps([ok, trace]))
