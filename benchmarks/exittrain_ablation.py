"""ExitTrain ablation on the embedded pair (the analogue of the paper's Table 2).

A block drafter (`--draft assets/models/tevviz-stdlib-block-draft`) trains and is evaluated on DDTree trees, as deep
as its block allows (the paper's own setting); an autoregressive one on best-first trees; an EAGLE-3 head on EAGLE's
dynamic trees (`--pair smollm2 --kind eagle3`: the pair's shipped head; any head with `--draft`).

Same initialisation, data, steps and seed for every objective: token-only, prefix weight, exit
weight (the paper's), and our residual distillation. Held-out tau at T = 0 and T = 1 with B = 64,
mean and standard error over the eval prompts, relative to the original drafter.

Objectives can be split between runs with the same settings (e.g. token,exit and prefix,residual in parallel);
`exittrain_ablation.py --merge A.json B.json [--out M.json]` then prints their common table.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from ablation_table import merge, table_rows
from common import held_out_windows, pair_tree, parser, setup, table, write

from tevviz.engine.decode.session import encode_prompt
from tevviz.engine.decode.streams import collect_mixed_streams
from tevviz.engine.draft.builders import BuilderConfig
from tevviz.engine.draft.drafters import drafter_kind_of
from tevviz.engine.load.models import ModelPair, ModelSource, with_draft
from tevviz.engine.load.pairs import DEFAULT_PAIR, named_pair
from tevviz.engine.train.block_exittrain import make_trainer, save_trained
from tevviz.engine.train.evaluation import evaluate
from tevviz.engine.train.exittrain import TOKEN_LABELS, TrainConfig, contexts_from_streams, mixed_temperatures
from tevviz.prompts import load_prompts


def build_parser() -> argparse.ArgumentParser:
    """The common benchmark flags and this ablation's own."""
    ap = parser(__doc__)
    ap.add_argument("--objectives", default="token,prefix,exit,residual")
    ap.add_argument("--kind", default=None, help="train the named pair's shipped drafter of this kind instead of its "
                    "default (autoregressive, block or eagle3: --pair smollm2 --kind eagle3 is its EAGLE-3 head)")
    ap.add_argument("--train-limit", type=int, default=None, help="train on the first N train prompts only")
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--lambda-exit", type=float, default=32.0)
    ap.add_argument("--stream-cache", default=None,
                    help="keep the collected target continuations in this file: collect and save them when it is "
                         "missing, load them (settings checked) when it is there")
    ap.add_argument("--token-labels", default=TrainConfig().token_labels, choices=TOKEN_LABELS)
    ap.add_argument("--schedule", default="cosine", choices=("constant", "cosine"))
    ap.add_argument("--stream-temperatures", default="0,1",
                    help="target continuations are collected at these temperatures, in turn over the contexts")
    ap.add_argument("--budget", type=int, default=64)
    ap.add_argument("--depth", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--eval-temperatures", default="0,1", help="sampling temperatures of the held-out evaluation")
    ap.add_argument("--draft-temperature", type=float, default=1.0,
                    help="the evaluation trees' BuilderConfig.draft_temperature (training trees keep 1)")
    ap.add_argument("--train-budget", type=int, default=None, help="budget of the training trees (default: --budget)")
    ap.add_argument("--train-depth", type=int, default=None, help="depth of the training trees (default: --depth)")
    ap.add_argument("--collect-tokens", type=int, default=96)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--corpus-contexts", type=int, default=0,
                    help="train on N random windows of the stdlib training files instead of the train prompts")
    ap.add_argument("--context-tokens", type=int, default=96, help="length of each corpus window")
    ap.add_argument("--eval-contexts", type=int, default=0,
                    help="evaluate on N random windows of the held-out stdlib files (--context-tokens long) instead of "
                         "the eval prompts")
    ap.add_argument("--eval-seed", type=int, default=None,
                    help="seed of the held-out windows' draw (default: --seed + 1); another seed is another sample")
    ap.add_argument("--streams", default=None,
                    help="train on the target answers in a drafter recipe's data file (WORK/data.pt of "
                         "`tevviz pair train-drafter`) instead of collecting continuations of the train prompts")
    ap.add_argument("--stream-limit", type=int, default=None, help="use only the first N answers of --streams")
    ap.add_argument("--distill-steps", type=int, default=0,
                    help="first a dense distillation warm start of N steps (tevviz train --distill-steps); every "
                         "objective trains from it and it is evaluated as the row 'distilled'")
    ap.add_argument("--distill-text", default="stdlib-train", help="as tevviz train --distill-text")
    ap.add_argument("--distill-lr", type=float, default=1e-3)
    ap.add_argument("--distill-batch", type=int, default=16)
    ap.add_argument("--distill-window", type=int, default=256)
    ap.add_argument("--distill-top-k", type=int, default=0,
                    help="as tevviz train --distill-top-k: the target's law computed once and kept as k tokens")
    ap.add_argument("--init-draft", default=None,
                    help="every objective trains from this drafter folder instead (e.g. a warm start saved by an "
                         "earlier run's --save-distilled); evaluated as the row 'distilled'")
    ap.add_argument("--save-distilled", default=None, help="save the warm-start drafter to this folder")
    ap.add_argument("--save", default=None, help="save the exit-weight drafter to this folder")
    ap.add_argument("--original-from", default=None,
                    help="take the original drafter's held-out results from this earlier run's JSON (same eval "
                         "settings, checked) instead of evaluating it again")
    ap.add_argument("--distilled-from", default=None,
                    help="with --init-draft: take the warm start's held-out results from the earlier run's JSON that "
                         "saved it (same eval settings, checked) instead of evaluating it again")
    ap.add_argument("--also", default="",
                    help="NAME=FOLDER,...: drafters evaluated beside the original on the same contexts, untrained "
                         "(e.g. shipped=assets/models/tevviz-stdlib-draft-exittrain); --objectives '' trains none")
    ap.add_argument("--sweep", action="store_true",
                    help="first choose lr and lambda_exit for the exit objective on held-back train prompts")
    ap.add_argument("--sweep-lrs", default="1e-4,3e-4")
    ap.add_argument("--sweep-lambdas", default="8,32,128")
    ap.add_argument("--sweep-steps", type=int, default=60)
    ap.add_argument("--val-prompts", type=int, default=5, help="train prompts held back for the sweep")
    return ap


def parse_args() -> argparse.Namespace:
    args = build_parser().parse_args()
    if args.distilled_from and not args.init_draft:
        raise SystemExit("--distilled-from goes with --init-draft (the warm start that run saved)")
    if args.kind:
        if args.draft:
            raise SystemExit("--kind picks the pair's own drafter of that kind: give --kind or --draft, not both")
        args.draft = shipped_drafter(args.pair, args.kind)
    return args


def shipped_drafter(pair: str | None, kind: str) -> str:
    """The folder of the named pair's shipped drafter of `kind` (read from the folders' configs)."""
    from tevviz.engine.draft.drafters import folder_kind

    named = named_pair(pair or DEFAULT_PAIR)
    found = {name: path for name, path in named.drafter_paths().items() if folder_kind(path).name == kind}
    if not found:
        kinds = {name: folder_kind(path).name for name, path in named.drafter_paths().items()}
        raise SystemExit(f"--kind {kind}: the {named.name} pair ships no {kind} drafter here (it has {kinds})")
    return str(next(iter(found.values())))


def train_prompts(args: argparse.Namespace, pair: ModelPair) -> list[list[int]]:
    """The train prompts' token ids (of --prompts, else of the named pair's file; chat rows through the template), or
    with --corpus-contexts random windows of the stdlib training files."""
    path = args.prompts or (named_pair(args.pair).split_path("train") if args.pair else None)
    train_rows = load_prompts(path, "train")[: args.train_limit]
    prompts = [encode_prompt(pair.tokenizer, r["prompt"], chat=bool(r.get("chat"))) for r in train_rows]
    if args.corpus_contexts:
        # Many short contexts from the training files (never the held-out files the eval prompts come from).
        import random

        from tevviz.recipes.demo_pair import encode_corpus, stdlib_files

        stream = encode_corpus(pair.tokenizer, stdlib_files()[0]).tolist()
        rng = random.Random(args.seed)
        starts = [rng.randrange(len(stream) - args.context_tokens) for _ in range(args.corpus_contexts)]
        prompts = [stream[i : i + args.context_tokens] for i in starts]
    return prompts


def tree_builders(args: argparse.Namespace, pair: ModelPair) -> tuple[BuilderConfig, BuilderConfig]:
    """The evaluation and training trees: best-first for an autoregressive drafter, DDTree's for a block one,
    EAGLE's for an EAGLE-3 head (each kind's own builder)."""
    kind = drafter_kind_of(pair.draft)
    builder = pair_tree(pair, args.budget, args.depth)
    if builder.name == BuilderConfig.name:  # the draft temperature ranks best-first trees' paths
        builder = replace(builder, draft_temperature=args.draft_temperature)
    if not kind.distills and (args.distill_steps or args.sweep):
        raise SystemExit("--distill-steps and --sweep are for drafters with a distillation warm start "
                         f"(autoregressive), not {kind.name} drafters")
    return builder, pair_tree(pair, args.train_budget or args.budget, args.train_depth or args.depth)


@dataclass(frozen=True)
class TrainingData:
    prompts: list  # token ids of the train prompts (with --streams: the recipe's prompts)
    streams: list  # (prompt, continuation) pairs; empty when nothing trains
    temperatures: list[float] | None  # each stream's collection temperature (None with --streams)
    contexts: list  # the training contexts cut from the streams


def collected_streams(args: argparse.Namespace, pair: ModelPair, prompts: list, temps: list[float]) -> list:
    """The target's continuations of `prompts`, collected, or loaded from --stream-cache (settings checked)."""
    key = {k: vars(args)[k] for k in ("pair", "target", "draft", "prompts", "corpus_contexts", "context_tokens",
                                        "stream_temperatures", "collect_tokens", "seed")}
    cache = Path(args.stream_cache) if args.stream_cache else None
    if cache is not None and cache.exists():
        saved = json.loads(cache.read_text())
        if saved["key"] != key:
            raise SystemExit(f"--stream-cache {cache} was collected with other settings: {saved['key']}")
        return [tuple(s) for s in saved["streams"]]
    streams = collect_mixed_streams(pair, prompts, temps, args.collect_tokens, args.seed)
    if cache is not None:
        cache.write_text(json.dumps({"key": key, "streams": streams}))
    return streams


def training_contexts(args: argparse.Namespace, pair: ModelPair, objectives: list[str]) -> TrainingData:
    """Train prompts, the target's streams from them (or a recipe's, with --streams) and the contexts cut from them."""
    prompts = train_prompts(args, pair)
    t0 = time.perf_counter()
    temps = [float(x) for x in args.stream_temperatures.split(",")]
    if not objectives:
        streams = []  # nothing to train: only evaluations
    elif args.streams:
        import torch

        # The recipe's answers are the target's own greedy and T = 1 continuations of held-in prompts.
        rows = torch.load(args.streams, weights_only=False)["train"][: args.stream_limit]
        streams = [(list(r["prompt"]), list(r["answer"])) for r in rows]
        prompts = [s[0] for s in streams]
    else:
        streams = collected_streams(args, pair, prompts, temps)
    stream_temps = None if args.streams else mixed_temperatures(len(streams), temps)
    contexts = contexts_from_streams(streams, temperatures=stream_temps)
    print(f"{len(contexts)} training contexts from {len(prompts)} prompts ({time.perf_counter() - t0:.0f} s)")
    return TrainingData(prompts, streams, stream_temps, contexts)


def held_out_eval(args: argparse.Namespace, builder: BuilderConfig, eval_prompts: list) -> Callable[..., dict]:
    """held_out(pair, prompts=eval_prompts): a pair's results at each --eval-temperatures, keyed T0, T1, ..."""

    def held_out(p: ModelPair, prompts=eval_prompts) -> dict:
        return {f"T{t:g}": evaluate(p, prompts, t, builder, args.max_new_tokens).to_dict()
                for t in map(float, args.eval_temperatures.split(","))}

    return held_out


def sweep(args: argparse.Namespace, pair: ModelPair, data: TrainingData, train_builder: BuilderConfig,
          held_out: Callable[..., dict]) -> list[dict]:
    """Validation tau of the exit objective over --sweep-lrs x --sweep-lambdas, the original drafter first."""
    # Hyper-parameters are chosen on train prompts held back from training, never on the eval split.
    k = args.val_prompts
    fit = contexts_from_streams(data.streams[:-k], temperatures=data.temperatures and data.temperatures[:-k])
    val = data.prompts[-k:]
    base = held_out(pair, val)
    rows = [{"lr": 0.0, "lambda_exit": 0.0, "val_tau_T0": base["T0"]["tau"], "val_tau_T1": base["T1"]["tau"],
             "val_gain": 0.0}]  # the original drafter (lr 0: not trained)
    for lr in [float(x) for x in args.sweep_lrs.split(",")]:
        for lam in [float(x) for x in args.sweep_lambdas.split(",")]:
            cfg = TrainConfig(objective="exit", lambda_exit=lam, lr=lr, steps=args.sweep_steps, batch=args.batch,
                              builder=train_builder, token_labels=args.token_labels, seed=args.seed)
            trainer = make_trainer(pair, fit, cfg)
            for _ in range(cfg.steps):
                trainer.step()
            res = held_out(ModelPair(pair.target, trainer.trained_draft(), pair.tokenizer, "", ""), val)
            score = (res["T0"]["tau"] / base["T0"]["tau"] + res["T1"]["tau"] / base["T1"]["tau"]) / 2 - 1
            rows.append({"lr": lr, "lambda_exit": lam, "val_tau_T0": res["T0"]["tau"],
                         "val_tau_T1": res["T1"]["tau"], "val_gain": score})
            print(table([rows[-1]], list(rows[-1])), flush=True)
    return rows


def earlier_row(args: argparse.Namespace, path: str, row: str, flag: str, warm_start: str | None = None) -> dict:
    """Row `row` of an earlier run's JSON, refused unless that run evaluated with these settings (and, given
    `warm_start`, saved or started from that folder)."""
    earlier = json.loads(Path(path).read_text())
    same = ("pair", "target", "draft", "dtype", "prompts", "split", "limit", "budget", "depth", "max_new_tokens",
            "seed", "eval_seed", "eval_contexts", "context_tokens", "eval_temperatures", "draft_temperature")
    # Runs from before an option existed ran at its default.
    defaults = build_parser()
    differ = [k for k in same if earlier["args"].get(k, defaults.get_default(k)) != vars(args).get(k)]
    if differ:
        raise SystemExit(f"{flag} {path} evaluated with other settings: {differ}")
    if warm_start is not None and warm_start not in (earlier["args"].get("save_distilled"),
                                                     earlier["args"].get("init_draft")):
        raise SystemExit(f"{flag} {path} evaluated another warm start, not {warm_start}")
    if row not in earlier["results"]:
        raise SystemExit(f"{flag} {path} has no {row!r} row")
    return earlier["results"][row]


def warm_start_drafter(args: argparse.Namespace, pair: ModelPair, streams: list) -> tuple[object, list]:
    """The drafter every objective trains from (None: the pair's own) and the warm start's losses: --init-draft's
    folder, or a dense distillation of --distill-steps steps (saved to --save-distilled)."""
    if args.init_draft:
        return with_draft(pair, args.init_draft, ModelSource(dtype=args.dtype, device=args.device)).draft, []
    if not args.distill_steps:
        return None, []
    from tevviz.commands import distill_stream
    from tevviz.engine.train.distillation import DistillConfig, target_law, warm_start

    dcfg = DistillConfig(steps=args.distill_steps, batch=args.distill_batch, window=args.distill_window,
                         lr=args.distill_lr, seed=args.seed, top_k=args.distill_top_k)
    text = distill_stream(args.distill_text, pair.tokenizer, streams)
    t1, law = time.perf_counter(), None
    if dcfg.top_k:
        law = target_law(pair.target, text, dcfg, pair.draft.get_output_embeddings().weight.shape[0])
        print(f"[distill] the target's top-{dcfg.top_k} law over {law.windows.numel():,} tokens "
              f"({time.perf_counter() - t1:.0f} s)", flush=True)
    init, distill_losses = warm_start(
        pair.target, pair.draft, text, dcfg,
        lambda i, loss: i % max(1, dcfg.steps // 10) == 0 and print(
            f"[distill] step {i}/{dcfg.steps} loss {loss:.3f} ({time.perf_counter() - t1:.0f} s)", flush=True),
        law)
    if args.save_distilled:
        init.save_pretrained(args.save_distilled)
        pair.tokenizer.save_pretrained(args.save_distilled)
    return init, distill_losses


def train_objectives(args: argparse.Namespace, pair: ModelPair, contexts: list, objectives: list[str], init,
                     train_builder: BuilderConfig, held_out: Callable[..., dict]) -> tuple[dict, dict]:
    """Train each objective from the same start (`init`, or the pair's drafter); their held-out results and loss
    curves, both keyed by objective. --save keeps the exit-weight drafter."""
    results, curves = {}, {}
    for objective in objectives:
        cfg = TrainConfig(objective=objective, lambda_exit=args.lambda_exit, lr=args.lr, steps=args.steps,
                          batch=args.batch, builder=train_builder, token_labels=args.token_labels, seed=args.seed,
                          schedule=args.schedule)
        trainer = make_trainer(pair, contexts, cfg, draft=None if init is None else copy.deepcopy(init))
        t1 = time.perf_counter()
        for i in range(cfg.steps):
            s = trainer.step()
            if (i + 1) % max(1, cfg.steps // 10) == 0:
                print(f"[{objective}] step {i + 1}/{cfg.steps} loss {s.loss:.3f} l_tok {s.l_tok:.3f} "
                      f"l_exit {s.l_exit:.3f} C_p {s.C_p:.3f} ({time.perf_counter() - t1:.0f} s)", flush=True)
        curves[objective] = [s.__dict__ for s in trainer.log]
        trained = ModelPair(pair.target, trainer.trained_draft(), pair.tokenizer, pair.target_name, objective)
        results[objective] = held_out(trained)
        if objective == "exit" and args.save:
            save_trained(trained.draft, pair.tokenizer, args.save)
            print(f"saved the exit-weight drafter to {args.save}")
    return results, curves


def report(args: argparse.Namespace, n_eval: int, results: dict, curves: dict, sweep_rows: list[dict],
           distill_losses: list) -> None:
    """Print the settings and the table; write the JSON (and the loss / C_p curves as a figure beside it)."""
    rows = table_rows(results)
    print(f"\nB={args.budget} H={args.depth}, {n_eval} eval prompts x {args.max_new_tokens} tokens, "
          f"{args.steps} steps x {args.batch} contexts, lr {args.lr} ({args.schedule}), "
          f"lambda_exit {args.lambda_exit}, "
          f"{args.token_labels} token labels, streams at T = {args.stream_temperatures}")
    columns = list(dict.fromkeys(k for r in rows for k in r))
    print("gain/SE: paired difference from the original over the same contexts, in standard errors; "
          "vs_token/SE: likewise against token-only")
    print(table(rows, columns))
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=("training loss", "C_p of the step's trees"))
    for name, curve in curves.items():
        fig.add_scatter(x=[c["step"] for c in curve], y=[c["loss"] for c in curve], name=f"{name} loss", row=1, col=1)
        fig.add_scatter(x=[c["step"] for c in curve], y=[c["C_p"] for c in curve], name=f"{name} C_p", row=1, col=2)
    write("exittrain_ablation", args, {"rows": rows, "results": results, "curves": curves, "sweep": sweep_rows,
                                    "distill_losses": distill_losses}, fig)


def main() -> None:
    if sys.argv[1:2] == ["--merge"]:
        # `--merge A.json B.json [--out M.json]`: the table of runs that split the objectives between them.
        m = argparse.ArgumentParser(prog="exittrain_ablation.py --merge")
        m.add_argument("--merge", nargs="+", required=True, metavar="RUN.json")
        m.add_argument("--out", default=None)
        a = m.parse_args()
        return merge(a.merge, a.out)
    args = parse_args()
    pair, eval_prompts = setup(args)
    if args.eval_contexts:
        eval_prompts = held_out_windows(pair.tokenizer, args.eval_contexts, args.context_tokens,
                                        args.seed + 1 if args.eval_seed is None else args.eval_seed)
    builder, train_builder = tree_builders(args, pair)
    objectives = [o for o in args.objectives.split(",") if o]
    data = training_contexts(args, pair, objectives)
    held_out = held_out_eval(args, builder, eval_prompts)

    sweep_rows = []
    if args.sweep:
        sweep_rows = sweep(args, pair, data, train_builder, held_out)
        best = max((r for r in sweep_rows if r["lr"] > 0), key=lambda r: r["val_gain"])
        args.lr, args.lambda_exit = best["lr"], best["lambda_exit"]
        print(f"sweep: chose lr {args.lr} and lambda_exit {args.lambda_exit}\n"
              + table(sweep_rows, list(sweep_rows[0])))

    if args.original_from:
        results = {"original": earlier_row(args, args.original_from, "original", "--original-from")}
    else:
        results = {"original": held_out(pair)}
    for item in filter(None, args.also.split(",")):
        name, _, folder = item.partition("=")
        results[name] = held_out(with_draft(pair, folder, ModelSource(dtype=args.dtype, device=args.device)))
    init, distill_losses = warm_start_drafter(args, pair, data.streams)
    if init is not None and args.distilled_from:
        results["distilled"] = earlier_row(args, args.distilled_from, "distilled", "--distilled-from", args.init_draft)
    elif init is not None:
        results["distilled"] = held_out(ModelPair(pair.target, init, pair.tokenizer, pair.target_name, "distilled"))
    trained, curves = train_objectives(args, pair, data.contexts, objectives, init, train_builder, held_out)
    results.update(trained)
    report(args, len(eval_prompts), results, curves, sweep_rows, distill_losses)


if __name__ == "__main__":
    main()
