"""Benchmark: durable writes per second, synchronous=FULL and NORMAL, against a bare SQLite floor.

For each synchronous mode it times, in the same run and the same directory:
- the floor: a bare loop of BEGIN IMMEDIATE / INSERT / COMMIT on a WAL database;
- durable writes: fresh create_refund_draft dispatches through DurableDispatcher, each one three
  commits (the call binding, claim and start together; the downstream's own commit; the
  completion with its outbox event), plus the boundary's own checks, digests and packaging.
It prints one JSON object; the ratio is durable writes/s divided by bare commits/s. With
--pg DSN it also measures PostgreSQL the same way, against its own floor (a bare BEGIN / INSERT /
COMMIT loop on the same server), in a schema it creates and drops.

    python -B durable/bench_durable.py --quick        # CI: proves it runs (a few writes)
    python -B durable/bench_durable.py --writes 500   # a measurement

Numbers depend on the disk: fsync is what FULL pays for, and a directory on tmpfs makes it free.
Pass --dir to measure on the disk you care about.
"""
from __future__ import annotations

import argparse
import json
import secrets
import sqlite3
import sys
import tempfile
import time
from contextlib import closing
from pathlib import Path
from typing import Any, Final, NoReturn, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))
import durable_dispatcher as dd  # noqa: E402

td = dd.td

QUICK_WRITES: Final = 10  # enough to run every statement of both loops, fast enough for CI
DEFAULT_WRITES: Final = 300  # a few seconds per mode on an SSD with FULL
MAX_WRITES: Final = 100_000  # the loops keep every call in memory; beyond this, run it twice
COMMITS_PER_DURABLE_WRITE: Final = 3  # binding + claim + start, downstream, completion + event
PAYLOAD: Final = "x" * 512  # about the size of one stored package row, for the floor's insert

NOW: Final = 1_800_000_000
PRINCIPAL: Final = td.Principal("tenant-bench", "bench-user", ("refunds.draft",))
ORDER: Final = td.Order("tenant-bench", "ORDER-1", "bench-user", "paid", 1)
APPROVER: Final = "approver-bench"
PROPOSAL: Final = {"name": "create_refund_draft", "arguments": {"order_ref": "ORDER-1", "reason": "duplicate"}}

SQL_BARE_TABLE: Final = "CREATE TABLE writes (key TEXT PRIMARY KEY, payload TEXT NOT NULL)"
SQL_BARE_INSERT: Final = "INSERT INTO writes (key, payload) VALUES (?, ?)"


def bare_rate(path: Path, writes: int, synchronous: str) -> float:
    """Commits per second of the floor: one row per BEGIN IMMEDIATE ... COMMIT."""
    with closing(sqlite3.connect(path, isolation_level=None)) as connection:
        connection.execute("PRAGMA journal_mode = WAL")
        connection.execute(f"PRAGMA synchronous = {dd.SYNCHRONOUS_MODES[synchronous]}")
        connection.execute(SQL_BARE_TABLE)
        start = time.perf_counter()
        for index in range(writes):
            connection.execute("BEGIN IMMEDIATE")
            connection.execute(SQL_BARE_INSERT, (f"key-{index}", PAYLOAD))
            connection.execute("COMMIT")
        return writes / (time.perf_counter() - start)


def _call(index: int) -> tuple[td.CallContext, td.Approval]:
    context = td.CallContext("OpenAI", "Responses", "openai-responses-v1", f"resp-{index}", f"call-{index}",
                             f"op-{index}", f"bench-key-{index}")
    approval = td.approval_for_call(approver=APPROVER, principal=PRINCIPAL, context=context,
                                    spec=td.REGISTRY["create_refund_draft"], arguments=PROPOSAL["arguments"],
                                    expires_at=NOW + 3_600)
    return context, approval


def durable_rate(path: Path, writes: int, synchronous: str) -> float:
    """Fresh durable writes per second (each one a first execution of its own key)."""
    calls = [_call(index) for index in range(writes)]
    with dd.open_store(path, exclusive=True, synchronous=synchronous) as store:
        dispatcher = dd.DurableDispatcher([ORDER], store=store, realm="bench", approvers=[APPROVER])
        start = time.perf_counter()
        for context, approval in calls:
            package = dispatcher.dispatch(PROPOSAL, context, PRINCIPAL, approval=approval, now=NOW,
                                          deadline=NOW + 30)
            if package["model_result"]["delivery"] != "fresh":
                _fail("a benchmark write was not fresh")
        elapsed = time.perf_counter() - start
        if store.integrity() != "ok" or dispatcher.effect_count != writes:
            _fail("the benchmark database does not hold one effect per write")
    return writes / elapsed


def _pg_schema(dsn: str) -> tuple[str, str]:
    """A new schema on the server for one measurement: (its name, a DSN whose search_path is it)."""
    import psycopg  # the postgres extra; only --pg needs it
    from urllib.parse import quote
    name = "bench_" + secrets.token_hex(6)
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(f"CREATE SCHEMA {name}")
    separator = "&" if "?" in dsn else "?"
    return name, f"{dsn}{separator}options={quote(f'-csearch_path={name}')}"


def _pg_drop(dsn: str, name: str) -> None:
    import psycopg
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(f"DROP SCHEMA {name} CASCADE")


def pg_bare_rate(dsn: str, writes: int) -> float:
    """The PostgreSQL floor: one row per BEGIN ... INSERT ... COMMIT, on the same server and settings."""
    import psycopg
    name, scoped = _pg_schema(dsn)
    try:
        with psycopg.connect(scoped, autocommit=True) as connection:
            connection.execute(SQL_BARE_TABLE)
            insert = SQL_BARE_INSERT.replace("?", "%s")
            start = time.perf_counter()
            for index in range(writes):
                connection.execute("BEGIN")
                connection.execute(insert, (f"key-{index}", PAYLOAD))
                connection.execute("COMMIT")
            return writes / (time.perf_counter() - start)
    finally:
        _pg_drop(dsn, name)


def pg_durable_rate(dsn: str, writes: int) -> float:
    name, scoped = _pg_schema(dsn)
    try:
        return durable_rate(scoped, writes, "FULL")
    finally:
        _pg_drop(dsn, name)


def _fail(message: str) -> NoReturn:
    sys.stdout.write(json.dumps({"passed": False, "error": message}) + "\n")
    raise SystemExit(1)


def _row(bare: float, durable: float) -> dict[str, float]:
    return {"bare_commits_per_s": round(bare, 1), "durable_writes_per_s": round(durable, 1),
            "ratio_to_bare": round(durable / bare, 4)}


def measure(directory: Path, writes: int, pg_dsn: str | None = None) -> dict[str, Any]:
    modes = {}
    for synchronous in ("FULL", "NORMAL"):
        bare = bare_rate(directory / f"bare-{synchronous}.sqlite3", writes, synchronous)
        durable = durable_rate(directory / f"durable-{synchronous}.sqlite3", writes, synchronous)
        modes[synchronous] = _row(bare, durable)
    report: dict[str, Any] = {"passed": True, "writes": writes,
                              "commits_per_durable_write": COMMITS_PER_DURABLE_WRITE, "modes": modes}
    if pg_dsn is not None:
        # Its own floor, on the same server: synchronous_commit on, as the store runs it.
        report["postgresql"] = _row(pg_bare_rate(pg_dsn, writes), pg_durable_rate(pg_dsn, writes))
    return report


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_durable", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_WRITES} writes per loop: proves it runs")
    parser.add_argument("--writes", type=int, default=DEFAULT_WRITES, help="writes per loop")
    parser.add_argument("--dir", help="directory for the databases (default: a new temporary directory)")
    parser.add_argument("--pg", metavar="DSN", help="also measure PostgreSQL at this postgresql:// DSN "
                                                    "(a schema of its own is created and dropped)")
    arguments = parser.parse_args(argv)
    writes = QUICK_WRITES if arguments.quick else arguments.writes
    if not 1 <= writes <= MAX_WRITES:
        parser.error(f"--writes must be between 1 and {MAX_WRITES}")
    with tempfile.TemporaryDirectory(dir=arguments.dir) as directory:
        report = measure(Path(directory), writes, arguments.pg)
    report["quick"] = arguments.quick
    sys.stdout.write(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
