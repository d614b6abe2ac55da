"""The app's actions apart from the widgets: one `Controller` method per user action.

Every method takes an AppState and returns a new one (or a report), or raises TevvizError and leaves
both the state and the SessionStore as they were.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from ..engine import (
    DecodeConfig,
    DecodeSession,
    ModelPair,
    RoundRecord,
    SamplingConfig,
    TevvizError,
    best_plain,
    encode_prompt,
)
from ..engine.core.scoring import check_ids, rescore
from ..engine.decode.pass_costs import measure_pass_costs
from ..engine.records import io as tio
from ..engine.verify.comparison import Comparison, compare_verifiers
from ..files import atomic_write, atomic_write_json
from .model_thread import on_model_thread
from .navigation import step_walk
from .run_store import RunStore, new_id
from .runs import continuation, remaining, reopened, run_name, session_of
from .source import PairSource
from .state import MAX_HISTORY, AppState, LiveSession, SessionStore, block_text, view_options
from .stops import Job, Stopped, Stops
from .training_actions import TrainingActions

logger = logging.getLogger("tevviz")


@dataclass(frozen=True)
class Decoded:
    """A whole decode of one configuration (side-by-side comparison)."""

    label: str
    rounds: list[RoundRecord]
    tokens: int
    seconds: float
    text: str
    prompt: str = ""
    prompt_ids: list[int] = field(default_factory=list)
    generated: list[int] = field(default_factory=list)
    meta: dict = field(default_factory=dict)
    stopped: bool = False  # ended by Stop: the rounds decoded until then
    side: str = ""  # "A" or "B" in the side-by-side comparison

    @property
    def name(self) -> str:
        """The label with its side: "A: tev, best-first, B=32"."""
        return f"{self.side}: {self.label}" if self.side else self.label


class Controller(TrainingActions):
    """Turns user actions into engine calls; holds the model source and the live sessions."""

    def __init__(self, source: PairSource, store: SessionStore | None = None, history: int = MAX_HISTORY,
                 runs: RunStore | None = None):
        self.source = source
        self.store = store or SessionStore()
        self.runs = runs or RunStore()
        self.history = history  # rounds an AppState keeps
        self.stops = Stops()  # the running actions' stop flags, raised by their Stop buttons

    def session_pair(self, sid: str) -> ModelPair:
        """The pair this browser session decodes with: the trained draft when ExitTrain's "use" is on."""
        training = self.store.training(sid)
        return training.pair if training is not None and training.use else self.source.get()

    # -- decoding ------------------------------------------------------------------------------

    @on_model_thread
    def step(self, st: AppState, prompt: str, cfg: DecodeConfig) -> AppState:
        """One round of the shown run: its live session goes on; a run without one (imported, reopened, expired)
        continues where the models allow; a change of prompt, settings or draft starts a new run, and the old one
        stays in the run picker."""
        pair = self.session_pair(st.sid)
        live = self.store.get(st.sid)
        fresh, notice = st, ""
        if not (live is not None and live.run_id == st.run_id and live.prompt == prompt and live.cfg == cfg
                and live.session.pair is pair):
            live, fresh, notice = self._begin(st, live, pair, prompt, cfg)
        t0 = time.perf_counter()
        live.session.step()
        live.seconds += time.perf_counter() - t0  # decoding time only: the optimal tree below is analysis
        if st.optimal_every:
            live.session.optimal()
        self.store.put(st.sid, live)
        s = live.session
        new = [replace(r, index=r.index + live.offset) for r in s.rounds[-self.history:]]
        kept = (live.base + new)[-self.history:]
        dropped = live.offset + s.round_count - len(kept)
        # Each step drops at most the oldest kept round; its text comes from the previous state's records.
        dropped_text = fresh.dropped_text + "".join(
            block_text(r) for r in fresh.rounds if fresh.dropped <= r.index < dropped)
        capped = f"history capped at {self.history} rounds; older rounds dropped" if dropped else ""
        generated = live.before + list(s.generated)
        out = replace(
            fresh, rounds=kept, generated=generated, text=s.pair.tokenizer.decode(generated),
            seconds=live.seconds, done=s.done, view=len(kept) - 1, token=None, node=None, expanded=frozenset(),
            notice="; ".join(x for x in (notice, s.notice, capped) if x), dropped=dropped, dropped_text=dropped_text,
        )
        self.keep(out)
        return out

    def _begin(self, st: AppState, live: LiveSession | None, pair: ModelPair, prompt: str, cfg: DecodeConfig):
        """The live session a Step runs on when the shown run has none that fits: the run continued, or a new run."""
        changed = ("the draft changed"
                   if live is not None and live.run_id == st.run_id and live.session.pair is not pair
                   else "the settings or the prompt changed")
        if st.rounds and not (st.origin == "live" and live is not None and live.run_id == st.run_id):
            try:  # an imported, reopened or expired run: go on from its last token
                stream, _ = continuation(st, pair, prompt, cfg)
                session = DecodeSession(pair, stream, remaining(cfg, len(st.generated)), keep_rounds=self.history)
                live = LiveSession(session, prompt, cfg=cfg, run_id=st.run_id, offset=st.dropped + len(st.rounds),
                                   base=list(st.rounds), before=list(st.generated), seconds=st.seconds)
                said = (f"continued run {run_name(st)} from its token {len(st.generated)} with its own settings"
                        + (" (at T > 0 the draws from here are another exact sample than the run's own)"
                           if cfg.sampling.temperature > 0 else ""))
                # The session decodes the tokens left; the run keeps its own limit, as its settings box holds it.
                meta = {**st.meta, **tio.session_meta(session), "max_new_tokens": cfg.max_new_tokens}
                return live, replace(st, origin="live", cfg=cfg, meta=meta), said
            except TevvizError as e:
                changed = f"run {run_name(st)} cannot go on here ({e})"
        session = DecodeSession(pair, encode_prompt(pair.tokenizer, prompt, chat=cfg.chat), cfg,
                                keep_rounds=self.history)
        fresh = AppState(sid=st.sid, **view_options(st), origin="live", prompt=prompt,
                         prompt_ids=list(session.prompt_ids), meta=tio.session_meta(session), cfg=cfg)
        live = LiveSession(session, prompt, cfg=cfg, run_id=fresh.run_id)
        notice = ""
        if st.rounds:
            notice = f"{changed}: started a new run; {run_name(st)} is kept in the run picker"
            logger.info("session %s: %s", st.sid[:8], notice)
        return live, fresh, notice

    def keep(self, st: AppState, wait: bool = False) -> None:
        """Save the run shown to this browser's runs on the server (in the background unless `wait`)."""
        if st.user and st.rounds:
            self.runs.save(st.user, st.run_id, session_of(st), wait=wait)

    def step_token(self, st: AppState, prompt: str, cfg: DecodeConfig) -> AppState:
        """Next token of the shown round's block; past its end, the next round (decoding one if needed)."""
        moved = step_walk(st, 1)
        if moved is not st:
            return moved
        return replace(self.step(st, prompt, cfg), token=0)

    def reset(self, st: AppState) -> AppState:
        """A new, empty run; the one shown stays in the run picker (an ExitTrain trainer and its "use" stay too)."""
        self.keep(st)
        self.store.drop(st.sid, keep_training=True)
        said = f"{run_name(st)} is kept in the run picker" if st.rounds else ""
        return AppState(sid=st.sid, **view_options(st), notice=said)

    @on_model_thread
    def baseline(self, st: AppState, prompt: str, cfg: DecodeConfig, progress=None) -> AppState:
        """Time the fastest plain decoding of the target on the same prompt and settings; `progress(done, total)`
        is told after each way's timing. `stop(st, "baseline")` ends it at the next target pass, keeping no baseline
        (the one timed before stays)."""
        pair = self.source.get()
        ids = encode_prompt(pair.tokenizer, prompt, chat=cfg.chat)

        def told(done: int, total: int) -> None:
            job.tick(done, total)
            if progress is not None:
                progress(done, total)

        with self.stops.job(st.sid, "baseline", "the baseline") as job, job.watch(pair.target):
            job.unit = "timings"
            try:
                # The fastest plain decoding of this prompt (every way timed short, the best one over the whole
                # length): a speed-up against any slower way would flatter the run.
                result = best_plain(pair, ids, cfg, progress=told)
                # The pair's forwards timed beside it: the limit a run is held against (speed.ideal_speed).
                costs = measure_pass_costs(pair, ids + list(result.token_ids),
                                           context=len(ids) + len(result.token_ids) // 2)
            except Stopped as e:
                kept = "the baseline timed before stays" if st.baseline else "no baseline is kept"
                raise e.saying(kept) from None
        entry = {"tokens": len(result.token_ids), "seconds": result.seconds, "tokens_per_s": result.tokens_per_s,
                 "way": result.way.label(), "ways": len(result.probe), "prompt": prompt, "cfg": cfg, "costs": costs,
                 "decode_threads": torch.get_num_threads()}  # this (the model) thread's: the rounds' count
        out = replace(st, baseline=entry)
        self.keep(out)  # the run's file keeps its baseline: a reload, a link or a restart shows it untimed again
        return out

    @on_model_thread
    def decode_all(self, prompt: str, cfg: DecodeConfig, draft: str | None, label: str, progress=None,
                   sid: str | None = None, job: Job | None = None) -> Decoded:
        """Decode `prompt` to the end with `cfg` (and another draft model if `draft` is given).

        Without `draft`, browser session `sid` decodes with its own draft (the trained one if chosen). With a `job`
        whose Stop is pressed, the decode ends after its current round, `stopped`, with the rounds so far.
        """
        pair = self.source.get(draft) if draft or sid is None else self.session_pair(sid)
        session = DecodeSession(pair, encode_prompt(pair.tokenizer, prompt, chat=cfg.chat), cfg)
        t0 = time.perf_counter()
        while not session.done and not (job is not None and job.stopped):
            session.step()
            if progress is not None:
                progress(len(session.generated) / cfg.max_new_tokens, desc=f"decoding {label}")
        seconds = time.perf_counter() - t0
        return Decoded(label, list(session.rounds), len(session.generated), seconds,
                       pair.tokenizer.decode(session.generated), prompt, list(session.prompt_ids),
                       list(session.generated), tio.session_meta(session), stopped=not session.done)

    @on_model_thread
    def decode_each(self, sid: str, sides: list[tuple[str, DecodeConfig, str, str]], progress=None) -> list[Decoded]:
        """`decode_all` of each (prompt, cfg, draft, label) in turn, as one action that `stop(st, "side")` ends after
        the round in progress: the decodes finished and the one stopped are returned, the rest never begun."""
        out: list[Decoded] = []
        with self.stops.job(sid, "side", "the side-by-side decoding") as job:
            for prompt, cfg, draft, label in sides:
                out.append(self.decode_all(prompt, cfg, draft, label, progress, sid=sid, job=job))
                if job.stopped:
                    break
        return out

    # -- re-scoring and comparison ----------------------------------------------------------------

    def prefix(self, st: AppState, index: int, prompt_box: str, tokenizer) -> tuple[list[int], str]:
        """The committed tokens before round `index`'s root token, and a note when they had to be guessed."""
        if st.prompt_ids:
            end = st.context_ends()[index]
            if end is not None:
                return st.stream[: end - 1], ""
            context = list(st.prompt_ids)
            for r in st.rounds[:index]:
                context += r.committed
            note = "" if context and context[-1] == st.rounds[index].tokens[0] and not st.dropped else (
                "the round's root token is not the last committed token; the stored context may be incomplete")
            return context[:-1], note
        ids = tokenizer(prompt_box)["input_ids"] if prompt_box and prompt_box.strip() else []
        return ids, (f"the context before this tree is unknown for a {st.origin} import: "
                     f"used the prompt box text ({len(ids)} tokens) as the prefix")

    @on_model_thread
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

    @on_model_thread
    def optimal(self, st: AppState, prompt_box: str, sampling: SamplingConfig) -> AppState:
        """The shown round with its optimal tree (top-B target prefixes), and ghost branches turned on.

        A live round is computed on a copy of its session's target cache; an imported one from its
        known context (or the prompt box) with the sampling in force.
        """
        r = st.round
        if r is None:
            raise TevvizError("no round to compute the optimal tree for; press Step or import a file first")
        if r.C_p is None:
            raise TevvizError("this round has no target scores; press Re-score first")
        live = self.store.get(st.sid)
        note = ""
        # Its passes run on a private copy of the cache: a stop between them leaves the run as it was.
        with self.stops.job(st.sid, "optimal", f"the optimal tree of round {r.index}") as job:
            job.unit = "target passes"
            try:
                if st.origin == "live" and live is not None and any(x.index == r.index for x in live.session.rounds):
                    with job.watch(live.session.pair.target, count=True):
                        new = live.session.optimal(r.index)
                else:
                    from ..engine.core.optimal import optimal_tree

                    pair = self.source.get()
                    prefix, note = self.prefix(st, st.view, prompt_box, pair.tokenizer)
                    check_ids(pair, prefix + r.tokens)
                    with job.watch(pair.target, count=True):
                        new = replace(r, optimal=optimal_tree(pair.target, pair.tokenizer, prefix + [r.tokens[0]],
                                                              sampling, r.size - 1, self._depth_limit(st, st.view)))
            except Stopped as e:
                raise e.saying("the round is as it was") from None
        rounds = list(st.rounds)
        rounds[st.view] = new
        gap = new.coverage_gap()
        said = (f"optimal tree of round {r.index}: C_p* = {gap.C_p_star:.3f} against C_p = {gap.C_p:.3f}, "
                f"{len(gap.ghosts)} ghost branches ({new.optimal.ms:.0f} ms, {new.optimal.passes} target passes)")
        return replace(st, rounds=rounds, ghosts=True, notice="; ".join(x for x in (said, note) if x))

    @staticmethod
    def _depth_limit(st: AppState, index: int) -> int:
        """H of an imported round: its session's builder depth, trimmed near the token limit as decoding trims it;
        the tree's own depth where the file does not say."""
        r, depth = st.rounds[index], st.depth_limit(index)
        return max(r.depths) if depth is None else max(depth, max(r.depths))

    @on_model_thread
    def compare(self, st: AppState, prompt_box: str, sampling: SamplingConfig, draws: int, seed: int,
                progress=None) -> Comparison:
        """Draw each verifier `draws` times on the shown round's tree; `sampling` is the one in force.

        `stop_compare` from another thread ends it early, with the statistics of the draws made."""
        r = st.round
        if r is None:
            raise TevvizError("no round to compare on; press Step first")
        pair = self.source.get()
        prefix, note = self.prefix(st, st.view, prompt_box, pair.tokenizer)
        with self.stops.job(st.sid, "compare") as job:
            out = compare_verifiers(pair, prefix, r, sampling, draws, seed, progress=progress,
                                    stop=lambda: job.stopped)
        return replace(out, note="; ".join(x for x in (out.note, note) if x))

    def stop_compare(self, st: AppState) -> bool:
        """Ask this browser session's running comparison to stop after its current chunk; whether one was running."""
        return bool(self.stops.stop(st.sid, "compare"))

    def stop(self, st: AppState, *actions: str) -> list[str]:
        """Ask this browser session's running `actions` (baseline, optimal, side, compare, train, doctor; all when
        none is named) to stop at their next check; the ones that were running."""
        return self.stops.stop(st.sid, *actions)

    # -- import and export --------------------------------------------------------------------------

    def import_file(self, st: AppState, path: str) -> AppState:
        """The file as a run of its own (Step continues it where the models allow); the run shown stays kept."""
        imported = tio.load(path)
        if not imported.rounds:
            raise TevvizError("the file holds no rounds")
        self.keep(st)
        self.store.drop(st.sid, keep_training=True)
        said = f"imported {len(imported.rounds)} round(s) from a {imported.kind} file as a run of its own"
        if imported.kind == "ddtree":
            said += "; it has no target scores until you Re-score"
        if imported.kind == "session":
            said += "; Step continues it where the loaded models allow"
        if len(imported.rounds) > self.history:
            said += f"; history capped at {self.history} rounds; older rounds dropped"
        if st.rounds:
            said += f"; {run_name(st)} is kept in the run picker"
        new = reopened(st, imported, new_id(), self.history, said)
        self.keep(new)
        return new

    def reopen(self, st: AppState, run_id: str) -> AppState:
        """One of this browser's kept runs, shown; the run shown before stays kept."""
        if run_id == st.run_id:
            return st
        imported = self.runs.load(st.user, run_id)
        self.keep(st)
        self.store.drop(st.sid, keep_training=True)
        name = imported.meta.get("run_name", run_id[:8])
        new = reopened(st, imported, run_id, self.history, f"reopened run {name}; Step continues it", origin="run")
        return replace(new, view=len(new.rounds) - 1)  # where the run had got to

    def session_json(self, st: AppState) -> dict:
        return tio.session_dict(st.meta, st.prompt, st.prompt_ids, st.generated, st.text, st.rounds)

    def report(self, st: AppState) -> Path:
        """Write the session report (as `tevviz report`: one self-contained HTML file); returns its path."""
        from ..render.report import write_report

        if not st.rounds:
            raise TevvizError("nothing to report yet; press Step or import a file")
        path = self.store.export_dir(st.sid) / "tevviz-report.html"
        write_report(tio.parse(self.session_json(st)), path)
        return path

    def export(self, st: AppState, tree_html: str) -> tuple[Path, Path, Path]:
        """Write the shown round's JSON, the session JSON and the tree figure HTML; returns their paths."""
        r = st.round
        if r is None:
            raise TevvizError("nothing to export yet; press Step or import a file")
        d = self.store.export_dir(st.sid)
        round_path = d / f"tevviz-round-{r.index}.json"
        session_path = d / "tevviz-session.json"
        html_path = d / f"tevviz-tree-round-{r.index}.html"
        # Atomic: a download started while an earlier export is rewritten gets the old file or the new one, whole.
        atomic_write_json(round_path, tio.round_dict(r))
        atomic_write_json(session_path, self.session_json(st))
        atomic_write(html_path, tree_html)
        return round_path, session_path, html_path

