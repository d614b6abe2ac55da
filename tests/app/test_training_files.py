"""A browser's ExitTrain copy on disk: read back whole on its own pair, refused on another, and a copy of another pair
is read once per version of the file, not at every status call."""

from __future__ import annotations

import copy
import os
from dataclasses import replace

import torch
from conftest import tiny_pair

from tevviz.app import training_files
from tevviz.app.state import Training
from tevviz.app.training_files import load_training, save_training
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


def test_a_copy_of_another_pair_is_refused_and_read_once_per_version(tmp_path, monkeypatch):
    base = tiny_pair()
    save_training(tmp_path, "u2", trained(base), base)
    other = replace(base, draft_name="another-draft")
    calls = counting_loads(monkeypatch)
    assert load_training(tmp_path, "u2", other) is None
    assert load_training(tmp_path, "u2", other) is None
    assert len(calls) == 1  # the mismatch was remembered
    assert load_training(tmp_path, "u2", base) is not None  # its own pair still reads it
    assert len(calls) == 2
    path = tmp_path / "u2" / training_files.FILE
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # a new version of the file is read again
    assert load_training(tmp_path, "u2", other) is None
    assert len(calls) == 3
