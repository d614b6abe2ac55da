"""SGLang's per-request figures read (tevviz/engine/engines/sglang.py): histograms of either name summed across
lengths, the counts where a response has no histogram, SGLang's own accept length, and the refusals."""

import json

import pytest

from tevviz.engine.engines.reading import FormatError
from tevviz.engine.engines.sglang import parse_responses


def text(*docs) -> str:
    return "\n".join(json.dumps(d) for d in docs)


def meta(**info) -> dict:
    return {"text": "x", "meta_info": info}


def test_histograms_of_either_name_and_length_are_summed():
    # Response 0 (the old name): 3 steps accepting 0, 1, 2. Response 1: 2 steps accepting 1 and 3.
    a = meta(spec_verify_ct=3, spec_correct_drafts_histogram=[1, 1, 1], spec_num_proposed_drafts=6,
             completion_tokens=7)
    b = meta(spec_verify_ct=2, spec_accept_histogram=[0, 1, 0, 1], spec_draft_token_num=6, completion_tokens=6)
    run = parse_responses(text(a, b), "r.jsonl")
    assert (run.steps, run.accepted, run.drafted, run.reached) == (5, 7, 12, (4, 2, 1))
    assert [(p.steps, p.accepted, p.drafted) for p in run.prompts] == [(3, 3, 6), (2, 4, 6)]
    # SGLang's own length counts completion tokens over steps (13 / 5); ours is 1 + 7 / 5.
    assert run.engine_figures[0].name == "SGLang accept length" and run.engine_figures[0].value == 13 / 5


def test_without_a_histogram_the_counts_stand_and_no_depths_are_claimed():
    a = meta(spec_verify_ct=3, spec_accept_histogram=[1, 1, 1], spec_accept_length=2.0)
    b = meta(spec_verify_ct=2, spec_num_correct_drafts=2, spec_accept_length=2.5)
    run = parse_responses(text(a, b), "r.jsonl")
    assert (run.steps, run.accepted, run.drafted, run.reached) == (5, 5, None, ())
    assert "no per-position figures" in run.notes[0]
    # Without completion_tokens, SGLang's length times the steps: (2.0 * 3 + 2.5 * 2) / 5.
    assert run.engine_figures[0].value == pytest.approx(11 / 5)
    bare = parse_responses(text(meta(spec_verify_ct=2, spec_accept_token_num=1)), "r.jsonl")
    assert bare.engine_figures == () and (bare.steps, bare.accepted) == (2, 1)


def test_openai_responses_carry_the_figures_in_sglext_and_meta_info_wins_where_both_are():
    detail = {"spec_verify_ct": 2, "spec_accept_histogram": [1, 1]}
    openai = {"choices": [{"index": 0, "sglext": {"spec_tokens_details": [detail]}}]}
    assert parse_responses(text(openai), "r.jsonl").reached == (1,)
    both = {"meta_info": {"spec_verify_ct": 4, "spec_accept_histogram": [0, 0, 4]},
            "sglext": {"spec_tokens_details": detail}}
    assert parse_responses(text(both), "r.jsonl").reached == (4, 4)


@pytest.mark.parametrize("info, message", [
    ({"spec_verify_ct": 3, "spec_accept_histogram": [1, 1]}, r"response 0: spec_accept_histogram \[1, 1\] sums to 2"),
    ({"spec_verify_ct": 3, "spec_accept_histogram": "1,1,1"}, "response 0: spec_accept_histogram should be a list"),
    ({"spec_verify_ct": 3}, "response 0: expected spec_accept_histogram or spec_num_correct_drafts"),
    ({"spec_verify_ct": -1, "spec_num_correct_drafts": 0}, "response 0 spec_verify_ct should be a non-negative"),
])
def test_a_response_that_breaks_the_format_is_refused_naming_it(info, message):
    with pytest.raises(FormatError, match=f"^r.jsonl: {message}"):
        parse_responses(text(meta(**info)), "r.jsonl")


def test_responses_without_speculative_figures_are_refused():
    with pytest.raises(FormatError, match="carries spec_verify_ct"):
        parse_responses(text({"text": "x", "meta_info": {"completion_tokens": 3}}), "r.jsonl")
