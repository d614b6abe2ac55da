"""How much of what a perfect drafter would gain does a trained drafter gain?

On held-out windows (the same ones as `exittrain_ablation.py --eval-contexts N`), the expected block length of
each drafter's own tree at T = 1 (1 + C_p: exact, no draws), against the same builder fed by the target itself:
for an autoregressive drafter the target drafts the best-first tree; for a block drafter DDTree's heap reads rows
from the target, row d its law after its own greedy first d - 1 tokens (the marginals a drafter that knew the target's
greedy path would give). The share of the bound: (trained - original) / (target - original).

    python benchmarks/exittrain_bound.py --draft assets/models/tevviz-stdlib-block-draft \\
        --trained exit=/tmp/exit-trained --eval-contexts 200
"""

from __future__ import annotations

import statistics

import torch
from common import held_out_windows, pair_tree, parser, table, write

from tevviz.engine.draft.builders import BuilderConfig
from tevviz.engine.draft.ddtree import ddtree_tree
from tevviz.engine.load.models import ModelPair, with_draft
from tevviz.engine.train.block_exittrain import tree_for
from tevviz.engine.train.exittrain import target_weights


@torch.no_grad()
def target_rows(target, context: list[int], depth: int) -> torch.Tensor:
    """(depth, V) the target's T = 1 log-laws along its own greedy continuation of `context`."""
    ids, rows = list(context), []
    for _ in range(depth):
        logits = target(input_ids=torch.tensor([ids], device=target.device)).logits[0, -1].float()
        rows.append(torch.log_softmax(logits, -1))
        ids.append(int(logits.argmax()))
    return torch.stack(rows)


def expected_lengths(pair: ModelPair, contexts: list[list[int]], builder: BuilderConfig, oracle: bool) -> list[float]:
    """1 + C_p at T = 1 of each context's tree: the drafter's own, or (oracle) the target's."""
    out = []
    for ctx in contexts:
        if oracle and builder.name == "ddtree":
            tree = ddtree_tree(ctx[-1], target_rows(pair.target, ctx, builder.max_depth), builder.budget)[0]
        elif oracle:
            tree = tree_for(ModelPair(pair.target, pair.target, pair.tokenizer, "", "target"), ctx, builder)
        else:
            tree = tree_for(pair, ctx, builder)
        out.append(1 + float(target_weights(pair.target, ctx, tree.to(pair.device), 1.0)[0].C_p))
    return out


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--trained", default="", help="NAME=FOLDER,...: trained drafters to place against the bound")
    ap.add_argument("--budget", type=int, default=32)
    ap.add_argument("--depth", type=int, default=7, help="H (a block drafter: at most its block's depth)")
    ap.add_argument("--eval-contexts", type=int, default=200)
    ap.add_argument("--context-tokens", type=int, default=64)
    ap.add_argument("--eval-seed", type=int, default=1, help="exittrain_ablation.py's default: --seed + 1")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    from tevviz.engine.load.models import ModelSource

    pair = ModelSource(target=args.target, draft=args.draft, pair=args.pair, dtype=args.dtype,
                       device=args.device).load()
    builder = pair_tree(pair, args.budget, args.depth)
    contexts = held_out_windows(pair.tokenizer, args.eval_contexts, args.context_tokens, args.eval_seed)
    lengths = {"original": expected_lengths(pair, contexts, builder, False)}
    for item in filter(None, args.trained.split(",")):
        name, _, folder = item.partition("=")
        lengths[name] = expected_lengths(with_draft(pair, folder), contexts, builder, False)
    lengths["target (bound)"] = expected_lengths(pair, contexts, builder, True)
    base, bound = lengths["original"], lengths["target (bound)"]
    rows = []
    for name, xs in lengths.items():
        diff = [x - b for x, b in zip(xs, base)]
        se = statistics.stdev(diff) / len(diff) ** 0.5 if len(diff) > 1 and any(diff) else float("nan")
        gain, room = statistics.fmean(diff), statistics.fmean(bound) - statistics.fmean(base)
        rows.append({"drafter": name, "E[len] T=1": statistics.fmean(xs), "gain": gain, "gain_se": se,
                     "rel_gain": gain / statistics.fmean(base),
                     "share_of_bound": gain / room if room else float("nan")})
    print(f"{builder.name} B={builder.budget} H={builder.max_depth}, {len(contexts)} held-out windows of "
          f"{args.context_tokens} tokens, T = 1")
    print(table(rows, list(rows[0])))
    write("exittrain_bound", args, {"rows": rows, "per_context": lengths})


if __name__ == "__main__":
    main()
