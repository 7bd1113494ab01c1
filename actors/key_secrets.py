"""A bearer key's secret: how one is made and the digest kept of it (a leaf module, so that the
command-line tools that make an admin key load no part of the kernel)."""

from __future__ import annotations

import hashlib
import secrets

__all__ = ["digest", "new_secret"]


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


def new_secret() -> str:
    """A new bearer key: `rs_` + 192 random bits, URL-safe."""
    return "rs_" + secrets.token_urlsafe(24)
