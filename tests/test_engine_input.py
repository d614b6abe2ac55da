"""Bad input gives a TevvizError with a message that says what is wrong, and leaves no partial state."""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch
from conftest import greedy_generate, random_prompts, tiny_pair, word_tokenizer

from tevviz.engine import (
    BuilderConfig,
    DecodeConfig,
    DecodeSession,
    SamplingConfig,
    TevvizError,
    autoregressive,
    encode_prompt,
    load_pair,
)
from tevviz.engine.draft.builders import MAX_BUDGET, MAX_CHILDREN, MAX_DEPTH, MAX_WIDTH
from tevviz.engine.load.models import check_vocabularies

pytestmark = pytest.mark.usefixtures("one_thread")

GREEDY = SamplingConfig(temperature=0.0)


@pytest.fixture(scope="module")
def pair():
    return tiny_pair("llama", seed=0)


def greedy_cfg(**kw) -> DecodeConfig:
    return DecodeConfig(sampling=GREEDY, stop_on_eos=False, missing_top=0, **kw)


# ------------------------------------------------------------------------------------------------ configurations


def test_different_vocabularies_are_refused():
    with pytest.raises(TevvizError, match="different vocabularies") as e:
        check_vocabularies(word_tokenizer(96), word_tokenizer(80), "big-target", "small-draft")
    assert "big-target" in str(e.value) and "small-draft" in str(e.value)
    check_vocabularies(word_tokenizer(96), word_tokenizer(96), "a", "b")  # the same vocabulary passes


@pytest.mark.parametrize("kwargs,field", [
    ({"budget": 0}, "budget"), ({"budget": -3}, "budget"), ({"budget": MAX_BUDGET + 1}, "budget"),
    ({"depth": 0}, "depth"), ({"depth": MAX_DEPTH + 1}, "depth"), ({"depth": 2.5}, "depth"),
    ({"children": 0}, "children K"), ({"children": MAX_CHILDREN + 1}, "children K"),
    ({"width": 0}, "width"), ({"width": MAX_WIDTH + 1}, "width"), ({"budget": True}, "budget"),
    ({"kind": "beam"}, "builder"),
    ({"kind": "static", "branching": ()}, "branching"), ({"kind": "static", "branching": (2, 0)}, "branching"),
    ({"kind": "static", "branching": (MAX_CHILDREN + 1,)}, "branching"),
    ({"kind": "static", "branching": (64, 64, 64)}, "nodes"),
    ({"kind": "chain", "depth": 0}, "depth"),
])
def test_bad_builder_config(kwargs, field):
    with pytest.raises(TevvizError, match=field):
        BuilderConfig(**kwargs)


def test_builder_limits_are_inclusive():
    BuilderConfig(budget=MAX_BUDGET, depth=MAX_DEPTH, children=MAX_CHILDREN, width=MAX_WIDTH)
    BuilderConfig(budget=1, depth=1, children=1, width=1)


@pytest.mark.parametrize("kwargs,field", [
    ({"temperature": -0.1}, "temperature"), ({"temperature": float("nan")}, "temperature"),
    ({"temperature": float("inf")}, "temperature"), ({"temperature": "1"}, "temperature"),
    ({"top_p": 0.0}, "top-p"), ({"top_p": 1.5}, "top-p"), ({"top_p": -0.2}, "top-p"),
    ({"top_p": float("nan")}, "top-p"), ({"top_k": -1}, "top-k"), ({"top_k": 2.0}, "top-k"),
])
def test_bad_sampling_config(kwargs, field):
    with pytest.raises(TevvizError, match=field):
        SamplingConfig(**kwargs)


def test_sampling_limits_are_inclusive():
    SamplingConfig(temperature=0.0, top_p=1.0)
    SamplingConfig(temperature=3.0, top_p=1e-6, top_k=1)


@pytest.mark.parametrize("kwargs,field", [
    ({"verifier": "beam"}, "unknown verifier"), ({"max_new_tokens": 0}, "max new tokens"),
    ({"max_new_tokens": 10**6}, "max new tokens"), ({"seed": "x"}, "seed"),
])
def test_bad_decode_config(kwargs, field):
    with pytest.raises(TevvizError, match=field) as e:
        DecodeConfig(**kwargs)
    if "verifier" in kwargs:
        assert all(name in str(e.value) for name in ("tev", "predraw", "residual")), "the message lists the choices"


# ----------------------------------------------------------------------------------------------------- models


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


# ---------------------------------------------------------------------------------------------------- prompts


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


def test_prompt_longer_than_context(pair):
    ctx = pair.context_length
    assert ctx == 512
    for n in (ctx, ctx + 40):
        with pytest.raises(TevvizError, match=f"{n} tokens.*{ctx} positions"):
            DecodeSession(pair, [1] * n, greedy_cfg())
    DecodeSession(pair, [1] * (ctx - 1), greedy_cfg())  # the longest prompt that leaves room for one token


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


# ----------------------------------------------------------------------------------------- failures mid-session


def snapshot(s: DecodeSession) -> dict:
    return {
        "target": s.target_cache.get_seq_length(), "draft": s.draft_cache.get_seq_length(),
        "pending": list(s.pending), "generated": list(s.generated), "rounds": len(s.rounds), "done": s.done,
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
