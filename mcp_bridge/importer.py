"""The MCP bridge's import: list an MCP server's tools over stdio and write a contract draft and a report.

The server is untrusted. It is started and spoken to through the bridge's client (client.py: its
stderr kept as a bounded tail, never echoed; every line bounded and decoded by the core's strict
decoder); the import adds its own bounds (message count and total bytes for the whole import, one
deadline for all of it), and reads the listing twice, page by page: it must not change between the
two readings. Each tool's schemas go through the exact subset compiler (through the host's overlay
for the tool, when it names one: ``narrow()`` proves each replacement narrower): a tool whose
input schema compiles becomes a ``tool-contracts-v1`` entry (its schemas in normalized form, the
server's own digests in its provenance; an output schema the compiler refuses makes it a tool that
answers text), a tool whose input does not is listed in the report with its code and its raw
schemas. Nothing in the draft is trusted: every tool is a ``write`` unless the host names it
read-only, and the server's annotations are kept as hints only.

Each drafted tool's model-facing text (name, title, description, annotations, both raw schemas)
is pinned in its contract: the description verbatim, the raw schemas' digests in its provenance,
the title's and the annotations' digests in its contract revision. A listing compared with a
reviewed contracts file (``HostChoices.reviewed``) withholds every reviewed tool whose pinned text
changed; forward.py makes the same comparison at every server start.

Both protocol eras: 2026-07-28 (``server/discover``, then per-request ``_meta``) and the
``initialize`` handshake of earlier revisions; ``--protocol auto`` tries the first and falls back.

Exit status: 0 every tool drafted; 1 the draft and the report were written but some tools were
refused or withheld (drift); 2 the import failed (``{"passed": false, "error": {...}}`` on stdout,
nothing written).

Sections, in the order data flows:
    1. Limits and constants    3. Listing               5. Drafting
    2. Errors                  4. Pinned text, drift    6. CLI
"""
from __future__ import annotations

import json
import os
import re
import shlex
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final, Mapping, Sequence

_HERE: Final = Path(__file__).resolve().parent
if not __package__:  # by path from a checkout: the repository root (the core) and this folder
    for _path in (str(_HERE.parent), str(_HERE)):
        if _path not in sys.path:
            sys.path.insert(0, _path)

import tool_dispatcher  # noqa: E402
from tool_dispatcher import (  # noqa: E402
    BoundaryError, CatalogError, CliParser, emit_json, error_specs, is_identifier,
)

if __package__:  # installed as tool_dispatcher_mcp: its siblings are the package's, never top-level names
    from . import client
    from .client import ClientError, Limits, McpClient, Session
else:
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

# Characters of a tool description the import drafts unless its host chooses another limit, up to
# the contracts file's ceiling (tool_dispatcher.MAX_DESCRIPTION_LENGTH): it is untrusted text that
# reaches a model, and most real descriptions are far shorter.
DEFAULT_MAX_DESCRIPTION: Final = 2_048

REPORT_FORMAT: Final = "mcp-import-report-v1"
DEFAULT_ROLE: Final = "mcp.tools"
HINTS: Final = MappingProxyType({  # the server's annotation -> the draft's hint field
    "readOnlyHint": "read_only", "destructiveHint": "destructive", "idempotentHint": "idempotent",
    "openWorldHint": "open_world",
})
# A tool's model-facing text, as a listing names its fields: the text pin covers all of them, and
# a drift names the ones that changed (in this order). The name is the key a tool is found by.
MODEL_FACING: Final = ("name", "title", "description", "annotations", "inputSchema", "outputSchema")
DRIFT_FIELDS: Final = MODEL_FACING[1:]
# A drafted tool's contract revision: "contract." + the contract's digest (its effect, both
# normalized schemas and the text pin), then the title's and the annotations' digests, 16 hex
# digits each: 59 characters, inside an identifier's 64, so the tool-contracts-v1 loader keeps it
# as it is. The description is kept verbatim and the raw schemas' digests are in the provenance.
PIN_DIGITS: Final = 16
PINNED_REVISION: Final = re.compile(r"contract\.[0-9a-f]{16}\.([0-9a-f]{16})\.([0-9a-f]{16})")
MISSING: Final = "missing"  # a drift: the server no longer lists a reviewed tool
UNPINNED: Final = "unpinned"  # a drift: the reviewed contract carries no text pin to compare with
NO_DIGEST: Final = ""  # the digest of a value with no canonical form: equal to no pin

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
        TOOL_TASK_REQUIRED="The tool runs only as a task (taskSupport: required); the bridge does not make task calls.",
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
    """The import as a whole failed; nothing is written. An IMPORT_SERVER_ERROR names, in ``at``,
    the request the server refused ("server/discover", "initialize", "tools/list"), and its
    JSON-RPC error code (``rpc_code``), never the server's text."""

    CATALOG = IMPORT_CATALOG

    def __init__(self, code: str, at: str = "", *, rpc_code: int | None = None) -> None:
        super().__init__(code, at)
        self.rpc_code = rpc_code

    def details(self) -> dict[str, Any]:
        return {} if self.rpc_code is None else {"rpc_code": self.rpc_code}


def import_failure(error: ClientError) -> CatalogError:
    """The import's own error for a client's failure (a new value: the client's is not re-raised)."""
    if error.code == "CLIENT_JSON" and error.json_error is not None:
        return error.json_error
    code = IMPORT_CODES.get(error.code)
    if code == "IMPORT_SERVER_ERROR":
        return ImportFailure(code, error.method or "", rpc_code=error.rpc_code)
    return error if code is None else ImportFailure(code)


# ============================================================================================
# 3. Listing
# ============================================================================================


def stable_listing(server: Any, *, deadline: float) -> list[Any]:
    """The listing read twice; any difference (a tool added, a schema swapped) refuses the import."""
    first = server.list_tools(deadline=deadline)
    second = server.list_tools(deadline=deadline)
    if _exact_text(first) != _exact_text(second):
        raise ImportFailure("IMPORT_LISTING_CHANGED")
    return first


def _exact_text(listing: list[Any]) -> str:
    # Not the canonical form: a value the server sent may have none (an integer beyond
    # +/-(2**53-1)), and that is its one tool's refusal (JSON_NOT_PORTABLE), not the listing's.
    # The decoder's values (dicts, lists, strings, integers, finite floats) each have this text.
    return json.dumps(listing, ensure_ascii=True, sort_keys=True, allow_nan=False)


# ============================================================================================
# 4. Pinned text and drift
# ============================================================================================
# What a server says of a tool reaches a model (through a host's review) and can change under the
# same name at any start (the "rug pull"). The draft pins it where the tool-contracts-v1 loader
# already keeps it: the description verbatim, the raw schemas' SHA-256 in the provenance, the
# annotations' booleans in the hints, and the title's and the whole annotations object's digests
# (64 bits each) in the contract revision, whose contract digest covers the SHA-256 of all of it.
# The comparison below needs nothing but a reviewed ToolSpec and a fresh listing entry; a host's
# own edits of a reviewed entry (its effect, resource or bound fields, role) change no pin.


def sha256_of(value: Any) -> str:
    """SHA-256 of a server's value's canonical JSON, or NO_DIGEST when it has none (an integer
    beyond +/-(2**53-1), say): no pin matches it, so such a text drifts, and is never drafted."""
    try:
        return tool_dispatcher.canonical_sha256(value)
    except (TypeError, ValueError, RecursionError, BoundaryError):
        return NO_DIGEST


def text_sha256(tool: Mapping[str, Any]) -> str:
    """SHA-256 of the canonical JSON of a tool's model-facing fields, as the server listed them."""
    return sha256_of({key: tool[key] for key in MODEL_FACING if key in tool})


def text_pins(tool: Mapping[str, Any]) -> tuple[str, str]:
    """The title's and the annotations' pins (an absent title is null, absent annotations {})."""
    return sha256_of(tool.get("title"))[:PIN_DIGITS], sha256_of(tool.get("annotations", {}))[:PIN_DIGITS]


def hints_of(annotations: Any) -> dict[str, bool | None]:
    """The server's annotations as the draft's hints: each a boolean, or null when absent or not one."""
    found = annotations if type(annotations) is dict else {}
    return {field: found[key] if type(found.get(key)) is bool else None for key, field in HINTS.items()}


def _schema_sha256(tool: Mapping[str, Any], key: str) -> str | None:
    return None if tool.get(key) is None else sha256_of(tool[key])


def drift_fields(tool: Mapping[str, Any], spec: tool_dispatcher.ToolSpec) -> list[str]:
    """The model-facing fields of a listed tool that differ from its reviewed contract's pins, in
    DRIFT_FIELDS order: [] when none does; [UNPINNED] when the contract holds no pin to compare."""
    pins = PINNED_REVISION.fullmatch(spec.contract_revision)
    if pins is None:
        return [UNPINNED]
    title, annotations = text_pins(tool)
    description = tool.get("description", "")
    provenance = spec.provenance
    changed = {
        "title": title != pins[1],
        "description": type(description) is not str or description != spec.description,
        "annotations": annotations != pins[2] or hints_of(tool.get("annotations")) != dict(spec.hints),
        "inputSchema": ("inputSchema" not in tool
                        or _schema_sha256(tool, "inputSchema") != provenance.get("input_schema_sha256")),
        "outputSchema": _schema_sha256(tool, "outputSchema") != provenance.get("output_schema_sha256"),
    }
    return [name for name in DRIFT_FIELDS if changed[name]]


def drift_of(reviewed: Mapping[str, tool_dispatcher.ToolSpec], listing: Sequence[Any]) -> dict[str, list[str]]:
    """Every reviewed tool drafted from an MCP server (provenance source "mcp_import") whose pinned
    text the listing no longer matches, in the reviewed order: {name: fields}, [MISSING] for a tool
    the listing does not hold. A name listed twice drifts when either entry does."""
    listed: dict[str, list[Mapping[str, Any]]] = {}
    for tool in listing:
        if type(tool) is dict and type(tool.get("name")) is str:
            listed.setdefault(tool["name"], []).append(tool)
    drift: dict[str, list[str]] = {}
    for name, spec in reviewed.items():
        if spec.provenance.get("source") != "mcp_import":
            continue  # the host's own tool: no server's listing speaks for it
        entries = listed.get(name)
        if not entries:
            drift[name] = [MISSING]
            continue
        found = [drift_fields(entry, spec) for entry in entries]
        fields = [field for field in (UNPINNED, *DRIFT_FIELDS) if any(field in each for each in found)]
        if fields:
            drift[name] = fields
    return drift


# ============================================================================================
# 5. Drafting
# ============================================================================================


@dataclass(frozen=True, slots=True)
class HostChoices:
    """What only the host decides: which tools are reads, the role every tool requires, the longest
    description a drafted tool may carry (1 to tool_dispatcher.MAX_DESCRIPTION_LENGTH), the
    narrowings of its tool-contract-overlay-v1 file (applied while drafting), and the reviewed
    contracts a fresh listing must still match (a drifted tool is withheld from the draft)."""

    read_only: frozenset[str] = frozenset()
    role: str = DEFAULT_ROLE
    overlay: tool_dispatcher.ContractOverlay | None = None
    max_description: int = DEFAULT_MAX_DESCRIPTION
    reviewed: Mapping[str, tool_dispatcher.ToolSpec] | None = None

    def __post_init__(self) -> None:
        limit = self.max_description
        if type(limit) is not int or not 1 <= limit <= tool_dispatcher.MAX_DESCRIPTION_LENGTH:
            raise ValueError("max_description out of range")


class _Refused(Exception):
    def __init__(self, code: str, at: str, *, by_overlay: bool = False) -> None:
        super().__init__(code)
        self.code = code
        self.at = at
        self.by_overlay = by_overlay  # placed in the host's overlay: the host's narrowing failed


def draft(listing: Sequence[Any], session: Session, host: HostChoices) -> tuple[dict[str, Any], dict[str, Any]]:
    """The contract draft and the report of one listing."""
    names = [tool.get("name") for tool in listing if type(tool) is dict]
    if len([name for name in names if type(name) is str]) != len({name for name in names if type(name) is str}):
        raise ImportFailure("IMPORT_DUPLICATE_TOOL")
    narrowing = MappingProxyType({}) if host.overlay is None else host.overlay.tools
    for name, tool_overlay in narrowing.items():
        if name not in names:  # an overlay for a tool the server does not list narrows nothing: refused
            raise BoundaryError("CONTRACTS_REFERENCE", f"overlay.tools[{tool_overlay.index}].name")
    drift = {} if host.reviewed is None else drift_of(host.reviewed, listing)
    entries, refused, as_text, bounds = [], [], [], []
    for index, tool in enumerate(listing):
        name = tool.get("name") if type(tool) is dict and type(tool.get("name")) is str else None
        shown = name if name is not None and tool_dispatcher.TOOL_NAME.fullmatch(name) else None
        if name in drift:
            continue  # withheld until the host reviews it again: the report's "drift" names it
        try:
            entry, host_bounds, text_output = _draft_tool(tool, index, session, host, narrowing.get(name))
        except _Refused as refusal:
            refused.append({"index": index, "tool": shown, "code": refusal.code, "at": refusal.at,
                            "input_schema": _raw(tool, "inputSchema"), "output_schema": _raw(tool, "outputSchema")})
            continue
        entries.append(entry)
        bounds.extend({"tool": shown, "at": at} for at in host_bounds)
        if text_output is not None:
            as_text.append({"tool": shown, "code": text_output.code, "at": text_output.at})
    document = {"format": tool_dispatcher.CONTRACTS_FORMAT, "tools": entries}
    report = {
        "format": REPORT_FORMAT,
        "server": {"name": session.server_name, "version": session.server_version, "era": session.era,
                   "protocol_version": session.protocol_version},
        "tool_count": len(listing),
        "drafted": len(entries),
        "refused": refused,
        "codes": dict(sorted(Counter(item["code"] for item in refused).items())),
        "output_as_text": as_text,
        "drift": [{"tool": name, "fields": fields} for name, fields in drift.items()],
        "host_bounds": bounds,
        "read_only_by_host": sorted(host.read_only & {entry["name"] for entry in entries}),
        # Drafted as writes although the server hints read-only (untrusted): --read-only makes each
        # a read, once the host has reviewed that it is one.
        "read_only_hinted": sorted(entry["name"] for entry in entries
                                   if entry["effect"] == "write" and entry["hints"]["read_only"] is True),
    }
    return document, report


def _raw(tool: Any, key: str) -> Any:
    """A refused tool's schema as the server sent it (within the message limits), for the host's overlay."""
    return tool.get(key) if type(tool) is dict else None


def _draft_tool(tool: Any, index: int, session: Session, host: HostChoices,
                narrowing: Any = None) -> tuple[dict[str, Any], list[str], _Refused | None]:
    """One tool's draft entry, the places only the host's bounds hold, and why its output is text
    (None: its output schema compiled, or it declares none)."""
    at = f"tools[{index}]"
    if type(tool) is not dict or type(tool.get("name")) is not str or "inputSchema" not in tool:
        raise _Refused("TOOL_MALFORMED", at)
    name = tool["name"]
    if tool_dispatcher.TOOL_NAME.fullmatch(name) is None:
        raise _Refused("TOOL_NAME_INVALID", f"{at}.name")
    description = tool.get("description", "")
    if type(description) is not str:
        raise _Refused("TOOL_MALFORMED", f"{at}.description")
    if len(description) > host.max_description:
        raise _Refused("TOOL_DESCRIPTION_TOO_LONG", f"{at}.description")
    annotations = tool.get("annotations", {})
    if type(annotations) is not dict:
        raise _Refused("TOOL_MALFORMED", f"{at}.annotations")
    execution = tool.get("execution", {})
    if type(execution) is not dict:
        raise _Refused("TOOL_MALFORMED", f"{at}.execution")
    if execution.get("taskSupport") == "required":
        # Its server answers any call that is not task-augmented with an error: drafted, it could
        # only ever fail. "optional" and "forbidden" tools answer a plain call, as drafted.
        raise _Refused("TOOL_TASK_REQUIRED", f"{at}.execution.taskSupport")
    compiled_in = _compile(tool["inputSchema"], f"{at}.inputSchema", narrowing, "input")
    compiled_out, text_output = _output(tool, at, narrowing)
    secret = None if compiled_out is None else compiled_out.secret_field()
    if secret is not None:  # every answer holding it would be withheld, and its text is no safer: refused
        raise _Refused("CONTRACTS_SECRET_FIELD", _placed(secret, f"{at}.outputSchema"))
    for key in DRIFT_FIELDS:  # a text with no canonical form has no pin: it could never be compared
        if key in tool and sha256_of(tool[key]) == NO_DIGEST:
            raise _Refused("JSON_NOT_PORTABLE", f"{at}.{key}")
    input_schema = compiled_in.to_schema()
    output_schema = None if compiled_out is None else compiled_out.to_schema()
    effect = "read" if name in host.read_only else "write"
    contract_digest = tool_dispatcher.canonical_sha256(
        {"tool": name, "effect": effect, "input": input_schema, "output": output_schema, "text": text_sha256(tool)})
    title_pin, annotations_pin = text_pins(tool)
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
            "contract": f"contract.{contract_digest[:PIN_DIGITS]}.{title_pin}.{annotations_pin}",
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
            # The server's own schemas, as sent: a narrowed or a text output keeps the raw digest.
            "input_schema_sha256": _schema_sha256(tool, "inputSchema"),
            "output_schema_sha256": _schema_sha256(tool, "outputSchema"),
        },
        "hints": hints_of(annotations),
    }
    host_bounds = [_placed(item, f"{at}.inputSchema") for item in compiled_in.host_bounds()]
    if compiled_out is not None:
        host_bounds += [_placed(item, f"{at}.outputSchema") for item in compiled_out.host_bounds()]
    return entry, host_bounds, text_output


def _output(tool: dict[str, Any], at: str,
            narrowing: Any) -> tuple[tool_dispatcher.CompiledSchema | None, _Refused | None]:
    """The compiled output schema, or None and why the tool answers text instead: an output schema
    the compiler refuses is no reason to refuse the tool (the core bounds and scans a text output),
    but a narrowing of the host's that fails is the host's to fix, so it refuses the tool."""
    if tool.get("outputSchema") is None:
        if narrowing is not None and narrowing.output:
            raise _Refused("OVERLAY_PATH", f"overlay.tools[{narrowing.index}].output[0]", by_overlay=True)
        return None, None
    try:
        return _compile(tool["outputSchema"], f"{at}.outputSchema", narrowing, "output"), None
    except _Refused as refusal:
        if refusal.by_overlay:
            raise
        return None, refusal


def _placed(path: str, at: str) -> str:
    """A compiler path (schema.properties[1]...) moved inside the listing (tools[3].inputSchema...)."""
    return at + path[len(tool_dispatcher.SCHEMA_ROOT):]


def _compile(schema: Any, at: str, narrowing: Any = None, side: str = "input") -> tool_dispatcher.CompiledSchema:
    """The schema compiled, through the host's narrowings of this side when it has some; a refusal
    placed in the listing, or in the overlay when it is the overlay's (as the core places it)."""
    entries = () if narrowing is None else getattr(narrowing, side)
    # As the core loads the draft: an output's declared bounds may reach the output ceilings.
    bounds = tool_dispatcher.OUTPUT_BOUNDS if side == "output" else tool_dispatcher.Bounds()
    try:
        if entries:
            return tool_dispatcher.narrow(schema, MappingProxyType(dict(entries)), bounds=bounds)
        return tool_dispatcher.compile_schema(schema, bounds=bounds)
    except (TypeError, ValueError, RecursionError):
        raise _Refused("JSON_NOT_PORTABLE", at) from None  # a value the server sent with no canonical form
    except BoundaryError as refusal:
        if refusal.scope != "schema":
            raise
        if refusal.at.startswith("overlay["):
            number = int(refusal.at[len("overlay["):-1])
            place = f"overlay.tools[{narrowing.index}].{side}[{number}]"
            raise _Refused(refusal.code, place, by_overlay=True) from None
        raise _Refused(refusal.code, _placed(refusal.at, at)) from None


def import_server(command: Sequence[str], *, protocol: str = "auto", timeout: float = DEFAULT_TIMEOUT,
                  host: HostChoices = HostChoices(),
                  env_names: Sequence[str] = ()) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run the server, read its listing, stop it; the draft and the report, or ImportFailure (or
    the core's CONTRACTS_REFERENCE for an overlay that names a tool the server does not list).
    The server's environment is the client's minimal one and the variables ``env_names`` names."""
    deadline = time.monotonic() + timeout
    try:
        with McpClient.start(command, protocol=protocol, timeout=timeout, limits=IMPORT_LIMITS,
                             exit_grace=EXIT_GRACE, term_grace=TERM_GRACE, env_names=env_names) as server:
            listing = stable_listing(server, deadline=deadline)
            session = server.session
    except ClientError as error:
        raise import_failure(error) from None
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
    parser.add_argument("--env", action="append", default=[], metavar="NAME",
                        help="a variable of this environment the server gets too (repeatable); by default "
                             "it gets only a minimal environment")
    parser.add_argument("--role", default=DEFAULT_ROLE, help="the role every drafted tool requires")
    parser.add_argument("--max-description", type=int, default=DEFAULT_MAX_DESCRIPTION, metavar="N",
                        help=f"the longest tool description drafted, 1 to {tool_dispatcher.MAX_DESCRIPTION_LENGTH}")
    parser.add_argument("--overlay", metavar="OVERLAY.json",
                        help="the host's tool-contract-overlay-v1 narrowings, applied while drafting")
    parser.add_argument("--reviewed", metavar="REVIEWED.json",
                        help="reviewed contracts: a tool whose pinned text changed since is withheld (drift)")
    arguments = parser.parse_args(argv)
    if (not 1 <= arguments.timeout <= MAX_TIMEOUT or not is_identifier(arguments.role)
            or not 1 <= arguments.max_description <= tool_dispatcher.MAX_DESCRIPTION_LENGTH
            or not client.is_environment_names(arguments.env)):
        parser.error("out of range")
    try:
        arguments.command = shlex.split(arguments.server_command)
    except ValueError:
        parser.error("unbalanced quotes")
    if not arguments.command:
        parser.error("empty command")
    # The report would be written over the draft, or either over the host's own inputs.
    outputs = (arguments.out, arguments.report)
    inputs = [path for path in (arguments.overlay, arguments.reviewed) if path is not None]
    if _same_file(*outputs) or any(_same_file(output, path) for output in outputs for path in inputs):
        parser.error("one file")
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


def _host_file(load: Any, path: str | None, place: str) -> Any:
    """The host's overlay or reviewed contracts, read before the server starts; a refusal keeps the
    core's code, placed in its file ("overlay...", "reviewed.tools[0]...")."""
    if path is None:
        return None
    try:
        return load(path)
    except BoundaryError as refusal:
        if refusal.at.startswith(place):
            raise
        raise BoundaryError(refusal.code, f"{place}.{refusal.at}" if refusal.at else place) from None


def _run(argv: Sequence[str] | None) -> int:
    arguments = _arguments(argv)
    host = HostChoices(frozenset(arguments.read_only), arguments.role,
                       overlay=_host_file(tool_dispatcher.load_overlay, arguments.overlay, "overlay"),
                       max_description=arguments.max_description,
                       reviewed=_host_file(tool_dispatcher.load_contracts, arguments.reviewed, "reviewed"))
    document, report = import_server(arguments.command, protocol=arguments.protocol, timeout=arguments.timeout,
                                     host=host, env_names=tuple(arguments.env))
    write_file(arguments.out, dump(document))
    write_file(arguments.report, dump(report))
    # An empty draft is no pass: the loader refuses it (CONTRACTS_LIMIT), and there is nothing to guard.
    passed = not report["refused"] and not report["drift"] and report["drafted"] > 0
    emit_json({"passed": passed, "format": REPORT_FORMAT, "tool_count": report["tool_count"],
               "drafted": report["drafted"], "refused": len(report["refused"]), "codes": report["codes"],
               "output_as_text": len(report["output_as_text"]), "drift": len(report["drift"])})
    return 0 if passed else 1
