"""`tevviz compare A.json B.json` and `tevviz report A.json --compare B.json`: two runs round by round, from files."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..engine.errors import TevvizError


def load_runs(path_a: str, path_b: str):
    """Both files as runs named A and B, each error naming its file (decoding.load_input)."""
    from ..engine.analysis.run_compare import Run
    from .common import load_input

    return Run.of(load_input(path_a), "A"), Run.of(load_input(path_b), "B")


def cmd_compare(args) -> int:
    from ..engine.analysis.run_compare import compare_runs

    a, b = load_runs(args.file_a, args.file_b)
    cmp = compare_runs(a, b)
    detail = cmp.round(args.round) if args.round is not None else None
    rounds = [cmp.round(k) for k in cmp.round_indices]
    if args.json:
        print(json.dumps({"files": {"a": args.file_a, "b": args.file_b}, **cmp.to_dict(),
                          "rounds": [_round_row(c) for c in rounds],
                          **({"round": detail.to_dict()} if detail is not None else {})}))
        return 0
    print("\n".join(compare_text(cmp, rounds, detail, (args.file_a, args.file_b))))
    return 0


def _round_row(c) -> dict:
    from ..engine.analysis.run_compare import A_ONLY, B_ONLY, BOTH

    return {"index": c.index, "same_context": c.same_context,
            "counts": {s: c.count(s) for s in (BOTH, A_ONLY, B_ONLY)}, "C_p": c.C_p.to_dict(),
            "expected_length": c.expected_length.to_dict(), "block_length": c.block_length.to_dict()}


def compare_text(cmp, rounds: list, detail, files: tuple[str, str]) -> list[str]:
    """What `tevviz compare` prints: the runs, where their texts part, the per-depth table, the rounds."""
    from ..engine.analysis.run_compare import rounds_table
    from ..engine.analysis.run_depths import depth_analysis
    from ..render.table import text

    a, b = cmp.a, cmp.b
    lines = [f"A: {files[0]} ({len(a.rounds)} rounds, {len(a.token_ids)} tokens)",
             f"B: {files[1]} ({len(b.rounds)} rounds, {len(b.token_ids)} tokens)"]
    if cmp.settings:
        lines.append("settings that differ: " + "; ".join(f"{k} {x} -> {y}" for k, x, y in cmp.settings))
    depths, means = depth_analysis(cmp.table)
    lines += [cmp.divergence.sentence, "", *text(depths), "", *text(means)]
    lines += ["", *text(rounds_table(rounds))]
    if detail is not None:
        lines += ["", *round_text(detail)]
    return lines


def round_text(c) -> list[str]:
    """One round of both runs in detail: nodes, numbers, accepted blocks and missing tokens."""
    from ..engine.analysis.run_compare import A_ONLY, B_ONLY, BOTH, missing_table, round_table
    from ..render.table import text

    context = {True: "the same context", False: "different contexts", None: "contexts not known to be the same"}
    lines = [(f"round {c.index} ({context[c.same_context]}): {c.count(BOTH)} nodes in both trees, "
             f"{c.count(A_ONLY)} in A only, {c.count(B_ONLY)} in B only"), *text(round_table(c))[1:]]
    for side, missing in (("A", c.missing_a), ("B", c.missing_b)):
        if missing:
            lines += ["", *text(missing_table(c, side))]
    return lines


def report_compare(args) -> int:
    """`tevviz report A.json --compare B.json`: both runs as one offline page whose views stay linked."""
    from ..engine.analysis.run_compare import compare_runs
    from ..files import check_writable
    from ..render.compare_report import write_compare_report

    out = Path(args.out) if args.out else Path(args.file).with_suffix(".compare.html")
    for source in (args.file, args.compare):
        if Path(source).is_dir():
            raise TevvizError(f"{source}: --compare reads two session files, not a scan folder (tevviz scan compare "
                              "compares scans)")
        if out.resolve() == Path(source).resolve():
            raise TevvizError(f"--out {str(out)!r} would overwrite the input file")
    a, b = load_runs(args.file, args.compare)
    check_writable(out, "--out")
    args.started = True
    try:
        size = write_compare_report(compare_runs(a, b), out, args.title, files=(args.file, args.compare))
    except OSError as e:
        raise TevvizError(f"cannot write {str(out)!r}: {e.strerror}") from None
    print(f"wrote {out}: rounds {len(a.rounds)} against {len(b.rounds)}, {size / 1e6:.1f} MB", file=sys.stderr)
    return 0
