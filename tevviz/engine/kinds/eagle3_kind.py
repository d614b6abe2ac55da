"""The EAGLE-3 drafter kind (docs/eagle3.md): a head folder in any of the four config dialects, loaded beside its
target (whose tokenizer and, when the head has none, embedding it uses), drafted level by level through its own
cache into EAGLE's dynamic tree or any level-by-level builder, trained by `Eagle3ExitTrainer`; and the doctor's
readings of the target's states."""

from __future__ import annotations

from ..draft.drafters import DrafterKind, Reading, register
from ..draft.eagle3_config import EAGLE, eagle_default
from ..draft.eagle3_drafting import Eagle3Drafter, fresh_tree
from ..draft.eagle3_io import check_folder, is_head_folder, load_head, save_head
from ..draft.eagle3_model import Eagle3Head, set_layer_ids
from ..draft.eagle_tree import DEPTH
from ..train.eagle3_exittrain import Eagle3ExitTrainer

LEVEL_BUILDERS = ("best-first", "static", "chain", "sampled", "mixed")  # through its LevelStep (eagle names it)


def readings(model: Eagle3Head, n_layers: int) -> list[Reading]:
    """The reading in place first ("as given": the checkpoint's own, or an override such as --layer-ids), then its
    ids shifted by -1 and +1, EAGLE's default [2, N // 2, N - 3], and norm_before_fc flipped where the head has
    input_norm; each once, each within the target's layers."""
    now = model.reading
    nbf = (("norm_before_fc", now.norm_before_fc),) if model.input_norm is not None else ()
    ids = now.layer_ids
    default_why = ("EAGLE's own code reads these" if model.head.dialect == EAGLE
                   else "EAGLE's own default, which heads trained by its code read")
    candidates = [
        Reading("as given", ids, nbf, own=True, why=now.why),
        Reading("ids - 1", tuple(i - 1 for i in ids), nbf, why="every id one layer earlier"),
        Reading("ids + 1", tuple(i + 1 for i in ids), nbf, why="every id one layer later"),
        Reading("EAGLE default", eagle_default(n_layers), nbf, why=default_why),
    ]
    if nbf:
        flipped = "off" if now.norm_before_fc else "on"
        said = "input_norm skipped before fc" if now.norm_before_fc else "input_norm applied before fc"
        candidates.append(Reading(f"norm_before_fc {flipped}", ids, (("norm_before_fc", not now.norm_before_fc),),
                                  why=said))
    out, seen = [], set()
    for r in candidates:
        key = (r.layer_ids, r.options)
        if key in seen or not all(0 <= i <= n_layers for i in r.layer_ids) or len(r.layer_ids) != len(ids):
            continue
        seen.add(key)
        out.append(r)
    return out


def apply_reading(model: Eagle3Head, reading: Reading) -> None:
    """Put `reading` in place on the head (sessions made afterwards read it); the checkpoint's own reading comes back
    whole, with its why, when its ids and norms are asked for."""
    own = model.own_reading
    nbf = dict(reading.options).get("norm_before_fc", model.reading.norm_before_fc)
    if tuple(reading.layer_ids) == own.layer_ids and nbf == own.norm_before_fc:
        model.reading = own
        return
    set_layer_ids(model, reading.layer_ids, reading.why or reading.name, nbf)


class Eagle3Kind(DrafterKind):
    name = "eagle3"
    summary = "an EAGLE-3 head: one decoder layer over the target's states, drafted level by level"
    default_builder = "eagle"
    builders = LEVEL_BUILDERS
    trainer = Eagle3ExitTrainer
    recipe = "eagle3"

    def recognises(self, folder) -> bool:
        return is_head_folder(folder)

    def matches(self, model) -> bool:
        return isinstance(model, Eagle3Head)

    def load(self, path: str, target, kw: dict) -> Eagle3Head:
        return load_head(path, target)

    def save(self, model, tokenizer, folder) -> None:
        save_head(model, folder)  # its target brings the tokenizer

    def make(self, pair, seed: int) -> Eagle3Drafter:
        return Eagle3Drafter(pair, seed)

    def fresh_tree(self, pair, context: list[int], builder):
        return fresh_tree(pair, context, builder)

    def folder_depth(self, folder) -> int | None:
        return DEPTH + 1

    def model_depth(self, model) -> int | None:
        return DEPTH + 1

    def check_folder(self, path: str, target_config) -> None:
        check_folder(path, target_config)

    def own_tokenizer(self, folder) -> bool:
        return False

    def readings(self, model, n_layers: int) -> list[Reading]:
        return readings(model, n_layers)

    def apply_reading(self, model, reading: Reading) -> None:
        apply_reading(model, reading)


register(Eagle3Kind())
