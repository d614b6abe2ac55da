"""A round's target pass and output layers (the transposed head product, the split pass) and the confidence-stopped
sampled chain (BuilderConfig.stop_below).

Checked to fail against these faults, planted one at a time: the head product's (V, n) result reshaped to (n, V)
instead of transposed (the equality tests), and a chain that stops before the drafted token instead of after it (the
stop law test: a chain's last token is then one the draft was sure of).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
from conftest import greedy_generate, random_prompts, tiny_model, tiny_pair

from tevviz.engine import BuilderConfig, SamplingConfig, TevvizError
from tevviz.engine.core import few_rows
from tevviz.engine.core.few_rows import head_rows
from tevviz.engine.core.kv import additive_mask, causal_visibility, new_cache
from tevviz.engine.core.sampling import processed_probs
from tevviz.engine.decode.session import DecodeConfig, DecodeSession
from tevviz.engine.decode.target_pass import TargetPass, takes_split
from tevviz.engine.draft.builders import build_tree
from tevviz.engine.records.io import session_meta

STOP = 0.04  # the tiny drafts' top probabilities are 0.03 to 0.1: chains of every depth up to 6 stop at this


@pytest.mark.parametrize("bias", [False, True])
def test_the_head_product_gives_linear_for_every_row_count(bias):
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(500, 24, generator=g)
    b = torch.randn(500, generator=g) if bias else None
    for n in range(1, few_rows.LIMIT + 4):
        h = torch.randn(n, 24, generator=g)
        got, ref = head_rows(h, weight, b), F.linear(h, weight, b)
        assert got.shape == ref.shape and got.is_contiguous()
        assert torch.allclose(got, ref, atol=1e-4, rtol=1e-5), n
        if n > few_rows.LIMIT:
            assert torch.equal(got, ref)  # past the limit it is `linear` itself


def test_the_split_pass_gives_the_models_logits_and_cache():
    pair = tiny_pair("llama")
    target, forward = pair.target, TargetPass(pair.target)
    assert forward.split
    context = torch.tensor([[5, 9, 14, 3, 22, 7]])
    for n in (1, 3, few_rows.LIMIT, few_rows.LIMIT + 2):
        block = torch.arange(30, 30 + n)[None]
        mask = additive_mask(causal_visibility(n, context.shape[1], block.device), target.dtype)
        pos = torch.arange(context.shape[1], context.shape[1] + n)[None]
        outs, caches = [], []
        with torch.inference_mode():
            for split in (False, True):
                cache = new_cache(target)
                target(input_ids=context, cache=cache, use_cache=True)
                outs.append(forward(block, mask, pos, cache, hidden=True) if split else
                            target(input_ids=block, attention_mask=mask, position_ids=pos, cache=cache,
                                   use_cache=True, output_hidden_states=True))
                caches.append(cache)
        assert torch.allclose(outs[0].logits, outs[1].logits, atol=1e-4), n
        # The tiny model's layers are below few_rows.MIN_WEIGHTS: they run `linear`, as the model's own forward does.
        assert all(torch.equal(a, b) for a, b in zip(outs[0].hidden_states, outs[1].hidden_states))
        for a, b in zip(caches[0].layers, caches[1].layers):
            assert torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)
    with torch.inference_mode():
        cache = new_cache(target)
        assert forward(context, None, None, cache, logits=False).logits is None and cache.get_seq_length() == 6


def test_a_model_whose_forward_changes_its_logits_is_not_split():
    """The split pass is the base model and the output layer; a forward that scales the logits after the output
    layer disagrees with it on the check, and keeps its own forward."""
    model = tiny_model("llama", seed=3)
    own = model.forward

    def scaled(*a, **kw):
        out = own(*a, **kw)
        out.logits = out.logits * 0.5
        return out
    model.forward = scaled
    assert not takes_split(model) and not TargetPass(model).split
    assert not takes_split(tiny_model("gpt2", seed=3))  # not a listed family


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_the_stopped_chain_ends_after_the_first_token_the_draft_is_unsure_of(temperature):
    """Each token is drawn from the draft's processed law (at T = 0 its argmax); the chain ends after the first one
    drawn where the draft's top probability is below the stop, or at H."""
    pair = tiny_pair("llama")
    model, sampling = pair.draft, SamplingConfig(temperature=temperature)
    lengths = set()
    for i, context in enumerate(random_prompts(12, seed=4, lo=2, hi=8)):
        cfg = BuilderConfig(name="sampled", depth=6, stop_below=STOP)
        with torch.inference_mode():
            tree = build_tree(model, new_cache(model), context, cfg, sampling=sampling,
                              gen=torch.Generator().manual_seed(i)).tree
            tokens = tree.tokens.tolist()
            sure = []
            for d in range(1, len(tokens)):
                logits = model(input_ids=torch.tensor([context + tokens[1:d]])).logits[0, -1]
                p = torch.softmax(logits.float(), -1)
                if temperature == 0:
                    assert int(p.argmax()) == tokens[d]  # greedy: the draft's own argmax
                assert torch.allclose(tree.draft_probs[d], processed_probs(logits, sampling), atol=1e-5)
                sure.append(float(p.max()) >= STOP)
        lengths.add(len(sure))
        assert all(sure[:-1])  # every token before the last was drawn where the draft was sure
        assert len(sure) == 6 or not sure[-1]  # ... and a chain shorter than its depth ends on an unsure one
    assert len(lengths) > 1  # the threshold stops chains at different depths on these prompts


def test_the_stopped_chain_decodes_as_generate_at_t0_and_its_setting_is_saved():
    pair = tiny_pair("llama", seed=2)
    cfg = DecodeConfig(sampling=SamplingConfig(temperature=0.0), verifier="speculative", max_new_tokens=40,
                       builder=BuilderConfig(name="sampled", depth=8, stop_below=STOP), stop_on_eos=False)
    sizes = set()
    for prompt in random_prompts(4, seed=7):
        s = DecodeSession(pair, prompt, cfg)
        s.run()
        assert s.generated == greedy_generate(pair.target, prompt, 40)
        sizes |= {r.size for r in s.rounds}
    assert len(sizes) > 2  # the chains were stopped at several depths
    assert session_meta(s)["builder"]["stop_below"] == STOP  # the export keeps the setting


def test_a_stop_is_refused_where_it_cannot_apply_or_is_out_of_range():
    for bad in (1.0, -0.1, True, "0.4"):
        with pytest.raises(TevvizError, match=r"probability in \[0, 1\)"):
            BuilderConfig(name="sampled", depth=4, stop_below=bad)
    for kind, auto in (("sampled", True), ("chain", False), ("best-first", False)):
        with pytest.raises(TevvizError, match="sampled chains of a fixed depth"):
            BuilderConfig(name=kind, depth=4, auto=auto, stop_below=0.4)
    assert BuilderConfig(name="best-first", stop_below=0).stop_below == 0  # 0: no stop, any builder


def test_the_app_says_why_each_stopped_chain_ended():
    """The details beside the tree say, for a chain with a stop, whether the shown round reached its longest (H, or
    what the token limit left) or ended after a token drawn where the drafter was unsure: with no node selected, and
    at the chain's last node. They follow the round shown, as the statistics under the tree do not."""
    from tevviz.app.details import node_details, stop_sentence
    from tevviz.app.state import AppState

    pair, prompt = tiny_pair("llama", seed=2), [5, 6, 7]

    def shown(stop: float, depth: int, n: int, view: int) -> str:
        cfg = DecodeConfig(sampling=SamplingConfig(temperature=0.0), verifier="speculative", max_new_tokens=n,
                           builder=BuilderConfig(name="sampled", depth=depth, stop_below=stop), stop_on_eos=False)
        s = DecodeSession(pair, prompt, cfg)
        s.run()
        st = AppState(origin="live", rounds=list(s.rounds), view=view % len(s.rounds), cfg=cfg, prompt_ids=prompt,
                      generated=list(s.generated), meta=session_meta(s))
        said = stop_sentence(st)
        assert node_details(st).endswith(said)  # no node selected: the hint, then why
        last = replace(st, node=len(st.round.tokens) - 1)
        assert node_details(last).endswith(said)
        if said and st.round.size > 1:  # the root of a chain that has nodes below it says nothing of them
            assert said not in node_details(replace(st, node=0))
        return said

    # The tiny drafter's top probabilities are 0.03 to 0.1: a stop of 0.3 ends every chain after its first token.
    assert shown(0.3, 8, 12, 0).endswith("1 of at most 8 tokens drafted; its token 1 was drawn where the drafter's "
                                         "top probability was below the stop.")
    assert shown(0.01, 3, 12, 0).endswith("3 of at most 3 tokens drafted; it reached its longest, H = 3.")
    assert shown(0.01, 8, 5, 0).endswith("4 of at most 4 tokens drafted; it reached the 4 the token limit left.")
    assert shown(0.01, 3, 9, -1).endswith("the token limit left no room to draft.")  # one token left: no chain
    assert shown(0.0, 3, 6, 0) == ""  # no stop, nothing to say
