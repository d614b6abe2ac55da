"""`tevviz engine import` (tevviz/engine/engines/*, tevviz/commands/engines.py): each engine's documented format,
written here as the engine writes it, read to figures worked out by hand; bad input exits 2 in one line."""

from __future__ import annotations

import dataclasses
import json

import pytest
from _cli import one_line, run_json

from tevviz.cli import main
from tevviz.engine.engines.formats import combine, detect, read_text
from tevviz.engine.engines.reading import FormatError


def write(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def vllm_line(mean, accepted, drafted, rates, pct):
    return (f"INFO 12-05 10:00:00 [loggers.py:123] SpecDecoding metrics: Mean acceptance length: {mean}, Accepted "
            f"throughput: 1.00 tokens/s, Drafted throughput: 3.00 tokens/s, Accepted: {accepted} tokens, Drafted: "
            f"{drafted} tokens, Per-position acceptance rate: {rates}, Avg Draft acceptance rate: {pct}%")


# Two intervals, K = 3. A: 10 steps, positions accepted 6, 3, 1 times. B: 4 steps, 4, 2, 0.
VLLM_LOG = "\n".join([
    "INFO 12-05 09:59:59 [api_server.py:1] Starting vLLM API server",
    vllm_line("2.00", 10, 30, "0.600, 0.300, 0.100", "33.3"),
    vllm_line("2.50", 6, 12, "1.000, 0.500, 0.000", "50.0"),
    vllm_line("nan", 0, 0, "", "nan"),  # an interval that drafted nothing
])


def test_vllm_log_intervals_weigh_by_their_steps():
    run = read_text(VLLM_LOG, "vllm.log")
    assert (run.engine, run.format) == ("vllm", "vllm-log")
    assert (run.steps, run.accepted, run.drafted, run.reached) == (14, 16, 42, (10, 5, 1))
    # 1 + 16 / 14, not the mean of the intervals' 2.00 and 2.50
    assert run.acceptance_length == pytest.approx(2.142857, abs=1e-6)
    assert run.marginal == pytest.approx([10 / 14, 5 / 14, 1 / 14])
    assert run.conditional == pytest.approx([10 / 14, 0.5, 0.2])


VLLM_METRICS = """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 6.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 4.0
vllm:spec_decode_num_drafts_created{engine="0",model_name="m"} 1.7649e+09
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 12.0
vllm:spec_decode_num_draft_tokens_total{engine="1",model_name="m"} 8.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 5.0
vllm:spec_decode_num_accepted_tokens_total{engine="1",model_name="m"} 3.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 4.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 1.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="0"} 2.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="1"} 1.0
vllm:spec_decode_num_accepted_tokens_per_pos_created{engine="1",model_name="m",position="1"} 1.7649e+09
"""


def test_vllm_metrics_sum_the_engines():
    run = read_text(VLLM_METRICS, "metrics.txt")
    assert run.format == "vllm-metrics"
    assert (run.steps, run.accepted, run.drafted, run.reached) == (10, 8, 20, (6, 2))
    assert run.acceptance_length == 1.8
    assert run.marginal == [0.6, 0.2] and run.conditional == pytest.approx([0.6, 1 / 3])


def vllm_response(histogram, drafted, steps_acc=None, steps_drafted=None):
    spec = {"acceptance_histogram": histogram, "num_spec_steps": sum(histogram), "num_draft_tokens": drafted,
            "num_accepted_draft_tokens": sum(j * h for j, h in enumerate(histogram)), "num_spec_tokens": 2}
    if steps_acc is not None:
        spec |= {"per_step_accepted": steps_acc, "per_step_drafted": steps_drafted}
    return json.dumps({"choices": [{"text": "x"}], "metrics": {"speculative_decoding": spec}})


def test_vllm_responses_summary_and_detailed():
    # [1, 2, 1]: 4 steps, 4 accepted; [3, 0, 1]: 4 steps, 2 accepted. Together [4, 2, 2].
    summary = read_text(vllm_response([1, 2, 1], 8) + "\n" + vllm_response([3, 0, 1], 8), "r.jsonl")
    assert (summary.steps, summary.accepted, summary.drafted, summary.reached) == (8, 6, 16, (4, 2))
    assert summary.acceptance_length == 1.75
    assert summary.marginal == [0.5, 0.25] and summary.conditional == [0.5, 0.5]
    assert [p.acceptance_length for p in summary.prompts] == [2.0, 1.5]
    assert summary.per_step_accepted is None
    detailed = read_text("[" + vllm_response([1, 2, 1], 8, [2, 1, 0, 1], [2, 2, 2, 2]) + ","
                         + vllm_response([3, 0, 1], 8, [0, 0, 2, 0], [2, 2, 2, 2]) + "]", "r.json")
    assert detailed.per_step_accepted == (2, 1, 0, 1, 0, 0, 2, 0)
    assert (detailed.steps, detailed.accepted, detailed.reached) == (8, 6, (4, 2))
    assert detailed.to_dict()["per_step_drafted"] == [2] * 8


def sglang_native(steps, histogram, completion):
    return {"text": "x", "meta_info": {"completion_tokens": completion, "spec_verify_ct": steps,
                                       "spec_accept_histogram": histogram,
                                       "spec_accept_length": completion / steps}}


def test_sglang_meta_info_sums_histograms_and_names_its_own_length():
    # [1, 1, 2]: 4 steps, 1 + 4 = 5 accepted; [2]: 2 steps, none accepted. Together [3, 1, 2].
    text = json.dumps([sglang_native(4, [1, 1, 2], 10), sglang_native(2, [2], 3)])
    run = read_text(text, "sglang.json")
    assert (run.engine, run.steps, run.accepted, run.reached) == ("sglang", 6, 5, (3, 2))
    assert run.acceptance_length == pytest.approx(1 + 5 / 6)
    assert run.marginal == pytest.approx([0.5, 1 / 3]) and run.conditional == pytest.approx([0.5, 2 / 3])
    (own,) = run.engine_figures
    assert own.name == "SGLang accept length" and own.value == pytest.approx(13 / 6)  # completion tokens / steps
    assert "completion tokens" in own.meaning


def test_a_saved_stream_counts_each_response_once():
    # SGLang streams meta_info with the figures so far in every chunk: the last chunk of each id is the response.
    chunks = [{"text": "a", "meta_info": {"id": "r1", "spec_verify_ct": 1, "spec_accept_histogram": [0, 1]}},
              {"text": "ab", "meta_info": {"id": "r1", "spec_verify_ct": 2, "spec_accept_histogram": [1, 1]}},
              {"text": "z", "meta_info": {"id": "r2", "spec_verify_ct": 1, "spec_accept_histogram": [1]}}]
    text = "\n".join(f"data: {json.dumps(c)}\n" for c in chunks) + "data: [DONE]\n"
    run = read_text(text, "stream.txt")
    assert (run.steps, run.accepted, run.reached) == (3, 1, (1,))
    assert [p.steps for p in run.prompts] == [2, 1]


def test_sglang_sglext_details():
    details = {"spec_verify_ct": 4, "spec_correct_drafts_histogram": [1, 1, 2], "spec_num_correct_drafts": 5,
               "spec_num_proposed_drafts": 12, "spec_accept_length": 2.5, "spec_accept_rate": 5 / 12}
    text = json.dumps({"choices": [{"message": {"content": "x"}}], "sglext": {"spec_tokens_details": details}})
    run = read_text(text, "chat.json")
    assert (run.steps, run.accepted, run.drafted, run.reached) == (4, 5, 12, (3, 2))
    assert run.engine_figures[0].value == 2.5


# llama-server's log at -lv 4: two requests (K = 4), then the drafter's cumulative statistics after each.
LLAMA_LOG = """\
srv  update_slots: all slots are idle
slot print_timing: id  0 | task 0 | draft acceptance = 0.25000 (   19 accepted /    76 generated), mean len =  2.00
slot print_timing: id  0 | task 0 |      acc per pos = (0.526, 0.316, 0.158, 0.000)
spec common_specu: statistics     draft-simple: #calls(b,g,a) =    1     19     19, #gen drafts =     19, \
#acc drafts =    10, #gen tokens =     76, #acc tokens =    19, #mean acc len = 2.00, \
#acc rate/pos = (0.526, 0.316, 0.158)
slot print_timing: id  0 | task 5 | draft acceptance = 0.37500 (    6 accepted /    16 generated), mean len =  2.50
slot print_timing: id  0 | task 5 |      acc per pos = (0.750, 0.500, 0.250, 0.000)
spec common_specu: statistics     draft-simple: #calls(b,g,a) =    2     23     23, #gen drafts =     23, \
#acc drafts =    13, #gen tokens =     92, #acc tokens =    25, #mean acc len = 2.09, \
#acc rate/pos = (0.565, 0.348, 0.174)
"""


def test_llamacpp_log_requests_and_statistics():
    # Request 0: 19 / (2.00 - 1) = 19 steps; 0.526 * 19 = 10, 0.316 * 19 = 6, 0.158 * 19 = 3 (10 + 6 + 3 = 19).
    # Request 5: 6 / 1.5 = 4 steps; 3, 2, 1 at positions 1-3. The last statistics line: 23 steps, 13, 8, 4.
    run = read_text(LLAMA_LOG, "server.log")
    assert (run.engine, run.format) == ("llama.cpp", "llamacpp-log")
    assert (run.steps, run.accepted, run.drafted, run.reached) == (23, 25, 92, (13, 8, 4, 0))
    assert run.acceptance_length == pytest.approx(1 + 25 / 23)
    assert run.conditional == pytest.approx([13 / 23, 8 / 13, 0.5, 0.0])
    assert [(p.prompt, p.steps, p.accepted) for p in run.prompts] == [("0", 19, 19), ("5", 4, 6)]
    # Without the statistics lines the requests are summed (and the fourth position, never accepted, kept).
    requests = read_text("\n".join(ln for ln in LLAMA_LOG.splitlines() if "statistics" not in ln), "server.log")
    assert (requests.steps, requests.accepted, requests.reached) == (23, 25, (13, 8, 4, 0))
    # At the default verbosity only the 'draft acceptance' lines: no per-position figures, but the steps.
    info = read_text("\n".join(ln for ln in LLAMA_LOG.splitlines() if "draft acceptance" in ln), "server.log")
    assert (info.steps, info.accepted, info.reached, info.marginal) == (23, 25, (), [])
    assert any("-lv 4" in n for n in info.notes)


LLAMA_METRICS = """\
# HELP llamacpp:spec_decode_num_draft_tokens_total Speculative: Total draft tokens generated
# TYPE llamacpp:spec_decode_num_draft_tokens_total counter
llamacpp:spec_decode_num_draft_tokens_total 92
llamacpp:spec_decode_num_accepted_tokens_total 25
llamacpp:spec_decode_num_drafts_total 23
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 13
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 8
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="2"} 4
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="3"} 0
"""


def test_llamacpp_metrics_and_responses():
    run = read_text(LLAMA_METRICS, "metrics.txt")
    assert (run.format, run.steps, run.accepted, run.drafted, run.reached) == ("llamacpp-metrics", 23, 25, 92,
                                                                               (13, 8, 4, 0))
    assert run.marginal == pytest.approx([13 / 23, 8 / 23, 4 / 23, 0.0])
    text = "\n".join(json.dumps({"content": "x", "timings": {"predicted_n": 30, "draft_n": d, "draft_n_accepted": a}})
                     for d, a in ((76, 19), (16, 6)))
    resp = read_text(text, "responses.jsonl")
    assert (resp.format, resp.steps, resp.accepted, resp.drafted) == ("llamacpp-response", None, 25, 92)
    assert resp.acceptance_length is None and resp.marginal == []
    assert resp.acceptance_rate == pytest.approx(25 / 92)


def trt_row(it, drafted, accepted, requests, **extra):
    stats = {"numDraftTokens": drafted, "numAcceptedTokens": accepted, "numRequestsWithDraftTokens": requests,
             "acceptanceLength": 1 + accepted / requests if requests else 0.0, "iterLatencyMS": 1.0}
    return json.dumps({"iter": it, "iterLatencyMS": 5.0, "specDecodingStats": stats, **extra})


def test_trtllm_iteration_log_rank_zero_only():
    # Iteration 1: 2 requests, 4 of 6 accepted; iteration 2: 3 requests, 3 of 9. Rank 1 repeats both.
    rows = [trt_row(0, 0, 0, 0, attentionDpRank=0), trt_row(1, 6, 4, 2, attentionDpRank=0),
            trt_row(1, 6, 4, 2, attentionDpRank=1), trt_row(2, 9, 3, 3, attentionDpRank=0),
            trt_row(2, 9, 3, 3, attentionDpRank=1)]
    run = read_text("\n".join(rows), "iterations.jsonl")
    assert (run.engine, run.steps, run.accepted, run.drafted, run.reached) == ("tensorrt-llm", 5, 7, 15, ())
    assert run.acceptance_length == pytest.approx(2.4)
    assert any("rank" in n for n in run.notes) and any("per-position" in n for n in run.notes)
    # Without a rank field, a repeated iteration is the other ranks' copy.
    plain = read_text("\n".join([trt_row(1, 6, 4, 2), trt_row(1, 6, 4, 2), trt_row(2, 9, 3, 3)]), "it.jsonl")
    assert (plain.steps, plain.accepted) == (5, 7)


def test_detection_and_combining():
    assert detect(VLLM_LOG) == "vllm-log" and detect(LLAMA_METRICS) == "llamacpp-metrics"
    both = combine([read_text(LLAMA_METRICS, "a"), read_text(LLAMA_METRICS, "b")])
    assert (both.steps, both.accepted, both.reached) == (46, 50, (26, 16, 8, 0))
    with pytest.raises(FormatError, match="different engines"):
        combine([read_text(LLAMA_METRICS, "a"), read_text(VLLM_METRICS, "b")])


BAD = [
    ("", "empty"),
    ("hello world\n", "not a known engine format"),
    ('[{"meta_info": {"spec_verify_ct": 4, "spec_accept_hist', "truncated or malformed JSON"),
    (json.dumps({"meta_info": {"spec_verify_ct": "four", "spec_accept_histogram": [4]}}), "spec_verify_ct should be"),
    (json.dumps({"meta_info": {"spec_verify_ct": 3, "spec_accept_histogram": [1, 1]}}), "sums to 2"),
    ("SpecDecoding metrics: Mean acceptance length: 2.00, garbled", "expected 'SpecDecoding metrics"),
    (vllm_line("3.00", 10, 30, "0.600, 0.300, 0.100", "33.3"), "the figures disagree"),
    ("llamacpp:spec_decode_num_drafts_total 3\n", "llamacpp:spec_decode_num_draft_tokens_total"),
    ("llamacpp:spec_decode_num_drafts_total x3\n", "should be a number"),
]


@pytest.mark.parametrize("text,message", BAD)
def test_bad_input_exits_2_naming_the_file(text, message, tmp_path, capsys):
    path = write(tmp_path, "bad.txt", text)
    assert main(["engine", "import", path]) == 2
    line = one_line(capsys.readouterr().err)
    assert path in line and message in line, line


def test_cli_table_and_json(tmp_path, capsys):
    path = write(tmp_path, "vllm.log", VLLM_LOG)
    assert main(["engine", "import", path]) == 0
    text = capsys.readouterr().out
    assert "marginal m_k" in text and "conditional c_k" in text and "acceptance length 2.143" in text
    out = run_json(["engine", "import", path, "--json"], capsys)
    for key in ("engine", "format", "steps", "drafted", "accepted", "acceptance_length", "marginal", "conditional"):
        assert key in out
    assert out["steps"] == 14 and out["marginal"] == pytest.approx([10 / 14, 5 / 14, 1 / 14])
    # A format with no per-position figures says so.
    resp = write(tmp_path, "r.json", json.dumps({"timings": {"draft_n": 8, "draft_n_accepted": 3}}))
    assert main(["engine", "import", resp]) == 0
    assert "no per-position figures" in capsys.readouterr().out
    # --format forces a parser: a vLLM log read as SGLang responses is bad input.
    assert main(["engine", "import", path, "--format", "sglang-response"]) == 2
    assert "malformed JSON at line 1" in one_line(capsys.readouterr().err)


def test_report_overlays_an_engine_run(tmp_path, capsys):
    from test_render import ROUNDS

    from tevviz.engine.records.records import RoundRecord
    from tevviz.render.report import _statistics
    from tevviz.render.stats import acceptance_by_depth_figure

    run = read_text(LLAMA_METRICS, "metrics.txt")
    fig = acceptance_by_depth_figure(ROUNDS, engines=[run])
    marginal = next(t for t in fig.data if t.name == "llama.cpp marginal (23 steps)")
    assert list(marginal.x) == [1, 2, 3, 4] and list(marginal.y) == pytest.approx([13 / 23, 8 / 23, 4 / 23, 0])
    conditional = next(t for t in fig.data if t.name.startswith("llama.cpp conditional"))
    assert list(conditional.y) == pytest.approx([13 / 23, 8 / 13, 0.5, 0.0])
    names = [t["name"] for t in _statistics([RoundRecord.from_dict(r) for r in ROUNDS], [run])["acceptance"]["data"]]
    assert "llama.cpp marginal (23 steps)" in names
    # The --json of `engine import` reads back as the same run.
    again = read_text(json.dumps(run.to_dict()), "run.json")
    assert again == run and detect(json.dumps(run.to_dict())) == "acceptance-json"


def test_report_engine_flag(tmp_path, capsys):
    session = tmp_path / "s.json"
    from _cli import DECODE

    assert main([*DECODE, "--export", str(session)]) == 0
    good = write(tmp_path, "metrics.txt", LLAMA_METRICS)
    assert main(["report", str(session), "--engine", good, "-o", str(tmp_path / "r.html")]) == 0
    assert (tmp_path / "r.html").stat().st_size > 0
    bad = write(tmp_path, "bad.txt", "hello\n")
    capsys.readouterr()
    assert main(["report", str(session), "--engine", bad, "-o", str(tmp_path / "r2.html")]) == 2
    assert "not a known engine format" in one_line(capsys.readouterr().err)
    assert not (tmp_path / "r2.html").exists()


# Real llama-server output (tests/fixtures/llamacpp/README.md) ----------------------------------------------------

FIXTURES = __import__("pathlib").Path(__file__).parents[2] / "fixtures" / "llamacpp"


def test_real_llama_server_log_and_metrics_agree():
    # The per-step trace lines, request by request (accepted / drafted):
    #   task 0 (warm-up): 1 0 0 0 1 of 4 4 3 2 1 -> 5 steps, 2 of 14
    #   task 7: 1 0 0 0 1 1 0 1 3 4 0 2 2 0 0 -> 15 steps, 15 of 55
    #   task 25: 21 steps, 9 of 79 (one step accepted 4, one 2, three 1)
    # 41 steps, 26 of 148; steps accepting at least 1, 2, 3, 4: 15, 6, 3, 2 (histogram 26, 9, 3, 1, 2).
    log = read_text((FIXTURES / "stdlib-server-log.txt").read_text(), "server.log")
    assert (log.steps, log.accepted, log.drafted, log.reached) == (41, 26, 148, (15, 6, 3, 2))
    assert log.acceptance_length == pytest.approx(1 + 26 / 41)
    assert log.conditional == pytest.approx([15 / 41, 6 / 15, 3 / 6, 2 / 3])
    assert log.per_step_accepted[:20] == (1, 0, 0, 0, 1, 1, 0, 0, 0, 1, 1, 0, 1, 3, 4, 0, 2, 2, 0, 0)
    assert log.per_step_drafted[:5] == (4, 4, 3, 2, 1) and sum(log.per_step_drafted) == 148
    # Per request, steps rebuilt from the printed mean length: 2 / 0.40 = 5, 15 / 1.00 = 15, 9 / 0.43 ~ 21.
    assert [(p.prompt, p.steps, p.accepted, p.drafted) for p in log.prompts] == [
        ("0", 5, 2, 14), ("7", 15, 15, 55), ("25", 21, 9, 79)]
    metrics = read_text((FIXTURES / "stdlib-metrics.txt").read_text(), "metrics.txt")
    assert (metrics.steps, metrics.accepted, metrics.drafted, metrics.reached) == (41, 26, 148, (15, 6, 3, 2))
    smol = read_text((FIXTURES / "smollm2-metrics.txt").read_text(), "metrics.txt")
    assert (smol.steps, smol.accepted, smol.drafted, smol.reached) == (39, 35, 154, (19, 10, 4, 2))


def test_real_llama_server_responses():
    # The two evaluation prompts' responses (the warm-up's is not kept): 15 of 55 and 9 of 79 drafted tokens.
    stdlib = read_text((FIXTURES / "stdlib-completion-responses.jsonl").read_text(), "responses.jsonl")
    assert (stdlib.steps, stdlib.accepted, stdlib.drafted) == (None, 24, 134)
    chat = read_text((FIXTURES / "smollm2-chat-responses.json").read_text(), "chat.json")
    assert (chat.format, chat.accepted, chat.drafted) == ("llamacpp-response", 35, 154)  # 20 of 106, 15 of 48


def test_an_engine_runs_saved_output_reads_as_its_engine():
    # `tevviz engine run --json` prints lines of progress, then {"llama.cpp": record, "tevviz": record, ...}.
    llama = read_text(LLAMA_METRICS, "metrics.txt")
    tev = dataclasses.replace(llama, engine="tevviz", format="tevviz engine run", steps=30)
    text = "exporting...\n" + json.dumps({"tevviz": tev.to_dict(), "llama.cpp": llama.to_dict(), "verdict": {}})
    assert read_text(text, "run.txt") == llama
