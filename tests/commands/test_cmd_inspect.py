"""`tevviz inspect` (tevviz/commands/decoding.py: cmd_inspect): errors that name the file, and a closed pipe."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from _cli import PROMPT, one_line

from tevviz.cli import build_parser, main


def test_inspect_errors_name_the_file(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    for text, said in (("nope", "not valid JSON"), ('{"rounds": 5}', "unknown format"),
                       ('{"schema": "tevviz.session/2", "rounds": [{"x": 1}]}', "rounds[0]")):
        bad.write_text(text)
        assert main(["inspect", str(bad)]) == 2
        line = one_line(capsys.readouterr().err)
        assert line.startswith(f"tevviz inspect: error: {bad}: ") and said in line and "file:" not in line


def test_a_closed_pipe_ends_inspect_without_a_traceback(tmp_path):
    """`tevviz inspect FILE | head`: the reader gone, inspect stops quietly with the shell's SIGPIPE status (it
    ended in a BrokenPipeError traceback, exit 1); --help lists the statuses, 130 and 141 among them."""
    path = tmp_path / "s.json"
    assert main(["decode", "--prompt", PROMPT, "--max-new-tokens", "24", "--threads", "1", "--export", str(path)]) == 0
    read, write = os.pipe()
    os.close(read)  # no reader at all: the first write meets a closed pipe
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    try:
        proc = subprocess.run([sys.executable, "-m", "tevviz", "inspect", str(path)], stdout=write,
                              stderr=subprocess.PIPE, text=True, env=env, timeout=300, check=False)
    finally:
        os.close(write)
    assert proc.returncode == 141 and proc.stderr == "", proc.stderr
    helped = build_parser().format_help()
    assert "130 interrupted" in helped and "141 standard output closed" in helped
