"""One table of code -> HTTP status -> exception class, tied to the server's own table, and
error messages a person can act on (the URL, where the key came from, a misspelt variable)."""

from __future__ import annotations

import pytest

import runstate
from runstate import errors
from runstate.actors import errors as kernel_errors
from runstate.server.errors import STATUS as SERVER_STATUS
from sdk_fakes import error, make_client

# The kernel's codes: its exported string constants (not its helpers, such as `quote`).
KERNEL_CODES = {value for name in kernel_errors.__all__ if isinstance(value := getattr(kernel_errors, name), str)}


def test_every_code_the_server_sends_has_its_status_and_a_family_class():
    """Each code in the server's table (and each kernel code) is in the SDK's, with the same status and not the bare base class."""
    for code in set(SERVER_STATUS) | KERNEL_CODES:
        assert code in errors.ERRORS, f"the SDK does not know {code}"
        kind = errors.ERRORS[code]
        assert kind.status == SERVER_STATUS[code], code
        assert kind.error_class is not runstate.RunstateError and issubclass(kind.error_class, runstate.RunstateError)


def test_the_derived_tables_agree_with_the_one_table():
    """STATUS_BY_CODE and map_error are read from ERRORS; only client-side codes have status 0."""
    for code, kind in errors.ERRORS.items():
        made = runstate.map_error(code, 0, "m")
        assert type(made) is kind.error_class
        if kind.status:
            assert errors.STATUS_BY_CODE[code] == kind.status == made.status
        else:
            assert code == "WAIT_TIMEOUT" and code not in errors.STATUS_BY_CODE


@pytest.mark.parametrize(
    "made,permanent",
    [
        (runstate.map_error("VALIDATION_FAILED", 400, "m"), True),
        (runstate.map_error("UNAUTHENTICATED", 401, "m"), True),
        (runstate.map_error("NOT_FOUND", 404, "m"), True),
        (runstate.ConfigError("m"), True),
        (runstate.map_error("BRAND_NEW", 422, "m"), True),
        (runstate.map_error("BRAND_NEW", 409, "m"), False),
        (runstate.map_error("BRAND_NEW", 503, "m"), False),
        (runstate.map_error("CLAIM_HELD", 409, "m"), False),
        (runstate.map_error("RATE_LIMITED", 429, "m"), False),
        (runstate.map_error("REQUEST_TIMEOUT", 408, "m"), False),
        (runstate.map_error("INTERNAL", 500, "m"), False),
        (runstate.UnreachableError("http://x", "refused"), False),
    ],
)
def test_is_permanent_says_whether_the_same_request_can_ever_succeed(made, permanent):
    """Validation, authentication, not-found and unknown 4xx are permanent; conflicts, limits and outages are not."""
    assert runstate.is_permanent(made) is permanent


# -- messages -----------------------------------------------------------------------------------


def test_a_misspelt_api_key_variable_is_named(monkeypatch):
    """RUNSTATE_APIKEY set, RUNSTATE_API_KEY not: the ConfigError asks whether that was meant."""
    for name in ("RUNSTATE_API_KEY", "RUNSTATE_ADMIN_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RUNSTATE_APIKEY", "rs_123")
    with pytest.raises(runstate.ConfigError) as caught:
        runstate.AsyncRunstate(space_id="default")
    assert caught.value.message == (
        "missing api_key: pass api_key= or set RUNSTATE_API_KEY (RUNSTATE_APIKEY is set: did you mean RUNSTATE_API_KEY?)"
    )


def test_a_misspelt_space_variable_is_named_but_other_runstate_variables_are_not(monkeypatch):
    """RUNSTATE_SPACEID is taken for a typo; RUNSTATE_SCOPE_ID, a variable of its own, is not."""
    monkeypatch.delenv("RUNSTATE_SPACE_ID", raising=False)
    monkeypatch.setenv("RUNSTATE_SCOPE_ID", "sc_1")
    with pytest.raises(runstate.ConfigError) as caught:
        runstate.AsyncRunstate(api_key="k")
    assert caught.value.message == "missing space_id: pass space_id= or set RUNSTATE_SPACE_ID"
    monkeypatch.setenv("RUNSTATE_SPACEID", "default")
    with pytest.raises(runstate.ConfigError, match="RUNSTATE_SPACEID is set: did you mean RUNSTATE_SPACE_ID"):
        runstate.AsyncRunstate(api_key="k")


def test_only_an_admin_key_at_hand_says_it_opens_no_space(monkeypatch):
    """RUNSTATE_ADMIN_KEY but no RUNSTATE_API_KEY: the error says the admin key is not an API key and how to make one."""
    monkeypatch.delenv("RUNSTATE_API_KEY", raising=False)
    monkeypatch.setenv("RUNSTATE_ADMIN_KEY", "admin-0123456789abcdef")
    with pytest.raises(runstate.ConfigError, match=r"RUNSTATE_ADMIN_KEY is set, but the admin key opens no space.*runstate keys create"):
        runstate.AsyncRunstate(space_id="default")


@pytest.mark.anyio
async def test_the_admin_key_used_as_an_api_key_is_named_in_the_refusal(monkeypatch):
    """A 401 for a key equal to RUNSTATE_ADMIN_KEY says so, with where the key came from and where it went."""
    monkeypatch.setenv("RUNSTATE_ADMIN_KEY", "admin-0123456789abcdef")
    monkeypatch.setenv("RUNSTATE_API_KEY", "admin-0123456789abcdef")
    rs, _ = make_client(lambda sent: error(401, "UNAUTHENTICATED", "the API key is not valid"), api_key=None,
                        base_url="http://runstate.internal:8080")
    with pytest.raises(runstate.AuthenticationError) as caught:
        await rs.scopes.create()
    assert caught.value.message.startswith(
        "the API key is not valid (the key from RUNSTATE_API_KEY, sent to http://runstate.internal:8080; "
        "it is the admin key (RUNSTATE_ADMIN_KEY), which opens no space"
    )
    assert str(caught.value) == caught.value.message
