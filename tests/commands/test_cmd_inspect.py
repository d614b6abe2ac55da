"""`tevviz inspect` (tevviz/commands/decoding.py: cmd_inspect): its rounds as the generic table, errors that name the
file, and a closed pipe."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

from _cli import PROMPT, one_line
from conftest import scored_round as scored

from tevviz.cli import build_parser, main
from tevviz.engine.analysis.session_tables import rounds_table, summary_table
from tevviz.engine.records import io as tio
from tevviz.engine.records.records import OptimalTree
from tevviz.render.table import text as table_text

CHAIN = [-1, 0, 1]


def test_inspect_prints_its_summary_and_rounds_as_the_generic_text_tables(tmp_path, capsys):
    """Below a line naming the file, the session means are session_tables.summary_table and the rounds
    session_tables.rounds_table as render/table.text writes them, with the numbers worked out by hand: a TEV chain
    with stage times and a speculative chain, the same optimal tree on both."""
    best = OptimalTree(tokens=[10, 11, 13], texts=["", "", ""], parents=CHAIN, depths=[0, 1, 2], P=[1.0, 0.9, 0.7],
                       budget=2, depth=2, ms=5.0)
    rounds = [scored(0, CHAIN, [1.0, 0.8, 0.4], 2, optimal=best,
                     stage_ms={"draft": 2.0, "target": 6.0, "verify": 1.0, "other": 1.0}),
              dataclasses.replace(scored(1, CHAIN, [1.0, 0.5, 0.25], 1, optimal=best), verifier="speculative",
                                  accept=[1.0, 0.9, 0.5])]
    path = tmp_path / "s.json"
    path.write_text(json.dumps(tio.session_dict({}, "p", [1], [], "", rounds)))
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"{path}: session, 2 rounds"
    loaded = tio.load(path).rounds
    summary = table_text(summary_table(loaded))
    assert out[1:1 + len(summary)] == summary
    assert out[1] == "summary"
    head, row = out[2], out[3].split()
    # tau (3 + 2) / 2, mean E[L] (2.2 + 2.35) / 2, 1 + C_p* 2.6 on both; the drafter gap bounds the TEV round only
    assert "mean drafter gap (1 of 2 rounds)" in head
    assert row[2:6] == ["2.500", "2.275", "2.600", "0.400"]
    rest = out[1 + len(summary):]
    assert rest[0] == "" and rest[1:] == table_text(rounds_table(loaded))
    assert rest[1] == "rounds" and rest[2].split()[-2:] == ["ms", "note"]
    # E[L]: 1 + C_p = 2.2; the chain 1 + 0.9 + 0.9 x 0.5; 1 + C_p* = 2.6, which bounds the TEV round only
    assert rest[3].split() == ["0", "2", "3", "2", "3", "2.200", "2.600", "0.400", "10.0"]
    assert rest[4].split()[:9] == ["1", "1", "3", "2", "2", "2.350", "2.600", "—", "—"]
    assert rest[4].endswith("  best fixed tree, not a ceiling")
    assert rest[5] == "  exit node: the node where verification stopped"


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
