"""Held-out evaluation (engine/train/evaluation.py): per-prompt tau and the per-prompt expected block length beside
it."""

from __future__ import annotations

import pytest
from conftest import random_prompts, tiny_pair

from tevviz.engine.analysis.stats import mean_se
from tevviz.engine.draft.builders import BuilderConfig
from tevviz.engine.train.evaluation import evaluate

pytestmark = pytest.mark.usefixtures("one_thread")


def test_per_prompt_expected_block_length_beside_tau():
    """At T = 0 every round's block is its 1 + C_p, so the two per-prompt lists agree; at T = 1 the expected one is
    what `expected_length` averages, prompt by prompt, and differs from the realised tau by the draws."""
    pair = tiny_pair("llama", seed=4)
    prompts = random_prompts(4, seed=77)
    builder = BuilderConfig(budget=8, depth=3, children=3, width=4)
    greedy = evaluate(pair, prompts, 0.0, builder, max_new_tokens=12)
    assert greedy.per_prompt_expected_length == pytest.approx(greedy.per_prompt_tau)
    sampled = evaluate(pair, prompts, 1.0, builder, max_new_tokens=12)
    assert len(sampled.per_prompt_expected_length) == len(sampled.per_prompt_tau) == len(prompts)
    assert ((sampled.expected_length, sampled.expected_length_se)
            == pytest.approx(mean_se(sampled.per_prompt_expected_length)))
    assert sampled.per_prompt_expected_length != pytest.approx(sampled.per_prompt_tau)
    assert all(1 <= c <= 4 for c in sampled.per_prompt_expected_length)  # at most the depth + 1
