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

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import census  # noqa: E402

GOOD = {"name": "a", "inputSchema": {"type": "object", "properties": {"x": {"type": "string"}}}}
NUMBER = {"name": "b", "inputSchema": {"type": "object", "properties": {"n": {"type": "number", "minimum": 0.5}}}}
FORMAT = {"name": "c", "inputSchema": {"type": "object", "properties": {"d": {"type": "string", "format": "date"}}},
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
            "rpc.json": {"jsonrpc": "2.0", "id": 1, "result": {"tools": [GOOD, NUMBER]}},
            "result.json": {"tools": [FORMAT, TYPED_OUT, "junk"]},
            "bare.json": [NUMBER],
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
            "tools": 6,
            "input_compiled": 2,
            "input_compiled_if_numbers_narrowed": 4,
            "output_declared": 2,
            "output_compiled": 1,
            "input_refusals": {"SCHEMA_FORMAT": 1, "SCHEMA_NUMBER": 2, "TOOL_MALFORMED": 1},
            "output_refusals": {"SCHEMA_OPEN_OBJECT": 1},
        })

    def test_number_narrowing_keeps_other_refusals(self):
        mixed = {"type": "object", "properties": {"n": {"type": ["number", "null"]},
                                                   "d": {"type": "string", "format": "date"}}}
        self.assertEqual(census.refusal(census.narrowed_numbers(mixed)), "SCHEMA_FORMAT")
        self.assertEqual(census.narrowed_numbers(mixed)["properties"]["n"], {"type": ["integer", "null"]})
        self.assertEqual(mixed["properties"]["n"], {"type": ["number", "null"]})  # the input is not changed

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
