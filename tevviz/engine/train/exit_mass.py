"""Where the exit mass moved: the trees two drafters build on one context, scored by the target, compared by w."""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from ..core.sampling import SamplingConfig
from ..core.scoring import rescore
from ..draft.builders import BuilderConfig
from ..draft.drafters import tree_for
from ..load.models import ModelPair
from ..records.records import RoundRecord


@torch.no_grad()
def weighted_tree(pair: ModelPair, draft, context: list[int], builder: BuilderConfig, index: int,
                  temperature: float = 1.0) -> RoundRecord:
    """The tree `draft` builds for `context`, scored by `pair.target` (P, rho, w, missing tokens) at `temperature`.

    There is no verifier draw: the ringed exit is the most likely one (argmax w) and the bonus the
    most likely residual token there.
    """
    tree = tree_for(replace(pair, draft=draft, draft_call=None), context, builder)
    skeleton = RoundRecord.unscored(index, "ExitTrain", tree.tokens.tolist(), tree.parents.tolist(),
                                    tree.depths.tolist(), tree.draft_logprobs.tolist(), tree.scores.tolist())
    r = rescore(pair, context[:-1], skeleton, SamplingConfig(temperature=temperature))
    exit_node = max(range(r.size), key=lambda v: r.w[v])
    bonus = max(r.missing[exit_node], key=lambda m: m["gain"], default=None)
    return replace(r, exit_node=exit_node, accepted=r.path_to(exit_node),
                   bonus_token=-1 if bonus is None else bonus["token_id"],
                   bonus_text="" if bonus is None else bonus["text"])


def exit_mass_changes(before: RoundRecord, after: RoundRecord) -> list[dict]:
    """Per token path in either tree: w before, w after and the change, largest change first.

    Nodes are matched by their token path; a path in one tree only has w = 0 in the other.
    """
    rows: dict[tuple[int, ...], dict] = {}
    for side, r in (("before", before), ("after", after)):
        for v in range(r.size):
            nodes = r.path_to(v)[1:]
            row = rows.setdefault(r.token_path(v), {"texts": [r.texts[u] for u in nodes], "depth": len(nodes),
                                                    "w_before": 0.0, "w_after": 0.0,
                                                    "node_before": None, "node_after": None})
            row[f"w_{side}"] = float(r.w[v])
            row[f"node_{side}"] = v
    out = [{**row, "delta": row["w_after"] - row["w_before"]} for row in rows.values()]
    return sorted(out, key=lambda x: (-abs(x["delta"]), x["depth"]))


@dataclass(frozen=True)
class ExitMassMove:
    """One round's context: the trees the original and the trained drafter build there, and how w moved."""

    round_index: int
    before: RoundRecord  # original drafter's tree, scored by the target
    after: RoundRecord  # trained drafter's tree, scored by the target
    changes: list[dict]  # exit_mass_changes(before, after)


def exit_mass_move(pair: ModelPair, trained_draft, context: list[int], builder: BuilderConfig, index: int,
                   temperature: float = 1.0) -> ExitMassMove:
    """`pair.draft`'s and `trained_draft`'s trees on `context` (round `index`), and how w moved between them."""
    before = weighted_tree(pair, pair.draft, context, builder, index, temperature)
    after = weighted_tree(pair, trained_draft, context, builder, index, temperature)
    return ExitMassMove(index, before, after, exit_mass_changes(before, after))
