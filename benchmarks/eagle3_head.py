"""How does an EAGLE-3 head compare with the pair's autoregressive drafter at one budget, on each held-out set?

Per drafter and set at T = 0: acceptance by depth (the share of rounds that accept at least d drafted tokens), tau,
tokens/s and the speed-up over `generate`; the head on its own builder (EAGLE's tree at B nodes) and on the
best-first tree the autoregressive drafter uses. Runs are interleaved prompt by prompt: `generate`, then each drafter.

    python benchmarks/eagle3_head.py --pair smollm2 --limit 8 --budget 16 \\
        --drafters assets/models/tevviz-smollm2-draft,assets/models/tevviz-smollm2-eagle3-head \\
        --sets assets/scan_prompts/smollm2.jsonl,assets/scan_prompts/smollm2_freeform.jsonl
"""

from __future__ import annotations

import statistics

from common import best_first, pair_tree, parser, table, tree_decode, write
from drafter_frontier import generate_seconds

from tevviz.engine.decode.session import encode_prompt
from tevviz.engine.draft.drafters import accepts, drafter_kind_of
from tevviz.engine.load.models import ModelSource, with_draft
from tevviz.prompts import load_prompts


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--sets", required=True, help="JSONL prompt files, comma-separated")
    ap.add_argument("--drafters", required=True, help="drafter folders, comma-separated")
    ap.add_argument("--budget", type=int, default=16)
    ap.add_argument("--depth", type=int, default=6, help="tree depth at most")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--verifier", default="tev")
    args = ap.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    paths = args.drafters.split(",")
    base = ModelSource(target=args.target, draft=paths[0], pair=args.pair, dtype=args.dtype, device=args.device).load()
    runs = {}
    for path in paths:
        pair, name = with_draft(base, path), path.rstrip("/").split("/")[-1]
        own = pair_tree(pair, args.budget, args.depth)
        runs[f"{name} ({own.name})"] = (pair, own)
        if own.name != "best-first" and accepts("best-first", drafter_kind_of(pair.draft)):
            depth = min(args.depth, drafter_kind_of(pair.draft).model_depth(pair.draft) or args.depth)
            runs[f"{name} (best-first)"] = (pair, best_first(args.budget, depth))
    sets = {}
    for path in args.sets.split(","):
        rows = load_prompts(path)[: args.limit]
        sets[path.split("/")[-1]] = [encode_prompt(base.tokenizer, r["prompt"], chat=bool(r.get("chat")))
                                     for r in rows]
    n, first = args.max_new_tokens, next(iter(sets.values()))[0]
    generate_seconds(base, first, 8, 0.0)  # warm-up, not timed
    for pair, tree in runs.values():
        tree_decode(pair, first, 0.0, tree, args.verifier, 8, 0)
    rows = []
    for set_name, prompts in sets.items():
        gen_s = 0.0
        acc = {k: {"s": 0.0, "tokens": 0, "tau": [], "accepted": []} for k in runs}
        for i, ids in enumerate(prompts):
            gen_s += generate_seconds(base, ids, n, 0.0)
            for key, (pair, tree) in runs.items():
                s, secs = tree_decode(pair, ids, 0.0, tree, args.verifier, n, i)
                r = acc[key]
                r["s"] += secs
                r["tokens"] += len(s.generated)
                r["tau"].append(sum(x.block_length for x in s.rounds) / len(s.rounds))
                r["accepted"] += [len(x.accepted) - 1 for x in s.rounds]
            print(f"{set_name}: prompt {i + 1}/{len(prompts)}", flush=True)
        gen_tps = n * len(prompts) / gen_s
        for key, r in acc.items():
            depth = {f"acc_d{d}": sum(a >= d for a in r["accepted"]) / len(r["accepted"]) for d in (1, 2, 3, 4)}
            rows.append({"set": set_name, "drafter": key, "B": args.budget, "rounds": len(r["accepted"]), **depth,
                         "tau": statistics.fmean(r["tau"]),
                         "tau_se": statistics.stdev(r["tau"]) / len(r["tau"]) ** 0.5 if len(r["tau"]) > 1 else None,
                         "tokens_per_s": r["tokens"] / r["s"], "generate_tokens_per_s": gen_tps,
                         "speedup": r["tokens"] / r["s"] / gen_tps})
    print(f"{base.target_name}: {n} new tokens, {args.limit} prompts per set, T = 0, verifier {args.verifier}")
    print(table(rows, ["set", "drafter", "B", "rounds", "acc_d1", "acc_d2", "acc_d3", "acc_d4", "tau", "tau_se",
                       "tokens_per_s", "generate_tokens_per_s", "speedup"]))
    write(f"eagle3_head_{args.pair or 'pair'}", args, {"rows": rows})


if __name__ == "__main__":
    main()
