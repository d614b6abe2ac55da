"""Generated text of a session as (text, label) spans for `gr.HighlightedText`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tevviz.engine.records.records import RoundRecord


def highlighted_blocks(rounds: Sequence[RoundRecord | Mapping[str, Any]]) -> list[tuple[str, str | None]]:
    """Per round: the accepted tokens (root excluded) labelled "round k", then the bonus token labelled "bonus"."""
    spans: list[tuple[str, str | None]] = []
    for i, r in enumerate(rounds):
        index, accepted_texts, bonus_text = _block(r, i)
        # The root is the previous round's bonus token, already emitted there.
        accepted = "".join(t or "" for t in accepted_texts)
        if accepted:
            spans.append((accepted, f"round {index}"))
        spans.append((bonus_text or "", "bonus"))
    return spans


def _block(r: RoundRecord | Mapping[str, Any], i: int) -> tuple[int, list[str | None], str | None]:
    """(round index, texts of the accepted nodes below the root, bonus text) of a record or its dict form."""
    if isinstance(r, RoundRecord):
        return r.index, [r.texts[v] for v in r.accepted[1:]], r.bonus_text
    info = r["graph"]
    text_of = {n["id"]: n["text"] for n in r["nodes"]}
    return info.get("round", i), [text_of[v] for v in info["accepted"][1:]], info["bonus_text"]
