"""What the tabs share: components by name, the progress marker, the queue settings and the error path."""

from __future__ import annotations

import functools
from collections.abc import Iterable

import gradio as gr
import orjson

from .state import AppState
from .stops import Stopped

PROGRESS = gr.Progress()  # default marking the handlers' progress parameter; Gradio passes a fresh tracker per call
MODEL_WORK = {"concurrency_id": "model", "concurrency_limit": 1}  # one model job at a time, queued
LIGHT = {"concurrency_limit": None}  # browsing and formatting: no queueing behind the models
# A view's own events (keys, clicks, widths, the round slider): one at a time, in the order the page sent them, so
# each reads the state the one before it wrote and no stale answer lands after a newer one; "multiple" because
# gradio's "always_last" re-sends the pending event's data (a Home pressed while a "j" was answered became a "j").
BROWSE_QUEUE = {"concurrency_id": "browse", "concurrency_limit": 1}  # (the views' settings: a change re-reads its box)
BROWSE = {**BROWSE_QUEUE, "trigger_mode": "multiple"}


class Panel:
    """A tab's components by name: `panel.tree` for one, `panel.take(NAMES)` for an input or output list."""

    def __init__(self, **components):
        self.__dict__.update(components)

    def take(self, names: Iterable[str]) -> list:
        return [getattr(self, n) for n in names]

    def updates(self, **values) -> dict:
        """Gradio's {component: value} form of values given by component name."""
        return {getattr(self, n): v for n, v in values.items()}


@functools.cache
def _template() -> dict:
    import plotly.io as pio

    return pio.templates[pio.templates.default].to_plotly_json()


def figure_json(fig: dict) -> str:
    """A figure dict as JSON text, serialised once with orjson: what `go.Figure(fig).to_json()` would give (the
    default template included), without building and validating a Figure per Step."""
    layout = fig.get("layout", {})
    if "template" not in layout:
        layout = {**layout, "template": _template()}
    return orjson.dumps({"data": fig.get("data", []), "layout": layout}, option=orjson.OPT_SERIALIZE_NUMPY).decode()


def current(st: AppState | None) -> AppState:
    """The browser's state; a fresh one before its first action."""
    return st if st is not None else AppState()


def failed(error, e: Exception) -> dict:
    """Show `e` in the `error` box and as a toast; nothing else changes. A Stop the user pressed is no error."""
    if isinstance(e, Stopped):
        said = str(e)[0].upper() + str(e)[1:] + "."
        gr.Info(said)
        return {error: said}
    gr.Warning(str(e))
    return {error: f"Error: {e}"}


def stopper(ctl, *actions: str):
    """A Stop button's handler (inputs: the gr.State; no outputs; LIGHT, so it is not queued behind the work it
    stops): this browser's running `actions` stop at their next check, and their handlers say what was kept."""

    def stop(st) -> None:
        ctl.stop(current(st), *actions)

    return stop


def remember(memo: dict, key, value, cap: int) -> None:
    """`memo[key] = value`, the oldest entries forgotten past `cap` (what the server keeps per browser session)."""
    memo.pop(key, None)
    while len(memo) >= cap:
        memo.pop(next(iter(memo)))
    memo[key] = value


def scroll_to_js(target: str, unless: str | None = None) -> str:
    """Browser code for an event's `.then(js=...)`: the page goes to the element `target` (a CSS selector) where it is
    shown (a hidden tab's has no offsetParent), not where the element `unless` says something (a refusal's reason,
    said beside the button pressed)."""
    refused = f"const refused = document.querySelector({unless!r}); if (refused && refused.innerText.trim()) return;"
    return ("() => { " + (refused if unless else "") + f" const el = document.querySelector({target!r});"
            " if (el && el.offsetParent) el.scrollIntoView({behavior: 'smooth', block: 'start'}); }")
