"""The app's ExitTrain actions (Train step, Use, Revert, where the exit mass moved), mixed into `Controller`.

Each trains or reads this browser session's own copy of the draft; the pair's draft is never touched.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import asdict, dataclass, replace

from ..engine import DecodeConfig, ModelPair, TevvizError
from ..engine.core.scoring import check_ids
from ..engine.train.block_exittrain import make_trainer
from ..engine.train.contexts import fits, spread, training_contexts
from ..engine.train.evaluation import DrafterMetrics, drafter_metrics
from ..engine.train.exit_mass import ExitMassMove, exit_mass_move
from ..engine.train.exittrain import TrainConfig
from .model_thread import on_model_thread
from .state import AppState, Baseline, Training
from .stops import Stopped
from .training_files import forget_training, load_training, save_training

MAX_TRAIN_CONTEXTS = 256  # contexts handed to the trainer (spread over the session's rounds)
EVAL_CONTEXTS = 12  # contexts of the before/after table (spread over the session's rounds)
logger = logging.getLogger("tevviz")


@dataclass(frozen=True)
class TrainReport:
    """What the ExitTrain panel shows after a Train step."""

    log: list[dict]  # every step since the last Revert
    table: list[DrafterMetrics]  # before/after rows
    contexts: int  # training contexts taken from the session
    temperature: float  # sampling temperature of the tau column
    use: bool  # whether Step and Run decode with the trained draft
    notice: str
    moved: ExitMassMove | None


class TrainingActions:
    """Controller's ExitTrain methods; they use its `source` (the pair) and `store` (per-session state)."""

    @on_model_thread
    def train(self, st: AppState, tcfg: TrainConfig, cfg: DecodeConfig, progress=None) -> TrainReport:
        """`tcfg.steps` ExitTrain steps of this browser session's copy of the draft on its own rounds.

        `cfg` holds the settings in force (`settings_in_force`): its builder, sampling and verifier apply.
        The first call copies the draft; the pair's own draft is never changed. `stop(st, "train")` ends it after
        the step in progress: the steps made are kept (Stopped.kept is the log), the before/after table is not
        measured.
        """
        tcfg = replace(tcfg, builder=cfg.builder)
        self._training(st)
        if not st.rounds:
            raise TevvizError("no rounds to train on yet: press Step or Run in the Decode tab first")
        base = self.source.get()
        contexts = [c for c in training_contexts(st.stream, st.rounds, MAX_TRAIN_CONTEXTS)
                    if fits(base, c.tokens, cfg.builder)]
        if not contexts:
            raise TevvizError("none of the shown rounds has a known context with room for a full-depth tree (an "
                              "import without its prompt, or a stream at the context length); decode a prompt first")
        check_ids(base, contexts[-1].tokens + contexts[-1].continuation)
        old = self.store.training(st.sid)
        notice = ""
        if old is not None and old.trainer is not None and replace(old.trainer.cfg, steps=tcfg.steps) == tcfg:
            trainer = old.trainer
            trainer.set_contexts(contexts)  # the session may have grown since the last click
        else:
            draft = None if old is None else old.trainer.draft if old.trainer else copy.deepcopy(old.pair.draft)
            trainer = make_trainer(base, contexts, tcfg, draft=draft)
            if old is not None:
                notice = ("the settings changed: a fresh optimiser continues from the trained draft" if old.trainer
                          else "a fresh optimiser continues from the trained draft kept through the restart")
                logger.info("session %s: ExitTrain %s", st.sid[:8], notice)
        log = [] if old is None else list(old.log)
        with self.stops.job(st.sid, "train", "ExitTrain") as job:
            stopped = None
            try:
                for i in range(tcfg.steps):
                    job.tick(i, tcfg.steps, "steps")
                    if progress is not None:
                        progress((i, tcfg.steps), desc=f"train step {len(log) + 1}")
                    log.append({**asdict(trainer.step()), "step": len(log) + 1, "objective": tcfg.objective})
            except Stopped as e:
                stopped = e
            if old is None and not log:
                raise job.stop().saying("no step was made; the draft is as it was")
            trained = ModelPair(base.target, trainer.trained_draft(), base.tokenizer, base.target_name,
                                f"{base.draft_name} + ExitTrain ({len(log)} steps)")
            training = Training(trainer, log, trained, use=old is not None and old.use,
                                before=None if old is None else old.before, config=tcfg)
            self.store.put_training(st.sid, training, st.user)
            if st.user:
                save_training(self.runs.root, st.user, training, base)
            later = "the before/after table is measured at the next Train step"
            if stopped is not None:
                raise stopped.saying(f"the steps made are kept; {later}", kept=log)

            def told(done, desc: str = "") -> None:
                job.check()
                if progress is not None:
                    progress(done, desc=desc)

            try:
                table = self._before_after(training, base, spread(contexts, EVAL_CONTEXTS), cfg, told)
            except Stopped:
                raise Stopped("ExitTrain", tcfg.steps, tcfg.steps, "steps", log,
                              f"the steps are kept, the before/after table was not measured; {later}") from None
        return TrainReport(log, table, len(contexts), cfg.sampling.temperature, training.use, notice,
                           self._moved(st, base, training))

    @staticmethod
    def _before_after(training: Training, base: ModelPair, evals: list, cfg: DecodeConfig,
                      progress) -> list[DrafterMetrics]:
        """The before/after rows on `evals`; the original drafter's row is kept while its inputs stay the same."""
        key = (tuple(tuple(c.tokens) for c in evals), cfg.builder, cfg.sampling, cfg.verifier)
        args = (evals, cfg.builder, cfg.sampling, cfg.verifier)
        if training.before is None or training.before.key != key:
            training.before = Baseline(key, drafter_metrics(base, *args, progress=progress, label="original"))
        after = drafter_metrics(training.pair, *args, progress=progress, label="trained")
        return [training.before.metrics, replace(after, name=f"trained ({len(training.log)} steps)")]

    def _training(self, st: AppState) -> Training | None:
        """This browser session's ExitTrain copy: its own, else the one this browser made before a reload, else the
        one it kept on disk before a server restart (ready, not in use)."""
        training = self.store.adopt_training(st.sid, st.user) or self.store.training(st.sid)
        if training is None and st.user:
            training = load_training(self.runs.root, st.user, self.source.get())
            if training is not None:
                self.store.put_training(st.sid, training, st.user)
        return training

    def _moved(self, st: AppState, base: ModelPair, training: Training) -> ExitMassMove | None:
        ends = st.context_ends()
        if not 0 <= st.view < len(ends) or ends[st.view] is None:
            return None
        context = st.stream[: ends[st.view]]
        builder, temperature = training.config.builder, training.config.weight_temperature
        if not fits(base, context, builder):
            return None
        return exit_mass_move(base, training.pair.draft, context, builder, st.rounds[st.view].index, temperature)

    @on_model_thread
    def exit_mass(self, st: AppState) -> ExitMassMove:
        """Where the exit mass moved on the shown round's context: original against trained drafter."""
        training = self._training(st)
        if training is None:
            raise TevvizError("no trained draft in this session yet: press Train step first")
        moved = self._moved(st, self.source.get(), training)
        if moved is None:
            raise TevvizError("the shown round has no known context with room for a full-depth tree; "
                              "show another round or step one in the Decode tab")
        return moved

    def train_revert(self, st: AppState) -> str:
        """Forget the trained copy: this session decodes with the original draft again."""
        had = self._training(st) is not None
        self.store.put_training(st.sid, None, st.user)  # a reload adopts it no more
        if st.user:
            forget_training(self.runs.root, st.user, self.source.get())  # nor a restart
        return ("reverted: the trained copy is gone and this session decodes with the original draft" if had
                else "nothing to revert: this session uses the original draft")

    def train_use(self, st: AppState, use: bool) -> str:
        """Choose whether Step and Run decode with the trained draft (the next Step starts a new session)."""
        training = self._training(st)
        if training is None:
            if use:
                raise TevvizError("no trained draft in this session yet: press Train step first")
            return self.train_status(st)
        training.use = bool(use)
        return self.train_status(st) + " (the next Step starts a new session)"

    def train_status(self, st: AppState) -> str:
        training = self._training(st)
        if training is None:
            return "Step and Run decode with the original draft."
        steps = len(training.log)
        if training.use:
            return f"Step and Run decode with the trained draft ({steps} steps)."
        return f"Step and Run decode with the original draft; a trained draft ({steps} steps) is ready."
