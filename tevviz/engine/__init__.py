"""The tevviz engine: trees, tree attention, the exit law, verifiers, decoding and training.

The names below load their module (and torch) on first use, so the torch-free modules
(`tevviz.engine.records`, `tevviz.engine.summary`, `tevviz.engine.errors`, `tevviz.engine.pairs`) import without it.
"""

from __future__ import annotations

import importlib

_HOMES = {
    "VERIFIERS": "verifiers",
    "BuilderConfig": "builders",
    "DecodeConfig": "session",
    "DecodeSession": "session",
    "ModelPair": "models",
    "ModelSource": "models",
    "RoundRecord": "records",
    "SamplingConfig": "sampling",
    "TevvizError": "errors",
    "autoregressive": "session",
    "encode_prompt": "session",
    "load_pair": "models",
    "with_draft": "models",
    "summarize": "summary",
    "SessionSummary": "summary",
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
