"""The bad-input matrix through the Python API and the CLI: a clear message, and nothing changed."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import tiny_model, tiny_pair, word_tokenizer

from tevviz.cli import main
from tevviz.engine import BuilderConfig, DecodeConfig, DecodeSession, SamplingConfig, TevvizError
from tevviz.engine.load.models import ModelPair, check_cache, load_model, load_pair


def _save(model, tok, path):
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


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


def test_vocabulary_mismatch_through_the_cli(tmp_path, capsys):
    target = _save(tiny_model("llama", 0), word_tokenizer(), tmp_path / "t")
    draft = _save(tiny_model("llama", 1), word_tokenizer(80), tmp_path / "d")
    capsys.readouterr()  # drop the save progress output
    assert main(["decode", "--target", target, "--draft", draft, "--prompt", "t1 t2"]) == 2
    err = capsys.readouterr().err
    assert "different vocabularies" in err and len(err.strip().splitlines()) == 1
    with pytest.raises(TevvizError, match="different vocabularies"):
        load_pair(target, draft)


@pytest.mark.parametrize("make, message", [
    (lambda: BuilderConfig(budget=0), "budget must be"),
    (lambda: BuilderConfig(budget=5000), "budget must be"),
    (lambda: BuilderConfig(depth=0), "depth must be"),
    (lambda: BuilderConfig(depth=65), "depth must be"),
    (lambda: BuilderConfig(kind="static", branching=(0,)), "static branching"),
    (lambda: BuilderConfig(kind="bushy"), "unknown builder"),
    (lambda: SamplingConfig(temperature=float("nan")), "temperature"),
    (lambda: SamplingConfig(temperature=-0.1), "temperature"),
    (lambda: SamplingConfig(top_p=0.0), "top-p"),
    (lambda: SamplingConfig(top_k=-2), "top-k"),
    (lambda: DecodeConfig(verifier="magic"), "unknown verifier"),
    (lambda: DecodeConfig(max_new_tokens=0), "max new tokens"),
])
def test_settings_out_of_range(make, message):
    with pytest.raises(TevvizError, match=message):
        make()


def test_long_prompt_trims_the_tree_and_says_so():
    pair = tiny_pair("gpt2")  # 512 positions
    n_pos = pair.context_length
    prompt = [i % 90 for i in range(n_pos - 3)]
    cfg = DecodeConfig(sampling=SamplingConfig(temperature=0), builder=BuilderConfig(depth=6), max_new_tokens=50,
                       stop_on_eos=False)
    s = DecodeSession(pair, prompt, cfg)
    s.run()
    assert "trimmed" in s.notice and len(s.tokens) <= n_pos
    ref = pair.target.generate(torch.tensor([prompt]), max_new_tokens=len(s.generated), do_sample=False,
                               eos_token_id=None, pad_token_id=0)[0, len(prompt):].tolist()
    assert s.generated == ref
    with pytest.raises(TevvizError, match="at most 512 positions"):
        DecodeSession(pair, list(range(80)) * 7, cfg)


def test_out_of_vocabulary_prompt_ids():
    pair = ModelPair(tiny_model("llama", 0), tiny_model("llama", 1), word_tokenizer(), "t", "d")
    with pytest.raises(TevvizError, match="prompt token ids must lie in"):
        DecodeSession(pair, [1, 2, 10_000], DecodeConfig())
