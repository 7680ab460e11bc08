"""Forwarding to an MCP server: a tool's execute and status hooks that call ``tools/call`` over stdio.

    with McpForwarder([sys.executable, "-B", "server.py"]) as server:
        hooks = {"read_note": server.hooks("read_note"),
                 "write_note": server.hooks("write_note", status_tool="note_write_status")}
        dispatcher = tool_dispatcher.Dispatcher(registry=contracts, hooks=hooks, approvers=["lee"])

Only what the boundary admitted reaches the server: the admitted arguments (never the model's
proposal), a write's idempotency key in ``params._meta["dev.tool-dispatcher/idempotency-key"]``,
and a deadline derived from the host's (the time left, at most ``call_timeout``). What comes back
becomes the hook's Execution:

    structuredContent (an object)       the tool's output, held to its output contract
    text content only, no structure     the text parts joined by newlines: the output of a tool whose
                                        contract declares no output schema (the core's text output)
    result _meta receipt                the downstream's receipt reference (RECEIPT_META), if an identifier
    isError: true                       not_committed: the tool said it failed (TOOL_FAILED);
                                        ``errors_commit_nothing=False`` makes it unknown for a server
                                        whose failures may follow a partial effect
    JSON-RPC error -32601, -32602       not_committed: the server refused the request before running it
    any other JSON-RPC error            unknown: the server may have run part of it
    nothing sent (deadline passed,      not_committed
      request out of bounds, no server)
    no answer, a broken or malformed    unknown for a write (it may have committed: the model is told to
      answer (an isError that is no       query its status); for a read, a retryable DEADLINE_EXCEEDED
      boolean), the server exited
    an answer line over the client's    an output over every limit (OVER_ANY_LIMIT): the core refuses it
      line limit                          as OUTPUT_TOO_LARGE, not retryable; for a write that is unknown,
                                          as for any write whose output fails its contract

The status hook, when the host names a status tool, calls it with ``{"idempotency_key": KEY}``
(or what ``status_arguments`` builds) and reads its structuredContent: ``{"found": false}`` is
absent, and the server's word for it must be final (the server has taken effect of every request it
received before, or never will); ``{"found": true, "receipt": REF, ...}`` is the receipt, and the
other fields are the write's output, held to the write's output contract. Anything else, a tool
error, or no answer is unavailable. Without a status tool a write whose outcome is unknown stays
unknown: the boundary never guesses "not executed".

A forwarder runs one request at a time (MCP over stdio is one conversation) and starts its server
at the first call, with the client's minimal environment and the variables ``env_names`` names
(client.server_environment: never the host's whole environment); a server that crashed or broke
the channel is started again at the next call, so a status query after a crash reaches a fresh
server (which must keep its records, as the project's demo server does with ``--dir``).

Pinned text (``McpForwarder(command, pinned=registry)``, the reviewed contracts of this server's
tools). What a model is told of a tool comes from the reviewed contracts, never from the server:
a server that changes a description after the review cannot reach the model with it. It must not
run the tool either. So at every start, the forwarder lists the server's tools and compares each
registry tool drafted from an MCP server (provenance source "mcp_import") with the live listing,
as ``import --reviewed`` does (importer.drift_of: the description verbatim, both raw schemas'
digests, the title's and the annotations' pins). A tool whose text changed, or that the server no
longer lists, is withheld until the next start that finds it unchanged: its execute hook answers
``not_committed`` without sending anything (the model sees TOOL_FAILED), its status hook (when it
is the status tool) ``unavailable``, and ``call()`` raises ToolWithheld. ``drift`` says what the
last comparison found: {tool: [fields]}, ["missing"] for a tool no longer listed. A start whose
listing fails is a start that failed (nothing is sent). A server that announces a changed list
mid-session (notifications/tools/list_changed) is listed and compared again before the next call
is sent; what it wrote since the last answer is read first (Channel.settle), so an announcement
that arrived between two calls counts. A comparison that fails, however, withholds every pinned
tool; a listed text with no canonical form matches no pin (importer.sha256_of). Pinned tools are
compared under their registry names, so a hook that calls another name (``remote_name``) is
withheld when either name drifted.
"""
from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Final, Mapping, Sequence

_HERE: Final = Path(__file__).resolve().parent
if not __package__:  # by path from a checkout: the repository root (the core) and this folder
    for _path in (str(_HERE.parent), str(_HERE)):
        if _path not in sys.path:
            sys.path.insert(0, _path)

import tool_dispatcher as td  # noqa: E402

if __package__:  # installed as tool_dispatcher_mcp: its siblings are the package's, never top-level names
    from .client import (IDEMPOTENCY_KEY_META, MAX_ENVIRONMENT_NAMES, RECEIPT_META, ClientError, McpClient,
                         is_environment_names)
    from .importer import drift_of
else:
    from client import (IDEMPOTENCY_KEY_META, MAX_ENVIRONMENT_NAMES, RECEIPT_META, ClientError,  # noqa: E402
                        McpClient, is_environment_names)
    from importer import drift_of  # noqa: E402

__all__ = ["DEFAULT_CALL_TIMEOUT", "DEFAULT_START_TIMEOUT", "REFUSED_BEFORE_RUNNING", "NOTHING_SENT",
           "ANSWER_TOO_LARGE", "OVER_ANY_LIMIT", "McpForwarder", "ServerNotStarted", "ToolWithheld", "execution_of",
           "status_of"]

DEFAULT_START_TIMEOUT: Final = 20.0  # seconds for a server's start and handshake
DEFAULT_CALL_TIMEOUT: Final = 30.0  # seconds a call may take when the host's deadline leaves more
# JSON-RPC errors that say the request was refused before the tool ran: no such method, bad params.
REFUSED_BEFORE_RUNNING: Final = frozenset({-32601, -32602})
# Client errors raised before a request left: the server never saw it.
NOTHING_SENT: Final = frozenset({"CLIENT_DEADLINE_PASSED", "CLIENT_REQUEST_INVALID", "CLIENT_BUSY", "CLIENT_SPAWN"})
# Client errors that say the server answered, but in a line longer than the client reads: the
# answer arrived and was too large, which is no lost answer (a retry would meet it again). Too
# many messages or bytes while waiting is a flood, not an answer: the answer was never read.
ANSWER_TOO_LARGE: Final = frozenset({"CLIENT_LINE_TOO_LONG"})
# What an execute hook answers for such an answer: a text longer than any output limit a host may
# set (tool_dispatcher.MAX_OUTPUT_BYTES_CEILING), so the core refuses it as OUTPUT_TOO_LARGE; like
# any refused output it reaches neither the model nor the audit.
OVER_ANY_LIMIT: Final = " " * (td.MAX_OUTPUT_BYTES_CEILING + 1)
# The status tool's arguments when the host builds none.
_STATUS_FIELDS: Final = frozenset({"found", "receipt"})


class ServerNotStarted(ClientError):
    """The server could not be started (its start's ClientError code): no request was sent."""


class ToolWithheld(ClientError):
    """A pinned tool whose listing drifted from its reviewed contract (McpForwarder.drift): the
    request was not sent (CLIENT_REQUEST_INVALID, one of NOTHING_SENT)."""

    def __init__(self) -> None:
        super().__init__("CLIENT_REQUEST_INVALID")


def execution_of(result: Any, *, write: bool, errors_commit_nothing: bool = True,
                 text_output: bool = False) -> td.Execution:
    """A tools/call result as an execute hook's Execution (see the module's table); with
    ``text_output`` (a tool that declares no output schema) its text content, whatever else it sent."""
    if type(result) is not dict or result.get("resultType", "complete") != "complete" or type(
            result.get("isError", False)) is not bool:
        raise td.ResponseLost  # an answer that is not a finished call's, or malformed: what it did is unknown
    if result.get("isError") is True:
        if write and not errors_commit_nothing:
            return td.Execution(None, "unknown")
        return td.Execution(None, "not_committed")
    structured = result.get("structuredContent")
    # A structuredContent that is not an object stays what it is: the output contract refuses it.
    output: Any = structured if "structuredContent" in result and not text_output else _text_output(
        result.get("content"))
    if not write:
        return td.Execution(output, "none")
    meta = result.get("_meta")
    receipt = meta.get(RECEIPT_META) if type(meta) is dict else None
    return td.Execution(output, "committed", receipt if td.is_identifier(receipt) else None)


def _text_output(content: Any) -> Any:
    # Text parts only: anything else (an image, a resource) has no place in a text output.
    if type(content) is not list or not content or not all(
            type(part) is dict and part.get("type") == "text" and type(part.get("text")) is str for part in content):
        return None  # refused by the output contract: OUTPUT_CONTRACT_VIOLATION
    return "\n".join(part["text"] for part in content)


def status_of(result: Any) -> td.StatusAnswer:
    """A status tool's result as a StatusAnswer (see the module's docstring)."""
    answered = type(result) is dict and result.get("isError", False) is False  # a failure, or malformed: no answer
    structured = result.get("structuredContent") if answered else None
    if type(structured) is not dict or type(structured.get("found")) is not bool:
        return td.StatusAnswer("unavailable")
    if structured["found"] is False:
        return td.StatusAnswer("absent")
    receipt = structured.get("receipt")
    output = {name: value for name, value in structured.items() if name not in _STATUS_FIELDS}
    return td.StatusAnswer("receipt", receipt if td.is_identifier(receipt) else None, output)


def _key_arguments(query: td.StatusQuery) -> dict[str, Any]:
    return {"idempotency_key": query.idempotency_key}


class McpForwarder:
    """One stdio MCP server behind the boundary: ToolHooks that forward to it (hooks())."""

    def __init__(self, command: Sequence[str], *, protocol: str = "auto",
                 start_timeout: float = DEFAULT_START_TIMEOUT, call_timeout: float = DEFAULT_CALL_TIMEOUT,
                 pinned: Mapping[str, td.ToolSpec] | None = None, env_names: Sequence[str] = ()) -> None:
        if isinstance(call_timeout, bool) or not isinstance(call_timeout, (int, float)) or not 0 < call_timeout <= 3600:
            raise ValueError("call_timeout out of range")
        if pinned is not None and not (isinstance(pinned, Mapping) and all(
                type(spec) is td.ToolSpec and spec.name == name for name, spec in pinned.items())):
            raise ValueError("pinned must map tool names to their ToolSpecs")
        if not is_environment_names(env_names):
            raise ValueError("env_names: at most %d variable names, none twice" % MAX_ENVIRONMENT_NAMES)
        self._command = list(command)
        self._env_names = tuple(env_names)  # passed through to the server: its environment is minimal otherwise
        self._protocol = protocol
        self._start_timeout = start_timeout
        self._call_timeout = float(call_timeout)
        # The reviewed tools, read once (a registry the host changes later moves nothing here).
        self._pinned = None if pinned is None else dict(pinned)
        self._drift: dict[str, list[str]] = {}
        self._client: McpClient | None = None
        self._lock = threading.Lock()  # one request at a time, and one start
        self.starts = 0  # servers started: a restart after a crash counts
        self.sent = 0  # tools/call requests that left for a server (whatever came back)

    @property
    def drift(self) -> dict[str, list[str]]:
        """What the last comparison found: each withheld tool and its changed fields (a copy). Each one
        replaces the whole table, so it is read without waiting for a call in flight."""
        found = self._drift
        return {name: list(fields) for name, fields in found.items()}

    def hooks(self, tool: str, *, remote_name: str | None = None, status_tool: str | None = None,
              status_arguments: Callable[[td.StatusQuery], dict[str, Any]] = _key_arguments,
              resolve: Callable[[td.Principal, dict[str, Any]], td.Resource | None] | None = None,
              precondition: Callable[[td.Resource | None, dict[str, Any]], str | None] | None = None,
              refusals: frozenset[str] = frozenset(), errors_commit_nothing: bool = True,
              text_output: bool = False, **limits: int) -> td.ToolHooks:
        """The ToolHooks of registry tool ``tool``, calling the server's ``remote_name`` (the same
        name by default); a status hook only when ``status_tool`` is named. ``text_output`` for a
        tool whose contract declares no output schema; ``limits`` are ToolHooks' output limits."""
        name = remote_name or tool
        checked = (tool, name)  # a pinned tool drifted under either name is withheld

        def execute(call: td.ExecuteCall) -> td.Execution:
            write = call.idempotency_key is not None
            meta = {IDEMPOTENCY_KEY_META: call.idempotency_key} if write else None
            try:
                result = self._call(name, call.arguments, meta=meta, now=call.now, deadline=call.deadline,
                                    checked=checked)
            except ClientError as error:
                if (type(error) is ServerNotStarted or error.code in NOTHING_SENT
                        or (error.code == "CLIENT_SERVER_ERROR" and error.rpc_code in REFUSED_BEFORE_RUNNING)):
                    return td.Execution(None, "not_committed")
                if error.code in ANSWER_TOO_LARGE:  # it answered: an output refused, not a lost answer
                    return td.Execution(OVER_ANY_LIMIT, "committed" if write else "none")
                raise td.ResponseLost from None
            return execution_of(result, write=write, errors_commit_nothing=errors_commit_nothing,
                                text_output=text_output)

        def status(query: td.StatusQuery) -> td.StatusAnswer:
            try:
                return status_of(self.call(status_tool, status_arguments(query)))
            except ClientError:
                return td.StatusAnswer("unavailable")

        return td.ToolHooks(execute=execute, resolve=resolve, precondition=precondition,
                            status=None if status_tool is None else status, refusals=refusals, **limits)

    def hooks_for(self, registry: Mapping[str, td.ToolSpec], *,
                  status_tools: Mapping[str, str] | None = None, **limits: int) -> dict[str, td.ToolHooks]:
        """Hooks for every tool of a registry drafted from this server (resource-less tools: a tool
        that names a resource needs its resolve hook, from hooks()); ``status_tools`` names each
        write's status tool; ``limits`` (ToolHooks' ``max_output_bytes``, ``max_output_nodes``)
        apply to every tool."""
        status_tools = status_tools or {}
        return {name: self.hooks(name, status_tool=status_tools.get(name), text_output=spec.output_contract is None,
                                 **limits)
                for name, spec in registry.items()}

    def call(self, name: str, arguments: Mapping[str, Any], *, meta: Mapping[str, Any] | None = None,
             now: int | None = None, deadline: int | None = None) -> Any:
        """tools/call on the server (started, or started again, as needed): its raw result, or a
        ClientError. ``now`` and ``deadline`` are the host's clock: the call, a server's start
        included, gets the time left (at most call_timeout); none left, nothing starts or is sent.
        A pinned tool that drifted is not called: ToolWithheld."""
        return self._call(name, arguments, meta=meta, now=now, deadline=deadline, checked=(name,))

    def _call(self, name: str, arguments: Mapping[str, Any], *, meta: Mapping[str, Any] | None,
              now: int | None, deadline: int | None, checked: Sequence[str]) -> Any:
        timeout = self._call_timeout if deadline is None or now is None else min(self._call_timeout, deadline - now)
        if timeout <= 0:
            raise ClientError("CLIENT_DEADLINE_PASSED")
        until = time.monotonic() + timeout
        with self._lock:
            server = self._server(until)
            try:  # what the server said between two calls (a changed list) is read before this one
                server.settle()
            except ClientError:
                server = self._server(until)  # it broke the conversation: a new start, and its comparison
            if self._pinned is not None and server.tools_changed:
                try:  # the server announced a changed list: compared again before anything is sent
                    self._compare(server, until)
                except Exception:  # noqa: BLE001 - a comparison that fails, however, withholds
                    raise ToolWithheld() from None  # every pinned tool stays withheld; nothing was sent
            if any(checked_name in self._drift for checked_name in checked):  # as this start found it
                raise ToolWithheld()
            try:
                result = server.call_tool(name, dict(arguments), meta=None if meta is None else dict(meta),
                                          deadline=until)
            except ClientError as error:
                if error.code not in NOTHING_SENT:
                    self.sent += 1
                raise
            self.sent += 1
            return result

    @property
    def running(self) -> bool:
        """Whether this forwarder's server runs now: started, its connection usable, its process not
        exited. False before the first start, after a start that failed and after the server exited
        (the next call or start() starts it again)."""
        client = self._client
        return client is not None and client.running

    def _server(self, until: float) -> McpClient:
        if self._client is not None and self._client.running:
            return self._client
        if self._client is not None:
            self._client.stop()
        self._client = None
        left = until - time.monotonic()
        if left <= 0:
            raise ClientError("CLIENT_DEADLINE_PASSED")
        self.starts += 1
        start_deadline = time.monotonic() + min(self._start_timeout, left)
        try:
            client = McpClient.start(self._command, protocol=self._protocol, timeout=min(self._start_timeout, left),
                                     env_names=self._env_names)
        except ClientError as error:
            raise ServerNotStarted(error.code) from error
        if self._pinned is not None:
            try:  # the listing is part of the start: a start without it failed, and sends nothing
                self._compare(client, start_deadline)
            except ClientError as error:
                client.stop()
                raise ServerNotStarted(error.code) from error
            except Exception:  # noqa: BLE001 - a listing that cannot be compared is one that failed
                client.stop()
                raise ServerNotStarted("CLIENT_PROTOCOL") from None
            except BaseException:
                client.stop()
                raise
        self._client = client
        return self._client

    def _compare(self, client: McpClient, deadline: float) -> None:
        # A listing that fails withholds every pinned tool until one succeeds: nothing unreviewed runs.
        # So does any other failure of the comparison (the announcement it answers is read already).
        try:
            self._drift = drift_of(self._pinned or {}, client.list_tools(deadline=deadline))
        except BaseException:
            self._drift = {name: ["unlisted"] for name in self._pinned or {}}
            raise

    def start(self, *, timeout: float | None = None) -> dict[str, list[str]]:
        """Start the server now (not at the first call) and answer what its listing drifted
        (``drift``); ServerNotStarted when it cannot start. A running server is left as it is."""
        until = time.monotonic() + (self._call_timeout if timeout is None else timeout)
        with self._lock:
            self._server(until)
        return self.drift

    def stderr_tail(self) -> str:
        """The running (or last) server's stderr tail: for a person's diagnosis, never for a model."""
        return "" if self._client is None else self._client.stderr_tail()

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.stop()
            self._client = None

    def __enter__(self) -> McpForwarder:
        return self

    def __exit__(self, *_exc: Any) -> None:
        self.close()

