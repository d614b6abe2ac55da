"""ExitTrain for block drafters (docs/math.md, *ExitTrain on block drafters*; the paper's own setting).

Each training context is a sequence the target wrote. Blocks sit at random anchors of its written part; one drafting
pass gives every block's per-depth rows. From the detached rows, DDTree's builder makes each block's tree exactly as
at inference; the frozen target scores every node under the tree mask (P, rho, w); each node at depth d takes its
loss from row d - 1:

    L = L_tok + lambda * sum_v weight(v) (-log q_{d(v)}(x_v)) / (number of non-root nodes)

with weight w(v) (the paper's), P(v) rescaled to w's total (its Table 2 arm) or none (token-only). L_tok is the block
drafter's own training loss (depth-decayed cross-entropy on the written tokens). The authors' released recipes weight
by P(v); tevviz follows the paper and offers P as the `prefix` objective.
"""

from __future__ import annotations

import time
from dataclasses import replace

import torch

from ..core.tree import DraftTree
from ..draft.block_drafting import block_rows
from ..draft.block_model import ContextKV
from ..draft.ddtree import ddtree_tree

# make_trainer, tree_for and save_trained lived here before the drafter kinds' registry: the app and the
# benchmarks still import them from this module.
from ..draft.drafters import check_trainer, layer_outputs, make_trainer, tree_for  # noqa: F401
from ..draft.drafters import save_drafter as save_trained  # noqa: F401
from ..errors import TevvizError
from ..load.models import ModelPair
from .block_training import block_logits, block_loss, padded_blocks
from .exittrain import (
    Context,
    DraftTrainer,
    StepLog,
    TrainConfig,
    node_weights,
    target_weights,
)

ANCHORS = 4  # blocks per context per step: the root of the context and three more in its written part
GAMMA = 4.0  # L_tok's decay by depth, as the block recipe trains


@torch.no_grad()
def target_features(target, tokens: torch.Tensor, layer_ids: tuple[int, ...]) -> torch.Tensor:
    """(L, F) the frozen target's features of every position of `tokens` (the outputs of layers `layer_ids`)."""
    hs = target(input_ids=tokens.unsqueeze(0), output_hidden_states=True).hidden_states
    return layer_outputs(hs, layer_ids)[0]


def exit_terms(logq: torch.Tensor, tree: DraftTree, ex, objective: str) -> torch.Tensor:
    """-sum over non-root nodes of weight(v) log q_{d(v)}(x_v): each node's term from its depth's row of `logq`
    (D, V), the weights from the tree's exit law `ex` (w, or P rescaled for `prefix`); not yet normalised."""
    wt = node_weights(objective, ex)[1:]
    return -(wt * logq[tree.depths[1:] - 1, tree.tokens[1:]]).sum()


class BlockExitTrainer(DraftTrainer):
    """Online ExitTrain of a private copy of a pair's block drafter on its own DDTree trees (the interface of
    `ExitTrainer`: `step()`, `log`, `set_contexts`, `trained_draft()`)."""

    def __init__(self, pair: ModelPair, contexts: list[Context], cfg: TrainConfig, draft=None):
        check_trainer(self, pair, cfg.builder.name)
        if cfg.objective == "residual":
            raise TevvizError("the residual objective needs each node's law given its own path; a block drafter's "
                              "rows are per depth (choose exit, prefix or token)")
        super().__init__(pair, contexts, cfg, draft)
        self.trees: list[tuple[list[int], DraftTree]] = []  # the last step's (context, tree) pairs

    def anchors(self, ctx: Context, bs: int) -> list[int]:
        """The context's root and up to ANCHORS - 1 random positions of its written part, as anchor positions."""
        root = len(ctx.tokens) - 1
        later = list(range(root + 1, root + len(ctx.continuation) - bs + 2))
        return [root] + self.rng.sample(later, min(len(later), ANCHORS - 1))

    def step(self) -> StepLog:
        """One optimiser step on a batch of contexts, each block's tree built by the current drafter."""
        t0, cfg = time.perf_counter(), self.cfg
        block = self.draft.block
        bs, device = block.block_size, self.target.device
        batch = [self.contexts[self.rng.randrange(len(self.contexts))] for _ in range(cfg.batch)]
        seqs = [torch.tensor(c.tokens + c.continuation, device=device) for c in batch]
        feats = [target_features(self.target, s, tuple(block.target_layer_ids)).to(self.draft.dtype) for s in seqs]
        picked = [self.anchors(c, bs) for c in batch]
        width = max(len(a) for a in picked)
        anchors = torch.tensor([a + [a[0]] * (width - len(a)) for a in picked], device=device)
        blocks = padded_blocks(seqs, feats, anchors, bs, block.mask_token_id)
        filler = torch.tensor([[j >= len(a) for j in range(width)] for a in picked], device=device)
        blocks = replace(blocks, labels=blocks.labels.masked_fill(filler.unsqueeze(-1), -100))  # fillers weigh 0
        logits = block_logits(self.draft, self.target, blocks)  # (S, A, bs - 1, V), with grad
        l_tok = block_loss(logits, blocks.labels, GAMMA)
        l_exit, cps = torch.zeros((), device=device), []
        if cfg.objective != "token" and cfg.lambda_exit > 0:
            logq = torch.log_softmax(logits.float(), dim=-1)
            depth = min(cfg.builder.max_depth, bs - 1)
            terms, nodes, self.trees = [], 0, []
            for s, (seq, anchor_list) in enumerate(zip(seqs, picked)):
                for a, anchor in enumerate(anchor_list):
                    context = seq[: anchor + 1].tolist()
                    room = min(depth, self.pair.context_length - anchor - 1)
                    tree = ddtree_tree(context[-1], logq[s, a, :room].detach(), cfg.builder.budget)[0]
                    ex, _ = target_weights(self.target, context, tree, cfg.weight_temperature)
                    cps.append(float(ex.C_p))
                    terms.append(exit_terms(logq[s, a], tree, ex, cfg.objective))
                    nodes += tree.size - 1
                    self.trees.append((context, tree))
            l_exit = torch.stack(terms).sum() / max(nodes, 1)
        return self.update(l_tok, l_exit, cps, t0)


@torch.no_grad()
def block_tree(pair: ModelPair, context: list[int], builder) -> DraftTree:
    """The DDTree a block drafter builds below `context` at inference, from a fresh state."""
    model = pair.draft
    ids = torch.tensor(context, device=pair.device)
    feats = target_features(pair.target, ids[:-1], tuple(model.block.target_layer_ids)) if len(context) > 1 else None
    depth = min(builder.max_depth, model.block.max_depth)
    rows = block_rows(model, pair.target, context[-1], len(context) - 1, depth, ContextKV(len(model.layers)), feats)
    return ddtree_tree(context[-1], rows, builder.budget)[0]
