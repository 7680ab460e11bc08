"""Tests of the tool-contracts-v1 loader, and of the shipped tools re-declared in it.

Run from the repository root (any of -O, -W error, both):
    python -B -m unittest discover -s mcp_import -p 'test_*.py'
"""
from __future__ import annotations

import copy
import json
import os
import sys
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import contracts  # noqa: E402
import schema_subset as ss  # noqa: E402
import tool_dispatcher  # noqa: E402

SHIPPED = HERE / "shipped-tools.contracts.json"


def shipped_document():
    with open(SHIPPED, encoding="utf-8") as handle:
        return json.load(handle)


def encode(document):
    return json.dumps(document).encode("utf-8")


class Case(unittest.TestCase):
    def refused(self, document, code, at, error=contracts.ContractsError):
        data = document if type(document) is bytes else encode(document)
        with self.assertRaises(error) as caught:
            contracts.parse_contracts(data)
        self.assertEqual((caught.exception.code, caught.exception.at), (code, at))
        return caught.exception

    def mutated(self, change):
        document = shipped_document()
        change(document)
        return document


class TestLoading(Case):
    def test_shipped_file_loads(self):
        loaded = contracts.load_contracts(SHIPPED)
        self.assertEqual(list(loaded.tools), ["get_order", "create_refund_draft"])
        self.assertEqual(loaded.tools["create_refund_draft"].bound_fields, ("order_ref", "reason"))
        self.assertEqual(loaded.tools["get_order"].hints["read_only"], None)

    def test_unreadable_paths(self):
        with tempfile.TemporaryDirectory() as folder:
            for path in (folder, os.path.join(folder, "missing.json")):
                with self.assertRaises(contracts.ContractsError) as caught:
                    contracts.load_contracts(path)
                self.assertEqual(caught.exception.code, "CONTRACTS_UNREADABLE")
                self.assertNotIn(folder, json.dumps(caught.exception.to_json()))

    def test_byte_limit_both_sides(self):
        data = encode(shipped_document())
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "c.json")
            with open(path, "wb") as handle:
                handle.write(data)
            contracts.load_contracts(path, max_bytes=len(data))
            with self.assertRaises(tool_dispatcher.BoundaryError) as caught:
                contracts.load_contracts(path, max_bytes=len(data) - 1)
            self.assertEqual(caught.exception.code, "JSON_TOO_LARGE")

    def test_strict_decoder_codes(self):
        for data, code in ((b'{"format": 1, "format": 2}', "JSON_DUPLICATE_KEY"), (b"[" * 5000, "JSON_TOO_DEEP"),
                           (b'{"a": 1.5}', "JSON_NOT_PORTABLE"), (b'{"a": NaN}', "JSON_NON_FINITE"),
                           (b"\xff", "JSON_NOT_UTF8"), (b"{", "JSON_INVALID")):
            with self.subTest(data=data[:20]):
                with self.assertRaises(tool_dispatcher.BoundaryError) as caught:
                    contracts.parse_contracts(data)
                self.assertEqual(caught.exception.code, code)

    def test_depth_limit_both_sides(self):
        def nested(levels):
            schema = {"type": "string"}
            for _ in range(levels):
                schema = {"type": "object", "properties": {"a": schema}}
            return schema

        def with_input(schema):
            return self.mutated(lambda d: d["tools"][0].update(input_schema=schema, resource_field=None,
                                                                bound_fields=[]))

        contracts.parse_contracts(encode(with_input(nested(15))))  # the schema's own 31 containers, + 3 outside
        self.refused(with_input(nested(16)), "SCHEMA_TOO_DEEP", "tools[0].input_schema", ss.SchemaRefusal)
        with self.assertRaises(tool_dispatcher.BoundaryError) as caught:
            contracts.parse_contracts(encode(with_input(nested(17))))
        self.assertEqual(caught.exception.code, "JSON_TOO_DEEP")

    def test_root_fields_and_version(self):
        self.refused([], "CONTRACTS_VALUE", "contracts")
        self.refused({"format": "tool-contracts-v1"}, "CONTRACTS_FIELDS", "contracts")
        self.refused(self.mutated(lambda d: d.update(format="tool-contracts-v2")), "CONTRACTS_VERSION", "format")
        self.refused(self.mutated(lambda d: d.update(tools={})), "CONTRACTS_VALUE", "tools")
        self.refused(self.mutated(lambda d: d.update(tools=[])), "CONTRACTS_LIMIT", "tools")

    def test_tool_count_both_sides(self):
        def many(count):
            document = shipped_document()
            tool = document["tools"][0]
            document["tools"] = [dict(tool, name=f"t{i}") for i in range(count)]
            return document

        self.assertEqual(len(contracts.parse_contracts(encode(many(contracts.MAX_TOOLS))).tools), contracts.MAX_TOOLS)
        self.refused(many(contracts.MAX_TOOLS + 1), "CONTRACTS_LIMIT", "tools")

    def test_duplicate_names(self):
        self.refused(self.mutated(lambda d: d["tools"][1].update(name="get_order")), "CONTRACTS_DUPLICATE",
                     "tools[1].name")

    def test_tool_fields(self):
        self.refused(self.mutated(lambda d: d["tools"][0].pop("hints")), "CONTRACTS_FIELDS", "tools[0]")
        self.refused(self.mutated(lambda d: d["tools"][0].update(extra=1)), "CONTRACTS_FIELDS", "tools[0]")
        self.refused(self.mutated(lambda d: d["tools"].append(3)), "CONTRACTS_VALUE", "tools[2]")

    def test_tool_values(self):
        cases = (
            ("name", "", "tools[0].name"), ("name", "a b", "tools[0].name"), ("name", "n" * 65, "tools[0].name"),
            ("description", 3, "tools[0].description"), ("effect", "delete", "tools[0].effect"),
            ("required_role", "bad role", "tools[0].required_role"), ("producer", None, "tools[0].producer"),
            ("resource_field", 3, "tools[0].resource_field"), ("bound_fields", "order_ref", "tools[0].bound_fields"),
            ("bound_fields", ["order_ref", "order_ref"], "tools[0].bound_fields"),
        )
        for key, value, at in cases:
            with self.subTest(key=key, value=value):
                self.refused(self.mutated(lambda d: d["tools"][0].update({key: value})), "CONTRACTS_VALUE", at)
        contracts.parse_contracts(encode(self.mutated(lambda d: d["tools"][0].update(name="n" * 64))))

    def test_description_limit_both_sides(self):
        limit = contracts.MAX_DESCRIPTION_LENGTH
        contracts.parse_contracts(encode(self.mutated(lambda d: d["tools"][0].update(description="d" * limit))))
        self.refused(self.mutated(lambda d: d["tools"][0].update(description="d" * (limit + 1))), "CONTRACTS_LIMIT",
                     "tools[0].description")

    def test_references_between_fields(self):
        self.refused(self.mutated(lambda d: d["tools"][0].update(resource_field="status")), "CONTRACTS_REFERENCE",
                     "tools[0].resource_field")
        self.refused(self.mutated(lambda d: d["tools"][0].update(bound_fields=["status"])), "CONTRACTS_REFERENCE",
                     "tools[0].bound_fields")
        self.refused(self.mutated(lambda d: d["tools"][0].update(output_schema=None)), "CONTRACTS_REFERENCE",
                     "tools[0].bound_fields")

        def optional_resource(document):
            document["tools"][0]["input_schema"]["required"] = []
        self.refused(self.mutated(optional_resource), "CONTRACTS_REFERENCE", "tools[0].resource_field")

        def integer_resource(document):
            document["tools"][0]["input_schema"]["properties"]["order_ref"] = {"type": "integer"}
            document["tools"][0]["bound_fields"] = []
        self.refused(self.mutated(integer_resource), "CONTRACTS_REFERENCE", "tools[0].resource_field")
        loaded = contracts.parse_contracts(encode(self.mutated(
            lambda d: d["tools"][0].update(resource_field=None, bound_fields=[], output_schema=None))))
        self.assertIsNone(loaded.tools["get_order"].output_schema)

    def test_revisions_provenance_hints(self):
        self.refused(self.mutated(lambda d: d["tools"][0]["revisions"].pop("handler")), "CONTRACTS_FIELDS",
                     "tools[0].revisions")
        self.refused(self.mutated(lambda d: d["tools"][0]["revisions"].update(input="a b")), "CONTRACTS_VALUE",
                     "tools[0].revisions.input")
        self.refused(self.mutated(lambda d: d["tools"][0]["provenance"].update(source="model")), "CONTRACTS_VALUE",
                     "tools[0].provenance.source")
        self.refused(self.mutated(lambda d: d["tools"][0]["provenance"].update(input_schema_sha256="ab")),
                     "CONTRACTS_VALUE", "tools[0].provenance.input_schema_sha256")
        self.refused(self.mutated(lambda d: d["tools"][0]["provenance"].update(server_name="s" * 161)),
                     "CONTRACTS_VALUE", "tools[0].provenance.server_name")
        self.refused(self.mutated(lambda d: d["tools"][0]["hints"].update(read_only="yes")), "CONTRACTS_VALUE",
                     "tools[0].hints.read_only")
        self.refused(self.mutated(lambda d: d["tools"][0]["hints"].update(extra=True)), "CONTRACTS_FIELDS",
                     "tools[0].hints")

    def test_imported_provenance_loads(self):
        provenance = {"source": "mcp_import", "server_name": "s" * 160, "server_version": "1.0",
                      "protocol_version": "2026-07-28", "input_schema_sha256": "a" * 64, "output_schema_sha256": None}
        loaded = contracts.parse_contracts(encode(self.mutated(lambda d: d["tools"][0].update(provenance=provenance))))
        self.assertEqual(dict(loaded.tools["get_order"].provenance), provenance)

    def test_schema_refusals_are_placed_inside_the_file(self):
        def number(document):
            document["tools"][1]["input_schema"]["properties"]["reason"] = {"type": "number"}
        self.refused(self.mutated(number), "SCHEMA_NUMBER", "tools[1].input_schema.properties[1]", ss.SchemaRefusal)

        def open_output(document):
            document["tools"][0]["output_schema"]["additionalProperties"] = True
        self.refused(self.mutated(open_output), "SCHEMA_OPEN_OBJECT", "tools[0].output_schema", ss.SchemaRefusal)

    def test_messages_hold_no_file_text(self):
        error = self.refused(self.mutated(lambda d: d["tools"][0].update(effect="SECRET")), "CONTRACTS_VALUE",
                             "tools[0].effect")
        self.assertNotIn("SECRET", json.dumps(error.to_json()))

    def test_catalog_shares_no_code_with_the_core(self):
        for catalog in (contracts.CONTRACTS_CATALOG, ss.SCHEMA_CATALOG, ss.VALUE_CATALOG):
            self.assertEqual(set(catalog) & set(tool_dispatcher.ERROR_CATALOG), set())


class TestShippedToolsAgreeWithTheCore(Case):
    """The re-declared tools admit and refuse exactly what the core's contracts do (public API only)."""

    INPUTS = (
        {"order_ref": "ORDER-7"}, {"order_ref": "ORDER-123456789012"}, {"order_ref": "ORDER-1234567890123"},
        {"order_ref": "ORDER-7\n"}, {"order_ref": "ORDER-"}, {"order_ref": "order-7"}, {"order_ref": "ORDER-\u0667"},
        {"order_ref": 7}, {"order_ref": None}, {"order_ref": ["ORDER-7"]}, {}, {"order_ref": "ORDER-7", "x": 1},
        {"order_ref": "ORDER-7", "reason": "damaged"}, {"order_ref": "ORDER-7", "reason": "duplicate"},
        {"order_ref": "ORDER-7", "reason": "other"}, {"order_ref": "ORDER-7", "reason": "Other"},
        {"order_ref": "ORDER-7", "reason": "stolen"}, {"order_ref": "ORDER-7", "reason": True},
        {"order_ref": "ORDER-7", "reason": "damaged", "note": "x"}, {"reason": "damaged"},
        {"order_ref": " ORDER-7", "reason": "damaged"}, {"order_ref": "ORDER-7", "reason": None},
    )
    OUTPUTS = (
        {"order_ref": "ORDER-7", "status": "paid"}, {"order_ref": "ORDER-7", "status": "lost"},
        {"order_ref": "ORDER-7", "status": "paid", "token": "x"}, {"order_ref": "ORDER-7"},
        {"draft_id": "DRAFT-0123456789abcdef", "order_ref": "ORDER-7", "reason": "other"},
        {"draft_id": "DRAFT-0123456789ABCDEF", "order_ref": "ORDER-7", "reason": "other"},
        {"draft_id": "DRAFT-0123456789abcdef", "order_ref": "ORDER-7", "reason": "other", "status": "submitted"},
        {"draft_id": "DRAFT-0123456789abcde", "order_ref": "ORDER-7", "reason": "other"},
        {"order_ref": "ORDER-7", "status": 1}, "paid", None,
    )

    def setUp(self):
        self.loaded = contracts.load_contracts(SHIPPED)

    @staticmethod
    def core_admits(check, *arguments):
        try:
            check(*arguments)
        except tool_dispatcher.BoundaryError:
            return False
        return True

    def test_same_tools_and_revisions(self):
        self.assertEqual(set(self.loaded.tools), set(tool_dispatcher.REGISTRY))
        for name, spec in tool_dispatcher.REGISTRY.items():
            tool = self.loaded.tools[name]
            with self.subTest(tool=name):
                self.assertEqual(tool.contract_view(), spec.contract_view())
                self.assertEqual((tool.description, tool.effect, tool.required_role, tool.resource_field,
                                  tool.bound_fields),
                                 (spec.description, spec.effect, spec.required_role, spec.resource_field,
                                  spec.bound_fields))

    def test_inputs_admitted_and_refused_alike(self):
        admitted = 0
        for name, spec in tool_dispatcher.REGISTRY.items():
            for arguments in self.INPUTS:
                with self.subTest(tool=name, arguments=arguments):
                    expected = self.core_admits(tool_dispatcher.check_input, spec, copy.deepcopy(arguments))
                    self.assertEqual(self.loaded.tools[name].input_schema.admits(arguments), expected)
                    admitted += expected
        self.assertEqual(admitted, 5)  # 2 get_order, 3 create_refund_draft: the table has both sides

    def test_outputs_admitted_and_refused_alike(self):
        admitted = 0
        for name, spec in tool_dispatcher.REGISTRY.items():
            for output in self.OUTPUTS:
                with self.subTest(tool=name, output=output):
                    expected = self.core_admits(tool_dispatcher.check_output_fields, spec, output)
                    self.assertEqual(self.loaded.tools[name].output_schema.admits(output), expected)
                    admitted += expected
        self.assertEqual(admitted, 2)

    def test_the_core_generated_schemas_compile_to_the_same_checks(self):
        for name, spec in tool_dispatcher.REGISTRY.items():
            compiled = ss.compile_schema(spec.input_schema())
            for arguments in self.INPUTS:
                with self.subTest(tool=name, arguments=arguments):
                    self.assertEqual(compiled.admits(arguments), self.loaded.tools[name].input_schema.admits(arguments))


if __name__ == "__main__":
    unittest.main()
