"""`tevviz decode`, `inspect` and `report`: decoding a prompt, and reading back what decoding wrote."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from ..engine.errors import TevvizError
from ..options import decode_config_from_args, source_from_args
from .common import Interrupt, load_input, read_prompt, set_threads, settle_threads, use_chat


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
    """What `tevviz decode` prints (and --json holds): text, tokens, tokens/s, stage times and the session's means
    of the per-round numbers (round_numbers.SESSION: tau, the mean expected block length, with --optimal 1 + C_p*,
    the drafter gap and the optimal trees' time)."""
    from ..engine.analysis.summary import acceptance_curves, summarize
    from ..engine.records.round_numbers import NUMBERS, SESSION

    s = summarize(session.rounds)
    means = {n.session: s.numbers[n.name] for n in SESSION if not n.needs_optimal}
    out = {
        "text": session.pair.tokenizer.decode(session.generated),
        "token_ids": session.generated,
        "rounds": s.rounds,
        **means,
        "tokens_per_s": len(session.generated) / seconds if seconds > 0 else 0.0,
        "stage_ms": s.stage_ms,
        # counted over rounds (conditional, marginal) beside the exact reach (summary.DepthAcceptance)
        "acceptance_by_depth": [a.to_dict() for a in acceptance_curves(session.rounds)],
        "builder": ran_builder(cfg.builder),
        "verifier": cfg.verifier,
    }
    if cfg.builder.auto and session.rounds:
        n = s.numbers
        out["auto_budget"] = {"mean_B": n["sized_B"], "mean_H": n["sized_H"], "undrafted_rounds": n["undrafted"],
                              "last": session.rounds[-1].sizing.to_dict()}
        if NUMBERS["chain"].defined(session.rounds):  # the mixed builder
            out["auto_budget"]["chain_rounds"] = n["chain"]
    if optimal and session.rounds:
        out |= {n.session: s.numbers[n.name] for n in SESSION if n.needs_optimal} | {"bounded_rounds": s.bounded_rounds}
    from ..engine.draft.drafters import reading_of

    reading = reading_of(session.pair)
    if reading is not None:  # which target states the drafter read, and why (its config's dialect, --layer-ids)
        out["drafter_reading"] = {"layer_ids": list(reading.layer_ids), "why": reading.why}
    from ..engine.analysis.speed import drafting_note

    if drafting_note(session.rounds):  # a speed line then says this in place of a ratio
        out["drafting"] = drafting_note(session.rounds)
    if session.notice:
        out["notice"] = session.notice
    return out

def ran_builder(builder) -> str:
    """The builder a decode ran, as a person reads it: its name, budget (or auto, up to; a chain's stop) and depth."""
    if getattr(builder, "stop_below", 0):  # a stopped chain has no budget: H is its longest
        return f"{builder.name} (stopped below p = {builder.stop_below:g}, depth up to {builder.depth})"
    budget = f"budget auto up to {builder.budget}" if builder.auto else f"budget {builder.budget}"
    return f"{builder.name} ({budget}, depth {builder.depth})"


def _timed_baseline(pair, prompt_ids, cfg, out: dict, quiet: bool) -> None:
    """--baseline: the fastest plain decoding of the same prompt (every way tevviz knows, timed short, the best one
    over the whole length) and the speed-up against it; a Ctrl-C there leaves them out, keeping the rest."""
    from tqdm import tqdm

    from ..engine.decode.plain import best_plain, plain_ways

    ways = plain_ways(pair.target)
    bar = tqdm(total=2 * len(ways) + 1, desc="timing plain decoding", file=sys.stderr, disable=quiet, leave=False)
    try:
        base = best_plain(pair, prompt_ids, cfg, ways, progress=lambda done, total: bar.update(done - bar.n))
    except KeyboardInterrupt:
        print("baseline interrupted: left out", file=sys.stderr)
        return
    finally:
        bar.close()
    out["baseline"] = base.to_dict()
    out["baseline_tokens_per_s"] = base.tokens_per_s
    # No ratio where speculation committed nothing: it would time the loop, not a drafter (out["drafting"] says so).
    claim = base.tokens_per_s and not out.get("drafting")
    out["speedup"] = out["tokens_per_s"] / base.tokens_per_s if claim else None

def _export(session, prompt: str, path: Path, interrupted: bool) -> str:
    """Write the session JSON (its meta marked when interrupted); the reason nothing was written, or ""."""
    from ..engine.records.io import export_session
    from ..files import atomic_write_json

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

    from ..engine import DecodeSession, encode_prompt
    from ..files import check_writable

    source = source_from_args(args)  # built once: the settings are resolved from it and the pair loaded by it
    cfg = decode_config_from_args(args, source)
    prompt = read_prompt(args)
    # Checked before any model loads: a finished decode must not be lost to a path it cannot write.
    export = check_writable(args.export, "--export") if args.export else None
    set_threads(args.threads)
    pair = source.load()
    threads = settle_threads(pair, args.threads)
    chat = use_chat(args, pair.tokenizer)
    prompt_ids = encode_prompt(pair.tokenizer, prompt, chat=chat)
    args.started = True
    session, at_once = None, False
    with Interrupt("round") as stop:
        # The clock starts before the session's prefill; the baseline below leaves its prefill out too.
        t0 = time.perf_counter()
        try:
            session = DecodeSession(pair, prompt_ids, cfg)
            t_prefill = time.perf_counter() - t0
            _decode_rounds(session, stop, quiet=args.json or not sys.stderr.isatty())
        except KeyboardInterrupt:
            # The second Ctrl-C: the round in flight is dropped (step() leaves the session as it found it); what
            # the finished rounds committed is printed and exported below as after the first.
            at_once = True
    if session is None:
        print("interrupted before the first round: nothing was decoded", file=sys.stderr)
        return 130
    # The optimal trees are analysis, not decoding: their time is not the decoder's.
    seconds = time.perf_counter() - t0 - t_prefill - sum(r.optimal.ms for r in session.rounds if r.optimal) / 1e3
    interrupted = at_once or (stop.requested and not session.done)
    out = decode_summary(session, seconds, cfg, args.optimal)
    out["threads"] = threads.to_dict() | {"why": threads.describe()}
    if args.baseline and not interrupted:
        _timed_baseline(pair, prompt_ids, cfg, out, quiet=args.json or not sys.stderr.isatty())
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
    text = out["text"]
    colour = _wants_colour(getattr(args, "color", "auto"))
    if colour:
        text = marked_text(session.pair.tokenizer, out["token_ids"], session.rounds, text)
    # A chat answer is a message of its own, not a continuation of the prompt.
    print(prompt.rstrip() + "\n\n" + text if chat else prompt + text)
    from ..engine.records.round_numbers import SESSION, mean_text

    print("-" * 60, file=sys.stderr)
    speedup = out.get("speedup")
    # The rounds a mean is over, where the JSON holds them (the drafter gap's: those their optimal tree bounds).
    over = lambda n: (out["bounded_rounds"], out["rounds"]) if n.name == "gap" else (out["rounds"], out["rounds"])
    # The registry's short names (tau, E[L]) after the words a user of the tool reads them by.
    plain = {"L": "tokens per round", "expected_length": "expected tokens per round"}
    means = "  ".join((f"{plain[n.name]}: " if n.name in plain else "") + mean_text(n, out[n.session], *over(n))
                      for n in SESSION if not n.needs_optimal)
    print(f"rounds {out['rounds']}  tokens {len(out['token_ids'])}  {means}  "
          f"{out['tokens_per_s']:.1f} tok/s" + (f"  speed-up {speedup:.2f}x" if speedup else ""), file=sys.stderr)
    if "baseline" in out:
        print(f"plain decoding: {out['baseline']['tokens_per_s']:.1f} tok/s, {out['baseline']['way']} (the fastest "
              f"of {len(out['baseline']['probe_tokens_per_s'])} ways timed on this prompt; the speed-up divides by "
              "it)", file=sys.stderr)
    if "drafting" in out:
        print(f"no speed-up claimed: {out['drafting']}", file=sys.stderr)
    if "threads" in out:
        print(f"decoded on {out['threads']['why']}", file=sys.stderr)
    print("time in each stage, ms over all rounds: " + ", ".join(f"{STAGE_WORDS.get(k, k)} {v:.1f}"
                                                                 for k, v in out["stage_ms"].items()), file=sys.stderr)
    if out.get("acceptance_by_depth"):
        print(depth_text(out["acceptance_by_depth"]), file=sys.stderr)
    if "builder" in out:
        print(f"ran: builder {out['builder']}, verifier {out['verifier']}", file=sys.stderr)
    if "drafter_reading" in out:
        r = out["drafter_reading"]
        print(f"drafter reads the target's hidden_states {r['layer_ids']}: {r['why']}", file=sys.stderr)
    if speedup is None and sys.stderr.isatty():
        print("tokens/s alone says little: add --baseline to time plain decoding of the same prompt and see the "
              "speed-up", file=sys.stderr)
    if "auto_budget" in out:
        from ..engine.records.round_time import Fit, describe

        a = out["auto_budget"]
        fit = Fit.from_sizing(a["last"])
        print(f"auto budget: {a['mean_B']:.1f} draft tokens to depth {a['mean_H']:.1f} a round on average, "
              f"{a['undrafted_rounds']} of {out['rounds']} rounds without a draft; what it measured: {describe(fit)}",
              file=sys.stderr)
        if "chain_rounds" in a:
            print(f"mixed: {a['chain_rounds']} sampled chains (speculative) and "
                  f"{out['rounds'] - a['chain_rounds']} best-first trees ({session.cfg.verifier}); measured expected "
                  f"tokens per ms: chains {a['last']['chain_rate']:.3f}, trees {a['last']['tree_rate']:.3f}",
                  file=sys.stderr)
    if "bounded_rounds" in out:
        print("optimal tree: " + "  ".join(mean_text(n, out[n.session], *over(n)) for n in SESSION if n.needs_optimal),
              file=sys.stderr)
    if session.notice:
        print("note: " + session.notice, file=sys.stderr)
    if colour and text != out["text"]:
        print(f"colour: {DRAFTED}green{RESET}: tokens from accepted draft nodes; plain: the target's own (bonus) "
              "tokens", file=sys.stderr)


DRAFTED, RESET = "\x1b[32m", "\x1b[0m"  # ANSI green, as llama.cpp's --color marks the draft's accepted tokens
STAGE_WORDS = {"draft": "drafting", "target": "target passes", "verify": "verifying"}  # the JSON keeps its keys


def _wants_colour(choice: str) -> bool:
    """--color: always, never, or auto (standard output is a terminal and NO_COLOR is unset)."""
    if choice in ("always", "never"):
        return choice == "always"
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR")


def marked_text(tokenizer, token_ids: list[int], rounds, text: str) -> str:
    """`text` with the tokens that accepted draft nodes wrote in ANSI green; `text` unchanged where the rounds do not
    account for every token or the token pieces do not spell it."""
    from ..engine.analysis.summary import drafted_flags

    flags = drafted_flags(rounds)
    if flags is None or len(flags) != len(token_ids):
        return text
    # Each token's piece as a streaming detokenizer finds it: a few tokens of context before it, so that a
    # tokenizer's leading-space and merge rules apply as in the whole text.
    pieces = []
    for i in range(len(token_ids)):
        start = max(0, i - 6)
        before = tokenizer.decode(token_ids[start:i]) if i > start else ""
        pieces.append(tokenizer.decode(token_ids[start:i + 1])[len(before):])
    if "".join(pieces) != text:
        return text
    out, run = [], False
    for piece, drafted in zip(pieces, flags):
        if drafted != run:
            out.append(DRAFTED if drafted else RESET)
            run = drafted
        out.append(piece)
    return "".join(out) + (RESET if run else "")


def depth_text(rows: list[dict], shown: int = 8) -> str:
    """Acceptance by depth in one line: per d, conditional / marginal counted over the rounds, then the exact reach
    (and the optimal tree's, where computed): summary.DepthAcceptance's fields."""
    optimal = any(r.get("optimal") is not None for r in rows)
    num = lambda x: "-" if x is None else f"{x:.2f}"
    cell = lambda r: (f"d{r['depth']} {num(r['conditional'])}/{num(r['marginal'])} {num(r['expected'])}"
                      + (f"/{num(r['optimal'])}" if optimal else ""))
    more = f"  (+{len(rows) - shown} deeper)" if len(rows) > shown else ""
    said = ("draft tokens accepted at each depth d, as shares of the rounds that got to d - 1 / of all rounds, then "
            "the share expected" + (" / with the best possible tree" if optimal else ""))
    return said + ": " + "  ".join(cell(r) for r in rows[:shown]) + more


def cmd_inspect(args) -> int:
    """A file's kind on a line, then its session means (session_tables.summary_table) and its rounds
    (session_tables.rounds_table) as render/table.text writes them; or all as JSON."""
    from ..engine.analysis.session_tables import rounds_table, summary_table
    from ..engine.analysis.summary import summarize
    from ..engine.records.round_numbers import round_row
    from ..render.table import text

    imported = load_input(args.file)
    rounds = imported.rounds
    if args.json:
        rows = [round_row(r) for r in rounds]
        print(json.dumps({"file": args.file, "kind": imported.kind, "summary": summarize(rounds).to_dict(),
                          "rounds": rows}))
        return 0
    print(f"{args.file}: {imported.kind}, {len(rounds)} rounds")
    print("\n".join(text(summary_table(rounds)) + [""] + text(rounds_table(rounds))))
    return 0

def _engine_runs(paths: list[str]) -> list:
    """`report --engine`: each file as a serving engine's acceptance (engine/engines/formats.py)."""
    if not paths:
        return []
    from ..engine.engines.formats import read_file

    return [read_file(p) for p in paths]


def cmd_report(args) -> int:
    """One offline HTML page of a session/round JSON, a DDTree trace or a scan folder."""
    from ..files import check_writable

    if getattr(args, "engine", None) and (getattr(args, "compare", None) or Path(args.file).is_dir()):
        raise TevvizError("--engine draws over one session's report: not with --compare or a scan folder")
    if getattr(args, "compare", None):  # two runs on one page (commands/compare.py)
        from .compare import report_compare

        return report_compare(args)
    out = Path(args.out) if args.out else Path(args.file).with_suffix(".html")
    if Path(args.file).is_dir():  # a scan folder (tevviz scan -o DIR)
        from ..engine.scan.scan_files import open_scan
        from ..render.scan_report import write_scan_report

        check_writable(out, "--out")
        data = open_scan(args.file)
        write, what = (lambda: write_scan_report(data, out, args.title)), f"{len(data.index)} prompts"
    else:
        from ..render.report import write_report

        imported = load_input(args.file)
        if out.resolve() == Path(args.file).resolve():
            raise TevvizError(f"--out {str(out)!r} would overwrite the input file")
        check_writable(out, "--out")
        engines = _engine_runs(getattr(args, "engine", []))
        write, what = (lambda: write_report(imported, out, args.title, engines)), f"{len(imported.rounds)} rounds"
    args.started = True
    try:
        size = write()
    except OSError as e:
        raise TevvizError(f"cannot write {str(out)!r}: {e.strerror}") from None
    print(f"wrote {out}: {what}, {size / 1e6:.1f} MB", file=sys.stderr)
    return 0
