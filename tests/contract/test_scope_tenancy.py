"""A scope's index is tenant-writable input, never authority: a tenant (an ACL user of
``acl_rules(tenant="acme")``, allowed ``ZADD`` on its own indexes) adds entries naming
another tenant's conversations to its index, and an admin lists and erases the scope.
Nothing of the other tenant's conversation is shown or touched (``DUMP`` of each of its
keys equal before and after); each entry is reported as skipped. A scope erasure that
fails after its tombstone is set says what it wrote (``ScopeErasureIncompleteError``).
An erasure sends no ``SCAN`` (the records set names the idempotency records)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import redis

from redis_msglog import (
    Directory,
    MessageLog,
    ScopeErasedError,
    ScopeErasure,
    ScopeErasureIncompleteError,
    ScopeMismatchError,
    StorageError,
    acl_rules,
)
from redis_msglog._core.lifecycle.scope import ScopeKeys, member
from redis_msglog.testing import EphemeralServer

from ..conftest import REAL_BACKENDS, server_version

PASSWORD = "tenancy-password"
OTHER_SECRET, OTHER_PLAIN = "acme2:secret", "acme2:plain"


@pytest.fixture(params=REAL_BACKENDS)
def server(
    request: pytest.FixtureRequest, private_server: Callable[..., EphemeralServer]
) -> EphemeralServer:
    """A server of the test's own: the test compares every key of a conversation."""
    return private_server(str(request.param))


def tenant_client(server: EphemeralServer, admin: redis.Redis, tenant: str) -> redis.Redis:
    rules = acl_rules("msglog", tenant=tenant, redis_version=server_version(admin))
    admin.execute_command("ACL", "SETUSER", tenant, "reset", "on", f">{PASSWORD}", *rules)
    return redis.Redis(port=server.port, username=tenant, password=PASSWORD)


def dumps(client: redis.Redis, conversation: str) -> dict[bytes, bytes | None]:
    """Every key of ``conversation``'s hash tag and its ``DUMP`` (a private server)."""
    keys = client.scan_iter(match=f"*{{{conversation}}}*", count=1000)
    return {key: client.dump(key) for key in keys}


@pytest.fixture
def poisoned(server: EphemeralServer) -> Iterator[tuple[redis.Redis, dict[str, object]]]:
    """acme's own conversation, acme2's scoped and unscoped ones, and the entries tenant
    acme wrote into its own index naming acme2's: the admin client and what acme2 holds."""
    admin = redis.Redis(port=server.port)
    own = MessageLog(admin, "acme:mine", scope=("acme", "u"))
    own.add("user", "acme's own")
    secret = MessageLog(admin, OTHER_SECRET, scope=("acme2",))
    secret.add("user", "acme2's secret", idempotency_key="k")
    MessageLog(admin, OTHER_PLAIN).add("user", "acme2's unscoped")
    owned = Directory(admin).owner(OTHER_SECRET)
    assert owned is not None
    created = int(owned[1].timestamp() * 1_000_000)
    tenant = tenant_client(server, admin, "acme")
    index = ScopeKeys.build("msglog", ("acme",)).index()
    for listed_scope, conversation in [
        (("acme",), OTHER_SECRET),  # claims acme's scope
        (("acme", "u"), OTHER_SECRET),  # and a sub-scope of it
        (("acme2",), OTHER_SECRET),  # its true scope, in acme's index
        (("acme",), OTHER_PLAIN),  # an unscoped conversation: no owner record
    ]:
        tenant.zadd(index, {member(created, listed_scope, conversation): 0})
    before: dict[str, object] = {c: dumps(admin, c) for c in (OTHER_SECRET, OTHER_PLAIN)}
    before["index"] = admin.zrange(ScopeKeys.build("msglog", ("acme2",)).index(), 0, -1)
    yield admin, before
    admin.close()
    tenant.close()


def untouched(admin: redis.Redis, before: dict[str, object]) -> None:
    for conversation in (OTHER_SECRET, OTHER_PLAIN):
        assert dumps(admin, conversation) == before[conversation], conversation
    assert admin.zrange(ScopeKeys.build("msglog", ("acme2",)).index(), 0, -1) == before["index"]


def test_a_scope_erasure_skips_what_the_owner_records_do_not_put_in_it(
    poisoned: tuple[redis.Redis, dict[str, object]],
) -> None:
    admin, before = poisoned
    erased = Directory(admin).erase(("acme",), erased_for=timedelta(minutes=1))
    assert isinstance(erased, ScopeErasure) and erased == ["acme:mine"]
    assert sorted((s.conversation, s.recorded) for s in erased.skipped) == [
        (OTHER_PLAIN, None),
        (OTHER_SECRET, ("acme2",)),
        (OTHER_SECRET, ("acme2",)),
        (OTHER_SECRET, ("acme2",)),
    ]
    untouched(admin, before)
    assert MessageLog(admin, OTHER_SECRET).count() == 1
    assert MessageLog(admin, "acme:mine").count() == 0


def test_a_listing_shows_only_what_the_owner_records_confirm(
    poisoned: tuple[redis.Redis, dict[str, object]],
) -> None:
    admin, before = poisoned
    directory = Directory(admin)
    page = directory.list(("acme",))
    assert [c.conversation for c in page.conversations] == ["acme:mine"]
    assert sorted(s.conversation for s in page.skipped) == [OTHER_PLAIN, *[OTHER_SECRET] * 3]
    assert "acme2" in next(s for s in page.skipped if s.recorded).reason
    assert [c.conversation for c in directory.walk(("acme",))] == ["acme:mine"]
    untouched(admin, before)


def msglog(port: int, *args: str) -> subprocess.CompletedProcess[str]:
    root = str(Path(__file__).resolve().parents[2])
    return subprocess.run(
        [sys.executable, "-m", "redis_msglog", "--url", f"redis://127.0.0.1:{port}/0", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": root, "PATH": "/usr/bin:/bin"},
        check=False,
    )


def test_msglog_ls_and_erase_of_a_scope_skip_and_report_the_entries(
    poisoned: tuple[redis.Redis, dict[str, object]], server: EphemeralServer
) -> None:
    admin, before = poisoned
    listing = msglog(server.port, "ls", "--scope", "acme", "--json")
    assert listing.returncode == 0, listing.stderr
    assert "acme:mine" in listing.stdout and "acme2" not in listing.stdout
    assert listing.stderr.count("skipped") == 4 and OTHER_SECRET in listing.stderr
    done = msglog(server.port, "erase", "--scope", "acme", "--yes", "--erased-for", "1m")
    assert done.returncode == 0, done.stderr
    assert "1 conversations" in done.stdout
    assert done.stderr.count("skipped") == 4 and "not erased" in done.stderr
    untouched(admin, before)


def test_a_scope_erasure_failing_after_its_tombstone_says_what_it_wrote(
    server: EphemeralServer,
) -> None:
    admin = redis.Redis(port=server.port)
    logs = [MessageLog(admin, f"acme:c{i}", scope=("acme",)) for i in range(3)]
    for log in logs:
        log.add("user", "hi")
    # The second to be erased (newest-created first) has a records key of a wrong type.
    admin.set(logs[1].keys.records, "by hand")
    with pytest.raises(ScopeErasureIncompleteError) as failed:
        Directory(admin).erase(("acme",), erased_for=timedelta(minutes=1))
    error = failed.value
    assert not isinstance(error, StorageError) and "Nothing was written" not in str(error)
    assert error.erased == [logs[2].conversation] and logs[2].conversation in str(error)
    tombstone = ScopeKeys.build("msglog", ("acme",)).tombstone()
    assert error.tombstone == tombstone and tombstone in str(error)
    assert admin.exists(tombstone) == 1
    assert isinstance(error.__cause__, StorageError)  # the failure itself
    assert logs[0].count() == 1 and logs[1].count() == 1  # the rest untouched


def test_a_scope_erasure_whose_listing_fails_says_the_tombstone_was_set(
    server: EphemeralServer,
) -> None:
    admin = redis.Redis(port=server.port)
    log = MessageLog(admin, "acme:c", scope=("acme",))
    log.add("user", "hi")
    admin.set(log.keys.seq, "garbled")  # the listing cannot read its last seq
    with pytest.raises(ScopeErasureIncompleteError, match="tombstone") as failed:
        Directory(admin).erase(("acme",), erased_for=timedelta(minutes=1))
    assert failed.value.erased == [] and "Nothing was written" not in str(failed.value)
    assert admin.exists(failed.value.tombstone) == 1


def test_an_erasure_of_a_conversation_with_records_sends_no_scan(server: EphemeralServer) -> None:
    admin = redis.Redis(port=server.port)
    for i in range(2000):  # a keyspace to scan, were it scanned
        admin.set(f"other:{i}", "x")
    log = MessageLog(admin, "acme:keyed", scope=("acme",))
    for i in range(5):
        log.add("user", f"m{i}", idempotency_key=f"k{i}")
    MessageLog(admin, "acme:plain", scope=("acme",)).add("user", "no key")
    admin.config_resetstat()
    log.erase()
    assert Directory(admin).erase(("acme",)) == ["acme:plain"]
    stats = admin.info("commandstats")
    assert "cmdstat_scan" not in stats, stats.get("cmdstat_scan")
    left = sorted(admin.scan_iter(match="*{acme:keyed}*"))
    assert left == [log.keys.seq.encode()]  # the tombstone alone: every record went


def gone(admin: redis.Redis, *keys: str, within: float = 5.0) -> None:
    """Wait until none of ``keys`` exists (a tombstone's expiry)."""
    deadline = time.monotonic() + within
    while admin.exists(*keys) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert admin.exists(*keys) == 0


def test_a_worker_kept_across_its_scopes_erasure_writes_only_into_its_scope(
    server: EphemeralServer,
) -> None:
    """A log object made before its scope's erasure and used after: refused while the
    tombstones stand, then its conversation registered again (owner record, listed)
    before its first write lands, appends and edits alike, exactly once."""
    admin = redis.Redis(port=server.port)
    worker = MessageLog(admin, "acme:w", scope=("acme", "u"))
    editor = MessageLog(admin, "acme:e", scope=("acme", "u"))
    worker.add("user", "before", idempotency_key="first")
    editor.add("user", "before")
    assert Directory(admin).erase(("acme",), erased_for=timedelta(seconds=1)) == [
        "acme:e",
        "acme:w",
    ]
    with pytest.raises(ScopeErasedError, match="Nothing was written"):
        worker.add("user", "during")
    with pytest.raises(ScopeErasedError):
        editor.set_attrs({"title": "during"})
    tombstone = ScopeKeys.build("msglog", ("acme",)).tombstone()
    gone(admin, tombstone, worker.keys.seq, editor.keys.seq)
    assert worker.add("user", "after", idempotency_key="k") == 1
    assert worker.add("user", "after", idempotency_key="k") == 1  # a replay: written once
    assert worker.add("user", "more") == 2
    editor.set_attrs({"title": "after"})  # an edit is the first write: registered too
    directory = Directory(admin)
    for log in (worker, editor):
        owned = directory.owner(log.conversation)
        assert owned is not None and owned[0] == ("acme", "u"), log.conversation
    listed = sorted(c.conversation for c in directory.list(("acme",)).conversations)
    assert listed == ["acme:e", "acme:w"]
    assert [m.content for m in worker.all()] == ["after", "more"]
    MessageLog(admin, "acme:w", scope=("acme", "u")).add("user", "a new worker")  # no mismatch
    assert directory.erase(("acme",)) == ["acme:e", "acme:w"]  # reached by the next erasure


def test_a_scoped_write_whose_owner_record_names_another_scope_is_refused(
    server: EphemeralServer,
) -> None:
    admin = redis.Redis(port=server.port)
    log = MessageLog(admin, "acme:x", scope=("acme", "u"))
    log.add("user", "hi")
    admin.hset(log.keys.owner, "scope", "acme/v")  # changed under the log object
    with pytest.raises(ScopeMismatchError, match="Nothing was written") as refused:
        log.add("user", "again")
    assert refused.value.recorded == ("acme", "v") and log.count() == 1
