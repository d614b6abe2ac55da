"""The handlers behind `tevviz COMMAND` (parsed in `tevviz.cli`), by room: `decoding` (decode, inspect, report),
`scan` (scan, and its merge, compare and show), `compare` (compare, report --compare), `training` (train, eval),
`serving` (app), `pairs` (pair, bench), `doctor` (doctor), and `common` (what they share). Each reads its
arguments, loads what it needs and calls the engine. `args.started = True` marks where reading input ends and the
work begins, so that a failure after it exits 1 and bad input before it exits 2."""

from __future__ import annotations

from .common import Interrupt, UntilStopped, load_input, prompt_ids, prompt_rows, read_prompt, set_threads, use_chat
from .compare import cmd_compare
from .decoding import cmd_decode, cmd_inspect, cmd_report, decode_summary, print_decoded
from .doctor import cmd_doctor
from .engines import cmd_engine
from .pairs import benchmarks_dir, cmd_bench, cmd_pair
from .scan import cmd_scan
from .serving import check_server, cmd_app, server_settings
from .training import cmd_eval, cmd_train, distill_files, distill_stream, print_eval

__all__ = [
    "Interrupt", "UntilStopped", "benchmarks_dir", "check_server", "cmd_app", "cmd_bench", "cmd_compare",
    "cmd_decode", "cmd_doctor", "cmd_engine", "cmd_eval", "cmd_inspect", "cmd_pair", "cmd_report", "cmd_scan",
    "cmd_train",
    "decode_summary", "distill_files", "distill_stream", "load_input", "print_decoded", "print_eval", "prompt_ids",
    "prompt_rows", "read_prompt", "server_settings", "set_threads", "use_chat",
]
