"""Round record (networkx node-link dict) -> validated `networkx.DiGraph`, plus the node metrics to colour by."""

from __future__ import annotations

import copy
import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import networkx as nx

from tevviz.engine.records.records import tree_depths

REQUIRED_TOP = ("graph", "nodes", "edges")
REQUIRED_GRAPH = ("accepted", "exit_node", "bonus_text")
REQUIRED_NODE = ("id", "parent", "text", "depth")
# Imported trees carry no draft or target scores, so these may be absent or null.
NULLABLE_NODE = ("token_id", "draft_logprob", "score", "p_edge", "P", "rho", "w")


@dataclass(frozen=True)
class Metric:
    """How a node metric is named on screen and which plotly colourscale draws it."""

    label: str
    colorscale: str


METRICS: dict[str, Metric] = {
    "P": Metric("target flow P(v)", "Viridis"),
    "w": Metric("exit probability w(v)", "Plasma"),
    "rho": Metric("local exit probability rho(v)", "Cividis"),
    "missing": Metric("missing mass: best single coverage gain at v", "Reds"),
    "draft_logprob": Metric("draft log-probability", "Blues"),
    # exp of the path score: what the builder ranked nodes by (for a DDTree, the product of per-depth marginals)
    "q": Metric("draft path probability q(v)", "Greens"),
}


def round_graph(round_dict: Mapping[str, Any]) -> nx.DiGraph:
    """Check the shape of a round record and return it as a DiGraph (node attributes = node fields)."""
    _check_fields(round_dict, REQUIRED_TOP, "round record")
    _check_fields(round_dict["graph"], REQUIRED_GRAPH, "round record field 'graph'")
    for i, node in enumerate(round_dict["nodes"]):
        _check_fields(node, REQUIRED_NODE, f"node #{i}")
        if type(node["id"]) is not int:  # bool is an int subclass, yet no node id
            raise ValueError(f"node #{i} has a non-integer id {node['id']!r}")
    for i, edge in enumerate(round_dict["edges"]):
        _check_fields(edge, ("source", "target"), f"edge #{i}")

    # A deep copy keeps the caller's record untouched; the flags are forced because the drawing assumes a simple tree.
    data = {**_deep_copy(dict(round_dict)), "directed": True, "multigraph": False}
    G = nx.node_link_graph(data, edges="edges")
    for _, attrs in G.nodes(data=True):
        for field in NULLABLE_NODE:
            attrs.setdefault(field, None)
        if attrs.get("missing") is None:
            attrs["missing"] = []

    if len(G) != len(round_dict["nodes"]):
        raise ValueError("round record has duplicate node ids")
    _check_tree(G)
    _check_accepted(G)
    return G


def node_metric(attrs: Mapping[str, Any], key: str) -> float | None:
    """Value of metric `key` for one node's attributes; None where the record has no value."""
    if key not in METRICS:
        raise ValueError(f"unknown metric {key!r}; expected one of {list(METRICS)}")
    if key == "missing":
        missing = attrs.get("missing")
        if missing is None:
            return None
        return max((float(m["gain"]) for m in missing), default=0.0)
    if key == "q":
        score = attrs.get("score")
        return None if score is None or math.isnan(score) else math.exp(score)
    value = attrs.get(key)
    if value is None or math.isnan(value):
        return None
    return float(value)


def _deep_copy(value: Any) -> Any:
    """copy.deepcopy for JSON-shaped records, several times faster: dicts and lists rebuilt, scalars shared."""
    if isinstance(value, dict):
        return {k: _deep_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_deep_copy(v) for v in value]
    if value is None or isinstance(value, (str, int, float)):
        return value
    return copy.deepcopy(value)


def _check_fields(obj: Any, fields: tuple[str, ...], what: str) -> None:
    if not isinstance(obj, Mapping):
        # Any malformed record raises ValueError, so callers handle one exception type.
        raise ValueError(f"{what} must be a dict, got {type(obj).__name__}")  # noqa: TRY004
    for field in fields:
        if field not in obj:
            raise ValueError(f"{what} is missing field {field!r}")


def _check_tree(G: nx.DiGraph) -> None:
    """The nodes' parents form a tree (the engine's one check, records.tree_depths, on node ids 0..N-1), the edges are
    exactly the parent links, and each node's depth is its parent's + 1."""
    if sorted(G) != list(range(len(G))):
        raise ValueError("round record node ids must be 0..N-1")
    parents = [-1 if G.nodes[v]["parent"] is None else G.nodes[v]["parent"] for v in range(len(G))]
    depths = tree_depths(parents)  # a TreeShapeError is a ValueError, as every malformed record raises
    if {(p, v) for v, p in enumerate(parents) if p >= 0} != set(G.edges):
        raise ValueError("round record 'edges' do not match the nodes' 'parent' fields")
    for v, d in enumerate(depths):
        if G.nodes[v]["depth"] != d:
            raise ValueError(f"node {v} has depth {G.nodes[v]['depth']}, expected {d} (its parent's + 1)")


def _check_accepted(G: nx.DiGraph) -> None:
    accepted = G.graph["accepted"]
    if not accepted or G.nodes.get(accepted[0], {}).get("parent", 0) is not None:
        raise ValueError("round record 'graph.accepted' must start at the root")
    if accepted[-1] != G.graph["exit_node"]:
        raise ValueError("round record 'graph.accepted' must end at 'graph.exit_node'")
    for parent, child in itertools.pairwise(accepted):
        if not G.has_edge(parent, child):
            raise ValueError(f"round record 'graph.accepted' is not a path: no edge {parent} -> {child}")
