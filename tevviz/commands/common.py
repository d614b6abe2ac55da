"""What the handlers share: the prompt and its chat template, Ctrl-C as a request to stop, torch's threads, a
pair's prompt rows, and comma-separated numbers from a flag."""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path

from ..engine.errors import TevvizError


def numbers(text: str, flag: str) -> list[float]:
    """A comma-separated list of numbers from a flag, or a one-line error naming the flag."""
    try:
        return [float(x) for x in text.split(",")]
    except ValueError:
        raise TevvizError(f"{flag} must be numbers separated by commas, got {text!r}") from None

def read_prompt(args) -> str:
    """The prompt text of --prompt (- for standard input) or --prompt-file; an empty one is refused here, before
    any model loads (the models took 7-10 s to load only to refuse it)."""
    if args.prompt_file is not None:
        try:
            text, where = Path(args.prompt_file).expanduser().read_text(encoding="utf-8"), \
                f"--prompt-file {args.prompt_file!r}"
        except OSError as e:
            raise TevvizError(f"cannot read --prompt-file {args.prompt_file!r}: {e.strerror}") from None
    elif args.prompt == "-":
        text, where = sys.stdin.read(), "--prompt - (standard input)"
    else:
        text, where = args.prompt, "--prompt"
    if not isinstance(text, str) or not text.strip():
        raise TevvizError(f"the prompt is empty ({where} gave {'nothing' if not text else 'only white space'})")
    return text

def use_chat(args, tokenizer) -> bool:
    """--chat / --no-chat, or by default whether the tokenizer has a chat template."""
    from ..engine.decode.session import has_chat_template

    return has_chat_template(tokenizer) if args.chat is None else args.chat

_BEFORE_STOP: dict = {}  # the handlers a stopped command's Interrupt replaced, by signal, put back as it returns
SIGNALS = (signal.SIGINT, signal.SIGTERM)  # a launcher's SIGTERM (a time limit, a pre-empted job) acts as Ctrl-C


class Interrupt:
    """Ctrl-C (or SIGTERM) as a request: the first asks the work to stop at the end of its round or step (`stop()`
    turns true), the second stops at once (KeyboardInterrupt), later ones are ignored. Once stopped, both stay
    ignored until the command returns (`restore_interrupts`), so the text, statistics and files of the finished work
    are written whatever the user presses. Signals reach the main thread only: elsewhere it does nothing."""

    def __init__(self, what: str):
        self.what, self.requested, self.forced, self._old = what, False, False, None

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self._old = {sig: signal.signal(sig, self._handle) for sig in SIGNALS}
        return self

    def __exit__(self, *exc) -> None:
        if self._old is None:
            return
        for sig, old in self._old.items():
            if self.requested:  # the default handler back now would raise in the middle of the summary or export
                _BEFORE_STOP.setdefault(sig, old)
                signal.signal(sig, _finishing)
            else:
                signal.signal(sig, old)

    def _handle(self, signum, frame) -> None:
        if self.forced:  # a third Ctrl-C close behind the second: the stop is under way already
            return
        if self.requested:
            self.forced = True
            raise KeyboardInterrupt
        self.requested = True
        print(f"\nstopping at the end of this {self.what} (Ctrl-C again to stop at once) ...", file=sys.stderr,
              flush=True)

    def __call__(self) -> bool:
        return self.requested


def _finishing(signum, frame) -> None:
    print("\nstopped already: writing what was finished ...", file=sys.stderr, flush=True)


def restore_interrupts() -> None:
    """Put back the handlers a stopped command replaced (cli.main, as the command returns)."""
    if threading.current_thread() is threading.main_thread():
        while _BEFORE_STOP:
            signal.signal(*_BEFORE_STOP.popitem())

class UntilStopped:
    """A list's items handed out until `stop()` turns true, so a loop over it ends after the item in hand;
    `len` stays the list's (for progress), `done` counts the items handed out."""

    def __init__(self, items: list, stop):
        self.items, self.stop, self.done = items, stop, 0

    def __iter__(self):
        for item in self.items:
            if self.stop():
                return
            self.done += 1
            yield item

    def __len__(self) -> int:
        return len(self.items)

def set_threads(n: int | None) -> None:
    """--threads: torch's CPU threads while the models load, by the one policy of the CLI, the app and the notebook
    API (engine/load/threads.py); `settle_threads` chooses decoding's count once they have loaded."""
    from ..engine.load.threads import use_threads

    use_threads(n)


def settle_threads(pair, n: int | None, cap: int | None = None, cap_why: str | None = None):
    """--threads, else the count (at most `cap`, for the reason `cap_why`) whose target passes are fastest on this
    machine (engine/decode/thread_choice.py): set for the decoding that follows, and returned (`describe()` says
    why)."""
    from ..engine.decode.thread_choice import ThreadChoice, settle

    return settle(pair, n, cap, cap_why=cap_why or ThreadChoice.cap_why)


def prompt_rows(args) -> list[dict]:
    """The prompts of --split: of --prompts, else of the pair's file that holds that split (a split the pair has
    not is refused, naming those it has); read before any model loads."""
    from ..engine.load.pairs import DEFAULT_PAIR, named_pair
    from ..prompts import load_prompts

    if args.prompts is not None:
        return load_prompts(args.prompts, args.split)
    return load_prompts(named_pair(args.pair or DEFAULT_PAIR).split_path(args.split), args.split)


def prompt_set(args, named) -> tuple[list[dict], str] | None:
    """--prompts (its --split, else all), else the named pair `named`'s --split prompts (eval by default), with where
    they come from; None where there is neither."""
    from ..prompts import load_prompts

    if args.prompts is not None:
        return load_prompts(args.prompts, args.split), args.prompts
    if named is not None:
        split = args.split or "eval"
        return load_prompts(named.split_path(split), split), f"the {named.name} pair's {split} prompts"
    return None


def prompt_ids(rows: list[dict], pair) -> list[list[int]]:
    """Token ids of prompt rows, chat rows through the template."""
    from ..engine.decode.session import encode_prompt

    return [encode_prompt(pair.tokenizer, r["prompt"], chat=bool(r.get("chat"))) for r in rows]


def load_input(path: str):
    """A session/round JSON or DDTree trace, its errors naming the file rather than "file" or a bare field."""
    from ..engine.records.io import load

    try:
        return load(path)
    except TevvizError as e:
        text = str(e)
        if text.startswith(f"{path}:"):
            raise
        raise TevvizError(f"{path}: {text.removeprefix('file: ')}") from None
