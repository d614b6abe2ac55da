"""ExitTrain: train the drafter on its own inference-time trees with exit weights (docs/math.md, *ExitTrain*).

L = L_tok + lambda_exit * L_exit, where
L_exit = -[sum_i sum_{v != root} w_i(v) log q(x_v | c_i, path(pa(v)))] / sum_i (|V_i| - 1)
and q is evaluated under the real tree-parent context by one draft forward over the tree with the
ancestor mask. Trees are rebuilt with the current drafter as training goes; the target is frozen
and everything it gives (and the tree) is detached.

L_tok is the drafter's cross-entropy on the target's continuations: against the continuation
tokens themselves (hard labels, as the paper), or against the target's whole
next-token distribution (at `weight_temperature`) at each position ("soft"). For a continuation
sampled at that temperature the soft loss is the expected hard-label loss with far less noise; for
a greedy one it is distillation toward that law on greedy contexts. "stream" takes each context's
own collection temperature: hard labels on greedy continuations (the target's argmax, which the
hard loss already has exactly) and soft labels at T on continuations sampled at T > 0, so it has
the paper's hard-label loss as its expectation, with the sampling noise taken out (the default).
"""

from __future__ import annotations

import copy
import random
import time
from dataclasses import dataclass, field

import torch

from ..core import exit_law as law
from ..core.kv import new_cache
from ..core.sampling import SamplingConfig, processed_probs, to_width
from ..core.scoring import tree_logits
from ..core.tree import DraftTree
from ..draft.builders import BuilderConfig, build_tree
from ..draft.drafters import check_trainer
from ..errors import TevvizError
from ..load.models import ModelPair
from .schedule import lr_scale

OBJECTIVES = ("exit", "prefix", "token", "residual")
TOKEN_LABELS = ("soft", "hard", "stream")


@dataclass(frozen=True)
class TrainConfig:
    """ExitTrain settings: the paper's where it says (its hard-label loss, inference builder), else the model card's
    measurements."""

    objective: str = "exit"  # exit (w, the paper's), prefix (P rescaled), token (L_tok only), residual (ours)
    # L_exit averages w over all tree nodes, so it is ~1/B of an NLL: a weight ~B balances L_tok
    lambda_exit: float = 32.0
    lr: float = 1e-4
    steps: int = 100
    batch: int = 8  # contexts per step
    builder: BuilderConfig = field(default_factory=lambda: BuilderConfig(budget=64, depth=8))  # tevviz eval's
    weight_temperature: float = 1.0  # the target law that gives w and P (T = 0 would weight one node only)
    # L_tok against the continuation token ("hard", the paper's), the target's distribution at T = 1 ("soft"), or
    # each continuation's own law ("stream": hard on greedy, soft at T on sampled ones; the hard loss in expectation
    # without its sampling noise: +3.5% held-out tau at T = 0 over hard, +4.7 SE, MODEL_CARD.md); contexts whose
    # temperature is unknown (the app's) get hard labels. See the module docstring.
    token_labels: str = "stream"
    seed: int = 0
    # "cosine": warm up over the first `warmup` share of `steps`, then cosine down to 10% of lr; "constant"
    # for open-ended training (the app's Train step clicks).
    schedule: str = "constant"
    warmup: float = 0.05

    @classmethod
    def from_dict(cls, d: dict) -> TrainConfig:
        """The settings as `dataclasses.asdict` wrote them, checked as ever."""
        d = dict(d)
        builder = BuilderConfig.from_dict(d.pop("builder"))
        return cls(**d, builder=builder)

    def __post_init__(self):
        if self.objective not in OBJECTIVES:
            raise TevvizError(f"unknown objective {self.objective!r}; choose one of {', '.join(OBJECTIVES)}")
        if self.schedule not in ("constant", "cosine") or not 0 <= self.warmup < 1:
            raise TevvizError("schedule must be constant or cosine, with a warm-up share in [0, 1)")
        if self.token_labels not in TOKEN_LABELS:
            raise TevvizError(f"token_labels must be one of {', '.join(TOKEN_LABELS)}, not {self.token_labels!r}")
        if not self.lr > 0 or not self.lambda_exit >= 0:
            raise TevvizError("learning rate must be > 0 and lambda_exit >= 0")
        if not isinstance(self.steps, int) or self.steps < 0 or not isinstance(self.batch, int) or self.batch < 1:
            raise TevvizError("steps must be >= 0 and batch >= 1")
        self.builder.spec.check_trainable()


@dataclass(frozen=True)
class Context:
    """A training context: tokens up to and including the root, and the target's continuation after it."""

    tokens: list[int]
    continuation: list[int]
    temperature: float | None = None  # the continuation's sampling temperature, where known


def contexts_from_streams(streams: list[tuple[list[int], list[int]]], every: int = 4,
                          temperatures: list[float] | None = None) -> list[Context]:
    """Contexts at every `every`-th position of each (prompt, target continuation) stream.

    `temperatures` (one per stream) records what each continuation was sampled at, for "stream" labels.
    """
    if temperatures is not None and len(temperatures) != len(streams):
        raise TevvizError(f"{len(temperatures)} temperatures for {len(streams)} streams")
    out = []
    for i, (prompt, cont) in enumerate(streams):
        t = None if temperatures is None else temperatures[i]
        for j in range(0, len(cont), every):
            out.append(Context(prompt + cont[:j], cont[j:], t))
    return out


def mixed_temperatures(n: int, temperatures: list[float]) -> list[float]:
    """The temperature of each of `n` streams collected by `collect_mixed_streams` (taken in turn)."""
    return [temperatures[i % len(temperatures)] for i in range(n)]


@torch.no_grad()
def build_training_tree(draft, context: list[int], builder: BuilderConfig, max_depth: int | None = None) -> DraftTree:
    """The tree the current drafter builds at inference for `context` (a fresh draft cache).

    `max_depth` trims the tree near the end of the models' positions, as decoding does.
    """
    return build_tree(draft, new_cache(draft), context, builder, max_depth).tree


@torch.no_grad()
def target_weights(target, context: list[int], tree: DraftTree, temperature: float) -> tuple[law.ExitLaw, torch.Tensor]:
    """Detached exit law of `tree` under the frozen target, and the target's processed rows (N, V)."""
    probs = processed_probs(tree_logits(target, context[:-1], tree), SamplingConfig(temperature=temperature))
    return law.exit_law(tree, probs), probs


def node_weights(objective: str, ex: law.ExitLaw) -> torch.Tensor:
    """Per-node weights of the incoming-token likelihood (root weight 0)."""
    if objective in ("exit", "residual"):
        wt = ex.w.clone()
    elif objective == "prefix":
        # P rescaled to the same total non-root weight as w (paper Table 2 ablation).
        total_w = ex.w[1:].sum()
        wt = ex.P * (total_w / ex.P[1:].sum().clamp(min=1e-12))
    else:
        wt = torch.zeros_like(ex.w)
    wt[0] = 0.0
    return wt


def exit_loss_terms(draft, context: list[int], tree: DraftTree, ex: law.ExitLaw, probs: torch.Tensor,
                    objective: str) -> torch.Tensor:
    """Sum over non-root nodes of the weighted negative log-likelihood for one tree (not yet normalised)."""
    logq = torch.log_softmax(tree_logits(draft, context[:-1], tree).float(), dim=-1)  # (N, V), with grad
    if objective == "residual":
        # Our extension: pull q(. | c, path(v)) toward the missing mass p_v_res, weighted by w(v).
        taken = torch.zeros_like(probs, dtype=torch.bool)
        taken[tree.parents[1:], tree.tokens[1:]] = True
        res = probs.masked_fill(taken, 0.0)
        res = to_width(res, logq.shape[-1])  # renormalised rows: the missing mass over rho(v), i.e. p_v_res
        return -(ex.w * (res * logq).sum(-1)).sum()
    wt = node_weights(objective, ex)
    incoming = logq[tree.parents[1:], tree.tokens[1:]]  # log q(x_v | c, path(pa(v))) for v != root
    return -(wt[1:] * incoming).sum()


def token_loss(draft, ctx: Context, target=None, temperature: float = 1.0) -> torch.Tensor:
    """Dense next-token cross-entropy of the drafter on the target's continuation of `ctx`.

    With `target`, the labels are the target's processed distributions at those positions (soft labels).
    """
    ids = torch.tensor([ctx.tokens + ctx.continuation], device=draft.device)
    logits = draft(input_ids=ids).logits[0, len(ctx.tokens) - 1 : -1].float()
    if target is None:
        return torch.nn.functional.cross_entropy(logits, ids[0, len(ctx.tokens):])
    with torch.no_grad():
        tl = target(input_ids=ids.to(target.device)).logits[0, len(ctx.tokens) - 1 : -1]
        p = to_width(processed_probs(tl, SamplingConfig(temperature=temperature)).to(logits.device), logits.shape[-1])
    return -(p * torch.log_softmax(logits, -1)).sum(-1).mean()


@dataclass
class StepLog:
    step: int
    loss: float
    l_tok: float
    l_exit: float
    C_p: float  # mean C_p of the trees of this step, built before the update
    seconds: float


class DraftTrainer:
    """What every ExitTrain trainer holds: a private trainable copy of the pair's drafter (the pair's own is never
    touched), its optimiser and schedule, the training contexts and the log of steps."""

    def __init__(self, pair: ModelPair, contexts: list[Context], cfg: TrainConfig, draft=None):
        self.pair, self.cfg, self.target = pair, cfg, pair.target
        self.set_contexts(contexts)
        self.draft = copy.deepcopy(pair.draft) if draft is None else draft
        self.draft.requires_grad_(True).train()
        self.opt = torch.optim.AdamW(self.draft.parameters(), lr=cfg.lr, weight_decay=0.0)
        self.rng = random.Random(cfg.seed)
        self.log: list[StepLog] = []

    def set_contexts(self, contexts: list[Context]) -> None:
        """Train on these contexts from the next step on (an app session grows as it decodes)."""
        if not contexts:
            raise TevvizError("no training contexts")
        self.contexts = contexts

    def update(self, l_tok: torch.Tensor, l_exit: torch.Tensor, cps: list[float], t0: float) -> StepLog:
        """One optimiser step on L = L_tok + lambda L_exit at the schedule's lr; the step's log entry."""
        loss = l_tok + self.cfg.lambda_exit * l_exit
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.draft.parameters(), 1.0)
        for group in self.opt.param_groups:
            group["lr"] = self.cfg.lr * self.lr_factor(len(self.log))
        self.opt.step()
        entry = StepLog(len(self.log) + 1, loss.item(), float(l_tok.detach()), float(l_exit.detach()),
                        sum(cps) / len(cps) if cps else float("nan"), time.perf_counter() - t0)
        self.log.append(entry)
        return entry

    def lr_factor(self, step: int) -> float:
        """The schedule's multiplier of lr at `step` (from 0)."""
        return self.lr_factor_of(self.cfg, step)

    @staticmethod
    def lr_factor_of(cfg: TrainConfig, step: int) -> float:
        """`cfg`'s schedule multiplier of lr at `step` (from 0)."""
        if cfg.schedule == "constant" or cfg.steps == 0:
            return 1.0
        return lr_scale(step + 1, cfg.steps, max(int(cfg.warmup * cfg.steps), 1), 0.1)

    def trained_draft(self):
        """The trained drafter, in eval mode and frozen (the trainer keeps its own copy)."""
        return copy.deepcopy(self.draft).eval().requires_grad_(False)


class ExitTrainer(DraftTrainer):
    """Online ExitTrain of a private copy of an autoregressive drafter on its own level-by-level trees."""

    def __init__(self, pair: ModelPair, contexts: list[Context], cfg: TrainConfig, draft=None):
        if not contexts:
            raise TevvizError("no training contexts")
        check_trainer(self, pair, cfg.builder.name)
        super().__init__(pair, contexts, cfg, draft)

    def step(self) -> StepLog:
        """One optimiser step on a batch of contexts, with trees rebuilt by the current drafter."""
        t0 = time.perf_counter()
        cfg = self.cfg
        batch = [self.contexts[self.rng.randrange(len(self.contexts))] for _ in range(cfg.batch)]
        l_tok = sum(token_loss(self.draft, c, *self.label_law(c)) for c in batch if c.continuation) / len(batch)
        l_exit = torch.zeros((), device=self.draft.device)
        cps = []
        if cfg.objective != "token" and cfg.lambda_exit > 0:
            self.draft.eval()  # trees are built as at inference
            room = self.pair.context_length
            built = [(c, build_training_tree(self.draft, c.tokens, cfg.builder, room - len(c.tokens))) for c in batch]
            self.draft.train()
            terms, n_nodes = [], 0
            for c, tree in built:
                tree = tree.to(self.target.device)
                ex, probs = target_weights(self.target, c.tokens, tree, cfg.weight_temperature)
                cps.append(float(ex.C_p))
                terms.append(exit_loss_terms(self.draft, c.tokens, tree, ex, probs, cfg.objective))
                n_nodes += tree.size - 1
            l_exit = torch.stack(terms).sum() / max(n_nodes, 1)
        return self.update(l_tok, l_exit, cps, t0)

    def label_law(self, ctx: Context) -> tuple:
        """(target, temperature) for soft L_tok labels on `ctx`, or (None, 0) for hard labels."""
        cfg = self.cfg
        if cfg.token_labels == "soft":
            return self.target, cfg.weight_temperature
        if cfg.token_labels == "stream" and ctx.temperature:
            return self.target, ctx.temperature
        return None, 0.0
