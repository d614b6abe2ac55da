"""Two rounds' trees in one shared layout (render/shared_tree.py: the union tree by token path, planned once by the
Decode tree's rule) drawn with the Decode tree's pieces (render/tree_traces.py: edges, labels, rings; tree_frame.py:
the layout), as one union figure (nodes marked both / A only / B only) or as two side-by-side figures whose nodes sit
at identical positions (each side coloured by a metric, the other side's nodes left as open grey rings);
`pair_figure_dicts` is the app's pair of them, a selection ringed in both and its "+N" folds opening on a click.

Every node trace carries the union node ids as `customdata`, the same in every figure of a pair, so a page can link
hover and selection across them (render/compare_report.py and the app's pair views do).
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Sequence
from typing import Any

import networkx as nx

from tevviz.engine.analysis.run_compare import A_ONLY, B_ONLY, BOTH
from tevviz.engine.records.records import RoundRecord
from tevviz.render.colours import colorscale_of, colour_range
from tevviz.render.graph import METRICS, node_metric, round_graph
from tevviz.render.shared_tree import SIDE_WIDTH, SharedTree, shared_layout
from tevviz.render.tree_frame import MARGIN, WIDTH, tree_layout
from tevviz.render.tree_traces import (
    EXIT_RING,
    HIGHLIGHT_RING,
    NODE_SIZE,
    PATH_COLOUR,
    bonus_edge,
    bonus_trace,
    edge_trace,
    folded_trace,
    label_trace,
    line_trace,
    number_text,
    opened_trace,
    quoted_token,
    ring_trace,
    scatter,
)
from tevviz.render.verdicts import verdict_line

SIDE_COLOURS = {BOTH: "#555555", A_ONLY: "#1f77b4", B_ONLY: "#ff7f0e"}
SIDE_SYMBOLS = {BOTH: "circle", A_ONLY: "triangle-up", B_ONLY: "square"}
ABSENT_COLOUR = "#c8c8c8"
PAIR_WIDTH = SIDE_WIDTH  # the app's pair before its views report their width (a column of a 1440 px window)
LEGEND_ROW = 19  # px of a legend row
LEGEND_CHAR = 7.0  # px of a legend entry's character, at plotly's 12 px font (a little over, never under)
LEGEND_ITEM = 50.0  # px of a legend entry besides its text: its symbol and the gap to the next
B_EXIT_RING = EXIT_RING - 6  # B's exit ring inside A's where both exit at one node


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
    traces = [edge_trace(t.graph, t.plan.pos)]
    for side, (r, colour, line, dash) in enumerate(((a, SIDE_COLOURS[A_ONLY], 6, "solid"),
                                                    (b, SIDE_COLOURS[B_ONLY], 3, "dash"))):
        path = [t.union_id(side, v) for v in r.accepted]
        traces.append(line_trace([t.pos[v] for v in path], f"{names[side]}'s accepted path", line, colour, dash, 0.5))
    for side in (BOTH, A_ONLY, B_ONLY):
        ids = [n.id for n in t.nodes if n.side == side and n.id in t.pos]
        marker = {"size": NODE_SIZE, "color": SIDE_COLOURS[side], "symbol": SIDE_SYMBOLS[side],
                  "line": {"color": "#303030", "width": 0.5}}
        traces.append(_markers(t, ids, label[side], marker, names))
    rings: dict[int, int] = {}
    for side, r in enumerate((a, b)):
        colour = SIDE_COLOURS[A_ONLY if side == 0 else B_ONLY]
        traces += _bonus(t, side, f"{names[side]}'s bonus", colour)
        exit_node, size = t.union_id(side, r.exit_node), (EXIT_RING, B_EXIT_RING)[side]
        traces.append(ring_trace(t.pos[exit_node], f"{names[side]}'s exit", size, colour))
        rings[exit_node] = max(rings.get(exit_node, 0), size)
    traces += _folds(t)
    if selected is not None:
        rings[selected] = HIGHLIGHT_RING
        traces.append(ring_trace(t.pos[selected], "selected", HIGHLIGHT_RING, "black") | {"showlegend": False})
    traces.append(label_trace(t.plan, set(), set(), set(), rings))
    layout = tree_layout(t.plan, t.width, title)
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
                      width: int = WIDTH, *, selected: int | None = None,
                      clicks: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
    """Two figures `width` px wide at identical node positions, one per tree: its nodes coloured by `metric` on one
    colour scale for both (by side without a metric), its accepted path, exit and bonus, the Decode tree's labels; the
    other tree's nodes as open grey rings with grey labels.

    `selected`: a union node ringed in both; `clicks`: the figures ask their app views for clicks (figure_view.py)
    and a "+N" fold says a click unfolds it (`tree` planned with `expanded` draws a "−" after what it opened)."""
    t = tree or shared_layout(a, b, width)
    if metric is not None and metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; expected one of {list(METRICS)}")
    values = metric_values(t, metric) if metric is not None else None
    seen = [x for side in values for x in side if x is not None] if values is not None else []
    scale = colour_range(seen)  # the Decode tree's rule: one value reads from 0 up to it, not padded both ways
    return tuple(_side(t, side, names, values, metric, scale, titles[side], selected, clicks) for side in (0, 1))


def _side(t: SharedTree, side: int, names: Sequence[str], values, metric: str | None, scale: tuple[float, float],
          title: str | None, selected: int | None = None, clicks: bool = False) -> dict[str, Any]:
    r = (t.a, t.b)[side]
    mine, theirs = (A_ONLY, B_ONLY) if side == 0 else (B_ONLY, A_ONLY)
    here = [n.id for n in t.nodes if n.side in (BOTH, mine)]
    absent = [n.id for n in t.nodes if n.side == theirs]
    path = [t.union_id(side, v) for v in r.accepted]
    traces = [
        edge_trace(t.graph.subgraph(here), t.plan.pos) | {"name": "edges"},
        _edges(t, [v for v in absent if v in t.pos], f"edges only in {names[1 - side]}",
               {"color": ABSENT_COLOUR, "width": 1, "dash": "dot"}),
        line_trace([t.pos[v] for v in path], "accepted path", 5),
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
            marker.update(color=[values[side][v] for v in ids], colorscale=colorscale_of(METRICS[metric].colorscale),
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
    traces += _bonus(t, side, "bonus", PATH_COLOUR)
    exit_node = t.union_id(side, r.exit_node)
    traces.append(ring_trace(t.pos[exit_node], "exit", EXIT_RING, PATH_COLOUR))
    traces += _folds(t, clicks)
    own_bonus, other_bonus = t.bonus[side], t.bonus[1 - side]
    # The other side's bonus token, drafted by neither tree, is no node of this one: its place stays empty.
    hide = {other_bonus} if other_bonus is not None and other_bonus >= len(t.nodes) and other_bonus != own_bonus \
        else set()
    rings = {exit_node: EXIT_RING}
    if selected is not None and selected in t.pos and selected not in hide:
        rings[selected] = HIGHLIGHT_RING
        traces.append(ring_trace(t.pos[selected], "selected", HIGHLIGHT_RING, "black") | {"showlegend": False})
    on_path = set(path) | ({own_bonus} if own_bonus is not None else set())
    traces.append(label_trace(t.plan, on_path, set(absent) - on_path, hide, rings))
    layout = tree_layout(t.plan, t.width, title)
    layout["meta"] = {**layout["meta"], "clicks": clicks}
    return {"data": [x for x in traces if x is not None], "layout": layout}


def pair_figure_dicts(a: RoundRecord, b: RoundRecord, names: Sequence[str] = ("A", "B"), metric: str | None = "w",
                      titles: Sequence[str | None] = (None, None), width: int = PAIR_WIDTH, *,
                      selected: int | None = None, expanded: Iterable[int] = (),
                      tree: SharedTree | None = None) -> tuple[dict, dict]:
    """The app's pair: `side_figure_dicts` planned for a view `width` px wide with the `expanded` folds open
    (`pair_tree`, or `tree` where the caller has it), the `selected` union node ringed in both, clicks asked for, and
    each figure taller by its legend's rows below the tree (the rows come out of the plot's height otherwise: three
    depths pressed into 100 px)."""
    t = tree or pair_tree(a, b, width, selected, expanded)
    figs = side_figure_dicts(a, b, names, metric, titles, t, selected=selected, clicks=True)
    rows = max(legend_rows(f["data"], t.width) for f in figs)  # one height for both: their rows stay level
    for f in figs:
        f["layout"]["height"] += LEGEND_ROW * rows
    return figs


def pair_tree(a: RoundRecord, b: RoundRecord, width: int = PAIR_WIDTH, selected: int | None = None,
              expanded: Iterable[int] = ()) -> SharedTree:
    """The pair's shared layout for `width` px with the `expanded` folds open; a selection moves nothing, unless it
    would be folded away (then it is kept drawn)."""
    t = shared_layout(a, b, width, expanded)
    if selected is not None and selected < t.size and selected not in t.pos:
        t = shared_layout(a, b, width, expanded, (selected,))
    return t


def legend_rows(data: Sequence[dict], width: int) -> int:
    """How many rows a horizontal legend of `data`'s entries takes in a figure `width` px wide (packed left to right,
    as plotly wraps them, with each entry's width over-estimated)."""
    room, rows, used = max(width - MARGIN["l"] - MARGIN["r"], 1), 0, math.inf
    for trace in data:
        if trace.get("showlegend", True) and trace["name"] != "labels":
            item = LEGEND_ITEM + LEGEND_CHAR * len(trace["name"])
            rows, used = (rows, used + item) if used + item <= room else (rows + 1, item)
    return rows


# --- pieces ---------------------------------------------------------------------------------------------------------


def metric_values(t: SharedTree, metric: str) -> tuple[list, list]:
    """Per side, the metric's value at each union node (None where that tree lacks the node or has no value)."""
    out = []
    for side, r in enumerate((t.a, t.b)):
        attrs = r.to_dict()["nodes"]
        out.append([None if t.own(side, v) is None else node_metric(attrs[t.own(side, v)], metric)
                    for v in range(len(t.nodes))])
    return out[0], out[1]


def _edges(t: SharedTree, children, name: str, line: dict) -> dict[str, Any] | None:
    xs, ys = [], []
    for v in children:
        u = t.parents[v]
        xs += [t.pos[u][0], t.pos[v][0], None]  # None breaks the line between edges
        ys += [t.pos[u][1], t.pos[v][1], None]
    return scatter(name, xs, ys, "lines", line=line, hoverinfo="skip") if xs else None


def _bonus(t: SharedTree, side: int, name: str, colour: str) -> list[dict[str, Any]]:
    """The dashed edge from a side's exit node to its bonus token, and the bonus token's marker in a trace of its own
    (as the Decode tree's: a point of the edge lay on the exit node and took its hover and clicks); its label is the
    labels trace's, as every node's."""
    r, v = (t.a, t.b)[side], t.bonus[side]
    if v is None or v not in t.pos:
        return []
    u = t.union_id(side, r.exit_node)
    return [bonus_edge(t.pos[u], t.pos[v], colour, f"{name} edge"),
            bonus_trace(r.bonus_text, r.bonus_token, t.pos[v], colour, name, key=v)]


def _folds(t: SharedTree, clicks: bool = False) -> list[dict[str, Any]]:
    """The "+N" folds of the plan and the "−" after each opened one. Without `clicks` a fold stays folded, so its
    hover says only what it holds."""
    opened = [v[1] for v in t.plan.pos if isinstance(v, tuple) and v[0] == "less"]
    out = [opened_trace(t.plan, opened)] if opened else []
    if not t.plan.folded:
        return out
    trace = folded_trace(t.graph, t.plan, {})
    if clicks:
        return [trace, *out]
    hover = [h.replace("<br>click to unfold", "") for h in trace["hovertext"]]
    return [trace | {"name": "folded (+N lighter siblings)", "hovertext": hover}, *out]


def _markers(t: SharedTree, ids: list[int], name: str, marker: dict, names: Sequence[str]) -> dict[str, Any]:
    return scatter(name, [t.pos[v][0] for v in ids], [t.pos[v][1] for v in ids], "markers", marker=marker) | {
        "customdata": list(ids),  # union node ids: the same in every figure of a pair
        "hovertext": [node_hover(t, v, names) for v in ids],
        "hoverinfo": "text",
    }


def node_hover(t: SharedTree, v: int, names: Sequence[str] = ("A", "B")) -> str:
    """A union node's hover text: its token and path, where it is, and each tree's numbers there."""
    n = t.nodes[v]
    where = {BOTH: "in both trees", A_ONLY: f"in {names[0]}'s tree only", B_ONLY: f"in {names[1]}'s tree only"}
    path = "".join(t.nodes[u].text for u in _union_path(t, v)[1:])
    lines = [f"<b>{quoted_token(n.text)}</b>  depth {n.depth}, {where[n.side]}", f"path {quoted_token(path)}"]
    for side, r in enumerate((t.a, t.b)):
        u = t.own(side, v)
        if u is None:
            continue
        q = None if u == 0 else math.exp(r.draft_logprobs[u])
        mark = " (accepted)" if u in r.accepted else ""
        lines.append(f"{names[side]} #{u}{mark}: P {number_text(r.P[u])}  w {number_text(r.w[u])}  p_edge "
                     f"{number_text(r.p_edge[u])}  draft prob {number_text(q)}")
    return "<br>".join(lines)


def node_details(t: SharedTree, v: int, names: Sequence[str] = ("A", "B")) -> str:
    """A clicked union node in a few lines: its token and path, and in each tree its numbers and what the verifier did
    there (accepted, the exit, rejected and the token the target took instead, not reached)."""
    if v >= len(t.nodes):  # a bonus token neither tree drafted
        side = t.bonus.index(v)
        r = (t.a, t.b)[side]
        return (f"<b>{quoted_token(r.bonus_text)}</b>: {names[side]}'s bonus token (token_id {r.bonus_token}), "
                "drawn at its exit node from the residual law")
    n = t.nodes[v]
    lines = node_hover(t, v, names).split("<br>")[:2]
    for side, r in enumerate((t.a, t.b)):
        u = t.own(side, v)
        if u is None:
            lines.append(f"{names[side]}: not drafted" + (", its bonus token" if t.bonus[side] == n.id else ""))
            continue
        said = html.escape(verdict_line(_graph(t, side), u), quote=False)
        bonus = " (and the bonus token)" if t.bonus[side] == n.id else ""
        lines.append(f"{names[side]} #{u}: {said}{bonus}<br>    P {number_text(r.P[u])}, w {number_text(r.w[u])}, "
                     f"p_edge {number_text(r.p_edge[u])}, rho {number_text(r.rho[u])}")
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
