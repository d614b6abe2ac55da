"""Prompt files (scan/prompt_files.py): the one reader's rule line by line, a rank's shard, and the manifest digest."""

from __future__ import annotations

import hashlib
import json

import pytest

from tevviz.engine.errors import TevvizError
from tevviz.engine.scan.prompt_files import (
    DEFAULT_CATEGORY,
    ScanPrompt,
    file_digest,
    read_prompt_rows,
    read_prompts,
    shard,
)


def write(tmp_path, *rows, name="p.jsonl"):
    """A prompt file of these lines: a dict as its JSON, a string as it is."""
    path = tmp_path / name
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return path


def test_each_field_is_read_and_the_defaults_fill_the_rest(tmp_path):
    path = write(tmp_path, {"prompt": "a"}, {"id": 7, "prompt": "b", "category": "code", "chat": True},
                 {"id": "x", "prompt": "c", "category": "", "chat": False})
    prompts, skipped = read_prompts(path)
    assert skipped == []
    assert prompts == [ScanPrompt("line1", "a", DEFAULT_CATEGORY, 0, 1, None),
                       ScanPrompt("7", "b", "code", 1, 2, True),
                       ScanPrompt("x", "c", DEFAULT_CATEGORY, 2, 3, False)]  # an empty category is the default


def test_blank_lines_move_the_line_number_but_not_the_position(tmp_path):
    path = write(tmp_path, "", {"prompt": "a"}, "   ", "", {"prompt": "b"})
    rows, skipped = read_prompt_rows(path)
    assert [(r.line, r.position, r.row["prompt"]) for r in rows] == [(2, 0, "a"), (5, 1, "b")]
    assert skipped == []
    # A default id is the line's number, so that it names the line a person finds in an editor.
    assert [p.id for p in read_prompts(path)[0]] == ["line2", "line5"]


def test_a_skipped_line_keeps_its_position_so_shards_do_not_shift(tmp_path):
    """Positions count the file's non-blank lines, good or bad: leaving a bad line out must not move the prompts after
    it to another rank's shard."""
    path = write(tmp_path, {"prompt": "a"}, "not json", {"prompt": "b"}, {"prompt": 3}, {"prompt": "c"})
    rows, skipped = read_prompt_rows(path, skip_bad=True)
    assert [(r.line, r.position) for r in rows] == [(1, 0), (3, 2), (5, 4)]
    assert skipped == [f"{path}:2: not a JSON object", f"{path}:4: needs a non-empty string field 'prompt'"]


@pytest.mark.parametrize("line, problem", [
    ("[1, 2]", "not a JSON object"),
    ('"text"', "not a JSON object"),
    ("{bad", "not a JSON object"),
    ('{"text": "a"}', "needs a non-empty string field 'prompt'"),
    ('{"prompt": "   "}', "needs a non-empty string field 'prompt'"),
    ('{"prompt": "a", "id": 1.5}', "'id' must be a string or a whole number"),
    ('{"prompt": "a", "id": true}', "'id' must be a string or a whole number"),
    ('{"prompt": "a", "id": null}', "'id' must be a string or a whole number"),
    ('{"prompt": "a", "category": 3}', "'category' must be a string"),
    ('{"prompt": "a", "chat": "yes"}', "'chat' must be true or false"),
    ('{"prompt": "a", "chat": 1}', "'chat' must be true or false"),
    ('{"prompt": "a", "id": "line1"}', "the id 'line1' is used by an earlier line (line 1)"),
])
def test_a_line_that_breaks_the_rule_is_named_with_its_problem(tmp_path, line, problem):
    path = write(tmp_path, {"prompt": "first"}, line)
    with pytest.raises(TevvizError) as e:
        read_prompt_rows(path, hint=" (hint)")
    assert str(e.value) == f"{path}:2: {problem} (hint)"
    rows, skipped = read_prompt_rows(path, skip_bad=True, hint=" (hint)")
    assert len(rows) == 1 and skipped == [f"{path}:2: {problem}"]  # the hint is for the error only


def test_the_scan_reader_adds_its_skip_bad_hint(tmp_path):
    path = write(tmp_path, {"prompt": ""})
    with pytest.raises(TevvizError, match=r"p\.jsonl:1: .*\(--skip-bad leaves such lines out\)$"):
        read_prompts(path)


def test_an_empty_missing_or_unreadable_file_is_an_error(tmp_path):
    with pytest.raises(TevvizError, match="does not exist"):
        read_prompt_rows(tmp_path / "none.jsonl")
    with pytest.raises(TevvizError, match="does not exist"):
        read_prompt_rows(tmp_path)  # a folder is no prompt file
    with pytest.raises(TevvizError, match="has no prompts"):
        read_prompt_rows(write(tmp_path, "", "  "))
    with pytest.raises(TevvizError, match="has no prompts"):
        read_prompt_rows(write(tmp_path, "[]"), skip_bad=True)  # every line left out
    bad = tmp_path / "latin.jsonl"
    bad.write_bytes(b'{"prompt": "caf\xe9"}\n')
    with pytest.raises(TevvizError, match="cannot read the prompt file"):
        read_prompt_rows(bad)


def prompts_at(*positions: int) -> list[ScanPrompt]:
    return [ScanPrompt(f"p{i}", "x", "c", i, i + 1) for i in positions]


def test_a_shard_is_every_countth_prompt_from_its_index():
    prompts = prompts_at(*range(7))
    assert [p.position for p in shard(prompts, 0, 3)] == [0, 3, 6]
    assert [p.position for p in shard(prompts, 1, 3)] == [1, 4]
    assert [p.position for p in shard(prompts, 2, 3)] == [2, 5]
    assert shard(prompts, 0, 1) == prompts


def test_shards_go_by_position_not_by_index_in_the_list():
    """With bad lines left out, list index and file position differ; the shard follows the file."""
    prompts = prompts_at(0, 2, 3, 5)
    assert [p.position for p in shard(prompts, 0, 2)] == [0, 2]
    assert [p.position for p in shard(prompts, 1, 2)] == [3, 5]
    every = sorted((p for i in range(2) for p in shard(prompts, i, 2)), key=lambda p: p.position)
    assert every == prompts  # the shards split the prompts, none lost or doubled


def test_the_digest_is_the_sha256_of_the_files_bytes(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_bytes(b'{"prompt": "a"}\n')
    assert file_digest(path) == hashlib.sha256(b'{"prompt": "a"}\n').hexdigest()
    assert file_digest(str(path)) == file_digest(path)
    # A line ending alone changes what was scanned from the manifest's point of view.
    path.write_bytes(b'{"prompt": "a"}\r\n')
    assert file_digest(path) == hashlib.sha256(b'{"prompt": "a"}\r\n').hexdigest()
