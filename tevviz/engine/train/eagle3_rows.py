"""An EAGLE-3 head's laws with gradient (docs/eagle3.md, *ExitTrain*): below every node of a tree it drafted, as
drafting computes them, and unrolled over target-written text (training-time test, the head's own training loss).

Drafting reads the committed pairs (the target's state at t with the token at t + 1, at draft position t) through
`fc`; the root's row is the last pair's. A node at depth d reads its parent's row's fed-back state with its own token,
at position root + d, seeing the committed pairs, its ancestors and itself. So the law below a node comes from d
passes of the head, each over the state the pass before it made: a node's loss must come from its own level's pass,
not from the root's law or from the target's states. `unroll` and `ttt_loss` are the recipe's training loss
(tevviz/recipes/eagle3.py packs its data for them); ExitTrain's L_tok reads the same over one sequence.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..core.kv import causal_visibility
from ..core.tree import DraftTree, ancestor_mask
from ..draft.eagle3_model import Eagle3Head, HeadKV


def draft_index(model: Eagle3Head) -> torch.Tensor:
    """(V,) the draft id of every target id (target id = draft id + d2t[draft id]), -1 outside the draft vocabulary."""
    vd = model.d2t.shape[0]
    drafted = torch.arange(vd, device=model.d2t.device) + model.d2t
    index = torch.full((model.head.vocab_size,), -1, dtype=torch.long, device=model.d2t.device)
    index[drafted] = torch.arange(vd, device=model.d2t.device)
    return index


def log_q(model: Eagle3Head, h: torch.Tensor) -> torch.Tensor:
    """(q, Vd) the head's log-law over its draft vocabulary from the states `h` (q, H) (q = 0 elsewhere)."""
    return torch.log_softmax(model.lm_head(model.norm(h)).float(), dim=-1)


def read_pairs(model: Eagle3Head, feats: torch.Tensor, tokens: torch.Tensor, cache: HeadKV) -> torch.Tensor:
    """(m, H) the head's states of the committed pairs (state t of `feats` (m, F), token t + 1 of `tokens` (m,)) at
    draft positions 0..m-1, causal; their keys and values go into `cache`."""
    m = tokens.shape[0]
    return model.layer(model.fuse(feats), tokens, torch.arange(m, device=model.device),
                       causal_visibility(m, 0, model.device), cache)


def tree_rows(model: Eagle3Head, feats: torch.Tensor, context: list[int], tree: DraftTree,
              every: bool = False) -> torch.Tensor:
    """(N, Vd) log q below each node of `tree`, drafted after `context`, with gradient: the root's row from the
    committed pairs (`feats` (n - 1, F): the target's states of context[:-1]), a node's from its parent's fed-back
    state and its own token, level by level, as drafting reads them. Rows of childless nodes are computed only with
    `every` (the residual objective needs them); the others are left as they come."""
    device = model.device
    n = len(context) - 1  # committed pairs; the last one's row is the root's
    cache = HeadKV()
    h = read_pairs(model, feats, torch.tensor(context[1:], device=device), cache)
    parents, depths, tokens = (t.to(device) for t in (tree.parents, tree.depths, tree.tokens))
    forward = torch.zeros(tree.size, dtype=torch.bool, device=device)
    forward[parents[1:]] = True  # nodes with children
    if every:
        forward[:] = True
    forward[0] = False
    anc = ancestor_mask(tree).to(device)
    states = torch.zeros(tree.size, h.shape[-1], dtype=h.dtype, device=device).index_copy(
        0, torch.zeros(1, dtype=torch.long, device=device), h[-1:])
    done = torch.zeros(0, dtype=torch.long, device=device)  # nodes in the cache, in its order
    for d in range(1, int(depths.max()) + 1):
        ids = torch.nonzero(forward & (depths == d)).flatten()
        if ids.numel() == 0:
            break  # a forwarded node's parent was forwarded: none deeper either
        slots = torch.cat([done, ids])
        visible = torch.cat([torch.ones(ids.numel(), n, dtype=torch.bool, device=device), anc[ids][:, slots]], 1)
        position = torch.full((ids.numel(),), n - 1 + d, device=device)
        level = model.layer(model.feedback(states[parents[ids]]), tokens[ids], position, visible, cache)
        states = states.index_copy(0, ids, level)
        done = slots
    return log_q(model, states)


@dataclass
class Packed:
    """Sequences packed into one row: tokens, target states, positions, the sequence of each row, whether a row's
    token is target-written, and the rows unrolled beyond step 0 (those whose drafts land on written tokens)."""

    tokens: torch.Tensor  # (n,)
    feats: torch.Tensor  # (n, F) float
    positions: torch.Tensor  # (n,)
    seq: torch.Tensor  # (n,)
    written: torch.Tensor  # (n,) bool
    last: torch.Tensor  # (n,) the index of each row's sequence's last row
    rows: torch.Tensor  # rows unrolled (step k >= 1)


def unroll(model: Eagle3Head, b: Packed, depth: int, vocab: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The head unrolled `depth` steps over a packed batch: per step k, its draft-vocabulary logits at `b.rows` and
    their labels (the token at row + 2 + k as a draft id; -1 where not written, outside the sequence or not drafted)."""
    n, rows = b.tokens.numel(), b.rows
    cache, out = HeadKV(), []
    causal = (b.seq[:, None] == b.seq[None, :]) & torch.ones(n, n, dtype=torch.bool, device=rows.device).tril_()
    h = model.layer(model.fuse(b.feats), b.tokens.roll(-1), b.positions, causal, cache)[rows]
    r = rows.numel()
    for k in range(depth):
        at = rows + 2 + k
        ok = at <= b.last[rows]
        label = torch.where(ok, vocab[b.tokens[at.clamp(max=n - 1)]], -1)
        label = torch.where(ok & b.written[at.clamp(max=n - 1)], label, -1)
        out.append((model.lm_head(model.norm(h)), label))
        if k + 1 == depth:
            break
        # step k + 1 at row t: the head's own state with the true token t + 2 + k, seeing the committed pairs up to
        # t (step 0's keys) and its own rows t of steps 1..k (the diagonal), at position t + k + 1
        seen = [causal[rows]] + [torch.eye(r, dtype=torch.bool, device=rows.device)] * (k + 1)
        token = b.tokens[(rows + 1 + k + 1).clamp(max=n - 1)]
        h = model.layer(model.feedback(h), token, b.positions[rows] + k + 1, torch.cat(seen, 1), cache)
    return out


def ttt_loss(steps: list[tuple[torch.Tensor, torch.Tensor]], decay: float) -> torch.Tensor:
    """Sum over steps k of decay**k times the mean cross-entropy of the step's labelled rows."""
    total = 0.0
    for k, (logits, label) in enumerate(steps):
        keep = label >= 0
        if keep.any():
            total = total + decay ** k * F.cross_entropy(logits[keep], label[keep])
    return total


def unrolled_loss(model: Eagle3Head, feats: torch.Tensor, seq: list[int], first: int, steps: int, decay: float,
                  index: torch.Tensor) -> torch.Tensor | None:
    """Training-time test over the written part of `seq` (from index `first` on), the head's own training loss: the
    recipe's `ttt_loss(unroll(...))` over this one sequence (`feats` (len(seq) - 1, F): the target's states of
    seq[:-1]). None when no row has a label."""
    device, n = model.device, len(seq)
    # The last row pairs no state with a token; nothing reads it (no row's label or visible pairs reach it).
    feats = torch.cat([feats, feats.new_zeros(1, feats.shape[-1])]).to(device)
    at = torch.arange(n, device=device)
    b = Packed(tokens=torch.tensor(seq, device=device), feats=feats, positions=at, seq=torch.zeros_like(at),
               written=at >= first, last=torch.full_like(at, n - 1),
               rows=torch.arange(max(first - 2, 0), n - 2, device=device))  # row t drafts token t + 2 at step 0
    if b.rows.numel() == 0:
        return None
    unrolled = unroll(model, b, steps, index)
    if not any(bool((label >= 0).any()) for _, label in unrolled):
        return None
    return ttt_loss(unrolled, decay)
