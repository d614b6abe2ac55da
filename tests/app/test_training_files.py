"""A browser's ExitTrain copy on disk: read back whole on its own pair, one file a pair (another pair's copy is never
opened, and training one pair keeps the other's), and an older browser-wide copy moved under its pair's name once."""

from __future__ import annotations

import copy
from dataclasses import replace

import torch
from conftest import tiny_pair

from tevviz.app import training_files
from tevviz.app.state import Training
from tevviz.app.training_files import forget_training, load_training, save_training
from tevviz.engine.train.exittrain import TrainConfig


def trained(base):
    draft = copy.deepcopy(base.draft)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(0.01)
    return Training(None, [{"step": 1, "loss": 0.5}], replace(base, draft=draft), config=TrainConfig(steps=3))


def counting_loads(monkeypatch) -> list:
    calls, real = [], torch.load
    monkeypatch.setattr(training_files.torch, "load", lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    return calls


def test_a_copy_comes_back_on_its_pair_with_its_weights_log_and_settings(tmp_path):
    base = tiny_pair()
    kept = trained(base)
    save_training(tmp_path, "u1", kept, base)
    back = load_training(tmp_path, "u1", base)
    assert back is not None and back.trainer is None and back.log == kept.log
    assert back.config.steps == 3
    for a, b in zip(back.pair.draft.state_dict().values(), kept.pair.draft.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    assert back.pair.target is base.target


def test_each_pair_keeps_its_own_copy_and_another_pairs_is_never_opened(tmp_path, monkeypatch):
    base = tiny_pair()
    other = replace(base, draft_name="another-draft")
    save_training(tmp_path, "u2", trained(base), base)
    calls = counting_loads(monkeypatch)
    assert load_training(tmp_path, "u2", other) is None and calls == []  # no file of its pair: nothing read
    save_training(tmp_path, "u2", trained(other), other)  # training on the other pair keeps the first one's copy
    assert load_training(tmp_path, "u2", base) is not None and load_training(tmp_path, "u2", other) is not None
    forget_training(tmp_path, "u2", other)  # Revert on one pair
    assert load_training(tmp_path, "u2", other) is None and load_training(tmp_path, "u2", base) is not None


def test_a_copy_kept_before_copies_were_kept_a_pair_moves_under_its_pairs_name_once(tmp_path, monkeypatch):
    base = tiny_pair()
    save_training(tmp_path, "u3", trained(base), base)
    (kept,) = (tmp_path / "u3").iterdir()
    kept.rename(tmp_path / "u3" / training_files.LEGACY)  # as an older tevviz wrote it
    calls = counting_loads(monkeypatch)
    assert load_training(tmp_path, "u3", replace(base, draft_name="another-draft")) is None
    assert len(calls) == 1 and [p.name for p in (tmp_path / "u3").iterdir()] == [kept.name]
    assert load_training(tmp_path, "u3", base) is not None and len(calls) == 2
