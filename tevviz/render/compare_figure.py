"""Two rounds' trees in one shared layout: the union tree by token path (engine/records/run_compare.match_nodes)
planned once by the Decode tree's rule (render/tree_plan.py: labels by importance, none overlapping, the lightest
siblings folded into "+N" where the width runs out) and drawn with its pieces (render/tree_figure.py: edges, labels,
rings, layout), as one union figure (nodes marked both / A only / B only) or as two side-by-side figures whose nodes sit
at identical positions (each side coloured by a metric, the other side's nodes left as open grey rings).

Every node trace carries the union node ids as `customdata`, the same in every figure of a pair, so a page can link
hover and selection across them (render/compare_report.py does).
"""

from __future__ import annotations

import functools
import html
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import networkx as nx
import plotly.colors

from tevviz.engine.records.records import RoundRecord
from tevviz.engine.records.run_compare import A_ONLY, B_ONLY, BOTH, MatchedNode, match_nodes
from tevviz.render.graph import METRICS, node_metric, round_graph
from tevviz.render.labels import token_label
from tevviz.render.layout import Point
from tevviz.render.tree_figure import (
    EXIT_RING,
    HIGHLIGHT_RING,
    NODE_SIZE,
    TOP_LABELLED,
    _edge_trace,
    _folded_trace,
    _label_trace,
    _layout,
    _ring_trace,
    plan_room,
)
from tevviz.render.tree_plan import TreePlan, plan_tree
from tevviz.render.verdicts import verdict_line

SIDE_COLOURS = {BOTH: "#555555", A_ONLY: "#1f77b4", B_ONLY: "#ff7f0e"}
SIDE_SYMBOLS = {BOTH: "circle", A_ONLY: "triangle-up", B_ONLY: "square"}
ABSENT_COLOUR = "#c8c8c8"
PATH_COLOUR = "crimson"
WIDTH = 900
SIDE_WIDTH = 560  # two trees side by side on a page: a column of the comparison report (render/compare_report.py)
PAIR_WIDTH = 330  # a pair side by side in the app: a column of a 900 px window has 340 (wider ones stretch it)
LEGEND_ROW = 19  # px of a legend entry's row
B_EXIT_RING = EXIT_RING - 6  # B's exit ring inside A's where both exit at one node


@dataclass(frozen=True)
class SharedTree:
    """The union of two rounds' trees, with each side's bonus token as a node, and its plan for one width."""

    a: RoundRecord
    b: RoundRecord
    nodes: list[MatchedNode]  # drafted nodes of either tree (ids 0..len - 1)
    bonus: tuple[int | None, int | None]  # the union id of A's and B's bonus token (None where unknown)
    size: int  # nodes plus the bonus tokens neither tree drafted
    parents: list[int]  # per union id, bonus nodes included
    pos: dict[int, Point]  # the nodes drawn (a folded one has none), in px of the plot area
    plan: TreePlan  # pos plus the "+N" folds and the labels
    graph: nx.DiGraph  # the union tree: text, P (the larger of the two) and score per node
    width: int  # the figure's px the plan is for

    def side_of(self, v: int) -> str | None:
        """"both", "A only", "B only" for a drafted node; None for a bonus token neither tree drafted."""
        return self.nodes[v].side if v < len(self.nodes) else None

    def own(self, side: int, v: int) -> int | None:
        """Node v's id in tree `side` (0: A, 1: B), None where that tree lacks it."""
        if v >= len(self.nodes):
            return None
        return self.nodes[v].node_b if side else self.nodes[v].node_a


def shared_layout(a: RoundRecord, b: RoundRecord, width: int = SIDE_WIDTH) -> SharedTree:
    """Plan the union of two rounds' trees once for a figure `width` px wide, as the Decode tree is planned: both
    accepted paths, exits, their children and bonus tokens labelled first, then the nodes of the larger target flow P;
    siblings by the higher of the two path scores, bonus tokens last."""
    nodes = match_nodes(a, b)
    parents = [n.parent for n in nodes]
    by_path = {n.path: n.id for n in nodes}
    G = nx.DiGraph()
    for n in nodes:
        scores = [r.scores[v] for r, v in ((a, n.node_a), (b, n.node_b)) if v is not None]
        flows = [_finite(r.P[v]) for r, v in ((a, n.node_a), (b, n.node_b)) if v is not None]
        flows = [x for x in flows if x is not None]
        G.add_node(n.id, text=n.text, score=max(scores) if n.id else None, P=max(flows) if flows else None)
        if n.parent >= 0:
            G.add_edge(n.parent, n.id)
    bonus: list[int | None] = []
    for r in (a, b):
        if r.bonus_token < 0:
            bonus.append(None)
            continue
        path = (*r.token_path(r.exit_node), r.bonus_token)
        if path not in by_path:
            by_path[path] = len(parents)
            parents.append(by_path[path[:-1]])
            G.add_node(by_path[path], text=r.bonus_text, score=None, P=None)  # unscored: after the drafted siblings
            G.add_edge(parents[-1], by_path[path])
        bonus.append(by_path[path])
    must = {x for x in bonus if x is not None}
    for r in (a, b):
        exit_node = by_path[r.token_path(r.exit_node)]
        must |= {by_path[r.token_path(v)] for v in r.accepted} | set(G.successors(exit_node))
    flow = {v: _finite(G.nodes[v]["P"]) for v in G}
    q = {v: math.exp(G.nodes[v]["score"]) if _finite(G.nodes[v]["score"]) is not None else 0.0 for v in G}
    rank = sorted((v for v in G if flow[v] is not None), key=lambda v: (-flow[v], -q[v]))
    labels = {v: token_label(G.nodes[v]["text"]) for v in G}
    plan = plan_tree(G, labels, must, rank, lambda v: (flow[v] or 0.0, q[v]), plan_room(width), top=TOP_LABELLED)
    pos = {v: p for v, p in plan.pos.items() if not isinstance(v, tuple)}
    return SharedTree(a, b, nodes, (bonus[0], bonus[1]), len(parents), parents, pos, plan, G, width)


def _finite(x: float | None) -> float | None:
    return None if x is None or math.isnan(x) else float(x)


# --- figures --------------------------------------------------------------------------------------------------------


def union_figure_dict(a: RoundRecord, b: RoundRecord, names: Sequence[str] = ("A", "B"), title: str | None = None,
                      tree: SharedTree | None = None, width: int = WIDTH, selected: int | None = None,
                      clicks: bool = False) -> dict[str, Any]:
    """One figure of both trees `width` px wide: nodes marked both / A only / B only (colour and symbol), both
    accepted paths, exits and bonus tokens, the Decode tree's labels; hover gives each side's numbers.

    `selected`: a union node ringed, its `node_details` in a box between the title and the tree; `clicks`: the
    figure asks its app view for clicks (figure_view.py)."""
    t = tree or shared_layout(a, b, width)
    if selected is not None and selected not in t.pos:
        selected = None  # folded away: nothing to ring
    na, nb = names
    label = {BOTH: "both", A_ONLY: f"{na} only", B_ONLY: f"{nb} only"}
    traces = [_edge_trace(t.graph, t.plan.pos)]
    for side, (r, colour, line, dash) in enumerate(((a, SIDE_COLOURS[A_ONLY], 6, "solid"),
                                                    (b, SIDE_COLOURS[B_ONLY], 3, "dash"))):
        path = [_union_id(t, side, v) for v in r.accepted]
        traces.append(_line([t.pos[v] for v in path], f"{names[side]}'s accepted path", colour, line, dash))
    for side in (BOTH, A_ONLY, B_ONLY):
        ids = [n.id for n in t.nodes if n.side == side and n.id in t.pos]
        marker = {"size": NODE_SIZE, "color": SIDE_COLOURS[side], "symbol": SIDE_SYMBOLS[side],
                  "line": {"color": "#303030", "width": 0.5}}
        traces.append(_markers(t, ids, label[side], marker, names))
    rings: dict[int, int] = {}
    for side, r in enumerate((a, b)):
        colour = SIDE_COLOURS[A_ONLY if side == 0 else B_ONLY]
        traces.append(_bonus(t, side, f"{names[side]}'s bonus", colour))
        exit_node, size = _union_id(t, side, r.exit_node), (EXIT_RING, B_EXIT_RING)[side]
        traces.append(_ring_trace(t.pos[exit_node], f"{names[side]}'s exit", size, colour))
        rings[exit_node] = max(rings.get(exit_node, 0), size)
    traces += _folds(t)
    if selected is not None:
        rings[selected] = HIGHLIGHT_RING
        traces.append(_ring_trace(t.pos[selected], "selected", HIGHLIGHT_RING, "black") | {"showlegend": False})
    traces.append(_label_trace(t.plan, set(), set(), set(), rings))
    layout = _layout(t.plan, t.width, title)
    layout["meta"] = {**layout["meta"], "clicks": clicks}
    if selected is not None:
        layout.update(_details_box(node_details(t, selected, names), layout))
    return {"data": [x for x in traces if x is not None], "layout": layout}


DETAILS_LINE = 15  # px per line of the details box


def _details_box(text: str, layout: dict) -> dict[str, Any]:
    """The selected node's details in a box under the title, in a top margin grown to hold it (no node under it)."""
    lines = text.count("<br>") + 1
    top = layout["margin"]["t"] + DETAILS_LINE * lines + 12
    box = {"text": text, "xref": "paper", "yref": "paper", "x": 0.0, "y": 1.0, "xanchor": "left",
           "yanchor": "bottom", "align": "left", "showarrow": False, "bgcolor": "white", "bordercolor": "#909090",
           "borderwidth": 1, "borderpad": 4, "font": {"size": 11}}
    return {"annotations": [box], "margin": {**layout["margin"], "t": top},
            "height": layout["height"] + top - layout["margin"]["t"]}


def side_figure_dicts(a: RoundRecord, b: RoundRecord, names: Sequence[str] = ("A", "B"), metric: str | None = None,
                      titles: Sequence[str | None] = (None, None), tree: SharedTree | None = None,
                      width: int = WIDTH) -> tuple[dict[str, Any], dict[str, Any]]:
    """Two figures `width` px wide at identical node positions, one per tree: its nodes coloured by `metric` on one
    colour scale for both (by side without a metric), its accepted path, exit and bonus, the Decode tree's labels; the
    other tree's nodes as open grey rings with grey labels."""
    t = tree or shared_layout(a, b, width)
    if metric is not None and metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; expected one of {list(METRICS)}")
    values = metric_values(t, metric) if metric is not None else None
    seen = [x for side in values for x in side if x is not None] if values is not None else []
    scale = (min(seen, default=0.0), max(seen, default=1.0))
    return tuple(_side(t, side, names, values, metric, scale, titles[side]) for side in (0, 1))


def _side(t: SharedTree, side: int, names: Sequence[str], values, metric: str | None, scale: tuple[float, float],
          title: str | None) -> dict[str, Any]:
    r = (t.a, t.b)[side]
    mine, theirs = (A_ONLY, B_ONLY) if side == 0 else (B_ONLY, A_ONLY)
    here = [n.id for n in t.nodes if n.side in (BOTH, mine)]
    absent = [n.id for n in t.nodes if n.side == theirs]
    path = [_union_id(t, side, v) for v in r.accepted]
    traces = [
        _edge_trace(t.graph.subgraph(here), t.plan.pos) | {"name": "edges"},
        _edges(t, [v for v in absent if v in t.pos], f"edges only in {names[1 - side]}",
               {"color": ABSENT_COLOUR, "width": 1, "dash": "dot"}),
        _line([t.pos[v] for v in path], "accepted path", PATH_COLOUR, 5, "solid", 0.6),
    ]
    label = {BOTH: "in both", mine: f"{names[side]} only"}
    unvalued = []
    for kind in (BOTH, mine):
        ids = [v for v in here if t.nodes[v].side == kind and v in t.pos]
        marker: dict[str, Any] = {"size": NODE_SIZE, "symbol": SIDE_SYMBOLS[kind],
                                  "line": {"color": "#303030", "width": 0.5}}
        if values is None:
            marker["color"] = SIDE_COLOURS[kind]
        else:
            unvalued += [v for v in ids if values[side][v] is None]
            ids = [v for v in ids if values[side][v] is not None]
            # One scale (cmin, cmax) for both figures of the pair, so a colour means the same value in each.
            marker.update(color=[values[side][v] for v in ids], colorscale=colorscale_stops(METRICS[metric].colorscale),
                          cmin=scale[0], cmax=scale[1], showscale=kind == BOTH,
                          colorbar={"title": {"text": METRICS[metric].label, "side": "right"}})
        traces.append(_markers(t, ids, label[kind], marker, names))
    if unvalued:  # an imported tree without target scores
        traces.append(_markers(t, unvalued, "no value", {"size": NODE_SIZE, "color": ABSENT_COLOUR,
                                                          "line": {"color": "#303030", "width": 0.5}}, names))
    shown_absent = [v for v in absent if v in t.pos]
    traces.append(_markers(t, shown_absent, f"only in {names[1 - side]} (not drafted here)",
                           {"size": NODE_SIZE, "symbol": "circle-open", "color": ABSENT_COLOUR, "line": {"width": 1.5}},
                           names))
    traces.append(_bonus(t, side, "bonus", PATH_COLOUR))
    exit_node = _union_id(t, side, r.exit_node)
    traces.append(_ring_trace(t.pos[exit_node], "exit", EXIT_RING, PATH_COLOUR))
    traces += _folds(t)
    own_bonus, other_bonus = t.bonus[side], t.bonus[1 - side]
    # The other side's bonus token, drafted by neither tree, is no node of this one: its place stays empty.
    hide = {other_bonus} if other_bonus is not None and other_bonus >= len(t.nodes) and other_bonus != own_bonus \
        else set()
    on_path = set(path) | ({own_bonus} if own_bonus is not None else set())
    traces.append(_label_trace(t.plan, on_path, set(absent) - on_path, hide, {exit_node: EXIT_RING}))
    return {"data": [x for x in traces if x is not None], "layout": _layout(t.plan, t.width, title)}


def pair_figures(a: RoundRecord, b: RoundRecord, names: Sequence[str] = ("A", "B"), metric: str | None = "w",
                 titles: Sequence[str | None] = (None, None), width: int = PAIR_WIDTH) -> tuple:
    """`side_figure_dicts` as two plotly Figures (what gr.Plot shows) planned for `width` px and stretched to their
    column (a wider one only spreads the labels): the app's before/after pair."""
    import plotly.graph_objects as go

    figs = side_figure_dicts(a, b, names, metric, titles, width=width)
    out = []
    for f in figs:
        layout = {**f["layout"], "autosize": True}
        layout.pop("width")
        # A narrow column holds one legend entry a row, below the tree: the figure grows by them, so the legend's rows
        # do not come out of the tree's (they pressed three depths into 100 px).
        entries = sum(1 for t in f["data"] if t.get("showlegend", True) and t["name"] != "labels")
        layout["height"] += LEGEND_ROW * entries
        # The dicts are written in plotly's own form (as tree_figure_dict's), so validation is skipped.
        out.append(go.Figure({"data": f["data"], "layout": layout}, _validate=False))
    return out[0], out[1]


# --- pieces ---------------------------------------------------------------------------------------------------------


def _union_id(t: SharedTree, side: int, v: int) -> int:
    """The union id of node v of tree `side`."""
    r = (t.a, t.b)[side]
    path = r.token_path(v)
    return _path_index(t)[path]


def _path_index(t: SharedTree) -> dict[tuple[int, ...], int]:
    # SharedTree is frozen; the index is cached on it like RoundRecord caches its coverage gap.
    if "_paths" not in t.__dict__:
        object.__setattr__(t, "_paths", {n.path: n.id for n in t.nodes})
    return t.__dict__["_paths"]


def metric_values(t: SharedTree, metric: str) -> tuple[list, list]:
    """Per side, the metric's value at each union node (None where that tree lacks the node or has no value)."""
    out = []
    for side, r in enumerate((t.a, t.b)):
        attrs = r.to_dict()["nodes"]
        out.append([None if t.own(side, v) is None else node_metric(attrs[t.own(side, v)], metric)
                    for v in range(len(t.nodes))])
    return out[0], out[1]


@functools.cache
def colorscale_stops(name: str) -> list[list]:
    return [list(stop) for stop in plotly.colors.get_colorscale(name)]


def _scatter(name: str, xs: list, ys: list, mode: str, **props: Any) -> dict[str, Any]:
    return {"type": "scatter", "name": name, "x": xs, "y": ys, "mode": mode, **props}


def _edges(t: SharedTree, children, name: str, line: dict) -> dict[str, Any] | None:
    xs, ys = [], []
    for v in children:
        u = t.parents[v]
        xs += [t.pos[u][0], t.pos[v][0], None]  # None breaks the line between edges
        ys += [t.pos[u][1], t.pos[v][1], None]
    return _scatter(name, xs, ys, "lines", line=line, hoverinfo="skip") if xs else None


def _line(points: list[Point], name: str, colour: str, width: float, dash: str, opacity: float = 0.5) -> dict:
    return _scatter(name, [p[0] for p in points], [p[1] for p in points], "lines",
                    line={"color": colour, "width": width, "dash": dash}, opacity=opacity, hoverinfo="skip")


def _bonus(t: SharedTree, side: int, name: str, colour: str) -> dict[str, Any] | None:
    """The dashed edge from a side's exit node to its bonus token, marker at the bonus end (its label is the labels
    trace's, as every node's)."""
    r, v = (t.a, t.b)[side], t.bonus[side]
    if v is None or v not in t.pos:
        return None
    u = _union_id(t, side, r.exit_node)
    return _scatter(name, [t.pos[u][0], t.pos[v][0]], [t.pos[u][1], t.pos[v][1]], "lines+markers",
                    line={"color": colour, "width": 2, "dash": "dash"},
                    marker={"size": [0, 14], "color": "white", "line": {"color": colour, "width": 2}},
                    hovertext=["", (f"<b>bonus {_token(r.bonus_text)}</b>  token_id {r.bonus_token}<br>drawn at "
                                    "the exit node from its residual law")],
                    hoverinfo=["skip", "text"], customdata=[None, v])


def _folds(t: SharedTree) -> list[dict[str, Any]]:
    """The "+N" folds of the plan: here a fold stays folded (the pair has no unfolding), so its hover says only what
    it holds."""
    if not t.plan.folded:
        return []
    trace = _folded_trace(t.graph, t.plan, {})
    hover = [h.replace("<br>click to unfold", "") for h in trace["hovertext"]]
    return [trace | {"name": "folded (+N lighter siblings)", "hovertext": hover}]


def _markers(t: SharedTree, ids: list[int], name: str, marker: dict, names: Sequence[str]) -> dict[str, Any]:
    return _scatter(name, [t.pos[v][0] for v in ids], [t.pos[v][1] for v in ids], "markers", marker=marker) | {
        "customdata": list(ids),  # union node ids: the same in every figure of a pair
        "hovertext": [node_hover(t, v, names) for v in ids],
        "hoverinfo": "text",
    }


def _number(x: float | None) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3g}"


def _token(text: str | None) -> str:
    """repr makes whitespace visible; escaping keeps plotly from reading '<...>' as markup."""
    return html.escape(repr(text), quote=False)


def node_hover(t: SharedTree, v: int, names: Sequence[str] = ("A", "B")) -> str:
    """A union node's hover text: its token and path, where it is, and each tree's numbers there."""
    n = t.nodes[v]
    where = {BOTH: "in both trees", A_ONLY: f"in {names[0]}'s tree only", B_ONLY: f"in {names[1]}'s tree only"}
    path = "".join(t.nodes[u].text for u in _union_path(t, v)[1:])
    lines = [f"<b>{_token(n.text)}</b>  depth {n.depth}, {where[n.side]}", f"path {_token(path)}"]
    for side, r in enumerate((t.a, t.b)):
        u = t.own(side, v)
        if u is None:
            continue
        q = None if u == 0 else math.exp(r.draft_logprobs[u])
        mark = " (accepted)" if u in r.accepted else ""
        lines.append(f"{names[side]} #{u}{mark}: P {_number(r.P[u])}  w {_number(r.w[u])}  p_edge "
                     f"{_number(r.p_edge[u])}  draft prob {_number(q)}")
    return "<br>".join(lines)


def node_details(t: SharedTree, v: int, names: Sequence[str] = ("A", "B")) -> str:
    """A clicked union node in a few lines: its token and path, and in each tree its numbers and what the verifier did
    there (accepted, the exit, rejected and the token the target took instead, not reached)."""
    if v >= len(t.nodes):  # a bonus token neither tree drafted
        side = t.bonus.index(v)
        r = (t.a, t.b)[side]
        return (f"<b>{_token(r.bonus_text)}</b>: {names[side]}'s bonus token (token_id {r.bonus_token}), drawn at "
                "its exit node from the residual law")
    n = t.nodes[v]
    lines = node_hover(t, v, names).split("<br>")[:2]
    for side, r in enumerate((t.a, t.b)):
        u = t.own(side, v)
        if u is None:
            lines.append(f"{names[side]}: not drafted" + (", its bonus token" if t.bonus[side] == n.id else ""))
            continue
        said = html.escape(verdict_line(_graph(t, side), u), quote=False)
        bonus = " (and the bonus token)" if t.bonus[side] == n.id else ""
        lines.append(f"{names[side]} #{u}: {said}{bonus}<br>    P {_number(r.P[u])}, w {_number(r.w[u])}, "
                     f"p_edge {_number(r.p_edge[u])}, rho {_number(r.rho[u])}")
    return "<br>".join(lines)


def _graph(t: SharedTree, side: int) -> nx.DiGraph:
    # Cached on the frozen tree as the path index is: a click asks for both sides' verdicts.
    key = f"_graph{side}"
    if key not in t.__dict__:
        object.__setattr__(t, key, round_graph((t.a, t.b)[side].to_dict()))
    return t.__dict__[key]


def _union_path(t: SharedTree, v: int) -> list[int]:
    path = [v]
    while t.parents[path[-1]] >= 0:
        path.append(t.parents[path[-1]])
    return path[::-1]
