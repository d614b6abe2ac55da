"""What the app keeps between clicks: the browser's AppState, the server's SessionStore, and widget values
turned into engine configs.

The browser holds an `AppState` (plain values and RoundRecords, in `gr.State`); the DecodeSession, which
owns tensors and KV caches, stays on the server in a `SessionStore` keyed by the state's id, beside the
ExitTrain panel's session-local trainer (a private copy of the draft), and is freed with it.
"""

from __future__ import annotations

import math
import shutil
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..engine import BuilderConfig, DecodeConfig, DecodeSession, ModelPair, RoundRecord, SamplingConfig, TevvizError
from ..engine.train.contexts import context_ends
from ..engine.train.evaluation import DrafterMetrics
from ..engine.train.exittrain import DraftTrainer, TrainConfig

IDLE_EXPIRY_S = 3600.0  # a live session nobody has touched for this long is dropped
MAX_HISTORY = 500  # rounds a browser session keeps; older ones are dropped with a notice
MAX_TRAIN_STEPS = 200  # per Train step click
MAX_TRAIN_BATCH = 64


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
                    max_new_tokens: int, chat: bool = False, auto_budget: bool = False,
                    stop_below: float = 0.0) -> tuple[str, DecodeConfig]:
    """The prompt and the DecodeConfig that the settings widgets describe (raises TevvizError). `stop_below` is the
    sampled builder's; other trees leave it, as they leave the static branching."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise TevvizError("the prompt is empty")
    try:
        shape = tuple(int(x) for x in str(branching).replace(" ", "").split(",") if x)
    except ValueError:
        raise TevvizError(f"static branching must be comma-separated integers, got {branching!r}") from None
    sampling = SamplingConfig(temperature=_float(temperature, "temperature"), top_k=_int(top_k, "top-k"),
                              top_p=_float(top_p, "top-p"))
    stops = builder == "sampled"  # with auto on, BuilderConfig says why a stop does not apply
    tree = BuilderConfig(name=builder, budget=_int(budget, "budget B"), depth=_int(depth, "depth H"),
                         children=_int(children, "children K"), width=_int(width, "width W"), branching=shape,
                         auto=bool(auto_budget),
                         stop_below=_float(stop_below or 0.0, "stop below p") if stops else 0.0)
    cfg = DecodeConfig(sampling=sampling, builder=tree, verifier=verifier,
                       max_new_tokens=_int(max_new_tokens, "max new tokens"), seed=_int(seed, "seed"),
                       chat=bool(chat))
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


# ---------------------------------------------------------------------------------------------
# State held by the browser.


@dataclass(frozen=True)
class AppState:
    """What one browser is looking at: plain values and RoundRecords only (no tensors, no caches)."""

    sid: str = field(default_factory=lambda: uuid.uuid4().hex)
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)  # this run's file on the server (app/run_store.py)
    user: str = ""  # the browser's id (kept in its localStorage): its folder of runs; "" before the page has loaded
    pinned: str | None = None  # the run pinned as A for comparisons
    compared: tuple[str, int] | None = None  # the comparison shown: run B's id and the round compared
    origin: str = "empty"  # where the rounds came from: "empty", "live", "run", "scan", or an imported file's kind
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
    node: int | str | None = None  # node selected (a click or the dropdown): an id, "bonus" or "ghost:N"
    expanded: frozenset = frozenset()  # parents whose "+N" fold is open in the shown round
    fold_below: float | None = None  # Fold by mass: nodes under this target flow fold in every round (None: by room)
    cell: tuple[int, int] | None = None  # a drafter's-rows cell clicked: (depth, token id), its nodes ringed
    scale: str = "auto"  # the tree's colour scale: auto, linear or log
    metric: str = "P"  # the tree's colour, as last chosen (what a width report redraws with)
    width: int = 1000  # px of the browser's tree view, which the labels are laid out for
    baseline: dict | None = None  # autoregressive timing on the same prompt and settings
    notice: str = ""
    dropped: int = 0  # rounds before `rounds[0]` that the history cap dropped
    dropped_text: str = ""  # the blocks those rounds committed, shown as plain text
    ghosts: bool = False  # draw the optimal tree's missing branches where a round has one
    optimal_every: bool = False  # compute the optimal tree after every live round
    # Serving engines' acceptance (engines.acceptance.EngineAcceptance), overlaid on the acceptance-by-depth figure
    engines: tuple = ()

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
        if isinstance(self.node, int):
            return self.node if 0 <= self.node < r.size else None
        return self.node

    @property
    def stream(self) -> list[int]:
        """Prompt and generated token ids."""
        return self.prompt_ids + self.generated

    def context_ends(self) -> list[int | None]:
        """Per kept round: the stream's length up to and including its root token (None where unknown)."""
        return context_ends(self.stream, self.rounds)

    def builder(self) -> dict:
        """The run's builder settings as its session file keeps them ({} where it does not say)."""
        b = self.meta.get("builder") if isinstance(self.meta, dict) else None
        return b if isinstance(b, dict) else {}

    def depth_limit(self, index: int) -> int | None:
        """H of kept round `index` as decoding ran it: its builder's depth, trimmed as decoding trims it near the
        token limit; None where the settings do not say (a builder without one depth, a file without settings)."""
        builder = self.builder()
        depth = builder.get("depth") if builder.get("name") in ("best-first", "chain", "sampled") else None
        if not isinstance(depth, int):
            return None
        end, limit = self.context_ends()[index], self.meta.get("max_new_tokens")
        if end is not None and isinstance(limit, int):
            depth = min(depth, limit - (end - len(self.prompt_ids)) - 1)
        return depth


def view_options(st: AppState) -> dict:
    """What a new run keeps of the old one's view: ghosts, the optimal-tree option, the colour scale, the width, the
    browser's id, the pinned run, the comparison shown and the fold by mass."""
    return {"ghosts": st.ghosts, "optimal_every": st.optimal_every, "scale": st.scale, "width": st.width,
            "user": st.user, "pinned": st.pinned, "compared": st.compared, "metric": st.metric,
            "fold_below": st.fold_below}


def settings_in_force(st: AppState, values: dict) -> DecodeConfig:
    """The decoding settings for `st`: a live session's own win over the Decode tab's widget `values`."""
    if st.origin == "live" and st.cfg is not None:
        return st.cfg
    return decode_settings(**values)[1]


def block_text(r: RoundRecord) -> str:
    """The text a round committed as the app shows it: its accepted tokens, then the bonus token."""
    return "".join(r.texts[v] or "" for v in r.accepted[1:]) + (r.bonus_text or "")


# ---------------------------------------------------------------------------------------------
# The live sessions held by the server.


@dataclass
class LiveSession:
    """A DecodeSession and what the app adds to it: the run it decodes and, for a run continued from a file or an
    earlier session, what came before its first round."""

    session: DecodeSession
    prompt: str
    cfg: DecodeConfig | None = None  # the settings asked for (a continuation's session has fewer tokens left)
    run_id: str = ""
    offset: int = 0  # rounds before the session's first
    base: list[RoundRecord] = field(default_factory=list)  # the run's kept rounds from before
    before: list[int] = field(default_factory=list)  # the run's generated tokens from before
    seconds: float = 0.0


@dataclass(frozen=True)
class Baseline:
    """The original drafter's before/after row and what it was measured on (kept while those stay the same)."""

    key: tuple  # the evaluation contexts, builder, sampling and verifier
    metrics: DrafterMetrics


@dataclass
class Training:
    """One browser session's ExitTrain state; the process-wide pair's draft is never touched."""

    # the private, trainable copy of the draft and its optimiser; None for a copy read back after a restart
    # (app/training_files.py) until its next Train step
    trainer: DraftTrainer | None
    log: list[dict]  # every step since the last Revert: step, loss, l_tok, l_exit, C_p, seconds
    pair: ModelPair  # the original target and tokenizer with a frozen snapshot of the trained draft
    use: bool = False  # Step and Run decode with `pair` instead of the original pair
    before: Baseline | None = None  # the original drafter's row on the evaluation contexts
    config: TrainConfig | None = None  # the settings of the last steps


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
        self._trained: dict[str, str] = {}  # browser id -> the session id holding its newest ExitTrain copy

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

    def put_training(self, sid: str, training: Training | None, user: str = "") -> None:
        """Set (None: drop) session `sid`'s ExitTrain copy; with the browser's id, a reload of it adopts the copy."""
        self._set(sid, training=training)
        if user:
            with self._lock:
                if training is not None:
                    self._trained[user] = sid
                elif self._trained.get(user) == sid:
                    del self._trained[user]

    def adopt_training(self, sid: str, user: str) -> Training | None:
        """The ExitTrain copy this browser made in another session of it (before a reload), now session `sid`'s too,
        not in use (as the reloaded page's box shows); None where there is none or `sid` has its own."""
        if not user or self.training(sid) is not None:
            return None
        with self._lock:
            other = self._trained.get(user)
        found = None if other is None or other == sid else self.training(other)
        if found is None:
            return None
        mine = replace(found, log=list(found.log), use=False)  # the same trainer: both pages train one copy
        self.put_training(sid, mine, user)
        return mine

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
