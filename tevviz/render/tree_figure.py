"""Round record -> plotly figure of the draft tree, coloured by one node metric, labelled where labels fit.

What is drawn and labelled in the room given is `tree_plan.plan_tree`'s choice; every node (ghosts, the bonus token and
"+N" folds included) carries its id in `customdata`, which the app's click bridge sends back (`node_key`).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any

import networkx as nx
import plotly.graph_objects as go

from tevviz.engine.records.records import dict_bounds
from tevviz.render.colours import SCALES
from tevviz.render.graph import METRICS, node_metric, round_graph
from tevviz.render.labels import token_label
from tevviz.render.tree_frame import TOP_LABELLED, WIDTH, plan_room, tree_layout
from tevviz.render.tree_plan import TreePlan, plan_tree
from tevviz.render.tree_traces import (
    BONUS,
    EXIT_RING,
    HIGHLIGHT_RING,
    PATH_COLOUR,
    bonus_edge,
    bonus_trace,
    dim,
    edge_trace,
    emptied,
    folded_trace,
    ghost_traces,
    label_trace,
    line_trace,
    marked_trace,
    node_traces,
    number_or_zero,
    opened_trace,
    ring_trace,
)


def tree_figure(round_dict: Mapping[str, Any], metric: str = "P", highlight_node: Hashable | None = None,
                title: str | None = None, ghosts: Sequence[Mapping[str, Any]] = (), **options: Any) -> go.Figure:
    """Draw one round's draft tree (`tree_figure_dict`'s options) as a plotly Figure."""
    # The dict is already in the form plotly's validators would produce, so the per-property validation is skipped.
    return go.Figure(tree_figure_dict(round_dict, metric, highlight_node, title, ghosts, **options), _validate=False)


def tree_figure_dict(
    round_dict: Mapping[str, Any], metric: str = "P", highlight_node: Hashable | None = None, title: str | None = None,
    ghosts: Sequence[Mapping[str, Any]] = (), *, width: int = WIDTH, expanded: Iterable[int] = (),
    walk: int | None = None, scale: str = "auto", rank_by: str | None = None, marked: Iterable[int] = (),
    graph: nx.DiGraph | None = None, matches: Iterable[int] | None = None, hidden: Iterable[int] | None = None,
) -> dict[str, Any]:
    """One round's tree as a plain {"data", "layout"} dict: nodes coloured by `metric`, the accepted path, exit and
    bonus token, the optimal tree's `ghosts` (records.Ghost as dicts) dashed and grey, `highlight_node` ringed.

    `width`: the figure's px; `expanded`: parents whose "+N" fold is open; `walk`: Step token's position in the block
    (the accepted path is drawn up to it, the exit and bonus only at the end); `scale`: the colour scale; `rank_by`:
    the metric whose top nodes are labelled first (`metric` by default; one layout for every colour with a fixed one);
    `marked`: nodes ringed together (a token of the drafter's rows at its depth); `graph`: `round_graph(round_dict)`
    where the caller has it already (it is read, never changed); `matches`: the nodes a search found, drawn larger,
    the others dimmed (None: no search); `hidden`: fold by mass, these nodes fold behind "+N" and no other node
    folds for room (None: folds by room).
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
    plan = _plan(G, drawn, bonus, ghosts, ghost_id, ranked, highlight, width, set(expanded), marked,
                 None if hidden is None else set(hidden))
    pos = plan.pos
    block = G.graph["accepted"][1:] + [bonus]
    revealed = len(block) if walk is None else min(max(walk, 0), len(block) - 1) + 1
    at_end = revealed == len(block)
    path = G.graph["accepted"][: revealed + 1] if not at_end else G.graph["accepted"]
    exit_node = G.graph["exit_node"]

    traces = [edge_trace(G, pos), line_trace([pos[v] for v in path], "accepted path", width=5)]
    if at_end:
        traces.append(bonus_edge(pos[exit_node], pos[bonus]))
    traces += node_traces(G, pos, values, metric, scale)
    # Before the walk's end the exit and bonus traces are there without points: the legend, and so the plot's
    # height, stay as they are.
    bonus_marker = bonus_trace(G.graph["bonus_text"], G.graph.get("bonus_token_id"), pos[bonus])
    exit_ring = ring_trace(pos[exit_node], "exit", size=EXIT_RING, colour=PATH_COLOUR)
    traces += [bonus_marker, exit_ring] if at_end else [emptied(bonus_marker), emptied(exit_ring)]
    if ghosts:
        traces += ghost_traces(drawn, pos, ghosts, ghost_id, dict_bounds(round_dict))
    if plan.folded:
        traces.append(folded_trace(G, plan, values))
    opened = [v[1] for v in pos if isinstance(v, tuple) and v[0] == "less"]
    if opened:
        traces.append(opened_trace(plan, opened))
    rings = {exit_node: EXIT_RING} if at_end else {}
    if highlight is not None and highlight in pos:
        rings[highlight] = HIGHLIGHT_RING
    traces.append(label_trace(plan, set(path) | ({bonus} if at_end else set()), set(ghost_id.values()),
                              hide=set() if at_end else {bonus}, rings=rings))
    if highlight is not None and highlight in pos:
        traces.append(ring_trace(pos[highlight], "highlight", size=HIGHLIGHT_RING, colour="black")
                      | {"showlegend": False})
    if marked:
        traces.append(marked_trace([pos[v] for v in marked if v in pos]))
    if matches is not None:
        dim(traces, set(matches))
    return {"data": traces, "layout": tree_layout(plan, width, title)}


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


def _plan(G, drawn, bonus, ghosts, ghost_id, values, highlight, width, expanded, marked=(), hidden=None) -> TreePlan:
    """Which nodes and labels the figure shows: the accepted path, the exit node and its children, the bonus, the
    three likeliest ghosts and the selection first; then the top nodes by the metric."""
    exit_node = G.graph["exit_node"]
    must = set(G.graph["accepted"]) | set(G.successors(exit_node)) | {bonus}
    must |= {ghost_id[g["node"]] for g in sorted(ghosts, key=lambda g: -g["P"])[:3]}
    labels = {v: token_label(G.nodes[v]["text"]) for v in G}
    labels[bonus] = token_label(G.graph["bonus_text"])
    ghost_P = {ghost_id[g["node"]]: g["P"] for g in ghosts}
    labels |= {ghost_id[g["node"]]: token_label(g["text"]) for g in ghosts}
    mass = {v: (number_or_zero(G.nodes[v].get("P")), number_or_zero(G.nodes[v].get("score"), math.exp))
            for v in G}
    rank = sorted((v for v in G if values[v] is not None), key=lambda v: (-values[v], -mass[v][1]))
    mass |= {v: (p, 0.0) for v, p in ghost_P.items()}
    room = plan_room(width)
    key = lambda v: mass.get(v, (0.0, 0.0))
    plan = plan_tree(drawn, labels, must, rank, key, room, expanded, TOP_LABELLED, hidden)
    wanted = ({highlight} if highlight is not None else set()) | set(marked)
    if wanted <= set(plan.pos):
        return plan  # a selection moves nothing: the tree keeps its layout
    return plan_tree(drawn, labels, must | wanted, rank, key, room, expanded, TOP_LABELLED, hidden)
