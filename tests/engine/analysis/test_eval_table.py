"""`tevviz eval`'s two tables (tevviz/engine/analysis/eval_table.py) on hand-made evaluation results."""

from __future__ import annotations

import math

import pytest

from tevviz.engine.analysis.eval_table import eval_depths, eval_means
from tevviz.engine.analysis.stats import Estimate
from tevviz.engine.analysis.summary import DepthAcceptance
from tevviz.engine.records.round_numbers import NUMBERS
from tevviz.engine.train.evaluation import EvalResult


def result(temperature: float, taus: list[float], lengths: list[float], per_prompt: dict | None = None,
           conditional=(), marginal=(), expected=(), curves=()) -> EvalResult:
    # tau, expected_length and their SEs are what the JSON keeps; the tables read the per-prompt lists only.
    return EvalResult(temperature, -1.0, -1.0, -1.0, -1.0, list(conditional), list(marginal), taus, lengths,
                      list(expected), per_prompt or {}, list(curves))


def test_means_over_prompts_with_their_standard_errors_and_counts():
    cold = result(0.0, [2.0, 3.0, 4.0], [2.5, 3.5, 3.0])
    # At T = 0.7 one prompt has no drafter gap (its rounds bounded nothing): the gap is over the other two.
    warm = result(0.7, [1.0, 2.0], [1.5, 1.5], per_prompt={"gap": [0.1, None, 0.3]})
    t = eval_means([cold, warm], [3, 2], "held-out")
    assert (t.title, t.id) == ("held-out", "eval")
    # Only the registered scan numbers some prompt has, in registry order; tau and mean E[L] always.
    assert [c.key for c in t.columns] == ["T", "L", "expected_length", "gap", "prompts"]
    assert [c.heading for c in t.columns[1:4]] == [NUMBERS[k].heading for k in ("L", "expected_length", "gap")]
    a, b = t.rows
    assert (a["T"], b["T"]) == ("0", "0.7") and (a["prompts"], b["prompts"]) == (3, 2)
    # Taus 2, 3, 4: mean 3, sample variance 1, SE sqrt(1 / 3).
    assert a["L"] == Estimate(3.0, pytest.approx(math.sqrt(1 / 3)), 3)
    # E[L] 2.5, 3.5, 3.0: mean 3, squared deviations 0.25 + 0.25 + 0, variance 0.25, SE sqrt(0.25 / 3).
    assert a["expected_length"] == Estimate(3.0, pytest.approx(math.sqrt(0.25 / 3)), 3)
    assert a["gap"] == Estimate(None, None, 0)
    assert b["L"] == Estimate(1.5, pytest.approx(0.5), 2) and b["expected_length"] == Estimate(1.5, 0.0, 2)
    # Gaps 0.1 and 0.3: mean 0.2, variance 0.02, SE 0.1; the None left out, so n = 2.
    assert b["gap"] == Estimate(pytest.approx(0.2), pytest.approx(0.1), 2)


def test_a_per_prompt_list_by_name_is_read_before_the_results_own_fields():
    r = result(1.0, [9.0, 9.0], [9.0], per_prompt={"L": [1.0, 3.0]})
    (row,) = eval_means([r], [2], "t").rows
    assert row["L"] == Estimate(2.0, pytest.approx(1.0), 2)
    assert row["expected_length"] == Estimate(9.0, None, 1)


def test_tau_and_mean_expected_length_are_columns_even_with_no_values():
    t = eval_means([result(0.5, [], [])], [0], "t")
    assert [c.key for c in t.columns] == ["T", "L", "expected_length", "prompts"]
    assert t.rows[0]["L"] == Estimate(None, None, 0) and t.rows[0]["prompts"] == 0


def test_acceptance_by_depth_from_the_counted_curves():
    # 4 rounds: 3 reached depth 1, 1 of those 3 went on to depth 2.
    curves = [DepthAcceptance(1, 3, 4, 4, expected=0.7), DepthAcceptance(2, 1, 3, 4, expected=0.2)]
    counted = result(0.3, [], [], conditional=[0.75, 1 / 3], marginal=[0.75, 0.25], expected=[0.7, 0.2],
                     curves=curves)
    t = eval_depths([counted])
    assert (t.title, t.id) == ("acceptance by depth", "eval-depths")
    assert [c.key for c in t.columns] == ["T", "depth", "conditional", "marginal", "exact"]
    d1, d2 = t.rows
    assert (d1["T"], d1["depth"], d2["depth"]) == ("0.3", 1, 2)
    # 3 of 4 as 0/1 values: SE sqrt(3 * 1 / (16 * 3)) = 0.25, both curves at depth 1.
    assert d1["conditional"] == d1["marginal"] == Estimate(0.75, pytest.approx(0.25), 4)
    # Depth 2, conditional: 1 of the 3 that reached depth 1, SE sqrt(1 * 2 / (9 * 2)) = 1/3; marginal: 1 of 4.
    assert d2["conditional"] == Estimate(pytest.approx(1 / 3), pytest.approx(1 / 3), 3)
    assert d2["marginal"] == Estimate(0.25, pytest.approx(math.sqrt(3 / 48)), 4)
    assert (d1["exact"], d2["exact"]) == (0.7, 0.2)


def test_a_result_without_curves_shows_its_shares_without_standard_errors():
    # Results saved before the curves were kept: the shares as they are, no SE, no exact curve.
    old = result(1.0, [], [], conditional=[0.5, 0.4], marginal=[0.5, 0.2])
    new = result(0.0, [], [], conditional=[1.0], marginal=[1.0], expected=[0.9],
                 curves=[DepthAcceptance(1, 2, 2, 2, expected=0.9)])
    rows = eval_depths([old, new]).rows
    assert [(r["T"], r["depth"]) for r in rows] == [("1", 1), ("1", 2), ("0", 1)]
    assert rows[1]["conditional"] == Estimate(0.4, None, 0) and rows[1]["marginal"] == Estimate(0.2, None, 0)
    assert rows[0]["exact"] is None and rows[1]["exact"] is None
    assert rows[2]["conditional"] == Estimate(1.0, 0.0, 2) and rows[2]["exact"] == 0.9
