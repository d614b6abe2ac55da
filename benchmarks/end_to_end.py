"""End to end on the eval prompts: tokens/s and tau of each decoder, speed-up over autoregressive.

Decoders: plain autoregressive (`target.generate`, and tevviz's own token loop), HF assisted generation
(`target.generate(assistant_model=draft)`), chain speculative decoding, best-first + predraw (the
DDTree configuration), best-first + TEV, and best-first + TEV with the exit-trained drafter. Runs
are interleaved prompt by prompt (each decoder once per prompt in turn) after one warm-up pass.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import torch
from common import best_first, parser, setup, sync, table, tree_decode, tree_flags, write

from tevviz.engine.builders import BuilderConfig
from tevviz.engine.models import ModelPair, assets_dir, load_model


def hf_generate(pair: ModelPair, ids, n: int, temperature: float, assistant=None):
    kw = {"max_new_tokens": n, "min_new_tokens": n, "do_sample": temperature > 0,
          "pad_token_id": pair.tokenizer.eos_token_id}
    if temperature > 0:
        kw.update(temperature=temperature, top_k=0, top_p=1.0)
    if assistant is not None:
        kw["assistant_model"] = assistant
    x = torch.tensor([ids], device=pair.device)
    out = pair.target.generate(x, **kw)
    return out.shape[1] - len(ids), None


def own_autoregressive(pair: ModelPair, ids, n: int, temperature: float, seed: int):
    from tevviz.engine.sampling import SamplingConfig
    from tevviz.engine.session import DecodeConfig, autoregressive

    cfg = DecodeConfig(sampling=SamplingConfig(temperature=temperature), max_new_tokens=n, seed=seed, stop_on_eos=False)
    return len(autoregressive(pair, ids, cfg).token_ids), None


def tree_run(pair: ModelPair, ids, n: int, temperature: float, builder: BuilderConfig, verifier: str, seed: int):
    s, _ = tree_decode(pair, ids, temperature, builder, verifier, n, seed)
    return len(s.generated), sum(r.block_length for r in s.rounds) / len(s.rounds)


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--temperature", type=float, default=0.0)
    tree_flags(ap, budget=16, depth=5)
    ap.add_argument("--exittrain-draft", default=str(assets_dir() / "models" / "tevviz-stdlib-draft-exittrain"))
    args = ap.parse_args()
    pair, prompts = setup(args)
    n, temp = args.max_new_tokens, args.temperature
    best = best_first(args.budget, args.depth)
    chain = BuilderConfig(kind="chain", depth=args.depth)
    decoders = {
        "autoregressive": lambda ids, i: hf_generate(pair, ids, n, temp),
        # tevviz's own token-by-token loop (same sampler, inference mode): the speculative gain net of loop overhead.
        "autoregressive (tevviz loop)": lambda ids, i: own_autoregressive(pair, ids, n, temp, i),
        "hf-assisted": lambda ids, i: hf_generate(pair, ids, n, temp, assistant=pair.draft),
        "chain+tev": lambda ids, i: tree_run(pair, ids, n, temp, chain, "tev", i),
        "best-first+predraw": lambda ids, i: tree_run(pair, ids, n, temp, best, "predraw", i),
        "best-first+tev": lambda ids, i: tree_run(pair, ids, n, temp, best, "tev", i),
    }
    if Path(args.exittrain_draft).is_dir():
        trained = load_model(args.exittrain_draft, "draft", dtype=args.dtype, device=str(pair.device))
        pair_x = ModelPair(pair.target, trained, pair.tokenizer, pair.target_name, args.exittrain_draft)
        decoders["best-first+tev+exittrain"] = lambda ids, i: tree_run(pair_x, ids, n, temp, best, "tev", i)
    else:
        print(f"no exit-trained drafter at {args.exittrain_draft}; skipping that row")
    for name, fn in decoders.items():  # warm-up, not timed
        fn(prompts[0], 0)
    seconds = {k: 0.0 for k in decoders}
    tokens = {k: 0 for k in decoders}
    taus = {k: [] for k in decoders}
    for i, ids in enumerate(prompts):
        for name, fn in decoders.items():
            sync(pair.device)
            t0 = time.perf_counter()
            count, tau = fn(ids, i)
            sync(pair.device)
            seconds[name] += time.perf_counter() - t0
            tokens[name] += count
            if tau is not None:
                taus[name].append(tau)
    ar = tokens["autoregressive"] / seconds["autoregressive"]
    rows = []
    for name in decoders:
        tps = tokens[name] / seconds[name]
        rows.append({"decoder": name, "tau": statistics.mean(taus[name]) if taus[name] else float("nan"),
                     "tokens": tokens[name], "seconds": seconds[name], "tokens_per_s": tps, "speedup": tps / ar})
    print(f"T={temp:g}  B={args.budget}  H={args.depth}  {len(prompts)} prompts x {n} tokens  device {pair.device}")
    print(table(rows, ["decoder", "tau", "tokens", "seconds", "tokens_per_s", "speedup"]))
    import plotly.graph_objects as go

    fig = go.Figure(go.Bar(x=[r["decoder"] for r in rows], y=[r["speedup"] for r in rows]))
    fig.update_layout(title=f"Speed-up over autoregressive (T={temp:g})", yaxis_title="x")
    write(f"end_to_end_T{temp:g}", args, {"rows": rows}, fig)


if __name__ == "__main__":
    main()
