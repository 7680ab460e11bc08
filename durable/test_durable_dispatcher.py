"""Tests of the durable layer, one TestCase per section of durable_dispatcher.py, in its order.

Crash and race tests run real child processes: this file is also their program
(``python -B test_durable_dispatcher.py '<json spec>'``). Children get -B and
PYTHONDONTWRITEBYTECODE=1, the parent's -O and -W options, and report one JSON line.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from unittest import mock
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Final

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import durable_dispatcher as dd  # noqa: E402
import tool_dispatcher as td  # noqa: E402

FIXTURE = HERE.parent / "tool-cases.json"
NOW = 1_800_000_000
ALICE = td.Principal("tenant-a", "alice", ("orders.read", "refunds.draft"))
BOB = td.Principal("tenant-a", "bob", ("orders.read", "refunds.draft"))
ALICE_B = td.Principal("tenant-b", "alice", ("orders.read", "refunds.draft"))
ORDERS = (
    td.Order("tenant-a", "ORDER-7", "alice", "paid", 3),
    td.Order("tenant-a", "ORDER-8", "bob", "paid", 1),
    td.Order("tenant-b", "ORDER-9", "alice", "paid", 1),
)
APPROVERS = frozenset({"approver-lee"})
ORDER_OF = MappingProxyType({ALICE: "ORDER-7", BOB: "ORDER-8", ALICE_B: "ORDER-9"})
KEY = "idem-crash"
CHILD_LEASE_MS = 60_000  # children never see their own lease expire ...
RECOVERY_SKEW_MS = 120_000  # ... the recovering process sees every one of them expired
CRASH_EXIT = 77
NOT_CRASHED = 3
CHILD_TIMEOUT_S = 60
RACERS = 8


# --------------------------------------------------------------------------------------------
# Shared helpers (also used by the child program at the bottom of this file)
# --------------------------------------------------------------------------------------------


def refund(principal: td.Principal = ALICE, reason: str = "duplicate") -> dict[str, Any]:
    return {"name": "create_refund_draft", "arguments": {"order_ref": ORDER_OF[principal], "reason": reason}}


def context(tag: str, key: str | None = KEY) -> td.CallContext:
    return td.CallContext("OpenAI", "Responses", "openai-responses-v1", f"resp-{tag}", f"call-{tag}", f"op-{tag}", key)


def approval_for(ctx: td.CallContext, proposal: dict[str, Any], principal: td.Principal = ALICE) -> td.Approval:
    return td.approval_for_call(approver="approver-lee", principal=principal, context=ctx,
                                spec=td.REGISTRY["create_refund_draft"], arguments=proposal["arguments"],
                                expires_at=NOW + 600)


def write(dispatcher: td.Dispatcher, tag: str, key: str | None = KEY, *, principal: td.Principal = ALICE,
          reason: str = "duplicate", fault: str = "none") -> dict[str, Any]:
    proposal = refund(principal, reason)
    ctx = context(tag, key)
    return dispatcher.dispatch(proposal, ctx, principal, approval=approval_for(ctx, proposal, principal),
                               now=NOW, deadline=NOW + 30, fault=fault)


def query(dispatcher: td.Dispatcher, tag: str, key: str = KEY, *, op_tag: str | None = None,
          fault: str = "none") -> dict[str, Any]:
    ctx = replace(context(tag, key), operation_id=f"op-{op_tag or tag}")
    return dispatcher.query_operation_status(refund(), ctx, ALICE, now=NOW, fault=fault)


def own_order(principal: td.Principal, arguments: dict[str, Any]) -> td.Resource | None:
    """A host's resolve hook over ORDERS: the order the call names, in the caller's tenant."""
    for order in ORDERS:
        if (order.tenant, order.order_ref) == (principal.tenant, arguments["order_ref"]):
            return td.Resource(kind="order", ref=order.order_ref, tenant=order.tenant, owner=order.owner,
                               revision=order.revision, state=order.status)
    return None


def canonical(package: Any) -> bytes:
    return td.canonical_json(package)


def answer_of(call: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """A package's delivery or error code, or the DurableError code the host got instead."""
    try:
        package = call()
    except td.CatalogError as error:
        return {"answer": error.code, "retryable": error.retryable}
    result = package["model_result"]
    return {"answer": result["error"]["code"] if "error" in result else result["delivery"],
            "data": result.get("data"), "package": canonical(package).decode("utf-8")}


def reference() -> td.Dispatcher:
    return td.Dispatcher(ORDERS, approvers=APPROVERS)


def rows(path: Path | str, sql: str, params: Any = ()) -> list[tuple[Any, ...]]:
    """What a store holds, read behind the layer's back: a SQLite file, or a postgresql:// DSN."""
    if isinstance(path, str) and path.startswith("postgresql://"):
        import psycopg  # only the PostgreSQL suite passes a DSN
        with psycopg.connect(path, autocommit=True) as connection:
            return [tuple(row) for row in connection.execute(sql.replace("?", "%s"), params or None).fetchall()]
    with contextlib.closing(sqlite3.connect(path)) as connection:
        return connection.execute(sql, params).fetchall()


def integrity(path: Path | str) -> str:
    with dd.open_store(path, create=False) as store:
        return store.integrity()


def count(path: Path, sql: str, params: Any = ()) -> int:
    return rows(path, sql, params)[0][0]


def child_command(spec: dict[str, Any]) -> list[str]:
    flags = ["-B"] + (["-O"] * sys.flags.optimize) + [f"-W{option}" for option in sys.warnoptions]
    return [sys.executable, *flags, str(Path(__file__).resolve()), json.dumps(spec)]


def child_env() -> dict[str, str]:
    return dict(os.environ, PYTHONDONTWRITEBYTECODE="1")


class DriverSays:
    """A real SQLite connection whose driver answers one kind of statement otherwise: it refuses
    it with a SQLite result code, or (``rows``) answers it with the given rows, while ``armed``.
    ``seen`` counts the statements it answered so. Installed with ``installed()``, for every store
    opened meanwhile."""

    def __init__(self, statement: str, *, result: int = 0, rows: list[tuple[Any, ...]] | None = None,
                 most: int = 1_000, armed: bool = True) -> None:
        self.statement, self.result, self.rows, self.most, self.armed = statement, result, rows, most, armed
        self.seen = 0

    def installed(self) -> Any:
        connect = sqlite3.connect
        return mock.patch.object(dd.sqlite3, "connect", lambda *args, **kwargs: _Answering(
            connect(*args, **kwargs), self))


class _Answering:
    def __init__(self, connection: sqlite3.Connection, says: DriverSays) -> None:
        self._connection, self._says = connection, says

    def execute(self, sql: str, *params: Any) -> Any:
        says = self._says
        if not (says.armed and sql.startswith(says.statement)):
            return self._connection.execute(sql, *params)
        says.seen += 1
        if says.seen > says.most:  # a loop that would not stop: end it here, as a failure of its own
            raise AssertionError(f"{says.statement} asked more than {says.most} times")
        if says.rows is not None:
            return self._connection.execute("VALUES " + ", ".join(["(?)"] * len(says.rows)),
                                            [row[0] for row in says.rows])
        error = sqlite3.OperationalError("refused by the test's driver")
        error.sqlite_errorcode = says.result  # type: ignore[attr-defined]
        raise error

    def __getattr__(self, name: str) -> Any:
        return getattr(self._connection, name)


class Clock:
    """A store clock the test moves by hand: leases expire without sleeping."""

    def __init__(self, start: int = 1_000_000) -> None:
        self.now = start

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


class StoreCase(unittest.TestCase):
    """A temporary directory with one database path; every store opened here is closed."""

    def setUp(self) -> None:
        directory = tempfile.TemporaryDirectory()
        self.addCleanup(directory.cleanup)
        self.dir = Path(directory.name)
        self.path = self.dir / "ledger.sqlite3"
        self.clock = Clock()

    def new_store(self, name: str) -> None:
        """Each subtest on a store of its own (the PostgreSQL twin: a new schema)."""
        self.path = self.dir / f"{name}.sqlite3"

    def open_store(self, **options: Any) -> dd.DurableStore:
        # NORMAL keeps in-process tests off fsync; crash and race children run the default FULL.
        options.setdefault("clock_ms", self.clock)
        options.setdefault("synchronous", "NORMAL")
        store = dd.DurableStore.open(self.path, **options)
        self.addCleanup(store.close)
        return store

    def dispatcher(self, store: dd.DurableStore | None = None, **options: Any) -> dd.DurableDispatcher:
        return dd.DurableDispatcher(ORDERS, store=store or self.open_store(), approvers=APPROVERS, **options)

    def row(self, dispatcher: dd.DurableDispatcher, key: str = KEY,
            principal: td.Principal = ALICE) -> dd.LedgerRow | None:
        return dispatcher.ledger_row(principal, "create_refund_draft", key)

    def admitted(self, dispatcher: dd.DurableDispatcher, tag: str, **options: Any) -> tuple[Any, td.OperationRecord]:
        """The admitted call and the fresh record a write of `tag` claims with (the write runs)."""
        seen: list[tuple[Any, td.OperationRecord]] = []
        original = dispatcher.operations.claim

        def spy(call: Any, record: td.OperationRecord, approval_ref: str) -> Any:
            seen.append((call, record))
            return original(call, record, approval_ref)
        dispatcher.operations.claim = spy  # type: ignore[method-assign]
        write(dispatcher, tag, **options)
        dispatcher.operations.claim = original  # type: ignore[method-assign]
        return seen[0]

    def tamper(self, sql: str) -> None:
        """Change the database behind the layer's back (another writer, a damaged downstream)."""
        with contextlib.closing(sqlite3.connect(self.path)) as connection:
            connection.execute(sql)
            connection.commit()

    def assertDurable(self, code: str, call: Callable[[], Any]) -> dd.DurableError:
        with self.assertRaises(td.CatalogError) as caught:
            call()
        self.assertEqual(caught.exception.code, code)
        return caught.exception

    def assertBoundary(self, code: str, call: Callable[[], Any]) -> None:
        with self.assertRaises(td.BoundaryError) as caught:
            call()
        self.assertEqual(caught.exception.code, code)

    def assertAnswer(self, package: dict[str, Any], answer: str) -> None:
        result = package["model_result"]
        self.assertEqual(result["error"]["code"] if "error" in result else result["delivery"], answer)


# --------------------------------------------------------------------------------------------
# 1-2. Limits, constants and the error catalog
# --------------------------------------------------------------------------------------------


class TestConstantsAndErrors(unittest.TestCase):
    def test_lease_limits_bracket_the_default(self) -> None:
        self.assertLessEqual(dd.MIN_LEASE_MS, dd.LEASE_MS)
        self.assertLessEqual(dd.LEASE_MS, dd.MAX_LEASE_MS)
        self.assertGreater(dd.RETENTION_MS, dd.MAX_LEASE_MS)

    def test_error_catalog_is_closed(self) -> None:
        with self.assertRaises(ValueError):
            dd.DurableError("NOT_A_CODE")

    def test_retryable_codes_are_exactly_the_transient_ones(self) -> None:
        retryable = {code for code, spec in dd.DURABLE_ERRORS.items() if spec.retryable}
        self.assertEqual(retryable, {"LEASE_LOST", "STORE_BUSY", "STORE_UNREACHABLE"})
        # "In progress" is the core's host code: one lifecycle, one answer for every store.
        self.assertTrue(td.ERROR_CATALOG["OPERATION_IN_PROGRESS"].retryable)

    def test_catalog_shares_no_code_with_the_core(self) -> None:
        # Every code of every catalog the core exports, the contract language's included.
        core = {code for name in td.__all__ if name.endswith("_CATALOG") for code in getattr(td, name)}
        self.assertLessEqual({"INVALID_ARGUMENTS", "SCHEMA_TYPE", "VALUE_TYPE", "CONTRACTS_FIELDS"}, core)
        self.assertEqual(set(dd.DURABLE_ERRORS) & core, set())
        self.assertTrue(issubclass(dd.DurableError, td.CatalogError))

    def test_messages_are_fixed_text(self) -> None:
        for code, spec in dd.DURABLE_ERRORS.items():
            with self.subTest(code=code):
                self.assertNotIn("{", spec.message)
                self.assertTrue(spec.message.endswith("."))

    def test_error_json_has_code_message_retryable(self) -> None:
        error = dd.DurableError("STORE_BUSY")
        self.assertEqual(error.to_json(), {"code": "STORE_BUSY", "retryable": True,
                                           "message": dd.DURABLE_ERRORS["STORE_BUSY"].message})

    def test_store_errors_never_claim_that_nothing_happened(self) -> None:
        # A store error rolls back one step; the operation's earlier commits (even its effect) stay.
        for code in ("STORE_BUSY", "STORE_FAILED"):
            with self.subTest(code=code):
                message = dd.DURABLE_ERRORS[code].message
                self.assertNotIn("nothing was changed", message)
                self.assertIn("may have committed", message)
                self.assertIn("same idempotency key", message)

    def test_a_store_error_carries_the_operation_state_when_known(self) -> None:
        error = dd.DurableError("STORE_BUSY", operation_state="in_progress", effect_possible=True)
        self.assertEqual(error.to_json(), {"code": "STORE_BUSY", "retryable": True,
                                           "message": dd.DURABLE_ERRORS["STORE_BUSY"].message,
                                           "operation_state": "in_progress", "effect_possible": True,
                                           "step_committed": False})
        self.assertIsNone(dd.DurableError("STORE_UNREACHABLE", operation_state="in_progress",
                                          effect_possible=True).to_json()["step_committed"])
        self.assertEqual(dict(dd.STEP_STATES), {"start": ("none", False), "release": ("none", False),
                                                "settle": ("in_progress", True)})
        plain = dd.DurableError("STORE_BUSY")  # no place, as every CatalogError without one: an empty text
        self.assertEqual((plain.at, plain.operation_state, plain.effect_possible, plain.details()), ("", None, None, {}))

    def test_checkpoints_are_the_six_named_points(self) -> None:
        self.assertEqual(dd.CHECKPOINTS, {"after_claim", "after_downstream_commit", "after_outbox_write",
                                          "after_ledger_commit", "after_publish", "inside_consumer"})


# --------------------------------------------------------------------------------------------
# 3. Lifecycle and leases
# --------------------------------------------------------------------------------------------


class TestLifecycle(StoreCase):
    def test_every_package_state_is_a_stored_state(self) -> None:
        self.assertLessEqual(set(td.OPERATION_STATES) - {"none"}, set(dd.STORED_STATES))

    def test_the_layer_runs_on_the_core_lifecycle_table(self) -> None:
        self.assertIs(dd.transition, td.transition)
        self.assertEqual(dd.STORED_STATES, td.LIFECYCLE_STATES - {"none"})
        self.assertIs(dd.LEASED_STATES, td.LEASED_STATES)

    def test_moves_not_in_the_table_are_refused(self) -> None:
        events = {event for _, event in td.LIFECYCLE}
        for state in sorted(td.LIFECYCLE_STATES):
            for event in sorted(events):
                if (state, event) in td.LIFECYCLE:
                    continue
                with self.subTest(state=state, event=event), self.assertRaises(td.BoundaryError) as caught:
                    dd.transition(state, event)
                self.assertEqual(caught.exception.code, "LIFECYCLE_VIOLATION")

    def test_claim_start_commit_path(self) -> None:
        self.assertEqual(dd.transition("none", "claim"), "claimed")
        self.assertEqual(dd.transition("claimed", "start"), "in_progress")
        self.assertEqual(dd.transition("in_progress", "committed"), "succeeded")
        self.assertEqual(dd.transition("in_progress", "take_over"), "unknown")

    def test_unknown_and_escalated_are_never_prunable(self) -> None:
        self.assertEqual(dd.PRUNABLE_STATES, {"succeeded", "reconciled"})
        self.assertFalse(dd.PRUNABLE_STATES & dd.LEASED_STATES)

    def test_model_sees_only_package_states(self) -> None:
        self.assertLessEqual(set(td.MODEL_STATE.values()), set(td.OPERATION_STATES))
        self.assertEqual(td.MODEL_STATE["escalated"], "unknown")

    def test_lease_is_dead_at_its_expiry_instant(self) -> None:
        dispatcher = self.dispatcher(lease_ms=100)
        with dispatcher.operations.store.transaction() as tx:
            lease = dispatcher.operations.ledger.claim(tx, dd.OperationKey("default", "t", "s", "tool", "k"), dd.Intent(
                "0" * 64, td.PROVIDER_PROFILES["openai-responses-v1"], "op", "{}", "rq", "st"), owner="me",
                lease_ms=100)
        self.assertEqual((lease.state, lease.epoch, lease.owner), ("claimed", 1, "me"))
        stored = dispatcher.operations.ledger.read(lease.key)
        self.assertEqual(stored.lease_expires_at, self.clock.now + 100)
        self.assertTrue(stored.lease_live(self.clock.now + 99))
        self.assertFalse(stored.lease_live(self.clock.now + 100))

    def test_schema_refuses_a_state_outside_the_table(self) -> None:
        self.open_store()
        for index, sql in enumerate((
            "UPDATE operations SET state = 'bogus'",
            "UPDATE operations SET expires_at = 1",  # an unknown row may never expire
            "UPDATE operations SET lease_expires_at = 5",  # a settled row holds no lease
            "UPDATE operations SET lease_owner = 'someone'",  # nor an owner
        )):
            with self.subTest(sql=sql):
                write(self.dispatcher(realm=f"r{index}"), "a", fault="handler_raises")
                with contextlib.closing(sqlite3.connect(self.path)) as connection:
                    with self.assertRaises(sqlite3.IntegrityError):
                        connection.execute(sql + " WHERE realm = ?", (f"r{index}",))

    def test_settings_out_of_range_are_refused(self) -> None:
        store = self.open_store()
        for options in ({"lease_ms": 0}, {"lease_ms": dd.MAX_LEASE_MS + 1}, {"lease_ms": True}, {"realm": "a realm"}):
            with self.subTest(options=options):
                self.assertDurable("SETTING_INVALID", lambda: self.dispatcher(store, **options))
        self.assertEqual(self.dispatcher(store, lease_ms=dd.MAX_LEASE_MS).operations.lease_ms, dd.MAX_LEASE_MS)


# --------------------------------------------------------------------------------------------
# 5. The store
# --------------------------------------------------------------------------------------------


class TestStore(StoreCase):
    def test_every_host_setting_is_checked_before_anything_is_read_or_written(self) -> None:
        store = self.open_store()
        write(self.dispatcher(store), "a")
        before = dd.verify_chain(store)

        class Name(str):
            pass

        class Foreign:  # a store class of no backend this layer knows
            backend = "oracle"

        bad_names = ({"r": 1}, 5, "r r", "r\ud800", "r" * 65, Name("default"))
        refused: dict[str, tuple[Callable[[Any], Any], tuple[Any, ...]]] = {
            "dispatcher store": (lambda v: dd.DurableDispatcher(ORDERS, store=v),
                                 (None, "x.sqlite3", object(), Foreign())),
            "dispatcher realm": (lambda v: self.dispatcher(store, realm=v), bad_names + (None,)),
            "dispatcher owner": (lambda v: self.dispatcher(store, owner=v), bad_names),
            "dispatcher lease": (lambda v: self.dispatcher(store, lease_ms=v),
                                 (0, dd.MAX_LEASE_MS + 1, "30000", 1.0, True)),
            "dispatcher retention": (lambda v: self.dispatcher(store, retention_ms=v),
                                     (0, -5, dd.MAX_RETENTION_MS + 1, "1000", True)),
            "relay store": (lambda v: dd.relay(v), (None,)),
            "relay realm": (lambda v: dd.relay(store, realm=v), bad_names),
            "relay limit": (lambda v: dd.relay(store, limit=v), (0, -1, dd.RELAY_BATCH + 1, "5", 2.0, True)),
            "consume realm": (lambda v: dd.consume(store, realm=v), bad_names),
            "consume consumer": (lambda v: dd.consume(store, consumer=v), bad_names + (None,)),
            "consume limit": (lambda v: dd.consume(store, limit=v), (0, dd.CONSUME_BATCH + 1, "5")),
            "recover store": (lambda v: dd.recover(v), (None,)),
            "recover realm": (lambda v: dd.recover(store, realm=v), bad_names),
            "recover limit": (lambda v: dd.recover(store, limit=v), (0, dd.MAX_RECOVERY_ROWS + 1, "5")),
            "recover fault": (lambda v: dd.recover(store, fault=v), ("bogus", {"f": 1}, ["none"])),
            "recover retention": (lambda v: dd.recover(store, retention_ms=v), (0, "1000")),
            "prune store": (lambda v: dd.prune(v), (None,)),
            "prune retention": (lambda v: dd.prune(store, retention_ms=v),
                                (0, -5, dd.MAX_RETENTION_MS + 1, 10 ** 30, "1000", True)),
            "verify_chain store": (lambda v: dd.verify_chain(v), (None, "x.sqlite3", Foreign())),
        }
        for setting, (call, values) in refused.items():
            for value in values:
                with self.subTest(setting=setting, value=value):
                    self.assertDurable("SETTING_INVALID", lambda: call(value))
        short = td.SealKeys("k1", {"k1": bytes(5)})  # a hand-built key set no seal-keys file may hold
        for call in (lambda: self.dispatcher(store, seal_keys="k"), lambda: dd.verify_chain(store, seal_keys={}),
                     lambda: self.dispatcher(store, seal_keys=short), lambda: dd.verify_chain(store, seal_keys=short),
                     lambda: dd.LedgerOperations(store, seal_keys=short)):
            with self.subTest(seal_keys=call):
                with self.assertRaises(td.BoundaryError) as caught:
                    call()
                self.assertEqual(caught.exception.code, "SEAL_KEYS_INVALID")
        # Nothing was written by any of them: the event is still unsent, the row still there.
        self.assertEqual((dd.verify_chain(store), store.facts()["events"], store.facts()["operations"]),
                         (before, {"written": 1, "sent": 0}, {"succeeded": 1}))
        # The other side of every range: its ends are accepted.
        for lease in (dd.MIN_LEASE_MS, dd.MAX_LEASE_MS):
            self.assertEqual(self.dispatcher(store, lease_ms=lease, retention_ms=dd.MAX_RETENTION_MS).operations.lease_ms,
                             lease)
        self.assertEqual(self.dispatcher(store, realm="r" * 64, owner="o" * 64).operations.realm, "r" * 64)
        self.assertEqual((dd.relay(store, realm="r" * 64, limit=dd.RELAY_BATCH), dd.relay(store, limit=1)), (0, 1))
        self.assertEqual((dd.consume(store, consumer="c" * 64, limit=dd.CONSUME_BATCH), dd.consume(store, limit=1)),
                         (1, 1))
        self.assertEqual((dd.recover(store, limit=1), dd.recover(store, limit=dd.MAX_RECOVERY_ROWS)), ((), ()))
        self.assertEqual((dd.prune(store, retention_ms=1), dd.prune(store, retention_ms=dd.MAX_RETENTION_MS)),
                         (dd.PruneReport(0, 0, 0), dd.PruneReport(0, 0, 0)))

    def test_connection_settings(self) -> None:
        store = self.open_store(synchronous="FULL")
        self.assertIsNone(store._connection.isolation_level)
        self.assertEqual(store.query_one("PRAGMA journal_mode"), ("wal",))
        self.assertEqual(store.query_one("PRAGMA synchronous"), (2,))
        self.assertEqual(store.query_one("PRAGMA busy_timeout"), (dd.BUSY_TIMEOUT_MS,))
        self.assertEqual(store.query_one("PRAGMA application_id"), (dd.APPLICATION_ID,))
        self.assertEqual(store.query_one("PRAGMA user_version"), (dd.SCHEMA_VERSION,))

    def test_full_is_the_default_and_normal_is_allowed(self) -> None:
        with dd.DurableStore.open(self.path) as default:
            self.assertEqual((default.query_one("PRAGMA synchronous"), default.synchronous), ((2,), "FULL"))
        store = self.open_store(synchronous="NORMAL")
        self.assertEqual(store.query_one("PRAGMA synchronous"), (1,))
        self.assertEqual(store.facts()["synchronous"], "NORMAL")

    def test_other_settings_are_refused(self) -> None:
        for options in ({"synchronous": "OFF"}, {"busy_timeout_ms": -1}, {"busy_timeout_ms": 1.5}):
            with self.subTest(options=options):
                self.assertDurable("SETTING_INVALID", lambda: dd.DurableStore.open(self.path, **options))
        self.assertFalse(self.path.exists())
        store = self.open_store(busy_timeout_ms=0)  # no wait at all is a setting too
        self.assertEqual(store.query_one("PRAGMA busy_timeout"), (0,))

    def test_reopen_keeps_the_schema(self) -> None:
        write(self.dispatcher(), "a")
        again = self.dispatcher(self.open_store())
        self.assertEqual(again.operation_state(ALICE, "create_refund_draft", KEY), "succeeded")

    def test_foreign_sqlite_database_is_refused_untouched(self) -> None:
        self.tamper("CREATE TABLE theirs (x)")
        before = self.path.read_bytes()
        self.assertDurable("STORE_INVALID", lambda: dd.DurableStore.open(self.path))
        self.assertEqual(self.path.read_bytes(), before)

    def test_other_application_id_is_refused(self) -> None:
        with contextlib.closing(sqlite3.connect(self.path)) as connection:
            connection.execute("PRAGMA application_id = 7")
        self.assertDurable("STORE_INVALID", lambda: dd.DurableStore.open(self.path))

    def test_text_file_is_refused_untouched(self) -> None:
        self.path.write_bytes(b"not a database, just some text that is long enough " * 4)
        self.assertDurable("STORE_INVALID", lambda: dd.DurableStore.open(self.path, create=False))
        self.assertEqual(self.path.read_bytes()[:10], b"not a data")

    def test_missing_file_is_not_created_without_create(self) -> None:
        self.assertDurable("STORE_UNREADABLE", lambda: dd.DurableStore.open(self.path, create=False))
        self.assertFalse(self.path.exists())

    def test_exclusive_refuses_an_existing_file(self) -> None:
        self.path.write_bytes(b"")
        self.assertDurable("STORE_EXISTS", lambda: dd.DurableStore.open(self.path, exclusive=True))
        self.assertEqual(self.path.read_bytes(), b"")
        # A directory is no database file that exists: the store cannot be opened there, as with
        # any other opening (never "the file already exists").
        for options in ({"exclusive": True}, {"create": True}, {"create": False}):
            with self.subTest(**options):
                self.assertDurable("STORE_UNREADABLE", lambda: dd.DurableStore.open(self.dir, **options))
        self.assertEqual(sorted(self.dir.iterdir()), [self.path])

    def test_a_store_created_by_opening_is_its_owners_only_and_a_file_there_is_adopted_as_it_is(self) -> None:
        write(self.dispatcher(self.open_store()), "a")
        for suffix in ("", "-wal", "-shm"):  # SQLite gives its side files the database's mode
            with self.subTest(suffix=suffix):
                self.assertEqual(stat.S_IMODE(os.stat(str(self.path) + suffix).st_mode) & 0o077, 0)
        there = self.dir / "there.sqlite3"
        there.write_bytes(b"")
        there.chmod(0o640)
        with dd.DurableStore.open(there) as store:  # an empty file: the store is created in it
            self.assertEqual(store.integrity(), "ok")
        self.assertEqual(stat.S_IMODE(there.stat().st_mode), 0o640)
        self.assertDurable("STORE_UNREADABLE", lambda: dd.DurableStore.open(self.dir / "no" / "x.db"))
        self.assertFalse((self.dir / "no").exists())

    def test_exclusive_creates_a_new_database(self) -> None:
        store = self.open_store(exclusive=True)
        self.assertEqual(store.integrity(), "ok")
        self.assertEqual(stat.S_IMODE(self.path.stat().st_mode) & 0o077, 0)  # its owner's only
        self.assertDurable("STORE_UNREADABLE", lambda: dd.DurableStore.open(self.dir / "no" / "x.db", exclusive=True))
        self.assertFalse((self.dir / "no").exists())

    def test_bad_paths_are_refused(self) -> None:
        for path in (str(self.dir / "a\x00b"), 42, str(self.dir).encode(), self.dir, self.dir / "no" / "x.db"):
            with self.subTest(path=repr(path)[:40]):
                self.assertDurable("STORE_UNREADABLE", lambda: dd.DurableStore.open(path))
        self.assertEqual(sorted(self.dir.iterdir()), [])

    def test_the_open_transaction_is_asked_for_only_inside_one(self) -> None:
        store = self.open_store()
        self.assertDurable("STORE_MISUSE", store.current)
        connection = store.begin()
        self.assertIs(store.current(), connection)
        store.rollback()
        self.assertDurable("STORE_MISUSE", store.current)

    def test_nested_transaction_is_refused_and_rolled_back(self) -> None:
        store = self.open_store()
        with self.assertRaises(dd.DurableError) as caught:
            with store.transaction() as tx:
                tx.execute("INSERT INTO consumer_offsets VALUES ('r', 'c', 1)")
                with store.transaction():
                    pass
        self.assertEqual(caught.exception.code, "STORE_MISUSE")
        self.assertEqual(store.query("SELECT * FROM consumer_offsets"), [])

    def test_exception_in_transaction_rolls_back(self) -> None:
        store = self.open_store()
        with self.assertRaises(KeyError):
            with store.transaction() as tx:
                tx.execute("INSERT INTO consumer_offsets VALUES ('r', 'c', 1)")
                raise KeyError("boom")
        self.assertEqual(store.query("SELECT * FROM consumer_offsets"), [])
        self.assertFalse(store._connection.in_transaction)

    def test_sql_error_in_transaction_is_a_store_error(self) -> None:
        store = self.open_store()
        with self.assertRaises(dd.DurableError) as caught:
            with store.transaction() as tx:
                tx.execute("INSERT INTO no_such_table VALUES (1)")
        self.assertEqual(caught.exception.code, "STORE_FAILED")
        self.assertDurable("STORE_FAILED", lambda: store.query("SELECT * FROM no_such_table"))

    def test_lock_held_past_busy_timeout_is_store_busy_at_the_claim(self) -> None:
        # Busy before the claim: retryable, no operation state to report, no row written.
        store = self.open_store(busy_timeout_ms=30)
        dispatcher = self.dispatcher(store)
        with contextlib.closing(sqlite3.connect(self.path, isolation_level=None)) as holder:
            holder.execute("BEGIN IMMEDIATE")
            error = self.assertDurable("STORE_BUSY", lambda: write(dispatcher, "a"))
            holder.execute("ROLLBACK")
        self.assertTrue(error.retryable)
        self.assertNotIn("operation_state", error.to_json())
        self.assertEqual(count(self.path, "SELECT COUNT(*) FROM operations"), 0)
        self.assertAnswer(write(dispatcher, "a"), "fresh")

    def test_store_busy_after_the_effect_says_so_and_the_key_stays_safe(self) -> None:
        # The lock is taken right after the downstream committed: the completion cannot commit.
        # The host is told the row is in progress and the effect may exist; a retry under the
        # same key answers from the effect, never makes a second one.
        self.open_store().close()
        holder = sqlite3.connect(self.path, isolation_level=None)
        self.addCleanup(holder.close)

        def lock(point: str) -> None:
            if point == "after_downstream_commit":
                holder.execute("BEGIN IMMEDIATE")
        dispatcher = self.dispatcher(self.open_store(busy_timeout_ms=30), lease_ms=100, checkpoint=lock)
        error = self.assertDurable("STORE_BUSY", lambda: write(dispatcher, "a"))
        self.assertEqual(error.to_json()["operation_state"], "in_progress")
        self.assertIs(error.to_json()["effect_possible"], True)
        self.assertNotIn("nothing was changed", error.message)
        holder.execute("ROLLBACK")
        self.assertEqual((self.row(dispatcher).state, dispatcher.effect_count), ("in_progress", 1))
        self.assertDurable("OPERATION_IN_PROGRESS", lambda: write(dispatcher, "a"))
        self.clock.advance(100)
        self.assertAnswer(write(dispatcher, "a"), "OUTCOME_UNKNOWN")
        self.assertAnswer(query(dispatcher, "q", op_tag="a"), "receipt_reconciled")
        self.assertEqual(dispatcher.effect_count, 1)

    def test_a_transaction_that_cannot_begin_runs_nothing(self) -> None:
        store = self.open_store(busy_timeout_ms=30)
        ran: list[int] = []
        with contextlib.closing(sqlite3.connect(self.path, isolation_level=None)) as holder:
            holder.execute("BEGIN IMMEDIATE")
            with self.assertRaises(dd.DurableError) as caught:
                with store.transaction():
                    ran.append(1)
            holder.execute("ROLLBACK")
        self.assertEqual((caught.exception.code, ran), ("STORE_BUSY", []))

    def test_schema_is_created_only_in_an_empty_database(self) -> None:
        # The check inside the creating transaction, for a file that changed after it was opened.
        for index, sql in enumerate(("CREATE TABLE theirs (x)", "PRAGMA application_id = 7")):
            with self.subTest(sql=sql):
                path = self.dir / f"raced-{index}.sqlite3"
                connection = sqlite3.connect(path, isolation_level=None)
                store = dd.DurableStore(connection, synchronous="FULL", clock_ms=self.clock)
                self.addCleanup(store.close)
                with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as other:
                    other.execute(sql)
                self.assertEqual(store._create_schema(), "foreign")
                self.assertEqual(store.query("SELECT name FROM sqlite_master WHERE name = 'operations'"), [])

    def test_a_file_without_wal_support_is_refused(self) -> None:
        class NoWal(dd.DurableStore):
            def query_one(self, sql: str, params: Any = ()) -> tuple[Any, ...] | None:
                return ("memory",) if sql.startswith("PRAGMA journal_mode") else super().query_one(sql, params)
        store = NoWal(sqlite3.connect(self.path, isolation_level=None), synchronous="FULL", clock_ms=self.clock)
        self.addCleanup(store.close)
        self.assertDurable("STORE_INVALID", lambda: store._configure(100))

    def test_an_empty_file_is_refused_untouched_without_create(self) -> None:
        self.path.write_bytes(b"")
        self.assertDurable("STORE_INVALID", lambda: dd.DurableStore.open(self.path, create=False))
        self.assertEqual(self.path.read_bytes(), b"")
        self.assertEqual(sorted(path.name for path in self.dir.iterdir()), ["ledger.sqlite3"])

    def test_a_file_claiming_the_version_without_a_column_is_refused(self) -> None:
        self.open_store().close()
        self.tamper("ALTER TABLE operations DROP COLUMN recovery_hint")
        self.assertEqual(rows(self.path, "PRAGMA user_version"), [(dd.SCHEMA_VERSION,)])
        self.assertDurable("STORE_INVALID", lambda: dd.DurableStore.open(self.path, create=False))

    def test_a_file_with_an_extra_index_or_a_missing_table_is_refused(self) -> None:
        for index, sql in enumerate(("CREATE INDEX extra ON outbox (payload)", "DROP TABLE key_epochs")):
            with self.subTest(sql=sql):
                self.path = self.dir / f"edited-{index}.sqlite3"
                self.open_store().close()
                self.tamper(sql)
                self.assertDurable("STORE_INVALID", lambda: dd.DurableStore.open(self.path))

    def test_the_identity_is_read_in_one_snapshot(self) -> None:
        # Another process creates the schema between this opener's first read and the rest of
        # its check: two separate reads saw the new version with the old id ("damaged").
        created: list[str] = []

        class Interleaved(dd.DurableStore):
            def query(self, sql: str, params: Any = ()) -> list[tuple[Any, ...]]:
                answer = super().query(sql, params)
                if not created and "busy_timeout" not in sql:
                    created.append(sql)
                    dd.DurableStore.open(self_path).close()
                return answer

        self_path = self.path
        connection = sqlite3.connect(self.path, isolation_level=None)
        store = Interleaved(connection, synchronous="NORMAL", clock_ms=self.clock)
        self.addCleanup(store.close)
        store._configure(1_000)
        self.assertEqual((len(created), store.integrity()), (1, "ok"))

    def test_concurrent_first_opens_all_succeed(self) -> None:
        for round_ in range(3):
            with self.subTest(round=round_):
                path = self.dir / f"new-{round_}.sqlite3"
                barrier = self.dir / f"barrier-{round_}"
                barrier.mkdir()
                children = [subprocess.Popen(
                    child_command({"action": "open", "db": str(path), "barrier": str(barrier), "index": index,
                                   "racers": RACERS}), env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                    for index in range(RACERS)]
                results = [(child.wait(timeout=CHILD_TIMEOUT_S), child.stdout.read(), child.stderr.read())
                           for child in children]
                for child in children:
                    child.stdout.close()
                    child.stderr.close()
                self.assertEqual(results, [(0, b"ok\n", b"")] * RACERS)
                self.assertEqual(rows(path, "PRAGMA integrity_check"), [("ok",)])

    def test_the_switch_to_wal_is_retried_only_while_busy(self) -> None:
        class Flaky(dd.DurableStore):
            failures: list[str] = []

            def query_one(self, sql: str, params: Any = ()) -> tuple[Any, ...] | None:
                if sql.startswith("PRAGMA journal_mode") and self.failures:
                    raise dd.DurableError(self.failures.pop())
                return super().query_one(sql, params)
        store = Flaky(sqlite3.connect(self.path, isolation_level=None), synchronous="FULL", clock_ms=self.clock)
        self.addCleanup(store.close)
        Flaky.failures = ["STORE_BUSY", "STORE_BUSY"]
        store._set_wal(1_000)
        self.assertEqual((store.query_one("PRAGMA journal_mode"), Flaky.failures), (("wal",), []))
        Flaky.failures = ["STORE_FAILED"]
        self.assertDurable("STORE_FAILED", lambda: store._set_wal(1_000))
        Flaky.failures = ["STORE_BUSY"] * 3
        self.assertDurable("STORE_BUSY", lambda: store._set_wal(0))
        self.assertEqual(Flaky.failures, ["STORE_BUSY"] * 2)

    def test_a_row_of_the_wrong_width_is_a_store_error(self) -> None:
        self.assertDurable("STORE_INVALID", lambda: dd.LedgerRow.of(None))
        self.assertDurable("STORE_INVALID", lambda: dd.LedgerRow.of(("default",) * (len(dd.ROW_COLUMNS) - 1)))

    def test_a_failing_claim_rolls_back_and_is_a_store_error(self) -> None:
        store = self.open_store()
        dispatcher = self.dispatcher(store)
        self.tamper("DROP TABLE key_epochs")  # only the claim's INSERT reads it
        self.assertDurable("STORE_FAILED", lambda: write(dispatcher, "a"))
        self.assertFalse(store.in_transaction)
        self.assertEqual(count(self.path, "SELECT COUNT(*) FROM operations"), 0)

    def test_a_claim_interrupted_before_its_start_leaves_nothing_but_its_binding(self) -> None:
        store = self.open_store()
        dispatcher = self.dispatcher(store)

        def interrupted(claim: td.Claim) -> td.Claim:
            raise Boom("between claim and start")
        dispatcher.operations.start = interrupted  # type: ignore[method-assign]
        with self.assertRaises(Boom):
            write(dispatcher, "a")
        self.assertFalse(store.in_transaction)
        self.assertEqual((count(self.path, "SELECT COUNT(*) FROM operations"),
                          count(self.path, "SELECT COUNT(*) FROM call_bindings")), (0, 1))

    def test_an_error_inside_the_held_start_rolls_the_claim_back(self) -> None:
        # The claim wrote its row already started: the held start is its commit alone.
        store = self.open_store()
        dispatcher = self.dispatcher(store)
        commit = store.commit
        failures = ["inside the claim's transaction"]

        def failing() -> None:
            if failures:
                raise RuntimeError(failures.pop())
            commit()
        store.commit = failing  # type: ignore[method-assign]
        with self.assertRaises(RuntimeError):
            write(dispatcher, "a")
        self.assertFalse(store.in_transaction)
        self.assertEqual((failures, count(self.path, "SELECT COUNT(*) FROM operations")), ([], 0))

    def test_a_claim_held_for_its_start_is_written_once(self) -> None:
        # Claim and start are one commit, and the row is written in it once: inserted as the
        # start leaves it, never inserted and then updated in the same transaction.
        store = self.open_store()
        dispatcher = self.dispatcher(store)
        statements: list[str] = []
        store._connection.set_trace_callback(statements.append)
        write(dispatcher, "a")
        store._connection.set_trace_callback(None)
        claim = statements[statements.index("BEGIN IMMEDIATE"):statements.index("COMMIT") + 1]
        self.assertEqual([" ".join(sql.split())[:22] for sql in claim],
                         ["BEGIN IMMEDIATE", "INSERT INTO call_bindi", "INSERT INTO operations",
                          "INSERT INTO approval_u", "COMMIT"])
        self.assertEqual(len([sql for sql in statements if sql == "COMMIT"]), 3)
        self.assertEqual(self.row(dispatcher).state, "succeeded")

    def test_a_takeover_that_finds_the_row_moved_answers_in_progress(self) -> None:
        class Moved:
            def __init__(self, tx: Any) -> None:
                self.tx = tx

            def execute(self, sql: str, params: Any = ()) -> Any:
                cursor = self.tx.execute(sql, params)
                return type("NoRow", (), {"rowcount": 0})() if sql is dd.SQL_CLAIM_TAKE_OVER else cursor
        store = self.open_store()
        ledger = self.dispatcher(store, lease_ms=100).operations.ledger
        key = dd.OperationKey("default", "t", "s", "tool", "k")
        # Its references derived from the key, as a claim derives them: a released row a new claim may take.
        request_ref = td.derived_ref("rq-", "request", "t", "s", "tool", "k", "0" * 64)
        intent = dd.Intent("0" * 64, td.PROVIDER_PROFILES["openai-responses-v1"], "op", "{}", request_ref,
                           td.derived_ref("st-", "status", request_ref))
        with store.transaction() as tx:
            ledger.claim(tx, key, intent, owner="one", lease_ms=100)
        self.tamper("UPDATE operations SET state = 'released', lease_owner = NULL, lease_expires_at = NULL")
        with self.assertRaises(td.BoundaryError) as caught:
            with store.transaction() as tx:
                ledger.claim(Moved(tx), key, intent, owner="two", lease_ms=100)
        self.assertEqual(caught.exception.code, "OPERATION_IN_PROGRESS")

    def test_a_status_query_binds_its_identity_at_once(self) -> None:
        dispatcher = self.dispatcher()
        write(dispatcher, "a")
        query(dispatcher, "q", op_tag="a")
        self.assertEqual(rows(self.path, "SELECT call_id FROM call_bindings ORDER BY call_id"),
                         [("call-a",), ("call-q",)])

    def test_the_sqlite_path_never_imports_the_postgres_driver(self) -> None:
        # psycopg is imported only by postgres_store.py, and that only for a postgresql:// target;
        # where the extra is missing, such a target is a stable error, not an ImportError.
        program = (
            "import json, sys\n"
            "sys.modules['psycopg'] = None  # as on a machine without the postgres extra\n"
            f"sys.path.insert(0, {str(HERE)!r})\n"
            "import durable_dispatcher as dd\n"
            f"with dd.open_store({str(self.path)!r}) as store:\n"
            "    store.facts()\n"
            "loaded = sorted(name for name in ('postgres_store', 'psycopg') if sys.modules.get(name))\n"
            "try:\n"
            "    dd.open_store('postgresql://nobody@/nothing')\n"
            "except dd.DurableError as error:\n"
            "    print(json.dumps([loaded, error.code]))\n"
        )
        done = subprocess.run([sys.executable, "-B", "-c", program], env=child_env(), capture_output=True,
                              timeout=CHILD_TIMEOUT_S)
        self.assertEqual((done.returncode, done.stderr), (0, b""))
        self.assertEqual(json.loads(done.stdout), [[], "STORE_DRIVER_MISSING"])

    def test_damaged_stored_json_is_a_store_error(self) -> None:
        dispatcher = self.dispatcher()
        write(dispatcher, "a")
        self.tamper("UPDATE operations SET data = '{\"draft_id\": '")
        self.assertDurable("STORE_INVALID", lambda: write(dispatcher, "b"))

    # Valid SQL values of the wrong kind, on an unknown row that dispatch, the status query and
    # recovery all read: each one is STORE_INVALID there, never TypeError / AttributeError.
    WRONG_KINDS = MappingProxyType({
        "epoch as text": "UPDATE operations SET lease_epoch = 'x'",
        "lease expiry as text": ("UPDATE operations SET state = 'in_progress', lease_owner = 'o', "
                                 "lease_expires_at = 'soon'"),
        "approval as a list": "UPDATE operations SET approval = '[1]'",
        "contract as a list": "UPDATE operations SET contract = '[]'",
        "arguments as text": "UPDATE operations SET arguments = '\"x\"'",
        "data as a number": "UPDATE operations SET data = '7'",
        "created_at as text": "UPDATE operations SET created_at = 'yesterday'",
        "request ref as a blob": "UPDATE operations SET request_ref = X'00'",
        "arguments as a blob": "UPDATE operations SET arguments = CAST('{}' AS BLOB)",  # JSON bytes, not text
        "a hint outside its table": "UPDATE operations SET recovery_hint = 'reboot'",
    })

    COLUMN_KINDS = ("epoch as text", "lease expiry as text", "created_at as text", "request ref as a blob")

    def test_wrong_kind_values_are_store_errors_everywhere(self) -> None:
        for index, (name, sql) in enumerate(self.WRONG_KINDS.items()):
            with self.subTest(value=name):
                self.path = self.dir / f"kinds-{index}.sqlite3"
                dispatcher = self.dispatcher(lease_ms=100)
                write(dispatcher, "a", fault="timeout_after_commit")
                self.tamper(sql)
                self.clock.advance(1_000)
                self.assertDurable("STORE_INVALID", lambda: write(dispatcher, "a"))
                self.assertDurable("STORE_INVALID", lambda: query(dispatcher, "q", op_tag="a"))
                self.assertDurable("STORE_INVALID", lambda: dd.recover(self.open_store()))
                if name in self.COLUMN_KINDS:  # the state view reads the columns, not the stored JSON
                    self.assertDurable("STORE_INVALID", lambda: dispatcher.operation_state(
                        ALICE, "create_refund_draft", KEY))

    def test_a_chain_head_that_vanishes_inside_the_settle_is_a_store_error(self) -> None:
        dispatcher = self.dispatcher()
        # Another writer's trigger removes the head row as soon as a settle creates it.
        self.tamper("CREATE TRIGGER eat_head AFTER INSERT ON audit_heads "
                    "BEGIN DELETE FROM audit_heads WHERE realm = NEW.realm; END")
        error = self.assertDurable("STORE_INVALID", lambda: write(dispatcher, "a"))
        self.assertEqual((error.operation_state, error.effect_possible), ("in_progress", True))
        self.assertEqual((self.row(dispatcher).state, count(self.path, "SELECT COUNT(*) FROM audit_chain"),
                          dispatcher.effect_count), ("in_progress", 0, 1))

    def test_wrong_kind_call_bindings_and_receipts_are_store_errors(self) -> None:
        dispatcher = self.dispatcher()
        write(dispatcher, "a", fault="timeout_after_commit")
        for fingerprint in ("7", '{"a": 1}', '[1, 2, 3, 4]', '["dispatch", "x", "y"]', '["dispatch", "x", "y", 5]',
                            '["dispatch", "x", "y", ["z"]]'):
            with self.subTest(fingerprint=fingerprint):
                self.tamper(f"UPDATE call_bindings SET fingerprint = '{fingerprint}'")
                self.assertDurable("STORE_INVALID", lambda: write(dispatcher, "a"))
        with self.subTest(fingerprint="a well-formed one as bytes"):  # JSON bytes, not text
            self.tamper("""UPDATE call_bindings SET fingerprint = CAST('["dispatch", "x", "y", "z"]' AS BLOB)""")
            self.assertDurable("STORE_INVALID", lambda: write(dispatcher, "a"))
        self.tamper("UPDATE downstream_receipts SET draft_id = X'41'")
        self.assertDurable("STORE_INVALID", lambda: query(dispatcher, "q", op_tag="a"))
        self.assertDurable("STORE_INVALID", lambda: dd.recover(self.open_store()))

    def test_facts_never_hold_the_path(self) -> None:
        store = self.open_store()
        facts = store.facts()
        self.assertEqual(facts, {"journal_mode": "wal", "synchronous": "NORMAL", "integrity": "ok", "operations": {},
                                 "effects": 0, "events": {"written": 0, "sent": 0}})
        self.assertNotIn(str(self.dir), json.dumps(facts))
        write(self.dispatcher(store), "a")
        write(self.dispatcher(store), "b", "idem-2", fault="rate_limited")
        self.assertEqual(dd.relay(store), 1)
        self.assertEqual(store.facts(), {"journal_mode": "wal", "synchronous": "NORMAL", "integrity": "ok",
                                         "operations": {"succeeded": 1, "released": 1}, "effects": 1,
                                         "events": {"written": 1, "sent": 1}})

    def test_store_error_translation(self) -> None:
        busy = sqlite3.OperationalError("database is locked")
        busy.sqlite_errorcode = 5  # type: ignore[attr-defined]
        locked = sqlite3.OperationalError("locked")
        locked.sqlite_errorcode = 262  # SQLITE_LOCKED_SHAREDCACHE: primary code 6
        notadb = sqlite3.DatabaseError("file is not a database")
        notadb.sqlite_errorcode = 26  # type: ignore[attr-defined]
        for error, code in ((busy, "STORE_BUSY"), (locked, "STORE_BUSY"), (notadb, "STORE_INVALID"),
                            (sqlite3.Error("other"), "STORE_FAILED")):
            with self.subTest(code=code):
                self.assertEqual(dd._store_error(error).code, code)

    def test_a_store_it_may_not_write_is_unreadable_only_while_it_is_opened(self) -> None:
        for result in (1544, 14):  # SQLITE_READONLY_DIRECTORY (primary 8), SQLITE_CANTOPEN
            with self.subTest(result=result):
                error = sqlite3.OperationalError("attempt to write a readonly database")
                error.sqlite_errorcode = result  # type: ignore[attr-defined]
                self.assertEqual((dd._store_error(error, opening=True).code, dd._store_error(error).code),
                                 ("STORE_UNREADABLE", "STORE_FAILED"))

    def test_a_full_disk_or_a_failed_write_while_opening_is_unreadable(self) -> None:
        # SQLITE_FULL, and the SQLITE_IOERR_WRITE a file size limit gives: the store could not be
        # opened, not STORE_FAILED's "retry under the same idempotency key".
        for result in (13, 778):
            with self.subTest(result=result):
                error = sqlite3.OperationalError("database or disk is full")
                error.sqlite_errorcode = result  # type: ignore[attr-defined]
                self.assertEqual((dd._store_error(error, opening=True).code, dd._store_error(error).code),
                                 ("STORE_UNREADABLE", "STORE_FAILED"))

    def test_a_store_whose_creation_failed_leaves_no_file(self) -> None:
        # Whatever stops the creation (a full disk, Ctrl-C), the file exclusive created goes with
        # it, and the side files beside it: a second `run` would refuse it as existing, `recover`
        # as damaged.
        for failure in (dd.DurableError("STORE_UNREADABLE"), KeyboardInterrupt()):
            with self.subTest(failure=type(failure).__name__):
                with mock.patch.object(dd.DurableStore, "_create_schema", side_effect=failure), \
                        self.assertRaises(type(failure)):
                    dd.DurableStore.open(self.path, exclusive=True, synchronous="NORMAL")
                self.assertEqual(list(self.dir.iterdir()), [])
        self.assertEqual(self.open_store(exclusive=True).integrity(), "ok")
        self.assertDurable("STORE_EXISTS", lambda: dd.DurableStore.open(self.path, exclusive=True))
        self.assertTrue(self.path.exists())  # a file that was there is never removed

    def test_a_refusal_is_unreadable_while_the_store_opens_and_failed_once_it_is_open(self) -> None:
        # SQLITE_READONLY (primary 8): the store could not be opened, nothing written; once it is
        # open, the same refusal of a step is STORE_FAILED's "retry under the same key".
        self.open_store().close()
        with DriverSays("PRAGMA synchronous", result=1032).installed():  # SQLITE_READONLY_CANTLOCK
            self.assertDurable("STORE_UNREADABLE", self.open_store)
        says = DriverSays("BEGIN IMMEDIATE", result=1032)
        with says.installed():
            store = self.open_store()
        self.assertEqual(says.seen, 0)  # opening a store that exists begins no write
        self.assertDurable("STORE_FAILED", store.begin)
        self.assertEqual((says.seen, store.in_transaction), (1, False))

    def test_a_commit_the_driver_refuses_is_rolled_back_and_answered_by_its_code(self) -> None:
        # Opening commits a snapshot read too: refused there, it is a store that could not be opened.
        self.open_store().close()
        with DriverSays("COMMIT", result=10).installed():  # SQLITE_IOERR
            self.assertDurable("STORE_UNREADABLE", self.open_store)
        for result, code in ((5, "STORE_BUSY"), (517, "STORE_BUSY"), (11, "STORE_INVALID"), (10, "STORE_FAILED")):
            with self.subTest(result=result):
                says = DriverSays("COMMIT", result=result, armed=False)
                with says.installed():
                    store = self.open_store()
                says.armed = True
                store.begin().execute("INSERT INTO key_epochs VALUES ('r', 't', 's', 'x', 'k', 7)")
                self.assertDurable(code, store.commit)
                self.assertFalse(store.in_transaction)
                self.assertEqual(count(self.path, "SELECT COUNT(*) FROM key_epochs"), 0)

    def test_a_first_switch_to_wal_is_retried_while_busy_for_at_most_the_busy_timeout(self) -> None:
        # Each try but the first waits WAL_SWITCH_PAUSE_S, so the tries are bounded by the timeout
        # however slow the machine; the first try is always made, and with no timeout it is the only one.
        for busy_timeout_ms in (0, 100):
            with self.subTest(busy_timeout_ms=busy_timeout_ms):
                self.new_store(f"wal-{busy_timeout_ms}")
                most_tries = 1 + int(busy_timeout_ms / 1000 / dd.WAL_SWITCH_PAUSE_S) + 1
                says = DriverSays("PRAGMA journal_mode", result=5, most=most_tries)
                started = time.monotonic()
                with says.installed():
                    self.assertDurable("STORE_BUSY", lambda: self.open_store(busy_timeout_ms=busy_timeout_ms))
                self.assertGreaterEqual(time.monotonic() - started, busy_timeout_ms / 1000)
                self.assertGreaterEqual(says.seen, 1)
                if busy_timeout_ms == 0:
                    self.assertEqual(says.seen, 1)
                else:
                    self.assertLessEqual(says.seen, most_tries)

    def test_integrity_names_every_fault_sqlite_finds(self) -> None:
        store = self.open_store()
        self.assertEqual(store.integrity(), "ok")
        faults = [("row 1 missing from index a",), ("row 2 missing from index a",)]
        with DriverSays("PRAGMA integrity_check", rows=faults).installed():
            store = self.open_store()
        self.assertEqual(store.integrity(), "row 1 missing from index a; row 2 missing from index a")

    def test_text_that_is_not_utf8_is_a_damaged_value(self) -> None:
        # The sqlite3 module cannot decode it when the row is fetched (its own error, no SQLite
        # code): STORE_INVALID from a replay and from verify-chain, never STORE_FAILED's "retry".
        with contextlib.closing(sqlite3.connect(":memory:")) as connection:
            connection.execute("CREATE TABLE t (x TEXT)")
            connection.execute("INSERT INTO t VALUES (CAST('a' || X'FF' AS TEXT))")
            with self.assertRaises(sqlite3.OperationalError) as caught:
                connection.execute("SELECT x FROM t").fetchall()
        self.assertEqual(dd._store_error(caught.exception).code, "STORE_INVALID")
        same_text = sqlite3.OperationalError(str(caught.exception))
        same_text.sqlite_errorcode = 1  # type: ignore[attr-defined]  # SQLite's own error: its text proves nothing
        self.assertEqual(dd._store_error(same_text).code, "STORE_FAILED")
        for index, (table, column, replayed) in enumerate((
                ("operations", "package", True), ("operations", "data", True), ("operations", "tenant", False),
                ("audit_chain", "entry", False), ("audit_heads", "realm", False))):
            with self.subTest(column=f"{table}.{column}"):
                self.new_store(f"utf8-{index}")
                dispatcher = self.dispatcher()
                write(dispatcher, "a")
                self.tamper(f"UPDATE {table} SET {column} = CAST({column} || X'FF' AS TEXT)")
                with dd.open_store(self.path, create=False) as store:
                    self.assertDurable("STORE_INVALID", lambda: dd.verify_chain(store))
                if replayed:
                    self.assertDurable("STORE_INVALID", lambda: write(dispatcher, "b"))


# --------------------------------------------------------------------------------------------
# 6 and 12. The ledger against the shipped fixture
# --------------------------------------------------------------------------------------------


def drive(dispatcher: td.Dispatcher, step: td.Step) -> dict[str, Any]:
    for change in step.world_changes:
        dispatcher.set_order_status(change.tenant, change.order_ref, change.status)
    if step.kind == "dispatch":
        return dispatcher.dispatch(step.proposal, step.context, step.principal, approval=step.approval,
                                   now=step.now, deadline=step.deadline, fault=step.fault)
    return dispatcher.query_operation_status(step.proposal, step.context, step.principal, now=step.now,
                                             fault=step.fault)


class TestFixtureParity(StoreCase):
    def test_fixture_passes_with_its_digests(self) -> None:
        summary = dd.run_fixture(td.load_fixture(FIXTURE), self.open_store())
        self.assertEqual((summary["passed"], summary["case_count"], summary["step_count"], summary["failures"]),
                         (True, 20, 30, []))

    def test_every_package_equals_the_in_memory_one_byte_for_byte(self) -> None:
        fixture = td.load_fixture(FIXTURE)
        store = self.open_store()
        for case in fixture.cases:
            memory = td.Dispatcher.from_world(fixture.world)
            durable = dd.DurableDispatcher.from_world(fixture.world, store=store, realm=case.id)
            for step in case.steps:
                with self.subTest(case=case.id, step=step.id):
                    self.assertEqual(canonical(drive(durable, step)), canonical(drive(memory, step)))
                    self.assertEqual(durable.effect_count, memory.effect_count)

    def test_one_case_runs_alone(self) -> None:
        summary = dd.run_fixture(td.load_fixture(FIXTURE), self.open_store(), case_id="idempotent-local-replay")
        self.assertEqual((summary["passed"], summary["case_count"], summary["step_count"]), (True, 1, 2))

    def test_unknown_case_is_refused(self) -> None:
        with self.assertRaises(td.BoundaryError) as caught:
            dd.run_fixture(td.load_fixture(FIXTURE), self.open_store(), case_id="no-such-case")
        self.assertEqual(caught.exception.code, "CLI_UNKNOWN_CASE")

    def test_a_failed_expectation_is_reported(self) -> None:
        data = FIXTURE.read_bytes().replace(b'"effect_count": 1', b'"effect_count": 2', 1)
        summary = dd.run_fixture(td.parse_fixture(data), self.open_store())
        self.assertFalse(summary["passed"])
        self.assertEqual([(f["field"], f["expected"], f["seen"]) for f in summary["failures"]],
                         [("effect_count", 2, 1)])


class TestIdempotency(StoreCase):
    def test_replay_after_completion_equals_the_in_memory_replay(self) -> None:
        dispatcher, memory = self.dispatcher(), reference()
        first = write(dispatcher, "a")
        self.assertEqual(canonical(first), canonical(write(memory, "a")))
        replay = write(dispatcher, "b")
        self.assertAnswer(replay, "local_replay")
        self.assertEqual(canonical(replay), canonical(write(memory, "b")))
        self.assertEqual(replay["execution"], {"operation_state": "succeeded", "handler_invoked": False, "effects": 0})
        self.assertEqual(dispatcher.effect_count, 1)
        self.assertEqual(dispatcher.stored_package(ALICE, "create_refund_draft", KEY), canonical(first))
        self.assertIsNone(dispatcher.stored_package(ALICE, "create_refund_draft", "idem-none"))  # no row
        write(dispatcher, "c", "idem-refused", fault="rate_limited")  # released before the downstream
        self.assertEqual(self.row(dispatcher, "idem-refused").state, "released")
        self.assertIsNone(dispatcher.stored_package(ALICE, "create_refund_draft", "idem-refused"))  # no package

    def test_the_host_views_check_the_key_before_reading(self) -> None:
        dispatcher = self.dispatcher()
        write(dispatcher, "a")

        class Key(str):
            pass

        views = (dispatcher.ledger_row, dispatcher.operation_state, dispatcher.stored_package)
        bad_keys = {"a dict": {"k": 1}, "an int": 5, "None": None, "a lone surrogate": "k\ud800",
                    "65 characters": "k" * 65, "a str subclass": Key(KEY)}
        for view in views:
            for name, key in bad_keys.items():
                with self.subTest(view=view.__name__, key=name):
                    self.assertBoundary("CONTEXT_INVALID", lambda: view(ALICE, "create_refund_draft", key))
            for tool in ("create refund", "", "t" * 65, Key("create_refund_draft")):
                with self.subTest(view=view.__name__, tool=tool):
                    self.assertBoundary("CONTEXT_INVALID", lambda: view(ALICE, tool, KEY))
            with self.subTest(view=view.__name__, principal="a tuple"):
                self.assertBoundary("PRINCIPAL_INVALID", lambda: view(("tenant-a", "alice", ("refunds.draft",)),
                                                                      "create_refund_draft", KEY))
        # The other side of each limit: a 64-character key and tool name are read (and hold no row).
        self.assertEqual((dispatcher.operation_state(ALICE, "t" * 64, "k" * 64),
                          dispatcher.operation_state(ALICE, "create_refund_draft", KEY)), ("none", "succeeded"))

    def test_sealed_packages_are_the_sealed_in_memory_ones_byte_for_byte(self) -> None:
        keys = td.parse_seal_keys({"format": "seal-keys-v1", "current": "k", "keys": [
            {"key_id": "k", "secret_hex": "11" * 32}]})
        dispatcher = self.dispatcher(seal_keys=keys)
        memory = td.Dispatcher(td.load_fixture(FIXTURE).world.orders, approvers=["approver-lee"], seal_keys=keys)
        for tag in ("a", "b"):  # the fresh write, then its replay
            with self.subTest(tag=tag):
                package = write(dispatcher, tag)
                self.assertEqual(canonical(package), canonical(write(memory, tag)))
                td.verify_package(package, seal_keys=keys, require_seal=True)
        self.assertEqual(json.loads(dispatcher.stored_package(ALICE, "create_refund_draft", KEY))["seal"]["key_id"],
                         "k")

    def test_replay_survives_a_new_connection(self) -> None:
        first = write(self.dispatcher(), "a")
        replay = write(self.dispatcher(self.open_store()), "b")
        self.assertEqual(replay["model_result"]["data"], first["model_result"]["data"])
        self.assertEqual(canonical(replay["model_result"]["data"]), canonical(first["model_result"]["data"]))

    def test_replay_is_a_defensive_copy(self) -> None:
        dispatcher = self.dispatcher()
        write(dispatcher, "a")
        replay = write(dispatcher, "b")
        replay["model_result"]["data"]["reason"] = "tampered"
        self.assertEqual(write(dispatcher, "c")["model_result"]["data"]["reason"], "duplicate")

    def test_stored_failures_replay_as_unknown_without_running(self) -> None:
        for fault, code in (("handler_raises", "HANDLER_FAILED"), ("invalid_output", "OUTPUT_CONTRACT_VIOLATION"),
                            ("timeout_after_commit", "OUTCOME_UNKNOWN")):
            with self.subTest(fault=fault):
                dispatcher, memory = self.dispatcher(realm=fault.replace("_", "-")), reference()
                first = write(dispatcher, "a", fault=fault)
                self.assertAnswer(first, code)
                self.assertEqual(canonical(first), canonical(write(memory, "a", fault=fault)))
                again = write(dispatcher, "b")
                self.assertAnswer(again, "OUTCOME_UNKNOWN")
                self.assertEqual(canonical(again), canonical(write(memory, "b")))
                self.assertEqual((dispatcher.effect_count, again["execution"]["handler_invoked"]), (1, False))
                self.assertEqual(dispatcher.stored_package(ALICE, "create_refund_draft", KEY), canonical(first))
                self.assertEqual(self.row(dispatcher).recovery_hint, "query_status")

    def test_same_key_other_intent_conflicts_and_leaves_the_row(self) -> None:
        dispatcher = self.dispatcher()
        write(dispatcher, "a")
        before = self.row(dispatcher)
        self.clock.advance(5)
        conflict = write(dispatcher, "b", reason="damaged")
        self.assertAnswer(conflict, "IDEMPOTENCY_CONFLICT")
        self.assertEqual(self.row(dispatcher), before)
        self.assertEqual(dispatcher.effect_count, 1)

    def test_same_key_other_profile_conflicts(self) -> None:
        dispatcher = self.dispatcher()
        write(dispatcher, "a")
        proposal = refund()
        ctx = td.CallContext("Anthropic", "Messages", "anthropic-messages-v1", "msg-b", "toolu-b", "op-b", KEY)
        package = dispatcher.dispatch(proposal, ctx, ALICE, approval=approval_for(ctx, proposal), now=NOW)
        self.assertAnswer(package, "IDEMPOTENCY_CONFLICT")

    def test_same_key_under_another_tenant_or_subject_does_not_collide(self) -> None:
        dispatcher = self.dispatcher()
        answers = [write(dispatcher, f"p{index}", "k-shared", principal=principal)
                   for index, principal in enumerate((ALICE, BOB, ALICE_B))]
        self.assertEqual([package["model_result"]["delivery"] for package in answers], ["fresh"] * 3)
        self.assertEqual(dispatcher.effect_count, 3)
        self.assertEqual(count(self.path, "SELECT COUNT(*) FROM operations WHERE idempotency_key = 'k-shared'"), 3)

    def test_missing_key_is_refused_and_writes_nothing(self) -> None:
        dispatcher = self.dispatcher()
        self.assertAnswer(write(dispatcher, "a", None), "IDEMPOTENCY_KEY_REQUIRED")
        self.assertEqual(count(self.path, "SELECT COUNT(*) FROM operations"), 0)
        self.assertEqual(dispatcher.effect_count, 0)

    def test_malformed_key_is_refused_and_writes_nothing(self) -> None:
        dispatcher = self.dispatcher()
        for key in ("has space", "x" * (td.MAX_IDENTIFIER_LENGTH + 1), "-leading", ""):
            with self.subTest(key=key), self.assertRaises(td.BoundaryError) as caught:
                write(dispatcher, "a", key)
            self.assertEqual(caught.exception.code, "CONTEXT_INVALID")
        self.assertEqual(count(self.path, "SELECT COUNT(*) FROM operations"), 0)

    def test_retryable_refusal_releases_the_claim(self) -> None:
        for fault, code in (("rate_limited", "RATE_LIMITED"), ("timeout_before_execution", "DEADLINE_EXCEEDED")):
            with self.subTest(fault=fault):
                dispatcher = self.dispatcher(realm=fault.replace("_", "-"))
                self.assertAnswer(write(dispatcher, "a", fault=fault), code)
                row = self.row(dispatcher)
                self.assertEqual((row.state, row.lease_epoch, row.lease_owner, row.lease_expires_at),
                                 ("released", 1, None, None))
                retry = write(dispatcher, "b")
                self.assertAnswer(retry, "fresh")
                self.assertEqual((self.row(dispatcher).lease_epoch, dispatcher.effect_count), (2, 1))

    def test_released_key_may_carry_another_intent(self) -> None:
        dispatcher = self.dispatcher()
        write(dispatcher, "a", fault="rate_limited")
        self.assertAnswer(write(dispatcher, "b", reason="damaged"), "fresh")
        self.assertEqual(self.row(dispatcher).state, "succeeded")

    def test_reads_leave_no_ledger_row(self) -> None:
        dispatcher = self.dispatcher()
        package = dispatcher.dispatch({"name": "get_order", "arguments": {"order_ref": "ORDER-7"}},
                                      context("r", None), ALICE, now=NOW)
        self.assertAnswer(package, "fresh")
        self.assertEqual(count(self.path, "SELECT COUNT(*) FROM operations"), 0)

    def test_call_identity_binding_survives_a_new_connection(self) -> None:
        write(self.dispatcher(), "a")
        later = self.dispatcher(self.open_store())
        self.assertAnswer(write(later, "a", "idem-other"), "CALL_CONFLICT")

    def test_status_query_identity_cannot_start_a_dispatch(self) -> None:
        dispatcher = self.dispatcher()
        write(dispatcher, "a", fault="timeout_after_commit")
        self.assertAnswer(query(dispatcher, "q", op_tag="a"), "receipt_reconciled")
        proposal = refund()
        ctx = replace(context("q"), operation_id="op-a")
        package = dispatcher.dispatch(proposal, ctx, ALICE, approval=approval_for(ctx, proposal), now=NOW)
        self.assertAnswer(package, "CALL_CONFLICT")

    def test_status_query_reconciles_once_with_one_event(self) -> None:
        dispatcher, memory = self.dispatcher(), reference()
        write(dispatcher, "a", fault="timeout_after_commit")
        write(memory, "a", fault="timeout_after_commit")
        reconciled = query(dispatcher, "q", op_tag="a")
        self.assertEqual(canonical(reconciled), canonical(query(memory, "q", op_tag="a")))
        self.assertAnswer(query(dispatcher, "q2", op_tag="a"), "local_replay")
        row = self.row(dispatcher)
        self.assertEqual((row.state, row.receipt_ref is not None, row.recovery_hint), ("reconciled", True, None))
        self.assertEqual(count(self.path, "SELECT COUNT(*) FROM outbox"), 1)
        self.assertEqual(canonical(write(dispatcher, "b")), canonical(write(memory, "b")))

    def test_status_query_of_nothing_is_not_found(self) -> None:
        self.assertAnswer(query(self.dispatcher(), "q", "idem-none"), "NOT_FOUND")

    def test_reconcile_through_the_record_map_needs_a_reconciled_record(self) -> None:
        dispatcher = self.dispatcher()
        write(dispatcher, "a", fault="timeout_after_commit")
        record = self.row(dispatcher).record()
        for key, state in (((ALICE.tenant, ALICE.subject, "create_refund_draft", None), "reconciled"),
                           ((ALICE.tenant, ALICE.subject, "create_refund_draft", KEY), "succeeded")):
            with self.subTest(state=state), self.assertRaises(td.BoundaryError) as caught:
                dispatcher.operations.reconcile(key, replace(record, state=state), {})
            self.assertEqual(caught.exception.code, "LIFECYCLE_VIOLATION")
        self.assertEqual(self.row(dispatcher).state, "unknown")


# --------------------------------------------------------------------------------------------
# 6-8. Leases and fencing, interleaved in one process through the checkpoint hook
# --------------------------------------------------------------------------------------------


KEY_A = bytes(range(32))  # the core tests' fixed keys: the known-answer test pins what they give
KEY_B = bytes(range(100, 132))
SEAL_KEYS = td.parse_seal_keys({"format": "seal-keys-v1", "current": "k-a", "keys": [
    {"key_id": "k-a", "secret_hex": KEY_A.hex()}, {"key_id": "k-b", "secret_hex": KEY_B.hex()}]})
MALLORY = td.parse_seal_keys({"format": "seal-keys-v1", "current": "k-a", "keys": [  # the right id, not the key
    {"key_id": "k-a", "secret_hex": bytes(32).hex()}]})
STRANGER = td.parse_seal_keys({"format": "seal-keys-v1", "current": "k-z", "keys": [  # a key id nobody holds
    {"key_id": "k-z", "secret_hex": KEY_B.hex()}]})
# The shipped fixture through the durable runner, sealed with KEY_A: nine realms hold a chain, and
# this is the digest of their heads (ChainReport.heads_sha256), on SQLite and on PostgreSQL alike.
KNOWN_DURABLE_HEADS = "65ce78e21d2617fe2d91944c877df1497ec8285358f308e76c84778945d52b0e"
LEDGER_TABLES = ("operations", "approval_uses", "key_epochs", "call_bindings", "downstream_fences",
                 "downstream_receipts", "outbox", "broker_messages", "consumer_offsets", "inbox",
                 "consumer_effects", "audit_heads", "audit_chain")


def resealed(package: dict[str, Any], keys: td.SealKeys | None, **data: str) -> dict[str, Any]:
    """The package with its data changed and every digest recomputed, sealed with ``keys``: what
    someone who can edit the database, but does not hold the key, can forge."""
    forged = json.loads(canonical(package))
    forged["model_result"]["data"].update(data)
    audit = forged["protected_audit"]
    spec = td.REGISTRY[audit["tool_contract"]["tool"]]
    audit["result_sha256"] = td.model_result_sha256(forged["model_result"])
    evidence = {"execution": forged["execution"], "redactions": audit["redactions"],
                "resource_revision": audit["resource_revision"]}
    audit["call_binding_sha256"] = td.spec_call_binding_sha256(
        spec, audit["provider_context"], audit["request_sha256"], audit["result_sha256"], audit["downstream"],
        audit["approval"], evidence)
    forged["seal"] = td.seal_view(keys, "package", audit["call_binding_sha256"])
    return forged


def sql_text(value: Any) -> str:
    """A canonical JSON value as an SQL string literal (for a tamper written in plain SQL)."""
    return "'" + canonical(value).decode("utf-8").replace("'", "''") + "'"


class TestSealedLedger(StoreCase):
    """The ledger's evidence: each settle and each reconciliation stores its package and appends
    its chain entry in the same transaction; a replay or a settled status answer verifies the
    stored package (seal required with keys) and the row's columns against it first. Every tamper
    below made the old code answer the edited values as a verified local_replay."""

    def sealed(self, **options: Any) -> dd.DurableDispatcher:
        return self.dispatcher(seal_keys=SEAL_KEYS, **options)

    def test_the_hosts_seal_keys_are_copied_where_they_enter(self) -> None:
        secrets = dict(SEAL_KEYS.secrets)
        dispatcher = self.dispatcher(seal_keys=td.SealKeys(SEAL_KEYS.current, secrets))
        write(dispatcher, "a")
        secrets[SEAL_KEYS.current] = bytes(range(200, 232))  # the host's dict changes afterwards
        self.assertAnswer(write(dispatcher, "b"), "local_replay")  # its own rows still verify
        self.assertIsNone(self.verify_chain().fault)

    def dump(self) -> list[list[tuple[Any, ...]]]:
        return [sorted(rows(self.path, f"SELECT * FROM {table}"), key=repr) for table in LEDGER_TABLES]

    def verify_chain(self, keys: td.SealKeys | None = SEAL_KEYS, **options: Any) -> dd.ChainReport:
        with dd.open_store(self.path, create=False) as store:
            return dd.verify_chain(store, seal_keys=keys, **options)

    def assertTampered(self, dispatcher: dd.DurableDispatcher, *, query_too: bool = True) -> None:
        """The replay and the status query are refused with STORE_TAMPERED, and nothing changed."""
        before = self.dump()
        self.assertDurable("STORE_TAMPERED", lambda: write(dispatcher, "replay"))
        if query_too:
            self.assertDurable("STORE_TAMPERED", lambda: query(dispatcher, "q-tampered", op_tag="a"))
        self.assertEqual(self.dump(), before)  # not even the replay's call binding was written

    def test_settle_stores_the_sealed_package_and_chains_it_in_one_transaction(self) -> None:
        dispatcher = self.sealed()
        first = write(dispatcher, "a")
        self.assertEqual(first["seal"]["key_id"], "k-a")
        self.assertEqual(dispatcher.stored_package(ALICE, "create_refund_draft", KEY), canonical(first))
        chain = rows(self.path, "SELECT realm, entry_index, previous_sha256, entry_sha256, entry FROM audit_chain")
        line, digest = td.audit_entry_line(first, index=0, previous_sha256=td.GENESIS_SHA256, seal_keys=SEAL_KEYS)
        self.assertEqual(chain, [("default", 0, td.GENESIS_SHA256, digest, line.decode("utf-8"))])
        self.assertEqual(rows(self.path, "SELECT realm, entries, head_sha256 FROM audit_heads"), [("default", 1, digest)])
        self.assertAnswer(write(dispatcher, "b"), "local_replay")  # an untouched row answers
        report = self.verify_chain()
        self.assertEqual((report.fault, report.entries, report.rows, report.sealed, dict(report.heads)),
                         (None, 1, 1, True, {"default": digest}))

    def test_a_settle_that_dies_before_its_commit_leaves_no_entry(self) -> None:
        dispatcher = self.sealed(checkpoint=raise_at("after_outbox_write"))
        with self.assertRaises(Boom):
            write(dispatcher, "a")
        self.assertEqual(rows(self.path, "SELECT COUNT(*) FROM audit_chain"), [(0,)])
        self.assertEqual(rows(self.path, "SELECT COUNT(*) FROM audit_heads"), [(0,)])

    # One raw edit of one column of a settled (succeeded) row each.
    COLUMN_EDITS = MappingProxyType({
        "data": "UPDATE operations SET data = replace(data, '\"draft_id\":\"DRAFT-', '\"draft_id\":\"DRAFT-0')",
        "state": "UPDATE operations SET state = 'unknown', expires_at = NULL",
        "approval": "UPDATE operations SET approval = replace(approval, 'approver-lee', 'approver-eve')",
        "receipt_ref": "UPDATE operations SET receipt_ref = 'rc-forged'",
        "arguments": "UPDATE operations SET arguments = replace(arguments, 'duplicate', 'other')",
        "resource_revision": "UPDATE operations SET resource_revision = 9",
        "request_sha256": "UPDATE operations SET request_sha256 = '" + "a" * 64 + "'",
        "operation_id": "UPDATE operations SET operation_id = 'op-other'",
        "provider": "UPDATE operations SET provider = 'Anthropic', api_family = 'Messages'",
        "contract": "UPDATE operations SET contract = replace(contract, 'contract.v2', 'contract.v1')",
        "package": "UPDATE operations SET package = NULL",  # a success is always settled with its package
    })

    def test_each_column_edit_is_refused_as_tampered(self) -> None:
        for index, (column, sql) in enumerate(self.COLUMN_EDITS.items()):
            with self.subTest(column=column):
                self.new_store(f"column-{index}")
                dispatcher = self.sealed()
                write(dispatcher, "a")
                self.tamper(sql)
                self.assertTampered(dispatcher)
                report = self.verify_chain()
                self.assertEqual((report.fault.realm, report.fault.index, report.fault.error.code),
                                 ("default", None if column == "package" else 0, "STORE_TAMPERED"))
                self.assertEqual((dict(report.heads), report.entries, report.rows), ({}, 0, 0))
                self.assertIs(report.sealed, False)

    def test_a_fault_report_keeps_the_realms_verified_before_it_and_is_never_sealed(self) -> None:
        write(self.sealed(realm="a-good"), "a")
        write(self.sealed(realm="b-bad"), "a")
        self.tamper("UPDATE operations SET resource_revision = 9 WHERE realm = 'b-bad'")
        [(head,)] = rows(self.path, "SELECT head_sha256 FROM audit_heads WHERE realm = 'a-good'")
        report = self.verify_chain()
        self.assertEqual((report.fault.realm, report.fault.error.code, dict(report.heads), report.entries, report.rows),
                         ("b-bad", "STORE_TAMPERED", {"a-good": head}, 1, 1))
        self.assertIs(report.sealed, False)

    def flag_dispatcher(self) -> dd.DurableDispatcher:
        """A host's own write tool with an integer and a boolean, where Python's 1 == True."""
        ref = {"type": "string", "pattern": "^ORDER-[0-9]{1,12}$", "maxLength": 18}
        fields = {"order_ref": ref, "count": {"type": "integer", "minimum": 0, "maximum": 9}, "flag": {"type": "boolean"}}
        schema = {"type": "object", "properties": fields, "required": list(fields), "additionalProperties": False}
        contracts = td.parse_contracts(td.canonical_json({"format": "tool-contracts-v1", "tools": [{
            "name": "set_flag", "description": "Set a flag on an order.", "effect": "write",
            "required_role": "refunds.draft", "resource_field": "order_ref", "input_schema": schema,
            "output_schema": schema, "bound_fields": ["order_ref", "count", "flag"], "producer": "flags",
            "revisions": {part: f"set_flag.{part}.v1" for part in ("contract", "input", "output", "effect",
                                                                    "handler", "producer")},
            "provenance": {"source": "host", "server_name": None, "server_version": None, "protocol_version": None,
                           "input_schema_sha256": None, "output_schema_sha256": None},
            "hints": {"read_only": None, "destructive": None, "idempotent": None, "open_world": None}}]}))

        def set_flag(call: td.ExecuteCall) -> td.Execution:
            return td.Execution(dict(call.arguments), "committed", td.derived_ref("rc-", "flag", call.request_ref))

        self.flag_contracts = contracts
        return self.sealed(registry=contracts, hooks={"set_flag": td.ToolHooks(execute=set_flag, resolve=own_order)})

    def flag_write(self, dispatcher: dd.DurableDispatcher, tag: str) -> dict[str, Any]:
        proposal = {"name": "set_flag", "arguments": {"order_ref": "ORDER-7", "count": 1, "flag": True}}
        ctx = context(tag)
        approval = td.approval_for_call(approver="approver-lee", principal=ALICE, context=ctx,
                                        spec=self.flag_contracts["set_flag"], arguments=proposal["arguments"],
                                        expires_at=NOW + 600)
        return dispatcher.dispatch(proposal, ctx, ALICE, approval=approval, now=NOW, deadline=NOW + 30)

    def test_a_json_kind_edit_that_python_calls_equal_is_refused(self) -> None:
        # 1 == True and True == 1 in Python; in JSON they are two values, and the package says which.
        for index, column in enumerate(("data", "arguments")):
            with self.subTest(column=column):
                self.new_store(f"kind-{index}")
                dispatcher = self.flag_dispatcher()
                first = self.flag_write(dispatcher, "a")
                self.assertEqual(first["model_result"]["data"], {"order_ref": "ORDER-7", "count": 1, "flag": True})
                self.assertAnswer(self.flag_write(dispatcher, "b"), "local_replay")  # untouched: its own set verifies it
                self.tamper(f"UPDATE operations SET {column} = replace(replace(replace({column}, "
                            "'\"count\":1', '\"count\":X'), '\"flag\":true', '\"flag\":1'), 'X', 'true')")
                edited = rows(self.path, f"SELECT {column} FROM operations")[0][0]
                self.assertIn('"count":true', edited)
                self.assertIn('"flag":1', edited)
                before = self.dump()
                self.assertDurable("STORE_TAMPERED", lambda: self.flag_write(dispatcher, "replay"))
                self.assertEqual(self.dump(), before)
                self.assertEqual(self.verify_chain(registry=self.flag_contracts).fault.error.code, "STORE_TAMPERED")

    def test_a_host_tool_set_replays_and_its_chain_verifies_with_that_set(self) -> None:
        dispatcher = self.flag_dispatcher()
        first = self.flag_write(dispatcher, "a")
        replay = self.flag_write(dispatcher, "b")
        self.assertAnswer(replay, "local_replay")
        self.assertEqual(replay["model_result"]["data"], first["model_result"]["data"])
        self.assertIsNone(self.verify_chain(registry=self.flag_contracts).fault)
        # The shipped set does not know the tool: its packages are no evidence under that set.
        self.assertEqual(self.verify_chain().fault.error.code, "STORE_TAMPERED")

    def test_a_row_moved_to_another_subject_is_refused_to_that_subject(self) -> None:
        dispatcher = self.sealed()
        write(dispatcher, "a")
        self.tamper("UPDATE operations SET subject = 'bob'")
        before = self.dump()
        self.assertDurable("STORE_TAMPERED", lambda: write(dispatcher, "bob", principal=BOB))
        self.assertEqual(self.dump(), before)

    def test_a_package_resealed_without_the_key_is_refused(self) -> None:
        dispatcher = self.sealed()
        first = write(dispatcher, "a")
        forged = resealed(first, MALLORY, draft_id="DRAFT-0000000000000000")
        self.tamper(f"UPDATE operations SET package = {sql_text(forged)}, data = {sql_text(forged['model_result']['data'])}")
        self.assertTampered(dispatcher)
        # The digests alone hold: a store without keys cannot tell (what the seal adds).
        unsealed = self.dispatcher()
        self.assertEqual(write(unsealed, "b")["model_result"]["data"]["draft_id"], "DRAFT-0000000000000000")

    def test_a_package_sealed_under_an_unknown_key_id_or_unsealed_is_refused(self) -> None:
        dispatcher = self.sealed()
        for key, keys in (("idem-stranger", STRANGER), ("idem-unsealed", None)):
            with self.subTest(key=key):
                first = write(dispatcher, key, key)
                forged = resealed(first, keys)  # the same data, a seal this store cannot accept
                self.tamper(f"UPDATE operations SET package = {sql_text(forged)} WHERE idempotency_key = '{key}'")
                before = self.dump()
                self.assertDurable("STORE_TAMPERED", lambda: write(dispatcher, f"{key}-replay", key))
                self.assertEqual(self.dump(), before)

    def test_a_row_reconciled_by_a_status_query_stores_and_chains_that_answer(self) -> None:
        dispatcher = self.sealed()
        unknown = write(dispatcher, "a", fault="timeout_after_commit")
        reconciled = query(dispatcher, "q", op_tag="a")
        self.assertAnswer(reconciled, "receipt_reconciled")
        self.assertEqual(dispatcher.stored_package(ALICE, "create_refund_draft", KEY), canonical(reconciled))
        entries = [json.loads(entry)["package"] for (entry,) in
                   rows(self.path, "SELECT entry FROM audit_chain ORDER BY entry_index")]
        self.assertEqual(entries, [json.loads(canonical(unknown)), json.loads(canonical(reconciled))])
        self.assertAnswer(write(dispatcher, "b"), "local_replay")
        self.assertAnswer(query(dispatcher, "q2", op_tag="a"), "local_replay")
        self.assertIsNone(self.verify_chain().fault)
        self.tamper(self.COLUMN_EDITS["data"])
        self.assertTampered(dispatcher)

    def test_a_row_reconciled_by_recovery_is_vouched_for_by_its_receipt(self) -> None:
        for column in ("data", "receipt_ref"):
            with self.subTest(column=column):
                self.new_store(f"recovered-{column}")
                dispatcher = self.sealed()
                write(dispatcher, "a", fault="timeout_after_commit")
                self.assertEqual([outcome.after for outcome in dd.recover(self.open_store())], ["reconciled"])
                self.assertAnswer(write(dispatcher, "b"), "local_replay")  # its first answer (unknown) + its receipt
                self.assertIsNone(self.verify_chain().fault)
                self.tamper(self.COLUMN_EDITS[column])
                self.assertTampered(dispatcher)

    def test_a_row_no_holder_answered_may_hold_nothing_it_cannot_derive(self) -> None:
        dispatcher = self.sealed(lease_ms=100, checkpoint=raise_at("after_downstream_commit"))
        with self.assertRaises(Boom):
            write(dispatcher, "a")
        self.clock.advance(1_000)
        later = self.sealed()
        self.assertAnswer(write(later, "b"), "OUTCOME_UNKNOWN")  # taken over: unknown, and no package
        self.assertIsNone(self.row(later).package)
        self.assertIsNone(self.verify_chain().fault)
        original = rows(self.path, "SELECT state, data, receipt_ref, request_ref FROM operations")[0]
        restore = ("UPDATE operations SET state = '{}', data = NULL, receipt_ref = NULL, request_ref = '{}'"
                   .format(original[0], original[3]))
        self.assertEqual(original[:3], ("unknown", None, None))
        for name, sql in (("data", "UPDATE operations SET data = '{\"draft_id\":\"DRAFT-0\"}'"),
                          ("receipt_ref", "UPDATE operations SET receipt_ref = 'rc-forged'"),
                          ("request_ref", "UPDATE operations SET request_ref = 'rq-forged'"),
                          ("state", "UPDATE operations SET state = 'succeeded'")):
            with self.subTest(column=name):
                self.tamper(sql)
                self.assertDurable("STORE_TAMPERED", lambda: write(later, f"c-{name}"))
                self.tamper(restore)
                self.assertAnswer(write(later, f"d-{name}"), "OUTCOME_UNKNOWN")

    # -- released rows: free only once they verify as released ---------------------------------

    def test_a_success_edited_to_released_is_refused_not_run_again(self) -> None:
        # Its package says succeeded, which no release holds; with the package removed too, the
        # downstream holds a receipt of its request, which no release leaves behind.
        for index, (name, sql, at) in enumerate((
                ("state", "UPDATE operations SET state = 'released', expires_at = NULL", 0),
                ("state and package", "UPDATE operations SET state = 'released', expires_at = NULL, package = NULL",
                 None))):
            with self.subTest(tamper=name):
                self.new_store(f"released-{index}")
                dispatcher = self.sealed()
                self.assertAnswer(write(dispatcher, "a"), "fresh")
                request_ref = self.row(dispatcher).request_ref
                self.tamper(sql)
                self.assertTampered(dispatcher)
                self.assertEqual(dispatcher.effect_count, 1)
                fault = self.verify_chain().fault
                self.assertEqual((fault.realm, fault.index, fault.error.code, fault.request_ref),
                                 ("default", at, "STORE_TAMPERED", request_ref))

    def test_a_released_row_whose_package_lost_its_seal_is_refused_not_run_again(self) -> None:
        dispatcher = self.sealed()
        write(dispatcher, "a", fault="handler_fails_before_commit")
        self.assertAnswer(query(dispatcher, "q", op_tag="a"), "OPERATION_NOT_EXECUTED")  # released, its package kept
        [(text,)] = rows(self.path, "SELECT package FROM operations")
        package = json.loads(text)
        self.assertEqual(package["seal"]["key_id"], "k-a")
        package["seal"] = {"key_id": None, "hmac_sha256": None}  # every digest still holds
        self.tamper("UPDATE operations SET package = '%s'" % td.canonical_json(package).decode("utf-8"))
        self.assertTampered(dispatcher)
        self.assertEqual(dispatcher.effect_count, 0)

    def test_an_unknown_write_that_committed_edited_to_released_is_refused(self) -> None:
        # Its unknown package is one a release may hold (receipt_absent keeps it), and its columns
        # match it: only the receipt says the write committed.
        dispatcher = self.sealed()
        self.assertAnswer(write(dispatcher, "a", fault="timeout_after_commit"), "OUTCOME_UNKNOWN")
        self.tamper("UPDATE operations SET state = 'released', recovery_hint = NULL")
        self.assertTampered(dispatcher)
        fault = self.verify_chain().fault
        self.assertEqual((fault.index, fault.error.code), (0, "STORE_TAMPERED"))
        self.assertEqual(dispatcher.effect_count, 1)

    def test_a_claim_that_meets_a_tampered_release_under_its_lock_takes_nothing(self) -> None:
        dispatcher = self.sealed()
        write(dispatcher, "a")
        self.tamper("UPDATE operations SET state = 'released', expires_at = NULL")
        late = self.sealed()
        late.operations.ledger.read = lambda key: None  # type: ignore[method-assign]  # read before the edit
        before = self.dump()
        self.assertDurable("STORE_TAMPERED", lambda: write(late, "b"))
        self.assertEqual(self.dump(), before)  # no claim, no approval use, no call binding
        self.assertEqual(late.effect_count, 1)

    def test_every_release_a_write_leaves_verifies_and_frees_its_key(self) -> None:
        # A refusal before the downstream (no package); an unknown write a fenced receipt query
        # proved empty, by a status query or by recovery (its unknown answer kept). Each verifies,
        # reads as free, and its key runs once more; the chain then holds both answers.
        for index, (name, settle, package) in enumerate((
                ("refused before the downstream", None, False),
                ("proved empty by a status query", "query", True),
                ("proved empty by recovery", "recover", True))):
            with self.subTest(release=name):
                self.new_store(f"release-{index}")
                dispatcher = self.sealed()
                write(dispatcher, "a", fault="rate_limited" if settle is None else "handler_fails_before_commit")
                if settle == "query":
                    self.assertAnswer(query(dispatcher, "q", op_tag="a"), "OPERATION_NOT_EXECUTED")
                if settle == "recover":
                    self.assertEqual([outcome.after for outcome in dd.recover(self.open_store())], ["released"])
                row = self.row(dispatcher)
                self.assertEqual((row.state, row.package is not None), ("released", package))
                self.assertIsNone(self.verify_chain().fault)
                self.assertAnswer(query(dispatcher, "q-free", op_tag="a"), "NOT_FOUND")
                self.assertAnswer(write(dispatcher, "b"), "fresh")
                self.assertEqual(dispatcher.effect_count, 1)
                report = self.verify_chain()
                self.assertEqual((report.fault, report.entries, report.rows), (None, 2 if package else 1, 1))

    # -- verify-chain: the whole database ------------------------------------------------------

    def chained(self, writes: int = 4) -> None:
        """``writes`` sealed writes in the default realm: a chain of as many entries."""
        dispatcher = self.sealed()
        for number in range(writes):
            self.assertAnswer(write(dispatcher, f"w{number}", f"idem-{number}"), "fresh")

    def verify_cli(self, *keys: td.SealKeys) -> tuple[int, dict[str, Any], str]:
        argv = ["verify-chain", "--store", str(self.path)]
        if keys:
            path = self.dir / "keys.json"
            secrets_of = [{"key_id": key_id, "secret_hex": secret.hex()}
                          for key_id, secret in keys[0].secrets.items()]
            path.write_text(json.dumps({"format": "seal-keys-v1", "current": keys[0].current, "keys": secrets_of}))
            argv += ["--seal-key", str(path)]
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            status = dd.main(argv)
        text = out.getvalue()
        self.assertNotIn("Traceback", text)
        self.assertNotIn(str(self.dir), text)
        return status, json.loads(text), text

    def assertChainFault(self, code: str, index: int | None, **extra: Any) -> None:
        status, body, _ = self.verify_cli(SEAL_KEYS)
        failure = body["failure"]
        self.assertEqual((status, body["passed"], failure["realm"], failure["index"], failure["code"]),
                         (1, False, "default", index, code))
        for name, value in extra.items():
            self.assertEqual(failure[name], value)

    def test_verify_chain_passes_a_whole_store(self) -> None:
        self.chained()
        status, body, _ = self.verify_cli(SEAL_KEYS)
        heads = rows(self.path, "SELECT head_sha256 FROM audit_heads WHERE realm = 'default'")[0][0]
        self.assertEqual((status, body), (0, {"passed": True, "realms": 1, "entries": 4, "rows": 4, "sealed": True,
                                              "heads_sha256": td.canonical_sha256({"default": heads})}))
        status, body, _ = self.verify_cli()  # no keys: the chain's digests hold, and it says it is not sealed
        self.assertEqual((status, body["sealed"]), (0, False))

    # Each raw edit of the chain table, and the first bad entry verify-chain names for it.
    CHAIN_EDITS = MappingProxyType({
        "edited": (("UPDATE audit_chain SET entry = replace(entry, '\"effects\":1', '\"effects\":0') "
                    "WHERE entry_index = 2",), "AUDIT_ENTRY_EDITED", 2),
        "deleted": (("DELETE FROM audit_chain WHERE entry_index = 1",), "AUDIT_ENTRY_DELETED", 1),
        "reordered": (("UPDATE audit_chain SET entry_index = 100 WHERE entry_index = 1",
                       "UPDATE audit_chain SET entry_index = 1 WHERE entry_index = 2",
                       "UPDATE audit_chain SET entry_index = 2 WHERE entry_index = 100"), "AUDIT_ENTRY_REORDERED", 1),
        "inserted (a copy)": (("UPDATE audit_chain SET entry_index = entry_index + 10 WHERE entry_index >= 2",
                               "UPDATE audit_chain SET entry_index = entry_index - 9 WHERE entry_index >= 12",
                               "INSERT INTO audit_chain SELECT realm, 2, '" + "e" * 64 + "', entry_sha256, entry "
                               "FROM audit_chain WHERE entry_index = 1"), "AUDIT_ENTRY_INSERTED", 2),
        "truncated at the end": (("DELETE FROM audit_chain WHERE entry_index = 3",), "AUDIT_TRUNCATED", 3),
        "a column, not the line": (("UPDATE audit_chain SET entry_sha256 = '" + "0" * 64 + "' WHERE entry_index = 1",),
                                   "AUDIT_ENTRY_EDITED", 1),
        "the head row": (("UPDATE audit_heads SET entries = 3",), "AUDIT_ENTRY_INSERTED", 3),
        "the head row's digest": (("UPDATE audit_heads SET head_sha256 = '" + "0" * 64 + "'",), "AUDIT_ENTRY_EDITED", 3),
        "the head row deleted": (("DELETE FROM audit_heads",), "AUDIT_ENTRY_INSERTED", 0),
    })

    def test_verify_chain_names_the_first_bad_entry(self) -> None:
        for index, (name, (statements, code, at)) in enumerate(self.CHAIN_EDITS.items()):
            with self.subTest(tamper=name):
                self.new_store(f"chain-{index}")
                self.chained()
                for sql in statements:
                    self.tamper(sql)
                self.assertChainFault(code, at)

    def test_verify_chain_refuses_an_unknown_key_and_a_forged_reseal(self) -> None:
        self.chained()
        status, body, _ = self.verify_cli(STRANGER)
        self.assertEqual((status, body["failure"]["code"], body["failure"]["index"]), (1, "AUDIT_KEY_UNKNOWN", 0))
        # An entry re-chained by someone without the key: every digest recomputed, the seal is not the key's.
        entry = json.loads(rows(self.path, "SELECT entry FROM audit_chain WHERE entry_index = 3")[0][0])
        entry["package"]["execution"]["effects"] = 0
        body_only = {name: value for name, value in entry.items() if name not in ("entry_sha256", "seal")}
        entry["entry_sha256"] = td.audit_entry_sha256(body_only)
        entry["seal"] = MALLORY.seal("audit-entry", entry["entry_sha256"])
        self.tamper(f"UPDATE audit_chain SET entry = {sql_text(entry)}, entry_sha256 = '{entry['entry_sha256']}' "
                    "WHERE entry_index = 3")
        self.tamper(f"UPDATE audit_heads SET head_sha256 = '{entry['entry_sha256']}'")
        self.assertChainFault("AUDIT_ENTRY_EDITED", 3)

    def test_verify_chain_checks_every_stored_package_against_its_entry(self) -> None:
        self.chained()
        first = json.loads(rows(self.path, "SELECT package FROM operations WHERE idempotency_key = 'idem-1'")[0][0])
        request_ref = first["protected_audit"]["downstream"]["request_ref"]
        cases = {
            "a column edit": ("UPDATE operations SET data = replace(data, '\"draft_id\":\"DRAFT-', "
                              "'\"draft_id\":\"DRAFT-0') WHERE idempotency_key = 'idem-1'", 1),
            "a package in no entry": (f"UPDATE operations SET package = {sql_text(resealed(first, MALLORY))} "
                                      "WHERE idempotency_key = 'idem-1'", None),
            "another row's package": ("UPDATE operations SET package = (SELECT package FROM operations AS o "
                                      "WHERE o.idempotency_key = 'idem-0') WHERE idempotency_key = 'idem-1'", 0),
            # Moved to another tool or subject, a row no replay of its own key finds any more.
            "the tool column": ("UPDATE operations SET tool = 'get_order' WHERE idempotency_key = 'idem-1'", 1),
            "the subject column": ("UPDATE operations SET subject = 'bob' WHERE idempotency_key = 'idem-1'", 1),
        }
        original = rows(self.path, "SELECT data, package FROM operations WHERE idempotency_key = 'idem-1'")[0]
        for name, (sql, index) in cases.items():
            with self.subTest(tamper=name):
                self.tamper(sql)
                self.assertChainFault("STORE_TAMPERED", index, request_ref=request_ref)
                self.tamper(f"UPDATE operations SET data = {sql_text(json.loads(original[0]))}, "
                            f"package = {sql_text(json.loads(original[1]))}, tool = 'create_refund_draft', "
                            "subject = 'alice' WHERE idempotency_key = 'idem-1'")
                self.assertEqual(self.verify_cli(SEAL_KEYS)[0], 0)

    def test_a_row_rolled_back_to_an_earlier_entry_of_its_operation_is_named(self) -> None:
        # Every move that stores a package chains it in the same transaction: a row's package is
        # its operation's latest entry. This one is put back to its first answer (unknown), which
        # its own columns then match.
        dispatcher = self.sealed()
        unknown = write(dispatcher, "a", fault="timeout_after_commit")
        self.assertAnswer(query(dispatcher, "q", op_tag="a"), "receipt_reconciled")
        request_ref = self.row(dispatcher).request_ref
        status, body, _ = self.verify_cli(SEAL_KEYS)
        self.assertEqual((status, body["entries"], body["rows"]), (0, 2, 1))  # both answers, the row holds the last
        self.tamper(f"UPDATE operations SET state = 'unknown', package = {sql_text(unknown)}, receipt_ref = NULL, "
                    "data = NULL, expires_at = NULL, recovery_hint = 'query_status'")
        self.assertChainFault("STORE_TAMPERED", 0, request_ref=request_ref)

    def test_a_settled_row_whose_approval_column_was_emptied_is_tampered(self) -> None:
        dispatcher = self.sealed()
        write(dispatcher, "a")
        row = self.row(dispatcher)
        self.assertIsNone(replace(row, approval=None).record().approval)
        self.tamper("UPDATE operations SET approval = NULL")
        self.assertTampered(dispatcher)
        fault = self.verify_chain().fault
        self.assertEqual((fault.error.code, fault.index, fault.request_ref), ("STORE_TAMPERED", 0, row.request_ref))
        self.assertEqual(fault.view(), {"realm": "default", "index": 0, **fault.error.to_json(),
                                        "request_ref": row.request_ref})

    def test_an_unsealed_chain_verified_with_keys_fails_at_its_first_entry(self) -> None:
        write(self.dispatcher(), "a")  # written without keys
        fault = self.verify_chain(SEAL_KEYS).fault
        self.assertEqual((fault.realm, fault.index, fault.error.code, fault.request_ref),
                         ("default", 0, "AUDIT_UNSEALED", None))
        self.assertEqual(fault.view(), {"realm": "default", "index": 0, **fault.error.to_json()})  # no request_ref
        self.assertIsNone(self.verify_chain(None).fault)

    def test_a_chain_past_the_logs_byte_limit_is_unreadable_at_no_entry(self) -> None:
        self.chained(1)
        size = len(rows(self.path, "SELECT entry FROM audit_chain")[0][0].encode("utf-8")) + 1
        for limit, fault in ((size, None), (size - 1, ("AUDIT_LOG_UNREADABLE", None))):
            with self.subTest(limit=limit), mock.patch.object(td, "MAX_AUDIT_LOG_BYTES", limit):
                report = self.verify_chain()
                self.assertEqual(None if report.fault is None else (report.fault.error.code, report.fault.index), fault)

    def test_a_sealed_entry_holding_an_unsealed_package_fails_at_its_row(self) -> None:
        # A host that gave the ledger its keys and the boundary none: every entry is sealed, no
        # package is, and a stored package must hold its seal when the store has keys.
        store = self.open_store()
        operations = dd.LedgerOperations(store, seal_keys=SEAL_KEYS, defer_bindings=True)
        package = write(td.Dispatcher(ORDERS, approvers=APPROVERS, operations=operations), "a")
        self.assertEqual(package["seal"], {"key_id": None, "hmac_sha256": None})
        report = self.verify_chain(SEAL_KEYS)
        self.assertEqual((report.fault.index, report.fault.error.code, report.rows),
                         (0, "STORE_TAMPERED", 0))

    def test_verify_chain_reads_one_snapshot_while_writers_go_on(self) -> None:
        self.chained(2)
        writer = self.sealed()
        check_rows = dd._verify_realm_rows

        def write_meanwhile(*args: Any) -> Any:  # a write commits after the chain was read
            self.assertAnswer(write(writer, "meanwhile", "idem-meanwhile"), "fresh")
            return check_rows(*args)

        with mock.patch.object(dd, "_verify_realm_rows", write_meanwhile):
            report = self.verify_chain()
        self.assertEqual((report.fault, report.entries, report.rows), (None, 2, 2))
        self.assertEqual((self.verify_chain().entries, self.verify_chain().rows), (3, 3))

    def test_verify_chain_exits_2_for_a_store_it_cannot_open(self) -> None:
        self.chained(1)
        missing = self.dir / "missing.sqlite3"
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            status = dd.main(["verify-chain", "--db", str(missing)])
        body = json.loads(out.getvalue())
        self.assertEqual((status, body["passed"], body["error"]["code"]), (2, False, "STORE_UNREADABLE"))
        self.assertFalse(missing.exists())
        self.assertNotIn(str(self.dir), out.getvalue())

    def test_known_answer_the_shipped_fixture_sealed_with_the_fixed_key(self) -> None:
        store = self.open_store()
        summary = dd.run_fixture(td.load_fixture(FIXTURE), store, seal_keys=SEAL_KEYS)
        self.assertIs(summary["passed"], True)
        report = dd.verify_chain(store, seal_keys=SEAL_KEYS)
        self.assertEqual((report.fault, len(report.heads), report.entries, report.rows, report.sealed),
                         (None, 9, 9, 9, True))
        self.assertEqual(report.heads_sha256, KNOWN_DURABLE_HEADS)

    def test_two_connections_append_in_turn_after_each_other_s_head(self) -> None:
        store = self.open_store()
        package = json.loads(canonical(write(self.sealed(store=store), "a")))  # entry 0
        tx = store.begin()
        dd.Ledger(store, seal_keys=SEAL_KEYS).append_entry(tx, "default", td.canonical_text(package))  # holds the head
        outcome: list[Any] = []

        def other_host() -> None:
            try:
                with dd.open_store(self.path, create=False, synchronous="NORMAL") as second:
                    with second.transaction() as other:
                        dd.Ledger(second, seal_keys=SEAL_KEYS).append_entry(other, "default", td.canonical_text(package))
                outcome.append("appended")
            except BaseException as error:  # reported to the test, never lost in the thread
                outcome.append(error)

        thread = threading.Thread(target=other_host)
        thread.start()
        thread.join(0.5)
        self.assertTrue(thread.is_alive())  # it waits for the head, it does not read a stale one
        store.commit()
        thread.join(CHILD_TIMEOUT_S)
        self.assertEqual(outcome, ["appended"])
        chain = rows(self.path, "SELECT entry_index, previous_sha256, entry_sha256 FROM audit_chain ORDER BY entry_index")
        self.assertEqual([entry[0] for entry in chain], [0, 1, 2])
        self.assertEqual([entry[1] for entry in chain], [td.GENESIS_SHA256, chain[0][2], chain[1][2]])
        report = self.verify_chain()
        self.assertEqual((report.fault, report.entries), (None, 3))

    def test_the_chain_cannot_fork(self) -> None:
        dispatcher = self.sealed()
        write(dispatcher, "a")
        write(dispatcher, "b", key="idem-2")
        head = rows(self.path, "SELECT entry_sha256 FROM audit_chain WHERE entry_index = 0")[0][0]
        for sql in (  # a second entry at an index taken, or after a head already followed
                f"INSERT INTO audit_chain VALUES ('default', 1, '{'e' * 64}', '{'f' * 64}', '{{}}')",
                f"INSERT INTO audit_chain VALUES ('default', 7, '{head}', '{'f' * 64}', '{{}}')"):
            with self.subTest(sql=sql):
                with self.assertRaises(Exception) as caught:
                    self.tamper(sql)
                self.assertIn(type(caught.exception).__name__, ("IntegrityError", "UniqueViolation"))


class Pause:
    """A checkpoint hook that runs `action` once, the first time `point` is reached."""

    def __init__(self, point: str, action: Callable[[], Any]) -> None:
        self.point, self.action, self.result, self.fired = point, action, None, False

    def __call__(self, reached: str) -> None:
        if reached == self.point and not self.fired:
            self.fired = True
            self.result = self.action()


class TestApprovalConsumption(StoreCase):
    """One approval, one write, across keys, processes and restarts (a UNIQUE row per approval)."""

    def test_a_used_approval_under_a_new_key_is_consumed_with_no_effect(self) -> None:
        dispatcher = self.dispatcher()
        proposal = refund()
        first = context("a")
        approval = approval_for(first, proposal)
        self.assertAnswer(dispatcher.dispatch(proposal, first, ALICE, approval=approval, now=NOW), "fresh")
        again = self.dispatcher(self.open_store())  # another connection: the use is on disk
        for ctx in (context("b", "idem-other"), replace(context("c", "idem-third"), operation_id="op-z")):
            with self.subTest(key=ctx.idempotency_key):
                package = again.dispatch(proposal, ctx, ALICE, approval=approval, now=NOW)
                self.assertAnswer(package, "APPROVAL_CONSUMED")
                self.assertEqual(package["execution"]["effects"], 0)
        self.assertEqual(dispatcher.effect_count, 1)
        self.assertAnswer(again.dispatch(proposal, first, ALICE, approval=approval, now=NOW), "local_replay")

    def test_a_released_claim_frees_its_approval(self) -> None:
        dispatcher = self.dispatcher()
        proposal = refund()
        ctx = context("a")
        approval = approval_for(ctx, proposal)
        self.assertAnswer(dispatcher.dispatch(proposal, ctx, ALICE, approval=approval, now=NOW,
                                              fault="rate_limited"), "RATE_LIMITED")
        self.assertEqual(count(self.path, "SELECT COUNT(*) FROM approval_uses"), 0)
        self.assertAnswer(dispatcher.dispatch(proposal, ctx, ALICE, approval=approval, now=NOW), "fresh")
        self.assertEqual(count(self.path, "SELECT COUNT(*) FROM approval_uses"), 1)

    def test_two_claims_with_one_approval_claim_once_and_atomically(self) -> None:
        operations = self.dispatcher().operations
        ledger, store = operations.ledger, operations.store
        intent = dd.Intent("0" * 64, td.PROVIDER_PROFILES["openai-responses-v1"], "op", "{}", "rq", "st")
        first = dd.OperationKey("default", "t", "s", "tool", "k1")
        second = dd.OperationKey("default", "t", "s", "tool", "k2")
        with store.transaction() as tx:
            ledger.claim(tx, first, intent, owner="one", lease_ms=1_000, approval_ref="a" * 64)
        with self.assertRaises(td.BoundaryError) as caught:
            with store.transaction() as tx:
                ledger.claim(tx, second, intent, owner="two", lease_ms=1_000, approval_ref="a" * 64)
        self.assertEqual(caught.exception.code, "APPROVAL_CONSUMED")
        self.assertIsNone(ledger.read(second))  # the refused claim left no row: one transaction
        self.assertEqual(count(self.path, "SELECT COUNT(*) FROM operations"), 1)

    def unknown_before_its_commit(self) -> tuple[dd.DurableDispatcher, dd.DurableDispatcher]:
        """A write left unknown by a handler that failed before its downstream commit (no receipt),
        and a second host's dispatcher on the same database."""
        def fails_before_commit(call: td.HandlerCall) -> td.HandlerResult:
            raise OSError("reset before the commit")

        first = self.dispatcher(handlers={"create_refund_draft": fails_before_commit})
        self.assertAnswer(write(first, "a"), "HANDLER_FAILED")
        return first, self.dispatcher(self.open_store())

    def test_no_receipt_is_believed_for_a_row_that_is_no_longer_unknown(self) -> None:
        first, second = self.unknown_before_its_commit()
        record_key = (ALICE.tenant, ALICE.subject, "create_refund_draft", KEY)
        record = first.operations.find(record_key)
        # Another host's status query settles the row between this host's read and its walk.
        self.assertAnswer(query(second, "q", op_tag="a"), "OPERATION_NOT_EXECUTED")
        settled = self.row(first)
        self.assertIs(first.operations.confirm_absent(record_key, record), False)
        self.assertEqual(self.row(first), settled)  # no new fence, no move
        # And a key that holds no row at all is never "absent with authority".
        self.assertIs(first.operations.confirm_absent((ALICE.tenant, ALICE.subject, "create_refund_draft", "idem-none"),
                                                      record), False)

    def test_a_walk_fenced_off_by_another_walk_answers_unavailable(self) -> None:
        first, second = self.unknown_before_its_commit()
        fence_unknown = first.operations.ledger.fence_unknown
        answers: list[dict[str, Any]] = []

        def raced(row: dd.LedgerRow) -> int | None:
            epoch = fence_unknown(row)  # this walk's fence ...
            answers.append(answer_of(lambda: query(second, "q2", op_tag="a")))  # ... overtaken by another's
            return epoch

        with mock.patch.object(first.operations.ledger, "fence_unknown", raced):
            self.assertAnswer(query(first, "q1", op_tag="a"), "RECEIPT_UNAVAILABLE")
        self.assertEqual(answers[0]["answer"], "OPERATION_NOT_EXECUTED")
        row = self.row(first)
        self.assertEqual((row.state, row.lease_epoch, first.effect_count), ("released", 3, 0))
        self.assertEqual(count(self.path, "SELECT epoch FROM downstream_fences"), 3)

    def test_the_negative_receipt_walk_releases_the_key(self) -> None:
        def fails_before_commit(call: td.HandlerCall) -> td.HandlerResult:
            raise OSError("reset before the commit")

        dispatcher = self.dispatcher(handlers={"create_refund_draft": fails_before_commit})
        self.assertAnswer(write(dispatcher, "a"), "HANDLER_FAILED")
        self.assertEqual(self.row(dispatcher).state, "unknown")
        self.assertAnswer(query(dispatcher, "q", op_tag="a"), "OPERATION_NOT_EXECUTED")
        row = self.row(dispatcher)
        self.assertEqual((row.state, dispatcher.effect_count), ("released", 0))
        # The fence was raised before "no receipt" was believed: a late holder cannot commit.
        self.assertEqual(count(self.path, "SELECT epoch FROM downstream_fences"), row.lease_epoch)


class TestLeasesAndFencing(StoreCase):
    def test_a_claim_whose_commit_answer_was_lost_says_what_may_be_true(self) -> None:
        # The claim's COMMIT lands, and its answer is lost on the way back (a broken connection).
        store = self.open_store()
        dispatcher = self.dispatcher(store, lease_ms=100)
        real_commit = store.commit
        lost = []

        def commit() -> None:
            real_commit()
            if not lost:
                lost.append(True)
                raise dd.DurableError("STORE_UNREACHABLE")

        store.commit = commit  # type: ignore[method-assign]
        error = self.assertDurable("STORE_UNREACHABLE", lambda: write(dispatcher, "a"))
        self.assertEqual(error.to_json()["operation_state"], "none")
        self.assertEqual((error.to_json()["effect_possible"], error.to_json()["step_committed"]), (False, None))
        # What is true here: the row is in_progress under this caller's lease, and nothing ran it.
        self.assertEqual((self.row(dispatcher).state, dispatcher.effect_count), ("in_progress", 0))
        self.assertBoundary("OPERATION_IN_PROGRESS", lambda: write(dispatcher, "a"))
        self.clock.advance(100)
        self.assertAnswer(write(dispatcher, "a"), "OUTCOME_UNKNOWN")  # its lease expired: it may have run
        self.assertAnswer(query(dispatcher, "q", op_tag="a"), "OPERATION_NOT_EXECUTED")  # fenced: it did not
        self.assertEqual(dispatcher.effect_count, 0)

    def holders(self, point: str, action: Callable[[dd.DurableDispatcher], Any], lease_ms: int = 1_000, *,
                raw: bool = False) -> tuple[dd.DurableDispatcher, dd.DurableDispatcher, Pause]:
        """A holder that pauses at `point` while `other` (own connection) runs `action`; the
        pause keeps the action's answer (or, raw, whatever it returned)."""
        other = self.dispatcher(self.open_store(), lease_ms=lease_ms)
        pause = Pause(point, (lambda: action(other)) if raw else (lambda: answer_of(lambda: action(other))))
        holder = self.dispatcher(self.open_store(), lease_ms=lease_ms, checkpoint=pause)
        return holder, other, pause

    def later(self, ms: int, action: Callable[[dd.DurableDispatcher], Any]) -> Callable[[dd.DurableDispatcher], Any]:
        """`action`, run once the shared clock has moved `ms` on (a lease of 1,000 ms dies at +1,000)."""
        def run(other: dd.DurableDispatcher) -> Any:
            self.clock.advance(ms)
            return action(other)
        return run

    def test_live_claim_answers_in_progress_and_runs_nothing(self) -> None:
        holder, other, pause = self.holders("after_claim", lambda d: write(d, "b"))
        self.assertAnswer(write(holder, "a"), "fresh")
        self.assertEqual(pause.result, {"answer": "OPERATION_IN_PROGRESS", "retryable": True})
        self.assertEqual(holder.effect_count, 1)
        self.assertAnswer(write(other, "b"), "local_replay")

    def test_live_in_progress_answers_in_progress(self) -> None:
        holder, other, pause = self.holders("after_downstream_commit", lambda d: write(d, "b"))
        self.assertAnswer(write(holder, "a"), "fresh")
        self.assertEqual(pause.result["answer"], "OPERATION_IN_PROGRESS")
        self.assertEqual(holder.effect_count, 1)

    def test_live_claim_with_another_intent_conflicts(self) -> None:
        holder, _other, pause = self.holders("after_claim", lambda d: write(d, "b", reason="other"))
        write(holder, "a")
        self.assertEqual(pause.result["answer"], "IDEMPOTENCY_CONFLICT")

    def test_expired_start_is_taken_over_as_unknown_and_the_old_holder_refused(self) -> None:
        # The claim is committed with its start: a holder dead before the downstream is a dead
        # in-progress write (it may have acted), so a retry answers unknown and never runs it.
        holder, other, pause = self.holders("after_claim", self.later(1_000, lambda d: write(d, "b")))
        self.assertDurable("LEASE_LOST", lambda: write(holder, "a"))
        self.assertEqual(pause.result["answer"], "OUTCOME_UNKNOWN")
        row = self.row(other)
        self.assertEqual((row.state, row.lease_epoch, row.operation_id, holder.effect_count),
                         ("unknown", 2, "op-a", 1))
        self.assertAnswer(query(other, "q", op_tag="a"), "receipt_reconciled")
        self.assertEqual(other.effect_count, 1)

    def test_claim_one_millisecond_before_expiry_is_still_live(self) -> None:
        holder, _other, pause = self.holders("after_claim", self.later(999, lambda d: write(d, "b")))
        self.assertAnswer(write(holder, "a"), "fresh")
        self.assertEqual(pause.result["answer"], "OPERATION_IN_PROGRESS")

    def test_expired_in_progress_becomes_unknown_and_never_reruns(self) -> None:
        holder, other, pause = self.holders("after_downstream_commit", self.later(1_000, lambda d: write(d, "b")))
        lost = self.assertDurable("LEASE_LOST", lambda: write(holder, "a"))
        # Refused at its settle, yet not a store error: it carries no state of the operation
        # (whose row another holder now owns), only its code and fixed message.
        self.assertEqual((lost.operation_state, lost.effect_possible, sorted(lost.to_json())),
                         (None, None, ["code", "message", "retryable"]))
        self.assertEqual(pause.result["answer"], "OUTCOME_UNKNOWN")
        row = self.row(other)
        self.assertEqual((row.state, row.lease_epoch, row.recovery_hint, row.package),
                         ("unknown", 2, "query_status", None))
        self.assertAnswer(write(other, "c"), "OUTCOME_UNKNOWN")
        self.assertAnswer(query(other, "q", op_tag="c"), "STATUS_CONFLICT")  # another operation id
        self.assertAnswer(query(other, "q2", op_tag="a"), "receipt_reconciled")
        self.assertEqual(other.effect_count, 1)

    def test_old_holder_downstream_commit_is_fenced_after_recovery(self) -> None:
        recovered: list[Any] = []
        store = self.open_store()

        def slow_handler(call: td.HandlerCall) -> td.HandlerResult:
            self.clock.advance(1_000)
            recovered.extend(dd.recover(store))
            return td.handle_create_refund_draft(call)

        holder = self.dispatcher(self.open_store(), lease_ms=1_000,
                                 handlers={"create_refund_draft": slow_handler})
        self.assertDurable("LEASE_LOST", lambda: write(holder, "a"))
        self.assertEqual([(o.before, o.after) for o in recovered], [("in_progress", "released")])
        self.assertEqual(holder.effect_count, 0)
        row = self.row(holder)
        self.assertEqual((row.state, row.lease_epoch), ("released", 2))
        self.assertEqual(count(self.path, "SELECT epoch FROM downstream_fences"), 2)
        retry = write(self.dispatcher(store), "b")
        self.assertAnswer(retry, "fresh")
        self.assertEqual((self.row(holder).lease_epoch, holder.effect_count), (3, 1))

    def test_expired_but_untouched_holder_may_still_commit(self) -> None:
        holder = self.dispatcher(self.open_store(), lease_ms=1_000, checkpoint=Pause(
            "after_downstream_commit", lambda: self.clock.advance(5_000)))
        self.assertAnswer(write(holder, "a"), "fresh")
        self.assertEqual(self.row(holder).state, "succeeded")

    def test_query_on_a_live_lease_answers_in_progress(self) -> None:
        holder, _other, pause = self.holders("after_downstream_commit", lambda d: query(d, "q", op_tag="a"))
        write(holder, "a")
        self.assertEqual(pause.result["answer"], "OPERATION_IN_PROGRESS")

    def test_query_on_an_expired_claim_releases_it(self) -> None:
        late_query = self.later(1_000, lambda d: query(d, "q", op_tag="a"))
        holder, other, pause = self.holders("after_claim", late_query)
        self.assertDurable("LEASE_LOST", lambda: write(holder, "a"))
        # The fenced negative-receipt walk: the old holder's late downstream commit is refused.
        self.assertEqual(pause.result["answer"], "OPERATION_NOT_EXECUTED")
        self.assertEqual((self.row(other).state, self.row(other).lease_epoch, other.effect_count), ("released", 3, 0))

    def test_query_on_an_expired_in_progress_reconciles_from_the_receipt(self) -> None:
        late_query = self.later(1_000, lambda d: query(d, "q", op_tag="a"))
        holder, other, pause = self.holders("after_downstream_commit", late_query)
        self.assertDurable("LEASE_LOST", lambda: write(holder, "a"))
        self.assertEqual(pause.result["answer"], "receipt_reconciled")
        self.assertEqual((self.row(other).state, other.effect_count), ("reconciled", 1))

    def test_claim_of_a_live_key_returns_the_row_to_answer(self) -> None:
        def claim(other: dd.DurableDispatcher) -> Any:
            with other.operations.store.transaction() as tx:
                return other.operations.ledger.claim(
                    tx, dd.OperationKey("default", ALICE.tenant, ALICE.subject, "create_refund_draft", KEY),
                    dd.Intent("0" * 64, td.PROVIDER_PROFILES["openai-responses-v1"], "op", "{}", "rq", "st"),
                    owner="other", lease_ms=1_000)
        holder, _other, pause = self.holders("after_claim", claim, raw=True)
        write(holder, "a")
        row = pause.result
        self.assertIsInstance(row, dd.LedgerRow)
        self.assertEqual((row.state, row.lease_epoch, row.operation_id), ("in_progress", 1, "op-a"))

    def test_claim_lost_after_a_stale_read_answers_in_progress(self) -> None:
        def stale_write(other: dd.DurableDispatcher) -> Any:
            other.operations.ledger.read = lambda key: None  # type: ignore[method-assign]  # read before the holder's claim
            return write(other, "b")
        holder, other, pause = self.holders("after_claim", stale_write)
        self.assertAnswer(write(holder, "a"), "fresh")
        self.assertEqual(pause.result, {"answer": "OPERATION_IN_PROGRESS", "retryable": True})
        self.assertEqual(holder.effect_count, 1)

    def test_a_settled_key_found_at_claim_after_a_stale_read_is_replayed(self) -> None:
        store = self.open_store()
        self.assertAnswer(write(self.dispatcher(store), "a"), "fresh")
        late = self.dispatcher(store)
        late.operations.ledger.read = lambda key: None  # type: ignore[method-assign]  # read before it settled
        self.assertAnswer(write(late, "b"), "local_replay")
        self.assertEqual(late.effect_count, 1)

    def test_a_release_whose_commit_fails_says_the_key_is_as_it_was(self) -> None:
        store = self.open_store()
        dispatcher = self.dispatcher(store)
        real_commit = store.commit

        def commit() -> None:  # the claim-and-release commit fails; the call binding's after it does not
            store.commit = real_commit  # type: ignore[method-assign]
            store.rollback()
            raise dd.DurableError("STORE_UNREACHABLE")

        store.commit = commit  # type: ignore[method-assign]
        error = self.assertDurable("STORE_UNREACHABLE", lambda: write(dispatcher, "a", fault="rate_limited"))
        self.assertEqual((error.to_json()["operation_state"], error.to_json()["effect_possible"]), ("none", False))
        self.assertEqual((dispatcher.effect_count, self.row(dispatcher)), (0, None))

    def test_a_binding_written_by_another_process_after_our_read_is_a_call_conflict(self) -> None:
        # The call identity was free when this dispatch read it; another process bound it to another
        # request before this claim: the claim's transaction refuses it, and nothing is claimed.
        store = self.open_store()
        self.assertAnswer(write(self.dispatcher(store), "a", key="k-other", reason="other"), "fresh")
        late = self.dispatcher(store)
        late.operations._calls.read = lambda identity: None  # type: ignore[method-assign]
        self.assertEqual(answer_of(lambda: write(late, "a"))["answer"], "CALL_CONFLICT")
        self.assertIsNone(late.operations._pending)
        self.assertIsNone(self.row(late))
        self.assertAnswer(write(late, "c", key="k-next"), "fresh")

    def test_a_live_lease_is_never_expired_by_a_reader(self) -> None:
        expired: list[str] = []

        def spy(other: dd.DurableDispatcher) -> Any:
            original = other.operations.ledger.expire
            other.operations.ledger.expire = lambda row, event: expired.append(event) or original(row, event)  # type: ignore
            return [answer_of(lambda: write(other, "b"))["answer"],
                    answer_of(lambda: query(other, "q", op_tag="a"))["answer"]]
        holder, _other, pause = self.holders("after_downstream_commit", spy, raw=True)
        write(holder, "a")
        self.assertEqual((pause.result, expired), (["OPERATION_IN_PROGRESS"] * 2, []))

    def test_an_expired_claim_of_the_same_intent_is_taken_over_at_the_next_epoch(self) -> None:
        # A row left claimed (not started) by a dead holder: only the same intent takes it over, and
        # only once its lease is dead; the new lease is one epoch above, still a claim.
        store = self.open_store()
        dispatcher = self.dispatcher(store, lease_ms=100)
        call, record = self.admitted(dispatcher, "a")
        other_call, _ = self.admitted(self.dispatcher(store, realm="other"), "b", reason="other")
        key = dd.OperationKey("spare", ALICE.tenant, ALICE.subject, "create_refund_draft", KEY)
        intent = dd.Intent.of(call, record)
        ledger = dispatcher.operations.ledger
        with store.transaction() as tx:
            first = ledger.claim(tx, key, intent, owner="one", lease_ms=100)
        self.assertEqual((first.state, first.epoch), ("claimed", 1))
        row = ledger.read(key)
        self.assertEqual((row.state, row.lease_owner), ("claimed", "one"))  # not written started
        expiry = row.lease_expires_at
        self.assertEqual(dd.claim_event(row, call, expiry - 1), None)  # still live
        self.assertEqual(dd.claim_event(row, call, expiry), "take_over")
        self.assertEqual(dd.claim_event(row, None, expiry), None)  # no call to compare with
        self.assertEqual(dd.claim_event(row, other_call, expiry), None)  # another intent: answered
        self.assertEqual(dd.claim_event(replace(row, state="in_progress"), call, expiry), None)
        self.assertEqual(dd.claim_event(replace(row, state="released", lease_expires_at=None), None, 0), "claim")
        self.clock.advance(99)
        with store.transaction() as tx:
            live = ledger.claim(tx, key, intent, owner="two", lease_ms=100)
        self.assertIsInstance(live, dd.LedgerRow)
        self.assertEqual((live.state, live.lease_epoch, live.lease_owner), ("claimed", 1, "one"))
        self.clock.advance(1)
        with store.transaction() as tx:
            taken = ledger.claim(tx, key, intent, owner="two", lease_ms=100)
        self.assertEqual((taken.state, taken.epoch, taken.owner), ("claimed", 2, "two"))
        row = ledger.read(key)
        self.assertEqual((row.state, row.lease_epoch, row.lease_owner, row.lease_expires_at),
                         ("claimed", 2, "two", self.clock.now + 100))

    def claimed_and_expired(self, realm: str) -> tuple[dd.LedgerOperations, Any, td.OperationRecord]:
        """A store for `realm` holding a key claimed (not started) by a holder that died; its lease
        (100 ms) dies on the shared clock's next 100 ms. With the call and record that claimed it."""
        store = self.open_store()
        call, record = self.admitted(self.dispatcher(store, realm=f"{realm}-calls"), "a")
        operations = dd.LedgerOperations(store, realm=realm, lease_ms=100)
        key = operations.key(call.record_key)
        with store.transaction() as tx:
            operations.ledger.claim(tx, key, dd.Intent.of(call, record), owner="dead", lease_ms=100)
        return operations, call, record

    def test_the_store_takes_over_an_expired_claim_only_once_its_lease_is_dead(self) -> None:
        operations, call, record = self.claimed_and_expired("spare")
        self.assertBoundary("OPERATION_IN_PROGRESS", lambda: operations.answer(call))  # live: in progress
        self.clock.advance(100)
        self.assertIsNone(operations.answer(call))  # dead: the write may claim it
        claim = operations.claim(call, record, "b" * 64)
        self.assertEqual((claim.key, claim.record.state, claim.token.state, claim.token.epoch),
                         (call.record_key, "claimed", "claimed", 2))
        started = operations.start(claim)
        self.assertEqual((started.key, started.record.state, started.token),
                         (call.record_key, "in_progress", dd.Lease(claim.token.key, "in_progress", 2,
                                                                   claim.token.owner, claim.token.request_ref)))
        row = operations.ledger.read(claim.token.key)
        self.assertEqual((row.state, row.lease_epoch, row.lease_owner), ("in_progress", 2, claim.token.owner))
        self.assertTrue(operations.approval_used("b" * 64))

    def test_a_status_query_releases_an_expired_claim(self) -> None:
        operations, call, _record = self.claimed_and_expired("spare")
        self.clock.advance(100)
        self.assertIsNone(operations.find(call.record_key))
        row = operations.ledger.read(operations.key(call.record_key))
        self.assertEqual((row.state, row.lease_epoch, row.lease_owner), ("released", 2, None))

    def test_recovery_releases_a_dead_claim_and_asks_no_downstream(self) -> None:
        # A claim never reached the downstream: its key is freed with no fence and no receipt query.
        operations, call, _record = self.claimed_and_expired("spare")
        key = operations.key(call.record_key)
        downstream = rows(self.path, "SELECT * FROM downstream_fences")  # the write that claimed, in its realm
        self.assertEqual(dd.recover(self.open_store()),
                         (dd.RecoveryOutcome("spare", key.tool, key.idempotency_key, "claimed", "live", None),))
        self.clock.advance(100)
        self.assertEqual(dd.recover(self.open_store()),
                         (dd.RecoveryOutcome("spare", key.tool, key.idempotency_key, "claimed", "released", None),))
        row = operations.ledger.read(key)
        self.assertEqual((row.state, row.lease_epoch, row.lease_owner), ("released", 2, None))
        self.assertEqual(rows(self.path, "SELECT * FROM downstream_fences"), downstream)

    def test_a_claim_written_apart_is_started_or_released_in_a_transaction_of_its_own(self) -> None:
        for event, state in (("start", "in_progress"), ("release", "released")):
            with self.subTest(event=event):
                operations, call, record = self.claimed_and_expired(event)
                row = operations.ledger.read(operations.key(call.record_key))
                lease = dd.Lease(row.key, "claimed", 1, "dead", row.request_ref)
                claim = td.Claim(call.record_key, replace(record, state="claimed"), lease)
                if event == "release":
                    self.assertIsNone(operations.release(claim))
                    row = operations.ledger.read(row.key)
                    self.assertEqual((row.state, row.lease_epoch, row.lease_owner, row.lease_expires_at),
                                     ("released", 1, None, None))
                    continue
                started = operations.start(claim)
                self.assertEqual((started.key, started.record.state, started.token),
                                 (call.record_key, state, dd.Lease(row.key, state, 1, "dead", row.request_ref)))
                row = operations.ledger.read(row.key)
                self.assertEqual((row.state, row.lease_owner, row.lease_expires_at),
                                 (state, "dead", self.clock.now + 100))

    def test_moving_another_claim_while_one_is_open_is_misuse_and_rolls_the_open_one_back(self) -> None:
        store = self.open_store()
        call, record = self.admitted(self.dispatcher(store, realm="calls"), "a")
        operations = dd.LedgerOperations(store, realm="spare")
        key = operations.key(call.record_key)
        for event in ("start", "release"):
            with self.subTest(event=event):
                claim = operations.claim(call, record, "e" * 64)  # its transaction left open
                foreign = td.Claim(call.record_key, claim.record, replace(claim.token, owner="someone"))
                move = operations.start if event == "start" else operations.release
                self.assertDurable("STORE_MISUSE", lambda: move(foreign))
                self.assertEqual((store.in_transaction, operations.ledger.read(key)), (False, None))
                self.assertFalse(operations.approval_used("e" * 64))
                operations.finish()

    def test_a_holders_own_moves_outside_the_dispatcher(self) -> None:
        # Ledger.advance used alone: a start keeps the holder's lease (lease_ms from now, none
        # given: dead at once), a release in a transaction of its own frees the approval.
        store = self.open_store()
        ledger = dd.Ledger(store)
        intent = dd.Intent("0" * 64, td.PROVIDER_PROFILES["openai-responses-v1"], "op", "{}", "rq", "st")
        key = dd.OperationKey("default", "t", "s", "tool", "k")
        with store.transaction() as tx:
            lease = ledger.claim(tx, key, intent, owner="one", lease_ms=100, approval_ref="c" * 64)
        self.assertTrue(ledger.approval_used("default", "c" * 64))
        released = ledger.advance(lease, "release")
        self.assertEqual(released, dd.Lease(key, "released", 1, "one", "rq"))
        row = ledger.read(key)
        self.assertEqual((row.state, row.lease_owner, row.lease_expires_at), ("released", None, None))
        self.assertFalse(ledger.approval_used("default", "c" * 64))
        for name, options, expiry in (("k2", {"lease_ms": 50}, 50), ("k3", {}, 0)):
            other = dd.OperationKey("default", "t", "s", "tool", name)
            with store.transaction() as tx:
                lease = ledger.claim(tx, other, intent, owner="two", lease_ms=100)
            started = ledger.advance(lease, "start", **options)
            self.assertEqual(started, dd.Lease(other, "in_progress", 1, "two", "rq"))
            row = ledger.read(other)
            self.assertEqual((row.state, row.lease_owner, row.lease_expires_at),
                             ("in_progress", "two", self.clock.now + expiry))
            self.assertEqual(row.lease_live(self.clock.now), expiry > 0)

    def test_a_settle_inside_the_callers_transaction_writes_its_event(self) -> None:
        store = self.open_store()
        ledger = dd.Ledger(store)
        intent = dd.Intent("0" * 64, td.PROVIDER_PROFILES["openai-responses-v1"], "op", "{}", "rq", "st")
        key = dd.OperationKey("default", "t", "s", "tool", "k")
        with store.transaction() as tx:
            lease = ledger.claim(tx, key, intent, owner="one", lease_ms=100, started=True)
            ledger.advance(lease, "start", tx=tx, stored="in_progress")
        with store.transaction() as tx:
            settled = ledger.advance(dd.Lease(key, "in_progress", 1, "one", "rq"), "committed",
                                     data={"draft_id": "D-1"}, tx=tx)
        self.assertEqual(settled.state, "succeeded")
        (payload,) = rows(self.path, "SELECT payload FROM outbox")[0]
        self.assertEqual((json.loads(payload)["state"], json.loads(payload)["data"]), ("succeeded", {"draft_id": "D-1"}))

    def test_a_claim_whose_store_answers_epoch_zero_is_store_invalid(self) -> None:
        class EpochZero:
            def __init__(self, tx: Any) -> None:
                self.tx = tx

            def execute(self, sql: str, params: Any = ()) -> Any:
                cursor = self.tx.execute(sql, params)
                return type("Zero", (), {"fetchall": lambda _self: [(0,)]})() if sql is dd.SQL_CLAIM else cursor
        store = self.open_store()
        ledger = dd.Ledger(store)
        intent = dd.Intent("0" * 64, td.PROVIDER_PROFILES["openai-responses-v1"], "op", "{}", "rq", "st")
        with self.assertRaises(dd.DurableError) as caught:
            with store.transaction() as tx:
                ledger.claim(EpochZero(tx), dd.OperationKey("default", "t", "s", "tool", "k"), intent,
                             owner="one", lease_ms=100)
        self.assertEqual(caught.exception.code, "STORE_INVALID")

    def test_a_write_binding_waits_for_its_claim_only_when_the_operations_defer_it(self) -> None:
        # The binding a write's dispatch asks for: on disk at once by default, and with
        # defer_bindings only when the claim commits or finish() ends the dispatch.
        asked: list[tuple[Any, Any]] = []
        operations = dd.LedgerOperations(self.open_store())
        original = operations.bind_call
        operations.bind_call = lambda identity, fingerprint: (  # type: ignore[method-assign]
            asked.append((identity, fingerprint)) or original(identity, fingerprint))
        write(td.Dispatcher(ORDERS, approvers=APPROVERS, operations=operations), "a")
        identity, fingerprint = asked[0]
        self.assertEqual(fingerprint[0], "dispatch")
        for defer, before_finish in ((False, 1), (True, 0)):
            with self.subTest(defer_bindings=defer):
                self.new_store(f"defer-{defer}")
                options = {"defer_bindings": True} if defer else {}
                operations = dd.LedgerOperations(self.open_store(), **options)
                self.assertEqual(operations.bind_call(identity, fingerprint), fingerprint)
                self.assertEqual(count(self.path, "SELECT COUNT(*) FROM call_bindings"), before_finish)
                operations.finish()
                self.assertEqual(count(self.path, "SELECT COUNT(*) FROM call_bindings"), 1)

    def test_what_the_ledger_answers_is_held_to_the_boundary_checks_of_a_store_answer(self) -> None:
        # The dispatcher treats its ledger as any host store: a record of another key, even one
        # of the same intent, is never replayed as this key's answer, and a record that is no
        # OperationRecord is a damaged store's (LIFECYCLE_VIOLATION, to the host).
        dispatcher = self.dispatcher()
        write(dispatcher, "a")
        write(dispatcher, "b", key="other-key")
        others = self.row(dispatcher, "other-key").record()
        proposal, again = refund(), replace(context("c"), operation_id="op-b")  # op-b's intent, under KEY
        for answered in (others, {"state": "succeeded"}):
            with self.subTest(answered=type(answered).__name__):
                dispatcher.operations.answer = lambda call: answered  # type: ignore[method-assign]
                self.assertBoundary("LIFECYCLE_VIOLATION", lambda: dispatcher.dispatch(
                    proposal, again, ALICE, approval=approval_for(again, proposal), now=NOW, deadline=NOW + 30))
        self.assertEqual(dispatcher.effect_count, 2)

    def test_a_call_without_a_key_is_neither_answered_nor_claimed_nor_found(self) -> None:
        store = self.open_store()
        call, record = self.admitted(self.dispatcher(store), "a")
        operations = dd.LedgerOperations(store)
        keyless = call._replace(context=replace(call.context, idempotency_key=None))
        self.assertEqual(keyless.record_key, call.record_key[:3] + (None,))
        self.assertIsNone(operations.answer(keyless))
        self.assertIsNone(operations.find(keyless.record_key))
        self.assertFalse(operations.confirm_absent(keyless.record_key, record))
        self.assertBoundary("IDEMPOTENCY_KEY_REQUIRED", lambda: operations.claim(keyless, record, "d" * 64))
        self.assertFalse(store.in_transaction)

    def test_a_row_that_vanishes_after_its_takeover_answers_in_progress(self) -> None:
        store = self.open_store()
        dispatcher = self.dispatcher(store)
        call, _record = self.admitted(dispatcher, "a")
        stuck = replace(self.row(dispatcher), state="in_progress", lease_expires_at=0, package=None, data=None)
        reads = iter([stuck, None])
        dispatcher.operations.ledger.read = lambda key: next(reads)  # type: ignore[method-assign]
        dispatcher.operations.ledger.expire = lambda row, event: True  # type: ignore[method-assign]
        self.assertBoundary("OPERATION_IN_PROGRESS", lambda: dispatcher.operations.answer(call))

    def test_confirm_absent_refuses_when_the_row_moved_or_a_receipt_exists(self) -> None:
        dispatcher = self.dispatcher(lease_ms=100)
        write(dispatcher, "a", fault="timeout_after_commit")  # unknown, its receipt on disk
        operations, row = dispatcher.operations, self.row(dispatcher)
        record_key = (ALICE.tenant, ALICE.subject, "create_refund_draft", KEY)
        self.assertEqual(row.state, "unknown")
        self.assertFalse(operations.confirm_absent(record_key, row.record()))  # the receipt is there
        after = self.row(dispatcher)
        self.assertEqual((after.state, after.lease_epoch), ("unknown", 2))  # fenced, not released
        self.tamper("DELETE FROM downstream_receipts")
        operations.ledger.fence_unknown = lambda moved: None  # type: ignore[method-assign]  # moved meanwhile
        self.assertFalse(operations.confirm_absent(record_key, row.record()))
        self.assertEqual(self.row(dispatcher).state, "unknown")

    def test_answer_gives_up_after_bounded_attempts(self) -> None:
        dispatcher = self.dispatcher(checkpoint=raise_at("after_claim"))
        with self.assertRaises(Boom):
            write(dispatcher, "a")
        # A row that keeps moving under us: expired in progress, and every takeover loses its race.
        stuck = replace(self.row(dispatcher), state="in_progress", lease_expires_at=0)
        dispatcher.operations.ledger.read = lambda key: stuck  # type: ignore[method-assign]
        dispatcher.operations.ledger.expire = lambda row, event: False  # type: ignore[method-assign]
        self.assertDurable("OPERATION_IN_PROGRESS", lambda: write(dispatcher, "b"))
        self.assertDurable("OPERATION_IN_PROGRESS", lambda: query(dispatcher, "q", op_tag="a"))


# --------------------------------------------------------------------------------------------
# 7. Durable downstream
# --------------------------------------------------------------------------------------------


class TestDownstream(StoreCase):
    FIELDS = MappingProxyType({"request_ref": "rq-1", "status_ref": "st-1", "order_ref": "ORDER-7",
                               "reason": "duplicate", "effect_revision": "e1", "producer_revision": "p1"})

    def downstream(self) -> dd.DurableDownstream:
        return dd.DurableDownstream(self.open_store(), "default")

    def test_one_effect_per_key(self) -> None:
        downstream = self.downstream()
        first, created = downstream.commit(epoch=1, **self.FIELDS)
        again, created_again = downstream.commit(epoch=1, **self.FIELDS)
        self.assertEqual((created, created_again, again, downstream.effect_count), (True, False, first, 1))
        self.assertEqual(downstream.effects_for("rq-1"), 1)

    def test_a_second_commit_of_a_key_answers_the_stored_receipt_not_its_own(self) -> None:
        downstream = self.downstream()
        first, _ = downstream.commit(epoch=1, **self.FIELDS)
        again, created = downstream.commit(epoch=1, **{**self.FIELDS, "reason": "other", "effect_revision": "e2"})
        self.assertEqual((again, created, again.reason, again.effect_revision), (first, False, "duplicate", "e1"))

    def test_receipt_equals_the_in_memory_receipt(self) -> None:
        receipt, _ = self.downstream().commit(epoch=1, **self.FIELDS)
        self.assertEqual(receipt, td.MockDownstream().commit_refund_draft(**self.FIELDS))

    def test_lower_epoch_is_fenced_off(self) -> None:
        downstream = self.downstream()
        downstream.commit(epoch=2, **self.FIELDS)
        self.assertDurable("DOWNSTREAM_FENCED", lambda: downstream.commit(epoch=1, **self.FIELDS))
        self.assertEqual(downstream.effect_count, 1)

    def test_fenced_query_closes_the_door_on_older_epochs(self) -> None:
        downstream = self.downstream()
        self.assertIsNone(downstream.fenced_receipt("st-1", 3))
        self.assertDurable("DOWNSTREAM_FENCED", lambda: downstream.commit(epoch=2, **self.FIELDS))
        self.assertEqual(downstream.effect_count, 0)
        self.assertEqual(downstream.commit(epoch=3, **self.FIELDS)[1], True)
        self.assertDurable("DOWNSTREAM_FENCED", lambda: downstream.fenced_receipt("st-1", 2))

    def test_plain_receipt_query(self) -> None:
        downstream = self.downstream()
        self.assertIsNone(downstream.receipt(None))
        self.assertIsNone(downstream.receipt("st-1"))
        receipt, _ = downstream.commit(epoch=1, **self.FIELDS)
        self.assertEqual(downstream.receipt("st-1"), receipt)

    def test_fenced_view_counts_what_it_created(self) -> None:
        downstream = self.downstream()
        view = downstream.fenced(1, "rq-1", "st-1")
        view.commit_refund_draft(**self.FIELDS)
        view.commit_refund_draft(**self.FIELDS)
        self.assertEqual((view.created, view.effect_count), (1, 1))
        self.assertEqual(view.receipt("st-1").request_ref, "rq-1")

    def test_fenced_view_commits_only_its_own_request(self) -> None:
        downstream = self.downstream()
        view = downstream.fenced(1, "rq-1", "st-1")

        class Ref(str):
            pass

        for changed in ({"request_ref": "rq-2"}, {"status_ref": "st-2"}, {"status_ref": Ref("st-1")}):
            with self.subTest(changed=changed), self.assertRaises(td.BoundaryError) as caught:
                view.commit_refund_draft(**{**self.FIELDS, **changed})
            self.assertEqual(caught.exception.code, "OUTPUT_BINDING_MISMATCH")
        self.assertEqual((view.created, view.effect_count), (0, 0))

    def test_a_handler_cannot_make_a_second_effect_under_its_lease(self) -> None:
        def twice(call: td.HandlerCall) -> td.HandlerResult:
            result = td.handle_create_refund_draft(call)
            td.handle_create_refund_draft(replace(call, request_ref="rq-other", status_ref="st-other"))
            return result

        dispatcher = self.dispatcher(handlers={"create_refund_draft": twice})
        package = write(dispatcher, "a")
        self.assertAnswer(package, "HANDLER_FAILED")
        self.assertEqual((package["execution"], dispatcher.effect_count, self.row(dispatcher).state),
                         ({"operation_state": "unknown", "handler_invoked": True, "effects": 1}, 1, "unknown"))
        self.assertAnswer(query(dispatcher, "q", op_tag="a"), "receipt_reconciled")


class TestErrorsInsideTheHandler(StoreCase):
    """A lock error inside the handler (its downstream commit rolled back) leaves the write
    unknown, and one fenced receipt query settles it: decided, see the README."""

    def test_a_busy_downstream_commit_is_unknown_then_not_executed(self) -> None:
        self.open_store().close()
        holder = sqlite3.connect(self.path, isolation_level=None)
        self.addCleanup(holder.close)

        def locked_out(call: td.HandlerCall) -> td.HandlerResult:
            holder.execute("BEGIN IMMEDIATE")
            try:
                return td.handle_create_refund_draft(call)
            finally:
                holder.execute("ROLLBACK")
        store = self.open_store(busy_timeout_ms=30)
        dispatcher = self.dispatcher(store, handlers={**td.HANDLERS, "create_refund_draft": locked_out})
        self.assertAnswer(write(dispatcher, "a"), "HANDLER_FAILED")
        self.assertEqual((self.row(dispatcher).state, dispatcher.effect_count), ("unknown", 0))
        self.assertAnswer(query(dispatcher, "q", op_tag="a"), "OPERATION_NOT_EXECUTED")
        self.assertEqual((self.row(dispatcher).state, dispatcher.effect_count), ("released", 0))
        self.assertAnswer(write(self.dispatcher(store), "b"), "fresh")
        self.assertEqual(dispatcher.effect_count, 1)

    def test_recovery_settles_it_the_same_way(self) -> None:
        def busy(call: td.HandlerCall) -> td.HandlerResult:
            raise dd.DurableError("STORE_BUSY")
        dispatcher = self.dispatcher(handlers={**td.HANDLERS, "create_refund_draft": busy})
        self.assertAnswer(write(dispatcher, "a"), "HANDLER_FAILED")
        self.assertEqual([(o.before, o.after) for o in dd.recover(self.open_store())], [("unknown", "released")])


# --------------------------------------------------------------------------------------------
# 9. Outbox relay and consumer inbox
# --------------------------------------------------------------------------------------------


class Boom(BaseException):
    """An in-process stand-in for a crash at a checkpoint (a BaseException, like SystemExit: the
    boundary's containment of handler errors must not swallow it)."""


def raise_at(point: str) -> Callable[[str], None]:
    def hook(reached: str) -> None:
        if reached == point:
            raise Boom(point)
    return hook


class TestOutbox(StoreCase):
    def test_the_checkpoints_of_a_write_in_their_order(self) -> None:
        for fault, points in (("none", ["after_claim", "after_downstream_commit", "after_outbox_write",
                                        "after_ledger_commit"]),
                              ("timeout_after_commit", ["after_claim", "after_downstream_commit"])):
            with self.subTest(fault=fault):
                reached: list[str] = []
                write(self.dispatcher(realm=f"r-{fault}".replace("_", "-"), checkpoint=reached.append), "a",
                      fault=fault)
                self.assertEqual(reached, points)

    def test_completion_writes_exactly_one_event(self) -> None:
        dispatcher = self.dispatcher()
        package = write(dispatcher, "a")
        [(event_id, payload, sent_at)] = rows(self.path, "SELECT event_id, payload, sent_at FROM outbox")
        row = self.row(dispatcher)
        self.assertEqual(event_id, td.derived_ref("ev-", dd.EVENT_TYPE, row.request_ref))
        self.assertIsNone(sent_at)
        self.assertEqual(json.loads(payload), {
            "event_id": event_id, "type": dd.EVENT_TYPE, "tenant": ALICE.tenant,
            "subject_ref": td.principal_view(td.Principal(ALICE.tenant, ALICE.subject))["subject_ref"],
            "tool": "create_refund_draft", "request_ref": row.request_ref, "state": "succeeded",
            "data": package["model_result"]["data"]})
        self.assertNotIn("alice", payload)

    def test_a_reconciled_operation_writes_its_event_with_the_receipts_data(self) -> None:
        dispatcher = self.dispatcher()
        write(dispatcher, "a", fault="timeout_after_commit")  # unknown: no event yet
        self.assertEqual(count(self.path, "SELECT COUNT(*) FROM outbox"), 0)
        answer = query(dispatcher, "q", op_tag="a")
        self.assertAnswer(answer, "receipt_reconciled")
        [(payload,)] = rows(self.path, "SELECT payload FROM outbox")
        body = json.loads(payload)
        self.assertEqual((body["state"], body["data"]), ("reconciled", answer["model_result"]["data"]))
        self.assertEqual(body["data"]["draft_id"], json.loads(self.row(dispatcher).data)["draft_id"])

    def test_unknown_and_released_write_no_event(self) -> None:
        dispatcher = self.dispatcher()
        write(dispatcher, "a", "k1", fault="handler_raises")
        write(dispatcher, "b", "k2", fault="rate_limited")
        self.assertEqual(count(self.path, "SELECT COUNT(*) FROM outbox"), 0)

    def test_crash_inside_the_completion_rolls_back_row_and_event(self) -> None:
        dispatcher = self.dispatcher(lease_ms=100, checkpoint=raise_at("after_outbox_write"))
        with self.assertRaises(Boom):
            write(dispatcher, "a")
        self.assertEqual((self.row(dispatcher).state, dispatcher.effect_count), ("in_progress", 1))
        self.assertEqual(count(self.path, "SELECT COUNT(*) FROM outbox"), 0)
        self.clock.advance(100)
        self.assertEqual([(o.before, o.after) for o in dd.recover(self.open_store())], [("in_progress", "reconciled")])
        self.assertEqual(count(self.path, "SELECT COUNT(*) FROM outbox"), 1)

    def test_relay_publishes_and_marks_sent(self) -> None:
        dispatcher = self.dispatcher()
        write(dispatcher, "a")
        store = self.open_store()
        self.assertEqual((dd.relay(store), dd.relay(store)), (1, 0))
        self.assertEqual(count(self.path, "SELECT COUNT(*) FROM outbox WHERE sent_at IS NOT NULL"), 1)
        self.assertEqual(count(self.path, "SELECT COUNT(*) FROM broker_messages"), 1)

    def test_relay_crash_after_publish_republishes_and_the_consumer_acts_once(self) -> None:
        write(self.dispatcher(), "a")
        store = self.open_store()
        with self.assertRaises(Boom):
            dd.relay(store, checkpoint=raise_at("after_publish"))
        self.assertEqual(count(self.path, "SELECT COUNT(*) FROM outbox WHERE sent_at IS NULL"), 1)
        self.assertEqual(dd.relay(store), 1)
        self.assertEqual(rows(self.path, "SELECT COUNT(*), COUNT(DISTINCT event_id) FROM broker_messages"), [(2, 1)])
        self.assertEqual(dd.consume(store), 1)
        self.assertEqual(dd.consume(store), 0)
        self.assertEqual(count(self.path, "SELECT COUNT(*) FROM consumer_effects"), 1)
        self.assertEqual(count(self.path, "SELECT position FROM consumer_offsets"),
                         count(self.path, "SELECT MAX(seq) FROM broker_messages"))

    def test_crash_inside_the_consumer_rolls_back_and_is_consumed_once(self) -> None:
        write(self.dispatcher(), "a")
        store = self.open_store()
        dd.relay(store)
        with self.assertRaises(Boom):
            dd.consume(store, checkpoint=raise_at("inside_consumer"))
        self.assertEqual([count(self.path, f"SELECT COUNT(*) FROM {table}")
                          for table in ("inbox", "consumer_effects", "consumer_offsets")], [0, 0, 0])
        self.assertEqual(dd.consume(store), 1)
        self.assertEqual(count(self.path, "SELECT COUNT(*) FROM consumer_effects"), 1)

    def test_consumers_are_independent_and_realms_are_filtered(self) -> None:
        write(self.dispatcher(), "a")
        write(self.dispatcher(realm="other"), "a")
        store = self.open_store()
        self.assertEqual(dd.relay(store, realm="other"), 1)
        self.assertEqual(dd.consume(store, realm="default"), 0)
        self.assertEqual(dd.relay(store), 1)
        self.assertEqual(dd.consume(store, realm="other"), 1)
        self.assertEqual(dd.consume(store), 1)
        self.assertEqual(dd.consume(store, consumer="auditor"), 2)
        self.assertEqual(rows(self.path, "SELECT consumer, COUNT(*) FROM consumer_effects GROUP BY consumer "
                                         "ORDER BY consumer"), [("auditor", 2), ("refund-notifier", 2)])

    def test_relay_and_consumer_batches_are_bounded(self) -> None:
        dispatcher = self.dispatcher()
        for index in range(3):
            write(dispatcher, f"w{index}", f"k{index}")
        store = self.open_store()
        self.assertEqual(dd.relay(store, limit=2), 2)
        self.assertEqual(dd.consume(store, limit=1), 1)
        self.assertEqual(dd.relay(store, limit=2), 1)
        self.assertEqual(dd.consume(store), 2)


# --------------------------------------------------------------------------------------------
# 10. Recovery
# --------------------------------------------------------------------------------------------


class TestRecovery(StoreCase):
    def crashed(self, point: str, key: str = KEY) -> dd.DurableDispatcher:
        dispatcher = self.dispatcher(lease_ms=100, checkpoint=raise_at(point))
        with self.assertRaises(Boom):
            write(dispatcher, "a" if key == KEY else key, key)
        return dispatcher

    def outcomes(self, **options: Any) -> list[tuple[str, str, str | None]]:
        return [(o.before, o.after, o.hint) for o in dd.recover(self.open_store(), **options)]

    def test_expired_claim_is_released(self) -> None:
        dispatcher = self.crashed("after_claim")
        self.clock.advance(100)
        self.assertEqual(self.outcomes(), [("in_progress", "released", None)])
        self.assertEqual((self.row(dispatcher).lease_epoch, dispatcher.effect_count), (2, 0))

    def test_expired_in_progress_with_a_receipt_is_reconciled(self) -> None:
        dispatcher = self.crashed("after_downstream_commit")
        self.clock.advance(100)
        self.assertEqual(self.outcomes(), [("in_progress", "reconciled", None)])
        row = self.row(dispatcher)
        self.assertEqual((row.state, row.lease_epoch, dispatcher.effect_count), ("reconciled", 2, 1))
        self.assertEqual(json.loads(row.data), td.receipt_output(dispatcher.downstream.receipt(row.status_ref)))
        self.assertEqual(count(self.path, "SELECT COUNT(*) FROM outbox"), 1)

    def test_a_lease_from_a_clock_since_set_back_is_dead(self) -> None:
        # The holder's clock ran a day ahead when it claimed, and it died after its downstream
        # commit; then the clock was set right. Its lease ends a day from now, later than any lease
        # is granted (MAX_LEASE_MS): before, the key was held, and reported "live", for that day.
        self.clock.advance(86_400_000)
        dispatcher = self.crashed("after_downstream_commit")
        self.clock.advance(-86_400_000)
        self.assertEqual(self.outcomes(), [("in_progress", "reconciled", None)])
        self.assertEqual((self.row(dispatcher).lease_epoch, dispatcher.effect_count), (2, 1))
        self.assertAnswer(write(dispatcher, "b"), "local_replay")

    def test_the_longest_lease_is_live_and_one_millisecond_more_is_not(self) -> None:
        dispatcher = self.dispatcher(lease_ms=dd.MAX_LEASE_MS, checkpoint=raise_at("after_downstream_commit"))
        with self.assertRaises(Boom):
            write(dispatcher, "a")
        other = self.dispatcher()
        self.assertBoundary("OPERATION_IN_PROGRESS", lambda: write(other, "b"))  # ends exactly MAX_LEASE_MS ahead
        self.assertEqual(self.outcomes(), [("in_progress", "live", None)])
        self.clock.advance(-1)  # the clock set back by a millisecond: no lease was granted that long
        self.assertAnswer(write(other, "b"), "OUTCOME_UNKNOWN")
        self.assertAnswer(query(other, "q", op_tag="a"), "receipt_reconciled")
        self.assertEqual(other.effect_count, 1)

    def test_live_leases_are_reported_and_untouched(self) -> None:
        dispatcher = self.crashed("after_downstream_commit")
        before = self.row(dispatcher)
        self.clock.advance(99)
        self.assertEqual(self.outcomes(), [("in_progress", "live", None)])
        self.assertEqual(self.row(dispatcher), before)

    def test_unknown_without_a_receipt_is_released_behind_a_fence(self) -> None:
        dispatcher = self.dispatcher()
        write(dispatcher, "a", fault="handler_raises")
        self.tamper("DELETE FROM downstream_receipts")  # as if the commit never happened
        self.assertEqual(self.outcomes(), [("unknown", "released", None)])
        self.assertEqual(count(self.path, "SELECT epoch FROM downstream_fences"), 2)

    def test_unknown_from_a_lost_answer_is_reconciled(self) -> None:
        dispatcher = self.dispatcher()
        write(dispatcher, "a", fault="timeout_after_commit")
        self.assertEqual(self.outcomes(), [("unknown", "reconciled", None)])
        self.assertAnswer(write(dispatcher, "b"), "local_replay")

    def test_unreachable_downstream_keeps_unknown_with_a_hint(self) -> None:
        dispatcher = self.dispatcher()
        write(dispatcher, "a", fault="timeout_after_commit")
        self.assertEqual(self.outcomes(fault="downstream_unavailable"), [("unknown", "unknown", "query_status")])
        self.assertEqual((self.row(dispatcher).state, self.row(dispatcher).lease_epoch), ("unknown", 1))

    def test_contradicting_receipt_escalates(self) -> None:
        dispatcher = self.dispatcher()
        write(dispatcher, "a", fault="timeout_after_commit")
        self.tamper("UPDATE downstream_receipts SET producer_revision = 'someone-else'")
        self.assertEqual(self.outcomes(), [("unknown", "escalated", "operator")])
        row = self.row(dispatcher)
        self.assertEqual((row.state, row.recovery_hint, row.lease_epoch), ("escalated", "operator", 2))
        self.assertEqual(self.outcomes(), [("escalated", "escalated", "operator")])
        self.assertAnswer(write(dispatcher, "b"), "OUTCOME_UNKNOWN")
        self.assertAnswer(query(dispatcher, "q", op_tag="a"), "STATUS_CONFLICT")

    def test_a_receipt_for_another_request_escalates_and_is_never_delivered(self) -> None:
        for column, value in (("order_ref", "ORDER-8"), ("reason", "other")):
            with self.subTest(column=column):
                self.path.unlink(missing_ok=True)
                dispatcher = self.dispatcher(self.open_store())
                write(dispatcher, "a", fault="timeout_after_commit")
                self.tamper(f"UPDATE downstream_receipts SET {column} = '{value}'")
                self.assertAnswer(query(dispatcher, "q", op_tag="a"), "STATUS_CONFLICT")
                self.assertEqual(self.row(dispatcher).state, "unknown")  # nothing settled by the query
                self.assertEqual(self.outcomes(), [("unknown", "escalated", "operator")])

    def test_contract_drift_escalates(self) -> None:
        write(self.dispatcher(), "a", fault="timeout_after_commit")
        spec = td.REGISTRY["create_refund_draft"]
        drifted = MappingProxyType({**td.REGISTRY, spec.name: replace(spec, producer_revision="refunds-producer-v9")})
        self.assertEqual(self.outcomes(registry=drifted), [("unknown", "escalated", "operator")])

    def test_unregistered_tool_escalates(self) -> None:
        write(self.dispatcher(), "a", fault="timeout_after_commit")
        self.assertEqual(self.outcomes(registry=MappingProxyType({})), [("unknown", "escalated", "operator")])

    def test_receipt_contradicting_the_record_escalates(self) -> None:
        for index, sql in enumerate((
            "UPDATE downstream_receipts SET request_ref = 'rq-other'",  # another request's receipt
            "UPDATE downstream_receipts SET reason = 'refund everything'",  # breaks the output contract
            "UPDATE downstream_receipts SET effect_revision = 'effect.other.v9'",
        )):
            with self.subTest(sql=sql):
                realm = f"r{index}"
                write(self.dispatcher(realm=realm), "a", fault="timeout_after_commit")
                self.tamper(sql + f" WHERE realm = '{realm}'")
                self.assertEqual(self.outcomes(realm=realm), [("unknown", "escalated", "operator")])

    def test_reconcile_twice_is_one_move_and_one_event(self) -> None:
        dispatcher = self.dispatcher()
        write(dispatcher, "a", fault="timeout_after_commit")
        key = self.row(dispatcher).key
        dispatcher.operations.ledger.reconcile(key, "rc-first", {"n": 1})
        settled = self.row(dispatcher)
        self.clock.advance(5)
        dispatcher.operations.ledger.reconcile(key, "rc-second", {"n": 2})
        self.assertEqual(self.row(dispatcher), settled)
        self.assertEqual((settled.state, settled.receipt_ref, count(self.path, "SELECT COUNT(*) FROM outbox")),
                         ("reconciled", "rc-first", 1))

    def test_reconcile_of_a_missing_record_is_a_lifecycle_violation(self) -> None:
        ledger = self.dispatcher().operations.ledger
        with self.assertRaises(td.BoundaryError) as caught:
            ledger.reconcile(dd.OperationKey("default", "t", "s", "tool", "k"), "rc", {})
        self.assertEqual(caught.exception.code, "LIFECYCLE_VIOLATION")

    def test_store_errors_during_the_receipt_query_are_not_swallowed(self) -> None:
        dispatcher = self.dispatcher()
        write(dispatcher, "a", fault="timeout_after_commit")

        class Busy:
            def fenced_receipt(self, status_ref: str, epoch: int) -> None:
                raise dd.DurableError("STORE_BUSY")
        self.assertDurable("STORE_BUSY", lambda: dd._recover_row(
            dispatcher.operations.ledger, Busy(), self.row(dispatcher), td.REGISTRY, "none"))  # type: ignore[arg-type]

    def test_receipt_matches_answers_exactly_true_or_false(self) -> None:
        dispatcher = self.dispatcher()
        write(dispatcher, "a", fault="timeout_after_commit")
        row = self.row(dispatcher)
        receipt = dispatcher.downstream.receipt(row.status_ref)
        spec = td.REGISTRY["create_refund_draft"]
        self.assertIs(dd.receipt_matches(row, receipt, td.REGISTRY), True)
        for name, registry, bad in (
            ("no spec", MappingProxyType({}), receipt),
            ("drifted contract", MappingProxyType({spec.name: replace(spec, contract_revision="c.v9")}), receipt),
            ("output contract", td.REGISTRY, replace(receipt, reason="everything")),
            ("request", td.REGISTRY, replace(receipt, request_ref="rq-other")),
            ("effect revision", td.REGISTRY, replace(receipt, effect_revision="effect.v9")),
            ("producer revision", td.REGISTRY, replace(receipt, producer_revision="producer.v9")),
        ):
            with self.subTest(name=name):
                self.assertIs(dd.receipt_matches(row, bad, registry), False)

    def test_escalated_is_never_reconciled(self) -> None:
        dispatcher = self.dispatcher()
        write(dispatcher, "a", fault="timeout_after_commit")
        row = self.row(dispatcher)
        self.tamper("UPDATE operations SET state = 'escalated', recovery_hint = 'operator'")
        self.assertDurable("OPERATION_ESCALATED", lambda: dispatcher.operations.ledger.reconcile(row.key, "rc-x", {}))
        self.assertEqual(self.row(dispatcher).state, "escalated")

    def test_recovery_is_idempotent(self) -> None:
        self.crashed("after_downstream_commit", "k1")
        self.crashed("after_claim", "k2")
        self.clock.advance(100)
        self.assertEqual(sorted(self.outcomes()), [("in_progress", "reconciled", None), ("in_progress", "released", None)])
        self.assertEqual(self.outcomes(), [])
        self.assertEqual(count(self.path, "SELECT COUNT(*) FROM downstream_receipts"), 1)

    def test_recovery_filters_by_realm_and_limit(self) -> None:
        for realm in ("r1", "r2", "r3"):
            write(self.dispatcher(realm=realm), "a", fault="timeout_after_commit")
        self.assertEqual([o.realm for o in dd.recover(self.open_store(), limit=1)], ["r1"])
        self.assertEqual([o.realm for o in dd.recover(self.open_store(), realm="r3")], ["r3"])
        self.assertEqual([o.realm for o in dd.recover(self.open_store())], ["r2"])

    def test_unknown_recovery_fault_is_refused(self) -> None:
        self.assertDurable("SETTING_INVALID", lambda: dd.recover(self.open_store(), fault="meteor"))

    def test_recovery_never_executes(self) -> None:
        dispatcher = self.crashed("after_claim")
        self.clock.advance(100)
        self.outcomes()
        # A dead start is settled by a fenced receipt query: the fence is raised, nothing runs.
        self.assertEqual((dispatcher.effect_count, count(self.path, "SELECT epoch FROM downstream_fences")), (0, 2))

    def test_row_moved_by_someone_else_is_reported_as_it_is(self) -> None:
        dispatcher = self.dispatcher()
        write(dispatcher, "a", fault="timeout_after_commit")
        row = self.row(dispatcher)
        ledger, downstream = dispatcher.operations.ledger, dispatcher.downstream
        stale = replace(row, lease_epoch=row.lease_epoch - 1 if row.lease_epoch > 1 else 99)
        self.assertEqual(dd._recover_row(ledger, downstream, stale, td.REGISTRY, "none"), "unknown")
        self.assertEqual(self.row(dispatcher).lease_epoch, 1)
        downstream.fenced_receipt(row.status_ref, 5)  # a newer recoverer fenced the downstream
        self.assertEqual(dd._recover_row(ledger, downstream, row, td.REGISTRY, "none"), "unknown")
        expired = replace(row, state="in_progress", lease_expires_at=0)
        self.assertEqual(dd._recover_row(ledger, downstream, expired, td.REGISTRY, "none"), "unknown")


# --------------------------------------------------------------------------------------------
# 11. Pruning
# --------------------------------------------------------------------------------------------


class TestTwiceAtOnce(StoreCase):
    """One call delivered twice at the same moment (a client's retry after its timeout)."""

    def test_the_copy_that_loses_the_race_is_answered_by_the_winners_write(self):
        dispatcher = self.dispatcher()
        operations = dispatcher.operations
        original = operations.approval_used
        proposal = refund()
        ctx = context("a")
        approval = approval_for(ctx, proposal)
        raced: list[Any] = []

        def race(reference: str) -> bool:
            # This copy found the key free; the other copy runs whole before it checks the approval.
            if not raced:
                raced.append(None)
                raced[0] = dispatcher.dispatch(proposal, ctx, ALICE, approval=approval, now=NOW, deadline=NOW + 30)
            return original(reference)

        operations.approval_used = race  # type: ignore[method-assign]
        package = dispatcher.dispatch(proposal, ctx, ALICE, approval=approval, now=NOW, deadline=NOW + 30)
        self.assertAnswer(raced[0], "fresh")
        self.assertAnswer(package, "local_replay")
        self.assertEqual((package["model_result"]["data"], dispatcher.effect_count),
                         (raced[0]["model_result"]["data"], 1))


class TestApprovalsPerRealm(StoreCase):
    """An approval is used once per realm: each realm is a world of its own (see the README)."""

    def test_one_approval_makes_one_write_in_each_realm_and_no_second_in_one(self):
        store = self.open_store()
        proposal, ctx = refund(), context("a")
        approval = approval_for(ctx, proposal)
        answers = [self.dispatcher(store, realm=realm).dispatch(proposal, ctx, ALICE, approval=approval, now=NOW,
                                                                  deadline=NOW + 30)
                   for realm in ("east", "west", "east")]
        # One write in each world; in one world, the same call again is its replay, not a second write.
        self.assertEqual([answer["model_result"]["delivery"] for answer in answers], ["fresh", "fresh", "local_replay"])
        self.assertEqual(rows(self.path, "SELECT realm, COUNT(*) FROM downstream_receipts GROUP BY realm ORDER BY realm"),
                         [("east", 1), ("west", 1)])
        self.assertEqual(rows(self.path, "SELECT realm, COUNT(*) FROM approval_uses GROUP BY realm ORDER BY realm"),
                         [("east", 1), ("west", 1)])


def upgraded_registry() -> Mapping[str, td.ToolSpec]:
    """The shipped contracts, the refund tool moved to a new contract revision by its host."""
    document = td.shipped_contracts_document()
    for tool in document["tools"]:
        if tool["name"] == "create_refund_draft":
            tool["revisions"]["contract"] += ".upgraded"
    return td.parse_contracts(td.canonical_json(document))


class TestContractUpgrade(StoreCase):
    """The host moves a tool to a new contract revision: its old rows are history, not tampering."""

    def test_an_old_key_retried_after_an_upgrade_is_a_conflict_as_in_memory(self):
        upgraded = upgraded_registry()
        self.assertNotEqual(upgraded["create_refund_draft"].contract_view(),
                            td.REGISTRY["create_refund_draft"].contract_view())
        store = self.open_store()
        self.assertAnswer(write(self.dispatcher(store), "a"), "fresh")
        after = self.dispatcher(store, registry=upgraded)
        retried = write(after, "b")
        operations = td.MemoryOperations()
        write(td.Dispatcher(ORDERS, approvers=APPROVERS, operations=operations), "a")
        # The same in-memory store behind a dispatcher built with the upgraded contracts.
        remembered = write(td.Dispatcher(ORDERS, approvers=APPROVERS, operations=operations, registry=upgraded), "b")
        self.assertEqual((retried["model_result"]["error"]["code"], remembered["model_result"]["error"]["code"]),
                         ("IDEMPOTENCY_CONFLICT", "IDEMPOTENCY_CONFLICT"))
        self.assertEqual(after.effect_count, 1)
        # The chain check with the new registry: the old row is an honest one.
        report = dd.verify_chain(store, registry=upgraded)
        self.assertIsNone(report.fault)
        self.assertEqual(report.rows, 1)

    def test_a_sealed_old_row_must_still_hold_its_seal(self):
        upgraded = upgraded_registry()
        store = self.open_store()
        write(self.dispatcher(store, seal_keys=SEAL_KEYS), "a")
        self.assertEqual(write(self.dispatcher(store, seal_keys=SEAL_KEYS, registry=upgraded), "b")
                         ["model_result"]["error"]["code"], "IDEMPOTENCY_CONFLICT")
        self.assertIsNone(dd.verify_chain(store, seal_keys=SEAL_KEYS, registry=upgraded).fault)
        # Edited where no column looks, its digests recomputed (anyone can): the seal no longer holds.
        (text,) = rows(self.path, "SELECT package FROM operations")[0]
        package = json.loads(text)
        package["protected_audit"]["redactions"] = ["handler_output"]
        audit = package["protected_audit"]
        audit["request_sha256"], audit["result_sha256"], audit["call_binding_sha256"] = td.package_digests(package)
        forged = td.canonical_text(package).replace("'", "''")
        self.tamper(f"UPDATE operations SET package = '{forged}'")
        self.assertDurable("STORE_TAMPERED",
                           lambda: write(self.dispatcher(store, seal_keys=SEAL_KEYS, registry=upgraded), "c"))
        self.assertEqual(dd.verify_chain(store, seal_keys=SEAL_KEYS, registry=upgraded).fault.error.code,
                         "STORE_TAMPERED")

    def test_an_old_row_whose_package_was_edited_is_still_tampering(self):
        upgraded = upgraded_registry()
        store = self.open_store()
        write(self.dispatcher(store), "a")
        self.tamper("UPDATE operations SET package = replace(package, '\"reason\":\"duplicate\"', "
                    "'\"reason\":\"damaged\"')")
        self.assertDurable("STORE_TAMPERED", lambda: write(self.dispatcher(store, registry=upgraded), "b"))
        self.assertEqual(dd.verify_chain(store, registry=upgraded).fault.error.code, "STORE_TAMPERED")


    def test_an_old_row_whose_package_lost_its_contract_or_its_digests_is_still_tampering(self):
        upgraded = upgraded_registry()
        for name in ("no contract", "digests not recomputed"):
            with self.subTest(tamper=name):
                self.new_store(name.replace(" ", "-"))
                store = self.open_store()
                write(self.dispatcher(store), "a")
                (text,) = rows(self.path, "SELECT package FROM operations")[0]
                package = json.loads(text)
                if name == "no contract":
                    package["protected_audit"]["tool_contract"] = None
                else:  # edited where no column looks; without keys only its own digests can tell
                    package["protected_audit"]["redactions"] = ["handler_output"]
                self.tamper(f"UPDATE operations SET package = {sql_text(package)}")
                self.assertDurable("STORE_TAMPERED", lambda: write(self.dispatcher(store, registry=upgraded), "b"))
                self.assertEqual(dd.verify_chain(store, registry=upgraded).fault.error.code, "STORE_TAMPERED")

class TestHostTools(StoreCase):
    """A host's own write tool, run by its execute hook: this store cannot ask its downstream."""

    NOTE = td.parse_contracts(td.canonical_json({"format": "tool-contracts-v1", "tools": [{
        "name": "write_note", "description": "Write a note.", "effect": "write",
        "required_role": "refunds.draft", "resource_field": None,
        "input_schema": {"type": "object", "properties": {"name": {"type": "string", "pattern": "^[a-z]{1,16}$"},
                                                          "text": {"type": "string", "maxLength": 64}},
                         "required": ["name", "text"], "additionalProperties": False},
        "output_schema": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 16}},
                          "required": ["name"], "additionalProperties": False},
        "bound_fields": ["name"], "producer": "notes",
        "revisions": {part: f"write_note.{part}.v1" for part in ("contract", "input", "output", "effect",
                                                                 "handler", "producer")},
        "provenance": {"source": "host", "server_name": None, "server_version": None, "protocol_version": None,
                       "input_schema_sha256": None, "output_schema_sha256": None},
        "hints": {"read_only": None, "destructive": None, "idempotent": None, "open_world": None}}]}))
    PROPOSAL = {"name": "write_note", "arguments": {"name": "todo", "text": "buy milk"}}

    def setUp(self) -> None:
        super().setUp()
        self.written: list[str] = []

    def lost(self, call: td.ExecuteCall) -> td.Execution:
        self.written.append(call.idempotency_key)  # the note is written ...
        raise td.ResponseLost  # ... and its answer never comes back

    def notes(self, store: Any = None, **hooks: Any) -> dd.DurableDispatcher:
        return dd.DurableDispatcher(store=store or self.open_store(), approvers=APPROVERS, registry=self.NOTE,
                                    hooks={"write_note": td.ToolHooks(**{"execute": self.lost, **hooks})})

    def note(self, dispatcher: dd.DurableDispatcher, tag: str) -> dict[str, Any]:
        ctx = context(tag)
        approval = td.approval_for_call(approver="approver-lee", principal=ALICE, context=ctx,
                                        spec=self.NOTE["write_note"], arguments=self.PROPOSAL["arguments"],
                                        expires_at=NOW + 600)
        return dispatcher.dispatch(self.PROPOSAL, ctx, ALICE, approval=approval, now=NOW, deadline=NOW + 30)

    def status(self, dispatcher: dd.DurableDispatcher, tag: str) -> dict[str, Any]:
        ctx = replace(context(tag), operation_id="op-a")
        return dispatcher.query_operation_status(self.PROPOSAL, ctx, ALICE, now=NOW)

    def state(self, dispatcher: dd.DurableDispatcher) -> str:
        return dispatcher.operation_state(ALICE, "write_note", KEY)

    def test_a_lost_answer_stays_unknown_without_a_status_hook(self) -> None:
        dispatcher = self.notes()
        self.assertAnswer(self.note(dispatcher, "a"), "OUTCOME_UNKNOWN")
        queried = self.status(dispatcher, "q")
        self.assertAnswer(queried, "RECONCILIATION_REQUIRED")
        self.assertEqual((queried["model_result"]["status"], queried["model_result"]["recovery"]),
                         ("unknown", "query_status"))
        self.assertEqual(self.state(dispatcher), "unknown")
        # Recovery cannot ask the host's downstream either: the row stays unknown, with its hint.
        self.assertEqual([(o.before, o.after, o.hint) for o in dd.recover(self.open_store(), registry=self.NOTE)],
                         [("unknown", "unknown", "query_status")])
        self.assertAnswer(self.note(dispatcher, "b"), "OUTCOME_UNKNOWN")  # never written a second time
        self.assertEqual((self.written, self.state(dispatcher)), ([KEY], "unknown"))

    def test_a_dead_holder_of_a_host_tool_becomes_unknown_not_released(self) -> None:
        dispatcher = dd.DurableDispatcher(store=self.open_store(), approvers=APPROVERS, registry=self.NOTE,
                                          lease_ms=100, checkpoint=raise_at("after_claim"),
                                          hooks={"write_note": td.ToolHooks(execute=self.lost)})
        with self.assertRaises(Boom):
            self.note(dispatcher, "a")
        self.clock.advance(100)
        self.assertEqual([(o.before, o.after) for o in dd.recover(self.open_store(), registry=self.NOTE)],
                         [("in_progress", "unknown")])
        # Named as a tool that commits through this store's downstream, its silence would release it.
        self.assertEqual(self.state(dispatcher), "unknown")

    def test_recovery_releases_only_the_tools_it_may_ask(self) -> None:
        dispatcher = self.notes()
        self.note(dispatcher, "a")
        store = self.open_store()
        self.assertDurable("SETTING_INVALID", lambda: dd.recover(store, receipt_tools="write_note"))
        self.assertEqual([o.after for o in dd.recover(store, registry=self.NOTE, receipt_tools=())], ["unknown"])
        self.assertEqual([o.after for o in dd.recover(store, registry=self.NOTE, receipt_tools={"write_note"})],
                         ["released"])

    def test_a_write_that_failed_is_released_with_its_answer_and_its_key_runs_again(self) -> None:
        effects = iter(("not_committed", "committed"))

        def execute(call: td.ExecuteCall) -> td.Execution:
            effect = next(effects)
            self.written.append(effect)
            return td.Execution({"name": "todo"} if effect == "committed" else None, effect)

        store = self.open_store()
        dispatcher = dd.DurableDispatcher(store=store, approvers=APPROVERS, registry=self.NOTE, seal_keys=SEAL_KEYS,
                                          hooks={"write_note": td.ToolHooks(execute=execute)})
        failed = self.note(dispatcher, "a")
        self.assertAnswer(failed, "TOOL_FAILED")
        row = dispatcher.ledger_row(ALICE, "write_note", KEY)
        self.assertEqual((row.state, row.package), ("released", canonical(failed).decode("utf-8")))
        self.assertIsNone(dd.verify_chain(store, seal_keys=SEAL_KEYS, registry=self.NOTE).fault)
        self.assertAnswer(self.note(dispatcher, "b"), "fresh")
        report = dd.verify_chain(store, seal_keys=SEAL_KEYS, registry=self.NOTE)
        self.assertEqual((report.fault, report.entries, self.written), (None, 2, ["not_committed", "committed"]))

    def test_a_status_hook_settles_what_it_finds(self) -> None:
        output = {"name": "todo"}
        for index, (found, answer, state) in enumerate((
                (td.StatusAnswer("receipt", "note-1", output), "receipt_reconciled", "reconciled"),
                (td.StatusAnswer("absent"), "OPERATION_NOT_EXECUTED", "released"),
                (td.StatusAnswer("unavailable"), "RECEIPT_UNAVAILABLE", "unknown"),
                (td.StatusAnswer("receipt", "note-1", {"name": "other"}), "STATUS_CONFLICT", "unknown"))):
            with self.subTest(found=found.found, answer=answer):
                self.new_store(f"status-{index}")
                asked: list[td.StatusQuery] = []
                dispatcher = self.notes(status=lambda query, found=found: asked.append(query) or found)
                self.note(dispatcher, "a")
                self.assertAnswer(self.status(dispatcher, "q"), answer)
                self.assertEqual((self.state(dispatcher), len(asked), asked[0].idempotency_key), (state, 1, KEY))
        # Reconciled: a repeat is the receipt's replay, and nothing was written again.
        self.new_store("replay")
        dispatcher = self.notes(status=lambda query: td.StatusAnswer("receipt", None, output))
        self.note(dispatcher, "a")
        self.assertAnswer(self.status(dispatcher, "q"), "receipt_reconciled")
        replay = self.note(dispatcher, "b")
        self.assertAnswer(replay, "local_replay")
        self.assertEqual((replay["model_result"]["data"], replay["protected_audit"]["downstream"]["receipt_ref"]),
                         (output, None))
        self.assertEqual(len(self.written), 5)


class TestPruning(StoreCase):
    def test_completed_records_expire_after_the_window_only(self) -> None:
        dispatcher = self.dispatcher(retention_ms=1_000)
        write(dispatcher, "a")
        store = self.open_store()
        dd.relay(store)
        self.clock.advance(999)
        self.assertEqual(dd.prune(store, retention_ms=1_000), dd.PruneReport(0, 0, 0))
        self.clock.advance(1)
        self.assertEqual(dd.prune(store, retention_ms=1_000), dd.PruneReport(1, 1, 1))
        self.assertIsNone(self.row(dispatcher))

    def test_unsent_event_blocks_pruning(self) -> None:
        dispatcher = self.dispatcher(retention_ms=1_000)
        write(dispatcher, "a")
        self.clock.advance(5_000)
        self.assertEqual(dd.prune(self.open_store(), retention_ms=1_000).operations, 0)
        self.assertEqual(self.row(dispatcher).state, "succeeded")

    def test_unknown_escalated_and_released_are_never_pruned(self) -> None:
        dispatcher = self.dispatcher(retention_ms=1_000)
        write(dispatcher, "a", "k-unknown", fault="handler_raises")
        write(dispatcher, "b", "k-released", fault="rate_limited")
        write(dispatcher, "c", "k-escalated", fault="timeout_after_commit")
        self.tamper("UPDATE operations SET state = 'escalated' WHERE idempotency_key = 'k-escalated'")
        self.clock.advance(100 * dd.RETENTION_MS)
        self.assertEqual(dd.prune(self.open_store(), retention_ms=1_000).operations, 0)
        self.assertEqual(rows(self.path, "SELECT state FROM operations ORDER BY state"),
                         [("escalated",), ("released",), ("unknown",)])

    def test_retry_after_the_window_makes_no_second_effect(self) -> None:
        dispatcher = self.dispatcher(retention_ms=1_000)
        first = write(dispatcher, "a")
        store = self.open_store()
        dd.relay(store)
        self.clock.advance(1_000)
        self.assertEqual(dd.prune(store, retention_ms=1_000).operations, 1)
        # The downstream answers the retry with the receipt it already holds: this call committed
        # nothing, so it cannot be a fresh write; its status query finds that receipt.
        again = write(dispatcher, "b")
        self.assertAnswer(again, "OUTCOME_UNKNOWN")
        self.assertEqual((again["execution"]["effects"], dispatcher.effect_count), (0, 1))
        settled = query(dispatcher, "q", op_tag="b")
        self.assertAnswer(settled, "receipt_reconciled")
        self.assertEqual(settled["model_result"]["data"], first["model_result"]["data"])


    def test_a_key_released_after_pruning_may_meet_its_pruned_rows_receipt(self) -> None:
        # The downstream keeps a pruned write's receipt; a retry refused before the downstream
        # releases the key over it. Its epoch is at most the one key_epochs kept: no holder of the
        # released row committed it. Without the kept epoch, it is an effect no release allows.
        dispatcher = self.dispatcher(retention_ms=1_000)
        write(dispatcher, "a")
        store = self.open_store()
        dd.relay(store)
        self.clock.advance(1_000)
        self.assertEqual(dd.prune(store, retention_ms=1_000).operations, 1)
        self.assertAnswer(write(dispatcher, "b", fault="rate_limited"), "RATE_LIMITED")
        self.assertEqual((self.row(dispatcher).state, dispatcher.effect_count), ("released", 1))
        self.assertIsNone(dd.verify_chain(store).fault)
        kept = rows(self.path, "SELECT epoch FROM key_epochs")
        self.tamper("DELETE FROM key_epochs")
        self.assertEqual(dd.verify_chain(store).fault.error.code, "STORE_TAMPERED")
        self.tamper("INSERT INTO key_epochs VALUES ('default', 'tenant-a', 'alice', 'create_refund_draft', "
                    f"'{KEY}', {kept[0][0]})")
        again = write(dispatcher, "c")
        self.assertAnswer(again, "OUTCOME_UNKNOWN")  # as every retry after the window: the receipt is the old one
        self.assertEqual((again["execution"]["effects"], dispatcher.effect_count), (0, 1))

    def test_a_pruned_key_restarts_above_its_fence(self) -> None:
        # Recovery raised the key's epoch (and the downstream's fence) to 2; after pruning, a
        # retry must not start again at epoch 1 below that fence.
        dispatcher = self.dispatcher(retention_ms=1_000)
        write(dispatcher, "a", fault="timeout_after_commit")
        store = self.open_store()
        self.assertEqual([o.after for o in dd.recover(store, retention_ms=1_000)], ["reconciled"])
        self.assertEqual(count(self.path, "SELECT epoch FROM downstream_fences"), 2)
        dd.relay(store)
        self.clock.advance(1_000)
        self.assertEqual(dd.prune(store, retention_ms=1_000).operations, 1)
        again = write(dispatcher, "b")
        self.assertAnswer(again, "OUTCOME_UNKNOWN")  # the downstream already held its receipt: nothing new
        self.assertEqual((again["execution"]["effects"], dispatcher.effect_count), (0, 1))
        self.assertEqual((self.row(dispatcher).state, self.row(dispatcher).lease_epoch), ("unknown", 3))
        self.assertAnswer(query(dispatcher, "q", op_tag="b"), "receipt_reconciled")
        self.assertEqual(dd.recover(store), ())
        self.assertEqual(rows(self.path, "SELECT epoch FROM key_epochs"), [(2,)])

    def test_pruning_never_lowers_a_kept_epoch(self) -> None:
        dispatcher = self.dispatcher(retention_ms=1_000)
        store = self.open_store()
        self.tamper("INSERT INTO key_epochs VALUES ('default', 'tenant-a', 'alice', 'create_refund_draft', "
                    f"'{KEY}', 9)")
        write(dispatcher, "a")
        self.assertEqual(self.row(dispatcher).lease_epoch, 10)
        self.tamper("UPDATE operations SET lease_epoch = 4")
        dd.relay(store)
        self.clock.advance(1_000)
        dd.prune(store, retention_ms=1_000)
        self.assertEqual(rows(self.path, "SELECT epoch FROM key_epochs"), [(9,)])

# --------------------------------------------------------------------------------------------
# Crash recovery with real processes
# --------------------------------------------------------------------------------------------

# point -> (how the child dies, what recovery does to it, what the replay is)
CRASHES = MappingProxyType({
    "after_claim": ("exit", [("in_progress", "released")], "fresh"),
    "after_downstream_commit": ("kill", [("in_progress", "reconciled")], "local_replay"),
    "after_outbox_write": ("exit", [("in_progress", "reconciled")], "local_replay"),
    "after_ledger_commit": ("kill", [], "local_replay"),
    "after_publish": ("exit", [], "local_replay"),
    "inside_consumer": ("kill", [], "local_replay"),
})


def realm_of(point: str) -> str:
    return point.replace("_", "-")


class TestCrashRecovery(unittest.TestCase):
    """Six children each die at one named point; then one fresh process recovers all six realms."""

    @classmethod
    def new_store(cls, path: Path) -> Path | str:
        """The store the children share (the PostgreSQL suite returns a DSN here)."""
        dd.open_store(path).close()
        return path

    @classmethod
    def setUpClass(cls) -> None:
        directory = tempfile.TemporaryDirectory()
        cls.addClassCleanup(directory.cleanup)
        cls.path = cls.new_store(Path(directory.name) / "crash.sqlite3")
        children = {point: subprocess.Popen(
            child_command({"action": "crash", "db": str(cls.path), "point": point, "mode": mode}),
            env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            for point, (mode, _, _) in CRASHES.items()}
        cls.exits = {}
        for point, child in children.items():
            out, err = child.communicate(timeout=CHILD_TIMEOUT_S)
            cls.exits[point] = (child.returncode, out, err)
        done = subprocess.run(child_command({"action": "recover", "db": str(cls.path),
                                             "realms": [realm_of(point) for point in CRASHES]}),
                              env=child_env(), capture_output=True, timeout=CHILD_TIMEOUT_S)
        cls.recovery = (done.returncode, done.stderr, json.loads(done.stdout) if done.returncode == 0 else None)

    def test_each_child_died_at_its_point(self) -> None:
        expected = {"exit": CRASH_EXIT, "kill": -signal.SIGKILL}
        for point, (mode, _, _) in CRASHES.items():
            with self.subTest(point=point):
                self.assertEqual(self.exits[point], (expected[mode], b"", b""))

    def test_recovery_process_ran_clean(self) -> None:
        self.assertEqual(self.recovery[:2], (0, b""))

    def test_the_chain_and_every_stored_package_verify_after_the_crashes(self) -> None:
        self.assertIsNone(self.recovery[2]["chain"])

    def test_recovery_drives_each_point_and_is_idempotent(self) -> None:
        report = self.recovery[2]
        for point, (_, moves, _) in CRASHES.items():
            with self.subTest(point=point):
                self.assertEqual([[o[1], o[2]] for o in report["first"] if o[0] == realm_of(point)],
                                 [list(move) for move in moves])
        self.assertEqual(report["second"], [])

    def test_at_most_one_effect_per_key(self) -> None:
        self.assertEqual(rows(self.path, "SELECT realm, COUNT(*) FROM downstream_receipts GROUP BY realm, status_ref "
                                         "ORDER BY realm"), [(realm, 1) for realm in sorted(map(realm_of, CRASHES))])

    def test_replay_equals_the_in_memory_answer_byte_for_byte(self) -> None:
        for point, (_, moves, answer) in CRASHES.items():
            with self.subTest(point=point):
                seen = self.recovery[2]["realms"][realm_of(point)]
                memory = reference()
                if answer == "local_replay":
                    lost = "timeout_after_commit" if moves else "none"
                    original = write(memory, "a", fault=lost)
                    if moves:
                        query(memory, "q", op_tag="a")
                    else:
                        self.assertEqual(seen["stored"], canonical(original).decode("utf-8"))
                self.assertEqual(seen["replay"], canonical(write(memory, "b")).decode("utf-8"))
                self.assertEqual(json.loads(seen["replay"])["model_result"]["delivery"], answer)

    def test_no_lost_event_and_no_duplicate_consumption(self) -> None:
        settled = rows(self.path, "SELECT realm, request_ref FROM operations "
                                  "WHERE state IN ('succeeded', 'reconciled') ORDER BY realm")
        self.assertEqual([realm for realm, _ in settled], sorted(map(realm_of, CRASHES)))
        events = rows(self.path, "SELECT realm, request_ref, event_id, sent_at IS NOT NULL FROM outbox ORDER BY realm")
        self.assertEqual([(realm, ref) for realm, ref, _, _ in events], settled)
        self.assertTrue(all(sent for *_, sent in events))
        consumed = rows(self.path, "SELECT realm, event_id, COUNT(*) FROM consumer_effects GROUP BY realm, event_id "
                                   "ORDER BY realm")
        self.assertEqual(consumed, [(realm, event_id, 1) for realm, _, event_id, _ in events])
        self.assertEqual(count(self.path, "SELECT COUNT(*) FROM inbox"), len(CRASHES))

    def test_republished_event_reached_the_broker_twice(self) -> None:
        published = dict(rows(self.path, "SELECT realm, COUNT(*) FROM broker_messages GROUP BY realm"))
        self.assertEqual(published, {realm_of(point): 2 if point == "after_publish" else 1 for point in CRASHES})

    def test_integrity_check_is_ok(self) -> None:
        self.assertEqual(integrity(self.path), "ok")


# --------------------------------------------------------------------------------------------
# Races with real processes
# --------------------------------------------------------------------------------------------


class TestRaces(unittest.TestCase):
    """Eight processes claim one key at once, then eight keys at once, then relay and consume."""

    new_store = TestCrashRecovery.new_store

    @classmethod
    def setUpClass(cls) -> None:
        directory = tempfile.TemporaryDirectory()
        cls.addClassCleanup(directory.cleanup)
        base = Path(directory.name)
        cls.path = cls.new_store(base / "race.sqlite3")
        barrier = base / "barrier"
        barrier.mkdir()
        children = [subprocess.Popen(
            child_command({"action": "race", "db": str(cls.path), "barrier": str(barrier), "index": index,
                           "racers": RACERS}), env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            for index in range(RACERS)]
        cls.results = []
        for child in children:
            out, err = child.communicate(timeout=CHILD_TIMEOUT_S)
            cls.results.append((child.returncode, err, json.loads(out) if child.returncode == 0 else out))

    def test_every_racer_exited_clean(self) -> None:
        self.assertEqual([(code, err) for code, err, _ in self.results], [(0, b"")] * RACERS)

    def test_same_key_exactly_one_fresh_others_replay_or_in_progress(self) -> None:
        first = [result["same_first"]["answer"] for _, _, result in self.results]
        self.assertEqual(first.count("fresh"), 1)
        self.assertLessEqual(set(first) - {"fresh"}, {"local_replay", "OPERATION_IN_PROGRESS"})

    def test_in_progress_answers_are_retryable_and_converge_to_one_answer(self) -> None:
        finals = [result["same_final"] for _, _, result in self.results]
        self.assertEqual(sorted(final["answer"] for final in finals), ["fresh"] + ["local_replay"] * (RACERS - 1))
        self.assertEqual(len({json.dumps(final["data"], sort_keys=True) for final in finals}), 1)
        for _, _, result in self.results:
            if result["same_first"]["answer"] == "OPERATION_IN_PROGRESS":
                self.assertIs(result["same_first"]["retryable"], True)

    def test_same_key_made_one_effect(self) -> None:
        self.assertEqual(count(self.path, "SELECT COUNT(*) FROM downstream_receipts d JOIN operations o "
                                          "ON o.status_ref = d.status_ref WHERE o.idempotency_key = 'k-same'"), 1)

    def test_different_keys_each_land_once(self) -> None:
        self.assertEqual([result["own"]["answer"] for _, _, result in self.results], ["fresh"] * RACERS)
        drafts = {result["own"]["data"]["draft_id"] for _, _, result in self.results}
        self.assertEqual(len(drafts), RACERS)
        self.assertEqual(rows(self.path, "SELECT state, COUNT(*) FROM operations GROUP BY state"),
                         [("succeeded", RACERS + 1)])
        self.assertEqual(count(self.path, "SELECT COUNT(*) FROM downstream_receipts"), RACERS + 1)

    def test_concurrent_relays_and_consumers_act_once_per_event(self) -> None:
        self.assertEqual(rows(self.path, "SELECT COUNT(*), COUNT(sent_at) FROM outbox"), [(RACERS + 1, RACERS + 1)])
        self.assertEqual(rows(self.path, "SELECT COUNT(*), COUNT(DISTINCT event_id) FROM consumer_effects"),
                         [(RACERS + 1, RACERS + 1)])
        self.assertEqual(integrity(self.path), "ok")


# --------------------------------------------------------------------------------------------
# 13. CLI
# --------------------------------------------------------------------------------------------


class TestCli(StoreCase):
    def main(self, *argv: str) -> tuple[int, dict[str, Any], str]:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = dd.main(list(argv))
        text = out.getvalue()
        return code, json.loads(text), text

    def assertRejected(self, code: str, *argv: str) -> None:
        status, body, text = self.main(*argv)
        self.assertEqual((status, body["passed"], body["error"]["code"]), (2, False, code))
        self.assertNotIn(str(self.dir), text)
        self.assertNotIn("Traceback", text)

    def test_run_creates_the_database_and_passes(self) -> None:
        status, body, _ = self.main("run", "--fixture", str(FIXTURE), "--db", str(self.path))
        self.assertEqual((status, body["passed"], body["case_count"], body["step_count"]), (0, True, 20, 30))
        self.assertEqual((body["store"]["integrity"], body["store"]["synchronous"], body["store"]["effects"]),
                         ("ok", "FULL", 7))

    def test_recover_after_run_reconciles_and_drains_the_outbox(self) -> None:
        self.main("run", "--fixture", str(FIXTURE), "--db", str(self.path), "--synchronous", "NORMAL")
        status, body, _ = self.main("recover", "--db", str(self.path))
        self.assertEqual((status, body["recovered"], body["relayed"], body["consumed"]),
                         (0, {"reconciled": 1}, 7, 7))
        self.assertEqual(body["store"]["operations"], {"reconciled": 2, "released": 2, "succeeded": 5})
        self.assertEqual(body["pruned"], {"operations": 0, "events": 0, "calls": 0})
        status, body, _ = self.main("recover", "--db", str(self.path))
        self.assertEqual((status, body["recovered"], body["relayed"], body["consumed"]), (0, {}, 0, 0))

    def test_an_empty_seal_key_path_is_refused_not_read_as_no_flag(self) -> None:
        # `--seal-key "$KEYS"` with KEYS unset asks for keys: the run must not go unsealed (nor fall
        # back to the environment's file), and verify-chain must not stop requiring seals.
        keys = self.dir / "keys.json"
        keys.write_text(json.dumps({"format": "seal-keys-v1", "current": "k-a",
                                    "keys": [{"key_id": "k-a", "secret_hex": bytes(range(32)).hex()}]}))
        for environment in ({}, {td.SEAL_KEYS_ENVIRONMENT: str(keys)}):
            with self.subTest(environment=bool(environment)), mock.patch.dict(os.environ, environment):
                self.assertRejected("SEAL_KEYS_UNREADABLE", "run", "--fixture", str(FIXTURE), "--db", str(self.path),
                                    "--seal-key", "")
                self.assertFalse(self.path.exists())
        self.main("run", "--fixture", str(FIXTURE), "--db", str(self.path), "--seal-key", str(keys))
        self.assertRejected("SEAL_KEYS_UNREADABLE", "verify-chain", "--db", str(self.path), "--seal-key", "")

    def test_recover_exits_1_when_an_operator_is_needed(self) -> None:
        write(self.dispatcher(), "a", fault="timeout_after_commit")
        self.tamper("UPDATE downstream_receipts SET producer_revision = 'x'")
        status, body, _ = self.main("recover", "--db", str(self.path))
        self.assertEqual((status, body["recovered"]), (1, {"escalated": 1}))

    def test_a_chain_head_of_the_wrong_kind_is_a_store_error(self) -> None:
        # SQLite keeps any value in an INTEGER column (PostgreSQL refuses it at the UPDATE).
        dispatcher = self.dispatcher()
        write(dispatcher, "a")
        for sql in ("UPDATE audit_heads SET entries = 'x'", "UPDATE audit_heads SET entries = 1, head_sha256 = zeroblob(64)",
                    "UPDATE audit_heads SET head_sha256 = '" + "a" * 64 + "'; UPDATE audit_chain SET entry = X'00'"):
            with self.subTest(sql=sql):
                for statement in sql.split("; "):
                    self.tamper(statement)
                status, body, _ = self.main("verify-chain", "--db", str(self.path))
                self.assertEqual((status, body["error"]["code"]), (2, "STORE_INVALID"))
                if "entries = 'x'" in sql:  # the next append reads the head too
                    self.assertDurable("STORE_INVALID", lambda: write(dispatcher, "b", "idem-b"))

    def test_recover_never_creates_a_store_in_an_empty_file(self) -> None:
        self.path.write_bytes(b"")
        status, body, _ = self.main("recover", "--db", str(self.path))
        self.assertEqual((status, body["error"]["code"], self.path.read_bytes()), (2, "STORE_INVALID", b""))

    def test_failed_expectation_exits_1_in_ascii(self) -> None:
        broken = self.dir / "broken.json"
        data = FIXTURE.read_bytes().replace(b'"effect_count": 1', b'"effect_count": 2', 1)
        broken.write_bytes(data.replace(b'"status": "paid"\n', '"status": "pay\u00e9"\n'.encode(), 1))
        status, body, text = self.main("run", "--fixture", str(broken), "--db", str(self.path))
        self.assertEqual((status, body["passed"], [failure["field"] for failure in body["failures"]]),
                         (1, False, ["data", "effect_count"]))
        self.assertTrue(text.isascii())
        self.assertIn("pay\\u00e9", text)

    def test_one_case(self) -> None:
        status, body, _ = self.main("run", "--fixture", str(FIXTURE), "--db", str(self.path), "--case",
                                    "unknown-then-receipt-query")
        self.assertEqual((status, body["case_count"], body["step_count"]), (0, 1, 2))

    def test_an_option_given_twice_is_refused_not_the_last_one_taken(self) -> None:
        # argparse keeps the last of two values: `verify-chain --db missing --db ledger` used to
        # verify the second database and pass. Every option, in every command, counts once.
        self.main("run", "--fixture", str(FIXTURE), "--db", str(self.path), "--synchronous", "NORMAL")
        ledger, missing, fixture = str(self.path), str(self.dir / "missing.db"), str(FIXTURE)
        for argv in (("verify-chain", "--db", missing, "--db", ledger),
                     ("verify-chain", "--db=" + ledger, "--db=" + ledger),
                     ("verify-chain", "--store", missing, "--store", ledger),
                     ("verify-chain", "--db", ledger, "--seal-key", fixture, "--seal-key", fixture),
                     ("recover", "--db", ledger, "--synchronous", "FULL", "--synchronous", "NORMAL"),
                     ("run", "--fixture", fixture, "--fixture", fixture, "--db", missing),
                     ("run", "--fixture", fixture, "--db", missing, "--case", "a", "--case", "a")):
            with self.subTest(argv=argv[:3]):
                self.assertRejected("CLI_USAGE", *argv)
        self.assertEqual(sorted(entry.name for entry in self.dir.iterdir()), ["ledger.sqlite3"])
        status, body, _ = self.main("verify-chain", "--db", ledger)  # once each, as before
        self.assertEqual((status, body["passed"]), (0, True))

    def test_hostile_command_lines_are_refused_without_trace(self) -> None:
        self.dir.joinpath("text.db").write_bytes(b"plain text, not sqlite " * 8)
        with contextlib.closing(sqlite3.connect(self.dir / "theirs.db")) as connection:
            connection.execute("CREATE TABLE theirs (x)")
        self.dir.joinpath("exists.db").write_bytes(b"")
        fixture = str(FIXTURE)
        cases = [
            ("CLI_USAGE", ()),
            ("CLI_USAGE", ("bogus",)),
            ("CLI_USAGE", ("run", "--fixture", fixture)),
            ("CLI_USAGE", ("run", "--db", str(self.path))),
            ("CLI_USAGE", ("run", "--fixture", fixture, "--db", str(self.path), "--synchronous", "OFF")),
            ("CLI_USAGE", ("recover",)),
            ("CLI_USAGE", ("recover", "--db", str(self.path), "--extra")),
            ("STORE_EXISTS", ("run", "--fixture", fixture, "--db", str(self.dir / "exists.db"))),
            ("STORE_UNREADABLE", ("run", "--fixture", fixture, "--db", str(self.dir / "missing" / "x.db"))),
            ("STORE_UNREADABLE", ("run", "--fixture", fixture, "--db", str(self.dir / "a\x00b"))),
            ("STORE_UNREADABLE", ("run", "--fixture", fixture, "--db", str(self.dir))),
            ("FIXTURE_UNREADABLE", ("run", "--fixture", str(self.dir / "none.json"), "--db", str(self.path))),
            ("FIXTURE_UNREADABLE", ("run", "--fixture", str(self.dir), "--db", str(self.path))),
            ("CLI_UNKNOWN_CASE", ("run", "--fixture", fixture, "--db", str(self.path), "--case", "nope")),
            ("STORE_UNREADABLE", ("recover", "--db", str(self.path))),
            ("STORE_UNREADABLE", ("recover", "--db", str(self.dir))),
            ("STORE_INVALID", ("recover", "--db", str(self.dir / "text.db"))),
            ("STORE_INVALID", ("recover", "--db", str(self.dir / "theirs.db"))),
            ("CLI_USAGE", ("verify-chain",)),
            ("CLI_USAGE", ("verify-chain", "--db", str(self.path), "--store", str(self.path))),
            ("CLI_USAGE", ("recover", "--db", str(self.path), "--seal-key", fixture)),
            ("STORE_UNREADABLE", ("verify-chain", "--db", str(self.path))),
            ("STORE_INVALID", ("verify-chain", "--db", str(self.dir / "theirs.db"))),
            ("SEAL_KEYS_UNREADABLE", ("verify-chain", "--db", str(self.dir / "theirs.db"), "--seal-key",
                                      str(self.dir / "none.json"))),
            ("SEAL_KEYS_INVALID", ("run", "--fixture", fixture, "--db", str(self.path), "--seal-key", fixture)),
        ]
        for code, argv in cases:
            with self.subTest(argv=argv[:1], code=code):
                self.assertRejected(code, *argv)
        self.assertFalse(self.path.exists())
        self.assertEqual(self.dir.joinpath("text.db").read_bytes(), b"plain text, not sqlite " * 8)

    def test_deep_fixture_is_refused_before_a_database_exists(self) -> None:
        deep = self.dir / "deep.json"
        deep.write_bytes(b"[" * 4_096 + b"]" * 4_096)
        self.assertRejected("JSON_TOO_DEEP", "run", "--fixture", str(deep), "--db", str(self.path))
        self.assertFalse(self.path.exists())

    def test_unexpected_failure_is_internal_error(self) -> None:
        original = dd._COMMANDS

        def explode(_arguments: Any) -> int:
            raise RuntimeError(str(self.dir))
        dd._COMMANDS = MappingProxyType({"run": explode, "recover": explode})
        try:
            self.assertRejected("INTERNAL_ERROR", "recover", "--db", str(self.path))
        finally:
            dd._COMMANDS = original

    def test_real_process_runs_and_refuses_without_traceback(self) -> None:
        script = str(HERE / "durable_dispatcher.py")
        flags = ["-B"] + (["-O"] * sys.flags.optimize) + [f"-W{option}" for option in sys.warnoptions]
        ok = subprocess.run([sys.executable, *flags, script, "run", "--fixture", str(FIXTURE), "--db", str(self.path)],
                            capture_output=True, env=child_env(), timeout=CHILD_TIMEOUT_S)
        self.assertEqual((ok.returncode, ok.stderr, json.loads(ok.stdout)["passed"]), (0, b"", True))
        bad = subprocess.run([sys.executable, *flags, script, "recover", "--db", str(self.dir / "nope.db")],
                             capture_output=True, env=child_env(), timeout=CHILD_TIMEOUT_S)
        self.assertEqual((bad.returncode, bad.stderr, json.loads(bad.stdout)["error"]["code"]),
                         (2, b"", "STORE_UNREADABLE"))
        self.assertNotIn(str(self.dir).encode(), bad.stdout)

    def test_verify_chain_of_a_store_it_may_not_write_is_unreadable_and_leaves_no_file(self) -> None:
        # SQLite reads a WAL database only through its -shm file, which it cannot create in a
        # read-only directory: the store cannot be opened, and nothing is written. Root ignores
        # file modes, so as root the child runs in a user namespace of its own, where they hold.
        folder = self.dir / "read-only"
        folder.mkdir()
        path = folder / "ledger.sqlite3"
        with dd.open_store(path, synchronous="NORMAL", clock_ms=self.clock) as store:
            self.assertAnswer(write(self.dispatcher(store), "a"), "fresh")
        self.assertEqual([entry.name for entry in folder.iterdir()], ["ledger.sqlite3"])
        prefix: list[str] = []
        if os.geteuid() == 0:
            unshare = shutil.which("unshare")
            if unshare is None or subprocess.run([unshare, "--user", "true"], capture_output=True,
                                                 timeout=CHILD_TIMEOUT_S).returncode != 0:
                self.skipTest("running as root without a user namespace: file modes cannot hold")
            prefix = [unshare, "--user"]
        path.chmod(0o444)
        folder.chmod(0o555)
        self.addCleanup(folder.chmod, 0o755)
        flags = ["-B"] + (["-O"] * sys.flags.optimize) + [f"-W{option}" for option in sys.warnoptions]
        done = subprocess.run([*prefix, sys.executable, *flags, str(HERE / "durable_dispatcher.py"), "verify-chain",
                               "--db", str(path)], capture_output=True, env=child_env(), timeout=CHILD_TIMEOUT_S)
        self.assertEqual((done.returncode, done.stderr, json.loads(done.stdout)["error"]["code"]),
                         (2, b"", "STORE_UNREADABLE"))
        self.assertNotIn(str(self.dir).encode(), done.stdout)
        self.assertEqual([entry.name for entry in folder.iterdir()], ["ledger.sqlite3"])
        folder.chmod(0o755)  # the same store where it may be written: it verifies
        status, body, _ = self.main("verify-chain", "--db", str(path))
        self.assertEqual((status, body["passed"], body["rows"]), (0, True, 1))

    def test_a_full_disk_is_unreadable_and_a_failed_run_leaves_no_file(self) -> None:
        # A real process under a file size limit (writes past it fail as on a full disk): `run`
        # cannot create its store and leaves nothing, so the same command succeeds once there is
        # room; `verify-chain` of a store cannot make its -shm file and says it could not open it.
        flags = ["-B"] + (["-O"] * sys.flags.optimize) + [f"-W{option}" for option in sys.warnoptions]
        fixture = str(FIXTURE)
        for limit in (0, 4_096, 65_536):
            with self.subTest(limit=limit):
                done = subprocess.run(child_command({"action": "limited", "limit": limit, "argv": [
                    "run", "--fixture", fixture, "--db", str(self.path)]}),
                    capture_output=True, env=child_env(), timeout=CHILD_TIMEOUT_S)
                self.assertEqual((done.returncode, done.stderr, json.loads(done.stdout)["error"]["code"]),
                                 (2, b"", "STORE_UNREADABLE"))
                self.assertNotIn(str(self.dir).encode(), done.stdout)
                self.assertEqual(list(self.dir.iterdir()), [])
        ok = subprocess.run([sys.executable, *flags, str(HERE / "durable_dispatcher.py"), "run", "--fixture", fixture,
                             "--db", str(self.path)], capture_output=True, env=child_env(), timeout=CHILD_TIMEOUT_S)
        self.assertEqual((ok.returncode, ok.stderr, json.loads(ok.stdout)["passed"]), (0, b"", True))
        done = subprocess.run(child_command({"action": "limited", "limit": 0, "argv": [
            "verify-chain", "--db", str(self.path)]}), capture_output=True, env=child_env(), timeout=CHILD_TIMEOUT_S)
        self.assertEqual((done.returncode, done.stderr, json.loads(done.stdout)["error"]["code"]),
                         (2, b"", "STORE_UNREADABLE"))

    def test_every_failure_is_the_projects_one_envelope(self) -> None:
        # The same shape as every CLI of the project: {"passed": false, "error": {code, message,
        # retryable}}, exit 2; usage and unforeseen errors with the core's own codes.
        for argv, code in ((["bogus"], "CLI_USAGE"), (["recover", "--db", str(self.dir / "nope.db")],
                                                    "STORE_UNREADABLE")):
            with self.subTest(argv=argv[0]):
                status, body, _ = self.main(*argv)
                spec = {**td.ERROR_CATALOG, **dd.DURABLE_ERRORS}[code]
                self.assertEqual((status, body), (2, {"passed": False, "error": {
                    "code": code, "message": spec.message, "retryable": spec.retryable}}))
        with mock.patch.object(dd, "_COMMANDS", {"run": lambda _arguments: 1 // 0}):
            status, body, _ = self.main("run", "--fixture", str(FIXTURE), "--db", str(self.path))
        self.assertEqual((status, body["error"]["code"]), (2, "INTERNAL_ERROR"))


# --------------------------------------------------------------------------------------------
# The benchmark script
# --------------------------------------------------------------------------------------------


SPLIT_ROW_FIELDS: Final = ("bare_commits_per_s", "durable_writes_per_s", "ratio_to_bare", "bare_cpu_ms_per_commit",
                           "bare_wait_ms_per_commit", "durable_cpu_ms_per_write", "durable_wait_ms_per_write",
                           "memory_cpu_ms_per_write", "wait_ratio_to_bare", "cpu_ratio_to_memory",
                           "wait_target_held", "cpu_target_held")


class TestBenchmark(StoreCase):
    def test_quick_benchmark_runs_and_reports_both_modes(self) -> None:
        import bench_durable
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            status = bench_durable.main(["--quick", "--dir", str(self.dir)])
        report = json.loads(out.getvalue())
        self.assertEqual((status, report["passed"], report["writes"], report["quick"]),
                         (0, True, bench_durable.QUICK_WRITES, True))
        self.assertEqual((sorted(report["modes"]), report["targets"]),
                         (["FULL", "NORMAL"], {"wait_ratio_to_bare_at_least": 0.3, "cpu_ratio_to_memory_at_most": 2.0}))
        self.assertIsNone(report["modes"]["NORMAL"]["wait_target_held"])
        self.assertIn(report["modes"]["FULL"]["wait_target_held"], (True, False))
        for mode in report["modes"].values():
            self.assertEqual(sorted(mode), sorted(SPLIT_ROW_FIELDS))
            self.assertGreater(mode["durable_writes_per_s"], 0)
            self.assertAlmostEqual(mode["ratio_to_bare"], mode["durable_writes_per_s"] / mode["bare_commits_per_s"],
                                   places=2)
        self.assertEqual((sorted(report["machine"]), report["machine"]["cores"]),
                         (["cores", "cpu", "load_average", "load_average_after"], os.cpu_count()))
        self.assertEqual(list(self.dir.iterdir()), [])

    def test_each_loop_is_split_into_cpu_and_wait(self) -> None:
        import bench_durable
        # 100 bare commits in 0.1 s, 0.04 s of it on a CPU; 10 durable writes in 0.05 s, 0.02 s on a CPU.
        # The in-memory write: 10 in 0.01 s of CPU, 1 ms each.
        timing = bench_durable.Timing
        row = bench_durable._split_row(timing(100, 0.1, 0.04), timing(10, 0.05, 0.02), timing(10, 0.012, 0.01))
        self.assertEqual(row, {
            "bare_commits_per_s": 1000.0, "durable_writes_per_s": 200.0, "ratio_to_bare": 0.2,
            "bare_cpu_ms_per_commit": 0.4, "bare_wait_ms_per_commit": 0.6,
            "durable_cpu_ms_per_write": 2.0, "durable_wait_ms_per_write": 3.0, "memory_cpu_ms_per_write": 1.0,
            "wait_ratio_to_bare": 0.2, "cpu_ratio_to_memory": 2.0,
            "wait_target_held": False, "cpu_target_held": True,  # 0.2 < 0.3; 2.0 is at most 2.0
        })
        # Both sides of each target: a wait ratio of exactly 0.3 holds, a CPU ratio a hair above 2 does not.
        row = bench_durable._split_row(timing(10, 0.01, 0.007), timing(1, 0.02, 0.01), timing(1, 0.004, 0.004))
        self.assertEqual((row["wait_ratio_to_bare"], row["wait_target_held"], row["cpu_ratio_to_memory"],
                          row["cpu_target_held"]), (0.03, False, 2.5, False))
        row = bench_durable._split_row(timing(10, 0.01, 0.004), timing(1, 0.003, 0.001), timing(1, 0.001, 0.0005))
        self.assertEqual((row["wait_ratio_to_bare"], row["wait_target_held"], row["cpu_ratio_to_memory"],
                          row["cpu_target_held"]), (0.3, True, 2.0, True))
        # More CPU time than wall time (the clocks' grains differ) is no wait, not a negative one; no
        # wait holds the first target; no CPU measured for the in-memory write says nothing of the second.
        row = bench_durable._split_row(timing(10, 0.01, 0.002), timing(1, 0.001, 0.002), timing(1, 0.0, 0.0))
        self.assertEqual((row["durable_wait_ms_per_write"], row["wait_ratio_to_bare"], row["wait_target_held"],
                          row["cpu_ratio_to_memory"], row["cpu_target_held"]), (0.0, None, True, None, None))
        # A commit that waits for no disk (SQLite NORMAL): the waits are not judged.
        row = bench_durable._split_row(timing(100, 0.1, 0.04), timing(10, 0.05, 0.02), timing(10, 0.012, 0.01),
                                       waits_judged=False)
        self.assertEqual((row["wait_ratio_to_bare"], row["wait_target_held"], row["cpu_target_held"]), (0.2, None, True))

    def test_workers_add_threaded_figures_beside_the_single_worker_ones(self) -> None:
        import bench_durable
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            status = bench_durable.main(["--quick", "--workers", "2", "--dir", str(self.dir)])
        report = json.loads(out.getvalue())
        self.assertEqual((status, report["passed"], report["writes"]), (0, True, bench_durable.QUICK_WRITES))
        self.assertEqual((sorted(report["modes"]), report["workers"]["count"], sorted(report["workers"]["modes"])),
                         (["FULL", "NORMAL"], 2, ["FULL", "NORMAL"]))
        for mode in report["workers"]["modes"].values():
            self.assertGreater(mode["durable_writes_per_s"], 0)
            self.assertAlmostEqual(mode["ratio_to_bare"], mode["durable_writes_per_s"] / mode["bare_commits_per_s"],
                                   places=2)
        self.assertEqual(list(self.dir.iterdir()), [])

    def test_both_ends_of_the_workers_range_run(self) -> None:
        import bench_durable
        for workers, threaded in ((1, None), (bench_durable.MAX_WORKERS, bench_durable.MAX_WORKERS)):
            with self.subTest(workers=workers):
                out = io.StringIO()
                with contextlib.redirect_stdout(out):
                    status = bench_durable.main(["--quick", "--workers", str(workers), "--dir", str(self.dir)])
                report = json.loads(out.getvalue())
                self.assertEqual((status, report.get("workers", {}).get("count")), (0, threaded))

    def bench_failure(self, *argv: str) -> tuple[int, Any, str]:
        import bench_durable
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = bench_durable.main(list(argv))
        return status, json.loads(out.getvalue())["error"]["code"], err.getvalue()

    def test_workers_outside_their_range_are_refused(self) -> None:
        import bench_durable
        for workers in ("0", str(bench_durable.MAX_WORKERS + 1), "x"):
            with self.subTest(workers=workers):
                self.assertEqual(self.bench_failure("--quick", "--workers", workers, "--dir", str(self.dir)),
                                 (2, "CLI_USAGE", ""))

    def test_writes_outside_their_range_and_bad_command_lines_are_usage_errors(self) -> None:
        import bench_durable
        for argv in (("--writes", "0"), ("--writes", str(bench_durable.MAX_WRITES + 1)),
                     ("--writes", "x"), ("--writes",), ("--bogus",), ("extra",)):
            with self.subTest(argv=argv):
                self.assertEqual(self.bench_failure(*argv, "--dir", str(self.dir)), (2, "CLI_USAGE", ""))

    def test_a_directory_it_cannot_use_is_refused_without_a_traceback(self) -> None:
        blocker = self.dir / "a-file"
        blocker.write_bytes(b"x")
        for where in (self.dir / "absent", blocker):
            with self.subTest(where=where.name):
                self.assertEqual(self.bench_failure("--quick", "--dir", str(where)), (2, "STORE_UNREADABLE", ""))

    def test_pg_without_the_driver_is_refused_before_any_measurement(self) -> None:
        import bench_durable
        with mock.patch.object(bench_durable, "measure", side_effect=AssertionError("measured")), \
                mock.patch.dict(sys.modules, {"psycopg": None}):  # None: the import fails
            self.assertEqual(self.bench_failure("--quick", "--pg", "postgresql://bench@localhost/none",
                                                "--dir", str(self.dir)), (2, "STORE_DRIVER_MISSING", ""))

    def test_ctrl_c_is_exit_130_in_the_failure_shape(self) -> None:
        import bench_durable
        with mock.patch.object(bench_durable, "measure", side_effect=KeyboardInterrupt):
            self.assertEqual(self.bench_failure("--quick", "--dir", str(self.dir)), (130, "CLI_INTERRUPTED", ""))
        self.assertEqual(list(self.dir.iterdir()), [])

    def test_a_worker_that_fails_fails_the_benchmark(self) -> None:
        import bench_durable

        def work(index: int, ready: threading.Barrier) -> None:
            if index == 1:
                raise RuntimeError("a worker's write failed")
            ready.wait()
        out = io.StringIO()
        with contextlib.redirect_stdout(out), self.assertRaises(SystemExit) as caught:
            bench_durable._in_threads(2, work)
        self.assertEqual((caught.exception.code, json.loads(out.getvalue())),
                         (1, {"passed": False, "error": "a benchmark worker failed: RuntimeError"}))


# --------------------------------------------------------------------------------------------
# The child program (crash and race tests)
# --------------------------------------------------------------------------------------------


def _child_crash(spec: dict[str, Any]) -> int:
    point, mode = spec["point"], spec["mode"]

    def die(reached: str) -> None:
        if reached == point:
            if mode == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            os._exit(CRASH_EXIT)

    realm = realm_of(point)
    with dd.open_store(spec["db"]) as store:
        dispatcher = dd.DurableDispatcher(ORDERS, store=store, realm=realm, approvers=APPROVERS,
                                          lease_ms=CHILD_LEASE_MS, checkpoint=die)
        write(dispatcher, "a")
        dd.relay(store, realm=realm, checkpoint=die)
        dd.consume(store, realm=realm, checkpoint=die)
    return NOT_CRASHED


def _child_recover(spec: dict[str, Any]) -> int:
    def skewed() -> int:
        return dd.wall_clock_ms() + RECOVERY_SKEW_MS

    def view(outcomes: tuple[dd.RecoveryOutcome, ...]) -> list[list[str]]:
        return [[outcome.realm, outcome.before, outcome.after] for outcome in outcomes]

    report: dict[str, Any] = {"realms": {}}
    with dd.open_store(spec["db"], create=False, clock_ms=skewed) as store:
        report["first"] = view(dd.recover(store))
        report["second"] = view(dd.recover(store))
        fault = dd.verify_chain(store).fault  # whatever died where, the chain and the stored packages hold
        report["chain"] = None if fault is None else fault.view()
        for realm in spec["realms"]:
            dispatcher = dd.DurableDispatcher(ORDERS, store=store, realm=realm, approvers=APPROVERS)
            report["realms"][realm] = {
                "replay": canonical(write(dispatcher, "b")).decode("utf-8"),
                "stored": (dispatcher.stored_package(ALICE, "create_refund_draft", KEY) or b"").decode("utf-8"),
            }
        dd.relay(store)
        dd.consume(store)
    sys.stdout.write(json.dumps(report) + "\n")
    return 0


def _arrive(barrier: Path, phase: str, index: int, racers: int) -> None:
    barrier.joinpath(f"{phase}-{index}").touch()
    deadline = time.monotonic() + CHILD_TIMEOUT_S / 2
    while len(list(barrier.glob(f"{phase}-*"))) < racers:
        if time.monotonic() > deadline:
            raise SystemExit("barrier timed out")
        time.sleep(0.002)


def _child_race(spec: dict[str, Any]) -> int:
    index, racers, barrier = spec["index"], spec["racers"], Path(spec["barrier"])

    def slow_commit(reached: str) -> None:
        if reached == "after_downstream_commit":
            time.sleep(0.15)  # the winner holds its lease a while, so others meet it in progress

    results: dict[str, Any] = {}
    with dd.open_store(spec["db"]) as store:
        dispatcher = dd.DurableDispatcher(ORDERS, store=store, realm="race", approvers=APPROVERS,
                                          checkpoint=slow_commit)
        _arrive(barrier, "same", index, racers)
        results["same_first"] = answer = answer_of(lambda: write(dispatcher, f"same-{index}", "k-same"))
        for _retry in range(500):
            if answer["answer"] != "OPERATION_IN_PROGRESS":
                break
            time.sleep(0.01)
            answer = answer_of(lambda: write(dispatcher, f"same-{index}", "k-same"))
        results["same_final"] = answer
        _arrive(barrier, "own", index, racers)
        results["own"] = answer_of(lambda: write(dispatcher, f"own-{index}", f"k-own-{index}"))
        dd.relay(store)
        dd.consume(store)
    for result in results.values():
        result.pop("package", None)
    sys.stdout.write(json.dumps(results) + "\n")
    return 0


def _child_open(spec: dict[str, Any]) -> int:
    _arrive(Path(spec["barrier"]), "open", spec["index"], spec["racers"])
    try:
        dd.open_store(spec["db"]).close()
    except dd.DurableError as error:
        sys.stdout.write(error.code + "\n")
        return 1
    sys.stdout.write("ok\n")
    return 0


def _child_limited(spec: dict[str, Any]) -> int:
    """The CLI under a file size limit: a write past it fails (EFBIG) as on a full disk."""
    import resource
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the failed write is an error, not a dead process
    resource.setrlimit(resource.RLIMIT_FSIZE, (spec["limit"], spec["limit"]))
    return dd.main(spec["argv"])


def _quietly(call: Callable[[], Any]) -> Any:
    """A side task of a chaos worker: a store error (busy, lost lease) just skips it."""
    try:
        return call()
    except td.CatalogError:
        return None


def _child_chaos(spec: dict[str, Any]) -> int:
    """A chaos worker: dispatches on shared hot keys until its deadline (or its SIGKILL), settles
    what it finds unknown with a status query, now and then relays, consumes or recovers, and
    prints every answer it got as one JSON line, flushed at once."""
    import random
    rng = random.Random(spec["seed"])

    def jitter(_point: str) -> None:
        time.sleep(rng.random() * spec["jitter_s"])  # widens every window a kill can land in

    def say(record: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(record) + "\n")
        sys.stdout.flush()

    with dd.open_store(spec["db"]) as store:
        dispatcher = dd.DurableDispatcher(ORDERS, store=store, realm="chaos", approvers=APPROVERS,
                                          lease_ms=spec["lease_ms"], checkpoint=jitter)
        attempt = 0
        while time.time() < spec["until"]:
            attempt += 1
            # The hot keys rotate: every worker moves to a new generation of them at the same
            # moment, so fresh contended writes (and kills in the middle of them) go on all run long.
            generation = int((time.time() - spec["start"]) / spec["rotate_s"])
            key = f"{rng.choice(spec['keys'])}-g{generation}"
            tag = f"w{spec['index']}-{attempt}"
            answer = answer_of(lambda: write(dispatcher, tag, key))
            say({"key": key, "kind": "dispatch", "answer": answer["answer"], "data": answer.get("data")})
            row = None
            if answer["answer"] in ("OUTCOME_UNKNOWN", "HANDLER_FAILED"):
                row = _quietly(lambda: dispatcher.ledger_row(ALICE, "create_refund_draft", key))
            if row is not None:  # the host asks about the operation the ledger recorded
                settled = answer_of(lambda: query(dispatcher, f"{tag}-q", key, op_tag=row.operation_id[3:]))
                say({"key": key, "kind": "query", "answer": settled["answer"], "data": settled.get("data")})
            elif answer["answer"] in ("OPERATION_IN_PROGRESS", "local_replay"):
                time.sleep(rng.random() * 0.02)
            side = rng.random()
            if side < 0.1:
                _quietly(lambda: (dd.relay(store), dd.consume(store)))
            elif side < 0.15:
                _quietly(lambda: dd.recover(store))
    return 0


CHILD_ACTIONS: dict[str, Callable[[dict[str, Any]], int]] = {
    "crash": _child_crash,
    "recover": _child_recover,
    "race": _child_race,
    "open": _child_open,
    "chaos": _child_chaos,
    "limited": _child_limited,
}


if __name__ == "__main__":
    child_spec = json.loads(sys.argv[1])
    sys.exit(CHILD_ACTIONS[child_spec["action"]](child_spec))
