"""The block drafter kind (DFlash layout, docs/math.md *Block drafters*): a folder whose config carries the block
fields, loaded beside its target, drafted one pass a round into DDTree's builder, trained by `BlockExitTrainer`."""

from __future__ import annotations

from pathlib import Path

from .block_drafting import BlockDrafter
from .block_exittrain import BlockExitTrainer, block_tree
from .block_model import (
    BlockDraftModel,
    is_block_config,
    load_block_drafter,
    parse_config,
    read_config,
    save_block_drafter,
)
from .drafters import DrafterKind, register

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def folder_depth(folder: Path) -> int | None:
    """bs - 1: the deepest node a block drafts (None when the config does not say)."""
    raw = read_config(folder)
    dcfg = raw.get("dflash_config")
    bs = raw.get("block_size", dcfg.get("block_size") if isinstance(dcfg, dict) else None)
    return bs - 1 if isinstance(bs, int) and bs >= 2 else None


def check_folder(path: str, target_config) -> None:
    """The block fields checked against the target's config: a bad field loads nothing."""
    parse_config(read_config(Path(path).expanduser()), f"block drafter {path!r}", target_config())


register(DrafterKind(
    "block", "a block drafter (DFlash layout): one pass drafts a block's per-depth rows",
    recognises=lambda folder: is_block_config(read_config(folder)),
    matches=lambda model: isinstance(model, BlockDraftModel),
    load=lambda path, target, kw: load_block_drafter(path, target),
    save=lambda model, tokenizer, folder: save_block_drafter(model, folder),  # its target brings the tokenizer
    make=BlockDrafter, fresh_tree=block_tree, default_builder="ddtree", folder_depth=folder_depth,
    model_depth=lambda model: model.block.max_depth, check_folder=check_folder,
    own_tokenizer=lambda folder: any((folder / f).exists() for f in TOKENIZER_FILES),
    trainer=BlockExitTrainer, recipe="block"))
