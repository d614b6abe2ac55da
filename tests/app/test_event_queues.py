"""How the app's events queue: every event that writes a browser's state runs on the models' queue or on the one
serial queue of the views (so each reads the state the one before it wrote, and no stale answer lands after a newer
one), and every event that carries a view's data (a key, a click, a width) takes each press with its own data."""

from __future__ import annotations

import gradio as gr
import pytest
from conftest import tiny_pair

from tevviz.app import build_demo

VIEW_DATA = ("select", "key_up", "apply")  # events whose payload is the page's: which key, which point, what width


@pytest.fixture(scope="module")
def events():
    demo = build_demo(tiny_pair("llama"))
    return list(demo.fns.values() if isinstance(demo.fns, dict) else demo.fns)


def test_every_state_writer_is_on_the_models_or_the_views_queue(events):
    state = next(f for f in events if f.api_name == "step").inputs[0]  # the browser session's AppState
    assert isinstance(state, gr.State)
    writers = [f for f in events if any(o is state for o in f.outputs)]
    assert len(writers) > 20  # the Decode tab's keys, clicks, Step, restore, pin, compare, imports ...
    # A scan queues among scans (its prompts' decoding goes to the model thread); gradio's own page-load event sets
    # the state's first value; the page's restore runs at once (runs_panel.wire_restore says why).
    stray = [(f.api_name, f.concurrency_id) for f in writers if f.concurrency_id not in ("model", "browse")
             and f.api_name != "scan_start" and f.name != "restore" and not any(t[1] == "load" for t in f.targets)]
    assert not stray, stray


def test_a_views_events_take_every_press_with_its_own_data_one_at_a_time(events):
    named = {f.api_name: f for f in events}
    for name in ("key", "click", "view", "node", "find_next"):
        assert named[name].concurrency_id == "browse" and named[name].concurrency_limit == 1, name
        assert named[name].trigger_mode == "multiple", name  # "always_last" re-sent the pending event's data
    carried = [f for f in events if any(t[1] in VIEW_DATA for t in f.targets)]
    assert carried and all(f.trigger_mode == "multiple" for f in carried if f.concurrency_id == "browse")
    assert named["step"].trigger_mode == "multiple"  # a Step pressed while the last one finishes still counts
