"""Layered tidy tree layout: leaves left to right in DFS order, parents centred over their children."""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping

import networkx as nx

Point = tuple[float, float]


def tidy_layout(G: nx.DiGraph) -> dict[Hashable, Point]:
    """Position (x, -depth) per node: leaves at x = 0, 1, 2, ... in DFS order, parents midway over first and last child.

    Siblings go by descending `score` (unscored last, by id). Subtrees get disjoint x-ranges, so no two edges cross.
    """
    root = tree_root(G)
    order, children, depth = _preorder(G, root)
    x: dict[Hashable, float] = {}
    next_leaf = 0
    for v in order:
        if not children[v]:
            x[v] = float(next_leaf)
            next_leaf += 1
    for v in reversed(order):  # reversed preorder reaches every child before its parent
        if children[v]:
            x[v] = (x[children[v][0]] + x[children[v][-1]]) / 2
    return {v: (x[v], float(-depth[v])) for v in order}


def tree_root(G: nx.DiGraph) -> Hashable:
    """The root of a directed tree; ValueError if G is not one."""
    if len(G) == 0 or not nx.is_arborescence(G):
        raise ValueError("layout needs a non-empty directed tree")
    return next(v for v, indegree in G.in_degree if indegree == 0)


def ordered_children(G: nx.DiGraph, v: Hashable) -> list[Hashable]:
    """Children of v, highest draft path score first; unscored children last, by id."""
    return sorted(G.successors(v), key=lambda c: _sibling_key(G.nodes[c].get("score"), c))


def edges_cross(G: nx.DiGraph, pos: Mapping[Hashable, Point]) -> bool:
    """True if two edges of the drawing meet anywhere other than at a node they share."""
    segments = sorted((((u, pos[u]), (v, pos[v])) for u, v in G.edges), key=lambda s: min(s[0][1][0], s[1][1][0]))
    for i, seg in enumerate(segments):
        right = max(seg[0][1][0], seg[1][1][0])
        for other in segments[i + 1 :]:
            if min(other[0][1][0], other[1][1][0]) > right:
                break  # sorted by left end: no later segment reaches back into this one's x-range
            if _segments_meet(seg, other):
                return True
    return False


def _preorder(G: nx.DiGraph, root: Hashable) -> tuple[list, dict, dict]:
    """Iterative DFS (deep chains would exhaust the recursion limit): order, children lists and depths."""
    order, children, depth = [], {}, {root: 0}
    stack = [root]
    while stack:
        v = stack.pop()
        order.append(v)
        children[v] = ordered_children(G, v)
        for c in children[v]:
            depth[c] = depth[v] + 1
        stack.extend(reversed(children[v]))
    return order, children, depth


def _sibling_key(score, node) -> tuple:
    unscored = score is None or math.isnan(score)
    return (unscored, 0.0 if unscored else -score, node)


def _orientation(a: Point, b: Point, p: Point) -> float:
    return (b[0] - a[0]) * (p[1] - a[1]) - (b[1] - a[1]) * (p[0] - a[0])


def _on_segment(p: Point, a: Point, b: Point) -> bool:
    return (
        _orientation(a, b, p) == 0
        and min(a[0], b[0]) <= p[0] <= max(a[0], b[0])
        and min(a[1], b[1]) <= p[1] <= max(a[1], b[1])
    )


def _segments_meet(seg1, seg2) -> bool:
    """Whether two segments ((node, point), (node, point)) meet at a point other than a node they share."""
    (u, a), (v, b) = seg1
    (s, c), (t, d) = seg2
    shared = {u, v} & {s, t}
    if shared:
        # Edges at a common node touch there by design; they only clash if they overlap along a line.
        k = shared.pop()
        far1 = b if u == k else a
        far2 = d if s == k else c
        return _on_segment(far2, a, b) or _on_segment(far1, c, d)
    o1, o2 = _orientation(a, b, c), _orientation(a, b, d)
    o3, o4 = _orientation(c, d, a), _orientation(c, d, b)
    if o1 * o2 < 0 and o3 * o4 < 0:
        return True
    return _on_segment(c, a, b) or _on_segment(d, a, b) or _on_segment(a, c, d) or _on_segment(b, c, d)
