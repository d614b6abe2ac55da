"""The doctor's report (engine/scan/doctor.py) as terminal text (`tevviz doctor`) and as markdown (the app's Doctor
tab): a table of readings by depth-1 and depth-2 acceptance and accepted drafted tokens per round, with standard
errors, the best reading and the verdict."""

from __future__ import annotations

from tevviz.render.scan_tables import markdown_table, text_table

from ..engine.records.doctor_report import DepthRate, DoctorReport, ReadingResult

OWN_MARK = "*"  # after the name of the checkpoint's own reading


def rate_cell(d: DepthRate) -> str:
    """`rate ± se (trials)`, or `-` when no round tried that depth."""
    return "-" if d.rate is None else f"{d.rate:.3f} ± {d.se:.3f} ({d.trials})"


def yield_cell(r: ReadingResult) -> str:
    """`rate ± se`, or `-` when no round drafted."""
    y = r.per_round
    return "-" if y.rate is None else f"{y.rate:.3f} ± {y.se:.3f}"


def reading_rows(report: DoctorReport) -> tuple[list[str], list[list[str]]]:
    """Header and one row per reading: name (own marked), hidden_states indices, options, acceptance by depth, accepted
    drafted tokens per round (what the verdict compares)."""
    depths = len(report.readings[0].depths) if report.readings else 0
    head = ["reading", "hidden_states", "options", *(f"depth {d} (rounds)" for d in range(1, depths + 1)),
            "tokens / round", "rounds"]
    rows = []
    for r in report.readings:
        opts = ", ".join(f"{k}={v}" for k, v in r.options) or "-"
        rows.append([r.name + (OWN_MARK if r.own else ""), ", ".join(map(str, r.layer_ids)), opts,
                     *(rate_cell(d) for d in r.depths), yield_cell(r), str(r.rounds)])
    return head, rows


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
    return "\n".join([said["layout"], said["measured"], "", text_table(*reading_rows(report)), "", said["key"],
                      said["best"], said["verdict"]])


def doctor_markdown(report: DoctorReport) -> str:
    """The report as markdown: the verdict first, then the table and what was measured."""
    said = _lines(report)
    if not report.readings:
        return f"**{said['verdict']}**\n\n{said['layout']}"
    key = "\\" + said["key"]  # the own mark, not a list bullet
    return "\n\n".join([f"**{said['verdict']}**", said["best"], markdown_table(*reading_rows(report)), key,
                         said["measured"], said["layout"]])
