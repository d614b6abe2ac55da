"""Render layer on hand-made round records: graph shape, tidy layout, figure JSON, session stats, text spans."""

from __future__ import annotations

import copy
import math
import random

import plotly.graph_objects as go
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tevviz.engine.analysis.summary import SessionSummary, summarize
from tevviz.engine.records.records import RoundRecord
from tevviz.engine.records.round_numbers import NUMBERS, SUM
from tevviz.render import (
    BONUS,
    METRICS,
    acceptance_by_depth_figure,
    block_length_histogram,
    coverage_figure,
    edges_cross,
    exit_mass_by_depth_figure,
    highlighted_blocks,
    node_metric,
    round_graph,
    stage_times_figure,
    tidy_layout,
    tree_figure,
    verifier_law_figure,
)
from tevviz.render.tree_figure import tree_figure_dict

STAGE_MS = {"draft": 1.0, "target": 4.0, "verify": 0.5, "other": 0.25}


def make_round(parents, accepted, scored=True, round_no=1, C_p=1.5, texts=None):
    """A round record over a parent array (parents[0] is None), with P, rho, w consistent: w(v) = P(v) - sum_c P(c)."""
    n = len(parents)
    children = {v: [c for c in range(n) if parents[c] == v] for v in range(n)}
    P, p_edge, logq = [1.0] * n, [None] * n, [None] * n
    for v in range(n):
        kids = children[v]
        weights = [len(kids) - i for i in range(len(kids))]  # distinct shares, 90% of the flow goes on
        for c, weight in zip(kids, weights):
            p_edge[c] = 0.9 * weight / sum(weights)
            P[c] = P[v] * p_edge[c]
            logq[c] = math.log(0.8 * weight / sum(weights))
    w = [P[v] - sum(P[c] for c in children[v]) for v in range(n)]
    depth = [0] * n
    for v in range(1, n):
        depth[v] = depth[parents[v]] + 1
    score = [0.0] * n
    for v in range(1, n):
        score[v] = score[parents[v]] + logq[v]
    texts = texts or [f"t{v}" for v in range(n)]
    nodes = []
    for v in range(n):
        node = {"id": v, "parent": parents[v], "token_id": 100 + v, "text": texts[v], "depth": depth[v]}
        if scored:
            node |= {
                "draft_logprob": logq[v],
                "score": score[v],
                "p_edge": p_edge[v],
                "P": P[v],
                "rho": w[v] / P[v],
                "w": w[v],
                "missing": [
                    {"token_id": 7, "text": " (", "gain": 0.01 * (v % 5)},
                    {"token_id": 8, "text": "x", "gain": 0.001},
                ],
            }
        else:
            node |= dict.fromkeys(("draft_logprob", "score", "p_edge", "P", "rho", "w")) | {"missing": []}
        nodes.append(node)
    return {
        "directed": True,
        "multigraph": False,
        "graph": {
            "round": round_no,
            "verifier": "tev",
            "exit_node": accepted[-1],
            "bonus_token_id": 17,
            "bonus_text": "x",
            "accepted": list(accepted),
            "C_p": C_p,
            "stage_ms": dict(STAGE_MS),
        },
        "nodes": nodes,
        "edges": [{"source": parents[v], "target": v} for v in range(1, n)],
    }


# root 0 -> {1, 2}; 1 -> {3, 4}; 2 -> {5}; 5 -> {6}
SMALL_PARENTS = [None, 0, 0, 1, 1, 2, 5]
SMALL = make_round(SMALL_PARENTS, accepted=[0, 2, 5])


def trace(fig, name):
    matches = [t for t in fig.data if t.name == name]
    assert len(matches) == 1, f"expected one trace named {name!r}, found {len(matches)}"
    return matches[0]


def node_positions(fig):
    nodes = [trace(fig, "nodes")] + [t for t in fig.data if t.name == "no value"]
    return {v: (x, y) for t in nodes for v, x, y in zip(t.customdata, t.x, t.y)}


def random_parents(rng, n):
    return [None] + [rng.randrange(v) for v in range(1, n)]


# --- graph -------------------------------------------------------------------------------------------------------


def test_round_graph_has_nodes_edges_and_attributes():
    G = round_graph(SMALL)
    assert len(G) == 7 and G.number_of_edges() == 6
    assert G.is_directed()
    assert G.nodes[3]["parent"] == 1 and G.nodes[3]["text"] == "t3"
    assert G.graph["accepted"] == [0, 2, 5]


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda r: r.pop("nodes"), "'nodes'"),
        (lambda r: r["graph"].pop("accepted"), "'accepted'"),
        (lambda r: r["nodes"][3].pop("depth"), "'depth'"),
        (lambda r: r["edges"][0].pop("target"), "'target'"),
        (lambda r: r["graph"].update(accepted=[0, 5]), "not a path"),
        (lambda r: r["graph"].update(exit_node=6), "exit_node"),
        (lambda r: r["edges"].pop(), "parent"),
        (lambda r: r["nodes"][6].update(depth=7), "depth"),
        (lambda r: r["nodes"][1].update(parent=3), "parents must come before their children"),  # records.tree_depths
        (lambda r: r["nodes"][2].update(id=True), "non-integer id"),
        (lambda r: r.update(graph=[1, 2]), "must be a dict"),
    ],
)
def test_malformed_record_raises_value_error(damage, message):
    record = make_round(SMALL_PARENTS, accepted=[0, 2, 5])
    damage(record)
    with pytest.raises(ValueError, match=message):
        round_graph(record)


def test_round_graph_leaves_the_record_untouched():
    record = make_round(SMALL_PARENTS, accepted=[0, 2, 5])
    before = copy.deepcopy(record)
    G = round_graph(record)
    G.graph["accepted"].append(99)
    G.nodes[1]["missing"].clear()
    tree_figure(record)
    assert record == before


def test_node_metric_values_and_nulls():
    G = round_graph(SMALL)
    assert node_metric(G.nodes[0], "draft_logprob") is None
    assert node_metric(G.nodes[3], "missing") == pytest.approx(0.03)
    assert node_metric(G.nodes[3], "w") == pytest.approx(SMALL["nodes"][3]["w"])
    imported = round_graph(make_round(SMALL_PARENTS, accepted=[0, 2], scored=False))
    assert node_metric(imported.nodes[2], "P") is None
    assert node_metric(imported.nodes[2], "missing") == 0.0
    with pytest.raises(ValueError, match="unknown metric"):
        node_metric(G.nodes[0], "nope")


# --- layout ------------------------------------------------------------------------------------------------------


def test_layout_depth_rows_and_parents_centred():
    G = round_graph(SMALL)
    pos = tidy_layout(G)
    for v in G:
        assert pos[v][1] == -G.nodes[v]["depth"]
    for v in G:
        kids = sorted(G.successors(v), key=lambda c: pos[c][0])
        if kids:
            assert pos[v][0] == (pos[kids[0]][0] + pos[kids[-1]][0]) / 2
    assert not edges_cross(G, pos)


def test_siblings_ordered_by_descending_score():
    record = make_round([None, 0, 0, 0], accepted=[0])
    for node, score in zip(record["nodes"][1:], [-2.0, -0.5, -1.0]):
        node["score"] = score
    pos = tidy_layout(round_graph(record))
    assert pos[2][0] < pos[3][0] < pos[1][0]


def test_unscored_siblings_ordered_by_id():
    pos = tidy_layout(round_graph(make_round([None, 0, 0, 0], accepted=[0], scored=False)))
    assert pos[1][0] < pos[2][0] < pos[3][0]


def test_edges_cross_detects_a_crossing():
    G = round_graph(make_round([None, 0, 0, 1, 2], accepted=[0]))
    pos = tidy_layout(G)
    assert not edges_cross(G, pos)
    pos[3], pos[4] = pos[4], pos[3]  # children swapped under their parents: the two lower edges cross
    assert edges_cross(G, pos)


def test_no_crossings_on_random_tree_of_256_nodes():
    G = round_graph(make_round(random_parents(random.Random(0), 256), accepted=[0]))
    pos = tidy_layout(G)
    assert len(pos) == 256
    assert not edges_cross(G, pos)


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 300).flatmap(lambda n: st.tuples(st.just(n), st.randoms(use_true_random=False))))
def test_no_crossings_and_centred_parents_on_random_trees(case):
    n, rng = case
    G = round_graph(make_round(random_parents(rng, n), accepted=[0], scored=rng.random() < 0.7))
    pos = tidy_layout(G)
    assert not edges_cross(G, pos)
    xs = {pos[v] for v in G}
    assert len(xs) == n  # no two nodes drawn on the same spot
    for v in G:
        kids = [pos[c][0] for c in G.successors(v)]
        if kids:
            assert pos[v][0] == (min(kids) + max(kids)) / 2


def test_deep_chain_of_300_nodes():
    record = make_round([None] + list(range(299)), accepted=list(range(300)))
    G = round_graph(record)
    pos = tidy_layout(G)
    assert pos[299] == (0.0, -299.0)
    fig = tree_figure(record)
    assert len(trace(fig, "nodes").x) == 300


# --- tree figure -------------------------------------------------------------------------------------------------


def test_node_trace_has_every_node_coloured_by_metric():
    fig = tree_figure(SMALL, metric="P")
    nodes = trace(fig, "nodes")
    assert len(nodes.x) == len(round_graph(SMALL)) == 7
    assert list(nodes.customdata) == list(range(7))
    assert list(nodes.marker.color) == pytest.approx([n["P"] for n in SMALL["nodes"]])
    assert nodes.marker.colorbar.title.text == METRICS["P"].label

    w_nodes = trace(tree_figure(SMALL, metric="w"), "nodes")
    assert list(w_nodes.marker.color) == pytest.approx([n["w"] for n in SMALL["nodes"]])
    assert list(w_nodes.marker.color) != list(nodes.marker.color)
    assert w_nodes.marker.colorbar.title.text == METRICS["w"].label


def test_metric_with_nulls_draws_grey_nodes():
    fig = tree_figure(SMALL, metric="draft_logprob")
    assert list(trace(fig, "nodes").customdata) == list(range(1, 7))
    assert list(trace(fig, "no value").customdata) == [0]
    assert trace(fig, "no value").marker.color == "lightgrey"


def test_imported_tree_without_scores_still_draws():
    record = make_round(SMALL_PARENTS, accepted=[0, 1], scored=False)
    for metric in METRICS:
        fig = tree_figure(record, metric=metric)
        assert len(node_positions(fig)) == 7
    fig = tree_figure(record, metric="P")
    assert len(trace(fig, "no value").x) == 7
    assert trace(fig, "nodes").marker.showscale is False


def test_accepted_path_goes_through_accepted_nodes():
    fig = tree_figure(SMALL)
    pos = node_positions(fig)
    path = trace(fig, "accepted path")
    assert list(zip(path.x, path.y)) == [pos[v] for v in [0, 2, 5]]


def test_edge_trace_has_every_edge_once():
    fig = tree_figure(SMALL)
    pos = node_positions(fig)
    edges = trace(fig, "edges")
    points = list(zip(edges.x, edges.y))
    segments = {(points[i], points[i + 1]) for i in range(0, len(points), 3)}
    assert segments == {(pos[SMALL_PARENTS[v]], pos[v]) for v in range(1, 7)}
    assert points[2::3] == [(None, None)] * 6


def test_exit_and_bonus_markers():
    fig = tree_figure(SMALL)
    pos = node_positions(fig)
    exit_trace = trace(fig, "exit")
    assert (exit_trace.x[0], exit_trace.y[0]) == pos[5]
    edge = trace(fig, "bonus edge")
    assert (edge.x[0], edge.y[0]) == pos[5] and edge.line.dash == "dash" and edge.hoverinfo == "skip"
    bonus = trace(fig, "bonus")
    assert bonus.y[0] == pos[5][1] - 1 and (edge.x[1], edge.y[1]) == (bonus.x[0], bonus.y[0])
    assert list(bonus.customdata) == [BONUS] and "bonus" in bonus.hovertext[0]
    # No point of a hoverable trace lies on the exit node but the node itself (its tooltip once lost to one).
    hoverable = [t for t in fig.data if t.hoverinfo != "skip" and t.name != "nodes"]
    assert not [t.name for t in hoverable for x, y in zip(t.x, t.y) if (x, y) == pos[5]]
    labels = trace(fig, "labels")
    assert (bonus.x[0], bonus.y[0], "x") in set(zip(labels.x, labels.y, labels.text))
    assert bonus.x[0] != pos[6][0]  # the exit's own child keeps its spot


def test_highlight_ring_at_node():
    pos = node_positions(tree_figure(SMALL))
    assert not [t for t in tree_figure(SMALL).data if t.name == "highlight"]
    ring = trace(tree_figure(SMALL, highlight_node=2), "highlight")
    assert (ring.x[0], ring.y[0]) == pos[2]
    assert ring.marker.size > trace(tree_figure(SMALL), "exit").marker.size
    bonus = trace(tree_figure(SMALL), "bonus")
    ring = trace(tree_figure(SMALL, highlight_node=BONUS), "highlight")
    assert (ring.x[0], ring.y[0]) == (bonus.x[0], bonus.y[0])
    with pytest.raises(ValueError, match="highlight_node"):
        tree_figure(SMALL, highlight_node=99)


def test_labels_show_whitespace_escape_markup_and_the_hover_gives_the_verdict():
    texts = ["def", " f", "\n", "<|x|>", "a", "b", "c"]
    fig = tree_figure(make_round(SMALL_PARENTS, accepted=[0, 2], texts=texts))
    labels = dict(zip(zip(trace(fig, "labels").x, trace(fig, "labels").y), trace(fig, "labels").text))
    pos = node_positions(fig)
    assert labels[pos[1]] == "⎵f" and labels[pos[2]] == "↵" and labels[pos[3]] == "&lt;|x|&gt;"
    nodes = trace(fig, "nodes")
    hover = dict(zip(nodes.customdata, nodes.hovertext))
    for part in ["' f'", "node 1", "depth 1", "edge prob", "path prob q(v)", "flow P", "rho", "w ", "missing: ' ('",
                 "rejected here: the target took '\\n'"]:
        assert part in hover[1], part
    assert "exit node" in hover[2] and "not reached" in hover[3] and "root" in hover[0]
    assert "rejected here" in hover[5]  # a child of the exit node: the target took the bonus instead


def test_a_large_tree_keeps_every_node_reachable_and_labels_the_accepted_path():
    record = make_round(random_parents(random.Random(1), 100), accepted=[0])
    big = tree_figure(record)
    shown = node_positions(big)
    folded = [t for t in big.data if t.name.startswith("folded")]
    behind = {int(key.split(":")[1]) for t in folded for key in t.customdata}
    G = round_graph(record)
    for v in G:  # every node is drawn, or an ancestor of it is drawn with a "+N" fold
        assert v in shown or any(u in behind for u in nx_ancestors(G, v)), v
    assert len(trace(big, "labels").text) >= 24


def nx_ancestors(G, v):
    out = []
    while G.nodes[v]["parent"] is not None:
        v = G.nodes[v]["parent"]
        out.append(v)
    return out


def test_figure_height_grows_with_depth_and_axes_hidden():
    shallow = tree_figure(make_round([None, 0, 0], accepted=[0]))
    deep = tree_figure(make_round([None, 0, 1, 2, 3, 4], accepted=[0]))
    assert deep.layout.height > shallow.layout.height
    assert deep.layout.width == shallow.layout.width
    assert deep.layout.xaxis.visible is False and deep.layout.yaxis.visible is False


def test_unknown_metric_raises():
    with pytest.raises(ValueError, match="unknown metric"):
        tree_figure(SMALL, metric="nope")


def validated(fig: go.Figure) -> dict:
    """The figure rebuilt through plotly's per-property validation, as plain data."""
    return go.Figure(fig.to_dict()).to_plotly_json()


FIGURE_CASES = [
    (SMALL, {}),
    (SMALL, {"metric": "draft_logprob", "highlight_node": BONUS, "title": "round 1: <b>x</b>"}),
    (make_round(SMALL_PARENTS, accepted=[0, 1], scored=False), {"metric": "missing", "highlight_node": 2}),
    (make_round(SMALL_PARENTS, accepted=[0, 2], texts=["def", " f", "\n", "<|x|>", "a", None, "c"]), {"title": ""}),
    (make_round(random_parents(random.Random(2), 100), accepted=[0]), {"metric": "w"}),
]


@pytest.mark.parametrize("metric", list(METRICS))
@pytest.mark.parametrize("record, options", FIGURE_CASES)
def test_tree_figure_built_without_validation_equals_the_validated_one(record, options, metric):
    # The figure skips plotly's validation for speed; validating it must change nothing, so the picture is the same.
    fig = tree_figure(record, **{"metric": metric, **options})
    assert fig.to_plotly_json() == validated(fig)
    assert fig.to_plotly_json() == go.Figure(tree_figure_dict(record, **{"metric": metric, **options})).to_plotly_json()


# --- stats and text ----------------------------------------------------------------------------------------------

ROUNDS = [
    make_round(SMALL_PARENTS, accepted=[0, 2, 5, 6], round_no=0, C_p=2.0),  # L = 4, tree depth 3
    make_round(SMALL_PARENTS, accepted=[0, 1], round_no=1, C_p=1.0),  # L = 2
    make_round([None, 0], accepted=[0], round_no=2, C_p=0.5),  # L = 1, tree depth 1
]


def test_summary_by_hand():
    s = summarize([RoundRecord.from_dict(r) for r in ROUNDS])  # no committed tokens recorded: L per round
    assert s.rounds == 3
    assert s.tokens == 4 + 2 + 1
    assert s.tau == pytest.approx(7 / 3)
    assert s.mean_expected_length == pytest.approx((3.0 + 2.0 + 1.5) / 3)
    assert s.optimal_rounds == 0 and s.mean_optimal is None and s.mean_gap is None
    assert summarize([]) == SessionSummary()
    assert {k: v for k, v in summarize([]).to_dict().items() if k != "stage_ms"} == {
        "rounds": 0, "tau": None, "mean_expected_length": None, "tokens": 0, "mean_optimal": None, "mean_gap": None,
        "optimal_rounds": 0, "bounded_rounds": 0,
        # no round: a sum is 0, a mean or a ratio of sums undefined
        "numbers": {n.name: 0 if n.over_rounds == SUM else None for n in NUMBERS.values()}}


def test_stage_times_stacked():
    fig = stage_times_figure(ROUNDS)
    assert [t.name for t in fig.data] == ["draft", "target", "verify", "other"]
    assert fig.layout.barmode == "stack"
    assert list(fig.data[1].y) == [4.0, 4.0, 4.0]
    assert list(fig.data[0].x) == [0, 1, 2]


def test_block_length_histogram_counts():
    bars = block_length_histogram(ROUNDS).data[0]
    assert list(bars.x) == [1, 2, 3, 4]
    assert list(bars.y) == [1, 1, 0, 1]


def test_acceptance_by_depth_by_hand():
    fig = acceptance_by_depth_figure(ROUNDS)
    conditional, marginal, exact = fig.data
    # Paths reach depths 3, 1 and 0 (L = 4, 2, 1). Conditional: of the rounds at d - 1, those reaching d: 2 of 3, then
    # 1 of 2, then 1 of 1 (it rises: the one deep round is the easy one). Marginal: of all three rounds, 2, 1, 1.
    assert list(conditional.x) == list(marginal.x) == [1, 2, 3]
    assert list(conditional.y) == pytest.approx([2 / 3, 1 / 2, 1])
    assert list(marginal.y) == pytest.approx([2 / 3, 1 / 3, 1 / 3])
    assert conditional.name.startswith("conditional") and marginal.name.startswith("marginal")
    # Exact: the target's mass per depth of each tree, averaged. Round 0 (SMALL's tree): P = 0.6 + 0.3 at depth 1,
    # 0.36 + 0.18 + 0.27 at 2, 0.243 at 3; round 2 (one child, p_edge 0.9): 0.9 at depth 1.
    assert exact.name.startswith("exact") and list(exact.y) == pytest.approx(
        [(0.9 + 0.9 + 0.9) / 3, (0.81 + 0.81) / 3, (0.243 + 0.243) / 3])


@pytest.mark.parametrize("figure", [stage_times_figure, block_length_histogram, acceptance_by_depth_figure])
@pytest.mark.parametrize("rounds", [ROUNDS, ROUNDS[:1], []])
def test_session_figures_built_without_validation_equal_the_validated_ones(figure, rounds):
    compact = {"height": 300, "margin": {"l": 40, "r": 10, "t": 40, "b": 40}}
    for fig in (figure(rounds), figure(rounds, compact)):
        assert fig.to_plotly_json() == validated(fig)
    assert figure(rounds, compact).layout.height == 300 and figure(rounds).layout.height is None


def test_verifier_law_grouped_bars():
    fig = verifier_law_figure([0.5, 0.3, 0.2], {"tev": [0.48, 0.33, 0.19], "naive": [0.6, 0.3, 0.1]}, ["0", "1", "2"])
    assert [t.name for t in fig.data] == ["exact w", "tev", "naive"]
    assert fig.layout.barmode == "group"
    assert list(fig.data[2].y) == [0.6, 0.3, 0.1]
    with pytest.raises(ValueError, match="tev"):
        verifier_law_figure([0.5, 0.5], {"tev": [1.0]}, ["0", "1"])


def test_highlighted_blocks():
    assert highlighted_blocks(ROUNDS) == [
        ("t2t5t6", "round 0"),
        ("x", "bonus"),
        ("t1", "round 1"),
        ("x", "bonus"),
        ("x", "bonus"),
    ]


def test_exittrain_figures():
    from tevviz.render import exit_mass_change_figure, loss_figure, path_label

    log = [{"step": i + 1, "loss": 3.0 - i * 0.1, "l_tok": 2.9 - i * 0.1, "l_exit": 0.01} for i in range(5)]
    fig = loss_figure(log)
    assert [t.name for t in fig.data] == ["L_tok", "L_exit (right axis)", "L"]
    assert fig.data[1].yaxis == "y2" and list(fig.data[2].y) == [e["loss"] for e in log]
    changes = [{"texts": ["a"] * (i + 1), "delta": 0.5 - 0.02 * i, "w_before": 0.0, "w_after": 0.5 - 0.02 * i}
               for i in range(20)]
    bars = exit_mass_change_figure(changes, 3).data[0]
    assert len(bars.x) == 16 and bars.x[-1] == changes[0]["delta"]  # the largest change drawn on top
    assert path_label([]) == "root"
    assert path_label(["x"] * 30, 20).startswith("…") and len(path_label(["x"] * 30, 20)) == 20


# ------------------------------------------------------------------------------------ tiled session panel


def test_tiled_panel_keeps_every_trace_on_its_own_renumbered_axes():
    from tevviz.render.panel import panel_traces, tile

    figures = {"stage": stage_times_figure(ROUNDS, as_dict=True), "hist": block_length_histogram(ROUNDS, as_dict=True),
               "mass": exit_mass_by_depth_figure(ROUNDS, as_dict=True), "cov": coverage_figure(ROUNDS, as_dict=True)}
    fig = tile(figures, [["stage", "hist"], ["mass", "cov"]])
    lay = fig["layout"]
    for name, own in figures.items():
        traces = panel_traces(fig, name)
        # The data are the figure's own, in order, and grouped under its title in the legend.
        assert [(t["name"], t["x"], t["y"]) for t in traces] == [(t["name"], t["x"], t["y"]) for t in own["data"]]
        assert {t["legendgrouptitle"]["text"] for t in traces} == {own["layout"]["title"]["text"]}
    # stage x/y, hist x2/y2, mass x3/y3 plus its right axis y4 over y3, coverage x4/y5.
    assert {(t["xaxis"], t["yaxis"]) for t in panel_traces(fig, "mass")} == {("x3", "y3"), ("x3", "y4")}
    assert lay["yaxis4"]["overlaying"] == "y3" and lay["yaxis4"]["side"] == "right" and "domain" not in lay["yaxis4"]
    # No title on the right axis (it ran into the next subplot); the legend names the line it reads.
    assert "title" not in lay["yaxis4"] and any("right axis" in t["name"] for t in panel_traces(fig, "mass"))
    assert {(t["xaxis"], t["yaxis"]) for t in panel_traces(fig, "cov")} == {("x4", "y5")}
    assert lay["xaxis"]["anchor"] == "y" and lay["yaxis5"]["anchor"] == "x4"
    assert lay["xaxis2"]["title"]["text"] == "L (tokens committed)"
    # Rounds, lengths and depths are whole numbers: so are their axes' ticks (plotly put two rounds' at 0.5 and 1.5).
    assert all(lay[k]["tick0"] == 0 and isinstance(lay[k]["dtick"], int) for k in ("xaxis", "xaxis2", "xaxis4"))
    # Row 0 above row 1, columns side by side without overlap; one title per panel; barmode carried over.
    assert lay["yaxis"]["domain"][0] > lay["yaxis3"]["domain"][1]
    assert lay["xaxis"]["domain"][1] < lay["xaxis2"]["domain"][0]
    titles = [f"<b>{f['layout']['title']['text']}</b>" for f in figures.values()]
    assert [a["text"] for a in lay["annotations"]] == titles
    assert lay["barmode"] == "stack"
    # A valid plotly figure.
    import plotly.graph_objects as go

    go.Figure(fig)


def test_tiled_panel_refuses_what_it_cannot_place():
    from tevviz.render.panel import tile

    a = stage_times_figure(ROUNDS, as_dict=True)
    with pytest.raises(ValueError, match="once"):
        tile({"a": a}, [["a", "a"]])
    with pytest.raises(ValueError, match="shapes"):
        tile({"a": a | {"layout": a["layout"] | {"shapes": []}}}, [["a"]])
    grouped = block_length_histogram(ROUNDS, as_dict=True)
    grouped["layout"]["barmode"] = "group"
    with pytest.raises(ValueError, match="barmode"):
        tile({"a": a, "b": grouped}, [["a", "b"]])


GHOST_TITLE = ("round 1: 7 nodes, exit node 5, L = 3, E[L] = 1 + C_p = 2.500 (tev)"
               "<br>optimal 1 + C_p* = 3.000, 6 ghosts")
SIX_GHOSTS = [{"node": 10 + i, "token": 50 + i, "text": f"g{i}", "P": 0.1, "depth": 2, "anchor": 1,
               "parent_ghost": None, "path_text": f" f g{i}"} for i in range(6)]


def test_tree_title_above_the_tree_and_legend_below_it():
    """The title sits in the top margin (grown to hold it), the legend under the tree: with ghost branches on, a
    legend above the tree wrapped to two rows and covered the title's last line, underscores and all ("C  p")."""
    fig = go.Figure(tree_figure_dict(SMALL, "P", title=GHOST_TITLE, ghosts=SIX_GHOSTS))  # as plotly validates it
    lay = fig.to_plotly_json()["layout"]
    assert lay["title"]["text"] == GHOST_TITLE  # symbols as written: no <sub>, no LaTeX
    assert "C_p = " in lay["title"]["text"] and "C_p* = " in lay["title"]["text"] and "<sub>" not in GHOST_TITLE
    title, legend = lay["title"], lay["legend"]
    assert (title["yref"], title["y"], title["yanchor"], title["automargin"]) == ("container", 1.0, "top", True)
    assert (legend["yanchor"], legend["orientation"]) == ("top", "h") and legend["y"] < 0  # under the plot area
    names = [t["name"] for t in fig.to_plotly_json()["data"]]
    assert "ghost branches (optimal tree)" in names


def test_a_rows_cell_rings_its_nodes_and_a_selection_boxes_its_cell():
    from tevviz.engine.records.records import RoundRecord
    from tevviz.render.block_rows import block_rows_figure
    from tevviz.render.tree_figure import node_key

    record = make_round(SMALL_PARENTS, accepted=[0, 2, 5])
    fig = tree_figure(record, marked=[3, 4])
    pos = node_positions(fig)
    marked = trace(fig, "marked")
    assert {(x, y) for x, y in zip(marked.x, marked.y)} == {pos[3], pos[4]}
    rows = [[{"token_id": 100 + v, "text": f"t{v}", "logprob": -1.0} for v in (1, 2)],
            [{"token_id": 100 + v, "text": f"t{v}", "logprob": -1.0} for v in (3, 4, 5)]]
    r = RoundRecord.from_dict(record)
    r = RoundRecord(**{**r.__dict__, "draft_rows": rows})
    heat = block_rows_figure(r, selected=(2, 104)).data
    assert heat[0].customdata[1][1] == "cell:2:104" and node_key("cell:2:104") == "cell:2:104"
    box = next(t for t in heat if t.name == "selected")
    assert (box.x[0], box.y[0]) == (1, 2)


def test_a_colour_bar_over_one_value_reads_from_zero_to_it():
    """A round whose shown nodes all carry P = 1 (here the root alone) colours them on a bar from 0 to 1, not on one
    that plotly pads past 1."""
    from tevviz.render.tree_figure import tree_figure

    marker = trace(tree_figure(make_round([None], [0]), "P"), "nodes").marker
    assert (marker.cmin, marker.cmax) == (0.0, 1.0)
