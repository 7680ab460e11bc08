"""Tests of the MCP bridge's import, driven against the standard-library fault server.

Run from the repository root (any of -O, -W error, both):
    python -B -m unittest discover -s mcp_bridge -p 'test_*.py'
"""
from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from unittest import mock
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import census  # noqa: E402
import client  # noqa: E402
import fault_server  # noqa: E402
import importer  # noqa: E402
import tool_dispatcher  # noqa: E402

SERVER = str(HERE / "fault_server.py")
CLI = str(HERE / "mcp_bridge.py")
# The exit grace in the tests whose server never leaves on its own, so they wait for it: what they
# prove (the kill, the deadline, the bound) holds for any grace, and the suite runs in CI 12 times.
SHORT_GRACE = 0.25


def process_ended(pid):
    """Whether a process has ended: gone, or killed and not yet reaped. Its new parent is PID 1,
    which reaps when it will (in a container, late or never), so a zombie counts as ended."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except OSError:
        return False  # no /proc (not Linux): only its disappearance counts


# The test peers run with -S: they need the standard library only, and a site directory's .pth
# files cost most of an interpreter's start on these machines (the suite starts about a hundred).
def command(fault="none"):
    return [sys.executable, "-B", "-S", SERVER, "--fault", fault]


class Case(unittest.TestCase):
    def imported(self, fault="none", **options):
        return importer.import_server(command(fault), **options)

    def fails(self, fault, code, **options):
        with self.assertRaises(tool_dispatcher.CatalogError) as caught:
            self.imported(fault, **options)
        self.assertEqual(caught.exception.code, code)
        self.assertNotIn("SECRET", json.dumps(caught.exception.to_json()))
        return caught.exception

    def fails_in_time(self, fault, code, seconds, **options):
        """The import's failure within `seconds`, run in a thread so that a hang fails the test."""
        outcome = []

        def run():
            try:
                self.imported(fault, **options)
            except tool_dispatcher.CatalogError as error:
                outcome.append(error.code)

        worker = threading.Thread(target=run, daemon=True)
        worker.start()
        worker.join(seconds)
        self.assertEqual((outcome, worker.is_alive()), ([code], False))


class TestHandshakeAndListing(Case):
    def test_modern_listing_over_two_pages(self):
        document, report = self.imported()
        self.assertEqual(report["server"], {"name": "fault-server", "version": "0.1", "era": "modern",
                                            "protocol_version": "2026-07-28"})
        self.assertEqual(report["tool_count"], 4)
        self.assertEqual([tool["name"] for tool in document["tools"]], ["get_order", "ping_tool"])
        self.assertEqual(report["refused"], [
            {"index": 2, "tool": "refund", "code": "SCHEMA_NUMBER", "at": "tools[2].inputSchema.properties[0]"},
            {"index": 3, "tool": None, "code": "TOOL_NAME_INVALID", "at": "tools[3].name"},
        ])
        self.assertEqual(report["codes"], {"SCHEMA_NUMBER": 1, "TOOL_NAME_INVALID": 1})

    def test_legacy_handshake_forced_and_by_fallback(self):
        for fault, protocol in (("none", "legacy"), ("legacy_only", "auto")):
            with self.subTest(fault=fault, protocol=protocol):
                document, report = self.imported(fault, protocol=protocol)
                self.assertEqual((report["server"]["era"], report["server"]["protocol_version"]),
                                 ("legacy", "2025-11-25"))
                self.assertEqual(len(document["tools"]), 2)

    def test_modern_only_does_not_fall_back(self):
        self.fails("legacy_only", "IMPORT_SERVER_ERROR", protocol="modern")

    def test_protocol_versions_refused(self):
        self.fails("bad_version", "IMPORT_PROTOCOL_VERSION")
        self.fails("legacy_bad_version", "IMPORT_PROTOCOL_VERSION")

    def test_notifications_and_server_requests_are_read_past(self):
        document, _ = self.imported("chatty")
        self.assertEqual(len(document["tools"]), 2)

    def test_garbage_duplicate_keys_and_wrong_ids(self):
        self.fails("garbage", "JSON_INVALID")
        self.fails("duplicate_keys", "JSON_DUPLICATE_KEY")
        self.fails("wrong_id", "IMPORT_PROTOCOL")

    def test_huge_line_refused_before_decoding(self):
        self.fails("huge_line", "IMPORT_LINE_TOO_LONG")

    def test_message_flood_refused(self):
        self.fails("flood", "IMPORT_TOO_MANY_MESSAGES")

    def test_a_malformed_error_is_no_reason_to_fall_back(self):
        # server/discover answered with an error whose code is a string: --protocol auto took it
        # for "unknown method" and imported the tools over the legacy handshake.
        self.fails("malformed_error", "IMPORT_PROTOCOL")

    def test_a_server_without_the_tools_capability(self):
        # initialize declared no tools, and tools/list answered all the same: imported.
        self.fails("no_tools_capability", "IMPORT_NO_TOOLS", protocol="legacy")

    def test_server_error_text_is_never_echoed(self):
        self.fails("tools_error", "IMPORT_SERVER_ERROR")

    def test_listing_that_changes_between_readings(self):
        self.fails("changing", "IMPORT_LISTING_CHANGED")

    def test_pagination_loop_and_duplicate_tools(self):
        self.fails("cursor_loop", "IMPORT_PAGINATION")
        self.fails("duplicate_tool", "IMPORT_DUPLICATE_TOOL")

    def test_silent_server_times_out(self):
        start = time.monotonic()
        self.fails("silent", "IMPORT_TIMEOUT", timeout=1)
        self.assertLess(time.monotonic() - start, 1 + importer.EXIT_GRACE + 1)

    @mock.patch.object(importer, "EXIT_GRACE", SHORT_GRACE)
    def test_a_server_that_stops_reading_meets_the_deadline(self):
        # 250 pings whose answers exceed a pipe's buffer, then the server never reads again: the
        # import waited in its write for ever, past any deadline.
        self.fails_in_time("deaf", "IMPORT_TIMEOUT", 1 + importer.EXIT_GRACE + 2, timeout=1)

    @mock.patch.object(importer, "EXIT_GRACE", SHORT_GRACE)
    def test_a_server_request_with_a_huge_id_is_refused(self):
        # Its answer echoed 900,000 characters into a server that does not read: a hang.
        self.fails_in_time("long_ping_id", "IMPORT_PROTOCOL", 1 + importer.EXIT_GRACE + 2, timeout=1)

    @mock.patch.object(importer, "EXIT_GRACE", SHORT_GRACE)
    @mock.patch.object(importer, "TERM_GRACE", SHORT_GRACE)
    def test_endless_output_that_ignores_the_shutdown(self):
        processes, real_spawn = [], client.spawn

        def spawn(command):
            processes.append(real_spawn(command))
            return processes[-1]

        start = time.monotonic()
        with mock.patch.object(client, "spawn", spawn):
            self.fails("endless", "IMPORT_LINE_TOO_LONG", timeout=5)
        self.assertLess(time.monotonic() - start, importer.EXIT_GRACE + 3)
        self.assertEqual(processes[0].returncode, -9)  # killed and reaped: no zombie

    def test_a_server_that_leaves_a_child_holding_its_output(self):
        # The server exits at its first request and its child keeps the pipe open: the import
        # waited for the whole deadline (IMPORT_TIMEOUT) and left the child running.
        self.fails_in_time("orphan_exits", "IMPORT_CLOSED", 4, timeout=15)

    def test_a_servers_children_end_with_the_import(self):
        # A child that inherits the server's output lingers 30 s: it held the import 2 s past the
        # server's exit (the reader's grace) and kept running after it.
        start = time.monotonic()
        _, report = self.imported("orphan", protocol="modern")
        self.assertLess(time.monotonic() - start, importer.EXIT_GRACE)
        child = int(report["server"]["version"])
        for _ in range(100):
            if process_ended(child):
                break
            time.sleep(0.05)
        else:
            self.fail("the server's child outlived the import")

    def test_a_server_that_crashes_at_start_exited(self):
        # It wrote why on its stderr and exited 3 before reading (or with a traceback, at its
        # first request): the output's end was reported as IMPORT_CLOSED, as if it had hung up.
        for fault in ("crash_at_start", "crash_at_handshake"):
            with self.subTest(fault=fault):
                error = self.fails(fault, "IMPORT_SERVER_EXITED")
                self.assertEqual(error.to_json(), importer.ImportFailure("IMPORT_SERVER_EXITED").to_json())

    def test_closed_server_and_missing_command(self):
        self.fails("closes", "IMPORT_CLOSED")
        with self.assertRaises(importer.ImportFailure) as caught:
            importer.import_server([os.path.join(tempfile.gettempdir(), "no-such-server-binary")])
        self.assertEqual(caught.exception.code, "IMPORT_SPAWN")

    def test_floats_refuse_one_tool_not_the_listing(self):
        document, report = self.imported("float_bound")
        self.assertEqual([tool["name"] for tool in document["tools"]], ["u"])
        self.assertEqual(report["refused"][0], {"index": 0, "tool": "t", "code": "SCHEMA_BOUNDS",
                                                "at": "tools[0].inputSchema.properties[0].minimum"})


class FakeServer:
    """Answers each list_tools with the next scripted listing."""

    def __init__(self, *listings):
        self.listings = list(listings)

    def list_tools(self, *, deadline):
        return self.listings.pop(0)


class TestListing(unittest.TestCase):
    def test_stable_listing(self):
        same = [{"name": "a"}]
        self.assertEqual(importer.stable_listing(FakeServer(same, same), deadline=0), [{"name": "a"}])
        with self.assertRaises(importer.ImportFailure) as caught:
            importer.stable_listing(FakeServer(same, [{"name": "a", "description": "now"}]), deadline=0)
        self.assertEqual(caught.exception.code, "IMPORT_LISTING_CHANGED")

    def test_the_clients_failures_keep_the_imports_codes(self):
        # The channel, the handshake and the listing moved into the client (test_client.py pins
        # their CLIENT_* codes); the import answers each with the code it always had.
        self.assertEqual(set(importer.IMPORT_CODES) | {"CLIENT_JSON", "CLIENT_BUSY", "CLIENT_BROKEN",
                                                       "CLIENT_REQUEST_INVALID"}, set(client.CLIENT_CATALOG))
        for client_code, import_code in importer.IMPORT_CODES.items():
            with self.subTest(code=client_code):
                failure = importer.import_failure(client.ClientError(client_code, rpc_code=3, exit_status=1))
                self.assertEqual((type(failure), failure.to_json()), (importer.ImportFailure,
                                                                      importer.ImportFailure(import_code).to_json()))
        decoder = tool_dispatcher.BoundaryError("JSON_DUPLICATE_KEY")
        self.assertIs(importer.import_failure(client.ClientError("CLIENT_JSON", json_error=decoder)), decoder)
        busy = client.ClientError("CLIENT_BUSY")
        self.assertIs(importer.import_failure(busy), busy)


class TestCatalogs(unittest.TestCase):
    def test_the_catalogs_share_no_code_with_the_core(self):
        # Every code of every catalog the core exports, the contract language's included.
        core = {code for name in tool_dispatcher.__all__ if name.endswith("_CATALOG")
                for code in getattr(tool_dispatcher, name)}
        self.assertLessEqual({"INVALID_ARGUMENTS", "SCHEMA_TYPE", "VALUE_TYPE", "CONTRACTS_FIELDS"}, core)
        catalogs = (importer.IMPORT_CATALOG, census.CensusError.CATALOG, client.CLIENT_CATALOG)
        for index, catalog in enumerate(catalogs):
            self.assertEqual(set(catalog) & core, set())
            for other in catalogs[index + 1:]:
                self.assertEqual(set(catalog) & set(other), set())

    def test_only_a_schema_scope_refusal_is_a_refused_schema(self):
        foreign = tool_dispatcher.BoundaryError("CONTEXT_INVALID")
        with mock.patch.object(tool_dispatcher, "compile_schema", side_effect=foreign):
            for name, run in (("importer", lambda: importer._compile({}, "tools[0].inputSchema")),
                              ("census", lambda: census.refusal({}))):
                with self.subTest(module=name), self.assertRaises(tool_dispatcher.BoundaryError) as caught:
                    run()
                self.assertIs(caught.exception, foreign)


MODERN = client.Session("modern", "2026-07-28", "s", "1")


class TestDraftUnits(unittest.TestCase):
    def drafted(self, *tools):
        return importer.draft(list(tools), MODERN, importer.HostChoices())

    def test_description_limit_both_sides(self):
        limit = tool_dispatcher.MAX_DESCRIPTION_LENGTH
        document, report = self.drafted({"name": "a", "description": "d" * limit, "inputSchema": {"type": "object"}},
                                        {"name": "b", "description": "d" * (limit + 1), "inputSchema": {"type": "object"}})
        self.assertEqual([tool["name"] for tool in document["tools"]], ["a"])
        self.assertEqual(report["refused"], [{"index": 1, "tool": "b", "code": "TOOL_DESCRIPTION_TOO_LONG",
                                              "at": "tools[1].description"}])

    def test_malformed_tools(self):
        _, report = self.drafted({"name": "a", "description": 3, "inputSchema": {"type": "object"}},
                                 {"name": "b", "annotations": [], "inputSchema": {"type": "object"}},
                                 {"name": 3, "inputSchema": {}}, "tool")
        self.assertEqual([(item["tool"], item["code"], item["at"]) for item in report["refused"]], [
            ("a", "TOOL_MALFORMED", "tools[0].description"), ("b", "TOOL_MALFORMED", "tools[1].annotations"),
            (None, "TOOL_MALFORMED", "tools[2]"), (None, "TOOL_MALFORMED", "tools[3]")])

    def test_a_refused_output_schema_refuses_the_tool(self):
        document, report = self.drafted({"name": "a", "inputSchema": {"type": "object"},
                                         "outputSchema": {"type": "object", "properties": {"n": {"type": "number"}}}})
        self.assertEqual((document["tools"], report["refused"][0]["at"]), ([], "tools[0].outputSchema.properties[0]"))

    def test_names_and_versions_that_are_no_identifiers(self):
        session = importer.Session("modern", "2026-07-28", "my server", "1 0")
        document, _ = importer.draft([{"name": "a", "inputSchema": {"type": "object"}}], session, importer.HostChoices())
        tool = document["tools"][0]
        self.assertEqual((tool["producer"], tool["revisions"]["producer"], tool["provenance"]["server_name"]),
                         ("mcp-server", "unversioned", "my server"))
        tool_dispatcher.parse_contracts(importer.dump(document))

    def test_duplicate_names(self):
        with self.assertRaises(importer.ImportFailure) as caught:
            self.drafted({"name": "a", "inputSchema": {}}, {"name": "a", "inputSchema": {}})
        self.assertEqual(caught.exception.code, "IMPORT_DUPLICATE_TOOL")


class TestDrafting(Case):
    def test_draft_loads_as_a_contracts_file(self):
        document, _ = self.imported()
        loaded = tool_dispatcher.parse_contracts(importer.dump(document))
        self.assertEqual(list(loaded.tools), ["get_order", "ping_tool"])
        get_order = loaded.tools["get_order"]
        self.assertTrue(get_order.input_contract.admits({"order_ref": "ORDER-7"}))
        self.assertFalse(get_order.input_contract.admits({"order_ref": "ORDER-7", "extra": 1}))

    def test_every_tool_is_a_write_unless_the_host_says(self):
        document, report = self.imported()
        self.assertEqual({tool["effect"] for tool in document["tools"]}, {"write"})
        document, report = self.imported(host=importer.HostChoices(frozenset({"get_order", "absent"}), "orders.read"))
        self.assertEqual({tool["name"]: (tool["effect"], tool["required_role"]) for tool in document["tools"]},
                         {"get_order": ("read", "orders.read"), "ping_tool": ("write", "orders.read")})
        self.assertEqual(report["read_only_by_host"], ["get_order"])

    def test_annotations_are_kept_as_hints_only(self):
        document, _ = self.imported()
        first = document["tools"][0]
        self.assertEqual(first["hints"], {"read_only": True, "destructive": None, "idempotent": None,
                                          "open_world": None})
        self.assertEqual(first["effect"], "write")  # readOnlyHint changes nothing

    def test_provenance_and_revisions(self):
        document, _ = self.imported()
        first = document["tools"][0]
        self.assertEqual(first["provenance"]["input_schema_sha256"],
                         tool_dispatcher.canonical_sha256(fault_server.GOOD_TOOLS[0]["inputSchema"]))
        self.assertEqual(first["revisions"]["input"],
                         "input." + tool_dispatcher.canonical_sha256(first["input_schema"])[:16])
        self.assertEqual((first["producer"], first["revisions"]["producer"]), ("fault-server", "0.1"))

    def test_host_bounds_reported(self):
        _, report = self.imported()
        self.assertEqual(report["host_bounds"], [])  # get_order declares maxLength; the enum is its own bound
        document, report = self.imported("float_bound")
        self.assertEqual(report["host_bounds"], [])

    def test_hostile_schemas_each_refused_by_name(self):
        start = time.perf_counter()
        document, report = self.imported("hostile")
        self.assertLess(time.perf_counter() - start, 10)  # 0.4 s here; 2**29 expansions would never end
        codes = {item["tool"]: item["code"] for item in report["refused"]}
        self.assertEqual(codes, {
            "deep": "SCHEMA_TOO_DEEP", "wide": "SCHEMA_TOO_MANY_PROPERTIES", "recursive": "SCHEMA_REF_RECURSIVE",
            "redos": "SCHEMA_PATTERN_NESTED_QUANTIFIER", "remote": "SCHEMA_REF_REMOTE", "open": "SCHEMA_OPEN_OBJECT",
            "long_text": "TOOL_DESCRIPTION_TOO_LONG", "no_schema": "TOOL_MALFORMED"})
        self.assertEqual([tool["name"] for tool in document["tools"]], ["shared"])  # 2**29 paths, 30 rules
        self.assertEqual(len(document["tools"][0]["input_schema"]["$defs"]), 30)


class TestCommandLine(unittest.TestCase):
    def run_cli(self, *arguments):
        done = subprocess.run([sys.executable, "-B", "-W", "error", CLI, "import", *arguments], capture_output=True,
                              timeout=60)
        return done.returncode, json.loads(done.stdout), done.stderr

    def server(self, fault):
        return " ".join([f'"{sys.executable}"', "-B", "-S", f'"{SERVER}"', "--fault", fault])

    def test_exit_one_writes_draft_and_report(self):
        with tempfile.TemporaryDirectory() as folder:
            out, report = os.path.join(folder, "d.json"), os.path.join(folder, "r.json")
            status, summary, stderr = self.run_cli("--server-command", self.server("none"), "--out", out,
                                                   "--report", report, "--read-only", "get_order")
            self.assertEqual((status, stderr), (1, b""))
            self.assertEqual(summary, {"passed": False, "format": "mcp-import-report-v1", "tool_count": 4,
                                       "drafted": 2, "refused": 2,
                                       "codes": {"SCHEMA_NUMBER": 1, "TOOL_NAME_INVALID": 1}})
            loaded = tool_dispatcher.load_contracts(out)
            self.assertEqual(loaded.tools["get_order"].effect, "read")
            with open(report, encoding="ascii") as handle:
                self.assertEqual(json.load(handle)["drafted"], 2)

    def test_exit_zero_when_every_tool_drafts(self):
        with tempfile.TemporaryDirectory() as folder:
            out, report = os.path.join(folder, "d.json"), os.path.join(folder, "r.json")
            status, summary, _ = self.run_cli("--server-command", self.server("clean"), "--out", out,
                                              "--report", report, "--protocol", "modern")
            self.assertEqual((status, summary["passed"], summary["drafted"], summary["codes"]), (0, True, 2, {}))

    def test_exit_two_no_traceback_no_path_nothing_written(self):
        with tempfile.TemporaryDirectory() as folder:
            out, report = os.path.join(folder, "d.json"), os.path.join(folder, "r.json")
            for fault, code in (("garbage", "JSON_INVALID"), ("changing", "IMPORT_LISTING_CHANGED")):
                with self.subTest(fault=fault):
                    status, summary, stderr = self.run_cli("--server-command", self.server(fault), "--out", out,
                                                           "--report", report)
                    self.assertEqual((status, summary["passed"], summary["error"]["code"], stderr),
                                     (2, False, code, b""))
                    self.assertFalse(os.path.exists(out) or os.path.exists(report))
                    self.assertNotIn(folder, json.dumps(summary))
                    self.assertNotIn("SECRET", json.dumps(summary))

    def run_main(self, *arguments):
        """main() in this process: the script's own path is run_cli's (one subprocess test keeps it)."""
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = importer.main(list(arguments))
        return status, json.loads(out.getvalue()), err.getvalue().encode("utf-8")

    def test_usage_errors(self):
        self.assertEqual(self.run_cli()[0::2], (2, b""))  # the script itself, once
        for arguments in ((), ("--server-command", "x", "--out", "a"), ("--out", "a", "--report", "b"),
                          ("--server-command", "'", "--out", "a", "--report", "b"),
                          ("--server-command", "", "--out", "a", "--report", "b"),
                          ("--server-command", "x", "--out", "a", "--report", "b", "--timeout", "0"),
                          ("--server-command", "x", "--out", "a", "--report", "b", "--role", "bad role")):
            with self.subTest(arguments=arguments):
                status, summary, stderr = self.run_main(*arguments)
                self.assertEqual((status, summary["error"]["code"], stderr), (2, "CLI_USAGE", b""))

    def test_the_entry_point_reads_a_verb_first(self):
        # Loaded from its file in this process (a module named like its folder would be the package).
        spec = importlib.util.spec_from_file_location("mcp_bridge_entry", CLI)
        entry = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(entry)
        self.assertEqual(sorted(entry.VERBS), ["import"])
        for arguments in ((), ("export",), ("Import",), ("--server-command", "x", "--out", "a", "--report", "b")):
            with self.subTest(arguments=arguments), contextlib.redirect_stdout(io.StringIO()) as out:
                self.assertEqual(entry.main(list(arguments)), 2)
            self.assertEqual(json.loads(out.getvalue())["error"]["code"], "CLI_USAGE")
        with contextlib.redirect_stdout(io.StringIO()) as out:
            self.assertEqual(entry.main(["--help"]), 0)
        self.assertIn("  import ", out.getvalue())

    def test_the_draft_and_the_report_cannot_be_one_file(self):
        # The report was written over the draft: exit 1, a summary, and the draft gone.
        with tempfile.TemporaryDirectory() as folder:
            out = os.path.join(folder, "d.json")
            os.symlink(out, os.path.join(folder, "link.json"))
            for report in (out, os.path.join(folder, ".", "d.json"), os.path.join(folder, "link.json")):
                with self.subTest(report=os.path.relpath(report, folder)):
                    status, summary, stderr = self.run_cli("--server-command", self.server("none"), "--out", out,
                                                           "--report", report)
                    self.assertEqual((status, summary["error"]["code"], stderr), (2, "CLI_USAGE", b""))
                    self.assertFalse(os.path.exists(out))
        # A path no system call takes (only main()'s own argv can hold a NUL) names no file: the
        # write refuses it, as before, rather than the comparison failing unforeseen.
        with mock.patch.object(importer, "import_server", return_value=({}, {})), \
                contextlib.redirect_stdout(io.StringIO()) as out:
            self.assertEqual(importer.main(["--server-command", "x", "--out", "a\x00b", "--report", "a\x00b"]), 2)
        self.assertEqual(json.loads(out.getvalue())["error"]["code"], "IMPORT_UNWRITABLE")

    def test_unwritable_output(self):
        with tempfile.TemporaryDirectory() as folder:
            status, summary, _ = self.run_cli("--server-command", self.server("none"), "--out", folder,
                                              "--report", os.path.join(folder, "r.json"))
            self.assertEqual((status, summary["error"]["code"]), (2, "IMPORT_UNWRITABLE"))
            self.assertNotIn(folder, json.dumps(summary))


class TestInteropExpectedDrafts(unittest.TestCase):
    """The checked-in drafts of the official-SDK server (interop/run.sh compares them byte for byte)."""

    def load(self, era):
        return tool_dispatcher.load_contracts(HERE / "interop" / f"expected-draft-{era}.json")

    def test_both_eras_draft_the_same_tools(self):
        modern, legacy = self.load("modern"), self.load("legacy")
        self.assertEqual(list(modern.tools), ["get_order", "create_refund_draft", "list_orders", "set_address"])
        for name, tool in modern.tools.items():
            other = legacy.tools[name]
            self.assertEqual((tool.input_schema(), tool.provenance["protocol_version"],
                              other.provenance["protocol_version"]),
                             (other.input_schema(), "2026-07-28", "2025-11-25"))

    def test_the_sdk_servers_looseness_is_closed_in_the_draft(self):
        tools = self.load("modern").tools
        get_order, listing = tools["get_order"].input_contract, tools["list_orders"].input_contract
        self.assertTrue(get_order.admits({"order_ref": "ORDER-7"}))
        self.assertFalse(get_order.admits({"order_ref": "ORDER-7\n"}))
        self.assertFalse(get_order.admits({"order_ref": "ORDER-7", "extra": True}))
        self.assertTrue(listing.admits({}))  # optional fields stay optional; their defaults are never applied
        self.assertFalse(listing.admits({"limit": "3"}))
        self.assertFalse(listing.admits({"limit": 3.0}))
        self.assertEqual(tools["get_order"].hints["read_only"], True)
        self.assertEqual(tools["get_order"].effect, "read")  # the host's --read-only, not the hint

    def test_the_report_names_each_refusal(self):
        with open(HERE / "interop" / "expected-report-modern.json", encoding="ascii") as handle:
            report = json.load(handle)
        self.assertEqual([(item["tool"], item["code"]) for item in report["refused"]],
                         [("partial_refund", "SCHEMA_NUMBER"), ("schedule_callback", "SCHEMA_FORMAT")])


if __name__ == "__main__":
    unittest.main()
