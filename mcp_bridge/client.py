"""An MCP client over stdio, standard library only: start a server, list its tools, call them, stop it.

    with McpClient.start(["python", "-B", "server.py"], protocol="auto", timeout=20) as client:
        tools = client.list_tools()
        result = client.call_tool("write_note", {"name": "a", "text": "b"},
                                  meta={IDEMPOTENCY_KEY_META: "key-1"}, deadline=time.monotonic() + 10)

The server is untrusted. It runs as a child process in a process group of its own (POSIX); its
stdout is read by one thread into a bounded read-ahead, its stdin written by another (a server
that stops reading cannot hold a caller past its deadline), its stderr kept as a bounded tail for
diagnostics and never put into an error. Every line is bounded before it is decoded by the core's
strict decoder; every request has a deadline on the monotonic clock. Both protocol eras: 2026-07-28
(``server/discover``, then ``_meta`` in every request) and the ``initialize`` handshake of
2024-11-05 to 2025-11-25.

What the client never does: interpret a tool's result (``call_tool`` answers the raw JSON-RPC
result object: ``isError``, ``structuredContent`` and ``_meta`` are the caller's to read), retry a
request, put the server's text (an error message, its stderr) into an error's JSON form, or run two
requests at once.

Sections, in the order data flows:
    1. Limits and constants    4. The bounded channel
    2. Errors                  5. Handshake and listing
    3. The server process      6. The client
"""
from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Final, Mapping, Sequence

_HERE: Final = Path(__file__).resolve().parent
if not __package__:  # by path from a checkout: the repository root (the core) and this folder
    for _path in (str(_HERE.parent), str(_HERE)):
        if _path not in sys.path:
            sys.path.insert(0, _path)

import tool_dispatcher  # noqa: E402
from tool_dispatcher import CatalogError, JsonPolicy, error_specs  # noqa: E402

__all__ = [
    "CAPABILITIES_KEY", "CLIENT_CATALOG", "Channel", "ClientError", "DEFAULT_ENVIRONMENT", "IDEMPOTENCY_KEY_META",
    "LEGACY_VERSIONS", "MAX_ENVIRONMENT_NAMES", "is_environment_names",
    "Limits", "McpClient", "MODERN_VERSION", "PROTOCOL_VERSION_KEY", "RECEIPT_META", "Session", "handshake",
    "list_tools", "server_environment", "spawn", "stop",
]

# ============================================================================================
# 1. Limits and constants
# ============================================================================================

MAX_LINE_BYTES: Final = 1_048_576  # one JSON-RPC message: a page of tools at the schema limit each
MAX_MESSAGES: Final = 256  # lines read while waiting for one answer, notifications included
MAX_BYTES: Final = 16_777_216  # bytes read while waiting for one answer
MAX_PAGES: Final = 32  # pages of one tools/list reading
MAX_CURSOR_LENGTH: Final = 1_024  # an opaque cursor is echoed back to the server: bounded
MAX_REQUEST_ID_LENGTH: Final = 256  # a server request's string id is echoed in our answer: bounded
MAX_TOOL_NAME_LENGTH: Final = 128  # MCP's bound on a tool name
# Containers deep in one message: far above a schema's own limit, so that a too-deep schema is
# refused by name, for its one tool, by the compiler; far below what the interpreter can decode.
MAX_MESSAGE_DEPTH: Final = 128
MAX_ERROR_MESSAGE: Final = 1_024  # characters of a JSON-RPC error's message kept (server text: never echoed)
# Requests whose deadline passed and whose answer may still come: each late answer is read past
# once. A server that leaves more than this many unanswered is no peer to keep talking to.
MAX_ABANDONED: Final = 64
STDERR_TAIL_BYTES: Final = 4_096  # the end of the server's stderr kept for diagnostics
DEFAULT_TIMEOUT: Final = 20  # seconds for start(): the process and the handshake
DEFAULT_CALL_TIMEOUT: Final = 30  # seconds for a listing when the caller names no deadline
EXIT_GRACE: Final = 2.0  # seconds the server gets to exit after its stdin closes, before SIGTERM
TERM_GRACE: Final = 1.0  # seconds it gets after SIGTERM, before its group is killed
# Seconds to wait for the server's exit status once its output has ended, to tell a server that
# exited (with a failure status) from one that closed its output.
EXIT_STATUS_WAIT: Final = 1.0
# Seconds between looks at whether the server still runs, while its output is silent: a child of
# its may hold the pipe open after it left, and no end of output would ever come.
EXIT_POLL: Final = 0.05
READ_CHUNK: Final = 65_536
# Chunks read before the client asks for them: past this, the reader waits and so does a server
# that floods its output (16 x 64 KiB), instead of the client's memory filling at pipe speed.
MAX_READ_AHEAD: Final = 16

MODERN_VERSION: Final = "2026-07-28"
LEGACY_VERSIONS: Final = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")  # newest first: our offer
# What start(protocol=...) accepts: an era, both ("auto": discover, then initialize if the server
# answers it with an error), or one version, which is then the only one accepted.
PROTOCOLS: Final = frozenset({"auto", "modern", "legacy", MODERN_VERSION, *LEGACY_VERSIONS})
PROTOCOL_VERSION_KEY: Final = "io.modelcontextprotocol/protocolVersion"
CAPABILITIES_KEY: Final = "io.modelcontextprotocol/clientCapabilities"
SERVER_INFO_KEY: Final = "io.modelcontextprotocol/serverInfo"
# The two _meta keys this project's servers and hooks agree on (vendor keys: MCP passes them to
# the server's handler unchanged). The client sends what the caller puts in `meta` and reads none.
IDEMPOTENCY_KEY_META: Final = "dev.tool-dispatcher/idempotency-key"  # in a tools/call request's params._meta
RECEIPT_META: Final = "dev.tool-dispatcher/receipt"  # in a tools/call result's _meta: the server's own receipt
RESERVED_META_LABELS: Final = frozenset({"modelcontextprotocol", "mcp"})  # a prefix's second label: MCP's own
CLIENT_INFO: Final = MappingProxyType({"name": "tool-dispatcher-mcp-bridge", "version": "1"})
# Requests from the server answered with an empty result: a ping must be answered at once (MCP).
# Any other (sampling, roots, elicitation) needs a capability this client never declares: refused.
EMPTY_RESULT_REQUESTS: Final = frozenset({"ping"})
METHOD_NOT_FOUND: Final = MappingProxyType({"code": -32601, "message": "Method not found"})
CANCEL_REASON: Final = "The client's deadline passed."
TOOL_NAME: Final = re.compile(r"[A-Za-z0-9_.-]{1,%d}" % MAX_TOOL_NAME_LENGTH)

# A server is a third party: it starts with a minimal environment, never the whole of its host's
# (which holds the host's keys and tokens). What every server gets, when the host has it: the
# names the official MCP SDKs' stdio clients pass on by default (POSIX; Windows has its own), the
# locale and time zone, the temporary folder, the Python settings that keep a Python server from
# writing bytecode beside its source and decode its stdio as the host does, and the interpreter a
# version manager picks (PYENV_VERSION: a server started as "python" runs on the host's). Anything else a
# server needs, the host names (pass-through: McpClient.start(env_names=...), import --env, the
# guard's servers[].env); a named variable the host does not have is left out.
DEFAULT_ENVIRONMENT: Final = (
    ("APPDATA", "HOMEDRIVE", "HOMEPATH", "LOCALAPPDATA", "PATH", "PATHEXT", "PROCESSOR_ARCHITECTURE",
     "SYSTEMDRIVE", "SYSTEMROOT", "TEMP", "USERNAME", "USERPROFILE") if os.name == "nt" else
    ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER")
) + ("LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "PYTHONDONTWRITEBYTECODE", "PYTHONIOENCODING", "PYTHONUTF8",
     "PYENV_VERSION")
ENVIRONMENT_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")  # a variable's name, as a shell writes one
MAX_ENVIRONMENT_NAMES: Final = 64  # variables a host passes to one server by name

# Listings may hold floats (a `number` bound, a default of 0.5) and so may results: kept as floats.
# A number schema or a number field takes them; where an integer is declared, the compiler or the
# output contract refuses them by name for that one tool, never the decoder the whole message.
# Integers stay bounded in digits, text stays portable, duplicate keys refuse the message.
MESSAGE_JSON: Final = JsonPolicy("mcp-message", tool_dispatcher.finite_float, tool_dispatcher.short_int,
                                 portable_text=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    """What the client reads from one server. Per request: from the request's sending to its
    answer. In total: over the connection's life (None: no bound, for a long-lived client)."""

    line_bytes: int = MAX_LINE_BYTES
    request_messages: int = MAX_MESSAGES
    request_bytes: int = MAX_BYTES
    total_messages: int | None = None
    total_bytes: int | None = None
    read_ahead_chunks: int = MAX_READ_AHEAD
    stderr_tail_bytes: int = STDERR_TAIL_BYTES


# ============================================================================================
# 2. Errors
# ============================================================================================

CLIENT_CATALOG: Final = MappingProxyType({
    **error_specs(
        "client", False,
        CLIENT_SPAWN="The server command could not be started.",
        CLIENT_CLOSED="The server closed its output before answering.",
        CLIENT_SERVER_EXITED="The server exited with a failure status before answering.",
        CLIENT_LINE_TOO_LONG="A line from the server exceeds the line limit.",
        CLIENT_TOO_MANY_MESSAGES="The server sent more messages than the client reads.",
        CLIENT_TOO_MUCH_DATA="The server sent more bytes than the client reads.",
        CLIENT_JSON="A message from the server is not strict JSON.",
        CLIENT_PROTOCOL="A message from the server is not the JSON-RPC answer expected.",
        CLIENT_PROTOCOL_VERSION="The server speaks no protocol version this client speaks.",
        CLIENT_NO_TOOLS="The server does not declare the tools capability.",
        CLIENT_SERVER_ERROR="The server answered the request with a JSON-RPC error.",
        CLIENT_PAGINATION="The server's pagination repeats a cursor or exceeds the page limit.",
        CLIENT_TOO_MANY_TOOLS="The server lists more tools than the client reads.",
        CLIENT_REQUEST_INVALID="The request cannot be sent: a tool name, arguments or _meta out of bounds.",
        CLIENT_DEADLINE_PASSED="The deadline had passed before the request was sent; nothing was sent.",
        CLIENT_TIMEOUT="The server did not answer before the deadline; what the request did is unknown.",
        CLIENT_BROKEN="The connection is no longer usable: an earlier fault, or stop(). Start a new client.",
    ),
    **error_specs("client", True, CLIENT_BUSY="Another request is in flight on this client; nothing was sent."),
})


class ClientError(CatalogError):
    """A client failure: a code from CLIENT_CATALOG. What the server said is kept in attributes for
    the host to read (bounded) and never enters the JSON form, which adds only integers and codes:
    ``rpc_code`` (CLIENT_SERVER_ERROR), ``json_code`` (CLIENT_JSON), ``exit_status``
    (CLIENT_SERVER_EXITED). ``method`` is the method of the request the server answered with a
    JSON-RPC error (this client's own text, never the server's)."""

    CATALOG = CLIENT_CATALOG

    def __init__(self, code: str, *, rpc_code: int | None = None, server_message: str | None = None,
                 json_error: CatalogError | None = None, exit_status: int | None = None) -> None:
        super().__init__(code)
        self.rpc_code = rpc_code  # the JSON-RPC error's integer code
        self.server_message = server_message  # its message, at most MAX_ERROR_MESSAGE characters
        self.json_error = json_error  # the core decoder's BoundaryError (a JSON_* code)
        self.exit_status = exit_status  # the server's exit status: negative for a signal
        self.stderr_tail: str | None = None  # set on a failure of McpClient.start(): the server is gone
        self.method: str | None = None  # CLIENT_SERVER_ERROR: the request's method ("server/discover")

    def details(self) -> dict[str, Any]:
        found = {"rpc_code": self.rpc_code, "json_code": None if self.json_error is None else self.json_error.code,
                 "exit_status": self.exit_status}
        return {key: value for key, value in found.items() if value is not None}


# ============================================================================================
# 3. The server process
# ============================================================================================


def is_environment_names(names: Any) -> bool:
    """Whether ``names`` is a host's pass-through list: a list or tuple of at most
    MAX_ENVIRONMENT_NAMES variable names (ENVIRONMENT_NAME), none twice."""
    return (type(names) in (list, tuple) and len(names) <= MAX_ENVIRONMENT_NAMES
            and all(type(name) is str and ENVIRONMENT_NAME.fullmatch(name) for name in names)
            and len(set(names)) == len(names))


def server_environment(names: Sequence[str] = (), source: Mapping[str, str] | None = None) -> dict[str, str]:
    """A server's environment: DEFAULT_ENVIRONMENT and the host's ``names``, each with its value in
    ``source`` (os.environ by default) when it has one. A value that begins with "()" (a shell
    function a shell exported) is left out, as the SDKs leave it out."""
    if not is_environment_names(names):
        raise ValueError("environment names: at most %d variable names, none twice" % MAX_ENVIRONMENT_NAMES)
    source = os.environ if source is None else source
    return {name: source[name] for name in (*DEFAULT_ENVIRONMENT, *names)
            if name in source and not source[name].startswith("()")}


def spawn(command: Sequence[str], *, env_names: Sequence[str] = ()) -> subprocess.Popen[bytes]:
    """Start the server with three pipes, in a group of its own (POSIX), so that stop() ends the
    server's children with it; its environment is server_environment(env_names), never the whole
    of this process's."""
    if type(command) not in (list, tuple) or not command or any(type(part) is not str for part in command):
        raise ClientError("CLIENT_SPAWN")  # a program and its arguments, each a string
    environment = server_environment(env_names)
    try:
        return subprocess.Popen(list(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True, env=environment)
    except (OSError, ValueError):
        raise ClientError("CLIENT_SPAWN") from None


def _signal_group(process: subprocess.Popen[bytes], signum: int) -> None:
    """Signal the server's process group, and the server itself (a process started in no group of
    its own, as a test's may be): the server is the process started, and once it has left, a child
    of its that holds the pipes open speaks for no one. The group outlives the server while it has
    members, so its id names no other process then (POSIX; elsewhere, the process only)."""
    if hasattr(os, "killpg"):
        try:
            os.killpg(process.pid, signum)
        except OSError:
            pass  # no member left
    if process.poll() is None:
        process.send_signal(signum)


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    _signal_group(process, getattr(signal, "SIGKILL", signal.SIGTERM))


class StderrTail:
    """The last `limit` bytes the server wrote to its stderr, read by a thread of its own so that
    a server that writes a lot there never blocks on a full pipe."""

    def __init__(self, stream: Any, limit: int = STDERR_TAIL_BYTES) -> None:
        self.limit = limit
        self._data = bytearray()
        self._lock = threading.Lock()
        self.thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self.thread.start()

    def _read(self, stream: Any) -> None:
        try:
            while stream is not None:
                chunk = os.read(stream.fileno(), READ_CHUNK)
                if not chunk:
                    break
                with self._lock:
                    self._data += chunk
                    if len(self._data) > self.limit:
                        del self._data[:len(self._data) - self.limit]
        except (OSError, ValueError):
            pass

    def text(self) -> str:
        """The tail decoded as UTF-8, any invalid byte (a character cut at the start) replaced."""
        with self._lock:
            return bytes(self._data).decode("utf-8", errors="replace")


def stop(process: subprocess.Popen[bytes], channel: Channel | None = None, tail: StderrTail | None = None, *,
         exit_grace: float = EXIT_GRACE, term_grace: float = TERM_GRACE) -> None:
    """Close the server's input and give it exit_grace to leave; then SIGTERM its group and give
    it term_grace; then SIGKILL the group. Reap it either way, and end what is left of its group."""
    if channel is None:
        _close_input(process)
    else:
        channel.close()
    try:
        process.wait(timeout=exit_grace)
    except subprocess.TimeoutExpired:
        _signal_group(process, signal.SIGTERM)
        try:
            process.wait(timeout=term_grace)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            process.wait()
    _kill_group(process)
    threads = ([channel.writer, channel.reader] if channel is not None else []) + ([tail.thread] if tail else [])
    for thread in threads:
        thread.join(timeout=max(exit_grace, EXIT_POLL))
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            stream.close()


def _close_input(process: subprocess.Popen[bytes]) -> None:
    try:
        if process.stdin is not None:
            process.stdin.close()
    except (OSError, ValueError):
        pass  # a broken pipe on the last flush: the server left first


# ============================================================================================
# 4. The bounded channel
# ============================================================================================


class Channel:
    """Newline-delimited JSON-RPC over a child's pipes, every read bounded and under a deadline."""

    def __init__(self, process: subprocess.Popen[bytes], *, limits: Limits = Limits()) -> None:
        self.process = process
        self.limits = limits
        self.buffer = b""
        self.total = 0
        self.messages = 0
        self.request_total = 0  # what was read since the last request was sent
        self.request_messages = 0
        self.next_id = 0
        self.tools_changed = False  # the server announced a changed tool list since the last listing
        self.abandoned: set[int] = set()  # requests whose deadline passed: their late answers are read past
        self.chunks: queue.Queue[bytes] = queue.Queue(maxsize=limits.read_ahead_chunks)
        self.closing = threading.Event()  # close(): what the server still writes is read and dropped
        # A thread reads, so that a silent server meets the deadline on every platform (pipes
        # cannot be polled on Windows); it ends at EOF, when the child exits or is killed.
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        # A thread writes too: a server that stops reading its input fills the pipe, and a write
        # then waits for ever, past any deadline. Only this thread touches the server's input; an
        # empty message (close) closes it.
        self.outbox: queue.Queue[bytes] = queue.Queue()
        self.writer = threading.Thread(target=self._write, daemon=True)
        self.writer.start()

    def _read(self) -> None:
        stream = self.process.stdout
        try:
            while stream is not None:
                chunk = os.read(stream.fileno(), READ_CHUNK)
                if not chunk:
                    break
                if not self.closing.is_set():
                    self.chunks.put(chunk)  # waits while the read-ahead is full
        except (OSError, ValueError):
            pass
        finally:
            if not self.closing.is_set():
                self.chunks.put(b"")

    def _write(self) -> None:
        stdin = self.process.stdin
        try:
            while stdin is not None:
                data = self.outbox.get()
                if not data:
                    break
                stdin.write(data)
                stdin.flush()
        except (OSError, ValueError):
            pass  # the server closed its input: it reads nothing more, and its output says the rest
        finally:
            _close_input(self.process)

    def close(self) -> None:
        """Close the server's input after what is queued, and drop what it still writes."""
        self.outbox.put(b"")  # a writer stuck on a full pipe meets the kill
        self.closing.set()
        _drain(self.chunks)  # a reader waiting on a full read-ahead goes on, and drops the rest

    def encode(self, message: Mapping[str, Any]) -> bytes:
        """One message's line: ASCII JSON, a final newline; CLIENT_REQUEST_INVALID if it holds
        anything json.dumps would change or refuse (see _is_plain_json) or is longer than a line."""
        if not _is_plain_json(message):
            raise ClientError("CLIENT_REQUEST_INVALID")
        text = json.dumps(message, ensure_ascii=True, separators=(",", ":"))
        if len(text) >= self.limits.line_bytes:
            raise ClientError("CLIENT_REQUEST_INVALID")
        return text.encode("ascii") + b"\n"

    def send(self, message: Mapping[str, Any]) -> None:
        """Queue one message for the writer; never waits on the server (the reads hold the deadline)."""
        self.outbox.put(self.encode(message))

    def request(self, method: str, params: Mapping[str, Any], *, deadline: float) -> Any:
        """Send one request; answer its result, or raise CLIENT_SERVER_ERROR on an error answer.
        A request whose deadline passes is abandoned: its answer, should it come, is read past."""
        line = self.encode({"jsonrpc": "2.0", "id": self.next_id + 1, "method": method, "params": params})
        self.next_id += 1
        self.request_total = self.request_messages = 0
        self.outbox.put(line)
        try:
            return self._answer(self.next_id, deadline)
        except ClientError as error:
            if error.code == "CLIENT_TIMEOUT":
                self.abandoned.add(self.next_id)
            elif error.code == "CLIENT_SERVER_ERROR":
                error.method = method  # which request the server refused: this client's own name for it
            raise

    def _answer(self, request_id: int, deadline: float) -> Any:
        while True:
            message = self.receive(deadline)
            if self._read_past(message):
                continue
            if type(message.get("id")) is not int or message["id"] != request_id:
                raise ClientError("CLIENT_PROTOCOL")
            if message.keys() == {"jsonrpc", "id", "error"}:
                raise _error_answer(message["error"])
            if message.keys() != {"jsonrpc", "id", "result"} or type(message["result"]) is not dict:
                raise ClientError("CLIENT_PROTOCOL")
            return message["result"]

    def _read_past(self, message: Any) -> bool:
        """Whether a message is one read past rather than an answer: a notification (log, progress,
        list_changed, noted), a request from the server (answered), the late answer of an abandoned
        request. A message that is no JSON-RPC message is CLIENT_PROTOCOL."""
        if type(message) is not dict or message.get("jsonrpc") != "2.0":
            raise ClientError("CLIENT_PROTOCOL")
        if "id" not in message and "method" in message:
            if message["method"] == "notifications/tools/list_changed":
                self.tools_changed = True  # the caller lists again before its next call
            return True  # a notification: read past, counted
        if "method" in message:
            if not _is_request_id(message["id"]):
                raise ClientError("CLIENT_PROTOCOL")
            self.send(_answer_request(message))
            return True  # a request from the server (ping, roots): answered, not served
        if type(message.get("id")) is int and message["id"] in self.abandoned:
            self.abandoned.discard(message["id"])
            return True  # the late answer of a request whose deadline passed: read past, once
        return False

    def settle(self) -> None:
        """Read what the server sent since the last answer, never waiting: a tool list it announced
        changed between two requests is noted before the next is sent. Counted under the last
        request's bounds; an answer nobody awaits is CLIENT_PROTOCOL. The end of the output is left
        for the next request to meet."""
        while True:
            line = self._line(time.monotonic(), wait=False)
            if line is None:
                return
            if not self._read_past(self._decode(line)):
                raise ClientError("CLIENT_PROTOCOL")

    def notify(self, method: str, params: Mapping[str, Any] | None = None) -> None:
        self.send({"jsonrpc": "2.0", "method": method} if params is None else
                  {"jsonrpc": "2.0", "method": method, "params": params})

    def receive(self, deadline: float) -> Any:
        return self._decode(self.line(deadline))

    def _decode(self, line: bytes) -> Any:
        try:
            return tool_dispatcher.decode_strict_json(line, max_bytes=self.limits.line_bytes,
                                                      max_depth=MAX_MESSAGE_DEPTH, policy=MESSAGE_JSON)
        except CatalogError as error:
            raise ClientError("CLIENT_JSON", json_error=error) from None

    def line(self, deadline: float) -> bytes:
        found = self._line(deadline, wait=True)
        if found is None:  # never: a waiting read answers a line or raises
            raise ClientError("CLIENT_PROTOCOL")
        return found

    def _line(self, deadline: float, *, wait: bool) -> bytes | None:
        """The next non-blank line; without ``wait``, None when no whole line has arrived yet (the
        end of the output is then left for a waiting read to meet)."""
        while True:
            end = self.buffer.find(b"\n")
            if end >= 0:
                line, self.buffer = self.buffer[:end], self.buffer[end + 1:]
                self.messages += 1
                self.request_messages += 1
                if self.request_messages > self.limits.request_messages or _over(self.messages,
                                                                                 self.limits.total_messages):
                    raise ClientError("CLIENT_TOO_MANY_MESSAGES")
                if len(line) > self.limits.line_bytes:
                    raise ClientError("CLIENT_LINE_TOO_LONG")
                line = line[:-1] if line.endswith(b"\r") else line
                if line.strip():
                    return line
                continue
            if len(self.buffer) > self.limits.line_bytes:
                raise ClientError("CLIENT_LINE_TOO_LONG")  # before the rest of the line arrives
            if wait:
                self.buffer += self._chunk(deadline)
                continue
            try:
                chunk = self.chunks.get_nowait()
            except queue.Empty:
                return None
            if not chunk:
                self.chunks.put(b"")
                return None
            self._count(chunk)
            self.buffer += chunk

    def _chunk(self, deadline: float) -> bytes:
        while True:
            if self.closing.is_set():
                raise ClientError("CLIENT_BROKEN")  # stopped while a request waited: no answer will be read
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ClientError("CLIENT_TIMEOUT")
            try:
                chunk = self.chunks.get(timeout=min(remaining, EXIT_POLL))
                break
            except queue.Empty:
                if self.process.poll() is not None:
                    _kill_group(self.process)  # what it wrote is still read, then the end of output
        if not chunk:
            self.chunks.put(b"")  # stay closed for any later read
            raise self._ended(deadline)
        self._count(chunk)
        return chunk

    def _count(self, chunk: bytes) -> None:
        self.total += len(chunk)
        self.request_total += len(chunk)
        if self.request_total > self.limits.request_bytes or _over(self.total, self.limits.total_bytes):
            raise ClientError("CLIENT_TOO_MUCH_DATA")

    def _ended(self, deadline: float) -> ClientError:
        """The output ended before the answer: a server that exited with a failure status (a crash,
        a missing setting) is told from one that closed its output, whose status is 0 or unknown."""
        try:
            status = self.process.wait(timeout=max(0.0, min(EXIT_STATUS_WAIT, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            status = None
        if status is None or status == 0:
            return ClientError("CLIENT_CLOSED")
        return ClientError("CLIENT_SERVER_EXITED", exit_status=status)


def _is_plain_json(value: Any, *, max_depth: int = MAX_MESSAGE_DEPTH) -> bool:
    """Whether a value is JSON as it stands: dicts with str keys, lists, str, int, finite float,
    bool, None, by exact type, at most max_depth containers deep (a cycle is too deep). json.dumps
    would turn a key 1 into "1" and a tuple into a list, and send NaN: the server would read
    another request than the one the caller built. Walked with a stack, not recursion."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        kind = type(item)
        if kind is dict or kind is list:
            if depth >= max_depth:
                return False
            if kind is dict and any(type(key) is not str for key in item):
                return False
            stack.extend((child, depth + 1) for child in (item.values() if kind is dict else item))
        elif kind is float:
            if item != item or item in (float("inf"), float("-inf")):
                return False
        elif kind not in (str, int, bool) and item is not None:
            return False
    return True


def _over(count: int, limit: int | None) -> bool:
    return limit is not None and count > limit


def _is_request_id(value: Any) -> bool:
    """A JSON-RPC id a server may give its request: an integer (never a bool) or a bounded string."""
    return type(value) is int or (type(value) is str and len(value) <= MAX_REQUEST_ID_LENGTH)


def _answer_request(message: Mapping[str, Any]) -> dict[str, Any]:
    method = message["method"]
    if type(method) is str and method in EMPTY_RESULT_REQUESTS:
        return {"jsonrpc": "2.0", "id": message["id"], "result": {}}
    return {"jsonrpc": "2.0", "id": message["id"], "error": dict(METHOD_NOT_FOUND)}


def _error_answer(error: Any) -> ClientError:
    """A JSON-RPC error object (an integer code, never a bool, and a string message) is the
    server's answer; any other `error` is no answer at all."""
    if type(error) is not dict or type(error.get("code")) is not int or type(error.get("message")) is not str:
        return ClientError("CLIENT_PROTOCOL")
    return ClientError("CLIENT_SERVER_ERROR", rpc_code=error["code"], server_message=error["message"][:MAX_ERROR_MESSAGE])


def _drain(chunks: queue.Queue[bytes]) -> None:
    try:
        while True:
            chunks.get_nowait()
    except queue.Empty:
        pass


# ============================================================================================
# 5. Handshake and listing
# ============================================================================================


@dataclass(frozen=True, slots=True)
class Session:
    """What the handshake agreed: the era, the version, and the server's own name and version
    (untrusted text, recorded only when it is short)."""

    era: str  # "modern" or "legacy"
    protocol_version: str
    server_name: str | None
    server_version: str | None

    def params(self, **fields: Any) -> dict[str, Any]:
        """A request's params: 2026-07-28 carries the version and capabilities in every request."""
        if self.era == "modern":
            fields["_meta"] = {**fields.get("_meta", {}), PROTOCOL_VERSION_KEY: self.protocol_version,
                               CAPABILITIES_KEY: {}}
        return fields


Requester = Callable[..., Any]  # request(method, params, *, deadline) -> the result object


def handshake(channel: Any, protocol: str, *, deadline: float) -> Session:
    """The first exchange: server/discover, initialize, or the first and then the second when the
    server answers server/discover with a JSON-RPC error (protocol "auto")."""
    if protocol not in PROTOCOLS:
        raise ValueError("unknown protocol")  # the host's own argument, not the server's
    if protocol in ("auto", "modern", MODERN_VERSION):
        try:
            return _discover(channel, deadline)
        except ClientError as failure:
            if protocol != "auto" or failure.code != "CLIENT_SERVER_ERROR":
                raise
    accepted = LEGACY_VERSIONS if protocol in ("auto", "legacy") else (protocol,)
    return _initialize(channel, accepted, deadline)


def _discover(channel: Any, deadline: float) -> Session:
    result = channel.request("server/discover", {"_meta": {PROTOCOL_VERSION_KEY: MODERN_VERSION, CAPABILITIES_KEY: {}}},
                             deadline=deadline)
    versions = result.get("supportedVersions")
    if type(versions) is not list:
        raise ClientError("CLIENT_PROTOCOL")
    if MODERN_VERSION not in versions:
        raise ClientError("CLIENT_PROTOCOL_VERSION")
    meta = result.get("_meta")
    info = meta.get(SERVER_INFO_KEY) if type(meta) is dict else None
    return Session("modern", MODERN_VERSION, *_server_info(info))


def _initialize(channel: Any, accepted: Sequence[str], deadline: float) -> Session:
    result = channel.request("initialize", {"protocolVersion": accepted[0], "capabilities": {},
                                            "clientInfo": dict(CLIENT_INFO)}, deadline=deadline)
    version = result.get("protocolVersion")
    if type(version) is not str:
        raise ClientError("CLIENT_PROTOCOL")
    if version not in accepted:
        raise ClientError("CLIENT_PROTOCOL_VERSION")
    capabilities = result.get("capabilities")
    if type(capabilities) is not dict:
        raise ClientError("CLIENT_PROTOCOL")  # a required member of the answer
    if type(capabilities.get("tools")) is not dict:
        raise ClientError("CLIENT_NO_TOOLS")  # a server with tools must declare them: it offered none
    channel.notify("notifications/initialized")
    return Session("legacy", version, *_server_info(result.get("serverInfo")))


def _server_info(info: Any) -> tuple[str | None, str | None]:
    """The server's own name and version, when they are short text; untrusted, only recorded."""
    if type(info) is not dict:
        return None, None
    return tuple(  # type: ignore[return-value]
        value if type(value) is str and 0 < len(value) <= tool_dispatcher.MAX_TEXT_LENGTH else None
        for value in (info.get("name"), info.get("version")))


def list_tools(request: Requester, session: Session, *, deadline: float, max_pages: int = MAX_PAGES,
               max_tools: int = tool_dispatcher.MAX_TOOLS) -> list[Any]:
    """Every page of tools/list, following nextCursor; a repeated cursor is a loop, refused. The
    entries are the server's, unchecked: the import's drafting reads them one by one."""
    tools: list[Any] = []
    seen: set[str] = set()
    cursor: str | None = None
    for _ in range(max_pages):
        params = session.params() if cursor is None else session.params(cursor=cursor)
        result = request("tools/list", params, deadline=deadline)
        page = result.get("tools")
        if type(page) is not list:
            raise ClientError("CLIENT_PROTOCOL")
        tools.extend(page)
        if len(tools) > max_tools:
            raise ClientError("CLIENT_TOO_MANY_TOOLS")
        cursor = result.get("nextCursor")
        if cursor is None:
            return tools
        if type(cursor) is not str or not cursor or len(cursor) > MAX_CURSOR_LENGTH or cursor in seen:
            raise ClientError("CLIENT_PAGINATION")
        seen.add(cursor)
    raise ClientError("CLIENT_PAGINATION")


def _is_reserved_meta_key(key: str) -> bool:
    """Whether a _meta key is MCP's own: a prefix (before '/') whose second label is reserved."""
    prefix, slash, _ = key.partition("/")
    labels = prefix.split(".")
    return bool(slash) and len(labels) >= 2 and labels[1] in RESERVED_META_LABELS


# ============================================================================================
# 6. The client
# ============================================================================================


class McpClient:
    """One server over stdio, one request at a time. Build it with McpClient.start().

    The client stays usable after CLIENT_TIMEOUT (the request is abandoned: notifications/cancelled
    is sent, and its answer, should it come late, is read past), after CLIENT_SERVER_ERROR, and
    after the refusals that send nothing (CLIENT_REQUEST_INVALID, CLIENT_DEADLINE_PASSED,
    CLIENT_BUSY). Any other fault breaks it: where the next answer starts is unknown, so every
    later request raises CLIENT_BROKEN; the server runs until stop(). stop() is idempotent; the
    client is a context manager that stops on exit.
    """

    def __init__(self, process: subprocess.Popen[bytes], *, limits: Limits = Limits(),
                 exit_grace: float = EXIT_GRACE, term_grace: float = TERM_GRACE) -> None:
        self._process = process
        self._channel = Channel(process, limits=limits)
        self._tail = StderrTail(process.stderr, limits.stderr_tail_bytes)
        self._grace = (exit_grace, term_grace)
        self._busy = threading.Lock()
        self._stopping = threading.Lock()
        self._stopped = False
        self._broken = False
        self.session: Session | None = None

    @classmethod
    def start(cls, command: Sequence[str], *, protocol: str = "auto", timeout: float = DEFAULT_TIMEOUT,
              limits: Limits = Limits(), exit_grace: float = EXIT_GRACE, term_grace: float = TERM_GRACE,
              env_names: Sequence[str] = ()) -> McpClient:
        """Start the server and agree a protocol with it within `timeout` seconds; on any failure
        the server is stopped and the ClientError carries its stderr tail (``stderr_tail``). The
        server's environment is DEFAULT_ENVIRONMENT and the variables ``env_names`` names, taken
        from this process's (server_environment)."""
        if protocol not in PROTOCOLS:
            raise ValueError("unknown protocol")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 3600:
            raise ValueError("timeout out of range")
        if not is_environment_names(env_names):
            raise ValueError("environment names: at most %d variable names, none twice" % MAX_ENVIRONMENT_NAMES)
        deadline = time.monotonic() + timeout
        client = cls(spawn(command, env_names=env_names), limits=limits, exit_grace=exit_grace,
                     term_grace=term_grace)
        try:
            client.session = handshake(client._channel, protocol, deadline=deadline)
        except ClientError as error:
            client.stop()
            error.stderr_tail = client.stderr_tail()
            raise
        except BaseException:
            client.stop()
            raise
        return client

    # -- requests --------------------------------------------------------------------------------

    def list_tools(self, *, deadline: float | None = None, max_pages: int = MAX_PAGES,
                   max_tools: int = tool_dispatcher.MAX_TOOLS) -> list[Any]:
        """Every page of tools/list (the server's entries, unchecked), each page under `deadline`
        (monotonic seconds; DEFAULT_CALL_TIMEOUT from now when None)."""
        if deadline is None:
            deadline = time.monotonic() + DEFAULT_CALL_TIMEOUT
        self._channel.tools_changed = False  # this listing is read after the announcement
        return list_tools(self._request, self._session(), deadline=deadline, max_pages=max_pages, max_tools=max_tools)

    def call_tool(self, name: str, arguments: Mapping[str, Any], *, meta: Mapping[str, Any] | None = None,
                  deadline: float) -> dict[str, Any]:
        """tools/call: the raw JSON-RPC result object, or a ClientError. `meta` goes into the
        request's params._meta (a vendor key such as IDEMPOTENCY_KEY_META); MCP's own keys are the
        client's. `deadline` is on time.monotonic()'s clock."""
        session = self._session()
        if type(name) is not str or TOOL_NAME.fullmatch(name) is None or type(arguments) is not dict:
            raise ClientError("CLIENT_REQUEST_INVALID")
        if meta is not None and (type(meta) is not dict or any(
                type(key) is not str or _is_reserved_meta_key(key) for key in meta)):
            raise ClientError("CLIENT_REQUEST_INVALID")
        fields: dict[str, Any] = {"name": name, "arguments": arguments}
        if meta:
            fields["_meta"] = dict(meta)
        return self._request("tools/call", session.params(**fields), deadline=deadline)

    def settle(self) -> None:
        """Read, without waiting, what the server sent since the last answer (a tool list it
        announced changed meanwhile sets ``tools_changed``); a ClientError breaks the client, as
        in a request. Nothing is sent but the answers to the server's own requests."""
        if self._broken:
            raise ClientError("CLIENT_BROKEN")
        if not self._busy.acquire(blocking=False):
            raise ClientError("CLIENT_BUSY")
        try:
            self._channel.settle()
        except BaseException:
            self._broken = True  # where the next answer starts is unknown
            raise
        finally:
            self._busy.release()

    def _session(self) -> Session:
        if self.session is None:
            raise ClientError("CLIENT_BROKEN")  # never started, or its start failed
        return self.session

    def _request(self, method: str, params: Mapping[str, Any], *, deadline: float) -> Any:
        if isinstance(deadline, bool) or not isinstance(deadline, (int, float)):
            raise ValueError("deadline must be time.monotonic() seconds")
        if self._broken:
            raise ClientError("CLIENT_BROKEN")
        if not self._busy.acquire(blocking=False):
            raise ClientError("CLIENT_BUSY")
        try:
            if time.monotonic() >= deadline:
                raise ClientError("CLIENT_DEADLINE_PASSED")
            return self._channel.request(method, params, deadline=deadline)
        except ClientError as error:
            if error.code == "CLIENT_TIMEOUT":
                self._abandon()
            elif error.code == "CLIENT_SERVER_EXITED":
                self._broken = True
                self._tail.thread.join(timeout=EXIT_STATUS_WAIT)  # its last words, before the caller asks
            elif error.code not in ("CLIENT_SERVER_ERROR", "CLIENT_DEADLINE_PASSED", "CLIENT_REQUEST_INVALID"):
                self._broken = True
            raise
        except BaseException:
            self._broken = True  # interrupted mid-read: where the next answer starts is unknown
            raise
        finally:
            self._busy.release()

    def _abandon(self) -> None:
        """Tell the server the request is given up (it may answer all the same: MCP allows the race)."""
        request_id = self._channel.next_id
        if len(self._channel.abandoned) > MAX_ABANDONED:
            self._broken = True
        else:
            self._channel.notify("notifications/cancelled",
                                 self._session().params(requestId=request_id, reason=CANCEL_REASON))

    # -- state and stopping ------------------------------------------------------------------------

    @property
    def tools_changed(self) -> bool:
        """Whether the server announced a changed tool list (notifications/tools/list_changed)
        since the last list_tools(): notifications are read while an answer is awaited."""
        return self._channel.tools_changed

    @property
    def usable(self) -> bool:
        """Whether a request may still be sent (not broken, not stopped)."""
        return not self._broken

    @property
    def running(self) -> bool:
        """Whether the server may still answer: the client is usable and its process has not exited."""
        return not self._broken and self._process.poll() is None

    @property
    def exit_status(self) -> int | None:
        """The server's exit status once it has been reaped (negative: the signal that ended it)."""
        return self._process.returncode

    def stderr_tail(self) -> str:
        """The last bytes of the server's stderr (Limits.stderr_tail_bytes), decoded with
        replacement. The server's own text: for a person's diagnosis, never for a model."""
        return self._tail.text()

    def stop(self) -> None:
        """Close stdin, wait exit_grace; SIGTERM the group, wait term_grace; SIGKILL the group;
        reap. Idempotent and safe from any thread; a request in flight then ends in a ClientError."""
        with self._stopping:
            if self._stopped:
                return
            self._stopped = True
            self._broken = True
            exit_grace, term_grace = self._grace
            stop(self._process, self._channel, self._tail, exit_grace=exit_grace, term_grace=term_grace)

    def __enter__(self) -> McpClient:
        return self

    def __exit__(self, *_exc: Any) -> None:
        self.stop()
