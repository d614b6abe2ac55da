"""ExitTrain's before/after table (engine/analysis/before_after.py) on hand-made per-context values."""

from __future__ import annotations

import pytest

from tevviz.engine.analysis.before_after import before_after_table
from tevviz.engine.records.round_numbers import NUMBERS
from tevviz.engine.train.evaluation import DrafterMetrics
from tevviz.render.table import markdown, text


def metrics(name: str, cps: list[float], taus: list[float]) -> DrafterMetrics:
    return DrafterMetrics(len(cps), sum(cps) / len(cps), sum(taus) / len(taus), 2 * len(cps), name, cps, taus)


def test_each_number_before_after_and_the_paired_change():
    before = metrics("original", [1.0, 1.2, 0.8], [2.0, 2.0, 1.0])
    after = metrics("trained", [1.2, 1.3, 1.2], [2.0, 3.0, 2.0])
    table = before_after_table(before, after, 2)
    rows = {r["number"]: r for r in table.rows}
    assert list(rows) == [NUMBERS[k].heading for k in ("C_p", "expected_length", "L")]
    cp, length, tau = rows.values()
    assert cp["before"].mean == pytest.approx(1.0) and cp["after"].mean == pytest.approx(1.2333333)
    assert cp["change"].mean == pytest.approx(0.2333333) and cp["change"].se == pytest.approx(0.1527525 / 3 ** 0.5)
    assert length["change"].mean == pytest.approx(cp["change"].mean) and length["before"].mean == pytest.approx(2.0)
    assert length["relative"] == pytest.approx(0.2333333 / 2.0) and tau["contexts"] == 3
    lines = text(table)
    assert lines[1].split()[:2] == ["original", "trained"]
    assert any(ln.startswith("mean C_p") and "+0.2333 ± 0.0882" in ln and "23.3%" in ln for ln in lines)
    assert "| tau | 1.6667 ± 0.3333 | 2.3333 ± 0.3333 | +0.6667 ± 0.3333 | 40.0% | 3 |" in markdown(table)


def test_no_change_where_the_contexts_differ():
    table = before_after_table(metrics("a", [1.0, 1.0], [1.0, 2.0]), metrics("b", [1.0], [1.0]), 2)
    assert all(r["change"] is None and r["relative"] is None for r in table.rows)
