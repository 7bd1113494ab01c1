"""The type check of `make test` can fail: a product-page example that misreads a view is caught, and so
is a type error in the kernel or in the server."""

from __future__ import annotations

import shutil

import pytest

from .typecheck import KERNEL, ROOT, check, examples_source


@pytest.mark.slow
def test_a_misspelt_key_of_a_typed_view_fails_the_check(tmp_path):
    """`outcome["outcom"]` on a task result is a type error, as is a wrong keyword to consume()."""
    examples = examples_source()
    broken = examples.replace('print("report", outcome["outcome"])', 'print("report", outcome["outcom"])')
    broken = broken.replace("concurrency=4,", "concurency=4,")
    assert broken != examples
    done = check(broken, tmp_path, quiet=True)
    assert done.returncode == 1, done.stdout
    assert 'TypedDict "TaskResult" has no key "outcom"' in done.stdout
    assert 'Unexpected keyword argument "concurency" for "consume" of "MailboxRef"' in done.stdout


@pytest.mark.slow
def test_a_type_error_in_the_kernel_fails_the_check(tmp_path):
    """The kernel is checked strictly too: a decision that may return None declared as always
    returning a record, and a command built with a field it does not have, are both caught."""
    actors = tmp_path / "actors"
    shutil.copytree(ROOT / "actors", actors, ignore=shutil.ignore_patterns("__pycache__"))
    for name, old, new in [
        ("scopes.py", "def decide_end(self, scope_id: str, state: str, now_ms: int) -> Record | None:",
         "def decide_end(self, scope_id: str, state: str, now_ms: int) -> Record:"),
        ("group_commands.py", "task_input=", "task_inputs="),
    ]:
        source = (actors / name).read_text()
        assert old in source
        (actors / name).write_text(source.replace(old, new, 1))
    done = check(examples_source(), tmp_path / "scratch", quiet=True, kernel={**KERNEL, "actors": actors})
    assert done.returncode == 1, done.stdout
    assert 'runstate/actors/scopes.py' in done.stdout and "Incompatible return value type (got \"None\"" in done.stdout
    assert 'Unexpected keyword argument "task_inputs" for "SubmitTask"' in done.stdout


@pytest.mark.slow
def test_a_past_point_that_lacks_a_read_of_the_routes_fails_the_check(tmp_path):
    """A read at a past point runs the live routes' handlers on a stand-in for the kernel
    (`history.PastKernel`): the server is checked strictly too, and the stand-in is held to what
    the handlers read (`services.RouteKernel`), so a stand-in that lacks one of those reads is
    caught here, not by the history tests."""
    server = tmp_path / "server"
    shutil.copytree(ROOT / "server", server, ignore=shutil.ignore_patterns("__pycache__"))
    old = "    def parked_holders(self, key: ActorKey, count_max: int) -> list[str]:"
    source = (server / "history.py").read_text()
    assert old in source
    (server / "history.py").write_text(source.replace(old, old.replace("parked_holders", "parked_callers"), 1))
    done = check(examples_source(), tmp_path / "scratch", quiet=True, kernel={**KERNEL, "server": server})
    assert done.returncode == 1, done.stdout
    assert "runstate/server/services.py" in done.stdout
    assert '"PastKernel" is missing following "RouteKernel" protocol member' in done.stdout
