"""A decoding session's own checks (tevviz/engine/decode/session.py): the prompts it refuses, the context limit it
decodes up to exactly, a round that fails and changes nothing, and a finished session that refuses to step."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from conftest import greedy_generate, random_prompts, tiny_model, tiny_pair, word_tokenizer

from tevviz.engine import (
    BuilderConfig,
    DecodeConfig,
    DecodeSession,
    SamplingConfig,
    TevvizError,
    autoregressive,
    encode_prompt,
)
from tevviz.engine.load.models import ModelPair

pytestmark = pytest.mark.usefixtures("one_thread")

GREEDY = SamplingConfig(temperature=0.0)


@pytest.fixture(scope="module")
def pair():
    return tiny_pair("llama", seed=0)


def greedy_cfg(**kw) -> DecodeConfig:
    return DecodeConfig(sampling=GREEDY, stop_on_eos=False, missing_top=0, **kw)


# prompts and the context limit ---------------------------------------------------------------------------------------


def test_empty_prompt(pair):
    with pytest.raises(TevvizError, match="empty"):
        DecodeSession(pair, [], greedy_cfg())
    for text in ("", "   \n"):
        with pytest.raises(TevvizError, match="empty"):
            encode_prompt(pair.tokenizer, text)


def test_prompt_token_outside_vocabulary(pair):
    for bad in ([3, 96], [-1, 4]):
        with pytest.raises(TevvizError, match=r"\[0, 96\)"):
            DecodeSession(pair, bad, greedy_cfg())


def test_out_of_vocabulary_prompt_ids():
    pair = ModelPair(tiny_model("llama", 0), tiny_model("llama", 1), word_tokenizer(), "t", "d")
    with pytest.raises(TevvizError, match="prompt token ids must lie in"):
        DecodeSession(pair, [1, 2, 10_000], DecodeConfig())


def test_prompt_longer_than_context(pair):
    ctx = pair.context_length
    assert ctx == 512
    for n in (ctx, ctx + 40):
        with pytest.raises(TevvizError, match=f"{n} tokens.*{ctx} positions"):
            DecodeSession(pair, [1] * n, greedy_cfg())
    DecodeSession(pair, [1] * (ctx - 1), greedy_cfg())  # the longest prompt that leaves room for one token


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


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_session_at_the_context_limit_matches_the_baseline(family):
    """Near the context limit the session commits the same tokens as plain decoding: never a token more."""
    pair = tiny_pair(family, seed=0)
    ctx = pair.context_length
    for back in (2, 3, 5):
        prompt = random_prompts(1, seed=900 + back, lo=ctx - back, hi=ctx - back)[0]
        base = autoregressive(pair, prompt, greedy_cfg(max_new_tokens=64)).token_ids
        assert base == greedy_generate(pair.target, prompt, len(base))
        for verifier in ("tev", "predraw"):
            s = DecodeSession(pair, prompt, greedy_cfg(max_new_tokens=64, verifier=verifier))
            s.run()
            assert s.done and s.notice, "the session says that it trimmed the tree"
            assert len(s.tokens) <= ctx, f"{verifier}: {len(s.tokens)} tokens in a {ctx}-position context"
            assert s.generated == base, f"{verifier}, prompt of {len(prompt)}: {s.generated} vs baseline {base}"


# failures mid-session ------------------------------------------------------------------------------------------------


def snapshot(s: DecodeSession) -> dict:
    return {
        "target": s.target_cache.get_seq_length(), "draft": s.drafter.cache.get_seq_length(),
        "pending": list(s.drafter.pending), "generated": list(s.generated), "rounds": len(s.rounds), "done": s.done,
        "keys": s.target_cache.layers[0].keys.clone(),
    }


def assert_unchanged(s: DecodeSession, before: dict) -> None:
    after = snapshot(s)
    for key in ("target", "draft", "pending", "generated", "rounds", "done"):
        assert after[key] == before[key], f"{key} changed by a failed round: {before[key]} -> {after[key]}"
    assert torch.equal(after["keys"], before["keys"])


def nan_once(model):
    """A forward hook that turns the model's logits into NaN."""

    def hook(module, args, output):
        output.logits.fill_(math.nan)
        return output

    return model.register_forward_hook(hook)


@pytest.mark.parametrize("verifier", ["tev", "predraw", "residual"])
def test_nan_logits_mid_session(pair, verifier):
    prompt = random_prompts(1, seed=950)[0]
    s = DecodeSession(pair, prompt, greedy_cfg(verifier=verifier))
    s.run(rounds=2)
    before = snapshot(s)
    handle = nan_once(pair.target)
    try:
        with pytest.raises(TevvizError, match=r"round 2\b.*NaN") as e:
            s.step()
    finally:
        handle.remove()
    assert "float32" in str(e.value), "the message suggests a fix"
    assert_unchanged(s, before)
    s.run()
    assert s.generated == greedy_generate(pair.target, prompt, 64)


def test_failed_round_leaves_the_random_stream_alone(pair):
    """At T = 1, a session with one failed round continues exactly as the same session without it."""
    prompt = random_prompts(1, seed=951)[0]
    cfg = DecodeConfig(sampling=SamplingConfig(temperature=1.0), max_new_tokens=40, seed=17, stop_on_eos=False,
                       missing_top=0)
    ref = DecodeSession(pair, prompt, cfg)
    ref.run()
    s = DecodeSession(pair, prompt, cfg)
    s.run(rounds=3)
    handle = nan_once(pair.target)
    try:
        with pytest.raises(TevvizError, match="round 3"):
            s.step()
    finally:
        handle.remove()
    s.run()
    assert s.generated == ref.generated


def test_draft_failure_mid_session(pair):
    """A non-Tevviz error (here from the draft) propagates unchanged and leaves the session as it was."""
    prompt = random_prompts(1, seed=952)[0]
    s = DecodeSession(pair, prompt, greedy_cfg())
    s.run(rounds=2)
    before = snapshot(s)
    step = s.drafter.step  # the drafter's level step (its written-out forward, or the model's own)

    class Boom:
        device, calls = step.device, 0

        def length(self):
            return step.length()

        def __call__(self, *args):
            self.calls += 1
            if self.calls == 3:  # fail in the middle of drafting, after the cache has grown
                raise RuntimeError("draft exploded")
            return step(*args)

    s.drafter.step = Boom()
    try:
        with pytest.raises(RuntimeError, match="draft exploded"):
            s.step()
    finally:
        s.drafter.step = step
    assert_unchanged(s, before)
    s.run()
    assert s.generated == greedy_generate(pair.target, prompt, 64)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_a_sampled_chain_on_nan_draft_logits_names_the_draft(pair, temperature, bad):
    """A chain checks its draws once, from the tokens drawn, not each level's row: a NaN or +inf draft logit still
    fails the round with a clear message naming the draft, and the session is as it was."""
    prompt = random_prompts(1, seed=953)[0]
    cfg = DecodeConfig(sampling=SamplingConfig(temperature=temperature), stop_on_eos=False, missing_top=0,
                       builder=BuilderConfig(name="sampled", depth=4), verifier="speculative", seed=3)
    s = DecodeSession(pair, prompt, cfg)
    s.run(rounds=2)
    before = snapshot(s)
    step = s.drafter.step

    class Poisoned:
        device = step.device

        def length(self):
            return step.length()

        def __call__(self, *args):
            out = step(*args).clone()
            out[..., 7] = bad  # one logit of every row
            return out

    s.drafter.step = Poisoned()
    try:
        with pytest.raises(TevvizError, match=r"round 2\b.*draft model produced NaN or inf"):
            s.step()
    finally:
        s.drafter.step = step
    assert_unchanged(s, before)


class FlakyTokenizer:
    """Wraps a tokenizer; decoding fails once when armed (a failure after the round's decision)."""

    def __init__(self, tok):
        self.tok, self.armed = tok, False

    def __getattr__(self, name):
        return getattr(self.tok, name)

    def batch_decode(self, *args, **kwargs):
        if self.armed:
            self.armed = False
            raise RuntimeError("decode failed")
        return self.tok.batch_decode(*args, **kwargs)


def test_failure_while_recording_leaves_no_partial_state(pair):
    """`DecodeSession.step`: the session is unchanged if the round fails, also when it fails after committing tokens."""
    flaky = copy.copy(pair)
    flaky.tokenizer = FlakyTokenizer(pair.tokenizer)
    prompt = random_prompts(1, seed=953)[0]
    s = DecodeSession(flaky, prompt, greedy_cfg())
    s.run(rounds=2)
    before = snapshot(s)
    flaky.tokenizer.armed = True
    with pytest.raises(RuntimeError, match="decode failed"):
        s.step()
    assert_unchanged(s, before)
    s.run()
    assert s.generated == greedy_generate(pair.target, prompt, 64)


# the end, the record -------------------------------------------------------------------------------------------------


def test_finished_session_refuses_to_step(pair):
    s = DecodeSession(pair, [1, 2, 3], greedy_cfg(max_new_tokens=3))
    s.run()
    assert s.done and len(s.generated) == 3
    with pytest.raises(TevvizError, match="finished"):
        s.step()


def test_missing_token_texts_match_their_ids():
    """Rows with fewer than `missing_top` positive gains (top-k sampling) keep each text beside its own id."""
    pair = tiny_pair("llama")
    cfg = DecodeConfig(sampling=SamplingConfig(temperature=0.7, top_k=2))
    r = DecodeSession(pair, pair.tokenizer("t1 t2 t3")["input_ids"], cfg).step()
    shown = [(m["token_id"], m["text"]) for row in r.missing for m in row]
    assert shown and all(text == pair.tokenizer.decode([t]) for t, text in shown)
