"""`tevviz eval` shows its progress on a terminal (prompts done, an ETA) and keeps finished work on SIGTERM, as its
help says: a real subprocess on the embedded pair stops after the prompt in hand and prints the prompts done."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

from tevviz.cli import main

PROMPTS = 40


def prompt_file(tmp_path, count: int = PROMPTS):
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps({"id": f"p{i}", "split": "eval", "prompt": f"def f{i}(x):"}) + "\n"
                            for i in range(count)))
    return path


def read(pipe, into: bytearray) -> None:
    """Everything a child writes to `pipe`, as it comes (its standard error says when the models have loaded)."""
    for chunk in iter(lambda: os.read(pipe.fileno(), 4096), b""):
        into.extend(chunk)


def test_sigterm_keeps_the_prompts_done(tmp_path):
    argv = [sys.executable, "-m", "tevviz", "eval", "--prompts", str(prompt_file(tmp_path)),
            "--temperatures", "0", "--max-new-tokens", "24", "--budget", "8", "--threads", "1", "--json"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=dict(os.environ, TEVVIZ_CACHE=str(tmp_path / "cache")))
    out, err = bytearray(), bytearray()
    readers = [threading.Thread(target=read, args=pair) for pair in ((proc.stdout, out), (proc.stderr, err))]
    for reader in readers:
        reader.start()
    try:
        while err.count(b"Loading weights: 100%") < 2 and proc.poll() is None:
            time.sleep(0.05)
        time.sleep(1.5)  # a few prompts decoded
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
        for reader in readers:
            reader.join(timeout=10)
    said = err.decode("utf-8", "replace")
    assert proc.returncode == 130 and "Traceback" not in said, said
    (row,) = json.loads(bytes(out))
    assert 1 <= row["prompts"] < PROMPTS and row["temperature"] == 0
    assert f"interrupted: T = 0 on {row['prompts']} of {PROMPTS} prompts" in said


def test_progress_is_shown_on_a_terminal(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    code = main(["eval", "--prompts", str(prompt_file(tmp_path, 6)), "--temperatures", "0,1",
                 "--max-new-tokens", "4", "--budget", "4", "--threads", "1"])
    err = capsys.readouterr().err
    # tqdm draws at most every 0.1 s: some count of the 12 prompts, the time left and the rate (its last draw may
    # be skipped on a fast machine, so no particular count is asserted)
    assert code == 0 and re.search(r"\d+/12 \[\d+:\d+<\d+:\d+", err) and "T = 1" in err and "prompt/s" in err
