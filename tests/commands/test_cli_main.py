"""The command line's parser and entry point (tevviz/cli.py, tevviz/__main__.py): help texts that state each
default once, bad arguments in one line with exit 2, and an interrupt before the work."""

from __future__ import annotations

import subprocess
import sys

import pytest
from _cli import ROOT

from tevviz import commands
from tevviz.cli import build_parser, main

# help texts ----------------------------------------------------------------------------------------------------------


def test_help_texts_state_each_default_once():
    import argparse

    parser = build_parser()
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, sub in [("tevviz", parser), *subs.choices.items()]:
        text = " ".join(sub.format_help().split())
        assert "(default: None)" not in text and "(default: False)" not in text and "(default: [])" not in text, name
        formatter = sub._get_formatter()
        for action in sub._actions:
            said = formatter._expand_help(action) if action.help else ""
            assert said.count("(default") <= 1 and "(default: None)" not in said, (name, said)
    app_help = " ".join(subs.choices["app"].format_help().split())
    assert "(default: $GRADIO_SERVER_NAME, else 127.0.0.1: this machine only)" in app_help
    decode_help = " ".join(subs.choices["decode"].format_help().split())
    assert "--max-new-tokens MAX_NEW_TOKENS the most tokens to generate (default: 64)" in decode_help


def test_decode_eval_and_train_take_threads():
    parser = build_parser()
    for argv in (["decode", "--prompt", "x"], ["eval"], ["train", "--out", "x"]):
        assert parser.parse_args([*argv, "--threads", "3"]).threads == 3


# bad arguments: one line, exit 2 -------------------------------------------------------------------------------------


@pytest.mark.parametrize("argv, message", [
    (["decode", "--prompt", "x", "--budget", "0"], "budget must be an integer in [1, 1024]"),
    (["decode", "--prompt", "x", "--depth", "-1"], "depth must be"),
    (["decode", "--prompt", "x", "--temperature", "-1"], "temperature must be"),
    (["decode", "--prompt", "x", "--temperature", "nan"], "temperature must be"),
    (["decode", "--prompt", "x", "--top-p", "1.5"], "top-p must lie in (0, 1]"),
    (["decode", "--prompt", "x", "--target", "/no/such/model", "--draft", "/no/such/draft"], "does not exist"),
    (["decode", "--prompt", "x", "--target", "/no/such/model"], "give both --target and --draft"),
    (["decode", "--prompt", "x", "--max-new-tokens", "0"], "max new tokens"),
    (["inspect", "/no/such/file.json"], "no such file"),
    (["train", "--out", "/no/such/out", "--collect-temperatures", "hot"], "--collect-temperatures must be numbers"),
    (["train", "--out", "/no/such/out", "--collect-temperatures", "0,20"], "--collect-temperatures must be in [0, 10]"),
    (["train", "--out", "/no/such/out", "--distill-steps", "5", "--distill-text", "/no/such/text"],
     "--distill-text: no file or folder '/no/such/text'"),
    (["train", "--out", "/no/such/out", "--distill-steps", "-1"], "distillation needs steps >= 0"),
    (["train", "--out", "/no/such/out", "--distill-top-k", "-1"], "top_k must be an int >= 0"),
])
def test_bad_arguments_exit_with_one_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "Traceback" not in err and len(err.splitlines()) == 1


def test_empty_prompt_and_weightless_folder(pair_dirs, tmp_path, capsys):
    target, draft, _ = pair_dirs
    assert main(["decode", "--target", str(target), "--draft", str(draft), "--prompt", "  "]) == 2
    assert "prompt is empty" in capsys.readouterr().err
    (tmp_path / "config.json").write_text((target / "config.json").read_text())
    assert main(["decode", "--target", str(tmp_path), "--draft", str(draft), "--prompt", "t1"]) == 2
    assert "has no weights" in capsys.readouterr().err


def test_module_entry_point_reports_argparse_errors_in_one_line():
    r = subprocess.run([sys.executable, "-m", "tevviz", "decode", "--budget"], capture_output=True, text=True,
                       cwd=ROOT, check=False)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "expected one argument" in r.stderr


# interrupted ---------------------------------------------------------------------------------------------------------


def test_interrupt_before_the_work_says_interrupted(monkeypatch, capsys):
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(commands, "cmd_inspect", interrupted)
    assert main(["inspect", "x.json"]) == 130
    assert capsys.readouterr().err.strip() == "tevviz inspect: interrupted"
