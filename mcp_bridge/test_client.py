"""Tests of the MCP client, one TestCase per section of client.py, against the standard-library
fault server and scripted one-line children.

Run from the repository root (any of -O, -W error, both):
    python -B -m unittest discover -s mcp_bridge -p 'test_*.py'
"""
from __future__ import annotations

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

import client  # noqa: E402
import fault_server  # noqa: E402
import tool_dispatcher  # noqa: E402
from client import ClientError, Limits, McpClient  # noqa: E402
from test_importer import process_ended  # noqa: E402

SERVER = str(HERE / "fault_server.py")
# The graces of the tests whose server never leaves on its own: what they prove (the order of the
# signals, the reaping) holds for any grace, and the suite runs in CI 12 times.
SHORT_GRACE = 0.2
SHORT_DEADLINE = 0.2  # seconds: under fault_server.SLOW, so the answer cannot beat it
KEY = client.IDEMPOTENCY_KEY_META
MODERN_META = {client.PROTOCOL_VERSION_KEY: "2026-07-28", client.CAPABILITIES_KEY: {}}


def soon(seconds=10):
    """A deadline generous enough for a loaded two-core machine."""
    return time.monotonic() + seconds


def eventually(condition, seconds=10):
    """Whether condition() holds within `seconds` (looked at every 10 ms): for what a thread or
    another process does in its own time."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


# The test peers run with -S: they need the standard library only, and a site directory's .pth
# files cost most of an interpreter's start on these machines.
def fault(name="none"):
    return [sys.executable, "-B", "-S", SERVER, "--fault", name]


def script(text):
    return [sys.executable, "-B", "-S", "-c", text]


def modern_peer(then):
    """A scripted server that reads the handshake's request, answers it (2026-07-28), then runs
    `then` (Python source; sys and os imported)."""
    return script("import os, sys\nsys.stdin.readline()\nprint('{\"jsonrpc\": \"2.0\", \"id\": 1, \"result\": "
                  "{\"supportedVersions\": [\"2026-07-28\"]}}', flush=True)\n" + then)


class Case(unittest.TestCase):
    def started(self, name="none", **options):
        started = McpClient.start(fault(name), **options)
        self.addCleanup(started.stop)
        return started

    def raises(self, code, call, *arguments, **options):
        with self.assertRaises(ClientError) as caught:
            call(*arguments, **options)
        self.assertEqual(caught.exception.code, code)
        self.assertNotIn("SECRET", json.dumps(caught.exception.to_json()))
        return caught.exception

    def echo(self, started, arguments=None, **options):
        result = started.call_tool("ping_tool", {"n": 1} if arguments is None else arguments, deadline=soon(),
                                   **options)
        self.assertEqual(json.loads(result["content"][0]["text"]), result["structuredContent"])
        return result["structuredContent"]


# ============================================================================================
# 1. Limits and constants
# ============================================================================================


class TestLimitsAndConstants(unittest.TestCase):
    def test_the_default_limits_are_the_named_constants(self):
        self.assertEqual(Limits(), Limits(line_bytes=client.MAX_LINE_BYTES, request_messages=client.MAX_MESSAGES,
                                          request_bytes=client.MAX_BYTES, total_messages=None, total_bytes=None,
                                          read_ahead_chunks=client.MAX_READ_AHEAD,
                                          stderr_tail_bytes=client.STDERR_TAIL_BYTES))

    def test_the_projects_meta_keys_are_vendor_keys(self):
        for key in (client.IDEMPOTENCY_KEY_META, client.RECEIPT_META):
            with self.subTest(key=key):
                self.assertFalse(client._is_reserved_meta_key(key))
                self.assertTrue(key.startswith("dev.tool-dispatcher/"))
        for key in (client.PROTOCOL_VERSION_KEY, "dev.mcp/x", "com.mcp.tools/x"):
            with self.subTest(key=key):
                self.assertTrue(client._is_reserved_meta_key(key))
        self.assertFalse(client._is_reserved_meta_key("progressToken"))  # no prefix: not a reserved one


# ============================================================================================
# 2. Errors
# ============================================================================================


class TestErrors(unittest.TestCase):
    def test_the_json_form_adds_integers_and_codes_never_the_servers_text(self):
        error = ClientError("CLIENT_SERVER_ERROR", rpc_code=-32000, server_message="SECRET at /home/x")
        self.assertEqual(error.to_json(), {"code": "CLIENT_SERVER_ERROR", "message": client.CLIENT_CATALOG[
            "CLIENT_SERVER_ERROR"].message, "retryable": False, "rpc_code": -32000})
        decoder = tool_dispatcher.BoundaryError("JSON_INVALID")
        self.assertEqual(ClientError("CLIENT_JSON", json_error=decoder).to_json()["json_code"], "JSON_INVALID")
        self.assertEqual(ClientError("CLIENT_SERVER_EXITED", exit_status=-9).to_json()["exit_status"], -9)
        self.assertEqual(ClientError("CLIENT_CLOSED").to_json().keys(), {"code", "message", "retryable"})

    def test_the_catalog_is_closed(self):
        with self.assertRaises(ValueError):
            ClientError("IMPORT_CLOSED")
        self.assertEqual({code for code, spec in client.CLIENT_CATALOG.items() if spec.retryable}, {"CLIENT_BUSY"})
        self.assertTrue(all(code.startswith("CLIENT_") for code in client.CLIENT_CATALOG))


# ============================================================================================
# 3. The server process
# ============================================================================================


class TestTheServerProcess(Case):
    def test_a_command_that_cannot_start(self):
        for command in ([os.path.join(tempfile.gettempdir(), "no-such-server-binary")], [], ["a\x00b"]):
            with self.subTest(command=command):
                self.raises("CLIENT_SPAWN", McpClient.start, command)

    def test_stop_closes_the_input_and_the_server_leaves(self):
        started = self.started()
        started.stop()
        self.assertEqual((started.exit_status, started.usable), (0, False))
        started.stop()  # idempotent
        self.raises("CLIENT_BROKEN", started.call_tool, "ping_tool", {}, deadline=soon())

    def test_stop_signals_a_server_that_ignores_its_input_closing(self):
        # It sleeps through the end of its input: SIGTERM, within the exit grace and a little more.
        process = client.spawn(script("import time\ntime.sleep(30)\n"))
        sleeper = McpClient(process, exit_grace=SHORT_GRACE, term_grace=5)
        sleeper.stop()
        self.assertEqual(sleeper.exit_status, -signal.SIGTERM)

    def test_stop_kills_a_server_that_ignores_sigterm_too(self):
        stubborn = self.started("stubborn", exit_grace=SHORT_GRACE, term_grace=SHORT_GRACE)
        self.assertEqual(self.echo(stubborn)["tool"], "ping_tool")
        start = time.monotonic()
        stubborn.stop()
        self.assertLess(time.monotonic() - start, 10)  # never its 30 s linger
        self.assertEqual(stubborn.exit_status, -signal.SIGKILL)

    def test_the_context_manager_stops_the_server(self):
        with McpClient.start(fault()) as started:
            self.assertTrue(started.usable)
        self.assertEqual((started.exit_status, started.usable), (0, False))

    def test_the_stderr_tail_keeps_the_last_bytes(self):
        loud = self.started("loud_stderr")
        loud.stop()  # its reader has read all there is: the tail is whole
        tail = loud.stderr_tail()
        self.assertEqual(len(tail), client.STDERR_TAIL_BYTES)
        self.assertTrue(tail.endswith(fault_server.TAIL_END + "\n"))
        self.assertNotIn("SECRET", tail)  # its first line, long gone

    def test_a_server_gets_a_minimal_environment_and_the_names_its_host_passes(self):
        # The host's own secrets stay the host's: the server sees the default names and the ones
        # named for it, each with the host's value, and nothing else of the host's environment.
        with tempfile.TemporaryDirectory() as folder, mock.patch.dict(os.environ, {
                "TD_TEST_SECRET": "secret-value", "TD_TEST_PASSED": "passed-value", "LANG": "C.UTF-8",
                "PYTHONDONTWRITEBYTECODE": "1"}):
            for names, passed in (((), {}), (("TD_TEST_PASSED", "TD_TEST_ABSENT"), {"TD_TEST_PASSED": "passed-value"})):
                with self.subTest(names=names):
                    seen = os.path.join(folder, "environment.json")
                    with McpClient.start([*fault(), "--environment", seen], env_names=names) as started:
                        self.assertEqual(started.session.era, "modern")
                    with open(seen, encoding="utf-8") as handle:
                        environment = json.load(handle)
                    defaults = {name: os.environ[name] for name in client.DEFAULT_ENVIRONMENT if name in os.environ}
                    self.assertEqual(environment, {**defaults, **passed})
                    self.assertNotIn("TD_TEST_SECRET", environment)
                    self.assertEqual((environment["LANG"], environment["PYTHONDONTWRITEBYTECODE"]), ("C.UTF-8", "1"))

    def test_the_servers_environment_both_sides_of_its_limits(self):
        source = {"PATH": "/bin", "HOME": "/home/a", "OPENAI_API_KEY": "sk-x", "GITHUB_TOKEN": "g", "TZ": "UTC",
                  "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": "/elsewhere", "FN": "() { :; }", "A_1": "a"}
        self.assertEqual(client.server_environment((), source),
                         {"PATH": "/bin", "HOME": "/home/a", "TZ": "UTC", "PYTHONDONTWRITEBYTECODE": "1"})
        self.assertEqual(client.server_environment(["A_1", "FN", "GITHUB_TOKEN"], source),
                         {"PATH": "/bin", "HOME": "/home/a", "TZ": "UTC", "PYTHONDONTWRITEBYTECODE": "1",
                          "A_1": "a", "GITHUB_TOKEN": "g"})  # a shell function's value is left out
        most = [f"V{index}" for index in range(client.MAX_ENVIRONMENT_NAMES)]
        self.assertTrue(client.is_environment_names(most))
        self.assertTrue(client.is_environment_names(("_", "a" * 128)))
        for names in (most + ["V64"], ["1A"], ["A=B"], [""], ["A B"], ["A", "A"], ["é"], ["a" * 129], [1],
                      "PATH", None):
            with self.subTest(names=names):
                self.assertFalse(client.is_environment_names(names))
                with self.assertRaises(ValueError):
                    client.server_environment(names, source)
                with self.assertRaises(ValueError):
                    McpClient.start(fault(), env_names=names)

    def test_the_stderr_tail_limit_both_sides(self):
        for written, kept in ((b"0123456789", "0123456789"), (b"0123456789A", "123456789A"),
                              (b"\xff\xfeok", "\ufffd\ufffdok")):
            with self.subTest(written=written):
                error = self.raises("CLIENT_SERVER_EXITED", McpClient.start,
                                    script(f"import os\nos.write(2, {written!r})\nraise SystemExit(1)\n"),
                                    limits=Limits(stderr_tail_bytes=10))
                self.assertEqual((error.stderr_tail, error.exit_status), (kept, 1))

    @unittest.skipUnless(hasattr(os, "killpg"), "process groups are POSIX")
    def test_the_server_leads_a_group_of_its_own_and_its_children_end_with_it(self):
        # The orphan fault starts a child that inherits the server's output and sleeps 30 s; its
        # pid is the server's version. The server leaves when its input closes; the child does not.
        started = self.started("orphan", protocol="modern")
        child = int(started.session.server_version)
        self.addCleanup(lambda: process_ended(child) or os.kill(child, signal.SIGKILL))
        self.assertEqual((os.getpgid(started._process.pid), os.getpgid(child)),
                         (started._process.pid, started._process.pid))
        started.stop()
        self.assertEqual(started.exit_status, 0)
        self.assertTrue(eventually(lambda: process_ended(child)))

    @unittest.skipUnless(hasattr(os, "killpg"), "process groups are POSIX")
    def test_stop_without_a_channel_ends_the_group_too(self):
        process = client.spawn(script("import subprocess, sys\n"
                                      "child = subprocess.Popen([sys.executable, '-S', '-c',\n"
                                      "                          'import time; time.sleep(30)'])\n"
                                      "print(child.pid, flush=True)\nsys.stdin.read()\n"))
        child = int(process.stdout.readline())
        self.addCleanup(lambda: process_ended(child) or os.kill(child, signal.SIGKILL))
        client.stop(process)
        self.assertEqual(process.returncode, 0)
        self.assertTrue(eventually(lambda: process_ended(child)))

    def test_a_host_that_never_stops_its_client_still_exits(self):
        # The client's threads are daemons: a host that forgets stop() is not held at its exit by a
        # reader waiting on the server, and the server then meets the end of its input and leaves.
        host = ("import sys\nsys.path[:0] = [%r, %r]\nimport client\n"
                "print(client.McpClient.start(%r).session.era, flush=True)\n") % (str(HERE.parent), str(HERE), fault())
        done = subprocess.run([sys.executable, "-B", "-c", host], capture_output=True, timeout=60)
        self.assertEqual((done.returncode, done.stdout), (0, b"modern\n"))

    def test_stop_is_done_once_and_joins_the_clients_threads(self):
        started = self.started()
        with mock.patch.object(client, "stop", wraps=client.stop) as stopping:
            started.stop()
            started.stop()
        self.assertEqual(stopping.call_count, 1)
        threads = (started._channel.reader, started._channel.writer, started._tail.thread)
        self.assertEqual([thread.is_alive() for thread in threads], [False, False, False])


# ============================================================================================
# 4. The bounded channel
# ============================================================================================


class TestTheBoundedChannel(unittest.TestCase):
    """The channel's limits, both sides, on a scripted child (a Python one-liner printing lines)."""

    def channel(self, lines, script_text=None, **limits):
        script_text = script_text or "import sys\nfor line in %r: sys.stdout.write(line)\nsys.stdout.flush()\n" % (
            lines,)
        process = subprocess.Popen(script(script_text), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL)
        channel = client.Channel(process, limits=Limits(**limits))
        self.addCleanup(client.stop, process, channel)
        return channel

    def refused(self, code, call, *arguments, json_code=None):
        with self.assertRaises(ClientError) as caught:
            call(*arguments, deadline=soon())
        self.assertEqual((caught.exception.code, caught.exception.to_json().get("json_code")), (code, json_code))

    def test_line_length_both_sides(self):
        self.assertEqual(self.channel(['"abcd"\n'], line_bytes=6).receive(soon()), "abcd")
        self.refused("CLIENT_LINE_TOO_LONG", self.channel(['"abcde"\n'], line_bytes=6).receive)

    def test_a_long_line_is_refused_before_its_end_arrives(self):
        self.refused("CLIENT_LINE_TOO_LONG", self.channel(['"abcdefgh'], line_bytes=6).receive)  # then no more

    def test_a_passed_deadline_stops_reading_even_with_data_waiting(self):
        with self.assertRaises(ClientError) as caught:
            self.channel(["1\n"]).receive(time.monotonic() - 1)
        self.assertEqual(caught.exception.code, "CLIENT_TIMEOUT")

    def test_answers_that_are_not_json_rpc_results(self):
        for line in ("3", '{"jsonrpc": "1.0", "id": 1, "result": {}}', '{"jsonrpc": "2.0", "id": 1, "result": []}',
                     '{"jsonrpc": "2.0", "id": 1, "result": {}, "extra": 1}', '{"jsonrpc": "2.0", "id": true}',
                     '{"jsonrpc": "2.0", "id": 2, "result": {}}', '{"jsonrpc": "2.0", "params": {}}'):
            with self.subTest(line=line):
                self.refused("CLIENT_PROTOCOL", self.channel([line + "\n"]).request, "x", {})
        self.assertEqual(self.channel(['{"jsonrpc": "2.0", "id": 1, "result": {"a": 1}}\n']).request(
            "x", {}, deadline=soon()), {"a": 1})

    def test_framing_faults_each_end_in_one_code(self):
        answer = '{"jsonrpc": "2.0", "id": 1, "result": {"n": %s}}'
        for line, code, json_code in (
                ("\ufeff" + answer % 1, "CLIENT_JSON", "JSON_INVALID"), ("[" + answer % 1 + "]", "CLIENT_PROTOCOL", None),
                (answer.replace('"id": 1', '"id": "1"') % 1, "CLIENT_PROTOCOL", None),
                (answer % "NaN", "CLIENT_JSON", "JSON_NON_FINITE"), (answer % "1e400", "CLIENT_JSON", "JSON_NON_FINITE"),
                (answer % ("9" * 40), "CLIENT_JSON", "JSON_NOT_PORTABLE"),
                (answer % '"\\udc00"', "CLIENT_JSON", "JSON_NOT_PORTABLE"),
                ('{"a": 1, "a": 2}', "CLIENT_JSON", "JSON_DUPLICATE_KEY")):
            with self.subTest(line=line[:60]):
                self.refused(code, self.channel([line + "\n"]).request, "x", {}, json_code=json_code)
        invalid = "import os\nos.write(1, b'%s\\xff}\\n')\n" % (answer % 1)[:-1]
        self.refused("CLIENT_JSON", self.channel([], invalid).request, "x", {}, json_code="JSON_NOT_UTF8")

    def test_a_message_split_at_every_byte_or_sharing_a_read(self):
        lines = '{"jsonrpc": "2.0", "method": "notifications/progress"}\r\n\n{"jsonrpc": "2.0", "id": 1, "result": {}}\n'
        bytewise = "import os, time\nfor byte in %r.encode():\n    os.write(1, bytes([byte]))\n    time.sleep(0.0005)\n" % lines
        for channel in (self.channel([lines]), self.channel([], bytewise)):
            self.assertEqual(channel.request("x", {}, deadline=soon()), {})

    def test_server_request_ids(self):
        # A request from the server is answered with its id echoed: a JSON-RPC id (an integer or a
        # bounded string), or the message is no protocol at all.
        longest = "i" * client.MAX_REQUEST_ID_LENGTH
        answer = '{"jsonrpc": "2.0", "id": 1, "result": {"a": 1}}\n'
        for request_id in (longest, "", 7, -3, 10 ** 38):
            with self.subTest(request_id=request_id):
                ping = json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "ping"}) + "\n"
                self.assertEqual(self.channel([ping, answer]).request("x", {}, deadline=soon()), {"a": 1})
        for request_id in (longest + "i", 1.5, None, True, {}, []):
            with self.subTest(request_id=request_id):
                ping = json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "ping"}) + "\n"
                self.refused("CLIENT_PROTOCOL", self.channel([ping, answer]).request, "x", {})

    def test_read_ahead_is_bounded(self):
        # A server that floods its output waits on the pipe: the reader holds at most
        # MAX_READ_AHEAD chunks nobody has asked for (it held 1.3 GB in a 2 s grace).
        channel = self.channel([], "import os\nwhile True: os.write(1, b'x' * 65536)\n", line_bytes=100)
        self.refused("CLIENT_LINE_TOO_LONG", channel.receive)
        time.sleep(0.3)
        self.assertLessEqual(channel.chunks.qsize(), client.MAX_READ_AHEAD)
        client.stop(channel.process, channel, exit_grace=SHORT_GRACE)  # the flood never leaves on its own
        # The reader waited on the full read-ahead: stop drained it, so the reader read on to the end.
        self.assertTrue(eventually(lambda: not channel.reader.is_alive()))

    def test_requests_from_the_server_are_answered(self):
        # MCP: a ping's receiver must answer it at once with an empty result; sampling, roots and
        # elicitation need capabilities never declared.
        asks = ("import json, sys\n"
                "for request_id, method in ((7, 'ping'), ('s', 'roots/list'), (8, {})):\n"
                "    print(json.dumps({'jsonrpc': '2.0', 'id': request_id, 'method': method}), flush=True)\n"
                "answers = [json.loads(sys.stdin.readline()) for _ in range(4)][1:]\n"
                "print(json.dumps({'jsonrpc': '2.0', 'id': 1, 'result': {'answers': answers}}), flush=True)\n")
        refusal = {"code": -32601, "message": "Method not found"}
        self.assertEqual(self.channel([], asks).request("x", {}, deadline=soon()), {"answers": [
            {"jsonrpc": "2.0", "id": 7, "result": {}}, {"jsonrpc": "2.0", "id": "s", "error": refusal},
            {"jsonrpc": "2.0", "id": 8, "error": refusal}]})

    def test_error_answers(self):
        # A JSON-RPC error object: an integer code, a message, perhaps data; anything else is no
        # error answer at all (and never a reason for protocol "auto" to try the other era).
        for error in ({"code": -32601, "message": "m"}, {"code": 7, "message": "m" * 100_000, "data": [1, {}]}):
            with self.subTest(error=error):
                line = json.dumps({"jsonrpc": "2.0", "id": 1, "error": error}) + "\n"
                with self.assertRaises(ClientError) as caught:
                    self.channel([line]).request("x", {}, deadline=soon())
                self.assertEqual((caught.exception.code, caught.exception.rpc_code, caught.exception.server_message),
                                 ("CLIENT_SERVER_ERROR", error["code"], error["message"][:client.MAX_ERROR_MESSAGE]))
        for error in ("boom", None, [], {}, {"code": "-32601", "message": "m"}, {"code": 1.5, "message": "m"},
                      {"code": True, "message": "m"}, {"message": "m"}, {"code": 1}, {"code": 1, "message": 3}):
            with self.subTest(error=error):
                line = json.dumps({"jsonrpc": "2.0", "id": 1, "error": error}) + "\n"
                self.refused("CLIENT_PROTOCOL", self.channel([line]).request, "x", {})

    def test_message_count_both_sides(self):
        channel = self.channel(["1\n", "\n", "2\n"], request_messages=3)
        self.assertEqual((channel.receive(soon()), channel.receive(soon())), (1, 2))
        channel = self.channel(["1\n", "\n", "2\n"], request_messages=2)
        channel.receive(soon())
        self.refused("CLIENT_TOO_MANY_MESSAGES", channel.receive)

    def test_per_request_and_total_counts_both_sides(self):
        # Two answers, each after two notifications: three lines a request, six in all.
        note = '{"jsonrpc": "2.0", "method": "notifications/message"}\n'
        lines = [note, note, '{"jsonrpc": "2.0", "id": 1, "result": {}}\n', note, note,
                 '{"jsonrpc": "2.0", "id": 2, "result": {}}\n']
        channel = self.channel(lines, request_messages=3, total_messages=6)
        self.assertEqual([channel.request(method, {}, deadline=soon()) for method in ("x", "y")], [{}, {}])
        self.refused("CLIENT_TOO_MANY_MESSAGES", self.channel(lines, request_messages=2).request, "x", {})
        channel = self.channel(lines, total_messages=5)
        channel.request("x", {}, deadline=soon())
        self.refused("CLIENT_TOO_MANY_MESSAGES", channel.request, "y", {})

    def test_total_bytes_both_sides(self):
        self.assertEqual(self.channel(["1\r\n"], request_bytes=3).receive(soon()), 1)
        self.refused("CLIENT_TOO_MUCH_DATA", self.channel(["12\r\n"], request_bytes=3).receive)
        self.refused("CLIENT_TOO_MUCH_DATA", self.channel(["12\r\n"], total_bytes=3).receive)

    def test_depth_both_sides(self):
        self.assertEqual(self.channel(["[" * 128 + "]" * 128 + "\n"]).receive(soon()), json.loads("[" * 128 + "]" * 128))
        self.refused("CLIENT_JSON", self.channel(["[" * 129 + "]" * 129 + "\n"]).receive, json_code="JSON_TOO_DEEP")

    def test_end_of_output(self):
        channel = self.channel(["1"])
        for _ in range(2):  # stays closed
            self.refused("CLIENT_CLOSED", channel.receive)

    def test_plain_json_depth_both_sides(self):
        def nested(levels):
            value = {}
            for _ in range(levels - 1):
                value = [value]
            return value

        self.assertEqual([client._is_plain_json(nested(levels), max_depth=5) for levels in (5, 6)], [True, False])
        self.assertTrue(client._is_plain_json(nested(client.MAX_MESSAGE_DEPTH)))
        self.assertIs(client._is_plain_json(nested(client.MAX_MESSAGE_DEPTH + 1)), False)
        for value in ({"a": {1: 2}}, [float("inf")], [float("nan")], {"a": (1,)}, [b"x"], object()):
            with self.subTest(value=value):
                self.assertIs(client._is_plain_json(value), False)
        self.assertIs(client._is_plain_json({"a": [1, -2.5, True, None, "\u00e9"]}), True)

    def test_a_request_that_cannot_be_sent_sends_nothing(self):
        channel = self.channel(['{"jsonrpc": "2.0", "id": 1, "result": {}}\n'], line_bytes=60)
        deep = []
        for _ in range(client.MAX_MESSAGE_DEPTH):
            deep = [deep]
        cycle = []
        cycle.append(cycle)
        for params in ({"n": float("nan")}, {"n": object()}, {1: 2}, {"t": "x" * 60}, {"n": (1,)}, {"n": deep},
                       {"n": cycle}, {"n": float("-inf")}):
            with self.subTest(params=str(params)[:20]):
                self.refused("CLIENT_REQUEST_INVALID", channel.request, "x", params)
        self.assertEqual((channel.next_id, channel.request("x", {}, deadline=soon())), (0, {}))

    def test_a_line_is_ascii_json_whatever_the_text(self):
        channel = self.channel([])
        self.assertEqual(channel.encode({"a": "caf\u00e9 \u202e\U0001f600", "b": [1.5, None]}),
                         b'{"a":"caf\\u00e9 \\u202e\\ud83d\\ude00","b":[1.5,null]}\n')

    def test_only_the_tools_announcement_marks_the_list_changed(self):
        answer = '{"jsonrpc": "2.0", "id": 1, "result": {}}\n'
        for method, changed in (("notifications/tools/list_changed", True), ("notifications/message", False),
                                ("notifications/resources/list_changed", False)):
            with self.subTest(method=method):
                channel = self.channel([json.dumps({"jsonrpc": "2.0", "method": method}) + "\n", answer])
                self.assertEqual((channel.request("x", {}, deadline=soon()), channel.tools_changed), ({}, changed))

    # A peer that writes only after it has read: what settle() finds has come in a read of its own.
    SETTLING = ("import json, sys\n"
                "def out(*messages):\n"
                "    sys.stdout.write(''.join(json.dumps(message) + '\\n' for message in messages))\n"
                "    sys.stdout.flush()\n"
                "def read():\n"
                "    return json.loads(sys.stdin.readline())\n"
                "read()\nout({'jsonrpc': '2.0', 'id': 1, 'result': {}})\n"
                "read()\nout({'jsonrpc': '2.0', 'method': 'notifications/tools/list_changed'},\n"
                "            {'jsonrpc': '2.0', 'id': 'p', 'method': 'ping'})\n"
                "pong, request = read(), read()\n"
                "out({'jsonrpc': '2.0', 'id': request['id'], 'result': {'pong': pong}})\n"
                "read()\nout({'jsonrpc': '2.0', 'id': 9, 'result': {}})\n"
                "sys.stdin.read()\n")

    def test_settle_reads_what_has_come_and_never_waits(self):
        channel = self.channel([], self.SETTLING)
        self.assertEqual(channel.request("x", {}, deadline=soon()), {})
        self.assertEqual((channel.settle(), channel.tools_changed), (None, False))  # nothing has come: no wait
        channel.notify("notifications/next")
        self.assertTrue(eventually(lambda: channel.chunks.qsize() > 0))
        channel.settle()  # the announcement noted, the ping answered
        self.assertTrue(channel.tools_changed)
        pong = {"jsonrpc": "2.0", "id": "p", "result": {}}
        self.assertEqual(channel.request("y", {}, deadline=soon()), {"pong": pong})
        channel.notify("notifications/next")
        self.assertTrue(eventually(lambda: channel.chunks.qsize() > 0))
        with self.assertRaises(ClientError) as caught:
            channel.settle()  # an answer nobody awaits
        self.assertEqual(caught.exception.code, "CLIENT_PROTOCOL")

    def test_settle_leaves_the_end_of_output_to_the_next_request(self):
        channel = self.channel(['{"jsonrpc": "2.0", "id": 1, "result": {}}\n'])
        self.assertEqual(channel.request("x", {}, deadline=soon()), {})
        self.assertTrue(eventually(lambda: channel.chunks.qsize() > 0))  # the end, read
        self.assertEqual((channel.settle(), channel.settle()), (None, None))
        self.refused("CLIENT_CLOSED", channel.request, "y", {})


# ============================================================================================
# 5. Handshake and listing
# ============================================================================================


class FakeChannel:
    """Answers each request with the next scripted result; records what was asked."""

    def __init__(self, *results):
        self.results = list(results)
        self.asked = []

    def request(self, method, params, *, deadline):
        self.asked.append((method, params))
        return self.results.pop(0)

    def notify(self, method, params=None):
        self.asked.append((method, params))


MODERN = client.Session("modern", "2026-07-28", "s", "1")
LEGACY = client.Session("legacy", "2025-11-25", None, None)


class TestHandshakeAndListing(Case):
    def listed(self, channel, session, **options):
        return client.list_tools(channel.request, session, deadline=soon(), **options)

    def test_requests_carry_meta_only_in_the_modern_era(self):
        channel = FakeChannel({"tools": [], "nextCursor": "c"}, {"tools": []})
        self.listed(channel, MODERN)
        self.assertEqual(channel.asked, [("tools/list", {"_meta": MODERN_META}),
                                         ("tools/list", {"cursor": "c", "_meta": MODERN_META})])
        channel = FakeChannel({"tools": []})
        self.listed(channel, LEGACY)
        self.assertEqual(channel.asked, [("tools/list", {})])

    def test_page_limit_both_sides(self):
        pages = [{"tools": [], "nextCursor": "a"}, {"tools": [], "nextCursor": "b"}, {"tools": []}]
        self.assertEqual(self.listed(FakeChannel(*pages), LEGACY, max_pages=3), [])
        self.raises("CLIENT_PAGINATION", self.listed, FakeChannel(*pages), LEGACY, max_pages=2)

    def test_cursor_rules(self):
        longest = "c" * client.MAX_CURSOR_LENGTH
        self.listed(FakeChannel({"tools": [], "nextCursor": longest}, {"tools": []}), LEGACY)
        for cursor in (longest + "c", "", 3):
            with self.subTest(cursor=cursor):
                self.raises("CLIENT_PAGINATION", self.listed,
                            FakeChannel({"tools": [], "nextCursor": cursor}, {"tools": []}), LEGACY)

    def test_tool_count_both_sides(self):
        tools = [{"name": f"t{i}"} for i in range(tool_dispatcher.MAX_TOOLS)]
        self.assertEqual(len(self.listed(FakeChannel({"tools": tools}), LEGACY)), tool_dispatcher.MAX_TOOLS)
        self.raises("CLIENT_TOO_MANY_TOOLS", self.listed,
                    FakeChannel({"tools": tools, "nextCursor": "x"}, {"tools": [{}]}), LEGACY)

    def test_page_shape(self):
        self.raises("CLIENT_PROTOCOL", self.listed, FakeChannel({"tools": {}}), LEGACY)
        self.raises("CLIENT_PROTOCOL", self.listed, FakeChannel({}), LEGACY)

    def test_handshake_answers(self):
        def shake(channel, protocol):
            return client.handshake(channel, protocol, deadline=soon())

        self.raises("CLIENT_PROTOCOL", shake, FakeChannel({"supportedVersions": "2026-07-28"}), "modern")
        for protocol in ("modern", "auto"):  # an answer, so "auto" tries no other era
            with self.subTest(protocol=protocol):
                channel = FakeChannel({"supportedVersions": ["2099-01-01", "2025-11-25"]})
                self.raises("CLIENT_PROTOCOL_VERSION", shake, channel, protocol)
                self.assertEqual([method for method, _ in channel.asked], ["server/discover"])
        self.raises("CLIENT_PROTOCOL", shake, FakeChannel({"protocolVersion": 3}), "legacy")
        for capabilities, code in ((None, "CLIENT_PROTOCOL"), ([], "CLIENT_PROTOCOL"), ({}, "CLIENT_NO_TOOLS"),
                                   ({"tools": True}, "CLIENT_NO_TOOLS"), ({"tools": None}, "CLIENT_NO_TOOLS")):
            with self.subTest(capabilities=capabilities):
                answer = {"protocolVersion": "2025-11-25", "capabilities": capabilities}
                self.raises(code, shake, FakeChannel({k: v for k, v in answer.items() if v is not None}), "legacy")
        channel = FakeChannel({"protocolVersion": "2024-11-05", "capabilities": {"tools": {}},
                               "serverInfo": {"name": "n" * 161, "version": "v"}})
        self.assertEqual(shake(channel, "legacy"), client.Session("legacy", "2024-11-05", None, "v"))
        self.assertEqual([method for method, _ in channel.asked], ["initialize", "notifications/initialized"])
        self.assertEqual(channel.asked[0][1]["protocolVersion"], "2025-11-25")  # the newest is offered
        self.assertEqual(shake(FakeChannel({"supportedVersions": ["2026-07-28"], "_meta": []}), "auto"),
                         client.Session("modern", "2026-07-28", None, None))

    def test_one_version_named_is_the_only_one_offered_and_accepted(self):
        channel = FakeChannel({"protocolVersion": "2025-06-18", "capabilities": {"tools": {}}})
        self.assertEqual(client.handshake(channel, "2025-06-18", deadline=soon()).protocol_version, "2025-06-18")
        self.assertEqual(channel.asked[0][1]["protocolVersion"], "2025-06-18")
        self.raises("CLIENT_PROTOCOL_VERSION", client.handshake,
                    FakeChannel({"protocolVersion": "2025-11-25", "capabilities": {"tools": {}}}), "2025-06-18",
                    deadline=soon())
        with self.assertRaises(ValueError):
            client.handshake(FakeChannel(), "2099-01-01", deadline=soon())

    def test_both_eras_with_the_fault_server(self):
        for protocol, name, era, version in (("auto", "none", "modern", "2026-07-28"),
                                             ("2026-07-28", "none", "modern", "2026-07-28"),
                                             ("auto", "legacy_only", "legacy", "2025-11-25"),
                                             ("2025-11-25", "none", "legacy", "2025-11-25")):
            with self.subTest(protocol=protocol, fault=name):
                started = self.started(name, protocol=protocol)
                self.assertEqual(started.session, client.Session(era, version, "fault-server", "0.1"))
                self.assertEqual(len(started.list_tools()), 4)  # two pages
        self.raises("CLIENT_PROTOCOL_VERSION", McpClient.start, fault(), protocol="2025-06-18")
        refused = self.raises("CLIENT_SERVER_ERROR", McpClient.start, fault("legacy_only"), protocol="modern")
        self.assertEqual((refused.method, refused.rpc_code), ("server/discover", -32601))


# ============================================================================================
# 6. The client
# ============================================================================================


class TestTheClient(Case):
    def test_call_tool_in_both_eras(self):
        # 2026-07-28: MCP's own keys in every request's _meta, beside the caller's; earlier: the
        # caller's only, and no _meta at all without them.
        modern, legacy = self.started(protocol="modern"), self.started(protocol="legacy")
        self.assertEqual(self.echo(modern, meta={KEY: "k-1"}),
                         {"tool": "ping_tool", "arguments": {"n": 1}, "meta": {KEY: "k-1", **MODERN_META},
                          "cancelled": []})
        self.assertEqual(self.echo(modern)["meta"], MODERN_META)
        self.assertEqual(self.echo(legacy, meta={KEY: "k-1"})["meta"], {KEY: "k-1"})
        self.assertEqual(self.echo(legacy, {})["meta"], None)

    def test_results_come_back_raw(self):
        self.assertEqual(self.started("call_is_error").call_tool("t", {}, deadline=soon()),
                         {"content": [{"type": "text", "text": fault_server.SECRET}], "isError": True})
        result = self.started().call_tool("t", {"x": [1.5, None]}, deadline=soon())
        self.assertEqual(result["structuredContent"]["arguments"], {"x": [1.5, None]})
        text = {"x": "caf\u00e9 \u202e\U0001f600"}  # sent as ASCII escapes, read back as the same text
        self.assertEqual(self.echo(self.started(), text)["arguments"], text)

    def test_a_json_rpc_error_is_kept_bounded_and_the_client_stays_usable(self):
        failing = self.started("call_error")
        for _ in range(2):
            error = self.raises("CLIENT_SERVER_ERROR", failing.call_tool, "t", {}, deadline=soon())
            self.assertEqual((error.rpc_code, len(error.server_message)), (-32000, client.MAX_ERROR_MESSAGE))
            self.assertTrue(error.server_message.startswith(fault_server.SECRET))  # for the host; never in to_json
        self.assertTrue(failing.usable)

    def test_a_slow_answer_times_out_and_its_late_answer_is_read_past(self):
        slow = self.started("slow_call")
        self.raises("CLIENT_TIMEOUT", slow.call_tool, "t", {"call": 1}, deadline=time.monotonic() + SHORT_DEADLINE)
        self.assertTrue(slow.usable)
        # The first answer arrives first, a second later: read past, and the second call's own answer read.
        echo = self.echo(slow, {"call": 2})
        self.assertEqual((echo["arguments"], echo["cancelled"]), ({"call": 2}, [2]))  # the handshake was id 1

    def test_a_lost_answer_times_out_the_server_is_told_and_the_client_goes_on(self):
        lost = self.started("lost_call")
        self.raises("CLIENT_TIMEOUT", lost.call_tool, "t", {}, deadline=time.monotonic() + SHORT_DEADLINE)
        self.assertEqual(self.echo(lost)["cancelled"], [2])

    def test_abandoned_requests_limit_both_sides(self):
        for limit, usable in ((1, True), (0, False)):
            with self.subTest(limit=limit), mock.patch.object(client, "MAX_ABANDONED", limit):
                lost = self.started("lost_call")
                self.raises("CLIENT_TIMEOUT", lost.call_tool, "t", {}, deadline=time.monotonic() + SHORT_DEADLINE)
                self.assertEqual(lost.usable, usable)

    def test_a_passed_deadline_sends_nothing(self):
        started = self.started()
        self.raises("CLIENT_DEADLINE_PASSED", started.call_tool, "t", {}, deadline=time.monotonic())
        self.assertEqual(self.echo(started)["cancelled"], [])  # nothing abandoned, still usable
        with self.assertRaises(ValueError):
            started.call_tool("t", {}, deadline=True)

    def test_requests_the_client_refuses_to_send(self):
        started = self.started()
        for name, arguments, meta in (("", {}, None), ("t" * 129, {}, None), ("bad name", {}, None), (3, {}, None),
                                      ("t", [], None), ("t", {"n": float("inf")}, None), ("t", {}, []),
                                      ("t", {}, {client.PROTOCOL_VERSION_KEY: "2099-01-01"}), ("t", {}, {1: 2}),
                                      ("t", {"s": "x" * client.MAX_LINE_BYTES}, None)):
            with self.subTest(name=str(name)[:10], arguments=str(arguments)[:10], meta=meta):
                self.raises("CLIENT_REQUEST_INVALID", started.call_tool, name, arguments, meta=meta, deadline=soon())
        self.assertEqual(self.echo(started, meta={"progressToken": 1})["meta"], {"progressToken": 1, **MODERN_META})
        self.assertEqual(started.call_tool("t" * 128, {}, deadline=soon())["structuredContent"]["tool"], "t" * 128)

    def test_a_protocol_fault_breaks_the_client(self):
        wrong = McpClient.start(modern_peer("sys.stdin.readline()\nprint('not json', flush=True)\nsys.stdin.read()\n"))
        self.addCleanup(wrong.stop)
        error = self.raises("CLIENT_JSON", wrong.call_tool, "t", {}, deadline=soon())
        self.assertEqual(error.to_json()["json_code"], "JSON_INVALID")
        self.assertFalse(wrong.usable)
        self.raises("CLIENT_BROKEN", wrong.list_tools)

    def test_servers_that_crash_at_start_exited(self):
        # One writes why on its stderr and exits 3 before reading; one raises at its first request.
        for name, status, words in (("crash_at_start", 3, fault_server.CRASH_MESSAGE),
                                    ("crash_at_handshake", 1, "RuntimeError: fault-server crashed")):
            with self.subTest(fault=name):
                error = self.raises("CLIENT_SERVER_EXITED", McpClient.start, fault(name))
                self.assertEqual((error.exit_status, error.to_json()["exit_status"]), (status, status))
                self.assertIn(words, error.stderr_tail)

    def test_a_server_that_exits_cleanly_closed_its_output(self):
        error = self.raises("CLIENT_CLOSED", McpClient.start, fault("closes"))
        self.assertIsNone(error.exit_status)
        self.assertIn(fault_server.SECRET, error.stderr_tail)  # kept for a person, never in the error's JSON

    def test_one_request_at_a_time(self):
        lost = self.started("lost_call")
        outcome = []

        def first():
            try:
                lost.call_tool("t", {}, deadline=soon(60))
            except ClientError as error:
                outcome.append(error.code)

        worker = threading.Thread(target=first, daemon=True)
        worker.start()
        for _ in range(1000):
            if lost._busy.locked():
                break
            time.sleep(0.01)
        self.raises("CLIENT_BUSY", lost.call_tool, "t", {}, deadline=soon())
        lost.stop()  # the first call, never answered, ends at once
        worker.join(10)
        self.assertEqual((outcome, worker.is_alive()), (["CLIENT_BROKEN"], False))

    def test_a_start_timeout_stops_the_server(self):
        start = time.monotonic()
        error = self.raises("CLIENT_TIMEOUT", McpClient.start, fault("silent"), timeout=SHORT_DEADLINE)
        self.assertLess(time.monotonic() - start, client.EXIT_GRACE + 5)
        self.assertIn(fault_server.SECRET, error.stderr_tail)
        for timeout in (0, -1, True, "5", 3601):
            with self.subTest(timeout=timeout), self.assertRaises(ValueError):
                McpClient.start(fault(), timeout=timeout)
        with mock.patch.object(client.subprocess, "Popen", side_effect=AssertionError("started")), \
                self.assertRaises(ValueError):
            McpClient.start(fault(), protocol="2099-01-01")  # refused before any server starts

    def test_an_interrupted_start_stops_the_server(self):
        original, spawned = client.spawn, []

        def spawn(*arguments, **options):
            spawned.append(original(*arguments, **options))
            return spawned[-1]

        with mock.patch.object(client, "spawn", spawn), \
                mock.patch.object(client, "handshake", side_effect=KeyboardInterrupt), \
                self.assertRaises(KeyboardInterrupt):
            McpClient.start(fault())
        self.assertEqual([process.returncode for process in spawned], [0])  # stopped: its input closed, reaped

    def test_a_client_never_started_sends_nothing(self):
        unstarted = McpClient(client.spawn(fault()))
        self.addCleanup(unstarted.stop)
        self.raises("CLIENT_BROKEN", unstarted.call_tool, "t", {}, deadline=soon())
        self.raises("CLIENT_BROKEN", unstarted.list_tools)

    def test_tools_changed_from_the_announcement_to_the_next_listing(self):
        pulled = self.started("rug_pull")
        self.assertFalse(pulled.tools_changed)
        self.echo(pulled)  # announced before the call's answer
        self.assertTrue(pulled.tools_changed)
        pulled.list_tools()
        self.assertIs(pulled.tools_changed, False)

    def test_settle_notes_an_announcement_that_came_after_an_answer(self):
        late = self.started("late_rug_pull")
        late.call_tool("t", {}, deadline=soon())
        self.assertFalse(late.tools_changed)
        late.settle()
        self.assertEqual((late.tools_changed, late.usable), (True, True))
        late._busy.acquire()  # a request in flight on another thread
        try:
            self.raises("CLIENT_BUSY", late.settle)
        finally:
            late._busy.release()
        late.stop()
        self.raises("CLIENT_BROKEN", late.settle)

    def test_a_fault_met_by_settle_breaks_the_client(self):
        garbled = McpClient.start(modern_peer("sys.stdin.readline()\nprint('not json', flush=True)\n"
                                              "sys.stdin.read()\n"))
        self.addCleanup(garbled.stop)
        garbled.settle()  # nothing has come: the client waits for nothing
        self.assertTrue(garbled.usable)
        garbled._channel.notify("notifications/next")  # the peer writes once it has read a line
        self.assertTrue(eventually(lambda: garbled._channel.chunks.qsize() > 0))
        self.raises("CLIENT_JSON", garbled.settle)
        self.assertFalse(garbled.usable)
        self.raises("CLIENT_BROKEN", garbled.settle)

    def test_a_server_that_exits_failing_mid_session(self):
        # At the call: after reading it, before answering.
        crashing = McpClient.start(modern_peer("sys.stdin.readline()\nos.write(2, b'last words')\nos._exit(4)\n"))
        self.addCleanup(crashing.stop)
        error = self.raises("CLIENT_SERVER_EXITED", crashing.call_tool, "t", {}, deadline=soon())
        self.assertEqual((error.exit_status, crashing.usable, crashing.stderr_tail()), (4, False, "last words"))
        self.raises("CLIENT_BROKEN", crashing.call_tool, "t", {}, deadline=soon())

    def test_an_interrupted_request_breaks_the_client(self):
        started = self.started()
        with mock.patch.object(started._channel, "request", side_effect=KeyboardInterrupt), \
                self.assertRaises(KeyboardInterrupt):
            started.call_tool("t", {}, deadline=soon())
        self.assertFalse(started.usable)
        self.raises("CLIENT_BROKEN", started.call_tool, "t", {}, deadline=soon())

    def test_running_while_usable_and_the_process_lives(self):
        leaving = McpClient.start(modern_peer(""))
        self.addCleanup(leaving.stop)
        self.assertTrue(eventually(lambda: leaving._process.poll() is not None))
        self.assertEqual((leaving.usable, leaving.running), (True, False))  # it left after the handshake
        started = self.started()
        self.assertIs(started.running, True)
        started.stop()
        self.assertIs(started.running, False)


if __name__ == "__main__":
    unittest.main()
