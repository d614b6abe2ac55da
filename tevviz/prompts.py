"""The demo prompt file (assets/prompts.jsonl): one {id, title, split, prompt} object per line."""

from __future__ import annotations

import json
from pathlib import Path

from .engine.errors import TevvizError
from .engine.models import assets_dir


def default_prompts_path() -> Path:
    return assets_dir() / "prompts.jsonl"


def load_prompts(path: str | Path | None = None, split: str | None = None, skip_bad: bool = False) -> list[dict]:
    """Prompts of a JSONL file (the shipped one by default), optionally only one split.

    A line that is not an object with a string 'prompt' is an error, or is left out with `skip_bad`.
    """
    p = Path(path) if path is not None else default_prompts_path()
    if not p.is_file():
        raise TevvizError(f"prompt file {str(p)!r} does not exist")
    rows = []
    for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            row = None
        if not isinstance(row, dict) or not isinstance(row.get("prompt"), str):
            if skip_bad:
                continue
            raise TevvizError(f"{p}:{i}: not a JSON object" if row is None else
                              f"{p}:{i}: each line needs a string field 'prompt'")
        row.setdefault("id", f"line{i}")
        row.setdefault("title", row["id"])
        if split is None or row.get("split") == split:
            rows.append(row)
    if not rows:
        raise TevvizError(f"{p} has no prompts" + (f" in split {split!r}" if split else ""))
    return rows
