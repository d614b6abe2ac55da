"""Does the written-out draft forward (engine/draft/fast_draft.py) make the draft stage and decoding cheaper?

For each tree: the draft stage alone (one round's levels on top of a `--context`-token cache, then cropped) and the
bare draft forwards of the same sizes through the model's modules, both ways; then whole decodes of the held-out
prompts both ways. Every measurement alternates the two ways within each repeat; medians. A ratio above 1 means the
written-out forward is faster.
"""

from __future__ import annotations

import statistics
import time

import torch
from common import parser, setup, table, tree_decode, write

from tevviz.engine.core.kv import causal_visibility, new_cache
from tevviz.engine.core.sampling import SamplingConfig
from tevviz.engine.draft import fast_draft
from tevviz.engine.draft.builders import BuilderConfig, ModelStep, draft_levels
from tevviz.engine.draft.fast_draft import LlamaStep

TREES = {"best-first B8 H4": (BuilderConfig(budget=8, depth=4), 0.0, "tev"),
         "best-first B32 H6": (BuilderConfig(budget=32, depth=6), 0.0, "tev"),
         "sampled chain H4": (BuilderConfig(name="sampled", depth=4), 1.0, "speculative")}


def stage_ms(step, context: list[int], cfg: BuilderConfig, repeats: int) -> list[float]:
    """Ms of one round's draft stage below the context's last token, the state cropped back after each."""
    gen, sampling = torch.Generator().manual_seed(0), SamplingConfig(temperature=1.0)
    with torch.inference_mode():
        n = len(context) - 1
        step(torch.tensor(context[:-1]), torch.arange(n), causal_visibility(n, 0, "cpu"), None)
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            draft_levels(step, context[-1:], cfg, sampling=sampling, gen=gen)
            times.append(1e3 * (time.perf_counter() - t0))
            step.cache.crop(n - step.length())
    return times


def main() -> None:
    ap = parser(__doc__.splitlines()[0])
    ap.add_argument("--context", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3, help="interleaved passes over the prompts for the decodes")
    args = ap.parse_args()
    pair, prompts = setup(args)
    if fast_draft.fast_step(pair.draft) is None:
        raise SystemExit(f"the written-out forward does not take this draft: {fast_draft.unsupported(pair.draft)}")
    context = (prompts[0] * (args.context // max(len(prompts[0]), 1) + 1))[: args.context]
    rows = []
    for name, (cfg, temperature, verifier) in TREES.items():
        stage = {"modules": [], "written out": []}
        for _ in range(3):
            stage["modules"] += stage_ms(ModelStep(pair.draft, new_cache(pair.draft)), context, cfg, args.repeats)
            stage["written out"] += stage_ms(LlamaStep(pair.draft), context, cfg, args.repeats)
        speed = {"modules": [], "written out": []}
        for _ in range(args.rounds):
            for way, enabled in (("modules", False), ("written out", True)):
                fast_draft.ENABLED = enabled
                toks = secs = 0.0
                for i, ids in enumerate(prompts):
                    s, t = tree_decode(pair, ids, temperature, cfg, verifier, args.max_new_tokens, seed=i)
                    toks, secs = toks + len(s.generated), secs + t
                speed[way].append(toks / secs)
        fast_draft.ENABLED = True
        row = {"tree": name, "T": temperature}
        for way, times in stage.items():
            row[f"stage ms ({way})"] = statistics.median(times)
            row[f"tok/s ({way})"] = statistics.median(speed[way])
        row["stage ratio"] = row["stage ms (modules)"] / row["stage ms (written out)"]
        row["tok/s ratio"] = row["tok/s (written out)"] / row["tok/s (modules)"]
        rows.append(row)
        print(table([row], list(row)), flush=True)
    columns = list(rows[0])
    print(table(rows, columns))
    write("does_the_written_out_draft_forward_pay", args, {"rows": rows, "prompts": len(prompts)})


if __name__ == "__main__":
    main()
