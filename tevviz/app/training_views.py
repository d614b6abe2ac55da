"""The ExitTrain panel's before/after table with paired standard errors, and both drafters' trees in one layout.

No gradio here; the trees are drawn by app/pair_view.py with render/compare_figure.py.
"""

from __future__ import annotations

from ..engine.analysis.before_after import before_after_table
from ..engine.analysis.table import Column
from ..engine.train.evaluation import EVAL_ROUNDS
from ..engine.train.exit_mass import ExitMassMove
from ..render.table import cell, markdown
from .pair_details import Pair
from .training_actions import TrainReport

NUMBER = Column("C_p", "C_p", "number", 4)


def train_markdown(report: TrainReport) -> str:
    """The before/after table on the same contexts with paired standard errors, and the last step's losses."""
    last = report.log[-1]
    before, after = report.table
    lines = [
        (f"{len(report.log)} steps so far on {report.contexts} contexts from this session's rounds. Last step "
         f"({last['objective']}): L = {last['loss']:.4g}, L_tok = {last['l_tok']:.4g}, "
         f"L_exit = {last['l_exit']:.4g}. Decoding at T = {report.temperature:g}."),
        "",
        *markdown(before_after_table(before, after, EVAL_ROUNDS)),
    ]
    if report.notice:
        lines.append(f"\n*{report.notice}*")
    return "\n".join(lines)


def moved_pair(moved: ExitMassMove) -> Pair:
    """Both drafters' trees on the same context, to draw in one shared layout (a node at the same place in both,
    matched by token path), coloured by w under the target on one scale; the ring is argmax w."""
    # Two lines: half a narrow window holds neither title in one.
    titles = [f"{name} draft, round {moved.round_index}<br>C_p = {cell(r.C_p, NUMBER)} (ring: most likely exit)"
              for name, r in (("original", moved.before), ("trained", moved.after))]
    return Pair(moved.before, moved.after, ("original", "trained"), "w", (titles[0], titles[1]))
