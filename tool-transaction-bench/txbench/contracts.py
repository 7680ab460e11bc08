"""Argument decoding through the core's strict decoder, the tools' JSON Schema contracts, and the
schema validator (formats included)."""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from fractions import Fraction
from types import MappingProxyType
from typing import Any, Final

import tool_dispatcher

from .limits import MAX_ARGUMENT_BYTES, MAX_FINDINGS, MAX_NESTING
from .errors import BenchError


# ================================================================================================
# 4. Strict argument decoding
# ================================================================================================

# The bench decodes arguments with the core's strict decoder under its own policy: finite floats
# (so that the schema check, not the decoder, reports 1.0 given for an integer field), integers
# within +/-(2**53 - 1) and no lone surrogates (what every JSON peer reads the same way).
BENCH_ARGUMENTS_JSON: Final = tool_dispatcher.JsonPolicy(
    "bench-arguments", tool_dispatcher.finite_float, tool_dispatcher.safe_int, portable_text=True)

# The core's decoder codes, each mapped to the bench's own: a closed table, one row per JSON code.
JSON_TO_ARGS: Final = MappingProxyType({
    "JSON_TOO_LARGE": "ARGS_TOO_LARGE",
    "JSON_NOT_UTF8": "ARGS_NOT_UTF8",
    "JSON_TOO_DEEP": "ARGS_TOO_DEEP",
    "JSON_INVALID": "ARGS_NOT_JSON",
    "JSON_DUPLICATE_KEY": "ARGS_DUPLICATE_KEY",
    "JSON_NON_FINITE": "ARGS_NONFINITE",
    "JSON_NOT_PORTABLE": "ARGS_NOT_PORTABLE",
})


def decode_arguments(text: Any, *, max_bytes: int = MAX_ARGUMENT_BYTES,
                     max_depth: int = MAX_NESTING) -> dict[str, Any]:
    """Decode a provider's `arguments` string into a JSON object, or raise BenchError(ARGS_*)."""
    if not isinstance(text, str):
        raise BenchError("ARGS_NOT_STRING")
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:
        raise BenchError("ARGS_NOT_UTF8") from None  # a lone surrogate character in the text itself
    try:
        value = tool_dispatcher.decode_strict_json(data, max_bytes=max_bytes, max_depth=max_depth,
                                                   policy=BENCH_ARGUMENTS_JSON)
    except tool_dispatcher.BoundaryError as error:
        raise BenchError(JSON_TO_ARGS[error.code]) from None
    if not isinstance(value, dict):
        raise BenchError("ARGS_NOT_OBJECT")
    return value


# ================================================================================================
# 5. Tool contracts and schema validation
# ================================================================================================

def freeze(value: Any) -> Any:
    """Read-only copy of a trusted constant (schemas are built here, never from input)."""
    if isinstance(value, Mapping):
        return MappingProxyType({name: freeze(item) for name, item in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(freeze(item) for item in value)
    return value


def thaw(value: Any) -> Any:
    """Plain JSON copy of a frozen constant, for digests and for callers who want to edit it."""
    if isinstance(value, Mapping):
        return {name: thaw(item) for name, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [thaw(item) for item in value]
    return value


def _object(**properties: Any) -> dict[str, Any]:
    # Strict contracts: every field required, nothing else allowed, at every level.
    return {"type": "object", "properties": properties, "required": sorted(properties),
            "additionalProperties": False}


_ORDER_REF: Final = {"type": "string", "pattern": "^[0-9]{5}$"}
_KEY: Final = {"type": "string", "pattern": "^[A-Za-z0-9_-]{8,64}$"}
_SKU: Final = {"type": "string", "enum": ["SKU-BLUE", "SKU-RED"]}
_QUANTITY: Final = {"type": "integer", "minimum": 1, "maximum": 10}
_AMOUNT: Final = {"type": "integer", "minimum": 1, "maximum": 1_000_000}
_CURRENCY: Final = {"type": "string", "enum": ["CNY", "EUR", "USD"]}


@dataclass(frozen=True, slots=True)
class ToolContract:
    name: str
    side_effect: bool  # a side-effecting tool requires an idempotency key
    schema: Mapping[str, Any]


TOOLS: Final = MappingProxyType({contract.name: contract for contract in (
    ToolContract("create_order", True, freeze(_object(
        order_ref=_ORDER_REF,
        customer=_object(id={"type": "string", "pattern": "^C[0-9]{4}$"},
                         tier={"type": "string", "enum": ["gold", "standard"]}),
        line=_object(sku=_SKU, quantity=_QUANTITY),
        amount_cents=_AMOUNT, currency=_CURRENCY, idempotency_key=_KEY))),
    ToolContract("reserve_inventory", True, freeze(_object(
        order_ref=_ORDER_REF, sku=_SKU, quantity=_QUANTITY, idempotency_key=_KEY))),
    ToolContract("charge_payment", True, freeze(_object(
        order_ref=_ORDER_REF, amount_cents=_AMOUNT, currency=_CURRENCY,
        payment_method=_object(type={"type": "string", "enum": ["card", "wallet"]},
                               token={"type": "string", "pattern": "^tok_[a-z0-9]{4,32}$"}),
        idempotency_key=_KEY))),
    ToolContract("confirm_order", True, freeze(_object(order_ref=_ORDER_REF, idempotency_key=_KEY))),
    ToolContract("release_inventory", True, freeze(_object(
        order_ref=_ORDER_REF, idempotency_key=_KEY))),
    ToolContract("cancel_order", True, freeze(_object(
        order_ref=_ORDER_REF,
        reason={"type": "string", "enum": ["customer_request", "fraud_suspected", "saga_compensation"]},
        idempotency_key=_KEY))),
    ToolContract("refund_payment", True, freeze(_object(
        order_ref=_ORDER_REF, amount_cents=_AMOUNT,
        reason={"type": "string", "enum": ["damaged", "duplicate", "other"]}, idempotency_key=_KEY))),
    ToolContract("query_logistics", False, freeze(_object(order_ref=_ORDER_REF))),
    ToolContract("schedule_delivery", True, freeze(_object(
        order_ref=_ORDER_REF, window_start={"type": "string", "format": "date-time", "maxLength": 40},
        order_version={"type": "integer", "minimum": 1, "maximum": 3}, idempotency_key=_KEY))),
)})
SIDE_EFFECT_TOOLS: Final = frozenset(name for name, tool in TOOLS.items() if tool.side_effect)


def tool_schemas() -> dict[str, Any]:
    """Every tool's full JSON Schema, as plain JSON a caller may keep or edit."""
    return {name: thaw(tool.schema) for name, tool in TOOLS.items()}


@dataclass(frozen=True, slots=True)
class Finding:
    code: str
    path: str = ""
    call: int | None = None  # index of the call in the plan; None for plan-level findings

    def to_json(self) -> dict[str, Any]:
        return {"call": self.call, "code": self.code, "path": self.path}


def _pointer(path: str, token: Any) -> str:
    text = str(token).replace("~", "~0").replace("/", "~1")
    return f"{path}/{text}"


_TYPE_TESTS: Final = MappingProxyType({
    "object": lambda value: isinstance(value, dict),
    "array": lambda value: isinstance(value, list),
    "string": lambda value: isinstance(value, str),
    "integer": lambda value: type(value) is int,  # a boolean is an int in Python, never in JSON
    "boolean": lambda value: type(value) is bool,
})

_SCHEMA_KEYWORDS: Final = MappingProxyType({
    "object": frozenset({"type", "properties", "required", "additionalProperties", "description"}),
    "array": frozenset({"type", "items", "minItems", "maxItems", "description"}),
    "string": frozenset({"type", "enum", "minLength", "maxLength", "pattern", "format", "description"}),
    "integer": frozenset({"type", "enum", "minimum", "maximum", "description"}),
    "boolean": frozenset({"type", "description"}),
})


def _in_enum(value: Any, allowed: Any) -> bool:
    # Type-strict membership: 1 is not True and "1" is not 1.
    return any(type(value) is type(option) and value == option for option in allowed)


def _check_object(schema: Mapping, value: dict, path: str, out: list, stack: list) -> None:
    properties = schema["properties"]
    for name in schema["required"]:
        if name not in value:
            out.append(Finding("FIELD_REQUIRED", _pointer(path, name)))
    for name, item in value.items():
        if name in properties:
            stack.append((properties[name], item, _pointer(path, name)))
        else:
            out.append(Finding("FIELD_UNKNOWN_KEY", _pointer(path, name)))


def _check_array(schema: Mapping, value: list, path: str, out: list, stack: list) -> None:
    if not schema.get("minItems", 0) <= len(value) <= schema.get("maxItems", len(value)):
        out.append(Finding("FIELD_ITEMS", path))
    for index, item in enumerate(value):
        stack.append((schema["items"], item, _pointer(path, index)))


_DATE_TIME: Final = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]([0-9]{2}):([0-9]{2}):([0-9]{2})(?P<fraction>\.[0-9]+)?"
    r"(?:[Zz]|(?P<sign>[+-])(?P<oh>[0-9]{2}):(?P<om>[0-9]{2}))", re.ASCII)


def _days_in_month(year: int, month: int) -> int:
    if month == 2:
        return 29 if year % 4 == 0 and (year % 100 != 0 or year % 400 == 0) else 28
    return 30 if month in (4, 6, 9, 11) else 31


def is_date_time(text: str) -> bool:
    """RFC 3339 date-time, exactly: a real calendar day, hours 0-23, a leap second only at :59."""
    return instant(text) is not None


# The Gregorian calendar repeats every 400 years, and 146,097 days: a year is moved into the range
# datetime.date counts (year 0 and years past 9,599 included) and the cycles are added back.
_CALENDAR_CYCLE_YEARS: Final = 400
_CALENDAR_CYCLE_DAYS: Final = 146_097
_CALENDAR_BASE_YEAR: Final = 2000


def instant(text: Any) -> tuple[int, Fraction] | None:
    """An RFC 3339 date-time as the UTC instant it names (minutes since an epoch, then seconds), or
    None when the text is not one. Two spellings of one instant (an offset, a fraction of zeros,
    a lower-case t or z) give the same value; a leap second stays apart from the next minute."""
    match = _DATE_TIME.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        return None
    year, month, day, hour, minute, second = (int(part) for part in match.groups()[:6])
    sign, offset_hours, offset_minutes = match.group("sign"), int(match.group("oh") or 0), int(match.group("om") or 0)
    if not (1 <= month <= 12 and 1 <= day <= _days_in_month(year, month) and hour <= 23
            and minute <= 59 and (second <= 59 or (second == 60 and minute == 59))
            and offset_hours <= 23 and offset_minutes <= 59):
        return None
    cycles, year_in_cycle = divmod(year, _CALENDAR_CYCLE_YEARS)
    days = date(_CALENDAR_BASE_YEAR + year_in_cycle, month, day).toordinal() + cycles * _CALENDAR_CYCLE_DAYS
    offset = (offset_hours * 60 + offset_minutes) * (-1 if sign == "-" else 1)
    fraction = Fraction(match.group("fraction") or "0")
    return (days * 1440 + hour * 60 + minute - offset, second + fraction)


# The string formats this validator checks exactly; any other format is refused by name when the
# schema is checked (FIELD_FORMAT_UNSUPPORTED), never silently accepted as "annotation only".
FORMATS: Final = MappingProxyType({"date-time": is_date_time})


def _check_string(schema: Mapping, value: str, path: str, out: list, _stack: list) -> None:
    if not schema.get("minLength", 0) <= len(value) <= schema.get("maxLength", len(value)):
        out.append(Finding("FIELD_LENGTH", path))
    if "pattern" in schema and re.fullmatch(schema["pattern"], value) is None:
        out.append(Finding("FIELD_PATTERN", path))
    if "format" in schema and not FORMATS[schema["format"]](value):
        out.append(Finding("FIELD_FORMAT", path))


def _check_integer(schema: Mapping, value: int, path: str, out: list, _stack: list) -> None:
    if not schema.get("minimum", value) <= value <= schema.get("maximum", value):
        out.append(Finding("FIELD_RANGE", path))


_VALUE_CHECKS: Final = MappingProxyType({
    "object": _check_object,
    "array": _check_array,
    "string": _check_string,
    "integer": _check_integer,
    "boolean": lambda *_unused: None,
})


def validate_arguments(schema: Mapping[str, Any], value: Any, *,
                       max_findings: int = MAX_FINDINGS) -> tuple[Finding, ...]:
    """Every way a value breaks a (checked) schema, sorted by path; no coercion of any kind."""
    out: list[Finding] = []
    stack = [(schema, value, "")]
    while stack:
        node, item, path = stack.pop()
        if not _TYPE_TESTS[node["type"]](item):
            out.append(Finding("FIELD_TYPE", path))
            continue
        if "enum" in node and not _in_enum(item, node["enum"]):
            out.append(Finding("FIELD_ENUM", path))
        _VALUE_CHECKS[node["type"]](node, item, path, out, stack)
    return tuple(sorted(out, key=lambda found: (found.path, found.code))[:max_findings])


def _compiles(pattern: Any) -> bool:
    try:
        re.compile(pattern)
    except (re.error, TypeError):
        return False
    return isinstance(pattern, str)


def _strings(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and all(isinstance(item, str) for item in value)


# What each supported keyword may hold; a schema is checked against this before it is used.
_KEYWORD_VALUES: Final = MappingProxyType({
    "type": lambda value: isinstance(value, str),
    "description": lambda value: isinstance(value, str),
    "properties": lambda value: isinstance(value, Mapping) and _strings(tuple(value)),
    "required": _strings,
    "additionalProperties": lambda value: value is False,  # open objects are not supported at all
    "items": lambda value: isinstance(value, Mapping),
    "enum": lambda value: isinstance(value, (list, tuple)),
    "pattern": _compiles,
    "format": lambda value: isinstance(value, str),
    **{name: lambda value: type(value) is int
       for name in ("minimum", "maximum", "minLength", "maxLength", "minItems", "maxItems")},
})
_MANDATORY: Final = MappingProxyType({
    "object": frozenset({"properties", "required", "additionalProperties"}), "array": frozenset({"items"}),
})


def check_schema(schema: Any) -> None:
    """Refuse a schema this validator would misread: unknown keywords, open objects, no items."""
    stack = [(schema, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_NESTING or not isinstance(node, Mapping) or not isinstance(node.get("type"), str):
            raise BenchError("FIELD_UNSUPPORTED")
        kind = node["type"]
        if kind == "string" and "format" in node and node["format"] not in FORMATS:
            raise BenchError("FIELD_FORMAT_UNSUPPORTED")
        allowed = _SCHEMA_KEYWORDS.get(kind, frozenset())
        if (not set(node) <= allowed or not _MANDATORY.get(kind, frozenset()) <= set(node)
                or not all(_KEYWORD_VALUES[name](value) for name, value in node.items())):
            raise BenchError("FIELD_UNSUPPORTED")
        if kind == "object":
            if not set(node["required"]) <= set(node["properties"]):
                raise BenchError("FIELD_UNSUPPORTED")
            stack.extend((child, depth + 1) for child in node["properties"].values())
        elif kind == "array":
            stack.append((node["items"], depth + 1))
