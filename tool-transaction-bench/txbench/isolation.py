"""A user's orchestrator in a box: a child process that reaches the sandbox only through the tool
port, one JSON line per request and per answer, within wall-clock bounds per run and per sweep.

The parent keeps the sandbox, the journal and the record; the child holds the user's code and a
port whose sandbox methods are requests over the pipe (decoding and the saga's undo steps are pure
and answered in the child). Every way a child can leave a run (an exception, an exit, a kill, a
hang, a line that is not the protocol, an answer that is none of the words) is that run's recorded
outcome, never a failure of the bench.
"""
from __future__ import annotations

import json
import os
import queue
import random
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Final

import tool_dispatcher

from .limits import (
    BOX_RUN_SECONDS, BOX_START_SECONDS, BOX_SWEEP_SECONDS, MAX_BOX_DEPTH, MAX_BOX_LINE_BYTES, canonical_json
)
from .errors import BenchError
from .contracts import BENCH_ARGUMENTS_JSON, decode_arguments, tool_schemas
from .sandbox import Response, Sandbox
from .plans import Expectation, ToolCall
from .orchestrators import (
    USER_OUTCOMES, Orchestrator, RunResult, ToolPort, check_spec, compensation_of, import_orchestrate,
    user_outcome, user_result
)


# ================================================================================================
# 9b. Orchestrators in a box: a child process behind the tool port
# ================================================================================================

BENCH_DIR: Final = Path(__file__).resolve().parent.parent
# The child's whole program (run with -P, so no directory is put before the standard library): the
# bench's folder first on its path (installed, the folder that holds the package) and the caller's
# directory last, as for the command itself, then the serving loop of this very package (txbench in a
# checkout, tool_dispatcher_bench installed).
CHILD_BOOT: Final = ("import sys; sys.path.insert(0, sys.argv[1]); sys.path.append(sys.argv[2]); "
                     f"from {__package__}.isolation import serve_child; sys.exit(serve_child(sys.argv[3]))")

# What a receive gives besides a message: the child is gone (its output ended), the deadline passed,
# or a line that is not the protocol (too long, not strict JSON).
GONE: Final = "gone"
LATE: Final = "late"
GARBLED: Final = "garbled"


def _decoded(line: bytes) -> Any:
    """A line of the protocol as a value, or GARBLED: the parent's reading, which the child mirrors."""
    try:
        return tool_dispatcher.decode_strict_json(line, max_bytes=MAX_BOX_LINE_BYTES, max_depth=MAX_BOX_DEPTH,
                                                  policy=BENCH_ARGUMENTS_JSON)
    except tool_dispatcher.BoundaryError:
        return GARBLED


# -- the child ------------------------------------------------------------------------------------

class ChildPort:
    """The port as a user's orchestrator holds it in the child: the sandbox's methods are requests.

    What the parent would not read (an object json cannot write, NaN, a lone surrogate, a value too
    deep or too long) is never sent: the port answers BAD_REQUEST, as the port in process does.
    """

    def __init__(self, channel_in: Any, channel_out: Any) -> None:
        self._in = channel_in
        self._out = channel_out
        self.schemas = tool_schemas()

    def _ask(self, request: dict[str, Any]) -> Any:
        try:
            line = canonical_json(request)
        except (TypeError, ValueError, RecursionError):
            return None
        if _decoded(line) is GARBLED:
            return None
        _send_line(self._out, line)
        return json.loads(self._in.readline())

    def call(self, name: Any, arguments: Any) -> Response:
        return _response(self._ask({"arguments": arguments, "name": name, "op": "call"}))

    def query_status(self, name: Any, key: Any) -> Response:
        return _response(self._ask({"key": key, "name": name, "op": "query_status"}))

    def relay(self) -> int:
        return self._ask({"op": "relay"})["relayed"]

    def decode(self, text: Any) -> dict[str, Any]:
        return decode_arguments(text)

    def findings(self, calls: Any) -> list[str]:
        answer = self._ask({"calls": [[call.id, call.name, call.arguments] for call in calls], "op": "findings"})
        return ["BAD_REQUEST"] if answer is None else answer["findings"]

    def compensation(self, name: str, arguments: dict) -> tuple[str, dict] | None:
        return compensation_of(name, arguments)


def _response(answer: Any) -> Response:
    if answer is None:
        return Response(False, "BAD_REQUEST")
    return Response(answer["ok"], answer["code"], answer["data"])


def _send_line(channel: Any, line: bytes) -> None:
    channel.write(line + b"\n")
    channel.flush()


def _claim_channel() -> tuple[Any, Any]:
    # The protocol keeps the process's own stdin and stdout; the user's code reads an empty stdin and
    # prints to stderr, so nothing it reads or prints can take or break a line of the protocol.
    channel_in, channel_out = os.fdopen(os.dup(0), "rb"), os.fdopen(os.dup(1), "wb")
    empty = os.open(os.devnull, os.O_RDONLY)
    os.dup2(empty, 0)
    os.close(empty)
    os.dup2(2, 1)
    return channel_in, channel_out


def serve_child(spec: str) -> int:
    """The child's loop: load the orchestrator, then one run per line until the parent closes stdin."""
    channel_in, channel_out = _claim_channel()
    with channel_in, channel_out:
        try:
            orchestrate = import_orchestrate(spec)
        except BenchError:
            _send_line(channel_out, canonical_json({"ready": False}))
            return 0
        _send_line(channel_out, canonical_json({"ready": True}))
        for line in channel_in:
            calls = tuple(ToolCall(*item) for item in json.loads(line)["run"])
            try:
                said = orchestrate(calls, ChildPort(channel_in, channel_out))
            except (Exception, SystemExit):  # noqa: BLE001  the user's bug ends the run, not the child
                said = "crashed"
            _send_line(channel_out, canonical_json({"op": "done", "outcome": user_outcome(said)}))
    return 0


# -- the parent -----------------------------------------------------------------------------------

def _interpreter_flags() -> list[str]:
    # The child runs under this interpreter's flags: -O and every -W option carry over; no bytecode.
    return ["-B", "-P", *(["-O"] * sys.flags.optimize), *(f"-W{option}" for option in sys.warnoptions)]


class _Child:
    """One child process: its pipes, and a thread that turns its output into lines for a queue."""

    def __init__(self, spec: str) -> None:
        command = [sys.executable, *_interpreter_flags(), "-c", CHILD_BOOT, str(BENCH_DIR), os.getcwd(), spec]
        self._process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.DEVNULL)
        self._lines: queue.Queue[bytes] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            line = self._process.stdout.readline(MAX_BOX_LINE_BYTES + 2)
            self._lines.put(line)
            if not line.endswith(b"\n"):
                return  # the end of the output, or a line past the limit: nothing after it is read

    def send(self, message: dict[str, Any]) -> bool:
        try:
            text = json.dumps(message, ensure_ascii=True, allow_nan=False, sort_keys=True)
            self._process.stdin.write(text.encode("ascii") + b"\n")
            self._process.stdin.flush()
        except (OSError, TypeError, ValueError):
            return False  # the child is gone (a broken pipe), or the message is not JSON
        return True

    def receive(self, deadline: float) -> Any:
        try:
            line = self._lines.get(timeout=max(deadline - time.monotonic(), 0.0))
        except queue.Empty:
            return LATE
        if not line:
            return GONE
        return _decoded(line[:-1]) if line.endswith(b"\n") else GARBLED

    def stop(self, *, grace: float = 0.0) -> None:
        """End the child: close its stdin, wait up to `grace` seconds for it to leave, then kill it."""
        try:
            self._process.stdin.close()
        except OSError:
            pass  # a pipe the child already left
        try:
            self._process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._reader.join(timeout=max(grace, 1.0))
        self._process.stdout.close()


def _answer(response: Response) -> dict[str, Any]:
    return {"code": response.code, "data": response.data, "ok": response.ok}


def _serve_findings(port: ToolPort, message: dict[str, Any]) -> dict[str, Any]:
    calls = message["calls"]
    if not (isinstance(calls, list) and all(isinstance(item, list) and len(item) == 3
                                            and all(isinstance(text, str) for text in item[:2]) for item in calls)):
        return {"findings": ["BAD_REQUEST"]}  # ids and names the plan's checks could not hold
    return {"findings": port.findings(tuple(ToolCall(*item) for item in calls))}


# Every request a child may send: the fields it holds, exactly, and how the parent answers it
# through the run's ToolPort (None for "done", which ends the run). Anything else is a violation.
REQUESTS: Final = MappingProxyType({
    "call": (frozenset({"op", "name", "arguments"}),
             lambda port, message: _answer(port.call(message["name"], message["arguments"]))),
    "query_status": (frozenset({"op", "name", "key"}),
                     lambda port, message: _answer(port.query_status(message["name"], message["key"]))),
    "relay": (frozenset({"op"}), lambda port, _message: {"relayed": port.relay()}),
    "findings": (frozenset({"op", "calls"}), _serve_findings),
    "done": (frozenset({"op", "outcome"}), None),
})
# The words a child may end a run with: the user's own, or what the child recorded for it.
CHILD_OUTCOMES: Final = USER_OUTCOMES | {"crashed", "invalid_outcome"}


def _request(message: Any) -> tuple[str, Callable[..., Any] | None] | None:
    if not isinstance(message, dict) or not isinstance(message.get("op"), str) or message["op"] not in REQUESTS:
        return None
    fields, serve = REQUESTS[message["op"]]
    return (message["op"], serve) if set(message) == fields else None


class OrchestratorBox:
    """A user's `orchestrate(calls, port)` in a child process, for a registry: `orchestrator()`.

    One child serves run after run; a child that fails a run is ended and the next run starts a new
    one. A run has `run_seconds` of wall clock, a sweep `sweep_seconds` from its first run (runs
    after that are recorded as "sweep_timed_out" without starting); `begin_sweep()` starts the next
    sweep's clock. Use it as a context manager, so that the child ends with it.
    """

    def __init__(self, spec: Any, *, run_seconds: float = BOX_RUN_SECONDS,
                 sweep_seconds: float = BOX_SWEEP_SECONDS, start_seconds: float = BOX_START_SECONDS) -> None:
        check_spec(spec)
        self._spec = spec
        self._run_seconds, self._sweep_seconds, self._start_seconds = run_seconds, sweep_seconds, start_seconds
        self._sweep_deadline: float | None = None
        self._child = self._start()
        if self._child is None:
            raise BenchError("ORCHESTRATOR_UNLOADABLE")

    def __enter__(self) -> OrchestratorBox:
        return self

    def __exit__(self, *_exc: Any) -> None:
        self.close()

    def close(self) -> None:
        if self._child is not None:
            self._child.stop(grace=self._start_seconds)
            self._child = None

    def begin_sweep(self) -> None:
        self._sweep_deadline = None

    def orchestrator(self) -> Orchestrator:
        return Orchestrator(True, self.run)

    def run(self, calls: tuple[ToolCall, ...], box: Sandbox, expectation: Expectation,
            _rng: random.Random) -> RunResult:
        port = ToolPort(box, expectation)
        return user_result(self._drive(tuple(calls), port), calls, box, port)

    def _start(self) -> _Child | None:
        child = _Child(self._spec)
        if child.receive(time.monotonic() + self._start_seconds) == {"ready": True}:
            return child
        child.stop()
        return None

    def _end(self, outcome: str) -> str:
        if self._child is not None:
            self._child.stop()
            self._child = None
        return outcome

    def _drive(self, calls: tuple[ToolCall, ...], port: ToolPort) -> str:
        if self._sweep_deadline is None:
            self._sweep_deadline = time.monotonic() + self._sweep_seconds
        if time.monotonic() >= self._sweep_deadline:
            return "sweep_timed_out"
        if self._child is None:
            self._child = self._start()
        if self._child is None:
            return "crashed"  # a new child could not load the orchestrator it loaded before
        deadline = min(time.monotonic() + self._run_seconds, self._sweep_deadline)
        if not self._child.send({"run": [[call.id, call.name, call.arguments] for call in calls]}):
            return self._end("crashed")
        while True:
            message = self._child.receive(deadline)
            if message == LATE:
                return self._end("sweep_timed_out" if time.monotonic() >= self._sweep_deadline else "timed_out")
            if message == GONE:
                return self._end("crashed")
            request = _request(message)
            if request is None:
                return self._end("protocol_violation")
            op, serve = request
            if op == "done":
                outcome = message["outcome"]
                return outcome if isinstance(outcome, str) and outcome in CHILD_OUTCOMES else self._end(
                    "protocol_violation")
            if not self._child.send(serve(port, message)):
                return self._end("crashed")
