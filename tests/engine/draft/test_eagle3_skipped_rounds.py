"""A round without a draft keeps the EAGLE-3 head's unread (state, token) pairs (tevviz/engine/draft/
eagle3_drafting.py): under an automatic budget whose cost model skips most drafts, every drafted round's depth-1 law
is the head's published step over the whole committed stream, the skipped rounds' tokens included."""

from __future__ import annotations

import pytest
from conftest import VOCAB, greedy_generate, losing_cost_model, tiny_model
from test_eagle3_drafting import IDS, TRAIN, assert_same_law, reference_law, trained
from test_eagle3_loading import head_config, head_tensors, write_head, write_target

from tevviz.engine import BuilderConfig, DecodeConfig, DecodeSession, SamplingConfig
from tevviz.engine.load.models import load_pair

pytestmark = pytest.mark.usefixtures("one_thread")
N = 40


def test_every_drafted_round_after_skipped_ones_reads_the_whole_stream(tmp_path):
    target = write_target(tmp_path / "target", tiny_model("llama", 1, layers=3))
    head = write_head(tmp_path / "head", head_config("vllm", ids=IDS["llama"], vd=VOCAB),
                      head_tensors(seed=2, vd=VOCAB))
    pair = trained(load_pair(str(target), str(head), device="cpu"))
    w = {k: v.float() if v.is_floating_point() else v for k, v in pair.draft.state_dict().items()}
    builder = BuilderConfig(name="best-first", budget=16, depth=5, children=4, auto=True)
    cfg = DecodeConfig(sampling=SamplingConfig(temperature=0.0), max_new_tokens=N, stop_on_eos=False, builder=builder)
    s = DecodeSession(pair, TRAIN[5], cfg, cost_model=losing_cost_model(16, 5))
    checked, skipped_before = 0, 0
    while not s.done:
        context = list(s.tokens)
        record = s.step()
        if not record.sizing.drafted:
            skipped_before += 1
        elif record.size > 1:
            assert_same_law(record, reference_law(pair, w, context, IDS["llama"]), 4,
                            f"round {record.index}, after {skipped_before} rounds without a draft")
            checked += skipped_before > 0
    assert checked >= 2 and skipped_before >= 5  # drafted rounds that came after skipped ones
    assert s.generated == greedy_generate(pair.target, TRAIN[5], N)
