"""The demo prompt file (assets/prompts.jsonl): one {id, title, split, prompt} object per line."""

from __future__ import annotations

import json
from pathlib import Path

from .engine.errors import TevvizError
from .engine.models import assets_dir

# The embedded pair's first examples in the app: each ends where a line would go on, at a colon, since its tokenizer
# makes a newline and the next line's indentation one token. A prompt that ends with the newline (as the held-out
# prompts of assets/prompts.jsonl do) leaves its small target no indented token to write, and it wanders off into
# a column of '#' lines; after these it writes a body of plausible code at T = 0.
DEMO_PROMPTS = (
    {"id": "demo-check", "title": "demo: a type check that raises", "split": "demo",
     "prompt": "def _check_name(name):\n    if not isinstance(name, str):"},
    {"id": "demo-eq", "title": "demo: __eq__ (isinstance, NotImplemented)", "split": "demo",
     "prompt": "    def __eq__(self, other):"},
    {"id": "demo-main", "title": "demo: main(argv) with its docstring", "split": "demo",
     "prompt": "import os\nimport sys\n\n\ndef main(argv=None):"},
    {"id": "demo-read", "title": "demo: def read_lines(path)", "split": "demo", "prompt": "def read_lines(path):"},
)


def default_prompts_path() -> Path:
    return assets_dir() / "prompts.jsonl"


def with_demo_prompts(path: str | Path | None, rows: list[dict]) -> list[dict]:
    """`rows` of a prompt file, after DEMO_PROMPTS when the file is the embedded pair's (the shipped default)."""
    shipped = path is None or Path(path).resolve() == default_prompts_path().resolve()
    return [dict(r) for r in DEMO_PROMPTS] + rows if shipped else rows


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
