"""Figures of the embedded pair for its model card: forward-cost ratio, tau and 1 + C_p, speed-up.

Held-out cross-entropy, top-1 accuracy and agreement come from assets/models/training_log.json
(written by `tevviz pair train-target stdlib`); this script measures the rest with the engine.
"""

from __future__ import annotations

import json
import time

import torch
from common import best_first, parser, setup, table, tree_decode, write

from tevviz.engine.decode.plain import autoregressive
from tevviz.engine.load.models import assets_dir
from tevviz.engine.train.evaluation import evaluate


@torch.no_grad()
def forward_ms(model, tokens: int, cached: int = 256, repeats: int = 30) -> float:
    """Median ms of one forward of `tokens` new tokens on top of a `cached`-token cache."""
    from tevviz.engine.core.kv import keep_entries, new_cache

    times = []
    for _ in range(repeats):
        cache = new_cache(model)
        model(input_ids=torch.zeros(1, cached, dtype=torch.long, device=model.device), cache=cache, use_cache=True)
        t0 = time.perf_counter()
        model(input_ids=torch.ones(1, tokens, dtype=torch.long, device=model.device), cache=cache, use_cache=True)
        times.append(time.perf_counter() - t0)
        keep_entries(cache, 0, [0], cache.get_seq_length())
    return 1e3 * sorted(times)[len(times) // 2]


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    args = ap.parse_args()
    pair, prompts = setup(args)
    out: dict = {}
    log = assets_dir() / "models" / "training_log.json"
    if log.is_file():
        out["training"] = json.loads(log.read_text())
    out["forward_ms"] = {
        f"{name} {q} tok": forward_ms(m, q)
        for name, m in (("target", pair.target), ("draft", pair.draft))
        for q in (1, 33, 65)
    }
    out["target_over_draft_1tok"] = out["forward_ms"]["target 1 tok"] / out["forward_ms"]["draft 1 tok"]
    rows = []
    for budget in (32, 64):
        builder = best_first(budget, 8)
        for temp in (0.0, 1.0):
            r = evaluate(pair, prompts, temp, builder, args.max_new_tokens)
            # Throughput against plain autoregressive decoding, same prompts, measured back to back.
            tree_s = base_s = 0.0
            tree_n = base_n = 0
            for i, ids in enumerate(prompts):
                s, seconds = tree_decode(pair, ids, temp, builder, "tev", args.max_new_tokens, i)
                tree_s += seconds
                tree_n += len(s.generated)
                b = autoregressive(pair, ids, s.cfg)
                base_s += b.seconds
                base_n += len(b.token_ids)
            rows.append({"B": budget, "T": temp, "tau": r.tau, "tau_se": r.tau_se, "E[L]": r.expected_length,
                         "tree_tok_s": tree_n / tree_s, "ar_tok_s": base_n / base_s,
                         "speedup": (tree_n / tree_s) / (base_n / base_s)})
            print(table([rows[-1]], list(rows[-1])), flush=True)
    print(json.dumps(out["forward_ms"], indent=1))
    print(f"target/draft forward cost (1 token on a 256-token cache): {out['target_over_draft_1tok']:.2f}x")
    print(table(rows, list(rows[0])))
    write("demo_pair_report", args, {**out, "rows": rows})


if __name__ == "__main__":
    main()
