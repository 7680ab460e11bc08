"""The official MCP Python SDK's test server behind the whole boundary: import, forward, dispatch, adapt.

    python -B mcp_bridge/interop/forward_check.py -- VENV_PYTHON -B mcp_bridge/interop/sdk_server.py

Standard library and the project only, run with the system Python; the command after ``--`` serves
sdk_server.py with the SDK's virtual environment (run.sh passes it). For each protocol era
(2026-07-28, then the ``initialize`` handshake) it:

    1. imports the server's tools with the host's choices of run.sh (get_order read-only, every
       tool behind the role orders.tools; drafted tools name no resource field: role-gated only);
    2. registers each drafted tool the dispatcher builds with, asked tool by tool; one it refuses
       is listed with its code, not registered. The SDK publishes an output schema for every tool
       here (a `str` return becomes {"result": string}); a tool without one would answer text and
       be listed under "text_output";
    3. puts every registered tool behind McpForwarder hooks (one SDK server for the era) and
       dispatches the CHECKS below in each provider's profile: reads answered with the SDK's
       structuredContent, writes with a person's approval and an idempotency key, a replay, and
       malformed calls refused as INVALID_ARGUMENTS before anything reaches the server;
    4. adapts every package for its provider with td.adapt (sealed, verified against the registry).

It prints one JSON summary with "passed" and exits 0 only when every check passed in both eras
(1 when one failed, 2 when the command line is wrong). The server's own text (its stderr, its
error messages) is never printed: only codes and the structured data the contracts admitted.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Mapping, Sequence

ROOT: Final = Path(__file__).resolve().parent.parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "mcp_bridge")]

import tool_dispatcher as td  # noqa: E402
from forward import McpForwarder  # noqa: E402
from importer import HostChoices, import_server  # noqa: E402

ERAS: Final = ("modern", "legacy")
HOST: Final = HostChoices(read_only=frozenset({"get_order"}), role="orders.tools")  # as run.sh imports
TIMEOUT: Final = 60  # seconds for an import, and for a server's start: the SDK imports pydantic first
NOW: Final = 1_800_000_000  # the host's clock
CALL_SECONDS: Final = 30  # the host's deadline for each call, from NOW
APPROVER: Final = "approver-lee"
PRINCIPAL: Final = td.Principal("tenant-a", "alice", ("orders.tools",))
ADDRESS: Final = {"order_ref": "ORDER-7", "address": {"street": "1 Main Street", "postcode": "12345"}}


@dataclass(frozen=True, slots=True)
class Check:
    """One call, dispatched in each provider's profile, and what its package must say."""

    name: str
    tool: str
    arguments: Mapping[str, Any]
    expected: str  # the model result's delivery when it succeeds, else its error code
    sends: int  # tools/call requests it may send to the server: 1, or 0 when refused or replayed
    data: Mapping[str, Any] | None = None  # the model result's data, exactly
    approved: bool = False  # a write a person approved
    key: str | None = None  # the idempotency key's stem (a write); the era and the provider complete it


# What the SDK's handlers answer is fixed (sdk_server.py): the data below is exactly theirs.
CHECKS: Final = (
    Check("a read answers the SDK's structuredContent", "get_order", {"order_ref": "ORDER-7"}, "fresh", 1,
          data={"order_ref": "ORDER-7", "status": "paid"}),
    Check("an approved write with a key", "set_address", ADDRESS, "fresh", 1, data={"result": "ok"},
          approved=True, key="set-address"),
    Check("the same key again replays, sending nothing", "set_address", ADDRESS, "local_replay", 0,
          data={"result": "ok"}, approved=True, key="set-address"),
    Check("a write through $ref, an enum and a null", "create_refund_draft",
          {"order_ref": "ORDER-7", "reason": "damaged", "note": None}, "fresh", 1,
          data={"result": "DRAFT-0000000000000000"}, approved=True, key="refund"),
    Check("a write of a role-gated tool with optional fields", "list_orders", {"limit": 3, "tags": ["new"]},
          "fresh", 1, data={"result": "[]"}, approved=True, key="list"),
    Check("a write without an approval", "set_address", ADDRESS, "APPROVAL_REQUIRED", 0, key="unapproved"),
    Check("malformed: a string for an integer", "list_orders", {"limit": "3"}, "INVALID_ARGUMENTS", 0,
          approved=True, key="bad-integer"),
    Check("malformed: an extra field", "get_order", {"order_ref": "ORDER-7", "extra": 1}, "INVALID_ARGUMENTS", 0),
    Check("malformed: a missing required field", "set_address", {"order_ref": "ORDER-7"}, "INVALID_ARGUMENTS", 0,
          approved=True, key="bad-missing"),
    Check("malformed: a string breaking a pattern", "get_order", {"order_ref": "ORDER-x"}, "INVALID_ARGUMENTS", 0),
    Check("malformed: a nested string breaking a pattern", "set_address",
          {"order_ref": "ORDER-7", "address": {"street": "1 Main Street", "postcode": "1234"}}, "INVALID_ARGUMENTS",
          0, approved=True, key="bad-nested"),
    Check("an approved write with a number, a float sent as it is", "partial_refund",
          {"order_ref": "ORDER-7", "amount": 12.5}, "fresh", 1, data={"result": "ok"}, approved=True,
          key="partial-refund"),
    Check("malformed: a string for a number", "partial_refund", {"order_ref": "ORDER-7", "amount": "12.5"},
          "INVALID_ARGUMENTS", 0, approved=True, key="bad-number"),
    Check("a tool the import refused is unknown", "schedule_callback", {"when": "PT10M"},
          "UNKNOWN_TOOL", 0, key="refused"),
)


# ============================================================================================
# Contracts: the draft, split into what dispatches and what cannot
# ============================================================================================


def registry_of(draft: dict[str, Any]) -> tuple[td.ContractSet, list[dict[str, Any]]]:
    """The registry of the drafted tools a dispatcher builds with, and the others, each with the
    code the build gave it: asked of the dispatcher, tool by tool, never assumed here."""
    kept, left_out = [], []
    for tool in draft["tools"]:
        code = build_refusal({**draft, "tools": [tool]})
        if code is None:
            kept.append(tool)
        else:
            left_out.append({"tool": tool["name"], "code": code})
    return td.parse_contracts(td.canonical_json({**draft, "tools": kept})), left_out


def build_refusal(draft: dict[str, Any]) -> str | None:
    registry = td.parse_contracts(td.canonical_json(draft))
    unused = td.ToolHooks(execute=lambda call: td.Execution(None, "not_committed"))
    try:
        td.Dispatcher(registry=registry, hooks={name: unused for name in registry}, approvers=[APPROVER])
    except td.BoundaryError as refusal:
        return refusal.code
    return None


# ============================================================================================
# Dispatch: every check in every provider's profile
# ============================================================================================


def context(era: str, profile: td.ProviderProfile, index: int, check: Check) -> td.CallContext:
    tag = f"{era}-{profile.provider.lower()}-{index}"
    key = None if check.key is None else f"{era}.{profile.provider.lower()}.{check.key}"
    return td.CallContext(profile.provider, profile.api_family, profile.adapter_revision, f"resp-{tag}",
                          f"call-{tag}", f"op-{tag}", key)


def outcome(package: Mapping[str, Any]) -> str:
    result = package["model_result"]
    return result["error"]["code"] if "error" in result else result["delivery"]


def run_check(dispatcher: td.Dispatcher, server: McpForwarder, registry: td.ContractSet, keys: td.SealKeys,
              era: str, index: int, check: Check) -> dict[str, Any]:
    """The check in each profile: what came back per provider, and whether all of it was expected."""
    got, data, adapted, passed = {}, {}, 0, True
    spec = registry.get(check.tool)
    for profile in td.PROVIDER_PROFILES.values():
        ctx = context(era, profile, index, check)
        approval = None if not check.approved or spec is None else td.approval_for_call(
            approver=APPROVER, principal=PRINCIPAL, context=ctx, spec=spec, arguments=dict(check.arguments),
            expires_at=NOW + 300)
        sent = server.sent
        package = dispatcher.dispatch({"name": check.tool, "arguments": json.loads(json.dumps(check.arguments))},
                                      ctx, PRINCIPAL, approval=approval, now=NOW, deadline=NOW + CALL_SECONDS)
        got[profile.adapter_revision] = outcome(package)
        data[profile.adapter_revision] = package["model_result"].get("data")
        passed &= (outcome(package) == check.expected and server.sent - sent == check.sends
                   and (check.data is None or data[profile.adapter_revision] == check.data))
        try:
            td.adapt(package, ctx, profile.adapter_revision, principal=PRINCIPAL, approvers=frozenset({APPROVER}),
                     seal_keys=keys, require_seal=True, registry=registry)
            adapted += 1
        except td.CatalogError as refusal:
            got[profile.adapter_revision] += f" (adapt: {refusal.code})"
            passed = False
    return {"check": check.name, "tool": check.tool, "expected": check.expected, "got": same_or_each(got),
            "data": same_or_each(data), "adapted": adapted, "passed": passed}


def same_or_each(by_provider: dict[str, Any]) -> Any:
    """One value when every provider's is the same (the usual case: short output), else each."""
    values = list(by_provider.values())
    return values[0] if all(value == values[0] for value in values) else by_provider


def check_era(command: Sequence[str], era: str, keys: td.SealKeys) -> dict[str, Any]:
    draft, report = import_server(command, protocol=era, timeout=TIMEOUT, host=HOST)
    registry, left_out = registry_of(draft)
    with McpForwarder(command, protocol=era, start_timeout=TIMEOUT) as server:
        hooks = server.hooks_for(registry)
        dispatcher = td.Dispatcher(registry=registry, hooks=hooks, approvers=[APPROVER], seal_keys=keys)
        checks = [run_check(dispatcher, server, registry, keys, era, index, check)
                  for index, check in enumerate(CHECKS)]
        sent, starts = server.sent, server.starts
    expected_sent = sum(check.sends for check in CHECKS) * len(td.PROVIDER_PROFILES)
    passed = all(item["passed"] for item in checks) and sent == expected_sent and starts == 1
    return {"passed": passed, "server": report["server"], "registered": sorted(registry),
            "text_output": sorted(tool["name"] for tool in draft["tools"]
                                  if tool["name"] in registry and tool["output_schema"] is None),
            "refused_at_import": [{"tool": item["tool"], "code": item["code"]} for item in report["refused"]],
            "not_dispatchable": left_out, "sent_to_server": sent, "expected_sent": expected_sent,
            "server_starts": starts, "checks": checks}


# ============================================================================================
# CLI
# ============================================================================================


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="The SDK's test server's tools behind the boundary, both eras.")
    parser.add_argument("command", nargs="+", help="the server's command, after --")
    command = parser.parse_args(argv).command
    keys = td.SealKeys("interop-1", {"interop-1": os.urandom(32)})
    eras: dict[str, Any] = {}
    try:
        for era in ERAS:
            eras[era] = check_era(command, era, keys)
    except td.CatalogError as failure:  # the import failed, or the registry did not build
        eras[era] = {"passed": False, "error": failure.to_json()}
    passed = len(eras) == len(ERAS) and all(item["passed"] for item in eras.values())
    print(json.dumps({"passed": passed, "providers": sorted(td.PROVIDER_PROFILES), "eras": eras}, indent=2))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
