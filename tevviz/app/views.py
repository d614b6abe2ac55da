"""What the app shows, as plain values: markdown tables and plotly figures from AppState and reports.

No gradio here; the figures come from tevviz.render.
"""

from __future__ import annotations

import hashlib
import html
import re
from dataclasses import asdict

import plotly.graph_objects as go

from ..engine.analysis.speed import drafting_note, ideal_speed, ms_per_token, speed_breakdown
from ..engine.analysis.summary import SessionSummary, summarize
from ..engine.records.records import expected_length_text, optimal_label
from ..engine.records.round_numbers import NUMBERS, SESSION
from ..engine.train.exit_mass import ExitMassMove
from ..engine.verify.comparison import Comparison
from ..render import (
    BONUS,
    acceptance_by_depth_figure,
    block_length_histogram,
    coverage_figure,
    exit_mass_by_depth_figure,
    highlighted_blocks,
    loss_figure,
    path_label,
    stage_times_figure,
    tree_figure,
)
from ..render.panel import tile
from ..render.search import light_nodes
from ..render.tree_figure import tree_figure_dict
from .controller import Decoded
from .details import fmt
from .state import AppState


def empty_figure(message: str) -> go.Figure:
    fig = go.Figure()
    fig.add_annotation(text=message, showarrow=False, font={"size": 14, "color": "grey"}, x=0.5, y=0.5,
                       xref="paper", yref="paper")
    fig.update_layout(height=220, xaxis={"visible": False}, yaxis={"visible": False}, plot_bgcolor="white",
                      margin={"l": 10, "r": 10, "t": 10, "b": 10})
    return fig


# Session statistics: the sizes of each figure on its own (the app tiles them, SESSION_ROWS).
COMPACT = {"height": 300, "margin": {"l": 40, "r": 10, "t": 40, "b": 40}}
WIDE = {"height": 340, "margin": {"l": 50, "r": 50, "t": 40, "b": 40}}


SESSION_ROWS = (("stage", "hist", "depth_plot"), ("mass_plot", "coverage_plot"))


def session_panel(st: AppState) -> dict:
    """The session figures tiled as one figure dict (SESSION_ROWS), the way the app shows them."""
    return tile(session_figures(st, as_dict=True), SESSION_ROWS)


def session_figures(st: AppState, as_dict: bool = False) -> dict[str, go.Figure | dict]:
    """The session statistics figures by widget name: stage times, block lengths, acceptance by depth, where the
    exit mass went by depth, and C_p against C_p* per round (plain figure dicts with `as_dict`)."""
    r, kw = st.rounds, {"as_dict": as_dict}
    return {"stage": stage_times_figure(r, COMPACT, **kw), "hist": block_length_histogram(r, COMPACT, **kw),
            "depth_plot": acceptance_by_depth_figure(r, COMPACT, engines=st.engines, **kw),
            "mass_plot": exit_mass_by_depth_figure(r, WIDE, **kw), "coverage_plot": coverage_figure(r, WIDE, **kw)}


def block_rows_plot(st: AppState) -> dict:
    """The shown round's drafter side (a block round's per-depth rows), as a plain figure dict; the selected node's
    (or the clicked cell's) token at its depth boxed."""
    from ..render.block_rows import block_rows_figure

    r = st.round
    if r is None or not r.draft_rows:
        return empty_figure("a block drafter's rounds show here: per depth, its top tokens with q_d, and where the "
                            "committed token sat among them").to_plotly_json()
    v = st.highlight
    selected = st.cell or ((r.depths[v], r.tokens[v]) if isinstance(v, int) and v > 0 else None)
    return block_rows_figure(r, selected=selected).to_plotly_json()


def cell_nodes(r, cell: tuple[int, int] | None) -> list[int]:
    """The tree's nodes of a drafter's-rows cell: token `cell[1]` at depth `cell[0]`."""
    if r is None or cell is None:
        return []
    return [v for v in range(1, r.size) if r.depths[v] == cell[0] and r.tokens[v] == cell[1]]


def tree_plot(st: AppState, metric: str, as_dict: bool = False, matches=None) -> go.Figure | dict:
    """The shown round's tree (a plain figure dict with `as_dict`), ghosts drawn when asked and known; outside a
    search's `matches` (None: no search) the nodes dimmed."""
    r = st.round
    if r is None:
        fig = empty_figure("press Step to draft, verify and commit one round")
        return fig.to_plotly_json() if as_dict else fig
    # Speculative sampling's expected L is not 1 + C_p: it accepts with min(1, p / q).
    title = (f"round {r.index}: {r.size} nodes, exit node {r.exit_node}, "
             f"L = {r.block_length}, {expected_length_text(r)} ({r.verifier})")
    gap = r.coverage_gap() if st.ghosts else None
    if gap is not None:  # a sampled chain's C_p* is the best fixed tree of its budget, not its ceiling
        # On a line of its own: beside the rest it ran past the figure's width.
        title += f"<br>{optimal_label(gap.bounds, r.optimal.budget)} = {1 + gap.C_p_star:.3f}, {len(gap.ghosts)} ghosts"
    highlight = st.highlight
    ghosts = [asdict(g) for g in gap.ghosts] if gap is not None else ()
    if isinstance(highlight, str) and highlight.startswith("ghost:") and not any(
            f"ghost:{g['node']}" == highlight for g in ghosts):
        highlight = None  # a ghost selected while ghost branches were on
    args = (r.to_dict(), metric, BONUS if highlight == "bonus" else highlight, title, ghosts)
    options = {"width": st.width, "expanded": st.expanded, "walk": st.token, "scale": st.scale,
               "marked": cell_nodes(r, st.cell), "matches": matches,
               "hidden": None if st.fold_below is None else light_nodes(r.P, st.fold_below)}
    if not as_dict:
        return tree_figure(*args, **options)
    fig = tree_figure_dict(*args, **options)
    fig["layout"]["meta"]["view"] = view_key(st, metric, matches)
    return fig


def view_key(st: AppState, metric: str, matches) -> str:
    """What the tree shows but its width: a width report's redraw of another view than the one the browser shows
    now (one a Step returned meanwhile) is dropped there (figure_view.py)."""
    shown = (st.run_id, st.view, len(st.rounds), metric, st.highlight, st.ghosts, sorted(st.expanded), st.token,
             st.scale, st.cell, st.fold_below, None if matches is None else sorted(matches))
    return hashlib.blake2b(repr(shown).encode(), digest_size=8).hexdigest()


def text_spans(st: AppState) -> list[tuple[str, str | None]]:
    """Prompt, then each round's block up to the shown round; while stepping, up to the current token."""
    spans: list[tuple[str, str | None]] = [(st.prompt, None)] if st.prompt else []
    if st.dropped_text:  # rounds the history cap dropped: their text, unmarked
        spans.append((st.dropped_text, None))
    spans += highlighted_blocks(st.rounds[: st.view])
    r = st.round
    if r is None:
        return spans
    if st.token is None:
        return spans + highlighted_blocks([r])
    block = [(r.texts[v], f"round {r.index}") for v in r.accepted[1:]] + [(r.bonus_text, "bonus")]
    for i, (text, label) in enumerate(block[: st.token + 1]):
        spans.append((text, "current token" if i == st.token else label))
    return spans


def node_choices(st: AppState) -> list[tuple[str, int]]:
    """The node picker's entries, marked: ✓ accepted, ⏏ the exit node, ✗ rejected at an accepted parent."""
    r = st.round
    if r is None:
        return []
    on_path = set(r.accepted)
    mark = {v: "✓ " for v in on_path} | {r.exit_node: "⏏ "}
    mark |= {v: "✗ " for v in range(1, r.size) if v not in on_path and r.parents[v] in on_path}
    return [(f"{mark.get(v, '')}{v}: {r.texts[v]!r} (depth {r.depths[v]})", v) for v in range(r.size)]


def _optimal_table(r, gap, s: SessionSummary) -> list[str]:
    """The shown round against its optimal tree, and the session's means. A sampled chain's round is not held to
    1 + C_p* (speculative sampling accepts with min(1, p / q)): its C_p* is the best fixed tree's, with no gap."""
    ceiling, lost, held = NUMBERS["optimal_ceiling"], NUMBERS["gap"], NUMBERS["held"]
    star = "optimal tree" if gap is None or gap.bounds else f"best fixed tree of B = {r.optimal.budget}, not a ceiling"
    shown = ("| — | — | — | — |" if gap is None else
             f"| {1 + gap.C_p:.3f} | {fmt(ceiling.value(r))} | {fmt(lost.value(r))} | {held.value(r):.1%} |")
    return [(f"| round {r.index if r else '—'}: 1 + C_p | {ceiling.label} ({star}) | {lost.label} | {held.label} "
             f"| session: {ceiling.heading} | {lost.heading} ({s.bounded_rounds} rounds) |"),
            "|---|---|---|---|---|---|",
            shown[:-1] + f"| {fmt(s.numbers[ceiling.name], 4)} | {fmt(s.numbers[lost.name])} |"]


def baseline_fits(st: AppState, base: dict) -> bool:
    """Whether the baseline `base` was timed on the run's own prompt and settings: a live run's, or the settings a
    reopened or imported run recorded (it has no live ones until a Step)."""
    if base["prompt"] != st.prompt:
        return False
    if st.cfg is not None:
        return base["cfg"] == st.cfg
    from .runs import differing

    meta = st.meta or {}
    return bool(meta) and not differing(meta, base["cfg"]) and meta.get("max_new_tokens") == base["cfg"].max_new_tokens


def stats_markdown(st: AppState) -> str:
    if not st.rounds:
        return "No rounds yet."
    s = summarize(st.rounds)
    rounds, tokens = s.rounds + st.dropped, len(st.generated) if st.dropped else s.tokens
    tps = tokens / st.seconds if st.seconds > 0 else None
    base = st.baseline
    comparable = base is not None and baseline_fits(st, base)
    # No ratio where speculation committed nothing (the speed lines say why).
    claim = comparable and tps and base["tokens_per_s"] and not drafting_note(st.rounds)
    speedup = tps / base["tokens_per_s"] if claim else None
    kept = f" (last {s.rounds} rounds)" if st.dropped else ""
    means = [n for n in SESSION if not n.needs_optimal]  # tau, mean E[L]: with the optimal tree, the table below
    heads = "".join(f"{n.heading}{kept} | " for n in means)
    cells = "".join(f"{fmt(s.numbers[n.name], n.digits)} | " for n in means)
    lines = [
        f"| rounds | tokens | tokens/s | {heads}baseline tokens/s | speed-up |",
        "|---|---|---|" + "---|" * len(means) + "---|---|",
        (f"| {rounds} | {tokens} | {fmt(tps)} | {cells}"
         f"{fmt(base['tokens_per_s']) if comparable else '—'} | {'—' if speedup is None else f'{speedup:.2f}x'} |"),
    ]
    if comparable and base.get("way"):
        on = base.get("decode_threads")
        rounds_on = "" if on is None else f" The rounds decode on {on} thread{'s' if on != 1 else ''}."
        lines.append(f"\n*Plain decoding: {base['way']}, the fastest of {base['ways']} ways timed on this "
                     f"prompt.{rounds_on}*")
    lines += speed_lines(st, base if comparable else None)
    r = st.round
    gap = r.coverage_gap() if r is not None else None
    if gap is not None or s.optimal_rounds:
        lines += ["", *_optimal_table(r, gap, s)]
    if r is not None and r.sizing is not None:
        from ..engine.records.round_time import describe

        z = r.sizing
        how = ("warm-up size" if z.warmup and z.drafted else "warm-up: no draft, to time a plain step"
               if z.warmup else "chosen for expected tokens/s" if z.drafted
               else "no draft: a plain target step was priced above any tree or chain")
        arm = ""
        if z.chain is not None:  # the mixed builder: which of its arms drafted, and their measured rates
            arm = (f" Mixed: a {'sampled chain (speculative)' if z.chain else 'best-first tree'} this round; "
                   f"measured expected tokens per ms: trees {z.tree_rate:.3f}, chains {z.chain_rate:.3f}.")
        lines.append(f"\n*Auto budget, round {r.index}: B = {z.B:.0f}, H = {z.H:.0f} ({how}).{arm} Cost model: "
                     f"{describe(z.fit)}.*")
    reading = st.meta.get("drafter_reading") if isinstance(st.meta, dict) else None
    if reading:
        lines.append(f"\n*The drafter reads the target's hidden_states {reading['layer_ids']}: {reading['why']}.*")
    if st.done:
        lines.append("\n*Finished (end of sequence or token limit).*")
    if st.origin not in ("live", "empty", "run"):
        lines.append(f"\n*Imported {st.origin}: browse it, or Re-score a round with the loaded target.*")
    if base is not None and not comparable:
        lines.append("\n*The baseline was timed on another prompt or settings; press Run baseline again.*")
    if st.notice:
        lines.append("\n*" + st.notice.replace("*", "\\*") + "*")  # a notice may say C_p*
    return "\n".join(lines)


def speed_lines(st: AppState, base: dict | None) -> list[str]:
    """Where a generated token's time goes, against plain decoding's, and why the run is faster or slower."""
    speed = speed_breakdown(st.rounds, ms_per_token(base["seconds"], base["tokens"]) if base else None,
                            None if st.dropped or st.origin != "live" else st.seconds)
    if not speed.tokens:
        return []
    per = speed.stage_ms_per_token
    cells = [f"{fmt(per.get(k), 2)}" for k in ("draft", "target", "verify", "other")]
    rest = speed.unrecorded_ms_per_token
    plain = speed.baseline_ms_per_token
    return ["", "| ms per token | draft | target | verify | other | between rounds | all | plain decoding |",
            "|---|---|---|---|---|---|---|---|",
            (f"| this run | {' | '.join(cells)} | {fmt(rest, 2)} | {fmt(speed.ms_per_token, 2)} | "
            f"{'—' if plain is None else fmt(plain, 2)} |"),
            "", speed.sentence + ("" if plain is not None else " Press *Run baseline* to time plain decoding."),
            *ideal_lines(st, base)]


BEYOND_LIMIT = 1.02  # share of the ideal past which the timed pass costs are no limit (timing noise below)


def ideal_lines(st: AppState, base: dict | None) -> list[str]:
    """The run against its limit: the tokens/s its rounds would reach if a round cost only its forwards, at the pass
    costs timed with the baseline, and the share of it achieved."""
    costs = (base or {}).get("costs")
    if costs is None or st.dropped or st.origin != "live" or st.seconds <= 0:
        return []
    speed = ideal_speed(st.rounds, costs, st.seconds)
    if speed.share is None:
        return []
    if speed.share > BEYOND_LIMIT:
        # A limit the run beats is no limit: the passes ran faster during the run than when they were timed.
        return ["", (f"This run reached {fmt(speed.tokens_per_s, 1)} tokens/s, above the "
                     f"{fmt(speed.ideal_tokens_per_s, 1)} tokens/s its forwards alone would allow at the pass costs "
                     "timed with the baseline: the machine was busier while they were timed, so they give no limit "
                     "for this run. Press Run baseline again to time them beside it.")]
    return ["", (f"At the pass costs timed with the baseline, these rounds would reach "
                 f"{fmt(speed.ideal_tokens_per_s, 1)} tokens/s if a round cost only its forwards: this run reached "
                 f"{speed.share:.0%} of it.")]


def comparison_markdown(c: Comparison) -> str:
    lines = [
        f"Round {c.round_index}, {c.draws} draws per verifier; exact E[L] = 1 + C_p = {c.expected_length:.4f}.",
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
    ms = "  ".join(f"{k} {v:.0f}" for k, v in s.stage_ms.items())
    means = "".join(f"{n.heading} {fmt(s.numbers[n.name], n.digits)}, " for n in SESSION if not n.needs_optimal)
    return (f"**{d.name}**: {s.rounds} rounds, {d.tokens} tokens, {means}{tps:.1f} tokens/s\n\nstage ms: {ms}\n\n"
            + fenced(d.text))


def fenced(text: str) -> str:
    """`text` as a markdown code block, its fence longer than any run of backticks in it (generated code has them)."""
    fence = "`" * max(3, 1 + max((len(run) for run in re.findall(r"`+", text)), default=0))
    return f"{fence}\n{text}\n{fence}"


# ExitTrain panel: report -> widget values.

MOVED_ROWS = 10  # nodes in the change-of-w table
NO_TRAINING = "No training yet: step a few rounds in the Decode tab, then press Train step."


def loss_plot(log: list[dict]) -> go.Figure:
    return loss_figure(log) if log else empty_figure("press Train step to train this session's copy of the draft")


def moved_markdown(moved: ExitMassMove) -> str:
    b, a = moved.before, moved.after
    where = {(True, True): "both", (True, False): "original only", (False, True): "trained only"}
    lines = [
        (f"Round {moved.round_index}'s context. Original tree: {b.size} nodes, C_p = {fmt(b.C_p, 4)}; "
         f"trained tree: {a.size} nodes, C_p = {fmt(a.C_p, 4)}. Nodes match by token path; a node in one tree "
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
