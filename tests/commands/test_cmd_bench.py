"""`tevviz bench` (tevviz/commands/pairs.py: cmd_bench): an interrupted benchmark says so."""

from __future__ import annotations

from tevviz.cli import main


def test_bench_interrupted_says_so(monkeypatch, capsys):
    import runpy

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(runpy, "run_path", interrupted)
    assert main(["bench", "verifier_stage"]) == 130
    assert "verifier_stage interrupted: stopped at once, no results written" in capsys.readouterr().err
