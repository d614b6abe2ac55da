"""A scan folder: `manifest.json` (settings, models, prompt file) and `records.jsonl`, one JSON object a line (a
`--shard auto` scan: one `records-RANK-of-COUNT.jsonl` a shard instead, all read as one).

Each finished prompt is one block appended with a single write and an fsync: a line per round
(`{"type": "round", "prompt": ID, "round": ...}`), then the prompt's own line (`{"type": "prompt", ...}`), which
marks the block complete. A block cut short by a kill or a full disk is dropped on reading and cut off by `repair`
before a resume appends. No torch here.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from ..analysis.scan_stats import ScanAccumulator, ScanSummary
from ..errors import TevvizError
from ..records.io import current_settings, parse_round
from ..records.records import RoundRecord

SCAN_SCHEMA = "tevviz.scan/1"
MANIFEST = "manifest.json"
RECORDS = "records.jsonl"
SHARD_RECORDS = re.compile(r"records-(\d+)-of-(\d+)\.jsonl")  # a --shard auto rank's file
AUTO = "auto"  # the manifest's "shard" of a --shard auto folder
PROMPT_PREFIX = b'{"type":"prompt"'  # how a prompt line starts (orjson keeps the key order and adds no spaces)
MAX_PROBLEMS = 50  # damaged lines named in full; the rest are counted


# --- writing --------------------------------------------------------------------------------------------------------


def shard_records_name(index: int, count: int) -> str:
    """The records file of shard `index` of `count` in a --shard auto folder."""
    return f"records-{index:05d}-of-{count:05d}.jsonl"


def records_paths(folder: Path) -> list[Path]:
    """The folder's records files: `records.jsonl` if there is one, then the shards' files by count and rank."""
    names = {p: SHARD_RECORDS.fullmatch(p.name) for p in folder.glob("records-*-of-*.jsonl")}
    shards = sorted((p for p, m in names.items() if m), key=lambda p: (int(names[p][2]), int(names[p][1])))
    return [p for p in [folder / RECORDS] if p.is_file()] + shards


def write_manifest(folder: Path, manifest: dict) -> None:
    """Write the manifest whole or not at all (a temporary file of its own, fsync, rename): ranks of one scan may
    write the same manifest at once."""
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{MANIFEST}-", suffix=".tmp")
    try:
        with open(fd, "w", encoding="utf-8") as f:
            json.dump(manifest, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, folder / MANIFEST)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_manifest(folder: str | Path) -> dict:
    path = Path(folder) / MANIFEST
    if not path.is_file():
        raise TevvizError(f"{folder}: not a scan folder (no {MANIFEST})")
    try:
        m = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:  # what went wrong, never what the file holds
        why = (e.strerror if isinstance(e, OSError) else "not JSON" if isinstance(e, json.JSONDecodeError)
               else "not text")
        raise TevvizError(f"{path}: cannot read the manifest ({why})") from None
    if not isinstance(m, dict) or not str(m.get("schema", "")).startswith("tevviz.scan/"):
        raise TevvizError(f"{path}: not a tevviz scan manifest (its schema is not tevviz.scan/N)")
    if isinstance(m.get("settings"), dict):
        m["settings"] = current_settings(m["settings"])
    return m


def block_bytes(prompt_line: dict, rounds: list[dict]) -> bytes:
    """A prompt's lines: its rounds, then the prompt line that closes the block."""
    pid = prompt_line["id"]
    lines = [orjson.dumps({"type": "round", "prompt": pid, "round": r}) for r in rounds]
    lines.append(orjson.dumps({"type": "prompt", **prompt_line}))
    return b"\n".join(lines) + b"\n"


class RecordWriter:
    """Appends prompt blocks to a records file, each whole and synced to disk before the next prompt starts."""

    def __init__(self, folder: Path, name: str = RECORDS):
        self.path = folder / name
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def append(self, data: bytes) -> None:
        """Write one block; on a failed write (a full disk) the file is cut back to where it was."""
        start = os.lseek(self.fd, 0, os.SEEK_END)
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self.fd, view):]
            os.fsync(self.fd)
        except BaseException as e:
            # A full disk, or Ctrl-C between two partial writes: no part of the block stays. A block written whole
            # and interrupted in its fsync stays: the system writes it out all the same.
            if isinstance(e, OSError) or view:
                os.ftruncate(self.fd, start)
            if isinstance(e, OSError):
                raise TevvizError(f"cannot write {self.path}: {e.strerror}; the prompts before this one are kept") \
                    from None
            raise

    def close(self) -> None:
        os.close(self.fd)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def complete_end(path: Path) -> int:
    """The byte offset just past the last complete prompt block of a records file (0 when there is none)."""
    end = offset = 0
    if not path.is_file():
        return 0
    with open(path, "rb") as f:
        for line in f:
            offset += len(line)
            if line.startswith(PROMPT_PREFIX) and line.endswith(b"\n"):
                end = offset
    return end


def repair(folder: Path, name: str = RECORDS) -> int:
    """Cut the records file after its last complete prompt block; returns the bytes dropped."""
    path = folder / name
    if not path.is_file():
        return 0
    end, size = complete_end(path), path.stat().st_size
    if end < size:
        with open(path, "r+b") as f:
            f.truncate(end)
            f.flush()
            os.fsync(f.fileno())
    return size - end


def _finished_lines(folder: Path):
    """The prompt lines of the complete blocks of every records file in the folder."""
    for path in records_paths(folder):
        with open(path, "rb") as f:
            for line in f:
                if line.startswith(PROMPT_PREFIX) and line.endswith(b"\n"):
                    try:
                        d = orjson.loads(line)
                    except orjson.JSONDecodeError:
                        continue
                    if isinstance(d, dict) and "id" in d:
                        yield d


def done_ids(folder: Path) -> set[str]:
    """The ids of the prompts whose block is complete, in any records file of the folder."""
    return {d["id"] for d in _finished_lines(folder)}


def prompt_hash(pid: str, position: int, chat: bool | None, text: str) -> str:
    """What names a prompt across shards and restarts: its id, place in the file, chat flag and text (the manifest
    already pins the file, settings and models), hashed."""
    return hashlib.sha256(orjson.dumps([pid, position, chat, text])).hexdigest()[:32]


def done_hashes(folder: Path) -> set[str]:
    """The prompt hashes of the complete blocks in every records file of the folder: what a resume skips."""
    return {prompt_hash(d["id"], d.get("position"), d.get("chat"), d.get("prompt")) for d in _finished_lines(folder)}


# --- reading --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PromptEntry:
    """Where a finished prompt's block lies in the records file."""

    id: str
    category: str
    position: int
    start: int  # byte offset of its first line
    end: int  # byte offset past its prompt line
    rounds: int
    file: str = RECORDS  # the records file it is in


@dataclass
class ScanData:
    """An opened scan: its manifest, what it says, where each prompt lies, and the lines that could not be read."""

    folder: Path
    manifest: dict
    summary: ScanSummary
    index: dict[str, PromptEntry] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    unfinished: int = 0  # round lines at the end without their prompt line (an interrupted prompt)


def _prompt_fields(d: dict) -> str | None:
    checks = (("id", str), ("category", str), ("position", int), ("seconds", (int, float)))
    for key, kind in checks:
        if not isinstance(d.get(key), kind) or isinstance(d.get(key), bool):
            return f"the prompt line's {key!r} is missing or of the wrong type"
    for key in ("prompt_token_ids", "token_ids"):
        if not isinstance(d.get(key), list) or not all(isinstance(t, int) for t in d[key]):
            return f"the prompt line's {key!r} must be a list of token ids"
    return None


def _problem(data: ScanData, where: str, msg: str) -> None:
    if len(data.problems) < MAX_PROBLEMS:
        data.problems.append(f"{where}: {msg}")
    elif len(data.problems) == MAX_PROBLEMS:
        data.problems.append("more damaged lines left out")


def open_scan(folder: str | Path, worst: int = 20) -> ScanData:
    """Read a scan folder line by line (flat memory); a damaged line is named in `problems` and the rest kept."""
    folder = Path(folder)
    manifest = read_manifest(folder)
    acc = ScanAccumulator(worst_k=worst)
    data = ScanData(folder, manifest, acc.summary())
    if manifest.get("schema") != SCAN_SCHEMA:
        _problem(data, str(folder / MANIFEST), f"schema {manifest.get('schema')!r}, read as {SCAN_SCHEMA!r}")
    for path in records_paths(folder):
        data.unfinished += _read_records(data, acc, path)
    data.summary = acc.summary()
    return data


def _read_records(data: ScanData, acc: ScanAccumulator, path: Path) -> int:
    """Add one records file's finished prompts to `data` and `acc`; returns the round lines left unfinished."""
    pending: list[tuple[RoundRecord, int]] = []
    pending_id, start, offset = None, 0, 0
    with open(path, "rb") as f:
        for number, line in enumerate(f, 1):
            here, offset = offset, offset + len(line)
            where = f"{path}:{number}"
            try:
                d = orjson.loads(line)
                kind = d.get("type") if isinstance(d, dict) else None
            except orjson.JSONDecodeError:
                _problem(data, where, "not a JSON object" + ("" if line.endswith(b"\n") else " (a torn last line)"))
                continue
            if kind == "round":
                if pending_id != d.get("prompt"):
                    if pending:
                        _problem(data, where, f"prompt {pending_id!r} has rounds but no prompt line; left out")
                    pending, pending_id, start = [], d.get("prompt"), here
                try:
                    r = parse_round(d.get("round"), f"round of prompt {pending_id!r}")
                except TevvizError as e:
                    _problem(data, where, str(e))
                    continue
                if any(r.index == seen.index for seen, _ in pending):
                    _problem(data, where, f"round {r.index} of prompt {pending_id!r} repeats an earlier line; left out")
                    continue
                pending.append((r, number))
            elif kind == "prompt":
                bad = _prompt_fields(d)
                if bad is None and pending and pending_id != d["id"]:
                    bad = f"its rounds belong to prompt {pending_id!r}, not {d['id']!r}"
                if bad is not None:
                    _problem(data, where, bad + "; the prompt is left out")
                elif d["id"] in data.index:
                    _problem(data, where, f"prompt {d['id']!r} appears twice; the second is left out")
                else:
                    rounds = [r for r, _ in pending]
                    acc.add(d["id"], d["category"], d["position"], rounds, float(d["seconds"]),
                            [n for _, n in pending])
                    data.index[d["id"]] = PromptEntry(d["id"], d["category"], d["position"],
                                                      start if pending else here, offset, len(rounds), path.name)
                pending, pending_id, start = [], None, offset
            else:
                _problem(data, where, f"unknown line type {kind!r}")
    return len(pending)


@dataclass(frozen=True)
class ScannedPrompt:
    """One finished prompt read back whole: its prompt line (text, token ids, seed...) and its rounds."""

    line: dict
    rounds: list[RoundRecord]


def read_prompt(data: ScanData, prompt_id: str) -> ScannedPrompt:
    """The block of one prompt of an opened scan, read from its place in the records file."""
    entry = data.index.get(prompt_id)
    if entry is None:
        raise TevvizError(f"no finished prompt {prompt_id!r} in {data.folder}")
    with open(data.folder / entry.file, "rb") as f:
        f.seek(entry.start)
        block = f.read(entry.end - entry.start)
    rounds, line = [], {}
    for raw in block.splitlines():
        d = orjson.loads(raw)
        if d.get("type") == "round":
            try:
                rounds.append(parse_round(d["round"], f"round of prompt {prompt_id!r}"))
            except TevvizError:
                continue  # named when the scan was opened; the prompt's other rounds still show
        else:
            line = d
    return ScannedPrompt(line, rounds)
