"""Every field a block drafter's config.json can carry is checked (tevviz/engine/draft/block_fields.py): a bad value
or a key DFlash never writes is refused in words naming it, before any weight is read; a config as transformers
writes a Qwen3 decoder, plus DFlash's fields, loads."""

from __future__ import annotations

import pytest
from _dflash import dflash_config, qwen3_target

from tevviz.engine.draft.block_model import parse_config
from tevviz.engine.errors import TevvizError

BAD = [
    ("architectures", "DFlashDraftModel", "architectures must be a list"),
    ("architectures", 3, "architectures must be a list"),
    ("num_target_layers", "36", "num_target_layers must be a positive integer"),
    ("num_target_layers", 0, "num_target_layers must be a positive integer"),
    ("model_type", 7, "model_type must be a string"),
    ("attention_bias", "no", "attention_bias must be true or false"),
    ("tie_word_embeddings", 1, "tie_word_embeddings must be true or false"),
    ("use_sliding_window", True, "use_sliding_window is true"),
    ("sliding_window", -1, "sliding_window must be a positive integer or null"),
    ("max_window_layers", -2, "max_window_layers must be a whole number"),
    ("layer_types", ["sliding_attention"], "layer_types names sliding_attention"),
    ("layer_types", "full_attention", "layer_types must be a list"),
    ("attention_dropout", 1.5, "attention_dropout must be a number in [0, 1)"),
    ("attention_dropout", float("nan"), "attention_dropout must be a number in [0, 1)"),
    ("initializer_range", -0.02, "initializer_range must be a positive number"),
    ("torch_dtype", [], "torch_dtype must name a floating dtype"),
    ("dtype", "int8", "dtype must name a floating dtype"),
    ("rope_scaling", [], "rope_scaling must be an object or null"),
]


@pytest.fixture(scope="module")
def target():
    return qwen3_target(1)


@pytest.mark.parametrize("field, value, said", BAD)
def test_a_bad_top_level_field_is_refused_naming_it(target, field, value, said):
    with pytest.raises(TevvizError, match=f"^draft: .*{said.replace('[', '.').replace(')', '.')}") as e:
        parse_config(dflash_config() | {field: value}, "draft", target)
    assert field in str(e.value)


@pytest.mark.parametrize("dflash, said", [
    ({"mask_token_id": 94, "target_layer_ids": [0, 2], "draft_mode": "x"}, "fields tevviz does not know (draft_mode)"),
    ({"mask_token_id": 94, "target_layer_ids": [0, 2], "block_size": 8}, "block_size 6 and dflash_config.block_size 8"),
])
def test_dflash_config_holds_only_the_keys_dflash_writes(target, dflash, said):
    with pytest.raises(TevvizError, match=said.replace("(", r"\(").replace(")", r"\)")):
        parse_config(dflash_config() | {"dflash_config": dflash}, "draft", target)


def test_a_config_as_transformers_writes_it_loads(target):
    """Qwen3Config's own fields (sliding_window null, full-attention layer_types, dropout 0, dtype...) all pass."""
    from transformers import Qwen3Config

    cfg = dflash_config()
    written = Qwen3Config(**{k: v for k, v in cfg.items() if k not in ("architectures", "dflash_config")}).to_dict()
    cfg = written | {"architectures": cfg["architectures"], "dflash_config": cfg["dflash_config"],
                     "dtype": "bfloat16", "transformers_version": "4.57.0"}
    assert "layer_types" in cfg and cfg.get("use_sliding_window") is False  # the fields under test are there
    assert parse_config(cfg, "draft", target).target_layer_ids == (0, 2)
    same_size = cfg | {"dflash_config": cfg["dflash_config"] | {"block_size": cfg["block_size"]}}
    assert parse_config(same_size, "draft", target).block_size == cfg["block_size"]


@pytest.mark.parametrize("extra, said", [
    ({"num_hiden_layers": 2}, "'num_hiden_layers' is not one tevviz knows; did you mean 'num_hidden_layers'?"),
    ({"rope_thetta": 1e6}, "did you mean 'rope_theta'?"),
    ({"block_sizes": 8}, "did you mean 'block_size'?"),
    ({"target_layer_ids": [1, 2]}, "target_layer_ids [1, 2] sits at the top level"),
])
def test_a_misspelt_or_misplaced_field_is_refused_not_ignored(target, extra, said):
    with pytest.raises(TevvizError, match=said.replace("[", r"\[").replace("]", r"\]").replace("?", r"\?")):
        parse_config(dflash_config() | extra, "draft", target)


def test_fields_other_transformers_releases_write_are_left_alone(target):
    older = {"torch_dtype": "bfloat16", "auto_map": {"AutoModel": "dflash.DFlashDraftModel"}, "use_bfloat16": False,
             "tie_encoder_decoder": False, "return_dict_in_generate": False, "max_length": 20, "pretraining_tp": 1}
    assert parse_config(dflash_config() | older, "draft", target).block_size == dflash_config()["block_size"]
    same = dflash_config()
    assert parse_config(same | {"target_layer_ids": same["dflash_config"]["target_layer_ids"]}, "draft", target)
