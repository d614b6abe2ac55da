"""The target pass's guard (tevviz/engine/decode/target_pass.py): a model takes the split pass only where it agrees
with the model's own forward on 1, 2 and 5 rows, so one that differs on a single row count keeps its own forward;
a prefill past the row limit with `logits=False` gets no logits (the output layer is left out)."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_model

from tevviz.engine.core import few_rows
from tevviz.engine.core.kv import new_cache
from tevviz.engine.decode.target_pass import CHECK_ROWS, TargetPass, takes_split

pytestmark = pytest.mark.usefixtures("one_thread")


def differing_on(rows: int | None):
    """A tiny Llama whose own forward adds 1 to every logit of an input of `rows` rows (None: never): the split
    pass, which runs the base model and the head without that forward, then differs only there."""
    model = tiny_model("llama", 3)
    own = model.forward

    def forward(*args, **kwargs):
        out = own(*args, **kwargs)
        if rows is not None and kwargs["input_ids"].shape[1] == rows:
            out.logits = out.logits + 1.0
        return out

    model.forward = forward
    return model


def test_a_model_that_agrees_takes_the_split_pass():
    assert few_rows.LIMIT >= max(CHECK_ROWS) and takes_split(differing_on(None))


@pytest.mark.parametrize("rows", [1, 2, 5])
def test_a_model_that_differs_on_one_row_count_keeps_its_own_forward(rows):
    model = differing_on(rows)
    assert not takes_split(model)
    assert not TargetPass(model).split


def test_a_prefill_past_the_row_limit_without_logits_returns_none():
    model = tiny_model("llama", 3)
    n = few_rows.LIMIT + 4
    ids = torch.arange(3, 3 + n)[None]
    target = TargetPass(model, path="few_rows")
    assert target.split
    out = target(ids, None, None, new_cache(model), hidden=True, logits=False)
    assert out.logits is None and len(out.hidden_states) == model.config.num_hidden_layers + 1
    ref = model(input_ids=ids, output_hidden_states=True)
    assert torch.allclose(out.hidden_states[-1], ref.hidden_states[-1], atol=1e-5)
    assert target(ids, None, None, new_cache(model)).logits.shape == (1, n, model.config.vocab_size)
