"""Draft-tree builders of level-by-level drafters (docs/math.md, *Draft trees*): best-first, static, chain and
sampled, drafted level by level, and the mixed builder over two of them. `BuilderConfig` is every builder's settings.

Each depth costs one batched draft step over the frontier under tree attention, supplied by the drafter (`LevelStep`;
a causal LM's is `ModelStep`, one forward on its own KV cache). The tree is deterministic given the draft model and
the context, except for `sampled`: a chain whose tokens are drawn from the draft's own processed law (the decoding's
temperature, top-k and top-p), for the speculative verifier (docs/math.md, *Sampled chains*).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

from ..core.kv import additive_mask, causal_visibility
from ..core.sampling import SamplingConfig
from ..core.tree import DraftTree
from ..cost.auto_budget import Plan
from ..errors import TevvizError
from ..records.io import current_builder
from .builder_kinds import BuilderKind, builder_kind, builder_names, register
from .draft_result import DraftResult, LevelStep
from .sampled_chain import sampled_chain

MAX_BUDGET = 1024
MAX_DEPTH = 64
MAX_CHILDREN = 64  # K, and a static level's branching
MAX_WIDTH = 256
MIN_DRAFT_T, MAX_DRAFT_T = 0.05, 20.0

_SAMPLED_NOT_TRAINED = ("its chains are drawn at random each round, and ExitTrain's weights are for fixed trees "
                        "built as at inference; train on best-first, static or chain trees")
# The kinds the level-by-level builders were written for; another kind that supplies a LevelStep names them itself.
LEVEL = frozenset({"autoregressive"})
FRONTIER = frozenset({"children", "width"})  # the settings of a builder that expands a frontier level by level
WIDE = 1 << 62  # no limit


def _chain_level(cfg, d: int) -> tuple[int, int]:
    return 1, 1


def _static_level(cfg, d: int) -> tuple[int, int]:
    return cfg.branching[d - 1], WIDE


def _arms_only(cfg, d: int) -> tuple[int, int]:
    raise TevvizError("a mixed builder drafts through its arms (arm()), not by itself")


CHAIN = {"level": _chain_level, "keep": lambda cfg: cfg.depth}  # a chain keeps every node it draws
for _kind in (
    # speculative on a deterministic tree falls back to the residual verifier (exact), so every verifier is taken
    BuilderKind("best-first", LEVEL, "the B best nodes by draft path score, level by level (default)",
                verifiers=None, auto=True, settings=FRONTIER),
    BuilderKind("static", LEVEL, "a fixed branching per depth", verifiers=None, settings=frozenset({"branching"}),
                level=_static_level, keep=lambda cfg: WIDE, max_depth=lambda cfg: len(cfg.branching)),
    BuilderKind("chain", LEVEL, "the draft's greedy path (plain speculative decoding)", verifiers=None, **CHAIN),
    BuilderKind("sampled", LEVEL, "a chain drawn from the draft's law, for speculative sampling",
                verifiers=None, auto=True, trainable=False, why_not_trained=_SAMPLED_NOT_TRAINED, chain=True,
                settings=frozenset({"stop_below"}), **CHAIN),
    BuilderKind("mixed", LEVEL, "each round a best-first tree or a sampled chain, whichever the session "
                "measures faster (auto-sized only)", verifiers=None, auto=True, trainable=False, auto_only=True,
                why_not_trained="its rounds are best-first trees or sampled chains chosen by measured speed; "
                                "train on best-first trees", settings=FRONTIER, level=_arms_only),
):
    register(_kind)


def __getattr__(name: str):
    if name == "BUILDERS":  # every registered builder kind (a module attribute, read when asked)
        return builder_names()
    raise AttributeError(name)


@dataclass(frozen=True)
class BuilderConfig:
    """Which builder and its settings; fields that a builder does not use are ignored.

    `name` is the builder's name (as users give it and the JSON keeps it); `spec` is the registered builder kind it
    names, resolved once at construction."""

    name: str = "best-first"
    budget: int = 32  # B: non-root nodes kept (best-first)
    depth: int = 6  # H: maximum depth (best-first, chain)
    # K: children per expanded node (best-first). 8, not DDTree's usual 4: a weak drafter's first miss is
    # mostly at the root, and K only widens the candidates the B kept nodes are chosen from (the draft's
    # forwards stay W wide). Measured: docs/experiments/2026-11-30-children-per-node-and-draft-temperature.md.
    children: int = 8
    width: int = 8  # W: frontier width per depth (best-first)
    branching: tuple[int, ...] = field(default=(4, 2, 2, 1, 1))  # children per node at each depth (static)
    auto: bool = False  # best-first, sampled, mixed: budget and depth become limits, each round sized by auto_budget.py
    # Path scores come from the draft's logits divided by this: above 1 a sharp (overconfident) draft ranks deep
    # paths lower, so trees grow wider; which tokens a node's children are does not change. Node q stays q.
    # Auto-sized trees rank nodes by their learnt acceptance table instead, which this does not touch.
    draft_temperature: float = 1.0
    # The sampled builder's stop (0: none): a chain ends after the first token drawn where the draft's top
    # probability is below this, its depth H the limit (HF assisted generation's confidence threshold). Exact at any
    # temperature: whether to draw on depends on the tokens drawn so far only, and every drawn token is kept.
    stop_below: float = 0.0

    @classmethod
    def from_dict(cls, d: dict) -> BuilderConfig:
        """The settings as a file keeps them (asdict's JSON, an older file's `kind` for `name`), checked as ever;
        a field the file predates takes its default."""
        d = dict(current_builder(d))
        if isinstance(d.get("branching"), list):
            d["branching"] = tuple(d["branching"])
        return cls(**d)

    def __post_init__(self):
        kind = builder_kind(self.name)  # a clear error for an unknown name
        # Not a field: equality, repr, replace() and the JSON keep the name alone (replace() resolves it again).
        object.__setattr__(self, "_spec", kind)
        if self.auto and not kind.auto:
            sized = ", ".join(k for k in builder_names() if builder_kind(k).auto)
            raise TevvizError(f"an automatic budget sizes {sized} rounds only, not {self.name} trees")
        if kind.auto_only and not self.auto:
            raise TevvizError(f"the {self.name} builder sizes every round itself: use it with an automatic budget "
                              "(--budget auto, or the app's auto box; budget and depth are then its limits)")
        checks = [("budget", self.budget, MAX_BUDGET), ("depth", self.depth, MAX_DEPTH)]
        if kind.reads("children"):
            checks += [("children K", self.children, MAX_CHILDREN), ("width", self.width, MAX_WIDTH)]
        for name, value, top in checks:
            if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= top:
                raise TevvizError(f"{name} must be an integer in [1, {top}], got {value!r}")
        t = self.draft_temperature
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not MIN_DRAFT_T <= t <= MAX_DRAFT_T:
            raise TevvizError(f"draft temperature must be a number in [{MIN_DRAFT_T}, {MAX_DRAFT_T}], got {t!r}")
        if kind.chain and t != 1:
            raise TevvizError("a draft temperature ranks best-first trees' paths; a sampled chain draws from the "
                              "decoding's own sampling law (the speculative verifier's q), so leave it at 1")
        c = self.stop_below
        if isinstance(c, bool) or not isinstance(c, (int, float)) or not 0 <= c < 1:
            raise TevvizError(f"stop below must be a probability in [0, 1) (0: no stop), got {c!r}")
        if c and (not kind.reads("stop_below") or self.auto):
            raise TevvizError("stop below ends sampled chains of a fixed depth: use the sampled builder with the "
                              "automatic budget off (H is then the chain's longest), or set the stop to 0")
        if kind.reads("branching"):
            b = self.branching
            if not b or len(b) > MAX_DEPTH or any(not isinstance(x, int) or x < 1 or x > MAX_CHILDREN for x in b):
                raise TevvizError(f"static branching must be 1 to {MAX_DEPTH} integers in [1, {MAX_CHILDREN}], "
                                  f"got {b!r}")
            total, level = 0, 1
            for x in b:
                level *= x
                total += level
            if total > MAX_BUDGET * 4:
                raise TevvizError(f"static branching {b} makes {total} nodes; keep it under {MAX_BUDGET * 4}")

    @property
    def spec(self) -> BuilderKind:
        """The registered builder kind that `name` names, resolved at construction."""
        return self._spec

    @property
    def max_depth(self) -> int:
        """The deepest level this builder drafts."""
        return self.spec.max_depth(self)

    def level(self, d: int) -> tuple[int, int]:
        """(children per expanded node, frontier width) at depth d >= 1."""
        return self.spec.level(self, d)

    @property
    def keep(self) -> int:
        """Non-root nodes kept at the end."""
        return self.spec.keep(self)

    def arm(self, name: str) -> BuilderConfig:
        """A mixed builder's round as builder `name` (best-first or sampled), with the same limits and shape (a draft
        temperature ranks the best-first arm's paths only)."""
        return replace(self, name=name, draft_temperature=self.draft_temperature if name != "sampled" else 1.0)


class ModelStep:
    """A causal LM's level step: one forward on its own KV cache."""

    def __init__(self, model, cache):
        self.model, self.cache, self.device = model, cache, model.device

    def length(self) -> int:
        return self.cache.get_seq_length()

    def __call__(self, tokens, positions, visible, sources=None) -> torch.Tensor:
        model = self.model
        out = model(input_ids=tokens.unsqueeze(0), attention_mask=additive_mask(visible, model.dtype),
                    position_ids=positions.unsqueeze(0), cache=self.cache, use_cache=True)
        return out.logits[0]  # (q, V)


@torch.no_grad()
def build_tree(model, cache, pending: list[int], cfg: BuilderConfig, max_depth: int | None = None,
               plan: Plan | None = None, sampling: SamplingConfig | None = None,
               gen: torch.Generator | None = None, width: int | None = None) -> DraftResult:
    """`draft_levels` with a causal LM `model` on its KV `cache`."""
    return draft_levels(ModelStep(model, cache), pending, cfg, max_depth, plan, sampling, gen, width)


def draft_levels(step: LevelStep, pending: list[int], cfg: BuilderConfig, max_depth: int | None = None,
                 plan: Plan | None = None, sampling: SamplingConfig | None = None,
                 gen: torch.Generator | None = None, width: int | None = None) -> DraftResult:
    """Draft a tree below the last pending token (the root) through the drafter's `step`; `pending` are committed
    tokens not yet in its state.

    `max_depth` caps the depth for this round (context length); the drafter's state grows by the forwarded nodes.
    With a `plan` (auto budget), nodes are ranked by their predicted reach (the plan's acceptance table)
    instead of the draft's path score; drafting stops at the first level that does not raise the expected
    tokens per ms, and the tree keeps the top-k nodes by reach with the best rate.
    The `sampled` builder draws its chain with `sampling` (the decoding's settings) and `gen` (on the draft's device),
    among the first `width` ids (the target's output width, when the output layers are padded differently).
    """
    device = step.device
    past = step.length()
    ids = torch.tensor(pending, dtype=torch.long, device=device)
    logits = step(ids, torch.arange(past, past + len(pending), device=device),
                  causal_visibility(len(pending), past, device), None)[-1:]  # (1, V): the root's row
    base = past + len(pending)
    root_pos = base - 1
    H = cfg.max_depth if max_depth is None else min(cfg.max_depth, max_depth)
    if cfg.spec.chain:  # drawn from the draft's law, not expanded
        if sampling is None or gen is None:
            raise TevvizError("a sampled chain needs the sampling settings and a generator")
        return sampled_chain(step, ids[-1:], logits, base, H, plan, sampling, gen, width, len(pending) - 1,
                             cfg.stop_below)
    # A kept tree of B nodes is at most B deep (scores fall along paths, ties keep ancestors first),
    # so levels below that would be drafted for nothing.
    H = min(H, cfg.keep)
    if plan is not None:
        plan = plan.to(device)
    grown = _Growth(ids[-1:], len(pending) - 1)
    levels, best_rate = 1, 0.0
    for d in range(1, H + 1):
        k, frontier_width = cfg.level(d)
        k = min(k, logits.shape[-1])
        grown.add_level(logits, d, k, cfg.draft_temperature, plan)
        if plan is not None and plan.forced_budget is None:
            _, rate = plan.best(torch.cat(grown.reach[1:]), levels)
            if rate <= best_rate:
                break  # this level did not pay for itself: the next one would pay less
            best_rate = rate
        if d == H:
            break
        logits = grown.expand(step, k, frontier_width, base, root_pos + d)
        levels += 1
    return grown.result(cfg.keep, plan, levels, base)


class _Growth:
    """A best-first tree as it grows, one level at a time: every drafted node's tensors, level by level (node ids
    run in creation order across levels), and the frontier being expanded with its visibility rows."""

    def __init__(self, root: torch.Tensor, root_row: int):
        device = self.device = root.device
        self.root_row = root_row  # the root's row in the step's first output (the pending tokens' last)
        self.tokens = [root]
        self.parents = [torch.full((1,), -1, dtype=torch.long, device=device)]
        self.depths = [torch.zeros(1, dtype=torch.long, device=device)]
        self.logq = [torch.zeros(1, device=device)]
        self.scores = [torch.zeros(1, device=device)]
        self.slots = [torch.full((1,), -1, dtype=torch.long, device=device)]  # cache slot of each forwarded node
        self.ranks = [torch.zeros(1, dtype=torch.long, device=device)]
        # Log predicted reach: what the frontier and the kept nodes are chosen by. Without a plan it is the path score.
        self.reach = [self.scores[0]]
        self.n = 1  # nodes so far
        self.frontier = torch.zeros(1, dtype=torch.long, device=device)  # node ids being expanded
        self.frontier_scores, self.frontier_reach = self.scores[0], self.reach[0]
        self.vis = torch.zeros(1, 0, dtype=torch.bool, device=device)  # frontier rows over the slots forwarded so far
        self.n_slots = 0

    def add_level(self, logits: torch.Tensor, d: int, k: int, draft_temperature: float, plan: Plan | None) -> None:
        """Depth d: the k most likely children of every frontier node under the draft's rows `logits` (F, V)."""
        device = self.device
        top = torch.topk(torch.log_softmax(logits.float(), dim=-1), k, dim=-1)  # (F, k)
        step = top.values
        if draft_temperature != 1:
            step = torch.log_softmax(logits.float() / draft_temperature, dim=-1).gather(-1, top.indices)
        f = self.frontier.shape[0]
        new_scores = (self.frontier_scores.unsqueeze(1) + step).reshape(-1)
        rank = torch.arange(k, device=device).repeat(f)
        new_reach = (self.frontier_reach.repeat_interleave(k) + plan.edge_values(top.values.reshape(-1), rank)
                     if plan is not None else new_scores)
        self.tokens.append(top.indices.reshape(-1))
        self.parents.append(self.frontier.repeat_interleave(k))
        self.depths.append(torch.full((f * k,), d, dtype=torch.long, device=device))
        self.logq.append(top.values.reshape(-1))
        self.scores.append(new_scores)
        self.slots.append(torch.full((f * k,), -1, dtype=torch.long, device=device))
        self.ranks.append(rank)
        self.reach.append(new_reach)

    def expand(self, step: LevelStep, k: int, width: int, base: int, position: int) -> torch.Tensor:
        """Forward the next frontier, the `width` best nodes of the last level, through the draft; its rows (m, V).

        The `width` best by path score (by reach, auto), in creation order, ties broken as the kept set breaks them,
        so that a tied node is not expanded and then dropped for its twin."""
        device = self.device
        level = self.tokens[-1].shape[0]  # f * k
        chosen = torch.arange(level, device=device)
        if level > width:
            chosen = _top(self.reach[-1], width)
        m = chosen.shape[0]
        rows = torch.cat([self.vis[chosen // k], torch.zeros(m, m, dtype=torch.bool, device=device)], dim=1)
        rows[:, self.n_slots:] = torch.eye(m, dtype=torch.bool, device=device)
        visible = torch.cat([torch.ones(m, base, dtype=torch.bool, device=device), rows], dim=1)
        self.slots[-1][chosen] = torch.arange(self.n_slots, self.n_slots + m, device=device)
        sources = chosen // k + self.root_row  # the frontier row each chosen node was drafted from
        logits = step(self.tokens[-1][chosen], torch.full((m,), position, device=device), visible, sources)
        self.root_row = 0
        self.frontier, self.vis = chosen + self.n, rows
        self.frontier_scores, self.frontier_reach = self.scores[-1][chosen], self.reach[-1][chosen]
        self.n += level
        self.n_slots += m
        return logits

    def result(self, keep: int, plan: Plan | None, levels: int, base: int) -> DraftResult:
        """The tree, cut to its `keep` best nodes by reach (fewer where the plan's best rate says so)."""
        tree = DraftTree(*(torch.cat(x) for x in (self.tokens, self.parents, self.depths, self.logq, self.scores)))
        slot, rank, log_reach = torch.cat(self.slots), torch.cat(self.ranks), torch.cat(self.reach)
        if plan is not None:
            keep = min(keep, plan.best(log_reach[1:], levels)[0])
        if tree.size - 1 > keep:
            tree, kept = _keep_best(tree, log_reach, keep)
            slot, rank, log_reach = slot[kept], rank[kept], log_reach[kept]
        return DraftResult(tree, slot, base, levels, rank, log_reach)


def _top(key: torch.Tensor, n: int) -> torch.Tensor:
    """Ids of the `n` largest entries of `key`, ties to the earlier id (topk leaves ties unordered), in id order."""
    return torch.sort(key, descending=True, stable=True).indices[:n].sort().values


def _keep_best(tree: DraftTree, key: torch.Tensor, budget: int) -> tuple[DraftTree, torch.Tensor]:
    """The subtree of the `budget` best non-root nodes by `key` (ties: earlier, hence shallower, first), and their ids.

    Path scores and log reach never increase along a path, so the kept set is closed under ancestors.
    """
    kept = torch.cat([torch.zeros(1, dtype=torch.long, device=tree.device), _top(key[1:], budget) + 1])
    new_id = torch.full((tree.size,), -1, dtype=torch.long, device=tree.device)
    new_id[kept] = torch.arange(kept.shape[0], device=tree.device)
    old_parent = tree.parents[kept]
    parents = torch.where(old_parent >= 0, new_id[old_parent.clamp(min=0)], old_parent)
    sub = DraftTree(tree.tokens[kept], parents, tree.depths[kept], tree.draft_logprobs[kept], tree.scores[kept],
                    None if tree.draft_probs is None else tree.draft_probs[kept])
    return sub, kept
