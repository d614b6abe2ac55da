"""The target's pass as a round runs it: the model's own layers with their linear layers as `few_rows` runs them,
then its output layer through `head_rows`.

A round's target pass is a few rows (a chain of H tokens is H + 1), where BLAS on a CPU computes a linear layer
through its slowest path (core/few_rows.py): on SmolLM2-135M the output layer alone was 23 to 34 of a ~100 ms pass of
2 or 3 rows, against 6 to 8 ms as the transposed product. Only families whose causal-LM forward is the base model
followed by the output layer, nothing after it, take this pass, and a model only after one forward of a few tokens
agrees with its own; any other runs the model's forward unchanged.
"""

from __future__ import annotations

import logging
import weakref

import torch
from transformers.modeling_outputs import CausalLMOutputWithPast

from ..core import few_rows as rows
from ..core.kv import new_cache
from ..draft.fast_draft import FAMILIES
from . import row_paths as rp

CHECK_TOKENS = 5
CHECK_ROWS = (1, 2, CHECK_TOKENS)  # the passes checked against the model's own forward
_CHECKED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> the pass agreed with its forward
_PATHS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> {thread count: RowPaths}
logger = logging.getLogger("tevviz")


def _parts(model):
    """The base model and the output layer of a family whose logits are that layer over the last hidden state."""
    if getattr(model.config, "model_type", None) not in FAMILIES or getattr(model, "hf_device_map", None):
        return None
    base, head = getattr(model, getattr(model, "base_model_prefix", ""), None), model.get_output_embeddings()
    if not isinstance(base, torch.nn.Module) or not isinstance(head, torch.nn.Linear):
        return None
    return base, head


def _split(parts, ids, mask, positions, cache, hidden: bool, logits: bool = True):
    base, head = parts
    with rows.few_rows(base):
        out = base(input_ids=ids, attention_mask=mask, position_ids=positions, cache=cache, use_cache=True,
                   output_hidden_states=hidden)
    scores = rows.head_rows(out.last_hidden_state[0], head.weight, head.bias)[None] if logits else None
    return CausalLMOutputWithPast(logits=scores, cache=out.cache, hidden_states=out.hidden_states)


def takes_split(model) -> bool:
    """Whether `model` takes the split pass: a CPU model of a listed family whose split forward gives its own logits
    on a few tokens (checked once a model)."""
    if rows.LIMIT < 1 or model.device.type != "cpu" or _parts(model) is None:
        return False
    if model not in _CHECKED:
        with torch.inference_mode():
            vocab = min(model.config.vocab_size, 1000)
            ids = (torch.arange(3, 3 + CHECK_TOKENS, device=model.device) % vocab)[None]
            parts = _parts(model)

            def agrees(n: int) -> bool:
                ref = model(input_ids=ids[:, :n], cache=new_cache(model), use_cache=True).logits
                got = _split(parts, ids[:, :n], None, None, new_cache(model), False).logits
                return rows.same_logits(got, ref, model.dtype)

            # 1 and 2 rows (one row sent as two; a wide layer transposed) as well as a few (a wide layer `linear`);
            # the first that disagrees ends the check.
            _CHECKED[model] = all(agrees(n) for n in CHECK_ROWS)
    return _CHECKED[model]


def _probe(model) -> dict[int, dict[str, float]]:
    """Both paths' ms for passes of 1..few_rows.LIMIT tokens on a cached context, as plain decoding runs them."""
    parts, device = _parts(model), model.device
    vocab = min(model.config.vocab_size, 1000)
    tokens = (torch.arange(rp.PROBE_CONTEXT + rows.LIMIT, device=device) * 7 + 3) % vocab
    context, block = tokens[None, : rp.PROBE_CONTEXT], tokens[None, rp.PROBE_CONTEXT:]
    cache = new_cache(model)
    with torch.inference_mode():
        model(input_ids=context, cache=cache, use_cache=True)

        def run(path: str, n: int) -> None:
            if path == "stock":
                model(input_ids=block[:, :n], cache=cache, use_cache=True)
            else:
                _split(parts, block[:, :n], None, None, cache, False)
            cache.crop(-n)

        return rp.probe_ms(run, range(1, rows.LIMIT + 1), device=device)


def row_paths(model) -> rp.RowPaths:
    """The path `model`'s passes take per row count at the current thread count: from the cache, else probed once
    (a few seconds for SmolLM2-135M) and kept; forced by TEVVIZ_ROW_PATHS."""
    if not takes_split(model):
        return rp.RowPaths()
    threads = torch.get_num_threads()
    known = _PATHS.setdefault(model, {})
    if threads not in known:
        mode = rp.mode()
        counts = range(1, rows.LIMIT + 1)
        if mode in ("few", "stock"):
            known[threads] = rp.RowPaths(frozenset(counts) if mode == "few" else frozenset(), {}, mode)
        else:
            path = rp.cache_file(model)
            paths = rp.read_cached(path) if mode == "auto" else None
            if paths is None or set(paths.ms) != set(counts):
                logger.info("timing the target's passes of 1-%d tokens both ways, once for this machine", rows.LIMIT)
                ms = _probe(model)
                paths = rp.RowPaths(rp.choose(ms), ms, "probe")
                rp.write_cached(path, paths)
            known[threads] = paths
    return known[threads]


class TargetPass:
    """One target forward on a cache: the split pass for passes of at most few_rows.LIMIT tokens where the
    model takes it and its row-path choice says it pays (`path="auto"`), or always (`"few_rows"`) or never
    (`"stock"`); the model's own forward otherwise (a prefill, large trees, other families, accelerators)."""

    def __init__(self, model, path: str = "auto"):
        if path not in ("auto", *rp.PATHS):
            raise ValueError(f"path must be auto, stock or few_rows, not {path!r}")
        self.model = model
        self.split = path != "stock" and takes_split(model)
        self.parts = _parts(model) if self.split else None  # resolved once, not every round
        self.paths = row_paths(model) if self.split and path == "auto" else None  # None: every count it can

    def __call__(self, ids: torch.Tensor, mask, positions, cache, hidden: bool = False, logits: bool = True):
        """The pass's output (logits, hidden states); `logits=False` (a prefill, whose logits nobody reads) leaves
        out the output layer where the split pass is taken, and its logits are then None."""
        n = ids.shape[1]
        # LIMIT is read here, not at construction: a benchmark sets it to 0 to time the model's own layers.
        if self.split and (not logits or (n <= rows.LIMIT and (self.paths is None or self.paths.takes(n)))):
            return _split(self.parts, ids, mask, positions, cache, hidden, logits)
        return self.model(input_ids=ids, attention_mask=mask, position_ids=positions, cache=cache, use_cache=True,
                          output_hidden_states=hidden)
