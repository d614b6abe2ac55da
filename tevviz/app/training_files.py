"""A browser's ExitTrain copy on disk beside its runs, so that a server restart keeps it: the trained drafter's
weights, the steps' log and the settings they were made with, for the pair they were made on. The optimiser's
moments are not kept: the first Train step after a restart starts a fresh one from the trained weights."""

from __future__ import annotations

import copy
import hashlib
import os
from dataclasses import asdict
from pathlib import Path

import torch

from ..engine import ModelPair
from ..engine.train.exittrain import TrainConfig
from .state import Training

LEGACY = "exittrain.pt"  # one copy a browser, whatever its pair: read once, then kept under its pair's name


def _path(root: Path, user: str, target: str, draft: str) -> Path:
    """The browser's copy for this pair: one file a pair, so a copy made on another pair is never opened and each
    pair keeps its own."""
    pair = hashlib.sha1(f"{target}\0{draft}".encode()).hexdigest()[:12]
    return Path(root) / user / f"exittrain-{pair}.pt"


def _migrate(root: Path, user: str) -> None:
    """A copy written before copies were kept a pair (`exittrain.pt`) moves under its own pair's name, read once."""
    old = Path(root) / user / LEGACY
    if not old.is_file():
        return
    try:
        kept = torch.load(old, map_location="cpu", weights_only=True)
        os.replace(old, _path(root, user, kept["target"], kept["draft"]))
    except (OSError, RuntimeError, KeyError, TypeError, ValueError):
        old.unlink(missing_ok=True)  # unreadable: nothing to keep


def save_training(root: Path, user: str, training: Training, base: ModelPair) -> None:
    """Write `training` (made on `base`) as this browser's copy, in place of the one before."""
    path = _path(root, user, base.target_name, base.draft_name)
    path.parent.mkdir(parents=True, exist_ok=True)
    kept = {"target": base.target_name, "draft": base.draft_name, "log": training.log,
            "config": asdict(training.config), "state": training.pair.draft.state_dict()}
    part = path.with_suffix(".part")
    torch.save(kept, part)
    os.replace(part, path)  # a restart mid-write finds the old copy whole, never half of the new one


def load_training(root: Path, user: str, base: ModelPair) -> Training | None:
    """This browser's copy as it was last written, not in use, with no trainer until the next Train step; None where
    there is none, it was made on another pair, or the file cannot be read."""
    _migrate(root, user)
    path = _path(root, user, base.target_name, base.draft_name)
    if not path.is_file():
        return None
    try:
        kept = torch.load(path, map_location=base.draft.device, weights_only=True)
        if (kept["target"], kept["draft"]) != (base.target_name, base.draft_name):
            return None  # a name's hash shared with another pair's
        draft = copy.deepcopy(base.draft)
        draft.load_state_dict(kept["state"])
        config = TrainConfig.from_dict(kept["config"])
    except (OSError, RuntimeError, KeyError, TypeError, ValueError):
        return None  # a file from another version of tevviz, or cut short: the original draft stands
    log = list(kept["log"])
    pair = ModelPair(base.target, draft.eval().requires_grad_(False), base.tokenizer, base.target_name,
                     f"{base.draft_name} + ExitTrain ({len(log)} steps)")
    return Training(None, log, pair, config=config)


def forget_training(root: Path, user: str, base: ModelPair) -> None:
    """Remove this browser's copy for `base` (Revert); its copies for other pairs stay."""
    _path(root, user, base.target_name, base.draft_name).unlink(missing_ok=True)
