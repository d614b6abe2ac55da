"""TensorRT-LLM's iteration log (`trtllm-bench ... --iteration_log FILE`, or the iteration stats of `trtllm-serve`'s
`/metrics` JSON): one JSON object per iteration, whose `specDecodingStats` count the drafted and accepted tokens of
the requests that drafted (docs/engines.md, *TensorRT-LLM*)."""

from __future__ import annotations

from .acceptance import EngineAcceptance, EngineFigure
from .reading import FormatError, json_documents, number

ENGINE = "tensorrt-llm"
# Under attention data parallelism every rank writes the same counters; keep the first rank's rows.
_RANK_KEYS = ("attentionDpRank", "attention_dp_rank", "dpRank", "rank")


def detect(text: str) -> str | None:
    return "trtllm-iteration-log" if "specDecodingStats" in text else None


def parse_iteration_log(text: str, name: str) -> EngineAcceptance:
    """Steps = requests with draft tokens, summed over iterations (each such request verified once per iteration)."""
    steps = accepted = drafted = 0
    seen: set = set()
    length_sum, skipped = 0.0, 0
    for i, row in enumerate(json_documents(text, name)):
        spec = row.get("specDecodingStats") if isinstance(row, dict) else None
        if not isinstance(spec, dict):
            continue
        rank = next((row[k] for k in _RANK_KEYS if k in row), None)
        key = row.get("iter")
        if (rank is not None and str(rank) != "0") or (rank is None and key is not None and key in seen):
            skipped += 1
            continue
        seen.add(key)
        d = number(spec.get("numDraftTokens", 0), name, f"iteration {key} numDraftTokens")
        if d == 0:
            continue
        n = number(spec.get("numRequestsWithDraftTokens"), name, f"iteration {key} numRequestsWithDraftTokens")
        a = number(spec.get("numAcceptedTokens"), name, f"iteration {key} numAcceptedTokens")
        steps, accepted, drafted = steps + n, accepted + a, drafted + d
        length_sum += number(spec.get("acceptanceLength", 1 + a / max(n, 1)), name,
                             f"iteration {key} acceptanceLength", integer=False) * n
    if steps == 0:
        raise FormatError(name, "no iteration with specDecodingStats.numDraftTokens > 0; expected TensorRT-LLM's "
                                "--iteration_log JSON lines with speculative decoding on")
    notes = ["no per-position figures (TensorRT-LLM counts tokens per iteration, not per draft position)"]
    if skipped:
        notes.append(f"{skipped} rows of other attention-DP ranks left out (they repeat rank 0's counters)")
    figure = EngineFigure("TensorRT-LLM acceptanceLength", length_sum / steps,
                          "each iteration's acceptanceLength weighted by its requests with draft tokens")
    return EngineAcceptance(ENGINE, "trtllm-iteration-log", steps, accepted, drafted, notes=tuple(notes),
                            engine_figures=(figure,))


PARSERS = {"trtllm-iteration-log": parse_iteration_log}
