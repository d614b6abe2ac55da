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
from .stops import Stopped
from .widgets import LIGHT, MODEL_WORK, PROGRESS, Panel, current, failed, stopper

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
    """The doctor's report as markdown, on the session's pair or with `draft` beside its target; `ctl.stop(st,
    "doctor")` ends it after the prompt in progress, with no verdict (every reading must decode the same prompts)."""
    rows, where = doctor_prompts(ctl, limit)
    pair = ctl.source.get(draft) if draft else ctl.session_pair(sid)
    base = ctl.source.pair is None and pair is ctl.source.get()
    path = draft or (ctl.source.model.resolved()[1] if base else None)
    with ctl.stops.job(sid, "doctor", "the doctor") as job:

        def tick(done: int, total: int, name: str) -> None:
            if progress is not None:
                progress(done / total, desc=f"reading {name}: {done} of {total} decodes")
            job.tick(done, total, "decodes")

        try:
            report = run_doctor(pair, encode_rows(pair.tokenizer, rows), max_new_tokens, path, tick)
        except Stopped as e:
            raise e.saying("no verdict, which needs every reading decoded on the same prompts") from None
    return f"Drafter `{pair.draft_name}` beside `{pair.target_name}`; prompts: {where}.\n\n{doctor_markdown(report)}"


def _widgets(drafters: dict[str, Path]) -> Panel:
    gr.Markdown(INTRO)
    choices = [("this session's draft", "")] + [(n, str(p)) for n, p in drafters.items()]
    with gr.Row():
        draft = gr.Dropdown(choices, value="", allow_custom_value=True, label="draft (a shipped one, or type a path)")
        limit = gr.Number(LIMIT, precision=0, label="prompts")
        max_new = gr.Number(64, precision=0, label="max new tokens per prompt")
        run_btn = gr.Button("Run the doctor", variant="primary")
        stop_btn = gr.Button("Stop", variant="stop", elem_id="doctor-stop", scale=0, min_width=90)
    error = gr.Markdown(elem_classes="error-box", elem_id="doctor-error")
    report = gr.Markdown(elem_id="doctor-report", elem_classes="stats-table")
    return Panel(draft=draft, limit=limit, max_new=max_new, run_btn=run_btn, stop_btn=stop_btn, error=error,
                 report=report)


def doctor_panel(ctl: Controller, state: gr.State, drafters: dict[str, Path]) -> None:
    """The Doctor tab (inside its gr.Tab)."""
    ui = _widgets(drafters)

    def run(st, draft, limit, max_new, progress=PROGRESS):
        try:
            progress(0, desc="the doctor (models load on first use)")
            md = doctor_run(ctl, current(st).sid, (draft or "").strip(), int(limit or 0), int(max_new or 0),
                            progress)
        except TevvizError as e:
            return failed(ui.error, e)
        return {ui.error: "", ui.report: md}

    ui.run_btn.click(run, [state, ui.draft, ui.limit, ui.max_new], [ui.error, ui.report], api_name="doctor",
                     **MODEL_WORK)
    # Not queued behind the models: it raises the flag the running doctor checks after each prompt.
    ui.stop_btn.click(stopper(ctl, "doctor"), [state], [], api_name="stop_doctor", **LIGHT)
