"""The API reference (`docs/api.md`), made from the routes' declarations like the OpenAPI document.

    python -m runstate.server.apidoc > docs/api.md

`tests/server/test_apidoc.py` fails when the file in the tree differs from what this prints, so
the reference cannot fall behind the router. Limits are this server's defaults (`Limits()`).
"""

from __future__ import annotations

import sys

from ..actors.fields import BODY, Spec, body_fields, query_fields
from ..actors.limits import Limits
from .http import Route
from .openapi import OPENAPI_PATH, operation

__all__ = ["render"]

_INTRO = """# HTTP API reference

Generated from the route declarations (`server/routes/`) by `python -m runstate.server.apidoc`;
the OpenAPI 3.1 document served at `GET {openapi_path}` comes from the same declarations. Limits
shown are the defaults; every one is a setting ([configuration](configuration.md)). How the
routes behave (tasks and queues, runs by name, once keys, the error codes) is in
[behaviour.md](behaviour.md).

- **Keys.** Every route but the public ones takes `Authorization: Bearer <key>`. An API key opens
  the spaces it was made for; another space's ids answer 404 as if they did not exist. A key with
  the `viewer` role reads there and is refused every change (403 `FORBIDDEN`). The admin key reads
  every space and is the only key for `/v1/admin`.
- **Errors.** Every answer of 400 and above is `{{"error": {{"code", "message", "requestId"}}}}`,
  with `details` where there is more to act on, and `Retry-After` on contention (in seconds,
  with a fraction where it is known to the millisecond).
- **Retries.** Every mutation of a space takes an `Idempotency-Key` header (1-{key_len_max} printable
  characters): a retry with the same key and request returns the first answer, for 24 hours, and
  the key with another request is 409 `IDEMPOTENCY_CONFLICT`. Only an answer that changed
  something is kept: a refusal, or an answer that changed nothing (a 204 of a receive, a `PUT`
  that found what it names), is not, and a retry with its key runs again. A batch's own header is
  not read: each of its operations carries its own `idempotencyKey`.
- **Created.** A 201 of a run, a mailbox, a task, a barrier, a timer, a task group, a pool or a
  budget carries `Location`: the path of the GET that reads what it made.
- **Fields.** An optional field that is `null` is the same as an absent one; a field the route does
  not read is refused with 400 naming it (a typo is not dropped in silence); integers are JSON
  integers (`30.0` and `"30"` are refused).
- **Query parameters.** A route under `/v1` takes the query parameters listed for it below and no
  other: any other is refused with 400 naming it, as an unknown field is (a mistyped filter would
  otherwise answer unfiltered). A name given twice counts once, with its last value.
"""


def _type(spec: Spec) -> str:
    return {"text": "string", "texts": "list of strings", "timestamp": "RFC 3339 timestamp", "json": "any JSON",
            "objects": "list of objects"}.get(
        spec.kind, spec.kind
    )


def _limits_of(spec: Spec, limits: Limits) -> str:
    notes = []
    if spec.length_max is not None:
        low = spec.length_min
        notes.append(f"{low}-{spec.bound(spec.length_max, limits)} characters")
    if spec.minimum is not None or spec.maximum is not None:
        low, high = spec.bound(spec.minimum, limits), spec.bound(spec.maximum, limits)
        notes.append(f">= {low}" if high is None else f"{low}-{high}")
    if spec.default is not None:
        notes.append(f"default {spec.bound(spec.default, limits)}")
    if spec.kind == "json":
        notes.append(f"at most {limits.payload_bytes_max} bytes, {limits.json_depth_max} levels")
    if spec.items_max is not None:
        notes.append(f"at most {spec.items_max} items")
    if spec.description:
        notes.append(spec.description.format(**{name: getattr(limits, name) for name in limits.__dataclass_fields__}))
    return "; ".join(notes)


def _fields(route: Route) -> list[Spec]:
    doc = route.doc
    if doc.command is not None:
        return list(body_fields(doc.command))
    return [spec for spec in doc.body or () if spec.source == BODY]


def _query(route: Route) -> list[str]:
    """The query parameters a route takes, in the order the OpenAPI document lists them."""
    doc = route.doc
    names = list(doc.query)
    if doc.command is not None:
        names += [spec.wire for spec in query_fields(doc.command)]
    return names


def render(routes: list[Route] | None = None, limits: Limits | None = None) -> str:
    limits = limits or Limits()
    if routes is None:
        from .routes import ROUTER

        routes = ROUTER.routes
    out = [_INTRO.format(openapi_path=OPENAPI_PATH, key_len_max=limits.idempotency_key_len_max)]
    groups: dict[str, list[Route]] = {}
    for route in routes:
        groups.setdefault(route.doc.group or "Other", []).append(route)
    out.append("## Routes\n")
    for group, members in groups.items():
        out.append(f"### {group}\n")
        out.append("| Method | Path | What it does | Answers | Errors |")
        out.append("|---|---|---|---|---|")
        for route in members:
            described = operation(route, limits)
            answers = ", ".join(code for code in described["responses"] if code < "400")
            errors = ", ".join(code for code in described["responses"] if code >= "400")
            summary = route.doc.summary + (" (operator's action: the admin key too)" if route.doc.operator else "")
            out.append(f"| {route.method} | `{route.path}` | {summary} | {answers} | {errors} |")
        out.append("")
    out.append("## Query parameters\n")
    out.append("| Method | Path | Query parameters |")
    out.append("|---|---|---|")
    for route in routes:
        names = _query(route)
        if names:
            out.append(f"| {route.method} | `{route.path}` | {', '.join(f'`{name}`' for name in names)} |")
    out.append("")
    out.append("## Request bodies\n")
    for route in routes:
        fields = _fields(route)
        if not fields:
            continue
        out.append(f"### {route.method} `{route.path}`\n")
        out.append("| Field | Type | Required | Limits |")
        out.append("|---|---|---|---|")
        for spec in fields:
            out.append(f"| `{spec.wire}` | {_type(spec)} | {'yes' if spec.required else 'no'} | {_limits_of(spec, limits)} |")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
