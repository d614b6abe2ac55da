"""The prompts a newcomer meets first make the embedded target write code, not a line repeated: the README's and
`tevviz --help`'s examples and every prompt of the stdlib scan set (a scan's statistics about degenerate text say
little). Each is decoded greedily, 48 tokens, as `tevviz decode` does at temperature 0 (which the exactness tests
tie to the target's greedy output)."""

from __future__ import annotations

import collections
import itertools
import json
import re
from pathlib import Path

import pytest
import torch

from tevviz.cli import EXAMPLES
from tevviz.engine.load.models import assets_dir, load_pair

pytestmark = pytest.mark.usefixtures("one_thread")
ROOT = Path(__file__).resolve().parents[2]
TOKENS = 48


def example_prompts() -> list[str]:
    """The prompts of the README's commands and notebook snippet, and of --help's examples."""
    text = (ROOT / "README.md").read_text(encoding="utf-8") + EXAMPLES
    found = re.findall(r'--prompt "([^"]+)"', text) + re.findall(r'tevviz\.session\(pair, "([^"]+)"', text)
    return sorted(set(found))


def scan_prompts() -> dict[str, str]:
    lines = (assets_dir() / "scan_prompts" / "stdlib.jsonl").read_text(encoding="utf-8").splitlines()
    return {row["id"]: row["prompt"] for row in map(json.loads, lines)}


def degenerate(text: str) -> str | None:
    """Why `text` is not sensible code: one line most of its lines, a word many times running, or a piece of
    text repeated five times on end; None when it is none of these."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if lines:
        line, n = collections.Counter(lines).most_common(1)[0]
        if n >= 3 and n > len(lines) / 2:
            return f"the line {line!r} is {n} of its {len(lines)} lines"
    words = re.findall(r"\w+", text)
    run = longest = 1
    for a, b in itertools.pairwise(words):
        run = run + 1 if a == b else 1
        longest = max(longest, run)
    if longest >= 5:
        return f"a word {longest} times running"
    piece = re.search(r"(\w.{2,}?)\1{4,}", text, re.DOTALL)
    return f"{piece.group(1)!r} five times on end" if piece else None


@pytest.fixture(scope="module")
def continue_greedily():
    pair = load_pair()

    def run(prompt: str) -> str:
        ids = pair.tokenizer.encode(prompt)
        x = torch.tensor([ids])
        out = pair.target.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=TOKENS, do_sample=False,
                                   pad_token_id=0)
        return pair.tokenizer.decode(out[0, len(ids):].tolist())

    return run


def test_the_check_knows_degenerate_text_from_code():
    assert degenerate("#\n#\n#\n#\n") and degenerate("import sys\nimport sys\nimport sys\nimport os\n")
    assert degenerate("def f(value, value, value, value, value):") and degenerate("get_file_from_file_from_" * 6)
    assert degenerate('    """Return the lines of a file."""\n    with open(path) as f:\n        return list(f)\n') \
        is None


def test_the_examples_have_prompts():
    assert len(example_prompts()) >= 1 and len(scan_prompts()) == 40


@pytest.mark.parametrize("prompt", example_prompts())
def test_each_example_prompt_makes_the_target_write_code(continue_greedily, prompt):
    text = continue_greedily(prompt)
    assert degenerate(text) is None, f"{prompt!r} -> {text!r}: {degenerate(text)}"


def test_each_stdlib_scan_prompt_makes_the_target_write_code(continue_greedily):
    bad = {}
    for pid, prompt in scan_prompts().items():
        text = continue_greedily(prompt)
        if degenerate(text):
            bad[pid] = f"{degenerate(text)}: {text[:60]!r}"
    assert not bad, bad
