"""Two tenants in one prefix, generated: tenant ``acme`` runs every public operation of
the log, the ``msglog`` commands (in-process, its credentials in the URL) and the
``Directory`` calls against tenant ``beta``'s conversation, scope and ids (generated ids
with glob characters, ``:``, ``/``, braces and unicode). Each is refused with a typed
error (a :class:`MessageLogError`, or one ``msglog:`` line and exit status 1); nothing of
``beta``'s is written (``DUMP`` of its keys unchanged, no key outside ``acme``'s), read,
listed or learned (its secret appears in no output).

A server of this module's own, emptied before every example (the check lists every key).
The budget is fixed (``derandomize=True``, a fixed ``max_examples``): hypothesis prints
the failing example, which reproduces it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, cast
from urllib.parse import quote

import httpx
import orjson
import pytest
import redis
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from redis_msglog import Directory, MessageLog, MessageLogError, acl_rules_for
from redis_msglog._cli import main
from redis_msglog.testing import EphemeralServer

pytestmark = pytest.mark.hostile

PASSWORD = "tenant-isolation"
SECRET = "beta-secret-7f3a"  # in every message and attribute of beta's
DRAFT = "b" * 32  # beta's draft in progress (its id known to acme: the worst case)


def budget(examples: int) -> settings:
    """A fixed budget (the three suites: ~30 s on one core), the same examples every run."""
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        print_blob=True,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


TEXT = st.text(
    st.one_of(
        st.sampled_from("*?[]\\:/{}%-_. é€😀"),
        st.characters(exclude_categories=["Cs", "Cc"]),
    ),
    max_size=10,
)
# beta's conversation: its tenant's ids start with "beta:".
BETA_IDS = TEXT.map(lambda tail: f"beta:{tail}")
# What acme aims at: beta's ids, and ids that only look like acme's or nobody's.
FOREIGN_IDS = st.tuples(
    st.sampled_from(["beta:", "beta", "", "acme", "acme2:", "ACME:", "%61cme:", "*", "{acme:"]),
    TEXT,
).map("".join)
SCOPE_PART = st.text(
    st.characters(categories=["L", "N"], include_characters="-_.é"), min_size=1, max_size=8
)


class Tenants:
    """The module's server, its admin client and the two tenants' users."""

    def __init__(self, server: EphemeralServer) -> None:
        self.server = server
        self.admin = redis.Redis(port=server.port)
        for tenant in ("acme", "beta"):
            rules = acl_rules_for(self.admin, tenant=tenant, deletions=True)
            self.admin.execute_command(
                "ACL", "SETUSER", tenant, "reset", "on", f">{PASSWORD}", *rules
            )
        self.acme = redis.Redis(port=server.port, username="acme", password=PASSWORD)
        self.beta = redis.Redis(port=server.port, username="beta", password=PASSWORD)
        self.url = f"redis://acme:{PASSWORD}@127.0.0.1:{server.port}/0"

    def seed(self, conversation: str, scope: tuple[str, ...]) -> dict[bytes, tuple[bytes, bool]]:
        """An empty server, then beta's conversation (messages, attributes, an idempotency
        record, its scope's index) and acme's own; beta's keys as ``DUMP`` and whether
        each expires."""
        self.admin.flushall()
        log = MessageLog(self.beta, conversation, scope=scope)
        log.append_many(
            [{"role": "user", "content": SECRET}, {"role": "assistant", "content": SECRET}],
            idempotency_key=SECRET,
            attrs={"title": SECRET},
        )
        log.retract([2])
        plans = log._core.drafts  # a draft in progress, its writer elsewhere: by hand
        log._run(plans.open_plan(DRAFT, "t" * 32, "assistant", None, 3_600_000, True))
        log._run(plans.write_plan(DRAFT, "t" * 32, 0, [orjson.dumps({"k": "t", "v": SECRET})]))
        MessageLog(self.acme, "acme:own", scope=("acme",)).add("user", "acme's")
        return self.beta_keys()

    def beta_keys(self) -> dict[bytes, tuple[bytes, bool]]:
        keys: list[bytes] = cast(list[bytes], self.admin.keys("*"))
        return {
            key: (cast(bytes, self.admin.dump(key)), self.admin.pttl(key) >= 0)
            for key in keys
            if not key.startswith(b"msglog:{acme:")
        }


@pytest.fixture(scope="module")
def tenants() -> Iterator[Tenants]:
    from ..conftest import SERVER_ARGS, require_binary

    server = EphemeralServer(require_binary("redis"), SERVER_ARGS).start()
    try:
        yield Tenants(server)
    finally:
        server.stop()


# -- the operations, as acme -------------------------------------------------------------------

LogCall = Callable[[MessageLog, MessageLog], Any]  # (the target, acme's own)
LOG_CALLS: dict[str, LogCall] = {
    "add": lambda log, own: log.add("user", "x"),
    "append": lambda log, own: log.append({"role": "user", "content": "x"}, idempotency_key=SECRET),
    "append_many": lambda log, own: log.append_many([{"role": "user", "content": "x"}] * 2),
    "expected_seq": lambda log, own: log.add("user", "x", expected_seq=2),
    "all": lambda log, own: log.all(),
    "physical": lambda log, own: log.all(view="physical"),
    "read": lambda log, own: log.read(after=0),
    "last": lambda log, own: log.last(5),
    "count": lambda log, own: log.count(),
    "last_turns": lambda log, own: log.last_turns(1),
    "last_tokens": lambda log, own: log.last_tokens(100, lambda m: 1),
    "follow": lambda log, own: next(log.follow(after=0)),
    "attrs": lambda log, own: log.attrs(),
    "set_attrs": lambda log, own: log.set_attrs({"title": "taken"}),
    "retract": lambda log, own: log.retract([2]),
    "pop": lambda log, own: log.pop(),
    "compact": lambda log, own: log.compact([{"role": "system", "content": "s"}], through_seq=2),
    "replace": lambda log, own: log.replace([{"role": "user", "content": "x"}]),
    "clear": lambda log, own: log.clear(),
    "archive": lambda log, own: log.archive(through_seq=1),
    "fork_from": lambda log, own: log.fork("acme:forked"),
    "fork_into": lambda log, own: own.fork(log.conversation),
    "trim": lambda log, own: log.trim(through_seq=1),
    "redact": lambda log, own: log.redact(2),
    "erase": lambda log, own: log.erase(),
    "to_openai": lambda log, own: log.to_openai(),
    "draft": lambda log, own: _write_a_draft(log),
    "drafts": lambda log, own: log.drafts(),
    "draft_deltas": lambda log, own: log.draft_deltas(DRAFT),
    "end_lapsed_drafts": lambda log, own: log.end_lapsed_drafts(),
    "follow_drafts": lambda log, own: next(iter(log.follow(after=f"0.{DRAFT}:0", drafts=True))),
    "subscribe_drafts": lambda log, own: log.subscribe(lambda items: None, drafts=True),
}


def _write_a_draft(log: MessageLog) -> None:
    with log.draft() as draft:
        draft.write("x")


@budget(1200)
@given(
    beta=BETA_IDS, target=st.one_of(BETA_IDS, FOREIGN_IDS), call=st.sampled_from(sorted(LOG_CALLS))
)
def test_a_log_operation_on_another_tenants_id_is_refused(
    tenants: Tenants, beta: str, target: str, call: str
) -> None:
    before = tenants.seed(beta, ("beta",))
    target = beta if target.startswith("beta:") else target  # beta's own id, or a foreign one
    if target.startswith("acme:"):
        return  # acme's own (an id of the FOREIGN_IDS that is acme's after all)
    with pytest.raises(MessageLogError) as refused:  # an id the log refuses: typed too
        LOG_CALLS[call](MessageLog(tenants.acme, target), MessageLog(tenants.acme, "acme:own"))
    assert SECRET not in str(refused.value)
    assert tenants.beta_keys() == before


@budget(500)
@given(beta=BETA_IDS, part=SCOPE_PART, top=st.sampled_from(["beta", "acme2", "ACME", "acme-"]))
def test_a_scope_call_on_another_tenants_scope_is_refused(
    tenants: Tenants, beta: str, part: str, top: str
) -> None:
    before = tenants.seed(beta, ("beta", part) if top == "beta" else ("beta",))
    scope = (top, part)
    directory = Directory(tenants.acme)
    now = datetime.now(timezone.utc)
    calls: list[Callable[[], Any]] = [
        lambda: directory.list(scope),
        lambda: directory.list((top,)),
        lambda: list(directory.walk(scope)),
        lambda: directory.erase(scope),
        lambda: directory.register("acme:new", scope),
        lambda: directory.register(beta, ("acme",)),
        lambda: directory.owner(beta),
        lambda: directory.unindex(beta, ("beta",), now),
        lambda: MessageLog(tenants.acme, "acme:scoped", scope=scope).add("user", "x"),
    ]
    for call in calls:
        with pytest.raises(MessageLogError) as refused:
            call()
        assert SECRET not in str(refused.value)
    assert tenants.beta_keys() == before
    listed = directory.list(("acme",)).conversations  # its own: nothing of beta's
    assert [found.conversation for found in listed] == ["acme:own"]


def _commands(target: str, scope: str, file: Path) -> list[list[str]]:
    return [
        ["show", "--", target],
        ["show", "--physical", "--json", "--", target],
        ["tail", "-n", "3", "--", target],
        ["export", "--", target],
        ["stats", "--", target],
        ["verify", "--", target],
        ["erase", "--yes", "--", target],
        ["redact", "--yes", "--", target, "1"],
        ["trim", "--yes", "--", target, "1"],
        ["import", "--", str(file), target],
        ["ls", "--scope", scope],
        ["verify", "--scope", scope],
        ["stats", "--scope", scope],
        ["erase", "--yes", "--scope", scope],
        ["ls"],  # SCAN: told to pass --scope
    ]


@budget(800)
@given(beta=BETA_IDS, part=SCOPE_PART, index=st.integers(0, 14))
def test_a_msglog_command_on_another_tenants_id_is_refused(
    tenants: Tenants, tmp_path_factory: pytest.TempPathFactory, beta: str, part: str, index: int
) -> None:
    before = tenants.seed(beta, ("beta", part))
    file = tmp_path_factory.mktemp("import") / "one.jsonl"
    file.write_text('{"role": "user", "content": "x"}\n')
    args = _commands(beta, f"beta/{part}", file)[index]
    result = CliRunner().invoke(main, ["--url", tenants.url, *args], catch_exceptions=False)
    assert result.exit_code == 1, (args, result.output)
    errors = result.stderr.strip().splitlines()
    assert len(errors) == 1 and errors[0].startswith("msglog: "), (args, result.stderr)
    assert SECRET not in result.output
    assert tenants.beta_keys() == before
    own = CliRunner().invoke(main, ["--url", tenants.url, "ls", "--json", "--scope", "acme"])
    assert own.exit_code == 0 and beta not in own.stdout and "acme:own" in own.stdout


# -- the web app, its Redis user acme's --------------------------------------------------------


@pytest.fixture(scope="module")
def acme_web(tenants: Tenants) -> Iterator[str]:
    """The web app on acme's Redis user, its own ``authorize`` letting every request in
    (the worst case: only the Redis user confines it), appends and the viewer on."""
    from redis_msglog.web import create_app

    from ..contract.test_web import allow, serving

    client = redis.Redis(port=tenants.server.port, username="acme", password=PASSWORD)
    app = create_app(client, authorize=allow, allow_appends=True, viewer=True, heartbeat=0.2)
    with serving(app) as base:
        yield base
    client.close()


def _web_requests(target: str) -> list[tuple[str, str]]:
    path = f"/conversations/{quote(target, safe='')}"
    return [
        ("GET", f"{path}/messages"),
        ("GET", f"{path}/messages?view=physical"),
        ("GET", f"{path}/messages?format=openai"),
        ("GET", f"{path}/events"),
        ("GET", f"{path}/events?after=1"),
        ("GET", f"{path}/blobs/{'0' * 64}"),
        ("POST", f"{path}/messages"),
        ("GET", "/conversations"),  # the viewer's listing: SCAN, which acme may not
        ("GET", f"/conversations?scope={quote(target, safe='')}"),
        ("GET", f"/conversations?scope=beta%2F{quote(target, safe='')}"),
        ("GET", f"{path}/events?protocol=ag-ui"),
        ("GET", f"{path}/events?protocol=ai-sdk"),
        ("GET", f"{path}/events?after=1.{DRAFT}:0&protocol=ai-sdk"),
    ]


@budget(400)
@given(beta=BETA_IDS, target=st.one_of(BETA_IDS, FOREIGN_IDS), index=st.integers(0, 12))
def test_a_web_request_for_another_tenants_id_is_refused(
    tenants: Tenants, acme_web: str, beta: str, target: str, index: int
) -> None:
    """Every endpoint of an app on acme's Redis user, on beta's conversation (or ids that
    only look like acme's): a JSON error, ``403 PermissionDeniedError`` for anything that
    reaches beta's keys (an event stream before it starts); nothing of beta's written or
    shown. acme's own conversation is served all the while."""
    before = tenants.seed(beta, ("beta",))
    target = beta if target.startswith("beta:") else target
    if target.startswith("acme:"):
        return  # acme's own
    method, path = _web_requests(target)[index]
    if index == 8 and target.split("/")[0] == "acme":
        return  # a scope of acme's own
    with httpx.Client(base_url=acme_web, timeout=10) as http:
        body = b'{"role": "user", "content": "x"}'
        headers = {"Content-Type": "application/json"}
        with http.stream(
            method, path, content=body if method == "POST" else None, headers=headers
        ) as response:
            data = response.read() if response.status_code != 200 else b""
            status = response.status_code
        own = http.get("/conversations/acme%3Aown/messages")
        listed = http.get("/conversations?scope=acme")
    assert status in (400, 403, 404), (method, path, status, data)
    error = orjson.loads(data)
    assert isinstance(error, dict) and error["error"], (method, path, data)
    if (target == beta and "?scope=" not in path) or status == 403:  # a scope may be a 400
        assert (status, error["error"]) == (403, "PermissionDeniedError"), (path, data)
    assert SECRET.encode() not in data
    assert tenants.beta_keys() == before
    assert own.status_code == 200 and own.json()["messages"][0]["message"]["content"] == "acme's"
    assert [c["conversation"] for c in listed.json()["conversations"]] == ["acme:own"]
