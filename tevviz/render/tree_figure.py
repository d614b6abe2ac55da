"""Round record -> plotly figure of the draft tree, coloured by one node metric."""

from __future__ import annotations

import functools
import html
import math
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import networkx as nx
import plotly.graph_objects as go

from tevviz.engine.records import dict_bounds
from tevviz.render.graph import METRICS, node_metric, round_graph
from tevviz.render.layout import Point, tidy_layout

BONUS = "bonus"  # pass as `highlight_node` to ring the bonus token
MAX_LABELLED_NODES = 64  # above this, token labels would overlap; hover still shows them
PATH_COLOUR = "crimson"
NO_VALUE_COLOUR = "lightgrey"
GHOST_COLOUR = "#8a8a8a"
WIDTH = 900
ROW_HEIGHT = 70
MAX_HEIGHT = 6000


def tree_figure(
    round_dict: Mapping[str, Any], metric: str = "P", highlight_node: Hashable | None = None, title: str | None = None,
    ghosts: Sequence[Mapping[str, Any]] = (),
) -> go.Figure:
    """Draw one round's draft tree: nodes coloured by `metric`, accepted path, exit, bonus token, optional highlight,
    and the optimal tree's `ghosts` (records.Ghost as dicts) dashed and grey where given (named the best fixed tree's
    on a sampled chain, which the optimal tree does not bound)."""
    # The dict is already in the form plotly's validators would produce, so the per-property validation is skipped.
    return go.Figure(tree_figure_dict(round_dict, metric, highlight_node, title, ghosts), _validate=False)


def tree_figure_dict(
    round_dict: Mapping[str, Any], metric: str = "P", highlight_node: Hashable | None = None, title: str | None = None,
    ghosts: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """`tree_figure` as a plain {"data", "layout"} dict, written as plotly's validation would normalise it."""
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; expected one of {list(METRICS)}")
    G = round_graph(round_dict)
    bonus = max(G) + 1
    drawn = _with_bonus(G, bonus)
    ghost_id = {g["node"]: bonus + 1 + i for i, g in enumerate(ghosts)}
    for g in ghosts:
        # Unscored ids after the bonus: a ghost sorts after the draft's own children of its anchor.
        drawn.add_node(ghost_id[g["node"]], score=None)
        drawn.add_edge(g["anchor"] if g["parent_ghost"] is None else ghost_id[g["parent_ghost"]], ghost_id[g["node"]])
    pos = tidy_layout(drawn)
    exit_node = G.graph["exit_node"]

    traces = [
        _edge_trace(G, pos),
        _line_trace([pos[v] for v in G.graph["accepted"]], "accepted path", width=5),
        _bonus_trace(G.graph, pos[exit_node], pos[bonus]),
        *_node_traces(G, pos, metric),
        _ring_trace(pos[exit_node], "exit", size=24, colour=PATH_COLOUR),
    ]
    if ghosts:
        traces += _ghost_traces(drawn, pos, ghosts, ghost_id, len(G) + len(ghosts) <= MAX_LABELLED_NODES,
                                dict_bounds(round_dict))
    if highlight_node is not None:
        node = bonus if highlight_node == BONUS else highlight_node
        if node not in pos:
            raise ValueError(f"highlight_node {highlight_node!r} is not a node of this round")
        traces.append(_ring_trace(pos[node], "highlight", size=38, colour="black"))
    return {"data": traces, "layout": _layout(pos, title)}


def _with_bonus(G: nx.DiGraph, bonus: int) -> nx.DiGraph:
    """G plus the bonus token as the exit node's last child, so the layout keeps a free slot for it."""
    H = G.copy()
    # An unscored node with the largest id sorts after every sibling.
    H.add_node(bonus, score=None)
    H.add_edge(G.graph["exit_node"], bonus)
    return H


# Trace dicts below carry plotly's property names with the values its validators would store: a colourscale name is
# expanded to its list of stops, a layout title string becomes {"text": ...}; tests/test_render.py checks the dicts
# against validated figures.


def _scatter(name: str, x: list, y: list, mode: str, **props: Any) -> dict[str, Any]:
    return {"type": "scatter", "name": name, "x": x, "y": y, "mode": mode, **props}


def _edge_trace(G: nx.DiGraph, pos: Mapping[Hashable, Point]) -> dict[str, Any]:
    xs, ys = [], []
    for u, v in G.edges:
        xs += [pos[u][0], pos[v][0], None]  # None breaks the line between edges
        ys += [pos[u][1], pos[v][1], None]
    return _scatter("edges", xs, ys, "lines", line={"color": "#b0b0b0", "width": 1}, hoverinfo="skip")


def _line_trace(points: list[Point], name: str, width: float) -> dict[str, Any]:
    return _scatter(name, [p[0] for p in points], [p[1] for p in points], "lines",
                    line={"color": PATH_COLOUR, "width": width}, opacity=0.6, hoverinfo="skip")


def _bonus_trace(info: Mapping[str, Any], exit_point: Point, bonus_point: Point) -> dict[str, Any]:
    """Dashed edge from the exit node to the bonus token, marker only at the bonus end."""
    label = _token(info["bonus_text"])
    hover = f"bonus {label}<br>token_id {info.get('bonus_token_id')}"
    return _scatter(
        "bonus", [exit_point[0], bonus_point[0]], [exit_point[1], bonus_point[1]], "lines+markers+text",
        line={"color": PATH_COLOUR, "width": 2, "dash": "dash"},
        marker={"size": [0, 14], "color": "white", "line": {"color": PATH_COLOUR, "width": 2}},
        text=["", label],
        textposition="bottom center",
        hovertext=["", hover],
        hoverinfo=["skip", "text"],
    )


def _ghost_traces(drawn: nx.DiGraph, pos: Mapping[Hashable, Point], ghosts: Sequence[Mapping[str, Any]],
                  ghost_id: Mapping[int, int], labelled: bool, bounds: bool = True) -> list[dict[str, Any]]:
    """The optimal tree's nodes the draft lacks: dashed grey edges, open grey markers labelled with token and P.

    Where the optimal tree does not bound the round (`bounds` false), it is named the best fixed tree it is."""
    xs, ys = [], []
    for g in ghosts:
        v = ghost_id[g["node"]]
        (u,) = drawn.predecessors(v)
        xs += [pos[u][0], pos[v][0], None]
        ys += [pos[u][1], pos[v][1], None]
    points = [pos[ghost_id[g["node"]]] for g in ghosts]
    marker = {"symbol": "circle-open", "size": 12 if labelled else 8, "color": GHOST_COLOUR, "line": {"width": 2}}
    name = "ghost branches (optimal tree)" if bounds else "ghost branches (best fixed tree, not a ceiling here)"
    trace = _scatter(name, [p[0] for p in points], [p[1] for p in points],
                     "markers+text" if labelled else "markers", marker=marker)
    if labelled:
        trace["text"] = [f"{_token(g['text'])} {g['P']:.2g}" for g in ghosts]
    return [
        _scatter("ghost edges", xs, ys, "lines", line={"color": GHOST_COLOUR, "width": 1, "dash": "dash"},
                 hoverinfo="skip"),
        trace | {"textposition": "bottom center", "textfont": {"size": 9, "color": GHOST_COLOUR},
                 "hovertext": [f"<b>ghost {_token(g['text'])}</b>  P {g['P']:.4g}<br>depth {g['depth']}<br>path "
                               f"{_token(g['path_text'])}" for g in ghosts],
                 "hoverinfo": "text"},
    ]


def _node_traces(G: nx.DiGraph, pos: Mapping[Hashable, Point], metric: str) -> list[dict[str, Any]]:
    """All nodes in at most two traces: the coloured "nodes", and grey "no value" for nodes where the metric is null."""
    spec = METRICS[metric]
    values = {v: node_metric(attrs, metric) for v, attrs in G.nodes(data=True)}
    valued = [v for v in G if values[v] is not None]
    unvalued = [v for v in G if values[v] is None]
    colours = [values[v] for v in valued]
    marker = {
        "size": 12 if len(G) <= MAX_LABELLED_NODES else 8,
        "color": colours,
        "colorscale": _colorscale(spec.colorscale),
        "cmin": min(colours, default=0.0),
        "cmax": max(colours, default=1.0),
        "showscale": bool(valued),
        "colorbar": {"title": {"text": spec.label, "side": "right"}},
        "line": {"color": "#404040", "width": 0.5},
    }
    traces = [_markers(G, pos, valued, "nodes", marker)]
    if unvalued:
        grey = {"size": marker["size"], "color": NO_VALUE_COLOUR, "line": dict(marker["line"])}
        traces.append(_markers(G, pos, unvalued, "no value", grey))
    return traces


def _colorscale(name: str) -> list[list]:
    """A named colourscale as the [[position, colour], ...] stops plotly's validator expands it to."""
    return [list(stop) for stop in _validated_colorscale(name)]


@functools.cache
def _validated_colorscale(name: str) -> tuple[tuple, ...]:
    return tuple(map(tuple, go.scatter.Marker(colorscale=name).to_plotly_json()["colorscale"]))


def _markers(G: nx.DiGraph, pos: Mapping[Hashable, Point], nodes: list, name: str, marker: dict) -> dict[str, Any]:
    labelled = len(G) <= MAX_LABELLED_NODES
    trace = _scatter(name, [pos[v][0] for v in nodes], [pos[v][1] for v in nodes],
                     "markers+text" if labelled else "markers", marker=marker)
    if labelled:
        trace["text"] = [_token(G.nodes[v]["text"]) for v in nodes]
    return trace | {
        "textposition": "top center",
        "textfont": {"size": 10},
        "customdata": list(nodes),  # node ids in the figure JSON, so a point can be traced back to its node
        "hovertext": [_hover(v, G.nodes[v]) for v in nodes],
        "hoverinfo": "text",
    }


def _ring_trace(point: Point, name: str, size: int, colour: str) -> dict[str, Any]:
    return _scatter(name, [point[0]], [point[1]], "markers",
                    marker={"symbol": "circle-open", "size": size, "color": colour, "line": {"width": 3}},
                    hoverinfo="skip")


def _token(text: str | None) -> str:
    """repr makes whitespace and newlines visible; escaping keeps plotly from reading '<...>' as markup."""
    return html.escape(repr(text), quote=False)


def _number(value: float | None) -> str:
    return "—" if value is None else f"{value:.3g}"


def _hover(v: Hashable, attrs: Mapping[str, Any]) -> str:
    logprob = attrs.get("draft_logprob")
    q = None if logprob is None else math.exp(logprob)
    lines = [
        f"<b>{_token(attrs['text'])}</b>  id {v}",
        f"depth {attrs['depth']}",
        f"draft prob {_number(q)}   p_edge {_number(attrs.get('p_edge'))}",
        f"P {_number(attrs.get('P'))}   rho {_number(attrs.get('rho'))}   w {_number(attrs.get('w'))}",
    ]
    if attrs.get("accept") is not None:  # a sampled chain: the speculative verifier accepts with min(1, p/q), not p
        lines.append(f"speculative accept {_number(attrs['accept'])}")
    missing = sorted(attrs.get("missing") or [], key=lambda m: -m["gain"])[:3]
    if missing:
        lines.append("missing: " + ", ".join(f"{_token(m.get('text'))} +{m['gain']:.3g}" for m in missing))
    return "<br>".join(lines)


# The title sits in the top margin, which grows to hold it (`automargin`: a title of two lines); the legend sits below
# the tree, where plotly grows the bottom margin to hold its rows. Above the tree, the legend wrapped to a second row
# once ghost branches were on and covered the title's last line: its underscores (C_p read "C  p").
TITLE = {"x": 0.0, "xanchor": "left", "xref": "paper", "y": 1.0, "yanchor": "top", "yref": "container",
         "pad": {"t": 12}, "automargin": True}
LEGEND = {"orientation": "h", "yanchor": "top", "y": -0.02, "x": 0.0}


def _layout(pos: Mapping[Hashable, Point], title: str | None) -> dict[str, Any]:
    xs = [p[0] for p in pos.values()]
    rows = 1 - min(p[1] for p in pos.values())  # depth levels, bonus row included
    return {
        **({} if title is None else {"title": {"text": title, **TITLE, "pad": dict(TITLE["pad"])}}),
        "width": WIDTH,
        "height": min(MAX_HEIGHT, 160 + ROW_HEIGHT * rows),
        "xaxis": {"visible": False, "range": [min(xs) - 1, max(xs) + 1]},
        "yaxis": {"visible": False, "range": [-rows + 0.4, 0.6]},
        "plot_bgcolor": "white",
        "hovermode": "closest",
        "legend": dict(LEGEND),
        "margin": {"l": 20, "r": 20, "t": 60 if title else 30, "b": 20},
    }
