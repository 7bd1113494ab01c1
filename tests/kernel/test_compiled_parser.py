"""The generated parser of each command (`fields.compile_parser`) against `fields.parse`.

The generated one is what every request runs; `parse` reads the declarations one field at a time
and is the reference. For every command and any body (plain values, values at and past each
bound, wrong types, nulls, absent fields), both give an equal command or the same error, and
draw the same random values in the same order.
"""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runstate.actors import commands as c
from runstate.actors.errors import KernelError
from runstate.actors.fields import BODY, INTEGER, PATH, QUERY, TEXT, _checks_across_fields, compile_parser, parse, specs
from runstate.actors.limits import Limits

LIMITS = Limits()

COMMANDS = sorted(
    (
        cls for cls in vars(c).values()
        if isinstance(cls, type) and issubclass(cls, c.Command) and cls is not c.Command and dataclasses.is_dataclass(cls)
        and specs(cls) and len(specs(cls)) == len(dataclasses.fields(cls))  # built from the wire alone
    ),
    key=lambda cls: cls.__name__,
)


def _edges(spec) -> list:  # type: ignore[no-untyped-def]
    """Values at and around a field's bounds, for its kind."""
    values: list = [None, True, False, 0, -1, 1.5, "", "x", [], {}, ["a"], {"a": 1}]
    if spec.kind == TEXT and spec.length_max is not None:
        top = spec.bound(spec.length_max, LIMITS)
        values += ["a" * top, "a" * (top + 1), "a" * max(top - 1, 0)]
    if spec.kind == INTEGER:
        for bound in (spec.minimum, spec.maximum):
            if bound is not None:
                edge = spec.bound(bound, LIMITS)
                values += [edge - 1, edge, edge + 1]
    values += ["2030-01-31T12:00:00Z", "250", "0250", "2030-01-31T12:00:00"]
    return values


def _value(spec):  # type: ignore[no-untyped-def]
    return st.one_of(st.sampled_from(_edges(spec)), st.text(max_size=8), st.integers(-10**6, 10**6))


@st.composite
def _request(draw, cls):  # type: ignore[no-untyped-def]
    body: dict = {}
    params: dict = {}
    query: dict = {}
    for _, spec in specs(cls):
        if spec.source == PATH:
            params[spec.wire] = draw(st.text(min_size=1, max_size=8))
        elif spec.source == BODY and draw(st.booleans()):
            body[spec.wire] = draw(_value(spec))
        elif spec.source == QUERY and draw(st.booleans()):
            query[spec.wire] = draw(st.one_of(st.sampled_from(["1", "-1", "0", "x", "99999999999"]), st.text(max_size=4)))
    return body, params, query


def _run(parser, cls, body, params, query):  # type: ignore[no-untyped-def]
    drawn: list = []
    counter = itertools.count()

    def draw(what: str) -> str:
        value = f"{what}{next(counter)}"
        drawn.append(value)
        return value

    try:
        result = parser(cls, body, params, draw, query.get)
    except KernelError as error:
        return ("error", error.code, str(error), drawn)
    except Exception as error:  # the same failure either way, whatever it is
        return ("raised", type(error).__name__, str(error), drawn)
    return ("command", result, drawn)


@pytest.mark.parametrize("cls", COMMANDS, ids=lambda cls: cls.__name__)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_generated_parser_matches_parse(cls, data) -> None:  # type: ignore[no-untyped-def]
    generated = compile_parser(cls, LIMITS)
    body, params, query = data.draw(_request(cls))
    expected = _run(lambda k, b, p, d, q: parse(k, b, p, LIMITS, d, q), cls, body, params, query)
    got = _run(lambda k, b, p, d, q: generated(b, p, d, q), cls, body, params, query)
    assert got == expected


def test_a_plain_acquire_parses_the_same_both_ways() -> None:
    body = {"scopeId": "sc_1", "key": "k", "holder": "h", "holderSession": "s", "leaseSeconds": 30}
    generated = compile_parser(c.AcquireClaim, LIMITS)
    made = generated(body, {"space": "default"}, lambda what: "ct_1", None)
    assert made == parse(c.AcquireClaim, body, {"space": "default"}, LIMITS, lambda what: "ct_1")
    assert made.lease_s == 30 and made.token == "ct_1"


def test_the_generated_parser_refuses_with_parse_wording() -> None:
    generated = compile_parser(c.AcquireClaim, LIMITS)
    body = {"scopeId": "sc_1", "key": "k" * (LIMITS.claim_key_len_max + 1), "holder": "h", "holderSession": "s"}
    try:
        generated(body, {"space": "default"}, lambda what: "ct_1", None)
    except KernelError as error:
        assert error.code == "VALIDATION_FAILED" and "longer than" in str(error)
    else:
        raise AssertionError("an over-long key was accepted")


def test_every_command_with_fields_is_covered() -> None:
    assert c.AcquireClaim in COMMANDS and c.SubmitTask in COMMANDS and c.Receive in COMMANDS
    assert len(COMMANDS) > 30


def test_the_generated_parser_runs_check_exactly_for_the_commands_that_define_one() -> None:
    """The base `check` checks nothing, so the generated parser leaves its call out; every
    command with a `check` of its own (or inherited from a class between it and `Command`) runs it."""
    everything = [cls for cls in vars(c).values() if isinstance(cls, type) and issubclass(cls, c.Command) and cls is not c.Command]
    for cls in everything:
        assert _checks_across_fields(cls) == (cls.check is not c.Command.check), cls.__name__
    assert _checks_across_fields(c.RegisterKey) and not _checks_across_fields(c.AcquireClaim)


def _depth_reference(value, depth_max: int) -> bool:  # type: ignore[no-untyped-def]
    """Depth by an explicit stack: the top container is depth 1."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > depth_max:
                return True
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return False


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2), inner, max_size=3),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(value=_JSON, depth_max=st.integers(0, 6))
def test_the_depth_check_counts_nesting_as_a_stack_would(value, depth_max) -> None:  # type: ignore[no-untyped-def]
    from runstate.actors.fields import depth_exceeds

    assert depth_exceeds(value, depth_max) == _depth_reference(value, depth_max)
