"""What a newcomer meets in the first hour: the README's install, output paths checked before the work, Ctrl-C that
keeps the work done, atomic writes, one-line start-up failures of the app, and help texts that read once."""

from __future__ import annotations

import fcntl
import json
import os
import re
import select
import signal
import socket
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from tevviz import commands
from tevviz.cli import build_parser, main
from tevviz.engine.errors import TevvizError
from tevviz.files import atomic_write, atomic_write_json, check_writable

ROOT = Path(__file__).resolve().parent.parent
PROMPT = "def fib(n):\n"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def one_line(err: str) -> str:
    """The one line of stderr, transformers' weight-loading progress bars left out."""
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("Loading weights")]
    assert len(lines) == 1, lines
    return lines[0]


@pytest.fixture
def no_models(monkeypatch):
    """Any model load fails the test: the command must stop before it."""
    from tevviz.engine.load.models import ModelSource

    def refuse(self):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(ModelSource, "load", refuse)


# --- 1. the README's install commands --------------------------------------------------------------------------------


def readme_commands() -> list[str]:
    """The shell lines of the README's set-up blocks."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    setup = text[text.index("## Set-up"): text.index("\n## ", text.index("## Set-up") + 1)]
    blocks = re.findall(r"```bash\n(.*?)```", setup, re.DOTALL)
    return [ln.strip() for b in blocks for ln in b.splitlines() if ln.strip() and not ln.strip().startswith("#")]


def test_readme_install_is_right_on_a_plain_package_index():
    lines = readme_commands()
    torch_lines = [ln for ln in lines if re.search(r"pip install[^&]*\btorch\b", ln)]
    cpu = [ln for ln in torch_lines if "cpu" in ln.lower()]
    assert len(cpu) == 1, torch_lines
    # PyTorch's own CPU wheel index, as PyTorch documents it: a plain index would take the CUDA build.
    assert f"--index-url {CPU_INDEX}" in cpu[0] and "torch==2.13.0" in cpu[0]
    gpu = [ln for ln in torch_lines if ln not in cpu]
    assert gpu and all("torch==2.13.0" in ln and "cpu" not in ln for ln in gpu), torch_lines
    assert any('pip install -e ".[dev]"' in ln for ln in lines)
    assert any(re.search(r"(^|&& )tevviz$", ln) for ln in lines)
    tests = [ln for ln in lines if "pytest" in ln]
    assert any(ln.startswith("python3 -m pytest") and "-m" not in ln.split("pytest", 1)[1] for ln in tests)
    assert any(" -k " in ln or "tests/" in ln for ln in tests), "a quick subset of the tests"


def test_ci_keeps_the_local_cpu_build_and_no_torch_index():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    # CI reaches PyPI alone; this machine's pip configuration takes a local CPU build of that version.
    assert "\npython3 -m pip install -q torch==2.13.0\n" in ci
    assert not [ln for ln in ci.splitlines() if "download.pytorch.org" in ln and not ln.lstrip().startswith("#")]


# --- 2. output paths checked before the work; writes that leave old file or none ------------------------------------


def test_export_to_a_missing_folder_is_refused_before_decoding(tmp_path, no_models, capsys):
    path = tmp_path / "no" / "such" / "s.json"
    assert main(["decode", "--prompt", PROMPT, "--export", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert one_line(captured.err) == f"tevviz decode: error: --export {str(path)!r}: no folder {str(path.parent)!r}"


def test_export_to_a_folder_is_refused_before_decoding(tmp_path, no_models, capsys):
    assert main(["decode", "--prompt", PROMPT, "--export", str(tmp_path)]) == 2
    assert "is a folder; give a file name" in one_line(capsys.readouterr().err)


def test_report_and_train_outputs_are_checked_before_the_work(tmp_path, no_models, capsys):
    assert main(["report", str(ROOT / "nope.json"), "-o", str(tmp_path / "x" / "r.html")]) == 2
    assert "nope.json: no such file" in one_line(capsys.readouterr().err)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "f").write_text("x")
    assert main(["train", "--out", str(tmp_path / "full"), "--steps", "1"]) == 2
    assert "exists and is not empty" in one_line(capsys.readouterr().err)
    out = tmp_path / "no" / "such"
    assert main(["train", "--out", str(out), "--steps", "1"]) == 2
    said = one_line(capsys.readouterr().err)
    assert said == f"tevviz train: error: --out {str(out)!r}: no folder {str(out.parent)!r}"


def test_export_failing_at_the_end_still_prints_the_text_and_statistics(tmp_path, monkeypatch, capsys):
    import tevviz.files

    def denied(path, obj):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tevviz.files, "atomic_write_json", denied)
    path = tmp_path / "s.json"
    assert main(["decode", "--prompt", PROMPT, "--max-new-tokens", "4", "--export", str(path)]) == 1
    out, err = capsys.readouterr()
    assert out.startswith(PROMPT) and len(out) > len(PROMPT)
    assert "rounds " in err and "tau " in err
    assert f"cannot write --export {str(path)!r} (Permission denied): nothing was written there" in err
    assert not path.exists()


def test_an_interrupted_write_leaves_the_old_file_or_none(tmp_path):
    def pieces():
        yield '{"half": '
        raise KeyboardInterrupt

    fresh, old = tmp_path / "fresh.json", tmp_path / "old.json"
    old.write_text('{"old": 1}')
    for path in (fresh, old):
        with pytest.raises(KeyboardInterrupt):
            atomic_write(path, pieces())
    assert not fresh.exists() and json.loads(old.read_text()) == {"old": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.json"], "no partial file left behind"
    assert atomic_write_json(old, {"new": [1, 2]}) == len('{"new": [1, 2]}')
    assert json.loads(old.read_text()) == {"new": [1, 2]}
    assert check_writable(tmp_path / "a.json", "--x") == tmp_path / "a.json" and not (tmp_path / "a.json").exists()


# --- 3. Ctrl-C: the first stops at the end of the round, the second at once ------------------------------------------


def test_interrupt_asks_first_and_stops_at_once_second():
    before = signal.getsignal(signal.SIGINT)  # SIG_IGN under a shell's background job, else Python's own
    with commands.Interrupt("round") as stop:
        assert not stop()
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)
        assert stop()
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.5)
    assert signal.getsignal(signal.SIGINT) is before


def test_until_stopped_ends_a_loop_after_the_item_in_hand():
    flag = []
    given = commands.UntilStopped([1, 2, 3, 4], lambda: bool(flag))
    seen = []
    for x in given:
        seen.append(x)
        if x == 2:
            flag.append(1)
    assert seen == [1, 2] and given.done == 2 and len(given) == 4


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


# --- 4. the app's start-up failures: one line, exit 2, before any model loads ---------------------------------------


@pytest.fixture
def busy_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def test_busy_port_is_one_line_and_exit_2_before_any_model(busy_port):
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "tevviz", "app", "--server-port", str(busy_port)], capture_output=True,
                       text=True, cwd=ROOT, timeout=120, check=False, env={**os.environ, "GRADIO_SERVER_PORT": ""})
    assert r.returncode == 2, r.stderr
    assert one_line(r.stderr) == (f"tevviz app: error: port {busy_port} on 127.0.0.1 is in use: give --server-port "
                                  "a free port, or leave it out for 7860 or the next free one")
    assert "loading" not in r.stdout and time.perf_counter() - t0 < 60


@pytest.mark.parametrize("argv, said", [
    (["--server-port", "99999"], "--server-port must lie in [1, 65535], got 99999"),
    (["--server-port", "0"], "--server-port must lie in [1, 65535], got 0"),
    (["--server-name", "no.such.host.invalid"], "--server-name 'no.such.host.invalid': no such address here"),
    (["--threads", "0"], "--threads must be at least 1, got 0"),
])
def test_bad_server_settings_are_one_line_and_exit_2(argv, said, no_models, monkeypatch, capsys):
    monkeypatch.delenv("GRADIO_SERVER_PORT", raising=False)
    monkeypatch.delenv("GRADIO_SERVER_NAME", raising=False)
    assert main(["app", *argv]) == 2
    assert one_line(capsys.readouterr().err).startswith(f"tevviz app: error: {said}")


def test_gradio_failing_to_bind_after_the_check_is_one_line(monkeypatch, capsys):
    import tevviz.app

    def taken(**kw):
        raise OSError("Cannot find empty port in range: 7999-7999. You can specify a different port by setting the "
                      "GRADIO_SERVER_PORT environment variable or passing the `server_port` parameter to `launch()`.")

    monkeypatch.setattr(tevviz.app, "launch", taken, raising=False)
    monkeypatch.setattr(commands, "check_server", lambda *a: None)
    assert main(["app", "--server-port", "7999"]) == 2
    line = one_line(capsys.readouterr().err)
    assert "port 7999 on 127.0.0.1 is in use: pass --server-port" in line and "launch()" not in line


# --- 7. help texts, inspect's errors --------------------------------------------------------------------------------


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


def test_inspect_errors_name_the_file(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    for text, said in (("nope", "not valid JSON"), ('{"rounds": 5}', "unknown format"),
                       ('{"schema": "tevviz.session/2", "rounds": [{"x": 1}]}', "rounds[0]")):
        bad.write_text(text)
        assert main(["inspect", str(bad)]) == 2
        line = one_line(capsys.readouterr().err)
        assert line.startswith(f"tevviz inspect: error: {bad}: ") and said in line and "file:" not in line


def test_bench_interrupted_says_so(monkeypatch, capsys):
    import runpy

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(runpy, "run_path", interrupted)
    assert main(["bench", "verifier_stage"]) == 130
    assert "verifier_stage interrupted: stopped at once, no results written" in capsys.readouterr().err


def test_interrupt_before_the_work_says_interrupted(monkeypatch, capsys):
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(commands, "cmd_inspect", interrupted)
    assert main(["inspect", "x.json"]) == 130
    assert capsys.readouterr().err.strip() == "tevviz inspect: interrupted"


def test_check_writable_refuses_with_the_flag(tmp_path):
    with pytest.raises(TevvizError, match=r"^--out '.*' is a folder"):
        check_writable(tmp_path, "--out")


def ask_to_stop_after(monkeypatch, owner, name: str) -> None:
    """`owner.name` sends this process a SIGINT after its first call (what a first Ctrl-C there does)."""
    real = getattr(owner, name)
    calls = []

    def wrapped(*args, **kwargs):
        out = real(*args, **kwargs)
        calls.append(1)
        if len(calls) == 1:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
        return out

    monkeypatch.setattr(owner, name, wrapped)


def test_eval_interrupted_reports_the_prompts_done(monkeypatch, capsys):
    from tevviz.engine.train import evaluation

    ask_to_stop_after(monkeypatch, evaluation.DecodeSession, "run")
    assert main(["eval", "--temperatures", "0,1", "--max-new-tokens", "4", "--budget", "8", "--depth", "3",
                 "--json"]) == 130
    out, err = capsys.readouterr()
    (result,) = json.loads(out)
    assert result["prompts"] == 1 and len(result["per_prompt_tau"]) == 1 and result["temperature"] == 0
    assert "interrupted: T = 0 on 1 of" in err


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


# --- 6. the embedded pair's first impression ------------------------------------------------------------------------


def test_the_apps_first_examples_are_the_demo_prompts_and_the_target_writes_code_after_them(capsys):
    from tevviz.app.demo import example_prompts
    from tevviz.prompts import DEMO_PROMPTS, load_prompts

    rows = example_prompts()
    assert [r["id"] for r in rows[: len(DEMO_PROMPTS)]] == [d["id"] for d in DEMO_PROMPTS]
    assert rows[len(DEMO_PROMPTS):] == load_prompts(skip_bad=True)  # the held-out prompts follow, unchanged
    assert {r["split"] for r in load_prompts()} == {"train", "eval"}  # training and evaluation never see them
    for row in DEMO_PROMPTS:
        assert main(["decode", "--prompt", row["prompt"], "--max-new-tokens", "32", "--json", "--threads", "1"]) == 0
        text = json.loads(capsys.readouterr().out)["text"]
        lines = [ln for ln in text.split("\n")[1:] if ln.strip()]
        # An indented body, not the column of '#' lines the target writes after a prompt that ends at a newline.
        assert text.startswith("\n ") and lines and not any(ln.strip() == "#" for ln in lines), (row["id"], text)


def test_the_start_page_names_the_real_pair(tmp_path, monkeypatch):
    from tevviz.app.demo import pair_hint
    from tevviz.app.source import PairSource
    from tevviz.engine.load.models import ModelSource

    monkeypatch.setenv("TEVVIZ_CACHE", str(tmp_path))
    assert "`tevviz pair fetch smollm2`" in pair_hint(PairSource())
    target = tmp_path / "models" / "SmolLM2-135M-Instruct"
    target.mkdir(parents=True)
    (target / "config.json").write_text("{}")
    assert "is fetched: restart with `tevviz --pair smollm2`" in pair_hint(PairSource())
    assert pair_hint(PairSource(ModelSource(pair="smollm2"))) == ""  # already on it


def test_optimal_trees_that_bound_no_round_print_no_gap(tmp_path, capsys):
    """Speculative sampling on sampled chains of a fixed depth with --optimal: decode and inspect say there is no
    drafter gap."""
    path = tmp_path / "s.json"
    argv = ["decode", "--prompt", PROMPT, "--max-new-tokens", "8", "--temperature", "1", "--builder", "sampled",
            "--verifier", "speculative", "--budget", "32", "--depth", "3", "--optimal", "--export", str(path)]
    assert main(argv) == 0
    assert "mean drafter gap - (no round it bounds)" in capsys.readouterr().err
    assert main(["inspect", str(path)]) == 0
    assert "mean drafter gap - (no round it bounds)" in capsys.readouterr().out


def test_a_closed_pipe_ends_inspect_without_a_traceback(tmp_path):
    """`tevviz inspect FILE | head`: the reader gone, inspect stops quietly with the shell's SIGPIPE status (it
    ended in a BrokenPipeError traceback, exit 1); --help lists the statuses, 130 and 141 among them."""
    path = tmp_path / "s.json"
    assert main(["decode", "--prompt", PROMPT, "--max-new-tokens", "24", "--threads", "1", "--export", str(path)]) == 0
    read, write = os.pipe()
    os.close(read)  # no reader at all: the first write meets a closed pipe
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent))
    try:
        proc = subprocess.run([sys.executable, "-m", "tevviz", "inspect", str(path)], stdout=write,
                              stderr=subprocess.PIPE, text=True, env=env, timeout=300, check=False)
    finally:
        os.close(write)
    assert proc.returncode == 141 and proc.stderr == "", proc.stderr
    helped = build_parser().format_help()
    assert "130 interrupted" in helped and "141 standard output closed" in helped


@pytest.fixture
def no_network(monkeypatch):
    """No route to the hub: a connection fails at once, and nothing may ask transformers to download."""
    import socket

    import huggingface_hub.constants
    import transformers

    from tevviz.engine.load import models

    def unreachable(*args, **kwargs):
        raise OSError(101, "Network is unreachable")

    def no_download(*args, **kwargs):
        raise AssertionError("transformers was asked to fetch a hub id with no network (it retries for ~50 s)")

    monkeypatch.setattr(socket, "create_connection", unreachable)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    for key in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setattr(models, "_HUB_PROBE", {}, raising=False)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", no_download)
    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained", no_download)


def test_a_hub_id_without_a_network_is_refused_at_once(no_network, monkeypatch, capsys):
    """Without a network a hub id not in the local cache is refused in one line before transformers tries (it
    waited through ~50 s of retries); HF_HUB_OFFLINE says so; a cached one is read from the cache alone."""
    import huggingface_hub
    import huggingface_hub.constants

    from tevviz.engine.load import models

    argv = ["decode", "--target", "no-such-org/no-such-model", "--draft", "no-such-org/no-such-model", "--prompt", "x"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("tevviz decode: error: target model 'no-such-org/no-such-model' is a hub id, but "
                   "https://huggingface.co cannot be reached (Network is unreachable) and it is not in the local "
                   "Hugging Face cache: connect to the network, or give a local folder or .gguf file"), err
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    assert main(argv) == 2
    assert "is a hub id, but HF_HUB_OFFLINE is set and it is not in the local" in capsys.readouterr().err
    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache", lambda *a, **k: "/cache/config.json")
    models.check_source("some-org/cached-model", "target")
    assert models.hf_location("some-org/cached-model")[1] == {"local_files_only": True}


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
