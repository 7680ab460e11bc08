"""Benchmark: durable writes per second, synchronous=FULL and NORMAL, against a bare SQLite floor.

For each synchronous mode it times, in the same run and the same directory:
- the floor: a bare loop of BEGIN IMMEDIATE / INSERT / COMMIT on a WAL database;
- durable writes: fresh create_refund_draft dispatches through DurableDispatcher, each one three
  commits (the call binding, claim and start together; the downstream's own commit; the
  completion with its outbox event), plus the boundary's own checks, digests and packaging.
- the in-memory write: the same calls through tool_dispatcher's own Dispatcher, no database.
It prints one JSON object; the ratio is durable writes/s divided by bare commits/s. Each
single-worker loop is also split into the process's CPU time and the rest (the wait: fsync, and
any time the process waited for a core), and the two targets are judged on those parts, per
backend: the waits of a durable write at most about three bare commits' worth (wait ratio, bare
wait / durable wait, at least TARGET_WAIT_RATIO), and its CPU at most TARGET_CPU_RATIO times the
in-memory write's. The machine's processor, its cores and the load average before and after
are printed beside them. With --pg DSN it also measures PostgreSQL the same way, against its own
floor (a bare BEGIN / INSERT / COMMIT loop on the same server), in a schema it creates and drops.

With --workers N (N >= 2) it also runs both SQLite loops with N threads on one database, each
thread with its own connection (and, for durable writes, its own store and dispatcher), and
reports them under "workers" beside the single-worker figures, which keep their meaning. SQLite
takes one writer at a time, but the sqlite3 module releases the GIL while a statement or a
commit runs, so one worker's Python work overlaps another's fsync. The floor runs with the same
N threads: it pays the same lock hand-offs (a waiting writer sleeps in SQLite's busy handler).

    python -B durable/bench_durable.py --quick        # CI: proves it runs (a few writes)
    python -B durable/bench_durable.py --writes 500   # a measurement
    python -B durable/bench_durable.py --writes 600 --workers 2   # also with two threads

Numbers depend on the disk: fsync is what FULL pays for, and a directory on tmpfs makes it free.
Pass --dir to measure on the disk you care about.
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

import importlib.util
import json
import os
import platform
import secrets
import sqlite3
import sys
import tempfile
import threading
import time
from contextlib import closing
from pathlib import Path
from typing import Any, Callable, Final, NamedTuple, NoReturn, Sequence

if __package__:  # the installed package tool_dispatcher_durable
    from . import durable_dispatcher as dd
else:  # run or imported by path from a checkout
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import durable_dispatcher as dd  # noqa: E402

td = dd.td

QUICK_WRITES: Final = 10  # enough to run every statement of both loops, fast enough for CI
DEFAULT_WRITES: Final = 300  # a few seconds per mode on an SSD with FULL
MAX_WRITES: Final = 100_000  # the loops keep every call in memory; beyond this, run it twice
COMMITS_PER_DURABLE_WRITE: Final = 3  # binding + claim + start, downstream, completion + event
PAYLOAD: Final = "x" * 512  # about the size of one stored package row, for the floor's insert
# The two targets, each on one part of the time: a durable write's waits (disk, fsync) at most
# about three bare commits' worth, and its CPU at most twice the in-memory write of the same call
# (the ledger's SQL, the chain and the replay's verification are what it adds).
TARGET_WAIT_RATIO: Final = 0.3
TARGET_CPU_RATIO: Final = 2.0
MAX_WORKERS: Final = 16  # threads per loop; beyond a few, they measure lock hand-offs, not this layer

NOW: Final = 1_800_000_000
PRINCIPAL: Final = td.Principal("tenant-bench", "bench-user", ("refunds.draft",))
ORDER: Final = td.Order("tenant-bench", "ORDER-1", "bench-user", "paid", 1)
APPROVER: Final = "approver-bench"
PROPOSAL: Final = {"name": "create_refund_draft", "arguments": {"order_ref": "ORDER-1", "reason": "duplicate"}}

SQL_BARE_TABLE: Final = "CREATE TABLE writes (key TEXT PRIMARY KEY, payload TEXT NOT NULL)"
SQL_BARE_INSERT: Final = "INSERT INTO writes (key, payload) VALUES (?, ?)"


def _bare_commits(connection: Any, begin: str, insert: str, keys: range) -> None:
    """The floor's unit of work: one row per transaction, committed (sqlite3 and psycopg alike)."""
    for key in keys:
        connection.execute(begin)
        connection.execute(insert, (f"key-{key}", PAYLOAD))
        connection.execute("COMMIT")


class Timing(NamedTuple):
    """One loop's figures: ``count`` units of work in ``wall_s`` seconds, ``cpu_s`` of them on a CPU."""

    count: int
    wall_s: float
    cpu_s: float

    @property
    def per_s(self) -> float:
        return self.count / self.wall_s

    @property
    def wait_s(self) -> float:
        """Wall time the process spent off a CPU: fsync, the disk, and any wait for a core."""
        return max(self.wall_s - self.cpu_s, 0.0)


def _timed(count: int, loop: Callable[[], None]) -> Timing:
    wall, cpu = time.perf_counter(), time.process_time()
    loop()
    return Timing(count, time.perf_counter() - wall, time.process_time() - cpu)


def bare_rate(path: Path, writes: int, synchronous: str) -> Timing:
    """The floor: one row per BEGIN IMMEDIATE ... COMMIT."""
    with closing(sqlite3.connect(path, isolation_level=None)) as connection:
        connection.execute("PRAGMA journal_mode = WAL")
        connection.execute(f"PRAGMA synchronous = {dd.SYNCHRONOUS_MODES[synchronous]}")
        connection.execute(SQL_BARE_TABLE)
        return _timed(writes, lambda: _bare_commits(connection, "BEGIN IMMEDIATE", SQL_BARE_INSERT, range(writes)))


def _call(index: int) -> tuple[td.CallContext, td.Approval]:
    context = td.CallContext("OpenAI", "Responses", "openai-responses-v1", f"resp-{index}", f"call-{index}",
                             f"op-{index}", f"bench-key-{index}")
    approval = td.approval_for_call(approver=APPROVER, principal=PRINCIPAL, context=context,
                                    spec=td.REGISTRY["create_refund_draft"], arguments=PROPOSAL["arguments"],
                                    expires_at=NOW + 3_600)
    return context, approval


def durable_rate(path: Path, writes: int, synchronous: str) -> Timing:
    """Fresh durable writes (each one a first execution of its own key)."""
    calls = [_call(index) for index in range(writes)]
    with dd.open_store(path, exclusive=True, synchronous=synchronous) as store:
        dispatcher = dd.DurableDispatcher([ORDER], store=store, realm="bench", approvers=[APPROVER])

        def loop() -> None:
            for context, approval in calls:
                package = dispatcher.dispatch(PROPOSAL, context, PRINCIPAL, approval=approval, now=NOW,
                                              deadline=NOW + 30)
                if package["model_result"]["delivery"] != "fresh":
                    _fail("a benchmark write was not fresh")

        timing = _timed(writes, loop)
        if store.integrity() != "ok" or dispatcher.effect_count != writes:
            _fail("the benchmark database does not hold one effect per write")
    return timing


def memory_rate(writes: int) -> Timing:
    """The same fresh writes through tool_dispatcher's in-memory Dispatcher: the CPU a write costs
    without a database, the second target's yardstick."""
    calls = [_call(index) for index in range(writes)]
    dispatcher = td.Dispatcher([ORDER], approvers=[APPROVER])

    def loop() -> None:
        for context, approval in calls:
            package = dispatcher.dispatch(PROPOSAL, context, PRINCIPAL, approval=approval, now=NOW, deadline=NOW + 30)
            if package["model_result"]["delivery"] != "fresh":
                _fail("a benchmark write was not fresh")

    return _timed(writes, loop)


def machine() -> dict[str, Any]:
    """The processor, its cores and the load average now: what a reader needs beside the figures."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            model = next((line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")), model)
    except OSError:
        pass
    return {"cpu": model, "cores": os.cpu_count(), "load_average": [round(load, 2) for load in os.getloadavg()]}


def _in_threads(workers: int, work: Callable[[int, threading.Barrier], None]) -> float:
    """Seconds from the moment all ``workers`` threads are ready until the last one is done.

    ``work(index, ready)`` sets itself up (its own connection), waits on ``ready``, then writes.
    """
    ready = threading.Barrier(workers + 1)
    errors: list[BaseException] = []

    def run(index: int) -> None:
        try:
            work(index, ready)
        except BaseException as error:  # reported below, as the benchmark's own failure
            errors.append(error)
            ready.abort()

    threads = [threading.Thread(target=run, args=(index,)) for index in range(workers)]
    for thread in threads:
        thread.start()
    try:
        ready.wait()
    except threading.BrokenBarrierError:
        pass
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    if errors:
        _fail(f"a benchmark worker failed: {type(errors[0]).__name__}")
    return elapsed


def bare_rate_workers(path: Path, writes: int, synchronous: str, workers: int) -> float:
    """The floor with ``workers`` threads, each with its own connection, one row per commit."""
    with closing(sqlite3.connect(path, isolation_level=None)) as connection:
        connection.execute("PRAGMA journal_mode = WAL")
        connection.execute(SQL_BARE_TABLE)

    def work(index: int, ready: threading.Barrier) -> None:
        with closing(sqlite3.connect(path, isolation_level=None, timeout=dd.BUSY_TIMEOUT_MS / 1000)) as connection:
            connection.execute(f"PRAGMA synchronous = {dd.SYNCHRONOUS_MODES[synchronous]}")
            ready.wait()
            _bare_commits(connection, "BEGIN IMMEDIATE", SQL_BARE_INSERT, range(index, writes, workers))

    return writes / _in_threads(workers, work)


def durable_rate_workers(path: Path, writes: int, synchronous: str, workers: int) -> float:
    """Fresh durable writes per second with ``workers`` threads, each with its own store and dispatcher."""
    calls = [_call(index) for index in range(writes)]
    dd.open_store(path, exclusive=True, synchronous=synchronous).close()

    def work(index: int, ready: threading.Barrier) -> None:
        with dd.open_store(path, create=False, synchronous=synchronous) as store:
            dispatcher = dd.DurableDispatcher([ORDER], store=store, realm="bench", approvers=[APPROVER])
            ready.wait()
            for context, approval in calls[index::workers]:
                package = dispatcher.dispatch(PROPOSAL, context, PRINCIPAL, approval=approval, now=NOW,
                                              deadline=NOW + 30)
                if package["model_result"]["delivery"] != "fresh":
                    raise RuntimeError("a benchmark write was not fresh")

    rate = writes / _in_threads(workers, work)
    with dd.open_store(path, create=False, synchronous=synchronous) as store:
        if store.integrity() != "ok" or dd.DurableDownstream(store, "bench").effect_count != writes:
            _fail("the benchmark database does not hold one effect per write")
    return rate


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


def pg_bare_rate(dsn: str, writes: int) -> Timing:
    """The PostgreSQL floor: one row per BEGIN ... INSERT ... COMMIT, on the same server and settings."""
    import psycopg
    name, scoped = _pg_schema(dsn)
    try:
        with psycopg.connect(scoped, autocommit=True) as connection:
            connection.execute(SQL_BARE_TABLE)
            return _timed(writes, lambda: _bare_commits(connection, "BEGIN", SQL_BARE_INSERT.replace("?", "%s"),
                                                        range(writes)))
    finally:
        _pg_drop(dsn, name)


def pg_durable_rate(dsn: str, writes: int) -> Timing:
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


def _split_row(bare: Timing, durable: Timing, memory: Timing, *, waits_judged: bool = True) -> dict[str, Any]:
    """_row, and where the time went: CPU and waiting per unit, the waits' own ratio, the CPU's
    ratio to the in-memory write's, and whether each target held in this run. ``waits_judged``
    False: the backend's commit does not wait for the disk (SQLite NORMAL), so there is no wait to
    hold a durable write's to, and the first target is not judged (null)."""
    bare_wait, durable_wait = bare.wait_s / bare.count, durable.wait_s / durable.count
    durable_cpu, memory_cpu = durable.cpu_s / durable.count, memory.cpu_s / memory.count
    wait_ratio = round(bare_wait / durable_wait, 4) if durable_wait > 0 else None
    cpu_ratio = round(durable_cpu / memory_cpu, 4) if memory_cpu > 0 else None
    return {**_row(bare.per_s, durable.per_s),
            "bare_cpu_ms_per_commit": round(bare.cpu_s / bare.count * 1000, 4),
            "bare_wait_ms_per_commit": round(bare_wait * 1000, 4),
            "durable_cpu_ms_per_write": round(durable_cpu * 1000, 4),
            "durable_wait_ms_per_write": round(durable_wait * 1000, 4),
            "memory_cpu_ms_per_write": round(memory_cpu * 1000, 4),
            "wait_ratio_to_bare": wait_ratio,
            "cpu_ratio_to_memory": cpu_ratio,
            # No wait at all holds the first target; no CPU measured (the clock's grain) says nothing.
            "wait_target_held": None if not waits_judged else (wait_ratio is None or wait_ratio >= TARGET_WAIT_RATIO),
            "cpu_target_held": None if cpu_ratio is None else cpu_ratio <= TARGET_CPU_RATIO}


def measure(directory: Path, writes: int, pg_dsn: str | None = None, workers: int = 1) -> dict[str, Any]:
    before = machine()
    modes = {}
    for synchronous in ("FULL", "NORMAL"):
        bare = bare_rate(directory / f"bare-{synchronous}.sqlite3", writes, synchronous)
        durable = durable_rate(directory / f"durable-{synchronous}.sqlite3", writes, synchronous)
        modes[synchronous] = _split_row(bare, durable, memory_rate(writes), waits_judged=synchronous == "FULL")
    report: dict[str, Any] = {"passed": True, "writes": writes,
                              "targets": {"wait_ratio_to_bare_at_least": TARGET_WAIT_RATIO,
                                          "cpu_ratio_to_memory_at_most": TARGET_CPU_RATIO},
                              "commits_per_durable_write": COMMITS_PER_DURABLE_WRITE, "modes": modes}
    if workers > 1:
        # The same two loops with N threads; the single-worker figures above keep their meaning.
        threaded = {}
        for synchronous in ("FULL", "NORMAL"):
            bare = bare_rate_workers(directory / f"bare-{synchronous}-{workers}.sqlite3", writes, synchronous, workers)
            durable = durable_rate_workers(directory / f"durable-{synchronous}-{workers}.sqlite3", writes,
                                           synchronous, workers)
            threaded[synchronous] = _row(bare, durable)
        report["workers"] = {"count": workers, "modes": threaded}
    if pg_dsn is not None:
        # Its own floor, on the same server: synchronous_commit on, as the store runs it.
        report["postgresql"] = _split_row(pg_bare_rate(pg_dsn, writes), pg_durable_rate(pg_dsn, writes),
                                          memory_rate(writes))
    report["machine"] = {**before, "load_average_after": machine()["load_average"]}
    return report


def main(argv: Sequence[str] | None = None) -> int:
    """A bad command line is CLI_USAGE, a --dir it cannot use STORE_UNREADABLE, --pg without the
    driver STORE_DRIVER_MISSING and Ctrl-C CLI_INTERRUPTED, in the project's failure shape (run_cli);
    a self-check that fails (a write that was not fresh) exits 1 with {"passed": false, "error": reason}."""
    return td.run_cli(lambda: _run(argv))


def _run(argv: Sequence[str] | None) -> int:
    parser = td.CliParser(prog="bench_durable", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_WRITES} writes per loop: proves it runs")
    parser.add_argument("--writes", type=int, default=DEFAULT_WRITES, help="writes per loop")
    parser.add_argument("--dir", help="directory for the databases (default: a new temporary directory)")
    parser.add_argument("--pg", metavar="DSN", help="also measure PostgreSQL at this postgresql:// DSN "
                                                    "(a schema of its own is created and dropped)")
    parser.add_argument("--workers", type=int, default=1,
                        help="also run both SQLite loops with this many threads (2 or more)")
    arguments = parser.parse_args(argv)
    writes = QUICK_WRITES if arguments.quick else arguments.writes
    if not 1 <= writes <= MAX_WRITES or not 1 <= arguments.workers <= MAX_WORKERS:
        raise td.BoundaryError("CLI_USAGE")
    if arguments.pg is not None and importlib.util.find_spec("psycopg") is None:
        raise dd.DurableError("STORE_DRIVER_MISSING")  # before the SQLite loops, not minutes after them
    try:
        scratch = tempfile.TemporaryDirectory(dir=arguments.dir)
    except (OSError, ValueError):
        raise dd.DurableError("STORE_UNREADABLE") from None
    with scratch as directory:
        report = measure(Path(directory), writes, arguments.pg, arguments.workers)
    report["quick"] = arguments.quick
    sys.stdout.write(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
