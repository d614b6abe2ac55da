"""Offline chat prompts for a chat target: questions, instructions, small code tasks, and tasks cut from
the Python standard library's docstrings and code. Training and held-out prompts share no topic and
no stdlib file, so held-out figures measure prompts the drafter never saw."""

from __future__ import annotations

import ast
import random
import sysconfig
from pathlib import Path

HOLDOUT_EVERY = 10  # every 10th topic, subject and stdlib file (sorted order) is held out

TOPICS = ["photosynthesis", " black holes", " the water cycle", " plate tectonics", " vaccines", " the French Revolution", " supply and\ndemand", " compound interest", " machine learning", " neural networks", " the immune system", " climate change", " volcanoes", "\nthe Roman Empire", " electricity", " magnetism", " the printing press", " DNA", " evolution", " the stock market", " inflation", "\nrenewable energy", " solar panels", " the moon landing", " gravity", " the speed of light", " coral reefs", " honey bees", "\nthe internet", " encryption", " blockchains", " recycling", " sleep", " meditation", " coffee", " tea ceremonies", " chess openings", "\njazz music", " the Renaissance", " democracy", " the Great Wall of China", " the Amazon rainforest", " deserts", " glaciers", "\nearthquakes", " hurricanes", " antibiotics", " the human heart", " the brain", " memory", " language learning", " prime numbers", "\nprobability", " statistics", " the Pythagorean theorem", " calculus", " the periodic table", " atoms", " chemical bonds", "\nrainbows", " sound waves", " telescopes", " Mars", " Jupiter", " comets", " dinosaurs", " fossils", " the Industrial Revolution", "\ntrains", " airplanes", " electric cars", " bicycles", " gardening", " composting", " baking bread", " fermentation", " chocolate", "\nolive oil", " spices", " nutrition", " exercise", " running a marathon", " yoga", " public speaking", " time management", "\nnegotiation", " leadership", " teamwork", " job interviews", " writing a resume", " saving money", " budgeting", " taxes", "\ninsurance", " renting an apartment", " moving to a new city", " travel packing", " learning to swim", " camping", " maps", "\nthe compass", " lighthouses", " bridges", " skyscrapers", " concrete", " steel", " glass making", " paper", " ink", " photography", "\nfilm cameras", " animation", " video games", " board games", " origami", " knitting", " pottery", " painting with watercolors", "\npoetry", " novels", " Shakespeare", " mythology", " folk tales", " museums", " libraries", " universities", " scientific method", "\npeer review", " vaccines for pets", " dogs", " cats", " horses", " owls", " octopuses", " whales", " penguins", " ants", " spiders", "\nmushrooms", " trees", " forests", " rivers", " oceans", " tides", " the seasons", " weather forecasting", " clouds", " snowflakes"]

SUBJECTS = ["a cat", " the ocean", " autumn", " a lighthouse", " the city at night", " a robot", " friendship", " a mountain", " rain", "\na library", " the moon", " a garden", " a train journey", " coffee", " winter mornings", " a lost key", " the stars", " a river", "\nan old clock", " the first day of school", " a desert", " a thunderstorm", " a bakery", " music", " a bicycle", " the sea shore"]

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
CODE_TASKS = ["reverses a string", " checks whether a number is prime", " returns the n-th Fibonacci number", " counts the vowels\nin a string", " merges two sorted lists", " removes duplicates from a list while keeping order", " flattens a nested\nlist", " computes the factorial of n", " checks whether a string is a palindrome", " finds the largest element of a\nlist", " sorts a list of dictionaries by a key", " reads a CSV file and returns its rows", " counts word frequencies\nin a text", " converts Celsius to Fahrenheit", " returns the greatest common divisor of two numbers", " transposes a\nmatrix", " checks whether two strings are anagrams", " computes the mean and median of a list", " validates an email\naddress with a regular expression", " returns the binary representation of an integer", " finds all primes below\nn", " rotates a list by k positions", " groups words by their first letter", " parses a date string", " computes the\nsum of the digits of a number", " chunks a list into pieces of size n", " returns the longest word in a sentence", "\ncapitalizes every word of a sentence", " computes the dot product of two vectors", " implements binary search", "\nimplements bubble sort", " implements a stack class", " implements a queue with two stacks", " counts lines in a\nfile", " finds the second largest number in a list", " checks balanced parentheses", " converts a Roman numeral to\nan integer", " returns the intersection of two lists", " computes the power set of a list", " shuffles a list"]
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


def _stdlib_functions(files: list[Path], rng: random.Random, limit: int) -> list[dict]:
    """Code tasks from documented stdlib functions, and explanation tasks from short stdlib functions."""
    out: list[dict] = []
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef) or node.name.startswith("_"):
                continue
            doc = ast.get_docstring(node)
            first = doc.strip().split("\n\n")[0].replace("\n", " ") if doc else ""
            args = ", ".join(a.arg for a in node.args.args)
            if 20 <= len(first) <= 240:
                out.append({"kind": "stdlib task", "source": path.name,
                            "prompt": f"Write a Python function `{node.name}({args})`: {first}"})
            src = ast.get_source_segment(text, node) or ""
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


def write_prompt_file(path: Path, n_eval: int = 40, n_train: int = 64, seed: int = 0) -> int:
    """The pair's prompt file: held-out prompts (split eval) and training prompts (split train, for ExitTrain)."""
    import json

    rows = make_chat_prompts(seed=seed)
    picked = sample(rows, "eval", n_eval, seed) + sample(rows, "train", n_train, seed)
    with path.open("w", encoding="utf-8") as f:
        for i, r in enumerate(picked):
            f.write(json.dumps({"id": f"c{i:03d}", **r}) + "\n")
    return len(picked)


def sample(rows: list[dict], split: str, n: int, seed: int = 0) -> list[dict]:
    """`n` prompts of one split spread over the kinds, each with a title and the chat flag (for prompt files)."""
    rng = random.Random(seed)
    by_kind: dict[str, list[dict]] = {}
    for r in rows:
        if r["split"] == split:
            by_kind.setdefault(r["kind"], []).append(r)
    for items in by_kind.values():
        rng.shuffle(items)
    picked: list[dict] = []
    while len(picked) < n and any(by_kind.values()):
        for items in by_kind.values():
            if items and len(picked) < n:
                picked.append(items.pop())
    return [{"split": split, "title": f"{r['kind']}: {r['prompt'].splitlines()[0][:60]}", "chat": True,
             "kind": r["kind"], **({"source": r["source"]} if "source" in r else {}), "prompt": r["prompt"]}
            for r in picked]
