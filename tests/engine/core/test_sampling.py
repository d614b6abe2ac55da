"""The processed target law and the samplers (core/sampling.py), on rows small enough to work out by hand."""

from __future__ import annotations

import math

import pytest
import torch

from tevviz.engine import SamplingConfig, TevvizError
from tevviz.engine.core import sampling as s

INF = float("inf")


@pytest.mark.parametrize("kw", [
    {"temperature": -0.1}, {"temperature": math.nan}, {"temperature": INF}, {"temperature": "1"},
    {"top_k": -1}, {"top_k": 2.0}, {"top_p": 0.0}, {"top_p": 1.5}, {"top_p": math.nan},
])
def test_config_refuses_settings_outside_their_range(kw):
    with pytest.raises(TevvizError):
        SamplingConfig(**kw)


def test_config_edges_are_accepted_and_only_zero_temperature_is_greedy():
    assert SamplingConfig(temperature=0, top_k=0, top_p=1.0).greedy
    assert not SamplingConfig(temperature=1e-3, top_p=1e-3).greedy


@pytest.mark.parametrize("bad", [math.nan, INF, -INF])
def test_check_finite_refuses_any_non_finite_entry(bad):
    s.check_finite(torch.tensor([1.0, -2.0, 3e4], dtype=torch.float16))  # a plain sum of these would overflow
    with pytest.raises(TevvizError, match="NaN or inf"):
        s.check_finite(torch.tensor([1.0, bad, 2.0]))


def test_processed_logits_divides_by_temperature_and_greedy_leaves_them():
    row = torch.tensor([[2.0, -1.0, 0.5]])
    assert s.processed_logits(row, SamplingConfig(temperature=0.5)).tolist() == [[4.0, -2.0, 1.0]]
    assert s.processed_logits(row, SamplingConfig(temperature=0, top_k=1)).tolist() == row.tolist()


def test_top_k_keeps_every_token_tied_with_the_kth():
    row = torch.tensor([3.0, 1.0, 1.0, 0.0])
    out = s.processed_logits(row, SamplingConfig(top_k=2))
    assert out.tolist() == [3.0, 1.0, 1.0, -INF]
    assert s.processed_logits(row, SamplingConfig(top_k=4)).tolist() == row.tolist()


@pytest.mark.parametrize("top_p,kept", [(0.75, [0, 1]), (0.9, [0, 1, 2]), (0.4, [0])])
def test_top_p_keeps_the_smallest_top_set_reaching_p(top_p, kept):
    # Probabilities 0.5, 0.3, 0.15, 0.05: 0.75 needs the first two, 0.9 three, 0.4 only the first.
    row = torch.tensor([0.5, 0.3, 0.15, 0.05]).log()
    out = s.processed_logits(row, SamplingConfig(top_p=top_p))
    assert torch.isfinite(out).nonzero().flatten().tolist() == kept


def test_greedy_rows_takes_the_first_maximum_and_checks_for_nan():
    assert s.greedy_rows(torch.tensor([[0.0, 2.0, 2.0], [5.0, 1.0, 5.0]])).tolist() == [1, 0]
    with pytest.raises(TevvizError):
        s.greedy_rows(torch.tensor([[0.0, math.nan, 1.0]]))


def test_one_hot_puts_one_at_each_index():
    like = torch.zeros(2, 3, dtype=torch.float16)
    out = s.one_hot(torch.tensor([2, 0]), like)
    assert out.dtype == torch.float32 and out.tolist() == [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]


def test_processed_probs_by_hand():
    logits = torch.tensor([[0.0, math.log(3.0), -INF, math.log(4.0)]])
    assert torch.allclose(s.processed_probs(logits, SamplingConfig()), torch.tensor([[0.125, 0.375, 0.0, 0.5]]))
    # T = 2 halves the logits: weights 1, sqrt 3, 0, 2.
    half = torch.tensor([1.0, math.sqrt(3.0), 0.0, 2.0])
    assert torch.allclose(s.processed_probs(logits, SamplingConfig(temperature=2.0))[0], half / half.sum())
    assert s.processed_probs(logits, SamplingConfig(temperature=0)).tolist() == [[0.0, 0.0, 0.0, 1.0]]


def test_processed_probs_checks_for_nan_unless_told_not_to():
    logits = torch.tensor([[0.0, math.nan], [1.0, 0.0]])
    with pytest.raises(TevvizError):
        s.processed_probs(logits, SamplingConfig())
    out = s.processed_probs(logits, SamplingConfig(), check=False)
    assert out[0].isnan().all() and torch.allclose(out[1].sum(), torch.tensor(1.0))


def test_edge_probs_reads_the_processed_rows_entries():
    logits = torch.tensor([[0.0, math.log(3.0)], [math.log(2.0), math.log(2.0)]])
    rows, tokens = torch.tensor([0, 0, 1]), torch.tensor([1, 0, 1])
    assert torch.allclose(s.edge_probs(logits, rows, tokens, SamplingConfig()), torch.tensor([0.75, 0.25, 0.5]))
    # At T = 0 an edge is 1 exactly where its token is the parent's argmax (the first one on a tie).
    assert s.edge_probs(logits, rows, tokens, SamplingConfig(temperature=0)).tolist() == [1.0, 0.0, 0.0]


def test_float64_sampling_everywhere_but_mps():
    assert s.float64_sampling("cpu") and s.float64_sampling(torch.device("cuda", 0)) and not s.float64_sampling("mps")


@pytest.mark.parametrize("u,want", [(0.9, 1), (0.75, 1), (0.7, 3), (0.0, 3), (1 - 1e-12, 1)])
def test_inverse_cdf_maps_u_to_the_interval_holding_one_minus_u(u, want):
    # Weights 0, 1, 0, 3: CDF 0, 1, 1, 4; the threshold (1 - u) * 4 lands in node 1 up to 1, in node 3 past it,
    # and neither end of u reaches a zero weight.
    weights = torch.tensor([0.0, 1.0, 0.0, 3.0])
    assert int(s.inverse_cdf(weights, torch.tensor([u], dtype=torch.float64))) == want


def test_inverse_cdf_works_row_by_row():
    weights = torch.tensor([[1.0, 1.0], [0.0, 5.0]])
    assert s.inverse_cdf(weights, torch.tensor([[0.2], [0.99]], dtype=torch.float64)).tolist() == [1, 1]


def test_sample_categorical_float64_is_the_inverse_cdf_of_the_generators_uniform():
    weights = torch.tensor([[0.2, 0.0, 0.5, 0.3]]).expand(64, -1)
    got = s.sample_categorical(weights, torch.Generator().manual_seed(3), float32=False)
    u = torch.rand(64, 1, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    assert got.tolist() == s.inverse_cdf(weights, u).tolist()


@pytest.mark.parametrize("float32", [False, True])
def test_sample_categorical_draws_the_law_and_never_a_zero_weight(float32):
    n = 40_000
    weights = torch.tensor([0.0, 1.0, 0.0, 3.0, 6.0]).expand(n, -1)
    draws = s.sample_categorical(weights, torch.Generator().manual_seed(7), float32=float32)
    freq = torch.bincount(draws, minlength=5).float() / n
    assert freq[0] == 0 and freq[2] == 0
    # 4 standard deviations of a frequency near 0.3 over 40k draws is about 0.01.
    assert torch.allclose(freq, torch.tensor([0.0, 0.1, 0.0, 0.3, 0.6]), atol=0.01), freq.tolist()


def test_to_width_pads_or_cuts_and_renormalises():
    p = torch.tensor([[0.5, 0.25, 0.25]])
    assert torch.allclose(s.to_width(p, 5), torch.tensor([[0.5, 0.25, 0.25, 0.0, 0.0]]))
    assert torch.allclose(s.to_width(p, 2), torch.tensor([[2 / 3, 1 / 3]]))
    assert s.to_width(torch.zeros(1, 3), 2).tolist() == [[0.0, 0.0]]  # no division by zero
