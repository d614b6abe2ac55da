"""`tevviz app` (tevviz/commands/serving.py): start-up failures are one line and exit 2, before any model loads."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest
from _cli import ROOT, one_line

from tevviz import commands
from tevviz.cli import main


@pytest.fixture
def busy_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def test_busy_port_is_one_line_and_exit_2_before_any_model(busy_port):
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "tevviz", "app", "--server-port", str(busy_port)], capture_output=True,
                       text=True, cwd=ROOT, timeout=120, check=False, env={**os.environ, "GRADIO_SERVER_PORT": ""})
    assert r.returncode == 2, r.stderr
    assert one_line(r.stderr) == (f"tevviz app: error: port {busy_port} on 127.0.0.1 is in use: give --server-port "
                                  "a free port, or leave it out for 7860 or the next free one")
    assert "loading" not in r.stdout and time.perf_counter() - t0 < 60


@pytest.mark.parametrize("argv, said", [
    (["--server-port", "99999"], "--server-port must lie in [1, 65535], got 99999"),
    (["--server-port", "0"], "--server-port must lie in [1, 65535], got 0"),
    (["--server-name", "no.such.host.invalid"], "--server-name 'no.such.host.invalid': no such address here"),
    (["--threads", "0"], "--threads must be at least 1, got 0"),
])
def test_bad_server_settings_are_one_line_and_exit_2(argv, said, no_models, monkeypatch, capsys):
    monkeypatch.delenv("GRADIO_SERVER_PORT", raising=False)
    monkeypatch.delenv("GRADIO_SERVER_NAME", raising=False)
    assert main(["app", *argv]) == 2
    assert one_line(capsys.readouterr().err).startswith(f"tevviz app: error: {said}")


def test_gradio_failing_to_bind_after_the_check_is_one_line(monkeypatch, capsys):
    import tevviz.app

    def taken(**kw):
        raise OSError("Cannot find empty port in range: 7999-7999. You can specify a different port by setting the "
                      "GRADIO_SERVER_PORT environment variable or passing the `server_port` parameter to `launch()`.")

    monkeypatch.setattr(tevviz.app, "launch", taken, raising=False)
    monkeypatch.setattr(commands, "check_server", lambda *a: None)
    assert main(["app", "--server-port", "7999"]) == 2
    line = one_line(capsys.readouterr().err)
    assert "port 7999 on 127.0.0.1 is in use: pass --server-port" in line and "launch()" not in line
