"""Durable layer: the trusted boundary's idempotency, leases, outbox and recovery, kept in a database.

tool_dispatcher.py proves the write contract inside one process with an in-memory map. This module
keeps the same contract across a crash, a restart, a second process and a second host, on a small
store interface: SQLite here (standard library only, the embedded default), PostgreSQL in
postgres_store.py (chosen by a postgresql:// DSN; psycopg is imported there only). It imports the boundary
(request digest, call binding, input and output contracts, handlers, projections, the result package
and its verifier) and changes only where records live and who may write them: everything the model
sees is built by tool_dispatcher, byte for byte as the in-memory dispatcher builds it.

What this module never does:
- copy the boundary: a write still passes tool_dispatcher's checks in tool_dispatcher's order, and
  its package comes from tool_dispatcher's own packaging;
- claim exactly-once: delivery is at least once; an effect happens at most once per key because the
  ledger claims the key under a UNIQUE constraint and the downstream is keyed by a reference derived
  from the operation;
- use the sqlite3 module's implicit transactions: connections are in autocommit mode
  (isolation_level=None) and every write, and every read that decides a write, runs inside
  BEGIN IMMEDIATE, so a writer waits for the lock (busy timeout) instead of failing an upgrade;
- let a raw driver error out: a lock held past the busy timeout is STORE_BUSY (retryable), and no
  store error claims that nothing happened: earlier steps of the operation may have committed;
- trust what it reads back: every stored value is checked for its kind (STORE_INVALID), a
  settled row answers a replay or a status query only once the package stored with it verifies
  (its seal required when the store has keys) and states exactly its columns, and a released row
  is claimed again only once it is what a release leaves (STORE_TAMPERED);
- settle without evidence: each stored package is appended to its realm's hash chain in the
  transaction that stores it;
- resolve an operation whose effect may have happened by running it again: only a receipt query
  (query_operation_status, or recovery's fenced receipt query) settles it;
- prune an `unknown` or `escalated` record, or a record whose event has not been sent;
- rely on a bare assert (`python -O` deletes them).

Sections, in the order a write flows:
    1. Limits and constants          7. Durable downstream (receipts and fences)
    2. Errors and the code catalog   8. The durable dispatcher
    3. Lifecycle and leases          9. Outbox relay and consumer inbox
    4. Schema and SQL               10. Recovery
    5. The store (connection)       11. Pruning
    6. The ledger                   12. The audit chain, verified whole
                                    13. Fixture runner
                                    14. CLI
"""
from __future__ import annotations

if __name__ == "__main__":
    # Ctrl-C while the imports below still run (a good part of a second on a cold machine): the
    # CLI's own answer, CLI_INTERRUPTED and exit 130, never a traceback. run_cli takes SIGINT back.
    import os as _os
    import signal as _signal
    _INTERRUPTED = (b'{\n  "passed": false,\n  "error": {\n    "code": "CLI_INTERRUPTED",\n    "message": "The command '
                    b'was interrupted before it finished.",\n    "retryable": false\n  }\n}\n')
    _signal.signal(_signal.SIGINT, lambda _number, _frame: (_os.write(1, _INTERRUPTED), _os._exit(130)))

import argparse
import functools
import os
import secrets
import sqlite3
import sys
import time
from contextlib import closing
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Collection, Final, Mapping, Sequence

if not __package__:  # run or imported by path from a checkout: the core is at the repository root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import tool_dispatcher as td  # noqa: E402  (the boundary this layer makes durable)

# The PostgreSQL store (postgres_store.py, beside this file) imports this module by this name (the
# installed package's tool_dispatcher_durable.durable_dispatcher, or the plain name in a checkout):
# whether this file runs as a script or is imported, it is one module, with one DurableError.
sys.modules.setdefault(f"{__package__}.durable_dispatcher" if __package__ else "durable_dispatcher",
                       sys.modules[__name__])
_HERE: Final = str(Path(__file__).resolve().parent)

# ============================================================================================
# 1. Limits and constants
# ============================================================================================

# PRAGMA user_version of a database this module created (3: key epochs; 4: audit chain; 5: RFC 8785
# digests: an older store's packages and chain are of formats this module no longer reads).
SCHEMA_VERSION: Final = 5
APPLICATION_ID: Final = 0x54445231  # PRAGMA application_id ("TDR1"): any other file is refused
BUSY_TIMEOUT_MS: Final = 5_000  # BEGIN IMMEDIATE waits this long for the write lock, then STORE_BUSY
LEASE_MS: Final = 30_000  # far longer than one handler and its commits; a dead holder frees its key this fast
MIN_LEASE_MS: Final = 1  # tests use short leases; zero would make every claim expired at birth
MAX_LEASE_MS: Final = 3_600_000  # an hour: a longer lease is a key held hostage by a dead process
RETENTION_MS: Final = 86_400_000  # completed records kept a day: longer than any client's retry horizon
MAX_RETENTION_MS: Final = 3_153_600_000_000  # a century: any clock reading plus this still fits a 64-bit column
MAX_STORED_JSON_BYTES: Final = td.MAX_FIXTURE_BYTES  # what is read back from disk is decoded under a bound
MAX_ANSWER_ATTEMPTS: Final = 4  # re-reads of a row that moved while we answered, then "in progress"
RELAY_BATCH: Final = 256  # outbox events one relay pass publishes
CONSUME_BATCH: Final = 1_024  # broker messages one consumer pass reads per realm
WAL_SWITCH_PAUSE_S: Final = 0.005  # between two tries of a first opener's switch to WAL
MAX_RECOVERY_ROWS: Final = 10_000  # unsettled rows one recovery pass visits; run it again for more

DEFAULT_REALM: Final = "default"
DEFAULT_CONSUMER: Final = "refund-notifier"
EVENT_TYPE: Final = "operation.settled"
SYNCHRONOUS_MODES: Final[Mapping[str, int]] = MappingProxyType({"FULL": 2, "NORMAL": 1})
RECOVERY_FAULTS: Final = frozenset({"none", "downstream_unavailable"})
STORE_BACKENDS: Final = frozenset({"sqlite", "postgresql"})  # DurableStore's, and postgres_store's

# The host's numeric settings, each an int in its closed range, checked before anything is read
# or written: a negative retention would prune what was just written, a limit of 0 would make
# every pass a silent no-op, and a value out of a 64-bit column's range would fail mid-write.
SETTING_RANGES: Final[Mapping[str, tuple[int, int]]] = MappingProxyType({
    "lease_ms": (MIN_LEASE_MS, MAX_LEASE_MS),
    "retention_ms": (1, MAX_RETENTION_MS),
    "relay_limit": (1, RELAY_BATCH),
    "consume_limit": (1, CONSUME_BATCH),
    "recovery_limit": (1, MAX_RECOVERY_ROWS),
})

# Named points where a test (or an operator's chaos drill) can stop the process. The hook is a
# trusted-host callable; production passes none.
CHECKPOINTS: Final = frozenset({
    "after_claim",              # the claim is committed; the downstream was not called
    "after_downstream_commit",  # the downstream committed its effect; the ledger does not know yet
    "after_outbox_write",       # inside the completion transaction: ledger row and event written, not committed
    "after_ledger_commit",      # completion and event committed; the answer never left the process
    "after_publish",            # the relay published an event and has not marked it sent
    "inside_consumer",          # the consumer wrote its inbox entry and effect, not committed
})

Checkpoint = Callable[[str], None]
# An open transaction of a store: ``execute(sql, params)`` returns a cursor (fetchone, fetchall,
# rowcount). A sqlite3 connection is one; the PostgreSQL store hands out its own.
Tx = Any

_SQLITE_BUSY: Final = frozenset({5, 6})  # SQLITE_BUSY, SQLITE_LOCKED (primary result codes)
_SQLITE_NOT_OURS: Final = frozenset({11, 26})  # SQLITE_CORRUPT, SQLITE_NOTADB
# While a store is being opened: a file or directory this process may not write, or a disk that
# is full or fails a write. SQLite reads a WAL database only through its -shm file, which it cannot
# create in a read-only directory (nor size on a full disk); an `immutable` open would read it
# without, but would not see a writer that still changes it. Nothing of this layer was written:
# the schema's transaction rolled back, and a file `run` created for it is removed again.
_SQLITE_NOT_OPENED: Final = frozenset({8, 10, 13, 14})  # SQLITE_READONLY, _IOERR, _FULL, _CANTOPEN
# The one driver error that is not SQLite's: a TEXT value that is not UTF-8, met when the sqlite3
# module decodes a fetched row (its own OperationalError, with no SQLite result code). A damaged
# value, like any other read back; matched on the module's fixed text, never shown.
_UNDECODABLE_TEXT: Final = "Could not decode to UTF-8"


def _no_checkpoint(_point: str) -> None:
    return None


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


# ============================================================================================
# 2. Errors and the code catalog
# ============================================================================================
# tool_dispatcher's BoundaryError keeps its codes (refusals the model sees, host errors such as
# OPERATION_IN_PROGRESS, fixture, JSON and CLI errors). This layer's own conditions are
# DurableError codes from one closed catalog that shares no code with the core's, with fixed
# messages: no path, key or SQL text is ever formatted into them.

DURABLE_ERRORS: Final[Mapping[str, td.ErrorSpec]] = MappingProxyType({
    **td.error_specs(
        "host", True,
        LEASE_LOST="This holder's lease was taken over and its late commit refused; "
                   "dispatch again to read the operation's answer.",
    ),
    **td.error_specs(
        "host", False,
        OPERATION_ESCALATED="The operation's receipt contradicts its record; an operator must resolve it.",
        DOWNSTREAM_FENCED="The downstream refused a commit from a superseded lease.",
        SETTING_INVALID="A store or dispatcher setting is out of its range.",
    ),
    # A store error rolls back the one transaction it interrupted, and nothing else: the steps of
    # the same operation that committed before it (its claim, even its downstream effect) stay.
    # The messages say so, and the error carries the operation's state when this layer knows it.
    **td.error_specs(
        "store", True,
        STORE_BUSY="The database stayed locked past the busy timeout and this step was rolled back; "
                   "earlier steps of the operation, even its downstream effect, may have committed: "
                   "retry under the same idempotency key, never a new one.",
    ),
    **td.error_specs(
        "store", False,
        STORE_UNREADABLE="The database could not be opened; nothing was written.",
        STORE_EXISTS="The database file already exists; this command creates a new one.",
        STORE_INVALID="The file is not a database of this layer, or a value read back from it is damaged; "
                      "the step that found it wrote nothing.",
        STORE_FAILED="The database refused this step and it was rolled back; earlier steps of the operation, "
                     "even its downstream effect, may have committed: retry under the same idempotency key, "
                     "never a new one.",
        STORE_MISUSE="A database transaction was opened inside another one; it was rolled back.",
        STORE_DRIVER_MISSING="A postgresql:// store needs the psycopg driver: install the postgres extra.",
        # Not damage of a kind (that is STORE_INVALID) but evidence that does not hold: a settled
        # row whose stored package fails verification (digests, seal, key id) or states other
        # values than the row's columns. Nothing is answered from it and nothing is written.
        STORE_TAMPERED="A ledger row does not match its stored package, or the package does not verify; "
                       "nothing was answered from it and nothing was changed: an operator must look.",
    ),
    **td.error_specs(
        "store", True,
        STORE_UNREACHABLE="The database could not be reached or the connection broke during this step, "
                          "so this step may or may not have committed, and earlier steps of the operation, "
                          "even its downstream effect, may have committed: retry under the same "
                          "idempotency key, never a new one.",
    ),
})
# Where a write stood when a store error interrupted it: the state its row holds on disk, and
# whether the downstream may already have acted. Only the steps after a claim know it.
STEP_STATES: Final[Mapping[str, tuple[str, bool]]] = MappingProxyType({
    # Claim and start (or claim and release) commit together, so before the step the key was free:
    # rolled back, it is as it was; a commit whose answer was lost (step_committed null) may have
    # left it in_progress under this caller's lease, where nothing runs it: the lease expires, a
    # repeat finds it unknown, and a status query settles it as not executed.
    "start": ("none", False),
    "release": ("none", False),
    "settle": ("in_progress", True),  # the handler ran: its downstream commit may be on disk
})


MAYBE_COMMITTED: Final = frozenset({"STORE_UNREACHABLE"})  # the step's own COMMIT may have landed


class DurableError(td.CatalogError):
    """This layer's error: a stable code from DURABLE_ERRORS and its fixed message.

    ``operation_state`` (when known) is the state the operation's row held before the failed step,
    ``effect_possible`` whether its downstream may have acted, and ``step_committed`` false when the
    step surely rolled back, null when nobody can know (a connection broken during its COMMIT).
    """

    CATALOG = DURABLE_ERRORS

    def __init__(self, code: str, at: str = "", *, operation_state: str | None = None,
                 effect_possible: bool | None = None) -> None:
        super().__init__(code, at)
        self.operation_state = operation_state
        self.effect_possible = effect_possible

    def details(self) -> dict[str, Any]:
        if self.operation_state is None:
            return {}
        return {"operation_state": self.operation_state, "effect_possible": self.effect_possible,
                "step_committed": None if self.code in MAYBE_COMMITTED else False}


class _during:  # noqa: N801 - used like the context manager function it replaced
    """Attach to a store error what this layer knows of the operation at ``step``.

    A class, not a @contextmanager generator: it wraps two steps of every write, and a generator
    context manager costs several times more to enter and leave.
    """

    __slots__ = ("_step",)

    def __init__(self, step: str) -> None:
        self._step = step

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, error: Any, _traceback: Any) -> None:
        if (not isinstance(error, DurableError) or DURABLE_ERRORS[error.code].scope != "store"
                or error.operation_state is not None):
            return  # no error, or not one to annotate: it propagates unchanged
        state, effect_possible = STEP_STATES[self._step]
        raise DurableError(error.code, operation_state=state, effect_possible=effect_possible) from None


def _store_error(error: sqlite3.Error, *, opening: bool = False) -> DurableError:
    result = getattr(error, "sqlite_errorcode", None)
    primary = (result or 0) & 0xFF
    if primary in _SQLITE_BUSY:
        return DurableError("STORE_BUSY")
    if primary in _SQLITE_NOT_OURS:
        return DurableError("STORE_INVALID")
    if opening and primary in _SQLITE_NOT_OPENED:
        return DurableError("STORE_UNREADABLE")
    if (result is None and isinstance(error, sqlite3.OperationalError)
            and str(error).startswith(_UNDECODABLE_TEXT)):
        return DurableError("STORE_INVALID")
    return DurableError("STORE_FAILED")


class _RolledBack:
    """Inside a transaction a store left open: any error rolls it back first, and a driver's error
    leaves as this layer's store error; ``commit`` also commits it when the block ends normally.

    Classes, not @contextmanager generators: every write passes through five of them, and a
    generator context manager costs several times more to enter and leave.
    """

    __slots__ = ("_store", "_commit")

    def __init__(self, store: Any, commit: bool = False) -> None:
        self._store = store
        self._commit = commit

    def __enter__(self) -> Any:
        return None

    def __exit__(self, kind: Any, error: Any, _traceback: Any) -> None:
        if kind is None:
            if self._commit:
                self._store.commit()
            return
        self._store.rollback()
        if isinstance(error, self._store.errors):
            raise self._store.translate(error) from None


class _Transaction(_RolledBack):
    """A store's transaction(): begin on entry (the block gets the open transaction), commit on exit."""

    __slots__ = ("_begin",)

    def __init__(self, store: Any, begin: str) -> None:
        super().__init__(store, commit=True)
        self._begin = begin

    def __enter__(self) -> Any:
        return self._store.begin(self._begin)


# A host's settings, checked where they enter (SETTING_RANGES and the names).


def _setting(name: str, value: Any) -> int:
    """A numeric host setting in its SETTING_RANGES range, or SETTING_INVALID."""
    least, most = SETTING_RANGES[name]
    if type(value) is not int or not least <= value <= most:
        raise DurableError("SETTING_INVALID")
    return value


def _named(value: Any, *, optional: bool = False) -> Any:
    """A realm, consumer or owner name: an identifier (None too, where ``optional``), or SETTING_INVALID."""
    if (value is None and optional) or td.is_identifier(value):
        return value
    raise DurableError("SETTING_INVALID")


def _checked_store(store: Any) -> Any:
    """A store of this layer (a DurableStore or a PostgresStore), or SETTING_INVALID."""
    backend = getattr(type(store), "backend", None)
    if type(backend) is not str or backend not in STORE_BACKENDS:
        raise DurableError("SETTING_INVALID")
    return store


def _pass_settings(store: Any, realm: Any, limit_name: str, limit: Any) -> None:
    """A relay, consumer or recovery pass's settings: its store, an optional realm, its limit."""
    _checked_store(store)
    _named(realm, optional=True)
    _setting(limit_name, limit)


def _seal_keys_setting(seal_keys: Any) -> td.SealKeys | None:
    """The host's keys checked and copied where they enter, as the core's Dispatcher takes them
    (SEAL_KEYS_INVALID): a short key is refused before any effect, and a host that changes its
    secrets later changes nothing the store seals or checks."""
    return td.checked_seal_keys(seal_keys)


# ============================================================================================
# 3. Lifecycle and leases
# ============================================================================================
# The lifecycle is tool_dispatcher's LIFECYCLE, the one table of every store: the claim, the
# lease moves (take_over, release, start), the settling moves and the receipt moves. This layer
# adds where each state lives on disk and which states carry a lease, an event or an expiry.

STORED_STATES: Final = td.LIFECYCLE_STATES - {"none"}  # "none" is the absence of a row
LEASED_STATES: Final = td.LEASED_STATES  # exactly the rows that carry a lease
EVENT_STATES: Final = frozenset({"succeeded", "reconciled"})  # settling here writes one outbox event
PRUNABLE_STATES: Final = frozenset({"succeeded", "reconciled"})  # only completed records expire
RECOVERY_HINTS: Final[Mapping[str, str]] = MappingProxyType({
    "unknown": "query_status",  # a receipt query (query_operation_status or recover) settles it
    "escalated": "operator",    # the receipt contradicts the record
})


transition: Final = td.transition


def new_owner() -> str:
    """A lease holder's name: diagnostics only. Fencing rests on the epoch, never on this name."""
    return f"holder-{os.getpid()}-{secrets.token_hex(4)}"


# ============================================================================================
# 4. Schema and SQL
# ============================================================================================
# One file holds the ledger and, in tables of their own written only in their own transactions,
# the mock downstream, the broker and the consumer: a crash between two of them is a real crash
# between two commits. A realm is one isolated world: a deployment uses one; the fixture runner
# uses one per case, because each case starts a new dispatcher over a fresh world.


def _sql_list(values: frozenset[str]) -> str:
    return ", ".join(f"'{value}'" for value in sorted(values))


_KEY_MATCH: Final = ("realm = :realm AND tenant = :tenant AND subject = :subject AND tool = :tool "
                     "AND idempotency_key = :idempotency_key")

SCHEMA: Final = (
    f"""CREATE TABLE operations (
        realm TEXT NOT NULL,
        tenant TEXT NOT NULL,
        subject TEXT NOT NULL,
        tool TEXT NOT NULL,
        idempotency_key TEXT NOT NULL,
        request_sha256 TEXT NOT NULL CHECK (length(request_sha256) = 64),
        provider TEXT NOT NULL,
        api_family TEXT NOT NULL,
        adapter_revision TEXT NOT NULL,
        operation_id TEXT NOT NULL,
        contract TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN ({_sql_list(STORED_STATES)})),
        request_ref TEXT NOT NULL,
        status_ref TEXT NOT NULL,
        receipt_ref TEXT,
        data TEXT,
        package TEXT,
        approval TEXT,
        lease_owner TEXT,
        lease_epoch INTEGER NOT NULL CHECK (lease_epoch >= 1),
        lease_expires_at INTEGER,
        recovery_hint TEXT,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        expires_at INTEGER,
        arguments TEXT NOT NULL,
        resource_revision INTEGER CHECK (resource_revision IS NULL OR resource_revision >= 1),
        UNIQUE (realm, tenant, subject, tool, idempotency_key),
        CHECK ((state IN ({_sql_list(LEASED_STATES)})) = (lease_expires_at IS NOT NULL)),
        CHECK ((lease_owner IS NULL) = (lease_expires_at IS NULL)),
        CHECK (expires_at IS NULL OR state IN ({_sql_list(PRUNABLE_STATES)}))
    )""",
    "CREATE INDEX operations_by_state ON operations (state)",
    # One approval authorises one write: a UNIQUE row per consumed approval, written in the same
    # transaction as the claim that consumes it (and deleted by the release of that claim).
    """CREATE TABLE approval_uses (
        realm TEXT NOT NULL,
        approval_ref TEXT NOT NULL CHECK (length(approval_ref) = 64),
        tenant TEXT NOT NULL,
        subject TEXT NOT NULL,
        tool TEXT NOT NULL,
        idempotency_key TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        PRIMARY KEY (realm, approval_ref)
    )""",
    # The highest lease epoch a pruned key reached. The downstream keeps its fence per key for
    # ever; a claim of a key whose row was pruned starts above this, so pruning never rewinds a fence.
    """CREATE TABLE key_epochs (
        realm TEXT NOT NULL,
        tenant TEXT NOT NULL,
        subject TEXT NOT NULL,
        tool TEXT NOT NULL,
        idempotency_key TEXT NOT NULL,
        epoch INTEGER NOT NULL CHECK (epoch >= 1),
        PRIMARY KEY (realm, tenant, subject, tool, idempotency_key)
    )""",
    """CREATE TABLE call_bindings (
        realm TEXT NOT NULL,
        adapter_revision TEXT NOT NULL,
        response_id TEXT NOT NULL,
        call_id TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        PRIMARY KEY (realm, adapter_revision, response_id, call_id)
    )""",
    """CREATE TABLE downstream_fences (
        realm TEXT NOT NULL,
        status_ref TEXT NOT NULL,
        epoch INTEGER NOT NULL,
        PRIMARY KEY (realm, status_ref)
    )""",
    """CREATE TABLE downstream_receipts (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        realm TEXT NOT NULL,
        receipt_ref TEXT NOT NULL,
        request_ref TEXT NOT NULL,
        status_ref TEXT NOT NULL,
        effect_revision TEXT NOT NULL,
        producer_revision TEXT NOT NULL,
        draft_id TEXT NOT NULL,
        order_ref TEXT NOT NULL,
        reason TEXT NOT NULL,
        epoch INTEGER NOT NULL,
        committed_at INTEGER NOT NULL,
        UNIQUE (realm, status_ref)
    )""",
    """CREATE TABLE outbox (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        realm TEXT NOT NULL,
        event_id TEXT NOT NULL,
        request_ref TEXT NOT NULL,
        payload TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        sent_at INTEGER,
        UNIQUE (realm, event_id)
    )""",
    "CREATE INDEX outbox_unsent ON outbox (sent_at, seq)",
    """CREATE TABLE broker_messages (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        realm TEXT NOT NULL,
        event_id TEXT NOT NULL,
        payload TEXT NOT NULL,
        published_at INTEGER NOT NULL
    )""",
    "CREATE INDEX broker_by_realm ON broker_messages (realm, seq)",
    """CREATE TABLE consumer_offsets (
        realm TEXT NOT NULL,
        consumer TEXT NOT NULL,
        position INTEGER NOT NULL,
        PRIMARY KEY (realm, consumer)
    )""",
    """CREATE TABLE inbox (
        realm TEXT NOT NULL,
        consumer TEXT NOT NULL,
        event_id TEXT NOT NULL,
        consumed_at INTEGER NOT NULL,
        PRIMARY KEY (realm, consumer, event_id)
    )""",
    # The ledger's hash chain, one per realm: each settle or reconciliation that stores a package
    # appends the core's audit entry for it (tool_dispatcher.audit_entry_line) in that same
    # transaction. Every append reads the head row under a lock, so appends of one realm queue;
    # the primary key and the unique previous digest refuse a fork even without the lock.
    """CREATE TABLE audit_heads (
        realm TEXT NOT NULL PRIMARY KEY,
        entries INTEGER NOT NULL CHECK (entries >= 0),
        head_sha256 TEXT NOT NULL CHECK (length(head_sha256) = 64)
    )""",
    """CREATE TABLE audit_chain (
        realm TEXT NOT NULL,
        entry_index INTEGER NOT NULL CHECK (entry_index >= 0),
        previous_sha256 TEXT NOT NULL CHECK (length(previous_sha256) = 64),
        entry_sha256 TEXT NOT NULL CHECK (length(entry_sha256) = 64),
        entry TEXT NOT NULL,
        PRIMARY KEY (realm, entry_index),
        UNIQUE (realm, previous_sha256)
    )""",
    # The consumer's own action log: deliberately without a unique key, so a duplicate action
    # would show up as a second row instead of being hidden by a constraint.
    """CREATE TABLE consumer_effects (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        realm TEXT NOT NULL,
        consumer TEXT NOT NULL,
        event_id TEXT NOT NULL,
        applied_at INTEGER NOT NULL
    )""",
)

ROW_COLUMNS: Final = (
    "realm", "tenant", "subject", "tool", "idempotency_key", "request_sha256", "provider", "api_family",
    "adapter_revision", "operation_id", "contract", "state", "request_ref", "status_ref", "receipt_ref",
    "data", "package", "approval", "lease_owner", "lease_epoch", "lease_expires_at", "recovery_hint", "created_at",
    "updated_at", "expires_at", "arguments", "resource_revision",
)
SQL_READ_ROW: Final = f"SELECT {', '.join(ROW_COLUMNS)} FROM operations WHERE {_KEY_MATCH}"
SQL_UNSETTLED_ROWS: Final = (
    f"SELECT {', '.join(ROW_COLUMNS)} FROM operations "
    f"WHERE state IN ({_sql_list(STORED_STATES - PRUNABLE_STATES - {'released'})}) "
    "AND (CAST(:realm AS TEXT) IS NULL OR realm = :realm) ORDER BY realm, created_at LIMIT :limit"
)
SQL_CLAIM: Final = f"""
    INSERT INTO operations (realm, tenant, subject, tool, idempotency_key, request_sha256, provider,
        api_family, adapter_revision, operation_id, contract, state, request_ref, status_ref, approval,
        lease_owner, lease_epoch, lease_expires_at, created_at, updated_at, arguments, resource_revision)
    VALUES (:realm, :tenant, :subject, :tool, :idempotency_key, :request_sha256, :provider,
        :api_family, :adapter_revision, :operation_id, :contract, :to_state, :request_ref, :status_ref,
        :approval, :lease_owner,
        (SELECT COALESCE(MAX(epoch), 0) + 1 FROM key_epochs WHERE {_KEY_MATCH}),
        :lease_expires_at, :now, :now, :arguments, :resource_revision)
    ON CONFLICT (realm, tenant, subject, tool, idempotency_key) DO NOTHING
    RETURNING lease_epoch"""
SQL_CLAIM_TAKE_OVER: Final = f"""
    UPDATE operations SET request_sha256 = :request_sha256, provider = :provider,
        api_family = :api_family, adapter_revision = :adapter_revision, operation_id = :operation_id,
        contract = :contract, state = :to_state, request_ref = :request_ref, status_ref = :status_ref,
        receipt_ref = NULL, data = NULL, package = NULL, approval = :approval, arguments = :arguments,
        resource_revision = :resource_revision,
        lease_owner = :lease_owner,
        lease_epoch = lease_epoch + 1, lease_expires_at = :lease_expires_at, recovery_hint = NULL,
        expires_at = NULL, updated_at = :now
    WHERE {_KEY_MATCH} AND state = :from_state AND lease_epoch = :epoch"""
# A holder's own move: fenced by its epoch, so a holder whose lease was taken over changes nothing.
SQL_HOLDER_MOVE: Final = f"""
    UPDATE operations SET state = :to_state, lease_owner = :lease_owner,
        lease_expires_at = :lease_expires_at, data = :data, package = :package, receipt_ref = :receipt_ref,
        recovery_hint = :recovery_hint, expires_at = :expires_at, updated_at = :now
    WHERE {_KEY_MATCH} AND state = :from_state AND lease_epoch = :epoch"""
# Another party's move on an expired lease: epoch + 1, and only if the lease really has expired
# (or ends later than any lease granted from now: LedgerRow.lease_live).
SQL_EXPIRE_LEASE: Final = f"""
    UPDATE operations SET state = :to_state, lease_epoch = lease_epoch + 1, lease_owner = NULL,
        lease_expires_at = NULL, recovery_hint = :recovery_hint, updated_at = :now
    WHERE {_KEY_MATCH} AND state = :from_state AND lease_epoch = :epoch
        AND (lease_expires_at <= :now OR lease_expires_at > :granted_until)"""
SQL_FENCE_UNKNOWN: Final = f"""
    UPDATE operations SET lease_epoch = lease_epoch + 1, updated_at = :now
    WHERE {_KEY_MATCH} AND state = :from_state AND lease_epoch = :epoch"""
SQL_RESOLVE_UNKNOWN: Final = f"""
    UPDATE operations SET state = :to_state, recovery_hint = :recovery_hint, updated_at = :now
    WHERE {_KEY_MATCH} AND state = :from_state AND lease_epoch = :epoch"""
SQL_RECONCILE: Final = f"""
    UPDATE operations SET state = :to_state, receipt_ref = :receipt_ref, data = :data,
        package = COALESCE(:package, package), recovery_hint = NULL, expires_at = :expires_at, updated_at = :now
    WHERE {_KEY_MATCH} AND state = :from_state"""
SQL_APPEND_EVENT: Final = """
    INSERT INTO outbox (realm, event_id, request_ref, payload, created_at)
    VALUES (:realm, :event_id, :request_ref, :payload, :now)
    ON CONFLICT (realm, event_id) DO NOTHING"""

# The realm's chain head, read under the store's row lock (PostgreSQL: FOR UPDATE; SQLite: the
# write lock BEGIN IMMEDIATE holds); a realm's first append creates it at the genesis digest.
SQL_CHAIN_HEAD: Final = "SELECT entries, head_sha256 FROM audit_heads WHERE realm = :realm"
SQL_CHAIN_START: Final = """
    INSERT INTO audit_heads (realm, entries, head_sha256) VALUES (:realm, 0, :genesis)
    ON CONFLICT (realm) DO NOTHING"""
SQL_CHAIN_APPEND: Final = """
    INSERT INTO audit_chain (realm, entry_index, previous_sha256, entry_sha256, entry)
    VALUES (:realm, :entries, :previous_sha256, :entry_sha256, :entry)"""
SQL_CHAIN_ADVANCE: Final = """
    UPDATE audit_heads SET entries = :next_entries, head_sha256 = :entry_sha256 WHERE realm = :realm"""
SQL_CHAIN_REALMS: Final = """
    SELECT realm FROM audit_heads UNION SELECT realm FROM audit_chain UNION SELECT realm FROM operations
    ORDER BY realm"""
SQL_CHAIN_ENTRIES: Final = """
    SELECT entry_index, previous_sha256, entry_sha256, entry FROM audit_chain WHERE realm = :realm
    ORDER BY entry_index"""

SQL_USE_APPROVAL: Final = """
    INSERT INTO approval_uses (realm, approval_ref, tenant, subject, tool, idempotency_key, created_at)
    VALUES (:realm, :approval_ref, :tenant, :subject, :tool, :idempotency_key, :now)
    ON CONFLICT (realm, approval_ref) DO NOTHING"""
SQL_APPROVAL_USER: Final = """
    SELECT tenant, subject, tool, idempotency_key FROM approval_uses
    WHERE realm = :realm AND approval_ref = :approval_ref"""
SQL_FREE_APPROVAL: Final = f"DELETE FROM approval_uses WHERE {_KEY_MATCH}"

SQL_BIND_CALL: Final = """
    INSERT INTO call_bindings (realm, adapter_revision, response_id, call_id, fingerprint, created_at)
    VALUES (:realm, :adapter_revision, :response_id, :call_id, :fingerprint, :now)
    ON CONFLICT (realm, adapter_revision, response_id, call_id) DO NOTHING"""
SQL_READ_CALL: Final = """
    SELECT fingerprint FROM call_bindings
    WHERE realm = :realm AND adapter_revision = :adapter_revision AND response_id = :response_id
        AND call_id = :call_id"""

RECEIPT_COLUMNS: Final = tuple(td.Receipt.__slots__)
# Raise the fence to this epoch, or change nothing when it already stands higher (fenced off).
SQL_RAISE_FENCE: Final = """
    INSERT INTO downstream_fences (realm, status_ref, epoch) VALUES (:realm, :status_ref, :epoch)
    ON CONFLICT (realm, status_ref) DO UPDATE SET epoch = excluded.epoch
    WHERE downstream_fences.epoch <= excluded.epoch"""
SQL_READ_RECEIPT: Final = (f"SELECT {', '.join(RECEIPT_COLUMNS)} FROM downstream_receipts "
                           "WHERE realm = :realm AND status_ref = :status_ref")
SQL_WRITE_RECEIPT: Final = (
    f"INSERT INTO downstream_receipts (realm, {', '.join(RECEIPT_COLUMNS)}, epoch, committed_at) "
    f"VALUES (:realm, {', '.join(':' + column for column in RECEIPT_COLUMNS)}, :epoch, :now) "
    "ON CONFLICT (realm, status_ref) DO NOTHING"
)
SQL_COUNT_EFFECTS: Final = "SELECT COUNT(*) FROM downstream_receipts WHERE realm = :realm"
# The receipts of a released row's request that a holder of this row can have committed: those
# above the epoch its key reached before it was last pruned (a receipt at or below it belongs to
# a completed row that pruning deleted, and a retry of the key meets it again).
SQL_RELEASED_EFFECTS: Final = f"""
    SELECT COUNT(*) FROM downstream_receipts WHERE realm = :realm AND status_ref = :status_ref
        AND epoch > (SELECT COALESCE(MAX(epoch), 0) FROM key_epochs WHERE {_KEY_MATCH})"""
SQL_COUNT_EFFECTS_FOR: Final = ("SELECT COUNT(*) FROM downstream_receipts "
                                "WHERE realm = :realm AND request_ref = :request_ref")

# One relay worker's pick: the next unsent event after the last one it handled. On PostgreSQL it
# runs FOR UPDATE SKIP LOCKED, so two relay workers never publish the same event at once.
SQL_NEXT_UNSENT: Final = """
    SELECT seq, realm, event_id, payload FROM outbox
    WHERE sent_at IS NULL AND seq > :after AND (CAST(:realm AS TEXT) IS NULL OR realm = :realm)
    ORDER BY seq LIMIT 1"""
SQL_PUBLISH: Final = """
    INSERT INTO broker_messages (realm, event_id, payload, published_at)
    VALUES (:realm, :event_id, :payload, :now)"""
SQL_MARK_SENT: Final = """
    UPDATE outbox SET sent_at = :now WHERE realm = :realm AND event_id = :event_id AND sent_at IS NULL"""
SQL_BROKER_REALMS: Final = ("SELECT DISTINCT realm FROM broker_messages WHERE (CAST(:realm AS TEXT) IS NULL OR realm = :realm) "
                            "ORDER BY realm")
SQL_CONSUMER_POSITION: Final = ("SELECT position FROM consumer_offsets "
                                "WHERE realm = :realm AND consumer = :consumer")
SQL_NEXT_MESSAGE: Final = """
    SELECT seq, event_id FROM broker_messages WHERE realm = :realm AND seq > :position
    ORDER BY seq LIMIT 1"""
SQL_INBOX_INSERT: Final = """
    INSERT INTO inbox (realm, consumer, event_id, consumed_at) VALUES (:realm, :consumer, :event_id, :now)
    ON CONFLICT (realm, consumer, event_id) DO NOTHING"""
SQL_CONSUMER_EFFECT: Final = """
    INSERT INTO consumer_effects (realm, consumer, event_id, applied_at)
    VALUES (:realm, :consumer, :event_id, :now)"""
SQL_CONSUMER_ADVANCE: Final = """
    INSERT INTO consumer_offsets (realm, consumer, position) VALUES (:realm, :consumer, :position)
    ON CONFLICT (realm, consumer) DO UPDATE SET position = excluded.position"""

_PRUNABLE_ROWS: Final = f"""
    state IN ({_sql_list(PRUNABLE_STATES)}) AND expires_at <= :now
        AND NOT EXISTS (SELECT 1 FROM outbox WHERE outbox.realm = operations.realm
                        AND outbox.request_ref = operations.request_ref AND outbox.sent_at IS NULL)"""
# Run before the delete, in its transaction: the epochs of the rows about to go are kept.
SQL_KEEP_EPOCHS: Final = f"""
    INSERT INTO key_epochs (realm, tenant, subject, tool, idempotency_key, epoch)
    SELECT realm, tenant, subject, tool, idempotency_key, lease_epoch FROM operations WHERE {_PRUNABLE_ROWS}
    ON CONFLICT (realm, tenant, subject, tool, idempotency_key) DO UPDATE SET epoch =
        CASE WHEN excluded.epoch > key_epochs.epoch THEN excluded.epoch ELSE key_epochs.epoch END"""
SQL_PRUNE_OPERATIONS: Final = f"DELETE FROM operations WHERE {_PRUNABLE_ROWS}"
SQL_PRUNE_EVENTS: Final = "DELETE FROM outbox WHERE sent_at IS NOT NULL AND sent_at <= :before"
SQL_PRUNE_CALLS: Final = "DELETE FROM call_bindings WHERE created_at <= :before"

SQL_REALM_ROWS: Final = f"SELECT {', '.join(ROW_COLUMNS)} FROM operations WHERE realm = :realm ORDER BY request_ref"
SQL_STATE_COUNTS: Final = "SELECT state, COUNT(*) FROM operations GROUP BY state ORDER BY state"
SQL_ALL_EFFECTS: Final = "SELECT COUNT(*) FROM downstream_receipts"
SQL_ALL_EVENTS: Final = "SELECT COUNT(*), COUNT(sent_at) FROM outbox"


# ============================================================================================
# 5. The store (connection)
# ============================================================================================


def _checked_path(path: Any) -> str:
    # A path is a str (or a str PathLike) without NUL: SQLite would cut a name at the NUL.
    text = os.fspath(path) if isinstance(path, (str, os.PathLike)) else None
    if type(text) is not str or "\x00" in text:
        raise DurableError("STORE_UNREADABLE")
    return text


def _uri(path: Any, mode: str) -> str:
    return Path(_checked_path(path)).absolute().as_uri() + "?mode=" + mode


SIDE_FILE_SUFFIXES: Final = ("-wal", "-shm", "-journal")  # what SQLite writes beside a database file


def _create_new_file(path: Any, *, adopt: bool = False) -> Callable[[], None] | None:
    """Create the file with O_EXCL, readable and writable by its owner only, and answer the undo:
    remove it and the side files SQLite keeps beside it. A file that was there is STORE_EXISTS
    (the command creates a store, or refuses: it never adopts one), or, with ``adopt``, left as it
    is (None: nothing to undo); a directory there is STORE_UNREADABLE, as opening one is. A store
    whose creation failed (a full disk, Ctrl-C) leaves no file that a second `run` refuses as
    existing and `recover` as damaged. (A side file without its
    database is no one's: SQLite itself resets or deletes one it finds beside a new file.)"""
    text = _checked_path(path)
    try:
        handle = os.open(text, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        if adopt:
            return None
        if os.path.isdir(text):  # no file there to refuse as existing: no store can be opened at all
            raise DurableError("STORE_UNREADABLE") from None
        raise DurableError("STORE_EXISTS") from None
    except OSError:
        raise DurableError("STORE_UNREADABLE") from None
    os.close(handle)

    def undo() -> None:
        for suffix in ("", *SIDE_FILE_SUFFIXES):
            try:
                os.unlink(text + suffix)
            except OSError:
                pass  # not made, or already gone: nothing of ours is left there
    return undo


def _expected_schema() -> tuple[tuple[Any, ...], ...]:
    """What sqlite_master holds in a database this module created: every table, index and column."""
    with closing(sqlite3.connect(":memory:")) as connection:
        for statement in SCHEMA:
            connection.execute(statement)
        return tuple(connection.execute(SQL_SCHEMA_ROWS).fetchall())


SQL_IDENTITY: Final = ("SELECT (SELECT application_id FROM pragma_application_id()), "
                       "(SELECT user_version FROM pragma_user_version())")
SQL_SCHEMA_ROWS: Final = "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name"
EXPECTED_SCHEMA: Final = _expected_schema()


class DurableStore:
    """One SQLite connection in autocommit mode, WAL, a busy timeout, synchronous FULL or NORMAL.

    Every write goes through ``transaction()`` (BEGIN IMMEDIATE ... COMMIT); reads that decide a
    write happen inside it too. Close it (or use it as a context manager): a connection left open
    is a ResourceWarning.

    The store interface every backend offers the ledger: transaction() / begin() + commit() /
    rollback() and current() (the open transaction), query() and query_one() outside one,
    now_ms() (the lease clock), facts(), close(), ``errors`` (the driver's exception types) with
    translate(), two SQL suffixes: ``row_lock`` for a read that decides a write and
    ``skip_locked`` for a relay worker's pick, ``publish_lock``, a statement that makes a realm's
    publishes commit one after the other (SQLite needs none of the three: BEGIN IMMEDIATE already
    makes every writer wait for the one write lock), and ``snapshot``, the BEGIN of a read-only
    transaction that sees one consistent state of the whole store (verify_chain's).
    """

    backend: Final = "sqlite"
    errors: Final = (sqlite3.Error,)
    row_lock: Final = ""
    skip_locked: Final = ""
    publish_lock: Final = ""
    snapshot: Final = "BEGIN"  # deferred: WAL fixes the snapshot at its first read

    def __init__(self, connection: sqlite3.Connection, *, synchronous: str,
                 clock_ms: Callable[[], int]) -> None:
        self._connection = connection
        self.synchronous = synchronous
        self._clock_ms = clock_ms
        self._opening = True  # until _configure found the store ours (_SQLITE_NOT_OPENED)

    @classmethod
    def open(cls, path: Any, *, create: bool = True, exclusive: bool = False, synchronous: str = "FULL",
             busy_timeout_ms: int = BUSY_TIMEOUT_MS, clock_ms: Callable[[], int] | None = None) -> DurableStore:
        """Open the database at ``path``; ``create`` lets it create the schema in a new or empty
        file, ``exclusive`` also refuses a file that exists. Without either, an empty file is
        refused untouched: creating a store is an explicit act, never a side effect of opening."""
        if synchronous not in SYNCHRONOUS_MODES or type(busy_timeout_ms) is not int or busy_timeout_ms < 0:
            raise DurableError("SETTING_INVALID")
        uri = _uri(path, "rwc" if create or exclusive else "rw")
        # A store this call creates is its owner's only (SQLite gives its side files the same mode).
        # Only `exclusive` undoes a creation that failed: a file `create` made, another opener of
        # the same new store may already hold, as it may hold one SQLite made.
        undo = _create_new_file(path) if exclusive else None
        if create and not exclusive:
            _create_new_file(path, adopt=True)
        try:
            return cls._connect(uri, synchronous=synchronous, busy_timeout_ms=busy_timeout_ms,
                                clock_ms=clock_ms or wall_clock_ms, create=create or exclusive)
        except BaseException:
            if undo is not None:
                undo()  # the file this call created holds no store: it goes
            raise

    @classmethod
    def _connect(cls, uri: str, *, synchronous: str, busy_timeout_ms: int, clock_ms: Callable[[], int],
                 create: bool) -> DurableStore:
        try:
            connection = sqlite3.connect(uri, uri=True, timeout=busy_timeout_ms / 1000, isolation_level=None)
        except (sqlite3.Error, OSError, ValueError):
            raise DurableError("STORE_UNREADABLE") from None
        store = cls(connection, synchronous=synchronous, clock_ms=clock_ms)
        try:
            store._configure(busy_timeout_ms, create=create)
        except BaseException:
            store.close()
            raise
        return store

    def __enter__(self) -> DurableStore:
        return self

    def __exit__(self, *_exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self._connection.close()

    def now_ms(self) -> int:
        return self._clock_ms()

    def _configure(self, busy_timeout_ms: int, *, create: bool = True) -> None:
        self.query_one(f"PRAGMA busy_timeout = {busy_timeout_ms}")
        # Someone else's database, or an empty file we were not asked to create a store in, is
        # refused before anything (even the journal mode) is written to it.
        found = self._inspect()
        if found == "empty" and create:
            self._set_wal(busy_timeout_ms)
            found = self._create_schema()
        if found != "ours":
            raise DurableError("STORE_INVALID")
        self._set_wal(busy_timeout_ms)
        self.query_one(f"PRAGMA synchronous = {SYNCHRONOUS_MODES[self.synchronous]}")
        self._opening = False

    def _set_wal(self, busy_timeout_ms: int = BUSY_TIMEOUT_MS) -> None:
        # Two first openers switching a new file to WAL at once: SQLite answers one of them BUSY at
        # once, without its busy handler (each holds the shared lock the other needs to give up).
        # The switch is retried, for at most the busy timeout.
        deadline = time.monotonic() + busy_timeout_ms / 1000
        while True:
            try:
                journal = self.query_one("PRAGMA journal_mode")
                if journal != ("wal",):
                    journal = self.query_one("PRAGMA journal_mode = WAL")
                break
            except DurableError as error:
                if error.code != "STORE_BUSY" or time.monotonic() >= deadline:
                    raise
                time.sleep(WAL_SWITCH_PAUSE_S)
        if journal != ("wal",):
            raise DurableError("STORE_INVALID")

    def _inspect(self, tx: Tx | None = None) -> str:
        """'ours', 'empty' or 'foreign', from one consistent snapshot of the header and the schema.

        One read transaction: a process creating the schema at this moment is seen before or after
        its commit, never half-way (two separate reads could see the new version and the old id).
        """
        if tx is None:
            with self.transaction("BEGIN") as snapshot:
                return self._inspect(snapshot)
        identity = tuple(tx.execute(SQL_IDENTITY).fetchone())
        schema = tuple(tx.execute(SQL_SCHEMA_ROWS).fetchall())
        if identity == (APPLICATION_ID, SCHEMA_VERSION) and schema == EXPECTED_SCHEMA:
            return "ours"
        return "empty" if identity == (0, 0) and not schema else "foreign"

    def _create_schema(self) -> str:
        with self.transaction() as tx:
            found = self._inspect(tx)
            if found != "empty":
                return found  # another process created it while we waited for the lock (or it is not ours)
            for statement in SCHEMA:
                tx.execute(statement)
            tx.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            tx.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        return "ours"

    def transaction(self, begin: str = "BEGIN IMMEDIATE") -> _Transaction:
        """BEGIN IMMEDIATE ... COMMIT; any exception rolls back and sqlite3 errors become DurableError."""
        return _Transaction(self, begin)

    def begin(self, begin: str = "BEGIN IMMEDIATE") -> sqlite3.Connection:
        """Open a transaction that the caller ends with commit() or rollback()."""
        connection = self._connection
        if connection.in_transaction:
            self.rollback()
            raise DurableError("STORE_MISUSE")
        try:
            connection.execute(begin)
        except sqlite3.Error as error:
            raise self.translate(error) from None
        return connection

    def commit(self) -> None:
        try:
            self._connection.execute("COMMIT")
        except sqlite3.Error as error:
            self.rollback()
            raise self.translate(error) from None

    def rollback(self) -> None:
        if self._connection.in_transaction:
            try:
                self._connection.execute("ROLLBACK")
            except sqlite3.Error:
                pass  # the original error is the one worth raising; SQLite rolls back on close anyway

    @property
    def in_transaction(self) -> bool:
        return self._connection.in_transaction

    def current(self) -> Tx:
        """The transaction begin() opened (the caller commits or rolls it back)."""
        if not self._connection.in_transaction:
            raise DurableError("STORE_MISUSE")
        return self._connection

    def translate(self, error: BaseException) -> DurableError:
        return _store_error(error, opening=self._opening)  # type: ignore[arg-type]

    def query(self, sql: str, params: Mapping[str, Any] | Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """A read outside any transaction (autocommit: one consistent snapshot per statement)."""
        try:
            return self._connection.execute(sql, params).fetchall()
        except sqlite3.Error as error:
            raise self.translate(error) from None

    def query_one(self, sql: str, params: Mapping[str, Any] | Sequence[Any] = ()) -> tuple[Any, ...] | None:
        rows = self.query(sql, params)
        return rows[0] if rows else None

    def integrity(self) -> str:
        return "; ".join(str(row[0]) for row in self.query("PRAGMA integrity_check"))

    def facts(self) -> dict[str, Any]:
        """What the CLI reports about a database: settings, integrity, counts. Never its path."""
        effects = self.query_one(SQL_ALL_EFFECTS)
        events = self.query_one(SQL_ALL_EVENTS)
        return {
            "journal_mode": self.query_one("PRAGMA journal_mode")[0],
            "synchronous": self.synchronous,
            "integrity": self.integrity(),
            "operations": {state: count for state, count in self.query(SQL_STATE_COUNTS)},
            "effects": effects[0] if effects else 0,
            "events": {"written": events[0], "sent": events[1]} if events else {"written": 0, "sent": 0},
        }


def open_store(target: Any, **options: Any) -> Any:
    """The store a target names: a ``postgresql://`` DSN opens the PostgreSQL store (psycopg, the
    optional extra, is imported only then); anything else is a SQLite file path."""
    if isinstance(target, str) and target.startswith(("postgresql://", "postgres://")):
        if __package__:  # the installed package: the store is its sibling module, never a top-level name
            from . import postgres_store
        else:
            if _HERE not in sys.path:
                sys.path.insert(0, _HERE)
            import postgres_store  # its psycopg import is guarded: a missing driver is STORE_DRIVER_MISSING
        return postgres_store.PostgresStore.open(target, **options)
    return DurableStore.open(target, **options)


# ============================================================================================
# 6. The ledger
# ============================================================================================


def _text(value: Any) -> str | None:
    return None if value is None else td.canonical_text(value)


# Everything read back from the store is untrusted input: another writer, an edit or a damaged
# file can put any value of any kind in any column. Each value is checked for its kind before
# use, and a wrong one is STORE_INVALID (nothing written), never a TypeError deeper in.


def _decoded(text: Any, kind: type = dict) -> Any:
    # Stored JSON is decoded by the boundary's strict, bounded decoder, then checked for its kind.
    if type(text) is not str:
        raise DurableError("STORE_INVALID")
    try:
        value = td.decode_strict_json(text.encode("utf-8"), max_bytes=MAX_STORED_JSON_BYTES)
    except (td.BoundaryError, UnicodeEncodeError):
        raise DurableError("STORE_INVALID") from None
    if type(value) is not kind:
        raise DurableError("STORE_INVALID")
    return value


def _checked_int(value: Any, least: int = 0) -> int:
    if type(value) is not int or value < least:
        raise DurableError("STORE_INVALID")
    return value


def _checked_text(value: Any) -> str:
    if type(value) is not str:
        raise DurableError("STORE_INVALID")
    return value


def _optional(check: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda value: None if value is None else check(value)


def _one_of(allowed: frozenset[str] | Sequence[str]) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if type(value) is not str or value not in allowed:
            raise DurableError("STORE_INVALID")
        return value
    return check


@dataclass(frozen=True, slots=True)
class OperationKey:
    """The idempotency namespace, tenant + subject + tool + key, inside one realm."""

    realm: str
    tenant: str
    subject: str
    tool: str
    idempotency_key: str

    def params(self) -> dict[str, str]:
        return {"realm": self.realm, "tenant": self.tenant, "subject": self.subject, "tool": self.tool,
                "idempotency_key": self.idempotency_key}


@functools.lru_cache(maxsize=td.TEMPLATE_CACHE)
def _contract_text(items: tuple[tuple[str, Any], ...]) -> str:
    # A tool's contract is the same few members on every write of that tool: encoded once.
    return str(_text(dict(items)))


@dataclass(frozen=True, slots=True)
class Intent:
    """What a claim binds its key to: the request digest, profile, contract and downstream refs,
    and the approval that let it run (kept as evidence: tool_dispatcher's call binding binds it)."""

    request_sha256: str
    profile: td.ProviderProfile
    operation_id: str
    contract: str  # canonical JSON of the tool's contract_view
    request_ref: str
    status_ref: str
    approval: str | None = None  # canonical JSON of tool_dispatcher's approval_view
    call: td.AdmittedCall | None = None  # the call that claims: what the repeat rule compares with
    arguments: str = "{}"  # canonical JSON of the admitted arguments: what a receipt must echo
    resource_revision: int | None = None  # the resource's revision when the claim was made

    @classmethod
    def of(cls, call: td.AdmittedCall, record: td.OperationRecord) -> Intent:
        return cls(request_sha256=record.request_sha256, profile=record.profile,
                   operation_id=record.operation_id,
                   contract=_contract_text(tuple(record.contract.items())),
                   request_ref=str(record.refs["request_ref"]), status_ref=str(record.refs["status_ref"]),
                   approval=None if record.approval is None else _text(dict(record.approval)), call=call,
                   arguments=str(_text(dict(record.arguments or {}))), resource_revision=record.resource_revision)

    def params(self) -> dict[str, str]:
        return {"request_sha256": self.request_sha256, "provider": self.profile.provider,
                "api_family": self.profile.api_family, "adapter_revision": self.profile.adapter_revision,
                "operation_id": self.operation_id, "contract": self.contract,
                "request_ref": self.request_ref, "status_ref": self.status_ref, "approval": self.approval,
                "arguments": self.arguments, "resource_revision": self.resource_revision}


@dataclass(frozen=True, slots=True)
class LedgerRow:
    realm: str
    tenant: str
    subject: str
    tool: str
    idempotency_key: str
    request_sha256: str
    provider: str
    api_family: str
    adapter_revision: str
    operation_id: str
    contract: str
    state: str
    request_ref: str
    status_ref: str
    receipt_ref: str | None
    data: str | None
    package: str | None
    approval: str | None
    lease_owner: str | None
    lease_epoch: int
    lease_expires_at: int | None
    recovery_hint: str | None
    created_at: int
    updated_at: int
    expires_at: int | None
    arguments: str
    resource_revision: int | None

    @property
    def key(self) -> OperationKey:
        return OperationKey(self.realm, self.tenant, self.subject, self.tool, self.idempotency_key)

    @property
    def profile(self) -> td.ProviderProfile:
        return td.ProviderProfile(self.provider, self.api_family, self.adapter_revision)

    @classmethod
    def of(cls, values: Sequence[Any] | None) -> LedgerRow:
        """A row read back from the store, every column checked for its kind (STORE_INVALID)."""
        if values is None or len(values) != len(ROW_COLUMNS):
            raise DurableError("STORE_INVALID")
        return cls(*(ROW_CHECKS[column](value) for column, value in zip(ROW_COLUMNS, values)))

    def lease_live(self, now_ms: int) -> bool:
        # Like an approval, a lease is dead at its expiry instant. No lease is granted for longer
        # than MAX_LEASE_MS: one that ends further ahead was written by a clock that has since
        # been set back (or by an edit), and would hold its key for as long as the step was.
        # It is dead too: a takeover is fenced by the epoch, whether its holder lives or not.
        return self.lease_expires_at is not None and now_ms < self.lease_expires_at <= now_ms + MAX_LEASE_MS

    def record(self) -> td.OperationRecord:
        """The row as tool_dispatcher's OperationRecord (what its repeat rule, replay and query read)."""
        return td.OperationRecord(
            state=self.state, request_sha256=self.request_sha256, profile=self.profile,
            operation_id=self.operation_id, contract=MappingProxyType(_decoded(self.contract)),
            refs=MappingProxyType({"request_ref": self.request_ref, "receipt_ref": self.receipt_ref,
                                   "status_ref": self.status_ref}),
            data=None if self.data is None else _decoded(self.data),
            approval=None if self.approval is None else MappingProxyType(_decoded(self.approval)),
            arguments=MappingProxyType(_decoded(self.arguments)),
            resource_revision=self.resource_revision,
        )


_TEXT: Final = _checked_text
_MAYBE_TEXT: Final = _optional(_checked_text)
ROW_CHECKS: Final[Mapping[str, Callable[[Any], Any]]] = MappingProxyType({
    **{column: _TEXT for column in (
        "realm", "tenant", "subject", "tool", "idempotency_key", "request_sha256", "provider", "api_family",
        "adapter_revision", "operation_id", "contract", "request_ref", "status_ref", "arguments")},
    **{column: _MAYBE_TEXT for column in ("receipt_ref", "data", "package", "approval", "lease_owner")},
    "state": _one_of(STORED_STATES),
    "recovery_hint": _optional(_one_of(tuple(RECOVERY_HINTS.values()))),
    "lease_epoch": lambda value: _checked_int(value, 1),
    "created_at": _checked_int,
    "updated_at": _checked_int,
    "lease_expires_at": _optional(_checked_int),
    "expires_at": _optional(_checked_int),
    "resource_revision": _optional(lambda value: _checked_int(value, 1)),
})


# The operation state a settled or released row's stored package states, by the row's state.
# Escalated reads as unknown (recovery answered nobody); a row recovery reconciled keeps its first
# answer (unknown), and the downstream's receipt vouches for the data and receipt it added. A
# released row holds no package (a release before the downstream), the answer of a write that
# failed and committed nothing (none), or the unknown answer a fenced receipt query then proved
# empty (receipt_absent keeps it).
PACKAGE_STATES: Final[Mapping[str, frozenset[str]]] = MappingProxyType({
    "succeeded": frozenset({"succeeded"}), "unknown": frozenset({"unknown"}), "escalated": frozenset({"unknown"}),
    "reconciled": frozenset({"reconciled", "unknown"}), "released": frozenset({"none", "unknown"}),
})


def verified_record(row: LedgerRow, seal_keys: td.SealKeys | None,
                    receipt_of: Callable[[str], td.Receipt | None], *,
                    registry: Mapping[str, td.ToolSpec] = td.REGISTRY) -> td.OperationRecord:
    """A settled row as the record a replay or a status query answers from (or a released row,
    through verified_release), once its stored package verifies (with the store's seal keys,
    required when it has them) and states exactly the row's columns; STORE_TAMPERED otherwise.
    Nothing is written either way."""
    record = row.record()  # damaged kinds are STORE_INVALID first
    refs, data = dict(record.refs), record.data
    package = None if row.package is None else _decoded(row.package)
    if package is not None:
        try:
            td.verify_package(package, seal_keys=seal_keys, require_seal=seal_keys is not None, registry=registry)
        except td.BoundaryError as refusal:
            if not (refusal.code == "PROVENANCE_MISMATCH" and _retired_contract(package, registry, seal_keys)):
                raise DurableError("STORE_TAMPERED") from None
    stated = None if package is None else package["execution"]["operation_state"]
    if row.state == "reconciled" and stated != "reconciled":
        # Reconciled by recovery, from a receipt, after a first answer of unknown (or none): the
        # receipt vouches for what that answer could not say.
        receipt = receipt_of(row.status_ref)
        if (receipt is None or receipt.receipt_ref != row.receipt_ref
                or td.canonical_json(td.receipt_output(receipt)) != td.canonical_json(data)):
            raise DurableError("STORE_TAMPERED")
        refs["receipt_ref"], data = None, None  # what the first answer said before the receipt was found
    if package is None:
        return _unanswered(row, record, refs, data)
    audit = package["protected_audit"]
    context = audit["provider_context"]
    states = [stated in PACKAGE_STATES[row.state], audit["principal"]["tenant"], audit["principal"]["subject_ref"],
              [context["provider"], context["api_family"], context["adapter_revision"]], context["operation_id"],
              context["idempotency_key"], audit["tool_contract"], audit["arguments"], audit["approval"],
              audit["resource_revision"], audit["request_sha256"], audit["downstream"],
              package["model_result"].get("data")]
    columns = [True, row.tenant, td.principal_view(td.Principal(row.tenant, row.subject))["subject_ref"],
               [row.provider, row.api_family, row.adapter_revision], row.operation_id, row.idempotency_key,
               dict(record.contract), dict(record.arguments), None if record.approval is None else dict(record.approval),
               row.resource_revision, row.request_sha256, refs, data]
    # Compared as JSON, not with ==: in Python 1 == True, and an edit from one to the other is an edit.
    if td.canonical_json(states) != td.canonical_json(columns) or audit["tool_contract"]["tool"] != row.tool:
        raise DurableError("STORE_TAMPERED")
    return record


def _retired_contract(package: dict[str, Any], registry: Mapping[str, td.ToolSpec],
                      seal_keys: td.SealKeys | None) -> bool:
    """A package written under a contract revision the host has since moved on from: the tool is
    still registered, under another contract. The registry can no longer vouch for it, so it must
    vouch for itself: its own three digests hold, and its seal does when the store has keys. Its
    row is history then, not tampering; a retry of its key meets another contract and is
    IDEMPOTENCY_CONFLICT, as in memory."""
    contract = package["protected_audit"]["tool_contract"]
    spec = registry.get(contract["tool"]) if type(contract) is dict and type(contract.get("tool")) is str else None
    if type(spec) is not td.ToolSpec or spec.contract_view() == contract:
        return False  # no such tool any more, or the same contract: the refusal stands
    audit = package["protected_audit"]
    try:
        if td.package_digests(package) != (audit["request_sha256"], audit["result_sha256"],
                                           audit["call_binding_sha256"]):
            return False
    except (KeyError, TypeError, ValueError):
        return False
    return seal_keys is None or td.seal_holds(seal_keys, package["seal"], "package", audit["call_binding_sha256"]) is True


def _unanswered(row: LedgerRow, record: td.OperationRecord, refs: dict[str, Any], data: Any) -> td.OperationRecord:
    # A holder that died in progress answered nobody, so its row has no package: only a row that
    # may still be unknown may lack one, and what it holds beyond its claim must be derivable.
    request_ref = td.derived_ref("rq-", "request", row.tenant, row.subject, row.tool, row.idempotency_key,
                                 row.request_sha256)
    if (row.state == "succeeded" or data is not None or refs["receipt_ref"] is not None
            or (refs["request_ref"], refs["status_ref"]) != (request_ref, td.derived_ref("st-", "status", request_ref))):
        raise DurableError("STORE_TAMPERED")
    return record


ReadOne = Callable[[str, Mapping[str, Any]], Sequence[Any] | None]  # one row of a statement, in or out of a transaction


def verified_release(row: LedgerRow, seal_keys: td.SealKeys | None, read_one: ReadOne, *,
                     registry: Mapping[str, td.ToolSpec] = td.REGISTRY) -> None:
    """A released row, before a new claim takes its key, a status query reads it as free or
    verify-chain passes it: it holds what a release leaves (PACKAGE_STATES), its package verifies
    and states exactly its columns as a settled row's must, and no receipt of its request was
    committed since its key was last pruned: a release before the downstream and a failed write
    made none, and receipt_absent found none behind a fence. A row that says "released" over an
    effect (a success, or an unknown write that did commit, edited to released) would run its
    write again: STORE_TAMPERED. Nothing is written either way."""
    verified_record(row, seal_keys, lambda _status_ref: None, registry=registry)  # no receipt vouches for it
    found = read_one(SQL_RELEASED_EFFECTS, {**row.key.params(), "status_ref": row.status_ref})
    if found is None or _checked_int(found[0]) != 0:
        raise DurableError("STORE_TAMPERED")


@dataclass(frozen=True, slots=True)
class Lease:
    """A holder's claim on a key: valid while the row keeps this state and this epoch."""

    key: OperationKey
    state: str
    epoch: int
    owner: str
    request_ref: str


def claim_event(row: LedgerRow, call: td.AdmittedCall | None, now_ms: int) -> str | None:
    """How a new claim may take a row that exists: 'claim', 'take_over', or None (answer it)."""
    if row.state == "released":
        return "claim"
    if (row.state == "claimed" and not row.lease_live(now_ms) and call is not None
            and td.same_intent(row.record(), call)):
        return "take_over"
    return None


def settled_event(key: OperationKey, request_ref: str, state: str, data: Any) -> tuple[str, str]:
    """The outbox event of a settled operation: its id (derived, so a re-settle dedupes) and payload."""
    event_id = td.derived_ref("ev-", EVENT_TYPE, request_ref)
    subject_ref = td.principal_view(td.Principal(key.tenant, key.subject))["subject_ref"]
    payload = {"event_id": event_id, "type": EVENT_TYPE, "tenant": key.tenant, "subject_ref": subject_ref,
               "tool": key.tool, "request_ref": request_ref, "state": state, "data": data}
    return event_id, str(_text(payload))


class Ledger:
    """The operation ledger: claims, fenced moves, expired-lease takeovers and reconciliation.

    Every move that stores a package (a settle, a status query's reconciliation) appends the
    package's entry to the realm's hash chain in the same transaction, sealed with ``seal_keys``.
    """

    def __init__(self, store: DurableStore, *, retention_ms: int = RETENTION_MS,
                 checkpoint: Checkpoint = _no_checkpoint, seal_keys: td.SealKeys | None = None,
                 registry: Mapping[str, td.ToolSpec] = td.REGISTRY) -> None:
        self._store = _checked_store(store)
        self._retention_ms = _setting("retention_ms", retention_ms)
        self._checkpoint = checkpoint
        self._seal_keys = _seal_keys_setting(seal_keys)
        self._registry = registry  # the contract set a released row's package is verified with

    def now_ms(self) -> int:
        return self._store.now_ms()

    def read(self, key: OperationKey) -> LedgerRow | None:
        row = self._store.query_one(SQL_READ_ROW, key.params())
        return None if row is None else LedgerRow.of(row)

    def claim(self, tx: Tx, key: OperationKey, intent: Intent, *, owner: str, lease_ms: int,
              approval_ref: str | None = None, started: bool = False) -> Lease | LedgerRow:
        """Inside ``tx``: claim the key, or take over a released or expired claim; else return the
        row to answer. The caller commits (with the start, in one transaction) or rolls back. A
        released row is taken only once it verifies as one (verified_release): STORE_TAMPERED.

        A new row starts above the highest epoch its key ever reached (key_epochs keeps the epoch
        of a pruned row), so the downstream's fence never sees an epoch go back. With an approval
        reference, the claim also consumes it: an approval another key consumed is
        APPROVAL_CONSUMED, and nothing is claimed.

        With ``started``, the row is written as its start will leave it (in_progress), so a caller
        that commits claim and start together writes the row once instead of inserting it and
        updating it in the same transaction; the returned lease is still the claim's (claimed),
        and a caller that releases it instead moves it from the started state (advance's
        ``stored``). Nobody else can see the row before that commit.
        """
        now = self._store.now_ms()
        params = {**key.params(), **intent.params(), "lease_owner": owner, "lease_expires_at": now + lease_ms,
                  "now": now}
        state = transition("none", "claim")
        inserted = tx.execute(SQL_CLAIM, {**params, "to_state": transition(state, "start") if started else state}
                              ).fetchall()
        if inserted:
            self._use_approval(tx, key, approval_ref, now)
            return Lease(key, state, _checked_int(inserted[0][0], 1), owner, intent.request_ref)
        row = LedgerRow.of(tx.execute(SQL_READ_ROW + self._store.row_lock, key.params()).fetchone())
        event = claim_event(row, intent.call, now)
        if event is None:
            return row
        if row.state == "released":  # the row this claim overwrites, read under its lock
            verified_release(row, self._seal_keys, lambda sql, params: tx.execute(sql, params).fetchone(),
                             registry=self._registry)
        to_state = transition(row.state, event)
        if tx.execute(SQL_CLAIM_TAKE_OVER, {**params, "to_state": transition(to_state, "start") if started else to_state,
                                            "from_state": row.state, "epoch": row.lease_epoch}).rowcount != 1:
            raise td.BoundaryError("OPERATION_IN_PROGRESS")  # moved under us: cannot happen under the row lock
        self._use_approval(tx, key, approval_ref, now)
        return Lease(key, to_state, row.lease_epoch + 1, owner, intent.request_ref)

    @staticmethod
    def _use_approval(tx: Tx, key: OperationKey, approval_ref: str | None, now: int) -> None:
        if approval_ref is None:
            return
        params = {**key.params(), "approval_ref": approval_ref, "now": now}
        if tx.execute(SQL_USE_APPROVAL, params).rowcount == 1:
            return
        user = tx.execute(SQL_APPROVAL_USER, params).fetchone()
        if tuple(user) != (key.tenant, key.subject, key.tool, key.idempotency_key):
            raise td.BoundaryError("APPROVAL_CONSUMED")  # rolls the claim back with it
        # The same key took over its own expired claim: the approval was consumed by this operation.

    def approval_used(self, realm: str, approval_ref: str) -> bool:
        return self._store.query_one(SQL_APPROVAL_USER, {"realm": realm, "approval_ref": approval_ref}) is not None

    def advance(self, lease: Lease, event: str, *, lease_ms: int = 0, data: Any = None,
                package: Any = None, receipt_ref: str | None = None,
                tx: Tx | None = None, stored: str | None = None) -> Lease:
        """The holder's own move, fenced by its epoch; a settled success writes its event in the
        same commit. Inside ``tx`` when given (the caller commits), else in a transaction of its own.
        ``stored`` is the state the row holds when it is not the lease's (a claim written started).

        Everything is computed and encoded (the package, the event) before a transaction of its
        own begins: the write lock is held for the statements alone."""
        to_state = transition(lease.state, event)
        now = self._store.now_ms()
        leased = to_state in LEASED_STATES
        params = {**lease.key.params(), "to_state": to_state, "from_state": stored or lease.state,
                  "epoch": lease.epoch,
                  "lease_owner": lease.owner if leased else None,
                  "lease_expires_at": now + lease_ms if leased else None,
                  "data": _text(data), "package": _text(package), "receipt_ref": receipt_ref,
                  "recovery_hint": RECOVERY_HINTS.get(to_state),
                  "expires_at": now + self._retention_ms if to_state in PRUNABLE_STATES else None, "now": now}
        appended = (_event_params(lease.key, lease.request_ref, to_state, data, now)
                    if to_state in EVENT_STATES else None)
        if tx is None:
            with self._store.transaction() as own:
                self._move(own, lease.key, event, params, appended)
        else:
            self._move(tx, lease.key, event, params, appended)
        return Lease(lease.key, to_state, lease.epoch, lease.owner, lease.request_ref)

    def _move(self, tx: Tx, key: OperationKey, event: str, params: dict[str, Any],
              appended: dict[str, Any] | None) -> None:
        if tx.execute(SQL_HOLDER_MOVE, params).rowcount != 1:
            raise DurableError("LEASE_LOST")
        if params["package"] is not None:  # a stored answer is chained in the commit that stores it
            self.append_entry(tx, key.realm, params["package"])
        if event == "release":  # nothing ran: the approval this claim consumed is unused again
            tx.execute(SQL_FREE_APPROVAL, key.params())
        if appended is not None:
            tx.execute(SQL_APPEND_EVENT, appended)
            self._checkpoint("after_outbox_write")

    def expire(self, row: LedgerRow, event: str) -> bool:
        """Move a row whose lease has expired (epoch + 1); False when it moved or is still live."""
        to_state = transition(row.state, event)
        now = self._store.now_ms()
        params = {**row.key.params(), "to_state": to_state, "from_state": row.state, "epoch": row.lease_epoch,
                  "recovery_hint": RECOVERY_HINTS.get(to_state), "now": now, "granted_until": now + MAX_LEASE_MS}
        with self._store.transaction() as tx:
            return tx.execute(SQL_EXPIRE_LEASE, params).rowcount == 1

    def fence_unknown(self, row: LedgerRow) -> int | None:
        """Raise an unknown row's epoch before a fenced receipt query; None when the row moved."""
        params = {**row.key.params(), "from_state": "unknown", "epoch": row.lease_epoch, "now": self._store.now_ms()}
        with self._store.transaction() as tx:
            moved = tx.execute(SQL_FENCE_UNKNOWN, params).rowcount == 1
        return row.lease_epoch + 1 if moved else None

    def resolve(self, key: OperationKey, epoch: int, event: str) -> bool:
        """Settle an unknown row at the epoch its fenced receipt query used (released or escalated).

        A row that moved meanwhile (another recoverer, a status query) is left as it is.
        """
        to_state = transition("unknown", event)
        params = {**key.params(), "to_state": to_state, "from_state": "unknown", "epoch": epoch,
                  "recovery_hint": RECOVERY_HINTS.get(to_state), "now": self._store.now_ms()}
        with self._store.transaction() as tx:
            return tx.execute(SQL_RESOLVE_UNKNOWN, params).rowcount == 1

    def reconcile(self, key: OperationKey, receipt_ref: str | None, data: Any, package: Any = None) -> None:
        """unknown -> reconciled with the receipt's data and its event, one transaction; with the
        package that answered it (a status query's), stored and chained in the same transaction.

        Any epoch may reconcile: a verified receipt is the truth whoever found it. A row already
        reconciled (by another process, from the same receipt) is left as it is. Recovery asks no
        question and answers none: its row keeps its first answer, and its receipt is the evidence.
        """
        now = self._store.now_ms()
        package_text = _text(package)
        with self._store.transaction() as tx:
            found = tx.execute(SQL_READ_ROW + self._store.row_lock, key.params()).fetchone()
            row = None if found is None else LedgerRow.of(found)
            if row is not None and row.state == "reconciled":
                return
            if row is not None and row.state == "escalated":
                raise DurableError("OPERATION_ESCALATED")
            to_state = transition("none" if row is None else row.state, "receipt_confirmed")
            tx.execute(SQL_RECONCILE, {**key.params(), "to_state": to_state, "from_state": row.state,
                                       "receipt_ref": receipt_ref, "data": _text(data), "package": package_text,
                                       "expires_at": now + self._retention_ms, "now": now})
            if package_text is not None:
                self.append_entry(tx, key.realm, package_text)
            self._append_event(tx, key, row.request_ref, to_state, data, now)

    def append_entry(self, tx: Tx, realm: str, package_text: str) -> None:
        """Inside ``tx``: append a package's entry (given its canonical text, as the row stores it)
        to the realm's chain, after its head."""
        # The head is read under a lock, so two writers of one realm never append after the same
        # head: the second waits, then reads the first one's (a stale read would hit the keys).
        params = {"realm": realm, "genesis": td.GENESIS_SHA256}
        head = tx.execute(SQL_CHAIN_HEAD + self._store.row_lock, params).fetchone()
        if head is None:  # the realm's first entry: its head row, then the head under its lock
            tx.execute(SQL_CHAIN_START, params)
            head = tx.execute(SQL_CHAIN_HEAD + self._store.row_lock, params).fetchone()
        if head is None:
            raise DurableError("STORE_INVALID")
        entries, previous = _checked_int(head[0]), _checked_text(head[1])
        line, digest = td.audit_entry_from_text(package_text, index=entries, previous_sha256=previous,
                                                seal_keys=self._seal_keys)
        params = {"realm": realm, "entries": entries, "next_entries": entries + 1, "previous_sha256": previous,
                  "entry_sha256": digest, "entry": line.decode("utf-8")}
        tx.execute(SQL_CHAIN_APPEND, params)
        tx.execute(SQL_CHAIN_ADVANCE, params)

    @staticmethod
    def _append_event(tx: Tx, key: OperationKey, request_ref: str, state: str, data: Any,
                      now: int) -> None:
        tx.execute(SQL_APPEND_EVENT, _event_params(key, request_ref, state, data, now))


def _event_params(key: OperationKey, request_ref: str, state: str, data: Any, now: int) -> dict[str, Any]:
    # The outbox row of a settled operation, for SQL_APPEND_EVENT.
    event_id, payload = settled_event(key, request_ref, state, data)
    return {"realm": key.realm, "event_id": event_id, "request_ref": request_ref, "payload": payload, "now": now}


class CallBindings:
    """The call-identity half of the store: one provider call identity answers one request for
    one purpose, across processes and restarts."""

    def __init__(self, store: DurableStore, realm: str) -> None:
        self._store = store
        self._realm = realm

    def params(self, identity: tuple[str, str, str], fingerprint: tuple[Any, ...] | None = None) -> dict[str, Any]:
        adapter_revision, response_id, call_id = identity
        params = {"realm": self._realm, "adapter_revision": adapter_revision, "response_id": response_id,
                  "call_id": call_id}
        if fingerprint is not None:  # a read needs the identity alone
            params.update(fingerprint=_text(list(fingerprint)), now=self._store.now_ms())
        return params

    def bind(self, identity: tuple[str, str, str], fingerprint: tuple[Any, ...],
             tx: Tx | None = None) -> tuple[Any, ...]:
        """Bind once (inside ``tx`` when given); the fingerprint the identity is bound to."""
        if tx is None:
            with self._store.transaction() as own:
                return self.bind(identity, fingerprint, own)
        params = self.params(identity, fingerprint)
        if tx.execute(SQL_BIND_CALL, params).rowcount == 1:
            return fingerprint
        return _fingerprint(tx.execute(SQL_READ_CALL, params).fetchone())

    def read(self, identity: tuple[str, str, str]) -> tuple[Any, ...] | None:
        found = self._store.query_one(SQL_READ_CALL, self.params(identity))
        return None if found is None else _fingerprint(found)


def _fingerprint(found: Sequence[Any] | None) -> tuple[Any, ...]:
    # (purpose, request digest, operation id, idempotency key or null), as tool_dispatcher binds it.
    value = _decoded(None if found is None else found[0], list)
    if len(value) != 4 or not all(type(part) is str for part in value[:3]) or (
            value[3] is not None and type(value[3]) is not str):
        raise DurableError("STORE_INVALID")
    return tuple(value)


def _receipt(found: Sequence[Any] | None) -> td.Receipt | None:
    # A downstream receipt read back: every field is text, or the row is damaged.
    if found is None:
        return None
    if len(found) != len(RECEIPT_COLUMNS) or not all(type(value) is str for value in found):
        raise DurableError("STORE_INVALID")
    return td.Receipt(*found)


# ============================================================================================
# 7. Durable downstream (receipts and fences)
# ============================================================================================
# tool_dispatcher's MockDownstream with its effects on disk. Keyed by the status reference the
# dispatcher derives from the operation, it never makes a second effect for one key. It also
# keeps, per key, the highest lease epoch it has seen and refuses a commit from a lower one: the
# fencing token that lets recovery prove "no effect" after a holder died.


class DurableDownstream:
    """The mock refund service: effects, receipts and fences in their own tables and transactions."""

    def __init__(self, store: DurableStore, realm: str, *, checkpoint: Checkpoint = _no_checkpoint) -> None:
        self._store = store
        self._realm = realm
        self._checkpoint = checkpoint

    @property
    def effect_count(self) -> int:
        return self._store.query_one(SQL_COUNT_EFFECTS, {"realm": self._realm})[0]

    def effects_for(self, request_ref: str) -> int:
        return self._store.query_one(SQL_COUNT_EFFECTS_FOR, {"realm": self._realm, "request_ref": request_ref})[0]

    def receipt(self, status_ref: str | None) -> td.Receipt | None:
        """The plain receipt query (tool_dispatcher's status query reads this)."""
        if status_ref is None:
            return None
        row = self._store.query_one(SQL_READ_RECEIPT, {"realm": self._realm, "status_ref": status_ref})
        return _receipt(row)

    def fenced(self, epoch: int, request_ref: str, status_ref: str) -> FencedDownstream:
        return FencedDownstream(self, epoch, request_ref, status_ref)

    def commit(self, *, epoch: int, request_ref: str, status_ref: str, order_ref: str, reason: str,
               effect_revision: str, producer_revision: str) -> tuple[td.Receipt, bool]:
        """Commit the effect once per key under a fence; (receipt, whether this call created it)."""
        receipt = td.refund_draft_receipt(request_ref=request_ref, status_ref=status_ref, order_ref=order_ref,
                                          reason=reason, effect_revision=effect_revision,
                                          producer_revision=producer_revision)
        with self._store.transaction() as tx:
            self._raise_fence(tx, status_ref, epoch)
            created = tx.execute(SQL_WRITE_RECEIPT, {"realm": self._realm, **{
                column: getattr(receipt, column) for column in RECEIPT_COLUMNS}, "epoch": epoch,
                "now": self._store.now_ms()}).rowcount == 1
            if not created:  # the key's one effect exists: answer with its receipt
                receipt = _receipt(tx.execute(SQL_READ_RECEIPT, {"realm": self._realm,
                                                                 "status_ref": status_ref}).fetchone())
        self._checkpoint("after_downstream_commit")
        return receipt, created

    def fenced_receipt(self, status_ref: str, epoch: int) -> td.Receipt | None:
        """The receipt query recovery uses: it raises the fence first, so no older holder commits after."""
        with self._store.transaction() as tx:
            self._raise_fence(tx, status_ref, epoch)
            row = tx.execute(SQL_READ_RECEIPT, {"realm": self._realm, "status_ref": status_ref}).fetchone()
        return _receipt(row)

    def _raise_fence(self, tx: Tx, status_ref: str, epoch: int) -> None:
        params = {"realm": self._realm, "status_ref": status_ref, "epoch": epoch}
        if tx.execute(SQL_RAISE_FENCE, params).rowcount != 1:
            raise DurableError("DOWNSTREAM_FENCED")


class FencedDownstream:
    """What a handler sees for one lease: the downstream, with this lease's epoch on every commit,
    committing only the lease's own request (its derived references), as the core's
    CountingDownstream does: a lease makes at most one effect, the one its package reports."""

    def __init__(self, downstream: DurableDownstream, epoch: int, request_ref: str, status_ref: str) -> None:
        self._downstream = downstream
        self._epoch = epoch
        self._own = (request_ref, status_ref)
        self.created = 0  # effects this lease created: the package's execution.effects

    @property
    def effect_count(self) -> int:
        return self._downstream.effect_count

    def receipt(self, status_ref: str | None) -> td.Receipt | None:
        return self._downstream.receipt(status_ref)

    def commit_refund_draft(self, *, request_ref: str, status_ref: str, order_ref: str, reason: str,
                            effect_revision: str, producer_revision: str) -> td.Receipt:
        if not (type(request_ref) is str and type(status_ref) is str and (request_ref, status_ref) == self._own):
            raise td.BoundaryError("OUTPUT_BINDING_MISMATCH")  # another request's effect, under this lease
        receipt, created = self._downstream.commit(
            epoch=self._epoch, request_ref=request_ref, status_ref=status_ref, order_ref=order_ref,
            reason=reason, effect_revision=effect_revision, producer_revision=producer_revision)
        self.created += created
        return receipt


# ============================================================================================
# 8. The durable dispatcher
# ============================================================================================


class LedgerOperations:
    """tool_dispatcher's OperationStore on a durable store (SQLite or PostgreSQL): the ledger, the
    call bindings, the downstream.

    tool_dispatcher's Dispatcher runs its one write path over it: claim the key under a lease,
    start it, run the handler against a downstream fenced by the lease epoch, settle the row (and
    its event) with a commit fenced by the same epoch. A row under a live lease answers
    OPERATION_IN_PROGRESS; an expired one is first moved on (a dead claim is released, a dead
    in-progress write becomes unknown), so no caller waits on a dead process.

    Three commits per fresh write: claim() leaves its transaction open and start() (or release())
    commits it, so the claim, the approval it consumes and its start are one commit (claim() writes
    the row already started, so that commit writes it once; release() moves it to released); with
    ``defer_bindings`` the call binding of a write joins that commit too (the caller then calls
    finish() before it answers: DurableDispatcher does). Then the downstream's own commit, then
    the completion with its outbox event.
    """

    def __init__(self, store: DurableStore, *, realm: str = DEFAULT_REALM, lease_ms: int = LEASE_MS,
                 retention_ms: int = RETENTION_MS, owner: str | None = None,
                 checkpoint: Checkpoint | None = None, defer_bindings: bool = False,
                 seal_keys: td.SealKeys | None = None, registry: Mapping[str, td.ToolSpec] = td.REGISTRY) -> None:
        self.store = _checked_store(store)
        self.realm = _named(realm)
        self.lease_ms = _setting("lease_ms", lease_ms)
        self._owner = _named(owner, optional=True) or new_owner()
        self._checkpoint = checkpoint or _no_checkpoint
        self._defer_bindings = defer_bindings
        self._pending: tuple[tuple[str, str, str], tuple[Any, ...]] | None = None  # a binding not yet written
        self._open: Lease | None = None  # a claim whose transaction start() or release() commits
        seal_keys = _seal_keys_setting(seal_keys)
        self._seal_keys = seal_keys  # seal what is chained; require and check seals on what is read back
        self._registry = registry  # the contract set the stored packages were made with
        self.ledger = Ledger(store, retention_ms=retention_ms, checkpoint=self._checkpoint, seal_keys=seal_keys,
                             registry=registry)
        self.downstream = DurableDownstream(store, realm, checkpoint=self._checkpoint)
        self._calls = CallBindings(store, realm)

    def key(self, record_key: td.RecordKey) -> OperationKey | None:
        tenant, subject, tool, idempotency_key = record_key
        return None if idempotency_key is None else OperationKey(self.realm, tenant, subject, tool, idempotency_key)

    # -- the write path ----------------------------------------------------------------------

    def answer(self, call: td.AdmittedCall) -> td.OperationRecord | None:
        key = self.key(call.record_key)
        row = None if key is None else self.ledger.read(key)
        if row is None or claim_event(row, call, self.store.now_ms()) is not None:
            if row is not None and row.state == "released":
                self._verified_release(row)  # free only once it verifies as released
            return None
        return self._answer(call, row)

    def approval_used(self, approval_ref: str) -> bool:
        return self.ledger.approval_used(self.realm, approval_ref)

    def claim(self, call: td.AdmittedCall, record: td.OperationRecord,
              approval_ref: str) -> td.Claim | td.OperationRecord:
        key = self.key(call.record_key)
        if key is None:
            raise td.BoundaryError("IDEMPOTENCY_KEY_REQUIRED")
        intent = Intent.of(call, record)  # encoded before the write lock is taken
        tx = self.store.begin()
        with self._rolled_back_on_error():
            self._write_pending(tx)
            try:
                lease = self.ledger.claim(tx, key, intent, owner=self._owner, lease_ms=self.lease_ms,
                                          approval_ref=approval_ref, started=True)
            except DurableError as error:
                if error.code == "STORE_TAMPERED":  # a refused release writes nothing, not even the binding
                    self._pending = None
                raise
            if isinstance(lease, LedgerRow):  # another process claimed it after our read
                self.store.commit()
                self._pending = None
                return self._answer(call, lease)
        self._open = lease
        return td.Claim(call.record_key, replace(record, state=lease.state), lease)

    def _rolled_back_on_error(self) -> _RolledBack:
        """Inside the transaction this store left open: any error rolls it back first, and a
        driver's error leaves as this layer's store error."""
        return _RolledBack(self.store)

    def _write_pending(self, tx: Tx) -> None:
        # The deferred call binding, in the claim's transaction: a conflicting binding that another
        # process wrote since our read is CALL_CONFLICT, and the claim rolls back with it.
        if self._pending is None:
            return
        identity, fingerprint = self._pending
        if self._calls.bind(identity, fingerprint, tx) != fingerprint:
            self._pending = None
            raise td.BoundaryError("CALL_CONFLICT")

    def release(self, claim: td.Claim) -> None:
        with _during("release"):
            self._finish_claim(claim, "release")

    def start(self, claim: td.Claim) -> td.Claim:
        with _during("start"):
            lease = self._finish_claim(claim, "start")
        self._checkpoint("after_claim")
        return td.Claim(claim.key, replace(claim.record, state=lease.state), lease)

    def _finish_claim(self, claim: td.Claim, event: str) -> Lease:
        # The claim's own transaction when it is still open (one commit); else a transaction of its own.
        lease = claim.token
        if self._open is None or self._open is not lease:
            return self.ledger.advance(lease, event, lease_ms=self.lease_ms)
        self._open = None
        started = transition(lease.state, "start")  # claim() wrote the row as its start leaves it
        with self._rolled_back_on_error():
            if event == "start":
                lease = Lease(lease.key, started, lease.epoch, lease.owner, lease.request_ref)
            else:
                lease = self.ledger.advance(lease, event, lease_ms=self.lease_ms, tx=self.store.current(),
                                            stored=started)
            self.store.commit()
        self._pending = None
        return lease

    def downstream_for(self, claim: td.Claim) -> FencedDownstream:
        refs = claim.record.refs
        return self.downstream.fenced(claim.token.epoch, str(refs["request_ref"]), str(refs["status_ref"]))

    def settle(self, claim: td.Claim, event: str, record: td.OperationRecord, package: dict[str, Any]) -> None:
        with _during("settle"):
            self.ledger.advance(claim.token, event, data=record.data, package=package,
                                receipt_ref=record.refs["receipt_ref"])
        if event == "committed":
            self._checkpoint("after_ledger_commit")

    def finish(self) -> None:
        """End of one dispatch: roll back a claim that was never started or released, and write
        a deferred call binding that no claim wrote (a refusal, a replay). Before any answer leaves."""
        if self._open is not None:
            self._open = None
            self.store.rollback()
        if self._pending is not None:
            identity, fingerprint = self._pending
            self._calls.bind(identity, fingerprint)
            self._pending = None

    def _answer(self, call: td.AdmittedCall, row: LedgerRow | None) -> td.OperationRecord:
        # A row we may not claim: a settled one answers through the repeat rule (replay,
        # OUTCOME_UNKNOWN or conflict); a live lease answers "in progress"; an expired in-progress
        # write may have reached the downstream, so it becomes unknown, never runs again.
        for _attempt in range(MAX_ANSWER_ATTEMPTS):
            if row is None:
                break
            if row.state in td.MODEL_STATE:
                return self._verified(row)
            if not td.same_intent(row.record(), call):
                raise td.BoundaryError("IDEMPOTENCY_CONFLICT")
            if row.state != "in_progress" or row.lease_live(self.store.now_ms()):
                break
            self.ledger.expire(row, "take_over")
            row = self.ledger.read(row.key)
        raise td.BoundaryError("OPERATION_IN_PROGRESS")

    def _verified(self, row: LedgerRow) -> td.OperationRecord:
        # A settled row answers only once its stored package vouches for it; a refused answer
        # writes nothing, not even the call binding this dispatch deferred.
        try:
            return verified_record(row, self._seal_keys, self.downstream.receipt, registry=self._registry)
        except DurableError:
            self._pending = None
            raise

    def _verified_release(self, row: LedgerRow) -> None:
        # A released row answers "free" (a claim may take it) only once it verifies as one.
        try:
            verified_release(row, self._seal_keys, self.store.query_one, registry=self._registry)
        except DurableError:
            self._pending = None
            raise

    # -- the status query ----------------------------------------------------------------------

    def find(self, record_key: td.RecordKey) -> td.OperationRecord | None:
        key = self.key(record_key)
        row = None if key is None else self.ledger.read(key)
        for _attempt in range(MAX_ANSWER_ATTEMPTS):
            if row is not None and row.state == "released":
                self._verified_release(row)  # "nothing to query" only from a row that verifies as released
            if row is None or row.state in td.FREE_STATES:
                return None
            if row.state in td.MODEL_STATE:
                return self._verified(row)
            if row.lease_live(self.store.now_ms()):
                raise td.BoundaryError("OPERATION_IN_PROGRESS")
            self.ledger.expire(row, "release" if row.state == "claimed" else "take_over")
            row = self.ledger.read(row.key)
        raise td.BoundaryError("OPERATION_IN_PROGRESS")

    def reconcile(self, record_key: td.RecordKey, record: td.OperationRecord, package: dict[str, Any]) -> None:
        key = self.key(record_key)
        if key is None or record.state != "reconciled":
            raise td.BoundaryError("LIFECYCLE_VIOLATION")
        self.ledger.reconcile(key, record.refs["receipt_ref"], record.data, package)

    def confirm_absent(self, record_key: td.RecordKey, record: td.OperationRecord) -> bool:
        # A plain "no receipt" is not proof here: a holder whose lease was taken over may still be
        # about to commit. The row's epoch is raised and the downstream fenced at it first, as
        # recovery does; only then is "no receipt" final.
        key = self.key(record_key)
        row = None if key is None else self.ledger.read(key)
        if row is None or row.state != "unknown":
            return False
        epoch = self.ledger.fence_unknown(row)
        if epoch is None:
            return False
        try:
            receipt = self.downstream.fenced_receipt(row.status_ref, epoch)
        except DurableError as error:
            if error.code != "DOWNSTREAM_FENCED":
                raise
            return False
        if receipt is not None:
            return False
        return self.ledger.resolve(row.key, epoch, "receipt_absent")

    def bind_call(self, identity: tuple[str, str, str], fingerprint: tuple[Any, ...]) -> tuple[Any, ...]:
        # A write's binding (purpose dispatch, with a key) may wait for its claim's commit; any
        # other binding, or one already on disk, is answered now.
        self.finish()
        if not (self._defer_bindings and fingerprint[0] == "dispatch" and fingerprint[3] is not None):
            return self._calls.bind(identity, fingerprint)
        stored = self._calls.read(identity)
        if stored is not None:
            return stored
        self._pending = (identity, fingerprint)
        return fingerprint


SqliteOperations: Final = LedgerOperations  # the name it had when SQLite was the only store


class DurableDispatcher(td.Dispatcher):
    """tool_dispatcher's Dispatcher over LedgerOperations: nothing of the boundary is overridden.

    Besides result packages it raises to the trusted host: OPERATION_IN_PROGRESS (another
    holder's lease is live: retry later, nothing ran), LEASE_LOST (this holder was taken over;
    dispatch again), STORE_BUSY (retryable).
    """

    def __init__(self, orders: Sequence[td.Order] = (), *, store: Any, realm: str = DEFAULT_REALM,
                 approvers: frozenset[str] | Sequence[str] = (), lease_ms: int = LEASE_MS,
                 retention_ms: int = RETENTION_MS, owner: str | None = None, checkpoint: Checkpoint | None = None,
                 handlers: Mapping[str, td.Handler] | None = None, hooks: Mapping[str, td.ToolHooks] | None = None,
                 registry: Mapping[str, td.ToolSpec] = td.REGISTRY, seal_keys: td.SealKeys | None = None) -> None:
        operations = LedgerOperations(store, realm=realm, lease_ms=lease_ms, retention_ms=retention_ms,
                                      owner=owner, checkpoint=checkpoint, defer_bindings=True, seal_keys=seal_keys,
                                      registry=registry)
        super().__init__(orders, approvers=approvers, handlers=handlers, hooks=hooks, registry=registry,
                         operations=operations, seal_keys=seal_keys)
        self.operations: LedgerOperations = operations

    # -- read-only views for the trusted host ----------------------------------------------

    def ledger_row(self, principal: td.Principal, tool: str, idempotency_key: str) -> LedgerRow | None:
        """The row of one operation, or None. The key is checked as a dispatch checks it, before any
        read: PRINCIPAL_INVALID, or CONTEXT_INVALID for a tool name or key no dispatch could store."""
        td.check_principal(principal)
        if type(tool) is not str or td.TOOL_NAME.fullmatch(tool) is None or not td.is_identifier(idempotency_key):
            raise td.BoundaryError("CONTEXT_INVALID")
        return self.operations.ledger.read(
            OperationKey(self.operations.realm, principal.tenant, principal.subject, tool, idempotency_key))

    def operation_state(self, principal: td.Principal, tool: str, idempotency_key: str) -> str:
        row = self.ledger_row(principal, tool, idempotency_key)
        return "none" if row is None else row.state

    def stored_package(self, principal: td.Principal, tool: str, idempotency_key: str) -> bytes | None:
        """The first answer stored for the operation, as canonical JSON bytes (None if none was given)."""
        row = self.ledger_row(principal, tool, idempotency_key)
        return None if row is None or row.package is None else row.package.encode("utf-8")


# ============================================================================================
# 9. Outbox relay and consumer inbox
# ============================================================================================
# The relay publishes at least once: it may crash after publishing and before marking the event
# sent, and then publishes it again; two relays at once may too, one picking an event the other
# has published and not yet marked (the broker stands for an outside system, which the relay
# cannot ask what it holds). The consumer acts once per event id: its inbox entry, its action and
# its read position are one transaction.
#
# The consumer reads a realm by broker sequence, from its position on, so a realm's messages must
# become visible in sequence order: a message committed after one with a higher sequence would
# fall behind a position already moved past it, and never be read. A sequence value is drawn at
# INSERT and seen at COMMIT, so each publish takes the store's publish_lock for its realm first
# (on PostgreSQL a transaction-scoped advisory lock, held until its commit): the next publish of
# the realm draws its value only after this one committed. Realms publish side by side.


def relay(store: DurableStore, *, realm: str | None = None, checkpoint: Checkpoint = _no_checkpoint,
          limit: int = RELAY_BATCH) -> int:
    """Publish unsent outbox events to the broker, then mark each sent; returns how many were published.

    Each event: pick it (locked, so a concurrent relay skips it) and publish it in the broker's
    commit, then mark it sent in a second one. A crash between the two publishes it again later.
    """
    _pass_settings(store, realm, "relay_limit", limit)
    published, after = 0, 0
    while published < limit:
        with store.transaction() as tx:  # the broker's own commit
            event = tx.execute(SQL_NEXT_UNSENT + store.skip_locked, {"realm": realm, "after": after}).fetchone()
            if event is None:
                break
            after = _checked_int(event[0])
            params = {"realm": event[1], "event_id": event[2], "payload": event[3], "now": store.now_ms()}
            if store.publish_lock:
                tx.execute(store.publish_lock, {"realm": event[1]})
            tx.execute(SQL_PUBLISH, params)
        checkpoint("after_publish")
        with store.transaction() as tx:
            tx.execute(SQL_MARK_SENT, params)
        published += 1
    return published


def consume(store: DurableStore, *, realm: str | None = None, consumer: str = DEFAULT_CONSUMER,
            checkpoint: Checkpoint = _no_checkpoint, limit: int = CONSUME_BATCH) -> int:
    """Read the broker from this consumer's position; act once per event id. Returns actions taken."""
    _pass_settings(store, realm, "consume_limit", limit)
    _named(consumer)
    acted = 0
    for (message_realm,) in store.query(SQL_BROKER_REALMS, {"realm": realm}):
        for _message in range(limit):
            step = _consume_one(store, message_realm, consumer, checkpoint)
            if step is None:
                break
            acted += step
    return acted


def _consume_one(store: DurableStore, realm: str, consumer: str, checkpoint: Checkpoint) -> bool | None:
    with store.transaction() as tx:
        params: dict[str, Any] = {"realm": realm, "consumer": consumer, "now": store.now_ms()}
        position = tx.execute(SQL_CONSUMER_POSITION + store.row_lock, params).fetchone()
        params["position"] = 0 if position is None else _checked_int(position[0])
        message = tx.execute(SQL_NEXT_MESSAGE, params).fetchone()
        if message is None:
            return None
        params.update(position=message[0], event_id=message[1])
        first = tx.execute(SQL_INBOX_INSERT, params).rowcount == 1
        if first:
            tx.execute(SQL_CONSUMER_EFFECT, params)
        checkpoint("inside_consumer")
        tx.execute(SQL_CONSUMER_ADVANCE, params)
    return first


# ============================================================================================
# 10. Recovery
# ============================================================================================
# On restart (or any time): every unsettled row is driven somewhere definite. A dead claim is
# released (it never reached the downstream). A dead in-progress write, and any unknown row,
# gets a new epoch and a fenced receipt query: a matching receipt reconciles it, no receipt
# releases it (the fence proves no older holder can still commit), a contradicting receipt
# escalates it, an unreachable downstream keeps it unknown with a hint. A live lease is reported,
# never touched. Nothing is executed again.


# The tools whose writes commit through this layer's own downstream (the demo's refunds): the
# ones recovery may settle from its receipts. A host whose own handlers commit there names its own.
DEMO_RECEIPT_TOOLS: Final = frozenset(td.HANDLERS)
_NAME_COLLECTIONS: Final = (frozenset, set, tuple, list)


@dataclass(frozen=True, slots=True)
class RecoveryOutcome:
    realm: str
    tool: str
    idempotency_key: str
    before: str
    after: str  # a stored state, or "live" for a lease another process still holds
    hint: str | None


def recover(store: DurableStore, *, realm: str | None = None, registry: Mapping[str, td.ToolSpec] = td.REGISTRY,
            fault: str = "none", retention_ms: int = RETENTION_MS, limit: int = MAX_RECOVERY_ROWS,
            receipt_tools: Collection[str] = DEMO_RECEIPT_TOOLS) -> tuple[RecoveryOutcome, ...]:
    """Drive every unsettled row (claimed, in_progress, unknown, escalated) to a definite answer.

    Only a tool of ``receipt_tools`` commits through this store's downstream, so only its rows
    are settled by that downstream's receipts. Any other tool's write is run by a host's own
    execute hook, whose downstream this store cannot ask: its dead claim is released (it never
    ran), its dead in-progress write becomes unknown, and an unknown one stays unknown for the
    tool's status hook (query_operation_status) or the host to settle. Never "not executed"
    from a silence nobody was asked to break."""
    if (type(fault) is not str or fault not in RECOVERY_FAULTS or type(receipt_tools) not in _NAME_COLLECTIONS
            or not all(type(name) is str for name in receipt_tools)):
        raise DurableError("SETTING_INVALID")
    _pass_settings(store, realm, "recovery_limit", limit)
    ledger = Ledger(store, retention_ms=retention_ms)
    rows = [LedgerRow.of(row) for row in store.query(SQL_UNSETTLED_ROWS, {"realm": realm, "limit": limit})]
    outcomes = []
    for row in rows:
        after = _recover_row(ledger, DurableDownstream(store, row.realm), row, registry,
                             fault if row.tool in receipt_tools else "no_receipts")
        outcomes.append(RecoveryOutcome(row.realm, row.tool, row.idempotency_key, row.state, after,
                                        RECOVERY_HINTS.get(after)))
    return tuple(outcomes)


def _recover_row(ledger: Ledger, downstream: DurableDownstream, row: LedgerRow,
                 registry: Mapping[str, td.ToolSpec], fault: str) -> str:
    epoch: int | None
    if row.state in LEASED_STATES:
        if row.lease_live(ledger.now_ms()):
            return "live"
        event = "release" if row.state == "claimed" else "take_over"
        if not ledger.expire(row, event) or event == "release":
            return _state_of(ledger, row.key)
        epoch = row.lease_epoch + 1  # the takeover's epoch belongs to this recoverer
    elif row.state == "unknown" and fault == "none":
        epoch = ledger.fence_unknown(row)
    else:
        return row.state  # escalated waits for an operator; an unreachable or foreign downstream keeps unknown
    if epoch is None or fault != "none":
        return _state_of(ledger, row.key)
    try:
        receipt = downstream.fenced_receipt(row.status_ref, epoch)
    except DurableError as error:
        if error.code != "DOWNSTREAM_FENCED":
            raise
        return _state_of(ledger, row.key)  # a newer recoverer fenced it first: it owns the answer
    if receipt is None:
        ledger.resolve(row.key, epoch, "receipt_absent")
    elif not receipt_matches(row, receipt, registry):
        ledger.resolve(row.key, epoch, "receipt_mismatch")
    else:
        ledger.reconcile(row.key, receipt.receipt_ref, td.receipt_output(receipt))
    return _state_of(ledger, row.key)


def _state_of(ledger: Ledger, key: OperationKey) -> str:
    row = ledger.read(key)
    return "none" if row is None else row.state


def receipt_matches(row: LedgerRow, receipt: td.Receipt, registry: Mapping[str, td.ToolSpec]) -> bool:
    """The receipt binds this record under today's registry (what tool_dispatcher's query checks)."""
    spec = registry.get(row.tool)
    record = row.record()
    if spec is None or record.contract != spec.contract_view():
        return False
    try:
        td.check_output_fields(spec, td.receipt_output(receipt))
    except td.BoundaryError:
        return False
    return td.receipt_binds(record, receipt, spec)


# ============================================================================================
# 11. Pruning
# ============================================================================================
# Completed records (succeeded, reconciled) expire RETENTION_MS after they settled; their event
# must have been sent. Unknown, escalated, leased and released rows are never pruned (the schema
# forbids an expiry on them). A retry after the window runs again; the downstream key still
# keeps its effect to one, because the key derives from the operation, not from the ledger row.


@dataclass(frozen=True, slots=True)
class PruneReport:
    operations: int
    events: int
    calls: int


def prune(store: DurableStore, *, retention_ms: int = RETENTION_MS) -> PruneReport:
    _checked_store(store)
    _setting("retention_ms", retention_ms)
    now = store.now_ms()
    with store.transaction() as tx:
        tx.execute(SQL_KEEP_EPOCHS, {"now": now})
        operations = tx.execute(SQL_PRUNE_OPERATIONS, {"now": now}).rowcount
        events = tx.execute(SQL_PRUNE_EVENTS, {"before": now - retention_ms}).rowcount
        calls = tx.execute(SQL_PRUNE_CALLS, {"before": now - retention_ms}).rowcount
    return PruneReport(operations, events, calls)


# ============================================================================================
# 12. The audit chain, verified whole
# ============================================================================================
# What an auditor runs against a whole database: each realm's chain through the core's verifier
# (as an open chain: a ledger never closes it), each chain row's columns against its entry, the
# head row against the last entry, and every operation row: its stored package must be its
# operation's latest entry in its realm's chain (every move that stores a package appends it in
# the same transaction, so an earlier one is a row rolled back), a settled row must verify as a
# replay would (verified_record), and a released row as a new claim would (verified_release).


@dataclass(frozen=True, slots=True)
class ChainFault:
    realm: str
    index: int | None  # the first bad entry's position in its realm's chain (None: a whole-chain fault)
    error: td.CatalogError
    request_ref: str | None = None  # the operation row that failed, by its derived reference

    def view(self) -> dict[str, Any]:
        found = {"realm": self.realm, "index": self.index, **self.error.to_json()}
        return found if self.request_ref is None else {**found, "request_ref": self.request_ref}


@dataclass(frozen=True, slots=True)
class ChainReport:
    heads: Mapping[str, str]  # realm -> its chain's head digest (the genesis digest for an empty chain)
    entries: int
    rows: int
    sealed: bool  # seal keys were given, and every entry and package was sealed and checked
    fault: ChainFault | None = None

    @property
    def heads_sha256(self) -> str:
        """One digest over every realm's head: sha256 of the canonical JSON object realm -> head."""
        return td.canonical_sha256(dict(self.heads))


def verify_chain(store: Any, *, seal_keys: td.SealKeys | None = None,
                 registry: Mapping[str, td.ToolSpec] = td.REGISTRY) -> ChainReport:
    """Verify every realm's chain and every operation row of a store; the first fault, if any.

    One read-only snapshot: writers may go on meanwhile, and none of their commits is half seen
    (a row whose entry came after the chain was read would look like a package in no entry)."""
    _checked_store(store)
    seal_keys = _seal_keys_setting(seal_keys)
    with store.transaction(store.snapshot):
        return _verify_chain(store, seal_keys, registry)


def _verify_chain(store: Any, seal_keys: td.SealKeys | None, registry: Mapping[str, td.ToolSpec]) -> ChainReport:
    heads: dict[str, str] = {}
    entries = rows = 0
    sealed = seal_keys is not None
    for (realm,) in store.query(SQL_CHAIN_REALMS):
        realm = _checked_text(realm)
        report, packages, superseded, fault = _verify_realm_chain(store, realm, seal_keys)
        if fault is None:
            fault, checked = _verify_realm_rows(store, realm, packages, superseded, seal_keys, registry)
            rows += checked
        if fault is not None:
            return ChainReport(MappingProxyType(heads), entries, rows, False, fault)
        heads[realm] = report.head_sha256
        entries += report.entries
        sealed = sealed and report.sealed
    return ChainReport(MappingProxyType(heads), entries, rows, sealed)


def _verify_realm_chain(store: Any, realm: str, seal_keys: td.SealKeys | None
                        ) -> tuple[td.AuditReport, dict[str, int], frozenset[int], ChainFault | None]:
    """The realm's chain verified; the entry that holds each package text (the latest, for a text
    chained twice), and the entries a later entry of the same operation superseded."""
    found = store.query(SQL_CHAIN_ENTRIES, {"realm": realm})
    lines = [_checked_text(row[3]).encode("utf-8") for row in found]
    try:
        report = td.verify_audit_log(b"".join(line + b"\n" for line in lines), seal_keys=seal_keys,
                                     require_seal=seal_keys is not None, closed=False)
    except td.BoundaryError as error:
        index = int(error.at[len("entries["):-1]) if error.at else None
        return td.AuditReport(0, td.GENESIS_SHA256, False), {}, frozenset(), ChainFault(realm, index, error)
    packages: dict[str, int] = {}  # a stored package's canonical text -> the entry that holds it
    latest: dict[str | None, int] = {}  # an operation (its request_ref) -> its latest entry
    for position, (row, line) in enumerate(zip(found, lines)):
        entry = td.decode_strict_json(line, max_bytes=td.MAX_AUDIT_LINE_BYTES)  # verified above: it decodes
        if tuple(row[:3]) != (position, entry["previous_sha256"], entry["entry_sha256"]):
            return report, packages, frozenset(), ChainFault(realm, position, td.BoundaryError("AUDIT_ENTRY_EDITED"))
        packages[td.canonical_json(entry["package"]).decode("utf-8")] = position
        latest[_operation_of(entry["package"])] = position
    superseded = frozenset(range(len(found))) - frozenset(latest.values())
    head = store.query_one(SQL_CHAIN_HEAD, {"realm": realm})
    counted, last = (0, td.GENESIS_SHA256) if head is None else (_checked_int(head[0]), _checked_text(head[1]))
    if (counted, last) != (report.entries, report.head_sha256):
        # The head row names how long the chain was: a shorter chain lost its end, a longer one
        # gained entries nobody appended; the same length with another digest lost its last entry.
        code, index = (("AUDIT_TRUNCATED", report.entries) if counted > report.entries else
                       ("AUDIT_ENTRY_INSERTED", counted) if counted < report.entries else
                       ("AUDIT_ENTRY_EDITED", report.entries - 1))
        return report, packages, superseded, ChainFault(realm, index, td.BoundaryError(code))
    return report, packages, superseded, None


def _operation_of(package: dict[str, Any]) -> str | None:
    # The operation a chained package answers: its derived request reference (the entry verified).
    audit = package.get("protected_audit")
    downstream = audit.get("downstream") if type(audit) is dict else None
    request_ref = downstream.get("request_ref") if type(downstream) is dict else None
    return request_ref if type(request_ref) is str else None


def _verify_realm_rows(store: Any, realm: str, packages: Mapping[str, int], superseded: frozenset[int],
                       seal_keys: td.SealKeys | None, registry: Mapping[str, td.ToolSpec]
                       ) -> tuple[ChainFault | None, int]:
    receipts = DurableDownstream(store, realm).receipt
    checked = 0
    for values in store.query(SQL_REALM_ROWS, {"realm": realm}):
        row = LedgerRow.of(values)
        index = None if row.package is None else packages.get(row.package)
        try:
            if row.package is not None and index is None:
                raise DurableError("STORE_TAMPERED")  # a package no chain entry holds
            if index in superseded:
                raise DurableError("STORE_TAMPERED")  # a later entry of its operation followed it: rolled back
            if row.state in td.MODEL_STATE:
                verified_record(row, seal_keys, receipts, registry=registry)
            elif row.state == "released":
                verified_release(row, seal_keys, store.query_one, registry=registry)
        except DurableError as error:
            return ChainFault(realm, index, error, row.request_ref), checked
        checked += 1
    return None, checked


# ============================================================================================
# 13. Fixture runner
# ============================================================================================
# The shipped fixture, each case in its own realm (a fresh world, as each case starts a new
# dispatcher in tool_dispatcher), compared field by field with tool_dispatcher's run_step.


def run_fixture(fixture: td.Fixture, store: DurableStore, *, case_id: str | None = None,
                seal_keys: td.SealKeys | None = None) -> dict[str, Any]:
    """tool_dispatcher's fixture runner, with one durable dispatcher per case (its realm)."""
    summary, _reports = td.run_fixture(
        fixture, case_id=case_id, seal_keys=seal_keys,
        dispatcher_for=lambda case, world: DurableDispatcher.from_world(world, store=store, realm=case.id,
                                                                        seal_keys=seal_keys))
    return summary


# ============================================================================================
# 14. CLI
# ============================================================================================
# Exit 0: done (run: every expectation held; recover: nothing needs an operator; verify-chain: every
# chain and every stored package holds). Exit 1: run: an expectation failed; recover: a record is
# escalated or the integrity check is not ok; verify-chain: the first bad entry or row. Exit 2: the
# command line, the fixture or the database was rejected: one JSON object with a stable code,
# never a traceback, never the path.


SYNCHRONOUS_HELP: Final = ("SQLite's fsync mode: FULL (the default: a commit survives a power loss) or NORMAL "
                            "(a commit survives a crash of the process; the last ones may roll back on power loss)")


def _durable_arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = td.CliParser(prog="durable_dispatcher", description="The durable layer: run the fixture, recover a database.")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run a tool-cases-v2 fixture against a database file this command creates")
    run.add_argument("--fixture", required=True, help="path of the tool-cases-v2 JSON fixture")
    target = run.add_mutually_exclusive_group(required=True)
    target.add_argument("--db", help="path of the SQLite file to create (must not exist)")
    target.add_argument("--store",
                        help="a SQLite path or a postgresql:// DSN (its database must hold no schema)")
    run.add_argument("--case", help="run only the case with this id")
    run.add_argument("--synchronous", choices=sorted(SYNCHRONOUS_MODES), default="FULL",
                     help=SYNCHRONOUS_HELP)
    rec = commands.add_parser("recover", help="recover leases, unknown operations and the outbox of a database")
    target = rec.add_mutually_exclusive_group(required=True)
    target.add_argument("--db", help="path of an existing database of this layer")
    target.add_argument("--store", help="a SQLite path or a postgresql:// DSN of an existing store")
    rec.add_argument("--synchronous", choices=sorted(SYNCHRONOUS_MODES), default="FULL",
                     help=SYNCHRONOUS_HELP)
    chain = commands.add_parser("verify-chain", help="verify every realm's audit chain and every stored package")
    target = chain.add_mutually_exclusive_group(required=True)
    target.add_argument("--db", help="path of an existing database of this layer")
    target.add_argument("--store", help="a SQLite path or a postgresql:// DSN of an existing store")
    for command in (run, chain):
        command.add_argument("--seal-key", metavar="FILE",
                             help=f"a {td.SEAL_KEYS_FORMAT} file: seal (run), or require and check seals "
                                  f"(verify-chain) (default: the file ${td.SEAL_KEYS_ENVIRONMENT} names)")
    return parser.parse_args(argv)


def _seal_keys(arguments: argparse.Namespace) -> td.SealKeys | None:
    # An empty path ("--seal-key $UNSET") is a path, refused where it is read: never "no flag", unsealed.
    return td.seal_keys_from_environment() if arguments.seal_key is None else td.load_seal_keys(arguments.seal_key)


def _run_command(arguments: argparse.Namespace) -> int:
    # The fixture is read and the case found before the file is created: a rejected input leaves nothing.
    fixture = td.load_fixture(arguments.fixture)
    if arguments.case is not None and not any(case.id == arguments.case for case in fixture.cases):
        raise td.BoundaryError("CLI_UNKNOWN_CASE")
    seal_keys = _seal_keys(arguments)
    with open_store(arguments.store or arguments.db, exclusive=True, synchronous=arguments.synchronous) as store:
        summary = run_fixture(fixture, store, case_id=arguments.case, seal_keys=seal_keys)
        summary["store"] = store.facts()
    td.emit_json(summary)
    return 0 if summary["passed"] else 1


def _recover_command(arguments: argparse.Namespace) -> int:
    with open_store(arguments.store or arguments.db, create=False, synchronous=arguments.synchronous) as store:
        outcomes = recover(store)
        report = {
            "recovered": {after: sum(1 for outcome in outcomes if outcome.after == after)
                          for after in sorted({outcome.after for outcome in outcomes})},
            "relayed": relay(store),
            "consumed": consume(store),
            "pruned": _prune_view(prune(store)),
            "store": store.facts(),
        }
    td.emit_json(report)
    healthy = report["store"]["integrity"] == "ok" and "escalated" not in report["store"]["operations"]
    return 0 if healthy else 1


def _verify_chain_command(arguments: argparse.Namespace) -> int:
    seal_keys = _seal_keys(arguments)
    with open_store(arguments.store or arguments.db, create=False) as store:
        report = verify_chain(store, seal_keys=seal_keys)
    if report.fault is not None:
        td.emit_json({"passed": False, "failure": report.fault.view()})
        return 1
    td.emit_json({"passed": True, "realms": len(report.heads), "entries": report.entries, "rows": report.rows,
                  "sealed": report.sealed, "heads_sha256": report.heads_sha256})
    return 0


def _prune_view(report: PruneReport) -> dict[str, int]:
    return {field: getattr(report, field) for field in PruneReport.__slots__}


_COMMANDS: Final[Mapping[str, Callable[[argparse.Namespace], int]]] = MappingProxyType({
    "run": _run_command,
    "recover": _recover_command,
    "verify-chain": _verify_chain_command,
})


def main(argv: Sequence[str] | None = None) -> int:
    return td.run_cli(lambda: _run_main(argv))


def _run_main(argv: Sequence[str] | None) -> int:
    arguments = _durable_arguments(argv)
    return _COMMANDS[arguments.command](arguments)


if __name__ == "__main__":
    sys.exit(main())
