"""A package whose names are imported when first read (PEP 562), shared by `runstate`,
`runstate.actors` and `runstate.snapshots`: importing a package then imports none of its modules,
so a leaf module loads without the rest (the SDK without httpx's users, a command-line tool
without the kernel)."""

from __future__ import annotations

import importlib
from typing import Any, Mapping, MutableMapping


def import_name(package: str, names: MutableMapping[str, Any], exports: Mapping[str, str], name: str) -> Any:
    """`name` of `package`: the public name `exports` says which module defines, else a module of
    the package; imported now and kept in the package's `names` (its globals), so this runs once a
    name. AttributeError for a name that is neither."""
    value: Any
    if name in exports:
        value = getattr(importlib.import_module(exports[name], package), name)
    else:
        try:
            value = importlib.import_module(f".{name}", package)
        except ModuleNotFoundError as error:
            if error.name != f"{package}.{name}":
                raise
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
    names[name] = value
    return value
