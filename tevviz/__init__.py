"""tevviz: an interactive visual debugger for draft trees in speculative decoding.

The Python API (docs/python-api.md). Names load their module on first use: `import tevviz`
loads no model and not even torch.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_HOMES = {
    "load": "api",  # a named pair or your own target/draft
    "session": "api",  # a DecodeSession with the CLI's defaults
    "figure": "api",  # a round's tree figure, ghosts included
    "report": "api",  # the self-contained HTML session report
    "compare": "api",  # two runs compared round by round
    "compare_trees": "api",  # a round of two runs in one shared layout
    "DecodeSession": "engine.decode.session",
    "DecodeConfig": "engine.decode.session",
    "SamplingConfig": "engine.core.sampling",
    "BuilderConfig": "engine.draft.builders",
    "ModelPair": "engine.load.models",
    "RoundRecord": "engine.records.records",
    "OptimalTree": "engine.records.records",
    "CoverageGap": "engine.records.records",
    "summarize": "engine.analysis.summary",
    "SessionSummary": "engine.analysis.summary",
    "optimal_tree": "engine.core.optimal",
    "load_session": "engine.records.io",
    "TevvizError": "engine.errors",
}
_RENAMED = {"load_session": "load"}  # API name -> name in its module
__all__ = ["__version__", *list(_HOMES)]  # noqa: PLE0604 - the lazy names are strings


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(f".{_HOMES[name]}", __name__)
    value = getattr(module, _RENAMED.get(name, name))
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
