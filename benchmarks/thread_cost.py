"""A decoding round on the main thread against the same round on another thread (the app's reason for its model thread).

The same prompts, settings and seeds are decoded alternately on the main thread and on a fresh worker thread, as
Gradio would run a handler; the table gives the median round and its stages on each, and their ratio. On a CPU
build of torch, MKL's matmuls run single-threaded off the main thread (tevviz/app/model_thread.py).
"""

from __future__ import annotations

import statistics
from concurrent.futures import ThreadPoolExecutor

from common import best_first, parser, setup, table, tree_flags, write

from tevviz.engine.core.sampling import SamplingConfig
from tevviz.engine.decode.session import DecodeConfig, DecodeSession


def main() -> None:
    ap = parser(__doc__)
    tree_flags(ap, budget=64, depth=8)
    ap.add_argument("--passes", type=int, default=3, help="alternations of main thread and worker thread")
    args = ap.parse_args()
    pair, prompts = setup(args)
    builder = best_first(args.budget, args.depth, args.children)

    def decode_all() -> list:
        rounds = []
        for i, ids in enumerate(prompts):
            cfg = DecodeConfig(sampling=SamplingConfig(), builder=builder, verifier="tev",
                               max_new_tokens=args.max_new_tokens, seed=i, stop_on_eos=False)
            rounds += DecodeSession(pair, ids, cfg).run()
        return rounds

    decode_all()  # warm-up
    where = {"main": [], "worker": []}
    for _ in range(args.passes):
        where["main"] += decode_all()
        with ThreadPoolExecutor(1) as pool:  # a fresh thread each pass, as a handler may land on any pool thread
            where["worker"] += pool.submit(decode_all).result()
    rows = []
    for name, rounds in where.items():
        stages = {k: statistics.median(r.stage_ms[k] for r in rounds) for k in rounds[0].stage_ms}
        rows.append({"thread": name, "rounds": len(rounds),
                     "round_ms": statistics.median(sum(r.stage_ms.values()) for r in rounds),
                     **{f"{k}_ms": v for k, v in stages.items()}})
    for row in rows:
        row["vs_main"] = row["round_ms"] / rows[0]["round_ms"]
    print(table(rows, list(rows[0])))
    write("thread_cost", args, {"rows": rows})


if __name__ == "__main__":
    main()
