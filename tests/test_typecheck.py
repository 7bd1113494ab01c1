"""The type check of `make test` can fail: a product-page example that misreads a view is caught."""

from __future__ import annotations

import pytest

from .typecheck import check, examples_source


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
