"""The console's actions: each one a confirmation page, then the very API route it stands for.

An action is never a second implementation: the console calls the API's own route in process
(`call_api`), with the signed-in key as its bearer, so it is authorized, checked, journaled and
shown in the event log exactly as the same request from `curl` or the CLI would be, and it is
refused the same way (an admin key that may only read gets the API's 403, shown as such). On a
node of a cluster the route runs on the leader of its partition, like any API request.

Every action is two steps. `GET .../{action}` shows what will happen, with the numbers it will
touch, and a form; `POST` (with the session's CSRF token, from a page of this host) does it and
goes back to the page, which says once that it is done (a notice kept in the session). A bulk
action on dead letters asks the API for its count first (`dryRun`), so the confirmation says how
many it will touch; when that is none, it says so and offers no button.

Actions offered: cancel a run, cancel a task, release a stuck claim, requeue or delete dead
letters. The last two are offered when this server has their routes (`api_has`).
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import quote, urlencode

import orjson

from ...actors.errors import CONFLICT, VALIDATION_FAILED, KernelError
from ..errors import ApiError
from ..forward import Forwarded, lead_or_forward, partition_of_request
from ..http import Request
from ..routes import ROUTER as API
from .. import wire
from . import views
from .site import NOTICES, PREFIX, Answer, Console, Visit, page, redirect, refuse

__all__ = ["call_api", "api_has", "dead_letter_actions"]

# Why a dead letter is not requeued (the API's `skipped`), in words.
_SKIPPED = {"task": "a task's: its task ended FAILED; submit the work again", "runEnded": "their run has ended",
            "deadlinePassed": "their deadline has passed"}
# Messages picked on a page for one bulk action, at most.
PICKED_MAX = 500
REASON_CHARS_MAX = 256


def _path(*segments: str) -> str:
    return "/" + "/".join(quote(segment, safe="") for segment in segments)


def api_has(method: str, path: str) -> bool:
    """Whether this server serves `method path` (an action is offered only where its route is)."""
    try:
        API.match(method, path)
    except KernelError:
        return False
    return True


async def call_api(console: Console, visit: Visit, method: str, path: str, body: Any = None, query: dict[str, Any] | None = None) -> Any:
    """Run the API route `method path` in process with the session's key; its answer's body, or
    the route's refusal raised as it is (a `KernelError` with the API's code and message).

    On a node of a cluster the route runs where its partition is led: here, or on the leader the
    request is forwarded to (`forward.lead_or_forward`), as any API request that reaches this
    node. It carries an Idempotency-Key, so that a failover while it is under way sends it to the
    next leader rather than answering that it may or may not have been done."""
    session = visit.session
    assert session is not None, "an action needs a session"
    headers = {"authorization": f"Bearer {session.secret}", "content-type": "application/json", "user-agent": "runstate-console"}
    if method != "GET":
        headers["idempotency-key"] = "console-" + os.urandom(12).hex()
    payload = b"" if body is None else orjson.dumps(body)
    request = Request(method, path, headers, payload, visit.client, console.runtime.limits)
    request.query = urlencode({k: v for k, v in (query or {}).items() if v is not None}).encode()
    route, params = API.match(method, path)
    runtime = console.runtime
    cluster = getattr(runtime, "cluster", None)
    number = None if cluster is None else partition_of_request(runtime.kernel, method, route.path, params)
    if number is None:
        status, answer = await route.handler(runtime, request, **params)
        return wire.encode(answer)  # (as a forwarded answer reads: the kernel's views as the wire writes them)
    target = path + ("?" + request.query.decode() if request.query else "")
    answered = await lead_or_forward(cluster, number, method, target, headers, payload, runtime.settings.cluster_forward_wait_s,
                                     lambda: route.handler(runtime, request, **params))
    if not isinstance(answered, Forwarded):
        return answered[1]
    document = orjson.loads(answered.body) if answered.body else None
    if answered.status >= 400:
        error = document.get("error") if isinstance(document, dict) else None
        if not isinstance(error, dict):
            raise ApiError("UNAVAILABLE", f"the partition's leader answered {answered.status}", status=503)
        raise ApiError(str(error.get("code")), str(error.get("message")), status=answered.status)
    return document


def _reason(visit: Visit) -> str | None:
    reason = visit.text("reason")
    if reason is not None and len(reason) > REASON_CHARS_MAX:
        raise refuse(VALIDATION_FAILED, f"a reason is at most {REASON_CHARS_MAX} characters")
    return reason


def _editor_only(visit: Visit, what: str) -> None:
    """Refuse an action's confirmation to a key that may only read: the API would refuse the
    action itself (`Runtime.authorize`), and is still what refuses a forged one. Nor is one
    offered at a past point (the scrubber's `at`): its numbers would be of now, under a banner of then."""
    assert visit.session is not None, "an action needs a session"
    if visit.past is not None:
        raise refuse(VALIDATION_FAILED, f"a page of the past offers no action: go back to now to {what}")
    if not visit.session.may_act:
        raise refuse("FORBIDDEN", f"this API key has the viewer role: it reads this space and cannot {what}", status=403)


def _done(visit: Visit, location: str, notice: str, count: int | None = None) -> Answer:
    """Back to `location`, whose page then says once that the action is done (`site.NOTICES`),
    and how many it did: the notice waits in the session for that page (`Session.notice`), not
    in its URL, so a reload does not say it again."""
    text = NOTICES[notice]
    if count is not None:  # (a dead-letter action: none when another operator did them first)
        text = f"Dead letters {notice}: {count}." if count else f"No dead letter was {notice}: none matches any more."
    visit.signed.notice = (location.partition("?")[0], text)
    return redirect(location)


# -- runs and tasks ------------------------------------------------------------------------------


@page("GET", "/s/{space}/runs/{run_id}/cancel")
async def confirm_cancel_run(console: Console, visit: Visit, space: str, run_id: str) -> Answer:
    _editor_only(visit, "cancel a run")
    data = await views.run(console.kernel, space, run_id)
    if data["run"]["effective"] != "ACTIVE":  # (ended since its page was read: the API would refuse it)
        raise refuse(CONFLICT, f"run {run_id} is already {data['run']['effective'].lower()}: there is nothing to cancel", status=409)
    counts = data["counts"]
    effects = [
        f"{max(0, counts['scopes'].get('ACTIVE', 0) - 1)} run(s) under it end with it",
        f"{counts['tasks'].get('QUEUED', 0) + counts['tasks'].get('RUNNING', 0)} queued or running task(s) are cancelled",
        f"{sum(len(worker['keys']) for worker in data['workers'])} lease(s) held in it end; their holders are told "
        "SCOPE_CANCELLED at their next call",
    ]
    return console.page(visit, "confirm.html", title=f"Cancel run {run_id}", subject=data["run"], effects=effects,
                        action=visit.raw_path, button="Cancel run", reason=False, back=f"{PREFIX}/s/{space}/runs/{run_id}",
                        cursor=data["cursor"])


@page("POST", "/s/{space}/runs/{run_id}/cancel")
async def cancel_run(console: Console, visit: Visit, space: str, run_id: str) -> Answer:
    await call_api(console, visit, "POST", _path("v1", "spaces", space, "scopes", run_id, "cancel"))
    return _done(visit, f"{PREFIX}/s/{space}/runs/{quote(run_id, safe='')}", "run-cancelled")


@page("GET", "/s/{space}/tasks/{task_id}/cancel")
async def confirm_cancel_task(console: Console, visit: Visit, space: str, task_id: str) -> Answer:
    _editor_only(visit, "cancel a task")
    data = await views.task(console.kernel, space, task_id)
    found = data["task"]
    if found["state"] not in ("QUEUED", "RUNNING"):
        raise refuse(CONFLICT, f"task {task_id} already ended {found['state'].lower()}; its outcome does not change", status=409)
    effects = [f"task {found['taskKey']} ({found['state'].lower()}) ends CANCELLED with the reason given, and keeps it"]
    if found["worker"]:
        effects.append(f"{found['worker']} holds it now: its completion is refused from then on")
    return console.page(visit, "confirm.html", title=f"Cancel task {task_id}", subject=found, effects=effects, action=visit.raw_path,
                        button="Cancel task", reason=True, back=f"{PREFIX}/s/{space}/tasks/{task_id}", cursor=data["cursor"])


@page("POST", "/s/{space}/tasks/{task_id}/cancel")
async def cancel_task(console: Console, visit: Visit, space: str, task_id: str) -> Answer:
    body = {} if _reason(visit) is None else {"reason": _reason(visit)}
    await call_api(console, visit, "POST", _path("v1", "spaces", space, "tasks", task_id, "cancel"), body)
    return _done(visit, f"{PREFIX}/s/{space}/tasks/{quote(task_id, safe='')}", "task-cancelled")


# -- claims --------------------------------------------------------------------------------------


def _release_path(space: str, key: str) -> str:
    return _path("v1", "spaces", space, "claims", key, "force-release")


def release_offered() -> bool:
    return api_has("POST", _release_path("s", "k"))


@page("GET", "/s/{space}/claims/release")
async def confirm_release(console: Console, visit: Visit, space: str) -> Answer:
    _editor_only(visit, "release a claim")
    run, key = visit.text("run"), visit.text("key")
    if run is None or key is None:
        raise refuse(VALIDATION_FAILED, "name the claim to release: run and key")
    if not release_offered():
        raise refuse("NOT_FOUND", "this server has no forced release (POST .../claims/{key}/force-release)", status=404)
    data = await views.claims(console.kernel, space, run=run, key=key, holder=None, held_only=False, cursor=None, limit=views.PAGE_MAX)
    found = next((c for c in data["claims"] if c["key"] == key and c["scopeId"] == run), None)
    if found is None:
        raise refuse("NOT_FOUND", f"claim {key!r} not found in run {run!r}")
    if not found["held"]:
        raise refuse(CONFLICT, f"claim {key!r} is not held (generation {found['generation']} was the last): there is nothing to release",
                     status=409)
    effects = [f"the next holder of {key} gets generation {found['generation'] + 1}",
               f"the token of generation {found['generation']} is refused from then on (STALE_CLAIM)"]
    if found["holder"]:
        effects.insert(0, f"{found['holder']} loses the claim now, before its lease ends")
    return console.page(visit, "confirm.html", title=f"Release claim {key}", subject=found, effects=effects,
                        action=visit.here(), button="Release claim", reason=True, back=f"{PREFIX}/s/{space}/claims", cursor=data["cursor"])


@page("POST", "/s/{space}/claims/release")
async def release(console: Console, visit: Visit, space: str) -> Answer:
    run, key = visit.text("run"), visit.text("key")
    if run is None or key is None:
        raise refuse(VALIDATION_FAILED, "name the claim to release: run and key")
    body = {"scopeId": run, **({"reason": _reason(visit)} if _reason(visit) else {})}
    await call_api(console, visit, "POST", _release_path(space, key), body)
    return _done(visit, f"{PREFIX}/s/{space}/claims?{urlencode({'run': run, 'key': key, 'show': 'all'})}", "claim-released")


# -- dead letters --------------------------------------------------------------------------------


def _letters_path(space: str, mailbox_id: str, action: str) -> str:
    return _path("v1", "spaces", space, "mailboxes", mailbox_id, "dead-letters", action)


def dead_letter_actions() -> tuple[str, ...]:
    """The dead-letter actions this server serves (requeue, delete)."""
    return tuple(action for action in ("requeue", "delete") if api_has("POST", _letters_path("s", "m", action)))


def _selection(visit: Visit) -> dict[str, Any]:
    """The dead letters an action is for: the ones picked, or those the filter matches."""
    picked = [m for m in visit.form.get("messageIds", []) + visit.form.get("pick", []) if m]
    if not picked and visit.method == "GET":
        picked = [m for m in (visit.param("messageIds") or "").split(",") if m]
    if len(picked) > PICKED_MAX:
        raise refuse(VALIDATION_FAILED, f"pick at most {PICKED_MAX} dead letters at once, or act on a filter")
    if picked:
        return {"messageIds": picked}
    selection: dict[str, Any] = {}
    if visit.text("reason"):
        selection["reason"] = visit.text("reason")
    older = visit.number("older", 1, 365 * 86_400)
    if older:
        selection["olderThanSeconds"] = older
    return selection or {"all": True}


@page("POST", "/s/{space}/queues/{mailbox_id}/dead-letters/{action}/preview")
async def preview_dead_letters(console: Console, visit: Visit, space: str, mailbox_id: str, action: str) -> Answer:
    """How many dead letters the action would touch (the API's dryRun), then its confirmation."""
    if action not in dead_letter_actions():
        raise refuse("NOT_FOUND", f"this server has no dead-letter {action}", status=404)
    selection = _selection(visit)
    counted = await call_api(console, visit, "POST", _letters_path(space, mailbox_id, action), {**selection, "dryRun": True})
    matched = counted.get("matched", 0)
    what = f"{len(selection['messageIds'])} picked" if "messageIds" in selection else "matching the filter"
    if action == "requeue":
        matched = counted.get("requeued", matched)
        effects = [f"{matched} dead letter(s) {what} go back to the end of their queue, each as a new message with its attempts counted afresh"]
        skipped = {why: n for why, n in (counted.get("skipped") or {}).items() if n}
        if skipped:
            effects.append("skipped, as they cannot go back: " + ", ".join(f"{n} ({_SKIPPED.get(why, why)})" for why, n in skipped.items()))
    else:
        effects = [f"{matched} dead letter(s) {what} are deleted for good, payloads included"]
    if counted.get("remaining"):
        effects.append(f"at most {counted.get('matched', 0) - counted['remaining']} in one action: "
                       f"{counted['remaining']} will remain, to act on again")
    if not matched:  # (none matches, or none can go back: a button to do nothing would be a lie)
        effects[0] = f"no dead letter {what} can go back" if effects[1:] else f"no dead letter {what} is left to {action}"
    return console.page(visit, "confirm.html", title=f"{action.capitalize()} dead letters of mailbox {mailbox_id}",
                        subject={"mailboxId": mailbox_id, **selection}, effects=effects,
                        button=f"{action.capitalize()} {matched}" if matched else None, nothing=f"Nothing to {action}",
                        action=f"{PREFIX}/s/{space}/queues/{quote(mailbox_id, safe='')}/dead-letters/{action}", reason=False,
                        back=f"{PREFIX}/s/{space}/queues/{quote(mailbox_id, safe='')}", selection=selection, matched=matched)


@page("POST", "/s/{space}/queues/{mailbox_id}/dead-letters/{action}")
async def act_on_dead_letters(console: Console, visit: Visit, space: str, mailbox_id: str, action: str) -> Answer:
    if action not in dead_letter_actions():
        raise refuse("NOT_FOUND", f"this server has no dead-letter {action}", status=404)
    answer = await call_api(console, visit, "POST", _letters_path(space, mailbox_id, action), _selection(visit))
    # (how many it did: none when another operator did them between the count and now)
    count = answer.get(f"{action}d") if isinstance(answer, dict) else None
    return _done(visit, f"{PREFIX}/s/{space}/queues/{quote(mailbox_id, safe='')}", f"{action}d", count if isinstance(count, int) else None)

