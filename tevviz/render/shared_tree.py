"""Two rounds' trees as one: the union tree by token path (engine/analysis/run_compare.match_nodes), each side's bonus
token a node of it, planned once for a width by the Decode tree's rule (render/tree_plan.py: labels by importance,
none overlapping, the lightest siblings folded into "+N" where the width runs out). Every figure of a pair
(render/compare_figure.py) draws this one plan, so a node sits at the same place in each."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import networkx as nx

from tevviz.engine.analysis.run_compare import MatchedNode, match_nodes
from tevviz.engine.records.records import RoundRecord
from tevviz.render.labels import token_label
from tevviz.render.layout import Point
from tevviz.render.tree_frame import TOP_LABELLED, plan_room
from tevviz.render.tree_plan import TreePlan, plan_tree

SIDE_WIDTH = 560  # two trees side by side on a page: a column of the comparison report (render/compare_report.py)


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

    def union_id(self, side: int, v: int) -> int:
        """The union id of node v of tree `side`."""
        # The tree is frozen; the index is cached on it like RoundRecord caches its coverage gap.
        if "_paths" not in self.__dict__:
            object.__setattr__(self, "_paths", {n.path: n.id for n in self.nodes})
        return self.__dict__["_paths"][(self.a, self.b)[side].token_path(v)]


def shared_layout(a: RoundRecord, b: RoundRecord, width: int = SIDE_WIDTH, expanded: Iterable[int] = (),
                  keep: Iterable[int] = ()) -> SharedTree:
    """Plan the union of two rounds' trees once for a figure `width` px wide, as the Decode tree is planned: both
    accepted paths, exits, their children and bonus tokens labelled first, then the nodes of the larger target flow P;
    siblings by the higher of the two path scores, bonus tokens last.

    `expanded`: union nodes whose "+N" fold is open; `keep`: union nodes drawn and labelled whatever the width (a
    selection)."""
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
    must = {x for x in bonus if x is not None} | {v for v in keep if v in G}
    for r in (a, b):
        exit_node = by_path[r.token_path(r.exit_node)]
        must |= {by_path[r.token_path(v)] for v in r.accepted} | set(G.successors(exit_node))
    flow = {v: _finite(G.nodes[v]["P"]) for v in G}
    q = {v: math.exp(G.nodes[v]["score"]) if _finite(G.nodes[v]["score"]) is not None else 0.0 for v in G}
    rank = sorted((v for v in G if flow[v] is not None), key=lambda v: (-flow[v], -q[v]))
    labels = {v: token_label(G.nodes[v]["text"]) for v in G}
    plan = plan_tree(G, labels, must, rank, lambda v: (flow[v] or 0.0, q[v]), plan_room(width),
                     {u for u in expanded if u in G}, top=TOP_LABELLED)
    pos = {v: p for v, p in plan.pos.items() if not isinstance(v, tuple)}
    return SharedTree(a, b, nodes, (bonus[0], bonus[1]), len(parents), parents, pos, plan, G, width)


def _finite(x: float | None) -> float | None:
    return None if x is None or math.isnan(x) else float(x)
