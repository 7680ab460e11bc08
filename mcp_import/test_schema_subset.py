"""Tests of the exact JSON Schema subset, one TestCase per section of schema_subset.py.

Run from the repository root (any of -O, -W error, both):
    python -B -m unittest discover -s mcp_import -p 'test_*.py'
"""
from __future__ import annotations

import sys
import time
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import schema_subset as ss  # noqa: E402
import tool_dispatcher  # noqa: E402

MAX = tool_dispatcher.MAX_SAFE_INTEGER


def obj(properties=None, required=None, **extra):
    schema = {"type": "object", "properties": properties or {}}
    if required is not None:
        schema["required"] = required
    schema.update(extra)
    return schema


def field(schema, required=True):
    return obj({"f": schema}, ["f"] if required else [])


class Case(unittest.TestCase):
    def refused(self, schema, code, at=None, **options):
        with self.assertRaises(ss.SchemaRefusal) as caught:
            ss.compile_schema(schema, **options)
        self.assertEqual(caught.exception.code, code)
        if at is not None:
            self.assertEqual(caught.exception.at, at)
        return caught.exception

    def value_refused(self, compiled, value, code, at=None):
        with self.assertRaises(ss.ValueRefusal) as caught:
            compiled.check(value)
        self.assertEqual(caught.exception.code, code)
        if at is not None:
            self.assertEqual(caught.exception.at, at)
        self.assertFalse(compiled.admits(value))

    def admitted(self, compiled, value):
        compiled.check(value)
        self.assertTrue(compiled.admits(value))


class TestLimits(Case):
    def test_bytes_both_sides(self):
        text = "x" * 100
        schema = obj(description=text)
        size = len(tool_dispatcher.canonical_json(schema))
        ss.prescan(schema, max_bytes=size)
        with self.assertRaises(ss.SchemaRefusal) as caught:
            ss.prescan(schema, max_bytes=size - 1)
        self.assertEqual(caught.exception.code, "SCHEMA_TOO_LARGE")

    def test_huge_string_stops_at_the_text_count(self):
        self.refused(obj(description="x" * (ss.MAX_SCHEMA_BYTES + 1)), "SCHEMA_TOO_LARGE", "schema")

    def test_depth_both_sides(self):
        deep = {"type": "string"}
        for _ in range(15):  # each level adds two containers: properties, then the field
            deep = obj({"a": deep})
        ss.compile_schema(deep)  # 31 containers
        self.refused(obj({"a": deep}), "SCHEMA_TOO_DEEP", "schema")

    def test_nodes_both_sides(self):
        schema = obj(examples=[0] * 10)
        ss.prescan(schema, max_nodes=14)  # root, 2 strings... counted: type, properties, examples + items
        with self.assertRaises(ss.SchemaRefusal) as caught:
            ss.prescan(schema, max_nodes=13)
        self.assertEqual(caught.exception.code, "SCHEMA_TOO_MANY_NODES")

    def test_properties_both_sides(self):
        ss.compile_schema(obj({f"p{i}": {"type": "boolean"} for i in range(ss.MAX_PROPERTIES)}))
        self.refused(obj({f"p{i}": {"type": "boolean"} for i in range(ss.MAX_PROPERTIES + 1)}),
                     "SCHEMA_TOO_MANY_PROPERTIES", "schema.properties")

    def test_enum_both_sides(self):
        ss.compile_schema(field({"type": "string", "enum": [str(i) for i in range(ss.MAX_ENUM)]}))
        self.refused(field({"type": "string", "enum": [str(i) for i in range(ss.MAX_ENUM + 1)]}),
                     "SCHEMA_ENUM_TOO_LARGE", "schema.properties[0].enum")

    def test_pattern_length_both_sides(self):
        ss.compile_pattern("^" + "a" * (ss.MAX_PATTERN_LENGTH - 2) + "$")
        self.refused(field({"type": "string", "pattern": "^" + "a" * (ss.MAX_PATTERN_LENGTH - 1) + "$"}),
                     "SCHEMA_PATTERN_TOO_LONG", "schema.properties[0].pattern")

    def test_definitions_both_sides(self):
        defs = {f"d{i}": {"type": "boolean"} for i in range(ss.MAX_DEFINITIONS)}
        ss.compile_schema(obj({"a": {"$ref": "#/$defs/d0"}}, **{"$defs": defs}))
        defs["extra"] = {"type": "boolean"}
        self.refused(obj({"a": {"$ref": "#/$defs/d0"}}, **{"$defs": defs}), "SCHEMA_TOO_MANY_PROPERTIES",
                     "schema.$defs")

    def test_name_length_both_sides(self):
        ss.compile_schema(obj({"n" * ss.MAX_NAME_LENGTH: {"type": "boolean"}}))
        self.refused(obj({"n" * (ss.MAX_NAME_LENGTH + 1): {"type": "boolean"}}), "SCHEMA_NAME",
                     "schema.properties[0]")
        self.refused(obj({"": {"type": "boolean"}}), "SCHEMA_NAME", "schema.properties[0]")

    def test_non_json_values_refused(self):
        self.refused(obj(examples=[(1, 2)]), "SCHEMA_NOT_PORTABLE", "schema")
        self.refused(obj(description="\ud800"), "SCHEMA_NOT_PORTABLE", "schema")
        self.refused(obj(**{"\udc00": 1}), "SCHEMA_NOT_PORTABLE", "schema")
        self.refused(obj(examples=[float("nan")]), "SCHEMA_NOT_PORTABLE", "schema")

    def test_floats_in_annotations_are_ignored(self):
        ss.compile_schema(obj(examples=[1.5], default=None))


class TestPatterns(Case):
    def compiled(self, pattern):
        return ss.compile_pattern(pattern)

    def pattern_refused(self, pattern, code):
        with self.assertRaises(ss.SchemaRefusal) as caught:
            ss.compile_pattern(pattern, "here")
        self.assertEqual((caught.exception.code, caught.exception.at), (code, "here"))

    def test_accepted_subset(self):
        cases = {
            "^ORDER-[0-9]{1,12}$": (["ORDER-7", "ORDER-123456789012"], ["ORDER-", "ORDER-1234567890123", "order-7"]),
            "^[a-z]+-\\d{2}$": (["ab-12"], ["ab-1", "-12", "ab-123"]),
            "^a?b*c$": (["c", "abc", "bbbc"], ["aac", "ab"]),
            "^(?:abc|de)x$": (["abcx", "dex"], ["abx", "abcdex"]),
            "^(ab){2,3}$": (["abab", "ababab"], ["ab", "abababab"]),
            "^yes$|^no$": (["yes", "no"], ["yesno", "ye"]),
            "^[-a]\\.[a-]\\/$": (["-.a/", "a.-/"], ["b.a/"]),
            "^$": ([""], ["a"]),
            "^\\$\\^$": (["$^"], ["$"]),
            "^[A-Z][a-z0-9_ ]{0,10}$": (["Ab_ 9"], ["ab"]),
        }
        for pattern, (good, bad) in cases.items():
            regex = self.compiled(pattern)
            for text in good:
                with self.subTest(pattern=pattern, text=text):
                    self.assertIsNotNone(regex.fullmatch(text))
            for text in bad:
                with self.subTest(pattern=pattern, text=text):
                    self.assertIsNone(regex.fullmatch(text))

    def test_emitted_as_ascii_escapes(self):
        self.assertEqual(self.compiled("^a[0-9x]{1,3}-$").pattern, "(?:\\x61[\\x30-\\x39\\x78]{1,3}\\x2d)")

    def test_unanchored_refused(self):
        for pattern in ("ORDER-[0-9]+", "^abc", "abc$", "^a|b$", "^a$b$", "^a$|b$", "^(a$)$"):
            with self.subTest(pattern=pattern):
                self.pattern_refused(pattern, "SCHEMA_PATTERN_UNANCHORED")

    def test_constructs_that_differ_between_engines_refused(self):
        for pattern in ("^.$", "^[^a]$", "^\\w$", "^\\s$", "^\\D$", "^\\bx$", "^(?=a)a$", "^(?<n>a)$",
                        "^(a)\\1$", "^\\u0041$", "^é$", "^a+?$", "^a{,3}$", "^a{2,1}$", "^a{1001}$", "^[]$",
                        "^[z-a]$", "^[\\d-z]$", "^[[]$", "^a{$", "^]$", "^\t$", "^(?i)a$", "^**$", "^[abc$",
                        "^(a$", "^a$|^b$|^(c|d)$", "^(a|b)(c|d)$"):
            with self.subTest(pattern=pattern):
                self.pattern_refused(pattern, "SCHEMA_PATTERN_UNSUPPORTED" if pattern != "^(a$" else
                                     "SCHEMA_PATTERN_UNANCHORED")

    def test_nested_quantifiers_refused(self):
        for pattern in ("^(a+)+$", "^(a|a)*$", "^(a|b){2}$", "^(?:ab?)+$", "^((a))$", "^(?:b*)?c$", "^(?:b?|c)?d$",
                        "^(?:)*$", "^x(?:b*)?(?:c*)?(?:d*)?$"):
            with self.subTest(pattern=pattern):
                self.pattern_refused(pattern, "SCHEMA_PATTERN_NESTED_QUANTIFIER")

    def test_optional_group_with_inner_quantifier_accepted(self):
        self.assertIsNotNone(self.compiled("^a(?:-[0-9]{2})?$").fullmatch("a-12"))

    def test_overlapping_repetition_refused(self):
        for pattern in ("^a*a*$", "^[a-z]+[a-z0-9]*$", "^a{1,3}a$", "^a*b?a$", "^(?:ab)*a$", "^x(?:a*|b)a$",
                        "^(?:a|b)*$"):
            with self.subTest(pattern=pattern):
                with self.assertRaises(ss.SchemaRefusal) as caught:
                    ss.compile_pattern(pattern)
                self.assertIn(caught.exception.code, ("SCHEMA_PATTERN_AMBIGUOUS", "SCHEMA_PATTERN_NESTED_QUANTIFIER"))
        self.pattern_refused("^a*a*$", "SCHEMA_PATTERN_AMBIGUOUS")
        self.pattern_refused("^(?:ab)*a$", "SCHEMA_PATTERN_AMBIGUOUS")

    def test_disjoint_follow_accepted(self):
        for pattern in ("^a*b*c*$", "^[a-z]+-[0-9]+$", "^a{0,3}b{2}$", "^(?:ab)*c$"):
            with self.subTest(pattern=pattern):
                self.compiled(pattern)

    def test_alternation_width_both_sides(self):
        branches = [chr(97 + i % 26) + str(i // 26) for i in range(ss.MAX_BRANCHES + 1)]
        self.compiled("^(?:" + "|".join(branches[:-1]) + ")$")
        self.pattern_refused("^(?:" + "|".join(branches) + ")$", "SCHEMA_PATTERN_UNSUPPORTED")
        self.compiled("|".join(f"^{branch}$" for branch in branches[:-1]))
        self.pattern_refused("|".join(f"^{branch}$" for branch in branches), "SCHEMA_PATTERN_UNSUPPORTED")

    def test_quantifier_bound_both_sides(self):
        self.compiled("^a{1000}$")
        self.pattern_refused("^a{1001}$", "SCHEMA_PATTERN_UNSUPPORTED")

    def test_redos_candidates_refused_quickly(self):
        start = time.perf_counter()
        for pattern in ("^(a+)+$", "^(a|aa)*$", "^(\\d+)*x$", "^a*a*a*a*a*b$", "^([a-z]+)*$", "^(a*)*$"):
            with self.assertRaises(ss.SchemaRefusal):
                ss.compile_pattern(pattern)
        self.assertLess(time.perf_counter() - start, 0.5)

    def test_accepted_patterns_run_fast_on_hostile_text(self):
        regex = self.compiled("^[a-z]+-[0-9]+$|^[a-z]+$")
        start = time.perf_counter()
        self.assertIsNone(regex.fullmatch("a" * 4096 + "!"))
        self.assertLess(time.perf_counter() - start, 0.5)

    def test_pattern_must_be_a_string(self):
        self.refused(field({"type": "string", "pattern": 5}), "SCHEMA_MALFORMED", "schema.properties[0].pattern")


class TestStrings(Case):
    def test_lengths_both_sides(self):
        compiled = ss.compile_schema(field({"type": "string", "minLength": 2, "maxLength": 3}))
        self.admitted(compiled, {"f": "ab"})
        self.admitted(compiled, {"f": "abc"})
        self.value_refused(compiled, {"f": "a"}, "VALUE_LENGTH", "value.properties[0]")
        self.value_refused(compiled, {"f": "abcd"}, "VALUE_LENGTH", "value.properties[0]")

    def test_absent_max_length_is_the_host_bound_recorded(self):
        compiled = ss.compile_schema(field({"type": "string"}))
        rule = compiled.rules[1]
        self.assertEqual((rule.max_length, rule.max_length_from), (ss.DEFAULT_MAX_LENGTH, "host"))
        self.assertEqual(compiled.host_bounds(), ("schema.properties[0].maxLength",))
        enum = ss.compile_schema(field({"type": "string", "enum": ["a"]}))
        self.assertEqual((enum.host_bounds(), enum.to_schema()["properties"]["f"]), ((), {"type": "string", "enum": ["a"]}))
        self.admitted(compiled, {"f": "x" * ss.DEFAULT_MAX_LENGTH})
        self.value_refused(compiled, {"f": "x" * (ss.DEFAULT_MAX_LENGTH + 1)}, "VALUE_LENGTH")
        small = ss.compile_schema(field({"type": "string"}), bounds=ss.Bounds(max_length=5))
        self.assertEqual(small.rules[1].max_length, 5)

    def test_declared_max_length_above_the_ceiling_is_tightened_and_recorded(self):
        at_ceiling = ss.compile_schema(field({"type": "string", "maxLength": ss.DEFAULT_MAX_LENGTH}))
        self.assertEqual(at_ceiling.rules[1].max_length_from, "schema")
        above = ss.compile_schema(field({"type": "string", "maxLength": ss.DEFAULT_MAX_LENGTH + 1}))
        self.assertEqual((above.rules[1].max_length, above.rules[1].max_length_from), (ss.DEFAULT_MAX_LENGTH, "host"))

    def test_bad_lengths_refused(self):
        for schema, at in (({"type": "string", "minLength": 3, "maxLength": 2}, "schema.properties[0].minLength"),
                           ({"type": "string", "maxLength": -1}, "schema.properties[0].maxLength"),
                           ({"type": "string", "maxLength": True}, "schema.properties[0].maxLength"),
                           ({"type": "string", "maxLength": None}, "schema.properties[0].maxLength"),
                           ({"type": "string", "minLength": 1.0}, "schema.properties[0].minLength"),
                           ({"type": "string", "minLength": ss.DEFAULT_MAX_LENGTH + 1},
                            "schema.properties[0].minLength")):
            with self.subTest(schema=schema):
                self.refused(field(schema), "SCHEMA_BOUNDS", at)

    def test_enum_and_const(self):
        compiled = ss.compile_schema(field({"type": "string", "enum": ["a", "b"]}))
        self.admitted(compiled, {"f": "a"})
        self.value_refused(compiled, {"f": "c"}, "VALUE_ENUM", "value.properties[0]")
        const = ss.compile_schema(field({"const": "x"}))
        self.admitted(const, {"f": "x"})
        self.value_refused(const, {"f": "y"}, "VALUE_ENUM")
        both = ss.compile_schema(field({"type": "string", "enum": ["a", "b"], "const": "b"}))
        self.value_refused(both, {"f": "a"}, "VALUE_ENUM")
        self.admitted(both, {"f": "b"})

    def test_bad_enums_refused(self):
        for schema in ({"type": "string", "enum": []}, {"type": "string", "enum": ["a", "a"]},
                       {"type": "string", "enum": ["a", 1]}, {"type": "string", "enum": "a"},
                       {"type": "string", "enum": ["a"], "const": "b"}, {"type": "string", "const": 1}):
            with self.subTest(schema=schema):
                self.refused(field(schema), "SCHEMA_ENUM")

    def test_pattern_with_length(self):
        compiled = ss.compile_schema(field({"type": "string", "pattern": "^[a-z]+$", "maxLength": 3}))
        self.admitted(compiled, {"f": "abc"})
        self.value_refused(compiled, {"f": "abcd"}, "VALUE_LENGTH")
        self.value_refused(compiled, {"f": "ab1"}, "VALUE_PATTERN", "value.properties[0]")

    def test_exact_type_only(self):
        compiled = ss.compile_schema(field({"type": "string"}))

        class Text(str):
            pass

        for value in (Text("a"), 1, None, b"a", ["a"]):
            with self.subTest(value=value):
                self.value_refused(compiled, {"f": value}, "VALUE_TYPE", "value.properties[0]")

    def test_lone_surrogate_refused(self):
        compiled = ss.compile_schema(field({"type": "string"}))
        self.value_refused(compiled, {"f": "a\ud800"}, "VALUE_NOT_PORTABLE")
        self.admitted(compiled, {"f": "caf\u00e9"})


class TestIntegers(Case):
    def test_bounds_both_sides(self):
        compiled = ss.compile_schema(field({"type": "integer", "minimum": 1, "maximum": 3}))
        for value in (1, 3):
            self.admitted(compiled, {"f": value})
        for value in (0, 4):
            self.value_refused(compiled, {"f": value}, "VALUE_RANGE", "value.properties[0]")

    def test_exclusive_bounds_both_sides(self):
        compiled = ss.compile_schema(field({"type": "integer", "exclusiveMinimum": 1, "exclusiveMaximum": 4}))
        self.admitted(compiled, {"f": 2})
        self.admitted(compiled, {"f": 3})
        self.value_refused(compiled, {"f": 1}, "VALUE_RANGE")
        self.value_refused(compiled, {"f": 4}, "VALUE_RANGE")

    def test_default_range_is_the_safe_integers(self):
        compiled = ss.compile_schema(field({"type": "integer"}))
        self.admitted(compiled, {"f": MAX})
        self.admitted(compiled, {"f": -MAX})
        self.value_refused(compiled, {"f": MAX + 1}, "VALUE_NOT_PORTABLE")
        self.value_refused(compiled, {"f": -MAX - 1}, "VALUE_NOT_PORTABLE")

    def test_multiple_of(self):
        compiled = ss.compile_schema(field({"type": "integer", "multipleOf": 5}))
        self.admitted(compiled, {"f": -10})
        self.value_refused(compiled, {"f": 7}, "VALUE_RANGE")
        for step in (0, -5, 2.5, True):
            with self.subTest(step=step):
                self.refused(field({"type": "integer", "multipleOf": step}), "SCHEMA_BOUNDS",
                             "schema.properties[0].multipleOf")

    def test_bounds_must_be_safe_integers(self):
        ss.compile_schema(field({"type": "integer", "minimum": -MAX, "maximum": MAX}))
        for keyword, value in (("minimum", -MAX - 1), ("maximum", MAX + 1), ("minimum", 0.5), ("maximum", False),
                               ("exclusiveMinimum", True)):
            with self.subTest(keyword=keyword, value=value):
                self.refused(field({"type": "integer", keyword: value}), "SCHEMA_BOUNDS",
                             f"schema.properties[0].{keyword}")
        self.refused(field({"type": "integer", "minimum": 3, "maximum": 2}), "SCHEMA_BOUNDS", "schema.properties[0]")
        self.refused(field({"type": "integer", "exclusiveMinimum": 2, "exclusiveMaximum": 3}), "SCHEMA_BOUNDS")

    def test_never_bool_never_float(self):
        compiled = ss.compile_schema(field({"type": "integer"}))
        for value in (True, False, 1.0, "1"):
            with self.subTest(value=value):
                self.value_refused(compiled, {"f": value}, "VALUE_TYPE")

    def test_integer_enum(self):
        compiled = ss.compile_schema(field({"type": "integer", "enum": [1, 2]}))
        self.admitted(compiled, {"f": 2})
        self.value_refused(compiled, {"f": 3}, "VALUE_ENUM")
        self.refused(field({"type": "integer", "enum": [1, True]}), "SCHEMA_ENUM")
        self.refused(field({"type": "integer", "enum": [MAX + 1]}), "SCHEMA_ENUM")

    def test_number_refused(self):
        self.refused(field({"type": "number"}), "SCHEMA_NUMBER", "schema.properties[0]")
        self.refused(field({"type": ["number", "null"]}), "SCHEMA_NUMBER")
        self.refused(field({"type": ["number", "string"]}), "SCHEMA_NUMBER")


class TestBooleansAndNull(Case):
    def test_boolean(self):
        compiled = ss.compile_schema(field({"type": "boolean"}))
        self.admitted(compiled, {"f": True})
        self.admitted(compiled, {"f": False})
        for value in (0, 1, "true", None):
            with self.subTest(value=value):
                self.value_refused(compiled, {"f": value}, "VALUE_TYPE")
        const = ss.compile_schema(field({"const": True}))
        self.value_refused(const, {"f": False}, "VALUE_ENUM")

    def test_nullable_type_list(self):
        for types in (["string", "null"], ["null", "string"]):
            compiled = ss.compile_schema(field({"type": types, "maxLength": 2}))
            self.admitted(compiled, {"f": None})
            self.admitted(compiled, {"f": "ab"})
            self.value_refused(compiled, {"f": "abc"}, "VALUE_LENGTH")

    def test_nullable_any_of_as_pydantic_emits(self):
        compiled = ss.compile_schema(field({"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None,
                                            "title": "F"}, required=False))
        self.admitted(compiled, {})
        self.admitted(compiled, {"f": None})
        self.admitted(compiled, {"f": 3})
        self.value_refused(compiled, {"f": "3"}, "VALUE_TYPE")
        flipped = ss.compile_schema(field({"anyOf": [{"type": "null"}, {"type": "boolean"}]}))
        self.admitted(flipped, {"f": None})

    def test_nullable_enum_needs_null_in_the_enum(self):
        without = ss.compile_schema(field({"type": ["string", "null"], "enum": ["a"]}))
        self.value_refused(without, {"f": None}, "VALUE_TYPE")
        with_null = ss.compile_schema(field({"type": ["string", "null"], "enum": ["a", None]}))
        self.admitted(with_null, {"f": None})
        self.value_refused(with_null, {"f": "b"}, "VALUE_ENUM")
        inferred = ss.compile_schema(field({"enum": ["a", None]}))
        self.admitted(inferred, {"f": None})
        self.refused(field({"type": ["string", "null"], "const": None}), "SCHEMA_NULL")

    def test_null_alone_refused(self):
        self.refused(field({"type": "null"}), "SCHEMA_NULL", "schema.properties[0]")
        self.refused(field({"type": ["null"]}), "SCHEMA_NULL")

    def test_other_unions_and_types_refused(self):
        for schema in ({"type": ["string", "integer"]}, {"type": ["string", "string"]}, {"type": []},
                       {"type": "date"}, {"type": 3}, {}, {"enum": ["a", 1]}, {"enum": [[1]]}, {"description": "x"}):
            with self.subTest(schema=schema):
                self.refused(field(schema), "SCHEMA_TYPE")

    def test_any_of_other_than_nullable_refused(self):
        for schema in ({"anyOf": [{"type": "string"}, {"type": "integer"}]},
                       {"anyOf": [{"type": "string"}]}, {"anyOf": [{"type": "null"}, {"type": "null"}]},
                       {"anyOf": [{"type": "string"}, {"type": "null"}, {"type": "integer"}]},
                       {"anyOf": [{"type": "string"}, {"type": "null", "maxLength": 1}]},
                       {"anyOf": [{"type": "string"}, {"type": "null"}], "maxLength": 3},
                       {"type": "string", "anyOf": [{"type": "string"}, {"type": "null"}]}, {"anyOf": "x"}):
            with self.subTest(schema=schema):
                self.refused(field(schema), "SCHEMA_COMBINATOR")


class TestObjects(Case):
    def test_closed_when_additional_properties_absent_or_false(self):
        for schema in (obj({"a": {"type": "boolean"}}), obj({"a": {"type": "boolean"}}, additionalProperties=False)):
            compiled = ss.compile_schema(schema)
            self.admitted(compiled, {"a": True})
            self.value_refused(compiled, {"a": True, "b": 1}, "VALUE_FIELDS", "value")

    def test_open_objects_refused(self):
        for extra in ({"additionalProperties": True}, {"additionalProperties": {"type": "string"}},
                      {"patternProperties": {"^a$": {"type": "string"}}}, {"propertyNames": {"maxLength": 3}},
                      {"unevaluatedProperties": False}):
            with self.subTest(extra=extra):
                self.refused(obj({}, **extra), "SCHEMA_OPEN_OBJECT", "schema")

    def test_required_and_optional_never_filled(self):
        compiled = ss.compile_schema(obj({"a": {"type": "string"}, "b": {"type": "integer", "default": 4}}, ["a"]))
        self.admitted(compiled, {"a": "x"})
        self.value_refused(compiled, {"b": 1}, "VALUE_FIELDS", "value")
        value = {"a": "x"}
        compiled.check(value)
        self.assertEqual(value, {"a": "x"})  # the default is never applied

    def test_empty_object(self):
        compiled = ss.compile_schema({"type": "object"})
        self.admitted(compiled, {})
        self.value_refused(compiled, {"a": 1}, "VALUE_FIELDS")
        self.value_refused(compiled, [], "VALUE_TYPE", "value")

    def test_bad_required_refused(self):
        for required in (["x"], ["a", "a"], "a", [1]):
            with self.subTest(required=required):
                self.refused(obj({"a": {"type": "string"}}, required), "SCHEMA_REQUIRED", "schema.required")

    def test_non_string_keys_refused(self):
        compiled = ss.compile_schema(obj({"a": {"type": "string"}}))
        self.value_refused(compiled, {1: "x"}, "VALUE_FIELDS")

    def test_root_must_be_an_object(self):
        self.refused({"type": "string"}, "SCHEMA_ROOT", "schema")
        self.refused([], "SCHEMA_ROOT", "schema")
        ss.compile_schema({"type": "string"}, require_object=False)
        self.refused([], "SCHEMA_MALFORMED", "schema", require_object=False)

    def test_malformed_properties_refused(self):
        self.refused({"type": "object", "properties": []}, "SCHEMA_MALFORMED", "schema.properties")
        self.refused(obj({"a": 3}), "SCHEMA_MALFORMED", "schema.properties[0]")
        self.refused(obj({"a": True}), "SCHEMA_TYPE", "schema.properties[0]")

    def test_nested_at_paths(self):
        compiled = ss.compile_schema(obj({"a": {"type": "boolean"}, "b": obj({"c": {"type": "array", "items": {
            "type": "integer"}}})}))
        self.value_refused(compiled, {"b": {"c": [1, "x"]}}, "VALUE_TYPE", "value.properties[1].properties[0].items[1]")


class TestArrays(Case):
    def test_bounds_both_sides(self):
        compiled = ss.compile_schema(field({"type": "array", "items": {"type": "integer"}, "minItems": 1,
                                            "maxItems": 2}))
        self.admitted(compiled, {"f": [1]})
        self.admitted(compiled, {"f": [1, 2]})
        self.value_refused(compiled, {"f": []}, "VALUE_ITEMS", "value.properties[0]")
        self.value_refused(compiled, {"f": [1, 2, 3]}, "VALUE_ITEMS")
        self.value_refused(compiled, {"f": (1,)}, "VALUE_TYPE")

    def test_absent_max_items_is_the_host_bound_recorded(self):
        compiled = ss.compile_schema(field({"type": "array", "items": {"type": "boolean"}}))
        self.assertEqual((compiled.rules[1].max_items, compiled.rules[1].max_items_from), (ss.DEFAULT_MAX_ITEMS, "host"))
        self.assertEqual(compiled.host_bounds(), ("schema.properties[0].maxItems",))
        self.admitted(compiled, {"f": [True] * ss.DEFAULT_MAX_ITEMS})
        self.value_refused(compiled, {"f": [True] * (ss.DEFAULT_MAX_ITEMS + 1)}, "VALUE_ITEMS")
        declared = ss.compile_schema(field({"type": "array", "items": {"type": "boolean"}, "maxItems": 3}))
        self.assertEqual(declared.rules[1].max_items_from, "schema")
        self.refused(field({"type": "array", "items": {"type": "boolean"}, "minItems": 3, "maxItems": 2}),
                     "SCHEMA_BOUNDS", "schema.properties[0].minItems")

    def test_tuples_and_missing_items_refused(self):
        self.refused(field({"type": "array", "items": [{"type": "string"}]}), "SCHEMA_TUPLE",
                     "schema.properties[0].items")
        self.refused(field({"type": "array", "prefixItems": [{"type": "string"}], "items": {"type": "string"}}),
                     "SCHEMA_TUPLE")
        self.refused(field({"type": "array", "contains": {"type": "string"}, "items": {"type": "string"}}),
                     "SCHEMA_TUPLE")
        self.refused(field({"type": "array"}), "SCHEMA_ITEMS", "schema.properties[0]")

    def test_unique_items_over_scalars(self):
        compiled = ss.compile_schema(field({"type": "array", "items": {"type": ["integer", "null"]},
                                            "uniqueItems": True}))
        self.admitted(compiled, {"f": [1, 2, None]})
        self.value_refused(compiled, {"f": [1, 1]}, "VALUE_ITEMS")
        self.value_refused(compiled, {"f": [None, None]}, "VALUE_ITEMS")
        self.value_refused(compiled, {"f": [1, True]}, "VALUE_TYPE", "value.properties[0].items[1]")
        self.value_refused(compiled, {"f": [1, [1]]}, "VALUE_TYPE")
        self.refused(field({"type": "array", "items": obj({}), "uniqueItems": True}), "SCHEMA_KEYWORD")
        self.refused(field({"type": "array", "items": {"type": "string"}, "uniqueItems": 1}), "SCHEMA_MALFORMED")
        ss.compile_schema(field({"type": "array", "items": obj({}), "uniqueItems": False}))


class TestReferences(Case):
    def test_local_definitions_both_spellings(self):
        for keyword in ("$defs", "definitions"):
            schema = obj({"a": {"$ref": f"#/{keyword}/Kind", "description": "d"}}, ["a"],
                         **{keyword: {"Kind": {"type": "string", "enum": ["x"]}}})
            compiled = ss.compile_schema(schema)
            self.admitted(compiled, {"a": "x"})
            self.value_refused(compiled, {"a": "y"}, "VALUE_ENUM")

    def test_bare_root_reference(self):
        compiled = ss.compile_schema({"$ref": "#/$defs/Root", "$defs": {"Root": obj({"a": {"type": "boolean"}})}})
        self.admitted(compiled, {"a": True})

    def test_shared_definition_compiled_once(self):
        compiled = ss.compile_schema(obj({"a": {"$ref": "#/$defs/S"}, "b": {"$ref": "#/$defs/S"}},
                                         **{"$defs": {"S": {"type": "string"}}}))
        self.assertEqual(len(compiled.rules), 2)

    def test_exponential_sharing_is_linear(self):
        defs = {"d0": {"type": "string", "maxLength": 1}}
        for i in range(1, 40):
            defs[f"d{i}"] = obj({"l": {"$ref": f"#/$defs/d{i - 1}"}, "r": {"$ref": f"#/$defs/d{i - 1}"}})
        start = time.perf_counter()
        compiled = ss.compile_schema({"$ref": "#/$defs/d39", "$defs": defs})
        emitted = compiled.to_schema()
        self.assertLess(time.perf_counter() - start, 0.5)
        self.assertEqual(len(compiled.rules), 40)
        self.assertEqual(len(emitted["$defs"]), 39)
        self.assertEqual(ss.compile_schema(emitted).to_schema(), emitted)

    def test_recursive_references_refused(self):
        for defs, root in (({"A": {"$ref": "#/$defs/A"}}, {"$ref": "#/$defs/A"}),
                           ({"A": {"$ref": "#/$defs/B"}, "B": {"$ref": "#/$defs/A"}}, {"$ref": "#/$defs/A"}),
                           ({"A": obj({"next": {"$ref": "#/$defs/A"}})}, {"$ref": "#/$defs/A"}),
                           ({"A": obj({"x": {"type": "array", "items": {"$ref": "#/$defs/B"}}}),
                             "B": {"anyOf": [{"$ref": "#/$defs/A"}, {"type": "null"}]}}, obj({"a": {"$ref": "#/$defs/A"}}))):
            with self.subTest(defs=defs):
                self.refused({**root, "$defs": defs}, "SCHEMA_REF_RECURSIVE")

    def test_remote_and_unknown_references_refused(self):
        defs = {"$defs": {"A": {"type": "string"}}}
        for ref, code in (("https://example.com/s.json", "SCHEMA_REF_REMOTE"), ("#/properties/a", "SCHEMA_REF_REMOTE"),
                          ("#/$defs/A/properties", "SCHEMA_REF_REMOTE"), ("#/$defs/B", "SCHEMA_REF_UNKNOWN"),
                          ("#/definitions/A", "SCHEMA_REF_UNKNOWN"), ("#A", "SCHEMA_REF_REMOTE"),
                          (3, "SCHEMA_MALFORMED")):
            with self.subTest(ref=ref):
                self.refused(obj({"a": {"$ref": ref}}, **defs), code, "schema.properties[0]")

    def test_reference_with_constraining_siblings_refused(self):
        for sibling in ({"maxLength": 3}, {"type": "string"}):
            with self.subTest(sibling=sibling):
                self.refused(obj({"a": {"$ref": "#/$defs/A", **sibling}}, **{"$defs": {"A": {"type": "string"}}}),
                             "SCHEMA_REF_SIBLING", "schema.properties[0]")
        self.refused(obj({"a": {"$ref": "#/$defs/A", "x-y": 3}}, **{"$defs": {"A": {"type": "string"}}}),
                     "SCHEMA_KEYWORD", "schema.properties[0]")

    def test_definition_errors_point_at_the_definition(self):
        self.refused(obj({"a": {"$ref": "#/$defs/B"}}, **{"$defs": {"A": {"type": "string"}, "B": {"type": "number"}}}),
                     "SCHEMA_NUMBER", "schema.$defs[1]")
        self.refused(obj({}, **{"$defs": []}), "SCHEMA_MALFORMED", "schema.$defs")
        self.refused(obj({"a": {"$ref": "#/$defs/A"}}, **{"$defs": {"A": 3}}), "SCHEMA_MALFORMED", "schema.$defs[0]")

    def test_nested_definitions_and_ids_refused(self):
        self.refused(field({"type": "string", "$defs": {}}), "SCHEMA_KEYWORD", "schema.properties[0]")
        self.refused(field({"type": "string", "$id": "x"}), "SCHEMA_KEYWORD")
        ss.compile_schema(obj({}, **{"$id": "urn:x", "$schema": "https://json-schema.org/draft/2020-12/schema"}))


class TestRefusedKeywords(Case):
    def test_each_refused_keyword_by_name(self):
        for keyword, code in ss.REFUSED_KEYWORDS.items():
            with self.subTest(keyword=keyword):
                self.refused(field({"type": "string", keyword: {}}), code, "schema.properties[0]")

    def test_unknown_and_misplaced_keywords(self):
        for schema in ({"type": "string", "nullable": True}, {"type": "integer", "maxLength": 3},
                       {"type": "string", "minimum": 1}, {"type": "object", "items": {"type": "string"}},
                       {"type": "boolean", "x-vendor": 1}, {"type": "string", "contentMediaType": "text/plain"}):
            with self.subTest(schema=schema):
                self.refused(field(schema), "SCHEMA_KEYWORD", "schema.properties[0]")

    def test_annotations_are_ignored(self):
        compiled = ss.compile_schema(field({"type": "string", "title": "T", "description": "D", "examples": ["a"],
                                            "default": "a", "$comment": "c", "deprecated": True, "readOnly": False,
                                            "writeOnly": False}))
        self.admitted(compiled, {"f": "zz"})

    def test_messages_hold_no_schema_text(self):
        error = self.refused(field({"type": "string", "SECRET-KEYWORD": 1}), "SCHEMA_KEYWORD")
        self.assertNotIn("SECRET", str(error.to_json()))
        error = self.refused(obj({"SECRET": {"type": "number"}}), "SCHEMA_NUMBER")
        self.assertNotIn("SECRET", str(error.to_json()))


class TestSdkLoosenessRefused(Case):
    """Each loose behaviour of typical SDK validation (MCP.md) is refused here."""

    def setUp(self):
        self.compiled = ss.compile_schema(obj({
            "order_ref": {"type": "string", "pattern": "^ORDER-[0-9]{1,12}$"},
            "count": {"type": "integer"},
            "code": {"type": "string", "pattern": "^\\d{3}$"},
        }, ["order_ref"]))

    def test_extra_arguments_are_refused_not_dropped(self):
        self.value_refused(self.compiled, {"order_ref": "ORDER-7", "extra": 1}, "VALUE_FIELDS", "value")

    def test_string_is_not_coerced_to_an_integer(self):
        self.value_refused(self.compiled, {"order_ref": "ORDER-7", "count": "3"}, "VALUE_TYPE", "value.properties[1]")

    def test_dollar_does_not_admit_a_final_newline(self):
        self.value_refused(self.compiled, {"order_ref": "ORDER-7\n"}, "VALUE_PATTERN", "value.properties[0]")

    def test_one_point_zero_is_not_an_integer(self):
        self.value_refused(self.compiled, {"order_ref": "ORDER-7", "count": 1.0}, "VALUE_TYPE")

    def test_unicode_digits_do_not_match_backslash_d(self):
        self.value_refused(self.compiled, {"order_ref": "ORDER-7", "code": "\u0661\u0662\u0663"}, "VALUE_PATTERN")
        self.admitted(self.compiled, {"order_ref": "ORDER-7", "code": "123"})


class TestEmit(Case):
    def test_round_trip_is_a_fixed_point(self):
        schema = obj({"a": {"type": "string", "pattern": "^[a-z]{1,3}$", "description": "A"},
                      "b": {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "null"}]},
                      "c": {"type": "array", "items": {"type": "boolean", "const": True}, "uniqueItems": True,
                            "minItems": 1},
                      "d": {"type": "string", "enum": ["y", "x"], "minLength": 1},
                      "e": {"type": "integer", "multipleOf": 3, "maximum": 9}}, ["a"])
        emitted = ss.compile_schema(schema).to_schema()
        self.assertEqual(emitted["properties"]["e"], {"type": "integer", "minimum": -MAX, "maximum": 9, "multipleOf": 3})
        self.assertEqual(emitted["properties"]["b"], {"anyOf": [{"type": "integer", "minimum": 0, "maximum": MAX},
                                                                {"type": "null"}]})
        self.assertEqual(emitted["properties"]["d"], {"type": "string", "enum": ["x", "y"], "minLength": 1})
        again = ss.compile_schema(emitted)
        self.assertEqual(again.to_schema(), emitted)
        # The emitted schema states the host's bound, so it is now the schema's own.
        self.assertEqual([rule.max_length_from for rule in again.rules if type(rule) is ss.StringRule],
                         ["schema", "host"])  # the enum's bound stays the host's: its choices bound it

    def test_source_digest(self):
        schema = obj({})
        self.assertEqual(ss.compile_schema(schema).source_sha256, tool_dispatcher.canonical_sha256(schema))


class TestOverlay(Case):
    SERVER = obj({
        "amount": {"type": "number", "minimum": 0, "maximum": 1000},
        "maybe": {"type": ["number", "null"]},
        "ref": {"type": "string", "maxLength": 40},
        "kind": {"type": "string", "enum": ["a", "b", "c"]},
        "code": {"type": "string", "pattern": "^[0-9]{1,4}$"},
        "count": {"type": "integer", "minimum": 0, "maximum": 10, "multipleOf": 2},
        "flag": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 4, "uniqueItems": True},
        "inner": {"$ref": "#/$defs/Inner"},
        "opt": {"anyOf": [{"type": "string", "maxLength": 5}, {"type": "null"}]},
        "when": {"type": "string", "format": "date"},
    }, ["amount"], **{"$defs": {"Inner": obj({"x": {"type": "integer"}, "y": {"type": "string"}}, ["x"])}})

    def narrowed(self, path, host):
        return ss.narrow(self.SERVER, {path: host})

    def widens(self, path, host, code="OVERLAY_WIDENS"):
        with self.assertRaises(ss.SchemaRefusal) as caught:
            self.narrowed(path, host)
        self.assertEqual((caught.exception.code, caught.exception.at), (code, "overlay[0]"))

    def test_without_overlay_the_server_schema_is_refused(self):
        self.refused(self.SERVER, "SCHEMA_NUMBER")

    NARROWINGS = {
        ("amount",): {"type": "integer", "minimum": 0, "maximum": 1000},
        ("maybe",): {"type": ["integer", "null"], "minimum": -5, "maximum": 5},
        ("ref",): {"type": "string", "pattern": "^R-[0-9]{1,8}$", "maxLength": 10},
        ("kind",): {"enum": ["a", "b"]},
        ("code",): {"type": "string", "pattern": "^[0-9]{1,4}$", "maxLength": 2},
        ("count",): {"type": "integer", "minimum": 2, "maximum": 8, "multipleOf": 4},
        ("flag",): {"const": True},
        ("tags",): {"type": "array", "items": {"type": "string", "enum": ["x"]}, "maxItems": 1, "uniqueItems": True},
        ("inner", "y"): {"type": "string", "enum": ["ok"]},
        ("opt",): {"type": "string", "maxLength": 3},
        ("when",): {"type": "string", "maxLength": 10},
    }

    def test_narrowings_accepted_one_by_one(self):
        for path, host in self.NARROWINGS.items():
            if path == ("when",):
                continue
            with self.subTest(path=path):
                with self.assertRaises(ss.SchemaRefusal) as caught:
                    self.narrowed(path, host)  # the other number fields and the format stay refused
                self.assertIn(caught.exception.code, ("SCHEMA_NUMBER", "SCHEMA_FORMAT"))

    def test_all_narrowings_together(self):
        overlay = {path: host for path, host in self.NARROWINGS.items() if path != ("when",)}
        server = {**self.SERVER, "properties": {k: v for k, v in self.SERVER["properties"].items() if k != "when"}}
        compiled = ss.narrow(server, overlay)
        good = {"amount": 5, "maybe": None, "ref": "R-1", "kind": "b", "code": "12", "count": 4, "flag": True,
                "tags": ["x"], "inner": {"x": 1, "y": "ok"}, "opt": "abc"}
        self.admitted(compiled, good)
        for key, bad in (("amount", 5.0), ("maybe", 6), ("ref", "R-123456789"), ("kind", "c"), ("code", "123"),
                         ("count", 6), ("flag", False), ("tags", ["y"]), ("inner", {"x": 1, "y": "no"}),
                         ("opt", "abcd")):
            with self.subTest(key=key):
                self.assertFalse(compiled.admits({**good, key: bad}))
        # The definition itself is untouched: only this use of it was inlined and narrowed.
        self.assertEqual(server["$defs"]["Inner"]["properties"]["y"], {"type": "string"})

    def test_widenings_refused(self):
        cases = {
            ("amount",): {"type": "integer", "minimum": -1, "maximum": 10},
            ("maybe",): {"type": "string"},
            ("ref",): {"type": "string", "maxLength": 41},
            ("kind",): {"enum": ["a", "z"]},
            ("code",): {"type": "string", "pattern": "^[0-9]{1,3}$"},
            ("count",): {"type": "integer", "minimum": 0, "maximum": 10, "multipleOf": 3},
            ("flag",): {"type": ["boolean", "null"]},
            ("tags",): {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 4},
            ("inner",): obj({"x": {"type": "integer"}, "y": {"type": "string"}, "z": {"type": "string"}}, ["x"]),
            ("opt",): {"type": "string", "maxLength": 6},
            ("when",): {"type": "string", "maxLength": 10},
        }
        for path, host in cases.items():
            with self.subTest(path=path):
                self.widens(path, host)

    def test_number_narrowing_needs_an_integer_inside_the_bounds(self):
        server = obj({"n": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 10.5}})
        ss.narrow(server, {("n",): {"type": "integer", "minimum": 1, "maximum": 10}})
        ss.narrow(server, {("n",): {"type": "integer", "enum": [1, 10]}})
        for host in ({"type": "integer", "minimum": 0, "maximum": 10}, {"type": "integer", "minimum": 1, "maximum": 11},
                     {"type": "string"}, {"type": ["integer", "null"], "minimum": 1, "maximum": 2}):
            with self.subTest(host=host):
                with self.assertRaises(ss.SchemaRefusal) as caught:
                    ss.narrow(server, {("n",): host})
                self.assertEqual(caught.exception.code, "OVERLAY_WIDENS")
        stepped = obj({"n": {"type": "number", "multipleOf": 0.5}})
        with self.assertRaises(ss.SchemaRefusal) as caught:
            ss.narrow(stepped, {("n",): {"type": "integer", "minimum": 1, "maximum": 2}})
        self.assertEqual(caught.exception.code, "OVERLAY_WIDENS")

    def test_bad_paths_refused(self):
        for path in (("nope",), ("inner", "nope"), (), ("ref", "x"), "ref"):
            with self.subTest(path=path):
                with self.assertRaises(ss.SchemaRefusal) as caught:
                    ss.narrow(self.SERVER, {path: {"type": "string"}})
                self.assertEqual((caught.exception.code, caught.exception.at), ("OVERLAY_PATH", "overlay[0]"))

    def test_host_schema_with_a_reference_refused(self):
        self.widens(("ref",), {"$ref": "#/$defs/S", "$defs": {"S": {"type": "string", "maxLength": 3}}})

    def test_nullable_host_under_a_plain_server_rule_widens(self):
        self.widens(("ref",), {"anyOf": [{"type": "string", "maxLength": 3}, {"type": "null"}]})

    def test_object_overlays(self):
        compiled = self.narrowed_without_numbers(("inner",), obj({"x": {"type": "integer", "minimum": 0}}, ["x"]))
        self.assertTrue(compiled.admits({"inner": {"x": 0}}))
        self.assertFalse(compiled.admits({"inner": {"x": 0, "y": "a"}}))  # the host dropped an optional field
        self.widens(("inner",), obj({"x": {"type": "integer"}, "y": {"type": "string"}}))  # x no longer required
        self.widens(("tags",), {"type": "array", "items": {"type": "string", "maxLength": 9}, "maxItems": 4,
                                "uniqueItems": True})  # the items widen

    def narrowed_without_numbers(self, path, host):
        server = {**self.SERVER, "properties": {key: value for key, value in self.SERVER["properties"].items()
                                                if key in ("inner", "ref")}, "required": []}
        return ss.narrow(server, {path: host})

    def test_server_schema_must_be_an_object(self):
        with self.assertRaises(ss.SchemaRefusal) as caught:
            ss.narrow([], {("a",): {"type": "string"}})
        self.assertEqual((caught.exception.code, caught.exception.at), ("SCHEMA_ROOT", "schema"))

    def test_a_path_through_a_reference_loop(self):
        server = obj({"a": {"$ref": "#/$defs/A"}}, **{"$defs": {"A": {"$ref": "#/$defs/B"}, "B": {"$ref": "#/$defs/A"}}})
        with self.assertRaises(ss.SchemaRefusal) as caught:
            ss.narrow(server, {("a", "x"): {"type": "string"}})
        self.assertEqual((caught.exception.code, caught.exception.at), ("SCHEMA_REF_RECURSIVE", "overlay[0]"))

    def test_a_path_through_a_broken_reference(self):
        server = obj({"a": {"$ref": "#/$defs/Missing"}, "b": {"$ref": 3}})
        for path in (("a", "x"), ("b", "x")):
            with self.subTest(path=path):
                with self.assertRaises(ss.SchemaRefusal) as caught:
                    ss.narrow(server, {path: {"type": "string"}})
                self.assertEqual((caught.exception.code, caught.exception.at), ("OVERLAY_PATH", "overlay[0]"))

    def test_host_schema_must_compile(self):
        with self.assertRaises(ss.SchemaRefusal) as caught:
            self.narrowed(("ref",), {"type": "string", "format": "email"})
        self.assertEqual(caught.exception.code, "SCHEMA_FORMAT")


class TestHostileSchemas(Case):
    def test_deep_wide_and_recursive_refused_quickly(self):
        deep = {"type": "string"}
        for _ in range(5000):
            deep = {"type": "object", "properties": {"a": deep}}
        wide = obj({str(i): 0 for i in range(100_000)})
        many = obj({"a": {"type": "integer", "enum": list(range(200_000))}})
        start = time.perf_counter()
        for schema, code in ((deep, "SCHEMA_TOO_DEEP"), (wide, "SCHEMA_TOO_MANY_NODES"),
                             (many, "SCHEMA_TOO_MANY_NODES")):
            self.refused(schema, code)
        self.assertLess(time.perf_counter() - start, 1.0)


if __name__ == "__main__":
    unittest.main()
