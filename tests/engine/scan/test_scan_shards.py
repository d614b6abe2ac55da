"""`tevviz scan --shard auto` on the embedded stdlib pair: two ranks under a real torchrun on the CPU merge into the
unsharded scan; a rank killed mid-prompt and a relaunch with another number of ranks (a Slurm array's variables)
decode nothing twice, lose nothing, and merge into the same records."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_scan_run import prompts, records  # noqa: F401  (prompts: a fixture)

from tevviz.cli import main
from tevviz.engine.scan.scan_files import RECORDS, complete_end, open_scan, read_manifest, shard_records_name

ARGS = ["--max-new-tokens", "8", "--temperature", "1", "--seed", "3", "--device", "cpu", "--threads", "1"]
ROOT = Path(__file__).resolve().parents[3]
LAUNCHERS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT",
             "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_STEP", "SLURM_PROCID", "SLURM_NTASKS")


@pytest.fixture(autouse=True)
def no_launcher(monkeypatch):
    """The tests' own process is no rank of anything, whatever ran pytest."""
    for name in LAUNCHERS:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def whole(prompts, tmp_path_factory) -> Path:  # noqa: F811
    """The unsharded scan of the six prompts."""
    folder = tmp_path_factory.mktemp("whole") / "scan"
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["scan", str(prompts), "-o", str(folder), *ARGS]) == 0
    return folder


def scan_as(monkeypatch, env: dict, prompts: Path, folder: Path) -> None:  # noqa: F811
    """One rank of a --shard auto launch, in this process, with the launcher's variables `env`."""
    with monkeypatch.context() as m:
        for name, value in env.items():
            m.setenv(name, value)
        assert main(["scan", str(prompts), "-o", str(folder), *ARGS, "--shard", "auto"]) == 0


def positions(path: Path) -> list[int]:
    """The positions of the finished prompts in one records file, in its order."""
    return [json.loads(line)["position"] for line in path.read_bytes()[:complete_end(path)].splitlines()
            if line.startswith(b'{"type":"prompt"')]


def merged(folder: Path, out: Path) -> dict:
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["scan", "merge", str(folder), "-o", str(out)]) == 0
    assert read_manifest(out)["shard"] is None
    return records(out)


def test_two_ranks_under_torchrun_merge_into_the_unsharded_scan(prompts, whole, tmp_path):  # noqa: F811
    folder = tmp_path / "scan"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    for name in LAUNCHERS:
        env.pop(name, None)
    # `torchrun` is this module's entry point; run through this interpreter, it is the torch of the tests.
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    run = subprocess.run([*torchrun, "-m", "tevviz", "scan", str(prompts), "-o", str(folder), *ARGS, "--shard",
                          "auto"], env=env, capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "Traceback" not in run.stderr
    # One file a rank, named by rank and count, each holding the positions rank, rank + 2, ...
    assert sorted(p.name for p in folder.iterdir()) == ["manifest.json", shard_records_name(0, 2),
                                                        shard_records_name(1, 2)]
    assert positions(folder / shard_records_name(0, 2)) == [0, 2, 4]
    assert positions(folder / shard_records_name(1, 2)) == [1, 3, 5]
    assert read_manifest(folder)["shard"] == "auto"
    assert merged(folder, tmp_path / "merged") == records(whole)


def test_a_killed_rank_and_a_relaunch_with_another_count_lose_and_redo_nothing(prompts, whole, tmp_path,  # noqa: F811
                                                                                monkeypatch, capsys):
    folder = tmp_path / "scan"
    for rank in (0, 1):
        scan_as(monkeypatch, {"RANK": str(rank), "WORLD_SIZE": "2"}, prompts, folder)
    # Rank 1 is killed writing its second prompt (position 3): its file ends 10 bytes into that prompt's second
    # line, a torn line after a whole round. What both ranks finished is kept, byte for byte.
    killed = folder / shard_records_name(1, 2)
    text = killed.read_bytes()
    second = text.index(b"\n", text.index(b'{"type":"prompt"')) + 1
    killed.write_bytes(text[:text.index(b"\n", second) + 11])
    finished = {p: p.read_bytes()[:complete_end(p)] for p in folder.iterdir() if p.name.startswith("records")}
    assert [positions(p) for p in sorted(finished)] == [[0, 2, 4], [1]]
    # The relaunch: a Slurm array --array=1-3 (ids 1..3, shards 0..2). Position 3 is shard 0's; 5, shard 2's.
    for task in (1, 2, 3):
        scan_as(monkeypatch, {"SLURM_ARRAY_TASK_ID": str(task), "SLURM_ARRAY_TASK_COUNT": "3",
                              "SLURM_ARRAY_TASK_MIN": "1"}, prompts, folder)
    err = capsys.readouterr().err
    assert "shard 1 of 3 (from SLURM_ARRAY_TASK_ID/SLURM_ARRAY_TASK_COUNT): 2 of the 6 prompts" in err
    assert [positions(folder / shard_records_name(k, 3)) for k in range(3)] == [[3], [], [5]]
    for path, before in finished.items():  # the earlier launch's files, untouched (the torn end included)
        assert path.read_bytes().startswith(before)
    assert merged(folder, tmp_path / "merged") == records(whole)
    # A relaunch on one process (no launcher's variables) finds nothing left to do and changes nothing.
    files = {p.name: p.read_bytes() for p in folder.iterdir() if p.name.startswith("records")}
    scan_as(monkeypatch, {}, prompts, folder)
    assert "scanning 6 prompts into" in (err := capsys.readouterr().err) and "(6 already done)" in err
    assert {p.name: p.read_bytes() for p in folder.iterdir() if p.name.startswith("records")} == \
        files | {shard_records_name(0, 1): b""}
    # The folder reads as one scan before a merge too: every prompt once, the torn line named.
    data = open_scan(folder)
    assert sorted(data.index) == sorted(records(whole)) and data.unfinished > 0
    assert any("torn last line" in p for p in data.problems)
    # A plain scan folder is not continued by rank, nor an auto folder by a plain --resume.
    assert main(["scan", str(prompts), "-o", str(whole), *ARGS, "--shard", "auto"]) == 2
    assert "shard: None against auto" in capsys.readouterr().err
    assert main(["scan", str(prompts), "-o", str(folder), *ARGS, "--resume"]) == 2
    assert "shard: auto against None" in capsys.readouterr().err
    assert not (whole / shard_records_name(0, 1)).exists() and (whole / RECORDS).is_file()
