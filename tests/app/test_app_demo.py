"""The app's first impression (tevviz/app/demo.py): its first examples are the demo prompts, after which the
embedded target writes code, and the start page names the real pair."""

from __future__ import annotations

import json

from tevviz.cli import main


def test_the_apps_first_examples_are_the_demo_prompts_and_the_target_writes_code_after_them(capsys):
    from tevviz.app.demo import example_prompts
    from tevviz.prompts import DEMO_PROMPTS, load_prompts

    rows = example_prompts()
    assert [r["id"] for r in rows[: len(DEMO_PROMPTS)]] == [d["id"] for d in DEMO_PROMPTS]
    assert rows[len(DEMO_PROMPTS):] == load_prompts(skip_bad=True)  # the held-out prompts follow, unchanged
    assert {r["split"] for r in load_prompts()} == {"train", "eval"}  # training and evaluation never see them
    for row in DEMO_PROMPTS:
        assert main(["decode", "--prompt", row["prompt"], "--max-new-tokens", "32", "--json", "--threads", "1"]) == 0
        text = json.loads(capsys.readouterr().out)["text"]
        lines = [ln for ln in text.split("\n")[1:] if ln.strip()]
        # An indented body, not the column of '#' lines the target writes after a prompt that ends at a newline.
        assert text.startswith("\n ") and lines and not any(ln.strip() == "#" for ln in lines), (row["id"], text)


def test_the_start_page_names_the_real_pair(tmp_path, monkeypatch):
    from tevviz.app.demo import pair_hint
    from tevviz.app.source import PairSource
    from tevviz.engine.load.models import ModelSource

    monkeypatch.setenv("TEVVIZ_CACHE", str(tmp_path))
    assert "`tevviz pair fetch smollm2`" in pair_hint(PairSource())
    target = tmp_path / "models" / "SmolLM2-135M-Instruct"
    target.mkdir(parents=True)
    (target / "config.json").write_text("{}")
    assert "is fetched: restart with `tevviz --pair smollm2`" in pair_hint(PairSource())
    assert pair_hint(PairSource(ModelSource(pair="smollm2"))) == ""  # already on it


def test_the_app_leaves_a_core_for_a_browser_on_its_own_machine():
    """Bound to this machine alone the browser shares its cores: the measured thread choice is capped one below them;
    bound wider (the browser elsewhere), no cap."""
    from tevviz.app.demo import browser_cap

    assert browser_cap("127.0.0.1", cores=8) == 7 and browser_cap("localhost", cores=2) == 1
    assert browser_cap("127.0.0.1", cores=1) == 1
    assert browser_cap("0.0.0.0", cores=8) is None
