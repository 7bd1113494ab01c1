"""Client configuration: arguments first, then the environment, then defaults.

Building a client sends nothing; a missing API key or space id fails at once with `ConfigError`
rather than on the first request. The message says what to set, and names the variable the
caller most likely meant when one of ours is misspelt (`RUNSTATE_APIKEY`) or when the admin key
is at hand instead of an API key (the admin key opens no space for the SDK).
"""

from __future__ import annotations

import difflib
import os
import secrets
from dataclasses import dataclass, field
from typing import Mapping

from .errors import ConfigError

__all__ = ["Config", "resolve_config", "default_holder", "new_session", "misspelt_variable"]

ENV_API_KEY = "RUNSTATE_API_KEY"
ENV_SPACE_ID = "RUNSTATE_SPACE_ID"
ENV_BASE_URL = "RUNSTATE_BASE_URL"
ENV_ADMIN_KEY = "RUNSTATE_ADMIN_KEY"
ENV_CA_BUNDLE = "RUNSTATE_CA_BUNDLE"
# Never taken for a typo of one of ours: the SDK's own variables and the other runstate ones.
KNOWN_VARIABLES = frozenset(
    {ENV_API_KEY, ENV_SPACE_ID, ENV_BASE_URL, ENV_ADMIN_KEY, ENV_CA_BUNDLE, "RUNSTATE_SCOPE_ID", "RUNSTATE_DATA_DIR", "RUNSTATE_CONFIG"}
)

DEFAULT_BASE_URL = "http://localhost:8080"
DEFAULT_REQUEST_TIMEOUT_MS = 10_000
DEFAULT_RETRIES = 2
# How alike a set variable's name must be to one of ours to be named as a likely typo (difflib ratio).
TYPO_RATIO_MIN = 0.9


def default_holder() -> str:
    """`worker-` and 6 hex characters: the logical worker when the caller names none."""
    return f"worker-{secrets.token_hex(3)}"


def new_session() -> str:
    """12 hex characters, fresh for every client: two live clients never share a session."""
    return secrets.token_hex(6)


@dataclass
class Config:
    """A client's settings, resolved (`resolve_config()`): `api_key`, `space_id`, `base_url`,
    `request_timeout_ms` (each request), `retries` (transport retries per request), `holder` (the
    name a client's claims and deliveries are held under) and `session` (fresh for every client);
    `api_key_source` says where the key came from, for error messages, and `ca_bundle` is a PEM
    file of certificates to trust for an `https` server instead of the system's. Its `repr` never
    shows the key."""

    api_key: str
    space_id: str
    base_url: str
    request_timeout_ms: int
    retries: int
    holder: str
    session: str = field(default_factory=new_session)
    # Where the API key came from ("api_key=" or the variable's name), for error messages.
    api_key_source: str = "api_key="
    # A PEM file of the certificates to trust for an https server, instead of the system's.
    ca_bundle: str | None = None

    def __repr__(self) -> str:  # never print the key
        return (
            f"Config(space_id={self.space_id!r}, base_url={self.base_url!r}, "
            f"request_timeout_ms={self.request_timeout_ms}, retries={self.retries}, holder={self.holder!r})"
        )


def misspelt_variable(wanted: str, environ: Mapping[str, str]) -> str | None:
    """The name of a set variable that looks like a typo of `wanted` (`RUNSTATE_APIKEY`), if any."""
    candidates = [name for name in environ if name != wanted and name not in KNOWN_VARIABLES]
    upper = {name.upper(): name for name in candidates}
    close = difflib.get_close_matches(wanted, list(upper), n=1, cutoff=TYPO_RATIO_MIN)
    return upper[close[0]] if close else None


def _missing(argument: str, variable: str, environ: Mapping[str, str]) -> ConfigError:
    message = f"missing {argument}: pass {argument}= or set {variable}"
    typo = misspelt_variable(variable, environ)
    if typo is not None:
        message += f" ({typo} is set: did you mean {variable}?)"
    elif variable == ENV_API_KEY and environ.get(ENV_ADMIN_KEY):
        message += (
            f" ({ENV_ADMIN_KEY} is set, but the admin key opens no space: make an API key with"
            " `runstate keys create --space SPACE`)"
        )
    return ConfigError(message)


def resolve_config(
    api_key: str | None = None,
    space_id: str | None = None,
    base_url: str | None = None,
    request_timeout_ms: int | None = None,
    retries: int | None = None,
    holder: str | None = None,
    ca_bundle: str | None = None,
) -> Config:
    """Merge the arguments over the environment and check that the required values are there."""
    environ = os.environ
    key = api_key or environ.get(ENV_API_KEY)
    space = space_id or environ.get(ENV_SPACE_ID)
    url = base_url or environ.get(ENV_BASE_URL) or DEFAULT_BASE_URL
    if not key:
        raise _missing("api_key", ENV_API_KEY, environ)
    if not space:
        raise _missing("space_id", ENV_SPACE_ID, environ)
    if retries is not None and retries < 0:
        raise ConfigError("retries must be 0 or more")
    if request_timeout_ms is not None and request_timeout_ms <= 0:
        raise ConfigError("request_timeout_ms must be more than 0")
    return Config(
        api_key=key,
        space_id=space,
        base_url=url.removesuffix("/"),
        request_timeout_ms=request_timeout_ms or DEFAULT_REQUEST_TIMEOUT_MS,
        retries=DEFAULT_RETRIES if retries is None else retries,
        holder=holder or default_holder(),
        api_key_source="api_key=" if api_key else ENV_API_KEY,
        ca_bundle=ca_bundle or environ.get(ENV_CA_BUNDLE) or None,
    )
