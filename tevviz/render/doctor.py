"""The doctor's report (engine/scan/doctor.py) as terminal text (`tevviz doctor`) and as markdown (the app's Doctor
tab): the readings' table (doctor_report.doctor_table, through the generic renderers), the best reading and the
verdict."""

from __future__ import annotations

from ..engine.analysis.doctor_report import OWN_MARK, DoctorReport, doctor_table
from .table import markdown, text


def _lines(report: DoctorReport) -> dict[str, str]:
    """What is said around the table, by name: layout, measured, key, best, verdict."""
    out = {"layout": f"layout: {report.layout}"}
    status = ("inconclusive (too few prompts)" if report.underpowered else "ok") if report.ok else "NOT OK"
    if not report.readings:
        return out | {"verdict": f"verdict: {status}: {report.verdict}"}
    margin = ("" if report.margin is None else
              f" (the best other reading minus the own one: {report.margin:+.3f} drafted tokens per round; clear above "
              f"{report.threshold:.3f})")
    measured = (f"measured: {report.measure}; {report.prompts} prompts, up to {report.max_new_tokens} new tokens "
                f"each, {report.builder} trees")
    key = (f"{OWN_MARK} the checkpoint's own reading; hidden_states 0 is the embedding output, i the output of "
           "decoder layer i - 1")
    return out | {"measured": measured, "key": key, "best": f"best: {report.best}{margin}",
                  "verdict": f"verdict: {status}: {report.verdict}"}


def doctor_text(report: DoctorReport) -> str:
    """The report for a terminal."""
    said = _lines(report)
    if not report.readings:
        return "\n".join(said.values())
    return "\n".join([said["layout"], said["measured"], "", *text(doctor_table(report)), "", said["key"],
                      said["best"], said["verdict"]])


def doctor_markdown(report: DoctorReport) -> str:
    """The report as markdown: the verdict first, then the table and what was measured."""
    said = _lines(report)
    if not report.readings:
        return f"**{said['verdict']}**\n\n{said['layout']}"
    key = "\\" + said["key"]  # the own mark, not a list bullet
    return "\n\n".join([f"**{said['verdict']}**", said["best"], "\n".join(markdown(doctor_table(report))), key,
                         said["measured"], said["layout"]])
