"""The tevviz web app, split by job: `state` (what is kept between clicks), `source` (the models),
`controller` (one method per user action), `views` (markdown and figures, no gradio), one module per tab,
and `demo` (`build_demo`, `launch`).

`build_demo`, `launch` and `launch_options` load gradio on first use, so the gradio-free parts import without it.
"""

from __future__ import annotations

__all__ = ["build_demo", "launch", "launch_options"]


def __getattr__(name: str):
    if name in __all__:
        from . import demo

        return getattr(demo, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
