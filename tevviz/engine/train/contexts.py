"""Where each round of a session sits in its committed stream, and the ExitTrain contexts that follow."""

from __future__ import annotations

from ..draft.builders import BuilderConfig
from ..load.models import ModelPair
from ..records.records import RoundRecord
from .exittrain import Context


def context_ends(stream: list[int], rounds: list[RoundRecord]) -> list[int | None]:
    """Per round of `rounds` (the last rounds of `stream`): the stream's length up to and including its root token.

    Counted back from the end of the stream, so it holds when older rounds were dropped; None where the
    stream does not show the round's root and block there (imports without a prompt).
    """
    end, out = len(stream), []
    for r in reversed(rounds):
        end -= len(r.committed)
        ok = (bool(r.committed) and end >= 1 and stream[end - 1] == r.tokens[0]
              and stream[end:end + len(r.committed)] == r.committed)
        out.append(end if ok else None)
    return out[::-1]


def spread(items: list, k: int) -> list:
    """At most `k` of `items`, evenly spaced, first and last included (none for k < 1)."""
    n = len(items)
    if k < 1:
        return []
    if n <= k:
        return list(items)
    return [items[round(i * (n - 1) / (k - 1))] for i in range(k)] if k > 1 else [items[-1]]


def training_contexts(stream: list[int], rounds: list[RoundRecord], limit: int) -> list[Context]:
    """ExitTrain contexts of a session: per round, the stream up to its root and the tokens committed after it.

    At most `limit`, spread over the rounds. The committed stream follows the target's law, so it serves
    as the target continuation (docs/math.md, ExitTrain).
    """
    ends = spread([e for e in context_ends(stream, rounds) if e is not None], limit)
    return [Context(stream[:e], stream[e:]) for e in ends]


def fits(pair: ModelPair, context: list[int], builder: BuilderConfig) -> bool:
    """Whether a tree of the builder's full depth below `context` stays within the models' positions.

    ExitTrain builds its trees without the decoding session's depth trim, so contexts near the end are left out.
    """
    return len(context) + builder.max_depth <= pair.context_length
