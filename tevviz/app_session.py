"""Per-browser-session logic of the web app, apart from the widgets: models, live sessions, view state.

The browser holds an `AppState` (plain values and RoundRecords, in `gr.State`); the DecodeSession,
which owns tensors and KV caches, stays on the server in a `SessionStore` keyed by the state's id.
Every `Controller` method takes a state and returns a new one, or raises TevvizError and leaves
both the state and the store as they were. The ExitTrain panel's session-local trainer (a private
copy of the draft) sits in the same store entry as the DecodeSession and is freed with it.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import tempfile
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch

from .engine import (
    BuilderConfig,
    DecodeConfig,
    DecodeSession,
    ModelPair,
    RoundRecord,
    SamplingConfig,
    TevvizError,
    autoregressive,
    encode_prompt,
    load_pair,
)
from .engine import io as tio
from .engine.comparison import Comparison, compare_verifiers
from .engine.models import assets_dir, check_cache, check_vocabularies, load_model
from .engine.scoring import check_ids, rescore
from .engine.training import Context, ExitTrainer, TrainConfig, build_training_tree, target_weights

IDLE_EXPIRY_S = 3600.0  # a live session nobody has touched for this long is dropped
MAX_HISTORY = 500  # rounds a browser session keeps; older ones are dropped with a notice
MAX_TRAIN_STEPS = 200  # per Train step click
MAX_TRAIN_BATCH = 64
MAX_TRAIN_CONTEXTS = 256  # contexts handed to the trainer (spread over the session's rounds)
EVAL_CONTEXTS = 12  # contexts of the before/after table (spread over the session's rounds)
EVAL_ROUNDS = 2  # decoding rounds per context for tau in the before/after table


# ---------------------------------------------------------------------------------------------
# Models: one process-wide cache, loaded on first use.

_PAIRS: dict[tuple, ModelPair] = {}
_PAIRS_LOCK = threading.Lock()


@dataclass(frozen=True)
class PairSource:
    """Where the app's models come from: an injected pair, or `load_pair` through the process-wide cache."""

    target: str | None = None
    draft: str | None = None
    dtype: str = "auto"
    device: str | None = None
    device_map: str | None = None
    attn_implementation: str = "sdpa"
    trust_remote_code: bool = False
    pair: ModelPair | None = None  # injected (tests, notebooks); nothing is loaded then
    model_dirs: tuple[str, ...] = ()  # further folders the UI may load draft models from

    def allowed_roots(self) -> list[Path]:
        """Folders whose models the UI may load: the shipped models, the command line's models' folders, model_dirs."""
        roots = [assets_dir() / "models", *map(Path, self.model_dirs)]
        roots += [Path(m).expanduser().parent for m in (self.target, self.draft) if m and Path(m).expanduser().exists()]
        return [r.resolve() for r in roots]

    def check_ui_path(self, name: str) -> None:
        """Refuse a draft path typed into the UI unless it is a hub id or lies under an allowed folder."""
        p = Path(name).expanduser()
        if re.fullmatch(r"[\w.-]+/[\w.-]+", name) and not p.exists():
            return  # a hub id, resolved by huggingface_hub (its cache when offline)
        if not any(p.resolve().is_relative_to(root) for root in self.allowed_roots()):
            raise TevvizError(f"the app loads draft models only from {', '.join(map(str, self.allowed_roots()))}; "
                              "start it with --model-dir FOLDER to allow another folder")

    @property
    def description(self) -> str:
        if self.pair is not None:
            return f"target `{self.pair.target_name}`, draft `{self.pair.draft_name}`"
        if self.target is None:
            return "the embedded stdlib pair (`assets/models/tevviz-stdlib-target|draft`)"
        return f"target `{self.target}`, draft `{self.draft}`"

    def get(self, draft: str | None = None) -> ModelPair:
        """The pair, loading it on first use; `draft` swaps in another draft model beside the same target."""
        base = self._base()
        if not draft:
            return base
        self.check_ui_path(draft)
        key = (self.target, self.draft, self.dtype, self.device, id(base), draft)
        with _PAIRS_LOCK:
            if key not in _PAIRS:
                _PAIRS[key] = _with_draft(base, draft, self)
            return _PAIRS[key]

    def _base(self) -> ModelPair:
        if self.pair is not None:
            return self.pair
        key = (self.target, self.draft, self.dtype, self.device)
        with _PAIRS_LOCK:
            if key not in _PAIRS:
                _PAIRS[key] = load_pair(self.target, self.draft, dtype=self.dtype, device=self.device,
                                        device_map=self.device_map, attn_implementation=self.attn_implementation,
                                        trust_remote_code=self.trust_remote_code)
            return _PAIRS[key]


def _with_draft(base: ModelPair, draft: str, src: PairSource) -> ModelPair:
    """`base`'s target and tokenizer with the draft model at `draft` (checked like load_pair checks a pair)."""
    from transformers import AutoTokenizer

    model = load_model(draft, "draft", dtype=src.dtype, device=str(base.device),
                       attn_implementation=src.attn_implementation, trust_remote_code=src.trust_remote_code)
    try:
        tok = AutoTokenizer.from_pretrained(draft, trust_remote_code=src.trust_remote_code)
    except (OSError, ValueError) as e:
        raise TevvizError(f"cannot load the draft tokenizer {draft!r}: {str(e).splitlines()[0]}") from None
    check_vocabularies(base.tokenizer, tok, base.target_name, draft)
    check_cache(model, "draft")
    return ModelPair(base.target, model, base.tokenizer, base.target_name, draft)


# ---------------------------------------------------------------------------------------------
# Widget values -> engine configs.


def _int(x, name: str) -> int:
    if x is None or (isinstance(x, float) and not x.is_integer()) or isinstance(x, bool):
        raise TevvizError(f"{name} must be a whole number, got {x!r}")
    try:
        return int(x)
    except (TypeError, ValueError):
        raise TevvizError(f"{name} must be a whole number, got {x!r}") from None


def _float(x, name: str) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        raise TevvizError(f"{name} must be a number, got {x!r}") from None


def decode_settings(prompt: str, temperature: float, top_k: int, top_p: float, seed: int, builder: str,
                    budget: int, depth: int, children: int, width: int, branching: str, verifier: str,
                    max_new_tokens: int) -> tuple[str, DecodeConfig]:
    """The prompt and the DecodeConfig that the settings widgets describe (raises TevvizError)."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise TevvizError("the prompt is empty")
    try:
        shape = tuple(int(x) for x in str(branching).replace(" ", "").split(",") if x)
    except ValueError:
        raise TevvizError(f"static branching must be comma-separated integers, got {branching!r}") from None
    sampling = SamplingConfig(_float(temperature, "temperature"), _int(top_k, "top-k"), _float(top_p, "top-p"))
    tree = BuilderConfig(builder, _int(budget, "budget B"), _int(depth, "depth H"), _int(children, "children K"),
                         _int(width, "width W"), shape)
    cfg = DecodeConfig(sampling=sampling, builder=tree, verifier=verifier,
                       max_new_tokens=_int(max_new_tokens, "max new tokens"), seed=_int(seed, "seed"))
    return prompt, cfg


def train_settings(objective: str, lr: float, lambda_exit: float, batch: int, steps: int,
                   builder: BuilderConfig) -> TrainConfig:
    """The TrainConfig that the ExitTrain widgets describe; `steps` is the number of steps per click."""
    lr, lam = _float(lr, "learning rate"), _float(lambda_exit, "lambda_exit")
    if not (math.isfinite(lr) and 0 < lr <= 1):
        raise TevvizError(f"learning rate must lie in (0, 1], got {lr!r}")
    if not (math.isfinite(lam) and lam >= 0):
        raise TevvizError(f"lambda_exit must be a finite number >= 0, got {lam!r}")
    n, b = _int(steps, "steps N"), _int(batch, "batch")
    if not 1 <= n <= MAX_TRAIN_STEPS:
        raise TevvizError(f"steps N must lie in [1, {MAX_TRAIN_STEPS}], got {n}")
    if not 1 <= b <= MAX_TRAIN_BATCH:
        raise TevvizError(f"batch must lie in [1, {MAX_TRAIN_BATCH}], got {b}")
    return TrainConfig(objective=objective, lambda_exit=lam, lr=lr, steps=n, batch=b, builder=builder)


def load_prompts(path: Path | None = None) -> list[dict]:
    """Prompt records {id, title, split, prompt} from assets/prompts.jsonl; [] when absent. Bad lines are skipped."""
    path = assets_dir() / "prompts.jsonl" if path is None else path
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and isinstance(rec.get("prompt"), str) and rec.get("id") is not None:
            out.append({"id": str(rec["id"]), "title": str(rec.get("title", rec["id"])),
                        "split": str(rec.get("split", "")), "prompt": rec["prompt"]})
    return out


# ---------------------------------------------------------------------------------------------
# State held by the browser, and the live sessions held by the server.


@dataclass(frozen=True)
class AppState:
    """What one browser is looking at: plain values and RoundRecords only (no tensors, no caches)."""

    sid: str = field(default_factory=lambda: uuid.uuid4().hex)
    kind: str = "empty"  # "empty", "live", or an import: "session", "round", "ddtree"
    prompt: str = ""
    prompt_ids: list[int] = field(default_factory=list)
    generated: list[int] = field(default_factory=list)
    text: str = ""
    rounds: list[RoundRecord] = field(default_factory=list)
    meta: dict = field(default_factory=dict)
    cfg: DecodeConfig | None = None  # the live session's settings
    seconds: float = 0.0  # wall time of the live session's rounds
    done: bool = False
    view: int = -1  # round shown, -1 when there is none
    token: int | None = None  # position in the shown round's block (Step token), None when not stepping
    node: int | None = None  # node chosen in the details dropdown
    baseline: dict | None = None  # autoregressive timing on the same prompt and settings
    notice: str = ""
    dropped: int = 0  # rounds before `rounds[0]` that the history cap dropped
    dropped_text: str = ""  # the blocks those rounds committed, shown as plain text

    @property
    def round(self) -> RoundRecord | None:
        return self.rounds[self.view] if 0 <= self.view < len(self.rounds) else None

    @property
    def highlight(self) -> int | str | None:
        """Node to ring in the tree: the Step token position (node id or "bonus"), else the chosen node."""
        r = self.round
        if r is None:
            return None
        if self.token is not None:
            block = r.accepted[1:] + ["bonus"]
            return block[min(self.token, len(block) - 1)]
        return self.node if self.node is not None and 0 <= self.node < r.size else None


@dataclass
class LiveSession:
    """A DecodeSession and what the app adds to it."""

    session: DecodeSession
    prompt: str
    seconds: float = 0.0


@dataclass
class Training:
    """One browser session's ExitTrain state; the process-wide pair's draft is never touched."""

    trainer: ExitTrainer  # holds the private, trainable copy of the draft and its optimiser
    log: list[dict]  # every step since the last Revert: step, loss, l_tok, l_exit, C_p, seconds
    pair: ModelPair  # the original target and tokenizer with a frozen snapshot of the trained draft
    use: bool = False  # Step and Run decode with `pair` instead of the original pair
    before: tuple | None = None  # (key, metrics) of the original drafter on the evaluation contexts


@dataclass
class _Entry:
    live: LiveSession | None = None
    training: Training | None = None
    used: float = field(default_factory=time.monotonic)


class SessionStore:
    """Server-side state by browser-session id: the live DecodeSession and the ExitTrain trainer.

    An entry is dropped after `ttl_s` idle seconds, or when the browser's state is deleted
    (gr.State's delete callback, which Gradio also calls when the state outlives its time to live).
    """

    def __init__(self, ttl_s: float = IDLE_EXPIRY_S):
        self.ttl_s = ttl_s
        self._items: dict[str, _Entry] = {}
        self._lock = threading.Lock()
        self._export_root: Path | None = None  # made on the first export

    def __len__(self) -> int:
        return len(self._items)

    def _touch(self, sid: str) -> _Entry | None:
        self.sweep()
        with self._lock:
            entry = self._items.get(sid)
            if entry is not None:
                entry.used = time.monotonic()
            return entry

    def get(self, sid: str) -> LiveSession | None:
        entry = self._touch(sid)
        return None if entry is None else entry.live

    def training(self, sid: str) -> Training | None:
        entry = self._touch(sid)
        return None if entry is None else entry.training

    def put(self, sid: str, live: LiveSession) -> None:
        self._set(sid, live=live)

    def put_training(self, sid: str, training: Training | None) -> None:
        self._set(sid, training=training)

    _KEEP = object()

    def _set(self, sid: str, live=_KEEP, training=_KEEP) -> None:
        with self._lock:
            entry = self._items.setdefault(sid, _Entry())
            if live is not self._KEEP:
                entry.live = live
            if training is not self._KEEP:
                entry.training = training
            entry.used = time.monotonic()
            if entry.live is None and entry.training is None:
                del self._items[sid]

    def drop(self, sid: str, keep_training: bool = False) -> None:
        """Free the live session and the exported files (and the trainer unless `keep_training`)."""
        if keep_training:
            self._set(sid, live=None)
        else:
            with self._lock:
                self._items.pop(sid, None)
        if self._export_root is not None:
            shutil.rmtree(self._export_root / sid, ignore_errors=True)

    def sweep(self) -> None:
        now = time.monotonic()
        with self._lock:
            stale = [sid for sid, entry in self._items.items() if now - entry.used > self.ttl_s]
        for sid in stale:
            self.drop(sid)

    def export_dir(self, sid: str) -> Path:
        if self._export_root is None:
            self._export_root = Path(tempfile.mkdtemp(prefix="tevviz-app-"))
        d = self._export_root / sid
        d.mkdir(parents=True, exist_ok=True)
        return d


# ---------------------------------------------------------------------------------------------
# History and contexts: where each round sits in the committed stream.


def block_text(r: RoundRecord) -> str:
    """The text a round committed as the app shows it: its accepted tokens, then the bonus token."""
    return "".join(r.texts[v] or "" for v in r.accepted[1:]) + (r.bonus_text or "")


def context_ends(st: AppState) -> list[int | None]:
    """Per kept round: the length of prompt + generated up to and including its root token.

    Counted back from the end of the stream, so it holds after the history cap dropped old rounds;
    None where the stream does not show the round's root and block there (imports without a prompt).
    """
    stream = st.prompt_ids + st.generated
    end, out = len(stream), []
    for r in reversed(st.rounds):
        end -= len(r.committed)
        ok = (bool(r.committed) and end >= 1 and stream[end - 1] == r.tokens[0]
              and stream[end:end + len(r.committed)] == r.committed)
        out.append(end if ok else None)
    return out[::-1]


def spread(items: list, k: int) -> list:
    """At most `k` of `items`, evenly spaced, first and last included."""
    n = len(items)
    if n <= k:
        return list(items)
    return [items[round(i * (n - 1) / (k - 1))] for i in range(k)] if k > 1 else [items[-1]]


def training_contexts(st: AppState) -> list[Context]:
    """ExitTrain contexts from the session: per round, the stream up to its root and the tokens committed after.

    The committed stream follows the target's law, so it serves as the target continuation (SPEC section 5).
    """
    stream = st.prompt_ids + st.generated
    ends = spread([e for e in context_ends(st) if e is not None], MAX_TRAIN_CONTEXTS)
    return [Context(stream[:e], stream[e:]) for e in ends]


def fits(pair: ModelPair, context: list[int], builder: BuilderConfig) -> bool:
    """Whether a tree of the builder's full depth below `context` stays within the models' positions.

    ExitTrain builds its trees without the decoding session's depth trim, so contexts near the end are left out.
    """
    return len(context) + builder.max_depth <= pair.context_length


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


@torch.no_grad()
def drafter_metrics(pair: ModelPair, contexts: list[Context], builder: BuilderConfig, sampling: SamplingConfig,
                    verifier: str, rounds: int = EVAL_ROUNDS, progress=None, label: str = "") -> dict:
    """Mean C_p (target at T = 1) of the trees `pair.draft` builds for `contexts`, and tau over `rounds` rounds each.

    tau is the mean block length of a fresh DecodeSession from each context with `sampling` (seeded per
    context, so two drafters see the same random numbers).
    """
    cps, lengths = [], []
    for i, ctx in enumerate(contexts):
        if progress is not None:
            progress((i, len(contexts)), desc=f"evaluating the {label} draft")
        tree = build_training_tree(pair.draft, ctx.tokens, builder).to(pair.device)
        cps.append(float(target_weights(pair.target, ctx.tokens, tree, 1.0)[0].C_p))
        cfg = DecodeConfig(sampling, builder, verifier, rounds * (builder.max_depth + 1), seed=i, missing_top=0)
        lengths += [r.block_length for r in DecodeSession(pair, ctx.tokens, cfg).run(rounds)]
    return {"contexts": len(contexts), "C_p": _mean(cps), "tau": _mean(lengths), "rounds": len(lengths)}


@torch.no_grad()
def weighted_tree(pair: ModelPair, draft, context: list[int], builder: BuilderConfig, index: int,
                  temperature: float = 1.0) -> RoundRecord:
    """The tree `draft` builds for `context`, scored by `pair.target` (P, rho, w, missing tokens) at `temperature`.

    There is no verifier draw: the ringed exit is the most likely one (argmax w) and the bonus the
    most likely residual token there.
    """
    tree = build_training_tree(draft, context, builder)
    n = tree.size
    none = [None] * n
    skeleton = RoundRecord(
        index=index, verifier="ExitTrain", tokens=tree.tokens.tolist(), texts=[""] * n,
        parents=tree.parents.tolist(), depths=tree.depths.tolist(), draft_logprobs=tree.draft_logprobs.tolist(),
        scores=tree.scores.tolist(), p_edge=none, P=none, rho=none, w=none, missing=[[] for _ in range(n)],
        exit_node=0, bonus_token=-1, bonus_text="", accepted=[0], committed=[], C_p=None,
    )
    r = rescore(pair, context[:-1], skeleton, SamplingConfig(temperature=temperature))
    exit_node = max(range(n), key=lambda v: r.w[v])
    accepted = [exit_node]
    while accepted[-1] > 0:
        accepted.append(r.parents[accepted[-1]])
    bonus = max(r.missing[exit_node], key=lambda m: m["gain"], default=None)
    return replace(r, exit_node=exit_node, accepted=accepted[::-1], bonus_token=-1 if bonus is None else bonus["token_id"],
                   bonus_text="" if bonus is None else bonus["text"])


def _node_paths(r: RoundRecord) -> list[tuple[tuple[int, ...], tuple[str, ...]]]:
    """Per node: its token path and the texts along it (both empty at the root)."""
    out = [((), ())]
    for v in range(1, r.size):
        tokens, texts = out[r.parents[v]]
        out.append((tokens + (r.tokens[v],), texts + (r.texts[v],)))
    return out


def exit_mass_changes(before: RoundRecord, after: RoundRecord) -> list[dict]:
    """Per token path in either tree: w before, w after and the change, largest change first.

    Nodes are matched by their token path; a path in one tree only has w = 0 in the other.
    """
    rows: dict[tuple[int, ...], dict] = {}
    for side, r in (("before", before), ("after", after)):
        for v, (path, texts) in enumerate(_node_paths(r)):
            row = rows.setdefault(path, {"texts": list(texts), "depth": len(path), "w_before": 0.0, "w_after": 0.0,
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


@dataclass(frozen=True)
class TrainReport:
    """What the ExitTrain panel shows after a Train step."""

    log: list[dict]  # every step since the last Revert
    table: list[dict]  # before/after rows: drafter, contexts, C_p, tau, rounds
    contexts: int  # training contexts taken from the session
    temperature: float  # sampling temperature of the tau column
    use: bool  # whether Step and Run decode with the trained draft
    notice: str
    moved: ExitMassMove | None


# ---------------------------------------------------------------------------------------------
# The controller: one method per user action.


@dataclass(frozen=True)
class Decoded:
    """A whole decode of one configuration (side-by-side comparison)."""

    label: str
    rounds: list[RoundRecord]
    tokens: int
    seconds: float
    text: str


class Controller:
    """Turns user actions into engine calls; holds the model source and the live sessions."""

    def __init__(self, source: PairSource, store: SessionStore | None = None, history: int = MAX_HISTORY):
        self.source = source
        self.store = store or SessionStore()
        self.history = history  # rounds an AppState keeps

    def session_pair(self, sid: str) -> ModelPair:
        """The pair this browser session decodes with: the trained draft when ExitTrain's "use" is on."""
        training = self.store.training(sid)
        return training.pair if training is not None and training.use else self.source.get()

    # -- decoding ------------------------------------------------------------------------------

    def step(self, st: AppState, prompt: str, cfg: DecodeConfig) -> AppState:
        """One round of the live session, starting a new one when the prompt, settings or draft changed."""
        pair = self.session_pair(st.sid)
        live = self.store.get(st.sid)
        notice = ""
        if (live is None or st.kind != "live" or live.prompt != prompt or live.session.cfg != cfg
                or live.session.pair is not pair):
            if st.kind == "live" and st.rounds:
                if live is None:
                    notice = "the previous session had expired: started a new session"
                elif live.session.pair is not pair:
                    notice = f"the draft changed (now {pair.draft_name}): started a new session"
                else:
                    notice = "the settings or the prompt changed: started a new session"
            live = LiveSession(DecodeSession(pair, encode_prompt(pair.tokenizer, prompt), cfg, keep_rounds=self.history),
                               prompt)
            fresh = AppState(sid=st.sid, kind="live", prompt=prompt, prompt_ids=list(live.session.prompt_ids),
                             meta=tio.session_meta(live.session), cfg=cfg)
        else:
            fresh = st
        t0 = time.perf_counter()
        live.session.step()
        live.seconds += time.perf_counter() - t0
        self.store.put(st.sid, live)
        s = live.session
        kept = s.rounds[-self.history:]
        dropped = s.round_count - len(kept)
        # Each step drops at most the oldest kept round; its text comes from the previous state's records.
        dropped_text = fresh.dropped_text + "".join(block_text(r) for r in fresh.rounds if fresh.dropped <= r.index < dropped)
        capped = f"history capped at {self.history} rounds; older rounds dropped" if dropped else ""
        return replace(
            fresh, rounds=kept, generated=list(s.generated), text=s.pair.tokenizer.decode(s.generated),
            seconds=live.seconds, done=s.done, view=len(kept) - 1, token=None, node=None,
            notice="; ".join(x for x in (notice, s.notice, capped) if x), dropped=dropped, dropped_text=dropped_text,
        )

    def step_token(self, st: AppState, prompt: str, cfg: DecodeConfig) -> AppState:
        """Next token of the shown round's block; past its end, the next round (decoding one if needed)."""
        r = st.round
        if r is not None and (st.token is None or st.token + 1 < r.block_length):
            return replace(st, token=0 if st.token is None else st.token + 1)
        if r is not None and st.view + 1 < len(st.rounds):
            return replace(st, view=st.view + 1, token=0)
        if st.kind not in ("empty", "live"):
            raise TevvizError("end of the imported rounds; Reset to decode the prompt instead")
        return replace(self.step(st, prompt, cfg), token=0)

    def reset(self, st: AppState) -> AppState:
        """Drop the live session; an ExitTrain trainer (and its "use" choice) stays."""
        self.store.drop(st.sid, keep_training=True)
        return AppState(sid=st.sid)

    def baseline(self, st: AppState, prompt: str, cfg: DecodeConfig) -> AppState:
        """Time plain autoregressive decoding of the target on the same prompt and settings."""
        pair = self.source.get()
        result = autoregressive(pair, encode_prompt(pair.tokenizer, prompt), cfg)
        entry = {"tokens": len(result.token_ids), "seconds": result.seconds, "tokens_per_s": result.tokens_per_s,
                 "prompt": prompt, "cfg": cfg}
        return replace(st, baseline=entry)

    def decode_all(self, prompt: str, cfg: DecodeConfig, draft: str | None, label: str, progress=None,
                   sid: str | None = None) -> Decoded:
        """Decode `prompt` to the end with `cfg` (and another draft model if `draft` is given).

        Without `draft`, browser session `sid` decodes with its own draft (the trained one if chosen).
        """
        pair = self.source.get(draft) if draft or sid is None else self.session_pair(sid)
        session = DecodeSession(pair, encode_prompt(pair.tokenizer, prompt), cfg)
        t0 = time.perf_counter()
        while not session.done:
            session.step()
            if progress is not None:
                progress(len(session.generated) / cfg.max_new_tokens, desc=f"decoding {label}")
        seconds = time.perf_counter() - t0
        return Decoded(label, list(session.rounds), len(session.generated), seconds,
                       pair.tokenizer.decode(session.generated))

    # -- browsing --------------------------------------------------------------------------------

    @staticmethod
    def view(st: AppState, index) -> AppState:
        if not st.rounds:
            return st
        return replace(st, view=min(max(int(index or 0), 0), len(st.rounds) - 1), token=None, node=None)

    @staticmethod
    def select_node(st: AppState, node) -> AppState:
        return replace(st, node=None if node is None or node == "" else int(node), token=None)

    # -- re-scoring and comparison ----------------------------------------------------------------

    def prefix(self, st: AppState, index: int, prompt_box: str, tokenizer) -> tuple[list[int], str]:
        """The committed tokens before round `index`'s root token, and a note when they had to be guessed."""
        if st.prompt_ids:
            end = context_ends(st)[index]
            if end is not None:
                return (st.prompt_ids + st.generated)[: end - 1], ""
            context = list(st.prompt_ids)
            for r in st.rounds[:index]:
                context += r.committed
            note = "" if context and context[-1] == st.rounds[index].tokens[0] and not st.dropped else (
                "the round's root token is not the last committed token; the stored context may be incomplete")
            return context[:-1], note
        ids = tokenizer(prompt_box)["input_ids"] if prompt_box and prompt_box.strip() else []
        return ids, (f"the context before this tree is unknown for a {st.kind} import: "
                     f"used the prompt box text ({len(ids)} tokens) as the prefix")

    def rescore(self, st: AppState, prompt_box: str, sampling: SamplingConfig) -> AppState:
        """Fill in p_edge, P, rho, w and missing tokens of the shown round with the loaded target."""
        r = st.round
        if r is None:
            raise TevvizError("no round to re-score; import a file or decode first")
        pair = self.source.get()
        prefix, note = self.prefix(st, st.view, prompt_box, pair.tokenizer)
        known_bonus = r.bonus_token is not None and r.bonus_token >= 0
        check_ids(pair, prefix + r.tokens + ([r.bonus_token] if known_bonus else []))
        new = rescore(pair, prefix, r, sampling)
        if known_bonus:
            new = replace(new, bonus_text=pair.tokenizer.decode([r.bonus_token]))
        rounds = list(st.rounds)
        rounds[st.view] = new
        said = f"re-scored round {r.index} with {pair.target_name} at temperature {sampling.temperature:g}"
        return replace(st, rounds=rounds, notice="; ".join(x for x in (said, note) if x))

    def compare(self, st: AppState, prompt_box: str, sampling: SamplingConfig, draws: int, seed: int,
                progress=None) -> Comparison:
        r = st.round
        if r is None:
            raise TevvizError("no round to compare on; press Step first")
        pair = self.source.get()
        prefix, note = self.prefix(st, st.view, prompt_box, pair.tokenizer)
        if st.kind == "live" and st.cfg is not None:
            sampling = st.cfg.sampling
        out = compare_verifiers(pair, prefix, r, sampling, draws, seed, progress=progress)
        return replace(out, note="; ".join(x for x in (out.note, note) if x))

    # -- ExitTrain ---------------------------------------------------------------------------------

    def train(self, st: AppState, tcfg: TrainConfig, cfg: DecodeConfig, progress=None) -> TrainReport:
        """`tcfg.steps` ExitTrain steps of this browser session's copy of the draft on its own rounds.

        The live session's settings (builder, sampling, verifier) win over `cfg`, the Decode tab's.
        The first call copies the draft; the pair's own draft is never changed.
        """
        if st.kind == "live" and st.cfg is not None:
            cfg = st.cfg
        tcfg = replace(tcfg, builder=cfg.builder)
        if not st.rounds:
            raise TevvizError("no rounds to train on yet: press Step or Run in the Decode tab first")
        base = self.source.get()
        contexts = [c for c in training_contexts(st) if fits(base, c.tokens, cfg.builder)]
        if not contexts:
            raise TevvizError("none of the shown rounds has a known context with room for a full-depth tree (an "
                              "import without its prompt, or a stream at the context length); decode a prompt first")
        check_ids(base, contexts[-1].tokens + contexts[-1].continuation)
        old = self.store.training(st.sid)
        notice = ""
        if old is not None and replace(old.trainer.cfg, steps=tcfg.steps) == tcfg:
            trainer = old.trainer
            trainer.set_contexts(contexts)  # the session may have grown since the last click
        else:
            trainer = ExitTrainer(base, contexts, tcfg, draft=None if old is None else old.trainer.draft)
            if old is not None:
                notice = "the settings changed: a fresh optimiser continues from the trained draft"
        log = [] if old is None else list(old.log)
        for i in range(tcfg.steps):
            if progress is not None:
                progress((i, tcfg.steps), desc=f"train step {len(log) + 1}")
            entry = trainer.step()
            log.append({**asdict(entry), "step": len(log) + 1, "objective": tcfg.objective})
        trained = ModelPair(base.target, trainer.trained_draft(), base.tokenizer, base.target_name,
                            f"{base.draft_name} + ExitTrain ({len(log)} steps)")
        training = Training(trainer, log, trained, use=old is not None and old.use,
                            before=None if old is None else old.before)
        self.store.put_training(st.sid, training)
        evals = spread(contexts, EVAL_CONTEXTS)
        key = (tuple(tuple(c.tokens) for c in evals), cfg.builder, cfg.sampling, cfg.verifier)
        args = (evals, cfg.builder, cfg.sampling, cfg.verifier)
        if training.before is None or training.before[0] != key:
            training.before = (key, drafter_metrics(base, *args, progress=progress, label="original"))
        before = training.before[1]
        after = drafter_metrics(trained, *args, progress=progress, label="trained")
        table = [{"drafter": "original", **before}, {"drafter": f"trained ({len(log)} steps)", **after}]
        return TrainReport(log, table, len(contexts), cfg.sampling.temperature, training.use, notice,
                           self._moved(st, base, training))

    def _moved(self, st: AppState, base: ModelPair, training: Training) -> ExitMassMove | None:
        ends = context_ends(st)
        if not 0 <= st.view < len(ends) or ends[st.view] is None:
            return None
        context = (st.prompt_ids + st.generated)[: ends[st.view]]
        builder, temperature = training.trainer.cfg.builder, training.trainer.cfg.weight_temperature
        if not fits(base, context, builder):
            return None
        index = st.rounds[st.view].index
        before = weighted_tree(base, base.draft, context, builder, index, temperature)
        after = weighted_tree(base, training.pair.draft, context, builder, index, temperature)
        return ExitMassMove(index, before, after, exit_mass_changes(before, after))

    def exit_mass(self, st: AppState) -> ExitMassMove:
        """Where the exit mass moved on the shown round's context: original against trained drafter."""
        training = self.store.training(st.sid)
        if training is None:
            raise TevvizError("no trained draft in this session yet: press Train step first")
        moved = self._moved(st, self.source.get(), training)
        if moved is None:
            raise TevvizError("the shown round has no known context with room for a full-depth tree; "
                              "show another round or step one in the Decode tab")
        return moved

    def train_revert(self, st: AppState) -> str:
        """Forget the trained copy: this session decodes with the original draft again."""
        had = self.store.training(st.sid) is not None
        self.store.put_training(st.sid, None)
        return ("reverted: the trained copy is gone and this session decodes with the original draft" if had
                else "nothing to revert: this session uses the original draft")

    def train_use(self, st: AppState, use: bool) -> str:
        """Choose whether Step and Run decode with the trained draft (the next Step starts a new session)."""
        training = self.store.training(st.sid)
        if training is None:
            if use:
                raise TevvizError("no trained draft in this session yet: press Train step first")
            return self.train_status(st)
        training.use = bool(use)
        return self.train_status(st) + " (the next Step starts a new session)"

    def train_status(self, st: AppState) -> str:
        training = self.store.training(st.sid)
        if training is None:
            return "Step and Run decode with the original draft."
        steps = len(training.log)
        if training.use:
            return f"Step and Run decode with the trained draft ({steps} steps)."
        return f"Step and Run decode with the original draft; a trained draft ({steps} steps) is ready."

    # -- import and export --------------------------------------------------------------------------

    def import_file(self, st: AppState, path: str) -> AppState:
        imported = tio.load(path)
        if not imported.rounds:
            raise TevvizError("the file holds no rounds")
        self.store.drop(st.sid, keep_training=True)
        said = f"imported {len(imported.rounds)} round(s) from a {imported.kind} file"
        if imported.kind == "ddtree":
            said += "; it has no target scores until you Re-score"
        dropped = max(len(imported.rounds) - self.history, 0)
        if dropped:
            said += f"; history capped at {self.history} rounds; older rounds dropped"
        return AppState(sid=st.sid, kind=imported.kind, prompt=imported.prompt,
                        prompt_ids=list(imported.prompt_token_ids), generated=list(imported.token_ids),
                        text=imported.text, rounds=list(imported.rounds[dropped:]), meta=dict(imported.meta),
                        seconds=sum(sum(r.stage_ms.values()) for r in imported.rounds) / 1e3, view=0, notice=said,
                        dropped=dropped, dropped_text="".join(block_text(r) for r in imported.rounds[:dropped]))

    def session_json(self, st: AppState) -> dict:
        return tio.session_dict(st.meta, st.prompt, st.prompt_ids, st.generated, st.text, st.rounds)

    def export(self, st: AppState, tree_html: str) -> tuple[Path, Path, Path]:
        """Write the shown round's JSON, the session JSON and the tree figure HTML; returns their paths."""
        r = st.round
        if r is None:
            raise TevvizError("nothing to export yet; press Step or import a file")
        d = self.store.export_dir(st.sid)
        round_path = d / f"tevviz-round-{r.index}.json"
        session_path = d / "tevviz-session.json"
        html_path = d / f"tevviz-tree-round-{r.index}.html"
        round_path.write_text(json.dumps(tio.round_dict(r)), encoding="utf-8")
        session_path.write_text(json.dumps(self.session_json(st)), encoding="utf-8")
        html_path.write_text(tree_html, encoding="utf-8")
        return round_path, session_path, html_path

