"""Stop stops the work, not only the browser's wait: each long action checks its flag between its steps, ends early,
says after how many of how many, keeps what makes sense (ExitTrain's steps, the decodes of Decode both) and leaves the
model thread free for the next action. Steps are counted, never timed."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest
from conftest import tiny_pair

from tevviz.app.controller import Controller
from tevviz.app.doctor_panel import doctor_run
from tevviz.app.exittrain_tab import trainable
from tevviz.app.model_thread import MODEL_THREAD
from tevviz.app.source import PairSource
from tevviz.app.state import AppState, decode_settings, train_settings
from tevviz.app.stops import Stopped, Stops
from tevviz.engine.decode.plain import plain_ways
from tevviz.engine.load.models import ModelSource, assets_dir

PROMPT = "t1 t2 t3"
WAIT_S = 120  # a handshake that never comes fails the test instead of hanging it


def cfg(max_new_tokens: int = 16, depth: int = 3):
    return decode_settings(PROMPT, 0, 0, 1.0, 0, "best-first", 8, depth, 2, 4, "4,2", "tev", max_new_tokens)[1]


@pytest.fixture(scope="module")
def pair():
    return tiny_pair("llama")


@pytest.fixture
def ctl(pair):
    return Controller(PairSource(pair=pair))


@pytest.fixture
def model_thread():
    """MODEL_THREAD served on a thread of its own, as `tevviz app` serves it on the main thread."""
    done = threading.Event()
    th = threading.Thread(target=MODEL_THREAD.serve, args=(done.is_set,), kwargs={"poll_s": 0.02}, daemon=True)
    th.start()
    while not MODEL_THREAD.serving:
        th.join(0.005)
    yield th
    done.set()
    th.join()


def stepped(ctl, rounds: int, max_new_tokens: int = 48) -> AppState:
    st = AppState()
    for _ in range(rounds):
        st = ctl.step(st, PROMPT, cfg(max_new_tokens))
    return st


def pressed_at(ctl, st, action: str, at: int):
    """A progress callback that presses Stop for `action` when told `at` steps are done; the calls it was given."""
    calls = []

    def progress(done, total=None, desc=""):
        calls.append(done)
        if done == at:
            assert ctl.stop(st, action) == [action]

    return progress, calls


def test_a_flag_is_the_running_actions_own_and_lives_only_while_it_runs():
    stops = Stops()
    assert stops.stop("s1", "doctor") == []  # nothing running: a Stop pressed now stops nothing later
    with stops.job("s1", "doctor") as job, stops.job("s2", "doctor") as other:
        assert stops.running("s1") == ["doctor"] and stops.stop("s1") == ["doctor"]
        assert job.stopped and not other.stopped
        job.tick(3, 3)  # the last step done: nothing left to stop
        with pytest.raises(Stopped, match="doctor stopped after 1 of 3 decodes"):
            job.tick(1, 3, "decodes")
    with stops.job("s1", "doctor") as again:
        assert not again.stopped
    assert stops.running("s1") == []


def test_the_baseline_stops_between_timings_and_keeps_the_one_before(ctl, pair):
    st = replace(AppState(), baseline={"tokens_per_s": 1.0})
    total = 2 * len(plain_ways(pair.target)) + 1
    progress, calls = pressed_at(ctl, st, "baseline", 2)
    with pytest.raises(Stopped, match=f"after 2 of {total} timings: the baseline timed before stays") as e:
        ctl.baseline(st, PROMPT, cfg(), progress)
    assert calls == [1, 2] and e.value.done == 2 < total
    assert st.baseline == {"tokens_per_s": 1.0}
    assert ctl.stops.running(st.sid) == []
    assert ctl.baseline(st, PROMPT, cfg()).baseline["tokens_per_s"] > 0  # the next one runs whole


def test_the_baseline_stops_inside_its_last_long_decode(ctl, pair):
    """The fastest way's decode over the whole length tells nobody between its tokens: a stop pressed after the last
    probe ends it at its next target pass."""
    st = AppState()
    total = 2 * len(plain_ways(pair.target)) + 1
    progress, calls = pressed_at(ctl, st, "baseline", total - 1)
    passes = []
    handle = pair.target.get_input_embeddings().register_forward_pre_hook(lambda m, a: passes.append(1))
    try:
        with pytest.raises(Stopped, match=f"after {total - 1} of {total} timings: no baseline is kept"):
            ctl.baseline(st, PROMPT, cfg(max_new_tokens=32), progress)
        at_stop = len(passes)
    finally:
        handle.remove()
    assert calls[-1] == total - 1 and total not in calls
    whole = pair.target.get_input_embeddings().register_forward_pre_hook(lambda m, a: passes.append(1))
    try:
        ctl.baseline(st, PROMPT, cfg(max_new_tokens=32))
    finally:
        whole.remove()
    # The stopped decode's one refused pass against the whole timing's dozens.
    assert len(passes) - at_stop > 32


def test_the_optimal_tree_stops_between_target_passes_and_the_run_goes_on_as_if_never_asked(ctl, pair):
    st = stepped(ctl, 2, max_new_tokens=24)
    passes = []

    def press(module, args):
        passes.append(1)
        if len(passes) == 2:
            ctl.stop(st, "optimal")

    handle = pair.target.get_input_embeddings().register_forward_pre_hook(press)
    try:
        with pytest.raises(Stopped, match=r"tree of round \d+ stopped after 1 target pass: the round is as it was"):
            ctl.optimal(st, PROMPT, cfg().sampling)
    finally:
        handle.remove()
    assert len(passes) == 2 and st.round.optimal is None
    assert ctl.store.get(st.sid).session.rounds[-1].optimal is None
    full = ctl.optimal(st, PROMPT, cfg().sampling)
    assert full.round.optimal.passes == 3  # H = 3: the next one runs whole
    # The live session's cache was only read: the run goes on as a run never asked for the tree.
    on = ctl.step(full, PROMPT, cfg(24))
    reference = Controller(PairSource(pair=pair))
    ref = stepped(reference, 3, max_new_tokens=24)
    assert on.generated == ref.generated


def test_exittrain_keeps_the_steps_made_and_frees_the_model_thread(ctl, pair, model_thread):
    """Stop pressed from another thread while the third step runs on the model thread: three steps are kept of ten,
    and the next action runs at once."""
    st = stepped(ctl, 4)
    tcfg_cfg, _ = trainable(cfg(48), pair.draft)
    tcfg = train_settings("exit", 1e-2, 0.1, 2, 10, tcfg_cfg.builder)
    reached, pressed, out = threading.Event(), threading.Event(), {}

    def progress(done, desc=""):
        if done == (2, 10):
            reached.set()
            assert pressed.wait(WAIT_S)

    def handler():
        try:
            out["report"] = ctl.train(st, tcfg, tcfg_cfg, progress=progress)
        except Stopped as e:
            out["stopped"] = e

    th = threading.Thread(target=handler, daemon=True)
    th.start()
    assert reached.wait(WAIT_S)
    assert ctl.stop(st, "train") == ["train"]  # what the Stop button does, outside the model queue
    pressed.set()
    th.join(WAIT_S)
    assert "report" not in out
    e = out["stopped"]
    assert (e.done, e.total) == (3, 10) and "steps made are kept" in str(e)
    assert [x["step"] for x in e.kept] == [1, 2, 3]
    assert len(ctl.store.training(st.sid).log) == 3 and "3 steps" in ctl.train_status(st)
    assert MODEL_THREAD.call(threading.get_ident) == model_thread.ident
    again = ctl.train(st, replace(tcfg, steps=2), tcfg_cfg)  # the next click goes on from the three
    assert [x["step"] for x in again.log] == [1, 2, 3, 4, 5] and len(again.table) == 2


def test_exittrain_stopped_while_measuring_its_table_keeps_every_step(ctl, pair):
    st = stepped(ctl, 4)
    c, _ = trainable(cfg(48), pair.draft)
    tcfg = train_settings("exit", 1e-2, 0.1, 2, 2, c.builder)

    def progress(done, desc=""):
        if "evaluating" in desc:
            ctl.stop(st, "train")

    with pytest.raises(Stopped, match="after 2 of 2 steps: the steps are kept, the before/after table was not"):
        ctl.train(st, tcfg, c, progress=progress)
    assert len(ctl.store.training(st.sid).log) == 2


def test_decode_both_keeps_the_rounds_of_the_side_stopped_and_never_begins_the_other(ctl):
    st = AppState()
    rounds = []

    def progress(frac, desc=""):
        rounds.append(desc)
        if len(rounds) == 2:
            ctl.stop(st, "side")

    sides = [(PROMPT, cfg(48), "", "A: x"), (PROMPT, cfg(48), "", "B: y")]
    out = ctl.decode_each(st.sid, sides, progress)
    assert len(out) == 1 and out[0].stopped and len(out[0].rounds) == 2 and rounds == ["decoding A: x"] * 2
    whole = ctl.decode_each(st.sid, sides)
    assert [d.stopped for d in whole] == [False, False] and len(whole[0].rounds) > 2


def test_decode_both_stopped_in_b_keeps_a_whole_and_b_so_far(ctl):
    st = AppState()

    def progress(frac, desc=""):
        if desc == "decoding B: y":
            ctl.stop(st, "side")

    out = ctl.decode_each(st.sid, [(PROMPT, cfg(48), "", "A: x"), (PROMPT, cfg(48), "", "B: y")], progress)
    assert [d.stopped for d in out] == [False, True] and len(out[1].rounds) == 1


BLOCK_DRAFT = assets_dir() / "models" / "tevviz-stdlib-block-draft"


@pytest.mark.skipif(not BLOCK_DRAFT.is_dir(), reason="the shipped block drafter is not in assets/")
def test_the_doctor_stops_after_the_prompt_in_progress_and_the_next_runs_whole():
    ctl = Controller(PairSource(ModelSource(device=None)))
    st = AppState()
    progress, calls = pressed_at(ctl, st, "doctor", 2 / 6)
    with pytest.raises(Stopped, match="the doctor stopped after 2 of 6 decodes: no verdict"):
        doctor_run(ctl, st.sid, str(BLOCK_DRAFT), 2, 8, progress)
    assert len(calls) == 2
    assert "verdict" in doctor_run(ctl, st.sid, str(BLOCK_DRAFT), 2, 8)  # the next one runs whole
