"""The block recipe's data: which answers are greedy, and the folder of pieces a rerun reuses."""

from __future__ import annotations

import json

import pytest
import torch

from tevviz.recipes.block_data import DataStore, Sequences, answer_modes, cached


def seqs(n: int, start: int = 0) -> Sequences:
    tokens = [torch.arange(start + i, start + i + 5 + i) for i in range(n)]
    return Sequences(tokens, [torch.randn(t.numel(), 3).to(torch.bfloat16) for t in tokens], [1] * n)


def test_the_first_pass_alternates_greedy_and_sampled_and_later_passes_sample():
    modes = answer_modes(0, 10, 4)
    assert [j for j, _ in modes] == [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]
    assert [s for _, s in modes] == [False, True, False, True] + [True] * 6
    # A piece is the same answers whatever the total: pieces of a longer run extend a shorter one.
    assert answer_modes(4, 7, 4) == modes[4:7]
    assert {s for _, s in answer_modes(0, 2, 100)} == {False, True}


def test_a_piece_is_written_once_and_reused(tmp_path):
    store = DataStore(tmp_path / "data")
    made = []

    def make():
        made.append(1)
        return seqs(3)

    first = cached(store, "train-000000-3", make)
    again = cached(DataStore(tmp_path / "data"), "train-000000-3", make)
    assert len(made) == 1
    assert [t.tolist() for t in again.tokens] == [t.tolist() for t in first.tokens]
    assert all(torch.equal(a, b) for a, b in zip(again.feats, first.feats)) and again.first == first.first
    assert not list((tmp_path / "data").glob("*.part"))
    reader = DataStore(tmp_path / "data")
    reader.get("train-000000-3")
    assert reader.seconds >= 0 and reader.get("missing") is None


def test_pieces_join_in_order():
    a, b = seqs(2), seqs(3, start=50)
    joined = Sequences.join([a, b])
    assert len(joined) == 5 and joined.tokens[2].tolist() == b.tokens[0].tolist()
    assert joined.count() == a.count() + b.count()


def test_a_longer_last_piece_replaces_a_shorter_one(tmp_path):
    store = DataStore(tmp_path)
    store.put("train-000032-8", seqs(1), 1.0)
    store.put("train-000000-32", seqs(1), 1.0)
    store.drop("train-000032-*", keep="train-000032-16")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train-000000-32.pt"]


@pytest.mark.usefixtures("one_thread")
def test_the_stdlib_block_recipe_writes_a_drafter_and_reuses_its_data(tmp_path, capsys):
    """The recipe end to end on the embedded target, tiny: the data folder it writes is read back on a rerun
    (nothing written again) and the drafter folder loads as a block drafter of that target."""
    from tevviz.engine.draft.block_model import is_block_drafter, load_block_drafter
    from tevviz.recipes.block import load_target, main

    args = ["stdlib", "--data", str(tmp_path / "data"), "--seqs", "6", "--eval-seqs", "4", "--files", "4",
            "--context", "16", "--new-tokens", "12", "--steps", "3", "--eval-every", "2", "--batch", "2",
            "--anchors", "2", "--layers", "1", "--threads", "1"]
    assert main(args + ["--out", str(tmp_path / "a")]) == 0
    pieces = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "data").iterdir()}
    assert set(pieces) == {"train.pt", "held.pt"}
    assert main(args + ["--out", str(tmp_path / "b")]) == 0
    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "data").iterdir()} == pieces
    log_a = json.loads((tmp_path / "a" / "training_log.json").read_text())
    log_b = json.loads((tmp_path / "b" / "training_log.json").read_text())
    assert log_a["train_tokens"] == log_b["train_tokens"] == 6 * 12 and log_b["data_seconds"] == log_a["data_seconds"]
    target, _ = load_target("stdlib")
    assert is_block_drafter(tmp_path / "b")
    drafter = load_block_drafter(tmp_path / "b", target)
    assert drafter.block.block_size == 8 and len(drafter.layers) == 1
    assert "data: reusing" not in capsys.readouterr().out  # the old single-file message is gone


@pytest.mark.parametrize("argv", [None, []])
def test_the_pairs_defaults_fill_only_what_the_command_line_leaves_out(monkeypatch, argv):
    """Run as a module (argv None: sys.argv) or called with a list, a flag given wins over the pair's default."""
    from tevviz.recipes.block import RECIPES, parse_args

    line = ["smollm2", "--seqs", "6144", "--data-only"]
    monkeypatch.setattr("sys.argv", ["block.py", *line])
    args = parse_args(None if argv is None else line)
    assert args.seqs == 6144 != RECIPES["smollm2"]["defaults"]["seqs"]
    assert args.eval_seqs == RECIPES["smollm2"]["defaults"]["eval_seqs"]  # what was not given is the pair's
