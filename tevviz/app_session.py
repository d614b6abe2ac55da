"""Per-browser-session logic of the web app, apart from the widgets: models, live sessions, view state.

The browser holds an `AppState` (plain values and RoundRecords, in `gr.State`); the DecodeSession,
which owns tensors and KV caches, stays on the server in a `SessionStore` keyed by the state's id.
Every `Controller` method takes a state and returns a new one, or raises TevvizError and leaves
both the state and the store as they were.
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field, replace
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
from .engine.exit_law import exit_law
from .engine.models import assets_dir, check_cache, check_vocabularies, load_model
from .engine.sampling import processed_probs
from .engine.scoring import rescore, tree_logits
from .engine.tree import ancestor_mask, from_parents
from .engine.verifiers import VERIFIERS

COMPARED_VERIFIERS = ("tev", "predraw", "residual")
IDLE_EXPIRY_S = 3600.0  # a live session nobody has touched for this long is dropped
MAX_DRAWS = 100_000
CHI2_MIN_EXPECTED = 5.0  # cells expected fewer times than this are pooled for the chi-square test


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
    used: float = field(default_factory=time.monotonic)


class SessionStore:
    """Live sessions by state id, dropped after `ttl_s` idle seconds or when the browser's state is deleted."""

    def __init__(self, ttl_s: float = IDLE_EXPIRY_S):
        self.ttl_s = ttl_s
        self._items: dict[str, LiveSession] = {}
        self._lock = threading.Lock()
        self._export_root: Path | None = None  # made on the first export

    def __len__(self) -> int:
        return len(self._items)

    def get(self, sid: str) -> LiveSession | None:
        self.sweep()
        with self._lock:
            live = self._items.get(sid)
            if live is not None:
                live.used = time.monotonic()
            return live

    def put(self, sid: str, live: LiveSession) -> None:
        live.used = time.monotonic()
        with self._lock:
            self._items[sid] = live

    def drop(self, sid: str) -> None:
        with self._lock:
            self._items.pop(sid, None)
        if self._export_root is not None:
            shutil.rmtree(self._export_root / sid, ignore_errors=True)

    def sweep(self) -> None:
        now = time.monotonic()
        with self._lock:
            stale = [sid for sid, live in self._items.items() if now - live.used > self.ttl_s]
        for sid in stale:
            self.drop(sid)

    def export_dir(self, sid: str) -> Path:
        if self._export_root is None:
            self._export_root = Path(tempfile.mkdtemp(prefix="tevviz-app-"))
        d = self._export_root / sid
        d.mkdir(parents=True, exist_ok=True)
        return d


# ---------------------------------------------------------------------------------------------
# Verifier comparison: empirical exit law against the exact one.


def chi_square_p(observed: list[int], expected_probs: list[float]) -> tuple[float, int, float]:
    """Pearson's chi-square goodness of fit: (statistic, degrees of freedom, p-value).

    Cells expected fewer than CHI2_MIN_EXPECTED times are pooled into one cell; p is the upper
    regularised incomplete gamma Q(df/2, stat/2).
    """
    n = sum(observed)
    if n == 0:
        return 0.0, 0, 1.0
    if any(o > 0 and p <= 0 for o, p in zip(observed, expected_probs)):
        return math.inf, 0, 0.0  # draws where the law has no mass
    cells, pool_obs, pool_exp = [], 0, 0.0
    for o, p in zip(observed, expected_probs):
        e = n * p
        if e >= CHI2_MIN_EXPECTED:
            cells.append((o, e))
        else:
            pool_obs, pool_exp = pool_obs + o, pool_exp + e
    if pool_exp > 0:
        if pool_exp < CHI2_MIN_EXPECTED and cells:
            # Too little mass to stand alone: merge the pool into the smallest regular cell.
            i = min(range(len(cells)), key=lambda j: cells[j][1])
            cells[i] = (cells[i][0] + pool_obs, cells[i][1] + pool_exp)
        else:
            cells.append((pool_obs, pool_exp))
    stat = sum((o - e) ** 2 / e for o, e in cells if e > 0)
    df = len(cells) - 1
    if df <= 0:
        return stat, 0, 1.0
    p = torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64), torch.tensor(stat / 2, dtype=torch.float64))
    return stat, df, float(p)


@dataclass(frozen=True)
class VerifierLaw:
    """One verifier's draws on a fixed tree."""

    name: str
    freqs: list[float]  # empirical exit frequency per node
    tv: float  # total-variation distance to the exact w
    chi2: float
    df: int
    p: float
    us_per_draw: float
    mean_length: float  # mean block length L = d(exit) + 1


@dataclass(frozen=True)
class Comparison:
    """The exact exit law of one round's tree and the verifiers' empirical laws."""

    round_index: int
    w: list[float]
    ceiling: float  # 1 + C_p
    draws: int
    laws: list[VerifierLaw]
    node_labels: list[str]
    note: str


def compare_verifiers(pair: ModelPair, prefix: list[int], record: RoundRecord, sampling: SamplingConfig,
                      draws: int, seed: int, names=COMPARED_VERIFIERS, progress=None) -> Comparison:
    """Re-score `record`'s tree under `prefix` and draw each verifier `draws` times with a seeded generator."""
    if not 1 <= draws <= MAX_DRAWS:
        raise TevvizError(f"draws M must lie in [1, {MAX_DRAWS}], got {draws}")
    device = pair.device
    tree = from_parents(record.tokens, record.parents, record.draft_logprobs, device=device)
    check_ids(pair, prefix + record.tokens)
    anc = ancestor_mask(tree)
    with torch.no_grad():
        logits = tree_logits(pair.target, prefix, tree, anc)  # (N, V)
        ex = exit_law(tree, processed_probs(logits, sampling))
    w = ex.w.tolist()
    depths = record.depths
    laws = []
    for i, name in enumerate(names):
        if progress is not None:
            progress((i, len(names)), desc=f"drawing {name}")
        verify = VERIFIERS[name]
        gen = torch.Generator(device=device).manual_seed(seed)
        counts = [0] * record.size
        t0 = time.perf_counter()
        with torch.no_grad():
            for _ in range(draws):
                counts[int(verify(tree, logits, sampling, gen, anc).exit_node)] += 1
        us = (time.perf_counter() - t0) / draws * 1e6
        freqs = [c / draws for c in counts]
        stat, df, p = chi_square_p(counts, w)
        laws.append(VerifierLaw(
            name, freqs, 0.5 * sum(abs(f - x) for f, x in zip(freqs, w)), stat, df, p, us,
            sum(f * (d + 1) for f, d in zip(freqs, depths)),
        ))
    labels = [f"{v} {record.texts[v]!r}"[:24] for v in range(record.size)]
    note = "temperature 0: the exit law is a point mass, so every verifier agrees exactly" if sampling.greedy else ""
    return Comparison(record.index, w, 1 + float(ex.C_p), draws, laws, labels, note)


def check_ids(pair: ModelPair, ids: list[int]) -> None:
    vocab = pair.target.get_output_embeddings().weight.shape[0]
    bad = next((t for t in ids if not 0 <= t < vocab), None)
    if bad is not None:
        raise TevvizError(f"token id {bad} is outside the loaded target's vocabulary of {vocab}; "
                          "was this tree decoded with other models?")


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

    def __init__(self, source: PairSource, store: SessionStore | None = None):
        self.source = source
        self.store = store or SessionStore()

    # -- decoding ------------------------------------------------------------------------------

    def step(self, st: AppState, prompt: str, cfg: DecodeConfig) -> AppState:
        """One round of the live session, starting a new one when the prompt or settings changed."""
        live = self.store.get(st.sid)
        notice = ""
        if live is None or st.kind != "live" or live.prompt != prompt or live.session.cfg != cfg:
            if st.kind == "live" and st.rounds:
                notice = ("the settings or the prompt changed: started a new session" if live is not None
                          else "the previous session had expired: started a new session")
            pair = self.source.get()
            live = LiveSession(DecodeSession(pair, encode_prompt(pair.tokenizer, prompt), cfg), prompt)
            fresh = AppState(sid=st.sid, kind="live", prompt=prompt, prompt_ids=list(live.session.prompt_ids),
                             meta=tio.session_meta(live.session), cfg=cfg)
        else:
            fresh = st
        t0 = time.perf_counter()
        live.session.step()
        live.seconds += time.perf_counter() - t0
        self.store.put(st.sid, live)
        s = live.session
        rounds = list(s.rounds)
        return replace(
            fresh, rounds=rounds, generated=list(s.generated), text=s.pair.tokenizer.decode(s.generated),
            seconds=live.seconds, done=s.done, view=len(rounds) - 1, token=None, node=None,
            notice="; ".join(x for x in (notice, s.notice) if x),
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
        self.store.drop(st.sid)
        return AppState(sid=st.sid)

    def baseline(self, st: AppState, prompt: str, cfg: DecodeConfig) -> AppState:
        """Time plain autoregressive decoding of the target on the same prompt and settings."""
        pair = self.source.get()
        result = autoregressive(pair, encode_prompt(pair.tokenizer, prompt), cfg)
        entry = {"tokens": len(result.token_ids), "seconds": result.seconds, "tokens_per_s": result.tokens_per_s,
                 "prompt": prompt, "cfg": cfg}
        return replace(st, baseline=entry)

    def decode_all(self, prompt: str, cfg: DecodeConfig, draft: str | None, label: str, progress=None) -> Decoded:
        """Decode `prompt` to the end with `cfg` (and another draft model if `draft` is given)."""
        pair = self.source.get(draft or None)
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
            context = list(st.prompt_ids)
            for r in st.rounds[:index]:
                context += r.committed
            note = "" if context and context[-1] == st.rounds[index].tokens[0] else (
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

    # -- import and export --------------------------------------------------------------------------

    def import_file(self, st: AppState, path: str) -> AppState:
        imported = tio.load(path)
        if not imported.rounds:
            raise TevvizError("the file holds no rounds")
        self.store.drop(st.sid)
        said = f"imported {len(imported.rounds)} round(s) from a {imported.kind} file"
        if imported.kind == "ddtree":
            said += "; it has no target scores until you Re-score"
        return AppState(sid=st.sid, kind=imported.kind, prompt=imported.prompt,
                        prompt_ids=list(imported.prompt_token_ids), generated=list(imported.token_ids),
                        text=imported.text, rounds=list(imported.rounds), meta=dict(imported.meta),
                        seconds=sum(sum(r.stage_ms.values()) for r in imported.rounds) / 1e3, view=0, notice=said)

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

