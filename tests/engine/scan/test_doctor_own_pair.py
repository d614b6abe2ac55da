"""The doctor on a user's own pair (`--target DIR --draft HEAD`, tevviz/commands/doctor.py): --limit is honoured
from a pool of built-in chat prompts and the count said with why; the tokenizer's chat template is used where it has
one; --prompts is taken; a verdict whose prompts measure too loosely says so, with the SE it would need."""

from __future__ import annotations

import json
import math

import pytest
from conftest import VOCAB, tiny_model, word_tokenizer
from test_eagle3_loading import head_config, head_tensors, write_head, write_target

from tevviz.cli import build_parser, main
from tevviz.commands.doctor import doctor_rows
from tevviz.engine.analysis.doctor_report import FLOOR, ReadingResult, Z
from tevviz.engine.scan.doctor import builtin_rows, chain_yield, depth_rates, encode_rows, judge
from tevviz.options import source_from_args
from tevviz.render.doctor import doctor_text

TEMPLATE = "{% for m in messages %}t1 {{ m['content'] }} t2 {% endfor %}{% if add_generation_prompt %}t3{% endif %}"


@pytest.fixture(scope="module")
def own_pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("own")
    target = write_target(root / "target", tiny_model("llama", 1, layers=3))
    head = write_head(root / "head", head_config("vllm", ids=(1, 2, 3), vd=VOCAB), head_tensors(seed=1, vd=VOCAB))
    return target, head


def rows_for(own_pair, *extra):
    args = build_parser().parse_args(["doctor", "--target", str(own_pair[0]), "--draft", str(own_pair[1]), *extra])
    return doctor_rows(args, source_from_args(args))


def test_limit_is_honoured_and_said_with_why(own_pair):
    pool = builtin_rows()
    assert len(pool) >= 100 and all(r["chat"] is None for r in pool)
    rows, where = rows_for(own_pair, "--limit", "24")
    assert len(rows) == 24 and len({r["id"] for r in rows}) == 24
    assert where.startswith(f"24 prompts: 24 of {len(pool)}, spread over the set (--limit 24)")
    assert "built-in chat prompts" in where and "--prompts FILE" in where
    rows, where = rows_for(own_pair, "--limit", "1000")
    assert len(rows) == len(pool) and f"all {len(pool)}: --limit 1000 asks for more than there are" in where


def test_prompts_are_taken_from_a_file(own_pair, tmp_path):
    path = tmp_path / "mine.jsonl"
    path.write_text("".join(json.dumps({"id": f"m{i}", "prompt": f"t{i} t{i + 1}"}) + "\n" for i in range(5)))
    rows, where = rows_for(own_pair, "--prompts", str(path), "--limit", "3")
    assert [r["prompt"] for r in rows] == ["t0 t1", "t1 t2", "t3 t4"] and str(path) in where


def test_the_tokenizers_chat_template_wraps_the_built_in_prompts():
    tok = word_tokenizer()
    rows = [{"id": "a", "prompt": "t5 t6", "chat": None}]
    assert encode_rows(tok, rows) == [[5, 6]]  # no template: the text as it is
    tok.chat_template = TEMPLATE
    assert encode_rows(tok, rows) == [[1, 5, 6, 2, 3]]


def test_the_doctor_on_an_own_pair_decodes_as_many_prompts_as_asked(own_pair, capsys):
    code = main(["doctor", "--target", str(own_pair[0]), "--draft", str(own_pair[1]), "--limit", "12",
                 "--max-new-tokens", "4", "--device", "cpu", "--json"])
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert code in (0, 1) and out["prompts"] == 12
    assert "12 prompts: 12 of" in captured.err


def reading(name: str, own: bool, per_prompt: list[tuple[int, int]]) -> ReadingResult:
    rounds = [[[True, False]] * k + [[False]] * (n - k) for k, n in per_prompt]
    depths = depth_rates(rounds)
    return ReadingResult(name, (1,), (), own, "", depths, sum(n for _, n in per_prompt), chain_yield(depths))


def test_too_little_power_is_said_with_the_se_it_would_need():
    # 4 prompts that disagree: +0.06 tokens per round overall, measured to about +-0.1
    own = reading("own", True, [(10, 20)] * 4)
    other = reading("other", False, [(16, 20), (8, 20), (15, 20), (9, 20)])
    report = judge("eagle3", "head", "checked", [own, other], 4, 64, "eagle")
    se = report.threshold / Z
    assert report.ok and report.underpowered and se > FLOOR / Z
    need = math.ceil(4 * (se / (FLOOR / Z)) ** 2)
    assert "these 4 prompts give too little power" in report.verdict
    assert f"needs ± {FLOOR / Z:.3f} or less, about {need} prompts like these" in report.verdict
    assert "verdict: inconclusive (too few prompts)" in doctor_text(report)
    # many prompts that agree: the floor rules, nothing to add, a plain ok
    sure = judge("eagle3", "head", "checked", [reading("own", True, [(50, 100)] * 40),
                                                reading("other", False, [(50, 100)] * 40)], 40, 64, "eagle")
    assert sure.ok and not sure.underpowered and "power" not in sure.verdict and "verdict: ok" in doctor_text(sure)
