"""Session and round JSON: export, and validated import of tevviz files and DDTree traces.

Import never trusts its input: sizes are capped and every field is checked, and each error names
the round and the field (docs/json-schema.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import TevvizError
from .ddtree_trace import parse_ddtree, parse_ddtree_rounds
from .draft_rows import check_draft_rows
from .json_checks import (
    MAX_ROUNDS,
    check_dict,
    check_int,
    check_list,
    check_num,
    check_siblings,
    check_str,
    check_tree,
    fail,
    parent_depths,
)
from .records import ROUND_SCHEMA, ROUND_SCHEMAS, SESSION_SCHEMA, SESSION_SCHEMAS, RoundRecord
from .round_time import SIZING_KEYS

MAX_BYTES = 64 * 1024 * 1024


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


def _node_list(x, where: str) -> tuple[list[dict], list[int]]:
    """`where.nodes` as objects with ids 0..N-1 in order, and their parents (-1 for a null root parent)."""
    nodes = check_list(x, f"{where}.nodes")
    for i, n in enumerate(nodes):
        check_dict(n, f"{where}.nodes[{i}]")
        if check_int(n.get("id"), f"{where}.nodes[{i}].id") != i:
            fail(f"{where}.nodes[{i}].id", f"node ids must be 0..N-1 in order, got {n.get('id')}")
    parents = [-1 if i == 0 and n.get("parent") is None else check_int(n.get("parent"), f"{where}.nodes[{i}].parent")
               for i, n in enumerate(nodes)]
    return nodes, parents


def parse_round(d, where: str = "round") -> RoundRecord:
    """A validated RoundRecord from a tevviz node-link round dict."""
    d = check_dict(d, where)
    g = check_dict(d.get("graph"), f"{where}.graph")
    nodes, parents = _node_list(d.get("nodes"), where)
    accepted = [check_int(a, f"{where}.graph.accepted")
                for a in check_list(g.get("accepted"), f"{where}.graph.accepted")]
    exit_node = check_int(g.get("exit_node"), f"{where}.graph.exit_node")
    depths = check_tree(parents, accepted, exit_node, where)
    for i, n in enumerate(nodes):
        if "depth" in n and n["depth"] != depths[i]:
            fail(f"{where}.nodes[{i}].depth", f"{n['depth']} does not match the parents (expected {depths[i]})")
        check_int(n.get("token_id"), f"{where}.nodes[{i}].token_id", 0, nullable=i == 0)
        check_str(n.get("text"), f"{where}.nodes[{i}].text")
        for key in ("p_edge", "P", "rho", "w"):
            check_num(n.get(key), f"{where}.nodes[{i}].{key}", 0.0, 1.0 + 1e-4)
        if ("accept" in n) != ("accept" in nodes[0]):
            fail(f"{where}.nodes[{i}].accept", "is given for some nodes and not others (all or none)")
        if "accept" in n:
            check_num(n["accept"], f"{where}.nodes[{i}].accept", 0.0, 1.0 + 1e-4, nullable=False)
        for key in ("draft_logprob", "score"):
            check_num(n.get(key), f"{where}.nodes[{i}].{key}", hi=1e-4)
        for j, m in enumerate(check_list(n.get("missing", []), f"{where}.nodes[{i}].missing", 64)):
            m = check_dict(m, f"{where}.nodes[{i}].missing[{j}]")
            check_int(m.get("token_id"), f"{where}.nodes[{i}].missing[{j}].token_id", 0)
            check_num(m.get("gain"), f"{where}.nodes[{i}].missing[{j}].gain", 0.0, 1.0 + 1e-4, nullable=False)
            check_str(m.get("text"), f"{where}.nodes[{i}].missing[{j}].text")
    check_siblings(parents, [n.get("token_id") for n in nodes], where, lambda v: f"nodes[{v}].token_id")
    check_int(g.get("bonus_token_id"), f"{where}.graph.bonus_token_id", 0, nullable=True)
    check_num(g.get("C_p"), f"{where}.graph.C_p", 0.0)
    stage = check_dict(g.get("stage_ms", {}), f"{where}.graph.stage_ms")
    for k, v in stage.items():
        check_num(v, f"{where}.graph.stage_ms.{k}", 0.0, nullable=False)
    for j, t in enumerate(check_list(g.get("committed", []), f"{where}.graph.committed")):
        check_int(t, f"{where}.graph.committed[{j}]", 0)
    if g.get("optimal") is not None:
        _check_optimal(g["optimal"], f"{where}.graph.optimal", nodes[0].get("token_id"))
    if g.get("sizing") is not None:
        sizing = check_dict(g["sizing"], f"{where}.graph.sizing")
        if len(sizing) > 32:
            fail(f"{where}.graph.sizing", "has too many entries")
        for k in SIZING_KEYS:
            if k not in sizing:
                fail(f"{where}.graph.sizing", f"lacks {k!r}")
        for k, v in sizing.items():
            if not isinstance(v, bool):
                check_num(v, f"{where}.graph.sizing.{k}", nullable=False)
    if g.get("draft_rows") is not None:
        check_draft_rows(g["draft_rows"], f"{where}.graph.draft_rows", [n.get("token_id") for n in nodes], parents)
    rec = dict(d)
    rec["nodes"] = [dict(n, token_id=-1 if n.get("token_id") is None else n["token_id"]) for n in nodes]
    return RoundRecord.from_dict(rec)


def _check_optimal(o, where: str, root_token) -> None:
    """An optimal tree: a prefix-closed tree below the round's root, P in [0, 1] not growing along a path."""
    o = check_dict(o, where)
    check_int(o.get("budget"), f"{where}.budget", 0)
    H = check_int(o.get("depth"), f"{where}.depth", 0)
    check_num(o.get("ms", 0.0), f"{where}.ms", 0.0)
    check_int(o.get("passes", 0), f"{where}.passes", 0)
    if not isinstance(o.get("ceiling", True), bool):  # written for readers; the round's own fields decide it on import
        fail(f"{where}.ceiling", f"expected true or false, got {o['ceiling']!r}"[:200])
    nodes, parents = _node_list(o.get("nodes"), where)
    if not nodes:
        fail(f"{where}.nodes", "needs the root")
    if parents[0] != -1:
        fail(f"{where}.nodes[0].parent", "node 0 must be the root (parent null)")
    depths = parent_depths(parents, lambda v: f"{where}.nodes[{v}].parent")
    P = [check_num(n.get("P"), f"{where}.nodes[{i}].P", 0.0, 1.0 + 1e-4, nullable=False) for i, n in enumerate(nodes)]
    for i, n in enumerate(nodes):
        check_int(n.get("token_id"), f"{where}.nodes[{i}].token_id", 0)
        check_str(n.get("text"), f"{where}.nodes[{i}].text")
        if n.get("depth") != depths[i] or depths[i] > H:
            fail(f"{where}.nodes[{i}].depth", f"{n.get('depth')} does not match the parents or exceeds depth {H}")
        if i and P[i] > P[parents[i]] * (1 + 1e-6):
            fail(f"{where}.nodes[{i}].P", "a prefix probability cannot exceed its parent's")
    if nodes[0]["token_id"] != root_token:
        fail(f"{where}.nodes[0].token_id", f"{nodes[0]['token_id']} is not the round's root token {root_token}")
    check_siblings(parents, [n["token_id"] for n in nodes], where, lambda v: f"nodes[{v}].token_id")


def current_builder(builder):
    """A builder's settings as this version writes them: files written before its name's key was `name` say `kind`."""
    if isinstance(builder, dict) and "kind" in builder and "name" not in builder:
        return {("name" if k == "kind" else k): v for k, v in builder.items()}
    return builder


def current_settings(settings: dict) -> dict:
    """Settings (a session's meta, a scan's settings) with the builder's as this version writes them."""
    b = settings.get("builder")
    return {**settings, "builder": current_builder(b)} if isinstance(b, dict) else settings


def parse(data) -> ImportedSession:
    """Validate a decoded JSON value as a tevviz session, a tevviz round, or DDTree trace(s)."""
    if isinstance(data, list):
        return ImportedSession(parse_ddtree_rounds(data, "trace"), "ddtree")
    data = check_dict(data, "file")
    schema = data.get("schema")
    if schema in SESSION_SCHEMAS:
        rounds = [parse_round(r, f"rounds[{i}]")
                  for i, r in enumerate(check_list(data.get("rounds"), "rounds", MAX_ROUNDS))]
        ids = lambda key: [check_int(t, f"{key}[{i}]", 0)
                           for i, t in enumerate(check_list(data.get(key, []), key, 1 << 22))]
        return ImportedSession(
            rounds, "session", meta=current_settings(check_dict(data.get("meta", {}), "meta")),
            prompt=check_str(data.get("prompt"), "prompt"),
            prompt_token_ids=ids("prompt_token_ids"), token_ids=ids("token_ids"),
            text=check_str(data.get("text"), "text"),
        )
    if schema in ROUND_SCHEMAS or (schema is None and "nodes" in data and "graph" in data):
        return ImportedSession([parse_round(data, "round")], "round")
    if schema is None and "round_trees" in data:
        return ImportedSession(parse_ddtree_rounds(data["round_trees"], "round_trees"), "ddtree")
    if schema is None and ("node_token_ids" in data or "tree" in data):
        return ImportedSession([parse_ddtree(data)], "ddtree")
    first = data.get("rounds")[0] if isinstance(data.get("rounds"), list) and data["rounds"] else None
    if schema is None and isinstance(first, dict) and ("node_token_ids" in first or "tree" in first):
        return ImportedSession(parse_ddtree_rounds(data["rounds"], "rounds"), "ddtree")
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
        raise TevvizError(f"{path}: {p.stat().st_size} bytes is over the import limit of "
                          f"{MAX_BYTES // (1024 * 1024)} MiB")
    return loads(p.read_bytes())


def session_meta(session) -> dict:
    """Models, settings and version of a DecodeSession, for the export's `meta`."""
    from dataclasses import asdict

    from ... import __version__

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
        "stop_on_eos": cfg.stop_on_eos,  # False: --ignore-eos decoded past the end token
        "chat": cfg.chat,
        "tevviz": __version__,
        **_reading(session),
    }


def _reading(session) -> dict:
    """Which target states the drafter read and why, for a drafter that reads any (EAGLE-3, block)."""
    reading = getattr(session, "reading", None)
    return {} if reading is None else {"drafter_reading": {"layer_ids": list(reading.layer_ids), "why": reading.why}}


def export_session(session, prompt: str) -> dict:
    """A DecodeSession as a tevviz.session/2 dict."""
    text = session.pair.tokenizer.decode(session.generated)
    return session_dict(session_meta(session), prompt, session.prompt_ids, session.generated, text, session.rounds)
