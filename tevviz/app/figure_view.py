"""A plotly view the browser keeps: one chart per component, updated in place with `Plotly.react`.

gr.Plot re-mounts its chart for every new value and draws it twice (docs/app-latency.md), which is most of what
a Step costs in a browser. This view is a gr.HTML whose template never changes, so gradio leaves its DOM alone;
its script draws the figure JSON it is given (`figure_json`) into the same chart each time the value changes.
plotly.js comes from the plotly package on disk, so the page needs no network.
"""

from __future__ import annotations

import functools
from pathlib import Path

import gradio as gr
import plotly

PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"

# Relative to the page, so the app also works under a root path (behind a proxy).
_HEAD = f'<script src="gradio_api/file={PLOTLY_JS.as_posix()}"></script>'

_TEMPLATE = '<div class="tv-figure"></div>'

# `watch` runs the callback after gradio has copied the new value into `props`.
_SCRIPT = """
const chart = element.querySelector('.tv-figure');
const config = {displaylogo: false, responsive: true};
const draw = () => {
  const text = props.value;
  if (!text) { Plotly.purge(chart); return; }
  const fig = typeof text === 'string' ? JSON.parse(text) : text;
  Plotly.react(chart, fig.data || [], fig.layout || {}, config);
};
draw();
watch('value', draw);
"""


@functools.cache  # gradio appends to one process-wide list on every call: once is enough
def serve_plotly_js() -> None:
    """Let gradio serve plotly.js from the plotly package (call before the Blocks are built)."""
    gr.set_static_paths([PLOTLY_JS])


def figure_view(value: str | None = None, *, label: str, elem_id: str | None = None) -> gr.HTML:
    """A chart that shows a figure's JSON text (`widgets.figure_json`) and redraws in place when it changes."""
    return gr.HTML(value, label=label, show_label=True, container=True, html_template=_TEMPLATE,
                   js_on_load=_SCRIPT, head=_HEAD, apply_default_css=False, elem_id=elem_id)
