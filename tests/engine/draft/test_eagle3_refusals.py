"""Bad EAGLE-3 heads are refused with one clear error naming the field, and load nothing: a draft vocabulary map that
breaks its invariants, a t2d that disagrees with it, layer ids beyond the target's layers, a width that is not the
target's without target_hidden_size, missing or foreign weights, an unknown architecture (docs/eagle3.md)."""

from __future__ import annotations

import re

import pytest
import torch
from conftest import VOCAB
from test_eagle3_loading import decoder, draft_targets, head_config, head_tensors, write_head

from tevviz.engine.errors import TevvizError
from tevviz.engine.load import models
from tevviz.engine.load.models import load_pair

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def target8(tmp_path_factory):
    from conftest import tiny_model
    from test_eagle3_loading import LAYERS, write_target

    return str(write_target(tmp_path_factory.mktemp("refusals") / "target", tiny_model("llama", 1, layers=LAYERS)))


def refused(target: str, folder, said: str, config_only: bool = False, monkeypatch=None) -> None:
    """load_pair raises `said`; with `config_only`, before any model is loaded."""
    loaded = []
    if config_only:
        monkeypatch.setattr(models, "load_model", lambda *a, **k: loaded.append(a))
    with pytest.raises(TevvizError, match=re.escape(said)):
        load_pair(target, str(folder), device="cpu")
    assert not loaded, "a model was loaded before the config was refused"


CONFIGS = [
    ("vllm-beyond", head_config("vllm", ids=(2, 4, 9)), ("eagle_aux_hidden_state_layer_ids [2, 4, 9] name [9], "
     "beyond the target's 8 layers")),
    ("specforge-beyond", head_config("specforge", ids=(2, 4, 9)), ("eagle_config.eagle_aux_hidden_state_layer_ids "
     "[1, 3, 8], read as hidden_states [2, 4, 9], name [9], beyond the target's 8 layers")),
    ("width", head_config("vllm", dec=decoder(hidden=48)), ("hidden_size 48 does not match the target's 32, and the "
     "config has no target_hidden_size")),
    ("target-width", head_config("vllm", target_hidden_size=40), ("target_hidden_size 40 does not match the target's "
     "hidden size 32")),
    ("vocab", head_config("vllm", dec=decoder(vocab=VOCAB + 4)), (f"vocab_size {VOCAB + 4} does not match the "
     f"target's head ({VOCAB} rows)")),
    ("draft-vocab", head_config("vllm", vd=VOCAB + 1), "draft_vocab_size must be an integer in [1, vocab_size"),
    ("unknown", head_config("vllm") | {"architectures": ["Eagle3DeepseekV2ForCausalLM"]},
     "architectures ['Eagle3DeepseekV2ForCausalLM'] is not an EAGLE-3 head tevviz can load"),
    ("two-layers", head_config("vllm", dec=decoder() | {"num_hidden_layers": 2}), ("num_hidden_layers is 2; an EAGLE-3 "
     "head has one decoder layer")),
    ("ids", head_config("vllm") | {"eagle_aux_hidden_state_layer_ids": "2,4,5"}, ("eagle_aux_hidden_state_layer_ids "
     "must be a non-empty list of integers")),
    ("flag", head_config("vllm", norm_before_fc="yes"), "norm_before_fc must be true or false"),
    ("speculators", head_config("speculators") | {"transformer_layer_config": None}, ("transformer_layer_config must "
     "be an object")),
]


@pytest.mark.parametrize("name, cfg, said", CONFIGS, ids=[c[0] for c in CONFIGS])
def test_bad_configs_are_refused_naming_the_field_before_anything_loads(target8, tmp_path, monkeypatch, name, cfg,
                                                                         said):
    refused(target8, write_head(tmp_path / name, cfg, head_tensors()), said, config_only=True,
            monkeypatch=monkeypatch)


def broken_tensors(name: str) -> dict:
    w = head_tensors()
    d2t, t2d = w["d2t"], w["t2d"]
    if name == "d2t-order":
        d2t[3], d2t[4] = d2t[4] + 1, d2t[3] - 1  # draft ids 3 and 4 swap their target ids
    elif name == "d2t-range":
        d2t[-1] += 1  # the last draft id maps past the vocabulary
    elif name == "d2t-float":
        w["d2t"] = d2t.float()
    elif name == "t2d-moved":
        ids = draft_targets(64)
        free = next(i for i in range(VOCAB) if not t2d[i])
        t2d[ids[5]], t2d[free] = False, True  # as many marks, one in the wrong place
    elif name == "t2d-count":
        t2d[next(i for i in range(VOCAB) if not t2d[i])] = True
    elif name == "no-d2t":
        del w["d2t"]
    elif name == "no-fc":
        del w["fc.weight"]
    elif name == "extra":
        w["midlayer.self_attn.q_norm.weight"] = torch.ones(8)
    elif name == "shape":
        w["fc.weight"] = torch.zeros(32, 64)
    return w


TENSORS = [
    ("d2t-order", "d2t: arange(draft_vocab_size) + d2t must increase strictly, but draft id 4"),
    ("d2t-range", "d2t maps draft ids to target ids outside [0, 96)"),
    ("d2t-float", "d2t must be a 1-D integer tensor"),
    ("t2d-moved", "t2d disagrees with d2t: target id"),
    ("t2d-count", "t2d marks 65 target tokens but draft_vocab_size is 64; t2d disagrees with d2t"),
    ("no-d2t", "is missing weights: d2t (draft_vocab_size 64 is not the vocabulary's 96"),
    ("no-fc", "is missing weights: fc.weight"),
    ("extra", "has weights an EAGLE-3 head does not: midlayer.self_attn.q_norm.weight"),
    ("shape", "weight fc.weight has shape (32, 64), the config and the target say (32, 96)"),
]


@pytest.mark.parametrize("name, said", TENSORS, ids=[t[0] for t in TENSORS])
def test_bad_tensors_are_refused_naming_them(target8, tmp_path, name, said):
    refused(target8, write_head(tmp_path / name, head_config("vllm"), broken_tensors(name)), said)


def test_norm_variants_need_their_weights_and_a_narrow_head_needs_its_own_embedding(target8, tmp_path):
    refused(target8, write_head(tmp_path / "nbf", head_config("vllm", norm_before_fc=True), head_tensors()),
            "is missing weights: input_norm.weight (norm_before_fc: true)")
    refused(target8, write_head(tmp_path / "fcn", head_config("vllm", fc_norm=True), head_tensors()),
            "is missing weights: fc_norm.0.weight, fc_norm.1.weight, fc_norm.2.weight")
    narrow = head_config("vllm", dec=decoder(hidden=16), target_hidden_size=32)
    refused(target8, write_head(tmp_path / "narrow", narrow, head_tensors(hidden=16)),
            "has no embed_tokens.weight, and its hidden_size 16 differs from the target's 32")
    head = load_pair(target8, str(write_head(tmp_path / "own", narrow, head_tensors(hidden=16, embed=True))),
                     device="cpu").draft  # with its own embedding, a head narrower than its target loads
    assert head.fc.weight.shape == (16, 96) and head.embed_tokens.weight.shape == (VOCAB, 16)


def test_tevviz_decode_names_a_bad_head_in_one_line(target8, tmp_path, capsys):
    from tevviz.cli import main

    folder = write_head(tmp_path / "bad", head_config("vllm", ids=(2, 4, 9)), head_tensors())
    code = main(["decode", "--target", target8, "--draft", str(folder), "--prompt", "t1 t2", "--max-new-tokens", "4",
                 "--device", "cpu"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "name [9], beyond the target's 8 layers" in err and str(folder) in err, err
