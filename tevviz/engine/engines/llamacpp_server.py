"""One `llama-server` process: started on 127.0.0.1 at a free port, asked for completions, stopped by its own pid.

Speculative settings mirror what tevviz runs beside it (commands/engine_run.py): the draft as `draft-simple`, a chain
of up to `draft_max` tokens, no minimum length and no confidence stop (p_min 0, llama.cpp's default), one slot. The
server logs at trace level with LLAMA_TRACE=1, which adds one line a verification step, 'accepted  j/ n draft tokens',
and the 'acc per pos' line at the end of each request: parse_steps reads them back.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import TevvizError

STEP_LINE = re.compile(r"\| task (\d+) \| accepted\s+(\d+)/\s*(\d+) draft tokens(?! \(restore)")


@dataclass(frozen=True)
class ServerSpec:
    """What one server runs: the target, and the draft with its speculative type and longest chain (None: no draft)."""

    binary: Path
    model: Path
    draft: Path | None = None
    spec_type: str = "draft-simple"
    draft_max: int = 4
    threads: int = 1
    ctx_size: int = 0  # 0: the model's own

    def argv(self, port: int) -> list[str]:
        t = str(self.threads)
        cmd = [str(self.binary), "-m", str(self.model), "--host", "127.0.0.1", "--port", str(port),
               "--threads", t, "--threads-batch", t, "--parallel", "1", "--ctx-size", str(self.ctx_size),
               "--metrics", "--no-webui", "-lv", "4"]
        if self.draft is not None:
            cmd += ["-md", str(self.draft), "--spec-type", self.spec_type, "--spec-draft-n-max", str(self.draft_max),
                    "--spec-draft-n-min", "0", "--spec-draft-p-min", "0", "-td", t, "-tbd", t]
        return cmd


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class LlamaServer:
    """A running llama-server; use as a context manager (stopped on exit, on Ctrl-C and on error, and at
    interpreter exit as a last resort)."""

    spec: ServerSpec
    log_path: Path
    port: int = 0
    proc: subprocess.Popen | None = field(default=None, repr=False)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 300.0) -> None:
        self.port = free_port()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, LLAMA_TRACE="1")
        with self.log_path.open("w", encoding="utf-8") as log:
            log.write("$ " + " ".join(self.spec.argv(self.port)) + "\n")
            log.flush()
            # A session of its own: a Ctrl-C in the terminal reaches tevviz, which stops the server by its pid.
            self.proc = subprocess.Popen(self.spec.argv(self.port), stdout=log, stderr=subprocess.STDOUT, env=env,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        atexit.register(self.stop)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise TevvizError(f"llama-server stopped at start (exit {self.proc.returncode}): "
                                  f"{self.log_tail()} (its log: {self.log_path})")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        self.stop()
        raise TevvizError(f"llama-server did not answer /health within {timeout:.0f} s (its log: {self.log_path})")

    def stop(self) -> None:
        """SIGTERM to the server's own pid, SIGKILL if it has not ended after 10 s."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()

    def log_tail(self, lines: int = 3) -> str:
        text = self.log_path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
        return " | ".join(text[-lines:]) or "no output"

    def log_size(self) -> int:
        return self.log_path.stat().st_size

    def log_since(self, offset: int) -> str:
        with self.log_path.open("rb") as f:
            f.seek(offset)
            return f.read().decode("utf-8", errors="replace")

    def _post(self, path: str, body: dict, timeout: float = 600.0) -> dict:
        req = urllib.request.Request(self.url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            raise TevvizError(f"llama-server answered {path} with {e.code}: {e.read()[:300]!r}") from None
        except (urllib.error.URLError, OSError) as e:
            raise TevvizError(f"llama-server did not answer {path} ({e}); its log: {self.log_path}") from None

    def complete(self, prompt_ids: list[int], n_predict: int, temperature: float, seed: int = 0,
                 ignore_eos: bool = False) -> dict:
        """/completion of these token ids (no template or tokenizer of the server's between), plain temperature
        sampling (no top-k, top-p, min-p or penalties), no prompt cache: the response with its tokens and timings."""
        return self._post("/completion", {
            "prompt": prompt_ids, "n_predict": n_predict, "temperature": temperature, "seed": seed,
            "top_k": 0, "top_p": 1.0, "min_p": 0.0, "typical_p": 1.0, "repeat_penalty": 1.0,
            "cache_prompt": False, "return_tokens": True, "ignore_eos": ignore_eos})

    def tokenize(self, text: str) -> list[int]:
        """The server's own tokenizer on `text` (special tokens parsed, nothing added)."""
        return self._post("/tokenize", {"content": text, "add_special": False, "parse_special": True})["tokens"]

    def metrics(self) -> str:
        """The Prometheus text of /metrics."""
        try:
            with urllib.request.urlopen(self.url + "/metrics", timeout=30) as r:
                return r.read().decode()
        except (urllib.error.URLError, OSError) as e:
            raise TevvizError(f"llama-server did not answer /metrics ({e})") from None


def parse_steps(log_text: str) -> list[tuple[int, int]]:
    """(accepted, drafted) of each verification step in a stretch of a trace-level server log, in order."""
    return [(int(m.group(2)), int(m.group(3))) for m in STEP_LINE.finditer(log_text)]
