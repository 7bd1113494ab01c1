"""Console sessions: how long they last, how many are kept, their cookie, and what a change must carry."""

from __future__ import annotations

from runstate.server.console.sessions import (
    COOKIE, Sessions, clear_cookie, cookie_value, same_origin, set_cookie,
)


def test_a_session_ends_when_idle_too_long_or_too_old_and_on_close():
    """Idle past `idle_s`, or past `lifetime_s` however busy, a session is gone; close ends it."""
    sessions = Sessions(idle_s=10, lifetime_s=30)
    idle = sessions.open("k1", False, "ak_1", None, now_s=0)
    busy = sessions.open("k2", False, "ak_2", None, now_s=0)
    for now in range(5, 30, 5):
        assert sessions.get(busy.id, now) is busy
    assert sessions.get(idle.id, 11) is None
    assert sessions.get(busy.id, 30) is None
    closed = sessions.open("k3", True, None, None, now_s=40)
    sessions.close(closed.id)
    assert sessions.get(closed.id, 40) is None and len(sessions) == 0


def test_at_most_so_many_sessions_are_kept_the_least_recently_used_first_out():
    sessions = Sessions(most=3)
    first, second, third = (sessions.open(f"k{n}", False, None, None, now_s=n) for n in range(3))
    sessions.get(first.id, 5)  # used again: now the most recent
    fourth = sessions.open("k4", False, None, None, now_s=6)
    assert sessions.get(second.id, 7) is None
    assert all(sessions.get(s.id, 7) is s for s in (first, third, fourth))


def test_the_cookie_is_http_only_strict_and_scoped_to_the_console():
    session = Sessions().open("secret", False, None, None, now_s=0)
    cookie = set_cookie(session, secure=False)
    assert cookie.startswith(f"{COOKIE}={session.id}; Path=/console;")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Secure" not in cookie
    assert set_cookie(session, secure=True).endswith("; Secure")
    assert "secret" not in cookie
    assert "Max-Age=0" in clear_cookie(secure=False)
    assert cookie_value(f"other=1; {COOKIE}={session.id}; x=y") == session.id
    assert cookie_value("other=1") is None and cookie_value(None) is None and cookie_value("x" * 10_000) is None


def test_a_change_must_come_from_this_host_and_carry_the_sessions_token():
    """Origin (else Referer) must name the host the request was sent to; the CSRF token is
    compared in constant time and is the session's own."""
    host = {"host": "127.0.0.1:8080"}
    assert same_origin({**host, "origin": "http://127.0.0.1:8080"})
    assert same_origin({**host, "referer": "http://127.0.0.1:8080/console/s/default/runs"})
    assert not same_origin({**host, "origin": "http://evil.example"})
    assert not same_origin({**host, "origin": "null"})
    assert not same_origin(host)
    assert not same_origin({"origin": "http://127.0.0.1:8080"})
    one, two = Sessions().open("a", False, None, None, 0), Sessions().open("b", False, None, None, 0)
    assert one.csrf_matches(one.csrf) and not one.csrf_matches(two.csrf)
    assert not one.csrf_matches(None) and not one.csrf_matches("") and not one.csrf_matches("é")
