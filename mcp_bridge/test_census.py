"""Tests of the schema census (a report, not a gate).

Run from the repository root (any of -O, -W error, both):
    python -B -m unittest discover -s mcp_bridge -p 'test_*.py'
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import tempfile
import unittest
from pathlib import Path
from unittest import mock

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import census  # noqa: E402
import tool_dispatcher  # noqa: E402

GOOD = {"name": "a", "inputSchema": {"type": "object", "properties": {"x": {"type": "string"}}}}
# A step of 0.01 has no exact double: refused (SCHEMA_NUMBER); read as an integer, it compiles.
CENTS = {"name": "b", "inputSchema": {"type": "object", "properties": {"n": {"type": "number", "minimum": 0.5,
                                                                             "multipleOf": 0.01}}}}
NUMBER = {"name": "e", "inputSchema": {"type": "object", "properties": {"n": {"type": "number", "minimum": 0.5}}},
          "outputSchema": {"type": "object", "properties": {"total": {"type": "number"}}}}
FORMAT = {"name": "c", "inputSchema": {"type": "object", "properties": {"d": {"type": "string", "format": "hostname"}}},
          "outputSchema": {"type": "object", "additionalProperties": True}}
TYPED_OUT = {"name": "d", "inputSchema": {"type": "object"}, "outputSchema": {"type": "object"}}


class TestCensus(unittest.TestCase):
    def folder(self, files):
        folder = tempfile.TemporaryDirectory()
        self.addCleanup(folder.cleanup)
        for name, data in files.items():
            with open(os.path.join(folder.name, name), "wb") as handle:
                handle.write(data if type(data) is bytes else json.dumps(data).encode("utf-8"))
        return folder.name

    def test_counts_and_histograms(self):
        folder = self.folder({
            "rpc.json": {"jsonrpc": "2.0", "id": 1, "result": {"tools": [GOOD, CENTS]}},
            "result.json": {"tools": [FORMAT, TYPED_OUT, NUMBER, "junk"]},
            "bare.json": [CENTS],
            "garbage.json": b"not json",
            "dup.json": b'{"tools": [], "tools": []}',
            "other.json": {"hello": 1},
            "ignored.txt": b"not even read",
        })
        self.assertEqual(census.census(folder), {
            "format": "mcp-schema-census-v1",
            "files": 3,
            "files_skipped": {"JSON_DUPLICATE_KEY": 1, "JSON_INVALID": 1, "NOT_A_LISTING": 1},
            "files_over_limit": 0,
            "tools": 7,
            "input_compiled": 3,
            "input_compiled_if_numbers_narrowed": 5,
            "output_declared": 3,
            "output_compiled": 2,
            "input_refusals": {"SCHEMA_FORMAT": 1, "SCHEMA_NUMBER": 2, "TOOL_MALFORMED": 1},
            "output_refusals": {"SCHEMA_OPEN_OBJECT": 1},
            "servers": [
                {"file": "bare.json", "tools": 1, "input_compiled": 0, "drafted": 0, "dispatchable": 0},
                {"file": "result.json", "tools": 4, "input_compiled": 2, "drafted": 2, "dispatchable": 2},
                {"file": "rpc.json", "tools": 2, "input_compiled": 1, "drafted": 1, "dispatchable": 1},
            ],
            "drafts_not_built": {},
            "not_dispatchable": {},
        })

    def servers(self, files):
        return census.census(self.folder(files))["servers"]

    def test_a_refused_output_is_drafted_as_text_and_dispatchable(self):
        open_out = {"name": "e", "inputSchema": {"type": "object"}, "outputSchema": {"type": "object",
                                                                                      "additionalProperties": True}}
        self.assertEqual(self.servers({"s.json": [GOOD, open_out, TYPED_OUT, CENTS]}), [
            {"file": "s.json", "tools": 4, "input_compiled": 3, "drafted": 3, "dispatchable": 3}])

    def test_what_the_import_refuses_is_not_drafted(self):
        long_text = {"name": "f", "description": "d" * 2_049, "inputSchema": {"type": "object"}}
        self.assertEqual(self.servers({"a.json": [GOOD, long_text], "b.json": [GOOD, GOOD]}), [
            {"file": "a.json", "tools": 2, "input_compiled": 2, "drafted": 1, "dispatchable": 1},
            {"file": "b.json", "tools": 2, "input_compiled": 2, "drafted": 0, "dispatchable": 0}])

    def test_the_tool_limit_both_sides(self):
        limit = tool_dispatcher.MAX_TOOLS
        many = [{"name": f"t{index}", "inputSchema": {"type": "object"}} for index in range(limit + 1)]
        self.assertEqual(self.servers({"a.json": many[:limit], "b.json": many}), [
            {"file": "a.json", "tools": limit, "input_compiled": limit, "drafted": limit, "dispatchable": limit},
            {"file": "b.json", "tools": limit + 1, "input_compiled": limit + 1, "drafted": 0, "dispatchable": 0}])

    def test_a_draft_that_does_not_build_is_built_tool_by_tool(self):
        real = tool_dispatcher.Dispatcher

        def refusing(*args, registry, **options):
            if "d" in registry:
                raise tool_dispatcher.BoundaryError("REGISTRY_INVALID")
            return real(*args, registry=registry, **options)

        folder = self.folder({"s.json": [GOOD, TYPED_OUT, FORMAT]})
        with mock.patch.object(tool_dispatcher, "Dispatcher", refusing):
            found = census.census(folder)
        self.assertEqual((found["servers"][0]["drafted"], found["servers"][0]["dispatchable"],
                          found["drafts_not_built"], found["not_dispatchable"]),
                         (2, 1, {"REGISTRY_INVALID": 1}, {"REGISTRY_INVALID": 1}))

    def test_a_large_draft_builds_whole(self):
        # 128 tools, each with a long description and 40 described properties: a listing under
        # the 1 MiB a saved message may hold, whose draft (two-space JSON, the property
        # descriptions kept as untrusted text) is larger than the listing; the contracts loader
        # reads what an import may read, so it loads whole.
        properties = {f"p{index:02d}": {"type": "string", "maxLength": 10, "description": "x" * 60}
                      for index in range(40)}
        tools = [{"name": f"t{index}", "description": "d" * 2_048, "inputSchema": {"type": "object",
                                                                                   "properties": properties}}
                 for index in range(tool_dispatcher.MAX_TOOLS)]
        found = census.census(self.folder({"big.json": tools}))
        self.assertEqual((found["servers"][0]["drafted"], found["servers"][0]["dispatchable"],
                          found["drafts_not_built"], found["not_dispatchable"]),
                         (128, 128, {}, {}))

    def test_number_narrowing_keeps_other_refusals(self):
        mixed = {"type": "object", "properties": {"n": {"type": "number", "multipleOf": 0.01},
                                                   "d": {"type": "string", "format": "hostname"}}}
        self.assertEqual(census.refusal(mixed), "SCHEMA_NUMBER")
        self.assertEqual(census.refusal(census.narrowed_numbers(mixed)), "SCHEMA_FORMAT")
        self.assertEqual(census.narrowed_numbers(mixed)["properties"]["n"], {"type": "integer"})
        self.assertEqual(mixed["properties"]["n"], {"type": "number", "multipleOf": 0.01})  # the input is not changed
        found = census.census(self.folder({"s.json": [{"name": "m", "inputSchema": mixed}]}))
        self.assertEqual((found["input_compiled"], found["input_compiled_if_numbers_narrowed"],
                          found["input_refusals"]), (0, 0, {"SCHEMA_NUMBER": 1}))

    def test_only_a_number_refused_for_its_step_is_narrowed(self):
        for step, inexact in ((0.01, True), (0.1, True), (0.3, True), (0.5, False), (0.125, False), (2, False),
                              (0, False), (-0.01, False), ("0.01", False), (True, False)):
            with self.subTest(step=step):
                self.assertEqual(census.inexact_step(step), inexact)
        kept = {"type": "object", "properties": {"a": {"type": "number", "minimum": 0.5, "maximum": 9.5},
                                                  "b": {"type": "number", "multipleOf": 0.5},
                                                  "c": {"type": "number", "multipleOf": 0.01, "minimum": 0.5,
                                                        "maximum": 10},
                                                  "d": {"type": ["null", "number"], "multipleOf": 0.1}}}
        self.assertEqual(census.narrowed_numbers(kept)["properties"], {
            "a": {"type": "number", "minimum": 0.5, "maximum": 9.5}, "b": {"type": "number", "multipleOf": 0.5},
            "c": {"type": "integer", "maximum": 10}, "d": {"type": ["null", "integer"]}})
        self.assertEqual((census.refusal(kept), census.refusal(census.narrowed_numbers(kept))), ("SCHEMA_NUMBER", None))

    def test_cli_prints_the_census_and_refuses_a_missing_folder(self):
        folder = self.folder({"bare.json": [GOOD]})
        for argv, status, key in (([folder], 0, "tools"), ([os.path.join(folder, "missing")], 2, "error")):
            with self.subTest(argv=argv):
                out = io.StringIO()
                with contextlib.redirect_stdout(out):
                    self.assertEqual(census.main(argv), status)
                self.assertIn(key, json.loads(out.getvalue()))
                self.assertNotIn(folder, out.getvalue())
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            census.main([os.path.join(folder, "missing")])
        self.assertEqual(json.loads(out.getvalue())["error"]["code"], "CENSUS_UNREADABLE")


if __name__ == "__main__":
    unittest.main()
