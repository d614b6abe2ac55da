"""Imported session -> one self-contained HTML page: settings, text, summary, statistics and every round's tree.

The page needs no network. The settings and texts are plain HTML, the summary and round table the engine's typed
tables (engine/analysis/session_tables.py) as render/table.py writes them; plotly.js and the figures' data
(one JSON object) are embedded as two gzip + base64 blobs, which the page's script unpacks with the browser's
DecompressionStream before it evaluates plotly.js and draws: 100 rounds at B = 64 take 2.6 MB instead of 7.2 MB, of
which plotly.js is 2.0 MB (4.8 MB unpacked).

Each round's tree is stored once, as `tree_figure_dict` draws it for the default metric with the node traces taken
apart into per-node columns (position, label, hover) and the value of every metric; the page's script puts the node
traces back together for the chosen metric, exactly as `tree_figure_dict(..., rank_by=DEFAULT_METRIC)` would: one layout
and one set of labels per round whatever the colour (tests/render/test_report.py compares the two in a browser).
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import networkx as nx

from tevviz.engine.analysis.session_tables import rounds_table, summary_table
from tevviz.engine.records.io import ImportedSession
from tevviz.engine.records.records import CoverageGap, RoundRecord, expected_length_text
from tevviz.engine.records.round_numbers import NUMBERS
from tevviz.files import atomic_write
from tevviz.render.colours import colour_bar
from tevviz.render.graph import METRICS, node_metric, round_graph
from tevviz.render.page import PAGE, STATUS, STYLE, gzip_base64, plotly_blob, unpack_script
from tevviz.render.stats import (
    acceptance_by_depth_figure,
    block_length_histogram,
    coverage_figure,
    exit_mass_by_depth_figure,
)
from tevviz.render.table import html as table_html
from tevviz.render.tree_figure import tree_figure_dict
from tevviz.render.tree_traces import NO_VALUE_COLOUR

DEFAULT_METRIC = "P"
NODE_TRACES = ("nodes", "no value")  # the traces of tree_figure_dict that depend on the metric
PER_NODE = ("x", "y", "text", "hovertext", "customdata", "marker", "name")  # their fields rebuilt per metric
META_ORDER = ("target", "draft", "dtype", "device", "sampling", "builder", "verifier", "seed", "max_new_tokens", "chat",
              "tevviz")
STATS_HEIGHT = 380


def report_html(imported: ImportedSession, title: str | None = None, engines: Sequence = ()) -> str:
    """The whole report as one HTML string (a round or trace file gives the sections it has data for); `engines`:
    serving engines' runs (EngineAcceptance) whose per-depth curves overlay the acceptance figure."""
    rounds = imported.rounds
    figures = _statistics(rounds, engines)
    styles, trees = round_trees(rounds)
    payload = {"figures": figures, "metrics": styles, "noValue": NO_VALUE_COLOUR, "trees": trees}
    title = title or _default_title(imported)
    body = [
        f"<h1>{_esc(title)}</h1>",
        _settings(imported.meta),
        _texts(imported),
        _summary(rounds),
        STATUS,
        _figure_divs(figures),
        _tree_controls(len(rounds), payload["trees"][0]["caption"] if rounds else ""),
        _round_table(rounds),
    ]
    data = json.dumps(payload, separators=(",", ":"), allow_nan=False)
    return PAGE.format(title=_esc(title), style=STYLE, body="\n".join(b for b in body if b), plotlyjs=plotly_blob(),
                       data=gzip_base64(data), script=SCRIPT)


def write_report(imported: ImportedSession, path: str | Path, title: str | None = None, engines: Sequence = ()) -> int:
    """Write the report to `path`; returns its size in bytes."""
    return atomic_write(path, report_html(imported, title, engines).encode("utf-8"))


# --- data for the page's script -------------------------------------------------------------------------------------


def _statistics(rounds: list[RoundRecord], engines: Sequence = ()) -> dict[str, dict]:
    """The session figures worth drawing for these rounds, by div id, as plain {"data", "layout"} dicts."""
    if not rounds:
        return {}
    layout = {"height": STATS_HEIGHT}
    figures = {"block-length": block_length_histogram(rounds, layout),
               "acceptance": acceptance_by_depth_figure(rounds, layout, engines=engines)}
    if any(r.C_p is not None for r in rounds):
        figures["exit-mass"] = exit_mass_by_depth_figure(rounds, layout)
        figures["coverage"] = coverage_figure(rounds, layout)
    return {key: fig.to_plotly_json() for key, fig in figures.items()}


def round_trees(rounds: list[RoundRecord]) -> tuple[dict[str, dict], list[dict[str, Any]]]:
    """The metrics' styles (read off the first round) and every round's tree as the page's script draws them (the
    scan report's too); each round is turned into its dict and its graph once, and its figure, colours and styles
    all read those."""
    styles, trees = {}, []
    for r in rounds:
        rd = r.to_dict()
        G = round_graph(rd)
        if not trees:
            styles = _metric_styles(rd, G)
        trees.append(_tree(r, rd, G))
    return styles, trees


def _metric_styles(rd: dict, G: nx.DiGraph) -> dict[str, dict]:
    """Per metric, the colourscale and colour bar of the node trace, as tree_figure_dict writes them (`rd` a round's
    dict, `G` its graph)."""
    styles = {}
    for metric in METRICS:
        marker = _node_traces(tree_figure_dict(rd, metric, graph=G)["data"])[0]["marker"]
        styles[metric] = {"colorscale": marker["colorscale"], "colorbar": marker["colorbar"]}
    return styles


def _tree(record: RoundRecord, rd: dict, G: nx.DiGraph) -> dict[str, Any]:
    """One round's tree (`rd` its dict, `G` its graph), stored once: the metric-free traces, the layout, per-node
    columns and every metric's values."""
    gap = record.coverage_gap()
    # Ghost branches (the optimal tree's nodes this tree lacks) are metric-free traces: drawn whatever the colour.
    ghosts = [asdict(g) for g in gap.ghosts] if gap is not None else ()
    figure = tree_figure_dict(rd, DEFAULT_METRIC, ghosts=ghosts, graph=G)
    node_traces = _node_traces(figure["data"])
    at = figure["data"].index(node_traces[0])
    keys = ("x", "y", "hovertext", "text") if "text" in node_traces[0] else ("x", "y", "hovertext")  # text: labelled
    columns = {key: [None] * record.size for key in keys}
    for trace in node_traces:
        for key, column in columns.items():
            for v, value in zip(trace["customdata"], trace[key]):
                column[v] = value
    template = {k: v for k, v in node_traces[0].items() if k not in PER_NODE}
    template["marker"] = {"size": node_traces[0]["marker"]["size"], "line": node_traces[0]["marker"]["line"]}
    values, bars = {}, {}
    for m in METRICS:  # the colours as the node trace draws them (a log scale where it reads better): shown nodes only
        shown = [v for v in G if columns["x"][v] is not None and node_metric(G.nodes[v], m) is not None]
        colours, bars[m] = colour_bar([node_metric(G.nodes[v], m) for v in shown], m)
        values[m] = [None] * record.size
        for v, c in zip(shown, colours):
            values[m][v] = c
    return {
        "caption": _caption(record, gap),
        "fixed": [t for t in figure["data"] if t["name"] not in NODE_TRACES],
        "at": at,
        "template": template,
        "nodes": columns,
        "values": values,  # null: no value, or a node folded out of the drawing (its x is null too)
        "bars": bars,
        "layout": figure["layout"],
    }


def _node_traces(traces: list[dict]) -> list[dict]:
    return [t for t in traces if t["name"] in NODE_TRACES]


def _caption(r: RoundRecord, gap: CoverageGap | None) -> str:
    parts = [f"round {r.index}", f"{r.size} nodes", f"depth {max(r.depths)}", f"exit node {r.exit_node}",
             f"L = {r.block_length}"]
    if r.expected_length is not None:
        parts.append(expected_length_text(r))
    star, lost = NUMBERS["optimal_ceiling"], NUMBERS["gap"]
    if gap is not None and gap.gap is not None:
        parts.append(f"{star.label} = {star.text(star.value(r))}, gap {lost.text(lost.value(r))}")
    elif gap is not None:  # a round the optimal tree does not bound (a sampled chain under speculative sampling)
        parts.append(f"best fixed tree: {star.label} = {star.text(star.value(r))}, not a ceiling here")
    return ", ".join(parts)


# --- HTML sections --------------------------------------------------------------------------------------------------


def _esc(value: Any) -> str:
    return html.escape(str(value))


def _default_title(imported: ImportedSession) -> str:
    meta = imported.meta
    if meta.get("draft") or meta.get("target"):
        # A model's folder name, not its absolute path (the settings table keeps the whole path).
        name = lambda key: Path(str(meta.get(key) or "?").rstrip("/")).name or str(meta.get(key))
        return f"tevviz report: {name('draft')} drafting for {name('target')}"
    return f"tevviz report: {imported.kind}, {len(imported.rounds)} rounds"


def _setting(value: Any) -> str:
    if isinstance(value, Mapping):
        return ", ".join(f"{k} {_setting(v)}" for k, v in value.items())
    if isinstance(value, list):
        return "[" + ", ".join(map(_setting, value)) + "]"
    return str(value)


def _settings(meta: Mapping[str, Any]) -> str:
    if not meta:
        return ""
    keys = [k for k in META_ORDER if k in meta] + [k for k in meta if k not in META_ORDER]
    rows = "".join(f"<tr><th>{_esc(k.replace('_', ' '))}</th><td>{_esc(_setting(meta[k]))}</td></tr>" for k in keys)
    return f'<h2>Settings</h2>\n<table class="kv" id="settings">{rows}</table>'


def _texts(imported: ImportedSession) -> str:
    if not (imported.prompt or imported.text):
        return ""
    return (f'<h2>Prompt</h2>\n<pre id="prompt">{_esc(imported.prompt)}</pre>\n'
            f'<h2>Generated text</h2>\n<pre id="text">{_esc(imported.text)}</pre>')


def _summary(rounds: list[RoundRecord]) -> str:
    """The session's summary (session_tables.summary_table): what the rounds add up to, each number defined below."""
    return f"<h2>Summary</h2>\n{table_html(summary_table(rounds), titled=False)}"


def _figure_divs(figures: Mapping[str, dict]) -> str:
    if not figures:
        return ""
    divs = "".join(f'<div class="plot stats" id="{key}"></div>' for key in figures)
    return f'<h2>Statistics</h2>\n<div class="grid">{divs}</div>'


def _tree_controls(n: int, caption: str) -> str:
    if n == 0:
        return ""
    options = "".join(f'<option value="{m}"{" selected" if m == DEFAULT_METRIC else ""}>{_esc(spec.label)}</option>'
                      for m, spec in METRICS.items())
    return (f"<h2>Trees</h2>\n<div class=\"controls\"><label>colour by <select id=\"metric\">{options}</select></label>"
            f'<label>round <input type="range" id="round" min="0" max="{n - 1}" value="0" step="1"></label>'
            f'<span id="caption">{_esc(caption)}</span></div>\n<div class="plot" id="tree"></div>')


def _round_table(rounds: list[RoundRecord]) -> str:
    """A row a round (session_tables.rounds_table), its columns defined below it."""
    if not rounds:
        return ""
    return f"<h2>Rounds</h2>\n{table_html(rounds_table(rounds), titled=False)}"


# First the two blobs are unpacked (gzip, base64) and plotly.js is evaluated as a script element. Then the figures are
# drawn. The node traces rebuilt here are tree_traces.py's `node_traces`: "nodes" holds the nodes with a value,
# coloured, "no value" the rest in grey; both keep the node order and the default metric's per-node fields.
SCRIPT = unpack_script("figures and trees", "The settings, summary and round table above and below are complete.", """
  const config = {displaylogo: false};
  for (const [id, fig] of Object.entries(data.figures)) {
    Plotly.newPlot(id, fig.data, fig.layout, {...config, responsive: true});
  }
  if (!data.trees.length) return;

  function nodeTrace(tree, name, ids, marker) {
    const pick = (key) => ids.map((v) => tree.nodes[key][v]);
    const trace = {...structuredClone(tree.template), name, x: pick("x"), y: pick("y"), marker,
                   customdata: ids, hovertext: pick("hovertext")};
    if (tree.nodes.text) trace.text = pick("text");
    return trace;
  }

  function treeFigure(k, metric) {
    const tree = data.trees[k], style = data.metrics[metric], values = tree.values[metric];
    const base = tree.template.marker, valued = [], unvalued = [];
    values.forEach((value, v) => {
      if (tree.nodes.x[v] === null) return;  // folded out of the drawing ("+N")
      (value === null ? unvalued : valued).push(v);
    });
    const colours = valued.map((v) => values[v]);
    // colours.colour_range's rule: one value reaches down to 0 (plotly would pad the bar both ways).
    let lo = colours.length ? Math.min(...colours) : 0.0, hi = colours.length ? Math.max(...colours) : 1.0;
    if (hi <= lo) [lo, hi] = hi > 0 ? [Math.min(lo, 0.0), hi] : [lo, lo + 1.0];
    const nodes = [nodeTrace(tree, "nodes", valued, {
      size: base.size, color: colours, colorscale: style.colorscale, cmin: lo, cmax: hi,
      showscale: colours.length > 0, colorbar: tree.bars[metric] || style.colorbar, line: base.line})];
    if (unvalued.length) {
      nodes.push(nodeTrace(tree, "no value", unvalued, {size: base.size, color: data.noValue, line: {...base.line}}));
    }
    const fixed = structuredClone(tree.fixed);
    return {data: [...fixed.slice(0, tree.at), ...nodes, ...fixed.slice(tree.at)],
            layout: structuredClone(tree.layout)};
  }

  const slider = document.getElementById("round"), select = document.getElementById("metric");
  const caption = document.getElementById("caption");
  function show() {
    const k = Number(slider.value), fig = treeFigure(k, select.value);
    caption.textContent = data.trees[k].caption;
    return Plotly.react("tree", fig.data, fig.layout, config);
  }
  slider.addEventListener("input", show);
  select.addEventListener("change", show);
  window.tevvizReport = {treeFigure, show};
  await show();
  performance.mark("tevviz:tree-drawn");  // the time to open the page, read by tests/render/test_report.py
})();
""")
