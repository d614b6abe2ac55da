"""The speed-up explained (engine/analysis/speed.py): by hand, and on a recorded session timed as the app times one."""

from __future__ import annotations

import time

import pytest

from tevviz.engine.analysis.speed import ms_per_token, speed_breakdown
from tevviz.engine.records.records import RoundRecord


def timed_round(index: int, committed: int, ms: dict[str, float]) -> RoundRecord:
    r = RoundRecord.unscored(index, "tev", [1, 2], [-1, 0], [0, 1], exit_node=1, bonus_token=3)
    return RoundRecord(**{**r.__dict__, "committed": [7] * committed, "stage_ms": ms})


def test_breakdown_by_hand():
    # Two rounds of 10 ms (draft 4, target 5, verify 0.5, other 0.5), committing 2 and 3 tokens; baseline 4 ms a token.
    ms = {"draft": 4.0, "target": 5.0, "verify": 0.5, "other": 0.5}
    s = speed_breakdown([timed_round(0, 2, ms), timed_round(1, 3, ms)], baseline_ms_per_token=4.0)
    assert s.tokens == 5 and s.rounds == 2
    assert s.stage_ms_per_token == {"draft": 1.6, "target": 2.0, "verify": 0.2, "other": 0.2}
    assert s.ms_per_token == pytest.approx(4.0) and s.measured_ms_per_token is None
    assert s.round_ms == pytest.approx(10.0) and s.tokens_per_round == 2.5
    assert s.break_even == pytest.approx(2.5)  # a 10 ms round buys 2.5 plain steps of 4 ms
    assert s.speedup == pytest.approx(1.0) == s.tokens_per_round / s.break_even
    assert sum(s.relative().values()) == pytest.approx(1 / s.speedup)
    assert "costs 2.5 target-token times and committed 2.50 tokens: 1.00x" in s.sentence
    assert "the target pass takes 50% of its time" in s.sentence


def test_measured_time_sets_the_round_cost_and_the_speed_up():
    ms = {"draft": 2.0, "target": 6.0, "verify": 1.0, "other": 1.0}
    s = speed_breakdown([timed_round(0, 2, ms)], baseline_ms_per_token=2.0, seconds=0.012)
    assert s.measured_ms_per_token == pytest.approx(6.0) and s.unrecorded_ms_per_token == pytest.approx(1.0)
    assert s.break_even == pytest.approx(6.0) and s.speedup == pytest.approx(2.0 / 6.0)
    assert "0.33x, slower than plain decoding" in s.sentence


def test_without_baseline_or_rounds():
    s = speed_breakdown([timed_round(0, 4, {"draft": 1.0, "target": 3.0})])
    assert s.break_even is None and s.speedup is None and s.relative() is None
    assert "time the baseline" in s.sentence and "1.0 ms a token" in s.sentence
    assert speed_breakdown([]).sentence == "No rounds with recorded times yet."
    assert ms_per_token(0.5, 0) is None and ms_per_token(0.5, 100) == 5.0


def test_breakdown_adds_up_to_the_measured_time_per_token(llama_pair, one_thread):
    """A session timed as the app times it (wall time around each Step): the stages per token add up to it."""
    from tevviz.engine.core.sampling import SamplingConfig
    from tevviz.engine.decode.plain import autoregressive
    from tevviz.engine.decode.session import DecodeConfig, DecodeSession
    from tevviz.engine.draft.builders import BuilderConfig

    cfg = DecodeConfig(sampling=SamplingConfig(temperature=1.0), builder=BuilderConfig(budget=16, depth=4),
                       max_new_tokens=48, seed=0, stop_on_eos=False)
    prompt = [3, 4, 5, 6]
    session = DecodeSession(llama_pair, prompt, cfg)
    seconds = 0.0
    while not session.done:
        t0 = time.perf_counter()
        session.step()
        seconds += time.perf_counter() - t0
    base = autoregressive(llama_pair, prompt, cfg)
    s = speed_breakdown(session.rounds, ms_per_token(base.seconds, len(base.token_ids)), seconds)
    assert s.tokens == len(session.generated) == 48
    assert s.recorded_ms_per_token == pytest.approx(s.measured_ms_per_token, rel=0.05)
    assert s.speedup == pytest.approx((len(session.generated) / seconds) / base.tokens_per_s)
    assert s.break_even > 0 and s.sentence.startswith("Each round costs")
