"""Plain-Python records of decoding rounds and sessions, and their JSON schema (docs/json-schema.md).

No torch here: the render layer reads the same records as the engine writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .round_time import RoundSizing

SESSION_SCHEMA = "tevviz.session/2"
ROUND_SCHEMA = "tevviz.round/2"
# Older versions still import: /2 only added a round's optional `graph.optimal` and `graph.sizing`.
SESSION_SCHEMAS = ("tevviz.session/1", SESSION_SCHEMA)
ROUND_SCHEMAS = ("tevviz.round/1", ROUND_SCHEMA)
STAGES = ("draft", "target", "verify", "other")  # a round's stage times (ms), in this order


@dataclass(frozen=True)
class OptimalTree:
    """The top-B target prefixes of length at most H of a round's context (docs/math.md, *The optimal tree*).

    Node 0 is the round's root; parents come before children; `P` is the target prefix probability.
    Only prefixes with P > 0 are kept, so a greedy round's optimal tree is the target's own chain.
    """

    tokens: list[int]
    texts: list[str]
    parents: list[int]
    depths: list[int]
    P: list[float]
    budget: int  # B: the draft tree's non-root node count
    depth: int  # H: the depth limit the round had
    ms: float = 0.0  # wall time of the computation
    passes: int = 0  # target forwards it took

    @property
    def C_p(self) -> float:
        """C_p*(B): the coverage of the optimal tree."""
        return sum(self.P[1:])

    def token_path(self, node: int) -> tuple[int, ...]:
        return tuple(self.tokens[v] for v in path_to(self.parents, node)[1:])

    def reach_by_depth(self) -> list[float]:
        """Per depth d = 1..H, the target's probability of reaching d in this tree: P summed over its nodes at d."""
        return _mass_by_depth(self.depths, self.P)

    def to_dict(self) -> dict:
        return {"budget": self.budget, "depth": self.depth, "C_p": self.C_p, "ms": self.ms, "passes": self.passes,
                "nodes": [{"id": v, "parent": None if p < 0 else p, "token_id": t, "text": x, "depth": d, "P": q}
                          for v, (t, x, p, d, q) in enumerate(zip(self.tokens, self.texts, self.parents, self.depths,
                                                                   self.P))]}

    @classmethod
    def from_dict(cls, d: dict) -> OptimalTree:
        nodes = sorted(d["nodes"], key=lambda n: n["id"])
        return cls(tokens=[n["token_id"] for n in nodes], texts=[n.get("text", "") for n in nodes],
                   parents=[-1 if n["parent"] is None else n["parent"] for n in nodes],
                   depths=[n["depth"] for n in nodes], P=[n["P"] for n in nodes], budget=d["budget"],
                   depth=d["depth"], ms=d.get("ms", 0.0), passes=d.get("passes", 0))


@dataclass(frozen=True)
class Ghost:
    """A node of the optimal tree that the draft tree lacks; it hangs under `anchor`, the deepest draft node on its
    path."""

    node: int  # id in the optimal tree
    token: int
    text: str
    P: float
    depth: int
    anchor: int  # draft-tree node id of the deepest ancestor the draft tree holds
    parent_ghost: int | None  # optimal-tree id of its parent when that parent is a ghost too
    path_text: str  # the tokens from the root's child down to it


@dataclass(frozen=True)
class CoverageGap:
    """A round's draft tree against its optimal tree: C_p, C_p*, the drafter gap and the ghost branches."""

    C_p: float
    C_p_star: float
    held: float  # share of the optimal tree's mass that the draft tree holds
    ghosts: list[Ghost]
    # Whether 1 + C_p* bounds the round's expected block length (RoundRecord.optimal_bounds); where it does not,
    # the optimal tree is only the best fixed tree of the budget and there is no drafter gap.
    bounds: bool = True

    @property
    def gap(self) -> float | None:
        """C_p* - C_p: the expected block length the drafter lost at this budget; None where C_p* bounds nothing."""
        return self.C_p_star - self.C_p if self.bounds else None



@dataclass(frozen=True, repr=False)
class RoundRecord:
    """One draft-verify round: the tree, its target flow, the decision and the stage times (no tensors)."""

    index: int
    verifier: str
    tokens: list[int]  # node tokens, node 0 the root
    texts: list[str]  # decoded text of each node's token
    parents: list[int]  # -1 at the root
    depths: list[int]
    draft_logprobs: list[float]
    scores: list[float]
    p_edge: list[float | None]  # None where unknown (imported trees); 1 at the root
    P: list[float | None]
    rho: list[float | None]
    w: list[float | None]
    missing: list[list[dict]]  # per node: top missing tokens {token_id, text, gain}
    exit_node: int
    bonus_token: int
    bonus_text: str
    accepted: list[int]  # node ids from the root to the exit node
    committed: list[int]  # tokens this round appended (path + bonus; cut at EOS or the token limit)
    C_p: float | None
    stage_ms: dict[str, float] = field(default_factory=dict)
    optimal: OptimalTree | None = None  # computed on request (DecodeSession.optimal, --optimal)
    sizing: RoundSizing | None = None  # --budget auto: the chosen B and H and the cost model after this round
    # The verifier's probability of accepting each node once its parent is, where it is not p_edge: the speculative
    # verifier on a sampled chain, min(1, p / q). None otherwise (P, rho, w are the target's flow in either case).
    accept: list[float] | None = None
    # A block round (DDTree): per depth, the drafter's top tokens by rank, each {token_id, text, logprob}; enough to
    # rebuild the tree (engine/records/draft_rows.py; text "" beyond its TEXT_RANKS). None for level-by-level drafting.
    draft_rows: list[list[dict]] | None = None

    @classmethod
    def unscored(cls, index: int, verifier: str, tokens: list[int], parents: list[int], depths: list[int],
                 draft_logprobs: list[float] | None = None, scores: list[float] | None = None,
                 texts: list[str] | None = None, exit_node: int = 0, bonus_token: int = -1) -> RoundRecord:
        """A tree without target scores (p_edge, P, rho, w unknown, no missing tokens), exiting at `exit_node`."""
        n = len(tokens)
        return cls(
            index=index, verifier=verifier, tokens=list(tokens), texts=[""] * n if texts is None else list(texts),
            parents=list(parents), depths=list(depths),
            draft_logprobs=[0.0] * n if draft_logprobs is None else list(draft_logprobs),
            scores=[0.0] * n if scores is None else list(scores), p_edge=[None] * n, P=[None] * n, rho=[None] * n,
            w=[None] * n, missing=[[] for _ in range(n)], exit_node=exit_node, bonus_token=bonus_token,
            bonus_text="", accepted=path_to(parents, exit_node), committed=[], C_p=None,
        )

    @property
    def optimal_bounds(self) -> bool:
        """Whether 1 + C_p*(B) bounds this round's expected block length (docs/math.md, *Optimal coverage*).

        Theorem 1 holds for a fixed tree under an exact path verifier; a sampled chain under speculative sampling
        (the rounds with `accept`) accepts with min(1, p / q), which can exceed P, so it is not held to it."""
        return self.accept is None

    @property
    def expected_length(self) -> float | None:
        """Expected block length under this round's verifier: 1 + C_p, or 1 + the reach of `accept` where it is set."""
        if self.accept is not None:
            return 1 + expected_accepted(self.parents, self.accept)
        return None if self.C_p is None else 1 + self.C_p

    def __repr__(self) -> str:
        """One short line (the fields run to thousands of numbers): the tree, the block it committed, the law's
        numbers; `to_dict()` has everything."""
        block = "".join(self.texts[v] for v in self.accepted[1:]) + self.bonus_text
        shown = [f"round {self.index}", self.verifier, f"{self.size} nodes", f"depth {max(self.depths)}",
                 f"L {self.block_length}", f"block {block[:40]!r}" + ("..." if len(block) > 40 else "")]
        if self.expected_length is not None:
            shown.append(f"E[L] {self.expected_length:.3f}")
        if self.optimal is not None:
            shown.append(f"1 + C_p* {1 + self.optimal.C_p:.3f}")
        return f"RoundRecord({', '.join(shown)})"

    @property
    def block_length(self) -> int:
        """L = d(exit) + 1: accepted draft tokens plus the bonus token."""
        return len(self.accepted)

    @property
    def tokens_committed(self) -> int:
        """Tokens the round added to the stream: its committed block, or L where the record does not carry it."""
        return len(self.committed) or self.block_length

    @property
    def size(self) -> int:
        return len(self.tokens)

    def path_to(self, node: int) -> list[int]:
        """Node ids from the root down to `node`."""
        return path_to(self.parents, node)

    def token_path(self, node: int) -> tuple[int, ...]:
        """path(node): the tokens from the root's child down to `node` (empty at the root)."""
        return tuple(self.tokens[v] for v in self.path_to(node)[1:])

    def to_dict(self) -> dict:
        """networkx node-link form (edges="edges"), plain Python, ready for JSON."""
        nodes = []
        for v in range(self.size):
            nodes.append({
                "id": v,
                "parent": None if self.parents[v] < 0 else self.parents[v],
                "token_id": self.tokens[v],
                "text": self.texts[v],
                "depth": self.depths[v],
                "draft_logprob": None if v == 0 else self.draft_logprobs[v],
                "score": self.scores[v],
                "p_edge": None if v == 0 else self.p_edge[v],
                "P": self.P[v],
                "rho": self.rho[v],
                "w": self.w[v],
                "missing": self.missing[v] if self.missing else [],
                **({"accept": self.accept[v]} if self.accept is not None else {}),
            })
        return {
            "directed": True,
            "multigraph": False,
            "graph": {
                "round": self.index,
                "verifier": self.verifier,
                "exit_node": self.exit_node,
                "bonus_token_id": self.bonus_token if self.bonus_token >= 0 else None,
                "bonus_text": self.bonus_text,
                "accepted": list(self.accepted),
                "committed": list(self.committed),
                "C_p": self.C_p,
                "stage_ms": dict(self.stage_ms),
                **({"optimal": {**self.optimal.to_dict(), "ceiling": self.optimal_bounds}}
                   if self.optimal is not None else {}),
                **({"sizing": self.sizing.to_dict()} if self.sizing is not None else {}),
                **({"draft_rows": [list(row) for row in self.draft_rows]} if self.draft_rows is not None else {}),
            },
            "nodes": nodes,
            "edges": [{"source": p, "target": v} for v, p in enumerate(self.parents) if p >= 0],
        }

    @classmethod
    def from_dict(cls, d: dict) -> RoundRecord:
        """Inverse of to_dict (the input is assumed validated, see io.py)."""
        g = d["graph"]
        nodes = sorted(d["nodes"], key=lambda n: n["id"])
        col = lambda key, default=None: [n.get(key, default) for n in nodes]
        return cls(
            index=g.get("round", 0), verifier=g.get("verifier", "?"),
            tokens=col("token_id"), texts=col("text", ""),
            parents=[-1 if p is None else p for p in col("parent")], depths=col("depth"),
            draft_logprobs=[0.0 if x is None else x for x in col("draft_logprob")],
            scores=[0.0 if x is None else x for x in col("score", 0.0)],
            p_edge=col("p_edge"), P=col("P"), rho=col("rho"), w=col("w"), missing=col("missing", []),
            exit_node=g["exit_node"], bonus_token=-1 if g.get("bonus_token_id") is None else g["bonus_token_id"],
            bonus_text=g.get("bonus_text", ""),
            accepted=list(g["accepted"]), committed=list(g.get("committed", [])), C_p=g.get("C_p"),
            stage_ms=dict(g.get("stage_ms", {})),
            optimal=OptimalTree.from_dict(g["optimal"]) if g.get("optimal") is not None else None,
            sizing=RoundSizing.from_dict(g["sizing"]) if g.get("sizing") is not None else None,
            accept=col("accept") if nodes and "accept" in nodes[0] else None,
            draft_rows=g.get("draft_rows"),
        )

    def coverage_gap(self) -> CoverageGap | None:
        """This round against its optimal tree; None until the optimal tree is computed and the tree is scored."""
        if self.optimal is None or self.C_p is None:
            return None
        # A record is frozen, so its gap never changes: computed once (the live stats ask for it every Step).
        if "_gap" not in self.__dict__:
            object.__setattr__(self, "_gap", self._coverage_gap())
        return self.__dict__["_gap"]

    def _coverage_gap(self) -> CoverageGap:
        opt = self.optimal
        mine = {self.token_path(v): v for v in range(self.size)}
        held, ghosts = 0.0, []
        for v in range(1, len(opt.tokens)):
            path = opt.token_path(v)
            if path in mine:
                held += opt.P[v]
                continue
            k = len(path) - 1
            while path[:k] not in mine:
                k -= 1
            parent = opt.parents[v]
            ghosts.append(Ghost(node=v, token=opt.tokens[v], text=opt.texts[v], P=opt.P[v], depth=opt.depths[v],
                                anchor=mine[path[:k]], parent_ghost=None if opt.token_path(parent) in mine else parent,
                                path_text="".join(opt.texts[u] for u in path_to(opt.parents, v)[1:])))
        star = opt.C_p
        return CoverageGap(C_p=self.C_p, C_p_star=star, held=held / star if star > 0 else 1.0, ghosts=ghosts,
                           bounds=self.optimal_bounds)

    def reach_by_depth(self) -> list[float] | None:
        """Per depth d = 1..H, the exact probability that this round's accepted path reaches d under its verifier:
        P summed over the nodes at d (a fixed tree under an exact path verifier), or on a sampled chain the product of
        `accept` down to d. Summed over d it is E[L] - 1. None for an unscored tree."""
        if self.accept is not None:
            reach = [1.0] * self.size
            for v in range(1, self.size):
                reach[v] = reach[self.parents[v]] * self.accept[v]
            return _mass_by_depth(self.depths, reach)
        return None if any(x is None for x in self.P) else _mass_by_depth(self.depths, self.P)

    def exit_by_depth(self) -> tuple[list[float], list[float]]:
        """(width, leaf) exit mass per depth 0..max: w summed over internal nodes (the target's token was not
        among the children) and over leaves (the tree ended there); empty lists for an unscored tree."""
        if any(x is None for x in self.w):
            return [], []
        top = max(self.depths)
        width, leaf = [0.0] * (top + 1), [0.0] * (top + 1)
        internal = {p for p in self.parents if p >= 0}
        for v, (d, x) in enumerate(zip(self.depths, self.w)):
            (width if v in internal else leaf)[d] += x
        return width, leaf


def _mass_by_depth(depths: list[int], mass: list[float]) -> list[float]:
    """Per depth 1..max(depths), `mass` summed over the nodes at that depth (the root, depth 0, left out)."""
    out = [0.0] * max(depths, default=0)
    for d, x in zip(depths, mass):
        if d:
            out[d - 1] += x
    return out


def optimal_label(bounds: bool, budget: int) -> str:
    """What 1 + C_p* is called for a round: its optimal (a ceiling) where it bounds the round, else only the best
    fixed tree of the round's budget B."""
    return "optimal 1 + C_p*" if bounds else f"best fixed tree of B = {budget}: 1 + C_p*"


def expected_length_text(r: RoundRecord) -> str:
    """How every surface writes a round's expected block length (RoundRecord.expected_length): `E[L] = 1 + C_p = 3.000`
    under an exact path verifier on a fixed tree, `E[L] = 2.714 (C_p = 2.100)` where it accepts with min(1, p / q)."""
    e = r.expected_length
    if e is None:
        return "E[L] = —"
    if r.accept is None:
        return f"E[L] = 1 + C_p = {e:.3f}"
    return f"E[L] = {e:.3f}" + ("" if r.C_p is None else f" (C_p = {r.C_p:.3f})")


def dict_bounds(round_dict: dict) -> bool:
    """RoundRecord.optimal_bounds of a round in its to_dict() form (nodes carry `accept` on sampled chains)."""
    nodes = round_dict.get("nodes") or [{}]
    return "accept" not in nodes[0]


def expected_accepted(parents: list[int], accept: list[float]) -> float:
    """Expected accepted draft tokens of a round from each node's acceptance once its parent is accepted."""
    reach = [1.0] * len(parents)
    for v in range(1, len(parents)):
        reach[v] = reach[parents[v]] * accept[v]
    return sum(reach[1:])


class TreeShapeError(ValueError):
    """A parent array that is not a tree in parent-before-child order; `node` is the first node at fault."""

    def __init__(self, node: int, message: str):
        super().__init__(message)
        self.node = node


def tree_depths(parents: list[int]) -> list[int]:
    """The one check of a tree's shape (engine and render alike): node 0 is the root (parent -1) and every other
    node's parent is an earlier node. Returns each node's depth; raises TreeShapeError at the first node at fault."""
    if not parents:
        raise TreeShapeError(0, "a tree needs a root and one parent per node")
    if parents[0] != -1:
        raise TreeShapeError(0, "node 0 must be the root (parent -1)")
    depths = [0] * len(parents)
    for v in range(1, len(parents)):
        p = parents[v]
        if type(p) is not int or not 0 <= p < v:  # bool is an int subclass, yet no node id
            raise TreeShapeError(v, f"node {v} has parent {p!r}: parents must come before their children")
        depths[v] = depths[p] + 1
    return depths


def path_to(parents: list[int], node: int) -> list[int]:
    """The walk from the root (parent -1) down to `node` in a parent array."""
    path = [node]
    while parents[path[-1]] >= 0:
        path.append(parents[path[-1]])
    return path[::-1]
