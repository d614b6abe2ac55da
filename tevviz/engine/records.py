"""Plain-Python records of decoding rounds and sessions, and their JSON schema (docs/json-schema.md).

No torch here: the render layer reads the same records as the engine writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

SESSION_SCHEMA = "tevviz.session/1"
ROUND_SCHEMA = "tevviz.round/1"
STAGES = ("draft", "target", "verify", "other")  # a round's stage times (ms), in this order


@dataclass(frozen=True)
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
            exit_node=g["exit_node"], bonus_token=-1 if g.get("bonus_token_id") is None else g["bonus_token_id"], bonus_text=g.get("bonus_text", ""),
            accepted=list(g["accepted"]), committed=list(g.get("committed", [])), C_p=g.get("C_p"),
            stage_ms=dict(g.get("stage_ms", {})),
        )


def path_to(parents: list[int], node: int) -> list[int]:
    """The walk from the root (parent -1) down to `node` in a parent array."""
    path = [node]
    while parents[path[-1]] >= 0:
        path.append(parents[path[-1]])
    return path[::-1]


def summarize(rounds: list[RoundRecord]) -> dict:
    """Rounds, tokens committed, tau (mean L), mean 1 + C_p and stage totals; means are None when undefined."""
    ceilings = [1 + r.C_p for r in rounds if r.C_p is not None]
    return {
        "rounds": len(rounds),
        "tau": _mean([r.block_length for r in rounds]),
        "mean_ceiling": _mean(ceilings),
        "stage_ms": {s: sum(r.stage_ms.get(s, 0.0) for r in rounds) for s in STAGES},
        "tokens": sum(r.tokens_committed for r in rounds),
    }


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None
