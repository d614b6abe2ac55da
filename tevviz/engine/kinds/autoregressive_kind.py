"""The autoregressive drafter kind: an ordinary causal LM (a Hugging Face folder, hub id or GGUF file), drafted level
by level through its own KV cache (draft/autoregressive_drafting.py), trained by `ExitTrainer`, warmed up by
distillation."""

from __future__ import annotations

from pathlib import Path

import torch

from ..draft.autoregressive_drafting import AutoregressiveDrafter
from ..draft.drafters import DrafterKind, register
from ..load.models import check_cache, load_model
from ..train.exittrain import ExitTrainer, build_training_tree


class AutoregressiveKind(DrafterKind):
    name = "autoregressive"
    summary = "a causal LM drafted level by level"
    default_builder = "best-first"
    trainer = ExitTrainer
    distills = True
    recipe = "drafter"
    causal_lm = True

    def recognises(self, folder: Path) -> bool:
        return True  # the fallback: any folder no other kind claims

    def matches(self, model: torch.nn.Module) -> bool:
        return True

    def load(self, path: str, target, kw: dict) -> torch.nn.Module:
        """A causal LM draft beside `target` (its device, dtype and attention come in `kw`)."""
        model = load_model(path, "draft", **kw)
        check_cache(model, "draft")
        return model

    def save(self, model, tokenizer, folder: Path) -> None:
        """A Hugging Face folder with the pair's tokenizer."""
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)

    def make(self, pair, seed: int) -> AutoregressiveDrafter:
        return AutoregressiveDrafter(pair, seed)

    def fresh_tree(self, pair, context: list[int], builder):
        return build_training_tree(pair.draft, context, builder)


register(AutoregressiveKind())
