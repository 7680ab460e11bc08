"""The guard (guard.py): an MCP server to a client that runs every tools/call through the boundary.

The guard is driven in process over a pair of pipes by a small client written here (it declares
elicitation or not, answers the guard's questions, sends cancellations), in front of the project's
own servers: demo_server.py, whose note store (--dir) counts the writes that took effect, and
fault_server.py, whose --calls file counts every call that reached it. The command line is driven
as a child process. The official SDK's client drives it in interop/guard_check.py.
"""
from __future__ import annotations

import functools
import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from pathlib import Path
from unittest import mock

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import tool_dispatcher as td  # noqa: E402
import client  # noqa: E402
import guard as gd  # noqa: E402
from importer import HostChoices, import_server  # noqa: E402
from test_importer import process_ended  # noqa: E402

PYTHON = [sys.executable, "-B"]
DEMO = [*PYTHON, str(HERE / "demo_server.py")]
FAULT = [*PYTHON, str(HERE / "fault_server.py")]
ROLE = "mcp.tools"
WAIT = 60  # seconds any one answer may take on a loaded machine: a bound, never a measure
SEAL_KEYS = td.SealKeys("k1", {"k1": bytes(range(32))})
POSTGRES = os.environ.get("GUARD_PG_DSN", "")  # a DSN whose search_path is an empty schema of its own
# A host's approval command whose person never answers: it starts a child of its own, writes both
# ids to the file it is given (whole, or not yet), and both wait an hour.
NEVER_ANSWERS = """\
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
with open(sys.argv[1] + ".part", "w") as out:
    out.write(f"{os.getpid()} {child.pid}")
os.replace(sys.argv[1] + ".part", sys.argv[1])
time.sleep(3600)
"""


def reviewed(command, read_only=()):
    draft, _report = import_server(command, host=HostChoices(read_only=frozenset(read_only), role=ROLE))
    return draft


class Folder:
    """A temporary folder with the reviewed contracts of both servers and a host file per test."""

    def __init__(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.path = Path(self.tmp.name)

    def write(self, name, value):
        path = self.path / name
        path.write_text(json.dumps(value), encoding="utf-8")
        return path

    def host(self, servers, *, approval=None, **fields):
        document = {"format": gd.HOST_FORMAT, "principal": {"tenant": "tenant-a", "subject": "alice",
                                                              "roles": [ROLE]},
                    "approval": approval or {"approver": "alice-at-client"}, "servers": servers, **fields}
        return self.write("host.json", document)


class Peer:
    """The client's side of an in-process guard: requests by id, the guard's own requests answered
    by ``answer_elicitation`` (None: never answered), notifications kept."""

    def __init__(self, guard, *, era="legacy", elicitation=False, answer_elicitation=None):
        client_in, guard_out = os.pipe()
        guard_in, client_out = os.pipe()
        self._to_guard = os.fdopen(client_out, "wb")
        self._from_guard = os.fdopen(client_in, "rb")
        self._guard_streams = (os.fdopen(guard_in, "rb"), os.fdopen(guard_out, "wb"))
        self.answers = {}
        self.log = []  # every answer, in the order it came (answers keeps the last one per id)
        self.notifications = []
        self.asked = []
        self.replied = []  # the ids of the guard's questions answered, once each answer is sent
        self._answer_elicitation = answer_elicitation
        self._arrived = threading.Condition()
        self._sending = threading.Lock()
        self._next = 0
        self.server = threading.Thread(target=self._serve, args=(guard,), daemon=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.server.start()
        self.reader.start()
        if era == "legacy":
            capabilities = {"elicitation": {}} if elicitation else {}
            self.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": capabilities,
                                        "clientInfo": {"name": "test", "version": "1"}})
            self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        elif era == "modern":
            self.request("server/discover", {})
        self.era = era  # None: no handshake yet

    def _serve(self, guard):
        reader, writer = self._guard_streams
        try:
            gd.serve(guard, reader, writer)
        finally:
            writer.close()
            reader.close()

    def _read(self):
        for line in self._from_guard:
            message = json.loads(line)
            if "method" in message and "id" in message:
                self.asked.append(message)
                threading.Thread(target=self._answer, args=(message,), daemon=True).start()  # a person takes time
                continue
            with self._arrived:
                if "id" in message:
                    self.answers[json.dumps(message["id"])] = message
                    self.log.append(message)
                else:
                    self.notifications.append(message)
                self._arrived.notify_all()

    def _answer(self, message):
        answer = None if self._answer_elicitation is None else self._answer_elicitation(message)
        if answer is not None:
            try:
                self.send({"jsonrpc": "2.0", "id": message["id"], "result": answer})
            except (OSError, ValueError):
                return  # the client closed meanwhile: the guard has no one to hear it from
            self.replied.append(message["id"])

    def send(self, message):
        with self._sending:
            self._to_guard.write(json.dumps(message).encode("utf-8") + b"\n")
            self._to_guard.flush()

    def send_raw(self, data):
        with self._sending:
            self._to_guard.write(data)
            self._to_guard.flush()

    def start(self, method, params=None, *, request_id=None):
        self._next += 1
        request_id = self._next if request_id is None else request_id
        params = dict(params or {})
        if getattr(self, "era", None) == "modern":
            params["_meta"] = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                               "io.modelcontextprotocol/clientCapabilities": {}}
        self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        return request_id

    def wait(self, request_id, timeout=WAIT):
        key = json.dumps(request_id)
        with self._arrived:
            if not self._arrived.wait_for(lambda: key in self.answers, timeout):
                raise AssertionError(f"no answer to request {request_id!r} within {timeout} s")
            return self.answers[key]

    def until(self, holds, timeout=WAIT):
        """Whether ``holds()`` came true within timeout seconds (what another thread does)."""
        return eventually(holds, timeout)

    def request(self, method, params=None, **options):
        return self.wait(self.start(method, params, **options))

    def call(self, name, arguments):
        return self.request("tools/call", {"name": name, "arguments": arguments})["result"]

    def close(self):
        self._to_guard.close()
        self.server.join(WAIT)
        self.reader.join(WAIT)
        self._from_guard.close()


def eventually(holds, timeout=WAIT):
    """Whether ``holds()`` came true within timeout seconds (what another thread or process does)."""
    deadline = time.monotonic() + timeout
    while not holds():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


def children_of(pid):
    """The ids of a process's children (Linux: /proc); the test that needs them is skipped elsewhere."""
    if not os.path.isdir("/proc"):
        raise unittest.SkipTest("no /proc")
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:
            found.append(int(entry))
    return found


def kill_if_running(pid):
    if not process_ended(pid):
        os.kill(pid, signal.SIGKILL)


def body(result):
    """The model_result the client's model reads, and whether it is an error."""
    return json.loads(result["content"][0]["text"]), result["isError"]


def code_of(result):
    found, is_error = body(result)
    return found.get("error", {}).get("code") if is_error else None


def yes(_message):
    return {"action": "accept", "content": {"approve": True}}


def no(_message):
    return {"action": "decline"}


class GuardCase(unittest.TestCase):
    """A folder with the demo server's reviewed contracts (--dir: its note store counts writes) and
    the fault server's (--calls: its file counts every call that reached it)."""

    @classmethod
    def setUpClass(cls):
        cls.demo_contracts = reviewed(DEMO, read_only=("read_note", "note_write_status"))
        cls.fault_contracts = reviewed(FAULT, read_only=("get_order", "ping_tool"))

    def setUp(self):
        self.folder = Folder()
        self.addCleanup(self.folder.tmp.cleanup)
        self.notes = self.folder.path / "notes"
        self.notes.mkdir()
        self.calls_file = self.folder.path / "calls.jsonl"
        self.folder.write("notes.json", self.demo_contracts)
        self.folder.write("fault.json", self.fault_contracts)

    def demo_server(self, *flags, prefix="notes_"):
        return {"name": "notes", "prefix": prefix, "command": [*DEMO, "--dir", str(self.notes), *flags],
                "contracts": "notes.json", "status_tools": {"write_note": "note_write_status"}}

    def fault_server(self, fault="none", prefix="orders_"):
        return {"name": "orders", "prefix": prefix, "contracts": "fault.json",
                "command": [*FAULT, "--fault", fault, "--calls", str(self.calls_file)]}

    def guard(self, servers, *, approval=None, start=True, **options):
        host = gd.load_host(self.folder.host(servers, approval=approval,
                                             **{k: v for k, v in options.items() if k in ("retry_window",)}))
        guard = gd.Guard(host, **{k: v for k, v in options.items() if k not in ("retry_window",)})
        self.addCleanup(guard.close)
        if start:
            self.started = guard.start()
        return guard

    def peer(self, guard, **options):
        peer = Peer(guard, **options)
        self.addCleanup(peer.close)
        return peer

    def server_calls(self):
        if not self.calls_file.exists():
            return []
        return [json.loads(line) for line in self.calls_file.read_text(encoding="utf-8").splitlines()]

    def note_revisions(self):
        path = self.notes / "notes.json"
        if not path.exists():
            return {}
        document = json.loads(path.read_text(encoding="utf-8"))
        return {name: note["revision"] for name, note in document["notes"].items()}

    def note_writes(self):
        path = self.notes / "notes.json"
        return 0 if not path.exists() else len(json.loads(path.read_text(encoding="utf-8"))["writes"])


class TestListing(GuardCase):

    def test_the_reviewed_tools_are_listed_under_their_prefix_as_reviewed(self):
        peer = self.peer(self.guard([self.demo_server(), self.fault_server()]))
        tools = peer.request("tools/list")["result"]["tools"]
        self.assertEqual([tool["name"] for tool in tools],
                         ["notes_read_note", "notes_write_note", "notes_note_write_status",
                          "orders_get_order", "orders_ping_tool", "orders_refund"])
        by_name = {tool["name"]: tool for tool in tools}
        entry = next(tool for tool in self.demo_contracts["tools"] if tool["name"] == "write_note")
        self.assertEqual(by_name["notes_write_note"], {"name": "notes_write_note", "description": entry["description"],
                                                       "inputSchema": entry["input_schema"],
                                                       "annotations": {"readOnlyHint": False}})
        self.assertEqual(by_name["orders_get_order"]["annotations"], {"readOnlyHint": True})
        self.assertEqual(self.started, {"notes": {"started": True, "withheld": {}},
                                        "orders": {"started": True, "withheld": {}}})

    def test_a_server_that_cannot_start_refuses_only_its_own_tools(self):
        # Both serve the same reviewed tools under prefixes of one length: what follows the prefix
        # names a tool of either, and only the prefix says whose it is.
        broken = {**self.demo_server(prefix="aa_"), "name": "broken",
                  "command": [str(self.folder.path / "no-such-server")]}
        guard = self.guard([broken, self.demo_server(prefix="bb_")])
        self.assertEqual(self.started["broken"]["started"], False)
        self.assertEqual(code_of(guard.call("bb_read_note", {"name": "a"})), "TOOL_FAILED")  # no such note, served
        self.assertEqual(code_of(guard.call("aa_read_note", {"name": "a"})), "GUARD_SERVER_UNAVAILABLE")

    def test_a_tool_whose_listing_drifted_is_withheld_at_start_and_never_runs(self):
        drifted = json.loads(json.dumps(self.fault_contracts))
        drifted["tools"][0]["description"] = "Read one order (as the person reviewed it)."
        self.folder.write("fault.json", drifted)
        guard = self.guard([self.fault_server()])
        self.assertEqual(self.started, {"orders": {"started": True, "withheld": {"get_order": ["description"]}}})
        peer = self.peer(guard)
        names = [tool["name"] for tool in peer.request("tools/list")["result"]["tools"]]
        self.assertEqual(names, ["orders_ping_tool", "orders_refund"])
        self.assertEqual(code_of(peer.call("orders_get_order", {"order_ref": "ORDER-7"})), "GUARD_TOOL_WITHHELD")
        self.assertEqual(self.server_calls(), [])

    def test_a_server_that_announces_a_changed_list_has_the_tool_withheld_and_the_client_told(self):
        peer = self.peer(self.guard([self.fault_server("rug_pull")]))
        first = body(peer.call("orders_ping_tool", {}))[0]  # answered, after the server announced a change
        self.assertEqual((first["status"], first["data"]["text"][:9]), ("ok", '{"tool": '))
        self.assertEqual(code_of(peer.call("orders_get_order", {"order_ref": "ORDER-8"})), "TOOL_FAILED")
        # the next call sees the comparison the last one made: refused before the boundary
        self.assertEqual(code_of(peer.call("orders_get_order", {"order_ref": "ORDER-8"})), "GUARD_TOOL_WITHHELD")
        self.assertEqual(body(peer.call("orders_ping_tool", {}))[0]["status"], "ok")  # unchanged: still served
        self.assertEqual([call["tool"] for call in self.server_calls()], ["ping_tool", "ping_tool"])
        self.assertTrue(peer.until(lambda: peer.notifications))
        self.assertEqual(peer.notifications, [{"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}])
        names = [tool["name"] for tool in peer.request("tools/list")["result"]["tools"]]
        self.assertEqual(names, ["orders_ping_tool", "orders_refund"])

    def test_a_change_announced_between_two_calls_is_compared_before_the_next(self):
        # The server answers the first call and announces a changed list in the same write, after the answer.
        peer = self.peer(self.guard([self.fault_server("late_rug_pull")]))
        self.assertEqual(body(peer.call("orders_ping_tool", {}))[0]["data"], {"text": "ok"})
        self.assertEqual(code_of(peer.call("orders_get_order", {"order_ref": "ORDER-8"})), "TOOL_FAILED")
        self.assertEqual(code_of(peer.call("orders_get_order", {"order_ref": "ORDER-8"})), "GUARD_TOOL_WITHHELD")
        self.assertEqual([call["tool"] for call in self.server_calls()], ["ping_tool"])
        self.assertTrue(peer.until(lambda: peer.notifications))

    def test_a_tool_relisted_with_no_canonical_form_is_withheld_and_the_others_serve(self):
        # After the first call, get_order's annotations hold a float and 2**64: no digest pins them.
        guard = self.guard([self.fault_server("unencodable_pull")])
        peer = self.peer(guard)
        self.assertEqual(body(peer.call("orders_ping_tool", {}))[0]["status"], "ok")
        self.assertEqual(code_of(peer.call("orders_get_order", {"order_ref": "ORDER-8"})), "TOOL_FAILED")
        for _ in range(3):  # every later call too, not one in two
            self.assertEqual(code_of(peer.call("orders_get_order", {"order_ref": "ORDER-8"})), "GUARD_TOOL_WITHHELD")
        self.assertEqual(body(peer.call("orders_ping_tool", {}))[0]["status"], "ok")
        self.assertEqual([call["tool"] for call in self.server_calls()], ["ping_tool", "ping_tool"])
        self.assertEqual(guard.forwarders["orders"].drift, {"get_order": ["annotations"]})

    def test_a_listing_with_no_canonical_form_at_start_withholds_its_tool_and_the_other_server_serves(self):
        guard = self.guard([self.fault_server("unencodable"), self.demo_server()])
        self.assertEqual(self.started, {"orders": {"started": True, "withheld": {"get_order": ["annotations"]}},
                                        "notes": {"started": True, "withheld": {}}})
        peer = self.peer(guard)
        self.assertEqual(code_of(peer.call("orders_get_order", {"order_ref": "ORDER-7"})), "GUARD_TOOL_WITHHELD")
        self.assertEqual(body(peer.call("orders_ping_tool", {}))[0]["status"], "ok")
        self.assertEqual(code_of(peer.call("notes_read_note", {"name": "a"})), "TOOL_FAILED")  # served: no such note
        self.assertEqual([call["tool"] for call in self.server_calls()], ["ping_tool"])

    def test_a_server_that_cannot_start_has_its_tools_withheld_and_the_others_serve(self):
        broken = {**self.fault_server("crash_at_start"), "name": "broken", "prefix": "broken_"}
        guard = self.guard([broken, self.demo_server()])
        self.assertEqual(self.started["broken"], {"started": False, "code": "CLIENT_SERVER_EXITED"})
        peer = self.peer(guard)
        names = [tool["name"] for tool in peer.request("tools/list")["result"]["tools"]]
        self.assertEqual(names, ["notes_read_note", "notes_write_note", "notes_note_write_status"])
        # Not a drift: the server is not there. Tried again at each call; nothing reaches it.
        for _ in range(2):
            result = peer.call("broken_get_order", {"order_ref": "ORDER-7"})
            self.assertEqual(code_of(result), "GUARD_SERVER_UNAVAILABLE")
            self.assertEqual(body(result)[0]["error"]["message"], gd.GUARD_CATALOG["GUARD_SERVER_UNAVAILABLE"].message)
        self.assertEqual(guard.forwarders["broken"].starts, 3)  # the guard's start, then one per call
        self.assertEqual(self.server_calls(), [])

    def test_a_server_command_with_a_typo_is_unavailable_not_withheld(self):
        typo = {**self.fault_server(), "command": [str(self.folder.path / "no-such-python"), "-B", "server.py"]}
        guard = self.guard([typo])
        self.assertEqual(self.started, {"orders": {"started": False, "code": "CLIENT_SPAWN"}})
        peer = self.peer(guard)
        self.assertEqual(peer.request("tools/list")["result"]["tools"], [])
        for name, arguments in (("orders_get_order", {"order_ref": "ORDER-7"}), ("orders_refund", {"amount": 2.5})):
            with self.subTest(name=name):
                self.assertEqual(code_of(peer.call(name, arguments)), "GUARD_SERVER_UNAVAILABLE")
        self.assertEqual((peer.asked, guard.forwarders["orders"].sent), ([], 0))  # a write: nobody asked

    def test_a_server_that_exited_and_cannot_start_again_is_unavailable_and_leaves_the_listing(self):
        # The demo server starts once (a marker file), crashes at its write; a restart then fails.
        marker = self.folder.path / "started-once"
        once = [*PYTHON, "-c", "import os, runpy, sys; m = sys.argv[1]; os.path.exists(m) and sys.exit(3); "
                "open(m, 'w').close(); sys.argv = sys.argv[2:]; runpy.run_path(sys.argv[0], run_name='__main__')",
                str(marker), *DEMO[2:], "--dir", str(self.notes), "--crash-on-write"]
        guard = self.guard([{**self.demo_server(), "command": once}])
        peer = self.peer(guard, elicitation=True, answer_elicitation=yes)
        lost = body(peer.call("notes_write_note", {"name": "a", "text": "b"}))[0]
        self.assertEqual(lost["error"]["code"], "OUTCOME_UNKNOWN")  # it wrote, and exited before answering
        self.assertEqual(code_of(peer.call("notes_read_note", {"name": "a"})), "GUARD_SERVER_UNAVAILABLE")
        self.assertEqual(peer.request("tools/list")["result"]["tools"], [])
        self.assertTrue(peer.until(lambda: peer.notifications))
        self.assertEqual(peer.notifications, [{"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}])
        self.assertEqual(guard.forwarders["notes"].drift, {})  # nothing drifted


class TestMalformedCalls(GuardCase):
    """What clients forward today reaches no server through the guard."""

    CASES = (
        ("a string for a number", "orders_refund", {"amount": "3"}, "INVALID_ARGUMENTS"),
        ("an extra field", "orders_get_order", {"order_ref": "ORDER-7", "note": "x"}, "INVALID_ARGUMENTS"),
        ("a newline after a pattern", "orders_get_order", {"order_ref": "ORDER-7\n"}, "INVALID_ARGUMENTS"),
        ("a missing required field", "orders_get_order", {}, "INVALID_ARGUMENTS"),
        ("a non-ASCII digit", "orders_get_order", {"order_ref": "ORDER-\u0667"}, "INVALID_ARGUMENTS"),
        ("arguments that are no object", "orders_get_order", ["ORDER-7"], "INVALID_PROPOSAL"),
        ("an amount below the minimum", "orders_refund", {"amount": 0.25}, "INVALID_ARGUMENTS"),
        ("an unknown tool", "orders_delete_everything", {"order_ref": "ORDER-7"}, "UNKNOWN_TOOL"),
        ("a tool of the server under its own name", "get_order", {"order_ref": "ORDER-7"}, "UNKNOWN_TOOL"),
    )

    def test_each_malformed_call_is_refused_with_its_code_and_reaches_the_server_zero_times(self):
        peer = self.peer(self.guard([self.fault_server()]))
        for label, name, arguments, code in self.CASES:
            with self.subTest(label):
                result = peer.call(name, arguments)
                self.assertEqual(code_of(result), code)
                text = result["content"][0]["text"]
                for echoed in ("ORDER-7", "delete_everything", "note"):
                    self.assertNotIn(echoed, text)
        self.assertEqual(self.server_calls(), [])

    def test_the_well_formed_calls_reach_the_server_once_each(self):
        peer = self.peer(self.guard([self.fault_server()]), elicitation=True, answer_elicitation=yes)
        found, is_error = body(peer.call("orders_refund", {"amount": 2.5}))
        self.assertEqual((found["status"], found["data"], is_error), ("ok", {"refunded": 2.5}, False))
        self.assertEqual(self.server_calls(), [{"tool": "refund", "arguments": {"amount": 2.5}}])

    def test_the_clients_meta_chooses_nothing(self):
        # A key, a principal or an approval in the request's _meta is the model's side: ignored.
        peer = self.peer(self.guard([self.demo_server()]))
        answer = peer.request("tools/call", {"name": "notes_write_note", "arguments": {"name": "a", "text": "b"},
                                             "_meta": {"dev.tool-dispatcher/idempotency-key": "mine",
                                                       "approval": {"approver": "alice-at-client"}}})
        self.assertEqual(code_of(answer["result"]), "APPROVAL_REQUIRED")
        self.assertEqual(self.note_revisions(), {})

    def test_an_answer_whose_is_error_is_no_boolean_leaves_a_write_unknown(self):
        peer = self.peer(self.guard([self.fault_server("is_error_text")]), elicitation=True, answer_elicitation=yes)
        found = body(peer.call("orders_refund", {"amount": 2.5}))[0]  # isError: "true"
        self.assertEqual((found["status"], found["error"]["code"], found["outcome"]),
                         ("unknown", "OUTCOME_UNKNOWN", "unknown"))
        self.assertEqual(self.server_calls(), [{"tool": "refund", "arguments": {"amount": 2.5}}])

    def test_a_server_error_text_never_reaches_the_client(self):
        peer = self.peer(self.guard([self.fault_server("call_is_error")]))
        result = peer.call("orders_get_order", {"order_ref": "ORDER-7"})
        self.assertEqual(code_of(result), "TOOL_FAILED")
        self.assertNotIn("SECRET", json.dumps(result))


class TestOutputs(GuardCase):

    def test_a_servers_output_limits_in_the_host_file_reach_its_tools(self):
        # big_answer: 6,000 characters of text, over the core's default limit of 4,096 bytes.
        for limits, code in (({}, "OUTPUT_TOO_LARGE"), ({"max_output_bytes": 8_192}, None),
                             ({"max_output_bytes": 8_192, "max_output_nodes": 1}, "OUTPUT_TOO_LARGE")):
            with self.subTest(limits=limits):
                guard = self.guard([{**self.fault_server("big_answer"), **limits}])
                peer = self.peer(guard)
                result = peer.call("orders_ping_tool", {})
                self.assertEqual((code_of(result), result["isError"]), (code, code is not None))
                if code is None:
                    self.assertEqual(body(result)[0]["data"], {"text": "a" * 6_000})
                peer.close()
                guard.close()

    def test_an_answer_over_the_line_limit_is_output_too_large_not_a_retryable_deadline(self):
        guard = self.guard([self.fault_server("huge_answer")])
        peer = self.peer(guard)
        for _ in range(2):  # a retry meets the same answer: the model is told not to retry
            found, is_error = body(peer.call("orders_ping_tool", {}))
            self.assertEqual((found["error"]["code"], found["error"]["retryable"], is_error),
                             ("OUTPUT_TOO_LARGE", False, True))
        self.assertEqual(len(self.server_calls()), 2)


class TestApprovals(GuardCase):

    def test_an_unapproved_write_reaches_the_server_zero_times(self):
        for label, options in (("no way to ask", {}), ("the client declined", {"elicitation": True,
                                                                                "answer_elicitation": no})):
            with self.subTest(label):
                guard = self.guard([self.demo_server()])
                peer = self.peer(guard, **options)
                self.assertEqual(code_of(peer.call("notes_write_note", {"name": "a", "text": "b"})),
                                 "APPROVAL_REQUIRED")
                self.assertEqual(self.note_revisions(), {})
                peer.close()
                guard.close()  # its server holds the note store's folder until it stops

    def test_an_approved_write_runs_once_and_its_retries_zero_more_times(self):
        peer = self.peer(self.guard([self.demo_server()]), elicitation=True, answer_elicitation=yes)
        first = body(peer.call("notes_write_note", {"name": "a", "text": "b"}))
        self.assertEqual((first[0]["status"], first[0]["delivery"], first[0]["data"]),
                         ("ok", "fresh", {"name": "a", "revision": 1}))
        self.assertEqual(len(peer.asked), 1)
        self.assertEqual(peer.asked[0]["method"], "elicitation/create")
        self.assertEqual(peer.asked[0]["params"]["message"],
                         'Allow the tool notes_write_note to run with these arguments?\n{"name":"a","text":"b"}')
        for _ in range(3):  # the client's retries: new request ids, the same call
            again = body(peer.call("notes_write_note", {"name": "a", "text": "b"}))
            self.assertEqual((again[0]["status"], again[0]["delivery"], again[0]["data"]),
                             ("ok", "local_replay", {"name": "a", "revision": 1}))
        self.assertEqual(len(peer.asked), 1)  # never asked again
        self.assertEqual((self.note_revisions(), self.note_writes()), ({"a": 1}, 1))
        other = body(peer.call("notes_write_note", {"name": "a", "text": "c"}))  # another call: asked, run
        self.assertEqual((other[0]["delivery"], other[0]["data"]), ("fresh", {"name": "a", "revision": 2}))
        self.assertEqual((len(peer.asked), self.note_revisions()), (2, {"a": 2}))

    def test_two_copies_of_one_call_at_once_ask_once_and_write_once(self):
        release = threading.Event()

        def slow_yes(message):
            release.wait(WAIT)
            return yes(message)

        peer = self.peer(self.guard([self.demo_server()]), elicitation=True, answer_elicitation=slow_yes)
        first = peer.start("tools/call", {"name": "notes_write_note", "arguments": {"name": "a", "text": "b"}})
        second = peer.start("tools/call", {"name": "notes_write_note", "arguments": {"name": "a", "text": "b"}})
        self.assertTrue(peer.until(lambda: peer.asked))
        release.set()
        deliveries = sorted(body(peer.wait(request)["result"])[0]["delivery"] for request in (first, second))
        self.assertEqual(deliveries, ["fresh", "local_replay"])
        self.assertEqual((len(peer.asked), self.note_revisions()), (1, {"a": 1}))

    def test_a_modern_client_is_asked_through_the_input_required_round_trip(self):
        peer = self.peer(self.guard([self.demo_server()]), era="modern")
        meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}}}

        def call(arguments, **extra):
            request = {"jsonrpc": "2.0", "id": f"r{len(peer.answers)}", "method": "tools/call",
                       "params": {"name": "notes_write_note", "arguments": arguments, "_meta": meta, **extra}}
            peer.send(request)
            return peer.wait(request["id"])["result"]

        asked = call({"name": "a", "text": "b"})
        self.assertEqual(sorted(asked), ["inputRequests", "requestState", "resultType"])
        self.assertEqual(asked["resultType"], "input_required")
        self.assertEqual(asked["inputRequests"], {"approval": {"method": "elicitation/create", "params": {
            "mode": "form", "message": 'Allow the tool notes_write_note to run with these arguments?\n'
                                       '{"name":"a","text":"b"}',
            "requestedSchema": json.loads(gd.APPROVAL_SCHEMA)}}})
        state = asked["requestState"]
        accept = {"approval": {"action": "accept", "content": {"approve": True}}}
        # the answer does not carry over to other arguments, nor does a forged or altered state
        for arguments, forged in (({"name": "a", "text": "c"}, state), ({"name": "a", "text": "b"}, state + "0"),
                                  ({"name": "a", "text": "b"}, "x.1.y"), ({"name": "a", "text": "b"}, None)):
            with self.subTest(arguments=arguments, state=forged):
                again = call(arguments, inputResponses=accept, requestState=forged)
                self.assertEqual(again["resultType"], "input_required")
        self.assertEqual(self.note_revisions(), {})
        written = call({"name": "a", "text": "b"}, inputResponses=accept, requestState=state)
        self.assertEqual((written["resultType"], body(written)[0]["delivery"]), ("complete", "fresh"))
        # the state is spent; the same call again is a retry, answered from the ledger without asking
        replay = call({"name": "a", "text": "b"}, inputResponses=accept, requestState=state)
        self.assertEqual((replay["resultType"], body(replay)[0]["delivery"]), ("complete", "local_replay"))
        self.assertEqual(self.note_revisions(), {"a": 1})
        declined = call({"name": "b", "text": "b"})
        no_thanks = call({"name": "b", "text": "b"}, requestState=declined["requestState"],
                         inputResponses={"approval": {"action": "decline"}})
        self.assertEqual(code_of(no_thanks), "APPROVAL_REQUIRED")
        self.assertEqual(self.note_revisions(), {"a": 1})

    def test_a_request_state_expires_and_is_used_once(self):
        clock = [1_800_000_000.0]
        guard = self.guard([self.demo_server()], clock=lambda: clock[0])
        asked = guard.call("notes_write_note", {"name": "a", "text": "b"}, defer=True)
        state = asked["requestState"]
        clock[0] += guard.host.approval_timeout + 1
        self.assertIs(guard.redeem(state, "notes_write_note", {"name": "a", "text": "b"}), False)
        clock[0] -= 1  # the last second it holds
        self.assertIs(guard.redeem(state, "notes_write_note", {"name": "a", "text": "b"}), True)
        self.assertIs(guard.redeem(state, "notes_write_note", {"name": "a", "text": "b"}), False)
        self.assertIs(guard.redeem("a" * (gd.MAX_REQUEST_STATE + 1), "notes_write_note", {}), False)

    def test_a_request_state_of_another_shape_carries_no_answer_even_with_the_issued_mac(self):
        clock = [1_800_000_000.0]
        guard = self.guard([self.demo_server()], clock=lambda: clock[0])
        arguments = {"name": "a", "text": "b"}
        state = guard.call("notes_write_note", arguments, defer=True)["requestState"]
        nonce, expires, mac = state.split(".")
        self.assertEqual(len(expires), 10)
        # two parts, four, an expiry that is not all digits, one of 13 digits (the same value), none
        for shape in (f"{nonce}.{expires}", f"{nonce}.{expires}.{mac}.{mac}", f"{nonce}.x{expires}.{mac}",
                      f"{nonce}.+{expires}.{mac}", f"{nonce}.000{expires}.{mac}", f"{nonce}..{mac}", ""):
            with self.subTest(state=shape):
                self.assertIs(guard.redeem(shape, "notes_write_note", arguments), False)
        # 12 digits is the longest expiry read: the same value, so the issued MAC holds, once
        self.assertIs(guard.redeem(f"{nonce}.00{expires}.{mac}", "notes_write_note", arguments), True)
        self.assertIs(guard.redeem(state, "notes_write_note", arguments), False)  # its nonce is spent
        self.assertEqual(self.note_revisions(), {})

    def test_a_forged_state_for_arguments_without_a_canonical_form_carries_no_answer(self):
        guard = self.guard([self.demo_server()])
        for arguments in ({"name": "a", "text": [0.5, 2**64]}, {"name": "a", "text": "b"}):
            with self.subTest(arguments=arguments):
                self.assertIs(guard.redeem("n1.99999999999.", "notes_write_note", arguments), False)  # an empty MAC
        self.assertEqual(self.note_revisions(), {})

    def test_a_request_state_with_non_ascii_text_carries_no_answer_and_the_guard_serves_on(self):
        guard = self.guard([self.demo_server()])
        arguments = {"name": "a", "text": "b"}
        # a digit int() refuses, a digit it reads, a MAC compare_digest cannot compare, a nonce
        states = ("n1.\u00b2.m", "n1.\u0663\u0663\u0663\u0663\u0663\u0663\u0663\u0663\u0663\u0663\u0663.m",
                  "n1.99999999999.\u00e9", "\u00e9.99999999999.m")
        for state in states:
            with self.subTest(state=state):
                self.assertIs(guard.redeem(state, "notes_write_note", arguments), False)
        peer = self.peer(guard, era="modern")
        meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}
        accept = {"approval": {"action": "accept", "content": {"approve": True}}}
        for index, state in enumerate(states):
            peer.send({"jsonrpc": "2.0", "id": f"s{index}", "method": "tools/call",
                       "params": {"name": "notes_write_note", "arguments": arguments, "_meta": meta,
                                  "inputResponses": accept, "requestState": state}})
            with self.subTest(state=state):
                self.assertEqual(peer.wait(f"s{index}")["result"]["resultType"], "input_required")  # asked again
        self.assertEqual(peer.request("ping")["result"], {"resultType": "complete"})
        self.assertEqual(self.note_revisions(), {})

    def test_nobody_to_ask_is_reported_as_none_and_the_write_stays_refused(self):
        events = []
        peer = self.peer(self.guard([self.demo_server()], report=events.append))  # no elicitation, no command
        self.assertEqual(code_of(peer.call("notes_write_note", {"name": "a", "text": "b"})), "APPROVAL_REQUIRED")
        self.assertEqual([event for event in events if event["event"] == "approval"],
                         [{"event": "approval", "tool": "notes_write_note", "answer": "none"}])
        self.assertEqual(self.note_revisions(), {})

    def test_a_client_gone_before_its_write_is_asked_gets_no_question_and_no_wait(self):
        # The person would get the longest time there is; the client's stream ends as the call arrives.
        guard = self.guard([self.demo_server()], approval={"approver": "alice-at-client",
                                                           "timeout": gd.MAX_APPROVAL_TIMEOUT},
                           retry_window=gd.MAX_APPROVAL_TIMEOUT + gd.DEFAULT_CALL_TIMEOUT + 1)
        peer = Peer(guard, elicitation=True)  # never answers
        request = peer.start("tools/call", {"name": "notes_write_note", "arguments": {"name": "a", "text": "b"}})
        peer._to_guard.close()  # the end of input
        peer.server.join(WAIT)  # the guard finished serving: its calls ended
        self.assertFalse(peer.server.is_alive())
        self.assertEqual(code_of(peer.wait(request)["result"]), "GUARD_APPROVAL_UNANSWERED")
        peer.close()
        self.assertEqual(self.note_revisions(), {})

    def test_the_host_approval_command_is_asked_when_the_client_cannot_be(self):
        script = self.folder.write("approve.py", None)
        script.write_text("import json, sys\n"
                          "call = json.load(sys.stdin)\n"
                          "print(json.dumps({'approve': call['arguments']['text'] == 'ok'}))\n", encoding="utf-8")
        guard = self.guard([self.demo_server()], approval={"approver": "alice-at-client",
                                                           "command": [*PYTHON, str(script)]})
        for era in ("modern", "legacy"):
            with self.subTest(era=era):
                peer = self.peer(guard, era=era)
                self.assertEqual(code_of(peer.call("notes_write_note", {"name": f"n-{era}", "text": "no"})),
                                 "APPROVAL_REQUIRED")
                found = body(peer.call("notes_write_note", {"name": f"n-{era}", "text": "ok"}))[0]
                self.assertEqual((found["status"], found["data"]), ("ok", {"name": f"n-{era}", "revision": 1}))
        self.assertEqual(self.note_revisions(), {"n-modern": 1, "n-legacy": 1})

    def test_a_host_that_never_asks_the_client_asks_its_command_even_when_the_client_could_answer(self):
        guard = self.guard([self.demo_server()], approval={"approver": "alice-at-client", "ask_client": False,
                                                           "command": [*PYTHON, "-c", "print('{\"approve\": false}')"]})
        peer = self.peer(guard, elicitation=True, answer_elicitation=yes)
        self.assertEqual(code_of(peer.call("notes_write_note", {"name": "a", "text": "b"})), "APPROVAL_REQUIRED")
        self.assertEqual((peer.asked, self.note_revisions()), ([], {}))

    def test_the_approval_command_reads_the_call_with_unseen_characters_escaped_as_the_question_does(self):
        # A right-to-left override, a zero-width space and a no-break space reach the command as
        # their JSON escapes, never raw; visible text stays as it is; the JSON is the same value.
        seen = self.folder.path / "seen.json"
        command = [*PYTHON, "-c", "import sys; open(sys.argv[1], 'wb').write(sys.stdin.buffer.read()); "
                   "print('{\"approve\": true}')", str(seen)]
        arguments = {"name": "inv\u202eexe.txt", "text": "caf\u00e9\u200b\u00a0ok"}
        self.assertTrue(gd.ask_command(command, "notes_write_note", arguments, td.Principal("a", "b"), WAIT))
        text = seen.read_bytes().decode("utf-8")
        self.assertEqual(text, '{"arguments":{"name":"inv\\u202eexe.txt","text":"caf\u00e9\\u200b\\u00a0ok"},'
                               '"subject":"b","tenant":"a","tool":"notes_write_note"}')
        self.assertEqual(json.loads(text)["arguments"], arguments)
        self.assertIn(text[text.index("{", 1):text.index("}") + 1], gd.approval_text("notes_write_note", arguments))

    def test_a_fault_the_dispatch_raises_is_answered_as_its_own_refusal(self):
        guard = self.guard([self.demo_server()])
        fault = td.BoundaryError("LIFECYCLE_VIOLATION")
        with mock.patch.object(guard.dispatcher, "dispatch_for_provider", side_effect=fault):
            for name, arguments in (("notes_read_note", {"name": "a"}), ("notes_write_note", {"name": "a", "text": "b"})):
                with self.subTest(name=name):
                    self.assertEqual(guard.call(name, arguments), gd._refusal(fault))
        self.assertEqual(self.note_revisions(), {})

    def test_a_fault_the_status_query_raises_is_answered_as_its_own_refusal(self):
        guard = self.guard([self.demo_server("--crash-on-write")])
        lost = body(guard.call("notes_write_note", {"name": "a", "text": "b"}, ask=lambda _text: True))[0]
        self.assertEqual((lost["status"], lost["outcome"]), ("unknown", "unknown"))
        fault = td.BoundaryError("LIFECYCLE_VIOLATION")
        with mock.patch.object(guard.dispatcher, "query_operation_status", side_effect=fault) as query:
            self.assertEqual(guard.call("notes_write_note", {"name": "a", "text": "b"}), gd._refusal(fault))
        self.assertEqual(query.call_count, 1)  # the retry went to the status query, which refused
        self.assertEqual(guard.operation_state("notes_write_note", {"name": "a", "text": "b"}), "unknown")

    def test_the_guards_own_refusal_has_the_shape_the_readme_shows(self):
        with open(HERE / "README.md", encoding="utf-8") as handle:
            readme = handle.read()
        shown = readme.split("5. **The guard's own refusals.**", 1)[1].split("```\n", 2)[1].strip()
        self.assertEqual(json.loads(shown), gd._refusal(gd.GuardError("GUARD_BUSY")))
        self.assertEqual(json.loads(gd._refusal(gd.GuardError("GUARD_TOOL_WITHHELD"))["content"][0]["text"]),
                         {"status": "error", "error": {"code": "GUARD_TOOL_WITHHELD", "retryable": False,
                                                       "message": gd.GUARD_CATALOG["GUARD_TOOL_WITHHELD"].message}})

    def test_an_approval_command_that_fails_or_says_more_is_no(self):
        for label, source in (("exit 1", "import sys; print('{\"approve\": true}'); sys.exit(1)"),
                              ("another field", "print('{\"approve\": true, \"approver\": \"root\"}')"),
                              ("true as a string", "print('{\"approve\": \"true\"}')"),
                              ("not JSON", "print('yes')")):
            with self.subTest(label):
                self.assertIs(gd.ask_command([*PYTHON, "-c", source], "t", {}, td.Principal("a", "b"), WAIT), False)
        missing = [str(self.folder.path / "no-such-command")]  # it cannot start: no, not "nobody answered"
        self.assertIs(gd.ask_command(missing, "t", {}, td.Principal("a", "b"), WAIT), False)
        self.assertIs(gd.ask_command([*PYTHON, "-c", "print('{\"approve\": true}')"], "t", {},
                                     td.Principal("a", "b"), WAIT), True)

    def write_asked(self):
        """A write whose person has been asked, and says yes once ``release`` is set: (peer, request, release)."""
        asked = threading.Event()
        release = threading.Event()

        def late_yes(message):
            asked.set()
            release.wait(WAIT)
            return yes(message)

        peer = self.peer(self.guard([self.demo_server()]), elicitation=True, answer_elicitation=late_yes)
        request = peer.start("tools/call", {"name": "notes_write_note", "arguments": {"name": "a", "text": "b"}})
        self.assertTrue(asked.wait(WAIT))
        return peer, request, release

    def test_a_call_cancelled_while_the_person_decides_never_runs_and_is_not_answered(self):
        peer, request, release = self.write_asked()
        peer.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": request}})
        release.set()  # the answer follows the notification on the one stream: the guard reads it second
        ping = peer.request("ping")  # answered after the cancelled call's flow had its answer
        self.assertEqual(ping["result"], {})
        peer.close()
        self.assertNotIn(json.dumps(request), peer.answers)
        self.assertEqual(self.note_revisions(), {})

    def test_only_a_cancellation_with_its_params_an_object_cancels_a_call(self):
        peer, request, release = self.write_asked()
        for method, params in (("notifications/progress", {"requestId": request, "progressToken": request}),
                               ("notifications/message", {"requestId": request}),
                               ("notifications/cancelled", [request]),
                               ("notifications/cancelled", request)):
            peer.send({"jsonrpc": "2.0", "method": method, "params": params})
        self.assertEqual(peer.request("ping")["result"], {})  # still serving
        release.set()
        found = body(peer.wait(request)["result"])[0]
        self.assertEqual((found["status"], found["data"]), ("ok", {"name": "a", "revision": 1}))
        self.assertEqual(self.note_revisions(), {"a": 1})

    def test_a_call_cancelled_while_it_runs_is_not_answered_though_it_ends_with_a_result(self):
        guard = self.guard([self.demo_server()])
        self.assertIsNone(code_of(guard.call("notes_write_note", {"name": "a", "text": "b"}, ask=lambda _text: True)))
        ran = []
        call = guard.call

        def runs_past_its_cancellation(name, arguments, *, cancelled, **options):
            self.assertTrue(cancelled.wait(WAIT))  # the client gives the call up while it runs
            ran.append(call(name, arguments, cancelled=cancelled, **options))
            return ran[-1]

        peer = self.peer(guard)
        with mock.patch.object(guard, "call", side_effect=runs_past_its_cancellation):
            request = peer.start("tools/call", {"name": "notes_read_note", "arguments": {"name": "a"}})
            peer.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": request}})
            self.assertEqual(peer.request("ping")["result"], {})
            peer.close()
        self.assertEqual(len(ran), 1)
        found, is_error = body(ran[0])  # a result, which the client no longer waits for
        self.assertEqual((found["status"], found["data"]["text"], is_error), ("ok", "b", False))
        self.assertNotIn(json.dumps(request), peer.answers)

    def test_a_client_gone_while_its_write_is_asked_gets_no_approval_and_no_write(self):
        guard = self.guard([self.demo_server()])
        peer = Peer(guard, elicitation=True)  # asked, and never answers
        request = peer.start("tools/call", {"name": "notes_write_note", "arguments": {"name": "a", "text": "b"}})
        self.assertTrue(peer.until(lambda: peer.asked))
        peer._to_guard.close()  # the end of input while the question waits for its answer
        peer.server.join(WAIT)
        self.assertFalse(peer.server.is_alive())
        self.assertEqual(code_of(peer.wait(request)["result"]), "GUARD_APPROVAL_UNANSWERED")
        peer.close()
        self.assertEqual(self.note_revisions(), {})

    def test_an_approval_command_asked_after_the_stop_is_never_started(self):
        started = self.folder.path / "started"
        running = gd.ApprovalCommands()
        running.stop()
        running.stop()  # idempotent
        command = [*PYTHON, "-c", f"open({str(started)!r}, 'w').close(); print('{{\"approve\": true}}')"]
        self.assertIsNone(gd.ask_command(command, "t", {}, td.Principal("a", "b"), WAIT, running=running))
        self.assertFalse(started.exists())
        self.assertTrue(gd.ask_command(command, "t", {}, td.Principal("a", "b"), WAIT))  # the same, not stopped
        self.assertTrue(started.exists())

    def test_a_call_too_long_to_show_is_not_asked(self):
        self.assertIsNone(gd.approval_text("t", {"text": "x" * gd.MAX_APPROVAL_TEXT}))
        shown = gd.approval_text("t", {"text": "x" * 100})
        self.assertEqual(shown, 'Allow the tool t to run with these arguments?\n{"text":"' + "x" * 100 + '"}')
        self.assertIsNone(gd.approval_text("t", {"x": float("nan")}))
        # in the guard: the contract admits the call, nobody is asked, and APPROVAL_REQUIRED stands
        asked = []
        guard = self.guard([self.demo_server()])
        arguments = {"name": "a", "text": "\u200b" * 700}  # 700 characters that would read as 4,200
        self.assertIsNone(gd.approval_text("notes_write_note", arguments))
        found = guard.call("notes_write_note", arguments, ask=lambda text: asked.append(text) or True)
        self.assertEqual((code_of(found), asked, self.note_revisions()), ("APPROVAL_REQUIRED", [], {}))

    def test_the_person_sees_each_character_that_shows_as_nothing_or_reorders_the_text_as_its_escape(self):
        # A right-to-left override shows "\u202e0001" as "1000"; a zero-width space and a no-break
        # space look like nothing and like a space; a tag character shows as nothing at all.
        text = "pay \u202e0001\u200b\u00a0\u2028\x7f\x85\U000e0041 caf\u00e9 \u0436"
        peer = self.peer(self.guard([self.demo_server()]), elicitation=True, answer_elicitation=no)
        self.assertEqual(code_of(peer.call("notes_write_note", {"name": "a", "text": text})), "APPROVAL_REQUIRED")
        shown = ('Allow the tool notes_write_note to run with these arguments?\n{"name":"a","text":"pay '
                 '\\u202e0001\\u200b\\u00a0\\u2028\\u007f\\u0085\\udb40\\udc41 caf\u00e9 \u0436"}')
        self.assertEqual(peer.asked[0]["params"]["message"], shown)  # letters of any script stay as they are
        self.assertEqual(json.loads(shown.split("\n", 1)[1]), {"name": "a", "text": text})  # the same value
        self.assertIsNone(gd.approval_text("t", {"text": "x" * (gd.MAX_APPROVAL_TEXT - 70) + "\u200b" * 12}))
        self.assertEqual(self.note_revisions(), {})

    def test_with_nobody_to_ask_the_answer_is_no(self):
        guard = self.guard([self.demo_server()])  # no approval command, and no client to ask
        self.assertIs(guard._ask(None, "Allow?", "notes_write_note", {"name": "a", "text": "b"}, None), False)
        self.assertEqual(self.note_revisions(), {})

    def test_an_elicitation_answer_is_yes_only_when_it_says_exactly_so(self):
        for answer, expected in ((yes(None), True), ({"action": "accept", "content": {"approve": "true"}}, False),
                                 ({"action": "accept", "content": {"approve": False}}, False),
                                 ({"action": "decline", "content": {"approve": True}}, False),
                                 ({"action": "accept"}, False), (None, False), ([], False)):
            with self.subTest(answer=answer):
                self.assertIs(gd.elicited_yes(answer), expected)


class TestRetriesAndRecovery(GuardCase):

    def test_one_write_flow_per_retry_key_counted_while_it_waits_and_none_left_idle(self):
        # A retry that arrives while its first try holds the flow waits for that very lock: the flow
        # is counted from the moment it is asked for, never dropped while a call holds or awaits it.
        guard = self.guard([self.demo_server()], start=False)
        inside, release, order = threading.Event(), threading.Event(), []

        def first():
            with guard._flow("k"):
                order.append("first in")
                inside.set()
                release.wait(WAIT)
                order.append("first out")

        def second():
            with guard._flow("k"):
                order.append("second in")

        threads = [threading.Thread(target=first, daemon=True), threading.Thread(target=second, daemon=True)]
        threads[0].start()
        self.assertTrue(inside.wait(WAIT))
        threads[1].start()
        self.assertTrue(eventually(lambda: guard._flows["k"].users == 2))
        with guard._flow("other"):  # another key never waits for this one
            self.assertEqual(sorted(guard._flows), ["k", "other"])
        release.set()
        for thread in threads:
            thread.join(WAIT)
        self.assertEqual((order, guard._flows), (["first in", "first out", "second in"], {}))

    def test_a_server_killed_mid_write_gives_unknown_which_reconciles_exactly_once(self):
        guard = self.guard([self.demo_server("--crash-on-write")])
        peer = self.peer(guard, elicitation=True, answer_elicitation=yes)
        lost = body(peer.call("notes_write_note", {"name": "a", "text": "b"}))[0]
        self.assertEqual((lost["status"], lost["error"]["code"], lost["outcome"]),
                         ("unknown", "OUTCOME_UNKNOWN", "unknown"))
        self.assertEqual(self.note_revisions(), {"a": 1})  # it did write, and died before answering
        settled = body(peer.call("notes_write_note", {"name": "a", "text": "b"}))[0]
        self.assertEqual((settled["status"], settled["delivery"], settled["data"]),
                         ("ok", "receipt_reconciled", {"name": "a", "revision": 1}))
        again = body(peer.call("notes_write_note", {"name": "a", "text": "b"}))[0]
        self.assertEqual((again["status"], again["delivery"]), ("ok", "local_replay"))
        self.assertEqual((self.note_revisions(), len(peer.asked)), ({"a": 1}, 1))

    def test_a_restarted_guard_with_a_ledger_replays_instead_of_writing_again(self):
        self.restart_replays(str(self.folder.path / "ledger.sqlite3"))

    @unittest.skipUnless(POSTGRES, "GUARD_PG_DSN is not set: durable/pg/ci.sh runs this with a throwaway server")
    def test_a_restarted_guard_on_postgresql_replays_instead_of_writing_again(self):
        self.restart_replays(POSTGRES)

    def restart_replays(self, store):
        first = self.guard([self.demo_server()], store=store, seal_keys=SEAL_KEYS)
        peer = self.peer(first, elicitation=True, answer_elicitation=yes)
        self.assertEqual(body(peer.call("notes_write_note", {"name": "a", "text": "b"}))[0]["delivery"], "fresh")
        peer.close()
        first.close()
        second = self.guard([self.demo_server()], store=store, seal_keys=SEAL_KEYS)
        peer = self.peer(second, elicitation=True, answer_elicitation=yes)
        again = body(peer.call("notes_write_note", {"name": "a", "text": "b"}))[0]
        self.assertEqual((again["status"], again["delivery"], again["data"]),
                         ("ok", "local_replay", {"name": "a", "revision": 1}))
        self.assertEqual((self.note_revisions(), peer.asked), ({"a": 1}, []))

    def test_a_client_gone_mid_write_leaves_the_write_in_the_ledger(self):
        store = str(self.folder.path / "ledger.sqlite3")
        guard = self.guard([self.demo_server()], store=store, seal_keys=SEAL_KEYS)
        peer = self.peer(guard, elicitation=True, answer_elicitation=yes)
        peer.start("tools/call", {"name": "notes_write_note", "arguments": {"name": "a", "text": "b"}})
        self.assertTrue(peer.until(lambda: peer.replied))
        peer.close()  # the client leaves once it said yes, its call running: the guard finishes it
        self.assertEqual(guard.operation_state("notes_write_note", {"name": "a", "text": "b"}), "succeeded")
        self.assertEqual(guard.operation_state("notes_write_note", {"name": "a", "text": "c"}), "none")
        self.assertEqual(self.note_revisions(), {"a": 1})

    def test_the_retry_window_the_same_call_later_is_a_new_write(self):
        clock = [1_800_000_000.0]
        guard = self.guard([self.demo_server()], clock=lambda: clock[0])
        peer = self.peer(guard, elicitation=True, answer_elicitation=yes)
        window = guard.host.retry_window
        clock[0] = (clock[0] // window) * window + window - 1  # the last second of a window
        self.assertEqual(body(peer.call("notes_write_note", {"name": "a", "text": "b"}))[0]["delivery"], "fresh")
        clock[0] += window  # the last second of the next window: still the same call
        self.assertEqual(body(peer.call("notes_write_note", {"name": "a", "text": "b"}))[0]["delivery"],
                         "local_replay")
        clock[0] += 1  # two windows on: a new intent
        self.assertEqual(body(peer.call("notes_write_note", {"name": "a", "text": "b"}))[0]["delivery"], "fresh")
        self.assertEqual((self.note_revisions(), len(peer.asked)), ({"a": 2}, 2))

    def test_retry_keys_are_keyed_and_bound_to_the_principal_the_tool_the_arguments_and_the_window(self):
        alice, bob = td.Principal("t", "alice"), td.Principal("t", "bob")
        key = gd.retry_key(alice, "w", {"a": 1, "b": [1, 2]}, 7)
        text = td.canonical_text([gd.RETRY_KEY_DOMAIN, "t", "alice", "w", {"a": 1, "b": [1, 2]}, 7])
        self.assertEqual(key, "g-" + hashlib.sha256(text.encode()).hexdigest()[:40])  # a known answer
        self.assertEqual(key, gd.retry_key(alice, "w", {"b": [1, 2], "a": 1}, 7))  # canonical: key order is no matter
        same = {"a": 1, "b": [1, 2]}
        for other in (gd.retry_key(bob, "w", same, 7), gd.retry_key(alice, "v", same, 7),
                      gd.retry_key(alice, "w", {"a": 1, "b": [2, 1]}, 7), gd.retry_key(alice, "w", same, 8)):
            self.assertNotEqual(other, key)
        unkeyable = [gd.retry_key(alice, "w", {"a": float("nan")}, 7) for _ in range(2)]
        self.assertNotEqual(unkeyable[0], unkeyable[1])
        self.assertEqual(gd.operation_of(key), "op-" + key[2:26])


class TestAuditAndHostFile(GuardCase):

    def test_every_package_is_in_the_sealed_audit_log(self):
        stream = io.BytesIO()
        guard = gd.Guard(gd.load_host(self.folder.host([self.demo_server()])), audit=stream, seal_keys=SEAL_KEYS)
        guard.start()
        peer = Peer(guard, elicitation=True, answer_elicitation=yes)
        peer.call("notes_write_note", {"name": "a", "text": "b"})
        peer.call("notes_read_note", {"name": "a", "x": 1})
        peer.close()
        guard.close()
        report = td.verify_audit_log(stream.getvalue(), seal_keys=SEAL_KEYS, require_seal=True)
        # the write's first try (APPROVAL_REQUIRED), its approved run, the refused read
        self.assertEqual((report.entries, report.sealed), (3, True))

    def test_each_refusal_the_guard_answers_itself_is_reported_once_and_names_only_a_reviewed_tool(self):
        broken = {**self.fault_server("crash_at_start"), "name": "broken", "prefix": "broken_"}
        events = []
        guard = self.guard([self.fault_server("unencodable"), broken, self.demo_server()], report=events.append)
        del events[:]  # the start
        withheld = guard.call("orders_get_order", {"order_ref": "ORDER-7"})
        unavailable = guard.call("broken_ping_tool", {})
        unanswered = guard.call("notes_write_note", {"name": "a", "text": "b"}, ask=lambda _text: None)
        fault = td.BoundaryError("LIFECYCLE_VIOLATION")
        with mock.patch.object(guard.dispatcher, "dispatch_for_provider", side_effect=fault):
            faulted = guard.call("notes_read_note", {"name": "a"})
        self.assertEqual([code_of(withheld), code_of(unavailable), code_of(unanswered), code_of(faulted)],
                         ["GUARD_TOOL_WITHHELD", "GUARD_SERVER_UNAVAILABLE", "GUARD_APPROVAL_UNANSWERED",
                          "LIFECYCLE_VIOLATION"])
        self.assertEqual(events, [
            {"event": "refused", "tool": "orders_get_order", "code": "GUARD_TOOL_WITHHELD"},
            {"event": "refused", "tool": "broken_ping_tool", "code": "GUARD_SERVER_UNAVAILABLE"},
            {"event": "call", "tool": "notes_write_note", "status": "error", "code": "APPROVAL_REQUIRED"},
            {"event": "approval", "tool": "notes_write_note", "answer": "none"},
            {"event": "refused", "tool": "notes_write_note", "code": "GUARD_APPROVAL_UNANSWERED"},
            {"event": "refused", "tool": "notes_read_note", "code": "LIFECYCLE_VIOLATION"}])
        del events[:]
        peer = self.peer(guard)
        with mock.patch.object(guard, "call", side_effect=RuntimeError("/secret/path")):
            for name in ("notes_read_note", "no_such_tool", {"name": "notes_read_note"}):
                with self.subTest(name=name):
                    self.assertEqual(code_of(peer.call(name, {"name": "a"})), "INTERNAL_ERROR")
        self.assertEqual(events, [{"event": "refused", "tool": tool, "code": "INTERNAL_ERROR"}
                                  for tool in ("notes_read_note", None, None)])
        self.assertEqual(self.note_revisions(), {})

    def test_a_reporter_that_fails_costs_no_answer_to_a_fault(self):
        def broken(_event):
            raise RuntimeError("the reporter's own fault")

        guard = self.guard([self.demo_server()], report=broken)
        peer = self.peer(guard)
        with mock.patch.object(guard, "call", side_effect=RuntimeError("a fault")):
            self.assertEqual(code_of(peer.call("notes_read_note", {"name": "a"})), "INTERNAL_ERROR")
        self.assertEqual(peer.request("ping")["result"], {})

    def test_each_host_field_out_of_bounds_is_named(self):
        good = {"format": gd.HOST_FORMAT, "principal": {"tenant": "t", "subject": "s", "roles": [ROLE]},
                "approval": {"approver": "lee"}, "servers": [self.demo_server()]}
        cases = (
            ({"format": "other"}, "format"),
            ({"principal": {"tenant": "t", "subject": "s"}}, "principal"),
            ({"principal": {"tenant": "t", "subject": "s", "roles": ["b", "b"]}}, "principal.roles"),
            ({"principal": {"tenant": "t", "subject": "s", "roles": 5}}, "principal.roles"),
            ({"principal": {"tenant": "t/x", "subject": "s", "roles": []}}, "principal"),
            ({"approval": {"approver": "lee at the desk"}}, "approval.approver"),
            ({"approval": {"approver": "l" * (td.MAX_IDENTIFIER_LENGTH + 1)}}, "approval.approver"),
            ({"approval": {"approver": 7}}, "approval.approver"),
            ({"approval": {"approver": "lee", "command": []}}, "approval.command"),
            ({"approval": {"approver": "lee", "timeout": 0}}, "approval.timeout"),
            ({"approval": {"approver": "lee", "ask_client": 1}}, "approval.ask_client"),
            ({"approval": {"approver": "lee", "timeout": 600}}, "retry_window"),
            ({"retry_window": gd.DEFAULT_APPROVAL_TIMEOUT + gd.DEFAULT_CALL_TIMEOUT}, "retry_window"),
            ({"call_timeout": gd.MAX_CALL_TIMEOUT + 1}, "call_timeout"),
            ({"servers": []}, "servers"),
            ({"servers": [{**self.demo_server(), "prefix": "bad prefix"}]}, "servers[0].prefix"),
            ({"servers": [{**self.demo_server(), "prefix": 7}]}, "servers[0].prefix"),
            ({"servers": [{**self.demo_server(), "prefix": "p" * 33}]}, "servers[0].prefix"),
            ({"servers": [{**self.demo_server(), "name": "the notes"}]}, "servers[0].name"),
            ({"servers": [{**self.demo_server(), "name": "n" * (td.MAX_IDENTIFIER_LENGTH + 1)}]}, "servers[0].name"),
            ({"servers": [{**self.demo_server(), "name": ["notes"]}]}, "servers[0].name"),
            ({"servers": [{**self.demo_server(), "status_tools": {"read_note": "note_write_status"}}]},
             "servers[0].status_tools"),
            ({"servers": [self.demo_server(), self.demo_server()]}, "servers"),
            ({"servers": [self.demo_server(), self.demo_server(prefix="other_")]}, "servers"),  # one server name
            ({"servers": [self.demo_server(), {**self.demo_server(), "name": "more"}]}, "servers"),  # one tool name
            ({"servers": {"notes": self.demo_server()}}, "servers"),
            ({"servers": [{**self.demo_server(prefix=f"p{index}_"), "name": f"s{index}"}
                          for index in range(gd.MAX_SERVERS + 1)]}, "servers"),
            ({"servers": [{**self.demo_server(), "command": []}]}, "servers[0].command"),
            ({"servers": [{**self.demo_server(), "command": "python -B server.py"}]}, "servers[0].command"),
            ({"servers": [{**self.demo_server(), "command": ["python", ""]}]}, "servers[0].command"),
            ({"servers": [{**self.demo_server(), "contracts": 5}]}, "servers[0].contracts"),
            ({"servers": [{**self.demo_server(), "contracts": ""}]}, "servers[0].contracts"),
            ({"servers": [{**self.demo_server(prefix="p" * 31 + "_"), "contracts": "long.json", "status_tools": {}}]},
             "servers[0].prefix"),
            ({"extra": 1}, ""),
        )
        # A tool name of 33 characters: under a prefix of 31 and "_" (each within its own limit) it
        # is 65 long, past what a provider accepts; under "notes_" it is a name like any other.
        long_name = "t" * 33
        self.folder.write("long.json", {"format": td.CONTRACTS_FORMAT, "tools": [td.declare_tool(
            long_name, description="A tool with a long name.", effect="read", required_role=ROLE,
            input_schema={"type": "object"})]})
        long_host = {**good, "servers": [{**self.demo_server(), "contracts": "long.json", "status_tools": {}}]}
        self.assertEqual(gd._exposed(gd.parse_host(json.dumps(long_host).encode(), folder=self.folder.path).servers[0]),
                         ["notes_" + long_name])
        most = {**good, "servers": [{**self.demo_server(prefix=f"p{index}_"), "name": f"s{index}"}
                                    for index in range(gd.MAX_SERVERS)]}
        self.assertEqual(len(gd.parse_host(json.dumps(most).encode(), folder=self.folder.path).servers), gd.MAX_SERVERS)
        # servers[].env: names of the guard's variables, never values; at most 64, none twice
        cases += tuple(({"servers": [{**self.demo_server(), "env": value}]}, "servers[0].env")
                       for value in ("HOME", {"TOKEN": "x"}, ["TOKEN=x"], ["1A"], [""], ["A", "A"], [1], None,
                                     [f"V{index}" for index in range(65)]))
        ceilings = {"max_output_bytes": td.MAX_OUTPUT_BYTES_CEILING, "max_output_nodes": td.MAX_OUTPUT_NODES_CEILING}
        for field, ceiling in ceilings.items():
            cases += tuple(({"servers": [{**self.demo_server(), field: value}]}, f"servers[0].{field}")
                           for value in (0, -1, ceiling + 1, True, 1.0, "8192", None))
        for change, at in cases:
            with self.subTest(at=at, change=change):
                with self.assertRaises(gd.GuardError) as caught:
                    gd.parse_host(json.dumps({**good, **change}).encode(), folder=self.folder.path)
                self.assertEqual((caught.exception.code, caught.exception.at), ("GUARD_HOST_INVALID", at))
        # the limits' good sides
        edge = {**good, "retry_window": gd.DEFAULT_APPROVAL_TIMEOUT + gd.DEFAULT_CALL_TIMEOUT + 1,
                "call_timeout": gd.DEFAULT_CALL_TIMEOUT}
        self.assertEqual(gd.parse_host(json.dumps(edge).encode(), folder=self.folder.path).retry_window, 151)
        for low, high in ((1, 1), (td.MAX_OUTPUT_BYTES_CEILING, td.MAX_OUTPUT_NODES_CEILING)):
            limits = {"max_output_bytes": low, "max_output_nodes": high}
            server = gd.parse_host(json.dumps({**good, "servers": [{**self.demo_server(), **limits}]}).encode(),
                                   folder=self.folder.path).servers[0]
            self.assertEqual((server.max_output_bytes, server.max_output_nodes), (low, high))
        server = gd.parse_host(json.dumps(good).encode(), folder=self.folder.path).servers[0]
        self.assertEqual((server.max_output_bytes, server.max_output_nodes), (td.MAX_OUTPUT_BYTES, td.MAX_OUTPUT_NODES))
        # the names' good sides: an approver and a server name of 64 characters, a prefix of 32
        longest = {**good, "approval": {"approver": "l" * td.MAX_IDENTIFIER_LENGTH},
                   "servers": [{**self.demo_server(), "name": "n" * td.MAX_IDENTIFIER_LENGTH, "prefix": "p" * 32}]}
        host = gd.parse_host(json.dumps(longest).encode(), folder=self.folder.path)
        self.assertEqual((host.approver, host.servers[0].name, host.servers[0].prefix),
                         ("l" * td.MAX_IDENTIFIER_LENGTH, "n" * td.MAX_IDENTIFIER_LENGTH, "p" * 32))
        for data in (b"not json", b'{"format": 1, "format": 2}', b"[" * 9 + b"]" * 9):  # strict JSON, 8 deep
            with self.subTest(data=data), self.assertRaises(gd.GuardError) as caught:
                gd.parse_host(data, folder=self.folder.path)
            self.assertEqual((caught.exception.code, caught.exception.at), ("GUARD_HOST_INVALID", ""))
        with self.assertRaises(gd.GuardError) as caught:  # the approver is required: no file goes without one
            gd.parse_host(json.dumps({key: value for key, value in good.items() if key != "approval"}).encode(),
                          folder=self.folder.path)
        self.assertEqual((caught.exception.code, caught.exception.at), ("GUARD_HOST_INVALID", "approval"))
        with self.assertRaises(gd.GuardError) as caught:
            missing = {**good, "servers": [{**self.demo_server(), "contracts": "missing.json"}]}
            gd.parse_host(json.dumps(missing).encode(), folder=self.folder.path)
        self.assertEqual((caught.exception.code, caught.exception.at),
                         ("GUARD_CONTRACTS_INVALID", "servers[0].contracts"))


class TestServing(GuardCase):

    def test_hostile_messages_get_fixed_json_rpc_errors_and_the_guard_serves_on(self):
        peer = self.peer(self.guard([self.demo_server()]))
        peer.send_raw(b"not json\n")
        peer.send_raw(b'{"jsonrpc": "2.0", "id": 1, "id": 2, "method": "ping"}\n')
        peer.send_raw(b"[1, 2]\n")
        peer.send_raw(b'{"jsonrpc": "2.0", "id": {"x": 1}, "method": "ping"}\n')
        peer.send_raw(b'{"jsonrpc": "2.0", "id": "' + b"i" * 300 + b'", "method": "ping"}\n')
        peer.send_raw(b'{"jsonrpc": "2.0", "id": 77, "method": "tools/call", "params": []}\n')
        peer.send_raw(b'{"jsonrpc": "2.0", "id": 78, "method": "resources/list"}\n')
        peer.send_raw(b'{"jsonrpc": "2.0", "id": 79, "method": "tools/call", "params": {"name": "' + b"x" * (
            gd.MAX_LINE_BYTES) + b'"}}\n')
        self.assertEqual(peer.request("ping")["result"], {})
        with peer._arrived:
            errors = [message["error"] for key, message in peer.answers.items() if key == "null"]
        self.assertEqual(errors[-1], {"code": -32600, "message": "Invalid request"})
        self.assertEqual(peer.wait(77)["error"], {"code": -32602, "message": "Invalid params"})
        self.assertEqual(peer.wait(78)["error"], {"code": -32601, "message": "Method not found"})

    def test_a_line_of_exactly_the_limit_is_read_and_the_next_line_too(self):
        peer = self.peer(self.guard([self.demo_server()]))
        head, tail = b'{"jsonrpc": "2.0", "id": 91, "method": "ping", "params": {"pad": "', b'"}}'
        exact = head + b"x" * (gd.MAX_LINE_BYTES - len(head) - len(tail)) + tail
        self.assertEqual(len(exact), gd.MAX_LINE_BYTES)
        peer.send_raw(exact + b"\n")
        peer.send_raw(b'{"jsonrpc": "2.0", "id": 92, "method": "ping"}\n')
        self.assertEqual(peer.wait(92)["result"], {})
        with peer._arrived:
            self.assertEqual(sorted(peer.answers), ["1", "91", "92"])  # the handshake, both pings, no refusal
        over = exact.replace(b'"pad": "', b'"pad": "x', 1)  # one byte over: refused, and only that line
        peer.send_raw(over + b"\n")
        peer.send_raw(b'{"jsonrpc": "2.0", "id": 93, "method": "ping"}\n')
        self.assertEqual(peer.wait(93)["result"], {})
        with peer._arrived:
            self.assertEqual((sorted(peer.answers), peer.answers["null"]["error"]),
                             (["1", "91", "92", "93", "null"], {"code": -32600, "message": "Invalid request"}))

    def test_an_answered_id_may_be_sent_again_at_once_and_one_in_flight_may_not(self):
        guard = self.guard([self.demo_server()])
        peer = self.peer(guard)
        gate, listed = threading.Event(), guard.withheld
        guard._refused_before = lambda _name: None  # as the call reads it before it runs: its server runs
        guard.withheld = lambda: (gate.wait(WAIT), listed())[1]  # each call's last step waits, once answered
        read = {"name": "notes_read_note", "arguments": {"name": "a"}}
        first = peer.wait(peer.start("tools/call", read, request_id="same"))
        with peer._arrived:
            peer.answers.clear()
        again = peer.wait(peer.start("tools/call", read, request_id="same"))  # its answer sent: no longer in flight
        self.assertEqual((code_of(first["result"]), code_of(again["result"])), ("TOOL_FAILED", "TOOL_FAILED"))
        gate.set()
        release = threading.Event()
        peer = self.peer(guard, elicitation=True, answer_elicitation=lambda message: (release.wait(WAIT), no(message))[1])
        write = {"name": "notes_write_note", "arguments": {"name": "a", "text": "b"}}
        peer.start("tools/call", write, request_id="w")
        self.assertTrue(peer.until(lambda: peer.asked))  # in flight: waiting for the person
        peer.start("tools/call", write, request_id="w")
        # Refused under no id: under "w" the client would take it for the first call's answer.
        self.assertEqual(peer.wait(None)["error"], {"code": -32600, "message": "Invalid request"})
        with peer._arrived:
            self.assertNotIn('"w"', peer.answers)
        release.set()
        self.assertEqual(code_of(peer.wait("w")["result"]), "APPROVAL_REQUIRED")  # the first call's own answer
        self.assertEqual(len(peer.asked), 1)  # the second was never run

    def test_no_request_under_an_id_in_flight_is_answered_under_it_whatever_its_method(self):
        # While a write under "w" waits for the person, each request under "w" is refused under no
        # id: a ping, a listing, an unknown method, a line the strict reading refuses. Under "w",
        # the client would take any of them for the write's answer, and drop the real one.
        release = threading.Event()
        peer = self.peer(self.guard([self.demo_server()]), elicitation=True,
                         answer_elicitation=lambda message: (release.wait(WAIT), no(message))[1])
        peer.start("tools/call", {"name": "notes_write_note", "arguments": {"name": "a", "text": "b"}}, request_id="w")
        self.assertTrue(peer.until(lambda: peer.asked))
        peer.start("ping", request_id="w")
        peer.start("tools/list", request_id="w")
        peer.start("no/such/method", request_id="w")
        peer.send_raw(b'{"jsonrpc": "2.0", "id": "w", "method": "ping", "params": {"x": "\\ud800"}}\n')
        self.assertEqual(peer.request("ping")["result"], {})  # read after the four
        with peer._arrived:
            self.assertEqual([(message["id"], message["error"]["code"]) for message in peer.log[-5:-1]],
                             [(None, -32600)] * 3 + [(None, -32700)])
        release.set()
        self.assertEqual(code_of(peer.wait("w")["result"]), "APPROVAL_REQUIRED")
        with peer._arrived:
            self.assertEqual(sum(message["id"] == "w" for message in peer.log), 1)  # one answer, its own
        with peer._arrived:
            peer.answers.clear()
        self.assertEqual(peer.request("ping", request_id="w")["result"], {})  # answered: free again
        self.assertEqual(len(peer.asked), 1)

    def test_a_line_the_strict_reading_refuses_is_answered_under_its_id_when_that_is_plain(self):
        # Valid JSON to Python's reader, refused by the guard's (a lone surrogate, a repeated key, a
        # number past a double, nesting past the limit): a parse error, under the request's own id,
        # so that the client's call ends. Under no id (null) when no single id can be read.
        peer = self.peer(self.guard([self.demo_server()]))
        call = b'{"jsonrpc": "2.0", "id": %s, "method": "tools/call", "params": {"name": "notes_read_note", "arguments": %s}}\n'
        deep = b"[" * gd.MAX_MESSAGE_DEPTH + b"]" * gd.MAX_MESSAGE_DEPTH
        for request_id, arguments in ((b"101", b'{"name": "\\ud800"}'), (b'"two"', b'{"name": "a", "name": "b"}'),
                                      (b"103", b'{"name": 1e400}'), (b"104", b'{"name": ' + deep + b"}")):
            with self.subTest(request_id=request_id):
                peer.send_raw(call % (request_id, arguments))
                self.assertEqual(peer.wait(json.loads(request_id))["error"], {"code": -32700, "message": "Parse error"})
        for line in (b'{"jsonrpc": "2.0", "id": 5, "id": 6, "method": "tools/call", "params": {"x": "\\ud800"}}\n',
                     b'{"jsonrpc": "2.0", "id": 7, "method": "ping", "params": {"x": "\\ud800"}\n',  # no closing brace
                     b'{"jsonrpc": "2.0", "id": 8, "params": {"x": "\\ud800"}}\n',  # no method: not a request
                     b'{"jsonrpc": "1.0", "id": 9, "method": "ping", "params": {"x": "\\ud800"}}\n',
                     b'{"jsonrpc": "2.0", "id": 10, "method": "ping", "params": {"x": 1e400}, "deep": ' + deep * 30 + b"}\n"):
            with self.subTest(line=line[:60]):
                with peer._arrived:
                    before = len(peer.log)
                peer.send_raw(line)
                self.assertTrue(peer.until(lambda: len(peer.log) > before))
                with peer._arrived:
                    self.assertEqual((peer.log[-1]["id"], peer.log[-1]["error"]["code"]), (None, -32700))

    def test_a_fault_in_a_method_answers_internal_error_and_the_guard_serves_on(self):
        guard = self.guard([self.demo_server()])

        def broken():
            raise RuntimeError("a fault of the guard's own")

        guard.tools = broken
        peer = self.peer(guard)
        self.assertEqual(peer.request("tools/list")["error"], {"code": -32603, "message": "Internal error"})
        self.assertEqual(peer.request("ping")["result"], {})

    def test_odd_calls_and_answers_are_refused_or_read_past(self):
        peer = self.peer(self.guard([self.demo_server()]), elicitation=True, answer_elicitation=lambda _m: None)
        self.assertEqual(code_of(peer.call(5, {"name": "a"})), "INVALID_PROPOSAL")
        self.assertEqual(code_of(peer.request("tools/call", {"name": "notes_read_note"})["result"]),
                         "INVALID_ARGUMENTS")  # no arguments: an empty object, refused by the contract
        peer.send({"jsonrpc": "2.0", "id": "guard-999", "result": {"action": "accept"}})  # no such question
        peer.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": {"x": 1}}})
        request = peer.start("tools/call", {"name": "notes_write_note", "arguments": {"name": "a", "text": "b"}})
        self.assertTrue(peer.until(lambda: peer.asked))
        # an error in place of the person's answer is no answer that says yes
        peer.send({"jsonrpc": "2.0", "id": peer.asked[0]["id"], "error": {"code": -1, "message": "no"}})
        self.assertEqual(code_of(peer.wait(request)["result"]), "APPROVAL_REQUIRED")
        self.assertEqual(self.note_revisions(), {})

    def test_at_most_sixteen_calls_run_at_once(self):
        release = threading.Event()

        def later(message):
            release.wait(WAIT)
            return no(message)

        events = []
        peer = self.peer(self.guard([self.demo_server()], report=events.append), elicitation=True,
                         answer_elicitation=later)
        waiting = [peer.start("tools/call", {"name": "notes_write_note", "arguments": {"name": f"n{i}", "text": "b"}})
                   for i in range(gd.MAX_IN_FLIGHT)]
        self.assertTrue(peer.until(lambda: len(peer.asked) == gd.MAX_IN_FLIGHT))  # every one in flight, asking
        self.assertEqual(code_of(peer.call("notes_read_note", {"name": "a"})), "GUARD_BUSY")
        self.assertEqual(events[-1], {"event": "refused", "tool": "notes_read_note", "code": "GUARD_BUSY"})
        # Busy, and under an id in flight: refused under no id, never GUARD_BUSY under the first call's.
        peer.start("tools/call", {"name": "notes_read_note", "arguments": {"name": "a"}}, request_id=waiting[0])
        self.assertEqual(peer.wait(None)["error"], {"code": -32600, "message": "Invalid request"})
        release.set()
        self.assertEqual({code_of(peer.wait(request)["result"]) for request in waiting}, {"APPROVAL_REQUIRED"})
        self.assertEqual(code_of(peer.call("notes_read_note", {"name": "a"})), "TOOL_FAILED")  # served again
        with peer._arrived:
            self.assertEqual(sum(message["id"] == waiting[0] for message in peer.log), 1)  # one answer, its own

    def test_the_listing_is_one_page_and_a_cursor_is_refused(self):
        peer = self.peer(self.guard([self.demo_server()]))
        self.assertEqual(len(peer.request("tools/list", {"cursor": None})["result"]["tools"]), 3)
        for cursor in ("", "zzz", 2):
            with self.subTest(cursor=cursor):
                self.assertEqual(peer.request("tools/list", {"cursor": cursor})["error"],
                                 {"code": -32602, "message": "Invalid params"})
        self.assertNotIn("nextCursor", peer.request("tools/list")["result"])

    def test_a_modern_request_without_its_version_is_refused(self):
        peer = self.peer(self.guard([self.demo_server()]), era="modern")
        peer.send({"jsonrpc": "2.0", "id": "x", "method": "tools/list", "params": {}})
        self.assertEqual(peer.wait("x")["error"], {"code": -32602, "message": "Invalid params"})
        answer = peer.request("tools/list")["result"]
        self.assertEqual((answer["resultType"], answer["ttlMs"], answer["cacheScope"], len(answer["tools"])),
                         ("complete", 0, "private", 3))
        self.assertEqual(peer.request("ping")["result"], {"resultType": "complete"})

    def test_the_command_line_serves_a_client_and_says_nothing_but_mcp_on_stdout(self):
        host = self.folder.host([self.demo_server()])
        messages = [{"jsonrpc": "2.0", "id": 1, "method": "initialize",
                     "params": {"protocolVersion": "2025-06-18", "capabilities": {}}},
                    {"jsonrpc": "2.0", "method": "notifications/initialized"},
                    {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                     "params": {"name": "notes_read_note", "arguments": {"name": "a"}}}]
        log = self.folder.path / "audit.jsonl"
        done = subprocess.run([*PYTHON, str(HERE / "mcp_bridge.py"), "guard", "--host", str(host),
                               "--audit-log", str(log)],
                              input="".join(json.dumps(m) + "\n" for m in messages).encode(),
                              capture_output=True, timeout=WAIT, check=False)
        self.assertEqual(done.returncode, 0)
        answers = [json.loads(line) for line in done.stdout.splitlines()]
        self.assertEqual([answer["id"] for answer in answers], [1, 2])
        self.assertEqual(code_of(answers[1]["result"]), "TOOL_FAILED")  # no such note: the server's isError
        reports = [json.loads(line) for line in done.stderr.splitlines()]
        self.assertEqual(reports[0], {"event": "started", "servers": {"notes": {"started": True, "withheld": {}}}})
        self.assertEqual(td.verify_audit_log(log.read_bytes()).entries, 1)
        self.assertEqual(log.stat().st_mode & 0o077, 0)  # its owner's only, whatever the umask

    def test_a_legacy_client_gets_the_version_it_asked_for_when_the_guard_speaks_it_else_the_newest(self):
        guard = self.guard([self.demo_server()])
        newest, oldest = client.LEGACY_VERSIONS[0], client.LEGACY_VERSIONS[-1]
        for asked, answered in ((oldest, oldest), (newest, newest), ("2099-01-01", newest), (None, newest),
                                (client.MODERN_VERSION, newest)):
            with self.subTest(asked=asked):
                peer = self.peer(guard, era=None)
                result = peer.request("initialize", {"protocolVersion": asked, "capabilities": {}})["result"]
                self.assertEqual(result, {"protocolVersion": answered, "capabilities": {"tools": {"listChanged": True}},
                                          "serverInfo": dict(gd.SERVER_INFO), "instructions": gd.INSTRUCTIONS})

    def test_one_handshake_one_era_and_nothing_but_a_ping_before_it(self):
        guard = self.guard([self.demo_server()])
        fresh = self.peer(guard, era=None)
        self.assertEqual(fresh.request("ping")["result"], {})  # a ping at any time
        for method, params in (("tools/list", {}), ("tools/call", {"name": "notes_read_note", "arguments": {}})):
            with self.subTest(method=method):
                self.assertEqual(fresh.request(method, params)["error"], {"code": -32600, "message": "Invalid request"})
        legacy = self.peer(guard)
        for method in ("server/discover", "initialize"):
            with self.subTest(era="legacy", method=method):
                self.assertEqual(legacy.request(method, {"protocolVersion": "2025-06-18", "capabilities": {}})["error"],
                                 {"code": -32600, "message": "Invalid request"})
        self.assertNotIn("resultType", legacy.request("tools/list")["result"])  # still the legacy era
        modern = self.peer(guard, era="modern")
        self.assertEqual(modern.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {}})["error"],
                         {"code": -32600, "message": "Invalid request"})
        modern.send({"jsonrpc": "2.0", "id": "plain", "method": "initialize",  # a legacy client's own: no _meta
                     "params": {"protocolVersion": "2025-06-18", "capabilities": {}}})
        self.assertEqual(modern.wait("plain")["error"], {"code": -32600, "message": "Invalid request"})
        self.assertEqual(modern.request("server/discover")["result"],
                         {"supportedVersions": ["2026-07-28"], "capabilities": {"tools": {"listChanged": True}},
                          "instructions": gd.INSTRUCTIONS, "resultType": "complete",
                          "_meta": {"io.modelcontextprotocol/serverInfo": dict(gd.SERVER_INFO)}})
        self.assertEqual(modern.request("tools/list")["result"]["resultType"], "complete")

    def test_sigterm_stops_the_guard_as_the_end_of_input_does_and_each_answer_is_in_the_log_first(self):
        # A server deaf to the end of its input and to SIGTERM: the guard must kill it before it leaves.
        host = self.folder.host([self.fault_server("stubborn")])
        log = self.folder.path / "audit.jsonl"
        child = self.started_guard(host, log)
        server = children_of(child.pid)
        self.assertEqual(len(server), 1)
        self.addCleanup(kill_if_running, server[0])
        for message in ({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                         "params": {"protocolVersion": "2025-06-18", "capabilities": {}}},
                        {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                         "params": {"name": "orders_ping_tool", "arguments": {}}}):
            child.stdin.write(json.dumps(message).encode() + b"\n")
            child.stdin.flush()
            answer = json.loads(child.stdout.readline())
        self.assertEqual(body(answer["result"])[0]["status"], "ok")
        # answered, so on disk: the read's package, its chain still open
        self.assertEqual(td.verify_audit_log(log.read_bytes(), closed=False).entries, 1)
        child.send_signal(signal.SIGTERM)
        child.wait(timeout=WAIT)  # its input still open: SIGTERM alone stopped it
        out, err = child.communicate(timeout=WAIT)
        self.assertEqual((child.returncode, out), (0, b""))
        self.assertNotIn(b"Traceback", err)
        self.assertEqual(td.verify_audit_log(log.read_bytes()).entries, 1)  # closed
        self.assertTrue(process_ended(server[0]))  # stopped and reaped before the guard left

    def test_a_stop_waits_for_each_call_but_not_for_a_client_that_stopped_reading(self):
        # The client stopped reading: a write to it never returns, here the call's answer or the
        # question a write asks. Once the input ends (as SIGTERM ends it), the guard waits for the
        # call, but not past ANSWER_GRACE_S of a stuck write, and says a line was left unwritten.
        class Unread(io.RawIOBase):
            def __init__(self, stuck_on, for_s=None):
                super().__init__()
                self.stuck_on, self.for_s, self.stuck = stuck_on, for_s, threading.Event()
                self.lines = []

            def writable(self):
                return True

            def write(self, data):
                if self.stuck_on in bytes(data):  # the pipe is full from here on (for_s: a slow reader's)
                    self.stuck.set()
                    threading.Event().wait(self.for_s)
                self.lines.append(bytes(data))
                return len(data)

        class Input(io.BytesIO):  # the client's lines, and its stream's end once the guard is stuck
            def __init__(self, data, end_after):
                super().__init__(data)
                self.end_after = end_after

            def readline(self, size=-1):
                line = super().readline(size)
                if not line:
                    self.end_after.wait(WAIT)
                return line

        guard = self.guard([self.demo_server()])
        hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                 "params": {"protocolVersion": "2025-06-18", "capabilities": {"elicitation": {}}}}
        read = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                "params": {"name": "notes_read_note", "arguments": {"name": "a"}}}
        write = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                 "params": {"name": "notes_write_note", "arguments": {"name": "a", "text": "b"}}}
        for call, writer, grace in ((read, io.BytesIO(), 0.05), (read, Unread(b'"content"'), 0.05),
                                    (write, Unread(b'"elicitation/create"'), 0.05),
                                    (read, Unread(b'"content"', for_s=0.3), gd.ANSWER_GRACE_S)):  # slow, yet read
            undelivered = type(writer) is Unread and writer.for_s is None
            with self.subTest(call=call["params"]["name"], undelivered=undelivered, grace=grace), \
                    mock.patch.object(gd, "ANSWER_GRACE_S", grace):
                reader = Input(b"".join(json.dumps(line).encode() + b"\n" for line in (hello, call)),
                               writer.stuck if type(writer) is Unread else threading.Event())
                if type(writer) is not Unread:
                    reader.end_after.set()
                connection = gd.GuardConnection(guard, reader, writer)
                serving = threading.Thread(target=connection.serve, daemon=True)
                serving.start()
                serving.join(WAIT)
                self.assertFalse(serving.is_alive())
                self.assertEqual(connection.undelivered, undelivered)
                if type(writer) is Unread:
                    self.assertTrue(writer.stuck.is_set())
                lines = writer.getvalue().splitlines() if type(writer) is io.BytesIO else writer.lines
                if not undelivered:  # every answer written, the slow reader's too
                    self.assertEqual([json.loads(line)["id"] for line in lines], [1, 2])
        self.assertEqual(self.note_revisions(), {})  # the write asked, nobody answered: nothing written

    @unittest.skipUnless(sys.platform.startswith("linux"), "a pipe's size set and read: Linux")
    def test_sigterm_stops_a_guard_whose_client_stopped_reading(self):
        # A call's answer larger than the pipe to a client that reads no more: its write waits for
        # ever. SIGTERM still ends the guard (the stop gives up on that write after
        # ANSWER_GRACE_S), exit 0, its server stopped, its audit log closed.
        import fcntl
        import termios
        self.notes.mkdir(exist_ok=True)
        (self.notes / "notes.json").write_text(json.dumps(  # a note of 1,000 characters, 6 bytes each as sent
            {"format": "demo-notes-v1", "notes": {"long": {"text": "\u00e9" * 1000, "revision": 1}}, "writes": {}}))
        log = self.folder.path / "audit.jsonl"
        child = self.started_guard(self.folder.host([self.demo_server()]), log)
        fcntl.fcntl(child.stdout.fileno(), fcntl.F_SETPIPE_SZ, 4096)  # the smallest pipe: one page
        server = children_of(child.pid)
        for pid in server:
            self.addCleanup(kill_if_running, pid)
        child.stdin.write(b'{"jsonrpc": "2.0", "id": 1, "method": "initialize", '
                          b'"params": {"protocolVersion": "2025-06-18", "capabilities": {}}}\n')
        child.stdin.flush()
        self.assertEqual(json.loads(child.stdout.readline())["id"], 1)
        child.stdin.write(b'{"jsonrpc": "2.0", "id": 2, "method": "tools/call", '
                          b'"params": {"name": "notes_read_note", "arguments": {"name": "long"}}}\n')
        child.stdin.flush()

        def unread():
            return int.from_bytes(fcntl.ioctl(child.stdout.fileno(), termios.FIONREAD, b"\0" * 4), sys.byteorder)
        self.assertTrue(eventually(lambda: unread() >= 4096), "the answer never filled the pipe")
        child.send_signal(signal.SIGTERM)
        child.wait(timeout=WAIT)
        _out, err = child.communicate(timeout=WAIT)
        self.assertEqual(child.returncode, 0)
        self.assertNotIn(b"Traceback", err)
        self.assertTrue(all(process_ended(pid) for pid in server))
        self.assertEqual(td.verify_audit_log(log.read_bytes()).entries, 1)  # the read's entry, the log closed

    def started_guard(self, host, log):
        """The guard by its command line with an audit log, once it reported that it started."""
        child = subprocess.Popen([*PYTHON, str(HERE / "mcp_bridge.py"), "guard", "--host", str(host),
                                  "--audit-log", str(log)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.addCleanup(child.kill)
        self.assertEqual(json.loads(child.stderr.readline())["event"], "started")
        return child

    def guard_waiting_on_its_approval_command(self):
        """The guard by its command line, its one write waiting on the host's approval command,
        which never answers (NEVER_ANSWERS): the child, the ids of the command and of its own
        child, and the audit log's path."""
        script = self.folder.path / "never_answers.py"
        script.write_text(NEVER_ANSWERS, encoding="utf-8")
        pids = self.folder.path / "approver.pids"
        host = self.folder.host([self.fault_server()],
                                approval={"approver": "alice-at-client", "command": [*PYTHON, str(script), str(pids)],
                                          "timeout": gd.MAX_APPROVAL_TIMEOUT},
                                retry_window=gd.MAX_APPROVAL_TIMEOUT + gd.DEFAULT_CALL_TIMEOUT + 1)
        log = self.folder.path / "audit.jsonl"
        child = self.started_guard(host, log)
        for server in children_of(child.pid):
            self.addCleanup(kill_if_running, server)
        for message in ({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                         "params": {"protocolVersion": "2025-06-18", "capabilities": {}}},
                        {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                         "params": {"name": "orders_refund", "arguments": {"amount": 2.5}}}):
            child.stdin.write(json.dumps(message).encode() + b"\n")
            child.stdin.flush()
        self.assertEqual(json.loads(child.stdout.readline())["id"], 1)
        self.assertTrue(eventually(pids.exists), "the approval command never started")
        approver = [int(pid) for pid in pids.read_text(encoding="utf-8").split()]
        for pid in approver:
            self.addCleanup(kill_if_running, pid)
        return child, approver, log

    def assert_stopped_unanswered(self, child, approver, log):
        """The guard left with exit 0 and nothing of its approval command behind; the write was
        answered as nobody answered it, and reached no server; the log holds its first try."""
        out, err = child.communicate(timeout=WAIT)
        self.assertEqual(child.returncode, 0)
        for pid in approver:  # the command and its own child, killed with their group
            self.assertTrue(eventually(functools.partial(process_ended, pid)), f"process {pid} left running")
        self.assertEqual(self.server_calls(), [])
        answers = [json.loads(line) for line in out.splitlines()]
        self.assertEqual([answer["id"] for answer in answers], [2])
        self.assertEqual(code_of(answers[0]["result"]), "GUARD_APPROVAL_UNANSWERED")
        self.assertEqual([json.loads(line) for line in err.splitlines()],
                         [{"code": "APPROVAL_REQUIRED", "event": "call", "status": "error", "tool": "orders_refund"},
                          {"answer": "none", "event": "approval", "tool": "orders_refund"},
                          {"code": "GUARD_APPROVAL_UNANSWERED", "event": "refused", "tool": "orders_refund"}])
        self.assertEqual(td.verify_audit_log(log.read_bytes()).entries, 1)  # closed
        entry = json.loads(log.read_bytes().splitlines()[0])
        self.assertEqual(entry["package"]["model_result"]["error"]["code"], "APPROVAL_REQUIRED")

    def test_sigterm_kills_an_approval_command_still_running_and_the_write_never_runs(self):
        child, approver, log = self.guard_waiting_on_its_approval_command()
        child.send_signal(signal.SIGTERM)
        child.wait(timeout=WAIT)  # its input still open: SIGTERM alone stopped it
        self.assert_stopped_unanswered(child, approver, log)

    def test_the_end_of_input_kills_an_approval_command_still_running_and_the_write_never_runs(self):
        child, approver, log = self.guard_waiting_on_its_approval_command()
        self.assert_stopped_unanswered(child, approver, log)  # communicate() closes the guard's input first

    def test_the_command_line_refuses_a_bad_start_in_its_one_failure_shape_on_stderr(self):
        host = self.folder.host([self.demo_server()])
        (self.folder.path / "exists.jsonl").write_bytes(b"")
        cases = ((["--host", str(self.folder.path / "missing.json")], "GUARD_HOST_UNREADABLE"),
                 (["--host", str(host), "--contracts", "x.json"], "GUARD_USAGE"),
                 (["--host", str(host), "--bogus", "1"], "GUARD_USAGE"),
                 (["--host", str(host), "--env", "HOME"], "GUARD_USAGE"),  # --env names a command line server's
                 (["--host", str(host), "--contracts", "x.json", "--env", "A=B", "--", "x"], "GUARD_USAGE"),
                 (["--host", str(host), "--contracts", "x.json", "--env", "A", "--env", "A", "--", "x"], "GUARD_USAGE"),
                 (["--host", str(host), "--audit-log", str(self.folder.path / "exists.jsonl")], "AUDIT_LOG_EXISTS"),
                 # no such folder: the guard never serves without the log it was told to keep
                 (["--host", str(host), "--audit-log", str(self.folder.path / "none" / "audit.jsonl")],
                  "AUDIT_LOG_UNREADABLE"))
        for argv, code in cases:
            with self.subTest(code=code):
                done = subprocess.run([*PYTHON, str(HERE / "mcp_bridge.py"), "guard", *argv], input=b"",
                                      capture_output=True, timeout=WAIT, check=False)
                self.assertEqual((done.returncode, done.stdout), (2, b""))
                failure = json.loads(done.stderr)
                self.assertEqual((failure["passed"], failure["error"]["code"]), (False, code))
                self.assertNotIn(str(self.folder.path), done.stderr.decode())
                self.assertNotIn("Traceback", done.stderr.decode())

    def test_an_approval_command_finished_is_reaped_with_its_pipes_closed(self):
        commands = gd.ApprovalCommands()
        process = commands.start([sys.executable, "-B", "-S", "-c", "pass"])
        commands.finish(process)
        self.assertIsNotNone(process.returncode)  # reaped (killed with its group, or exited first)
        self.assertEqual([stream.closed for stream in (process.stdin, process.stdout, process.stderr)], [True] * 3)

    def test_in_process_the_command_answers_its_exit_status(self):
        for number in (signal.SIGINT, signal.SIGTERM):  # main() takes both over in the main thread
            self.addCleanup(signal.signal, number, signal.getsignal(number))
        errors = io.StringIO()
        self.assertEqual(gd.main(["--help"], stderr=errors), 0)
        self.assertEqual(errors.getvalue(), gd.USAGE)
        host = self.folder.host([self.demo_server()])
        errors, out = io.StringIO(), io.BytesIO()
        self.assertEqual(gd.main(["--host", str(host)], stdin=io.BytesIO(b""), stdout=out, stderr=errors), 0)
        self.assertEqual((out.getvalue(), json.loads(errors.getvalue().splitlines()[0])["event"]), (b"", "started"))
        errors = io.StringIO()
        with mock.patch.object(gd, "load_host", side_effect=RuntimeError("/secret/path")):
            self.assertEqual(gd.main(["--host", str(host)], stdin=io.BytesIO(b""), stdout=out, stderr=errors), 2)
        self.assertEqual(json.loads(errors.getvalue()),
                         {"passed": False, "error": td.BoundaryError("INTERNAL_ERROR").to_json()})
        with mock.patch.object(gd, "serve", side_effect=gd._Stopped):  # SIGTERM while serving
            self.assertEqual(gd.main(["--host", str(host)], stdin=io.BytesIO(b""), stdout=out, stderr=io.StringIO()), 0)

    def test_ctrl_c_while_serving_is_cli_interrupted_on_stderr_and_nothing_on_stdout(self):
        host = self.folder.host([self.demo_server()])
        child = subprocess.Popen([*PYTHON, str(HERE / "mcp_bridge.py"), "guard", "--host", str(host)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.addCleanup(child.kill)
        started = json.loads(child.stderr.readline())  # serving from here on
        self.assertEqual(started["event"], "started")
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=WAIT)
        self.assertEqual((child.returncode, out), (td.EXIT_INTERRUPTED, b""))
        self.assertEqual(json.loads(err), {"passed": False, "error": td.BoundaryError("CLI_INTERRUPTED").to_json()})
        self.assertNotIn(b"Traceback", err)

    def test_a_server_gets_only_the_variables_its_host_file_names(self):
        seen = self.folder.path / "environment.json"
        server = {**self.fault_server(), "env": ["TD_TEST_PASSED", "TD_TEST_ABSENT"]}
        server["command"] = [*server["command"], "--environment", str(seen)]
        with mock.patch.dict(os.environ, {"TD_TEST_SECRET": "secret-value", "TD_TEST_PASSED": "passed-value"}):
            guard = self.guard([server])
            self.assertEqual(self.started, {"orders": {"started": True, "withheld": {}}})
            expected = {**client.server_environment(), "TD_TEST_PASSED": "passed-value"}
        self.assertEqual(json.loads(seen.read_text(encoding="utf-8")), expected)
        self.assertNotIn("TD_TEST_SECRET", expected)
        self.assertEqual(guard.host.servers[0].env, ("TD_TEST_PASSED", "TD_TEST_ABSENT"))

    def test_a_command_line_server_gets_only_the_variables_env_names(self):
        seen = self.folder.path / "environment.json"
        environment = {**os.environ, "TD_TEST_SECRET": "secret-value", "TD_TEST_PASSED": "passed-value",
                       "PYTHONDONTWRITEBYTECODE": "1"}
        done = subprocess.run([*PYTHON, str(HERE / "mcp_bridge.py"), "guard", "--host", str(self.folder.host([])),
                               "--contracts", str(self.folder.path / "fault.json"), "--env", "TD_TEST_PASSED",
                               "--", *FAULT, "--environment", str(seen)],
                              input=b"", capture_output=True, timeout=WAIT, check=False, env=environment)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(json.loads(seen.read_text(encoding="utf-8")),
                         {**client.server_environment((), environment), "TD_TEST_PASSED": "passed-value"})

    def test_one_server_from_the_command_line_keeps_its_tools_names(self):
        host = self.folder.host([])
        messages = [{"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {}},
                    {"jsonrpc": "2.0", "id": 2, "method": "tools/list",
                     "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}}]
        done = subprocess.run([*PYTHON, str(HERE / "mcp_bridge.py"), "guard", "--host", str(host),
                               "--contracts", str(self.folder.path / "notes.json"), "--", *DEMO],
                              input="".join(json.dumps(m) + "\n" for m in messages).encode(),
                              capture_output=True, timeout=WAIT, check=False)
        self.assertEqual(done.returncode, 0, done.stderr)
        tools = json.loads(done.stdout.splitlines()[1])["result"]["tools"]
        self.assertEqual([tool["name"] for tool in tools], ["read_note", "write_note", "note_write_status"])


if __name__ == "__main__":
    unittest.main()
