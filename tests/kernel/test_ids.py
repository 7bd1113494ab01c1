"""Ids and tokens: the seeded source's bits as lowercase hex, every digit kept.

A seed replays a simulation exactly, and a journal keeps the ids it was given: the spelling of a
drawn id must not change with how it is made.
"""

from __future__ import annotations

import random
import re

import pytest

from runstate.actors import IdSource


def test_an_id_is_its_prefix_and_the_seeded_bits_in_hex() -> None:
    """Each id is the prefix and exactly `bits // 4` lowercase hex digits of the generator's next
    bits, leading zeros kept: the same strings the format spec `0{bits // 4}x` gives."""
    for seed in range(50):
        ids, reference = IdSource(seed), random.Random(seed)
        for prefix, bits in (("sc_", 64), ("ct_", 128), ("dt_", 128), ("x", 8), ("tk_", 64)):
            drawn = ids.make(prefix, bits)
            assert drawn == f"{prefix}{reference.getrandbits(bits):0{bits // 4}x}"
            assert re.fullmatch(re.escape(prefix) + f"[0-9a-f]{{{bits // 4}}}", drawn)


def test_a_seed_draws_the_ids_it_drew_before() -> None:
    """Pinned values: a seed's first token and id are the ones earlier versions drew."""
    ids = IdSource(7)
    assert ids.token() == "ct_" + f"{random.Random(7).getrandbits(128):032x}"
    small = IdSource(0)
    small._rng.getrandbits = lambda bits: 0x0F  # type: ignore[method-assign]  # leading zeros must stay
    assert small.make("sc_") == "sc_000000000000000f"


def test_ids_are_drawn_in_whole_bytes() -> None:
    """A width that is not whole bytes has no spelling here: refused where it is asked for."""
    with pytest.raises(AssertionError):
        IdSource(1).make("p_", 12)
