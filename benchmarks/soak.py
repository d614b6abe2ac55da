"""Soak test of one app session: many rounds through the Controller, memory sampled as it goes.

Drives `tevviz.app.controller.Controller` directly (no HTTP) on the embedded pair, or on a tiny random
pair with --tiny: Step until the session is done, Reset, Step again with the next prompt, and so on
for --rounds rounds. Every --every rounds it samples the resident set size (VmRSS), the rounds the
session's history holds and the live sessions in the store. The goal is a flat RSS after warm-up.

    python benchmarks/soak.py --tiny --rounds 2000
"""

from __future__ import annotations

import time

from common import ROOT, parser, table, write

from tevviz.app.controller import Controller
from tevviz.app.source import PairSource
from tevviz.app.state import MAX_HISTORY, AppState, decode_settings, train_settings
from tevviz.app.views import stats_markdown, text_spans, tree_plot
from tevviz.engine import ModelSource
from tevviz.engine.load.models import embedded_pair_paths
from tevviz.prompts import load_prompts

TINY_PROMPTS = ["t1 t2 t3", "t4 t5 t6 t7", "t60 t61", "t10 t20 t30 t40 t50"]
COLUMNS = ["round", "rss_mib", "history", "live_sessions", "sessions", "ms_per_round"]


def rss_mib() -> float:
    """Resident set size of this process, from /proc/self/status."""
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def slope_mib_per_1k(rows: list[dict]) -> float:
    """Least-squares slope of RSS against rounds, in MiB per 1,000 rounds."""
    if len(rows) < 2:
        return 0.0
    xs, ys = [r["round"] for r in rows], [r["rss_mib"] for r in rows]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    return 1000 * sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0


def source_and_prompts(args) -> tuple[PairSource, list[str]]:
    if args.tiny:
        import sys

        sys.path.insert(0, str(ROOT / "tests"))
        from conftest import tiny_pair  # builds the models from configs; also sets torch to one thread

        return PairSource(pair=tiny_pair("llama")), TINY_PROMPTS
    if args.target is None and not embedded_pair_paths()[0].exists():
        raise SystemExit("the embedded pair is not in assets/models yet; pass --tiny (or --target and --draft)")
    rows = load_prompts(args.prompts, args.split)[: args.limit or 8]
    return (PairSource(ModelSource(args.target, args.draft, dtype=args.dtype, device=args.device)),
            [r["prompt"] for r in rows] or ["def fibonacci(n):\n"])


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--rounds", type=int, default=2000)
    ap.add_argument("--every", type=int, default=100, help="sample memory every N rounds")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--history", type=int, default=MAX_HISTORY, help="rounds the session's history keeps")
    ap.add_argument("--render", action="store_true", help="also build the tree figure, stats and text each round")
    ap.add_argument("--train-every", type=int, default=0, help="one ExitTrain step every N rounds (0: never)")
    ap.add_argument("--tiny", action="store_true", help="a tiny random pair (as the tests build) instead")
    args = ap.parse_args()

    source, prompts = source_and_prompts(args)
    ctl = Controller(source, history=args.history)
    st, sessions, rows = AppState(), 0, []
    rss_start = rss_mib()
    t_last, n_last = time.perf_counter(), 0
    for n in range(1, args.rounds + 1):
        if st.done or st.origin != "live":
            st = ctl.reset(st)
            sessions += 1
        prompt, cfg = decode_settings(prompts[(sessions - 1) % len(prompts)], args.temperature, 0, 1.0, sessions,
                                      "best-first", 32, 6, 4, 8, "4,2,2,1,1", "tev", args.max_new_tokens)
        st = ctl.step(st, prompt, cfg)
        if args.render:
            tree_plot(st, "P"), stats_markdown(st), text_spans(st)
        if args.train_every and n % args.train_every == 0:
            ctl.train(st, train_settings("exit", 1e-4, 1.0, 2, 1, cfg.builder), cfg)
        if n % args.every == 0 or n == args.rounds:
            now = time.perf_counter()
            rows.append({"round": n, "rss_mib": round(rss_mib(), 1), "history": len(st.rounds),
                         "live_sessions": len(ctl.store), "sessions": sessions,
                         "ms_per_round": round(1e3 * (now - t_last) / (n - n_last), 1)})
            t_last, n_last = now, n
            print("  ".join(f"{c} {rows[-1][c]}" for c in COLUMNS), flush=True)

    warm = rows[len(rows) // 4:]  # the first quarter is warm-up (allocator pools, caches, lazy imports)
    summary = {
        "rss_start_mib": round(rss_start, 1),
        "rss_after_warmup_mib": warm[0]["rss_mib"],
        "rss_end_mib": rows[-1]["rss_mib"],
        "rss_max_mib": max(r["rss_mib"] for r in rows),
        "growth_after_warmup_mib": round(rows[-1]["rss_mib"] - warm[0]["rss_mib"], 1),
        "slope_after_warmup_mib_per_1k_rounds": round(slope_mib_per_1k(warm), 2),
        "sessions": sessions,
        "max_history": max(r["history"] for r in rows),
    }
    print()
    print(table(rows, COLUMNS))
    print()
    print("  ".join(f"{k} {v}" for k, v in summary.items()))
    write("soak", args, {"rows": rows, "summary": summary})


if __name__ == "__main__":
    main()
