"""Do a few rows pay for the whole weight? A round's target pass and draft level by the rows they take, with every
linear layer as `linear` (TEVVIZ_FEW_ROWS=0), with the output layer alone as the transposed product (`head_rows`,
as before the hidden layers took it), and with the hidden layers too where `few_rows.pays` says so (as shipped).

Each pass on top of a cached context (the mean prompt plus --context-extra tokens), through the same target pass and
draft step decoding runs; the two settings alternate block by block (--blocks), sizes interleaved in each repeat;
medians of the blocks' medians. Prints a table and writes JSON.
"""

from __future__ import annotations

import statistics

import torch
from common import parser, setup, table, write

from tevviz.engine.core import few_rows
from tevviz.engine.decode.pass_costs import draft_level_ms, target_pass_ms

SIZES = (1, 2, 3, 4, 5, 6, 7, 9, 13, 17)


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)),
                    help="tokens per target pass and rows per draft level")
    ap.add_argument("--context-extra", type=int, default=32, help="tokens past the mean prompt in the cache")
    ap.add_argument("--repeats", type=int, default=5, help="repeats per block")
    ap.add_argument("--blocks", type=int, default=3, help="blocks per setting, alternating")
    args = ap.parse_args()
    pair, prompts = setup(args)
    sizes = sorted({int(x) for x in args.sizes.split(",")})
    context = sum(len(p) for p in prompts) // len(prompts) + args.context_extra
    ids = [t for p in prompts for t in p]
    while len(ids) < context + max(sizes):
        ids = ids + ids
    ctx = torch.tensor([ids[:context]], device=pair.device)
    block = torch.tensor([ids[context: context + max(sizes)]], device=pair.device)
    shipped = few_rows.LIMIT, few_rows.LAYER_ROWS
    settings = {"linear": (0, 0), "head": (shipped[0], 0), "few rows": shipped}
    runs: dict[str, list[tuple[dict, dict | None]]] = {name: [] for name in settings}
    for _ in range(args.blocks):
        for name, (limit, layer_rows) in settings.items():
            few_rows.LIMIT, few_rows.LAYER_ROWS = limit, layer_rows
            try:
                runs[name].append((target_pass_ms(pair.target, ctx, block, sizes, args.repeats),
                                   draft_level_ms(pair, ctx, block, sizes, args.repeats)))
            finally:
                few_rows.LIMIT, few_rows.LAYER_ROWS = shipped
    rows = []
    for n in sizes:
        row = {"rows": n}
        for name, blocks in runs.items():
            row[f"target {name} ms"] = statistics.median(t[n] for t, _ in blocks)
            if blocks[0][1] is not None:
                row[f"draft {name} ms"] = statistics.median(d[n] for _, d in blocks)
        # Against the head alone: what the hidden layers' transposed product adds.
        row["target ratio"] = row["target few rows ms"] / row["target head ms"]
        if "draft linear ms" in row:
            row["draft ratio"] = row["draft few rows ms"] / row["draft head ms"]
        rows.append(row)
    print(f"{pair.target_name} / {pair.draft_name}  context {context}  threads {torch.get_num_threads()}  "
          f"device {pair.device}")
    print(table(rows, list(rows[0])))
    write(f"few_rows_{args.pair or 'stdlib'}", args, {"context": context, "threads": torch.get_num_threads(),
                                                      "rows": rows})


if __name__ == "__main__":
    main()
