"""Tests of the demo MCP server (demo_server.py), spoken to through the bridge's client as any peer.

Each wire test runs in both protocol eras (2026-07-28 and the ``initialize`` handshake). The
server's own limits are probed on both sides: over the wire where a request reaches them cheaply
(a note's text, a name, a key), in process where reaching them would take a thousand writes.

Run from the repository root (any of -O, -W error, both):
    python -B -m unittest discover -s mcp_bridge -p 'test_*.py'
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import demo_server  # noqa: E402
import tool_dispatcher  # noqa: E402
from client import IDEMPOTENCY_KEY_META, RECEIPT_META, ClientError, McpClient  # noqa: E402

ERAS = ("modern", "legacy")
SHORT_DEADLINE = 0.5  # seconds: the lost answer never comes, so any deadline times out
REFUSALS = demo_server.REFUSALS


def soon(seconds: float = 10) -> float:
    """A deadline generous enough for a loaded two-core machine."""
    return time.monotonic() + seconds


# The peers run with -S: the demo server needs the standard library only.
def demo(*flags: str) -> list[str]:
    return [sys.executable, "-B", "-S", str(HERE / "demo_server.py"), *flags]


def receipt(key: str) -> str:
    """The receipt as the docstring derives it, computed here on its own: 16 hex digits of SHA-256."""
    return "nr-" + hashlib.sha256(key.encode("ascii")).hexdigest()[:16]


def both_eras(test):
    """Run a test once per protocol era, each in a subTest of its own."""
    def run(self: unittest.TestCase) -> None:
        for era in ERAS:
            with self.subTest(era=era):
                test(self, era)
    run.__name__, run.__doc__ = test.__name__, test.__doc__
    return run


class Case(unittest.TestCase):
    def serve(self, *flags: str, protocol: str = "modern") -> McpClient:
        started = McpClient.start(demo(*flags), protocol=protocol)
        self.addCleanup(started.stop)
        return started

    def call(self, server: McpClient, name: str, arguments: dict, key: str | None = None, *,
             deadline: float | None = None) -> dict:
        meta = None if key is None else {IDEMPOTENCY_KEY_META: key}
        return server.call_tool(name, arguments, meta=meta, deadline=soon() if deadline is None else deadline)

    def write(self, server: McpClient, name: str, text: str, key: str | None = None, **options) -> dict:
        return self.call(server, "write_note", {"name": name, "text": text}, key, **options)

    def read(self, server: McpClient, name: str) -> dict:
        return self.call(server, "read_note", {"name": name})

    def status(self, server: McpClient, key: str) -> dict:
        result = self.call(server, "note_write_status", {"idempotency_key": key})
        self.assertIsNot(result.get("isError"), True)
        self.assertEqual(json.loads(result["content"][0]["text"]), result["structuredContent"])
        return result["structuredContent"]

    def assertWritten(self, result: dict, name: str, revision: int, key: str | None = None) -> None:
        self.assertIsNot(result.get("isError"), True)
        self.assertEqual(result["structuredContent"], {"name": name, "revision": revision})
        self.assertEqual(json.loads(result["content"][0]["text"]), result["structuredContent"])
        self.assertEqual(result.get("_meta", {}).get(RECEIPT_META), None if key is None else receipt(key))

    def assertRefused(self, result: dict, reason: str) -> None:
        self.assertEqual(result, {"content": [{"type": "text", "text": REFUSALS[reason]}], "isError": True,
                                  **self.finished(result)})

    def assertNote(self, server: McpClient, name: str, text: str) -> None:
        result = self.read(server, name)
        self.assertIsNot(result.get("isError"), True)
        self.assertEqual((result["structuredContent"], result["content"]),
                         ({"name": name, "text": text}, [{"type": "text", "text": text}]))

    @staticmethod
    def finished(result: dict) -> dict:
        # 2026-07-28 marks a finished call's result; the older eras have no such member.
        return {"resultType": "complete"} if "resultType" in result else {}


class TestListing(Case):
    @both_eras
    def test_three_tools_whose_schemas_the_contract_language_compiles(self, era: str) -> None:
        tools = self.serve(protocol=era).list_tools(deadline=soon())
        self.assertEqual([tool["name"] for tool in tools], ["read_note", "write_note", "note_write_status"])
        self.assertEqual(tools, json.loads(json.dumps(demo_server.TOOLS)))
        for tool in tools:
            for field in ("inputSchema", "outputSchema"):
                with self.subTest(tool=tool["name"], schema=field):
                    tool_dispatcher.compile_schema(tool[field])  # a refusal raises BoundaryError

    def test_the_session_names_the_server_and_the_era(self) -> None:
        for era, version in zip(ERAS, (demo_server.MODERN, demo_server.LEGACY[0])):
            with self.subTest(era=era):
                session = self.serve(protocol=era).session
                self.assertEqual((session.era, session.protocol_version, session.server_name),
                                 (era, version, "tool-dispatcher-notes"))


class TestWritesAndReads(Case):
    @both_eras
    def test_a_written_note_reads_back(self, era: str) -> None:
        server = self.serve(protocol=era)
        self.assertWritten(self.write(server, "todo", "milk"), "todo", 1)
        self.assertNote(server, "todo", "milk")
        self.assertWritten(self.write(server, "todo", "eggs"), "todo", 2)  # unkeyed: every call writes
        self.assertNote(server, "todo", "eggs")

    @both_eras
    def test_a_keyed_write_answers_the_server_receipt(self, era: str) -> None:
        server = self.serve(protocol=era)
        self.assertWritten(self.write(server, "todo", "milk", "key-1"), "todo", 1, "key-1")
        self.assertRegex(receipt("key-1"), r"^nr-[0-9a-f]{16}$")

    @both_eras
    def test_the_same_key_replays_the_recorded_result_and_writes_nothing(self, era: str) -> None:
        server = self.serve(protocol=era)
        first = self.write(server, "todo", "milk", "key-1")
        self.assertWritten(self.write(server, "todo", "eggs"), "todo", 2)
        replayed = self.write(server, "todo", "milk", "key-1")
        self.assertEqual(replayed, first)  # the first result, receipt and all
        self.assertNote(server, "todo", "eggs")  # the replay wrote nothing over the later write
        self.assertWritten(self.write(server, "todo", "tea"), "todo", 3)  # nor moved the revision

    @both_eras
    def test_the_same_key_for_another_write_is_refused(self, era: str) -> None:
        server = self.serve(protocol=era)
        self.write(server, "todo", "milk", "key-1")
        for name, text in (("todo", "eggs"), ("other", "milk")):
            with self.subTest(name=name, text=text):
                self.assertRefused(self.write(server, name, text, "key-1"), "key_reused")
        self.assertNote(server, "todo", "milk")
        self.assertRefused(self.read(server, "other"), "missing")
        self.assertEqual(self.status(server, "key-1")["revision"], 1)

    @both_eras
    def test_a_key_that_is_no_identifier_is_refused_and_writes_nothing(self, era: str) -> None:
        server = self.serve(protocol=era)
        for key in ("", "-leading", "a b", "key\n", "k" * 65, "schl\u00fcssel", 7, True, None, ["key-1"], {}):
            with self.subTest(key=key):
                result = server.call_tool("write_note", {"name": "todo", "text": "milk"},
                                          meta={IDEMPOTENCY_KEY_META: key}, deadline=soon())
                self.assertRefused(result, "key")
        self.assertRefused(self.read(server, "todo"), "missing")

    @both_eras
    def test_a_missing_note_is_a_tool_error(self, era: str) -> None:
        self.assertRefused(self.read(self.serve(protocol=era), "nothing"), "missing")

    @both_eras
    def test_arguments_outside_the_input_schema_are_refused(self, era: str) -> None:
        server = self.serve(protocol=era)
        for tool, arguments in (("write_note", {"name": "todo"}), ("write_note", {"name": "todo", "text": 3}),
                                ("write_note", {"name": "todo", "text": "x", "extra": 1}),
                                ("write_note", {"name": "Todo", "text": "x"}),
                                ("write_note", {"name": "todo\n", "text": "x"}),
                                ("write_note", {"name": "todo", "text": "\ud800"}),
                                ("read_note", {}), ("read_note", {"name": 3}),
                                ("note_write_status", {"idempotency_key": "a b"})):
            with self.subTest(tool=tool, arguments=arguments):
                self.assertRefused(self.call(server, tool, arguments), "arguments")
        self.assertRefused(self.read(server, "todo"), "missing")

    @both_eras
    def test_an_unknown_tool_is_a_json_rpc_error(self, era: str) -> None:
        server = self.serve(protocol=era)
        with self.assertRaises(ClientError) as caught:
            self.call(server, "delete_note", {"name": "todo"})
        self.assertEqual((caught.exception.code, caught.exception.rpc_code), ("CLIENT_SERVER_ERROR", -32602))
        self.assertTrue(server.usable)


class TestWriteStatus(Case):
    @both_eras
    def test_a_keyed_write_is_found_with_its_receipt(self, era: str) -> None:
        server = self.serve(protocol=era)
        self.write(server, "todo", "milk", "key-1")
        self.write(server, "todo", "eggs", "key-2")
        self.assertEqual(self.status(server, "key-1"),
                         {"found": True, "receipt": receipt("key-1"), "name": "todo", "revision": 1})
        self.assertEqual(self.status(server, "key-2"),
                         {"found": True, "receipt": receipt("key-2"), "name": "todo", "revision": 2})

    @both_eras
    def test_an_unknown_key_is_not_found(self, era: str) -> None:
        server = self.serve(protocol=era)
        self.write(server, "todo", "milk")  # unkeyed: no record under any key
        self.write(server, "todo", "eggs", "key-1")
        self.assertRefused(self.write(server, "todo", "tea", "key-1"), "key_reused")
        for key in ("key-2", "KEY-1", "key-1x"):
            with self.subTest(key=key):
                self.assertEqual(self.status(server, key), {"found": False})

    def test_the_status_answers_follow_the_output_schema(self) -> None:
        compiled = tool_dispatcher.compile_schema(demo_server.TOOLS[2]["outputSchema"])
        server = self.serve()
        self.write(server, "todo", "milk", "key-1")
        for key in ("key-1", "key-2"):
            with self.subTest(key=key):
                compiled.check(self.status(server, key))


class TestPersistence(Case):
    @both_eras
    def test_a_restarted_server_keeps_its_notes_and_key_records(self, era: str) -> None:
        with tempfile.TemporaryDirectory() as folder:
            first = self.serve("--dir", folder, protocol=era)
            written = self.write(first, "todo", "milk", "key-1")
            self.assertWritten(self.write(first, "list", "eggs"), "list", 1)
            first.stop()
            with open(os.path.join(folder, "notes.json"), encoding="ascii") as handle:
                self.assertEqual(json.load(handle)["format"], demo_server.STORE_FORMAT)
            again = self.serve("--dir", folder, protocol=era)
            self.assertNote(again, "todo", "milk")
            self.assertNote(again, "list", "eggs")
            self.assertEqual(self.status(again, "key-1"),
                             {"found": True, "receipt": receipt("key-1"), "name": "todo", "revision": 1})
            self.assertEqual(self.write(again, "todo", "milk", "key-1"), written)
            self.assertRefused(self.write(again, "todo", "eggs", "key-1"), "key_reused")
            self.assertWritten(self.write(again, "todo", "tea"), "todo", 2)

    def test_without_a_folder_the_store_dies_with_the_process(self) -> None:
        first = self.serve()
        self.write(first, "todo", "milk", "key-1")
        first.stop()
        again = self.serve()
        self.assertRefused(self.read(again, "todo"), "missing")
        self.assertEqual(self.status(again, "key-1"), {"found": False})

    def test_one_server_at_a_time_holds_the_folder(self) -> None:
        with tempfile.TemporaryDirectory() as folder:
            holder = self.serve("--dir", folder)
            with self.assertRaises(ClientError) as caught:
                self.serve("--dir", folder)
            self.assertEqual((caught.exception.code, caught.exception.exit_status), ("CLIENT_SERVER_EXITED", 2))
            self.assertTrue(holder.usable)

    def test_a_folder_that_holds_no_note_store_is_refused_at_start(self) -> None:
        for document in ("[]", '{"format": "other"}', '{"format": "demo-notes-v1"}', "{", "\xff"):
            with self.subTest(document=document), tempfile.TemporaryDirectory() as folder:
                with open(os.path.join(folder, "notes.json"), "w", encoding="latin-1") as handle:
                    handle.write(document)
                with self.assertRaises(ClientError) as caught:
                    self.serve("--dir", folder)
                self.assertEqual((caught.exception.code, caught.exception.exit_status), ("CLIENT_SERVER_EXITED", 2))


class TestMisbehaviour(Case):
    @both_eras
    def test_the_first_write_is_performed_and_never_answered(self, era: str) -> None:
        server = self.serve("--lose-answer-once", protocol=era)
        with self.assertRaises(ClientError) as caught:
            self.write(server, "todo", "milk", "key-1", deadline=soon(SHORT_DEADLINE))
        self.assertEqual(caught.exception.code, "CLIENT_TIMEOUT")
        self.assertTrue(server.usable)  # a timed-out request is abandoned, the server kept
        self.assertEqual(self.status(server, "key-1"),
                         {"found": True, "receipt": receipt("key-1"), "name": "todo", "revision": 1})
        self.assertNote(server, "todo", "milk")
        self.assertWritten(self.write(server, "todo", "milk", "key-1"), "todo", 1, "key-1")  # once only
        self.assertWritten(self.write(server, "todo", "eggs"), "todo", 2)

    def test_an_unkeyed_first_write_is_lost_too(self) -> None:
        server = self.serve("--lose-answer-once")
        with self.assertRaises(ClientError) as caught:
            self.write(server, "todo", "milk", deadline=soon(SHORT_DEADLINE))
        self.assertEqual(caught.exception.code, "CLIENT_TIMEOUT")
        self.assertNote(server, "todo", "milk")

    @both_eras
    def test_a_crash_after_the_write_ends_the_server_before_its_answer(self, era: str) -> None:
        server = self.serve("--crash-on-write", protocol=era)
        self.crash_on_write(server)

    def crash_on_write(self, server: McpClient) -> None:
        self.assertRefused(self.read(server, "todo"), "missing")  # reads and refusals are answered
        self.assertRefused(self.write(server, "Todo", "milk", "key-1"), "arguments")
        with self.assertRaises(ClientError) as caught:
            self.write(server, "todo", "milk", "key-1")
        self.assertIn(caught.exception.code, ("CLIENT_SERVER_EXITED", "CLIENT_CLOSED"))
        if caught.exception.code == "CLIENT_SERVER_EXITED":
            self.assertEqual(caught.exception.exit_status, 1)
        self.assertFalse(server.usable)

    @both_eras
    def test_with_a_folder_the_crashed_write_is_stored(self, era: str) -> None:
        with tempfile.TemporaryDirectory() as folder:
            crashing = self.serve("--dir", folder, "--crash-on-write", protocol=era)
            self.crash_on_write(crashing)
            crashing.stop()
            again = self.serve("--dir", folder, protocol=era)
            self.assertEqual(self.status(again, "key-1"),
                             {"found": True, "receipt": receipt("key-1"), "name": "todo", "revision": 1})
            self.assertNote(again, "todo", "milk")
            self.assertWritten(self.write(again, "todo", "milk", "key-1"), "todo", 1, "key-1")


class TestLimits(Case):
    @both_eras
    def test_a_note_text_at_the_limit_passes_and_one_over_is_refused(self, era: str) -> None:
        server = self.serve(protocol=era)
        longest = "\U0001f4dd" * demo_server.MAX_TEXT_LENGTH  # code points, as the schema counts
        self.assertWritten(self.write(server, "todo", longest), "todo", 1)
        self.assertNote(server, "todo", longest)
        self.assertRefused(self.write(server, "todo", longest + "x"), "arguments")
        self.assertNote(server, "todo", longest)

    def test_the_schemas_draw_the_same_lines_as_the_server(self) -> None:
        write = tool_dispatcher.compile_schema(demo_server.TOOLS[1]["inputSchema"])
        status = tool_dispatcher.compile_schema(demo_server.TOOLS[2]["inputSchema"])
        limit = demo_server.MAX_TEXT_LENGTH
        write.check({"name": "n" * 32, "text": "x" * limit})
        status.check({"idempotency_key": "k" * 64})
        for compiled, over in ((write, {"name": "n" * 33, "text": "x"}),
                               (write, {"name": "n", "text": "x" * (limit + 1)}),
                               (status, {"idempotency_key": "k" * 65})):
            with self.subTest(over=str(over)[:40]), self.assertRaises(tool_dispatcher.BoundaryError):
                compiled.check(over)

    @both_eras
    def test_a_name_of_32_characters_passes_and_33_is_refused(self, era: str) -> None:
        server = self.serve(protocol=era)
        self.assertWritten(self.write(server, "n" * 32, "milk"), "n" * 32, 1)
        self.assertRefused(self.write(server, "n" * 33, "milk"), "arguments")

    @both_eras
    def test_a_key_of_64_characters_passes_and_65_is_refused(self, era: str) -> None:
        server = self.serve(protocol=era)
        self.assertWritten(self.write(server, "todo", "milk", "k" * 64), "todo", 1, "k" * 64)
        self.assertEqual(self.status(server, "k" * 64)["found"], True)
        self.assertRefused(self.write(server, "todo", "milk", "k" * 65), "key")
        self.assertRefused(self.call(server, "note_write_status", {"idempotency_key": "k" * 65}), "arguments")


class TestStoreLimitsInProcess(unittest.TestCase):
    """The store's bounds, reached by filling a Server's memory (no folder: nothing touches disk)."""

    def server(self) -> demo_server.Server:
        return demo_server.Server(demo_server.Store(None))

    def write(self, server: demo_server.Server, name: str, key: str | None = None) -> dict:
        meta = {} if key is None else {IDEMPOTENCY_KEY_META: key}
        return server.write_note({"name": name, "text": "x"}, meta)

    def test_notes_both_sides(self) -> None:
        server = self.server()
        server.store.notes.update({f"n{index}": {"text": "", "revision": 1}
                                   for index in range(demo_server.MAX_NOTES - 1)})
        self.assertNotIn("isError", self.write(server, "last"))
        self.assertEqual(self.write(server, "one-more"), demo_server._refused("full"))
        self.assertNotIn("isError", self.write(server, "last"))  # a note kept may still change

    def test_key_records_both_sides(self) -> None:
        server = self.server()
        server.store.writes.update({f"k{index}": {"name": "a", "revision": 1, "intent": ""}
                                    for index in range(demo_server.MAX_KEYS - 1)})
        self.assertNotIn("isError", self.write(server, "todo", "last"))
        self.assertEqual(self.write(server, "todo", "one-more"), demo_server._refused("full"))
        self.assertNotIn("one-more", server.store.writes)
        self.assertNotIn("isError", self.write(server, "todo"))  # unkeyed writes need no record

    def test_revisions_both_sides(self) -> None:
        server = self.server()
        server.store.notes["todo"] = {"text": "", "revision": demo_server.MAX_REVISION - 1}
        self.assertEqual(self.write(server, "todo")["structuredContent"]["revision"], demo_server.MAX_REVISION)
        self.assertEqual(self.write(server, "todo"), demo_server._refused("full"))
        self.assertEqual(server.store.notes["todo"]["revision"], demo_server.MAX_REVISION)

    def test_lines_both_sides(self) -> None:
        limit = demo_server.MAX_LINE_BYTES
        at_limit = b"x" * (limit - 1) + b"\n"
        over = b"y" * limit + b"\n"
        lines = list(demo_server.read_lines(io.BytesIO(at_limit + over + b"\n" + b"z\n")))
        self.assertEqual(lines, [at_limit, None, b"z\n"])  # the blank line is skipped


class TestTheWire(unittest.TestCase):
    """Raw lines, for what a well-behaved client never sends (the server reads to the end of its input)."""

    def exchange(self, *lines: object) -> list[dict]:
        data = b"".join((line if type(line) is bytes else json.dumps(line).encode()) + b"\n" for line in lines)
        done = subprocess.run(demo(), input=data, capture_output=True, timeout=30, check=True)
        return [json.loads(line) for line in done.stdout.splitlines()]

    def test_the_modern_era_refuses_a_request_without_its_protocol_version(self) -> None:
        meta = {"_meta": {demo_server.PROTOCOL_VERSION_KEY: demo_server.MODERN}}
        answers = self.exchange({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {}},
                                {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}},
                                {"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": meta})
        self.assertEqual(answers[1]["error"]["code"], -32602)
        self.assertEqual(len(answers[2]["result"]["tools"]), 3)

    def test_a_meta_that_is_no_object_refuses_the_call_before_it_runs(self) -> None:
        # Read as "no key", it would let a write the client meant to key run unkeyed.
        call = {"name": "write_note", "arguments": {"name": "todo", "text": "milk"}}
        calls = ({"jsonrpc": "2.0", "id": index, "method": "tools/call", "params": {**call, "_meta": meta}}
                 for index, meta in enumerate(([], "key-1", None)))
        read = {"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                "params": {"name": "read_note", "arguments": {"name": "todo"}}}
        answers = self.exchange(*calls, read)
        self.assertEqual([answer.get("error", {}).get("code") for answer in answers[:3]], [-32602] * 3)
        self.assertEqual(answers[3]["result"]["content"][0]["text"], REFUSALS["missing"])

    def test_malformed_lines_are_answered_with_errors(self) -> None:
        answers = self.exchange(b"{", b'{"jsonrpc": "2.0", "id": 1, "id": 2, "method": "ping"}', b"NaN",
                                {"jsonrpc": "2.0", "id": 4, "method": "nothing"}, [1],
                                {"jsonrpc": "2.0", "id": 5, "method": "ping", "params": []},
                                {"jsonrpc": "2.0", "method": "notifications/initialized"},
                                {"jsonrpc": "2.0", "id": 6, "method": "ping"})
        self.assertEqual([(answer["id"], answer.get("error", {}).get("code")) for answer in answers],
                         [(None, -32700), (None, -32700), (None, -32700), (4, -32601), (None, -32600), (5, -32602),
                          (6, None)])


if __name__ == "__main__":
    unittest.main()
