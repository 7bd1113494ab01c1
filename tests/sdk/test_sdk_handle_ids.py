"""An id given to a handle is refused at once when it cannot stand in a request's path.

A handle puts its id in the path as it is: `rs.scope("")` read `GET /scopes/`, which the server
answers as the list of scopes (a trailing slash is let through), and `rs.scope("a/b")` named
another route. Each is `ValidationError` when the handle is made, before anything is sent; an id
the server gives (letters, digits and _) is taken as it is.
"""

from __future__ import annotations

import pytest

import runstate

BAD_IDS = ["", ".", "..", "a/b", "sc_1?x=1", "sc_1#x", "sc 1", "sc_1%2F", "a\\b", "\n"]


def _handles(rs: runstate.AsyncRunstate):
    run = rs.scope("sc_1")
    return {
        "scope": rs.scope,
        "task": run.task,
        "mailbox_by_id": run.mailbox_by_id,
        "pool_by_id": run.pool_by_id,
        "quota_by_id": run.quota_by_id,
        "budget_by_id": run.budget_by_id,
        "barrier": run.barriers.get,
        "timer": run.timers.get,
        "group": run.groups.by_id,
    }


@pytest.fixture
def rs():
    return runstate.AsyncRunstate(base_url="http://127.0.0.1:9", api_key="k", space_id="s")


@pytest.mark.parametrize("kind", list(_handles(runstate.AsyncRunstate(base_url="http://127.0.0.1:9", api_key="k", space_id="s"))))
def test_a_handle_refuses_an_id_that_is_not_one(rs, kind):
    make = _handles(rs)[kind]
    for bad in BAD_IDS:
        with pytest.raises(runstate.ValidationError, match="is not an id"):
            make(bad)
    if not kind.endswith("_by_id"):  # (by id, None means "by name", which these do not take)
        with pytest.raises(runstate.ValidationError, match="must be a string"):
            make(None)
    assert make("ab_0123456789abcdef") is not None  # what the server gives


def test_the_blocking_client_refuses_the_same():
    with runstate.Runstate(base_url="http://127.0.0.1:9", api_key="k", space_id="s") as rs:
        with pytest.raises(runstate.ValidationError, match="scope_id '' is not an id"):
            rs.scope("")
        with pytest.raises(runstate.ValidationError, match="task_id 'a/b' is not an id"):
            rs.scope("sc_1").task("a/b")
