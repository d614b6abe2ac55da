"""ExitTrain's before/after analysis as one typed table: per registered number (mean C_p, mean E[L] = 1 + C_p, tau),
each drafter's mean ± SE over the same contexts, the change paired by context and the change relative to before.
Torch-free: it reads evaluation.DrafterMetrics' per-context values."""

from __future__ import annotations

from ..records.round_numbers import NUMBERS
from .stats import Estimate, PairedDiff
from .table import Column, Table

DIGITS = 4


def before_after_table(before, after, rounds: int) -> Table:
    """`before` and `after` (DrafterMetrics on the same contexts); `rounds` decoding rounds from each context gave tau.
    The change is None where the two did not run on the same contexts."""
    per = {"C_p": lambda m: m.per_context_C_p, "expected_length": lambda m: [1 + x for x in m.per_context_C_p],
           "L": lambda m: m.per_context_tau}
    paired = len(before.per_context_C_p) == len(after.per_context_C_p) > 0
    cols = (Column("number", "", "text"), Column("before", before.name or "before", "estimate", DIGITS),
            Column("after", after.name or "after", "estimate", DIGITS),
            Column("change", "change (paired)", "difference", DIGITS), Column("relative", "relative", "percent", 1),
            Column("contexts", "contexts", "count"))
    rows = []
    for name, values in per.items():
        xs, ys = values(before), values(after)
        d = PairedDiff.of(list(zip(xs, ys))) if paired else None
        rows.append({"number": NUMBERS[name].heading, "before": Estimate.of(xs), "after": Estimate.of(ys),
                     "change": d, "relative": d.mean / abs(d.a) if d and d.mean is not None and d.a else None,
                     "contexts": d.n if d else None})
    uses = (f"mean C_p of the tree each drafter builds (target at T = 1); tau, the mean block length over {rounds} "
            f"decoding rounds from each context ({before.rounds} and {after.rounds} rounds in all)")
    se = ("± one standard error over contexts; the change is paired by context (both drafters on the same contexts "
          "and seeds)")
    notes = (uses, se)
    return Table(f"before and after on the same {before.contexts} contexts", cols, tuple(rows), notes,
                 id="before-after")
