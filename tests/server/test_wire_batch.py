"""The wire shape of a batch's results (`server/wire/operations.py`): the bytes clients read, and
the OpenAPI component made from the same declaration.

`result_before` is one operation's result as the batch route built it before it was a typed view
(a dict: `{"status"}` for a 204, `{"status", "body"}` for an answer, `{"status", "error"}` and
`retryAfter` where there is one for a refusal), kept here as it was written then: every generated
batch must encode to exactly the bytes of those dicts.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from runstate.actors.limits import Limits
from runstate.server import wire
from runstate.server.openapi import openapi
from runstate.server.views import BatchResultView, BatchView, ErrorView

from .test_wire import claims
from .test_wire_errors import errors
from .test_wire_keys import keys
from .test_wire_mailboxes import mailboxes


def result_before(result: BatchResultView) -> dict[str, Any]:
    """`batch`'s and `_refusal`'s result as they were."""
    if result.error is not None:
        refused: dict[str, Any] = {"status": result.status, "error": result.error}
        if result.retry_after is not None:
            refused["retryAfter"] = result.retry_after
        return refused
    if result.body is None:
        return {"status": 204}
    return {"status": result.status, "body": result.body}


_status = st.sampled_from([200, 201])
# An answer: one of the kernel's views, or its wire form as the idempotency table keeps it.
_answers = st.tuples(_status, st.one_of(claims(), keys, mailboxes, mailboxes.map(wire.encode))).map(
    lambda answer: BatchResultView(answer[0], answer[1]),
)
_refusals = errors.map(
    lambda error: BatchResultView(
        409, error=ErrorView(error.code, error.message, "req_1", error.details or None),
        retry_after=None if error.retry_after_s is None else round(error.retry_after_s, 3),
    ),
)
results = st.one_of(st.just(BatchResultView(204)), _answers, _refusals)
batches = st.lists(results, min_size=1, max_size=5).map(lambda listed: BatchView(tuple(listed)))


@settings(max_examples=150, deadline=None)
@given(batches)
def test_every_batch_encodes_to_the_bytes_read_before(batch: BatchView) -> None:
    before = wire.dumps({"results": [result_before(result) for result in batch.results]})
    assert wire.dumps(batch) == before


@settings(max_examples=100, deadline=None)
@given(batches)
def test_each_encoded_batch_validates_against_its_component(batch: BatchView) -> None:
    component = openapi(Limits())["components"]["schemas"]["BatchResults"]
    body = orjson.loads(wire.dumps(batch))
    jsonschema.validate(body, component)
    for written, result in zip(body["results"], batch.results):
        present = {"body": result.body is not None, "error": result.error is not None, "retryAfter": result.retry_after is not None}
        assert list(written) == ["status", *(name for name, there in present.items() if there)]


def test_the_component_lists_exactly_the_encoders_fields_and_the_route_refers_to_it() -> None:
    document = openapi(Limits())
    components = document["components"]["schemas"]
    item = components["BatchResults"]["properties"]["results"]["items"]
    assert list(item["properties"]) == ["status", "body", "error", "retryAfter"] and item["required"] == ["status"]
    assert {key: value for key, value in item["properties"]["error"].items() if key != "description"} == components["Error"]["properties"]["error"]
    assert item["properties"]["retryAfter"]["type"] == "number"
    answer = document["paths"]["/v1/spaces/{space}/batch"]["post"]["responses"]["200"]
    assert answer["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/BatchResults"}
