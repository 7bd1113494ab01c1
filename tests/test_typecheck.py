"""The type check of `make test` can fail: a product-page example that misreads a view is caught, and so
is a type error in the kernel or in the server.

One check runs over a tree broken in every one of these ways at once (mypy reports each error on
its own, and a check takes a quarter of a minute here): each expected error must be among what it
reports, so a kind of error the check stopped catching fails the test, whichever it is."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from .typecheck import KERNEL, ROOT, check, examples_source


def _broken_copy(tmp_path: Path, package: str, changes: list[tuple[str, str, str]]) -> Path:
    """A copy of `package` with each `(file, old, new)` change made once."""
    copy = tmp_path / package
    shutil.copytree(ROOT / package, copy, ignore=shutil.ignore_patterns("__pycache__"))
    for name, old, new in changes:
        source = (copy / name).read_text()
        assert old in source, (name, old)
        (copy / name).write_text(source.replace(old, new, 1))
    return copy


@pytest.mark.slow
def test_each_kind_of_type_error_fails_the_check(tmp_path):
    # An example of the product page misspells a key of a typed view (`outcome["outcom"]` on a task
    # result) and a keyword of consume().
    examples = examples_source()
    broken = examples.replace('print("report", outcome["outcome"])', 'print("report", outcome["outcom"])')
    broken = broken.replace("concurrency=4,", "concurency=4,")
    assert broken != examples
    # The kernel is checked strictly too: a decision that may return None declared as always
    # returning a record, and a command built with a field it does not have.
    actors = _broken_copy(tmp_path, "actors", [
        ("scopes.py", "def decide_end(self, scope_id: str, state: str, now_ms: int) -> Record | None:",
         "def decide_end(self, scope_id: str, state: str, now_ms: int) -> Record:"),
        ("group_commands.py", "task_input=", "task_inputs="),
    ])
    # A read at a past point runs the live routes' handlers on a stand-in for the kernel
    # (`history.PastKernel`): the server is checked strictly, and the stand-in is held to what the
    # handlers read (`services.RouteKernel`), so a stand-in that lacks one of those reads is caught
    # here, not by the history tests.
    old = "    def parked_holders(self, key: ActorKey, count_max: int) -> list[str]:"
    server = _broken_copy(tmp_path, "server", [("history.py", old, old.replace("parked_holders", "parked_callers"))])

    done = check(broken, tmp_path / "scratch", quiet=True, kernel={**KERNEL, "actors": actors, "server": server})
    assert done.returncode == 1, done.stdout
    for expected in [
        'TypedDict "TaskResult" has no key "outcom"',
        'Unexpected keyword argument "concurency" for "consume" of "MailboxRef"',
        "Incompatible return value type (got \"None\"",
        'Unexpected keyword argument "task_inputs" for "SubmitTask"',
        '"PastKernel" is missing following "RouteKernel" protocol member',
    ]:
        assert expected in done.stdout, (expected, done.stdout)
    assert "runstate/actors/scopes.py" in done.stdout and "runstate/server/services.py" in done.stdout
