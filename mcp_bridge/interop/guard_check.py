"""The guard driven by the official MCP Python SDK's client, in front of real servers.

    VENV_PYTHON -B mcp_bridge/interop/guard_check.py --python SYSTEM_PYTHON

Run with the SDK's virtual environment (run.sh passes it): the SDK's ``Client`` starts the guard
(``mcp_bridge.py guard``, standard library only, with the system Python) as its stdio server, in
both protocol eras (``mode="auto"``: 2026-07-28; ``mode="legacy"``: the initialize handshake). The
guard fronts three servers: sdk_server.py (the SDK's own server, run with this environment),
demo_server.py (its note store counts the writes that took effect) and fault_server.py (its
--calls file counts every call that reached it). sdk_server.py counts its calls in the file that
SDK_SERVER_CALLS names, a variable of the guard's environment its host file passes on to it by name
(``servers[].env``: a server gets a minimal environment otherwise). The person is the SDK's elicitation callback, which approves or declines
as each check says. Checked, per era:

    1. the SDK lists exactly the reviewed tools, under their prefixes; a tool whose reviewed text
       the server no longer matches (drift) is not listed, and a call to it reaches nothing;
    2. malformed calls and an unknown tool come back as tool errors with their codes and reach
       no server;
    3. a write the person declines reaches no server; one they approve runs once, and the same
       call sent again (the SDK's retries) runs zero more times, answered from the ledger;
    4. a server killed mid-write answers OUTCOME_UNKNOWN; the call sent again reconciles through
       the status tool, exactly once, and nothing is written twice.

It prints one JSON summary and exits 0 only when every check held in both eras.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Final

ROOT: Final = Path(__file__).resolve().parent.parent.parent
BRIDGE: Final = ROOT / "mcp_bridge"
sys.path[:0] = [str(ROOT), str(BRIDGE)]

from mcp import Client, StdioServerParameters  # noqa: E402
from mcp import types  # noqa: E402

from importer import HostChoices, import_server  # noqa: E402

ERAS: Final = {"modern": "auto", "legacy": "legacy"}
TIMEOUT: Final = 120  # seconds for any one request on a loaded machine: a bound, never a measure


class Person:
    """The SDK's elicitation callback: says yes or no, and counts how often it was asked."""

    def __init__(self) -> None:
        self.approve = False
        self.asked: list[str] = []

    async def __call__(self, _context: Any, params: Any) -> types.ElicitResult:
        self.asked.append(params.message)
        if self.approve:
            return types.ElicitResult(action="accept", content={"approve": True})
        return types.ElicitResult(action="decline")


def lines(path: Path) -> list[Any]:
    return [] if not path.exists() else [json.loads(line) for line in path.read_text().splitlines() if line]


def notes(folder: Path) -> dict[str, int]:
    path = folder / "notes.json"
    if not path.exists():
        return {}
    return {name: note["revision"] for name, note in json.loads(path.read_text())["notes"].items()}


def answer_of(result: Any) -> dict[str, Any]:
    return json.loads(result.content[0].text)


class Run:
    """One era's run: its folder, its servers, its host file, and what was checked."""

    def __init__(self, era: str, system_python: str, folder: Path) -> None:
        self.era = era
        self.python = system_python
        self.folder = folder
        self.sdk_calls = folder / "sdk-calls.jsonl"
        self.fault_calls = folder / "fault-calls.jsonl"
        self.notes = folder / "notes"
        self.notes.mkdir()
        self.checks: dict[str, bool] = {}

    def check(self, name: str, holds: bool) -> None:
        self.checks[name] = bool(holds)

    def contracts(self) -> None:
        python = [self.python, "-B"]
        sdk, _ = import_server([sys.executable, "-B", str(BRIDGE / "interop" / "sdk_server.py")], timeout=TIMEOUT,
                               host=HostChoices(read_only=frozenset({"get_order"}), role="mcp.tools"))
        sdk["tools"] = [tool for tool in sdk["tools"] if tool["name"] != "list_orders"] + [
            {**tool, "description": tool["description"] + " (reviewed)"}  # drift: the server says otherwise
            for tool in sdk["tools"] if tool["name"] == "list_orders"]
        demo, _ = import_server([*python, str(BRIDGE / "demo_server.py")], timeout=TIMEOUT,
                                host=HostChoices(read_only=frozenset({"read_note", "note_write_status"}),
                                                 role="mcp.tools"))
        fault, _ = import_server([*python, str(BRIDGE / "fault_server.py")], timeout=TIMEOUT,
                                 host=HostChoices(read_only=frozenset({"get_order", "ping_tool"}), role="mcp.tools"))
        for name, draft in (("sdk", sdk), ("demo", demo), ("fault", fault)):
            (self.folder / f"{name}.json").write_text(json.dumps(draft))

    def host(self, *, crash: bool = False) -> Path:
        python = [self.python, "-B"]
        demo = [*python, str(BRIDGE / "demo_server.py"), "--dir", str(self.notes)] + (["--crash-on-write"] if crash else [])
        servers = [{"name": "notes", "prefix": "notes_", "command": demo, "contracts": "demo.json",
                    "status_tools": {"write_note": "note_write_status"}}]
        if not crash:
            # The SDK's server counts its calls in the file SDK_SERVER_CALLS names: a variable of
            # the guard's environment, which a server gets only when its host file names it.
            servers += [{"name": "orders", "prefix": "orders_", "contracts": "sdk.json", "env": ["SDK_SERVER_CALLS"],
                         "command": [sys.executable, "-B", str(BRIDGE / "interop" / "sdk_server.py")]},
                        {"name": "faults", "prefix": "faults_", "contracts": "fault.json",
                         "command": [*python, str(BRIDGE / "fault_server.py"), "--calls", str(self.fault_calls)]}]
        path = self.folder / ("host-crash.json" if crash else "host.json")
        path.write_text(json.dumps({"format": "mcp-guard-host-v1",
                                    "principal": {"tenant": "tenant-a", "subject": "alice", "roles": ["mcp.tools"]},
                                    "approval": {"approver": "alice-at-client"}, "servers": servers}))
        return path

    def client(self, host: Path, person: Person) -> Client:
        guard = StdioServerParameters(
            command=self.python, args=["-B", str(BRIDGE / "mcp_bridge.py"), "guard", "--host", str(host)],
            env={**os.environ, "SDK_SERVER_CALLS": str(self.sdk_calls), "PYTHONDONTWRITEBYTECODE": "1"})
        return Client(guard, mode=ERAS[self.era], elicitation_callback=person, read_timeout_seconds=TIMEOUT)

    async def main_checks(self) -> None:
        person = Person()
        async with self.client(self.host(), person) as client:
            listed = sorted(tool.name for tool in (await client.list_tools()).tools)
            self.check("lists exactly the reviewed tools, the drifted one withheld", listed == sorted([
                "notes_read_note", "notes_write_note", "notes_note_write_status",
                "orders_get_order", "orders_create_refund_draft", "orders_set_address", "orders_partial_refund",
                "faults_get_order", "faults_ping_tool", "faults_refund"]))
            drifted = await client.call_tool("orders_list_orders", {"limit": 3})
            self.check("a drifted tool is refused and reaches nothing",
                       drifted.is_error and answer_of(drifted)["error"]["code"] == "GUARD_TOOL_WITHHELD"
                       and not person.asked)
            read = await client.call_tool("orders_get_order", {"order_ref": "ORDER-7"})
            self.check("a read reaches the SDK server once, its data checked",
                       not read.is_error and answer_of(read)["data"] == {"order_ref": "ORDER-7", "status": "paid"})
            malformed = {
                "a newline after a pattern": ("orders_get_order", {"order_ref": "ORDER-7\n"}, "INVALID_ARGUMENTS"),
                "an extra field": ("orders_get_order", {"order_ref": "ORDER-7", "x": 1}, "INVALID_ARGUMENTS"),
                "a missing required field": ("orders_set_address", {"order_ref": "ORDER-7"}, "INVALID_ARGUMENTS"),
                "a string for a number": ("faults_refund", {"amount": "3"}, "INVALID_ARGUMENTS"),
                "a string for an integer": ("notes_read_note", {"name": 3}, "INVALID_ARGUMENTS"),
                "an unknown tool": ("orders_drop_tables", {}, "UNKNOWN_TOOL"),
                "an unprefixed name": ("get_order", {"order_ref": "ORDER-7"}, "UNKNOWN_TOOL"),
            }
            codes = {}
            for label, (tool, arguments, _code) in malformed.items():
                result = await client.call_tool(tool, arguments)
                codes[label] = answer_of(result)["error"]["code"] if result.is_error else None
            self.malformed = codes
            self.check("every malformed call and unknown tool is refused with its code",
                       codes == {label: code for label, (_t, _a, code) in malformed.items()})
            declined = await client.call_tool("notes_write_note", {"name": "a", "text": "b"})
            self.check("a write the person declines is APPROVAL_REQUIRED",
                       declined.is_error and answer_of(declined)["error"]["code"] == "APPROVAL_REQUIRED")
            refund_declined = await client.call_tool("orders_create_refund_draft",
                                                     {"order_ref": "ORDER-7", "reason": "duplicate"})
            self.check("an SDK server's write the person declines is APPROVAL_REQUIRED",
                       answer_of(refund_declined)["error"]["code"] == "APPROVAL_REQUIRED")
            self.check("nothing refused reached a server",
                       lines(self.fault_calls) == [] and [c["tool"] for c in lines(self.sdk_calls)] == ["get_order"]
                       and notes(self.notes) == {})
            person.approve = True
            asked_before = len(person.asked)
            first = await client.call_tool("notes_write_note", {"name": "a", "text": "b"})
            retries = [await client.call_tool("notes_write_note", {"name": "a", "text": "b"}) for _ in range(3)]
            refund = await client.call_tool("orders_create_refund_draft", {"order_ref": "ORDER-7", "reason": "duplicate"})
            refund_again = await client.call_tool("orders_create_refund_draft",
                                                  {"order_ref": "ORDER-7", "reason": "duplicate"})
            self.deliveries = [answer_of(result).get("delivery") for result in (first, *retries, refund, refund_again)]
            self.check("an approved write runs once; its retries are answered from the ledger",
                       self.deliveries == ["fresh", "local_replay", "local_replay", "local_replay",
                                           "fresh", "local_replay"])
            self.check("the person was asked once per write", len(person.asked) - asked_before == 2)
            self.check("each approved write reached its server once",
                       notes(self.notes) == {"a": 1}
                       and [c["tool"] for c in lines(self.sdk_calls)] == ["get_order", "create_refund_draft"])

    async def crash_checks(self) -> None:
        person = Person()
        person.approve = True
        async with self.client(self.host(crash=True), person) as client:
            lost = await client.call_tool("notes_write_note", {"name": "c", "text": "d"})
            settled = await client.call_tool("notes_write_note", {"name": "c", "text": "d"})
            again = await client.call_tool("notes_write_note", {"name": "c", "text": "d"})
        self.crash = [answer_of(lost).get("error", {}).get("code"), answer_of(settled).get("delivery"),
                      answer_of(again).get("delivery")]
        self.check("a server killed mid-write gives OUTCOME_UNKNOWN, which reconciles exactly once",
                   self.crash == ["OUTCOME_UNKNOWN", "receipt_reconciled", "local_replay"]
                   and notes(self.notes).get("c") == 1 and len(person.asked) == 1)

    def summary(self) -> dict[str, Any]:
        return {"passed": all(self.checks.values()), "checks": self.checks, "malformed": self.malformed,
                "deliveries": self.deliveries, "crash": self.crash}


async def run_era(era: str, system_python: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        run = Run(era, system_python, Path(folder))
        run.malformed, run.deliveries, run.crash = {}, [], []
        run.contracts()
        await run.main_checks()
        await run.crash_checks()
        return run.summary()


def main() -> int:
    parser = argparse.ArgumentParser(description="The guard driven by the official MCP SDK's client.")
    parser.add_argument("--python", required=True, help="the system Python that runs the guard (standard library)")
    options = parser.parse_args()
    import importlib.metadata
    eras = {era: asyncio.run(run_era(era, options.python)) for era in ERAS}
    passed = all(era["passed"] for era in eras.values())
    print(json.dumps({"passed": passed, "mcp": importlib.metadata.version("mcp"), "eras": eras}, indent=2))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
