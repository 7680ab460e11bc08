"""The differential layer: each section of differential/differential.py, in its order, then the
Pydantic census (differential/pydantic_census.py).

The oracle needs ``jsonschema`` (with rfc3339-validator and rfc3986-validator, so formats are
asserted) and ``regress``, the census ``pydantic`` and ``email-validator``, the uri format's readers
``pydantic`` and ``node``, the email format's ``email-validator``, ``node`` and ``zod``;
``bash differential/ci.sh`` installs the Python packages into a virtual environment outside the
checkout, and zod with npm beside it, and runs this file. Without them the tests that need them
are skipped with one SKIP line each; under CI=true they fail instead, never skip.
"""
from __future__ import annotations

import ast
import io
import json
import math
import os
import random
import re
import subprocess
import sys
import tarfile
import tempfile
import unittest
from contextlib import redirect_stderr, redirect_stdout
from unittest import mock
from importlib import metadata
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import differential as dif  # noqa: E402
import tool_dispatcher as td  # noqa: E402

ORACLE = dif.load_oracle()
if ORACLE is None and os.environ.get("CI") != "true":
    sys.stdout.write("SKIP the oracle's tests: jsonschema or regress is not installed (run bash differential/ci.sh)\n")

try:
    URI_READERS: list[dif.FormatReader] | None = dif.load_uri_readers()
except dif.ReaderUnavailable as unavailable:
    URI_READERS = None
    if os.environ.get("CI") != "true":
        sys.stdout.write(f"SKIP the URI readers' tests: {unavailable} (pydantic and node are needed)\n")

try:
    EMAIL_READERS: list[dif.FormatReader] | None = dif.load_email_readers()
except dif.ReaderUnavailable as unavailable:
    EMAIL_READERS = None
    if os.environ.get("CI") != "true":
        sys.stdout.write(f"SKIP the email readers' tests: {unavailable} (email-validator, node and zod are needed)\n")

PYDANTIC_PACKAGES = ("pydantic", "pydantic_core", "annotated_types", "typing_inspection", "email_validator", "dns",
                     "idna")
try:
    import pydantic_census as CENSUS  # noqa: E402
except ModuleNotFoundError as missing:
    if missing.name not in PYDANTIC_PACKAGES:
        raise  # the census itself is broken: that is a failure, not a skip
    CENSUS = None
    if os.environ.get("CI") != "true":
        sys.stdout.write("SKIP the Pydantic census's tests: pydantic or email-validator is not installed "
                         "(run bash differential/ci.sh)\n")


def oracle() -> dif.Oracle:
    """The oracle, or a skip (a failure under CI=true) when it is not installed."""
    if ORACLE is not None:
        return ORACLE
    if os.environ.get("CI") == "true":
        raise RuntimeError("the differential suite must run under CI: jsonschema or regress is not installed")
    raise unittest.SkipTest("jsonschema or regress is not installed")


def uri_readers(node: str | None = None) -> list[dif.FormatReader]:
    """The uri format's readers, or a skip (a failure under CI=true) when pydantic or node is missing."""
    try:
        return URI_READERS if node is None and URI_READERS is not None else dif.load_uri_readers(node)
    except dif.ReaderUnavailable as missing:
        if os.environ.get("CI") == "true":
            raise RuntimeError(f"the URI readers must run under CI: {missing}") from None
        raise unittest.SkipTest(str(missing)) from None


def email_readers(zod: Path | None = None) -> list[dif.FormatReader]:
    """The email format's readers, or a skip (a failure under CI=true) when one is missing."""
    try:
        return EMAIL_READERS if zod is None and EMAIL_READERS is not None else dif.load_email_readers(zod=zod)
    except dif.ReaderUnavailable as missing:
        if os.environ.get("CI") == "true":
            raise RuntimeError(f"the email readers must run under CI: {missing}") from None
        raise unittest.SkipTest(str(missing)) from None


def census() -> Any:
    """The census module, or a skip (a failure under CI=true) when pydantic or email-validator is not installed."""
    if CENSUS is not None:
        return CENSUS
    if os.environ.get("CI") == "true":
        raise RuntimeError("the Pydantic census must run under CI: pydantic or email-validator is not installed")
    raise unittest.SkipTest("pydantic or email-validator is not installed")


def pinned_census() -> Any:
    """The census module when the pydantic that ci.sh pins is installed: for outcomes that depend on
    its release (a skip with both versions named otherwise; a failure under CI=true)."""
    module = census()
    with open(HERE / "ci.sh", encoding="utf-8") as handle:
        pinned = re.search(r"'pydantic==([0-9.]+)'", handle.read())
    installed = metadata.version("pydantic")
    if pinned is not None and installed == pinned.group(1):
        return module
    message = f"this outcome is pydantic {pinned and pinned.group(1)}'s (ci.sh's pin); {installed} is installed"
    if os.environ.get("CI") == "true":
        raise RuntimeError(message)
    raise unittest.SkipTest(message)


class AdmitsEverything:
    """A deliberately unsound compiled check."""

    def admits(self, _value: Any) -> bool:
        return True


def compile_unsoundly(schema: Any, *, require_object: bool = False) -> AdmitsEverything:
    td.compile_schema(schema, require_object=require_object)  # refuses what the core refuses
    return AdmitsEverything()


def narrow_unsoundly(server: Any, overlay: Any) -> AdmitsEverything:
    td.narrow(server, overlay)
    return AdmitsEverything()


def write_json(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(value, handle)


# A tiny suite in the official layout: every count of run_suite is known in advance.
TINY_SUITE = {
    "maximum.json": [
        {"description": "an integer at most 3", "schema": {"type": "integer", "maximum": 3},
         "tests": [{"description": "3", "data": 3, "valid": True},
                   {"description": "4", "data": 4, "valid": False},
                   {"description": "1.0 is an integer", "data": 1.0, "valid": True},
                   {"description": "a string", "data": "x", "valid": False}]},
        {"description": "a remote reference", "schema": {"$ref": "http://localhost:1234/integer.json"},
         "tests": [{"description": "1", "data": 1, "valid": True}]},
        {"description": "a conditional", "schema": {"if": {"type": "integer"}, "then": {"minimum": 0}},
         "tests": [{"description": "-1", "data": -1, "valid": False}]},
    ],
    "optional/maxLength.json": [
        {"description": "at most two characters", "schema": {"type": "string", "maxLength": 2},
         "tests": [{"description": "two", "data": "ab", "valid": True},
                   {"description": "three", "data": "abc", "valid": False},
                   {"description": "two astral characters", "data": "\U0001F600\U0001F600", "valid": True}]},
        {"description": "no type: run typed as a string (and refused as a number)", "schema": {"maxLength": 2},
         "tests": [{"description": "ab untyped", "data": "ab", "valid": True},
                   {"description": "abc untyped", "data": "abc", "valid": False},
                   {"description": "a number", "data": 5, "valid": True}]},
    ],
}


def tiny_suite_folder(root: Path) -> Path:
    folder = root / "draft2020-12"
    for name, groups in TINY_SUITE.items():
        write_json(folder / name, groups)
    return folder


# ============================================================================================
# 1. Limits and constants
# ============================================================================================


class TestLimitsAndConstants(unittest.TestCase):

    def test_every_feature_has_a_builder_and_a_weight(self):
        self.assertEqual(list(dif.FEATURE_WEIGHTS), list(dif._BUILDERS))
        self.assertTrue(all(type(weight) is int and weight > 0 for weight in dif.FEATURE_WEIGHTS.values()))

    def test_the_features_being_added_to_the_compiler_are_generated(self):
        for feature in ("format", "union-types", "union-scalars", "union-int-number", "union-tagged",
                        "union-null", "union-nested", "map"):
            with self.subTest(feature=feature):
                self.assertIn(feature, dif.FEATURE_WEIGHTS)
        self.assertEqual(dif.FORMATS, ("date", "date-time", "time", "uuid", "ipv4", "ipv6", "email", "uri"))

    def test_the_host_bounds_are_the_cores_and_one_past_them(self):
        self.assertEqual(dif.MAX_GENERATED_LENGTH, td.DEFAULT_MAX_LENGTH + 1)
        self.assertEqual(dif.MAX_GENERATED_ITEMS, td.DEFAULT_MAX_ITEMS + 1)
        self.assertEqual(dif.SAFE, 2**53 - 1)

    def test_one_test_case_for_each_section_in_the_modules_order(self):
        with open(HERE / "differential.py", encoding="utf-8") as handle:
            titles = re.findall(r"^# ([0-9]+)\. (.+)$", handle.read(), re.MULTILINE)
        self.assertEqual([int(number) for number, _ in titles], list(range(1, 12)))
        expected = ["Test" + "".join(word.capitalize() for word in title.split()) for _, title in titles]
        expected.append("TestPydanticCensus")  # pydantic_census.py, after the differential's sections
        with open(HERE / "test_differential.py", encoding="utf-8") as handle:
            found = re.findall(r"^class (Test\w+)\(unittest\.TestCase\):$", handle.read(), re.MULTILINE)
        self.assertEqual(found, expected)

    def test_the_layer_reaches_only_for_the_cores_public_names(self):
        for module, at_least in (("differential.py", 10), ("pydantic_census.py", 3)):
            with open(HERE / module, encoding="utf-8") as handle:
                tree = ast.parse(handle.read())
            used = [node.attr for node in ast.walk(tree)
                    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "td"]
            self.assertGreater(len(used), at_least)
            for name in used:
                with self.subTest(module=module, name=name):
                    self.assertIn(name, td.__all__)
            imports = [node for node in ast.walk(tree)
                       if isinstance(node, ast.ImportFrom) and node.module == "tool_dispatcher"]
            self.assertEqual(imports, [])


# ============================================================================================
# 2. JSON values
# ============================================================================================


class TestJsonValues(unittest.TestCase):

    def test_same_json_keeps_one_true_and_one_point_zero_apart(self):
        self.assertFalse(dif.same_json(1, True))
        self.assertFalse(dif.same_json(1, 1.0))
        self.assertFalse(dif.same_json(0.0, -0.0))
        self.assertFalse(dif.same_json({"a": 1, "b": 2}, {"b": 2, "a": 1}))  # member order is part of a document
        self.assertTrue(dif.same_json({"a": [1, 1.0, True, None]}, {"a": [1, 1.0, True, None]}))

    def test_a_json_value_is_what_json_loads_could_produce(self):
        for value in (None, True, 0, -0.0, 2**64, 1e308, "\ud800", {"": [[]]}):
            with self.subTest(value=repr(value)):
                self.assertTrue(dif.is_json_value(value))
        for value in ((1,), math.nan, math.inf, {1: "a"}, {"a": (1,)}, {1, 2}, b"a", 1j):
            with self.subTest(value=repr(value)):
                self.assertFalse(dif.is_json_value(value))

    def test_the_twin_spells_each_number_the_other_way(self):
        self.assertTrue(dif.same_json(dif.json_twin([1, 2.0, True, {"a": -3}]), [1.0, 2, True, {"a": -3.0}]))
        self.assertTrue(dif.same_json(dif.json_twin(2**60), 2**60))  # no double holds it exactly

    def test_unique_values_keep_every_spelling(self):
        self.assertEqual(dif.json_text(dif.unique_values([1, True, 1.0, 1, -0.0, 0.0, True])), "[1,true,1.0,-0.0,0.0]")


# ============================================================================================
# 3. The oracle
# ============================================================================================


class TestTheOracle(unittest.TestCase):

    def test_patterns_are_searched_as_ecma_262_does(self):
        judge = oracle()
        self.assertTrue(judge.search("b", "abc"))  # a search, not a whole-string match
        self.assertFalse(judge.search("^a$", "a\n"))  # $ is the end, not the end before a newline
        self.assertFalse(judge.search("^\\d$", "\u0663"))  # \d is ASCII
        self.assertTrue(judge.search("^a\\-b$", "a-b"))  # outside the u grammar: read without the flag
        self.assertTrue(judge.search("^\\p{L}$", "\u00e9"))  # with it, where it parses
        self.assertTrue(judge.search("^.$", "\U0001F600"))
        self.assertFalse(judge.search("^[a-z]$", "\ud800"))  # a lone surrogate, shown as U+FFFD

    def test_types_are_json_schemas(self):
        judge = oracle().judge({"type": "integer"})
        self.assertEqual([judge(value) for value in (1, 1.0, True, 1.5, "1")], [True, True, False, False, False])
        unique = oracle().judge({"uniqueItems": True})
        self.assertEqual([unique(value) for value in ([1, True], [1, 1.0], [0, False], [[1], [1.0]])],
                         [True, False, True, False])

    def test_every_format_is_asserted(self):
        cases = {"date": ("2024-02-29", "2023-02-29"), "date-time": ("2024-01-01T00:00:00Z", "2024-01-01T00:00:00"),
                 "time": ("12:00:00Z", "12:00:00"), "uuid": ("123e4567-e89b-12d3-a456-426614174000", "123e4567"),
                 "ipv4": ("192.168.0.1", "01.2.3.4"), "ipv6": ("::1", "1::2::3"), "email": ("a@b.c", "a.b.c"),
                 "uri": ("http://example.com", "//example.com")}
        self.assertEqual(tuple(cases), dif.FORMATS)
        for name, (good, bad) in cases.items():
            with self.subTest(format=name):
                judge = oracle().judge({"format": name})
                self.assertTrue(judge(good))
                self.assertFalse(judge(bad))
                self.assertTrue(judge(7))  # a format says nothing of a number

    def test_a_format_is_ascii_even_where_the_librarys_checker_is_not(self):
        from rfc3339_validator import validate_rfc3339
        self.assertTrue(validate_rfc3339("2024-01-01T00:00:00Z\n"))  # why the oracle adds the alphabet
        judge = oracle().judge({"format": "date-time"})
        self.assertFalse(judge("2024-01-01T00:00:00Z\n"))
        self.assertFalse(oracle().valid({"format": "email"}, "\u00fc@b.c"))
        self.assertTrue(oracle().valid({"format": "email"}, "\"a b\"@c.d"))

    def test_a_leap_second_is_valid_at_2359_utc_only(self):
        judge = oracle().judge({"format": "time"})
        self.assertEqual([judge(text) for text in ("23:59:60Z", "01:29:60+01:30", "15:59:60-08:00", "22:59:60Z",
                                                   "23:58:60Z", "23:59:61Z")],
                         [True, True, True, False, False, False])
        self.assertTrue(oracle().valid({"format": "date-time"}, "1998-12-31T23:59:60Z"))
        self.assertFalse(oracle().valid({"format": "date-time"}, "1998-12-31T22:59:60Z"))

    def test_validators_are_kept_by_the_schemas_text(self):
        judge = oracle()
        self.assertIs(judge.judge({"type": "integer"}).__self__, judge.judge({"type": "integer"}).__self__)
        self.assertIsNot(judge.judge({"const": 1}).__self__, judge.judge({"const": 1.0}).__self__)
        self.assertEqual(sorted(judge.versions), ["jsonschema", "regress"])


# ============================================================================================
# 4. Patterns
# ============================================================================================


class TestPatterns(unittest.TestCase):

    def test_the_same_seed_makes_the_same_patterns(self):
        first, second = dif.PatternMaker(random.Random(4)), dif.PatternMaker(random.Random(4))
        self.assertEqual([first.pattern() for _ in range(50)], [second.pattern() for _ in range(50)])
        self.assertEqual(first.examples, second.examples)

    def test_an_anchored_patterns_examples_match_it_whole(self):
        maker = dif.PatternMaker(random.Random(9))
        outside = {text for text, _ in dif._OUTSIDE_SUBSET}  # not all of them Python's syntax
        checked = 0
        for _ in range(300):
            text = maker.pattern()
            if text not in outside and re.fullmatch(r"\^[^|^$]*\$", text):  # one anchored sequence
                for example in maker.examples[text]:
                    checked += 1
                    with self.subTest(pattern=text, example=example):
                        self.assertIsNotNone(re.fullmatch(text[1:-1], example, re.ASCII))
        self.assertGreater(checked, 100)

    def test_examples_match_under_the_oracle(self):
        judge = oracle()
        maker = dif.PatternMaker(random.Random(10))
        texts = [maker.pattern() for _ in range(200)]
        for text in texts:
            for example in maker.examples[text]:
                with self.subTest(pattern=text, example=example):
                    self.assertTrue(judge.search(text, example))


# ============================================================================================
# 5. Schemas
# ============================================================================================


class TestSchemas(unittest.TestCase):

    def schemas(self, seed: int, count: int) -> list[tuple[str, Any]]:
        maker = dif.SchemaMaker(random.Random(seed))
        return [maker.schema() for _ in range(count)]

    def test_the_same_seed_makes_the_same_schemas(self):
        self.assertEqual(dif.json_text(self.schemas(11, 80)), dif.json_text(self.schemas(11, 80)))
        self.assertNotEqual(dif.json_text(self.schemas(11, 80)), dif.json_text(self.schemas(12, 80)))

    def test_every_feature_is_generated_and_every_schema_is_json(self):
        schemas = self.schemas(1, 600)
        self.assertEqual({feature for feature, _ in schemas}, set(dif.FEATURE_WEIGHTS))
        for feature, schema in schemas:
            with self.subTest(feature=feature, schema=dif.json_text(schema)[:200]):
                self.assertTrue(dif.is_json_value(schema))
                self.assertIs(type(schema), dict)

    def test_most_schemas_stay_within_the_compilers_limits(self):
        limits = {"SCHEMA_TOO_LARGE", "SCHEMA_TOO_DEEP", "SCHEMA_TOO_MANY_NODES", "SCHEMA_TOO_MANY_PROPERTIES",
                  "SCHEMA_ENUM_TOO_LARGE", "SCHEMA_PATTERN_TOO_LONG"}
        over = 0
        for _, schema in self.schemas(2, 300):
            try:
                td.prescan(schema)
            except td.BoundaryError as refusal:
                over += refusal.code in limits
        self.assertLess(over, 3)

    def test_a_tagged_union_has_pydantics_shape(self):
        maker = dif.SchemaMaker(random.Random(5))
        for _ in range(40):
            maker.defs = {}
            union = maker.union_tagged(0)
            keyword = next(iter(union))
            self.assertIn(keyword, ("oneOf", "anyOf"))
            branches = [maker.defs[branch["$ref"].rsplit("/", 1)[1]] if "$ref" in branch else branch
                        for branch in union[keyword] if branch != {"type": "null"}]
            for branch in branches:
                tag = branch["properties"]["pet_type"]
                self.assertIn(tag.get("const", (tag.get("enum") or [None])[0]), ("cat", "dog", "lizard"))
            if "discriminator" in union:
                self.assertEqual(union["discriminator"]["propertyName"], "pet_type")

    def test_definitions_live_at_the_root_only(self):
        for feature, schema in self.schemas(3, 300):
            if feature == "near-subset":
                continue  # it may add a nested $defs on purpose
            nested = [node for node in _nodes(schema) if node is not schema and type(node) is dict
                      and ("$defs" in node or "definitions" in node) and "properties" not in node]
            with self.subTest(schema=dif.json_text(schema)[:200]):
                self.assertEqual(nested, [])


def _nodes(value: Any) -> list[Any]:
    out, stack = [], [value]
    while stack:
        node = stack.pop()
        out.append(node)
        if type(node) is dict:
            stack.extend(node.values())
        elif type(node) is list:
            stack.extend(node)
    return out


# ============================================================================================
# 6. Values
# ============================================================================================


class TestValues(unittest.TestCase):

    def values(self, schema: Any, **options: Any) -> list[Any]:
        return dif.ValueMaker(random.Random(0), schema, examples={}, **options).values()

    def test_every_generated_value_is_a_json_value(self):
        maker = dif.SchemaMaker(random.Random(6))
        for index in range(150):
            _, schema = maker.schema()
            values = dif.ValueMaker(random.Random(index), schema, examples=maker.patterns.examples).values()
            self.assertLessEqual(len(values), dif.MAX_VALUES_PER_SCHEMA)
            for value in values:
                if not dif.is_json_value(value):
                    self.fail(f"not a JSON value: {value!r:.200}")

    def test_a_strings_lengths_are_met_on_both_sides(self):
        values = self.values({"type": "string", "minLength": 2, "maxLength": 3})
        lengths = {len(value) for value in values if type(value) is str}
        self.assertTrue({1, 2, 3, 4, td.DEFAULT_MAX_LENGTH, td.DEFAULT_MAX_LENGTH + 1} <= lengths)
        self.assertIn("\U0001F600", values)  # one character, two UTF-16 code units: below minLength 2
        self.assertIn("\U0001F600" * 3, values)  # three characters, six code units: within maxLength 3
        self.assertIn("a\n", values)
        self.assertIn("\ud800", values)

    def test_a_numbers_edges_and_spellings(self):
        values = self.values({"type": "number", "exclusiveMinimum": 0.5, "maximum": 3, "multipleOf": 0.5})
        for expected in (0.5, math.nextafter(0.5, math.inf), 1, 1.0, True, -0.0, 3, 3.0, 3.5, 2.5, 2**53 - 1,
                         2**53, float(2**53), 2**53 + 1, 1.5, 0.25, 0.75):
            with self.subTest(value=expected):
                self.assertTrue(any(dif.same_json(value, expected) for value in values))

    def test_enum_members_and_their_near_misses(self):
        values = self.values({"enum": ["cat", 1, None]})
        for expected in ("cat", "cat\n", "CAT", " cat", 1, 1.0, True, "1", None, "null", 0, False):
            with self.subTest(value=expected):
                self.assertTrue(any(dif.same_json(value, expected) for value in values))

    def test_an_object_loses_gains_and_changes_one_member_at_a_time(self):
        schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
                  "required": ["a"], "additionalProperties": False}
        judge = oracle()
        values = dif.ValueMaker(random.Random(0), schema, examples={}, judge=judge.valid).values()
        texts = {dif.json_text(value) for value in values}
        self.assertIn("{}", texts)
        self.assertIn('{"a":0,"b":""}', texts)
        self.assertIn('{"a":0,"b":"","zz":1}', texts)
        self.assertIn('{"a":1.0,"b":""}', texts)
        self.assertIn('{"a":true,"b":""}', texts)

    def test_unique_items_meet_one_and_one_point_zero_and_true(self):
        values = self.values({"type": "array", "items": {"type": "number"}, "uniqueItems": True})
        texts = {dif.json_text(value) for value in values}
        for pair in ("[1,1.0]", "[1,true]", "[0,false]", "[0,-0.0]", "[[1],[1.0]]", '[{"a":1},{"a":1.0}]'):
            self.assertIn(pair, texts)
        self.assertIn(td.DEFAULT_MAX_ITEMS + 1, {len(value) for value in values if type(value) is list})

    def test_formats_meet_valid_and_invalid_samples(self):
        values = self.values({"type": "string", "format": "date"})
        self.assertIn("2024-02-29", values)
        self.assertIn("2023-02-29", values)
        self.assertIn("2024-01-01\n", values)

    def test_uri_samples_meet_each_rule_on_both_sides(self):
        uri = td.FORMATS["uri"]
        samples = dif.FORMAT_SAMPLES["uri"]
        self.assertEqual(len(samples), len(set(samples)))
        self.assertLessEqual(set(dif.URI_SAMPLES), set(samples))
        pairs = {  # a rule: (a sample the core's reading admits, a near miss it refuses)
            "port": ("http://example.com:65535", "http://example.com:65536"),
            "empty host": ("foo://", "http://"), "userinfo": ("mailto:user@example.com", "http://user@example.com"),
            "numeric host": ("http://127.0.0.1", "http://0x7f.1"), "short quad": ("http://a.b1", "http://127.1"),
            "octet": ("http://255.255.255.255", "http://1.2.3.999"), "punycode": ("http://a--b.com", "http://xn--nxasmq6b.com"),
            "label": ("http://" + dif._LABEL_63 + ".com", "http://" + dif._LABEL_63 + "x.com"),
            "host": ("http://" + dif._HOST_253, "http://" + dif._HOST_253 + "d"),
            "escape": ("http://a/%41", "http://a/%4"), "hex escape": ("http://a/%c3%A9", "http://a/%zz"),
            "space": ("http://a/%20", "http://a/b c"), "ascii": ("http://a/%C3%A9", "http://a/\u00e9"),
            "backslash": ("http://a/b", "http://a\\b"), "zone": ("http://[fe80::1]", "http://[fe80::1%25eth0]"),
            "ipvfuture": ("http://[::1]", "http://[v1.x]"), "double slash": ("foo:/a//x", "foo://u@x"),
            "dot segment": ("http://a/b..c/...", "http://a/%2E./c"),
            "special scheme": ("foo:x", "http:a"), "file port": ("file://host/x", "file://host:21/x"),
        }
        for rule, (good, bad) in pairs.items():
            with self.subTest(rule=rule):
                self.assertTrue(uri(good))
                self.assertFalse(uri(bad))
                self.assertIn(bad, samples)
        self.assertEqual(len(dif._LABEL_63), 63)
        self.assertEqual(len(dif._HOST_253), 253)

    def test_uri_compositions_are_seeded_and_fall_on_both_sides(self):
        def made(seed: int) -> list[str]:
            rng = random.Random(seed)
            return [dif.uri_candidate(rng) for _ in range(400)]
        self.assertEqual(made(3), made(3))
        self.assertNotEqual(made(3), made(4))
        admitted = [text for text in made(3) if td.FORMATS["uri"](text)]
        self.assertGreater(len(admitted), 80)
        self.assertLess(len(admitted), 320)
        self.assertEqual({dif.uri_form(text) for text in admitted},
                         {"no-authority", "empty-host", "ipv4", "ipv6", "name"})
        values = self.values({"type": "string", "format": "uri"})
        composed = [value for value in values if type(value) is str and "://" in value
                    and value not in dif.FORMAT_SAMPLES["uri"]]
        self.assertGreater(len(composed), 0)  # the schema's values hold random compositions too

    def test_email_samples_meet_each_rule_on_both_sides(self):
        email = td.FORMATS["email"]
        samples = dif.FORMAT_SAMPLES["email"]
        self.assertEqual(len(samples), len(set(samples)))
        self.assertLessEqual(set(dif.EMAIL_SAMPLES), set(samples))
        local_64, domain_189, tld_63 = dif._EMAIL_LOCAL_64, dif._EMAIL_DOMAIN_189, dif._TLD_63
        pairs = {  # a rule: (a sample the core's reading admits, a near miss it refuses)
            "ascii": ("a@example.com", "\u00fc@example.com"), "ascii domain": ("a@example.com", "a@\u00fc.com"),
            "local alphabet": ("_'+-@example.com", "a!b@example.com"),
            "dot runs": ("a.b.c@example.com", "a..b@example.com"),
            "leading dot": ("'a@example.com", ".a@example.com"), "trailing dot": ("a.b@example.com", "a.@example.com"),
            "apostrophe last": ("a'b@example.com", "a'@example.com"),
            "local length": (local_64 + "@example.com", local_64 + "x@example.com"),
            "two labels": ("a@b.co", "a@localhost"), "label hyphen": ("a@a-b.co", "a@a-.co"),
            "leading hyphen": ("a@1.example.com", "a@-a.co"), "empty label": ("a@a.b.co", "a@a..co"),
            "trailing dot in domain": ("a@example.com", "a@a.co."),
            "label length": ("a@" + "l" * 63 + ".com", "a@" + "l" * 64 + ".com"),
            "hyphens 3-4": ("a@abc--d.co", "a@ab--cd.co"), "punycode": ("a@a--b.co", "a@xn--p1ai.co"),
            "tld letters": ("a@b.co", "a@b.c1"), "tld length": ("a@b." + tld_63, "a@b.c"),
            "long tld": ("a@b." + tld_63, "a@b." + tld_63 + "t"), "numeric tld": ("a@123.co", "a@1.2.3.4"),
            "reserved": ("a@test.com", "a@b.test"), "reserved any case": ("a@b.testing", "a@b.LocalHost"),
            "total length": (local_64 + "@" + domain_189, local_64 + "@x" + domain_189),
            "quoted": ("a@example.com", "\"a b\"@example.com"), "comment": ("a@example.com", "a(comment)@example.com"),
            "literal": ("a@example.com", "a@[127.0.0.1]"), "space": ("a@example.com", "a @example.com"),
            "newline": ("a@example.com", "a@example.com\n"), "two @": ("a@example.com", "a@b@example.com"),
        }
        for rule, (good, bad) in pairs.items():
            with self.subTest(rule=rule):
                self.assertTrue(email(good))
                self.assertFalse(email(bad))
                self.assertIn(bad, samples)
        self.assertEqual((len(local_64), len(local_64 + "@" + domain_189), len(tld_63)), (64, 254, 63))

    def test_email_compositions_are_seeded_and_fall_on_both_sides(self):
        def made(seed: int) -> list[str]:
            rng = random.Random(seed)
            return [dif.email_candidate(rng) for _ in range(400)]
        self.assertEqual(made(3), made(3))
        self.assertNotEqual(made(3), made(4))
        admitted = [text for text in made(3) if td.FORMATS["email"](text)]
        self.assertGreater(len(admitted), 80)
        self.assertLess(len(admitted), 320)
        self.assertEqual({dif.email_form(text) for text in admitted}, {"plain", "dotted", "symbols"})
        lengths = {len(text) for text in dif.email_candidates(1, 2000)}
        self.assertLessEqual({253, 254, 255}, lengths)  # padded to the whole address's limit and past it
        values = self.values({"type": "string", "format": "email"})
        composed = [value for value in values if type(value) is str and "@" in value
                    and value not in dif.FORMAT_SAMPLES["email"]]
        self.assertGreater(len(composed), 0)  # the schema's values hold random compositions too

    def test_the_same_random_makes_the_same_values(self):
        schema = {"type": "array", "items": {"type": "string", "pattern": "^[a-z]{1,3}$"}, "maxItems": 4}
        examples = {"^[a-z]{1,3}$": ("abc",)}
        first = dif.ValueMaker(random.Random(8), schema, examples=examples).values()
        second = dif.ValueMaker(random.Random(8), schema, examples=examples).values()
        self.assertEqual(dif.json_text(first), dif.json_text(second))
        self.assertTrue(all(type(value) is not list or len(value) <= td.DEFAULT_MAX_ITEMS + 1 for value in first))
        near_misses = {value[0] for value in first if type(value) is list and len(value) == 1 and type(value[0]) is str}
        self.assertLessEqual({"abc", "abc\n", "zzabc"}, near_misses, "the pattern's example and its near misses")


# ============================================================================================
# 7. Overlays
# ============================================================================================


class TestOverlays(unittest.TestCase):

    def test_the_same_seed_makes_the_same_cases(self):
        def cases(seed: int) -> str:
            maker = dif.OverlayMaker(dif.SchemaMaker(random.Random(seed)))
            return dif.json_text([[case.feature, case.server, list(case.path), case.host]
                                  for case in (maker.case() for _ in range(60))])
        self.assertEqual(cases(3), cases(3))

    def test_cases_are_tighter_looser_or_other(self):
        maker = dif.OverlayMaker(dif.SchemaMaker(random.Random(4)))
        cases = [maker.case() for _ in range(200)]
        features = {case.feature for case in cases}
        self.assertLessEqual({"tighter", "looser", "other", "drop-null"}, features)
        self.assertLessEqual(features, {"tighter", "looser", "other", "same", "drop-null"})
        self.assertTrue(all(case.path in (("p",), ("p", "r"), ("missing",)) for case in cases))
        self.assertTrue(all(dif.is_json_value(case.server) and dif.is_json_value(case.host) for case in cases))

    def test_the_patched_schema_holds_the_host_rule_in_place(self):
        server = {"type": "object", "properties": {"p": {"type": "object", "properties": {"r": {"type": "integer"}}}}}
        patched = dif.patched_schema(server, ("p", "r"), {"type": "integer", "maximum": 3})
        self.assertEqual(patched["properties"]["p"]["properties"]["r"], {"type": "integer", "maximum": 3})
        self.assertEqual(server["properties"]["p"]["properties"]["r"], {"type": "integer"})  # not changed
        through_ref = {"type": "object", "properties": {"p": {"$ref": "#/$defs/P"}},
                       "$defs": {"P": {"type": "object", "properties": {"r": {"type": "integer"}}}}}
        self.assertIsNone(dif.patched_schema(through_ref, ("p", "r"), {"type": "integer"}))
        self.assertIsNone(dif.patched_schema(server, ("missing",), {"type": "integer"}))

    def test_a_value_is_placed_at_its_path(self):
        base = {"p": {"s": "x"}, "q": "y"}
        self.assertEqual(dif.place(base, ("p", "r"), 1), {"p": {"s": "x", "r": 1}, "q": "y"})
        self.assertEqual(dif.place(None, ("p", "r"), 1), {"p": {"r": 1}})
        self.assertEqual(base, {"p": {"s": "x"}, "q": "y"})


# ============================================================================================
# 8. The differential run
# ============================================================================================


class TestTheDifferentialRun(unittest.TestCase):

    SCHEMA = {"type": "integer", "minimum": 0}
    VALUES = (0, -1, "a", 1.5, 1.0, True)  # the oracle admits 0 and 1.0

    def test_a_check_that_admits_everything_is_caught_on_each_value(self):
        tally = dif.Tally()
        unsound = dif.check_values(lambda value: True, oracle().judge(self.SCHEMA), self.VALUES, tally, {})
        self.assertEqual(dif.json_text(unsound), '[-1,"a",1.5,true]')
        self.assertEqual((tally.values, tally.admitted, tally.unsound, tally.narrowed, tally.raised), (6, 6, 4, 0, 0))

    def test_the_cores_check_is_sound_here_and_narrows_one_point_zero(self):
        tally = dif.Tally()
        compiled = td.compile_schema(self.SCHEMA, require_object=False)
        unsound = dif.check_values(compiled.admits, oracle().judge(self.SCHEMA), self.VALUES, tally, {})
        self.assertEqual(unsound, [])
        self.assertEqual((tally.values, tally.admitted, tally.unsound, tally.narrowed), (6, 1, 0, 1))

    def test_a_check_or_an_oracle_that_raises_is_a_finding(self):
        def refuse_to_answer(_value: Any) -> bool:
            raise KeyError("no answer")
        tally = dif.Tally()
        dif.check_values(refuse_to_answer, lambda value: True, [1, 2], tally, {"check": "schema"})
        dif.check_values(lambda value: True, refuse_to_answer, [3], tally, {"check": "schema"})
        self.assertEqual(tally.raised, 3)
        self.assertEqual([finding["kind"] for finding in tally.findings],
                         ["check-raised", "check-raised", "oracle-raised"])
        self.assertEqual(tally.findings[0]["error"], "KeyError")

    def test_a_value_that_is_not_json_stops_the_run(self):
        with self.assertRaises(ValueError):
            dif.check_values(lambda value: True, lambda value: True, [(1, 2)], dif.Tally(), {})

    def test_refusals_are_counted_by_code_and_a_crash_is_a_finding(self):
        tally = dif.Tally()
        self.assertIsNone(dif.compile_or_refuse(td.compile_schema, {"if": {}}, tally, {}))
        self.assertIsNone(dif.compile_or_refuse(td.compile_schema, {"if": {}, "then": {}}, tally, {}))

        def crash(_schema: Any, **_options: Any) -> Any:
            raise TypeError("a bug")
        self.assertIsNone(dif.compile_or_refuse(crash, {}, tally, {"check": "schema"}))
        self.assertEqual(tally.refused, {"SCHEMA_CONDITIONAL": 2, "TypeError": 1})
        self.assertEqual((tally.compiled, tally.raised, tally.findings[0]["kind"]), (0, 1, "compiler-raised"))

    def test_the_same_seed_gives_the_same_report_bytes(self):
        first = dif.render(dif.run_seed(21, 40, 20, oracle()))
        self.assertEqual(first, dif.render(dif.run_seed(21, 40, 20, oracle())))
        self.assertNotEqual(first, dif.render(dif.run_seed(22, 40, 20, oracle())))

    def test_the_report_counts_add_up(self):
        report = dif.run_seed(23, 60, 30, oracle())
        self.assertEqual(list(report), ["format", "seed", "oracle", "schemas", "features", "overlays",
                                        "findings_total", "findings"])
        for side, generated in (("schemas", 60), ("overlays", 30)):
            counts = report[side]
            self.assertEqual(counts["generated"], generated)
            self.assertEqual(counts["compiled"] + sum(counts["refused"].values()), generated)
            self.assertLessEqual(counts["admitted"] + counts["narrowed"], counts["values"])
        self.assertEqual(sum(feature["generated"] for feature in report["features"].values()), 60)
        self.assertEqual(sum(feature["compiled"] for feature in report["features"].values()),
                         report["schemas"]["compiled"])
        self.assertEqual((report["findings_total"], report["findings"]), (0, []))

    def test_an_unsound_compiler_is_reported_with_a_minimal_schema(self):
        report = dif.run_seed(5, 30, 10, oracle(), compile_schema=compile_unsoundly, narrow=narrow_unsoundly)
        self.assertGreater(report["schemas"]["unsound"], 100)
        self.assertGreater(report["overlays"]["unsound"], 10)
        self.assertEqual(len(report["findings"]), dif.MAX_FINDINGS)
        shown = {(finding["check"], finding["index"]) for finding in report["findings"]}
        self.assertEqual(len(shown), dif.MAX_FINDINGS)
        first = report["findings"][0]
        self.assertEqual(first["kind"], "unsound")
        self.assertFalse(oracle().valid(first["schema"], first["value"]))
        self.assertLessEqual(len(dif.json_text(first["schema"])), 80)  # shrunk to a keyword or two

    def test_a_finding_is_shrunk_to_what_it_needs(self):
        finding = {"check": "schema", "index": 0, "kind": "unsound", "value": 5,
                   "schema": {"type": "string", "maxLength": 3, "title": "t", "description": "d"}}
        shrunk = dif.minimize_finding(finding, oracle(), compile_schema=compile_unsoundly)
        # Without "type" the core refuses the schema, so the finding needs it; nothing else.
        self.assertEqual((shrunk["schema"], shrunk["value"]), ({"type": "string"}, 5))
        self.assertEqual(finding["schema"]["maxLength"], 3)  # the finding itself is not changed

    def test_shrinking_drops_whatever_the_finding_does_not_need(self):
        case = {"schema": {"type": "string", "maxLength": 3, "title": "t", "enum": ["a", "abcd"]}, "value": "abcd"}

        def still(candidate: dict[str, Any]) -> bool:
            return candidate["schema"].get("maxLength") == 3 and len(candidate["value"]) > 3
        self.assertEqual(dif.shrink(case, still, keys=("schema", "value")),
                         {"schema": {"maxLength": 3}, "value": "abcd"})

    def test_one_finding_is_shown_for_each_schema(self):
        findings = [{"check": "schema", "index": 1, "value": 1}, {"check": "schema", "index": 1, "value": 2},
                    {"check": "overlay", "index": 1, "value": 3}, {"check": "schema", "index": 4, "value": 4}]
        self.assertEqual([finding["value"] for finding in dif.first_of_each_schema(findings)], [1, 3, 4])


# ============================================================================================
# 9. The official suite
# ============================================================================================


class TestTheOfficialSuite(unittest.TestCase):

    def test_a_tiny_suite_is_counted_exactly(self):
        with tempfile.TemporaryDirectory() as root:
            report = dif.run_suite(dif.read_suite(tiny_suite_folder(Path(root))))
        # The typed runs: the conditional as a number (refused), {"maxLength": 2} as a string (its two
        # string tests) and as a number (refused: maxLength is no number's keyword).
        typed = {"groups": 3, "compiled": 1, "sound": 1, "tests": 2, "invalid_refused": 1, "unsound": 0,
                 "narrowed": 0, "raised": 0, "refused": {"SCHEMA_CONDITIONAL": 1, "SCHEMA_KEYWORD": 1}}
        expected = {"format": "differential-suite-report-v1", "files": 2, "groups": 5, "skipped_remote_ref": 1,
                    "compiled": 2, "sound": 2, "tests": 7, "invalid_refused": 3, "unsound": 0, "narrowed": 1,
                    "raised": 0, "refused": {"SCHEMA_CONDITIONAL": 1, "SCHEMA_TYPE": 1}, "typed": typed,
                    "findings_total": 0, "findings": []}
        self.assertEqual(report, expected)  # 1.0 refused as an integer: the one narrowing

    def test_an_unsound_check_fails_the_invalid_tests_of_its_groups(self):
        with tempfile.TemporaryDirectory() as root:
            report = dif.run_suite(dif.read_suite(tiny_suite_folder(Path(root))), compile_schema=compile_unsoundly)
        self.assertEqual((report["compiled"], report["sound"], report["unsound"], report["narrowed"]), (2, 0, 3, 0))
        self.assertEqual((report["typed"]["compiled"], report["typed"]["unsound"]), (1, 1))
        self.assertEqual([finding["test"] for finding in report["findings"]], ["4", "a string", "three", "abc untyped"])
        self.assertEqual(report["findings"][0]["file"], "maximum.json")
        self.assertEqual(report["findings"][3]["typed"], "string")
        self.assertEqual(report["findings"][3]["schema"], {"maxLength": 2, "type": "string"})

    def test_the_sdist_is_read_in_place(self):
        with tempfile.TemporaryDirectory() as root:
            folder = tiny_suite_folder(Path(root) / "jsonschema-9.9.9" / "json" / "tests")
            write_json(Path(root) / "jsonschema-9.9.9" / "json" / "tests" / "draft7" / "other.json", [])
            sdist = Path(root) / "jsonschema-9.9.9.tar.gz"
            with tarfile.open(sdist, "w:gz") as archive:
                archive.add(Path(root) / "jsonschema-9.9.9", arcname="jsonschema-9.9.9")
            from_sdist = dif.read_suite(sdist)
            self.assertEqual(from_sdist, dif.read_suite(folder))
        self.assertEqual([name for name, _ in from_sdist], ["maximum.json", "optional/maxLength.json"])

    def test_a_remote_reference_is_found_anywhere(self):
        self.assertTrue(dif.has_remote_ref({"items": [{"$ref": "item.json"}]}))
        self.assertTrue(dif.has_remote_ref({"$dynamicRef": "http://x/y#meta"}))
        self.assertFalse(dif.has_remote_ref({"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#"}}}))

    def test_the_oracle_is_held_to_the_suite(self):
        with tempfile.TemporaryDirectory() as root:
            report = dif.run_suite(dif.read_suite(tiny_suite_folder(Path(root))), oracle())
        # Every test of the groups that stay local, the one the compiler refuses included.
        self.assertEqual(report["oracle_agreement"], {"tests": 11, "looser": 0, "stricter": 0, "raised": 0})
        self.assertEqual(report["oracle_disagreements"], {})


# ============================================================================================
# 10. Format readers
# ============================================================================================


def refuse_one(value: str) -> dif.FormatReader:
    """A fake reader that takes every text but one."""
    return dif.FormatReader("fake", "0", lambda texts: [text != value for text in texts])


class TestFormatReaders(unittest.TestCase):

    def test_a_reader_that_refuses_an_admitted_uri_fails_the_run_and_names_it(self):
        report = dif.run_uris(1, 50, oracle(), [refuse_one("http://example.com:65535")])
        self.assertEqual(report["findings_total"], 1)
        self.assertEqual(report["findings"],
                         [{"kind": "reader-refuses", "reader": "fake", "value": "http://example.com:65535"}])
        self.assertEqual(report["verdicts"]["fake"], {"refuses_admitted": 1,
                                                      "admits_refused": report["values"] - report["admitted"]})
        self.assertEqual(report["verdicts"]["oracle"]["refuses_admitted"], 0)
        # refusing a value the check refuses too is no finding
        self.assertEqual(dif.run_uris(1, 50, oracle(), [refuse_one("http://example.com:65536")])["findings_total"], 0)

    def test_the_command_line_exits_1_on_a_reader_finding(self):
        oracle()
        with mock.patch.object(dif, "load_uri_readers", lambda node=None: [refuse_one("a:b")]):
            out = io.StringIO()
            with redirect_stdout(out):
                status = dif.main(["--seed", "2", "--uris", "20"])
        self.assertEqual(status, 1)
        self.assertIn('{"kind":"reader-refuses","reader":"fake","value":"a:b"}', out.getvalue())

    def test_a_reader_that_raises_is_a_finding(self):
        def broken(_texts: Any) -> list[bool]:
            raise ValueError("no answer")
        report = dif.run_uris(1, 10, oracle(), [dif.FormatReader("broken", "0", broken)])
        self.assertEqual(report["findings"], [{"kind": "reader-raised", "reader": "broken", "error": "ValueError"}])

    def test_a_missing_node_is_refused_and_fails_under_ci(self):
        with self.assertRaises(dif.ReaderUnavailable):
            dif.node_reader("/nonexistent/node")
        with mock.patch.dict(os.environ, {"CI": "true"}):
            with self.assertRaises(RuntimeError):
                uri_readers("/nonexistent/node")
        with mock.patch.dict(os.environ, {"CI": "false"}):
            with self.assertRaises(unittest.SkipTest):
                uri_readers("/nonexistent/node")
        oracle()
        out = io.StringIO()
        with redirect_stdout(out):
            status = dif.main(["--uris", "5", "--node", "/nonexistent/node"])
        self.assertEqual(status, 2)
        self.assertIn("node", out.getvalue())

    def test_ci_runs_the_uris_of_each_seed(self):
        with open(HERE / "ci.sh", encoding="utf-8") as handle:
            text = handle.read()
        self.assertIn('run "$vpy" -B differential/differential.py --seed "$seed" --uris "$URIS_PER_SEED"', text)

    def test_node_reads_a_batch_as_whatwg_does(self):
        reader = uri_readers()[-1]
        self.assertEqual(reader.name, "node URL")
        self.assertRegex(reader.version, r"^v[0-9]+\.")
        texts = ["http://a", "http://a b", "\ud800:x", "http://\u00e9.com", "http://0x7f.1", "http://1.2.3.999",
                 "http://a:65536", "foo://a:65535", "http://", "file:etc", "file://host/C:/x"]
        self.assertEqual(reader.read(texts), [True, False, False, True, True, False, False, True, False, True, True])

    def test_pydantic_reads_lax_and_strict_and_the_check_admits_neither_ones_refusals(self):
        lax, strict = uri_readers()[:2]
        self.assertEqual((lax.name, strict.name), ("pydantic AnyUrl", "pydantic AnyUrl strict"))
        texts = ["http://a", "http://a:65536", "file:etc", "file:///etc", "file://host/C:/x", "file:///C:/x"]
        self.assertEqual(lax.read(texts), [True, False, True, True, True, True])
        # Strict mode refuses a file URL without "//", and a host before a drive letter (which
        # lax mode drops and Node keeps): the check refuses both, as it must.
        self.assertEqual(strict.read(texts), [True, False, False, True, False, True])
        self.assertEqual([td.FORMATS["uri"](text) for text in texts], [True, False, False, True, False, True])

    def test_every_reader_takes_what_the_uri_check_admits(self):
        report = dif.run_uris(11, 600, oracle(), uri_readers())
        self.assertGreater(report["admitted"], 200)
        self.assertEqual((report["findings_total"], report["findings"]), (0, []))
        self.assertEqual(list(report["verdicts"]), ["oracle", "pydantic AnyUrl", "pydantic AnyUrl strict", "node URL"])
        self.assertEqual({name: counts["refuses_admitted"] for name, counts in report["verdicts"].items()},
                         dict.fromkeys(report["verdicts"], 0))

    def test_the_same_seed_gives_the_same_uri_report(self):
        readers = [refuse_one("a:b")]
        first = dif.render(dif.run_uris(4, 200, oracle(), readers))
        self.assertEqual(first, dif.render(dif.run_uris(4, 200, oracle(), readers)))
        self.assertNotEqual(first, dif.render(dif.run_uris(5, 200, oracle(), readers)))
        self.assertEqual(dif.uri_candidates(4, 200)[:len(dif.FORMAT_SAMPLES["uri"])], list(dif.FORMAT_SAMPLES["uri"]))

    def test_a_reader_that_refuses_an_admitted_email_fails_the_run_and_names_it(self):
        report = dif.run_emails(1, 50, oracle(), [refuse_one("o'brien@example.com")])
        self.assertEqual(report["format"], "differential-email-report-v1")
        self.assertEqual(report["findings_total"], 1)
        self.assertEqual(report["findings"],
                         [{"kind": "reader-refuses", "reader": "fake", "value": "o'brien@example.com"}])
        self.assertEqual(report["verdicts"]["fake"], {"refuses_admitted": 1,
                                                      "admits_refused": report["values"] - report["admitted"]})
        self.assertEqual(report["verdicts"]["oracle"]["refuses_admitted"], 0)
        # refusing a value the check refuses too is no finding
        self.assertEqual(dif.run_emails(1, 50, oracle(), [refuse_one("a'@example.com")])["findings_total"], 0)

    def test_the_command_line_exits_1_on_an_email_reader_finding(self):
        oracle()
        with mock.patch.object(dif, "load_email_readers", lambda node=None, zod=None: [refuse_one("a@b.co")]):
            out = io.StringIO()
            with redirect_stdout(out):
                status = dif.main(["--seed", "2", "--emails", "20"])
        self.assertEqual(status, 1)
        self.assertIn('{"kind":"reader-refuses","reader":"fake","value":"a@b.co"}', out.getvalue())
        with mock.patch.object(dif, "load_email_readers", lambda node=None, zod=None: [refuse_one("a'@b.co")]):
            with redirect_stdout(io.StringIO()):
                self.assertEqual(dif.main(["--seed", "2", "--emails", "20"]), 0)

    def test_a_missing_zod_is_refused_and_fails_under_ci(self):
        with self.assertRaises(dif.ReaderUnavailable):
            dif.zod_reader(zod=Path("/nonexistent/zod"))
        with self.assertRaises(dif.ReaderUnavailable):
            dif.zod_reader(node="/nonexistent/node")
        with mock.patch.dict(os.environ, {"CI": "true"}):
            with self.assertRaises(RuntimeError):
                email_readers(Path("/nonexistent/zod"))
        with mock.patch.dict(os.environ, {"CI": "false"}):
            with self.assertRaises(unittest.SkipTest):
                email_readers(Path("/nonexistent/zod"))
        oracle()
        out = io.StringIO()
        with redirect_stdout(out):
            status = dif.main(["--emails", "5", "--zod", "/nonexistent/zod"])
        self.assertEqual(status, 2)
        self.assertIn("zod is not installed in /nonexistent/zod", out.getvalue())

    def test_ci_runs_the_emails_of_each_seed_and_pins_their_readers(self):
        with open(HERE / "ci.sh", encoding="utf-8") as handle:
            text = handle.read()
        self.assertIn('run "$vpy" -B differential/differential.py --seed "$seed" --emails "$EMAILS_PER_SEED"', text)
        for package in ("email-validator", "dnspython", "idna"):
            with self.subTest(package=package):
                self.assertRegex(text, "'" + re.escape(package) + r"==[0-9]+\.[0-9]+(\.[0-9]+)?'")
        self.assertRegex(text, r"\nZOD_PIN=zod@[0-9]+\.[0-9]+\.[0-9]+ ")
        self.assertIn('--prefix "$zod" "$ZOD_PIN"', text)

    def test_pydantic_email_str_reads_a_batch_as_email_validator_does(self):
        reader = email_readers()[0]
        self.assertEqual(reader.name, "pydantic EmailStr")
        self.assertRegex(reader.version, r"^pydantic [0-9.]+, email-validator [0-9.]+$")
        # email-validator takes a local part ending in ', a one-letter top-level name, a longer local
        # part than 64 (checked only in its strict mode), punycode and "Name <addr>"; the check refuses
        # each. It refuses reserved names in any case, a label ending in -, and ab--cd.
        texts = ["a@example.com", "o'brien@example.co.uk", "a'@example.com", "a@b.c", "a@b.TEST", "a@xn--p1ai.co",
                 "a@ab--cd.co", "a@a-.co", "\"a b\"@example.com", "Name <a@example.com>", "a@b",
                 dif._EMAIL_LOCAL_64 + "x@example.com", "a@[127.0.0.1]", "a@example.com\n"]
        self.assertEqual(reader.read(texts), [True, True, True, True, False, True, False, False, False, True, False,
                                              True, False, False])
        self.assertEqual([td.FORMATS["email"](text) for text in texts], [True, True] + [False] * 12)

    def test_zod_reads_a_batch_as_its_email_and_html5_regexes_do(self):
        zod, html = email_readers()[1:]
        self.assertEqual((zod.name, html.name), ("zod email", "zod html5Email"))
        self.assertRegex(zod.version, r"^zod [0-9.]+, node v[0-9]+\.")
        # zod's email() takes a label ending in -, reserved names and labels longer than 63; HTML's
        # form field takes a local part ending in ', a single-label domain and a one-letter last label.
        texts = ["a@example.com", "o'brien@example.co.uk", "a'@example.com", "a@b.c", "a@b.TEST", "a@a-.co",
                 "a@b", "a..b@example.com", "a!b@example.com", "a@" + "l" * 64 + ".com", "\u00fc@example.com",
                 "a@example.com\n"]
        self.assertEqual(zod.read(texts), [True, True, False, False, True, True, False, False, False, True, False,
                                           False])
        self.assertEqual(html.read(texts), [True, True, True, True, True, False, True, True, True, False, False,
                                            False])
        self.assertEqual([td.FORMATS["email"](text) for text in texts], [True, True] + [False] * 10)

    def test_every_reader_takes_what_the_email_check_admits(self):
        report = dif.run_emails(11, 600, oracle(), email_readers())
        self.assertGreater(report["admitted"], 200)
        self.assertEqual((report["findings_total"], report["findings"]), (0, []))
        self.assertEqual(list(report["verdicts"]), ["oracle", "pydantic EmailStr", "zod email", "zod html5Email"])
        self.assertEqual({name: counts["refuses_admitted"] for name, counts in report["verdicts"].items()},
                         dict.fromkeys(report["verdicts"], 0))
        self.assertTrue(all(counts["admits_refused"] > 0 for counts in report["verdicts"].values()))

    def test_the_same_seed_gives_the_same_email_report(self):
        readers = [refuse_one("a'@b.co")]
        first = dif.render(dif.run_emails(4, 200, oracle(), readers))
        self.assertEqual(first, dif.render(dif.run_emails(4, 200, oracle(), readers)))
        self.assertNotEqual(first, dif.render(dif.run_emails(5, 200, oracle(), readers)))
        self.assertEqual(dif.email_candidates(4, 200)[:len(dif.FORMAT_SAMPLES["email"])],
                         list(dif.FORMAT_SAMPLES["email"]))
        self.assertNotEqual(dif.email_candidates(4, 200), dif.email_candidates(5, 200))
        self.assertEqual(dif.email_candidates(4, 200), dif.email_candidates(4, 200))

    def test_an_emails_form_is_read_off_its_local_part(self):
        cases = {"a@b.co": "plain", "a.b@c.co": "dotted", "a.b+c@d.co": "symbols", "o'b@c.co": "symbols",
                 "a_b@c.co": "symbols", "a-b@c.co": "symbols", "a@b-c.co": "plain"}
        self.assertEqual({text: dif.email_form(text) for text in cases}, cases)

    def test_a_uris_form_is_read_off_its_authority(self):
        cases = {"a:b": "no-authority", "foo://": "empty-host", "foo://?x": "empty-host", "http://[::1]:80/": "ipv6",
                 "http://1.2.3.4:8/": "ipv4", "http://a.b:1": "name", "file:///x": "empty-host"}
        self.assertEqual({text: dif.uri_form(text) for text in cases}, cases)


# ============================================================================================
# 11. CLI
# ============================================================================================


class TestCli(unittest.TestCase):

    def run_main(self, *argv: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            try:
                status = dif.main(list(argv))
            except SystemExit as stop:
                status = stop.code if type(stop.code) is int else 2
        return status, out.getvalue(), err.getvalue()

    def test_a_count_must_be_ascii_digits_within_the_limit(self):
        for argv in (["--schemas", "-1"], ["--schemas", "\u0665"], ["--seed", "x"], ["--schemas", "100001"],
                     ["--emails", "100001"], ["--emails", "-1"], ["--uris", "5", "--emails", "5"]):
            with self.subTest(argv=argv):
                status, out, _ = self.run_main(*argv)
                self.assertEqual((status, out), (2, ""))

    def test_the_suite_mode_prints_its_report_and_exits_0(self):
        with tempfile.TemporaryDirectory() as root:
            status, out, _ = self.run_main("--suite", str(tiny_suite_folder(Path(root))))
        self.assertEqual(status, 0)
        self.assertEqual(json.loads(out)["compiled"], 2)
        status, _, _ = self.run_main("--suite", "/nonexistent/suite")
        self.assertEqual(status, 2)

    def test_without_the_oracle_a_seeded_run_exits_2(self):
        saved = dif.load_oracle
        dif.load_oracle = lambda: None
        try:
            status, out, _ = self.run_main("--seed", "1", "--schemas", "5")
        finally:
            dif.load_oracle = saved
        self.assertEqual(status, 2)
        self.assertIn("bash differential/ci.sh", out)

    def test_the_report_is_json_with_a_line_for_each_finding(self):
        report = {"format": "x", "counts": {"a": 1, "b": {"c": [1, 2]}}, "empty": {},
                  "findings": [{"v": 1.0}, {"v": True}]}
        text = dif.render(report)
        self.assertEqual(json.loads(text), report)
        self.assertEqual(text.splitlines()[-5:], ['  "findings": [', '    {"v":1.0},', '    {"v":true}', "  ]", "}"])

    def test_the_command_line_is_deterministic_and_exits_0_when_sound(self):
        oracle()
        command = [sys.executable, "-B", str(HERE / "differential.py"), "--seed", "7", "--schemas", "30",
                   "--overlays", "0"]
        environment = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
        first = subprocess.run(command, capture_output=True, env=environment, check=False)
        second = subprocess.run(command, capture_output=True, env=environment, check=False)
        self.assertEqual((first.returncode, first.stderr), (0, b""))
        self.assertEqual(first.stdout, second.stdout)
        report = json.loads(first.stdout)
        self.assertEqual((report["seed"], report["schemas"]["generated"], report["overlays"]["generated"]), (7, 30, 0))



# ============================================================================================
# The Pydantic census (differential/pydantic_census.py)
# ============================================================================================


class TestPydanticCensus(unittest.TestCase):

    def line(self, name: str) -> dict[str, Any]:
        module = census()
        model, inputs = module.CENSUS[name]
        return module.census_model(name, model, inputs, ORACLE)["line"]

    def test_discriminated_unions_compile_alone_and_in_a_list(self):
        for name in ("DrawShape", "BrowserActions"):
            with self.subTest(name=name):
                line = self.line(name)
                self.assertIs(line.get("compiled"), True)
                self.assertGreater(line["admitted"], 0)
                self.assertEqual((line["unsound"], line["pydantic_refuses"], line["strict_only"]), (0, 0, 0))

    def test_a_recursive_model_is_refused_at_the_root(self):
        # A cycle is found in the compiled rule graph, after every $ref was followed: at the root,
        # whether the root itself is the $ref (Category) or a property's model is (SearchWithFilter).
        for name in ("Category", "SearchWithFilter"):
            with self.subTest(name=name):
                self.assertEqual(self.line(name), {"name": name, "code": "SCHEMA_REF_RECURSIVE", "at": "schema"})

    def test_a_discriminated_union_whose_tags_have_defaults_compiles_and_requires_its_tag(self):
        # Literal["card"] = "card": pydantic leaves the tag out of "required" but refuses a value
        # without it (union_tag_not_found); the compiled check requires it too.
        line = self.line("AddPaymentMethod")
        self.assertEqual((line["compiled"], line["unsound"], line["pydantic_refuses"]), (True, 0, 0))

    def test_deliberate_refusals_name_their_code_and_place(self):
        expected = {
            "UploadFile": ("SCHEMA_FORMAT", "schema.properties[1].format"),  # bytes is format binary
            "TransferFunds": ("SCHEMA_NUMBER", "schema.properties[2].multipleOf"),  # multiple_of=0.01
            "Notify": ("SCHEMA_COMBINATOR", "schema.properties[0]"),  # a plain Union of models has no tag
            "GeoSearch": ("SCHEMA_TUPLE", "schema.properties[0]"),  # tuple[float, float] is prefixItems
            "ScheduleSlots": ("SCHEMA_KEYWORD", "schema"),  # a set of frozen models: uniqueItems over objects
            "UpsertDocument": ("SCHEMA_OPEN_OBJECT", "schema.properties[2]"),  # dict[str, Any]
        }
        for name, (code, at) in expected.items():
            with self.subTest(name=name):
                self.assertEqual(self.line(name), {"name": name, "code": code, "at": at})

    def test_url_models_compile_and_only_http_url_refuses_what_its_schema_admits(self):
        # HttpUrl and AnyUrl are both "format": "uri" (HttpUrl adds "maxLength": 2083). HttpUrl
        # also takes only the http and https schemes, which its schema does not say.
        module = census()
        for name in ("HttpRequest", "FetchPage"):
            with self.subTest(name=name):
                line = self.line(name)
                self.assertEqual((line["compiled"], line["unsound"]), (True, 0))
                self.assertGreater(line["admitted"], 100)
        self.assertEqual(self.line("FetchPage")["pydantic_refuses"], 0)
        model, inputs = module.CENSUS["HttpRequest"]
        compiled = td.compile_schema(module.schema_of(model))
        refused = [value["url"] for value in module.mutations(module.dumps(model, inputs))
                   if compiled.admits(value) and module.pydantic_verdict(model, value)[0] == "refused"]
        self.assertEqual(len(refused), self.line("HttpRequest")["pydantic_refuses"])
        self.assertGreater(len(refused), 0)
        self.assertEqual([url for url in refused if url.split(":", 1)[0].lower() in ("http", "https")], [])

    def test_an_email_model_compiles_and_pydantic_takes_every_address_its_check_admits(self):
        # EmailStr is {"type": "string", "format": "email"}; email-validator (without its DNS
        # look-up) takes every address the check admits, and more, which the check narrows.
        module = census()
        line = self.line("SendEmail")
        self.assertEqual((line["compiled"], line["unsound"], line["pydantic_refuses"], line["strict_only"]),
                         (True, 0, 0, 0))
        self.assertGreater(line["admitted"], 100)
        self.assertGreater(line["narrowed"], 100)
        schema = module.schema_of(module.SendEmail)
        self.assertEqual(schema["properties"]["to"]["items"], {"format": "email", "type": "string"})
        compiled = td.compile_schema(schema)
        for address, admitted in (("o'brien@example.co.uk", True), ("a'@example.com", False), ("a@b.c", False),
                                  ("Name <a@example.com>", False), ("a@xn--p1ai.co", False)):
            value = {"to": [address], "subject": "Hi", "body": "..."}
            with self.subTest(address=address):
                self.assertIs(compiled.admits(value), admitted)
                self.assertEqual(module.pydantic_verdict(module.SendEmail, value), ("strict", ""))
        values = module.mutations(module.dumps(module.SendEmail, module.CENSUS["SendEmail"][1]))
        self.assertTrue(any(type(value) is dict and value.get("to") == ["a@b.TEST"] for value in values))

    def test_a_decimal_fields_schema_admits_text_that_pydantic_refuses(self):
        # pydantic 2.14 dropped the pattern its Decimal schema's string branch had (2.13 wrote one
        # with a lookahead, SCHEMA_PATTERN_UNSUPPORTED): any text is now a Decimal to the schema.
        module = pinned_census()
        schema = module.schema_of(module.InvoiceLine)
        self.assertEqual(schema["properties"]["unit_price"]["anyOf"], [{"type": "number"}, {"type": "string"}])
        value = {"description": "Widget", "unit_price": "nine"}
        self.assertTrue(td.compile_schema(schema).admits(value))
        self.assertTrue(oracle().valid(schema, value))  # sound: the schema admits it too
        self.assertEqual(module.pydantic_verdict(module.InvoiceLine, value),
                         ("refused", "decimal_parsing at unit_price"))

    def test_pydantic_is_asked_strict_then_lax(self):
        module = census()
        self.assertEqual(module.pydantic_verdict(module.GetWeather, {"city": "Oslo"}), ("strict", ""))
        self.assertEqual(module.pydantic_verdict(module.GetWeather, {"city": "Oslo", "days": "3"}),
                         ("lax", "int_type at days"))
        self.assertEqual(module.pydantic_verdict(module.GetWeather, {"city": 7}), ("refused", "string_type at city"))

    def test_a_sets_dump_is_sorted_and_a_naive_datetimes_dump_is_refused(self):
        module = census()
        dumped = module.dumps(module.CreateTicket, [{"title": "VPN", "labels": ["vpn", "net", "ops"]}])
        self.assertEqual(dumped[0]["labels"], ["net", "ops", "vpn"])
        naive = module.dumps(module.CreateCalendarEvent,
                             [{"title": "x", "start": "2024-05-08T12:00:00", "end": "2024-05-08T13:00:00"}])[0]
        self.assertEqual(naive["end"], "2024-05-08T13:00:00")  # Pydantic's own dump: no offset, not RFC 3339
        with self.assertRaises(td.BoundaryError) as refused:
            td.compile_schema(module.schema_of(module.CreateCalendarEvent)).check(naive)
        self.assertEqual((refused.exception.code, refused.exception.at), ("VALUE_FORMAT", "value.properties[2]"))

    def test_mutations_change_one_place_at_a_time(self):
        module = census()
        sample = {"a": 1, "b": ["x"]}
        values = module.mutations([sample])
        self.assertTrue(dif.same_json(values[0], sample))
        for expected in ({"b": ["x"]}, {"a": 1}, {"a": 1.0, "b": ["x"]}, {"a": True, "b": ["x"]}, {"a": 1, "b": []},
                         {"a": 1, "b": ["x\n"]}, {"a": 1, "b": ["x"], "extra": 1}):
            with self.subTest(expected=expected):
                self.assertTrue(any(dif.same_json(value, expected) for value in values))
        self.assertTrue(all(dif.is_json_value(value) for value in values))
        self.assertEqual(len(values), len(dif.unique_values(values)))
        self.assertEqual(len(module.mutations([sample], limit=5)), 5)
        # a place that another sample holds takes its value there: a union's tag from another branch
        tagged = module.mutations([{"kind": "circle", "r": 1}, {"kind": "square", "w": 2}])
        self.assertTrue(any(dif.same_json(value, {"kind": "square", "r": 1}) for value in tagged))

    def test_a_check_that_admits_what_the_schema_refuses_is_unsound_and_exits_1(self):
        module = census()
        model, inputs = module.CENSUS["GetWeather"]
        result = module.spot_check("GetWeather", model, module.schema_of(model), AdmitsEverything(),
                                   module.dumps(model, inputs), oracle())
        self.assertGreater(result["line"]["unsound"], 0)
        self.assertEqual(result["findings"][0]["kind"], "unsound")
        self.assertEqual(module.exit_status({"counts": {"raised": 0}, "findings": result["findings"]}), 1)

    def test_a_model_without_a_json_schema_is_raised_and_exits_1(self):
        module = census()

        class Opaque:
            pass

        class Holder(module.BaseModel):
            model_config = module.ConfigDict(arbitrary_types_allowed=True)
            thing: Opaque

        report = module.run_census(census={"Holder": (Holder, ({"thing": Opaque()},))})
        self.assertEqual(report["counts"], {"models": 1, "compiled": 0, "refused": {}, "raised": 1})
        self.assertEqual(report["findings"][0]["kind"], "raised")
        self.assertEqual(module.exit_status(report), 1)

    def test_the_census_counts_add_up_and_nothing_admitted_is_refused_by_its_schema(self):
        module = census()
        report = module.run_census(oracle=oracle())
        counts = report["counts"]
        self.assertEqual([line["name"] for line in report["models"]], list(module.CENSUS))
        self.assertEqual(counts["models"], len(module.CENSUS))
        self.assertEqual(counts["compiled"] + sum(counts["refused"].values()), counts["models"])
        self.assertEqual((counts["raised"], report["spot_check"]["unsound"]), (0, 0))
        self.assertLessEqual({found["kind"] for found in report["findings"]}, {"pydantic-refuses", "strict-only"})
        self.assertEqual(module.exit_status(report), 0)

    def test_ci_pins_pydantic_and_its_core_exactly(self):
        with open(HERE / "ci.sh", encoding="utf-8") as handle:
            text = handle.read()
        for package in ("pydantic", "pydantic-core", "annotated-types", "typing-inspection"):
            with self.subTest(package=package):
                self.assertRegex(text, "'" + re.escape(package) + r"==[0-9]+\.[0-9]+\.[0-9]+'")
        self.assertIn('run "$vpy" -B differential/pydantic_census.py', text)

    def test_the_command_line_prints_the_same_bytes_under_any_hash_seed(self):
        census()
        command = [sys.executable, "-B", str(HERE / "pydantic_census.py")]
        runs = [subprocess.run(command, capture_output=True, check=False,
                               env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": seed})
                for seed in ("1", "2")]
        self.assertEqual((runs[0].returncode, runs[0].stderr), (0, b""))
        self.assertEqual(runs[0].stdout, runs[1].stdout)
        self.assertEqual(json.loads(runs[0].stdout)["format"], "pydantic-census-report-v1")
        refused = subprocess.run(command + ["--models", "3"], capture_output=True, check=False,
                                 env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
        self.assertEqual(refused.returncode, 2)


if __name__ == "__main__":
    unittest.main()
