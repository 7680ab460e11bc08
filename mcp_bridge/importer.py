"""The MCP bridge's import: list an MCP server's tools over stdio and write a contract draft and a report.

The server is untrusted. It is started as a child process (its stderr discarded, never echoed);
every line it writes is bounded (line length, message count, total bytes, one deadline for the
whole import) and decoded by the core's strict decoder; the listing is read twice, page by page,
and must not change between the two readings. Each tool's schemas go through the exact subset
compiler: a tool whose schemas compile becomes a ``tool-contracts-v1`` entry (its schemas in
normalized form, the server's own digests in its provenance), a tool that does not is listed in
the report with its code. Nothing in the draft is trusted: every tool is a ``write`` unless the
host names it read-only, and the server's annotations are kept as hints only.

Both protocol eras: 2026-07-28 (``server/discover``, then per-request ``_meta``) and the
``initialize`` handshake of earlier revisions; ``--protocol auto`` tries the first and falls back.

Exit status: 0 every tool drafted; 1 the draft and the report were written but some tools were
refused; 2 the import failed (``{"passed": false, "error": {...}}`` on stdout, nothing written).

Sections, in the order data flows:
    1. Limits and constants    4. Handshake and listing
    2. Errors                  5. Drafting
    3. The bounded channel     6. CLI
"""
from __future__ import annotations

import json
import os
import queue
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final, Mapping, Sequence

_HERE: Final = Path(__file__).resolve().parent
for _path in (str(_HERE.parent), str(_HERE)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import tool_dispatcher  # noqa: E402
from tool_dispatcher import (  # noqa: E402
    BoundaryError, CatalogError, CliParser, JsonPolicy, emit_json, error_specs, is_identifier,
)


# ============================================================================================
# 1. Limits and constants
# ============================================================================================

MAX_LINE_BYTES: Final = 1_048_576  # one JSON-RPC message: a page of tools at the schema limit each
MAX_MESSAGES: Final = 256  # lines read in one import, notifications included
MAX_TOTAL_BYTES: Final = 16_777_216  # everything the server may write in one import
MAX_PAGES: Final = 32  # pages of one tools/list reading
MAX_CURSOR_LENGTH: Final = 1_024  # an opaque cursor is echoed back to the server: bounded
MAX_REQUEST_ID_LENGTH: Final = 256  # a server request's string id is echoed in our answer: bounded
# Containers deep in one message: far above a schema's own limit, so that a too-deep schema is
# refused by name, for its one tool, by the compiler; far below what the interpreter can decode.
MAX_MESSAGE_DEPTH: Final = 128
DEFAULT_TIMEOUT: Final = 20  # seconds for the whole import, process start included
MAX_TIMEOUT: Final = 600
EXIT_GRACE: Final = 2.0  # seconds the server gets to exit after its stdin closes, before it is killed
# Seconds between looks at whether the server still runs, while its output is silent: a child of
# its may hold the pipe open after it left, and no end of output would ever come.
EXIT_POLL: Final = 0.05
READ_CHUNK: Final = 65_536
# Chunks read before the import asks for them: past this, the reader waits and so does a server
# that floods its output (16 x 64 KiB), instead of the import's memory filling at pipe speed.
MAX_READ_AHEAD: Final = 16

MODERN_VERSION: Final = "2026-07-28"
LEGACY_VERSIONS: Final = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")  # newest first: our offer
PROTOCOL_VERSION_KEY: Final = "io.modelcontextprotocol/protocolVersion"
CAPABILITIES_KEY: Final = "io.modelcontextprotocol/clientCapabilities"
SERVER_INFO_KEY: Final = "io.modelcontextprotocol/serverInfo"
CLIENT_INFO: Final = MappingProxyType({"name": "tool-dispatcher-mcp-import", "version": "1"})
REPORT_FORMAT: Final = "mcp-import-report-v1"
# Requests from the server answered with an empty result: a ping must be answered at once (MCP).
# Any other (sampling, roots, elicitation) needs a capability the import never declares: refused.
EMPTY_RESULT_REQUESTS: Final = frozenset({"ping"})
METHOD_NOT_FOUND: Final = MappingProxyType({"code": -32601, "message": "Method not found"})
DEFAULT_ROLE: Final = "mcp.tools"
HINTS: Final = MappingProxyType({  # the server's annotation -> the draft's hint field
    "readOnlyHint": "read_only", "destructiveHint": "destructive", "idempotentHint": "idempotent",
    "openWorldHint": "open_world",
})

# Schemas may hold floats (a `number` bound, a default of 0.5): the listing keeps them, so that
# the compiler refuses that one tool by name instead of the decoder refusing the whole listing.
# Integers stay bounded in digits, text stays portable, duplicate keys refuse the whole message.
LISTING_JSON: Final = JsonPolicy("mcp-listing", tool_dispatcher.finite_float, tool_dispatcher.short_int,
                                 portable_text=True)

# ============================================================================================
# 2. Errors
# ============================================================================================

IMPORT_CATALOG: Final = MappingProxyType({
    **error_specs(
        "import", False,
        IMPORT_SPAWN="The server command could not be started.",
        IMPORT_CLOSED="The server closed its output before answering.",
        IMPORT_LINE_TOO_LONG="A line from the server exceeds the line limit.",
        IMPORT_TOO_MANY_MESSAGES="The server sent more messages than the import reads.",
        IMPORT_TOO_MUCH_DATA="The server sent more bytes than the import reads.",
        IMPORT_PROTOCOL="A message from the server is not the JSON-RPC answer expected.",
        IMPORT_PROTOCOL_VERSION="The server speaks no protocol version this import speaks.",
        IMPORT_SERVER_ERROR="The server answered a request with an error.",
        IMPORT_PAGINATION="The server's pagination repeats a cursor or exceeds the page limit.",
        IMPORT_LISTING_CHANGED="The server's tool listing changed between two readings.",
        IMPORT_NO_TOOLS="The server does not declare the tools capability.",
        IMPORT_DUPLICATE_TOOL="The server lists two tools with the same name.",
        IMPORT_TOO_MANY_TOOLS="The server lists more tools than a contracts file holds.",
        IMPORT_UNWRITABLE="The draft or the report could not be written.",
        TOOL_MALFORMED="A tool entry is not an object with a name and an input schema.",
        TOOL_NAME_INVALID="A tool name is outside the alphabet or the length providers accept.",
        TOOL_DESCRIPTION_TOO_LONG="A tool description exceeds its length limit.",
    ),
    **error_specs("import", True, IMPORT_TIMEOUT="The server did not answer in time."),
})


class ImportFailure(CatalogError):
    """The import as a whole failed; nothing is written."""

    CATALOG = IMPORT_CATALOG


# ============================================================================================
# 3. The bounded channel
# ============================================================================================


class Channel:
    """Newline-delimited JSON-RPC over a child's pipes, every read bounded and under one deadline."""

    def __init__(self, process: subprocess.Popen[bytes], deadline: float, *, max_line: int = MAX_LINE_BYTES,
                 max_messages: int = MAX_MESSAGES, max_total: int = MAX_TOTAL_BYTES) -> None:
        self.process = process
        self.deadline = deadline
        self.max_line = max_line
        self.max_messages = max_messages
        self.max_total = max_total
        self.buffer = b""
        self.total = 0
        self.messages = 0
        self.next_id = 0
        self.chunks: queue.Queue[bytes] = queue.Queue(maxsize=MAX_READ_AHEAD)
        self.closing = threading.Event()  # stop(): what the server still writes is read and dropped
        # A thread reads, so that a silent server meets the deadline on every platform (pipes
        # cannot be polled on Windows); it ends at EOF, when the child exits or is killed.
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        # A thread writes too: a server that stops reading its input fills the pipe, and a write
        # then waits for ever, past any deadline. Only this thread touches the server's input; an
        # empty message (stop) closes it.
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
                    self.chunks.put(chunk)  # waits while MAX_READ_AHEAD chunks are unread
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

    def send(self, message: Mapping[str, Any]) -> None:
        """Queue one message for the writer; never waits on the server (the reads hold the deadline)."""
        self.outbox.put(json.dumps(message, ensure_ascii=True, separators=(",", ":")).encode("ascii") + b"\n")

    def request(self, method: str, params: Mapping[str, Any]) -> Any:
        """Send one request; answer its result, or raise IMPORT_SERVER_ERROR on an error answer."""
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        while True:
            message = self.receive()
            if type(message) is not dict or message.get("jsonrpc") != "2.0":
                raise ImportFailure("IMPORT_PROTOCOL")
            if "id" not in message and "method" in message:
                continue  # a notification (log, list_changed): read past it, counted
            if "method" in message:
                if not _is_request_id(message["id"]):
                    raise ImportFailure("IMPORT_PROTOCOL")
                self.send(_answer_request(message))
                continue  # a request from the server (ping, roots): answered, not served
            if type(message.get("id")) is not int or message["id"] != self.next_id:
                raise ImportFailure("IMPORT_PROTOCOL")
            if message.keys() == {"jsonrpc", "id", "error"}:
                raise ImportFailure("IMPORT_SERVER_ERROR" if _is_error_object(message["error"]) else "IMPORT_PROTOCOL")
            if message.keys() != {"jsonrpc", "id", "result"} or type(message["result"]) is not dict:
                raise ImportFailure("IMPORT_PROTOCOL")
            return message["result"]

    def notify(self, method: str) -> None:
        self.send({"jsonrpc": "2.0", "method": method})

    def receive(self) -> Any:
        return tool_dispatcher.decode_strict_json(self.line(), max_bytes=self.max_line, max_depth=MAX_MESSAGE_DEPTH,
                                                  policy=LISTING_JSON)

    def line(self) -> bytes:
        while True:
            end = self.buffer.find(b"\n")
            if end >= 0:
                line, self.buffer = self.buffer[:end], self.buffer[end + 1:]
                self.messages += 1
                if self.messages > self.max_messages:
                    raise ImportFailure("IMPORT_TOO_MANY_MESSAGES")
                if len(line) > self.max_line:
                    raise ImportFailure("IMPORT_LINE_TOO_LONG")
                line = line[:-1] if line.endswith(b"\r") else line
                if line.strip():
                    return line
                continue
            if len(self.buffer) > self.max_line:
                raise ImportFailure("IMPORT_LINE_TOO_LONG")  # before the rest of the line arrives
            self.buffer += self._chunk()

    def _chunk(self) -> bytes:
        while True:
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                raise ImportFailure("IMPORT_TIMEOUT")
            try:
                chunk = self.chunks.get(timeout=min(remaining, EXIT_POLL))
                break
            except queue.Empty:
                if self.process.poll() is not None:
                    _kill_group(self.process)  # what it wrote is still read, then the end of output
        if not chunk:
            self.chunks.put(b"")  # stay closed for any later read
            raise ImportFailure("IMPORT_CLOSED")
        self.total += len(chunk)
        if self.total > self.max_total:
            raise ImportFailure("IMPORT_TOO_MUCH_DATA")
        return chunk


def _is_request_id(value: Any) -> bool:
    """A JSON-RPC id a server may give its request: an integer (never a bool) or a bounded string."""
    return type(value) is int or (type(value) is str and len(value) <= MAX_REQUEST_ID_LENGTH)


def _answer_request(message: Mapping[str, Any]) -> dict[str, Any]:
    method = message["method"]
    if type(method) is str and method in EMPTY_RESULT_REQUESTS:
        return {"jsonrpc": "2.0", "id": message["id"], "result": {}}
    return {"jsonrpc": "2.0", "id": message["id"], "error": dict(METHOD_NOT_FOUND)}


def _is_error_object(value: Any) -> bool:
    """A JSON-RPC error: an integer code (never a bool) and a message; its text is never read."""
    return type(value) is dict and type(value.get("code")) is int and type(value.get("message")) is str


def _close_input(process: subprocess.Popen[bytes]) -> None:
    try:
        if process.stdin is not None:
            process.stdin.close()
    except (OSError, ValueError):
        pass  # a broken pipe on the last flush: the server left first


def _drain(chunks: queue.Queue[bytes]) -> None:
    try:
        while True:
            chunks.get_nowait()
    except queue.Empty:
        pass


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    """Kill what is left of the server's process group: the server is the process started, and
    once it has left, a child of its that holds the pipes open speaks for no one (POSIX only).
    The group outlives the server while it has members, so its id names no other process then."""
    if hasattr(os, "killpg"):
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except OSError:
            pass  # no member left


def spawn(command: Sequence[str]) -> subprocess.Popen[bytes]:
    # A group of its own (POSIX), so that stop() ends the server's children with it.
    try:
        return subprocess.Popen(list(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, start_new_session=True)
    except (OSError, ValueError):
        raise ImportFailure("IMPORT_SPAWN") from None


def stop(process: subprocess.Popen[bytes], channel: Channel | None) -> None:
    """Close the server's input, give it EXIT_GRACE to leave, then kill it; reap it either way."""
    if channel is None:
        _close_input(process)
    else:
        channel.outbox.put(b"")  # after what is queued; a writer stuck on a full pipe meets the kill
        channel.closing.set()
        _drain(channel.chunks)  # a reader waiting on a full read-ahead goes on, and drops the rest
    try:
        process.wait(timeout=EXIT_GRACE)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    _kill_group(process)
    if channel is not None:
        channel.writer.join(timeout=EXIT_GRACE)
        channel.reader.join(timeout=EXIT_GRACE)
    if process.stdout is not None:
        process.stdout.close()


# ============================================================================================
# 4. Handshake and listing
# ============================================================================================


@dataclass(frozen=True, slots=True)
class Session:
    era: str  # "modern" or "legacy"
    protocol_version: str
    server_name: str | None
    server_version: str | None

    def params(self, **fields: Any) -> dict[str, Any]:
        """A request's params: 2026-07-28 carries the version and capabilities in every request."""
        if self.era == "modern":
            fields["_meta"] = {PROTOCOL_VERSION_KEY: self.protocol_version, CAPABILITIES_KEY: {}}
        return fields


def handshake(channel: Channel, protocol: str) -> Session:
    if protocol in ("auto", "modern"):
        try:
            return _discover(channel)
        except ImportFailure as failure:
            if protocol == "modern" or failure.code != "IMPORT_SERVER_ERROR":
                raise
    return _initialize(channel)


def _discover(channel: Channel) -> Session:
    result = channel.request("server/discover", {"_meta": {PROTOCOL_VERSION_KEY: MODERN_VERSION, CAPABILITIES_KEY: {}}})
    versions = result.get("supportedVersions")
    if type(versions) is not list:
        raise ImportFailure("IMPORT_PROTOCOL")
    if MODERN_VERSION not in versions:
        raise ImportFailure("IMPORT_PROTOCOL_VERSION")
    meta = result.get("_meta")
    info = meta.get(SERVER_INFO_KEY) if type(meta) is dict else None
    return Session("modern", MODERN_VERSION, *_server_info(info))


def _initialize(channel: Channel) -> Session:
    result = channel.request("initialize", {"protocolVersion": LEGACY_VERSIONS[0], "capabilities": {},
                                            "clientInfo": dict(CLIENT_INFO)})
    version = result.get("protocolVersion")
    if type(version) is not str:
        raise ImportFailure("IMPORT_PROTOCOL")
    if version not in LEGACY_VERSIONS:
        raise ImportFailure("IMPORT_PROTOCOL_VERSION")
    capabilities = result.get("capabilities")
    if type(capabilities) is not dict:
        raise ImportFailure("IMPORT_PROTOCOL")  # a required member of the answer
    if type(capabilities.get("tools")) is not dict:
        raise ImportFailure("IMPORT_NO_TOOLS")  # a server with tools must declare them: it offered none
    channel.notify("notifications/initialized")
    return Session("legacy", version, *_server_info(result.get("serverInfo")))


def _server_info(info: Any) -> tuple[str | None, str | None]:
    """The server's own name and version, when they are short text; untrusted, only recorded."""
    if type(info) is not dict:
        return None, None
    return tuple(  # type: ignore[return-value]
        value if type(value) is str and 0 < len(value) <= tool_dispatcher.MAX_TEXT_LENGTH else None
        for value in (info.get("name"), info.get("version")))


def list_tools(channel: Channel, session: Session, *, max_pages: int = MAX_PAGES) -> list[Any]:
    """Every page of tools/list, following nextCursor; a repeated cursor is a loop, refused."""
    tools: list[Any] = []
    seen: set[str] = set()
    cursor: str | None = None
    for _ in range(max_pages):
        result = channel.request("tools/list", session.params() if cursor is None else session.params(cursor=cursor))
        page = result.get("tools")
        if type(page) is not list:
            raise ImportFailure("IMPORT_PROTOCOL")
        tools.extend(page)
        if len(tools) > tool_dispatcher.MAX_TOOLS:
            raise ImportFailure("IMPORT_TOO_MANY_TOOLS")
        cursor = result.get("nextCursor")
        if cursor is None:
            return tools
        if type(cursor) is not str or not cursor or len(cursor) > MAX_CURSOR_LENGTH or cursor in seen:
            raise ImportFailure("IMPORT_PAGINATION")
        seen.add(cursor)
    raise ImportFailure("IMPORT_PAGINATION")


def stable_listing(channel: Channel, session: Session) -> list[Any]:
    """The listing read twice; any difference (a tool added, a schema swapped) refuses the import."""
    first = list_tools(channel, session)
    second = list_tools(channel, session)
    if tool_dispatcher.canonical_json(first) != tool_dispatcher.canonical_json(second):
        raise ImportFailure("IMPORT_LISTING_CHANGED")
    return first


# ============================================================================================
# 5. Drafting
# ============================================================================================


@dataclass(frozen=True, slots=True)
class HostChoices:
    """What only the host decides: which tools are reads, and the role every tool requires."""

    read_only: frozenset[str] = frozenset()
    role: str = DEFAULT_ROLE


class _Refused(Exception):
    def __init__(self, code: str, at: str) -> None:
        super().__init__(code)
        self.code = code
        self.at = at


def draft(listing: Sequence[Any], session: Session, host: HostChoices) -> tuple[dict[str, Any], dict[str, Any]]:
    """The contract draft and the report of one listing."""
    names = [tool.get("name") for tool in listing if type(tool) is dict]
    if len([name for name in names if type(name) is str]) != len({name for name in names if type(name) is str}):
        raise ImportFailure("IMPORT_DUPLICATE_TOOL")
    entries, refused, bounds = [], [], []
    for index, tool in enumerate(listing):
        name = tool.get("name") if type(tool) is dict else None
        shown = name if type(name) is str and tool_dispatcher.TOOL_NAME.fullmatch(name) else None
        try:
            entry, host_bounds = _draft_tool(tool, index, session, host)
        except _Refused as refusal:
            refused.append({"index": index, "tool": shown, "code": refusal.code, "at": refusal.at})
            continue
        entries.append(entry)
        bounds.extend({"tool": shown, "at": at} for at in host_bounds)
    document = {"format": tool_dispatcher.CONTRACTS_FORMAT, "tools": entries}
    report = {
        "format": REPORT_FORMAT,
        "server": {"name": session.server_name, "version": session.server_version, "era": session.era,
                   "protocol_version": session.protocol_version},
        "tool_count": len(listing),
        "drafted": len(entries),
        "refused": refused,
        "codes": dict(sorted(Counter(item["code"] for item in refused).items())),
        "host_bounds": bounds,
        "read_only_by_host": sorted(host.read_only & {entry["name"] for entry in entries}),
    }
    return document, report


def _draft_tool(tool: Any, index: int, session: Session, host: HostChoices) -> tuple[dict[str, Any], list[str]]:
    at = f"tools[{index}]"
    if type(tool) is not dict or type(tool.get("name")) is not str or "inputSchema" not in tool:
        raise _Refused("TOOL_MALFORMED", at)
    name = tool["name"]
    if tool_dispatcher.TOOL_NAME.fullmatch(name) is None:
        raise _Refused("TOOL_NAME_INVALID", f"{at}.name")
    description = tool.get("description", "")
    if type(description) is not str:
        raise _Refused("TOOL_MALFORMED", f"{at}.description")
    if len(description) > tool_dispatcher.MAX_DESCRIPTION_LENGTH:
        raise _Refused("TOOL_DESCRIPTION_TOO_LONG", f"{at}.description")
    annotations = tool.get("annotations", {})
    if type(annotations) is not dict:
        raise _Refused("TOOL_MALFORMED", f"{at}.annotations")
    compiled_in = _compile(tool["inputSchema"], f"{at}.inputSchema")
    compiled_out = None if tool.get("outputSchema") is None else _compile(tool["outputSchema"], f"{at}.outputSchema")
    input_schema = compiled_in.to_schema()
    output_schema = None if compiled_out is None else compiled_out.to_schema()
    effect = "read" if name in host.read_only else "write"
    contract_digest = tool_dispatcher.canonical_sha256(
        {"tool": name, "effect": effect, "input": input_schema, "output": output_schema})
    producer = session.server_name if is_identifier(session.server_name) else "mcp-server"
    entry = {
        "name": name,
        "description": description,
        "effect": effect,
        "required_role": host.role,
        "resource_field": None,
        "input_schema": input_schema,
        "output_schema": output_schema,
        "bound_fields": [],
        "revisions": {
            "contract": f"contract.{contract_digest[:16]}",
            "input": f"input.{tool_dispatcher.canonical_sha256(input_schema)[:16]}",
            "output": f"output.{tool_dispatcher.canonical_sha256(output_schema)[:16]}",
            "effect": f"effect.{effect}.draft",
            "handler": "handler.mcp-stdio.v1",
            "producer": session.server_version if is_identifier(session.server_version) else "unversioned",
        },
        "producer": producer,
        "provenance": {
            "source": "mcp_import",
            "server_name": session.server_name,
            "server_version": session.server_version,
            "protocol_version": session.protocol_version,
            "input_schema_sha256": compiled_in.source_sha256,
            "output_schema_sha256": None if compiled_out is None else compiled_out.source_sha256,
        },
        "hints": {field: annotations[key] if type(annotations.get(key)) is bool else None
                  for key, field in HINTS.items()},
    }
    host_bounds = [_placed(item, f"{at}.inputSchema") for item in compiled_in.host_bounds()]
    if compiled_out is not None:
        host_bounds += [_placed(item, f"{at}.outputSchema") for item in compiled_out.host_bounds()]
    return entry, host_bounds


def _placed(path: str, at: str) -> str:
    """A compiler path (schema.properties[1]...) moved inside the listing (tools[3].inputSchema...)."""
    return at + path[len(tool_dispatcher.SCHEMA_ROOT):]


def _compile(schema: Any, at: str) -> tool_dispatcher.CompiledSchema:
    try:
        return tool_dispatcher.compile_schema(schema)
    except BoundaryError as refusal:
        if refusal.scope != "schema":
            raise
        raise _Refused(refusal.code, _placed(refusal.at, at)) from None


def import_server(command: Sequence[str], *, protocol: str = "auto", timeout: float = DEFAULT_TIMEOUT,
                  host: HostChoices = HostChoices()) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run the server, read its listing, stop it; the draft and the report, or ImportFailure."""
    deadline = time.monotonic() + timeout
    process = spawn(command)
    channel = None
    try:
        channel = Channel(process, deadline)
        session = handshake(channel, protocol)
        listing = stable_listing(channel, session)
    finally:
        stop(process, channel)
    return draft(listing, session, host)


# ============================================================================================
# 6. CLI
# ============================================================================================


def dump(value: Any) -> bytes:
    """The draft's and the report's bytes: two-space JSON, ASCII, a final newline; deterministic."""
    return (json.dumps(value, indent=2, ensure_ascii=True) + "\n").encode("ascii")


def write_file(path: str, data: bytes) -> None:
    try:
        with open(path, "wb") as handle:
            handle.write(data)
    except (OSError, ValueError):
        raise ImportFailure("IMPORT_UNWRITABLE") from None


def _arguments(argv: Sequence[str] | None) -> Any:
    parser = CliParser(prog="mcp_bridge.py import", description="Import an MCP server's tools as a tool-contracts-v1 draft.")
    parser.add_argument("--server-command", required=True,
                        help="the command that starts the server on stdio, one string split like a POSIX shell")
    parser.add_argument("--out", required=True, help="where to write the tool-contracts-v1 draft")
    parser.add_argument("--report", required=True, help="where to write the report of refused schemas")
    parser.add_argument("--protocol", choices=("auto", "modern", "legacy"), default="auto",
                        help="modern: server/discover (2026-07-28); legacy: the initialize handshake; auto: both")
    parser.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT, help="seconds for the whole import")
    parser.add_argument("--read-only", action="append", default=[], metavar="TOOL",
                        help="a tool the host declares a read (repeatable); every other tool is a write")
    parser.add_argument("--role", default=DEFAULT_ROLE, help="the role every drafted tool requires")
    arguments = parser.parse_args(argv)
    if not 1 <= arguments.timeout <= MAX_TIMEOUT or not is_identifier(arguments.role):
        parser.error("out of range")
    try:
        arguments.command = shlex.split(arguments.server_command)
    except ValueError:
        parser.error("unbalanced quotes")
    if not arguments.command:
        parser.error("empty command")
    if _same_file(arguments.out, arguments.report):
        parser.error("one file")  # the report would be written over the draft
    return arguments


def _same_file(first: str, second: str) -> bool:
    """Whether two output paths name one file (through a link or a "." too); a path the system
    refuses names none here, and its write is IMPORT_UNWRITABLE."""
    try:
        return os.path.realpath(first) == os.path.realpath(second)
    except (OSError, ValueError):
        return False


def main(argv: Sequence[str] | None = None) -> int:
    return tool_dispatcher.run_cli(lambda: _run(argv))


def _run(argv: Sequence[str] | None) -> int:
    arguments = _arguments(argv)
    host = HostChoices(frozenset(arguments.read_only), arguments.role)
    document, report = import_server(arguments.command, protocol=arguments.protocol, timeout=arguments.timeout,
                                     host=host)
    write_file(arguments.out, dump(document))
    write_file(arguments.report, dump(report))
    passed = not report["refused"]
    emit_json({"passed": passed, "format": REPORT_FORMAT, "tool_count": report["tool_count"],
               "drafted": report["drafted"], "refused": len(report["refused"]), "codes": report["codes"]})
    return 0 if passed else 1
