"""The guard: an MCP server to its client, a guarded MCP client to the real servers.

    python -B mcp_bridge/mcp_bridge.py guard --host HOST.json [--audit-log FILE] [--seal-key FILE] [--store DB]
    python -B mcp_bridge/mcp_bridge.py guard --host HOST.json --contracts REVIEWED.json [--env NAME]... -- SERVER COMMAND...

Any MCP client (a desktop app, an agent framework's MCP toolset) starts the guard as if it were
the server. The guard serves MCP over stdio in both protocol eras, lists only the reviewed, pinned
tools of its servers, and runs every tools/call through the whole boundary (tool_dispatcher's
Dispatcher, or durable/'s with --store) before anything reaches a server (forward.McpForwarder).

The trust split. The client is the model's side: a call's name, arguments and _meta are untrusted
and nothing in them chooses a principal, a role, an approval or a key. The principal, the
approver and the servers come from the host's file; approvals from the person, asked through the
client (elicitation, when the client declared it) or through the host's approval command. A
server is a third party too: it starts with a minimal environment and the variables its entry's
``env`` names, never the guard's whole environment.

Retries never write twice. MCP has no idempotency key, and a client re-sends a call after a
timeout or a reconnect under a new request id. The guard derives the key from what the call is:
a keyed digest of the tool, the principal and the canonical arguments, in a window of
``retry_window`` seconds (retry_key). A call is looked up under the key of the window before and
the current one; a call found there is the same call again and is answered from the ledger (the
first answer, replayed; an unknown outcome is reconciled through the tool's status tool), with no
new approval and no second effect. A call found nowhere is a new intent: it needs a new approval,
and runs under the current window's key. So the same write, sent again within at least one window
(at most two), runs once; sent again later, it is a new write and asks the person again.

Sections, in the order a call flows:
    1. Limits and constants     5. Approvals: elicitation and the host's command
    2. Errors                   6. The guard: listing, calls, the ledger
    3. The host file            7. Serving MCP over stdio
    4. Retry keys               8. The command line
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import hmac
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, BinaryIO, Callable, Final, Iterator, Mapping, Sequence

_HERE: Final = Path(__file__).resolve().parent
if not __package__:  # by path from a checkout: the repository root (the core) and this folder
    for _path in (str(_HERE.parent), str(_HERE)):
        if _path not in sys.path:
            sys.path.insert(0, _path)

import tool_dispatcher as td  # noqa: E402
if __package__:  # installed as tool_dispatcher_mcp: its siblings are the package's, never top-level names
    from .client import (CAPABILITIES_KEY, LEGACY_VERSIONS, MAX_MESSAGE_DEPTH, MAX_REQUEST_ID_LENGTH, MESSAGE_JSON,
                         MODERN_VERSION, PROTOCOL_VERSION_KEY, is_environment_names)
    from .client import _kill_group
    from .forward import McpForwarder, ServerNotStarted
else:
    from client import (CAPABILITIES_KEY, LEGACY_VERSIONS, MAX_MESSAGE_DEPTH, MAX_REQUEST_ID_LENGTH,  # noqa: E402
                        MESSAGE_JSON, MODERN_VERSION, PROTOCOL_VERSION_KEY, is_environment_names)
    from client import _kill_group  # noqa: E402
    from forward import McpForwarder, ServerNotStarted  # noqa: E402

__all__ = ["ApprovalCommands", "GUARD_CATALOG", "GuardError", "GuardHost", "GuardServer", "Guard", "load_host",
           "parse_host", "retry_key", "serve", "main"]

# ============================================================================================
# 1. Limits and constants
# ============================================================================================

HOST_FORMAT: Final = "mcp-guard-host-v1"
MAX_HOST_BYTES: Final = 65_536  # the host's file: a principal, an approver and a few servers
MAX_SERVERS: Final = 16
MAX_COMMAND_PARTS: Final = 64
MAX_LINE_BYTES: Final = 1_048_576  # one message from the client: a call's arguments at their limits
MAX_IN_FLIGHT: Final = 16  # tools/call requests running at once; past it a call is refused at once
# Once the guard stops: how long one write to the client may wait before the guard takes it that
# the client stopped reading (its pipe full). A client that reads takes each line at once; one that
# does not would hold the guard for ever, and every call that has something to say behind it.
ANSWER_GRACE_S: Final = 5.0
STOP_POLL_S: Final = 0.05  # how often a stopping guard looks again at a call it waits for
DEFAULT_RETRY_WINDOW: Final = 600  # seconds: a client's retries come within minutes
MAX_RETRY_WINDOW: Final = 86_400
DEFAULT_CALL_TIMEOUT: Final = 30  # seconds from a call's admission to its deadline
MAX_CALL_TIMEOUT: Final = 600
DEFAULT_APPROVAL_TIMEOUT: Final = 120  # seconds the person gets to answer
MAX_APPROVAL_TIMEOUT: Final = 3_600
APPROVAL_LIFETIME: Final = 60  # seconds an approval stays valid once given: it is used at once
MAX_APPROVAL_TEXT: Final = 4_000  # characters of a call shown to the person; a longer call is not asked
MAX_APPROVAL_ANSWER: Final = 4_096  # bytes the approval command may print
RETRY_KEY_DOMAIN: Final = "tool-dispatcher/mcp-guard-retry-key/v1"
REQUEST_STATE_DOMAIN: Final = "tool-dispatcher/mcp-guard-request-state/v1"
MAX_REQUEST_STATE: Final = 256  # characters of a request state read back from a client
PROFILE: Final = td.PROVIDER_PROFILES["mcp-tools-call-v1"]
SERVER_INFO: Final = MappingProxyType({"name": "tool-dispatcher-guard", "version": "1"})
INSTRUCTIONS: Final = ("Tools behind a guard: every call is checked against its reviewed contract, and a "
                       "write needs a person's approval.")
# The one yes-or-no question (JSON text: each request gets a fresh copy of it).
APPROVAL_SCHEMA: Final = ('{"type":"object","properties":{"approve":{"type":"boolean","title":"Run this call"}},'
                          '"required":["approve"]}')

# JSON-RPC errors the guard answers: fixed messages, never a word of the request.
PARSE_ERROR: Final = (-32700, "Parse error")
INVALID_REQUEST: Final = (-32600, "Invalid request")
METHOD_NOT_FOUND: Final = (-32601, "Method not found")
INVALID_PARAMS: Final = (-32602, "Invalid params")
INTERNAL_ERROR: Final = (-32603, "Internal error")

# ============================================================================================
# 2. Errors
# ============================================================================================

GUARD_CATALOG: Final = MappingProxyType({
    **td.error_specs(
        "guard", False,
        GUARD_HOST_UNREADABLE="The guard's host file cannot be read.",
        GUARD_HOST_INVALID="The guard's host file is not a valid mcp-guard-host-v1 document.",
        GUARD_CONTRACTS_INVALID="A server's reviewed contracts cannot be loaded.",
        GUARD_USAGE="The guard's command line is not valid; see --help.",
        GUARD_TOOL_WITHHELD="This tool is withheld: its server no longer lists it as it was reviewed. Nothing was run.",
        GUARD_SERVER_UNAVAILABLE="This tool's server is not available: it could not be started. Nothing was run.",
    ),
    **td.error_specs(
        "guard", True,
        GUARD_BUSY="The guard is running as many calls as it takes; nothing was run. Try again.",
        GUARD_APPROVAL_UNANSWERED="Nobody answered the approval request in time; nothing was run.",
    ),
})


class GuardError(td.CatalogError):
    """A guard failure: a code from GUARD_CATALOG (never a path or a word of the input)."""

    CATALOG = GUARD_CATALOG


# ============================================================================================
# 3. The host file
# ============================================================================================


@dataclass(frozen=True, slots=True)
class GuardServer:
    """One server behind the guard: its command, its reviewed contracts (names as the server
    lists them), the prefix its tools get toward the client, and each write's status tool."""

    name: str
    prefix: str
    command: tuple[str, ...]
    contracts: td.ContractSet
    document: Mapping[str, Any]  # the reviewed contracts as written: what tools/list declares
    status_tools: Mapping[str, str]
    # Each of its tools' output limits (the core's ToolHooks), up to the core's ceilings.
    max_output_bytes: int = td.MAX_OUTPUT_BYTES
    max_output_nodes: int = td.MAX_OUTPUT_NODES
    # The names of the guard's own variables the server gets beside the client's minimal
    # environment (client.DEFAULT_ENVIRONMENT): names only, their values read when it starts.
    env: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class GuardHost:
    principal: td.Principal
    approver: str  # whom an approval the guard obtains is from: the person at the client
    approval_command: tuple[str, ...] | None
    servers: tuple[GuardServer, ...]
    retry_window: int = DEFAULT_RETRY_WINDOW
    call_timeout: int = DEFAULT_CALL_TIMEOUT
    approval_timeout: int = DEFAULT_APPROVAL_TIMEOUT
    ask_client: bool = True  # False: the client is never asked, only the host's approval command


_HOST_FIELDS: Final = frozenset({"format", "principal", "approval", "servers", "retry_window", "call_timeout"})
_HOST_REQUIRED: Final = frozenset({"format", "principal", "servers"})
_HOST_PRINCIPAL_FIELDS: Final = frozenset({"tenant", "subject", "roles"})
_APPROVAL_FIELDS: Final = frozenset({"approver", "command", "timeout", "ask_client"})
_SERVER_FIELDS: Final = frozenset({"name", "prefix", "command", "contracts", "status_tools", "max_output_bytes",
                                   "max_output_nodes", "env"})
_SERVER_REQUIRED: Final = frozenset({"name", "command", "contracts"})


def load_host(path: str | os.PathLike[str], *, extra: Sequence[Mapping[str, Any]] = ()) -> GuardHost:
    """Read the host's file; a server's relative contracts path is read from the file's folder.
    ``extra`` adds servers given on the command line (their contracts paths as given)."""
    try:
        data = td.read_bounded(path, max_bytes=MAX_HOST_BYTES)
    except td.BoundaryError:
        raise GuardError("GUARD_HOST_UNREADABLE") from None
    return parse_host(data, folder=Path(path).resolve().parent, extra=extra)


def parse_host(data: bytes, *, folder: Path, extra: Sequence[Mapping[str, Any]] = ()) -> GuardHost:
    try:
        root = td.decode_strict_json(data, max_bytes=MAX_HOST_BYTES, max_depth=8)
    except td.CatalogError:
        raise GuardError("GUARD_HOST_INVALID") from None
    _fields(root, _HOST_FIELDS, _HOST_REQUIRED, "")
    if root["format"] != HOST_FORMAT:
        raise GuardError("GUARD_HOST_INVALID", "format")
    principal = _principal(root["principal"])
    approval = root.get("approval", {})
    _fields(approval, _APPROVAL_FIELDS, frozenset({"approver"}), "approval")
    if not td.is_identifier(approval["approver"]):  # a plain str, at most 64 characters, by the pattern
        raise GuardError("GUARD_HOST_INVALID", "approval.approver")
    command = approval.get("command")
    if command is not None and not _is_command(command):
        raise GuardError("GUARD_HOST_INVALID", "approval.command")
    ask_client = approval.get("ask_client", True)
    if type(ask_client) is not bool:
        raise GuardError("GUARD_HOST_INVALID", "approval.ask_client")
    raw_servers = root["servers"]
    if type(raw_servers) is not list or len(raw_servers) + len(extra) > MAX_SERVERS:
        raise GuardError("GUARD_HOST_INVALID", "servers")
    servers = [_server(entry, folder, f"servers[{index}]") for index, entry in enumerate(raw_servers)]
    servers += [_server(entry, Path.cwd(), f"command_line[{index}]") for index, entry in enumerate(extra)]
    if not servers:
        raise GuardError("GUARD_HOST_INVALID", "servers")
    names = [tool for server in servers for tool in _exposed(server)]
    if len(set(names)) != len(names) or len({server.name for server in servers}) != len(servers):
        raise GuardError("GUARD_HOST_INVALID", "servers")  # two tools, or two servers, under one name
    host = GuardHost(principal, approval["approver"], None if command is None else tuple(command), tuple(servers),
                     retry_window=_seconds(root, "retry_window", DEFAULT_RETRY_WINDOW, MAX_RETRY_WINDOW, ""),
                     call_timeout=_seconds(root, "call_timeout", DEFAULT_CALL_TIMEOUT, MAX_CALL_TIMEOUT, ""),
                     approval_timeout=_seconds(approval, "timeout", DEFAULT_APPROVAL_TIMEOUT,
                                               MAX_APPROVAL_TIMEOUT, "approval."), ask_client=ask_client)
    if host.retry_window <= host.approval_timeout + host.call_timeout:
        # A first try may wait for the person and then run: all of it must fit in one window, or a
        # retry two windows on would not find it (retry_key).
        raise GuardError("GUARD_HOST_INVALID", "retry_window")
    return host


def _fields(value: Any, allowed: frozenset[str], required: frozenset[str], at: str) -> None:
    if type(value) is not dict or not required <= value.keys() <= allowed:
        raise GuardError("GUARD_HOST_INVALID", at)


def _principal(value: Any) -> td.Principal:
    _fields(value, _HOST_PRINCIPAL_FIELDS, _HOST_PRINCIPAL_FIELDS, "principal")
    roles = value["roles"]
    principal = td.Principal(value["tenant"], value["subject"],
                             tuple(sorted(set(roles))) if type(roles) is list and all(
                                 type(role) is str for role in roles) else ())
    try:
        td.check_principal(principal)
    except td.BoundaryError:
        raise GuardError("GUARD_HOST_INVALID", "principal") from None
    if type(roles) is not list or len(principal.roles) != len(roles):
        raise GuardError("GUARD_HOST_INVALID", "principal.roles")
    return principal


def _seconds(value: Mapping[str, Any], name: str, default: int, most: int, at: str) -> int:
    found = value.get(name, default)
    if type(found) is not int or not 1 <= found <= most:
        raise GuardError("GUARD_HOST_INVALID", at + name)
    return found


def _limit(entry: Mapping[str, Any], name: str, default: int, ceiling: int, at: str) -> int:
    # An output limit of the core's ToolHooks: an integer (never a bool) from 1 to its ceiling.
    found = entry.get(name, default)
    if type(found) is not int or not 1 <= found <= ceiling:
        raise GuardError("GUARD_HOST_INVALID", f"{at}.{name}")
    return found


def _is_command(value: Any) -> bool:
    return (type(value) is list and 1 <= len(value) <= MAX_COMMAND_PARTS
            and all(type(part) is str and part and "\0" not in part for part in value))


def _server(entry: Any, folder: Path, at: str) -> GuardServer:
    _fields(entry, _SERVER_FIELDS, _SERVER_REQUIRED, at)
    name, prefix = entry["name"], entry.get("prefix", "")
    if not td.is_identifier(name):
        raise GuardError("GUARD_HOST_INVALID", at + ".name")
    if type(prefix) is not str or len(prefix) > 32 or (prefix and td.TOOL_NAME.fullmatch(prefix + "x") is None):
        raise GuardError("GUARD_HOST_INVALID", at + ".prefix")
    if not _is_command(entry["command"]):
        raise GuardError("GUARD_HOST_INVALID", at + ".command")
    if type(entry["contracts"]) is not str or not entry["contracts"]:
        raise GuardError("GUARD_HOST_INVALID", at + ".contracts")
    env = entry.get("env", [])
    if type(env) is not list or not is_environment_names(env):
        raise GuardError("GUARD_HOST_INVALID", at + ".env")  # names only, never values: at most 64, none twice
    try:
        data = td.read_bounded(folder / entry["contracts"], max_bytes=td.MAX_CONTRACTS_BYTES)
        contracts = td.parse_contracts(data)
        document = td.decode_strict_json(data, max_bytes=td.MAX_CONTRACTS_BYTES, max_depth=td.MAX_CONTRACTS_DEPTH)
    except td.CatalogError:
        raise GuardError("GUARD_CONTRACTS_INVALID", at + ".contracts") from None
    status_tools = entry.get("status_tools", {})
    if type(status_tools) is not dict or not all(
            write in contracts and contracts[write].effect == "write" and status in contracts
            for write, status in status_tools.items()):
        raise GuardError("GUARD_HOST_INVALID", at + ".status_tools")
    server = GuardServer(name, prefix, tuple(entry["command"]), contracts, document,
                         MappingProxyType(dict(status_tools)),
                         max_output_bytes=_limit(entry, "max_output_bytes", td.MAX_OUTPUT_BYTES,
                                                 td.MAX_OUTPUT_BYTES_CEILING, at),
                         max_output_nodes=_limit(entry, "max_output_nodes", td.MAX_OUTPUT_NODES,
                                                 td.MAX_OUTPUT_NODES_CEILING, at),
                         env=tuple(env))
    if any(td.TOOL_NAME.fullmatch(tool) is None for tool in _exposed(server)):
        raise GuardError("GUARD_HOST_INVALID", at + ".prefix")  # a prefixed name no provider accepts
    return server


def _exposed(server: GuardServer) -> list[str]:
    return [server.prefix + name for name in server.contracts]


def _prefixed_registry(servers: Sequence[GuardServer]) -> td.ContractSet:
    """One contract set of every server's tools under their prefixed names (the revisions as reviewed)."""
    tools = []
    for server in servers:
        for entry in server.document["tools"]:
            tools.append({**entry, "name": server.prefix + entry["name"]})
    return td.parse_contracts(td.canonical_json({"format": td.CONTRACTS_FORMAT, "tools": tools}))


# ============================================================================================
# 4. Retry keys
# ============================================================================================


def retry_key(principal: td.Principal, tool: str, arguments: Any, window: int) -> str:
    """The idempotency key of a call in one retry window: a digest of the principal, the tool, the
    canonical arguments and the window. It is a pure function of what the call is, so a guard that
    restarts, or another guard on the same ledger, finds the same key for the same call. Nothing
    is secret in it (the audit holds the arguments anyway), and nobody but the guard writes under
    it. Arguments no canonical form holds get a key no call can share: the boundary refuses them
    before a key is read."""
    try:
        text = td.canonical_text([RETRY_KEY_DOMAIN, principal.tenant, principal.subject, tool, arguments, window])
    except (TypeError, ValueError, RecursionError, td.BoundaryError):
        return "g-" + secrets.token_hex(20)
    return "g-" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:40]


def operation_of(key: str) -> str:
    """The operation id of a keyed write: fixed by its key, so a retry answers the same operation."""
    return "op-" + key[2:26]


# ============================================================================================
# 5. Approvals: elicitation and the host's command
# ============================================================================================


# Characters a person does not see as themselves: controls (DEL, C1), format characters (bidi
# overrides that reorder what follows, zero-width ones, tags), separators other than the space
# (a no-break space, a line separator), private use and unassigned code points.
_UNSHOWN_CATEGORIES: Final = frozenset({"Cc", "Cf", "Cn", "Co", "Cs", "Zl", "Zp", "Zs"})


def approval_text(tool: str, arguments: Any) -> str | None:
    """What the person is asked: the tool and its exact arguments (canonical JSON, each character
    the person could not see as itself written as its JSON escape, so what they read is what runs);
    None when it would be longer than a person can read in full, so the call is not asked (nor run)."""
    question = f"Allow the tool {tool} to run with these arguments?\n"
    try:
        shown = td.canonical_text(arguments)
    except (TypeError, ValueError, RecursionError, td.BoundaryError):
        return None
    if len(question) + len(shown) > MAX_APPROVAL_TEXT:
        return None  # escapes only lengthen it
    text = question + shown_json(shown)
    return text if len(text) <= MAX_APPROVAL_TEXT else None


def shown_json(text: str) -> str:
    """Canonical JSON text with each character a person could not see as itself written as its JSON
    escape: the same JSON value, in text a person (or a program that shows it) reads as it runs."""
    return "".join(_shown(character) for character in text)


def _shown(character: str) -> str:
    # Outside JSON strings canonical text is ASCII, so an escape lands inside a string: the same value.
    if character == " " or unicodedata.category(character) not in _UNSHOWN_CATEGORIES:
        return character
    code = ord(character)
    if code <= 0xFFFF:
        return "\\u%04x" % code
    code -= 0x10000
    return "\\u%04x\\u%04x" % (0xD800 + (code >> 10), 0xDC00 + (code & 0x3FF))


class ApprovalCommands:
    """The host's approval commands running for one client (or for a Guard's own callers), each in
    a process group of its own (POSIX). ``stop`` kills every one with its group, and no new one
    starts from then on: once the client is gone or the guard stops, nobody is left to answer."""

    def __init__(self) -> None:
        # One lock for the set and the flag: a command either starts before stop() and is killed
        # by it, or is never started.
        self._lock = threading.Lock()
        self._running: set[subprocess.Popen[bytes]] = set()
        self._stopped = False

    @property
    def stopped(self) -> bool:
        with self._lock:
            return self._stopped

    def start(self, command: Sequence[str]) -> subprocess.Popen[bytes] | None:
        """The command started with three pipes, or None once stopped (nothing is started)."""
        with self._lock:
            if self._stopped:
                return None
            process = subprocess.Popen(list(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, start_new_session=True)
            self._running.add(process)
            return process

    def finish(self, process: subprocess.Popen[bytes]) -> None:
        """End what is left of the command's group, reap it and close its pipes."""
        _kill_group(process)
        process.wait()
        with self._lock:
            self._running.discard(process)
        for stream in (process.stdin, process.stdout, process.stderr):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass  # a broken pipe on the last flush: the command left first

    def stop(self) -> None:
        """Kill every command still running, with its group (each caller reaps its own), and start
        none from now on. Idempotent."""
        with self._lock:
            self._stopped = True
            running = list(self._running)
        for process in running:
            _kill_group(process)


def ask_command(command: Sequence[str], tool: str, arguments: Any, principal: td.Principal, timeout: float, *,
                running: ApprovalCommands | None = None) -> bool | None:
    """The host's approval command: the call on its stdin as JSON, the person's yes as exactly
    {"approve": true} on its stdout with exit status 0. Anything else, a timeout included, is no
    (the command killed with its process group at the timeout). None when ``running`` is stopped
    before the command answered: it is killed, or never started, and nobody answered. The JSON is
    canonical, each character a person could not see as itself escaped as the question escapes it
    (shown_json): a command that shows its input as it came shows no bidi override or invisible
    character raw."""
    question = shown_json(td.canonical_text({"tool": tool, "arguments": arguments, "tenant": principal.tenant,
                                             "subject": principal.subject}))
    running = ApprovalCommands() if running is None else running
    try:
        process = running.start(command)
    except (OSError, ValueError, subprocess.SubprocessError):
        return False
    if process is None:
        return None
    try:
        output, _errors = process.communicate(question.encode("utf-8"), timeout=timeout)
    except (OSError, ValueError, subprocess.SubprocessError):
        output = None  # the timeout: no
    finally:
        running.finish(process)
    if running.stopped:
        return None  # killed by stop(), or it answered as the guard stopped: nothing may run now
    if output is None or process.returncode != 0 or len(output) > MAX_APPROVAL_ANSWER:
        return False
    try:
        answer = td.decode_strict_json(output.strip() or b"null", max_bytes=MAX_APPROVAL_ANSWER, max_depth=4)
    except td.CatalogError:
        return False
    return type(answer) is dict and answer.keys() == {"approve"} and answer["approve"] is True


def elicited_yes(answer: Any) -> bool:
    """A client's elicitation answer that says yes: accepted, with approve exactly true."""
    return (type(answer) is dict and answer.get("action") == "accept" and type(answer.get("content")) is dict
            and answer["content"].get("approve") is True)


# ============================================================================================
# 6. The guard: listing, calls, the ledger
# ============================================================================================


@dataclass(slots=True)
class _Flow:
    """One retry key's write flow: its lock, and how many calls hold it or wait for it."""

    lock: threading.Lock
    users: int = 0


class Guard:
    """The boundary in front of the host's servers: ``tools`` is what the client is shown,
    ``call`` runs one tools/call's name and arguments and answers its MCP result."""

    def __init__(self, host: GuardHost, *, store: str | None = None, seal_keys: td.SealKeys | None = None,
                 audit: BinaryIO | None = None,
                 report: Callable[[dict[str, Any]], None] = lambda _event: None,
                 clock: Callable[[], float] = time.time) -> None:
        self.host = host
        self._clock = clock
        # One write flow per retry key at a time: a retry that arrives while its first try waits
        # for the person, or runs, waits for it, and is then answered from the ledger.
        self._flows: dict[str, _Flow] = {}
        self._flows_lock = threading.Lock()
        self._closed = False
        self._commands = ApprovalCommands()  # the approval commands of calls that bring none of their own
        self._state_secret = secrets.token_bytes(32)  # request states of this run only
        self._redeemed: dict[str, int] = {}  # nonce -> expiry: each state answers once
        self._report = report
        self._seal_keys = seal_keys
        self._registry = _prefixed_registry(host.servers)
        self.forwarders: dict[str, McpForwarder] = {}
        self._started: set[str] = set()
        self._hooks: dict[str, td.ToolHooks] = {}
        for server in host.servers:
            # Pinned to its review: a tool whose listing drifted is withheld, and never runs.
            forwarder = McpForwarder(list(server.command), pinned=server.contracts,
                                     call_timeout=float(host.call_timeout), env_names=server.env)
            self.forwarders[server.name] = forwarder
            for name, spec in server.contracts.items():
                self._hooks[server.prefix + name] = forwarder.hooks(
                    server.prefix + name, remote_name=name, text_output=spec.output_contract is None,
                    status_tool=server.status_tools.get(name), max_output_bytes=server.max_output_bytes,
                    max_output_nodes=server.max_output_nodes)
        # Every dispatch runs on one thread: a store's connection (SQLite) belongs to the thread
        # that opened it, and the ledger's order is the order of this queue.
        self._ledger = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="guard-ledger")
        self._audit = None
        self._audit_stream: BinaryIO | None = None
        self._sequence = 0
        self._sequence_lock = threading.Lock()
        self._session = "s-" + secrets.token_hex(12)  # this run's response id: call identities never repeat
        self.dispatcher = self._ledger.submit(self._build, store, audit).result()

    def _build(self, store: str | None, audit: BinaryIO | None) -> td.Dispatcher:
        if audit is not None:
            self._audit = td.AuditLog(audit, seal_keys=self._seal_keys)
            self._audit_stream = audit
        options: dict[str, Any] = dict(approvers=[self.host.approver], hooks=self._hooks, registry=self._registry,
                                       seal_keys=self._seal_keys)
        if store is None:
            return td.Dispatcher(**options)
        if __package__:  # installed: the durable layer is its own package beside this one
            import tool_dispatcher_durable.durable_dispatcher as durable_dispatcher  # noqa: PLC0415
        else:
            durable = str(_HERE.parent / "durable")
            if durable not in sys.path:
                sys.path.insert(0, durable)
            import durable_dispatcher  # noqa: PLC0415  (the durable layer only when a ledger is asked for)
        return durable_dispatcher.DurableDispatcher(store=durable_dispatcher.open_store(store), **options)

    # -- the listing ------------------------------------------------------------------------------

    def start(self) -> dict[str, Any]:
        """Start every server and compare its listing with its review: the report of what is withheld."""
        found: dict[str, Any] = {}
        for server in self.host.servers:
            forwarder = self.forwarders[server.name]
            try:
                drift = forwarder.start(timeout=float(self.host.call_timeout))
            except ServerNotStarted as error:
                found[server.name] = {"started": False, "code": error.code}
                continue
            self._started.add(server.name)
            found[server.name] = {"started": True, "withheld": drift}
        return found

    def withheld(self) -> frozenset[str]:
        """The exposed names of the tools withheld now: their server's last listing drifted from the
        review, or the server never started (a call to such a tool starts it, and compares first)."""
        names = set()
        for server in self.host.servers:
            drift = self.forwarders[server.name].drift
            for name in server.contracts:
                if name in drift or server.name not in self._started:
                    names.add(server.prefix + name)
        return frozenset(names)

    def _refused_before(self, name: str) -> str | None:
        """Why a call to this registry tool is refused before the boundary, or None. Its server, when
        it never started or is no longer running (it exited, or its last start failed), is started
        first: one that cannot be is GUARD_SERVER_UNAVAILABLE (its tools leave the listing until a
        start succeeds). A tool whose server runs but whose listing drifted is GUARD_TOOL_WITHHELD."""
        for server in self.host.servers:
            if not (name.startswith(server.prefix) and name[len(server.prefix):] in server.contracts):
                continue
            forwarder = self.forwarders[server.name]
            if server.name not in self._started or not forwarder.running:
                try:
                    forwarder.start(timeout=float(self.host.call_timeout))
                except ServerNotStarted:
                    self._started.discard(server.name)
                    return "GUARD_SERVER_UNAVAILABLE"
                self._started.add(server.name)
        return "GUARD_TOOL_WITHHELD" if name in self.withheld() else None

    def tools(self) -> list[dict[str, Any]]:
        """tools/list: each reviewed tool not withheld, as reviewed (never as the server lists it now)."""
        withheld = self.withheld()
        listed = []
        for server in self.host.servers:
            for entry in server.document["tools"]:
                name = server.prefix + entry["name"]
                if name in withheld:
                    continue
                listed.append({"name": name, "description": entry["description"],
                               "inputSchema": entry["input_schema"],
                               "annotations": {"readOnlyHint": entry["effect"] == "read"}})
        return listed

    # -- a call -----------------------------------------------------------------------------------

    def call(self, name: Any, arguments: Any, *, ask: Callable[[str], bool | None] | None = None,
             cancelled: threading.Event | None = None, answered: bool | None = None,
             defer: bool = False, commands: ApprovalCommands | None = None) -> dict[str, Any] | None:
        """One tools/call through the boundary: the MCP result the client gets (None when the call
        was cancelled before anything ran). When a write needs the person: ``answered`` is their
        answer this request carries (a redeemed request state); else ``defer`` answers an
        input_required result that asks them (the 2026-07-28 round trip); else ``ask(text)`` asks
        them now (True: yes; None: nobody answered); else the host's approval command, run under
        ``commands`` (the guard's own by default; stopped, nobody answered); else nobody."""
        proposal = {"name": name, "arguments": arguments}
        spec = self._registry.get(name) if type(name) is str else None
        refused = None if spec is None else self._refused_before(name)
        if refused is not None:
            return self.refuse(name, GuardError(refused))  # nobody is asked for a tool that may not run
        now = int(self._clock())
        if spec is None or spec.effect != "write":
            return self._run(lambda: self._dispatch_in(proposal, self._context(None), None, now)[1])
        windows = (now // self.host.retry_window - 1, now // self.host.retry_window)
        keys = [retry_key(self.host.principal, name, arguments, window) for window in windows]
        # Both windows' flows, the earlier first: a try that began in the window before holds it.
        with self._flow(keys[0]), self._flow(keys[1]):
            return self._write(proposal, spec, keys, ask=ask, cancelled=cancelled, answered=answered, defer=defer,
                               commands=commands)

    def operation_state(self, name: str, arguments: Any) -> str:
        """What the ledger holds for this write now (its retry windows, as a call would look it up):
        "none", or the operation's state ("committed", "unknown", ...)."""
        now = int(self._clock())
        windows = (now // self.host.retry_window - 1, now // self.host.retry_window)
        keys = [retry_key(self.host.principal, name, arguments, window) for window in windows]
        return self._run(lambda: self._found(name, keys))[0]

    @contextlib.contextmanager
    def _flow(self, key: str) -> Iterator[None]:
        """Hold the retry key's flow. A flow is counted from the moment a call asks for it, under
        the table's lock, and leaves the table with its last call: a call that waits for the lock
        always waits for the one its predecessor holds, and the table holds calls in flight only."""
        with self._flows_lock:
            flow = self._flows.get(key)
            if flow is None:
                flow = self._flows[key] = _Flow(threading.Lock())
            flow.users += 1
        try:
            with flow.lock:
                yield
        finally:
            with self._flows_lock:
                flow.users -= 1
                if not flow.users:
                    del self._flows[key]

    def _write(self, proposal: dict[str, Any], spec: td.ToolSpec, keys: Sequence[str], *,
               ask: Callable[[str], bool | None] | None, cancelled: threading.Event | None,
               answered: bool | None, defer: bool, commands: ApprovalCommands | None) -> dict[str, Any] | None:
        name, arguments, principal = proposal["name"], proposal["arguments"], self.host.principal
        now = int(self._clock())
        state, key = self._run(lambda: self._found(name, keys))
        if state == "unknown":  # a try whose answer was lost: the status tool settles it, once
            return self._run(lambda: self._query(proposal, key, now))
        context = self._context(key)
        first = self._run(lambda: self._dispatch_in(proposal, context, None, now))
        if first[0]["model_result"].get("error", {}).get("code") != "APPROVAL_REQUIRED":
            return first[1]  # answered from the ledger (a retry), or refused before an approval was needed
        text = approval_text(name, arguments)
        if text is None:
            return first[1]  # too long to show in full: nobody is asked, and APPROVAL_REQUIRED stands
        if cancelled is not None and cancelled.is_set():
            return None
        if answered is None and defer:
            return self._input_required(text, name, arguments)
        if answered is None and ask is None and self.host.approval_command is None:
            self._report({"event": "approval", "tool": name, "answer": "none"})
            return first[1]  # nobody to ask: APPROVAL_REQUIRED stands
        answer = answered if answered is not None else self._ask(ask, text, name, arguments, commands)
        self._report({"event": "approval", "tool": name, "answer": {True: "yes", False: "no", None: "none"}[answer]})
        if cancelled is not None and cancelled.is_set():
            return None  # asked, but the client gave the call up: nothing runs
        if answer is None:
            return self.refuse(name, GuardError("GUARD_APPROVAL_UNANSWERED"))
        if answer is False:
            return first[1]  # the person said no: APPROVAL_REQUIRED stands
        now = int(self._clock())
        approval = td.approval_for_call(approver=self.host.approver, principal=principal, context=context,
                                        spec=spec, arguments=arguments, expires_at=now + APPROVAL_LIFETIME)
        return self._run(lambda: self._dispatch_in(proposal, context, approval, now))[1]

    # -- asking in the 2026-07-28 round trip -------------------------------------------------------

    def _input_required(self, text: str, name: str, arguments: Any) -> dict[str, Any]:
        """The result that asks the person through the client, which calls again with the answer
        and this request state: keyed by this run's secret, bound to the principal, the tool and
        the exact arguments, single use, and valid for approval_timeout seconds."""
        nonce = secrets.token_hex(12)
        expires = int(self._clock()) + self.host.approval_timeout
        state = f"{nonce}.{expires}.{self._state_mac(nonce, expires, name, arguments)}"
        return {"resultType": "input_required", "requestState": state,
                "inputRequests": {"approval": {"method": "elicitation/create", "params": {
                    "mode": "form", "message": text, "requestedSchema": json.loads(APPROVAL_SCHEMA)}}}}

    def redeem(self, state: Any, name: Any, arguments: Any) -> bool:
        """Whether a request state is one this run issued for exactly this call, unexpired and not
        used before (it is used now). Anything else carries no answer: the call is asked again."""
        if (type(state) is not str or len(state) > MAX_REQUEST_STATE or not state.isascii()
                or type(name) is not str):
            # ASCII only: str.isdigit admits "²", which int() refuses, and compare_digest raises on
            # any non-ASCII text. Either would end the client's connection, not refuse one state.
            return False
        parts = state.split(".")
        if len(parts) != 3 or not parts[1].isdigit() or len(parts[1]) > 12:
            return False
        nonce, expires = parts[0], int(parts[1])
        now = int(self._clock())
        expected = self._state_mac(nonce, expires, name, arguments)
        if expires < now or not expected or not hmac.compare_digest(parts[2], expected):
            return False  # no MAC for arguments without a canonical form: no state was issued for them
        with self._flows_lock:
            self._redeemed = {used: until for used, until in self._redeemed.items() if until >= now}
            if nonce in self._redeemed:
                return False
            self._redeemed[nonce] = expires
        return True

    def _state_mac(self, nonce: str, expires: int, name: str, arguments: Any) -> str:
        try:
            text = td.canonical_text([REQUEST_STATE_DOMAIN, self.host.principal.tenant, self.host.principal.subject,
                                      nonce, expires, name, arguments])
        except (TypeError, ValueError, RecursionError, td.BoundaryError):
            return ""  # no canonical form: no state was issued for it, and none matches
        return hmac.new(self._state_secret, text.encode("utf-8"), hashlib.sha256).hexdigest()

    def _ask(self, ask: Callable[[str], bool | None] | None, text: str, name: str, arguments: Any,
             commands: ApprovalCommands | None) -> bool | None:
        if ask is not None:
            return ask(text)
        if self.host.approval_command is not None:
            return ask_command(self.host.approval_command, name, arguments, self.host.principal,
                               float(self.host.approval_timeout),
                               running=self._commands if commands is None else commands)
        return False

    def _run(self, work: Callable[[], Any]) -> Any:
        return self._ledger.submit(work).result()

    def _context(self, key: str | None, *, operation: str | None = None) -> td.CallContext:
        with self._sequence_lock:
            self._sequence += 1
            call_id = f"c{self._sequence}"
        return td.CallContext(PROFILE.provider, PROFILE.api_family, PROFILE.adapter_revision, self._session, call_id,
                              operation or (operation_of(key) if key is not None else f"op-{call_id}"), key)

    def _found(self, name: str, keys: Sequence[str]) -> tuple[str, str]:
        """(state, key): the earliest window whose key the ledger holds, else ("none", the current key)."""
        for key in keys:
            state = self.dispatcher.operation_state(self.host.principal, name, key)
            if state != "none":
                return state, key
        return "none", keys[-1]

    def _dispatch_in(self, proposal: dict[str, Any], context: td.CallContext, approval: td.Approval | None,
                     now: int) -> tuple[dict[str, Any], dict[str, Any]]:
        try:
            # The answer is shaped inside the dispatch, from what the package was built from: nothing
            # to verify again (a package read back from the ledger is verified in full there).
            package, item = self.dispatcher.dispatch_for_provider(proposal, context, self.host.principal,
                                                                  approval=approval, now=now,
                                                                  deadline=now + self.host.call_timeout)
        except td.CatalogError as error:  # the host's to hear (a call in progress, a store fault): no package
            return {"model_result": {}}, self.refuse(proposal["name"], error)
        return package, self._answer(package, context, item)

    def _query(self, proposal: dict[str, Any], key: str, now: int) -> dict[str, Any]:
        context = self._context(key)
        try:
            package = self.dispatcher.query_operation_status(proposal, context, self.host.principal, now=now)
        except td.CatalogError as error:
            return self.refuse(proposal["name"], error)
        return self._answer(package, context)

    def refuse(self, name: Any, error: td.CatalogError) -> dict[str, Any]:
        """A refusal the guard answers itself, with no package: reported as one, under the tool's
        name when the call named a reviewed tool (a client's other names are never echoed)."""
        self._report({"event": "refused", "tool": name if type(name) is str and name in self._registry else None,
                      "code": error.code})
        return _refusal(error)

    def _answer(self, package: dict[str, Any], context: td.CallContext,
                item: dict[str, Any] | None = None) -> dict[str, Any]:
        if self._audit is not None:
            self._audit.append(package)
            self._audit_stream.flush()  # on disk before the call is answered: a stop loses no line
        result = item if item is not None else td.to_mcp_tool_result(
            package, context, principal=self.host.principal, approvers=frozenset({self.host.approver}),
            seal_keys=self._seal_keys, require_seal=self._seal_keys is not None, registry=self._registry)
        self._report({"event": "call", "tool": package["model_result"]["source"]["tool"],
                      "status": package["model_result"]["status"],
                      "code": package["model_result"].get("error", {}).get("code")})
        return result

    def close(self) -> None:
        """Kill the approval commands of its own callers still running (nobody answered them),
        finish the ledger's queue, close the audit log (its closing entry) and stop every server.
        Idempotent."""
        with self._flows_lock:
            if self._closed:
                return
            self._closed = True
        self._commands.stop()
        self._ledger.submit(self._close_audit).result()
        self._ledger.shutdown(wait=True)
        for forwarder in self.forwarders.values():
            forwarder.close()

    def _close_audit(self) -> None:
        if self._audit is not None:
            self._audit.close()
            self._audit_stream.flush()
            self._audit = None
        closer = getattr(getattr(self.dispatcher.operations, "store", None), "close", None)
        if callable(closer):
            closer()


def _refusal(error: td.CatalogError) -> dict[str, Any]:
    """A refusal the guard itself answers (no package: nothing reached the boundary's write path)."""
    body = {"status": "error", "error": {"code": error.code, "message": error.message, "retryable": error.retryable}}
    return {"content": [{"type": "text", "text": td.canonical_text(body)}], "isError": True}


# ============================================================================================
# 7. Serving MCP over stdio
# ============================================================================================


class GuardConnection:
    """The guard's side of one client over a pair of byte streams: newline-delimited JSON-RPC."""

    def __init__(self, guard: Guard, reader: BinaryIO, writer: BinaryIO) -> None:
        self.guard = guard
        self._reader = reader
        self._writer = writer
        self._write_lock = threading.Lock()
        self._era: str | None = None
        self._elicitation = False
        self._pending: dict[Any, threading.Event] = {}  # each call in flight: set when the client cancels it
        self._asked: dict[str, tuple[threading.Event, list[Any]]] = {}
        self._asked_lock = threading.Lock()
        self._next_ask = 0
        self._ended = False  # the client's stream ended: nobody can answer a question
        self._commands = ApprovalCommands()  # this client's calls' approval commands: killed when it ends
        self._workers: list[threading.Thread] = []
        self._write_since: float | None = None  # when the write under way began (monotonic), if one is
        self.undelivered = False  # a stop gave up on a write: the client stopped reading (its pipe full)
        self._withheld = guard.withheld()

    # -- writing ----------------------------------------------------------------------------------

    def _send(self, message: Mapping[str, Any]) -> None:
        line = json.dumps(message, ensure_ascii=True, separators=(",", ":")).encode("ascii") + b"\n"
        with self._write_lock:
            self._write_since = time.monotonic()
            try:
                self._writer.write(line)
                self._writer.flush()
            except (OSError, ValueError):
                pass  # the client went away: what ran is in the ledger
            finally:
                self._write_since = None

    def _unread(self) -> bool:
        """Whether a write to the client has waited ANSWER_GRACE_S: the client stopped reading."""
        since = self._write_since
        return since is not None and time.monotonic() - since >= ANSWER_GRACE_S

    def _answer(self, request_id: Any, result: Mapping[str, Any]) -> None:
        if self._era == "modern" and "resultType" not in result:
            result = {**result, "resultType": "complete"}
        self._send({"jsonrpc": "2.0", "id": request_id, "result": result})

    def _error(self, request_id: Any, error: tuple[int, str]) -> None:
        self._send({"jsonrpc": "2.0", "id": request_id, "error": {"code": error[0], "message": error[1]}})

    # -- reading ----------------------------------------------------------------------------------

    def serve(self) -> None:
        """Read the client until its stream ends, or the guard stops (SIGTERM); then answer each call
        that waits for the person as unanswered (its question no longer waited for, its approval
        command killed) and let the calls in flight finish (each has its deadline), so that what
        they did is in the ledger and answered. A client that stopped reading is not waited for
        past ANSWER_GRACE_S of a write to it: ``undelivered`` then says a line was left unwritten."""
        try:
            while True:
                try:
                    line = self._reader.readline(MAX_LINE_BYTES + 1)
                except (OSError, ValueError):
                    break
                if not line:
                    break
                if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
                    # Over the limit before its newline: refused unread, up to and with its newline. A
                    # line of exactly the limit has its newline in what was read: the next line is not skipped.
                    self._error(None, INVALID_REQUEST)
                    if not self._skip_rest():
                        break
                    continue
                if line.strip():
                    self._handle(line[:-1] if line.endswith(b"\n") else line)
        finally:  # the end of input, or the guard stopped (SIGTERM): nobody is left to answer
            with self._asked_lock:
                self._ended = True  # a question a call would ask from now on gets no answer at once
                for event, _answer in self._asked.values():
                    event.set()  # each waiting call is not approved
            self._commands.stop()  # each approval command still running is killed: not approved either
            for worker in self._workers:  # one that SIGTERM cut off before its start is not alive
                # Each call is waited for (its deadlines bound it: what it did is in the ledger), then
                # its answer; unless the client stopped reading: a write that waits on it holds every
                # call with something to say behind it, and nothing more is waited for.
                while worker.is_alive() and not self._unread():
                    worker.join(STOP_POLL_S)
                if worker.is_alive():
                    self.undelivered = True

    def _skip_rest(self) -> bool:
        while True:
            chunk = self._reader.readline(MAX_LINE_BYTES)
            if not chunk:
                return False
            if chunk.endswith(b"\n"):
                return True

    def _handle(self, line: bytes) -> None:
        try:
            message = td.decode_strict_json(line, max_bytes=MAX_LINE_BYTES, max_depth=MAX_MESSAGE_DEPTH,
                                            policy=MESSAGE_JSON)
        except td.CatalogError:
            # Refused by the strict reading, yet its id may be plain to see (a lone surrogate, a
            # repeated key or a number too large in its arguments): answered under that id, so the
            # client's call ends now; under no id (null) when none is, or that one is still in flight.
            request_id = _plain_request_id(line)
            self._error(None if self._in_flight(request_id) else request_id, PARSE_ERROR)
            return
        if type(message) is not dict or message.get("jsonrpc") != "2.0":
            self._error(None, INVALID_REQUEST)
            return
        if "method" not in message:
            self._answered(message)
            return
        if "id" in message and self._in_flight(message["id"]):
            # An id still in flight, whatever the method: answered under no id (null), since under
            # this one the client would take the answer for the first call's, and drop the real one.
            self._error(None, INVALID_REQUEST)
            return
        method = message["method"]
        if type(method) is not str:
            self._error(message.get("id") if _is_id(message.get("id")) else None, INVALID_REQUEST)
            return
        params = message.get("params", {})
        if "id" not in message:
            if method == "notifications/cancelled" and type(params) is dict:
                cancelled = self._pending.get(_id_key(params.get("requestId")))
                if cancelled is not None:
                    cancelled.set()
            return  # initialized, cancelled, anything else: nothing to answer
        request_id = message["id"]
        if not _is_id(request_id):
            self._error(None, INVALID_REQUEST)
            return
        if type(params) is not dict:
            self._error(request_id, INVALID_PARAMS)
            return
        handler = _METHODS.get(method)
        if handler is None:
            self._error(request_id, METHOD_NOT_FOUND)
            return
        if self._era == "modern" and method not in _BEFORE_ANY_ERA and (
                type(params.get("_meta")) is not dict or params["_meta"].get(PROTOCOL_VERSION_KEY) != MODERN_VERSION):
            self._error(request_id, INVALID_PARAMS)
            return
        try:
            handler(self, request_id, params)
        except Exception:  # noqa: BLE001 - the last line: a fault answers its request, and the guard serves on
            self._error(request_id, INTERNAL_ERROR)

    def _in_flight(self, request_id: Any) -> bool:
        """Whether a call under this id runs: no other answer may go under it (_id_key: None for no id)."""
        return _id_key(request_id) in self._pending

    def _answered(self, message: Mapping[str, Any]) -> None:
        # The client's answer to one of the guard's own requests (an elicitation).
        with self._asked_lock:
            waiting = self._asked.get(message.get("id")) if type(message.get("id")) is str else None
        if waiting is not None:
            event, slot = waiting
            slot.append(message.get("result"))
            event.set()

    # -- methods ----------------------------------------------------------------------------------

    def _discover(self, request_id: Any, _params: dict[str, Any]) -> None:
        if self._era == "legacy":
            self._error(request_id, INVALID_REQUEST)  # the session began with initialize: it keeps its era
            return
        self._era = "modern"
        self._answer(request_id, {"supportedVersions": [MODERN_VERSION],
                                  "capabilities": {"tools": {"listChanged": True}},
                                  "instructions": INSTRUCTIONS,
                                  "_meta": {"io.modelcontextprotocol/serverInfo": dict(SERVER_INFO)}})

    def _initialize(self, request_id: Any, params: dict[str, Any]) -> None:
        if self._era is not None:
            self._error(request_id, INVALID_REQUEST)  # one handshake per session, and one era
            return
        self._era = "legacy"
        asked = params.get("protocolVersion")
        capabilities = params.get("capabilities")
        self._elicitation = (self.guard.host.ask_client and type(capabilities) is dict
                             and type(capabilities.get("elicitation")) is dict)
        self._answer(request_id, {"protocolVersion": asked if asked in LEGACY_VERSIONS else LEGACY_VERSIONS[0],
                                  "capabilities": {"tools": {"listChanged": True}},
                                  "serverInfo": dict(SERVER_INFO), "instructions": INSTRUCTIONS})

    def _ping(self, request_id: Any, _params: dict[str, Any]) -> None:
        self._answer(request_id, {})

    def _list(self, request_id: Any, params: dict[str, Any]) -> None:
        if self._era is None:
            self._error(request_id, INVALID_REQUEST)  # no handshake yet (a ping is answered at any time)
            return
        if params.get("cursor") is not None:
            self._error(request_id, INVALID_PARAMS)  # the listing is one page: no cursor was ever given
            return
        listing: dict[str, Any] = {"tools": self.guard.tools()}
        if self._era == "modern":  # a cacheable result in 2026-07-28: never cached, a tool may be withheld later
            listing.update(ttlMs=0, cacheScope="private")
        self._answer(request_id, listing)

    def _call(self, request_id: Any, params: dict[str, Any]) -> None:
        if self._era is None:
            self._error(request_id, INVALID_REQUEST)  # no handshake yet
            return
        self._workers = [worker for worker in self._workers if worker.is_alive()]
        if len(self._workers) >= MAX_IN_FLIGHT:
            self._answer(request_id, self.guard.refuse(params.get("name"), GuardError("GUARD_BUSY")))
            return
        key = _id_key(request_id)  # not in flight: _handle refused an id that is
        cancelled = self._pending[key] = threading.Event()
        name, arguments = params.get("name"), params.get("arguments", {})
        options: dict[str, Any] = {"ask": self._elicit if self._elicitation else None, "commands": self._commands}
        if self._era == "modern":  # the person is asked through an input_required round trip
            capabilities = params["_meta"].get(CAPABILITIES_KEY)
            options = {"defer": self.guard.host.ask_client and type(capabilities) is dict
                       and type(capabilities.get("elicitation")) is dict, "commands": self._commands}
            responses = params.get("inputResponses")
            if (type(responses) is dict and "approval" in responses
                    and self.guard.redeem(params.get("requestState"), name, arguments)):
                options["answered"] = elicited_yes(responses["approval"])
        worker = threading.Thread(target=self._run_call, args=(request_id, key, cancelled, name, arguments, options),
                                  daemon=True)
        self._workers.append(worker)
        worker.start()

    def _run_call(self, request_id: Any, key: Any, cancelled: threading.Event, name: Any, arguments: Any,
                  options: dict[str, Any]) -> None:
        try:
            result = self.guard.call(name, arguments, cancelled=cancelled, **options)
        except Exception:  # noqa: BLE001 - the last line: a fault is a refusal, never a traceback
            result = _refusal(td.BoundaryError("INTERNAL_ERROR"))
            with contextlib.suppress(Exception):  # reported when it can be: the answer comes first
                self.guard.refuse(name, td.BoundaryError("INTERNAL_ERROR"))
        finally:
            # No longer in flight before it is answered: a client that has its answer may send its
            # next request under the same id at once.
            self._pending.pop(key, None)
        if result is not None and not cancelled.is_set():
            self._answer(request_id, result)
        withheld = self.guard.withheld()
        if withheld != self._withheld:
            self._withheld = withheld
            self._send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})

    def _elicit(self, text: str) -> bool | None:
        with self._asked_lock:
            if self._ended:
                return None  # the client is gone: nobody answers, and nobody is waited for
            self._next_ask += 1
            ask_id = f"guard-{self._next_ask}"
            event, slot = self._asked[ask_id] = (threading.Event(), [])
        self._send({"jsonrpc": "2.0", "id": ask_id, "method": "elicitation/create",
                    "params": {"message": text, "requestedSchema": json.loads(APPROVAL_SCHEMA)}})
        answered = event.wait(self.guard.host.approval_timeout)
        with self._asked_lock:
            self._asked.pop(ask_id, None)
        if not answered or not slot:
            return None
        return elicited_yes(slot[0])


_METHODS: Final[Mapping[str, Callable[[GuardConnection, Any, dict[str, Any]], None]]] = MappingProxyType({
    "server/discover": GuardConnection._discover,
    "initialize": GuardConnection._initialize,
    "ping": GuardConnection._ping,
    "tools/list": GuardConnection._list,
    "tools/call": GuardConnection._call,
})


# The handshakes: asked before a session has an era, so they carry no 2026-07-28 version to check
# (in a session of that era, `initialize` is its own refusal, `Invalid request`).
_BEFORE_ANY_ERA: Final = frozenset({"server/discover", "initialize"})


def _plain_request_id(line: bytes) -> Any:
    """The id of a request the strict reading refused, as Python's own JSON reader finds it: a
    JSON-RPC 2.0 request with a method and one id the guard takes. None (JSON-RPC's null: no id
    could be found) for anything else, such as a line that is no JSON at all, or holds an object
    with two ids (which is the request's own, nobody can say)."""
    try:
        message = json.loads(line, object_pairs_hook=_one_id)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, two ids, nested past the reader
        return None
    if (type(message) is dict and message.get("jsonrpc") == "2.0" and type(message.get("method")) is str
            and _is_id(message.get("id"))):
        return message["id"]
    return None


def _one_id(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    if sum(key == "id" for key, _value in pairs) > 1:
        raise ValueError("two ids")
    return dict(pairs)


def _is_id(value: Any) -> bool:
    return type(value) is int or (type(value) is str and len(value) <= MAX_REQUEST_ID_LENGTH)


def _id_key(value: Any) -> Any:
    return (type(value).__name__, value) if _is_id(value) else None


def serve(guard: Guard, reader: BinaryIO, writer: BinaryIO) -> None:
    """Serve one client until its stream ends."""
    GuardConnection(guard, reader, writer).serve()


# ============================================================================================
# 8. The command line
# ============================================================================================

USAGE: Final = """usage: mcp_bridge.py guard --host HOST.json
                           [--contracts REVIEWED.json [--prefix P] [--env NAME]... -- SERVER COMMAND...]
                           [--audit-log FILE] [--seal-key FILE] [--store DB]

Serve MCP over stdio to one client; run every tools/call through the boundary before it reaches a server.
  --host FILE        the host's mcp-guard-host-v1 file: the principal, the approver, the servers
  --contracts FILE   with -- COMMAND: one more server, its reviewed tool-contracts-v1 file
  --prefix P         that server's tools' prefix toward the client (default: none)
  --env NAME         a variable of the guard's environment that server gets too (repeatable)
  --audit-log FILE   a new file: every package, hash-chained (sealed with --seal-key)
  --seal-key FILE    a seal-keys-v1 file: seal packages and the log
  --store DB         the durable ledger (a SQLite path or a postgresql:// DSN): a restart replays
The guard's own reports go to stderr as JSON lines; stdout is the client's.
"""


def _arguments(argv: Sequence[str]) -> tuple[dict[str, Any], list[str]]:
    argv = list(argv)
    command: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, command = argv[:cut], argv[cut + 1:]
    options: dict[str, Any] = {}
    allowed = {"--host", "--contracts", "--prefix", "--audit-log", "--seal-key", "--store"}
    while argv:
        flag = argv.pop(0)
        if flag == "--env" and argv:  # repeatable: each names one variable
            options.setdefault(flag, []).append(argv.pop(0))
            continue
        if flag not in allowed or flag in options or not argv:
            raise GuardError("GUARD_USAGE")
        options[flag] = argv.pop(0)
    if "--host" not in options or ("--contracts" in options) != bool(command) or (
            ("--prefix" in options or "--env" in options) and "--contracts" not in options):
        raise GuardError("GUARD_USAGE")
    if not is_environment_names(options.get("--env", [])):
        raise GuardError("GUARD_USAGE")
    return options, command


def _emit(stream: Any, value: Mapping[str, Any]) -> None:
    try:
        stream.write(json.dumps(value, ensure_ascii=True, sort_keys=True) + "\n")
        stream.flush()
    except (OSError, ValueError):
        pass


class _Stopped(BaseException):
    """SIGTERM (the MCP stdio transport's way to stop a server that outlived its input): the guard
    stops as at the end of its input. A BaseException, like KeyboardInterrupt: no handler of the
    guard's own faults catches it."""


def _stop(_signum: int, _frame: Any) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second one would cut the shutdown short
    raise _Stopped


def main(argv: Sequence[str] | None = None, *, stdin: BinaryIO | None = None, stdout: BinaryIO | None = None,
         stderr: Any = None) -> int:
    """The guard's command: 0 when the client's stream ended or SIGTERM stopped it (its servers
    stopped, its audit log closed, either way); 2 (a JSON line on stderr) when it could not start;
    130 on Ctrl-C. Nothing but MCP is ever written to stdout."""
    argv = list(sys.argv[1:] if argv is None else argv)
    errors = sys.stderr if stderr is None else stderr
    if threading.current_thread() is threading.main_thread():
        # Ctrl-C is KeyboardInterrupt from here on, answered on stderr below: stdout is the client's.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if hasattr(signal, "SIGTERM"):
            signal.signal(signal.SIGTERM, _stop)
    if argv[:1] in (["-h"], ["--help"]):
        errors.write(USAGE.replace("mcp_bridge.py", td.command_name("mcp_bridge.py")))
        return 0
    guard = None
    audit = None
    try:
        options, command = _arguments(argv)
        extra = [] if not command else [{"name": "server", "prefix": options.get("--prefix", ""),
                                         "command": command, "contracts": options["--contracts"],
                                         "env": options.get("--env", [])}]
        host = load_host(options["--host"], extra=extra)
        seal_keys = None if "--seal-key" not in options else td.load_seal_keys(options["--seal-key"])
        if "--audit-log" in options:
            try:
                # A new file, its owner's only: it holds every package's arguments and answers.
                audit = os.fdopen(os.open(options["--audit-log"], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb")
            except FileExistsError:
                raise td.BoundaryError("AUDIT_LOG_EXISTS") from None
            except OSError:
                raise td.BoundaryError("AUDIT_LOG_UNREADABLE") from None
        guard = Guard(host, store=options.get("--store"), seal_keys=seal_keys, audit=audit,
                      report=lambda event: _emit(errors, event))
        _emit(errors, {"event": "started", "servers": guard.start()})
        serve(guard, stdin if stdin is not None else sys.stdin.buffer,
              stdout if stdout is not None else sys.stdout.buffer)
        return 0
    except _Stopped:
        return 0  # stopped as at the end of input: below, the servers and the audit log
    except td.CatalogError as error:
        _emit(errors, {"passed": False, "error": error.to_json()})
        return 2
    except KeyboardInterrupt:
        _emit(errors, {"passed": False, "error": td.BoundaryError("CLI_INTERRUPTED").to_json()})
        return td.EXIT_INTERRUPTED
    except Exception:  # noqa: BLE001 - never a traceback, never a path
        _emit(errors, {"passed": False, "error": td.BoundaryError("INTERNAL_ERROR").to_json()})
        return 2
    finally:
        if guard is not None:
            guard.close()
        if audit is not None:
            audit.close()


if __name__ == "__main__":
    sys.exit(main())
