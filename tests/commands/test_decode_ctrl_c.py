"""Ctrl-C twice during `tevviz decode` keeps the text, the statistics and the --export file of the rounds that
finished (commands/common.py's Interrupt): the second Ctrl-C drops the round in flight, and one that comes after the
rounds' loop, while the summary and the export are written, is ignored (the default handler put back there raised in
the middle of them). A real subprocess on the embedded pair, and in-process with the signals placed by hand."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from tevviz.cli import main

PROMPT = "def add(a, b):"


def read(pipe, into: bytearray) -> None:
    """Everything a child writes to `pipe`, as it comes (its standard error says when the models have loaded)."""
    for chunk in iter(lambda: os.read(pipe.fileno(), 4096), b""):
        into.extend(chunk)


def test_two_sigints_close_together_keep_text_statistics_and_export(tmp_path):
    export = tmp_path / "run.json"
    env = dict(os.environ, TEVVIZ_CACHE=str(tmp_path / "cache"))
    proc = subprocess.Popen([sys.executable, "-m", "tevviz", "decode", "--prompt", PROMPT, "--max-new-tokens", "2000",
                             "--threads", "1", "--export", str(export)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    out, err = bytearray(), bytearray()
    readers = [threading.Thread(target=read, args=pair) for pair in ((proc.stdout, out), (proc.stderr, err))]
    for reader in readers:
        reader.start()
    try:
        # both models loaded (transformers reports each load on standard error), then a few rounds decoded
        while err.count(b"Loading weights: 100%") < 2 and proc.poll() is None:
            time.sleep(0.05)
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
        for reader in readers:
            reader.join(timeout=10)
    said = err.decode("utf-8", "replace")
    assert proc.returncode == 130, said
    text = bytes(out).decode("utf-8")
    assert text.startswith(PROMPT) and len(text) > len(PROMPT) + 5, text
    assert "Traceback" not in said and "interrupted after" in said
    rounds = int(said.split("interrupted after ")[1].split()[0])
    assert rounds >= 1 and f"rounds {rounds} " in said  # the statistics line of the same rounds
    data = json.loads(export.read_text(encoding="utf-8"))
    assert data["meta"]["interrupted"] is True and data["meta"]["interrupted_after_rounds"] == rounds


@pytest.fixture
def signals_at(monkeypatch):
    """Send SIGINT to this process as round `first` starts, and again as the summary is made (after the loop)."""
    from tevviz.commands import decoding
    from tevviz.engine.decode.session import DecodeSession

    step, summary = DecodeSession.step, decoding.decode_summary
    count = [0]

    def stepping(self, *a, **k):
        count[0] += 1
        if count[0] == 3:
            os.kill(os.getpid(), signal.SIGINT)
        return step(self, *a, **k)

    def summarising(*a, **k):
        os.kill(os.getpid(), signal.SIGINT)  # the second Ctrl-C, after the rounds' loop
        return summary(*a, **k)

    monkeypatch.setattr(DecodeSession, "step", stepping)
    monkeypatch.setattr(decoding, "decode_summary", summarising)


def test_a_second_sigint_while_the_summary_is_written_loses_nothing(signals_at, tmp_path, capsys):
    before = signal.getsignal(signal.SIGINT)
    export = tmp_path / "run.json"
    code = main(["decode", "--prompt", PROMPT, "--max-new-tokens", "200", "--threads", "1", "--export", str(export)])
    out, err = capsys.readouterr()
    assert code == 130 and out.startswith(PROMPT) and "interrupted after 3 rounds" in err, err
    assert "stopped already: writing what was finished" in err and "rounds 3 " in err
    assert json.loads(export.read_text(encoding="utf-8"))["meta"]["interrupted_after_rounds"] == 3
    assert signal.getsignal(signal.SIGINT) is before  # put back as the command returned
