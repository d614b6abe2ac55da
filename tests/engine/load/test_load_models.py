"""Loading a pair (tevviz/engine/load/models.py): what it refuses, in one line naming the model or the field
(missing paths and files, remote code, not a causal LM, a sliding-window cache, different vocabularies, a revision
for a local folder, a hub id with no network), and the loading options that reach `from_pretrained`."""

from __future__ import annotations

import json

import pytest
from _cli import DECODE, run_json
from _cli import one_line as message
from conftest import tiny_model, word_tokenizer

from tevviz.cli import main
from tevviz.engine import TevvizError
from tevviz.engine.load.models import check_cache, check_vocabularies, load_model, load_pair

# paths and files -----------------------------------------------------------------------------------------------------


def test_missing_model_path():
    with pytest.raises(TevvizError, match="does not exist") as e:
        load_pair("/nonexistent/x", "/nonexistent/y")
    assert "/nonexistent/x" in str(e.value)


def test_only_one_of_target_and_draft():
    with pytest.raises(TevvizError, match="both"):
        load_pair("/nonexistent/x", None)


def test_folder_without_weights(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(TevvizError, match="no weights"):
        load_pair(str(tmp_path), str(tmp_path))


def test_folder_without_config(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(TevvizError, match="config.json"):
        load_pair(str(tmp_path), str(tmp_path))


# models tevviz cannot decode with ------------------------------------------------------------------------------------


def test_remote_code_needs_the_flag(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({
        "model_type": "my_custom_lm", "architectures": ["MyLM"],
        "auto_map": {"AutoConfig": "configuration_my.MyConfig", "AutoModelForCausalLM": "modeling_my.MyLM"}}))
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(TevvizError, match="needs remote code; pass --trust-remote-code"):
        load_model(str(tmp_path), "target")


def test_not_a_causal_lm(tmp_path):
    from transformers import ViTConfig

    ViTConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
              intermediate_size=64).save_pretrained(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(TevvizError, match=r"\(ViTConfig\) is not a causal language model"):
        load_model(str(tmp_path), "target")


def test_sliding_window_cache_is_refused():
    from transformers import AutoModelForCausalLM, MistralConfig

    cfg = MistralConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                        num_key_value_heads=2, sliding_window=8)
    with pytest.raises(TevvizError, match="cannot be gathered along a tree path"):
        check_cache(AutoModelForCausalLM.from_config(cfg).eval(), "target")


# vocabularies --------------------------------------------------------------------------------------------------------


def test_different_vocabularies_are_refused():
    with pytest.raises(TevvizError, match="different vocabularies") as e:
        check_vocabularies(word_tokenizer(96), word_tokenizer(80), "big-target", "small-draft")
    assert "big-target" in str(e.value) and "small-draft" in str(e.value)
    check_vocabularies(word_tokenizer(96), word_tokenizer(96), "a", "b")  # the same vocabulary passes


def _save(model, tok, path):
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


def test_vocabulary_mismatch_through_the_cli(tmp_path, capsys):
    target = _save(tiny_model("llama", 0), word_tokenizer(), tmp_path / "t")
    draft = _save(tiny_model("llama", 1), word_tokenizer(80), tmp_path / "d")
    capsys.readouterr()  # drop the save progress output
    assert main(["decode", "--target", target, "--draft", draft, "--prompt", "t1 t2"]) == 2
    err = capsys.readouterr().err
    assert "different vocabularies" in err and len(err.strip().splitlines()) == 1
    with pytest.raises(TevvizError, match="different vocabularies"):
        load_pair(target, draft)


# revision, device map, attention, the hub ----------------------------------------------------------------------------


def test_a_revision_for_local_folders_is_refused(capsys):
    """from_pretrained ignores a revision for a local folder: tevviz says so rather than load the folder as it is."""
    assert main([*DECODE, "--revision", "no-such-branch"]) == 2
    err = message(capsys.readouterr().err)
    assert "--revision 'no-such-branch' picks a branch, tag or commit of a hub id" in err and "local" in err


def test_device_map_and_attention_reach_the_models(capsys, monkeypatch):
    """--device-map places the target through accelerate (the draft goes to its device), --attn picks both models'
    attention; the greedy output is the same."""
    from transformers import AutoModelForCausalLM

    greedy = run_json(DECODE, capsys)["token_ids"]
    calls = []
    real = AutoModelForCausalLM.from_pretrained.__func__
    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained",
                        classmethod(lambda cls, *a, **k: (calls.append(k), real(cls, *a, **k))[1]))
    assert run_json([*DECODE, "--device-map", "auto", "--attn", "eager"], capsys)["token_ids"] == greedy
    target, draft = calls
    assert (target["device_map"], target["attn_implementation"]) == ("auto", "eager")
    assert (draft["device_map"], draft["attn_implementation"]) == (None, "eager")
    calls.clear()
    assert run_json(DECODE, capsys)["token_ids"] == greedy
    assert [(k["device_map"], k["attn_implementation"]) for k in calls] == [(None, "sdpa")] * 2


@pytest.fixture
def no_network(monkeypatch):
    """No route to the hub: a connection fails at once, and nothing may ask transformers to download."""
    import socket

    import huggingface_hub.constants
    import transformers

    from tevviz.engine.load import models

    def unreachable(*args, **kwargs):
        raise OSError(101, "Network is unreachable")

    def no_download(*args, **kwargs):
        raise AssertionError("transformers was asked to fetch a hub id with no network (it retries for ~50 s)")

    monkeypatch.setattr(socket, "create_connection", unreachable)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    for key in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setattr(models, "_HUB_PROBE", {}, raising=False)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", no_download)
    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained", no_download)


def test_a_hub_id_without_a_network_is_refused_at_once(no_network, monkeypatch, capsys):
    """Without a network a hub id not in the local cache is refused in one line before transformers tries (it
    waited through ~50 s of retries); HF_HUB_OFFLINE says so; a cached one is read from the cache alone."""
    import huggingface_hub
    import huggingface_hub.constants

    from tevviz.engine.load import models

    argv = ["decode", "--target", "no-such-org/no-such-model", "--draft", "no-such-org/no-such-model", "--prompt", "x"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("tevviz decode: error: target model 'no-such-org/no-such-model' is a hub id, but "
                   "https://huggingface.co cannot be reached (Network is unreachable) and it is not in the local "
                   "Hugging Face cache: connect to the network, or give a local folder or .gguf file"), err
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    assert main(argv) == 2
    assert "is a hub id, but HF_HUB_OFFLINE is set and it is not in the local" in capsys.readouterr().err
    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache", lambda *a, **k: "/cache/config.json")
    models.check_source("some-org/cached-model", "target")
    assert models.hf_location("some-org/cached-model")[1] == {"local_files_only": True}
