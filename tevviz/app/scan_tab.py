"""The Scan tab: open a scan folder, or scan a held-out prompt set with this session's pair (progress, Stop keeps what
is done); the category table, the by-depth figures, the tokens missed most and the rounds that lost most, one click
from the Decode tab's tree view."""

from __future__ import annotations

import threading
from pathlib import Path

import gradio as gr
import plotly.graph_objects as go

from ..engine import TevvizError
from .controller import Controller
from .decode_tab import ROUND_OUTPUTS, SETTINGS, everything
from .scan_view import open_cached, round_state, scan_prompt_files, shown, start_scan, widget_settings
from .state import decode_settings
from .widgets import BROWSE_QUEUE, LIGHT, PROGRESS, Panel, current, failed, scroll_to_js

# Outputs of /scan_open and, at its end, /scan_start (after the scan's own gr.State), in order.
SCAN_OUTPUTS = ("error", "folder", "summary", "categories", "acceptance", "loss", "lengths", "depth", "missed",
                "worst", "pick")
START_OUTPUTS = (*SCAN_OUTPUTS, "status")
FIGURES = ("categories", "acceptance", "loss", "lengths")
DECODE_TAB = "decode"  # the id the Decode tab needs (gr.Tab(..., id=DECODE_TAB)) for a click to switch to it


def _widgets(files: dict[str, Path], default: str | None) -> Panel:
    gr.Markdown("**Scan a prompt set.** Open a folder written by `tevviz scan PROMPTS.jsonl -o DIR`, or scan a "
                "held-out prompt set with this session's pair and the Decode tab's settings. Click one of the rounds "
                "that lost most to open it in the Decode tab, where it can be re-scored and its optimal tree computed.")
    c = {}
    with gr.Row(equal_height=True):
        c["folder"] = gr.Textbox(label="scan folder", placeholder="a folder written by tevviz scan", scale=4)
        c["open_btn"] = gr.Button("Open", scale=0, min_width=100)
    with gr.Accordion("Scan this session's pair", open=True):
        with gr.Row(equal_height=True):
            c["prompts"] = gr.Dropdown(list(files), value=default, label="held-out prompts (assets/scan_prompts)",
                                       interactive=bool(files))
            c["limit"] = gr.Number(0, precision=0, label="prompts (0 = all)", min_width=90)
            c["start_btn"] = gr.Button("Start scan", variant="primary", min_width=110)
            c["stop_btn"] = gr.Button("Stop", variant="stop", min_width=90)
        c["status"] = gr.Markdown("")
    c["error"] = gr.Markdown("", elem_classes="error-box")
    c["summary"] = gr.Markdown("No scan open.", elem_classes="stats-table")
    with gr.Row():
        c["categories"] = gr.Plot(label="block length by category")
        c["acceptance"] = gr.Plot(label="acceptance by depth")
    with gr.Row():
        c["loss"] = gr.Plot(label="where the mass went")
        c["lengths"] = gr.Plot(label="block lengths")
    c["depth"] = gr.Markdown("", elem_classes="stats-table")
    c["missed"] = gr.Markdown("", elem_classes="stats-table")
    gr.Markdown("**Rounds that lost most** (lost: the drafter gap C_p* - C_p where the scan computed optimal trees, "
                "else the tree's depth - C_p). Click a row, or pick it below, to open it in the Decode tab.")
    c["worst"] = gr.Dataframe(interactive=False, wrap=True)
    with gr.Row(equal_height=True):
        c["pick"] = gr.Dropdown([], value=None, label="round (or type any: prompt id, a space, round number)",
                                allow_custom_value=True, scale=3)
        c["open_round_btn"] = gr.Button("Open in the Decode tab", scale=1)
    c["scan"] = gr.State(None)  # {"folder": str, "keys": [round keys of the worst rows]}
    return Panel(**c)


def scan_updates(ui: Panel, data) -> dict:
    """Everything the tab shows of an opened scan, and the tab's own state."""
    v = shown(data)
    return {ui.scan: {"folder": str(data.folder), "keys": v.worst_keys}, **ui.updates(
        error="", folder=str(data.folder), summary=v.summary, depth=v.depth, missed=v.missed,
        worst={"headers": v.worst_head, "data": v.worst_rows},
        pick=gr.Dropdown(choices=[(" ".join(r[:4]), k) for r, k in zip(v.worst_rows, v.worst_keys)],
                         value=v.worst_keys[0] if v.worst_keys else None),
        **{k: go.Figure(v.figures[k]) for k in FIGURES})}


def _wire_scans(ctl: Controller, ui: Panel, settings: dict, files: dict[str, Path]) -> None:
    """Open, Start scan and Stop."""
    stops: dict[str, threading.Event] = {}

    def open_folder(folder):
        try:
            ctl.source.check_scan_path(folder)
            return scan_updates(ui, open_cached(folder))
        except TevvizError as e:
            return failed(ui.error, e)

    def start(st, name, limit, request: gr.Request, progress=PROGRESS, **values):
        # Stop is keyed by the browser session; the scan's folder lives with the AppState's id, which a first action
        # here has to keep.
        fresh, st = st is None, current(st)
        stop = stops[request.session_hash] = threading.Event()
        try:
            if name not in files:
                raise TevvizError(f"choose one of the held-out prompt sets: {', '.join(files) or 'none shipped'}")
            _, cfg = decode_settings(**values)
            progress(0, desc="loading the models and planning the scan")
            job = start_scan(ctl, st.sid, files[name], max(int(limit or 0), 0), cfg, stop)
        except (TevvizError, TypeError, ValueError) as e:
            yield failed(ui.error, TevvizError(str(e)))
            return
        yield ui.updates(error="", status=f"scanning {job.total} prompts into `{job.folder}` ...") | (
            {ui.state: st} if fresh else {})
        done = 0
        for step in job.steps:
            done = step.done
            progress((step.done, step.total), desc=f"prompt {step.prompt}")
            yield ui.updates(status=step.line())
        said = "stopped" if stop.is_set() else "done"
        yield {**scan_updates(ui, open_cached(job.folder)),
               ui.status: (f"{said}: {done} of {job.total} prompts in `{job.folder}` (removed when the app stops: "
                           "copy it to keep it; `tevviz report DIR` makes a page of it)")}

    def stop(request: gr.Request):
        event = stops.get(request.session_hash)
        if event is None:
            return "no scan is running in this session"
        event.set()
        return "stopping after the round in progress; finished prompts are kept"

    outputs = [ui.scan, *ui.take(SCAN_OUTPUTS)]
    ui.open_btn.click(open_folder, [ui.folder], outputs, api_name="scan_open", **LIGHT)
    ui.folder.submit(open_folder, [ui.folder], outputs, api_visibility="private", **LIGHT)
    # Scans queue among themselves; each prompt's decoding goes to the model thread, so a Step waits one prompt.
    ui.start_btn.click(start, [ui.state, ui.prompts, ui.limit], [ui.scan, ui.state, *ui.take(START_OUTPUTS)],
                       inputs_kwargs=settings, api_name="scan_start", concurrency_id="scan", concurrency_limit=1)
    ui.stop_btn.click(stop, None, [ui.status], api_name="scan_stop", **LIGHT)


def _wire_rounds(ctl: Controller, ui: Panel, decode: Panel, tabs) -> None:
    """A worst round, picked or clicked, shown in the Decode tab with the scan's settings."""
    decode_outputs = [decode.state, *decode.take(ROUND_OUTPUTS), *decode.take(SETTINGS), decode.pick]
    switch = [tabs] if tabs is not None else []

    def show_round(st, metric_name, scan, key):
        before = st
        try:
            if not scan:
                raise TevvizError("open a scan first")
            ctl.source.check_scan_path(scan["folder"])
            st = round_state(current(st), open_cached(scan["folder"]), key, ctl.history)
        except TevvizError as e:
            return failed(ui.error, e)
        ctl.keep(current(before))  # the run shown before stays in the run picker
        ctl.store.drop(st.sid, keep_training=True)  # as an import: the live session goes
        ctl.keep(st)
        out = {**everything(decode, st, metric_name), ui.error: "", decode.pick: None,
               **{decode.settings[k]: v for k, v in widget_settings(st).items()}}
        return out

    def clicked(scan, evt: gr.SelectData):
        row = evt.index[0] if isinstance(evt.index, (list, tuple)) else evt.index
        keys = (scan or {}).get("keys", [])
        return keys[row] if isinstance(row, int) and 0 <= row < len(keys) else gr.skip()

    def to_decode(scan, key):
        # Without a scan or a round this tab stays, where show_round says what is missing.
        return gr.Tabs(selected=DECODE_TAB) if scan and key else gr.skip()

    inputs, outputs = [ui.state, decode.metric, ui.scan, ui.pick], [*decode_outputs, ui.error]
    # The Decode tab comes up first and the round is drawn into it after: views updated while their tab was hidden
    # were put back to what they held before once it showed (a blank tree until the next action). A clicked row is
    # picked below first.
    picked = ui.worst.select(clicked, [ui.scan], [ui.pick], api_visibility="private", **LIGHT).then
    for event, api in ((ui.open_round_btn.click, {"api_name": "scan_open_round"}),
                       (picked, {"api_visibility": "private"})):
        if switch:
            event = event(to_decode, [ui.scan, ui.pick], switch, api_visibility="private", **LIGHT).then
        shown = event(show_round, inputs, outputs, **api, **BROWSE_QUEUE)
        if switch:
            # The Decode tab came up at the Scan tab's scroll depth, the tree off screen: the page goes to the tree.
            shown.then(None, None, None, js=scroll_to_js("#tree-plot"))


def scan_tab(ctl: Controller, state: gr.State, decode: Panel, tabs=None, prompt_files: dict[str, Path] | None = None,
             default: str | None = None) -> Panel:
    """The Scan tab (inside its gr.Tab): `decode` is the Decode tab's panel, `tabs` the gr.Tabs to switch to it
    (its Decode tab built with id DECODE_TAB); `prompt_files` default to the shipped held-out sets, `default` to
    the pair's."""
    files = scan_prompt_files() if prompt_files is None else dict(prompt_files)
    named = ctl.source.model.named if ctl.source.pair is None else None
    if default is None:
        default = named.name if named is not None and named.name in files else next(iter(files), None)
    ui = _widgets(files, default)
    ui.state = state
    _wire_scans(ctl, ui, decode.settings, files)
    _wire_rounds(ctl, ui, decode, tabs)
    return ui
