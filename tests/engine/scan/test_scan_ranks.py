"""`--shard auto` reads its shard from the launcher's variables: each family (torchrun / accelerate launch, a Slurm
array, srun), their order, a Slurm array's ids that do not start at 0, LOCAL_RANK pinning the GPU; bad values and a
lone half of a pair are refused in words, and the CLI refuses them before it loads or writes anything."""

from __future__ import annotations

import pytest
from _cli import one_line

from tevviz.cli import main
from tevviz.engine.errors import TevvizError
from tevviz.engine.scan.auto_folder import join_folder
from tevviz.engine.scan.ranks import FAMILIES, LaunchRank, launch_rank, pinned_device
from tevviz.engine.scan.scan_files import MANIFEST, read_manifest, write_manifest


def test_torchrun_and_accelerate_launch_set_rank_world_size_and_local_rank():
    assert launch_rank({"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1"}) == LaunchRank(5, 8, "RANK/WORLD_SIZE", 1)


def test_a_slurm_array_counts_its_tasks_from_its_first_id():
    env = {"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_COUNT": "8"}
    assert launch_rank(env) == LaunchRank(3, 8, "SLURM_ARRAY_TASK_ID/SLURM_ARRAY_TASK_COUNT")
    # --array=1-8: ids 1..8 are shards 0..7; --array=0-15:4: ids 0, 4, 8, 12 are shards 0..3.
    assert launch_rank(env | {"SLURM_ARRAY_TASK_MIN": "1"}).index == 2
    step = {"SLURM_ARRAY_TASK_ID": "8", "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_MIN": "0",
            "SLURM_ARRAY_TASK_STEP": "4"}
    assert launch_rank(step).index == 2
    # One task an element (an array job's SLURM_NTASKS is 1 unless asked otherwise) is fine.
    assert launch_rank(env | {"SLURM_NTASKS": "1", "SLURM_PROCID": "0"}).index == 3


def test_srun_sets_procid_and_ntasks_and_nothing_set_is_the_whole_scan():
    assert launch_rank({"SLURM_PROCID": "2", "SLURM_NTASKS": "3"}) == LaunchRank(2, 3, "SLURM_PROCID/SLURM_NTASKS")
    assert launch_rank({}) == LaunchRank(0, 1, "")
    assert launch_rank({"RANK": " ", "PATH": "/bin"}) == LaunchRank(0, 1, "")  # an empty variable is not set


def test_the_families_are_read_in_order():
    """torchrun inside a Slurm allocation, an array task's own SLURM_PROCID: the first family set decides."""
    assert [f[0] for f in FAMILIES] == ["RANK", "SLURM_ARRAY_TASK_ID", "SLURM_PROCID"]
    env = {"RANK": "1", "WORLD_SIZE": "2", "SLURM_ARRAY_TASK_ID": "6", "SLURM_ARRAY_TASK_COUNT": "7",
           "SLURM_PROCID": "0", "SLURM_NTASKS": "1"}
    shard = lambda env: (launch_rank(env).index, launch_rank(env).count)
    assert shard(env) == (1, 2)
    del env["RANK"], env["WORLD_SIZE"]
    assert shard(env) == (6, 7)
    del env["SLURM_ARRAY_TASK_ID"], env["SLURM_ARRAY_TASK_COUNT"]
    assert shard(env) == (0, 1)
    assert shard(env | {"SLURM_PROCID": "3", "SLURM_NTASKS": "4"}) == (3, 4)


@pytest.mark.parametrize("env, words", [
    ({"RANK": "one", "WORLD_SIZE": "2"}, "RANK='one' is not a whole number"),
    ({"RANK": "0", "WORLD_SIZE": "0"}, "WORLD_SIZE=0 must be at least 1"),
    ({"RANK": "-1", "WORLD_SIZE": "2"}, "RANK=-1 must be at least 0"),
    ({"RANK": "2", "WORLD_SIZE": "2"}, "RANK=2 must be below WORLD_SIZE=2"),
    ({"RANK": "0"}, "RANK is set but WORLD_SIZE is not"),
    ({"SLURM_ARRAY_TASK_COUNT": "4"}, "SLURM_ARRAY_TASK_COUNT is set but SLURM_ARRAY_TASK_ID is not"),
    ({"SLURM_NTASKS": "4"}, "SLURM_NTASKS is set but SLURM_PROCID is not"),
    ({"SLURM_PROCID": "1.5", "SLURM_NTASKS": "4"}, "SLURM_PROCID='1.5' is not a whole number"),
    ({"SLURM_ARRAY_TASK_ID": "9", "SLURM_ARRAY_TASK_COUNT": "8", "SLURM_ARRAY_TASK_MIN": "1"},
     "SLURM_ARRAY_TASK_ID=9 is not one of the 8 ids 1, 2, ..."),
    ({"SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_COUNT": "8", "SLURM_ARRAY_TASK_MIN": "1"}, "is not one of"),
    ({"SLURM_ARRAY_TASK_ID": "6", "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_STEP": "4"}, "ids 0, 4, ..."),
    ({"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_NTASKS": "2", "SLURM_PROCID": "1"},
     "runs 2 tasks (SLURM_NTASKS), which would scan the same shard"),
    ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "gpu0"}, "LOCAL_RANK='gpu0' is not a whole number"),
])
def test_bad_variables_are_refused_in_words(env, words):
    with pytest.raises(TevvizError, match="^--shard auto: ") as e:
        launch_rank(env)
    assert words in str(e.value)


def test_local_rank_pins_a_bare_cuda_device_only():
    assert pinned_device("cuda", 1, 2) == "cuda:1"
    assert pinned_device("cuda", None, 2) == "cuda"
    assert pinned_device("cuda:0", 1, 2) == "cuda:0"  # an explicit device is the user's choice
    assert pinned_device("cpu", 3, 0) == "cpu"
    with pytest.raises(TevvizError, match="LOCAL_RANK=2, but this process sees 2 CUDA devices"):
        pinned_device("cuda", 2, 2)


def test_the_cli_refuses_bad_variables_before_it_writes(tmp_path, monkeypatch, capsys):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "import os\\n"}\n')
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "2")
    folder = tmp_path / "scan"
    assert main(["scan", str(prompts), "-o", str(folder), "--shard", "auto", "--device", "cpu"]) == 2
    assert one_line(capsys.readouterr().err) == "tevviz scan: error: --shard auto: RANK=3 must be below WORLD_SIZE=2"
    assert not folder.exists()


def test_a_rank_joins_only_a_folder_of_the_same_auto_scan(tmp_path):
    manifest = {"schema": "tevviz.scan/1", "settings": {"seed": 0}, "models": {}, "prompts": {"sha256": "ab"},
                "shard": "auto"}
    folder = tmp_path / "scan"
    join_folder(folder, manifest)
    join_folder(folder, manifest)  # a second rank, or a later launch
    assert read_manifest(folder) == manifest and [p.name for p in folder.iterdir()] == [MANIFEST]
    with pytest.raises(TevvizError, match="setting seed: 0 against 1"):
        join_folder(folder, manifest | {"settings": {"seed": 1}})
    plain = tmp_path / "plain"
    plain.mkdir()
    write_manifest(plain, manifest | {"shard": None})
    with pytest.raises(TevvizError, match="shard: None against auto"):
        join_folder(plain, manifest)
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(TevvizError, match="holds 'notes.txt' but no manifest.json"):
        join_folder(other, manifest)
    assert [p.name for p in other.iterdir()] == ["notes.txt"]
