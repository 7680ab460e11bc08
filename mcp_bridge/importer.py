"""The MCP bridge's import: list an MCP server's tools over stdio and write a contract draft and a report.

The server is untrusted. It is started and spoken to through the bridge's client (client.py: its
stderr kept as a bounded tail, never echoed; every line bounded and decoded by the core's strict
decoder); the import adds its own bounds (message count and total bytes for the whole import, one
deadline for all of it), and reads the listing twice, page by page: it must not change between the
two readings. Each tool's schemas go through the exact subset compiler: a tool whose schemas
compile becomes a ``tool-contracts-v1`` entry (its schemas in normalized form, the server's own
digests in its provenance), a tool that does not is listed in the report with its code. Nothing in
the draft is trusted: every tool is a ``write`` unless the host names it read-only, and the
server's annotations are kept as hints only.

Both protocol eras: 2026-07-28 (``server/discover``, then per-request ``_meta``) and the
``initialize`` handshake of earlier revisions; ``--protocol auto`` tries the first and falls back.

Exit status: 0 every tool drafted; 1 the draft and the report were written but some tools were
refused; 2 the import failed (``{"passed": false, "error": {...}}`` on stdout, nothing written).

Sections, in the order data flows:
    1. Limits and constants    3. Listing               5. CLI
    2. Errors                  4. Drafting
"""
from __future__ import annotations

import json
import os
import shlex
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final, Sequence

_HERE: Final = Path(__file__).resolve().parent
for _path in (str(_HERE.parent), str(_HERE)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import tool_dispatcher  # noqa: E402
from tool_dispatcher import (  # noqa: E402
    BoundaryError, CatalogError, CliParser, emit_json, error_specs, is_identifier,
)

import client  # noqa: E402
from client import ClientError, Limits, McpClient, Session  # noqa: E402


# ============================================================================================
# 1. Limits and constants
# ============================================================================================

MAX_LINE_BYTES: Final = client.MAX_LINE_BYTES  # one JSON-RPC message (the census reads saved ones at this bound)
MAX_MESSAGES: Final = 256  # lines read in one import, notifications included
MAX_TOTAL_BYTES: Final = 16_777_216  # everything the server may write in one import
DEFAULT_TIMEOUT: Final = 20  # seconds for the whole import, process start included
MAX_TIMEOUT: Final = 600
# The client's graces, read when an import starts (so that a test can shorten them here).
EXIT_GRACE: Final = client.EXIT_GRACE
TERM_GRACE: Final = client.TERM_GRACE
# The import's bounds are the whole import's, not one request's: a server that spreads a flood
# over the pages meets the same limit as one that sends it before its first answer.
IMPORT_LIMITS: Final = Limits(line_bytes=MAX_LINE_BYTES, request_messages=MAX_MESSAGES, request_bytes=MAX_TOTAL_BYTES,
                              total_messages=MAX_MESSAGES, total_bytes=MAX_TOTAL_BYTES)

REPORT_FORMAT: Final = "mcp-import-report-v1"
DEFAULT_ROLE: Final = "mcp.tools"
HINTS: Final = MappingProxyType({  # the server's annotation -> the draft's hint field
    "readOnlyHint": "read_only", "destructiveHint": "destructive", "idempotentHint": "idempotent",
    "openWorldHint": "open_world",
})

# ============================================================================================
# 2. Errors
# ============================================================================================

IMPORT_CATALOG: Final = MappingProxyType({
    **error_specs(
        "import", False,
        IMPORT_SPAWN="The server command could not be started.",
        IMPORT_CLOSED="The server closed its output before answering.",
        IMPORT_SERVER_EXITED="The server exited with a failure status before answering.",
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

# The client's failure -> the import's code. A message that is not strict JSON keeps the core
# decoder's own JSON_* error; a code the import cannot meet (BUSY, BROKEN, REQUEST_INVALID) stays
# the client's, so that a bug would still answer in the one failure shape.
IMPORT_CODES: Final = MappingProxyType({
    "CLIENT_SPAWN": "IMPORT_SPAWN", "CLIENT_CLOSED": "IMPORT_CLOSED", "CLIENT_SERVER_EXITED": "IMPORT_SERVER_EXITED",
    "CLIENT_LINE_TOO_LONG": "IMPORT_LINE_TOO_LONG", "CLIENT_TOO_MANY_MESSAGES": "IMPORT_TOO_MANY_MESSAGES",
    "CLIENT_TOO_MUCH_DATA": "IMPORT_TOO_MUCH_DATA", "CLIENT_PROTOCOL": "IMPORT_PROTOCOL",
    "CLIENT_PROTOCOL_VERSION": "IMPORT_PROTOCOL_VERSION", "CLIENT_NO_TOOLS": "IMPORT_NO_TOOLS",
    "CLIENT_SERVER_ERROR": "IMPORT_SERVER_ERROR", "CLIENT_PAGINATION": "IMPORT_PAGINATION",
    "CLIENT_TOO_MANY_TOOLS": "IMPORT_TOO_MANY_TOOLS", "CLIENT_TIMEOUT": "IMPORT_TIMEOUT",
    "CLIENT_DEADLINE_PASSED": "IMPORT_TIMEOUT",
})


class ImportFailure(CatalogError):
    """The import as a whole failed; nothing is written."""

    CATALOG = IMPORT_CATALOG


def import_failure(error: ClientError) -> CatalogError:
    """The import's own error for a client's failure (a new value: the client's is not re-raised)."""
    if error.code == "CLIENT_JSON" and error.json_error is not None:
        return error.json_error
    code = IMPORT_CODES.get(error.code)
    return error if code is None else ImportFailure(code)


# ============================================================================================
# 3. Listing
# ============================================================================================


def stable_listing(server: Any, *, deadline: float) -> list[Any]:
    """The listing read twice; any difference (a tool added, a schema swapped) refuses the import."""
    first = server.list_tools(deadline=deadline)
    second = server.list_tools(deadline=deadline)
    if tool_dispatcher.canonical_json(first) != tool_dispatcher.canonical_json(second):
        raise ImportFailure("IMPORT_LISTING_CHANGED")
    return first


# ============================================================================================
# 4. Drafting
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
    try:
        with McpClient.start(command, protocol=protocol, timeout=timeout, limits=IMPORT_LIMITS,
                             exit_grace=EXIT_GRACE, term_grace=TERM_GRACE) as server:
            listing = stable_listing(server, deadline=deadline)
            session = server.session
    except ClientError as error:
        raise import_failure(error) from None
    return draft(listing, session, host)


# ============================================================================================
# 5. CLI
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
