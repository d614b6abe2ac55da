"""Held-out evaluation of a pair: tau, the mean expected block length and acceptance by depth, with standard errors;
and a drafter's mean C_p and tau on given contexts (ExitTrain's before/after table)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..analysis.stats import PairedDiff, mean_se
from ..analysis.summary import acceptance_curves
from ..core.sampling import SamplingConfig
from ..decode.session import DecodeConfig, DecodeSession
from ..draft.builders import BuilderConfig
from ..draft.drafters import tree_for
from ..load.models import ModelPair
from ..records.round_numbers import NUMBERS, SCAN
from .exittrain import Context, target_weights

EVAL_ROUNDS = 2  # decoding rounds per context for tau in drafter_metrics


@dataclass(frozen=True)
class EvalResult:
    """Per-prompt means, their mean and standard error, and acceptance by depth (pooled over rounds)."""

    temperature: float
    tau: float
    tau_se: float
    expected_length: float  # mean over prompts of each prompt's mean RoundRecord.expected_length
    expected_length_se: float
    # Acceptance at depth d = 1, 2, ... (summary.DepthAcceptance): of the rounds that reached d - 1 the share that
    # accepted at d, and the share of all rounds that reached d.
    acceptance_conditional: list[float | None]
    acceptance_marginal: list[float | None]
    per_prompt_tau: list[float]
    # Each prompt's mean expected block length (exact after the target pass): at T > 0 the same expectation as
    # per_prompt_tau without the draws' noise, so two drafters compare with a smaller paired SE.
    per_prompt_expected_length: list[float] = field(default_factory=list)
    # Beside the counted curves, the exact one: the target's probability of reaching d given each round's tree, the
    # mean over rounds (summary.DepthAcceptance.expected; its sum over d is the mean E[L] - 1).
    acceptance_expected: list[float | None] = field(default_factory=list)
    # Each scan number's per-prompt values by name (round_numbers.SCAN), and the counted curves behind the shares:
    # what the tables estimate (analysis/eval_table.py); left out of the JSON, whose keys scripts read.
    per_prompt: dict[str, list[float | None]] = field(default_factory=dict)
    curves: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in ("per_prompt", "curves")}


def evaluate(pair: ModelPair, prompts: list[list[int]], temperature: float, builder: BuilderConfig,
             max_new_tokens: int = 64, verifier: str = "tev", seed: int = 0, progress=None) -> EvalResult:
    """Decode every prompt with tree decoding and report tau and the expected block length over prompts."""
    taus, lengths, rounds = [], [], []
    per_prompt = {n.name: [] for n in SCAN}
    for i, ids in enumerate(prompts):
        cfg = DecodeConfig(sampling=SamplingConfig(temperature=temperature), builder=builder, verifier=verifier,
                           max_new_tokens=max_new_tokens, seed=seed + i, missing_top=0)
        s = DecodeSession(pair, ids, cfg)
        s.run()
        taus.append(NUMBERS["L"].over(s.rounds))
        lengths.append(NUMBERS["expected_length"].over(s.rounds))
        rounds += s.rounds
        for n in SCAN:
            per_prompt[n.name].append(n.over(s.rounds))
        if progress:
            progress(i + 1, len(prompts))
    tau, tau_se = mean_se(taus)
    length, length_se = mean_se(lengths)
    curves = acceptance_curves(rounds)
    return EvalResult(temperature, tau, tau_se, length, length_se, [a.conditional for a in curves],
                      [a.marginal for a in curves], taus, lengths, [a.expected for a in curves], per_prompt, curves)


@dataclass(frozen=True)
class DrafterMetrics:
    """A drafter on given contexts (ExitTrain's before/after table): the mean C_p of the trees it builds and tau,
    with each context's own values so that two drafters on the same contexts compare paired (`paired_change`)."""

    contexts: int
    C_p: float  # mean C_p of its trees, target at T = 1
    tau: float  # mean block length over the decoding rounds from each context
    rounds: int
    name: str = ""  # how the table calls the drafter
    per_context_C_p: list[float] = field(default_factory=list)  # context order
    per_context_tau: list[float] = field(default_factory=list)  # each context's mean L over its rounds

    @property
    def expected_length(self) -> float:
        """1 + C_p: the trees' expected block length under an exact path verifier."""
        return 1 + self.C_p

    @property
    def C_p_se(self) -> float:
        """Standard error of the mean C_p over contexts."""
        return mean_se(self.per_context_C_p)[1]

    @property
    def tau_se(self) -> float:
        """Standard error of tau over contexts (each context's mean L: its rounds share a context, so they are not
        independent draws)."""
        return mean_se(self.per_context_tau)[1]

    def to_dict(self) -> dict:
        return {**self.__dict__, "C_p_se": self.C_p_se, "tau_se": self.tau_se}


def paired_change(before: DrafterMetrics, after: DrafterMetrics, key: str) -> PairedDiff:
    """after - before of `key` ("C_p" or "tau") paired by context (both drafters ran on the same contexts and seeds):
    the mean change over contexts, its standard error and how many contexts."""
    xs, ys = getattr(before, f"per_context_{key}"), getattr(after, f"per_context_{key}")
    if len(xs) != len(ys):
        raise ValueError(f"paired_change needs the same contexts, got {len(xs)} and {len(ys)}")
    return PairedDiff.of(list(zip(xs, ys)))


@torch.no_grad()
def drafter_metrics(pair: ModelPair, contexts: list[Context], builder: BuilderConfig, sampling: SamplingConfig,
                    verifier: str, rounds: int = EVAL_ROUNDS, progress=None, label: str = "") -> DrafterMetrics:
    """Mean C_p (target at T = 1) of the trees `pair.draft` builds for `contexts`, and tau over `rounds` rounds each.

    tau is the mean block length of a fresh DecodeSession from each context with `sampling` (seeded per
    context, so two drafters see the same random numbers).
    """
    cps, lengths, taus = [], [], []
    for i, ctx in enumerate(contexts):
        if progress is not None:
            progress((i, len(contexts)), desc=f"evaluating the {label} draft")
        tree = tree_for(pair, ctx.tokens, builder).to(pair.device)
        cps.append(float(target_weights(pair.target, ctx.tokens, tree, 1.0)[0].C_p))
        cfg = DecodeConfig(sampling=sampling, builder=builder, verifier=verifier,
                           max_new_tokens=rounds * (builder.max_depth + 1), seed=i, missing_top=0)
        ls = [r.block_length for r in DecodeSession(pair, ctx.tokens, cfg).run(rounds)]
        lengths += ls
        taus.append(sum(ls) / len(ls))
    return DrafterMetrics(len(contexts), mean_se(cps)[0], mean_se(lengths)[0], len(lengths), label, cps, taus)
