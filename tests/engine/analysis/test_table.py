"""The typed table of tevviz/engine/analysis/table.py: its columns, its row check and its plain JSON."""

from __future__ import annotations

import json

import pytest

from tevviz.engine.analysis.run_depths import Contrast
from tevviz.engine.analysis.stats import Estimate, PairedDiff
from tevviz.engine.analysis.table import KINDS, Column, Table
from tevviz.engine.records.round_numbers import NUMBERS


def test_a_column_defaults_to_a_number_of_three_digits_and_knows_its_kinds():
    c = Column("x", "heading x")
    assert (c.kind, c.digits) == ("number", 3)
    assert KINDS == ("text", "count", "number", "signed", "estimate", "difference", "percent", "split")
    for kind in KINDS:
        assert Column("x", "x", kind).kind == kind
    with pytest.raises(ValueError, match="not 'mean'"):
        Column("x", "x", "mean")


def test_a_registry_column_takes_the_numbers_heading_digits_and_the_kind_asked():
    c = Column.of_number("C_p", "number")
    assert (c.key, c.heading, c.kind, c.digits) == ("C_p", NUMBERS["C_p"].heading, "number", NUMBERS["C_p"].digits)
    assert Column.of_number("ms").digits == 1 and Column.of_number("ms").kind == "estimate"
    with pytest.raises(KeyError):
        Column.of_number("no such number")


def test_every_row_needs_every_column_and_may_hold_more():
    cols = (Column("a", "a"), Column("b", "b"))
    Table("t", cols, ({"a": 1, "b": None, "extra": 3},))  # None is a value: nothing to show
    with pytest.raises(ValueError, match=r"table 't', row 1: no value for \['a'\]"):
        Table("t", cols, ({"a": 1, "b": 2}, {"b": 2}))


def test_to_dict_writes_each_cell_kind_as_plain_json():
    cols = (Column("name", "name", "text"), Column("est", "est", "estimate"), Column("pd", "pd", "difference"),
            Column("con", "con", "difference"), Column("n", "n", "count"), Column("split", "split", "split"))
    contrast = Contrast(Estimate(0.5, 0.3, 4), Estimate(0.75, 0.4, 5))
    row = {"name": "x", "est": Estimate(1.5, 0.25, 8), "pd": PairedDiff.of([(1.0, 2.0), (2.0, 2.0)]),
           "con": contrast, "n": 3, "split": (0.5, None), "unlisted": "dropped"}
    t = Table("title", cols, (row, {**row, "est": Estimate(None, None, 0), "n": None}), notes=("how to read",))
    d = t.to_dict()
    assert d["title"] == "title" and d["columns"] == ["name", "est", "pd", "con", "n", "split"]
    assert d["notes"] == ["how to read"]
    first, second = d["rows"]
    # A paired difference also has a mean: it is written by its diff, as a difference column reads it.
    assert first == {"name": "x", "est": {"mean": 1.5, "se": 0.25, "n": 8}, "pd": {"diff": 0.5, "se": 0.5},
                     "con": {"diff": 0.25, "se": pytest.approx(0.5)}, "n": 3, "split": (0.5, None)}
    assert second["est"] == {"mean": None, "se": None, "n": 0} and second["n"] is None
    assert json.loads(json.dumps(d))["rows"][0]["split"] == [0.5, None]
    assert "unlisted" not in first
