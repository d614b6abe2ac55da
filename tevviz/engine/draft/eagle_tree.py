"""EAGLE's dynamic tree (EAGLE-2/3, `--builder eagle`; docs/eagle3.md): the top-k children of the root; at each
level one draft forward over the k frontier nodes, their k x k children scored by cumulative log q, the global top-k
kept as the next frontier; finally the `total_tokens - 1` best candidates over all levels.

That is the best-first builder with its frontier as wide as its children per node (W = K), so any drafter that
drafts level by level (`draft_result.LevelStep`: an EAGLE-3 head, a causal LM) builds it through
`builders.draft_levels`; the kept set is closed under ancestors because path scores do not increase along a path
(ties: shallower first).
EAGLE's `depth` counts the draft forwards after the root's, so its trees reach depth + 1: tevviz's H.
"""

from __future__ import annotations

from .builder_kinds import BuilderKind, register
from .builders import BuilderConfig

TOTAL_TOKENS, DEPTH, TOP_K = 60, 7, 10  # EAGLE's defaults: the root and 59 nodes, 7 forwards after the root's, top-10

register(BuilderKind(
    "eagle", frozenset({"eagle3", "autoregressive"}),
    "EAGLE's dynamic tree: the top-K children of the K best nodes of each level, the B best nodes overall "
    f"(EAGLE's defaults: B {TOTAL_TOKENS - 1}, H {DEPTH + 1}, K {TOP_K})",
    verifiers=None,  # a deterministic tree: speculative falls back to the residual verifier, as on best-first trees
    auto=False, budget=TOTAL_TOKENS - 1, settings=frozenset({"children", "width"}),
    level=lambda cfg, d: (cfg.children, cfg.children)))  # K wide: the K best nodes of each level expand


def eagle_builder(total_tokens: int = TOTAL_TOKENS, depth: int = DEPTH, top_k: int = TOP_K,
                  **settings) -> BuilderConfig:
    """The `eagle` builder with EAGLE's own parameters: `total_tokens` counts the root, `depth` the draft forwards
    after the root's (the tree reaches depth + 1), `top_k` the children per node and the frontier's width."""
    return BuilderConfig(name="eagle", budget=total_tokens - 1, depth=depth + 1, children=top_k, width=top_k,
                         **settings)


DEFAULTS = {"budget": TOTAL_TOKENS - 1, "depth": DEPTH + 1, "children": TOP_K, "width": TOP_K}  # in tevviz's terms
