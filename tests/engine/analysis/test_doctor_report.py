"""The drafter doctor's report (analysis/doctor_report.py), made by hand: which reading is the own one, when a verdict
is underpowered, its JSON, and the readings table's cells."""

from __future__ import annotations

import pytest

from tevviz.engine.analysis.doctor_report import (
    FLOOR,
    OWN_MARK,
    ChainYield,
    DepthRate,
    DoctorReport,
    ReadingResult,
    doctor_table,
)
from tevviz.engine.analysis.stats import Estimate


def reading(name, own, options=(), layer_ids=(1, 4)):
    depths = (DepthRate(1, 6, 10, 0.6, 0.15, 0.16, ((4, 6), (2, 4))),
              DepthRate(2, 3, 6, 0.5, 0.2, 0.22, ((2, 4), (1, 2))))
    return ReadingResult(name=name, layer_ids=layer_ids, options=options, own=own, why="why " + name, depths=depths,
                         rounds=10, per_round=ChainYield(9, 10, 0.9, 0.3, 0.25, ((6, 6), (3, 4))))


def report(readings, threshold=0.05, ok=True):
    return DoctorReport(kind="eagle3", draft_name="head", layout="checked", readings=tuple(readings), best="a",
                        margin=0.01, threshold=threshold, ok=ok, verdict="fine", prompts=2, max_new_tokens=16,
                        builder="eagle")


def test_the_own_reading_is_the_one_marked_own():
    a, b = reading("a", False), reading("b", True)
    assert report([a, b]).own is b
    assert report([a]).own is None and report([]).own is None


@pytest.mark.parametrize("ok, threshold, underpowered", [
    (True, FLOOR + 0.01, True),  # not shown wrong, but a margin of FLOOR could not have been seen
    (True, FLOOR, False),  # exactly FLOOR: the prompts could tell readings FLOOR apart
    (True, None, False),  # no other reading: nothing to be underpowered about
    (False, FLOOR + 1, False),  # shown wrong: power is not the question
])
def test_a_verdict_is_underpowered_only_when_ok_and_the_threshold_exceeds_the_floor(ok, threshold, underpowered):
    assert report([reading("a", True)], threshold, ok).underpowered is underpowered


def test_reading_rate_is_by_depth_from_1():
    r = reading("a", True)
    assert r.rate() is r.depths[0] and r.rate(2) is r.depths[1]


def test_the_json_names_the_rounds_and_lists_the_per_prompt_counts():
    r = reading("a", True, options=(("norm", True),))
    d = report([r], threshold=0.2).to_dict()
    assert d["draft"] == "head" and d["underpowered"] is True and d["threshold"] == 0.2
    (rd,) = d["readings"]
    assert rd["layer_ids"] == [1, 4] and rd["options"] == {"norm": True} and rd["own"] is True
    assert rd["acceptance"][1] == {"depth": 2, "rate": 0.5, "se": 0.2, "accepted": 3, "trials": 6,
                                   "by_prompt": [[2, 4], [1, 2]]}
    # a chain's trials are its rounds, and JSON carries them under that name
    assert rd["tokens_per_round"] == {"rate": 0.9, "se": 0.3, "accepted": 9, "rounds": 10,
                                      "by_prompt": [[6, 6], [3, 4]]}
    assert "binomial_se" not in rd["tokens_per_round"] and "binomial_se" not in rd["acceptance"][0]


def test_the_readings_table_marks_the_own_reading_and_writes_each_depth_with_its_rounds():
    own, other = reading("own", True), reading("ids - 1", False, options=(("norm", False), ("k", 2)),
                                                layer_ids=(0, 3, 7))
    t = doctor_table(report([own, other]))
    assert [c.key for c in t.columns] == ["reading", "hidden_states", "options", "depth_1", "trials_1", "depth_2",
                                          "trials_2", "tokens_per_round", "rounds"]
    a, b = t.rows
    assert a["reading"] == "own" + OWN_MARK and b["reading"] == "ids - 1"
    assert a["hidden_states"] == "1, 4" and b["hidden_states"] == "0, 3, 7"
    assert a["options"] == "-" and b["options"] == "norm=False, k=2"
    assert a["depth_1"] == Estimate(0.6, 0.15, 10) and a["trials_2"] == 6
    assert a["tokens_per_round"] == Estimate(0.9, 0.3, 10) and a["rounds"] == 10


def test_a_report_without_readings_is_a_table_without_depths():
    t = doctor_table(report([]))
    assert [c.key for c in t.columns] == ["reading", "hidden_states", "options", "tokens_per_round", "rounds"]
    assert t.rows == ()
