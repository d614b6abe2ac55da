"""The tevviz engine: trees, tree attention, the exit law, verifiers, decoding and training.

The engine lives in rooms, one folder each (README.md, *Layout*). The names below load their module (and torch) on
first use, so the torch-free modules (the `records` room, `tevviz.engine.errors`, `tevviz.engine.load.pairs`) import
without it.
"""

from __future__ import annotations

import importlib

_HOMES = {
    "VERIFIERS": "verify.verifiers",
    "BuilderConfig": "draft.builders",
    "DecodeConfig": "decode.session",
    "DecodeSession": "decode.session",
    "ModelPair": "load.models",
    "ModelSource": "load.models",
    "RoundRecord": "records.records",
    "SamplingConfig": "core.sampling",
    "TevvizError": "errors",
    "autoregressive": "decode.plain",
    "best_plain": "decode.plain",
    "encode_prompt": "decode.session",
    "load_pair": "load.models",
    "with_draft": "load.models",
    "summarize": "analysis.summary",
    "SessionSummary": "analysis.summary",
}
__all__ = list(_HOMES)


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
