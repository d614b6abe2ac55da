"""The tevviz web app: `build_demo(...)` returns the Gradio Blocks, `launch(...)` serves it.

Handlers are small functions that turn widget values into one `Controller` call (app_session.py)
and its result into widget updates through the pure render layer. Nothing is loaded at import:
the models load on the first action that needs them.
"""

from __future__ import annotations

import html
import math
from pathlib import Path

import gradio as gr
import plotly.graph_objects as go

from .app_session import (
    EVAL_ROUNDS,
    MAX_HISTORY,
    AppState,
    Controller,
    Decoded,
    ExitMassMove,
    PairSource,
    SessionStore,
    TrainReport,
    decode_settings,
    load_prompts,
    train_settings,
)
from .engine import ModelPair, TevvizError, summarize
from .engine.builders import BUILDERS
from .engine.comparison import Comparison
from .engine.io import MAX_BYTES
from .engine.models import shipped_drafters
from .engine.training import OBJECTIVES, TrainConfig
from .engine.verifiers import VERIFIERS
from .render import (
    BONUS,
    METRICS,
    acceptance_by_depth_figure,
    block_length_histogram,
    exit_mass_change_figure,
    highlighted_blocks,
    loss_figure,
    path_label,
    stage_times_figure,
    tree_figure,
    verifier_law_figure,
)

DEFAULT_PROMPT = "def fibonacci(n):\n"
PROGRESS = gr.Progress()  # default marking the handlers' progress parameter; Gradio passes a fresh tracker per call
CSS = """
#tree-plot { overflow-x: auto; }
#error-box p, .error-box p { color: #b00020; font-weight: 600; }
.stats-table table { font-size: 0.9em; }
"""


def launch_options() -> dict:
    """Theme and CSS for `Blocks.launch` (Gradio 6 takes them there, not in Blocks())."""
    return {"theme": gr.themes.Soft(), "css": CSS, "max_file_size": MAX_BYTES}


# ---------------------------------------------------------------------------------------------
# State -> widget values (pure formatting; the figures come from tevviz.render).


def _empty_figure(message: str) -> go.Figure:
    fig = go.Figure()
    fig.add_annotation(text=message, showarrow=False, font={"size": 14, "color": "grey"}, x=0.5, y=0.5,
                       xref="paper", yref="paper")
    fig.update_layout(height=220, xaxis={"visible": False}, yaxis={"visible": False}, plot_bgcolor="white",
                      margin={"l": 10, "r": 10, "t": 10, "b": 10})
    return fig


def _compact(fig: go.Figure) -> go.Figure:
    """Session statistics sit three in a row: shorter, with tight margins."""
    return fig.update_layout(height=300, margin={"l": 40, "r": 10, "t": 40, "b": 40})


def _fmt(x, digits: int = 3) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}g}"


def tree_plot(st: AppState, metric: str) -> go.Figure:
    r = st.round
    if r is None:
        return _empty_figure("press Step to draft, verify and commit one round")
    ceiling = "—" if r.C_p is None else f"{1 + r.C_p:.3f}"
    title = (f"round {r.index}: {r.size} nodes, exit node {r.exit_node}, "
             f"L = {r.block_length}, 1 + C_p = {ceiling} ({r.verifier})")
    highlight = st.highlight
    return tree_figure(r.to_dict(), metric, BONUS if highlight == "bonus" else highlight, title)


def text_spans(st: AppState) -> list[tuple[str, str | None]]:
    """Prompt, then each round's block up to the shown round; while stepping, up to the current token."""
    spans: list[tuple[str, str | None]] = [(st.prompt, None)] if st.prompt else []
    if st.dropped_text:  # rounds the history cap dropped: their text, unmarked
        spans.append((st.dropped_text, None))
    spans += highlighted_blocks([r.to_dict() for r in st.rounds[: st.view]])
    r = st.round
    if r is None:
        return spans
    if st.token is None:
        return spans + highlighted_blocks([r.to_dict()])
    block = [(r.texts[v], f"round {r.index}") for v in r.accepted[1:]] + [(r.bonus_text, "bonus")]
    for i, (text, label) in enumerate(block[: st.token + 1]):
        spans.append((text, "current token" if i == st.token else label))
    return spans


def node_choices(st: AppState) -> list[tuple[str, int]]:
    r = st.round
    if r is None:
        return []
    return [(f"{v}: {r.texts[v]!r} (depth {r.depths[v]})", v) for v in range(r.size)]


def node_details(st: AppState) -> str:
    r, v = st.round, st.highlight
    if r is None:
        return "Choose a node to see its scores."
    if v == "bonus":
        return (f"**bonus token** `{r.bonus_text!r}` (id {r.bonus_token}), drawn at exit node {r.exit_node} "
                "from its residual law p_res (p itself at a leaf).")
    if v is None:
        return "Choose a node (or press Step token) to see its scores."
    q = None if v == 0 else math.exp(r.draft_logprobs[v])
    where = "root" if v == 0 else f"parent {r.parents[v]}"
    on_path = "on the accepted path" if v in r.accepted else "off the accepted path"
    lines = [
        f"**node {v}** `{r.texts[v]!r}` (token id {r.tokens[v]}), depth {r.depths[v]}, {where}, {on_path}"
        + (" — **exit node**" if v == r.exit_node else ""),
        "",
        "| draft prob q | p_edge | P | rho | w |",
        "|---|---|---|---|---|",
        f"| {_fmt(q)} | {_fmt(r.p_edge[v])} | {_fmt(r.P[v])} | {_fmt(r.rho[v])} | {_fmt(r.w[v])} |",
    ]
    missing = sorted(r.missing[v] if r.missing else [], key=lambda m: -m["gain"])
    if missing:
        lines += ["", "Top missing tokens (coverage gain P(v)·p_v(a) if added as a child):", "",
                  "| token | id | gain |", "|---|---|---|"]
        lines += [f"| `{m['text']!r}` | {m['token_id']} | {m['gain']:.4g} |" for m in missing]
    return "\n".join(lines)


def stats_markdown(st: AppState) -> str:
    if not st.rounds:
        return "No rounds yet."
    s = summarize(st.rounds)
    rounds, tokens = s["rounds"] + st.dropped, len(st.generated) if st.dropped else s["tokens"]
    tps = tokens / st.seconds if st.seconds > 0 else None
    base = st.baseline
    comparable = base is not None and base["prompt"] == st.prompt and base["cfg"] == st.cfg
    speedup = tps / base["tokens_per_s"] if comparable and tps and base["tokens_per_s"] else None
    kept = f" (last {s['rounds']} rounds)" if st.dropped else ""
    lines = [
        f"| rounds | tokens | tokens/s | tau{kept} | mean 1 + C_p{kept} | baseline tokens/s | speed-up |",
        "|---|---|---|---|---|---|---|",
        (f"| {rounds} | {tokens} | {_fmt(tps)} | {_fmt(s['tau'])} | {_fmt(s['mean_ceiling'])} "
         f"| {_fmt(base['tokens_per_s']) if comparable else '—'} | {'—' if speedup is None else f'{speedup:.2f}x'} |"),
    ]
    if st.done:
        lines.append("\n*Finished (end of sequence or token limit).*")
    if st.kind not in ("live", "empty"):
        lines.append(f"\n*Imported {st.kind}: browse it, or Re-score a round with the loaded target.*")
    if base is not None and not comparable:
        lines.append("\n*The baseline was timed on another prompt or settings; press Run baseline again.*")
    if st.notice:
        lines.append(f"\n*{st.notice}*")
    return "\n".join(lines)


def comparison_markdown(c: Comparison) -> str:
    lines = [
        f"Round {c.round_index}, {c.draws} draws per verifier; exact 1 + C_p = {c.ceiling:.4f}.",
        "",
        "| verifier | TV distance | chi-square (df) | p-value | mean L | µs per draw |",
        "|---|---|---|---|---|---|",
    ]
    lines += [f"| {x.name} | {x.tv:.4f} | {x.chi2:.2f} ({x.df}) | {x.p:.3g} | {x.mean_length:.3f} "
              f"| {x.us_per_draw:.0f} |" for x in c.laws]
    if c.note:
        lines.append(f"\n*{c.note}*")
    return "\n".join(lines)


def decoded_markdown(d: Decoded) -> str:
    s = summarize(d.rounds)
    tps = d.tokens / d.seconds if d.seconds > 0 else 0.0
    ms = "  ".join(f"{k} {v:.0f}" for k, v in s["stage_ms"].items())
    return (f"**{d.label}**: {s['rounds']} rounds, {d.tokens} tokens, tau {_fmt(s['tau'])}, "
            f"mean 1 + C_p {_fmt(s['mean_ceiling'])}, {tps:.1f} tokens/s\n\nstage ms: {ms}\n\n"
            f"```\n{d.text}\n```")


# ---------------------------------------------------------------------------------------------
# ExitTrain panel: report -> widget values.

MOVED_ROWS = 10  # nodes in the change-of-w table
NO_TRAINING = "No training yet: step a few rounds in the Decode tab, then press Train step."


def _loss_plot(log: list[dict]) -> go.Figure:
    return loss_figure(log) if log else _empty_figure("press Train step to train this session's copy of the draft")


def _change(before: float, after: float) -> str:
    if any(isinstance(x, float) and math.isnan(x) for x in (before, after)) or before == 0:
        return "—"
    return f"{(after - before) / abs(before):+.1%}"


def train_markdown(report: TrainReport) -> str:
    """The before/after table on the same contexts, and the last step's losses."""
    last = report.log[-1]
    before, after = report.table
    lines = [
        (f"{len(report.log)} steps so far on {report.contexts} contexts from this session's rounds. Last step "
         f"({last['objective']}): L = {last['loss']:.4g}, L_tok = {last['l_tok']:.4g}, "
         f"L_exit = {last['l_exit']:.4g}."),
        "",
        (f"Before and after on the same {before['contexts']} contexts: mean C_p of the tree each drafter builds "
         f"(target at T = 1), and tau, the mean block length over {EVAL_ROUNDS} decoding rounds from each context "
         f"(T = {report.temperature:g})."),
        "",
        "| drafter | mean C_p | mean 1 + C_p | tau | rounds |",
        "|---|---|---|---|---|",
    ]
    for row in report.table:
        lines.append(f"| {row['drafter']} | {_fmt(row['C_p'], 4)} | {_fmt(1 + row['C_p'], 4)} | "
                     f"{_fmt(row['tau'], 4)} | {row['rounds']} |")
    lines.append(f"| change | {_change(before['C_p'], after['C_p'])} | "
                 f"{_change(1 + before['C_p'], 1 + after['C_p'])} | {_change(before['tau'], after['tau'])} | |")
    if report.notice:
        lines.append(f"\n*{report.notice}*")
    return "\n".join(lines)


def moved_markdown(moved: ExitMassMove) -> str:
    b, a = moved.before, moved.after
    where = {(True, True): "both", (True, False): "original only", (False, True): "trained only"}
    lines = [
        (f"Round {moved.round_index}'s context. Original tree: {b.size} nodes, C_p = {_fmt(b.C_p, 4)}; "
         f"trained tree: {a.size} nodes, C_p = {_fmt(a.C_p, 4)}. Nodes match by token path; a node in one tree "
         "only has w = 0 in the other. The largest changes:"),
        "",
        "| node (token path) | in | w original | w trained | Δw |",
        "|---|---|---|---|---|",
    ]
    for r in moved.changes[:MOVED_ROWS]:
        label = html.escape(path_label(r["texts"], 60)).replace("|", "\\|")
        side = where[(r["node_before"] is not None, r["node_after"] is not None)]
        lines.append(f"| {label} | {side} | {r['w_before']:.4g} | {r['w_after']:.4g} | {r['delta']:+.4g} |")
    return "\n".join(lines)


def moved_trees(moved: ExitMassMove) -> tuple[go.Figure, go.Figure]:
    """Both drafters' trees on the same context, coloured by w under the target; the ring is argmax w."""
    figs = []
    for name, r in (("original", moved.before), ("trained", moved.after)):
        title = f"{name} draft, round {moved.round_index}: C_p = {_fmt(r.C_p, 4)} (ring: most likely exit)"
        fig = tree_figure(r.to_dict(), "w", title=title)
        figs.append(fig.update_layout(width=None, autosize=True))  # half-width columns
    return figs[0], figs[1]


# ---------------------------------------------------------------------------------------------
# The Blocks.


def _current(st: AppState | None) -> AppState:
    return st if st is not None else AppState()


def _exittrain_tab(ctl: Controller, state: gr.State, settings: dict) -> None:
    """The ExitTrain tab (inside its gr.Tab): train this browser session's copy of the draft on its rounds."""
    gr.Markdown(
        "**ExitTrain** (SPEC section 5): train a copy of the draft, private to this browser session, on the rounds "
        "decoded here. Each round gives a context (the stream up to its root) and the target's continuation (the "
        "tokens committed after it). The drafter rebuilds its tree for each context and the frozen target weights "
        "every node's incoming token by its exit probability w. The loaded draft never changes; **Revert** drops "
        "the copy.")
    with gr.Row():
        objective = gr.Radio(list(OBJECTIVES), value="exit", label="objective", scale=2,
                             info="exit: w (the paper's); prefix: P rescaled; token: L_tok only; residual: ours")
        lr = gr.Number(TrainConfig.lr, label="learning rate", min_width=90)
        lambda_exit = gr.Number(TrainConfig.lambda_exit, label="lambda_exit", min_width=90)
        batch = gr.Number(4, precision=0, label="batch (contexts per step)", min_width=90)
        steps = gr.Number(5, precision=0, label="N steps per click", min_width=90)
    with gr.Row(equal_height=True):
        train_btn = gr.Button("Train step", variant="primary", min_width=100)
        revert_btn = gr.Button("Revert", variant="stop", min_width=100)
        use_box = gr.Checkbox(False, label="Use trained draft for Step and Run in this session")
    error = gr.Markdown("", label="error", elem_classes="error-box")
    note = gr.Markdown("Step and Run decode with the original draft.", label="draft in use")
    table = gr.Markdown(NO_TRAINING, label="before and after", elem_classes="stats-table")
    loss_plot = gr.Plot(_loss_plot([]), label="loss")
    with gr.Accordion("Where the exit mass moved", open=True):
        gr.Markdown("On the context of the round chosen with the Decode tab's round slider: the tree each drafter "
                    "builds there, coloured by w under the target (T = 1), and the nodes whose w changed most.")
        moved_btn = gr.Button("Show for the shown round", min_width=100)
        with gr.Row(equal_height=False):
            tree_before = gr.Plot(label="original draft's tree")
            tree_after = gr.Plot(label="trained draft's tree")
        moved_plot = gr.Plot(label="change of w")
        moved_md = gr.Markdown("", label="largest changes of w")

    def moved_updates(moved: ExitMassMove | None) -> dict:
        if moved is None:
            empty = _empty_figure("no round with a known context is shown")
            return {tree_before: empty, tree_after: empty, moved_plot: empty, moved_md: ""}
        before_fig, after_fig = moved_trees(moved)
        return {tree_before: before_fig, tree_after: after_fig, moved_plot: exit_mass_change_figure(moved.changes, moved.round_index),
                moved_md: moved_markdown(moved)}

    def failed(e: Exception) -> dict:
        gr.Warning(str(e))
        return {error: f"Error: {e}"}

    def train(st, objective, lr, lambda_exit, batch, steps, progress=PROGRESS, **values):
        st = _current(st)
        try:
            cfg = st.cfg if st.kind == "live" and st.cfg is not None else decode_settings(**values)[1]
            tcfg = train_settings(objective, lr, lambda_exit, batch, steps, cfg.builder)
            progress(0, desc="ExitTrain")
            report = ctl.train(st, tcfg, cfg, progress=progress)
        except TevvizError as e:
            return failed(e)
        return {state: st, error: "", note: ctl.train_status(st), table: train_markdown(report),
                loss_plot: _loss_plot(report.log), **moved_updates(report.moved)}

    def revert(st):
        st = _current(st)
        said = ctl.train_revert(st)
        return {state: st, error: "", note: said[0].upper() + said[1:] + ".", table: NO_TRAINING,
                loss_plot: _loss_plot([]), **moved_updates(None), use_box: False}

    def use(st, use_trained):
        st = _current(st)
        try:
            said = ctl.train_use(st, bool(use_trained))
        except TevvizError as e:
            return {**failed(e), use_box: False}
        return {state: st, error: "", note: said}

    def show_moved(st, progress=PROGRESS):
        try:
            progress(0, desc="building both trees")
            return {error: "", **moved_updates(ctl.exit_mass(_current(st)))}
        except TevvizError as e:
            return failed(e)

    model_work = {"concurrency_id": "model", "concurrency_limit": 1}
    moved_outputs = [tree_before, tree_after, moved_plot, moved_md]
    train_outputs = [state, error, note, table, loss_plot, *moved_outputs]
    train_btn.click(train, [state, objective, lr, lambda_exit, batch, steps], train_outputs, inputs_kwargs=settings,
                    api_name="train_step", **model_work)
    revert_btn.click(revert, [state], [*train_outputs, use_box], api_name="train_revert", **model_work)
    use_box.input(use, [state, use_box], [state, error, note, use_box], api_name="train_use", **model_work)
    moved_btn.click(show_moved, [state], [error, *moved_outputs], api_name="train_moved", **model_work)


def build_demo(target: str | None = None, draft: str | None = None, dtype: str = "auto", device: str | None = None,
               device_map=None, attn_implementation: str = "sdpa", trust_remote_code: bool = False,
               pair: ModelPair | None = None, default_prompt: str | None = None,
               store: SessionStore | None = None, history: int = MAX_HISTORY,
               model_dirs: tuple[str, ...] = ()) -> gr.Blocks:
    """The app's Blocks over the given models (the embedded pair by default, or an injected `pair`).

    `history` caps the rounds each browser session keeps; `model_dirs` are further folders the UI may
    load draft models from.
    """
    source = PairSource(target, draft, dtype, device, device_map, attn_implementation, trust_remote_code, pair,
                        tuple(model_dirs))
    ctl = Controller(source, store, history)
    prompts = load_prompts()
    by_id = {p["id"]: p["prompt"] for p in prompts}
    first_prompt = default_prompt or (prompts[0]["prompt"] if prompts else DEFAULT_PROMPT)

    # delete_cache: Gradio's copies of exported files (a tree HTML embeds plotly.js, ~5 MB) go after an hour.
    with gr.Blocks(title="tevviz", analytics_enabled=False, delete_cache=(3600, 3600)) as demo:
        # Gradio deletes a state an hour after its tab closes, or once it has not changed for `time_to_live`
        # seconds; either way the callback frees the session's DecodeSession and ExitTrain trainer.
        state = gr.State(None, time_to_live=ctl.store.ttl_s,
                         delete_callback=lambda st: st is not None and ctl.store.drop(st.sid))
        gr.Markdown(f"## tevviz — draft-tree debugger for tree speculative decoding\nModels: {source.description} "
                    "(loaded on first use).")
        with gr.Tabs():
            with gr.Tab("Decode"):
                with gr.Row(equal_height=False):
                    with gr.Column(scale=1, min_width=320):
                        pick = gr.Dropdown([(f"{p['title']} [{p['split']}]", p["id"]) for p in prompts], value=None,
                                           label="Example prompt",
                                           info=None if prompts else "assets/prompts.jsonl is not there yet",
                                           interactive=bool(prompts))
                        prompt = gr.Textbox(first_prompt, lines=4, max_lines=12, label="Prompt")
                        with gr.Row():
                            step_btn = gr.Button("Step", variant="primary", min_width=100)
                            token_btn = gr.Button("Step token", min_width=100)
                        with gr.Row(equal_height=True):
                            run_btn = gr.Button("Run", min_width=100)
                            reset_btn = gr.Button("Reset", variant="stop", min_width=100)
                        run_rounds = gr.Number(0, precision=0, label="Run: rounds (0 = to the end)")
                        error = gr.Markdown("", label="error", elem_id="error-box")
                        with gr.Accordion("Sampling", open=True):
                            with gr.Row():
                                temperature = gr.Number(0.0, label="temperature (0 = greedy)", min_width=90)
                                seed = gr.Number(0, precision=0, label="seed", min_width=90)
                            with gr.Row():
                                top_k = gr.Number(0, precision=0, label="top-k (0 = off)", min_width=90)
                                top_p = gr.Number(1.0, label="top-p (1 = off)", min_width=90)
                        with gr.Accordion("Draft tree and verifier", open=True):
                            builder = gr.Radio(list(BUILDERS), value="best-first", label="builder")
                            with gr.Row():
                                budget = gr.Number(32, precision=0, label="B budget", min_width=70)
                                depth = gr.Number(6, precision=0, label="H depth", min_width=70)
                            with gr.Row():
                                children = gr.Number(4, precision=0, label="K children", min_width=70)
                                width = gr.Number(8, precision=0, label="W width", min_width=70)
                            branching = gr.Textbox("4,2,2,1,1", label="static branching per depth")
                            verifier = gr.Radio(list(VERIFIERS), value="tev", label="verifier")
                            max_new = gr.Number(64, precision=0, label="max new tokens")
                        baseline_btn = gr.Button("Run baseline")
                    with gr.Column(scale=3, min_width=600):
                        stats = gr.Markdown("No rounds yet.", label="live stats", elem_classes="stats-table")
                        with gr.Row():
                            view = gr.Slider(0, 1, value=0, step=1, label="round", interactive=False, scale=3)
                            metric = gr.Radio(list(METRICS), value="P", label="node colour", scale=2)
                        tree = gr.Plot(tree_plot(AppState(), "P"), label="draft tree", elem_id="tree-plot")
                        with gr.Row(equal_height=False):
                            node = gr.Dropdown([], value=None, label="node details", scale=1)
                            details = gr.Markdown("Choose a node to see its scores.", label="node scores")
                        text = gr.HighlightedText(text_spans(AppState()), label="text (each round's block; bonus "
                                                  "tokens marked)", color_map={"bonus": "#f4a261",
                                                                                "current token": "#e63946"},
                                                  show_inline_category=False, combine_adjacent=False)
                with gr.Accordion("Session statistics", open=True), gr.Row():
                    stage_plot = gr.Plot(label="stage times")
                    hist_plot = gr.Plot(label="block lengths")
                    depth_plot = gr.Plot(label="acceptance by depth")
                with gr.Accordion("Export and import", open=True):
                    with gr.Row():
                        export_btn = gr.Button("Export", variant="primary")
                        round_dl = gr.DownloadButton("Round JSON", interactive=False)
                        session_dl = gr.DownloadButton("Session JSON", interactive=False)
                        html_dl = gr.DownloadButton("Tree HTML", interactive=False)
                    with gr.Row():
                        upload = gr.File(file_types=[".json"], label="Import a tevviz session/round JSON or a "
                                         "DDTree trace (≤ 64 MiB)", height=120)
                        rescore_btn = gr.Button("Re-score", scale=0, min_width=120)
            with gr.Tab("Verifier comparison"):
                gr.Markdown("**(a) One tree, many draws.** Re-score the shown round's tree with the target and draw "
                            "each verifier M times: all must follow the exact exit law w.")
                with gr.Row():
                    draws = gr.Number(2000, precision=0, label="draws M")
                    cmp_seed = gr.Number(0, precision=0, label="seed")
                    cmp_btn = gr.Button("Compare verifiers", variant="primary")
                law_plot = gr.Plot(label="exit law")
                law_md = gr.Markdown(label="verifier table")
                gr.Markdown("**(b) Side by side.** Decode the prompt with two configurations (the other settings "
                            "come from the Decode tab).")
                sides = []
                # The shipped drafters only fit the shipped target.
                shipped = shipped_drafters() if target is None and pair is None else {}
                draft_choices = [("this session's draft", "")] + [(n, str(p)) for n, p in shipped.items()]
                with gr.Row():
                    for name, default_verifier in (("A", "tev"), ("B", "predraw")):
                        with gr.Column():
                            sides.append({
                                "verifier": gr.Dropdown(list(VERIFIERS), value=default_verifier,
                                                        label=f"{name}: verifier"),
                                "builder": gr.Dropdown(list(BUILDERS), value="best-first", label=f"{name}: builder"),
                                "budget": gr.Number(32, precision=0, label=f"{name}: budget B"),
                                "draft": gr.Dropdown(draft_choices, value="", allow_custom_value=True,
                                                     label=f"{name}: draft (a shipped one, or type a path)"),
                            })
                sbs_btn = gr.Button("Decode both", variant="primary")
                with gr.Row():
                    tree_a, tree_b = gr.Plot(label="A: final tree"), gr.Plot(label="B: final tree")
                with gr.Row():
                    md_a, md_b = gr.Markdown(label="A: summary"), gr.Markdown(label="B: summary")
            settings = {"prompt": prompt, "temperature": temperature, "top_k": top_k, "top_p": top_p, "seed": seed,
                        "builder": builder, "budget": budget, "depth": depth, "children": children, "width": width,
                        "branching": branching, "verifier": verifier, "max_new_tokens": max_new}
            with gr.Tab("ExitTrain"):
                _exittrain_tab(ctl, state, settings)

        view_outputs = [tree, view, node, details, text]
        all_outputs = [state, error, stats, stage_plot, hist_plot, depth_plot, *view_outputs]

        def shown(st: AppState, metric_name: str) -> dict:
            """Updates of the tree, round slider, node picker, details and text for `st`."""
            r = st.round
            return {
                state: st,
                error: "",
                tree: tree_plot(st, metric_name),
                view: gr.Slider(minimum=0, maximum=max(len(st.rounds) - 1, 1), value=max(st.view, 0),
                                interactive=len(st.rounds) > 1),
                node: gr.Dropdown(choices=node_choices(st), value=st.highlight if isinstance(st.highlight, int)
                                  else None),
                details: node_details(st),
                text: text_spans(st) if r is not None or st.prompt else [],
            }

        def everything(st: AppState, metric_name: str) -> dict:
            dicts = [r.to_dict() for r in st.rounds]
            return {
                **shown(st, metric_name),
                stats: stats_markdown(st),
                stage_plot: _compact(stage_times_figure(dicts)),
                hist_plot: _compact(block_length_histogram(dicts)),
                depth_plot: _compact(acceptance_by_depth_figure(dicts)),
            }

        def failed(e: Exception) -> dict:
            gr.Warning(str(e))
            return {error: f"Error: {e}"}

        def step(st, metric_name, progress=PROGRESS, **values):
            try:
                prompt_text, cfg = decode_settings(**values)
                progress(0, desc="drafting and verifying (models load on first use)")
                return everything(ctl.step(_current(st), prompt_text, cfg), metric_name)
            except TevvizError as e:
                return failed(e)

        def step_token(st, metric_name, **values):
            try:
                prompt_text, cfg = decode_settings(**values)
                st = _current(st)
                new = ctl.step_token(st, prompt_text, cfg)
            except TevvizError as e:
                return failed(e)
            return everything(new, metric_name) if len(new.rounds) != len(st.rounds) else shown(new, metric_name)

        def run(st, metric_name, rounds, progress=PROGRESS, **values):
            try:
                prompt_text, cfg = decode_settings(**values)
                limit = max(int(rounds or 0), 0)
            except (TevvizError, TypeError, ValueError) as e:
                yield failed(TevvizError(str(e)))
                return
            st, done = _current(st), 0
            while not limit or done < limit:
                try:
                    st = ctl.step(st, prompt_text, cfg)
                except TevvizError as e:
                    yield failed(e)
                    return
                done += 1
                progress(len(st.generated) / cfg.max_new_tokens, desc=f"round {len(st.rounds)}")
                yield everything(st, metric_name)
                if st.done:
                    return

        def reset(st, metric_name):
            return everything(ctl.reset(_current(st)), metric_name)

        def baseline(st, metric_name, progress=PROGRESS, **values):
            try:
                prompt_text, cfg = decode_settings(**values)
                progress(0, desc="autoregressive decoding of the target")
                st = ctl.baseline(_current(st), prompt_text, cfg)
            except TevvizError as e:
                return failed(e)
            return {state: st, error: "", stats: stats_markdown(st)}

        def set_view(st, metric_name, index):
            return shown(Controller.view(_current(st), index), metric_name)

        def set_metric(st, metric_name):
            return {tree: tree_plot(_current(st), metric_name)}

        def select_node(st, metric_name, node_id):
            st = Controller.select_node(_current(st), node_id)
            return {state: st, tree: tree_plot(st, metric_name), details: node_details(st)}

        def pick_prompt(prompt_id):
            return by_id.get(prompt_id, gr.skip())

        def export(st, metric_name):
            st = _current(st)
            try:
                html = tree_plot(st, metric_name).to_html(include_plotlyjs=True, full_html=True)
                paths = ctl.export(st, html)
            except TevvizError as e:
                return failed(e)
            return {error: "", round_dl: str(paths[0]), session_dl: str(paths[1]), html_dl: str(paths[2])}

        def enable_downloads(st):
            ready = _current(st).round is not None
            return [gr.DownloadButton(interactive=ready)] * 3

        def import_file(st, metric_name, path):
            if not path:
                return {}
            try:
                return everything(ctl.import_file(_current(st), path), metric_name)
            except TevvizError as e:
                return failed(e)

        def rescore_round(st, metric_name, progress=PROGRESS, **values):
            try:
                _, cfg = decode_settings(**values)
                progress(0, desc="re-scoring with the target")
                return everything(ctl.rescore(_current(st), values["prompt"], cfg.sampling), metric_name)
            except TevvizError as e:
                return failed(e)

        def compare(st, draws_m, seed_m, progress=PROGRESS, **values):
            try:
                _, cfg = decode_settings(**values)
                c = ctl.compare(_current(st), values["prompt"], cfg.sampling, int(draws_m or 0), int(seed_m or 0),
                                progress=progress)
            except TevvizError as e:
                return failed(e)
            emp = {x.name: x.freqs for x in c.laws}
            return {error: "", law_plot: verifier_law_figure(c.w, emp, c.node_labels), law_md: comparison_markdown(c)}

        def side_by_side(st, verifier_a, builder_a, budget_a, draft_a, verifier_b, builder_b, budget_b, draft_b,
                         progress=PROGRESS, **values):
            sides_values = ((verifier_a, builder_a, budget_a, draft_a), (verifier_b, builder_b, budget_b, draft_b))
            try:
                prompt_text, _ = decode_settings(**values)
                out = []
                for label, (v, b, nodes, draft_path) in zip("AB", sides_values):
                    cfg_side = decode_settings(**{**values, "verifier": v, "builder": b, "budget": nodes})[1]
                    shown = Path(draft_path.strip()).name if draft_path and draft_path.strip() else ""
                    name = f"{label}: {v}, {b}, B={nodes}" + (f", draft {shown}" if shown else "")
                    out.append(ctl.decode_all(prompt_text, cfg_side, (draft_path or "").strip(), name, progress,
                                              sid=_current(st).sid))
            except TevvizError as e:
                return failed(e)
            figs = [tree_figure(d.rounds[-1].to_dict(), "P", title=f"{d.label} — last round") for d in out]
            for fig in figs:  # half-width columns: let plotly fit the figure to its column
                fig.update_layout(width=None, autosize=True)
            return {error: "", tree_a: figs[0], tree_b: figs[1], md_a: decoded_markdown(out[0]),
                    md_b: decoded_markdown(out[1])}

        model_work = {"concurrency_id": "model", "concurrency_limit": 1}
        light = {"concurrency_limit": None}
        step_btn.click(step, [state, metric], all_outputs, inputs_kwargs=settings, api_name="step", **model_work)
        token_btn.click(step_token, [state, metric], all_outputs, inputs_kwargs=settings, api_name="step_token",
                        **model_work)
        run_event = run_btn.click(run, [state, metric, run_rounds], all_outputs, inputs_kwargs=settings,
                                  api_name="run", **model_work)
        reset_btn.click(reset, [state, metric], all_outputs, api_name="reset", cancels=[run_event], **light)
        baseline_btn.click(baseline, [state, metric], [state, error, stats], inputs_kwargs=settings,
                           api_name="baseline", **model_work)
        view.release(set_view, [state, metric, view], [state, *view_outputs, error], api_name="view", **light)
        metric.change(set_metric, [state, metric], [tree], api_name="metric", **light)
        node.select(select_node, [state, metric, node], [state, tree, details], api_name="node", **light)
        pick.change(pick_prompt, [pick], [prompt], api_visibility="private", **light)
        downloads = [round_dl, session_dl, html_dl]
        export_btn.click(export, [state, metric], [error, *downloads], api_name="export", **light).then(
            enable_downloads, [state], downloads, api_visibility="private", **light)
        upload.upload(import_file, [state, metric, upload], all_outputs, api_name="import_file", **light)
        rescore_btn.click(rescore_round, [state, metric], all_outputs, inputs_kwargs=settings, api_name="rescore",
                          **model_work)
        cmp_btn.click(compare, [state, draws, cmp_seed], [error, law_plot, law_md], inputs_kwargs=settings,
                      api_name="compare", **model_work)
        side_inputs = [c for side in sides for c in side.values()]
        sbs_btn.click(side_by_side, [state, *side_inputs], [error, tree_a, tree_b, md_a, md_b], inputs_kwargs=settings,
                      api_name="side_by_side", **model_work)
    demo.queue(default_concurrency_limit=1)
    return demo


def launch(target: str | None = None, draft: str | None = None, dtype: str = "auto", device: str | None = None,
           device_map=None, attn_implementation: str = "sdpa", trust_remote_code: bool = False,
           server_name: str = "127.0.0.1", server_port: int | None = None, share: bool = False,
           model_dirs: tuple[str, ...] = ()) -> None:
    """Serve the app (blocking); binds this machine only and makes no share link unless asked."""
    demo = build_demo(target, draft, dtype, device, device_map, attn_implementation, trust_remote_code,
                      model_dirs=model_dirs)
    demo.launch(server_name=server_name, server_port=server_port, share=share, **launch_options())


if __name__ == "__main__":
    launch()
