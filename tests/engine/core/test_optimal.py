"""The optimal tree (docs/math.md, *The optimal tree*): the top-B target prefixes, checked by brute force,
against real sessions, and for a session it must leave untouched.

Where it does not bound a round (a sampled chain under speculative sampling), it must not be shown as that round's
ceiling. The test of that was checked to fail against these faults, planted one at a time: every round taken as
bounded by its optimal tree (the drafter gap computed for a sampled chain, and its JSON saying ceiling); the tree
title naming the optimal tree whatever the round; the ghost legend doing the same.
"""

from __future__ import annotations

import copy
import json

import pytest
import torch
from conftest import assert_caches_in_line, random_prompts, tiny_model, tiny_pair, word_tokenizer
from hypothesis import given, settings
from hypothesis import strategies as st

from tevviz.engine.analysis.summary import bounded_rounds, exit_by_depth, summarize
from tevviz.engine.core.optimal import optimal_tree, top_prefixes
from tevviz.engine.core.sampling import SamplingConfig
from tevviz.engine.decode.session import DecodeConfig, DecodeSession
from tevviz.engine.draft.builders import BuilderConfig
from tevviz.engine.load.models import ModelPair
from tevviz.engine.records.io import loads, session_dict
from tevviz.engine.records.records import RoundRecord


class TableTarget:
    """A target given as a table: the next-token law after each token path, random but fixed by a seed."""

    def __init__(self, vocab: int, seed: int, zeros: bool):
        self.vocab, self.seed, self.zeros, self.table = vocab, seed, zeros, {}

    def law(self, path: tuple[int, ...]) -> torch.Tensor:
        if path not in self.table:
            g = torch.Generator().manual_seed(hash((self.seed, path)) % (1 << 31))
            p = torch.rand(self.vocab, generator=g, dtype=torch.float64) ** 3
            if self.zeros:
                p[torch.rand(self.vocab, generator=g) < 0.3] = 0.0
                p[int(torch.randint(self.vocab, (1,), generator=g))] += 0.1
            self.table[path] = p / p.sum()
        return self.table[path]

    def expander(self):
        paths: list[tuple[int, ...]] = []

        def expand(requests):
            out = []
            for parent, token, _ in requests:
                path = () if parent is None else paths[parent] + (token,)
                paths.append(path)
                out.append(self.law(path))
            return torch.stack(out)

        return expand

    def brute_force(self, budget: int, depth: int) -> float:
        """The largest coverage over every prefix-closed set of `budget` prefixes of length <= depth."""
        prefixes = {(): 1.0}
        frontier = [()]
        for _ in range(depth):
            nxt = []
            for path in frontier:
                for t, q in enumerate(self.law(path).tolist()):
                    if q > 0:
                        prefixes[path + (t,)] = prefixes[path] * q
                        nxt.append(path + (t,))
            frontier = nxt
        nodes = sorted((p for p in prefixes if p), key=len)  # parents before children
        index = {p: i for i, p in enumerate(nodes)}
        best = 0.0

        def grow(start: int, chosen: set, mass: float) -> None:
            # Every prefix-closed set, once: nodes added in index order, each only after its parent.
            nonlocal best
            best = max(best, mass)
            if len(chosen) == budget:
                return
            for i in range(start, len(nodes)):
                p = nodes[i]
                if len(p) == 1 or index[p[:-1]] in chosen:
                    grow(i + 1, chosen | {i}, mass + prefixes[p])

        grow(0, frozenset(), 0.0)
        return best


@settings(max_examples=60, deadline=None)
@given(vocab=st.integers(2, 4), depth=st.integers(1, 3), budget=st.integers(1, 5), seed=st.integers(0, 10_000),
       zeros=st.booleans())
def test_top_prefixes_is_the_brute_force_optimum(vocab, depth, budget, seed, zeros):
    target = TableTarget(vocab, seed, zeros)
    tok, par, dep, P, passes = top_prefixes(target.expander(), budget, depth)
    assert abs(sum(P[1:]) - target.brute_force(budget, depth)) < 1e-12
    assert len(tok) - 1 <= budget and max(dep) <= depth and passes <= depth
    for v in range(1, len(tok)):
        assert 0 <= par[v] < v and dep[v] == dep[par[v]] + 1  # prefix-closed, parents first
        path = []
        u = v
        while u > 0:
            path.append(tok[u])
            u = par[u]
        step_probs = [float(target.law(tuple(path[::-1][:i]))[t]) for i, t in enumerate(path[::-1])]
        assert abs(P[v] - torch.prod(torch.tensor(step_probs, dtype=torch.float64))) < 1e-12
    siblings = {(par[v], tok[v]) for v in range(1, len(tok))}
    assert len(siblings) == len(tok) - 1, "siblings must carry distinct tokens"


def test_top_prefixes_of_a_bigger_vocabulary_matches_a_flat_ranking():
    """Vocabulary 6, depth 4, B = 12: the kept set is exactly the 12 largest P over all prefixes (no ties here)."""
    target = TableTarget(6, 3, zeros=False)
    _tok, _par, _dep, P, _ = top_prefixes(target.expander(), 12, 4)
    everything = []
    frontier = [((), 1.0)]
    for _ in range(4):
        frontier = [(path + (t,), q * pq) for path, q in frontier for t, pq in enumerate(target.law(path).tolist())]
        everything += [q for _, q in frontier]
    assert sorted(P[1:], reverse=True) == pytest.approx(sorted(everything, reverse=True)[:12], abs=1e-15)


@pytest.fixture(scope="module")
def pair():
    return tiny_pair("llama", seed=4)


def _snapshot(s: DecodeSession):
    layers = lambda c: [(l.keys.clone(), l.values.clone()) for l in c.layers if l.is_initialized]
    return (layers(s.target_cache), layers(s.drafter.cache), list(s.drafter.pending), s.round_count,
            s.gen.get_state().clone(), list(s.generated))


# The tiny target is nearly flat at T = 1 (its optimal trees are one level deep); at T = 0.3 they branch and deepen.
@pytest.mark.parametrize("temperature,top_p", [(0.3, 1.0), (0.3, 0.9), (0.0, 1.0)])
def test_optimal_beats_every_draft_tree_and_leaves_the_session_alone(pair, temperature, top_p):
    sampling = SamplingConfig(temperature=temperature, top_p=top_p)
    cfg = DecodeConfig(sampling=sampling, builder=BuilderConfig(budget=10, depth=4, children=3, width=4),
                       max_new_tokens=24, seed=5, stop_on_eos=False)
    s = DecodeSession(pair, random_prompts(1, 11)[0], cfg)
    while not s.done:
        s.step()
        before = _snapshot(s)
        record = s.optimal()
        after = _snapshot(s)
        for a, b in zip(before[:2], after[:2]):
            assert all(torch.equal(x, y) for (x, _), (y, _) in zip(a, b)) and all(
                torch.equal(x, y) for (_, x), (_, y) in zip(a, b))
        assert before[2:4] == after[2:4] and torch.equal(before[4], after[4]) and before[5] == after[5]
        assert_caches_in_line(pair, s)
        opt, gap = record.optimal, record.coverage_gap()
        assert s.rounds[-1] is record and opt.tokens[0] == record.tokens[0]
        assert len(opt.tokens) - 1 <= record.size - 1 and max(opt.depths) <= 4
        assert all(0 <= opt.parents[v] < v for v in range(1, len(opt.tokens)))
        assert gap.C_p_star >= gap.C_p - 1e-6, f"round {record.index}: C_p* {gap.C_p_star} < C_p {gap.C_p}"
        assert 0 <= gap.held <= 1 + 1e-9
        if temperature == 0:
            # Greedy: the optimal tree is the target's own chain, and the round accepts its prefix.
            assert opt.C_p == pytest.approx(len(opt.tokens) - 1)
            assert [opt.tokens[v] for v in range(1, record.block_length)] == record.committed[:record.block_length - 1]
    assert s.rounds and all(r.optimal is not None for r in s.rounds)
    assert max(max(r.optimal.depths) for r in s.rounds) >= 2


def test_optimal_tree_agrees_with_a_fresh_prefill_and_with_rescoring(pair):
    """Computed on the session's cache or from the raw context, the same tree; its P are the target's."""
    cfg = DecodeConfig(sampling=SamplingConfig(temperature=0.3), builder=BuilderConfig(budget=8, depth=3),
                       max_new_tokens=12, seed=1)
    s = DecodeSession(pair, random_prompts(1, 2)[0], cfg)
    s.run(2)
    record = s.optimal(0)
    assert max(record.optimal.depths) >= 2, "a flat optimal tree would not test the ancestor mask"
    start, _ = s._round_at[0]
    fresh = optimal_tree(pair.target, pair.tokenizer, s.tokens[:start], cfg.sampling, record.size - 1, 3)
    assert fresh.tokens == record.optimal.tokens and fresh.parents == record.optimal.parents
    assert fresh.P == pytest.approx(record.optimal.P, abs=1e-6)
    from tevviz.engine.core.scoring import rescore

    as_round = RoundRecord.unscored(0, "tev", fresh.tokens, fresh.parents, fresh.depths)
    scored = rescore(pair, s.tokens[: start - 1], as_round, cfg.sampling)
    assert scored.P == pytest.approx(fresh.P, abs=1e-6)


def test_a_drafter_equal_to_the_target_has_no_gap():
    """Draft = target at T = 1 with K and W large enough: best-first by draft score is the optimal tree."""
    target = tiny_model("qwen2", 7, scale=20.0)  # sharp at T = 1, so that the trees branch and go deep
    pair = ModelPair(target, copy.deepcopy(target), word_tokenizer(), "t", "t")
    cfg = DecodeConfig(sampling=SamplingConfig(temperature=1.0), max_new_tokens=20, seed=3,
                       builder=BuilderConfig(budget=12, depth=4, children=12, width=12), optimal=True,
                       stop_on_eos=False)
    s = DecodeSession(pair, random_prompts(1, 5)[0], cfg)
    gaps = [s.step().coverage_gap() for _ in range(4)]
    assert max(max(r.optimal.depths) for r in s.rounds) >= 2
    for g in gaps:
        assert abs(g.gap) < 1e-6 and not g.ghosts and g.held == pytest.approx(1.0, abs=1e-6)


def test_ghosts_hang_under_the_deepest_draft_node_on_their_path(pair):
    cfg = DecodeConfig(sampling=SamplingConfig(temperature=0.3), max_new_tokens=30, seed=2, optimal=True,
                       builder=BuilderConfig(budget=6, depth=3, children=2, width=2), stop_on_eos=False)
    s = DecodeSession(pair, random_prompts(1, 9)[0], cfg)
    records = s.run()
    ghosts = [(r, g) for r in records for g in r.coverage_gap().ghosts]
    assert ghosts, "a perturbed drafter of budget 6 should miss some optimal node"
    for r, g in ghosts:
        opt = r.optimal
        path = opt.token_path(g.node)
        assert path not in {r.token_path(v) for v in range(r.size)}
        anchor_path = r.token_path(g.anchor)
        assert path[: len(anchor_path)] == anchor_path and len(anchor_path) < len(path)
        assert g.parent_ghost is None or opt.parents[g.node] == g.parent_ghost
        gap = r.coverage_gap()
        held = sum(opt.P[v] for v in range(1, len(opt.tokens)) if opt.token_path(v) in
                   {r.token_path(u) for u in range(r.size)})
        assert gap.held * gap.C_p_star == pytest.approx(held)


def test_optimal_trees_travel_in_the_session_json_and_old_files_still_import(pair):
    cfg = DecodeConfig(sampling=SamplingConfig(temperature=1.0), max_new_tokens=10, seed=0, optimal=True)
    s = DecodeSession(pair, [1, 2, 3], cfg)
    s.run()
    text = json.dumps(session_dict({}, "p", s.prompt_ids, s.generated, "", s.rounds))
    back = loads(text)
    assert [r.optimal for r in back.rounds] == [r.optimal for r in s.rounds]
    assert summarize(back.rounds).mean_optimal == pytest.approx(summarize(s.rounds).mean_optimal)
    old = json.loads(text)
    old["schema"] = "tevviz.session/1"
    for r in old["rounds"]:
        del r["graph"]["optimal"]
    assert all(r.optimal is None for r in loads(json.dumps(old)).rounds)
    broken = json.loads(text)
    broken["rounds"][0]["graph"]["optimal"]["nodes"][1]["parent"] = 5
    with pytest.raises(Exception, match=r"rounds\[0\]\.graph\.optimal"):
        loads(json.dumps(broken))


def test_exit_mass_by_depth_splits_width_from_leaves(pair):
    cfg = DecodeConfig(sampling=SamplingConfig(temperature=1.0), max_new_tokens=16, seed=0,
                       builder=BuilderConfig(budget=8, depth=3))
    s = DecodeSession(pair, [4, 5], cfg)
    records = s.run()
    for r in records:
        width, leaf = r.exit_by_depth()
        assert sum(width) + sum(leaf) == pytest.approx(1.0, abs=1e-6)  # the exit law sums to one
        leaves = set(range(r.size)) - set(r.parents)
        assert sum(leaf) == pytest.approx(sum(r.w[v] for v in leaves))
    split = exit_by_depth(records)
    assert sum(split["width"]) + sum(split["leaf"]) == pytest.approx(1.0, abs=1e-6)


def test_the_optimal_tree_is_no_ceiling_for_a_sampled_chain_and_says_so():
    """Speculative sampling accepts with min(1, p / q), not P: with the draft equal to the target it takes whole
    chains, so L passes 1 + C_p*(B), the best fixed tree of the same budget. Such rounds name C_p* the best fixed
    tree of B (tree title, ghost legend, statistics, JSON) and have no drafter gap; a TEV round keeps its ceiling."""
    from tevviz.app.state import AppState
    from tevviz.app.views import stats_markdown, tree_plot

    target = tiny_model("llama", 0)
    pair = ModelPair(target, copy.deepcopy(target), word_tokenizer(), "t", "t")
    common = {"sampling": SamplingConfig(temperature=1.0), "seed": 0, "optimal": True, "stop_on_eos": False,
              "missing_top": 0}
    s = DecodeSession(pair, [5, 6, 7], DecodeConfig(builder=BuilderConfig(name="sampled", depth=4),
                                                    verifier="speculative", max_new_tokens=40, **common))
    s.run()
    drafted = [r for r in s.rounds if r.size > 1]
    tau = sum(r.block_length for r in drafted) / len(drafted)
    star = sum(1 + r.optimal.C_p for r in drafted) / len(drafted)
    assert tau > star + 1, f"test setup: tau {tau:.2f} should pass the fixed-tree 1 + C_p* {star:.2f}"
    for r in drafted:
        gap = r.coverage_gap()
        assert not r.optimal_bounds and not gap.bounds and gap.gap is None
        assert r.to_dict()["graph"]["optimal"]["ceiling"] is False
    assert summarize(drafted).mean_gap is None and bounded_rounds(drafted) == 0
    back = loads(json.dumps(session_dict({}, "p", s.prompt_ids, s.generated, "", s.rounds))).rounds
    assert [r.coverage_gap().bounds for r in back] == [r.coverage_gap().bounds for r in s.rounds]

    view = s.rounds.index(max(drafted, key=lambda r: len(r.coverage_gap().ghosts)))
    st = AppState(rounds=s.rounds, view=view, ghosts=True)
    fig = tree_plot(st, "P", as_dict=True)
    title = fig["layout"]["title"]["text"]
    B = s.rounds[view].size - 1
    assert f"best fixed tree of B = {B}: 1 + C_p* = " in title and "optimal 1 + C_p*" not in title, title
    assert "E[L] = " in title  # its own expectation, from the acceptances
    names = {t.get("name") for t in fig["data"]}
    assert s.rounds[view].coverage_gap().ghosts, "test setup: the chain misses some of the fixed tree's nodes"
    assert "ghost branches (best fixed tree, not a ceiling here)" in names
    assert "ghost branches (optimal tree)" not in names
    table = stats_markdown(st)
    assert f"1 + C_p* (best fixed tree of B = {B}, not a ceiling)" in table and "mean drafter gap (0 rounds)" in table

    tev = DecodeSession(pair, [5, 6, 7], DecodeConfig(builder=BuilderConfig(budget=4, depth=4), max_new_tokens=8,
                                                      **common))
    r = tev.step()
    assert r.optimal_bounds and r.coverage_gap().gap == pytest.approx(r.optimal.C_p - r.C_p)
    assert r.to_dict()["graph"]["optimal"]["ceiling"] is True
    title = tree_plot(AppState(rounds=[r], view=0, ghosts=True), "P", as_dict=True)["layout"]["title"]["text"]
    assert "optimal 1 + C_p* = " in title and "best fixed tree" not in title
