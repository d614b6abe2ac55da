"""llama.cpp's `llama-server` speculative figures (docs/engines.md, *llama.cpp*): its log, its Prometheus `/metrics`
(`--metrics`) and each response's `timings`."""

from __future__ import annotations

import re

from .acceptance import EngineAcceptance, EngineFigure, PromptAcceptance
from .reading import FormatError, json_documents, number, rebuild_steps, spec_counters

ENGINE = "llama.cpp"
_REQUEST = re.compile(r"(?:task (?P<task>-?\d+) \| )?draft acceptance = (?P<rate>[\d.]+) \(\s*(?P<accepted>\d+) "
                      r"accepted /\s*(?P<drafted>\d+) generated\), mean len =\s*(?P<mean>[\d.]+)")
_PER_POS = re.compile(r"(?:task (?P<task>-?\d+) \|\s*)?acc per pos = \((?P<rates>[^)]*)\)")
_STATS = re.compile(r"statistics\s+(?P<impl>\S+): #calls\(b,g,a\) =\s*\d+\s+\d+\s+(?P<steps>\d+), #gen drafts =\s*\d+, "
                    r"#acc drafts =\s*\d+, #gen tokens =\s*(?P<drafted>\d+), #acc tokens =\s*(?P<accepted>\d+)"
                    r"(?:, #mean acc len = [\d.]+, #acc rate/pos = \((?P<rates>[^)]*)\))?")
# With LLAMA_TRACE=1 in the server's environment, one line per verification step: accepted j of the n drafted.
_STEP = re.compile(r"task (?P<task>-?\d+) \| accepted\s+(?P<accepted>\d+)/\s*(?P<drafted>\d+) draft tokens")
_METRIC = "llamacpp:spec_decode_num_"
LOG_NOTE = "run llama-server with -lv 4 for the per-position rates and the statistics lines (exact step counts)"


def detect(text: str) -> str | None:
    if "draft acceptance =" in text or re.search(r"statistics\s+\S+: #calls\(b,g,a\)", text):
        return "llamacpp-log"
    if _METRIC in text:
        return "llamacpp-metrics"
    if '"draft_n"' in text:
        return "llamacpp-response"
    return None


def _rates(text: str, name: str, where: str) -> list[float]:
    return [number(r, name, f"{where} rate", integer=False) for r in text.split(",") if r.strip()]


def parse_log(text: str, name: str) -> EngineAcceptance:
    """Per-request rows from the `draft acceptance` lines (steps rebuilt from the rounded mean length, and the
    `acc per pos` rates where logged); the totals from the last `statistics` line of each drafter where logged
    (its step counts are exact and cumulative over the server's life), else the requests summed."""
    requests: list[dict] = []
    stats: dict[str, tuple[int, int, int, list[float] | None]] = {}
    steps_seen: list[tuple[int, int]] = []
    for i, line in enumerate(text.splitlines(), 1):
        if m := _STEP.search(line):
            steps_seen.append((int(m["accepted"]), int(m["drafted"])))
        elif m := _REQUEST.search(line):
            requests.append({"line": i, "task": m["task"], "accepted": int(m["accepted"]),
                             "drafted": int(m["drafted"]), "mean": number(m["mean"], name, f"line {i} mean len",
                                                                          integer=False), "rates": []})
        elif m := _PER_POS.search(line):
            if not requests or (m["task"] is not None and requests[-1]["task"] not in (None, m["task"])):
                raise FormatError(name, f"line {i}: 'acc per pos' without its request's 'draft acceptance' line")
            requests[-1]["rates"] = _rates(m["rates"], name, f"line {i}")
        elif m := _STATS.search(line):
            rates = None if m["rates"] is None else _rates(m["rates"], name, f"line {i}")
            stats[m["impl"]] = (int(m["steps"]), int(m["accepted"]), int(m["drafted"]), rates)
        elif "draft acceptance =" in line or re.search(r"statistics\s+\S+: #calls", line):
            raise FormatError(name, f"line {i}: expected llama-server's 'draft acceptance = R (A accepted / D "
                                    "generated), mean len = L' or 'statistics NAME: #calls(b,g,a) = ...' line")
    if not requests and not stats:
        raise FormatError(name, "no 'draft acceptance' or 'statistics' line; expected llama-server's log with a "
                                "draft model or n-gram drafting on")
    prompts, reached, notes = [], [], []
    n_max = max((len(r["rates"]) for r in requests), default=0)  # acc per pos has one rate per draft position
    for r in requests:
        k = len(r["rates"])
        if r["accepted"] == 0:  # mean len 1.00 whatever the steps: take every step as drafting n_max tokens
            steps, counts = -(-r["drafted"] // max(n_max, 1)), (0,) * k
            notes.append(f"line {r['line']}: nothing accepted, so the steps are not printed; "
                         f"{steps} taken (drafted / {max(n_max, 1)})")
        else:
            built = rebuild_steps(name, f"line {r['line']}", r["accepted"], r["mean"], 2, r["rates"], 3,
                                  r["drafted"])
            steps, counts = built.steps, built.reached
            if not built.exact:
                notes.append(f"line {r['line']}: the printed figures allow {built.candidates[0]}.."
                             f"{built.candidates[1]} steps; {steps} taken")
        prompts.append(PromptAcceptance(str(r["task"] if r["task"] is not None else len(prompts)), steps,
                                        r["accepted"], r["drafted"]))
        reached.append(counts)
    extra = {"prompts": tuple(prompts), **_per_step(steps_seen, stats, prompts, notes)}
    if requests:
        rate = sum(p.accepted for p in prompts) / max(sum(p.drafted for p in prompts), 1)
        extra["engine_figures"] = (EngineFigure("llama.cpp draft acceptance", rate,
                                                "accepted / generated draft tokens (not a per-step rate)"),)
    if stats:
        steps = sum(s[0] for s in stats.values())
        # a drafter's statistics run to the deepest position it accepted; the requests' rates to n_max
        depth = max([n_max, *(len(s[3] or ()) for s in stats.values())])
        per_pos = [sum(round(s[3][k] * s[0]) if s[3] and k < len(s[3]) else 0 for s in stats.values())
                   for k in range(depth)]
        exact = "" if steps < 1000 else " (the rates are printed to 3 decimals: counts over 1000 steps are rounded)"
        notes.insert(0, f"totals from the last 'statistics' line of {', '.join(stats)}{exact}; per-request rows "
                        "rebuilt from the 'draft acceptance' lines")
        if any(s[3] is None for s in stats.values()):
            per_pos, notes = [], [*notes, "no per-position figures (a drafter accepted nothing)"]
        return EngineAcceptance.from_position_counts(
            ENGINE, "llamacpp-log", steps, per_pos, sum(s[2] for s in stats.values()),
            sum(s[1] for s in stats.values()), notes=tuple(notes), **extra)
    depth = max(len(c) for c in reached)
    if any(len(c) != depth for c in reached) or depth == 0:
        notes += [f"no per-position figures (no 'acc per pos' line for every request: {LOG_NOTE})"]
        return EngineAcceptance(ENGINE, "llamacpp-log", sum(p.steps for p in prompts),
                                sum(p.accepted for p in prompts), sum(p.drafted for p in prompts),
                                notes=("steps rebuilt from each request's rounded mean length", *notes), **extra)
    return EngineAcceptance.from_position_counts(
        ENGINE, "llamacpp-log", sum(p.steps for p in prompts), [sum(c[k] for c in reached) for k in range(depth)],
        sum(p.drafted for p in prompts), sum(p.accepted for p in prompts),
        notes=("steps rebuilt from each request's rounded mean length and per-position rates", *notes), **extra)


def _per_step(seen: list[tuple[int, int]], stats: dict, prompts: list[PromptAcceptance], notes: list[str]) -> dict:
    """The per-step lines as the run's ordered arrays, where they account for every step and accepted token."""
    if not seen:
        return {}
    steps = sum(s[0] for s in stats.values()) if stats else sum(p.steps for p in prompts)
    accepted = sum(s[1] for s in stats.values()) if stats else sum(p.accepted for p in prompts)
    if len(seen) != steps or sum(a for a, _ in seen) != accepted:
        notes.append(f"{len(seen)} per-step 'accepted j/ n draft tokens' lines do not match {steps} steps and "
                     f"{accepted} accepted tokens: left out")
        return {}
    return {"per_step_accepted": tuple(a for a, _ in seen), "per_step_drafted": tuple(n for _, n in seen)}


def parse_metrics(text: str, name: str) -> EngineAcceptance:
    """The server's counters since it started (position labels count from 0)."""
    c = spec_counters(text, name, _METRIC, "llama-server", ("accepted_tokens_per_pos_total",))
    notes = () if c.reached else ("no per-position figures (this llama-server build has no per_pos counter)",)
    return EngineAcceptance.from_position_counts(ENGINE, "llamacpp-metrics", c.drafts, c.reached, c.draft_tokens,
                                                 c.accepted_tokens, notes=notes)


def parse_responses(text: str, name: str) -> EngineAcceptance:
    """Each response's `timings.draft_n` / `draft_n_accepted`: tokens only, no verification steps."""
    prompts = []
    for doc in json_documents(text, name):
        # a response, or a record holding responses one level down ({"prompt": ..., "draft": response})
        inner = [doc, *doc.values()] if isinstance(doc, dict) and "timings" not in doc else [doc]
        timings = [d.get("timings") for d in inner if isinstance(d, dict)]
        t = next((t for t in timings if isinstance(t, dict) and "draft_n" in t), None)
        if t is not None:
            i = len(prompts)
            prompts.append((number(t["draft_n"], name, f"response {i} timings.draft_n"),
                            number(t.get("draft_n_accepted"), name, f"response {i} timings.draft_n_accepted")))
    if not prompts:
        raise FormatError(name, "expected llama-server responses with timings.draft_n (a draft model or n-gram "
                                "drafting on, and at least one token drafted)")
    note = (f"responses carry drafted and accepted tokens, not the verification steps: no acceptance length "
            f"and no per-position figures; read the server's log ({LOG_NOTE}) or /metrics")
    return EngineAcceptance(ENGINE, "llamacpp-response", None, sum(a for _, a in prompts),
                            sum(d for d, _ in prompts), notes=(note,))


PARSERS = {"llamacpp-log": parse_log, "llamacpp-metrics": parse_metrics, "llamacpp-response": parse_responses}
