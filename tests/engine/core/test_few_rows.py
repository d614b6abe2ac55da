"""Linear layers of a few rows as the transposed product (core/few_rows.py): the same values as `linear` for every
row count and shape, and a model's layers changed only inside a `few_rows` block.

Checked to fail against these faults, planted one at a time: the (out, n) product reshaped to (n, out) instead of
transposed (the equality test), the single row sent as two but both kept (the shape test), and a block that leaves
the layers' forward shadowed after it (the restore test).
"""

from __future__ import annotations

import threading

import pytest
import torch
import torch.nn.functional as F
from conftest import greedy_generate, random_prompts, tiny_pair

from tevviz.engine import BuilderConfig, SamplingConfig
from tevviz.engine.core import few_rows
from tevviz.engine.core.few_rows import layer_rows, pays
from tevviz.engine.decode.plain import autoregressive
from tevviz.engine.decode.session import DecodeConfig, DecodeSession


@pytest.fixture
def transposed_calls(monkeypatch):
    """Counts the transposed products taken (so that a test knows the path it checks was run)."""
    calls = []
    own = few_rows._transposed

    def counted(*a):
        calls.append(a[0].shape[0])
        return own(*a)

    monkeypatch.setattr(few_rows, "_transposed", counted)
    return calls


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("shape", [(2800, 24), (80, few_rows.WIDE_INPUT + 8), (40, 24)])
def test_layer_rows_gives_linear_for_every_row_count_and_leading_shape(bias, shape):
    g = torch.Generator().manual_seed(1)
    weight = torch.randn(*shape, generator=g)
    b = torch.randn(shape[0], generator=g) if bias else None
    inputs = shape[1]
    for n in range(1, few_rows.LAYER_ROWS + 4):
        for lead in ((n,), (1, n), (1, 1, n)):
            x = torch.randn(*lead, inputs, generator=g)
            got, ref = layer_rows(x, weight, b), F.linear(x, weight, b)
            assert got.shape == ref.shape and got.is_contiguous(), (n, lead)
            assert torch.allclose(got, ref, atol=1e-4, rtol=1e-5), (n, lead)
            if not pays(n, weight):
                assert torch.equal(got, ref)  # where it does not pay it is `linear` itself


def test_which_layers_and_row_counts_take_the_transposed_product():
    assert [n for n in range(10) if pays(n, torch.empty(1536, 576))] == [1, 2, 3, 4, 5, 6]
    assert [n for n in range(10) if pays(n, torch.empty(576, 1536))] == [1, 2]  # a wide input (a down projection)
    assert not any(pays(n, torch.empty(128, 384)) for n in range(10))  # a small layer, held in cache
    assert not any(pays(n, torch.empty(1536, 576, dtype=torch.bfloat16)) for n in range(10))  # measured in float32


def test_a_block_shadows_the_layers_and_restores_them_after_even_on_error():
    pair = tiny_pair("llama")
    base = pair.target.model
    linears = [m for m in base.modules() if type(m) is torch.nn.Linear]
    assert linears and not any("forward" in m.__dict__ for m in linears)
    with few_rows.few_rows(base):
        assert all("forward" in m.__dict__ for m in linears)
        with few_rows.few_rows(base):  # nested: the outer block still holds them after the inner one
            pass
        assert all("forward" in m.__dict__ for m in linears)
    assert not any("forward" in m.__dict__ for m in linears)
    with pytest.raises(RuntimeError), few_rows.few_rows(base):
        raise RuntimeError("a pass that fails")
    assert not any("forward" in m.__dict__ for m in linears)
    # Another model's layers are never touched.
    draft_linears = [m for m in pair.draft.modules() if type(m) is torch.nn.Linear]
    with few_rows.few_rows(base):
        assert not any("forward" in m.__dict__ for m in draft_linears)


def test_blocks_on_two_threads_leave_the_layers_as_they_were():
    base = tiny_pair("llama").target.model
    linears = [m for m in base.modules() if type(m) is torch.nn.Linear]
    x = torch.randint(0, 50, (1, 4))
    errors = []

    def work():
        try:
            for _ in range(30):
                with torch.inference_mode(), few_rows.few_rows(base):
                    base(input_ids=x)
        except Exception as e:  # noqa: BLE001 - reported by the assertion below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and not any("forward" in m.__dict__ for m in linears)


def test_the_model_inside_a_block_gives_its_own_logits(monkeypatch, transposed_calls):
    monkeypatch.setattr(few_rows, "MIN_WEIGHTS", 0)  # the tiny model's layers take the transposed product too
    target = tiny_pair("llama").target
    for ids in ([[5]], [[5, 9]], [[5, 9, 14, 3, 22]]):
        ids = torch.tensor(ids)
        with torch.inference_mode():
            ref = target(input_ids=ids).logits
            del transposed_calls[:]
            with few_rows.few_rows(target):
                got = target(input_ids=ids).logits
        assert (got - ref).abs().max() < 1e-4
        assert transposed_calls and set(transposed_calls) == {ids.shape[1]}  # every layer, at the pass's rows


def test_blocks_nest_over_a_model_and_its_base_and_leave_a_layers_own_forward():
    target = tiny_pair("llama").target
    linears = [m for m in target.modules() if type(m) is torch.nn.Linear]
    with few_rows.few_rows(target):
        with few_rows.few_rows(target.model):  # the same layers, held twice
            pass
        assert all("forward" in m.__dict__ for m in linears)  # the outer block still holds them
    assert not any("forward" in m.__dict__ for m in linears)
    own = linears[0].__dict__["forward"] = lambda input: torch.zeros(1)  # a wrapper of the user's
    with few_rows.few_rows(target):
        assert linears[0].__dict__["forward"] is own
    assert linears[0].__dict__["forward"] is own
    del linears[0].__dict__["forward"]


def test_a_layer_called_by_keyword_inside_a_block_works():
    layer = torch.nn.Linear(600, 200)
    x = torch.randn(3, 600)
    with few_rows.few_rows(layer):
        got = layer(input=x)
    assert torch.allclose(got, F.linear(x, layer.weight, layer.bias), atol=1e-5)


def test_a_bad_row_limit_in_the_environment_is_a_clear_error():
    import os
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", "import tevviz.engine.core.few_rows"], capture_output=True, text=True,
                         env={**os.environ, "TEVVIZ_FEW_ROWS": "eight"}, check=False)
    assert run.returncode != 0 and "TEVVIZ_FEW_ROWS must be a whole number" in run.stderr


@pytest.mark.parametrize("builder", ["sampled", "best-first"])
def test_greedy_decoding_through_few_row_layers_is_the_targets_own(builder, monkeypatch, transposed_calls):
    """With every layer of the tiny pair taking the transposed product where the rows pay, and with it off, greedy
    decoding gives `generate`'s tokens."""
    monkeypatch.setattr(few_rows, "MIN_WEIGHTS", 0)
    pair = tiny_pair("llama")
    prompts = random_prompts(3, seed=11)
    for limit in (few_rows.LIMIT, 0):
        monkeypatch.setattr(few_rows, "LIMIT", limit)
        for prompt in prompts:
            del transposed_calls[:]
            session = DecodeSession(pair, prompt, DecodeConfig(
                sampling=SamplingConfig(temperature=0.0), builder=BuilderConfig(name=builder, budget=6, depth=4),
                verifier="speculative" if builder == "sampled" else "tev", max_new_tokens=24, stop_on_eos=False))
            session.run()
            assert session.generated == greedy_generate(pair.target, prompt, 24), (limit, prompt)
            assert bool(transposed_calls) == (limit > 0)  # the path under test was taken, and only when on


def test_plain_decoding_through_few_row_layers_is_generates_own(monkeypatch, transposed_calls):
    """tevviz's plain loop (`--baseline`, the app's speed panel) takes the rounds' pass, few-row layers and all."""
    monkeypatch.setattr(few_rows, "MIN_WEIGHTS", 0)
    pair = tiny_pair("llama")
    cfg = DecodeConfig(sampling=SamplingConfig(temperature=0.0), max_new_tokens=24, stop_on_eos=False)
    for prompt in random_prompts(3, seed=12):
        del transposed_calls[:]
        assert autoregressive(pair, prompt, cfg).token_ids == greedy_generate(pair.target, prompt, 24)
        assert 1 in transposed_calls  # each step one row (a short prompt's prefill takes it too)
