"""An EAGLE-3 head's laws with gradient (docs/eagle3.md, *ExitTrain*): below every node of a tree it drafted, as
drafting computes them, and unrolled over target-written text (training-time test, the head's own training loss).

Drafting reads the committed pairs (the target's state at t with the token at t + 1, at draft position t) through
`fc`; the root's row is the last pair's. A node at depth d reads its parent's row's fed-back state with its own token,
at position root + d, seeing the committed pairs, its ancestors and itself. So the law below a node comes from d
passes of the head, each over the state the pass before it made: a node's loss must come from its own level's pass,
not from the root's law or from the target's states.
"""

from __future__ import annotations

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


def unrolled_loss(model: Eagle3Head, feats: torch.Tensor, seq: list[int], first: int, steps: int, decay: float,
                  index: torch.Tensor) -> torch.Tensor | None:
    """Training-time test over the written part of `seq` (from index `first` on), the head's own training loss.

    Step 0 at row t reads the pairs (`feats` (len(seq) - 1, F) of seq[:-1]); step k at row t reads step k - 1's
    fed-back state with the true token t + 1 + k, at position t + k, seeing the pairs up to t and its own earlier
    steps of row t: the node at depth k of the chain the target wrote. Step k's loss, the mean cross-entropy of token
    t + 2 + k over the rows where it is in the draft vocabulary, weighs decay**k. None when no row has a label."""
    device, n = model.device, len(seq)
    ids = torch.tensor(seq, device=device)
    cache = HeadKV()
    h = read_pairs(model, feats, ids[1:], cache)
    rows = torch.arange(max(first - 2, 0), n - 2, device=device)  # row t drafts token t + 2 at step 0
    if rows.numel() == 0:
        return None
    h, r = h[rows], rows.numel()
    committed = causal_visibility(n - 1, 0, device)[rows]
    total = None
    for k in range(steps):
        at = rows + 2 + k
        label = torch.where(at < n, index[ids[at.clamp(max=n - 1)]], -1)
        keep = label >= 0
        if bool(keep.any()):
            loss = decay ** k * F.cross_entropy(log_q(model, h[keep]), label[keep])
            total = loss if total is None else total + loss
        if k + 1 == steps or not bool((at + 1 < n).any()):
            break
        seen = torch.cat([committed] + [torch.eye(r, dtype=torch.bool, device=device)] * (k + 1), 1)
        h = model.layer(model.feedback(h), ids[at.clamp(max=n - 1)], rows + k + 1, seen, cache)
    return total
