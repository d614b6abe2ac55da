"""The run picker, pinning, links and the comparison of two runs (Decode tab), and the view restored from the URL
when the page loads."""

from __future__ import annotations

import time
from dataclasses import replace

import gradio as gr

from ..engine import TevvizError
from ..engine.analysis.run_compare import Run, compare_runs
from ..engine.records import io as tio
from ..render.compare_figure import WIDTH, union_figure_dict
from .compare_views import comparison_markdown
from .figure_view import as_width, reported_width, sent
from .navigation import select, show_round
from .runs import reopened, run_name, settings_values
from .updates import MAX_WIDTHS, ROUND_OUTPUTS, everything, position_of, search_of, view_url
from .url_view import COPY_JS, LOAD_JS, read_query
from .widgets import BROWSE, BROWSE_QUEUE, LIGHT, Panel, current, failed, figure_json, remember, scroll_to_js

ID_CHARS = set("0123456789abcdef")
MAX_COMPARED = 200  # browser sessions whose last comparison is kept, to lay it out again for its view's width
def run_choices(ctl, st, shown: bool = True) -> gr.Dropdown:
    """This browser's runs, newest first, the one shown among them (picked unless `shown` is False: B's picker, where
    no pick means the run shown when Compare is pressed)."""
    choices = [] if not st.rounds else [(f"{run_name(st)} (shown)", st.run_id)]
    for r in ctl.runs.runs(st.user):
        if r.run_id != st.run_id:
            mark = " (pinned as A)" if r.run_id == st.pinned else ""
            choices.append((f"{r.name} · {time.strftime('%H:%M:%S', time.localtime(r.written))}{mark}", r.run_id))
    gone = ctl.runs.dropped(st.user)
    info = (f"the cap of {ctl.runs.max_runs} runs per browser removed the oldest: " + "; ".join(gone)) if gone else None
    return gr.Dropdown(choices=choices, value=st.run_id if st.rounds and shown else None, info=info)


def opened_updates(ctl, ui: Panel, st, metric, said_error: str = "") -> dict:
    """Everything for a run just opened, its recorded settings and prompt in the settings widgets."""
    values = settings_values(st.meta) | {"prompt": st.prompt}
    out = {**everything(ui, st, metric), **{ui.settings[k]: v for k, v in values.items() if k in ui.settings},
           ui.run_pick: run_choices(ctl, st), ui.b_pick: run_choices(ctl, st, shown=False), ui.metric: metric}
    if said_error:
        out[ui.error] = said_error
    return out


def wire_restore(ctl, demo: gr.Blocks, ui: Panel, outputs: list) -> None:
    """On load: the browser's id (its runs' folder) and the view the URL names."""

    def restore(st, metric, user, query, width=None):
        st, width = current(st), as_width(width)
        if width is not None:
            remember(ui.widths, st.sid, width, MAX_WIDTHS)
        if len(user or "") == 32 and set(user) <= ID_CHARS:
            st = replace(st, user=user)
        q = read_query(query)
        if not q["run"] and st.rounds:
            # A Step pressed before the page's load finished ran without the browser's id: keep its run now, and
            # redraw so the URL names it (a reload or a link then finds it).
            ctl.keep(st, wait=True)
            return {**everything(ui, st, metric), ui.run_pick: run_choices(ctl, st),
                    ui.b_pick: run_choices(ctl, st, shown=False)}
        if not q["run"]:
            return {ui.state: st, ui.run_pick: run_choices(ctl, st), ui.b_pick: run_choices(ctl, st, shown=False)}
        try:
            imported = ctl.runs.load(q["user"] or "", q["run"])
        except TevvizError as e:
            return {ui.state: st, ui.error: f"Error: the link's run: {e}", ui.run_pick: run_choices(ctl, st)}
        name = imported.meta.get("run_name", q["run"][:8])
        new = reopened(st, imported, q["run"], ctl.history, f"opened run {name} from the link; Step continues it",
                       origin="run")
        if q["round"] is not None:
            new = show_round(new, position_of(new, q["round"]))
        if q["node"] is not None:
            new = select(new, q["node"])
        new = replace(new, fold_below=q["below"])
        if q["folds"] and new.round is not None:
            new = replace(new, expanded=frozenset(u for u in q["folds"] if 0 <= u < new.round.size))
        if q["walk"] is not None and new.round is not None and q["walk"] < new.round.block_length:
            new = replace(new, token=q["walk"], node=None)
        new = replace(new, pinned=_pinned(ctl, new, q["pin"]))
        ctl.keep(new)  # a link from another browser: the run joins this browser's runs
        metric = q["metric"] or metric
        new, shown = _compared_again(ctl, ui, replace(new, metric=metric), q["cmp"])
        box = {ui.fold_mass: new.fold_below} if new.fold_below is not None else {}
        return opened_updates(ctl, ui, new, metric) | shown | box

    load = demo.load(None, None, [ui.user_box, ui.query_box, ui.width_box], js=LOAD_JS)
    # At once, beside the views' queue (as before it existed). A Step pressed right after a link's view showed once
    # seemed to begin a new run; the cause found since was a width redraw of the older round landing after the
    # Step's tree (now dropped by the browser, figure_view.py).
    load.then(restore, [ui.state, ui.metric, ui.user_box, ui.query_box, ui.width_box], outputs,
              api_visibility="private", **LIGHT)


def wire_runs(ctl, demo: gr.Blocks, ui: Panel) -> None:
    """Open, pin, link and compare runs; restore the URL's view on load."""
    ui.run_choices = lambda st: run_choices(ctl, st)
    ui.compared, ui.compare_widths = {}, {}  # session id -> the runs and round compared last; its view's px
    settings = ui.take(ui.settings)
    opened_outputs = [ui.state, *ui.take(ROUND_OUTPUTS), ui.run_pick, ui.b_pick, ui.metric, *settings, ui.runs_error]
    wire_restore(ctl, demo, ui, [*opened_outputs, ui.cmp_md, ui.cmp_plot, ui.cmp_acc, ui.fold_mass])

    def opened(st, metric, said_error: str = "") -> dict:
        return opened_updates(ctl, ui, st, metric, said_error)

    def open_run(st, metric, run_id):
        st = current(st)
        if not run_id:
            return gr.skip()
        try:
            return {**opened(ctl.reopen(st, run_id), metric), ui.runs_error: ""}
        except TevvizError as e:
            return failed(ui.runs_error, e)

    def pin(st, metric):
        st = current(st)
        if not st.rounds:
            return failed(ui.runs_error, TevvizError("no run to pin yet: press Step first"))
        ctl.keep(st, wait=True)
        st = replace(st, pinned=st.run_id, compared=None)
        return {ui.state: st, ui.cmp_md: f"**A** (pinned): {run_name(st)}. Show or pick B, then Compare with A.",
                ui.b_pick: run_choices(ctl, st, shown=False), ui.runs_error: "", ui.cmp_acc: gr.Accordion(open=True),
                ui.url: view_url(st, metric, search_of(ui, st).query)}

    def compare(st, metric, b_id, index):
        st = current(st)
        try:
            st, shown = compared_updates(ctl, ui, st, b_id, index)
        except TevvizError as e:
            return failed(ui.runs_error, e)
        return {ui.state: st, **shown, ui.runs_error: "", ui.url: view_url(st, metric, search_of(ui, st).query)}

    def replan(st, evt: gr.EventData):
        """The comparison's tree again, laid out for the width its view reported."""
        width = reported_width(evt)
        if width is None or st is None:
            return gr.skip()  # no width, or a page still loading its state: the view asks again once drawn
        sid = st.sid
        remember(ui.compare_widths, sid, width, MAX_WIDTHS)
        return {ui.cmp_plot: _union(ui, sid, *ui.compared[sid])} if sid in ui.compared else gr.skip()

    def pick(st, evt: gr.EventData):
        """A click on a node rings it and shows its details above the tree; a second click on it clears them."""
        key, sid = sent(evt).get("key"), current(st).sid
        if sid not in ui.compared or isinstance(key, bool) or not isinstance(key, (int, float)):
            return gr.skip()  # a "+N" fold, or a comparison this server no longer holds
        a, b, k, shown = ui.compared[sid]
        node = None if int(key) == shown else int(key)
        ui.compared[sid] = (a, b, k, node)
        return {ui.cmp_plot: _union(ui, sid, a, b, k, node)}

    ui.open_btn.click(open_run, [ui.state, ui.metric, ui.run_pick], opened_outputs, api_name="open_run",
                      **BROWSE_QUEUE)
    ui.pin_btn.click(pin, [ui.state, ui.metric], [ui.state, ui.cmp_md, ui.b_pick, ui.runs_error, ui.cmp_acc, ui.url],
                     api_name="pin", **BROWSE_QUEUE)
    ui.cmp_btn.click(compare, [ui.state, ui.metric, ui.b_pick, ui.cmp_round],
                     [ui.state, ui.cmp_md, ui.cmp_plot, ui.runs_error, ui.cmp_acc, ui.url], api_name="compare_runs",
                     **BROWSE_QUEUE).then(
        # The comparison opens far below the button (1,450 px at 1440 px): the page goes to it, unless refused.
        None, None, None, js=scroll_to_js("#compare-text", unless="#runs-error"))
    ui.cmp_plot.apply(replan, [ui.state], [ui.cmp_plot], api_visibility="private", show_progress="hidden", **BROWSE)
    ui.cmp_plot.select(pick, [ui.state], [ui.cmp_plot], api_visibility="private", show_progress="hidden", **BROWSE)
    ui.link_btn.click(lambda st: ctl.keep(current(st), wait=True), [ui.state], None, api_visibility="private",
                      **LIGHT).then(None, None, [ui.link], js=COPY_JS).then(
        lambda: gr.Textbox(visible=True), None, [ui.link], api_visibility="private", **LIGHT)


def compared_updates(ctl, ui: Panel, st, b_id: str | None, index) -> tuple:
    """The pinned run A against run `b_id` (the one shown where None) at round `index` (the shown round, else their
    first shared one, where blank): the state naming the comparison, and the comparison's markdown, tree and open
    accordion. Raises TevvizError, saying why, where there is nothing to compare."""
    if not st.pinned:
        raise TevvizError("pin a run as A first (Pin as A), then show or pick B")
    b_id = b_id or st.run_id
    if not b_id or (b_id == st.run_id and not st.rounds):
        raise TevvizError("no run B: press Step, open a run, or pick one under Compare runs")
    a, b = (_run(ctl, st, run_id, name) for run_id, name in ((st.pinned, "A"), (b_id, "B")))
    names = tuple(_name(ctl, st, run_id) for run_id in (st.pinned, b_id))
    try:
        cmp = compare_runs(a, b)
        shown = st.round.index if st.round is not None else None
        typed = str(index if index is not None else "").strip()
        if typed and not typed.isdigit():
            raise TevvizError(f"round must be a round number, got {typed!r}")
        k = int(typed) if typed else shown if shown in cmp.round_indices else cmp.round_indices[0]
        if k not in cmp.round_indices:
            raise TevvizError(f"round {k} is not in both runs; they share rounds "
                              f"{cmp.round_indices[0]}-{cmp.round_indices[-1]}")
        rc = cmp.round(k)
    except (ValueError, IndexError):
        raise TevvizError("the two runs share no round") from None
    remember(ui.compared, st.sid, (a, b, k, None), MAX_COMPARED)
    return replace(st, compared=(b_id, k)), {ui.cmp_md: comparison_markdown(cmp, rc, names),
                                             ui.cmp_plot: _union(ui, st.sid, a, b, k),
                                             ui.cmp_acc: gr.Accordion(open=True)}


def _union(ui: Panel, sid, a: Run, b: Run, k: int, node: int | None = None) -> str:
    """Round k of runs A and B in one layout, as figure JSON for the comparison's view: laid out for the width that
    view reported, else for the tree view's (the view reports its own once it has drawn); `node` selected."""
    ra = next(r for r in a.rounds if r.index == k)
    rb = next(r for r in b.rounds if r.index == k)
    width = ui.compare_widths.get(sid) or ui.widths.get(sid) or WIDTH
    return figure_json(union_figure_dict(ra, rb, ("A", "B"), title=f"round {k}: A and B in one layout", width=width,
                                         selected=node, clicks=True))


def _compared_again(ctl, ui: Panel, st, cmp: tuple[str, str, int] | None) -> tuple:
    """The comparison a link showed, shown again (run B copied among this browser's runs as the pinned run is);
    nothing where the link shows none or its runs are gone, the reason said beside the Compare button."""
    if cmp is None or not st.pinned:
        return st, {}
    b_id = _pinned(ctl, st, cmp[:2])
    try:
        if b_id is None:
            raise TevvizError("run B is gone")
        return compared_updates(ctl, ui, st, b_id, cmp[2])
    except TevvizError as e:
        return st, {ui.runs_error: f"Error: the link's comparison: {e}"}


def _pinned(ctl, st, pin: tuple[str, str] | None) -> str | None:
    """The run a link pinned, kept among this browser's runs (copied there from the link's browser); None where the
    link pins none or its run is gone."""
    if pin is None or not st.user:
        return None
    owner, run_id = pin
    if owner == st.user or run_id == st.run_id:
        return run_id
    try:
        ctl.runs.save(st.user, run_id, tio.session_dict(**_session_args(ctl.runs.load(owner, run_id))), wait=True)
    except TevvizError:
        return None
    return run_id


def _session_args(imported) -> dict:
    return {"meta": imported.meta, "prompt": imported.prompt, "prompt_ids": imported.prompt_token_ids,
            "generated": imported.token_ids, "text": imported.text, "rounds": imported.rounds}


def _name(ctl, st, run_id: str) -> str:
    """What a run is, as the run picker names it."""
    if run_id == st.run_id:
        return run_name(st)
    return next((r.name for r in ctl.runs.runs(st.user) if r.run_id == run_id), run_id[:8])


def _run(ctl, st, run_id: str, name: str) -> Run:
    """A run to compare: the one shown as it is now, or a kept one."""
    if run_id == st.run_id:
        return Run(name, st.prompt, list(st.generated), list(st.rounds), dict(st.meta), st.text, list(st.prompt_ids))
    imported = ctl.runs.load(st.user, run_id)
    return Run.of(imported, name)
