"""The OpenAPI 3.1 description of every route, served at `GET /v1/openapi.json`.

Written by hand, next to the routes, and kept true by `tests/server/test_openapi.py`: a route in
the router missing here (or a path here with no route, or different path parameters) fails it,
and schemathesis checks the answers of a live server against these schemas. Limits come from
`Limits`, so the document says what this server enforces. Response schemas list the fields a
client may rely on and leave room for more (`additionalProperties` is open): adding a field is not
a breaking change.

Every error answer is the envelope `{"error": {"code", "message", "requestId"}}`. Every POST may
carry an `Idempotency-Key` (1-255 printable characters); a retry with it returns the first answer.
"""

from __future__ import annotations

from typing import Any

from ..actors.limits import Limits

__all__ = ["openapi", "OPENAPI_PATH"]

OPENAPI_PATH = "/v1/openapi.json"

_TS = {"type": "string", "description": "UTC, `YYYY-MM-DDTHH:MM:SS.mmmZ`"}
_TS_IN = {"type": "string", "minLength": 10, "maxLength": 64, "description": "RFC 3339 with a zone, e.g. 2030-01-31T12:00:00Z"}


def _nullable(schema: dict) -> dict:
    kind = schema.get("type")
    if kind is None:
        return {"anyOf": [schema, {"type": "null"}]}
    return {**schema, "type": [kind, "null"] if isinstance(kind, str) else [*kind, "null"]}


def _obj(required: dict[str, dict], optional: dict[str, dict] | None = None) -> dict:
    properties = {**required, **(optional or {})}
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = list(required)
    return schema


def _ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def _text(length_max: int, length_min: int = 1) -> dict:
    return {"type": "string", "minLength": length_min, "maxLength": length_max}


def _components(limits: Limits) -> dict:
    any_json = {"description": f"any JSON value, at most {limits.payload_bytes_max} bytes and {limits.json_depth_max} levels deep"}
    text = {"type": "string"}
    integer = {"type": "integer"}
    schemas = {
        "Error": _obj(
            {
                "error": _obj(
                    {"code": text, "message": text, "requestId": text},
                    {"details": {"type": "object"}},
                )
            }
        ),
        "Health": _obj({"status": {"const": "ok"}}),
        "Scope": _obj(
            {
                "id": text,
                "name": _nullable(text),
                "parentId": _nullable(text),
                "deadline": _nullable(_TS),
                "childLimit": _nullable(integer),
                "children": integer,
                "storedState": {"enum": ["ACTIVE", "CANCELLED", "COMPLETED", "EXPIRED"]},
                "effective": {"enum": ["ACTIVE", "CANCELLED", "COMPLETED", "EXPIRED"]},
                "createdAt": _TS,
                "endedAt": _nullable(_TS),
            }
        ),
        "Claim": _obj(
            {
                "key": text,
                "scopeId": text,
                "token": _nullable(text),
                "generation": integer,
                "holder": _nullable(text),
                "holderSession": _nullable(text),
                "leaseSeconds": integer,
                "leaseExpiresAt": _TS,
                "acquiredAt": _TS,
            },
            {"released": {"type": "boolean"}, "releasedAt": _TS},
        ),
        "Mailbox": _obj(
            {
                "id": text,
                "name": text,
                "mode": {"const": "WORK"},
                "backlogLimit": _nullable(integer),
                "maxAttempts": integer,
                "backlog": integer,
                "counts": _obj({"queued": integer, "delayed": integer, "leased": integer, "deadLetters": integer}),
                "createdAt": _TS,
            }
        ),
        "Message": _obj(
            {
                "id": text,
                "mailboxId": text,
                "scopeId": text,
                "taskId": _nullable(text),
                "state": {"enum": ["QUEUED", "DELAYED", "LEASED", "COMPLETED", "DEAD", "DROPPED"]},
                "attempt": integer,
                "workKey": _nullable(text),
                "deadline": _nullable(_TS),
                "createdAt": _TS,
                "finishedAt": _nullable(_TS),
                "reason": _nullable(text),
            },
            {"payload": any_json, "leaseExpiresAt": _TS, "holder": text, "visibleAt": _TS},
        ),
        "Sent": _obj(
            {
                "id": text,
                "messageId": text,
                "mailboxId": text,
                "scopeId": text,
                "workKey": _nullable(text),
                "state": _nullable(text),
                "replay": {"type": "boolean"},
            }
        ),
        "Delivery": _obj(
            {
                "message": _obj(
                    {
                        "id": text,
                        "mailboxId": text,
                        "scopeId": text,
                        "payload": any_json,
                        "attempt": integer,
                        "workKey": _nullable(text),
                        "deadline": _nullable(_TS),
                        "taskId": _nullable(text),
                    }
                ),
                "token": text,
                "leaseExpiresAt": _TS,
                "leaseSeconds": integer,
            }
        ),
        "Settled": _obj(
            {"id": text, "state": text, "attempt": integer, "taskId": _nullable(text)},
            {"taskState": text, "visibleAt": _TS},
        ),
        "DeliveryRenewed": _obj({"id": text, "leaseExpiresAt": _TS, "leaseSeconds": integer, "attempt": integer}),
        "Task": _obj(
            {
                "id": text,
                "taskId": text,
                "taskKey": text,
                "scopeId": text,
                "mailboxId": text,
                "messageId": text,
                "state": {"enum": ["QUEUED", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED", "EXPIRED"]},
                "attempt": integer,
                "outcome": {"description": "the recorded result (null until SUCCEEDED, and once tombstoned)"},
                "outcomeReason": _nullable(text),
                "deadline": _nullable(_TS),
                "subscribers": {"type": "array", "items": text},
                "createdAt": _TS,
                "updatedAt": _TS,
                "finishedAt": _nullable(_TS),
                "tombstoned": {"type": "boolean"},
            }
        ),
        "Usage": _obj(
            {
                "spaceId": text,
                "operations": {"type": "object", "additionalProperties": integer},
                "total": integer,
                "free": {"type": "object", "additionalProperties": integer},
                "events": {"type": "object", "additionalProperties": integer},
            }
        ),
        "ApiKey": _obj(
            {
                "id": text,
                "name": _nullable(text),
                "spaces": {"type": "array", "items": text},
                "createdAt": _TS,
                "revokedAt": _nullable(_TS),
            },
            {"key": {"type": "string", "description": "the new key's secret: shown in this answer only"}},
        ),
    }
    schemas["Submitted"] = {"allOf": [_ref("Task"), _obj({"created": {"type": "boolean"}, "replay": {"type": "boolean"}})]}
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
            "limit": {"name": "limit", "in": "query", "required": False, "schema": {"type": "integer", "minimum": 1, "maximum": 1000}},
        },
    }


def _error(description: str) -> dict:
    return {"description": description, "content": {"application/json": {"schema": _ref("Error")}}}


_ERRORS = {
    "400": _error("VALIDATION_FAILED: a field is missing, of the wrong type or outside its limits"),
    "401": _error("UNAUTHENTICATED: no key, or a key the server does not know"),
    "403": _error("FORBIDDEN: this needs the admin key"),
    "404": _error("NOT_FOUND: no such thing in this space (or a space the key does not open)"),
    "405": _error("METHOD_NOT_ALLOWED"),
    "409": _error("a conflict: CLAIM_HELD, STALE_CLAIM, SCOPE_CANCELLED, CONFLICT, IDEMPOTENCY_CONFLICT, BACKLOG_FULL, DEADLINE_EXCEEDED"),
    "413": _error("the request body is over the limit"),
    "503": _error("UNAVAILABLE: the server is recovering, shutting down, or cannot write its journal"),
}


def _json(status_description: str, schema: dict) -> dict:
    return {"description": status_description, "content": {"application/json": {"schema": schema}}}


def _operation(
    summary: str,
    responses: dict[str, dict],
    *,
    params: tuple[str, ...] = (),
    body: dict | None = None,
    body_required: bool = True,
    query: tuple[str, ...] = (),
    public: bool = False,
    errors: tuple[str, ...] = ("400", "401", "404", "409", "413", "503"),
    post: bool = True,
) -> dict:
    parameters: list[dict] = []
    for name in params:
        if name == "space":
            parameters.append({"$ref": "#/components/parameters/space"})
        else:
            parameters.append({"name": name, "in": "path", "required": True, "schema": {"type": "string", "minLength": 1}})
    for name in query:
        parameters.append({"$ref": f"#/components/parameters/{name}"} if name == "limit" else {"name": name, "in": "query", "required": False, "schema": {"type": "string"}})
    if post and not public:
        parameters.append({"$ref": "#/components/parameters/idempotency"})
    operation: dict[str, Any] = {"summary": summary, "parameters": parameters, "responses": {**responses}}
    if not public:  # a bad Idempotency-Key or path encoding, a body over the limit, a server not ready
        errors = (*errors, "400", "413", "503")
    for code in sorted(set(errors)):
        operation["responses"].setdefault(code, _ERRORS[code])
    if public:
        operation["security"] = []
    if body is not None:
        operation["requestBody"] = {"required": body_required, "content": {"application/json": {"schema": body}}}
    return operation


def openapi(limits: Limits | None = None) -> dict:
    """The whole document for a server with these limits."""
    limits = limits or Limits()
    key_text = _text(limits.claim_key_len_max)
    holder = _text(limits.holder_len_max)
    lease = {"type": "integer", "minimum": limits.lease_s_min, "maximum": limits.lease_s_max}
    payload = {"description": f"any JSON value, at most {limits.payload_bytes_max} bytes, {limits.json_depth_max} levels"}
    token = {"type": "string"}
    space = "/v1/spaces/{space}"
    ok = lambda schema, text="OK": {"200": _json(text, schema)}  # noqa: E731
    paths: dict[str, dict] = {}

    def add(path: str, method: str, operation: dict) -> None:
        paths.setdefault(path, {})[method] = operation

    add("/healthz", "get", _operation("Health: 200 once the state is recovered and served", ok(_ref("Health")), public=True, errors=("503",), post=False))
    add(OPENAPI_PATH, "get", _operation("This document", ok({"type": "object"}), public=True, errors=(), post=False))
    add("/metrics", "get", _operation(
        "Prometheus metrics (from loopback without a key, else with the admin key)",
        {"200": {"description": "Prometheus text format", "content": {"text/plain": {"schema": {"type": "string"}}}}},
        public=True, errors=("401", "403"), post=False,
    ))

    # Scopes.
    add(space + "/scopes", "post", _operation(
        "Create a run (scope)", {"201": _json("Created", _ref("Scope"))}, params=("space",),
        body=_obj({}, {"name": _nullable(_text(limits.name_len_max)), "parentId": _nullable({"type": "string"}), "deadline": _nullable(_TS_IN),
                        "childLimit": _nullable({"type": "integer", "minimum": 0, "maximum": limits.child_limit_max})}),
        body_required=False,
    ))
    add(space + "/scopes", "get", _operation("Runs of the space, newest first", ok(_obj({"scopes": {"type": "array", "items": _ref("Scope")}, "truncated": {"type": "boolean"}})), params=("space",), query=("limit",), post=False, errors=("400", "401", "404", "503")))
    add(space + "/scopes/{scope_id}", "get", _operation("A run", ok(_ref("Scope")), params=("space", "scope_id"), post=False, errors=("401", "404", "503")))
    for end in ("cancel", "complete"):
        add(space + "/scopes/{scope_id}/" + end, "post", _operation(f"{end.title()} a run and its subtree (no body)", ok(_ref("Scope")), params=("space", "scope_id"), errors=("401", "404", "409", "413", "503")))
    add(space + "/scopes/{scope_id}/claims", "get", _operation("Claims held in a run (tokens left out)", ok(_obj({"scopeId": {"type": "string"}, "claims": {"type": "array", "items": {"type": "object"}}, "truncated": {"type": "boolean"}})), params=("space", "scope_id"), query=("limit",), post=False, errors=("400", "401", "404", "503")))
    add(space + "/scopes/{scope_id}/tasks", "get", _operation("Tasks of a run, newest first", ok(_obj({"scopeId": {"type": "string"}, "tasks": {"type": "array", "items": _ref("Task")}, "truncated": {"type": "boolean"}})), params=("space", "scope_id"), query=("limit",), post=False, errors=("400", "401", "404", "503")))
    add(space + "/usage", "get", _operation("Operations counted for the space", ok(_ref("Usage")), params=("space",), post=False, errors=("401", "404", "503")))

    # Claims.
    add(space + "/claims", "post", _operation(
        "Acquire a claim", ok(_ref("Claim")), params=("space",),
        body=_obj({"key": key_text, "scopeId": {"type": "string"}, "holder": holder, "holderSession": holder}, {"leaseSeconds": _nullable(lease)}),
    ))
    add(space + "/claims/{key}/renew", "post", _operation(
        "Renew a claim's lease ({key} percent-encoded)", ok(_ref("Claim")), params=("space", "key"),
        body=_obj({"token": token}, {"leaseSeconds": _nullable(lease)}),
    ))
    add(space + "/claims/{key}/release", "post", _operation(
        "Release a claim", ok(_ref("Claim")), params=("space", "key"),
        body=_obj({"token": token}, {"observation": payload}),
    ))

    # Mailboxes and messages.
    add(space + "/mailboxes", "get", _operation("Every mailbox of the space", ok(_obj({"mailboxes": {"type": "array", "items": _ref("Mailbox")}})), params=("space",), post=False, errors=("401", "404", "503")))
    add(space + "/mailboxes", "post", _operation(
        "Create a work queue", {"201": _json("Created", _ref("Mailbox"))}, params=("space",),
        body=_obj({"name": _text(limits.name_len_max)}, {
            "mode": _nullable({"type": "string", "description": "WORK (the default) is the one mode served"}),
            "backlogLimit": _nullable({"type": "integer", "minimum": 1, "maximum": limits.backlog_limit_max}),
            "maxAttempts": _nullable({"type": "integer", "minimum": 1, "maximum": limits.attempts_max_max}),
        }),
    ))
    add(space + "/mailboxes/{mailbox_id}", "get", _operation("A mailbox", ok(_ref("Mailbox")), params=("space", "mailbox_id"), post=False, errors=("401", "404", "503")))
    add(space + "/mailboxes/{mailbox_id}/dead-letters", "get", _operation(
        "The newest dead letters", ok(_obj({"deadLetters": {"type": "array", "items": _ref("Message")}, "total": {"type": "integer"}, "truncated": {"type": "boolean"}})),
        params=("space", "mailbox_id"), post=False, errors=("401", "404", "503"),
    ))
    add(space + "/mailboxes/{mailbox_id}/messages", "post", _operation(
        "Send a message", {"201": _json("Sent", _ref("Sent")), "200": _json("A replay of the work key's message", _ref("Sent"))}, params=("space", "mailbox_id"),
        body=_obj({"scopeId": {"type": "string"}}, {"payload": payload, "workKey": _nullable(_text(limits.work_key_len_max)), "deadline": _nullable(_TS_IN)}),
    ))
    add(space + "/mailboxes/{mailbox_id}/recv", "post", _operation(
        "Lease the oldest deliverable message (a long poll with waitMs)",
        {"200": _json("A delivery", _ref("Delivery")), "204": {"description": "Nothing to deliver (after waiting up to waitMs)"}},
        params=("space", "mailbox_id"),
        body=_obj({"scopeId": {"type": "string"}, "holder": holder, "holderSession": holder},
                  {"leaseSeconds": _nullable(lease), "waitMs": _nullable({"type": "integer", "minimum": 0, "description": f"capped at {limits.wait_ms_max}"})}),
    ))
    settle = {"token": token}
    add(space + "/messages/{message_id}/complete", "post", _operation(
        "Complete a delivery", ok(_ref("Settled")), params=("space", "message_id"), body=_obj(settle, {"result": payload}),
    ))
    add(space + "/messages/{message_id}/nack", "post", _operation(
        "Retry (after a backoff) or reject a delivery", ok(_ref("Settled")), params=("space", "message_id"),
        body=_obj({**settle, "retry": {"type": "boolean"}}, {"error": _nullable({"type": "string", "maxLength": 2000})}),
    ))
    add(space + "/messages/{message_id}/renew", "post", _operation(
        "Renew a delivery's lease", ok(_ref("DeliveryRenewed")), params=("space", "message_id"), body=_obj(settle, {"leaseSeconds": _nullable(lease)}),
    ))

    # Tasks.
    add(space + "/tasks", "post", _operation(
        "Create the task of (scopeId, taskKey), or return the one it has",
        {"201": _json("Created", _ref("Submitted")), "200": _json("The key's existing task", _ref("Submitted"))}, params=("space",),
        body=_obj({"scopeId": {"type": "string"}, "mailboxId": {"type": "string"}, "taskKey": _text(limits.task_key_len_max)},
                  {"input": payload, "deadline": _nullable(_TS_IN), "subscriberId": _nullable(holder)}),
    ))
    add(space + "/tasks/{task_id}", "get", _operation("A task", ok(_ref("Task")), params=("space", "task_id"), post=False, errors=("401", "404", "503")))
    add(space + "/tasks/{task_id}/cancel", "post", _operation(
        "Cancel a task", ok(_ref("Task")), params=("space", "task_id"), body=_obj({}, {"reason": _nullable({"type": "string", "maxLength": 2000})}), body_required=False,
    ))
    add(space + "/tasks/{task_id}/join", "post", _operation(
        "Subscribe to a task", ok(_ref("Task")), params=("space", "task_id"), body=_obj({"subscriberId": holder, "scopeId": {"type": "string"}}),
    ))
    add(space + "/tasks/{task_id}/detach", "post", _operation(
        "Unsubscribe from a task", ok(_ref("Task")), params=("space", "task_id"), body=_obj({"subscriberId": holder}),
    ))

    # Admin (the admin key).
    admin_errors = ("400", "401", "403", "404", "413", "503")
    add("/v1/admin/keys", "post", _operation(
        "Make an API key for some spaces", {"201": _json("Created, with the secret", _ref("ApiKey"))},
        body=_obj({}, {"space": {"type": "string"}, "spaces": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 100}, "name": _nullable(_text(limits.name_len_max))}),
        errors=admin_errors, post=False,
    ))
    add("/v1/admin/keys", "get", _operation("API keys (optionally of one space)", ok(_obj({"keys": {"type": "array", "items": _ref("ApiKey")}})), query=("space",), post=False, errors=("401", "403", "503")))
    add("/v1/admin/keys/{key_id}/revoke", "post", _operation("Revoke an API key", ok(_ref("ApiKey")), params=("key_id",), errors=("401", "403", "404", "413", "503"), post=False))
    add("/v1/admin/spaces", "get", _operation(
        "Spaces and what they hold",
        ok(_obj({"spaces": {"type": "array", "items": _obj({"id": {"type": "string"}, "keys": {"type": "integer"}, "runs": {"type": "integer"}, "claimsLive": {"type": "integer"}, "operations": {"type": "integer"}})}})),
        post=False, errors=("401", "403", "503"),
    ))

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
