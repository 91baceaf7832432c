"""Named, seeded random streams: one independent generator per purpose and run.

Every random decision of the simulator draws from a stream named after its purpose (``arrivals``,
``jobs``, ``task-lengths``, ``placement``, ``reimages``, ...). A stream's seed is derived from the
run's base seed, the run number and a stable hash of the name, so adding a stream (or drawing more
from one) never changes what another stream produces, and two systems simulated in the same run see
the same arrivals and the same reimages.
"""

from __future__ import annotations

import hashlib

import numpy as np


def _name_key(name: str) -> int:
    """Stable 32-bit key of a stream name (independent of Python's hash randomization)."""
    return int.from_bytes(hashlib.blake2b(name.encode("utf-8"), digest_size=4).digest(), "big")


class Streams:
    """Factory of named generators for one (seed, run); ``get(name)`` always returns the same stream."""

    def __init__(self, seed: int, run: int = 0) -> None:
        if seed < 0 or run < 0:
            raise ValueError(f"seed and run must be >= 0, got seed={seed}, run={run}")
        self.seed = int(seed)
        self.run = int(run)
        self._cache: dict[str, np.random.Generator] = {}

    def get(self, name: str) -> np.random.Generator:
        gen = self._cache.get(name)
        if gen is None:
            seq = np.random.SeedSequence([self.seed, self.run, _name_key(name)])
            gen = np.random.default_rng(seq)
            self._cache[name] = gen
        return gen

    def fresh(self, name: str) -> np.random.Generator:
        """A new generator of stream ``name`` from its start (for a second system in the same run)."""
        return np.random.default_rng(np.random.SeedSequence([self.seed, self.run, _name_key(name)]))

    def seed_int(self, name: str) -> int:
        """A plain integer seed for APIs that take one (e.g. a placer's ``seed=``)."""
        return int(self.fresh(name).integers(0, 2**31 - 1))
