"""A scan folder's files (tevviz/engine/scan/scan_files.py): which records files a folder has and in what order, the
blocks a kill cut short found and cut off, what a resume skips, the manifest written whole and read with its refusals,
and every kind of damaged line named with its place while the rest is read."""

import orjson
import pytest
from conftest import scored_round as scored

from tevviz.engine.errors import TevvizError
from tevviz.engine.scan.scan_files import (
    MANIFEST,
    MAX_PROBLEMS,
    PROMPT_PREFIX,
    RECORDS,
    PromptEntry,
    RecordWriter,
    block_bytes,
    complete_end,
    done_hashes,
    done_ids,
    open_scan,
    prompt_hash,
    read_manifest,
    read_prompt,
    records_paths,
    repair,
    shard_records_name,
    write_manifest,
)

CHAIN = [-1, 0, 1]
SCHEMA = {"schema": "tevviz.scan/1", "settings": {}, "models": {}}


def prompt_line(pid: str, position: int = 0, rounds=(), **fields) -> dict:
    return {"id": pid, "position": position, "category": "code", "prompt": f"text of {pid}", "prompt_token_ids": [1],
            "token_ids": [t for r in rounds for t in r.committed], "seconds": 1.0, **fields}


def block(pid: str, position: int = 0, n_rounds: int = 1, **fields) -> bytes:
    rounds = [scored(i, CHAIN, [1.0, 0.8, 0.4], 2) for i in range(n_rounds)]
    return block_bytes(prompt_line(pid, position, rounds, **fields), [r.to_dict() for r in rounds])


def round_line(pid: str, index: int = 0) -> bytes:
    return orjson.dumps({"type": "round", "prompt": pid, "round": scored(index, CHAIN, [1.0, 0.8, 0.4], 2).to_dict()})


def test_a_block_is_its_rounds_then_the_prompt_line_that_closes_it():
    lines = block("p0", n_rounds=2).splitlines(keepends=True)
    assert [orjson.loads(x)["type"] for x in lines] == ["round", "round", "prompt"]
    assert lines[-1].startswith(PROMPT_PREFIX) and lines[-1].endswith(b"\n")  # what complete_end looks for


def test_the_records_files_come_unsharded_first_then_by_count_and_rank(tmp_path):
    # A relaunch with another count of ranks leaves the earlier count's files beside the new ones.
    names = [shard_records_name(i, n) for n, i in ((3, 0), (2, 1), (1, 0), (2, 0), (3, 2))]
    for name in (*names, "records-1-of-x.jsonl", RECORDS):
        (tmp_path / name).touch()
    assert [p.name for p in records_paths(tmp_path)] == [RECORDS] + [shard_records_name(i, n) for n, i in
                                                                     ((1, 0), (2, 0), (2, 1), (3, 0), (3, 2))]
    assert shard_records_name(1, 2) == "records-00001-of-00002.jsonl"


def test_a_block_cut_short_is_found_and_cut_off(tmp_path):
    whole = block("p0")
    with RecordWriter(tmp_path) as w:
        w.append(whole)
    path = tmp_path / RECORDS
    torn = round_line("p1") + b"\n" + b'{"type":"prompt","id":"p1"'  # a kill in the prompt line: no newline
    path.write_bytes(whole + torn)
    assert complete_end(path) == len(whole)
    assert repair(tmp_path) == len(torn) and path.read_bytes() == whole
    assert repair(tmp_path) == 0
    assert complete_end(tmp_path / "none.jsonl") == 0 and repair(tmp_path, "none.jsonl") == 0


def test_a_resume_skips_the_finished_prompts_of_every_records_file(tmp_path):
    (tmp_path / shard_records_name(0, 2)).write_bytes(block("a", 0))
    # c's block is damaged: its prompt line begins as one but is no JSON.
    (tmp_path / shard_records_name(1, 2)).write_bytes(block("b", 1, chat=True) + round_line("c") + b"\n"
                                                      + b'{"type":"prompt","id":"c",\n')
    assert done_ids(tmp_path) == {"a", "b"}
    assert done_hashes(tmp_path) == {prompt_hash("a", 0, None, "text of a"), prompt_hash("b", 1, True, "text of b")}
    # What names a prompt: its id, place, chat flag and text, each of them.
    same = prompt_hash("a", 0, None, "text of a")
    assert len({same, prompt_hash("b", 0, None, "text of a"), prompt_hash("a", 1, None, "text of a"),
                prompt_hash("a", 0, False, "text of a"), prompt_hash("a", 0, None, "text of b")}) == 5


def test_the_manifest_is_written_whole_and_read_back(tmp_path):
    write_manifest(tmp_path, SCHEMA | {"settings": {"budget": 8}})
    write_manifest(tmp_path, SCHEMA | {"settings": {"budget": 16}})
    assert read_manifest(tmp_path)["settings"] == {"budget": 16}
    assert [p.name for p in tmp_path.iterdir()] == [MANIFEST]  # no temporary file left beside it


def test_a_manifest_from_before_the_builders_name_reads_its_kind_as_the_name(tmp_path):
    write_manifest(tmp_path, SCHEMA | {"settings": {"builder": {"kind": "sampled", "depth": 4}, "verifier": "tev"}})
    assert read_manifest(tmp_path)["settings"] == {"builder": {"name": "sampled", "depth": 4}, "verifier": "tev"}


@pytest.mark.parametrize("text, said", [(None, "not a scan folder (no manifest.json)"),
                                        ("{", "cannot read the manifest (not JSON)"),
                                        ('{"schema": "other/1"}', "not a tevviz scan manifest"),
                                        ("[1]", "not a tevviz scan manifest")])
def test_a_bad_manifest_is_refused(tmp_path, text, said):
    if text is not None:
        (tmp_path / MANIFEST).write_text(text)
    with pytest.raises(TevvizError, match=said.replace("(", r"\(").replace(")", r"\)")):
        read_manifest(tmp_path)


def test_every_damaged_line_is_named_with_its_place_and_the_rest_is_read(tmp_path):
    write_manifest(tmp_path, SCHEMA)
    good = block("p0")
    lines = [
        good,                                                       # 1-2: p0, whole
        round_line("p1") + b"\n" + block_bytes(prompt_line("p2"), []),  # 3-4: p1's rounds, p2's prompt line
        good,                                                       # 5-6: p0 again
        b'{"type":"note"}\n',                                       # 7
        block_bytes(prompt_line("p5", seconds=None), []),           # 8
        round_line("p3") + b"\n",                                   # 9
        round_line("p4", 0) + b"\n" + round_line("p4", 1) + b"\n",  # 10-11: p4 cut short
    ]
    (tmp_path / RECORDS).write_bytes(b"".join(lines))
    data = open_scan(tmp_path)
    at = f"{tmp_path / RECORDS}:"
    assert data.problems == [
        f"{at}4: its rounds belong to prompt 'p1', not 'p2'; the prompt is left out",
        f"{at}6: prompt 'p0' appears twice; the second is left out",
        f"{at}7: unknown line type 'note'",
        f"{at}8: the prompt line's 'seconds' is missing or of the wrong type; the prompt is left out",
        f"{at}10: prompt 'p3' has rounds but no prompt line; left out",
    ]
    assert data.unfinished == 2
    assert data.index == {"p0": PromptEntry("p0", "code", 0, 0, len(good), 1, RECORDS)}
    assert data.summary.groups["all"].prompts == 1


def test_damaged_lines_past_the_first_fifty_are_counted_not_named(tmp_path):
    write_manifest(tmp_path, SCHEMA)
    (tmp_path / RECORDS).write_bytes(b"not json\n" * (MAX_PROBLEMS + 10))
    problems = open_scan(tmp_path).problems
    assert len(problems) == MAX_PROBLEMS + 1 and problems[-1] == "more damaged lines left out"


def test_a_prompt_is_read_back_from_its_place_in_its_shards_file(tmp_path):
    write_manifest(tmp_path, SCHEMA)
    first, second = block("p0", 0), block("p1", 1, n_rounds=2)
    (tmp_path / shard_records_name(0, 2)).write_bytes(first)
    (tmp_path / shard_records_name(1, 2)).write_bytes(block("p2", 2) + second)
    data = open_scan(tmp_path)
    entry = data.index["p1"]
    assert (entry.file, entry.start, entry.end, entry.rounds) == (shard_records_name(1, 2), len(block("p2", 2)),
                                                                  len(block("p2", 2)) + len(second), 2)
    back = read_prompt(data, "p1")
    assert [r.index for r in back.rounds] == [0, 1] and back.line["id"] == "p1" and back.line["position"] == 1
    with pytest.raises(TevvizError, match="no finished prompt 'zz'"):
        read_prompt(data, "zz")
