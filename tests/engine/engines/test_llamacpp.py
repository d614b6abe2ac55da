"""llama-server's figures read (tevviz/engine/engines/llamacpp.py): its log's per-request, per-step and statistics
lines, its /metrics and its responses, on logs of a few lines worked by hand."""

import json

import pytest

from tevviz.engine.engines.llamacpp import detect, parse_log, parse_metrics, parse_responses
from tevviz.engine.engines.reading import FormatError

# Task 0: 4 steps of 2 drafts accepting 1, 0, 2, 0 (3 of 8; mean length 1 + 3/4; 2 of 4 steps reached position 1,
# 1 of 4 position 2), each step logged with LLAMA_TRACE=1.
STEPS = [f"slot operator(): id  0 | task 0 | accepted  {a}/ 2 draft tokens" for a in (1, 0, 2, 0)]
REQUEST = ("slot print_timing: id  0 | task {task} | draft acceptance = {rate} (    {accepted} accepted /     "
           "{drafted} generated), mean len =  {mean}")
PER_POS = "slot print_timing: id  0 | task {task} |      acc per pos = ({rates})"
TASK0 = [REQUEST.format(task=0, rate="0.37500", accepted=3, drafted=8, mean="1.75"),
         PER_POS.format(task=0, rates="0.500, 0.250")]
# Task 1 accepted nothing of 6 drafts: its mean length says nothing of its steps.
TASK1 = [REQUEST.format(task=1, rate="0.00000", accepted=0, drafted=6, mean="1.00"),
         PER_POS.format(task=1, rates="0.000, 0.000")]


def stats_line(impl: str, steps: int, drafted: int, accepted: int, rates: str | None) -> str:
    tail = "" if rates is None else f", #mean acc len = {1 + accepted / steps:.2f}, #acc rate/pos = ({rates})"
    return (f"spec common_specu: statistics {impl}: #calls(b,g,a) =    1 {steps:6d} {steps:6d}, "
            f"#gen drafts = {steps:6d}, #acc drafts = {accepted:5d}, #gen tokens = {drafted:6d}, "
            f"#acc tokens = {accepted:5d}{tail}, dur(b,g,a) = 0.028, 8.652, 0.005 ms")


def test_detect():
    assert detect("\n".join(TASK0)) == "llamacpp-log"
    assert detect(stats_line("draft-simple", 4, 8, 3, "0.500, 0.250")) == "llamacpp-log"
    assert detect("llamacpp:spec_decode_num_drafts_total 3\n") == "llamacpp-metrics"
    assert detect('{"timings": {"draft_n": 4}}') == "llamacpp-response"
    assert detect("INFO: Uvicorn running") is None


def test_a_request_rebuilt_from_its_mean_length_and_rates():
    run = parse_log("\n".join(TASK0), "server.log")
    assert (run.steps, run.accepted, run.drafted, run.reached) == (4, 3, 8, (2, 1))
    assert [(p.prompt, p.steps, p.accepted, p.drafted) for p in run.prompts] == [("0", 4, 3, 8)]
    assert run.engine_figures[0].name == "llama.cpp draft acceptance" and run.engine_figures[0].value == 3 / 8
    assert run.per_step_accepted is None


def test_a_request_that_accepted_nothing_takes_every_step_as_drafting_the_deepest_position():
    run = parse_log("\n".join(TASK0 + TASK1), "server.log")
    # Task 1: 6 drafted at 2 a step is 3 steps; the run is 4 + 3 steps, its positions reached only by task 0.
    assert [(p.prompt, p.steps, p.accepted) for p in run.prompts] == [("0", 4, 3), ("1", 3, 0)]
    assert (run.steps, run.accepted, run.drafted, run.reached) == (7, 3, 14, (2, 1))
    assert any("line 3: nothing accepted" in n and "3 taken (drafted / 2)" in n for n in run.notes)


def test_the_per_step_lines_give_the_steps_in_order_where_they_account_for_every_step():
    run = parse_log("\n".join(STEPS + TASK0), "server.log")
    assert run.per_step_accepted == (1, 0, 2, 0) and run.per_step_drafted == (2, 2, 2, 2)
    short = parse_log("\n".join(STEPS[1:] + TASK0), "server.log")  # a step's line lost: the rest cannot be placed
    assert short.per_step_accepted is None and short.steps == 4
    assert any("3 per-step 'accepted j/ n draft tokens' lines do not match 4 steps" in n for n in short.notes)


def test_the_last_statistics_line_of_each_drafter_gives_the_totals():
    log = [stats_line("draft-a", 2, 4, 1, "0.500"),  # an earlier line of the same drafter: replaced by its last
           stats_line("draft-a", 4, 8, 3, "0.500, 0.250"),
           stats_line("draft-b", 2, 4, 1, "0.500")]
    run = parse_log("\n".join(log), "server.log")
    # Steps 4 + 2; position 1 reached in 0.5 * 4 + 0.5 * 2 = 3 steps, position 2 in 0.25 * 4 = 1.
    assert (run.steps, run.drafted, run.accepted, run.reached) == (6, 12, 4, (3, 1))
    assert run.notes[0].startswith("totals from the last 'statistics' line of draft-a, draft-b")
    # A drafter that accepted nothing prints no rates: no per-position figures, the totals kept.
    none = parse_log("\n".join([log[1], stats_line("draft-b", 2, 4, 0, None)]), "server.log")
    assert (none.steps, none.accepted, none.reached) == (6, 3, ())
    assert "no per-position figures (a drafter accepted nothing)" in none.notes


@pytest.mark.parametrize("lines, message", [
    ([PER_POS.format(task=0, rates="0.500")], "line 1: 'acc per pos' without its request"),
    ([TASK0[0], PER_POS.format(task=5, rates="0.500, 0.250")], "line 2: 'acc per pos' without its request"),
    (["task 0 | draft acceptance = lots"], "line 1: expected llama-server's 'draft acceptance = R"),
    (["main: server is listening on http://127.0.0.1:8080"], "no 'draft acceptance' or 'statistics' line"),
])
def test_a_log_that_breaks_the_pattern_is_refused_naming_the_line(lines, message):
    with pytest.raises(FormatError, match=f"^server.log: {message}"):
        parse_log("\n".join(lines), "server.log")


def test_metrics_count_positions_from_zero_and_fill_the_gaps():
    text = ("llamacpp:spec_decode_num_drafts_total 4\nllamacpp:spec_decode_num_draft_tokens_total 8\n"
            "llamacpp:spec_decode_num_accepted_tokens_total 3\n"
            'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 1\n'
            'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 2\n')
    run = parse_metrics(text, "metrics.txt")
    assert (run.steps, run.drafted, run.accepted, run.reached) == (4, 8, 3, (2, 1))
    bare = parse_metrics("\n".join(text.splitlines()[:3]), "metrics.txt")
    assert bare.reached == () and "no per_pos counter" in bare.notes[0]
    with pytest.raises(FormatError, match="spec_decode_num_drafts_total"):
        parse_metrics("\n".join(text.splitlines()[1:]), "metrics.txt")


def test_responses_are_read_at_the_top_level_or_one_level_down():
    docs = [{"content": "x", "timings": {"draft_n": 8, "draft_n_accepted": 3}},
            {"prompt": "p", "draft": {"content": "y", "timings": {"draft_n": 6, "draft_n_accepted": 0}}},
            {"content": "z", "timings": {"predicted_n": 5}}]  # nothing drafted: no figures of its own
    run = parse_responses("\n".join(json.dumps(d) for d in docs), "responses.jsonl")
    assert (run.steps, run.accepted, run.drafted, run.reached) == (None, 3, 14, ())
    with pytest.raises(FormatError, match="timings.draft_n"):
        parse_responses(json.dumps(docs[2]), "responses.jsonl")
