"""Decoding with a block drafter (tevviz/engine/draft/block_drafting.py): greedy output is `generate`'s, the
drafter's kept context is the committed text's recomputed, a failed round changes nothing, and at T = 1 the output
follows the target's law.

Faults each test was checked against once (planted by hand, then removed):
- the drafter keeping every tree node's features instead of the accepted path's: the kept-features test fails
  (greedy output does not: it is the target's whatever the drafter reads, which is why that test exists);
- the target cache keeping the whole tree after a round: greedy output differs from `generate`;
- a bonus token drawn without removing the exit node's children: the law check rejects it.
"""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch
from _dflash import BS, HIDDEN, dflash_config, dflash_weights, greedy_cfg
from conftest import greedy_generate, random_prompts, word_tokenizer
from test_laws import P_MIN, assert_law, bonus_without_removal, law_check
from test_streams import exact_two_token_law

from tevviz.engine import BuilderConfig, DecodeConfig, DecodeSession, SamplingConfig
from tevviz.engine.draft.block_model import BlockDraftModel, parse_config
from tevviz.engine.load.models import ModelPair
from tevviz.engine.verify.verifiers import VERIFIERS

pytestmark = pytest.mark.usefixtures("one_thread")


# exactness -----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("verifier", ["tev", "predraw", "residual"])
def test_greedy_block_decoding_equals_generate(block_pair, verifier):
    """T = 0 with a DDTree of a random block drafter: the target's own greedy output, rounds with nothing
    accepted and rounds with accepted nodes both present."""
    accepted = []
    for prompt in random_prompts(3, seed=70, lo=1, hi=10):
        s = DecodeSession(block_pair, prompt, greedy_cfg(verifier))
        s.run()
        assert s.generated == greedy_generate(block_pair.target, prompt, 40), f"{verifier} on {prompt}"
        accepted += [len(r.accepted) - 1 for r in s.rounds]
    assert 0 in accepted and max(accepted) >= 1, f"test setup: accepted lengths {Counter(accepted)}"


def recomputed_features(target, tokens: list[int], layer_ids) -> torch.Tensor:
    with torch.no_grad():
        hs = target(input_ids=torch.tensor([tokens]), output_hidden_states=True).hidden_states
    return torch.cat([hs[i + 1][0] for i in layer_ids], dim=-1)


def kept_context(drafter, target, tokens: list[int], layer_ids):
    """What the drafter holds of the committed text against the same text recomputed from scratch: its cached keys
    and values beside those of a fresh cache fed the recomputed features, and its pending features beside theirs."""
    from tevviz.engine.draft.block_drafting import block_rows
    from tevviz.engine.draft.block_model import ContextKV

    fresh = recomputed_features(target, tokens[:-1], layer_ids)
    n = drafter.cache.length
    redo = ContextKV(len(drafter.model.layers))
    with torch.no_grad():
        block_rows(drafter.model, target, tokens[-1], len(tokens) - 1, 1, redo, fresh[:n])
    pending = drafter.pending if drafter.pending is not None else fresh[:0]
    return n, pending, fresh, redo


def test_kept_features_equal_features_recomputed_on_the_committed_text(block_pair):
    """After every round the drafter's context (keys and values read so far, features pending) is exactly that of
    the committed positions before the root, recomputed from scratch."""
    s = DecodeSession(block_pair, [5, 9, 11, 2], greedy_cfg("tev", n=30))
    ids = block_pair.draft.block.target_layer_ids
    while not s.done:
        s.step()
        n, pending, fresh, redo = kept_context(s.drafter, block_pair.target, s.tokens, ids)
        assert n + pending.shape[0] == len(s.tokens) - 1  # every committed position before the root, none beyond
        assert torch.allclose(pending, fresh[n:], atol=1e-4)
        for i in range(len(redo.k)):
            assert torch.allclose(s.drafter.cache.k[i], redo.k[i], atol=1e-4)
            assert torch.allclose(s.drafter.cache.v[i], redo.v[i], atol=1e-4)


def test_a_failed_round_changes_nothing_in_the_block_drafter(block_pair, monkeypatch):
    s = DecodeSession(block_pair, [5, 9, 11, 2], greedy_cfg("tev", n=30))
    s.step()
    keys = [k.clone() for k in s.drafter.cache.k]
    before = (s.drafter.cache.length, s.drafter.pending.clone(), s.drafter.root, s.drafter.start, list(s.tokens))

    def broken(*a, **k):
        raise RuntimeError("verifier failed")

    from dataclasses import replace

    monkeypatch.setattr(s.sizing, "fixed", replace(s.sizing.fixed, verify=broken))
    with pytest.raises(RuntimeError):
        s.step()
    after = (s.drafter.cache.length, s.drafter.pending, s.drafter.root, s.drafter.start, list(s.tokens))
    assert before[0] == after[0] and torch.equal(before[1], after[1]) and before[2:] == after[2:]
    assert all(torch.equal(a, b) for a, b in zip(keys, s.drafter.cache.k))


# the law -------------------------------------------------------------------------------------------------------------


def block_stream_counts(pair, prompt, cfg: SamplingConfig, verifier: str, n: int) -> Counter:
    counts = Counter()
    for seed in range(n):
        dc = DecodeConfig(sampling=cfg, verifier=verifier, max_new_tokens=2, seed=seed, stop_on_eos=False,
                          missing_top=0, builder=BuilderConfig(name="ddtree", budget=6, depth=BS - 1))
        s = DecodeSession(pair, prompt, dc)
        s.run()
        counts[tuple(s.generated)] += 1
    return counts


@pytest.fixture(scope="module")
def small_vocab_pair():
    """An 8-token target (a two-token law of 64 cells, well estimated by a thousand sessions) and a block drafter
    whose DDTree of 6 nodes covers much of it, so that a wrong acceptance shows."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(4)
    target = LlamaForCausalLM(LlamaConfig(hidden_size=HIDDEN, intermediate_size=64, num_hidden_layers=3,
                                          num_attention_heads=4, num_key_value_heads=2, vocab_size=8,
                                          max_position_embeddings=64, tie_word_embeddings=False)).eval()
    with torch.no_grad():
        target.lm_head.weight.mul_(3.0)
    cfg = dflash_config(vocab=8, mask=6)
    model = BlockDraftModel(parse_config(cfg, "test", target))
    model.load_state_dict(dflash_weights(cfg, 3), strict=False)
    return ModelPair(target, model.eval(), word_tokenizer(8), "t", "block")


@pytest.mark.parametrize("verifier", ["tev", "predraw", "residual"])
def test_block_decoding_follows_the_target_law(small_vocab_pair, verifier, monkeypatch):
    """The first two tokens of 1,200 sessions at T = 1 with a block drafter follow p(a) p(b | a); for TEV, the
    same sessions with a bonus drawn without removing the exit node's children are rejected."""
    prompt, sampling, n = [3, 1, 5], SamplingConfig(temperature=1.0), 1200
    law = exact_two_token_law(small_vocab_pair.target, prompt, sampling)
    # The TV of n exact draws from the law is about 0.5 sqrt(2 / (pi n)) sum_c sqrt(p_c) (each cell's count off by
    # its binomial spread); the bound is twice that, and the chi-square test does the rest.
    noise = 0.5 * math.sqrt(2 / (math.pi * n)) * sum(math.sqrt(p) for p in law.values())
    counts = block_stream_counts(small_vocab_pair, prompt, sampling, verifier, n)
    assert_law(counts, law, f"{verifier}: two tokens", tv_max=2 * noise)
    if verifier == "tev":
        monkeypatch.setitem(VERIFIERS, "tev", bonus_without_removal)
        p_value = law_check(block_stream_counts(small_vocab_pair, prompt, sampling, "tev", n), law)[1]
        assert p_value <= P_MIN, f"a broken acceptance passed the chi-square test (p = {p_value:.2e})"
