"""Client configuration: arguments first, then the environment, then defaults.

Building a client sends nothing; a missing API key or space id fails at once with `ConfigError`
rather than on the first request.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, field

from .errors import ConfigError

__all__ = ["Config", "resolve_config", "default_holder", "new_session"]

ENV_API_KEY = "RUNSTATE_API_KEY"
ENV_SPACE_ID = "RUNSTATE_SPACE_ID"
ENV_BASE_URL = "RUNSTATE_BASE_URL"

DEFAULT_BASE_URL = "http://localhost:8080"
DEFAULT_REQUEST_TIMEOUT_MS = 10_000
DEFAULT_RETRIES = 2


def default_holder() -> str:
    """`worker-` and 6 hex characters: the logical worker when the caller names none."""
    return f"worker-{secrets.token_hex(3)}"


def new_session() -> str:
    """12 hex characters, fresh for every client: two live clients never share a session."""
    return secrets.token_hex(6)


@dataclass
class Config:
    api_key: str
    space_id: str
    base_url: str
    request_timeout_ms: int
    retries: int
    holder: str
    session: str = field(default_factory=new_session)

    def __repr__(self) -> str:  # never print the key
        return (
            f"Config(space_id={self.space_id!r}, base_url={self.base_url!r}, "
            f"request_timeout_ms={self.request_timeout_ms}, retries={self.retries}, holder={self.holder!r})"
        )


def resolve_config(
    api_key: str | None = None,
    space_id: str | None = None,
    base_url: str | None = None,
    request_timeout_ms: int | None = None,
    retries: int | None = None,
    holder: str | None = None,
) -> Config:
    """Merge the arguments over the environment and check that the required values are there."""
    key = api_key or os.environ.get(ENV_API_KEY)
    space = space_id or os.environ.get(ENV_SPACE_ID)
    url = base_url or os.environ.get(ENV_BASE_URL) or DEFAULT_BASE_URL
    if not key:
        raise ConfigError(f"missing api_key: pass api_key= or set {ENV_API_KEY}")
    if not space:
        raise ConfigError(f"missing space_id: pass space_id= or set {ENV_SPACE_ID}")
    if retries is not None and retries < 0:
        raise ConfigError("retries must be 0 or more")
    return Config(
        api_key=key,
        space_id=space,
        base_url=url.removesuffix("/"),
        request_timeout_ms=request_timeout_ms or DEFAULT_REQUEST_TIMEOUT_MS,
        retries=DEFAULT_RETRIES if retries is None else retries,
        holder=holder or default_holder(),
    )
