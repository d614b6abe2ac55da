"""Two runs compared, as the Decode tab shows it: where the texts part, the settings that differ, acceptance by depth
(both curves) with standard errors, and one round of both."""

from __future__ import annotations

from ..engine.records.run_compare import A_ONLY, B_ONLY, BOTH, RoundComparison, RunComparison
from ..engine.records.run_depths import depth_analysis
from ..engine.records.table import Column
from ..render.table import cell, markdown


def _num(x, sign: bool = False) -> str:
    return cell(x, Column("", "", "signed" if sign else "number"))


def comparison_markdown(cmp: RunComparison, rc: RoundComparison) -> str:
    """The comparison of runs A and B and of their round `rc.index`, in markdown (B − A everywhere)."""
    a, b = cmp.a, cmp.b
    lines = [f"**A**: {a.name} — {len(a.rounds)} rounds, {len(a.token_ids)} tokens  ",
             f"**B**: {b.name} — {len(b.rounds)} rounds, {len(b.token_ids)} tokens", ""]
    if cmp.settings:
        lines += ["Settings that differ: " + "; ".join(f"`{k}` {x} → {y}" for k, x, y in cmp.settings), ""]
    elif a.token_ids == b.token_ids and [r.to_dict() for r in a.rounds] == [r.to_dict() for r in b.rounds]:
        lines += ["*The two runs are the same run: no difference.*", ""]
    depths, means = depth_analysis(cmp.table)
    lines += [cmp.divergence.sentence, "", *markdown(depths), "", *markdown(means), ""]
    context = {True: "the same context", False: "different contexts (the texts parted before it)",
               None: "contexts not known to be the same"}
    lines += [(f"**Round {rc.index}** ({context[rc.same_context]}): {rc.count(BOTH)} nodes in both trees, "
              f"{rc.count(A_ONLY)} in A only, {rc.count(B_ONLY)} in B only."), "",
              "| | A | B | B − A |", "|---|---|---|---|",
              f"| C_p | {_num(rc.C_p.a)} | {_num(rc.C_p.b)} | {_num(rc.C_p.diff, True)} |",
              (f"| E[L] | {_num(rc.expected_length.a)} | {_num(rc.expected_length.b)} | "
              f"{_num(rc.expected_length.diff, True)} |"),
              f"| L | {rc.block_length.a} | {rc.block_length.b} | {_num(rc.block_length.diff, True)} |"]
    for name, other, missing in (("A", "B", rc.missing_a), ("B", "A", rc.missing_b)):
        if missing:
            shown = ", ".join(f"`{m.path_text!r}` +{m.gain:.3f}"
                              + (f" (in {other}'s tree)" if m.drafted_by_other else "")
                              for m in missing)
            lines += ["", f"Missing from {name}'s tree, by coverage gain: {shown}"]
    return "\n".join(lines)
