"""Independent random streams per session seed and role (engine/core/seeds.py), and the sessions that use them.

Each test was checked to fail against the fault it targets, planted one at a time: a session whose draft
generator is seeded with its seed + 1 (the next session's verifier seed), so that sessions over consecutive seeds
share draws; a stream seed that ignores the role, or that is the session seed plus a small per-role offset; and
one taken from Python's hash(), which changes from process to process.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from conftest import tiny_pair

from tevviz.engine import BuilderConfig, DecodeConfig, DecodeSession, SamplingConfig
from tevviz.engine.core.seeds import SEED_BITS, stream_seed

ROLES = ("verify", "draft")


def first_draws(gen: torch.Generator, n: int = 8) -> tuple[float, ...]:
    """The first n uniforms of a generator's stream, drawn from a copy so that the generator itself is not moved."""
    copy = torch.Generator(device=gen.device)
    copy.set_state(gen.get_state())
    return tuple(torch.rand(n, generator=copy, device=gen.device).tolist())


def test_a_stream_seed_is_a_63_bit_function_of_the_seed_and_the_role():
    seeds = [stream_seed(s, r) for s in range(-500, 2000) for r in ROLES]
    assert all(0 <= x < 2**SEED_BITS for x in seeds)
    assert len(set(seeds)) == len(seeds), "two (seed, role) pairs share a stream"
    assert stream_seed(7, "draft") == stream_seed(7, "draft")
    assert stream_seed(2**70, "verify") != stream_seed(2**70 + 1, "verify")  # large seeds are not cut to 64 bits
    # Pinned: a recorded session's seed must give the same draws in every process and every later version.
    assert stream_seed(0, "verify") == 6579415331709558414
    assert stream_seed(1, "draft") == 6395056729031231364


def test_consecutive_seeds_give_streams_that_share_no_draws():
    """No offset between a seed's streams and its neighbours': the first draws of every stream differ."""
    draws = [first_draws(torch.Generator().manual_seed(stream_seed(s, r))) for s in range(64) for r in ROLES]
    assert len(set(draws)) == len(draws)
    assert not set(itertools.chain.from_iterable(draws)) & {0.0}  # test setup: real draws


def test_a_role_must_be_named_and_a_seed_an_integer():
    with pytest.raises(ValueError, match="role"):
        stream_seed(1, "")
    with pytest.raises(TypeError, match="seed"):
        stream_seed(True, "verify")
    with pytest.raises(TypeError, match="seed"):
        stream_seed(1.0, "verify")


def generators(session) -> list[torch.Generator]:
    """Every random generator a session holds, on itself or on its drafter (wherever the draft's stream lives)."""
    owners = [session, getattr(session, "drafter", None)]
    return [g for o in owners if o is not None for g in vars(o).values() if isinstance(g, torch.Generator)]


def test_sessions_over_consecutive_seeds_share_no_draws():
    """A session's verifier and draft generators start from stream_seed(seed, "verify") and
    stream_seed(seed, "draft"); over seeds 0..5 no two of the twelve streams begin with the same draws."""
    pair = tiny_pair("llama")
    builder = BuilderConfig(name="sampled", depth=2)
    streams = {}
    for seed in range(6):
        cfg = DecodeConfig(sampling=SamplingConfig(temperature=1.0), builder=builder, verifier="speculative",
                           max_new_tokens=4, seed=seed, stop_on_eos=False, missing_top=0)
        s = DecodeSession(pair, [5, 6, 7], cfg)
        gens = generators(s)
        assert s.gen in gens and len(gens) == 2, f"test setup: {len(gens)} generators"
        assert s.gen.initial_seed() == stream_seed(seed, "verify"), f"seed {seed}: the verifier's generator"
        (draft,) = [g for g in gens if g is not s.gen]
        assert draft.initial_seed() == stream_seed(seed, "draft"), f"seed {seed}: the draft's generator"
        streams[(seed, "verify")], streams[(seed, "draft")] = first_draws(s.gen), first_draws(draft)
    shared = [(a, b) for a, b in itertools.combinations(streams, 2) if streams[a] == streams[b]]
    assert not shared, f"sessions share draws: {shared[:3]}"
