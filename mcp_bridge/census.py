"""A census of tool schemas: how many compile into exact checks, and why the others do not.

    python -B mcp_bridge/census.py FOLDER

Reads every ``*.json`` file directly inside FOLDER (a saved ``tools/list`` answer: the JSON-RPC
response, its ``result``, or a bare list of tools), compiles each tool's input and output schema
with the exact subset compiler, and prints the counts and a histogram of refusal codes. It is
evidence for growing the subset, not a gate: it exits 0 whatever it finds, and 2 only when the
folder itself cannot be read. A file that cannot be decoded is counted under its JSON_* code.

``input_compiled_if_numbers_narrowed`` counts, beside the input schemas that compile, those refused
for a number's step (SCHEMA_NUMBER: a multipleOf with no exact double, 0.01) that would compile
with each such number read as an integer (narrowed_numbers): evidence of what a proof of that
narrowing would reach, which the core's overlays do not have (they answer OVERLAY_WIDENS).

Per listing (``servers``): its tools, how many input schemas compile, how many tools the import
drafts from it (importer.draft with the host's defaults: a refused output schema makes a tool that
answers text), and how many of those a Dispatcher accepts with an execute hook each, built for
real (``dispatchable``; when the whole draft does not build, tool by tool). A draft that does not
build as a whole is counted under its code in ``drafts_not_built`` (a draft over the contracts
file's byte limit: JSON_TOO_LARGE), a drafted tool that does not build alone in ``not_dispatchable``.
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

import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Final, Sequence

_HERE: Final = Path(__file__).resolve().parent
if not __package__:  # by path from a checkout: the repository root (the core) and this folder
    for _path in (str(_HERE.parent), str(_HERE)):
        if _path not in sys.path:
            sys.path.insert(0, _path)

import tool_dispatcher  # noqa: E402
from tool_dispatcher import BoundaryError, CatalogError, CliParser, error_specs  # noqa: E402

if __package__:  # installed as tool_dispatcher_mcp: its siblings are the package's, never top-level names
    from . import client, importer
else:
    import client  # noqa: E402
    import importer  # noqa: E402

MAX_FILES: Final = 1_000  # listings read in one census
MAX_FILE_BYTES: Final = client.MAX_LINE_BYTES  # one saved listing: one JSON-RPC message
CENSUS_FORMAT: Final = "mcp-schema-census-v1"
# A saved listing says nothing of its handshake: its draft is made as if over 2026-07-28, from an
# unnamed server (the names and versions only fill the draft's provenance).
SAVED_SESSION: Final = client.Session("modern", client.MODERN_VERSION, None, None)
# A number's keywords that may hold a float; an integer's must be integers, so narrowing drops them.
NUMBER_BOUNDS: Final = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")


class CensusError(CatalogError):
    CATALOG = error_specs("census", False, CENSUS_UNREADABLE="The census folder could not be read.")


def tools_of(document: Any) -> list[Any] | None:
    """The tools of a saved listing in any of its three shapes; None when it is none of them."""
    if type(document) is dict and type(document.get("result")) is dict:
        document = document["result"]
    if type(document) is dict:
        document = document.get("tools")
    return document if type(document) is list else None


def inexact_step(step: Any) -> bool:
    """Whether the compiler refuses a number's multipleOf for having no exact double (0.01), as
    opposed to accepting it (0.5, 2) or refusing it as no step at all (0, -1, "2": SCHEMA_BOUNDS)."""
    return refusal({"type": "number", "multipleOf": step}, require_object=False) == "SCHEMA_NUMBER"


def narrowed_numbers(schema: Any) -> Any:
    """A copy in which every number the compiler refuses for its step (SCHEMA_NUMBER: a multipleOf
    with no exact double) is read as an integer, its step and its float bounds dropped. Every other
    number is left as it is: it compiles. An upper bound of what narrowing those numbers would
    reach, not a narrowing the core proves: an overlay of such a number is OVERLAY_WIDENS, since
    whether 7 is a multiple of 0.01 depends on the validator's arithmetic.

    Called only on a schema the compiler refused for a number, so after its prescan: the copy's
    recursion is bounded by MAX_SCHEMA_DEPTH.
    """
    copy = tool_dispatcher.json_copy(schema)
    stack = [copy]
    while stack:
        item = stack.pop()
        if type(item) is dict:
            kind = item.get("type")
            if (kind == "number" or (type(kind) is list and "number" in kind)) and "multipleOf" in item \
                    and inexact_step(item["multipleOf"]):
                item["type"] = "integer" if kind == "number" else ["integer" if name == "number" else name
                                                                   for name in kind]
                for bound in NUMBER_BOUNDS:
                    if type(item.get(bound)) is float:
                        del item[bound]
            stack.extend(item.values())
        elif type(item) is list:
            stack.extend(item)
    return copy


def refusal(schema: Any, *, require_object: bool = True) -> str | None:
    try:
        tool_dispatcher.compile_schema(schema, require_object=require_object)
    except BoundaryError as error:
        if error.scope != "schema":
            raise
        return error.code
    return None


def census(folder: str) -> dict[str, Any]:
    try:
        names = sorted(name for name in os.listdir(folder) if name.endswith(".json"))
    except (OSError, TypeError, ValueError):
        raise CensusError("CENSUS_UNREADABLE") from None
    counts: Counter[str] = Counter()
    input_codes: Counter[str] = Counter()
    output_codes: Counter[str] = Counter()
    file_codes: Counter[str] = Counter()
    draft_codes: Counter[str] = Counter()
    build_codes: Counter[str] = Counter()
    servers = []
    for name in names[:MAX_FILES]:
        try:
            document = tool_dispatcher.decode_strict_json(
                tool_dispatcher.read_bounded(os.path.join(folder, name), max_bytes=MAX_FILE_BYTES),
                max_bytes=MAX_FILE_BYTES, max_depth=client.MAX_MESSAGE_DEPTH, policy=client.MESSAGE_JSON)
        except BoundaryError as error:
            file_codes[error.code] += 1
            continue
        tools = tools_of(document)
        if tools is None:
            file_codes["NOT_A_LISTING"] += 1
            continue
        counts["files"] += 1
        compiled_before = counts["input_compiled"]
        for tool in tools:
            _count_tool(tool, counts, input_codes, output_codes)
        drafted = drafted_tools(tools)
        servers.append({"file": name, "tools": len(tools), "input_compiled": counts["input_compiled"] - compiled_before,
                        "drafted": len(drafted), "dispatchable": dispatchable(drafted, draft_codes, build_codes)})
    return {
        "format": CENSUS_FORMAT,
        "files": counts["files"],
        "files_skipped": dict(sorted(file_codes.items())),
        "files_over_limit": max(0, len(names) - MAX_FILES),
        "tools": counts["tools"],
        "input_compiled": counts["input_compiled"],
        "input_compiled_if_numbers_narrowed": counts["input_narrowed"],
        "output_declared": counts["output_declared"],
        "output_compiled": counts["output_compiled"],
        "input_refusals": dict(sorted(input_codes.items())),
        "output_refusals": dict(sorted(output_codes.items())),
        "servers": servers,
        "drafts_not_built": dict(sorted(draft_codes.items())),
        "not_dispatchable": dict(sorted(build_codes.items())),
    }


def drafted_tools(tools: list[Any]) -> list[dict[str, Any]]:
    """The draft entries the import makes of a saved listing with the host's defaults; none when
    the import refuses the listing as a whole (more tools than a contracts file holds, which its
    client refuses while listing; two tools of one name)."""
    if len(tools) > tool_dispatcher.MAX_TOOLS:
        return []
    try:
        document, _report = importer.draft(tools, SAVED_SESSION, importer.HostChoices())
    except CatalogError:
        return []
    return document["tools"]


def dispatchable(drafted: list[dict[str, Any]], draft_codes: Counter[str], codes: Counter[str]) -> int:
    """How many drafted tools a Dispatcher accepts, each with an execute hook only: the whole draft
    built once, or, when that fails (its code counted), each tool alone (its refusal counted)."""
    if not drafted:
        return 0
    whole = _build_refusal(drafted)
    if whole is None:
        return len(drafted)
    draft_codes[whole] += 1
    accepted = 0
    for tool in drafted:
        code = _build_refusal([tool])
        if code is None:
            accepted += 1
        else:
            codes[code] += 1
    return accepted


def _never_run(_call: tool_dispatcher.ExecuteCall) -> tool_dispatcher.Execution:
    return tool_dispatcher.Execution(None, "not_committed")


def _build_refusal(tools: list[dict[str, Any]]) -> str | None:
    """The code that refuses a contracts file of these tools or its Dispatcher; None when both build."""
    try:
        registry = tool_dispatcher.parse_contracts(
            importer.dump({"format": tool_dispatcher.CONTRACTS_FORMAT, "tools": tools}))
        tool_dispatcher.Dispatcher(registry=registry,
                                   hooks={name: tool_dispatcher.ToolHooks(execute=_never_run) for name in registry})
    except BoundaryError as refusal:
        return refusal.code
    return None


def _count_tool(tool: Any, counts: Counter[str], input_codes: Counter[str], output_codes: Counter[str]) -> None:
    counts["tools"] += 1
    if type(tool) is not dict or "inputSchema" not in tool:
        input_codes["TOOL_MALFORMED"] += 1
        return
    code = refusal(tool["inputSchema"])
    if code is None:
        counts["input_compiled"] += 1
        counts["input_narrowed"] += 1
    else:
        input_codes[code] += 1
        if code == "SCHEMA_NUMBER" and refusal(narrowed_numbers(tool["inputSchema"])) is None:
            counts["input_narrowed"] += 1
    if tool.get("outputSchema") is not None:
        counts["output_declared"] += 1
        code = refusal(tool["outputSchema"])
        if code is None:
            counts["output_compiled"] += 1
        else:
            output_codes[code] += 1


def main(argv: Sequence[str] | None = None) -> int:
    return tool_dispatcher.run_cli(lambda: _run(argv))


def _run(argv: Sequence[str] | None) -> int:
    parser = CliParser(prog="census", description="Count the tool schemas of saved MCP listings that compile.")
    parser.add_argument("folder", help="a folder of saved tools/list answers (*.json)")
    tool_dispatcher.emit_json(census(parser.parse_args(argv).folder))
    return 0


if __name__ == "__main__":
    sys.exit(main())
