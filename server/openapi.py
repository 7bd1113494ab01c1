"""The OpenAPI 3.1 description of every route, served at `GET /v1/openapi.json`.

Made from the routes' declarations (`api.py`): each route's operation comes from its `Doc` and,
for a command, from the command's field declarations (`actors/fields.py`), so a route cannot be
served without being described, or described otherwise than it parses. The shapes of the answers
(the component schemas below: the kernel's typed views, and the shell's own, the error envelope
and the health probe's answer) come from their wire declarations (`wire/`), none written here.
`tests/server/test_openapi.py` checks the document against the router, and schemathesis checks a
live server's answers against it. Limits
come from `Limits`, so the document says what this server enforces. Response schemas list the fields a
client may rely on and leave room for more (`additionalProperties` is open): adding a field is not
a breaking change. Request bodies are closed (`additionalProperties: false`), as the routes refuse a
field they do not read.

Every error answer is the envelope `{"error": {"code", "message", "requestId"}}`. Every POST may
carry an `Idempotency-Key` (1-255 printable characters); a retry with it returns the first answer.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..actors.dead_letters import AGE_S_MAX, LIST_LIMIT_DEFAULT, LIST_LIMIT_MAX
from ..actors.fields import body_fields, query_fields, schema
from ..actors.limits import Limits
from .api import OPENAPI_PATH, Doc
from .errors import STATUS
from .http import Route
from .wire import COMPONENTS as WIRE_COMPONENTS
from .wire import nullable

__all__ = ["openapi", "operation", "OPENAPI_PATH"]


_nullable = nullable


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def _components(limits: Limits) -> dict[str, Any]:
    schemas = {
        # Declared with the view they write (`wire/`), as the encoder writes them.
        "Error": WIRE_COMPONENTS["Error"],
        "Health": WIRE_COMPONENTS["Health"],
        "Scope": WIRE_COMPONENTS["Scope"],
        "Scopes": WIRE_COMPONENTS["Scopes"],
        "SpaceCaps": WIRE_COMPONENTS["SpaceCaps"],
        "Claim": WIRE_COMPONENTS["Claim"],
        "HeldClaim": WIRE_COMPONENTS["HeldClaim"],
        "RunClaims": WIRE_COMPONENTS["RunClaims"],
        "Mailbox": WIRE_COMPONENTS["Mailbox"],
        "Mailboxes": WIRE_COMPONENTS["Mailboxes"],
        "Message": WIRE_COMPONENTS["Message"],
        "DeadLetter": WIRE_COMPONENTS["DeadLetter"],
        "DeadLetterPage": WIRE_COMPONENTS["DeadLetterPage"],
        "DeadLettersRequeued": WIRE_COMPONENTS["DeadLettersRequeued"],
        "DeadLettersDeleted": WIRE_COMPONENTS["DeadLettersDeleted"],
        "MailboxPurged": WIRE_COMPONENTS["MailboxPurged"],
        "Sent": WIRE_COMPONENTS["Sent"],
        "Delivery": WIRE_COMPONENTS["Delivery"],
        "Deliveries": WIRE_COMPONENTS["Deliveries"],
        "Settled": WIRE_COMPONENTS["Settled"],
        "DeliveryRenewed": WIRE_COMPONENTS["DeliveryRenewed"],
        "Task": WIRE_COMPONENTS["Task"],
        "RunTasks": WIRE_COMPONENTS["RunTasks"],
        "Submitted": WIRE_COMPONENTS["Submitted"],
        "Once": WIRE_COMPONENTS["Once"],
        "Usage": WIRE_COMPONENTS["Usage"],
        "ApiKey": WIRE_COMPONENTS["ApiKey"],
        "ApiKeys": WIRE_COMPONENTS["ApiKeys"],
        "RequestKey": WIRE_COMPONENTS["RequestKey"],
        "Spaces": WIRE_COMPONENTS["Spaces"],
    }
    schemas.update(_capacity_components())
    schemas.update(_coordination_components())
    return {
        "schemas": schemas,
        "securitySchemes": {
            "bearer": {"type": "http", "scheme": "bearer", "description": "an API key (opens its spaces) or the admin key"}
        },
        "parameters": {
            "space": {"name": "space", "in": "path", "required": True, "schema": {"type": "string", "minLength": 1}},
            "idempotency": {
                "name": "Idempotency-Key",
                "in": "header",
                "required": False,
                "schema": {"type": "string", "minLength": 1, "maxLength": limits.idempotency_key_len_max},
                "description": "a retry with the same key returns the first answer (for 24 h)",
            },
            "limit": {
                "name": "limit", "in": "query", "required": False,
                "schema": {"type": "integer", "minimum": 1, "maximum": LIST_LIMIT_MAX, "default": LIST_LIMIT_DEFAULT},
                "description": "the most items in the answer",
            },
        },
    }


def _capacity_components() -> dict[str, Any]:
    """Pools, quotas, budgets, work limits and admission."""
    return {
        # Declared with the view they write (`wire/`), as the encoder writes them.
        "Pool": WIRE_COMPONENTS["Pool"],
        "Pools": WIRE_COMPONENTS["Pools"],
        "Grant": WIRE_COMPONENTS["Grant"],
        "PoolWaiter": WIRE_COMPONENTS["PoolWaiter"],
        "Allowance": WIRE_COMPONENTS["Allowance"],
        "Allowances": WIRE_COMPONENTS["Allowances"],
        "Consumption": WIRE_COMPONENTS["Consumption"],
        "Waiter": WIRE_COMPONENTS["Waiter"],
        "Cooldown": WIRE_COMPONENTS["Cooldown"],
        "WorkLimit": WIRE_COMPONENTS["WorkLimit"],
        "WorkLimits": WIRE_COMPONENTS["WorkLimits"],
        "Budget": WIRE_COMPONENTS["Budget"],
        "Budgets": WIRE_COMPONENTS["Budgets"],
        "Admission": WIRE_COMPONENTS["Admission"],
        "Reservation": WIRE_COMPONENTS["Reservation"],
    }


def _coordination_components() -> dict[str, Any]:
    """Barriers, timers, task groups and events."""
    return {
        "Barrier": WIRE_COMPONENTS["Barrier"],
        "RunBarriers": WIRE_COMPONENTS["RunBarriers"],
        "Timer": WIRE_COMPONENTS["Timer"],
        "RunTimers": WIRE_COMPONENTS["RunTimers"],
        "NamedTimer": WIRE_COMPONENTS["NamedTimer"],
        "TimerPoll": WIRE_COMPONENTS["TimerPoll"],
        "GroupState": WIRE_COMPONENTS["GroupState"],
        "GroupVerdict": WIRE_COMPONENTS["GroupVerdict"],
        "TaskGroup": WIRE_COMPONENTS["TaskGroup"],
        "RunGroups": WIRE_COMPONENTS["RunGroups"],
        "GroupSubmitted": WIRE_COMPONENTS["GroupSubmitted"],
        "Event": WIRE_COMPONENTS["Event"],
        "EventPage": WIRE_COMPONENTS["EventPage"],
        "OpsRun": WIRE_COMPONENTS["OpsRun"],
        "Parked": WIRE_COMPONENTS["Parked"],
        "OpsWaits": WIRE_COMPONENTS["OpsWaits"],
        "BatchResults": WIRE_COMPONENTS["BatchResults"],
        "ClusterMap": WIRE_COMPONENTS["ClusterMap"],
        "AsOf": WIRE_COMPONENTS["AsOf"],
        "History": WIRE_COMPONENTS["History"],
        "HistoryDiff": WIRE_COMPONENTS["HistoryDiff"],
    }


def _query_schemas(limits: Limits) -> dict[str, dict[str, Any]]:
    """The query parameters that are not plain text, by name, as their routes read them (any
    other is a string): the server refuses a value outside these with 400."""
    return {
        "olderThanSeconds": {"type": "integer", "minimum": 0, "maximum": AGE_S_MAX,
                             "description": "dead letters that died at least this many seconds ago"},
        "newerThanSeconds": {"type": "integer", "minimum": 0, "maximum": AGE_S_MAX,
                             "description": "dead letters that died at most this many seconds ago"},
        "latest": {"type": "integer", "minimum": 0, "maximum": LIST_LIMIT_MAX,
                   "description": "the newest N events instead of those after a cursor (0: only the cursor after the newest)"},
        "types": {"type": "string", "description": "event types, comma-separated, each exactly as the log names it (any other is refused)"},
        "waitSeconds": {"type": "integer", "minimum": 0, "description": (
            f"hold an empty answer up to this long (default {limits.watch_wait_s_default}); capped at "
            f"{limits.watch_wait_s_max}, or {limits.watch_wait_s_legacy_max} for a client that does not say it is 0.3.0 or newer")},
    }


def _headers(headers: tuple[tuple[str, str, bool], ...]) -> dict[str, Any]:
    """An answer's `headers`: each name with its description and schema, and whether it always
    comes (written out, not referred to: a reference takes no `required` beside it)."""
    return {name: {**_HEADER_COMPONENTS[component], "required": always} for name, component, always in headers}


# The headers the answers carry (`Reply.headers`, and the errors' below), by the name a Reply gives.
_HEADER_COMPONENTS = {
    "RetryAfter": {"description": "seconds to wait before asking again, with a fraction where it is known to the millisecond "
                                  "(29.998); a client reading whole seconds rounds it up",
                   "schema": {"type": "string", "pattern": "^[0-9]+(\\.[0-9]+)?$"}},
    "Allow": {"description": "the methods the path takes", "schema": {"type": "string"}},
    "WWWAuthenticate": {"description": "the scheme that opens the route: Bearer", "schema": {"type": "string"}},
    "WaitCapped": {"description": "the wait asked was longer than the server holds a call: it was held this many "
                                  "milliseconds (wait_ms_max); ask again", "schema": {"type": "string", "pattern": "^[0-9]+$"}},
    "AsOfLsn": {"description": "the LSN of the past point the answer stands at", "schema": {"type": "string", "pattern": "^[0-9]+$"}},
    "AsOfTime": {"description": "the time of the past point the answer stands at, UTC", "schema": {"type": "string"}},
    "Location": {"description": "the path that reads what was made", "schema": {"type": "string"}},
}
_RETRY_AFTER = ("Retry-After", "RetryAfter", False)


def _error(description: str, headers: tuple[tuple[str, str, bool], ...] = ()) -> dict[str, Any]:
    answer: dict[str, Any] = {"description": description, "content": {"application/json": {"schema": _ref("Error")}}}
    if headers:
        answer["headers"] = _headers(headers)
    return answer


def _codes(status: int) -> list[str]:
    """The error codes answered with `status` (`errors.STATUS`), so the document lists them all."""
    return [code for code, given in STATUS.items() if given == status]


_ERRORS = {
    "400": _error("VALIDATION_FAILED: a field is missing, of the wrong type or outside its limits, or a field or query "
                  "parameter the route does not take"),
    "401": _error("UNAUTHENTICATED: no key, or a key the server does not know",
                  (("WWW-Authenticate", "WWWAuthenticate", True),)),
    "403": _error("FORBIDDEN: the key may not do this: an admin route with an API key, a change with a key of the viewer "
                  "role, or a change in a space other than an operator's action with the admin key"),
    "404": _error("NOT_FOUND: no such thing in this space (or a space the key does not open)"),
    "405": _error("METHOD_NOT_ALLOWED", (("Allow", "Allow", True),)),
    "409": _error("a conflict: " + ", ".join(_codes(409)) + " (CLAIM_HELD, CAPACITY_UNAVAILABLE and BACKLOG_FULL with "
                  "Retry-After)", (_RETRY_AFTER,)),
    "410": _error("CURSOR_EXPIRED: the cursor is older than the events kept (or ahead of them); start again without one. "
                  "HISTORY_NOT_KEPT: the point is older than the history kept"),
    "413": _error("the request body is over the limit"),
    "429": _error("ALLOWANCE_EXHAUSTED or ALLOWANCE_COOLDOWN, with Retry-After", (("Retry-After", "RetryAfter", True),)),
    "503": _error("UNAVAILABLE: the server is recovering, shutting down, or cannot write its journal", (_RETRY_AFTER,)),
}

# What every keyed route may answer whatever it does: a bad or missing key, a bad
# Idempotency-Key or path encoding, a body over the limit, a server not ready.
_KEYED_ERRORS = ("400", "401", "413", "503")


def _schema(schema: str | dict[str, Any] | None) -> dict[str, Any] | None:
    return _ref(schema) if isinstance(schema, str) else schema


def _request_body(doc: Doc, limits: Limits) -> dict[str, Any] | None:
    specs = list(body_fields(doc.command)) if doc.command is not None else list(doc.body or ())
    if not specs:
        return None
    properties = {spec.wire: schema(spec, limits) for spec in specs}
    # Closed, unlike the answers' schemas: a route refuses a field it does not read (400 naming
    # it), so a client checked against the document learns of a typo before sending it.
    body: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    required = [spec.wire for spec in specs if spec.required]
    if required:
        body["required"] = required
    return {"required": doc.body_required, "content": {"application/json": {"schema": body}}}


def operation(route: Any, limits: Limits) -> dict[str, Any]:
    """The OpenAPI operation of one declared route."""
    doc: Doc = route.doc
    parameters: list[dict[str, Any]] = []
    for name in route.params:
        if name is None:
            continue
        if name == "space":
            parameters.append({"$ref": "#/components/parameters/space"})
        else:
            parameters.append({"name": name, "in": "path", "required": True, "schema": {"type": "string", "minLength": 1}})
    typed = _query_schemas(limits)
    for name in doc.query:
        if name == "limit":
            parameters.append({"$ref": "#/components/parameters/limit"})
        else:
            parameters.append({"name": name, "in": "query", "required": False, "schema": typed.get(name, {"type": "string"})})
    if doc.command is not None:
        for spec in query_fields(doc.command):
            # A query parameter is absent or a value: never null.
            value = schema(dataclasses.replace(spec, required=True), limits)
            parameters.append({"name": spec.wire, "in": "query", "required": spec.required, "schema": value})
    if doc.idempotent:
        parameters.append({"$ref": "#/components/parameters/idempotency"})
    responses: dict[str, dict[str, Any]] = {}
    # A long poll held for less than it asked says so (`api.say_if_capped`).
    waits = doc.command is not None and any(spec.wire == "waitMs" for spec in (*body_fields(doc.command), *query_fields(doc.command)))
    for reply in doc.replies:
        answer: dict[str, Any] = {"description": reply.description}
        if reply.schema is not None:
            answer["content"] = {reply.content_type: {"schema": _schema(reply.schema)}}
        headers = (*reply.headers, *((("runstate-wait-capped-ms", "WaitCapped", False),) if waits else ()),
                   *((("Location", "Location", True),) if reply.status == 201 and doc.location is not None else ()))
        if headers:
            answer["headers"] = _headers(headers)
        responses[str(reply.status)] = answer
    errors = doc.errors if route.public else (*doc.errors, *_KEYED_ERRORS)
    if not route.public and route.method != "GET":  # a viewer's key changes nothing (runtime.authorize)
        errors = (*errors, "403")
    if route.query_names is not None:  # a query parameter it does not take is refused
        errors = (*errors, "400")
    for code in sorted(set(errors)):
        responses.setdefault(code, _ERRORS[code])
    result: dict[str, Any] = {"summary": doc.summary, "parameters": parameters, "responses": responses}
    if doc.operator:
        result["description"] = (
            "An operator's action: the admin key may call it in any space the server knows, and its record and "
            "event say who did (`by`: the API key's id, or `admin`)."
        )
    if doc.admin_key_off_loopback:
        # Either none (from loopback) or the admin key (from anywhere else): `{}` is "no key".
        result["security"] = [{}, {"bearer": []}]
        result["description"] = (
            "Without a key from loopback only; from any other address it needs the admin key (401 without a valid "
            "key, 403 with an API key), unless the server is started with metrics_public."
        )
    elif route.public and not doc.takes_key:
        result["security"] = []
    body = _request_body(doc, limits)
    if body is not None:
        result["requestBody"] = body
    return result


def openapi(limits: Limits | None = None, routes: list[Route] | None = None) -> dict[str, Any]:
    """The whole document for a server with these limits, made from the routes' declarations."""
    limits = limits or Limits()
    if routes is None:
        from .routes import ROUTER  # the routes import this module to serve the document

        routes = ROUTER.routes
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        paths.setdefault(route.path, {})[route.method.lower()] = operation(route, limits)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "runstate",
            "version": "1",
            "description": "Claims with leases and fencing tokens, shared tasks, and work queues with crash takeover. "
            "Every error is {\"error\": {\"code\", \"message\", \"requestId\"}}.",
        },
        "security": [{"bearer": []}],
        "paths": paths,
        "components": _components(limits),
    }
