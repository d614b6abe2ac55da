"""The doctor's judgement on hand-made tables (tevviz/engine/scan/doctor.py): the best reading is the one with the
most accepted drafted tokens per round, not the best at depth 1; a per-depth SE over only two prompts never drops
below the binomial SE of the pooled rounds."""

from __future__ import annotations

import math

import pytest

from tevviz.engine.analysis.doctor_report import ReadingResult
from tevviz.engine.analysis.stats import mean_se
from tevviz.engine.scan import doctor
from tevviz.engine.scan.doctor import chain_yield, depth_rates, judge

T2, T1, F = [True, True], [True, False], [False]  # a round's top-1 chain: both depths, depth 1 only, none


def reading(name: str, own: bool, depth1: int, depth2: int, rounds: int = 40, prompts: int = 24) -> ReadingResult:
    """Every prompt alike: `depth1` of `rounds` rounds accept depth 1, `depth2` of those accept depth 2 as well."""
    per_prompt = [[T2] * depth2 + [T1] * (depth1 - depth2) + [F] * (rounds - depth1)] * prompts
    depths = depth_rates(per_prompt)
    return ReadingResult(name, (1,), (), own, "", depths, rounds * prompts, chain_yield(depths))


def test_the_best_reading_is_the_one_with_most_tokens_per_round_not_the_best_at_depth_1():
    own = reading("own", True, 20, 5)  # depth 1 0.50, tokens per round (20 + 5) / 40 = 0.625
    shallow = reading("shallow", False, 26, 0)  # depth 1 0.65 (the best), tokens per round 0.65
    deep = reading("deep", False, 24, 16)  # depth 1 0.60, tokens per round 40 / 40 = 1.0
    assert shallow.rate(1).rate > deep.rate(1).rate > own.rate(1).rate
    assert (own.per_round.rate, shallow.per_round.rate, deep.per_round.rate) == (0.625, 0.65, 1.0)
    for order in ([own, shallow, deep], [deep, own, shallow], [shallow, deep, own]):
        report = judge("eagle3", "head", "checked", order, 24, 64, "eagle")
        assert report.best == "deep" and report.margin == pytest.approx(0.375) and not report.ok
        assert "most likely trained with deep" in report.verdict


def test_the_own_reading_stays_best_against_a_better_depth_1_that_yields_less():
    own = reading("own", True, 24, 16)  # 1.0 token per round
    shallow = reading("shallow", False, 30, 0)  # 0.75 at depth 1, 0.75 tokens per round
    report = judge("eagle3", "head", "checked", [own, shallow], 24, 64, "eagle")
    assert report.best == "own" and report.ok and report.margin == pytest.approx(-0.25)


def test_the_per_depth_se_of_a_two_prompt_table_keeps_its_binomial_floor():
    # Two prompts with the same rate: the SE over prompts is 0, the rounds' binomial SE is not.
    d1, d2 = depth_rates([[T2, T1, F, F], [T2, T1, F, F]])
    assert (d1.accepted, d1.trials, d1.rate) == (4, 8, 0.5)
    # binomial: sqrt(k (n - k) / (n^2 (n - 1))) = sqrt(4 x 4 / (64 x 7))
    assert d1.binomial_se == pytest.approx(math.sqrt(16 / 448)) and d1.se == pytest.approx(d1.binomial_se)
    assert (d2.accepted, d2.trials) == (2, 4) and d2.se == pytest.approx(math.sqrt(4 / 48))
    y = chain_yield((d1, d2))
    # rounds accepting 2, 1, 0, 0 twice: mean 0.75, mean of squares 10 / 8, so sqrt((10/8 - 0.75^2) / 7)
    assert y.rate == 0.75 and y.se == pytest.approx(math.sqrt((10 / 8 - 0.5625) / 7))


def test_the_rounds_se_of_tokens_per_round_is_the_mean_se_of_each_rounds_tokens(monkeypatch):
    """The floor of the tokens-per-round SE is stats.mean_se over the rounds' accepted tokens, rebuilt from the
    depths' counts; the SE over prompts is above it here."""
    seen = []
    monkeypatch.setattr(doctor, "mean_se", lambda xs: seen.append(sorted(xs)) or mean_se(xs))
    y = chain_yield(depth_rates([[T2, T1, F, F], [T2, T2, T1]]))
    assert seen == [[0, 0, 1, 1, 2, 2, 2]]
    # mean 8/7; sum of squared deviations 14 - 64/7 = 34/7, over 6 and 7
    assert y.rate == pytest.approx(8 / 7) and y.binomial_se == pytest.approx(math.sqrt(34 / 7 / 6 / 7))
    # over prompts: u = (3 - 8/7 x 4) / 7 = -11/49 and (5 - 8/7 x 3) / 7 = 11/49, sqrt(2 / 1 x 2 x 121 / 49^2)
    assert y.se == pytest.approx(22 / 49)
    one = chain_yield(depth_rates([[T1]]))  # one round: no spread over rounds or prompts
    assert (one.rate, one.se, one.binomial_se) == (1.0, 0.0, 0.0)


def test_the_verdict_writes_tokens_per_round_with_the_one_formatter(monkeypatch):
    own, deep = reading("own", True, 20, 5), reading("deep", False, 24, 16)
    # every prompt alike, so the SE is the rounds' floor: 960 rounds accepting 2 (120), 1 (360) or 0 (480) tokens,
    # mean 0.625, squared deviations 840 - 960 x 0.625^2 = 465
    said = f"0.625 ± {math.sqrt(465 / 959 / 960):.3f} drafted tokens per round (depth 1 0.500, depth 2 0.250)"
    assert said in judge("eagle3", "head", "checked", [own, deep], 24, 64, "eagle").verdict
    monkeypatch.setattr(doctor, "plus_minus", lambda x, se, digits=3, signed=False: f"<{x:g}|{se:.4f}>")
    verdict = judge("eagle3", "head", "checked", [own, deep], 24, 64, "eagle").verdict
    assert f"<0.625|{own.per_round.se:.4f}> drafted tokens per round" in verdict


def test_the_readings_table_goes_through_the_generic_renderers():
    from tevviz.engine.analysis.doctor_report import doctor_table
    from tevviz.render.doctor import doctor_markdown, doctor_text

    own, deep = reading("own", True, 20, 5), reading("deep", False, 24, 16)
    report = judge("eagle3", "head", "checked", [own, deep], 24, 64, "eagle")
    table = doctor_table(report)
    assert [r["reading"] for r in table.rows] == ["own*", "deep"]
    assert table.rows[1]["tokens_per_round"].mean == 1.0 and table.rows[0]["trials_2"] == 480
    lines = doctor_text(report).splitlines()
    assert any(ln.split()[:1] == ["own*"] and f"0.625 ± {own.per_round.se:.3f}" in ln for ln in lines)
    assert "| deep | 1 | - | 0.600 ± " in doctor_markdown(report)
