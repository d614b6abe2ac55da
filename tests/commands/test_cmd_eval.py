"""`tevviz eval` (tevviz/commands/training.py: cmd_eval, print_eval): tau and the expected length per temperature,
a block drafter's DDTree trees, and Ctrl-C between prompts."""

from __future__ import annotations

import json

import pytest
from _cli import ask_to_stop_after, prompt_file, run_json

from tevviz.cli import main


def test_eval_reports_tau_and_the_expected_length_per_temperature(tmp_path, capsys, monkeypatch):
    prompts = prompt_file(tmp_path, "eval")
    argv = ["eval", "--prompts", str(prompts), "--budget", "4", "--depth", "2", "--max-new-tokens", "4",
            "--temperatures", "0,1", "--device", "cpu", "--threads", "1"]
    greedy, sampled = run_json([*argv, "--json"], capsys)
    assert (greedy["temperature"], sampled["temperature"]) == (0, 1)
    for r in (greedy, sampled):
        assert r["prompts"] == 2 and len(r["per_prompt_tau"]) == len(r["per_prompt_expected_length"]) == 2
        assert 1 <= r["tau"] <= 3 and 1 <= r["expected_length"] <= 3  # a block is at most H + 1 = 3 tokens
        assert 1 <= len(r["acceptance_marginal"]) <= 2 and all(0 <= a <= 1 for a in r["acceptance_marginal"])
        assert len(r["acceptance_conditional"]) == len(r["acceptance_marginal"])
    assert greedy["tau"] == pytest.approx(greedy["expected_length"])  # T = 0: every round reaches its E[L]

    from tevviz.engine.train import evaluation

    builders = []
    real = evaluation.evaluate
    monkeypatch.setattr(evaluation, "evaluate", lambda pair, prompts, t, builder, *a, **k: (
        builders.append(builder), real(pair, prompts, t, builder, *a, **k))[1])
    capsys.readouterr()
    assert main([*argv, "--temperatures", "0", "--draft-temperature", "0.5"]) == 0
    out = capsys.readouterr().out
    assert "E[L]" in out.splitlines()[1] and "2 prompts" in out.splitlines()[0]
    assert [(b.budget, b.depth, b.draft_temperature) for b in builders] == [(4, 2, 0.5)]


def test_eval_builds_a_block_drafters_trees_with_ddtree(tmp_path, capsys):
    """`tevviz eval --draft BLOCK` evaluates DDTree trees as deep as the block (best-first cannot use its rows)."""
    from tevviz.engine.load.pairs import named_pair

    block = named_pair("stdlib").drafter_paths()["tevviz-stdlib-block-draft"]
    argv = ["eval", "--prompts", str(prompt_file(tmp_path, "eval")), "--draft", str(block), "--budget", "4",
            "--depth", "12", "--max-new-tokens", "4", "--temperatures", "0", "--device", "cpu", "--threads", "1"]
    (greedy,) = run_json([*argv, "--json"], capsys)
    assert greedy["prompts"] == 2 and 1 <= greedy["tau"] <= 5
    assert 1 <= len(greedy["acceptance_marginal"]) <= 7  # the block's 7 depths, not --depth 12


def test_eval_interrupted_reports_the_prompts_done(monkeypatch, capsys):
    from tevviz.engine.train import evaluation

    ask_to_stop_after(monkeypatch, evaluation.DecodeSession, "run")
    assert main(["eval", "--temperatures", "0,1", "--max-new-tokens", "4", "--budget", "8", "--depth", "3",
                 "--json"]) == 130
    out, err = capsys.readouterr()
    (result,) = json.loads(out)
    assert result["prompts"] == 1 and len(result["per_prompt_tau"]) == 1 and result["temperature"] == 0
    assert "interrupted: T = 0 on 1 of" in err
