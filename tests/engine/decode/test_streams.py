"""Batched target continuations (engine/decode/streams.py): the target's own greedy output and sampling law, padding
included."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from conftest import EOS, greedy_generate, random_prompts, tiny_model, tiny_pair
from test_laws import P_MIN, assert_law, law_check

from tevviz.engine.core.sampling import SamplingConfig, processed_probs
from tevviz.engine.decode.streams import collect_streams, continuations, cut_at_stop


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_batched_greedy_continuations_equal_generate(family):
    target = tiny_model(family, 3)
    prompts = random_prompts(9, seed=5, lo=1, hi=14)  # lengths differ: most rows are left-padded
    got = continuations(target, prompts, SamplingConfig(temperature=0.0), 20, seed=0, stop=set(), batch=4)
    assert got == [greedy_generate(target, p, 20) for p in prompts]


def test_continuations_stop_after_the_stop_id_and_respect_the_context_length():
    target = tiny_model("llama", 3)
    prompts = random_prompts(6, seed=8, lo=2, hi=9)
    free = continuations(target, prompts, SamplingConfig(temperature=0.0), 16, seed=0, stop=set(), batch=3)
    stop = {free[0][3]}  # a token the first row draws: it must end there, the stop id included
    cut = continuations(target, prompts, SamplingConfig(temperature=0.0), 16, seed=0, stop=stop, batch=3)
    assert cut == [cut_at_stop(f, stop) for f in free]
    assert len(cut[0]) <= 4 and cut[0][-1] in stop
    short = continuations(target, prompts, SamplingConfig(temperature=0.0), 16, seed=0, stop=set(), batch=3,
                          context_length=12)
    # A batch draws what its longest prompt leaves room for; rows never pass the positions the models have.
    assert all(len(p) + len(c) <= 12 for p, c in zip(prompts, short))
    assert all(c == f[: len(c)] for c, f in zip(short, free))


def exact_two_token_law(target, prompt: list[int], cfg: SamplingConfig) -> dict[tuple[int, int], float]:
    """P(first two tokens) under the processed target distribution, from one forward per first token."""
    with torch.no_grad():
        p1 = processed_probs(target(input_ids=torch.tensor([prompt])).logits[0, -1:], cfg)[0]
        law = {}
        for a in torch.nonzero(p1).flatten().tolist():
            p2 = processed_probs(target(input_ids=torch.tensor([prompt + [a]])).logits[0, -1:], cfg)[0]
            for b in torch.nonzero(p2).flatten().tolist():
                law[(a, b)] = float(p1[a] * p2[b])
    return law


def test_sampled_continuations_follow_the_processed_law_on_padded_rows():
    """The first two tokens of a short prompt, always left-padded beside a long one, follow p(a) p(b | a)."""
    target = tiny_model("llama", 4)
    cfg = SamplingConfig(temperature=0.6, top_k=3)
    short, long = [3, 17, 40], [5, 9, 11, 2, 60, 61, 62, 8, 30, 31]
    prompts = [short, long] * 3000
    got = continuations(target, prompts, cfg, 2, seed=1, stop=set(), batch=200)
    counts = Counter(tuple(c) for c, p in zip(got, prompts) if p is short)
    assert_law(counts, exact_two_token_law(target, short, cfg), "two tokens after a left-padded prompt", tv_max=0.05)
    # The check has power: the same draws reject the law at another temperature, and the law of a context
    # that lost its first token (what a padding or position bug would read).
    for wrong, what in ((SamplingConfig(temperature=1.0, top_k=3), short),
                        (SamplingConfig(temperature=0.5, top_k=3), short),
                        (cfg, short[1:])):
        assert law_check(counts, exact_two_token_law(target, what, wrong))[1] <= P_MIN  # chi-square, not TV


def test_collect_streams_keeps_the_prompts_and_stops_at_eos():
    pair = tiny_pair("llama", 0)
    prompts = random_prompts(5, seed=2)
    streams = collect_streams(pair, prompts, 0.0, 12, seed=0, batch=2)
    assert [s[0] for s in streams] == prompts
    for prompt, cont in streams:
        assert cont == cut_at_stop(greedy_generate(pair.target, prompt, 12), {EOS})
