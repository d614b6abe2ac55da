"""The block drafter kind (DFlash layout, docs/math.md *Block drafters*): a folder whose config carries the block
fields, loaded beside its target, drafted one pass a round into DDTree's builder, trained by `BlockExitTrainer`."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ..draft.block_drafting import BlockDrafter
from ..draft.block_model import (
    BlockDraftModel,
    is_block_config,
    load_block_drafter,
    parse_config,
    read_config,
    save_block_drafter,
)
from ..draft.drafters import DrafterKind, Reading, register
from ..errors import TevvizError
from ..train.block_exittrain import BlockExitTrainer, block_tree

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


def readings(model: BlockDraftModel, n_layers: int) -> list[Reading]:
    """The doctor's readings of `dflash_config.target_layer_ids` (decoder layers: hidden_states index = id + 1): as
    given, then every id one lower (the ids taken as hidden_states indices) and one higher, where all stay within the
    target's hidden states 0..n_layers."""
    given = tuple(i + 1 for i in model.block.target_layer_ids)
    why = "dflash_config.target_layer_ids are decoder layers whose outputs are read: hidden_states index = id + 1"
    own = model.__dict__.get("own_block")
    if own is not None and own is not model.block:  # another reading is in place (--layer-ids, the doctor)
        why = model.__dict__.get("reading_why") or why
    out = [Reading("as given", given, own=True, why=why)]
    for name, step, said in (("ids - 1", -1, "the ids read as hidden_states indices (one layer earlier)"),
                             ("ids + 1", 1, "every id one layer later")):
        ids = tuple(i + step for i in given)
        if all(0 <= i <= n_layers for i in ids):
            out.append(Reading(name, ids, why=said))
    return out


def apply_reading(model: BlockDraftModel, reading: Reading) -> None:
    """Make the drafter read `reading.layer_ids` (hidden_states indices): its config's decoder-layer ids become
    those minus one (-1 reads the embedding output); `fc`'s width is unchanged, as the count of ids is. The config
    it loaded with is kept, so that applying its own reading puts back that very config."""
    block = model.block
    if len(reading.layer_ids) != len(block.target_layer_ids):
        raise TevvizError(f"reading {reading.name!r}: {len(block.target_layer_ids)} layer ids are needed (fc's width), "
                          f"got {list(reading.layer_ids)}")
    own = model.__dict__.setdefault("own_block", block)
    ids = tuple(i - 1 for i in reading.layer_ids)
    if ids == own.target_layer_ids:
        model.block = own
        return
    raw = dict(own.raw)
    raw["dflash_config"] = {**(raw.get("dflash_config") or {}), "target_layer_ids": list(ids)}
    model.block = dataclasses.replace(own, target_layer_ids=ids, raw=raw)
    model.__dict__["reading_why"] = reading.why


class BlockKind(DrafterKind):
    name = "block"
    summary = "a block drafter (DFlash layout): one pass drafts a block's per-depth rows"
    default_builder = "ddtree"
    trainer = BlockExitTrainer
    recipe = "block"

    def recognises(self, folder: Path) -> bool:
        return is_block_config(read_config(folder))

    def matches(self, model) -> bool:
        return isinstance(model, BlockDraftModel)

    def load(self, path: str, target, kw: dict) -> BlockDraftModel:
        return load_block_drafter(path, target)

    def save(self, model, tokenizer, folder: Path) -> None:
        save_block_drafter(model, folder)  # its target brings the tokenizer

    def make(self, pair, seed: int) -> BlockDrafter:
        return BlockDrafter(pair, seed)

    def fresh_tree(self, pair, context: list[int], builder):
        return block_tree(pair, context, builder)

    def folder_depth(self, folder: Path) -> int | None:
        return folder_depth(folder)

    def model_depth(self, model) -> int | None:
        return model.block.max_depth

    def check_folder(self, path: str, target_config) -> None:
        check_folder(path, target_config)

    def own_tokenizer(self, folder: Path) -> bool:
        return any((folder / f).exists() for f in TOKENIZER_FILES)

    def readings(self, model, n_layers: int) -> list[Reading]:
        return readings(model, n_layers)

    def apply_reading(self, model, reading: Reading) -> None:
        apply_reading(model, reading)


register(BlockKind())
