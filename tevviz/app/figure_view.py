"""A plotly view the browser keeps: one chart per component, updated in place with `Plotly.react`.

gr.Plot re-mounts its chart for every new value and draws it twice (docs/app-latency.md), which is most of what
a Step costs in a browser. This view is a gr.HTML whose template never changes, so gradio leaves its DOM alone;
its script draws the figure JSON it is given (`figure_json`) into the same chart each time the value changes.
plotly.js comes from the plotly package on disk, so the page needs no network.

Gradio's plot components send no click events, so the view is also the bridge back to the server: a click on a point
with `customdata` fires the component's `select` event with {"key": customdata} (`clicks=True`); the tree view also
fires `key_up` with {"key": ...} for the keys that step through rounds and tokens ("s" presses Step), wherever the focus
is but in a text field ({"key": "Enter", "value": ...} from the round box), and `apply` with {"width": px, "planned":
the shown figure's px or null} when its width changes (`keys=True`). Any view fires `apply` when a figure comes laid
out for another width than the view's (its `layout.meta.width`) or when its room changes under such a figure, so the
server lays labels out for the room they really have, and `select` on a click where the figure asks for it
(`layout.meta.clicks`).
"""

from __future__ import annotations

import functools
from pathlib import Path

import gradio as gr
import plotly

PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"

# Relative to the page, so the app also works under a root path (behind a proxy).
_HEAD = f'<script src="gradio_api/file={PLOTLY_JS.as_posix()}"></script>'

# The top padding keeps the component's label badge off the figure's title; a figure wider than its room scrolls.
_TEMPLATE = '<div class="tv-figure" style="padding-top: 30px; overflow-x: auto; overflow-y: hidden"></div>'

FITS = 8  # px a figure's planned width may differ from its view's and still fit it (no redraw asked or made)
STEP_KEYS = ("ArrowLeft", "ArrowRight", "ArrowUp", "ArrowDown", "Home", "End", "j", "k")
ROUND_BOX = "round-slider"  # elem_id of the round slider, whose number box takes Enter

# `watch` runs the callback after gradio has copied the new value into `props`. gr.Plot loads its own plotly.js
# (another version) as window.Plotly once one is shown (the Scan tab's); a chart drawn by one version and redrawn by
# the other went blank, so the views keep the plotly.js of their head, taken before any gr.Plot is shown.
_DRAW = """
const Plotly = window.__tevvizPlotly || (window.__tevvizPlotly = window.Plotly);
const chart = element.querySelector('.tv-figure');
const config = {displaylogo: false, responsive: true};
let bound = false, planned = null, view = null;
const askWidth = () => {
  if (planned && element.clientWidth > 0 && Math.abs(planned - element.clientWidth) > FITS_PX) {
    trigger('apply', {width: Math.round(element.clientWidth), planned});  // laid out for another width: ask again
  }
};
const draw = () => {
  const text = props.value;
  if (!text) { Plotly.purge(chart); bound = false; view = null; return; }
  const fig = typeof text === 'string' ? JSON.parse(text) : text;
  const meta = (fig.layout && fig.layout.meta) || {};
  // A width report's redraw answers for the view shown when it was asked (the state the server read then): where a
  // Step or a restored link drew another view meanwhile, it is dropped, and that view asks for its own width.
  if (meta.resized && meta.view && view && meta.view !== view) { askWidth(); return; }
  view = meta.view || null;
  // A figure laid out for another width is drawn afresh: redrawn in place, the legend kept the place its old rows had
  // pushed it to and covered the lowest row of nodes.
  if (planned !== null && meta.width && meta.width !== planned) { Plotly.purge(chart); bound = false; }
  planned = meta.width || null;
  Plotly.react(chart, fig.data || [], fig.layout || {}, config).then(() => {
    // Only a view on show asks (a closed accordion's is 0 px wide).
    askWidth();
    if (bound || !(CLICKS || meta.clicks)) return;
    bound = true;
    chart.on('plotly_click', (event) => {
      const point = event.points && event.points[0];
      if (point && point.customdata !== undefined && point.customdata !== null) {
        trigger('select', {key: point.customdata});
      }
    });
  });
};
draw();
watch('value', draw);
// A view asks again when its room changes (a window resized, a hidden tab shown: 0 px wide until then), not only
// when the next figure comes: the tree view at every new width (the server keeps it for the next figure), any other
// view only where its figure was laid out for another width. Once per new width: a pair laid out for the narrower of
// its two views leaves the wider one asking nothing more.
let asked = 0, waiting = null;
new ResizeObserver(() => {
  clearTimeout(waiting);
  waiting = setTimeout(() => {
    const width = Math.round(element.clientWidth);
    const stale = KEYS || (planned && Math.abs(width - planned) > FITS_PX);
    if (width > 0 && stale && Math.abs(width - asked) > FITS_PX) {
      asked = width;
      trigger('apply', {width, planned});  // `planned`: the shown figure's width (null before the first)
    }
  }, 150);
}).observe(element);
"""

_KEYS = """
if (!window.__tevvizKeys) {
  window.__tevvizKeys = true;
  const stepKeys = new Set(STEP_KEYS);
  document.addEventListener('keydown', (e) => {
    const t = e.target, tag = t && t.tagName;
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    if (t && t.closest && t.closest('#ROUND_BOX') && tag === 'INPUT' && t.type === 'number') {
      if (e.key === 'Enter') { e.preventDefault(); trigger('key_up', {key: 'Enter', value: Number(t.value)}); }
      return;
    }
    const typing = t && (t.isContentEditable || tag === 'TEXTAREA' || tag === 'SELECT'
      || (tag === 'INPUT' && !['range', 'checkbox', 'radio', 'button', 'submit'].includes(t.type)));
    if (typing) return;
    if (e.key === 's') {  // Step, from anywhere on the page but a text field
      const step = document.querySelector('#step-btn');
      if (step) { e.preventDefault(); step.click(); }
      return;
    }
    if (!stepKeys.has(e.key)) return;
    e.preventDefault();  // a focused range input would move itself too: the server moves every view at once
    trigger('key_up', {key: e.key});
  });
}
"""


@functools.cache  # gradio appends to one process-wide list on every call: once is enough
def serve_plotly_js() -> None:
    """Let gradio serve plotly.js from the plotly package (call before the Blocks are built)."""
    gr.set_static_paths([PLOTLY_JS])


def figure_view(value: str | None = None, *, label: str, elem_id: str | None = None, clicks: bool = False,
                keys: bool = False) -> gr.HTML:
    """A chart that shows a figure's JSON text (`widgets.figure_json`) and redraws in place when it changes.

    `clicks`: a click on a point fires `select` with its customdata; `keys`: the page's stepping keys fire `key_up`
    and a change of the view's width fires `apply` (one view a page)."""
    script = _DRAW.replace("CLICKS", "true" if clicks else "false").replace("KEYS", "true" if keys else "false")
    script = script.replace("FITS_PX", str(FITS))
    if keys:
        script += _KEYS.replace("STEP_KEYS", repr(list(STEP_KEYS))).replace("ROUND_BOX", ROUND_BOX)
    return gr.HTML(value, label=label, show_label=True, container=True, html_template=_TEMPLATE,
                   js_on_load=script, head=_HEAD, apply_default_css=False, elem_id=elem_id)


MIN_WIDTH, MAX_WIDTH = 200, 20_000  # px a view may report (anything else is no width)


def sent(evt: gr.EventData) -> dict:
    """What the page's script sent with a view's event (`select`: {"key": ...}, `apply`: {"width": ...})."""
    return evt._data if isinstance(evt._data, dict) else {}


def as_width(width) -> int | None:
    """`width` as the px of a view, None where it is no width (not a number, or outside MIN_WIDTH-MAX_WIDTH)."""
    if isinstance(width, bool) or not isinstance(width, (int, float)) or not MIN_WIDTH <= width <= MAX_WIDTH:
        return None
    return int(width)


def reported_width(evt: gr.EventData) -> int | None:
    """The px a view's `apply` event reported, None where it is no width."""
    return as_width(sent(evt).get("width"))
