"""`tevviz scan`: decode a prompt set into a scan folder, merge shards, compare two scans, show one.

    tevviz scan PROMPTS.jsonl -o DIR [decode options] [--resume] [--shard I/N | --shard auto] [--skip-bad]
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
from dataclasses import replace
from pathlib import Path

from ..engine.errors import TevvizError
from .common import settle_threads

MODES = ("merge", "compare", "show")
DESCRIPTION = """Scan a prompt set: decode every prompt of a JSON-lines file (one object a line: "prompt", and
optionally "id", "category", "chat") with one pair and one set of decode options, appending each finished prompt's
rounds to DIR/records.jsonl beside DIR/manifest.json (settings, models, prompt file). Then print, per category and
overall, tau, the expected block length E[L] (and with --optimal 1 + C_p* and the drafter gap) with standard errors
over prompts, acceptance and the loss by depth, block lengths, tokens/s, the target tokens the trees miss most and
the rounds that lost most.

An interrupted scan (Ctrl-C, a killed job, a full disk) keeps every finished prompt; --resume continues it and
decodes nothing twice. --shard I/N scans every N-th prompt from position I (0-based), so N jobs of a launcher
split one scan; `tevviz scan merge` joins their folders. --shard auto reads I and N from the launcher (RANK and
WORLD_SIZE from torchrun or accelerate launch, else a Slurm array's task id and count, else srun's SLURM_PROCID and
SLURM_NTASKS), takes the GPU of LOCAL_RANK, and writes one records file a rank into the one folder -o DIR, which it
continues as --resume does: a relaunch with any number of ranks decodes nothing twice. `tevviz scan merge DIR -o
OUT` then makes one scan of it.

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


def _pin_device(source, local: int | None):
    """One GPU a process: a bare (or auto-chosen) cuda device becomes cuda:LOCAL_RANK; the source to load."""
    if local is None:
        return source
    import torch

    from ..engine.load.models import resolve_device
    from ..engine.scan.ranks import pinned_device

    resolved = resolve_device(source.device)
    pinned = pinned_device(resolved, local, torch.cuda.device_count() if resolved == "cuda" else 0)
    if pinned == resolved:
        return source
    torch.cuda.set_device(pinned)  # so that a tensor made on plain "cuda" lands on this rank's GPU too
    return replace(source, device=pinned)


def _prepare(args):
    """Read the prompts, load the pair, make or check the folder; returns (pair, planned, cfg, folder, records):
    `planned` the prompts this process scans, `records` the file it appends to."""
    from ..engine.scan.prompt_files import file_digest, read_prompts, shard
    from ..engine.scan.scan_files import RECORDS, repair
    from ..engine.scan.scan_merge import check_resume
    from ..engine.scan.scan_run import plan_prompts, scan_manifest
    from ..options import decode_config_from_args, source_from_args

    if len(args.paths) != 1:
        raise TevvizError("give one prompt file (or: merge DIR... -o OUT, compare A B, show DIR)")
    if args.out is None:
        raise TevvizError("give the scan folder with -o DIR")
    if args.shard == "auto":
        return _prepare_auto(args)
    path, folder, part = Path(args.paths[0]), Path(args.out), parse_shard(args.shard)
    source = source_from_args(args)  # built once: the settings are resolved from it and the pair loaded by it
    cfg = decode_config_from_args(args, source)
    has_files = folder.is_dir() and any(folder.iterdir())
    if folder.exists() and not folder.is_dir():
        raise TevvizError(f"-o {str(folder)!r} is a file")
    if has_files and not args.resume:
        raise TevvizError(f"-o {str(folder)!r} is not empty; add --resume to continue the scan in it")
    prompts, skipped = read_prompts(path, args.skip_bad)
    mine = shard(prompts, *part) if part else prompts
    pair = source.load()
    settle_threads(pair, args.threads)
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
        from ..engine.scan.scan_files import write_manifest

        folder.mkdir(parents=True, exist_ok=True)
        write_manifest(folder, manifest)
    return pair, planned, cfg, folder, RECORDS


def _prepare_auto(args):
    """_prepare for --shard auto: this rank's share of the prompts and its own file in the shared folder."""
    from ..engine.load.threads import TORCH_DEFAULT_THREADS
    from ..engine.scan.auto_folder import join_folder, rank_file, share
    from ..engine.scan.prompt_files import file_digest, read_prompts
    from ..engine.scan.ranks import launch_rank
    from ..engine.scan.scan_files import AUTO
    from ..engine.scan.scan_run import plan_prompts, scan_manifest
    from ..options import decode_config_from_args, source_from_args

    rank = launch_rank()  # bad variables are refused before anything loads
    path, folder = Path(args.paths[0]), Path(args.out)
    source = source_from_args(args)
    cfg = decode_config_from_args(args, source)
    if folder.exists() and not folder.is_dir():
        raise TevvizError(f"-o {str(folder)!r} is a file")
    prompts, skipped = read_prompts(path, args.skip_bad)
    pair = _pin_device(source, rank.local).load()
    # The ranks on one machine share its cores: each takes its part, none times the others' cores.
    settle_threads(pair, args.threads, cap=max(1, TORCH_DEFAULT_THREADS // rank.on_machine),
                   cap_why=f"{rank.on_machine} ranks of this scan share them (LOCAL_WORLD_SIZE)")
    # Every rank plans every prompt: all refuse the same bad prompt, and all write the same manifest.
    planned, problems = plan_prompts(pair, prompts, args.chat, args.skip_bad, str(path))
    manifest = scan_manifest(pair, cfg, args.chat, path.resolve(), file_digest(path), len(prompts), len(planned),
                             AUTO, skipped + problems)
    if rank.index == 0:
        for line in skipped + problems:
            print(f"skipped {line}", file=sys.stderr)
    join_folder(folder, manifest)
    records, dropped = rank_file(folder, rank)
    if dropped:
        print(f"dropped {dropped} bytes of an unfinished prompt at the end of {records}", file=sys.stderr)
    print(f"{rank.label()}: {len(share(planned, rank))} of the {len(planned)} prompts are this process's",
          file=sys.stderr)
    return pair, share(planned, rank), cfg, folder, records


def run(args) -> int:
    """Scan a prompt file into -o DIR (or continue it with --resume, or join it with --shard auto)."""
    from ..engine.load.threads import use_threads
    from ..engine.scan.scan_run import run_scan, unfinished

    use_threads(args.threads)  # the one policy of decode, the app and the notebook API
    pair, planned, cfg, folder, records = _prepare(args)
    auto = args.shard == "auto"
    args.started = True
    before = len(planned) - len(unfinished(planned, folder))
    print(f"scanning {len(planned)} prompts into {folder / records if auto else folder}"
          + (f" ({before} already done)" if before else ""), file=sys.stderr)
    try:
        with _terminate_as_interrupt():
            finished = run_scan(pair, planned, cfg, folder, progress=_progress_printer(), records=records)
    except KeyboardInterrupt:
        finished = len(planned) - len(unfinished(planned, folder))
        again = "the same command" if auto else "the same command with --resume"
        print(f"\ninterrupted: {finished} of {len(planned)} prompts are in {folder}; {again} continues",
              file=sys.stderr)
        return 130
    if auto:
        # No rank knows when the others end (a scan opens no process group): merge is the one reducer.
        print(f"done: {finished} prompts in {folder / records}; once every rank is done, `tevviz scan merge "
              f"{folder} -o OUT` makes one scan of the folder", file=sys.stderr)
        return 0
    return show_folder(folder, args.json, args.worst)


def show_folder(folder: Path, as_json: bool, worst: int = 10) -> int:
    from ..engine.scan.scan_files import open_scan
    from ..render.scan_tables import summary_text

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
    from ..engine.scan.scan_merge import merge as merge_folders

    if args.out is None:
        raise TevvizError("give the merged folder with -o OUT")
    count, notes = merge_folders(args.paths[1:], args.out)
    args.started = True
    for note in notes:
        print(note, file=sys.stderr)
    print(f"merged {count} prompts into {args.out}", file=sys.stderr)
    return show_folder(Path(args.out), args.json, args.worst)


def compare(args) -> int:
    from ..engine.analysis.scan_stats import compare_scans
    from ..engine.scan.scan_files import open_scan
    from ..engine.scan.scan_merge import check_comparable
    from ..render.scan_tables import comparison_text

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
