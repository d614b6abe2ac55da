"""The fields of a block drafter's config.json that its decoder sizes do not cover, each refused in words: the
`dflash_config` object (only the keys DFlash writes), the architecture list, the target's layer count, and the Qwen3
decoder fields the drafter either honours or cannot honour (sliding windows, dropout, dtypes)."""

from __future__ import annotations

import difflib
import math

from ..errors import TevvizError

DFLASH_KEYS = ("mask_token_id", "target_layer_ids", "block_size")
# The decoder fields a block drafter reads or checks (a Qwen3 config's), and DFlash's own at the top level
READ = ("architectures", "model_type", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
        "num_key_value_heads", "head_dim", "hidden_act", "rms_norm_eps", "rope_theta", "rope_scaling",
        "rope_parameters", "max_position_embeddings", "vocab_size", "attention_bias", "attention_dropout",
        "tie_word_embeddings", "use_sliding_window", "sliding_window", "max_window_layers", "layer_types",
        "initializer_range", "torch_dtype", "dtype", "num_target_layers", "bos_token_id", "eos_token_id",
        "pad_token_id", "use_cache")
DTYPES = ("float32", "float16", "bfloat16", "float64", "auto")


def check_block_fields(raw: dict, where: str) -> None:
    """Refuse a field whose value a block drafter cannot use, naming it (the sizes are checked by the caller)."""
    arch = raw.get("architectures")
    if arch is not None and not isinstance(arch, list):
        raise TevvizError(f"{where}: config field architectures must be a list of names, got {arch!r}")
    dcfg = raw.get("dflash_config")
    if isinstance(dcfg, dict):
        unknown = sorted(set(dcfg) - set(DFLASH_KEYS))
        if unknown:
            raise TevvizError(f"{where}: dflash_config has fields tevviz does not know ({', '.join(map(str, unknown))}"
                              f"); it reads {', '.join(DFLASH_KEYS)}")
        if "block_size" in dcfg and "block_size" in raw and dcfg["block_size"] != raw["block_size"]:
            raise TevvizError(f"{where}: block_size {raw['block_size']!r} and dflash_config.block_size "
                              f"{dcfg['block_size']!r} disagree")
    _check_names(raw, where)
    if raw.get("num_target_layers") is not None and not _positive_int(raw["num_target_layers"]):
        raise TevvizError(f"{where}: config field num_target_layers must be a positive integer, got "
                          f"{raw['num_target_layers']!r}")
    for key in ("model_type", "hidden_act"):
        if key in raw and not isinstance(raw[key], str):
            raise TevvizError(f"{where}: config field {key} must be a string, got {raw[key]!r}")
    for key in ("attention_bias", "tie_word_embeddings", "use_sliding_window"):
        if raw.get(key) is not None and not isinstance(raw[key], bool):
            raise TevvizError(f"{where}: config field {key} must be true or false, got {raw[key]!r}")
    _check_windows(raw, where)
    dropout = raw.get("attention_dropout")
    if dropout is not None and not (_number(dropout) and 0 <= dropout < 1):
        raise TevvizError(f"{where}: config field attention_dropout must be a number in [0, 1), got {dropout!r}")
    init = raw.get("initializer_range")
    if init is not None and not (_number(init) and init > 0):
        raise TevvizError(f"{where}: config field initializer_range must be a positive number, got {init!r}")
    for key in ("torch_dtype", "dtype"):
        if raw.get(key) is not None and raw[key] not in DTYPES:
            raise TevvizError(f"{where}: config field {key} must name a floating dtype ({', '.join(DTYPES)}), got "
                              f"{raw[key]!r}")
    for key in ("rope_scaling", "rope_parameters"):
        if raw.get(key) is not None and not isinstance(raw[key], dict):
            raise TevvizError(f"{where}: config field {key} must be an object or null, got {raw[key]!r}")


def _check_names(raw: dict, where: str) -> None:
    """A field a drafter would silently go without: DFlash's ids outside dflash_config (the default ids would be
    read instead), or a name one slip away from a field tevviz reads (`num_hiden_layers`). Other names are left
    alone: configs written by other transformers releases carry fields of their own."""
    dcfg = raw.get("dflash_config") if isinstance(raw.get("dflash_config"), dict) else {}
    if "target_layer_ids" in raw and dcfg.get("target_layer_ids") != raw["target_layer_ids"]:
        raise TevvizError(f"{where}: target_layer_ids {raw['target_layer_ids']!r} sits at the top level, where DFlash "
                          "does not read it; it belongs in dflash_config.target_layer_ids")
    known = set(READ) | set(DFLASH_KEYS) | {"dflash_config"}
    for name in sorted(set(raw) - known):
        near = difflib.get_close_matches(str(name), sorted(known), n=1, cutoff=0.85)
        if near:
            raise TevvizError(f"{where}: config field {name!r} is not one tevviz knows; did you mean {near[0]!r}?")


def _check_windows(raw: dict, where: str) -> None:
    """The drafter attends to the whole context: a config that asks for sliding-window layers is refused, not run
    with a law it was not trained for."""
    window = raw.get("sliding_window")
    if window is not None and not _positive_int(window):
        raise TevvizError(f"{where}: config field sliding_window must be a positive integer or null, got {window!r}")
    for key in ("max_window_layers",):
        if raw.get(key) is not None and not (_positive_int(raw[key]) or raw[key] == 0):
            raise TevvizError(f"{where}: config field {key} must be a whole number, got {raw[key]!r}")
    if raw.get("use_sliding_window") is True:
        raise TevvizError(f"{where}: config field use_sliding_window is true; tevviz's block drafter attends to the "
                          "whole context (sliding-window drafters are not supported)")
    types = raw.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or any(t not in ("full_attention", "sliding_attention") for t in types):
            raise TevvizError(f"{where}: config field layer_types must be a list of 'full_attention', got {types!r}")
        if "sliding_attention" in types:
            raise TevvizError(f"{where}: config field layer_types names sliding_attention layers; tevviz's block "
                              "drafter attends to the whole context (sliding-window drafters are not supported)")


def _positive_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 1


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
