"""Committed streams of sampled chains and of the mixed builder, with a draft far from its target and at T = 0.7.

The stream cases of test_exactness use a draft close to its target (TV 0.06 at the root) at T = 1, where several
realistic faults stay below what 2,000 sessions can see. These cases were each checked to fail against the fault
they target, planted one at a time:

- temperature applied twice to a sampled chain's draws while the chain carries the right law (T = 0.7 case);
- a sampled chain that stops before a drawn token whose draft probability is low, instead of keeping every
  token up to a depth fixed before the draws (far-draft sampled case);
- a mixed builder that, when speculative sampling rejects part of its chain, verifies the same chain again with
  TEV and commits that, so the second verdict depends on the first draw (far-draft mixed case).

Temperature applied twice to both the draws and the carried law leaves speculative sampling exact (it accepts
with the law the chain was drawn from); test_sampled_chain catches that at T = 0.7, where the first token no
longer follows the draft's processed law.
"""

from __future__ import annotations

import pytest
import torch
from conftest import perturbed, word_tokenizer
from test_exactness import STREAM_SESSIONS, first_three_law, stream_pair

from tevviz.engine import BuilderConfig, DecodeConfig, DecodeSession, SamplingConfig
from tevviz.engine.core.sampling import processed_probs
from tevviz.engine.load.models import ModelPair
from tevviz.engine.verify.comparison import chi_square_p

pytestmark = pytest.mark.usefixtures("one_thread")

PROMPT = [4]  # one token: no prefill forward, so a session costs about four tiny forwards
FAR_NOISE = 1.0  # relative weight noise of the far draft: TV(p, q) about 0.36 at the root
TV_FAR = 0.3
# A chi-square p below this fails the case. The sessions' seeds are fixed, so each case is one draw: a correct
# engine fails it with probability 1e-3 (the bound of test_exactness's stream cases, unchanged).
P_MIN = 1e-3
# builder, sampling, verifier: the sampled chain at T = 0.7, and the mixed builder (a speculative chain first, then
# TEV trees below what it committed) at T = 1, both with the far draft and top-k 3.
CASES = {
    "sampled-t0.7": (BuilderConfig(name="sampled", depth=3), SamplingConfig(temperature=0.7, top_k=3), "speculative"),
    "mixed-t1": (BuilderConfig(name="mixed", budget=6, depth=3, children=3, width=3, auto=True),
                 SamplingConfig(temperature=1.0, top_k=3), "tev"),
}


def far_pair() -> ModelPair:
    """The stream test's one-layer target over 8 tokens with a draft far from it."""
    target = stream_pair().target
    return ModelPair(target, perturbed(target, 22, noise=FAR_NOISE), word_tokenizer(8), "stream", "far-draft")


@torch.inference_mode()
def root_tv(pair: ModelPair, sampling: SamplingConfig) -> float:
    ids = torch.tensor([PROMPT])
    p, q = (processed_probs(m(input_ids=ids).logits[0, -1], sampling) for m in (pair.target, pair.draft))
    return 0.5 * float((p - q).abs().sum())


def stream_counts(pair: ModelPair, builder: BuilderConfig, sampling: SamplingConfig, verifier: str,
                  sessions: int = STREAM_SESSIONS) -> tuple[dict[tuple[int, ...], int], list[tuple[str, ...]]]:
    """How often each first three committed tokens came out over seeded sessions, and each session's verifiers."""
    counts: dict[tuple[int, ...], int] = {}
    arms = []
    with torch.inference_mode():
        for seed in range(sessions):
            cfg = DecodeConfig(sampling=sampling, builder=builder, max_new_tokens=3, seed=seed, stop_on_eos=False,
                               missing_top=0, verifier=verifier)
            s = DecodeSession(pair, PROMPT, cfg)
            arms.append(tuple(r.verifier for r in s.run()))
            key = tuple(s.generated)
            counts[key] = counts.get(key, 0) + 1
    return counts, arms


def stream_p_value(pair: ModelPair, counts: dict[tuple[int, ...], int], sampling: SamplingConfig) -> float:
    """Chi-square p of the counts against plain autoregressive sampling of the target; 0 for an impossible stream."""
    law = first_three_law(pair.target, PROMPT, sampling)
    assert not [k for k in counts if k not in law], "a committed stream of probability 0"
    cells = sorted(law)
    _, df, p_value = chi_square_p([counts.get(c, 0) for c in cells], [law[c] for c in cells])
    assert df >= 10, f"test setup: {df} degrees of freedom"
    return p_value


@pytest.mark.parametrize("case", list(CASES))
def test_far_draft_streams_follow_autoregressive_sampling(case):
    """Over 2,000 seeded sessions the first three committed tokens follow plain autoregressive sampling."""
    builder, sampling, verifier = CASES[case]
    pair = far_pair()
    assert root_tv(pair, sampling) >= TV_FAR, "test setup: the draft must be far from the target"
    counts, arms = stream_counts(pair, builder, sampling, verifier)
    p_value = stream_p_value(pair, counts, sampling)
    assert p_value > P_MIN, f"{case}: chi-square p-value {p_value:.2e}"
    if builder.name == "mixed":  # test setup: the first round is a chain, and many sessions go on to a tree
        assert all(a[0] == "speculative" for a in arms)
        assert sum("tev" in a for a in arms) > STREAM_SESSIONS / 4
