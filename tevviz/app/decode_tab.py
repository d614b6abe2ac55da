"""The Decode tab: settings, Step / Step token / Run / Reset, the tree, session statistics, export and import."""

from __future__ import annotations

from dataclasses import replace

import gradio as gr

from ..engine import TevvizError
from ..engine.core.sampling import SamplingConfig
from ..engine.decode.session import DecodeConfig
from ..engine.draft.builders import BUILDERS, BuilderConfig
from ..engine.draft.drafters import builder_fits
from ..engine.load.pairs import AUTO_LIMIT, OTHER_PAIR_DEFAULTS, DecodeDefaults
from ..render import METRICS
from ..render.colours import SCALES
from .browsing import wire_browsing
from .controller import Controller
from .details import node_details
from .figure_view import ROUND_BOX, figure_view
from .run_store import MAX_RUNS
from .runs import settings_values
from .search_panel import search_row, wire_search
from .settings_follow import wire_settings_follow
from .state import AppState, decode_settings
from .updates import BROWSE_OUTPUTS, NODE_OUTPUTS, ROUND_OUTPUTS, VIEW_OUTPUTS, everything, shown
from .url_view import url_sync
from .views import (
    stats_markdown,
    text_spans,
    tree_plot,
)
from .widgets import BROWSE_QUEUE, LIGHT, MODEL_WORK, PROGRESS, Panel, current, failed, figure_json, stopper

# The output names the tests and the other tabs read from here (their home is updates.py).
__all__ = ["BROWSE_OUTPUTS", "NODE_OUTPUTS", "ROUND_OUTPUTS", "VIEW_OUTPUTS", "decode_tab", "everything", "shown"]

# The settings widgets, by the names `decode_settings` takes (every decoding endpoint accepts them by keyword).
SETTINGS = ("prompt", "temperature", "top_k", "top_p", "seed", "builder", "budget", "depth", "children", "width",
            "branching", "verifier", "max_new_tokens", "chat", "auto_budget", "stop_below")
BASELINE_OUTPUTS = ("error", "stats")  # outputs of /baseline after the gr.State
DOWNLOADS = ("round_dl", "session_dl", "html_dl")
RUN_FIGURES_EVERY = 5  # rounds between session-figure updates during a Run
EXPORT_OUTPUTS = ("error", *DOWNLOADS)  # outputs of /export
REPORT_OUTPUTS = ("error", "report_dl")  # outputs of /report


def _settings_column(prompts: list[dict], first_prompt: str, verifiers: list[str], chat: bool,
                     start: DecodeDefaults) -> dict:
    """The left column: example prompts, the prompt, the action buttons, the error box and the settings (the tree's
    and the verifier's from `start`)."""
    auto = start.budget == "auto"
    c = {"pick": gr.Dropdown([(f"{p['title']} [{p.get('split', '')}]", p["id"]) for p in prompts], value=None,
                             label="Example prompt", info=None if prompts else "no example prompt file for this pair",
                             interactive=bool(prompts)),
         "prompt": gr.Textbox(first_prompt, lines=4, max_lines=12, label="Prompt"),
         "chat": gr.Checkbox(chat, label="chat: wrap the prompt in the tokenizer's chat template",
                             info="on by default for a pair whose tokenizer has one")}
    with gr.Row(elem_id="step-row"):
        c["step_btn"] = gr.Button("Step", variant="primary", min_width=100, elem_id="step-btn")
        c["token_btn"] = gr.Button("Step token", min_width=100)
    with gr.Row(equal_height=True):
        c["run_btn"] = gr.Button("Run", min_width=70)
        c["stop_btn"] = gr.Button("Stop", min_width=70)
        c["reset_btn"] = gr.Button("New run", variant="stop", min_width=90)
    c["run_rounds"] = gr.Number(0, precision=0, label="Run: rounds (0 = to the end)")
    c["error"] = gr.Markdown("", label="error", elem_id="error-box")
    with gr.Accordion("Sampling", open=True):
        with gr.Row():
            c["temperature"] = gr.Number(0.0, label="temperature (0 = greedy)", min_width=90)
            c["seed"] = gr.Number(DecodeConfig.seed, precision=0, label="seed", min_width=90)
        with gr.Row():
            c["top_k"] = gr.Number(SamplingConfig.top_k, precision=0, label="top-k (0 = off)", min_width=90)
            c["top_p"] = gr.Number(SamplingConfig.top_p, label="top-p (1 = off)", min_width=90)
    with gr.Accordion("Draft tree and verifier", open=True):
        c["builder"] = gr.Radio(list(BUILDERS), value=start.builder, label="builder",
                                info=builder_fits())
        with gr.Row():
            c["budget"] = gr.Number(AUTO_LIMIT if auto else start.budget, precision=0, label="B budget", min_width=70)
            c["depth"] = gr.Number(start.depth, precision=0, label="H depth", min_width=70)
        c["auto_budget"] = gr.Checkbox(auto, label="auto: size each tree for tokens/s (B and H become limits)",
                                       info="a cost model measured as the session runs (docs/auto-budget.md); "
                                            "the mixed builder (a tree or a sampled chain each round) needs it")
        with gr.Row():
            c["children"] = gr.Number(BuilderConfig.children, precision=0, label="K children", min_width=70)
            c["width"] = gr.Number(BuilderConfig.width, precision=0, label="W width", min_width=70)
        c["branching"] = gr.Textbox(",".join(map(str, BuilderConfig.branching)), label="static branching per depth")
        c["stop_below"] = gr.Number(start.stop_below, label="sampled chain: stop below p (0 = off)",
                                    info="the chain ends after a token the draft gave less than p; H is its longest "
                                         "(the sampled builder with auto off)", elem_id="stop-below")
        c["verifier"] = gr.Radio(verifiers, value=start.verifier, label="verifier")
        c["max_new_tokens"] = gr.Number(DecodeConfig.max_new_tokens, precision=0, label="max new tokens")
    return c


def _view_column() -> dict:
    """The right column: the run picker, the round slider and colour, the tree with its details beside it, the live
    statistics with the speed panel, the optimal tree, the text."""
    c = {}
    with gr.Row(equal_height=True, elem_id="runs-row"):
        c["run_pick"] = gr.Dropdown([], value=None, label=f"run (this browser's, newest first; {MAX_RUNS} kept)",
                                    scale=4, elem_id="run-pick")
        c["open_btn"] = gr.Button("Open", min_width=70, scale=0)
        c["pin_btn"] = gr.Button("Pin as A", min_width=90, scale=0)
        c["cmp_btn"] = gr.Button("Compare with A", min_width=110, scale=0, elem_id="compare-btn")
        c["link_btn"] = gr.Button("Copy link", min_width=100, scale=0)
    # The errors of the buttons above, beside them (not in the settings column's box).
    c["runs_error"] = gr.Markdown("", elem_id="runs-error", elem_classes="error-box")
    c["link"] = gr.Textbox(label="link to this view (opens it on this server)", visible=False, interactive=False,
                           elem_id="view-link")
    c["url"], c["user_box"], c["query_box"] = url_sync(), gr.Textbox(visible=False), gr.Textbox(visible=False)
    c["width_box"] = gr.Number(visible=False)  # the tree view's px at load: a restored tree is laid out for it at once
    with gr.Row(equal_height=True):
        c["view"] = gr.Slider(0, 1, value=0, step=1,
                              label="round (← → Home End; ↓ ↑ or j k walk a round's tokens; s: Step)",
                              interactive=False, scale=3, elem_id=ROUND_BOX)
        c["metric"] = gr.Dropdown(list(METRICS), value="P", label="node colour", scale=1, min_width=120,
                                  elem_id="metric-pick")
        c["scale"] = gr.Dropdown(list(SCALES), value="auto", label="colour scale", scale=1, min_width=110)
    c |= search_row()
    with gr.Row(equal_height=False, elem_id="tree-row"):
        with gr.Column(scale=4, min_width=480):
            c["tree"] = figure_view(figure_json(tree_plot(AppState(), "P", as_dict=True)),
                                    label="draft tree: click a node; +N unfolds", elem_id="tree-plot", clicks=True,
                                    keys=True)
        with gr.Column(scale=1, min_width=240, elem_id="details-col"):
            c["details"] = gr.Markdown(node_details(AppState()), label="node details", elem_id="node-details")
            c["node"] = gr.Dropdown([], value=None, label="node (✓ accepted, ⏏ exit, ✗ rejected here)")
    with gr.Row(equal_height=False):
        c["stats"] = gr.Markdown("No rounds yet.", label="live stats", elem_classes="stats-table")
        c["baseline_btn"] = gr.Button("Run baseline", min_width=120, scale=0)
        c["baseline_stop"] = gr.Button("Stop", min_width=70, scale=0, elem_id="baseline-stop")
    with gr.Row(equal_height=True):
        c["optimal_btn"] = gr.Button("Optimal tree", min_width=120, scale=0)
        c["optimal_stop"] = gr.Button("Stop", min_width=70, scale=0, elem_id="optimal-stop")
        c["ghosts"] = gr.Checkbox(False, label="ghost branches: the optimal tree's nodes this tree lacks", scale=2)
        c["optimal_every"] = gr.Checkbox(False, label="optimal tree every round (up to H more target passes)",
                                         scale=2)
    c["text"] = gr.HighlightedText(text_spans(AppState()), label="text (each round's block; bonus tokens marked)",
                                   color_map={"bonus": "#f4a261", "current token": "#e63946"},
                                   show_inline_category=False, combine_adjacent=False)
    return c


def _widgets(prompts: list[dict], first_prompt: str, verifiers: list[str], chat: bool,
             start: DecodeDefaults) -> Panel:
    with gr.Row(equal_height=False, elem_id="decode-row"):
        with gr.Column(scale=1, min_width=320, elem_id="settings-col"):
            left = _settings_column(prompts, first_prompt, verifiers, chat, start)
        with gr.Column(scale=3, min_width=600, elem_id="view-col"):
            right = _view_column()
    c = {}
    with gr.Accordion("Compare runs: the pinned run A against B, round by round", open=False) as c["cmp_acc"]:
        with gr.Row(equal_height=True):
            c["b_pick"] = gr.Dropdown([], value=None, label="B (A is the pinned run; none picked: the run shown)",
                                      scale=4)
            # A text box: a blank number box sends 0, and blank here means the round shown.
            c["cmp_round"] = gr.Textbox("", label="round", placeholder="the round shown", min_width=80, scale=1)
        c["cmp_md"] = gr.Markdown("Pin a run as A (beside the run picker), pick a run B here or show it, then "
                                  "Compare with A.", elem_id="compare-text", elem_classes="stats-table")
        c["cmp_plot"] = figure_view(label="round k of A and B in one layout (matched by token path)",
                                    elem_id="compare-plot")
    with gr.Accordion("The drafter's rows (block rounds): they follow the round shown", open=False):
        c["rows_plot"] = figure_view(label="per depth, the drafter's top tokens with their marginal q_d; the token "
                                     "the round committed at each depth is boxed (green: accepted, red: bonus); a "
                                     "click on a cell rings its nodes in the tree", elem_id="rows-plot", clicks=True)
    with gr.Accordion("Session statistics", open=True):
        # One chart of five subplots, redrawn in place after every round (docs/app-latency.md).
        c["session_plot"] = figure_view(label="stage times, block lengths, acceptance by depth; where the exit mass "
                                        "went (width against leaf exits); C_p and C_p* per round",
                                        elem_id="session-plot")
    with gr.Accordion("Export and import", open=True):
        with gr.Row():
            c["export_btn"] = gr.Button("Export", variant="primary")
            c["round_dl"] = gr.DownloadButton("Round JSON", interactive=False)
            c["session_dl"] = gr.DownloadButton("Session JSON", interactive=False)
            c["html_dl"] = gr.DownloadButton("Tree HTML", interactive=False)
            c["report_btn"] = gr.Button("Report")
            c["report_dl"] = gr.DownloadButton("Session report HTML", interactive=False)
        with gr.Row():
            c["upload"] = gr.File(file_types=[".json"], label="Import a tevviz session/round JSON or a DDTree trace "
                                  "(≤ 64 MiB)", height=120, elem_id="session-import")
            c["rescore_btn"] = gr.Button("Re-score", scale=0, min_width=120)
        with gr.Row():
            c["engine_upload"] = gr.File(
                label="Overlay a serving engine's acceptance by depth (vLLM, SGLang, llama.cpp, TensorRT-LLM logs, "
                      "/metrics or responses; tevviz engine import/run --json)", height=120,
                elem_id="engine-import")
            c["engine_clear"] = gr.Button("Clear engines", scale=0, min_width=120)
    return Panel(**left, **right, **c)


def on_tree(ui: Panel) -> dict:
    """Event options of model work whose progress overlay sits on the tree alone.

    On every output the overlay costs the browser a timer per component per frame while the round runs, beside
    the server on the same cores (docs/app-latency.md).
    """
    return MODEL_WORK | {"show_progress_on": [ui.tree]}


def _wire_decoding(ctl: Controller, ui: Panel, settings: dict) -> None:
    """Step, Step token, Run, Reset and Run baseline."""

    def step(st, metric_name, progress=PROGRESS, **values):
        try:
            prompt, cfg = decode_settings(**values)
            progress(0, desc="drafting and verifying (models load on first use)")
            return everything(ui, ctl.step(current(st), prompt, cfg), metric_name)
        except TevvizError as e:
            return failed(ui.error, e)

    def step_token(st, metric_name, **values):
        try:
            prompt, cfg = decode_settings(**values)
            st = current(st)
            new = ctl.step_token(st, prompt, cfg)
        except TevvizError as e:
            return failed(ui.error, e)
        return everything(ui, new, metric_name) if len(new.rounds) != len(st.rounds) else shown(ui, new, metric_name)

    def run(st, metric_name, rounds, progress=PROGRESS, **values):
        try:
            prompt, cfg = decode_settings(**values)
            limit = max(int(rounds or 0), 0)
        except (TevvizError, TypeError, ValueError) as e:
            yield failed(ui.error, TevvizError(str(e)))
            return
        st, done = current(st), 0
        while not limit or done < limit:
            try:
                st = ctl.step(st, prompt, cfg)
            except TevvizError as e:
                yield failed(ui.error, e)
                return
            done += 1
            progress(len(st.generated) / cfg.max_new_tokens, desc=f"round {len(st.rounds)}")
            last = st.done or (limit and done >= limit)
            # The session figures change little from one round to the next: during a Run they follow every
            # few rounds and at the end, the tree, text and live statistics every round.
            if last or done % RUN_FIGURES_EVERY == 0:
                yield everything(ui, st, metric_name)
            else:
                yield {**shown(ui, st, metric_name), ui.stats: stats_markdown(st)}
            if st.done:
                return

    def reset(st, metric_name):
        return everything(ui, ctl.reset(current(st)), metric_name)

    def baseline(st, metric_name, progress=PROGRESS, **values):
        try:
            prompt, cfg = decode_settings(**values)
            progress(0, desc="timing plain decoding every way, then the fastest")
            told = lambda done, total: progress(done / total, desc=f"plain decoding: {done} of {total} timings")
            st = ctl.baseline(current(st), prompt, cfg, told)
        except TevvizError as e:
            return failed(ui.error, e)
        return {ui.state: st, **ui.updates(error="", stats=stats_markdown(st))}

    inputs, outputs = [ui.state, ui.metric], [ui.state, *ui.take(ROUND_OUTPUTS)]
    work = on_tree(ui)
    # Every press counts: a Step pressed (or "s" typed) while the last one is still answered queues behind it and
    # continues from its state (gradio's default drops a press made before the last event has quite finished).
    ui.step_btn.click(step, inputs, outputs, inputs_kwargs=settings, api_name="step", trigger_mode="multiple", **work)
    ui.token_btn.click(step_token, inputs, outputs, inputs_kwargs=settings, api_name="step_token",
                       trigger_mode="multiple", **work)
    run_event = ui.run_btn.click(run, [*inputs, ui.run_rounds], outputs, inputs_kwargs=settings, api_name="run",
                                 **work)
    ui.reset_btn.click(reset, inputs, outputs, api_name="reset", cancels=[run_event], **BROWSE_QUEUE)
    # Stop ends a Run after the rounds it has shown: they stay, and so does the run.
    ui.stop_btn.click(lambda st: ctl.keep(current(st)), [ui.state], None, cancels=[run_event], api_name="stop",
                      **LIGHT)
    ui.baseline_btn.click(baseline, inputs, [ui.state, *ui.take(BASELINE_OUTPUTS)], inputs_kwargs=settings,
                          api_name="baseline", **MODEL_WORK)
    ui.baseline_stop.click(stopper(ctl, "baseline"), [ui.state], None, api_name="stop_baseline", **LIGHT)


def _wire_files(ctl: Controller, ui: Panel, settings: dict) -> None:
    """Export, import and Re-score."""

    def export(st, metric_name):
        st = current(st)
        try:
            html = tree_plot(st, metric_name).to_html(include_plotlyjs=True, full_html=True)
            paths = ctl.export(st, html)
        except TevvizError as e:
            return failed(ui.error, e)
        return ui.updates(error="", **dict(zip(DOWNLOADS, map(str, paths))))

    def enable_downloads(st):
        ready = current(st).round is not None
        return [gr.DownloadButton(interactive=ready)] * len(DOWNLOADS)

    def import_file(st, metric_name, path):
        if not path:
            return gr.skip()
        try:
            new = ctl.import_file(current(st), path)
        except TevvizError as e:
            return failed(ui.error, e)
        # Every setting the file recorded fills its box, so Re-score and Step continue the run with its own settings
        # (a box changed after makes Step start a new run and say which).
        values = settings_values(new.meta) | ({"prompt": new.prompt} if new.prompt else {})
        return {**everything(ui, new, metric_name), **{settings[k]: v for k, v in values.items() if k in settings}}

    def engine_overlay(st, metric_name, path):
        """A serving engine's statistics file read (docs/engines.md) and its curves drawn over this run's."""
        if not path:
            return gr.skip()
        from ..engine.engines.formats import read_file

        try:
            run = read_file(path)
        except TevvizError as e:
            return failed(ui.error, e)
        st = replace(current(st), engines=(*current(st).engines, run))
        return everything(ui, st, metric_name)

    def rescore_round(st, metric_name, progress=PROGRESS, **values):
        try:
            _, cfg = decode_settings(**values)
            progress(0, desc="re-scoring with the target")
            return everything(ui, ctl.rescore(current(st), values["prompt"], cfg.sampling), metric_name)
        except TevvizError as e:
            return failed(ui.error, e)

    def optimal(st, metric_name, progress=PROGRESS, **values):
        try:
            _, cfg = decode_settings(**values)
            progress(0, desc="best-first expansion with the target")
            st = ctl.optimal(current(st), values["prompt"], cfg.sampling)
        except TevvizError as e:
            return failed(ui.error, e)
        return {**everything(ui, st, metric_name), ui.ghosts: True}

    def report(st, progress=PROGRESS):
        try:
            progress(0, desc="writing the session report")
            path = ctl.report(current(st))
        except TevvizError as e:
            return failed(ui.error, e)
        return ui.updates(error="", report_dl=str(path))

    inputs, outputs = [ui.state, ui.metric], [ui.state, *ui.take(ROUND_OUTPUTS)]
    downloads = ui.take(DOWNLOADS)
    ui.export_btn.click(export, inputs, ui.take(EXPORT_OUTPUTS), api_name="export", **LIGHT).then(
        enable_downloads, [ui.state], downloads, api_visibility="private", **LIGHT)
    ui.report_btn.click(report, [ui.state], ui.take(REPORT_OUTPUTS), api_name="report", **LIGHT).then(
        lambda st: gr.DownloadButton(interactive=current(st).round is not None), [ui.state], [ui.report_dl],
        api_visibility="private", **LIGHT)
    ui.engine_upload.upload(engine_overlay, [*inputs, ui.engine_upload], outputs, api_name="engine_overlay",
                            **BROWSE_QUEUE)
    ui.engine_clear.click(lambda st, m: everything(ui, replace(current(st), engines=()), m), inputs, outputs,
                          api_name="engine_clear", **BROWSE_QUEUE)
    ui.upload.upload(import_file, [*inputs, ui.upload], [*outputs, *settings.values()], api_name="import_file",
                     **BROWSE_QUEUE)
    ui.rescore_btn.click(rescore_round, inputs, outputs, inputs_kwargs=settings, api_name="rescore", **on_tree(ui))
    ui.optimal_btn.click(optimal, inputs, [*outputs, ui.ghosts], inputs_kwargs=settings, api_name="optimal",
                         **on_tree(ui))
    ui.optimal_stop.click(stopper(ctl, "optimal"), [ui.state], None, api_name="stop_optimal", **LIGHT)


def decode_tab(ctl: Controller, state: gr.State, prompts: list[dict], first_prompt: str,
               verifiers: list[str], chat: bool = False, start: DecodeDefaults = OTHER_PAIR_DEFAULTS) -> Panel:
    """The Decode tab (inside its gr.Tab); returns its components, whose `settings` the other tabs read.

    `start` is the tree and verifier it starts on (PairSource.builder_default: the pair's measured best, else
    --budget auto on the drafter's own builder)."""
    ui = _widgets(prompts, first_prompt, verifiers, chat, start)
    ui.state = state
    ui.widths = {}  # session id -> px of its tree view
    ui.settings = dict(zip(SETTINGS, ui.take(SETTINGS)))  # name -> widget, for `inputs_kwargs`
    _wire_decoding(ctl, ui, ui.settings)
    wire_browsing(ui, {p["id"]: p["prompt"] for p in prompts})
    wire_search(ui)
    wire_settings_follow(ui)
    _wire_files(ctl, ui, ui.settings)
    return ui
