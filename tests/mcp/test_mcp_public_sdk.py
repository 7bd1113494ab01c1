"""`runstate mcp` is built on the public SDK alone: what it needs (a lease of its choice on a take,
a delivery kept renewed, a reason on a failure, the run's claims and tasks, who holds a key) is
what any program gets from `runstate`, so the SDK cannot change under it unseen.

Read from the source: no import of a private module of `runstate` (`runstate._x`, `.._x`) or of a
private name, and no private attribute of another object (`rs._ctx`, `delivery._clock`).
"""

from __future__ import annotations

import ast
from pathlib import Path

import runstate.mcp

MCP_DIR = Path(runstate.mcp.__file__).parent
# Private by name, public by contract: the standard library's documented exit without clean-up.
ALLOWED = {("os", "_exit")}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def offences(source: str) -> list[str]:
    """Each reach into the SDK's private parts, by line."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            outside = node.level >= 2 or (node.level == 0 and module.split(".")[0] == "runstate")
            if outside and any(_private(part) for part in module.split(".")):
                found.append(f"line {node.lineno}: from {'.' * node.level}{module} import ...")
            elif outside:
                found += [f"line {node.lineno}: imports {alias.name}" for alias in node.names if _private(alias.name)]
        elif isinstance(node, ast.Import):
            found += [f"line {node.lineno}: import {alias.name}" for alias in node.names
                      if any(_private(part) for part in alias.name.split(".")) and alias.name.startswith("runstate")]
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            owner = node.value.id if isinstance(node.value, ast.Name) else None
            if owner not in ("self", "cls") and (owner, node.attr) not in ALLOWED:
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_the_mcp_server_uses_only_the_public_sdk():
    """No module of runstate.mcp reaches a private module, name or attribute of the SDK."""
    modules = sorted(MCP_DIR.glob("*.py"))
    assert len(modules) >= 5
    found = {path.name: offences(path.read_text()) for path in modules}
    assert {name: lines for name, lines in found.items() if lines} == {}


def test_the_check_finds_what_it_looks_for():
    """Each kind of reach is found (so the test above cannot pass by finding nothing)."""
    source = (
        "from .._renewal import Kept\nfrom ..mailboxes import _reason\nimport runstate._checks\n"
        "from ._session import stamp\nx = rs._ctx\ny = self._run\nos._exit(0)\n"
    )
    assert offences(source) == [
        "line 1: from .._renewal import ...", "line 2: imports _reason", "line 3: import runstate._checks", "line 5: rs._ctx",
    ]
