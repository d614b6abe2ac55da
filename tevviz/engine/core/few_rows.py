"""Linear layers of a few rows on a CPU, as the transposed product `(W @ x.T).T`.

A speculative round's passes are a few rows (a chain of H tokens is H + 1), where BLAS on a CPU (MKL in torch's
wheels) runs `linear` through a path that reads the weight once per row: on SmolLM2-135M, one thread, a target pass of
1, 2, 3 and 5 tokens cost 59, 97, 116 and 100 ms through `linear` and 47, 48, 67 and 79 ms with its layers as the
transposed product (docs/experiments/2026-12-04-do-a-few-rows-pay-for-the-whole-weight.md). The same sums in
another order: rounding differs, as it does between any two BLAS paths.

`TEVVIZ_FEW_ROWS=0` turns every use off (the model's own `linear` everywhere).
"""

from __future__ import annotations

import os
import threading
import weakref
from contextlib import contextmanager
from functools import partial

import torch
import torch.nn.functional as F

from ..errors import TevvizError


def _limit(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise TevvizError(f"TEVVIZ_FEW_ROWS must be a whole number of rows (0 turns it off), got {text!r}") from None


# Output layers of at most this many rows go through the transposed product (`head_rows`); 0 turns all of it off.
LIMIT = _limit(os.environ.get("TEVVIZ_FEW_ROWS", "8"))
LAYER_ROWS = 6  # a hidden layer's largest row count that pays (at 8 rows `linear` is as fast)
WIDE_INPUT = 1024  # past this many inputs (an MLP's down projection) only 1 or 2 rows pay
# Below this many weights a layer stays `linear`: the embedded drafter's (128 x 384 and smaller) drafted a level
# 15-30% slower transposed, held in cache as they are.
MIN_WEIGHTS = 1 << 16


def _transposed(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    n = x.shape[0]
    # One row is sent as two: a matrix-vector product is the slow path.
    out = (weight @ (x if n > 1 else torch.cat([x, x])).T)[:, :n].T.contiguous()
    return out if bias is None else out + bias


def head_rows(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """`F.linear(h, weight, bias)` for (n, d) rows `h`, as one (V, d) x (d, n) product when n is small on a CPU.

    SmolLM2-135M's head (V = 49,152, d = 576), one thread: 10, 23, 34 and 19 ms for 1, 2, 3 and 8 rows through
    `linear`, 6, 6, 8 and 14 ms transposed; the drafter's (d = 128): 4.0, 6.5, 10.4 ms against 1.6, 1.4, 2.0 ms.
    """
    if h.device.type != "cpu" or not 1 <= h.shape[0] <= LIMIT or h.dim() != 2:
        return F.linear(h, weight, bias)
    return _transposed(h, weight, bias)


def pays(rows: int, weight: torch.Tensor) -> bool:
    """Whether a hidden layer of this (out, in) weight takes the transposed product for `rows` rows (measured on
    MKL in float32, the only dtype it is taken in)."""
    return (LIMIT > 0 and 1 <= rows <= LAYER_ROWS and weight.dtype == torch.float32 and weight.numel() >= MIN_WEIGHTS
            and (rows <= 2 or weight.shape[1] <= WIDE_INPUT))


def layer_rows(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """`F.linear(x, weight, bias)` for any leading shape, transposed where `pays` says so on a CPU."""
    d = x.shape[-1]
    rows = x.numel() // d if d else 0
    if not x.is_cpu or not pays(rows, weight):
        return F.linear(x, weight, bias)
    return _transposed(x.reshape(rows, d), weight, bias).view(*x.shape[:-1], weight.shape[0])


def same_logits(got: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype) -> bool:
    """Whether a rewritten forward's logits `got` agree with the model's own `ref` (1e-3 of their scale in float32,
    5e-2 in half precision): the check a model passes once before tevviz runs it the rewritten way."""
    tol = 1e-3 if dtype == torch.float32 else 5e-2
    return bool(((got.float() - ref.float()).abs().max() <= tol * max(1.0, ref.float().abs().max().item())).item())


def _forward(linear: torch.nn.Linear, input: torch.Tensor) -> torch.Tensor:  # `input`: nn.Linear's own name
    """A layer's `forward` within a block: `layer_rows` on its weight and bias as they are at each call (a
    parametrised weight too)."""
    return layer_rows(input, linear.weight, linear.bias)


_LOCK = threading.Lock()
# module -> its nn.Linear layers and their shadows, made once (a layer swapped in later is not shadowed: `linear`)
_SHADOWS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_HELD = "_tevviz_few_rows_held"  # in a shadowed layer's __dict__: how many open blocks shadow it


@contextmanager
def few_rows(module: torch.nn.Module):
    """Within the block, `module`'s linear layers run `layer_rows`; after it they are as they were.

    Each layer's `forward` is shadowed in the instance's dictionary (a few microseconds a pass), never the class's,
    and counted per layer, so blocks nest (a model and its base, two models sharing layers). A layer that already
    has a `forward` of its own (a hook, a wrapper) keeps it. The shadow is per instance, not per thread: a call on
    the same model from another thread while a block is open takes the transposed product too."""
    with _LOCK:
        shadows = _SHADOWS.get(module)
        if shadows is None:
            # partial, not a closure: a copy of a layer taken inside a block (deepcopy, pickle) binds to the copy
            shadows = _SHADOWS[module] = [(m, partial(_forward, m)) for m in module.modules()
                                          if type(m) is torch.nn.Linear]
        for linear, shadow in shadows:
            own = linear.__dict__
            held = own.get(_HELD, 0)
            if held == 0:
                if "forward" in own:
                    continue
                own["forward"] = shadow
            own[_HELD] = held + 1
    try:
        yield
    finally:
        with _LOCK:
            for linear, _ in shadows:
                own = linear.__dict__
                held = own.get(_HELD, 0)
                if held == 1:
                    del own[_HELD]
                    own.pop("forward", None)
                elif held > 1:
                    own[_HELD] = held - 1
