"""What every engine's parser shares (tevviz/engine/engines/reading.py): JSON documents and streams, counters,
Prometheus samples, and the steps rebuilt from a log's rounded figures, on inputs worked by hand."""

import json

import pytest

from tevviz.engine.engines.reading import FormatError, json_documents, number, prometheus, rebuild_steps


def test_one_document_a_list_or_json_lines():
    assert json_documents('{"a": 1}', "f") == [{"a": 1}]
    assert json_documents('[{"a": 1}, {"a": 2}]', "f") == [{"a": 1}, {"a": 2}]
    assert json_documents('{"a": 1}\n\n{"a": 2}\n', "f") == [{"a": 1}, {"a": 2}]


def test_a_saved_event_stream_keeps_each_responses_last_chunk_where_its_first_stood():
    chunks = [{"id": "r1", "n": 1}, {"id": "r2", "n": 1}, {"id": "r1", "n": 2}, {"meta_info": {"id": "r3"}, "n": 1},
              {"id": "r2", "n": 3}, {"n": 9}]
    text = "event: message\n" + "\n".join(f"data: {json.dumps(c)}" for c in chunks) + "\n: keep-alive\ndata: [DONE]\n"
    assert json_documents(text, "f") == [{"id": "r1", "n": 2}, {"id": "r2", "n": 3}, {"meta_info": {"id": "r3"},
                                                                                      "n": 1}, {"n": 9}]


def test_a_malformed_line_is_named():
    with pytest.raises(FormatError, match=r"^f: truncated or malformed JSON at line 2"):
        json_documents('{"a": 1}\n{"a": \n', "f")


@pytest.mark.parametrize("value, integer, expected", [("3", True, 3), (4.0, True, 4), ("2.5", False, 2.5),
                                                      (0, True, 0)])
def test_a_counter_reads_as_a_non_negative_number(value, integer, expected):
    assert number(value, "f", "x", integer=integer) == expected


@pytest.mark.parametrize("value, message", [(None, "a number"), ("two", "a number"), (-1, "a non-negative count"),
                                            (2.5, "a non-negative count"), ("nan", "a non-negative count"),
                                            ("inf", "a non-negative count")])
def test_a_bad_counter_is_refused_naming_its_field(value, message):
    with pytest.raises(FormatError, match=f"^f: steps should be {message}"):
        number(value, "f", "steps")


PROM = """\
# HELP vllm:spec_decode_num_drafts_total Number of drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 3
vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 4.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 2
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="0"} 1
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="1"} 1
vllm:num_requests_running{engine="0"} 7
"""


def test_prometheus_samples_sum_over_every_label_but_position():
    assert prometheus(PROM, "m.txt", "vllm:spec_decode_num_") == {
        ("vllm:spec_decode_num_drafts_total", None): 7.0,
        ("vllm:spec_decode_num_accepted_tokens_per_pos_total", "0"): 3.0,
        ("vllm:spec_decode_num_accepted_tokens_per_pos_total", "1"): 1.0,
    }
    with pytest.raises(FormatError, match="line 1 is not a Prometheus sample"):
        prometheus("vllm:spec_decode_num_drafts_total{engine=\"0\"}\n", "m.txt", "vllm:spec_decode_num_")


def test_steps_rebuilt_exactly_when_the_drafted_count_pins_them():
    # 4 steps of 2 drafts accepting 1, 0, 2, 0: mean length 1.75, rates 2/4 and 1/4, drafted 8 = 4 * 2.
    built = rebuild_steps("f", "line 1", 3, 1.75, 2, [0.5, 0.25], 3, 8)
    assert (built.steps, built.reached, built.candidates, built.exact) == (4, (2, 1), (4, 4), True)


def test_steps_rebuilt_nearest_the_printed_mean_when_several_fit():
    # 100 accepted at mean length 1.50 (2 decimals): 199 to 202 steps all print 1.50 (198: 1.51); 200 gives it
    # exactly.
    built = rebuild_steps("f", "line 1", 100, 1.50, 2, [], 3, None)
    assert (built.steps, built.candidates, built.exact) == (200, (199, 202), False)
    # The per-position rate narrows the choice: of 199..202 steps only 201 prints 100 / S as 0.498.
    built = rebuild_steps("f", "line 1", 100, 1.50, 2, [0.498], 3, None)
    assert (built.steps, built.reached, built.exact) == (201, (100,), True)


def test_figures_that_no_step_count_reproduces_are_refused():
    # One accepted token cannot give a mean length of 1.90 (1 step: 2.00, 2 steps: 1.50).
    with pytest.raises(FormatError, match="line 7: no number of steps gives mean length 1.9"):
        rebuild_steps("f", "line 7", 1, 1.90, 2, [], 3, None)
