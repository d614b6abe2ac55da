"""Sampled chains (speculative verifier) at each fixed depth and with --budget auto: tau, round time and its stages.

Every decoder runs on every prompt and seed in turn (interleaved), so rows compare within one run. Besides the
realised tau it reports each decoder's *expected* block length (1 + the exact expected accepted tokens of each
round) and the expected rate (those over the measured round times): at T = 1 the realised tau of a fixed depth
moves by several percent with the random stream, the expected one much less. *Pooled* tokens per ms price every
round at the mean time of its depth over all decoders of the run: it compares the depths chosen, free of the load
that moved while one decoder ran. The auto row also gives the depths it chose and the round time by chosen depth,
which is what its cost model has to get right.
"""

from __future__ import annotations

import statistics
from collections import Counter

from common import parser, setup, table, tree_decode, write

from tevviz.engine.analysis.summary import summarize
from tevviz.engine.cost.auto_budget import AutoBudget
from tevviz.engine.draft.builders import BuilderConfig


def ms_by_depth(rounds) -> dict[int, list[float]]:
    """Each round's whole time (all stages), grouped by its chain depth and sorted by depth."""
    out: dict[int, list[float]] = {}
    for r in rounds:
        out.setdefault(r.size - 1, []).append(sum(r.stage_ms.values()))
    return dict(sorted(out.items()))


def main() -> None:
    ap = parser(__doc__.splitlines()[0])
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--depths", default="1,2,3,4,5,6", help="fixed chain depths, comma-separated")
    ap.add_argument("--auto-depth", type=int, default=8, help="the depth limit of the --budget auto row (0: no row)")
    ap.add_argument("--auto-windows", default="",
                    help="one auto row per survival window (drafted chains the sums remember), comma-separated "
                         "(default: one row, with the engine's window)")
    ap.add_argument("--seeds", type=int, default=1, help="decodes of each prompt, each with its own seed")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    args = ap.parse_args()
    pair, prompts = setup(args)
    depths = [int(x) for x in args.depths.split(",") if x]
    models = {}  # auto row -> its cost model, carried from prompt to prompt as a session would
    windows = [int(x) for x in args.auto_windows.split(",") if x] or [None]
    for w in windows if args.auto_depth else []:
        model = models[f"auto (H<={args.auto_depth})" + (f" window {w}" if w else "")] = AutoBudget(
            args.auto_depth, args.auto_depth, chain=True)
        if w:
            model.prefix_window = w
    builders = {str(h): BuilderConfig(name="sampled", depth=h) for h in depths}
    for n in models:
        builders[n] = BuilderConfig(name="sampled", depth=args.auto_depth, auto=True)
    names = list(builders)
    tree_decode(pair, prompts[0], args.temperature, builders[names[0]], "speculative", 16, 0)  # warm-up
    rounds = {n: [] for n in names}
    generated, seconds = Counter(), Counter()
    for seed in range(args.seeds):
        for i, ids in enumerate(prompts):
            for n in names:
                s, sec = tree_decode(pair, ids, args.temperature, builders[n], "speculative", args.max_new_tokens,
                                     seed * 1000 + i, models.get(n))
                generated[n] += len(s.generated)
                seconds[n] += sec
                rounds[n] += s.rounds
    depth_ms = {h: statistics.fmean(v) for h, v in ms_by_depth(r for n in names for r in rounds[n]).items()}
    rows = []
    for n in names:
        sm = summarize(rounds[n])
        ms = sum(sm.stage_ms.values())
        rows.append({"decoder": n, "tok/s": generated[n] / seconds[n], "tau": sm.tau,
                     "expected tau": sm.mean_expected_length, "round ms": ms / sm.rounds,
                     "expected tok/ms": sm.mean_expected_length * sm.rounds / ms,
                     "pooled tok/ms": sm.mean_expected_length * sm.rounds
                                      / sum(depth_ms[r.size - 1] for r in rounds[n]),
                     "rounds": sm.rounds})
    print(table(rows, list(rows[0])))
    payload = {"rows": rows, "pooled ms by depth": depth_ms}
    for auto, model in models.items():
        by_depth = ms_by_depth(rounds[auto])
        payload.setdefault("auto_depths", {})[auto] = {h: {"rounds": len(v), "median ms": statistics.median(v)}
                                                       for h, v in by_depth.items()}
        print(f"{auto}: rounds and median round ms by chosen depth:",
              ", ".join(f"{h}: {len(v)} x {statistics.median(v):.2f}" for h, v in by_depth.items()))
        payload.setdefault("fit", {})[auto] = vars(model.fit())
    write("chain_depths", args, payload)


if __name__ == "__main__":
    main()
