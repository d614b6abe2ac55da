"""The baselines a user would pick, and each tevviz row's limit, for `end_to_end.py --baselines`.

Rows, interleaved prompt by prompt like every end_to_end run: `generate` at one thread and at torch's default thread
count, each with sdpa and eager attention (the fastest of the four is the plain baseline), and with sdpa and the
target's linear layers as tevviz's passes run them on a CPU (core/few_rows.py; `vs_best_plain` is against the fastest
plain row of all, so that what speculation adds is read apart from the cheaper pass); HF assisted generation with
the pair's drafter, prompt lookup (`prompt_lookup_num_tokens`) and early-exit self-speculation (`assistant_early_exit`,
where the target's decoder slices its layers by `config.num_hidden_layers`, which is how transformers exits early),
at the thread count where `generate` was faster on the first prompt (timed before the run); tevviz's default for the
pair and temperature (`tevviz decode`'s, engine/load/pairs.py) and best-first + TEV at each --trees setting, at `tevviz
decode`'s thread count, a new cost model per prompt.

For each tevviz row, the ideal: the tokens/s its own rounds would reach if a round cost only its forwards at the pass
costs measured in the same run (pass_cost.py's model, engine/analysis/speed.py), and the share of it achieved.
"""

from __future__ import annotations

import inspect
import time

import torch
from common import best_first, tree_decode

from tevviz.engine.analysis.speed import PassCosts, ideal_speed
from tevviz.engine.core.few_rows import few_rows
from tevviz.engine.decode.pass_costs import draft_level_ms, target_pass_ms
from tevviz.engine.decode.start import decode_start
from tevviz.engine.decode.thread_choice import settle
from tevviz.engine.draft.builders import BuilderConfig
from tevviz.engine.draft.drafters import drafter_kind_of
from tevviz.engine.load.models import ModelPair, load_model
from tevviz.engine.load.pairs import AUTO_LIMIT, pair_of_target
from tevviz.engine.load.threads import TORCH_DEFAULT_THREADS

TARGET_SIZES = (1, 2, 3, 4, 5, 6, 9, 13, 17, 25, 33, 49, 65)  # tokens per target pass priced (tree sizes)
DRAFT_ROWS = (1, 2, 4, 8, 16)  # rows per draft forward priced (a level's kept nodes)


def hf_generate(target, pair: ModelPair, ids, n: int, temperature: float, **extra):
    """One `generate` of exactly n new tokens (sampled at `temperature` with top-k and top-p off, else greedy)."""
    kw = {"max_new_tokens": n, "min_new_tokens": n, "do_sample": temperature > 0,
          "pad_token_id": pair.tokenizer.eos_token_id, **extra}
    if temperature > 0:
        kw.update(temperature=temperature, top_k=0, top_p=1.0)
    out = target.generate(torch.tensor([ids], device=pair.device), **kw)
    return out.shape[1] - len(ids), None


def few_row_generate(pair: ModelPair, ids, n: int, temperature: float):
    """`hf_generate` with the target's linear layers as tevviz's target pass runs them (core/few_rows.py)."""
    with few_rows(pair.target):
        return hf_generate(pair.target, pair, ids, n, temperature)


def at_threads(threads: int, fn):
    """`fn` run with torch at `threads` intra-op threads (the others' count restored after)."""
    def run(*a):
        before = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            return fn(*a)
        finally:
            torch.set_num_threads(before)
    return run


def early_exit_layer(target, requested: int) -> tuple[int | None, str]:
    """The layer an early-exit draft leaves the target at (`requested`, else a quarter of its layers), or None and
    why the model does not allow it."""
    base = getattr(target, target.base_model_prefix, None)
    layers = getattr(target.config, "num_hidden_layers", None)
    if base is None or not isinstance(layers, int):
        return None, "the target has no base model with num_hidden_layers"
    try:
        sliced = "num_hidden_layers]" in inspect.getsource(type(base).forward)
    except (OSError, TypeError):
        sliced = False
    if not sliced:
        return None, (f"{type(base).__name__}.forward runs all its layers whatever config.num_hidden_layers says, "
                      "so transformers' early exit would draft with the full model")
    layer = requested or max(1, layers // 4)
    if not 1 <= layer < layers:
        return None, f"--early-exit {layer} is not below the target's {layers} layers"
    return layer, f"layer {layer} of {layers}"


def thread_counts() -> list[int]:
    """One thread and torch's default count (once where they are the same)."""
    return sorted({1, TORCH_DEFAULT_THREADS})


def fastest_threads(pair: ModelPair, ids: list[int], n: int) -> tuple[int, dict[int, float]]:
    """The thread count at which `generate` (greedy, sdpa) is fastest on `ids`, timed twice each after a warm-up,
    and its tokens/s at each: the HF speculative rows run at it (timing them at every count too would double the
    slowest rows of a busy machine)."""
    rates = {}
    for k in thread_counts():
        run = at_threads(k, lambda: hf_generate(pair.target, pair, ids, n, 0.0))
        run()
        t0 = time.perf_counter()
        run(), run()
        rates[k] = 2 * n / (time.perf_counter() - t0)
    return max(rates, key=rates.get), rates


_DECODE_THREADS: dict[int, int] = {}


def decode_threads(pair: ModelPair) -> int:
    """The thread count `tevviz decode` runs `pair` at by default (engine/decode/thread_choice.py: measured, kept per
    machine and target), chosen once a run; torch's own count is left as it was."""
    key = id(pair.target)
    if key not in _DECODE_THREADS:
        before = torch.get_num_threads()
        _DECODE_THREADS[key] = settle(pair, None).threads
        torch.set_num_threads(before)
    return _DECODE_THREADS[key]


def default_tree(pair: ModelPair, temperature: float) -> tuple[BuilderConfig, str]:
    """`tevviz decode`'s settings for this pair and temperature, as a BuilderConfig, and the verifier."""
    kind = drafter_kind_of(pair.draft)
    start = decode_start(pair_of_target(pair.target_name), temperature, kind, kind.model_depth(pair.draft))
    auto = start.budget == "auto"
    return BuilderConfig(name=start.builder, budget=AUTO_LIMIT if auto else start.budget, depth=start.depth,
                         auto=auto, stop_below=start.stop_below), start.verifier


def tevviz_run(pair: ModelPair, n: int, temperature: float, builder: BuilderConfig, verifier: str):
    """A tevviz row: (tokens, (tau, ceiling, (rounds, prompt length))), the rounds kept for the ideal's price."""
    def run(ids, i):
        s, _ = tree_decode(pair, ids, temperature, builder, verifier, n, i)
        ceilings = [r.expected_length for r in s.rounds if r.expected_length is not None]
        tau = sum(r.block_length for r in s.rounds) / len(s.rounds)
        return len(s.generated), (tau, sum(ceilings) / len(ceilings) if ceilings else float("nan"),
                                  (s.rounds, len(ids)))
    return run


def decoders(pair: ModelPair, eager, args, temperature: float, meta: dict) -> dict:
    """Every row at one temperature, by name; `meta` gets each row's kind, threads and attention."""
    n, out = args.max_new_tokens, {}

    def add(name, fn, kind, threads, attn="sdpa"):
        out[name] = at_threads(threads, fn)
        meta[name] = {"kind": kind, "threads": threads, "attn": attn}

    for k in thread_counts():
        for attn, target in (("sdpa", pair.target), ("eager", eager)):
            add(f"generate {attn} threads={k}", lambda ids, i, m=target: hf_generate(m, pair, ids, n, temperature),
                "generate", k, attn)
        # Plain decoding with tevviz's few-row linear layers (the cheaper step tevviz's own passes take): what
        # speculation adds beyond the cheaper pass is measured against this one.
        add(f"generate sdpa threads={k}, few-row layers", lambda ids, i: few_row_generate(pair, ids, n, temperature),
            "plain", k)
    layer, _ = early_exit_layer(pair.target, args.early_exit)  # the run says why where it is None
    hf = {"hf-assisted": {"assistant_model": pair.draft},
          f"prompt-lookup N={args.prompt_lookup or 10}": {"prompt_lookup_num_tokens": args.prompt_lookup or 10}}
    if layer is not None:
        hf[f"early-exit layer={layer}"] = {"assistant_early_exit": layer}
    for name, extra in hf.items():
        add(f"{name} threads={args.hf_threads}", lambda ids, i, e=extra: hf_generate(pair.target, pair, ids, n,
                                                                                    temperature, **e), "hf",
            args.hf_threads)
    threads = decode_threads(pair)
    tree, verifier = default_tree(pair, temperature)
    stop = f" stop<{tree.stop_below:g}" if tree.stop_below else ""
    default = f"tevviz default ({tree.name}+{verifier}{' auto' if tree.auto else ''}{stop} H<={tree.depth})"
    add(default, tevviz_run(pair, n, temperature, tree, verifier), "tevviz", threads)
    for b, h in args.trees:
        add(f"tevviz best-first+tev B={b} H={h}", tevviz_run(pair, n, temperature, best_first(b, h), "tev"), "tevviz",
            threads)
    chains = {}
    for h in getattr(args, "chains", []):
        chains[h] = BuilderConfig(name="sampled", budget=AUTO_LIMIT, depth=h, auto=True)
        add(f"tevviz sampled+speculative auto H<={h}", tevviz_run(pair, n, temperature, chains[h], "speculative"),
            "tevviz", threads)
    stopped = BuilderConfig(name="sampled", depth=args.stop_depth, stop_below=getattr(args, "stop_below", 0))
    if stopped.stop_below and stopped != tree:  # chains stopped as HF's assistant stops (the default may be one)
        add(f"tevviz sampled stop<{stopped.stop_below:g} H<={stopped.depth}",
            tevviz_run(pair, n, temperature, stopped, "speculative"), "tevviz", threads)
    # The default and the chains again at other thread counts, beside `generate` at its best one.
    for k in [k for k in getattr(args, "tevviz_threads", []) if k != threads]:
        add(f"{default} threads={k}", tevviz_run(pair, n, temperature, tree, verifier), "tevviz", k)
        for h, chain in chains.items():
            add(f"tevviz sampled+speculative auto H<={h} threads={k}",
                tevviz_run(pair, n, temperature, chain, "speculative"), "tevviz", k)
    return out


def cheaper_costs(a: PassCosts, b: PassCosts) -> PassCosts:
    """The cheaper of two measurements of each size (taken before and after the timed rows): the ideal is what the
    machine did at its best, and one measurement can be slowed by the machine (an inflated pass cost lifted a row's
    share of its ideal past 1 when the two were averaged)."""
    return PassCosts({n: min(a.target_ms[n], b.target_ms[n]) for n in a.target_ms},
                     {n: min(a.draft_ms[n], b.draft_ms[n]) for n in a.draft_ms})


def measured_pass_costs(pair: ModelPair, prompts: list[list[int]], max_new_tokens: int, repeats: int) -> PassCosts:
    """Target and draft forward ms at the tree sizes, draft rows and prompt lengths this run meets, on top of a
    context of the mean prompt plus half the new tokens, at `tevviz decode`'s thread count."""
    longest = max(len(p) for p in prompts)
    context = sum(len(p) for p in prompts) // len(prompts) + max_new_tokens // 2
    ids = [t for p in prompts for t in p]
    while len(ids) < context + longest:
        ids = ids + ids
    ctx = torch.tensor([ids[:context]], device=pair.device)
    block = torch.tensor([ids[context: context + longest + 1]], device=pair.device)
    sizes = sorted({*TARGET_SIZES, longest})
    rows = sorted({*DRAFT_ROWS, longest})
    block = block if block.shape[1] >= max(sizes) else torch.cat([block] * (max(sizes) // block.shape[1] + 1), 1)

    def measure():
        # The draft's levels timed through the step decoding drafts with (its written-out forward where it takes one).
        return target_pass_ms(pair.target, ctx, block, sizes, repeats), draft_level_ms(pair, ctx, block, rows, repeats)

    target, draft = at_threads(decode_threads(pair), measure)()
    if draft is None:
        raise SystemExit("--baselines prices the levels of a causal-LM drafter only (the ideal of a block drafter or "
                         "an EAGLE-3 head is not modelled)")
    return PassCosts(target, draft)


def ideal_of(extras: list, costs: PassCosts, seconds: float) -> dict:
    """A tevviz row's ideal from its prompts' rounds and prompt lengths (each prompt's prefill priced as one target
    pass over the prompt and one draft forward over it) against its measured seconds."""
    rounds = [r for rs, _ in extras for r in rs]
    speed = ideal_speed(rounds, costs, seconds)
    prefill = sum(costs.target(max(n - 1, 1)) + costs.draft(n) for _, n in extras)
    ideal_ms = speed.ideal_ms + prefill
    return {"ideal_tokens_per_s": 1e3 * speed.tokens / ideal_ms, "share_of_ideal": ideal_ms / speed.measured_ms,
            "ideal_ms": ideal_ms, "prefill_ms": prefill}


def result_rows(runs: dict, meta: dict, seconds: dict, tokens: dict, taus: dict, ceilings: dict, extras: dict,
                costs: PassCosts, threads: int) -> tuple[list[dict], dict]:
    """One row per temperature and decoder, against the fastest `generate` and the fastest plain decoding of all
    (`generate` with few-row layers too); and per temperature which rows were the fastest of each kind."""
    rows, best = [], {}
    for t, names in runs.items():
        tps = {k: tokens[t, k] / seconds[t, k] for k in names}
        plain = max((k for k in names if meta[t][k]["kind"] == "generate"), key=tps.get)
        any_plain = max((k for k in names if meta[t][k]["kind"] in ("generate", "plain")), key=tps.get)
        fastest = {kind: max((k for k in names if meta[t][k]["kind"] == kind), key=tps.get)
                   for kind in ("generate", "tevviz")}
        best[f"T{t:g}"] = {"best_generate": plain, "best_plain": any_plain, "best_tevviz": fastest["tevviz"]}
        for k in names:
            row = {"T": t, "decoder": k, **meta[t][k], "tokens": tokens[t, k], "seconds": seconds[t, k],
                   "tokens_per_s": tps[k], "vs_best_generate": tps[k] / tps[plain],
                   "vs_best_plain": tps[k] / tps[any_plain]}
            if taus[t, k]:
                row |= {"tau": sum(taus[t, k]) / len(taus[t, k]),
                        "ceiling": sum(ceilings[t, k]) / len(ceilings[t, k])}
            if extras.get((t, k)) and meta[t][k]["threads"] == threads:  # priced at that count only
                row |= ideal_of(extras[t, k], costs, seconds[t, k])
            rows.append(row)
    return rows, best


def eager_target(pair: ModelPair, dtype: str):
    """A second copy of the target with eager attention (the pair's own keeps sdpa for the other rows)."""
    return load_model(pair.target_name, "target", dtype=dtype, device=str(pair.device), attn_implementation="eager")
