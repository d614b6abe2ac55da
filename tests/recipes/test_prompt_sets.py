"""The SmolLM2 pair's prompt sets: the free-form held-out set (assets/scan_prompts/smollm2_freeform.jsonl) loads,
renders through SmolLM2's chat template, shares no template and no six-word run with the generated training prompts
(tevviz/recipes/chat_prompts.py), and is reached by `tevviz eval --split freeform`, `tevviz scan` and the app's
examples."""

from __future__ import annotations

import ast
import json
import re
import sysconfig
from pathlib import Path

import pytest

from tevviz.cli import build_parser, main
from tevviz.commands import prompt_rows
from tevviz.engine.decode.session import encode_prompt
from tevviz.engine.load.models import ModelSource, assets_dir
from tevviz.engine.load.pairs import NAMED_PAIRS, named_pair
from tevviz.engine.scan.prompt_files import read_prompts
from tevviz.prompts import load_prompts
from tevviz.recipes import chat_prompts
from tevviz.recipes.chat_prompts import make_chat_prompts
from tevviz.recipes.fetch import is_fetched

RUN = 6  # words: no free-form prompt shares a run this long with a generated one
FREEFORM_SPLIT, FREEFORM_FILE = named_pair("smollm2").held_out[0]  # its split name and the file that holds it
_cache: dict = {}


def freeform_prompts() -> list[dict]:
    """The free-form set's rows, each with its conversation as `messages` (one user turn for a single prompt)."""
    rows = [json.loads(line) for line in (assets_dir() / FREEFORM_FILE).read_text(encoding="utf-8").splitlines()
            if line.strip()]
    return [r if "messages" in r else {**r, "messages": [{"role": "user", "content": r["prompt"]}]} for r in rows]


def conversation_text(tokenizer, messages: list[dict]) -> str:
    """A conversation through the chat template up to the assistant's turn: what a multi-turn row holds as its
    `prompt` (with `chat` false, since it is templated already)."""
    return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)


def words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def runs(text: str, n: int = RUN) -> set[tuple[str, ...]]:
    w = words(text)
    return {tuple(w[i:i + n]) for i in range(len(w) - n + 1)}


def generated() -> list[dict]:
    """Every prompt the training generator writes (train and its own held-out split)."""
    if "rows" not in _cache:
        _cache["rows"] = make_chat_prompts()
    return _cache["rows"]


def smollm2_tokenizer(fetched: bool = False):
    """SmolLM2's tokenizer: the one shipped with the pair's drafter, or the fetched target's own."""
    from transformers import AutoTokenizer

    pair = named_pair("smollm2")
    folder = pair.target_path() if fetched else next(iter(pair.drafter_paths().values()))
    if folder not in _cache:
        _cache[folder] = AutoTokenizer.from_pretrained(folder)
    return _cache[folder]


def test_the_freeform_set_loads_with_its_split_categories_and_conversations():
    rows = load_prompts(named_pair("smollm2").split_path(FREEFORM_SPLIT), FREEFORM_SPLIT)
    assert len(rows) >= 100
    assert len({r["id"] for r in rows}) == len(rows)
    categories = {r["category"] for r in rows}
    assert {"question", "writing", "explain", "fix", "summarise", "translate", "plan", "code",
            "conversation"} <= categories
    assert {r["style"] for r in rows} == {"casual", "formal"}
    lengths = sorted(len(r["prompt"]) for r in rows if r["chat"])
    assert lengths[0] < 40 and lengths[-1] > 400  # a line to a paragraph with pasted text
    conversations = [r for r in freeform_prompts() if len(r["messages"]) > 1]
    assert len(conversations) >= 10
    for r in conversations:
        roles = [m["role"] for m in r["messages"]]
        assert roles[-1] == "user" and roles[::2] == ["user"] * len(roles[::2]) and "assistant" in roles[1::2], r["id"]
        assert r["chat"] is False  # its prompt is the conversation templated already
    scanned, skipped = read_prompts(assets_dir() / FREEFORM_FILE)
    assert skipped == [] and [p.id for p in scanned] == [r["id"] for r in rows]


def test_every_prompt_renders_through_smollm2s_chat_template():
    """Each row's prompt, encoded as tevviz encodes it (scan, eval, app), is its conversation through the template."""
    tok = smollm2_tokenizer()
    for r in freeform_prompts():
        want = tok.apply_chat_template(r["messages"], add_generation_prompt=True, tokenize=True)
        want = list(want["input_ids"] if hasattr(want, "keys") else want)
        if len(r["messages"]) > 1:
            assert r["prompt"] == conversation_text(tok, r["messages"]), r["id"]
        assert encode_prompt(tok, r["prompt"], chat=r["chat"]) == want, r["id"]
        assert len(want) < 1024, r["id"]


@pytest.mark.realpair
@pytest.mark.skipif(not is_fetched("smollm2"), reason="the smollm2 pair is not fetched (tevviz pair fetch smollm2)")
def test_the_fetched_targets_tokenizer_encodes_the_set_as_the_shipped_one():
    shipped, target = smollm2_tokenizer(), smollm2_tokenizer(fetched=True)
    for r in freeform_prompts():
        assert encode_prompt(target, r["prompt"], chat=r["chat"]) == encode_prompt(shipped, r["prompt"], chat=r["chat"])


def test_no_template_and_no_six_word_run_is_shared_with_the_training_generator():
    templates = (chat_prompts.QUESTION_TEMPLATES + chat_prompts.CREATIVE_TEMPLATES + chat_prompts.CODE_TEMPLATES
                 + chat_prompts.MATH_TEMPLATES)
    patterns = [re.compile(re.sub(r"\\\{\w+\\\}", ".+", re.escape(t)), re.IGNORECASE | re.DOTALL) for t in templates]
    seen = set().union(*(runs(r["prompt"]) for r in generated()))
    assert len(seen) > 10_000
    for r in freeform_prompts():
        for m in r["messages"]:
            assert not any(p.search(m["content"]) for p in patterns), (r["id"], m["content"])
            assert not runs(m["content"]) & seen, (r["id"], sorted(runs(m["content"]) & seen))


def test_the_generator_still_splits_its_own_prompts():
    """Its word lists come from assets/prompts/chat_words.json, and held-out words never reach training prompts."""
    rows = generated()
    assert {r["split"] for r in rows} == {"train", "eval"}
    for words_, held in ((chat_prompts.TOPICS, "question"), (chat_prompts.SUBJECTS, "creative")):
        assert all(w == w.strip() and "\n" not in w for w in words_)
        train_text = " ".join(r["prompt"] for r in rows if r["split"] == "train" and r["kind"] == held)
        assert words_[0] not in train_text and words_[1] in train_text  # every 10th word is held out, the first


def test_segment_is_asts_source_segment():
    texts = ["def f(x):\r\n    return 'é' + x\r\n\r\nclass A:\n    def g(self):\n        return 1\n",
             "def h():\n    pass"]
    root = Path(sysconfig.get_paths()["stdlib"])
    texts += [(root / name).read_text(encoding="utf-8") for name in ("textwrap.py", "shlex.py")]
    for text in texts:
        lines = chat_prompts._LINE.findall(text)
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.Return, ast.Name)):
                assert chat_prompts._segment(lines, node) == ast.get_source_segment(text, node)


def test_eval_takes_the_freeform_split_of_the_smollm2_pair():
    args = build_parser().parse_args(["eval", "--pair", "smollm2", "--split", "freeform"])
    rows = prompt_rows(args)
    assert len(rows) >= 100 and {r["split"] for r in rows} == {FREEFORM_SPLIT}
    held = prompt_rows(build_parser().parse_args(["eval", "--pair", "smollm2"]))
    assert held == load_prompts(assets_dir() / "prompts_chat.jsonl", "eval")  # the held-out split as it was
    assert named_pair("smollm2").splits() == ["eval", "train", FREEFORM_SPLIT]


@pytest.mark.parametrize("argv, says", [
    (["eval", "--split", "freeform"], "the stdlib pair has no prompt split 'freeform': choose one of train, eval"),
    pytest.param(["eval", "--pair", "smollm2", "--split", "free"], "choose one of eval, train, freeform",
                 marks=[pytest.mark.realpair, pytest.mark.skipif(not is_fetched("smollm2"), reason=(
                     "the smollm2 pair is not fetched (tevviz pair fetch smollm2): its target is found first"))]),
    (["train", "--split", "nope", "--out", "OUT"], "the stdlib pair has no prompt split 'nope'"),
])
def test_a_split_the_pair_has_not_is_refused_before_any_model_loads(argv, says, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(ModelSource, "load", lambda self: pytest.fail("a model was about to load"))
    assert main([a.replace("OUT", str(tmp_path / "out")) for a in argv]) == 2
    assert says in capsys.readouterr().err


def test_every_listed_drafter_is_shipped():
    for pair in NAMED_PAIRS.values():
        assert list(pair.drafter_paths()) == list(pair.drafters), pair.name
    assert "tevviz-smollm2-draft-exittrain" not in named_pair("smollm2").drafters


def test_the_apps_examples_and_scan_sets_offer_the_freeform_prompts():
    from tevviz.app.demo import example_prompts, with_held_out_examples
    from tevviz.app.scan_view import scan_prompt_files

    pair = named_pair("smollm2")
    rows = with_held_out_examples(example_prompts(pair.prompts_path()), pair)
    splits = [r["split"] for r in rows]
    free = [r for r in rows if r["split"] == FREEFORM_SPLIT]
    assert 4 <= len(free) <= 12 and all(r["chat"] for r in free)
    assert len({r["category"] for r in free}) == len(free)  # one of each category
    assert splits.index("eval") < splits.index(FREEFORM_SPLIT) < splits.index("train")
    stdlib = example_prompts()
    assert with_held_out_examples(stdlib, named_pair("stdlib")) == stdlib
    assert scan_prompt_files()["smollm2_freeform"] == assets_dir() / FREEFORM_FILE
