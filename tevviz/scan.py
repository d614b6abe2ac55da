"""`tevviz scan`: decode a prompt set into a scan folder, merge shards, compare two scans, show one.

    tevviz scan PROMPTS.jsonl -o DIR [decode options] [--resume] [--shard I/N] [--skip-bad]
    tevviz scan merge DIR... -o OUT
    tevviz scan compare DIR_A DIR_B
    tevviz scan show DIR

`cmd_scan(args)` runs it (its flags are in tevviz.cli). Nothing here loads torch until a scan runs.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

from .engine.errors import TevvizError

MODES = ("merge", "compare", "show")
DESCRIPTION = """Scan a prompt set: decode every prompt of a JSON-lines file (one object a line: "prompt", and
optionally "id", "category", "chat") with one pair and one set of decode options, appending each finished prompt's
rounds to DIR/records.jsonl beside DIR/manifest.json (settings, models, prompt file). Then print, per category and
overall, tau, the expected block length E[L] (and with --optimal 1 + C_p* and the drafter gap) with standard errors
over prompts, acceptance and the loss by depth, block lengths, tokens/s, the target tokens the trees miss most and
the rounds that lost most.

An interrupted scan (Ctrl-C, a killed job, a full disk) keeps every finished prompt; --resume continues it and
decodes nothing twice. --shard I/N scans every N-th prompt from position I (0-based), so N jobs of a launcher
(a SLURM array: --shard $SLURM_ARRAY_TASK_ID/N) split one scan; `tevviz scan merge` joins their folders.

  tevviz scan merge DIR... -o OUT     join shard folders (refused, writing nothing, if settings or models differ)
  tevviz scan compare DIR_A DIR_B     paired differences B - A per category and per depth, with standard errors
  tevviz scan show DIR                the tables of a scan folder (--json: as one JSON object)
  tevviz report DIR -o scan.html      the scan as one offline HTML page"""


def parse_shard(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise TevvizError(f"--shard must look like I/N (for example 0/4), got {text!r}") from None
    if not (n >= 1 and 0 <= i < n):
        raise TevvizError(f"--shard {text}: I must lie in [0, N) and N be at least 1")
    return i, n


@contextmanager
def _terminate_as_interrupt():
    """A launcher's SIGTERM (a SLURM time limit, a pre-empted pod) ends the scan as Ctrl-C does: finished prompts
    kept, a message saying how to resume."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def _progress_printer():
    tty = sys.stderr.isatty()

    def show(p) -> None:
        end = "" if tty and p.done < p.total else "\n"
        print(("\r\033[K" if tty else "") + p.line(), end=end, file=sys.stderr, flush=True)

    return show


def _prepare(args):
    """Read the prompts, load the pair, make or check the folder; returns (pair, planned, cfg, folder)."""
    from .engine.scan.scan_files import file_digest, read_prompts, repair, shard
    from .engine.scan.scan_merge import check_resume
    from .engine.scan.scan_run import plan_prompts, scan_manifest
    from .options import decode_config_from_args, source_from_args

    if len(args.paths) != 1:
        raise TevvizError("give one prompt file (or: merge DIR... -o OUT, compare A B, show DIR)")
    if args.out is None:
        raise TevvizError("give the scan folder with -o DIR")
    path, folder, part = Path(args.paths[0]), Path(args.out), parse_shard(args.shard)
    cfg = decode_config_from_args(args)
    has_files = folder.is_dir() and any(folder.iterdir())
    if folder.exists() and not folder.is_dir():
        raise TevvizError(f"-o {str(folder)!r} is a file")
    if has_files and not args.resume:
        raise TevvizError(f"-o {str(folder)!r} is not empty; add --resume to continue the scan in it")
    prompts, skipped = read_prompts(path, args.skip_bad)
    mine = shard(prompts, *part) if part else prompts
    pair = source_from_args(args).load()
    planned, problems = plan_prompts(pair, mine, args.chat, args.skip_bad, str(path))
    manifest = scan_manifest(pair, cfg, args.chat, path.resolve(), file_digest(path), len(prompts), len(planned),
                             part, skipped + problems)
    for line in skipped + problems:
        print(f"skipped {line}", file=sys.stderr)
    if has_files:
        check_resume(folder, manifest)
        dropped = repair(folder)
        if dropped:
            print(f"dropped {dropped} bytes of an unfinished prompt at the end of the records", file=sys.stderr)
    else:
        from .engine.scan.scan_files import write_manifest

        folder.mkdir(parents=True, exist_ok=True)
        write_manifest(folder, manifest)
    return pair, planned, cfg, folder


def run(args) -> int:
    """Scan a prompt file into -o DIR (or continue it with --resume)."""
    from .engine.core.threads import use_threads
    from .engine.scan.scan_files import done_ids
    from .engine.scan.scan_run import run_scan

    use_threads(args.threads)  # the one policy of decode, the app and the notebook API
    pair, planned, cfg, folder = _prepare(args)
    args.started = True
    before = len(done_ids(folder) & {p.prompt.id for p in planned})
    print(f"scanning {len(planned)} prompts into {folder}" + (f" ({before} already done)" if before else ""),
          file=sys.stderr)
    finished = before
    try:
        with _terminate_as_interrupt():
            finished = run_scan(pair, planned, cfg, folder, progress=_progress_printer())
    except KeyboardInterrupt:
        finished = len(done_ids(folder) & {p.prompt.id for p in planned})
        print(f"\ninterrupted: {finished} of {len(planned)} prompts are in {folder}; the same command with --resume "
              "continues", file=sys.stderr)
        return 130
    return show_folder(folder, args.json, args.worst)


def show_folder(folder: Path, as_json: bool, worst: int = 10) -> int:
    from .engine.scan.scan_files import open_scan
    from .render.scan_tables import summary_text

    data = open_scan(folder, worst=worst)
    if as_json:
        print(json.dumps(scan_json(data)))
    else:
        print(summary_text(data))
    return 0


def scan_json(data) -> dict:
    """An opened scan as plain JSON: the CLI's --json, the same numbers as the app and the report."""
    return {"folder": str(data.folder), "manifest": data.manifest, "summary": data.summary.to_dict(),
            "problems": data.problems, "unfinished_rounds": data.unfinished}


def merge(args) -> int:
    from .engine.scan.scan_merge import merge as merge_folders

    if args.out is None:
        raise TevvizError("give the merged folder with -o OUT")
    count, notes = merge_folders(args.paths[1:], args.out)
    args.started = True
    for note in notes:
        print(note, file=sys.stderr)
    print(f"merged {count} prompts into {args.out}", file=sys.stderr)
    return show_folder(Path(args.out), args.json, args.worst)


def compare(args) -> int:
    from .engine.records.scan_stats import compare_scans
    from .engine.scan.scan_files import open_scan
    from .engine.scan.scan_merge import check_comparable
    from .render.scan_tables import comparison_text

    if len(args.paths) != 3:
        raise TevvizError("compare takes two scan folders: tevviz scan compare DIR_A DIR_B")
    a, b = (open_scan(p, worst=0) for p in args.paths[1:])
    notes = check_comparable(a, b)
    result = compare_scans(a.summary.prompts, b.summary.prompts)
    if args.json:
        print(json.dumps({"a": str(a.folder), "b": str(b.folder), "differences": notes, **result.to_dict()}))
    else:
        print(comparison_text(a, b, result, notes))
    return 0


def cmd_scan(args) -> int:
    """The handler behind `tevviz scan` (tevviz.commands calls it)."""
    mode = args.paths[0]
    if mode == "merge":
        return merge(args)
    if mode == "compare":
        return compare(args)
    if mode == "show":
        if len(args.paths) != 2:
            raise TevvizError("show takes one scan folder: tevviz scan show DIR")
        return show_folder(Path(args.paths[1]), args.json, args.worst)
    return run(args)
