"""No answer's shape is written by hand outside the wire: every reply a route declares names a
component `server/wire/` makes (or, for a history read, that of the read it twins and `AsOf`),
and no module of `server/` but the wire's writes a JSON Schema object. `openapi.py` still builds
what requests carry (a request body's object, from the commands' fields): requests are not
answers."""

from __future__ import annotations

import ast
import pathlib

from runstate.actors.limits import Limits
from runstate.server.openapi import openapi
from runstate.server.routes import ROUTER
from runstate.server.wire import COMPONENTS

SERVER = pathlib.Path(__file__).resolve().parents[2] / "server"
# Where a schema's object may be written: the wire, and the request body's object in openapi.py.
REQUEST_SIDE = {("openapi.py", "_request_body")}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def test_every_reply_names_a_component_the_wire_makes() -> None:
    schemas = openapi(Limits())["components"]["schemas"]
    wire_made = {name for name, schema in schemas.items() if COMPONENTS.get(name) == schema}
    for route in ROUTER.routes:
        for reply in route.doc.replies:
            where = f"{route.method} {route.path} {reply.status}"
            schema = reply.schema
            if schema is None or isinstance(schema, str):
                assert schema is None or schema in wire_made, f"{where}: {schema} is not a component of the wire"
                continue
            if "allOf" not in schema:
                # Not a JSON answer's shape (the metrics' text, the OpenAPI document itself): a bare type.
                assert set(schema) == {"type"}, f"{where} writes its answer's shape by hand"
                continue
            # A history twin: the read's answer and where the point stands.
            assert list(schema) == ["allOf"] and schema["allOf"][-1] == _ref("AsOf"), f"{where} writes its answer's shape by hand"
            for part in schema["allOf"]:
                assert set(part) == {"$ref"} and part["$ref"].rsplit("/", 1)[1] in wire_made, f"{where}: {part}"


def _writers(path: pathlib.Path) -> list[tuple[str, int]]:
    """Where a module writes a `"properties"` key: the enclosing top-level function (or `<module>`) and the line."""
    tree = ast.parse(path.read_text())
    found: list[tuple[str, int]] = []
    for top in tree.body:
        name = top.name if isinstance(top, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else "<module>"
        for node in ast.walk(top):
            if isinstance(node, ast.Constant) and node.value in ("properties", "additionalProperties"):
                found.append((name, node.lineno))
    return found


def test_no_module_of_the_server_but_the_wire_writes_a_schema_object() -> None:
    checked = 0
    for path in sorted(SERVER.rglob("*.py")):
        relative = path.relative_to(SERVER)
        if relative.parts[0] == "wire":
            continue
        checked += 1
        for name, line in _writers(path):
            assert (str(relative), name) in REQUEST_SIDE, f"server/{relative}:{line} ({name}) writes a schema's properties by hand"
    assert checked > 50, "the server's modules were found"


def test_the_scan_finds_a_schema_written_by_hand(tmp_path: pathlib.Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text('_LIST = {"type": "object", "properties": {"x": {"type": "string"}}}\n\ndef f():\n    return {"properties": {}}\n')
    assert _writers(sample) == [("<module>", 1), ("f", 4)]
