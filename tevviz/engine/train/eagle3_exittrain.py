"""ExitTrain for EAGLE-3 heads (docs/eagle3.md, *ExitTrain*), through the trainer seam the other kinds use.

Each step the current head builds every context's tree exactly as at inference (`drafters.tree_for`: its own builder,
eagle or any level-by-level one); the frozen target scores every node under the tree mask (P, rho, w); each non-root
node v takes its loss from the law it was drafted from, the row of its parent computed as drafting computes it (the
committed pairs through fc for the root, the head's own fed-back state below it: eagle3_rows.py):

    L = L_tok + lambda * sum_v weight(v) (-log q_{pa(v)}(x_v)) / (number of non-root nodes)

with weight w(v) (the paper's), P(v) rescaled to w's total (`prefix`) or none (`token`); `residual` (ours) pulls the
law below each node toward its residual law, weighted by w(v). L_tok is the head's own training loss: training-time
test over the target-written continuation (the recipe's three steps, decayed by 0.8 a step), hard labels, as the block
trainer takes its recipe's loss. Only the head's own weights train: the embedding (the target's, or a copy the head
carries) stays frozen, and the draft vocabulary (d2t, t2d) is a buffer.
"""

from __future__ import annotations

import copy
import time
from dataclasses import replace

import torch

from ..core import exit_law as law
from ..core.tree import DraftTree
from ..draft.drafters import check_trainer, tree_for
from ..draft.eagle3_model import Eagle3Head
from ..load.models import ModelPair
from .block_exittrain import target_features
from .eagle3_rows import draft_index, tree_rows, unrolled_loss
from .exittrain import Context, DraftTrainer, StepLog, TrainConfig, node_weights, target_weights

TTT_STEPS, TTT_DECAY = 3, 0.8  # the EAGLE-3 recipe's defaults (tevviz/recipes/eagle3.py --ttt, --decay)


def own_copy(model: Eagle3Head) -> Eagle3Head:
    """A deep copy of the head that shares the target's embedding it reads (kept out of its state) instead of
    copying the target's table."""
    return copy.deepcopy(model, {id(m): m for m in model._target_embedding})


def trainable(model: Eagle3Head) -> list[torch.nn.Parameter]:
    """The head's own weights ExitTrain moves: all but an embedding it carries (frozen, as the recipe keeps it)."""
    frozen = set() if model.embed_tokens is None else {id(p) for p in model.embed_tokens.parameters()}
    return [p for p in model.parameters() if id(p) not in frozen]


def exit_terms(logq: torch.Tensor, tree: DraftTree, ex: law.ExitLaw, probs: torch.Tensor, objective: str,
               index: torch.Tensor) -> torch.Tensor:
    """-sum over non-root nodes v of weight(v) log q_{pa(v)}(x_v), each node from its parent's row of `logq` (N, Vd),
    the law of its own level (a token outside the draft vocabulary, q = 0, adds nothing); for `residual`,
    -sum_v w(v) sum_a p_v_res(a) log q_v(a) over the draft vocabulary. Not yet normalised."""
    device = logq.device
    parents, tokens = tree.parents[1:].to(device), tree.tokens[1:].to(device)
    if objective == "residual":
        taken = torch.zeros_like(probs, dtype=torch.bool)
        taken[tree.parents[1:], tree.tokens[1:]] = True
        res = probs.masked_fill(taken, 0.0) / ex.rho.clamp(min=1e-12).unsqueeze(-1)  # p_res (w = 0 where rho = 0)
        res = res[:, torch.nonzero(index >= 0).flatten()].to(device)
        return -(ex.w.to(device) * (res * logq).sum(-1)).sum()
    weight = node_weights(objective, ex)[1:].to(device)
    drafted = index[tokens]
    terms = logq[parents, drafted.clamp(min=0)]
    return -(weight * terms).masked_fill(drafted < 0, 0.0).sum()


class Eagle3ExitTrainer(DraftTrainer):
    """Online ExitTrain of a private copy of a pair's EAGLE-3 head on its own trees (the interface of `ExitTrainer`:
    `step()`, `log`, `set_contexts`, `trained_draft()`)."""

    def __init__(self, pair: ModelPair, contexts: list[Context], cfg: TrainConfig, draft=None):
        check_trainer(self, pair, cfg.builder.name)
        super().__init__(pair, contexts, cfg, own_copy(pair.draft) if draft is None else draft)
        if self.draft.embed_tokens is not None:
            self.draft.embed_tokens.requires_grad_(False)
        self.opt = torch.optim.AdamW(trainable(self.draft), lr=cfg.lr, weight_decay=0.0)
        self.index = draft_index(self.draft)
        self.trees: list[tuple[list[int], DraftTree]] = []  # the last step's (context, tree) pairs

    def step(self) -> StepLog:
        """One optimiser step on a batch of contexts, each context's tree built by the current head."""
        t0, cfg = time.perf_counter(), self.cfg
        batch = [self.contexts[self.rng.randrange(len(self.contexts))] for _ in range(cfg.batch)]
        layers = self.draft.target_layers
        feats = [target_features(self.target, torch.tensor(c.tokens + c.continuation, device=self.target.device)[:-1],
                                 layers).to(self.draft.device) for c in batch]
        zero = sum(p.sum() for p in trainable(self.draft)) * 0.0  # keeps a step without labels differentiable
        unrolled = [unrolled_loss(self.draft, f, c.tokens + c.continuation, len(c.tokens), TTT_STEPS, TTT_DECAY,
                                  self.index) for c, f in zip(batch, feats)]
        l_tok = zero + sum(u for u in unrolled if u is not None) / len(batch)
        l_exit, cps, self.trees = zero, [], []
        if cfg.objective != "token" and cfg.lambda_exit > 0:
            self.draft.eval()  # trees are built as at inference
            built = [(c, f, self.training_tree(c.tokens)) for c, f in zip(batch, feats)]
            self.draft.train()
            terms, nodes = [], 0
            for c, f, tree in built:
                if tree is None or tree.size < 2:
                    continue
                ex, probs = target_weights(self.target, c.tokens, tree.to(self.target.device), cfg.weight_temperature)
                cps.append(float(ex.C_p))
                logq = tree_rows(self.draft, f[: len(c.tokens) - 1], c.tokens, tree, cfg.objective == "residual")
                terms.append(exit_terms(logq, tree, ex, probs, cfg.objective, self.index))
                nodes += tree.size - 1
                self.trees.append((c.tokens, tree))
            if terms:
                l_exit = l_exit + torch.stack(terms).sum() / nodes
        return self.update(l_tok, l_exit, cps, t0)

    def training_tree(self, context: list[int]) -> DraftTree | None:
        """The tree the current head builds below `context` at inference (None: no room left for a full-depth tree),
        with tensors that autograd may keep (drafting builds them in inference mode)."""
        if self.pair.context_length - len(context) < self.cfg.builder.max_depth:
            return None
        pair = replace(self.pair, draft=self.draft, draft_call=None)
        tree = tree_for(pair, context, self.cfg.builder)
        return DraftTree(*(t.clone() for t in (tree.tokens, tree.parents, tree.depths, tree.draft_logprobs,
                                               tree.scores)))

    def trained_draft(self) -> Eagle3Head:
        """The trained head, in eval mode and frozen, reading the target's own embedding (the trainer keeps its
        copy)."""
        return own_copy(self.draft).eval().requires_grad_(False)
