"""Identifiers and fencing tokens.

Ids are URL-safe (`[A-Za-z0-9_]`) with a prefix naming the kind, because the official client puts
them into paths without percent-encoding. Tokens are opaque and globally unique: renew and release
find a claim by its token alone.

Randomness is an input, like time: the kernel owns one `IdSource`, seeded from the operating system
in production and from the seed in a simulation, so a seed replays a run exactly. What a source
produced is recorded in the journal, never regenerated on replay.
"""

from __future__ import annotations

import os
import random

__all__ = ["IdSource"]


class IdSource:
    __slots__ = ("_rng",)

    def __init__(self, seed: int | None = None) -> None:
        self._rng = random.Random(int.from_bytes(os.urandom(16), "big") if seed is None else seed)

    def make(self, prefix: str, bits: int = 64) -> str:
        """`prefix` + `bits` random bits as lowercase hex, e.g. `sc_` + 16 hex digits.

        Spelled through the bytes' `hex()` (what `f"{n:0{bits // 4}x}"` gives, digit for digit,
        for whole bytes): a fresh format spec per value cost about three times as much, and every
        token, delivery token and id a command draws comes through here.
        """
        assert bits > 0 and bits % 8 == 0, "ids are drawn in whole bytes"
        return prefix + self._rng.getrandbits(bits).to_bytes(bits >> 3, "big").hex()

    def token(self) -> str:
        """A 128-bit fencing token."""
        return self.make("ct_", 128)

    def uniform(self, low: float, high: float) -> float:
        """Jitter (retry backoff) from the same seeded source."""
        return self._rng.uniform(low, high)
