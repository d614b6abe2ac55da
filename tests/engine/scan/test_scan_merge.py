"""`tevviz scan merge` on hand-made shard folders (no models): shards that belong together merge; a shard whose
settings differ in any way (a key one manifest lacks included) or that comes from another split is refused in one
line, and nothing is written.

Checked to fail against a merge that compares settings only on the keys both manifests share, and against one
that does not compare the shards' splits.
"""

from __future__ import annotations

import copy
import json

import pytest
from test_scan_stats import small_scan

from tevviz.cli import main
from tevviz.engine.scan.scan_files import RECORDS, RecordWriter, block_bytes, read_manifest, write_manifest

SETTINGS = {"sampling": {"temperature": 1.0, "top_k": 0, "top_p": 1.0}, "builder": {"kind": "best-first"},
            "verifier": "tev", "max_new_tokens": 12, "seed": 3, "optimal": False, "missing_top": 3,
            "stop_on_eos": True, "chat": None}
MODELS = {role: {"name": role, "fingerprint": f"{role}-fp", "dtype": "float32", "parameters": 10}
          for role in ("target", "draft")}


def write_shard(folder, index: int, count: int, settings: dict | None = None) -> None:
    """Shard `index` of `count` of small_scan's three prompts (positions 0, 1, 2), with a full manifest."""
    folder.mkdir()
    write_manifest(folder, {"schema": "tevviz.scan/1", "settings": settings or SETTINGS, "models": MODELS,
                            "prompts": {"file": "p.jsonl", "sha256": "ab" * 32, "count": 3},
                            "shard": {"index": index, "count": count}, "scanned": 0})
    with RecordWriter(folder) as w:
        for k, (pid, (cat, rounds)) in enumerate(small_scan().items()):
            if k % count == index:
                line = {"id": pid, "position": k, "category": cat, "prompt": "x", "prompt_token_ids": [1],
                        "token_ids": [t for r in rounds for t in r.committed], "seconds": 1.0}
                w.append(block_bytes(line, [r.to_dict() for r in rounds]))


def refused(tmp_path, capsys, folders, *words) -> None:
    out = tmp_path / "merged"
    assert main(["scan", "merge", *map(str, folders), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    for word in words:
        assert word in err, err
    assert not out.exists() and not list(tmp_path.glob(".merged*")), "a refused merge wrote something"


def test_shards_that_belong_together_merge(tmp_path, capsys):
    write_shard(tmp_path / "a", 0, 2)
    write_shard(tmp_path / "b", 1, 2)
    assert main(["scan", "merge", str(tmp_path / "a"), str(tmp_path / "b"), "-o", str(tmp_path / "m"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["summary"]["groups"]["all"]["prompts"] == 3
    lines = [json.loads(x) for x in (tmp_path / "m" / RECORDS).read_text().splitlines()]
    assert [x["id"] for x in lines if x["type"] == "prompt"] == ["p0", "p1", "p2"]
    assert read_manifest(tmp_path / "m")["shard"] is None


@pytest.mark.parametrize("key", sorted(SETTINGS))
@pytest.mark.parametrize("how", ["changed", "missing", "extra"])
def test_any_differing_setting_is_refused_a_missing_key_included(tmp_path, capsys, key, how):
    """Changed in one shard, missing from it (an explicit null included), or a setting only one shard records."""
    odd = copy.deepcopy(SETTINGS)
    if how == "changed":
        odd[key] = ["another value"]
    elif how == "missing":
        del odd[key]
    else:
        odd["only_here_" + key] = SETTINGS[key]
    write_shard(tmp_path / "a", 0, 2)
    write_shard(tmp_path / "b", 1, 2, settings=odd)
    name = key if how != "extra" else "only_here_" + key
    refused(tmp_path, capsys, [tmp_path / "a", tmp_path / "b"], "does not belong", f"setting {name}")


def test_shards_of_different_splits_are_refused(tmp_path, capsys):
    """Shard 0/2 (positions 0, 2) and shard 1/3 (position 1) hold no prompt twice, yet come from two splits."""
    write_shard(tmp_path / "a", 0, 2)
    write_shard(tmp_path / "b", 1, 3)
    refused(tmp_path, capsys, [tmp_path / "a", tmp_path / "b"], "different splits")
