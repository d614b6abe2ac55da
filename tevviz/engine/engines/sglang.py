"""SGLang's per-request speculative figures (docs/engines.md, *SGLang*): a native response's `meta_info`, or an
OpenAI-compatible response's `sglext.spec_tokens_details` (request `return_spec_tokens_details`)."""

from __future__ import annotations

from .acceptance import EngineAcceptance, EngineFigure, PromptAcceptance
from .reading import FormatError, json_documents, number

ENGINE = "sglang"
# The histogram's name before and after SGLang renamed it; index j = verify steps that accepted exactly j drafts.
_HISTOGRAMS = ("spec_correct_drafts_histogram", "spec_accept_histogram")
_ACCEPTED = ("spec_num_correct_drafts", "spec_accept_token_num")
_DRAFTED = ("spec_num_proposed_drafts", "spec_draft_token_num")
LENGTH_MEANING = ("completion tokens / verify steps: it counts the prefill's first token too; ours is 1 + accepted "
                  "drafts / steps")


def detect(text: str) -> str | None:
    return "sglang-response" if '"spec_verify_ct"' in text else None


def _details(doc) -> list[dict]:
    """The dicts carrying one response's spec figures: meta_info first, else sglext (top level or per choice)."""
    if not isinstance(doc, dict):
        return []
    choices = [c for c in doc.get("choices") or [] if isinstance(c, dict)]
    metas = [m for m in (doc.get("meta_info"), *(c.get("meta_info") for c in choices)) if isinstance(m, dict)]
    found = [m for m in metas if "spec_verify_ct" in m]
    if found:
        return found
    for ext in (doc.get("sglext"), *(c.get("sglext") for c in choices)):
        spec = (ext or {}).get("spec_tokens_details") if isinstance(ext, dict) else None
        found += [s for s in (spec if isinstance(spec, list) else [spec]) if isinstance(s, dict)]
    return found


def _first(d: dict, keys: tuple[str, ...]):
    return next((d[k] for k in keys if d.get(k) is not None), None)


def parse_responses(text: str, name: str) -> EngineAcceptance:
    """Histograms summed over the responses; SGLang's own accept length shown beside ours, named."""
    rows = [d for doc in json_documents(text, name) for d in _details(doc)]
    if not rows:
        raise FormatError(name, "expected SGLang responses whose meta_info (or sglext.spec_tokens_details) carries "
                                "spec_verify_ct, with speculative decoding on")
    histogram: list[int] = []
    prompts, completion, drafted, has_histogram = [], 0, 0, True
    for i, r in enumerate(rows):
        field = f"response {i}"
        steps = number(r.get("spec_verify_ct"), name, f"{field} spec_verify_ct")
        h = _first(r, _HISTOGRAMS)
        if isinstance(h, list) and h:
            h = [number(x, name, f"{field} spec_accept_histogram") for x in h]
            accepted = sum(j * c for j, c in enumerate(h))
            if sum(h) != steps:
                raise FormatError(name, f"{field}: spec_accept_histogram {h} sums to {sum(h)}, not spec_verify_ct "
                                        f"{steps}")
            histogram = [x + y for x, y in zip(histogram + [0] * (len(h) - len(histogram)),
                                               h + [0] * (len(histogram) - len(h)))]
        elif h is not None and not isinstance(h, list):
            raise FormatError(name, f"{field}: spec_accept_histogram should be a list, got {h!r}")
        else:
            has_histogram = False
            a = _first(r, _ACCEPTED)
            if a is None:
                raise FormatError(name, f"{field}: expected spec_accept_histogram or spec_num_correct_drafts beside "
                                        "spec_verify_ct")
            accepted = number(a, name, f"{field} spec_num_correct_drafts")
        d = _first(r, _DRAFTED)
        d = None if d is None else number(d, name, f"{field} spec_num_proposed_drafts")
        drafted = None if d is None or drafted is None else drafted + d
        length = r.get("spec_accept_length")
        if completion is not None and "completion_tokens" in r:
            completion += number(r["completion_tokens"], name, f"{field} completion_tokens")
        elif completion is not None and length is not None:
            completion += number(length, name, f"{field} spec_accept_length", integer=False) * steps
        else:
            completion = None
        prompts.append(PromptAcceptance(str(i), steps, accepted, d))
    steps = sum(p.steps for p in prompts)
    own = completion / steps if completion and steps else None
    figures = (EngineFigure("SGLang accept length", own, LENGTH_MEANING),) if own is not None else ()
    extra = {"prompts": tuple(prompts), "engine_figures": figures}
    if has_histogram:
        return EngineAcceptance.from_histogram(
            ENGINE, "sglang-response", histogram, drafted,
            notes=("depths run to the deepest any step accepted (SGLang's histogram grows as needed)",), **extra)
    return EngineAcceptance(ENGINE, "sglang-response", steps, sum(p.accepted for p in prompts), drafted,
                            notes=("no per-position figures (a response without spec_accept_histogram)",), **extra)


PARSERS = {"sglang-response": parse_responses}
