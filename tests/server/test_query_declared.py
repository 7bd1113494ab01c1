"""Every route of the API declares exactly the query parameters its handler reads: no more (the
document would offer a parameter that does nothing), no fewer (a parameter read but not declared
would be missing from the document, and refused as unknown: `respond` takes only the declared).

What a handler reads is found in its code, every branch of it, not only the ones some test
happens to run: `request.param("x")`, a name handed with `request` to a helper of ours that
reads it (`_integer(request, "limit", ...)`, followed into the helper), and the query fields of a
command parsed with `request.param` (`kernel.parse(c.WaitTask, ..., request.param)`). A call
that hands `request` to anything else must be one known not to read the query string, so that
the scan cannot miss a read it does not understand.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from typing import Any, Callable

from runstate.actors.fields import query_fields
from runstate.server.routes import ROUTER

# Methods handed the request that read its headers or body, never its query string.
NOT_QUERY = {"authorize", "authorize_admin", "caller", "bearer", "idem", "json"}


def _namespace(function: Callable[..., Any]) -> dict[str, Any]:
    names = dict(function.__globals__)
    names.update(inspect.getclosurevars(function).nonlocals)
    return names


def _value(node: ast.expr, names: dict[str, Any]) -> Any:
    """What a name or a dotted name in the function's code stands for (None if not found)."""
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.Attribute):
        owner = _value(node.value, names)
        return None if owner is None else getattr(owner, node.attr, None)
    return None


def _is_request(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id == "request"


def _is_param(node: ast.expr) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "param" and _is_request(node.value)


def _text(node: ast.expr, bound: dict[str, str], where: str) -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name) and node.id in bound:
        return bound[node.id]
    raise AssertionError(f"{where}: a query parameter named by {ast.unparse(node)}, which the scan cannot tell")


def reads(function: Callable[..., Any], bound: dict[str, str] | None = None) -> set[str]:
    """The query parameters `function` reads, on every path through it (see the module docstring).
    `bound`: the texts its parameters were given by the caller (a helper's `name`)."""
    function = inspect.unwrap(function)
    bound = bound or {}
    where = f"{function.__module__}.{function.__qualname__}"
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    definition = tree.body[0]
    assert isinstance(definition, (ast.FunctionDef, ast.AsyncFunctionDef)), where
    names = _namespace(function)
    found: set[str] = set()
    for node in ast.walk(definition):
        if not isinstance(node, ast.Call):
            continue
        arguments = [*node.args, *(keyword.value for keyword in node.keywords)]
        if _is_param(node.func):  # request.param("x")
            found.add(_text(node.args[0], bound, where))
            continue
        if any(_is_param(argument) for argument in arguments):  # kernel.parse(Command, ..., request.param)
            command = _value(node.args[0], names)
            assert isinstance(command, type), f"{where}: {ast.unparse(node)} parses what the scan cannot tell"
            found |= {spec.wire for spec in query_fields(command)}
            continue
        if not any(_is_request(argument) for argument in arguments):
            continue
        callee = _value(node.func, names)
        if inspect.isfunction(callee) and callee.__module__.startswith("runstate."):
            given = inspect.signature(callee).bind_partial(*node.args, **{k.arg: k.value for k in node.keywords if k.arg})
            texts = {}
            for name, argument in given.arguments.items():
                if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
                    texts[name] = argument.value
                elif isinstance(argument, ast.Name) and argument.id in bound:
                    texts[name] = bound[argument.id]
            found |= reads(callee, texts)
            continue
        called = node.func.attr if isinstance(node.func, ast.Attribute) else ast.unparse(node.func)
        assert called in NOT_QUERY, f"{where}: {ast.unparse(node)} is handed the request; what does it read?"
    return found


API = [route for route in ROUTER.routes if route.path.startswith("/v1/")]


def test_every_api_route_declares_the_query_parameters_its_handler_reads():
    wrong = []
    for route in API:
        read, said = reads(route.handler), route.query_names
        if read != said:
            wrong.append(f"{route.method} {route.path}: reads {sorted(read)}, declares {sorted(said)}")
    assert wrong == []


def test_the_scan_finds_reads_through_helpers_commands_and_wrappers():
    """The scan is not blind: it finds names handed to helpers, a command's query fields, and what
    a history twin's handler reads through the read it wraps."""
    routes = {(route.method, route.path): route for route in API}
    dead_letters = routes["GET", "/v1/spaces/{space}/mailboxes/{mailbox_id}/dead-letters"]
    assert reads(dead_letters.handler) == {"limit", "cursor", "reason", "olderThanSeconds", "newerThanSeconds"}
    assert reads(routes["GET", "/v1/spaces/{space}/once"].handler) == {"scopeId", "key", "waitMs"}
    assert reads(routes["GET", "/v1/spaces/{space}/watch"].handler) == {
        "cursor", "limit", "types", "aggregate", "scopeId", "waitSeconds",
    }
    assert reads(routes["GET", "/v1/spaces/{space}/history/events"].handler) == {"at", "cursor", "limit", "latest"}
    assert reads(routes["GET", "/v1/spaces/{space}/scopes/{scope_id}/timers"].handler) == {"limit", "cursor"}
    assert reads(routes["POST", "/v1/spaces/{space}/claims/{key}/renew"].handler) == set()
