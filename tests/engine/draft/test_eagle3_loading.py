"""EAGLE-3 heads written by the test in each of the four config dialects (docs/eagle3.md): they load as the eagle3
drafter kind beside tiny Llama and Qwen3 targets, read the target states each dialect means, give the same draft law
whichever dialect carries one tensor set, round-trip through save, and every bad input is refused naming the field
before anything loads."""

from __future__ import annotations

import json

import pytest
import torch
from _dflash import qwen3_target
from conftest import VOCAB, tiny_model, word_tokenizer
from safetensors.torch import save_file

from tevviz.engine.draft.drafters import drafter_kind, folder_kind
from tevviz.engine.draft.eagle3_io import save_head
from tevviz.engine.draft.eagle3_model import parse_layer_ids, set_layer_ids
from tevviz.engine.errors import TevvizError
from tevviz.engine.load.models import load_pair

pytestmark = pytest.mark.usefixtures("one_thread")

HIDDEN, LAYERS = 32, 8  # an 8-layer target: EAGLE's default reads hidden_states [2, 4, 5]
DEFAULT_IDS = (2, 4, 5)
VD = 64  # the draft vocabulary: 64 of the target's 96 tokens
DIALECTS = ("eagle", "specforge", "vllm", "speculators")


def decoder(hidden: int = HIDDEN, vocab: int = VOCAB, rope_theta: float | None = 10000.0) -> dict:
    """The head's Llama decoder settings, as the published configs write them."""
    out = {"model_type": "llama", "hidden_size": hidden, "intermediate_size": 64, "num_hidden_layers": 1,
           "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": hidden // 4, "hidden_act": "silu",
           "rms_norm_eps": 1e-6, "max_position_embeddings": 512, "vocab_size": vocab, "tie_word_embeddings": False}
    return out | ({"rope_theta": rope_theta} if rope_theta is not None else {})


def head_config(dialect: str, ids=DEFAULT_IDS, vd: int = VD, dec: dict | None = None, **extra) -> dict:
    """config.json of a head in `dialect`, written by hand from each project's published layout; `ids` are
    hidden_states indices (EAGLE's own dialect names none: its default)."""
    dec = decoder() if dec is None else dec
    if dialect == "eagle":
        assert tuple(ids) == DEFAULT_IDS
        return {**dec, "architectures": ["LlamaForCausalLM"], "draft_vocab_size": vd, **extra}
    if dialect == "specforge":  # SpecForge writes outputs of layers: hidden_states index - 1
        ecfg = {"eagle_aux_hidden_state_layer_ids": [i - 1 for i in ids], "use_aux_hidden_state": True}
        return {**dec, "architectures": ["LlamaForCausalLMEagle3"], "draft_vocab_size": vd, **extra,
                "eagle_config": ecfg}
    if dialect == "vllm":
        return {**dec, "architectures": ["Eagle3LlamaForCausalLM"], "draft_vocab_size": vd, **extra,
                "eagle_aux_hidden_state_layer_ids": list(ids)}
    return {"architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3", "model_type": "speculators",
            "draft_vocab_size": vd, "eagle_aux_hidden_state_layer_ids": list(ids), "norm_before_residual": False,
            **extra, "transformer_layer_config": dec,
            "speculators_config": {"algorithm": "eagle3", "verifier": {"architectures": ["LlamaForCausalLM"]}}}


def draft_targets(vd: int, vocab: int = VOCAB, seed: int = 0) -> torch.Tensor:
    """The target ids of a reduced draft vocabulary: `vd` of them, ascending, always holding EOS."""
    g = torch.Generator().manual_seed(seed)
    rest = torch.randperm(vocab - 1, generator=g)[: vd - 1]
    return torch.cat([rest, torch.tensor([vocab - 1])]).sort().values


def head_tensors(seed: int = 0, hidden: int = HIDDEN, target_hidden: int = HIDDEN, vd: int = VD, vocab: int = VOCAB,
                 n_aux: int = 3, embed: bool = False, fc_norm: bool = False, input_norm: bool = False,
                 prefix: str = "midlayer.") -> dict[str, torch.Tensor]:
    """Random weights under the layout's names; norms away from 1 so that a skipped norm shows."""
    g = torch.Generator().manual_seed(seed)
    rnd = lambda *shape: torch.randn(*shape, generator=g) / shape[-1] ** 0.5
    norm = lambda n: 1 + 0.3 * torch.randn(n, generator=g)
    hd, two = hidden // 4, 2 * hidden
    w = {"fc.weight": rnd(hidden, n_aux * target_hidden), "norm.weight": norm(hidden),
         "lm_head.weight": 4 * rnd(vd, hidden)}
    p = prefix
    w |= {p + "hidden_norm.weight": norm(hidden), p + "input_layernorm.weight": norm(hidden),
          p + "post_attention_layernorm.weight": norm(hidden),
          p + "self_attn.q_proj.weight": rnd(4 * hd, two), p + "self_attn.o_proj.weight": rnd(hidden, 4 * hd),
          p + "self_attn.k_proj.weight": rnd(2 * hd, two), p + "self_attn.v_proj.weight": rnd(2 * hd, two),
          p + "mlp.gate_proj.weight": rnd(64, hidden), p + "mlp.up_proj.weight": rnd(64, hidden),
          p + "mlp.down_proj.weight": rnd(hidden, 64)}
    ids = draft_targets(vd, vocab, seed)
    w["d2t"] = ids - torch.arange(vd)
    w["t2d"] = torch.zeros(vocab, dtype=torch.bool)
    w["t2d"][ids] = True
    if embed:
        w["embed_tokens.weight"] = torch.randn(vocab, hidden, generator=g)
    if fc_norm:
        w |= {f"fc_norm.{i}.weight": norm(target_hidden) for i in range(n_aux)}
    if input_norm:
        w["input_norm.weight"] = norm(n_aux * target_hidden)
    return w


def write_head(folder, config: dict, tensors: dict):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    save_file(tensors, str(folder / "model.safetensors"))
    return folder


def write_target(folder, model):
    model.save_pretrained(folder)
    word_tokenizer().save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def target8(tmp_path_factory):
    return write_target(tmp_path_factory.mktemp("eagle3") / "target", tiny_model("llama", 1, layers=LAYERS))


def root_law(pair, context) -> torch.Tensor:
    """The head's depth-1 law below `context` from a fresh state, over the target's vocabulary."""
    from tevviz.engine.draft.drafters import drafter_kind_of, layer_outputs

    drafter = drafter_kind_of(pair.draft).make(pair, 0)
    with torch.no_grad():
        hs = pair.target(input_ids=torch.tensor([context[:-1]]), output_hidden_states=True).hidden_states
        drafter.prefill(context, layer_outputs(hs, drafter.target_layers)[0])
        from tevviz.engine.core.kv import causal_visibility
        from tevviz.engine.draft.eagle3_drafting import Eagle3Step

        step = Eagle3Step(pair.draft, drafter.cache, drafter.feats)
        n = len(drafter.pending)
        rows = step(torch.tensor(drafter.pending), torch.arange(n), causal_visibility(n, 0, "cpu"), None)
    return torch.softmax(rows[-1].float(), -1)


# --------------------------------------------------------------------------------------------------- dialects


@pytest.mark.parametrize("dialect", DIALECTS)
def test_each_dialect_loads_as_an_eagle3_head_reading_its_layers(target8, tmp_path, dialect):
    tensors = head_tensors(prefix="layers.0." if dialect == "speculators" else "midlayer.")
    folder = write_head(tmp_path / dialect, head_config(dialect), tensors)
    assert folder_kind(folder).name == "eagle3" and not drafter_kind("eagle3").own_tokenizer(folder)
    pair = load_pair(str(target8), str(folder), device="cpu")  # no tokenizer in the folder: the target's
    assert pair.draft_kind == "eagle3"
    assert pair.draft.layer_ids == DEFAULT_IDS and pair.draft.target_layers == (1, 3, 4)
    said = {"eagle": "names no layer ids: EAGLE's default", "specforge": "start with 1, so they are outputs of layers",
            "vllm": "are hidden_states indices", "speculators": "are hidden_states indices"}[dialect]
    assert said in pair.draft.reading.why
    assert pair.draft.embed_tokens is None  # the target's embedding stands in


def test_the_four_dialects_of_one_tensor_set_give_the_same_law(target8, tmp_path):
    laws = []
    for dialect in DIALECTS:
        tensors = head_tensors(seed=3, prefix="layers.0." if dialect == "speculators" else "midlayer.")
        folder = write_head(tmp_path / dialect, head_config(dialect), tensors)
        laws.append(root_law(load_pair(str(target8), str(folder), device="cpu"), [5, 9, 2, 7, 11]))
    for law in laws[1:]:
        assert torch.allclose(law, laws[0], atol=1e-6)
    outside = torch.ones(VOCAB, dtype=torch.bool)
    outside[draft_targets(VD, seed=3)] = False
    assert float(laws[0][outside].sum()) == 0.0 and abs(float(laws[0].sum()) - 1) < 1e-5  # q = 0 off the draft vocab


def test_specforge_ids_not_starting_with_1_are_hidden_states_indices(target8, tmp_path):
    """SGLang's first-id rule: [2, 4, 5] in eagle_config are read as they are, [1, 3, 4] as outputs of layers."""
    cfg = head_config("specforge") | {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 4, 5]}}
    pair = load_pair(str(target8), str(write_head(tmp_path / "h", cfg, head_tensors())), device="cpu")
    assert pair.draft.layer_ids == (2, 4, 5) and "do not start with 1" in pair.draft.reading.why


def test_a_qwen3_target_and_the_head_own_embedding_and_norm_variants(tmp_path):
    target = write_target(tmp_path / "qwen3", qwen3_target(2, layers=4))
    cfg = head_config("vllm", ids=(1, 2, 4), fc_norm=True, norm_before_fc=True, norm_output=True)
    folder = write_head(tmp_path / "h", cfg, head_tensors(embed=True, fc_norm=True, input_norm=True))
    pair = load_pair(str(target), str(folder), device="cpu")
    head = pair.draft
    assert head.embed_tokens is not None and head.reading.norm_before_fc and head.head.flag("fc_norm")
    law = root_law(pair, [3, 8, 1])
    set_layer_ids(head, (1, 2, 4), "test", norm_before_fc=False)  # the doctor's "norm_before_fc off"
    assert not torch.allclose(root_law(pair, [3, 8, 1]), law, atol=1e-4)


def test_rope_comes_from_the_head_own_config(target8, tmp_path):
    """EAGLE's Llama-3.1 head has no rope_theta: the transformers default (10000) applies, not the target's."""
    tensors = head_tensors(seed=4)
    laws = {}
    for name, theta in (("none", None), ("10k", 10000.0), ("other", 500.0)):
        folder = write_head(tmp_path / name, head_config("vllm", dec=decoder(rope_theta=theta)), tensors)
        laws[name] = root_law(load_pair(str(target8), str(folder), device="cpu"), [5, 9, 2, 7, 11, 4])
    assert torch.allclose(laws["none"], laws["10k"], atol=1e-6)
    assert not torch.allclose(laws["other"], laws["10k"], atol=1e-4)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_save_writes_each_dialect_and_loads_back_the_same_head(target8, tmp_path, dialect):
    folder = write_head(tmp_path / "h", head_config("vllm"), head_tensors(seed=5))
    pair = load_pair(str(target8), str(folder), device="cpu")
    save_head(pair.draft, tmp_path / dialect, dialect)
    assert json.loads((tmp_path / dialect / "config.json").read_text())["architectures"][0] == {
        "eagle": "LlamaForCausalLM", "specforge": "LlamaForCausalLMEagle3", "vllm": "Eagle3LlamaForCausalLM",
        "speculators": "Eagle3Speculator"}[dialect]
    again = load_pair(str(target8), str(tmp_path / dialect), device="cpu")
    assert again.draft.layer_ids == pair.draft.layer_ids
    mine, theirs = pair.draft.state_dict(), again.draft.state_dict()
    assert mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in mine)


def test_an_override_of_the_layer_ids_is_kept_with_why(target8, tmp_path):
    from tevviz.engine.draft.drafters import make_drafter, override_reading, reading_of
    from tevviz.engine.draft.eagle_tree import eagle_builder

    pair = load_pair(str(target8), str(write_head(tmp_path / "h", head_config("vllm"), head_tensors())), device="cpu")
    assert reading_of(pair).layer_ids == DEFAULT_IDS and "vLLM dialect" in reading_of(pair).why
    set_layer_ids(pair.draft, parse_layer_ids("3,5,6"))
    assert pair.draft.target_layers == (2, 4, 5) and "--layer-ids" in pair.draft.reading.why
    assert pair.draft.own_reading.layer_ids == DEFAULT_IDS
    now = override_reading(pair, (3, 4, 7))  # the CLI's --layer-ids, through the kind's contract
    assert now.layer_ids == (3, 4, 7) and "--layer-ids 3,4,7" in now.why and reading_of(pair) == now
    assert make_drafter(pair, eagle_builder(), 0).target_layers == (2, 3, 6)  # a session made now reads them
    drafter_kind("eagle3").apply_reading(pair.draft, next(r for r in drafter_kind("eagle3").readings(
        pair.draft, LAYERS) if r.name == "EAGLE default"))
    assert pair.draft.reading == pair.draft.own_reading  # the checkpoint's own ids: its own reading, whole
    with pytest.raises(TevvizError, match=r"layer ids \[9\] lie beyond the target's 8 layers"):
        set_layer_ids(pair.draft, (2, 4, 9))
    with pytest.raises(TevvizError, match="--layer-ids must be comma-separated integers"):
        parse_layer_ids("2,x")


def test_readings_for_the_doctor(target8, tmp_path):
    kind = drafter_kind("eagle3")
    folder = write_head(tmp_path / "h", head_config("vllm", ids=(3, 4, 7), norm_before_fc=True),
                        head_tensors(input_norm=True))
    head = load_pair(str(target8), str(folder), device="cpu").draft
    got = {r.name: r for r in kind.readings(head, LAYERS)}
    assert list(got) == ["as given", "ids - 1", "ids + 1", "EAGLE default", "norm_before_fc off"]
    assert got["as given"].own and got["ids - 1"].layer_ids == (2, 3, 6) and got["ids + 1"].layer_ids == (4, 5, 8)
    assert got["EAGLE default"].layer_ids == DEFAULT_IDS
    assert dict(got["norm_before_fc off"].options) == {"norm_before_fc": False}
    kind.apply_reading(head, got["ids + 1"])
    assert head.layer_ids == (4, 5, 8) and head.reading.norm_before_fc
    kind.apply_reading(head, got["norm_before_fc off"])
    assert head.layer_ids == (3, 4, 7) and not head.reading.norm_before_fc
    kind.apply_reading(head, got["as given"])
    assert head.reading == head.own_reading
    top = load_pair(str(target8), str(write_head(tmp_path / "t", head_config("vllm", ids=(6, 7, 8)),
                                                 head_tensors())), device="cpu").draft
    assert [r.layer_ids for r in kind.readings(top, LAYERS)] == [(6, 7, 8), (5, 6, 7), DEFAULT_IDS]  # +1 is beyond
    same = load_pair(str(target8), str(write_head(tmp_path / "s", head_config("vllm", ids=(3, 5, 6)),
                                                  head_tensors())), device="cpu").draft
    assert [r.name for r in kind.readings(same, LAYERS)] == ["as given", "ids - 1", "ids + 1"]  # default = ids - 1
