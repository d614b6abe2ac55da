"""Session and round JSON: export, and validated import of tevviz files and DDTree traces.

Import never trusts its input: sizes are capped and every field is checked, and each error names
the round and the field (docs/json-schema.md).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from .draft_rows import check_draft_rows
from .errors import TevvizError
from .records import (
    ROUND_SCHEMA,
    ROUND_SCHEMAS,
    SESSION_SCHEMA,
    SESSION_SCHEMAS,
    RoundRecord,
    TreeShapeError,
    path_to,
    tree_depths,
)
from .round_time import SIZING_KEYS

MAX_BYTES = 64 * 1024 * 1024
MAX_NODES = 8192
MAX_ROUNDS = 100_000


@dataclass
class ImportedSession:
    """What an import yields: rounds as records plus whatever session fields the file had."""

    rounds: list[RoundRecord]
    kind: str  # "session", "round" or "ddtree"
    meta: dict = field(default_factory=dict)
    prompt: str = ""
    prompt_token_ids: list[int] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    text: str = ""


def session_dict(meta: dict, prompt: str, prompt_ids: list[int], generated: list[int], text: str,
                 rounds: list[RoundRecord]) -> dict:
    """The whole session in the tevviz.session/2 schema."""
    return {
        "schema": SESSION_SCHEMA,
        "meta": meta,
        "prompt": prompt,
        "prompt_token_ids": list(prompt_ids),
        "token_ids": list(generated),
        "text": text,
        "rounds": [r.to_dict() for r in rounds],
    }


def round_dict(record: RoundRecord) -> dict:
    """One round in the tevviz.round/2 schema (a node-link graph with a schema tag)."""
    return {"schema": ROUND_SCHEMA, **record.to_dict()}


def _fail(where: str, msg: str):
    raise TevvizError(f"{where}: {msg}")


def _int(x, where: str, lo: int | None = None, hi: int | None = None, nullable: bool = False):
    if x is None and nullable:
        return None
    if not isinstance(x, int) or isinstance(x, bool):
        _fail(where, f"expected an integer, got {type(x).__name__}")
    if (lo is not None and x < lo) or (hi is not None and x > hi):
        _fail(where, f"{x} is out of range [{lo}, {hi}]")
    return x


def _num(x, where: str, lo: float | None = None, hi: float | None = None, nullable: bool = True):
    if x is None and nullable:
        return None
    if not isinstance(x, (int, float)) or isinstance(x, bool) or not math.isfinite(x):
        _fail(where, f"expected a finite number, got {x!r}"[:200])
    if (lo is not None and x < lo) or (hi is not None and x > hi):
        _fail(where, f"{x} is out of range [{lo}, {hi}]")
    return float(x)


def _list(x, where: str, max_len: int = MAX_NODES) -> list:
    if not isinstance(x, list):
        _fail(where, f"expected a list, got {type(x).__name__}")
    if len(x) > max_len:
        _fail(where, f"has {len(x)} entries, more than the limit {max_len}")
    return x


def _dict(x, where: str) -> dict:
    if not isinstance(x, dict):
        _fail(where, f"expected an object, got {type(x).__name__}")
    return x


def _str(x, where: str, nullable: bool = True) -> str:
    if x is None and nullable:
        return ""
    if not isinstance(x, str):
        _fail(where, f"expected a string, got {type(x).__name__}")
    return x


def _depths(parents: list[int], parent_field) -> list[int]:
    """Each node's depth in a parent array whose node 0 is the root (records.tree_depths); refuses a parent that is
    not an earlier node, naming its field."""
    try:
        return tree_depths(parents)
    except TreeShapeError as e:
        if e.node == 0:  # the callers check the root first; kept for any new one
            _fail(parent_field(0), str(e))
        _fail(parent_field(e.node), f"{parents[e.node]} is not an earlier node (parents must precede children)")


def _check_tree(parents: list[int], accepted: list[int], exit_node: int, where: str, ddtree: bool = False) -> list[int]:
    """Parents before children, one root, accepted = the root-to-exit path; returns depths."""
    parent_field = (lambda v: f"{where}.parents[{v}]") if ddtree else (lambda v: f"{where}.nodes[{v}].parent")
    accepted_field = f"{where}.accepted_indices" if ddtree else f"{where}.graph.accepted"
    n = len(parents)
    if n == 0:
        _fail(where, "the tree has no nodes")
    if parents[0] != -1:
        _fail(parent_field(0), "node 0 must be the root (parent null)")
    depths = _depths(parents, parent_field)
    _int(exit_node, accepted_field if ddtree else f"{where}.graph.exit_node", 0, n - 1)
    if accepted != path_to(parents, exit_node):
        _fail(accepted_field, f"{accepted[:20]} is not the path from the root to exit node {exit_node}")
    return depths


def _check_path(parents: list[int], accepted: list[int], field: str) -> None:
    """`accepted` walks from the root (0) down through `parents`, each node a child of the one before."""
    if not accepted:
        _fail(field, "is empty; it must start at the root, 0")
    if accepted[0] != 0:
        _fail(f"{field}[0]", f"{accepted[0]} is not the root; the path must start at 0")
    for k in range(1, len(accepted)):
        v, u = accepted[k], accepted[k - 1]
        if v >= len(parents):
            _fail(f"{field}[{k}]", f"{v} is not a node (the tree has nodes 0..{len(parents) - 1})")
        if parents[v] != u:
            _fail(f"{field}[{k}]", f"node {v} is not a child of node {u} (its parent is {parents[v]})")


def _check_siblings(parents: list[int], tokens: list[int], where: str, node_name) -> None:
    """Siblings carry distinct tokens (docs/math.md, *Notation*); a repeat would count one token's mass twice."""
    first: dict[tuple[int, int], int] = {}
    for v in range(1, len(parents)):
        other = first.setdefault((parents[v], tokens[v]), v)
        if other != v:
            _fail(where, f"nodes {other} and {v} ({node_name(other)} and {node_name(v)}) are siblings that both carry "
                         f"token {tokens[v]}; siblings must carry distinct tokens")


def _node_list(x, where: str) -> tuple[list[dict], list[int]]:
    """`where.nodes` as objects with ids 0..N-1 in order, and their parents (-1 for a null root parent)."""
    nodes = _list(x, f"{where}.nodes")
    for i, n in enumerate(nodes):
        _dict(n, f"{where}.nodes[{i}]")
        if _int(n.get("id"), f"{where}.nodes[{i}].id") != i:
            _fail(f"{where}.nodes[{i}].id", f"node ids must be 0..N-1 in order, got {n.get('id')}")
    parents = [-1 if i == 0 and n.get("parent") is None else _int(n.get("parent"), f"{where}.nodes[{i}].parent")
               for i, n in enumerate(nodes)]
    return nodes, parents


def parse_round(d, where: str = "round") -> RoundRecord:
    """A validated RoundRecord from a tevviz node-link round dict."""
    d = _dict(d, where)
    g = _dict(d.get("graph"), f"{where}.graph")
    nodes, parents = _node_list(d.get("nodes"), where)
    accepted = [_int(a, f"{where}.graph.accepted") for a in _list(g.get("accepted"), f"{where}.graph.accepted")]
    exit_node = _int(g.get("exit_node"), f"{where}.graph.exit_node")
    depths = _check_tree(parents, accepted, exit_node, where)
    for i, n in enumerate(nodes):
        if "depth" in n and n["depth"] != depths[i]:
            _fail(f"{where}.nodes[{i}].depth", f"{n['depth']} does not match the parents (expected {depths[i]})")
        _int(n.get("token_id"), f"{where}.nodes[{i}].token_id", 0, nullable=i == 0)
        _str(n.get("text"), f"{where}.nodes[{i}].text")
        for key in ("p_edge", "P", "rho", "w"):
            _num(n.get(key), f"{where}.nodes[{i}].{key}", 0.0, 1.0 + 1e-4)
        if ("accept" in n) != ("accept" in nodes[0]):
            _fail(f"{where}.nodes[{i}].accept", "is given for some nodes and not others (all or none)")
        if "accept" in n:
            _num(n["accept"], f"{where}.nodes[{i}].accept", 0.0, 1.0 + 1e-4, nullable=False)
        for key in ("draft_logprob", "score"):
            _num(n.get(key), f"{where}.nodes[{i}].{key}", hi=1e-4)
        for j, m in enumerate(_list(n.get("missing", []), f"{where}.nodes[{i}].missing", 64)):
            m = _dict(m, f"{where}.nodes[{i}].missing[{j}]")
            _int(m.get("token_id"), f"{where}.nodes[{i}].missing[{j}].token_id", 0)
            _num(m.get("gain"), f"{where}.nodes[{i}].missing[{j}].gain", 0.0, 1.0 + 1e-4, nullable=False)
            _str(m.get("text"), f"{where}.nodes[{i}].missing[{j}].text")
    _check_siblings(parents, [n.get("token_id") for n in nodes], where, lambda v: f"nodes[{v}].token_id")
    _int(g.get("bonus_token_id"), f"{where}.graph.bonus_token_id", 0, nullable=True)
    _num(g.get("C_p"), f"{where}.graph.C_p", 0.0)
    stage = _dict(g.get("stage_ms", {}), f"{where}.graph.stage_ms")
    for k, v in stage.items():
        _num(v, f"{where}.graph.stage_ms.{k}", 0.0, nullable=False)
    for j, t in enumerate(_list(g.get("committed", []), f"{where}.graph.committed")):
        _int(t, f"{where}.graph.committed[{j}]", 0)
    if g.get("optimal") is not None:
        _check_optimal(g["optimal"], f"{where}.graph.optimal", nodes[0].get("token_id"))
    if g.get("sizing") is not None:
        sizing = _dict(g["sizing"], f"{where}.graph.sizing")
        if len(sizing) > 32:
            _fail(f"{where}.graph.sizing", "has too many entries")
        for k in SIZING_KEYS:
            if k not in sizing:
                _fail(f"{where}.graph.sizing", f"lacks {k!r}")
        for k, v in sizing.items():
            if not isinstance(v, bool):
                _num(v, f"{where}.graph.sizing.{k}", nullable=False)
    if g.get("draft_rows") is not None:
        check_draft_rows(g["draft_rows"], f"{where}.graph.draft_rows", [n.get("token_id") for n in nodes], parents)
    rec = dict(d)
    rec["nodes"] = [dict(n, token_id=-1 if n.get("token_id") is None else n["token_id"]) for n in nodes]
    return RoundRecord.from_dict(rec)


def _check_optimal(o, where: str, root_token) -> None:
    """An optimal tree: a prefix-closed tree below the round's root, P in [0, 1] not growing along a path."""
    o = _dict(o, where)
    _int(o.get("budget"), f"{where}.budget", 0)
    H = _int(o.get("depth"), f"{where}.depth", 0)
    _num(o.get("ms", 0.0), f"{where}.ms", 0.0)
    _int(o.get("passes", 0), f"{where}.passes", 0)
    if not isinstance(o.get("ceiling", True), bool):  # written for readers; the round's own fields decide it on import
        _fail(f"{where}.ceiling", f"expected true or false, got {o['ceiling']!r}"[:200])
    nodes, parents = _node_list(o.get("nodes"), where)
    if not nodes:
        _fail(f"{where}.nodes", "needs the root")
    if parents[0] != -1:
        _fail(f"{where}.nodes[0].parent", "node 0 must be the root (parent null)")
    depths = _depths(parents, lambda v: f"{where}.nodes[{v}].parent")
    P = [_num(n.get("P"), f"{where}.nodes[{i}].P", 0.0, 1.0 + 1e-4, nullable=False) for i, n in enumerate(nodes)]
    for i, n in enumerate(nodes):
        _int(n.get("token_id"), f"{where}.nodes[{i}].token_id", 0)
        _str(n.get("text"), f"{where}.nodes[{i}].text")
        if n.get("depth") != depths[i] or depths[i] > H:
            _fail(f"{where}.nodes[{i}].depth", f"{n.get('depth')} does not match the parents or exceeds depth {H}")
        if i and P[i] > P[parents[i]] * (1 + 1e-6):
            _fail(f"{where}.nodes[{i}].P", "a prefix probability cannot exceed its parent's")
    if nodes[0]["token_id"] != root_token:
        _fail(f"{where}.nodes[0].token_id", f"{nodes[0]['token_id']} is not the round's root token {root_token}")
    _check_siblings(parents, [n["token_id"] for n in nodes], where, lambda v: f"nodes[{v}].token_id")


def _ints(x, where: str, lo: int | None = None, max_len: int = MAX_NODES) -> list[int]:
    return [_int(v, f"{where}[{i}]", lo) for i, v in enumerate(_list(x, where, max_len))]


def _root_token(d: dict, where: str) -> int:
    """A trace that does not store its root's token: `root_token_id` when given, else 0 (unknown)."""
    return _int(d.get("root_token_id", 0), f"{where}.root_token_id", 0)


def _bonus_token(d: dict, where: str) -> int:
    return _int(d.get("bonus_token_id", -1), f"{where}.bonus_token_id", -1)


def parse_ddtree(d, where: str = "trace", index: int = 0) -> RoundRecord:
    """A round from a DDTree trace: DDTree's own `{"accepted_indices", "tree"}` round, or the flat fields."""
    d = _dict(d, where)
    if "tree" in d:
        return _parse_ddtree_round(d, where, index)
    return _parse_ddtree_flat(d, where, index)


def _parse_ddtree_round(d: dict, where: str, index: int) -> RoundRecord:
    """One entry of `ddtree_generate(..., save_tree_traces=True).round_trees`.

    Tree node v > 0 is `node_token_ids[v - 1]` at depth `node_depths[v - 1]` under `parents[v]`; node 0
    is the root (parents[0] = -1, its token not stored); `accepted_indices` is the path from 0 down.
    """
    tree = _dict(d.get("tree"), f"{where}.tree")
    at = f"{where}.tree"
    toks = _ints(tree.get("node_token_ids"), f"{at}.node_token_ids", 0)
    deps = _ints(tree.get("node_depths"), f"{at}.node_depths", 0)
    pars = _ints(tree.get("parents"), f"{at}.parents", -1, MAX_NODES + 1)
    acc = _ints(d.get("accepted_indices"), f"{where}.accepted_indices", 0)
    n = len(toks)
    if len(deps) != n:
        _fail(f"{at}.node_depths", f"has {len(deps)} entries, expected {n} (one per node_token_ids)")
    if len(pars) != n + 1:
        _fail(f"{at}.parents", f"has {len(pars)} entries, expected {n + 1} (the root, then one per node_token_ids)")
    if pars[0] != -1:
        _fail(f"{at}.parents[0]", f"{pars[0]} must be -1: node 0 is the root")
    depths = _depths(pars, lambda v: f"{at}.parents[{v}]")
    bad = next((v for v in range(1, n + 1) if deps[v - 1] != depths[v]), None)
    if bad is not None:
        _fail(f"{at}.node_depths[{bad - 1}]",
              f"{deps[bad - 1]} does not match the parents (expected {depths[bad]}, the parent's depth + 1)")
    _check_path(pars, acc, f"{where}.accepted_indices")
    tokens = [_root_token(d, where)] + toks
    _check_siblings(pars, tokens, at, lambda v: f"node_token_ids[{v - 1}]")
    return RoundRecord.unscored(index, "ddtree-trace", tokens, pars, depths, exit_node=acc[-1],
                                bonus_token=_bonus_token(d, where))


def _parse_ddtree_flat(d: dict, where: str, index: int) -> RoundRecord:
    """A round as flat fields of equal length: node_token_ids, node_depths, parents, accepted_indices.

    The first node's depth says the layout: 0, it is the root; 1, the nodes are the drafted ones (a root, token
    `root_token_id` if given, is put above them). Parents alone cannot say it: a rootless chain [-1, 0, 1] reads
    as a rooted one.
    """
    toks = _ints(d.get("node_token_ids"), f"{where}.node_token_ids", 0)
    pars = [-1 if p is None else _int(p, f"{where}.parents[{i}]", -1) for i, p in enumerate(_list(d.get("parents"), f"{where}.parents"))]
    deps = _ints(d.get("node_depths"), f"{where}.node_depths", 0)
    acc = _ints(d.get("accepted_indices"), f"{where}.accepted_indices", 0)
    if not (len(toks) == len(pars) == len(deps)):
        _fail(where, f"node_token_ids, parents and node_depths differ in length ({len(toks)}, {len(pars)}, {len(deps)})")
    if not toks:
        _fail(where, "the trace has no nodes")
    if deps[0] not in (0, 1):
        _fail(f"{where}.node_depths[0]", f"{deps[0]} must be 0 (node 0 is the root) or 1 (the root is not listed)")
    rooted = deps[0] == 0
    if rooted and -1 in pars[1:]:
        i = pars.index(-1, 1)
        _fail(f"{where}.parents[{i}]", "-1, but node 0 is the root (its depth is 0); a trace without its root "
                                       "gives its nodes depths from 1")
    if not rooted:
        toks, deps = [_root_token(d, where)] + toks, [0] + deps
        pars = [-1] + [p + 1 for p in pars]
        acc = [0] + [a + 1 for a in acc]
    if not acc or acc[0] != 0:
        acc = [0] + acc
    depths = _check_tree(pars, acc, acc[-1], where, ddtree=True)
    shift = 0 if rooted else 1  # trace index of tree node v is v - shift
    _check_siblings(pars, toks, where, lambda v: f"node_token_ids[{v - shift}]")
    if depths != deps:
        bad = next(i for i in range(len(deps)) if deps[i] != depths[i])
        _fail(f"{where}.node_depths[{bad - shift}]", f"{deps[bad]} does not match the parents (expected {depths[bad]})")
    return RoundRecord.unscored(index, "ddtree-trace", toks, pars, depths, exit_node=acc[-1],
                                bonus_token=_bonus_token(d, where))


def _ddtree_rounds(rounds, where: str) -> ImportedSession:
    rounds = _list(rounds, where, MAX_ROUNDS)
    return ImportedSession([parse_ddtree(t, f"{where}[{i}]", i) for i, t in enumerate(rounds)], "ddtree")


def parse(data) -> ImportedSession:
    """Validate a decoded JSON value as a tevviz session, a tevviz round, or DDTree trace(s)."""
    if isinstance(data, list):
        return _ddtree_rounds(data, "trace")
    data = _dict(data, "file")
    schema = data.get("schema")
    if schema in SESSION_SCHEMAS:
        rounds = [parse_round(r, f"rounds[{i}]") for i, r in enumerate(_list(data.get("rounds"), "rounds", MAX_ROUNDS))]
        ids = lambda key: [_int(t, f"{key}[{i}]", 0) for i, t in enumerate(_list(data.get(key, []), key, 1 << 22))]
        return ImportedSession(
            rounds, "session", meta=_dict(data.get("meta", {}), "meta"), prompt=_str(data.get("prompt"), "prompt"),
            prompt_token_ids=ids("prompt_token_ids"), token_ids=ids("token_ids"), text=_str(data.get("text"), "text"),
        )
    if schema in ROUND_SCHEMAS or (schema is None and "nodes" in data and "graph" in data):
        return ImportedSession([parse_round(data, "round")], "round")
    if schema is None and "round_trees" in data:
        return _ddtree_rounds(data["round_trees"], "round_trees")
    if schema is None and ("node_token_ids" in data or "tree" in data):
        return ImportedSession([parse_ddtree(data)], "ddtree")
    first = data.get("rounds")[0] if isinstance(data.get("rounds"), list) and data["rounds"] else None
    if schema is None and isinstance(first, dict) and ("node_token_ids" in first or "tree" in first):
        return _ddtree_rounds(data["rounds"], "rounds")
    raise TevvizError(
        f"file: unknown format (schema {schema!r}); expected {SESSION_SCHEMA!r}, {ROUND_SCHEMA!r} or a DDTree trace"
    )


def loads(text: str | bytes) -> ImportedSession:
    """Parse and validate JSON text."""
    if len(text) > MAX_BYTES:
        raise TevvizError(f"file: {len(text)} bytes is over the import limit of {MAX_BYTES // (1024 * 1024)} MiB")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise TevvizError(f"file: not valid JSON ({str(e)[:200]})") from None
    return parse(data)


def load(path: str | Path) -> ImportedSession:
    """Parse and validate a JSON file."""
    p = Path(path)
    if not p.is_file():
        raise TevvizError(f"{path}: no such file")
    if p.stat().st_size > MAX_BYTES:
        raise TevvizError(f"{path}: {p.stat().st_size} bytes is over the import limit of {MAX_BYTES // (1024 * 1024)} MiB")
    return loads(p.read_bytes())


def session_meta(session) -> dict:
    """Models, settings and version of a DecodeSession, for the export's `meta`."""
    from dataclasses import asdict

    from .. import __version__

    pair, cfg = session.pair, session.cfg
    return {
        "target": pair.target_name,
        "draft": pair.draft_name,
        "dtype": str(pair.target.dtype).removeprefix("torch."),
        "device": str(pair.device),
        "sampling": asdict(cfg.sampling),
        "builder": {**asdict(cfg.builder), "branching": list(cfg.builder.branching)},
        "verifier": cfg.verifier,
        "seed": cfg.seed,
        "max_new_tokens": cfg.max_new_tokens,
        "chat": cfg.chat,
        "tevviz": __version__,
    }


def export_session(session, prompt: str) -> dict:
    """A DecodeSession as a tevviz.session/2 dict."""
    text = session.pair.tokenizer.decode(session.generated)
    return session_dict(session_meta(session), prompt, session.prompt_ids, session.generated, text, session.rounds)
