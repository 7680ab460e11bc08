"""The guard's added cost per call, as a ratio against calling the same server directly, in one run.

Three lines, each a pair of calls to mcp_bridge/demo_server.py, one direct and one through the
guard (mcp_bridge/guard.py), timed one after the other, call by call:

    stdio read_note         the project's McpClient -> demo_server.py, against McpClient -> the guard's
                            command (`mcp_bridge.py guard --host HOST.json`, a child process) ->
                            demo_server.py: the boundary plus a second stdio hop and a process
    in-process read_note    McpForwarder.call against Guard.call in this process, over the same
                            forwarder to the same server: the boundary alone, no extra hop
    in-process write_note   a keyed McpForwarder write against Guard.call of a fresh write (a new
                            note each call), approved at once by ask=lambda text: True: the
                            boundary, the approval round (a refused dispatch, the approval, a second
                            dispatch) and the ledger's lookups of the retry keys

A ratio is the median of the per-round ratios of the two sides' median call times; the spread is
the lowest and the highest per-round ratio. Nothing here asserts a timing. Every process it starts
is stopped on every path (Ctrl-C included), and everything it writes lives in one temporary folder.

    python -B benchmarks/bench_guard.py            # 21 rounds after a warm-up (about 6 s)
    python -B benchmarks/bench_guard.py --json     # one JSON object, for machines
    python -B benchmarks/bench_guard.py --quick    # 2 rounds: proves it runs (CI, about 2 s)

Standard library only.
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

import contextlib
import gc
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Final, Iterator, Mapping

ROOT = Path(__file__).resolve().parent.parent
MCP = ROOT / "mcp_bridge"
for _path in (str(ROOT), str(MCP)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import tool_dispatcher as td  # noqa: E402  (the modules measured live one directory up)
import client as mcp_client  # noqa: E402
import guard as gd  # noqa: E402
from demo_server import MAX_NOTES  # noqa: E402
from importer import HostChoices, import_server  # noqa: E402

# ============================================================================================
# Limits and constants
# ============================================================================================

PYTHON: Final = (sys.executable, "-B")  # -B: no child writes a __pycache__ into the checkout
DEMO: Final = (*PYTHON, str(MCP / "demo_server.py"))
BRIDGE: Final = (*PYTHON, str(MCP / "mcp_bridge.py"))
ROLE: Final = "mcp.tools"
PREFIX: Final = "notes_"
READ_ONLY: Final = frozenset({"read_note", "note_write_status"})
NOTE: Final = {"name": "bench", "text": "A note written once at setup, directly, so that every read finds it."}
WRITE_TEXT: Final = "A fresh note: each write of the benchmark names a new one."
WAIT: Final = 60.0  # seconds a start or a call may take on a loaded machine: a bound, never a measure

READS_PER_ROUND: Final = 40  # calls of each side of a read line in one round (a read takes 0.1 to 2 ms)
WRITES_PER_ROUND: Final = 10  # calls of each side of the write line in one round
DEFAULT_ROUNDS: Final = 21
QUICK_ROUNDS: Final = 2
# Every write names a new note, both sides on one demo server, which keeps at most MAX_NOTES
# notes (the seeded one among them); the warm-up round writes too.
MAX_ROUNDS: Final = min(50, (MAX_NOTES - 1) // (2 * WRITES_PER_ROUND) - 1)


@dataclass(frozen=True, slots=True)
class Line:
    key: str
    label: str
    calls: int  # per side, per round
    includes: str  # what the guarded side does that the direct one does not


LINES: Final = (
    Line("stdio_read", "stdio read_note (McpClient)", READS_PER_ROUND,
         "the guard's process: its JSON-RPC reading and writing, a thread per call, the boundary, its "
         "report line on stderr, and a second stdio hop to the server"),
    Line("in_process_read", "in-process read_note", READS_PER_ROUND,
         "the boundary alone (Guard.call: the contracts both ways, the package, the MCP result, the "
         "ledger's thread), over the same forwarder to the same server"),
    Line("in_process_write", "in-process write_note, fresh", WRITES_PER_ROUND,
         "the boundary, the approval round (a dispatch refused for its approval, the approval, a second "
         "dispatch) and the ledger's lookups of the two retry keys"),
)


@dataclass(frozen=True, slots=True)
class Side:
    """One side of a line: ``run(number)`` makes call ``number`` (a new one for every call of the
    run), ``check(number, answer)`` says whether it answered as it must (outside the timed part)."""

    run: Callable[[int], Any]
    check: Callable[[int, Any], bool]


# ============================================================================================
# The servers, the guard and the clients (all in one temporary folder)
# ============================================================================================


def _deadline() -> float:
    return time.monotonic() + WAIT


def _host_file(folder: Path, name: str, command: list[str]) -> Path:
    document = {"format": gd.HOST_FORMAT,
                "principal": {"tenant": "bench", "subject": "bench-user", "roles": [ROLE]},
                "approval": {"approver": "bench-person"},
                "servers": [{"name": "notes", "prefix": PREFIX, "command": command, "contracts": "notes.json",
                             "status_tools": {"write_note": "note_write_status"}}]}
    path = folder / name
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def _model_result(answer: Any) -> Any:
    """The model_result a guarded call answered (in its one text block), or None."""
    try:
        if answer.get("isError") is not False:
            return None
        return json.loads(answer["content"][0]["text"])
    except (AttributeError, LookupError, TypeError, ValueError):
        return None


def _read_answered(_number: int, answer: Any) -> bool:
    return type(answer) is dict and answer.get("structuredContent") == NOTE


def _guarded_read_answered(_number: int, answer: Any) -> bool:
    result = _model_result(answer)
    return type(result) is dict and result.get("status") == "ok" and result.get("data") == NOTE


def _direct_name(number: int) -> str:
    return f"d-{number}"


def _guarded_name(number: int) -> str:
    return f"g-{number}"


def _write_answered(number: int, answer: Any) -> bool:
    return (type(answer) is dict and answer.get("structuredContent") == {"name": _direct_name(number), "revision": 1}
            and type(answer.get("_meta")) is dict and mcp_client.RECEIPT_META in answer["_meta"])


def _guarded_write_answered(number: int, answer: Any) -> bool:
    result = _model_result(answer)
    return (type(result) is dict and result.get("status") == "ok" and result.get("delivery") == "fresh"
            and result.get("data") == {"name": _guarded_name(number), "revision": 1})


@contextlib.contextmanager
def rig() -> Iterator[dict[str, tuple[Side, Side]]]:
    """Each line's (direct, guarded) sides. On leaving, by any path, every client is stopped
    (which ends its server: the guard's command stops its own server when its input ends), the
    in-process guard is closed and the folder removed."""
    with contextlib.ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-guard-")))
        # The reviewed contracts, as a host would review them (test_guard.py's way): the two
        # reads read-only, every tool requiring the one role the principal holds.
        contracts, _report = import_server(list(DEMO), timeout=WAIT,
                                           host=HostChoices(read_only=READ_ONLY, role=ROLE))
        (folder / "notes.json").write_text(json.dumps(contracts), encoding="utf-8")

        # The stdio pair. The guard's server keeps its notes in a folder, written once directly
        # (a server of its own, stopped before the guard starts one); the direct server is seeded
        # through its own client. A read never touches the folder.
        with mcp_client.McpClient.start([*DEMO, "--dir", str(folder / "guarded")], timeout=WAIT) as seeder:
            seeder.call_tool("write_note", dict(NOTE), deadline=_deadline())
        direct = mcp_client.McpClient.start([*DEMO, "--dir", str(folder / "direct")], timeout=WAIT)
        stack.callback(direct.stop)
        direct.call_tool("write_note", dict(NOTE), deadline=_deadline())
        host = _host_file(folder, "host.json", [*DEMO, "--dir", str(folder / "guarded")])
        guarded = mcp_client.McpClient.start([*BRIDGE, "guard", "--host", str(host)], timeout=WAIT)
        stack.callback(guarded.stop)

        # The in-process pair: one guard over one server (its notes in memory), whose own
        # forwarder is the direct side, so that both sides reach the same process the same way.
        guard = gd.Guard(gd.load_host(_host_file(folder, "in-process.json", list(DEMO))))
        stack.callback(guard.close)
        started = guard.start()
        if started != {"notes": {"started": True, "withheld": {}}}:
            raise SystemExit(f"bench_guard: the in-process guard did not start its server: {started}")
        forwarder = guard.forwarders["notes"]
        forwarder.call("write_note", dict(NOTE))

        def approve(_text: str) -> bool:
            return True

        yield {
            "stdio_read": (
                Side(lambda _n: direct.call_tool("read_note", {"name": NOTE["name"]}, deadline=_deadline()),
                     _read_answered),
                Side(lambda _n: guarded.call_tool(PREFIX + "read_note", {"name": NOTE["name"]}, deadline=_deadline()),
                     _guarded_read_answered)),
            "in_process_read": (
                Side(lambda _n: forwarder.call("read_note", {"name": NOTE["name"]}), _read_answered),
                Side(lambda _n: guard.call(PREFIX + "read_note", {"name": NOTE["name"]}, ask=None),
                     _guarded_read_answered)),
            "in_process_write": (
                Side(lambda n: forwarder.call("write_note", {"name": _direct_name(n), "text": WRITE_TEXT},
                                              meta={mcp_client.IDEMPOTENCY_KEY_META: f"bench-{n}"}),
                     _write_answered),
                Side(lambda n: guard.call(PREFIX + "write_note", {"name": _guarded_name(n), "text": WRITE_TEXT},
                                          ask=approve),
                     _guarded_write_answered)),
        }


# ============================================================================================
# Measuring
# ============================================================================================


def _timed(side: Side, number: int) -> int:
    """Nanoseconds of one call, the collector paused (as timeit does); its answer checked after."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        start = time.perf_counter_ns()
        answer = side.run(number)
        elapsed = time.perf_counter_ns() - start
    finally:
        if enabled:
            gc.enable()
    if not side.check(number, answer):
        # A call that failed fast would flatter its side: no figure is better than a false one.
        raise SystemExit("bench_guard: a call did not answer as it must; no figure is reported")
    return elapsed


def measure_round(sides: Mapping[str, tuple[Side, Side]], number: int) -> dict[str, dict[str, dict[str, int]]]:
    """One round: each line's two sides, call by call (direct, guarded, direct, ...), so that the two
    sides of a ratio meet the same load; each side's median and fastest call."""
    found: dict[str, dict[str, dict[str, int]]] = {}
    for line in LINES:
        direct, guarded = sides[line.key]
        times: tuple[list[int], list[int]] = ([], [])
        for index in range(line.calls):
            call = number * line.calls + index  # a new number for every call of the run: a new note to write
            times[0].append(_timed(direct, call))
            times[1].append(_timed(guarded, call))
        found[line.key] = {side: {"median_ns": int(statistics.median(sample)), "min_ns": min(sample)}
                           for side, sample in zip(("direct", "guarded"), times)}
    return found


def collect(rounds: int) -> list[dict[str, dict[str, dict[str, int]]]]:
    """Round 0 warms both sides up (first calls build regexes and fill caches) and is discarded."""
    with rig() as sides:
        measure_round(sides, 0)
        return [measure_round(sides, number) for number in range(1, rounds + 1)]


# ============================================================================================
# Reporting
# ============================================================================================


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def load_average() -> list[float] | None:
    return [round(load, 2) for load in os.getloadavg()] if hasattr(os, "getloadavg") else None


def _line_report(line: Line, rounds: list[dict[str, dict[str, dict[str, int]]]]) -> dict[str, Any]:
    per_round = [entry[line.key] for entry in rounds]
    ratios = [entry["guarded"]["median_ns"] / entry["direct"]["median_ns"] for entry in per_round]
    added = [entry["guarded"]["median_ns"] - entry["direct"]["median_ns"] for entry in per_round]

    def side(name: str) -> dict[str, float]:
        return {"median_us": round(statistics.median(entry[name]["median_ns"] for entry in per_round) / 1e3, 1),
                "min_us": round(min(entry[name]["min_ns"] for entry in per_round) / 1e3, 1)}

    return {"label": line.label, "calls_per_round": line.calls, "guarded_adds": line.includes,
            "direct": side("direct"), "guarded": side("guarded"),
            "ratio": round(statistics.median(ratios), 2),
            "ratio_spread": [round(min(ratios), 2), round(max(ratios), 2)],
            "added_us": round(statistics.median(added) / 1e3, 1)}


def report(rounds: list[dict[str, dict[str, dict[str, int]]]], *, quick: bool,
           load_before: list[float] | None) -> dict[str, Any]:
    return {
        "benchmark": "mcp_guard",
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "load_average_before": load_before,
        "load_average_after": load_average(),
        "quick": quick,
        "rounds": len(rounds),
        "lines": {line.key: _line_report(line, rounds) for line in LINES},
        "ratio_method": "median of per-round ratios of the two sides' median call times, the sides timed "
                        "call by call in the same round; spread: the lowest and the highest per-round ratio",
    }


def render(result: dict[str, Any]) -> str:
    def us(value: float) -> str:
        return f"{value:,.1f} us"

    rows = [
        f"guard benchmark: Python {result['python']}, {result['cpu_model']} ({result['cpu_count']} cores), "
        f"{result['rounds']} round(s) after a warm-up{' (QUICK: figures mean little)' if result['quick'] else ''}, "
        f"load {result['load_average_before']} -> {result['load_average_after']}",
        "per call: the median of the rounds' medians; ratio guarded/direct: the median of the per-round ratios, "
        "[lowest, highest]; fastest: one call",
        f"{'line':<30}{'direct':>12}{'guarded':>12}{'added':>13}{'ratio':>8}  {'spread':<14}"
        f"{'fastest direct':>16}{'guarded':>12}",
    ]
    for line in result["lines"].values():
        low, high = line["ratio_spread"]
        rows.append(f"{line['label']:<30}{us(line['direct']['median_us']):>12}{us(line['guarded']['median_us']):>12}"
                    f"{'+' + us(line['added_us']):>13}{line['ratio']:>7.2f}x  {f'[{low:.2f}, {high:.2f}]':<14}"
                    f"{us(line['direct']['min_us']):>16}{us(line['guarded']['min_us']):>12}")
    return "\n".join(rows)


# ============================================================================================
# Command line
# ============================================================================================


def _arguments(argv: list[str] | None) -> Any:
    parser = td.CliParser(prog="bench_guard",
                          description="Time calls through the MCP guard against the same calls made directly.")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the lines")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_ROUNDS} rounds: proves it runs, for CI")
    parser.add_argument("--rounds", type=int, default=None,
                        help=f"rounds after the warm-up, 1 to {MAX_ROUNDS} (default {DEFAULT_ROUNDS}, "
                             f"quick {QUICK_ROUNDS}): every write names a new note, and the demo server "
                             f"keeps {MAX_NOTES:,}")
    arguments = parser.parse_args(argv)
    if arguments.rounds is not None and not 1 <= arguments.rounds <= MAX_ROUNDS:
        raise td.BoundaryError("CLI_USAGE")
    return arguments


def _run(argv: list[str] | None) -> int:
    arguments = _arguments(argv)
    rounds = arguments.rounds if arguments.rounds is not None else (QUICK_ROUNDS if arguments.quick else DEFAULT_ROUNDS)
    load_before = load_average()
    result = report(collect(rounds), quick=arguments.quick, load_before=load_before)
    sys.stdout.write((json.dumps(result, indent=2) if arguments.json else render(result)) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    """A bad command line is CLI_USAGE and Ctrl-C is CLI_INTERRUPTED, in the project's failure shape."""
    return td.run_cli(lambda: _run(argv))


if __name__ == "__main__":
    sys.exit(main())
