"""One prompt in each engine, the same way: llama-server's draft-simple and tevviz's chain of the same depth.

llama-server takes its first token from the prompt's own pass and drafts from the second token on; tevviz's side
does the same (a plain target step, then a DecodeSession over the prompt and that token), so that both engines'
rounds start at the same tokens and, at T = 0, commit the same blocks. The draft shape is a chain of up to K
tokens, K = llama.cpp's --spec-draft-n-max, shorter where the token limit leaves less room (llama.cpp drafts at most
n_remaining - 1, as tevviz's depth cap); no confidence stop (llama.cpp's p_min is 0 unless set, so tevviz's
--stop-below is 0 too). At T > 0 llama.cpp drafts the draft's argmax and accepts a token where the target's own
draw matches it: on a fixed chain that is exactly the law of tevviz's tree verifier (TEV), so the chain runs
under TEV.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from .llamacpp_compare import PromptRun
from .llamacpp_server import LlamaServer, parse_steps


@dataclass(frozen=True)
class Timed:
    """A prompt's run in one engine and the tokens/s figures it gives: tokens generated over decoding seconds."""

    run: PromptRun
    tokens: int
    seconds: float


def prompt_seed(seed: int, prompt: str) -> int:
    """Each prompt's own seed for both engines (in llama.cpp's 32-bit range): one seed for all prompts would make
    their first draws alike (three of eight stdlib prompts then drew the end token first at T = 1)."""
    from ..core.seeds import stream_seed

    return stream_seed(seed, f"prompt {prompt}") % 2**32


def chain_config(depth: int, temperature: float, max_new_tokens: int, seed: int = 0, ignore_eos: bool = False):
    """tevviz's DecodeConfig for llama.cpp's draft-simple: the draft's greedy chain of up to `depth`, TEV, plain
    temperature sampling (no top-k or top-p, as the requests to the server)."""
    from ..core.sampling import SamplingConfig
    from ..decode.session import DecodeConfig
    from ..draft.builders import BuilderConfig

    return DecodeConfig(sampling=SamplingConfig(temperature=temperature), verifier="tev",
                        builder=BuilderConfig(name="chain", depth=depth, budget=depth + 1),
                        max_new_tokens=max_new_tokens, seed=seed, stop_on_eos=not ignore_eos, missing_top=0)


def tevviz_prompt(pair, prompt: str, ids: list[int], cfg) -> Timed:
    """tevviz's run of one prompt: the first token by a plain step, then chain rounds; the steps are the rounds
    that drafted (a round with no room left to draft is a plain step, as in llama.cpp, and not a step)."""
    from .. import DecodeSession, autoregressive
    from ..core.seeds import stream_seed
    from ..decode.session import stop_ids

    # the first token's draw from a stream of its own: with the session's seed it would repeat the first round's
    first = autoregressive(pair, ids, replace(cfg, max_new_tokens=1, seed=stream_seed(cfg.seed, "first token")))
    tokens, seconds, steps = list(first.token_ids), first.seconds, []
    ended = not tokens or (cfg.stop_on_eos and tokens[-1] in stop_ids(pair))
    if not ended and cfg.max_new_tokens > 1:
        session = DecodeSession(pair, ids + tokens, replace(cfg, max_new_tokens=cfg.max_new_tokens - 1))
        t0 = time.perf_counter()  # after the session's prefill, as llama.cpp's generation time starts after its own
        session.run()
        seconds += time.perf_counter() - t0
        tokens += session.generated
        steps = [(len(r.accepted) - 1, len(r.tokens) - 1) for r in session.rounds if len(r.tokens) > 1]
    return Timed(PromptRun(prompt, tuple(tokens), tuple(steps)), len(tokens), seconds)


def tevviz_plain(pair, ids: list[int], cfg) -> tuple[int, float]:
    """tevviz's plain decoding of the same prompt: (tokens, seconds)."""
    from .. import autoregressive

    base = autoregressive(pair, ids, cfg)
    return len(base.token_ids), base.seconds


def wait_for_log(server: LlamaServer, offset: int, marker: str, timeout: float = 5.0) -> str:
    """The server's log since `offset` once `marker` is in it (its logger writes from a thread of its own, so the
    lines of a request can land a moment after the response)."""
    deadline = time.monotonic() + timeout
    text = server.log_since(offset)
    while marker not in text and time.monotonic() < deadline:
        time.sleep(0.05)
        text = server.log_since(offset)
    return text


def llama_prompt(server: LlamaServer, prompt: str, ids: list[int], max_new_tokens: int, temperature: float,
                 seed: int = 0, ignore_eos: bool = False) -> tuple[Timed, dict, str]:
    """llama.cpp's run of one prompt: (the run, the response, the server's log of that request). Its tokens/s is
    the server's own: predicted_n over predicted_ms (the generation phase, its first token's pass counted with the
    prompt)."""
    offset = server.log_size()
    resp = server.complete(ids, max_new_tokens, temperature, seed, ignore_eos)
    text = wait_for_log(server, offset, "total time =")
    t = resp.get("timings") or {}
    run = PromptRun(prompt, tuple(int(x) for x in resp.get("tokens") or ()), tuple(parse_steps(text)))
    return Timed(run, int(t.get("predicted_n", len(run.tokens))), float(t.get("predicted_ms", 0.0)) / 1e3), resp, text


@dataclass(frozen=True)
class Speed:
    """Tokens over seconds, summed over prompts (never a mean of per-prompt rates)."""

    tokens: int = 0
    seconds: float = 0.0

    def add(self, tokens: int, seconds: float) -> Speed:
        return Speed(self.tokens + tokens, self.seconds + seconds)

    @property
    def tokens_per_s(self) -> float | None:
        return self.tokens / self.seconds if self.seconds > 0 else None


def speedup(draft: Speed, plain: Speed) -> float | None:
    a, b = draft.tokens_per_s, plain.tokens_per_s
    return a / b if a and b else None
