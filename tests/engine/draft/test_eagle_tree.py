"""EAGLE's dynamic tree in tevviz's terms (draft/eagle_tree.py): EAGLE's parameters mapped to B, H, K and W, and the
registered kind's shape."""

from __future__ import annotations

import pytest

from tevviz.engine.draft.builder_kinds import builder_kind
from tevviz.engine.draft.builders import BuilderConfig
from tevviz.engine.draft.eagle_tree import DEFAULTS, DEPTH, TOP_K, TOTAL_TOKENS, eagle_builder
from tevviz.engine.errors import TevvizError


def test_eagles_parameters_become_tevvizs_budget_depth_children_and_width():
    # total_tokens counts the root; EAGLE's depth counts the forwards after the root's, so its trees reach depth + 1.
    cfg = eagle_builder(total_tokens=13, depth=3, top_k=4)
    assert (cfg.name, cfg.budget, cfg.depth, cfg.children, cfg.width) == ("eagle", 12, 4, 4, 4)
    assert cfg.keep == 12 and cfg.max_depth == 4


def test_eagles_own_defaults():
    cfg = eagle_builder()
    assert (TOTAL_TOKENS, DEPTH, TOP_K) == (60, 7, 10)
    assert (cfg.budget, cfg.depth, cfg.children, cfg.width) == (59, 8, 10, 10)
    assert DEFAULTS == {"budget": cfg.budget, "depth": cfg.depth, "children": cfg.children, "width": cfg.width}


def test_other_settings_pass_through_and_are_checked():
    cfg = eagle_builder(total_tokens=5, depth=1, top_k=2, draft_temperature=2.0)
    assert cfg.draft_temperature == 2.0 and cfg == BuilderConfig("eagle", 4, 2, 2, 2, draft_temperature=2.0)
    with pytest.raises(TevvizError, match="budget must be an integer"):
        eagle_builder(total_tokens=1)  # the root alone: B = 0


def test_the_kind_expands_k_of_the_k_best_nodes_at_every_level():
    """EAGLE's frontier is as wide as its children per node (W = K), whatever width a config carries."""
    kind = builder_kind("eagle")
    cfg = BuilderConfig("eagle", budget=20, depth=5, children=3, width=7)
    assert [cfg.level(d) for d in (1, 2, 5)] == [(3, 3)] * 3
    assert kind.budget == TOTAL_TOKENS - 1 and not kind.auto and kind.verifiers is None
    assert kind.drafters == frozenset({"eagle3", "autoregressive"})
    assert kind.reads("children") and kind.reads("width") and not kind.reads("branching")
    for word in (f"B {TOTAL_TOKENS - 1}", f"H {DEPTH + 1}", f"K {TOP_K}"):
        assert word in kind.summary
