"""Two runs -> one self-contained HTML page: their settings, where their texts part, acceptance by depth of both, a
table of the rounds, and each round's two trees in one shared layout, with hover and selection linked.

Built as report.py builds the one-run page (plotly.js and the data gzipped and base64-encoded in the page, unpacked by
the browser's DecompressionStream). The links: hovering a node in either tree shows the same node's hover in the other
and marks its depth in the table; clicking a node selects it in both trees and the details below follow; clicking a
row of the round table shows that round; the round slider and the colour choice drive both trees.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from tevviz.engine.analysis.run_compare import (
    A_ONLY,
    B_ONLY,
    BOTH,
    SETTING_KEYS,
    RoundComparison,
    RunComparison,
    rounds_table,
)
from tevviz.engine.analysis.run_depths import depth_analysis
from tevviz.engine.analysis.speed import speed_breakdown
from tevviz.engine.analysis.table import Column
from tevviz.files import atomic_write
from tevviz.render.colours import colorscale_of
from tevviz.render.compare_figure import metric_values, node_hover, shared_layout, side_figure_dicts
from tevviz.render.graph import METRICS
from tevviz.render.page import PAGE, STYLE, gzip_base64, plotly_blob, unpack_script
from tevviz.render.report import _esc, _setting
from tevviz.render.table import cell
from tevviz.render.table import html as table_html

COLOUR_METRICS = ("P", "w", "q")  # the metrics the page can colour both trees by, besides the side
CURVE_COLOURS = ("#1f77b4", "#ff7f0e")


def compare_report_html(cmp: RunComparison, title: str | None = None, files: tuple[str, str] = ("A", "B")) -> str:
    """The whole comparison page as one HTML string."""
    names = (cmp.a.name, cmp.b.name)
    rounds = [cmp.round(k) for k in cmp.round_indices]
    payload = {
        "names": names,
        "depth": _depth_figure(cmp),
        "metrics": {m: {"label": METRICS[m].label, "colorscale": colorscale_of(METRICS[m].colorscale)}
                    for m in COLOUR_METRICS},
        "rounds": [_round(cmp, c, names) for c in rounds],
    }
    title = title or f"tevviz compare: {Path(files[0]).name} (A) against {Path(files[1]).name} (B)"
    body = [
        f"<h1>{_esc(title)}</h1>",
        f'<p id="divergence"><b>{_esc(cmp.divergence.sentence)}</b></p>',
        _settings(cmp, files),
        _texts(cmp),
        _summary(cmp),
        '<p class="note" id="status">loading the figures…</p>',
        _tree_controls(rounds),
        _round_table(rounds),
    ]
    data = json.dumps(payload, separators=(",", ":"), allow_nan=False)
    return PAGE.format(title=_esc(title), style=STYLE + EXTRA_STYLE, body="\n".join(b for b in body if b),
                       plotlyjs=plotly_blob(), data=gzip_base64(data), script=SCRIPT)


def write_compare_report(cmp: RunComparison, path: str | Path, title: str | None = None,
                         files: tuple[str, str] = ("A", "B")) -> int:
    """Write the page to `path`; returns its size in bytes."""
    return atomic_write(path, compare_report_html(cmp, title, files).encode("utf-8"))


# --- data for the page's script -------------------------------------------------------------------------------------


def _round(cmp: RunComparison, c: RoundComparison, names: tuple[str, str]) -> dict[str, Any]:
    """One round: both side figures (coloured by side), each metric's values per side and the nodes' details."""
    ra = next(r for r in cmp.a.rounds if r.index == c.index)
    rb = next(r for r in cmp.b.rounds if r.index == c.index)
    tree = shared_layout(ra, rb)
    fa, fb = side_figure_dicts(ra, rb, names, tree=tree)
    return {
        "index": c.index,
        "caption": _caption(c),
        "figures": [fa, fb],
        "values": {m: list(metric_values(tree, m)) for m in COLOUR_METRICS},
        "nodes": [{"depth": n.depth, "side": n.side, "hover": node_hover(tree, n.id, names)} for n in tree.nodes],
    }


def _caption(c: RoundComparison) -> str:
    context = {True: "same context", False: "different contexts", None: "contexts not known"}[c.same_context]
    parts = [f"round {c.index} ({context})", (f"nodes: {c.count(BOTH)} both, {c.count(A_ONLY)} A only, "
             f"{c.count(B_ONLY)} B only"), f"C_p {_n(c.C_p.a)} / {_n(c.C_p.b)} ({_n(c.C_p.diff, True)})",
             f"E[L] {_n(c.expected_length.a)} / {_n(c.expected_length.b)} ({_n(c.expected_length.diff, True)})",
             f"L {c.block_length.a} / {c.block_length.b}"]
    return ", ".join(parts)


def _n(x: float | None, sign: bool = False) -> str:
    return cell(x, Column("", "", "signed" if sign else "number"))


def _depth_figure(cmp: RunComparison) -> dict[str, Any]:
    """Acceptance by depth of both runs: the conditional curve solid, the marginal dashed, standard errors as bars."""
    rows = cmp.table.rows
    depths = [r.depth for r in rows]
    traces = []
    for kind, dash in (("conditional", "solid"), ("marginal", "dash")):
        for side, name in enumerate((cmp.a.name, cmp.b.name)):
            est = [getattr(getattr(r, kind), "ab"[side]) for r in rows]
            traces.append({"type": "scatter", "mode": "lines+markers", "name": f"{name} {kind}", "x": depths,
                           "y": [e.mean for e in est], "line": {"color": CURVE_COLOURS[side], "dash": dash},
                           "error_y": {"type": "data", "array": [e.se or 0.0 for e in est], "visible": True},
                           "customdata": depths,
                           "hovertemplate": f"{name} {kind} at depth %{{x}}: %{{y:.3f}}<extra></extra>"})
    return {"data": traces, "layout": {
        "height": 360, "margin": {"l": 50, "r": 20, "t": 40, "b": 40},
        "title": {"text": "acceptance by depth: conditional (solid) and marginal (dashed), ± 1 SE"},
        "xaxis": {"title": {"text": "depth d"}, "dtick": 1}, "yaxis": {"title": {"text": "share"}, "range": [0, 1.05]},
        "legend": {"orientation": "h", "y": -0.2}}}


# --- HTML sections --------------------------------------------------------------------------------------------------


def _settings(cmp: RunComparison, files: tuple[str, str]) -> str:
    a, b = cmp.a.meta, cmp.b.meta
    keys = [k for k in SETTING_KEYS if k in a or k in b]
    differ = {k.split(".")[0] for k, _, _ in cmp.settings}
    rows = [f"<tr><th>file</th><td>{_esc(files[0])}</td><td>{_esc(files[1])}</td></tr>"]
    rows += [f'<tr{" class=differs" if k in differ else ""}><th>{_esc(k.replace("_", " "))}</th>'
             f"<td>{_esc(_setting(a.get(k, '–')))}</td><td>{_esc(_setting(b.get(k, '–')))}</td></tr>" for k in keys]
    head = f"<tr><th></th><th>{_esc(cmp.a.name)}</th><th>{_esc(cmp.b.name)}</th></tr>"
    return f'<h2>Settings</h2>\n<table class="kv" id="settings">{head}{"".join(rows)}</table>'


def _texts(cmp: RunComparison) -> str:
    a, b = cmp.a, cmp.b
    prompt = (f'<h2>Prompt</h2>\n<pre id="prompt">{_esc(a.prompt)}</pre>' if cmp.divergence.same_prompt else
              f'<h2>Prompts (they differ)</h2>\n<pre id="prompt">{_esc(a.prompt)}</pre>\n<pre>{_esc(b.prompt)}</pre>')
    return (f'{prompt}\n<h2>Generated texts</h2>\n<div class="pair"><div><h3>{_esc(a.name)}</h3>'
            f'<pre id="text-a">{_esc(a.text)}</pre></div><div><h3>{_esc(b.name)}</h3>'
            f'<pre id="text-b">{_esc(b.text)}</pre></div></div>')


def _summary(cmp: RunComparison) -> str:
    depths, means = depth_analysis(cmp.table, cmp.a.name, cmp.b.name)
    speeds = [speed_breakdown(run.rounds) for run in (cmp.a, cmp.b)]
    speed = ""
    if all(s.tokens and s.recorded_ms_per_token > 0 for s in speeds):
        per_token = lambda s: " / ".join(f"{v:.2f}" for v in s.stage_ms_per_token.values())
        speed = ('<p class="note">ms per token from the recorded stage times (draft / target / verify / other): '
                 + ", ".join(f"{_esc(run.name)} {s.recorded_ms_per_token:.2f} ({per_token(s)})"
                             for run, s in zip((cmp.a, cmp.b), speeds))
                 + f", B − A {speeds[1].recorded_ms_per_token - speeds[0].recorded_ms_per_token:+.2f}</p>")
    return (f"<h2>Both runs</h2>\n{table_html(means)}\n{speed}\n"
            f'<div class="plot" id="depth"></div>\n{table_html(depths)}')


def _tree_controls(rounds: list[RoundComparison]) -> str:
    if not rounds:
        return '<p class="note">The two runs have no round index in common: no trees to compare.</p>'
    options = '<option value="side" selected>side (both / A only / B only)</option>' + "".join(
        f'<option value="{m}">{_esc(METRICS[m].label)}</option>' for m in COLOUR_METRICS)
    return ("<h2>Round by round</h2>\n<p class=\"note\">Both trees in one layout: a node sits at the same place in "
            "each, matched by its token path. Hover a node to see it in both; click it to select it in both.</p>\n"
            f'<div class="controls"><label>colour by <select id="metric">{options}</select></label>'
            f'<label>round <input type="range" id="round" min="0" max="{len(rounds) - 1}" value="0" step="1">'
            f'</label><span id="caption">{_esc(_caption(rounds[0]))}</span></div>\n'
            '<div class="pair"><div class="plot" id="tree-a"></div><div class="plot" id="tree-b"></div></div>\n'
            '<div id="details" class="note">Click a node to select it in both trees.</div>')


def _round_table(rounds: list[RoundComparison]) -> str:
    """The rounds as `tevviz compare` tabulates them (run_compare.rounds_table), a row id a round for the script."""
    if not rounds:
        return ""
    table = replace(rounds_table(rounds), row_ids=tuple(f"round-{c.index}" for c in rounds))
    return f'<h2>Rounds</h2>\n<p class="note">Click a row to show that round.</p>\n{table_html(table, titled=False)}'


EXTRA_STYLE = """
.pair { display: grid; grid-template-columns: 1fr 1fr; gap: 1em; }
tr.differs th, tr.differs td { font-weight: bold; }
tr.linked td { background: #fff3c4; }
#rounds tr[id] { cursor: pointer; }
#rounds tr.shown td { background: #e8f0fe; }
#details { white-space: normal; margin-top: 0.5em; }
"""

# The side figures' node traces are "in both", "<name> only", "only in <other> (not drafted here)"; a metric recolours
# the first two with that metric's values of this side, on one scale over both sides (as compare_figure.py does).
SCRIPT = unpack_script("figures", "The tables are complete.", """
  const config = {displaylogo: false, responsive: true};
  await Plotly.newPlot("depth", data.depth.data, data.depth.layout, config);
  if (!data.rounds.length) return;

  const ids = ["tree-a", "tree-b"];
  const slider = document.getElementById("round"), select = document.getElementById("metric");
  const caption = document.getElementById("caption"), details = document.getElementById("details");
  const state = {k: 0, selected: null};
  const ownNames = data.names.map((n) => ["in both", `${n} only`]);

  function treeFigure(k, side, metric, selected) {
    const round = data.rounds[k], fig = structuredClone(round.figures[side]);
    if (metric !== "side") {
      const style = data.metrics[metric], values = round.values[metric];
      const seen = values.flat().filter((x) => x !== null);
      const lo = seen.length ? Math.min(...seen) : 0, hi = seen.length ? Math.max(...seen) : 1;
      for (const trace of fig.data) {
        if (!ownNames[side].includes(trace.name)) continue;
        trace.marker.color = trace.customdata.map((v) => values[side][v]);
        Object.assign(trace.marker, {colorscale: style.colorscale, cmin: lo, cmax: hi,
                                     showscale: trace.name === "in both",
                                     colorbar: {title: {text: style.label, side: "right"}}});
      }
    }
    if (selected !== null) {
      const at = locate(fig.data, selected);
      if (at) {
        const t = fig.data[at.curveNumber];
        fig.data.push({type: "scatter", mode: "markers", name: "selected", x: [t.x[at.pointNumber]],
                       y: [t.y[at.pointNumber]], hoverinfo: "skip", showlegend: false,
                       marker: {symbol: "circle-open", size: 34, color: "black", line: {width: 3}}});
      }
    }
    fig.layout.width = undefined;
    fig.layout.autosize = true;
    fig.layout.title = {text: data.names[side], x: 0, xanchor: "left"};
    return fig;
  }

  function locate(traces, v) {
    for (let c = 0; c < traces.length; c++) {
      const cd = traces[c].customdata;
      if (!cd || traces[c].name.endsWith("bonus") || traces[c].name === "bonus") continue;
      const p = cd.indexOf(v);
      if (p >= 0) return {curveNumber: c, pointNumber: p};
    }
    return null;
  }

  function showDetails() {
    const round = data.rounds[state.k];
    if (state.selected === null || state.selected >= round.nodes.length) {
      details.textContent = "Click a node to select it in both trees.";
      return;
    }
    details.innerHTML = round.nodes[state.selected].hover;
  }

  function markDepth(depth) {
    document.querySelectorAll("#depths tr.linked").forEach((tr) => tr.classList.remove("linked"));
    const row = depth === null ? null : document.getElementById(`depth-${depth}`);
    if (row) row.classList.add("linked");
  }

  async function show() {
    state.k = Number(slider.value);
    caption.textContent = data.rounds[state.k].caption;
    document.querySelectorAll("#rounds tr[id]").forEach(
      (tr) => tr.classList.toggle("shown", tr.id === `round-${data.rounds[state.k].index}`));
    for (let side = 0; side < 2; side++) {
      const fig = treeFigure(state.k, side, select.value, state.selected);
      await Plotly.react(ids[side], fig.data, fig.layout, config);
    }
    showDetails();
  }

  let linking = false;  // a hover this script makes in the other tree must not echo back
  function link(side) {
    const gd = document.getElementById(ids[side]), other = document.getElementById(ids[1 - side]);
    gd.on("plotly_hover", (ev) => {
      if (linking) return;
      const v = ev.points[0].customdata;
      if (v === null || v === undefined) return;
      const node = data.rounds[state.k].nodes[v];
      markDepth(node ? node.depth : null);
      const at = locate(other.data, v);
      linking = true;
      try { if (at) Plotly.Fx.hover(other, [at]); else Plotly.Fx.unhover(other); } finally { linking = false; }
    });
    gd.on("plotly_unhover", () => {
      if (linking) return;
      markDepth(null);
      linking = true;
      try { Plotly.Fx.unhover(other); } finally { linking = false; }
    });
    gd.on("plotly_click", (ev) => {
      const v = ev.points[0].customdata;
      if (v === null || v === undefined) return;
      state.selected = state.selected === v ? null : v;
      show();
    });
  }

  slider.addEventListener("input", () => { state.selected = null; show(); });
  select.addEventListener("change", show);
  document.querySelectorAll("#rounds tr[id]").forEach((tr) => tr.addEventListener("click", () => {
    slider.value = data.rounds.findIndex((round) => `round-${round.index}` === tr.id);
    state.selected = null;
    show();
  }));
  window.tevvizCompare = {state, treeFigure, show, locate,
                          select: (v) => { state.selected = v; return show(); }};
  await show();
  link(0);
  link(1);
  performance.mark("tevviz:trees-drawn");
})();
""")
