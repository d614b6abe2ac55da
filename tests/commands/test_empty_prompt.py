"""An empty prompt is refused before any model loads (`tevviz decode`): one line naming where it came from, exit 2
(the models took 7-10 s to load only to refuse it)."""

from __future__ import annotations

import io
import sys

import pytest

from tevviz.cli import main


@pytest.mark.parametrize("argv, said", [
    (["--prompt", ""], "the prompt is empty (--prompt gave nothing)"),
    (["--prompt", " \n\t "], "the prompt is empty (--prompt gave only white space)"),
    (["--prompt-file", "{empty}"], "the prompt is empty (--prompt-file '{empty}' gave nothing)"),
    (["--prompt", "-"], "the prompt is empty (--prompt - (standard input) gave nothing)"),
])
def test_an_empty_prompt_is_refused_before_the_models_load(no_models, tmp_path, capsys, monkeypatch, argv, said):
    empty = tmp_path / "empty.txt"
    empty.write_text("", encoding="utf-8")
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    code = main(["decode", *(a.format(empty=empty) for a in argv), "--max-new-tokens", "4"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0] == f"tevviz decode: error: {said.format(empty=empty)}", err
