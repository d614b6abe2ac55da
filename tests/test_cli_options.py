"""Command-line paths and options no other test runs, on the embedded stdlib pair (few tokens, small trees): `tevviz
eval`, `decode --baseline`, `decode --optimal`, the sampling and tree options, `train`'s optimiser options, the model
loading options and `report --title`. Each test checks what its option changes, not only that it parses."""

from __future__ import annotations

import html
import json

import pytest
import torch

from tevviz.cli import main
from tevviz.engine.records import io as tio
from tevviz.engine.records.summary import summarize

PROMPT = "def fib(n):\n"
DECODE = ["decode", "--prompt", PROMPT, "--json", "--max-new-tokens", "6", "--device", "cpu", "--threads", "1"]
# The best-first tree these tests were written for (the pair's own defaults are a sampled chain, test_decode_defaults).
TREE = ["--builder", "best-first", "--verifier", "tev", "--budget", "32", "--depth", "6"]


def run_json(argv: list[str], capsys):
    capsys.readouterr()
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def exported(argv: list[str], tmp_path, capsys, name: str = "s.json") -> tuple[dict, dict]:
    """`tevviz decode --json --export` with `argv`: its printed object and the session JSON it wrote."""
    path = tmp_path / name
    out = run_json([*DECODE, *argv, "--export", str(path)], capsys)
    return out, json.loads(path.read_text(encoding="utf-8"))


def message(err: str) -> str:
    """The one line of stderr, transformers' weight-loading progress bars left out."""
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("Loading weights")]
    assert len(lines) == 1, lines
    return lines[0]


def prompt_file(tmp_path, split: str):
    path = tmp_path / f"{split}.jsonl"
    path.write_text("\n".join(json.dumps({"prompt": p, "split": split}) for p in ("def f(x):", "class A:")) + "\n")
    return path


# --- decode: sampling and tree options ------------------------------------------------------------------------------


def test_top_k_one_and_a_tiny_top_p_sample_the_greedy_tokens(tmp_path, capsys):
    """At T = 1, top-k 1 (or a top-p below the largest probability) keeps only the argmax: greedy decoding."""
    greedy = run_json(DECODE, capsys)["token_ids"]
    top_k, doc = exported(["--temperature", "1", "--top-k", "1", "--seed", "3"], tmp_path, capsys)
    assert top_k["token_ids"] == greedy and doc["meta"]["sampling"]["top_k"] == 1
    top_p, doc = exported(["--temperature", "1", "--top-p", "1e-6", "--seed", "3"], tmp_path, capsys)
    assert top_p["token_ids"] == greedy and doc["meta"]["sampling"]["top_p"] == pytest.approx(1e-6)


def test_draft_temperature_sharpens_the_draft_scores(tmp_path, capsys):
    """Path scores are the draft's log-probabilities at --draft-temperature: below 1 its first choices score higher
    and its second choices lower, so the budget goes deeper and the root keeps fewer children. A node's log q (at
    T = 1) and the output (every verifier is exact) are unchanged."""
    seen = {}
    for t in (1.0, 0.5):
        out, doc = exported([*TREE, "--draft-temperature", str(t)], tmp_path, capsys, f"d{t}.json")
        assert doc["meta"]["builder"]["draft_temperature"] == t
        first = [n for n in doc["rounds"][0]["nodes"] if n["depth"] == 1]
        seen[t] = (out["token_ids"], {n["token_id"]: n["draft_logprob"] for n in first}, max(n["score"] for n in first))
    (ids, logq, best), (sharp_ids, sharp_logq, sharp_best) = seen[1.0], seen[0.5]
    assert sharp_ids == ids and all(logq[t] == pytest.approx(q) for t, q in sharp_logq.items())
    assert sharp_best > best and len(sharp_logq) < len(logq)


def test_baseline_times_plain_decoding_and_gives_the_speed_up(capsys):
    out = run_json([*DECODE, "--baseline"], capsys)
    assert out["baseline_tokens_per_s"] > 0
    assert out["speedup"] == pytest.approx(out["tokens_per_s"] / out["baseline_tokens_per_s"])
    capsys.readouterr()
    assert main([a for a in DECODE if a != "--json"] + ["--baseline"]) == 0
    assert "speed-up" in capsys.readouterr().err


def test_optimal_computes_each_rounds_optimal_tree(tmp_path, capsys):
    out, doc = exported(["--optimal", "--budget", "4", "--depth", "3"], tmp_path, capsys)
    rounds = tio.parse(doc).rounds
    assert rounds and all(r.optimal is not None and r.optimal.budget == r.size - 1 for r in rounds)
    s = summarize(rounds)
    assert out["mean_optimal_ceiling"] == pytest.approx(1 + s.mean_optimal)
    assert out["bounded_rounds"] == len(rounds) and out["mean_gap"] == pytest.approx(s.mean_gap)
    assert out["mean_gap"] >= -1e-6  # C_p* is the most coverage a tree of the budget can have
    assert out["optimal_ms"] >= 0
    plain = run_json([*DECODE, "--budget", "4", "--depth", "3"], capsys)
    assert "mean_optimal_ceiling" not in plain and plain["token_ids"] == out["token_ids"]


# --- eval ------------------------------------------------------------------------------------------------------------


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


# --- train: the optimiser's options ----------------------------------------------------------------------------------


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


# --- models: revision, device map, attention --------------------------------------------------------------------------


def test_a_revision_for_local_folders_is_refused(capsys):
    """from_pretrained ignores a revision for a local folder: tevviz says so rather than load the folder as it is."""
    assert main([*DECODE, "--revision", "no-such-branch"]) == 2
    err = message(capsys.readouterr().err)
    assert "--revision 'no-such-branch' picks a branch, tag or commit of a hub id" in err and "local" in err


def test_device_map_and_attention_reach_the_models(capsys, monkeypatch):
    """--device-map places the target through accelerate (the draft goes to its device), --attn picks both models'
    attention; the greedy output is the same."""
    from transformers import AutoModelForCausalLM

    greedy = run_json(DECODE, capsys)["token_ids"]
    calls = []
    real = AutoModelForCausalLM.from_pretrained.__func__
    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained",
                        classmethod(lambda cls, *a, **k: (calls.append(k), real(cls, *a, **k))[1]))
    assert run_json([*DECODE, "--device-map", "auto", "--attn", "eager"], capsys)["token_ids"] == greedy
    target, draft = calls
    assert (target["device_map"], target["attn_implementation"]) == ("auto", "eager")
    assert (draft["device_map"], draft["attn_implementation"]) == (None, "eager")
    calls.clear()
    assert run_json(DECODE, capsys)["token_ids"] == greedy
    assert [(k["device_map"], k["attn_implementation"]) for k in calls] == [(None, "sdpa")] * 2


# --- report ----------------------------------------------------------------------------------------------------------


def test_report_title(tmp_path, capsys):
    exported(["--max-new-tokens", "2"], tmp_path, capsys)
    session = tmp_path / "s.json"
    title = "Fib <draft> & co"
    assert main(["report", str(session), "-o", str(tmp_path / "t.html"), "--title", title]) == 0
    text = (tmp_path / "t.html").read_text(encoding="utf-8")
    assert f"<title>{html.escape(title)}</title>" in text and f"<h1>{html.escape(title)}</h1>" in text
    assert main(["report", str(session), "-o", str(tmp_path / "d.html")]) == 0
    default = (tmp_path / "d.html").read_text(encoding="utf-8")
    assert "<title>tevviz report: " in default and html.escape(title) not in default
