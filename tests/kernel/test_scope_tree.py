"""The scope state machine on its own: effective state, deadlines, child limits, ends."""

import pytest

from runstate.actors.errors import CONFLICT, NOT_FOUND, SCOPE_CANCELLED, VALIDATION_FAILED, KernelError
from runstate.actors.limits import Limits
from runstate.actors.scopes import ACTIVE, CANCELLED, COMPLETED, EXPIRED, ScopeTree, ScopeView

T0 = 1_800_000_000_000


def create(tree: ScopeTree, scope_id: str, parent: str | None = None, deadline_ms: int | None = None, child_limit: int | None = None, now_ms: int = T0):
    return tree.apply_created(tree.decide_create(scope_id, None, parent, deadline_ms, child_limit, now_ms))


def test_a_scope_is_effective_only_while_it_and_all_its_ancestors_are_active():
    """Ending a parent ends the child's effective state without touching the child."""
    tree = ScopeTree(Limits())
    root, child = create(tree, "r"), None
    child = create(tree, "c", parent="r")
    grandchild = create(tree, "g", parent="c")
    assert tree.effective(grandchild, T0) == ACTIVE
    tree.apply_ended(tree.decide_end("r", CANCELLED, T0))
    assert tree.effective(grandchild, T0) == CANCELLED
    assert grandchild.stored_state == ACTIVE
    assert tree.subtree("r") == ["r", "c", "g"]
    assert root.stored_state == CANCELLED and child.stored_state == ACTIVE


def test_a_deadline_makes_the_scope_and_its_subtree_expired_at_that_instant():
    """At the deadline (not a millisecond later) the effective state is EXPIRED."""
    tree = ScopeTree(Limits())
    create(tree, "r", deadline_ms=T0 + 1000)
    child = create(tree, "c", parent="r")
    assert tree.effective(child, T0 + 999) == ACTIVE
    assert tree.effective(child, T0 + 1000) == EXPIRED
    with pytest.raises(KernelError) as caught:
        tree.require_active("c", T0 + 1000)
    assert caught.value.code == SCOPE_CANCELLED


def test_child_limit_counts_children():
    """childLimit N allows N children, the next is CONFLICT."""
    tree = ScopeTree(Limits())
    create(tree, "r", child_limit=2)
    create(tree, "a", parent="r")
    create(tree, "b", parent="r")
    with pytest.raises(KernelError) as caught:
        tree.decide_create("c", None, "r", None, None, T0)
    assert caught.value.code == CONFLICT and "childLimit is 2" in caught.value.message


def test_children_of_unknown_or_ended_parents_are_refused():
    """A missing parent is NOT_FOUND; an inactive one is SCOPE_CANCELLED."""
    tree = ScopeTree(Limits())
    with pytest.raises(KernelError) as caught:
        tree.decide_create("c", None, "nope", None, None, T0)
    assert caught.value.code == NOT_FOUND
    create(tree, "r")
    tree.apply_ended(tree.decide_end("r", COMPLETED, T0))
    with pytest.raises(KernelError) as caught:
        tree.decide_create("c", None, "r", None, None, T0)
    assert caught.value.code == SCOPE_CANCELLED


def test_nesting_is_bounded():
    """Scopes nest at most scope_depth_max deep."""
    tree = ScopeTree(Limits(scope_depth_max=3))
    create(tree, "s0")
    for n in range(1, 4):
        create(tree, f"s{n}", parent=f"s{n - 1}")
    with pytest.raises(KernelError) as caught:
        tree.decide_create("s4", None, "s3", None, None, T0)
    assert caught.value.code == VALIDATION_FAILED


def test_ending_twice_the_same_way_is_harmless_another_way_is_a_conflict():
    """cancel after cancel decides nothing; complete after cancel is CONFLICT."""
    tree = ScopeTree(Limits())
    create(tree, "r")
    tree.apply_ended(tree.decide_end("r", CANCELLED, T0))
    assert tree.decide_end("r", CANCELLED, T0) is None
    with pytest.raises(KernelError) as caught:
        tree.decide_end("r", COMPLETED, T0)
    assert caught.value.code == CONFLICT


def test_the_view_has_the_fields_clients_read():
    """The scope view carries its id, name, parent, deadline, child limit, children, both states and
    its times, in milliseconds (the wire names them: `server/wire/scopes.py`)."""
    tree = ScopeTree(Limits())
    scope = tree.apply_created(tree.decide_create("r", "research", None, T0 + 1500, 3, T0))
    view = tree.view(scope, T0)
    assert view == ScopeView("r", "research", None, T0 + 1500, 3, 0, "ACTIVE", "ACTIVE", T0, None)
    assert tree.view(scope, T0 + 1500).effective == "EXPIRED" and tree.view(scope, T0 + 1500).stored_state == "ACTIVE"
