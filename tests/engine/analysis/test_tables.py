"""One analysis, three faces (engine/analysis/table.py, render/table.py, analysis/stats.py): every renderer writes a
cell the same way, a missing value is one dash everywhere, and the run comparison's analysis carries the registry's
headings and the stats module's estimates.

Checked to fail against these faults, planted one at a time: a difference written without its sign, the markdown
renderer dropping the SE, a NaN standard error for one value (the old evaluation convention), and a row missing a
column accepted.
"""

from __future__ import annotations

import math

import pytest

from tevviz.engine.analysis.run_depths import Contrast, DepthRow, DepthTable, depth_analysis
from tevviz.engine.analysis.stats import Estimate, PairedDiff, mean_se, plus_minus, share
from tevviz.engine.analysis.table import Column, Table
from tevviz.engine.records.round_numbers import NUMBERS
from tevviz.render.table import DASH, cell, html, markdown, text


def test_one_convention_for_what_cannot_be_estimated():
    assert mean_se([]) == (None, None)
    assert mean_se([2.0]) == (2.0, None)
    m, se = mean_se([1.0, 2.0, 3.0])
    assert m == 2.0 and se == pytest.approx(math.sqrt(1.0 / 3))
    assert share(3, 4) == Estimate(0.75, pytest.approx(math.sqrt(3 / 16 / 3)), 4)
    assert share(0, 0) == Estimate(None, None, 0)
    d = PairedDiff.of([(1.0, 2.0), (2.0, 2.5)])
    assert (d.mean, d.n, d.a, d.b) == (0.75, 2, 1.5, 2.25)


def _depths() -> DepthTable:
    c = Contrast(Estimate(0.5, 0.1, 10), Estimate(0.75, 0.05, 12))
    m = Contrast(Estimate(0.25, None, 10), Estimate(None, None, 0))
    return DepthTable([DepthRow(1, c, m)], Contrast(Estimate(1.5, 0.2, 10), Estimate(1.75, 0.1, 12)),
                      Contrast(Estimate(1.6, 0.1, 10), Estimate(1.9, 0.1, 12)))


def test_every_renderer_writes_a_cell_the_same_way():
    depths, means = depth_analysis(_depths(), "tev", "predraw")
    want = ["1", "0.500 ± 0.100", "0.750 ± 0.050", "+0.250 ± 0.112", "0.250", DASH, DASH]
    lines = text(depths)
    assert lines[0] == "acceptance by depth" and lines[1].split()[:2] == ["depth", "conditional"]
    row = markdown(depths)[4]
    assert row == "| " + " | ".join(want) + " |"
    page = html(depths)
    assert all(f"<td>{w}</td>" in page for w in want) and 'id="depth-1"' in page and 'id="depths"' in page
    assert [r["number"] for r in means.rows] == [NUMBERS["L"].heading, NUMBERS["expected_length"].heading]
    assert "+0.250 ± 0.224" in " ".join(text(means))
    assert depths.to_dict()["rows"][0]["cond_d"] == {"diff": 0.25, "se": pytest.approx(math.hypot(0.1, 0.05))}


def test_cells_by_kind_and_a_registry_column():
    assert cell(None, Column("x", "x")) == DASH
    assert cell(-0.5, Column("x", "x", "signed", 2)) == "-0.50"
    assert cell(3, Column("x", "x", "count")) == "3"
    col = Column.of_number("expected_length")
    assert col.heading == NUMBERS["expected_length"].heading and col.digits == NUMBERS["expected_length"].digits
    assert cell(0.125, Column("x", "x", "percent", 1)) == "12.5%"
    assert cell((0.5, None, 0.25), Column("x", "x", "split", 2)) == "0.50/-/0.25"
    with pytest.raises(ValueError, match="kind"):
        Column("x", "x", "ratio")
    with pytest.raises(ValueError, match="no value for"):
        Table("t", (Column("a", "a"), Column("b", "b")), ({"a": 1.0},))


def test_one_formatter_for_an_estimate_and_the_cells_write_with_it(monkeypatch):
    assert plus_minus(0.5, 0.1) == "0.500 ± 0.100"
    assert plus_minus(0.25, math.hypot(0.1, 0.05), signed=True) == "+0.250 ± 0.112"
    assert plus_minus(-0.0625, None, 2, signed=True) == "-0.06" and plus_minus(1.5, 0.26, 1) == "1.5 ± 0.3"
    import tevviz.render.table as render_table

    marked = lambda x, se, digits=3, signed=False: f"<{x}|{se}|{digits}|{signed}>"
    monkeypatch.setattr(render_table, "plus_minus", marked)
    assert cell(Estimate(0.5, 0.1, 4), Column("x", "x", "estimate", 2)) == "<0.5|0.1|2|False>"
    assert cell(PairedDiff.of([(1.0, 2.0), (2.0, 2.0)]), Column("x", "x", "difference")) == "<0.5|0.5|3|True>"
    assert cell(Estimate(None, None, 0), Column("x", "x", "estimate")) == DASH
