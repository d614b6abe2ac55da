"""Seeds of independent random streams: one per (session seed, role), derived by hashing both.

Seeding a second generator with `seed + 1` makes it the next session's first one, so samples over consecutive
seeds would be pairwise dependent. A hash of the seed and the role gives every pair its own stream.
"""

from __future__ import annotations

import hashlib

SEED_BITS = 63  # torch.Generator.manual_seed takes any of these; a signed 64-bit int holds them too


def stream_seed(seed: int, role: str) -> int:
    """A seed in [0, 2**63) for the stream `role` ("verify", "draft", ...) of a session seeded `seed`."""
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise TypeError(f"seed must be an integer, got {seed!r}")
    if not isinstance(role, str) or not role:
        raise ValueError(f"role must be a non-empty string, got {role!r}")
    # The seed's decimal text and the role, split by a byte neither contains, so no two pairs share an input.
    digest = hashlib.blake2b(f"{seed}\0{role}".encode(), digest_size=8, person=b"tevviz-stream").digest()
    return int.from_bytes(digest, "big") >> (64 - SEED_BITS)
