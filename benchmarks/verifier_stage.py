"""Verifier-stage latency (decision + cache commit, target forward excluded) on the same recorded trees.

For each budget B and temperature T: trees come from best-first decoding of the eval prompts with
the same drafter (with --block, DDTree trees of a block drafter: the paper's Table 3 setting); each
verifier decides on the same tree and target logits and commits a copy of the same target cache.
Medians over trees of the per-tree median time, and ratios to predraw.
A second measure, `+law`, adds the tree's exit law, which every round record carries: TEV hands
over the one it drew from, and for the other verifiers the session computes it after the decision.
"""

from __future__ import annotations

import statistics
import sys

import torch
from common import pair_tree, parser, plotly_go, setup, table, timed, write
from tqdm import tqdm

from tevviz.engine.core.exit_law import exit_law_from_logits
from tevviz.engine.core.kv import additive_mask, keep_entries, new_cache, tree_visibility
from tevviz.engine.core.sampling import SamplingConfig
from tevviz.engine.core.tree import ancestor_mask, from_parents, path_to, position_ids
from tevviz.engine.decode.session import DecodeConfig, DecodeSession
from tevviz.engine.verify.verifiers import VERIFIERS


def recorded_trees(pair, prompts, budget: int, temperature: float, per_prompt: int):
    """(prefix, tree) pairs from real decoding rounds with a best-first builder of budget B (DDTree's builder for
    a block drafter)."""
    # best-first at depth 10, or the drafter's own builder (common.pair_tree)
    builder = pair_tree(pair, budget, 10)
    out = []
    for i, ids in enumerate(prompts):
        cfg = DecodeConfig(sampling=SamplingConfig(temperature=temperature), builder=builder, max_new_tokens=200,
                           seed=i, missing_top=0)
        s = DecodeSession(pair, ids, cfg)
        for _ in range(per_prompt):
            if s.done:
                break
            prefix = s.tokens[:-1]
            r = s.step()
            out.append((prefix, from_parents(r.tokens, r.parents, r.draft_logprobs, device=pair.device)))
    return out


@torch.no_grad()
def stage_times(pair, prefix, tree, cfg: SamplingConfig, names, repeats: int) -> dict:
    """Median decision + commit time of each verifier on one tree."""
    device = pair.device
    cache = new_cache(pair.target)
    pair.target(input_ids=torch.tensor([prefix], device=device), cache=cache, use_cache=True)
    past = cache.get_seq_length()
    anc = ancestor_mask(tree)
    logits = pair.target(input_ids=tree.tokens[None],
                         attention_mask=additive_mask(tree_visibility(anc, past), pair.target.dtype),
                         position_ids=position_ids(tree, past), cache=cache, use_cache=True).logits[0]
    full = [(layer.keys.clone(), layer.values.clone()) for layer in cache.layers]

    def fresh_cache():
        for layer, (k, v) in zip(cache.layers, full):
            layer.keys, layer.values = k.clone(), v.clone()
        return cache

    out = {}
    for name in names:
        verify = VERIFIERS[name]
        gen = torch.Generator(device=device).manual_seed(0)

        def run(c, verify=verify, gen=gen, with_law=False):
            d = verify(tree, logits, cfg, gen, anc)
            exit_node, _ = torch.stack([d.exit_node, d.bonus_token]).tolist()
            keep_entries(c, past, path_to(tree, exit_node), past + tree.size)
            if with_law and d.exit_law is None:
                exit_law_from_logits(tree, logits, cfg, anc)

        out[name] = timed(run, device, repeats, setup_fn=fresh_cache)
        out[f"{name}+law"] = timed(lambda c, run=run: run(c, with_law=True), device, repeats, setup_fn=fresh_cache)
    return out


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--budgets", default="16,32,64,128,256")
    ap.add_argument("--temperatures", default="0,0.6,1")
    ap.add_argument("--verifiers", default="tev,predraw,predraw-loop,residual")
    ap.add_argument("--trees-per-prompt", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--block", default=None, help="a block drafter folder: time the verifiers on its DDTree trees")
    args = ap.parse_args()
    pair, prompts = setup(args)
    if args.block:
        from tevviz.engine.load.models import with_draft

        pair = with_draft(pair, args.block)
    names = args.verifiers.split(",")
    rows = []
    budgets, temps = [int(b) for b in args.budgets.split(",")], [float(t) for t in args.temperatures.split(",")]
    # Trees timed so far, with an ETA, on a terminal (larger budgets take longer: the ETA firms up as it goes).
    bar = tqdm(total=len(budgets) * len(temps) * len(prompts) * args.trees_per_prompt, desc="verifier_stage",
               unit="tree", file=sys.stderr, disable=not sys.stderr.isatty(), leave=False)
    for budget in budgets:
        for temp in temps:
            cfg = SamplingConfig(temperature=temp)
            bar.set_postfix_str(f"B = {budget}, T = {temp:g}: recording trees")
            trees = recorded_trees(pair, prompts, budget, temp, args.trees_per_prompt)
            bar.set_postfix_str(f"B = {budget}, T = {temp:g}")
            per_tree = []
            for p, t in trees:
                per_tree.append(stage_times(pair, p, t, cfg, names, args.repeats))
                bar.update()
            row = {"B": budget, "T": temp, "trees": len(trees), "nodes": statistics.mean(t.size for _, t in trees)}
            for name in names:
                for key in (name, f"{name}+law"):
                    row[f"{key}_ms"] = 1e3 * statistics.median(x[key] for x in per_tree)
            if "predraw" in names:
                for name in names:
                    if name != "predraw":
                        row[f"{name}/predraw"] = row[f"{name}_ms"] / row["predraw_ms"]
                        row[f"{name}+law/predraw+law"] = row[f"{name}+law_ms"] / row["predraw+law_ms"]
            rows.append(row)
            bar.write(table([row], list(row)), file=sys.stdout)
    bar.close()
    cols = list(rows[0])
    print("\n" + table(rows, cols))
    go, fig = plotly_go(), None
    if go is not None:
        fig = go.Figure()
        for temp in sorted({r["T"] for r in rows}):
            sub = [r for r in rows if r["T"] == temp]
            for name in names:
                fig.add_scatter(x=[r["B"] for r in sub], y=[r[f"{name}_ms"] for r in sub], name=f"{name} T={temp:g}")
        fig.update_layout(title="Verifier stage (decision + cache commit)", xaxis_title="budget B", yaxis_title="ms",
                          xaxis_type="log")
    write("verifier_stage_block" if args.block else "verifier_stage", args, {"rows": rows}, fig)


if __name__ == "__main__":
    main()
