"""`tevviz doctor`: which reading of the target's states a drafter was trained with (engine/scan/doctor.py); exit status
1 when the checkpoint's own reading is beaten by a clear margin."""

from __future__ import annotations

import json
import sys

from ..engine.errors import TevvizError
from ..options import source_from_args
from .common import prompt_set, set_threads, settle_threads


def doctor_rows(args, source) -> tuple[list[dict], str]:
    """The prompts to decode and where they come from: --prompts (its --split, else all), else the named pair's
    held-out (eval) prompts, else the built-in ones; spread over the set, --limit of them. Read before models load."""
    from ..engine.load.pairs import pair_of_target
    from ..engine.scan.doctor import builtin_rows, spread

    found = prompt_set(args, source.named if args.target is None else pair_of_target(args.target))
    builtin = ("the built-in chat prompts (the target is no named pair's; --prompts FILE decodes the kind of text the "
               "drafter was trained on)")
    rows, where = found or (builtin_rows(), builtin)
    if not rows:
        raise TevvizError(f"--prompts {args.prompts!r} has no prompt" + (f" in split {args.split!r}" if args.split
                                                                        else ""))
    picked = spread(rows, args.limit)
    if args.limit is not None and args.limit > len(rows):
        why = f"all {len(rows)}: --limit {args.limit} asks for more than there are"
    elif len(picked) < len(rows):
        why = f"{len(picked)} of {len(rows)}, spread over the set (--limit {args.limit})"
    else:
        why = f"all {len(rows)}"
    return picked, f"{len(picked)} prompts: {why} of {where}"


def cmd_doctor(args) -> int:
    """Decode held-out prompts under each reading of the drafter's target states; print the table and the verdict."""
    from ..engine.scan.doctor import check_max_new_tokens, encode_rows, run_doctor
    from ..render.doctor import doctor_text

    set_threads(args.threads)
    source = source_from_args(args)
    rows, where = doctor_rows(args, source)
    check_max_new_tokens(args.max_new_tokens)
    pair = source.load()
    settle_threads(pair, args.threads)
    ids = encode_rows(pair.tokenizer, rows)
    args.started = True

    def progress(done: int, total: int, name: str) -> None:
        if done % len(ids) == 0:
            print(f"doctor: reading {name!r} decoded ({done // len(ids)} of {total // len(ids)})", file=sys.stderr,
                  flush=True)

    print(f"doctor: {pair.draft_name} beside {pair.target_name}, {where}", file=sys.stderr, flush=True)
    report = run_doctor(pair, ids, args.max_new_tokens, source.resolved()[1], progress)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(doctor_text(report))
    return 0 if report.ok else 1
