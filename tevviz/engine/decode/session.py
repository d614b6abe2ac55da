"""A decoding session: rounds of draft, target pass, verify and commit (docs/math.md, *One decoding round*).

The session owns both KV caches, the pending draft tokens and the random generator; every round
returns a plain RoundRecord.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace

import torch

from ..core import exit_law as law
from ..core.kv import additive_mask, keep_entries, new_cache, tree_visibility
from ..core.sampling import SamplingConfig, processed_probs
from ..core.scoring import missing_records
from ..core.seeds import stream_seed
from ..core.timing import sync
from ..core.tree import DraftTree, ancestor_mask, path_to, position_ids
from ..cost.arm_choice import MixedBudget
from ..cost.auto_budget import AutoBudget
from ..draft.builders import BuilderConfig, DraftResult
from ..draft.drafters import DraftRequest, layer_outputs, make_drafter, reading_of
from ..errors import TevvizError
from ..load.models import ModelPair
from ..records.draft_rows import TEXT_RANKS
from ..records.records import RoundRecord
from ..verify.verifiers import Decision, Verifier, get_verifier
from .sizing import RoundPlan, make_sizing
from .target_pass import TargetPass

MAX_NEW_TOKENS = 8192
logger = logging.getLogger("tevviz")


@dataclass(frozen=True)
class DecodeConfig:
    """Everything that decides a session's output besides the models and the prompt.

    `verifier` is the verifier's name (as users give it and the JSON keeps it); `verify` is the registered verifier
    it names, resolved once at construction (as `builder.spec` is the builder's kind)."""

    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    builder: BuilderConfig = field(default_factory=BuilderConfig)
    verifier: str = "tev"
    max_new_tokens: int = 64
    seed: int = 0
    stop_on_eos: bool = True
    missing_top: int = 5  # missing tokens recorded per node; 0 skips that (N x V) work, as benchmarks do
    chat: bool = False  # the prompt goes through the tokenizer's chat template (read where the prompt is encoded)
    optimal: bool = False  # compute each round's optimal tree (one more target pass per depth; off by default)

    def __post_init__(self):
        verify = get_verifier(self.verifier)  # a clear error for an unknown name
        self.builder.spec.check_verifier(self.verifier)
        # Not a field: equality, repr, replace() and the JSON keep the name alone (replace() resolves it again).
        object.__setattr__(self, "_verify", verify)
        n = self.max_new_tokens
        if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_NEW_TOKENS:
            raise TevvizError(f"max new tokens must be an integer in [1, {MAX_NEW_TOKENS}], got {n!r}")
        if not isinstance(self.seed, int):
            raise TevvizError(f"seed must be an integer, got {self.seed!r}")

    @property
    def verify(self) -> Verifier:
        """The registered verifier that `verifier` names, resolved at construction."""
        return self._verify


def has_chat_template(tokenizer) -> bool:
    """Whether prompts can be wrapped in the tokenizer's chat template (the default for such pairs)."""
    return bool(getattr(tokenizer, "chat_template", None))


def encode_prompt(tokenizer, text: str, chat: bool = False) -> list[int]:
    """Token ids of a prompt, through the tokenizer's chat template when asked."""
    if not isinstance(text, str) or not text.strip():
        raise TevvizError("the prompt is empty")
    if chat:
        if not getattr(tokenizer, "chat_template", None):
            raise TevvizError("this tokenizer has no chat template; decode without --chat")
        # Templates with a thinking switch (Qwen3 and kin) answer directly, as a chat user expects here.
        kw = {"enable_thinking": False} if "enable_thinking" in str(tokenizer.chat_template) else {}
        ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                            tokenize=True, **kw)
        return list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)
    return tokenizer(text)["input_ids"]


def stop_ids(pair: ModelPair) -> set[int]:
    """End-of-sequence ids of the target's generation config and tokenizer."""
    ids: set[int] = set()
    eos = getattr(pair.target.generation_config, "eos_token_id", None)
    ids.update(eos if isinstance(eos, list) else [] if eos is None else [eos])
    if pair.tokenizer.eos_token_id is not None:
        ids.add(pair.tokenizer.eos_token_id)
    return ids


def _texts(tokenizer, ids: list[int]) -> list[str]:
    return tokenizer.batch_decode([[t] for t in ids])


class DecodeSession:
    """Tree decoding of one prompt, one round per `step()`."""

    def __init__(self, pair: ModelPair, prompt_ids: list[int], cfg: DecodeConfig, keep_rounds: int | None = None,
                 cost_model: AutoBudget | MixedBudget | None = None):
        if not prompt_ids:
            raise TevvizError("the prompt is empty")
        vocab = self.vocab = pair.target.get_output_embeddings().weight.shape[0]
        if max(prompt_ids) >= vocab or min(prompt_ids) < 0:
            raise TevvizError(f"prompt token ids must lie in [0, {vocab})")
        if len(prompt_ids) + 1 > pair.context_length:
            raise TevvizError(
                f"the prompt has {len(prompt_ids)} tokens, "
                f"but the models accept at most {pair.context_length} positions"
            )
        self.pair, self.cfg = pair, cfg
        self.context_length = pair.context_length  # read from both configs; asked twice a round
        self.prompt_ids = list(prompt_ids)
        self.generated: list[int] = []
        self.rounds: list[RoundRecord] = []  # the last `keep_rounds` records (all when None)
        self.keep_rounds = keep_rounds
        self.round_count = 0  # rounds run, including records no longer kept
        self.done = False
        self.notice = ""  # said to the user when the session trims or stops early
        self._stop = stop_ids(pair) if cfg.stop_on_eos else set()
        self._known_texts: dict[int, str] = {}  # token id -> its text alone (a round decodes only ids new to it)
        self.device = pair.target.device
        # Each role its own stream, derived by hashing: consecutive seeds share no draws (engine/core/seeds.py).
        self.gen = torch.Generator(device=self.device).manual_seed(stream_seed(cfg.seed, "verify"))
        self.target_cache = new_cache(pair.target)
        self.target_pass = TargetPass(pair.target)
        self._mask_dtype = pair.target.dtype  # read once: the property walks the model's parameters
        self.drafter = make_drafter(pair, cfg.builder, stream_seed(cfg.seed, "draft"))
        self.reading = reading_of(pair)  # the target states the drafter reads and why (None: it reads none)
        self._round_at: dict[int, tuple[int, int]] = {}  # round index -> (stream length at its start, its depth cap)
        # --budget auto and the mixed builder: an online cost model; one passed in carries what earlier sessions on
        # the same models and machine measured (its limits are this session's).
        self.sizing = make_sizing(RoundPlan(cfg.builder, cfg.verifier, cfg.verify), cost_model)
        features = None
        if len(prompt_ids) > 1:
            with torch.inference_mode():
                ids = torch.tensor([prompt_ids[:-1]], device=self.device)
                out = self._target(ids, None, None, logits=False)
                features = self._features(out)
        self.drafter.prefill(self.prompt_ids, features)

    def _target(self, ids: torch.Tensor, mask, positions, logits: bool = True):
        """One target forward on the cache; it returns the hidden states the drafter reads, if it reads any."""
        return self.target_pass(ids, mask, positions, self.target_cache, bool(self.drafter.target_layers), logits)

    def _features(self, out) -> torch.Tensor | None:
        layers = self.drafter.target_layers
        # A target spread over devices returns each layer's states where that layer runs: the drafter's device.
        return layer_outputs(out.hidden_states, layers, self.device)[0] if layers else None

    @property
    def tokens(self) -> list[int]:
        return self.prompt_ids + self.generated

    def _depth_cap(self) -> int:
        # A round commits depth + 1 tokens: keep within the token limit and the models' positions.
        remaining = self.cfg.max_new_tokens - len(self.generated)
        room = self.context_length - len(self.prompt_ids) - len(self.generated)
        if room - 1 < self.cfg.builder.max_depth and not self.notice:
            self.notice = f"tree depth trimmed to {max(room - 1, 0)} to fit the context length {self.context_length}"
            logger.info(self.notice)
        return max(min(remaining, room) - 1, 0)

    def step(self) -> RoundRecord:
        """Run one round and commit its block; the session is unchanged if the round fails or is interrupted
        (a second Ctrl-C: what the finished rounds committed stays, the round in flight goes)."""
        if self.done:
            raise TevvizError("this session has finished; reset it to decode again")
        t_len, mark = self.target_cache.get_seq_length(), self.drafter.mark()
        n_gen, done, notice, count = len(self.generated), self.done, self.notice, self.round_count
        try:
            record = self._round()
        except BaseException as e:
            if self.round_count != count:  # interrupted after its record was kept: the round is whole
                raise
            # Put caches and stream back where the round found them, so that a failed round changes nothing.
            extra = self.target_cache.get_seq_length() - t_len
            if extra > 0:
                self.target_cache.crop(-extra)
            self.drafter.rollback(mark)
            del self.generated[n_gen:]
            self.done, self.notice = done, notice
            if isinstance(e, TevvizError):
                raise TevvizError(f"round {self.round_count}: {e}") from None
            raise
        return self.optimal(record.index) if self.cfg.optimal else record

    def optimal(self, index: int | None = None) -> RoundRecord:
        """The kept round `index` (default: the last) with its optimal tree; the record is replaced in `rounds`.

        Reads the target cache's prefix only: caches, pending tokens, the generator and the round
        count are as they were.
        """
        from ..core.optimal import optimal_tree

        pos = {r.index: i for i, r in enumerate(self.rounds)}
        if not self.rounds or (index is not None and index not in pos):
            raise TevvizError("no such round in this session" if self.rounds else "no round has run yet")
        i = pos[self.rounds[-1].index if index is None else index]
        record = self.rounds[i]
        if record.optimal is None:
            start, cap = self._round_at[record.index]
            H = min(self.cfg.builder.max_depth, cap, getattr(self.drafter, "max_depth", cap))
            opt = optimal_tree(self.pair.target, self.pair.tokenizer, self.tokens[:start], self.cfg.sampling,
                               record.size - 1 if H else 0, H, self.target_cache)
            record = self.rounds[i] = replace(record, optimal=opt)
        return record

    # Inference mode, not just no_grad: nothing of a round ever meets autograd, and skipping the
    # version counters and view tracking takes 6-15% off each small forward on a CPU.
    @torch.inference_mode()
    def _round(self) -> RoundRecord:
        cfg = self.cfg
        t0 = time.perf_counter()
        cap = self._depth_cap()
        self._round_at[self.round_count] = (len(self.tokens), cap)
        rp = self.sizing.round()
        drafted = self.drafter.draft(DraftRequest(rp.builder, cap, rp.plan, cfg.sampling, self.vocab))
        tree = drafted.tree.to(self.device)
        sync(self.device)
        t1 = time.perf_counter()

        anc = ancestor_mask(tree)
        past = self.target_cache.get_seq_length()
        # The root alone (a round without a draft) is one query that sees the whole cache: no mask to build or
        # apply, as in plain decoding.
        mask = None if tree.size == 1 else additive_mask(tree_visibility(anc, past), self._mask_dtype)
        out = self._target(tree.tokens.unsqueeze(0), mask, position_ids(tree, past))
        logits = out.logits[0]  # (N, V)
        sync(self.device)
        t2 = time.perf_counter()

        decision = rp.verify(tree, logits, cfg.sampling, self.gen, anc)
        exit_node, bonus = torch.stack([decision.exit_node, decision.bonus_token]).tolist()
        accepted = path_to(tree, exit_node)
        keep_entries(self.target_cache, past, accepted, past + tree.size)
        self.drafter.commit(drafted, accepted, bonus, self._features(out))
        tokens = tree.tokens.tolist()
        sync(self.device)
        t3 = time.perf_counter()

        committed, done = self._cut([tokens[v] for v in accepted[1:]] + [bonus])
        record = self._record(tree, logits, decision, drafted, exit_node, bonus, accepted, committed, anc, rp.verifier)
        self.generated.extend(committed)
        self.done = done
        t4 = time.perf_counter()
        ms = {k: v * 1e3 for k, v in {"draft": t1 - t0, "target": t2 - t1, "verify": t3 - t2, "other": t4 - t3}.items()}
        record = replace(record, stage_ms=ms)
        # The cost model learns from the record itself: it sees the numbers the round shows, and nothing else.
        sizing = self.sizing.observe(rp, drafted, record)
        if sizing is not None:
            record = replace(record, sizing=sizing)
        self.rounds.append(record)
        self.round_count += 1
        if self.keep_rounds is not None and len(self.rounds) > self.keep_rounds:
            del self.rounds[: len(self.rounds) - self.keep_rounds]
        return record

    def _cut(self, block: list[int]) -> tuple[list[int], bool]:
        """The part of a round's block that is committed (up to EOS and the token limit), and whether decoding ends."""
        committed = block[: self.cfg.max_new_tokens - len(self.generated)]
        for i, t in enumerate(committed):
            if t in self._stop:
                return committed[: i + 1], True
        total = len(self.generated) + len(committed)
        return committed, total >= self.cfg.max_new_tokens or len(self.prompt_ids) + total >= self.context_length

    def _record(self, tree: DraftTree, logits, decision: Decision, drafted: DraftResult, exit_node: int, bonus: int,
                accepted: list[int], committed: list[int], anc, verifier: str) -> RoundRecord:
        """The round's record but its stage times and sizing: the tree, its target flow, the decision, missing
        tokens, and the verifier's acceptances and the drafter's rows where the round has them."""
        cfg, tok = self.cfg.sampling, self.pair.tokenizer
        ex, top = decision.exit_law, self.cfg.missing_top
        # The processed rows once, for the edges where the verifier read none and for the missing tokens.
        probs = processed_probs(logits, cfg) if top > 0 or (ex is None and decision.p_edge is None) else None
        if ex is None:
            edges = law.p_edge(tree, probs) if decision.p_edge is None else decision.p_edge
            ex = law.exit_law_from_edges(tree, edges, anc)
        missing = missing_records(tok, tree, probs, ex.P, top) if top > 0 else [[] for _ in range(tree.size)]
        tokens = tree.tokens.tolist()
        return RoundRecord(
            index=self.round_count, verifier=verifier, tokens=tokens, texts=self._token_texts(tokens),
            parents=tree.parents.tolist(), depths=tree.depths.tolist(),
            draft_logprobs=tree.draft_logprobs.tolist(), scores=tree.scores.tolist(),
            p_edge=ex.p_edge.tolist(), P=ex.P.tolist(), rho=ex.rho.tolist(), w=ex.w.tolist(),
            missing=missing, exit_node=exit_node, bonus_token=bonus, bonus_text=self._token_texts([bonus])[0],
            accepted=accepted, committed=committed, C_p=float(ex.C_p),
            accept=None if decision.accept is None else decision.accept.tolist(),
            draft_rows=None if drafted.rows is None else self._draft_rows(drafted.rows),
        )

    def _token_texts(self, ids: list[int]) -> list[str]:
        """Each token's text alone, decoded once a session."""
        known = self._known_texts
        new = [t for t in dict.fromkeys(ids) if t not in known]
        if new:
            known.update(zip(new, _texts(self.pair.tokenizer, new)))
        return [known[t] for t in ids]

    def _draft_rows(self, rows: tuple[torch.Tensor, torch.Tensor]) -> list[list[dict]]:
        """A block round's rows its DDTree was built from, with texts for the ranks a person reads only (decoding
        all K x H tokens cost ~2 ms of a ~40 ms round)."""
        ids, logprobs = (x.tolist() for x in rows)
        texts = iter(self._token_texts([t for row in ids for t in row[:TEXT_RANKS]]))
        return [[{"token_id": t, "text": next(texts) if r < TEXT_RANKS else "", "logprob": lp}
                 for r, (t, lp) in enumerate(zip(i, v))] for i, v in zip(ids, logprobs)]

    def run(self, rounds: int | None = None) -> list[RoundRecord]:
        """Step until done, or `rounds` more rounds."""
        out = []
        while not self.done and (rounds is None or len(out) < rounds):
            out.append(self.step())
        return out
