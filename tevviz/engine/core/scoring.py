"""Scoring a given tree under a context with the target, outside a decoding session.

Used to re-score imported trees and by ExitTrain, where the frozen target gives each node's
distribution under its actual tree-parent context.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from ..errors import TevvizError
from ..records.records import RoundRecord
from . import exit_law as law
from .kv import additive_mask
from .sampling import SamplingConfig, processed_probs
from .tree import DraftTree, ancestor_mask, from_parents


def tree_logits(model, prefix: list[int], tree: DraftTree, anc: torch.Tensor | None = None) -> torch.Tensor:
    """(N, V) logits of every tree node, in one forward over prefix + tree with the ancestor mask.

    `prefix` is the context before the root token (tree node 0).
    """
    device = model.device
    tree = tree.to(device)
    anc = ancestor_mask(tree) if anc is None else anc.to(device)
    m, n = len(prefix), tree.size
    visible = torch.zeros(m + n, m + n, dtype=torch.bool, device=device)
    visible[:m, :m] = torch.ones(m, m, dtype=torch.bool, device=device).tril_()
    visible[m:, :m] = True
    visible[m:, m:] = anc
    ids = torch.cat([torch.tensor(prefix, dtype=torch.long, device=device), tree.tokens])
    pos = torch.cat([torch.arange(m, device=device), m + tree.depths])
    out = model(input_ids=ids[None], attention_mask=additive_mask(visible, model.dtype), position_ids=pos[None])
    return out.logits[0, m:]


def missing_records(tokenizer, tree: DraftTree, probs: torch.Tensor, P: torch.Tensor, top: int) -> list[list[dict]]:
    """Per node: up to `top` missing tokens {token_id, text, gain}, gain P(v) * p_v(a) > 0, largest first."""
    if top <= 0:
        return [[] for _ in range(tree.size)]
    gains, ids = law.missing_tokens(tree, probs, P, top)
    gains, ids, k = gains.tolist(), ids.tolist(), ids.shape[-1]
    texts = tokenizer.batch_decode([[t] for row in ids for t in row])  # one call for all N * k tokens
    return [[{"token_id": t, "text": x, "gain": g} for t, g, x in zip(ti, gi, texts[v * k:(v + 1) * k]) if g > 0]
            for v, (ti, gi) in enumerate(zip(ids, gains))]


@torch.no_grad()
def rescore(pair, prefix: list[int], record: RoundRecord, sampling: SamplingConfig, top: int = 5) -> RoundRecord:
    """A copy of `record` with p_edge, P, rho, w, C_p and missing tokens from `pair.target`."""
    tree = from_parents(record.tokens, record.parents, record.draft_logprobs, device=pair.target.device)
    probs = processed_probs(tree_logits(pair.target, prefix, tree), sampling)
    ex = law.exit_law(tree, probs)
    tok = pair.tokenizer
    return replace(
        record, texts=tok.batch_decode([[t] for t in record.tokens]), p_edge=ex.p_edge.tolist(), P=ex.P.tolist(),
        rho=ex.rho.tolist(), w=ex.w.tolist(), C_p=float(ex.C_p), missing=missing_records(tok, tree, probs, ex.P, top),
    )


def check_ids(pair, ids: list[int]) -> None:
    """Refuse token ids outside the target's vocabulary (an imported tree from other models)."""
    vocab = pair.target.get_output_embeddings().weight.shape[0]
    bad = next((t for t in ids if not 0 <= t < vocab), None)
    if bad is not None:
        raise TevvizError(f"token id {bad} is outside the loaded target's vocabulary of {vocab}; "
                          "was this tree decoded with other models?")
