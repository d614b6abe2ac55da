"""A browser's ExitTrain copy on disk beside its runs, so that a server restart keeps it: the trained drafter's
weights, the steps' log and the settings they were made with, for the pair they were made on. The optimiser's
moments are not kept: the first Train step after a restart starts a fresh one from the trained weights."""

from __future__ import annotations

import copy
import os
from dataclasses import asdict
from pathlib import Path

import torch

from ..engine import ModelPair
from ..engine.draft.builders import BuilderConfig
from ..engine.records.io import current_builder
from ..engine.train.exittrain import TrainConfig
from .state import Training

FILE = "exittrain.pt"
# Copies found made on another pair, by (path, mtime, size, target, draft): each status call asks for the copy, and
# reading a whole drafter's weights to find the same mismatch again cost a torch.load each time.
_OTHER_PAIR: set[tuple] = set()
MAX_OTHER = 256


def _path(root: Path, user: str) -> Path:
    return Path(root) / user / FILE


def save_training(root: Path, user: str, training: Training, base: ModelPair) -> None:
    """Write `training` (made on `base`) as this browser's copy, in place of the one before."""
    path = _path(root, user)
    path.parent.mkdir(parents=True, exist_ok=True)
    kept = {"target": base.target_name, "draft": base.draft_name, "log": training.log,
            "config": asdict(training.config), "state": training.pair.draft.state_dict()}
    part = path.with_suffix(".part")
    torch.save(kept, part)
    os.replace(part, path)  # a restart mid-write finds the old copy whole, never half of the new one


def load_training(root: Path, user: str, base: ModelPair) -> Training | None:
    """This browser's copy as it was last written, not in use, with no trainer until the next Train step; None where
    there is none, it was made on another pair, or the file cannot be read."""
    path = _path(root, user)
    try:
        stat = path.stat()
    except OSError:
        return None
    seen = (str(path), stat.st_mtime_ns, stat.st_size, base.target_name, base.draft_name)
    if seen in _OTHER_PAIR:
        return None
    try:
        kept = torch.load(path, map_location=base.draft.device, weights_only=True)
        if (kept["target"], kept["draft"]) != (base.target_name, base.draft_name):
            if len(_OTHER_PAIR) >= MAX_OTHER:
                _OTHER_PAIR.clear()
            _OTHER_PAIR.add(seen)
            return None
        draft = copy.deepcopy(base.draft)
        draft.load_state_dict(kept["state"])
        raw = dict(kept["config"])
        builder = dict(current_builder(raw.pop("builder")))
        builder["branching"] = tuple(builder.get("branching", ()))
        config = TrainConfig(**raw, builder=BuilderConfig(**builder))
    except (OSError, RuntimeError, KeyError, TypeError, ValueError):
        return None  # a file from another version of tevviz, or cut short: the original draft stands
    log = list(kept["log"])
    pair = ModelPair(base.target, draft.eval().requires_grad_(False), base.tokenizer, base.target_name,
                     f"{base.draft_name} + ExitTrain ({len(log)} steps)")
    return Training(None, log, pair, config=config)


def forget_training(root: Path, user: str) -> None:
    """Remove this browser's copy (Revert)."""
    _path(root, user).unlink(missing_ok=True)
