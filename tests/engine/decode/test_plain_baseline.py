"""The baseline every speed-up divides by (engine/decode/plain.py): the fastest plain way, chosen by timings (made up
here, so no wall-clock bound is asserted), then run over the whole length; transformers' `generate` timed from its
first token writes the target's own greedy tokens; no speed-up is claimed where no drafted token was accepted.

Checked to fail against these faults, planted one at a time: `fastest` taking the slowest way, the probe run once
in one order (the turned order's calls are counted), the winner's probe timing reported in place of its full run,
`generated` keeping its prefill in the time (its first token dropped from the count, as the test reads it), and
`drafting_note` counting the root as an accepted token.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import pytest
import torch
from conftest import greedy_generate, random_prompts, tiny_pair

from tevviz.engine.analysis.speed import drafting_note, speed_breakdown
from tevviz.engine.core.sampling import SamplingConfig
from tevviz.engine.decode import plain
from tevviz.engine.decode.plain import BaselineResult, PlainWay, best_plain, fastest, plain_ways
from tevviz.engine.decode.session import DecodeConfig


@dataclass(frozen=True)
class StubWay(PlainWay):
    """A way whose time per token is made up: tokens/s = rate."""

    rate: float = 1.0

    def run(self, pair, prompt_ids, cfg, max_new_tokens=None):
        n = cfg.max_new_tokens if max_new_tokens is None else max_new_tokens
        calls.append((self.label(), n))
        return BaselineResult(list(range(n)), n / self.rate)


calls: list = []


def test_the_fastest_way_is_chosen_and_run_over_the_whole_length():
    del calls[:]
    slow, quick, mid = (StubWay("tevviz", "few_rows", 1, rate=8.8), StubWay("tevviz", "stock", 1, rate=18.1),
                        StubWay("generate", "stock", 1, rate=14.8))
    cfg = DecodeConfig(sampling=SamplingConfig(temperature=0.0), max_new_tokens=40)
    seen = []
    best = best_plain(None, [1, 2], cfg, [slow, quick, mid], probe_tokens=5, progress=lambda d, t: seen.append(d))
    assert best.way == quick and best.tokens_per_s == pytest.approx(18.1)
    assert len(best.result.token_ids) == 40  # the winner over the whole length, not its probe
    assert calls[:6] == [(w.label(), 5) for w in (slow, quick, mid, mid, quick, slow)]  # turned order
    assert calls[6:] == [(quick.label(), 40)]
    assert best.probe == {w.label(): pytest.approx(w.rate) for w in (slow, quick, mid)}
    assert seen[-1] == 7 and "the fastest of 3 ways" in best.describe()
    assert fastest({slow: 1.0, quick: 1.0}) == slow  # a tie keeps the first listed


def test_the_ways_cover_both_paths_generate_and_the_thread_counts():
    ways = plain_ways(tiny_pair("llama").target, threads=1)
    loops = {(w.loop, w.path) for w in ways}
    assert loops == {("tevviz", "stock"), ("tevviz", "few_rows"), ("generate", "stock")}
    assert {w.threads for w in ways} == {1, plain.TORCH_DEFAULT_THREADS}
    assert "1 thread" in ways[0].label() and "tevviz's loop" in ways[0].label()


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_every_plain_way_writes_the_targets_greedy_tokens(family):
    pair = tiny_pair(family)
    cfg = DecodeConfig(sampling=SamplingConfig(temperature=0.0), max_new_tokens=12, stop_on_eos=False)
    for prompt in random_prompts(2, seed=4):
        ref = greedy_generate(pair.target, prompt, 12)
        for path in ("stock", "few_rows", "auto"):
            assert plain.autoregressive(pair, prompt, cfg, path).token_ids == ref, path
        got = plain.generated(pair, prompt, cfg)
        # timed from its first token on: the tokens after it, over the passes after it
        assert got.token_ids == ref[1:] and got.seconds > 0


def test_a_way_runs_at_its_thread_count_and_restores_the_count():
    pair = tiny_pair("llama")
    cfg = DecodeConfig(sampling=SamplingConfig(temperature=0.0), max_new_tokens=3, stop_on_eos=False)
    before = torch.get_num_threads()
    seen = []
    way = PlainWay("tevviz", "stock", 2)
    original = plain.autoregressive
    try:
        plain.autoregressive = lambda *a, **k: seen.append(torch.get_num_threads()) or original(*a, **k)
        way.run(pair, [1, 2, 3], cfg)
    finally:
        plain.autoregressive = original
    assert seen == [2] and torch.get_num_threads() == before


def _round(drafted: int, accepted: int):
    return SimpleNamespace(tokens=list(range(drafted + 1)), accepted=list(range(accepted + 1)))


def test_no_speed_up_is_claimed_without_an_accepted_draft():
    assert drafting_note([]) is None
    assert "did not run" in drafting_note([_round(0, 0), _round(0, 0)])
    assert "none of the 7 drafted tokens was accepted" in drafting_note([_round(3, 0), _round(4, 0), _round(0, 0)])
    assert drafting_note([_round(3, 0), _round(4, 1)]) is None
    rounds = [SimpleNamespace(tokens=[0, 5], accepted=[0], tokens_committed=1, stage_ms={"target": 10.0})]
    speed = speed_breakdown(rounds, baseline_ms_per_token=5.0)
    assert speed.speedup is None and speed.sentence.startswith("No speed-up to claim: drafting did not pay")
