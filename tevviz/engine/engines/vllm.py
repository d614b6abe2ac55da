"""vLLM's speculative-decoding statistics (docs/engines.md, *vLLM*): the `SpecDecoding metrics:` log lines, the
Prometheus text of `/metrics`, and responses carrying `metrics.speculative_decoding`."""

from __future__ import annotations

import re

from .acceptance import EngineAcceptance, PromptAcceptance
from .reading import FormatError, json_documents, number, rebuild_steps, spec_counters

ENGINE = "vllm"
_LINE = re.compile(
    r"SpecDecoding metrics: Mean acceptance length: (?P<mean>[\d.]+|nan),.*?"
    r"Accepted: (?P<accepted>\d+) tokens, Drafted: (?P<drafted>\d+) tokens, "
    r"Per-position acceptance rate: (?P<rates>[\d., ]*?)(?:, Avg Draft acceptance rate|$)")
_METRIC = "vllm:spec_decode_num_"


def detect(text: str) -> str | None:
    if "SpecDecoding metrics:" in text:
        return "vllm-log"
    if _METRIC in text:
        return "vllm-metrics"
    if '"speculative_decoding"' in text:
        return "vllm-response"
    return None


def parse_log(text: str, name: str) -> EngineAcceptance:
    """Every interval's line, summed: each interval's steps rebuilt from its mean length (2 decimals) and
    per-position rates (3 decimals), so the intervals weigh by their steps."""
    steps = accepted = drafted = 0
    reached: list[int] = []
    loose = []
    for i, line in enumerate(text.splitlines(), 1):
        if "SpecDecoding metrics:" not in line:
            continue
        m = _LINE.search(line)
        if m is None:
            raise FormatError(name, f"line {i}: expected 'SpecDecoding metrics: Mean acceptance length: X, ..., "
                                    "Accepted: N tokens, Drafted: N tokens, Per-position acceptance rate: ...'")
        a, d = int(m["accepted"]), int(m["drafted"])
        if d == 0:
            continue  # an interval that drafted nothing (mean length printed as nan)
        rates = [number(r, name, f"line {i} per-position rate", integer=False)
                 for r in m["rates"].split(",") if r.strip()]
        mean = number(m["mean"], name, f"line {i} mean acceptance length", integer=False)
        r = rebuild_steps(name, f"line {i}", a, mean, 2, rates, 3, d)
        if not r.exact:
            loose.append(f"line {i}: {r.candidates[0]}..{r.candidates[1]}")
        steps, accepted, drafted = steps + r.steps, accepted + a, drafted + d
        reached = [x + y for x, y in zip(_pad(reached, len(r.reached)), _pad(list(r.reached), len(reached)))]
    if steps == 0:
        raise FormatError(name, "no 'SpecDecoding metrics:' line with drafted tokens; expected vLLM's log "
                                "with speculative decoding on")
    notes = ("steps rebuilt from each interval's rounded mean length and per-position rates",)
    if loose:
        notes += ("the printed figures allow several step counts (" + "; ".join(loose) + "); the nearest is taken",)
    return EngineAcceptance(ENGINE, "vllm-log", steps, accepted, drafted, tuple(reached), notes=notes)


def _pad(xs: list[int], n: int) -> list[int]:
    return xs + [0] * (n - len(xs))


def parse_metrics(text: str, name: str) -> EngineAcceptance:
    """The counters since the server started, summed over engines (data-parallel ranks)."""
    # its _created samples are not counts
    c = spec_counters(text, name, _METRIC, "vLLM", ("accepted_tokens_per_pos", "accepted_tokens_per_pos_total"))
    notes = () if c.reached else ("no per-position figures (no accepted_tokens_per_pos counter)",)
    return EngineAcceptance.from_position_counts(ENGINE, "vllm-metrics", c.drafts, c.reached, c.draft_tokens,
                                                 c.accepted_tokens, notes=notes)


def parse_responses(text: str, name: str) -> EngineAcceptance:
    """Per-request figures (--per-request-spec-decode-metrics summary|detailed): histograms summed; the ordered
    per-step arrays kept where every request has them (detailed)."""
    stats = []
    for doc in json_documents(text, name):
        s = (doc.get("metrics") or {}).get("speculative_decoding") if isinstance(doc, dict) else None
        if isinstance(s, dict):
            stats.append(s)
    if not stats:
        raise FormatError(name, "expected vLLM responses with metrics.speculative_decoding (start the server with "
                                "--per-request-spec-decode-metrics summary or detailed; n = 1)")
    histogram: list[int] = []
    prompts, step_acc, step_drafted = [], [], []
    detailed = all("per_step_accepted" in s and "per_step_drafted" in s for s in stats)
    for i, s in enumerate(stats):
        field = f"response {i}"
        h = s.get("acceptance_histogram")
        if not isinstance(h, list):
            raise FormatError(name, f"{field}: metrics.speculative_decoding.acceptance_histogram should be a list")
        h = [number(x, name, f"{field} acceptance_histogram") for x in h]
        n = number(s.get("num_spec_steps", sum(h)), name, f"{field} num_spec_steps")
        a = sum(j * c for j, c in enumerate(h))
        if n != sum(h) or a != number(s.get("num_accepted_draft_tokens", a), name, f"{field} accepted"):
            raise FormatError(name, f"{field}: the acceptance_histogram {h} disagrees with num_spec_steps / "
                                    "num_accepted_draft_tokens")
        d = number(s.get("num_draft_tokens", 0), name, f"{field} num_draft_tokens")
        histogram = [x + y for x, y in zip(_pad(histogram, len(h)), _pad(h, len(histogram)))]
        prompts.append(PromptAcceptance(str(i), n, a, d))
        if detailed:
            step_acc += [number(x, name, f"{field} per_step_accepted") for x in s["per_step_accepted"]]
            step_drafted += [number(x, name, f"{field} per_step_drafted") for x in s["per_step_drafted"]]
    drafted = sum(p.drafted for p in prompts)
    if detailed:
        depth = max(len(histogram) - 1, max(step_drafted, default=0))
        return EngineAcceptance.from_steps(ENGINE, "vllm-response", step_acc, step_drafted, depth=depth,
                                           prompts=tuple(prompts))
    return EngineAcceptance.from_histogram(ENGINE, "vllm-response", histogram, drafted, prompts=tuple(prompts))


PARSERS = {"vllm-log": parse_log, "vllm-metrics": parse_metrics, "vllm-response": parse_responses}
