"""A scan folder -> one self-contained HTML page: settings, the category and by-depth tables and figures, the tokens the
trees missed most, and the rounds that lost most with their trees behind a slider.

The page is the session report's (report.py): the same packing of plotly.js and the data, the same script, which draws
`figures` into their divs and the trees behind the slider.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

from tevviz.engine.analysis.scan_tables import (
    acceptance_table,
    category_table,
    loss_table,
    missed_table,
    worst_heading,
    worst_table,
)
from tevviz.engine.scan.scan_files import ScanData, read_prompt
from tevviz.render.page import PAGE, STATUS, STYLE, gzip_base64, plotly_blob
from tevviz.render.report import (
    NO_VALUE_COLOUR,
    SCRIPT,
    _settings,
    _tree_controls,
    round_trees,
)
from tevviz.render.scan_figures import scan_figures
from tevviz.render.table import html as table_html

FIGURE_IDS = {"categories": "scan-categories", "acceptance": "scan-acceptance", "loss": "scan-loss",
              "lengths": "scan-lengths"}


def scan_meta(manifest: dict) -> dict:
    """The manifest flattened for the settings table: models by name, then the settings, prompts and shard."""
    models = manifest.get("models") or {}
    prompts = manifest.get("prompts") or {}
    meta = {"target": (models.get("target") or {}).get("name"), "draft": (models.get("draft") or {}).get("name"),
            "dtype": (models.get("target") or {}).get("dtype"), "device": manifest.get("device"),
            **(manifest.get("settings") or {}), "prompt file": prompts.get("file"),
            "prompts scanned": manifest.get("scanned"), "tevviz": manifest.get("tevviz")}
    if isinstance(manifest.get("shard"), dict):
        meta["shard"] = f"{manifest['shard']['index']}/{manifest['shard']['count']}"
    elif manifest.get("shard"):
        meta["shard"] = str(manifest["shard"])  # "auto": a file a rank
    if manifest.get("merged_from"):
        meta["merged from"] = manifest["merged_from"]
    return {k: v for k, v in meta.items() if v is not None}


def worst_trees(data: ScanData) -> tuple[dict[str, dict], list[dict]]:
    """The metrics' styles and the worst rounds' trees, stored as the session report stores a round, captioned with
    their prompt."""
    worst, blocks = [], {}
    for w in data.summary.worst:
        if w.prompt not in blocks:
            blocks[w.prompt] = {r.index: r for r in read_prompt(data, w.prompt).rounds}
        r = blocks[w.prompt].get(w.round)
        if r is not None:
            worst.append((w, r))
    styles, trees = round_trees([r for _, r in worst])
    for (w, _), tree in zip(worst, trees):
        tree["caption"] = f"prompt {w.prompt} ({w.category}), lost {w.lost:.3f}: " + tree["caption"]
    return styles, trees


def scan_report_html(data: ScanData, title: str | None = None) -> str:
    """The whole scan report as one HTML string."""
    s = data.summary
    figures = {FIGURE_IDS[k]: fig for k, fig in scan_figures(s.groups).items()}
    styles, trees = worst_trees(data)
    payload = {"figures": figures, "metrics": styles, "noValue": NO_VALUE_COLOUR, "trees": trees}
    meta = scan_meta(data.manifest)
    title = title or f"tevviz scan: {Path(str(meta.get('draft', '?'))).name} drafting for " \
                     f"{Path(str(meta.get('target', '?'))).name}, {len(data.index)} prompts"
    esc = html.escape
    body = [
        f"<h1>{esc(title)}</h1>", _settings(meta),
        "<h2>By category</h2>", table_html(category_table(s.groups), titled=False),
        "<h2>Acceptance by depth</h2>",
        ("<p>Each cell is conditional / marginal / exact: of the rounds that reached depth d - 1, the share that "
         "accepted at d; the share of all rounds that reached d; and the target's probability of reaching d in the "
         "trees (docs/math.md).</p>"),
        table_html(acceptance_table(s.groups), titled=False),
        ("<h2>Where the mass went</h2>\n<p class=\"note\">Mean exit mass per round by depth: width exits (the "
        "target's token was not among the children) and leaf exits (the tree ended).</p>"),
        table_html(loss_table(s.groups), titled=False), STATUS,
        '<div class="grid">' + "".join(f'<div class="plot stats" id="{i}"></div>' for i in figures) + "</div>",
    ]
    if s.missed:
        body += [("<h2>Target tokens the trees missed most</h2>\n<p class=\"note\">Each round's best missing child "
                 "(the token whose addition would have raised C_p most), counted by token.</p>"),
                 table_html(missed_table(s, 20), titled=False)]
    if s.worst:
        body += ["<h2>Rounds that lost most</h2>", f'<p class="note">{esc(worst_heading(s.worst))}</p>',
                 table_html(worst_table(s, len(s.worst)), titled=False),
                 _tree_controls(len(trees), trees[0]["caption"] if trees else "")]
    if data.problems or data.unfinished:
        notes = data.problems + ([f"{data.unfinished} rounds of an unfinished prompt left out"] if data.unfinished
                                 else [])
        body.append("<h2>Notes</h2><ul>" + "".join(f"<li>{esc(n)}</li>" for n in notes) + "</ul>")
    blob = json.dumps(payload, separators=(",", ":"), allow_nan=False)
    return PAGE.format(title=esc(title), style=STYLE, body="\n".join(body), plotlyjs=plotly_blob(),
                       data=gzip_base64(blob), script=SCRIPT)


def write_scan_report(data: ScanData, path: str | Path, title: str | None = None) -> int:
    """Write the scan report to `path`; returns its size in bytes."""
    page = scan_report_html(data, title).encode("utf-8")
    Path(path).write_bytes(page)
    return len(page)
