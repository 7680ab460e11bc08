"""A differential check of the contract language against an independent JSON Schema validator.

The core promises that whatever a compiled check admits, the schema it was compiled from admits
too, read as JSON Schema 2020-12 with ``format`` asserted. This layer tests the promise from
outside. It generates schemas in and near the compiler's subset (and the features being added to
it: formats, unions, string-keyed maps) and, for each schema, values at its edges; every value the
compiled check admits is put to an oracle that shares no code with the core: the ``jsonschema``
package's Draft 2020-12 validator with its format checker on, its ``pattern`` keyword replaced by
an ECMA-262 engine (``regress``). A value the compiled check admits and the oracle refuses is an
UNSOUND finding; a value the oracle admits and the check refuses is a narrowing, counted, never a
failure. The same is done for host overlays through ``narrow``, whose result must admit nothing
the server's own schema refuses, and for the official JSON Schema Test Suite's draft 2020-12 groups.
The uri and email formats have more readers: every URI their compiled check admits must also be
parsed by Pydantic's AnyUrl and by Node's WHATWG URL parser, and every address by Pydantic's
EmailStr (email-validator), zod's email() and HTML's form field (zod's html5Email regex).

    python -B differential/differential.py --seed 1 --schemas 300
    python -B differential/differential.py --seed 1 --uris 5000   (needs pydantic and node)
    python -B differential/differential.py --seed 1 --emails 5000   (needs email-validator, node and zod)
    python -B differential/differential.py --suite PATH      (a draft2020-12 folder, or the jsonschema sdist)

What this layer never does:
- change the core, or reach past ``tool_dispatcher.__all__``;
- take the compiler's word on a value: the verdict is the oracle's (or the suite's);
- hand the oracle a value json.loads could not have produced: every generated value round-trips
  through JSON exactly (no tuple, no NaN, no key that is not a string, 1 and 1.0 and true apart);
- use a clock or the network: a seed fixes the report byte for byte;
- rely on a bare assert (``python -O`` deletes them).

The oracle reads JSON Schema as the ``jsonschema`` package does, with two changes that bring it
closer to the specification: ``pattern`` is ECMA-262 (with the ``u`` flag, or without it where the
``u`` grammar refuses the text, as a web browser reads it), and the eight formats generated here
are held to their RFC grammars' ASCII alphabet (the date-time checker's regex takes a trailing
newline and any Unicode digit). A lone surrogate is shown to the regex engine as U+FFFD.

Exit 0: no finding; 1: a finding (an unsound value, a URI or an address a reader refuses, or a
compiler, a check, the oracle or a reader that raised where it should answer); 2: the command line
was refused, or the oracle (or, for --uris, pydantic or node; for --emails, email-validator, node
or zod) is not installed.
Sections: 1. limits and constants; 2. JSON values; 3. the oracle; 4. patterns; 5. schemas;
6. values; 7. overlays; 8. the differential run; 9. the official suite; 10. format readers; 11. CLI.
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import random
import re
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Final, Iterator, Mapping, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import tool_dispatcher as td  # noqa: E402  (the compiler under test)

# ============================================================================================
# 1. Limits and constants
# ============================================================================================

REPORT_FORMAT: Final = "differential-report-v1"
SUITE_REPORT_FORMAT: Final = "differential-suite-report-v1"
DEFAULT_SCHEMAS: Final = 200
MAX_SCHEMAS: Final = 100_000  # a command line asking for more is refused, not run for hours
MAX_VALUES_PER_SCHEMA: Final = 160  # values checked against one schema: its edges, then a sample
MAX_CANDIDATES: Final = 24  # candidates one subschema lends its parent's mutations
MAX_DEPTH: Final = 3  # schema levels the generator nests (an object in an array in an object)
MAX_FINDINGS: Final = 5  # findings printed whole (the counts count them all)
MAX_READER_FINDINGS: Final = 20  # a URI or email run's findings printed (each a value and a reader)
MINIMIZE_BUDGET: Final = 300  # predicate calls spent shrinking one finding
MAX_URI_COMPOSITIONS: Final = 16  # random URIs beside the fixed ones, for each uri format in a schema
MAX_EMAIL_COMPOSITIONS: Final = 16  # random addresses beside the fixed ones, for each email format in a schema
MAX_GENERATED_LENGTH: Final = td.DEFAULT_MAX_LENGTH + 1  # the host's string bound and one past it
MAX_GENERATED_ITEMS: Final = td.DEFAULT_MAX_ITEMS + 1  # the host's item bound and one past it
SAFE: Final = td.MAX_SAFE_INTEGER  # 2**53 - 1

FORMATS: Final = ("date", "date-time", "time", "uuid", "ipv4", "ipv6", "email", "uri")
SUITE_FOLDER: Final = "/json/tests/draft2020-12/"  # where the jsonschema sdist keeps the official suite
REF_KEYWORDS: Final = frozenset({"$ref", "$dynamicRef", "$recursiveRef"})
ASTRAL: Final = "\U0001F600"  # one code point, two UTF-16 code units

# How often each kind of schema is generated. The features the compiler is gaining (format,
# unions, maps) are generated whether or not it compiles them yet: a refusal is counted by code.
FEATURE_WEIGHTS: Final[Mapping[str, int]] = MappingProxyType({
    "string": 8, "integer": 6, "number": 7, "boolean": 2, "null": 1, "nullable-type": 4,
    "nullable-anyOf": 4, "object": 8, "array": 6, "ref": 5, "enum-const": 4, "format": 6,
    "union-types": 4, "union-scalars": 4, "union-int-number": 3, "union-tagged": 5, "union-null": 3,
    "union-nested": 3, "map": 4, "near-subset": 4,
})

# ============================================================================================
# 2. JSON values
# ============================================================================================


def json_text(value: Any) -> str:
    """One line of JSON, ASCII only (a lone surrogate as its escape): 1, 1.0 and true differ."""
    return json.dumps(value, ensure_ascii=True, separators=(",", ":"), allow_nan=False)


def same_json(left: Any, right: Any) -> bool:
    """Equal as JSON documents and of the same Python types: 1 is not 1.0, True, nor -0.0 0.0."""
    stack = [(left, right)]
    while stack:
        a, b = stack.pop()
        if type(a) is not type(b):
            return False
        if type(a) is dict:
            if list(a) != list(b):
                return False
            stack.extend((a[key], b[key]) for key in a)
        elif type(a) is list:
            if len(a) != len(b):
                return False
            stack.extend(zip(a, b))
        elif type(a) is float:
            if a != b or math.copysign(1.0, a) != math.copysign(1.0, b):
                return False
        elif a != b:
            return False
    return True


def is_json_value(value: Any) -> bool:
    """Whether json.loads could have produced exactly this value (round trip, types kept)."""
    try:
        return same_json(json.loads(json.dumps(value, allow_nan=False)), value)
    except (TypeError, ValueError, RecursionError):
        return False


def json_twin(value: Any) -> Any:
    """The value with each number spelled the other way where JSON calls them equal: 1 <-> 1.0."""
    if type(value) is int and abs(value) <= 2**53:
        return float(value)
    if type(value) is float and value.is_integer() and abs(value) <= 2**53:
        return int(value)
    if type(value) is list:
        return [json_twin(item) for item in value]
    if type(value) is dict:
        return {key: json_twin(item) for key, item in value.items()}
    return value


def unique_values(values: Sequence[Any]) -> list[Any]:
    """The values in order, each JSON text once (so True, 1 and 1.0 all stay)."""
    seen: dict[str, Any] = {}
    for value in values:
        seen.setdefault(json_text(value), value)
    return list(seen.values())


# ============================================================================================
# 3. The oracle
# ============================================================================================


class OracleUnavailable(Exception):
    """jsonschema or regress is not installed, or the format checker lacks one of FORMATS."""


# The eight formats' grammars (RFC 3339, 4122, 2673, 4291, 5321, 3986) are printable ASCII; only
# a mailbox's quoted local part may hold a space.
_ASCII_GRAPHIC: Final = frozenset(chr(code) for code in range(0x21, 0x7F))
_FORMAT_ALPHABETS: Final[Mapping[str, frozenset[str]]] = MappingProxyType({
    **{name: _ASCII_GRAPHIC for name in FORMATS}, "email": _ASCII_GRAPHIC | {" "},
})


class Oracle:
    """JSON Schema 2020-12 as jsonschema reads it, formats asserted, patterns as ECMA-262."""

    def __init__(self) -> None:
        try:
            import jsonschema
            import regress
            from importlib import metadata
        except ImportError as missing:
            raise OracleUnavailable(str(missing)) from None
        base = jsonschema.Draft202012Validator
        missing_formats = [name for name in FORMATS if name not in base.FORMAT_CHECKER.checkers]
        if missing_formats:
            raise OracleUnavailable("the format checker lacks " + ", ".join(missing_formats))
        self._regress = regress
        self._error = jsonschema.ValidationError
        self._checker = base.FORMAT_CHECKER
        self._regexes: dict[str, Any] = {}
        self._validators: dict[str, Any] = {}
        format_keyword = base.VALIDATORS["format"]
        oracle = self

        def pattern(validator: Any, text: str, instance: Any, _schema: Any) -> Iterator[Any]:
            if validator.is_type(instance, "string") and not oracle.search(text, instance):
                yield oracle._error("the string does not match the pattern")

        def format_(validator: Any, name: str, instance: Any, schema: Any) -> Iterator[Any]:
            if not validator.is_type(instance, "string") or name not in _FORMAT_ALPHABETS:
                yield from format_keyword(validator, name, instance, schema)
                return
            if not set(instance) <= _FORMAT_ALPHABETS[name]:
                yield oracle._error("the string is outside its format's ASCII grammar")
                return
            leap = _leap_second(instance) if name in ("date-time", "time") else None
            if leap is False:
                yield oracle._error("a leap second other than at 23:59 UTC")
                return
            yield from format_keyword(validator, name, instance if leap is None else leap, schema)

        self._class = jsonschema.validators.extend(base, {"pattern": pattern, "format": format_})
        self.versions = {name: metadata.version(name) for name in ("jsonschema", "regress")}

    def search(self, pattern: str, text: str) -> bool:
        """ECMA-262 search semantics: the pattern matches somewhere in the text."""
        regex = self._regexes.get(pattern)
        if regex is None:
            try:
                regex = self._regress.Regex(pattern, "u")
            except self._regress.RegressError:
                regex = self._regress.Regex(pattern)  # Annex B: "\-" and friends outside the u grammar
            self._regexes[pattern] = regex
        # regress takes UTF-8 text; a lone surrogate is one code point, as U+FFFD is.
        portable = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
        return regex.find(portable) is not None

    def judge(self, schema: Any) -> Callable[[Any], bool]:
        """The oracle's verdict on values against one schema (validators are kept by its text)."""
        key = json_text(schema)
        validator = self._validators.get(key)
        if validator is None:
            validator = self._class(schema, format_checker=self._checker)
            self._validators[key] = validator
        return validator.is_valid

    def valid(self, schema: Any, value: Any) -> bool:
        return self.judge(schema)(value)


_LEAP: Final = re.compile(r"([0-9]{2}):([0-9]{2}):60((?:\.[0-9]+)?(?:[Zz]|([+-])([0-9]{2}):([0-9]{2})))\Z", re.ASCII)


def _leap_second(text: str) -> str | bool | None:
    """A time (or date-time) whose second is 60: None if it has none; False unless it falls at
    23:59 UTC (RFC 3339 5.7, as the official suite reads it); else the same text at second 59,
    for the library's checker, which refuses every leap second."""
    match = _LEAP.search(text)
    if match is None or match.start() not in (0, 11):
        return None
    hour, minute, _rest, sign, offset_hour, offset_minute = match.groups()
    offset = 0 if sign is None else (1 if sign == "+" else -1) * (int(offset_hour) * 60 + int(offset_minute))
    if (int(hour) * 60 + int(minute) - offset) % 1440 != 23 * 60 + 59:
        return False
    return text[:match.start()] + f"{hour}:{minute}:59" + match.group(3)


def load_oracle() -> Oracle | None:
    """The oracle, or None when jsonschema or regress (or a format's checker) is missing."""
    try:
        return Oracle()
    except OracleUnavailable:
        return None


# ============================================================================================
# 4. Patterns
# ============================================================================================
# Patterns are built from atoms whose character sets are disjoint from their neighbours', so most
# fall in the compiler's unambiguous subset; each is generated with strings that match it, from
# which the value generator derives the near misses.

_ATOM_FAMILIES: Final = (
    (("[a-z]", "abqz"), ("[A-Z]", "AQZ"), ("[a-fA-F]", "afAF")),
    (("[0-9]", "0159"), ("\\d", "0379")),
    (("-", "-"), ("_", "_"), ("\\.", "."), (":", ":")),
)
_QUANTIFIERS: Final = (("", 1, 1), ("", 1, 1), ("?", 0, 1), ("+", 1, None), ("*", 0, None), ("{2}", 2, 2),
                       ("{1,3}", 1, 3), ("{2,}", 2, None), ("{0,12}", 0, 12))
_LITERAL_VALUES: Final = (("ORDER-", "ORDER-"), ("id", "id"), ("A", "A"), ("v\\.", "v."))
_OUTSIDE_SUBSET: Final = (  # (pattern, strings that match it): each refused today, and why matters
    ("^.+$", ("a", ASTRAL, "\u00e9")), ("^\\w+$", ("a_1",)), ("^[^,]+$", ("a", "\u00e9")),
    ("^\\p{L}+$", ("\u00e9t\u00e9",)), ("^\u00e9+$", ("\u00e9",)), ("^\\u00e9$", ("\u00e9",)),
    ("^a+?$", ("aa",)), ("^(?=a)a$", ("a",)), ("^[a-z]{1001}$", ("a" * 1001,)), ("^(a+)+$", ("aa",)),
    ("^[a-z]*[a-z0-9]*$", ("ab1",)), ("^a*a*$", ("aa",)), ("^\\s*$", (" ",)), ("^(?<n>a)$", ("a",)),
    ("^[0-9]+$|^x", ("12", "xz")), ("^\\D$", ("a",)),
)


class PatternMaker:
    """Patterns in and near the compiler's subset, each with strings that match it."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.examples: dict[str, tuple[str, ...]] = {}

    def pattern(self, *, edge: bool = False) -> str:
        """A pattern in the subset (anchored, or an alternation of anchored branches), or at an
        edge: half-anchored, unanchored, or a construct outside the subset."""
        if not edge:
            text, examples = self._anchored() if self.rng.random() < 0.8 else self._alternation()
        elif self.rng.random() < 0.5:
            body, examples = self._sequence()
            text = self.rng.choice((body, "^" + body, body + "$", "^" + body + "|x$"))
        else:
            text, examples = self.rng.choice(_OUTSIDE_SUBSET)
        self.examples.setdefault(text, tuple(examples))
        return text

    def _anchored(self) -> tuple[str, list[str]]:
        body, examples = self._sequence()
        return "^" + body + "$", examples

    def _alternation(self) -> tuple[str, list[str]]:
        (left, left_examples), (right, right_examples) = self._sequence(), self._sequence()
        shape = self.rng.choice(("^(?:{0}|{1})$", "^({0}|{1})$", "^{0}$|^{1}$"))
        return shape.format(left, right), left_examples + right_examples

    def _sequence(self) -> tuple[str, list[str]]:
        parts: list[tuple[str, Sequence[str], int, int]] = []
        if self.rng.random() < 0.3:
            text, literal = self.rng.choice(_LITERAL_VALUES)
            parts.append((text, (literal,), 1, 1))
        family = -1
        for _ in range(self.rng.randint(1, 3)):
            family = self.rng.choice([index for index in range(len(_ATOM_FAMILIES)) if index != family])
            atom, chars = self.rng.choice(_ATOM_FAMILIES[family])
            suffix, low, high = self.rng.choice(_QUANTIFIERS)
            parts.append((atom + suffix, chars, low, high if high is not None else low + 3))
        text = "".join(part[0] for part in parts)
        examples = [self._example(parts, pick) for pick in ("low", "high", "mixed", "mixed")]
        return text, unique_values(examples)

    def _example(self, parts: Sequence[tuple[str, Sequence[str], int, int]], pick: str) -> str:
        out = []
        for _text, chars, low, high in parts:
            if len(chars) == 1 and len(chars[0]) > 1:  # a literal
                out.append(chars[0])
                continue
            count = {"low": low, "high": high}.get(pick, self.rng.randint(low, high))
            out.append("".join(self.rng.choice(chars) for _ in range(count)))
        return "".join(out)


# ============================================================================================
# 5. Schemas
# ============================================================================================

_NAMES: Final = ("id", "name", "amount", "note", "tags", "when", "count", "\u00e9t\u00e9", "a b", "type",
                 "enum", "0", "$ref", "__proto__")
_DEF_NAMES: Final = ("Item", "Name", "Amount", "Pet", "Money", "A.b")
_STRINGS: Final = ("", "a", "ab", "abc", "A", "\u00e9", "e\u0301", ASTRAL, "a" + ASTRAL, "\n", "a\n", "ORDER-1", "null",
                   "true", "1", "0", " ", "\u65e5\u672c", "\u2028", "cat", "dog")
# Each pool in two parts: values the subset accepts, and edge values it may refuse (a bound past
# 2**53, a float bound on an integer, a step whose double is not its decimal text, ...).
_INT_BOUNDS: Final = ((0, 1, -1, 3, 10, 100, -100, 7, SAFE, -SAFE), (SAFE + 1, 2**53 + 1, 2.0, 1.5))
_NUMBER_BOUNDS: Final = ((0, 0.5, -0.5, 1, 1.5, -2.25, 0.1, 1e-9, 100, float(2**53), 1e20, -1e20,
                          0.30000000000000004, 3, -7, SAFE), (2**53, 2**53 + 1, 1e308))
_INT_STEPS: Final = ((1, 2, 3, 5, 10), (0.5, 2.0, 0, -1))
_NUMBER_STEPS: Final = ((0.5, 0.25, 0.125, 2, 1, 1.5, 3), (0.1, 0.01, 1e-3, 1e-9, 0.2, 0))
_Pool = tuple[Sequence[Any], Sequence[Any]]  # (values the subset accepts, edge values)
_EDGES: Final = (0.25, 0.05)  # how often a pool's edge part is drawn from: at the root, below it
_REFUSED_EXTRAS: Final = (  # keywords outside the subset, added to an otherwise accepted schema
    ("not", {"const": 0}), ("allOf", [{"type": "string"}]), ("if", {"minLength": 1}),
    ("patternProperties", {"^a$": {}}), ("prefixItems", [{}]), ("contains", {}), ("dependentRequired", {"a": ["b"]}),
    ("x-extra", 1), ("nullable", True), ("unevaluatedProperties", False), ("$anchor", "a"), ("$id", "urn:x"),
    ("minContains", 1), ("contentEncoding", "base64"), ("propertyNames", {"maxLength": 3}), ("maximum", 5),
    ("minLength", 2), ("$defs", {"X": {}}), ("deprecated", True), ("examples", [1]),
)
_SCALAR_TYPE_NAMES: Final = ("string", "integer", "number", "boolean")


class SchemaMaker:
    """Seeded schemas, each labelled with the feature it exercises; $defs are kept at the root."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.patterns = PatternMaker(rng)
        self.defs: dict[str, Any] = {}
        self.defs_keyword = "$defs"
        features = list(FEATURE_WEIGHTS)
        self._features, self._weights = features, [FEATURE_WEIGHTS[name] for name in features]

    def schema(self) -> tuple[str, dict[str, Any]]:
        """A feature's name and a schema for it (a root object around it about half the time)."""
        self.defs, self.defs_keyword = {}, ("$defs" if self.rng.random() < 0.85 else "definitions")
        feature = self.rng.choices(self._features, self._weights)[0]
        node = _BUILDERS[feature](self, 0)
        if feature not in ("object", "map") and self.rng.random() < 0.55:
            node = self.wrap(node)
        if self.defs:
            node = {**node, self.defs_keyword: dict(self.defs)}
        return feature, node

    def wrap(self, node: Any) -> dict[str, Any]:
        root: dict[str, Any] = {"type": "object", "properties": {"v": node, "n": {"type": "integer"}}}
        root["required"] = self.rng.choice((["v"], ["v", "n"], []))
        if self.rng.random() < 0.5:
            root["additionalProperties"] = False
        return root

    def node(self, depth: int) -> Any:
        """A subschema: scalars mostly, containers and references while depth allows."""
        if depth >= MAX_DEPTH:
            return self.scalar(self.rng.choice(_SCALAR_TYPE_NAMES), depth)
        kinds = ("string", "integer", "number", "boolean", "object", "array", "ref", "nullable-type",
                 "nullable-anyOf", "format", "union-types", "union-scalars", "map", "enum-const")
        weights = (5, 4, 4, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1)
        return _BUILDERS[self.rng.choices(kinds, weights)[0]](self, depth + 1)

    def scalar(self, kind: str, depth: int) -> dict[str, Any]:
        return _BUILDERS[kind](self, depth)

    def string(self, depth: int = 0) -> dict[str, Any]:
        node: dict[str, Any] = {"type": "string"}
        variant = self.rng.choice(("plain", "lengths", "lengths", "pattern", "pattern", "enum", "const",
                                   "enum-const", "pattern-lengths"))
        if variant in ("lengths", "pattern-lengths"):
            node.update(self.lengths("minLength", "maxLength", td.DEFAULT_MAX_LENGTH, depth))
        if variant in ("pattern", "pattern-lengths"):
            node["pattern"] = self.patterns.pattern(edge=self.edgy(depth))
        if variant in ("enum", "enum-const"):
            node["enum"] = self.rng.sample(_STRINGS, self.rng.randint(1, 4))
        if variant == "const":
            node["const"] = self.rng.choice(_STRINGS)
        if variant == "enum-const":
            node["const"] = self.rng.choice(node["enum"] + ["zz"])
        return node

    def edgy(self, depth: int) -> bool:
        """Whether to draw an edge value this time: often at the root, seldom below it."""
        return self.rng.random() < _EDGES[min(depth, 1)]

    def pick(self, pool: _Pool, depth: int) -> Any:
        return self.rng.choice(pool[1] if self.edgy(depth) else pool[0])

    def lengths(self, low_name: str, high_name: str, host: int, depth: int = 0) -> dict[str, Any]:
        """A lower and/or upper bound: small, or at the host's bound; at an edge, past it or crossed."""
        out: dict[str, Any] = {}
        low = self.rng.choice((0, 1, 2, 3, 5))
        if self.rng.random() < 0.7:
            out[low_name] = low
        roll = self.rng.random()
        if self.edgy(depth):
            out[high_name] = self.rng.choice((host + 1, 10**6, max(low - 1, 0) if low_name in out else 0,
                                              1.5, 2.0, -1, True))
        elif roll < 0.75:
            out[high_name] = low + self.rng.choice((0, 1, 2, 4))
        elif roll < 0.85:
            out[high_name] = host
        return out

    def integer(self, depth: int = 0) -> dict[str, Any]:
        return self.numeric("integer", _INT_BOUNDS, _INT_STEPS, depth)

    def number(self, depth: int = 0) -> dict[str, Any]:
        return self.numeric("number", _NUMBER_BOUNDS, _NUMBER_STEPS, depth)

    def numeric(self, kind: str, bounds: _Pool, steps: _Pool, depth: int) -> dict[str, Any]:
        node: dict[str, Any] = {"type": kind}
        if self.rng.random() < 0.2:
            members = unique_values([self.pick(bounds, depth) for _ in range(self.rng.randint(1, 3))])
            if self.edgy(depth):
                members.append(self.rng.choice((True, None, "1", 1.0, members[0])))
            if self.rng.random() < 0.6:
                node["enum"] = members
            else:
                node["const"] = members[0]
            return node
        low, high = sorted((self.pick(bounds, depth), self.pick(bounds, depth)))
        if self.edgy(depth):
            low, high = high, low
        if self.rng.random() < 0.6:
            node[self.rng.choice(("minimum", "minimum", "exclusiveMinimum"))] = low
        if self.rng.random() < 0.6:
            node[self.rng.choice(("maximum", "maximum", "exclusiveMaximum"))] = high
        if self.rng.random() < 0.4:
            node["multipleOf"] = self.pick(steps, depth)
        return node

    def boolean(self, depth: int = 0) -> dict[str, Any]:
        node: dict[str, Any] = {"type": "boolean"}
        roll = self.rng.random()
        if roll < 0.2:
            node["const"] = self.rng.choice((True, False))
        elif roll < 0.4:
            node["enum"] = self.rng.choice(([True, 1], [0]) if self.edgy(depth) else ([True], [False], [True, False]))
        return node

    def null(self, _depth: int = 0) -> dict[str, Any]:
        return self.rng.choice(({"type": "null"}, {"enum": [None]}, {"const": None}, {"type": ["null"]}))

    def nullable_type(self, depth: int = 0) -> dict[str, Any]:
        kind = self.rng.choice(_SCALAR_TYPE_NAMES + ("object", "array"))
        node = dict(_BUILDERS[kind](self, depth + 1))
        node["type"] = [kind, "null"] if self.rng.random() < 0.7 else ["null", kind]
        if "enum" in node and self.rng.random() < 0.5:
            node["enum"] = node["enum"] + [None]
        return node

    def nullable_any_of(self, depth: int = 0) -> dict[str, Any]:
        inner = self.node(depth) if self.rng.random() < 0.4 else self.scalar(self.rng.choice(_SCALAR_TYPE_NAMES), depth)
        branches = [inner, {"type": "null"}]
        if self.rng.random() < 0.3:
            branches.reverse()
        node: dict[str, Any] = {"anyOf": branches}
        if self.rng.random() < 0.5:
            node.update({"default": None, "title": "Note"})  # pydantic's shape of an Optional field
        return node

    def object(self, depth: int = 0) -> dict[str, Any]:
        names = self.rng.sample(_NAMES[:8] if self.rng.random() < 0.8 else _NAMES, self.rng.randint(0, 4))
        node: dict[str, Any] = {"type": "object", "properties": {name: self.node(depth) for name in names}}
        required = [name for name in names if self.rng.random() < 0.5]
        if self.rng.random() < 0.05:
            required.append("undeclared")
        if required or self.rng.random() < 0.2:
            node["required"] = required
        roll = self.rng.random()
        if roll < 0.35:
            node["additionalProperties"] = False
        elif roll < 0.4:
            node["additionalProperties"] = True
        elif roll < 0.5:
            node["additionalProperties"] = self.scalar(self.rng.choice(_SCALAR_TYPE_NAMES), depth)
        if self.rng.random() < 0.12:
            node.update(self.lengths("minProperties", "maxProperties", 64, depth))
        return node

    def array(self, depth: int = 0) -> dict[str, Any]:
        node: dict[str, Any] = {"type": "array"}
        if not self.edgy(depth):
            node["items"] = self.node(depth) if self.rng.random() < 0.4 else \
                self.scalar(self.rng.choice(_SCALAR_TYPE_NAMES), depth)
        elif self.rng.random() < 0.5:
            node["items"] = [{"type": "string"}]
        node.update(self.lengths("minItems", "maxItems", td.DEFAULT_MAX_ITEMS, depth))
        if self.rng.random() < 0.4:
            node["uniqueItems"] = self.rng.choice((True, True, False))
        return node

    def ref(self, depth: int = 0) -> dict[str, Any]:
        name = self.rng.choice(_DEF_NAMES)
        prefix = f"#/{self.defs_keyword}/"
        roll = self.rng.random()
        if roll < 0.05:
            return {"$ref": prefix + "Missing"}
        if roll < 0.1:
            self.defs[name] = {"type": "array", "items": {"$ref": prefix + name}}  # recursive
            return {"$ref": prefix + name}
        if roll < 0.13:
            return {"$ref": self.rng.choice(("#", "#/properties/v", "other.json#/a", prefix + name + "/type"))}
        target = self.defs.get(name)
        if target is None:
            target = self.node(depth) if self.rng.random() < 0.5 else self.scalar(self.rng.choice(_SCALAR_TYPE_NAMES), depth)
            self.defs[name] = target
        node: dict[str, Any] = {"$ref": prefix + name}
        roll = self.rng.random()
        if roll < 0.2:
            node["description"] = "a reference with an annotation beside it"
        elif roll < 0.35:
            node.update(self.rng.choice(({"minLength": 2}, {"maximum": 5}, {"type": "string"}, {"enum": [1, "a"]})))
        return node

    def enum_const(self, _depth: int = 0) -> dict[str, Any]:
        return copy.deepcopy(self.rng.choice((
            {"enum": ["a", None]}, {"enum": [1, 1.0]}, {"const": None}, {"enum": [True, 1]},
            {"type": "integer", "enum": [1, 2], "const": 3}, {"type": "integer", "enum": [1, 2], "const": 2},
            {"type": ["string", "null"], "enum": ["a", "b", None], "const": None},
            {"type": ["string", "null"], "enum": ["a", "b"]}, {"enum": ["a", "b"], "const": "b"},
            {"enum": [0, 1.5, -0.0]}, {"const": -0.0}, {"enum": [[1], {"a": 1}]}, {"const": 1.0},
            {"type": "number", "enum": [1, 2.5], "const": 1.0}, {"enum": ["x", 1]}, {"const": "\u00e9"},
            {"type": "boolean", "enum": [False], "const": False}, {"enum": [None, 0, False, ""]},
        )))

    def format(self, depth: int = 0) -> dict[str, Any]:
        name = self.rng.choice(FORMATS)
        roll = self.rng.random()
        if roll < 0.1:
            return {"format": name}  # no type: the format says nothing about a number
        node: dict[str, Any] = {"type": "string" if roll < 0.85 else ["string", "null"], "format": name}
        if self.rng.random() < 0.3:
            node.update(self.lengths("minLength", "maxLength", td.DEFAULT_MAX_LENGTH, depth))
        if self.rng.random() < 0.1:
            node["pattern"] = self.patterns.pattern(edge=self.edgy(depth))
        return node

    def union(self, branches: list[Any], keyword: str | None = None) -> dict[str, Any]:
        return {keyword or self.rng.choice(("anyOf", "oneOf")): branches}

    def union_types(self, depth: int = 0) -> dict[str, Any]:
        kinds = self.rng.sample(("string", "integer", "boolean", "object", "array", "number"), self.rng.randint(2, 3))
        if "integer" in kinds and "number" in kinds:
            kinds.remove("number")
        return self.union([_BUILDERS[kind](self, depth + 1) for kind in kinds])

    def union_scalars(self, depth: int = 0) -> dict[str, Any]:
        kind = self.rng.choice(_SCALAR_TYPE_NAMES)
        return self.union([self.scalar(kind, depth + 1) for _ in range(self.rng.randint(2, 3))])

    def union_int_number(self, depth: int = 0) -> dict[str, Any]:
        branches = [self.integer(depth + 1), self.number(depth + 1)]
        self.rng.shuffle(branches)
        return self.union(branches)

    def union_tagged(self, depth: int = 0) -> dict[str, Any]:
        """Pydantic's discriminated union: object branches told apart by a const string."""
        names = self.rng.sample(("Cat", "Dog", "Lizard"), self.rng.randint(2, 3))
        tags = [name.lower() for name in names]
        if self.rng.random() < 0.1:
            tags[1] = tags[0]  # two branches with one tag
        branches, mapping = [], {}
        for name, tag in zip(names, tags):
            tag_schema = self.rng.choice(({"const": tag, "type": "string"}, {"const": tag}, {"enum": [tag]},
                                          {"const": tag, "title": "Pet Type", "type": "string"}))
            extra = {f"{tag}_name": self.scalar(self.rng.choice(_SCALAR_TYPE_NAMES), depth + 1)}
            branch: dict[str, Any] = {"type": "object", "title": name, "properties": {"pet_type": tag_schema, **extra}}
            branch["required"] = ["pet_type"] if self.rng.random() < 0.85 else []
            if self.rng.random() < 0.3:
                branch["required"].append(f"{tag}_name")
            if self.rng.random() < 0.3:
                branch["additionalProperties"] = False
            if self.rng.random() < 0.8:
                self.defs[name] = branch
                ref = f"#/{self.defs_keyword}/{name}"
                branches.append({"$ref": ref})
                mapping[tag] = ref
            else:
                branches.append(branch)
        node = self.union(branches, "oneOf" if self.rng.random() < 0.75 else "anyOf")
        if mapping and self.rng.random() < 0.7:
            node["discriminator"] = {"propertyName": "pet_type", "mapping": mapping}
        if self.rng.random() < 0.15:
            node[next(iter(node))].append({"type": "null"})
        return node

    def union_null(self, depth: int = 0) -> dict[str, Any]:
        if self.rng.random() < 0.25:
            return {"type": self.rng.sample(_SCALAR_TYPE_NAMES, 2) + ["null"]}
        kinds = self.rng.sample(_SCALAR_TYPE_NAMES + ("object",), 2)
        branches = [_BUILDERS[kind](self, depth + 1) for kind in kinds] + [{"type": "null"}]
        self.rng.shuffle(branches)
        return self.union(branches)

    def union_nested(self, depth: int = 0) -> dict[str, Any]:
        roll = self.rng.random()
        if roll < 0.3:
            return self.union([self.union_types(depth + 1), self.scalar(self.rng.choice(_SCALAR_TYPE_NAMES), depth + 1)])
        if roll < 0.55:
            return {"type": "array", "items": self.union_types(depth + 1), "maxItems": self.rng.choice((2, 3))}
        if roll < 0.8:
            items = self.rng.sample(_SCALAR_TYPE_NAMES, 2)
            return self.union([{"type": "array", "items": {"type": kind}, "maxItems": 3} for kind in items])
        return self.union([self.object(depth + 1), self.object(depth + 1)])

    def map(self, depth: int = 0) -> dict[str, Any]:
        node: dict[str, Any] = {"type": "object", "additionalProperties": self.node(depth) if self.rng.random() < 0.3
                                else self.scalar(self.rng.choice(_SCALAR_TYPE_NAMES), depth)}
        if self.rng.random() < 0.85:
            node["maxProperties"] = self.rng.choice((0, 1, 2, 3, 8, 64, 65))
        if self.rng.random() < 0.25:
            node["minProperties"] = self.rng.choice((0, 1, 2))
        if self.rng.random() < 0.2:
            node["propertyNames"] = self.rng.choice(({"maxLength": 3}, {"pattern": "^[a-z]+$"}))
        if self.rng.random() < 0.1:
            node["properties"] = {"id": {"type": "integer"}}
        return node

    def near_subset(self, depth: int = 0) -> dict[str, Any]:
        base = dict(_BUILDERS[self.rng.choice(("string", "integer", "number", "object", "array"))](self, depth))
        keyword, value = self.rng.choice(_REFUSED_EXTRAS)
        base[keyword] = copy.deepcopy(value)
        return base


_BUILDERS: Final[Mapping[str, Callable[[SchemaMaker, int], Any]]] = MappingProxyType({
    "string": SchemaMaker.string, "integer": SchemaMaker.integer, "number": SchemaMaker.number,
    "boolean": SchemaMaker.boolean, "null": SchemaMaker.null, "nullable-type": SchemaMaker.nullable_type,
    "nullable-anyOf": SchemaMaker.nullable_any_of, "object": SchemaMaker.object, "array": SchemaMaker.array,
    "ref": SchemaMaker.ref, "enum-const": SchemaMaker.enum_const, "format": SchemaMaker.format,
    "union-types": SchemaMaker.union_types, "union-scalars": SchemaMaker.union_scalars,
    "union-int-number": SchemaMaker.union_int_number, "union-tagged": SchemaMaker.union_tagged,
    "union-null": SchemaMaker.union_null, "union-nested": SchemaMaker.union_nested, "map": SchemaMaker.map,
    "near-subset": SchemaMaker.near_subset,
})

# ============================================================================================
# 6. Values
# ============================================================================================
# Values are read off the schema: each keyword's edges (min-1, min, max, max+1), the other
# spelling of each number, near misses of each enum member and pattern example, and wrong types.
# A container's values start from a base whose parts the oracle admits (when an oracle is given),
# then change one part at a time, so each change meets the check that should refuse it.

GENERIC_VALUES: Final = (None, True, False, 0, 1, -1, 1.0, -0.0, 1.5, "", "a", "1", "null", [], [None], {},
                         {"a": 1})
GENERIC_NUMBERS: Final = (0, 0.0, -0.0, 1, 1.0, True, False, -1, 0.5, 0.1 + 0.2, 0.3, SAFE, SAFE + 1, SAFE + 2,
                          float(2**53), 9007199254740994.0, -SAFE, -(2**53), float(-(2**53)), 1e16, 2**63, 2**64,
                          10**20, 1e308, -1e308, 5e-324, -5e-324, 1e-7, 123456789.5, "1", None)
UNIQUE_PAIRS: Final = ([1, 1.0], [1, True], [0, False], [0, -0.0], ["a", "a"], [None, None], [True, True],
                       [{"a": 1}, {"a": 1.0}], [[1], [1.0]], [[1], [True]], [{"a": 1, "b": 2}, {"b": 2, "a": 1}])
_STRING_FILLS: Final = ("a", ASTRAL, "\u00e9", "7")

# -- URIs ----------------------------------------------------------------------------------------
# The uri format's candidates: a fixed list with a valid case and near misses for each rule of the
# core's reading (RFC 3986's absolute URI and the WHATWG URL parser, both), and seeded random
# compositions of a scheme, an authority (userinfo, host, port) or an opaque path, a query and a
# fragment, some with one character changed.

_LABEL_63: Final = "l" + "a" * 61 + "z"  # the longest label DNS allows
_HOST_253: Final = ".".join(("a" * 63, "b" * 63, "c" * 63, "d" * 61))  # the longest name DNS allows
URI_SAMPLES: Final[tuple[str, ...]] = (
    # schemes
    "http://example.com", "HTTP://EXAMPLE.COM/", "https://example.com/a?b=c#d", "a+b.c-d://x", "x1:y",
    "1http://x", "+a://x", "a_b://x", "://x", ":", "http//x", "\u00e9:x", "example.com", "/path", "//example.com",
    # ports
    "http://example.com:0", "http://example.com:80", "http://example.com:65535", "http://example.com:65536",
    "http://example.com:99999", "http://example.com:123456", "http://example.com:00080", "http://example.com:",
    "http://example.com:-1", "http://example.com:8a", "http://example.com: 80", "foo://a:65535", "foo://a:65536",
    "foo://:80", "http://:80", "http://[::1]:65535", "http://[::1]:65536", "ws://a:0/", "wss://a:443?x",
    # an empty host, and special schemes without one
    "http://", "http:///a", "https://?q", "ws://#f", "wss://", "ftp://", "ftp:///x", "foo://", "foo:///a",
    "foo://?q", "http:a", "https:/a", "ws:", "wss:x", "ftp:/x", "HTTP:x", "file:", "file://", "file:///",
    # userinfo
    "http://user@example.com", "http://user:pass@example.com", "http://@example.com", "http://:@example.com",
    "foo://u@x", "file://u@x/", "http://a@b@c", "http://example.com/@x", "http://example.com?u@x",
    "http://example.com#u@x", "mailto:user@example.com",
    # numeric hosts
    "http://127.0.0.1", "http://0.0.0.0", "http://255.255.255.255", "http://192.168.0.1:8080/x",
    "http://0x7f.1", "http://0x7f.0.0.1", "http://0X7F.0.0.1", "http://127.1", "http://127.0.1", "http://1.2.3.999",
    "http://256.0.0.1", "http://01.2.3.4", "http://1.2.3.04", "http://1.2.3", "http://1.2.3.4.5", "http://2130706433",
    "http://0x7f000001", "http://0", "http://09", "http://1.2.3.4.", "http://a.1", "http://a.123", "http://a.0x1",
    "http://a.0X", "http://1a.b", "http://a.b1", "http://1.a", "http://a.1e1", "foo://1.2.3.999", "foo://0x7f.1",
    "foo://127.1", "file://1.2.3.999/", "file://127.1/",
    # labels
    "http://localhost", "http://a", "http://a.b", "http://a-b.c", "http://a--b.com", "http://ab--cd.com",
    "http://xn--nxasmq6b.com", "http://XN--nxasmq6b.com", "http://Xn--a.com", "http://a.xn--p1ai", "http://xn--.com",
    "http://xn-a.com", "http://axn--b.com", "foo://xn--a", f"http://{_LABEL_63}.com", f"http://{_LABEL_63}x.com",
    f"http://{_HOST_253}", f"http://{_HOST_253}d", f"http://{_HOST_253}.", f"foo://{_HOST_253}d",
    "http://-a.com", "http://a-.com", "http://a.-b", "http://a..b", "http://.a.com", "http://a.com.", "http://.",
    "http://a_b.com", "http://a%2eb.com", "http://%41.com", "http://\u00e9.com", "http://a.\u00e9", "http://a b/",
    "http://a*b", "http://a~b", "http://a!b", "http://a=b",
    # IPv6
    "http://[::1]", "http://[::1]:8080/", "http://[2001:db8::1]", "http://[2001:DB8::1]", "http://[::]",
    "http://[::ffff:192.168.0.1]", "http://[1:2:3:4:5:6:7:8]", "http://[1:2:3:4:5:6:7::]", "foo://[::1]/x",
    "file://[::1]/x", "http://[fe80::1%25eth0]", "http://[fe80::1%eth0]", "http://[v1.x]", "http://[vF.a:b]",
    "http://[1::2::3]", "http://[::1", "http://::1", "http://[12345::1]", "http://[::1]x", "http://[::1]:",
    "http://[::ffff:1.2.3.04]", "http://[::ffff:256.1.1.1]", "http://[::1.2.3.4]", "http://[::1:2:3:4:5:6:7:8]",
    "http://[1:2:3:4:5:6:7:8:9]", "http://[]", "http://[:]", "http://[::1]]", "http://[[::1]]",
    # file URLs
    "file:///etc/hosts", "file://localhost/etc", "file://host/x", "file://host:21/x", "file://:21/x", "file:etc",
    "file:/etc", "file:////x", "file://a%41/", "FILE://X:1/", "file://host/C:/x", "file:///C:/x", "file:C:/x",
    "file://host/c|/x", "file://C:/x", "foo://a/C:/x",
    # percent escapes
    "http://a/%41", "http://a/%c3%A9", "http://a/%00", "http://a/%4", "http://a/%zz", "http://a/%", "http://a/?%4",
    "http://a/#%zz", "http://a/?%41#%41", "urn:a%20b", "urn:a%2", "urn:%", "a:%GG",
    # spaces, controls, non-ASCII, backslashes and other characters outside RFC 3986
    "http://a/b c", " http://a", "http://a/ ", "http://a/\t", "http://a/\n", "http://a\n", "http://a/\r",
    "http://a/\u00e9", "http://a/\U0001F600", "http://a/\ud800", "http://a/\x00", "http://a/\x7f", "http://a/\u00a0",
    "http://a\\b", "http:\\\\a\\b", "http://a/b\\c", "http://a/|", "http://a/^", "http://a/`", "http://a/{}",
    "http://a/<>", "http://a/\"", "http://a/[x]", "http://a?[x]", "http://a/#a#b", "http://a/?a?b/c", "http://a/#?/",
    "http://a/~!$&'()*+,;=:@",
    # dot segments, which a URL parser resolves away (RFC 3986 leaves them in the text)
    "http://a/b/../c", "http://a/b/./c", "http://a/..", "http://a/b/.", "http://a/%2e%2e/c", "http://a/%2E./c",
    "http://a/.%2e/c", "http://a/%2e/c", "http://a/.well-known/x", "http://a/b..c/...", "http://a/?../x#./y",
    "foo:../x", "foo:a/./b",
    # opaque paths, and "//" where no authority is
    "a:", "a:/", "a:b", "a:b:c", "a:?", "a:#", "a:/b//c", "a:b//c", "foo:////x", "foo://x//y", "foo:/.//x",
    "foo:/./x", "foo:/..//x", "urn:isbn:0451450523", "mailto:a@b.c", "tel:+1-555-0100", "data:text/plain,hi",
    "javascript:alert(1)", "about:blank", "blob:https://a/b", "urn://x", "news:comp.lang", "a://b", "a:/?#",
)

_URI_SCHEMES: Final = (
    ("http", "https", "HTTP", "Https", "ws", "wss", "ftp", "file", "mailto", "urn", "foo", "a", "a+b.c-d", "git+ssh",
     "x1", "data", "tel"),
    ("", "1a", "a_b", "+a", "-a", "a b", "\u00e9", "http\u00a0"),
)
_URI_USERINFO: Final = ("user@", "user:pass@", "@", ":@", "a%40b@", "u@v@")
_URI_HOSTS: Final = (
    ("example.com", "EXAMPLE.COM", "localhost", "a", "a.b", "a-b.c", "a--b.com", "1a.com", "127.0.0.1", "0.0.0.0",
     "255.255.255.255", "[::1]", "[2001:db8::1]", "[::ffff:192.168.0.1]", "[1:2:3:4:5:6:7:8]", "[::]",
     _LABEL_63 + ".com", _HOST_253, ""),
    ("-a.com", "a-.com", "a..b", ".a.com", "a.com.", "xn--nxasmq6b.com", "a.xn--p1ai", _LABEL_63 + "x.com",
     _HOST_253 + "d", "0x7f.1", "127.1", "1.2.3.999", "1.2.3", "1.2.3.4.5", "01.2.3.4", "256.0.0.1", "2130706433",
     "a.1", "a.0x1", "[fe80::1%25eth0]", "[v1.x]", "[1::2::3]", "[::1", "::1", "a_b.com", "a b.com", "\u00e9.com",
     "%41.com", "a\\b", "[::1.2.3.04]"),
)
_URI_PORTS: Final = (("0", "1", "80", "443", "8080", "65535", "00080"),
                     ("", "65536", "99999", "100000", "-1", "8a", " 80", "1.5"))
_URI_SEGMENTS: Final = (("a", "b", "index.html", "a%20b", "%41", "~user", ".", "..", "a:b", "@", "a=b;c", "", "!$&'()*+,"),
                        ("a b", "%4", "%zz", "%", "\u00e9", "a\\b", "|", "^", "`", "{x}", "<a>", "\"", "[x]", "\t"))
_URI_QUERIES: Final = (("", "a=b", "a=b&c=d", "a?b/c", "%41", "x:y@z", "/"), ("a b", "%4", "[x]", "\u00e9", "a|b", "^"))
_URI_FRAGMENTS: Final = (("", "x", "a/b?c", "%41", "!"), ("%zz", "a b", "#", "\u00e9", "a^b", "a#b"))
_URI_CHANGES: Final = " \t\n\"#%/:<>?@[\\]^`{|}\u00e9\u00a0\U0001F600\x00\x7f"  # characters one change may add


def uri_candidate(rng: random.Random, *, miss: float = 0.12) -> str:
    """One seeded URI: its pieces mostly valid, each a near miss at rate ``miss``, and now and then
    one character inserted, replaced or removed."""
    def pick(pool: tuple[Sequence[str], Sequence[str]]) -> str:
        return rng.choice(pool[1] if rng.random() < miss else pool[0])

    def segments(count: int) -> str:
        return "".join("/" + pick(_URI_SEGMENTS) for _ in range(count))

    text = pick(_URI_SCHEMES) + ":"
    if rng.random() < 0.65:
        text += "//" + (rng.choice(_URI_USERINFO) if rng.random() < miss / 2 else "") + _uri_host(rng, miss)
        if rng.random() < 0.35:
            text += ":" + (pick(_URI_PORTS) if rng.random() < 0.6 else str(rng.randint(0, 70_000)))
        text += segments(rng.choice((0, 0, 1, 1, 2, 3)))
    else:
        text += rng.choice(("", "/", "//", "/./")) if rng.random() < miss else rng.choice(("", "", "/"))
        text += pick(_URI_SEGMENTS) + segments(rng.choice((0, 0, 1, 2)))
    if rng.random() < 0.3:
        text += "?" + pick(_URI_QUERIES)
    if rng.random() < 0.2:
        text += "#" + pick(_URI_FRAGMENTS)
    if rng.random() < miss:
        text = _one_character_changed(text, rng, _URI_CHANGES)
    return text


def _uri_host(rng: random.Random, miss: float) -> str:
    """A host from the pools, or made up: labels of letters, digits and hyphens, a dotted quad, or
    an IPv6 address, now and then with a rule broken (a long label, a numeric last label, xn--)."""
    roll = rng.random()
    if roll < 0.4:
        return rng.choice(_URI_HOSTS[1] if rng.random() < miss else _URI_HOSTS[0])
    if roll < 0.75:
        labels = []
        for _ in range(rng.randint(1, 4)):
            size = rng.choice((1, 2, 3, 5, 8, 12)) if rng.random() > miss else rng.choice((63, 64))
            inner = "".join(rng.choice("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-")
                            for _ in range(max(size - 2, 0)))
            edge = "abcxyzABCXYZ0123456789" if rng.random() > miss else "-0"
            labels.append((rng.choice(edge) + inner + rng.choice(edge))[:size] if size > 1 else rng.choice(edge))
        if rng.random() < miss:
            labels.insert(rng.randrange(len(labels)), rng.choice(("xn--a", "xn--nxasmq6b", "XN--", "0x7f", "1")))
        return ".".join(labels)
    if roll < 0.9:
        octets = [str(rng.choice((0, 1, 9, 10, 99, 127, 192, 255)) if rng.random() > miss
                      else rng.choice(("256", "01", "00", "0x7f", "999", ""))) for _ in range(4)]
        return ".".join(octets[:rng.choice((4, 4, 4, 4, 3, 2, 1)) if rng.random() < miss else 4])
    groups = [rng.choice(("0", "1", "db8", "ffff", "2001", "FE80", "abcd")) for _ in range(rng.randint(1, 8))]
    text = ":".join(groups)
    if len(groups) < 8:
        at = rng.randint(0, len(groups))
        text = ":".join(groups[:at]) + "::" + ":".join(groups[at:])
    if rng.random() < miss:
        text = rng.choice((text + "%25eth0", text + ":1.2.3.4", "v1." + text, text + "::", text + ":12345"))
    return "[" + text + "]"


# -- Emails --------------------------------------------------------------------------------------
# The email format's candidates: a fixed list with a valid case and near misses for each rule of
# the core's reading (the plain mailbox RFC 5321/5322, HTML's form field, zod and email-validator
# all admit), the classic traps (quoted and commented parts, address literals, Unicode, spaces),
# and seeded random compositions of a local part and a domain, some with one character changed.

_EMAIL_LOCAL_64: Final = "l" * 63 + "z"  # the longest local part RFC 5321 allows
_EMAIL_DOMAIN_189: Final = ".".join(("a" * 63, "b" * 63, "c" * 57, "com"))  # with a 64-character local part: 254
_TLD_63: Final = "t" * 63
EMAIL_SAMPLES: Final[tuple[str, ...]] = (
    # the local part's alphabet: letters, digits and _ ' + -
    "a@example.com", "A@EXAMPLE.COM", "Az09@example.com", "first.last@example.com", "a_b@example.com",
    "a'b@example.com", "o'brien@example.com", "a+tag@example.com", "a-b@example.com", "_@example.com",
    "+@example.com", "-@example.com", "0@example.com", "'a@example.com", "a'.b@example.com", "_'+-@example.com",
    "a!b@example.com", "a#b@example.com", "a$b@example.com", "a%b@example.com", "a&b@example.com",
    "a*b@example.com", "a/b@example.com", "a=b@example.com", "a?b@example.com", "a^b@example.com",
    "a`b@example.com", "a{b}@example.com", "a|b@example.com", "a~b@example.com", "a,b@example.com",
    "a:b@example.com", "a;b@example.com", "a<b>@example.com", "a[b]@example.com", "a\\b@example.com",
    "a\"b@example.com", "a(b)@example.com",
    # dot-separated runs, and a local part not ending in '
    "a.b.c@example.com", ".a@example.com", "a.@example.com", "a..b@example.com", ".@example.com", "@example.com",
    "a'@example.com", "a.b'@example.com", "'@example.com", "''@example.com", "a''@example.com", "a''b@example.com",
    # the local part's length
    _EMAIL_LOCAL_64 + "@example.com", _EMAIL_LOCAL_64 + "x@example.com",
    # the domain: two or more letter-digit-hyphen labels
    "a@b.co", "a@a.b.c.example.com", "a@1.example.com", "a@123.co", "a@a-b.co", "a@a--b.co", "a@abc--d.co",
    "a@a-b-c.co", "a@b", "a@co", "a@localhost", "a@example", "a@-a.co", "a@a-.co", "a@a.-co", "a@a.co-",
    "a@a_b.co", "a@a..co", "a@.a.co", "a@a.co.", "a@a.co..", "a@.", "a@", "a@a.", "a@a b.co", "a@a%2eb.co",
    "a@" + "l" * 63 + ".com", "a@" + "l" * 64 + ".com",
    # a label with -- as its third and fourth characters: punycode and its look-alikes
    "a@ab--cd.co", "a@xn--p1ai.co", "a@XN--P1AI.co", "a@Xn--nxasmq6b.com", "a@b.xn--p1ai", "a@xn--.co",
    "a@xn--a.co", "a@a.ab--c.co", "a@ab-c.co", "a@a-b--c.co", "a@1a--b.co", "a@--.co", "a@a---b.co",
    # the last label: 2 to 63 letters, not reserved
    "a@b.c", "a@b.co", "a@b.museum", "a@b." + _TLD_63, "a@b." + _TLD_63 + "t", "a@b.c1", "a@b.1c", "a@b.123",
    "a@1.2.3.4", "a@b.c-o", "a@b.0x1", "a@b.Co", "a@b.cO",
    "a@b.arpa", "a@b.invalid", "a@b.local", "a@b.localhost", "a@b.onion", "a@b.test", "a@b.ARPA", "a@b.Invalid",
    "a@b.LOCAL", "a@b.LocalHost", "a@b.ONION", "a@b.TEST", "a@b.tEsT", "a@test.com", "a@onion.co",
    "a@localhost.com", "a@b.testing", "a@b.tests", "a@b.locals", "a@b.arpas", "a@arpa", "a@test", "a@1.in-addr.arpa",
    "a@home.arpa", "a@example.test", "a@b.example", "a@example.com.test",
    # the whole address's length
    _EMAIL_LOCAL_64 + "@" + _EMAIL_DOMAIN_189, _EMAIL_LOCAL_64 + "@x" + _EMAIL_DOMAIN_189,
    "a@" + _EMAIL_DOMAIN_189.replace("a" * 63, "a" * 63 + ".d" * 31, 1),
    # quoted local parts, comments, address literals
    "\"a\"@example.com", "\"a b\"@example.com", "\"a@b\"@example.com", "\"\"@example.com", "\"a\\\"b\"@example.com",
    "a(comment)@example.com", "(comment)a@example.com", "a@(comment)example.com", "a@example.com(comment)",
    "a@[127.0.0.1]", "a@[IPv6:::1]", "a@[IPv6:2001:db8::1]", "a@127.0.0.1", "a@[example.com]",
    # Unicode
    "\u00fc@example.com", "a@\u00fc.com", "a@b.c\u00f6", "a@xn--tda.com", "\u0430@example.com", "a@\u0435xample.com",
    "\uff41@example.com", "a@example\uff0ecom", "a\u200b@example.com", "a@example.com\u200b", "\U0001F600@example.com",
    "a@\U0001F600.com", "a\ud800@example.com", "\u0661@example.com", "a@example.\u0441om",
    # spaces, controls, and one @ too many or too few
    " a@example.com", "a@example.com ", "a @example.com", "a@ example.com", "a@example .com", "a\t@example.com",
    "a@example.com\n", "\na@example.com", "a\r@example.com", "a@example.com\r\n", "a\x00@example.com",
    "a@example.com\x7f", "a\u00a0@example.com", "a@b@example.com", "a@@example.com", "@", "", "a", "example.com",
    "Name <a@example.com>", "<a@example.com>", "mailto:a@example.com", "a@example.com,b@example.com",
    "a@example.com;", "a@example.com/", "a@example.com:25", "a@example.com?", "a@example.com#x",
)
_EMAIL_RUN_CHARS: Final = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789" * 3 + "_'+-"
_EMAIL_LOCAL_MISSES: Final = "!#$%&*/=?^`{|}~\"(),:;<>[\\] .@\u00e9\u00fc\U0001F600"
_EMAIL_TLDS: Final = (
    ("com", "org", "net", "io", "co", "de", "uk", "museum", "example", "COM", "Org", "xyz", "travel", _TLD_63),
    ("c", "c1", "1c", "123", "", "-co", "co-", "xn--p1ai", "ab--cd", _TLD_63 + "t", "arpa", "invalid", "local",
     "localhost", "onion", "test", "TEST", "Local", "ONION", "Arpa", "c\u00f6", "c_o"),
)
_EMAIL_LABELS: Final = (
    ("example", "mail", "a", "b1", "1b", "a-b", "a--b", "abc--d", "123", "x" * 63, "EXAMPLE", "test", "onion"),
    ("-a", "a-", "", "ab--c", "xn--p1ai", "xn--", "XN--a", "x" * 64, "a_b", "a b", "\u00fc", "a%41", "[127.0.0.1]"),
)
_EMAIL_CHANGES: Final = " \t\n\"().,:;<>@[\\]\u00e9\u00a0\U0001F600\x00\x7f'-_+"  # characters one change may add


def email_candidate(rng: random.Random, *, miss: float = 0.12) -> str:
    """One seeded address: a local part of dot-separated runs and a domain of labels and a last
    label, each piece mostly valid and a near miss at rate ``miss``; now and then stretched to the
    length limits, and now and then one character inserted, replaced or removed."""
    def pick(pool: tuple[Sequence[str], Sequence[str]]) -> str:
        return rng.choice(pool[1] if rng.random() < miss else pool[0])

    runs = []
    for _ in range(rng.choice((1, 1, 1, 2, 2, 3, 4))):
        size = rng.choice((1, 1, 2, 3, 5, 8, 12)) if rng.random() > miss else rng.choice((0, 20, 40))
        run = "".join(rng.choice(_EMAIL_RUN_CHARS) for _ in range(size))
        if run and rng.random() < miss:
            at = rng.randrange(len(run))
            run = run[:at] + rng.choice(_EMAIL_LOCAL_MISSES) + run[at + 1:]
        runs.append(run)
    local = ".".join(runs)
    if rng.random() < miss / 2:
        local = (local * 65)[:rng.choice((63, 64, 65))]
    count = rng.choice((1, 1, 1, 2, 3)) if rng.random() > miss else 0  # labels before the last
    text = local + "@" + ".".join([*(pick(_EMAIL_LABELS) for _ in range(count)), pick(_EMAIL_TLDS)])
    if rng.random() < miss / 2:
        text = _padded(text, rng.choice((253, 254, 255)))
    if rng.random() < miss:
        text = _one_character_changed(text, rng, _EMAIL_CHANGES)
    return text


def _one_character_changed(text: str, rng: random.Random, changes: Sequence[str]) -> str:
    """The text with one character inserted, replaced (each from ``changes``) or removed, at a random place."""
    at = rng.randint(0, len(text))
    change = rng.choice(("insert", "replace", "remove"))
    if change == "insert":
        return text[:at] + rng.choice(changes) + text[at:]
    if change == "replace":
        return text[:at] + rng.choice(changes) + text[at + 1:]
    return text[:at] + text[at + 1:]


def _padded(text: str, target: int) -> str:
    """The address with labels of up to 63 letters put before its domain, to ``target`` characters
    (one short when only one is missing: a label and its dot take two)."""
    local, _, domain = text.rpartition("@")
    room = target - len(text)
    while room >= 2:
        size = min(63, room - 1)
        size -= room - size - 1 == 1  # leave two, never one, for the last label
        domain = "p" * size + "." + domain
        room -= size + 1
    return local + "@" + domain


FORMAT_SAMPLES: Final[Mapping[str, tuple[str, ...]]] = MappingProxyType({
    "date": ("2024-02-29", "2023-02-29", "2000-02-29", "1900-02-29", "2024-13-01", "2024-00-10", "2024-04-31",
             "2024-1-01", "24-01-01", "2024-01-01T00:00:00Z", "2024/01/01", "\uff12\uff10\uff12\uff14-01-01",
             "2024-01-01\n", " 2024-01-01", "0000-01-01", "9999-12-31", "2024-01-32", "\u0662024-01-01"),
    "date-time": ("2024-01-01T00:00:00Z", "2024-01-01T00:00:00+01:00", "2024-01-01t00:00:00z",
                  "2024-01-01T00:00:00.123456789Z", "2016-12-31T23:59:60Z", "2024-01-01T00:00:00",
                  "2024-01-01 00:00:00Z", "2024-01-01T24:00:00Z", "2024-01-01T00:60:00Z", "2024-01-01T00:00:00+24:00",
                  "2024-02-30T00:00:00Z", "2024-01-01T00:00:00.Z", "2024-01-01T00:00:00,5Z", "2024-01-01T00:00:00Z\n",
                  "2024-01-01T00:00:00-00:00", "2024-01-01T0\u0661:00:00Z", "2024-01-01T00:00:00+01:00:00"),
    "time": ("00:00:00Z", "23:59:59+05:30", "23:59:60Z", "12:00:00", "24:00:00Z", "1:00:00Z", "12:00:00.5z",
             "12:00Z", "12:00:00Z\n", "12:00:00+1:00", "12:00:00.Z", "08:30:06.283185Z", "12:00:00-00:00"),
    "uuid": ("123e4567-e89b-12d3-a456-426614174000", "123E4567-E89B-12D3-A456-426614174000",
             "00000000-0000-0000-0000-000000000000", "123e4567e89b12d3a456426614174000",
             "{123e4567-e89b-12d3-a456-426614174000}", "urn:uuid:123e4567-e89b-12d3-a456-426614174000",
             "123e4567e-89b-12d3-a456-42661417400", "g23e4567-e89b-12d3-a456-426614174000",
             "123e4567-e89b-12d3-a456-426614174000\n", "123e4567-e89b-12d3-a456-4266141740000"),
    "ipv4": ("192.168.0.1", "0.0.0.0", "255.255.255.255", "256.0.0.1", "01.2.3.4", "1.2.3", "1.2.3.4.5",
             "1.2.3.4\n", "\u0661.2.3.4", " 1.2.3.4", "0x7f.0.0.1", "127.1", "1.2.3.04"),
    "ipv6": ("::1", "::", "2001:db8::1", "2001:DB8::1", "::ffff:192.168.0.1", "fe80::1%eth0", "1::2::3", ":::",
             "12345::1", "2001:db8:0:0:0:0:0:1:2", "::1\n", "[::1]", "1:2:3:4:5:6:7:8", "1:2:3:4:5:6:7::",
             "::ffff:256.1.1.1", "\u0661::1"),
    "email": tuple(dict.fromkeys((  # the first few, then the fixed list above, each once
        "a@b.c", "a@b", "@b.c", "a@", "a b@c.d", "\"a b\"@c.d", "a@[127.0.0.1]", "a..b@c.d", ".a@b.c",
        "\u00fc@b.c", "a@b.c\n", "a@@b", "test@example.com", "a@b\u00e9.c", "a\t@b.c", *EMAIL_SAMPLES))),
    "uri": tuple(dict.fromkeys((  # the first few, then the fixed list above, each once
        "http://example.com", "https://example.com/a?b=c#d", "urn:isbn:0451450523", "mailto:a@b.c", "//example.com",
        "/path", "example.com", "http://exa mple.com", "http://[::1]:80/", "http://example.com/%zz", "\u00e9:x",
        "http://\u00e9.com", "a:", "http://x\n", "HTTP://X", "1http://x", "http://x/\u00e9", "file:///etc",
        *URI_SAMPLES))),
})


class ValueMaker:
    """Candidate values for one root schema; ``judge(node, value)`` orders them, admitted first."""

    def __init__(self, rng: random.Random, root: Any, *, examples: Mapping[str, Sequence[str]],
                 judge: Callable[[Any, Any], bool] | None = None) -> None:
        self.rng = rng
        self.root = root
        self.examples = examples
        self.judge = judge
        self._admitted_counts: dict[int, int] = {}  # by id of a node of root, alive as long as root

    def values(self, *, limit: int = MAX_VALUES_PER_SCHEMA) -> list[Any]:
        """The root's candidates and the generic wrong types, each once, at most ``limit``."""
        found = unique_values(self.candidates(self.root, 0) + list(GENERIC_VALUES))
        if len(found) > limit:
            keep = sorted(self.rng.sample(range(len(found)), limit))
            found = [found[index] for index in keep]
        return found

    def candidates(self, node: Any, depth: int) -> list[Any]:
        """Values for one subschema, those the judge admits first; at most MAX_CANDIDATES below the root."""
        if type(node) is not dict or depth > MAX_DEPTH + 2:
            return list(GENERIC_VALUES)
        found = unique_values(self._raw(node, depth))
        if depth == 0:
            return found  # the root's values are all checked: their order does not matter
        admitted = len(found) // 2
        if self.judge is not None:
            verdicts = [self._admitted(node, value) for value in found]
            admitted = sum(verdicts)
            found = [value for value, ok in zip(found, verdicts) if ok] + \
                    [value for value, ok in zip(found, verdicts) if not ok]
        if len(found) > MAX_CANDIDATES:
            half = MAX_CANDIDATES // 2
            found = found[:half] + self.rng.sample(found[half:], half)
            admitted = min(admitted, half)
        self._admitted_counts[id(node)] = admitted
        return found

    def _admitted(self, node: Any, value: Any) -> bool:
        try:
            return bool(self.judge(node, value))  # type: ignore[misc]
        except Exception:  # a subschema the oracle cannot read alone (a broken $ref): no ordering
            return False

    def _raw(self, node: dict[str, Any], depth: int) -> list[Any]:
        out: list[Any] = []
        reference = node.get("$ref")
        if type(reference) is str:
            target = self._target(reference)
            if target is not None:
                out += self.candidates(target, depth + 1)
        for keyword in ("anyOf", "oneOf", "allOf"):
            if type(node.get(keyword)) is list:
                out += self._union(node[keyword], depth)
        # The keywords' own candidates first: below the root only some of the rest are kept.
        if "enum" in node or "const" in node:
            out += self._enumerated(node)
        if type(node.get("pattern")) is str:
            out += self._near_pattern(node["pattern"])
        if type(node.get("format")) is str:
            out += self._formats(node["format"])
        types = node.get("type")
        for kind in (types if type(types) is list else [types]):
            maker = _VALUE_MAKERS.get(kind) if type(kind) is str else None
            if maker is not None:
                out += maker(self, node, depth)
        if type(node.get("additionalProperties")) is dict and types is None:
            out += self._objects(node, depth)
        return out + ([None] if types is not None else list(GENERIC_VALUES))

    def _target(self, reference: str) -> Any:
        for prefix in ("#/$defs/", "#/definitions/"):
            if reference.startswith(prefix) and type(self.root) is dict:
                table = self.root.get(prefix[2:-1])
                if type(table) is dict:
                    return table.get(reference[len(prefix):])
        return self.root if reference == "#" else None

    def _union(self, branches: list[Any], depth: int) -> list[Any]:
        per_branch = [self.candidates(branch, depth + 1) for branch in branches[:4]]
        out = [value for values in zip(*per_branch) for value in values]  # interleaved, first ones first
        out += [value for values in per_branch for value in values]
        # Objects of two branches merged, and each with the other's tag: a value that two
        # branches admit (oneOf refuses it) or none does.
        firsts = [values[0] for values in per_branch if values and type(values[0]) is dict]
        for left in firsts:
            for right in firsts:
                if left is not right:
                    out.append({**left, **right})
                    out.append({**left, **{key: value for key, value in right.items() if key in left}})
        return out

    def _enumerated(self, node: dict[str, Any]) -> list[Any]:
        members = list(node["enum"]) if type(node.get("enum")) is list else []
        if "const" in node:
            members.insert(0, node["const"])
        out = list(members)
        for member in members:
            out += _near_misses(member)
        return out

    def _strings(self, node: dict[str, Any], _depth: int) -> list[Any]:
        low = _count_of(node.get("minLength"), 0)
        high = _count_of(node.get("maxLength"), td.DEFAULT_MAX_LENGTH)
        lengths = {0, 1, low - 1, low, low + 1, high - 1, high, high + 1, td.DEFAULT_MAX_LENGTH,
                   td.DEFAULT_MAX_LENGTH + 1}
        out: list[Any] = []
        for length in sorted(length for length in lengths if 0 <= length <= MAX_GENERATED_LENGTH):
            out += [fill * length for fill in _STRING_FILLS]
            if length:
                out += ["a" * (length - 1) + "\n", "a" * (length - 1) + ASTRAL]
        # An astral string whose UTF-16 length reaches the lower bound while its length in
        # characters does not, and the reverse at the upper bound.
        out += [ASTRAL * ((low + 1) // 2), ASTRAL * max(low - 1, 0), ASTRAL * high if high < 64 else ASTRAL]
        out += ["\ud800", "a\udc00", "\x00", "\u2028", "e\u0301"]
        return out

    def _near_pattern(self, pattern: str) -> list[Any]:
        out: list[Any] = []
        for example in self.examples.get(pattern, ())[:6]:
            out += [example, example + "\n", "\n" + example, example[:-1], example + example[-1:], " " + example,
                    example + "x", "zz" + example, example.upper(), example.lower(),
                    example.translate(_LOOKALIKE_DIGITS), example.replace("-", "\u2010"), example * 2]
        return out

    def _formats(self, name: str) -> list[Any]:
        samples = list(FORMAT_SAMPLES.get(name, ()))
        if name == "date":
            samples += [self._date() for _ in range(6)]
        elif name == "date-time":
            samples += [self._date() + "T" + self._time() for _ in range(6)]
        elif name == "time":
            samples += [self._time() for _ in range(6)]
        elif name == "uuid":
            samples += [self._uuid() for _ in range(3)]
        elif name == "uri":
            samples += [uri_candidate(self.rng) for _ in range(MAX_URI_COMPOSITIONS)]
        elif name == "email":
            samples += [email_candidate(self.rng) for _ in range(MAX_EMAIL_COMPOSITIONS)]
        return samples

    def _date(self) -> str:
        year = self.rng.choice((1900, 2000, 2023, 2024, 1, 9999))
        return f"{year:04d}-{self.rng.randint(0, 13):02d}-{self.rng.randint(0, 32):02d}"

    def _time(self) -> str:
        offset = self.rng.choice(("Z", "z", "+00:00", "-23:59", "+24:00", "", "+05:30", "+0530"))
        fraction = self.rng.choice(("", "", ".5", ".123456", "."))
        return (f"{self.rng.randint(0, 24):02d}:{self.rng.randint(0, 60):02d}:{self.rng.randint(0, 61):02d}"
                f"{fraction}{offset}")

    def _uuid(self) -> str:
        text = "".join(self.rng.choice("0123456789abcdefABCDEF") for _ in range(32))
        return "-".join((text[:8], text[8:12], text[12:16], text[16:20], text[20:]))

    def _numbers(self, node: dict[str, Any], _depth: int) -> list[Any]:
        out: list[Any] = list(GENERIC_NUMBERS)
        for keyword in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            bound = node.get(keyword)
            if _is_number(bound):
                out += _around(bound)
        step = node.get("multipleOf")
        if _is_number(step) and step > 0:
            out += _multiples(step, node)
        return [value for value in out if type(value) is not float or math.isfinite(value)]

    def _booleans(self, _node: dict[str, Any], _depth: int) -> list[Any]:
        return [True, False, 0, 1, 1.0, "true", None]

    def _nulls(self, _node: dict[str, Any], _depth: int) -> list[Any]:
        return [None, "null", 0, False, "", [], {}]

    def _objects(self, node: dict[str, Any], depth: int) -> list[Any]:
        properties = node.get("properties") if type(node.get("properties")) is dict else {}
        required = [name for name in node.get("required", []) if type(name) is str] \
            if type(node.get("required")) is list else []
        per = {name: self.candidates(sub, depth + 1) for name, sub in properties.items()}
        base = {name: values[0] for name, values in per.items()
                if values and (name in required or self.rng.random() < 0.5)}
        full = {name: values[0] for name, values in per.items() if values}
        out: list[Any] = [base, full, {}, {name: full[name] for name in required if name in full}]
        for name, values in per.items():
            out += [{**base, name: value} for value in values[1:]]
            if name in base:
                out.append({key: item for key, item in base.items() if key != name})
        extra = node.get("additionalProperties")
        extra_values = self.candidates(extra, depth + 1) if type(extra) is dict else [1, None, "x"]
        for key in ("zz", "", "ID", "id ", "pet_type", ASTRAL, "\ud800"):
            for value in extra_values[:3]:
                out.append({**base, key: value})
        out += [{**base, key: value} for key, value in zip(("k1", "k2", "k3"), extra_values[3:6])]
        for count in sorted({_count_of(node.get(name), -1) for name in ("minProperties", "maxProperties")}):
            for size in (count - 1, count, count + 1):
                if 0 <= size <= 70:
                    keys = list(full)[:size] + [f"k{index}" for index in range(max(size - len(full), 0))]
                    out.append({key: full[key] if key in full else extra_values[0] for key in keys})
        return out

    def _arrays(self, node: dict[str, Any], depth: int) -> list[Any]:
        items = node.get("items")
        values = self.candidates(items, depth + 1) if type(items) is dict else list(GENERIC_VALUES)
        valid = values[:max(1, self._admitted_counts.get(id(items), len(values) // 2))]
        low = _count_of(node.get("minItems"), 0)
        high = _count_of(node.get("maxItems"), td.DEFAULT_MAX_ITEMS)
        out: list[Any] = []
        for length in sorted({0, 1, 2, low - 1, low, low + 1, high - 1, high, high + 1}):
            if 0 <= length <= MAX_GENERATED_ITEMS:
                out.append([valid[index % len(valid)] for index in range(length)])
                out.append([valid[0]] * length)
        base = [valid[index % len(valid)] for index in range(max(low, 1))]
        out += [[value] + base[1:] for value in values[1:]]
        out += [list(pair) for pair in UNIQUE_PAIRS]
        out += [[value, json_twin(value)] for value in valid[:4]]
        return out


_VALUE_MAKERS: Final[Mapping[str, Callable[[ValueMaker, dict[str, Any], int], list[Any]]]] = MappingProxyType({
    "string": ValueMaker._strings, "integer": ValueMaker._numbers, "number": ValueMaker._numbers,
    "boolean": ValueMaker._booleans, "null": ValueMaker._nulls, "object": ValueMaker._objects,
    "array": ValueMaker._arrays,
})
_LOOKALIKE_DIGITS: Final = str.maketrans("0123456789", "\u0660\u0661\u0662\u0663\u0664\u0665\u0666\u0667\u0668\u0669")


def _count_of(value: Any, default: int) -> int:
    return value if type(value) is int else default


def _is_number(value: Any) -> bool:
    return type(value) in (int, float) and (type(value) is int or math.isfinite(value))


def _around(bound: int | float) -> list[Any]:
    """A bound, its other spelling, and its neighbours: one apart, half apart, one double apart."""
    out: list[Any] = [bound, json_twin(bound), bound - 1, bound + 1, bound - 0.5, bound + 0.5,
                      math.nextafter(float(bound), -math.inf), math.nextafter(float(bound), math.inf)]
    if type(bound) is float and bound.is_integer() and abs(bound) < 2**63:
        out += [int(bound) - 1, int(bound) + 1]
    return out


def _multiples(step: int | float, node: Mapping[str, Any]) -> list[Any]:
    """Multiples of a step, halfway points, and multiples near each bound and near 2**53."""
    out: list[Any] = [0, step, -step, 2 * step, 3 * step, step / 2, step * 1.5, step * 7, step * 10, 0.3, 0.7]
    try:
        out += [step * 2**52, step * (2**52 + 1), step * 2**53, int(SAFE // step) * step]
        for keyword in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            bound = node.get(keyword)
            if _is_number(bound):
                nearest = round(bound / step)
                out += [(nearest + shift) * step for shift in (-1, 0, 1)]
    except (OverflowError, ValueError, ZeroDivisionError):
        pass
    return out


def _near_misses(member: Any) -> list[Any]:
    """Values a careless comparison would confuse with an enum member."""
    out: list[Any] = [json_twin(member)]
    if type(member) is str:
        out += [member + "\n", member + " ", " " + member, member.upper(), member[:-1], member + "x"]
    elif type(member) is bool:
        out += [int(member), float(member), not member]
    elif type(member) in (int, float) and _is_number(member):
        out += [member + 1, member - 0.5, -member, str(member)]
        if member == 0 or member == 1:
            out.append(bool(member))
    elif member is None:
        out += ["null", 0, False, "", []]
    return [value for value in out if is_json_value(value)]


# ============================================================================================
# 7. Overlays
# ============================================================================================
# A server's object schema with a property ``p``; a host schema for ``p`` (or for ``p.r``) that is
# tighter, looser, or unrelated; narrow() must prove it narrower or refuse it.

@dataclass(frozen=True, slots=True)
class OverlayCase:
    feature: str
    server: dict[str, Any]
    path: tuple[str, ...]
    host: Any


class OverlayMaker:
    """Server schemas and host overlays for them."""

    def __init__(self, schemas: SchemaMaker) -> None:
        self.schemas = schemas
        self.rng = schemas.rng

    def case(self) -> OverlayCase:
        self.schemas.defs, self.schemas.defs_keyword = {}, "$defs"
        kind = self.rng.choice(("string", "string", "integer", "number", "number", "boolean", "format",
                                "nullable-type", "nullable-anyOf", "object", "array", "enum"))
        server_property = self._server_property(kind)
        path: tuple[str, ...] = ("p",)
        if kind == "object" and self.rng.random() < 0.6:
            path = ("p", "r")
        elif self.rng.random() < 0.04:
            path = ("missing",)
        target = server_property["properties"]["r"] if path == ("p", "r") else server_property
        feature, host = self._host(target, kind)
        properties = {"p": server_property, "q": {"type": "string", "maxLength": 8}}
        server: dict[str, Any] = {"type": "object", "properties": properties, "required": ["p"]}
        definitions = dict(self.schemas.defs)
        if self.rng.random() < 0.25:
            definitions["P"] = server_property
            properties["p"] = {"$ref": "#/$defs/P"}
        if definitions:
            server["$defs"] = definitions
        if self.rng.random() < 0.3:
            server["additionalProperties"] = False
        return OverlayCase(feature, server, path, host)

    def _server_property(self, kind: str) -> dict[str, Any]:
        make = self.schemas
        if kind == "object":
            return {"type": "object", "properties": {"r": make.scalar(self.rng.choice(_SCALAR_TYPE_NAMES), 2),
                                                     "s": make.string()}, "required": ["r"]}
        if kind == "enum":
            return {"type": "string", "enum": self.rng.sample(_STRINGS, 3)}
        if kind == "format":
            node = {"type": "string", "format": self.rng.choice(FORMATS)}
            if self.rng.random() < 0.5:
                node["maxLength"] = self.rng.choice((10, 40, 64))
            return node
        return dict(_BUILDERS[kind](make, 2))

    def _host(self, server: Any, kind: str) -> tuple[str, Any]:
        """A host rule for the server's: a tighter one, a looser one, or another altogether."""
        roll = self.rng.random()
        if roll < 0.15 or type(server) is not dict:
            return "other", self.schemas.scalar(self.rng.choice(_SCALAR_TYPE_NAMES), 2)
        host = copy.deepcopy(server)
        inner = host
        if "anyOf" in host:  # the nullable anyOf: change the non-null branch, or drop null
            if self.rng.random() < 0.3:
                return "drop-null", next(branch for branch in host["anyOf"] if branch != {"type": "null"})
            inner = next(branch for branch in host["anyOf"] if branch != {"type": "null"})
        tighter = roll < 0.6
        changed = _HOST_CHANGES.get(_kind_of(inner), _change_nothing)(self, inner, tighter)
        if type(host.get("type")) is list and self.rng.random() < 0.3:
            host["type"] = [kind_name for kind_name in host["type"] if kind_name != "null"][0]
            changed = True
        return ("tighter" if tighter else "looser") if changed else "same", host

    def change_string(self, node: dict[str, Any], tighter: bool) -> bool:
        roll = self.rng.random()
        if "enum" in node:
            members = node["enum"]
            node["enum"] = members[:max(1, len(members) - 1)] if tighter else members + ["zz-new"]
        elif "format" in node and roll < 0.5:
            node.pop("format")
            if tighter:
                node["pattern"] = "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"
                self.schemas.patterns.examples.setdefault(node["pattern"], ("2024-01-01", "9999-99-99"))
        elif roll < 0.4:
            node["minLength"] = _count_of(node.get("minLength"), 0) + (1 if tighter else -1)
        elif roll < 0.75:
            high = _count_of(node.get("maxLength"), td.DEFAULT_MAX_LENGTH)
            node["maxLength"] = high - 1 if tighter else high + 1
        else:
            node["pattern"] = self.schemas.patterns.pattern()
        return True

    def change_number(self, node: dict[str, Any], tighter: bool) -> bool:
        roll = self.rng.random()
        if roll < 0.3:
            low = node.get("minimum", node.get("exclusiveMinimum", -100))
            node["minimum"] = (low + 1 if tighter else low - 1) if _is_number(low) else 0
        elif roll < 0.6:
            high = node.get("maximum", node.get("exclusiveMaximum", 100))
            node["maximum"] = (high - 1 if tighter else high + 1) if _is_number(high) else 0
        elif roll < 0.8:
            step = node.get("multipleOf", 1)
            node["multipleOf"] = (step * self.rng.choice((2, 3)) if tighter else step / 2) if _is_number(step) else 1
        else:
            node["type"] = "integer" if tighter else "number"
        return True

    def change_object(self, node: dict[str, Any], tighter: bool) -> bool:
        if tighter:
            node["required"] = list(node.get("properties", {}))
        else:
            node["properties"]["added"] = {"type": "string"}
        return True

    def change_array(self, node: dict[str, Any], tighter: bool) -> bool:
        high = _count_of(node.get("maxItems"), td.DEFAULT_MAX_ITEMS)
        node["maxItems"] = max(high - 1, 0) if tighter else high + 1
        return True

    def change_boolean(self, node: dict[str, Any], tighter: bool) -> bool:
        node["const" if tighter else "type"] = True if tighter else "integer"
        return True


def _kind_of(node: Any) -> str:
    kind = node.get("type") if type(node) is dict else None
    if type(kind) is list:
        kind = next((name for name in kind if name != "null"), None)
    return kind if type(kind) is str else ""


def _change_nothing(_maker: OverlayMaker, _node: Any, _tighter: bool) -> bool:
    return False


_HOST_CHANGES: Final[Mapping[str, Callable[[OverlayMaker, dict[str, Any], bool], bool]]] = MappingProxyType({
    "string": OverlayMaker.change_string, "integer": OverlayMaker.change_number,
    "number": OverlayMaker.change_number, "object": OverlayMaker.change_object,
    "array": OverlayMaker.change_array, "boolean": OverlayMaker.change_boolean,
})


def patched_schema(server: dict[str, Any], path: Sequence[str], host: Any) -> dict[str, Any] | None:
    """The server's schema with the host's rule in place, or None when the path crosses a $ref."""
    patched = copy.deepcopy(server)
    node: Any = patched
    for position, name in enumerate(path):
        properties = node.get("properties") if type(node) is dict else None
        if type(properties) is not dict or name not in properties:
            return None
        if position == len(path) - 1:
            properties[name] = copy.deepcopy(host)
            return patched
        node = properties[name]
        if type(node) is not dict or "$ref" in node:
            return None  # narrow() inlines it for this use; the oracle would need the same
    return None


def place(base: Any, path: Sequence[str], value: Any) -> Any:
    """A copy of an object value with value at path (the parents made where missing)."""
    out = copy.deepcopy(base) if type(base) is dict else {}
    node = out
    for name in path[:-1]:
        child = node.get(name)
        node[name] = child = copy.deepcopy(child) if type(child) is dict else {}
        node = child
    node[path[-1]] = value
    return out


# ============================================================================================
# 8. The differential run
# ============================================================================================


@dataclass(slots=True)
class Tally:
    """What one check saw: schemas, refusals by code, values, and the findings."""

    generated: int = 0
    compiled: int = 0
    refused: dict[str, int] = field(default_factory=dict)
    values: int = 0
    admitted: int = 0
    narrowed: int = 0
    unsound: int = 0
    raised: int = 0
    findings: list[dict[str, Any]] = field(default_factory=list)

    def refuse(self, code: str) -> None:
        self.refused[code] = self.refused.get(code, 0) + 1

    def view(self) -> dict[str, Any]:
        return {"generated": self.generated, "compiled": self.compiled,
                "refused": dict(sorted(self.refused.items())), "values": self.values,
                "admitted": self.admitted, "narrowed": self.narrowed, "unsound": self.unsound,
                "raised": self.raised}


def check_values(admits: Callable[[Any], bool], judge: Callable[[Any], bool], values: Sequence[Any],
                 tally: Tally, finding: Mapping[str, Any]) -> list[Any]:
    """Put each value to the compiled check and the oracle; return the unsound ones.

    Admitted by the check and refused by the oracle: unsound (a finding). Refused by the check and
    admitted by the oracle: a narrowing (counted). A check or an oracle that raises: a finding.
    """
    unsound = []
    for value in values:
        if not is_json_value(value):
            raise ValueError("a generated value is not a JSON value")  # the generator's bug, not the core's
        tally.values += 1
        try:
            admitted = admits(value)
        except Exception as error:  # a check must answer every JSON value
            tally.raised += 1
            tally.findings.append({**finding, "kind": "check-raised", "error": _error_name(error), "value": value})
            continue
        try:
            valid = judge(value)
        except Exception as error:
            tally.raised += 1
            tally.findings.append({**finding, "kind": "oracle-raised", "error": _error_name(error), "value": value})
            continue
        if admitted:
            tally.admitted += 1
            if not valid:
                tally.unsound += 1
                unsound.append(value)
        elif valid:
            tally.narrowed += 1
    return unsound


def _error_name(error: BaseException) -> str:
    code = getattr(error, "code", None)
    return f"{type(error).__name__} {code}" if type(code) is str else type(error).__name__


def compile_or_refuse(compile_schema: Callable[..., Any], schema: Any, tally: Tally,
                      finding: Mapping[str, Any]) -> Any:
    """The compiled check, or None with the refusal counted by code (a crash is a finding)."""
    try:
        compiled = compile_schema(schema, require_object=False)
    except td.BoundaryError as refusal:
        tally.refuse(refusal.code)
        return None
    except Exception as error:  # an untrusted schema must be refused with a code, not crash
        tally.refuse(type(error).__name__)
        tally.raised += 1
        tally.findings.append({**finding, "kind": "compiler-raised", "error": _error_name(error)})
        return None
    tally.compiled += 1
    return compiled


def run_seed(seed: int, schemas: int, overlays: int, oracle: Oracle, *,
             compile_schema: Callable[..., Any] = td.compile_schema,
             narrow: Callable[..., Any] = td.narrow) -> dict[str, Any]:
    """The report of one seeded run: schemas, overlays, and the first findings, minimized."""
    rng = random.Random(seed)
    maker = SchemaMaker(rng)
    tally, features = Tally(), {name: [0, 0] for name in FEATURE_WEIGHTS}
    for index in range(schemas):
        feature, schema = maker.schema()
        tally.generated += 1
        features[feature][0] += 1
        where = {"check": "schema", "seed": seed, "index": index, "feature": feature}
        compiled = compile_or_refuse(compile_schema, schema, tally, {**where, "schema": schema})
        if compiled is None:
            continue
        features[feature][1] += 1
        values = ValueMaker(random.Random(f"{seed}:{index}"), schema, examples=maker.patterns.examples,
                            judge=_subschema_judge(oracle, schema))
        for value in check_values(compiled.admits, oracle.judge(schema), values.values(), tally, where):
            tally.findings.append({**where, "kind": "unsound", "schema": schema, "value": value})
    overlay_tally = run_overlays(seed, overlays, maker, oracle, narrow=narrow)
    findings = tally.findings + overlay_tally.findings
    shown = [minimize_finding(finding, oracle, compile_schema=compile_schema, narrow=narrow)
             for finding in first_of_each_schema(findings)[:MAX_FINDINGS]]
    return {
        "format": REPORT_FORMAT, "seed": seed, "oracle": oracle.versions,
        "schemas": tally.view(),
        "features": {name: {"generated": counts[0], "compiled": counts[1]} for name, counts in features.items()},
        "overlays": overlay_tally.view(),
        "findings_total": len(findings),
        "findings": shown,
    }


def first_of_each_schema(findings: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One finding for each schema (or overlay) that has any: the first."""
    seen: dict[tuple[Any, ...], dict[str, Any]] = {}
    for finding in findings:
        seen.setdefault((finding["check"], finding.get("index")), finding)
    return list(seen.values())


def _subschema_judge(oracle: Oracle, root: Any) -> Callable[[Any, Any], bool]:
    """The oracle on a subschema read in its root's context (its $defs beside it)."""
    definitions = {keyword: root[keyword] for keyword in ("$defs", "definitions")
                   if type(root) is dict and keyword in root}

    def judge(node: Any, value: Any) -> bool:
        if node is root or type(node) is not dict:
            return oracle.valid(node, value)
        return oracle.valid({**definitions, **node}, value)
    return judge


def run_overlays(seed: int, count: int, maker: SchemaMaker, oracle: Oracle, *,
                 narrow: Callable[..., Any] = td.narrow) -> Tally:
    """Overlays through narrow(): whatever the result admits, the server's schema admits."""
    tally = Tally()
    overlays = OverlayMaker(maker)
    for index in range(count):
        case = overlays.case()
        tally.generated += 1
        where = {"check": "overlay", "seed": seed, "index": index, "feature": case.feature}
        try:
            compiled = narrow(case.server, {case.path: case.host})
        except td.BoundaryError as refusal:
            tally.refuse(refusal.code)
            continue
        except Exception as error:
            tally.refuse(type(error).__name__)
            tally.raised += 1
            tally.findings.append({**where, "kind": "narrow-raised", "error": _error_name(error),
                                   "server": case.server, "path": list(case.path), "host": case.host})
            continue
        tally.compiled += 1
        values = _overlay_values(random.Random(f"{seed}:overlay:{index}"), maker, oracle, case)
        for value in check_values(compiled.admits, oracle.judge(case.server), values, tally, where):
            tally.findings.append({**where, "kind": "unsound", "server": case.server, "path": list(case.path),
                                   "host": case.host, "value": value})
        patched = patched_schema(case.server, case.path, case.host)
        if patched is not None:  # the host's own rule holds too: the compiled check is exact for it
            for value in check_values(compiled.admits, oracle.judge(patched), values, Tally(), where):
                tally.unsound += 1
                tally.findings.append({**where, "kind": "unsound-host", "server": case.server,
                                       "path": list(case.path), "host": case.host, "value": value})
    return tally


def _overlay_values(rng: random.Random, maker: SchemaMaker, oracle: Oracle, case: OverlayCase) -> list[Any]:
    judge = _subschema_judge(oracle, case.server)
    server_values = ValueMaker(rng, case.server, examples=maker.patterns.examples, judge=judge)
    values = server_values.values(limit=MAX_VALUES_PER_SCHEMA // 2)
    base = next((value for value in values if type(value) is dict and judge(case.server, value)), {"p": None})
    host_values = ValueMaker(rng, case.host, examples=maker.patterns.examples)
    values += [place(base, case.path, value) for value in host_values.values(limit=MAX_VALUES_PER_SCHEMA // 2)]
    return unique_values(values)


# -- Shrinking a finding -------------------------------------------------------------------------


def minimize_finding(finding: dict[str, Any], oracle: Oracle, *,
                     compile_schema: Callable[..., Any] = td.compile_schema,
                     narrow: Callable[..., Any] = td.narrow) -> dict[str, Any]:
    """The finding with its schema and value made as small as they stay unsound."""
    if finding.get("kind") == "unsound" and finding["check"] == "schema":
        def still(case: dict[str, Any]) -> bool:
            return compile_schema(case["schema"], require_object=False).admits(case["value"]) \
                and not oracle.valid(case["schema"], case["value"])
        keys = ("schema", "value")
    elif finding.get("kind") == "unsound" and finding["check"] == "overlay":
        def still(case: dict[str, Any]) -> bool:
            return narrow(case["server"], {tuple(case["path"]): case["host"]}).admits(case["value"]) \
                and not oracle.valid(case["server"], case["value"])
        keys = ("server", "host", "value")
    else:
        return finding
    case = {key: finding[key] for key in keys + (("path",) if "path" in finding else ())}
    return {**finding, **shrink(case, still, keys=keys)}


def shrink(case: dict[str, Any], still: Callable[[dict[str, Any]], bool], *, keys: Sequence[str],
           budget: int = MINIMIZE_BUDGET) -> dict[str, Any]:
    """Greedy: drop any member or item of the named parts while ``still`` holds, within a budget."""
    def holds(candidate: dict[str, Any]) -> bool:
        try:
            return bool(still(candidate))
        except Exception:
            return False
    progress = True
    while progress and budget > 0:
        progress = False
        for candidate in _smaller(case, keys):
            budget -= 1
            if holds(candidate):
                case, progress = candidate, True
                break
            if budget <= 0:
                break
    return case


def _smaller(case: dict[str, Any], keys: Sequence[str]) -> Iterator[dict[str, Any]]:
    """Each copy of the case with one member or item removed from one of its parts, outer first."""
    for key in keys:
        for path in _container_paths(case[key]):
            container = _at(case[key], path)
            for member in (list(container) if type(container) is dict else range(len(container))):
                part = copy.deepcopy(case[key])
                target = _at(part, path)
                del target[member]
                yield {**case, key: part}


def _container_paths(value: Any) -> list[tuple[Any, ...]]:
    paths, queue = [], [((), value)]
    while queue:
        path, node = queue.pop(0)
        if type(node) in (dict, list) and node:
            paths.append(path)
            members = node.items() if type(node) is dict else enumerate(node)
            queue += [(path + (member,), child) for member, child in members]
    return paths


def _at(value: Any, path: Sequence[Any]) -> Any:
    for member in path:
        value = value[member]
    return value


# ============================================================================================
# 9. The official suite
# ============================================================================================
# JSON-Schema-Test-Suite's draft2020-12 files, read from a folder or straight from the jsonschema
# sdist (which ships the suite under json/tests/): for each group whose schema compiles, every
# test the suite calls invalid must be refused. Groups that reach for a remote $ref are skipped.


def read_suite(path: Path) -> list[tuple[str, Any]]:
    """(file name under draft2020-12/, its decoded groups), in name order."""
    files: list[tuple[str, bytes]] = []
    if path.is_dir():
        files = [(item.relative_to(path).as_posix(), item.read_bytes()) for item in sorted(path.rglob("*.json"))]
    else:
        with tarfile.open(path, "r:gz") as archive:
            for member in archive.getmembers():
                if member.isfile() and SUITE_FOLDER in member.name and member.name.endswith(".json"):
                    handle = archive.extractfile(member)
                    if handle is not None:
                        with handle:
                            files.append((member.name.split(SUITE_FOLDER, 1)[1], handle.read()))
    return sorted((name, json.loads(data)) for name, data in files)


def has_remote_ref(schema: Any) -> bool:
    """Whether a reference anywhere in the schema leaves the document (does not start with #)."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if type(node) is dict:
            if any(type(node.get(keyword)) is str and not node[keyword].startswith("#") for keyword in REF_KEYWORDS):
                return True
            stack.extend(node.values())
        elif type(node) is list:
            stack.extend(node)
    return False


_TYPED: Final[Mapping[str, Callable[[Any], bool]]] = MappingProxyType({
    "string": lambda value: type(value) is str, "number": lambda value: type(value) in (int, float),
    "boolean": lambda value: type(value) is bool, "array": lambda value: type(value) is list,
    "object": lambda value: type(value) is dict,
})


def _suite_counts() -> dict[str, Any]:
    return {"groups": 0, "compiled": 0, "sound": 0, "tests": 0, "invalid_refused": 0, "unsound": 0,
            "narrowed": 0, "raised": 0, "refused": {}}


def run_suite(files: Sequence[tuple[str, Any]], oracle: Oracle | None = None, *,
              compile_schema: Callable[..., Any] = td.compile_schema) -> dict[str, Any]:
    """The suite's groups put to the compiler: counts, and every unsound test (the first few whole).

    Most of the suite's schemas name no type ({"format": "date"}, {"maxLength": 2}), which the
    subset refuses. So each such group is also run typed: for each JSON type T its tests hold data
    of, the schema with "type": T against those tests alone, whose verdicts T cannot change.
    """
    counts = {"files": len(files), "groups": 0, "skipped_remote_ref": 0, **_suite_counts()}
    typed = _suite_counts()
    findings: list[dict[str, Any]] = []
    agreement = {"tests": 0, "looser": 0, "stricter": 0, "raised": 0}
    disagreements: dict[str, dict[str, int]] = {}
    for name, groups in files:
        for group in groups:
            if has_remote_ref(group["schema"]):
                counts["groups"] += 1
                counts["skipped_remote_ref"] += 1
                continue
            if oracle is not None:
                _agree(oracle, name, group, agreement, disagreements)
            where = {"check": "suite", "file": name, "group": group["description"]}
            _suite_group(compile_schema, group["schema"], group["tests"], counts, findings, where)
            schema = group["schema"]
            if type(schema) is not dict or "type" in schema:
                continue
            for kind, holds in _TYPED.items():
                tests = [test for test in group["tests"] if holds(test["data"])]
                if tests:
                    _suite_group(compile_schema, {**schema, "type": kind}, tests, typed, findings,
                                 {**where, "typed": kind})
    report = {"format": SUITE_REPORT_FORMAT, **counts, "typed": typed}
    if oracle is not None:
        report["oracle_agreement"] = agreement
        report["oracle_disagreements"] = dict(sorted(disagreements.items()))
    report["findings_total"] = len(findings)
    report["findings"] = findings[:MAX_FINDINGS]
    return report


def _suite_group(compile_schema: Callable[..., Any], schema: Any, tests: Sequence[Mapping[str, Any]],
                 counts: dict[str, Any], findings: list[dict[str, Any]], where: Mapping[str, Any]) -> None:
    counts["groups"] += 1
    tally = Tally()
    compiled = compile_or_refuse(compile_schema, schema, tally, where)
    for code, number in tally.refused.items():
        counts["refused"][code] = counts["refused"].get(code, 0) + number
    counts["refused"] = dict(sorted(counts["refused"].items()))
    findings += tally.findings
    counts["raised"] += tally.raised
    if compiled is None:
        return
    counts["compiled"] += 1
    before = counts["unsound"] + counts["raised"]
    for test in tests:
        _suite_test(compiled, schema, test, counts, findings, where)
    counts["sound"] += int(before == counts["unsound"] + counts["raised"])


def _suite_test(compiled: Any, schema: Any, test: Mapping[str, Any], counts: dict[str, Any],
                findings: list[dict[str, Any]], where: Mapping[str, Any]) -> None:
    counts["tests"] += 1
    try:
        admitted = compiled.admits(test["data"])
    except Exception as error:
        counts["raised"] += 1
        findings.append({**where, "kind": "check-raised", "test": test["description"], "error": _error_name(error)})
        return
    if admitted and not test["valid"]:
        counts["unsound"] += 1
        findings.append({**where, "kind": "unsound", "test": test["description"], "schema": schema,
                         "value": test["data"]})
    elif not admitted and test["valid"]:
        counts["narrowed"] += 1
    elif not admitted:
        counts["invalid_refused"] += 1


def _agree(oracle: Oracle, name: str, group: Mapping[str, Any], agreement: dict[str, int],
           disagreements: dict[str, dict[str, int]]) -> None:
    """Where the oracle's answer is not the suite's: looser (it admits what the suite refuses: an
    unsound check could pass there unseen) or stricter (a sound check could be called unsound)."""
    for test in group["tests"]:
        agreement["tests"] += 1
        try:
            valid = oracle.valid(group["schema"], test["data"])
        except Exception:
            agreement["raised"] += 1
            disagreements.setdefault(name, {}).setdefault("raised", 0)
            disagreements[name]["raised"] += 1
            continue
        if valid != test["valid"]:
            direction = "looser" if valid else "stricter"
            agreement[direction] += 1
            disagreements.setdefault(name, {}).setdefault(direction, 0)
            disagreements[name][direction] += 1


# ============================================================================================
# 10. Format readers
# ============================================================================================
# A "uri" or an "email" the core admits must be one every reader of that format takes. Seeded
# candidates go to the compiled check of {"type": "string", "format": NAME} and to the oracle and
# every reader; an admitted value that any of them refuses is a finding that names the value and
# the reader. A reader in Node is one subprocess for each batch: JSON in on stdin, verdicts out.
#
# uri: the oracle (RFC 3986, as the other formats), and the two readers of the WHATWG URL standard
# that tools meet most: Pydantic's AnyUrl (pydantic-core, Rust's url crate) and Node's URL (ada, as
# in browsers, and under zod's url()). Pydantic is asked in both of its modes: lax, a model's
# default, and strict, which also refuses what the url crate calls a syntax violation (no "//"
# after "file:", a Windows drive letter after a file URL's host); the check refuses both shapes,
# so strict mode holds it as the others do.
#
# email: the oracle (jsonschema asks for an "@" and nothing more), Pydantic's EmailStr
# (email-validator, without its DNS look-up), zod's email() in Node, and HTML's form field, read
# with the regex zod ships as z.regexes.html5Email (the one the HTML standard gives), in zod too.

URI_REPORT_FORMAT: Final = "differential-uri-report-v1"
EMAIL_REPORT_FORMAT: Final = "differential-email-report-v1"
DEFAULT_URIS: Final = 5_000
URI_SCHEMA: Final = MappingProxyType({"type": "string", "format": "uri"})
EMAIL_SCHEMA: Final = MappingProxyType({"type": "string", "format": "email"})
NODE_TIMEOUT: Final = 300  # seconds for one batch: a hung node fails the run rather than the machine
# Where ci.sh installs zod with npm: beside the virtual environment's Python, outside the checkout.
ZOD_FOLDER: Final = Path(sys.prefix) / "zod"
# Each script reads a JSON list of texts on stdin and writes {"version", "verdicts"}; the zod ones
# take the folder zod is installed in as their one argument.
_NODE_READ: Final = """
let input = "";
process.stdin.setEncoding("utf8");
process.stdin.on("data", (chunk) => { input += chunk; });
process.stdin.on("end", () => {
  const verdicts = JSON.parse(input).map((text) => { try { return accept(text); } catch { return false; } });
  process.stdout.write(JSON.stringify({ version, verdicts }));
});
"""
_NODE_URL_SCRIPT: Final = """
const version = process.version;
const accept = (text) => { new URL(text); return true; };
""" + _NODE_READ
_ZOD_SCRIPT: Final = """
const path = require("path");
const folder = path.join(process.argv[1], "node_modules", "zod");
const z = require(folder);
const version = "zod " + require(path.join(folder, "package.json")).version + ", node " + process.version;
const schema = process.argv[2] === "html" ? z.email({ pattern: z.regexes.html5Email }) : z.email();
const accept = (text) => schema.safeParse(text).success;
""" + _NODE_READ


class ReaderUnavailable(Exception):
    """A format's reader (pydantic, email-validator, node or zod) is not installed or does not answer."""


@dataclass(frozen=True, slots=True)
class FormatReader:
    """A reader of one format: its name, its version, and its verdict on each of a batch of texts."""

    name: str
    version: str
    read: Callable[[Sequence[str]], list[bool]]


def _pydantic_read(adapter: Any, error: type[BaseException], *, strict: bool) -> Callable[[Sequence[str]], list[bool]]:
    def read(texts: Sequence[str]) -> list[bool]:
        verdicts = []
        for text in texts:
            try:
                adapter.validate_python(text, strict=strict)
            except error:
                verdicts.append(False)
            else:
                verdicts.append(True)
        return verdicts
    return read


def pydantic_reader(*, strict: bool = False) -> FormatReader:
    """Pydantic's AnyUrl (any scheme; HttpUrl would add a scheme list and a length the format lacks),
    as a model reads it by default (lax), or in strict mode."""
    try:
        from importlib import metadata
        from pydantic import AnyUrl, TypeAdapter, ValidationError
    except ImportError as missing:
        raise ReaderUnavailable(f"pydantic is not installed ({missing})") from None
    read = _pydantic_read(TypeAdapter(AnyUrl), ValidationError, strict=strict)
    version = f"pydantic {metadata.version('pydantic')}, pydantic-core {metadata.version('pydantic-core')}"
    return FormatReader("pydantic AnyUrl strict" if strict else "pydantic AnyUrl", version, read)


def pydantic_email_reader() -> FormatReader:
    """Pydantic's EmailStr: email-validator's validate_email without the DNS look-up (a model's
    strict mode reads it the same way)."""
    try:
        from importlib import metadata
        import email_validator  # noqa: F401  (pydantic imports it on first use, and says less when it is missing)
        from pydantic import EmailStr, TypeAdapter, ValidationError
    except ImportError as missing:
        raise ReaderUnavailable(f"pydantic or email-validator is not installed ({missing})") from None
    read = _pydantic_read(TypeAdapter(EmailStr), ValidationError, strict=False)
    version = f"pydantic {metadata.version('pydantic')}, email-validator {metadata.version('email-validator')}"
    return FormatReader("pydantic EmailStr", version, read)


def _node_run(name: str, command: Sequence[str]) -> Callable[[Sequence[str]], dict[str, Any]]:
    """One node subprocess for each batch: the texts in as JSON, {"version", "verdicts"} out."""
    def run(texts: Sequence[str]) -> dict[str, Any]:
        try:
            done = subprocess.run(list(command), input=json_text(list(texts)).encode("ascii"),
                                  capture_output=True, timeout=NODE_TIMEOUT, check=False)
            answer = json.loads(done.stdout) if done.returncode == 0 else None
        except (OSError, ValueError, subprocess.SubprocessError) as error:
            raise ReaderUnavailable(f"{name} did not answer ({type(error).__name__})") from None
        if type(answer) is not dict or type(answer.get("verdicts")) is not list \
                or len(answer["verdicts"]) != len(texts) or not all(type(v) is bool for v in answer["verdicts"]):
            raise ReaderUnavailable(f"{name} did not answer (exit {done.returncode})")
        return answer
    return run


def node_reader(node: str | None = None) -> FormatReader:
    """Node's WHATWG URL parser, ``new URL(text)``, in one subprocess for each batch."""
    path = node if node is not None else shutil.which("node")
    if path is None:
        raise ReaderUnavailable("node is not on PATH")
    run = _node_run("node", [path, "-e", _NODE_URL_SCRIPT])
    version = run(["http://example.com"])["version"]
    return FormatReader("node URL", str(version), lambda texts: run(texts)["verdicts"])


def zod_reader(*, html: bool = False, node: str | None = None, zod: Path | None = None) -> FormatReader:
    """zod's ``z.email()`` in node (or, with ``html``, ``z.email({pattern: z.regexes.html5Email})``,
    HTML's form field), zod read from ``zod`` (default ZOD_FOLDER), one subprocess for each batch."""
    path = node if node is not None else shutil.which("node")
    if path is None:
        raise ReaderUnavailable("node is not on PATH")
    folder = ZOD_FOLDER if zod is None else zod
    if not (folder / "node_modules" / "zod" / "package.json").is_file():
        raise ReaderUnavailable(f"zod is not installed in {folder} (bash differential/ci.sh installs it)")
    run = _node_run("zod", [path, "-e", _ZOD_SCRIPT, str(folder.resolve()), "html" if html else "email"])
    version = run(["a@example.com"])["version"]
    return FormatReader("zod html5Email" if html else "zod email", str(version), lambda texts: run(texts)["verdicts"])


def uri_candidates(seed: int, count: int) -> list[str]:
    """The fixed samples, then ``count`` seeded compositions; each text once, in that order."""
    rng = random.Random(f"{seed}:uri")
    return list(dict.fromkeys([*FORMAT_SAMPLES["uri"], *(uri_candidate(rng) for _ in range(count))]))


def email_candidates(seed: int, count: int) -> list[str]:
    """The fixed samples, then ``count`` seeded compositions; each text once, in that order."""
    rng = random.Random(f"{seed}:email")
    return list(dict.fromkeys([*FORMAT_SAMPLES["email"], *(email_candidate(rng) for _ in range(count))]))


def uri_form(text: str) -> str:
    """What an admitted URI's authority holds: "no-authority", "empty-host", "ipv6", "ipv4", "name"."""
    rest = text.split(":", 1)[1]
    if not rest.startswith("//"):
        return "no-authority"
    authority = re.split(r"[/?#]", rest[2:], maxsplit=1)[0]
    host = authority if authority.startswith("[") else authority.rsplit(":", 1)[0] if ":" in authority else authority
    if not host:
        return "empty-host"
    if host.startswith("["):
        return "ipv6"
    return "ipv4" if re.fullmatch(r"[0-9.]+", host) else "name"


def email_form(text: str) -> str:
    """What an admitted address's local part holds: "symbols" (any of _ ' + -), else "dotted" (two
    or more runs), else "plain"."""
    local = text.rpartition("@")[0]
    if any(char in local for char in "_'+-"):
        return "symbols"
    return "dotted" if "." in local else "plain"


def run_readers(report_format: str, schema: Mapping[str, Any], texts: Sequence[str], seed: int, oracle: Oracle,
                readers: Sequence[FormatReader], form: Callable[[str], str], *,
                compile_schema: Callable[..., Any] = td.compile_schema) -> dict[str, Any]:
    """The report of one seeded run of a format's candidates against its compiled check and every reader."""
    schema = dict(schema)
    compiled = compile_schema(schema, require_object=False)
    findings: list[dict[str, Any]] = []
    admitted: list[bool] = []
    for text in texts:
        try:
            admitted.append(bool(compiled.admits(text)))
        except Exception as error:
            admitted.append(False)
            findings.append({"kind": "check-raised", "error": _error_name(error), "value": text})
    verdicts: dict[str, list[bool]] = {"oracle": []}
    for text in texts:
        try:
            verdicts["oracle"].append(oracle.valid(schema, text))
        except Exception as error:
            verdicts["oracle"].append(False)
            findings.append({"kind": "oracle-raised", "error": _error_name(error), "value": text})
    for reader in readers:
        try:
            verdicts[reader.name] = [bool(verdict) for verdict in reader.read(texts)]
        except Exception as error:
            verdicts[reader.name] = [True] * len(texts)
            findings.append({"kind": "reader-raised", "reader": reader.name, "error": _error_name(error)})
    counts = {name: {"refuses_admitted": 0, "admits_refused": 0} for name in verdicts}
    forms: dict[str, int] = {}
    for index, text in enumerate(texts):
        if admitted[index]:
            forms[form(text)] = forms.get(form(text), 0) + 1
        for name, answers in verdicts.items():
            if admitted[index] and not answers[index]:
                counts[name]["refuses_admitted"] += 1
                kind = "unsound" if name == "oracle" else "reader-refuses"
                findings.append({"kind": kind, "reader": name, "value": text})
            elif answers[index] and not admitted[index]:
                counts[name]["admits_refused"] += 1
    return {
        "format": report_format, "seed": seed, "oracle": oracle.versions,
        "readers": {reader.name: reader.version for reader in readers},
        "values": len(texts), "admitted": sum(admitted), "admitted_forms": dict(sorted(forms.items())),
        "verdicts": counts,
        "findings_total": len(findings),
        "findings": findings[:MAX_READER_FINDINGS],
    }


def run_uris(seed: int, count: int, oracle: Oracle, readers: Sequence[FormatReader], *,
             compile_schema: Callable[..., Any] = td.compile_schema) -> dict[str, Any]:
    """The report of one seeded run of URI candidates against the compiled check and every reader."""
    return run_readers(URI_REPORT_FORMAT, URI_SCHEMA, uri_candidates(seed, count), seed, oracle, readers, uri_form,
                       compile_schema=compile_schema)


def run_emails(seed: int, count: int, oracle: Oracle, readers: Sequence[FormatReader], *,
               compile_schema: Callable[..., Any] = td.compile_schema) -> dict[str, Any]:
    """The report of one seeded run of email candidates against the compiled check and every reader."""
    return run_readers(EMAIL_REPORT_FORMAT, EMAIL_SCHEMA, email_candidates(seed, count), seed, oracle, readers,
                       email_form, compile_schema=compile_schema)


def load_uri_readers(node: str | None = None) -> list[FormatReader]:
    """The readers (Pydantic lax and strict, Node), or ReaderUnavailable naming the one missing."""
    return [pydantic_reader(), pydantic_reader(strict=True), node_reader(node)]


def load_email_readers(node: str | None = None, zod: Path | None = None) -> list[FormatReader]:
    """The readers (Pydantic's EmailStr, zod's email() and HTML's form field), or ReaderUnavailable
    naming the one missing."""
    return [pydantic_email_reader(), zod_reader(node=node, zod=zod), zod_reader(html=True, node=node, zod=zod)]


# ============================================================================================
# 11. CLI
# ============================================================================================


def render(report: Mapping[str, Any]) -> str:
    """The report as JSON: a member a line, and a line for each member of a member (each finding)."""
    lines = []
    for key, value in report.items():
        if type(value) in (dict, list) and value:
            members = value.items() if type(value) is dict else ((None, item) for item in value)
            inner = ",\n".join("    " + (json_text(name) + ": " if name is not None else "") + json_text(item)
                               for name, item in members)
            opening, closing = ("{", "}") if type(value) is dict else ("[", "]")
            lines.append(f"  {json_text(key)}: {opening}\n{inner}\n  {closing}")
        else:
            lines.append(f"  {json_text(key)}: {json_text(value)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


def _count_argument(text: str) -> int:
    if not text.isascii() or not text.isdigit() or len(text) > 9:
        raise argparse.ArgumentTypeError("a count of ASCII digits")
    return int(text)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="differential.py", description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=_count_argument, default=0)
    parser.add_argument("--schemas", type=_count_argument, default=DEFAULT_SCHEMAS)
    parser.add_argument("--overlays", type=_count_argument, default=None,
                        help="host overlays to try (default: half the schemas)")
    parser.add_argument("--suite", type=Path, default=None,
                        help="a draft2020-12 folder of the official suite, or the jsonschema sdist (.tar.gz)")
    parser.add_argument("--uris", type=_count_argument, default=None,
                        help="put this many seeded URIs (beside the fixed samples) to the uri check and its readers")
    parser.add_argument("--emails", type=_count_argument, default=None,
                        help="put this many seeded addresses (beside the fixed samples) to the email check "
                             "and its readers")
    parser.add_argument("--node", default=None,
                        help="the node executable for --uris and --emails (default: node on PATH)")
    parser.add_argument("--zod", type=Path, default=None,
                        help=f"the folder npm installed zod in, for --emails (default: {ZOD_FOLDER})")
    args = parser.parse_args(argv)
    if max(args.schemas, args.overlays or 0, args.uris or 0, args.emails or 0) > MAX_SCHEMAS:
        parser.error(f"at most {MAX_SCHEMAS} schemas, overlays, URIs or addresses")
    if args.uris is not None and args.emails is not None:
        parser.error("--uris and --emails are separate runs")
    oracle = load_oracle()
    if args.suite is not None:
        if not args.suite.exists():
            parser.error("the suite path does not exist")
        report = run_suite(read_suite(args.suite), oracle)
        sys.stdout.write(render(report))
        return 1 if report["findings_total"] else 0
    if oracle is None:
        sys.stdout.write("the oracle needs jsonschema (with rfc3339-validator and rfc3986-validator) and regress: "
                         "run bash differential/ci.sh\n")
        return 2
    if args.uris is not None:
        try:
            readers = load_uri_readers(args.node)
        except ReaderUnavailable as missing:
            sys.stdout.write(f"the URI readers need pydantic and node: {missing}\n")
            return 2
        report = run_uris(args.seed, args.uris, oracle, readers)
        sys.stdout.write(render(report))
        return 1 if report["findings_total"] else 0
    if args.emails is not None:
        try:
            readers = load_email_readers(args.node, args.zod)
        except ReaderUnavailable as missing:
            sys.stdout.write(f"the email readers need pydantic with email-validator, node and zod: {missing}\n")
            return 2
        report = run_emails(args.seed, args.emails, oracle, readers)
        sys.stdout.write(render(report))
        return 1 if report["findings_total"] else 0
    overlays = args.schemas // 2 if args.overlays is None else args.overlays
    report = run_seed(args.seed, args.schemas, overlays, oracle)
    sys.stdout.write(render(report))
    return 1 if report["findings_total"] else 0


if __name__ == "__main__":
    sys.exit(main())
