"""A round's cost in ms (records/round_time.py): the cost line, the running fit, the sizing's JSON, the sentence."""

from __future__ import annotations

import dataclasses
import json

import pytest

from tevviz.engine.records.round_time import (
    SIZING_KEYS,
    WINDOW,
    Fit,
    Points,
    RoundSizing,
    describe,
    plain_rate,
    round_cost,
)

FIT = Fit(target_fixed=10.0, target_per_token=0.5, draft_level=2.0, overhead=1.0, calibration=0.9, rounds=4,
          plain=12.0, first_accept=0.6, first_q=0.45, draft_fixed=3.0)


def test_round_cost_by_hand():
    # 7 nodes below the root at 3 levels: 1 overhead + (3 + 3 * 2) drafting + 10 + 0.5 * 8 target tokens.
    assert round_cost(FIT, 7, 3) == pytest.approx(24.0)
    # No draft forward: no draft set-up either, and the target still reads the root.
    assert round_cost(FIT, 0, 0) == pytest.approx(11.5)
    assert round_cost(FIT, 7, 4) - round_cost(FIT, 7, 3) == pytest.approx(FIT.draft_level)
    assert round_cost(FIT, 8, 3) - round_cost(FIT, 7, 3) == pytest.approx(FIT.target_per_token)


def test_a_fit_read_from_a_sizing_keeps_its_fields_and_prices_an_old_plain_step_on_the_line():
    sizing = {"B": 6, "H": 3, "warmup": False, "drafted": True, "target_fixed": 10.0, "target_per_token": 0.5,
              "draft_level": 2.0, "overhead": 1.0, "calibration": 0.9, "rounds": 4}
    old = Fit.from_sizing(sizing)
    # Saved before plain steps were timed: overhead + target_fixed + target_per_token (one token, the root).
    assert old.plain == pytest.approx(11.5)
    assert (old.first_accept, old.first_q, old.draft_fixed) == (0.0, 0.0, 0.0)
    assert Fit.from_sizing(sizing | {"plain": 12.0, "first_accept": 0.6, "first_q": 0.45, "draft_fixed": 3.0}) == FIT
    assert set(SIZING_KEYS) <= set(sizing)


def test_a_sizing_round_trips_through_flat_json():
    s = RoundSizing(B=6, H=3, warmup=True, drafted=True, fit=FIT)
    d = s.to_dict()
    assert d == {"B": 6, "H": 3, "warmup": True, "drafted": True, **dataclasses.asdict(FIT)}
    assert "chain" not in d and RoundSizing.from_dict(json.loads(json.dumps(d))) == s
    mixed = RoundSizing(B=0, H=0, warmup=False, drafted=False, fit=FIT, chain=True, tree_rate=0.1, chain_rate=0.2)
    md = mixed.to_dict()
    assert (md["chain"], md["tree_rate"], md["chain_rate"], md["drafted"]) == (True, 0.1, 0.2, False)
    assert RoundSizing.from_dict(md) == mixed
    # A sizing saved before `warmup` and `drafted`: not a warm-up round, and it drafted.
    old = {k: v for k, v in d.items() if k not in ("warmup", "drafted")}
    back = RoundSizing.from_dict(old)
    assert (back.warmup, back.drafted, back.chain) == (False, True, None)


def test_points_fit_an_exact_line_and_forget_the_oldest_point():
    pts = Points(size=3)
    assert pts.n == 0 and pts.line() == (1.0, 0.01)  # no points yet: a placeholder line, not a division by zero
    for x, y in ((9, 100.0), (1, 3.0), (2, 5.0), (3, 7.0)):  # the first point leaves the window
        pts.append(x, y)
    assert pts.n == 3 and [p[0] for p in pts.points] == [1, 2, 3]
    assert (pts.sx, pts.sxx, pts.sy, pts.sxy) == (6, 14, pytest.approx(15.0), pytest.approx(34.0))
    assert pts.mean_y() == pytest.approx(5.0)
    assert pts.line() == pytest.approx((1.0, 2.0))
    assert Points().points.maxlen == WINDOW


def test_a_falling_line_keeps_a_small_positive_slope_and_the_intercept_is_never_negative():
    falling = Points()
    for x, y in ((1, 5.0), (2, 3.0)):
        falling.append(x, y)
    # Least squares gives slope -2: kept at 1e-6 so bigger trees never look free; the line goes through the means.
    assert falling.line() == pytest.approx((4.0 - 1e-6 * 1.5, 1e-6))
    steep = Points()
    for x, y in ((10, 1.0), (20, 100.0)):
        steep.append(x, y)
    # Slope 9.9 through (15, 50.5) crosses zero at x > 0: the intercept is clamped to 0.
    assert steep.line() == pytest.approx((0.0, 9.9))


def test_x_that_do_not_vary_give_a_share_of_the_mean_per_x():
    same = Points()
    for y in (7.0, 9.0):
        same.append(4, y)
    # Mean 8 over x = 4: 2 a unit, a tenth of it the slope, the rest the intercept.
    assert same.line() == pytest.approx((8.0 - 0.2 * 4, 0.2))
    assert same.line(share=0.5) == pytest.approx((4.0, 1.0))
    zero = Points()
    zero.append(0, 6.0)
    assert zero.line() == pytest.approx((6.0, 0.6))  # x = 0 divides by max(x, 1)


def test_plain_rate_is_one_token_per_plain_step():
    assert plain_rate(FIT) == pytest.approx(1 / 12.0)
    assert plain_rate(dataclasses.replace(FIT, plain=0.0)) == pytest.approx(1e9)


def test_describe_says_the_fit_in_words():
    assert describe(dataclasses.replace(FIT, target_per_token=float("inf"))) == "no rounds yet"
    text = describe(FIT)
    assert text == ("a target pass 10.0 ms + 0.50 ms a draft token, drafting 3.0 ms + 2.0 ms a level, other 1.0 ms, "
                    "a plain step 12.0 ms; the target takes the draft's top choice 60% of the time (the draft gives it "
                    "45%), trees held 0.90 times the accepted tokens predicted (last 4 rounds)")
    # Before a first-choice child is seen (first_q 0) the clause about it is left out.
    assert "top choice" not in describe(dataclasses.replace(FIT, first_q=0.0))
