"""Seed derivation: every random stream is a pure function of (master seed, study seed, names).

Results therefore do not depend on job order, the number of cores, or which other actions ran.
"""

from __future__ import annotations

import zlib

import numpy as np


def name_key(name: str) -> int:
    """A stable 32-bit integer for a name (CRC-32 of its UTF-8 bytes)."""
    return zlib.crc32(name.encode("utf-8"))


def derive_seed(*parts: int | str) -> int:
    """A 63-bit seed from integers and names, via numpy's SeedSequence (stable across platforms)."""
    entropy = [p if isinstance(p, int) else name_key(p) for p in parts]
    if any(e < 0 for e in entropy):
        raise ValueError(f"seed parts must be non-negative, got {parts!r}")
    state = np.random.SeedSequence(entropy).generate_state(2, dtype=np.uint32)
    return int((int(state[0]) << 31) ^ int(state[1])) & ((1 << 63) - 1)


def derive_rng(*parts: int | str) -> np.random.Generator:
    """A numpy Generator seeded by :func:`derive_seed`."""
    return np.random.default_rng(derive_seed(*parts))
