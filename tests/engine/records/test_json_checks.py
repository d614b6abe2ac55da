"""The importers' checks of untrusted JSON values (tevviz/engine/records/json_checks.py): each returns the value it
was given (a number as a float) or raises a TevvizError that starts with the field at fault and says what is wrong;
bounds are inclusive; a bool is no integer; a tree's shape, its accepted path and its siblings are checked node by
node, the first fault named."""

from __future__ import annotations

import math

import pytest

from tevviz.engine.errors import TevvizError
from tevviz.engine.records.json_checks import (
    MAX_NODES,
    check_dict,
    check_int,
    check_ints,
    check_list,
    check_num,
    check_path,
    check_siblings,
    check_str,
    check_tree,
)


def refused(call, message: str) -> None:
    """`call()` raises a TevvizError whose message is exactly `message`."""
    with pytest.raises(TevvizError) as e:
        call()
    assert str(e.value) == message


# --- scalars and containers -----------------------------------------------------------------------------------------


def test_check_int_takes_integers_within_inclusive_bounds():
    assert check_int(3, "r.x", 3, 5) == 3 and check_int(5, "r.x", 3, 5) == 5 and check_int(-7, "r.x") == -7
    assert check_int(None, "r.x", nullable=True) is None
    refused(lambda: check_int(6, "r.x", 3, 5), "r.x: 6 is out of range [3, 5]")
    refused(lambda: check_int(2, "r.x", 3, None), "r.x: 2 is out of range [3, None]")
    refused(lambda: check_int(True, "r.x"), "r.x: expected an integer, got bool")
    refused(lambda: check_int(2.0, "r.x"), "r.x: expected an integer, got float")
    refused(lambda: check_int("2", "r.x"), "r.x: expected an integer, got str")
    refused(lambda: check_int(None, "r.x"), "r.x: expected an integer, got NoneType")


def test_check_num_takes_finite_numbers_as_floats():
    got = check_num(1, "n.P", 0, 1)
    assert got == 1.0 and type(got) is float and check_num(0.0, "n.P", 0, 1) == 0.0
    assert check_num(None, "n.P") is None  # numbers may be null unless a caller says not
    refused(lambda: check_num(None, "n.P", nullable=False), "n.P: expected a finite number, got None")
    for bad in (math.nan, math.inf, -math.inf, True, "0.5", [0.5]):
        refused(lambda bad=bad: check_num(bad, "n.P", 0, 1), f"n.P: expected a finite number, got {bad!r}")
    refused(lambda: check_num(1.7, "n.P", 0, 1), "n.P: 1.7 is out of range [0, 1]")
    refused(lambda: check_num(-1e-9, "n.P", 0, 1), "n.P: -1e-09 is out of range [0, 1]")
    long = "x" * 1000  # a huge bad value is cut, not echoed whole
    with pytest.raises(TevvizError) as e:
        check_num(long, "n.P")
    assert len(str(e.value)) == len("n.P: ") + 200


def test_containers_and_strings():
    rows = [1, 2]
    assert check_list(rows, "r.rows") is rows  # the value itself, not a copy
    assert check_list([0] * 4, "r.rows", max_len=4) == [0] * 4
    refused(lambda: check_list([0] * 5, "r.rows", max_len=4), "r.rows: has 5 entries, more than the limit 4")
    refused(lambda: check_list([0] * (MAX_NODES + 1), "r.rows"),
            f"r.rows: has {MAX_NODES + 1} entries, more than the limit {MAX_NODES}")
    refused(lambda: check_list({}, "r.rows"), "r.rows: expected a list, got dict")
    refused(lambda: check_list("ab", "r.rows"), "r.rows: expected a list, got str")
    assert check_dict({"a": 1}, "r") == {"a": 1}
    refused(lambda: check_dict([], "r"), "r: expected an object, got list")
    assert check_str("t", "n.text") == "t" and check_str(None, "n.text") == ""
    refused(lambda: check_str(None, "n.text", nullable=False), "n.text: expected a string, got NoneType")
    refused(lambda: check_str(3, "n.text"), "n.text: expected a string, got int")


def test_check_ints_names_the_entry_at_fault():
    assert check_ints([0, 4, 2], "t.ids", lo=0) == [0, 4, 2]
    refused(lambda: check_ints([0, 4, -1], "t.ids", lo=0), "t.ids[2]: -1 is out of range [0, None]")
    refused(lambda: check_ints([0, False], "t.ids"), "t.ids[1]: expected an integer, got bool")
    refused(lambda: check_ints([1, 2, 3], "t.ids", max_len=2), "t.ids: has 3 entries, more than the limit 2")


# --- trees ------------------------------------------------------------------------------------------------------------

# root 0; 1 and 2 its children; 3 under 1; 4 under 3
PARENTS = [-1, 0, 0, 1, 3]


def test_check_tree_returns_the_depths_of_a_well_formed_tree():
    assert check_tree(PARENTS, [0, 1, 3, 4], 4, "rounds[0]") == [0, 1, 1, 2, 3]
    assert check_tree(PARENTS, [0, 2], 2, "trace", ddtree=True) == [0, 1, 1, 2, 3]
    assert check_tree([-1], [0], 0, "rounds[0]") == [0]  # the root alone


@pytest.mark.parametrize("parents, accepted, exit_node, ddtree, message", [
    ([], [0], 0, False, "rounds[0]: the tree has no nodes"),
    ([0, 0], [0], 0, False, "rounds[0].nodes[0].parent: node 0 must be the root (parent null)"),
    ([0, 0], [0], 0, True, "rounds[0].parents[0]: node 0 must be the root (parent null)"),
    ([-1, 0, 3, 1], [0], 0, False,
     "rounds[0].nodes[2].parent: 3 is not an earlier node (parents must precede children)"),
    ([-1, 1], [0], 0, True, "rounds[0].parents[1]: 1 is not an earlier node (parents must precede children)"),
    ([-1, 0, 0, 1, 3], [0, 1, 3, 4], 5, False, "rounds[0].graph.exit_node: 5 is out of range [0, 4]"),
    ([-1, 0, 0, 1, 3], [0, 1, 3, 4], 5, True, "rounds[0].accepted_indices: 5 is out of range [0, 4]"),
    ([-1, 0, 0, 1, 3], [0, 1, 4], 4, False,
     "rounds[0].graph.accepted: [0, 1, 4] is not the path from the root to exit node 4"),
    ([-1, 0, 0, 1, 3], [0, 1, 3], 4, True,
     "rounds[0].accepted_indices: [0, 1, 3] is not the path from the root to exit node 4"),
])
def test_check_tree_names_the_first_fault(parents, accepted, exit_node, ddtree, message):
    refused(lambda: check_tree(parents, accepted, exit_node, "rounds[0]", ddtree=ddtree), message)


def test_check_path_walks_from_the_root_through_children():
    check_path(PARENTS, [0, 1, 3, 4], "g.accepted")
    check_path(PARENTS, [0], "g.accepted")
    refused(lambda: check_path(PARENTS, [], "g.accepted"), "g.accepted: is empty; it must start at the root, 0")
    refused(lambda: check_path(PARENTS, [1, 3], "g.accepted"),
            "g.accepted[0]: 1 is not the root; the path must start at 0")
    refused(lambda: check_path(PARENTS, [0, 1, 9], "g.accepted"),
            "g.accepted[2]: 9 is not a node (the tree has nodes 0..4)")
    refused(lambda: check_path(PARENTS, [0, 2, 3], "g.accepted"),
            "g.accepted[2]: node 3 is not a child of node 2 (its parent is 1)")


def test_check_siblings_refuses_a_token_twice_under_one_parent():
    def name(v):
        return f"'t{v}'"

    check_siblings(PARENTS, [7, 5, 6, 5, 5], "r", name)  # token 5 under three different parents
    refused(lambda: check_siblings(PARENTS, [7, 5, 5, 1, 2], "r", name),
            "r: nodes 1 and 2 ('t1' and 't2') are siblings that both carry token 5; siblings must carry distinct "
            "tokens")
    refused(lambda: check_siblings([-1, 0, 0, 0, 2], [7, 1, 2, 1, 3], "r", name),
            "r: nodes 1 and 3 ('t1' and 't3') are siblings that both carry token 1; siblings must carry distinct "
            "tokens")
