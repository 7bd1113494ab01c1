"""The Python SDK's reference (`docs/python-reference.md`), made from the docstrings with pdoc's
model of the package, and the check that every public name has one.

    python -m tests.reference              # check, then write docs/python-reference.md
    python -m tests.reference --check      # check only; exit 1 naming what is undocumented or stale
    python -m tests.reference --html DIR   # also pdoc's own HTML pages, into DIR (git-ignored build/)

`make test` runs the check, and `tests/sdk/test_reference.py` fails when the file in the tree
differs from what this prints, so the reference cannot drift from the code (as `docs/api.md`
cannot drift from the routes).

What counts as public: the package `runstate` (its `__all__`) and every module of it whose name
does not start with an underscore (their `__all__`), and in each class its members whose names do
not. Documented means:

- a module, class, function, method or property has a docstring (a method that overrides a
  documented one inherits its docstring, as `inspect.getdoc` does);
- a variable or attribute has a docstring of its own (a string right after its assignment or
  annotation), or is named in backticks in its class's docstring (the answers' fields, listed
  where the class is described), or is another name for a documented class or function
  (`AuthError`), or re-exports a documented variable of another module of the package;
- every class of the package that a documented function returns, or a documented attribute holds
  (`rs.mailboxes`, `run.mailbox(n)`, `ticket.result()`...), is documented itself: a handle a user
  reaches is never left out because no `__all__` names it.
"""

from __future__ import annotations

import argparse
import inspect
import pkgutil
import sys
import typing
import warnings
from pathlib import Path
from typing import Any, Iterator

import pdoc
import pdoc.doc

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "python-reference.md"
PACKAGE = "runstate"

_INTRO = """# Python SDK reference

Generated from the docstrings by `python -m tests.reference` (pdoc's model of the package);
`make test` fails when a public name has no docstring or this file is stale. The guide to the SDK
is [python.md](python.md); `make reference` also builds pdoc's HTML pages into `build/reference/`.

Every name below is importable as written. `runstate` re-exports the clients, their handles, the
errors and the run-bound API; the modules after it hold the rest (the blocking client's handles,
the capacity and coordination handles, the answers' types, the transports, testing in-process).
"""


def module_names() -> list[str]:
    """`runstate` and its public modules, in a stable order."""
    package = __import__(PACKAGE)
    names = sorted(m.name for m in pkgutil.iter_modules(package.__path__) if not m.name.startswith("_"))
    return [PACKAGE, *(f"{PACKAGE}.{name}" for name in names)]


def load() -> list[pdoc.doc.Module]:
    # A class with a method named `list` (`rs.mailboxes.list()`) makes pdoc's evaluation of a
    # `list[...]` annotation in that class fail: it then shows the annotation as written, which
    # is what the reference should say anyway, and says so in a warning that is only noise here.
    warnings.filterwarnings("ignore", message="Error parsing type annotation", category=UserWarning)
    return [pdoc.doc.Module.from_name(name) for name in module_names()]


def _public(name: str) -> bool:
    return not name.startswith("_") or name == "__version__"


def own_members(cls: pdoc.doc.Class) -> Iterator[tuple[str, pdoc.doc.Doc[Any]]]:
    """The class's own public members (not inherited, whichever module shows the class). The
    attributes an exception has from the built-in ones (`args`, `errno`...) are Python's."""
    module, qualname = cls.taken_from
    builtin = set(dir(OSError)) if inspect.isclass(cls.obj) and issubclass(cls.obj, BaseException) else set()
    for name, member in cls.members.items():
        if name in builtin or not _public(name) or name.startswith("__"):
            continue
        if member.taken_from == (module, f"{qualname}.{name}"):
            yield name, member


def inherited_members(cls: pdoc.doc.Class) -> dict[str, list[str]]:
    """The public members a class takes from its bases, by the base's qualified name."""
    module, qualname = cls.taken_from
    found: dict[str, list[str]] = {}
    for name, member in cls.members.items():
        if not _public(name) or name.startswith("__") or member.taken_from == (module, f"{qualname}.{name}"):
            continue
        origin = member.taken_from[1].rpartition(".")[0]
        if member.taken_from[0].startswith(PACKAGE):
            found.setdefault(origin, []).append(name)
    return found


def _is_alias(variable: pdoc.doc.Variable) -> bool:
    """Another name for a documented class or function (`AuthError = AuthenticationError`)."""
    value = variable.default_value
    if value is inspect.Parameter.empty:
        return False
    return (inspect.isclass(value) or inspect.isroutine(value)) and bool(inspect.getdoc(value))


def _all_modules() -> list[pdoc.doc.Module]:
    """Every module of the package, private ones too: where a re-exported variable is defined."""
    package = __import__(PACKAGE)
    return [pdoc.doc.Module.from_name(f"{PACKAGE}.{m.name}") for m in pkgutil.iter_modules(package.__path__)]


class Checker:
    """Walks the public modules and collects what is undocumented."""

    def __init__(self, modules: list[pdoc.doc.Module]) -> None:
        self.modules = modules
        self.missing: list[str] = []
        self.documented: set[int] = set()  # ids of the classes checked (documented somewhere)
        self.reached: dict[int, tuple[type, str]] = {}  # classes of the package reached, and from where
        self._everywhere: list[pdoc.doc.Module] | None = None

    def run(self) -> list[str]:
        for module in self.modules:
            if not module.docstring:
                self.missing.append(f"{module.fullname} (module)")
            for name, member in module.members.items():
                if _public(name):
                    self.member(member, None)
        for key, (cls, where) in sorted(self.reached.items(), key=lambda item: item[1][1]):
            if key not in self.documented:
                self.missing.append(
                    f"{cls.__module__}.{cls.__qualname__} (reached from {where}, but in no public module's __all__)"
                )
        return self.missing

    def member(self, member: pdoc.doc.Doc[Any], owner: pdoc.doc.Class | None) -> None:
        if isinstance(member, pdoc.doc.Variable):
            self.variable(member, owner)
            return
        if isinstance(member, pdoc.doc.Class):
            if id(member.obj) in self.documented:
                return
            self.documented.add(id(member.obj))
            if not member.docstring:
                self.missing.append(f"{member.fullname} (class)")
            for _, own in own_members(member):
                self.member(own, member)
            return
        if isinstance(member, pdoc.doc.Function):
            if not member.docstring:
                self.missing.append(f"{member.fullname} (function)")
            self.reach(_return_annotation(member), member.fullname)

    def variable(self, variable: pdoc.doc.Variable, owner: pdoc.doc.Class | None) -> None:
        self.reach(variable.annotation, variable.fullname)
        if variable.docstring or _is_alias(variable):
            return
        if owner is not None and f"`{variable.name}`" in owner.docstring:
            return
        if owner is None and self._documented_elsewhere(variable):
            return
        self.missing.append(f"{variable.fullname} (attribute)" if owner else f"{variable.fullname} (variable)")

    def _documented_elsewhere(self, variable: pdoc.doc.Variable) -> bool:
        if self._everywhere is None:
            self._everywhere = _all_modules()
        value = variable.default_value
        for module in self._everywhere:
            found = module.members.get(variable.name)
            if isinstance(found, pdoc.doc.Variable) and found.docstring and found.default_value is value:
                return True
        return False

    def reach(self, annotation: Any, where: str) -> None:
        for cls in _classes_in(annotation):
            self.reached.setdefault(id(cls), (cls, where))


def _return_annotation(function: pdoc.doc.Function) -> Any:
    try:
        return function.signature.return_annotation
    except Exception:  # an annotation pdoc could not evaluate: nothing to follow
        return None


def _classes_in(annotation: Any, depth: int = 0) -> Iterator[type]:
    """The package's own classes named anywhere in an annotation (inside unions, generics...)."""
    if annotation is None or depth > 8 or isinstance(annotation, str):
        return
    if inspect.isclass(annotation) and getattr(annotation, "__module__", "").startswith(PACKAGE):
        yield annotation
    for argument in typing.get_args(annotation):
        yield from _classes_in(argument, depth + 1)


# -- rendering ----------------------------------------------------------------------------------


def _anchor(name: str) -> str:
    return f'<a id="{name}"></a>'


def _docstring(text: str) -> str:
    return inspect.cleandoc(text).strip() if text else ""


def _signature(function: pdoc.doc.Function, owner: pdoc.doc.Class | None) -> str:
    try:
        signature = function.signature_without_self if owner is not None else function.signature
    except Exception:
        return f"{function.name}(...)"
    prefix = "async " if function.funcdef.startswith("async") else ""
    if function.is_classmethod:
        prefix = "@classmethod\n" + prefix
    elif function.is_staticmethod:
        prefix = "@staticmethod\n" + prefix
    return f"{prefix}{function.name}{_strip_modules(str(signature))}"


def _strip_modules(text: str) -> str:
    """Annotations without the package's private module paths (`runstate._bound.RunContext` ->
    `RunContext`), which a reader cannot import from anyway."""
    import re

    return re.sub(r"\b(?:runstate|typing|collections\.abc|datetime|anyio\.abc)\.(?:_?\w+\.)*", "", text)


def _value_str(variable: pdoc.doc.Variable) -> str:
    """The value as pdoc shows it, but a set's members sorted: their order changes with the hash
    seed from one run to the next, and the reference must not."""
    value = variable.default_value
    if isinstance(value, (set, frozenset)) and all(isinstance(item, str) for item in value):
        return f"{type(value).__name__}({{{', '.join(repr(item) for item in sorted(value))}}})"
    return variable.default_value_str or ""


class Renderer:
    """The Markdown reference: `runstate` in full, then each public module, where a name already
    shown in full above is a link to it."""

    def __init__(self, modules: list[pdoc.doc.Module]) -> None:
        self.modules = modules
        self.shown: dict[int, str] = {}  # id of a class or function -> the anchor it is shown at
        self.lines: list[str] = []

    def render(self) -> str:
        self.lines = [_INTRO, "## Modules", ""]
        for module in self.modules:
            first = _docstring(module.docstring).split("\n\n")[0].replace("\n", " ")
            self.lines.append(f"- [`{module.fullname}`](#{module.fullname}): {first}")
        self.lines.append("")
        for module in self.modules:
            self.module(module)
        return "\n".join(self.lines).rstrip() + "\n"

    def module(self, module: pdoc.doc.Module) -> None:
        self.lines += [_anchor(module.fullname), f"## `{module.fullname}`", "", _docstring(module.docstring), ""]
        for name, member in module.members.items():
            if _public(name):
                self.member(member, f"{module.fullname}.{name}")

    def member(self, member: pdoc.doc.Doc[Any], anchor: str) -> None:
        obj = member.obj
        if isinstance(member, (pdoc.doc.Class, pdoc.doc.Function)) and id(obj) in self.shown:
            self.lines += [f"- `{anchor}`: see [`{self.shown[id(obj)]}`](#{self.shown[id(obj)]}).", ""]
            return
        if isinstance(member, pdoc.doc.Class):
            self.shown[id(obj)] = anchor
            self.klass(member, anchor)
        elif isinstance(member, pdoc.doc.Function):
            self.shown[id(obj)] = anchor
            self.lines += [_anchor(anchor), f"### `{anchor}`", "", "```python", _signature(member, None), "```", ""]
            self.lines += [_docstring(member.docstring), ""]
        elif isinstance(member, pdoc.doc.Variable):
            self.lines += [_anchor(anchor), f"### `{anchor}`", ""]
            self.variable_body(member)

    def variable_body(self, variable: pdoc.doc.Variable) -> None:
        if _is_alias(variable):
            value = variable.default_value
            target = self.shown.get(id(value), f"{value.__module__}.{value.__qualname__}")
            self.lines += [f"Another name for [`{target}`](#{target}).", ""]
            return
        annotation = _strip_modules(variable.annotation_str.lstrip(": ").strip()) if variable.annotation_str else ""
        value = _strip_modules(_value_str(variable))
        if len(value) > 200:
            value = value[:200] + "..."
        shape = f"{variable.name}{': ' + annotation if annotation else ''}{' = ' + value if value else ''}"
        self.lines += ["```python", shape, "```", ""]
        if variable.docstring:
            self.lines += [_docstring(variable.docstring), ""]

    def klass(self, cls: pdoc.doc.Class, anchor: str) -> None:
        bases = ", ".join(_strip_modules(base[2]) for base in cls.bases)
        self.lines += [_anchor(anchor), f"### class `{anchor}`", ""]
        if bases:
            self.lines += [f"Bases: `{bases}`", ""]
        self.lines += [_docstring(cls.docstring), ""]
        for name, member in own_members(cls):
            where = f"{anchor}.{name}"
            if isinstance(member, pdoc.doc.Function):
                self.lines += [_anchor(where), f"#### `{cls.name}.{name}`", "", "```python", _signature(member, cls), "```", ""]
                self.lines += [_docstring(member.docstring), ""]
            elif isinstance(member, pdoc.doc.Variable):
                self.lines += [_anchor(where), f"#### `{cls.name}.{name}`", ""]
                self.variable_body(member)
            elif isinstance(member, pdoc.doc.Class):
                self.member(member, where)
        for origin, names in inherited_members(cls).items():
            listed = ", ".join(f"`{name}`" for name in names)
            self.lines += [f"Inherited from `{origin}`: {listed}.", ""]


def render(modules: list[pdoc.doc.Module] | None = None) -> str:
    return Renderer(modules if modules is not None else load()).render()


def undocumented(modules: list[pdoc.doc.Module] | None = None) -> list[str]:
    return Checker(modules if modules is not None else load()).run()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.reference", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="check only: write nothing")
    parser.add_argument("--html", metavar="DIR", help="also write pdoc's HTML pages into DIR")
    args = parser.parse_args(argv)
    modules = load()
    missing = undocumented(modules)
    if missing:
        print(f"{len(missing)} public name(s) of {PACKAGE} without a docstring:", file=sys.stderr)
        for name in missing:
            print(f"  {name}", file=sys.stderr)
        return 1
    text = render(modules)
    if args.check:
        if not REFERENCE.exists() or REFERENCE.read_text() != text:
            print(f"{REFERENCE.relative_to(ROOT)} is stale: run `python -m tests.reference`", file=sys.stderr)
            return 1
        print(f"every public name of {PACKAGE} is documented, and {REFERENCE.relative_to(ROOT)} is current")
    else:
        REFERENCE.write_text(text)
        print(f"wrote {REFERENCE.relative_to(ROOT)}")
    if args.html:
        pdoc.pdoc(*module_names(), output_directory=Path(args.html))
        print(f"wrote pdoc's HTML pages into {args.html}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
