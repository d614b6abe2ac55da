"""Two rounds' trees in one shared layout (render/compare_figure.py), on hand-made rounds."""

from __future__ import annotations

import html
import itertools
import random

import networkx as nx
import plotly.graph_objects as go
import pytest

from tevviz.engine.analysis.run_compare import A_ONLY, B_ONLY, BOTH
from tevviz.engine.records.records import RoundRecord, tree_depths
from tevviz.render.compare_figure import (
    LEGEND_ROW,
    PAIR_WIDTH,
    WIDTH,
    legend_rows,
    node_details,
    pair_figure_dicts,
    pair_tree,
    shared_layout,
    side_figure_dicts,
    union_figure_dict,
)
from tevviz.render.labels import label_px
from tevviz.render.layout import edges_cross
from tevviz.render.tree_frame import WIDER


def rec(tokens: list[int], parents: list[int], exit_node: int, bonus: int, w: list[float] | None = None,
        scores: list[float] | None = None) -> RoundRecord:
    n = len(tokens)
    r = RoundRecord.unscored(0, "tev", tokens, parents, tree_depths(parents), texts=[f"t{t}" for t in tokens],
                             exit_node=exit_node, bonus_token=bonus, scores=scores)
    w = w or [1.0 / n] * n
    return RoundRecord(**{**r.__dict__, "bonus_text": f"t{bonus}", "w": w, "P": [1.0] * n, "p_edge": [1.0] * n,
                          "rho": [0.5] * n, "C_p": float(n - 1)})


# A: root -> 5 -> 7, root -> 6; exit 7, bonus 9. B: root -> 5 -> 8, root -> 5 -> 7; exit at the root, bonus 6 (which
# A drafted).
A = rec([1, 5, 6, 7], [-1, 0, 0, 1], exit_node=3, bonus=9, w=[0.0, 0.1, 0.2, 0.7])
B = rec([1, 5, 8, 7], [-1, 0, 1, 1], exit_node=0, bonus=6, w=[0.0, 0.5, 0.1, 0.4])


def positions(fig: dict) -> dict[int, tuple[float, float]]:
    """Union node id -> (x, y) over every node trace of a figure (the bonus traces' None ends left out)."""
    out = {}
    for trace in fig["data"]:
        for v, x, y in zip(trace.get("customdata") or [], trace["x"], trace["y"]):
            if v is not None:
                assert out.setdefault(v, (x, y)) == (x, y)
        if "customdata" in trace and trace.get("mode", "").startswith("markers"):
            assert len(trace["customdata"]) == len(trace["x"])
    return out


def trace(fig: dict, name: str) -> dict:
    (t,) = [x for x in fig["data"] if x["name"] == name]
    return t


def test_union_tree_and_bonus_nodes():
    t = shared_layout(A, B)
    paths = {n.path: n.side for n in t.nodes}
    assert paths == {(): BOTH, (5,): BOTH, (6,): A_ONLY, (5, 7): BOTH, (5, 8): B_ONLY}
    # A's bonus 5 -> 7 -> 9 is drafted by neither: a node of its own; B's bonus 6 is A's drafted node (6,).
    by_path = {n.path: n.id for n in t.nodes}
    assert t.size == 6 and t.bonus == (5, by_path[(6,)]) and t.parents[5] == by_path[(5, 7)]
    assert set(t.pos) == set(range(t.size)) and t.side_of(5) is None


def test_union_figure_marks_each_node_by_side():
    fig = union_figure_dict(A, B, names=("tev", "predraw"))
    ids = {side: trace(fig, name)["customdata"] for side, name in
           ((BOTH, "both"), (A_ONLY, "tev only"), (B_ONLY, "predraw only"))}
    t = shared_layout(A, B)
    assert {side: sorted(v) for side, v in ids.items()} == {
        side: sorted(n.id for n in t.nodes if n.side == side) for side in (BOTH, A_ONLY, B_ONLY)}
    assert trace(fig, "tev only")["marker"]["symbol"] != trace(fig, "predraw only")["marker"]["symbol"]
    assert trace(fig, "tev only")["marker"]["color"] != trace(fig, "predraw only")["marker"]["color"]
    both = trace(fig, "both")
    hover = both["hovertext"][both["customdata"].index(t.nodes[3].id)]  # (5, 7): in both, A's exit
    assert "in both trees" in hover and "tev #3 (accepted)" in hover and "predraw #3:" in hover
    assert "tev #1 (accepted)" in both["hovertext"][both["customdata"].index(1)]
    assert "predraw #1:" in both["hovertext"][both["customdata"].index(1)]  # B exited at its root
    assert "w 0.7" in hover and "w 0.4" in hover
    for name in ("tev's accepted path", "predraw's accepted path", "tev's exit", "predraw's exit", "tev's bonus"):
        trace(fig, name)
    go.Figure(fig)  # plotly's validators accept the dict as written


def test_side_figures_share_every_position_with_the_union_figure():
    fa, fb = side_figure_dicts(A, B, metric="w")
    union = positions(union_figure_dict(A, B))
    pa, pb = positions(fa), positions(fb)
    assert pa == {v: union[v] for v in pa} and pb == {v: union[v] for v in pb}
    # Every drafted node is in both figures (drawn or ringed), and A's bonus, drafted by neither, in A's.
    assert set(pa) == set(range(6)) and set(pb) == set(range(5))
    assert fa["layout"]["xaxis"]["range"] == fb["layout"]["xaxis"]["range"]
    assert fa["layout"]["height"] == fb["layout"]["height"]
    go.Figure(fa), go.Figure(fb)


def test_side_figure_colours_by_one_scale_and_rings_the_other_sides_nodes():
    fa, fb = side_figure_dicts(A, B, names=("A", "B"), metric="w")
    for fig in (fa, fb):
        marker = trace(fig, "in both")["marker"]
        assert (marker["cmin"], marker["cmax"]) == (0.0, 0.7)  # over both trees' w
    t = shared_layout(A, B, WIDTH)
    absent = trace(fa, "only in B (not drafted here)")
    assert absent["customdata"] == [n.id for n in t.nodes if n.side == B_ONLY]
    assert absent["marker"]["symbol"] == "circle-open"
    own = trace(fb, "B only")
    assert own["marker"]["color"] == [0.1] and own["customdata"] == [n.id for n in t.nodes if n.side == B_ONLY]
    # Each figure draws its own accepted path and exit.
    exit_b = next(n.id for n in t.nodes if n.node_b == B.exit_node)
    assert (trace(fb, "exit")["x"][0], trace(fb, "exit")["y"][0]) == t.pos[exit_b]


def test_side_figures_of_one_value_read_from_zero_up_to_it():
    """Every node of both trees at P = 1 (a one-node round): the bar reads 0 to 1, as the Decode tree's does, not the
    0.6 to 1.4 plotly pads one value to."""
    fa, fb = side_figure_dicts(A, B, names=("A", "B"), metric="P")
    for fig in (fa, fb):
        marker = trace(fig, "in both")["marker"]
        assert (marker["cmin"], marker["cmax"]) == (0.0, 1.0)


def test_side_figures_without_metric_colour_by_side_and_bad_metric_raises():
    fa, _ = side_figure_dicts(A, B)
    assert trace(fa, "A only")["marker"]["color"] == "#1f77b4"
    with pytest.raises(ValueError, match="unknown metric"):
        side_figure_dicts(A, B, metric="nope")


def random_tree(rng: random.Random, n: int, vocab: int) -> RoundRecord:
    """A random tree whose siblings have distinct tokens (so token paths are unique)."""
    parents, tokens, used = [-1], [0], {0: set()}
    while len(parents) < n:
        p = rng.randrange(len(parents))
        free = [t for t in range(1, vocab) if t not in used[p]]
        if not free:
            continue
        tok = rng.choice(free)
        used[p].add(tok)
        used[len(parents)] = set()
        parents.append(p)
        tokens.append(tok)
    scores = [0.0] + [-rng.random() * 5 for _ in range(n - 1)]
    exit_node = rng.randrange(n)
    return rec(tokens, parents, exit_node, vocab + 1, scores=scores)


def label_boxes(fig: dict) -> list[tuple[float, float, float]]:
    """(left, right, row) in px of every label the figure draws (labels are one row each, centred over their node)."""
    (labels,) = [t for t in fig["data"] if t["name"] == "labels"]
    return [(x - label_px(html.unescape(text)) / 2, x + label_px(html.unescape(text)) / 2, y)
            for x, y, text in zip(labels["x"], labels["y"], labels["text"])]


def assert_apart(boxes) -> None:
    rows = sorted(boxes, key=lambda b: (b[2], b[0]))
    for a, b in itertools.pairwise(rows):
        assert a[2] != b[2] or a[1] <= b[0] + 1e-6, (a, b)


def assert_rings_inside(fig: dict) -> None:
    """Every ring lies whole inside the axis ranges: x in px (the plan's unit), y in rows of ROW_HEIGHT px at most."""
    lay = fig["layout"]
    (x0, x1), (y0, y1) = lay["xaxis"]["range"], lay["yaxis"]["range"]
    rings = [t for t in fig["data"] if t.get("marker", {}).get("symbol") == "circle-open" and "exit" in t["name"]]
    assert rings
    for t in rings:
        r = t["marker"]["size"] / 2 + t["marker"]["line"]["width"]
        for x, y in zip(t["x"], t["y"]):
            assert x0 <= x - r and x + r <= x1, (t["name"], x, r, x0, x1)
            assert y0 < y < y1


@pytest.mark.parametrize("seed", range(5))
def test_union_layout_of_random_trees_has_no_crossing_edges(seed):
    rng = random.Random(seed)
    a, b = random_tree(rng, 65, 4), random_tree(rng, 65, 4)
    t = shared_layout(a, b, WIDTH)
    drawn = nx.DiGraph([(p, v) for v, p in enumerate(t.parents) if p >= 0 and v in t.pos])
    assert not edges_cross(drawn, t.pos)
    assert len({t.pos[v] for v in t.pos}) == len(t.pos)  # no two nodes on one spot
    # A node not drawn is behind a "+N" fold of a drawn parent (or below one).
    behind = {c for kids in t.plan.folded.values() for c in kids}
    for v in range(t.size):
        while v not in t.pos and v not in behind:
            v = t.parents[v]
        assert v in t.pos or t.parents[v] in t.pos
    fa, fb = side_figure_dicts(a, b, metric="P")
    for fig in (fa, fb):
        assert {v: x for v, x in positions(fig).items() if isinstance(v, int)}.items() <= t.pos.items()


@pytest.mark.parametrize("width", [330, PAIR_WIDTH, WIDTH])
@pytest.mark.parametrize("seed", range(4))
def test_labels_of_every_comparison_figure_never_overlap_and_the_rings_stay_inside(seed, width):
    rng = random.Random(seed)
    a, b = random_tree(rng, 65, 6), random_tree(rng, 40, 6)
    t = shared_layout(a, b, width)
    figs = (union_figure_dict(a, b, tree=t), *side_figure_dicts(a, b, metric="w", tree=t))
    for fig in figs:
        boxes = label_boxes(fig)
        assert len(boxes) >= 10, len(boxes)  # labelled, not bare markers
        assert_apart(boxes)
        assert_rings_inside(fig)
        x0, x1 = fig["layout"]["xaxis"]["range"]
        assert all(x0 <= left and right <= x1 for left, right, _ in boxes)
    # Both accepted paths (the exits with them) are labelled in the union figure.
    labels = trace(figs[0], "labels")
    labelled = set(zip(labels["x"], labels["y"]))
    for r in (a, b):
        for v in r.accepted:
            u = next(n.id for n in t.nodes if n.path == r.token_path(v))
            assert t.pos[u] in labelled, (v, u)


@pytest.mark.parametrize("width", [330, 430, 690])
def test_a_wide_tree_planned_for_half_a_window_folds_rather_than_overlap(width):
    rng = random.Random(7)
    a, b = random_tree(rng, 120, 30), random_tree(rng, 120, 30)
    before, after = pair_figure_dicts(a, b, names=("original", "trained"), metric="w", width=width)
    for d in (before, after):
        assert_apart(label_boxes(d))
        assert_rings_inside(d)
        assert any(tr["name"].startswith("folded") for tr in d["data"])
        assert d["layout"]["meta"] == {"width": width, "clicks": True}
        # Planned for the view's own width: it neither stretches nor, from half a 900 px window up, scrolls (at 330 px
        # the must-labels alone are wider: the drawing grows rather than overlap).
        assert d["layout"]["width"] == width or (width < 400 and d["layout"]["width"] < width * 1.1)
        # A drawing wider than its view says so (a scrollbar may show only while scrolling); one that fits does not.
        said = WIDER in d["layout"].get("title", {}).get("text", "")
        assert said == (d["layout"]["width"] > width), (width, d["layout"]["width"])


def test_pair_figures_for_the_app():
    before, after = pair_figure_dicts(A, B, names=("original", "trained"), titles=("before", "after"))
    assert before["layout"]["title"]["text"] == "before" and before["layout"]["meta"]["clicks"] is True
    # Its height holds the tree's rows and, below them, the legend's rows (the same for both figures).
    side = side_figure_dicts(A, B, names=("original", "trained"), metric="w", width=PAIR_WIDTH)[0]
    rows = legend_rows(before["data"], PAIR_WIDTH)
    assert before["layout"]["height"] == side["layout"]["height"] + LEGEND_ROW * rows
    assert before["layout"]["height"] == after["layout"]["height"] and rows >= 2
    assert [d["name"] for d in after["data"] if d["name"].startswith("only in")] == [
        "only in original (not drafted here)"]
    # Each token labelled once: A's bonus is A's alone, drafted by neither, so B's figure leaves its place empty.
    text = lambda fig: sorted(html.unescape(x) for x in trace(fig, "labels")["text"])
    assert text(before) == ["t1", "t5", "t6", "t7", "t8", "t9"]
    assert text(after) == ["t1", "t5", "t6", "t7", "t8"]
    go.Figure(before), go.Figure(after)


def test_legend_rows_pack_entries_into_the_width():
    data = [{"name": "x" * 10}, {"name": "y" * 10}, {"name": "labels"}, {"name": "z" * 10, "showlegend": False}]
    assert legend_rows(data, 1000) == 1  # two entries of 120 px side by side
    assert legend_rows(data, 92 + 200) == 2  # a room of 200 px holds one a row
    assert legend_rows([], 500) == 0


def test_a_selection_is_ringed_at_the_same_place_in_both_figures_of_the_pair():
    t = shared_layout(A, B, PAIR_WIDTH)
    for v in (1, 2, 4):  # in both; A's only; B's only (an open grey ring in A's figure)
        fa, fb = pair_figure_dicts(A, B, selected=v)
        for fig in (fa, fb):
            ring = trace(fig, "selected")
            assert (ring["x"][0], ring["y"][0]) == t.pos[v] and ring["marker"]["size"] > trace(fig, "exit")[
                "marker"]["size"]
            labels = trace(fig, "labels")  # the label sits above the ring
            at = list(zip(labels["x"], labels["y"])).index(t.pos[v])
            assert labels["marker"]["size"][at] == ring["marker"]["size"]
    # A's bonus, drafted by neither tree, is no node of B's figure: B rings nothing there.
    fa, fb = pair_figure_dicts(A, B, selected=5)
    assert trace(fa, "selected") and not [x for x in fb["data"] if x["name"] == "selected"]
    assert not [x for x in pair_figure_dicts(A, B)[0]["data"] if x["name"] == "selected"]


def test_a_fold_of_the_pair_opens_on_a_click_and_a_selection_is_never_folded_away():
    rng = random.Random(7)
    a, b = random_tree(rng, 120, 30), random_tree(rng, 120, 30)
    t = pair_tree(a, b, 330)
    (u, kids), *_ = t.plan.folded.items()
    fa, _ = pair_figure_dicts(a, b, width=330)
    folds = trace(fa, "folded (+N: click to unfold)")
    assert f"more:{u}" in folds["customdata"] and all("click to unfold" in h for h in folds["hovertext"])
    opened = pair_tree(a, b, 330, expanded={u})
    assert set(kids) <= set(opened.pos) and u not in opened.plan.folded
    fa, fb = pair_figure_dicts(a, b, width=330, expanded={u})
    for fig in (fa, fb):
        assert f"less:{u}" in trace(fig, "opened (\u2212: click to fold again)")["customdata"]
        assert_apart(label_boxes(fig))
    # A node folded away at a narrower width stays drawn while it is selected.
    hidden = next(v for v in kids)
    assert hidden not in t.pos and hidden in pair_tree(a, b, 330, selected=hidden).pos
    assert trace(pair_figure_dicts(a, b, width=330, selected=hidden)[1], "selected")


def test_a_selected_node_is_ringed_and_its_details_say_what_each_verifier_did():
    t = shared_layout(A, B, WIDTH)
    fig = union_figure_dict(A, B, names=("tev", "predraw"), selected=1, clicks=True)
    assert fig["layout"]["meta"]["clicks"] is True
    ring = trace(fig, "selected")
    assert (ring["x"][0], ring["y"][0]) == t.pos[1]
    (box,) = fig["layout"]["annotations"]
    assert "tev #1: accepted" in box["text"] and "predraw #1: rejected here: the target took 't6'" in box["text"]
    assert "w 0.1" in box["text"] and "w 0.5" in box["text"]
    # The box sits in a top margin grown to hold it: the plot keeps its height, no node under the box.
    plain = union_figure_dict(A, B, names=("tev", "predraw"))
    grown = fig["layout"]["margin"]["t"] - plain["layout"]["margin"]["t"]
    assert grown > 0 and fig["layout"]["height"] - plain["layout"]["height"] == grown
    assert box["yanchor"] == "bottom" and box["y"] == 1.0
    assert "annotations" not in plain["layout"] and plain["layout"]["meta"]["clicks"] is False
    go.Figure(fig)
    # A's bonus, drafted by neither tree; B's bonus, A's own node.
    assert "tev's bonus token" in union_figure_dict(A, B, names=("tev", "predraw"),
                                                    selected=5)["layout"]["annotations"][0]["text"]
    assert "predraw: not drafted, its bonus token" in node_details(t, 2, ("tev", "predraw"))
    assert "tev #3: exit node" in node_details(t, 3, ("tev", "predraw"))


def test_the_exittrain_before_and_after_trees_are_labelled():
    """The ExitTrain tab's pair (app/training_views.moved_pair): every drawn node of each tree labelled, no two labels
    meeting at the width it is planned for, the titles on two lines."""
    from tevviz.app.training_views import moved_pair
    from tevviz.engine.train.exit_mass import ExitMassMove

    rng = random.Random(3)
    before, after = random_tree(rng, 20, 6), random_tree(rng, 20, 6)
    pair = moved_pair(ExitMassMove(2, before, after, []))
    assert pair.names == ("original", "trained") and pair.metric == "w"
    for width in (330, 430, 690):
        figs = pair_figure_dicts(pair.a, pair.b, pair.names, pair.metric, pair.titles, width)
        for d, name in zip(figs, ("original", "trained")):
            assert d["layout"]["title"]["text"].startswith(f"{name} draft, round 2<br>C_p = ")
            boxes = label_boxes(d)
            assert len(boxes) >= 10
            assert_apart(boxes)
            assert_rings_inside(d)
