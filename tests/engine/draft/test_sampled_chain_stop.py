"""The sampled chain's early stop (BuilderConfig.stop_below) where it fires: a flat draft at T = 1.5 and top-k 20,
whose every row's top probability lies under 0.2. The chain still draws its first token from q at the root (its
law, chi-square) and stops after it, not before; without the stop it draws its whole depth, each row the processed
law of a fresh forward over its path."""

from __future__ import annotations

import pytest
import torch
from conftest import EOS, tiny_model

from tevviz.engine import BuilderConfig, SamplingConfig
from tevviz.engine.core.kv import new_cache
from tevviz.engine.core.sampling import processed_probs
from tevviz.engine.draft.builders import build_tree
from tevviz.engine.verify.comparison import chi_square_p

pytestmark = pytest.mark.usefixtures("one_thread")

SAMPLING = SamplingConfig(temperature=1.5, top_k=20)
CONTEXT = [3, 17, 9, 41]
STOP = 0.2
DRAWS = 1200


@pytest.fixture(scope="module")
def flat():
    return tiny_model("llama", 5, scale=1.0)  # unsharpened logits: a draft that is never sure


def first_token_law(model, builder: BuilderConfig) -> tuple[torch.Tensor, list[int]]:
    counts, sizes = torch.zeros(EOS + 1, dtype=torch.float64), []
    for seed in range(DRAWS):
        tree = build_tree(model, new_cache(model), CONTEXT, builder, sampling=SAMPLING,
                          gen=torch.Generator().manual_seed(seed)).tree
        sizes.append(tree.size)
        if tree.size > 1:
            counts[int(tree.tokens[1])] += 1
    return counts, sizes


@torch.inference_mode()
def test_a_chain_that_stops_draws_its_first_token_from_q_and_stops_after_it(flat):
    row = flat(input_ids=torch.tensor([CONTEXT])).logits[0, -1]
    q_root = processed_probs(row, SAMPLING).double()
    assert float(torch.softmax(row.float(), -1).max()) < STOP and float(q_root.max()) < STOP  # the stop fires here
    counts, sizes = first_token_law(flat, BuilderConfig(name="sampled", depth=3, stop_below=STOP))
    assert set(sizes) == {2}, "the chain must draw one token, then stop on the row it came from"
    support = q_root > 0
    assert int(support.sum()) == 20 and counts[~support].sum() == 0 and counts.sum() == DRAWS
    _, df, p_value = chi_square_p(counts[support].tolist(), q_root[support].tolist())
    assert df == 19 and p_value > 1e-3, f"first tokens do not follow q: chi-square p {p_value:.2e}"


@torch.inference_mode()
def test_without_the_stop_the_flat_chain_draws_its_whole_depth_from_each_rows_law(flat):
    for seed in range(20):
        tree = build_tree(flat, new_cache(flat), CONTEXT, BuilderConfig(name="sampled", depth=3), sampling=SAMPLING,
                          gen=torch.Generator().manual_seed(seed)).tree
        assert tree.size == 4
        for d in range(1, 4):
            path = CONTEXT + tree.tokens[1:d].tolist()
            fresh = processed_probs(flat(input_ids=torch.tensor([path])).logits[0, -1], SAMPLING)
            assert torch.allclose(tree.draft_probs[d], fresh, atol=1e-5), f"seed {seed}: row {d}"
