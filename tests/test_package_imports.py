"""What importing a part of the `runstate` package loads.

The kernel (`runstate.actors`, `runstate.snapshots`) shares the package with the SDK, whose
`__init__` is the package's: importing the kernel must not load the client (its modules, httpx),
since a server, `runstate check` or a test in virtual time never use it. So the SDK's names are
imported when first read (`sdk/__init__.py`); the two lists that say where each comes from (the
imports the type checker reads, the table `__getattr__` reads) are checked against each other.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import runstate

ROOT = Path(__file__).resolve().parents[1]

# The cluster's journal talks to etcd over HTTP (`snapshots/http1.py`, on h11, or `grpc2.py`, on
# h2); a start without a cluster never imports these, and nothing else of the kernel does.
CLUSTER_MODULES = {"runstate.snapshots.etcd", "runstate.snapshots.etcd_journal", "runstate.snapshots.grpc2"}

_PROBE = """
import importlib, json, pkgutil, sys
import runstate.actors, runstate.snapshots
skipped = set(sys.argv[1].split(","))
for package in (runstate.actors, runstate.snapshots):
    for module in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
        if module.name not in skipped:
            importlib.import_module(module.name)
print(json.dumps({"modules": sorted(sys.modules), "names": sorted(vars(sys.modules["runstate"]))}))
"""


def _loaded_by_the_kernel() -> dict[str, list[str]]:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, ",".join(sorted(CLUSTER_MODULES))],
        capture_output=True, text=True, timeout=120, check=True,
    )
    loaded: dict[str, list[str]] = json.loads(done.stdout)
    return loaded


def test_importing_the_kernel_imports_neither_the_sdk_nor_httpx():
    loaded = _loaded_by_the_kernel()
    modules = set(loaded["modules"])
    assert "runstate.actors.kernel" in modules and "runstate.snapshots.store" in modules  # the probe ran
    assert not CLUSTER_MODULES & modules
    sdk = sorted(
        name for name in modules
        if name.startswith("runstate.") and not name.startswith(("runstate.actors", "runstate.snapshots"))
        and name != "runstate._lazy"  # the packages' shared loader of names read first (no SDK code)
    )
    assert sdk == [], f"importing the kernel imported the SDK's {sdk}"
    assert not [name for name in modules if name == "httpx" or name.startswith("httpx.")]
    assert "h2" not in modules, "HTTP/2 (a cluster's gRPC calls to etcd) is loaded only by a cluster"
    assert not {"AsyncRunstate", "Runstate", "once", "errors"} & set(loaded["names"]), "the SDK's names are read lazily"


def test_the_etcd_client_and_the_clusters_journal_import_no_httpx():
    """Their unary calls and their watches go on `snapshots/http1.py`, never on httpx."""
    probe = "import json, sys, " + ", ".join(sorted(CLUSTER_MODULES)) + "; print(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    modules = set(json.loads(done.stdout))
    assert CLUSTER_MODULES <= modules and "h11" in modules  # the probe ran
    assert not [name for name in modules if name == "httpx" or name.startswith("httpx.")]


def _checker_imports() -> dict[str, str]:
    """Name -> module, as the `if TYPE_CHECKING:` block of `sdk/__init__.py` imports it."""
    tree = ast.parse((ROOT / "sdk" / "__init__.py").read_text())
    block = next(node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING")
    return {
        alias.asname or alias.name: "." * node.level + (node.module or "")
        for node in block.body if isinstance(node, ast.ImportFrom) for alias in node.names
    }


def test_the_sdk_names_its_lazy_names_once_each_and_the_checker_reads_the_same():
    exports = runstate._EXPORTS
    assert _checker_imports() == exports
    public = set(runstate.__all__)
    assert public - {"__version__", "context"} == (set(exports) - {"current_context"}) | set(runstate._DEFAULT_FUNCTIONS)
    assert public <= set(dir(runstate))  # listed before they are read, for completion
    for name, module in exports.items():
        assert getattr(runstate, name) is getattr(sys.modules[f"runstate{module}"], name)
