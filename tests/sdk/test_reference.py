"""The Python SDK's reference is whole and current: every public name of `runstate` (its `__all__`,
its public modules' `__all__`, and every handle a documented method returns) has a docstring, and
`docs/python-reference.md` is what `python -m tests.reference` makes of them today."""

from __future__ import annotations

import pytest

pytest.importorskip("pdoc")

from tests import reference  # noqa: E402


@pytest.fixture(scope="module")
def modules():
    return reference.load()


def test_every_public_name_has_a_docstring(modules):
    missing = reference.undocumented(modules)
    assert not missing, f"{len(missing)} public name(s) without a docstring:\n" + "\n".join(missing)


def test_the_producer_path_is_in_the_reference(modules):
    """The names a producer needs, which the guide shows, are in the reference with their docs."""
    text = reference.render(modules)
    for anchor in (
        "runstate.MailboxesAPI.ensure", "runstate.ScopeHandle.mailbox", "runstate.MailboxRef.submit",
        "runstate.TaskTicket.result", "runstate.Delivery.complete", "runstate.ClaimRef.run",
    ):
        assert f'<a id="{anchor}"></a>' in text, anchor


def test_the_reference_in_docs_is_the_generated_one(modules):
    """Regenerate with `python -m tests.reference` (or `make reference`) after changing a docstring."""
    assert reference.REFERENCE.read_text() == reference.render(modules), (
        "docs/python-reference.md is stale: run `python -m tests.reference`"
    )


def test_the_check_names_what_is_undocumented_and_a_handle_left_out(tmp_path, monkeypatch):
    """The check can fail: a method without a docstring, an attribute its class does not name, and
    a handle a documented method returns that no public module exports are each named."""
    import importlib
    import sys

    source = '''
"""A package module."""

__all__ = ["Client"]


class _Hidden:
    """A handle no __all__ names."""


class Client:
    """A client; its `name` is documented here."""

    def __init__(self) -> None:
        self.name = "x"
        self.size = 1

    def handle(self) -> _Hidden:
        """A handle."""
        return _Hidden()

    def undocumented(self) -> None:
        pass
'''
    (tmp_path / "runstate_fake_for_the_check.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("runstate_fake_for_the_check")
    try:
        missing = reference.Checker([reference.pdoc.doc.Module(module)]).run()
    finally:
        del sys.modules[module.__name__]
    assert any(name.endswith("Client.undocumented (function)") for name in missing), missing
    assert any(name.endswith("Client.size (attribute)") for name in missing), missing
    assert not any(name.endswith("Client.name (attribute)") for name in missing), missing
    assert any("_Hidden" in name and "reached from" in name for name in missing), missing
