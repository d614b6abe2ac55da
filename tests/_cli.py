"""What the command-line tests share: the embedded pair's prompt and decode arguments, a command's printed JSON, its
one line of stderr, a prompts file, and a Ctrl-C asked for after a first call."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from tevviz.cli import main

ROOT = Path(__file__).resolve().parent.parent

PROMPT = "def fib(n):\n"
DECODE = ["decode", "--prompt", PROMPT, "--json", "--max-new-tokens", "6", "--device", "cpu", "--threads", "1"]
# The best-first tree these tests were written for (the pair's own defaults are a sampled chain, test_decode_defaults).
TREE = ["--builder", "best-first", "--verifier", "tev", "--budget", "32", "--depth", "6"]


def run_json(argv: list[str], capsys):
    capsys.readouterr()
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def exported(argv: list[str], tmp_path, capsys, name: str = "s.json") -> tuple[dict, dict]:
    """`tevviz decode --json --export` with `argv`: its printed object and the session JSON it wrote."""
    path = tmp_path / name
    out = run_json([*DECODE, *argv, "--export", str(path)], capsys)
    return out, json.loads(path.read_text(encoding="utf-8"))


def one_line(err: str) -> str:
    """The one line of stderr, transformers' weight-loading progress bars left out."""
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("Loading weights")]
    assert len(lines) == 1, lines
    return lines[0]


def prompt_file(tmp_path, split: str):
    path = tmp_path / f"{split}.jsonl"
    path.write_text("\n".join(json.dumps({"prompt": p, "split": split}) for p in ("def f(x):", "class A:")) + "\n")
    return path


def ask_to_stop_after(monkeypatch, owner, name: str) -> None:
    """`owner.name` sends this process a SIGINT after its first call (what a first Ctrl-C there does)."""
    real = getattr(owner, name)
    calls = []

    def wrapped(*args, **kwargs):
        out = real(*args, **kwargs)
        calls.append(1)
        if len(calls) == 1:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
        return out

    monkeypatch.setattr(owner, name, wrapped)
