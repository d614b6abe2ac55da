"""`tevviz train` (ExitTrain, with an optional distillation warm start) and `tevviz eval` (held-out tau and E[L])."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..engine.errors import TevvizError
from ..options import drafter_tree, source_from_args
from .common import Interrupt, UntilStopped, numbers, prompt_ids, prompt_rows, set_threads, settle_threads

TEXT_SUFFIXES = (".txt", ".md", ".py", ".rst")

def distill_files(spec: str | None) -> list[Path] | None:
    """--distill-text's files (checked before any model loads); None for the default or 'stdlib-train'."""
    if spec is None or spec == "stdlib-train":
        return None
    files = []
    for part in filter(None, spec.split(",")):
        path = Path(part)
        if path.is_dir():
            files += sorted(f for f in path.rglob("*") if f.suffix in TEXT_SUFFIXES and f.is_file())
        elif path.is_file():
            files.append(path)
        else:
            raise TevvizError(f"--distill-text: no file or folder {part!r}")
    if not files:
        raise TevvizError(f"--distill-text {spec!r} holds no {' '.join(TEXT_SUFFIXES)} files")
    return files

def distill_stream(spec: str | None, tokenizer, streams: list[tuple[list[int], list[int]]]) -> list[int]:
    """The warm start's text as one token list, texts joined by the end-of-text token: --distill-text's files,
    the embedded pair's training files ('stdlib-train'), or by default the collected prompts and continuations."""
    from ..recipes.demo_pair import encode_corpus, stdlib_files

    files = stdlib_files()[0] if spec == "stdlib-train" else distill_files(spec)
    if files is not None:
        return encode_corpus(tokenizer, files).tolist()
    sep = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    return [t for prompt, cont in streams for t in list(prompt) + list(cont) + sep]

def distilled_kinds() -> str:
    """The drafter kinds the distillation warm start applies to, as words."""
    from ..engine.draft.drafters import drafter_kinds

    return " and ".join(k.name for k in drafter_kinds().values() if k.distills)

def cmd_train(args) -> int:
    from tqdm.auto import tqdm

    from ..engine.decode.streams import collect_mixed_streams
    from ..engine.draft.builders import BuilderConfig
    from ..engine.draft.drafters import article, folder_kind, make_trainer, save_drafter
    from ..engine.train.distillation import DistillConfig, warm_start
    from ..engine.train.exittrain import TrainConfig, contexts_from_streams, mixed_temperatures
    from ..files import atomic_folder, check_folder_writable

    defaults, dd = TrainConfig(), DistillConfig()
    dcfg = DistillConfig(steps=args.distill_steps, lr=dd.lr if args.distill_lr is None else args.distill_lr,
                         window=args.distill_window or dd.window, seed=args.seed, top_k=args.distill_top_k)
    # A drafter trains on the trees it decodes with (a block drafter: DDTree's, as deep as its block allows).
    own_kind, depth = drafter_tree(args, args.depth)
    drafter = folder_kind(source_from_args(args).resolved()[1])
    if dcfg.steps and not drafter.distills:
        raise TevvizError(f"--distill-steps warms up {distilled_kinds()} drafters; {article(drafter.name)} "
                          f"{drafter.name} drafter's warm start is its own recipe (tevviz pair train-drafter NAME "
                          f"--kind {drafter.name})")
    cfg = TrainConfig(objective=args.objective, lambda_exit=defaults.lambda_exit if args.lambda_exit is None
                      else args.lambda_exit, lr=defaults.lr if args.lr is None else args.lr, steps=args.steps,
                      batch=args.batch, builder=BuilderConfig(name=own_kind, budget=args.budget, depth=depth),
                      token_labels=args.token_labels or defaults.token_labels, seed=args.seed, schedule=args.schedule)
    temps = numbers(args.collect_temperatures, "--collect-temperatures")
    if any(not 0 <= t <= 10 for t in temps):
        raise TevvizError("--collect-temperatures must be in [0, 10]")
    distill_files(args.distill_text)
    out = check_folder_writable(args.out, "--out")
    rows = prompt_rows(args)
    set_threads(args.threads)
    pair = source_from_args(args).load()
    settle_threads(pair, args.threads)
    prompts = prompt_ids(rows, pair)
    args.started = True
    print(f"collecting target continuations of {len(prompts)} prompts ...", file=sys.stderr)
    streams = collect_mixed_streams(pair, prompts, temps, args.collect_tokens, args.seed)
    distilled = None
    if dcfg.steps:
        text = distill_stream(args.distill_text, pair.tokenizer, streams)
        print(f"distillation warm start: {dcfg.steps} steps on {len(text):,} tokens ...", file=sys.stderr)
        dbar = tqdm(total=dcfg.steps, desc="distill", file=sys.stderr)
        distilled, _ = warm_start(pair.target, pair.draft, text, dcfg,
                                  lambda i, loss: (dbar.update(1), dbar.set_postfix(loss=f"{loss:.3f}")))
        dbar.close()
    trainer = make_trainer(pair, contexts_from_streams(streams, temperatures=mixed_temperatures(len(streams), temps)),
                           cfg, draft=distilled)
    with Interrupt("training step") as stop:
        bar = tqdm(range(cfg.steps), desc=f"ExitTrain ({cfg.objective})", file=sys.stderr)
        for _ in bar:
            if stop():
                break
            s = trainer.step()
            bar.set_postfix(loss=f"{s.loss:.3f}", l_tok=f"{s.l_tok:.3f}", l_exit=f"{s.l_exit:.3f}", C_p=f"{s.C_p:.3f}")
        bar.close()
    done = len(trainer.log)
    if done == 0 < cfg.steps:
        print("interrupted before the first ExitTrain step: nothing written", file=sys.stderr)
        return 130
    log = {"config": {k: str(v) for k, v in cfg.__dict__.items()},
           "distill": {**{k: v for k, v in dcfg.__dict__.items()}, "text": args.distill_text or "the continuations"},
           "data": {"prompts": str(args.prompts or "the pair's prompt file"), "split": args.split,
                    "collect_temperatures": temps, "collect_tokens": args.collect_tokens},
           "log": [s.__dict__ for s in trainer.log]}
    if done < cfg.steps:
        log |= {"interrupted": True, "steps_done": done}
    with atomic_folder(out) as tmp:
        save_drafter(trainer.trained_draft(), pair.tokenizer, tmp)
        (tmp / "exittrain_log.json").write_text(json.dumps(log, indent=1))
    if done < cfg.steps:
        print(f"interrupted after {done} of {cfg.steps} ExitTrain steps: wrote {out} with the steps done "
              "(marked interrupted in exittrain_log.json)", file=sys.stderr)
        return 130
    print(f"wrote {out}", file=sys.stderr)
    return 0

def cmd_eval(args) -> int:
    from ..engine.draft.builders import BuilderConfig
    from ..engine.train.evaluation import evaluate

    temps = numbers(args.temperatures, "--temperatures")
    own_kind, depth = drafter_tree(args, args.depth)  # as in decode and train
    builder = BuilderConfig(name=own_kind, budget=args.budget, depth=depth, children=args.children, width=args.width,
                            draft_temperature=args.draft_temperature)
    rows = prompt_rows(args)
    set_threads(args.threads)
    pair = source_from_args(args).load()
    settle_threads(pair, args.threads)
    prompts = prompt_ids(rows, pair)
    args.started = True
    results, counts = [], []
    bar = eval_bar(len(temps) * len(prompts))
    with Interrupt("prompt") as stop:
        for t in temps:
            # A Ctrl-C (or SIGTERM) ends the loop over prompts after the one in hand: evaluate() sums up the prompts
            # done; a second one stops at once, keeping the temperatures finished before.
            given = UntilStopped(prompts, stop)
            bar.set_postfix_str(f"T = {t:g}")
            try:
                r = evaluate(pair, given, t, builder, args.max_new_tokens, progress=lambda i, n: bar.update())
            except KeyboardInterrupt:
                break
            if given.done:
                results.append(r)
                counts.append(given.done)
            if stop():
                break
    bar.close()
    interrupted = stop.requested and (len(results) < len(temps) or counts[-1] < len(prompts))
    if args.json:
        print(json.dumps([{**r.to_dict(), "prompts": n} for r, n in zip(results, counts)]))
    else:
        print_eval(pair, args, results, counts, len(prompts))
    if interrupted:
        done = ", ".join(f"T = {r.temperature:g} on {n} of {len(prompts)} prompts" for r, n in zip(results, counts))
        print(f"interrupted: {done or 'no prompt finished'}", file=sys.stderr)
        return 130
    return 0

def eval_bar(total: int):
    """Prompts decoded so far with an ETA, on a terminal's standard error (nothing elsewhere: logs stay clean)."""
    from tqdm import tqdm

    return tqdm(total=total, desc="eval", unit="prompt", file=sys.stderr, disable=not sys.stderr.isatty(),
                leave=False)


def print_eval(pair, args, results: list, counts: list[int], total: int) -> None:
    from ..engine.analysis.eval_table import eval_depths, eval_means
    from ..render.table import text

    title = (f"draft {pair.draft_name}  target {pair.target_name}  B={args.budget} H={args.depth} K={args.children} "
             f"W={args.width}  {total} prompts")
    print("\n".join([*text(eval_means(results, counts, title)), "", *text(eval_depths(results))]))
