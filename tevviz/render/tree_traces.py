"""The draft tree's pieces as plotly trace dicts: edges, node markers and their tooltips, labels, rings, the bonus
token, ghosts and "+N" folds; the Decode tree (tree_figure.py) and the compared trees (compare_figure.py) draw them.
"""

from __future__ import annotations

import html
import math
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import networkx as nx

from tevviz.render.colours import colorscale_of, colour_bar, colour_range
from tevviz.render.graph import METRICS
from tevviz.render.labels import FONT_FAMILY, FONT_SIZE, markup, token_label
from tevviz.render.tree_plan import TreePlan, less_node, more_node
from tevviz.render.verdicts import verdict_line

BONUS = "bonus"  # the bonus token's customdata; pass as `highlight_node` to ring it
PATH_COLOUR = "crimson"
NO_VALUE_COLOUR = "lightgrey"
GHOST_COLOUR = "#8a8a8a"
LABEL_COLOUR = "#303030"
MARK_COLOUR = "#1f77b4"  # the nodes of a drafter's-rows cell
NODE_SIZE = 12
EXIT_RING = 24
HIGHLIGHT_RING = 34


def number_or_zero(x: float | None, f=float) -> float:
    """`f(x)`, or 0.0 where the number is missing or NaN (a node the target never scored)."""
    return 0.0 if x is None or math.isnan(x) else f(x)


# Trace dicts (and tree_frame's layout) carry plotly's property names with the values its validators would store: a
# colourscale name is expanded to its list of stops, a layout title string becomes {"text": ...};
# tests/render/test_render.py checks the dicts against validated figures.


def scatter(name: str, x: list, y: list, mode: str, **props: Any) -> dict[str, Any]:
    """A scatter trace as the plain dict plotly's validators would make of it."""
    return {"type": "scatter", "name": name, "x": x, "y": y, "mode": mode, **props}


def edge_trace(G: nx.DiGraph, pos: Mapping[Hashable, tuple]) -> dict[str, Any]:
    """The tree's edges shown, and each "+N" fold's edge to its parent, as one grey line trace."""
    xs, ys = [], []
    for u, v in G.edges:
        if u in pos and v in pos:
            xs += [pos[u][0], pos[v][0], None]  # None breaks the line between edges
            ys += [pos[u][1], pos[v][1], None]
    for v in pos:  # a "+N" fold hangs from its parent
        if isinstance(v, tuple) and v[0] == "more" and v[1] in G:
            xs += [pos[v[1]][0], pos[v][0], None]
            ys += [pos[v[1]][1], pos[v][1], None]
    return scatter("edges", xs, ys, "lines", line={"color": "#b0b0b0", "width": 1}, hoverinfo="skip")


def line_trace(points: list, name: str, width: float, colour: str = PATH_COLOUR, dash: str = "solid",
               opacity: float = 0.6) -> dict[str, Any]:
    """A line through `points`, by default in the path colour (an accepted path)."""
    return scatter(name, [p[0] for p in points], [p[1] for p in points], "lines",
                   line={"color": colour, "width": width, "dash": dash}, opacity=opacity, hoverinfo="skip")


def bonus_edge(exit_point: tuple, bonus_point: tuple, colour: str = PATH_COLOUR,
               name: str = "bonus edge") -> dict[str, Any]:
    """The dashed edge from the exit node to the bonus token."""
    return scatter(name, [exit_point[0], bonus_point[0]], [exit_point[1], bonus_point[1]], "lines",
                   line={"color": colour, "width": 2, "dash": "dash"}, hoverinfo="skip", showlegend=False)


def bonus_trace(text: str | None, token_id: int | None, point: tuple, colour: str = PATH_COLOUR,
                name: str = "bonus", key: Hashable = BONUS) -> dict[str, Any]:
    """The bonus token: its own trace, so no point without a tooltip lies on the exit node; `key` is its customdata
    (what a click on it selects)."""
    hover = (f"<b>bonus {markup(token_label(text))}</b>  token_id {token_id}<br>"
             "drawn at the exit node from its residual law (the target's law less the children's tokens)")
    return scatter(name, [point[0]], [point[1]], "markers",
                   marker={"size": 14, "color": "white", "line": {"color": colour, "width": 2}},
                   customdata=[key], hovertext=[hover], hoverinfo="text")


def dim(traces: list[dict[str, Any]], lit: set) -> None:
    """The node markers outside `lit` faded and those in it enlarged, in place."""
    for t in traces:
        if t["name"] in ("nodes", "no value"):
            t["marker"] |= {"opacity": [1.0 if v in lit else 0.2 for v in t["customdata"]],
                            "size": [NODE_SIZE + 6 if v in lit else NODE_SIZE for v in t["customdata"]]}


def emptied(trace: dict[str, Any]) -> dict[str, Any]:
    """A trace with its points taken out (its legend entry stays)."""
    return trace | {k: [] for k in ("x", "y", "customdata", "hovertext") if k in trace}


def ghost_traces(drawn: nx.DiGraph, pos: Mapping[Hashable, tuple], ghosts: Sequence[Mapping[str, Any]],
                 ghost_id: Mapping[int, int], bounds: bool = True) -> list[dict[str, Any]]:
    """The optimal tree's nodes the draft lacks: dashed grey edges and open grey markers.

    Where the optimal tree does not bound the round (`bounds` false), it is named the best fixed tree it is."""
    shown = [g for g in ghosts if ghost_id[g["node"]] in pos]
    xs, ys = [], []
    for g in shown:
        v = ghost_id[g["node"]]
        (u,) = drawn.predecessors(v)
        xs += [pos[u][0], pos[v][0], None]
        ys += [pos[u][1], pos[v][1], None]
    points = [pos[ghost_id[g["node"]]] for g in shown]
    marker = {"symbol": "circle-open", "size": NODE_SIZE, "color": GHOST_COLOUR, "line": {"width": 2}}
    name = "ghost branches (optimal tree)" if bounds else "ghost branches (best fixed tree, not a ceiling here)"
    where = "optimal tree" if bounds else "best fixed tree"
    return [
        scatter("ghost edges", xs, ys, "lines", line={"color": GHOST_COLOUR, "width": 1, "dash": "dash"},
                hoverinfo="skip"),
        scatter(name, [p[0] for p in points], [p[1] for p in points], "markers", marker=marker,
                customdata=[f"ghost:{g['node']}" for g in shown], hoverinfo="text",
                hovertext=[f"<b>ghost {markup(token_label(g['text']))}</b>  P {g['P']:.4g}<br>in the {where}, not "
                           f"drafted<br>depth {g['depth']}<br>path {quoted_token(g['path_text'])}" for g in shown]),
    ]


def folded_trace(G: nx.DiGraph, plan: TreePlan, values: Mapping) -> dict[str, Any]:
    """One grey square per "+N" fold; a click unfolds it."""
    folds = list(plan.folded.items())
    points = [plan.pos[more_node(u)] for u, _ in folds]
    hover = []
    for u, kids in folds:
        mass = sum(number_or_zero(G.nodes[c].get("P")) for c in kids if c in G)
        hover.append(f"<b>{len(kids)} lighter children of node {u}</b> folded here (target flow P {mass:.3g} "
                     "together)<br>click to unfold")
    return scatter("folded (+N: click to unfold)", [p[0] for p in points], [p[1] for p in points], "markers",
                   marker={"symbol": "square", "size": NODE_SIZE, "color": "#d9d9d9",
                           "line": {"color": "#707070", "width": 1}},
                   customdata=[f"more:{u}" for u, _ in folds], hovertext=hover, hoverinfo="text")


def opened_trace(plan: TreePlan, opened: list) -> dict[str, Any]:
    """One small grey square after the children of each fold that was opened; a click folds them again."""
    points = [plan.pos[less_node(u)] for u in opened]
    return scatter("opened (\u2212: click to fold again)", [p[0] for p in points], [p[1] for p in points], "markers",
                   marker={"symbol": "square", "size": NODE_SIZE - 4, "color": "#f0f0f0",
                           "line": {"color": "#707070", "width": 1}},
                   customdata=[f"less:{u}" for u in opened],
                   hovertext=[f"the children of node {u} unfolded<br>click to fold the lighter ones again"
                              for u in opened], hoverinfo="text")


# A white outline 2 px wide round each glyph, solid: the accepted path's 5 px line runs up through its nodes' labels,
# and a 1 px halo left a short pink label on it unreadable.
LABEL_HALO = ", ".join(f"{x}px {y}px 0 white" for x in (-2, 0, 2) for y in (-2, 0, 2) if x or y) + ", 0 0 3px white"


def label_trace(plan: TreePlan, on_path: set, ghost_nodes: set, hide: set, rings: Mapping) -> dict[str, Any]:
    """Every label in one text trace, above its node (above its ring where it has one); the accepted path's in the
    path colour, ghosts' grey."""
    items = [(v, t) for v, t in plan.text.items() if v in plan.pos and v not in hide]
    colours = [PATH_COLOUR if v in on_path else GHOST_COLOUR if v in ghost_nodes or isinstance(v, tuple)
               else LABEL_COLOUR for v, _ in items]
    # Invisible markers of the nodes' size put each label above its node, not on it.
    return scatter("labels", [plan.pos[v][0] for v, _ in items], [plan.pos[v][1] for v, _ in items], "markers+text",
                   marker={"size": [rings.get(v, NODE_SIZE) for v, _ in items], "opacity": 0},
                   text=[markup(t) for _, t in items],
                   textposition="top center",
                   # A white halo: a short label on the accepted path sat pink on its pink line and vanished.
                   textfont={"size": FONT_SIZE, "family": FONT_FAMILY, "color": colours, "shadow": LABEL_HALO},
                   hoverinfo="skip", showlegend=False)


def node_traces(G: nx.DiGraph, pos: Mapping[Hashable, tuple], values: Mapping, metric: str,
                scale: str = "auto") -> list[dict[str, Any]]:
    """The nodes shown in at most two traces: "nodes" coloured by the metric, grey "no value" where it is null."""
    spec = METRICS[metric]
    shown = [v for v in G if v in pos]
    valued = [v for v in shown if values[v] is not None]
    unvalued = [v for v in shown if values[v] is None]
    colours, colorbar = colour_bar([values[v] for v in valued], metric, scale)
    lo, hi = colour_range(colours)
    marker = {
        "size": NODE_SIZE,
        "color": colours,
        "colorscale": colorscale_of(spec.colorscale),
        "cmin": lo,
        "cmax": hi,
        "showscale": bool(valued),
        "colorbar": colorbar,
        "line": {"color": "#404040", "width": 0.5},
    }
    traces = [_markers(G, pos, valued, "nodes", marker)]
    if unvalued:
        grey = {"size": NODE_SIZE, "color": NO_VALUE_COLOUR, "line": dict(marker["line"])}
        traces.append(_markers(G, pos, unvalued, "no value", grey))
    return traces


def _markers(G: nx.DiGraph, pos: Mapping[Hashable, tuple], nodes: list, name: str, marker: dict) -> dict[str, Any]:
    """`nodes` as one marker trace, each point with its node id and its tooltip."""
    return scatter(name, [pos[v][0] for v in nodes], [pos[v][1] for v in nodes], "markers", marker=marker) | {
        "customdata": list(nodes),  # node ids in the figure JSON, so a point can be traced back to its node
        "hovertext": [_hover(G, v) for v in nodes],
        "hoverinfo": "text",
    }


def ring_trace(point: tuple, name: str, size: int, colour: str) -> dict[str, Any]:
    """An open ring around one point (the exit node, the selection)."""
    return scatter(name, [point[0]], [point[1]], "markers",
                   marker={"symbol": "circle-open", "size": size, "color": colour, "line": {"width": 3}},
                   hoverinfo="skip")


def marked_trace(points: list) -> dict[str, Any]:
    """Rings around the nodes marked together (a drafter's-rows cell: a token at its depth)."""
    return scatter("marked", [p[0] for p in points], [p[1] for p in points], "markers", hoverinfo="skip",
                   showlegend=False, marker={"symbol": "circle-open", "size": HIGHLIGHT_RING, "color": MARK_COLOUR,
                                             "line": {"width": 3}})


def quoted_token(text: str | None) -> str:
    """A token as a tooltip shows it: repr makes whitespace and newlines visible; escaping keeps plotly from reading
    '<...>' as markup."""
    return html.escape(repr(text), quote=False)


def number_text(value: float | None) -> str:
    """A number as a tooltip shows it: three significant digits, a dash where there is none."""
    return "—" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.3g}"


def _hover(G: nx.DiGraph, v: int) -> str:
    """A node's tooltip: its token and verdict, the draft's and the target's numbers, the exit law, what is missing."""
    attrs = G.nodes[v]
    logprob = attrs.get("draft_logprob")
    q_edge = None if logprob is None or math.isnan(logprob) else math.exp(logprob)
    q_path = None if attrs.get("score") is None or math.isnan(attrs["score"]) else math.exp(attrs["score"])
    lines = [
        f"<b>{quoted_token(attrs['text'])}</b>  node {v}, depth {attrs['depth']}",
        f"<i>{html.escape(verdict_line(G, v), quote=False)}</i>",
        f"draft: edge prob {number_text(q_edge)}, path prob q(v) {number_text(q_path)}",
        f"target: edge prob p {number_text(attrs.get('p_edge'))}, flow P {number_text(attrs.get('P'))}",
        f"exit: rho {number_text(attrs.get('rho'))}, w {number_text(attrs.get('w'))}",
    ]
    if attrs.get("accept") is not None:  # a sampled chain: the speculative verifier accepts with min(1, p/q), not p
        lines.append(f"speculative accept {number_text(attrs['accept'])}")
    missing = sorted(attrs.get("missing") or [], key=lambda m: -m["gain"])[:3]
    if missing:
        lines.append("missing: " + ", ".join(f"{quoted_token(m.get('text'))} +{m['gain']:.3g}" for m in missing))
    return "<br>".join(lines)
