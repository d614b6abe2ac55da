"""The same drafter in llama.cpp's llama-server and in tevviz, live: the embedded stdlib pair (small, fast) and, where
it is fetched, SmolLM2. Skipped, saying why, where llama-server or llama.cpp's converter source is not installed
(`tevviz engine install llama.cpp`; .ci/run builds it into the cache once)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tevviz.engine.engines.llamacpp_build import LlamaCpp, find_server
from tevviz.engine.errors import TevvizError
from tevviz.recipes.fetch import is_fetched


def _server():
    try:
        return find_server()
    except TevvizError as e:
        return str(e)


SERVER = _server()
pytestmark = [
    pytest.mark.skipif(isinstance(SERVER, str), reason=f"llama-server is not installed: {SERVER}"),
    pytest.mark.skipif(not LlamaCpp().has_source(), reason="llama.cpp's converter source is not unpacked in the "
                                                           "cache (tevviz engine install llama.cpp)"),
]
NEW = 24


@pytest.fixture(scope="module")
def stdlib_setup():
    """The stdlib pair, its GGUF files and a few of its eval prompts' ids."""
    from tevviz.engine.engines.llamacpp_convert import export_gguf
    from tevviz.engine.load.models import ModelSource
    from tevviz.engine.scan.doctor import encode_rows
    from tevviz.prompts import load_prompts

    source = ModelSource(pair="stdlib", device="cpu", dtype="float32")
    target, draft = source.resolved()
    ggufs = export_gguf(target, LlamaCpp().source), export_gguf(draft, LlamaCpp().source)
    pair = source.load()
    rows = load_prompts(None, "eval")[:3]
    return pair, ggufs, [(str(r["id"]), ids) for r, ids in zip(rows, encode_rows(pair.tokenizer, rows))]


def test_server_runs_on_localhost_and_stops_by_its_pid(stdlib_setup, tmp_path):
    from tevviz.engine.engines.llamacpp_server import LlamaServer, ServerSpec

    _, (t, _), prompts = stdlib_setup
    server = LlamaServer(ServerSpec(SERVER, t.path), tmp_path / "server.log")
    with server:
        pid = server.proc.pid
        assert server.url.startswith("http://127.0.0.1:")
        resp = server.complete(prompts[0][1], 8, 0.0)
        assert len(resp["tokens"]) == resp["timings"]["predicted_n"] <= 8
    assert server.proc is None
    with pytest.raises(ProcessLookupError):  # the process is gone (reaped by wait)
        os.kill(pid, 0)


def test_steps_account_for_every_token_and_t0_matches_tevviz(stdlib_setup, tmp_path):
    """llama.cpp's logged steps rebuild its tokens (first token, then accepted + 1 a step); at T = 0 tevviz's chain
    of the same depth commits the same tokens in the same rounds, where the target has no near tie."""
    from tevviz.engine.decode.session import stop_ids
    from tevviz.engine.engines.llamacpp_compare import first_part
    from tevviz.engine.engines.llamacpp_run import chain_config, llama_prompt, tevviz_prompt
    from tevviz.engine.engines.llamacpp_server import LlamaServer, ServerSpec

    pair, (t, d), prompts = stdlib_setup
    cfg = chain_config(4, 0.0, NEW)
    with LlamaServer(ServerSpec(SERVER, t.path, d.path, draft_max=4), tmp_path / "server.log") as server:
        for name, ids in prompts:
            llama, _, _ = llama_prompt(server, name, ids, NEW, 0.0)
            steps = llama.run.steps
            assert steps and all(0 <= a <= n <= 4 for a, n in steps)
            # the first token, each step's accepted + 1 (the last cut at an end token), at most one plain step after
            # the last draft (no room left to draft: llama.cpp drafts up to n_remaining - 1)
            whole = 1 + sum(a + 1 for a, _ in steps)
            assert whole - steps[-1][0] <= len(llama.run.tokens) <= whole + 1
            tev = tevviz_prompt(pair, name, ids, cfg)
            part = first_part(llama.run, tev.run, frozenset(stop_ids(pair)))
            # an accepted end token counted apart (llamacpp_compare.Part.end_token) is the one difference allowed
            assert part is None or part.end_token, f"{name}: the engines part: {part.to_dict()}"


def _cli(*args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tevviz", "engine", "run", "llama.cpp", *args],
                          capture_output=True, text=True, timeout=timeout, check=False)


def test_engine_run_on_the_stdlib_pair(tmp_path):
    done = _cli("--pair", "stdlib", "--limit", "2", "--max-new-tokens", str(NEW), "--depth", "3", "--json",
                "--out", str(tmp_path / "run"), "--threads", "1")
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    for engine in ("tevviz", "llama.cpp"):
        e = out[engine]
        assert e["steps"] > 0 and len(e["marginal"]) == len(e["conditional"]) == 3
        assert e["acceptance_length"] == pytest.approx(1 + e["accepted"] / e["steps"])
        assert len(e["prompts"]) == 2
    assert out["verdict"]["text"] and out["speed"]["threads"] == 1
    assert out["speed"]["llama.cpp"]["plain_tokens_per_s"] > 0 and out["speed"]["tevviz"]["plain_tokens_per_s"] > 0
    for kept in ("results.json", "llama-server-draft.log", "llama-server-plain.log", "metrics-draft.txt",
                 "responses.jsonl"):
        assert (tmp_path / "run" / kept).is_file(), kept
    assert "llamacpp:spec_decode_num_drafts_total" in (tmp_path / "run" / "metrics-draft.txt").read_text()


@pytest.mark.realpair
@pytest.mark.skipif(not is_fetched("smollm2"), reason="the smollm2 pair is not fetched (tevviz pair fetch smollm2)")
def test_engine_run_on_smollm2(tmp_path):
    done = _cli("--pair", "smollm2", "--limit", "2", "--max-new-tokens", "16", "--no-speed", "--json",
                "--out", str(tmp_path / "run"), "--threads", "1")
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["llama.cpp"]["steps"] > 0 and out["tevviz"]["steps"] > 0
    assert out["speed"]["llama.cpp"]["plain_tokens_per_s"] is None  # --no-speed
