"""A serving engine's speculative-decoding acceptance, in tevviz's terms (docs/engines.md). Torch-free.

One verification step drafts up to K tokens and accepts a prefix of j of them (0 <= j <= K), then the target adds
its own token. Over S steps:

    acceptance_length = 1 + accepted / S           (tokens a step commits)
    m_k = #(steps with j >= k) / S                 marginal acceptance at depth k, k = 1..K
    c_k = m_k / m_(k-1), m_0 = 1                   conditional acceptance (None where m_(k-1) = 0)

Both carry the standard error of a share of 0/1 values (analysis.stats.share, as tevviz's own runs do): m_k
over the S steps, c_k over the steps that reached depth k - 1.

Worked example: histogram [2, 1, 1] (two steps accepted nothing, one accepted 1, one accepted 2) is S = 4,
accepted = 0*2 + 1*1 + 2*1 = 3, acceptance_length = 1.75, m = (2/4, 1/4), c = (2/4, 1/2).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

from ..analysis.stats import share
from ..errors import TevvizError


@dataclass(frozen=True)
class EngineFigure:
    """An engine's own headline number whose definition differs from ours: shown beside ours, named and explained."""

    name: str  # e.g. "SGLang accept length"
    value: float
    meaning: str  # e.g. "completion tokens / verify steps (counts the tokens of steps that drafted nothing)"

    def to_dict(self) -> dict:
        return {"name": self.name, "value": self.value, "meaning": self.meaning}


@dataclass(frozen=True)
class PromptAcceptance:
    """One prompt's (or request's) steps and accepted tokens."""

    prompt: str  # the prompt's id, or the request's index as text
    steps: int
    accepted: int
    drafted: int | None = None

    @property
    def acceptance_length(self) -> float | None:
        return 1 + self.accepted / self.steps if self.steps else None

    def to_dict(self) -> dict:
        return {"prompt": self.prompt, "steps": self.steps, "accepted": self.accepted, "drafted": self.drafted,
                "acceptance_length": self.acceptance_length}


@dataclass(frozen=True)
class EngineAcceptance:
    """An engine run's acceptance: counts, and the marginal / conditional curves derived from `reached`.

    `reached[k - 1]` is the number of steps that accepted at least k drafted tokens (k = 1..K); empty where the
    format has no per-position figures (then `marginal` and `conditional` are empty and `notes` says so)."""

    engine: str  # "vllm", "sglang", "llama.cpp", "tensorrt-llm", "tevviz"
    format: str  # the parser that read it, e.g. "vllm-log"
    steps: int | None  # verification steps (drafts verified); None where the format does not say
    accepted: int  # drafted tokens accepted over all steps
    drafted: int | None = None  # drafted tokens over all steps (None where the format does not say)
    reached: tuple[int, ...] = ()
    per_step_accepted: tuple[int, ...] | None = None  # in order, where the format keeps them
    per_step_drafted: tuple[int, ...] | None = None
    prompts: tuple[PromptAcceptance, ...] = ()
    notes: tuple[str, ...] = ()
    engine_figures: tuple[EngineFigure, ...] = ()

    def __post_init__(self):
        if (self.steps or 0) < 0 or self.accepted < 0 or (self.drafted or 0) < 0:
            raise TevvizError(f"{self.engine} ({self.format}): negative counts (steps {self.steps}, "
                              f"accepted {self.accepted}, drafted {self.drafted})")
        if self.steps is None and self.reached:
            raise TevvizError(f"{self.engine} ({self.format}): per-depth counts need the number of steps")
        bounds = (self.steps or 0, *self.reached)
        if any(b > a for a, b in pairwise(bounds)):
            raise TevvizError(f"{self.engine} ({self.format}): steps reaching depth k must not rise with k "
                              f"(steps {self.steps}, reached {list(self.reached)})")

    # -- constructors ------------------------------------------------------------------------------------------
    @classmethod
    def from_histogram(cls, engine: str, format: str, histogram: list[int], drafted: int | None = None,
                       **extra) -> EngineAcceptance:
        """From `histogram[j]` = steps that accepted exactly j drafted tokens (j = 0..K)."""
        if any(h < 0 for h in histogram):
            raise TevvizError(f"{engine} ({format}): a histogram count is negative: {list(histogram)}")
        steps = sum(histogram)
        accepted = sum(j * h for j, h in enumerate(histogram))
        reached = tuple(sum(histogram[k:]) for k in range(1, len(histogram)))
        return cls(engine, format, steps, accepted, drafted, reached, **extra)

    @classmethod
    def from_steps(cls, engine: str, format: str, accepted: list[int], drafted: list[int] | None = None,
                   depth: int | None = None, **extra) -> EngineAcceptance:
        """From each step's accepted length in order (and its drafted count where known); K = `depth`, else the
        most any step drafted, else the most any step accepted."""
        if drafted is not None and len(drafted) != len(accepted):
            raise TevvizError(f"{engine} ({format}): {len(accepted)} per-step accepted counts but "
                              f"{len(drafted)} drafted counts")
        if any(a < 0 for a in accepted) or (drafted and any(a > d for a, d in zip(accepted, drafted))):
            raise TevvizError(f"{engine} ({format}): a step accepted a negative count or more than it drafted")
        top = depth if depth is not None else max([*(drafted or ()), *accepted], default=0)
        histogram = [0] * (max([top, *accepted]) + 1)
        for a in accepted:
            histogram[a] += 1
        return cls.from_histogram(engine, format, histogram, sum(drafted) if drafted is not None else None,
                                  per_step_accepted=tuple(accepted),
                                  per_step_drafted=tuple(drafted) if drafted is not None else None, **extra)

    @classmethod
    def from_position_counts(cls, engine: str, format: str, steps: int, accepted_at: list[int],
                             drafted: int | None = None, accepted: int | None = None,
                             **extra) -> EngineAcceptance:
        """From `accepted_at[k - 1]` = steps whose draft token at position k was accepted (a prefix is accepted,
        so that is the steps that accepted at least k). `accepted` defaults to their sum."""
        total = sum(accepted_at) if accepted is None else accepted
        return cls(engine, format, steps, total, drafted, tuple(accepted_at), **extra)

    # -- derived -----------------------------------------------------------------------------------------------
    @property
    def depth(self) -> int:
        """K: the deepest position with a figure (0 where the format has none)."""
        return len(self.reached)

    @property
    def acceptance_length(self) -> float | None:
        return 1 + self.accepted / self.steps if self.steps else None

    @property
    def acceptance_rate(self) -> float | None:
        """Accepted / drafted tokens (the 'draft acceptance rate' engines print); None where drafted is unknown."""
        return self.accepted / self.drafted if self.drafted else None

    def _shares(self, conditional: bool):
        prior = (self.steps, *self.reached)
        return [share(r, prior[k] if conditional else self.steps) for k, r in enumerate(self.reached)]

    @property
    def marginal(self) -> list[float | None]:
        return [e.mean for e in self._shares(False)]

    @property
    def marginal_se(self) -> list[float | None]:
        return [e.se for e in self._shares(False)]

    @property
    def conditional(self) -> list[float | None]:
        return [e.mean for e in self._shares(True)]

    @property
    def conditional_se(self) -> list[float | None]:
        return [e.se for e in self._shares(True)]

    def to_dict(self) -> dict:
        """Plain JSON values under the keys scripts read (docs/engines.md); the per-step arrays where present."""
        d = {"engine": self.engine, "format": self.format, "steps": self.steps, "drafted": self.drafted,
             "accepted": self.accepted, "acceptance_length": self.acceptance_length,
             "acceptance_rate": self.acceptance_rate, "marginal": self.marginal, "marginal_se": self.marginal_se,
             "conditional": self.conditional, "conditional_se": self.conditional_se, "reached": list(self.reached)}
        if self.per_step_accepted is not None:
            d["per_step_accepted"] = list(self.per_step_accepted)
        if self.per_step_drafted is not None:
            d["per_step_drafted"] = list(self.per_step_drafted)
        d["prompts"] = [p.to_dict() for p in self.prompts]
        d["engine_figures"] = [f.to_dict() for f in self.engine_figures]
        d["notes"] = list(self.notes)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> EngineAcceptance:
        """The inverse of to_dict (what an imported run's JSON reads back as)."""
        try:
            step_drafted = d.get("per_step_drafted")
            step_accepted = d.get("per_step_accepted")
            return cls(
                str(d["engine"]), str(d["format"]), None if d["steps"] is None else int(d["steps"]),
                int(d["accepted"]),
                None if d.get("drafted") is None else int(d["drafted"]), tuple(int(r) for r in d.get("reached", ())),
                None if step_accepted is None else tuple(int(a) for a in step_accepted),
                None if step_drafted is None else tuple(int(a) for a in step_drafted),
                tuple(PromptAcceptance(str(p["prompt"]), int(p["steps"]), int(p["accepted"]),
                                       None if p.get("drafted") is None else int(p["drafted"]))
                      for p in d.get("prompts", ())),
                tuple(str(n) for n in d.get("notes", ())),
                tuple(EngineFigure(str(f["name"]), float(f["value"]), str(f["meaning"]))
                      for f in d.get("engine_figures", ())),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise TevvizError(f"an engine acceptance record needs engine, format, steps and accepted: {e}") from None
