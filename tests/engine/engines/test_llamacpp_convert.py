"""The GGUF export's own logic (engines/llamacpp_convert.py): the content key, the cache, the converter's reason for
failing and its notes. llama.cpp's converter itself is faked: nothing here needs llama.cpp or the network."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest

from tevviz.engine.engines import llamacpp_convert as conv
from tevviz.engine.engines.gguf_runner import FALLBACK_NOTE
from tevviz.engine.errors import TevvizError


def model_folder(root: Path, weights: bytes = b"abc") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text("{}")
    (root / "model.safetensors").write_bytes(weights)
    return root


def by_hand(*files: tuple[str, bytes]) -> str:
    """What the key must be: sha256 over each file's name, a NUL, then its bytes, in the order given."""
    h = hashlib.sha256()
    for name, data in files:
        h.update(name.encode() + b"\0" + data)
    return h.hexdigest()


# --- content_hash -----------------------------------------------------------------------------------------------------


def test_the_hash_is_over_names_and_bytes_in_name_order(tmp_path):
    folder = model_folder(tmp_path / "m")
    (folder / "tokenizer.json").write_bytes(b"tok")
    expected = by_hand(("config.json", b"{}"), ("model.safetensors", b"abc"), ("tokenizer.json", b"tok"))
    assert conv.content_hash(folder) == expected


def test_files_that_are_not_the_models_and_subfolders_do_not_count(tmp_path):
    folder = model_folder(tmp_path / "m")
    first = conv.content_hash(folder)
    (folder / "README.md").write_text("notes")
    (folder / "sub").mkdir()
    (folder / "sub" / "config.json").write_text('{"other": 1}')
    (folder / "weights.safetensors.tmp").write_bytes(b"half a download")
    assert conv.content_hash(folder) == first


def test_every_content_pattern_counts(tmp_path):
    """Templates, sentencepiece models and BPE merges change what the converter writes: each must change the key."""
    folder = model_folder(tmp_path / "m")
    for name in ("pytorch_model.bin", "generation_config.json", "tokenizer_config.json", "chat.jinja",
                 "spm.model", "special_tokens_map.json", "vocab.json", "merges.txt"):
        before = conv.content_hash(folder)
        (folder / name).write_text("x")
        assert conv.content_hash(folder) != before, name


def test_a_renamed_file_changes_the_key(tmp_path):
    folder = model_folder(tmp_path / "m")
    first = conv.content_hash(folder)
    (folder / "model.safetensors").rename(folder / "model-00001.safetensors")
    assert conv.content_hash(folder) != first
    assert conv.content_hash(folder) == by_hand(("config.json", b"{}"), ("model-00001.safetensors", b"abc"))


def test_a_file_longer_than_one_read_is_hashed_whole(tmp_path):
    big = bytes(range(256)) * ((5 << 20) // 256)  # 5 MiB: past the 4 MiB read
    folder = model_folder(tmp_path / "m", weights=big)
    assert conv.content_hash(folder) == by_hand(("config.json", b"{}"), ("model.safetensors", big))
    changed = big[:-1] + b"\x01"  # the last byte, in the second read
    model_folder(folder, weights=changed)
    assert conv.content_hash(folder) == by_hand(("config.json", b"{}"), ("model.safetensors", changed))


def test_a_heads_target_folder_counts_after_the_head(tmp_path):
    head = model_folder(tmp_path / "head", weights=b"head")
    target = model_folder(tmp_path / "target", weights=b"target")
    assert conv.content_hash(head, target) == by_hand(
        ("config.json", b"{}"), ("model.safetensors", b"head"),
        ("config.json", b"{}"), ("model.safetensors", b"target"))
    assert conv.content_hash(head, target) != conv.content_hash(head)


# --- converter_error and the notes ------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, reason", [
    ("loading\nTraceback (most recent call last):\n  File x\nValueError: bad vocab\n", "ValueError: bad vocab"),
    ("KeyError: 'a'\nmore\nNotImplementedError: Architecture 'Foo' not supported!\n  \n",
     "NotImplementedError: Architecture 'Foo' not supported!"),
    ("    raise SystemExit(1)\nexiting\n", "raise SystemExit(1)"),
    # A colon later in a line does not make it an error line: only the part before the first colon is read.
    ("INFO: no Error here\nlast words\n", "last words"),
    ("", "no output"),
    ("\n  \n", "no output"),
])
def test_the_converters_reason_is_its_last_exception_line(tmp_path, text, reason):
    log = tmp_path / "x.log"
    log.write_text(text)
    assert conv.converter_error(log) == reason


def test_the_tokenizer_fallback_is_noted_once_without_its_prefix(tmp_path):
    log = tmp_path / "x.log"
    assert conv._notes(log) == ()  # no log yet
    log.write_text("converting\n")
    assert conv._notes(log) == ()
    log.write_text(f"a\n{FALLBACK_NOTE}\nb\n{FALLBACK_NOTE}\n")
    assert conv._notes(log) == (FALLBACK_NOTE.removeprefix("tevviz: "),)
    assert not conv._notes(log)[0].startswith("tevviz")


def test_a_missing_sentencepiece_is_said_before_the_converter_runs(monkeypatch):
    monkeypatch.setattr(conv.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(TevvizError, match="pip install sentencepiece"):
        conv.check_converter_needs()


# --- export_gguf with the converter faked -----------------------------------------------------------------------------


def test_an_unknown_type_or_a_folder_without_config_is_refused(tmp_path):
    folder = model_folder(tmp_path / "m")
    with pytest.raises(TevvizError, match="GGUF type 'q4'"):
        conv.export_gguf(folder, tmp_path, outtype="q4", cache=tmp_path / "cache")
    (folder / "config.json").unlink()
    with pytest.raises(TevvizError, match="not a model folder"):
        conv.export_gguf(folder, tmp_path, cache=tmp_path / "cache")


@pytest.fixture
def converter(monkeypatch):
    """A fake converter run: records its command, writes the --outfile (or not) and a log line, exits as told."""
    calls = []
    state = {"rc": 0, "write": True, "say": "converted\n"}

    def run(cmd, stdout, stderr, check):
        calls.append(cmd)
        stdout.write(state["say"])
        if state["write"]:
            Path(cmd[cmd.index("--outfile") + 1]).write_bytes(b"GGUF")
        return subprocess.CompletedProcess(cmd, state["rc"])

    monkeypatch.setattr(conv, "check_converter_needs", lambda: None)
    monkeypatch.setattr(conv.subprocess, "run", run)
    return calls, state


def test_an_export_is_keyed_by_content_and_read_back_the_second_time(tmp_path, converter):
    calls, state = converter
    folder = model_folder(tmp_path / "m")
    cache = tmp_path / "cache"
    state["say"] = FALLBACK_NOTE + "\n"
    first = conv.export_gguf(folder, tmp_path / "src", outtype="f16", cache=cache)
    key = conv.content_hash(folder)[:20]
    assert first.path == cache / "gguf" / f"{key}-f16.gguf" and first.path.read_bytes() == b"GGUF"
    assert not first.cached and first.outtype == "f16" and first.folder == folder.resolve()
    assert first.notes == (FALLBACK_NOTE.removeprefix("tevviz: "),)
    assert not (cache / "gguf" / f"{key}-f16.partial").exists()
    (cmd,) = calls
    assert cmd[cmd.index("--outtype") + 1] == "f16" and "--target-model-dir" not in cmd
    again = conv.export_gguf(folder, tmp_path / "src", outtype="f16", cache=cache)
    assert again.cached and again.path == first.path and again.notes == first.notes and len(calls) == 1
    conv.export_gguf(folder, tmp_path / "src", outtype="f32", cache=cache)  # another type is another file
    assert len(calls) == 2


def test_a_head_exports_with_its_target_and_the_target_changes_the_key(tmp_path, converter):
    calls, _ = converter
    head, target = model_folder(tmp_path / "head"), model_folder(tmp_path / "target", weights=b"t")
    got = conv.export_gguf(head, tmp_path, target=target, cache=tmp_path / "cache")
    assert calls[0][calls[0].index("--target-model-dir") + 1] == str(target.resolve())
    assert got.path.name == f"{conv.content_hash(head.resolve(), target.resolve())[:20]}-f32.gguf"
    assert got.path.name != f"{conv.content_hash(head)[:20]}-f32.gguf"


@pytest.mark.parametrize("rc, write", [(1, True), (0, False)])
def test_a_failed_conversion_says_why_and_leaves_no_file(tmp_path, converter, rc, write):
    _, state = converter
    state.update(rc=rc, write=write, say="Traceback\nValueError: no such tensor\n")
    folder = model_folder(tmp_path / "m")
    with pytest.raises(TevvizError, match="could not convert .*ValueError: no such tensor") as e:
        conv.export_gguf(folder, tmp_path, cache=tmp_path / "cache")
    assert str(e.value).endswith(".log)")
    gguf = tmp_path / "cache" / "gguf"
    assert sorted(p.suffix for p in gguf.iterdir()) == [".log"]  # neither a .gguf nor a .partial is left
