"""The demo prompt file (assets/prompts.jsonl): one {id, title, split, prompt} object per line."""

from __future__ import annotations

from pathlib import Path

from .engine.errors import TevvizError
from .engine.load.models import assets_dir
from .engine.scan.prompt_files import read_prompt_rows

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

    The lines are read by the one prompt-file reader (engine.scan.prompt_files.read_prompt_rows, the scan's): a line
    that is not an object with a non-empty string 'prompt', or repeats an earlier line's id, is an error naming it, or
    is left out with `skip_bad`.
    """
    p = Path(path) if path is not None else default_prompts_path()
    rows = []
    for read in read_prompt_rows(p, skip_bad)[0]:
        row = dict(read.row)
        row.setdefault("id", f"line{read.line}")
        row.setdefault("title", row["id"])
        if split is None or row.get("split") == split:
            rows.append(row)
    if not rows:
        raise TevvizError(f"{p} has no prompts" + (f" in split {split!r}" if split else ""))
    return rows
