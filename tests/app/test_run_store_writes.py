"""The run store (tevviz/app/run_store.py) writes a run's newest state, whatever was queued before it; run ids are
32 hex digits and nothing else (a trailing newline included); a reopened run keeps its own max new tokens and ends
where the run never interrupted ends."""

from __future__ import annotations

import json
import threading

import pytest
from conftest import tiny_pair

from tevviz.app.controller import Controller
from tevviz.app.run_store import RunStore, new_id
from tevviz.app.source import PairSource
from tevviz.app.state import AppState, decode_settings
from tevviz.engine import TevvizError
from tevviz.engine.records import io as tio

USER = "0" * 32
PROMPT = "t1 t2 t3"


def session(version: int) -> dict:
    return tio.session_dict({"run_name": f"v{version}"}, "p", [1], [2] * (version + 1), "t", [])


def test_the_writer_writes_the_newest_state_not_the_first_queued(tmp_path):
    store = RunStore(tmp_path / "runs")
    run_id, gate = new_id(), threading.Event()
    store._writer.submit(gate.wait, 30)  # the writer busy: the saves below queue behind it
    for version in range(3):
        store.save(USER, run_id, session(version))
    gate.set()
    store.flush()
    written = json.loads(store.path(USER, run_id).read_text(encoding="utf-8"))
    assert written["meta"]["run_name"] == "v2" and len(written["token_ids"]) == 3
    assert [r.name for r in store.runs(USER)] == ["v2"]


@pytest.mark.parametrize("user, run", [(USER + "\n", "a" * 32), (USER, "a" * 32 + "\n"), (USER, "A" * 32),
                                       (USER[:31], "a" * 32), (USER, "a" * 33)])
def test_a_run_id_is_32_hex_digits_and_nothing_else(tmp_path, user, run):
    store = RunStore(tmp_path / "runs")
    with pytest.raises(TevvizError, match="names no run"):
        store.path(user, run)


def test_runs_lists_nothing_for_a_user_id_with_a_trailing_newline(tmp_path):
    store = RunStore(tmp_path / "runs")
    (tmp_path / "runs" / (USER + "\n")).mkdir(parents=True)
    (tmp_path / "runs" / (USER + "\n") / f"{'a' * 32}.json").write_text(json.dumps(session(0)), encoding="utf-8")
    assert store.runs(USER + "\n") == []


def test_a_reopened_run_keeps_its_max_new_tokens_and_equals_the_whole_run(tmp_path):
    pair = tiny_pair("llama")
    _, cfg = decode_settings(PROMPT, 0, 0, 1.0, 0, "best-first", 8, 3, 2, 4, "4,2", "tev", 13)
    ctl = Controller(PairSource(pair=pair), runs=RunStore(tmp_path / "runs"))
    st = ctl.step(AppState(user=USER), PROMPT, cfg)
    ctl.keep(st, wait=True)
    other = ctl.reset(st)
    st = ctl.reopen(other, st.run_id)
    while not st.done:
        st = ctl.step(st, PROMPT, cfg)
    whole = Controller(PairSource(pair=pair)).step(AppState(), PROMPT, cfg)
    while not whole.done:
        whole = Controller.step(ctl, whole, PROMPT, cfg)
    assert len(st.generated) == 13 and st.generated == whole.generated


@pytest.mark.parametrize("view", [None, "nonsense", {"baseline": {"prompt": "p", "settings": {"budget": "x"}}}])
def test_a_view_that_will_not_read_leaves_the_run_without_it(tmp_path, view):
    from tevviz.app.runs import reopened

    store, run_id = RunStore(tmp_path / "runs"), new_id()
    store.save(USER, run_id, {**session(1), **({} if view is None else {"view": view})}, wait=True)
    kept = store.load(USER, run_id)
    assert kept.token_ids == [2, 2] and kept.view == (view if isinstance(view, dict) else {})
    assert reopened(AppState(), kept, run_id, 10, "", origin="run").baseline is None


def test_a_file_that_is_no_json_still_says_so(tmp_path):
    store, run_id = RunStore(tmp_path / "runs"), new_id()
    store.path(USER, run_id).parent.mkdir(parents=True)
    store.path(USER, run_id).write_text("{not json")
    with pytest.raises(TevvizError, match="not valid JSON"):
        store.load(USER, run_id)
