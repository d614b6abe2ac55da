"""What a tree costs on this machine: target-pass and draft-forward ms by tokens, and the tau a tree must beat.

A round of a tree decoder costs H draft forwards (W rows each) plus one target pass over the B + 1 tree
tokens; plain decoding costs one target pass over one token per token. So a (B, H) tree decoder is faster
than plain decoding only when its tau exceeds (H * draft(W) + target(B + 1)) / target(1), the break-even
tau printed here. Every pass runs on top of a `--context`-token cache (crop after each), sizes interleaved
in each repeat; medians.
"""

from __future__ import annotations

import statistics
import time

import torch
from common import parser, setup, sync, table, write

from tevviz.engine.core.kv import additive_mask, causal_visibility, new_cache


def pass_ms(model, ctx: torch.Tensor, block: torch.Tensor, sizes: list[int], repeats: int) -> dict[int, float]:
    """Median ms of one forward of the first n tokens of `block` on top of a cache holding `ctx`, for each n."""
    cache = new_cache(model)
    past = ctx.shape[1]
    times: dict[int, list[float]] = {n: [] for n in sizes}
    with torch.inference_mode():
        model(input_ids=ctx, cache=cache, use_cache=True)
        for rep in range(repeats + 1):  # the first round warms up
            for n in sizes:
                ids = block[:, :n]
                mask = additive_mask(causal_visibility(n, past, ctx.device), model.dtype)
                pos = torch.arange(past, past + n, device=ctx.device)[None]
                sync(ctx.device)
                t0 = time.perf_counter()
                model(input_ids=ids, attention_mask=mask, position_ids=pos, cache=cache, use_cache=True)
                sync(ctx.device)
                if rep:
                    times[n].append(1e3 * (time.perf_counter() - t0))
                cache.crop(-n)
    return {n: statistics.median(v) for n, v in times.items()}


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--sizes", default="1,2,3,5,9,17,33,65", help="tokens per target pass (B + 1)")
    ap.add_argument("--widths", default="1,8", help="rows per draft forward (W)")
    ap.add_argument("--trees", default="1x1,2x2,4x3,8x4,16x6,32x8,64x8", help="(B x H) trees to price")
    ap.add_argument("--context", type=int, default=200, help="tokens already in the cache")
    ap.add_argument("--repeats", type=int, default=9)
    args = ap.parse_args()
    pair, prompts = setup(args)
    sizes = sorted({int(x) for x in args.sizes.split(",")})
    widths = sorted({int(x) for x in args.widths.split(",")})
    trees = [tuple(int(v) for v in t.split("x")) for t in args.trees.split(",") if t]
    sizes = sorted({*sizes, 1, *(b + 1 for b, _ in trees)})
    ids = [t for p in prompts for t in p]
    while len(ids) < args.context + max(sizes + widths):
        ids = ids + ids
    ctx = torch.tensor([ids[: args.context]], device=pair.device)
    block = torch.tensor([ids[args.context: args.context + max(sizes + widths)]], device=pair.device)
    target = pass_ms(pair.target, ctx, block, sizes, args.repeats)
    draft = pass_ms(pair.draft, ctx, block, widths, args.repeats)
    one = target[1]
    rows = [{"tokens": n, "target_ms": target[n], "x_one_token": target[n] / one} for n in sizes]
    print(table(rows, ["tokens", "target_ms", "x_one_token"]))
    print(table([{"width": w, "draft_ms": draft[w], "x_target_token": draft[w] / one} for w in widths],
                ["width", "draft_ms", "x_target_token"]))
    w = max(widths)
    priced = []
    for b, h in trees:
        dw = draft[1] if b == h else draft[w]  # a chain's levels are one row wide
        ms = h * dw + target[b + 1]
        priced.append({"B": b, "H": h, "round_ms": ms, "break_even_tau": ms / one})
    print(f"a (B, H) tree decoder beats plain decoding only above the break-even tau (draft rows: 1 for chains, {w})")
    print(table(priced, ["B", "H", "round_ms", "break_even_tau"]))
    name = args.pair or ("custom" if args.target else "stdlib")
    write(f"pass_cost_{name}", args, {"target_ms": target, "draft_ms": draft, "trees": priced})


if __name__ == "__main__":
    main()
