"""Offline chat prompts for a chat target: questions, instructions, small code tasks, and tasks cut from
the Python standard library's docstrings and code. Training and held-out prompts share no topic and
no stdlib file, so held-out figures measure prompts the drafter never saw."""

from __future__ import annotations

import ast
import json
import random
import re
import sysconfig
from pathlib import Path

from ..engine.load.pairs import assets_dir

HOLDOUT_EVERY = 10  # every 10th topic, subject and stdlib file (sorted order) is held out

# The words the templates are filled with: topics, subjects and code tasks (assets/prompts/chat_words.json).
_WORDS = json.loads((assets_dir() / "prompts" / "chat_words.json").read_text(encoding="utf-8"))
TOPICS: list[str] = _WORDS["topics"]
SUBJECTS: list[str] = _WORDS["subjects"]
CODE_TASKS: list[str] = _WORDS["code_tasks"]

QUESTION_TEMPLATES = (
    "What is {t}?",
    "Explain {t} in simple terms.",
    "Why does {t} matter?",
    "Give me three interesting facts about {t}.",
    "How would you explain {t} to a ten-year-old?",
    "Write a short paragraph about {t}.",
    "What are common misconceptions about {t}?",
    "Summarize the history of {t} in a few sentences.",
    "List the pros and cons of {t}.",
    "What questions should a beginner ask about {t}?",
    "Write a quiz question about {t}, with the answer.",
    "Compare {t} with something from everyday life.",
)
CREATIVE_TEMPLATES = (
    "Write a short poem about {s}.",
    "Write a haiku about {s}.",
    "Tell a very short story about {s}.",
    "Describe {s} in three sentences.",
    "Write a limerick about {s}.",
)
CODE_TEMPLATES = (
    "Write a Python function that {c}.",
    "How do I write a function in Python that {c}?",
    "Write a Python function that {c}, with a docstring and a short example.",
    "Write a JavaScript function that {c}.",
)
MATH_TEMPLATES = (
    "What is {a} + {b}?",
    "What is {a} times {b}?",
    "Solve for x: {a}x + {b} = {c}.",
    "If I have {a} apples and give away {b}, how many are left?",
    "What is {a} percent of {c}?",
)


def _split(items: list[str]) -> tuple[list[str], list[str]]:
    items = [i.strip().replace("\n", " ") for i in items if i.strip()]
    return ([x for k, x in enumerate(items) if k % HOLDOUT_EVERY],
            [x for k, x in enumerate(items) if k % HOLDOUT_EVERY == 0])


_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")  # a line with its ending, as ast splits source


def _segment(lines: list[str], node: ast.AST) -> str:
    """`ast.get_source_segment(text, node)` over the text's lines split once (that call splits the whole text
    again for each node)."""
    first, last = node.lineno - 1, node.end_lineno - 1
    if first == last:
        return lines[first].encode()[node.col_offset:node.end_col_offset].decode()
    return "".join([lines[first].encode()[node.col_offset:].decode(), *lines[first + 1:last],
                    lines[last].encode()[:node.end_col_offset].decode()])


def _stdlib_functions(files: list[Path], rng: random.Random, limit: int) -> list[dict]:
    """Code tasks from documented stdlib functions, and explanation tasks from short stdlib functions."""
    out: list[dict] = []
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError):
            continue
        lines = _LINE.findall(text)
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef) or node.name.startswith("_"):
                continue
            doc = ast.get_docstring(node)
            first = doc.strip().split("\n\n")[0].replace("\n", " ") if doc else ""
            args = ", ".join(a.arg for a in node.args.args)
            if 20 <= len(first) <= 240:
                out.append({"kind": "stdlib task", "source": path.name,
                            "prompt": f"Write a Python function `{node.name}({args})`: {first}"})
            src = _segment(lines, node)
            if 3 <= src.count("\n") <= 14 and len(src) <= 600:
                out.append({"kind": "explain code", "source": path.name,
                            "prompt": f"Explain what this Python function does:\n```python\n{src}\n```"})
    rng.shuffle(out)
    return out[:limit]


def stdlib_files() -> tuple[list[Path], list[Path]]:
    """Non-test stdlib modules, split into (train, held-out)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.rglob("*.py")
                   if not {"test", "tests", "site-packages", "idle_test"} & set(p.relative_to(root).parts)
                   and not p.name.startswith("test_"))
    return ([p for k, p in enumerate(files) if k % HOLDOUT_EVERY],
            [p for k, p in enumerate(files) if k % HOLDOUT_EVERY == 0])


def make_chat_prompts(n_stdlib: int = 600, seed: int = 0) -> list[dict]:
    """All prompts with a `split` of train or eval; topics, subjects, code tasks and files never cross splits."""
    rng = random.Random(seed)
    rows: list[dict] = []
    topics, subjects, tasks = _split(TOPICS), _split(SUBJECTS), _split(CODE_TASKS)
    files = stdlib_files()
    for split, k in (("train", 0), ("eval", 1)):
        for t in topics[k]:
            rows += [{"kind": "question", "split": split, "prompt": tpl.format(t=t)} for tpl in QUESTION_TEMPLATES]
        for s in subjects[k]:
            rows += [{"kind": "creative", "split": split, "prompt": tpl.format(s=s)} for tpl in CREATIVE_TEMPLATES]
        for c in tasks[k]:
            rows += [{"kind": "code task", "split": split, "prompt": tpl.format(c=c)} for tpl in CODE_TEMPLATES]
        for _ in range(60 if k == 0 else 8):
            a, b, c = rng.randint(2, 99), rng.randint(2, 99), rng.randint(100, 999)
            rows.append({"kind": "math", "split": split, "prompt": rng.choice(MATH_TEMPLATES).format(a=a, b=b, c=c)})
        limit = n_stdlib if k == 0 else max(8, n_stdlib // 10)
        rows += [dict(r, split=split) for r in _stdlib_functions(files[k], rng, limit)]
    return rows

