"""Output files (tevviz/files.py and the commands that write them): paths checked before the work, and writes
that leave the old file or none."""

from __future__ import annotations

import json

import pytest
from _cli import PROMPT, ROOT, one_line

from tevviz.cli import main
from tevviz.engine.errors import TevvizError
from tevviz.files import atomic_write, atomic_write_json, check_writable

# paths checked before the work ---------------------------------------------------------------------------------------


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


def test_check_writable_refuses_with_the_flag(tmp_path):
    with pytest.raises(TevvizError, match=r"^--out '.*' is a folder"):
        check_writable(tmp_path, "--out")


# writes that leave the old file or none ------------------------------------------------------------------------------


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
