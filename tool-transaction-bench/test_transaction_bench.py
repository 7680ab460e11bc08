"""Tests for transaction_bench (the package txbench/), one TestCase per part, in the order data flows.

Every test pins an exact outcome: a code, a count, a verdict, an order. Nothing here writes
outside a temporary directory; the committed results are only read.
"""
from __future__ import annotations

import contextlib
import copy
import hashlib
import io
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from collections import Counter
from fractions import Fraction
from pathlib import Path
from typing import Final
from unittest import mock
from xml.etree import ElementTree

sys.path.insert(0, str(Path(__file__).resolve().parent))
import transaction_bench as tb  # noqa: E402
from txbench import cli as txcli, plansfile as txplansfile  # noqa: E402  (patched where they are looked up)

HERE = Path(__file__).resolve().parent
_CACHE: dict = {}


def bench() -> tb.BenchOutcome:
    """One shared full run for the tests that only read its results."""
    if "outcome" not in _CACHE:
        _CACHE["outcome"] = tb.run_all()
    return _CACHE["outcome"]


# A sweep of single faults only: for tests that need a whole run but not the whole sweep.
SMALL_SWEEP = tb.SweepPlan(exhaustive_depth=1, max_depth=1)
NO_FAULTS = tb.SweepPlan(exhaustive_depth=0, max_depth=0)  # one run per orchestrator


def cached_run_all(seed: int = tb.SEED, sweep_plan: tb.SweepPlan = tb.SweepPlan()) -> tb.BenchOutcome:
    """run_all for the CLI tests: the shared run when the arguments are the defaults."""
    if (seed, sweep_plan) != (tb.SEED, tb.SweepPlan()):
        raise AssertionError("the CLI ran the bench with unexpected arguments")
    return bench()


def raw_lines() -> list[dict]:
    return [json.loads(line) for line in bench().raw.decode("utf-8").splitlines()]


def plan_arguments(tool: str, **changes) -> dict:
    return {**tb.thaw(tb.PLAN_ARGUMENTS[tool]), **changes}


def sandbox(*faults: tb.Fault, dedup: bool = True) -> tb.Sandbox:
    return tb.Sandbox(faults, consumer_dedup=dedup)


def call(name: str, arguments, ident: str = "c1") -> tb.ToolCall:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return tb.ToolCall(ident, name, text)


def provider(name: str, arguments, ident: str = "c1") -> dict:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"arguments": text, "id": ident, "name": name}


def run(orchestrator: str = "guarded", calls=None, *faults: tb.Fault, **options) -> dict:
    calls = tb.plan_calls() if calls is None else calls
    return tb.execute_run(orchestrator, calls, tb.PLACE_ORDER, faults=faults, **options)


def with_order(box: tb.Sandbox, *tools: str) -> tb.Sandbox:
    """Run the named plan steps on a sandbox directly, no orchestrator in between."""
    for tool in tools:
        response = box.call(tool, plan_arguments(tool))
        if not response.ok:
            raise RuntimeError(f"setup step {tool} failed with {response.code}")
    return box


def nested(depth: int) -> dict:
    """An object `depth` containers deep, counting itself: {"a": {"a": ... {}}}."""
    value: dict = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def canonical_text(value) -> str:
    return tb.canonical_json(value).decode("utf-8")


def codes(findings) -> list[str]:
    return [finding.code for finding in findings]


def capture(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = tb.main(argv)
    return status, out.getvalue(), err.getvalue()


# ================================================================================================
# 1-2. Limits, errors and codes
# ================================================================================================

class TestErrors(unittest.TestCase):
    def test_error_is_a_catalog_error_with_code_message_and_place(self):
        error = tb.BenchError("BAD_REQUEST", "order_ref")
        self.assertIsInstance(error, tb.tool_dispatcher.CatalogError)
        self.assertEqual(error.to_json(), {"code": "BAD_REQUEST", "message": "the tool cannot read a field it needs",
                                           "retryable": False, "at": "order_ref"})

    def test_detail_is_shown_only_when_set(self):
        self.assertEqual(tb.BenchError("SCENARIO_UNKNOWN", detail="known ids: S01..S14").to_json()["detail"],
                         "known ids: S01..S14")
        self.assertEqual(set(tb.BenchError("SCENARIO_UNKNOWN").to_json()), {"code", "message", "retryable"})

    def test_the_catalog_shares_no_code_with_the_core(self):
        # Every code of every catalog the core exports, the contract language's included.
        core = {code for name in tb.tool_dispatcher.__all__ if name.endswith("_CATALOG")
                for code in getattr(tb.tool_dispatcher, name)}
        self.assertLessEqual({"INVALID_ARGUMENTS", "SCHEMA_TYPE", "VALUE_TYPE", "CONTRACTS_FIELDS"}, core)
        self.assertEqual(set(tb.BENCH_CATALOG) & core, set())
        self.assertEqual(set(tb.BENCH_CATALOG) & set(tb.SANDBOX_ANSWERS), set())
        with self.assertRaises(ValueError):
            tb.BenchError("CLI_USAGE")  # the core's: the CLI gets it from CliParser

    def test_every_classified_code_is_a_catalog_code_or_a_sandbox_answer(self):
        self.assertLessEqual(set(tb.ERROR_CLASSES), set(tb.BENCH_CATALOG) | set(tb.SANDBOX_ANSWERS))

    def test_classification_table(self):
        self.assertEqual(tb.classify("TIMEOUT"), tb.UNKNOWN)
        self.assertEqual(tb.classify("RATE_LIMITED"), tb.RETRY)
        self.assertEqual(tb.classify("REJECTED"), tb.PERMANENT)
        self.assertEqual(tb.classify("SOMETHING_NEW"), tb.PERMANENT)  # unclassified: never retried
        self.assertEqual(tb.classify(None), tb.PERMANENT)

    def test_limits_are_the_documented_values(self):
        self.assertEqual((tb.GUARDED_MAX_ATTEMPTS, tb.NAIVE_MAX_ATTEMPTS, tb.MAX_ARGUMENT_BYTES,
                          tb.MAX_NESTING, tb.tool_dispatcher.MAX_SAFE_INTEGER, tb.MAX_CALLS, tb.MAX_EXPECTED_CALLS),
                         (3, 3, 16_384, 16, 9_007_199_254_740_991, 16, 8))


# ================================================================================================
# 3. Lifecycle
# ================================================================================================

class TestLifecycle(unittest.TestCase):
    EVENTS = ("accept", "refuse", "start", "reconcile", "fail", "escalate")

    def walk(self, *events: str) -> tb.Lifecycle:
        life = tb.Lifecycle()
        for event in events:
            life.fire(event)
        return life

    def test_happy_path(self):
        life = self.walk("accept", "start", "reconcile")
        self.assertEqual(life.state, tb.RECONCILED)
        self.assertEqual(life.history(), [["PROPOSED", "accept", "VALIDATED"], ["VALIDATED", "start", "EXECUTING"],
                                          ["EXECUTING", "reconcile", "RECONCILED"]])

    def test_every_legal_path_ends_in_its_terminal_state(self):
        paths = {("refuse",): tb.REFUSED, ("accept", "start", "escalate"): tb.MANUAL,
                 ("accept", "start", "fail", "reconcile"): tb.RECONCILED,
                 ("accept", "start", "fail", "escalate"): tb.MANUAL}
        for events, state in paths.items():
            with self.subTest(events=events):
                self.assertEqual(self.walk(*events).state, state)

    def test_every_pair_outside_the_table_is_illegal_and_changes_nothing(self):
        for state in tb.LIFECYCLE_STATES:
            for event in self.EVENTS:
                if (state, event) in tb.TRANSITIONS:
                    continue
                with self.subTest(state=state, event=event):
                    life = tb.Lifecycle()
                    life._state = state
                    with self.assertRaises(tb.IllegalTransition) as caught:
                        life.fire(event)
                    self.assertEqual(caught.exception.code, "LIFECYCLE_ILLEGAL")
                    self.assertEqual(caught.exception.at, f"{state}/{event}")
                    self.assertEqual((caught.exception.state, caught.exception.event), (state, event))
                    self.assertEqual(life.state, state)

    def test_illegal_transition_is_a_bench_error(self):
        with self.assertRaises(tb.BenchError):
            tb.Lifecycle().fire("reconcile")

    def test_terminal_states_have_no_exit_and_others_have_one(self):
        sources = {state for state, _ in tb.TRANSITIONS}
        self.assertEqual(sources & tb.TERMINAL_STATES, set())
        self.assertEqual(sources | tb.TERMINAL_STATES, set(tb.LIFECYCLE_STATES))
        self.assertLessEqual(set(tb.TRANSITIONS.values()), set(tb.LIFECYCLE_STATES))

    def test_history_is_a_copy(self):
        life = self.walk("refuse")
        life.history().clear()
        self.assertEqual(len(life.history()), 1)


# ================================================================================================
# 4. Strict argument decoding
# ================================================================================================

class TestDecodeArguments(unittest.TestCase):
    def assertCode(self, text, code, **limits):
        with self.assertRaises(tb.BenchError) as caught:
            tb.decode_arguments(text, **limits)
        self.assertEqual(caught.exception.code, code)

    def test_object_decodes(self):
        self.assertEqual(tb.decode_arguments(' {"a": [1, "x", true, null]} '), {"a": [1, "x", True, None]})

    def test_not_a_string(self):
        for value in (b"{}", {"a": 1}, None, 1, ["{}"]):
            with self.subTest(value=value):
                self.assertCode(value, "ARGS_NOT_STRING")

    def test_not_json(self):
        for text in ("", "{", '{"a": 1', "{a: 1}", "\ufeff{}", "{'a': 1}", '{"a": 1}}'):
            with self.subTest(text=text):
                self.assertCode(text, "ARGS_NOT_JSON")

    def test_json_that_is_not_an_object(self):
        for text in ("[]", "[1, 2]", "1", '"text"', "null", "true"):
            with self.subTest(text=text):
                self.assertCode(text, "ARGS_NOT_OBJECT")

    def test_duplicate_keys_at_any_depth(self):
        self.assertCode('{"a": 1, "a": 2}', "ARGS_DUPLICATE_KEY")
        self.assertCode('{"a": {"b": 1, "b": 1}}', "ARGS_DUPLICATE_KEY")

    def test_non_finite_numbers(self):
        for text in ('{"a": NaN}', '{"a": Infinity}', '{"a": -Infinity}', '{"a": 1e400}', '{"a": -1e400}'):
            with self.subTest(text=text):
                self.assertCode(text, "ARGS_NONFINITE")

    def test_finite_float_decodes_for_the_schema_to_judge(self):
        self.assertEqual(tb.decode_arguments('{"a": 2.0}'), {"a": 2.0})
        findings = tb.validate_arguments(tb.TOOLS["reserve_inventory"].schema,
                                         tb.decode_arguments(canonical_text(plan_arguments("reserve_inventory"))
                                                             .replace('"quantity":2', '"quantity":2.0')))
        self.assertEqual(findings, (tb.Finding("FIELD_TYPE", "/quantity"),))

    def test_every_core_json_code_maps_to_one_bench_code(self):
        core = {code for code, spec in tb.tool_dispatcher.ERROR_CATALOG.items() if spec.scope == "json"}
        self.assertEqual(set(tb.JSON_TO_ARGS), core)
        self.assertLessEqual(set(tb.JSON_TO_ARGS.values()), {c for c in tb.BENCH_CATALOG if c.startswith("ARGS_")})
        self.assertEqual(tb.BENCH_ARGUMENTS_JSON.parse_float, tb.tool_dispatcher.finite_float)
        self.assertEqual((tb.BENCH_ARGUMENTS_JSON.parse_int, tb.BENCH_ARGUMENTS_JSON.portable_text),
                         (tb.tool_dispatcher.safe_int, True))

    def test_integer_range_both_sides(self):
        self.assertEqual(tb.decode_arguments('{"a": 9007199254740991}'), {"a": 2**53 - 1})
        self.assertEqual(tb.decode_arguments('{"a": -9007199254740991}'), {"a": -(2**53 - 1)})
        self.assertCode('{"a": 9007199254740992}', "ARGS_NOT_PORTABLE")
        self.assertCode('{"a": -9007199254740992}', "ARGS_NOT_PORTABLE")
        self.assertCode('{"a": 12345678901234567}', "ARGS_NOT_PORTABLE")  # 17 digits: never reaches int()
        self.assertCode('{"a": ' + "9" * 5000 + "}", "ARGS_NOT_PORTABLE")

    def test_lone_surrogates(self):
        self.assertCode('{"a": "\\ud800"}', "ARGS_NOT_PORTABLE")
        self.assertCode('{"\\udfff": 1}', "ARGS_NOT_PORTABLE")
        self.assertCode('{"a": "\ud800"}', "ARGS_NOT_UTF8")

    def test_byte_limit_both_sides(self):
        text = '{"a": "' + "x" * 20 + '"}'
        size = len(text.encode("utf-8"))
        self.assertEqual(tb.decode_arguments(text, max_bytes=size), {"a": "x" * 20})
        self.assertCode(text, "ARGS_TOO_LARGE", max_bytes=size - 1)

    def test_byte_limit_counts_utf8_bytes_not_characters(self):
        text = '{"a": "é"}'  # 10 characters, 11 bytes
        self.assertCode(text, "ARGS_TOO_LARGE", max_bytes=10)
        self.assertEqual(tb.decode_arguments(text, max_bytes=11), {"a": "é"})

    def test_default_byte_limit(self):
        filler = "x" * (tb.MAX_ARGUMENT_BYTES - 9)  # the whole text is then exactly at the limit
        self.assertEqual(len(tb.decode_arguments('{"a": "' + filler + '"}')["a"]), len(filler))
        self.assertCode('{"a": "' + filler + 'x"}', "ARGS_TOO_LARGE")

    def test_nesting_limit_both_sides(self):
        self.assertEqual(tb.decode_arguments('{"a": {"b": 1}}', max_depth=2), {"a": {"b": 1}})
        self.assertCode('{"a": {"b": {"c": 1}}}', "ARGS_TOO_DEEP", max_depth=2)

    def test_default_nesting_limit(self):
        at_limit = '{"a": ' + "[" * 15 + "]" * 15 + "}"
        self.assertEqual(tb.decode_arguments(at_limit)["a"], [[[[[[[[[[[[[[[]]]]]]]]]]]]]]])
        self.assertCode('{"a": ' + "[" * 16 + "]" * 16 + "}", "ARGS_TOO_DEEP")

    def test_very_deep_input_is_refused_before_the_decoder(self):
        self.assertCode("[" * 4096 + "]" * 4096, "ARGS_TOO_DEEP")
        self.assertCode('{"a": ' + "[" * 100_000, "ARGS_TOO_LARGE")

    def test_brackets_inside_strings_do_not_count(self):
        self.assertEqual(tb.decode_arguments('{"a": "[[[{{{"}', max_depth=1), {"a": "[[[{{{"})
        self.assertEqual(tb.decode_arguments('{"a": "\\"[[["}', max_depth=1), {"a": '"[[['})
        self.assertEqual(tb.decode_arguments('{"a": "\\\\", "b": "[["}', max_depth=1), {"a": "\\", "b": "[["})

    def test_depth_is_counted_from_the_first_character(self):
        with self.assertRaises(tb.BenchError) as caught:
            tb.decode_arguments('{"a": []}', max_depth=1)
        self.assertEqual(caught.exception.code, "ARGS_TOO_DEEP")

    def test_an_escape_covers_one_character_only(self):
        with self.assertRaises(tb.BenchError) as caught:
            tb.decode_arguments('{"a": "\\"", "b": [[1]]}', max_depth=2)
        self.assertEqual(caught.exception.code, "ARGS_TOO_DEEP")

    def test_closing_brackets_lower_the_depth(self):
        self.assertEqual(tb.decode_arguments('{"a": [1], "b": [2], "c": [3]}', max_depth=2),
                         {"a": [1], "b": [2], "c": [3]})


# ================================================================================================
# 5. Tool contracts and schema validation
# ================================================================================================

class TestToolContracts(unittest.TestCase):
    def test_tool_set(self):
        self.assertEqual(sorted(tb.TOOLS), ["cancel_order", "charge_payment", "confirm_order", "create_order",
                                            "query_logistics", "refund_payment", "release_inventory",
                                            "reserve_inventory", "schedule_delivery"])
        self.assertEqual(tb.SIDE_EFFECT_TOOLS, frozenset(tb.TOOLS) - {"query_logistics"})

    def test_every_schema_is_supported_closed_and_fully_required(self):
        for name, schema in tb.tool_schemas().items():
            with self.subTest(tool=name):
                tb.check_schema(schema)
                stack = [schema]
                while stack:
                    node = stack.pop()
                    if node["type"] == "object":
                        self.assertIs(node["additionalProperties"], False)
                        self.assertEqual(sorted(node["required"]), sorted(node["properties"]))
                        stack.extend(node["properties"].values())

    def test_side_effect_tools_require_a_key_and_reads_take_none(self):
        schemas = tb.tool_schemas()
        for name in tb.SIDE_EFFECT_TOOLS:
            self.assertIn("idempotency_key", schemas[name]["required"])
        self.assertEqual(schemas["query_logistics"]["required"], ["order_ref"])

    def test_contracts_are_read_only_at_every_level(self):
        schema = tb.TOOLS["charge_payment"].schema
        with self.assertRaises(TypeError):
            schema["properties"]["payment_method"]["properties"]["cvv"] = {"type": "string"}
        self.assertIsInstance(schema["properties"]["currency"]["enum"], tuple)
        with self.assertRaises(TypeError):
            tb.PLAN_ARGUMENTS["create_order"]["line"]["quantity"] = 9

    def test_tool_schemas_returns_an_editable_copy(self):
        schemas = tb.tool_schemas()
        schemas["confirm_order"]["required"].append("x")
        self.assertEqual(tb.tool_schemas()["confirm_order"]["required"], ["idempotency_key", "order_ref"])

    def test_plan_arguments_are_valid(self):
        for tool in tb.PLAN_TOOLS:
            with self.subTest(tool=tool):
                self.assertEqual(tb.validate_arguments(tb.TOOLS[tool].schema, plan_arguments(tool)), ())


class TestValidateArguments(unittest.TestCase):
    def findings(self, tool, arguments):
        return [(f.code, f.path) for f in tb.validate_arguments(tb.TOOLS[tool].schema, arguments)]

    def test_boolean_is_not_an_integer(self):
        self.assertEqual(self.findings("reserve_inventory", plan_arguments("reserve_inventory", quantity=True)),
                         [("FIELD_TYPE", "/quantity")])

    def test_no_string_number_coercion_either_way(self):
        self.assertEqual(self.findings("reserve_inventory", plan_arguments("reserve_inventory", quantity="2")),
                         [("FIELD_TYPE", "/quantity")])
        self.assertEqual(self.findings("confirm_order", plan_arguments("confirm_order", order_ref=30417)),
                         [("FIELD_TYPE", "/order_ref")])

    def test_float_is_not_an_integer(self):
        self.assertEqual(self.findings("reserve_inventory", plan_arguments("reserve_inventory", quantity=2.0)),
                         [("FIELD_TYPE", "/quantity")])

    def test_enum_is_type_strict(self):
        self.assertEqual(self.findings("charge_payment", plan_arguments("charge_payment", currency="JPY")),
                         [("FIELD_ENUM", "/currency")])
        schema = {"type": "integer", "enum": [1, 2]}
        self.assertEqual(tb.validate_arguments(schema, 1), ())
        self.assertEqual(codes(tb.validate_arguments({"type": "boolean"}, 1)), ["FIELD_TYPE"])
        self.assertEqual(codes(tb.validate_arguments({"type": "string", "enum": ["1"]}, "2")), ["FIELD_ENUM"])

    def test_unknown_and_missing_keys_at_every_level(self):
        arguments = plan_arguments("charge_payment")
        arguments["payment_method"] = {"type": "card", "cvv": "123"}
        arguments["force"] = True
        self.assertEqual(self.findings("charge_payment", arguments),
                         [("FIELD_UNKNOWN_KEY", "/force"), ("FIELD_UNKNOWN_KEY", "/payment_method/cvv"),
                          ("FIELD_REQUIRED", "/payment_method/token")])

    def test_nested_object_type_error_stops_descent(self):
        arguments = plan_arguments("create_order", customer=["C1042"])
        self.assertEqual(self.findings("create_order", arguments), [("FIELD_TYPE", "/customer")])

    def test_integer_range_both_sides(self):
        for quantity, expected in ((1, []), (10, []), (0, [("FIELD_RANGE", "/quantity")]),
                                   (11, [("FIELD_RANGE", "/quantity")])):
            with self.subTest(quantity=quantity):
                self.assertEqual(self.findings("reserve_inventory",
                                               plan_arguments("reserve_inventory", quantity=quantity)), expected)

    def test_pattern_is_a_full_match(self):
        for ref, expected in (("30417", []), ("3041", [("FIELD_PATTERN", "/order_ref")]),
                              ("304171", [("FIELD_PATTERN", "/order_ref")]),
                              ("30417\n", [("FIELD_PATTERN", "/order_ref")])):
            with self.subTest(ref=ref):
                self.assertEqual(self.findings("confirm_order", plan_arguments("confirm_order", order_ref=ref)),
                                 expected)

    def test_string_length_both_sides(self):
        schema = {"type": "string", "minLength": 2, "maxLength": 3}
        self.assertEqual([codes(tb.validate_arguments(schema, text)) for text in ("a", "ab", "abc", "abcd")],
                         [["FIELD_LENGTH"], [], [], ["FIELD_LENGTH"]])

    def test_array_items_both_sides_and_item_paths(self):
        schema = {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 2}
        self.assertEqual([codes(tb.validate_arguments(schema, value)) for value in ([], [1], [1, 2], [1, 2, 3])],
                         [["FIELD_ITEMS"], [], [], ["FIELD_ITEMS"]])
        self.assertEqual([(f.code, f.path) for f in tb.validate_arguments(schema, [1, "x"])],
                         [("FIELD_TYPE", "/1")])

    def test_paths_escape_slash_and_tilde(self):
        schema = tb.TOOLS["confirm_order"].schema
        found = tb.validate_arguments(schema, {**plan_arguments("confirm_order"), "a/b": 1, "c~d": 2})
        self.assertEqual([f.path for f in found], ["/a~1b", "/c~0d"])

    def test_findings_are_sorted_and_capped_both_sides(self):
        value = {f"k{index:02d}": index for index in range(5)}
        schema = tb.TOOLS["confirm_order"].schema
        self.assertEqual(len(tb.validate_arguments(schema, value, max_findings=7)), 7)
        self.assertEqual(len(tb.validate_arguments(schema, value, max_findings=6)), 6)
        self.assertEqual([f.path for f in tb.validate_arguments(schema, value)][:3],
                         ["/idempotency_key", "/k00", "/k01"])

    def test_findings_are_capped_at_the_default(self):
        value = {f"k{index:03d}": index for index in range(100)}
        self.assertEqual(len(tb.validate_arguments(tb.TOOLS["confirm_order"].schema, value)), tb.MAX_FINDINGS)


class TestCheckSchema(unittest.TestCase):
    def assertUnsupported(self, schema):
        with self.assertRaises(tb.BenchError) as caught:
            tb.check_schema(schema)
        self.assertEqual(caught.exception.code, "FIELD_UNSUPPORTED")

    def test_refuses_unsupported_shapes(self):
        closed = {"type": "object", "properties": {}, "required": [], "additionalProperties": False}
        bad = {
            "not a mapping": [],
            "no type": {"properties": {}},
            "type not a string": {"type": ["string"]},
            "unknown type": {"type": "number"},
            "unknown keyword": {"type": "string", "contentEncoding": "base64"},
            "format on an integer": {"type": "integer", "format": "date-time"},
            "open object": {**closed, "additionalProperties": True},
            "object without additionalProperties": {"type": "object", "properties": {}, "required": []},
            "object without required": {"type": "object", "properties": {}, "additionalProperties": False},
            "required not declared": {**closed, "required": ["a"]},
            "required as a string": {**closed, "properties": {"a": {"type": "string"}}, "required": "a"},
            "required holding a number": {**closed, "properties": {"a": {"type": "string"}}, "required": ["a", 1]},
            "array without items": {"type": "array"},
            "bad pattern": {"type": "string", "pattern": "("},
            "pattern not text": {"type": "string", "pattern": 5},
            "bool as a bound": {"type": "integer", "minimum": True},
            "enum not a list": {"type": "string", "enum": "abc"},
            "nested bad keyword": {**closed, "properties": {"a": {"type": "string", "x": 1}}, "required": ["a"]},
            "bad array items": {"type": "array", "items": {"type": "string", "pattern": "("}},
        }
        for reason, schema in bad.items():
            with self.subTest(reason=reason):
                self.assertUnsupported(schema)

    def test_nesting_limit_both_sides(self):
        def nested(depth):
            schema = {"type": "string"}
            for _ in range(depth):
                schema = {"type": "array", "items": schema}
            return schema
        tb.check_schema(nested(tb.MAX_NESTING))
        self.assertUnsupported(nested(tb.MAX_NESTING + 1))

    def test_accepts_a_full_supported_schema(self):
        tb.check_schema({"type": "object", "description": "d", "additionalProperties": False, "required": ["a"],
                         "properties": {"a": {"type": "array", "items": {"type": "boolean"}, "minItems": 0,
                                              "maxItems": 3},
                                        "b": {"type": "string", "pattern": "^x$", "minLength": 1,
                                              "maxLength": 2, "enum": ["x"]}}})


# ================================================================================================
# 6. Fault catalogue and injector
# ================================================================================================

class TestFaults(unittest.TestCase):
    def test_swept_kinds(self):
        self.assertEqual(tb.SWEPT_KINDS, ("timeout_before_effect", "timeout_after_commit", "crash_after_commit",
                                          "ack_lost", "rate_limited", "permanent_failure", "duplicate_submit",
                                          "status_unavailable"))

    def test_every_call_stage_kind_has_a_submission_behaviour(self):
        call_kinds = {name for name, kind in tb.FAULT_KINDS.items() if kind.stage == "call"}
        self.assertEqual(set(tb.SUBMISSIONS) - {None}, call_kinds)

    def test_invalid_faults_are_refused(self):
        for fault in (tb.Fault("meteor", "charge_payment"), tb.Fault("rate_limited", "launch"),
                      tb.Fault("rate_limited", "charge_payment", 0), tb.Fault("rate_limited", "charge_payment", True)):
            with self.subTest(fault=fault):
                with self.assertRaises(tb.BenchError) as caught:
                    tb.FaultInjector((fault,))
                self.assertEqual(caught.exception.code, "FAULT_INVALID")

    def test_a_fault_strikes_exactly_its_count(self):
        injector = tb.FaultInjector((tb.Fault("rate_limited", "charge_payment", 2),))
        hits = [injector.take("call", "charge_payment") for _ in range(3)]
        self.assertEqual(hits, ["rate_limited", "rate_limited", None])

    def test_a_fault_strikes_only_its_stage_and_tool(self):
        injector = tb.FaultInjector((tb.Fault("ack_lost", "confirm_order"),))
        self.assertIsNone(injector.take("call", "confirm_order"))
        self.assertIsNone(injector.take("ack", "charge_payment"))
        self.assertEqual(injector.take("ack", "confirm_order"), "ack_lost")

    def test_a_sticky_fault_ignores_its_count(self):
        injector = tb.FaultInjector((tb.Fault("permanent_failure", "charge_payment", 1),))
        self.assertEqual([injector.take("call", "charge_payment") for _ in range(5)], ["permanent_failure"] * 5)

    def test_first_declared_fault_wins(self):
        injector = tb.FaultInjector((tb.Fault("rate_limited", "charge_payment"),
                                     tb.Fault("timeout_before_effect", "charge_payment")))
        self.assertEqual([injector.take("call", "charge_payment") for _ in range(3)],
                         ["rate_limited", "timeout_before_effect", None])


# ================================================================================================
# 7. Sandbox
# ================================================================================================

class TestSandboxTools(unittest.TestCase):
    def test_four_steps_commit_state_and_outbox_together(self):
        box = with_order(sandbox(), *tb.PLAN_TOOLS)
        self.assertEqual(box.orders["30417"]["status"], "confirmed")
        self.assertEqual(box.reservations, {"RES-0001": {"order_ref": "30417", "quantity": 2, "sku": "SKU-RED",
                                                         "status": "held"}})
        self.assertEqual(box.charges["CH-0001"]["status"], "captured")
        self.assertEqual(box.inventory, {"SKU-BLUE": 5, "SKU-RED": 3})
        self.assertEqual([row["type"] for row in box.outbox.values()],
                         ["order_created", "inventory_reserved", "payment_captured", "order_confirmed"])
        self.assertEqual(len(box.effects), 4)

    def test_receipts_name_the_records_they_touched(self):
        box = sandbox()
        self.assertEqual(box.call("create_order", plan_arguments("create_order")).data,
                         {"order_ref": "30417", "records": [["orders", "30417", "created"]]})
        self.assertEqual(box.call("reserve_inventory", plan_arguments("reserve_inventory")).data["records"],
                         [["reservations", "RES-0001", "held"]])

    def test_business_refusals(self):
        cases = [
            ((), "reserve_inventory", {}, "ORDER_NOT_FOUND"),
            (("create_order",), "create_order", {"idempotency_key": "other-key-1"}, "ORDER_EXISTS"),
            (("create_order",), "reserve_inventory", {"quantity": 6}, "INSUFFICIENT_STOCK"),
            (("create_order",), "reserve_inventory", {"sku": "SKU-GOLD"}, "INSUFFICIENT_STOCK"),
            (("create_order",), "charge_payment", {"amount_cents": 5000}, "AMOUNT_MISMATCH"),
            (("create_order", "reserve_inventory"), "confirm_order", {}, "ORDER_NOT_READY"),
            (("create_order", "charge_payment"), "confirm_order", {}, "ORDER_NOT_READY"),
            (("create_order",), "release_inventory", {}, "NOTHING_TO_RELEASE"),
            (("create_order",), "refund_payment", {"amount_cents": 4999, "reason": "other"}, "NOTHING_TO_REFUND"),
            (("create_order", "charge_payment"), "refund_payment", {"amount_cents": 1, "reason": "other"},
             "NOTHING_TO_REFUND"),
            (tb.PLAN_TOOLS, "charge_payment", {"idempotency_key": "second-charge"}, "ORDER_STATE"),
            (tb.PLAN_TOOLS, "reserve_inventory", {"idempotency_key": "second-reserve"}, "ORDER_STATE"),
        ]
        for setup, tool, changes, code in cases:
            with self.subTest(tool=tool, code=code):
                box = with_order(sandbox(), *setup)
                base = plan_arguments(tool) if tool in tb.PLAN_TOOLS else {"order_ref": "30417",
                                                                           "idempotency_key": "k-extra-0001"}
                response = box.call(tool, {**base, **changes})
                self.assertEqual((response.ok, response.code), (False, code))

    def test_readiness_and_release_are_per_order(self):
        box = with_order(sandbox(), "create_order", "reserve_inventory", "charge_payment")
        other = {**plan_arguments("create_order"), "order_ref": "30418", "idempotency_key": "k-create-30418"}
        self.assertTrue(box.call("create_order", other).ok)
        confirm = {"order_ref": "30418", "idempotency_key": "k-confirm-30418"}
        self.assertEqual(box.call("confirm_order", confirm).code, "ORDER_NOT_READY")
        release = {"order_ref": "30418", "idempotency_key": "k-release-30418"}
        self.assertEqual(box.call("release_inventory", release).code, "NOTHING_TO_RELEASE")
        self.assertEqual(box.reservations["RES-0001"]["status"], "held")

    def test_cancelled_order_cannot_be_cancelled_or_confirmed_again(self):
        box = with_order(sandbox(), "create_order")
        cancel = {"order_ref": "30417", "reason": "customer_request", "idempotency_key": "k-cancel-0001"}
        self.assertTrue(box.call("cancel_order", cancel).ok)
        self.assertEqual(box.call("cancel_order", {**cancel, "idempotency_key": "k-cancel-0002"}).code,
                         "ORDER_STATE")
        self.assertEqual(box.call("confirm_order", plan_arguments("confirm_order")).code, "ORDER_STATE")

    def test_the_sandbox_reads_fields_strictly(self):
        box = with_order(sandbox(), "create_order")
        for changes in ({"quantity": "2"}, {"quantity": True}, {"quantity": 0}, {"quantity": -1}, {"sku": 5}):
            with self.subTest(changes=changes):
                response = box.call("reserve_inventory", {**plan_arguments("reserve_inventory"), **changes,
                                                          "idempotency_key": "k-bad-" + str(len(box.trace))})
                self.assertEqual(response.code, "BAD_REQUEST")
        self.assertEqual(box.call("reserve_inventory", ["30417"]), tb.Response(False, "BAD_REQUEST"))
        self.assertEqual(box.call("create_order", {**plan_arguments("create_order"), "line": "SKU-RED",
                                                   "idempotency_key": "k-other-create"}).code, "BAD_REQUEST")
        self.assertEqual(box.call("launch_rocket", {}), tb.Response(False, "TOOL_UNKNOWN"))
        self.assertEqual(box.inventory["SKU-RED"], 5)

    def test_the_sandbox_ignores_contract_fields_it_does_not_need(self):
        # The backend is lax on purpose: the contract is the orchestrator's to enforce.
        box = with_order(sandbox(), *tb.PLAN_TOOLS)
        refund = {"order_ref": "30417", "amount_cents": 4999, "idempotency_key": "k-refund-0001", "force": True}
        self.assertTrue(box.call("refund_payment", refund).ok)
        self.assertEqual(box.charges["CH-0001"]["status"], "refunded")

    def test_release_returns_stock_and_refund_takes_the_matching_charge(self):
        box = with_order(sandbox(), "create_order", "reserve_inventory", "charge_payment")
        release = box.call("release_inventory", {"order_ref": "30417", "idempotency_key": "k-release-01"})
        self.assertEqual(release.data["records"], [["reservations", "RES-0001", "released"]])
        self.assertEqual(box.inventory["SKU-RED"], 5)
        refund = box.call("refund_payment", {"order_ref": "30417", "amount_cents": 4999, "reason": "other",
                                             "idempotency_key": "k-refund-01"})
        self.assertEqual(refund.data["records"], [["charges", "CH-0001", "refunded"]])

    def test_query_logistics_reads_without_effect(self):
        box = with_order(sandbox(), "create_order")
        response = box.call("query_logistics", {"order_ref": "30417"})
        self.assertEqual(response.data, {"carrier_status": "awaiting_confirmation", "order_ref": "30417",
                                         "order_status": "created", "records": []})
        self.assertEqual((len(box.effects), len(box.outbox)), (1, 1))
        self.assertEqual(box.call("query_logistics", {"order_ref": "99999"}).code, "ORDER_NOT_FOUND")

    def test_seeded_order(self):
        box = sandbox()
        tb.seed_confirmed_order(box)
        self.assertEqual(box.orders["20481"]["status"], "confirmed")
        self.assertEqual(box.inventory["SKU-BLUE"], 4)
        self.assertEqual((box.effects, box.outbox), ([], {}))
        self.assertEqual(box.next_id("CH"), "CH-0002")

    def test_snapshot_is_a_copy(self):
        box = with_order(sandbox(), "create_order")
        snapshot = box.snapshot()
        box.orders["30417"]["status"] = "cancelled"
        self.assertEqual(snapshot["orders"]["30417"]["status"], "created")
        self.assertEqual(sorted(snapshot), ["charges", "consumed", "deliveries", "inventory", "orders", "outbox",
                                            "reservations"])

    def test_orders_and_charges_keep_their_currency(self):
        # The sandbox stored no currency: an order and its charge both in USD went through on a
        # request for EUR, and the guarded run reconciled them.
        box = with_order(sandbox(), "create_order")
        self.assertEqual(box.orders["30417"]["currency"], "EUR")
        self.assertEqual(box.call("charge_payment", plan_arguments("charge_payment", currency="USD")).code,
                         "CURRENCY_CONFLICT")
        self.assertEqual(box.charges, {})
        self.assertTrue(box.call("charge_payment", plan_arguments("charge_payment")).ok)
        self.assertEqual(box.charges["CH-0001"]["currency"], "EUR")

    def test_the_seeded_charge_keeps_its_key(self):
        # A key is remembered however its operation came about: the seeded charge's replays its
        # receipt, and the same key on another charge conflicts instead of charging again.
        box = sandbox()
        tb.seed_confirmed_order(box)
        again = box.call("charge_payment", tb.thaw(tb.SEEDED_CHARGE))
        self.assertEqual((again.ok, again.data, len(box.charges)),
                         (True, {"order_ref": "20481", "records": [["charges", "CH-0001", "captured"]]}, 1))
        other = box.call("charge_payment", plan_arguments("charge_payment", idempotency_key=tb.SEEDED_CHARGE_KEY))
        self.assertEqual(other.code, "IDEMPOTENCY_CONFLICT")
        self.assertEqual(box.query_status("charge_payment", tb.SEEDED_CHARGE_KEY).data["state"], "committed")

    def test_table_lookup_is_closed(self):
        box = with_order(sandbox(), "create_order")
        self.assertIs(box.table("orders"), box.orders)
        self.assertEqual(box.table("trace"), {})


class TestSandboxIdempotency(unittest.TestCase):
    def test_same_key_same_intent_replays_without_a_second_effect(self):
        box = with_order(sandbox(), "create_order")
        first = box.call("charge_payment", plan_arguments("charge_payment"))
        second = box.call("charge_payment", plan_arguments("charge_payment"))
        self.assertEqual(first.data, second.data)
        self.assertEqual(len(box.charges), 1)
        self.assertEqual(box.ledger["charge_payment|k-charge-30417"], {"attempted": 2, "effects": 1})
        self.assertEqual([entry["what"] for entry in box.trace if entry["what"] == "replay"], ["replay"])

    def test_replay_is_a_defensive_copy(self):
        box = with_order(sandbox(), "create_order")
        box.call("charge_payment", plan_arguments("charge_payment")).data["records"].clear()
        self.assertEqual(box.call("charge_payment", plan_arguments("charge_payment")).data["records"],
                         [["charges", "CH-0001", "captured"]])

    def test_same_key_other_intent_is_a_conflict_and_executes_nothing(self):
        box = with_order(sandbox(), "create_order")
        box.call("charge_payment", plan_arguments("charge_payment"))
        response = box.call("charge_payment", plan_arguments("charge_payment", currency="USD"))
        self.assertEqual(response, tb.Response(False, "IDEMPOTENCY_CONFLICT"))
        self.assertEqual(len(box.charges), 1)

    def test_keys_are_scoped_per_tool(self):
        box = with_order(sandbox(), "create_order")
        shared = "k-shared-key-01"
        self.assertTrue(box.call("reserve_inventory", plan_arguments("reserve_inventory", idempotency_key=shared)).ok)
        self.assertTrue(box.call("charge_payment", plan_arguments("charge_payment", idempotency_key=shared)).ok)
        self.assertEqual(len(box.effects), 3)

    def test_keyless_calls_execute_every_time_and_keep_no_ledger(self):
        box = with_order(sandbox(), "create_order")
        arguments = plan_arguments("charge_payment")
        del arguments["idempotency_key"]
        box.call("charge_payment", arguments)
        box.call("charge_payment", arguments)
        self.assertEqual(len(box.charges), 2)
        self.assertEqual(sorted(box.ledger), ["create_order|k-create-30417"])

    def test_a_non_string_key_counts_as_no_key(self):
        box = with_order(sandbox(), "create_order")
        box.call("charge_payment", plan_arguments("charge_payment", idempotency_key=12345678))
        box.call("charge_payment", plan_arguments("charge_payment", idempotency_key=12345678))
        self.assertEqual(len(box.charges), 2)

    def test_failures_are_not_stored_under_the_key(self):
        box = sandbox()
        self.assertEqual(box.call("reserve_inventory", plan_arguments("reserve_inventory")).code, "ORDER_NOT_FOUND")
        with_order(box, "create_order")
        self.assertTrue(box.call("reserve_inventory", plan_arguments("reserve_inventory")).ok)

    def test_status_query_answers_committed_absent_or_unavailable(self):
        box = with_order(sandbox(tb.Fault("status_unavailable", "create_order")), "create_order")
        self.assertEqual(box.query_status("create_order", "k-create-30417").code, "STATUS_UNAVAILABLE")
        self.assertEqual(box.query_status("create_order", "k-create-30417").data,
                         {"receipt": {"order_ref": "30417", "records": [["orders", "30417", "created"]]},
                          "state": "committed"})
        self.assertEqual(box.query_status("create_order", "never-used-key").data, {"state": "absent"})
        self.assertEqual([entry["answer"] for entry in box.trace if entry["what"] == "status_query"],
                         ["STATUS_UNAVAILABLE", "committed", "absent"])


class TestSandboxFaults(unittest.TestCase):
    def charge(self, *faults):
        box = with_order(sandbox(*faults), "create_order", "reserve_inventory")
        return box, box.call("charge_payment", plan_arguments("charge_payment"))

    def test_timeout_before_effect(self):
        box, response = self.charge(tb.Fault("timeout_before_effect", "charge_payment"))
        self.assertEqual((response.code, len(box.charges), box.ledger["charge_payment|k-charge-30417"]),
                         ("TIMEOUT", 0, {"attempted": 1, "effects": 0}))

    def test_timeout_after_commit(self):
        box, response = self.charge(tb.Fault("timeout_after_commit", "charge_payment"))
        self.assertEqual((response.code, len(box.charges), box.ledger["charge_payment|k-charge-30417"]),
                         ("TIMEOUT", 1, {"attempted": 1, "effects": 1}))

    def test_rate_limited(self):
        box, response = self.charge(tb.Fault("rate_limited", "charge_payment"))
        self.assertEqual((response.code, len(box.charges)), ("RATE_LIMITED", 0))
        self.assertTrue(box.call("charge_payment", plan_arguments("charge_payment")).ok)

    def test_permanent_failure_never_lifts(self):
        box, response = self.charge(tb.Fault("permanent_failure", "charge_payment"))
        self.assertEqual(response.code, "REJECTED")
        again = box.call("charge_payment", plan_arguments("charge_payment", idempotency_key="fresh-key-001"))
        self.assertEqual((again.code, len(box.charges)), ("REJECTED", 0))

    def test_duplicate_submit_reaches_the_tool_twice_with_one_effect(self):
        box, response = self.charge(tb.Fault("duplicate_submit", "charge_payment"))
        self.assertTrue(response.ok)
        self.assertEqual((len(box.charges), box.ledger["charge_payment|k-charge-30417"]),
                         (1, {"attempted": 2, "effects": 1}))

    def test_crash_after_commit_leaves_the_event_in_the_outbox_until_the_relay(self):
        box, response = self.charge(tb.Fault("crash_after_commit", "charge_payment"))
        self.assertTrue(response.ok)
        self.assertEqual(box.outbox["EV-0003"]["published"], False)
        box.drain()
        self.assertEqual(box.consumed, {"EV-0001": 1, "EV-0002": 1})
        self.assertEqual(box.relay(), 1)
        self.assertEqual(box.relay(), 0)
        box.drain()
        self.assertEqual(box.consumed, {"EV-0001": 1, "EV-0002": 1, "EV-0003": 1})

    def test_ack_lost_redelivers_and_the_inbox_deduplicates(self):
        for dedup, consumed in ((True, 1), (False, 2)):
            with self.subTest(dedup=dedup):
                box = with_order(sandbox(tb.Fault("ack_lost", "create_order"), dedup=dedup), "create_order")
                box.drain()
                self.assertEqual((box.deliveries["EV-0001"], box.consumed["EV-0001"]), (2, consumed))

    def test_redelivery_stops_at_the_delivery_limit(self):
        for times, deliveries, dead in ((tb.MAX_DELIVERIES - 1, tb.MAX_DELIVERIES, 0),
                                        (tb.MAX_DELIVERIES, tb.MAX_DELIVERIES, 1)):
            with self.subTest(times=times):
                box = with_order(sandbox(tb.Fault("ack_lost", "create_order", times)), "create_order")
                box.drain()
                self.assertEqual(box.deliveries["EV-0001"], deliveries)
                self.assertEqual(sum(1 for e in box.trace if e["what"] == "dead_letter"), dead)


# ================================================================================================
# 8. Expectations and plan validation
# ================================================================================================

class TestPlanValidation(unittest.TestCase):
    def refusal(self, calls, expectation=tb.PLACE_ORDER):
        plan, found = tb.validate_plan(calls, expectation)
        return [(f.code, f.path, f.call) for f in found]

    def test_the_plan_passes_whole(self):
        plan, found = tb.validate_plan(tb.plan_calls(), tb.PLACE_ORDER)
        self.assertEqual(found, ())
        self.assertEqual([tool for tool, _ in plan], list(tb.PLAN_TOOLS))
        self.assertEqual(plan[0][1], plan_arguments("create_order"))

    def test_too_many_calls_both_sides(self):
        many = tuple(call("query_logistics", {"order_ref": "30417"}, f"q{index}") for index in range(17))
        self.assertEqual(self.refusal(many), [("PLAN_TOO_MANY_CALLS", "", None)])
        self.assertNotIn("PLAN_TOO_MANY_CALLS", [code for code, _, _ in self.refusal(many[:16])])

    def test_unknown_tool_and_unparseable_arguments(self):
        calls = tb.plan_calls() + (call("launch_rocket", {}, "x"), tb.ToolCall("y", "query_logistics", "{"))
        self.assertEqual(self.refusal(calls)[:2], [("TOOL_UNKNOWN", "", 4), ("ARGS_NOT_JSON", "", 5)])

    def test_missing_key_and_reused_key(self):
        missing = tb.plan_calls((("confirm_order", ("idempotency_key",), tb._ABSENT),))
        self.assertEqual(self.refusal(missing), [("FIELD_REQUIRED", "/idempotency_key", 3),
                                                 ("KEY_MISSING", "/idempotency_key", 3)])
        reused = tb.plan_calls((("confirm_order", ("idempotency_key",), "k-charge-30417"),))
        self.assertEqual(self.refusal(reused), [("KEY_REUSED", "/idempotency_key", 3)])

    def test_call_set_missing_unexpected_forbidden(self):
        calls = tb.plan_calls(order=("create_order", "reserve_inventory", "charge_payment"))
        self.assertEqual(self.refusal(calls), [("CALL_MISSING", "/confirm_order", None)])
        extra = tb.plan_calls() + (call("query_logistics", {"order_ref": "30417"}, "q"),)
        self.assertEqual(self.refusal(extra), [("CALL_UNEXPECTED", "/query_logistics", 4)])
        forbidden = tb.plan_calls() + (call("cancel_order", {"order_ref": "30417", "reason": "customer_request",
                                                             "idempotency_key": "k-cancel-0001"}, "x"),)
        self.assertEqual(self.refusal(forbidden), [("CALL_FORBIDDEN", "/cancel_order", 4),
                                                   ("CUSTOMER_NOT_PERMITTED", "/cancel_order", 4)])

    def test_an_expected_tool_proposed_twice_is_unexpected_the_second_time(self):
        twice = tb.plan_calls() + (call("confirm_order", plan_arguments("confirm_order", idempotency_key="k-again-001"),
                                        "again"),)
        self.assertEqual(self.refusal(twice), [("CALL_UNEXPECTED", "/confirm_order", 4)])

    def test_dependency_order_names_the_edge_and_the_early_call(self):
        calls = tb.plan_calls(order=("confirm_order", "create_order", "reserve_inventory", "charge_payment"))
        self.assertEqual(self.refusal(calls), [("DEPENDENCY_ORDER", "/reserve_inventory->confirm_order", 0),
                                               ("DEPENDENCY_ORDER", "/charge_payment->confirm_order", 0)])

    def test_dependency_check_skips_missing_calls(self):
        calls = tb.plan_calls(order=("reserve_inventory", "charge_payment", "confirm_order"))
        self.assertEqual(self.refusal(calls), [("CALL_MISSING", "/create_order", None)])

    def test_fixed_arguments_must_match_exactly(self):
        for changes, path in (({"order_ref": "30418"}, "/order_ref"), ({"amount_cents": 5000}, "/amount_cents")):
            with self.subTest(changes=changes):
                calls = tb.plan_calls(tuple(("charge_payment", (name,), value) for name, value in changes.items()))
                self.assertEqual(self.refusal(calls), [("ARGUMENT_MISMATCH", path, 2)])

    def test_expectation_checks(self):
        tb.check_expectation(tb.PLACE_ORDER)
        calls = tb.PLACE_ORDER.calls
        bad = {
            "cycle": tb.Expectation("x", calls[:2], ((0, 1), (1, 0))),
            "self edge": tb.Expectation("x", calls[:2], ((1, 1),)),
            "edge out of range": tb.Expectation("x", calls[:2], ((0, 2),)),
            "negative edge": tb.Expectation("x", calls[:2], ((-1, 0),)),
            "edge not a pair": tb.Expectation("x", calls[:2], ((0, 1, 1),)),
            "bool edge": tb.Expectation("x", calls[:2], ((False, True),)),
            "unknown tool": tb.Expectation("x", (tb.ExpectedCall("launch", {}),)),
            "forbidden expected": tb.Expectation("x", calls[:1], forbidden=frozenset({"create_order"})),
            "forbidden not a frozenset": tb.Expectation("x", calls[:1], forbidden={"cancel_order"}),
            "not JSON": tb.Expectation("x", (tb.ExpectedCall("confirm_order", {"order_ref": {1, 2}}),)),
            "not an expected call": tb.Expectation("x", ("confirm_order",)),
            "arguments not a mapping": tb.Expectation("x", (tb.ExpectedCall("confirm_order", ["x"]),)),
            "too many calls": tb.Expectation("x", (tb.ExpectedCall("confirm_order", {}),) * 9),
            # A value no call of that tool can carry: no plan could ever meet it.
            "field outside the tool": tb.Expectation("x", (tb.ExpectedCall("confirm_order", {"amount_cents": 5}),)),
            "not an expectation": {"calls": []},
        }
        for reason, expectation in bad.items():
            with self.subTest(reason=reason):
                with self.assertRaises(tb.BenchError) as caught:
                    tb.check_expectation(expectation)
                self.assertEqual(caught.exception.code, "EXPECTATION_INVALID")
        tb.check_expectation(tb.Expectation("x", (tb.ExpectedCall("confirm_order", {}),) * 8))


# ================================================================================================
# 9. Orchestrators
# ================================================================================================

class TestGuardedRecovery(unittest.TestCase):
    def step(self, *faults, tool="charge_payment", **options):
        box = with_order(sandbox(*faults), "create_order", "reserve_inventory")
        journal = tb.Journal()
        status = tb.call_with_recovery(box, journal, tool, plan_arguments(tool), **options)
        return status, box, journal

    def test_rate_limit_is_retried_with_the_same_key_within_the_budget(self):
        status, box, journal = self.step(tb.Fault("rate_limited", "charge_payment", 2))
        self.assertEqual(status, "ok")
        self.assertEqual(box.ledger, {**box.ledger, "charge_payment|k-charge-30417": {"attempted": 3, "effects": 1}})
        self.assertEqual(journal.acks, {"charge_payment|k-charge-30417": 1})

    def test_rate_limit_beyond_the_budget_is_an_explicit_failure(self):
        status, box, journal = self.step(tb.Fault("rate_limited", "charge_payment", 3))
        self.assertEqual((status, len(box.charges), journal.unknowns), ("failed", 0, []))

    def test_budget_is_a_parameter_both_sides(self):
        self.assertEqual(self.step(tb.Fault("rate_limited", "charge_payment", 4), max_attempts=5)[0], "ok")
        self.assertEqual(self.step(tb.Fault("rate_limited", "charge_payment", 5), max_attempts=5)[0], "failed")

    def test_permanent_failure_is_not_retried(self):
        status, box, _ = self.step(tb.Fault("permanent_failure", "charge_payment"))
        self.assertEqual((status, box.ledger["charge_payment|k-charge-30417"]["attempted"]), ("failed", 1))

    def test_unknown_resolved_by_status_query_committed(self):
        status, box, journal = self.step(tb.Fault("timeout_after_commit", "charge_payment"))
        self.assertEqual((status, len(box.charges)), ("ok", 1))
        self.assertEqual(journal.unknowns, [{"attempt": 1, "key": "k-charge-30417",
                                             "resolution": "status_query:committed", "tool": "charge_payment"}])
        self.assertEqual(journal.receipts, [{"order_ref": "30417", "records": [["charges", "CH-0001", "captured"]]}])

    def test_unknown_resolved_absent_then_same_key_retry(self):
        status, box, journal = self.step(tb.Fault("timeout_before_effect", "charge_payment"))
        self.assertEqual(status, "ok")
        self.assertEqual([u["resolution"] for u in journal.unknowns], ["status_query:absent"])
        self.assertEqual(sorted(box.ledger), ["charge_payment|k-charge-30417", "create_order|k-create-30417",
                                              "reserve_inventory|k-reserve-30417"])

    def test_status_unavailable_falls_back_to_same_key_replay(self):
        status, box, journal = self.step(tb.Fault("timeout_after_commit", "charge_payment"),
                                         tb.Fault("status_unavailable", "charge_payment"))
        self.assertEqual((status, len(box.charges)), ("ok", 1))
        self.assertEqual(journal.unknowns[0]["resolution"], "same_key_replay")
        self.assertEqual(journal.acks, {"charge_payment|k-charge-30417": 1})
        self.assertEqual(box.ledger["charge_payment|k-charge-30417"], {"attempted": 2, "effects": 1})

    def test_unresolvable_unknown_stays_unknown(self):
        status, box, journal = self.step(tb.Fault("timeout_after_commit", "charge_payment", 3),
                                         tb.Fault("status_unavailable", "charge_payment", 3))
        self.assertEqual(status, "unknown")
        self.assertEqual([u["resolution"] for u in journal.unknowns], [None, None, None])
        self.assertEqual(len(box.charges), 1)

    def test_exhausted_but_proven_absent_is_failed_not_unknown(self):
        status, box, journal = self.step(tb.Fault("timeout_before_effect", "charge_payment", 3))
        self.assertEqual((status, len(box.charges)), ("failed", 0))
        self.assertFalse(journal.pending("charge_payment", "k-charge-30417"))

    def test_a_timed_out_read_is_retried_without_a_status_query(self):
        box = with_order(sandbox(tb.Fault("timeout_before_effect", "query_logistics")), "create_order")
        journal = tb.Journal()
        self.assertEqual(tb.call_with_recovery(box, journal, "query_logistics", {"order_ref": "30417"}), "ok")
        self.assertEqual([e["what"] for e in box.trace if e["what"] == "status_query"], [])
        self.assertEqual(journal.unknowns, [])

    def test_rerunning_a_done_step_acknowledges_its_receipt_once(self):
        # After a restart the step runs again with the same key: a replay, or a lost reply that the
        # status query resolves; either way the receipt is the one already counted.
        for fault in (None, tb.Fault("timeout_after_commit", "charge_payment", 2)):
            with self.subTest(fault=fault):
                box = with_order(sandbox(*(() if fault is None else (fault,))), "create_order", "reserve_inventory")
                journal = tb.Journal()
                for _ in range(2):
                    self.assertEqual(tb.call_with_recovery(box, journal, "charge_payment",
                                                           plan_arguments("charge_payment")), "ok")
                self.assertEqual((journal.acks, len(journal.receipts), len(box.charges)),
                                 ({"charge_payment|k-charge-30417": 1}, 1, 1))

    def test_a_replayed_receipt_is_acknowledged_once(self):
        journal = tb.Journal()
        receipt = {"order_ref": "1", "records": []}
        journal.acknowledge("t", "k", receipt, distinct=True)
        journal.acknowledge("t", "k", dict(receipt), distinct=True)
        self.assertEqual((journal.acks, len(journal.receipts)), ({"t|k": 1}, 1))
        journal.acknowledge("t", "k", receipt, distinct=False)
        self.assertEqual(journal.acks, {"t|k": 2})
        journal.acknowledge("t", None, {"other": 1}, distinct=True)
        self.assertEqual((journal.acks, len(journal.receipts)), ({"t|k": 2}, 3))

    def test_resolve_touches_only_pending_unknowns_of_that_tool_and_key(self):
        journal = tb.Journal()
        journal.note_unknown("a", "k", 1)
        journal.note_unknown("b", "k", 1)
        journal.note_unknown("a", "j", 1)
        journal.resolve("a", "k", "x")
        journal.resolve("a", "k", "y")
        self.assertEqual([u["resolution"] for u in journal.unknowns], ["x", None, None])
        self.assertEqual((journal.pending("a", "k"), journal.pending("b", "k")), (False, True))


class TestGuardedRuns(unittest.TestCase):
    def test_refused_plan_touches_nothing(self):
        record = run("guarded", tb.plan_calls(order=tb.PLAN_TOOLS[:3]))
        self.assertEqual((record["lifecycle"], record["transitions"], record["trace"], record["side_effects"]),
                         (tb.REFUSED, [["PROPOSED", "refuse", "REFUSED"]], [], 0))

    def test_failure_at_the_first_step_has_nothing_to_compensate(self):
        record = run("guarded", None, tb.Fault("permanent_failure", "create_order"))
        self.assertEqual((record["lifecycle"], record["outcome"], record["compensation_order"]),
                         (tb.RECONCILED, "failed", []))
        self.assertEqual(record["transitions"][-2:], [["EXECUTING", "fail", "COMPENSATING"],
                                                      ["COMPENSATING", "reconcile", "RECONCILED"]])

    def test_failure_at_confirm_compensates_all_three_steps_in_reverse(self):
        record = run("guarded", None, tb.Fault("permanent_failure", "confirm_order"))
        self.assertEqual(record["compensation_order"], ["refund_payment", "release_inventory", "cancel_order"])
        self.assertEqual(tb.METRICS["orders"](record), {"30417": "cancelled"})
        self.assertEqual([row["status"] for row in record["state_after"]["charges"].values()], ["refunded"])
        self.assertEqual(tb.METRICS["violations"](record), tb._violations())
        self.assertEqual(record["outcome"], "compensated")

    def test_compensation_keys_are_stable_and_derived(self):
        record = run("guarded", None, tb.Fault("permanent_failure", "confirm_order"))
        undo = sorted(key for key in record["ledger"] if key.split("|")[1].startswith("undo-"))
        self.assertEqual(len(undo), 3)
        self.assertEqual(undo, sorted(key for key in run("guarded", None, tb.Fault("permanent_failure", "confirm_order"))
                                      ["ledger"] if "undo-" in key))
        self.assertEqual(tb._undo_key("charge_payment", plan_arguments("charge_payment")),
                         "undo-" + tb.canonical_sha256(["charge_payment", "k-charge-30417"])[:32])

    def test_compensation_arguments_meet_their_contracts(self):
        for tool, (undo, build) in tb.COMPENSATIONS.items():
            with self.subTest(tool=tool):
                self.assertEqual(tb.validate_arguments(tb.TOOLS[undo].schema, build(plan_arguments(tool))), ())

    def test_unresolved_unknown_escalates_to_manual_without_compensating(self):
        record = run("guarded", None, tb.Fault("timeout_after_commit", "charge_payment", 3),
                     tb.Fault("status_unavailable", "charge_payment", 3))
        self.assertEqual((record["lifecycle"], record["outcome"], record["compensation_order"]),
                         (tb.MANUAL, "manual", []))
        self.assertEqual(record["manual"], {"orders": ["30417"], "reason": "UNKNOWN_UNRESOLVED",
                                            "tool": "charge_payment"})
        self.assertEqual(record["transitions"][-1], ["EXECUTING", "escalate", "MANUAL"])
        self.assertEqual(tb.METRICS["violations"](record), tb._violations())  # excused by name, not silently
        self.assertEqual(tb.manual_grounds(record), ("unknown_unresolved",))

    def test_timeout_status_outage_then_permanent_rejection_never_compensates(self):
        # The charge committed (its response was lost), the status service was down, and the retry
        # was refused for good. The outcome stays unknown, so undoing the earlier steps would guess:
        # compensating here would leave the customer charged on a cancelled order.
        record = run("guarded", None, tb.Fault("timeout_after_commit", "charge_payment"),
                     tb.Fault("status_unavailable", "charge_payment"),
                     tb.Fault("permanent_failure", "charge_payment"))
        self.assertEqual((record["lifecycle"], record["outcome"], record["compensation_order"]),
                         (tb.MANUAL, "manual", []))
        self.assertEqual(record["manual"], {"orders": ["30417"], "reason": "UNKNOWN_UNRESOLVED",
                                            "tool": "charge_payment"})
        self.assertEqual(tb.METRICS["orders"](record), {"30417": "created"})
        self.assertEqual(tb.METRICS["unknown_resolutions"](record), [None])
        self.assertEqual(tb.METRICS["violations"](record), tb._violations())

    def test_permanent_rejection_after_a_resolved_absent_unknown_is_a_plain_failure(self):
        # The other side of the rule: once the status query proved the charge absent, a permanent
        # refusal is a known failure and the saga compensates.
        record = run("guarded", None, tb.Fault("timeout_before_effect", "charge_payment"),
                     tb.Fault("permanent_failure", "charge_payment"))
        self.assertEqual((record["lifecycle"], record["outcome"], record["compensation_order"]),
                         (tb.RECONCILED, "compensated", ["release_inventory", "cancel_order"]))
        self.assertEqual(tb.METRICS["unknown_resolutions"](record), ["status_query:absent"])

    def test_failed_compensation_escalates_to_manual(self):
        record = run("guarded", None, tb.Fault("permanent_failure", "charge_payment"),
                     tb.Fault("permanent_failure", "release_inventory"))
        self.assertEqual((record["lifecycle"], record["compensation_order"]), (tb.MANUAL, ["release_inventory"]))
        self.assertEqual(record["manual"]["reason"], "COMPENSATION_FAILED")
        self.assertEqual(record["manual"]["tool"], "release_inventory")
        self.assertEqual(record["transitions"][-1], ["COMPENSATING", "escalate", "MANUAL"])
        self.assertEqual(tb.METRICS["orders"](record), {"30417": "created"})
        # The order still holds its stock, and the escalation excuses it: the undo was tried and refused.
        self.assertEqual(tb.manual_grounds(record), ("compensation_failed",))
        self.assertEqual(tb.METRICS["violations"](record), tb._violations())

    def test_transient_fault_in_a_compensation_is_recovered(self):
        record = run("guarded", None, tb.Fault("permanent_failure", "charge_payment"),
                     tb.Fault("timeout_after_commit", "release_inventory"))
        self.assertEqual((record["lifecycle"], record["outcome"]), (tb.RECONCILED, "compensated"))
        self.assertEqual(tb.METRICS["unknown_resolutions"](record), ["status_query:committed"])

    def test_reconciliation_catches_what_the_relay_missed(self):
        class NoRelay(tb.Sandbox):
            def relay(self):
                return 0
        box = NoRelay((tb.Fault("crash_after_commit", "confirm_order"),), consumer_dedup=True)
        result = tb.run_guarded(tb.plan_calls(), box, tb.PLACE_ORDER, None)
        self.assertEqual((result.lifecycle, result.outcome), (tb.MANUAL, "manual"))
        self.assertEqual(result.manual["reason"], "RECONCILIATION_MISMATCH")
        self.assertEqual(result.manual["mismatches"], [{"claimed": 1, "found": 0, "record": "outbox/EV-0004"}])

    def test_reconcile_compares_claims_effects_and_events(self):
        box = with_order(sandbox(), "create_order", "reserve_inventory")
        journal = tb.Journal()
        for tool in ("charge_payment", "confirm_order"):
            tb.call_with_recovery(box, journal, tool, plan_arguments(tool))
        box.drain()
        self.assertEqual(tb.reconcile(box, journal)[:2],
                         [{"claimed": None, "found": "create_order", "record": "effects/EV-0001"},
                          {"claimed": None, "found": "reserve_inventory", "record": "effects/EV-0002"}])
        box.charges["CH-0001"]["status"] = "refunded"
        self.assertIn({"claimed": "captured", "found": "refunded", "record": "charges/CH-0001"},
                      tb.reconcile(box, journal))

    def test_reconcile_agrees_when_state_matches(self):
        box = sandbox()
        journal = tb.Journal()
        for tool in tb.PLAN_TOOLS:
            tb.call_with_recovery(box, journal, tool, plan_arguments(tool))
        box.drain()
        self.assertEqual(tb.reconcile(box, journal), [])
        box.consumed["EV-0002"] = 2
        self.assertEqual(tb.reconcile(box, journal), [{"claimed": 1, "found": 2, "record": "outbox/EV-0002"}])

    def test_a_later_receipt_supersedes_an_earlier_claim(self):
        record = run("guarded", None, tb.Fault("permanent_failure", "confirm_order"))
        self.assertEqual(record["lifecycle"], tb.RECONCILED)  # created then cancelled: the last claim holds


class TestNaive(unittest.TestCase):
    def test_retries_with_a_fresh_key_from_the_seeded_generator(self):
        record = run("naive", None, tb.Fault("rate_limited", "charge_payment"))
        keys = sorted(key for key in record["ledger"] if key.startswith("charge_payment|"))
        self.assertEqual(keys, ["charge_payment|k-charge-30417", "charge_payment|nv-" +
                                f"{random.Random(tb.SEED).getrandbits(64):016x}"])
        self.assertEqual(record["outcome"], "claimed_complete")

    def test_fresh_keys_depend_only_on_the_seed(self):
        first = run("naive", None, tb.Fault("timeout_after_commit", "charge_payment"), seed=7)
        second = run("naive", None, tb.Fault("timeout_after_commit", "charge_payment"), seed=7)
        other = run("naive", None, tb.Fault("timeout_after_commit", "charge_payment"), seed=8)
        self.assertEqual(first["ledger"], second["ledger"])
        self.assertNotEqual(first["ledger"], other["ledger"])

    def test_retries_permanent_failures_then_aborts_without_compensation(self):
        record = run("naive", None, tb.Fault("permanent_failure", "charge_payment"))
        self.assertEqual(tb.METRICS["submissions"](record), 2 + tb.NAIVE_MAX_ATTEMPTS)
        self.assertEqual((record["outcome"], record["compensation_order"], record["lifecycle"]),
                         ("aborted", [], None))

    def test_never_relays_and_never_resolves(self):
        record = run("naive", None, tb.Fault("crash_after_commit", "create_order"),
                     tb.Fault("timeout_before_effect", "confirm_order"))
        self.assertEqual(tb.METRICS["relayed_events"](record), 0)
        self.assertEqual(tb.METRICS["unknown_resolutions"](record), [None])

    def test_aborts_on_arguments_it_cannot_decode(self):
        calls = (tb.ToolCall("c1", "create_order", "{"),) + tb.plan_calls()[1:]
        record = run("naive", calls)
        self.assertEqual((record["outcome"], record["side_effects"]), ("aborted", 0))

    def test_keyless_retries_stay_keyless(self):
        self.assertEqual(tb._with_fresh_key({"a": 1}, random.Random(1)), {"a": 1})

    def test_counts_every_success_reply_as_an_effect(self):
        box = with_order(sandbox(dedup=False), "create_order")
        journal = tb.Journal()
        arguments = plan_arguments("charge_payment")
        for _ in range(2):
            tb._naive_step(box, journal, "charge_payment", arguments, random.Random(1))
        self.assertEqual(journal.acks, {"charge_payment|k-charge-30417": 2})


# ================================================================================================
# 10. Invariants
# ================================================================================================

def bare_record(**parts) -> dict:
    record = {"ledger": {}, "lifecycle": tb.RECONCILED, "manual": None, "trace": [], "unknowns": [],
              "state_after": {"charges": {}, "consumed": {}, "orders": {}, "outbox": {}, "reservations": {}}}
    for name, value in parts.items():
        if name in record["state_after"]:
            record["state_after"][name] = value
        else:
            record[name] = value
    return record


def charge(order, key, status="captured"):
    return {"amount_cents": 1, "key": key, "order_ref": order, "status": status}


# An unknown nobody resolved: the grounds a MANUAL escalation needs before it excuses anything.
PENDING = {"attempt": 1, "key": "k", "resolution": None, "tool": "t"}


def traced(*entries) -> list[dict]:
    """A trace from (what, tool, ok) triples, numbered as the sandbox numbers it."""
    return [{"seq": index, "what": what, "tool": tool, **({} if ok is None else {"ok": ok})}
            for index, (what, tool, ok) in enumerate(entries, 1)]


class TestInvariants(unittest.TestCase):
    def check(self, name, record):
        return tb.INVARIANTS[name].check(record)

    def test_single_charge(self):
        self.assertEqual(self.check("single_charge", bare_record(charges={"CH-1": charge("1", "a")})), [])
        self.assertEqual(self.check("single_charge", bare_record(charges={"CH-1": charge("1", "a"),
                                                                          "CH-2": charge("1", "b", "refunded")})),
                         [{"charges": 2, "order_ref": "1"}])
        self.assertEqual(self.check("single_charge", bare_record(charges={"CH-1": charge("1", "a"),
                                                                          "CH-2": charge("2", "a")})),
                         [{"charges": 2, "key": "a"}])
        self.assertEqual(self.check("single_charge", bare_record(charges={"CH-1": charge("1", None),
                                                                          "CH-2": charge("2", None)})), [])

    def test_no_orphan_reservation(self):
        held = {"order_ref": "1", "status": "held"}
        cases = [
            ({"1": {"status": "confirmed"}}, {"R1": held}, None, []),
            ({"1": {"status": "created"}}, {"R1": held}, None,
             [{"held": 1, "order_ref": "1", "order_status": "created"}]),
            ({"1": {"status": "cancelled"}}, {"R1": held}, None,
             [{"held": 1, "order_ref": "1", "order_status": "cancelled"}]),
            ({}, {"R1": held}, None, [{"held": 1, "order_ref": "1", "order_status": None}]),
            ({"1": {"status": "confirmed"}}, {"R1": held, "R2": held}, None,
             [{"held": 2, "order_ref": "1", "order_status": "confirmed"}]),
            ({"1": {"status": "cancelled"}}, {"R1": {**held, "status": "released"}}, None, []),
            ({"1": {"status": "created"}}, {"R1": held}, {"orders": ["1"]}, []),
            ({"1": {"status": "created"}}, {"R1": held}, {"orders": ["2"]},
             [{"held": 1, "order_ref": "1", "order_status": "created"}]),
        ]
        for orders, reservations, manual, expected in cases:
            with self.subTest(orders=orders, reservations=reservations, manual=manual):
                record = bare_record(orders=orders, reservations=reservations, manual=manual,
                                     unknowns=[PENDING] if manual else [])
                self.assertEqual(self.check("no_orphan_reservation", record), expected)

    def test_no_orphan_charge(self):
        cases = [
            ({"1": {"status": "confirmed"}}, {"C1": charge("1", "a")}, None, []),
            ({"1": {"status": "cancelled"}}, {"C1": charge("1", "a")}, None,
             [{"captured": 1, "order_ref": "1", "order_status": "cancelled"}]),
            ({"1": {"status": "created"}}, {"C1": charge("1", "a")}, None,
             [{"captured": 1, "order_ref": "1", "order_status": "created"}]),
            ({}, {"C1": charge("1", "a")}, None, [{"captured": 1, "order_ref": "1", "order_status": None}]),
            ({"1": {"status": "cancelled"}}, {"C1": charge("1", "a", "refunded")}, None, []),
            ({"1": {"status": "cancelled"}}, {"C1": charge("1", "a")}, {"orders": ["1"]}, []),
            ({"1": {"status": "cancelled"}}, {"C1": charge("1", "a")}, {"orders": ["2"]},
             [{"captured": 1, "order_ref": "1", "order_status": "cancelled"}]),
        ]
        for orders, charges, manual, expected in cases:
            with self.subTest(orders=orders, charges=charges, manual=manual):
                record = bare_record(orders=orders, charges=charges, manual=manual,
                                     unknowns=[PENDING] if manual else [])
                self.assertEqual(self.check("no_orphan_charge", record), expected)

    def test_an_escalation_without_grounds_excuses_nothing(self):
        # Every outcome known, no compensation tried: the saga could have undone these, so naming
        # them in a MANUAL escalation hides them instead of handing them over.
        parts = {"orders": {"1": {"status": "cancelled"}}, "charges": {"C1": charge("1", "a")},
                 "reservations": {"R1": {"order_ref": "1", "status": "held"}},
                 "manual": {"orders": ["1"], "reason": "USER_ESCALATION"}, "lifecycle": tb.MANUAL}
        for unknowns, orphans in (([PENDING], 0), ([], 1)):
            with self.subTest(unknowns=unknowns):
                record = bare_record(**parts, unknowns=unknowns)
                self.assertEqual(len(self.check("no_orphan_reservation", record)), orphans)
                self.assertEqual(len(self.check("no_orphan_charge", record)), orphans)

    def test_consumed_exactly_once(self):
        outbox = {"E1": {}, "E2": {}, "E3": {}}
        self.assertEqual(self.check("consumed_exactly_once", bare_record(outbox=outbox,
                                                                         consumed={"E1": 1, "E3": 2})),
                         [{"consumed": 0, "event": "E2"}, {"consumed": 2, "event": "E3"}])
        self.assertEqual(self.check("consumed_exactly_once",
                                    bare_record(outbox=outbox, consumed={"E1": 1, "E2": 1, "E3": 1})), [])

    def test_key_ledger(self):
        rows = {"a": {"acknowledged": 1, "attempted": 1, "effects": 1},
                "b": {"acknowledged": 0, "attempted": 3, "effects": 1},
                "c": {"acknowledged": 2, "attempted": 2, "effects": 1},
                "d": {"acknowledged": 0, "attempted": 1, "effects": 2},
                "e": {"acknowledged": 0, "attempted": 0, "effects": 0}}
        self.assertEqual(self.check("key_ledger", bare_record(ledger=rows)),
                         [{"key": "c", **rows["c"]}, {"key": "d", **rows["d"]}])

    def test_unknown_resolved(self):
        pending = {"attempt": 1, "key": "k", "resolution": None, "tool": "t"}
        done = {**pending, "resolution": "status_query:absent"}
        self.assertEqual(self.check("unknown_resolved", bare_record(unknowns=[pending, done])), [pending])
        self.assertEqual(self.check("unknown_resolved", bare_record(unknowns=[pending], lifecycle=tb.MANUAL)), [])
        self.assertEqual(self.check("unknown_resolved", bare_record(unknowns=[pending], lifecycle=None)), [pending])
        self.assertEqual(self.check("unknown_resolved", bare_record(unknowns=[done])), [])

    def test_manual_grounds_from_the_journal(self):
        done = {**PENDING, "resolution": "status_query:absent"}
        self.assertEqual(tb.manual_grounds(bare_record(unknowns=[PENDING])), ("unknown_unresolved",))
        self.assertEqual(tb.manual_grounds(bare_record(unknowns=[done])), ())

    def test_manual_grounds_from_a_failed_compensation(self):
        reserved = (("call", "reserve_inventory", None), ("commit", "reserve_inventory", None),
                    ("answer", "reserve_inventory", True))
        cases = [
            ("refused after its step committed", reserved + (("call", "release_inventory", None),
                                                          ("answer", "release_inventory", False)),
             ("compensation_failed",)),
            ("refused, then replayed", reserved + (("call", "release_inventory", None),
                                                  ("answer", "release_inventory", False),
                                                  ("call", "release_inventory", None),
                                                  ("answer", "release_inventory", True)), ()),
            ("committed, its answer lost", reserved + (("call", "release_inventory", None),
                                                       ("commit", "release_inventory", None),
                                                       ("answer", "release_inventory", False)), ()),
            ("sent before its step committed", (("call", "release_inventory", None),
                                                ("answer", "release_inventory", False)) + reserved, ()),
            ("sent again after it took effect", reserved + (("call", "release_inventory", None),
                                                            ("commit", "release_inventory", None),
                                                            ("answer", "release_inventory", True),
                                                            ("call", "release_inventory", None),
                                                            ("answer", "release_inventory", False)), ()),
            ("a forward step refused", (("call", "reserve_inventory", None),
                                        ("answer", "reserve_inventory", False)), ()),
        ]
        for title, entries, grounds in cases:
            with self.subTest(title):
                self.assertEqual(tb.manual_grounds(bare_record(trace=traced(*entries))), grounds)

    def test_escalation_grounded(self):
        escalated = {"orders": ["1"], "reason": "USER_ESCALATION", "tool": None}
        self.assertEqual(self.check("escalation_grounded", bare_record()), [])
        self.assertEqual(self.check("escalation_grounded", bare_record(manual=escalated, unknowns=[PENDING])), [])
        self.assertEqual(self.check("escalation_grounded", bare_record(manual=escalated)),
                         [{"orders": ["1"], "reason": "USER_ESCALATION"}])

    def test_check_invariants_runs_each_by_name(self):
        self.assertEqual(tb.check_invariants(bare_record()), {name: [] for name in tb.INVARIANTS})
        self.assertEqual(list(tb.INVARIANTS), ["single_charge", "no_orphan_reservation", "no_orphan_charge",
                                               "consumed_exactly_once", "key_ledger", "unknown_resolved",
                                               "escalation_grounded"])
        self.assertEqual(list(tb.MANUAL_GROUNDS), ["unknown_unresolved", "compensation_failed"])
        self.assertEqual(dict(tb.UNDOES), {"cancel_order": "create_order", "release_inventory": "reserve_inventory",
                                           "refund_payment": "charge_payment"})


# ================================================================================================
# 11. Run records
# ================================================================================================

class TestRunRecords(unittest.TestCase):
    def test_state_diff(self):
        before = {"orders": {"1": {"status": "created"}, "2": {"status": "created"}}, "inventory": {"A": 5}}
        after = {"orders": {"1": {"status": "confirmed"}, "3": {"status": "created"}}, "inventory": {"A": 5},
                 "charges": {"C": {"s": 1}}}
        self.assertEqual(tb.state_diff(before, after), [
            {"after": {"s": 1}, "before": None, "path": "charges/C"},
            {"after": {"status": "confirmed"}, "before": {"status": "created"}, "path": "orders/1"},
            {"after": None, "before": {"status": "created"}, "path": "orders/2"},
            {"after": {"status": "created"}, "before": None, "path": "orders/3"}])

    def test_seal(self):
        sealed = tb.seal({"b": 1, "a": [1, 2]})
        self.assertEqual(sealed["record_sha256"], tb.canonical_sha256({"a": [1, 2], "b": 1}))
        self.assertEqual(tb.seal(sealed), sealed)
        self.assertNotEqual(tb.seal({**sealed, "b": 2})["record_sha256"], sealed["record_sha256"])

    def test_judge_is_exact(self):
        record = bare_record(side_effects=1)
        verdicts = tb.judge(record, (("side_effects", 1), ("side_effects", True), ("side_effects", 2)))
        self.assertEqual([v["verdict"] for v in verdicts], ["pass", "fail", "fail"])
        self.assertEqual(verdicts[2], {"expected": 2, "metric": "side_effects", "observed": 1, "verdict": "fail"})

    def test_record_fields(self):
        record = run("guarded")
        self.assertEqual(sorted(record), ["compensation_order", "diff", "faults", "invariants", "ledger", "lifecycle",
                                          "manual", "orchestrator", "outcome", "proposal_sha256", "refusal", "seed",
                                          "side_effects", "state_after", "state_before", "trace", "transitions",
                                          "unknowns"])
        self.assertEqual(record["proposal_sha256"],
                         tb.canonical_sha256([c.to_json() for c in tb.plan_calls()]))

    def test_trace_records_commit_publish_and_consume(self):
        record = run("guarded", None, tb.Fault("crash_after_commit", "confirm_order"))
        whats = [entry["what"] for entry in record["trace"]]
        self.assertEqual(whats.count("commit"), 4)
        self.assertEqual(whats.count("crash"), 1)
        self.assertEqual(whats.count("consume"), 4)
        self.assertEqual([e["seq"] for e in record["trace"]], list(range(1, len(whats) + 1)))

    def test_metrics_on_a_known_run(self):
        record = run("naive", None, tb.Fault("ack_lost", "create_order"), tb.Fault("timeout_after_commit",
                                                                                   "reserve_inventory"))
        expected = {"side_effects": 5, "held_reservations": 2, "new_charges": 1, "captured_charges": 1,
                    "max_consumption": 2, "unconsumed_events": 0, "duplicates_ignored": 0, "relayed_events": 0,
                    "manual_reason": None, "state_changed": True, "refusal_codes": [],
                    "inventory": {"SKU-BLUE": 5, "SKU-RED": 1}}
        self.assertEqual({name: tb.METRICS[name](record) for name in expected}, expected)
        self.assertEqual(tb.METRICS["violations"](record), tb._violations(
            no_orphan_reservation=1, consumed_exactly_once=1, unknown_resolved=1))


# ================================================================================================
# 12. Scenarios and paired controls
# ================================================================================================

class TestScenarios(unittest.TestCase):
    def scenario(self, ident):
        record = tb.run_scenario(tb.SCENARIO_INDEX[ident])
        failed = [item for item in record["assertions"] if item["verdict"] != "pass"]
        self.assertEqual(failed, [])
        self.assertEqual(record["verdict"], "pass")
        return record

    def test_table_shape(self):
        self.assertEqual([s.id for s in tb.SCENARIOS], [f"S{n:02d}" for n in range(1, 15)])
        self.assertEqual({d: sum(1 for s in tb.SCENARIOS if s.dimension == d) for d in tb.DIMENSIONS},
                         {"schema": 4, "completeness": 2, "order": 1, "timeout": 2, "idempotency": 2,
                          "saga": 1, "delivery": 2})

    def test_s01_missing_required(self):
        record = self.scenario("S01")
        self.assertEqual(record["refusal"], [{"call": 2, "code": "FIELD_REQUIRED", "path": "/amount_cents"},
                                             {"call": 2, "code": "ARGUMENT_MISMATCH", "path": "/amount_cents"}])

    def test_s02_wrong_type(self):
        record = self.scenario("S02")
        self.assertEqual([(f["code"], f["path"]) for f in record["refusal"]],
                         [("FIELD_TYPE", "/quantity"), ("ARGUMENT_MISMATCH", "/quantity")])

    def test_s03_enum(self):
        # JPY is outside the enum, and it is not the order's EUR either: both are named.
        self.assertEqual(self.scenario("S03")["refusal"],
                         [{"call": 2, "code": "FIELD_ENUM", "path": "/currency"},
                          {"call": 2, "code": "CURRENCY_MISMATCH", "path": "/currency"}])

    def test_s04_missing_idempotency_key(self):
        self.assertEqual(self.scenario("S04")["state_after"], self.scenario("S04")["state_before"])

    def test_s05_four_step_success(self):
        record = self.scenario("S05")
        self.assertEqual(record["state_after"]["consumed"], {"EV-0001": 1, "EV-0002": 1, "EV-0003": 1, "EV-0004": 1})
        self.assertEqual(record["transitions"][-1], ["EXECUTING", "reconcile", "RECONCILED"])

    def test_s06_confirm_missing_is_audited(self):
        self.assertEqual(self.scenario("S06")["diff"], [])

    def test_s07_dependency_first(self):
        self.assertEqual(self.scenario("S07")["trace"], [])

    def test_s08_timeout_before_effect(self):
        record = self.scenario("S08")
        self.assertEqual([e["fault"] for e in record["trace"] if e["what"] == "call" and e["tool"] == "charge_payment"],
                         ["timeout_before_effect", None])

    def test_s09_retries_exhausted(self):
        record = self.scenario("S09")
        charge_keys = {e["key"] for e in record["trace"] if e["what"] == "call" and e["tool"] == "charge_payment"}
        self.assertEqual(charge_keys, {"k-charge-30417"})  # never a new key
        self.assertEqual(record["state_after"]["charges"], {})

    def test_s10_response_lost_after_commit(self):
        record = self.scenario("S10")
        self.assertEqual(list(record["state_after"]["charges"]), ["CH-0001"])

    def test_s11_same_key_twice(self):
        record = self.scenario("S11")
        self.assertEqual(sum(1 for e in record["trace"] if e["what"] == "replay"), 1)

    def test_s12_saga(self):
        record = self.scenario("S12")
        calls = [e["tool"] for e in record["trace"] if e["what"] == "call"]
        self.assertEqual(calls, ["create_order", "reserve_inventory", "charge_payment", "release_inventory",
                                 "cancel_order"])

    def test_s13_crash_after_commit(self):
        record = self.scenario("S13")
        self.assertEqual([e["event"] for e in record["trace"] if e["what"] == "publish" and e["via"] == "relay"],
                         ["EV-0004"])

    def test_s14_ack_lost(self):
        record = self.scenario("S14")
        self.assertEqual(record["state_after"]["deliveries"]["EV-0004"], 2)


class TestControls(unittest.TestCase):
    def control(self, ident):
        record = tb.run_control(next(c for c in tb.CONTROLS if c.id == ident))
        self.assertEqual([item for item in record["assertions"] if item["verdict"] != "pass"], [])
        self.assertEqual(record["verdict"], "shown")
        return record

    def test_pairs(self):
        self.assertEqual([(c.id, c.scenario) for c in tb.CONTROLS],
                         [("C1", "S10"), ("C2", "S12"), ("C3", "S13"), ("C4", "S14"), ("C5", "S04")])

    def test_c1_double_charge(self):
        record = self.control("C1")
        keys = sorted(row["key"] for row in record["state_after"]["charges"].values())
        self.assertEqual(keys[0], "k-charge-30417")
        self.assertTrue(keys[1].startswith("nv-"))

    def test_c2_leaked_reservation(self):
        record = self.control("C2")
        self.assertEqual(record["invariants"]["no_orphan_reservation"],
                         [{"held": 1, "order_ref": "30417", "order_status": "created"}])

    def test_c3_lost_event(self):
        record = self.control("C3")
        self.assertEqual(record["invariants"]["consumed_exactly_once"], [{"consumed": 0, "event": "EV-0004"}])

    def test_c4_duplicate_consumption(self):
        record = self.control("C4")
        self.assertEqual(record["invariants"]["consumed_exactly_once"], [{"consumed": 2, "event": "EV-0004"}])

    def test_c5_effect_from_a_refusable_plan(self):
        record = self.control("C5")
        self.assertIsNone(record["state_after"]["charges"]["CH-0001"]["key"])

    def test_a_control_that_misses_its_fault_is_reported_not_shown(self):
        blind = tb.Control("CX", "S05", "double charge", (("new_charges", 2),))
        self.assertEqual(tb.run_control(blind)["verdict"], "not_shown")

    def test_a_missed_control_fails_the_whole_run(self):
        failures = tb._failures([], [{"control": "C9", "verdict": "not_shown"}],
                                {name: {"guarded": 0, "naive": 1} for name in tb.INVARIANTS}, [])
        self.assertEqual(failures, ("control C9 did not show its fault: the harness is broken",))


# ================================================================================================
# 13. Fault sweep
# ================================================================================================

class TestSweep(unittest.TestCase):
    TOOLS = ("create_order", "reserve_inventory", "charge_payment", "confirm_order",
             "cancel_order", "release_inventory", "refund_payment")

    def test_sweep_tools_are_the_plan_then_its_compensations(self):
        self.assertEqual(tb.sweep_tools(tb.plan_calls()), self.TOOLS)
        self.assertEqual(tb.sweep_tools((call("query_logistics", {"order_ref": "20481"}),
                                         call("refund_payment", {}), call("nope", {}))),
                         ("query_logistics", "refund_payment"))

    def test_every_fault_kind_is_swept_at_every_tool(self):
        self.assertEqual(tb.SWEPT_KINDS, tuple(tb.FAULT_KINDS))
        self.assertEqual(len(tb.sweep_atoms(self.TOOLS)), 8 * 7)
        self.assertEqual(tb.sweep_atoms(self.TOOLS)[:2], (("timeout_before_effect", "create_order"),
                                                           ("timeout_after_commit", "create_order")))

    def test_fault_sets_per_depth(self):
        sets = tb.sweep_fault_sets(self.TOOLS)
        by_depth = {depth: [faults for d, faults, _ in sets if d == depth] for depth in range(4)}
        spaces = {depth: space for depth, _, space in sets}
        self.assertEqual(spaces, {0: 1, 1: 56, 2: 56 * 57 // 2, 3: 56 * 57 * 58 // 6})
        self.assertEqual([len(by_depth[d]) for d in range(4)], [1, 56, 1596, 7 * 120 + tb.SWEEP_SAMPLE])
        self.assertEqual(by_depth[0], [()])
        self.assertEqual(len(set(by_depth[3])), 840 + tb.SWEEP_SAMPLE)
        one_tool = [faults for faults in by_depth[3] if len({fault.tool for fault in faults}) == 1]
        self.assertEqual(len(one_tool), 840)

    def test_a_point_picked_twice_is_one_fault_striking_twice(self):
        atoms = tb.sweep_atoms(self.TOOLS)
        self.assertEqual(tb._fault_set(atoms, (5, 1, 5)),
                         (tb.Fault("timeout_after_commit", "create_order", 1),
                          tb.Fault("permanent_failure", "create_order", 2)))

    def test_the_sample_is_fixed_by_the_seed(self):
        plan = tb.SweepPlan(exhaustive_depth=1, max_depth=2, sample=10)
        first = tb.sweep_fault_sets(self.TOOLS, plan)
        self.assertEqual(first, tb.sweep_fault_sets(self.TOOLS, plan))
        self.assertNotEqual(first, tb.sweep_fault_sets(self.TOOLS, plan, seed=1))
        self.assertEqual(len(first), 1 + 56 + 7 * 36 + 10)  # 36 one-tool pairs per tool: C(8 + 1, 2)
        whole = tb.sweep_fault_sets(self.TOOLS, tb.SweepPlan(exhaustive_depth=1, max_depth=2, sample=None))
        self.assertEqual(len(whole), 1 + 56 + 1596)
        large = tb.sweep_fault_sets(self.TOOLS, tb.SweepPlan(exhaustive_depth=1, max_depth=2, sample=10**6))
        self.assertEqual(large, whole)

    def test_the_issue_pattern_is_in_the_sweep(self):
        pattern = (tb.Fault("timeout_after_commit", "charge_payment"), tb.Fault("permanent_failure", "charge_payment"),
                   tb.Fault("status_unavailable", "charge_payment"))
        self.assertIn(pattern, [faults for _, faults, _ in tb.sweep_fault_sets(self.TOOLS)])

    def test_invariant_table(self):
        self.assertEqual(bench().summary["sweep"]["invariants"], {
            "single_charge": {"guarded": 0, "naive": 152},
            "no_orphan_reservation": {"guarded": 0, "naive": 470},
            "no_orphan_charge": {"guarded": 0, "naive": 167},
            "consumed_exactly_once": {"guarded": 0, "naive": 1108},
            "key_ledger": {"guarded": 0, "naive": 0},
            "unknown_resolved": {"guarded": 0, "naive": 1211},
            "escalation_grounded": {"guarded": 0, "naive": 0},
        })

    def test_verdicts_and_liveness(self):
        self.assertEqual(bench().summary["sweep"]["verdicts"], {
            "guarded": {"completable": 3335, "live": 3319, "liveness": "0.995", "runs": 3993, "unsafe": 0,
                        "verdict": "pass"},
            "naive": {"completable": 3335, "live": 2611, "liveness": "0.783", "runs": 3993, "unsafe": 2242,
                      "verdict": "fail"}})

    def test_guarded_keeps_every_invariant_in_every_run(self):
        lines = [line for line in raw_lines() if line["kind"] == "sweep" and line["orchestrator"] == "guarded"]
        self.assertEqual(len(lines), 3993)
        self.assertEqual([line for line in lines if line["violated"]], [])
        self.assertEqual({line["lifecycle"] for line in lines}, {tb.RECONCILED, tb.MANUAL})

    def test_every_guarded_escalation_is_grounded(self):
        # The guarded side goes to MANUAL only on the seed's two grounds, so the invariant that
        # fails an always-manual orchestrator leaves its verdict and its liveness as they were.
        lines = [line for line in raw_lines() if line["kind"] == "sweep" and line["orchestrator"] == "guarded"
                 and line["lifecycle"] == tb.MANUAL]
        self.assertEqual((len(lines), {line["outcome"] for line in lines}), (32, {"manual"}))
        self.assertEqual([line for line in lines if line["violated"] or line["completable"]], [])
        grounds = Counter()
        for line in lines:
            faults = tuple(tb.Fault(*fault) for fault in line["faults"])
            grounds[tb.manual_grounds(tb.execute_run("guarded", tb.plan_calls(), tb.PLACE_ORDER, faults=faults))] += 1
        self.assertEqual(grounds, {("compensation_failed",): 24, ("unknown_unresolved",): 8})

    def test_liveness_is_judged_by_state(self):
        lines = tb.run_sweep(plan=tb.SweepPlan(exhaustive_depth=0, max_depth=0))
        self.assertEqual([(line["completable"], line["live"]) for line in lines], [(True, True), (True, True)])
        lost = [line for line in raw_lines() if line["kind"] == "sweep" and line["orchestrator"] == "guarded"
                and line["completable"] and not line["live"]]
        self.assertEqual(len(lost), 16)
        # Every guarded liveness loss: refusals before any effect strike all three attempts of one
        # step (its retry budget), and the saga then undoes what was done: 4 steps x 4 mixes.
        self.assertEqual({sum(fault[2] for fault in line["faults"]) for line in lost}, {3})
        self.assertEqual({len({fault[1] for fault in line["faults"]}) for line in lost}, {1})
        self.assertEqual({fault[0] for line in lost for fault in line["faults"]},
                         {"timeout_before_effect", "rate_limited"})
        self.assertEqual({line["outcome"] for line in lost}, {"failed", "compensated"})

    def test_a_permanent_failure_on_a_plan_step_is_not_completable(self):
        self.assertFalse(tb._completable((tb.Fault("permanent_failure", "charge_payment"),),
                                         frozenset(tb.PLAN_TOOLS)))
        self.assertTrue(tb._completable((tb.Fault("permanent_failure", "refund_payment"),),
                                        frozenset(tb.PLAN_TOOLS)))
        self.assertTrue(tb._completable((tb.Fault("rate_limited", "charge_payment", 3),), frozenset(tb.PLAN_TOOLS)))

    def test_an_invalid_plan_has_nothing_completable(self):
        lines = tb.run_sweep(calls=tb.plan_calls(order=tb.PLAN_TOOLS[:3]),
                             plan=tb.SweepPlan(exhaustive_depth=0, max_depth=0))
        self.assertEqual([(line["completable"], line["live"]) for line in lines], [(False, False)] * 2)

    def test_a_plan_the_guard_accepts_but_the_tools_refuse_has_nothing_completable(self):
        # Reconciled, but failed: the order does not exist, so no fault set could let it complete.
        refund = call("refund_payment", REFUND)
        expectation = tb.Expectation("x", (tb.ExpectedCall("refund_payment", {}),))
        lines = tb.run_sweep(calls=(refund,), expectation=expectation,
                             plan=tb.SweepPlan(exhaustive_depth=0, max_depth=0))
        self.assertEqual([(line["lifecycle"], line["outcome"]) for line in lines][:1], [(tb.RECONCILED, "failed")])
        self.assertEqual([(line["completable"], line["live"]) for line in lines], [(False, False)] * 2)

    def test_refusing_everything_is_safe_and_fails(self):
        lines = [{"completable": True, "live": False, "orchestrator": "refuser", "violated": []}] * 3
        self.assertEqual(tb.sweep_verdicts(lines), {"refuser": {
            "completable": 3, "live": 0, "liveness": "0.000", "runs": 3, "unsafe": 0, "verdict": "fail"}})

    def test_liveness_floor_both_sides(self):
        def verdict(live):
            lines = [{"completable": True, "live": i < live, "orchestrator": "x", "violated": []}
                     for i in range(10)]
            return tb.sweep_verdicts(lines)["x"]["verdict"]
        self.assertEqual((verdict(9), verdict(8)), ("pass", "fail"))
        unsafe = [{"completable": True, "live": True, "orchestrator": "x", "violated": ["key_ledger"]}]
        self.assertEqual(tb.sweep_verdicts(unsafe)["x"]["verdict"], "fail")
        nothing = [{"completable": False, "live": False, "orchestrator": "x", "violated": []}]
        self.assertEqual(tb.sweep_verdicts(nothing)["x"]["verdict"], "n/a")

    def test_depth_table(self):
        rows = bench().summary["sweep"]["depths"]
        self.assertEqual([(row["depth"], row["orchestrator"], row["runs"], row["space"]) for row in rows],
                         [(0, "guarded", 1, 1), (0, "naive", 1, 1), (1, "guarded", 56, 56), (1, "naive", 56, 56),
                          (2, "guarded", 1596, 1596), (2, "naive", 1596, 1596),
                          (3, "guarded", 2340, 30856), (3, "naive", 2340, 30856)])
        self.assertEqual([row["unsafe"] for row in rows if row["orchestrator"] == "guarded"], [0, 0, 0, 0])

    def test_sweep_table_counts_runs_not_violations(self):
        lines = [{"orchestrator": "naive", "violated": ["single_charge"]},
                 {"orchestrator": "guarded", "violated": []}]
        self.assertEqual(tb.sweep_table(lines)["single_charge"], {"guarded": 0, "naive": 1})

    def test_a_blind_naive_side_fails_the_run(self):
        table = {name: {"guarded": 0, "naive": 1} for name in tb.INVARIANTS}
        table["single_charge"]["naive"] = 0
        self.assertEqual(tb._failures([], [], table, []),
                         ("sweep: the naive orchestrator never violated single_charge: the harness is blind to it",))
        table["single_charge"] = {"guarded": 1, "naive": 1}
        self.assertEqual(tb._failures([], [], table, []), ("sweep: the guarded orchestrator violated single_charge",))

    def test_run_cost(self):
        record = run("guarded", None, tb.Fault("timeout_after_commit", "charge_payment"))
        # four calls: the status query, not a second charge, proves the lost answer committed
        self.assertEqual(tb.run_cost(record, frozenset(tb.PLAN_TOOLS)),
                         {"calls": 4, "latency_ms": 3 * 40 + 2000 + 15, "retries": 0, "unexpected_effects": 0})
        naive = run("naive", None, tb.Fault("timeout_after_commit", "charge_payment"))
        self.assertEqual(tb.run_cost(naive, frozenset(tb.PLAN_TOOLS)),
                         {"calls": 5, "latency_ms": 4 * 40 + 2000, "retries": 1, "unexpected_effects": 1})
        # the second charge, then every commit of a tool outside {create_order, cancel_order}
        self.assertEqual(tb.run_cost(naive, frozenset({"create_order"}))["unexpected_effects"], 1 + 4)

    def test_percentile_is_nearest_rank(self):
        values = list(range(1, 101))
        self.assertEqual((tb._percentile(values, 50), tb._percentile(values, 95)), (50, 95))
        self.assertEqual((tb._percentile([7], 50), tb._percentile([1, 2], 50), tb._percentile([1, 2], 95)), (7, 1, 2))

    def test_efficiency_table(self):
        self.assertEqual(bench().summary["sweep"]["efficiency"]["guarded"]["runs_with_unexpected_effects"], 0)
        self.assertGreater(bench().summary["sweep"]["efficiency"]["naive"]["runs_with_unexpected_effects"], 0)

    def test_a_guarded_side_short_of_liveness_fails_the_run(self):
        table = {name: {"guarded": 0, "naive": 1} for name in tb.INVARIANTS}
        verdicts = {"guarded": {"liveness": "0.500", "verdict": "fail"}, "naive": {"verdict": "fail"}}
        self.assertEqual(tb._failures([], [], table, [], verdicts),
                         ("sweep: the guarded orchestrator completed too few completable runs (0.500)",))


# ================================================================================================
# 14. Full-plan scorer
# ================================================================================================

REFUND = {"amount_cents": 4999, "idempotency_key": "k-refund-20481", "order_ref": "20481", "reason": "damaged"}
SCHEDULE = {"idempotency_key": "k-delivery-20481", "order_ref": "20481", "order_version": 2,
            "window_start": "2026-12-03T09:00:00Z"}


def two_refunds() -> tb.Expectation:
    return tb.Expectation("two_refunds", (
        tb.ExpectedCall("refund_payment", {"amount_cents": 4999, "order_ref": "20481", "reason": "damaged"}),
        tb.ExpectedCall("refund_payment", {"amount_cents": 100, "order_ref": "20482", "reason": "other"})))


def query_then_refund() -> tb.Expectation:
    return tb.Expectation("query_then_refund", (tb.ExpectedCall("query_logistics", {"order_ref": "20481"}),
                                                tb.ExpectedCall("refund_payment", {"order_ref": "20481"})),
                          edges=((0, 1),), forbidden=frozenset({"cancel_order"}))


class TestScorer(unittest.TestCase):
    def score(self, *calls, expectation=None):
        expectation = tb.SCORER_CASES[0].expectation if expectation is None else expectation
        return tb.score_response({"tool_calls": list(calls)}, expectation)

    def values(self, result):
        return {name: ratio["value"] for name, ratio in result["sub_scores"].items()}

    def test_correct_response_passes(self):
        result = self.score(provider("query_logistics", {"order_ref": "20481"}))
        self.assertEqual((result["verdict"], result["total"]["value"], result["vetoes"]), ("pass", "1.000", []))
        self.assertEqual(self.values(result), {"call_set": "1.000", "dependency": "n/a", "parse": "1.000",
                                               "schema": "1.000"})

    def test_every_call_is_scored_not_only_the_first(self):
        result = self.score(provider("query_logistics", {"order_ref": "20481"}),
                            provider("query_logistics", {"order_ref": "20481"}, "c2"))
        self.assertEqual((result["verdict"], self.values(result)["call_set"], result["total"]["value"]),
                         ("incomplete", "0.500", "0.500"))
        self.assertEqual([c["index"] for c in result["calls"]], [0, 1])

    def test_matching_is_optimal_not_greedy(self):
        p0 = {**REFUND, "reason": "other"}  # 2/3 of the first expected call, 1/3 of the second
        p1 = {**REFUND, "idempotency_key": "k-refund-second"}  # all of the first, none of the second
        result = self.score(provider("refund_payment", p0), provider("refund_payment", p1, "c2"),
                            expectation=two_refunds())
        self.assertEqual(result["matching"], [[0, 1], [1, 0]])
        self.assertEqual(result["sub_scores"]["call_set"], {"den": 2, "num": "4/3", "value": "0.667"})
        self.assertEqual([c["pair_score"] for c in result["calls"]], ["1/3", "1"])

    def test_a_correct_later_call_is_found(self):
        wrong = provider("query_logistics", {"order_ref": "99999"})
        right = provider("query_logistics", {"order_ref": "20481"}, "c2")
        result = self.score(wrong, right)
        self.assertEqual((result["matching"], [c["matched"] for c in result["calls"]]), ([[1, 0]], [None, 0]))

    def test_schema_is_validated_recursively(self):
        arguments = {**REFUND, "extra": {"deep": True}}
        result = self.score(provider("refund_payment", arguments), expectation=tb.SCORER_CASES[2].expectation)
        self.assertEqual(result["verdict"], "refused")
        self.assertEqual(result["calls"][0]["findings"], [{"call": 0, "code": "FIELD_UNKNOWN_KEY", "path": "/extra"}])

    def test_booleans_are_not_integers(self):
        result = self.score(provider("refund_payment", {**REFUND, "amount_cents": True}),
                            expectation=tb.SCORER_CASES[2].expectation)
        self.assertEqual((result["verdict"], result["calls"][0]["findings"][0]["code"]), ("refused", "FIELD_TYPE"))

    def test_fixed_arguments_compare_without_coercion(self):
        expectation = tb.Expectation("x", (tb.ExpectedCall("refund_payment", {"amount_cents": 4999,
                                                                              "order_ref": "20481"}),))
        result = self.score(provider("refund_payment", {**REFUND, "order_ref": "20482"}), expectation=expectation)
        self.assertEqual((result["verdict"], result["calls"][0]["pair_score"], result["vetoes"]),
                         ("veto", "1/2", ["WRONG_TARGET:refund_payment/order_ref@0"]))

    def test_enum_out_of_range_is_refused(self):
        result = self.score(provider("refund_payment", {**REFUND, "reason": "changed_mind"}),
                            expectation=tb.SCORER_CASES[2].expectation)
        self.assertEqual(result["calls"][0]["findings"], [{"call": 0, "code": "FIELD_ENUM", "path": "/reason"}])

    def test_side_effect_without_key_is_refused(self):
        arguments = dict(REFUND)
        del arguments["idempotency_key"]
        result = self.score(provider("refund_payment", arguments), expectation=tb.SCORER_CASES[2].expectation)
        self.assertEqual([f["code"] for f in result["calls"][0]["findings"]], ["FIELD_REQUIRED", "KEY_MISSING"])

    def test_unknown_tool_is_refused(self):
        result = self.score(provider("launch_rocket", {}))
        self.assertEqual((result["verdict"], result["calls"][0]["findings"][0]["code"]), ("refused", "TOOL_UNKNOWN"))

    def test_dependency_edges_are_checked_on_the_proposed_order(self):
        query = provider("query_logistics", {"order_ref": "20481"})
        refund = provider("refund_payment", REFUND, "c2")
        in_order = self.score(query, refund, expectation=query_then_refund())
        self.assertEqual((in_order["verdict"], in_order["total"]["value"], in_order["edges"]),
                         ("pass", "1.000", [{"after": 1, "before": 0, "satisfied": True}]))
        reversed_ = self.score(refund, query, expectation=query_then_refund())
        self.assertEqual((reversed_["verdict"], reversed_["total"]["value"], reversed_["vetoes"]),
                         ("veto", "0.000", ["DEPENDENCY_ORDER:query_logistics->refund_payment@0"]))
        self.assertEqual(reversed_["sub_scores"]["dependency"], {"den": 1, "num": "0", "value": "0.000"})

    def test_an_edge_to_a_missing_call_is_unsatisfied(self):
        result = self.score(provider("query_logistics", {"order_ref": "20481"}), expectation=query_then_refund())
        self.assertEqual((result["edges"][0]["satisfied"], result["total"]["value"]), (False, "0.000"))

    def test_total_is_call_set_times_dependency(self):
        expectation = tb.Expectation("x", (tb.ExpectedCall("query_logistics", {"order_ref": "20481"}),
                                           tb.ExpectedCall("refund_payment", {"order_ref": "20481", "reason": "damaged"}),
                                           tb.ExpectedCall("query_logistics", {"order_ref": "20482"})),
                                     edges=((0, 1), (1, 2)))  # the last call a read: a missing effect is a veto
        query = provider("query_logistics", {"order_ref": "20481"})
        refund = provider("refund_payment", REFUND, "c2")
        result = self.score(refund, query, expectation=expectation)
        self.assertEqual((result["sub_scores"]["call_set"], result["sub_scores"]["dependency"]["value"]),
                         ({"den": 3, "num": "2", "value": "0.667"}, "0.000"))
        self.assertEqual(result["total"]["value"], "0.000")
        result = self.score(query, refund, expectation=expectation)
        self.assertEqual((result["verdict"], result["sub_scores"]["dependency"]["value"], result["total"]["value"]),
                         ("incomplete", "0.500", "0.333"))

    def test_forbidden_side_effect_vetoes_and_is_named(self):
        result = self.score(provider("query_logistics", {"order_ref": "20481"}),
                            provider("cancel_order", {"order_ref": "20481", "reason": "customer_request",
                                                      "idempotency_key": "k-cancel-20481"}, "c2"))
        self.assertEqual((result["verdict"], result["total"]["value"], result["vetoes"]),
                         ("veto", "0.000", ["FORBIDDEN_CALL:cancel_order@1"]))

    def test_veto_outranks_every_other_failure(self):
        result = self.score(tb.SCORER_CASES[5].response["tool_calls"][0],
                            provider("cancel_order", {"order_ref": 1}, "c2"))
        self.assertEqual(result["verdict"], "veto")

    def test_unparseable_calls_stay_in_the_denominator(self):
        result = self.score(provider("query_logistics", {"order_ref": "20481"}),
                            provider("query_logistics", "{", "c2"))
        self.assertEqual(result["verdict"], "unparseable")
        self.assertEqual(result["sub_scores"]["parse"], {"den": 2, "num": "1", "value": "0.500"})
        self.assertEqual(result["sub_scores"]["schema"], {"den": 2, "num": "1", "value": "0.500"})
        self.assertEqual(result["sub_scores"]["call_set"]["value"], "0.500")
        self.assertEqual(result["total"]["value"], "0.000")

    def test_an_empty_response_scores_zero_against_an_expected_call(self):
        result = self.score()
        self.assertEqual((result["verdict"], self.values(result)),
                         ("incomplete", {"call_set": "0.000", "dependency": "n/a", "parse": "n/a", "schema": "n/a"}))

    def test_an_expected_call_without_fixed_values_matches_any_valid_call(self):
        expectation = tb.Expectation("x", (tb.ExpectedCall("query_logistics", {}),))
        result = self.score(provider("query_logistics", {"order_ref": "11111"}), expectation=expectation)
        self.assertEqual((result["calls"][0]["pair_score"], result["total"]["value"]), ("1", "1.000"))

    def test_nothing_expected_and_nothing_proposed_passes(self):
        result = self.score(expectation=tb.Expectation("no_tools", ()))
        self.assertEqual((result["verdict"], result["total"]["value"]), ("pass", "1.000"))

    def test_optimal_matching_directly(self):
        third = Fraction(1, 3)
        self.assertEqual(tb.optimal_matching([[2 * third, third], [Fraction(1), Fraction(0)]]),
                         (Fraction(4, 3), ((0, 1), (1, 0))))
        self.assertEqual(tb.optimal_matching([]), (Fraction(0), ()))
        self.assertEqual(tb.optimal_matching([[Fraction(0)]]), (Fraction(0), ()))
        self.assertEqual(tb.optimal_matching([[Fraction(1, 2)], [Fraction(1)]]), (Fraction(1), ((1, 0),)))

    def test_ratio_rounds_half_up_and_shows_vacuous_as_na(self):
        self.assertEqual(tb._ratio(Fraction(2), 3), {"den": 3, "num": "2", "value": "0.667"})
        self.assertEqual(tb._ratio(Fraction(1), 3)["value"], "0.333")
        self.assertEqual(tb._ratio(Fraction(1), 2000)["value"], "0.001")
        self.assertEqual(tb._ratio(Fraction(1), 2001)["value"], "0.000")
        self.assertEqual(tb._ratio(3, 3)["value"], "1.000")
        self.assertEqual(tb._ratio(0, 0), {"den": 0, "num": "0", "value": "n/a"})
        self.assertEqual((tb._factor(tb._ratio(0, 0)), tb._factor(tb._ratio(1, 4))), (1, Fraction(1, 4)))

    def test_config_digest(self):
        config = tb.scorer_config()
        self.assertEqual(config["verdicts"], ["veto", "unparseable", "refused", "incomplete", "pass"])
        self.assertEqual((config["response_shapes"]["gemini_interactions"], config["interaction_status"]),
                         ("steps", {"read": ["completed", "requires_action"],
                                    "refused": {status: "RESPONSE_UNFINISHED" for status in sorted((
                                        "budget_exceeded", "cancelled", "failed", "in_progress", "incomplete",
                                        "queued", "requires_continuation"))}}))
        self.assertEqual(config["response_items"]["gemini_interactions"],
                         tb._item_table(tb.GEMINI_INTERACTION_STEPS))
        self.assertEqual(bench().summary["scorer"]["config_sha256"], tb.canonical_sha256(config))


class TestScorerHostileInput(unittest.TestCase):
    EXPECT = tb.SCORER_CASES[0].expectation

    def test_response_level_failures_are_codes(self):
        cases = {"RESPONSE_SHAPE": [None, "text", 5, {}, {"tool_calls": {}}, {"tool_calls": [], "x": 1},
                                    {"tool_calls": "[]"}, {"choices": []}, {"choices": [{"message": "x"}]},
                                    {"choices": [{"message": {"tool_calls": {}}}]}, {"output": "x"},
                                    {"content": "text", "role": "assistant"}, {"candidates": [{}]},
                                    {"candidates": [{"content": {"parts": {}}}]}, {"steps": [], "status": "done"},
                                    {"steps": "[]", "status": "completed"}],
                 "RESPONSE_TOO_MANY_CALLS": [{"tool_calls": [provider("query_logistics", "{}")] * 17},
                                             [{"name": "query_logistics", "arguments": {}}] * 17,
                                             {"status": "requires_action", "steps": [
                                                 {"type": "function_call", "id": f"fc_{n}", "name": "query_logistics",
                                                  "arguments": {}} for n in range(17)]}]}
        verdicts = {"RESPONSE_SHAPE": "unreadable_shape", "RESPONSE_TOO_MANY_CALLS": "unparseable"}
        for code, responses in cases.items():
            for response in responses:
                with self.subTest(response=str(response)[:60]):
                    result = tb.score_response(response, self.EXPECT)
                    self.assertEqual((result["error"], result["verdict"], result["total"]["value"]),
                                     (code, verdicts[code], "0.000"))
                    self.assertEqual(result["sub_scores"]["parse"], {"den": 1, "num": "0", "value": "0.000"})

    def test_sixteen_calls_are_still_scored(self):
        result = tb.score_response({"tool_calls": [provider("query_logistics", {"order_ref": "20481"}, f"c{n}")
                                                   for n in range(16)]}, self.EXPECT)
        self.assertEqual((result["error"], result["sub_scores"]["call_set"]["den"]), (None, 16))

    def test_call_level_failures_are_codes(self):
        good = provider("query_logistics", {"order_ref": "20481"})
        cases = {
            "CALL_SHAPE": [None, [], {"id": "c1", "name": "query_logistics"}, {**good, "type": "function"},
                           {**good, "id": 1}, {**good, "name": None}, {**good, "id": ""},
                           {**good, "id": "x" * 65}, {**good, "name": "q" * 65}],
            "ARGS_NOT_STRING": [{**good, "arguments": {"order_ref": "20481"}}, {**good, "arguments": None}],
            "ARGS_NOT_JSON": [{**good, "arguments": "{order_ref: 20481}"}],
            "ARGS_NOT_OBJECT": [{**good, "arguments": '["20481"]'}, {**good, "arguments": "20481"}],
            "ARGS_TOO_DEEP": [{**good, "arguments": '{"a": ' + "[" * 5000 + "]" * 5000 + "}"}],
            "ARGS_TOO_LARGE": [{**good, "arguments": '{"order_ref": "' + "9" * 20_000 + '"}'}],
            "ARGS_DUPLICATE_KEY": [{**good, "arguments": '{"order_ref": "20481", "order_ref": "20482"}'}],
            "ARGS_NONFINITE": [{**good, "arguments": '{"order_ref": NaN}'}],
            "ARGS_NOT_PORTABLE": [{**good, "arguments": '{"order_ref": 123456789012345678901234567890}'},
                                  {**good, "arguments": '{"order_ref": "\\udc00"}'}],
        }
        for code, calls in cases.items():
            for item in calls:
                with self.subTest(code=code, item=str(item)[:60]):
                    result = tb.score_response({"tool_calls": [item]}, self.EXPECT)
                    self.assertEqual(result["calls"][0]["findings"], [{"call": 0, "code": code, "path": ""}])
                    self.assertEqual((result["verdict"], result["total"]["value"]), ("unparseable", "0.000"))

    def test_object_arguments_json_cannot_write_are_codes_not_exceptions(self):
        # A host's Python objects as Anthropic `input` or bare-list `arguments`: json.dumps raised
        # out of score_response (TypeError, ValueError, RecursionError) for each of these. Depth is
        # scanned first: 3,000 levels were RecursionError on 3.11 and ARGS_TOO_LARGE on 3.13.
        deep, cycle = {}, {}
        node = deep
        for _ in range(3000):
            node["a"] = node = {}
        cycle["self"] = cycle
        cases = {"ARGS_NOT_JSON": [{"order_ref": {1, 2}}, {("order_ref",): "20481"}],
                 "ARGS_TOO_DEEP": [deep, cycle, nested(tb.MAX_NESTING + 1)],
                 "ARGS_NONFINITE": [{"order_ref": float("nan")}, {"order_ref": float("inf")}]}
        for code, values in cases.items():
            for number, value in enumerate(values):
                for response in ([{"name": "query_logistics", "arguments": value}],
                                 {"role": "assistant", "content": [{"type": "tool_use", "id": "t1",
                                                                    "name": "query_logistics", "input": value}]}):
                    with self.subTest(code=code, value=number, shape=type(response).__name__):
                        result = tb.score_response(response, self.EXPECT)
                        self.assertEqual((result["verdict"], result["calls"][0]["findings"]),
                                         ("unparseable", [{"call": 0, "code": code, "path": ""}]))

    def test_object_arguments_at_the_nesting_limit_are_decoded(self):
        result = tb.score_response([{"name": "query_logistics", "arguments": nested(tb.MAX_NESTING)}], self.EXPECT)
        self.assertEqual((result["verdict"], result["calls"][0]["parsed"]), ("refused", True))

    def test_x_x64_ids_and_names_are_accepted(self):
        good = provider("query_logistics", {"order_ref": "20481"}, "x" * 64)
        self.assertEqual(tb.score_response({"tool_calls": [good]}, self.EXPECT)["verdict"], "pass")

    def test_schema_level_hostility_is_refused_not_raised(self):
        good = provider("query_logistics", {"order_ref": "20481"})
        cases = {"FIELD_TYPE": [{"order_ref": 20481}, {"order_ref": True}, {"order_ref": None},
                                 {"order_ref": ["20481"]}],
                 "FIELD_UNKNOWN_KEY": [{"order_ref": "20481", "force": True}],
                 "FIELD_REQUIRED": [{}]}
        for code, arguments in cases.items():
            for value in arguments:
                with self.subTest(value=value):
                    result = tb.score_response({"tool_calls": [{**good, "arguments": json.dumps(value)}]}, self.EXPECT)
                    self.assertEqual((result["verdict"], result["calls"][0]["findings"][0]["code"]),
                                     ("refused", code))

    def test_invalid_configuration_is_reported(self):
        bad_tools = {"query_logistics": tb.ToolContract("query_logistics", False, {"type": "object"})}
        for tools, expectation, code in ((tb.TOOLS, "not an expectation", "EXPECTATION_INVALID"),
                                         (bad_tools, self.EXPECT, "FIELD_UNSUPPORTED"),
                                         ({"query_logistics": "schema"}, self.EXPECT, "FIELD_UNSUPPORTED"),
                                         ([], self.EXPECT, "FIELD_UNSUPPORTED")):
            with self.subTest(code=code):
                result = tb.score_response({"tool_calls": []}, expectation, tools)
                self.assertEqual((result["verdict"], result["error"]), ("invalid_input", code))


class TestSeedRegressions(unittest.TestCase):
    """The audited scorer's five constructed outputs with their corrected verdicts, and a baseline."""

    def case(self, ident):
        record = tb.run_scorer_case(next(c for c in tb.SCORER_CASES if c.id == ident))
        self.assertEqual(record["verdict"], "pass")
        return record

    def test_sc1_baseline(self):
        record = self.case("SC1")
        self.assertEqual((record["score"]["verdict"], record["score"]["total"]["value"]), ("pass", "1.000"))
        self.assertEqual((record["naive"]["side_effects"], record["guarded"]["lifecycle"]), (0, tb.RECONCILED))

    def test_sc2_query_then_cancel_is_vetoed(self):
        record = self.case("SC2")
        self.assertEqual((record["score"]["total"]["value"], record["score"]["vetoes"]),
                         ("0.000", ["FORBIDDEN_CALL:cancel_order@1"]))
        # The model's proposal is the same; only the orchestration decides whether it lands.
        self.assertEqual(record["naive"]["diff_paths"], ["consumed/EV-0001", "deliveries/EV-0001", "orders/20481",
                                                         "outbox/EV-0001"])
        # The cancelled order keeps its reservation and the customer's money.
        self.assertEqual(record["naive"]["violations"], tb._violations(no_orphan_reservation=1, no_orphan_charge=1))
        self.assertEqual((record["guarded"]["lifecycle"], record["guarded"]["side_effects"]), (tb.REFUSED, 0))

    def test_sc3_refund_missing_reason_is_refused(self):
        record = self.case("SC3")
        self.assertEqual(record["score"]["calls"][0]["findings"],
                         [{"call": 0, "code": "FIELD_REQUIRED", "path": "/reason"}])
        self.assertEqual((record["naive"]["side_effects"], record["guarded"]["side_effects"]), (1, 0))

    def test_sc4_number_for_string_is_refused(self):
        record = self.case("SC4")
        self.assertEqual([f["code"] for f in record["score"]["calls"][0]["findings"]],
                         ["ARGUMENT_MISMATCH", "FIELD_TYPE"][1:])
        self.assertEqual(record["naive"]["outcome"], "aborted")

    def test_sc5_unknown_force_is_refused(self):
        record = self.case("SC5")
        self.assertEqual(record["score"]["calls"][0]["findings"],
                         [{"call": 0, "code": "FIELD_UNKNOWN_KEY", "path": "/force"}])
        self.assertEqual(record["naive"]["side_effects"], 1)

    def test_sc6_invalid_json_scores_zero(self):
        record = self.case("SC6")
        self.assertEqual((record["score"]["verdict"], record["score"]["total"]["value"],
                          record["score"]["sub_scores"]["parse"]["value"]), ("unparseable", "0.000", "0.000"))
        self.assertEqual(record["guarded"]["violations"], tb._violations())

    def test_a_lost_verdict_fails_the_run(self):
        self.assertEqual(tb._failures([], [], {n: {"guarded": 0, "naive": 1} for n in tb.INVARIANTS},
                                      [{"case": "SC9", "verdict": "fail"}]),
                         ("scorer case SC9 lost its corrected verdict",))

    def test_a_wrong_declared_verdict_is_caught(self):
        case = tb.ScorerCase("SCX", "x", tb.SCORER_CASES[0].response, tb.SCORER_CASES[0].expectation, "-",
                             "veto", tb.RECONCILED)
        self.assertEqual(tb.run_scorer_case(case)["verdict"], "fail")
        case = tb.ScorerCase("SCY", "x", tb.SCORER_CASES[0].response, tb.SCORER_CASES[0].expectation, "-",
                             "pass", tb.REFUSED)
        self.assertEqual(tb.run_scorer_case(case)["verdict"], "fail")


class TestPlanVetoes(unittest.TestCase):
    """Every plan whose fault shows only across calls is a veto with a named reason."""

    VETOED_CASES = {  # case: (the score the first-call-only scorer gave, its vetoes)
        "SC7": ("0.80", ["DUPLICATE_EFFECT:charge_payment@3"]),
        "SC8": ("0.875", ["WRONG_TARGET:charge_payment/order_ref@2"]),
        "SC9": ("0.875", ["WRONG_AMOUNT:charge_payment/amount_cents@2"]),
        "SC10": ("0.667", ["WRONG_TARGET:refund_payment/order_ref@0"]),
        "SC11": ("0.80", ["DEPENDENCY_ORDER:reserve_inventory->charge_payment@1"]),
        "SC12": ("1.00", ["KEY_REUSED:reserve_inventory@1", "KEY_REUSED:charge_payment@2",
                          "KEY_REUSED:confirm_order@3"]),
        "SC13": ("1.00", ["CURRENCY_MISMATCH:charge_payment@2"]),
        "SC14": ("1.00", ["CALL_ID_REUSED:reserve_inventory@1", "CALL_ID_REUSED:charge_payment@2",
                          "CALL_ID_REUSED:confirm_order@3"]),
        "SC15": ("0.00", ["FORBIDDEN_CALL:cancel_order@1"]),
        "SC16": ("1.00", ["CUSTOMER_MISMATCH:create_order@0"]),
        "SC17": ("-", ["FORBIDDEN_CALL:refund_payment@0", "CONFIRMATION_MISSING:refund_payment@0"]),
        "SC18": ("-", ["VERSION_STALE:schedule_delivery@0"]),
    }

    def record(self, ident):
        return next(r for r in raw_lines() if r.get("case") == ident)

    def test_every_mis_scored_plan_is_a_named_veto_and_the_guard_refuses_it(self):
        for ident, (seed_era, vetoes) in self.VETOED_CASES.items():
            with self.subTest(case=ident):
                record = self.record(ident)
                self.assertEqual((record["verdict"], record["seed_era_score"], record["score"]["verdict"],
                                  record["score"]["total"]["value"], record["score"]["vetoes"]),
                                 ("pass", seed_era, "veto", "0.000", vetoes))
                self.assertEqual((record["guarded"]["lifecycle"], record["guarded"]["side_effects"]), (tb.REFUSED, 0))

    def test_the_naive_side_shows_what_the_veto_prevents(self):
        self.assertEqual(self.record("SC7")["naive_record"]["state_after"]["charges"]["CH-0003"]["order_ref"], "30417")
        self.assertEqual(tb.METRICS["new_charges"](self.record("SC7")["naive_record"]), 2)
        # The sandbox keeps each order's currency: the USD charge on the EUR order is refused there.
        self.assertEqual((self.record("SC13")["naive"]["side_effects"], self.record("SC13")["naive"]["outcome"]),
                         (2, "aborted"))
        self.assertEqual(self.record("SC19")["naive_record"]["state_after"]["orders"]["20481"]["delivery_window"],
                         "2026-02-30T09:00:00Z")

    def test_the_bare_list_is_read_as_the_seed_means_it(self):
        record = self.record("SC15")
        self.assertEqual((record["score"]["shape"], [c["name"] for c in record["score"]["calls"]]),
                         ("bare_list", ["query_logistics", "cancel_order"]))
        self.assertEqual(record["naive"]["side_effects"], 1)

    def test_a_valid_schedule_passes_and_an_impossible_date_is_refused(self):
        self.assertEqual((self.record("SC20")["score"]["verdict"], self.record("SC20")["guarded"]["lifecycle"]),
                         ("pass", tb.RECONCILED))
        self.assertEqual(self.record("SC19")["score"]["calls"][0]["findings"],
                         [{"call": 0, "code": "FIELD_FORMAT", "path": "/window_start"}])

    def score(self, calls, expectation):
        return tb.score_response({"tool_calls": calls}, expectation)

    def test_an_unexpected_side_effect_is_vetoed_even_when_not_forbidden(self):
        open_ = tb.Expectation("open", (tb.ExpectedCall("query_logistics", {"order_ref": "20481"}),))
        result = self.score([provider("query_logistics", {"order_ref": "20481"}),
                             provider("release_inventory", {"order_ref": "20481", "idempotency_key": "k-rel-20481"},
                                      "c2")], open_)
        self.assertEqual(result["vetoes"], ["UNEXPECTED_EFFECT:release_inventory@1"])
        extra_read = self.score([provider("query_logistics", {"order_ref": "20481"}),
                                 provider("query_logistics", {"order_ref": "20481"}, "c2")], open_)
        self.assertEqual((extra_read["vetoes"], extra_read["verdict"]), ([], "incomplete"))

    def test_mutual_exclusion(self):
        either = tb.Expectation("either", (tb.ExpectedCall("query_logistics", {}),),
                                exclusive=(("refund_payment", "cancel_order"),))
        refund = provider("refund_payment", REFUND, "c2")
        cancel = provider("cancel_order", {"order_ref": "20481", "reason": "customer_request",
                                           "idempotency_key": "k-cancel-20481"}, "c3")
        query = provider("query_logistics", {"order_ref": "20481"})
        both = self.score([query, refund, cancel], either)
        self.assertIn("CALLS_EXCLUSIVE:cancel_order@2", both["vetoes"])
        one = self.score([query, refund], either)
        self.assertNotIn("CALLS_EXCLUSIVE", " ".join(one["vetoes"]))
        plan, findings = tb.validate_plan(tb.calls_from_response({"tool_calls": [query, refund, cancel]}), either)
        self.assertIn(("CALLS_EXCLUSIVE", "/refund_payment+cancel_order", 2), [(f.code, f.path, f.call)
                                                                                for f in findings])

    def test_an_order_for_other_goods_is_a_veto_and_the_guard_refuses_it(self):
        # The request fixes the line (2 x SKU-RED, what the reservation holds); create_order's
        # line was not among the fixed values, so an order for 1 x SKU-BLUE scored 1.000 "pass",
        # the guard ran it and RECONCILED an order whose line contradicts its own reservation.
        calls = tb.plan_calls((("create_order", ("line", "sku"), "SKU-BLUE"),
                               ("create_order", ("line", "quantity"), 1)))
        result = self.score([item.to_json() for item in calls], tb.PLACE_ORDER)
        self.assertEqual((result["verdict"], result["total"]["value"], result["vetoes"]),
                         ("veto", "0.000", ["WRONG_AMOUNT:create_order/line/quantity@0",
                                            "WRONG_TARGET:create_order/line/sku@0"]))
        self.assertEqual(result["calls"][0]["pair_score"], "4/5")
        record = run("guarded", calls)
        self.assertEqual((record["lifecycle"], record["refusal"], record["side_effects"]),
                         (tb.REFUSED, [{"call": 0, "code": "ARGUMENT_MISMATCH", "path": "/line"}], 0))

    def test_a_half_saga_is_a_veto_not_partial_credit(self):
        # Effects proposed while an expected effect is missing: what commits stays, and the state the
        # request needs is never reached. Create, reserve and charge without confirm_order scored
        # 0.450 "incomplete", and run as proposed it leaves the customer charged for an order that
        # is never confirmed, its stock held: both orphan invariants, with no fault at all.
        plan = [item.to_json() for item in tb.plan_calls()]
        result = self.score(plan[:3], tb.PLACE_ORDER)
        self.assertEqual((result["verdict"], result["total"]["value"], result["vetoes"]),
                         ("veto", "0.000", ["EFFECT_MISSING:confirm_order@-"]))
        record = tb.execute_run("naive", tb.plan_calls()[:3], tb.PLACE_ORDER)
        self.assertEqual(tb.METRICS["violations"](record), tb._violations(no_orphan_reservation=1, no_orphan_charge=1))
        self.assertEqual(self.score([plan[0], plan[2], plan[3]], tb.PLACE_ORDER)["vetoes"],
                         ["EFFECT_MISSING:reserve_inventory@-"])
        # Without any effect nothing commits: a plan of reads only stays incomplete.
        reads = self.score([provider("query_logistics", {"order_ref": "30417"})], tb.PLACE_ORDER)
        self.assertEqual((reads["verdict"], reads["vetoes"]), ("incomplete", []))
        self.assertIn("EFFECT_MISSING", tb.scorer_config()["vetoes"]["plan"])

    def test_an_unreadable_call_is_unparseable_not_a_customer_veto(self):
        # A call no shape reads has no name; the allowed-tools check read that None as a tool the
        # customer may not use, and the verdict was "veto" instead of "unparseable".
        plan = [item.to_json() for item in tb.plan_calls()]
        for bad in (None, {"id": "c9", "name": 5, "arguments": "{}"}):
            with self.subTest(bad=bad):
                result = self.score([bad] + plan, tb.PLACE_ORDER)
                self.assertEqual((result["verdict"], result["vetoes"]), ("unparseable", []))

    def test_a_name_no_tool_has_is_never_echoed_in_a_veto(self):
        # The model's own text went into the veto as its tool: a lone surrogate made the output
        # line JSON that a portable reader refuses, and '@' or ':' made the veto ambiguous.
        result = self.score([provider("\ud800", "{}"), provider("cancel_order@9:x", "{}", "c2")], tb.PLACE_ORDER)
        self.assertEqual((result["verdict"], result["vetoes"]),
                         ("veto", ["CUSTOMER_NOT_PERMITTED:?@0", "CUSTOMER_NOT_PERMITTED:?@1"]))

    def test_key_reuse_with_the_same_intent_is_no_key_veto(self):
        refund = provider("refund_payment", REFUND)
        result = self.score([refund, {**refund, "id": "c2"}], tb.SCORER_CASES[2].expectation)
        self.assertEqual(result["vetoes"], ["DUPLICATE_EFFECT:refund_payment@1"])

    def test_an_invalid_call_gets_no_effect_veto(self):
        result = self.score([provider("refund_payment", {**REFUND, "order_ref": 20482})],
                            tb.SCORER_CASES[2].expectation)
        self.assertEqual((result["verdict"], result["vetoes"]), ("refused", []))

    def test_an_order_and_its_charge_in_another_currency_are_vetoed(self):
        # Both in USD (or CNY) agree with each other, so CURRENCY_MISMATCH had nothing to say and the
        # plan scored 1.000 "pass" on a request for EUR; the guarded run reconciled it.
        for currency in ("USD", "CNY"):
            with self.subTest(currency=currency):
                calls = tb.plan_calls((("create_order", ("currency",), currency),
                                       ("charge_payment", ("currency",), currency)))
                result = self.score([item.to_json() for item in calls], tb.PLACE_ORDER)
                self.assertEqual((result["verdict"], result["total"]["value"], result["vetoes"]),
                                 ("veto", "0.000", ["WRONG_CURRENCY:create_order/currency@0"]))
                record = run("guarded", calls)
                self.assertEqual((record["lifecycle"], record["refusal"], record["side_effects"]),
                                 (tb.REFUSED, [{"call": 0, "code": "ARGUMENT_MISMATCH", "path": "/currency"}], 0))
                naive = run("naive", calls)  # the state keeps the currency: not the state the request needs
                self.assertEqual((naive["state_after"]["orders"]["30417"]["currency"],
                                  naive["state_after"]["charges"]["CH-0001"]["currency"]), (currency, currency))
                self.assertNotEqual(tb.state_hash(naive["state_after"]), tb.state_hash(tb.thaw(tb.EXPECTED_COMPLETED_STATE)))
        self.assertEqual(self.record("SC23")["score"]["vetoes"], ["WRONG_CURRENCY:create_order/currency@0"])

    def test_a_charge_under_an_earlier_operations_key_is_vetoed(self):
        # The seeded order was paid under seed-charge-20481; a plan charging under that key scored
        # 1.000 "pass", and the guarded run left two charges under one key (single_charge).
        calls = tb.plan_calls((("charge_payment", ("idempotency_key",), "seed-charge-20481"),))
        result = self.score([item.to_json() for item in calls], tb.PLACE_ORDER)
        self.assertEqual((result["verdict"], result["total"]["value"], result["vetoes"]),
                         ("veto", "0.000", ["KEY_ALREADY_USED:charge_payment@2"]))
        self.assertEqual(tb.SEEDED_CHARGE_KEY, "seed-charge-20481")
        record = run("guarded", calls, initial=tb.seed_confirmed_order)
        self.assertEqual((record["lifecycle"], record["refusal"], record["side_effects"]),
                         (tb.REFUSED, [{"call": 2, "code": "KEY_ALREADY_USED", "path": "/idempotency_key"}], 0))
        self.assertEqual(tb.METRICS["violations"](record), tb._violations())
        self.assertEqual(self.record("SC24")["score"]["vetoes"], ["KEY_ALREADY_USED:charge_payment@2"])

    def test_the_goodwill_refund_passes_by_asking_for_the_confirmation(self):
        # The expected refund was vetoed (no second confirmation) and asking for that confirmation
        # scored 0.000 "incomplete": no answer could pass. Asking is the answer; a refund is vetoed.
        asking = {"content": [{"type": "text", "text": "Please confirm the refund of 600.00 EUR."}],
                  "role": "assistant", "stop_reason": "end_turn"}
        result = tb.score_response(asking, tb.GOODWILL)
        self.assertEqual((result["shape"], result["verdict"], result["total"]["value"], result["vetoes"]),
                         ("anthropic_messages", "pass", "1.000", []))
        refund = provider("refund_payment", {**REFUND, "amount_cents": 60_000, "reason": "other"})
        result = self.score([refund], tb.GOODWILL)
        self.assertEqual((result["verdict"], result["total"]["value"], result["vetoes"]),
                         ("veto", "0.000", ["FORBIDDEN_CALL:refund_payment@0", "CONFIRMATION_MISSING:refund_payment@0"]))
        self.assertEqual((self.record("SC27")["score"]["verdict"], self.record("SC27")["guarded"]["lifecycle"]),
                         ("pass", tb.RECONCILED))

    def test_a_delivery_is_judged_by_its_instant(self):
        # A delivery a day late scored 0.500 "incomplete", exactly as the right instant written
        # another way did: the window was compared as text.
        def schedule(window):
            return [provider("schedule_delivery", {**SCHEDULE, "window_start": window})]

        def guarded(window):
            return tb.execute_run("guarded", tb.calls_from_response({"tool_calls": schedule(window)}),
                                  tb.SCHEDULE_DELIVERY, initial=tb.seed_confirmed_order)

        for window in ("2026-12-03T10:00:00+01:00", "2026-12-03T09:00:00.000Z", "2026-12-03t09:00:00z"):
            with self.subTest(window=window):
                result = self.score(schedule(window), tb.SCHEDULE_DELIVERY)
                self.assertEqual((result["verdict"], result["total"]["value"], result["vetoes"]), ("pass", "1.000", []))
                self.assertEqual((guarded(window)["lifecycle"], guarded(window)["outcome"]), (tb.RECONCILED, "completed"))
        result = self.score(schedule("2026-12-04T09:00:00Z"), tb.SCHEDULE_DELIVERY)
        self.assertEqual((result["verdict"], result["total"]["value"], result["vetoes"]),
                         ("veto", "0.000", ["WRONG_TIME:schedule_delivery/window_start@0"]))
        self.assertEqual((guarded("2026-12-04T09:00:00Z")["lifecycle"], guarded("2026-12-04T09:00:00Z")["refusal"]),
                         (tb.REFUSED, [{"call": 0, "code": "ARGUMENT_MISMATCH", "path": "/window_start"}]))

    def test_a_value_the_request_never_named_is_fabricated(self):
        # The request names the customer's tier and the card on file; a gold tier and another card
        # scored 1.000 "pass" because neither field was fixed.
        cases = (("create_order", ("customer", "tier"), "gold", "FABRICATED_VALUE:create_order/customer/tier@0",
                  0, "/customer"),
                 ("charge_payment", ("payment_method", "token"), "tok_9999wxyz",
                  "FABRICATED_VALUE:charge_payment/payment_method/token@2", 2, "/payment_method"))
        for tool, path, value, veto, index, field in cases:
            with self.subTest(veto=veto):
                calls = tb.plan_calls(((tool, path, value),))
                result = self.score([item.to_json() for item in calls], tb.PLACE_ORDER)
                self.assertEqual((result["verdict"], result["total"]["value"], result["vetoes"]), ("veto", "0.000", [veto]))
                record = run("guarded", calls)
                self.assertEqual((record["lifecycle"], record["refusal"]),
                                 (tb.REFUSED, [{"call": index, "code": "ARGUMENT_MISMATCH", "path": field}]))
        # A refund's reason other than the one the request gave is made up as well.
        result = self.score([provider("refund_payment", {**REFUND, "reason": "other"})], tb.REFUND_DAMAGED)
        self.assertEqual((result["verdict"], result["vetoes"]), ("veto", ["FABRICATED_VALUE:refund_payment/reason@0"]))

    def test_every_scenario_names_every_value_its_effects_carry(self):
        # A value an expectation leaves unfixed is the model's only where MODEL_CHOSEN says where it
        # comes from instead; anything else an effect carries is named, so a different value is a veto.
        def leaves(schema, path=""):
            if schema["type"] != "object":
                return {path}
            return {leaf for name, child in schema["properties"].items() for leaf in leaves(child, f"{path}/{name}")}

        def fixed(value, path=""):
            return {leaf for name, child in value.items()
                    for leaf in (fixed(child, f"{path}/{name}") if isinstance(child, dict) else {f"{path}/{name}"})}

        for expectation in tb.SCORING_SCENARIOS.values():
            for expected in expectation.calls:
                if expected.name in tb.SIDE_EFFECT_TOOLS:
                    with self.subTest(scenario=expectation.name, tool=expected.name):
                        unnamed = leaves(tb.TOOLS[expected.name].schema) - fixed(tb.thaw(expected.arguments))
                        self.assertEqual({path for path in unnamed if f"*{path}" in tb.MODEL_CHOSEN
                                          or f"{expected.name}{path}" in tb.MODEL_CHOSEN}, unnamed)

    def test_a_read_before_its_prerequisite_lowers_the_score_only(self):
        expectation = tb.Expectation("x", (tb.ExpectedCall("refund_payment", {"order_ref": "20481"}),
                                           tb.ExpectedCall("query_logistics", {"order_ref": "20481"})), edges=((0, 1),))
        result = self.score([provider("query_logistics", {"order_ref": "20481"}),
                             provider("refund_payment", REFUND, "c2")], expectation)
        self.assertEqual((result["vetoes"], result["verdict"], result["total"]["value"]), ([], "incomplete", "0.000"))


class TestBusinessChecks(unittest.TestCase):
    def findings(self, calls, expectation):
        return [(f.code, f.path, f.call) for f in tb.validate_plan(calls, expectation)[1]]

    def expectation(self, **context):
        return tb.Expectation("x", (tb.ExpectedCall("refund_payment", {}),), context=context)

    def refund(self, amount):
        return call("refund_payment", {**REFUND, "amount_cents": amount})

    def test_second_confirmation_threshold_both_sides(self):
        self.assertEqual(tb.HIGH_VALUE_CENTS, 50_000)
        self.assertEqual(self.findings((self.refund(49_999),), self.expectation()), [])
        self.assertEqual(self.findings((self.refund(50_000),), self.expectation()),
                         [("CONFIRMATION_MISSING", "/amount_cents", 0)])
        self.assertEqual(self.findings((self.refund(50_000),), self.expectation(confirmed=True)), [])
        self.assertEqual(self.findings((self.refund(50_000),), self.expectation(confirmed=False)),
                         [("CONFIRMATION_MISSING", "/amount_cents", 0)])

    def test_permission_and_identity(self):
        self.assertEqual(self.findings((self.refund(100),), self.expectation(allowed_tools=("query_logistics",))),
                         [("CUSTOMER_NOT_PERMITTED", "/refund_payment", 0)])
        self.assertEqual(self.findings((self.refund(100),), self.expectation(allowed_tools=("refund_payment",))), [])
        wrong = tb.plan_calls((("create_order", ("customer", "id"), "C0001"),))
        self.assertEqual(self.findings(wrong, tb.PLACE_ORDER), [("CUSTOMER_MISMATCH", "/customer/id", 0)])

    def test_currency_comes_from_the_plan_or_the_context(self):
        usd = tb.plan_calls((("charge_payment", ("currency",), "USD"),))
        self.assertEqual(self.findings(usd, tb.PLACE_ORDER), [("CURRENCY_MISMATCH", "/currency", 2)])
        charge = call("charge_payment", plan_arguments("charge_payment", order_ref="20481", currency="USD"))
        known = tb.Expectation("x", (tb.ExpectedCall("charge_payment", {}),),
                               context={"orders": {"20481": {"currency": "EUR", "version": 1}}})
        self.assertEqual(self.findings((charge,), known), [("CURRENCY_MISMATCH", "/currency", 0)])
        unknown = tb.Expectation("x", (tb.ExpectedCall("charge_payment", {}),))
        self.assertEqual(self.findings((charge,), unknown), [])

    def test_order_version_both_sides(self):
        expectation = tb.Expectation("x", (tb.ExpectedCall("schedule_delivery", {}),), context={
            "orders": {"20481": {"currency": "EUR", "version": 2}}})
        stale = call("schedule_delivery", {**SCHEDULE, "order_version": 3})
        self.assertEqual(self.findings((stale,), expectation), [("VERSION_STALE", "/order_version", 0)])
        self.assertEqual(self.findings((call("schedule_delivery", SCHEDULE),), expectation), [])

    def test_a_version_that_is_no_integer_is_not_the_current_one(self):
        # Compared with Python's ==: true passed for version 1 and 1.0 for version 1 (no
        # VERSION_STALE), while "1" was stale; booleans are not integers anywhere else here.
        expectation = tb.Expectation("x", (tb.ExpectedCall("schedule_delivery", {}),), context={
            "orders": {"20481": {"currency": "EUR", "version": 1}}})
        # 1.0 is a number now (a double), and the contract's integer refuses it by type first.
        for value, code in ((True, "VERSION_STALE"), (1.0, "FIELD_TYPE"), ("1", "VERSION_STALE")):
            with self.subTest(value=value):
                odd = call("schedule_delivery", {**SCHEDULE, "order_version": value})
                self.assertEqual(self.findings((odd,), expectation)[-1:], [(code, "/order_version", 0)])
        self.assertEqual(self.findings((call("schedule_delivery", {**SCHEDULE, "order_version": 1}),), expectation), [])

    def test_the_sandbox_enforces_the_version_too(self):
        box = sandbox()
        tb.seed_confirmed_order(box)
        self.assertEqual(box.call("schedule_delivery", {**SCHEDULE, "order_version": 1}).code, "VERSION_CONFLICT")
        self.assertTrue(box.call("schedule_delivery", SCHEDULE).ok)
        self.assertEqual(box.orders["20481"]["delivery_window"], "2026-12-03T09:00:00Z")

    def test_call_ids_must_be_unique(self):
        calls = (call("query_logistics", {"order_ref": "20481"}, "same"),
                 call("query_logistics", {"order_ref": "20481"}, "same"))
        expectation = tb.Expectation("x", (tb.ExpectedCall("query_logistics", {}),) * 2)
        self.assertEqual(self.findings(calls, expectation), [("CALL_ID_REUSED", "/id", 1)])

    def test_a_key_an_earlier_operation_used_is_refused(self):
        used = tb.Expectation("x", (tb.ExpectedCall("refund_payment", {}),), context={"used_keys": ("seed-charge-20481",)})
        reused = call("refund_payment", {**REFUND, "idempotency_key": "seed-charge-20481"})
        self.assertEqual(self.findings((reused,), used), [("KEY_ALREADY_USED", "/idempotency_key", 0)])
        self.assertEqual(self.findings((call("refund_payment", REFUND),), used), [])
        self.assertEqual(self.findings((reused,), self.expectation()), [])
        self.assertEqual(tb.PLACE_ORDER.context["used_keys"], (tb.SEEDED_CHARGE_KEY,))

    def test_malformed_context_is_refused(self):
        for context in ({"nope": 1}, {"customer": 5}, {"allowed_tools": ("launch",)}, {"confirmed": 1},
                        {"orders": {"20481": {"currency": "EUR"}}}, {"orders": {"20481": {"currency": "EUR",
                                                                                          "version": "2"}}},
                        {"orders": []}, {"used_keys": "seed-charge-20481"}, {"used_keys": ("k-1", 1)}, "context"):
            with self.subTest(context=context):
                with self.assertRaises(tb.BenchError) as caught:
                    tb.check_expectation(tb.Expectation("x", (), context=context))
                self.assertEqual(caught.exception.code, "EXPECTATION_INVALID")
        for exclusive in ((("refund_payment",),), (("refund_payment", "refund_payment"),), (("a", "b"),)):
            with self.subTest(exclusive=exclusive):
                with self.assertRaises(tb.BenchError):
                    tb.check_expectation(tb.Expectation("x", (), exclusive=exclusive))


class TestFormats(unittest.TestCase):
    def test_date_time_exactly(self):
        good = ["2026-12-03T09:00:00Z", "2026-12-03t09:00:00z", "2024-02-29T23:59:60+01:00",
                "2026-12-03T09:00:00.123456-05:30", "0001-01-01T00:00:00Z"]
        bad = ["2026-02-30T09:00:00Z", "2023-02-29T09:00:00Z", "1900-02-29T00:00:00Z", "2026-13-01T00:00:00Z",
               "2026-12-00T00:00:00Z", "2026-12-03T24:00:00Z", "2026-12-03T09:60:00Z", "2026-12-03T09:58:60Z",
               "2026-12-03T09:00:00", "2026-12-03 09:00:00Z", "2026-12-03T09:00:00+24:00",
               "2026-12-03T09:00:00+01:60", "2026-12-03T9:00:00Z", "2026-12-03T09:00:00.Z",
               "２０２６-12-03T09:00:00Z", "2026-12-03T09:00:00Z\n", "2026-04-31T00:00:00Z"]
        for text in good:
            with self.subTest(text=text):
                self.assertTrue(tb.is_date_time(text))
        for text in bad:
            with self.subTest(text=text):
                self.assertFalse(tb.is_date_time(text))
        self.assertTrue(tb.is_date_time("2000-02-29T00:00:00Z"))

    def test_format_is_a_schema_finding(self):
        schema = tb.TOOLS["schedule_delivery"].schema
        self.assertEqual(tb.validate_arguments(schema, {**SCHEDULE, "window_start": "tomorrow"}),
                         (tb.Finding("FIELD_FORMAT", "/window_start"),))
        self.assertEqual(tb.validate_arguments(schema, SCHEDULE), ())

    def test_an_instant_is_compared_not_its_spelling(self):
        # Date-times were compared as text: a delivery a day late and the right instant written
        # with an offset both scored 0.500.
        right = tb.instant("2026-12-03T09:00:00Z")
        for text in ("2026-12-03T10:00:00+01:00", "2026-12-03T09:00:00.000Z", "2026-12-03t09:00:00z",
                     "2026-12-03T04:30:00-04:30", "2026-12-02T23:00:00-10:00"):
            with self.subTest(text=text):
                self.assertEqual(tb.instant(text), right)
        for text in ("2026-12-04T09:00:00Z", "2026-12-03T09:00:00.001Z", "2026-12-03T09:00:00+01:00"):
            with self.subTest(text=text):
                self.assertNotEqual(tb.instant(text), right)
        # A leap second is an instant of its own, not the next minute's first second.
        self.assertNotEqual(tb.instant("2016-12-31T23:59:60Z"), tb.instant("2017-01-01T00:00:00Z"))
        self.assertEqual(tb.instant("2016-12-31T23:59:60Z"), tb.instant("2017-01-01T00:59:60+01:00"))
        # Years datetime cannot hold are counted on the same calendar.
        self.assertEqual(tb.instant("0000-12-31T23:00:00-01:00"), tb.instant("0001-01-01T00:00:00Z"))
        self.assertLess(tb.instant("9999-12-31T23:59:59Z"), tb.instant("9999-12-31T23:59:59-23:59"))
        for text in ("2026-02-30T09:00:00Z", "tomorrow", None, 20261203):
            with self.subTest(text=text):
                self.assertIsNone(tb.instant(text))

    def test_an_unsupported_format_is_refused_by_name(self):
        for name in ("email", "date", "uri"):
            with self.subTest(name=name):
                with self.assertRaises(tb.BenchError) as caught:
                    tb.check_schema({"type": "string", "format": name})
                self.assertEqual(caught.exception.code, "FIELD_FORMAT_UNSUPPORTED")
        tb.check_schema({"type": "string", "format": "date-time"})


class TestResponseShapes(unittest.TestCase):
    """Every raw shape a real model produces reads into the same calls and the same score."""

    ARGS = {"order_ref": "20481"}

    def shapes(self):
        text = json.dumps(self.ARGS)
        return {
            "bench": {"tool_calls": [{"id": "c1", "name": "query_logistics", "arguments": text}]},
            "bare_list": [{"name": "query_logistics", "arguments": self.ARGS}],
            "openai_chat": {"id": "chatcmpl-1", "object": "chat.completion", "choices": [{"index": 0, "message": {
                "role": "assistant", "content": None, "tool_calls": [{"id": "call_a", "type": "function", "function": {
                    "name": "query_logistics", "arguments": text}}]}, "finish_reason": "tool_calls"}]},
            "openai_responses": {"id": "resp_1", "output": [
                {"type": "reasoning", "id": "rs_1", "summary": []},
                {"type": "function_call", "id": "fc_1", "call_id": "call_a", "name": "query_logistics",
                 "arguments": text}]},
            "anthropic_messages": {"id": "msg_1", "type": "message", "role": "assistant", "content": [
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_1", "name": "query_logistics", "input": self.ARGS}]},
            "gemini": {"candidates": [{"content": {"role": "model", "parts": [
                {"text": "Checking."}, {"functionCall": {"name": "query_logistics", "args": self.ARGS}}]}}]},
            "gemini_interactions": {"id": "v1_1", "object": "interaction", "status": "requires_action", "steps": [
                {"type": "thought", "signature": "c2ln"},
                {"type": "function_call", "id": "fc_1", "name": "query_logistics", "arguments": self.ARGS}]},
        }

    def test_every_shape_reads_and_passes(self):
        for name, response in self.shapes().items():
            with self.subTest(shape=name):
                shape, calls = tb.read_response(response)
                self.assertEqual(shape, name)
                result = tb.score_response(response, tb.SCORER_CASES[0].expectation)
                self.assertEqual((result["shape"], result["verdict"], result["total"]["value"]),
                                 (name, "pass", "1.000"))
                self.assertEqual(json.loads(calls[0]["arguments"]), self.ARGS)

    def test_shapes_without_ids_get_positional_ids(self):
        self.assertEqual(tb.read_response(self.shapes()["gemini"])[1][0]["id"], "call_1")
        self.assertEqual(tb.read_response([{"name": "a", "arguments": {}}, {"name": "b", "arguments": {}}])[1][1]["id"],
                         "call_2")

    def test_a_null_id_where_an_id_is_optional_is_no_id(self):
        # An SDK's dump of a call without an id writes "id": null.
        gemini = {"candidates": [{"content": {"role": "model", "parts": [
            {"functionCall": {"name": "query_logistics", "args": self.ARGS, "id": None}}]}}]}
        bare = [{"name": "query_logistics", "arguments": self.ARGS, "id": None}]
        for shape, response in (("gemini", gemini), ("bare_list", bare)):
            with self.subTest(shape=shape):
                self.assertEqual(tb.read_response(response)[1][0]["id"], "call_1")
                result = tb.score_response(response, tb.SCORER_CASES[0].expectation)
                self.assertEqual((result["verdict"], result["total"]["value"]), ("pass", "1.000"))

    def test_object_arguments_in_the_openai_shapes_are_read_like_text(self):
        # A harness that decoded the arguments before writing its responses down.
        shapes = self.shapes()
        chat, responses = shapes["openai_chat"], shapes["openai_responses"]
        chat["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = dict(self.ARGS)
        responses["output"][1]["arguments"] = dict(self.ARGS)
        mcp = {"output": [{"type": "mcp_call", "id": "mcp_1", "name": "query_logistics", "arguments": dict(self.ARGS)}]}
        legacy = {"choices": [{"message": {"role": "assistant", "content": None,
                                           "function_call": {"name": "query_logistics", "arguments": dict(self.ARGS)}}}]}
        for shape, response in (("openai_chat", chat), ("openai_responses", responses), ("openai_responses", mcp),
                                ("openai_chat", legacy)):
            with self.subTest(shape=shape, response=response):
                read, calls = tb.read_response(response)
                self.assertEqual((read, json.loads(calls[0]["arguments"])), (shape, self.ARGS))
                result = tb.score_response(response, tb.SCORER_CASES[0].expectation)
                self.assertEqual((result["verdict"], result["total"]["value"]), ("pass", "1.000"))

    def test_a_chat_message_without_tool_calls_is_zero_calls(self):
        response = {"choices": [{"message": {"role": "assistant", "content": "no", "tool_calls": None}}]}
        self.assertEqual(tb.read_response(response), ("openai_chat", []))

    def test_malformed_items_are_call_shape_findings(self):
        for response in ({"choices": [{"message": {"tool_calls": [{"id": "x", "type": "function"}]}}]},
                         {"output": [5]}, {"content": ["x"], "role": "assistant"},
                         {"candidates": [{"content": {"parts": [{"functionCall": "x"}]}}]},
                         [{"name": "q", "arguments": {}, "extra": 1}]):
            with self.subTest(response=str(response)[:50]):
                result = tb.score_response(response, tb.SCORER_CASES[0].expectation)
                self.assertEqual(result["calls"][0]["findings"][0]["code"], "CALL_SHAPE")

    QUERY = {"arguments": '{"order_ref": "20481"}', "call_id": "call_a", "name": "query_logistics",
             "type": "function_call"}
    CANCEL = {"idempotency_key": "k-cancel-20481", "order_ref": "20481", "reason": "customer_request"}

    def test_a_hidden_cancel_is_read_in_every_call_item_kind(self):
        # Each of these scored 1.000 "pass": the scorer read one item type per shape and skipped the
        # rest, so the cancel never reached it.
        cancel_text = json.dumps(self.CANCEL)
        query_block = {"type": "tool_use", "id": "toolu_1", "name": "query_logistics", "input": self.ARGS}
        chat_query = {"id": "call_a", "type": "function", "function": {"name": "query_logistics",
                                                                      "arguments": json.dumps(self.ARGS)}}
        cases = {
            "responses custom_tool_call": {"output": [self.QUERY, {
                "type": "custom_tool_call", "call_id": "call_b", "name": "cancel_order", "input": cancel_text}]},
            "responses mcp_call": {"output": [self.QUERY, {
                "type": "mcp_call", "id": "mcp_1", "server_label": "shop", "name": "cancel_order",
                "arguments": cancel_text, "output": "cancelled"}]},
            "anthropic mcp_tool_use": {"role": "assistant", "content": [query_block, {
                "type": "mcp_tool_use", "id": "mcptoolu_1", "server_name": "shop", "name": "cancel_order",
                "input": self.CANCEL}]},
            "interactions mcp_server_tool_call": self.interaction([self.STEP_QUERY, {
                "type": "mcp_server_tool_call", "id": "mcp_1", "server_name": "shop", "name": "cancel_order",
                "arguments": self.CANCEL}]),
            "chat legacy function_call": {"choices": [{"message": {
                "role": "assistant", "tool_calls": [chat_query],
                "function_call": {"name": "cancel_order", "arguments": cancel_text}}}]},
            "chat custom tool call": {"choices": [{"message": {"role": "assistant", "tool_calls": [
                chat_query, {"id": "call_b", "type": "custom", "custom": {"name": "cancel_order", "input": cancel_text}}]}}]},
        }
        for name, response in cases.items():
            with self.subTest(case=name):
                result = tb.score_response(response, tb.READ_ONLY)
                self.assertEqual((result["verdict"], result["total"]["value"], result["vetoes"]),
                                 ("veto", "0.000", ["FORBIDDEN_CALL:cancel_order@1"]))
        # A local shell command is no tool the plan may use: read under a name no contract has, refused.
        shell = {"output": [self.QUERY, {"type": "local_shell_call", "id": "lsh_1", "call_id": "call_b",
                                         "status": "completed",
                                         "action": {"type": "exec", "command": ["cancel_order", "20481"], "env": {}}}]}
        result = tb.score_response(shell, tb.READ_ONLY)
        self.assertEqual((result["verdict"], result["total"]["value"], [item["name"] for item in result["calls"]],
                          result["calls"][1]["findings"]),
                         ("refused", "0.000", ["query_logistics", tb.LOCAL_SHELL_TOOL],
                          [{"call": 1, "code": "TOOL_UNKNOWN", "path": ""}]))

    def test_an_item_the_scorer_cannot_read_makes_the_response_unreadable(self):
        # An untyped block, an item of a kind no table lists and a second shape in one envelope
        # were skipped, and the query beside them scored 1.000 "pass".
        untyped_query = {name: value for name, value in self.QUERY.items() if name != "type"}
        chat = {"role": "assistant", "tool_calls": [{"id": "call_a", "type": "function", "function": {
            "name": "query_logistics", "arguments": json.dumps(self.ARGS)}}]}
        cases = {
            "anthropic untyped block": ({"role": "assistant", "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "query_logistics", "input": self.ARGS},
                {"id": "toolu_2", "name": "cancel_order", "input": self.CANCEL}]}, "RESPONSE_ITEM_UNREAD"),
            "responses untyped item": ({"output": [self.QUERY, {**untyped_query, "name": "cancel_order"}]},
                                       "RESPONSE_ITEM_UNREAD"),
            "responses unknown item": ({"output": [self.QUERY, {"type": "computer_call", "call_id": "call_b",
                                                                "action": {"type": "click", "x": 1, "y": 2}}]},
                                       "RESPONSE_ITEM_UNREAD"),
            "gemini unknown part": ({"candidates": [{"content": {"parts": [
                {"functionCall": {"name": "query_logistics", "args": self.ARGS}},
                {"executableCode": {"language": "PYTHON", "code": "cancel_order('20481')"}}]}}]},
                "RESPONSE_ITEM_UNREAD"),
            "two shapes in one envelope": ({"choices": [{"message": chat}], "role": "assistant", "content": [
                {"type": "tool_use", "id": "toolu_2", "name": "cancel_order", "input": self.CANCEL}]},
                "RESPONSE_SHAPE"),
            "two choices": ({"choices": [{"message": chat}, {"message": {**chat, "function_call": {
                "name": "cancel_order", "arguments": json.dumps(self.CANCEL)}}}]}, "RESPONSE_SHAPE"),
        }
        for name, (response, code) in cases.items():
            with self.subTest(case=name):
                result = tb.score_response(response, tb.READ_ONLY)
                self.assertEqual((result["error"], result["verdict"], result["total"]["value"], result["shape"]),
                                 (code, "unreadable_shape", "0.000", None))

    def test_a_malformed_gemini_call_is_the_models_failure(self):
        # Gemini reports a call it could not form by its finish reason, with no content: that was
        # read as a shape the scorer does not know and left out of pass^k.
        cases = (({"finishReason": "MALFORMED_FUNCTION_CALL", "finishMessage": "Malformed function call: x(",
                   "index": 0}, "RESPONSE_MALFORMED_CALL"),
                 ({"finish_reason": "MALFORMED_FUNCTION_CALL", "content": {"parts": [], "role": "model"}},
                  "RESPONSE_MALFORMED_CALL"),
                 ({"finishReason": "UNEXPECTED_TOOL_CALL"}, "RESPONSE_MALFORMED_CALL"),
                 ({"finishReason": "TOO_MANY_TOOL_CALLS"}, "RESPONSE_TOO_MANY_CALLS"))
        for candidate, code in cases:
            with self.subTest(candidate=candidate):
                result = tb.score_response({"candidates": [candidate]}, tb.READ_ONLY)
                self.assertEqual((result["error"], result["verdict"], result["total"]["value"]),
                                 (code, "unparseable", "0.000"))

    def finished(self, shape: str, said) -> dict:
        # The shape's response with its own word on how the turn ended; None leaves the field out.
        response = copy.deepcopy(self.shapes()[shape])
        holder = {"openai_chat": lambda: response["choices"][0], "gemini": lambda: response["candidates"][0]}.get(
            shape, lambda: response)()
        field = {"openai_chat": "finish_reason", "openai_responses": "status", "anthropic_messages": "stop_reason",
                 "gemini": "finishReason"}[shape]
        holder.pop(field, None)
        if said is not None:
            holder[field] = said
        return response

    def test_a_turn_the_provider_reports_unfinished_is_no_whole_plan(self):
        # Each was read as if finished: a response cut at max_tokens with no call yet, or with a
        # call an SDK closed into an object, passed (the goodwill request's "call nothing" answer).
        unfinished = {"openai_chat": ("length", "content_filter"),
                      "openai_responses": ("incomplete", "in_progress", "queued", "failed", "cancelled"),
                      "anthropic_messages": ("max_tokens", "model_context_window_exceeded", "pause_turn", "refusal"),
                      "gemini": ("MAX_TOKENS", "SAFETY", "RECITATION", "OTHER", "BLOCKLIST", "PROHIBITED_CONTENT",
                                 "SPII", "LANGUAGE")}
        for shape, reasons in unfinished.items():
            for reason in reasons:
                with self.subTest(shape=shape, reason=reason):
                    result = tb.score_response(self.finished(shape, reason), tb.READ_ONLY)
                    self.assertEqual((result["error"], result["verdict"], result["total"]["value"]),
                                     ("RESPONSE_UNFINISHED", "unparseable", "0.000"))
        cut = {"id": "msg_1", "type": "message", "role": "assistant", "stop_reason": "max_tokens",
               "content": [{"type": "text", "text": "A refund of 600.00 EUR"}]}
        self.assertEqual(tb.score_response(cut, tb.GOODWILL)["verdict"], "unparseable")
        self.assertEqual(tb.score_response({**cut, "stop_reason": "end_turn"}, tb.GOODWILL)["verdict"], "pass")
        # What a finished turn says, and no word at all (absent or null), read as before.
        finished = {"openai_chat": ("stop", "tool_calls", "function_call", None),
                    "openai_responses": ("completed", None), "anthropic_messages": ("end_turn", "tool_use",
                                                                                    "stop_sequence", None),
                    "gemini": ("STOP", None)}
        for shape, reasons in finished.items():
            for reason in reasons:
                with self.subTest(shape=shape, reason=reason):
                    self.assertEqual(tb.score_response(self.finished(shape, reason), tb.READ_ONLY)["verdict"], "pass")
        self.assertEqual(tb.score_response({**self.finished("anthropic_messages", None), "stop_reason": None},
                                           tb.READ_ONLY)["verdict"], "pass")
        # A word the scorer does not know, or of another type, says nothing it can rely on.
        for shape, said in (("openai_chat", "STOP"), ("openai_responses", "done"), ("anthropic_messages", "compaction"),
                            ("gemini", "FINISH_REASON_UNSPECIFIED"), ("gemini", ["STOP"]), ("openai_chat", 1)):
            with self.subTest(shape=shape, said=said):
                result = tb.score_response(self.finished(shape, said), tb.READ_ONLY)
                self.assertEqual((result["error"], result["verdict"]), ("RESPONSE_SHAPE", "unreadable_shape"))
        # Gemini's two spellings of the field must agree.
        both = self.finished("gemini", "STOP")
        both["candidates"][0]["finish_reason"] = "MAX_TOKENS"
        self.assertEqual(tb.score_response(both, tb.READ_ONLY)["error"], "RESPONSE_SHAPE")
        both["candidates"][0]["finish_reason"] = "STOP"
        self.assertEqual(tb.score_response(both, tb.READ_ONLY)["verdict"], "pass")
        self.assertEqual(tb.scorer_config()["finish"]["anthropic_messages"], {
            "read": ["end_turn", "stop_sequence", "tool_use"],
            "refused": dict.fromkeys(["max_tokens", "model_context_window_exceeded", "pause_turn", "refusal"],
                                     "RESPONSE_UNFINISHED")})

    def test_snake_case_gemini_parts_and_legacy_chat_calls_are_read(self):
        # Both were dropped: the query was never seen and the plan scored 0.000 "incomplete".
        gemini = {"candidates": [{"content": {"role": "model", "parts": [
            {"function_call": {"name": "query_logistics", "args": self.ARGS}}]}, "finish_reason": "STOP"}]}
        legacy = {"choices": [{"finish_reason": "function_call", "message": {
            "role": "assistant", "content": None,
            "function_call": {"name": "query_logistics", "arguments": json.dumps(self.ARGS)}}}]}
        for shape, response in (("gemini", gemini), ("openai_chat", legacy)):
            with self.subTest(shape=shape):
                self.assertEqual(tb.read_response(response), (shape, [
                    {"arguments": json.dumps(self.ARGS), "id": "call_1", "name": "query_logistics"}]))
                result = tb.score_response(response, tb.READ_ONLY)
                self.assertEqual((result["shape"], result["verdict"], result["total"]["value"]),
                                 (shape, "pass", "1.000"))

    def test_made_up_ids_never_collide_with_real_ones(self):
        # The second call was given call_2, the id the first was sent with: a false CALL_ID_REUSED veto.
        two = tb.Expectation("x", (tb.ExpectedCall("query_logistics", {"order_ref": "20481"}),) * 2)
        response = [{"id": "call_2", "name": "query_logistics", "arguments": self.ARGS},
                    {"name": "query_logistics", "arguments": self.ARGS}]
        self.assertEqual([item["id"] for item in tb.read_response(response)[1]], ["call_2", "call_2_1"])
        result = tb.score_response(response, two)
        self.assertEqual((result["verdict"], result["total"]["value"], result["vetoes"]), ("pass", "1.000", []))
        crowded = [{"id": "call_2", "name": "query_logistics", "arguments": self.ARGS},
                   {"name": "query_logistics", "arguments": self.ARGS},
                   {"id": "call_2_1", "name": "query_logistics", "arguments": self.ARGS}]
        self.assertEqual([item["id"] for item in tb.read_response(crowded)[1]], ["call_2", "call_2_2", "call_2_1"])
        # Two real ids that are the same are still the model's: CALL_ID_REUSED.
        twice = [{"id": "same", "name": "query_logistics", "arguments": self.ARGS}] * 2
        self.assertEqual(tb.score_response(twice, two)["vetoes"], ["CALL_ID_REUSED:query_logistics@1"])

    def test_object_arguments_go_through_the_strict_decoder(self):
        response = {"content": [{"type": "tool_use", "id": "t1", "name": "query_logistics",
                                 "input": {"order_ref": "\udc00"}}], "role": "assistant"}
        result = tb.score_response(response, tb.SCORER_CASES[0].expectation)
        self.assertEqual(result["calls"][0]["findings"][0]["code"], "ARGS_NOT_PORTABLE")
        response["content"][0]["input"] = "not an object"
        result = tb.score_response(response, tb.SCORER_CASES[0].expectation)
        self.assertEqual(result["calls"][0]["findings"][0]["code"], "ARGS_NOT_JSON")

    # Gemini Interactions: a finished interaction, its steps read by type and its status checked.
    STEP_QUERY = {"type": "function_call", "id": "fc_1", "name": "query_logistics", "arguments": {"order_ref": "20481"}}

    @staticmethod
    def interaction(steps, status: str = "requires_action", **fields) -> dict:
        return {"id": "v1_turn", "object": "interaction", "model": "m", "status": status, "steps": steps, **fields}

    def test_interaction_steps_are_read_by_type(self):
        steps = [{"type": "user_input", "content": [{"type": "text", "text": "Where is 20481?"}]},
                 {"type": "function_result", "call_id": "fc_0", "name": "query_logistics", "result": "in transit",
                  "is_error": False},
                 {"type": "thought", "signature": "c2ln", "summary": [{"type": "text", "text": "Look it up."}]},
                 {"type": "model_output", "content": [{"type": "text", "text": "Checking."}]},
                 self.STEP_QUERY,
                 {"type": "mcp_server_tool_call", "id": "mcp_1", "server_name": "shop", "name": "query_logistics",
                  "arguments": {"order_ref": "20482"}},
                 {"type": "mcp_server_tool_result", "call_id": "mcp_1", "name": "query_logistics", "result": "x"}]
        self.assertEqual(tb.read_response(self.interaction(steps)), ("gemini_interactions", [
            {"arguments": '{"order_ref": "20481"}', "id": "fc_1", "name": "query_logistics"},
            {"arguments": '{"order_ref": "20482"}', "id": "mcp_1", "name": "query_logistics"}]))
        self.assertEqual(tb.read_response(self.interaction([], "completed")), ("gemini_interactions", []))
        self.assertEqual(tb._item_table(tb.GEMINI_INTERACTION_STEPS), {
            "calls": ["function_call", "mcp_server_tool_call"],
            "no_call": ["function_result", "mcp_server_tool_result", "model_output", "thought", "user_input"]})

    def test_interaction_arguments_are_read_like_the_other_object_shapes(self):
        # As an object or as text, the same decoder: the value an Anthropic `input` reads to, and the
        # text an OpenAI shape's object arguments are re-encoded into.
        as_text = {**self.STEP_QUERY, "arguments": json.dumps(self.ARGS)}
        self.assertEqual(tb.read_response(self.interaction([as_text]))[1],
                         tb.read_response(self.interaction([self.STEP_QUERY]))[1])
        responses = {"output": [{"type": "function_call", "call_id": "fc_1", "name": "query_logistics",
                                 "arguments": dict(self.ARGS)}]}
        self.assertEqual(tb.read_response(self.interaction([self.STEP_QUERY]))[1], tb.read_response(responses)[1])
        deep = {"a": json.loads("[" * 40 + "]" * 40)}
        for arguments, code in (({"order_ref": "\udc00"}, "ARGS_NOT_PORTABLE"),
                                ({"order_ref": 1e400}, "ARGS_NONFINITE"),
                                (deep, "ARGS_TOO_DEEP"), ({"order_ref": {1, 2}}, "ARGS_NOT_JSON"),
                                ("not an object", "ARGS_NOT_JSON"), ('["20481"]', "ARGS_NOT_OBJECT"),
                                (["20481"], "ARGS_NOT_STRING"), (None, "ARGS_NOT_STRING")):
            anthropic = {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "query_logistics",
                                                           "input": arguments}]}
            with self.subTest(arguments=str(arguments)[:40]):
                found = [tb.score_response(response, tb.READ_ONLY)["calls"][0]["findings"][0]["code"]
                         for response in (self.interaction([{**self.STEP_QUERY, "arguments": arguments}]), anthropic)]
                self.assertEqual(found, [code, code])
        missing = {name: value for name, value in self.STEP_QUERY.items() if name != "arguments"}
        result = tb.score_response(self.interaction([missing]), tb.READ_ONLY)
        self.assertEqual((result["verdict"], result["calls"][0]["findings"][0]["code"]),
                         ("unparseable", "ARGS_NOT_STRING"))

    def test_interaction_call_ids_are_required(self):
        # The wire requires the id (the function result echoes it): none, or null, is the model's
        # malformed call, as in the Responses and Anthropic shapes; Gemini's optional id is made up.
        no_id = {name: value for name, value in self.STEP_QUERY.items() if name != "id"}
        cases = {"no id": (self.interaction([no_id]), {"output": [{**self.QUERY, "call_id": None}]}),
                 "null id": (self.interaction([{**self.STEP_QUERY, "id": None}]),
                             {"content": [{"type": "tool_use", "id": None, "name": "query_logistics",
                                           "input": self.ARGS}], "role": "assistant"})}
        for name, responses in cases.items():
            for response in responses:
                with self.subTest(case=name, response=str(response)[:40]):
                    result = tb.score_response(response, tb.READ_ONLY)
                    self.assertEqual((result["verdict"], result["calls"][0]["findings"][0]["code"]),
                                     ("unparseable", "CALL_SHAPE"))
        result = tb.score_response(self.interaction([{**self.STEP_QUERY, "id": "fc_9"}]), tb.READ_ONLY)
        self.assertEqual((result["verdict"], tb.read_response(self.interaction([self.STEP_QUERY]))[1][0]["id"]),
                         ("pass", "fc_1"))
        twice = self.interaction([self.STEP_QUERY, {**self.STEP_QUERY, "arguments": {"order_ref": "20481"}}])
        two = tb.Expectation("x", (tb.ExpectedCall("query_logistics", {"order_ref": "20481"}),) * 2)
        self.assertEqual(tb.score_response(twice, two)["vetoes"], ["CALL_ID_REUSED:query_logistics@1"])

    def test_interaction_status_decides_whether_the_steps_are_read(self):
        for status in ("requires_action", "completed"):
            with self.subTest(status=status):
                result = tb.score_response(self.interaction([self.STEP_QUERY], status), tb.READ_ONLY)
                self.assertEqual((result["shape"], result["verdict"], result["total"]["value"]),
                                 ("gemini_interactions", "pass", "1.000"))
        # A turn that did not finish is no whole plan, with calls or without: the model's failed trial.
        unfinished = ("in_progress", "queued", "incomplete", "budget_exceeded", "requires_continuation", "failed",
                      "cancelled")
        self.assertEqual({status for status, code in tb.GEMINI_INTERACTION_STATUS.items() if code}, set(unfinished))
        for status in unfinished:
            for steps in ([self.STEP_QUERY], [{"type": "model_output", "content": [{"type": "text", "text": "I"}]}]):
                with self.subTest(status=status, step=steps[0]["type"]):
                    result = tb.score_response(self.interaction(steps, status), tb.GOODWILL)
                    self.assertEqual((result["error"], result["verdict"], result["total"]["value"]),
                                     ("RESPONSE_UNFINISHED", "unparseable", "0.000"))
        # A status the scorer does not know, or none, says nothing it can rely on: unreadable.
        no_status = {name: value for name, value in self.interaction([self.STEP_QUERY]).items() if name != "status"}
        for response in (self.interaction([self.STEP_QUERY], "requires_approval"),
                         self.interaction([self.STEP_QUERY], "COMPLETED"), {**no_status, "status": None},
                         {**no_status, "status": ["completed"]}, no_status, {"steps": [self.STEP_QUERY]}):
            with self.subTest(response=str(response)[:60]):
                result = tb.score_response(response, tb.READ_ONLY)
                self.assertEqual((result["error"], result["verdict"]), ("RESPONSE_SHAPE", "unreadable_shape"))
        # A finished turn that asks for a confirmation and calls nothing passes.
        asks = self.interaction([{"type": "model_output", "content": [{"type": "text", "text": "Confirm?"}]}],
                                "completed")
        self.assertEqual(tb.score_response(asks, tb.GOODWILL)["verdict"], "pass")

    def test_an_interaction_step_the_scorer_cannot_read_makes_it_unreadable(self):
        # A built-in tool's step, like Gemini's executableCode part, could hold a call it never sees.
        unread = ({"type": "code_execution_call", "id": "ce_1", "arguments": {"code": "cancel_order('20481')"}},
                  {"type": "code_execution_result", "call_id": "ce_1", "result": "cancelled"},
                  {"type": "google_search_call", "id": "gs_1", "arguments": {"queries": ["order 20481"]}},
                  {"type": "url_context_call", "id": "uc_1", "arguments": {"urls": ["https://example.com"]}},
                  {"id": "fc_2", "name": "cancel_order", "arguments": self.CANCEL},
                  {"type": None, "id": "fc_2", "name": "cancel_order", "arguments": self.CANCEL},
                  {"type": "function_call_v2", "id": "fc_2", "name": "cancel_order", "arguments": self.CANCEL})
        for step in unread:
            with self.subTest(step=str(step)[:50]):
                result = tb.score_response(self.interaction([self.STEP_QUERY, step]), tb.READ_ONLY)
                self.assertEqual((result["error"], result["verdict"], result["shape"]),
                                 ("RESPONSE_ITEM_UNREAD", "unreadable_shape", None))
        # A step that is no object at all is the model's malformed call.
        result = tb.score_response(self.interaction([self.STEP_QUERY, "cancel_order"]), tb.READ_ONLY)
        self.assertEqual((result["verdict"], result["calls"][1]["findings"][0]["code"]), ("unparseable", "CALL_SHAPE"))

    def test_an_interaction_beside_another_shape_or_revision_is_unreadable(self):
        cancel = {"type": "function_call", "id": "fc_2", "name": "cancel_order", "arguments": self.CANCEL}
        gemini = [{"content": {"parts": [{"functionCall": {"name": "cancel_order", "args": self.CANCEL}}]}}]
        cases = {"steps not a list": self.interaction({"0": self.STEP_QUERY}),
                 "steps and candidates": self.interaction([self.STEP_QUERY], candidates=gemini),
                 "steps and output": self.interaction([self.STEP_QUERY], output=[{**self.QUERY, "call_id": "c2"}]),
                 "steps and outputs": self.interaction([self.STEP_QUERY], outputs=[cancel]),
                 "outputs alone": {"id": "v1_turn", "status": "requires_action", "outputs": [self.STEP_QUERY]},
                 "steps and tool_calls": self.interaction([], tool_calls=[provider("cancel_order", self.CANCEL)])}
        for name, response in cases.items():
            with self.subTest(case=name):
                result = tb.score_response(response, tb.READ_ONLY)
                self.assertEqual((result["error"], result["verdict"]), ("RESPONSE_SHAPE", "unreadable_shape"))
        # The interaction's other fields (its input, tools, usage, output_text) are no second shape.
        plain = self.interaction([self.STEP_QUERY], input=[cancel], tools=[{"type": "function", "name": "x"}],
                                 output_text="Checking.", usage={"total_tokens": 5}, previous_interaction_id="v1_0")
        self.assertEqual(tb.score_response(plain, tb.READ_ONLY)["verdict"], "pass")

    def test_the_interaction_shape_changes_no_other_shapes_reading(self):
        # Every other shape reads and scores as it did, key for key.
        for name, response in self.shapes().items():
            if name == "gemini_interactions":
                continue
            with self.subTest(shape=name):
                self.assertEqual(tb.read_response(response)[0], name)
                self.assertNotIn("steps", response if isinstance(response, dict) else {})
        self.assertEqual([name for name, _marker, _extract in tb.RESPONSE_SHAPES],
                         ["bench", "bare_list", "openai_chat", "openai_responses", "anthropic_messages", "gemini",
                          "gemini_interactions"])
        self.assertEqual(len({marker for _name, marker, _extract in tb.RESPONSE_SHAPES}), len(tb.RESPONSE_SHAPES))


# ================================================================================================
# 14b. The headline chart
# ================================================================================================

SVG: Final = "{http://www.w3.org/2000/svg}"


def chart_parts(data: bytes) -> tuple[list[ElementTree.Element], list[str]]:
    """The chart's bars and the text of every label, in drawing order."""
    root = ElementTree.fromstring(data)
    bars = [rect for rect in root.iter(SVG + "rect") if rect.get("width") == str(tb.BAR_WIDTH)]
    return bars, [text.text for text in root.iter(SVG + "text")]


class TestHeadlineChart(unittest.TestCase):
    def test_the_committed_chart_is_drawn_from_the_committed_summary(self):
        with open(tb.RESULTS_DIR / tb.SUMMARY_FILE, "rb") as handle:
            summary = json.loads(handle.read())
        with open(tb.RESULTS_DIR / tb.HEADLINE_FILE, "rb") as handle:
            self.assertEqual(handle.read(), tb.headline_svg(summary))

    def test_a_fresh_run_draws_the_committed_chart(self):
        self.assertEqual(bench().headline_bytes(), tb.headline_svg(json.loads(bench().summary_bytes())))
        with open(tb.RESULTS_DIR / tb.HEADLINE_FILE, "rb") as handle:
            self.assertEqual(handle.read(), bench().headline_bytes())

    def test_the_chart_is_the_same_bytes_under_any_hash_seed(self):
        script = ("import hashlib, json, sys; sys.path.insert(0, sys.argv[1]); import transaction_bench as tb; "
                  "summary = json.loads((tb.RESULTS_DIR / tb.SUMMARY_FILE).read_bytes()); "
                  "print(hashlib.sha256(tb.headline_svg(summary)).hexdigest())")
        digests = set()
        for seed in ("0", "1", "4242"):
            env = dict(os.environ, PYTHONHASHSEED=seed, PYTHONDONTWRITEBYTECODE="1")
            result = subprocess.run([sys.executable, "-B", "-c", script, str(HERE)], capture_output=True, text=True,
                                    env=env, timeout=120)
            self.assertEqual((result.returncode, result.stderr), (0, ""))
            digests.add(result.stdout.strip())
        self.assertEqual(digests, {hashlib.sha256(bench().headline_bytes()).hexdigest()})

    def test_each_bar_is_its_share_in_whole_pixels(self):
        bars, _ = chart_parts(bench().headline_bytes())
        rows = {(row["depth"], row["orchestrator"]): row for row in bench().summary["sweep"]["depths"]}
        expected = [tb.scaled(rows[depth, name]["unsafe"], rows[depth, name]["runs"], tb.PLOT_HEIGHT)
                    for depth in range(4) for name, _ in tb.SERIES]
        expected += [tb.scaled(rows[depth, name]["live"], rows[depth, name]["completable"], tb.PLOT_HEIGHT)
                     for depth in range(4) for name, _ in tb.SERIES]
        self.assertEqual([int(bar.get("height")) for bar in bars], expected)
        self.assertEqual([bar.get("fill") for bar in bars], [colour for _ in range(8) for _, colour in tb.SERIES])
        self.assertEqual(expected[:8], [0, 0, 64, 0, 104, 0, 119, 0])  # naive 18/56, 827/1596, 1397/2340; guarded 0
        for bar in bars:
            self.assertEqual(int(bar.get("y")) + int(bar.get("height")), tb.PLOT_TOP + tb.PLOT_HEIGHT)

    def test_the_labels_say_what_the_summary_says(self):
        _, texts = chart_parts(bench().headline_bytes())
        for label in ("0%", "32%", "52%", "60%", "0.904", "0.819", "0.754", "0.992", "1.000", "floor 9/10",
                      "depth 3", "2340 of 30856", "1 run", "56 runs",
                      "Sweep verdict guarded: PASS, 0 unsafe runs of 3993, liveness 3319/3335 = 0.995 (floor 9/10)",
                      "Sweep verdict naive: FAIL, 2242 unsafe runs of 3993, liveness 2611/3335 = 0.783 (floor 9/10)"):
            self.assertIn(label, texts)
        self.assertTrue(texts[0].startswith("tool-transaction-bench fault sweep, seed 20240531: 3993 fault sets"))

    def test_scaled_rounds_half_up_in_integers(self):
        for part, whole, size, expected in ((1, 2, 1, 1), (1, 3, 200, 67), (2, 3, 200, 133), (0, 5, 200, 0),
                                            (5, 5, 200, 200), (1, 0, 200, 0), (827, 1596, 100, 52)):
            with self.subTest(part=part, whole=whole, size=size):
                self.assertEqual(tb.scaled(part, whole, size), expected)

    def test_text_from_the_summary_is_escaped(self):
        summary = json.loads(bench().summary_bytes())
        summary["sweep"]["depths"][3]["liveness"] = "<b>&</b>"
        data = tb.headline_svg(summary)
        self.assertIn(b"&lt;b&gt;&amp;&lt;/b&gt;", data)
        self.assertIn("<b>&</b>", chart_parts(data)[1])

    def test_a_changed_chart_fails_the_check(self):
        with tempfile.TemporaryDirectory() as scratch:
            tb.write_results(bench(), Path(scratch))
            chart = Path(scratch) / tb.HEADLINE_FILE
            with open(chart, "rb") as handle:
                data = handle.read()
            with open(chart, "wb") as handle:
                handle.write(data.replace(b">32%<", b">33%<", 1))
            line = data[:data.index(b">32%<")].count(b"\n") + 1
            self.assertEqual(tb.check_results(Path(scratch), bench()), [f"headline.svg: line {line} differs from a fresh run"])
            os.remove(chart)
            self.assertEqual(tb.check_results(Path(scratch), bench()), ["headline.svg: missing or unreadable"])


# ================================================================================================
# 15. Bench: run_all, result files, check
# ================================================================================================

class TestBenchResults(unittest.TestCase):
    def test_the_run_passes(self):
        self.assertEqual((bench().passed, bench().failures), (True, ()))
        self.assertEqual(bench().summary["runs"], {"controls": 5, "scenarios": 14, "total": 19})

    def test_raw_file_layout(self):
        lines = raw_lines()
        self.assertEqual([line["kind"] for line in lines[:49]], ["scenario"] * 14 + ["control"] * 5 + ["scorer"] * 30)
        self.assertEqual(len(lines), 49 + 2 * 3993)
        self.assertEqual(bench().summary["raw_results"], {"lines": 49 + 2 * 3993, "sha256": hashlib.sha256(bench().raw)
                                                          .hexdigest()})

    def test_every_line_is_canonical_and_full_records_are_sealed(self):
        lines = raw_lines()
        for text, line in zip(bench().raw.splitlines(), lines):
            self.assertEqual(tb.canonical_json(line), text)
        for line in lines[:49]:
            self.assertEqual(tb.seal(line)["record_sha256"], line["record_sha256"])

    def test_a_sweep_line_keeps_the_digest_of_its_reproducible_full_record(self):
        line = next(line for line in raw_lines() if line["run_id"] == "W00100/naive")
        faults = tuple(tb.Fault(*fault) for fault in line["faults"])
        record = tb.seal(tb.execute_run("naive", tb.plan_calls(), tb.PLACE_ORDER, faults=faults))
        self.assertEqual(record["record_sha256"], line["record_sha256"])
        # 1 empty + 56 singles precede it: pair 43 from atom 0, atom 43 = 5 tools x 8 kinds + 3.
        self.assertEqual(line["faults"], [["timeout_before_effect", "create_order", 1],
                                          ["ack_lost", "release_inventory", 1]])

    def test_full_records_keep_what_the_issue_asks_for(self):
        for line in raw_lines()[:19]:
            with self.subTest(run=line["run_id"]):
                self.assertLessEqual({"state_before", "state_after", "diff", "trace", "compensation_order",
                                      "assertions", "record_sha256", "seed"}, set(line))
                self.assertEqual(line["seed"], tb.SEED)

    def test_rerun_is_byte_identical(self):
        # The full run's identity is test_committed_results_match_a_fresh_run (and --check in CI);
        # here two fresh runs of a small sweep are compared, bytes and files.
        first_run, again = tb.run_all(sweep_plan=SMALL_SWEEP), tb.run_all(sweep_plan=SMALL_SWEEP)
        self.assertEqual((again.raw, again.summary_bytes()), (first_run.raw, first_run.summary_bytes()))
        with tempfile.TemporaryDirectory() as first, tempfile.TemporaryDirectory() as second:
            tb.write_results(first_run, Path(first))
            tb.write_results(again, Path(second))
            for name in (tb.RAW_FILE, tb.SUMMARY_FILE, tb.HEADLINE_FILE):
                with open(Path(first) / name, "rb") as a, open(Path(second) / name, "rb") as b:
                    self.assertEqual(a.read(), b.read())

    def test_another_seed_changes_only_seeded_content(self):
        small, other = tb.run_all(sweep_plan=SMALL_SWEEP), tb.run_all(seed=1, sweep_plan=SMALL_SWEEP)
        self.assertEqual(other.summary["seed"], 1)
        self.assertEqual(other.summary["sweep"]["invariants"], small.summary["sweep"]["invariants"])
        self.assertNotEqual(other.raw, small.raw)

    def test_committed_results_match_a_fresh_run(self):
        self.assertEqual(tb.check_results(tb.RESULTS_DIR, bench()), [])

    @mock.patch.object(txcli, "run_all", cached_run_all)
    def test_check_fails_when_one_byte_changes(self):
        with tempfile.TemporaryDirectory() as scratch:
            copy = Path(scratch) / "results"
            shutil.copytree(tb.RESULTS_DIR, copy)
            with open(copy / tb.RAW_FILE, "r+b") as handle:
                handle.seek(100)
                byte = handle.read(1)
                handle.seek(100)
                handle.write(bytes([byte[0] ^ 1]))
            self.assertEqual(tb.check_results(copy, bench()), ["raw_results.jsonl: line 1 differs from a fresh run"])
            status, out, _ = capture(["--check", "--results", str(copy)])
            self.assertEqual(status, 1)
            self.assertIn("check: FAILED", out)
            self.assertNotIn(scratch, out)

    def test_check_reports_missing_and_truncated_files(self):
        with tempfile.TemporaryDirectory() as scratch:
            tb.write_results(bench(), Path(scratch))
            with open(Path(scratch) / tb.SUMMARY_FILE, "ab") as handle:
                handle.write(b"\n")
            os.remove(Path(scratch) / tb.RAW_FILE)
            self.assertEqual(tb.check_results(Path(scratch), bench()),
                             ["raw_results.jsonl: missing or unreadable",
                              f"summary.json: length differs from a fresh run ({len(bench().summary_bytes()) + 1} "
                              f"bytes, fresh {len(bench().summary_bytes())})"])

    @unittest.skipUnless(hasattr(os, "mkfifo"), "needs named pipes")
    def test_check_reads_regular_files_only_and_never_waits_on_a_fifo(self):
        # A FIFO in place of a results file held --check at its open (or, with a writer, read
        # whatever came); a device would be read without end. Each is "missing or unreadable".
        with tempfile.TemporaryDirectory() as scratch:
            tb.write_results(bench(), Path(scratch))
            raw, summary = Path(scratch) / tb.RAW_FILE, Path(scratch) / tb.SUMMARY_FILE
            os.remove(raw)
            os.mkfifo(raw)
            os.remove(summary)
            os.symlink(os.devnull, summary)
            stop = time.monotonic() + 1  # the old reader's open waited for this writer: a second is plenty

            def writer() -> None:  # a writer that never blocks: the old reader's open found one
                while time.monotonic() < stop:
                    try:
                        handle = os.open(raw, os.O_WRONLY | os.O_NONBLOCK)
                    except OSError:
                        time.sleep(0.01)
                        continue
                    with contextlib.suppress(OSError):
                        os.write(handle, b"x")
                    os.close(handle)
                    return

            thread = threading.Thread(target=writer, daemon=True)
            thread.start()
            problems = tb.check_results(Path(scratch), bench())
            thread.join()
        self.assertEqual(problems, ["raw_results.jsonl: missing or unreadable", "summary.json: missing or unreadable"])

    def test_check_reads_a_results_file_up_to_its_limit(self):
        from txbench import bench as txbench_bench  # patched where it is looked up
        with tempfile.TemporaryDirectory() as scratch:
            tb.write_results(bench(), Path(scratch))
            size = len(bench().raw)  # the larger file: at the limit it is read, a byte over it is not
            for limit, problems in ((size, []), (size - 1, ["raw_results.jsonl: missing or unreadable"])):
                with self.subTest(limit=limit), mock.patch.object(txbench_bench, "MAX_RESULTS_FILE_BYTES", limit):
                    self.assertEqual(tb.check_results(Path(scratch), bench()), problems)

    def test_check_needs_a_directory(self):
        with tempfile.TemporaryDirectory() as scratch:
            with self.assertRaises(tb.BenchError) as caught:
                tb.check_results(Path(scratch) / "absent", bench())
            self.assertEqual(caught.exception.code, "RESULTS_UNREADABLE")

    def test_write_refuses_an_unusable_directory(self):
        with tempfile.TemporaryDirectory() as scratch:
            blocker = Path(scratch) / "file"
            with open(blocker, "w", encoding="utf-8") as handle:
                handle.write("x")
            for target in (blocker, blocker / "below", Path(scratch) / "a\x00b"):
                with self.subTest(target=target.name):
                    with self.assertRaises(tb.BenchError) as caught:
                        tb.write_results(bench(), target)
                    self.assertEqual(caught.exception.code, "RESULTS_UNWRITABLE")

    def test_summary_bytes_are_utf8_sorted_and_indented(self):
        outcome = tb.BenchOutcome(b"", {"b": "é", "a": [1]}, ())
        self.assertEqual(outcome.summary_bytes(), '{\n  "a": [\n    1\n  ],\n  "b": "é"\n}\n'.encode("utf-8"))

    def test_summary_counts_per_dimension(self):
        self.assertEqual(bench().summary["dimensions"]["schema"], {"passed": 4, "scenarios": 4})
        self.assertEqual(sum(d["passed"] for d in bench().summary["dimensions"].values()), 14)
        self.assertEqual(bench().summary["vetoes"][:2], [
            {"case": "SC2", "veto": "FORBIDDEN_CALL:cancel_order@1"},
            {"case": "SC7", "veto": "DUPLICATE_EFFECT:charge_payment@3"}])
        self.assertEqual(len(bench().summary["vetoes"]), 25)


# ================================================================================================
# 16. CLI
# ================================================================================================

class TestCli(unittest.TestCase):
    @mock.patch.object(txcli, "run_all", cached_run_all)
    def test_full_run_writes_results_and_prints_the_tables(self):
        with tempfile.TemporaryDirectory() as scratch:
            status, out, err = capture(["--results", scratch])
            self.assertEqual((status, err), (0, ""))
            with open(Path(scratch) / tb.RAW_FILE, "rb") as handle:
                self.assertEqual(handle.read(), bench().raw)
        for text in ("S10 response lost after commit: one charge", "C1 double charge: SHOWN",
                     "single_charge", "no_orphan_reservation", "no_orphan_charge", "consumed_exactly_once",
                     "key_ledger", "unknown_resolved", "parse", "schema", "call_set", "dependency", "total", "verdict",
                     "vetoes:\n  SC2   FORBIDDEN_CALL:cancel_order@1\n", "PASSED"):
            self.assertIn(text, out)
        body, _, timing = out.rpartition("time: ")
        self.assertEqual(body, tb.render_summary(bench().summary) + "\n")
        self.assertRegex(timing, r"^[0-9]+\.[0-9] s for the whole run, sweep included\n$")

    def test_failures_are_printed(self):
        summary = json.loads(bench().summary_bytes())
        summary["failures"], summary["passed"] = ["control C1 did not show its fault"], False
        rendered = tb.render_summary(summary)
        self.assertIn("FAILED", rendered.splitlines()[0])
        self.assertEqual(rendered.splitlines()[-1], "FAILURE: control C1 did not show its fault")

    @mock.patch.object(txcli, "run_all", cached_run_all)
    def test_check_passes_on_a_faithful_copy(self):
        with tempfile.TemporaryDirectory() as scratch:
            tb.write_results(bench(), Path(scratch))
            status, out, _ = capture(["--check", "--results", scratch])
        self.assertEqual(status, 0)
        self.assertTrue(out.startswith("check: OK"))

    def test_one_scenario(self):
        status, out, _ = capture(["--scenario", "S13"])
        self.assertEqual(status, 0)
        self.assertEqual([line.split()[0] for line in out.splitlines() if not line.startswith(" ")],
                         ["S13/guarded", "C3/naive"])
        status, out, _ = capture(["--scenario", "S05"])
        self.assertEqual((status, out.splitlines()[0].split()[0], sum(1 for l in out.splitlines()
                                                                       if not l.startswith(" "))),
                         (0, "S05/guarded", 1))

    def failure(self, argv):
        status, out, err = capture(argv)
        self.assertEqual((status, err), (2, ""))
        self.assertNotIn("Traceback", out)
        envelope = json.loads(out)
        self.assertEqual(envelope["passed"], False)
        return envelope["error"]

    def test_usage_errors_answer_the_core_envelope(self):
        for argv in (["--bogus"], ["--scenario"], ["--check", "--scenario", "S01"], ["extra"], ["--sc", "S01"],
                     ["--results"], ["score"], ["score", "--plans"], ["sweep"], ["score", "--plan", "x"]):
            with self.subTest(argv=argv):
                self.assertEqual(self.failure(argv), {"code": "CLI_USAGE", "retryable": False,
                                                      "message": "The command line is not valid; see --help."})

    def test_an_option_that_would_do_nothing_or_be_overridden_is_usage(self):
        # Each ran without a word: the second --plans alone was scored, and --check, --scenario or
        # --results beside a command (or --results beside a mode that writes nothing) did nothing.
        plans = str(SAMPLES)
        with contextlib.ExitStack() as stack:
            for name in ("run_all", "_run_check", "_run_one", "_run_exhaustive", "_run_score", "_run_user_sweep"):
                stack.enter_context(mock.patch.object(txcli, name, side_effect=AssertionError))
            for argv in (["score", "--plans", plans, "--plans", plans], ["--results", "a", "--results", "b"],
                         ["--scenario", "S01", "--scenario", "S02"],
                         ["score", "--plans", plans, "--orchestrator", "m:f", "--orchestrator", "m:g"],
                         ["sweep", "--orchestrator", "m:f", "--orchestrator", "m:f"],
                         ["--check", "score", "--plans", plans], ["--exhaustive", "score", "--plans", plans],
                         ["--scenario", "S01", "score", "--plans", plans], ["--results", "out", "score", "--plans", plans],
                         ["--check", "sweep", "--orchestrator", "m:f"], ["--exhaustive", "--results", "out"],
                         ["--scenario", "S01", "--results", "out"]):
                with self.subTest(argv=argv):
                    self.assertEqual(self.failure(argv)["code"], "CLI_USAGE")
        status, out, _ = capture(["score", "--plans", plans])
        self.assertEqual((status, json.loads(out.splitlines()[-1])["plans"]), (0, 11))

    def test_unknown_scenario_is_not_echoed(self):
        error = self.failure(["--scenario", "/home/someone/secret"])
        self.assertEqual(error, {"code": "SCENARIO_UNKNOWN", "message": "unknown scenario id", "retryable": False,
                                 "detail": "known ids: S01..S14"})

    @mock.patch.object(txcli, "run_all", cached_run_all)
    def test_bad_results_directory_is_not_echoed(self):
        with tempfile.TemporaryDirectory() as scratch:
            blocker = Path(scratch) / "file"
            with open(blocker, "w", encoding="utf-8") as handle:
                handle.write("x")
            for argv, code in ((["--results", str(blocker)], "RESULTS_UNWRITABLE"),
                               (["--check", "--results", str(blocker)], "RESULTS_UNREADABLE"),
                               (["--results", scratch + "/a\x00b"], "RESULTS_UNWRITABLE")):
                with self.subTest(code=code):
                    status, out, _ = capture(argv)
                    self.assertEqual((status, json.loads(out)["error"]["code"]), (2, code))
                    self.assertNotIn(scratch, out)

    def test_an_empty_results_value_is_refused_not_read_as_the_current_directory(self):
        # `--results "$OUT"` with OUT unset: Path("") is ".", and the run wrote its files wherever
        # the shell stood. Refused before anything runs.
        with tempfile.TemporaryDirectory() as scratch, mock.patch.object(txcli, "run_all", side_effect=AssertionError), \
                mock.patch.object(txcli, "check_results", side_effect=AssertionError):
            before = os.getcwd()
            os.chdir(scratch)
            try:
                for argv in (["--results", ""], ["--results="], ["--check", "--results", ""]):
                    with self.subTest(argv=argv):
                        status, out, err = capture(argv)
                        self.assertEqual((status, json.loads(out)["error"]["code"], err), (2, "CLI_USAGE", ""))
                self.assertEqual(os.listdir(scratch), [])
            finally:
                os.chdir(before)

    def test_a_forced_internal_bug_is_internal_error(self):
        def broken(*_args, **_kwargs):
            raise KeyError("/home/someone/secret")
        with mock.patch.object(txcli, "_run_one", broken):
            error = self.failure(["--scenario", "S01"])
        self.assertEqual(error["code"], "INTERNAL_ERROR")
        self.assertNotIn("secret", json.dumps(error))

    def test_a_closed_stdout_exits_2_before_anything_runs(self):
        # `>&-`: a scenario ran and exited 0 having said nothing; score ended in a traceback.
        with mock.patch.object(txcli, "_main", side_effect=AssertionError), mock.patch.object(sys, "stdout", None):
            for argv in (["--scenario", "S01"], ["score", "--plans", str(SAMPLES)], []):
                with self.subTest(argv=argv):
                    self.assertEqual(tb.main(argv), 2)

    @unittest.skipUnless(os.name == "posix", "closes a descriptor through the POSIX shell")
    def test_script_with_stdout_closed_exits_2_without_a_traceback(self):
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
        result = subprocess.run(["/bin/sh", "-c", 'exec "$0" -B "$1" score --plans "$2" >&-', sys.executable,
                                 str(HERE / "transaction_bench.py"), str(SAMPLES)],
                                capture_output=False, stderr=subprocess.PIPE, text=True, env=env, timeout=60)
        self.assertEqual((result.returncode, result.stderr), (2, ""))

    def test_script_exits_2_without_a_traceback(self):
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
        result = subprocess.run([sys.executable, "-B", str(HERE / "transaction_bench.py"), "--nope", "/tmp/x"],
                                capture_output=True, text=True, env=env, timeout=60)
        self.assertEqual((result.returncode, result.stderr), (2, ""))
        self.assertEqual(json.loads(result.stdout)["error"]["code"], "CLI_USAGE")
        self.assertNotIn("/tmp/x", result.stdout)


SAMPLES = HERE / "samples" / "plans.jsonl"


class TestScorePlans(unittest.TestCase):
    """`score --plans FILE.jsonl`: one line per plan, then per scenario and overall, pass^k."""

    def run_score(self, *extra):
        status, out, err = capture(["score", "--plans", str(SAMPLES), *extra])
        self.assertEqual((status, err), (0, ""))
        return [json.loads(line) for line in out.splitlines()]

    def test_the_sample_file_scores_every_shape(self):
        rows = self.run_score()
        plans = [row for row in rows if row["kind"] == "plan"]
        self.assertEqual([(row["shape"], row["verdict"], row["score"]) for row in plans], [
            ("bench", "pass", "1.000"), ("openai_chat", "pass", "1.000"), ("anthropic_messages", "veto", "0.000"),
            ("openai_responses", "pass", "1.000"), ("gemini", "pass", "1.000"), ("bare_list", "veto", "0.000"),
            (None, "model_error", "0.000"), (None, "unreadable_shape", "0.000"),
            ("anthropic_messages", "pass", "1.000"), (None, "unparseable", "0.000"),
            ("gemini_interactions", "pass", "1.000")])
        self.assertEqual(plans[2]["vetoes"], ["DUPLICATE_EFFECT:charge_payment@3"])
        self.assertEqual(plans[5]["vetoes"], ["FORBIDDEN_CALL:cancel_order@1"])
        self.assertEqual(plans[0]["sub_scores"], {"call_set": "1.000", "dependency": "1.000", "parse": "1.000",
                                                  "schema": "1.000"})

    def test_aggregates_and_pass_hat_k(self):
        rows = self.run_score()
        scenarios = {row["scenario"]: row for row in rows if row["kind"] == "scenario"}
        self.assertEqual(scenarios["place_order"]["pass^k"], {"1": "0.667", "2": "0.333", "3": "0.000"})
        self.assertEqual(scenarios["track_order"]["pass^k"], {"1": "0.500", "2": "0.167", "3": "0.000", "4": "0.000"})
        # Every trial is in the denominator, the unreadable response and the model error included.
        self.assertEqual((scenarios["track_order"]["model_errors"], scenarios["refund_damaged"]["unreadable_shapes"],
                          scenarios["refund_damaged"]["trials"]), (1, 1, 4))
        self.assertEqual(scenarios["refund_damaged"]["pass^k"], {"1": "0.500", "2": "0.167", "3": "0.000",
                                                                  "4": "0.000"})
        self.assertEqual(rows[-1], {"kind": "overall", "plans": 11, "scenarios": 3,
                                    "pass^k": {"1": "0.556", "2": "0.222", "3": "0.000"},
                                    "verdicts": {"model_error": 1, "pass": 6, "unparseable": 1, "unreadable_shape": 1,
                                                 "veto": 2}})

    def test_score_plan_runs_no_sweep_unless_asked(self):
        record = tb.read_plans(SAMPLES)[0]
        self.assertNotIn("fault_recovery", tb.score_plan(record))
        self.assertEqual(set(tb.score_plan(record, sweep=True)["fault_recovery"]), {"guarded", "naive"})

    def test_unreadable_and_malformed_responses_are_failed_trials(self):
        # Both were left out of pass^k: one pass beside one of them gave pass^1 = 1.000.
        lines = [{"scenario": "track_order", "trial": 0,
                  "response": {"tool_calls": [provider("query_logistics", {"order_ref": "20481"})]}},
                 {"scenario": "track_order", "trial": 1,
                  "response": {"candidates": [{"finishReason": "MALFORMED_FUNCTION_CALL"}]}},
                 {"scenario": "track_order", "trial": 2,
                  "response": {"output": [{"type": "computer_call", "call_id": "call_b", "action": {}}]}}]
        status, out, err = capture(["score", "--plans", self.write(b"".join(
            json.dumps(line).encode("utf-8") + b"\n" for line in lines))])
        rows = [json.loads(line) for line in out.splitlines()]
        self.assertEqual((status, err, [row["verdict"] for row in rows[:3]]),
                         (0, "", ["pass", "unparseable", "unreadable_shape"]))
        self.assertEqual({name: rows[3][name] for name in ("trials", "passed", "unreadable_shapes", "pass^k")},
                         {"trials": 3, "passed": 1, "unreadable_shapes": 1,
                          "pass^k": {"1": "0.333", "2": "0.000", "3": "0.000"}})

    def test_pass_hat_k_is_tau_bench_s(self):
        self.assertEqual(tb.pass_hat_k(4, 2, 2), Fraction(1, 6))
        self.assertEqual(tb.pass_hat_k(4, 4, 4), Fraction(1))
        self.assertEqual(tb.pass_hat_k(4, 3, 4), Fraction(0))

    def test_each_plan_gets_its_fault_recovery_table(self):
        rows = self.run_score("--orchestrator", "examples.simple_orchestrator:orchestrate")
        self.assertEqual(rows[0]["fault_recovery"]["user"], {
            "completable": 53, "live": 53, "liveness": "1.000", "unsafe": 0, "verdict": "pass",
            "calls_p50": 4, "calls_p95": 5, "latency_ms_p50": 160, "latency_ms_p95": 2175, "retries": 8,
            "runs_with_unexpected_effects": 0})
        self.assertEqual(rows[0]["fault_recovery"]["naive"]["unsafe"], 18)
        self.assertEqual(rows[2]["fault_recovery"]["guarded"]["verdict"], "n/a")  # a vetoed plan never completes
        self.assertNotIn("fault_recovery", rows[7])  # an unreadable shape has no calls to run

    def test_the_sweep_runs_calls_whose_id_or_name_is_no_string(self):
        # The sweep read each call dict as it came: a list id or a dict name reached the guard's
        # checks and the whole command answered INTERNAL_ERROR (unhashable). Each is now the
        # scorer's CALL_SHAPE, a placeholder no tool has, refused by the guard like any other.
        query = provider("query_logistics", {"order_ref": "20481"})
        for item in ({**query, "id": [1]}, {**query, "name": {"x": 1}}, {**query, "id": 7}):
            with self.subTest(item=str(item)[:40]):
                row = tb.score_plan(tb.PlanRecord(1, "track_order", 0, {"tool_calls": [item]}, False), sweep=True)
                self.assertEqual((row["verdict"], row["fault_recovery"]["guarded"]["verdict"],
                                  row["fault_recovery"]["guarded"]["completable"]), ("unparseable", "n/a", 0))

    def write(self, text: bytes) -> str:
        handle = tempfile.NamedTemporaryFile("wb", suffix=".jsonl", delete=False)
        self.addCleanup(os.remove, handle.name)
        with handle:
            handle.write(text)
        return handle.name

    def refusal(self, text: bytes):
        status, out, err = capture(["score", "--plans", self.write(text)])
        self.assertEqual((status, err), (2, ""))
        self.assertNotIn("Traceback", out)
        return json.loads(out)["error"]

    def test_bad_lines_name_the_line_never_the_text(self):
        good = b'{"scenario":"track_order","trial":0,"error":"x"}\n'
        cases = {
            b"{not json\n": ("PLANS_LINE", "line 1"),
            good + b'{"scenario":"track_order","trial":1}\n': ("PLANS_LINE", "line 2"),
            good + b"\n" + b'[1]\n': ("PLANS_LINE", "line 3"),
            good + b'{"scenario":"track_order","trial":-1,"error":"x"}\n': ("PLANS_LINE", "line 2"),
            good + b'{"scenario":"track_order","trial":true,"error":"x"}\n': ("PLANS_LINE", "line 2"),
            good + good: ("PLANS_LINE", "line 2"),
            b'{"scenario":"/secret/path","trial":0,"error":"x"}\n': ("PLANS_SCENARIO_UNKNOWN", "line 1"),
            b'{"scenario":"track_order","trial":0,"error":"x","x":1}\n': ("PLANS_LINE", "line 1"),
            b'\xff\n': ("PLANS_LINE", "line 1"),
            b'{"scenario":"track_order","trial":0,"response":' + b"[" * 40 + b"]" * 40 + b"}\n":
                ("PLANS_LINE", "line 1"),
        }
        for text, (code, at) in cases.items():
            with self.subTest(text=text[:40]):
                error = self.refusal(text)
                self.assertEqual((error["code"], error["at"]), (code, at))
                self.assertNotIn("secret", json.dumps(error))

    def test_each_bad_field_is_named_by_its_own_detail(self):
        # A scenario that is no string was refused with the detail meant for the trial.
        for text, detail in ((b'{"scenario":5,"trial":0,"error":"x"}\n', "scenario must be a string"),
                             (b'{"scenario":null,"trial":0,"error":"x"}\n', "scenario must be a string"),
                             (b'{"scenario":"track_order","trial":1.0,"error":"x"}\n',
                              "trial must be an integer 0..1000"),
                             (b'{"scenario":"track_order","trial":1001,"error":"x"}\n',
                              "trial must be an integer 0..1000")):
            with self.subTest(text=text):
                error = self.refusal(text)
                self.assertEqual((error["code"], error["at"], error["detail"]), ("PLANS_LINE", "line 1", detail))

    def test_a_line_that_does_not_decode_says_why(self):
        # Each was "not a JSON object": a BOM from a Windows tool, a repeated key, a deep response.
        line = b'{"scenario":"track_order","trial":0,"error":"x"}'
        for text, detail in ((b"\xef\xbb\xbf" + line, "begins with a byte order mark"),
                             (b"{not json", "not valid JSON"),
                             (line[:-1] + b',"trial":1}', "an object repeats a key"),
                             (line[:-1] + b',"response":' + b"[" * 40 + b"]" * 40 + b"}", "nested deeper than the limit"),
                             (line.replace(b'"x"', b"1e400"), "holds NaN or an infinite number"),
                             (line.replace(b'"x"', b"1" + b"0" * 40), "holds an integer with too many digits"),
                             (line.replace(b"x", b"\xff"), "not UTF-8"),
                             (b"[1]", "not a JSON object"),
                             (line.replace(b'"error"', b'"errors"'), "fields must be scenario, trial, response or error")):
            with self.subTest(text=text[:30]):
                error = self.refusal(text + b"\n")
                self.assertEqual((error["code"], error["at"], error["detail"]), ("PLANS_LINE", "line 1", detail))

    def test_line_limit_both_sides(self):
        pad = tb.MAX_PLAN_LINE_BYTES - len(b'{"scenario":"track_order","trial":0,"error":""}')
        fits = b'{"scenario":"track_order","trial":0,"error":"' + b"x" * pad + b'"}\n'
        self.assertEqual(len(fits) - 1, tb.MAX_PLAN_LINE_BYTES)
        self.assertEqual(len(tb.read_plans(self.write(fits))), 1)
        over = fits.replace(b'"x', b'"xx', 1)
        self.assertEqual((self.refusal(over)["at"], self.refusal(over)["detail"]),
                         ("line 1", "longer than the line limit"))

    def test_file_limit_both_sides(self):
        with mock.patch.object(txplansfile, "MAX_PLAN_LINES", 3):
            lines = b"".join(b'{"scenario":"track_order","trial":%d,"error":"x"}\n' % n for n in range(4))
            error = self.refusal(lines)
            self.assertEqual((error["code"], error["at"]), ("PLANS_TOO_MANY_LINES", "line 4"))
            self.assertEqual(len(tb.read_plans(self.write(lines[:-len(lines.splitlines(True)[-1])]))), 3)

    def test_the_command_holds_one_decoded_plan_at_a_time(self):
        # Every decoded line was held until the last was read: `[{},{},...]` decodes to some twenty
        # times its bytes, and 100 MB of such lines (within the limits) took 2.4 GB.
        class Tracked:
            live = 0

            def __init__(self) -> None:
                Tracked.live += 1

            def __del__(self) -> None:
                Tracked.live -= 1

        read = txplansfile._plan_record
        held = []

        def tracked(number, data):
            record = read(number, data)
            return None if record is None else tb.PlanRecord(record.line, record.scenario, record.trial, Tracked(),
                                                             record.model_error)

        def scored(record, **_options):
            held.append(Tracked.live)
            return {"kind": "plan", "line": record.line, "scenario": record.scenario, "score": "1.000",
                    "verdict": "pass"}

        lines = b"".join(b'{"scenario":"track_order","trial":%d,"error":"x"}\n' % n for n in range(5))
        with mock.patch.object(txplansfile, "_plan_record", tracked), mock.patch.object(txcli, "score_plan", scored):
            status, out, _ = capture(["score", "--plans", self.write(lines)])
        self.assertEqual((status, held, json.loads(out.splitlines()[-1])["plans"]), (0, [1, 1, 1, 1, 1], 5))
        # A bad last line still stops the run before any plan is scored.
        with mock.patch.object(txcli, "score_plan", side_effect=AssertionError):
            self.assertEqual(self.refusal(lines + b"{\n")["at"], "line 6")

    def test_an_unreadable_file(self):
        self.assertEqual(self.failure_code(["score", "--plans", str(HERE / "no-such-file.jsonl")]), "PLANS_UNREADABLE")
        self.assertEqual(self.failure_code(["score", "--plans", str(HERE)]), "PLANS_UNREADABLE")

    @unittest.skipUnless(os.path.exists(os.devnull) and os.name == "posix", "needs POSIX devices")
    def test_a_device_is_refused_before_a_byte_is_read(self):
        # /dev/null would score as an empty file and /dev/zero would be read up to a line limit.
        for device in ("/dev/null", "/dev/zero"):
            with self.subTest(device=device):
                self.assertEqual(self.failure_code(["score", "--plans", device]), "PLANS_UNREADABLE")

    @unittest.skipUnless(hasattr(os, "mkfifo"), "needs named pipes")
    def test_a_fifo_with_no_writer_is_refused_not_waited_on(self):
        # Opening a FIFO for reading blocks until a writer comes: a child process, so a regression
        # is a timeout here rather than a suite that never ends.
        with tempfile.TemporaryDirectory() as scratch:
            fifo = os.path.join(scratch, "plans.jsonl")
            os.mkfifo(fifo)
            child = subprocess.run([sys.executable, "-B", str(HERE / "transaction_bench.py"), "score", "--plans", fifo],
                                   capture_output=True, timeout=20, cwd=scratch)
        self.assertEqual((child.returncode, json.loads(child.stdout)["error"]["code"], child.stderr),
                         (2, "PLANS_UNREADABLE", b""))

    def failure_code(self, argv):
        status, out, _ = capture(argv)
        self.assertEqual(status, 2)
        return json.loads(out)["error"]["code"]


class TestUserOrchestrator(unittest.TestCase):
    def registry(self, orchestrate):
        return {**tb.ORCHESTRATORS, "user": tb.user_orchestrator(orchestrate)}

    def sweep(self, orchestrate, plan=SMALL_SWEEP):
        return tb.sweep_verdicts(tb.run_sweep(plan=plan, orchestrators=("user",),
                                              registry=self.registry(orchestrate)))["user"]

    def test_the_readme_example_passes_the_sweep(self):
        example = tb.load_orchestrator("examples.simple_orchestrator:orchestrate")
        lines = tb.run_sweep(orchestrators=("user",), registry={"user": example},
                             plan=tb.SweepPlan(exhaustive_depth=2, max_depth=2))
        self.assertEqual(tb.sweep_verdicts(lines)["user"], {"completable": 1431, "live": 1431, "liveness": "1.000",
                                                            "runs": 1653, "unsafe": 0, "verdict": "pass"})

    def test_refusing_everything_fails(self):
        self.assertEqual(self.sweep(lambda calls, port: "refused"),
                         {"completable": 53, "live": 0, "liveness": "0.000", "runs": 57, "unsafe": 0,
                          "verdict": "fail"})

    def test_a_careless_orchestrator_is_unsafe(self):
        def careless(calls, port):
            for call in calls:
                port.call(call.name, port.decode(call.arguments))
            return "completed"  # no relay, no recovery: what it says is not what the state shows
        verdict = self.sweep(careless)
        self.assertEqual((verdict["verdict"], verdict["unsafe"] > 0), ("fail", True))

    def test_a_saga_that_never_refunds_is_unsafe(self):
        # It cancels and releases but keeps the money: no invariant looked at a captured charge on
        # an order that is not confirmed, so this orchestrator passed the whole sweep (unsafe 0).
        from examples.simple_orchestrator import step

        def keeps_the_money(calls, port):
            done = []
            for item in calls:
                arguments = port.decode(item.arguments)
                if step(port, item.name, arguments) != "ok":
                    for undo in filter(None, (port.compensation(*pair) for pair in reversed(done))):
                        if undo[0] != "refund_payment":
                            step(port, *undo)
                    port.relay()
                    return "compensated"
                done.append((item.name, arguments))
            port.relay()
            return "completed"
        record = tb.execute_run("user", tb.plan_calls(), tb.PLACE_ORDER, registry=self.registry(keeps_the_money),
                                faults=(tb.Fault("permanent_failure", "confirm_order"),))
        self.assertEqual(record["invariants"]["no_orphan_charge"],
                         [{"captured": 1, "order_ref": "30417", "order_status": "cancelled"}])
        verdict = self.sweep(keeps_the_money)  # one single fault needs a refund: confirm_order refused for good
        self.assertEqual((verdict["verdict"], verdict["unsafe"]), ("fail", 1))

    def test_an_orchestrator_that_always_escalates_fails_by_name(self):
        # never_compensates:manual runs the plan, never compensates and hands every run to a
        # person. Only a run whose unknown stayed unresolved would give it grounds (none among
        # single faults), so every escalation breaks escalation_grounded, and what a refused step
        # left held is its own: a reservation twice, a charge once.
        lines = tb.run_sweep(plan=SMALL_SWEEP, orchestrators=("user",),
                             registry={"user": tb.load_orchestrator("examples.never_compensates:manual")})
        self.assertEqual(tb.sweep_verdicts(lines)["user"], {"completable": 53, "live": 53, "liveness": "1.000",
                                                            "runs": 57, "unsafe": 57, "verdict": "fail"})
        self.assertEqual({name: row["user"] for name, row in tb.sweep_table(lines).items() if row["user"]},
                         {"no_orphan_reservation": 2, "no_orphan_charge": 1, "escalation_grounded": 57})

    def test_manual_for_everything_fails_whatever_state_it_leaves(self):
        # Two that answer "manual" to every run: one does nothing, one runs the README example's
        # whole saga first. Neither leaves debris; both hand over runs nobody had to take over.
        from examples.simple_orchestrator import orchestrate

        def saga_then_manual(calls, port):
            orchestrate(calls, port)
            return "manual"
        for orchestrate_it, live in ((lambda calls, port: "manual", 0), (saga_then_manual, 53)):
            with self.subTest(live=live):
                lines = tb.run_sweep(plan=SMALL_SWEEP, orchestrators=("user",), registry=self.registry(orchestrate_it))
                self.assertEqual(tb.sweep_verdicts(lines)["user"],
                                 {"completable": 53, "live": live, "liveness": tb.ratio_text(live, 53), "runs": 57,
                                  "unsafe": 57, "verdict": "fail"})
                self.assertEqual({name: row["user"] for name, row in tb.sweep_table(lines).items() if row["user"]},
                                 {"escalation_grounded": 57})

    def test_escalating_an_unresolvable_unknown_passes(self):
        # The charge committed, its answer was lost, the status service was down and the retry was
        # refused for good: nobody can tell whether the customer paid, so a person decides.
        example = {"user": tb.load_orchestrator("examples.simple_orchestrator:orchestrate")}
        record = tb.execute_run("user", tb.plan_calls(), tb.PLACE_ORDER, registry=example,
                                faults=(tb.Fault("timeout_after_commit", "charge_payment"),
                                        tb.Fault("status_unavailable", "charge_payment"),
                                        tb.Fault("permanent_failure", "charge_payment")))
        self.assertEqual((record["outcome"], record["lifecycle"], record["compensation_order"]),
                         ("manual", tb.MANUAL, []))
        self.assertEqual(tb.manual_grounds(record), ("unknown_unresolved",))
        self.assertEqual(tb.METRICS["violations"](record), tb._violations())
        self.assertEqual(tb.METRICS["captured_charges"](record), 1)  # held for the person, by name

    def test_escalating_a_failed_compensation_passes(self):
        # The charge is refused for good, so the saga undoes the reservation; the release is refused
        # for good too: the stock stays held, and only a person can free it.
        example = {"user": tb.load_orchestrator("examples.simple_orchestrator:orchestrate")}
        record = tb.execute_run("user", tb.plan_calls(), tb.PLACE_ORDER, registry=example,
                                faults=(tb.Fault("permanent_failure", "charge_payment"),
                                        tb.Fault("permanent_failure", "release_inventory")))
        self.assertEqual((record["outcome"], record["lifecycle"]), ("manual", tb.MANUAL))
        self.assertEqual(tb.manual_grounds(record), ("compensation_failed",))
        self.assertEqual(tb.METRICS["violations"](record), tb._violations())
        self.assertEqual(tb.METRICS["held_reservations"](record), 1)

    def test_a_crash_or_an_odd_answer_is_recorded_not_raised(self):
        def crash(calls, port):
            raise RuntimeError("boom")
        record = tb.execute_run("user", tb.plan_calls(), tb.PLACE_ORDER, registry=self.registry(crash))
        self.assertEqual((record["outcome"], record["side_effects"]), ("crashed", 0))
        for said in (42, "bogus", None):
            record = tb.execute_run("user", tb.plan_calls(), tb.PLACE_ORDER, registry=self.registry(lambda c, p: said))
            self.assertEqual(record["outcome"], "invalid_outcome")

    def test_what_no_record_can_hold_is_refused_at_the_port(self):
        # A name, key or argument the run record cannot hold as JSON (an object, NaN, a lone
        # surrogate) went into the sandbox's trace, and sealing the record raised out of the bench:
        # the whole sweep answered INTERNAL_ERROR for one odd call. The port now answers it.
        answers = []

        def odd(calls, port):
            answers.extend([port.call(object(), {}), port.call("\ud800", {}),
                            port.call("create_order", {"idempotency_key": "\ud800"}),
                            port.call("create_order", {"order_ref": float("nan")}),
                            port.call("create_order", {"order_ref": {1, 2}}),
                            port.query_status("charge_payment", float("nan")),
                            port.query_status("charge_payment", "\udc00"), port.query_status(["x"], "k")])
            return "failed"
        record = tb.seal(tb.execute_run("user", tb.plan_calls(), tb.PLACE_ORDER, registry=self.registry(odd)))
        self.assertEqual([(answer.ok, answer.code) for answer in answers], [(False, "BAD_REQUEST")] * 8)
        self.assertEqual((record["outcome"], record["trace"], record["ledger"]), ("failed", [], {}))

    def test_a_sys_exit_is_a_crash_not_the_end_of_the_sweep(self):
        # sys.exit(0) inside a user's orchestrator ended `sweep` with status 0 and no output: the
        # exit status said "passed" for an orchestrator that never ran a step.
        record = tb.execute_run("user", tb.plan_calls(), tb.PLACE_ORDER, registry=self.registry(exit_zero))
        self.assertEqual((record["outcome"], record["side_effects"]), ("crashed", 0))
        small = lambda **options: ORIGINAL_RUN_SWEEP(**{**options, "plan": SMALL_SWEEP})  # noqa: E731
        with mock.patch.object(txcli, "run_sweep", small):
            status, out, _ = capture(["sweep", "--orchestrator", "test_transaction_bench:exit_zero"])
        self.assertEqual(status, 1)
        self.assertIn("sweep verdict user: FAIL (unsafe runs 0, liveness 0/53 = 0.000", out)

    def test_manual_with_an_undecodable_call_names_the_orders_it_can_read(self):
        calls = tb.plan_calls()[:1] + (call("confirm_order", "{not json", "c9"),)
        record = tb.execute_run("user", calls, tb.PLACE_ORDER, registry=self.registry(lambda c, p: "manual"))
        self.assertEqual(record["manual"]["orders"], ["30417"])

    def test_a_receipt_seen_by_status_and_by_replay_is_acknowledged_once(self):
        def twice(calls, port):
            arguments = port.decode(calls[0].arguments)
            port.call("create_order", arguments)  # the answer is lost
            self.assertTrue(port.call("create_order", arguments).ok)  # the receipt, replayed: acknowledged
            status = port.query_status("create_order", arguments["idempotency_key"])  # the same receipt again
            self.assertEqual(status.data["state"], "committed")
            return "manual"
        record = tb.execute_run("user", tb.plan_calls(), tb.PLACE_ORDER, registry=self.registry(twice),
                                faults=(tb.Fault("timeout_after_commit", "create_order"),))
        self.assertEqual(record["ledger"]["create_order|k-create-30417"],
                         {"acknowledged": 1, "attempted": 2, "effects": 1})
        self.assertEqual(record["invariants"]["key_ledger"], [])

    def test_manual_names_the_plan_orders(self):
        record = tb.execute_run("user", tb.plan_calls(), tb.PLACE_ORDER, registry=self.registry(lambda c, p: "manual"))
        self.assertEqual((record["lifecycle"], record["manual"]),
                         (tb.MANUAL, {"orders": ["30417"], "reason": "USER_ESCALATION", "tool": None}))
        self.assertEqual(record["invariants"]["escalation_grounded"], [{"orders": ["30417"],
                                                                        "reason": "USER_ESCALATION"}])

    def test_the_port_journals_unknowns_and_their_resolution(self):
        def once(calls, port):
            arguments = port.decode(calls[0].arguments)
            self.assertEqual(port.call("create_order", arguments).code, "TIMEOUT")
            self.assertEqual(port.query_status("create_order", arguments["idempotency_key"]).data["state"], "committed")
            self.assertEqual(port.compensation("create_order", arguments)[0], "cancel_order")
            self.assertIsNone(port.compensation("confirm_order", {}))
            self.assertEqual(port.findings(calls), [])
            self.assertEqual(set(port.schemas), set(tb.TOOLS))
            return "manual"
        record = tb.execute_run("user", tb.plan_calls(), tb.PLACE_ORDER, registry=self.registry(once),
                                faults=(tb.Fault("timeout_after_commit", "create_order"),))
        self.assertEqual(tb.METRICS["unknown_resolutions"](record), ["status_query:committed"])

    def test_loading_is_refused_by_code(self):
        for spec, code in (("nocolon", "ORCHESTRATOR_SPEC"), ("a:b:c", "ORCHESTRATOR_SPEC"),
                           ("../x:y", "ORCHESTRATOR_SPEC"),
                           (5, "ORCHESTRATOR_SPEC"), ("no_such_module_xyz:f", "ORCHESTRATOR_UNLOADABLE"),
                           ("examples.simple_orchestrator:nothing", "ORCHESTRATOR_UNLOADABLE"),
                           ("transaction_bench:SEED", "ORCHESTRATOR_UNLOADABLE")):
            with self.subTest(spec=spec):
                with self.assertRaises(tb.BenchError) as caught:
                    tb.load_orchestrator(spec)
                self.assertEqual(caught.exception.code, code)

    def test_the_cli_sweeps_a_user_orchestrator(self):
        small = lambda **options: ORIGINAL_RUN_SWEEP(**{**options, "plan": SMALL_SWEEP})  # noqa: E731
        with mock.patch.object(txcli, "run_sweep", small):
            status, out, err = capture(["sweep", "--orchestrator", "examples.simple_orchestrator:orchestrate"])
        self.assertEqual((status, err), (0, ""))
        self.assertIn("sweep verdict user: PASS (unsafe runs 0, liveness 53/53 = 1.000, floor 9/10)", out)
        self.assertIn("sweep verdict naive: FAIL", out)
        with mock.patch.object(txcli, "run_sweep", small):
            status, out, _ = capture(["sweep", "--orchestrator", "test_transaction_bench:refuse_all"])
        self.assertEqual(status, 1)
        self.assertIn("sweep verdict user: FAIL (unsafe runs 0, liveness 0/53 = 0.000", out)

    def test_the_cli_names_an_escalation_without_grounds(self):
        small = lambda **options: ORIGINAL_RUN_SWEEP(**{**options, "plan": SMALL_SWEEP})  # noqa: E731
        with mock.patch.object(txcli, "run_sweep", small):
            status, out, _ = capture(["sweep", "--orchestrator", "examples.never_compensates:manual"])
        self.assertEqual(status, 1)
        self.assertIn("escalation_grounded       MANUAL only after an unresolved unknown or a failed compensation"
                      "      0         0         57\n", out)
        self.assertIn("sweep verdict user: FAIL (unsafe runs 57, liveness 53/53 = 1.000, floor 9/10)", out)


class TestOrchestratorBox(unittest.TestCase):
    """A user's orchestrator in a child process: the port as JSON lines, every way out a recorded run."""

    def box(self, spec="test_transaction_bench:unruly", **bounds):
        box = tb.OrchestratorBox(spec, **bounds)
        self.addCleanup(box.close)
        return box

    def run_with(self, box, first_id="call_1", plan=None):
        calls = tb.plan_calls() if plan is None else plan
        calls = (tb.ToolCall(first_id, calls[0].name, calls[0].arguments),) + calls[1:]
        return tb.execute_run("user", calls, tb.PLACE_ORDER, registry={"user": box.orchestrator()})

    def test_a_boxed_orchestrator_leaves_exactly_the_records_it_leaves_in_process(self):
        example = "examples.simple_orchestrator:orchestrate"
        in_process = tb.run_sweep(plan=SMALL_SWEEP, orchestrators=("user",),
                                  registry={"user": tb.load_orchestrator(example)})
        boxed = tb.run_sweep(plan=SMALL_SWEEP, orchestrators=("user",),
                             registry={"user": self.box(example).orchestrator()})
        self.assertEqual(boxed, in_process)  # every line, its sealed record's digest included
        self.assertEqual(tb.sweep_verdicts(boxed)["user"]["verdict"], "pass")

    def test_every_way_out_is_a_recorded_failure_of_that_run(self):
        # In process, os._exit or a kill ended the whole bench and a hang never ended; each is now
        # the outcome of its own run, and the next run gets a new child.
        ways_out = {"raise": "crashed", "exit": "crashed", "die": "crashed", "hang": "timed_out",
                    "garbage": "protocol_violation", "unknown_op": "protocol_violation",
                    "forged_outcome": "protocol_violation", "overlong": "protocol_violation",
                    "word": "invalid_outcome"}
        if hasattr(signal, "SIGKILL"):
            ways_out["kill"] = "crashed"
        # A run bound far above what a run needs (a fraction of a second), even on a busy machine:
        # only the hang meets it.
        box = self.box(run_seconds=BUSY_MACHINE_RUN_S)
        for first_id, outcome in ways_out.items():
            with self.subTest(way_out=first_id):
                record = self.run_with(box, first_id)
                self.assertEqual((record["outcome"], record["side_effects"], record["lifecycle"]), (outcome, 0, None))
                after = self.run_with(box)  # the same box serves the next run
                self.assertEqual((after["outcome"], tb.state_hash(after["state_after"])),
                                 ("completed", tb.state_hash(tb.thaw(tb.EXPECTED_COMPLETED_STATE))))

    def test_a_failed_run_is_never_live(self):
        # The state it left is judged for safety; a run whose orchestrator never answered is not live.
        lines = tb.run_sweep(plan=NO_FAULTS, orchestrators=("user",),
                             registry={"user": self.box("test_transaction_bench:complete_then_crash").orchestrator()})
        self.assertEqual([(line["outcome"], line["completable"], line["live"], line["violated"]) for line in lines],
                         [("crashed", True, False, [])])

    def test_what_the_parent_cannot_read_is_refused_at_the_port_in_the_child(self):
        record = self.run_with(self.box(), "odd")
        self.assertEqual((record["outcome"], record["trace"]), ("failed", []))  # "failed": every answer BAD_REQUEST

    def test_the_childs_stdin_and_stdout_are_not_the_protocol(self):
        self.assertEqual(self.run_with(self.box(), "noisy")["outcome"], "completed")

    def test_run_bound_both_sides(self):
        # A run that sleeps 0.3 s: inside a bound far above it, whatever the load; past one below it.
        self.assertEqual(self.run_with(self.box(run_seconds=BUSY_MACHINE_RUN_S), "slow")["outcome"], "completed")
        self.assertEqual(self.run_with(self.box(run_seconds=0.05), "slow")["outcome"], "timed_out")

    def test_sweep_bound_both_sides(self):
        # 57 runs of at least 0.3 s each need 17 s: a bound of a few seconds cuts the sweep, on any
        # machine; the first run fits in it even on a busy one. From the cut on, every run is cut.
        box = self.box("test_transaction_bench:slow", sweep_seconds=BUSY_MACHINE_RUN_S)
        lines = tb.run_sweep(plan=SMALL_SWEEP, orchestrators=("user",), registry={"user": box.orchestrator()})
        outcomes = [line["outcome"] for line in lines]
        self.assertEqual((len(lines), outcomes[0], outcomes[-1]), (57, "completed", "sweep_timed_out"))
        cut = outcomes.index("sweep_timed_out")
        self.assertTrue(cut > 0 and set(outcomes[cut:]) == {"sweep_timed_out"}, outcomes)
        self.assertEqual(tb.sweep_verdicts(lines)["user"]["verdict"], "fail")
        box.begin_sweep()  # the next sweep's clock starts at its first run: a new child and a run fit
        self.assertEqual(self.run_with(box)["outcome"], "completed")

    def test_loading_is_refused_by_code(self):
        for spec, code in (("nocolon", "ORCHESTRATOR_SPEC"), (5, "ORCHESTRATOR_SPEC"),
                           ("no_such_module_xyz:f", "ORCHESTRATOR_UNLOADABLE"),
                           ("examples.simple_orchestrator:nothing", "ORCHESTRATOR_UNLOADABLE"),
                           ("transaction_bench:SEED", "ORCHESTRATOR_UNLOADABLE")):
            with self.subTest(spec=spec):
                with self.assertRaises(tb.BenchError) as caught:
                    tb.OrchestratorBox(spec)
                self.assertEqual(caught.exception.code, code)

    def test_the_cli_runs_a_user_orchestrator_in_a_child(self):
        # os._exit in this process would end the test run itself: the sweep records it instead.
        one = lambda **options: ORIGINAL_RUN_SWEEP(**{**options, "plan": NO_FAULTS})  # noqa: E731
        with mock.patch.object(txcli, "run_sweep", one):
            status, out, _ = capture(["sweep", "--orchestrator", "test_transaction_bench:die_at_once"])
        self.assertEqual(status, 1)
        self.assertIn("sweep verdict user: FAIL (unsafe runs 0, liveness 0/1 = 0.000", out)


ORIGINAL_RUN_SWEEP = tb.run_sweep


def refuse_all(calls, port):
    """An orchestrator that is perfectly safe and useless: the sweep must fail it."""
    return "refused"


def exit_zero(calls, port):
    """An orchestrator that leaves through sys.exit(0): a crash of its own, never the bench's exit."""
    sys.exit(0)


def die_at_once(calls, port):
    """An orchestrator that ends its process: only a box survives it."""
    os._exit(3)


def complete_then_crash(calls, port):
    """The README example's whole plan, then an exception instead of an answer."""
    from examples.simple_orchestrator import orchestrate
    orchestrate(calls, port)
    raise RuntimeError("after the work")


def _write_raw(port, data: bytes) -> None:
    # The child's protocol channel, written directly: what a buggy or hostile orchestrator can do.
    port._out.write(data)
    port._out.flush()


def _odd_requests(port) -> str:
    answers = [port.call(object(), {}), port.call("\ud800", {}), port.call("create_order", {"x": float("nan")}),
               port.call("create_order", nested(tb.MAX_BOX_DEPTH)), port.query_status("charge_payment", "\udc00"),
               port.call("create_order", {"x": "y" * tb.MAX_BOX_LINE_BYTES})]
    return "failed" if all((answer.ok, answer.code) == (False, "BAD_REQUEST") for answer in answers) else "completed"


def _noisy(calls, port) -> str:
    from examples.simple_orchestrator import orchestrate
    print('{"op": "done", "outcome": "refused"}')
    sys.stdout.flush()
    return orchestrate(calls, port) if sys.stdin.read() == "" else "refused"


# A bound far above what one boxed run needs (a child's start and a fraction of a second of
# work), so that a busy machine never meets it where a test expects a run to finish.
BUSY_MACHINE_RUN_S = 5.0


def slow(calls, port) -> str:
    """The README example, 0.3 s late on every run."""
    from examples.simple_orchestrator import orchestrate
    time.sleep(0.3)
    return orchestrate(calls, port)


# unruly's ways out, by the id of the plan's first call; any other id runs the README example.
WAYS_OUT = {
    "raise": lambda calls, port: 1 / 0,
    "exit": lambda calls, port: sys.exit(3),
    "die": lambda calls, port: os._exit(3),
    "kill": lambda calls, port: os.kill(os.getpid(), getattr(signal, "SIGKILL", signal.SIGTERM)),
    "hang": lambda calls, port: time.sleep(3600),
    "garbage": lambda calls, port: _write_raw(port, b"{not json\n") or port.relay(),
    "unknown_op": lambda calls, port: _write_raw(port, b'{"op":"drop_tables"}\n') or port.relay(),
    "forged_outcome": lambda calls, port: _write_raw(port, b'{"op":"done","outcome":"bogus"}\n') or "completed",
    "overlong": lambda calls, port: _write_raw(port, b"x" * (tb.MAX_BOX_LINE_BYTES + 10)) or time.sleep(3600),
    "word": lambda calls, port: 42,
    "odd": lambda calls, port: _odd_requests(port),
    "noisy": _noisy,
    "slow": slow,
}


def unruly(calls, port):
    """One orchestrator for the box's tests: the first call's id picks how it leaves its run."""
    from examples.simple_orchestrator import orchestrate
    return WAYS_OUT.get(calls[0].id, orchestrate)(calls, port)


if __name__ == "__main__":
    unittest.main()
