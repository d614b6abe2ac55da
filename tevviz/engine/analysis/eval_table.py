"""`tevviz eval`'s analysis as two typed tables: each scan number (round_numbers.SCAN: tau, mean E[L], ...) per
temperature as mean ± SE over prompts, and acceptance by depth per temperature (both counted curves with their
binomial SEs, and the exact one). Torch-free: it reads evaluation.EvalResult's fields."""

from __future__ import annotations

from collections.abc import Sequence

from ..records.round_numbers import SCAN
from .stats import Estimate, share
from .table import Column, Table

MEANS_NOTE = "± one standard error over prompts (each prompt's mean over its rounds); — where one prompt has none"
DEPTH_NOTE = ("conditional: of the rounds reaching d - 1, the share accepting at d; marginal: the share of all rounds "
              "reaching d (± binomial SE over rounds); exact: the target's probability of reaching d in the tree")


def eval_means(results: Sequence, counts: Sequence[int], title: str) -> Table:
    """Per temperature, every scan number some prompt has, as mean ± SE over the prompts done, and how many."""
    shown = [n for n in SCAN if any(_values(r, n.name) for r in results) or n.name in ("L", "expected_length")]
    cols = (Column("T", "T", "text"), *(Column.of_number(n.name) for n in shown), Column("prompts", "prompts", "count"))
    rows = tuple({"T": f"{r.temperature:g}", **{n.name: Estimate.of(_values(r, n.name)) for n in shown},
                  "prompts": k} for r, k in zip(results, counts))
    return Table(title, cols, rows, (MEANS_NOTE,), id="eval")


def eval_depths(results: Sequence) -> Table:
    """Acceptance by depth per temperature: conditional and marginal ± their SEs, and the exact reach."""
    cols = (Column("T", "T", "text"), Column("depth", "depth", "count"),
            Column("conditional", "conditional", "estimate", 2), Column("marginal", "marginal", "estimate", 2),
            Column("exact", "exact", "number", 2))
    rows = []
    for r in results:
        curves = r.curves or [None] * len(r.acceptance_marginal)
        exact = r.acceptance_expected or [None] * len(r.acceptance_marginal)
        for d, (c, m, e, a) in enumerate(zip(r.acceptance_conditional, r.acceptance_marginal, exact, curves), 1):
            cond = share(a.reached, a.prior) if a else Estimate(c, None, 0)
            marg = share(a.reached, a.rounds) if a else Estimate(m, None, 0)
            rows.append({"T": f"{r.temperature:g}", "depth": d, "conditional": cond, "marginal": marg, "exact": e})
    return Table("acceptance by depth", cols, tuple(rows), (DEPTH_NOTE,), id="eval-depths")


def _values(result, name: str) -> list[float]:
    """The prompts' values of registered number `name` (tau and mean E[L] kept on the result by name too)."""
    own = {"L": "per_prompt_tau", "expected_length": "per_prompt_expected_length"}
    values = result.per_prompt.get(name) if name in result.per_prompt else getattr(result, own.get(name, ""), [])
    return [x for x in values or [] if x is not None]
