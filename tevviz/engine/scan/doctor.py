"""The doctor for drafters (docs/doctor.md): which of a drafter's plausible readings of the target's states was it
trained with?

A drafter that reads the target's hidden states can be handed the wrong layers (an id read as a decoder layer's
output or as a `hidden_states` index, a norm ignored) and greedy output stays correct: only acceptance drops. The
doctor checks the layout, then decodes the same prompts greedily under each reading the drafter's kind offers
(`DrafterKind.readings`) and measures the top-1 chain's acceptance at depths 1 and 2, and the drafted tokens it accepts
per round. The own reading is flagged when another accepts more per round by a clear margin (`clear_margin`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

from ..analysis.doctor_report import FLOOR, ChainYield, DepthRate, DoctorReport, ReadingResult, Z
from ..analysis.stats import cluster_se, independent_diff_se, mean_se, plus_minus, share_se
from ..core.sampling import SamplingConfig
from ..draft.builders import BuilderConfig
from ..draft.drafters import DrafterKind, Reading, accepts, article, drafter_kind_of
from ..errors import TevvizError
from ..records.records import RoundRecord

DEPTHS = 2  # the depths measured: the first two levels of the drafter's greedy chain
TREE_BUDGET = 16  # nodes of a tree builder's round: enough that its top-1 chain to depth 2 is nearly always drafted
LIMIT = 8  # prompts decoded by default (spread over the prompt set)
# Prompts for a target no named pair ships prompts for; wrapped in its chat template when it has one.
BUILTIN_PROMPTS = (
    "Explain how a hash table handles collisions, with a short example.",
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "def merge_sorted(a, b):\n    \"\"\"Merge two sorted lists into one sorted list.\"\"\"\n",
    "What are the main causes of inflation? Answer in a few sentences.",
    "List five tips for writing clear emails.",
    "Translate into French: The weather is lovely today, let us walk to the harbour.",
    "The three laws of motion, as Newton stated them, are",
    "Summarise the water cycle for a ten-year-old.",
)


def builtin_rows() -> list[dict]:
    """The prompts for a target no named pair ships prompts for: BUILTIN_PROMPTS, then the shipped free-form chat
    set's one-turn prompts (questions, tasks, code, maths as people write them, for no model in particular); chat
    None: the tokenizer's template when it has one. A multi-turn row is left out: its prompt is rendered already,
    through one model's template."""
    from ..load.models import assets_dir

    rows = [{"id": f"builtin{i}", "prompt": p, "chat": None} for i, p in enumerate(BUILTIN_PROMPTS)]
    path = assets_dir() / "scan_prompts" / "smollm2_freeform.jsonl"
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            r = json.loads(line) if line.strip() else {}
            if r.get("prompt") and "messages" not in r and r.get("chat", True):
                rows.append({"id": r.get("id", f"freeform{len(rows)}"), "prompt": r["prompt"], "chat": None})
    return rows


def spread(rows: list, limit: int | None) -> list:
    """`limit` rows spread evenly over `rows` (all of them when there are no more, or without a limit)."""
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
        raise TevvizError(f"the prompt limit must be a positive integer, got {limit!r}")
    if limit is None or len(rows) <= limit:
        return list(rows)
    return [rows[i * len(rows) // limit] for i in range(limit)]


def encode_rows(tokenizer, rows: list[dict]) -> list[list[int]]:
    """Token ids of prompt rows: a row's own `chat`, else the chat template when the tokenizer has one."""
    from ..decode.session import encode_prompt, has_chat_template

    chat = has_chat_template(tokenizer)
    return [encode_prompt(tokenizer, r["prompt"], chat=chat if r.get("chat") is None else bool(r["chat"]))
            for r in rows]


def chain_trials(r: RoundRecord, depths: int = DEPTHS) -> list[bool]:
    """The round's top-1 chain outcomes at depths 1, 2, ...: one entry per depth tried (a depth is tried when the
    chain reached it accepted and its node has children in the tree). Under greedy verification the accepted path
    is the target's own continuation, so a top-1 node is accepted exactly when it is the target's token."""
    children: dict[int, list[int]] = {}
    for v, p in enumerate(r.parents):
        if p >= 0:
            children.setdefault(p, []).append(v)
    out, node = [], 0
    for d in range(1, depths + 1):
        kids = children.get(node)
        if not kids:
            break
        # The drafter's most likely child; every builder keeps a node's most likely child if it keeps any.
        top = max(kids, key=lambda v: (r.draft_logprobs[v], -v))
        hit = d < len(r.accepted) and r.accepted[d] == top
        out.append(hit)
        if not hit:
            break
        node = top
    return out


def depth_rates(per_prompt: list[list[list[bool]]], depths: int = DEPTHS) -> tuple[DepthRate, ...]:
    """Per depth, acceptance pooled over rounds with its SE: over prompts (the rounds of one prompt share a text, so
    they are not independent), never below the binomial SE of the pooled rounds."""
    out = []
    for d in range(depths):
        counts = tuple((sum(t[d] for t in rounds if len(t) > d), sum(len(t) > d for t in rounds))
                       for rounds in per_prompt)
        k, n = sum(y for y, _ in counts), sum(m for _, m in counts)
        if n == 0:
            out.append(DepthRate(d + 1, 0, 0, None, None, None, counts))
            continue
        p = k / n
        binomial = share_se(k, n) or 0.0
        cluster = _cluster_se([((y - p * m) / n,) for y, m in counts if m])
        out.append(DepthRate(d + 1, k, n, p, max(binomial, cluster), binomial, counts))
    return tuple(out)


def chain_yield(depths: tuple[DepthRate, ...]) -> ChainYield:
    """Drafted tokens accepted per round along the top-1 chain: every depth's accepted rounds over the rounds that tried
    depth 1; its SE over prompts, never below the SE of the mean over independent rounds (stats.mean_se)."""
    first = depths[0]
    by_prompt = tuple((sum(d.by_prompt[i][0] for d in depths), m) for i, (_, m) in enumerate(first.by_prompt))
    k, n = sum(y for y, _ in by_prompt), first.trials
    if n == 0:
        return ChainYield(0, 0, None, None, None, by_prompt)
    rate = k / n
    # One round has no spread to estimate: its floor is 0 and the SE over prompts decides.
    rounds_se = mean_se(round_yields(depths))[1] or 0.0
    cluster = _cluster_se([((y - rate * m) / n,) for y, m in by_prompt if m])
    return ChainYield(k, n, rate, max(rounds_se, cluster), rounds_se, by_prompt)


def round_yields(depths: tuple[DepthRate, ...]) -> list[int]:
    """Each round's accepted drafted tokens, rebuilt from the counts: depth d accepted in the rounds that got >= d."""
    reached = [depths[0].trials, *(d.accepted for d in depths), 0]
    return [x for x in range(len(depths) + 1) for _ in range(reached[x] - reached[x + 1])]


def _cluster_se(terms: list[tuple[float, ...]]) -> float:
    """The SE of a sum of per-prompt influence terms (each prompt's terms summed; stats.cluster_se), 0 for one."""
    return cluster_se([sum(t) for t in terms]) or 0.0


def difference_se(a: DepthRate | ChainYield, b: DepthRate | ChainYield) -> float:
    """The SE of a.rate - b.rate over the prompts both decoded (paired: a prompt's difficulty cancels), never below
    the SE of two independent rates over rounds."""
    terms = [((ya - a.rate * ma) / a.trials, -(yb - b.rate * mb) / b.trials)
             for (ya, ma), (yb, mb) in zip(a.by_prompt, b.by_prompt) if ma or mb]
    return max(_cluster_se(terms), independent_diff_se(a.binomial_se, b.binomial_se))


def clear_margin(other: ReadingResult, own: ReadingResult) -> tuple[float, float, bool]:
    """(margin, threshold, clear): other minus own accepted drafted tokens per round, and whether it exceeds
    max(Z x its SE, FLOOR).

    Tokens per round count both depths: a wrong reading costs at depth 1 and again at depth 2, where the drafter builds
    on its own state of depth 1 (a one-layer shift of a 30-layer target's head cost 0.04 at depth 1, 0.07 at depth 2).
    Both readings decode the same prompts, so the SE is that of the paired difference over prompts; Z = 2 makes a
    two-sided test near 5% for one comparison (with two or three other readings, a false alarm stays rare). The floor
    keeps a statistically clear but small difference (many prompts) from being called a misconfiguration; it is half
    of the ~0.10 accepted tokens per round that one head lost to a misread layer id (SGLang PR 25454)."""
    a, b = other.per_round, own.per_round
    margin = a.rate - b.rate
    threshold = max(Z * difference_se(a, b), FLOOR)
    return margin, threshold, other is not own and margin > threshold


def measure_builder(kind: DrafterKind) -> BuilderConfig:
    """A chain of depth DEPTHS where the kind drafts chains, else its own builder at TREE_BUDGET nodes and that depth
    (the tree's top-1 chain is read off it: `chain_trials`)."""
    if accepts("chain", kind):
        return BuilderConfig(name="chain", depth=DEPTHS)
    return BuilderConfig(name=kind.default_builder, budget=TREE_BUDGET, depth=DEPTHS)


def check_layout(pair, kind: DrafterKind, draft_path: str | None) -> str:
    """Run the kind's folder check on `draft_path` (a local folder) against the pair's target; what was checked."""
    folder = Path(str(draft_path)).expanduser() if draft_path else None
    if folder is None or not folder.is_dir():
        return f"{kind.name} drafter checked when it loaded beside the target"
    kind.check_folder(str(folder), lambda: pair.target.config)
    return f"{folder.name}: its {kind.name} drafter's layout checked against the target's config"


def decode_reading(pair, prompts: list[list[int]], max_new_tokens: int, builder: BuilderConfig,
                   tick: Callable[[], None] = lambda: None) -> tuple[list[list[list[bool]]], int]:
    """Greedy decodes of every prompt: per prompt, each round's chain outcomes; and the rounds run."""
    from ..decode.session import DecodeConfig, DecodeSession

    cfg = DecodeConfig(sampling=SamplingConfig(temperature=0.0), builder=builder, verifier="tev",
                       max_new_tokens=max_new_tokens, missing_top=0)
    per_prompt, rounds = [], 0
    for i, ids in enumerate(prompts):
        try:
            session = DecodeSession(pair, ids, cfg)
            session.run()
        except TevvizError as e:
            raise TevvizError(f"prompt {i + 1}: {e}") from None
        per_prompt.append([chain_trials(r) for r in session.rounds])
        rounds += len(session.rounds)
        tick()
    return per_prompt, rounds


def check_max_new_tokens(n) -> None:
    """Refuse fewer than 2 new tokens: a round that may commit one token drafts nothing."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 2:
        raise TevvizError(f"max new tokens must be an integer of at least 2 (with one, no round drafts), got {n!r}")


def run_doctor(pair, prompts: list[list[int]], max_new_tokens: int = 64, draft_path: str | None = None,
               progress: Callable[[int, int, str], None] | None = None) -> DoctorReport:
    """Check the layout, decode `prompts` (token ids) under each reading of the pair's drafter, and judge the own
    reading; the drafter is left on its own reading, whatever happens."""
    kind = drafter_kind_of(pair.draft)
    n_layers = pair.target.config.get_text_config().num_hidden_layers
    readings = kind.readings(pair.draft, n_layers)
    if not readings:
        said = f"{article(kind.name)} {kind.name} drafter reads none of the target's states: nothing to doctor"
        return DoctorReport(kind.name, pair.draft_name, "no layout read from the target to check", (), None, None,
                            None, True, said)
    layout = check_layout(pair, kind, draft_path)
    if not prompts:
        raise TevvizError("prompts: give at least one prompt to decode")
    check_max_new_tokens(max_new_tokens)
    own = next((r for r in readings if r.own), readings[0])
    builder = measure_builder(kind)
    total, done = len(readings) * len(prompts), [0]

    def tick(name: str):
        done[0] += 1
        if progress is not None:
            progress(done[0], total, name)

    results = []
    try:
        for reading in readings:
            kind.apply_reading(pair.draft, reading)
            per_prompt, rounds = decode_reading(pair, prompts, max_new_tokens, builder,
                                                lambda name=reading.name: tick(name))
            results.append(_result(reading, per_prompt, rounds))
    finally:
        kind.apply_reading(pair.draft, own)
    return judge(kind.name, pair.draft_name, layout, results, len(prompts), max_new_tokens, builder.name)


def _result(reading: Reading, per_prompt, rounds: int) -> ReadingResult:
    depths = depth_rates(per_prompt)
    return ReadingResult(reading.name, tuple(reading.layer_ids), tuple(reading.options), reading.own, reading.why,
                         depths, rounds, chain_yield(depths))


def judge(kind: str, draft_name: str, layout: str, results: list[ReadingResult], prompts: int, max_new_tokens: int,
          builder: str) -> DoctorReport:
    """The best reading (most accepted drafted tokens per round; the own one on a tie) and the verdict on the own
    reading, which is measured against its strongest challenger: `margin` is that reading's tokens per round minus
    the own's."""
    own = next((r for r in results if r.own), results[0])
    if own.rate(1).rate is None:
        raise TevvizError("no round drafted a token under the checkpoint's own reading: give longer outputs "
                          "(--max-new-tokens) or more prompts")
    others = [r for r in results if r is not own and r.rate(1).rate is not None]
    head = (kind, draft_name, layout, tuple(results))
    tail = (prompts, max_new_tokens, builder)
    if not others:
        said = f"no other reading to compare with {describe(own)}: the others lie beyond the target's layers"
        return DoctorReport(*head, own.name, None, None, True, said, *tail)
    challenger = max(others, key=lambda r: r.per_round.rate)
    margin, threshold, clear = clear_margin(challenger, own)
    best = challenger if margin > 0 else own
    said = verdict(challenger, own, margin, threshold, clear)
    if not clear and threshold > FLOOR:
        said += power_note(threshold / Z, prompts)
    return DoctorReport(*head, best.name, margin, threshold, not clear, said, *tail)


def power_note(se: float, prompts: int) -> str:
    """What a verdict that is not clear adds when its prompts measure the difference too loosely to tell readings
    FLOOR apart: the SE it has, the SE it would need, and about how many prompts give it (SE ~ 1 / sqrt(prompts))."""
    need = FLOOR / Z
    more = math.ceil(prompts * (se / need) ** 2)
    return (f"; but these {prompts} prompts give too little power to tell the readings apart: the difference is "
            f"measured to ± {se:.3f}, and telling readings {FLOOR:g} tokens per round apart needs ± {need:.3f} or "
            f"less, about {more} prompts like these (--limit, --prompts)")


def describe(r: ReadingResult) -> str:
    """`name (hidden_states [..], options)`."""
    opts = "".join(f", {k}={v}" for k, v in r.options)
    return f"{r.name} (hidden_states {list(r.layer_ids)}{opts})"


def _says(r: ReadingResult) -> str:
    """`t ± se drafted tokens accepted per round (depth 1 a, depth 2 b)`."""
    y, d = r.per_round, r.depths
    depth2 = "" if len(d) < 2 or d[1].rate is None else f", depth 2 {d[1].rate:.3f}"
    return f"{plus_minus(y.rate, y.se)} drafted tokens per round (depth 1 {d[0].rate:.3f}{depth2})"


def verdict(challenger: ReadingResult, own: ReadingResult, margin: float, threshold: float, clear: bool) -> str:
    """The verdict in words, the margin rule included."""
    rule = f"a clear margin exceeds max({Z:g} x the SE of the difference, {FLOOR:g}) = {threshold:.3f}"
    if clear:
        return (f"the checkpoint's own reading looks wrong: {describe(challenger)} accepts {_says(challenger)} against "
                f"{_says(own)} for {describe(own)}, a margin of {margin:.3f} ({rule}); the drafter was most likely "
                f"trained with {challenger.name}")
    if margin <= 0:
        return (f"the checkpoint's own reading, {describe(own)}, is the best: {_says(own)}, {-margin:.3f} above the "
                f"next, {challenger.name} ({rule} for another reading to replace it)")
    return (f"no reading beats the checkpoint's own by a clear margin: {describe(challenger)} accepts {margin:+.3f} "
            f"drafted tokens per round against {describe(own)}, and {rule}")
