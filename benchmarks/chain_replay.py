"""Sampled-chain depth rules replayed on recorded chains: what `--budget auto` loses in the depths it chooses alone.

A real run of `chain_depths.py` mixes three things: the depths a rule chooses, the load that moved while each
decoder ran, and (at T > 0) the text each decoder happened to sample. This script keeps only the first. It decodes
every prompt (and seed) once with fixed chains of `--depth` tokens and records each round's acceptances. A chain of
depth h is the first h tokens of such a chain, in law, so each recorded round gives the exact expected tokens of
every depth up to `--depth` in that context. Then each rule walks the recorded rounds in order: the engine's
AutoBudget chooses a depth from what it has seen (the acceptances of the depth it chose, truncated), is charged that
depth's round time (from a `chain_depths.py` result, times a lognormal noise so that its time estimates have
something to filter) and gains that depth's expected tokens. Every rule meets the same contexts, so the rows compare
without the noise of a run. The walk keeps the recorded rounds' contexts and order, not the positions a shallower
chain would have reached: a passage weighs as many rounds as the recorded chains spent in it (an easy passage fewer
than a shallow chain would), so compare the rows with one another, not with a real run's speeds.
"""

from __future__ import annotations

import json
import math
import random
from collections import Counter
from pathlib import Path

from common import parser, setup, table, tree_decode, write

from tevviz.engine.cost.auto_budget import AutoBudget
from tevviz.engine.draft.builders import BuilderConfig
from tevviz.engine.records.records import expected_accepted


def expected_tokens(accept: list[float], depth: int) -> float:
    """1 + the expected accepted tokens of the chain's first `depth` tokens (the bonus token included)."""
    h = min(depth, len(accept))
    return 1 + expected_accepted(list(range(-1, h)), [1.0, *accept[:h]])


def round_times(spec: str, depth: int) -> list[float]:
    """ms of a round of each chain depth 0..depth: from comma-separated ms (depth 0 first), or from a chain_depths
    result's pooled means of its fixed depths and plain steps (its auto rows' other depths are few and noisy).
    Depths missing are interpolated between measured neighbours, or extended by the nearest measured step."""
    if spec.endswith(".json"):
        result = json.loads(Path(spec).read_text())
        fixed = {0, *(int(h) for h in result["args"]["depths"].split(",") if h)}
        measured = {int(h): ms for h, ms in result["pooled ms by depth"].items() if int(h) in fixed}
    else:
        measured = dict(enumerate(float(x) for x in spec.split(",")))
    known = sorted(measured)
    if len(known) < 2:
        raise SystemExit(f"{spec}: needs round times of two chain depths at least")
    out = []
    for h in range(depth + 1):
        lo = max((k for k in known if k <= h), default=known[0])
        hi = min((k for k in known if k >= h), default=known[-1])
        if lo == hi:
            if h in measured:
                out.append(measured[h])
                continue
            lo, hi = (known[0], known[1]) if h < known[0] else (known[-2], known[-1])
            # Beyond the measured depths a round never costs less than at the nearest measured one.
            slope = max((measured[hi] - measured[lo]) / (hi - lo), 0.0)
            near = known[0] if h < known[0] else known[-1]
            out.append(measured[near] + slope * (h - near))
            continue
        out.append(measured[lo] + (measured[hi] - measured[lo]) * (h - lo) / (hi - lo))
    if min(out) <= 0:
        raise SystemExit(f"{spec}: round times must be positive, got {out}")
    return out


def replay(sessions: list[list[list[float]]], times: list[float], model: AutoBudget, noise: float,
           seed: int) -> tuple[float, float, Counter]:
    """(expected tokens, ms, depths chosen) of the cost model `model` walking the recorded rounds."""
    rng = random.Random(seed)
    tokens = ms = 0.0
    chosen = Counter()
    for rounds in sessions:
        for accept in rounds:
            plan = model.plan()
            h = 0 if plan.skip_draft else min(plan.forced_budget, len(accept))
            chosen[h] += 1
            tokens += expected_tokens(accept, h)
            ms += times[h]
            took = times[h] * math.exp(rng.gauss(0.0, noise))
            draft = took * 0.3 if h else 0.0  # the split between stages only feeds the line the prior comes from
            model.observe(h + 1, h, {"draft": draft, "target": took - draft, "verify": 0.0, "other": 0.0}, 0.0, 0.0,
                          [0] * (h + 1), [0.0] * (h + 1), [1.0, *accept[:h]])
    return tokens, ms, chosen


def main() -> None:
    ap = parser(__doc__.splitlines()[0])
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--depth", type=int, default=8, help="the recorded chains' depth: the deepest a rule may draft")
    ap.add_argument("--times", required=True,
                    help="round ms by depth to charge: a chain_depths.py result (.json) or ms of depths 0, 1, ... "
                         "comma-separated")
    ap.add_argument("--windows", default="48",
                    help="survival windows of the auto rows (drafted chains), comma-separated")
    ap.add_argument("--noise", type=float, default=0.12, help="lognormal sigma of each round's measured time")
    ap.add_argument("--replays", type=int, default=3, help="walks of each auto row, each with its own time noise")
    ap.add_argument("--seeds", type=int, default=1, help="decodes of each prompt, each with its own seed")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    args = ap.parse_args()
    pair, prompts = setup(args)
    times = round_times(args.times, args.depth)
    builder = BuilderConfig(name="sampled", depth=args.depth)
    sessions = []
    for seed in range(args.seeds):
        for i, ids in enumerate(prompts):
            s, _ = tree_decode(pair, ids, args.temperature, builder, "speculative", args.max_new_tokens,
                               seed * 1000 + i)
            sessions.append([(r.accept or r.p_edge)[1:] for r in s.rounds])
    rounds = sum(map(len, sessions))
    # (expected tokens, ms) of each decode at each fixed depth; a round capped short of h (near the token limit) is
    # charged the depth it got, as in the replay.
    per_decode = [[(sum(expected_tokens(a, h) for a in r), sum(times[min(h, len(a))] for a in r))
                   for h in range(args.depth + 1)] for r in sessions]
    fixed = {h: (sum(d[h][0] for d in per_decode), sum(d[h][1] for d in per_decode)) for h in range(args.depth + 1)}
    best = max(fixed, key=lambda h: fixed[h][0] / fixed[h][1])
    best_rate = fixed[best][0] / fixed[best][1]
    # The best fixed depth of each decode, chosen knowing its rounds: what adapting per prompt could gain at most.
    oracle = [max(d, key=lambda t: t[0] / t[1]) for d in per_decode]
    rows = [{"rule": f"fixed {h}", "tokens/ms": t / ms, "x best fixed": t / ms / best_rate} for h, (t, ms) in
            fixed.items()]
    rows.append({"rule": "best fixed depth per prompt (oracle)", "tokens/ms": sum(t for t, _ in oracle) / sum(
        ms for _, ms in oracle), "x best fixed": sum(t for t, _ in oracle) / sum(ms for _, ms in oracle) / best_rate})
    for w in [int(x) for x in args.windows.split(",") if x]:
        results = []
        for k in range(args.replays):
            model = AutoBudget(args.depth, args.depth, chain=True)
            model.prefix_window = w
            results.append(replay(sessions, times, model, args.noise, k))
        chosen = sum((c for _, _, c in results), Counter())
        ratios = [t / ms / best_rate for t, ms, _ in results]
        rows.append({"rule": f"auto, window {w}", "tokens/ms": sum(t for t, _, _ in results) / sum(
            ms for _, ms, _ in results), "x best fixed": sum(ratios) / len(ratios),
            "spread": f"{min(ratios):.3f}-{max(ratios):.3f}",
            "depths": " ".join(f"{h}:{n}" for h, n in sorted(chosen.items()))})
    print(f"{len(sessions)} decodes, {rounds} recorded rounds; round ms by depth:",
          " ".join(f"{h}:{ms:.1f}" for h, ms in enumerate(times)))
    print(table(rows, ["rule", "tokens/ms", "x best fixed", "spread", "depths"]))
    write("chain_replay", args, {"rows": rows, "round ms": times, "rounds": rounds})


if __name__ == "__main__":
    main()
