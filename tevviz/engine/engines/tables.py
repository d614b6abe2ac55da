"""The engines view's analyses as typed tables (analysis/table.py): one engine run's acceptance by depth (`tevviz
engine import`), and llama.cpp's beside tevviz's (`tevviz engine run`), each share ± its SE over steps."""

from __future__ import annotations

from ..analysis.stats import Estimate
from ..analysis.table import Column, Table
from .acceptance import EngineAcceptance

DEPTH_NOTE = ("marginal m_k: the share of steps that accepted at least k drafted tokens; conditional c_k = m_k / "
              "m_(k-1); ± one standard error over steps")


def acceptance_table(run: EngineAcceptance) -> Table:
    """Per depth k: the steps reaching it, m_k and c_k."""
    cols = (Column("depth", "depth", "count"), Column("reached", "steps reaching", "count"),
            Column("marginal", "marginal m_k", "estimate"), Column("conditional", "conditional c_k", "estimate"))
    m, ms, c, cs = run.marginal, run.marginal_se, run.conditional, run.conditional_se
    rows = tuple({"depth": k + 1, "reached": run.reached[k], "marginal": Estimate(m[k], ms[k], run.steps or 0),
                  "conditional": Estimate(c[k], cs[k], run.steps or 0)} for k in range(run.depth))
    return Table("acceptance by depth", cols, rows, (DEPTH_NOTE,), id="engine-depths")


def _at(d: dict, key: str, k: int) -> Estimate | None:
    return Estimate(d[key][k], d[key + "_se"][k], d.get("steps") or 0) if k < len(d[key]) else None


def engines_depth_table(a: dict, b: dict) -> Table:
    """llama.cpp's (`a`) and tevviz's (`b`) m_k and c_k side by side, from `tevviz engine run`'s result dicts."""
    cols = (Column("depth", "depth", "count"), Column("m_a", "llama.cpp m_k", "estimate"),
            Column("m_b", "tevviz m_k", "estimate"), Column("c_a", "llama.cpp c_k", "estimate"),
            Column("c_b", "tevviz c_k", "estimate"))
    rows = tuple({"depth": k + 1, "m_a": _at(a, "marginal", k), "m_b": _at(b, "marginal", k),
                  "c_a": _at(a, "conditional", k), "c_b": _at(b, "conditional", k)}
                 for k in range(max(len(a["marginal"]), len(b["marginal"]))))
    return Table("acceptance by depth", cols, rows, (DEPTH_NOTE,), id="engines-depths")
