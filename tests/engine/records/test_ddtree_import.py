"""DDTree's own trace layout: `ddtree_generate(..., save_tree_traces=True).round_trees`, imported as DDTree writes it.

Per round: {"accepted_indices": [...], "tree": {"node_token_ids": [N], "node_depths": [N], "parents": [N + 1]}},
tree node i > 0 is node_token_ids[i - 1], node 0 the root (token not stored, parents[0] = -1). Also the flat
layout, with or without its root, which the first node's depth tells apart.

The flat-layout tests were checked to fail against the fault they target, planted: rootedness decided by the
parents (node 0 the root when it alone has parent -1), which reads a rootless chain as a rooted one, one node short
and with its first drafted token as the root.
"""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tevviz.cli import main
from tevviz.engine.errors import TevvizError
from tevviz.engine.records.io import load, parse, parse_round, round_dict
from tevviz.engine.records.records import path_to


def ddtree_round(tokens: list[int], parents: list[int], accepted: list[int]) -> dict:
    """A round as DDTree writes it, from the drafted nodes' tokens and the full parent array (root first)."""
    depths = [0] * len(parents)
    for v in range(1, len(parents)):
        depths[v] = depths[parents[v]] + 1
    return {"accepted_indices": list(accepted),
            "tree": {"node_token_ids": list(tokens), "node_depths": depths[1:], "parents": list(parents)}}


# Round 0: root -> 1 -> 3 -> 5 accepted (L = 4); round 1: root -> 3 accepted (L = 2).
ROUND_TREES = [
    ddtree_round([11, 12, 13, 14, 15], [-1, 0, 0, 1, 1, 3], [0, 1, 3, 5]),
    ddtree_round([21, 22, 23], [-1, 0, 1, 0], [0, 3]),
]


def write(tmp_path, data, name="trace.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("wrap", ["list", "dict"], ids=["bare list", "round_trees"])
def test_two_round_trace_imports(tmp_path, wrap):
    data = ROUND_TREES if wrap == "list" else {"round_trees": ROUND_TREES, "acceptance_lengths": [4, 2]}
    imp = load(write(tmp_path, data))
    assert imp.kind == "ddtree" and len(imp.rounds) == 2
    r0, r1 = imp.rounds
    assert [r0.index, r1.index] == [0, 1]
    assert [r0.size, r1.size] == [6, 4]  # the root plus N drafted nodes
    assert r0.tokens[1:] == [11, 12, 13, 14, 15] and r1.tokens[1:] == [21, 22, 23]
    assert r0.tokens[0] == 0 and r1.tokens[0] == 0  # the root's token is unknown, as in the flat import
    assert r0.parents == [-1, 0, 0, 1, 1, 3] and r1.parents == [-1, 0, 1, 0]
    assert r0.depths == [0, 1, 1, 2, 2, 3] and r1.depths == [0, 1, 2, 1]
    assert r0.accepted == [0, 1, 3, 5] and r0.exit_node == 5 and r0.block_length == 4
    assert r1.accepted == [0, 3] and r1.exit_node == 3 and r1.block_length == 2
    assert r0.verifier == "ddtree-trace" and r0.P == [None] * 6 and r0.C_p is None and r0.bonus_token == -1


def test_root_and_bonus_tokens_are_kept_when_given(tmp_path):
    rnd = dict(ROUND_TREES[1], root_token_id=7, bonus_token_id=9)
    r = load(write(tmp_path, {"round_trees": [rnd]})).rounds[0]
    assert r.tokens == [7, 21, 22, 23] and r.bonus_token == 9


def test_a_round_with_an_empty_tree_is_the_root_alone(tmp_path):
    r = load(write(tmp_path, [ddtree_round([], [-1], [0])])).rounds[0]
    assert r.size == 1 and r.parents == [-1] and r.accepted == [0] and r.block_length == 1


def test_inspect_reads_the_layout(tmp_path, capsys):
    path = write(tmp_path, {"round_trees": ROUND_TREES})
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"{path}: ddtree, 2 rounds"
    # the summary table: 2 rounds, 6 tokens, tau 3, no E[L] without target scores
    assert out[1] == "summary" and out[2].split()[-4:] == ["E[L]", "(no", "target", "scores)"]
    assert out[3].split() == ["2", "6", "3.000", "—"]
    at = out.index("rounds")  # the rounds table's title, its header, two rounds, then its notes
    # round, exit, nodes, depth, L; no C_p, no C_p*, no gap, no stage times
    assert out[at + 2].split() == ["0", "5", "6", "3", "4", "—", "—", "—", "—"]
    assert out[at + 3].split()[:5] == ["1", "3", "4", "2", "2"] and out[at + 4].startswith("  exit node: ")
    assert main(["inspect", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["kind"] == "ddtree" and doc["summary"]["rounds"] == 2 and doc["summary"]["tau"] == pytest.approx(3.0)
    assert [(r["nodes"], r["depth"], r["exit"], r["L"], r["expected_length"]) for r in doc["rounds"]] == [
        (6, 3, 5, 4, None), (4, 2, 3, 2, None)]


def _set(path: str, value):
    """A change to round 1 of ROUND_TREES: `path` is a dotted key path."""
    def change(rounds):
        node = rounds[1]
        *head, last = path.split(".")
        for key in head:
            node = node[key]
        node[last] = value
    return change


def _drop(key):
    def change(rounds):
        del rounds[1]["tree"][key]
    return change


MALFORMED = [
    (_set("tree.parents", [-1, 0, 1]), "round_trees[1].tree.parents: has 3 entries, expected 4"),
    (_set("tree.node_depths", [1, 2, 1, 1]), "round_trees[1].tree.node_depths: has 4 entries, expected 3"),
    (_set("tree.parents", [0, 0, 1, 0]), "round_trees[1].tree.parents[0]: 0 must be -1"),
    (_set("tree.parents", [-1, 0, 3, 0]), "round_trees[1].tree.parents[2]: 3 is not an earlier node"),
    (_set("tree.parents", [-1, -1, 1, 0]), "round_trees[1].tree.parents[1]: -1 is not an earlier node"),
    (_set("tree.node_depths", [1, 2, 2]), "round_trees[1].tree.node_depths[2]: 2 does not match the parents"),
    (_set("tree.node_depths", [0, 1, 0]), "round_trees[1].tree.node_depths[0]: 0 does not match the parents"),
    (_set("accepted_indices", []), "round_trees[1].accepted_indices: is empty"),
    (_set("accepted_indices", [3]), "round_trees[1].accepted_indices[0]: 3 is not the root"),
    (_set("accepted_indices", [0, 2]), "round_trees[1].accepted_indices[1]: node 2 is not a child of node 0"),
    (_set("accepted_indices", [0, 1, 3]), "round_trees[1].accepted_indices[2]: node 3 is not a child of node 1"),
    (_set("accepted_indices", [0, 9]), "round_trees[1].accepted_indices[1]: 9 is not a node"),
    (_set("accepted_indices", [0, -1]), "round_trees[1].accepted_indices[1]: -1 is out of range"),
    (_set("tree.node_token_ids", [21, 22, 21]),
     ("round_trees[1].tree: nodes 1 and 3 (node_token_ids[0] and node_token_ids[2]) are siblings "
      "that both carry token 21")),
    (_set("tree.node_token_ids", [21, "x", 23]), "round_trees[1].tree.node_token_ids[1]: expected an integer"),
    (_set("tree.node_token_ids", [21, -4, 23]), "round_trees[1].tree.node_token_ids[1]: -4 is out of range"),
    (_drop("parents"), "round_trees[1].tree.parents: expected a list, got NoneType"),
    (_set("tree", [1, 2]), "round_trees[1].tree: expected an object, got list"),
    (_set("root_token_id", "a"), "round_trees[1].root_token_id: expected an integer"),
]


@pytest.mark.parametrize("change, message", MALFORMED, ids=[m for _, m in MALFORMED])
def test_malformed_round_exits_2_naming_round_and_field(tmp_path, capsys, change, message):
    rounds = copy.deepcopy(ROUND_TREES)
    change(rounds)
    assert main(["inspect", str(write(tmp_path, {"round_trees": rounds}))]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert captured.out == "" and len(err.splitlines()) == 1
    assert err.startswith("tevviz inspect: error: ") and message in err
    # The same round in a bare list is named by its place in the list.
    assert main(["inspect", str(write(tmp_path, rounds, "bare.json"))]) == 2
    assert message.replace("round_trees[1]", "trace[1]") in capsys.readouterr().err


def test_round_trees_missing_exits_2(tmp_path, capsys):
    """What ddtree_generate returns without save_tree_traces: round_trees is None."""
    assert main(["inspect", str(write(tmp_path, {"round_trees": None, "acceptance_lengths": [3]}))]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "round_trees: expected a list, got NoneType" in err


@st.composite
def ddtree_trees(draw):
    """A random valid DDTree round: parent array in parent-before-child order, sibling tokens distinct."""
    n = draw(st.integers(0, 40))
    parents = [-1] + [draw(st.integers(0, v - 1)) for v in range(1, n + 1)]
    seen, tokens = set(), []
    for v in range(1, n + 1):
        tok = draw(st.integers(0, 30))
        while (parents[v], tok) in seen:
            tok += 1
        seen.add((parents[v], tok))
        tokens.append(tok)
    exit_node = draw(st.integers(0, n))
    return tokens, parents, path_to(parents, exit_node)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(trees=st.lists(ddtree_trees(), min_size=1, max_size=3))
def test_random_trees_round_trip(tmp_path, trees):
    rounds = [ddtree_round(*t) for t in trees]
    imp = load(write(tmp_path, {"round_trees": rounds}))
    assert len(imp.rounds) == len(trees)
    for i, (r, (tokens, parents, accepted), written) in enumerate(zip(imp.rounds, trees, rounds)):
        assert r.index == i
        assert r.tokens[1:] == tokens and r.parents == parents and r.accepted == accepted
        assert r.depths[1:] == written["tree"]["node_depths"] and r.depths[0] == 0
        assert r.exit_node == accepted[-1] and r.block_length == len(accepted)
        assert parse_round(json.loads(json.dumps(round_dict(r)))) == r  # and on through tevviz's own round file


# One tree, root -> 6 -> 7 -> 8 (a chain) plus a second child 9 of the root, in the flat layout with and without
# its root: node_depths[0] is 0 when node 0 is the root, 1 when the listed nodes are the drafted ones.
FLAT_ROOTED = {"node_token_ids": [5, 6, 7, 8, 9], "node_depths": [0, 1, 2, 3, 1], "parents": [-1, 0, 1, 2, 0],
               "accepted_indices": [0, 1, 2]}
FLAT_ROOTLESS = {"node_token_ids": [6, 7, 8, 9], "node_depths": [1, 2, 3, 1], "parents": [-1, 0, 1, -1],
                 "accepted_indices": [0, 1], "root_token_id": 5}


@pytest.mark.parametrize("chain", [False, True], ids=["tree", "chain"])
def test_flat_layouts_with_and_without_the_root_read_the_same_tree(chain):
    """A rootless chain has one parent -1, as a rooted tree does: only the depths tell them apart."""
    rooted, rootless = copy.deepcopy(FLAT_ROOTED), copy.deepcopy(FLAT_ROOTLESS)
    if chain:  # drop token 9, the root's second child: the rootless parents become [-1, 0, 1]
        for d in (rooted, rootless):
            for key in ("node_token_ids", "node_depths", "parents"):
                del d[key][-1]
    a, b = parse(rooted).rounds[0], parse(rootless).rounds[0]
    n = 4 if chain else 5
    assert a.size == b.size == n and a.tokens == b.tokens == [5, 6, 7, 8, 9][:n]
    assert a.parents == b.parents == [-1, 0, 1, 2, 0][:n] and a.depths == b.depths == [0, 1, 2, 3, 1][:n]
    assert a.accepted == b.accepted == [0, 1, 2] and a.exit_node == b.exit_node == 2


def test_a_rootless_chain_without_its_root_token_gets_root_0():
    trace = {"node_token_ids": [6, 7, 8], "node_depths": [1, 2, 3], "parents": [-1, 0, 1], "accepted_indices": [0]}
    r = parse(trace).rounds[0]
    assert r.tokens == [0, 6, 7, 8] and r.parents == [-1, 0, 1, 2] and r.accepted == [0, 1] and r.block_length == 2


@pytest.mark.parametrize("change, message", [
    ({"node_depths": [2, 3, 4, 2]}, "trace.node_depths[0]: 2 must be 0 (node 0 is the root) or 1"),
    ({"node_depths": [0, 1, 2, 0]}, "trace.parents[3]: -1, but node 0 is the root"),
    ({"node_depths": [1, 2, 2, 1]}, "trace.node_depths[2]: 2 does not match the parents (expected 3)"),
], ids=["deep first node", "second root", "depth off"])
def test_a_flat_layout_that_contradicts_itself_names_the_field(change, message):
    with pytest.raises(TevvizError) as e:
        parse({**FLAT_ROOTLESS, **change})
    assert message in str(e.value)
