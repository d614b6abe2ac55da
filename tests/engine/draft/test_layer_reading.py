"""Which target states a drafter reads: said for every drafter that reads any, overridden by --layer-ids (the model
source's `layer_ids`), and a bad override refused in words with nothing changed."""

from __future__ import annotations

import pytest
from _dflash import dflash_config, write_drafter
from conftest import tiny_model, tiny_pair, word_tokenizer

from tevviz.engine.draft.drafters import override_reading, reading_of
from tevviz.engine.errors import TevvizError
from tevviz.engine.load.models import ModelSource


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("reading")
    target = tiny_model("llama", 1, layers=3)
    target.save_pretrained(root / "target")
    word_tokenizer().save_pretrained(root / "target")
    write_drafter(root / "draft", dflash_config(layer_ids=(0, 2)))
    return str(root / "target"), str(root / "draft")


def test_a_block_drafter_says_which_states_it_reads_and_an_override_changes_them(folders):
    target, draft = folders
    pair = ModelSource(target=target, draft=draft).load()
    own = reading_of(pair)
    assert own.layer_ids == (1, 3) and "id + 1" in own.why  # decoder layers 0 and 2: hidden_states 1 and 3
    assert pair.draft.block.target_layer_ids == (0, 2)
    moved = ModelSource(target=target, draft=draft, layer_ids=(0, 2)).load()
    assert reading_of(moved).layer_ids == (0, 2) and moved.draft.block.target_layer_ids == (-1, 1)


@pytest.mark.parametrize("ids,said", [((1, 2, 3), "reads 2 target states, got 3"),
                                      ((1, 4), "from 0 (the embedding output) to 3"),
                                      ((-1, 2), "from 0")])
def test_a_bad_override_is_refused_in_words_and_changes_nothing(folders, ids, said):
    target, draft = folders
    pair = ModelSource(target=target, draft=draft).load()
    with pytest.raises(TevvizError, match=said.replace("(", r"\(").replace(")", r"\)")):
        override_reading(pair, ids)
    assert reading_of(pair).layer_ids == (1, 3)


def test_a_plain_causal_lm_reads_no_target_states():
    pair = tiny_pair("llama")
    assert reading_of(pair) is None
    with pytest.raises(TevvizError, match="reads no target states"):
        override_reading(pair, (1,))


def test_decode_says_which_states_the_drafter_read_in_its_output_and_json(folders, capsys):
    from tevviz.cli import main

    target, draft = folders
    argv = ["decode", "--target", target, "--draft", draft, "--prompt", "t1 t2 t3", "--max-new-tokens", "6",
            "--layer-ids", "0,2"]
    assert main(argv + ["--json"]) == 0
    import json

    out = json.loads(capsys.readouterr().out)
    assert out["drafter_reading"]["layer_ids"] == [0, 2] and "--layer-ids 0,2" in out["drafter_reading"]["why"]
    assert main(argv) == 0
    assert "drafter reads the target's hidden_states [0, 2]: --layer-ids 0,2" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(argv[:-2] + ["--layer-ids", "0,x"])
    assert "comma-separated whole numbers" in capsys.readouterr().err


def test_the_app_and_an_export_say_which_states_the_drafter_read(folders):
    from tevviz.app.controller import Controller
    from tevviz.app.source import PairSource
    from tevviz.app.state import AppState, decode_settings
    from tevviz.app.views import stats_markdown

    target, draft = folders
    pair = ModelSource(target=target, draft=draft, layer_ids=(0, 2)).load()
    _, cfg = decode_settings("t1 t2 t3", 0, 0, 1.0, 0, "ddtree", 8, 3, 2, 4, "4,2", "tev", 6)
    st = Controller(PairSource(pair=pair)).step(AppState(), "t1 t2 t3", cfg)
    assert st.meta["drafter_reading"]["layer_ids"] == [0, 2]
    assert "The drafter reads the target's hidden_states [0, 2]: --layer-ids 0,2" in stats_markdown(st)
