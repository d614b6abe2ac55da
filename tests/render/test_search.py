"""Find and filter in draft trees (render/search.py) on hand-made rounds, and the tree drawn with a search's nodes."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from tevviz.engine.records.records import RoundRecord
from tevviz.render.search import (
    at_least,
    light_nodes,
    matches,
    metric_values,
    needle,
    rounds_with,
    step_match,
)
from tevviz.render.tree_figure import tree_figure_dict
from tevviz.render.tree_traces import NODE_SIZE

#        0 "." root
#      /    \
#   1 " the"  2 "The"
#    /   \        \
#  3 " cat" 4 "theme"  5 " dog"
PARENTS = [-1, 0, 0, 1, 1, 2]
DEPTHS = [0, 1, 1, 2, 2, 2]
TEXTS = [".", " the", "The", " cat", "theme", " dog"]
P = [1.0, 0.6, 0.3, 0.5, 0.05, 0.2]
W = [0.1, 0.05, 0.1, 0.5, 0.05, 0.2]


def record(index: int = 4, texts=TEXTS, exit_node: int = 3, bonus: str = " sat") -> RoundRecord:
    r = RoundRecord.unscored(index, "greedy", list(range(6)), PARENTS, DEPTHS, texts=list(texts), exit_node=exit_node,
                             scores=[0.0, math.log(0.7), math.log(0.2), math.log(0.4), math.log(0.1), math.log(0.1)])
    return replace(r, P=list(P), w=list(W), rho=[0.1] * 6, p_edge=[1.0] * 6, bonus_text=bonus)


def test_a_query_finds_the_tokens_that_hold_it_whatever_the_case_and_spaces():
    r = record()
    assert matches(r, "the") == [1, 2, 4]
    assert matches(r, "  THE ") == [1, 2, 4]
    assert matches(r, '"the"') == [1, 2]  # in quotes: the whole token, spaces aside
    assert matches(r, "cat") == [3]
    assert matches(r, ".") == []  # the root is last round's token, not drafted here
    assert matches(r, "") == matches(r, "   ") == matches(r, None) == []
    assert needle('""') is None and needle('"x"') == ("x", True)


def test_the_rounds_that_drafted_a_token_say_whether_they_accepted_it():
    rounds = [record(7, exit_node=3),  # accepted path 0-1-3: " the" accepted
              record(8, texts=[".", " a", "b", " c", "d", " e"]),  # not drafted
              record(9, exit_node=5, bonus=" the")]  # path 0-2-5: "The" accepted, and the bonus is " the"
    hits = rounds_with(rounds, '"the"')
    assert [(h.position, h.index, h.nodes, h.accepted, h.bonus) for h in hits] == [
        (0, 7, (1, 2), True, False), (2, 9, (1, 2), True, True)]
    hits = rounds_with(rounds, "cat")
    assert [(h.index, h.accepted) for h in hits] == [(7, True), (9, False)]
    assert rounds_with(rounds, "zebra") == [] and rounds_with(rounds, "") == []


@pytest.mark.parametrize(("metric", "threshold", "expected"), [
    ("P", 0.3, [0, 1, 2, 3]),
    ("P", 0.6, [0, 1]),
    ("w", 0.2, [3, 5]),
    ("q", 0.35, [0, 1, 3]),
    ("P", 2.0, []),
])
def test_a_threshold_keeps_the_nodes_at_or_above_it_on_the_metric_shown(metric, threshold, expected):
    assert at_least(metric_values(record(), metric), threshold) == expected


def test_nodes_without_a_value_never_pass_a_threshold():
    r = RoundRecord.unscored(1, "greedy", [0, 1, 2], [-1, 0, 0], [0, 1, 1])
    assert metric_values(r, "P") == [None, None, None]
    assert at_least(metric_values(r, "P"), 0.0) == []


def test_stepping_walks_the_matches_in_order_and_wraps():
    nodes = [2, 5, 9]
    assert step_match(nodes, None, 1) == 2 and step_match(nodes, None, -1) == 9
    assert [step_match(nodes, v, 1) for v in nodes] == [5, 9, 2]
    assert [step_match(nodes, v, -1) for v in nodes] == [9, 2, 5]
    assert step_match(nodes, 6, 1) == 9 and step_match(nodes, 6, -1) == 5  # from a node that is no match
    assert step_match(nodes, 10, 1) == 2 and step_match(nodes, "bonus", 1) == 2
    assert step_match([], 3, 1) is None


def test_fold_by_mass_takes_the_drafted_nodes_under_the_flow():
    assert light_nodes(P, 0.3) == {4, 5}  # 0.3 itself stays; the root is never folded
    assert light_nodes(P, 0.0) == frozenset()
    assert light_nodes(P, 1.0) == {1, 2, 3, 4, 5}
    assert light_nodes([None] * 6, 0.1) == {1, 2, 3, 4, 5} and light_nodes([None] * 6, 0.0) == frozenset()


def test_a_wide_tree_folded_by_mass_draws_exactly_its_heavy_nodes():
    """Forty children of the root, two heavy: at 300 px folded by room some heavy one could go; by mass both stay,
    the light ones sit behind one "+38", and 0 draws all of them."""
    n = 41
    parents, depths = [-1] + [0] * (n - 1), [0] + [1] * (n - 1)
    flows = [1.0, 0.5, 0.3] + [0.01] * (n - 3)
    r = replace(RoundRecord.unscored(1, "greedy", list(range(n)), parents, depths, texts=["x"] * n, exit_node=1),
                P=flows)

    def drawn(hidden):
        fig = tree_figure_dict(r.to_dict(), "P", width=300, hidden=hidden)
        nodes = next(t for t in fig["data"] if t["name"] == "nodes")["customdata"]
        folds = [t for t in fig["data"] if t["name"].startswith("folded")]
        return set(nodes), [h.split("</b>")[0] for t in folds for h in t["hovertext"]]

    nodes, folds = drawn(light_nodes(flows, 0.05))
    assert nodes == {0, 1, 2} and folds == ["<b>38 lighter children of node 0"]
    nodes, folds = drawn(light_nodes(flows, 0.0))
    assert nodes == set(range(n)) and not folds


def test_the_tree_dims_every_node_but_the_search_s():
    fig = tree_figure_dict(record().to_dict(), "P", matches=[1, 4])
    nodes = next(t for t in fig["data"] if t["name"] == "nodes")
    lit = {v: (o, s) for v, o, s in zip(nodes["customdata"], nodes["marker"]["opacity"], nodes["marker"]["size"])}
    assert lit[1] == lit[4] == (1.0, NODE_SIZE + 6)
    assert all(o < 0.5 and s == NODE_SIZE for v, (o, s) in lit.items() if v not in (1, 4))
    plain = next(t for t in tree_figure_dict(record().to_dict(), "P")["data"] if t["name"] == "nodes")
    assert "opacity" not in plain["marker"]
