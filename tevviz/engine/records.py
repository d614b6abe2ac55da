"""Plain-Python records of decoding rounds and sessions, and their JSON schema (docs/json-schema.md)."""

from __future__ import annotations

from dataclasses import dataclass, field

SESSION_SCHEMA = "tevviz.session/1"
ROUND_SCHEMA = "tevviz.round/1"
STAGES = ("draft", "target", "verify", "other")


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

    @property
    def block_length(self) -> int:
        """L = d(exit) + 1: accepted draft tokens plus the bonus token."""
        return len(self.accepted)

    @property
    def size(self) -> int:
        return len(self.tokens)

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


def summarize(rounds: list[RoundRecord]) -> dict:
    """tau, mean 1 + C_p, stage totals and acceptance by depth over rounds."""
    n = len(rounds)
    if n == 0:
        return {"rounds": 0, "tau": 0.0, "mean_ceiling": 0.0, "stage_ms": {s: 0.0 for s in STAGES}, "tokens": 0}
    ceil = [1 + r.C_p for r in rounds if r.C_p is not None]
    return {
        "rounds": n,
        "tau": sum(r.block_length for r in rounds) / n,
        "mean_ceiling": sum(ceil) / len(ceil) if ceil else None,
        "stage_ms": {s: sum(r.stage_ms.get(s, 0.0) for r in rounds) for s in STAGES},
        "tokens": sum(len(r.committed) for r in rounds),
    }
