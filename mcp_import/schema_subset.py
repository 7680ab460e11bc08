"""An exact subset of JSON Schema, compiled into exact checks; everything else refused by name.

A tool's input schema comes from a server the host does not control. This module turns the part
of JSON Schema (2020-12 and draft-07 spellings) whose meaning it can hold exactly into a closed
table of rules, and refuses everything else with a ``SCHEMA_*`` code. It never loosens: what the
compiled check admits, the server's own schema admits too (a closed object where the schema left
``additionalProperties`` out, a host bound where the schema gave none, are narrowings).

What this module never does:
- recurse over untrusted depth: the limits are checked by one iterative walk before compiling,
  the compiler is a work list, the value check a stack;
- follow a remote ``$ref`` or a recursive one, or expand a shared definition more than once (a
  schema of 30 definitions each used twice by the next compiles in linear time);
- run a pattern it cannot prove linear: a pattern is parsed into a small portable subset and
  re-emitted, ASCII only, for ``re.fullmatch``;
- put text from a schema or a value into a message or an ``at`` path: ``at`` is built from known
  keywords and indices (``schema.properties[1].items``, ``value.properties[0]``).

Sections, in the order data flows:
    1. Limits and constants      5. The compiler
    2. Errors                    6. Compiled schemas: check, admits, emit
    3. Rules                     7. Host narrowing (overlays)
    4. Patterns
"""
from __future__ import annotations

import re
import sys
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final, Mapping, Sequence

_REPOSITORY: Final = str(Path(__file__).resolve().parent.parent)
if _REPOSITORY not in sys.path:
    sys.path.insert(0, _REPOSITORY)

import tool_dispatcher  # noqa: E402  (the boundary whose contract language this grows into)
from tool_dispatcher import MAX_SAFE_INTEGER, CatalogError, error_specs  # noqa: E402

# ============================================================================================
# 1. Limits and constants
# ============================================================================================
# Checked before compiling, on the raw schema, by one iterative walk that stops at the first
# limit crossed: a hostile schema costs at most one pass over what the limits let through.

MAX_SCHEMA_BYTES: Final = 32_768  # canonical bytes of one tool schema; the largest seen in a census is ~6 KiB
MAX_SCHEMA_DEPTH: Final = 32  # JSON containers deep; one schema level is two (properties, then the field)
MAX_SCHEMA_NODES: Final = 4_096  # JSON values in one schema, annotations included
MAX_PROPERTIES: Final = 64  # properties of one object schema
MAX_DEFINITIONS: Final = 64  # entries of $defs / definitions
MAX_ENUM: Final = 256  # choices of one enum
MAX_PATTERN_LENGTH: Final = 256  # characters of one pattern, before it is parsed
MAX_NAME_LENGTH: Final = 64  # a property or definition name
MAX_QUANTIFIER: Final = 1_000  # the largest count a pattern's {m,n} may name
MAX_BRANCHES: Final = 32  # alternatives at the pattern's one alternation site

# Host bounds: where a schema is silent, the host bounds it, and the compiled form records it.
DEFAULT_MAX_LENGTH: Final = 4_096  # characters of a string with no maxLength (also the ceiling)
DEFAULT_MAX_ITEMS: Final = 256  # items of an array with no maxItems (also the ceiling)

SCHEMA_ROOT: Final = "schema"
VALUE_ROOT: Final = "value"

# Keywords that say nothing about which values are valid: allowed anywhere and ignored.
ANNOTATIONS: Final = frozenset({
    "title", "description", "examples", "default", "$comment", "deprecated", "readOnly", "writeOnly",
    "$schema",
})
ROOT_ONLY: Final = frozenset({"$id", "$defs", "definitions"})  # a nested $id would move what "#" means

# Keywords refused by name, each with the code that says why.
REFUSED_KEYWORDS: Final[Mapping[str, str]] = MappingProxyType({
    "format": "SCHEMA_FORMAT",
    "allOf": "SCHEMA_COMBINATOR", "oneOf": "SCHEMA_COMBINATOR", "not": "SCHEMA_COMBINATOR",
    "if": "SCHEMA_CONDITIONAL", "then": "SCHEMA_CONDITIONAL", "else": "SCHEMA_CONDITIONAL",
    "dependentSchemas": "SCHEMA_CONDITIONAL", "dependentRequired": "SCHEMA_CONDITIONAL",
    "dependencies": "SCHEMA_CONDITIONAL",
    "patternProperties": "SCHEMA_OPEN_OBJECT", "propertyNames": "SCHEMA_OPEN_OBJECT",
    "unevaluatedProperties": "SCHEMA_OPEN_OBJECT",
    "prefixItems": "SCHEMA_TUPLE", "additionalItems": "SCHEMA_TUPLE", "contains": "SCHEMA_TUPLE",
    "minContains": "SCHEMA_TUPLE", "maxContains": "SCHEMA_TUPLE", "unevaluatedItems": "SCHEMA_TUPLE",
    "$dynamicRef": "SCHEMA_REF_REMOTE", "$recursiveRef": "SCHEMA_REF_REMOTE",
    "$dynamicAnchor": "SCHEMA_REF_REMOTE", "$recursiveAnchor": "SCHEMA_REF_REMOTE", "$anchor": "SCHEMA_REF_REMOTE",
})

# The constraining keywords each type understands (beyond "type" itself).
TYPE_KEYWORDS: Final[Mapping[str, frozenset[str]]] = MappingProxyType({
    "string": frozenset({"enum", "const", "minLength", "maxLength", "pattern"}),
    "integer": frozenset({"enum", "const", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                          "multipleOf"}),
    "boolean": frozenset({"enum", "const"}),
    "object": frozenset({"properties", "required", "additionalProperties"}),
    "array": frozenset({"items", "minItems", "maxItems", "uniqueItems"}),
})
SCALAR_KINDS: Final[Mapping[type, str]] = MappingProxyType({str: "string", int: "integer", bool: "boolean"})
DEFINITION_PREFIXES: Final[Mapping[str, str]] = MappingProxyType({"#/$defs/": "$defs", "#/definitions/": "definitions"})

# ============================================================================================
# 2. Errors
# ============================================================================================

SCHEMA_CATALOG: Final = MappingProxyType({
    **error_specs(
        "schema", False,
        SCHEMA_TOO_LARGE="The schema exceeds its byte limit.",
        SCHEMA_TOO_DEEP="The schema exceeds its nesting limit.",
        SCHEMA_TOO_MANY_NODES="The schema has too many values.",
        SCHEMA_TOO_MANY_PROPERTIES="An object schema has too many properties.",
        SCHEMA_ENUM_TOO_LARGE="An enum has too many choices.",
        SCHEMA_PATTERN_TOO_LONG="A pattern exceeds its length limit.",
        SCHEMA_NOT_PORTABLE="The schema holds a value outside the portable JSON domain.",
        SCHEMA_MALFORMED="A schema keyword has a value of the wrong form.",
        SCHEMA_TYPE="A schema has no single supported type.",
        SCHEMA_NUMBER="A number schema is refused: no floats; a host may narrow it to a bounded integer.",
        SCHEMA_NULL="null is accepted only as a nullable form of another type.",
        SCHEMA_FORMAT="The format keyword is refused: its checks differ between validators.",
        SCHEMA_COMBINATOR="Schema combinators are refused, except the nullable anyOf.",
        SCHEMA_CONDITIONAL="Conditional schemas are refused.",
        SCHEMA_OPEN_OBJECT="An object schema must be closed: additionalProperties absent or false.",
        SCHEMA_TUPLE="Tuple and contains forms of arrays are refused.",
        SCHEMA_ITEMS="An array schema must declare exactly one items schema.",
        SCHEMA_KEYWORD="A schema keyword is unknown or does not apply to its type.",
        SCHEMA_BOUNDS="A bound is not an integer in range, or the bounds admit nothing.",
        SCHEMA_ENUM="An enum or const is empty, repeated, or of another type.",
        SCHEMA_REQUIRED="A required name is repeated or names no declared property.",
        SCHEMA_NAME="A property or definition name is empty or too long.",
        SCHEMA_REF_REMOTE="Only local references into $defs or definitions are followed.",
        SCHEMA_REF_UNKNOWN="A reference names no definition.",
        SCHEMA_REF_RECURSIVE="A recursive reference is refused.",
        SCHEMA_REF_SIBLING="A reference has constraining keywords beside it.",
        SCHEMA_ROOT="The root schema must be an object schema.",
        SCHEMA_PATTERN_UNANCHORED="A pattern must be anchored as a whole string: ^...$.",
        SCHEMA_PATTERN_UNSUPPORTED="A pattern uses a construct outside the portable subset.",
        SCHEMA_PATTERN_NESTED_QUANTIFIER="A pattern repeats a group that holds a quantifier or an alternation.",
        SCHEMA_PATTERN_AMBIGUOUS="A pattern lets a repeated atom overlap what follows it.",
        OVERLAY_WIDENS="The host overlay is not provably narrower than the server's schema.",
        OVERLAY_PATH="The host overlay names no property of the server's schema.",
    ),
})

VALUE_CATALOG: Final = MappingProxyType({
    **error_specs(
        "value", False,
        VALUE_TYPE="A value has the wrong type.",
        VALUE_FIELDS="An object has an unknown or a missing field.",
        VALUE_ENUM="A value is not one of the allowed choices.",
        VALUE_LENGTH="A string's length is out of its bounds.",
        VALUE_PATTERN="A string does not match its pattern.",
        VALUE_RANGE="An integer is out of its bounds or not a multiple of its step.",
        VALUE_ITEMS="An array has too few or too many items, or repeats one.",
        VALUE_NOT_PORTABLE="A value is outside the portable JSON domain.",
    ),
})


class SchemaRefusal(CatalogError):
    """A schema (or a host overlay) the compiler will not turn into a check; ``at`` says where."""

    CATALOG = SCHEMA_CATALOG


class ValueRefusal(CatalogError):
    """A value the compiled check refuses; ``at`` names the place by schema indices only."""

    CATALOG = VALUE_CATALOG


# ============================================================================================
# 3. Rules
# ============================================================================================
# A compiled schema is a flat tuple of frozen rules; a container names its children by index,
# so a shared definition is one rule however often it is used.


@dataclass(frozen=True, slots=True)
class StringRule:
    min_length: int
    max_length: int
    max_length_from: str  # "schema" or "host": who set the upper bound
    choices: frozenset[str] | None
    pattern: str | None  # the schema's own pattern text, kept for the emitted schema
    regex: re.Pattern[str] | None = field(compare=False)
    description: str | None = field(compare=False)


@dataclass(frozen=True, slots=True)
class IntegerRule:
    minimum: int
    maximum: int
    multiple_of: int | None
    choices: frozenset[int] | None
    description: str | None = field(compare=False)


@dataclass(frozen=True, slots=True)
class BooleanRule:
    choices: frozenset[bool] | None
    description: str | None = field(compare=False)


@dataclass(frozen=True, slots=True)
class ObjectRule:
    properties: tuple[tuple[str, int], ...]  # (name, rule index) in declaration order
    required: frozenset[str]
    description: str | None = field(compare=False)
    index: Mapping[str, tuple[int, int]] = field(init=False, compare=False, repr=False)  # name -> (position, rule)

    def __post_init__(self) -> None:
        object.__setattr__(self, "index", MappingProxyType(
            {name: (position, rule) for position, (name, rule) in enumerate(self.properties)}))


@dataclass(frozen=True, slots=True)
class ArrayRule:
    items: int
    min_items: int
    max_items: int
    max_items_from: str  # "schema" or "host"
    unique: bool
    description: str | None = field(compare=False)


@dataclass(frozen=True, slots=True)
class NullableRule:
    inner: int
    description: str | None = field(compare=False)


Rule = StringRule | IntegerRule | BooleanRule | ObjectRule | ArrayRule | NullableRule
_SCALAR_RULES: Final = (StringRule, IntegerRule, BooleanRule)

# ============================================================================================
# 4. Patterns
# ============================================================================================
# ECMA-262 (what JSON Schema means) and Python's re agree exactly on this subset, because every
# atom is a set of ASCII characters: no '.', no negated class, no \w \s \b \D, no non-ASCII literal
# (ECMA counts UTF-16 code units, Python code points), no lookaround, no backreference, no lazy
# quantifier. The pattern is re-emitted with every character as \xHH, so Python never reads a
# construct the parser did not mean (and never warns about "[[" or "--" in a class).
#
# Linear time: at most one alternation site (the top level, or one group); groups do not nest;
# a group repeated more than once holds neither a quantifier nor an alternation; a quantified
# group cannot match the empty text; and a repeated atom never overlaps the first characters of
# what may follow it, so a backtracking engine never has two ways to split the text between them.

_SYNTAX: Final = frozenset("^$\\.*+?()[]{}|/-")  # what an escape may name
_SPECIAL: Final = frozenset("^$\\.*+?()[]{}|")  # never a literal outside a class
_DIGITS: Final = frozenset("0123456789")
_PRINTABLE: Final = frozenset(chr(code) for code in range(0x20, 0x7F))
_QUANTIFIER: Final = re.compile(r"\{([0-9]{1,4})(,([0-9]{0,4}))?\}")


@dataclass(frozen=True, slots=True)
class _Item:
    chars: frozenset[str] | None  # an atom's characters; None for a group
    branches: tuple[tuple[_Item, ...], ...]  # a group's alternatives
    low: int
    high: int | None  # None: unbounded

    @property
    def optional(self) -> bool:
        return self.low == 0

    @property
    def variable(self) -> bool:
        return self.high != self.low


class _PatternParser:
    """One pass over an anchored pattern; raises SchemaRefusal with the pattern's `at`."""

    def __init__(self, text: str, at: str) -> None:
        self.text = text
        self.at = at
        self.position = 0
        self.alternations = 0

    def refuse(self, code: str = "SCHEMA_PATTERN_UNSUPPORTED") -> SchemaRefusal:
        return SchemaRefusal(code, self.at)

    def peek(self) -> str:
        return self.text[self.position] if self.position < len(self.text) else ""

    def take(self) -> str:
        char = self.peek()
        self.position += 1
        return char

    def parse(self) -> tuple[tuple[_Item, ...], ...]:
        """The top-level branches, each anchored ^...$ on its own."""
        branches = []
        while True:
            if self.take() != "^":
                raise self.refuse("SCHEMA_PATTERN_UNANCHORED")
            branches.append(self.sequence(in_group=False))
            if self.take() != "$":
                raise self.refuse("SCHEMA_PATTERN_UNANCHORED")
            if self.position == len(self.text):
                break
            if self.take() != "|":
                raise self.refuse("SCHEMA_PATTERN_UNANCHORED")  # "$" before the end: not a whole-string anchor
        if len(branches) > 1:
            self.count_alternation(len(branches))
        return tuple(branches)

    def count_alternation(self, branches: int) -> None:
        self.alternations += 1
        if self.alternations > 1 or branches > MAX_BRANCHES:
            raise self.refuse()  # one alternation site, of a bounded width

    def sequence(self, *, in_group: bool) -> tuple[_Item, ...]:
        items: list[_Item] = []
        while self.peek() not in ("", "$", "|", ")"):
            items.append(self.quantified(self.atom(in_group=in_group)))
        if self.peek() == "$" and in_group:
            raise self.refuse("SCHEMA_PATTERN_UNANCHORED")
        return tuple(items)

    def atom(self, *, in_group: bool) -> _Item:
        char = self.take()
        if char == "\\":
            return _Item(self.escape(), (), 1, 1)
        if char == "[":
            return _Item(self.char_class(), (), 1, 1)
        if char == "(":
            if in_group:
                raise self.refuse("SCHEMA_PATTERN_NESTED_QUANTIFIER")
            return self.group()
        if char in _SPECIAL or char not in _PRINTABLE:
            raise self.refuse()  # ".", "^" inside, a stray quantifier, "]", "{", a control or non-ASCII char
        return _Item(frozenset(char), (), 1, 1)

    def escape(self) -> frozenset[str]:
        char = self.take()
        if char == "d":
            return _DIGITS
        if char in _SYNTAX:
            return frozenset(char)
        raise self.refuse()  # \w \s \b \D \1 \u0041 ...: not the same meaning in both engines

    def char_class(self) -> frozenset[str]:
        if self.peek() in ("^", "]"):
            raise self.refuse()  # negated (matches non-ASCII, counted differently) or empty
        members: set[str] = set()
        while True:
            char = self.take()
            if char == "]":
                return frozenset(members)
            low = self.class_member(char)
            if self.peek() == "-" and self.text[self.position + 1:self.position + 2] not in ("]", ""):
                self.take()
                high = self.class_member(self.take())
                if len(low) != 1 or len(high) != 1 or min(low) > min(high):
                    raise self.refuse()
                members.update(chr(code) for code in range(ord(min(low)), ord(min(high)) + 1))
            else:
                members.update(low)

    def class_member(self, char: str) -> frozenset[str]:
        if char == "\\":
            return self.escape()
        if char == "" or char == "[" or char not in _PRINTABLE:
            raise self.refuse()
        return frozenset(char)

    def group(self) -> _Item:
        if self.text.startswith("?:", self.position):
            self.position += 2
        elif self.peek() == "?":
            raise self.refuse()  # lookaround, named group, inline flags
        branches = [self.sequence(in_group=True)]
        while self.peek() == "|":
            self.take()
            branches.append(self.sequence(in_group=True))
        if self.take() != ")":
            raise self.refuse()
        if len(branches) > 1:
            self.count_alternation(len(branches))
        return _Item(None, tuple(branches), 1, 1)

    def quantified(self, item: _Item) -> _Item:
        low, high = self.quantifier()
        if (low, high) == (1, 1):
            return item
        if self.peek() in ("?", "+"):
            raise self.refuse()  # lazy or possessive: refused rather than reasoned about
        if item.chars is None and ((high != 1 and _has_choice(item)) or _first_of_group(item)[1]):
            # A repeated group with a choice inside, or a quantified group that can match the empty
            # text (skipped, or entered and empty: two paths each, 2**n for n such groups).
            raise self.refuse("SCHEMA_PATTERN_NESTED_QUANTIFIER")
        return _Item(item.chars, item.branches, low, high)

    def quantifier(self) -> tuple[int, int | None]:
        char = self.peek()
        simple = {"?": (0, 1), "*": (0, None), "+": (1, None)}.get(char)
        if simple is not None:
            self.take()
            return simple
        if char != "{":
            return 1, 1
        found = _QUANTIFIER.match(self.text, self.position)
        if found is None:
            raise self.refuse()
        self.position = found.end()
        low = int(found.group(1))
        high = low if found.group(2) is None else (int(found.group(3)) if found.group(3) else None)
        if low > MAX_QUANTIFIER or (high is not None and (high > MAX_QUANTIFIER or high < low)):
            raise self.refuse()
        return low, high


def _has_choice(group: _Item) -> bool:
    """A group whose repetition could split a text two ways: an alternation or a quantifier inside."""
    return len(group.branches) > 1 or any(item.low != 1 or item.high != 1 for item in group.branches[0])


def _first(items: Sequence[_Item]) -> tuple[frozenset[str], bool]:
    """The characters the sequence may start with, and whether it may match the empty text."""
    chars: set[str] = set()
    for item in items:
        item_chars, empty = (item.chars, False) if item.chars is not None else _first_of_group(item)
        chars.update(item_chars)
        if not (empty or item.optional):
            return frozenset(chars), False
    return frozenset(chars), True


def _first_of_group(group: _Item) -> tuple[frozenset[str], bool]:
    chars: set[str] = set()
    empty = False
    for branch in group.branches:
        branch_chars, branch_empty = _first(branch)
        chars.update(branch_chars)
        empty = empty or branch_empty
    return frozenset(chars), empty


def _check_unambiguous(items: Sequence[_Item], after: frozenset[str], at: str) -> None:
    """No variable-count item may share a character with what can follow it."""
    for position, item in enumerate(items):
        follow, reaches_end = _first(items[position + 1:])
        follow = follow | after if reaches_end else follow
        if item.chars is None:
            for branch in item.branches:
                _check_unambiguous(branch, follow, at)  # groups do not nest: one level only
            if item.variable and _first_of_group(item)[0] & follow:
                raise SchemaRefusal("SCHEMA_PATTERN_AMBIGUOUS", at)
        elif item.variable and item.chars & follow:
            raise SchemaRefusal("SCHEMA_PATTERN_AMBIGUOUS", at)


def _emit_items(items: Sequence[_Item]) -> str:
    parts = []
    for item in items:
        if item.chars is not None:
            body = _emit_chars(item.chars)
        else:
            body = "(?:" + "|".join(_emit_items(branch) for branch in item.branches) + ")"
        parts.append(body + _emit_quantifier(item.low, item.high))
    return "".join(parts)


def _emit_chars(chars: frozenset[str]) -> str:
    codes = sorted(ord(char) for char in chars)
    if len(codes) == 1:
        return f"\\x{codes[0]:02x}"
    runs = []
    start = previous = codes[0]
    for code in codes[1:] + [-1]:
        if code != previous + 1:
            runs.append(f"\\x{start:02x}" if start == previous else f"\\x{start:02x}-\\x{previous:02x}")
            start = code
        previous = code
    return "[" + "".join(runs) + "]"


def _emit_quantifier(low: int, high: int | None) -> str:
    if (low, high) == (1, 1):
        return ""
    return f"{{{low},}}" if high is None else f"{{{low},{high}}}"


def compile_pattern(text: Any, at: str = SCHEMA_ROOT) -> re.Pattern[str]:
    """The Python regex (for fullmatch, ASCII) of an anchored pattern in the portable subset."""
    if type(text) is not str:
        raise SchemaRefusal("SCHEMA_MALFORMED", at)
    if len(text) > MAX_PATTERN_LENGTH:
        raise SchemaRefusal("SCHEMA_PATTERN_TOO_LONG", at)
    branches = _PatternParser(text, at).parse()
    for branch in branches:
        _check_unambiguous(branch, frozenset(), at)
    return re.compile("|".join(f"(?:{_emit_items(branch)})" for branch in branches), re.ASCII)


# ============================================================================================
# 5. The compiler
# ============================================================================================


def prescan(schema: Any, *, max_bytes: int = MAX_SCHEMA_BYTES, max_depth: int = MAX_SCHEMA_DEPTH,
            max_nodes: int = MAX_SCHEMA_NODES) -> None:
    """The limits, checked on the raw value before compiling: one iterative pass, stopping early."""
    stack: list[tuple[Any, int]] = [(schema, 1)]
    nodes = 1
    text = 0  # characters of strings and keys: the canonical size cannot be smaller
    while stack:
        value, depth = stack.pop()
        kind = type(value)
        if kind is dict or kind is list:
            if depth > max_depth:
                raise SchemaRefusal("SCHEMA_TOO_DEEP", SCHEMA_ROOT)
            nodes += len(value)  # counted before a single member is looked at
            if nodes > max_nodes:
                raise SchemaRefusal("SCHEMA_TOO_MANY_NODES", SCHEMA_ROOT)
            members = value.items() if kind is dict else enumerate(value)
            for key, child in members:
                if kind is dict:
                    text += len(key)
                stack.append((child, depth + 1))
        elif kind is str:
            text += len(value)
        elif kind not in (int, float, bool, type(None)):  # floats may sit in annotations; bounds refuse them
            raise SchemaRefusal("SCHEMA_NOT_PORTABLE", SCHEMA_ROOT)
        if text > max_bytes:
            raise SchemaRefusal("SCHEMA_TOO_LARGE", SCHEMA_ROOT)
    try:
        size = len(tool_dispatcher.canonical_json(schema))
    except ValueError:  # a lone surrogate (UnicodeEncodeError), or NaN from a caller without the strict decoder
        raise SchemaRefusal("SCHEMA_NOT_PORTABLE", SCHEMA_ROOT) from None
    if size > max_bytes:
        raise SchemaRefusal("SCHEMA_TOO_LARGE", SCHEMA_ROOT)


@dataclass(frozen=True, slots=True)
class Bounds:
    """The host's bounds where a schema is silent (and their ceilings where it is not)."""

    max_length: int = DEFAULT_MAX_LENGTH
    max_items: int = DEFAULT_MAX_ITEMS


class _Compiler:
    """A work list: each entry compiles one schema node into a preassigned slot of the table."""

    def __init__(self, root: dict[str, Any], bounds: Bounds) -> None:
        self.root = root
        self.bounds = bounds
        self.rules: list[Rule | None] = []
        self.paths: list[str] = []  # where each rule was declared, for the host-bound record
        self.work: deque[tuple[dict[str, Any], str, int]] = deque()  # first in, first out: declaration order
        self.definitions = self.read_definitions()
        self.definition_slots: dict[tuple[str, str], int] = {}
        self.definition_order: list[int] = []

    def read_definitions(self) -> dict[str, tuple[dict[str, Any], list[str]]]:
        found: dict[str, tuple[dict[str, Any], list[str]]] = {}
        for keyword in DEFINITION_PREFIXES.values():
            if keyword not in self.root:
                continue
            table = self.root[keyword]
            if type(table) is not dict:
                raise SchemaRefusal("SCHEMA_MALFORMED", f"{SCHEMA_ROOT}.{keyword}")
            if len(table) > MAX_DEFINITIONS:
                raise SchemaRefusal("SCHEMA_TOO_MANY_PROPERTIES", f"{SCHEMA_ROOT}.{keyword}")
            names = list(table)
            for index, name in enumerate(names):
                _check_name(name, f"{SCHEMA_ROOT}.{keyword}[{index}]")
            found[keyword] = (table, names)
        return found

    def run(self) -> tuple[Rule, ...]:
        self.child(self.root, SCHEMA_ROOT, root=True)  # always slot 0, a bare root $ref too
        while self.work:
            raw, at, slot = self.work.popleft()
            self.rules[slot] = self.compile_node(raw, at, root=slot == 0 and at == SCHEMA_ROOT)
        rules = tuple(self.rules)  # every slot was filled by its own work entry
        _refuse_cycles(rules)
        _check_unique_items(rules)
        return rules

    # -- slots and references ----------------------------------------------------------------

    def slot(self, raw: Any, at: str) -> int:
        self.rules.append(None)
        self.paths.append(at)
        self.work.append((raw, at, len(self.rules) - 1))
        return len(self.rules) - 1

    def child(self, raw: Any, at: str, *, root: bool = False) -> int:
        """The slot of a subschema: a reference's definition (compiled once), or a new slot."""
        if type(raw) is not dict:
            raise SchemaRefusal("SCHEMA_TYPE" if type(raw) is bool else "SCHEMA_MALFORMED", at)
        seen: set[tuple[str, str]] = set()
        while "$ref" in raw:
            _check_keywords(raw, at, allowed=frozenset({"$ref"}), root=root, sibling_code="SCHEMA_REF_SIBLING")
            key, raw, at = self.resolve(raw["$ref"], at)
            if key in self.definition_slots:
                return self.definition_slots[key]
            if key in seen:
                raise SchemaRefusal("SCHEMA_REF_RECURSIVE", at)
            seen.add(key)
            root = False
            if type(raw) is not dict:
                raise SchemaRefusal("SCHEMA_TYPE" if type(raw) is bool else "SCHEMA_MALFORMED", at)
        slot = self.slot(raw, at)
        for key in seen:
            self.definition_slots[key] = slot
        if seen:
            self.definition_order.append(slot)
        return slot

    def resolve(self, ref: Any, at: str) -> tuple[tuple[str, str], Any, str]:
        if type(ref) is not str:
            raise SchemaRefusal("SCHEMA_MALFORMED", at)
        for prefix, keyword in DEFINITION_PREFIXES.items():
            if ref.startswith(prefix):
                name = ref[len(prefix):]
                if any(char in name for char in "/~%") or keyword not in self.definitions:
                    raise SchemaRefusal("SCHEMA_REF_UNKNOWN" if keyword not in self.definitions else
                                        "SCHEMA_REF_REMOTE", at)
                table, names = self.definitions[keyword]
                if name not in table:
                    raise SchemaRefusal("SCHEMA_REF_UNKNOWN", at)
                return (keyword, name), table[name], f"{SCHEMA_ROOT}.{keyword}[{names.index(name)}]"
        raise SchemaRefusal("SCHEMA_REF_REMOTE", at)

    # -- one node -----------------------------------------------------------------------------

    def compile_node(self, raw: dict[str, Any], at: str, *, root: bool) -> Rule:
        description = raw.get("description") if type(raw.get("description")) is str else None
        if "anyOf" in raw:
            _check_keywords(raw, at, allowed=frozenset({"anyOf"}), root=root, sibling_code="SCHEMA_COMBINATOR")
            position = _nullable_branch(raw["anyOf"], at)
            return NullableRule(self.child(raw["anyOf"][position], f"{at}.anyOf[{position}]"), description)
        kind, nullable = _schema_type(raw, at)
        _check_keywords(raw, at, allowed=TYPE_KEYWORDS[kind] | {"type"}, root=root, sibling_code="SCHEMA_KEYWORD")
        if nullable:  # "type": [T, "null"]: the same node, without null, behind a nullable rule
            inner = {key: value for key, value in raw.items() if key != "type" and key not in ROOT_ONLY}
            inner["type"] = kind
            if "enum" in raw or "const" in raw:
                choices = _raw_choices(raw, at)
                if None not in choices:
                    return self.compile_node(inner, at, root=root)  # the enum itself leaves null out
                inner.pop("const", None)
                inner["enum"] = [choice for choice in choices if choice is not None]
                if not inner["enum"]:
                    raise SchemaRefusal("SCHEMA_NULL", at)
            return NullableRule(self.slot(inner, at), description)
        return _TYPE_COMPILERS[kind](self, raw, at, description)

    def compile_string(self, raw: dict[str, Any], at: str, description: str | None) -> StringRule:
        low = _count(raw, "minLength", 0, at)
        declared = _count(raw, "maxLength", None, at)
        high, source = _host_bound(declared, self.bounds.max_length)
        if low > high:
            raise SchemaRefusal("SCHEMA_BOUNDS", f"{at}.minLength")
        choices = _choices(raw, str, at)
        pattern = raw.get("pattern")
        regex = None if "pattern" not in raw else compile_pattern(pattern, f"{at}.pattern")
        return StringRule(low, high, source, choices, pattern, regex, description)

    def compile_integer(self, raw: dict[str, Any], at: str, description: str | None) -> IntegerRule:
        low = max(_bound(raw, "minimum", -MAX_SAFE_INTEGER, 0, at),
                  _bound(raw, "exclusiveMinimum", -MAX_SAFE_INTEGER - 1, 1, at))
        high = min(_bound(raw, "maximum", MAX_SAFE_INTEGER, 0, at),
                   _bound(raw, "exclusiveMaximum", MAX_SAFE_INTEGER + 1, -1, at))
        if low > high:
            raise SchemaRefusal("SCHEMA_BOUNDS", at)
        step = raw.get("multipleOf")
        if step is not None and (type(step) is not int or not 1 <= step <= MAX_SAFE_INTEGER):
            raise SchemaRefusal("SCHEMA_BOUNDS", f"{at}.multipleOf")
        choices = _choices(raw, int, at)
        if choices is not None and any(not -MAX_SAFE_INTEGER <= choice <= MAX_SAFE_INTEGER for choice in choices):
            raise SchemaRefusal("SCHEMA_ENUM", at)
        return IntegerRule(low, high, step, choices, description)

    def compile_boolean(self, raw: dict[str, Any], at: str, description: str | None) -> BooleanRule:
        return BooleanRule(_choices(raw, bool, at), description)

    def compile_object(self, raw: dict[str, Any], at: str, description: str | None) -> ObjectRule:
        if raw.get("additionalProperties", False) is not False:
            raise SchemaRefusal("SCHEMA_OPEN_OBJECT", at)
        declared = raw.get("properties", {})
        if type(declared) is not dict:
            raise SchemaRefusal("SCHEMA_MALFORMED", f"{at}.properties")
        if len(declared) > MAX_PROPERTIES:
            raise SchemaRefusal("SCHEMA_TOO_MANY_PROPERTIES", f"{at}.properties")
        properties = []
        for position, (name, child) in enumerate(declared.items()):
            child_at = f"{at}.properties[{position}]"
            _check_name(name, child_at)
            properties.append((name, self.child(child, child_at)))
        required = raw.get("required", [])
        if (type(required) is not list or any(type(name) is not str or name not in declared for name in required)
                or len(set(required)) != len(required)):
            raise SchemaRefusal("SCHEMA_REQUIRED", f"{at}.required")
        return ObjectRule(tuple(properties), frozenset(required), description)

    def compile_array(self, raw: dict[str, Any], at: str, description: str | None) -> ArrayRule:
        items = raw.get("items")
        if type(items) is list:
            raise SchemaRefusal("SCHEMA_TUPLE", f"{at}.items")
        if type(items) is not dict:
            raise SchemaRefusal("SCHEMA_ITEMS", at)
        low = _count(raw, "minItems", 0, at)
        high, source = _host_bound(_count(raw, "maxItems", None, at), self.bounds.max_items)
        if low > high:
            raise SchemaRefusal("SCHEMA_BOUNDS", f"{at}.minItems")
        unique = raw.get("uniqueItems", False)
        if type(unique) is not bool:
            raise SchemaRefusal("SCHEMA_MALFORMED", f"{at}.uniqueItems")
        return ArrayRule(self.child(items, f"{at}.items"), low, high, source, unique, description)


_TYPE_COMPILERS: Final = MappingProxyType({
    "string": _Compiler.compile_string,
    "integer": _Compiler.compile_integer,
    "boolean": _Compiler.compile_boolean,
    "object": _Compiler.compile_object,
    "array": _Compiler.compile_array,
})


def _check_keywords(raw: dict[str, Any], at: str, *, allowed: frozenset[str], root: bool, sibling_code: str) -> None:
    """Every key is an annotation, allowed here, or refused by name; never named in the message."""
    for key in raw:
        if key in allowed or key in ANNOTATIONS or (root and key in ROOT_ONLY):
            continue
        code = REFUSED_KEYWORDS.get(key)
        if code is None and key == "anyOf":
            code = "SCHEMA_COMBINATOR"
        raise SchemaRefusal(code or (sibling_code if _constrains(key) else "SCHEMA_KEYWORD"), at)


def _constrains(key: str) -> bool:
    return any(key in keywords for keywords in TYPE_KEYWORDS.values()) or key == "type"


def _check_name(name: str, at: str) -> None:
    if not 1 <= len(name) <= MAX_NAME_LENGTH:
        raise SchemaRefusal("SCHEMA_NAME", at)


def _nullable_branch(branches: Any, at: str) -> int:
    """The position of the non-null branch of anyOf [T, {"type": "null"}] (either order)."""
    if type(branches) is not list or len(branches) != 2:
        raise SchemaRefusal("SCHEMA_COMBINATOR", at)
    nulls = [index for index, branch in enumerate(branches) if _is_null_schema(branch)]
    if len(nulls) != 1:
        raise SchemaRefusal("SCHEMA_COMBINATOR", at)
    return 1 - nulls[0]


def _is_null_schema(branch: Any) -> bool:
    return (type(branch) is dict and branch.get("type") == "null" and type(branch["type"]) is str
            and all(key == "type" or key in ANNOTATIONS for key in branch))


def _schema_type(raw: dict[str, Any], at: str) -> tuple[str, bool]:
    """(kind, nullable) from "type", or from the values of an enum/const without one."""
    declared = raw.get("type")
    if declared is None:
        if "enum" not in raw and "const" not in raw:
            raise SchemaRefusal("SCHEMA_TYPE", at)
        values = _raw_choices(raw, at)
        kinds = {SCALAR_KINDS.get(type(value), "") for value in values if value is not None}
        if len(kinds) != 1 or "" in kinds:
            raise SchemaRefusal("SCHEMA_TYPE", at)
        return kinds.pop(), None in values
    names = [declared] if type(declared) is str else declared
    if type(names) is not list or not names or any(type(name) is not str for name in names):
        raise SchemaRefusal("SCHEMA_TYPE", at)
    nullable = "null" in names
    others = [name for name in names if name != "null"]
    if len(others) != 1 or len(names) != len(set(names)):
        code = "SCHEMA_NULL" if nullable and not others else "SCHEMA_TYPE"
        raise SchemaRefusal("SCHEMA_NUMBER" if "number" in others else code, at)
    kind = others[0]
    if kind == "number":
        raise SchemaRefusal("SCHEMA_NUMBER", at)
    if kind not in TYPE_KEYWORDS:
        raise SchemaRefusal("SCHEMA_TYPE", at)
    return kind, nullable


def _raw_choices(raw: dict[str, Any], at: str) -> list[Any]:
    if "const" in raw:
        return [raw["const"]] + (_enum_list(raw, at) if "enum" in raw else [])
    return _enum_list(raw, at)


def _enum_list(raw: dict[str, Any], at: str) -> list[Any]:
    values = raw["enum"]
    if type(values) is not list or not values:
        raise SchemaRefusal("SCHEMA_ENUM", f"{at}.enum")
    if len(values) > MAX_ENUM:
        raise SchemaRefusal("SCHEMA_ENUM_TOO_LARGE", f"{at}.enum")
    return values


def _choices(raw: dict[str, Any], kind: type, at: str) -> frozenset[Any] | None:
    """An enum and a const together mean their intersection; every value of the exact type."""
    if "enum" not in raw and "const" not in raw:
        return None
    enum = _enum_list(raw, at) if "enum" in raw else None
    const = [raw["const"]] if "const" in raw else None
    for values in (enum, const):
        if values is not None and any(type(value) is not kind for value in values):
            raise SchemaRefusal("SCHEMA_ENUM", at)
    if enum is not None and len(set(enum)) != len(enum):
        raise SchemaRefusal("SCHEMA_ENUM", f"{at}.enum")
    chosen = frozenset(enum if enum is not None else const)  # type: ignore[arg-type]
    if const is not None:
        chosen &= frozenset(const)
    if not chosen:
        raise SchemaRefusal("SCHEMA_ENUM", at)
    return chosen


def _count(raw: dict[str, Any], keyword: str, default: int | None, at: str) -> Any:
    if keyword not in raw:
        return default
    value = raw[keyword]
    if type(value) is not int or not 0 <= value <= MAX_SAFE_INTEGER:
        raise SchemaRefusal("SCHEMA_BOUNDS", f"{at}.{keyword}")
    return value


def _host_bound(declared: int | None, ceiling: int) -> tuple[int, str]:
    if declared is None or declared > ceiling:
        return ceiling, "host"
    return declared, "schema"


def _bound(raw: dict[str, Any], keyword: str, default: int, shift: int, at: str) -> int:
    """An inclusive integer bound; an exclusive one moves by one. Floats and bools are refused."""
    if keyword not in raw:
        return default
    value = raw[keyword]
    if type(value) is not int or not -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
        raise SchemaRefusal("SCHEMA_BOUNDS", f"{at}.{keyword}")
    return value + shift


def _children(rule: Rule) -> tuple[int, ...]:
    if type(rule) is ObjectRule:
        return tuple(index for _, index in rule.properties)
    if type(rule) is ArrayRule:
        return (rule.items,)
    if type(rule) is NullableRule:
        return (rule.inner,)
    return ()


def _refuse_cycles(rules: Sequence[Rule]) -> None:
    """An iterative depth-first search over the rule graph: any cycle is a recursive $ref."""
    state = [0] * len(rules)  # 0 unseen, 1 on the path, 2 done
    for start in range(len(rules)):
        if state[start]:
            continue
        stack = [(start, iter(_children(rules[start])))]
        state[start] = 1
        while stack:
            node, pending = stack[-1]
            child = next(pending, None)
            if child is None:
                state[node] = 2
                stack.pop()
            elif state[child] == 1:
                raise SchemaRefusal("SCHEMA_REF_RECURSIVE", SCHEMA_ROOT)
            elif state[child] == 0:
                state[child] = 1
                stack.append((child, iter(_children(rules[child]))))


def _check_unique_items(rules: Sequence[Rule]) -> None:
    """uniqueItems only over scalars (or nullable scalars): their equality is exact and cheap."""
    for rule in rules:
        if type(rule) is ArrayRule and rule.unique:
            items = rules[rule.items]
            if type(items) is NullableRule:
                items = rules[items.inner]
            if not isinstance(items, _SCALAR_RULES):
                raise SchemaRefusal("SCHEMA_KEYWORD", SCHEMA_ROOT)


def compile_schema(schema: Any, *, bounds: Bounds = Bounds(), require_object: bool = True) -> CompiledSchema:
    """Compile an untrusted schema (a decoded JSON value) into an exact check, or raise SchemaRefusal."""
    prescan(schema)
    if type(schema) is not dict:
        raise SchemaRefusal("SCHEMA_ROOT" if require_object else "SCHEMA_MALFORMED", SCHEMA_ROOT)
    compiler = _Compiler(schema, bounds)
    rules = compiler.run()
    if require_object and type(rules[0]) is not ObjectRule:
        raise SchemaRefusal("SCHEMA_ROOT", SCHEMA_ROOT)
    return CompiledSchema(rules, tuple(compiler.definition_order), tool_dispatcher.canonical_sha256(schema),
                          tuple(compiler.paths))


# ============================================================================================
# 6. Compiled schemas: check, admits, emit
# ============================================================================================


@dataclass(frozen=True, slots=True)
class CompiledSchema:
    """The exact check of one schema: rules[0] is the root; shared definitions are shared rules."""

    rules: tuple[Rule, ...]
    definitions: tuple[int, ...]  # slots that were reached through a $ref, in discovery order
    source_sha256: str  # SHA-256 of the canonical JSON of the schema as the server sent it
    paths: tuple[str, ...]  # where each rule was declared in that schema (schema.properties[0]...)

    def check(self, value: Any) -> None:
        """Raise ValueRefusal (code, at) unless the schema admits value exactly; iterative."""
        stack: list[tuple[int, Any, str]] = [(0, value, VALUE_ROOT)]
        while stack:
            index, item, at = stack.pop()
            rule = self.rules[index]
            _VALUE_CHECKS[type(rule)](rule, item, at, stack)

    def admits(self, value: Any) -> bool:
        try:
            self.check(value)
        except ValueRefusal:
            return False
        return True

    def host_bounds(self) -> tuple[str, ...]:
        """Where the host bounded what the schema left open (or bounded above the host's ceiling).

        An enum needs no length bound: its choices are the bound, so it is not listed.
        """
        found = []
        for rule, path in zip(self.rules, self.paths):
            if type(rule) is StringRule and rule.max_length_from == "host" and rule.choices is None:
                found.append(f"{path}.maxLength")
            elif type(rule) is ArrayRule and rule.max_items_from == "host":
                found.append(f"{path}.maxItems")
        return tuple(found)

    def to_schema(self) -> dict[str, Any]:
        """The normalized JSON Schema (2020-12) of exactly what this check admits."""
        shared = [slot for slot in self.definitions if slot != 0]  # a bare root $ref is emitted inline
        names = {slot: f"d{position}" for position, slot in enumerate(shared)}
        schema = _emit(self.rules, 0, names, top=True)
        if names:
            schema["$defs"] = {names[slot]: _emit(self.rules, slot, names, top=True) for slot in self.definitions
                               if slot in names}
        return schema


def _refuse(code: str, at: str) -> ValueRefusal:
    return ValueRefusal(code, at)


def _check_string(rule: StringRule, value: Any, at: str, _stack: list[Any]) -> None:
    if type(value) is not str:
        raise _refuse("VALUE_TYPE", at)
    if not tool_dispatcher.is_portable_text(value):
        raise _refuse("VALUE_NOT_PORTABLE", at)
    if not rule.min_length <= len(value) <= rule.max_length:
        raise _refuse("VALUE_LENGTH", at)
    if rule.choices is not None and value not in rule.choices:
        raise _refuse("VALUE_ENUM", at)
    if rule.regex is not None and rule.regex.fullmatch(value) is None:
        raise _refuse("VALUE_PATTERN", at)


def _check_integer(rule: IntegerRule, value: Any, at: str, _stack: list[Any]) -> None:
    if type(value) is not int:  # bool, float (1.0) and int subclasses are not integers here
        raise _refuse("VALUE_TYPE", at)
    if not -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
        raise _refuse("VALUE_NOT_PORTABLE", at)
    if not rule.minimum <= value <= rule.maximum or (rule.multiple_of is not None and value % rule.multiple_of):
        raise _refuse("VALUE_RANGE", at)
    if rule.choices is not None and value not in rule.choices:
        raise _refuse("VALUE_ENUM", at)


def _check_boolean(rule: BooleanRule, value: Any, at: str, _stack: list[Any]) -> None:
    if type(value) is not bool:
        raise _refuse("VALUE_TYPE", at)
    if rule.choices is not None and value not in rule.choices:
        raise _refuse("VALUE_ENUM", at)


def _check_object(rule: ObjectRule, value: Any, at: str, stack: list[Any]) -> None:
    if type(value) is not dict:
        raise _refuse("VALUE_TYPE", at)
    index = rule.index
    for key in value:
        if type(key) is not str or key not in index:
            raise _refuse("VALUE_FIELDS", at)
    if not rule.required <= value.keys():
        raise _refuse("VALUE_FIELDS", at)
    for key, item in value.items():
        position, child = index[key]
        stack.append((child, item, f"{at}.properties[{position}]"))


def _check_array(rule: ArrayRule, value: Any, at: str, stack: list[Any]) -> None:
    if type(value) is not list:
        raise _refuse("VALUE_TYPE", at)
    if not rule.min_items <= len(value) <= rule.max_items:
        raise _refuse("VALUE_ITEMS", at)
    # The compiler allows uniqueItems over scalar items only; a container item fails its own check
    # below, and the key's type keeps 1 and true apart.
    if rule.unique and all(type(item) in _HASHABLE for item in value):
        if len({(type(item), item) for item in value}) != len(value):
            raise _refuse("VALUE_ITEMS", at)
    for position in range(len(value) - 1, -1, -1):
        stack.append((rule.items, value[position], f"{at}.items[{position}]"))


def _check_nullable(rule: NullableRule, value: Any, at: str, stack: list[Any]) -> None:
    if value is not None:
        stack.append((rule.inner, value, at))


_HASHABLE: Final = frozenset({str, int, bool, type(None)})
_VALUE_CHECKS: Final = MappingProxyType({
    StringRule: _check_string,
    IntegerRule: _check_integer,
    BooleanRule: _check_boolean,
    ObjectRule: _check_object,
    ArrayRule: _check_array,
    NullableRule: _check_nullable,
})


def _emit(rules: Sequence[Rule], index: int, names: Mapping[int, str], *, top: bool = False) -> dict[str, Any]:
    """One rule as JSON Schema; a shared definition becomes a $ref. Depth is bounded by the prescan."""
    if not top and index in names:
        return {"$ref": f"#/$defs/{names[index]}"}
    rule = rules[index]
    body = _EMITTERS[type(rule)](rule, rules, names)
    if rule.description is not None:
        body["description"] = rule.description
    return body


def _scalar(kind: str, choices: frozenset[Any] | None) -> dict[str, Any]:
    return {"type": kind} if choices is None else {"type": kind, "enum": sorted(choices)}


def _emit_string(rule: StringRule, _rules: Sequence[Rule], _names: Mapping[int, str]) -> dict[str, Any]:
    body = _scalar("string", rule.choices)
    if rule.min_length:
        body["minLength"] = rule.min_length
    if rule.choices is None or rule.max_length_from == "schema":  # an enum is bounded by its choices
        body["maxLength"] = rule.max_length
    if rule.pattern is not None:
        body["pattern"] = rule.pattern
    return body


def _emit_integer(rule: IntegerRule, _rules: Sequence[Rule], _names: Mapping[int, str]) -> dict[str, Any]:
    body = _scalar("integer", rule.choices)
    body["minimum"] = rule.minimum
    body["maximum"] = rule.maximum
    if rule.multiple_of is not None:
        body["multipleOf"] = rule.multiple_of
    return body


def _emit_boolean(rule: BooleanRule, _rules: Sequence[Rule], _names: Mapping[int, str]) -> dict[str, Any]:
    return _scalar("boolean", rule.choices)


def _emit_object(rule: ObjectRule, rules: Sequence[Rule], names: Mapping[int, str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {name: _emit(rules, child, names) for name, child in rule.properties},
        "required": [name for name, _ in rule.properties if name in rule.required],
        "additionalProperties": False,
    }


def _emit_array(rule: ArrayRule, rules: Sequence[Rule], names: Mapping[int, str]) -> dict[str, Any]:
    body: dict[str, Any] = {"type": "array", "items": _emit(rules, rule.items, names)}
    if rule.min_items:
        body["minItems"] = rule.min_items
    body["maxItems"] = rule.max_items
    if rule.unique:
        body["uniqueItems"] = True
    return body


def _emit_nullable(rule: NullableRule, rules: Sequence[Rule], names: Mapping[int, str]) -> dict[str, Any]:
    return {"anyOf": [_emit(rules, rule.inner, names), {"type": "null"}]}


_EMITTERS: Final = MappingProxyType({
    StringRule: _emit_string,
    IntegerRule: _emit_integer,
    BooleanRule: _emit_boolean,
    ObjectRule: _emit_object,
    ArrayRule: _emit_array,
    NullableRule: _emit_nullable,
})


# ============================================================================================
# 7. Host narrowing (overlays)
# ============================================================================================
# A host may replace the server's rule for a property by its own, only when the compiler can
# prove the host's rule admits a subset of what the server's admits. The proof is structural and
# conservative: an enum is proved value by value against the server's own rule; bounds must be
# tighter; a pattern may be added to a string the server left without one, never changed; a
# server's `number` may become an `integer` inside the number's bounds. Anything else is
# OVERLAY_WIDENS, even when it happens to be narrower: the boundary never admits what the
# server's own schema would not.

_NUMBER_KEYWORDS: Final = frozenset({"type", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})


def narrow(server_schema: Any, overlay: Mapping[tuple[str, ...], Any], *,
           bounds: Bounds = Bounds()) -> CompiledSchema:
    """Compile the server's schema with the host's rules in place of some properties' rules.

    ``overlay`` maps a path of property names (trusted host text) to the host's schema for that
    property. Each replacement is proved narrower before the patched schema is compiled.
    """
    prescan(server_schema)
    if type(server_schema) is not dict:
        raise SchemaRefusal("SCHEMA_ROOT", SCHEMA_ROOT)
    patched = tool_dispatcher.json_copy(server_schema)  # depth bounded by the prescan
    definitions = {keyword: patched[keyword] for keyword in DEFINITION_PREFIXES.values() if keyword in patched}
    for number, (path, host) in enumerate(overlay.items()):
        at = f"overlay[{number}]"
        parent, name = _overlay_parent(patched, path, at)
        server_node = parent[name]
        host_rules = compile_schema(host, bounds=bounds, require_object=False)
        if _has_ref(host):
            raise SchemaRefusal("OVERLAY_WIDENS", at)
        _prove_narrower(host_rules, {**_resolved(server_node, patched, at), **definitions}, bounds, at)
        parent[name] = tool_dispatcher.json_copy(host)
    return compile_schema(patched, bounds=bounds)


def _has_ref(schema: Any) -> bool:
    stack = [schema]
    while stack:
        item = stack.pop()
        if type(item) is dict:
            if "$ref" in item:
                return True
            stack.extend(item.values())
        elif type(item) is list:
            stack.extend(item)
    return False


def _resolved(node: Any, root: dict[str, Any], at: str) -> dict[str, Any]:
    """A node with a bare local $ref replaced by a copy of its definition (one chain, bounded)."""
    for _ in range(MAX_DEFINITIONS + 1):
        if type(node) is not dict:
            raise SchemaRefusal("OVERLAY_PATH", at)
        if "$ref" not in node:
            return node
        ref = node["$ref"]
        keyword = next((kw for prefix, kw in DEFINITION_PREFIXES.items()
                        if type(ref) is str and ref.startswith(prefix)), None)
        table = root.get(keyword) if keyword else None
        name = ref[len("#/" + str(keyword) + "/"):] if keyword else ""
        if type(table) is not dict or name not in table:
            raise SchemaRefusal("OVERLAY_PATH", at)
        node = table[name]
    raise SchemaRefusal("SCHEMA_REF_RECURSIVE", at)


def _overlay_parent(root: dict[str, Any], path: tuple[str, ...], at: str) -> tuple[dict[str, Any], str]:
    """The properties table holding the path's last name; referenced objects on the way are inlined."""
    if type(path) is not tuple or not path or any(type(name) is not str for name in path):
        raise SchemaRefusal("OVERLAY_PATH", at)
    node = root
    for depth, name in enumerate(path):
        properties = node.get("properties") if type(node) is dict else None
        if type(properties) is not dict or name not in properties:
            raise SchemaRefusal("OVERLAY_PATH", at)
        if depth == len(path) - 1:
            return properties, name
        child = properties[name]
        if type(child) is dict and "$ref" in child:
            child = tool_dispatcher.json_copy(_resolved(child, root, at))  # this use only: the definition stays
            properties[name] = child
        node = child
    raise SchemaRefusal("OVERLAY_PATH", at)  # unreachable: the loop returns at the last name


def _prove_narrower(host: CompiledSchema, server_node: dict[str, Any], bounds: Bounds, at: str) -> None:
    try:
        server = compile_schema(server_node, bounds=bounds, require_object=False)
    except SchemaRefusal as refusal:
        if refusal.code != "SCHEMA_NUMBER" or not _narrows_number(host, server_node):
            raise SchemaRefusal("OVERLAY_WIDENS", at) from None
        return
    if not _is_subset(host, server):
        raise SchemaRefusal("OVERLAY_WIDENS", at)


def _narrows_number(host: CompiledSchema, server_node: dict[str, Any]) -> bool:
    """A host integer rule inside a server `number` rule's bounds (nullable only if the server is)."""
    rule = host.rules[0]
    types = server_node.get("type")
    server_nullable = type(types) is list and "null" in types
    if type(rule) is NullableRule:
        if not server_nullable:
            return False
        rule = host.rules[rule.inner]
    if type(rule) is not IntegerRule:
        return False
    if any(key not in _NUMBER_KEYWORDS and key not in ANNOTATIONS and key not in ROOT_ONLY for key in server_node):
        return False  # multipleOf, enum, format...: not proved, so refused
    if types not in ("number", ["number", "null"], ["null", "number"]):
        return False
    low, high = (min(rule.choices), max(rule.choices)) if rule.choices else (rule.minimum, rule.maximum)
    checks = (("minimum", lambda bound: low >= bound), ("exclusiveMinimum", lambda bound: low > bound),
              ("maximum", lambda bound: high <= bound), ("exclusiveMaximum", lambda bound: high < bound))
    for keyword, holds in checks:
        if keyword in server_node:
            bound = server_node[keyword]
            if type(bound) not in (int, float) or not holds(bound):
                return False
    return True


def _is_subset(host: CompiledSchema, server: CompiledSchema) -> bool:
    """Structural proof that every value the host's rules admit, the server's rules admit too."""
    stack = [(0, 0)]
    seen: set[tuple[int, int]] = set()
    while stack:
        pair = stack.pop()
        if pair in seen:
            continue
        seen.add(pair)
        host_rule, server_rule = host.rules[pair[0]], server.rules[pair[1]]
        if type(server_rule) is NullableRule:
            inner = host_rule.inner if type(host_rule) is NullableRule else pair[0]
            stack.append((inner, server_rule.inner))
            continue
        if type(host_rule) is not type(server_rule):
            return False  # a nullable host under a non-nullable server lands here too
        if not _SUBSET_RULES[type(host_rule)](host_rule, server, pair[1], stack):
            return False
    return True


def _choices_admitted(host_rule: Any, server: CompiledSchema, index: int) -> bool | None:
    """With host choices: True when the server's rule admits each one; None when there are none."""
    if host_rule.choices is None:
        return None
    rule = server.rules[index]
    for choice in host_rule.choices:
        try:
            _VALUE_CHECKS[type(rule)](rule, choice, VALUE_ROOT, [])
        except ValueRefusal:
            return False
    return True


def _string_subset(rule: StringRule, server: CompiledSchema, index: int, _stack: list[Any]) -> bool:
    other = server.rules[index]
    proved = _choices_admitted(rule, server, index)
    if proved is not None:
        return proved
    return (other.choices is None and rule.min_length >= other.min_length and rule.max_length <= other.max_length
            and (other.pattern is None or other.pattern == rule.pattern))


def _integer_subset(rule: IntegerRule, server: CompiledSchema, index: int, _stack: list[Any]) -> bool:
    other = server.rules[index]
    proved = _choices_admitted(rule, server, index)
    if proved is not None:
        return proved
    step_ok = other.multiple_of is None or (rule.multiple_of is not None and rule.multiple_of % other.multiple_of == 0)
    return other.choices is None and rule.minimum >= other.minimum and rule.maximum <= other.maximum and step_ok


def _boolean_subset(rule: BooleanRule, server: CompiledSchema, index: int, _stack: list[Any]) -> bool:
    proved = _choices_admitted(rule, server, index)
    return server.rules[index].choices is None if proved is None else proved


def _object_subset(rule: ObjectRule, server: CompiledSchema, index: int, stack: list[Any]) -> bool:
    other = server.rules[index]
    if not other.required <= rule.required:
        return False
    for name, child in rule.properties:
        if name not in other.index:
            return False
        stack.append((child, other.index[name][1]))
    return True


def _array_subset(rule: ArrayRule, server: CompiledSchema, index: int, stack: list[Any]) -> bool:
    other = server.rules[index]
    if rule.min_items < other.min_items or rule.max_items > other.max_items or (other.unique and not rule.unique):
        return False
    stack.append((rule.items, other.items))
    return True


_SUBSET_RULES: Final = MappingProxyType({
    StringRule: _string_subset,
    IntegerRule: _integer_subset,
    BooleanRule: _boolean_subset,
    ObjectRule: _object_subset,
    ArrayRule: _array_subset,
})
