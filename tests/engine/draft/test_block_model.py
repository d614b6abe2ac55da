"""The block drafter's model (tevviz/engine/draft/block_model.py): DFlash's default layer ids, and a bad config
field or a missing weight refused in one line that names it, before any model loads."""

from __future__ import annotations

import pytest
import torch
from _dflash import dflash_config, dflash_weights, write_drafter
from conftest import VOCAB

from tevviz.engine.draft.block_model import default_layer_ids
from tevviz.engine.errors import TevvizError
from tevviz.engine.load.models import load_pair

pytestmark = pytest.mark.usefixtures("one_thread")


def test_default_layer_ids_follow_dflash():
    assert default_layer_ids(1, 36) == [18]
    assert default_layer_ids(5, 36) == [1, 9, 17, 25, 33]


@pytest.mark.parametrize("cfg, said", [
    (dflash_config(layer_ids=(0, 7)), "target_layer_ids [7] lie beyond the target's 3 layers"),
    (dflash_config(hidden=48), "hidden_size 48 does not match the target's 32"),
    (dflash_config(vocab=VOCAB + 4), f"vocab_size {VOCAB + 4} does not match"),
    (dflash_config(mask=VOCAB + 10), "mask_token_id"),
    (dflash_config(arch="DFlash2DraftModel"), "architecture DFlash2DraftModel is not a block drafter"),
])
def test_bad_block_drafter_configs_are_refused_naming_the_field(saved_pair, tmp_path, cfg, said, monkeypatch):
    target, _ = saved_pair
    draft = write_drafter(tmp_path / "bad", cfg, weights={"fc.weight": torch.zeros(1)})
    loaded = []
    from tevviz.engine.load import models

    monkeypatch.setattr(models, "load_model", lambda *a, **k: loaded.append(a) or pytest.fail("a model was loaded"))
    with pytest.raises(TevvizError, match=said.replace("[", r"\[").replace("]", r"\]")):
        load_pair(target, str(draft))
    assert not loaded


@pytest.mark.parametrize("field, value, said", [
    ("dflash_config", [1, 2], "dflash_config must be an object"),
    ("num_key_value_heads", 0, "num_key_value_heads must be a positive integer, got 0"),
    ("num_key_value_heads", 3, "num_key_value_heads (3) must divide num_attention_heads (4)"),
    ("head_dim", 0, "head_dim must be a positive integer"),
    ("rms_norm_eps", "x", "rms_norm_eps must be a positive number"),
    ("hidden_act", "nope", "hidden_act 'nope' is not an activation"),
    ("attention_bias", "yes", "attention_bias"),
    ("rope_scaling", {"rope_type": "bogus"}, "bogus"),
])
def test_tevviz_decode_names_a_bad_block_drafter_field_in_one_line(saved_pair, tmp_path, capsys, field, value, said):
    """Through `tevviz decode`: a bad field of a DFlash config.json is refused in one line that names it (they came
    out as AttributeError, ZeroDivisionError, transformers' validation errors, or a drafter that loaded and failed at
    its first draft)."""
    from tevviz.cli import main

    target, _ = saved_pair
    cfg = dflash_config() | {field: value}
    draft = write_drafter(tmp_path / "bad", cfg, weights=dflash_weights(dflash_config(), 0))
    code = main(["decode", "--target", target, "--draft", str(draft), "--prompt", "a b", "--max-new-tokens", "4",
                 "--device", "cpu", "--builder", "ddtree"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert said in err and str(draft) in err, err


def test_missing_weights_are_named(saved_pair, tmp_path):
    target, _ = saved_pair
    cfg = dflash_config()
    weights = dflash_weights(cfg, 0)
    del weights["layers.0.self_attn.k_norm.weight"]
    draft = write_drafter(tmp_path / "partial", cfg, weights=weights)
    with pytest.raises(TevvizError, match="missing weights: layers.0.self_attn.k_norm.weight"):
        load_pair(target, str(draft))
