"""Finds where our code reaches a private member of a dependency (`tests/server/test_private_members.py`).

A dependency is any module that is neither ours (`runstate`, or a relative import) nor in the
standard library: trio, h11, hypercorn, quart, httpx, orjson, ... Three things are reported:

- **Importing a private name** from one: `from trio._core import x`, `from h11 import _util`.
- **Reaching a private attribute** (`_name`, not a dunder) of an object that comes from one:
  `trio._core`, `config._quic_addresses`, `stream._transport`, `getattr(event, "_x")`. An object
  comes from a dependency when its expression starts from a name imported from one, from a call
  or attribute of such an object, from a parameter or variable annotated with a dependency's
  type, or from a variable or `self` attribute assigned such an object in the same module (with
  `with ... as` targets too).
- **Overriding or calling a private member of a dependency's class** from a subclass: a method
  named `_name` that the base class (looked up by importing it) also has, and `self._name` or
  `super()._name` where the base class has `_name`.

Our own private names are never reported: `self._x` in a class of ours that subclasses nothing of
a dependency's, `_helper()` from our modules, a subclass's own `_x` that its base lacks. Names are
followed within a module only, not across calls, so a dependency's object passed to us through a
function without an annotation is not seen: the checker is precise rather than complete.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

# Our own top-level names: the packages, and the test and benchmark trees that import them.
OURS = frozenset({"runstate", "tests", "bench"})


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what}"


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


@functools.cache
def members(cls: Any) -> frozenset[str]:
    """Every name a dependency's class has: its attributes and those of its bases, its slots, and
    the attributes its methods assign on `self` (instance attributes the class itself lacks)."""
    names: set[str] = set(dir(cls))
    for klass in getattr(cls, "__mro__", ()):
        if klass is object:
            continue
        names.update(getattr(klass, "__slots__", ()) if not isinstance(getattr(klass, "__slots__", ()), str) else ())
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError, SyntaxError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and \
                    isinstance(node.value, ast.Name) and node.value.id == "self":
                names.add(node.attr)
    return frozenset(names)


def is_dependency(module: str | None, level: int = 0) -> bool:
    if level > 0 or not module:
        return False
    top = module.split(".", 1)[0]
    return top not in OURS and top not in sys.stdlib_module_names and top != "__future__"


class _Module(ast.NodeVisitor):
    def __init__(self, path: str) -> None:
        self.path = path
        self.findings: list[Finding] = []
        # Names bound, in this module, to a dependency's module or object: name -> its dotted origin.
        self.origins: dict[str, str] = {}
        # Per class being visited: its dependency base classes (objects), and self attributes
        # known to hold a dependency's object.
        self.bases: list[list[Any]] = []
        self.self_attributes: list[set[str]] = []
        # Per function being visited: local names holding a dependency's object.
        self.locals: list[set[str]] = [set()]
        # Classes of this module that subclass a dependency's class: name -> those classes; and, per
        # function, local names holding an instance of one (their private members are the base's).
        self.derived: dict[str, list[Any]] = {}
        self.derived_locals: list[dict[str, list[Any]]] = [{}]

    def report(self, node: ast.AST, what: str) -> None:
        self.findings.append(Finding(self.path, getattr(node, "lineno", 0), what))

    # -- imports ------------------------------------------------------------------------------

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if not is_dependency(alias.name):
                continue
            private = [part for part in alias.name.split(".") if is_private(part)]
            if private:
                self.report(node, f"imports a private module of a dependency: {alias.name}")
            bound = alias.asname or alias.name.split(".", 1)[0]
            self.origins[bound] = alias.name if alias.asname else bound

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if not is_dependency(node.module, node.level):
            return
        assert node.module is not None
        if any(is_private(part) for part in node.module.split(".")):
            self.report(node, f"imports from a private module of a dependency: {node.module}")
        for alias in node.names:
            if is_private(alias.name):
                self.report(node, f"imports a private name of a dependency: {node.module}.{alias.name}")
            self.origins[alias.asname or alias.name] = f"{node.module}.{alias.name}"

    # -- where objects come from ----------------------------------------------------------------

    def from_dependency(self, node: ast.AST | None) -> bool:
        """Whether the expression's value comes from a dependency (see the module's docstring)."""
        while True:
            if node is None:
                return False
            if isinstance(node, ast.Name):
                return node.id in self.origins or node.id in self.locals[-1]
            if isinstance(node, ast.Attribute):
                if self._is_self(node.value) and self.self_attributes and node.attr in self.self_attributes[-1]:
                    return True
                node = node.value
            elif isinstance(node, (ast.Call, ast.Subscript)):
                node = node.func if isinstance(node, ast.Call) else node.value
            elif isinstance(node, ast.Await):
                node = node.value
            else:
                return False

    def annotated(self, annotation: ast.AST | None) -> bool:
        """Whether an annotation names a dependency's type (also inside `X | None`, `Optional[X]`)."""
        if annotation is None:
            return False
        if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
            try:
                annotation = ast.parse(annotation.value, mode="eval").body
            except SyntaxError:
                return False
        if isinstance(annotation, ast.BinOp):
            return self.annotated(annotation.left) or self.annotated(annotation.right)
        if isinstance(annotation, ast.Subscript):
            return self.annotated(annotation.value) or self.annotated(annotation.slice)
        if isinstance(annotation, ast.Tuple):
            return any(self.annotated(element) for element in annotation.elts)
        return isinstance(annotation, (ast.Name, ast.Attribute)) and self.from_dependency(annotation)

    @staticmethod
    def _is_self(node: ast.AST) -> bool:
        return isinstance(node, ast.Name) and node.id == "self"

    def derived_of(self, node: ast.AST | None) -> list[Any]:
        """The dependency classes behind an instance of one of this module's subclasses of them
        (`Ours(...)`, `await Ours(...)`), or []."""
        if isinstance(node, ast.Await):
            node = node.value
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            return self.derived.get(node.func.id, [])
        if isinstance(node, ast.Name):
            return self.derived_locals[-1].get(node.id, [])
        return []

    def bind(self, target: ast.AST, value_from_dependency: bool, derived: list[Any] | None = None) -> None:
        if isinstance(target, ast.Name):
            if derived:
                self.derived_locals[-1][target.id] = derived
            else:
                self.derived_locals[-1].pop(target.id, None)
            if value_from_dependency:
                self.locals[-1].add(target.id)
            else:
                self.locals[-1].discard(target.id)
        elif isinstance(target, ast.Attribute) and self._is_self(target.value) and self.self_attributes:
            if value_from_dependency:
                self.self_attributes[-1].add(target.attr)
        elif isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                self.bind(element, False)

    # -- visiting -------------------------------------------------------------------------------

    def visit_Assign(self, node: ast.Assign) -> None:
        self.generic_visit(node)
        came = self.from_dependency(node.value)
        for target in node.targets:
            self.bind(target, came, self.derived_of(node.value))

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self.generic_visit(node)
        self.bind(node.target, self.annotated(node.annotation) or self.from_dependency(node.value))

    def visit_withitem(self, node: ast.withitem) -> None:
        self.generic_visit(node)
        if node.optional_vars is not None:
            self.bind(node.optional_vars, self.from_dependency(node.context_expr), self.derived_of(node.context_expr))

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        bases = [self._resolve(base) for base in node.bases if self.from_dependency(base)]
        bases = [base for base in bases if base is not None]
        bases += [base for name in node.bases if isinstance(name, ast.Name) for base in self.derived.get(name.id, [])]
        if bases:
            self.derived[node.name] = bases
        self.bases.append(bases)
        self.self_attributes.append(set())
        # Self attributes assigned anywhere in the class count in every method (the first pass
        # finds them; the second reports).
        for _ in range(2):
            before = len(self.findings)
            for statement in node.body:
                self.visit(statement)
            if _ == 0:
                del self.findings[before:]
        for decorator in node.decorator_list:
            self.visit(decorator)
        for base in node.bases:
            self.visit(base)
        self.self_attributes.pop()
        self.bases.pop()

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        if self.bases and self.bases[-1] and is_private(node.name):
            for base in self.bases[-1]:
                if node.name in members(base):
                    self.report(node, f"overrides {base.__module__}.{base.__qualname__}.{node.name}, a private method")
        local = {arg.arg for arg in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs) if self.annotated(arg.annotation)}
        self.locals.append(local)
        self.derived_locals.append({})
        for statement in node.body:
            self.visit(statement)
        for default in (*node.args.defaults, *node.args.kw_defaults):
            if default is not None:
                self.visit(default)
        self.derived_locals.pop()
        self.locals.pop()

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if is_private(node.attr):
            if self.from_dependency(node.value):
                self.report(node, f"reaches {ast.unparse(node)}, a private member of a dependency's object")
            elif self._inherited(node) or any(node.attr in members(base) for base in self.derived_of(node.value)):
                self.report(node, f"reaches {ast.unparse(node)}, a private member of a dependency's class")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Name) and node.func.id in ("getattr", "setattr", "hasattr", "delattr") and len(node.args) >= 2:
            name = node.args[1]
            if isinstance(name, ast.Constant) and isinstance(name.value, str) and is_private(name.value):
                if self.from_dependency(node.args[0]):
                    self.report(node, f"{node.func.id}(..., {name.value!r}) on a dependency's object")
        self.generic_visit(node)

    def _inherited(self, node: ast.Attribute) -> bool:
        """`self._x` or `super()._x` in a subclass of a dependency's class that has `_x`."""
        if not self.bases or not self.bases[-1]:
            return False
        value = node.value
        reached = self._is_self(value) or (
            isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "super"
        )
        return reached and any(node.attr in members(base) for base in self.bases[-1])

    def _resolve(self, node: ast.AST) -> Any:
        """The object an expression made of imported names denotes (a base class), or None."""
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name) or node.id not in self.origins:
            return None
        dotted = self.origins[node.id].split(".") + parts[::-1]
        for cut in range(len(dotted), 0, -1):
            try:
                found: Any = importlib.import_module(".".join(dotted[:cut]))
            except ImportError:
                continue
            for attribute in dotted[cut:]:
                found = getattr(found, attribute, None)
            return found
        return None


def check_source(source: str, path: str = "<source>") -> list[Finding]:
    module = _Module(path)
    module.visit(ast.parse(source, filename=path))
    return module.findings


def check_tree(roots: list[Path], base: Path) -> Iterator[Finding]:
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            yield from check_source(path.read_text(), str(path.relative_to(base)))
