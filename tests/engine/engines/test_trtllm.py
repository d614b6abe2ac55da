"""TensorRT-LLM's iteration log read by engines/trtllm.py: steps, other ranks left out, its own length."""

from __future__ import annotations

import json

import pytest

from tevviz.engine.engines.reading import FormatError
from tevviz.engine.engines.trtllm import PARSERS, detect, parse_iteration_log


def row(it, drafted, accepted, requests, length=None, **extra) -> str:
    stats = {"numDraftTokens": drafted, "numAcceptedTokens": accepted, "numRequestsWithDraftTokens": requests}
    if length is not None:
        stats["acceptanceLength"] = length
    return json.dumps({"iter": it, "iterLatencyMS": 5.0, "specDecodingStats": stats, **extra})


def test_detect_and_parsers():
    assert detect(row(1, 6, 4, 2)) == "trtllm-iteration-log"
    assert detect('{"iter": 1, "iterLatencyMS": 5.0}') is None
    assert PARSERS == {"trtllm-iteration-log": parse_iteration_log}


def test_steps_and_the_engines_own_length_by_hand():
    # Iteration 1: 2 requests, 4 of 6 drafted accepted, length 3.0; iteration 2: 3 requests, 3 of 9, length 2.0;
    # iteration 3 drafted nothing; a row without specDecodingStats is not an iteration that drafted.
    text = "\n".join([row(0, 0, 0, 0), row(1, 6, 4, 2, 3.0), '{"iter": 5}', row(2, 9, 3, 3, 2.0), row(3, 0, 0, 0)])
    run = parse_iteration_log(text, "it.jsonl")
    assert (run.engine, run.format) == ("tensorrt-llm", "trtllm-iteration-log")
    assert (run.steps, run.accepted, run.drafted, run.reached) == (5, 7, 15, ())
    assert run.acceptance_length == pytest.approx(1 + 7 / 5)
    (figure,) = run.engine_figures
    # Weighted by requests: (3.0 * 2 + 2.0 * 3) / 5, not the mean of 3.0 and 2.0.
    assert figure.name == "TensorRT-LLM acceptanceLength" and figure.value == pytest.approx(12 / 5)
    no_positions = "no per-position figures (TensorRT-LLM counts tokens per iteration, not per draft position)"
    assert run.notes == (no_positions,)


def test_a_missing_length_is_taken_as_one_plus_accepted_per_request():
    run = parse_iteration_log(row(1, 6, 4, 2), "it.jsonl")
    assert run.engine_figures[0].value == pytest.approx(3.0)


def test_other_ranks_rows_are_left_out_and_counted():
    rows = [row(1, 6, 4, 2, attentionDpRank=0), row(1, 6, 4, 2, attentionDpRank=1),
            row(2, 9, 3, 3, attention_dp_rank="0"), row(2, 9, 3, 3, attention_dp_rank="1"),
            row(2, 9, 3, 3, attention_dp_rank=2)]
    run = parse_iteration_log("\n".join(rows), "it.jsonl")
    assert (run.steps, run.accepted, run.drafted) == (5, 7, 15)
    assert run.notes[1] == "3 rows of other attention-DP ranks left out (they repeat rank 0's counters)"


def test_without_a_rank_a_repeated_iteration_is_another_ranks_copy():
    run = parse_iteration_log("\n".join([row(1, 6, 4, 2), row(1, 6, 4, 2), row(2, 9, 3, 3)]), "it.jsonl")
    assert (run.steps, run.accepted) == (5, 7) and len(run.notes) == 2
    # Rows without an iteration number are all counted.
    plain = parse_iteration_log("\n".join([json.dumps({"specDecodingStats": {
        "numDraftTokens": 4, "numAcceptedTokens": 1, "numRequestsWithDraftTokens": 1}})] * 2), "it.jsonl")
    assert (plain.steps, plain.accepted, plain.drafted) == (2, 2, 8)


@pytest.mark.parametrize("text, words", [
    (row(0, 0, 0, 0), "no iteration with specDecodingStats.numDraftTokens > 0"),
    ('{"iter": 1}', "no iteration with specDecodingStats"),
    (json.dumps({"iter": 4, "specDecodingStats": {"numDraftTokens": 6, "numAcceptedTokens": 2}}),
     "iteration 4 numRequestsWithDraftTokens should be a number, got None"),
    (row(4, 6, -1, 2), "iteration 4 numAcceptedTokens should be a non-negative count"),
    (row(4, 6, 2, 2, "fast"), "iteration 4 acceptanceLength should be a number, got 'fast'"),
])
def test_bad_logs_are_refused_naming_the_file(text, words):
    with pytest.raises(FormatError) as e:
        parse_iteration_log(text, "it.jsonl")
    assert str(e.value).startswith("it.jsonl: ") and words in str(e.value)
