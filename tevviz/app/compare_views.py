"""Two runs compared, as the Decode tab shows it: where the texts part, the settings that differ, acceptance by depth
(both curves) with standard errors, and one round of both."""

from __future__ import annotations

from ..engine.analysis.run_compare import (
    A_ONLY,
    B_ONLY,
    BOTH,
    RoundComparison,
    RunComparison,
    missing_table,
    round_table,
)
from ..engine.analysis.run_depths import depth_analysis
from ..render.table import markdown


def round_start(run, index: int) -> int | None:
    """How many generated tokens came before round `index` of `run`; None where its committed tokens are not known."""
    if not run.rounds or any(not r.committed for r in run.rounds):
        return None
    at = len(run.token_ids) - sum(len(r.committed) for r in run.rounds)  # rounds dropped from the front
    for r in run.rounds:
        if r.index == index:
            return at if at >= 0 else None
        at += len(r.committed)
    return None


def _wrote(name: str, text: str, token, at_round) -> str:
    # The token's id beside its text: two tokens can read alike ('\n' and '\n' from two vocabularies' ids).
    where = f", round {at_round}" if at_round is not None else ""
    return f"{name} wrote {text!r} (token {token}{where})" if text else f"{name} wrote token {token}{where}"


def texts_sentence(cmp: RunComparison) -> str:
    """Where the two texts part, said once: the rounds' own lines say which rounds share a context."""
    d, a, b = cmp.divergence, cmp.a, cmp.b
    if not d.same_prompt or (a.rounds and not a.token_ids) or (b.rounds and not b.token_ids):
        return d.sentence
    if d.position is not None:
        where = (f"The texts agree on the first {d.common} generated tokens; at token {d.common + 1}" if d.common
                 else "The texts differ from the first generated token:")
        wrote = [_wrote(n, *x) for n, x in (("A", (d.text_a, d.token_a, d.round_a)),
                                               ("B", (d.text_b, d.token_b, d.round_b)))]
        return f"{where} {wrote[0]} and {wrote[1]}. Rounds that start after that compare different contexts."
    text = (f"Same prompt and the same {d.common} generated tokens" if len(a.token_ids) == len(b.token_ids) else
            f"Same prompt; the shorter run's {d.common} generated tokens are the start of the other's")
    return text + ": a round compares the same context where A's and B's start at the same token."


def _context(cmp: RunComparison, rc: RoundComparison) -> str:
    """Whether round `rc.index` of A and of B drafted from the same context, and why not."""
    if rc.same_context is None:
        return "contexts not known to be the same"
    start_a, start_b = round_start(cmp.a, rc.index), round_start(cmp.b, rc.index)
    if rc.same_context:
        return "the same context" + (f": both after generated token {start_a}" if start_a is not None else "")
    if start_a is None or start_b is None:
        return "different contexts"
    parted = cmp.divergence.position
    if parted is not None and max(start_a, start_b) > parted:
        return f"different contexts: the texts parted at token {parted + 1}, before this round"
    return (f"different contexts: A's round starts after generated token {start_a}, B's after token {start_b} "
            "(the same text, cut into rounds at other places)")


def comparison_markdown(cmp: RunComparison, rc: RoundComparison, names: tuple[str, str] | None = None) -> str:
    """The comparison of runs A and B and of their round `rc.index`, in markdown (B − A everywhere); `names` are
    what the runs are (their run names) where `cmp` names them A and B."""
    a, b = cmp.a, cmp.b
    name_a, name_b = names or (a.name, b.name)
    lines = [f"**A**: {name_a} — {len(a.rounds)} rounds, {len(a.token_ids)} tokens  ",
             f"**B**: {name_b} — {len(b.rounds)} rounds, {len(b.token_ids)} tokens", ""]
    if cmp.settings:
        lines += ["Settings that differ: " + "; ".join(f"`{k}` {x} → {y}" for k, x, y in cmp.settings), ""]
    elif a.token_ids == b.token_ids and [r.to_dict() for r in a.rounds] == [r.to_dict() for r in b.rounds]:
        lines += ["*The two runs are the same run: no difference.*", ""]
    depths, means = depth_analysis(cmp.table)
    lines += [texts_sentence(cmp), "", *markdown(depths), "", *markdown(means), ""]
    lines += [(f"**Round {rc.index}** ({_context(cmp, rc)}): {rc.count(BOTH)} nodes in both trees, "
              f"{rc.count(A_ONLY)} in A only, {rc.count(B_ONLY)} in B only."), "", *markdown(round_table(rc))[2:]]
    for side, missing in (("A", rc.missing_a), ("B", rc.missing_b)):
        if missing:
            lines += ["", *markdown(missing_table(rc, side))]
    return "\n".join(lines)
