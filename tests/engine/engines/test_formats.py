"""Engine formats told apart and combined (tevviz/engine/engines/formats.py): a saved acceptance record found in a
command's output, the refusals that name the file, and several files of one engine added up as one run."""

import json

import pytest

from tevviz.engine.engines.acceptance import EngineAcceptance, EngineFigure, PromptAcceptance
from tevviz.engine.engines.formats import ACCEPTANCE_JSON, FORMATS, combine, detect, read_file, read_text
from tevviz.engine.engines.reading import FormatError

RECORD = EngineAcceptance.from_histogram("llama.cpp", "llamacpp-log", [2, 1, 1], drafted=8)


def test_an_acceptance_record_reads_back_from_a_file_or_a_commands_last_line():
    text = json.dumps(RECORD.to_dict())
    assert detect(text) == ACCEPTANCE_JSON and read_text(text, "a.json") == RECORD
    # `tevviz engine run --json` prints its runs by engine on its last line, tevviz's own first.
    ours = EngineAcceptance("tevviz", "tevviz", 4, 1).to_dict()
    saved = "building llama-server...\n" + json.dumps({"tevviz": ours, "llama.cpp": RECORD.to_dict()})
    assert detect(saved) == ACCEPTANCE_JSON and read_text(saved, "run.txt") == RECORD
    assert detect(json.dumps({"tevviz": ours})) is None  # only our own run: nothing of an engine's to import


def test_a_format_is_detected_by_its_marks():
    assert detect('{"meta_info": {"spec_verify_ct": 3}}') == "sglang-response"
    assert detect("llamacpp:spec_decode_num_drafts_total 3") == "llamacpp-metrics"
    assert detect("nothing speculative here") is None
    assert ACCEPTANCE_JSON in FORMATS and "llamacpp-log" in FORMATS


@pytest.mark.parametrize("text, fmt, message", [
    ("  \n", None, "the file is empty"),
    ("nothing speculative here", None, "not a known engine format"),
    ("x", "vllm-xml", "unknown format 'vllm-xml'; expected one of"),
    ('{"engine": "vllm"}', ACCEPTANCE_JSON, "expected one JSON object as `tevviz engine import --json` prints"),
    ('{"engine": "vllm", "format": "x", "steps": 1, "accepted": "many"}', None,
     "an engine acceptance record needs engine, format, steps and accepted"),
])
def test_what_cannot_be_read_is_refused_naming_the_file(text, fmt, message):
    with pytest.raises(FormatError, match=f"^f.txt: {message}"):
        read_text(text, "f.txt", fmt)


def test_a_file_that_is_not_text_is_refused(tmp_path):
    path = tmp_path / "log.bin"
    path.write_bytes(b"\xff\xfe\x00draft")
    with pytest.raises(FormatError, match="cannot be read as text"):
        read_file(path)
    path.write_text(json.dumps(RECORD.to_dict()), encoding="utf-8")
    assert read_file(path) == RECORD


def test_files_of_one_engine_combine_their_counts_padding_the_shallower_depths():
    a = EngineAcceptance("vllm", "vllm-log", 4, 3, 8, (2, 1), prompts=(PromptAcceptance("0", 4, 3),),
                         notes=("n1",), engine_figures=(EngineFigure("own", 2.0, "m"),))
    b = EngineAcceptance("vllm", "vllm-metrics", 2, 1, 4, (1,), prompts=(PromptAcceptance("1", 2, 1),),
                         notes=("n1", "n2"), engine_figures=(EngineFigure("own", 1.0, "m"),))
    run = combine([a, b])
    assert (run.format, run.steps, run.accepted, run.drafted, run.reached) == ("vllm-log+vllm-metrics", 6, 4, 12,
                                                                               (3, 1))
    assert [p.prompt for p in run.prompts] == ["0", "1"] and run.notes == ("n1", "n2")
    # An engine's own figure is averaged over the files by their steps: (2.0 * 4 + 1.0 * 2) / 6.
    assert run.engine_figures == (EngineFigure("own", 10 / 6, "m"),)
    assert combine([a]) is a


def test_combining_keeps_only_what_every_file_has():
    a = EngineAcceptance.from_steps("vllm", "vllm-response", [1, 0], drafted=[2, 2])
    b = EngineAcceptance("vllm", "vllm-response", None, 2, None)  # no steps, no drafts, no depths
    run = combine([a, b])
    assert (run.steps, run.accepted, run.drafted, run.reached, run.per_step_accepted) == (None, 3, None, (), None)
    assert run.notes[-1] == "no per-position figures: not every file has them"
    both = combine([a, a])
    assert both.per_step_accepted == (1, 0, 1, 0) and both.per_step_drafted == (2, 2, 2, 2)
    with pytest.raises(FormatError, match="files of different engines"):
        combine([a, RECORD])
