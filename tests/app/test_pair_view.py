"""A pair of trees as the app shows it (app/pair_view.py, app/pair_details.py), without a browser: a click selects a
node in both trees and the details say what each side has there; "+N" unfolds and "−" folds again in both; a width
report lays both out again; the hand-made rounds of tests/render/test_compare_figure.py."""

from __future__ import annotations

import json
import random

import gradio as gr
import pytest
from test_compare_figure import A, B, random_tree

from tevviz.app.pair_details import PAIR_HINT, Pair, pair_details
from tevviz.app.pair_view import MAX_SESSIONS, PairView
from tevviz.render.compare_figure import PAIR_WIDTH, pair_tree
from tevviz.render.shared_tree import shared_layout


@pytest.fixture
def view() -> PairView:
    with gr.Blocks():
        return PairView(("A", "B"), "test-pair")


def figures(out) -> tuple[dict, dict]:
    return json.loads(out[0]), json.loads(out[1])


def ring(fig: dict) -> tuple | None:
    found = [(t["x"][0], t["y"][0]) for t in fig["data"] if t["name"] == "selected"]
    return found[0] if found else None


def test_a_click_selects_the_node_in_both_trees_and_the_details_name_it(view):
    pair = Pair(A, B, ("tev", "predraw"), "w", ("tev, round 0", "predraw, round 0"))
    fa, fb = figures(view.show("s", pair))
    assert ring(fa) is None and fa["layout"]["meta"] == {"width": PAIR_WIDTH, "clicks": True}
    t = shared_layout(A, B, PAIR_WIDTH)
    a_out = view.click("s", 1)
    fa, fb = figures(a_out)
    assert ring(fa) == ring(fb) == t.pos[1]
    details = a_out[2]
    assert "`'t5'`" in details and "in both trees" in details
    assert "| node | #1 | #1 |" in details and "| verdict | accepted | rejected here |" in details
    assert "| **exit probability w** | **0.100** | **0.500** |" in details  # the figure's colour, first and bold
    assert "- **tev**: accepted." in details
    assert "- **predraw**: rejected here: the target took 't6'. Why not: at node 0 the target wanted `'t6'`" in details
    # The same node again clears the selection; a click on nothing clickable changes nothing.
    assert ring(figures(view.click("s", 1))[0]) is None and view.shown["s"].selected is None
    assert view.click("s", None) is None and view.click("s", "ghost:1") is None and view.click("other", 1) is None


def test_the_details_of_a_node_one_side_lacks_and_of_a_bonus_token():
    t = shared_layout(A, B)
    only_b = next(n.id for n in t.nodes if n.path == (5, 8))
    said = pair_details(t, only_b, ("A", "B"), "P")
    assert "in B's tree only" in said and "| node | not drafted | #2 |" in said
    assert said.index("target flow P") < said.index("exit probability w")  # the colour first
    assert "- **A**: not drafted." in said and "- **B**: not reached." in said
    # B's bonus is A's drafted node (6,): B did not draft it, and it was B's bonus token.
    said = pair_details(t, t.bonus[1], ("A", "B"), "w")
    assert "- **B**: not drafted. Its bonus token `'t6'` (token id 6): drawn at exit node 0" in said
    # A's bonus, drafted by neither tree.
    said = pair_details(t, t.bonus[0], ("A", "B"), "w")
    assert said.startswith("A's bonus token `'t9'`") and "B did not draft it." in said
    assert pair_details(t, None, ("A", "B")) == PAIR_HINT and pair_details(t, 99, ("A", "B")) == PAIR_HINT


def test_a_fold_opens_and_closes_in_both_trees(view):
    rng = random.Random(7)
    a, b = random_tree(rng, 120, 30), random_tree(rng, 120, 30)
    view.show("s", Pair(a, b, ("A", "B"), "w"))
    assert view.resize("s", 0, 330) is not None
    (u, kids), *_ = pair_tree(a, b, 330).plan.folded.items()
    fa, fb = figures(view.click("s", f"more:{u}"))
    for fig in (fa, fb):
        shown = {v for t in fig["data"] if t["name"] in ("in both", "A only", "B only", "only in A (not drafted here)",
                                                         "only in B (not drafted here)")
                 for v in t["customdata"]}
        assert set(kids) <= shown
        assert any(t["name"].startswith("opened") for t in fig["data"])
    assert view.shown["s"].expanded == {u}
    view.click("s", f"less:{u}")
    assert view.shown["s"].expanded == frozenset()


def test_a_width_report_lays_both_out_again_once(view):
    view.show("s", Pair(A, B, ("A", "B"), "P"))
    assert view.resize("s", 0, 100) is None and view.resize("s", 0, True) is None  # no width
    fa, fb = figures(view.resize("s", 0, 430))
    assert fa["layout"]["meta"]["width"] == fb["layout"]["meta"]["width"] == 430
    assert view.resize("s", 1, 436) is None  # the narrower one lays both out: nothing new
    assert view.width("s") == 430
    fa, _ = figures(view.resize("s", 1, 420))
    assert fa["layout"]["meta"]["width"] == 420
    assert view.resize("other", 0, 500) is None and view.width("other") == 500  # kept for its first pair


def test_nothing_shown_says_why_and_old_sessions_are_forgotten(view):
    fa, fb, details = view.show("s", None, "nothing to compare")
    assert fb == fa
    assert json.loads(fa)["layout"]["annotations"][0]["text"] == "nothing to compare" and details == ""
    for k in range(MAX_SESSIONS + 5):
        view.show(f"s{k}", Pair(A, B, ("A", "B"), None))
    assert len(view.shown) == MAX_SESSIONS and "s0" not in view.shown and f"s{MAX_SESSIONS + 4}" in view.shown
