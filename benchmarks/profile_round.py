"""Where a decoding round's time goes: stage times, the top functions under cProfile, and the app's render cost.

Model forwards (linear, attention, norms) should dominate; everything else is engine overhead. The render line is
what the app adds per Step after the round: the tree figure of the round and the three session statistics figures,
built and serialised to JSON (as gr.Plot sends them).
"""

from __future__ import annotations

import cProfile
import pstats
import statistics
import time

from common import best_first, parser, setup, table, tree_flags, write

from tevviz.engine.analysis.summary import summarize
from tevviz.engine.core.sampling import SamplingConfig
from tevviz.engine.decode.session import DecodeConfig, DecodeSession
from tevviz.render import acceptance_by_depth_figure, block_length_histogram, stage_times_figure, tree_figure

MODEL_FILES = ("modeling_", "torch/nn/", "sdpa_attention", "masking_utils", "cache_utils", "integrations")
RENDER_ROUNDS = 30  # rounds whose figures the render line times


def _ms(fn) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn()
    return 1e3 * (time.perf_counter() - t0), out


def render_cost(rounds: list) -> dict[str, float]:
    """Median ms per round: tree figure and session figures (over the rounds so far), each built and to JSON."""
    times: dict[str, list[float]] = {"tree": [], "tree_json": [], "stats": [], "stats_json": []}
    for i, r in enumerate(rounds[:RENDER_ROUNDS]):
        ms, fig = _ms(lambda r=r: tree_figure(r.to_dict(), "P", title=f"round {r.index}"))
        times["tree"].append(ms)
        times["tree_json"].append(_ms(fig.to_json)[0])
        so_far = rounds[: i + 1]
        ms, figs = _ms(lambda s=so_far: [f(s) for f in (stage_times_figure, block_length_histogram,
                                                         acceptance_by_depth_figure)])
        times["stats"].append(ms)
        times["stats_json"].append(_ms(lambda figs=figs: [f.to_json() for f in figs])[0])
    return {k: statistics.median(v) for k, v in times.items()}


def main() -> None:
    ap = parser(__doc__)
    tree_flags(ap, budget=64, depth=8)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--missing-top", type=int, default=0, help="5 = what the app records per node")
    ap.add_argument("--top", type=int, default=20)
    args = ap.parse_args()
    pair, prompts = setup(args)
    builder = best_first(args.budget, args.depth, args.children)

    def decode_all():
        rounds = []
        for i, ids in enumerate(prompts):
            cfg = DecodeConfig(sampling=SamplingConfig(temperature=args.temperature), builder=builder, verifier="tev",
                               max_new_tokens=args.max_new_tokens, seed=i, stop_on_eos=False,
                               missing_top=args.missing_top)
            s = DecodeSession(pair, ids, cfg)
            s.run()
            rounds += s.rounds
        return rounds

    decode_all()  # warm-up
    t0 = time.perf_counter()
    rounds = decode_all()
    wall = time.perf_counter() - t0
    s = summarize(rounds)
    per_round = {k: v / s["rounds"] for k, v in s["stage_ms"].items()}
    prof = cProfile.Profile()
    prof.enable()
    decode_all()
    prof.disable()
    stats = pstats.Stats(prof)
    model_s = sum(v[2] for k, v in stats.stats.items() if any(m in k[0] for m in MODEL_FILES) or k[0] == "~")
    total_s = sum(v[2] for v in stats.stats.values())
    top = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)[: args.top]
    rows = [{"function": f"{k[0].split('/')[-1]}:{k[1]}({k[2]})"[:70], "calls": v[1], "tottime_s": v[2]}
            for k, v in top]
    print(f"{s['rounds']} rounds, tau {s['tau']:.2f}, {wall * 1e3 / s['rounds']:.1f} ms per round (wall)")
    print("per-round stage ms: " + "  ".join(f"{k} {v:.2f}" for k, v in per_round.items()))
    print(table(rows, ["function", "calls", "tottime_s"]))
    print(f"share of profiled time in model code and C ops: {model_s / total_s:.1%}")
    render = render_cost(rounds)
    sizes = sorted(r.size for r in rounds[:RENDER_ROUNDS])
    print(f"render (median of {len(sizes)} rounds, {sizes[len(sizes) // 2]} nodes): tree figure "
          f"{render['tree']:.1f} ms + JSON {render['tree_json']:.1f} ms; three statistics figures "
          f"{render['stats']:.1f} ms + JSON {render['stats_json']:.1f} ms")
    write("profile_round", args, {"rounds": s["rounds"], "tau": s["tau"], "ms_per_round": wall * 1e3 / s["rounds"],
                                  "stage_ms_per_round": per_round, "top": rows, "model_share": model_s / total_s,
                                  "render_ms": render})


if __name__ == "__main__":
    main()
