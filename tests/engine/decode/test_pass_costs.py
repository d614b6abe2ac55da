"""A pair's forwards timed as decoding runs them (engine/decode/pass_costs.py), and the app's run held against the limit
those costs set: the tokens/s its rounds would reach if a round cost only its forwards, and the share reached."""

from __future__ import annotations

from conftest import tiny_pair

from tevviz.app.controller import Controller
from tevviz.app.source import PairSource
from tevviz.app.state import AppState, decode_settings
from tevviz.app.views import ideal_lines, stats_markdown
from tevviz.engine.analysis.speed import PassCosts
from tevviz.engine.decode.pass_costs import measure_pass_costs


def test_the_pass_costs_cover_every_size_and_grow_with_it_for_a_causal_drafter():
    pair = tiny_pair("llama")
    costs = measure_pass_costs(pair, list(range(3, 90)), context=40, repeats=2, sizes=(1, 9, 65), rows=(1, 8, 32))
    assert set(costs.target_ms) == {1, 9, 65} and set(costs.draft_ms) == {1, 8, 32}
    assert all(ms > 0 for ms in [*costs.target_ms.values(), *costs.draft_ms.values()])
    assert costs.target(5) > 0 and costs.draft(4) > 0  # between the sizes measured: interpolated


def test_the_app_holds_a_run_against_its_limit_once_the_baseline_is_timed():
    pair = tiny_pair("llama")
    ctl = Controller(PairSource(pair=pair))
    prompt, cfg = decode_settings("t1 t2 t3", 0, 0, 1.0, 0, "best-first", 8, 3, 2, 4, "4,2", "tev", 16)
    st = ctl.step(ctl.step(AppState(), prompt, cfg), prompt, cfg)
    assert ideal_lines(st, st.baseline) == []  # nothing timed yet: nothing said
    st = ctl.baseline(st, prompt, cfg)
    line = ideal_lines(st, st.baseline)[-1]
    assert "if a round cost only its forwards: this run reached" in line or "give no limit" in line
    assert line in stats_markdown(st)


def test_a_limit_the_run_beats_is_not_called_a_limit():
    """Pass costs timed slower than the run's own rounds went (a busier moment) give no limit: the panel says so
    rather than a share over 100%; costs the run could not beat give the share reached."""
    pair = tiny_pair("llama")
    ctl = Controller(PairSource(pair=pair))
    prompt, cfg = decode_settings("t1 t2 t3", 0, 0, 1.0, 0, "best-first", 8, 3, 2, 4, "4,2", "tev", 16)
    st = ctl.step(ctl.step(AppState(), prompt, cfg), prompt, cfg)
    timed = lambda ms: {"costs": PassCosts({1: ms, 64: ms}, {1: ms, 64: ms})}
    slow = ideal_lines(st, timed(1e6))[-1]
    assert "give no limit for this run" in slow and "%" not in slow
    fast = ideal_lines(st, timed(1e-6))[-1]
    assert "this run reached 0% of it" in fast
