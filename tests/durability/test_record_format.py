"""Record format v1: one registry of record types checked on both sides of the disk, a version in
every file header, and a data directory of version 0 (the format before it had a number) upgraded
on its first start and served as it was written (`fixtures/v0`, made by `fixtures/make_v0.py`)."""

from __future__ import annotations

import ast
import copy
import itertools
import json
import logging
import os
import shutil

import pytest
import trio
import trio.testing

from runstate.actors import Clock, KernelState
from runstate.actors.layout import Layout
from runstate.actors.records import FIELDS, VERSION, RecordError, check_record, upgrade
from runstate.actors.space import RECORD_TYPES
from runstate.server.runtime import Runtime
from runstate.server.settings import Settings
from runstate.snapshots import contents
from runstate.snapshots.datadir import DataDirError, Manifest, load_partition, partition_dir, read_manifest
from runstate.snapshots.recovery import file_versions, list_segments, snapshot_dir, wal_dir
from runstate.snapshots.snapshot import list_snapshots, load_snapshot
from tests.server.asgi_client import AsgiClient

from .helpers import MODEL, T0_MS, check, reload, running

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")
ANSWERS = json.load(open(os.path.join(FIXTURES, "v0-answers.json")))
SPACE = "default"


def written_contents() -> dict:
    """The state the version-0 server read back from its directory, as it wrote it down."""
    with open(os.path.join(FIXTURES, "v0-contents.txt")) as file:
        return ast.literal_eval(file.read())


def with_tables_added_since(written: dict) -> dict:
    """`written` with the tables a space has gained since the version-0 server wrote its contents
    down (once slots, run names, capacity, coordination, the event log), as an empty space has them:
    a directory it wrote holds none of their records."""
    from runstate.actors import Limits
    from runstate.actors.space import SpaceState

    empty = contents(SpaceState("default", Limits()), False)  # as a space inside a state
    for space in written["spaces"].values():
        for name, value in empty.items():
            space.setdefault(name, copy.deepcopy(value))
        with_counts_added_since(space)
    # Stored answers were kept in one table for the whole server; each space keeps its own now.
    for (space_id, key), stored in written.pop("idempotency")["_entries"]:
        written["spaces"][space_id]["idempotency"]["_entries"].append((key, stored))
    with_answer_sizes_added_since(written)
    with_fields_added_since(written)
    with_roles_added_since(written)
    return written


def with_answer_sizes_added_since(written: dict) -> None:
    """The bytes each stored answer counts for against its space's byte cap, and their sum per
    space, kept since the answers count against it: the JSON of the answer as it was written."""
    from runstate.actors.caps import value_bytes

    for space in written["spaces"].values():
        table = space["idempotency"]
        table["bytes"] = 0
        for _, stored in table["_entries"]:
            stored["size"] = value_bytes(stored["body"])
            table["bytes"] += stored["size"]


# The fields an entity has gained since the older formats wrote it down, with the value an entity
# read from one of them takes: `graced` (record format 2: a restart gave the lease its grace), a
# message's `returned` deliveries, a once slot's `released` acquisitions (given back unused) and
# an allowance's `recent` consumptions (refundable).
FIELDS_ADDED_SINCE = {
    "Claim": {"graced": False},
    "Grant": {"graced": False},
    "Message": {"graced": False, "returned": 0},
    "Slot": {"graced": False, "released": 0},
    "Allowance": {"recent": {}},
}


def with_fields_added_since(node: object) -> None:
    """Every entity of `node` with the fields added since (`FIELDS_ADDED_SINCE`), as an entity of
    an older format reads back."""
    if isinstance(node, dict):
        for name, value in FIELDS_ADDED_SINCE.get(node.get("__class__"), {}).items():  # type: ignore[arg-type]
            node.setdefault(name, copy.deepcopy(value))
        for value in node.values():
            with_fields_added_since(value)
    elif isinstance(node, (list, tuple)):
        for value in node:
            with_fields_added_since(value)


def with_roles_added_since(written: dict) -> None:
    """A key's role (`actors/keys.py`), added since as an optional field of `key.registered`: a
    key written without one reads back as an editor, the role every key had then."""
    table = written["keys"]
    for key in (*table["_by_digest"].values(), *table["_by_id"].values()):
        assert "role" not in key, key
        key["role"] = "editor"


def with_counts_added_since(space: dict) -> None:
    """The counts behind a space's caps (`actors/caps.py`), which the tables have gained since,
    worked out from what the version-0 server wrote down as the tables rebuild them, and the
    mailbox settings added since, as a mailbox written then reads back."""
    from runstate.actors.caps import value_bytes
    from runstate.actors.tasks import TERMINAL

    tree = space["scopes"]
    for scope in tree["_scopes"].values():  # parents first (creation order)
        parent = tree["_scopes"].get(scope["parent_id"]) if scope["parent_id"] else None
        scope.setdefault("live", scope["stored_state"] == "ACTIVE" and (parent is None or parent["live"]))
    tree.setdefault("live", sum(scope["live"] for scope in tree["_scopes"].values()))
    with_ended_runs_added_since(space)
    tasks = space["tasks"]["_by_id"].values()
    space["tasks"].setdefault("live", sum(task["state"] not in TERMINAL for task in tasks))
    space["tasks"].setdefault("outcome_bytes", sum(value_bytes(task["outcome"]) for task in tasks))
    messages = space["messages"]
    messages.setdefault("payload_bytes", sum(value_bytes(m["payload"]) for m in messages["_messages"].values()))
    for table in (space["mailboxes"], messages["_mailboxes"]):  # wherever a mailbox is held
        for mailbox in (*table["_by_id"].values(), *table["_by_name"].values()):
            # Settings declared by name came later: a mailbox written before declared its attempts.
            mailbox.setdefault("attempts_declared", True)
            mailbox.setdefault("requirements", None)


def with_ended_runs_added_since(space: dict) -> None:
    """The ended runs (root scopes) a tree keeps, for their retention (`actors/runs.py`), which it
    has gained since: worked out from the scopes it wrote down."""
    tree = space["scopes"]
    ended = {s["id"]: s["ended_ms"] for s in tree["_scopes"].values() if s["parent_id"] is None and s["stored_state"] != "ACTIVE"}
    tree.setdefault("ended_roots", ended)


def assert_as_written(actual: dict) -> None:
    """The state the version-0 server wrote, table by table; its event log is derived from the
    same records as they are read (it had none), so it is checked to be there, not compared."""
    for space in actual["spaces"].values():
        assert space.pop("events")["seq"] > 0
    expected = with_tables_added_since(written_contents())
    for space in expected["spaces"].values():
        space.pop("events", None)
    assert actual == expected


def copy_of_v0(tmp_path) -> str:
    data = str(tmp_path / "data")
    shutil.copytree(os.path.join(FIXTURES, "v0"), data)
    return data


# -- the registry -------------------------------------------------------------------------------


def test_the_registry_names_every_record_type_the_state_applies():
    """Nothing applies a record the registry does not know, and the registry knows nothing extra."""
    kernel_wide = {"kernel.booted", "key.registered", "key.revoked"}
    assert set(FIELDS) == set(RECORD_TYPES) | kernel_wide


def test_every_field_name_is_snake_case_with_units_last():
    for kind, (required, allowed, exact) in FIELDS.items():
        assert exact == (required == allowed)
        assert required <= allowed and "type" in required
        for name in allowed:
            assert name == name.lower() and " " not in name, (kind, name)
            assert not name.startswith(("ms_", "s_")), (kind, name)


def test_a_record_with_a_missing_an_unknown_or_a_misspelled_field_is_refused():
    good = {"type": "claim.renewed", "space": "s", "token": "t", "lease_ms": 1, "expires_ms": 2, "at_ms": 0}
    check_record(good)
    with pytest.raises(RecordError, match="missing \\['token'\\]"):
        check_record({key: value for key, value in good.items() if key != "token"})
    with pytest.raises(RecordError, match="unknown \\['leaseMs'\\]"):
        check_record({**good, "leaseMs": 1})
    with pytest.raises(RecordError, match="unknown record type"):
        check_record({"type": "claim.stolen"})
    with pytest.raises(RecordError):
        check_record(["claim.renewed"])
    check_record({"type": "claim.released", "space": "s", "token": "t", "key": "k", "generation": 1, "at_ms": 0,
                  "observation": {"anyThing": "kept as given"}})


def test_a_checked_order_of_names_passes_only_for_the_type_it_was_checked_for():
    """The check remembers the orders of names it accepted, by type: the same names in the same
    order under another type are still checked against that type's fields, and a full memory
    starts over without accepting anything it would not."""
    from runstate.actors import records

    released = {"type": "claim.released", "space": "s", "token": "t", "key": "k", "generation": 1, "at_ms": 0}
    for _ in range(2):
        check_record(released)
    assert "claim.released" in records._SEEN[tuple(released)]
    with pytest.raises(RecordError, match="a claim.renewed record: missing \\['expires_ms', 'lease_ms'\\]"):
        check_record({**released, "type": "claim.renewed"})
    with pytest.raises(RecordError, match="unknown record type"):
        check_record({**released, "type": "claim.stolen"})
    with pytest.raises(RecordError):
        check_record(list(released))
    observed = {**released, "observation": None}
    orders = itertools.islice(itertools.permutations(observed), records.SEEN_MAX + 10)
    for count, names in enumerate(orders):  # orders enough to fill the memory, each accepted
        check_record({name: observed[name] for name in names})
        if count % 1000 == 0:
            with pytest.raises(RecordError, match="unknown \\['x'\\]"):
                check_record({**{name: observed[name] for name in names}, "x": 1})
    assert len(records._SEEN) <= records.SEEN_MAX
    check_record(released)


def test_version_0_names_are_renamed_and_a_callers_values_are_not():
    v0 = {"type": "message.sent", "space": "s", "id": "ms_1", "mailboxId": "mb_1", "scopeId": "sc_1",
          "payload": {"scopeId": "mine", "workKey": "also mine"}, "payloadHash": "h", "workKey": "wk",
          "deadline_ms": None, "at_ms": 5}
    v1 = upgrade(v0, 0)
    check_record(v1)
    assert v1 == {"type": "message.sent", "space": "s", "id": "ms_1", "mailbox_id": "mb_1", "scope_id": "sc_1",
                  "payload": {"scopeId": "mine", "workKey": "also mine"}, "payload_hash": "h", "work_key": "wk",
                  "deadline_ms": None, "at_ms": 5}
    assert upgrade(v1, VERSION) is v1
    with pytest.raises(RecordError, match="not one this server reads"):
        upgrade(v1, VERSION + 1)


@pytest.mark.trio
async def test_the_journal_refuses_a_record_the_format_does_not_know(tmp_path, autojump_clock):
    """Checked before it is written: the change is refused, nothing reaches the disk."""
    data = str(tmp_path)
    async with running(data) as run:
        journal = run.store.journal
        written = journal.durable_lsn
        answers = []
        journal.append([{"type": "key.revoked", "id": "ak_1", "at_ms": 1, "keyId": "ak_1"}], answers.append)
        assert len(answers) == 1 and isinstance(answers[0], RecordError)
        assert journal.failure is answers[0] and journal.durable_lsn == written


# -- the version-0 directory --------------------------------------------------------------------


def test_check_says_a_version_0_directory_is_upgraded_by_a_start(tmp_path):
    data = copy_of_v0(tmp_path)
    report = check(data)
    assert report.ok, report.format()
    assert report.versions == {0: 2} and report.version == VERSION and report.partition_count is None
    assert (
        f"record format: version 0 (2 file(s)); a start upgrades the directory to partitions of version {VERSION}"
        in report.format()
    )
    assert file_versions(data) == {path: 0 for path in [*file_versions(data)]}  # check changed nothing


def test_a_version_0_directory_reads_back_exactly_as_it_was_written(tmp_path):
    """Snapshot and WAL upgraded record by record: the same state the version-0 server read."""
    loaded = reload(copy_of_v0(tmp_path))
    assert loaded.versions == {0} and loaded.snapshot_lsn == ANSWERS["snapshot_lsn"] and loaded.records == 30
    assert_as_written(contents(loaded.state))


def merged(data: str) -> KernelState:
    """Every partition of an upgraded directory read back into one state (keys, boot and spaces),
    as the directory held them before it was split: what it was written as, to compare."""
    manifest = read_manifest(data)
    assert manifest is not None
    state = KernelState()
    for number in manifest.numbers():
        [(_, path)] = list_snapshots(snapshot_dir(partition_dir(data, number)))
        load_snapshot(path, state.apply, MODEL.records, number)
    return state


async def _start_and_serve(data: str, api_key: str, serve, **settings) -> Runtime:  # type: ignore[no-untyped-def]
    settings.setdefault("space_id", SPACE)
    runtime = Runtime(Settings(data_dir=data, api_key=api_key, seed=3, **settings), clock=Clock(wall_anchor_ms=T0_MS + 60_000))
    async with trio.open_nursery() as nursery:
        await nursery.start(runtime.run)
        while not runtime.ready:
            assert runtime.fatal is None, runtime.fatal
            await trio.sleep(0.01)
        await serve(runtime)
        nursery.cancel_scope.cancel()
    return runtime


def _upgraded(caplog, data: str, old_files: set, partitions: int, version: int, lsn: int) -> None:
    """The start logged the upgrade once, removed every old file, and left a snapshot at the old
    log's end in each partition, then a WAL after it: a directory of the current format."""
    upgrade_lines = [record for record in caplog.records if getattr(record, "event", None) == "upgrade"]
    assert len(upgrade_lines) == 1
    message = upgrade_lines[0].getMessage()
    assert f"from record format {version}, one journal, to {partitions} partition(s) of record format {VERSION}" in message
    assert not any(os.path.exists(path) for path in old_files)
    assert not os.path.exists(wal_dir(data)) and not os.path.exists(snapshot_dir(data))
    assert read_manifest(data) == Manifest(partitions)
    for number in range(partitions + 1):
        folder = partition_dir(data, number)
        assert [found for found, _ in list_snapshots(snapshot_dir(folder))] == [lsn]
        assert [found for found, _ in list_segments(wal_dir(folder))] == [lsn + 1]
    report = check(data)
    assert report.ok and report.versions == {VERSION: 2 * (partitions + 1)} and "a start upgrades" not in report.format()


@pytest.mark.trio
async def test_a_version_0_directory_is_upgraded_on_its_first_start_and_serves(tmp_path, caplog):
    """The first start splits the directory into partitions in the current format (and says so),
    then serves what was written: claims renew with their tokens, the delivery still leased renews,
    outcomes read back, a work key and an Idempotency-Key answer as before, a revoked key stays
    revoked."""
    data = copy_of_v0(tmp_path)
    old_files = set(file_versions(data))
    caplog.set_level(logging.INFO, logger="runstate.snapshots")

    async def serve(runtime: Runtime) -> None:
        client = AsgiClient(runtime, api_key=ANSWERS["api_key"], space=SPACE)
        client._keys = 1 << 40  # its Idempotency-Keys count on from where the fixture's left off
        await _served_as_written(client)

    # One minute after the last record: the leases of 600 s are alive and get their grace.
    runtime = await _start_and_serve(data, ANSWERS["api_key"], serve)
    assert runtime.data is not None and runtime.data.upgraded_from == [0]
    _upgraded(caplog, data, old_files, 1, 0, 64)
    # The snapshots the upgrade wrote hold exactly the state that was written.
    assert_as_written(contents(merged(data)))


async def _served_as_written(client: AsgiClient) -> None:
    scopes, tasks = ANSWERS["scopes"], ANSWERS["tasks"]
    renewed = await client.post("/claims/k-held/renew", {"token": ANSWERS["held_token"]})
    assert renewed.status == 200 and renewed.json["generation"] == ANSWERS["held_generation"], renewed
    assert (await client.post("/claims/k-late/renew", {"token": ANSWERS["late_token"]})).status == 200
    listed = await client.get(f"/scopes/{scopes['alpha']}/claims")
    assert listed.status == 200, listed
    held = {claim["key"] for claim in listed.json["claims"]}  # the claims whose leases run
    assert held == {"k-held", "k-renewed", "k-late"}
    # A new holder of a released key gets the next generation: the counter came through.
    again = await client.post("/claims", {"scopeId": scopes["alpha"], "key": "k-released", "holder": "agent-2",
                                          "holderSession": "s2", "leaseSeconds": 30})
    assert again.status == 200 and again.json["generation"] == 2, again

    done = await client.get(f"/tasks/{tasks['done']}")
    assert done.json["state"] == "SUCCEEDED" and done.json["outcome"] == {"answer": 42}
    queued = await client.get(f"/tasks/{tasks['queued']}")
    assert queued.json["state"] == "QUEUED" and queued.json["subscribers"] == ["sub-1", "sub-2"]
    cancelled = await client.get(f"/tasks/{tasks['cancelled']}")
    assert cancelled.json["state"] == "CANCELLED" and cancelled.json["outcomeReason"] == "not needed"
    leased = await client.get(f"/tasks/{tasks['leased']}")
    assert leased.json["state"] == "RUNNING"
    renew = await client.post(f"/messages/{ANSWERS['leased_message']}/renew", {"token": ANSWERS["leased_token"]})
    assert renew.status == 200, renew

    mailbox = await client.get(f"/mailboxes/{ANSWERS['mailbox']}")
    assert mailbox.json["maxAttempts"] == 3 and mailbox.json["backlogLimit"] == 100
    send = f"/mailboxes/{ANSWERS['mailbox']}/messages"
    # The same bytes as the first time (the fingerprint covers the body as sent, keys in order).
    sent = ANSWERS["send_body"]
    body = {"scopeId": sent["scopeId"], "payload": sent["payload"], "workKey": sent["workKey"]}
    replayed = await client.post(send, body, idempotency_key=ANSWERS["send_idempotency_key"])
    assert replayed.json == ANSWERS["send_answer"]  # the stored answer, byte for byte the same JSON
    by_work_key = await client.post(send, body)
    assert by_work_key.json["replay"] is True and by_work_key.json["id"] == ANSWERS["send_answer"]["id"]
    assert (await client.get(f"/scopes/{scopes['cancelled']}")).json["storedState"] == "CANCELLED"
    assert (await client.get(f"/scopes/{scopes['child']}")).json["parentId"] == scopes["alpha"]
    assert (await client.get(f"/scopes/{scopes['child']}")).json["childLimit"] == 4
    revoked = AsgiClient(client.runtime, api_key="rs_fixture_other_key", space="other")
    assert (await revoked.get(f"/scopes/{scopes['alpha']}")).status == 401


def test_a_second_start_does_not_upgrade_again(tmp_path, caplog):
    """After the upgrade the directory is of the current format: nothing is rewritten."""

    async def start_twice() -> None:
        data = copy_of_v0(tmp_path)
        for _ in range(2):
            runtime = await _start_and_serve(data, ANSWERS["api_key"], _nothing)
        manifest = read_manifest(data)
        for number in manifest.numbers():
            reloaded = load_partition(data, MODEL, number).state
            assert contents(reloaded)["spaces"].keys() == {
                space for space in ("default",) if Layout(manifest.partitions).of(space) == number
            }
        assert runtime.data is not None and runtime.data.upgraded_from == []

    caplog.set_level(logging.INFO, logger="runstate.snapshots")
    trio.run(start_twice, clock=trio.testing.MockClock(autojump_threshold=0))
    assert sum(getattr(record, "event", None) == "upgrade" for record in caplog.records) == 1


async def _nothing(runtime: Runtime) -> None:
    pass


def test_a_crash_before_the_manifest_starts_the_upgrade_again_and_one_after_finishes_it(tmp_path, caplog):
    """The partitions' snapshots are made before the manifest and the old files are deleted only
    after it is durable: a start that finds half-made partitions and no manifest starts over from
    the old files; one that finds the manifest and old files left deletes them, rewriting nothing."""
    from runstate.snapshots import datadir

    caplog.set_level(logging.INFO, logger="runstate.snapshots")
    before = copy_of_v0(tmp_path / "before")
    os.makedirs(snapshot_dir(partition_dir(before, 1)))
    with open(os.path.join(snapshot_dir(partition_dir(before, 1)), "00000000000000000064.snap"), "wb") as file:
        file.write(b"half written")
    trio.run(_start_and_serve, before, ANSWERS["api_key"], _nothing, clock=trio.testing.MockClock(autojump_threshold=0))
    assert_as_written(contents(merged_at(before, 64)))

    after = copy_of_v0(tmp_path / "after")
    removed: list = []
    real_remove = datadir._remove_old_layout
    datadir._remove_old_layout = lambda *args: removed.append(args)  # the crash: nothing deleted yet
    try:
        trio.run(_start_and_serve, after, ANSWERS["api_key"], _nothing, clock=trio.testing.MockClock(autojump_threshold=0))
    finally:
        datadir._remove_old_layout = real_remove
    assert removed and set(file_versions(after).values()) == {0}, "the old files are still there"
    trio.run(_start_and_serve, after, ANSWERS["api_key"], _nothing, clock=trio.testing.MockClock(autojump_threshold=0))
    assert not os.path.exists(wal_dir(after)) and not os.path.exists(snapshot_dir(after))
    assert sum(getattr(record, "event", None) == "upgrade" for record in caplog.records) == 2
    assert_as_written(contents(merged_at(after, 64)))


def merged_at(data: str, lsn: int) -> KernelState:
    """The partitions' snapshots at `lsn` (the upgrade's) read back into one state."""
    state = KernelState()
    for number in read_manifest(data).numbers():
        load_snapshot(os.path.join(snapshot_dir(partition_dir(data, number)), f"{lsn:020d}.snap"), state.apply, MODEL.records, number)
    return state


# -- the version-1 directory: two spaces, keys and every kind of record, split into partitions --


V1 = json.load(open(os.path.join(FIXTURES, "v1-answers.json")))


def copy_of_v1(tmp_path) -> str:
    data = str(tmp_path / "data-v1")
    shutil.copytree(os.path.join(FIXTURES, "v1"), data)
    return data


def test_a_version_1_directory_reads_back_exactly_as_it_was_written(tmp_path):
    """The last format before partitions: the state it read back, table by table, with each
    space's stored answers now its own (they were one table of the whole server)."""
    loaded = reload(copy_of_v1(tmp_path))
    assert loaded.versions == {1} and loaded.snapshot_lsn == V1["snapshot_lsn"]
    assert contents(loaded.state) == v1_as_written()


def v1_as_written() -> dict:
    from runstate.actors import Limits
    from runstate.actors.space import SpaceState

    with open(os.path.join(FIXTURES, "v1-contents.txt")) as file:
        written = ast.literal_eval(file.read())
    empty = contents(SpaceState("default", Limits()), False)["idempotency"]
    for space in written["spaces"].values():
        space["idempotency"] = copy.deepcopy(empty)
    for (space_id, key), stored in written.pop("idempotency")["_entries"]:
        written["spaces"][space_id]["idempotency"]["_entries"].append((key, stored))
    with_answer_sizes_added_since(written)
    with_fields_added_since(written)
    with_roles_added_since(written)
    for space in written["spaces"].values():
        with_ended_runs_added_since(space)
    with_delivery_events_as_kept_since(written)
    with_release_events_as_kept_since(written)
    return written


def with_release_events_as_kept_since(written: dict) -> None:
    """A release's event has carried its observation (`observation`, `observationBytes`) since the
    version-1 server wrote its contents down. Those its snapshot holds read back as it wrote them
    (a dict of the generation alone); the WAL's are made anew, and make_v1.py's releases give none."""
    imaged = KernelState()
    load_snapshot(os.path.join(FIXTURES, "v1", "snapshots", f"{V1['snapshot_lsn']:020d}.snap"), imaged.apply, MODEL.records)
    for space_id, space in written["spaces"].items():
        kept = imaged.spaces[space_id].events.seq
        for index, change in enumerate(space["events"]["_changes"]):
            if change[0] == "claim.released":
                [generation] = change[4]
                change[4] = {"generation": generation} if index < kept else [generation, None, None]


def with_delivery_events_as_kept_since(written: dict) -> None:
    """A delivery's events have carried the holder of its lease, and a lease's event the attempt it
    starts (1 for the first, as the task view numbers it), since the version-1 server wrote its
    contents down. The events its snapshot holds read back as the snapshot wrote them (a dict of
    messageId, mailboxId and attempt); the WAL's are made anew as it replays: after the snapshot,
    the only delivery is the lease of `leased_message`, by "w" (make_v1.py), its first attempt."""
    imaged = KernelState()
    load_snapshot(os.path.join(FIXTURES, "v1", "snapshots", f"{V1['snapshot_lsn']:020d}.snap"), imaged.apply, MODEL.records)
    for space_id, space in written["spaces"].items():
        kept = imaged.spaces[space_id].events.seq
        for index, change in enumerate(space["events"]["_changes"]):
            kind, payload = change[0], change[4]
            if PAYLOAD_NAMES_BEFORE.get(kind) is None:
                continue
            if index < kept:
                change[4] = dict(zip(PAYLOAD_NAMES_BEFORE[kind], payload))
            else:
                assert kind == "task.started" and payload[0] == V1["spaces"][space_id]["leased_message"], change
                change[4] = [payload[0], payload[1], 1, "w"]


# The payloads of a delivery's events as the version-1 server kept them (a tuple), by event type.
PAYLOAD_NAMES_BEFORE = {
    **dict.fromkeys(("task.started", "delivery.leased", "task.succeeded", "delivery.completed"), ("messageId", "mailboxId", "attempt")),
    **dict.fromkeys(("task.retried", "delivery.requeued"), ("messageId", "mailboxId", "attempt", "cause")),
}


@pytest.mark.trio
@pytest.mark.parametrize("partitions", [1, 4])
async def test_a_version_1_directory_is_split_into_partitions_and_serves_every_space(tmp_path, caplog, partitions):
    """Started with --partitions 4 (or the default 1): each space lands in its own partition, the
    keys in the system one, and everything serves as written: held claims and pool grants renew
    with their tokens, a released key's next holder gets generation 2 (the counters came through
    in every partition), leased deliveries renew, outcomes read back, a stored answer replays, the
    other space's key still opens only its space, a revoked key stays revoked."""
    data = copy_of_v1(tmp_path)
    old_files = set(file_versions(data))
    caplog.set_level(logging.INFO, logger="runstate.snapshots")
    lsn = int(max(os.path.basename(path).split(".")[0] for path in old_files if path.endswith(".snap")))
    lsn = max(lsn, reload(data).last_lsn)

    async def serve(runtime: Runtime) -> None:
        kernel = runtime.kernel
        assert kernel is not None and kernel.layout.count == partitions
        for space_id, got in V1["spaces"].items():
            key = V1["api_key"] if space_id == "default" else V1["research_key"]
            client = AsgiClient(runtime, api_key=key, space=space_id)
            client._keys = 1 << 40
            assert space_id in kernel.partition_of(space_id).state.spaces
            renewed = await client.post("/claims/k-held/renew", {"token": got["held_token"]})
            assert renewed.status == 200 and renewed.json["generation"] == got["held_generation"], renewed
            assert (await client.post("/claims/k-late/renew", {"token": got["late_token"]})).status == 200
            again = await client.post("/claims", {"scopeId": got["run"], "key": "k-released", "holder": "b",
                                                  "holderSession": "b", "leaseSeconds": 30})
            assert again.status == 200 and again.json["generation"] == 2, again
            grant = await client.post(f"/grants/{got['grant']}/renew", {"token": got["grant_token"]})
            assert grant.status == 200, grant
            delivery = await client.post(f"/messages/{got['leased_message']}/renew", {"token": got["leased_token"]})
            assert delivery.status == 200, delivery
            done = await client.get(f"/tasks/{got['done_task']}")
            assert done.json["state"] == "SUCCEEDED" and done.json["outcome"] == {"answer": 42}
            assert (await client.get(f"/scopes/{got['ended']}")).json["storedState"] == "CANCELLED"
            other = "research" if space_id == "default" else "default"
            stranger = AsgiClient(runtime, api_key=key, space=other)
            assert (await stranger.get(f"/scopes/{V1['spaces'][other]['run']}")).status == 404
        client = AsgiClient(runtime, api_key=V1["api_key"], space="default")
        client._keys = 1 << 41
        sent = V1["send_body"]  # the same bytes as the first time: its keys in the order they were sent
        body = {"scopeId": sent["scopeId"], "payload": sent["payload"], "workKey": sent["workKey"]}
        replayed = await client.post(f"/mailboxes/{V1['spaces']['default']['mailbox']}/messages", body,
                                     idempotency_key=V1["send_idempotency_key"])
        assert replayed.json == V1["send_answer"]
        revoked = AsgiClient(runtime, api_key="rs_fixture_v1_revoked", space="default")
        assert (await revoked.get(f"/scopes/{V1['spaces']['default']['run']}")).status == 401

    runtime = await _start_and_serve(data, V1["api_key"], serve, partitions=partitions)
    assert runtime.data is not None and runtime.data.upgraded_from == [1]
    _upgraded(caplog, data, old_files, partitions, 1, lsn)
    merged_state = merged(data)
    assert contents(merged_state)["spaces"] == v1_as_written()["spaces"]
    assert contents(merged_state)["keys"] == v1_as_written()["keys"]


def test_a_directory_keeps_the_partition_count_it_was_made_with(tmp_path):
    """A start that asks for another count is refused, naming the count the directory has."""
    data = copy_of_v1(tmp_path)
    trio.run(_start_and_serve, data, V1["api_key"], _nothing, clock=trio.testing.MockClock(autojump_threshold=0))

    async def start() -> Runtime:
        runtime = Runtime(Settings(data_dir=data, api_key=V1["api_key"], partitions=8), clock=Clock(wall_anchor_ms=T0_MS))
        async with trio.open_nursery() as nursery:
            await nursery.start(runtime.run)
            await runtime.stopped.wait()
        return runtime

    runtime = trio.run(start, clock=trio.testing.MockClock(autojump_threshold=0))
    assert isinstance(runtime.fatal, DataDirError) and "was made with 1 partition(s)" in str(runtime.fatal)
