"""The admin credential: one bearer key for `/v1/admin/*`, `/metrics` from afar, and reading any space.

Where it comes from, in order:

1. `admin_key` (`RUNSTATE_ADMIN_KEY`, or `admin_key` in the TOML file): the operator chose it. Best
   for containers and orchestrators, which inject secrets as variables.
2. With a data directory, the file `DATA_DIR/admin.key`: made at the first start with a fresh key,
   mode 0600 (readable by the server's user only), and read again at every later start. On the
   server's machine `runstate keys ... --data-dir DIR` reads it, so the operator never copies
   it; whoever can read the data directory can read the journal anyway. This is how PostgreSQL
   peers and Docker's socket work: access to the machine's files is the credential.
3. Neither: a key is made, printed once on standard output (never to the log) and kept in memory;
   it lasts as long as the process, like the state of a server without a data directory.

Only its SHA-256 digest is kept in memory and compared in constant time; it is never journaled
(it is configuration, not state) and never logged. API keys made through the admin endpoints
are journaled as digests by the kernel (`key.registered`, `key.revoked`), so they take effect at
once and survive restarts; their secret is in the one answer that creates them and nowhere else.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import stat
from typing import Callable

from ..actors.key_secrets import new_secret
from .logs import event

__all__ = ["AdminCredential", "ADMIN_KEY_FILE", "read_admin_key_file"]

log = logging.getLogger("runstate.server")

ADMIN_KEY_FILE = "admin.key"

# Called once with the admin key the server made and will not write anywhere.
Announce = Callable[[str], None]


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


def read_admin_key_file(data_dir: str) -> str:
    """The admin key stored in `data_dir`; raises OSError when there is none."""
    with open(os.path.join(data_dir, ADMIN_KEY_FILE), encoding="utf-8") as file:
        return file.read().strip()


class AdminCredential:
    __slots__ = ("_digest", "source")

    def __init__(self) -> None:
        self._digest: str | None = None
        self.source = "none"

    def set(self, secret: str, source: str) -> None:
        self._digest = _digest(secret)
        self.source = source

    def matches(self, secret: str) -> bool:
        return self._digest is not None and hmac.compare_digest(self._digest, _digest(secret))

    def prepare(self, admin_key: str | None, data_dir: str | None, announce: Announce | None) -> None:
        """Take the configured key, or the data directory's (made on first use), or make one."""
        if admin_key:
            self.set(admin_key, "configured")
        elif data_dir:
            self.set(_load_or_make(data_dir), "file")
            event(log, "admin_key", "admin key in the data directory", path=os.path.join(data_dir, ADMIN_KEY_FILE))
        else:
            secret = new_secret()
            self.set(secret, "printed")
            if announce is not None:
                announce(secret)


def _load_or_make(data_dir: str) -> str:
    """The key in DATA_DIR/admin.key, made (mode 0600, written once) when the file is missing."""
    os.makedirs(data_dir, exist_ok=True)
    path = os.path.join(data_dir, ADMIN_KEY_FILE)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
    except FileExistsError:
        mode = stat.S_IMODE(os.stat(path).st_mode)
        if mode & 0o077:
            log.warning("%s can be read by other users (mode %o); chmod 600 it", path, mode)
        secret = read_admin_key_file(data_dir)
        if len(secret) < 16:
            raise ValueError(f"{path} holds no usable admin key (at least 16 characters)")
        return secret
    secret = new_secret()
    try:
        os.write(fd, (secret + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    return secret
