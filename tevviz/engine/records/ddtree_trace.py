"""DDTree traces (`ddtree_generate(..., save_tree_traces=True)`'s rounds, or their flat fields) as unscored rounds."""

from __future__ import annotations

from .json_checks import (
    MAX_NODES,
    MAX_ROUNDS,
    check_dict,
    check_int,
    check_ints,
    check_list,
    check_path,
    check_siblings,
    check_tree,
    fail,
    parent_depths,
)
from .records import RoundRecord


def _root_token(d: dict, where: str) -> int:
    """A trace that does not store its root's token: `root_token_id` when given, else 0 (unknown)."""
    return check_int(d.get("root_token_id", 0), f"{where}.root_token_id", 0)


def _bonus_token(d: dict, where: str) -> int:
    return check_int(d.get("bonus_token_id", -1), f"{where}.bonus_token_id", -1)


def parse_ddtree(d, where: str = "trace", index: int = 0) -> RoundRecord:
    """A round from a DDTree trace: DDTree's own `{"accepted_indices", "tree"}` round, or the flat fields."""
    d = check_dict(d, where)
    if "tree" in d:
        return _parse_ddtree_round(d, where, index)
    return _parse_ddtree_flat(d, where, index)


def _parse_ddtree_round(d: dict, where: str, index: int) -> RoundRecord:
    """One entry of `ddtree_generate(..., save_tree_traces=True).round_trees`.

    Tree node v > 0 is `node_token_ids[v - 1]` at depth `node_depths[v - 1]` under `parents[v]`; node 0
    is the root (parents[0] = -1, its token not stored); `accepted_indices` is the path from 0 down.
    """
    tree = check_dict(d.get("tree"), f"{where}.tree")
    at = f"{where}.tree"
    toks = check_ints(tree.get("node_token_ids"), f"{at}.node_token_ids", 0)
    deps = check_ints(tree.get("node_depths"), f"{at}.node_depths", 0)
    pars = check_ints(tree.get("parents"), f"{at}.parents", -1, MAX_NODES + 1)
    acc = check_ints(d.get("accepted_indices"), f"{where}.accepted_indices", 0)
    n = len(toks)
    if len(deps) != n:
        fail(f"{at}.node_depths", f"has {len(deps)} entries, expected {n} (one per node_token_ids)")
    if len(pars) != n + 1:
        fail(f"{at}.parents", f"has {len(pars)} entries, expected {n + 1} (the root, then one per node_token_ids)")
    if pars[0] != -1:
        fail(f"{at}.parents[0]", f"{pars[0]} must be -1: node 0 is the root")
    depths = parent_depths(pars, lambda v: f"{at}.parents[{v}]")
    bad = next((v for v in range(1, n + 1) if deps[v - 1] != depths[v]), None)
    if bad is not None:
        fail(f"{at}.node_depths[{bad - 1}]",
              f"{deps[bad - 1]} does not match the parents (expected {depths[bad]}, the parent's depth + 1)")
    check_path(pars, acc, f"{where}.accepted_indices")
    tokens = [_root_token(d, where)] + toks
    check_siblings(pars, tokens, at, lambda v: f"node_token_ids[{v - 1}]")
    return RoundRecord.unscored(index, "ddtree-trace", tokens, pars, depths, exit_node=acc[-1],
                                bonus_token=_bonus_token(d, where))


def _parse_ddtree_flat(d: dict, where: str, index: int) -> RoundRecord:
    """A round as flat fields of equal length: node_token_ids, node_depths, parents, accepted_indices.

    The first node's depth says the layout: 0, it is the root; 1, the nodes are the drafted ones (a root, token
    `root_token_id` if given, is put above them). Parents alone cannot say it: a rootless chain [-1, 0, 1] reads
    as a rooted one.
    """
    toks = check_ints(d.get("node_token_ids"), f"{where}.node_token_ids", 0)
    pars = [-1 if p is None else check_int(p, f"{where}.parents[{i}]", -1)
            for i, p in enumerate(check_list(d.get("parents"), f"{where}.parents"))]
    deps = check_ints(d.get("node_depths"), f"{where}.node_depths", 0)
    acc = check_ints(d.get("accepted_indices"), f"{where}.accepted_indices", 0)
    if not (len(toks) == len(pars) == len(deps)):
        fail(where, f"node_token_ids, parents and node_depths differ in length ({len(toks)}, {len(pars)}, {len(deps)})")
    if not toks:
        fail(where, "the trace has no nodes")
    if deps[0] not in (0, 1):
        fail(f"{where}.node_depths[0]", f"{deps[0]} must be 0 (node 0 is the root) or 1 (the root is not listed)")
    rooted = deps[0] == 0
    if rooted and -1 in pars[1:]:
        i = pars.index(-1, 1)
        fail(f"{where}.parents[{i}]", "-1, but node 0 is the root (its depth is 0); a trace without its root "
                                       "gives its nodes depths from 1")
    if not rooted:
        toks, deps = [_root_token(d, where)] + toks, [0] + deps
        pars = [-1] + [p + 1 for p in pars]
        acc = [0] + [a + 1 for a in acc]
    if not acc or acc[0] != 0:
        acc = [0] + acc
    depths = check_tree(pars, acc, acc[-1], where, ddtree=True)
    shift = 0 if rooted else 1  # trace index of tree node v is v - shift
    check_siblings(pars, toks, where, lambda v: f"node_token_ids[{v - shift}]")
    if depths != deps:
        bad = next(i for i in range(len(deps)) if deps[i] != depths[i])
        fail(f"{where}.node_depths[{bad - shift}]", f"{deps[bad]} does not match the parents (expected {depths[bad]})")
    return RoundRecord.unscored(index, "ddtree-trace", toks, pars, depths, exit_node=acc[-1],
                                bonus_token=_bonus_token(d, where))


def parse_ddtree_rounds(rounds, where: str) -> list[RoundRecord]:
    """A list of DDTree trace rounds."""
    rounds = check_list(rounds, where, MAX_ROUNDS)
    return [parse_ddtree(t, f"{where}[{i}]", i) for i, t in enumerate(rounds)]
