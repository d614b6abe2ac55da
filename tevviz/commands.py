"""The handlers behind `tevviz COMMAND` (parsed in `tevviz.cli`): each reads its arguments, loads what it
needs and calls the engine. `args.started = True` marks where reading input ends and the work begins, so
that a failure after it exits 1 and bad input before it exits 2."""

from __future__ import annotations

import json
import os
import runpy
import signal
import sys
import threading
from pathlib import Path

from .engine.errors import TevvizError
from .options import decode_config_from_args, source_from_args


def _numbers(text: str, flag: str) -> list[float]:
    """A comma-separated list of numbers from a flag, or a one-line error naming the flag."""
    try:
        return [float(x) for x in text.split(",")]
    except ValueError:
        raise TevvizError(f"{flag} must be numbers separated by commas, got {text!r}") from None


def read_prompt(args) -> str:
    """The prompt text of --prompt (- for standard input) or --prompt-file."""
    if args.prompt_file is not None:
        try:
            return Path(args.prompt_file).expanduser().read_text(encoding="utf-8")
        except OSError as e:
            raise TevvizError(f"cannot read --prompt-file {args.prompt_file!r}: {e.strerror}") from None
    if args.prompt == "-":
        return sys.stdin.read()
    return args.prompt


def use_chat(args, tokenizer) -> bool:
    """--chat / --no-chat, or by default whether the tokenizer has a chat template."""
    from .engine.session import has_chat_template

    return has_chat_template(tokenizer) if args.chat is None else args.chat


class Interrupt:
    """Ctrl-C as a request: the first asks the work to stop at the end of its round or step (`stop()` turns true),
    the second stops at once (KeyboardInterrupt). Signals reach the main thread only: elsewhere it does nothing."""

    def __init__(self, what: str):
        self.what, self.requested, self._old = what, False, None

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)

    def _handle(self, signum, frame) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        print(f"\nstopping at the end of this {self.what} (Ctrl-C again to stop at once) ...", file=sys.stderr,
              flush=True)

    def __call__(self) -> bool:
        return self.requested


class UntilStopped:
    """A list's items handed out until `stop()` turns true, so a loop over it ends after the item in hand;
    `len` stays the list's (for progress), `done` counts the items handed out."""

    def __init__(self, items: list, stop):
        self.items, self.stop, self.done = items, stop, 0

    def __iter__(self):
        for item in self.items:
            if self.stop():
                return
            self.done += 1
            yield item

    def __len__(self) -> int:
        return len(self.items)


def set_threads(n: int | None) -> None:
    """--threads: torch's CPU threads for the models; by default the app's choice, one fewer than torch's own."""
    import torch

    from .app.model_thread import TORCH_DEFAULT_THREADS, app_threads

    # A thread on every core loses to anything else running (README.md, *Use*, has a measured case).
    n = app_threads(n, TORCH_DEFAULT_THREADS)
    if n is not None:
        torch.set_num_threads(n)


def _decode_rounds(session, stop, quiet: bool) -> None:
    """Step `session` until it is done or `stop()`; a progress line on the terminal unless `quiet`."""
    from tqdm import tqdm

    bar = tqdm(total=session.cfg.max_new_tokens, unit="tok", desc="decoding", file=sys.stderr, disable=quiet,
               leave=False, dynamic_ncols=True)
    try:
        while not session.done and not stop():
            session.step()
            bar.set_postfix(rounds=session.round_count, refresh=False)
            bar.update(len(session.generated) - bar.n)
    finally:
        bar.close()


def decode_summary(session, seconds: float, cfg, optimal: bool) -> dict:
    """What `tevviz decode` prints (and --json holds): text, tokens, tau, the mean expected block length, tokens/s,
    stage times."""
    from .engine.summary import bounded_rounds, summarize

    s = summarize(session.rounds)
    out = {
        "text": session.pair.tokenizer.decode(session.generated),
        "token_ids": session.generated,
        "rounds": s.rounds,
        "tau": s.tau,
        "mean_expected_length": s.mean_expected_length,
        "tokens_per_s": len(session.generated) / seconds if seconds > 0 else 0.0,
        "stage_ms": s.stage_ms,
    }
    if cfg.builder.auto and session.rounds:
        sized = [r.sizing for r in session.rounds]
        out["auto_budget"] = {"mean_B": sum(z.B for z in sized) / len(sized),
                              "mean_H": sum(z.H for z in sized) / len(sized),
                              "undrafted_rounds": sum(not z.drafted for z in sized), "last": sized[-1].to_dict()}
        if cfg.builder.kind == "mixed":
            out["auto_budget"]["chain_rounds"] = sum(bool(z.chain) for z in sized)
    if optimal and session.rounds:
        out |= {"mean_optimal_ceiling": 1 + s.mean_optimal, "mean_gap": s.mean_gap,
                "bounded_rounds": bounded_rounds(session.rounds),
                "optimal_ms": sum(r.optimal.ms for r in session.rounds) / len(session.rounds)}
    if session.notice:
        out["notice"] = session.notice
    return out


def _timed_baseline(pair, prompt_ids, cfg, out: dict) -> None:
    """--baseline: plain decoding's tokens/s and the speed-up; a Ctrl-C there leaves them out, keeping the rest."""
    from .engine import autoregressive

    try:
        base = autoregressive(pair, prompt_ids, cfg)
    except KeyboardInterrupt:
        print("baseline interrupted: left out", file=sys.stderr)
        return
    out["baseline_tokens_per_s"] = base.tokens_per_s
    out["speedup"] = out["tokens_per_s"] / base.tokens_per_s if base.tokens_per_s else None


def _export(session, prompt: str, path: Path, interrupted: bool) -> str:
    """Write the session JSON (its meta marked when interrupted); the reason nothing was written, or ""."""
    from .engine.io import export_session
    from .files import atomic_write_json

    data = export_session(session, prompt)
    if interrupted:
        data["meta"] |= {"interrupted": True, "interrupted_after_rounds": session.round_count}
    try:
        atomic_write_json(path, data)
    except OSError as e:
        return f"cannot write --export {str(path)!r} ({e.strerror or e}): nothing was written there"
    return ""


def cmd_decode(args) -> int:
    import time

    from .engine import DecodeSession, encode_prompt
    from .files import check_writable

    cfg = decode_config_from_args(args)
    prompt = read_prompt(args)
    # Checked before any model loads: a finished decode must not be lost to a path it cannot write.
    export = check_writable(args.export, "--export") if args.export else None
    set_threads(args.threads)
    pair = source_from_args(args).load()
    chat = use_chat(args, pair.tokenizer)
    prompt_ids = encode_prompt(pair.tokenizer, prompt, chat=chat)
    args.started = True
    with Interrupt("round") as stop:
        # The clock starts before the session's prefill; the baseline below leaves its prefill out too.
        t0 = time.perf_counter()
        session = DecodeSession(pair, prompt_ids, cfg)
        t_prefill = time.perf_counter() - t0
        _decode_rounds(session, stop, quiet=args.json or not sys.stderr.isatty())
    # The optimal trees are analysis, not decoding: their time is not the decoder's.
    seconds = time.perf_counter() - t0 - t_prefill - sum(r.optimal.ms for r in session.rounds if r.optimal) / 1e3
    interrupted = stop.requested and not session.done
    out = decode_summary(session, seconds, cfg, args.optimal)
    if args.baseline and not interrupted:
        _timed_baseline(pair, prompt_ids, cfg, out)
    failure = _export(session, prompt, export, interrupted) if export is not None else ""
    if interrupted:
        out["interrupted"] = True
    if args.json:
        print(json.dumps(out))
    else:
        print_decoded(args, prompt, chat, out, session)
    if interrupted:
        wrote = f"; wrote {export} (marked interrupted)" if export is not None and not failure else ""
        print(f"interrupted after {session.round_count} rounds and {len(session.generated)} tokens{wrote}",
              file=sys.stderr)
    if failure:
        print(f"tevviz decode: error: {failure}; the text and statistics are above", file=sys.stderr)
        return 1
    return 130 if interrupted else 0


def print_decoded(args, prompt: str, chat: bool, out: dict, session) -> None:
    """The text on standard output; statistics, sizing and notes on standard error."""
    # A chat answer is a message of its own, not a continuation of the prompt.
    print(prompt.rstrip() + "\n\n" + out["text"] if chat else prompt + out["text"])
    print("-" * 60, file=sys.stderr)
    tau = "-" if out["tau"] is None else f"{out['tau']:.2f}"
    expected = "-" if out["mean_expected_length"] is None else f"{out['mean_expected_length']:.2f}"
    speedup = out.get("speedup")
    print(f"rounds {out['rounds']}  tokens {len(out['token_ids'])}  tau {tau}  mean E[L] {expected}  "
          f"{out['tokens_per_s']:.1f} tok/s" + (f"  speed-up {speedup:.2f}x" if speedup else ""), file=sys.stderr)
    print("stage ms: " + "  ".join(f"{k} {v:.1f}" for k, v in out["stage_ms"].items()), file=sys.stderr)
    if "auto_budget" in out:
        from .engine.round_time import Fit, describe

        a = out["auto_budget"]
        fit = Fit.from_sizing(a["last"])
        print(f"auto budget: mean B {a['mean_B']:.1f}, mean H {a['mean_H']:.1f}, {a['undrafted_rounds']} of "
              f"{out['rounds']} rounds without a draft; cost model: {describe(fit)}", file=sys.stderr)
        if "chain_rounds" in a:
            print(f"mixed: {a['chain_rounds']} sampled chains (speculative) and "
                  f"{out['rounds'] - a['chain_rounds']} best-first trees ({session.cfg.verifier}); measured expected "
                  f"tokens per ms: chains {a['last']['chain_rate']:.3f}, trees {a['last']['tree_rate']:.3f}",
                  file=sys.stderr)
    if "mean_optimal_ceiling" in out:
        gap = ("- (no round it bounds)" if out["mean_gap"] is None
               else f"{out['mean_gap']:.2f} over the {out['bounded_rounds']} rounds it bounds")
        print(f"optimal tree: mean 1+C_p* {out['mean_optimal_ceiling']:.2f}  mean drafter gap {gap}  "
              f"{out['optimal_ms']:.0f} ms a round to compute", file=sys.stderr)
    if session.notice:
        print("note: " + session.notice, file=sys.stderr)


def load_input(path: str):
    """A session/round JSON or DDTree trace, its errors naming the file rather than "file" or a bare field."""
    from .engine.io import load

    try:
        return load(path)
    except TevvizError as e:
        text = str(e)
        if text.startswith(f"{path}:"):
            raise
        raise TevvizError(f"{path}: {text.removeprefix('file: ')}") from None


def cmd_inspect(args) -> int:
    from .engine.summary import summarize

    imported = load_input(args.file)
    s = summarize(imported.rounds)
    rows = [{"round": r.index, "nodes": r.size, "depth": max(r.depths), "exit": r.exit_node, "L": r.block_length,
             "expected_length": r.expected_length,
             "optimal_ceiling": None if r.optimal is None else 1 + r.optimal.C_p} for r in imported.rounds]
    if args.json:
        print(json.dumps({"file": args.file, "kind": imported.kind, "summary": s.to_dict(), "rounds": rows}))
        return 0
    tau = "-" if s.tau is None else f"{s.tau:.3f}"
    print(f"{args.file}: {imported.kind}, {s.rounds} rounds, tau {tau}, "
          + (f"mean E[L] {s.mean_expected_length:.3f}" if s.mean_expected_length is not None else "no target scores"))
    if s.optimal_rounds:
        gap = "- (no round it bounds)" if s.mean_gap is None else f"{s.mean_gap:.3f}"
        print(f"optimal trees in {s.optimal_rounds} rounds: mean 1+C_p* {1 + s.mean_optimal:.3f}, "
              f"mean drafter gap {gap}")
    print(f"{'round':>5} {'nodes':>6} {'depth':>5} {'exit':>5} {'L':>3} {'E[L]':>7} {'1+C_p*':>7}")
    cell = lambda x: "      -" if x is None else f"{x:7.3f}"
    for r, rec in zip(rows, imported.rounds):
        # a sampled chain under speculative sampling: 1 + C_p* is the best fixed tree of its budget, no ceiling
        mark = "" if rec.optimal is None or rec.optimal_bounds else " (best fixed tree, not a ceiling)"
        print(f"{r['round']:>5} {r['nodes']:>6} {r['depth']:>5} {r['exit']:>5} {r['L']:>3} {cell(r['expected_length'])} "
              f"{cell(r['optimal_ceiling'])}{mark}")
    return 0


def cmd_scan(args) -> int:
    from .scan import cmd_scan as scan

    return scan(args)


def cmd_report(args) -> int:
    """One offline HTML page of a session/round JSON, a DDTree trace or a scan folder."""
    from .files import check_writable

    out = Path(args.out) if args.out else Path(args.file).with_suffix(".html")
    if Path(args.file).is_dir():  # a scan folder (tevviz scan -o DIR)
        from .engine.scan_files import open_scan
        from .render.scan_report import write_scan_report

        check_writable(out, "--out")
        data = open_scan(args.file)
        write, what = (lambda: write_scan_report(data, out, args.title)), f"{len(data.index)} prompts"
    else:
        from .render.report import write_report

        imported = load_input(args.file)
        if out.resolve() == Path(args.file).resolve():
            raise TevvizError(f"--out {str(out)!r} would overwrite the input file")
        check_writable(out, "--out")
        write, what = (lambda: write_report(imported, out, args.title)), f"{len(imported.rounds)} rounds"
    args.started = True
    try:
        size = write()
    except OSError as e:
        raise TevvizError(f"cannot write {str(out)!r}: {e.strerror}") from None
    print(f"wrote {out}: {what}, {size / 1e6:.1f} MB", file=sys.stderr)
    return 0


PORTS = (1, 65535)


def server_settings(args) -> dict:
    """Flags first, then Gradio's own environment variables, then this machine only and no share link."""
    port = args.server_port
    if port is None and os.environ.get("GRADIO_SERVER_PORT"):
        try:
            port = int(os.environ["GRADIO_SERVER_PORT"])
        except ValueError:
            raise TevvizError(f"GRADIO_SERVER_PORT must be a number, got {os.environ['GRADIO_SERVER_PORT']!r}") from None
    share = args.share
    if share is None:
        share = os.environ.get("GRADIO_SHARE", "").strip().lower() in ("1", "true", "yes")
    return {"server_name": args.server_name or os.environ.get("GRADIO_SERVER_NAME") or "127.0.0.1",
            "server_port": port, "share": share}


def check_server(name: str, port: int | None, port_flag: str) -> None:
    """Fail in one line, before any model loads, when the app could not serve on `name`:`port`."""
    import errno
    import socket

    if port is not None and not PORTS[0] <= port <= PORTS[1]:
        raise TevvizError(f"{port_flag} must lie in [{PORTS[0]}, {PORTS[1]}], got {port}")
    try:
        family, kind, proto, _, address = socket.getaddrinfo(name, port or 0, type=socket.SOCK_STREAM)[0]
    except (socket.gaierror, UnicodeError) as e:
        why = getattr(e, "strerror", None) or e
        raise TevvizError(f"--server-name {name!r}: no such address here ({why})") from None
    # The test Gradio makes itself: a bind with SO_REUSEADDR fails only where a server listens. Without a port, any
    # free one tells whether the address is this machine's; Gradio then takes 7860 or the next free port itself.
    with socket.socket(family, kind, proto) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(address)
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise TevvizError(f"port {port} on {name} is in use: give {port_flag} a free port, or leave it out "
                                  "for 7860 or the next free one") from None
            where = f"{name} port {port}" if port is not None else name
            raise TevvizError(f"cannot serve on {where} ({e.strerror}): change --server-name"
                              + (f" or {port_flag}" if port is not None else "")) from None


def cmd_app(args) -> int:
    settings = server_settings(args)
    check_server(settings["server_name"], settings["server_port"],
                 "--server-port" if args.server_port is not None else "GRADIO_SERVER_PORT")
    if args.threads is not None and args.threads < 1:
        raise TevvizError(f"--threads must be at least 1, got {args.threads}")
    from .app import launch  # gradio: a second or more, after the checks that need none

    try:
        launch(source=source_from_args(args), model_dirs=tuple(args.model_dir), preload=True, threads=args.threads,
               **settings)
    except OSError as e:
        # Gradio's own failure to bind (a port taken since the check above) or a model file that cannot be read.
        if "empty port" in str(e):
            raise TevvizError(f"port {settings['server_port']} on {settings['server_name']} is in use: pass "
                              "--server-port with a free port") from None
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise TevvizError(f"the app could not start: {first}") from None
    return 0


def _prompt_rows(args) -> list[dict]:
    """The prompts of --split: of --prompts, else of the pair's file that holds that split (a split the pair has
    not is refused, naming those it has); read before any model loads."""
    from .engine.pairs import DEFAULT_PAIR, named_pair
    from .prompts import load_prompts

    if args.prompts is not None:
        return load_prompts(args.prompts, args.split)
    return load_prompts(named_pair(args.pair or DEFAULT_PAIR).split_path(args.split), args.split)


def _prompt_ids(rows: list[dict], pair) -> list[list[int]]:
    """Token ids of prompt rows, chat rows through the template."""
    from .engine.session import encode_prompt

    return [encode_prompt(pair.tokenizer, r["prompt"], chat=bool(r.get("chat"))) for r in rows]


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
    from .recipes.demo_pair import encode_corpus, stdlib_files

    files = stdlib_files()[0] if spec == "stdlib-train" else distill_files(spec)
    if files is not None:
        return encode_corpus(tokenizer, files).tolist()
    sep = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    return [t for prompt, cont in streams for t in list(prompt) + list(cont) + sep]


def cmd_train(args) -> int:
    from tqdm.auto import tqdm

    from .engine.block_exittrain import make_trainer, save_trained
    from .engine.builders import BuilderConfig
    from .engine.distillation import DistillConfig, warm_start
    from .engine.exittrain import TrainConfig, contexts_from_streams, mixed_temperatures
    from .engine.models import drafter_defaults
    from .engine.streams import collect_mixed_streams
    from .files import atomic_folder, check_folder_writable

    defaults, dd = TrainConfig(), DistillConfig()
    dcfg = DistillConfig(steps=args.distill_steps, lr=dd.lr if args.distill_lr is None else args.distill_lr,
                         window=args.distill_window or dd.window, seed=args.seed, top_k=args.distill_top_k)
    # A block drafter trains on the trees it decodes with: DDTree's, as deep as its block allows.
    own_kind, own_depth = drafter_defaults(source_from_args(args).resolved()[1])
    depth = min(args.depth, own_depth) if own_kind == "ddtree" and own_depth else args.depth
    if own_kind == "ddtree" and dcfg.steps:
        raise TevvizError("--distill-steps warms up autoregressive drafters; a block drafter's warm start is its own "
                          "recipe (tevviz pair train-drafter NAME --kind block)")
    cfg = TrainConfig(objective=args.objective, lambda_exit=defaults.lambda_exit if args.lambda_exit is None
                      else args.lambda_exit, lr=defaults.lr if args.lr is None else args.lr, steps=args.steps,
                      batch=args.batch, builder=BuilderConfig(kind=own_kind, budget=args.budget, depth=depth),
                      token_labels=args.token_labels or defaults.token_labels, seed=args.seed, schedule=args.schedule)
    temps = _numbers(args.collect_temperatures, "--collect-temperatures")
    if any(not 0 <= t <= 10 for t in temps):
        raise TevvizError("--collect-temperatures must be in [0, 10]")
    distill_files(args.distill_text)
    out = check_folder_writable(args.out, "--out")
    rows = _prompt_rows(args)
    set_threads(args.threads)
    pair = source_from_args(args).load()
    prompts = _prompt_ids(rows, pair)
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
        save_trained(trainer.trained_draft(), pair.tokenizer, tmp)
        (tmp / "exittrain_log.json").write_text(json.dumps(log, indent=1))
    if done < cfg.steps:
        print(f"interrupted after {done} of {cfg.steps} ExitTrain steps: wrote {out} with the steps done "
              "(marked interrupted in exittrain_log.json)", file=sys.stderr)
        return 130
    print(f"wrote {out}", file=sys.stderr)
    return 0


def cmd_eval(args) -> int:
    from .engine.builders import BuilderConfig
    from .engine.evaluation import evaluate

    temps = _numbers(args.temperatures, "--temperatures")
    builder = BuilderConfig(budget=args.budget, depth=args.depth, children=args.children, width=args.width,
                            draft_temperature=args.draft_temperature)
    rows = _prompt_rows(args)
    set_threads(args.threads)
    pair = source_from_args(args).load()
    prompts = _prompt_ids(rows, pair)
    args.started = True
    results, counts = [], []
    with Interrupt("prompt") as stop:
        for t in temps:
            # A Ctrl-C ends the loop over prompts after the one in hand: evaluate() sums up the prompts done.
            given = UntilStopped(prompts, stop)
            r = evaluate(pair, given, t, builder, args.max_new_tokens)
            if given.done:
                results.append(r)
                counts.append(given.done)
            if stop():
                break
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


def print_eval(pair, args, results: list, counts: list[int], total: int) -> None:
    print(f"draft {pair.draft_name}  target {pair.target_name}  B={args.budget} H={args.depth} K={args.children} "
          f"W={args.width}  {total} prompts")
    print(f"{'T':>4} {'tau':>13} {'E[L]':>13} {'prompts':>7}  acceptance by depth")
    for r, n in zip(results, counts):
        acc = " ".join(f"{a:.2f}" for a in r.acceptance_by_depth)
        print(f"{r.temperature:>4g} {r.tau:>6.3f}±{r.tau_se:<6.3f} {r.expected_length:>6.3f}±{r.expected_length_se:<6.3f} {n:>7}  "
              + acc)


def cmd_pair(args) -> int:
    from .engine.pairs import NAMED_PAIRS

    if args.pair_command == "fetch":
        from .recipes.fetch import fetch

        args.started = True
        fetch(args.name, args.wheel, args.force)
        print(f"open it with: tevviz --pair {args.name}", file=sys.stderr)
        return 0
    if args.pair_command == "train-drafter":
        rest = [a for a in args.args if a != "--"]
        kind = "autoregressive"
        if "--kind" in rest:
            i = rest.index("--kind")
            kind = rest[i + 1] if i + 1 < len(rest) else ""
            del rest[i : i + 2]
        if kind == "block":
            from .recipes.block import RECIPES
            from .recipes.block import main as block_recipe

            if rest[:1] not in ([n] for n in RECIPES):
                raise TevvizError(f"a block drafter's recipe exists for the pairs {', '.join(sorted(RECIPES))}: "
                                  "tevviz pair train-drafter NAME --kind block")
            return block_recipe(rest)
        if kind != "autoregressive":
            raise TevvizError(f"--kind must be autoregressive or block, got {kind!r}")
        from .recipes.drafter import main as recipe

        return recipe(rest)
    for p in NAMED_PAIRS.values():
        here = (p.target_path() / "config.json").is_file()
        status = "ready" if here else f"not fetched: tevviz pair fetch {p.name}"
        print(f"{p.name:10} {status}\n  {p.description}\n  target   {p.target_path()}")
        for path in p.drafter_paths().values():
            print(f"  drafter  {path}")
    return 0


def benchmarks_dir() -> Path:
    return Path(__file__).resolve().parent.parent / "benchmarks"


def cmd_bench(args) -> int:
    root = benchmarks_dir()
    script = root / f"{args.name}.py"
    have = sorted(p.stem for p in root.glob("*.py") if p.stem != "common") if root.is_dir() else []
    if args.name == "common" or not script.is_file():
        raise TevvizError(f"no benchmark {args.name!r}; available: {', '.join(have) or 'none (not a source checkout)'}")
    # The scripts import their shared helpers as `common`, from their own folder.
    sys.path.insert(0, str(root))
    argv, sys.argv = sys.argv, [str(script), *[a for a in args.args if a != "--"]]
    args.started = True
    try:
        runpy.run_path(str(script), run_name="__main__")
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except KeyboardInterrupt:
        # A script writes its results at its end: stopped at once, it has none to write.
        print(f"tevviz bench: {args.name} interrupted: stopped at once, no results written", file=sys.stderr)
        return 130
    finally:
        sys.path.remove(str(root))
        sys.argv = argv
    return 0
