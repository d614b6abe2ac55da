"""Round record -> plotly figure of the draft tree, coloured by one node metric, labelled where labels fit.

What is drawn and labelled in the room given is `tree_plan.plan_tree`'s choice; every node (ghosts, the bonus token and
"+N" folds included) carries its id in `customdata`, which the app's click bridge sends back (`node_key`).
"""

from __future__ import annotations

import html
import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any

import networkx as nx
import plotly.graph_objects as go

from tevviz.engine.records.records import dict_bounds
from tevviz.render.colours import SCALES, colorscale_of, colour_bar, colour_range
from tevviz.render.graph import METRICS, node_metric, round_graph
from tevviz.render.labels import FONT_FAMILY, FONT_SIZE, markup, token_label
from tevviz.render.tree_plan import TreePlan, less_node, more_node, plan_tree
from tevviz.render.verdicts import verdict_line

BONUS = "bonus"  # pass as `highlight_node` to ring the bonus token
PATH_COLOUR = "crimson"
NO_VALUE_COLOUR = "lightgrey"
GHOST_COLOUR = "#8a8a8a"
LABEL_COLOUR = "#303030"
MARK_COLOUR = "#1f77b4"  # the nodes of a drafter's-rows cell
WIDTH = 900
ROW_HEIGHT = 70
MAX_HEIGHT = 6000
MARGIN = {"l": 16, "r": 76, "b": 20}  # the right margin holds the colour bar, so the plot area is known in px
NODE_SIZE = 12
EXIT_RING = 24
HIGHLIGHT_RING = 34
TOP_LABELLED = 16  # nodes labelled before the rest, by the colour metric
# px kept clear at each side of the nodes: a ring (the selection's is the widest) on an outermost node stays whole
EDGE = HIGHLIGHT_RING // 2 + 3


def tree_figure(round_dict: Mapping[str, Any], metric: str = "P", highlight_node: Hashable | None = None,
                title: str | None = None, ghosts: Sequence[Mapping[str, Any]] = (), **options: Any) -> go.Figure:
    """Draw one round's draft tree (`tree_figure_dict`'s options) as a plotly Figure."""
    # The dict is already in the form plotly's validators would produce, so the per-property validation is skipped.
    return go.Figure(tree_figure_dict(round_dict, metric, highlight_node, title, ghosts, **options), _validate=False)


def tree_figure_dict(
    round_dict: Mapping[str, Any], metric: str = "P", highlight_node: Hashable | None = None, title: str | None = None,
    ghosts: Sequence[Mapping[str, Any]] = (), *, width: int = WIDTH, expanded: Iterable[int] = (),
    walk: int | None = None, scale: str = "auto", rank_by: str | None = None, marked: Iterable[int] = (),
    graph: nx.DiGraph | None = None, matches: Iterable[int] | None = None,
) -> dict[str, Any]:
    """One round's tree as a plain {"data", "layout"} dict: nodes coloured by `metric`, the accepted path, exit and
    bonus token, the optimal tree's `ghosts` (records.Ghost as dicts) dashed and grey, `highlight_node` ringed.

    `width`: the figure's px; `expanded`: parents whose "+N" fold is open; `walk`: Step token's position in the block
    (the accepted path is drawn up to it, the exit and bonus only at the end); `scale`: the colour scale; `rank_by`:
    the metric whose top nodes are labelled first (`metric` by default; one layout for every colour with a fixed one);
    `marked`: nodes ringed together (a token of the drafter's rows at its depth); `graph`: `round_graph(round_dict)`
    where the caller has it already (it is read, never changed); `matches`: the nodes a search found, drawn larger,
    the others dimmed (None: no search).
    """
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; expected one of {list(METRICS)}")
    if scale not in SCALES:
        raise ValueError(f"unknown scale {scale!r}; expected one of {list(SCALES)}")
    G = round_graph(round_dict) if graph is None else graph
    drawn, bonus, ghost_id = _drawn_graph(G, ghosts)
    highlight = _drawn_id(highlight_node, bonus, ghost_id)
    if highlight is not None and highlight not in drawn:
        raise ValueError(f"highlight_node {highlight_node!r} is not a node of this round")
    values = {v: node_metric(G.nodes[v], metric) for v in G}
    ranked = values if rank_by in (None, metric) else {v: node_metric(G.nodes[v], rank_by) for v in G}
    marked = [v for v in marked if v in G]
    plan = _plan(G, drawn, bonus, ghosts, ghost_id, ranked, highlight, width, set(expanded), marked)
    pos = plan.pos
    block = G.graph["accepted"][1:] + [bonus]
    revealed = len(block) if walk is None else min(max(walk, 0), len(block) - 1) + 1
    at_end = revealed == len(block)
    path = G.graph["accepted"][: revealed + 1] if not at_end else G.graph["accepted"]
    exit_node = G.graph["exit_node"]

    traces = [_edge_trace(G, pos), _line_trace([pos[v] for v in path], "accepted path", width=5)]
    if at_end:
        traces.append(_bonus_edge(pos[exit_node], pos[bonus]))
    traces += _node_traces(G, pos, values, metric, scale)
    # Before the walk's end the exit and bonus traces are there without points: the legend, and so the plot's
    # height, stay as they are.
    bonus_trace = _bonus_trace(G.graph, pos[bonus])
    exit_ring = _ring_trace(pos[exit_node], "exit", size=EXIT_RING, colour=PATH_COLOUR)
    traces += [bonus_trace, exit_ring] if at_end else [_emptied(bonus_trace), _emptied(exit_ring)]
    if ghosts:
        traces += _ghost_traces(drawn, pos, ghosts, ghost_id, dict_bounds(round_dict))
    if plan.folded:
        traces.append(_folded_trace(G, plan, values))
    opened = [v[1] for v in pos if isinstance(v, tuple) and v[0] == "less"]
    if opened:
        traces.append(_opened_trace(plan, opened))
    rings = {exit_node: EXIT_RING} if at_end else {}
    if highlight is not None and highlight in pos:
        rings[highlight] = HIGHLIGHT_RING
    traces.append(_label_trace(plan, set(path) | ({bonus} if at_end else set()), set(ghost_id.values()),
                               hide=set() if at_end else {bonus}, rings=rings))
    if highlight is not None and highlight in pos:
        traces.append(_ring_trace(pos[highlight], "highlight", size=HIGHLIGHT_RING, colour="black")
                      | {"showlegend": False})
    if marked:
        points = [pos[v] for v in marked if v in pos]
        traces.append(_scatter("marked", [p[0] for p in points], [p[1] for p in points], "markers", hoverinfo="skip",
                               showlegend=False, marker={"symbol": "circle-open", "size": HIGHLIGHT_RING,
                                                         "color": MARK_COLOUR, "line": {"width": 3}}))
    if matches is not None:
        _dim(traces, set(matches))
    return {"data": traces, "layout": _layout(plan, width, title)}


def node_key(key: Any) -> int | str | None:
    """A clicked point's `customdata` as the app selects it: a node id, "bonus", "ghost:N", "more:N" (unfold),
    "less:N" (fold again) or a drafter's rows cell "cell:D:T"."""
    if isinstance(key, bool) or key is None:
        return None
    if isinstance(key, int) or (isinstance(key, float) and key.is_integer()):
        return int(key)
    if isinstance(key, str) and (key == BONUS or key.startswith(("ghost:", "more:", "less:", "cell:"))):
        return key
    if isinstance(key, str) and key.isdigit():
        return int(key)
    return None


def _drawn_id(key: Hashable | None, bonus: int, ghost_id: Mapping[int, int]) -> Hashable | None:
    """A node as the caller names it (an id, BONUS or "ghost:N") -> its id in the drawn graph."""
    if isinstance(key, str) and key.startswith("ghost:"):
        ghost = node_key(key)
        return ghost_id.get(int(ghost.split(":")[1]), key) if isinstance(ghost, str) and ghost[6:].isdigit() else key
    return bonus if key == BONUS else key


def _drawn_graph(G: nx.DiGraph, ghosts: Sequence[Mapping[str, Any]]) -> tuple[nx.DiGraph, int, dict[int, int]]:
    """G plus the bonus token as the exit node's last child and the ghosts under their anchors (unscored ids after
    the tree's: they sort after the draft's own children)."""
    H = G.copy()
    bonus = max(G) + 1
    H.add_node(bonus, score=None)
    H.add_edge(G.graph["exit_node"], bonus)
    ghost_id = {g["node"]: bonus + 1 + i for i, g in enumerate(ghosts)}
    for g in ghosts:
        H.add_node(ghost_id[g["node"]], score=None)
        H.add_edge(g["anchor"] if g["parent_ghost"] is None else ghost_id[g["parent_ghost"]], ghost_id[g["node"]])
    return H, bonus, ghost_id


def _plan(G, drawn, bonus, ghosts, ghost_id, values, highlight, width, expanded, marked=()) -> TreePlan:
    """Which nodes and labels the figure shows: the accepted path, the exit node and its children, the bonus, the
    three likeliest ghosts and the selection first; then the top nodes by the metric."""
    exit_node = G.graph["exit_node"]
    must = set(G.graph["accepted"]) | set(G.successors(exit_node)) | {bonus}
    must |= {ghost_id[g["node"]] for g in sorted(ghosts, key=lambda g: -g["P"])[:3]}
    labels = {v: token_label(G.nodes[v]["text"]) for v in G}
    labels[bonus] = token_label(G.graph["bonus_text"])
    ghost_P = {ghost_id[g["node"]]: g["P"] for g in ghosts}
    labels |= {ghost_id[g["node"]]: token_label(g["text"]) for g in ghosts}
    mass = {v: (_num(G.nodes[v].get("P")), _num(G.nodes[v].get("score"), math.exp)) for v in G}
    rank = sorted((v for v in G if values[v] is not None), key=lambda v: (-values[v], -mass[v][1]))
    mass |= {v: (p, 0.0) for v, p in ghost_P.items()}
    room = plan_room(width)
    key = lambda v: mass.get(v, (0.0, 0.0))
    plan = plan_tree(drawn, labels, must, rank, key, room, expanded, TOP_LABELLED)
    wanted = ({highlight} if highlight is not None else set()) | set(marked)
    if wanted <= set(plan.pos):
        return plan  # a selection moves nothing: the tree keeps its layout
    return plan_tree(drawn, labels, must | wanted, rank, key, room, expanded, TOP_LABELLED)


def plan_room(width: int) -> float:
    """The px a tree's nodes spread over in a figure `width` px wide: its margins and the clear edges left out."""
    return max(width - MARGIN["l"] - MARGIN["r"] - 2 * EDGE, 100)


def _num(x: float | None, f=float) -> float:
    return 0.0 if x is None or math.isnan(x) else f(x)


# Trace dicts below carry plotly's property names with the values its validators would store: a colourscale name is
# expanded to its list of stops, a layout title string becomes {"text": ...}; tests/render/test_render.py checks the
# dicts against validated figures.


def _scatter(name: str, x: list, y: list, mode: str, **props: Any) -> dict[str, Any]:
    return {"type": "scatter", "name": name, "x": x, "y": y, "mode": mode, **props}


def _edge_trace(G: nx.DiGraph, pos: Mapping[Hashable, tuple]) -> dict[str, Any]:
    xs, ys = [], []
    for u, v in G.edges:
        if u in pos and v in pos:
            xs += [pos[u][0], pos[v][0], None]  # None breaks the line between edges
            ys += [pos[u][1], pos[v][1], None]
    for v in pos:  # a "+N" fold hangs from its parent
        if isinstance(v, tuple) and v[0] == "more" and v[1] in G:
            xs += [pos[v[1]][0], pos[v][0], None]
            ys += [pos[v[1]][1], pos[v][1], None]
    return _scatter("edges", xs, ys, "lines", line={"color": "#b0b0b0", "width": 1}, hoverinfo="skip")


def _line_trace(points: list, name: str, width: float) -> dict[str, Any]:
    return _scatter(name, [p[0] for p in points], [p[1] for p in points], "lines",
                    line={"color": PATH_COLOUR, "width": width}, opacity=0.6, hoverinfo="skip")


def _bonus_edge(exit_point: tuple, bonus_point: tuple) -> dict[str, Any]:
    return _scatter("bonus edge", [exit_point[0], bonus_point[0]], [exit_point[1], bonus_point[1]], "lines",
                    line={"color": PATH_COLOUR, "width": 2, "dash": "dash"}, hoverinfo="skip", showlegend=False)


def _bonus_trace(info: Mapping[str, Any], point: tuple) -> dict[str, Any]:
    """The bonus token: its own trace, so no point without a tooltip lies on the exit node."""
    hover = (f"<b>bonus {markup(token_label(info['bonus_text']))}</b>  token_id {info.get('bonus_token_id')}<br>"
             "drawn at the exit node from its residual law (the target's law less the children's tokens)")
    return _scatter("bonus", [point[0]], [point[1]], "markers",
                    marker={"size": 14, "color": "white", "line": {"color": PATH_COLOUR, "width": 2}},
                    customdata=[BONUS], hovertext=[hover], hoverinfo="text")


def _dim(traces: list[dict[str, Any]], lit: set) -> None:
    """The node markers outside `lit` faded and those in it enlarged, in place."""
    for t in traces:
        if t["name"] in ("nodes", "no value"):
            t["marker"] |= {"opacity": [1.0 if v in lit else 0.2 for v in t["customdata"]],
                            "size": [NODE_SIZE + 6 if v in lit else NODE_SIZE for v in t["customdata"]]}


def _emptied(trace: dict[str, Any]) -> dict[str, Any]:
    """A trace with its points taken out (its legend entry stays)."""
    return trace | {k: [] for k in ("x", "y", "customdata", "hovertext") if k in trace}


def _ghost_traces(drawn: nx.DiGraph, pos: Mapping[Hashable, tuple], ghosts: Sequence[Mapping[str, Any]],
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
        _scatter("ghost edges", xs, ys, "lines", line={"color": GHOST_COLOUR, "width": 1, "dash": "dash"},
                 hoverinfo="skip"),
        _scatter(name, [p[0] for p in points], [p[1] for p in points], "markers", marker=marker,
                 customdata=[f"ghost:{g['node']}" for g in shown], hoverinfo="text",
                 hovertext=[f"<b>ghost {markup(token_label(g['text']))}</b>  P {g['P']:.4g}<br>in the {where}, not "
                            f"drafted<br>depth {g['depth']}<br>path {_token(g['path_text'])}" for g in shown]),
    ]


def _folded_trace(G: nx.DiGraph, plan: TreePlan, values: Mapping) -> dict[str, Any]:
    """One grey square per "+N" fold; a click unfolds it."""
    folds = list(plan.folded.items())
    points = [plan.pos[more_node(u)] for u, _ in folds]
    hover = []
    for u, kids in folds:
        mass = sum(_num(G.nodes[c].get("P")) for c in kids if c in G)
        hover.append(f"<b>{len(kids)} lighter children of node {u}</b> folded here (target flow P {mass:.3g} "
                     "together)<br>click to unfold")
    return _scatter("folded (+N: click to unfold)", [p[0] for p in points], [p[1] for p in points], "markers",
                    marker={"symbol": "square", "size": NODE_SIZE, "color": "#d9d9d9",
                            "line": {"color": "#707070", "width": 1}},
                    customdata=[f"more:{u}" for u, _ in folds], hovertext=hover, hoverinfo="text")


def _opened_trace(plan: TreePlan, opened: list) -> dict[str, Any]:
    """One small grey square after the children of each fold that was opened; a click folds them again."""
    points = [plan.pos[less_node(u)] for u in opened]
    return _scatter("opened (\u2212: click to fold again)", [p[0] for p in points], [p[1] for p in points], "markers",
                    marker={"symbol": "square", "size": NODE_SIZE - 4, "color": "#f0f0f0",
                            "line": {"color": "#707070", "width": 1}},
                    customdata=[f"less:{u}" for u in opened],
                    hovertext=[f"the children of node {u} unfolded<br>click to fold the lighter ones again"
                               for u in opened], hoverinfo="text")


LABEL_HALO = "1px 1px 1px white, -1px -1px 1px white, 1px -1px 1px white, -1px 1px 1px white"


def _label_trace(plan: TreePlan, on_path: set, ghost_nodes: set, hide: set, rings: Mapping) -> dict[str, Any]:
    """Every label in one text trace, above its node (above its ring where it has one); the accepted path's in the
    path colour, ghosts' grey."""
    items = [(v, t) for v, t in plan.text.items() if v in plan.pos and v not in hide]
    colours = [PATH_COLOUR if v in on_path else GHOST_COLOUR if v in ghost_nodes or isinstance(v, tuple)
               else LABEL_COLOUR for v, _ in items]
    # Invisible markers of the nodes' size put each label above its node, not on it.
    return _scatter("labels", [plan.pos[v][0] for v, _ in items], [plan.pos[v][1] for v, _ in items], "markers+text",
                    marker={"size": [rings.get(v, NODE_SIZE) for v, _ in items], "opacity": 0},
                    text=[markup(t) for _, t in items],
                    textposition="top center",
                    # A white halo: a short label on the accepted path sat pink on its pink line and vanished.
                    textfont={"size": FONT_SIZE, "family": FONT_FAMILY, "color": colours, "shadow": LABEL_HALO},
                    hoverinfo="skip", showlegend=False)


def _node_traces(G: nx.DiGraph, pos: Mapping[Hashable, tuple], values: Mapping, metric: str,
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
    return _scatter(name, [pos[v][0] for v in nodes], [pos[v][1] for v in nodes], "markers", marker=marker) | {
        "customdata": list(nodes),  # node ids in the figure JSON, so a point can be traced back to its node
        "hovertext": [_hover(G, v) for v in nodes],
        "hoverinfo": "text",
    }


def _ring_trace(point: tuple, name: str, size: int, colour: str) -> dict[str, Any]:
    return _scatter(name, [point[0]], [point[1]], "markers",
                    marker={"symbol": "circle-open", "size": size, "color": colour, "line": {"width": 3}},
                    hoverinfo="skip")


def _token(text: str | None) -> str:
    """repr makes whitespace and newlines visible; escaping keeps plotly from reading '<...>' as markup."""
    return html.escape(repr(text), quote=False)


def _number(value: float | None) -> str:
    return "—" if value is None else f"{value:.3g}"


def _hover(G: nx.DiGraph, v: int) -> str:
    attrs = G.nodes[v]
    logprob = attrs.get("draft_logprob")
    q_edge = None if logprob is None or math.isnan(logprob) else math.exp(logprob)
    q_path = None if attrs.get("score") is None or math.isnan(attrs["score"]) else math.exp(attrs["score"])
    lines = [
        f"<b>{_token(attrs['text'])}</b>  node {v}, depth {attrs['depth']}",
        f"<i>{html.escape(verdict_line(G, v), quote=False)}</i>",
        f"draft: edge prob {_number(q_edge)}, path prob q(v) {_number(q_path)}",
        f"target: edge prob p {_number(attrs.get('p_edge'))}, flow P {_number(attrs.get('P'))}",
        f"exit: rho {_number(attrs.get('rho'))}, w {_number(attrs.get('w'))}",
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


def _layout(plan: TreePlan, width: int, title: str | None) -> dict[str, Any]:
    rows = 1 - min(p[1] for p in plan.pos.values())  # depth levels, bonus row included
    span = max(plan_room(width), plan.width)
    return {
        **({} if title is None else {"title": {"text": title, **TITLE, "pad": dict(TITLE["pad"])}}),
        "width": round(span + 2 * EDGE + MARGIN["l"] + MARGIN["r"]),
        "height": min(MAX_HEIGHT, 160 + ROW_HEIGHT * rows),
        # The x axis is the plan's px: the labels it spaced keep their distances on screen.
        "xaxis": {"visible": False, "range": [-EDGE, span + EDGE], "fixedrange": True},
        "yaxis": {"visible": False, "range": [-rows + 0.4, 0.6], "fixedrange": True},
        "plot_bgcolor": "white",
        "hovermode": "closest",
        "legend": dict(LEGEND),
        "margin": {**MARGIN, "t": 60 if title else 30},
        "meta": {"width": width},  # the room the labels were planned for: the app's view asks again when it differs
    }
