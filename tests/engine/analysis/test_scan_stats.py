"""A scan's aggregates, its paired comparison and its folder format on hand-made rounds (no models, no torch)."""

from __future__ import annotations

import errno
import itertools
import math
import os
import statistics

import orjson
import pytest
from conftest import scored_round as scored

from tevviz.engine.analysis.scan_stats import ScanAccumulator, compare_scans
from tevviz.engine.analysis.stats import mean_se
from tevviz.engine.errors import TevvizError
from tevviz.engine.records.records import OptimalTree, RoundRecord
from tevviz.engine.scan.prompt_files import read_prompts
from tevviz.engine.scan.scan_files import (
    RECORDS,
    RecordWriter,
    block_bytes,
    done_ids,
    open_scan,
    read_prompt,
    repair,
    write_manifest,
)

CHAIN = [-1, 0, 1]  # root - a - b
FORK = [-1, 0, 0, 1]  # root - a - c, root - b


def small_scan() -> dict[str, tuple[str, list[RoundRecord]]]:
    """Three prompts in two categories: their rounds, with known P and exits."""
    miss = [[{"token_id": 7, "text": "x", "gain": 0.3}], [{"token_id": 8, "text": "y", "gain": 0.1}], []]
    return {
        "p0": ("code", [scored(0, CHAIN, [1.0, 0.8, 0.4], 2, missing=miss), scored(1, CHAIN, [1.0, 0.5, 0.5], 1)]),
        "p1": ("code", [scored(0, FORK, [1.0, 0.6, 0.3, 0.3], 3)]),
        "p2": ("math", [scored(0, CHAIN, [1.0, 0.2, 0.1], 0), scored(1, FORK, [1.0, 0.5, 0.5, 0.25], 2),
                        scored(2, CHAIN, [1.0, 1.0, 1.0], 2)]),
    }


def accumulate(scan, worst: int = 3) -> ScanAccumulator:
    acc = ScanAccumulator(worst_k=worst)
    for k, (pid, (cat, rounds)) in enumerate(scan.items()):
        acc.add(pid, cat, k, rounds, seconds=float(k + 1))
    return acc


def test_aggregates_equal_a_hand_computation():
    s = accumulate(small_scan()).summary()
    # Per prompt, tau is the mean block length and 1 + C_p the mean of 1 + sum of P over non-root nodes.
    tau = {"p0": (3 + 2) / 2, "p1": 3 / 1, "p2": (1 + 2 + 3) / 3}
    ceiling = {"p0": (1 + 1.2 + 1 + 1.0) / 2, "p1": 1 + 1.2, "p2": (1.3 + 2.25 + 3.0) / 3}
    for g, ids in (("all", ["p0", "p1", "p2"]), ("code", ["p0", "p1"]), ("math", ["p2"])):
        group = s.groups[g]
        assert group.tau.mean == pytest.approx(statistics.mean(tau[i] for i in ids))
        assert group.expected_length.mean == pytest.approx(statistics.mean(ceiling[i] for i in ids))
        se = statistics.stdev([ceiling[i] for i in ids]) / math.sqrt(len(ids)) if len(ids) > 1 else None
        assert group.expected_length.se == (pytest.approx(se) if se is not None else None)
    assert list(s.groups) == ["all", "code", "math"]
    a = s.groups["all"]
    # Acceptance by depth, pooled over the 6 rounds: depth 1 is reached by 5 (p2's first exits at the root), depth 2
    # by the three whose exit node is at depth 2 (p0 r0, p1 r0, p2 r2). Conditional: 5 of 6, then 3 of those 5;
    # marginal: 5 of 6, then 3 of 6.
    assert a.acceptance_conditional == pytest.approx([5 / 6, 3 / 5])
    assert a.acceptance_marginal == pytest.approx([5 / 6, 3 / 6])
    # Loss by depth: w summed per depth over the 6 rounds, split at internal nodes and leaves, divided by 6.
    width0 = 0.2 + 0.5 + 0.1 + 0.8 + 0.0 + 0.0  # w(root) of each round in order (the root always has children)
    assert a.width[0] == pytest.approx(width0 / 6)
    assert a.width[1] == pytest.approx((0.4 + 0.0 + 0.3 + 0.1 + 0.25 + 0.0) / 6)  # CHAIN's node 1, FORK's node 1
    assert a.leaf[1] == pytest.approx((0.3 + 0.5) / 6)  # leaves at depth 1: FORK's node 2
    assert a.leaf[2] == pytest.approx((0.4 + 0.5 + 0.3 + 0.1 + 0.25 + 1.0) / 6)
    assert a.lengths == {3: 3, 2: 2, 1: 1}
    assert a.tokens_per_s == pytest.approx(sum(len(r.committed) for _, rs in small_scan().values() for r in rs) / 6.0)
    # The best missing child of p0's first round is token 7 (gain 0.3 beats 0.1).
    assert [(m.token_id, m.rounds, m.mass) for m in s.missed] == [(7, 1, pytest.approx(0.3))]
    # Without optimal trees a round loses (its tree's depth) - C_p: p2's round 0 loses 2 - 0.3.
    assert [(w.prompt, w.round) for w in s.worst][:2] == [("p2", 0), ("p0", 1)]
    assert s.worst[0].lost == pytest.approx(1.7)


def test_the_drafter_gap_ranks_rounds_when_optimal_trees_are_known():
    opt = OptimalTree(tokens=[10, 11, 12], texts=["", "", ""], parents=[-1, 0, 1], depths=[0, 1, 2], P=[1.0, 0.9, 0.7],
                      budget=2, depth=2)
    r = scored(0, CHAIN, [1.0, 0.8, 0.4], 2, optimal=opt)
    s = accumulate({"p": ("c", [r])}).summary()
    assert s.groups["all"].optimal_ceiling.mean == pytest.approx(1 + 1.6)
    assert s.groups["all"].gap.mean == pytest.approx(1.6 - 1.2)
    assert s.worst[0].lost == pytest.approx(0.4) and s.worst[0].C_p_star == pytest.approx(1.6)


def test_compare_standard_errors_equal_a_hand_computation():
    a = accumulate(small_scan()).summary().prompts
    other = {
        "p0": ("code", [scored(0, CHAIN, [1.0, 0.9, 0.6], 2), scored(1, CHAIN, [1.0, 0.7, 0.6], 2)]),
        "p1": ("code", [scored(0, FORK, [1.0, 0.5, 0.4, 0.3], 2)]),
        "p2": ("math", [scored(0, CHAIN, [1.0, 0.4, 0.2], 1), scored(1, FORK, [1.0, 0.6, 0.4, 0.3], 3),
                        scored(2, CHAIN, [1.0, 1.0, 1.0], 2)]),
    }
    result = compare_scans(a, accumulate(other).summary().prompts)
    # Per prompt by hand: B's mean 1 + C_p minus A's, B's tau minus A's, B's acceptance at depth 1 minus A's.
    ceiling = [(2.5 + 2.3) / 2 - 2.1, 2.2 - 2.2, (1.6 + 2.3 + 3.0) / 3 - (1.3 + 2.25 + 3.0) / 3]
    tau = [3.0 - 2.5, 2.0 - 3.0, 8 / 3 - 2.0]
    depth1 = [0.0, 0.0, 1.0 - 2 / 3]
    for metric, diffs in (("expected_length", ceiling), ("tau", tau)):
        d = result.groups["all"].metrics[metric]
        assert d.n == 3 and d.mean == pytest.approx(statistics.mean(diffs))
        assert d.se == pytest.approx(statistics.stdev(diffs) / math.sqrt(3))
        code = result.groups["code"].metrics[metric]
        assert code.se == pytest.approx(statistics.stdev(diffs[:2]) / math.sqrt(2))
        assert result.groups["math"].metrics[metric].se is None  # one prompt: no standard error
    for acc in (result.groups["all"].acceptance_conditional[0], result.groups["all"].acceptance_marginal[0]):
        assert acc.mean == pytest.approx(1 / 9) and acc.se == pytest.approx(statistics.stdev(depth1) / math.sqrt(3))
    one = compare_scans(a, accumulate(other).summary().prompts[:2])
    assert one.only_a == ["p2"] and one.groups["all"].metrics["expected_length"].n == 2


def test_mean_se_edge_cases():
    assert mean_se([]) == (None, None)
    assert mean_se([2.0]) == (2.0, None)
    assert mean_se([1.0, 3.0]) == (2.0, pytest.approx(1.0))


def write_folder(tmp_path, scan) -> None:
    write_manifest(tmp_path, {"schema": "tevviz.scan/1", "settings": {}, "models": {}})
    with RecordWriter(tmp_path) as w:
        for k, (pid, (cat, rounds)) in enumerate(scan.items()):
            line = {"id": pid, "position": k, "category": cat, "prompt": "x", "prompt_token_ids": [1],
                    "token_ids": [t for r in rounds for t in r.committed], "seconds": float(k + 1)}
            w.append(block_bytes(line, [r.to_dict() for r in rounds]))


def test_a_folder_reads_back_the_same_numbers(tmp_path):
    write_folder(tmp_path, small_scan())
    data = open_scan(tmp_path, worst=3)
    assert data.problems == [] and data.unfinished == 0
    read, made = data.summary.to_dict(), accumulate(small_scan()).summary().to_dict()
    assert [w.pop("line") for w in read["worst_rounds"]][:2] == [6, 2]  # where each round lies in the records
    assert read == made | {"worst_rounds": [{k: v for k, v in w.items() if k != "line"} for w in made["worst_rounds"]]}
    block = read_prompt(data, "p2")
    assert [r.index for r in block.rounds] == [0, 1, 2] and block.line["category"] == "math"
    assert done_ids(tmp_path) == {"p0", "p1", "p2"}


def test_damaged_and_torn_lines_are_named_and_the_rest_kept(tmp_path):
    write_folder(tmp_path, small_scan())
    path = tmp_path / RECORDS
    lines = path.read_bytes().splitlines(keepends=True)
    bad = orjson.loads(lines[0])
    bad["round"]["nodes"][1]["P"] = 7.0  # out of [0, 1]
    lines[0] = orjson.dumps(bad) + b"\n"
    path.write_bytes(b"".join(lines) + b'{"type":"round","prompt":"p3","round":{"dir')  # a kill mid-write
    data = open_scan(tmp_path)
    assert len(data.problems) == 2
    assert data.problems[0].startswith(f"{path}:1:") and "P" in data.problems[0]
    assert data.problems[1].startswith(f"{path}:{len(lines) + 1}:") and "torn" in data.problems[1]
    assert data.summary.groups["all"].prompts == 3 and data.index["p0"].rounds == 1  # p0 keeps its other round
    assert repair(tmp_path) > 0 and path.read_bytes() == b"".join(lines)
    assert repair(tmp_path) == 0


def test_a_repeated_round_line_is_named_and_left_out(tmp_path, capsys):
    """`tevviz scan show` on records whose round line is repeated (a bad copy): the line is named as damaged and
    the numbers are those of the intact folder (it crashed ranking the worst rounds, comparing two records)."""
    from tevviz.cli import main

    write_folder(tmp_path, small_scan())
    intact = open_scan(tmp_path).summary.to_dict()
    path = tmp_path / RECORDS
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:1] + lines[:1] + lines[1:]))  # p0's round 0 twice
    assert main(["scan", "show", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"{path}:2: round 0 of prompt 'p0' repeats an earlier line; left out" in out
    data = open_scan(tmp_path)
    assert len(data.problems) == 1 and without_lines(data.summary.to_dict()) == without_lines(intact)


def without_lines(summary: dict) -> dict:
    """A summary without where each worst round lies in the records (a repeated line moves the later ones)."""
    return summary | {"worst_rounds": [{k: v for k, v in w.items() if k != "line"} for w in summary["worst_rounds"]]}


def test_a_folder_of_another_version_opens_with_a_note(tmp_path):
    write_folder(tmp_path, small_scan())
    write_manifest(tmp_path, {"schema": "tevviz.scan/9", "settings": {}, "models": {}})
    data = open_scan(tmp_path)
    assert "tevviz.scan/9" in data.problems[0] and len(data.index) == 3
    write_manifest(tmp_path, {"schema": "something/1"})
    with pytest.raises(TevvizError, match="not a tevviz scan manifest"):
        open_scan(tmp_path)


def test_a_full_disk_cuts_the_block_back(tmp_path, monkeypatch):
    write_folder(tmp_path, small_scan())
    size = (tmp_path / RECORDS).stat().st_size
    real = os.write

    def half_then_full(fd, data):
        if len(data) > 100:
            return real(fd, bytes(data[:100]))
        raise OSError(errno.ENOSPC, "No space left on device")

    w = RecordWriter(tmp_path)
    monkeypatch.setattr(os, "write", half_then_full)
    with pytest.raises(TevvizError, match="No space left"):
        w.append(b"x" * 500)
    monkeypatch.undo()
    w.close()
    assert (tmp_path / RECORDS).stat().st_size == size
    assert len(open_scan(tmp_path).index) == 3


def test_each_block_is_written_whole_and_synced_before_the_next_prompt_starts(tmp_path, monkeypatch):
    """The durability contract a kill cannot show: every byte of a prompt's block is written to the records file
    and fsync'd on that file before the next prompt's decoding begins (and before the scan reports it finished)."""
    from tevviz.engine.scan.prompt_files import ScanPrompt
    from tevviz.engine.scan.scan_run import PlannedPrompt, scan_steps

    write_manifest(tmp_path, {"schema": "tevviz.scan/1", "settings": {}, "models": {}})
    scan = small_scan()
    planned = [PlannedPrompt(ScanPrompt(pid, "x", cat, k, k + 1), [1], False) for k, (pid, (cat, _)) in
               enumerate(scan.items())]
    events: list[tuple] = []
    real_write, real_fsync = os.write, os.fsync
    records_inode = None

    def is_records(fd) -> bool:
        return records_inode is not None and os.fstat(fd).st_ino == records_inode

    def write(fd, data):
        n = real_write(fd, data)
        if is_records(fd):
            events.append(("write", n))
        return n

    def fsync(fd):
        real_fsync(fd)
        if is_records(fd):
            events.append(("fsync", os.fstat(fd).st_size))

    def decode(fn, pair, item, cfg, stop):  # the `call` hook: a prompt "decoded" without a model
        events.append(("decode", item.prompt.id))
        pid = item.prompt.id
        line = {"id": pid, "position": item.prompt.position, "category": item.prompt.category, "prompt": "x",
                "prompt_token_ids": [1], "token_ids": [1], "seconds": 1.0}
        return block_bytes(line, [r.to_dict() for r in scan[pid][1]]), len(scan[pid][1]), 1.0, 1.0

    (tmp_path / RECORDS).touch()
    records_inode = (tmp_path / RECORDS).stat().st_ino
    monkeypatch.setattr(os, "write", write)
    monkeypatch.setattr(os, "fsync", fsync)
    for step in scan_steps(None, planned, None, tmp_path, call=decode):
        events.append(("reported", step.prompt))
    monkeypatch.undo()
    size = (tmp_path / RECORDS).stat().st_size
    # Between one prompt's decoding and the next (or the end): its writes, then an fsync of the file at its full
    # size so far, before the scan reports it or starts the next.
    starts = [i for i, e in enumerate(events) if e[0] == "decode"] + [len(events)]
    written = 0
    for a, b in itertools.pairwise(starts):
        between = events[a + 1:b]
        kinds = [e[0] for e in between]
        assert "write" in kinds and "fsync" in kinds, f"prompt {events[a][1]}: {between}"
        last_write = max(i for i, k in enumerate(kinds) if k == "write")
        first_sync_after = next((i for i in range(last_write + 1, len(kinds)) if kinds[i] == "fsync"), None)
        assert first_sync_after is not None, f"prompt {events[a][1]}: no fsync after its last write: {between}"
        assert first_sync_after < kinds.index("reported"), f"prompt {events[a][1]} reported before its fsync"
        written += sum(e[1] for e in between if e[0] == "write")
        assert between[first_sync_after][1] == written, "the fsync came before the whole block was written"
    assert written == size and done_ids(tmp_path) == set(scan)


def test_prompt_lines_are_checked_by_line_number(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "a", "category": "x"}\n\n{"prompt": ""}\n[1]\n{"id": 5, "prompt": "b"}\n'
                    '{"id": "5", "prompt": "c"}\n')
    with pytest.raises(TevvizError, match=r"p\.jsonl:3: needs a non-empty string field 'prompt'"):
        read_prompts(path)
    prompts, skipped = read_prompts(path, skip_bad=True)
    assert [(p.id, p.category, p.position, p.line) for p in prompts] == [("line1", "x", 0, 1),
                                                                         ("5", "uncategorised", 3, 5)]
    assert [s.split(": ", 1)[0][-1] for s in skipped] == ["3", "4", "6"]
    assert "used by an earlier line" in skipped[2]


@pytest.mark.parametrize("lines, line, words", [
    (['{"id": "a", "prompt": "x"}', '{"id": "b", "prompt": ""}'], 2, "non-empty string field 'prompt'"),
    (['{"id": "a", "prompt": "x"}', '{"id": "b", "prompt": " \\n "}'], 2, "non-empty string field 'prompt'"),
    (['{"id": "a", "prompt": "x"}', '', '{"id": "a", "prompt": "y"}'], 3, "used by an earlier line (line 1)"),
    (['{"id": 5, "prompt": "x"}', '{"id": "5", "prompt": "y"}'], 2, "used by an earlier line (line 1)"),
])
def test_every_prompt_file_reader_refuses_empty_prompts_and_repeated_ids(tmp_path, capsys, lines, line, words):
    """One rule for a prompt file, whoever reads it: the scan, decode/eval/train --prompts and the app's examples
    (tevviz.prompts.load_prompts) refuse an empty prompt and a repeated id by line, or leave the line out alike."""
    from tevviz.cli import main
    from tevviz.prompts import load_prompts

    path = tmp_path / "p.jsonl"
    path.write_text("\n".join(lines) + "\n")
    for read in (read_prompts, load_prompts):
        with pytest.raises(TevvizError, match=rf"p\.jsonl:{line}: ") as e:
            read(path)
        assert words in str(e.value)
    scanned, skipped = read_prompts(path, skip_bad=True)
    loaded = load_prompts(path, skip_bad=True)
    assert [(p.id, p.text) for p in scanned] == [(str(r["id"]), r["prompt"]) for r in loaded] and len(loaded) == 1
    assert len(skipped) == 1 and skipped[0].startswith(f"{path}:{line}: ") and words in skipped[0]
    # Through the command line, before any model loads: exit 2 and the line named.
    assert main(["eval", "--prompts", str(path), "--device", "cpu"]) == 2
    assert f"p.jsonl:{line}: " in capsys.readouterr().err
