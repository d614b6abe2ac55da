"""Which tokens the draft wrote (summary.drafted_flags, decode's --color): the accepted draft nodes' tokens marked
apart from the target's own bonus tokens, on a terminal only."""

from __future__ import annotations

import dataclasses
import re

from _cli import DECODE, run_json

from tevviz.cli import main
from tevviz.engine.analysis.summary import drafted_flags
from tevviz.engine.records.records import RoundRecord

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def committed_round(parents, exit_node, committed):
    r = RoundRecord.unscored(0, "tev", list(range(len(parents))), parents, [0] * len(parents), exit_node=exit_node)
    return dataclasses.replace(r, committed=committed)


def test_flags_by_hand():
    # Round 1 accepted the chain 0 -> 1 -> 2 (two draft tokens) and added the bonus: drafted, drafted, bonus.
    # Round 2 accepted nothing: its one token is the target's. Round 3 was cut at the token limit after one token.
    rounds = [committed_round([-1, 0, 1], 2, [5, 6, 7]), committed_round([-1, 0], 0, [8]),
              committed_round([-1, 0, 1], 2, [9])]
    assert drafted_flags(rounds) == [True, True, False, False, True]
    assert drafted_flags([committed_round([-1, 0], 1, [])]) is None  # an imported round without its tokens


def test_decode_marks_draft_tokens_only_when_asked_or_on_a_terminal(capsys):
    plain_args = [a for a in DECODE if a != "--json"]
    out = run_json(DECODE, capsys)
    assert main([*plain_args, "--color", "always"]) == 0
    coloured, err = capsys.readouterr()
    # Every round ends with the target's own token, so green runs are closed by a reset.
    assert "\x1b[32m" in coloured and "\x1b[0m" in coloured and "green" in err
    # Stripped of its marks, the text is the plain one.
    assert ANSI.sub("", coloured) == DECODE[2] + out["text"] + "\n"
    assert main(plain_args) == 0  # auto: captured output is no terminal
    assert "\x1b[" not in capsys.readouterr().out
