"""The command line on local HF folders, and the JSON importer (tevviz files, DDTree traces, fuzzing)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from conftest import tiny_pair
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tevviz.cli import main
from tevviz.engine import TevvizError
from tevviz.engine.records.io import loads, parse

ROOT = __import__("pathlib").Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def pair_dirs(tmp_path_factory):
    """A tiny Llama pair saved as two local HF folders."""
    root = tmp_path_factory.mktemp("pair")
    pair = tiny_pair("llama")
    for name, model in (("target", pair.target), ("draft", pair.draft)):
        model.save_pretrained(root / name)
        pair.tokenizer.save_pretrained(root / name)
    return root / "target", root / "draft", pair


@pytest.fixture(scope="module")
def exported(pair_dirs, tmp_path_factory):
    target, draft, _ = pair_dirs
    path = tmp_path_factory.mktemp("export") / "s.json"
    rc = main(["decode", "--target", str(target), "--draft", str(draft), "--prompt", "t1 t2 t3", "--max-new-tokens",
               "24", "--temperature", "1", "--export", str(path), "--json"])
    assert rc == 0
    return path


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


def test_export_validates_and_inspects(exported, capsys):
    data = json.loads(exported.read_text())
    assert data["schema"] == "tevviz.session/2"
    assert data["meta"]["verifier"] == "tev" and data["meta"]["sampling"]["temperature"] == 1.0
    imported = loads(exported.read_text())
    assert len(imported.rounds) == len(data["rounds"]) > 0
    assert sum(len(r.committed) for r in imported.rounds) == len(data["token_ids"])
    for r in data["rounds"]:
        assert abs(sum(n["w"] for n in r["nodes"]) - 1) < 1e-4
        assert r["graph"]["accepted"][0] == 0
    assert main(["inspect", str(exported)]) == 0
    assert f"{len(data['rounds'])} rounds" in capsys.readouterr().out


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


def test_ddtree_trace_import():
    trace = {"node_token_ids": [5, 6, 7, 8], "node_depths": [0, 1, 1, 2], "parents": [-1, 0, 0, 1],
             "accepted_indices": [0, 1, 3]}
    imp = parse(trace)
    assert imp.kind == "ddtree" and imp.rounds[0].exit_node == 3 and imp.rounds[0].block_length == 3
    rootless = {"node_token_ids": [6, 7, 8], "node_depths": [1, 1, 2], "parents": [-1, -1, 0],
                "accepted_indices": [0, 2], "root_token_id": 5}
    r = parse([rootless]).rounds[0]
    assert r.tokens == [5, 6, 7, 8] and r.parents == [-1, 0, 0, 1] and r.accepted == [0, 1, 3]


@pytest.mark.parametrize("text, where", [
    ("{", "not valid JSON"),
    ("[1, 2]", "trace[0]: expected an object"),
    ('{"schema": "other/9"}', "unknown format"),
    ('{"schema": "tevviz.session/1", "rounds": {}}', "rounds: expected a list"),
    ('{"node_token_ids": [1, 2], "node_depths": [0, 1], "parents": [-1, 5], "accepted_indices": [0]}',
     "trace.parents[1]: 5 is not an earlier node"),
    ('{"node_token_ids": [1, 2], "node_depths": [0, 2], "parents": [-1, 0], "accepted_indices": [0]}',
     "trace.node_depths[1]"),
    ("[" * 100000 + "]" * 100000, "not valid JSON"),
])
def test_malformed_imports_name_the_field(text, where):
    with pytest.raises(TevvizError, match=None) as e:
        loads(text)
    assert where in str(e.value)


def test_round_errors_name_the_round(exported):
    data = json.loads(exported.read_text())
    data["rounds"][1]["nodes"][1]["P"] = 1.7
    with pytest.raises(TevvizError, match=r"rounds\[1\]\.nodes\[1\]\.P: 1.7 is out of range"):
        parse(data)
    data = json.loads(exported.read_text())
    data["rounds"][0]["graph"]["accepted"] = [0, 99]
    with pytest.raises(TevvizError, match=r"rounds\[0\]\.graph"):
        parse(data)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 10) | st.floats(allow_nan=True) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["schema", "rounds", "nodes", "graph", "id", "parent", "accepted", "exit_node",
                         "node_token_ids", "parents", "node_depths", "accepted_indices", "token_id", "P", "w"]),
        inner, max_size=5),
    max_leaves=20,
)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(json_values)
def test_importer_fuzz_raises_only_tevviz_errors(value):
    try:
        parse(value)
    except TevvizError:
        pass


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_importer_fuzz_on_mutated_real_session(exported, data):
    doc = json.loads(exported.read_text())
    r = data.draw(st.integers(0, len(doc["rounds"]) - 1))
    node = data.draw(st.integers(0, len(doc["rounds"][r]["nodes"]) - 1))
    key = data.draw(st.sampled_from(["parent", "token_id", "P", "w", "depth", "id", "missing"]))
    doc["rounds"][r]["nodes"][node][key] = data.draw(json_values)
    try:
        parse(doc)
    except TevvizError as e:
        assert f"rounds[{r}]" in str(e)


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
