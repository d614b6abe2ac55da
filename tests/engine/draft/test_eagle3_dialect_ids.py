"""Every EAGLE-3 config dialect round-trips a head's layer ids (tevviz/engine/draft/eagle3_config.py): a head reading
hidden_states (3, 4, 7), (2, 3, 6) or (0, 4, 8) of an 8-layer target, saved in each of the four dialects and loaded
back, reads the same states; SpecForge's ids as written are worked by hand (outputs of layers only after a leading 1,
SGLang's first-id rule)."""

from __future__ import annotations

import json

import pytest
from test_eagle3_loading import DIALECTS, LAYERS, head_config, head_tensors, write_head

from tevviz.engine.draft.eagle3_config import IDS_KEY
from tevviz.engine.draft.eagle3_io import save_head
from tevviz.engine.load.models import load_pair

pytestmark = pytest.mark.usefixtures("one_thread")

# hidden_states ids -> what SpecForge's eagle_config holds: a leading 2 is written as outputs of layers (minus 1,
# so it starts with 1); any other first id is written as hidden_states indices, unchanged
SPECFORGE = {(3, 4, 7): [3, 4, 7], (2, 3, 6): [1, 2, 5], (0, 4, 8): [0, 4, 8]}


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    from conftest import tiny_model
    from test_eagle3_loading import write_target

    return write_target(tmp_path_factory.mktemp("ids") / "target", tiny_model("llama", 1, layers=LAYERS))


@pytest.mark.parametrize("ids", list(SPECFORGE))
def test_each_dialect_saves_and_reloads_the_same_ids(target, tmp_path, ids):
    head = write_head(tmp_path / "given", head_config("vllm", ids=ids), head_tensors(seed=4))
    pair = load_pair(str(target), str(head), device="cpu")
    assert pair.draft.layer_ids == ids
    for dialect in DIALECTS:
        save_head(pair.draft, tmp_path / dialect, dialect)
        raw = json.loads((tmp_path / dialect / "config.json").read_text())
        written = raw["eagle_config"][IDS_KEY] if dialect == "specforge" else raw[IDS_KEY]
        assert written == (SPECFORGE[ids] if dialect == "specforge" else list(ids)), dialect
        again = load_pair(str(target), str(tmp_path / dialect), device="cpu").draft
        assert again.layer_ids == ids, f"{dialect} wrote {written} and read back {again.layer_ids}"
        save_head(again, tmp_path / f"{dialect}-twice", dialect)  # and once more from the reloaded head
        assert load_pair(str(target), str(tmp_path / f"{dialect}-twice"), device="cpu").draft.layer_ids == ids
