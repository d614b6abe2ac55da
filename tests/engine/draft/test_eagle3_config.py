"""EAGLE-3 heads' config.json read and written without loading anything (tevviz/engine/draft/eagle3_config.py): which
dialect a config is, where each dialect keeps its fields, the refusals that name the field, which target states each
dialect's ids mean (SGLang's first-id rule for SpecForge), and every dialect written back reading the same states."""

import pytest

from tevviz.engine.draft.eagle3_config import (
    EAGLE,
    IDS_KEY,
    SPECFORGE,
    SPECULATORS,
    VLLM,
    dialect_config,
    dialect_of,
    layer_reading,
    looks_like_head,
    parse_head_config,
    written_ids,
)
from tevviz.engine.errors import TevvizError

LAYERS = 8  # the target's decoder layers: EAGLE's default reads hidden_states [2, 4, 5]
DECODER = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4,
           "num_key_value_heads": 2, "vocab_size": 96, "hidden_act": "silu"}


def vllm(**extra) -> dict:
    return {**DECODER, "architectures": ["Eagle3LlamaForCausalLM"], "draft_vocab_size": 64, **extra}


@pytest.mark.parametrize("raw, head", [
    ({"architectures": ["Eagle3LlamaForCausalLM"]}, True),
    ({"architectures": "EagleForCausalLM"}, True),  # a single name, not a list
    ({"architectures": ["LlamaForCausalLM"], "draft_vocab_size": 64}, True),
    ({"speculators_model_type": "eagle3"}, True),
    ({"architectures": ["LlamaForCausalLM"]}, False),
    ({"architectures": ["DFlashDraftModel"], "draft_vocab_size": 64}, False),  # a block drafter, never a head
    ({"architectures": ["Eagle3LlamaForCausalLM"], "dflash_config": {}}, False),
])
def test_what_looks_like_a_head(raw, head):
    assert looks_like_head(raw) is head


def test_the_dialect_is_the_architecture_or_eagles_own_fields():
    assert dialect_of(vllm(), "h") == VLLM
    assert dialect_of({"architectures": ["LlamaForCausalLMEagle3"]}, "h") == SPECFORGE
    assert dialect_of({"architectures": ["Eagle3Speculator"]}, "h") == SPECULATORS
    assert dialect_of({"architectures": ["LlamaForCausalLM"], "draft_vocab_size": 64}, "h") == EAGLE
    with pytest.raises(TevvizError, match=r"^h: architectures \(none\) is not an EAGLE-3 head"):
        dialect_of({}, "h")
    with pytest.raises(TevvizError, match="is not an EAGLE-3 head"):  # two architectures: which one is meant?
        dialect_of({"architectures": ["Eagle3LlamaForCausalLM", "LlamaForCausalLMEagle3"]}, "h")


def test_the_speculators_dialect_keeps_its_decoder_and_settings_one_level_down():
    raw = {"architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3",
           "transformer_layer_config": DECODER | {"target_hidden_size": 48, "norm_before_residual": True},
           "speculators_config": {"draft_vocab_size": 64, IDS_KEY: [1, 4, 6]}}
    cfg = parse_head_config(raw, "h")
    assert (cfg.dialect, cfg.hidden_size, cfg.vocab_size, cfg.draft_vocab_size) == (SPECULATORS, 32, 96, 64)
    assert (cfg.target_hidden_size, cfg.ids) == (48, (1, 4, 6))
    assert cfg.flag("norm_before_residual") and not cfg.flag("norm_before_fc")
    top = parse_head_config(raw | {"draft_vocab_size": 32, IDS_KEY: [2, 3]}, "h")  # the top level comes first
    assert (top.draft_vocab_size, top.ids) == (32, (2, 3))


def test_the_draft_vocabulary_defaults_to_the_whole_one():
    raw = vllm()
    del raw["draft_vocab_size"]
    cfg = parse_head_config(raw, "h")
    assert cfg.draft_vocab_size == 96 and cfg.ids is None and cfg.target_hidden_size is None


@pytest.mark.parametrize("raw, said", [
    (vllm(hidden_size=True), "config field hidden_size must be a positive integer, got True"),
    (vllm(vocab_size=0), "config field vocab_size must be a positive integer, got 0"),
    ({"architectures": ["Eagle3Speculator"], "transformer_layer_config": DECODER | {"num_attention_heads": None}},
     "config field transformer_layer_config.num_attention_heads must be a positive integer"),
    ({"architectures": ["Eagle3Speculator"], "transformer_layer_config": [DECODER]},
     "transformer_layer_config must be an object"),
    (vllm(num_hidden_layers=2), "num_hidden_layers is 2; an EAGLE-3 head has one decoder layer"),
    (vllm(draft_vocab_size=97), r"draft_vocab_size must be an integer in \[1, vocab_size = 96\], got 97"),
    (vllm(target_hidden_size=0), "target_hidden_size must be a positive integer, got 0"),
    (vllm(fc_norm=1), "fc_norm must be true or false, got 1"),
    (vllm(**{IDS_KEY: []}), f"{IDS_KEY} must be a non-empty list of integers"),
    (vllm(**{IDS_KEY: [2, True]}), f"{IDS_KEY} must be a non-empty list of integers"),
    ({**vllm(), "architectures": ["LlamaForCausalLMEagle3"], "eagle_config": [1]}, "eagle_config must be an object"),
    ({**vllm(), "architectures": ["LlamaForCausalLMEagle3"], "eagle_config": {IDS_KEY: "1,4"}},
     f"eagle_config.{IDS_KEY} must be a non-empty list"),
    (vllm(num_key_value_heads=3), r"config field num_key_value_heads \(3\) must divide num_attention_heads \(4\)"),
])
def test_a_bad_config_is_refused_naming_the_field(raw, said):
    with pytest.raises(TevvizError, match=f"^h: {said}"):
        parse_head_config(raw, "h")


def test_which_states_each_dialect_reads():
    def reading(raw):
        return layer_reading(parse_head_config(raw, "h"), LAYERS)

    ids, why = reading(vllm())
    assert ids == (2, 4, 5) and "EAGLE's default" in why
    assert reading(vllm(**{IDS_KEY: [1, 4, 6]}))[0] == (1, 4, 6)  # vLLM's ids are hidden_states indices
    specforge = {**vllm(), "architectures": ["LlamaForCausalLMEagle3"]}
    ids, why = reading(specforge | {"eagle_config": {IDS_KEY: [1, 3, 4]}})
    assert ids == (2, 4, 5) and "outputs of layers" in why  # a leading 1: outputs of layers 1, 3, 4
    ids, why = reading(specforge | {"eagle_config": {IDS_KEY: [3, 4, 7]}})
    assert ids == (3, 4, 7) and "do not start with 1" in why


def test_ids_are_written_as_each_dialect_reads_them():
    assert written_ids((2, 4, 5), EAGLE, LAYERS) is None  # EAGLE's default goes unsaid
    assert written_ids((2, 4, 5), SPECFORGE, LAYERS) is None
    assert written_ids((2, 4, 5), VLLM, LAYERS) == [2, 4, 5]
    assert written_ids((2, 3, 6), SPECFORGE, LAYERS) == [1, 2, 5]  # a leading 2 is written as outputs of layers
    assert written_ids((0, 4, 8), SPECFORGE, LAYERS) == [0, 4, 8]
    with pytest.raises(TevvizError, match="cannot be written in the SpecForge dialect"):
        written_ids((1, 4, 6), SPECFORGE, LAYERS)


@pytest.mark.parametrize("dialect", [EAGLE, SPECFORGE, VLLM, SPECULATORS])
@pytest.mark.parametrize("ids", [(2, 4, 5), (2, 3, 6), (3, 4, 7)])
def test_a_head_written_in_any_dialect_reads_back_the_same(dialect, ids):
    cfg = parse_head_config(vllm(target_hidden_size=48, norm_before_fc=True), "h")
    raw = dialect_config(cfg, dialect, ids, LAYERS)
    back = parse_head_config(raw, "h")
    assert back.dialect == dialect and layer_reading(back, LAYERS)[0] == ids
    assert (back.draft_vocab_size, back.target_hidden_size, back.flags) == (64, 48, cfg.flags)
    assert {k: v for k, v in back.decoder.items() if k in DECODER} == DECODER


def test_an_unknown_dialect_is_refused():
    cfg = parse_head_config(vllm(), "h")
    with pytest.raises(TevvizError, match="unknown EAGLE-3 dialect 'medusa'"):
        dialect_config(cfg, "medusa", (2, 4, 5), LAYERS)
