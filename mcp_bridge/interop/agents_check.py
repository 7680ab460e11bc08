"""An agent framework's own MCP client in front of the guard: the OpenAI Agents SDK, no model.

    VENV_PYTHON -B mcp_bridge/interop/agents_check.py [--python PYTHON]

Run with the Python of a virtual environment holding requirements-agents.txt (run.sh makes one
outside the checkout). The guard (``mcp_bridge.py guard``) and the demo note server behind it run
with PYTHON (default: this one): they need the standard library only.

The framework's path, as its Runner takes it, unchanged: an ``Agent`` with one
``agents.mcp.MCPServerStdio`` whose command is the guard, run by ``Runner.run`` with the SDK's own
scripted model (``agents.testing.ScriptedModel``). The "model" answers one function call with the
exact arguments JSON given below, then a final message; the Runner lists the tools through
MCPUtil, invokes the FunctionTool (``on_invoke_tool`` -> ``MCPUtil.invoke_mcp_tool`` ->
``MCPServerStdio.call_tool``) and hands the output back to the model, which is where it is read.
No network, no API key, tracing off. The only setting changed from the framework's defaults is
the MCP read timeout (5 s -> TIMEOUT): a write waits for the host's approval command. With mcp 2.x
the framework connects through ``mcp.Client(mode="auto")``: ``server/discover`` first, so the guard
is met in the 2026-07-28 era, where the SDK validates every result against that revision's schema
(a tools/list result without ``ttlMs`` and ``cacheScope`` is refused before any tool is listed).

Checks (the summary says what each one saw):
    1. listing    the model is given exactly the guard's tools, prefixed, with the reviewed schemas;
    2. read       a well-formed read answers the guard's model_result (status ok) and reaches the
                  server once;
    3. malformed  each call in MALFORMED is refused, by the guard (INVALID_ARGUMENTS) or by the
                  framework first (each case's refused_by: what the pinned version was seen to do),
                  and reaches no server: the note store is unchanged and the server saw no call;
    4. approval   a write under a host whose approval command answers no is APPROVAL_REQUIRED and
                  writes nothing; under a host whose command answers yes it writes once, and the
                  same call again (a retry) is answered from the ledger ("local_replay"): one write.
The guard's sealed-chain audit log of each session is verified, and the calls it holds are counted
against what the framework sent. It prints one JSON summary and exits 0 only when every check holds
(1 when one failed, 2 when the check could not run). Nothing is written into the checkout.

    PYTHON -B agents_check.py --serve-demo CALLS -- DEMO ARGS...

is the demo server with every tools/call it receives appended to CALLS (one JSON line each): the
server's side of "reached the server once". The guard starts it; the check never calls it itself.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Sequence

HERE: Final = Path(__file__).resolve().parent
ROOT: Final = HERE.parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "mcp_bridge")]

PREFIX: Final = "notes_"
ROLE: Final = "mcp.tools"
TIMEOUT: Final = 60  # seconds: the framework's MCP read timeout, and the guard's start on a loaded machine
SEEDED: Final = {"name": "welcome", "text": "Hello from the note store."}  # in the store before the guard starts
SEEDED_STORE: Final = {"revisions": {SEEDED["name"]: 1}, "keyed_writes": 0}  # Folder.store() before any write
WRITE: Final = {"name": "agents", "text": "written once"}
CHECKS: Final = 6  # listing, read, refused write, malformed, approved write and retry, audit
APPROVE_NO: Final = "print('{\"approve\": false}')"
APPROVE_YES: Final = "print('{\"approve\": true}')"


@dataclass(frozen=True, slots=True)
class Malformed:
    """A call the model could send, as the exact arguments JSON, and who refuses it first."""

    label: str
    arguments: str
    refused_by: str  # "guard" or "framework": what the pinned framework version was seen to do


# Against write_note {name: ^[a-z0-9-]{1,32}$, text: string <= 1000}, closed, both required: each
# would be a write if it reached the server. The guard's host approves writes (a yes), so only
# the boundary's argument check stands between these calls and the store.
MALFORMED: Final = (
    Malformed("a number for a string", '{"name": "agents", "text": 3}', "guard"),
    Malformed("an extra field", '{"name": "agents", "text": "hi", "mood": "x"}', "guard"),
    Malformed("a newline after the name's pattern", '{"name": "agents\\n", "text": "hi"}', "guard"),
    Malformed("a missing required field", '{"name": "agents"}', "framework"),
    Malformed("a text over its maxLength", '{"name": "agents", "text": "' + "x" * 1001 + '"}', "guard"),
    Malformed("a null for a required string", '{"name": "agents", "text": null}', "guard"),
)


# ============================================================================================
# The counted demo server (run by the guard, standard library only)
# ============================================================================================


def serve_demo(calls: str, argv: list[str]) -> int:
    import demo_server  # noqa: PLC0415

    answer = demo_server.METHODS["tools/call"]

    def counted(server: Any, request_id: Any, params: dict[str, Any]) -> None:
        with open(calls, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"tool": params.get("name"), "arguments": params.get("arguments")}) + "\n")
        answer(server, request_id, params)

    demo_server.METHODS = {**demo_server.METHODS, "tools/call": counted}  # read at each request
    return demo_server.main(argv)


# ============================================================================================
# The folder: reviewed contracts, a seeded store, two host files
# ============================================================================================


class Folder:
    def __init__(self, path: Path, python: str) -> None:
        import demo_server  # noqa: PLC0415
        from importer import HostChoices, import_server  # noqa: PLC0415

        self.path = path
        self.python = python
        self.notes = path / "notes"
        self.notes.mkdir()
        self.calls = path / "calls.jsonl"
        draft, _report = import_server([python, "-B", str(ROOT / "mcp_bridge" / "demo_server.py")],
                                       host=HostChoices(read_only=frozenset({"read_note", "note_write_status"}),
                                                        role=ROLE))
        self.contracts = draft
        (path / "notes.json").write_text(json.dumps(draft), encoding="utf-8")
        store = {"format": demo_server.STORE_FORMAT, "writes": {},
                 "notes": {SEEDED["name"]: {"text": SEEDED["text"], "revision": 1}}}
        (self.notes / "notes.json").write_text(json.dumps(store), encoding="utf-8")

    def host(self, name: str, approve: str) -> Path:
        server = {"name": "notes", "prefix": PREFIX, "contracts": "notes.json",
                  "command": [self.python, "-B", str(Path(__file__).resolve()), "--serve-demo", str(self.calls),
                              "--", "--dir", str(self.notes)],
                  "status_tools": {"write_note": "note_write_status"}}
        document = {"format": "mcp-guard-host-v1",
                    "principal": {"tenant": "tenant-a", "subject": "alice", "roles": [ROLE]},
                    "approval": {"approver": "alice-at-client", "command": [self.python, "-B", "-c", approve]},
                    "servers": [server]}
        path = self.path / f"host-{name}.json"
        path.write_text(json.dumps(document), encoding="utf-8")
        return path

    def store(self) -> dict[str, Any]:
        document = json.loads((self.notes / "notes.json").read_text(encoding="utf-8"))
        return {"revisions": {name: note["revision"] for name, note in sorted(document["notes"].items())},
                "keyed_writes": len(document["writes"])}

    def server_calls(self) -> list[dict[str, Any]]:
        if not self.calls.exists():
            return []
        return [json.loads(line) for line in self.calls.read_text(encoding="utf-8").splitlines()]


# ============================================================================================
# The framework's side: one Runner.run per call
# ============================================================================================


class Session:
    """One guard, started by the framework's MCPServerStdio, and the calls a scripted model makes."""

    def __init__(self, folder: Folder, host: Path, audit: Path) -> None:
        from agents.mcp import MCPServerStdio  # noqa: PLC0415

        self.server = MCPServerStdio(
            params={"command": folder.python,
                    "args": ["-B", str(ROOT / "mcp_bridge" / "mcp_bridge.py"), "guard", "--host", str(host),
                             "--audit-log", str(audit)]},
            name="guard", client_session_timeout_seconds=TIMEOUT)
        self.listed: list[dict[str, Any]] = []

    async def call(self, tool: str, arguments: str) -> dict[str, Any]:
        """What the model reads back after one function call: the guard's model_result, or the
        framework's own text when it refused the call itself."""
        from agents import Agent, RunConfig, Runner  # noqa: PLC0415
        from agents.testing import ScriptedModel, assistant_message, function_call  # noqa: PLC0415

        model = ScriptedModel([[function_call(tool, arguments, call_id="call-1")], [assistant_message("done")]])
        agent = Agent(name="guarded", instructions="Use the notes tools.", model=model, mcp_servers=[self.server])
        await Runner.run(agent, "Go.", run_config=RunConfig(tracing_disabled=True), max_turns=3)
        self.listed = [{"name": tool.name, "parameters": tool.params_json_schema} for tool in model.calls[0].tools]
        return read_back(model.calls[1].input)


def read_back(items: list[Any]) -> dict[str, Any]:
    """The function_call_output the model was given, read as the guard's model_result when it is one."""
    outputs = [item for item in items if isinstance(item, dict) and item.get("type") == "function_call_output"]
    if len(outputs) != 1:
        return {"by": "none", "outputs": len(outputs)}
    output = outputs[0]["output"]
    text = output if isinstance(output, str) else "".join(
        part.get("text", "") for part in output if isinstance(part, dict))
    try:
        found = json.loads(text)
    except ValueError:
        found = None
    if isinstance(found, dict) and "status" in found and "source" in found:
        return {"by": "guard", "status": found["status"], "code": found.get("error", {}).get("code"),
                "delivery": found.get("delivery"), "data": found.get("data")}
    return {"by": "framework", "text": text[:300]}


def audited(path: Path) -> list[list[Any]]:
    """The calls in the guard's audit log (verified whole): [tool, status, code or delivery]."""
    import tool_dispatcher as td  # noqa: PLC0415

    data = path.read_bytes()
    report = td.verify_audit_log(data)
    entries = []
    for line in data.splitlines()[:report.entries]:
        result = json.loads(line)["package"]["model_result"]
        entries.append([result["source"]["tool"], result["status"],
                        result.get("error", {}).get("code") or result.get("delivery")])
    return entries


# ============================================================================================
# The checks
# ============================================================================================


def check(name: str, passed: bool, **seen: Any) -> dict[str, Any]:
    return {"check": name, "passed": bool(passed), **seen}


def failed(name: str, error: BaseException) -> dict[str, Any]:
    """A session the framework could not finish: its exception, named and cut short (the SDK's
    text, never the server's: the guard answers only its own codes)."""
    return check(name, False, error=type(error).__name__, message=" ".join(str(error).split())[:400])


async def run_checks(folder: Folder) -> tuple[list[dict[str, Any]], str | None]:
    results: list[dict[str, Any]] = []
    protocol = None
    try:
        protocol = await refused_session(folder, results)
    except Exception as error:  # noqa: BLE001 - a check that cannot run is a failed check, with its reason
        results.append(failed("session (the host says no): the framework ran every call", error))
    try:
        await approved_session(folder, results)
    except Exception as error:  # noqa: BLE001
        results.append(failed("session (the host says yes): the framework ran every call", error))
    if len(results) == CHECKS - 1:  # every session ran whole: their logs are closed
        results.append(audit_check(folder, results))
    return results, protocol


async def refused_session(folder: Folder, results: list[dict[str, Any]]) -> str | None:
    """Under a host whose approval command says no: the listing, a read, an unapproved write."""
    expected_tools = [PREFIX + entry["name"] for entry in folder.contracts["tools"]]
    schemas = {PREFIX + entry["name"]: entry["input_schema"] for entry in folder.contracts["tools"]}
    session = Session(folder, folder.host("no", APPROVE_NO), folder.path / "audit-no.jsonl")
    async with session.server:
        read = await session.call(PREFIX + "read_note", json.dumps({"name": SEEDED["name"]}))
        names = [tool["name"] for tool in session.listed]
        results.append(check("listing: the model is given exactly the guard's tools, with the reviewed schemas",
                             names == expected_tools and all(
                                 tool["parameters"] == schemas[tool["name"]] for tool in session.listed),
                             tools=names))
        reached = folder.server_calls()
        results.append(check("read: the guard's model_result, status ok; the server reached once",
                             read == {"by": "guard", "status": "ok", "code": None, "delivery": "fresh",
                                      "data": SEEDED} and reached == [{"tool": "read_note",
                                                                       "arguments": {"name": SEEDED["name"]}}],
                             answer=read, server_calls=len(reached)))
        unapproved = await session.call(PREFIX + "write_note", json.dumps(WRITE))
        results.append(check("approval: the command says no -> APPROVAL_REQUIRED, the store unchanged",
                             unapproved.get("code") == "APPROVAL_REQUIRED" and folder.store() == SEEDED_STORE
                             and len(folder.server_calls()) == 1, answer=unapproved, store=folder.store()))
        return getattr(session.server.session, "protocol_version", None)


async def approved_session(folder: Folder, results: list[dict[str, Any]]) -> None:
    """Under a host whose approval command says yes: malformed writes, then one write and its retry."""
    session = Session(folder, folder.host("yes", APPROVE_YES), folder.path / "audit-yes.jsonl")
    async with session.server:
        cases = []
        for case in MALFORMED:
            answer = await session.call(PREFIX + "write_note", case.arguments)
            refused = answer["by"] == "framework" or (answer["by"] == "guard" and answer["code"] == "INVALID_ARGUMENTS")
            cases.append({"case": case.label, "refused_by": answer["by"], "expected": case.refused_by,
                          "passed": refused and answer["by"] == case.refused_by and folder.store() == SEEDED_STORE
                          and len(folder.server_calls()) == 1,
                          **({"code": answer["code"]} if answer["by"] == "guard" else {"text": answer.get("text")})})
        results.append(check("malformed: refused (by the guard, or the framework first); no write, no server call",
                             all(case["passed"] for case in cases), cases=cases, store=folder.store()))
        first = await session.call(PREFIX + "write_note", json.dumps(WRITE))
        again = await session.call(PREFIX + "write_note", json.dumps(WRITE))
        written = {"name": WRITE["name"], "revision": 1}
        writes = [call for call in folder.server_calls() if call["tool"] == "write_note"]
        results.append(check("approval: the command says yes -> one write; the same call again replays",
                             (first.get("status"), first.get("delivery"), first.get("data")) == ("ok", "fresh", written)
                             and (again.get("status"), again.get("delivery"), again.get("data"))
                             == ("ok", "local_replay", written)
                             and folder.store() == {"revisions": {**SEEDED_STORE["revisions"], WRITE["name"]: 1},
                                                    "keyed_writes": 1} and len(writes) == 1,
                             first=first, again=again, store=folder.store(), server_write_calls=len(writes)))


def audit_check(folder: Folder, results: list[dict[str, Any]]) -> dict[str, Any]:
    """Both guards' logs verify; the calls the framework refused itself never reached a guard."""
    import tool_dispatcher as td  # noqa: PLC0415

    try:
        audit_no, audit_yes = audited(folder.path / "audit-no.jsonl"), audited(folder.path / "audit-yes.jsonl")
    except (OSError, ValueError, KeyError, td.CatalogError) as error:
        return failed("audit: each guard's log verifies", error)
    malformed = next(item for item in results if "cases" in item)
    by_guard = sum(case["refused_by"] == "guard" for case in malformed["cases"])
    invalid = sum(entry[2] == "INVALID_ARGUMENTS" for entry in audit_yes)
    return check("audit: each guard's log verifies; it holds the calls the framework sent, and no other",
                 invalid == by_guard and [entry[0] for entry in audit_no] == [PREFIX + "read_note",
                                                                               PREFIX + "write_note"],
                 audit_no=audit_no, audit_yes=audit_yes)


def framework() -> dict[str, str]:
    import importlib.metadata as metadata  # noqa: PLC0415

    return {name: metadata.version(name) for name in ("openai-agents", "mcp", "openai")}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--serve-demo"] and len(argv) >= 3 and argv[2] == "--":
        return serve_demo(argv[1], argv[3:])
    parser = argparse.ArgumentParser(description="The OpenAI Agents SDK's MCP client through the guard, no model.")
    parser.add_argument("--python", default=sys.executable, help="the Python that runs the guard and the server")
    options = parser.parse_args(argv)
    try:
        from agents import set_tracing_disabled  # noqa: PLC0415
    except ImportError:
        print(json.dumps({"passed": False, "error": "the agents package is not installed here"}))
        return 2
    set_tracing_disabled(True)
    with tempfile.TemporaryDirectory(prefix="agents-check.") as work:
        folder = Folder(Path(work), options.python)
        checks, protocol = asyncio.run(run_checks(folder))
    passed = len(checks) == CHECKS and all(item["passed"] for item in checks)
    print(json.dumps({"passed": passed, "framework": framework(), "protocol": protocol,
                      "path": "Runner.run(Agent(model=ScriptedModel, mcp_servers=[MCPServerStdio(guard)]))",
                      "checks": checks}, indent=2))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
