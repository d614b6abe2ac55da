"""Why does HF assisted generation beat tevviz's sampled chain (--budget auto, H <= 4) with the same drafter at T = 0?

Per round, for each decoder: tokens committed (tau), draft tokens, draft ms (and ms per drafted token), target ms,
and everything else (the decoding loop: tree, masks, verification, cache rollback, records). Rows, interleaved prompt
by prompt after one warm-up each, greedy, one thread: `generate`; HF assisted with the pair's drafter; tevviz's sampled
chain sized by --budget auto with every linear layer through the model's own `linear` (TEVVIZ_FEW_ROWS=0: as before
core/few_rows.py) and as it runs now; and (--stop-below) a chain stopped as HF's assistant stops, after the first
token the draft gives less than that probability, up to each of --stop-depths tokens.

HF's rounds are its target forwards (the first also holds the prompt's prefill, reported apart as setup); tevviz's
are its session's rounds (its prefill is in the session's construction, reported as setup). Forward times come from
hooks (HF's modules) and from timing tevviz's draft step and target pass themselves.
"""

from __future__ import annotations

import time

import torch
from common import parser, setup, table, tree_decode, write

from tevviz.engine.core import few_rows
from tevviz.engine.decode import target_pass
from tevviz.engine.draft import fast_draft
from tevviz.engine.draft.builders import BuilderConfig
from tevviz.engine.load.pairs import AUTO_LIMIT


class Clock:
    """Seconds and calls spent in wrapped callables (hooks or wrappers add to it)."""

    def __init__(self):
        self.reset()

    def reset(self):
        self.seconds, self.calls, self.rows, self.each = 0.0, 0, [], []

    def wrap(self, fn):
        def timed(*a, **kw):
            t0 = time.perf_counter()
            out = fn(*a, **kw)
            self.each.append(time.perf_counter() - t0)
            self.seconds += self.each[-1]
            self.calls += 1
            return out
        return timed


def hooked(module, clock: Clock):
    """Time every forward of `module` into `clock`, keeping each call's input length."""
    start = {}

    def pre(mod, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        clock.rows.append(0 if ids is None else ids.shape[1])
        start["t"] = time.perf_counter()

    def post(mod, args, kwargs, out):
        clock.each.append(time.perf_counter() - start["t"])
        clock.seconds += clock.each[-1]
        clock.calls += 1
    module.register_forward_pre_hook(pre, with_kwargs=True)
    module.register_forward_hook(post, with_kwargs=True)


def hf_row(pair, ids, n, target_clock: Clock, draft_clock: Clock) -> dict:
    kw = {"max_new_tokens": n, "min_new_tokens": n, "do_sample": False, "pad_token_id": pair.tokenizer.eos_token_id}
    target_clock.reset(), draft_clock.reset()
    t0 = time.perf_counter()
    out = pair.target.generate(torch.tensor([ids], device=pair.device), assistant_model=pair.draft, **kw)
    wall = time.perf_counter() - t0
    tokens = out.shape[1] - len(ids)
    rounds = target_clock.calls
    # The first target call holds the prompt's prefill and the first draft; its round is priced as the others.
    lens = target_clock.rows
    drafted = (lens[0] - len(ids)) + sum(x - 1 for x in lens[1:])
    first = target_clock.each[0]
    per = (target_clock.seconds - first) / max(rounds - 1, 1)
    return {"wall": wall, "tokens": tokens, "rounds": rounds, "drafted": drafted, "draft_s": draft_clock.seconds,
            "draft_calls": draft_clock.calls, "target_s": per * rounds, "setup_s": first - per}


def tevviz_row(pair, ids, n, builder, seed, head_rows: int, step_clock: Clock, pass_clock: Clock) -> dict:
    saved = few_rows.LIMIT
    few_rows.LIMIT = head_rows
    step_clock.reset(), pass_clock.reset()
    try:
        s, wall = tree_decode(pair, ids, 0.0, builder, "speculative", n, seed)
    finally:
        few_rows.LIMIT = saved
    rounds = s.rounds
    stage = {k: sum(r.stage_ms[k] for r in rounds) / 1e3 for k in ("draft", "target", "verify", "other")}
    inside = sum(stage.values())
    drafted = sum(r.size - 1 for r in rounds)
    # Both clocks' first call is the session's construction (the prompt's prefill in each model), not a round's.
    return {"wall": wall, "tokens": len(s.generated), "rounds": len(rounds), "drafted": drafted,
            "draft_s": stage["draft"], "draft_calls": step_clock.calls - 1, "draft_forward_s": sum(step_clock.each[1:]),
            "target_s": stage["target"], "target_forward_s": sum(pass_clock.each[1:]), "setup_s": wall - inside,
            "verify_s": stage["verify"], "record_s": stage["other"]}


def summary(name: str, runs: list[dict]) -> dict:
    tot = {k: sum(r.get(k, 0.0) for r in runs) for k in runs[0]}
    rounds = tot["rounds"]
    other = tot["wall"] - tot["setup_s"] - tot["draft_s"] - tot["target_s"]
    row = {"decoder": name, "tokens_per_s": tot["tokens"] / tot["wall"], "tau": tot["tokens"] / rounds,
           "rounds": rounds, "drafted_per_round": tot["drafted"] / rounds,
           "draft_ms_round": 1e3 * tot["draft_s"] / rounds,
           "draft_ms_per_token": 1e3 * tot["draft_s"] / max(tot["drafted"], 1),
           "target_ms_round": 1e3 * tot["target_s"] / rounds, "other_ms_round": 1e3 * other / rounds,
           "setup_ms_prompt": 1e3 * tot["setup_s"] / len(runs), "seconds": tot["wall"], "tokens": tot["tokens"]}
    if "target_forward_s" in tot:  # tevviz: the forwards themselves, and the loop's own share of each stage
        row["draft_forward_ms_round"] = 1e3 * tot["draft_forward_s"] / rounds
        row["target_forward_ms_round"] = 1e3 * tot["target_forward_s"] / rounds
        row["verify_ms_round"] = 1e3 * tot["verify_s"] / rounds
        row["record_ms_round"] = 1e3 * tot["record_s"] / rounds
    return row


def main() -> None:
    ap = parser(__doc__)
    ap.set_defaults(pair="smollm2", limit=4, threads=1)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--depth", type=int, default=4, help="the auto-sized chain's depth limit")
    ap.add_argument("--stop-below", type=float, default=0.4, help="the stopped chain's threshold (0: no such row)")
    ap.add_argument("--stop-depths", default="8", help="the stopped chains' depth limits, comma-separated (a row each)")
    ap.add_argument("--no-before", action="store_true", help="leave out the row with the model's own linear layers")
    args = ap.parse_args()
    pair, prompts = setup(args)
    torch.set_num_threads(args.threads)
    n = args.max_new_tokens
    target_clock, draft_clock, step_clock, pass_clock = Clock(), Clock(), Clock(), Clock()
    hooked(pair.target, target_clock), hooked(pair.draft, draft_clock)
    fast_draft.LlamaStep.__call__ = step_clock.wrap(fast_draft.LlamaStep.__call__)
    target_pass.TargetPass.__call__ = pass_clock.wrap(target_pass.TargetPass.__call__)

    auto = BuilderConfig(name="sampled", budget=AUTO_LIMIT, depth=args.depth, auto=True)
    rows = {
        "generate": None,
        "hf-assisted": None,
        f"tevviz sampled auto H<={args.depth}, model linear (before)": (auto, 0),
        f"tevviz sampled auto H<={args.depth}": (auto, few_rows.LIMIT),
    }
    if args.no_before:
        del rows[f"tevviz sampled auto H<={args.depth}, model linear (before)"]
    for h in [int(x) for x in args.stop_depths.split(",") if x] if args.stop_below else []:
        stopped = BuilderConfig(name="sampled", depth=h, stop_below=args.stop_below)
        rows[f"tevviz sampled stop<{args.stop_below:g} H<={h}"] = (stopped, few_rows.LIMIT)

    def run(name, ids, i):
        if name == "generate":
            kw = {"max_new_tokens": n, "min_new_tokens": n, "do_sample": False,
                  "pad_token_id": pair.tokenizer.eos_token_id}
            target_clock.reset()
            t0 = time.perf_counter()
            out = pair.target.generate(torch.tensor([ids], device=pair.device), **kw)
            wall, tokens = time.perf_counter() - t0, out.shape[1] - len(ids)
            prefill = target_clock.each[0]
            per = (target_clock.seconds - prefill) / max(tokens - 1, 1)
            return {"wall": wall, "tokens": tokens, "rounds": tokens, "drafted": 0, "draft_s": 0.0,
                    "target_s": per * tokens, "setup_s": prefill - per}
        if name == "hf-assisted":
            return hf_row(pair, ids, n, target_clock, draft_clock)
        builder, head = rows[name]
        return tevviz_row(pair, ids, n, builder, i, head, step_clock, pass_clock)

    for name in rows:  # warm-up, not timed
        run(name, prompts[0], 0)
    results = {name: [] for name in rows}
    for i, ids in enumerate(prompts):
        for name in rows:
            results[name].append(run(name, ids, i))
        print(f"prompt {i + 1}/{len(prompts)} done", flush=True)
    out = [summary(name, runs) for name, runs in results.items()]
    base = out[0]["tokens_per_s"]
    for row in out:
        row["vs_generate"] = row["tokens_per_s"] / base
    print(f"{len(prompts)} prompts x {n} tokens, T = 0, {torch.get_num_threads()} thread(s), pair {pair.target_name} / "
          f"{pair.draft_name}")
    print(table(out, ["decoder", "tokens_per_s", "vs_generate", "tau", "drafted_per_round", "draft_ms_round",
                      "draft_ms_per_token", "target_ms_round", "other_ms_round", "setup_ms_prompt"]))
    print(table([r for r in out if "record_ms_round" in r],
                ["decoder", "draft_forward_ms_round", "target_forward_ms_round", "verify_ms_round", "record_ms_round"]))
    write(f"round_overhead_{args.pair}", args, {"rows": out, "per_prompt": results})


if __name__ == "__main__":
    main()
