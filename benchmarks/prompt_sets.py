"""Do the decoding defaults hold on any prompt set? tevviz's default for the pair, at each temperature, against the
best plain decoding on every prompt of several sets: the pair's eval split, its scan sets and a set written for this
benchmark alone (assets/bench_prompts/, sharing no file with any training data).

Per prompt, interleaved and with the order turned from prompt to prompt, all to --max-new-tokens (EOS ignored, on
every side the same number of tokens): transformers' `generate` at one thread and torch's default count, tevviz's
plain loop through each target path (stock, few-row) at `tevviz decode`'s thread count, and tevviz's default decode.
Each time includes the prompt's prefill on every side. Reported per set and temperature: the aggregate speed-up
(tokens over seconds on each side, never a mean of per-prompt rates) against the best `generate` and against the
best plain way, the per-prompt ratios' distribution against the best plain way on that prompt (min, quartiles,
max, how many below 1.0), and the floor over sets.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import replace

import torch
from baselines import at_threads, decode_threads, default_tree, hf_generate, thread_counts
from common import ROOT, parser, sync, table, tree_decode, write

from tevviz.engine.core.sampling import SamplingConfig
from tevviz.engine.decode.plain import autoregressive
from tevviz.engine.decode.session import DecodeConfig, encode_prompt
from tevviz.engine.decode.target_pass import takes_split
from tevviz.engine.load.models import ModelSource
from tevviz.prompts import load_prompts

ASSETS = ROOT / "assets"
SETS = {  # set name -> (prompt file, split or None for every line)
    "stdlib": {"eval": ("prompts.jsonl", "eval"), "scan": ("scan_prompts/stdlib.jsonl", None),
               "bench": ("bench_prompts/code.jsonl", "bench")},
    "smollm2": {"eval": ("prompts_chat.jsonl", "eval"), "scan": ("scan_prompts/smollm2.jsonl", None),
                "freeform": ("scan_prompts/smollm2_freeform.jsonl", None), "bench": ("bench_prompts/chat.jsonl",
                                                                                     "bench")},
}


def plain_loop(pair, n: int, temperature: float, path: str):
    cfg = DecodeConfig(sampling=SamplingConfig(temperature=temperature), max_new_tokens=n, stop_on_eos=False)
    return lambda ids, i: len(autoregressive(pair, ids, replace(cfg, seed=i), path).token_ids)


def decoders(pair, n: int, temperature: float) -> dict:
    """name -> (kind, fn(ids, i) -> tokens): the plain ways and tevviz's default at one temperature."""
    out = {}
    for k in thread_counts():
        out[f"generate threads={k}"] = ("generate", at_threads(k, lambda ids, i: hf_generate(
            pair.target, pair, ids, n, temperature)[0]))
    threads = decode_threads(pair)
    for path in ("stock", "few_rows") if takes_split(pair.target) else ("stock",):
        out[f"tevviz loop {path} threads={threads}"] = ("plain", at_threads(threads, plain_loop(pair, n, temperature,
                                                                                                 path)))
    tree, verifier = default_tree(pair, temperature)

    def default(ids, i):
        s, _ = tree_decode(pair, ids, temperature, tree, verifier, n, i)
        return len(s.generated)

    out[f"tevviz default ({tree.name}+{verifier})"] = ("tevviz", at_threads(threads, default))
    return out


def timed(pair, prompts, runs: dict) -> dict:
    """(T, name) -> per-prompt [(tokens, seconds)], interleaved prompt by prompt, the order turned each prompt."""
    for row in runs.values():  # a warm-up, not timed
        for _, fn in row.values():
            fn(prompts[0], 0)
    per = {(t, k): [] for t, row in runs.items() for k in row}
    for i, ids in enumerate(prompts):
        for t, row in runs.items():
            order = list(row.items())
            turn = i % len(order)
            for name, (_, fn) in order[turn:] + order[:turn]:
                sync(pair.device)
                t0 = time.perf_counter()
                count = fn(ids, i)
                sync(pair.device)
                per[t, name].append((count, time.perf_counter() - t0))
    return per


def quartiles(xs: list[float]) -> dict:
    xs = sorted(xs)
    q = statistics.quantiles(xs, n=4) if len(xs) > 1 else [xs[0]] * 3
    return {"min": xs[0], "q1": q[0], "median": q[1], "q3": q[2], "max": xs[-1],
            "below_1": sum(x < 1.0 for x in xs), "prompts": len(xs)}


def summarise(set_name: str, runs: dict, per: dict) -> list[dict]:
    rows = []
    for t, row in runs.items():
        rate = {k: sum(c for c, _ in per[t, k]) / sum(s for _, s in per[t, k]) for k in row}
        gen = max((k for k in row if row[k][0] == "generate"), key=rate.get)
        plain = max((k for k in row if row[k][0] != "tevviz"), key=rate.get)
        prompts = len(per[t, gen])
        for k in (k for k in row if row[k][0] == "tevviz"):
            # Per prompt: against the fastest plain way on that prompt.
            ratios = [(per[t, k][i][0] / per[t, k][i][1]) / max(per[t, p][i][0] / per[t, p][i][1]
                                                                for p in row if row[p][0] != "tevviz")
                      for i in range(prompts)]
            rows.append({"set": set_name, "T": t, "decoder": k, "tokens_per_s": rate[k], "best_generate": gen,
                         "vs_best_generate": rate[k] / rate[gen], "best_plain": plain,
                         "vs_best_plain": rate[k] / rate[plain], "per_prompt_vs_best_plain": quartiles(ratios),
                         "rates": rate})
    return rows


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--sets", default="", help="comma-separated set names (default: every set of the pair)")
    ap.add_argument("--temperatures", default="0,1")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    name = args.pair or "stdlib"
    sets = {k: v for k, v in SETS[name].items() if not args.sets or k in args.sets.split(",")}
    pair = ModelSource(pair=name, dtype=args.dtype, device=args.device).load()
    temps = [float(t) for t in args.temperatures.split(",")]
    rows = []
    for set_name, (file, split) in sets.items():
        lines = load_prompts(ASSETS / file, split)[: args.limit]
        prompts = [encode_prompt(pair.tokenizer, r["prompt"], chat=bool(r.get("chat"))) for r in lines]
        runs = {t: decoders(pair, args.max_new_tokens, t) for t in temps}
        per = timed(pair, prompts, runs)
        got = summarise(set_name, runs, per)
        rows += got
        for r in got:
            q = r["per_prompt_vs_best_plain"]
            print(f"{set_name} T={r['T']:g}: {r['vs_best_generate']:.2f}x best generate, {r['vs_best_plain']:.2f}x "
                  f"best plain ({r['best_plain']}); per prompt min {q['min']:.2f} median {q['median']:.2f} max "
                  f"{q['max']:.2f}, {q['below_1']} of {q['prompts']} below 1.0", flush=True)
    print(table([{**r, "min": r["per_prompt_vs_best_plain"]["min"], "median": r["per_prompt_vs_best_plain"]["median"],
                  "below_1": r["per_prompt_vs_best_plain"]["below_1"]} for r in rows],
                ["set", "T", "tokens_per_s", "vs_best_generate", "vs_best_plain", "min", "median", "below_1"]))
    floor = {t: min(r["vs_best_plain"] for r in rows if r["T"] == t) for t in temps}
    print("floor over sets (aggregate vs best plain): " + ", ".join(f"T={t:g} {v:.2f}x" for t, v in floor.items()))
    write(f"prompt_sets_{name}", args, {"rows": rows, "floor_vs_best_plain": {str(t): v for t, v in floor.items()},
                                        "threads": decode_threads(pair)})


if __name__ == "__main__":
    main()
