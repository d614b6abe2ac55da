"""Prompt files: JSON lines, one prompt a line. The one reader of them (scans, decode/eval/train --prompts, the app's
examples), a scan rank's share of the prompts, and the digest that pins a prompt file in a scan's manifest. No torch.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from ..errors import TevvizError

DEFAULT_CATEGORY = "uncategorised"


@dataclass(frozen=True)
class ScanPrompt:
    """One line of a prompt file: its text, id, category, chat flag and position in the file (0-based)."""

    id: str
    text: str
    category: str
    position: int
    line: int
    chat: bool | None = None  # None: the scan's default


@dataclass(frozen=True)
class PromptRow:
    """A line of a prompt file as read: its number, its position among the file's non-blank lines, its object."""

    line: int
    position: int
    row: dict


def read_prompt_rows(path: str | Path, skip_bad: bool = False, hint: str = "") -> tuple[list[PromptRow], list[str]]:
    """The one reader of prompt files (scans, decode/eval/train --prompts, the app's examples), with one rule: a
    line is an object with a non-empty string `prompt` and optionally `id` (a string or whole number, unique),
    `category` (a string) and `chat` (true or false); blank lines are passed over. A line that breaks the rule is an
    error naming its line (`hint` added), or with `skip_bad` is left out and named in the problems returned."""
    p = Path(path)
    if not p.is_file():
        raise TevvizError(f"prompt file {str(p)!r} does not exist")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise TevvizError(f"cannot read the prompt file {str(p)!r}: {getattr(e, 'strerror', None) or e}") from None
    rows, skipped, seen = [], [], {}
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            row = None
        problem = "not a JSON object" if row is None else _prompt_problem(row, seen, i)
        if problem is not None:
            if not skip_bad:
                raise TevvizError(f"{p}:{i}: {problem}{hint}")
            skipped.append(f"{p}:{i}: {problem}")
        else:
            seen[str(row.get("id", f"line{i}"))] = i
            rows.append(PromptRow(i, len(rows) + len(skipped), row))
    if not rows:
        raise TevvizError(f"{p} has no prompts")
    return rows, skipped


def read_prompts(path: str | Path, skip_bad: bool = False) -> tuple[list[ScanPrompt], list[str]]:
    """The prompts of a JSON-lines file for a scan (read_prompt_rows) and the problems of the lines left out."""
    rows, skipped = read_prompt_rows(path, skip_bad, hint=" (--skip-bad leaves such lines out)")
    return [ScanPrompt(str(r.row.get("id", f"line{r.line}")), r.row["prompt"],
                       str(r.row.get("category") or DEFAULT_CATEGORY), r.position, r.line, r.row.get("chat"))
            for r in rows], skipped


def _prompt_problem(row, seen: dict[str, int], line: int) -> str | None:
    if not isinstance(row, dict):
        return "not a JSON object"
    if not isinstance(row.get("prompt"), str) or not row["prompt"].strip():
        return "needs a non-empty string field 'prompt'"
    pid = row.get("id", f"line{line}")
    if not isinstance(pid, (str, int)) or isinstance(pid, bool):
        return "'id' must be a string or a whole number"
    if str(pid) in seen:
        return f"the id {str(pid)!r} is used by an earlier line (line {seen[str(pid)]})"
    if "category" in row and not isinstance(row["category"], str):
        return "'category' must be a string"
    if "chat" in row and not isinstance(row["chat"], bool):
        return "'chat' must be true or false"
    return None


def shard(prompts: list[ScanPrompt], index: int, count: int) -> list[ScanPrompt]:
    """Every `count`-th prompt from position `index` (0-based): shard `index` of `count`."""
    return [p for p in prompts if p.position % count == index]


def file_digest(path: str | Path) -> str:
    """The sha256 of a file's bytes, in hex: what a scan's manifest pins its prompt file by."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
