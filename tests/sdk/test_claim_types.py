"""Both SDKs' claim types have exactly the fields the OpenAPI document gives a claim, with the
same JSON types and the same optional ones.

The document's components come from the server's wire declaration (`server/wire/`), so this
ties the Python SDK's `TypedDict`s (`sdk/types.py`) and the TypeScript SDK's interfaces
(`typescript/src`, read from their source) to what the server writes: a field renamed, added or
dropped on one side fails here.
"""

from __future__ import annotations

import re
import types
import typing
from pathlib import Path
from typing import Any

import pytest

from runstate import types as sdk_types
from runstate.actors.limits import Limits
from runstate.server.openapi import openapi

ROOT = Path(__file__).resolve().parents[2]

# (component, the Python SDK's TypedDict, the TypeScript file and interface)
PAIRS = [
    ("Claim", sdk_types.ClaimView, "claims.ts", "ClaimView"),
    ("HeldClaim", sdk_types.HeldClaim, "scopes.ts", "HeldClaim"),
    ("Scope", sdk_types.ScopeView, "scopes.ts", "ScopeView"),
    ("Task", sdk_types.TaskView, "tasks.ts", "TaskView"),
    ("Sent", sdk_types.MessageView, "mailboxes.ts", "SentMessage"),
    ("DeadLetter", sdk_types.DeadLetter, "client.ts", "DeadLetter"),
    ("Mailbox", sdk_types.MailboxRow, "client.ts", "MailboxRow"),
    ("DeadLetterPage", sdk_types.DeadLetterPage, "client.ts", "DeadLetterPage"),
    ("DeadLettersDeleted", sdk_types.DeleteResult, "client.ts", "DeleteResult"),
    ("MailboxPurged", sdk_types.PurgeResult, "client.ts", "PurgeResult"),
]


# A user's JSON value (no type in the schema, `Any` or a type parameter in an SDK): any type.
_ANY = frozenset(["any"])


def _json_types(schema: dict[str, Any]) -> frozenset[str]:
    if "type" not in schema:
        return _ANY
    kind = schema["type"]
    return frozenset([kind] if isinstance(kind, str) else kind)


def _documented(component: str) -> dict[str, tuple[frozenset[str], bool]]:
    """field -> (JSON types, required) of a component."""
    schema = openapi(Limits())["components"]["schemas"][component]
    required = set(schema.get("required", ()))
    return {name: (_json_types(field), name in required) for name, field in schema["properties"].items()}


_PYTHON_TYPES = {str: "string", int: "integer", bool: "boolean", type(None): "null", list: "array", dict: "object"}


def _python_kind(hint: Any) -> str:
    """A hint's JSON type: a scalar's, an array's (`list[X]`), a `Literal` of strings a string."""
    origin = typing.get_origin(hint)
    if origin is typing.Literal:
        assert all(isinstance(value, str) for value in typing.get_args(hint)), hint
        return "string"
    if typing.is_typeddict(hint):
        return "object"
    return _PYTHON_TYPES[origin or hint]


def _python(typed_dict: type) -> dict[str, tuple[frozenset[str], bool]]:
    # (`NotRequired` read from the hints: the module's annotations are strings, which
    # `__required_keys__` does not look into.)
    hints = typing.get_type_hints(typed_dict, include_extras=True)
    fields = {}
    for name, hint in hints.items():
        required = typing.get_origin(hint) is not typing.NotRequired
        if not required:
            hint = typing.get_args(hint)[0]
        kinds = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
        fields[name] = (_ANY if hint is Any else frozenset(_python_kind(kind) for kind in kinds), required)
    return fields


_TS_TYPES = {"string": "string", "number": "integer", "boolean": "boolean", "null": "null"}


def _typescript(file: str, interface: str) -> dict[str, tuple[frozenset[str], bool]]:
    """The fields of `export interface NAME { ... }` in a TypeScript source (comments and an index
    signature left out). `X[]` is an array, an interface of the file an object; a type parameter of the interface (`<Outcome =
    unknown>`) or `unknown` any JSON; a type of strings declared in the file (`export type S =
    'A' | 'B'`, or of such types) a string."""
    source = (ROOT / "typescript" / "src" / file).read_text()
    found = re.search(r"export interface " + interface + r"(?:<(\w+)[^>]*>)? \{\n(.*?)\n\}", source, re.S)
    assert found is not None, f"no interface {interface} in {file}"
    parameter, body = found.groups()
    strings = _string_types(source)
    objects = {name: "object" for name in re.findall(r"export interface (\w+)", source)}
    kinds_of = dict(_TS_TYPES, unknown="any", **objects, **{name: "string" for name in strings})
    if parameter is not None:
        kinds_of[parameter] = "any"
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
    fields = {}
    for line in body.splitlines():
        line = line.strip()
        if not line or line.startswith("//") or line.startswith("["):
            continue
        matched = re.fullmatch(r"(\w+)(\??): ([\w |\[\]]+);", line)
        assert matched is not None, f"{interface}: a field this check cannot read: {line!r}"
        name, optional, kinds = matched.groups()
        found_kinds = frozenset("array" if kind.strip().endswith("[]") else kinds_of[kind.strip()] for kind in kinds.split("|"))
        fields[name] = (_ANY if "any" in found_kinds else found_kinds, not optional)
    return fields


def _string_types(source: str) -> set[str]:
    """The names of the types of strings a TypeScript source declares (`export type S = 'A' | T`,
    each part a string literal or such a type declared before)."""
    names: set[str] = set()
    for name, union in re.findall(r"export type (\w+) = ([^;]+);", source):
        parts = [part.strip() for part in union.split("|")]
        if all(re.fullmatch(r"'[^']*'", part) or part in names for part in parts):
            names.add(name)
    return names


@pytest.mark.parametrize("component,typed_dict,file,interface", PAIRS, ids=[pair[0] for pair in PAIRS])
def test_the_python_sdks_claim_types_are_the_documented_ones(component: str, typed_dict: type, file: str, interface: str) -> None:
    assert _python(typed_dict) == _documented(component)


@pytest.mark.parametrize("component,typed_dict,file,interface", PAIRS, ids=[pair[0] for pair in PAIRS])
def test_the_typescript_sdks_claim_types_are_the_documented_ones(component: str, typed_dict: type, file: str, interface: str) -> None:
    assert _typescript(file, interface) == _documented(component)
