"""Your own tools behind the boundary: a stdio MCP server's read and write tools, standard library only.

    python -B examples/own_tools.py

It runs from a checkout as it is, or copied anywhere once `pip install tool-dispatcher` is done (it
then imports the installed packages). The server is the project's small note store
(mcp_bridge/demo_server.py, installed as tool_dispatcher_mcp.demo_server); put your own server's
command in SERVER. The program imports the server's tools as contracts, forwards calls to it with
hooks, dispatches a model's read and write (the write with a person's approval and an idempotency
key), shapes each result for the three providers, writes a sealed audit log and verifies it, then
prints one JSON summary. It exits 0 when every step gave what it should.
"""
import io
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if (ROOT / "mcp_bridge" / "forward.py").is_file():  # in a checkout: its own modules, nothing installed
    sys.path[:0] = [str(ROOT), str(ROOT / "mcp_bridge")]
    from forward import McpForwarder  # noqa: E402
    from importer import HostChoices, import_server  # noqa: E402
    SERVER = [sys.executable, "-B", str(ROOT / "mcp_bridge" / "demo_server.py")]
else:  # anywhere else: the installed packages (pip install tool-dispatcher)
    try:
        from tool_dispatcher_mcp.forward import McpForwarder
        from tool_dispatcher_mcp.importer import HostChoices, import_server
    except ImportError:  # copied out of the checkout, before the install: say so, no traceback
        print("own_tools.py: tool-dispatcher is not installed for this Python: run it from a checkout, "
              "or `pip install tool-dispatcher` first", file=sys.stderr)
        raise SystemExit(2) from None
    SERVER = [sys.executable, "-B", "-m", "tool_dispatcher_mcp.demo_server"]
import tool_dispatcher as td  # noqa: E402
NOW = 1_800_000_000  # the host's clock, in seconds


def main() -> int:
    # 1. Contracts: the server's listing, drafted; the host says which tools only read, and the role.
    draft, _report = import_server(SERVER, host=HostChoices(read_only=frozenset({"read_note"}), role="notes.write"))
    draft["tools"] = [tool for tool in draft["tools"] if tool["name"] in ("read_note", "write_note")]
    registry = td.parse_contracts(td.canonical_json(draft))
    keys = td.SealKeys("k1", {"k1": os.urandom(32)})
    alice = td.Principal("tenant-a", "alice", ("notes.write",))
    log, results = io.BytesIO(), []
    with McpForwarder(SERVER) as server:
        # 2. Hooks: each tool forwards to the server; the write's status tool settles a lost answer.
        hooks = {"read_note": server.hooks("read_note"),
                 "write_note": server.hooks("write_note", status_tool="note_write_status")}
        dispatcher = td.Dispatcher(registry=registry, hooks=hooks, approvers=["approver-lee"], seal_keys=keys)
        audit = td.AuditLog(log, seal_keys=keys)
        calls = [("openai-responses-v1", {"name": "write_note", "arguments": {"name": "todo", "text": "buy milk"}}),
                 ("anthropic-messages-v1", {"name": "read_note", "arguments": {"name": "todo"}}),
                 ("gemini-interactions-v1", {"name": "write_note", "arguments": {"name": "todo", "text": "x", "mode": 1}})]
        for index, (adapter, proposal) in enumerate(calls):
            profile = td.PROVIDER_PROFILES[adapter]
            key = f"write-{index}" if proposal["name"] == "write_note" else None
            context = td.CallContext(profile.provider, profile.api_family, adapter, f"resp-{index}", f"call-{index}",
                                     f"op-{index}", key)
            # 3. A person approves this exact write (your approval flow builds this once they said yes).
            approval = None if key is None else td.approval_for_call(
                approver="approver-lee", principal=alice, context=context, spec=registry["write_note"],
                arguments=proposal["arguments"], expires_at=NOW + 300)
            package = dispatcher.dispatch(proposal, context, alice, approval=approval, now=NOW, deadline=NOW + 10)
            audit.append(package)
            item = td.adapt(package, context, adapter, principal=alice, approvers=frozenset({"approver-lee"}),
                            seal_keys=keys, require_seal=True, registry=registry)
            result = package["model_result"]
            results.append({"tool": proposal["name"], "provider": profile.provider, "status": result["status"],
                            "code": result.get("error", {}).get("code"), "data": result.get("data"),
                            "effects": package["execution"]["effects"], "item_keys": sorted(item)})
        audit.close()
        sent = server.sent
    report = td.verify_audit_log(log.getvalue(), seal_keys=keys, require_seal=True)
    expected = [("ok", None), ("ok", None), ("error", "INVALID_ARGUMENTS")]
    passed = [(r["status"], r["code"]) for r in results] == expected and sent == 2 and report.entries == 3
    print(json.dumps({"passed": passed, "calls": results, "sent_to_server": sent,
                      "audit": {"entries": report.entries, "sealed": report.sealed}}, indent=2))
    return 0 if passed else 1


if __name__ == "__main__":
    # run_cli: the project's failure shape for any error, and a reader that goes away (| head) ends it quietly.
    sys.exit(td.run_cli(main))
