"""The details panel beside the tree: the selected node's verdict, why the target went elsewhere, its numbers; while
Step token walks a round, what the verifier decided at the current step."""

from __future__ import annotations

import math

from ..engine.records.records import RoundRecord
from ..render.graph import round_graph
from ..render.verdicts import REJECTED, target_choice, verdict, verdict_line
from .state import AppState

HINT = "Click a node (or press Step token, or the ↓ / j key) to see what happened there."


def node_details(st: AppState) -> str:
    """Markdown for the details panel: the walk's current decision, or the selected node, or a hint."""
    r, v = st.round, st.highlight
    if r is None:
        return HINT
    G = round_graph(r.to_dict())
    if st.token is not None:
        return walk_text(r, G, st.token, _temperature(st))
    if v == "bonus":
        return _bonus_text(r, G)
    if isinstance(v, str) and v.startswith("ghost:"):
        return _ghost_text(r, v)
    why = stop_sentence(st)  # a stopped chain: why the round ended where it did, beside its last node too
    if v is None:
        return HINT + (f"\n\n{why}" if why else "")
    text = _node_text(r, G, v)
    return text + (f"\n\n{why}" if why and v == len(r.tokens) - 1 else "")


def stop_sentence(st: AppState) -> str:
    """Why the shown round's chain ended where it did, for a chain with a stop (BuilderConfig.stop_below): at its
    longest, or after a token drawn where the drafter's top probability was below the stop; "" for other rounds."""
    r, b = st.round, st.builder()
    stop, H = b.get("stop_below") or 0, b.get("depth")
    if r is None or b.get("name") != "sampled" or not isinstance(stop, (int, float)) or stop <= 0:
        return ""
    longest, d = st.depth_limit(st.view), max(r.depths)
    if longest is None:  # a file without the depth it ran at
        return ""
    if longest <= 0:
        return f"Stopped chain (stop below {stop:g}), round {r.index}: the token limit left no room to draft."
    if d >= longest:
        why = f"it reached its longest, H = {H}" if longest == H else f"it reached the {longest} the token limit left"
    else:
        why = f"its token {d} was drawn where the drafter's top probability was below the stop"
    return f"Stopped chain (stop below {stop:g}), round {r.index}: {d} of at most {longest} tokens drafted; {why}."


def walk_text(r: RoundRecord, G, token: int, temperature: float | None) -> str:
    """What the verifier decided at step `token` of the round's block (0: the first token after the root)."""
    block = r.accepted[1:] + ["bonus"]
    t = min(token, len(block) - 1)
    head = f"**Walk, round {r.index}: step {t + 1} of {len(block)}**"
    if block[t] == "bonus":
        return head + "\n\n" + _exit_step(r, G, temperature)
    v = block[t]
    u = r.parents[v]
    choice = target_choice(G, u)
    lines = [head, "", f"At node {u} `{r.texts[u]!r}` the target's next token is `{r.texts[v]!r}`"
             + (f" (p = {fmt(r.p_edge[v])})" if r.p_edge[v] is not None else "")
             + f": it matches child {v}, the drafter's choice {choice.draft_rank} of {choice.siblings} there "
               f"(draft edge prob {fmt(choice.draft_q)}). **Accepted**; the walk goes on below {v}."]
    if temperature is not None and temperature > 0 and r.rho[u] is not None:
        lines += ["", (f"At T = {temperature:g} the walk leaves the tree at {u} with probability rho({u}) = "
                      f"{fmt(r.rho[u])}; it stayed, and took this child with probability {fmt(r.p_edge[v])}.")]
    if r.accept is not None and r.accept[v] is not None:
        lines += ["", f"Speculative sampling accepted it with probability min(1, p/q) = {fmt(r.accept[v])}."]
    return "\n".join(lines)


def _exit_step(r: RoundRecord, G, temperature: float | None) -> str:
    e = r.exit_node
    kids = sum(1 for p in r.parents if p == e)
    choice = target_choice(G, e)
    p = "" if choice is None or choice.p is None else f" (p = {fmt(choice.p)})"
    if kids:
        why = (f"the target's next token `{r.bonus_text!r}`{p} is none of its {kids} children, so the walk **exits "
               f"at node {e}**")
    else:
        why = f"node {e} is a leaf, so the walk **exits there**; the target's next token is `{r.bonus_text!r}`{p}"
    lines = [(f"At node {e} `{r.texts[e]!r}` {why}. The block is the accepted path and this **bonus token**: "
             f"L = {r.block_length}.")]
    if temperature is not None and temperature > 0:
        lines += ["", f"At T = {temperature:g}: the walk leaves at {e} with probability rho({e}) = {fmt(r.rho[e])} "
                      f"(the exit law w({e}) = P·rho = {fmt(r.w[e])}); the bonus is drawn from the residual law "
                      "there: the target's law less the children's tokens, renormalised by rho"
                      + (" (at a leaf, the target's law itself)." if not kids else ".")]
    return "\n".join(lines)


def _node_text(r: RoundRecord, G, v: int) -> str:
    lines = [f"**node {v}** `{r.texts[v]!r}` (token id {r.tokens[v]}), depth {r.depths[v]}: **{verdict_line(G, v)}**"]
    why = why_not(r, G, v)
    if why:
        lines += ["", why]
    q_edge = None if v == 0 else math.exp(r.draft_logprobs[v])
    q_path = math.exp(r.scores[v]) if r.scores[v] is not None and not math.isnan(r.scores[v]) else None
    # Short headers: the details column is about 240 px at 1440 px, where "edge probability" cut the table.
    # (a no-break space keeps a name with its value).
    lines += ["", "| | draft | target |", "|---|---|---|",
              f"| edge | q\u00a0{fmt(q_edge)} | p\u00a0{fmt(r.p_edge[v])} |",
              f"| path | q(v)\u00a0{fmt(q_path)} | P(v)\u00a0{fmt(r.P[v])} |",
              "", f"local exit rho {fmt(r.rho[v])}, exit probability w {fmt(r.w[v])}"]
    missing = sorted(r.missing[v] if r.missing else [], key=lambda m: -m["gain"])
    if missing:
        lines += ["", "Top missing tokens (coverage gain P(v)·p_v(a) if added as a child):", "",
                  "| token | id | gain |", "|---|---|---|"]
        lines += [f"| `{m['text']!r}` | {m['token_id']} | {m['gain']:.4g} |" for m in missing]
    return "\n".join(lines)


def why_not(r: RoundRecord, G, v: int) -> str:
    """Why a node rejected here was not taken: the token the target wanted at its parent, and where the drafter had
    put that token; "" for any other node."""
    if verdict(G, v) != REJECTED:
        return ""
    u = r.parents[v]
    choice = target_choice(G, u)
    where = (f"the drafter put it at rank {choice.draft_rank} of {choice.siblings} there (draft edge prob "
             f"{fmt(choice.draft_q)})" if choice.node is not None
             else f"the drafter did not propose it among its {choice.siblings} children there")
    p = "" if choice.p is None else f" (p = {fmt(choice.p)})"
    mine = "" if r.p_edge[v] is None else f"; it gave this token p = {fmt(r.p_edge[v])}"
    return f"Why not: at node {u} the target wanted `{choice.text!r}`{p}{mine}; {where}."


def _bonus_text(r: RoundRecord, G) -> str:
    choice = target_choice(G, r.exit_node)
    p = "" if choice is None or choice.p is None else f", p = {fmt(choice.p)} at the exit node"
    return (f"**bonus token** `{r.bonus_text!r}` (id {r.bonus_token}{p}): drawn at exit node {r.exit_node} from its "
            "residual law p_res (the target's law less its children's tokens; p itself at a leaf).")


def _ghost_text(r: RoundRecord, key: str) -> str:
    gap = r.coverage_gap()
    ghost = None if gap is None else next((g for g in gap.ghosts if f"ghost:{g.node}" == key), None)
    if ghost is None:
        return HINT
    return (f"**ghost** `{ghost.text!r}` at depth {ghost.depth}: **in the optimal tree, not drafted**. Target flow "
            f"P = {fmt(ghost.P)}: the coverage this branch would add. Path `{ghost.path_text!r}`.")


def _temperature(st: AppState) -> float | None:
    if st.cfg is not None:
        return st.cfg.sampling.temperature
    sampling = st.meta.get("sampling") if isinstance(st.meta, dict) else None
    t = sampling.get("temperature") if isinstance(sampling, dict) else None
    return float(t) if isinstance(t, (int, float)) else None


def fmt(x, digits: int = 3) -> str:
    """One format for every number a panel shows: fixed decimals, or significant digits below 10^-digits."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    return f"{x:.{digits}f}" if x == 0 or abs(x) >= 10 ** -digits else f"{x:.{digits - 1}e}"
