"""The durable layer's PostgreSQL store: the same ledger, on a server that a fleet of hosts shares.

durable_dispatcher.py runs its ledger, leases, fences, downstream receipts, outbox, relay, consumer
inbox, recovery and pruning against a small store interface (see DurableStore). This module is the
second implementation of it, for PostgreSQL 15 or newer, through psycopg 3. It is imported only
when a store target is a ``postgresql://`` DSN, and psycopg only here: the core and the SQLite path
stay standard-library only (``pip install .[postgres]`` brings the driver).

What the database does, instead of this code:
- the key namespace, the approval consumption, call bindings, fences, receipts and the inbox are
  UNIQUE constraints, written with INSERT ... ON CONFLICT;
- a read that decides a write locks its row (SELECT ... FOR UPDATE); a relay worker picks its
  event with FOR UPDATE SKIP LOCKED, so two relays never publish the same event at once;
- leases run on the database's clock (clock_timestamp()), one clock for every host;
- every write transaction is READ COMMITTED: each decision is either one atomic statement (an
  upsert, a compare-and-set UPDATE on state and epoch) or follows a row lock, so nothing needs a
  stronger level, and nothing is retried for a serialization failure. The one check that reads
  several catalogs (is this database ours?) runs REPEATABLE READ READ ONLY: one snapshot.
- a lock wait longer than the busy timeout (lock_timeout) is STORE_BUSY, as in SQLite;
- creating the schema takes a transaction-scoped advisory lock, so concurrent first opens wait for
  one creator instead of colliding.
"""
from __future__ import annotations

import hashlib
import re
import sys
from contextlib import contextmanager
from typing import Any, Callable, Final, Iterator, Mapping, Sequence

try:  # the optional extra: without it, a postgresql:// store is refused with a stable code
    import psycopg
    from psycopg import pq
except ImportError:  # pragma: no cover - exercised only where the extra is missing
    psycopg = None  # type: ignore[assignment]
    pq = None  # type: ignore[assignment]

if __package__:  # the installed package tool_dispatcher_durable
    from . import durable_dispatcher as dd
else:  # a checkout: durable_dispatcher put this folder on sys.path before importing this module
    import durable_dispatcher as dd

td = dd.td

DSN_PREFIXES: Final = ("postgresql://", "postgres://")
CONNECT_TIMEOUT_S: Final = 10  # a server that does not answer this fast is STORE_UNREACHABLE
# synchronous FULL / NORMAL map to the session's synchronous_commit: on waits for the WAL flush
# (a returned commit survives a server crash); off does not (the last commits may roll back after
# a server crash, never corrupting anything), the same trade as SQLite's NORMAL.
SYNCHRONOUS_COMMIT: Final[Mapping[str, str]] = {"FULL": "on", "NORMAL": "off"}

BEGIN_WRITE: Final = "BEGIN ISOLATION LEVEL READ COMMITTED"
BEGIN_SNAPSHOT: Final = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"

# SQLSTATEs that mean "waited too long, or lost a race the server broke": nothing of this
# transaction committed; retry.
_BUSY_STATES: Final = frozenset({"55P03", "40P01", "40001", "57014"})
# The schema is not what this layer created (a table or column missing).
_INVALID_STATES: Final = frozenset({"42P01", "42703", "42883"})


def is_dsn(target: Any) -> bool:
    return isinstance(target, str) and target.startswith(DSN_PREFIXES)


def _pg_ddl(statement: str) -> str:
    # The SQLite schema, with PostgreSQL's names for the same column kinds.
    return (statement.replace("INTEGER PRIMARY KEY AUTOINCREMENT", "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY")
            .replace("INTEGER", "BIGINT"))


SCHEMA: Final = (
    "CREATE TABLE td_meta (application BIGINT NOT NULL, version BIGINT NOT NULL, schema_sha256 TEXT NOT NULL)",
    *(_pg_ddl(statement) for statement in dd.SCHEMA),
)
SQL_META: Final = "SELECT application, version, schema_sha256 FROM td_meta"
SQL_OWN_TABLES: Final = "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = current_schema()"
SQL_HAS_META: Final = "SELECT to_regclass('td_meta') IS NOT NULL"
# Every column, index and constraint of the schema, in a stable order: its digest is recorded when
# the schema is created and compared at every open, so a dropped column or an added index is seen.
SQL_CATALOG: Final = """
    SELECT 'column', table_name::text, column_name::text, data_type || ' ' || is_nullable
    FROM information_schema.columns WHERE table_schema = current_schema()
    UNION ALL
    SELECT 'index', tablename::text, indexname::text, indexdef FROM pg_indexes WHERE schemaname = current_schema()
    UNION ALL
    SELECT 'constraint', conrelid::regclass::text, conname::text, pg_get_constraintdef(oid)
    FROM pg_constraint WHERE connamespace = current_schema()::regnamespace
    ORDER BY 1, 2, 3"""
SQL_CLOCK: Final = "SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)"
SQL_CREATE_LOCK: Final = f"SELECT pg_advisory_xact_lock({dd.APPLICATION_ID})"

_PLACEHOLDER: Final = re.compile(r"(?<![:\w]):([a-z_][a-z0-9_]*)")


def _pg_sql(sql: str, cache: dict[str, str] = {}) -> str:  # noqa: B006 - a deliberate module cache
    """The layer's portable SQL (``:name`` placeholders) in psycopg's ``%(name)s`` form."""
    converted = cache.get(sql)
    if converted is None:
        converted = cache[sql] = _PLACEHOLDER.sub(r"%(\1)s", sql.replace("%", "%%"))
    return converted


def translate(error: BaseException) -> dd.DurableError:
    """A psycopg error as this layer's code, never its text (which may hold names or values)."""
    state = getattr(error, "sqlstate", None)
    if state in _BUSY_STATES:
        return dd.DurableError("STORE_BUSY")
    if state in _INVALID_STATES:
        return dd.DurableError("STORE_INVALID")
    if state is None or state.startswith(("08", "57P")) or isinstance(error, psycopg.OperationalError):
        # The connection broke, or the server went away: whether this step committed is unknown.
        return dd.DurableError("STORE_UNREACHABLE")
    return dd.DurableError("STORE_FAILED")


class PgTransaction:
    """The open transaction the ledger writes through: execute(sql, params) -> a psycopg cursor."""

    __slots__ = ("_connection",)

    def __init__(self, connection: Any) -> None:
        self._connection = connection

    def execute(self, sql: str, params: Mapping[str, Any] | Sequence[Any] = ()) -> Any:
        return self._connection.execute(_pg_sql(sql), params or {})


class PostgresStore:
    """One psycopg connection in autocommit mode; transactions are opened and ended explicitly.

    The same interface as DurableStore (see there). The lease clock is the database's, unless a
    test passes ``clock_ms``.
    """

    backend: Final = "postgresql"
    row_lock: Final = " FOR UPDATE"
    skip_locked: Final = " FOR UPDATE SKIP LOCKED"
    # A realm's publishes commit in the order they draw their broker sequence (see relay): a lock
    # held until the transaction ends, in a key space of its own (8785), one key a realm.
    publish_lock: Final = "SELECT pg_advisory_xact_lock(8785, hashtext(CAST(:realm AS TEXT)))"
    snapshot: Final = BEGIN_SNAPSHOT

    def __init__(self, dsn: str, *, synchronous: str, busy_timeout_ms: int,
                 clock_ms: Callable[[], int] | None) -> None:
        self._dsn = dsn
        self.synchronous = synchronous
        self._busy_timeout_ms = busy_timeout_ms
        self._clock_ms = clock_ms
        self._connection: Any = None
        self._tx: PgTransaction | None = None
        self.errors = (psycopg.Error,)

    @classmethod
    def open(cls, dsn: Any, *, create: bool = True, exclusive: bool = False, synchronous: str = "FULL",
             busy_timeout_ms: int = dd.BUSY_TIMEOUT_MS, clock_ms: Callable[[], int] | None = None) -> PostgresStore:
        """Connect to the database named by ``dsn``; ``create`` lets it create the schema in an
        empty database, ``exclusive`` refuses a database that already holds one (STORE_EXISTS)."""
        if psycopg is None:
            raise dd.DurableError("STORE_DRIVER_MISSING")
        if (not is_dsn(dsn) or "\x00" in dsn or synchronous not in SYNCHRONOUS_COMMIT
                or type(busy_timeout_ms) is not int or busy_timeout_ms < 0):
            raise dd.DurableError("SETTING_INVALID")
        store = cls(dsn, synchronous=synchronous, busy_timeout_ms=busy_timeout_ms, clock_ms=clock_ms)
        try:
            store._connect()
            found = store._inspect()
            if exclusive and found != "empty":
                raise dd.DurableError("STORE_EXISTS")
            if found == "empty" and (create or exclusive):
                found = store._create_schema()
            if found != "ours":
                raise dd.DurableError("STORE_INVALID")
        except BaseException:
            store.close()
            raise
        return store

    def _connect(self) -> None:
        try:
            connection = psycopg.connect(self._dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
        except psycopg.Error:
            raise dd.DurableError("STORE_UNREACHABLE") from None
        except Exception:  # a malformed DSN: psycopg raises ProgrammingError or ValueError
            raise dd.DurableError("STORE_UNREADABLE") from None
        self._connection = connection
        try:
            connection.execute(f"SET lock_timeout = {self._busy_timeout_ms}")
            connection.execute(f"SET synchronous_commit = {SYNCHRONOUS_COMMIT[self.synchronous]}")
        except psycopg.Error as error:
            raise translate(error) from None

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(self, *_exc: Any) -> None:
        self.close()

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()

    # -- the lease clock ---------------------------------------------------------------------

    def now_ms(self) -> int:
        if self._clock_ms is not None:
            return self._clock_ms()
        if self._tx is not None:
            return dd._checked_int(self._tx.execute(SQL_CLOCK).fetchone()[0])
        return dd._checked_int(self.query_one(SQL_CLOCK)[0])

    # -- schema --------------------------------------------------------------------------------

    def _inspect(self, tx: PgTransaction | None = None) -> str:
        """'ours', 'empty' or 'foreign', read from one snapshot."""
        if tx is None:
            with self.transaction(BEGIN_SNAPSHOT) as snapshot:
                return self._inspect(snapshot)
        if not tx.execute(SQL_HAS_META).fetchone()[0]:
            return "empty" if tx.execute(SQL_OWN_TABLES).fetchone()[0] == 0 else "foreign"
        meta = tx.execute(SQL_META).fetchall()
        if meta != [(dd.APPLICATION_ID, dd.SCHEMA_VERSION, _catalog_digest(tx))]:
            return "foreign"
        return "ours"

    def _create_schema(self) -> str:
        with self.transaction() as tx:
            tx.execute(SQL_CREATE_LOCK)  # concurrent creators wait here for the first one's commit
            if tx.execute(SQL_OWN_TABLES).fetchone()[0] != 0:
                elsewhere = True  # another opener created it while we waited (or something else is there)
            else:
                elsewhere = False
                for statement in SCHEMA:
                    tx.execute(statement)
                tx.execute("INSERT INTO td_meta VALUES (:application, :version, :digest)",
                           {"application": dd.APPLICATION_ID, "version": dd.SCHEMA_VERSION,
                            "digest": _catalog_digest(tx)})
        # Another opener's schema is judged from a fresh snapshot: a name lookup inside the
        # transaction that waited for the lock may still miss tables committed meanwhile.
        return self._inspect() if elsewhere else "ours"

    # -- transactions --------------------------------------------------------------------------

    @contextmanager
    def transaction(self, begin: str = BEGIN_WRITE) -> Iterator[PgTransaction]:
        tx = self.begin(begin)
        try:
            yield tx
        except psycopg.Error as error:
            self.rollback()
            raise translate(error) from None
        except BaseException:
            self.rollback()
            raise
        self.commit()

    def begin(self, begin: str = BEGIN_WRITE) -> PgTransaction:
        if self._tx is not None:
            self.rollback()
            raise dd.DurableError("STORE_MISUSE")
        if self._connection is None or self._connection.broken or self._connection.closed:
            self._connect()  # a connection the network broke: the next transaction gets a new one
        try:
            self._connection.execute(begin)
        except psycopg.Error as error:
            raise translate(error) from None
        self._tx = PgTransaction(self._connection)
        return self._tx

    def current(self) -> PgTransaction:
        if self._tx is None:
            raise dd.DurableError("STORE_MISUSE")
        return self._tx

    def commit(self) -> None:
        try:
            self._connection.execute("COMMIT")
        except psycopg.Error as error:
            # A COMMIT whose answer was lost (the connection broke) may have committed: the error
            # says so (STORE_UNREACHABLE), and the operation's row answers the next attempt.
            self.rollback()
            raise translate(error) from None
        finally:
            self._tx = None

    def rollback(self) -> None:
        self._tx = None
        connection = self._connection
        if connection is None or connection.closed or connection.broken:
            return
        if connection.info.transaction_status != pq.TransactionStatus.IDLE:
            try:
                connection.execute("ROLLBACK")
            except psycopg.Error:
                pass  # the original error is the one worth raising; the server rolls back on disconnect

    @property
    def in_transaction(self) -> bool:
        return self._tx is not None

    @staticmethod
    def translate(error: BaseException) -> dd.DurableError:
        return translate(error)

    def query(self, sql: str, params: Mapping[str, Any] | Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """One statement outside any transaction (autocommit: its own snapshot)."""
        if self._connection is None or self._connection.broken or self._connection.closed:
            self._connect()
        try:
            return self._connection.execute(_pg_sql(sql), params or {}).fetchall()
        except psycopg.Error as error:
            raise translate(error) from None

    def query_one(self, sql: str, params: Mapping[str, Any] | Sequence[Any] = ()) -> tuple[Any, ...] | None:
        rows = self.query(sql, params)
        return rows[0] if rows else None

    def integrity(self) -> str:
        return "ok" if self._inspect() == "ours" else "schema changed"

    def facts(self) -> dict[str, Any]:
        """What the CLI reports about a store: backend, settings, schema check, counts. Never the DSN."""
        effects = self.query_one(dd.SQL_ALL_EFFECTS)
        events = self.query_one(dd.SQL_ALL_EVENTS)
        return {
            "backend": self.backend,
            "server_version": int(self.query_one("SHOW server_version_num")[0]),
            "synchronous_commit": SYNCHRONOUS_COMMIT[self.synchronous],
            "integrity": self.integrity(),
            "operations": {state: count for state, count in self.query(dd.SQL_STATE_COUNTS)},
            "effects": effects[0] if effects else 0,
            "events": {"written": events[0], "sent": events[1]} if events else {"written": 0, "sent": 0},
        }


def _catalog_digest(tx: PgTransaction) -> str:
    rows = [list(row) for row in tx.execute(SQL_CATALOG).fetchall()]
    return hashlib.sha256(td.canonical_json(rows)).hexdigest()


if __name__ == "__main__":  # pragma: no cover
    sys.exit("postgres_store is a module: use durable_dispatcher.py --store postgresql://...")
