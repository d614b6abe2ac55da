"""Verifier comparison speed: draws per second of each compared verifier on one real round's tree.

The app's Verifier comparison tab re-scores the shown round's tree once, then draws every verifier M times
and tests the empirical exit law against w. This script decodes one round of the first prompt at the given
temperature (the app's default tree, B = 32, H = 6), then times `compare_verifiers` on it: each verifier alone
(draws per second) and all of them together (the wall time of one click). `--per-draw` times the reference
loop of one verifier call per draw, what the comparison ran before its draws were batched.
"""

from __future__ import annotations

import inspect
import time

from common import best_first, parser, setup, sync, table, write

from tevviz.engine.core.sampling import SamplingConfig
from tevviz.engine.decode.session import DecodeConfig, DecodeSession
from tevviz.engine.verify.comparison import COMPARED_VERIFIERS, compare_verifiers


def one_round(pair, ids: list[int], temperature: float, budget: int, depth: int):
    """(prefix, record) of the first round of `ids`: the tree the comparison re-scores."""
    cfg = DecodeConfig(sampling=SamplingConfig(temperature=temperature), builder=best_first(budget, depth),
                       max_new_tokens=64, seed=0, missing_top=0)
    s = DecodeSession(pair, ids, cfg)
    prefix = s.tokens[:-1]
    return prefix, s.step()


def timed_comparison(pair, prefix, record, sampling, draws: int, names, per_draw: bool) -> tuple[float, object]:
    """Seconds of one `compare_verifiers` call (re-scoring included) and its result."""
    kw = {"batched": False} if per_draw and "batched" in inspect.signature(compare_verifiers).parameters else {}
    sync(pair.device)
    t0 = time.perf_counter()
    c = compare_verifiers(pair, prefix, record, sampling, draws, seed=0, names=names, **kw)
    sync(pair.device)
    return time.perf_counter() - t0, c


def main() -> None:
    ap = parser(__doc__.splitlines()[0])
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--budget", type=int, default=32)
    ap.add_argument("--depth", type=int, default=6)
    ap.add_argument("--draws", type=int, default=2000, help="M draws per verifier (the app's default)")
    ap.add_argument("--per-draw", action="store_true", help="time the loop of one verifier call per draw")
    ap.add_argument("--label", default=None, help="name of this run in the JSON file (default: batched or per-draw)")
    args = ap.parse_args()
    pair, prompts = setup(args)
    prefix, record = one_round(pair, prompts[0], args.temperature, args.budget, args.depth)
    sampling = SamplingConfig(temperature=args.temperature)
    mode = "per-draw" if args.per_draw else "batched"
    timed_comparison(pair, prefix, record, sampling, 20, COMPARED_VERIFIERS, args.per_draw)  # warm-up
    rows = []
    for name in COMPARED_VERIFIERS:
        seconds, c = timed_comparison(pair, prefix, record, sampling, args.draws, (name,), args.per_draw)
        law = c.laws[0]
        rows.append({"verifier": name, "draws": c.draws, "seconds": seconds, "draws_per_s": c.draws / seconds,
                     "us_per_draw": law.us_per_draw, "tv": law.tv, "p": law.p})
    seconds, c = timed_comparison(pair, prefix, record, sampling, args.draws, COMPARED_VERIFIERS, args.per_draw)
    rows.append({"verifier": "all three (one click)", "draws": c.draws, "seconds": seconds,
                 "draws_per_s": c.draws / seconds})
    print(f"{pair.target_name}: round 0 of the first {args.split} prompt, {record.size} nodes, "
          f"T = {args.temperature:g}, {mode}")
    print(table(rows, ["verifier", "draws", "seconds", "draws_per_s", "us_per_draw", "tv", "p"]))
    write(f"comparison_draws_{args.label or mode}", args,
          {"mode": mode, "nodes": record.size, "vocab": pair.target.get_output_embeddings().weight.shape[0],
           "rows": rows})


if __name__ == "__main__":
    main()
