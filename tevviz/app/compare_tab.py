"""The Verifier comparison tab: (a) every verifier drawn many times on one tree, (b) two configurations side by side."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import gradio as gr

from ..engine import TevvizError
from ..engine.analysis.run_compare import Run, compare_runs
from ..engine.draft.builders import BUILDERS, BuilderConfig
from ..engine.records import io as tio
from ..render import verifier_law_figure
from .compare_views import comparison_markdown as runs_markdown
from .controller import Controller
from .pair_details import Pair
from .pair_view import PairView
from .run_store import new_id
from .state import decode_settings, settings_in_force
from .views import comparison_markdown, decoded_markdown
from .widgets import LIGHT, MODEL_WORK, PROGRESS, Panel, current, failed

COMPARE_OUTPUTS = ("error", "law", "law_md")  # outputs of /compare, in order
SIDE_OUTPUTS = ("error", "tree_a", "tree_b", "pair_md", "md_a", "md_b")  # outputs of /side_by_side, in order
SIDE_FIELDS = ("verifier", "builder", "budget", "draft")  # the settings each side sets itself
PAIR_OUTPUTS = ("tree_a", "tree_b", "pair_md")  # the pair's two trees and the selected node's details


def _side(name: str, verifier: str, verifiers: list[str], drafters: dict[str, Path]) -> dict:
    draft_choices = [("this session's draft", "")] + [(n, str(p)) for n, p in drafters.items()]
    with gr.Column():
        return {
            "verifier": gr.Dropdown(verifiers, value=verifier, label=f"{name}: verifier"),
            # Fixed trees only: a mixed round's tree is chosen by a session's measurements, not by these settings.
            "builder": gr.Dropdown([b for b in BUILDERS if b != "mixed"], value=BuilderConfig.name,
                                   label=f"{name}: builder"),
            "budget": gr.Number(BuilderConfig.budget, precision=0, label=f"{name}: budget B"),
            "draft": gr.Dropdown(draft_choices, value="", allow_custom_value=True,
                                 label=f"{name}: draft (a shipped one, or type a path)"),
        }


def _widgets(verifiers: list[str], drafters: dict[str, Path]) -> Panel:
    gr.Markdown("**(a) One tree, many draws.** Re-score the shown round's tree with the target and draw "
                "each verifier M times: all must follow the exact exit law w.")
    with gr.Row():
        draws = gr.Number(2000, precision=0, label="draws M")
        seed = gr.Number(0, precision=0, label="seed")
        compare_btn = gr.Button("Compare verifiers", variant="primary")
        stop_btn = gr.Button("Stop: keep the draws so far", variant="stop")
    error = gr.Markdown("", elem_classes="error-box", elem_id="compare-error")  # beside the button pressed
    law = gr.Plot(label="exit law", show_label=False)
    law_md = gr.Markdown(label="verifier table", elem_classes="stats-table")
    gr.Markdown("**(b) Side by side.** Decode the prompt with two configurations (the other settings "
                "come from the Decode tab), keep both as runs and compare them: where the texts part, acceptance by "
                "depth with standard errors, and a round both decoded in the same context, its trees in one layout.")
    with gr.Row():
        side_a = _side("A", "tev", verifiers, drafters)
        side_b = _side("B", "predraw", verifiers, drafters)
    with gr.Row():
        side_btn = gr.Button("Decode both", variant="primary")
        side_stop = gr.Button("Stop: keep the rounds so far", variant="stop")
    side_error = gr.Markdown("", elem_classes="error-box", elem_id="side-error")
    pair = PairView(("A: click a node; +N unfolds", "B: the same round, in one layout"), "side-pair")
    with gr.Row(elem_id="side-summary"):
        md_a = gr.Markdown(label="A: summary", elem_classes="stats-table")
        md_b = gr.Markdown(label="B: summary", elem_classes="stats-table")
    return Panel(draws=draws, seed=seed, compare_btn=compare_btn, stop_btn=stop_btn, law=law, law_md=law_md,
                 error=error, side_error=side_error, side_btn=side_btn, side_stop=side_stop, pair=pair,
                 tree_a=pair.views[0], tree_b=pair.views[1], pair_md=pair.details, md_a=md_a, md_b=md_b,
                 **{f"{k}_{s}": c for s, side in (("a", side_a), ("b", side_b)) for k, c in side.items()})


def side_runs(ctl: Controller, ui: Panel, st, out: list) -> dict:
    """Both decodes kept as runs (the Decode tab's run picker has them) and compared as runs are: where the texts
    part, acceptance by depth with standard errors, and the last round both decoded in the same context, its two
    trees in one layout (a click on a node selects it in both). A decode ended by Stop is kept with the rounds it made;
    with fewer than two such, nothing is compared."""
    runs = []
    for d in (d for d in out if d.rounds):
        run = Run(d.name, d.prompt, d.generated, d.rounds, {**d.meta, "run_name": d.name}, d.text, d.prompt_ids)
        if st.user:
            ctl.runs.save(st.user, new_id(), tio.session_dict(run.meta, run.prompt, run.prompt_token_ids,
                                                               run.token_ids, run.text, run.rounds))
        runs.append(run)
    if len(runs) < 2:
        trees = ui.pair.show(st.sid, None, "fewer than two decodes: nothing to compare")
        return ui.updates(side_error=stopped_note(out, st.user), **dict(zip(PAIR_OUTPUTS, trees)),
                          md_a="\n\n".join(decoded_markdown(d) for d in out if d.rounds), md_b="")
    cmp = compare_runs(*runs)
    same = [k for k in cmp.round_indices if cmp.round(k).same_context]
    k = same[-1] if same else cmp.round_indices[0]
    ra, rb = (next(r for r in run.rounds if r.index == k) for run in runs)
    trees = ui.pair.show(st.sid, Pair(ra, rb, ("A", "B"), "P", (f"A, round {k}", f"B, round {k}")))
    # After the second text's closing fence, on a line of its own: on the fence's line it read as part of the text.
    kept = "\n\nBoth are in the Decode tab's run picker: pin one and compare any round." if st.user else ""
    return ui.updates(side_error=stopped_note(out, st.user), **dict(zip(PAIR_OUTPUTS, trees)),
                      md_a=decoded_markdown(out[0]) + "\n\n" + decoded_markdown(out[1]) + kept,
                      md_b=runs_markdown(cmp, cmp.round(k), (out[0].label, out[1].label)))


def stopped_note(out: list, kept: bool) -> str:
    """What a Stop during Decode both left: the decode it ended, the one never begun, what was kept."""
    if not any(d.stopped for d in out):
        return ""
    d = next(d for d in out if d.stopped)
    said = f"Stopped: {d.name} after {len(d.rounds)} rounds ({d.tokens} tokens)"
    if len(out) < 2:
        said += "; B was not decoded"
    made = [x.side for x in out if x.rounds]
    if made and kept:
        said += f"; {' and '.join(made)} kept as runs in the Decode tab's run picker"
    return said + ("" if len(made) == 2 else "; nothing to compare") + "."


def compare_tab(ctl: Controller, state: gr.State, settings: dict, verifiers: list[str],
                drafters: dict[str, Path]) -> None:
    """The Verifier comparison tab (inside its gr.Tab); each part's errors show under its own button."""
    ui = _widgets(verifiers, drafters)

    def compare(st, draws_m, seed_m, progress=PROGRESS, **values):
        st = current(st)
        try:
            sampling = settings_in_force(st, values).sampling
            c = ctl.compare(st, values["prompt"], sampling, int(draws_m or 0), int(seed_m or 0), progress=progress)
        except TevvizError as e:
            return failed(ui.error, e)
        emp = {x.name: x.freqs for x in c.laws}
        return ui.updates(error="", law=verifier_law_figure(c.w, emp, c.node_labels), law_md=comparison_markdown(c))

    def side_by_side(st, verifier_a, builder_a, budget_a, draft_a, verifier_b, builder_b, budget_b, draft_b,
                     progress=PROGRESS, **values):
        sides = ((verifier_a, builder_a, budget_a, draft_a), (verifier_b, builder_b, budget_b, draft_b))
        st = current(st)
        try:
            prompt, _ = decode_settings(**values)
            todo = []
            for v, b, nodes, draft_path in sides:
                # Each side's own fixed tree: the auto box's sizing would make B a limit
                # and refuse static and chain trees.
                cfg = decode_settings(**{**values, "verifier": v, "builder": b, "budget": nodes,
                                         "auto_budget": False})[1]
                shown = Path(draft_path.strip()).name if draft_path and draft_path.strip() else ""
                # A chain keeps no budget; a stopped one takes the Decode tab's stop and H as its longest.
                size = (f"stop<{cfg.builder.stop_below:g} H<={cfg.builder.depth}" if cfg.builder.stop_below
                        else f"B={nodes}")
                name = f"{v}, {b}, {size}" + (f", draft {shown}" if shown else "")
                todo.append((prompt, cfg, (draft_path or "").strip(), name))
            out = [replace(d, side=side) for side, d in zip("AB", ctl.decode_each(st.sid, todo, progress))]
        except TevvizError as e:
            return failed(ui.side_error, e)
        return side_runs(ctl, ui, st, out)

    def stop(st):
        ctl.stop_compare(current(st))

    def stop_sides(st):
        ctl.stop(current(st), "side")

    ui.compare_btn.click(compare, [state, ui.draws, ui.seed], ui.take(COMPARE_OUTPUTS), inputs_kwargs=settings,
                         api_name="compare", **MODEL_WORK)
    # Not queued behind the models: it only raises the flag the running comparison checks between its chunks.
    ui.stop_btn.click(stop, [state], [], api_name="stop_compare", **LIGHT)
    side_inputs = ui.take(f"{k}_{s}" for s in "ab" for k in SIDE_FIELDS)
    side_outputs = [ui.side_error, *ui.take(SIDE_OUTPUTS[1:])]  # its "error" is the box under Decode both
    ui.side_btn.click(side_by_side, [state, *side_inputs], side_outputs, inputs_kwargs=settings,
                      api_name="side_by_side", **MODEL_WORK)
    ui.side_stop.click(stop_sides, [state], [], api_name="stop_side_by_side", **LIGHT)
    ui.pair.wire(state)
