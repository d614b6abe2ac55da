"""Which drafter of a pair makes trees pay, at which budget, on each held-out set?

For each drafter (a block drafter on DDTree trees, an autoregressive one on best-first trees) and each budget B:
tau, the expected block length, tokens/s and the speed-up over `generate`, with the break-even tau (the tau at which
that round time would equal `generate`'s time for the same tokens: round seconds / generate's seconds per token), on
every prompt set given. Runs are interleaved prompt by prompt: `generate`, then every (drafter, B) in turn.

    python benchmarks/drafter_frontier.py --pair smollm2 --sets eval,freeform --limit 12 \\
        --drafters assets/models/tevviz-smollm2-draft,assets/models/tevviz-smollm2-block-draft --budgets 4,8,16,32 \\
        --assisted tevviz-smollm2-draft
"""

from __future__ import annotations

import statistics
import time
from dataclasses import replace

from common import pair_tree, parser, sync, table, tree_decode, write

from tevviz.engine.cost.auto_budget import AutoBudget
from tevviz.engine.decode.session import encode_prompt
from tevviz.engine.load.models import ModelPair, ModelSource, with_draft
from tevviz.engine.load.pairs import named_pair
from tevviz.prompts import load_prompts


def prompt_sets(pair: ModelPair, args) -> dict[str, list[list[int]]]:
    """Token ids of the first --limit prompts of each set (a named pair's split, or a JSONL path)."""
    out = {}
    for name in args.sets.split(","):
        path = named_pair(args.pair).split_path(name) if args.pair else name
        rows = load_prompts(path, name if args.pair else None)[: args.limit]
        out[name] = [encode_prompt(pair.tokenizer, r["prompt"], chat=bool(r.get("chat"))) for r in rows]
    return out


def generate_seconds(pair: ModelPair, ids: list[int], n: int, temperature: float, assistant=None) -> float:
    """Seconds `generate` takes for n new tokens of `ids` (prefill included); with `assistant`, HF assisted
    generation with that autoregressive drafter."""
    import torch

    kw = {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0} if temperature > 0 else \
        {"do_sample": False}
    if assistant is not None:
        kw["assistant_model"] = assistant
    x = torch.tensor([ids], device=pair.device)
    sync(pair.device)
    t0 = time.perf_counter()
    pair.target.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=n, min_new_tokens=n,
                         pad_token_id=pair.tokenizer.eos_token_id, **kw)
    sync(pair.device)
    return time.perf_counter() - t0


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--sets", default="eval", help="prompt sets: a named pair's splits, or JSONL paths")
    ap.add_argument("--drafters", required=True, help="drafter folders, comma-separated")
    ap.add_argument("--budgets", default="4,8,16,32", help="B values; `auto` adds --budget auto up to the largest")
    ap.add_argument("--depth", type=int, default=6, help="H of an autoregressive drafter's best-first trees")
    ap.add_argument("--temperatures", default="0")
    ap.add_argument("--verifier", default="tev")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--assisted", default=None,
                    help="an autoregressive drafter among --drafters (its folder name) to time HF assisted generation "
                         "with, interleaved like the rest; each row then has its speed-up over it")
    args = ap.parse_args()
    source = ModelSource(target=args.target, draft=args.drafters.split(",")[0], pair=args.pair, dtype=args.dtype,
                         device=args.device)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    base = source.load()
    pairs = {path.rstrip("/").split("/")[-1]: with_draft(base, path) for path in args.drafters.split(",")}
    sets = prompt_sets(base, args)
    budgets = [b if b == "auto" else int(b) for b in args.budgets.split(",")]
    limit = max(b for b in budgets if b != "auto")

    def tree(name: str, b):
        """The drafter's tree at budget b; "auto": --budget auto up to the largest B given."""
        return replace(pair_tree(pairs[name], limit, args.depth), auto=True) if b == "auto" else \
            pair_tree(pairs[name], b, args.depth)

    temps = [float(t) for t in args.temperatures.split(",")]
    n = args.max_new_tokens
    keys = [(name, b) for name in pairs for b in budgets]
    first = next(iter(sets.values()))[0]
    assistant = pairs[args.assisted].draft if args.assisted else None
    for t in temps:  # warm-up, not timed
        generate_seconds(base, first, 8, t)
        if assistant is not None:
            generate_seconds(base, first, 8, t, assistant)
        for name, b in keys:
            tree_decode(pairs[name], first, t, tree(name, b), args.verifier, 8, 0)
    rows = []
    for set_name, prompts in sets.items():
        for t in temps:
            gen_s, assisted_s = 0.0, 0.0
            runs = {k: {"s": 0.0, "tokens": 0, "rounds": 0, "tau": [], "len": []} for k in keys}
            # --budget auto's cost model carries its measurements from one prompt to the next, as in a session.
            models = {(name, b): AutoBudget(limit, tree(name, b).depth) for name, b in keys if b == "auto"}
            for i, ids in enumerate(prompts):
                gen_s += generate_seconds(base, ids, n, t)
                if assistant is not None:
                    assisted_s += generate_seconds(base, ids, n, t, assistant)
                for name, b in keys:
                    s, secs = tree_decode(pairs[name], ids, t, tree(name, b), args.verifier, n, i,
                                          models.get((name, b)))
                    r = runs[name, b]
                    r["s"] += secs
                    r["tokens"] += len(s.generated)
                    r["rounds"] += len(s.rounds)
                    r["tau"].append(sum(x.block_length for x in s.rounds) / len(s.rounds))
                    r["len"].append(statistics.fmean(x.expected_length for x in s.rounds))
                print(f"{set_name} T={t:g}: prompt {i + 1}/{len(prompts)}", flush=True)
            gen_tps = n * len(prompts) / gen_s
            for (name, b), r in runs.items():
                tps = r["tokens"] / r["s"]
                se = statistics.stdev(r["tau"]) / len(r["tau"]) ** 0.5 if len(r["tau"]) > 1 else float("nan")
                rows.append({"set": set_name, "T": t, "drafter": name, "B": b,
                             "tau": statistics.fmean(r["tau"]), "tau_se": se,
                             "expected_length": statistics.fmean(r["len"]),
                             "break_even_tau": (r["s"] / r["rounds"]) * gen_tps,
                             "tokens_per_s": tps, "generate_tokens_per_s": gen_tps, "speedup": tps / gen_tps,
                             "vs_assisted": tps * assisted_s / (n * len(prompts)) if assistant is not None else None})
    print(f"{base.target_name}: {n} new tokens, prompts per set {args.limit}, verifier {args.verifier}")
    print(table(rows, ["set", "T", "drafter", "B", "tau", "tau_se", "expected_length", "break_even_tau",
                       "tokens_per_s", "generate_tokens_per_s", "speedup"]
                + (["vs_assisted"] if assistant is not None else [])))
    write(f"drafter_frontier_{args.pair or 'pair'}", args, {"rows": rows})


if __name__ == "__main__":
    main()
