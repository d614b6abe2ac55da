"""The ExitTrain panel's before/after table with paired standard errors, and both drafters' trees in one layout.

No gradio here; the trees come from render/compare_figure.py.
"""

from __future__ import annotations

import math
from dataclasses import replace

from ..engine.train.evaluation import EVAL_ROUNDS, paired_change
from ..engine.train.exit_mass import ExitMassMove
from ..render.compare_figure import pair_figures
from .training_actions import TrainReport


def _num(x: float | None, digits: int = 4) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def _with_se(mean: float, se: float | None, digits: int = 4) -> str:
    return _num(mean, digits) + ("" if se is None or math.isnan(se) else f" ± {se:.{digits}f}")


def _change(d, digits: int = 4) -> str:
    """A paired change as `+0.1234 ± 0.0456 (+7.7%)` of the before mean."""
    if d.mean is None:
        return "—"
    text = f"{d.mean:+.{digits}f}" + ("" if d.se is None else f" ± {d.se:.{digits}f}")
    return text + (f" ({d.mean / abs(d.a):+.1%})" if d.a else "")


def train_markdown(report: TrainReport) -> str:
    """The before/after table on the same contexts with paired standard errors, and the last step's losses."""
    last = report.log[-1]
    before, after = report.table
    paired = len(before.per_context_C_p) == len(after.per_context_C_p) > 0
    lines = [
        (f"{len(report.log)} steps so far on {report.contexts} contexts from this session's rounds. Last step "
         f"({last['objective']}): L = {last['loss']:.4g}, L_tok = {last['l_tok']:.4g}, "
         f"L_exit = {last['l_exit']:.4g}."),
        "",
        (f"Before and after on the same {before.contexts} contexts: mean C_p of the tree each drafter builds "
         f"(target at T = 1), and tau, the mean block length over {EVAL_ROUNDS} decoding rounds from each context "
         f"(T = {report.temperature:g}; {before.rounds} and {after.rounds} rounds). ± is one standard error over "
         "contexts; the change is paired by context (both drafters on the same contexts and seeds)."),
        "",
        "| drafter | mean C_p | mean E[L] = 1 + C_p | tau | contexts | rounds |",
        "|---|---|---|---|---|---|",
    ]
    for row in report.table:
        lines.append(f"| {row.name} | {_with_se(row.C_p, row.C_p_se)} | {_num(row.expected_length)} | "
                     f"{_with_se(row.tau, row.tau_se)} | {row.contexts} | {row.rounds} |")
    if paired:
        cp, tau = paired_change(before, after, "C_p"), paired_change(before, after, "tau")
        length = replace(cp, a=1 + cp.a, b=1 + cp.b)  # E[L] = 1 + C_p: the same change, another base
        lines.append(f"| change (paired) | {_change(cp)} | {_change(length)} | {_change(tau)} | {cp.n} | |")
    if report.notice:
        lines.append(f"\n*{report.notice}*")
    return "\n".join(lines)


def moved_pair(moved: ExitMassMove):
    """Both drafters' trees on the same context in one shared layout (a node at the same place in both, matched by
    token path), coloured by w under the target on one scale; the ring is argmax w."""
    # Two lines: half a narrow window holds neither title in one.
    titles = [f"{name} draft, round {moved.round_index}<br>C_p = {_num(r.C_p)} (ring: most likely exit)"
              for name, r in (("original", moved.before), ("trained", moved.after))]
    return pair_figures(moved.before, moved.after, ("original", "trained"), "w", titles)
