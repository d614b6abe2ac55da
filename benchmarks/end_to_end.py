"""End to end on the eval prompts: tokens/s, tau and 1 + C_p of each decoder, speed-up over autoregressive.

(--baselines: another set of rows instead, the baselines a user would pick beside tevviz's default and best settings,
with each tevviz row's ideal tokens/s and the share of it achieved; see baselines.py.)

Decoders: plain autoregressive (`target.generate`, also at each of --generate-threads, and tevviz's own token loop),
HF assisted generation (`target.generate(assistant_model=draft)`), (--prompt-lookup) HF prompt lookup, chain
speculative decoding, best-first + predraw (the DDTree configuration), best-first + TEV at each budget of --budgets,
best-first + TEV with the exit-trained drafter, (--trees) best-first + TEV at given B and H, (--fresh-auto) --budget
auto with a new cost model per prompt as `tevviz decode` runs it, (--sampled-depths) sampled chains with the
speculative verifier, (--mixed) the mixed builder, a tree or a chain each round, and (--block) a block drafter with
DDTree's builder under TEV and under predraw (DDTree itself) at each budget. Runs are interleaved prompt by prompt and
temperature by temperature (each decoder once per prompt in turn) after one warm-up pass. Every time includes the
prompt's prefill (`generate`'s own, or the DecodeSession's).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import replace
from pathlib import Path

import baselines
from baselines import at_threads
from common import best_first, parser, plotly_go, setup, sync, table, tree_decode, tree_flags, write

from tevviz.engine.draft.builders import BuilderConfig
from tevviz.engine.draft.drafters import drafter_kind_of, folder_kind
from tevviz.engine.load.models import ModelPair, load_model
from tevviz.engine.load.pairs import named_pair


def hf_generate(pair: ModelPair, ids, n: int, temperature: float, assistant=None, prompt_lookup: int = 0):
    extra = {"assistant_model": assistant} if assistant is not None else {}
    if prompt_lookup:  # transformers' drafter-free baseline: draft tokens copied from the prompt's n-grams
        extra["prompt_lookup_num_tokens"] = prompt_lookup
    return baselines.hf_generate(pair.target, pair, ids, n, temperature, **extra)


def own_autoregressive(pair: ModelPair, ids, n: int, temperature: float, seed: int):
    from tevviz.engine.core.sampling import SamplingConfig
    from tevviz.engine.decode.plain import autoregressive
    from tevviz.engine.decode.session import DecodeConfig

    cfg = DecodeConfig(sampling=SamplingConfig(temperature=temperature), max_new_tokens=n, seed=seed, stop_on_eos=False)
    return len(autoregressive(pair, ids, cfg).token_ids), None


def tree_run(pair: ModelPair, ids, n: int, temperature: float, builder: BuilderConfig, verifier: str, seed: int,
             cost_model=None):
    s, _ = tree_decode(pair, ids, temperature, builder, verifier, n, seed, cost_model)
    # A speculative round's expected length is its own acceptance's, not the fixed-tree ceiling 1 + C_p.
    ceilings = [r.expected_length for r in s.rounds if r.expected_length is not None]
    return len(s.generated), (sum(r.block_length for r in s.rounds) / len(s.rounds),
                              sum(ceilings) / len(ceilings) if ceilings else float("nan"))


def mean_se(xs: list[float]) -> tuple[float, float]:
    """Mean and its standard error over prompts."""
    if not xs:
        return float("nan"), float("nan")
    return statistics.mean(xs), (statistics.stdev(xs) / len(xs) ** 0.5 if len(xs) > 1 else float("nan"))


MIXED_MODELS = {}  # temperature -> the mixed row's MixedBudget, for its arm counts and rates at the end


def block_decoders(block: ModelPair, args, temp: float) -> dict:
    """A block drafter's rows: DDTree trees under TEV and under predraw (DDTree itself), and --budget auto."""
    n, out = args.max_new_tokens, {}
    kind = drafter_kind_of(block.draft)
    builder, depth = kind.default_builder, kind.model_depth(block.draft) or args.depth
    for b in sorted({args.budget, *args.budgets}):
        tree = BuilderConfig(name=builder, budget=b, depth=depth)
        for v in ("tev", "predraw"):
            out[f"block+{builder}+{v} B={b}"] = lambda ids, i, t=tree, v=v: tree_run(block, ids, n, temp, t, v, i)
    if args.auto:
        from tevviz.engine.cost.auto_budget import AutoBudget

        limit = max({args.budget, *args.budgets})
        auto = BuilderConfig(name=builder, budget=limit, depth=depth, auto=True)
        model = AutoBudget(limit, depth)
        out[f"block+{builder}+tev auto (B<={limit})"] = lambda ids, i: tree_run(block, ids, n, temp, auto, "tev", i,
                                                                             model)
    return out


def decoders_for(pair: ModelPair, args, temp: float, trained: ModelPair | None, block: ModelPair | None) -> dict:
    n = args.max_new_tokens
    chain = BuilderConfig(name="chain", depth=args.depth)
    tree = lambda b: best_first(b, args.depth, args.children)
    out = {
        "autoregressive": lambda ids, i: hf_generate(pair, ids, n, temp),
        "hf-assisted": lambda ids, i: hf_generate(pair, ids, n, temp, assistant=pair.draft),
        "chain+tev": lambda ids, i: tree_run(pair, ids, n, temp, chain, "tev", i),
        "best-first+predraw": lambda ids, i: tree_run(pair, ids, n, temp, tree(args.budget), "predraw", i),
    }
    for k in args.generate_threads:  # `generate` at each thread count: the best of them is the baseline to beat
        out[f"autoregressive threads={k}"] = at_threads(k, lambda ids, i: hf_generate(pair, ids, n, temp))
    if args.prompt_lookup:
        out[f"prompt-lookup N={args.prompt_lookup}"] = lambda ids, i: hf_generate(pair, ids, n, temp,
                                                                                  prompt_lookup=args.prompt_lookup)
    if args.lean:
        del out["chain+tev"], out["best-first+predraw"]
    for b, h in args.trees:
        fixed = best_first(b, h, args.children)
        out[f"best-first+tev B={b} H={h}"] = lambda ids, i, t=fixed: tree_run(pair, ids, n, temp, t, "tev", i)
    if args.fresh_auto:  # as `tevviz decode --budget auto` runs: a new cost model for each prompt
        limit = max({args.budget, *args.budgets})
        fresh = replace(tree(limit), auto=True)
        out[f"best-first+tev auto fresh (B<={limit})"] = lambda ids, i: tree_run(pair, ids, n, temp, fresh, "tev", i)
        if args.sampled_depths:
            h = max(args.sampled_depths)
            chain = BuilderConfig(name="sampled", depth=h, auto=True)
            out[f"sampled+speculative auto fresh (H<={h})"] = lambda ids, i: tree_run(pair, ids, n, temp, chain,
                                                                                      "speculative", i)
    if not args.no_own_loop:
        # tevviz's own token-by-token loop (same sampler, inference mode): the speculative gain net of loop overhead.
        out["autoregressive (tevviz loop)"] = lambda ids, i: own_autoregressive(pair, ids, n, temp, i)
    for b in sorted({args.budget, *args.budgets}):
        out[f"best-first+tev B={b}"] = lambda ids, i, b=b: tree_run(pair, ids, n, temp, tree(b), "tev", i)
    if args.auto:
        from tevviz.engine.cost.auto_budget import AutoBudget

        limit = max({args.budget, *args.budgets})
        auto = replace(tree(limit), auto=True)
        model = AutoBudget(limit, args.depth)  # one cost model per temperature, carried across the prompts
        out[f"best-first+tev auto (B<={limit})"] = lambda ids, i: tree_run(pair, ids, n, temp, auto, "tev", i, model)
    for h in args.sampled_depths:
        sampled = BuilderConfig(name="sampled", depth=h)
        out[f"sampled+speculative H={h}"] = lambda ids, i, b=sampled: tree_run(pair, ids, n, temp, b, "speculative", i)
    if args.auto and args.sampled_depths:
        from tevviz.engine.cost.auto_budget import AutoBudget

        h = max(args.sampled_depths)
        sampled = BuilderConfig(name="sampled", depth=h, auto=True)
        chain_model = AutoBudget(h, h)
        out[f"sampled+speculative auto (H<={h})"] = lambda ids, i: tree_run(pair, ids, n, temp, sampled, "speculative",
                                                                            i, chain_model)
    if args.mixed:
        from tevviz.engine.cost.arm_choice import MixedBudget

        limit = max({args.budget, *args.budgets})
        mixed = replace(tree(limit), name="mixed", auto=True)
        mixed_model = MIXED_MODELS[temp] = MixedBudget(limit, args.depth)
        out[f"mixed auto (B<={limit}, H<={args.depth})"] = lambda ids, i: tree_run(pair, ids, n, temp, mixed, "tev", i,
                                                                                   mixed_model)
    if trained is not None and not args.lean:
        out["best-first+tev+exittrain"] = lambda ids, i: tree_run(trained, ids, n, temp, tree(args.budget), "tev", i)
    if block is not None:
        out |= block_decoders(block, args, temp)
    return out


def parse_args():
    ap = parser(__doc__)
    ap.add_argument("--temperatures", default="0", help="comma-separated; interleaved prompt by prompt")
    tree_flags(ap, budget=16, depth=5)
    ap.add_argument("--budgets", default="", help="further best-first + TEV budgets, comma-separated (a small sweep)")
    ap.add_argument("--exittrain-draft", default=None, help="default: the pair's exit-trained drafter, if shipped")
    ap.add_argument("--sampled-depths", default="",
                    help="sampled chain + speculative verifier rows at these depths, comma-separated (with --auto, "
                         "also one sized by --budget auto up to the largest)")
    ap.add_argument("--no-own-loop", action="store_true", help="leave out the tevviz-loop autoregressive row")
    ap.add_argument("--auto", action="store_true",
                    help="also best-first + TEV with --budget auto up to the largest budget (one cost model per "
                         "temperature, carried across the prompts)")
    ap.add_argument("--mixed", action="store_true",
                    help="also --builder mixed: each round a best-first tree (TEV, up to the largest budget) or a "
                         "sampled chain (speculative), by the rates measured so far (one model per temperature)")
    ap.add_argument("--block", default=None, help="a block drafter folder (DFlash layout): DDTree rows under TEV and "
                    "predraw; 'shipped' takes the pair's shipped block drafter")
    ap.add_argument("--generate-threads", default="",
                    help="also `generate` at each of these thread counts, comma-separated (speed-ups are also given "
                         "against the fastest of them and the main row)")
    ap.add_argument("--prompt-lookup", type=int, default=0,
                    help="also HF prompt lookup decoding (`prompt_lookup_num_tokens`) with this many tokens")
    ap.add_argument("--trees", default="",
                    help="further best-first + TEV rows at B:H settings, comma-separated (e.g. 8:4,16:6)")
    ap.add_argument("--fresh-auto", action="store_true",
                    help="also best-first + TEV --budget auto (and with --sampled-depths, the sampled chain's) with a "
                         "new cost model for each prompt, as `tevviz decode` runs it")
    ap.add_argument("--baselines", action="store_true",
                    help="instead of the rows above: the baselines a user would pick (generate at 1 and torch's "
                         "default threads, sdpa and eager; HF assisted, prompt lookup, early exit) beside tevviz's "
                         "default and --trees (default 8:4,16:6,32:6), each tevviz row with its ideal tokens/s and "
                         "the share of it achieved (baselines.py)")
    ap.add_argument("--chains", default="",
                    help="with --baselines: also sampled chains under speculative sampling, sized by --budget auto up "
                         "to each of these depths, comma-separated")
    ap.add_argument("--tevviz-threads", default="",
                    help="with --baselines: also tevviz's default and --chains rows at each of these thread counts, "
                         "comma-separated (the others run at `tevviz decode`'s)")
    ap.add_argument("--stop-below", type=float, default=0.0,
                    help="with --baselines: also a sampled chain stopped after the first token the draft gives less "
                         "than this probability (HF assisted's rule; BuilderConfig.stop_below), if not the default")
    ap.add_argument("--stop-depth", type=int, default=8, help="with --stop-below: the stopped chain's depth limit")
    ap.add_argument("--early-exit", type=int, default=0,
                    help="with --baselines: the layer early-exit self-speculation drafts from (0: a quarter of the "
                         "target's layers)")
    ap.add_argument("--pass-repeats", type=int, default=7,
                    help="with --baselines: repeats of each pass-cost measurement (before and after the rows)")
    ap.add_argument("--lean", action="store_true",
                    help="leave out the chain + TEV, best-first + predraw and exit-trained rows")
    args = ap.parse_args()
    args.generate_threads = [int(k) for k in args.generate_threads.split(",") if k]
    args.trees = [tuple(int(x) for x in bh.split(":")) for bh in args.trees.split(",") if bh]
    args.budgets = [int(b) for b in args.budgets.split(",") if b]
    args.sampled_depths = [int(h) for h in args.sampled_depths.split(",") if h]
    args.chains = [int(h) for h in args.chains.split(",") if h]
    args.tevviz_threads = [int(k) for k in args.tevviz_threads.split(",") if k]
    return args


def other_drafters(pair: ModelPair, args) -> tuple[ModelPair | None, ModelPair | None]:
    """The pair with its exit-trained drafter (None when there is none) and with --block's block drafter."""
    from tevviz.engine.load.models import with_draft

    shipped = list(named_pair(args.pair or "stdlib").drafter_paths().values())
    own = drafter_kind_of(pair.draft)  # the exit-trained drafter is the next shipped one of the same kind
    drafters = [p for p in shipped if folder_kind(p) is own]
    x_path = args.exittrain_draft or (str(drafters[1]) if len(drafters) > 1 else None)
    block = None
    if args.block:
        ddtree = [p for p in shipped if folder_kind(p).default_builder == "ddtree"]  # a block drafter builds DDTrees
        path = str(ddtree[0]) if args.block == "shipped" and ddtree else args.block
        block = with_draft(pair, path)
    trained = None
    if x_path and Path(x_path).is_dir():
        model = load_model(x_path, "draft", dtype=args.dtype, device=str(pair.device))
        trained = ModelPair(pair.target, model, pair.tokenizer, pair.target_name, x_path)
    else:
        print("no exit-trained drafter; skipping that row")
    return trained, block


def timed_runs(pair: ModelPair, prompts, runs: dict, extras: dict | None = None) -> tuple[dict, dict, dict, dict]:
    """Every decoder on every prompt, interleaved prompt by prompt after one untimed warm-up each: seconds,
    tokens, and the taus and ceilings of those that report them, by (temperature, decoder); what a decoder reports
    beyond them goes to `extras` by the same key, a list over prompts.

    The decoders' order turns from prompt to prompt, each starting the round as often as the prompts allow: a
    row that always ran first after the others measured slower than the same setting run later (the first
    tevviz row after the `generate` and HF rows: 0.83-0.89 of its ideal against 0.88-0.90 for the same setting
    two rows on, lower in 6 of 7 runs, 2026-12-04), whatever setting stood in that place."""
    for decoders in runs.values():  # warm-up, not timed
        for fn in decoders.values():
            fn(prompts[0], 0)
    seconds = {(t, k): 0.0 for t, d in runs.items() for k in d}
    tokens = {key: 0 for key in seconds}
    taus = {key: [] for key in seconds}
    ceilings = {key: [] for key in seconds}
    for i, ids in enumerate(prompts):
        for t, decoders in runs.items():
            order = list(decoders.items())
            turn = i * len(order) // len(prompts)
            for name, fn in order[turn:] + order[:turn]:
                sync(pair.device)
                t0 = time.perf_counter()
                count, stats = fn(ids, i)
                sync(pair.device)
                seconds[t, name] += time.perf_counter() - t0
                tokens[t, name] += count
                if stats is not None:
                    taus[t, name].append(stats[0])
                    ceilings[t, name].append(stats[1])
                    if extras is not None and len(stats) > 2:
                        extras.setdefault((t, name), []).append(stats[2])
        print(f"prompt {i + 1}/{len(prompts)} done", flush=True)
    return seconds, tokens, taus, ceilings


def result_rows(runs: dict, seconds: dict, tokens: dict, taus: dict, ceilings: dict) -> list[dict]:
    """One row per temperature and decoder: tau, ceiling, tokens/s and the speed-ups over plain and assisted."""
    rows = []
    for t, decoders in runs.items():
        ar = tokens[t, "autoregressive"] / seconds[t, "autoregressive"]
        assisted = tokens[t, "hf-assisted"] / seconds[t, "hf-assisted"]
        best = max(tokens[t, k] / seconds[t, k] for k in decoders
                   if k.startswith("autoregressive") and "tevviz" not in k)
        for name in decoders:
            tps = tokens[t, name] / seconds[t, name]
            tau, tau_se = mean_se(taus[t, name])
            ceil, ceil_se = mean_se(ceilings[t, name])
            rows.append({"T": t, "decoder": name, "tau": tau, "tau_se": tau_se, "ceiling": ceil, "ceiling_se": ceil_se,
                         "tokens": tokens[t, name], "seconds": seconds[t, name], "tokens_per_s": tps,
                         "speedup": tps / ar, "vs_best_generate": tps / best, "vs_assisted": tps / assisted})
    return rows


def run_baselines(args, temps: list[float]) -> None:
    """--baselines: the baselines a user would pick beside tevviz's default and best rows, and each tevviz row's
    share of its ideal (baselines.py); one interleaved run, pass costs measured before and after it."""
    pair, prompts = setup(args)
    args.trees = args.trees or [(8, 4), (16, 6), (32, 6)]
    layer, why = baselines.early_exit_layer(pair.target, args.early_exit)
    print(f"early-exit self-speculation: {why}" if layer else f"early-exit self-speculation skipped: {why}")
    eager = baselines.eager_target(pair, args.dtype)
    args.hf_threads, rates = baselines.fastest_threads(pair, prompts[0], args.max_new_tokens)
    print(f"generate on the first prompt, tokens/s by thread count: {rates}; HF speculative rows at {args.hf_threads}")
    meta = {t: {} for t in temps}
    runs = {t: baselines.decoders(pair, eager, args, t, meta[t]) for t in temps}
    measure = lambda: baselines.measured_pass_costs(pair, prompts, args.max_new_tokens, args.pass_repeats)
    before, extras = measure(), {}
    measured = timed_runs(pair, prompts, runs, extras)
    after = measure()
    costs = baselines.cheaper_costs(before, after)
    rows, best = baselines.result_rows(runs, meta, *measured, extras, costs, baselines.decode_threads(pair))
    print(f"{len(prompts)} prompts x {args.max_new_tokens} tokens  device {pair.device}  pair {pair.target_name} / "
          f"{pair.draft_name}  tevviz rows at {baselines.decode_threads(pair)} thread(s)")
    print(table(rows, ["T", "decoder", "threads", "attn", "tau", "tokens_per_s", "vs_best_generate", "vs_best_plain",
                       "ideal_tokens_per_s", "share_of_ideal"]))
    for t, b in best.items():
        print(f"{t}: best generate: {b['best_generate']}; best plain: {b['best_plain']}; "
              f"fastest tevviz row: {b['best_tevviz']}")
    name = args.pair or ("custom" if args.target else "stdlib")
    write(f"end_to_end_baselines_{name}", args, {"rows": rows, "best": best, "early_exit": why, "thread_probe": rates,
                                                  "pass_costs": {"target_ms": costs.target_ms,
                                                                 "draft_ms": costs.draft_ms,
                                                                 "before": vars(before), "after": vars(after)}})


def main() -> None:
    args = parse_args()
    temps = [float(t) for t in args.temperatures.split(",")]
    if args.baselines:
        run_baselines(args, temps)
        return
    pair, prompts = setup(args)
    trained, block = other_drafters(pair, args)
    runs = {t: decoders_for(pair, args, t, trained, block) for t in temps}
    rows = result_rows(runs, *timed_runs(pair, prompts, runs))
    print(f"B={args.budget} (sweep {args.budgets})  H={args.depth}  {len(prompts)} prompts x {args.max_new_tokens} "
          f"tokens  device {pair.device}  pair {pair.target_name} / {pair.draft_name}")
    print(table(rows, ["T", "decoder", "tau", "tau_se", "ceiling", "ceiling_se", "tokens_per_s", "speedup",
                       "vs_best_generate", "vs_assisted"]))
    mixed = {f"T{t:g}": {"sized_rounds": dict(m.sized), **m.summary()} for t, m in MIXED_MODELS.items()}
    for t, m in mixed.items():
        print(f"mixed at {t}: sized rounds by arm {m['sized_rounds']}, expected tokens per ms: trees "
              f"{m['tree_rate']:.3f}, chains {m['chain_rate']:.3f}")
    go, fig = plotly_go(), None
    if go is not None:
        fig = go.Figure([go.Bar(name=f"T={t:g}", x=[r["decoder"] for r in rows if r["T"] == t],
                                y=[r["speedup"] for r in rows if r["T"] == t]) for t in temps])
        fig.update_layout(title="Speed-up over autoregressive generate", yaxis_title="x")
    write(f"end_to_end_{args.pair or 'stdlib'}", args, {"rows": rows, **({"mixed": mixed} if mixed else {})}, fig)

if __name__ == "__main__":
    main()
