"""The durable layer against a real PostgreSQL: the same guarantees as on SQLite.

Needs a server and psycopg: ``bash durable/pg/ci.sh`` starts a throwaway server, installs psycopg
into a virtual environment outside the checkout and runs this file with DURABLE_PG_DSN set. Without
them the suite is skipped with one SKIP line; under CI=true it fails instead, never skips.

Every test works in a schema of its own (search_path in the DSN), so tests never see each other's
rows. The crash and race tests are the SQLite suite's own classes, pointed at the server: the same
children, killed at the same points, the same assertions.
"""
from __future__ import annotations

import json
import os
import random
import secrets
import signal
import subprocess
import sys
import threading
import time
import unittest
from pathlib import Path
from typing import Any
from urllib.parse import quote

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import durable_dispatcher as dd  # noqa: E402
import test_durable_dispatcher as base  # noqa: E402
import tool_dispatcher as td  # noqa: E402

DSN = os.environ.get("DURABLE_PG_DSN", "")
try:
    import psycopg
except ImportError:
    psycopg = None  # type: ignore[assignment]

CHAOS_WORKERS = 8  # at least eight processes at once: separate hosts in all but name
CHAOS_SECONDS = 12.0  # long enough for dozens of kills, short enough for CI
CHAOS_KEYS = ("hot-1", "hot-2", "hot-3", "hot-4", "hot-5", "hot-6")  # keys every worker hammers at once ...
CHAOS_ROTATE_S = 1.0  # ... and a new generation of them every second (longer than a lease)
CHAOS_LEASE_MS = 400  # leases die fast, so killed holders are taken over during the run
CHAOS_JITTER_S = 0.08  # a pause of up to this at each checkpoint: writes last long enough to be killed in
CHAOS_KILL_EVERY_S = (0.1, 0.5)  # a random pause between two SIGKILLs
# The volume that makes a chaos run mean something. A busy machine reaches it later, not never:
# the run goes on, one more round of CHAOS_SECONDS at a time, until it has, for at most
# CHAOS_MAX_ROUNDS rounds. A quiet machine reaches all of it in the first round.
CHAOS_ENOUGH = {"kills": 15, "answers": 50, "fresh": 10, "keys": 10}
CHAOS_MAX_ROUNDS = 6
SUCCESS_ANSWERS = frozenset({"fresh", "local_replay", "receipt_reconciled"})


def setUpModule() -> None:
    missing = "DURABLE_PG_DSN is not set" if not DSN.startswith("postgresql://") else (
        "psycopg is not installed" if psycopg is None else "")
    if not missing:
        return
    if os.environ.get("CI") == "true":
        raise RuntimeError(f"the PostgreSQL suite must run under CI: {missing}")
    sys.stdout.write(f"SKIP durable PostgreSQL suite: {missing} (run bash durable/pg/ci.sh)\n")
    raise unittest.SkipTest(missing)


def new_schema(owner: Any) -> str:
    """A DSN whose search_path is a new, empty schema; dropped when ``owner`` cleans up."""
    name = "t_" + secrets.token_hex(6)
    with psycopg.connect(DSN, autocommit=True) as connection:
        connection.execute(f"CREATE SCHEMA {name}")
    cleanup = getattr(owner, "addClassCleanup", None) if isinstance(owner, type) else owner.addCleanup
    cleanup(drop_schema, name)
    return f"{DSN}&options={quote(f'-csearch_path={name}')}"


def drop_schema(name: str) -> None:
    with psycopg.connect(DSN, autocommit=True) as connection:
        connection.execute(f"DROP SCHEMA {name} CASCADE")


class PgCase(base.StoreCase):
    """StoreCase on a fresh schema of the server: ``self.path`` is a DSN."""

    def setUp(self) -> None:
        super().setUp()
        self.path = new_schema(self)  # type: ignore[assignment]

    def open_store(self, **options: Any) -> Any:
        options.setdefault("clock_ms", self.clock)
        store = dd.open_store(self.path, **options)
        self.addCleanup(store.close)
        return store

    def new_store(self, name: str) -> None:
        self.path = new_schema(self)  # type: ignore[assignment]

    def tamper(self, sql: str) -> None:
        self.execute(sql)

    def execute(self, sql: str) -> None:
        with psycopg.connect(self.path, autocommit=True) as connection:
            connection.execute(sql)


class TestPgStore(PgCase):
    def test_fixture_passes_and_every_package_equals_the_in_memory_one(self) -> None:
        fixture = td.load_fixture(base.FIXTURE)
        store = self.open_store(clock_ms=None)
        self.assertIs(dd.run_fixture(fixture, store)["passed"], True)
        again = self.open_store(clock_ms=None)
        for case in fixture.cases:
            memory = td.Dispatcher.from_world(fixture.world)
            durable = dd.DurableDispatcher.from_world(fixture.world, store=again, realm="again-" + case.id)
            for step in case.steps:
                with self.subTest(case=case.id, step=step.id):
                    self.assertEqual(base.canonical(base.drive(durable, step)), base.canonical(base.drive(memory, step)))
                    self.assertEqual(durable.effect_count, memory.effect_count)

    def test_reopen_keeps_the_schema_and_facts_never_hold_the_dsn(self) -> None:
        base.write(self.dispatcher(), "a")
        facts = self.open_store().facts()
        self.assertEqual((facts["backend"], facts["integrity"], facts["operations"], facts["effects"]),
                         ("postgresql", "ok", {"succeeded": 1}, 1))
        self.assertNotIn(self.path.split("?")[1], json.dumps(facts))

    def test_an_empty_schema_is_refused_untouched_without_create(self) -> None:
        self.assertDurable("STORE_INVALID", lambda: dd.open_store(self.path, create=False))
        self.assertEqual(base.rows(self.path, "SELECT COUNT(*) FROM information_schema.tables "
                                              "WHERE table_schema = current_schema()"), [(0,)])

    def test_a_schema_missing_a_column_or_foreign_is_refused(self) -> None:
        self.open_store().close()
        self.execute("ALTER TABLE operations DROP COLUMN recovery_hint")
        self.assertDurable("STORE_INVALID", lambda: dd.open_store(self.path, create=False))
        self.path = new_schema(self)
        self.execute("CREATE TABLE theirs (x INTEGER)")
        self.assertDurable("STORE_INVALID", lambda: dd.open_store(self.path))

    def test_exclusive_refuses_an_existing_store(self) -> None:
        self.open_store().close()
        self.assertDurable("STORE_EXISTS", lambda: dd.open_store(self.path, exclusive=True))

    def test_an_unreachable_server_is_a_stable_retryable_error(self) -> None:
        error = self.assertDurable("STORE_UNREACHABLE", lambda: dd.open_store(
            "postgresql://td@/tdtest?host=/nonexistent-socket-dir&connect_timeout=2"))
        self.assertTrue(error.retryable)
        self.assertDurable("SETTING_INVALID", lambda: dd.open_store(self.path, synchronous="OFF"))

    def test_wrong_kind_stored_json_is_a_store_error(self) -> None:
        dispatcher = self.dispatcher()
        base.write(dispatcher, "a", fault="timeout_after_commit")
        self.tamper("UPDATE operations SET approval = '[1]'")
        self.assertDurable("STORE_INVALID", lambda: base.write(dispatcher, "a"))
        self.assertDurable("STORE_INVALID", lambda: dd.recover(self.open_store()))

    def test_leases_run_on_the_database_clock(self) -> None:
        store = self.open_store(clock_ms=None)
        before = store.now_ms()
        holder_row: list[Any] = []
        dispatcher = self.dispatcher(store, lease_ms=5_000, checkpoint=base.Pause(
            "after_claim", lambda: holder_row.append(self.row(dispatcher))))
        base.write(dispatcher, "a")
        expires = holder_row[0].lease_expires_at
        self.assertLessEqual(before + 5_000, expires)
        self.assertLess(expires, store.now_ms() + 5_000 + 1)

    def test_a_pruned_key_restarts_above_its_fence(self) -> None:
        dispatcher = self.dispatcher(retention_ms=1_000)
        base.write(dispatcher, "a", fault="timeout_after_commit")
        store = self.open_store()
        self.assertEqual([o.after for o in dd.recover(store, retention_ms=1_000)], ["reconciled"])
        dd.relay(store)
        self.clock.advance(1_000)
        self.assertEqual(dd.prune(store, retention_ms=1_000).operations, 1)
        again = base.write(dispatcher, "b")
        self.assertAnswer(again, "OUTCOME_UNKNOWN")  # the downstream already held its receipt: nothing new
        self.assertEqual((again["execution"]["effects"], dispatcher.effect_count), (0, 1))
        self.assertEqual(self.row(dispatcher).lease_epoch, 3)
        self.assertAnswer(base.query(dispatcher, "q", op_tag="b"), "receipt_reconciled")

    def test_concurrent_first_opens_all_succeed(self) -> None:
        barrier = self.dir / "barrier"
        barrier.mkdir()
        children = [subprocess.Popen(
            base.child_command({"action": "open", "db": self.path, "barrier": str(barrier), "index": index,
                                "racers": base.RACERS}), env=base.child_env(), stdout=subprocess.PIPE,
            stderr=subprocess.PIPE) for index in range(base.RACERS)]
        results = [child.communicate(timeout=base.CHILD_TIMEOUT_S) + (child.returncode,) for child in children]
        self.assertEqual(results, [(b"ok\n", b"", 0)] * base.RACERS)
        self.assertEqual(base.integrity(self.path), "ok")


class TestPgSealedLedger(PgCase, base.TestSealedLedger):
    """The SQLite suite's sealed-ledger tests against the server: every column edit refused as
    STORE_TAMPERED, every chain edit named by verify-chain, the same known-answer heads digest,
    and two connections appending in turn (the second waits for the head row's lock)."""


class TestPgTwiceAtOnce(PgCase, base.TestTwiceAtOnce):
    """One call delivered twice at once, on the server: the loser replays the winner's write."""


class TestPgApprovalsPerRealm(PgCase, base.TestApprovalsPerRealm):
    """An approval used once per realm, on the server."""


class TestPgContractUpgrade(PgCase, base.TestContractUpgrade):
    """A contract upgrade on the server: old rows are history, retries of their keys conflicts."""


class TestPgHostTools(PgCase, base.TestHostTools):
    """A host's own tool on the server: a lost answer stays unknown until its status hook settles it."""


class TestPgOutbox(PgCase):
    """Relays at once on the server: the consumer never moves past a message not yet committed."""

    def test_a_publish_committed_late_is_not_skipped_by_the_consumer(self) -> None:
        # Relay A publishes the first event and is slow to commit; relay B picks the second event
        # meanwhile. A consumer reading between must not act on B's message and move past A's.
        dispatcher = self.dispatcher(self.open_store())
        base.write(dispatcher, "a", "k-first")
        base.write(dispatcher, "b", "k-second")
        self.assertEqual(base.rows(self.path, "SELECT COUNT(*) FROM outbox WHERE sent_at IS NULL"), [(2,)])
        slow = self.open_store()
        real_commit = slow.commit
        inside, release = threading.Event(), threading.Event()

        def late_commit() -> None:
            if not inside.is_set():  # the publish's commit only, the first one
                inside.set()
                release.wait(timeout=base.CHILD_TIMEOUT_S)
            real_commit()
        slow.commit = late_commit  # type: ignore[method-assign]
        first = threading.Thread(target=lambda: dd.relay(slow, limit=1))
        first.start()
        self.assertTrue(inside.wait(timeout=base.CHILD_TIMEOUT_S))
        second_done: list[int] = []
        second = threading.Thread(target=lambda: second_done.append(dd.relay(self.open_store(), limit=1)))
        second.start()
        second.join(timeout=2.0)  # on a store without the publish lock, B has committed by now
        reader = self.open_store()
        early = dd.consume(reader)
        release.set()
        first.join(timeout=base.CHILD_TIMEOUT_S)
        second.join(timeout=base.CHILD_TIMEOUT_S)
        self.assertEqual((first.is_alive(), second.is_alive(), second_done), (False, False, [1]))
        late = dd.consume(reader)
        self.assertEqual((early, early + late), (0, 2))  # B's message waited for A's commit
        self.assertEqual(base.rows(self.path, "SELECT COUNT(DISTINCT event_id) FROM consumer_effects"), [(2,)])
        published = base.rows(self.path, "SELECT event_id FROM broker_messages ORDER BY seq")
        self.assertEqual(len(published), 2)


class TestPgNetwork(PgCase):
    """The network between a host and its database fails; the answers stay truthful and safe."""

    def test_a_connection_broken_after_the_effect_leaves_a_safe_in_progress_write(self) -> None:
        store = self.open_store()
        victim = store.query_one("SELECT pg_backend_pid()")[0]

        def cut(point: str) -> None:
            if point == "after_downstream_commit":
                self.execute(f"SELECT pg_terminate_backend({victim})")
        dispatcher = self.dispatcher(store, lease_ms=100, checkpoint=cut)
        error = self.assertDurable("STORE_UNREACHABLE", lambda: base.write(dispatcher, "a"))
        self.assertEqual((error.operation_state, error.effect_possible, error.retryable), ("in_progress", True, True))
        later = self.dispatcher(self.open_store(), lease_ms=100)
        self.assertDurable("OPERATION_IN_PROGRESS", lambda: base.write(later, "a"))
        self.clock.advance(100)
        self.assertAnswer(base.write(later, "a"), "OUTCOME_UNKNOWN")
        self.assertAnswer(base.query(later, "q", op_tag="a"), "receipt_reconciled")
        self.assertEqual(later.effect_count, 1)

    def test_a_commit_whose_answer_was_lost_is_answered_by_the_next_attempt(self) -> None:
        # The completion commits on the server; its answer never reaches the host.
        store = self.open_store()
        real_commit = store.commit
        lost: list[int] = []

        def commit_then_lose() -> None:
            real_commit()
            if not lost and store.query_one("SELECT COUNT(*) FROM outbox")[0] == 1:
                lost.append(1)
                raise dd.DurableError("STORE_UNREACHABLE")  # what translate() gives a broken connection
        store.commit = commit_then_lose  # type: ignore[method-assign]
        dispatcher = self.dispatcher(store)
        self.assertDurable("STORE_UNREACHABLE", lambda: base.write(dispatcher, "a"))
        self.assertEqual(self.row(dispatcher).state, "succeeded")  # it did commit
        again = base.write(dispatcher, "a")
        self.assertAnswer(again, "local_replay")
        self.assertEqual(dispatcher.effect_count, 1)

    def test_a_lock_held_past_the_busy_timeout_is_store_busy(self) -> None:
        dispatcher = self.dispatcher(self.open_store(busy_timeout_ms=50))
        base.write(dispatcher, "a")
        with psycopg.connect(self.path, autocommit=True) as other:
            other.execute("BEGIN")
            other.execute("SELECT 1 FROM operations FOR UPDATE")
            # A status query of the same operation must lock its row to reconcile: it waits, then gives up.
            dd_error = self.assertDurable("STORE_BUSY", lambda: dispatcher.operations.ledger.reconcile(
                self.row(dispatcher).key, "rc-x", {}))
            other.execute("ROLLBACK")
        self.assertTrue(dd_error.retryable)


class TestPgCrashRecovery(base.TestCrashRecovery):
    """The SQLite suite's crash test, every point, real kills, against the server."""

    @classmethod
    def new_store(cls, path: Path) -> str:
        dsn = new_schema(cls)
        dd.open_store(dsn).close()
        return dsn


class TestPgRaces(base.TestRaces):
    """The SQLite suite's races (eight processes), against the server."""

    new_store = TestPgCrashRecovery.new_store


class TestPgChaos(unittest.TestCase):
    """Eight workers on three hot keys, SIGKILLed at random (in and out of transactions) and
    replaced, with short leases on the database clock; then one recovery. One effect per key, and
    every success any worker was told is the ledger's answer for that key."""

    @classmethod
    def setUpClass(cls) -> None:
        cls.dsn = new_schema(cls)
        dd.open_store(cls.dsn).close()
        rng = random.Random(14)
        begin = time.time()  # the hot keys' generations count from here, across rounds
        cls.outputs: list[bytes] = []
        cls.kills = cls.started = cls.rounds = 0
        cls.exits = []
        while cls.rounds < CHAOS_MAX_ROUNDS and (cls.rounds == 0 or not cls.volume_reached()):
            cls.rounds += 1
            cls.chaos_round(rng, begin, time.time() + CHAOS_SECONDS)
        with dd.open_store(cls.dsn, create=False, clock_ms=lambda: dd.wall_clock_ms() + base.RECOVERY_SKEW_MS) as store:
            cls.recovered = dd.recover(store)
            cls.second = dd.recover(store)
            dd.relay(store)
            dd.consume(store)

    @classmethod
    def chaos_round(cls, rng: random.Random, begin: float, until: float) -> None:
        workers: list[subprocess.Popen[bytes]] = []

        def start() -> None:
            cls.started += 1
            workers.append(subprocess.Popen(base.child_command({
                "action": "chaos", "db": cls.dsn, "index": cls.started, "seed": rng.randrange(1 << 30),
                "until": until, "keys": list(CHAOS_KEYS), "start": begin, "rotate_s": CHAOS_ROTATE_S,
                "lease_ms": CHAOS_LEASE_MS, "jitter_s": CHAOS_JITTER_S}),
                env=base.child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE))
        for _ in range(CHAOS_WORKERS):
            start()
        while time.time() < until - 0.5:
            time.sleep(rng.uniform(*CHAOS_KILL_EVERY_S))
            victim = workers.pop(rng.randrange(len(workers)))
            victim.send_signal(signal.SIGKILL)
            out, _err = victim.communicate(timeout=base.CHILD_TIMEOUT_S)
            cls.outputs.append(out)
            cls.kills += 1
            start()
        for worker in workers:
            out, err = worker.communicate(timeout=base.CHILD_TIMEOUT_S)
            cls.outputs.append(out)
            cls.exits.append((worker.returncode, err))

    @classmethod
    def volume(cls) -> dict[str, int]:
        answers = cls.answers()
        return {"kills": cls.kills, "answers": len(answers),
                "fresh": sum(1 for answer in answers if answer["answer"] == "fresh"),
                "keys": len({answer["key"] for answer in answers if answer["answer"] in SUCCESS_ANSWERS})}

    @classmethod
    def volume_reached(cls) -> bool:
        volume = cls.volume()
        return all(volume[name] >= least for name, least in CHAOS_ENOUGH.items())

    @classmethod
    def answers(cls) -> list[dict[str, Any]]:
        seen = []
        for out in cls.outputs:
            for line in out.decode("utf-8").splitlines():
                try:
                    seen.append(json.loads(line))
                except ValueError:
                    pass  # the last line of a killed worker may be cut
        return seen

    def test_the_run_was_chaotic(self) -> None:
        # The volume, reached within the rounds a busy machine may need (see CHAOS_ENOUGH).
        answers = self.answers()
        volume = self.volume()
        self.assertEqual({name: volume[name] >= least for name, least in CHAOS_ENOUGH.items()},
                         dict.fromkeys(CHAOS_ENOUGH, True), f"{volume} after {self.rounds} rounds")
        self.assertEqual(self.exits, [(0, b"")] * CHAOS_WORKERS * self.rounds)
        kinds = {kind: sum(1 for answer in answers if answer["answer"] == kind)
                 for kind in sorted({answer["answer"] for answer in answers})}
        self.assertIn("local_replay", kinds)
        states = dict(base.rows(self.dsn, "SELECT state, COUNT(*) FROM operations GROUP BY state ORDER BY state"))
        sys.stdout.write(f"\nNOTE chaos on PostgreSQL: {self.rounds} round(s), {self.started} workers started, {self.kills} SIGKILLs, "
                         f"{len(answers)} answers {json.dumps(kinds, sort_keys=True)}, "
                         f"{len(self.recovered)} rows left for the final recovery, keys {json.dumps(states)}\n")

    def test_one_effect_per_key(self) -> None:
        # A settled success has exactly one effect; a released key (nothing ran, proven behind a
        # fence) none; nothing is left in flight after the final recovery.
        per_key = base.rows(self.dsn, "SELECT o.state, COUNT(d.seq) FROM operations o "
                                      "LEFT JOIN downstream_receipts d ON d.realm = o.realm "
                                      "AND d.status_ref = o.status_ref GROUP BY o.idempotency_key, o.state")
        allowed = {("succeeded", 1), ("reconciled", 1), ("released", 0)}
        self.assertEqual({(state, effects) for state, effects in per_key} - allowed, set())
        self.assertGreaterEqual(len(per_key), CHAOS_ENOUGH["keys"])
        self.assertEqual(base.rows(self.dsn, "SELECT COUNT(*) FROM downstream_receipts d WHERE NOT EXISTS "
                                             "(SELECT 1 FROM operations o WHERE o.status_ref = d.status_ref)"), [(0,)])

    def test_no_success_was_lost(self) -> None:
        final = {key: (state, json.loads(data) if data else None) for key, state, data in base.rows(
            self.dsn, "SELECT idempotency_key, state, data FROM operations")}
        told: dict[str, set[str]] = {}
        for answer in self.answers():
            if answer["answer"] in SUCCESS_ANSWERS:
                told.setdefault(answer["key"], set()).add(json.dumps(answer["data"], sort_keys=True))
        self.assertGreaterEqual(len(told), CHAOS_ENOUGH["keys"])
        for key, data in told.items():
            with self.subTest(key=key):
                self.assertIn(final[key][0], {"succeeded", "reconciled"})
                self.assertEqual(data, {json.dumps(final[key][1], sort_keys=True)})

    def test_no_event_was_skipped_and_none_acted_on_twice(self) -> None:
        # Relays and consumers ran in every worker at once; after the last relay and consume,
        # every event of the outbox was acted on exactly once.
        self.assertEqual(base.rows(self.dsn, "SELECT COUNT(*) FROM outbox WHERE sent_at IS NULL"), [(0,)])
        missed = base.rows(self.dsn, "SELECT COUNT(*) FROM outbox o WHERE NOT EXISTS (SELECT 1 FROM consumer_effects c "
                                     "WHERE c.realm = o.realm AND c.event_id = o.event_id)")
        twice = base.rows(self.dsn, "SELECT COUNT(*) FROM (SELECT realm, event_id FROM consumer_effects "
                                    "GROUP BY realm, consumer, event_id HAVING COUNT(*) > 1) AS doubled")
        self.assertEqual((missed, twice), ([(0,)], [(0,)]))
        self.assertGreaterEqual(base.rows(self.dsn, "SELECT COUNT(*) FROM outbox")[0][0], CHAOS_ENOUGH["keys"])

    def test_recovery_settles_everything_once(self) -> None:
        self.assertEqual(self.second, ())
        self.assertEqual(base.integrity(self.dsn), "ok")
        self.assertEqual(base.rows(self.dsn, "SELECT COUNT(*) FROM consumer_effects"),
                         base.rows(self.dsn, "SELECT COUNT(DISTINCT event_id) FROM consumer_effects"))


if __name__ == "__main__":
    unittest.main()
