"""The law at T = 1 on EAGLE's trees drafted by an EAGLE-3 head (docs/eagle3.md): each verifier's (exit, bonus) on
such a tree follows the exact law w(v) p_v_res(a), and sessions' first two tokens follow p(a) p(b | a); a broken
acceptance (the bonus drawn without removing the exit node's children) is rejected by the same checks."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch
from conftest import word_tokenizer
from test_eagle3_loading import decoder, head_config, head_tensors, write_head
from test_laws import P_MIN, assert_law, bonus_without_removal, draw, exact_law, law_check, law_rejected
from test_streams import exact_two_token_law

from tevviz.engine import DecodeConfig, DecodeSession, SamplingConfig
from tevviz.engine.core.scoring import tree_logits
from tevviz.engine.draft.drafters import tree_for
from tevviz.engine.draft.eagle_tree import eagle_builder
from tevviz.engine.load.models import load_pair
from tevviz.engine.verify.verifiers import VERIFIERS

pytestmark = pytest.mark.usefixtures("one_thread")

V, VD = 8, 6  # an 8-token target (a two-token law of 64 cells) and a head drafting 6 of its tokens
BUILDER = eagle_builder(total_tokens=10, depth=2, top_k=3)
T1 = SamplingConfig(temperature=1.0)
PROMPT = [3, 1, 5]


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    from transformers import LlamaConfig, LlamaForCausalLM

    root = tmp_path_factory.mktemp("eagle3_law")
    torch.manual_seed(4)
    target = LlamaForCausalLM(LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                                          num_attention_heads=4, num_key_value_heads=2, vocab_size=V,
                                          max_position_embeddings=64, tie_word_embeddings=False)).eval()
    with torch.no_grad():
        target.lm_head.weight.mul_(3.0)
    target.save_pretrained(root / "target")
    word_tokenizer(V).save_pretrained(root / "target")
    head = write_head(root / "head", head_config("vllm", ids=(1, 2, 3), vd=VD, dec=decoder(vocab=V)),
                      head_tensors(seed=6, vd=VD, vocab=V))
    return load_pair(str(root / "target"), str(head), device="cpu")


@pytest.mark.parametrize("name", ["tev", "predraw", "residual"])
def test_verifier_law_on_an_eagle_tree(pair, name):
    """(exit, bonus) over 24,000 draws on the head's EAGLE tree against the exact law w(v) p_v_res(a)."""
    tree = tree_for(pair, PROMPT, BUILDER)
    assert tree.size == 10 and int(tree.depths.max()) == 3
    with torch.no_grad():
        logits = tree_logits(pair.target, PROMPT[:-1], tree)
    law = exact_law(tree.tokens.tolist(), tree.parents.tolist(), logits, T1)
    assert_law(draw(VERIFIERS[name], tree, logits, T1, 24_000, seed=1), law, f"{name} on an eagle tree")
    if name == "tev":  # the check has power: a bonus drawn without removing the children is rejected
        assert law_rejected(draw(bonus_without_removal, tree, logits, T1, 24_000, seed=1), law)


def stream_counts(pair, verifier: str, n: int) -> Counter:
    counts = Counter()
    for seed in range(n):
        cfg = DecodeConfig(sampling=T1, verifier=verifier, max_new_tokens=2, seed=seed, stop_on_eos=False,
                           missing_top=0, builder=BUILDER)
        s = DecodeSession(pair, PROMPT, cfg)
        s.run()
        counts[tuple(s.generated)] += 1
    return counts


def test_eagle_decoding_follows_the_target_law(pair, monkeypatch):
    """The first two tokens of 600 sessions at T = 1 on eagle trees follow p(a) p(b | a); the same sessions with
    a bonus drawn without removing the exit node's children are rejected."""
    n = 600  # a broken acceptance measured at p ~ 1e-15 with 500
    law = exact_two_token_law(pair.target, PROMPT, T1)
    # The TV of n exact draws is about 0.5 sqrt(2 / (pi n)) sum_c sqrt(p_c); the bound is twice that.
    noise = 0.5 * math.sqrt(2 / (math.pi * n)) * sum(math.sqrt(p) for p in law.values())
    assert_law(stream_counts(pair, "tev", n), law, "tev: two tokens", tv_max=2 * noise)
    monkeypatch.setitem(VERIFIERS, "tev", bonus_without_removal)
    p_value = law_check(stream_counts(pair, "tev", n), law)[1]
    assert p_value <= P_MIN, f"a broken acceptance passed the chi-square test (p = {p_value:.2e})"
