"""The strict type check that `make test` runs: mypy over the SDK, the kernel (`actors/`,
`snapshots/`), the server (`server/`) and the product page's examples.

The SDK lives in `sdk/` but imports as `runstate`, and the other packages as `runstate.actors`,
`runstate.snapshots` and `runstate.server`: a mapping that only the installed package knows and
mypy cannot follow through an editable install. So the check runs on a scratch folder holding a
`runstate` package made of links (each file of `sdk/`, and `actors`, `snapshots` and `server`
linked to those folders), next to the product page's Python examples written out as a module
(`tests/compat/product_page.py`, the same script the end-to-end tests run), and the page's
claim examples (kept here, as the page writes them). The SDK, the kernel and the server are
checked with `--strict` (the settings are `pyproject.toml`'s); the examples are user code without
annotations, so for them mypy checks the bodies of unannotated functions (`check_untyped_defs`)
against the SDK's types: a renamed key of a `TypedDict` view or a wrong argument fails here.

Run it alone with `python -m tests.typecheck`; it exits with mypy's status.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The packages checked inside `runstate` beside the SDK's modules, and the folders they are.
KERNEL = {"actors": ROOT / "actors", "snapshots": ROOT / "snapshots", "server": ROOT / "server"}
EXAMPLES_MODULE = "product_page_examples"
CLAIM_EXAMPLES_MODULE = "product_page_claims"

# What the end-to-end test puts in front of the examples (tests/e2e/test_product_page.py), typed.
PRELUDE = '''
import asyncio, json, os, signal
from typing import Any
from runstate import AsyncRunstate
ARGS: dict[str, Any] = json.loads(os.environ["TEST_ARGS"])

def emit(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)
'''


# The product page's claim examples, as written there, inside a coroutine (the page shows them as
# top-level awaits); the names they take for granted are given types first.
CLAIM_EXAMPLES = '''
import os
from typing import Any

from runstate import AsyncRunstate
from runstate import LeaseLostError

sections: list[str] = ["intro", "findings"]


async def research_company(name: str) -> dict[str, Any]:
    return {"company": name}


async def write_section(section: str, fencing_token: str) -> None:
    pass


rs = AsyncRunstate(holder="researcher-1")
run = rs.scope(os.environ["RUNSTATE_SCOPE_ID"])  # or: await rs.scopes.create()


async def research(lease):
    print(f"researching acme as generation {lease.generation}")
    return await research_company("acme")


async def write_report(lease):
    for section in sections:
        lease.raise_if_lost()
        await write_section(section, fencing_token=lease.token())


async def main():
    report = await run.claim("company:acme").run(research, wait=True, timeout_ms=120_000)

    attempt = await run.claim("company:acme").try_acquire()
    if attempt["kind"] == "busy":
        print("another agent is already on acme")
    else:
        lease = attempt["lease"]
        try:
            await research_company("acme")
        finally:
            await lease.release()

    try:
        await run.claim("file:report.md").run(write_report)
    except LeaseLostError:
        print("lost ownership of report.md; another agent may own it now")
'''


def examples_source() -> str:
    sys.path.insert(0, str(ROOT))
    try:
        from tests.compat.product_page import PRODUCT_PAGE_EXAMPLES
    finally:
        sys.path.pop(0)
    return PRELUDE + textwrap.dedent(PRODUCT_PAGE_EXAMPLES)


def _link_package(package: Path, kernel: dict[str, Path]) -> None:
    """Make `package` the `runstate` the installed package is: a link per file of `sdk/`, and one
    per kernel package; links to anything else (a file removed from `sdk/`) go."""
    if package.is_symlink():  # the layout of an older check: `runstate` was a link to `sdk/`
        package.unlink()
    package.mkdir(parents=True, exist_ok=True)
    wanted = {entry.name: entry for entry in (ROOT / "sdk").iterdir() if entry.name != "__pycache__"}
    wanted.update(kernel)
    for entry in package.iterdir():
        if entry.name not in wanted or not entry.is_symlink() or entry.resolve() != wanted[entry.name].resolve():
            entry.unlink()
    for name, target in wanted.items():
        link = package / name
        if not link.is_symlink():
            link.symlink_to(target, target_is_directory=target.is_dir())


def check(
    examples: str, scratch: Path, *, quiet: bool = False, kernel: dict[str, Path] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run mypy over the SDK, the kernel, the server and `examples` in `scratch` (mypy's cache is
    kept there). `kernel` names the folders of the packages beside the SDK's modules (the tree's
    own by default)."""
    scratch.mkdir(parents=True, exist_ok=True)
    _link_package(scratch / "runstate", KERNEL if kernel is None else kernel)
    (scratch / f"{EXAMPLES_MODULE}.py").write_text(examples)
    (scratch / f"{CLAIM_EXAMPLES_MODULE}.py").write_text(CLAIM_EXAMPLES)
    command = [
        sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
        "--cache-dir", str(scratch / ".mypy_cache"), "-p", "runstate", "-m", EXAMPLES_MODULE,
        "-m", CLAIM_EXAMPLES_MODULE,
    ]
    env = {**os.environ, "MYPYPATH": str(scratch)}
    return subprocess.run(command, cwd=scratch, env=env, text=True, capture_output=quiet)


def main() -> int:
    # Inside the venv, which is never committed, so that mypy's cache survives between runs.
    return check(examples_source(), ROOT / ".venv" / "typecheck").returncode


if __name__ == "__main__":
    sys.exit(main())
