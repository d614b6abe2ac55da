"""The command line (tevviz.cli) and its handlers (tevviz.commands) on the shipped stdlib pair, on the CPU."""

from __future__ import annotations

import argparse
import importlib.metadata
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

import tevviz
from tevviz import commands
from tevviz.cli import main
from tevviz.engine.errors import TevvizError
from tevviz.engine.records.round_numbers import COLUMNS

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "def fib(n):\n"
DECODE = ["decode", "--json", "--max-new-tokens", "4", "--device", "cpu"]  # the stdlib pair: no --target/--draft


def message(err: str) -> str:
    """The one line of stderr, transformers' weight-loading progress bars left out."""
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("Loading weights")]
    assert len(lines) == 1, lines
    return lines[0]


def decode_ids(argv: list[str], capsys) -> list[int]:
    capsys.readouterr()
    assert main([*DECODE, *argv]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["token_ids"]) == 4
    return out["token_ids"]


@pytest.fixture(scope="module")
def reference_ids():
    """Greedy ids of PROMPT from the stdlib target's own `generate` (no tevviz decoding)."""
    import torch

    from tevviz.engine.load.models import ModelSource

    pair = ModelSource(device="cpu").load()
    ids = pair.tokenizer(PROMPT)["input_ids"]
    out = pair.target.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                               max_new_tokens=4, do_sample=False, eos_token_id=None, pad_token_id=0)
    return out[0, len(ids):].tolist()


# --- entry point, help, version ---------------------------------------------------------------------------------


def test_module_help_and_parser_load_no_torch():
    r = subprocess.run([sys.executable, "-m", "tevviz", "--help"], capture_output=True, text=True, cwd=ROOT,
                       check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("usage: tevviz")
    assert "exit status: 0 done, 1 the work failed, 2 bad arguments" in r.stdout
    code = ('import sys; from tevviz.cli import build_parser; build_parser().format_help(); '
            'assert "torch" not in sys.modules')
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=False)
    assert r.returncode == 0, r.stderr


def test_every_help_page_reads_clean():
    """Descriptions are not %-formatted by argparse and help strings are: neither may show a doubled % or a
    placeholder left unformatted."""
    import argparse

    from tevviz.cli import build_parser

    parser = build_parser()
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert len(subs.choices) > 5
    for name, sub in [("tevviz", parser), *subs.choices.items()]:
        text = sub.format_help()
        assert "%%" not in text and "%(" not in text, name


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out == f"tevviz {tevviz.__version__}\n"
    assert tevviz.__version__ == importlib.metadata.version("tevviz")


# --- decode: where the prompt comes from --------------------------------------------------------------------------


def test_prompt_from_text_stdin_and_file_agree(reference_ids, tmp_path, monkeypatch, capsys):
    assert decode_ids(["--prompt", PROMPT], capsys) == reference_ids
    monkeypatch.setattr(sys, "stdin", io.StringIO(PROMPT))
    assert decode_ids(["--prompt", "-"], capsys) == reference_ids
    assert sys.stdin.read() == ""  # the whole of stdin was read
    f = tmp_path / "prompt.txt"
    f.write_text(PROMPT, encoding="utf-8")
    assert decode_ids(["--prompt-file", str(f)], capsys) == reference_ids


def test_missing_prompt_file_is_bad_input(tmp_path, capsys):
    missing = tmp_path / "nope.txt"
    assert main([*DECODE, "--prompt-file", str(missing)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert message(captured.err) == (f"tevviz decode: error: cannot read --prompt-file {str(missing)!r}: "
                                     "No such file or directory")


def test_prompt_and_prompt_file_together_are_refused(tmp_path, capsys):
    f = tmp_path / "p.txt"
    f.write_text("x")
    with pytest.raises(SystemExit) as e:
        main([*DECODE, "--prompt", "x", "--prompt-file", str(f)])
    assert e.value.code == 2
    msg = message(capsys.readouterr().err)
    assert msg.startswith("tevviz decode: error: argument --prompt-file: not allowed with argument --prompt")


# --- inspect --------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    path = tmp_path_factory.mktemp("export") / "session.json"
    assert main([*DECODE, "--prompt", PROMPT, "--max-new-tokens", "8", "--export", str(path)]) == 0
    return path


def test_inspect_json(exported, capsys):
    data = json.loads(exported.read_text())
    capsys.readouterr()
    assert main(["inspect", str(exported), "--json"]) == 0
    out = capsys.readouterr().out
    assert len(out.strip().splitlines()) == 1
    doc = json.loads(out)
    assert set(doc) == {"file", "kind", "summary", "rounds"}
    assert doc["file"] == str(exported) and doc["kind"] == "session"
    n = len(data["rounds"])
    assert n > 0 and doc["summary"]["rounds"] == n
    assert [r["round"] for r in doc["rounds"]] == [r["graph"]["round"] for r in data["rounds"]]
    for row, r in zip(doc["rounds"], data["rounds"]):
        # the round and its exit node, then every per-round table's number (round_numbers.COLUMNS)
        assert set(row) == {"round", "exit", *(c.name for c in COLUMNS)}
        assert {"nodes", "depth", "L", "expected_length", "optimal_ceiling"} <= set(row)  # the keys it always had
        assert row["optimal_ceiling"] is None and row["gap"] is None  # this session ran without --optimal
        assert row["ms"] == pytest.approx(sum(r["graph"]["stage_ms"].values()))
        assert row["nodes"] == len(r["nodes"])
        assert row["exit"] == r["graph"]["exit_node"]
        assert row["depth"] == max(node["depth"] for node in r["nodes"])
        assert row["L"] == len(r["graph"]["accepted"])  # accepted path (root included) = the block length
    assert doc["summary"]["tau"] == pytest.approx(sum(r["L"] for r in doc["rounds"]) / n)


def test_inspect_session_with_zero_rounds(tmp_path, capsys):
    path = tmp_path / "empty.json"
    path.write_text(json.dumps({"schema": "tevviz.session/1", "meta": {}, "prompt": "x", "prompt_token_ids": [1],
                                "token_ids": [], "text": "", "rounds": []}))
    assert main(["inspect", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["kind"] == "session" and doc["rounds"] == []
    assert doc["summary"]["rounds"] == 0 and doc["summary"]["tau"] is None
    assert doc["summary"]["mean_expected_length"] is None
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"{path}: session, 0 rounds"
    assert out[1:4] == ["summary", "rounds  tokens  tau  mean E[L]", "     0       0    —          —"]
    # the rounds table's title and header row, no rows, then its notes: the exit node and each column's number
    at = out.index("rounds")
    assert out[at + 1] == "round  exit node  " + "  ".join(n.label for n in COLUMNS)
    assert len(out) == at + 2 + 1 + len(COLUMNS)


# --- exit codes -----------------------------------------------------------------------------------------------------


def test_unknown_verifier_is_bad_input(capsys):
    with pytest.raises(SystemExit) as e:
        main([*DECODE, "--prompt", "x", "--verifier", "no-such-verifier"])
    assert e.value.code == 2
    assert "argument --verifier: invalid choice: 'no-such-verifier'" in message(capsys.readouterr().err)


def test_nonexistent_target_is_bad_input(tmp_path, capsys):
    missing = str(tmp_path / "no-target")
    draft = str(ROOT / "assets" / "models" / "tevviz-stdlib-draft")
    assert main([*DECODE, "--prompt", "x", "--target", missing, "--draft", draft]) == 2
    assert message(capsys.readouterr().err) == f"tevviz decode: error: target model path {missing!r} does not exist"


def test_failure_after_the_work_started_exits_1(monkeypatch, capsys):
    from tevviz.engine.decode.session import DecodeSession

    def boom(self):
        raise TevvizError("boom")

    monkeypatch.setattr(DecodeSession, "step", boom)
    capsys.readouterr()
    assert main([*DECODE, "--prompt", PROMPT]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert message(captured.err) == "tevviz decode: error: boom"


# --- the verifier registry drives --verifier -------------------------------------------------------------------------


def test_registered_verifier_is_a_choice(reference_ids, capsys):
    from tevviz.engine.verify import verifiers

    name = "my-test-verifier"
    assert name not in verifiers.VERIFIERS
    with pytest.raises(SystemExit) as e:
        main([*DECODE, "--prompt", PROMPT, "--verifier", name])
    assert e.value.code == 2
    capsys.readouterr()
    calls = []
    try:
        @verifiers.register(name)
        def mine(tree, logits, cfg, gen, anc=None):
            calls.append(tree.size)
            return verifiers.tev(tree, logits, cfg, gen, anc)

        assert decode_ids(["--prompt", PROMPT, "--verifier", name], capsys) == reference_ids
        assert calls  # it was our verifier that decided each round
    finally:
        verifiers.VERIFIERS.pop(name, None)
    with pytest.raises(SystemExit):
        main([*DECODE, "--prompt", PROMPT, "--verifier", name])


# --- bench ----------------------------------------------------------------------------------------------------------


def test_bench_runs_a_script_with_its_common_module(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", list(sys.argv))  # cmd_bench sets sys.argv for the script
    monkeypatch.setattr(sys, "path", list(sys.path))  # common.py puts the checkout on the path
    had_common = "common" in sys.modules
    try:
        assert main(["bench", "verifier_stage", "--help"]) == 0
    finally:
        if not had_common:
            sys.modules.pop("common", None)
    out = capsys.readouterr().out
    assert out.startswith("usage: ") and "--verifiers" in out
    assert str(ROOT / "benchmarks") not in sys.path  # the benchmarks folder is taken off the path again


@pytest.mark.parametrize("name", ["common", "ablation_table", "no_such_bench"])
def test_bench_unknown_name_lists_the_scripts(name, capsys):
    assert main(["bench", name]) == 2
    msg = message(capsys.readouterr().err)
    assert msg.startswith(f"tevviz bench: error: no benchmark {name!r}; available: ")
    available = msg.split("available: ", 1)[1].split(", ")
    # a benchmark is a script with a main(); common and ablation_table are modules the scripts import
    expected = sorted(p.stem for p in (ROOT / "benchmarks").glob("*.py") if "\ndef main(" in p.read_text())
    assert available == expected and "verifier_stage" in available
    assert "common" not in available and "ablation_table" not in available


# --- pair: the one door to a pair's models -------------------------------------------------------------------------


@pytest.mark.parametrize("argv", [["train-demo-pair"], ["train-demo-pair", "--out", "x"], ["train-demo-pair", "-h"]])
def test_a_moved_command_names_its_new_one(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err == "tevviz train-demo-pair is now `tevviz pair train-target stdlib`\n"


def test_pair_train_target_takes_the_stdlib_recipe(capsys):
    assert main(["pair", "train-target", "smollm2"]) == 2
    assert "a target's recipe exists for the pairs stdlib" in message(capsys.readouterr().err)
    assert main(["pair", "train-target"]) == 2
    with pytest.raises(SystemExit) as e:
        main(["pair", "train-target", "stdlib", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: tevviz pair train-target stdlib") and "--target-steps" in out


# --- server settings ------------------------------------------------------------------------------------------------


def ns(name=None, port=None, share=None):
    return argparse.Namespace(server_name=name, server_port=port, share=share)


@pytest.fixture
def no_gradio_env(monkeypatch):
    for var in ("GRADIO_SERVER_NAME", "GRADIO_SERVER_PORT", "GRADIO_SHARE"):
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


def test_server_settings_defaults(no_gradio_env):
    assert commands.server_settings(ns()) == {"server_name": "127.0.0.1", "server_port": None, "share": False}


def test_server_settings_from_environment(no_gradio_env):
    no_gradio_env.setenv("GRADIO_SERVER_NAME", "0.0.0.0")
    no_gradio_env.setenv("GRADIO_SERVER_PORT", "7999")
    no_gradio_env.setenv("GRADIO_SHARE", "True")
    assert commands.server_settings(ns()) == {"server_name": "0.0.0.0", "server_port": 7999, "share": True}
    no_gradio_env.setenv("GRADIO_SHARE", "0")
    assert commands.server_settings(ns())["share"] is False


def test_server_settings_flags_win(no_gradio_env):
    no_gradio_env.setenv("GRADIO_SERVER_NAME", "0.0.0.0")
    no_gradio_env.setenv("GRADIO_SERVER_PORT", "7999")
    no_gradio_env.setenv("GRADIO_SHARE", "1")
    assert commands.server_settings(ns("localhost", 8123, False)) == {
        "server_name": "localhost", "server_port": 8123, "share": False}


def test_server_settings_non_numeric_port(no_gradio_env):
    no_gradio_env.setenv("GRADIO_SERVER_PORT", "eighty")
    with pytest.raises(TevvizError) as e:
        commands.server_settings(ns())
    assert str(e.value) == "GRADIO_SERVER_PORT must be a number, got 'eighty'"
    assert commands.server_settings(ns(port=8000))["server_port"] == 8000  # a flag needs no environment


# --- chat -----------------------------------------------------------------------------------------------------------


def test_chat_needs_a_chat_template(reference_ids, capsys):
    assert main([*DECODE, "--prompt", PROMPT, "--chat"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert message(captured.err) == "tevviz decode: error: this tokenizer has no chat template; decode without --chat"
    # Without the flag the stdlib pair (no template) decodes the plain prompt, as --no-chat does.
    assert decode_ids(["--prompt", PROMPT], capsys) == reference_ids
    assert decode_ids(["--prompt", PROMPT, "--no-chat"], capsys) == reference_ids


def test_decode_budget_auto_reports_its_sizing(reference_ids, capsys):
    """--budget auto: the target's greedy ids, the mean B and H and the count of rounds without a draft."""
    capsys.readouterr()
    assert main([*DECODE, "--prompt", PROMPT, "--budget", "auto", "--budget-limit", "8"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["token_ids"] == reference_ids
    a = out["auto_budget"]
    assert 0 <= a["mean_B"] <= 8 and 0 <= a["undrafted_rounds"] <= out["rounds"]


def test_decode_mixed_reports_its_arms_and_needs_budget_auto(reference_ids, capsys):
    """--builder mixed: the target's greedy ids, and how many rounds each arm drafted; with a fixed --budget, exit 2."""
    capsys.readouterr()
    assert main([*DECODE, "--max-new-tokens", "24", "--prompt", PROMPT, "--builder", "mixed", "--budget", "auto",
                 "--budget-limit", "8", "--depth", "3"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["token_ids"][:4] == reference_ids
    a = out["auto_budget"]
    assert 0 < a["chain_rounds"] < out["rounds"]  # the warm-up drafts both arms
    assert {"chain", "tree_rate", "chain_rate"} <= set(a["last"])
    assert main([*DECODE, "--prompt", PROMPT, "--builder", "mixed", "--budget", "32"]) == 2
    assert "use it with an automatic budget (--budget auto" in message(capsys.readouterr().err)


def test_cli_tree_shape_defaults_are_the_engines():
    """The CLI spells BuilderConfig's K and W defaults out (importing it would load torch for --help)."""
    from tevviz.cli import build_parser
    from tevviz.engine.draft.builders import BuilderConfig

    for argv in (["decode", "--prompt", "x"], ["eval"]):
        args = build_parser().parse_args(argv)
        assert (args.children, args.width) == (BuilderConfig.children, BuilderConfig.width)


def test_cli_decoding_and_training_defaults_are_the_engines():
    """The other defaults the CLI spells out for the same reason: decode's are DecodeConfig's, SamplingConfig's and
    BuilderConfig's (temperature aside: the CLI decodes greedily by default; the tree and the verifier aside: the
    pair's measured best, test_decode_defaults); train's are TrainConfig's where the command does not choose its own
    (steps, schedule)."""
    from tevviz.cli import build_parser
    from tevviz.engine.core.sampling import SamplingConfig
    from tevviz.engine.decode.session import DecodeConfig
    from tevviz.engine.draft.builders import BuilderConfig
    from tevviz.engine.load.pairs import AUTO_LIMIT, NAMED_PAIRS, decode_defaults
    from tevviz.engine.train.exittrain import TrainConfig
    from tevviz.options import decode_config_from_args

    args = build_parser().parse_args(["decode", "--prompt", "x"])
    best = decode_defaults(NAMED_PAIRS["stdlib"], 0.0)
    auto = best.budget == "auto"
    tree = BuilderConfig(name=best.builder, budget=AUTO_LIMIT if auto else best.budget, depth=best.depth, auto=auto,
                         stop_below=best.stop_below)
    assert decode_config_from_args(args) == DecodeConfig(sampling=SamplingConfig(temperature=0.0), builder=tree,
                                                         verifier=best.verifier)
    args = build_parser().parse_args(["train", "--out", "x"])
    cfg = TrainConfig()
    assert (args.objective, args.batch, args.seed, args.budget, args.depth) == (
        cfg.objective, cfg.batch, cfg.seed, cfg.builder.budget, cfg.builder.depth)
