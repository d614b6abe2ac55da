"""Where the app's models come from: one process-wide cache of pairs, loaded on first use."""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path

from ..engine import ModelPair, ModelSource, TevvizError, with_draft
from ..engine.decode.start import decode_start, tree_start
from ..engine.load.pairs import DEFAULT_PAIR, DecodeDefaults, assets_dir, cache_root, pair_of_target

_PAIRS: dict[tuple, ModelPair] = {}
STARTED_IN = Path.cwd().resolve()  # the Scan tab opens the scans of the folder the app was started in
_PAIRS_LOCK = threading.Lock()
logger = logging.getLogger("tevviz")


@dataclass(frozen=True)
class PairSource:
    """The app's models: an injected pair, or `model.load()` through the process-wide cache."""

    model: ModelSource = field(default_factory=lambda: ModelSource(device=None))
    pair: ModelPair | None = None  # injected (tests, notebooks); nothing is loaded then
    model_dirs: tuple[str, ...] = ()  # further folders the UI may load draft models from

    def allowed_roots(self) -> list[Path]:
        """Folders whose models the UI may load: the shipped models, the command line's models' folders, model_dirs."""
        roots = [assets_dir() / "models", *map(Path, self.model_dirs)]
        roots += [Path(m).expanduser().parent for m in (self.model.target, self.model.draft)
                  if m and Path(m).expanduser().exists()]
        return [r.resolve() for r in roots]

    def check_ui_path(self, name: str) -> None:
        """Refuse a draft path typed into the UI unless it is a hub id or lies under an allowed folder."""
        p = Path(name).expanduser()
        if re.fullmatch(r"[\w.-]+/[\w.-]+", name) and not p.exists():
            return  # a hub id, resolved by huggingface_hub (its cache when offline)
        if not any(p.resolve().is_relative_to(root) for root in self.allowed_roots()):
            raise TevvizError(f"the app loads draft models only from {', '.join(map(str, self.allowed_roots()))}; "
                              "start it with --model-dir FOLDER to allow another folder")

    def scan_roots(self) -> list[Path]:
        """Folders the Scan tab may open scans from: the app's own scans, the cache's `scans/`, the folder the app
        was started in (where `tevviz scan -o DIR` wrote DIR when run there) and the --model-dir folders."""
        from .scan_root import scan_root

        return [scan_root().resolve(), (cache_root() / "scans").resolve(), STARTED_IN,
                *(Path(d).expanduser().resolve() for d in self.model_dirs)]

    def check_scan_path(self, folder: str) -> None:
        """Refuse a scan folder typed into the UI unless it lies under `scan_roots` (nothing is read before)."""
        text = str(folder).strip()
        if not text or any(Path(text).expanduser().resolve().is_relative_to(root) for root in self.scan_roots()):
            return
        raise TevvizError(f"the app opens scan folders only under the folder it was started in ({STARTED_IN}), the "
                          f"cache's {cache_root() / 'scans'}, its own scans and its --model-dir folders; to open "
                          "this one, start the app in the folder that holds it, or with --model-dir FOLDER")

    @property
    def description(self) -> str:
        if self.pair is not None:
            return f"target `{self.pair.target_name}`, draft `{self.pair.draft_name}`"
        if self.model.named is not None:
            # The drafter loaded by name, not the pair's list of drafters (a --draft swaps one in).
            target, draft = (Path(p).name for p in self.model.resolved())
            pair = self.model.pair or DEFAULT_PAIR
            which = "the embedded stdlib pair" if pair == "stdlib" else f"the {pair} pair"
            return f"{which}: target `{target}`, draft `{draft}`"
        return f"target `{self.model.target}`, draft `{self.model.draft}`"

    def drafters(self) -> dict[str, Path]:
        """The shipped drafters that fit this source's target, by folder name (none for an injected pair)."""
        named = self.model.named if self.pair is None else None
        return named.drafter_paths() if named is not None else {}

    def builder_default(self, temperature: float = 0.0) -> DecodeDefaults:
        """The builder, verifier, budget and depth the Decode tab starts on: the drafter's own tree under TEV at a fixed
        B (a tree worth looking at, decode/start.py tree_start), whatever the pair's fastest (`fastest`)."""
        kind, _, depth = self._kind()
        return tree_start(kind, depth)

    def fastest(self, temperature: float = 0.0) -> DecodeDefaults:
        """The setting `tevviz decode` starts on at `temperature`: a named pair's measured best, else --budget auto on
        the drafter's own builder (DDTree for a block drafter)."""
        kind, target, depth = self._kind()
        return decode_start(pair_of_target(target), temperature, kind, depth)

    def _kind(self):
        """The drafter kind, the target's name and the drafter's natural depth, without loading the models."""
        from ..engine.draft.drafters import drafter_kind_of, folder_kind

        if self.pair is not None:
            kind = drafter_kind_of(self.pair.draft)
            return kind, self.pair.target_name, kind.model_depth(self.pair.draft)
        target, draft = self.model.resolved()
        kind = folder_kind(draft)
        return kind, target, kind.folder_depth(Path(draft).expanduser())

    def chat_default(self) -> bool:
        """Whether the chat checkbox starts on: the pair's tokenizer has a chat template."""
        from ..engine.decode.session import has_chat_template

        if self.pair is not None:
            return has_chat_template(self.pair.tokenizer)
        if self.model.named is not None:
            return self.model.named.chat
        loaded = _PAIRS.get((self.model,))
        if loaded is not None:
            return has_chat_template(loaded.tokenizer)
        folder = Path(self.model.target).expanduser()
        folder = folder.parent if folder.is_file() else folder
        config = folder / "tokenizer_config.json"
        return ((folder / "chat_template.jinja").is_file()
                or (config.is_file() and "chat_template" in config.read_text()))

    def prompts_path(self) -> Path:
        """The example prompts for this pair: the named pair's file, else the chat prompts for a chat model."""
        if self.model.named is not None:
            return self.model.named.prompts_path()
        return assets_dir() / ("prompts_chat.jsonl" if self.chat_default() else "prompts.jsonl")

    def get(self, draft: str | None = None) -> ModelPair:
        """The pair, loading it on first use; `draft` swaps in another draft model beside the same target."""
        base = self._base()
        if not draft:
            return base
        self.check_ui_path(draft)
        key = (self.model, id(base), draft)
        with _PAIRS_LOCK:
            if key not in _PAIRS:
                logger.info("loading draft model %s beside %s", draft, base.target_name)
                _PAIRS[key] = with_draft(base, draft, self.model)
            return _PAIRS[key]

    def _base(self) -> ModelPair:
        if self.pair is not None:
            return self.pair
        key = (self.model,)
        with _PAIRS_LOCK:
            if key not in _PAIRS:
                logger.info("loading %s (first use)", self.description)
                _PAIRS[key] = self.model.load()
            return _PAIRS[key]
