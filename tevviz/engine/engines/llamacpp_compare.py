"""The same drafter in llama.cpp and in tevviz, compared: per-depth acceptance, where the runs part, a verdict. Pure.

Both engines decode a prompt the same way (commands/engine_run.py): the first token from the prompt's own pass, with
no draft (as llama-server does), then verification steps that each draft a chain of up to K tokens, accept a prefix
of j of them and add the target's token. A prompt's run is its generated tokens and its steps' (accepted, drafted)
in order; from those its blocks follow:

    tokens 7 8 9 4 5 with steps (2, 3), (0, 3) -> blocks [7], [8 9 4], [5]

At T = 0 both engines are deterministic: with the same weights, prompt ids and draft shape they commit the same
blocks, and `first_part` names the first step where they do not (the accepted lengths, or the tokens committed).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..analysis.stats import cluster_se, independent_diff_se, plus_minus
from .acceptance import EngineAcceptance, PromptAcceptance

AGREE_LENGTH = 0.15  # acceptance lengths this close count as agreeing (issue #62's bar)


@dataclass(frozen=True)
class PromptRun:
    """One engine's decode of one prompt."""

    prompt: str  # the prompt's id
    tokens: tuple[int, ...]  # generated token ids
    steps: tuple[tuple[int, int], ...]  # (accepted, drafted) of each verification step, in order

    def blocks(self) -> list[tuple[int, ...]]:
        """The tokens each round committed: the first token alone, then each step's accepted tokens and the
        target's own (the last block cut where the tokens end, at an end token or the token limit)."""
        out, at = [self.tokens[:1]], 1
        for accepted, _ in self.steps:
            out.append(self.tokens[at : at + accepted + 1])
            at += accepted + 1
        if at < len(self.tokens):  # rounds with no room left to draft: one token each
            out += [self.tokens[i : i + 1] for i in range(at, len(self.tokens))]
        return out


@dataclass(frozen=True)
class Part:
    """The first round of a prompt where the engines' accepted lengths or committed tokens differ."""

    prompt: str
    round: int  # 0: the first token (no draft); r >= 1: the r-th verification step
    position: int  # index in the generated tokens where that round's block starts
    accepted: tuple[int | None, int | None]  # (llama.cpp, tevviz) drafted tokens accepted in that round
    blocks: tuple[tuple[int, ...], tuple[int, ...]]  # (llama.cpp, tevviz) tokens committed in that round
    token_part: int | None  # the first index where the generated tokens differ (None: the texts agree)
    # The same block ending in an end token that tevviz counts as an accepted draft token and llama.cpp as the
    # target's own: llama.cpp accepts a drafted end-of-generation token only as the draft's last (common/sampling.cpp,
    # common_sampler_sample_and_accept_n), so that round reads one fewer accepted there. Not a difference in tokens.
    end_token: bool = False

    @property
    def what(self) -> str:
        """'tokens' where the generated tokens part within this round's blocks, else 'accepted lengths' (the same
        text here, other drafts)."""
        end = self.position + max(len(b) for b in self.blocks)
        return "tokens" if self.token_part is not None and self.token_part < end else "accepted lengths"

    def to_dict(self) -> dict:
        return {"prompt": self.prompt, "round": self.round, "position": self.position, "what": self.what,
                "end_token": self.end_token,
                "accepted": {"llama.cpp": self.accepted[0], "tevviz": self.accepted[1]},
                "tokens": {"llama.cpp": list(self.blocks[0]), "tevviz": list(self.blocks[1])},
                "token_part": self.token_part}


def first_part(llama: PromptRun, tev: PromptRun, ends: frozenset[int] = frozenset()) -> Part | None:
    """The first round where the two runs of one prompt differ, or None where every round matches; `ends` are the
    end tokens (a round that differs only in how an accepted end token is counted is marked `end_token`)."""
    a, b = llama.blocks(), tev.blocks()
    steps_a, steps_b = (None, *(s[0] for s in llama.steps)), (None, *(s[0] for s in tev.steps))
    token_part = next((i for i, (x, y) in enumerate(zip(llama.tokens, tev.tokens)) if x != y),
                      None if len(llama.tokens) == len(tev.tokens) else min(len(llama.tokens), len(tev.tokens)))
    at = 0
    for r in range(max(len(a), len(b))):
        acc = (steps_a[r] if r < len(steps_a) else None, steps_b[r] if r < len(steps_b) else None)
        block = (a[r] if r < len(a) else (), b[r] if r < len(b) else ())
        if acc[0] != acc[1] or block[0] != block[1]:
            counted = (block[0] == block[1] and block[0][-1:] and block[0][-1] in ends
                       and None not in acc and acc[0] == acc[1] - 1)
            return Part(llama.prompt, r, at, acc, block, token_part, bool(counted))
        at += len(block[0])
    return None


def acceptance(engine: str, runs: list[PromptRun], depth: int) -> EngineAcceptance:
    """One engine's steps over all prompts as an acceptance record (per-depth marginal and conditional with SEs),
    with one row per prompt."""
    accepted = [a for r in runs for a, _ in r.steps]
    drafted = [d for r in runs for _, d in r.steps]
    rows = tuple(PromptAcceptance(r.prompt, len(r.steps), sum(a for a, _ in r.steps), sum(d for _, d in r.steps))
                 for r in runs)
    return EngineAcceptance.from_steps(engine, f"{engine} engine run", accepted, drafted, depth=depth, prompts=rows)


@dataclass(frozen=True)
class DepthDiff:
    """llama.cpp's marginal acceptance at depth k less tevviz's, with the SE of the difference."""

    depth: int
    diff: float
    se: float
    over: str = "steps"  # what the SE counts as independent: steps, or prompts (clustered_diffs)

    @property
    def z(self) -> float:
        return abs(self.diff) / self.se if self.se > 0 else (math.inf if self.diff else 0.0)


def depth_diffs(llama: EngineAcceptance, tev: EngineAcceptance) -> list[DepthDiff]:
    """Per depth, m_k(llama.cpp) - m_k(tevviz) and sqrt(se^2 + se^2) (the two runs' steps counted apart)."""
    out = []
    for k, (ma, sa, mb, sb) in enumerate(zip(llama.marginal, llama.marginal_se, tev.marginal, tev.marginal_se), 1):
        if ma is None or mb is None:
            continue
        out.append(DepthDiff(k, ma - mb, independent_diff_se(sa, sb)))
    return out


def clustered_marginal(runs: list[PromptRun], depth: int) -> list[tuple[float | None, float | None]]:
    """(m_k, its SE with prompts as clusters) for k = 1..depth: m_k = sum_i r_ik / sum_i s_i over prompts i (r_ik
    steps of prompt i that accepted at least k, s_i its steps), SE = sqrt(n / (n - 1) * sum_i (r_ik - m_k s_i)^2)
    / sum_i s_i, the ratio estimator's. A prompt's steps share its text, so they are not independent draws; at
    T > 0 the two engines also sample different texts, and this SE carries that."""
    steps = [len(r.steps) for r in runs]
    total = sum(steps)
    out = []
    for k in range(1, depth + 1):
        reached = [sum(a >= k for a, _ in r.steps) for r in runs]
        if not total:
            out.append((None, None))
            continue
        m = sum(reached) / total
        out.append((m, cluster_se([(r - m * s) / total for r, s in zip(reached, steps)])))
    return out


def clustered_diffs(llama: list[PromptRun], tev: list[PromptRun], depth: int) -> list[DepthDiff]:
    """Per depth, m_k(llama.cpp) - m_k(tevviz) with the SE of the difference over prompts."""
    out = []
    for k, ((ma, sa), (mb, sb)) in enumerate(zip(clustered_marginal(llama, depth), clustered_marginal(tev, depth)), 1):
        if ma is not None and mb is not None:
            out.append(DepthDiff(k, ma - mb, independent_diff_se(sa, sb), "prompts"))
    return out


@dataclass(frozen=True)
class Verdict:
    """Whether the engines agree, where they part most, and what may explain it."""

    agree: bool
    text: str
    depth: DepthDiff | None  # the depth whose difference is largest against its SE
    length_diff: float | None  # llama.cpp's acceptance length less tevviz's
    causes: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        d = self.depth
        return {"agree": self.agree, "text": self.text, "length_diff": self.length_diff,
                "depth": None if d is None else {"depth": d.depth, "diff": d.diff, "se": d.se, "se_over": d.over},
                "causes": list(self.causes)}


def verdict(llama: EngineAcceptance, tev: EngineAcceptance, parts: list[Part], greedy: bool,
            causes: tuple[str, ...] = (), diffs: list[DepthDiff] | None = None) -> Verdict:
    """The engines agree when, at T = 0, no prompt's rounds part; at T > 0 (or where they part), when no depth's
    difference passes two standard errors and the acceptance lengths are within AGREE_LENGTH. `diffs`: the
    per-depth differences to judge (default: depth_diffs, SEs over steps; clustered_diffs for SEs over prompts)."""
    la, lb = llama.acceptance_length, tev.acceptance_length
    length = None if la is None or lb is None else la - lb
    diffs = depth_diffs(llama, tev) if diffs is None else diffs
    worst = max(diffs, key=lambda d: (d.z, abs(d.diff)), default=None)
    lengths = "no steps" if length is None else f"acceptance length {la:.3f} (llama.cpp) against {lb:.3f} (tevviz)"
    if greedy and all(p.end_token for p in parts) and llama.steps and tev.steps:
        ends = (f", but for {len(parts)} end token(s) that tevviz counts as accepted drafts and llama.cpp as the "
                "target's own (prompts " + ", ".join(p.prompt for p in parts) + ")") if parts else ""
        return Verdict(True, f"the engines agree: every round of every prompt committed the same tokens and accepted "
                             f"the same drafted tokens{ends}; {lengths}", worst, length, causes)
    close = length is not None and abs(length) <= AGREE_LENGTH
    parted = worst is not None and worst.z > 2
    where = ""
    if parts:
        p = parts[0]
        where = (f"; at T = 0 the first part is prompt {p.prompt}, round {p.round} (token {p.position}): "
                 f"llama.cpp accepted {p.accepted[0]}, tevviz {p.accepted[1]}, their {p.what} differ")
        if len(parts) > 1:
            where += f" ({len(parts)} prompts part in all; rounds after a part compare different contexts)"
    if parted:
        text = (f"the engines diverge at depth {worst.depth} by {plus_minus(worst.diff, worst.se, signed=True)} "
                f"(llama.cpp less tevviz, SE over {worst.over}); {lengths}")
    elif close:
        over = f" (SE over {worst.over})" if worst is not None else ""
        text = f"the engines agree within their standard errors{over} and within {AGREE_LENGTH} in {lengths}"
    else:
        text = f"the per-depth rates agree within two standard errors, but {lengths} differ by more than {AGREE_LENGTH}"
    return Verdict(close and not parted, text + where, worst, length, causes)
