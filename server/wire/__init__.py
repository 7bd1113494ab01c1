"""The wire: how each of the kernel's typed views is named and written in JSON, declared once.

`shape.py` is the machinery (a view's declaration becomes its encoder and its OpenAPI schema);
each primitive's shapes are declared in a module of their own here (`claims.py`, ...), as are the
shell's own answers (`errors.py`: the error envelope; `health.py`: `/healthz`), and
`COMPONENTS` gathers the OpenAPI components they make, which `openapi.py` serves instead of
shapes written by hand. Not to be confused with `actors/fields.py`, which declares what requests
carry.

`dumps` is how the server writes every JSON answer: orjson hands each view it meets (at the top,
or inside a list, a dict or a batch's results) to the view's encoder. `encode` is the same for a
value made of views, dicts and lists: it returns plain JSON. The kernel keeps an answer for an
Idempotency-Key's retries in that form (`Kernel(keep_reply=...)`), so a retry, even after a
restart or on another node of a cluster, answers the same bytes.
"""

from __future__ import annotations

from typing import Any

import orjson

from . import (
    admission, barriers, budgets, claims, cluster, dead_letters, errors, events, groups, health, history, keys, mailboxes, messages, once, operations, pools,
    quotas, scopes, spaces, tasks, timers, usage, work_limits,
)
from .claims import CLAIM, CLAIM_HELD, FORCE_RELEASED_CLAIM, HELD_CLAIM, RELEASED_CLAIM
from .tasks import GROUP_SUBMITTED_TASK, SUBMITTED_TASK, TASK
from .shape import TIMESTAMP, Shape, component, encoder, nullable

__all__ = [
    "Shape", "dumps", "encode", "component", "encoder", "TIMESTAMP", "nullable", "COMPONENTS",
    "CLAIM", "RELEASED_CLAIM", "FORCE_RELEASED_CLAIM", "HELD_CLAIM", "CLAIM_HELD",
    "TASK", "SUBMITTED_TASK", "GROUP_SUBMITTED_TASK",
]

# Every primitive's components, by name (each name declared by one module).
COMPONENTS: dict[str, dict[str, Any]] = {}
for _module in (
    claims, tasks, messages, mailboxes, pools, quotas, budgets, work_limits, admission, scopes, groups, barriers, timers, once,
    events, keys, dead_letters, operations, usage, errors, health, spaces, cluster, history,
):
    for _name, _schema in _module.COMPONENTS.items():
        assert _name not in COMPONENTS, f"the component {_name} is declared twice"
        COMPONENTS[_name] = _schema


def _default(value: Any) -> dict[str, Any]:
    encode_view = encoder(type(value))
    if encode_view is None:
        raise TypeError(f"{type(value).__name__} has no wire shape (server/wire/)")
    return encode_view(value)


def dumps(body: Any) -> bytes:
    """`body` as the JSON of an answer: plain values as orjson writes them, each typed view as its
    shape declares. orjson hands a named tuple to `default` by itself (it writes no tuple
    subclass as an array); dataclasses are passed through to it too, so that one without a
    declared shape is refused rather than written as its snake-case fields."""
    return orjson.dumps(body, default=_default, option=orjson.OPT_PASSTHROUGH_DATACLASS)


def encode(value: Any) -> Any:
    """`value` as plain JSON: each typed view in it (at the top, or in its dicts and lists) as its
    shape writes it; anything else as it is."""
    encode_view = encoder(type(value))
    if encode_view is not None:
        return encode_view(value)
    if type(value) is dict:
        return {key: encode(item) for key, item in value.items()}
    if type(value) is list:
        return [encode(item) for item in value]
    return value
