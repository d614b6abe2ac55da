"""Builders by registry (engine/draft/builder_kinds.py): a builder says what it reads and what shape its trees take,
and BuilderConfig asks it, never its name. A builder registered here, in the test alone, is checked and shaped by
what it declares; the app's list is the registry's.

Checked to fail against these faults, planted one at a time: BuilderConfig checking K and W by name again (the new
builder's K goes unchecked), a stop allowed on any builder, and the app's builder list written out by hand.
"""

from __future__ import annotations

import pytest

from tevviz.engine.draft import builder_kinds as bk
from tevviz.engine.draft.builders import BUILDERS, BuilderConfig
from tevviz.engine.errors import TevvizError


@pytest.fixture
def wide_builder():
    kind = bk.register(bk.BuilderKind("wide-test", frozenset({"autoregressive"}), "a test builder",
                                      settings=frozenset({"children", "width", "stop_below"}),
                                      level=lambda cfg, d: (cfg.children * d, 3), keep=lambda cfg: 2 * cfg.budget))
    yield kind
    del bk._KINDS["wide-test"]


def test_a_registered_builder_is_checked_and_shaped_by_what_it_declares(wide_builder):
    cfg = BuilderConfig(name="wide-test", budget=5, depth=3, children=2)
    assert cfg.spec is wide_builder
    assert cfg.level(1) == (2, 3) and cfg.level(3) == (6, 3) and cfg.keep == 10 and cfg.max_depth == 3
    with pytest.raises(TevvizError, match="children K must be an integer"):
        BuilderConfig(name="wide-test", children=0)  # it reads K, so K is checked
    assert BuilderConfig(name="wide-test", stop_below=0.3).stop_below == 0.3  # it reads a stop
    assert "wide-test" in bk.builder_names()


def test_settings_a_builder_does_not_read_are_not_held_against_it():
    BuilderConfig(name="chain", children=0, width=0)  # a chain reads neither K nor W
    with pytest.raises(TevvizError, match="stop below ends sampled chains"):
        BuilderConfig(name="best-first", stop_below=0.4)
    with pytest.raises(TevvizError, match="static branching"):
        BuilderConfig(name="static", branching=(0,))
    assert BuilderConfig(name="static", branching=(3, 2)).max_depth == 2
    assert BuilderConfig(name="eagle", children=4, width=9).level(2) == (4, 4)


def test_the_apps_builder_list_is_the_registry():
    from tevviz.app import decode_tab

    assert set(BUILDERS) == set(bk.builder_names()) >= {"eagle", "static", "ddtree", "best-first", "sampled"}
    assert decode_tab.BUILDERS is BUILDERS or list(decode_tab.BUILDERS) == list(BUILDERS)


def test_settings_read_back_from_a_file_are_the_ones_written_and_checked_as_ever():
    """BuilderConfig.from_dict: asdict's JSON reads back equal (branching a tuple again); a file from before
    `kind` became `name` and before chains had a stop reads with the stop's default; a bad value is refused."""
    import json
    from dataclasses import asdict

    cfg = BuilderConfig(name="static", depth=3, branching=(3, 2, 1))
    assert BuilderConfig.from_dict(json.loads(json.dumps(asdict(cfg)))) == cfg
    old = {"kind": "best-first", "budget": 16, "depth": 4, "children": 4, "width": 4, "branching": [4, 2],
           "auto": False, "draft_temperature": 1.0}
    assert BuilderConfig.from_dict(old) == BuilderConfig(budget=16, depth=4, children=4, width=4, branching=(4, 2))
    with pytest.raises(TevvizError, match="budget"):
        BuilderConfig.from_dict({"name": "best-first", "budget": 0})
