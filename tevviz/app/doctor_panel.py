"""The Doctor tab: which reading of the target's states the drafter was trained with (engine/scan/doctor.py), run on the
session's pair (or a shipped or typed drafter beside its target) on the model thread; the table and verdict from
render/doctor.py."""

from __future__ import annotations

from pathlib import Path

import gradio as gr

from ..engine import TevvizError
from ..engine.scan.doctor import LIMIT, builtin_rows, encode_rows, run_doctor, spread
from ..prompts import load_prompts
from ..render.doctor import doctor_markdown
from .controller import Controller
from .model_thread import on_model_thread
from .widgets import MODEL_WORK, PROGRESS, Panel, current

INTRO = ("**Doctor.** A drafter that reads the target's hidden states can be handed the wrong layers (a layer id read "
         "as a decoder layer's output or as a `hidden_states` index) and greedy output stays correct: only acceptance "
         "drops. This decodes held-out prompts greedily under each plausible reading and measures the drafter's top-1 "
         "acceptance at depths 1 and 2; the verdict compares the drafted tokens accepted per round (docs/doctor.md).")


def doctor_prompts(ctl: Controller, limit: int) -> tuple[list[dict], str]:
    """The named pair's held-out (eval) prompts, else the built-in ones; `limit` of them, spread over the set."""
    named = ctl.source.model.named if ctl.source.pair is None else None
    if named is not None:
        rows, where = load_prompts(named.split_path("eval"), "eval"), f"the {named.name} pair's eval prompts"
    else:
        rows, where = builtin_rows(), "the built-in prompts"
    picked = spread(rows, limit)
    return picked, f"{len(picked)} of {where}"


@on_model_thread
def doctor_run(ctl: Controller, sid: str, draft: str, limit: int, max_new_tokens: int, progress=None) -> str:
    """The doctor's report as markdown, on the session's pair or with `draft` beside its target."""
    rows, where = doctor_prompts(ctl, limit)
    pair = ctl.source.get(draft) if draft else ctl.session_pair(sid)
    base = ctl.source.pair is None and pair is ctl.source.get()
    path = draft or (ctl.source.model.resolved()[1] if base else None)
    tick = None if progress is None else (lambda done, total, name: progress(done / total, desc=f"reading {name}"))
    report = run_doctor(pair, encode_rows(pair.tokenizer, rows), max_new_tokens, path, tick)
    return f"Drafter `{pair.draft_name}` beside `{pair.target_name}`; prompts: {where}.\n\n{doctor_markdown(report)}"


def _widgets(drafters: dict[str, Path]) -> Panel:
    gr.Markdown(INTRO)
    choices = [("this session's draft", "")] + [(n, str(p)) for n, p in drafters.items()]
    with gr.Row():
        draft = gr.Dropdown(choices, value="", allow_custom_value=True, label="draft (a shipped one, or type a path)")
        limit = gr.Number(LIMIT, precision=0, label="prompts")
        max_new = gr.Number(64, precision=0, label="max new tokens per prompt")
        run_btn = gr.Button("Run the doctor", variant="primary")
    error = gr.Markdown(elem_classes="error-box")
    report = gr.Markdown(elem_id="doctor-report", elem_classes="stats-table")
    return Panel(draft=draft, limit=limit, max_new=max_new, run_btn=run_btn, error=error, report=report)


def doctor_panel(ctl: Controller, state: gr.State, drafters: dict[str, Path]) -> None:
    """The Doctor tab (inside its gr.Tab)."""
    ui = _widgets(drafters)

    def run(st, draft, limit, max_new, progress=PROGRESS):
        try:
            progress(0, desc="the doctor (models load on first use)")
            md = doctor_run(ctl, current(st).sid, (draft or "").strip(), int(limit or 0), int(max_new or 0),
                            progress)
        except TevvizError as e:
            gr.Warning(str(e))
            return {ui.error: f"Error: {e}"}
        return {ui.error: "", ui.report: md}

    ui.run_btn.click(run, [state, ui.draft, ui.limit, ui.max_new], [ui.error, ui.report], api_name="doctor",
                     **MODEL_WORK)
