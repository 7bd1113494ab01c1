"""Docstrings that one method shares with another, so each is written once.

Two families of the SDK say the same thing twice by design: the run-bound API's `a`-prefixed
async forms (`astop()` is `stop()` on the caller's event loop), and the blocking client's
handles (`BlockingLease.renew()` is `ClaimLease.renew()` without `await`). Their docstrings are
filled in here from the one they mirror, once, at import; a method that has its own docstring
keeps it. The reference (`docs/python-reference.md`) and `help()` both read the result.
"""

from __future__ import annotations

import inspect
from typing import Callable, TypeVar

__all__ = ["async_forms", "twin_of", "TWINS"]

C = TypeVar("C", bound=type)

TWINS: dict[type, type] = {}
"""Each blocking class made with `twin_of`, to the async class it wraps: what the tests walk to
hold the two to the same members and the same parameters (tests/sdk/test_sdk_blocking_twins.py)."""


def _doc_of(owner: type, name: str) -> str | None:
    found = inspect.getattr_static(owner, name, None)
    if isinstance(found, (staticmethod, classmethod)):
        found = found.__func__
    return inspect.getdoc(found) if found is not None else None


def _fill(cls: type, name: str, doc: str) -> None:
    member = cls.__dict__[name]
    if isinstance(member, property):
        member.__doc__ = doc
    elif inspect.isfunction(member):
        member.__doc__ = doc


def async_forms(cls: C) -> C:
    """Give each `a`-prefixed method of `cls` without a docstring that of its plain twin."""
    for name, member in list(cls.__dict__.items()):
        if not name.startswith("a") or name.startswith("_") or name[1:] not in dir(cls):
            continue
        if not inspect.isfunction(member) or member.__doc__:
            continue
        plain = _doc_of(cls, name[1:])
        if plain:
            _fill(cls, name, f"`{name[1:]}()` as a coroutine, on the caller's own event loop (asyncio or trio).\n\n{plain}")
    return cls


def twin_of(source: type, note: str = "") -> Callable[[C], C]:
    """Give each public method and property of the decorated class without a docstring that of
    the same name on `source` (the async handle it wraps), with `note` after it; and record the
    pair in `TWINS`."""

    def decorate(cls: C) -> C:
        TWINS[cls] = source
        for name, member in list(cls.__dict__.items()):
            if name.startswith("_") or not (inspect.isfunction(member) or isinstance(member, property)):
                continue
            if member.__doc__:
                continue
            doc = _doc_of(source, name)
            if doc:
                _fill(cls, name, f"{doc}\n\n{note}".strip() if note else doc)
        return cls

    return decorate


