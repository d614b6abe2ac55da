"""The model thread: every handler's model work runs on the one thread that serves it (the main thread under
`tevviz app`), with the handler's context, its result and its errors; the app serves and stops on Ctrl-C."""

from __future__ import annotations

import contextvars
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import pytest
from conftest import tiny_pair

from tevviz.app import build_demo, launch_options
from tevviz.app.decode_tab import ROUND_OUTPUTS
from tevviz.app.model_thread import MODEL_THREAD, ModelThread, app_threads
from tevviz.engine import DecodeSession, TevvizError

gradio_client = pytest.importorskip("gradio_client")
VAR = contextvars.ContextVar("VAR", default="unset")
# `tevviz` itself, saying for every round whether it ran on the main thread.
# A job started in the background (`cmd &`) ignores SIGINT and hands that on to its children, whose Python then
# never turns Ctrl-C into KeyboardInterrupt: the wrapper puts Python's handler back, as a terminal would have it.
ON_MAIN = """
import signal, sys, threading
signal.signal(signal.SIGINT, signal.default_int_handler)
from tevviz.cli import main
from tevviz.engine import DecodeSession, TevvizError
step = DecodeSession.step
def said(self):
    print("a round on the main thread:", threading.current_thread() is threading.main_thread(), flush=True)
    return step(self)
DecodeSession.step = said
sys.exit(main(sys.argv[1:]))
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serving(mt: ModelThread):
    """Start `mt` serving on a thread of its own; returns (thread, stop event)."""
    stop = threading.Event()
    th = threading.Thread(target=mt.serve, args=(stop.is_set,), kwargs={"poll_s": 0.02}, daemon=True)
    th.start()
    deadline = time.monotonic() + 10
    while not mt.serving:
        assert time.monotonic() < deadline, "the model thread did not start serving"
        time.sleep(0.005)
    return th, stop


def test_calls_run_where_made_when_nobody_serves():
    mt = ModelThread()
    assert not mt.serving
    assert mt.call(threading.get_ident) == threading.get_ident()


def test_calls_from_many_threads_run_on_the_serving_thread_with_their_context_result_and_error():
    mt = ModelThread()
    th, stop = serving(mt)
    seen: dict[int, tuple] = {}

    def caller(k: int) -> None:
        VAR.set(f"caller {k}")
        ident, var = mt.call(lambda: (threading.get_ident(), VAR.get()))
        with pytest.raises(ValueError, match=f"bad {k}"):
            mt.call(lambda: (_ for _ in ()).throw(ValueError(f"bad {k}")))
        seen[k] = (ident, var)

    callers = [threading.Thread(target=caller, args=(k,), daemon=True) for k in range(4)]
    for c in callers:
        c.start()
    for c in callers:
        c.join(10)
        assert not c.is_alive(), "a call never came back"
    # A call made on the serving thread itself runs at once (no deadlock on its own queue).
    nested = []
    c = threading.Thread(target=lambda: nested.append(mt.call(lambda: mt.call(threading.get_ident))), daemon=True)
    c.start()
    c.join(10)
    assert not c.is_alive(), "a nested call deadlocked"
    stop.set()
    th.join(10)
    assert not th.is_alive() and not mt.serving
    assert seen == {k: (th.ident, f"caller {k}") for k in range(4)}
    assert nested == [th.ident]
    # After serving stopped, calls run on the caller's thread again.
    assert mt.call(threading.get_ident) == threading.get_ident()


def test_ctrl_c_during_a_call_stops_serving_and_the_caller_gets_an_error():
    mt = ModelThread()
    outcome: dict = {}

    def serve():
        try:
            mt.serve(lambda: False, poll_s=0.02)
        except KeyboardInterrupt:
            outcome["serve"] = "interrupted"

    th = threading.Thread(target=serve, daemon=True)
    th.start()
    while not mt.serving:
        time.sleep(0.005)

    def interrupted():
        raise KeyboardInterrupt

    with pytest.raises(TevvizError, match="shutting down"):  # not a KeyboardInterrupt in Gradio's event loop
        mt.call(interrupted)
    th.join(10)
    assert outcome == {"serve": "interrupted"} and not mt.serving


def test_app_handlers_run_the_models_on_the_model_thread(monkeypatch):
    """A Step and a Run through gradio_client: every round runs on the serving thread, inside the event's context."""
    from gradio.context import LocalContext

    ran: list[tuple[int, object]] = []
    real_step = DecodeSession.step

    def step(self):
        ran.append((threading.get_ident(), LocalContext.event_id.get(None), LocalContext.blocks.get(None)))
        return real_step(self)

    monkeypatch.setattr(DecodeSession, "step", step)
    demo = build_demo(tiny_pair("llama"), default_prompt="t1 t2 t3")
    port = free_port()
    demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True, **launch_options())
    th, stop = serving(MODEL_THREAD)
    try:
        c = gradio_client.Client(f"http://127.0.0.1:{port}/", verbose=False)
        c.predict(budget=4, depth=2, api_name="/step")
        list(c.submit(budget=4, depth=2, rounds=3, api_name="/run"))
    finally:
        stop.set()
        th.join(10)
        demo.close()
    assert not MODEL_THREAD.serving
    assert len(ran) >= 4
    assert {ident for ident, _, _ in ran} == {th.ident}
    # Progress bars find their event and app through these.
    assert all(event is not None and blocks is demo for _, event, blocks in ran)


def test_tevviz_app_decodes_on_its_main_thread_and_stops_on_ctrl_c(tmp_path):
    port = free_port()
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, "-c", ON_MAIN, "app", "--server-name", "127.0.0.1",
                             "--server-port", str(port)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        deadline = time.monotonic() + 240
        while True:
            assert proc.poll() is None, f"the app exited: {proc.stdout.read()[-2000:]}"
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the app did not answer"
                time.sleep(0.5)
        c = gradio_client.Client(f"http://127.0.0.1:{port}/", verbose=False)
        out = c.predict(budget=8, depth=3, api_name="/step")
        stats = out[ROUND_OUTPUTS.index("stats")]
        assert [line.split("|")[1].strip() for line in stats.splitlines() if line.startswith("| ")][1] == "1"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0
        said = proc.stdout.read()
        assert "closing server" in said.lower()
        assert "a round on the main thread: True" in said and "a round on the main thread: False" not in said
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize(("requested", "default", "environ", "expected"), [
    (None, 2, {}, 1),  # a 2-core machine: one thread, a core left to the browser and the server
    (None, 8, {}, 7),
    (None, 1, {}, 1),
    (None, 8, {"OMP_NUM_THREADS": "3"}, None),  # the user's environment decides; torch already read it
    (4, 2, {"OMP_NUM_THREADS": "3"}, 4),  # --threads wins
])
def test_app_threads(requested, default, environ, expected):
    assert app_threads(requested, default, environ) == expected


def test_bad_threads_is_refused_before_anything_loads(capsys):
    from tevviz.cli import main

    assert main(["app", "--threads", "0"]) == 2
    assert "--threads must be at least 1" in capsys.readouterr().err
