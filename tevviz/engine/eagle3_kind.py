"""The EAGLE-3 drafter kind (docs/eagle3.md): a head folder in any of the four config dialects, loaded beside its
target (whose tokenizer and, when the head has none, embedding it uses), drafted level by level through its own
cache into EAGLE's dynamic tree or any level-by-level builder; and the doctor's readings of the target's states."""

from __future__ import annotations

from .drafters import DrafterKind, Reading, register
from .eagle3_config import EAGLE, eagle_default
from .eagle3_drafting import Eagle3Drafter, fresh_tree
from .eagle3_io import check_folder, is_head_folder, load_head, save_head
from .eagle3_model import Eagle3Head, set_layer_ids
from .eagle_tree import DEPTH

LEVEL_BUILDERS = ("best-first", "static", "chain", "sampled", "mixed")  # through its LevelStep (eagle names it)


def readings(model: Eagle3Head, n_layers: int) -> list[Reading]:
    """The checkpoint's own reading first, then its ids shifted by -1 and +1, EAGLE's default [2, N // 2, N - 3],
    and norm_before_fc flipped where the head has input_norm; each once, each within the target's layers."""
    own = model.own_reading
    nbf = (("norm_before_fc", own.norm_before_fc),) if model.input_norm is not None else ()
    ids = own.layer_ids
    default_why = ("EAGLE's own code reads these" if model.head.dialect == EAGLE
                   else "EAGLE's own default, which heads trained by its code read")
    candidates = [
        Reading("as given", ids, nbf, own=True, why=own.why),
        Reading("ids - 1", tuple(i - 1 for i in ids), nbf, why="one layer earlier than the config says"),
        Reading("ids + 1", tuple(i + 1 for i in ids), nbf, why="one layer later than the config says"),
        Reading("EAGLE default", eagle_default(n_layers), nbf, why=default_why),
    ]
    if nbf:
        flipped = "off" if own.norm_before_fc else "on"
        candidates.append(Reading(f"norm_before_fc {flipped}", ids, (("norm_before_fc", not own.norm_before_fc),),
                                  why="input_norm " + ("skipped" if own.norm_before_fc else "applied") +
                                  " before fc"))
    out, seen = [], set()
    for r in candidates:
        key = (r.layer_ids, r.options)
        if key in seen or not all(0 <= i <= n_layers for i in r.layer_ids) or len(r.layer_ids) != len(ids):
            continue
        seen.add(key)
        out.append(r)
    return out


def apply_reading(model: Eagle3Head, reading: Reading) -> None:
    """Put `reading` in place on the head (sessions made afterwards read it); the own reading undoes it."""
    if reading.own:
        model.reading = model.own_reading
        return
    options = dict(reading.options)
    set_layer_ids(model, reading.layer_ids, f"doctor: {reading.name} ({reading.why})",
                  options.get("norm_before_fc"))


register(DrafterKind(
    "eagle3", "an EAGLE-3 head: one decoder layer over the target's states, drafted level by level",
    recognises=is_head_folder, matches=lambda model: isinstance(model, Eagle3Head),
    load=lambda path, target, kw: load_head(path, target),
    save=lambda model, tokenizer, folder: save_head(model, folder),  # its target brings the tokenizer
    make=Eagle3Drafter, fresh_tree=fresh_tree, default_builder="eagle",
    folder_depth=lambda folder: DEPTH + 1, model_depth=lambda model: DEPTH + 1,
    check_folder=check_folder, own_tokenizer=lambda folder: False, builders=LEVEL_BUILDERS,
    why_not_trained="its trainer (training-time test over the head's own states) is not written yet",
    readings=readings, apply_reading=apply_reading))
