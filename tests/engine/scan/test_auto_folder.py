"""A --shard auto folder (scan/auto_folder.py): each rank's prompts, its own file cut back, folders it joins."""

from __future__ import annotations

import pytest

from tevviz.engine.errors import TevvizError
from tevviz.engine.scan.auto_folder import join_folder, rank_file, share
from tevviz.engine.scan.prompt_files import ScanPrompt
from tevviz.engine.scan.ranks import LaunchRank
from tevviz.engine.scan.scan_files import MANIFEST, read_manifest
from tevviz.engine.scan.scan_run import PlannedPrompt

MANIFEST_DICT = {"schema": "tevviz.scan/1", "settings": {"seed": 0}, "models": {}, "prompts": {"sha256": "ab"},
                 "shard": "auto"}


def planned(positions: list[int]) -> list[PlannedPrompt]:
    return [PlannedPrompt(ScanPrompt(f"p{k}", "x", "c", k, k + 1), [1], False) for k in positions]


def test_a_rank_takes_every_count_th_position_of_the_prompt_file():
    # Positions 3 and 6 were skipped as bad lines: the split goes by position in the file, not place in the list.
    prompts = planned([0, 1, 2, 4, 5, 7])
    pos = lambda rank: [p.prompt.position for p in share(prompts, rank)]
    assert pos(LaunchRank(0, 2, "RANK/WORLD_SIZE")) == [0, 2, 4]
    assert pos(LaunchRank(1, 2, "RANK/WORLD_SIZE")) == [1, 5, 7]
    assert pos(LaunchRank(2, 3, "RANK/WORLD_SIZE")) == [2, 5]
    assert pos(LaunchRank(0, 1, "")) == [0, 1, 2, 4, 5, 7]
    thirds = [share(prompts, LaunchRank(i, 3, "RANK/WORLD_SIZE")) for i in range(3)]
    assert sorted(p.prompt.position for part in thirds for p in part) == [0, 1, 2, 4, 5, 7]


def test_a_ranks_file_is_named_by_rank_and_count_and_only_it_is_cut_back(tmp_path):
    block = b'{"type":"round","prompt":"p0"}\n{"type":"prompt","id":"p0"}\n'
    torn = b'{"type":"round","prompt":"p2","round":{"di'  # a kill mid-write
    mine, other = tmp_path / "records-00001-of-00004.jsonl", tmp_path / "records-00002-of-00004.jsonl"
    mine.write_bytes(block + torn)
    other.write_bytes(block + torn)
    assert rank_file(tmp_path, LaunchRank(1, 4, "RANK/WORLD_SIZE")) == (mine.name, len(torn))
    assert mine.read_bytes() == block and other.read_bytes() == block + torn
    # A rank's first launch: no file yet, nothing dropped, nothing made.
    assert rank_file(tmp_path, LaunchRank(3, 4, "RANK/WORLD_SIZE")) == ("records-00003-of-00004.jsonl", 0)
    assert not (tmp_path / "records-00003-of-00004.jsonl").exists()


def test_a_new_folder_is_made_with_its_parents(tmp_path):
    folder = tmp_path / "runs" / "scan"
    join_folder(folder, MANIFEST_DICT)
    assert read_manifest(folder) == MANIFEST_DICT


def test_other_ranks_files_without_a_manifest_yet_are_not_strangers(tmp_path):
    # Another rank got there first: its records file exists and its manifest is still a temporary file.
    (tmp_path / "records-00000-of-00002.jsonl").write_bytes(b"")
    (tmp_path / f".{MANIFEST}-x1y2.tmp").write_text("{")
    join_folder(tmp_path, MANIFEST_DICT)
    assert read_manifest(tmp_path) == MANIFEST_DICT


@pytest.mark.parametrize("name", ["records.jsonl", "records-1-of-2.jsonl.bak", f".{MANIFEST}-x.json", "notes"])
def test_a_folder_holding_anything_else_without_a_manifest_is_refused_untouched(tmp_path, name):
    (tmp_path / name).write_text("mine")
    with pytest.raises(TevvizError, match=f"holds '{name}' but no {MANIFEST}: not a scan folder"):
        join_folder(tmp_path, MANIFEST_DICT)
    assert [p.name for p in tmp_path.iterdir()] == [name]


def test_a_file_is_not_a_folder(tmp_path):
    path = tmp_path / "scan"
    path.write_text("x")
    with pytest.raises(TevvizError, match=r"^-o '.*scan' is a file$"):
        join_folder(path, MANIFEST_DICT)
    assert path.read_text() == "x"
