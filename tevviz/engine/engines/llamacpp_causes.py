"""Why the two engines part, from what tevviz can compute: the target's (or the drafter's) two most likely tokens
where the runs part. A near tie there is within what two float32 implementations order differently; a clear winner
that one engine did not take means the engines do not compute the same model."""

from __future__ import annotations

import torch

from .llamacpp_compare import Part, PromptRun

NEAR_TIE = 0.02  # probability gap under which float rounding can swap the two most likely tokens


@torch.inference_mode()
def top_two(model, ids: list[int]) -> list[tuple[int, float]]:
    """The model's two most likely next tokens after `ids` and their probabilities (one forward, float32 softmax)."""
    logits = model(torch.tensor([ids], device=model.device)).logits[0, -1].float()
    p, t = torch.softmax(logits, -1).topk(2)
    return list(zip(t.tolist(), p.tolist()))


def _tie(tops: list[tuple[int, float]], text) -> tuple[str, bool]:
    (a, pa), (b, pb) = tops
    return f"{text(a)!r} {pa:.4f} and {text(b)!r} {pb:.4f}", pa - pb < NEAR_TIE


def part_cause(pair, prompt_ids: list[int], llama: PromptRun, tev: PromptRun, part: Part) -> str:
    """One sentence on the part of one prompt: where, what each engine did, and the likely cause."""
    def text(t: int) -> str:
        return pair.tokenizer.decode([t])

    where = f"prompt {part.prompt}, round {part.round}"
    if part.end_token:
        return (f"{where}: the same tokens, ending in the end token {text(part.blocks[1][-1])!r}, which tevviz "
                f"counts as an accepted draft token ({part.accepted[1]} accepted) and llama.cpp as the target's own "
                f"({part.accepted[0]}): llama.cpp accepts a drafted end-of-generation token only as the draft's last "
                "(common/sampling.cpp, common_sampler_sample_and_accept_n)")
    if part.what == "tokens":
        q = part.token_part if part.token_part is not None else part.position
        if q >= min(len(llama.tokens), len(tev.tokens)):
            return (f"{where}: one engine stopped at token {q} and the other went on "
                    "(their end tokens differ: llama.cpp ends at every end-of-generation token its vocabulary marks)")
        both, tie = _tie(top_two(pair.target, prompt_ids + list(tev.tokens[:q])), text)
        why = ("a near tie, which two float32 implementations can order differently (precision)" if tie else
               "not a near tie: the engines do not compute the same target (weights, conversion or prompt)")
        return (f"{where}: at generated token {q} llama.cpp wrote {text(llama.tokens[q])!r}, tevviz "
                f"{text(tev.tokens[q])!r}; the target's two most likely tokens there (tevviz, float32) are {both}: "
                f"{why}")
    acc = [a for a in part.accepted if a is not None]
    j = min(acc) + 1 if acc else 1
    said = (f"{where}: the same tokens, but llama.cpp accepted {part.accepted[0]} drafted tokens and tevviz "
            f"{part.accepted[1]}")
    tops = draft_top_two(pair, prompt_ids + list(tev.tokens[: part.position]), tev.tokens[part.position:], j)
    if tops is None:
        return said + f" (the drafts part at position {j} of the chain)"
    both, tie = _tie(tops, text)
    why = ("a near tie, which float32 rounding can swap (precision)" if tie else
           "not a near tie: the engines do not draft with the same drafter (weights, conversion or layer reading)")
    return f"{said}; at draft position {j} the drafter's two most likely tokens are {both}: {why}"


def draft_top_two(pair, context: list[int], path: tuple[int, ...], j: int) -> list[tuple[int, float]] | None:
    """The drafter's two most likely tokens at chain position `j` of a round drafted after `context`, below the
    chain's first j - 1 tokens `path[:j - 1]`: read off a best-first tree of two children a node grown from the same
    context, whatever the drafter's kind (an EAGLE-3 head drafts deeper levels from its own states, not the target's).
    None where that tree does not hold the chain's node."""
    import math

    from ..core.sampling import SamplingConfig
    from ..decode.session import DecodeConfig, DecodeSession
    from ..draft.builders import BuilderConfig

    tree = BuilderConfig(name="best-first", budget=min(2 ** (j + 1) - 2, 64), depth=j, children=2, width=2 ** j)
    cfg = DecodeConfig(sampling=SamplingConfig(temperature=0.0), builder=tree, max_new_tokens=j + 1, missing_top=0)
    record = DecodeSession(pair, context, cfg).step()
    node = 0
    for token in path[: j - 1]:
        node = next((v for v, (t, p) in enumerate(zip(record.tokens, record.parents)) if p == node and t == token), -1)
        if node < 0:
            return None
    kids = sorted(((math.exp(q), t) for t, p, q in zip(record.tokens, record.parents, record.draft_logprobs)
                   if p == node), reverse=True)
    return [(t, q) for q, t in kids[:2]] if len(kids) >= 2 else None
