"""How long does drawing a round of two runs in one shared layout take (compare_figure.py), at the budgets people use?

Decodes one prompt twice on the pair (verifiers tev and predraw at T = 1, so the texts part and the trees differ), then
times, per round both runs hold, the comparison of the round (nodes matched by token path), the shared layout, the two
side-by-side figure dicts, the union figure dict and the two plotly Figures the app shows. The goal is under 1 s for
the whole pair at B = 64 on the stdlib pair.
"""

from __future__ import annotations

import statistics
import time

from common import parser, setup, table, write

from tevviz.engine.analysis.run_compare import Run, compare_runs
from tevviz.engine.core.sampling import SamplingConfig
from tevviz.engine.decode.session import DecodeConfig, DecodeSession
from tevviz.engine.draft.builders import BuilderConfig
from tevviz.engine.records import io as tio
from tevviz.render.compare_figure import pair_figure_dicts, shared_layout, side_figure_dicts, union_figure_dict


def run_of(pair, ids: list[int], budget: int, depth: int, verifier: str, tokens: int, name: str) -> Run:
    cfg = DecodeConfig(sampling=SamplingConfig(temperature=1.0), builder=BuilderConfig(budget=budget, depth=depth),
                       verifier=verifier, max_new_tokens=tokens, seed=0)
    s = DecodeSession(pair, ids, cfg)
    s.run()
    return Run.of(tio.parse(tio.export_session(s, "")), name)


def timed_ms(fn, *args, **kwargs):
    """(fn's result, its wall time in ms)."""
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, (time.perf_counter() - t0) * 1e3


def main() -> None:
    ap = parser(__doc__.splitlines()[0])
    ap.add_argument("--budgets", default="32,64,128", help="B of both runs' trees, comma-separated")
    ap.add_argument("--depth", type=int, default=6)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    args = ap.parse_args()
    args.limit = args.limit or 1
    pair, prompts = setup(args)
    rows = []
    for budget in (int(b) for b in args.budgets.split(",")):
        a = run_of(pair, prompts[0], budget, args.depth, "tev", args.max_new_tokens, "A")
        b = run_of(pair, prompts[0], budget, args.depth, "predraw", args.max_new_tokens, "B")
        cmp = compare_runs(a, b)
        times: dict[str, list[float]] = {k: [] for k in ("match", "layout", "sides", "union", "figures", "total")}
        sizes = []
        for k in cmp.round_indices:
            ra = next(r for r in a.rounds if r.index == k)
            rb = next(r for r in b.rounds if r.index == k)
            t0 = time.perf_counter()
            times["match"].append(timed_ms(cmp.round, k)[1])
            tree, took = timed_ms(shared_layout, ra, rb)
            times["layout"].append(took)
            times["sides"].append(timed_ms(side_figure_dicts, ra, rb, metric="P", tree=tree)[1])
            times["union"].append(timed_ms(union_figure_dict, ra, rb, tree=tree)[1])
            times["figures"].append(timed_ms(pair_figure_dicts, ra, rb, metric="P")[1])
            times["total"].append((time.perf_counter() - t0) * 1e3)
            sizes.append((ra.size, rb.size, tree.size))
        row = {"B": budget, "rounds": len(cmp.round_indices),
               "nodes A": statistics.mean(s[0] for s in sizes), "nodes B": statistics.mean(s[1] for s in sizes),
               "union": statistics.mean(s[2] for s in sizes)}
        row.update({f"{k} ms": statistics.median(v) for k, v in times.items()})
        row["max total ms"] = max(times["total"])
        rows.append(row)
    columns = ["B", "rounds", "nodes A", "nodes B", "union", "match ms", "layout ms", "sides ms", "union ms",
               "figures ms", "total ms", "max total ms"]
    print(table(rows, columns))
    print("total: a round compared, laid out once, drawn as two side figures, one union figure and the app's two "
          "Figures (median over the rounds both runs hold; max beside it)")
    write("compare_render", args, {"rows": rows})


if __name__ == "__main__":
    main()
