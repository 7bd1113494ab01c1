"""Bad input of every kind gets a 4xx with the error envelope, and the server keeps serving."""

from __future__ import annotations

import gzip

import pytest

pytestmark = pytest.mark.trio


def assert_envelope(status: int, body: dict, code: str, expected_status: int) -> None:
    assert status == expected_status, body
    assert set(body) == {"error"}
    assert body["error"]["code"] == code
    assert body["error"]["message"] and body["error"]["requestId"].startswith("req_")


async def new_run(api) -> str:
    status, _, body = await api.post("/scopes", {"name": "hostile"})
    assert status == 201
    return body["id"]


def claim(scope_id: str, **changes) -> dict:
    body = {"key": "k", "scopeId": scope_id, "holder": "h", "holderSession": "s", "leaseSeconds": 30}
    body.update(changes)
    return {k: v for k, v in body.items() if v is not ...}


async def test_malformed_and_non_utf8_json_is_refused(api, autojump_clock):
    """Broken JSON, non-UTF-8 bytes, a JSON array or a bare string: 400 VALIDATION_FAILED."""
    for raw in [b"{", b"\xff\xfe{}", b'{"key": "\xc3\x28"}', b"[1,2]", b'"text"', b"null", b"{'a': 1}", b"NaN"]:
        status, _, body = await api.post("/scopes", body=raw, headers={"content-type": "application/json"})
        assert_envelope(status, body, "VALIDATION_FAILED", 400)


@pytest.mark.parametrize("bad", ["30", 30.0, 30.5, True, None, [30], {"s": 30}])
async def test_wrong_types_where_an_integer_belongs(api, autojump_clock, bad):
    """leaseSeconds as a string, float, boolean, list or object is 400 naming the field (null means default)."""
    scope_id = await new_run(api)
    status, _, body = await api.post("/claims", claim(scope_id, leaseSeconds=bad))
    if bad is None:
        assert status == 200 and body["leaseSeconds"] == 30
    else:
        assert_envelope(status, body, "VALIDATION_FAILED", 400)
        assert "leaseSeconds" in body["error"]["message"]


@pytest.mark.parametrize("field", ["key", "scopeId", "holder", "holderSession"])
async def test_missing_or_mistyped_required_fields(api, autojump_clock, field):
    """A required field that is missing, null or not a string is 400 naming it."""
    scope_id = await new_run(api)
    for value in (..., None, 7, ["x"]):
        status, _, body = await api.post("/claims", claim(scope_id, **{field: value}))
        assert_envelope(status, body, "VALIDATION_FAILED", 400)
        assert field in body["error"]["message"]


async def test_limits_on_keys_names_leases_and_payloads(api, autojump_clock):
    """Over-long keys and names, empty keys, leases outside 5-600 and oversized observations are 400."""
    scope_id = await new_run(api)
    cases = [
        ("/claims", claim(scope_id, key="k" * 513)),
        ("/claims", claim(scope_id, key="")),
        ("/claims", claim(scope_id, leaseSeconds=4)),
        ("/claims", claim(scope_id, leaseSeconds=601)),
        ("/claims", claim(scope_id, leaseSeconds=-1)),
        ("/claims", claim(scope_id, holder="h" * 257)),
        ("/scopes", {"name": "n" * 257}),
        ("/scopes", {"name": ""}),
        ("/scopes", {"childLimit": -1}),
        ("/scopes", {"deadline": "tomorrow"}),
        ("/scopes", {"deadline": "2030-01-01T00:00:00"}),
        ("/scopes", {"deadline": 1893456000}),
    ]
    for path, payload in cases:
        status, _, body = await api.post(path, payload)
        assert_envelope(status, body, "VALIDATION_FAILED", 400)
    huge = b'{"key":"k","scopeId":"%s","holder":"h","holderSession":"s","leaseSeconds":100000000000000000000000000000}'
    status, _, body = await api.post("/claims", body=huge % scope_id.encode())
    assert_envelope(status, body, "VALIDATION_FAILED", 400)
    status, _, body = await api.post("/claims", claim(scope_id, key="k" * 512))
    assert status == 200
    status, _, body = await api.post(
        "/claims/" + "k" * 512 + "/release", {"token": body["token"], "observation": {"blob": "x" * 70_000}}
    )
    assert_envelope(status, body, "VALIDATION_FAILED", 400)
    assert "exceeds 65536 bytes" in body["error"]["message"]


async def test_oversized_bodies_get_413_with_the_envelope(api, autojump_clock):
    """A body over 1 MiB is refused with 413 before it is parsed."""
    status, _, body = await api.post("/scopes", body=b"{" + b" " * (1024 * 1024 + 10) + b"}")
    assert_envelope(status, body, "VALIDATION_FAILED", 413)
    assert "exceeds 1048576 bytes" in body["error"]["message"]


async def test_deep_nesting_is_refused_or_bounded(api, autojump_clock):
    """JSON nested far deeper than any real request is refused as invalid, not a crash."""
    deep = b'{"name": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    status, _, body = await api.post("/scopes", body=deep)
    assert_envelope(status, body, "VALIDATION_FAILED", 400)
    scope_id = await new_run(api)
    status, _, lease = await api.post("/claims", claim(scope_id))
    too_deep = b'{"token": "%s", "observation": ' % lease["token"].encode() + b"[" * 300 + b"]" * 300 + b"}"
    status, _, body = await api.post("/claims/k/release", body=too_deep)
    assert_envelope(status, body, "VALIDATION_FAILED", 400)
    assert "nests deeper than 64" in body["error"]["message"]
    nested: dict = {"a": None}
    for _ in range(60):
        nested = {"a": nested}
    status, _, body = await api.post("/claims/k/release", {"token": lease["token"], "observation": nested})
    assert status == 200


async def test_unknown_routes_and_methods(api, autojump_clock):
    """Unknown paths are 404 NOT_FOUND, wrong methods 405 with Allow, both with the envelope."""
    for method, path in [("GET", "/nope"), ("POST", "/v1/spaces/default/widgets"), ("GET", "/v1/spaces/default/claims/k/renew/extra")]:
        status, _, body = await api.request(method, path)
        assert_envelope(status, body, "NOT_FOUND", 404)
    status, headers, body = await api.request("DELETE", "/v1/spaces/default/claims")
    assert_envelope(status, body, "METHOD_NOT_ALLOWED", 405)
    assert headers["allow"] == "POST"
    status, _, body = await api.request("GET", "/v1/spaces/default/claims/%ff%fe/renew")
    assert_envelope(status, body, "VALIDATION_FAILED", 400)


async def test_an_integer_too_wide_for_a_field_with_no_most_is_told_the_most_taken(api, autojump_clock):
    """waitMs and waitSeconds have a least and no most of their own: an integer past what the server
    reads is refused naming the most it reads, not "of at least 0", which the value is."""
    run = await new_run(api)
    body = b'{"scopeId": "%s", "key": "k", "holder": "h", "holderSession": "s", "waitMs": %d}' % (run.encode(), 10**30)
    status, _, answer = await api.post("/claims", body=body, headers={"content-type": "application/json"})
    assert_envelope(status, answer, "VALIDATION_FAILED", 400)
    assert answer["error"]["message"] == (
        f"field 'waitMs' must be an integer from 0 to {2**64 - 1}, got 1000000000000000000000000000000")
    status, _, answer = await api.get(f"/watch?waitSeconds={10**30}")
    assert_envelope(status, answer, "VALIDATION_FAILED", 400)
    assert answer["error"]["message"] == f"waitSeconds must be an integer from 0 to {10**18 - 1}, got '{10**30}'"
    status, _, answer = await api.get("/watch?waitSeconds=-1")
    assert answer["error"]["message"] == "waitSeconds must be an integer of at least 0, got '-1'"


async def test_a_compressed_body_is_refused_as_such_not_as_bad_json(api, autojump_clock):
    """A body with a Content-Encoding other than identity is 400 naming the coding (it was read as
    JSON and refused as "not valid JSON"); identity, and a body of plain JSON, are read."""
    body = gzip.compress(b'{"name": "zipped"}')
    status, _, answer = await api.post("/scopes", body=body, headers={"content-type": "application/json", "content-encoding": "gzip"})
    assert_envelope(status, answer, "VALIDATION_FAILED", 400)
    assert answer["error"]["message"] == "Content-Encoding 'gzip' is not read here: send the body as plain JSON"
    status, _, answer = await api.post("/scopes", {"name": "plain"}, headers={"content-encoding": "identity"})
    assert status == 201 and answer["name"] == "plain"
    status, _, answer = await api.get("/scopes", headers={"content-encoding": "gzip"})  # no body: nothing to read
    assert status == 200


async def test_missing_wrong_and_foreign_keys(api, autojump_clock):
    """No key or a malformed header is 401; a wrong key 401, each with the challenge of the bearer
    scheme (WWW-Authenticate, which RFC 9110 asks of every 401); a space the key does not open 404."""
    scope_id = await new_run(api)
    for headers, key in [({}, None), ({"authorization": "Basic abc"}, None), ({"authorization": "Bearer"}, None), ({}, "wrong-key")]:
        status, answer_headers, body = await api.request("GET", f"/v1/spaces/default/scopes/{scope_id}", headers=headers, key=key)
        assert_envelope(status, body, "UNAUTHENTICATED", 401)
        assert answer_headers["www-authenticate"] == 'Bearer realm="runstate"'
    status, _, body = await api.request("GET", f"/v1/spaces/other/scopes/{scope_id}")
    assert_envelope(status, body, "NOT_FOUND", 404)
    status, _, body = await api.get("/scopes/sc_nope")
    assert_envelope(status, body, "NOT_FOUND", 404)


async def test_bad_idempotency_keys_and_key_reuse(api, autojump_clock):
    """An over-long Idempotency-Key is 400; reusing one for a different request is 409 IDEMPOTENCY_CONFLICT."""
    status, _, body = await api.post("/scopes", {}, headers={"idempotency-key": "x" * 256})
    assert_envelope(status, body, "VALIDATION_FAILED", 400)
    first = await api.post("/scopes", {"name": "a"}, headers={"idempotency-key": "same"})
    again = await api.post("/scopes", {"name": "a"}, headers={"idempotency-key": "same"})
    assert first[0] == again[0] == 201 and first[2] == again[2]
    status, _, body = await api.post("/scopes", {"name": "b"}, headers={"idempotency-key": "same"})
    assert_envelope(status, body, "IDEMPOTENCY_CONFLICT", 409)


async def test_the_server_keeps_serving_after_all_of_it(api, autojump_clock):
    """After a barrage of bad requests, health is 200 and a claim cycle works."""
    for raw in [b"{", b"\x00" * 100, b"[]" * 1000]:
        await api.post("/claims", body=raw)
    status, _, body = await api.request("GET", "/healthz", key=None)
    assert (status, body) == (200, {"status": "ok"})
    scope_id = await new_run(api)
    status, _, lease = await api.post("/claims", claim(scope_id))
    assert status == 200
    status, _, body = await api.post("/claims/k/release", {"token": lease["token"]})
    assert status == 200 and body["released"] is True


async def test_bodyless_posts_are_accepted(api, autojump_clock):
    """cancel and complete come with no body and no content-type."""
    scope_id = await new_run(api)
    status, _, body = await api.request("POST", f"/v1/spaces/default/scopes/{scope_id}/complete", body=b"")
    assert status == 200 and body["storedState"] == "COMPLETED"


async def test_a_deep_body_with_a_long_run_of_digits_is_never_a_500_on_any_route(api, autojump_clock):
    """Nested 1000 deep (within orjson's limit, past Python's recursion) and holding a run of 4400
    digits: the integer check used to fall back on `int()` of the run, which Python refuses past
    4300 digits, and answered 500 on every POST and PUT route. Now: never a 5xx, on any of them."""
    from runstate.server.routes import ROUTER

    deep = b"[" * 1000 + b"]" * 1000
    hostile = [
        b'{"name": "' + b"9" * 4400 + b'", "x": ' + deep + b"}",  # the digits in a string
        b'{"name": "n", "payload": ' + b"[" * 1000 + b"1" + b"7" * 300 + b"]" * 1000 + b"}",  # a number orjson cannot hold
    ]
    for route in ROUTER.routes:
        if route.method not in ("POST", "PUT") or not route.path.startswith("/v1/spaces/{space}"):
            continue
        path = route.path.replace("/v1/spaces/{space}", "").replace("{", "").replace("}", "")
        for raw in hostile:
            status, _, body = await api.request(route.method, "/v1/spaces/default" + path, body=raw)
            assert status < 500, (route.method, route.path, status, body)


async def test_digits_in_a_string_are_never_taken_for_an_integer_out_of_range():
    """A string of 19 or more digits is a string, deep in a body or not; an integer out of the
    64-bit range is refused naming where it is, at any depth."""
    from runstate.server.body import parse_body
    from runstate.server.errors import ApiError

    deep = b"[" * 1000 + b'"' + b"1" * 30 + b'"' + b"]" * 1000
    assert parse_body(b'{"text": "12345678901234567890123", "deep": ' + deep + b"}").data["text"] == "12345678901234567890123"
    for raw, place in ((b'{"a": [' + b"[" * 998 + b"-99999999999999999999" + b"]" * 999 + b"}", "a" + "[0]" * 999),
                       (b'{"p": {"q": [1, 18446744073709551616]}}', "p.q[1]")):
        with pytest.raises(ApiError) as caught:
            parse_body(raw).data
        assert "send it as a string" in caught.value.message
        assert caught.value.message.startswith(f"field {place[:90]!r}"[:-1]), caught.value.message  # a long path is cut short
    assert parse_body(b'{"f": 1.123456789012345678901234, "e": 12345678901234567890123e-3}').data["f"] > 1


async def test_an_integer_field_out_of_any_range_says_what_range_it_takes(api, autojump_clock):
    """leaseSeconds: 10**20 used to answer "send it as a string"; as a string, "must be an integer".
    Both say now what the field takes: an integer from 5 to 600."""
    scope_id = await new_run(api)
    raw = b'{"key":"k","scopeId":"%s","holder":"h","holderSession":"s","leaseSeconds":100000000000000000000}' % scope_id.encode()
    status, _, body = await api.post("/claims", body=raw)
    assert_envelope(status, body, "VALIDATION_FAILED", 400)
    assert body["error"]["message"] == "field 'leaseSeconds' must be an integer from 5 to 600, got 100000000000000000000"
    status, _, body = await api.post("/claims", claim(scope_id, leaseSeconds="100000000000000000000"))
    assert_envelope(status, body, "VALIDATION_FAILED", 400)
    assert "must be an integer from 5 to 600" in body["error"]["message"]


async def test_a_field_the_route_does_not_read_is_refused_naming_it(api, autojump_clock):
    """`POST /scopes {"nmae": "x"}` made a run without a name (201); now 400 names the field and the
    nearest one the route reads. Every route that takes a body does the same."""
    status, _, body = await api.post("/scopes", {"nmae": "x"})
    assert_envelope(status, body, "VALIDATION_FAILED", 400)
    assert body["error"]["message"] == "unknown field 'nmae' (did you mean 'name'?): this request takes childLimit, deadline, name, parentId"
    scope_id = await new_run(api)
    status, _, body = await api.post("/claims", {**claim(scope_id), "leaseSecond": 30})
    assert_envelope(status, body, "VALIDATION_FAILED", 400)
    assert "'leaseSecond' (did you mean 'leaseSeconds'?)" in body["error"]["message"]
    status, _, body = await api.post(f"/scopes/{scope_id}/cancel", {"why": "x"})
    assert_envelope(status, body, "VALIDATION_FAILED", 400)
    assert "this request takes no fields" in body["error"]["message"]
