"""vLLM's log lines, /metrics text and responses read by engines/vllm.py's parsers to figures worked by hand."""

from __future__ import annotations

import json

import pytest

from tevviz.engine.engines.reading import FormatError
from tevviz.engine.engines.vllm import PARSERS, detect, parse_log, parse_metrics, parse_responses


def line(mean: str, accepted: int, drafted: int, rates: str) -> str:
    return (f"INFO 12-05 10:00:00 [loggers.py:123] SpecDecoding metrics: Mean acceptance length: {mean}, Accepted "
            f"throughput: 1.00 tokens/s, Drafted throughput: 3.00 tokens/s, Accepted: {accepted} tokens, Drafted: "
            f"{drafted} tokens, Per-position acceptance rate: {rates}, Avg Draft acceptance rate: 40.0%")


def test_detect_tells_the_three_formats_apart():
    assert detect(line("2.00", 10, 30, "0.600, 0.300, 0.100")) == "vllm-log"
    assert detect('vllm:spec_decode_num_drafts_total{engine="0"} 3\n') == "vllm-metrics"
    assert detect('{"metrics": {"speculative_decoding": {}}}') == "vllm-response"
    assert detect("vllm:num_requests_running 3\n") is None
    assert set(PARSERS) == {"vllm-log", "vllm-metrics", "vllm-response"}


def test_log_intervals_of_different_depths_sum_position_by_position():
    # Interval 1: K = 3, 10 steps (1 + 10/10 = 2.00, 30 drafted = 10 * 3), positions 6, 3, 1.
    # Interval 2: K = 2, 4 steps (1 + 3/4 = 1.75, 8 drafted = 4 * 2), positions 2, 1.
    text = "\n".join([line("2.00", 10, 30, "0.600, 0.300, 0.100"), "INFO other", line("1.75", 3, 8, "0.500, 0.250")])
    run = parse_log(text, "v.log")
    assert (run.engine, run.format) == ("vllm", "vllm-log")
    assert (run.steps, run.accepted, run.drafted, run.reached) == (14, 13, 38, (8, 4, 1))
    assert run.notes == ("steps rebuilt from each interval's rounded mean length and per-position rates",)
    # Summed the other way round, the shorter row is padded just the same.
    flipped = parse_log("\n".join([line("1.75", 3, 8, "0.500, 0.250"), line("2.00", 10, 30, "0.600, 0.300, 0.100")]),
                        "v.log")
    assert flipped.reached == (8, 4, 1)


def test_a_log_whose_figures_allow_several_step_counts_says_so():
    # 42 accepted at a printed mean of 1.14 and rates 0.140, 0.000: 300 or 301 steps fit; 300 is nearest (1.140).
    run = parse_log(line("1.14", 42, 599, "0.140, 0.000"), "v.log")
    assert (run.steps, run.reached) == (300, (42, 0))
    assert run.notes[1] == "the printed figures allow several step counts (line 1: 300..301); the nearest is taken"


def test_an_interval_that_drafted_nothing_is_skipped_and_a_log_of_only_those_is_refused():
    nan = line("nan", 0, 0, "")
    assert parse_log("\n".join([nan, line("2.00", 10, 30, "0.600, 0.300, 0.100")]), "v.log").steps == 10
    with pytest.raises(FormatError, match="^v.log: no 'SpecDecoding metrics:' line with drafted tokens"):
        parse_log(nan + "\nINFO done\n", "v.log")


def test_a_garbled_log_line_is_named_by_number():
    with pytest.raises(FormatError, match=r"^v.log: line 2: expected 'SpecDecoding metrics: Mean acceptance"):
        parse_log("INFO start\nSpecDecoding metrics: Mean acceptance length: 2.00, garbled\n", "v.log")


METRICS = """\
vllm:spec_decode_num_drafts_total{engine="0"} 5
vllm:spec_decode_num_draft_tokens_total{engine="0"} 15
vllm:spec_decode_num_accepted_tokens_total{engine="0"} 7
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="0"} 4
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="1"} 2
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="2"} 1
"""


def test_metrics_counters_by_hand():
    run = parse_metrics(METRICS, "m.txt")
    assert (run.format, run.steps, run.drafted, run.accepted, run.reached) == ("vllm-metrics", 5, 15, 7, (4, 2, 1))
    assert run.acceptance_length == pytest.approx(1 + 7 / 5) and run.notes == ()
    assert run.conditional == pytest.approx([4 / 5, 2 / 4, 1 / 2])


def test_metrics_without_per_position_counters_say_so():
    counters = "".join(x + "\n" for x in METRICS.splitlines() if "per_pos" not in x)
    run = parse_metrics(counters, "m.txt")
    assert (run.steps, run.accepted, run.reached) == (5, 7, ())
    assert run.notes == ("no per-position figures (no accepted_tokens_per_pos counter)",)


@pytest.mark.parametrize("missing", ["drafts", "draft_tokens", "accepted_tokens"])
def test_metrics_missing_a_counter_name_it(missing):
    text = "".join(x + "\n" for x in METRICS.splitlines() if f"num_{missing}_total" not in x)
    with pytest.raises(FormatError, match=f"expected the counter vllm:spec_decode_num_{missing}_total"):
        parse_metrics(text, "m.txt")


def response(histogram, drafted, steps=None, accepted=None, **detail) -> dict:
    spec = {"acceptance_histogram": histogram, "num_draft_tokens": drafted, **detail}
    if steps is not None:
        spec["num_spec_steps"] = steps
    if accepted is not None:
        spec["num_accepted_draft_tokens"] = accepted
    return {"choices": [{"text": "x"}], "metrics": {"speculative_decoding": spec}}


def test_responses_sum_histograms_of_different_lengths():
    # [1, 2] (3 steps, 2 accepted) and [0, 1, 2] (3 steps, 5 accepted): together [1, 3, 2].
    text = json.dumps([response([1, 2], 6), {"choices": []}, response([0, 1, 2], 6, steps=3, accepted=5)])
    run = parse_responses(text, "r.json")
    assert (run.format, run.steps, run.accepted, run.drafted, run.reached) == ("vllm-response", 6, 7, 12, (5, 2))
    assert [(p.prompt, p.steps, p.accepted, p.drafted) for p in run.prompts] == [("0", 3, 2, 6), ("1", 3, 5, 6)]
    assert run.per_step_accepted is None


def test_per_step_arrays_are_kept_only_where_every_response_has_them():
    detailed = response([1, 1], 4, per_step_accepted=[1, 0], per_step_drafted=[2, 2])
    both = parse_responses(json.dumps([detailed, detailed]), "r.json")
    assert both.per_step_accepted == (1, 0, 1, 0) and both.per_step_drafted == (2, 2, 2, 2)
    # Depth 2 from the drafts, though no step accepted 2: position 2 reached by none.
    assert both.reached == (2, 0)
    mixed = parse_responses(json.dumps([detailed, response([1, 1], 4)]), "r.json")
    assert mixed.per_step_accepted is None and mixed.reached == (2,)


@pytest.mark.parametrize("doc, words", [
    ({"choices": [{"text": "x"}]}, "expected vLLM responses with metrics.speculative_decoding"),
    (response("1, 2", 4), "response 0: metrics.speculative_decoding.acceptance_histogram should be a list"),
    (response([1, 2], 4, steps=4), "response 0: the acceptance_histogram [1, 2] disagrees with num_spec_steps"),
    (response([1, 2], 4, accepted=3), "disagrees with num_spec_steps / num_accepted_draft_tokens"),
    (response([1, -2], 4), "response 0 acceptance_histogram should be a non-negative count"),
])
def test_bad_responses_are_refused_in_words(doc, words):
    with pytest.raises(FormatError) as e:
        parse_responses(json.dumps(doc), "r.json")
    assert str(e.value).startswith("r.json: ") and words in str(e.value)
