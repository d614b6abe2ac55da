"""The ExitTrain tab: train this browser session's copy of the draft on its own rounds, and see what moved."""

from __future__ import annotations

from dataclasses import replace

import gradio as gr

from ..engine import TevvizError
from ..engine.draft.builder_kinds import builder_kind
from ..engine.draft.drafters import drafter_kind_of
from ..engine.load.pairs import FIXED_BUDGET
from ..engine.train.exit_mass import ExitMassMove
from ..engine.train.exittrain import OBJECTIVES, TrainConfig
from ..render import exit_mass_change_figure
from .controller import Controller
from .pair_view import PairView
from .state import settings_in_force, train_settings
from .stops import Stopped
from .training_views import moved_pair, train_markdown
from .views import NO_TRAINING, empty_figure, loss_plot, moved_markdown
from .widgets import LIGHT, MODEL_WORK, PROGRESS, Panel, current, failed, stopper

PAIR_OUTPUTS = ("tree_before", "tree_after", "pair_md")  # both drafters' trees and the selected node's details
MOVED_OUTPUTS = (*PAIR_OUTPUTS, "moved", "moved_md")
# Outputs of /train_step after the gr.State, in order; /train_revert adds the checkbox.
TRAIN_OUTPUTS = ("error", "note", "table", "loss", *MOVED_OUTPUTS)
REVERT_OUTPUTS = (*TRAIN_OUTPUTS, "use")
USE_OUTPUTS = ("error", "note", "use")  # outputs of /train_use after the gr.State
SHOW_MOVED_OUTPUTS = ("error", *MOVED_OUTPUTS)  # outputs of /train_moved
INTRO = (
    "**ExitTrain** (docs/math.md, *ExitTrain*): train a copy of the draft, private to this browser session, on the "
    "rounds decoded here. Each round gives a context (the stream up to its root) and the target's continuation (the "
    "tokens committed after it). The drafter rebuilds its tree for each context and the frozen target weights "
    "every node's incoming token by its exit probability w. The loaded draft never changes; **Revert** drops "
    "the copy.")


def _widgets() -> Panel:
    gr.Markdown(INTRO)
    with gr.Row():
        objective = gr.Radio(list(OBJECTIVES), value="exit", label="objective", scale=2,
                             info="exit: w (the paper's); prefix: P rescaled; token: L_tok only; residual: ours")
        lr = gr.Number(TrainConfig.lr, label="learning rate", min_width=90)
        lambda_exit = gr.Number(TrainConfig.lambda_exit, label="lambda_exit", min_width=90)
        batch = gr.Number(4, precision=0, label="batch (contexts per step)", min_width=90)
        steps = gr.Number(5, precision=0, label="N steps per click", min_width=90)
    with gr.Row(equal_height=True):
        train_btn = gr.Button("Train step", variant="primary", min_width=100)
        stop_btn = gr.Button("Stop", min_width=70, elem_id="train-stop")
        revert_btn = gr.Button("Revert", variant="stop", min_width=100)
        use = gr.Checkbox(False, label="Use trained draft for Step and Run in this session")
    error = gr.Markdown("", label="error", elem_classes="error-box")
    note = gr.Markdown("Step and Run decode with the original draft.", label="draft in use")
    table = gr.Markdown(NO_TRAINING, label="before and after", elem_classes="stats-table")
    loss = gr.Plot(loss_plot([]), label="loss", show_label=False)
    with gr.Accordion("Where the exit mass moved", open=True):
        gr.Markdown("On the context of the round chosen with the Decode tab's round slider: the tree each drafter "
                    "builds there, coloured by w under the target (T = 1) on one scale, in one layout (a node sits at "
                    "the same place in both; open grey rings are the other drafter's nodes), and the nodes whose w "
                    "changed most. A click on a node selects it in both trees and says what each has there; +N "
                    "unfolds.")
        moved_btn = gr.Button("Show for the shown round", min_width=100)
        pair = PairView(("original draft: click a node; +N unfolds", "trained draft, in one layout"), "moved-pair")
        moved = gr.Plot(label="change of w", show_label=False)
        moved_md = gr.Markdown("", label="largest changes of w", elem_classes="stats-table")
    return Panel(objective=objective, lr=lr, lambda_exit=lambda_exit, batch=batch, steps=steps, train_btn=train_btn,
                 stop_btn=stop_btn, revert_btn=revert_btn, use=use, error=error, note=note, table=table, loss=loss,
                 moved_btn=moved_btn, pair=pair, tree_before=pair.views[0], tree_after=pair.views[1],
                 pair_md=pair.details, moved=moved, moved_md=moved_md)


def moved_values(pair: PairView, sid: str, moved: ExitMassMove | None) -> dict:
    """The exit-mass view's values by output name, its trees kept for clicks by session id `sid` (empty figures when
    no round with a context is shown)."""
    if moved is None:
        said = "no round with a known context is shown"
        return {**dict(zip(PAIR_OUTPUTS, pair.show(sid, None, said))), "moved": empty_figure(said), "moved_md": ""}
    return {**dict(zip(PAIR_OUTPUTS, pair.show(sid, moved_pair(moved)))),
            "moved": exit_mass_change_figure(moved.changes, moved.round_index),
            "moved_md": moved_markdown(moved)}


def trainable(cfg, draft):
    """The decode settings with a builder ExitTrain trains on: the drafter's own at a fixed B when the one in force
    draws its trees at random or sizes them by measured speed (a sampled chain, the mixed builder); what changed."""
    kind = cfg.builder.spec
    if kind.trainable:
        return cfg, ""
    own = drafter_kind_of(draft).default_builder
    builder = replace(cfg.builder, name=own, auto=False, budget=builder_kind(own).budget or FIXED_BUDGET,
                      stop_below=0.0)  # a chain's stop does not apply to the trees trained on
    return replace(cfg, builder=builder), (f"Trained on {own} trees of B = {builder.budget}: {kind.name} trees do not "
                                           f"train ({kind.why_not_trained}).")


def exittrain_tab(ctl: Controller, state: gr.State, settings: dict) -> None:
    """The ExitTrain tab (inside its gr.Tab); `settings` are the Decode tab's settings widgets by name."""
    ui = _widgets()

    def train(st, objective, lr, lambda_exit, batch, steps, progress=PROGRESS, **values):
        st = current(st)
        try:
            cfg, said = trainable(settings_in_force(st, values), ctl.source.get().draft)
            tcfg = train_settings(objective, lr, lambda_exit, batch, steps, cfg.builder)
            progress(0, desc="ExitTrain")
            report = ctl.train(st, tcfg, cfg, progress=progress)
        except Stopped as e:
            # The steps made are kept: the draft in use, the loss curve and the table say so.
            return {state: st, **failed(ui.error, e), **ui.updates(
                note=ctl.train_status(st), table=f"{e}." if e.kept else NO_TRAINING, loss=loss_plot(e.kept or []))}
        except TevvizError as e:
            return failed(ui.error, e)
        note = ctl.train_status(st) + (f" {said}" if said else "")
        return {state: st, **ui.updates(error="", note=note, table=train_markdown(report),
                                        loss=loss_plot(report.log), **moved_values(ui.pair, st.sid, report.moved))}

    def revert(st):
        st = current(st)
        said = ctl.train_revert(st)
        return {state: st, **ui.updates(error="", note=said[0].upper() + said[1:] + ".", table=NO_TRAINING,
                                        loss=loss_plot([]), use=False, **moved_values(ui.pair, st.sid, None))}

    def use(st, use_trained):
        st = current(st)
        try:
            said = ctl.train_use(st, bool(use_trained))
        except TevvizError as e:
            return {**failed(ui.error, e), ui.use: False}
        return {state: st, **ui.updates(error="", note=said)}

    def show_moved(st, progress=PROGRESS):
        st = current(st)
        try:
            progress(0, desc="building both trees")
            return ui.updates(error="", **moved_values(ui.pair, st.sid, ctl.exit_mass(st)))
        except TevvizError as e:
            return failed(ui.error, e)

    inputs = [state, *ui.take(("objective", "lr", "lambda_exit", "batch", "steps"))]
    ui.train_btn.click(train, inputs, [state, *ui.take(TRAIN_OUTPUTS)], inputs_kwargs=settings,
                       api_name="train_step", **MODEL_WORK)
    # Not queued behind the models: it raises the flag the running training checks between its steps.
    ui.stop_btn.click(stopper(ctl, "train"), [state], [], api_name="stop_train", **LIGHT)
    ui.revert_btn.click(revert, [state], [state, *ui.take(REVERT_OUTPUTS)], api_name="train_revert", **MODEL_WORK)
    ui.use.input(use, [state, ui.use], [state, *ui.take(USE_OUTPUTS)], api_name="train_use", **MODEL_WORK)
    ui.moved_btn.click(show_moved, [state], ui.take(SHOW_MOVED_OUTPUTS), api_name="train_moved", **MODEL_WORK)
    ui.pair.wire(state)
