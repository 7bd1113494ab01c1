"""Console sessions: an API key (or the admin key) traded for a cookie, kept on the server.

Signing in posts the key once; the server keeps it in memory beside a random session id, and the
browser holds only the id, in a cookie that is `HttpOnly` (no script reads it), `SameSite=Strict`
(no other site's page sends it), `Path=/console` (the API never receives it) and `Secure` when
the console is reached over https. A key kept in the page's JavaScript would be one XSS away from
theft, and `EventSource` cannot send an Authorization header; a cookie that names a server-side
session avoids both. `/v1` never reads cookies: it stays bearer-only.

An action's notice ("Dead letters requeued: 3.") is kept in the session too, for the one next
page (`Session.notice`): a notice in the URL would show again on every reload and ride along in a
sign-in's `next`.

Every request checks the key again (a revoked key ends its sessions at once). A session ends
after `SESSION_IDLE_S` without a request, after `SESSION_LIFETIME_S` in all, or on signing out;
at most `SESSIONS_MAX` are kept (the least recently used goes first). Sessions live in the
process: a restart signs everyone out, and behind a load balancer over several nodes the console
needs sticky sessions.

Every change (a POST) carries the session's CSRF token, in the `X-CSRF-Token` header (htmx) or
the `csrf` form field, and an `Origin` (or `Referer`) of this very host: SameSite alone does not
cover a browser that ignores it or a sibling subdomain.
"""

from __future__ import annotations

import hmac
import secrets
from collections import OrderedDict
from urllib.parse import urlsplit

__all__ = ["Session", "Sessions", "COOKIE", "SESSION_IDLE_S", "SESSION_LIFETIME_S", "SESSIONS_MAX", "cookie_value",
           "set_cookie", "clear_cookie", "same_origin"]

COOKIE = "runstate_console"
SESSION_IDLE_S = 8 * 3600
SESSION_LIFETIME_S = 24 * 3600
SESSIONS_MAX = 10_000
# The bytes of a Cookie header looked at: a browser sends a few hundred; anything longer is not ours.
COOKIE_HEADER_CHARS_MAX = 8192


class Session:
    __slots__ = ("id", "secret", "admin", "key_id", "key_name", "spaces", "role", "csrf", "started_s", "seen_s", "notice")

    def __init__(self, secret: str, admin: bool, key_id: str | None, key_name: str | None, now_s: float) -> None:
        self.id = secrets.token_urlsafe(32)
        self.secret = secret
        self.admin = admin
        self.key_id = key_id
        self.key_name = key_name
        self.spaces: frozenset[str] = frozenset()  # the spaces an API key opens, as last checked
        # What the key may do (`actors/keys.py`: editor or viewer; "admin" for the admin key), as
        # last checked: the console offers only the actions the API would take from it.
        self.role = "admin" if admin else "editor"
        self.csrf = secrets.token_urlsafe(32)
        self.started_s = now_s
        self.seen_s = now_s
        # What an action just done says, and the page it sends the browser to (`actions._done`):
        # kept here rather than in that page's URL, so that it is shown once, by the next page
        # this session opens, and never again on a reload, a bookmark or a sign-in's `next`.
        self.notice: tuple[str, str] | None = None

    @property
    def who(self) -> str:
        """How the console names the signed-in key: which kind of key, and its name (or id) in
        quotes, so that a name such as "generated at first start" does not read as a status."""
        if self.admin:
            return "admin key"
        return f"API key “{self.key_name}”" if self.key_name else f"API key {self.key_id or ''}".rstrip()

    @property
    def may_act(self) -> bool:
        """Whether the console offers its actions (a viewer's key would be refused each one)."""
        return self.role != "viewer"

    def csrf_matches(self, token: str | None) -> bool:
        return token is not None and hmac.compare_digest(self.csrf.encode(), token.encode("utf-8", "surrogatepass"))


class Sessions:
    """The sessions of this process, by id. Times are the monotonic seconds of the caller's clock."""

    def __init__(self, *, idle_s: float = SESSION_IDLE_S, lifetime_s: float = SESSION_LIFETIME_S, most: int = SESSIONS_MAX) -> None:
        self.idle_s = idle_s
        self.lifetime_s = lifetime_s
        self.most = most
        self._by_id: OrderedDict[str, Session] = OrderedDict()

    def __len__(self) -> int:
        return len(self._by_id)

    def open(self, secret: str, admin: bool, key_id: str | None, key_name: str | None, now_s: float) -> Session:
        self._drop_ended(now_s)
        while len(self._by_id) >= self.most:
            self._by_id.popitem(last=False)
        session = Session(secret, admin, key_id, key_name, now_s)
        self._by_id[session.id] = session
        return session

    def get(self, session_id: str | None, now_s: float) -> Session | None:
        """The live session of this id (now marked used), or None."""
        if not session_id:
            return None
        session = self._by_id.get(session_id)
        if session is None:
            return None
        if self._ended(session, now_s):
            del self._by_id[session_id]
            return None
        session.seen_s = now_s
        self._by_id.move_to_end(session_id)
        return session

    def close(self, session_id: str) -> None:
        self._by_id.pop(session_id, None)

    def _ended(self, session: Session, now_s: float) -> bool:
        return now_s - session.seen_s >= self.idle_s or now_s - session.started_s >= self.lifetime_s

    def _drop_ended(self, now_s: float) -> None:
        """Forget the sessions idle too long: they are kept least recently used first. (One past
        its lifetime but in use is forgotten when it is next asked for.)"""
        while self._by_id:
            session = next(iter(self._by_id.values()))
            if now_s - session.seen_s < self.idle_s:
                break
            self._by_id.popitem(last=False)


def cookie_value(header: str | None, name: str = COOKIE) -> str | None:
    """The value of cookie `name` in a Cookie header, or None."""
    if not header or len(header) > COOKIE_HEADER_CHARS_MAX:
        return None
    for part in header.split(";"):
        key, equals, value = part.strip().partition("=")
        if equals and key == name:
            return value.strip().strip('"') or None
    return None


def set_cookie(session: Session, secure: bool, lifetime_s: float = SESSION_LIFETIME_S) -> str:
    flags = f"; Path=/console; Max-Age={int(lifetime_s)}; HttpOnly; SameSite=Strict" + ("; Secure" if secure else "")
    return f"{COOKIE}={session.id}{flags}"


def clear_cookie(secure: bool) -> str:
    return f"{COOKIE}=; Path=/console; Max-Age=0; HttpOnly; SameSite=Strict" + ("; Secure" if secure else "")


def same_origin(headers: dict[str, str]) -> bool:
    """Whether a change comes from a page of this host: its Origin (else its Referer) names the
    host the request was sent to. A request with neither is refused: browsers send Origin on
    every POST, and a tool that is not a browser has no business posting the console's forms."""
    host = headers.get("host", "")
    source = headers.get("origin") or headers.get("referer")
    if not host or not source or source == "null":
        return False
    try:
        return urlsplit(source).netloc.lower() == host.lower()
    except ValueError:
        return False
