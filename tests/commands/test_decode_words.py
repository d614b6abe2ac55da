"""`tevviz decode`'s statistics lines say things in plain words (the stages, acceptance by depth, what --budget auto
measured); the JSON keeps the detail under its own keys."""

from __future__ import annotations

import json

import pytest

from tevviz.cli import main

ARGV = ["decode", "--prompt", "def read_lines(path):", "--max-new-tokens", "32", "--budget", "auto", "--threads", "1",
        "--temperature", "0"]
JARGON = ("C_p", "realised", "conditional", "marginal", "mean B", "mean H", "stage ms", "cost model", "q ")


@pytest.fixture(scope="module")
def said(tmp_path_factory):
    capture = pytest.MonkeyPatch()
    import io
    import sys

    err, out = io.StringIO(), io.StringIO()
    capture.setattr(sys, "stderr", err)
    capture.setattr(sys, "stdout", out)
    try:
        assert main(ARGV) == 0
        assert main([*ARGV, "--json"]) == 0
    finally:
        capture.undo()
    return err.getvalue().splitlines(), json.loads(out.getvalue().splitlines()[-1])


def line(lines: list[str], start: str) -> str:
    return next(ln for ln in lines if ln.startswith(start))


def test_the_statistics_lines_use_plain_words(said):
    lines, _ = said
    stages = line(lines, "time in each stage, ms over all rounds: ")
    assert "drafting" in stages and "target passes" in stages and "verifying" in stages
    depth = line(lines, "draft tokens accepted at each depth d")
    assert "d1 " in depth
    auto = line(lines, "auto budget: ")
    assert "draft tokens to depth" in auto and "rounds without a draft" in auto and "a plain step" in auto
    for text in (stages, depth, auto):
        assert not [w for w in JARGON if w in text], text


def test_the_json_keeps_the_detail(said):
    _, out = said
    assert set(out["stage_ms"]) >= {"draft", "target", "verify"}
    assert {"depth", "conditional", "marginal", "expected"} <= set(out["acceptance_by_depth"][0])
    assert {"mean_B", "mean_H", "undrafted_rounds"} <= set(out["auto_budget"])
    assert "calibration" in out["auto_budget"]["last"]
