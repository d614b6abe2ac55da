"""Checks of untrusted JSON values for the importers (io.py, ddtree_trace.py): each returns the value or raises a
TevvizError that names the field at fault."""

from __future__ import annotations

import math

from ..errors import TevvizError
from .records import TreeShapeError, path_to, tree_depths

MAX_NODES = 8192
MAX_ROUNDS = 100_000


def fail(where: str, msg: str):
    raise TevvizError(f"{where}: {msg}")


def check_int(x, where: str, lo: int | None = None, hi: int | None = None, nullable: bool = False):
    if x is None and nullable:
        return None
    if not isinstance(x, int) or isinstance(x, bool):
        fail(where, f"expected an integer, got {type(x).__name__}")
    if (lo is not None and x < lo) or (hi is not None and x > hi):
        fail(where, f"{x} is out of range [{lo}, {hi}]")
    return x


def check_num(x, where: str, lo: float | None = None, hi: float | None = None, nullable: bool = True):
    if x is None and nullable:
        return None
    if not isinstance(x, (int, float)) or isinstance(x, bool) or not math.isfinite(x):
        fail(where, f"expected a finite number, got {x!r}"[:200])
    if (lo is not None and x < lo) or (hi is not None and x > hi):
        fail(where, f"{x} is out of range [{lo}, {hi}]")
    return float(x)


def check_list(x, where: str, max_len: int = MAX_NODES) -> list:
    if not isinstance(x, list):
        fail(where, f"expected a list, got {type(x).__name__}")
    if len(x) > max_len:
        fail(where, f"has {len(x)} entries, more than the limit {max_len}")
    return x


def check_dict(x, where: str) -> dict:
    if not isinstance(x, dict):
        fail(where, f"expected an object, got {type(x).__name__}")
    return x


def check_str(x, where: str, nullable: bool = True) -> str:
    if x is None and nullable:
        return ""
    if not isinstance(x, str):
        fail(where, f"expected a string, got {type(x).__name__}")
    return x


def parent_depths(parents: list[int], parent_field) -> list[int]:
    """Each node's depth in a parent array whose node 0 is the root (records.tree_depths); refuses a parent that is
    not an earlier node, naming its field."""
    try:
        return tree_depths(parents)
    except TreeShapeError as e:
        if e.node == 0:  # the callers check the root first; kept for any new one
            fail(parent_field(0), str(e))
        fail(parent_field(e.node), f"{parents[e.node]} is not an earlier node (parents must precede children)")


def check_tree(parents: list[int], accepted: list[int], exit_node: int, where: str, ddtree: bool = False) -> list[int]:
    """Parents before children, one root, accepted = the root-to-exit path; returns depths."""
    parent_field = (lambda v: f"{where}.parents[{v}]") if ddtree else (lambda v: f"{where}.nodes[{v}].parent")
    accepted_field = f"{where}.accepted_indices" if ddtree else f"{where}.graph.accepted"
    n = len(parents)
    if n == 0:
        fail(where, "the tree has no nodes")
    if parents[0] != -1:
        fail(parent_field(0), "node 0 must be the root (parent null)")
    depths = parent_depths(parents, parent_field)
    check_int(exit_node, accepted_field if ddtree else f"{where}.graph.exit_node", 0, n - 1)
    if accepted != path_to(parents, exit_node):
        fail(accepted_field, f"{accepted[:20]} is not the path from the root to exit node {exit_node}")
    return depths


def check_path(parents: list[int], accepted: list[int], field: str) -> None:
    """`accepted` walks from the root (0) down through `parents`, each node a child of the one before."""
    if not accepted:
        fail(field, "is empty; it must start at the root, 0")
    if accepted[0] != 0:
        fail(f"{field}[0]", f"{accepted[0]} is not the root; the path must start at 0")
    for k in range(1, len(accepted)):
        v, u = accepted[k], accepted[k - 1]
        if v >= len(parents):
            fail(f"{field}[{k}]", f"{v} is not a node (the tree has nodes 0..{len(parents) - 1})")
        if parents[v] != u:
            fail(f"{field}[{k}]", f"node {v} is not a child of node {u} (its parent is {parents[v]})")


def check_siblings(parents: list[int], tokens: list[int], where: str, node_name) -> None:
    """Siblings carry distinct tokens (docs/math.md, *Notation*); a repeat would count one token's mass twice."""
    first: dict[tuple[int, int], int] = {}
    for v in range(1, len(parents)):
        other = first.setdefault((parents[v], tokens[v]), v)
        if other != v:
            fail(where, f"nodes {other} and {v} ({node_name(other)} and {node_name(v)}) are siblings that both carry "
                         f"token {tokens[v]}; siblings must carry distinct tokens")


def check_ints(x, where: str, lo: int | None = None, max_len: int = MAX_NODES) -> list[int]:
    return [check_int(v, f"{where}[{i}]", lo) for i, v in enumerate(check_list(x, where, max_len))]
