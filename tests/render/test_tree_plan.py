"""The tree drawing's plan (render/tree_plan.py): no two labels overlap, what must be labelled is, nothing is lost."""

from __future__ import annotations

import itertools

import networkx as nx
from hypothesis import given, settings
from hypothesis import strategies as st

from tevviz.render.labels import fit_label, label_px, token_label
from tevviz.render.tree_plan import LABEL_GAP, more_node, plan_tree

WORDS = [" the", "StreamReader", "<|endoftext|>", "#####", "\n", " ", "x", "数据", "(", "    return"]


@st.composite
def trees(draw, max_nodes=300):
    n = draw(st.integers(2, max_nodes))
    # Wide and shallow as often as deep: a parent among the first few nodes or any earlier one.
    parents = [None] + [draw(st.integers(0, min(v - 1, draw(st.sampled_from([3, 10, 10_000]))))) for v in range(1, n)]
    G = nx.DiGraph()
    for v in range(n):
        G.add_node(v, score=-float(v))
        if parents[v] is not None:
            G.add_edge(parents[v], v)
    texts = {v: token_label(WORDS[draw(st.integers(0, len(WORDS) - 1))]) for v in range(n)}
    leaf = draw(st.integers(0, n - 1))
    path = [leaf]
    while parents[path[-1]] is not None:
        path.append(parents[path[-1]])
    must = set(path) | set(G.successors(leaf))
    room = draw(st.sampled_from([300, 640, 900, 1400]))
    return G, parents, texts, must, room


def label_boxes(plan):
    """(left, right, row) of every label drawn."""
    return [(x - label_px(plan.text[v]) / 2, x + label_px(plan.text[v]) / 2, y)
            for v, (x, y) in plan.pos.items() if v in plan.text]


@settings(max_examples=60, deadline=None)
@given(trees())
def test_labels_never_overlap_must_labels_stay_and_every_node_is_drawn_or_folded(case):
    G, parents, texts, must, room = case
    rank = sorted(G, key=lambda v: (v * 7919) % 101)
    plan = plan_tree(G, texts, must, rank, lambda v: (-v,), room)
    boxes = sorted(label_boxes(plan), key=lambda b: (b[2], b[0]))
    for a, b in itertools.pairwise(boxes):
        if a[2] == b[2]:
            assert a[1] + LABEL_GAP / 2 <= b[0] + 1e-6, (a, b)
    for v in must:
        assert v in plan.pos and plan.text.get(v), v
    behind = {c for kids in plan.folded.values() for c in kids}
    for u in plan.folded:
        assert more_node(u) in plan.pos
    for v in G:
        chain = [v]
        while parents[chain[-1]] is not None:
            chain.append(parents[chain[-1]])
        assert v in plan.pos or any(c in behind for c in chain), v
    xs = [x for x, _ in plan.pos.values()]
    assert min(xs) >= 0 and max(xs) <= plan.width + 1e-6


def test_a_tree_that_fits_folds_nothing_and_labels_everything():
    G = nx.DiGraph([(0, 1), (0, 2), (1, 3)])
    texts = {v: f"t{v}" for v in G}
    plan = plan_tree(G, texts, {0}, list(G), lambda v: (0,), 900)
    assert plan.folded == {} and set(plan.text) == set(G)
    assert plan.pos[0][0] == (plan.pos[1][0] + plan.pos[2][0]) / 2 or plan.pos[0][1] == 0


def test_the_lightest_siblings_fold_first_and_a_fold_holds_at_least_two():
    G = nx.DiGraph([(0, c) for c in range(1, 41)])
    texts = {v: "wordy" for v in G}
    mass = {v: (float(v),) for v in G}  # node 1 lightest
    plan = plan_tree(G, texts, {0, 40}, sorted(G, key=lambda v: -v), lambda v: mass[v], 400)
    (kids,) = plan.folded.values()
    assert len(kids) >= 2 and max(kids) < min(v for v in G if v in plan.pos and v != 0)
    assert plan.text[more_node(0)] == f"+{len(kids)}"


def test_an_expanded_parent_never_folds_and_the_drawing_grows_instead():
    G = nx.DiGraph([(0, c) for c in range(1, 41)])
    texts = {v: "wordy" for v in G}
    plan = plan_tree(G, texts, {0}, list(G), lambda v: (0,), 400, expanded={0})
    assert plan.folded == {} and all(v in plan.pos for v in G) and plan.width > 400


def test_fold_by_mass_hides_the_light_subtrees_with_room_to_spare_and_folds_nothing_else():
    #      0
    #   1     2 (light)     3 (light)
    #  4 5    6             7 (light)
    G = nx.DiGraph([(0, 1), (0, 2), (0, 3), (1, 4), (1, 5), (2, 6), (3, 7)])
    texts = {v: f"t{v}" for v in G}
    plan = plan_tree(G, texts, {0}, list(G), lambda v: (0,), 1400, hidden={2, 3, 7, 6})
    assert plan.folded == {0: [2, 3]}  # 6 and 7 go with their parents, no fold of their own
    assert set(plan.pos) - {more_node(0)} == {0, 1, 4, 5} and plan.text[more_node(0)] == "+2"
    # A lone light child folds too: "+1" stands for its subtree.
    assert plan_tree(G, texts, {0}, list(G), lambda v: (0,), 1400, hidden={5}).folded == {1: [5]}
    # Nothing heavy folds for room, however narrow: the drawing grows (the view scrolls).
    wide = nx.DiGraph([(0, c) for c in range(1, 41)])
    plan = plan_tree(wide, {v: "wordy" for v in wide}, {0}, list(wide), lambda v: (0,), 300, hidden=set())
    assert plan.folded == {} and all(v in plan.pos for v in wide) and plan.width > 300


def test_an_opened_mass_fold_shows_its_children_a_must_node_never_folds_and_its_light_children_stay_folded():
    G = nx.DiGraph([(0, 1), (0, 2), (0, 3), (1, 4), (2, 6), (2, 8), (3, 7)])
    texts = {v: f"t{v}" for v in G}
    plan = plan_tree(G, texts, {0}, list(G), lambda v: (0,), 1400, expanded={0}, hidden={2, 3, 6, 8})
    assert {1, 2, 3, 7} <= set(plan.pos) and plan.folded == {2: [6, 8]}
    assert ("less", 0) in plan.pos  # the "−" that folds them again
    # The accepted path (a must node) keeps its light nodes drawn, and their ancestors.
    plan = plan_tree(G, texts, {0, 2, 6}, list(G), lambda v: (0,), 1400, hidden={2, 3, 6, 8})
    assert {2, 6} <= set(plan.pos) and plan.folded == {0: [3], 2: [8]}


def test_fit_label_shortens_with_an_ellipsis_or_gives_up():
    assert fit_label("StreamReader", 1000) == "StreamReader"
    short = fit_label("StreamReader", label_px("Stream…"))
    assert short == "Stream…" and label_px(short) <= label_px("Stream…")
    assert fit_label("StreamReader", 3) is None
    assert token_label(" a\n\tb") == "⎵a↵⇥b" and token_label("") == "∅"


def test_whitespace_siblings_that_differ_in_count_stay_apart_when_cut():
    """Indentation and blank-line tokens: a run of three or more in a token of whitespace alone is its count, so
    siblings cut to the same room still differ; beside other characters a count would misread ("   1")."""
    siblings = ["    ", "        ", "\n\n\n", "\n\n\n\n", "\n\n", " \n"]
    labels = [token_label(t) for t in siblings]
    assert labels == ["⎵×4", "⎵×8", "↵×3", "↵×4", "↵↵", "⎵↵"]
    room = label_px("⎵×4")
    assert len({fit_label(label, room) for label in labels}) == len(labels)
    assert token_label("   1") == "⎵⎵⎵1" and token_label("\t\t\tx") == "⇥⇥⇥x"
    assert token_label("\n\n   ") == "↵↵⎵×3"


def test_must_labels_are_cut_only_as_far_as_the_room_needs():
    """A fan of 20 children that must be labelled (an exit at the root) in 900 px: each keeps the most characters
    that fit, not the last resort's "⎵…"."""
    G = nx.DiGraph([(0, v) for v in range(1, 21)])
    for v in G:
        G.nodes[v]["score"] = -float(v)
    texts = {v: token_label(" stringvalue") for v in G}
    plan = plan_tree(G, texts, set(G), list(G), lambda v: (-v,), 900)
    kids = [plan.text[v] for v in range(1, 21)]
    assert len(set(kids)) == 1 and kids[0].endswith("…") and len(kids[0]) > 3, kids
    assert plan.width <= 900 + 1e-6
    wider = kids[0][:-1] + "stringvalue"[len(kids[0]) - 2] + "…"  # one character more would not fit
    assert 20 * (label_px(wider) + LABEL_GAP) > 900
