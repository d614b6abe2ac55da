"""Where the drafter loses target mass: C_p of the draft trees against C_p* of the optimal trees.

Per setting (temperature x budget), over the eval prompts: mean C_p, mean C_p*, mean drafter gap
with its standard error, the gap split by depth (optimal mass minus draft mass at each depth),
the exit mass split into width and leaf exits by depth, and the cost of computing the optimal
tree against the round itself (medians, same run). Per prompt it also takes the mean of 1 + C_p (the expected
block length of TEV on the draft trees) and of 1 + C_p* (the most any tree of that budget and depth could give on
the same contexts), and reports both over prompts with standard errors: `--eval-contexts N` runs on ExitTrain's
held-out windows, which bounds what any drafter can gain at that B and H. The root's own children are split out
(`root_*`): the target mass at depth 1 of the draft tree, of the target's K most likely tokens (what a perfect ranking
of the draft's K children would hold) and of the optimal tree, with the optimal tree's number of depth-1 nodes; so
the depth-1 gap splits into ranking (top K minus draft) and width (optimal minus top K; `--children` sets K).
"""

from __future__ import annotations

import statistics

from common import best_first, held_out_windows, parser, setup, table, tree_decode, write

from tevviz.engine.analysis.stats import mean_se
from tevviz.engine.analysis.summary import exit_by_depth
from tevviz.engine.draft.builders import BuilderConfig


def mass_by_depth(depths: list[int], P: list[float], top: int) -> list[float]:
    out = [0.0] * (top + 1)
    for d, p in zip(depths, P):
        if d:
            out[d] += p
    return out


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--temperatures", default="0,1")
    ap.add_argument("--budgets", default="32,64")
    ap.add_argument("--depth", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--eval-contexts", type=int, default=0,
                    help="run on N windows of the held-out stdlib files (exittrain_ablation.py's) instead of prompts")
    ap.add_argument("--context-tokens", type=int, default=96)
    ap.add_argument("--eval-seed", type=int, default=1, help="seed of the windows' draw (as exittrain_ablation.py's)")
    ap.add_argument("--children", type=int, default=BuilderConfig.children, help="best-first K")
    args = ap.parse_args()
    pair, prompts = setup(args)
    if args.eval_contexts:
        prompts = held_out_windows(pair.tokenizer, args.eval_contexts, args.context_tokens, args.eval_seed)
    rows, detail = [], {}
    for t in [float(x) for x in args.temperatures.split(",")]:
        for b in [int(x) for x in args.budgets.split(",")]:
            builder = best_first(b, args.depth, args.children)
            K = builder.children
            # per round, the root's own children: (optimal count, draft mass, optimal top-K mass, optimal mass)
            roots = []
            gaps, cps, stars, held, opt_ms, round_ms, by_depth, records = [], [], [], [], [], [], [], []
            ceiling, best = [], []  # per prompt: mean 1 + C_p and mean 1 + C_p* over its rounds
            for i, ids in enumerate(prompts):
                s, _ = tree_decode(pair, ids, t, builder, "tev", args.max_new_tokens, seed=i)
                first = len(cps)
                for r in s.rounds:
                    r = s.optimal(r.index)
                    g = r.coverage_gap()
                    gaps.append(g.gap), cps.append(g.C_p), stars.append(g.C_p_star), held.append(g.held)
                    opt_ms.append(r.optimal.ms), round_ms.append(sum(r.stage_ms.values()))
                    top = args.depth
                    star_d = mass_by_depth(r.optimal.depths, r.optimal.P, top)
                    draft_d = mass_by_depth(r.depths, r.P, top)
                    by_depth.append([a - c for a, c in zip(star_d, draft_d)])
                    first_p = sorted((p for d, p in zip(r.optimal.depths, r.optimal.P) if d == 1), reverse=True)
                    roots.append((len(first_p), draft_d[1], sum(first_p[:K]), star_d[1]))
                    records.append(r)
                ceiling.append(1 + statistics.fmean(cps[first:]))
                best.append(1 + statistics.fmean(stars[first:]))
            n = len(gaps)
            gap_by_depth = [sum(x[d] for x in by_depth) / n for d in range(1, args.depth + 1)]
            split = exit_by_depth(records)
            key = f"T{t:g}_B{b}"
            detail[key] = {"gap_by_depth": gap_by_depth, "exit_width_by_depth": split["width"],
                           "exit_leaf_by_depth": split["leaf"]}
            detail[key].update({"per_prompt_1+C_p": ceiling, "per_prompt_1+C_p*": best})
            (c, c_se), (o, o_se) = mean_se(ceiling), mean_se(best)
            rows.append({"T": t, "B": b, "rounds": n, "1+C_p": c, "1+C_p se": c_se, "1+C_p*": o, "1+C_p* se": o_se,
                         "C_p": statistics.mean(cps), "C_p*": statistics.mean(stars),
                         "gap": statistics.mean(gaps), "gap_se": mean_se(gaps)[1], "held": statistics.mean(held),
                         "round_ms": statistics.median(round_ms), "optimal_ms": statistics.median(opt_ms),
                         "gap_by_depth": " ".join(f"{x:.3f}" for x in gap_by_depth),
                         # The depth-1 gap split: ranking (the draft's root children against the target's top K)
                         # and width (the optimal tree's root children beyond K).
                         "root_children*": statistics.mean(x[0] for x in roots),
                         "root_draft": statistics.mean(x[1] for x in roots),
                         f"root_top{K}": statistics.mean(x[2] for x in roots),
                         "root*": statistics.mean(x[3] for x in roots)})
            print(table(rows[-1:], list(rows[-1])), flush=True)
    print(f"\n{len(prompts)} prompts x {args.max_new_tokens} tokens, H = {args.depth}, best-first K = {args.children}, "
          "W = max(8, B/4); gap_by_depth: mean (optimal - draft) coverage at depths 1..H; "
          "root_*: target mass at depth 1 "
          "of the draft tree, of the target's top K tokens, of the optimal tree (root_children*: its depth-1 nodes)")
    print(table(rows, list(rows[0])))
    write("optimal_gap", args, {"rows": rows, "detail": detail})


if __name__ == "__main__":
    main()
