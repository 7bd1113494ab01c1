"""The kernel answers a claim with a typed view (a named tuple): snake-case fields, times in
milliseconds, no wire.

The wire's names and timestamps are the shell's (`server/wire/`, `tests/server/test_wire.py`);
here the kernel's answers are read as the kernel gives them, through `Kernel.submit`.
"""

from __future__ import annotations

import dataclasses

import pytest

from runstate.actors import Idem
from runstate.actors import commands as c
from runstate.actors.claims import ClaimView, ForceReleasedClaimView, ReleasedClaimView

from .conftest import T0

pytestmark = pytest.mark.trio


async def _run(kernel, command_class, idem=None, **fields):  # type: ignore[no-untyped-def]
    for name in ("token",):
        if name in {field.name for field in dataclasses.fields(command_class)} and name not in fields:
            fields[name] = kernel.draw(name)
    return await kernel.submit(command_class(**fields), idem=idem)


async def test_acquire_renew_and_release_answer_typed_views_in_milliseconds(harness, autojump_clock):
    """Each answer is a frozen view whose times are the instants the kernel decided, in ms."""
    kernel = harness.kernel
    scope = await harness.scopes.create("default")
    held = await _run(kernel, c.AcquireClaim, space="default", scope_id=scope["id"], key="k", holder="a", session="s", lease_s=5)
    assert type(held) is ClaimView
    assert (held.key, held.scope_id, held.generation, held.holder, held.session) == ("k", scope["id"], 1, "a", "s")
    assert (held.lease_ms, held.expires_ms, held.acquired_ms) == (5000, T0 + 5000, T0)
    with pytest.raises(AttributeError):  # a view cannot be changed
        held.token = None  # type: ignore[misc]

    renewed = await _run(kernel, c.RenewClaim, space="default", key="k", token=held.token, lease_s=8)
    assert type(renewed) is ClaimView and renewed.token == held.token
    assert (renewed.lease_ms, renewed.expires_ms, renewed.acquired_ms) == (8000, T0 + 8000, T0)

    released = await _run(kernel, c.ReleaseClaim, space="default", key="k", token=held.token, observation=None)
    assert type(released) is ReleasedClaimView
    assert released.token is None and released.released and released.released_ms == T0
    assert (released.holder, released.session, released.expires_ms) == ("a", "s", T0 + 8000)


async def test_a_forced_release_answers_who_and_why(harness, autojump_clock):
    kernel = harness.kernel
    scope = await harness.scopes.create("default")
    await _run(kernel, c.AcquireClaim, space="default", scope_id=scope["id"], key="k", holder="a", session="s", lease_s=5)
    freed = await _run(kernel, c.ForceReleaseClaim, space="default", scope_id=scope["id"], key="k", reason="hung", by="admin")
    assert type(freed) is ForceReleasedClaimView
    assert (freed.token, freed.released, freed.forced, freed.reason, freed.by) == (None, True, True, "hung", "admin")
    assert freed.holder == "a" and freed.released_ms == T0


async def test_an_answer_kept_for_a_retry_is_the_kernels_plain_form_without_a_shell(harness, autojump_clock):
    """With an Idempotency-Key the answer is the form the kernel keeps for the retry: with no shell
    to ask (`Kernel(keep_reply=...)` unset), the view's fields as they are; a retry answers it again."""
    kernel = harness.kernel
    scope = await harness.scopes.create("default")
    idem = Idem("default", "i1", "fp")
    fields = dict(space="default", scope_id=scope["id"], key="k", holder="a", session="s", lease_s=5, token="ct_fixed")
    first = await _run(kernel, c.AcquireClaim, idem, **fields)
    again = await _run(kernel, c.AcquireClaim, idem, **fields)
    assert first == again == {
        "key": "k", "scope_id": scope["id"], "token": "ct_fixed", "generation": 1, "holder": "a", "session": "s",
        "lease_ms": 5000, "expires_ms": T0 + 5000, "acquired_ms": T0,
    }
