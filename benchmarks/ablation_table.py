"""The ExitTrain ablation's table: per drafter, tau and the expected block length against the original and token-only
(paired over the same contexts and seeds), and the merge of runs that split the objectives between them."""

from __future__ import annotations

import json
import math
from pathlib import Path

from common import table


def expected(res: dict) -> float:
    """A result's mean expected block length (results written before the rename call it `ceiling`)."""
    return res.get("expected_length", res.get("ceiling"))


def per_prompt(res: dict) -> list[float]:
    return res.get("per_prompt_expected_length", res.get("per_prompt_ceiling")) or []


def table_rows(results: dict) -> list[dict]:
    """One row per drafter: tau, SE, relative gain and paired gains in SE against the original and token-only."""
    from tevviz.engine.analysis.stats import mean_se

    def paired(a: str, b: str, t: str, key: str = "per_prompt_tau") -> tuple[float, float]:
        """Mean and SE of the per-context difference a - b of `key` (same contexts and seeds)."""
        get = per_prompt if key == "per_prompt_expected_length" else (lambda r: r[key])
        return mean_se([x - y for x, y in zip(get(results[a][t]), get(results[b][t]))])

    def in_se(d: float, d_se: float) -> float:
        return d / d_se if d_se and not math.isnan(d_se) else float("nan")

    rows = []
    for name, res in results.items():
        row = {"drafter": name}
        for t in res:
            base = results["original"][t]["tau"]
            row[f"tau_{t}"] = res[t]["tau"]
            row[f"se_{t}"] = res[t]["tau_se"]
            row[f"rel_{t}"] = res[t]["tau"] / base - 1
            row[f"gain/SE_{t}"] = in_se(*paired(name, "original", t))  # paired, vs original
            if "token" in results and name != "token":
                row[f"vs_token/SE_{t}"] = in_se(*paired(name, "token", t))
            row[f"E[len]_{t}"] = expected(res[t])
            if per_prompt(res[t]) and per_prompt(results["original"][t]):
                row[f"rel_E[len]_{t}"] = expected(res[t]) / expected(results["original"][t]) - 1
                row[f"E[len] gain/SE_{t}"] = in_se(*paired(name, "original", t, "per_prompt_expected_length"))
                if "token" in results and name != "token" and per_prompt(results["token"][t]):
                    row[f"E[len] vs_token/SE_{t}"] = in_se(*paired(name, "token", t, "per_prompt_expected_length"))
        rows.append(row)
    return rows


def merge(paths: list[str], out: str | None) -> None:
    """One table from runs that trained different objectives with the same settings (their originals must agree)."""
    runs = [json.loads(Path(p).read_text()) for p in paths]
    results: dict = {}
    for path, run in zip(paths, runs):
        own = ("objectives", "out", "save", "also", "stream_cache")  # a cache path: its settings are checked on load
        if {k: v for k, v in run["args"].items() if k not in own} != {k: v for k, v in runs[0]["args"].items()
                                                                        if k not in own}:
            raise SystemExit(f"{path} ran with other settings than {paths[0]}")
        if run["results"]["original"] != runs[0]["results"]["original"]:
            raise SystemExit(f"{path}: the original drafter's held-out results differ from {paths[0]}'s")
        results.update(run["results"])
    order = ["original", "distilled", "token", "prefix", "exit", "residual"]
    results = {k: results[k] for k in sorted(results, key=lambda k: order.index(k) if k in order else len(order))}
    rows = table_rows(results)
    print(table(rows, list(dict.fromkeys(k for r in rows for k in r))))
    if out:
        Path(out).write_text(json.dumps({"merged": paths, "rows": rows, "results": results}, indent=1) + "\n")
        print(f"wrote {out}")
