"""The shipped stdlib pair: loads offline from assets/, fits the size budget, and decodes exactly."""

from __future__ import annotations

import pytest
import torch

from tevviz.engine import BuilderConfig, DecodeConfig, DecodeSession, SamplingConfig, load_pair
from tevviz.engine.load.models import assets_dir, embedded_pair_paths
from tevviz.engine.load.pairs import named_pair
from tevviz.prompts import load_prompts

MODELS = assets_dir() / "models"
pytestmark = pytest.mark.skipif(not embedded_pair_paths()[0].is_dir(), reason="the embedded pair is not in assets/")


@pytest.fixture(scope="module")
def pair():
    torch.set_num_threads(2)
    yield load_pair()
    torch.set_num_threads(1)


def folder_bytes(folder) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def test_assets_fit_the_budget_and_are_documented():
    stdlib = [MODELS / n for n in ("tevviz-stdlib-target", "tevviz-stdlib-draft", "tevviz-stdlib-draft-exittrain",
                                   "tevviz-stdlib-block-draft")]
    assert sum(folder_bytes(f) for f in stdlib) <= 40 * 1024 * 1024
    assert folder_bytes(MODELS / "tevviz-stdlib-block-draft") <= 8 * 1024 * 1024
    # The SmolLM2 drafters: at most 16 MB of weights each (bfloat16), beside the target's 3.5 MB tokenizer; an EAGLE-3
    # head, whose draft vocabulary's head is most of it, at most 24 MB.
    for name, folder in named_pair("smollm2").drafter_paths().items():
        cap = 24 if "eagle3" in name else 16
        assert sum(p.stat().st_size for p in folder.glob("*.safetensors")) <= cap * 1024 * 1024, name
    assert folder_bytes(MODELS) <= 100 * 1024 * 1024
    assert (MODELS / "MODEL_CARD.md").is_file()
    rows = load_prompts()
    assert 30 <= len(rows) <= 60
    assert {r["split"] for r in rows} == {"train", "eval"}
    assert len({r["id"] for r in rows}) == len(rows)


def test_pair_shares_one_tokenizer_and_target_is_deeper(pair):
    assert pair.tokenizer.get_vocab() == load_pair().tokenizer.get_vocab()
    assert pair.target.config.num_hidden_layers >= 4 * pair.draft.config.num_hidden_layers
    assert pair.target.dtype == torch.float32  # bf16 weights computed in float32


_references: dict[tuple[int, ...], list[int]] = {}


def greedy_reference(pair, ids: tuple[int, ...]) -> list[int]:
    """`generate`'s 48 greedy tokens (once per prompt for both verifiers; `pair` is the module's one pair)."""
    if ids not in _references:
        out = pair.target.generate(torch.tensor([ids]), max_new_tokens=48, do_sample=False, eos_token_id=None,
                                   pad_token_id=pair.tokenizer.eos_token_id)
        _references[ids] = out[0, len(ids):].tolist()
    return _references[ids]


@pytest.mark.parametrize("verifier", ["tev", "predraw"])
def test_greedy_tree_decoding_equals_generate_on_the_shipped_pair(pair, verifier):
    for row in load_prompts(split="eval")[:3]:
        ids = pair.tokenizer(row["prompt"])["input_ids"]
        cfg = DecodeConfig(sampling=SamplingConfig(temperature=0),
                           builder=BuilderConfig(budget=64, depth=8, children=4, width=16), verifier=verifier,
                           max_new_tokens=48, stop_on_eos=False)
        s = DecodeSession(pair, ids, cfg)
        s.run()
        assert s.generated == greedy_reference(pair, tuple(ids))
        assert sum(r.block_length for r in s.rounds) / len(s.rounds) > 1.5  # the draft really gets accepted


def test_the_shipped_exit_trained_drafter_pairs_with_the_target_and_stays_exact(pair):
    from tevviz.engine.load.models import shipped_drafters

    drafters = shipped_drafters()
    assert set(drafters) == {"tevviz-stdlib-draft", "tevviz-stdlib-draft-exittrain", "tevviz-stdlib-block-draft"}
    trained = load_pair(str(embedded_pair_paths()[0]), str(drafters["tevviz-stdlib-draft-exittrain"]))
    assert any(not torch.equal(a, b) for a, b in zip(trained.draft.parameters(), pair.draft.parameters()))
    ids = pair.tokenizer(load_prompts(split="eval")[0]["prompt"])["input_ids"]
    cfg = DecodeConfig(sampling=SamplingConfig(temperature=0), builder=BuilderConfig(budget=32, depth=6),
                       verifier="tev", max_new_tokens=32, stop_on_eos=False)
    s = DecodeSession(trained, ids, cfg)
    s.run()
    ref = pair.target.generate(torch.tensor([ids]), max_new_tokens=32, do_sample=False, eos_token_id=None,
                               pad_token_id=pair.tokenizer.eos_token_id)[0, len(ids):].tolist()
    assert s.generated == ref


def test_the_shipped_block_drafter_pairs_with_the_target_and_stays_exact(pair):
    """The embedded pair's block drafter (DFlash layout) loads beside the target, drafts DDTree trees by default, and
    decodes the target's own greedy output; its trees hold target mass (tau well above 1)."""
    from tevviz.engine.load.models import drafter_defaults, shipped_drafters

    path = str(shipped_drafters()["tevviz-stdlib-block-draft"])
    block = load_pair(str(embedded_pair_paths()[0]), path)
    assert block.draft_kind == "block" and drafter_defaults(path) == ("ddtree", block.draft.block.max_depth)
    ids = pair.tokenizer(load_prompts(split="eval")[0]["prompt"])["input_ids"]
    cfg = DecodeConfig(sampling=SamplingConfig(temperature=0), max_new_tokens=32, stop_on_eos=False,
                       builder=BuilderConfig(name="ddtree", budget=32, depth=block.draft.block.max_depth))
    s = DecodeSession(block, ids, cfg)
    s.run()
    ref = pair.target.generate(torch.tensor([ids]), max_new_tokens=32, do_sample=False, eos_token_id=None,
                               pad_token_id=pair.tokenizer.eos_token_id)[0, len(ids):].tolist()
    assert s.generated == ref
    assert sum(r.block_length for r in s.rounds) / len(s.rounds) > 1.5
