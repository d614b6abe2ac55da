"""`tevviz train` (tevviz/commands/training.py: cmd_train): the optimiser's options, a distillation warm start on
local HF folders, and Ctrl-C that writes the steps done."""

from __future__ import annotations

import json

import pytest
import torch
from _cli import ask_to_stop_after, prompt_file

from tevviz.cli import main

# the optimiser's options ---------------------------------------------------------------------------------------------


def train(tmp_path, monkeypatch, name: str, *options: str) -> tuple[list[float], dict, torch.nn.Module]:
    """`tevviz train` of the embedded pair's drafter: the learning rate of each step, the log and the trained draft."""
    from transformers import AutoModelForCausalLM

    from tevviz.engine.train import exittrain as training

    lrs = []
    step = training.ExitTrainer.step

    def recorded(self):
        out = step(self)
        lrs.append(self.opt.param_groups[0]["lr"])
        return out

    monkeypatch.setattr(training.ExitTrainer, "step", recorded)
    out = tmp_path / name
    assert main(["train", "--prompts", str(prompt_file(tmp_path, "train")), "--batch", "1", "--budget", "4",
                 "--depth", "2", "--collect-tokens", "6", "--collect-temperatures", "0", "--out", str(out),
                 "--device", "cpu", "--threads", "1", *options]) == 0
    log = json.loads((out / "exittrain_log.json").read_text())
    return lrs, log, AutoModelForCausalLM.from_pretrained(out)


def max_change(model) -> float:
    from transformers import AutoModelForCausalLM

    from tevviz.engine.load.models import embedded_pair_paths

    original = AutoModelForCausalLM.from_pretrained(embedded_pair_paths()[1]).state_dict()
    return max(float((p - original[k]).abs().max()) for k, p in model.state_dict().items())


def test_train_schedule_lr_and_lambda_exit(tmp_path, monkeypatch):
    from tevviz.engine.train.exittrain import ExitTrainer, TrainConfig

    lrs, log, trained = train(tmp_path, monkeypatch, "cosine", "--steps", "3", "--schedule", "cosine", "--lr",
                              "0.01", "--lambda-exit", "0.25")
    cosine = TrainConfig(lr=0.01, steps=3, schedule="cosine")
    assert lrs == pytest.approx([0.01 * ExitTrainer.lr_factor_of(cosine, i) for i in range(3)])
    assert lrs[-1] < lrs[0]  # cosine: down from the peak
    assert (log["config"]["schedule"], log["config"]["lr"], log["config"]["lambda_exit"]) == ("cosine", "0.01", "0.25")
    for s in log["log"]:  # L = L_tok + lambda_exit * L_exit
        assert s["loss"] == pytest.approx(s["l_tok"] + 0.25 * s["l_exit"], rel=1e-4, abs=1e-6)
    assert max_change(trained) > 1e-3

    lrs, log, trained = train(tmp_path, monkeypatch, "constant", "--steps", "2", "--schedule", "constant", "--lr",
                              "1e-12")
    assert lrs == [1e-12, 1e-12] and log["config"]["schedule"] == "constant"
    assert max_change(trained) < 1e-6  # a learning rate of 1e-12 leaves the weights as they were


# distillation, Ctrl-C ------------------------------------------------------------------------------------------------


def test_train_with_a_distillation_warm_start(pair_dirs, tmp_path, capsys):
    """`tevviz train --distill-steps` warms the drafter up on the given text, then ExitTrains it; the log says so."""
    target, draft, pair = pair_dirs
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("\n".join(json.dumps({"id": str(i), "split": "train", "prompt": f"t{i} t{i + 1} t{i + 2}"})
                                 for i in range(1, 7)) + "\n")
    text = tmp_path / "text"
    text.mkdir()
    (text / "a.txt").write_text(" ".join(f"t{i % 50}" for i in range(200)))
    out = tmp_path / "trained"
    assert main(["train", "--target", str(target), "--draft", str(draft), "--prompts", str(prompts), "--steps", "2",
                 "--budget", "8", "--depth", "3", "--collect-tokens", "8", "--distill-steps", "3", "--distill-window",
                 "16", "--distill-text", str(text), "--distill-top-k", "4", "--out", str(out)]) == 0
    assert "distillation warm start: 3 steps on 201 tokens" in capsys.readouterr().err
    log = json.loads((out / "exittrain_log.json").read_text())
    assert log["distill"]["steps"] == 3 and log["distill"]["text"] == str(text) and len(log["log"]) == 2
    assert log["distill"]["top_k"] == 4
    from transformers import AutoModelForCausalLM

    trained = AutoModelForCausalLM.from_pretrained(out)
    assert any(not torch.equal(a, b) for a, b in zip(trained.state_dict().values(), pair.draft.state_dict().values()))


def test_train_interrupted_writes_the_steps_done(tmp_path, monkeypatch, capsys):
    from tevviz.engine.train import exittrain as training

    prompts = tmp_path / "p.jsonl"
    prompts.write_text("\n".join(json.dumps({"prompt": p, "split": "train"}) for p in ("def f(x):", "class A:")))
    ask_to_stop_after(monkeypatch, training.ExitTrainer, "step")
    out = tmp_path / "draft"
    assert main(["train", "--prompts", str(prompts), "--steps", "50", "--batch", "1", "--budget", "4", "--depth", "2",
                 "--collect-tokens", "6", "--collect-temperatures", "0", "--out", str(out), "--threads", "1"]) == 130
    log = json.loads((out / "exittrain_log.json").read_text())
    assert log["interrupted"] is True and log["steps_done"] == 1 and len(log["log"]) == 1
    assert (out / "config.json").is_file()
    assert "interrupted after 1 of 50 ExitTrain steps" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no partial folder left
