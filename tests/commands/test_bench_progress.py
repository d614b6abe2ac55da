"""`tevviz bench verifier_stage` shows the trees timed so far with an ETA on a terminal (tqdm on standard error),
and its table rows still go to standard output."""

from __future__ import annotations

import re
import sys

from tevviz.cli import main


def test_verifier_stage_shows_progress_on_a_terminal(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    code = main(["bench", "verifier_stage", "--", "--budgets", "4,8", "--temperatures", "0", "--trees-per-prompt", "1",
                 "--repeats", "1", "--limit", "2", "--threads", "1", "--verifiers", "tev,predraw",
                 "--out", str(tmp_path / "out.json")])
    out, err = capsys.readouterr()
    # some count of the 4 trees with the time left (tqdm may skip its last draw on a fast machine)
    assert code == 0 and "verifier_stage" in err and re.search(r"\d/4 \[\d+:\d+<\d+:\d+", err) and "B = " in err
    assert out.count("predraw_ms") >= 2 and (tmp_path / "out.json").exists()
