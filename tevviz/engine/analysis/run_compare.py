"""Two runs compared round by round: trees matched by token path, the differences in C_p, E[L] and L, the missing
tokens, where the two texts part, and acceptance by depth of both runs with standard errors.

No torch: the app, `tevviz compare`, the notebook API and the report read the same numbers.

A worked example. Run A's round 0 drafts root -> "a" -> "b" and root -> "c"; run B's drafts root -> "a" -> "d".
Matched by token path, the union tree is root (both), "a" (both), "a b" (A only), "c" (A only), "a d" (B only):
a node is the same node in both trees exactly when the tokens from the root down to it are the same.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..errors import TevvizError
from ..records.records import RoundRecord
from ..records.round_numbers import NUMBERS
from .run_depths import DepthTable, depth_table
from .table import Column, Table

BOTH, A_ONLY, B_ONLY = "both", "A only", "B only"
MISSING_SHOWN = 10  # missing tokens listed per run and round, largest gain first


@dataclass(frozen=True)
class Run:
    """What a comparison reads of a decoding run: its prompt, the tokens it generated, its rounds and settings.

    `rounds` may be the last rounds only (a capped history): their committed tokens are the tail of `token_ids`."""

    name: str
    prompt: str
    token_ids: list[int]
    rounds: list[RoundRecord]
    meta: dict = field(default_factory=dict)
    text: str = ""
    prompt_token_ids: list[int] = field(default_factory=list)

    @classmethod
    def of(cls, imported, name: str) -> Run:
        """A run from an io.ImportedSession (a session file, or a round or trace file without its text)."""
        return cls(name=name, prompt=imported.prompt, token_ids=list(imported.token_ids), rounds=list(imported.rounds),
                   meta=dict(imported.meta), text=imported.text, prompt_token_ids=list(imported.prompt_token_ids))


# --- one round: the trees matched by token path ---------------------------------------------------------------------


@dataclass(frozen=True)
class MatchedNode:
    """A node of the union of two trees by token path; `node_a` / `node_b` are its ids in each tree (None: absent)."""

    id: int  # in the union tree, parents before children (A's nodes in A's order, then B's own)
    parent: int  # -1 at the root
    path: tuple[int, ...]  # the tokens from the root's child down to it
    text: str
    depth: int
    node_a: int | None
    node_b: int | None

    @property
    def side(self) -> str:
        """"both", "A only" or "B only"."""
        return (BOTH if self.node_a is not None and self.node_b is not None
                else A_ONLY if self.node_b is None else B_ONLY)


def match_nodes(a: RoundRecord, b: RoundRecord) -> list[MatchedNode]:
    """The union of two rounds' trees by token path (the roots always match), parents before children."""
    union: dict[tuple[int, ...], list] = {}
    for side, r in enumerate((a, b)):
        for v in range(r.size):
            path = r.token_path(v)
            entry = union.get(path)
            if entry is None:
                parent = -1 if v == 0 else union[path[:-1]][0]
                entry = union[path] = [len(union), parent, r.texts[v], r.depths[v], None, None]
            entry[4 + side] = v
    return [MatchedNode(id=e[0], parent=e[1], path=path, text=e[2], depth=e[3], node_a=e[4], node_b=e[5])
            for path, e in union.items()]


@dataclass(frozen=True)
class Delta:
    """One number of both runs and B - A (None where either is unknown)."""

    a: float | None
    b: float | None

    @property
    def diff(self) -> float | None:
        return None if self.a is None or self.b is None else self.b - self.a

    def to_dict(self) -> dict:
        return {"a": self.a, "b": self.b, "diff": self.diff}


@dataclass(frozen=True)
class MissingToken:
    """A target token a round's tree lacks under one of its nodes, with its coverage gain P(v) p_v(a)."""

    path: tuple[int, ...]  # the token path it would have had as a node
    path_text: str  # the texts from the root's child down to it
    token_id: int
    text: str
    gain: float
    drafted_by_other: bool  # whether the other run's tree of the same round holds this path


def missing_tokens(r: RoundRecord, other: RoundRecord | None = None, top: int = MISSING_SHOWN) -> list[MissingToken]:
    """The `top` missing tokens of a round by gain, each said to be in `other`'s tree or not."""
    held = set() if other is None else {other.token_path(v) for v in range(other.size)}
    rows = []
    for v, row in enumerate(r.missing or []):
        prefix = r.token_path(v)
        prefix_text = "".join(r.texts[u] for u in r.path_to(v)[1:])
        for m in row:
            path = (*prefix, m["token_id"])
            rows.append(MissingToken(path, prefix_text + m.get("text", ""), m["token_id"], m.get("text", ""),
                                     float(m["gain"]), path in held))
    return sorted(rows, key=lambda m: (-m.gain, m.path))[:top]


@dataclass(frozen=True)
class RoundComparison:
    """Round `index` of both runs: the matched nodes, C_p, E[L] and L of each, and their missing tokens."""

    index: int
    nodes: list[MatchedNode]
    C_p: Delta
    expected_length: Delta  # RoundRecord.expected_length: each round's under its own verifier
    block_length: Delta
    accepted_a: str  # the accepted path's text plus the bonus token
    accepted_b: str
    missing_a: list[MissingToken]
    missing_b: list[MissingToken]
    # Whether both rounds drafted from the same context: the same prompt and the same tokens before the round.
    # None where the runs' tokens are not known round by round (a trace without committed tokens).
    same_context: bool | None

    def count(self, side: str) -> int:
        """How many nodes are on `side` ("both", "A only" or "B only")."""
        return sum(n.side == side for n in self.nodes)

    @property
    def identical(self) -> bool:
        """Whether the two rounds have the same tree and the same numbers."""
        return (self.count(BOTH) == len(self.nodes) and
                all(d.diff in (0, None) for d in (self.C_p, self.expected_length, self.block_length)))

    def to_dict(self) -> dict:
        return {"index": self.index, "same_context": self.same_context,
                "counts": {s: self.count(s) for s in (BOTH, A_ONLY, B_ONLY)},
                "C_p": self.C_p.to_dict(), "expected_length": self.expected_length.to_dict(),
                "block_length": self.block_length.to_dict(), "accepted_a": self.accepted_a,
                "accepted_b": self.accepted_b,
                "nodes": [{**asdict(n), "side": n.side} for n in self.nodes],
                "missing_a": [asdict(m) for m in self.missing_a], "missing_b": [asdict(m) for m in self.missing_b]}


def compare_rounds(a: RoundRecord, b: RoundRecord, same_context: bool | None = None) -> RoundComparison:
    """Two rounds, matched by token path (whatever their indices: the caller pairs them)."""
    return RoundComparison(
        index=a.index, nodes=match_nodes(a, b), C_p=Delta(a.C_p, b.C_p),
        expected_length=Delta(a.expected_length, b.expected_length),
        block_length=Delta(a.block_length, b.block_length),
        accepted_a=_block_text(a), accepted_b=_block_text(b),
        missing_a=missing_tokens(a, b), missing_b=missing_tokens(b, a), same_context=same_context)


def _block_text(r: RoundRecord) -> str:
    return "".join(r.texts[v] for v in r.accepted[1:]) + r.bonus_text


# --- where the two texts part ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Divergence:
    """The first generated token where two runs differ, and which round of each committed it."""

    same_prompt: bool
    common: int  # generated tokens both runs agree on, from the start
    position: int | None  # index of the first token that differs; None where one text is a prefix of the other
    token_a: int | None
    token_b: int | None
    text_a: str
    text_b: str
    round_a: int | None  # index of the round that committed it (None where unknown)
    round_b: int | None
    sentence: str  # the above, said plainly

    def to_dict(self) -> dict:
        return asdict(self)


def _token_rounds(run: Run) -> list[tuple[str, int] | None]:
    """Per generated token, its text and the index of the round that committed it; None where unknown (tokens
    before the run's kept rounds, or rounds without their committed tokens)."""
    out: list[tuple[str, int]] = []
    for r in run.rounds:
        if not r.committed:
            return [None] * len(run.token_ids)
        texts = [r.texts[v] for v in r.accepted[1:]] + [r.bonus_text]
        out += [(texts[i] if i < len(texts) else "", r.index) for i in range(len(r.committed))]
    if len(out) > len(run.token_ids):
        return [None] * len(run.token_ids)
    return [None] * (len(run.token_ids) - len(out)) + out


def _same_prompt(a: Run, b: Run) -> bool:
    if a.prompt_token_ids and b.prompt_token_ids:
        return a.prompt_token_ids == b.prompt_token_ids
    return a.prompt == b.prompt


def divergence(a: Run, b: Run) -> Divergence:
    """Where the generated texts of `a` and `b` part: rounds after that point compare different contexts."""
    same = _same_prompt(a, b)
    common = 0
    for x, y in zip(a.token_ids, b.token_ids):
        if x != y:
            break
        common += 1
    differs = common < min(len(a.token_ids), len(b.token_ids))
    where_a, where_b = _token_rounds(a), _token_rounds(b)
    at_a = where_a[common] if differs else None
    at_b = where_b[common] if differs else None
    text = lambda at: "" if at is None else at[0]
    rnd = lambda at: None if at is None else at[1]
    unknown = [r.name for r in (a, b) if r.rounds and not r.token_ids]
    if not same:
        sentence = f"{a.name} and {b.name} have different prompts: every round compares different contexts."
    elif unknown:
        sentence = (f"{' and '.join(unknown)} carries no generated text (a round or trace file): whether the rounds "
                    "compare the same context is not known.")
    elif differs:
        said = lambda name, at, tok: (
            (f"{name} wrote {text(at)!r}" if at is not None else f"{name} wrote token {tok}")
            + (f" (round {rnd(at)})" if rnd(at) is not None else ""))
        where = (f"The texts agree on the first {common} generated tokens; at token {common + 1}" if common else
                 "The texts differ from the first generated token:")
        sentence = (f"{where} {said(a.name, at_a, a.token_ids[common])} and {said(b.name, at_b, b.token_ids[common])}."
                    " Rounds from there on compare different contexts.")
    elif len(a.token_ids) == len(b.token_ids):
        sentence = f"Same prompt and the same {common} generated tokens: every round compares the same context."
    else:
        short, long_ = (a, b) if len(a.token_ids) < len(b.token_ids) else (b, a)
        sentence = (f"Same prompt; {short.name}'s {common} generated tokens are the start of {long_.name}'s "
                    f"{len(long_.token_ids)}: every round both have compares the same context.")
    return Divergence(same_prompt=same, common=common, position=common if differs else None,
                      token_a=a.token_ids[common] if differs else None,
                      token_b=b.token_ids[common] if differs else None,
                      text_a=text(at_a), text_b=text(at_b), round_a=rnd(at_a), round_b=rnd(at_b), sentence=sentence)


def _round_starts(run: Run) -> dict[int, int] | None:
    """Per round index, how many generated tokens came before it; None where the committed tokens are not known."""
    if any(not r.committed for r in run.rounds):
        return None
    start = len(run.token_ids) - sum(len(r.committed) for r in run.rounds)
    if start < 0:
        return None
    out = {}
    for r in run.rounds:
        out[r.index] = start
        start += len(r.committed)
    return out


# --- two runs -------------------------------------------------------------------------------------------------------


SETTING_KEYS = ("target", "draft", "dtype", "device", "sampling", "builder", "verifier", "seed", "max_new_tokens",
                "chat")


@dataclass(frozen=True)
class RunComparison:
    """Two runs: where their texts part, the settings that differ, and the per-depth table; `round(k)` compares
    round k of both."""

    a: Run
    b: Run
    divergence: Divergence
    table: DepthTable
    settings: list[tuple[str, object, object]]  # (setting, A's, B's) for each recorded setting that differs
    round_indices: list[int]  # the round indices both runs hold

    def round(self, index: int) -> RoundComparison:
        """Round `index` of both runs; a clear error where either lacks it."""
        for run in (self.a, self.b):
            if not any(r.index == index for r in run.rounds):
                have = [r.index for r in run.rounds]
                span = f"rounds {have[0]}-{have[-1]}" if have else "no rounds"
                raise TevvizError(f"{run.name} has no round {index} ({span})")
        ra = next(r for r in self.a.rounds if r.index == index)
        rb = next(r for r in self.b.rounds if r.index == index)
        return compare_rounds(ra, rb, self._same_context(index))

    def _same_context(self, index: int) -> bool | None:
        starts_a, starts_b = _round_starts(self.a), _round_starts(self.b)
        if starts_a is None or starts_b is None:
            return None
        d = self.divergence
        start = starts_a[index]
        return d.same_prompt and start == starts_b[index] and start <= d.common

    def to_dict(self) -> dict:
        return {"a": self.a.name, "b": self.b.name, "divergence": self.divergence.to_dict(),
                "settings": [{"setting": k, "a": x, "b": y} for k, x, y in self.settings],
                "round_indices": self.round_indices, "table": self.table.to_dict()}


def setting_differences(a: dict, b: dict) -> list[tuple[str, object, object]]:
    """The recorded settings (a session's `meta`) that differ, nested ones by dotted name."""
    out = []
    extra = sorted((set(a) | set(b)) - set(SETTING_KEYS) - {"tevviz", "run_name"})
    keys = [k for k in SETTING_KEYS if k in a or k in b] + extra
    for k in keys:
        x, y = a.get(k), b.get(k)
        if isinstance(x, dict) and isinstance(y, dict):
            out += [(f"{k}.{name}", p, q) for name, p, q in setting_differences(x, y)]
        elif x != y:
            out.append((k, x, y))
    return out


def compare_runs(a: Run, b: Run) -> RunComparison:
    """Run `a` against run `b`: what `RunComparison` holds (B - A everywhere)."""
    if a.name == b.name:
        a, b = Run(**{**a.__dict__, "name": f"{a.name} (A)"}), Run(**{**b.__dict__, "name": f"{b.name} (B)"})
    both = sorted({r.index for r in a.rounds} & {r.index for r in b.rounds})
    return RunComparison(a=a, b=b, divergence=divergence(a, b), table=depth_table(a.rounds, b.rounds),
                         settings=setting_differences(a.meta, b.meta), round_indices=both)


def rounds_table(rounds: list[RoundComparison]) -> Table:
    """Round by round: whether both started from the same context, the nodes each tree has, C_p of each and B - A,
    E[L]'s B - A and each block length (headings the registry's labels)."""
    label = lambda k: NUMBERS[k].label
    cols = (Column("round", "round", "count"), Column("context", "context", "text"),
            Column("both", "both", "count"), Column("a_only", "A only", "count"), Column("b_only", "B only", "count"),
            Column("cp_a", f"{label('C_p')} A"), Column("cp_b", f"{label('C_p')} B"),
            Column("cp_d", "B - A", "signed"), Column("el_d", f"{label('expected_length')} B-A", "signed"),
            Column("l_a", f"{label('L')} A", "count"), Column("l_b", f"{label('L')} B", "count"))
    context = {True: "same", False: "differs", None: "?"}
    rows = tuple({"round": c.index, "context": context[c.same_context], "both": c.count(BOTH),
                  "a_only": c.count(A_ONLY), "b_only": c.count(B_ONLY), "cp_a": c.C_p.a, "cp_b": c.C_p.b,
                  "cp_d": c.C_p.diff, "el_d": c.expected_length.diff, "l_a": c.block_length.a,
                  "l_b": c.block_length.b} for c in rounds)
    return Table("rounds", cols, rows, id="rounds")


def round_table(c: RoundComparison) -> Table:
    """One round of both runs: C_p, E[L] and the block length L (a row each, headed by the registry's labels) of A,
    of B and B - A; the notes give each run's accepted block and bonus token as text."""
    cols = (Column("number", "", "text"), Column("a", "A"), Column("b", "B"), Column("diff", "B - A", "signed"))
    rows = tuple({"number": NUMBERS[k].label, "a": d.a, "b": d.b, "diff": d.diff}
                 for k, d in (("C_p", c.C_p), ("expected_length", c.expected_length), ("L", c.block_length)))
    notes = (f"A accepted {c.accepted_a!r}", f"B accepted {c.accepted_b!r}")
    return Table(f"round {c.index}", cols, rows, notes, id=f"round-{c.index}")


def missing_table(c: RoundComparison, side: str) -> Table:
    """The target tokens run `side`'s ("A" or "B") tree lacks in this round, largest coverage gain first, and
    whether the other run's tree drafted them."""
    missing, other = (c.missing_a, "B") if side == "A" else (c.missing_b, "A")
    cols = (Column("gain", "coverage gain", "number", 4), Column("path", "path", "text"),
            Column("other", f"in {other}'s tree", "text"))
    rows = tuple({"gain": m.gain, "path": repr(m.path_text), "other": "yes" if m.drafted_by_other else ""}
                 for m in missing)
    return Table(f"missing from {side}'s tree (target tokens it lacks, by coverage gain)", cols, rows)
