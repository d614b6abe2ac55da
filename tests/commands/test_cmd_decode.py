"""`tevviz decode` (tevviz/commands/decoding.py: cmd_decode, print_decoded): its sampling and tree options,
--baseline and --optimal, greedy output on local HF folders, what it prints, and Ctrl-C. Each test checks what its
option changes, not only that it parses (the embedded stdlib pair, few tokens, small trees)."""

from __future__ import annotations

import fcntl
import json
import os
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time

import pytest
from _cli import DECODE, PROMPT, ROOT, TREE, exported, run_json

from tevviz import commands
from tevviz.cli import main
from tevviz.engine.analysis.summary import summarize
from tevviz.engine.records import io as tio

# options: sampling, the tree, --baseline, --optimal ------------------------------------------------------------------


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
    """The baseline is the fastest of the plain ways timed on the prompt (both target paths and generate, at each
    thread count tried), named, and the speed-up divides by it."""
    out = run_json([*DECODE, "--baseline"], capsys)
    assert out["baseline_tokens_per_s"] > 0
    base = out["baseline"]
    rates = base["probe_tokens_per_s"]
    assert base["way"] == max(rates, key=rates.get) and base["tokens_per_s"] == out["baseline_tokens_per_s"]
    assert any("generate" in w for w in rates) and any("the model's own layers" in w for w in rates)
    assert any("few-row layers" in w for w in rates)  # the embedded target takes the few-row path too
    if out.get("drafting"):  # no drafted token accepted: no ratio claimed
        assert out["speedup"] is None
    else:
        assert out["speedup"] == pytest.approx(out["tokens_per_s"] / out["baseline_tokens_per_s"])
    capsys.readouterr()
    assert main([a for a in DECODE if a != "--json"] + ["--baseline"]) == 0
    err = capsys.readouterr().err
    assert bool(re.search(r"speed-up \d", err)) != ("no speed-up claimed" in err)
    assert "plain decoding: " in err and "ways timed on this prompt" in err


def torch_default_threads() -> int:
    from tevviz.engine.load.threads import TORCH_DEFAULT_THREADS

    return TORCH_DEFAULT_THREADS


def test_decode_says_the_thread_count_and_what_chose_it(capsys):
    asked = run_json(DECODE, capsys)["threads"]  # DECODE asks for --threads 1
    assert (asked["threads"], asked["source"]) == (1, "asked") and "--threads" in asked["why"]
    unasked = DECODE[:DECODE.index("--threads")] + DECODE[DECODE.index("--threads") + 2:]
    spare = run_json(unasked, capsys)["threads"]  # the tests' TEVVIZ_THREADS=spare: one fewer than the cores
    assert spare["source"] == "spare" and spare["threads"] == max(1, torch_default_threads() - 1)
    assert main([a for a in DECODE if a != "--json"]) == 0
    assert "decoded on 1 thread (--threads)" in capsys.readouterr().err


def test_ignore_eos_decodes_to_the_token_limit(tmp_path, capsys):
    """--ignore-eos keeps decoding past the end token: the prompt that ends at once here writes every token asked."""
    prompt = ["--prompt", "x = 1\n" * 3]  # short code the embedded pair ends quickly
    plain, doc = exported([*prompt, "--max-new-tokens", "40"], tmp_path, capsys, "a.json")
    past, doc2 = exported([*prompt, "--max-new-tokens", "40", "--ignore-eos"], tmp_path, capsys, "b.json")
    assert doc["meta"]["stop_on_eos"] is True and doc2["meta"]["stop_on_eos"] is False
    assert len(past["token_ids"]) == 40
    if len(plain["token_ids"]) < 40:  # where the end token came first, the tokens before it are the same
        assert past["token_ids"][: len(plain["token_ids"])] == plain["token_ids"]


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


# local HF folders ----------------------------------------------------------------------------------------------------


def test_decode_json_matches_greedy_generate(pair_dirs, capsys):
    import torch

    target, draft, pair = pair_dirs
    rc = main(["decode", "--target", str(target), "--draft", str(draft), "--prompt", "t1 t2 t3", "--max-new-tokens",
               "20", "--json", "--budget", "8", "--depth", "3"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) >= {"text", "token_ids", "rounds", "tau", "mean_expected_length", "tokens_per_s", "stage_ms"}
    ids = pair.tokenizer("t1 t2 t3")["input_ids"]
    ref = pair.target.generate(torch.tensor([ids]), max_new_tokens=20, do_sample=False)[0, len(ids):].tolist()
    assert out["token_ids"] == ref
    assert out["tau"] == pytest.approx(out["mean_expected_length"])  # greedy: every round reaches its ceiling
    assert set(out["stage_ms"]) == {"draft", "target", "verify", "other"}


# what decode prints --------------------------------------------------------------------------------------------------


def test_decode_progress_shows_on_a_terminal_only(monkeypatch, capsys):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    assert main(["decode", "--prompt", PROMPT, "--max-new-tokens", "8", "--threads", "1"]) == 0
    assert "decoding" in capsys.readouterr().err
    assert main(["decode", "--prompt", PROMPT, "--max-new-tokens", "8", "--json"]) == 0
    assert "decoding" not in capsys.readouterr().err


def test_chat_answer_is_printed_apart_from_the_prompt(capsys):
    out = {"text": "The main reason", "token_ids": [1], "rounds": 1, "tau": 1.0, "mean_expected_length": 1.0,
           "tokens_per_s": 1.0, "stage_ms": {}}
    session = type("S", (), {"notice": "", "cfg": None})()
    commands.print_decoded(None, "Answer briefly.", True, out, session)
    assert capsys.readouterr().out == "Answer briefly.\n\nThe main reason\n"
    commands.print_decoded(None, "def f(", False, out | {"text": "x):"}, session)
    assert capsys.readouterr().out == "def f(x):\n"


def test_optimal_trees_that_bound_no_round_print_no_gap(tmp_path, capsys):
    """Speculative sampling on sampled chains of a fixed depth with --optimal: decode and inspect say there is no
    drafter gap."""
    path = tmp_path / "s.json"
    argv = ["decode", "--prompt", PROMPT, "--max-new-tokens", "8", "--temperature", "1", "--builder", "sampled",
            "--verifier", "speculative", "--budget", "32", "--depth", "3", "--optimal", "--export", str(path)]
    assert main(argv) == 0
    assert "mean drafter gap - (no round it bounds)" in capsys.readouterr().err
    assert main(["inspect", str(path)]) == 0
    assert "mean drafter gap (no round it bounds)" in capsys.readouterr().out


def test_decode_says_what_it_ran_and_on_a_terminal_how_to_compare(monkeypatch, capsys):
    """The builder and verifier that ran are said (and in --json); on a terminal, without --baseline, a line says
    how to compare with plain decoding (tokens/s alone was printed)."""
    argv = ["decode", "--prompt", PROMPT, "--max-new-tokens", "8", "--threads", "1", "--verifier", "predraw",
            "--budget", "32"]
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "ran: builder best-first (budget 32, depth 6), verifier predraw" in err and "add --baseline" in err
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
    assert main([*argv, "--budget", "auto"]) == 0
    err = capsys.readouterr().err
    # auto: up to 64 nodes by default
    assert "ran: builder best-first (budget auto up to 64, depth 6), verifier predraw" in err
    assert "--baseline" not in err
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["builder"] == "best-first (budget 32, depth 6)" and out["verifier"] == "predraw"
    # The embedded pair's greedy default, a stopped chain, is said by its stop and longest depth, not a budget.
    assert main(["decode", "--prompt", PROMPT, "--max-new-tokens", "8", "--threads", "1"]) == 0
    err = capsys.readouterr().err
    assert "ran: builder sampled (stopped below p = 0.4, depth up to 8), verifier speculative" in err


# Ctrl-C: the first stops at the end of the round, the second at once -------------------------------------------------


def read_until(fd: int, needle: bytes, proc, seconds: float) -> bytes:
    """Bytes read from `fd` until `needle` shows up (or the process ends, or time runs out)."""
    got, end = b"", time.monotonic() + seconds
    while needle not in got and time.monotonic() < end and proc.poll() is None:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                got += os.read(fd, 65536)
            except OSError:
                break
    return got


def test_ctrl_c_during_decode_prints_the_partial_text_and_writes_a_partial_export(tmp_path):
    """A real SIGINT to `tevviz decode` on a terminal: progress first, then the text so far, the statistics and an
    export of the rounds done, marked interrupted; exit status 130."""
    from tevviz.engine.records.io import load

    path = tmp_path / "partial.json"
    master, slave = os.openpty()  # a terminal for stderr: the progress line shows there
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # a new pty is 0 columns wide
    proc = subprocess.Popen([sys.executable, "-m", "tevviz", "decode", "--prompt", PROMPT, "--max-new-tokens", "400",
                             "--temperature", "1", "--export", str(path), "--threads", "1"],
                            stdout=subprocess.PIPE, stderr=slave, cwd=ROOT, text=True)
    os.close(slave)
    try:
        seen = read_until(master, b"rounds=", proc, 120)
        assert b"rounds=" in seen and b"tok/s" in seen, seen[-500:]
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
        err = read_until(master, b"interrupted after", proc, 1) + seen
    finally:
        proc.kill()
        os.close(master)
    assert proc.returncode == 130, err.decode(errors="replace")[-2000:]
    assert out.startswith(PROMPT) and len(out.strip()) > len(PROMPT.strip())
    saved = load(path)
    assert saved.meta["interrupted"] is True and saved.meta["interrupted_after_rounds"] == len(saved.rounds) > 0
    assert saved.text and out == PROMPT + saved.text + "\n"
    assert len(saved.token_ids) < 400


def test_decode_interrupted_in_process_returns_130_and_says_so(tmp_path, monkeypatch, capsys):
    """The stop is asked for after the first round (as the first Ctrl-C does); --json says interrupted."""
    from tevviz.engine.decode import session as session_module

    real_step = session_module.DecodeSession.step

    def step_then_ask_to_stop(self):
        record = real_step(self)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)
        return record

    monkeypatch.setattr(session_module.DecodeSession, "step", step_then_ask_to_stop)
    path = tmp_path / "s.json"
    assert main(["decode", "--prompt", PROMPT, "--max-new-tokens", "64", "--json", "--export", str(path)]) == 130
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert data["interrupted"] is True and data["rounds"] == 1
    assert "interrupted after 1 rounds" in err and "marked interrupted" in err
    assert json.loads(path.read_text())["meta"]["interrupted"] is True


def test_a_second_ctrl_c_keeps_the_committed_text_and_writes_the_export(tmp_path, monkeypatch, capsys):
    """Two Ctrl-Cs in the fourth round, the second arriving after that round has extended the text but before its
    record is kept: the three finished rounds' text is printed and exported (marked interrupted), the half round
    dropped, exit 130 (the whole decode was lost: no text, no export)."""
    from tevviz.engine.decode import sizing
    from tevviz.engine.records.io import load

    calls = []
    real_observe = sizing.FixedSizing.observe

    def observe(self, *args):
        calls.append(1)
        if len(calls) == 4:  # inside round 4, after its tokens were appended to the stream
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
        return real_observe(self, *args)

    monkeypatch.setattr(sizing.FixedSizing, "observe", observe)
    path = tmp_path / "s.json"
    # A fixed tree (the pair's own default sizes its rounds: another sizing policy than the one patched here).
    code = main(["decode", "--prompt", PROMPT, "--max-new-tokens", "64", "--threads", "1", "--json", "--export",
                 str(path), "--builder", "best-first", "--verifier", "tev", "--budget", "32", "--depth", "6"])
    out, err = capsys.readouterr()
    assert code == 130 and len(calls) == 4, err
    data = json.loads(out)
    assert data["interrupted"] is True and data["rounds"] == 3
    saved = load(path)
    assert saved.meta["interrupted"] is True and len(saved.rounds) == 3
    committed = [t for r in saved.rounds for t in r.committed]
    assert data["token_ids"] == committed == saved.token_ids and committed
    assert "interrupted after 3 rounds" in err and "marked interrupted" in err and "Traceback" not in err
