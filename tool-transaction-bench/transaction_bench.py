#!/usr/bin/env python3
"""tool-transaction-bench: a deterministic fault-injection sandbox for tool-call transactions.

A tool call is a proposal; the persisted state is the result. The bench runs the same proposals
through a naive and a guarded orchestrator against one in-memory sandbox (orders, inventory
reservations, payment charges, a transactional outbox, a relay and a consumer with a dedup inbox),
injects faults at named points, and judges every run by the state it leaves behind, never by what
the orchestrator says about itself. A full-plan scorer grades the proposal on its own, so the
model's share and the orchestration's share of an outcome are reported apart.

What it never does: touch a network, a database, a clock or an unseeded random generator (the
naive orchestrator's fresh keys come from `random.Random(SEED)`, and the seed is recorded);
recurse on untrusted input beyond MAX_NESTING levels (argument text is depth-scanned before the
decoder runs, and schema validation walks values with an explicit stack); rely on `assert` for a
runtime check; print a local path.

Sections, in the order data flows:
  1. limits and constants
  2. errors and codes
  3. lifecycle: the transition table is the spec
  4. strict argument decoding
  5. tool contracts and schema validation
  6. fault catalogue and injector
  7. sandbox: state, tools, outbox, relay, consumer
  8. expectations and plan validation
  9. journal and orchestrators (naive, guarded)
 10. invariants
 11. run records: snapshots, diff, metrics, assertions
 12. scenarios and paired controls
 13. exhaustive fault sweep
 14. full-plan scorer and its cases
 15. bench: run_all, result files, check
 16. CLI
"""
from __future__ import annotations

import argparse
import copy
import hashlib
import importlib
import os
import json
import random
import re
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from math import comb as math_comb
from itertools import combinations, combinations_with_replacement
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Final

_REPO_ROOT = str(Path(__file__).resolve().parent.parent)
if _REPO_ROOT not in sys.path:
    sys.path.insert(0, _REPO_ROOT)
import tool_dispatcher  # noqa: E402  canonical JSON and its digest are the dispatcher's, not copied

canonical_json = tool_dispatcher.canonical_json
canonical_sha256 = tool_dispatcher.canonical_sha256


# ================================================================================================
# 1. Limits and constants
# ================================================================================================

BENCH_FORMAT: Final = "tool-transaction-bench/results-v1"
SEED: Final = 20240531  # the only randomness: the naive orchestrator's fresh keys per retry
GUARDED_MAX_ATTEMPTS: Final = 3  # one try plus two same-key retries outlast any single transient fault
NAIVE_MAX_ATTEMPTS: Final = 3  # the same budget, so the two differ in key policy, not in persistence
MAX_ARGUMENT_BYTES: Final = 16_384  # real arguments are a few hundred bytes; counted before decoding
MAX_NESTING: Final = 16  # the deepest contract has 3 levels; scanned before the decoder can recurse
MAX_CALLS: Final = 16  # a longer response is refused whole, never truncated to a convenient prefix
MAX_EXPECTED_CALLS: Final = 8  # optimal matching walks 2**n subsets; 256 of them stay instant
MAX_FINDINGS: Final = 32  # hostile arguments cannot grow a record without bound
MAX_NAME_CHARS: Final = 64  # call ids and tool names are short identifiers echoed into records
MAX_DELIVERIES: Final = 4  # the broker dead-letters an event it has delivered this many times
# A charge or refund of this many cents or more cannot be undone quietly: it needs the customer's
# second confirmation in the request context (500.00 in the order's currency).
HIGH_VALUE_CENTS: Final = 50_000
# The sweep: every fault set of up to two faults runs whole (1,653 sets on the seven tools); three
# faults make 30,856 sets, so that depth runs its 840 one-tool sets whole and a fixed-seed sample of
# the rest, which keeps the whole bench, tests included, within seconds. `--exhaustive` runs every
# depth whole and prints its time.
SWEEP_EXHAUSTIVE_DEPTH: Final = 2
SWEEP_MAX_DEPTH: Final = 3
SWEEP_SAMPLE: Final = 1_500
# An orchestrator passes the sweep only if it also completes at least 9 in 10 of the runs that
# could complete: refusing everything is safe and worthless.
LIVENESS_FLOOR: Final = (9, 10)
BUSINESS_TABLES: Final = ("charges", "inventory", "orders", "reservations")

RESULTS_DIR: Final = Path(__file__).resolve().parent / "results"
RAW_FILE: Final = "raw_results.jsonl"
SUMMARY_FILE: Final = "summary.json"

# The four-step plan every completeness, timeout, idempotency, saga and delivery scenario uses.
PLAN_TOOLS: Final = ("create_order", "reserve_inventory", "charge_payment", "confirm_order")
PLAN_ORDER: Final = "30417"
SEEDED_ORDER: Final = "20481"  # the scorer cases act on an order that already exists
INITIAL_STOCK: Final = MappingProxyType({"SKU-BLUE": 5, "SKU-RED": 5})


# ================================================================================================
# 2. Errors and codes
# ================================================================================================

BENCH_CATALOG: Final = MappingProxyType({
    # argument decoding: the text a provider hands over as `arguments`
    **tool_dispatcher.error_specs(
        "args", False,
        ARGS_NOT_STRING="arguments must be a JSON string",
        ARGS_NOT_UTF8="arguments are not encodable as UTF-8",
        ARGS_TOO_LARGE="arguments exceed the byte limit",
        ARGS_TOO_DEEP="arguments exceed the nesting limit",
        ARGS_NOT_JSON="arguments are not valid JSON",
        ARGS_DUPLICATE_KEY="arguments repeat a key",
        ARGS_NONFINITE="arguments hold NaN or an infinite number",
        ARGS_NOT_PORTABLE="an integer is outside the portable range or a string holds a lone surrogate",
        ARGS_NOT_OBJECT="arguments must be a JSON object",
    ),
    # schema validation
    **tool_dispatcher.error_specs(
        "schema", False,
        SCHEMA_TYPE="a value has the wrong JSON type",
        SCHEMA_REQUIRED="a required field is missing",
        SCHEMA_UNKNOWN_KEY="a field is not in the contract",
        SCHEMA_ENUM="a value is not one of the allowed values",
        SCHEMA_RANGE="an integer is outside its range",
        SCHEMA_LENGTH="a string is too short or too long",
        SCHEMA_PATTERN="a string does not match its pattern",
        SCHEMA_FORMAT="a string does not have its declared format",
        SCHEMA_ITEMS="an array has too few or too many items",
        SCHEMA_UNSUPPORTED="a schema uses a keyword or shape this validator does not support",
        SCHEMA_FORMAT_UNSUPPORTED="a schema declares a string format this validator does not check",
    ),
    # response shape, as the scorer receives it
    **tool_dispatcher.error_specs(
        "response", False,
        RESPONSE_SHAPE="the response must be an object holding only a tool_calls list",
        RESPONSE_TOO_MANY_CALLS="the response proposes more calls than the limit",
        CALL_SHAPE="a call must be exactly {id, name, arguments} with short string id and name",
    ),
    # plan validation, before any tool starts
    **tool_dispatcher.error_specs(
        "plan", False,
        TOOL_UNKNOWN="no tool has this name",
        KEY_MISSING="a side-effecting call has no idempotency key",
        KEY_REUSED="two calls in one plan share an idempotency key",
        CALL_MISSING="an expected call is missing from the plan",
        CALL_UNEXPECTED="the plan holds a call that is not expected",
        CALL_FORBIDDEN="the plan holds a forbidden call",
        DEPENDENCY_ORDER="a call comes before a call it depends on",
        ARGUMENT_MISMATCH="an argument differs from the value the request fixed",
        PLAN_TOO_MANY_CALLS="the plan holds more calls than the limit",
        EXPECTATION_INVALID="the expectation is malformed or its dependencies form a cycle",
        FAULT_INVALID="a fault names an unknown kind or tool, or a count below one",
    ),
    # business checks, before any tool starts (the guard refuses, the scorer vetoes)
    **tool_dispatcher.error_specs(
        "business", False,
        CALL_ID_REUSED="two calls in one plan share a provider call id",
        CURRENCY_MISMATCH="a charge's currency differs from its order's currency",
        CUSTOMER_MISMATCH="the order names another customer than the one making the request",
        CUSTOMER_NOT_PERMITTED="the customer may not use this tool",
        CONFIRMATION_MISSING="a high-value irreversible action lacks the customer's second confirmation",
        VERSION_STALE="the call names another version of the order than its current one",
        CALLS_EXCLUSIVE="the plan holds two calls that must never both appear",
    ),
    # a tool's refusals, raised by its handler and answered as the response code
    **tool_dispatcher.error_specs(
        "sandbox", False,
        BAD_REQUEST="the tool cannot read a field it needs",
        ORDER_EXISTS="an order with this reference exists",
        ORDER_NOT_FOUND="no order has this reference",
        ORDER_STATE="the order's status does not allow this action",
        ORDER_NOT_READY="the order lacks a held reservation or a captured charge",
        INSUFFICIENT_STOCK="not enough stock to reserve",
        AMOUNT_MISMATCH="the amount differs from the order's amount",
        NOTHING_TO_RELEASE="the order holds no reservation",
        NOTHING_TO_REFUND="the order has no captured charge of this amount",
        VERSION_CONFLICT="the order has changed since the version the call names",
    ),
    # lifecycle and command line
    **tool_dispatcher.error_specs(
        "bench", False,
        LIFECYCLE_ILLEGAL="illegal lifecycle transition",
        SCENARIO_UNKNOWN="unknown scenario id",
        RESULTS_UNWRITABLE="the results directory cannot be created or written",
        RESULTS_UNREADABLE="the results directory cannot be read",
        PLANS_UNREADABLE="the plans file cannot be read",
        PLANS_LINE="a line of the plans file is not a valid plan record",
        PLANS_TOO_MANY_LINES="the plans file holds more lines than the limit",
        PLANS_SCENARIO_UNKNOWN="a plan names a scenario the bench does not have",
        ORCHESTRATOR_SPEC="the orchestrator must be given as MODULE:CALLABLE",
        ORCHESTRATOR_UNLOADABLE="the orchestrator module cannot be imported or the name is not callable",
    ),
})
# What the sandbox answers without raising: the transport's and the idempotency store's own codes.
# They are response codes, never errors this bench raises, so they are not in its catalog (two of
# them share a name with the core's tool-facing codes, which is what a real tool would answer).
SANDBOX_ANSWERS: Final = MappingProxyType({
    "TIMEOUT": "no answer in time: the effect may or may not have committed",
    "RATE_LIMITED": "too many requests: refused before any effect",
    "REJECTED": "refused for good",
    "STATUS_UNAVAILABLE": "the status service did not answer",
    "IDEMPOTENCY_CONFLICT": "this key was used with different arguments",
})


class BenchError(tool_dispatcher.CatalogError):
    """The bench's error: a code from BENCH_CATALOG, its fixed message, and an optional safe detail.

    `at` names a place by known names only (a field the sandbox needs, a lifecycle step); `detail`
    is fixed bench text (never the input's), shown in to_json() when set.
    """

    CATALOG = BENCH_CATALOG

    def __init__(self, code: str, at: str = "", *, detail: str = "") -> None:
        super().__init__(code, at)
        self.detail = detail

    def details(self) -> dict[str, Any]:
        return {"detail": self.detail} if self.detail else {}


class IllegalTransition(BenchError):
    """A lifecycle event the transition table does not allow in the current state."""

    def __init__(self, state: str, event: str) -> None:
        super().__init__("LIFECYCLE_ILLEGAL", f"{state}/{event}")
        self.state = state
        self.event = event


# How the guarded orchestrator treats each sandbox answer. A code not listed is never retried.
RETRY: Final = "retry"
UNKNOWN: Final = "unknown"
PERMANENT: Final = "permanent"
ERROR_CLASSES: Final = MappingProxyType({
    "TIMEOUT": UNKNOWN,  # the effect may have committed: resolve it, never guess
    "RATE_LIMITED": RETRY,  # refused before any effect: the same key may go again
    "REJECTED": PERMANENT,
    "BAD_REQUEST": PERMANENT,
    "TOOL_UNKNOWN": PERMANENT,
    "IDEMPOTENCY_CONFLICT": PERMANENT,
    "ORDER_EXISTS": PERMANENT,
    "ORDER_NOT_FOUND": PERMANENT,
    "ORDER_STATE": PERMANENT,
    "ORDER_NOT_READY": PERMANENT,
    "INSUFFICIENT_STOCK": PERMANENT,
    "AMOUNT_MISMATCH": PERMANENT,
    "NOTHING_TO_RELEASE": PERMANENT,
    "NOTHING_TO_REFUND": PERMANENT,
    "VERSION_CONFLICT": PERMANENT,
})


def classify(code: str | None) -> str:
    """The class of a sandbox error code; unclassified codes are permanent, so never retried."""
    return ERROR_CLASSES.get(code, PERMANENT)


# ================================================================================================
# 3. Lifecycle: the transition table is the spec
# ================================================================================================

PROPOSED: Final = "PROPOSED"
VALIDATED: Final = "VALIDATED"
EXECUTING: Final = "EXECUTING"
COMPENSATING: Final = "COMPENSATING"
RECONCILED: Final = "RECONCILED"
MANUAL: Final = "MANUAL"
REFUSED: Final = "REFUSED"

# Everything that moves a guarded run lives here. RECONCILED means the final state was checked
# against the receipts; MANUAL means a human owns what is left; neither is reached silently.
TRANSITIONS: Final = MappingProxyType({
    (PROPOSED, "accept"): VALIDATED,  # the whole plan passed validation
    (PROPOSED, "refuse"): REFUSED,  # something failed: no tool has started
    (VALIDATED, "start"): EXECUTING,
    (EXECUTING, "reconcile"): RECONCILED,  # every step done and the state matches the receipts
    (EXECUTING, "fail"): COMPENSATING,  # a step failed for good: undo the done steps in reverse
    (EXECUTING, "escalate"): MANUAL,  # an unknown outcome stayed unknown, or the state disagrees
    (COMPENSATING, "reconcile"): RECONCILED,
    (COMPENSATING, "escalate"): MANUAL,  # a compensation failed
})
LIFECYCLE_STATES: Final = (PROPOSED, VALIDATED, EXECUTING, COMPENSATING, RECONCILED, MANUAL, REFUSED)
TERMINAL_STATES: Final = frozenset({RECONCILED, MANUAL, REFUSED})


class Lifecycle:
    """One guarded run's state; only `fire` changes it, and only along TRANSITIONS."""

    __slots__ = ("_state", "_history")

    def __init__(self) -> None:
        self._state = PROPOSED
        self._history: list[tuple[str, str, str]] = []

    @property
    def state(self) -> str:
        return self._state

    def fire(self, event: str) -> None:
        try:
            target = TRANSITIONS[(self._state, event)]
        except KeyError:
            raise IllegalTransition(self._state, event) from None
        self._history.append((self._state, event, target))
        self._state = target

    def history(self) -> list[list[str]]:
        return [list(step) for step in self._history]


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

def _freeze(value: Any) -> Any:
    """Read-only copy of a trusted constant (schemas are built here, never from input)."""
    if isinstance(value, Mapping):
        return MappingProxyType({name: _freeze(item) for name, item in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(item) for item in value)
    return value


def _thaw(value: Any) -> Any:
    """Plain JSON copy of a frozen constant, for digests and for callers who want to edit it."""
    if isinstance(value, Mapping):
        return {name: _thaw(item) for name, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_thaw(item) for item in value]
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
    ToolContract("create_order", True, _freeze(_object(
        order_ref=_ORDER_REF,
        customer=_object(id={"type": "string", "pattern": "^C[0-9]{4}$"},
                         tier={"type": "string", "enum": ["gold", "standard"]}),
        line=_object(sku=_SKU, quantity=_QUANTITY),
        amount_cents=_AMOUNT, currency=_CURRENCY, idempotency_key=_KEY))),
    ToolContract("reserve_inventory", True, _freeze(_object(
        order_ref=_ORDER_REF, sku=_SKU, quantity=_QUANTITY, idempotency_key=_KEY))),
    ToolContract("charge_payment", True, _freeze(_object(
        order_ref=_ORDER_REF, amount_cents=_AMOUNT, currency=_CURRENCY,
        payment_method=_object(type={"type": "string", "enum": ["card", "wallet"]},
                               token={"type": "string", "pattern": "^tok_[a-z0-9]{4,32}$"}),
        idempotency_key=_KEY))),
    ToolContract("confirm_order", True, _freeze(_object(order_ref=_ORDER_REF, idempotency_key=_KEY))),
    ToolContract("release_inventory", True, _freeze(_object(
        order_ref=_ORDER_REF, idempotency_key=_KEY))),
    ToolContract("cancel_order", True, _freeze(_object(
        order_ref=_ORDER_REF,
        reason={"type": "string", "enum": ["customer_request", "fraud_suspected", "saga_compensation"]},
        idempotency_key=_KEY))),
    ToolContract("refund_payment", True, _freeze(_object(
        order_ref=_ORDER_REF, amount_cents=_AMOUNT,
        reason={"type": "string", "enum": ["damaged", "duplicate", "other"]}, idempotency_key=_KEY))),
    ToolContract("query_logistics", False, _freeze(_object(order_ref=_ORDER_REF))),
    ToolContract("schedule_delivery", True, _freeze(_object(
        order_ref=_ORDER_REF, window_start={"type": "string", "format": "date-time", "maxLength": 40},
        order_version={"type": "integer", "minimum": 1, "maximum": 3}, idempotency_key=_KEY))),
)})
SIDE_EFFECT_TOOLS: Final = frozenset(name for name, tool in TOOLS.items() if tool.side_effect)


def tool_schemas() -> dict[str, Any]:
    """Every tool's full JSON Schema, as plain JSON a caller may keep or edit."""
    return {name: _thaw(tool.schema) for name, tool in TOOLS.items()}


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
            out.append(Finding("SCHEMA_REQUIRED", _pointer(path, name)))
    for name, item in value.items():
        if name in properties:
            stack.append((properties[name], item, _pointer(path, name)))
        else:
            out.append(Finding("SCHEMA_UNKNOWN_KEY", _pointer(path, name)))


def _check_array(schema: Mapping, value: list, path: str, out: list, stack: list) -> None:
    if not schema.get("minItems", 0) <= len(value) <= schema.get("maxItems", len(value)):
        out.append(Finding("SCHEMA_ITEMS", path))
    for index, item in enumerate(value):
        stack.append((schema["items"], item, _pointer(path, index)))


_DATE_TIME: Final = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.[0-9]+)?"
    r"(?:[Zz]|[+-]([0-9]{2}):([0-9]{2}))", re.ASCII)


def _days_in_month(year: int, month: int) -> int:
    if month == 2:
        return 29 if year % 4 == 0 and (year % 100 != 0 or year % 400 == 0) else 28
    return 30 if month in (4, 6, 9, 11) else 31


def is_date_time(text: str) -> bool:
    """RFC 3339 date-time, exactly: a real calendar day, hours 0-23, a leap second only at :59."""
    match = _DATE_TIME.fullmatch(text)
    if match is None:
        return False
    year, month, day, hour, minute, second = (int(part) for part in match.groups()[:6])
    offset_hours, offset_minutes = (int(part or 0) for part in match.groups()[6:])
    return (1 <= month <= 12 and 1 <= day <= _days_in_month(year, month) and hour <= 23
            and minute <= 59 and (second <= 59 or (second == 60 and minute == 59))
            and offset_hours <= 23 and offset_minutes <= 59)


# The string formats this validator checks exactly; any other format is refused by name when the
# schema is checked (SCHEMA_FORMAT_UNSUPPORTED), never silently accepted as "annotation only".
FORMATS: Final = MappingProxyType({"date-time": is_date_time})


def _check_string(schema: Mapping, value: str, path: str, out: list, _stack: list) -> None:
    if not schema.get("minLength", 0) <= len(value) <= schema.get("maxLength", len(value)):
        out.append(Finding("SCHEMA_LENGTH", path))
    if "pattern" in schema and re.fullmatch(schema["pattern"], value) is None:
        out.append(Finding("SCHEMA_PATTERN", path))
    if "format" in schema and not FORMATS[schema["format"]](value):
        out.append(Finding("SCHEMA_FORMAT", path))


def _check_integer(schema: Mapping, value: int, path: str, out: list, _stack: list) -> None:
    if not schema.get("minimum", value) <= value <= schema.get("maximum", value):
        out.append(Finding("SCHEMA_RANGE", path))


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
            out.append(Finding("SCHEMA_TYPE", path))
            continue
        if "enum" in node and not _in_enum(item, node["enum"]):
            out.append(Finding("SCHEMA_ENUM", path))
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
            raise BenchError("SCHEMA_UNSUPPORTED")
        kind = node["type"]
        if kind == "string" and "format" in node and node["format"] not in FORMATS:
            raise BenchError("SCHEMA_FORMAT_UNSUPPORTED")
        allowed = _SCHEMA_KEYWORDS.get(kind, frozenset())
        if (not set(node) <= allowed or not _MANDATORY.get(kind, frozenset()) <= set(node)
                or not all(_KEYWORD_VALUES[name](value) for name, value in node.items())):
            raise BenchError("SCHEMA_UNSUPPORTED")
        if kind == "object":
            if not set(node["required"]) <= set(node["properties"]):
                raise BenchError("SCHEMA_UNSUPPORTED")
            stack.extend((child, depth + 1) for child in node["properties"].values())
        elif kind == "array":
            stack.append((node["items"], depth + 1))


# ================================================================================================
# 6. Fault catalogue and injector
# ================================================================================================

@dataclass(frozen=True, slots=True)
class FaultKind:
    stage: str  # where it strikes: a call, a status query, an inline publish, an acknowledgement
    sticky: bool  # strikes every attempt, whatever the count
    swept: bool  # part of the exhaustive sweep
    meaning: str


FAULT_KINDS: Final = MappingProxyType({
    "timeout_before_effect": FaultKind("call", False, True, "times out before the tool commits"),
    "timeout_after_commit": FaultKind("call", False, True, "the tool commits, the response is lost"),
    "crash_after_commit": FaultKind(
        "publish", False, True, "commits and answers, then dies before publishing the event"),
    "ack_lost": FaultKind(
        "ack", False, True, "the consumer acts, its ACK is lost, the broker redelivers"),
    "rate_limited": FaultKind("call", False, True, "429: refused before any effect"),
    "permanent_failure": FaultKind("call", True, True, "refused for good, on every attempt"),
    "duplicate_submit": FaultKind(
        "call", False, True, "an upstream layer submits the same request twice"),
    # On its own it changes nothing; paired with a lost answer it is what forces MANUAL.
    "status_unavailable": FaultKind("status", False, True, "the status query does not answer"),
})
SWEPT_KINDS: Final = tuple(name for name, kind in FAULT_KINDS.items() if kind.swept)


@dataclass(frozen=True, slots=True)
class Fault:
    kind: str
    tool: str
    times: int = 1  # how many matching attempts it strikes (a sticky kind ignores this)

    def to_json(self) -> list[Any]:
        return [self.kind, self.tool, self.times]


class FaultInjector:
    """Hands out each fault at its stage and tool until its count is spent."""

    def __init__(self, faults: tuple[Fault, ...]) -> None:
        for fault in faults:
            if (fault.kind not in FAULT_KINDS or fault.tool not in TOOLS
                    or type(fault.times) is not int or fault.times < 1):
                raise BenchError("FAULT_INVALID")
        self._faults = tuple(faults)
        self._hits = [0] * len(self._faults)

    def take(self, stage: str, tool: str) -> str | None:
        for index, fault in enumerate(self._faults):
            kind = FAULT_KINDS[fault.kind]
            if (kind.stage == stage and fault.tool == tool
                    and (kind.sticky or self._hits[index] < fault.times)):
                self._hits[index] += 1
                return fault.kind
        return None


# ================================================================================================
# 7. Sandbox: state, tools, outbox, relay, consumer
# ================================================================================================

@dataclass(frozen=True, slots=True)
class Response:
    ok: bool
    code: str | None = None
    data: Any = None


ORDER_STATES: Final = ("created", "confirmed", "cancelled")
CARRIER_STATUS: Final = MappingProxyType(
    {"created": "awaiting_confirmation", "confirmed": "label_created", "cancelled": "not_shipping"})


def _key_of(arguments: Any) -> str | None:
    key = arguments.get("idempotency_key") if isinstance(arguments, dict) else None
    return key if isinstance(key, str) else None


def _field(arguments: Mapping, name: str, kind: type) -> Any:
    # The sandbox reads what it needs and coerces nothing; the rest of the contract is the
    # orchestrator's job, which is exactly why a naive orchestrator gets effects through.
    value = arguments.get(name)
    if type(value) is not kind:
        raise BenchError("BAD_REQUEST", name)
    return value


def _positive(arguments: Mapping, name: str) -> int:
    value = _field(arguments, name, int)
    if value < 1:
        raise BenchError("BAD_REQUEST", name)
    return value


def _order(box: Sandbox, arguments: Mapping, *states: str) -> tuple[str, dict]:
    reference = _field(arguments, "order_ref", str)
    order = box.orders.get(reference)
    if order is None:
        raise BenchError("ORDER_NOT_FOUND")
    if order["status"] not in states:
        raise BenchError("ORDER_STATE")
    return reference, order


def _owned(table: dict, reference: str, status: str) -> list[str]:
    return sorted(ident for ident, row in table.items()
                  if row["order_ref"] == reference and row["status"] == status)


def _receipt(reference: str, *records: tuple[str, str, str]) -> dict[str, Any]:
    # A business receipt names every record it touched and the status it left: reconciliation
    # compares these claims with the persisted state, never the orchestrator's own belief.
    return {"order_ref": reference, "records": [list(record) for record in records]}


def _create_order(box: Sandbox, arguments: Mapping) -> tuple[dict, str]:
    reference = _field(arguments, "order_ref", str)
    line = _field(arguments, "line", dict)
    sku, quantity = _field(line, "sku", str), _positive(line, "quantity")
    amount = _positive(arguments, "amount_cents")
    if reference in box.orders:
        raise BenchError("ORDER_EXISTS")  # the one unique constraint a real order table has
    box.orders[reference] = {"amount_cents": amount, "quantity": quantity, "sku": sku,
                             "status": "created"}
    return _receipt(reference, ("orders", reference, "created")), "order_created"


def _reserve_inventory(box: Sandbox, arguments: Mapping) -> tuple[dict, str]:
    reference, _ = _order(box, arguments, "created")
    sku, quantity = _field(arguments, "sku", str), _positive(arguments, "quantity")
    if box.inventory.get(sku, 0) < quantity:
        raise BenchError("INSUFFICIENT_STOCK")
    ident = box.next_id("RES")
    box.inventory[sku] -= quantity
    box.reservations[ident] = {"order_ref": reference, "quantity": quantity, "sku": sku,
                               "status": "held"}
    return _receipt(reference, ("reservations", ident, "held")), "inventory_reserved"


def _charge_payment(box: Sandbox, arguments: Mapping) -> tuple[dict, str]:
    reference, order = _order(box, arguments, "created")
    amount = _positive(arguments, "amount_cents")
    if amount != order["amount_cents"]:
        raise BenchError("AMOUNT_MISMATCH")
    ident = box.next_id("CH")
    box.charges[ident] = {"amount_cents": amount, "key": _key_of(arguments), "order_ref": reference,
                          "status": "captured"}
    return _receipt(reference, ("charges", ident, "captured")), "payment_captured"


def _confirm_order(box: Sandbox, arguments: Mapping) -> tuple[dict, str]:
    reference, order = _order(box, arguments, "created")
    if not (_owned(box.reservations, reference, "held") and _owned(box.charges, reference, "captured")):
        raise BenchError("ORDER_NOT_READY")
    order["status"] = "confirmed"
    return _receipt(reference, ("orders", reference, "confirmed")), "order_confirmed"


def _release_inventory(box: Sandbox, arguments: Mapping) -> tuple[dict, str]:
    reference, _ = _order(box, arguments, *ORDER_STATES)
    held = _owned(box.reservations, reference, "held")
    if not held:
        raise BenchError("NOTHING_TO_RELEASE")
    for ident in held:
        reservation = box.reservations[ident]
        reservation["status"] = "released"
        box.inventory[reservation["sku"]] += reservation["quantity"]
    records = (("reservations", ident, "released") for ident in held)
    return _receipt(reference, *records), "inventory_released"


def _refund_payment(box: Sandbox, arguments: Mapping) -> tuple[dict, str]:
    reference, _ = _order(box, arguments, *ORDER_STATES)
    amount = _positive(arguments, "amount_cents")
    captured = [ident for ident in _owned(box.charges, reference, "captured")
                if box.charges[ident]["amount_cents"] == amount]
    if not captured:
        raise BenchError("NOTHING_TO_REFUND")
    box.charges[captured[0]]["status"] = "refunded"
    return _receipt(reference, ("charges", captured[0], "refunded")), "payment_refunded"


def _cancel_order(box: Sandbox, arguments: Mapping) -> tuple[dict, str]:
    reference, order = _order(box, arguments, "created", "confirmed")
    order["status"] = "cancelled"
    return _receipt(reference, ("orders", reference, "cancelled")), "order_cancelled"


# An order only moves forward, so its status is its version: the optimistic lock of a call that
# names the version it read.
ORDER_VERSIONS: Final = MappingProxyType({"created": 1, "confirmed": 2, "cancelled": 3})


def _schedule_delivery(box: Sandbox, arguments: Mapping) -> tuple[dict, str]:
    reference, order = _order(box, arguments, "confirmed")
    if _field(arguments, "order_version", int) != ORDER_VERSIONS[order["status"]]:
        raise BenchError("VERSION_CONFLICT")
    order["delivery_window"] = _field(arguments, "window_start", str)
    return _receipt(reference, ("orders", reference, "confirmed")), "delivery_scheduled"


def _query_logistics(box: Sandbox, arguments: Mapping) -> tuple[dict, None]:
    reference, order = _order(box, arguments, *ORDER_STATES)
    status = order["status"]
    return {"carrier_status": CARRIER_STATUS[status], "order_ref": reference,
            "order_status": status, "records": []}, None


# A handler checks everything before it changes anything, then returns its receipt and the event
# type of the change (None for a read). The sandbox writes the change, the outbox row and the
# idempotency record with no fault point in between: that is its one local transaction.
HANDLERS: Final = MappingProxyType({
    "create_order": _create_order,
    "reserve_inventory": _reserve_inventory,
    "charge_payment": _charge_payment,
    "confirm_order": _confirm_order,
    "release_inventory": _release_inventory,
    "cancel_order": _cancel_order,
    "refund_payment": _refund_payment,
    "query_logistics": _query_logistics,
    "schedule_delivery": _schedule_delivery,
})


class Sandbox:
    """In-memory orders, stock, charges, outbox, relay and consumer: one instance per run."""

    def __init__(self, faults: tuple[Fault, ...] = (), *, consumer_dedup: bool) -> None:
        self.orders: dict[str, dict] = {}
        self.reservations: dict[str, dict] = {}
        self.charges: dict[str, dict] = {}
        self.inventory = dict(INITIAL_STOCK)
        self.outbox: dict[str, dict] = {}
        self.consumed: dict[str, int] = {}
        self.deliveries: dict[str, int] = {}
        self.ledger: dict[str, dict[str, int]] = {}
        self.effects: list[dict] = []
        self.trace: list[dict] = []
        self._queue: list[str] = []
        self._inbox: set[str] = set()
        self._store: dict[tuple[str, str], dict] = {}
        self._serial: Counter[str] = Counter()
        self._dedup = consumer_dedup
        self._faults = FaultInjector(tuple(faults))

    # -- tool calls -------------------------------------------------------------------------

    def call(self, tool: str, arguments: Any) -> Response:
        key = _key_of(arguments)
        fault = self._faults.take("call", tool)
        self.count(tool, key, "attempted")
        self.note("call", tool=tool, key=key, fault=fault)
        response = SUBMISSIONS[fault](self, tool, arguments, key)
        self.note("answer", tool=tool, key=key, ok=response.ok, code=response.code)
        return response

    def query_status(self, tool: str, key: str) -> Response:
        """What the tool's own records say about a key: committed (with the receipt) or absent."""
        fault = self._faults.take("status", tool)
        stored = self._store.get((tool, key))
        if fault is not None:
            response = Response(False, "STATUS_UNAVAILABLE")
        elif stored is None:
            response = Response(True, data={"state": "absent"})
        else:
            response = Response(True, data={"receipt": copy.deepcopy(stored["receipt"]), "state": "committed"})
        answer = response.code if fault is not None else response.data["state"]
        self.note("status_query", answer=answer, key=key, tool=tool)
        return response

    def execute(self, tool: str, arguments: Any, key: str | None) -> Response:
        handler = HANDLERS.get(tool)
        if handler is None:
            return Response(False, "TOOL_UNKNOWN")
        if not isinstance(arguments, dict):
            return Response(False, "BAD_REQUEST")
        intent = canonical_sha256({n: v for n, v in arguments.items() if n != "idempotency_key"})
        stored = self._store.get((tool, key))  # keyless calls are never stored, so never replayed
        if stored is not None:
            return self._replay(tool, key, stored, intent)
        try:
            receipt, event_type = handler(self, arguments)
        except BenchError as refusal:
            return Response(False, refusal.code)
        if event_type is not None:
            self._commit(tool, key, intent, receipt, event_type)
        return Response(True, data=receipt)

    def _replay(self, tool: str, key: str | None, stored: dict, intent: str) -> Response:
        if stored["intent"] != intent:
            self.note("key_conflict", tool=tool, key=key)
            return Response(False, "IDEMPOTENCY_CONFLICT")  # same key, other intent: never execute
        self.note("replay", tool=tool, key=key)
        return Response(True, data=copy.deepcopy(stored["receipt"]))

    def _commit(self, tool: str, key: str | None, intent: str, receipt: dict, event_type: str) -> None:
        event_id = self.next_id("EV")
        self.outbox[event_id] = {"order_ref": receipt["order_ref"], "published": False,
                                 "source": tool, "type": event_type}
        self.count(tool, key, "effects")
        self.note("commit", event=event_id, key=key, tool=tool)
        self.effects.append({"event": event_id, "key": key, "receipt": canonical_sha256(receipt),
                             "tool": tool})
        if key is not None:
            self._store[(tool, key)] = {"intent": intent, "receipt": copy.deepcopy(receipt)}
        self._publish_inline(event_id)

    # -- events: inline publish, relay, consumer ---------------------------------------------

    def _publish_inline(self, event_id: str) -> None:
        if self._faults.take("publish", self.outbox[event_id]["source"]) is not None:
            self.note("crash", event=event_id)  # committed, answered, never published
            return
        self._publish(event_id, "inline")

    def _publish(self, event_id: str, via: str) -> None:
        self.outbox[event_id]["published"] = True
        self._queue.append(event_id)
        self.note("publish", event=event_id, via=via)

    def relay(self) -> int:
        """Publish every outbox row the inline publisher never got to; returns how many."""
        pending = [ident for ident, row in self.outbox.items() if not row["published"]]
        for ident in pending:
            self._publish(ident, "relay")
        return len(pending)

    def drain(self) -> None:
        """Deliver every queued event to the consumer, redelivering whatever is not ACKed."""
        while self._queue:
            event_id = self._queue.pop(0)
            self.deliveries[event_id] = self.deliveries.get(event_id, 0) + 1
            if self._dedup and event_id in self._inbox:
                self.note("duplicate_ignored", event=event_id)
            else:
                self._inbox.add(event_id)
                self.consumed[event_id] = self.consumed.get(event_id, 0) + 1
                self.note("consume", event=event_id)
            self._acknowledge(event_id)

    def _acknowledge(self, event_id: str) -> None:
        if self._faults.take("ack", self.outbox[event_id]["source"]) is None:
            return
        if self.deliveries[event_id] < MAX_DELIVERIES:
            self.note("ack_lost", event=event_id)
            self._queue.append(event_id)
        else:
            self.note("dead_letter", event=event_id)

    # -- bookkeeping -------------------------------------------------------------------------

    def next_id(self, prefix: str) -> str:
        self._serial[prefix] += 1
        return f"{prefix}-{self._serial[prefix]:04d}"

    def count(self, tool: str, key: str | None, column: str) -> None:
        if key is None:
            return  # a keyless call has no ledger row: nothing ties its attempts together
        row = self.ledger.setdefault(f"{tool}|{key}", {"attempted": 0, "effects": 0})
        row[column] += 1

    def note(self, what: str, **fields: Any) -> None:
        self.trace.append({"seq": len(self.trace) + 1, "what": what, **fields})

    def table(self, name: str) -> dict[str, dict]:
        """A business table a receipt may name; anything else reads as empty."""
        return {"charges": self.charges, "orders": self.orders,
                "reservations": self.reservations}.get(name, {})

    def snapshot(self) -> dict[str, Any]:
        return copy.deepcopy({
            "charges": self.charges, "consumed": self.consumed, "deliveries": self.deliveries,
            "inventory": self.inventory, "orders": self.orders, "outbox": self.outbox,
            "reservations": self.reservations,
        })


def _submit_plain(box: Sandbox, tool: str, arguments: Any, key: str | None) -> Response:
    return box.execute(tool, arguments, key)


def _submit_refused(code: str) -> Callable[..., Response]:
    return lambda _box, _tool, _arguments, _key: Response(False, code)


def _submit_response_lost(box: Sandbox, tool: str, arguments: Any, key: str | None) -> Response:
    box.execute(tool, arguments, key)
    return Response(False, "TIMEOUT")


def _submit_twice(box: Sandbox, tool: str, arguments: Any, key: str | None) -> Response:
    box.execute(tool, arguments, key)
    box.count(tool, key, "attempted")
    box.note("duplicate_submit", tool=tool, key=key)
    return box.execute(tool, arguments, key)


# What a submission does under each call-stage fault (None: no fault).
SUBMISSIONS: Final = MappingProxyType({
    None: _submit_plain,
    "timeout_before_effect": _submit_refused("TIMEOUT"),
    "rate_limited": _submit_refused("RATE_LIMITED"),
    "permanent_failure": _submit_refused("REJECTED"),
    "timeout_after_commit": _submit_response_lost,
    "duplicate_submit": _submit_twice,
})


def seed_confirmed_order(box: Sandbox) -> None:
    """History for the scorer cases: one confirmed, paid order whose events were consumed."""
    box.orders[SEEDED_ORDER] = {"amount_cents": 4999, "quantity": 1, "sku": "SKU-BLUE",
                                "status": "confirmed"}
    box.reservations[box.next_id("RES")] = {"order_ref": SEEDED_ORDER, "quantity": 1,
                                            "sku": "SKU-BLUE", "status": "held"}
    box.charges[box.next_id("CH")] = {"amount_cents": 4999, "key": "seed-charge-20481",
                                      "order_ref": SEEDED_ORDER, "status": "captured"}
    box.inventory["SKU-BLUE"] -= 1


# ================================================================================================
# 8. Expectations and plan validation
# ================================================================================================

@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: Any  # the provider's JSON string; anything else is refused when decoded

    def to_json(self) -> dict[str, Any]:
        return {"arguments": self.arguments, "id": self.id, "name": self.name}


@dataclass(frozen=True, slots=True)
class ExpectedCall:
    name: str
    arguments: Mapping[str, Any]  # the values the request fixed; others are the model's choice


@dataclass(frozen=True, slots=True)
class Expectation:
    """What the request needs: the call set, the order edges between calls, the forbidden tools."""

    name: str
    calls: tuple[ExpectedCall, ...]
    edges: tuple[tuple[int, int], ...] = ()  # (before, after), indices into calls
    forbidden: frozenset[str] = frozenset()
    exclusive: tuple[tuple[str, str], ...] = ()  # tool pairs that must never both appear
    # What the request knows that the calls must agree with; every key optional (CONTEXT_CHECKS):
    # customer (who asks), allowed_tools (what they may call), confirmed (a second confirmation
    # was given), orders ({order_ref: {currency, version}} for orders that exist already).
    context: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))


def _same_json(left: Any, right: Any) -> bool:
    # Exact: canonical bytes differ for 1 and true, for 1 and 1.0, for "1" and 1.
    return canonical_json(_thaw(left)) == canonical_json(_thaw(right))


def _has_cycle(count: int, edges: tuple[tuple[int, int], ...]) -> bool:
    indegree = [0] * count
    after: list[list[int]] = [[] for _ in range(count)]
    for before, later in edges:
        after[before].append(later)
        indegree[later] += 1
    ready = [index for index in range(count) if indegree[index] == 0]
    seen = 0
    while ready:
        index = ready.pop()
        seen += 1
        for later in after[index]:
            indegree[later] -= 1
            if indegree[later] == 0:
                ready.append(later)
    return seen != count


def check_expectation(expectation: Any, tools: Mapping[str, ToolContract] = TOOLS) -> None:
    """Refuse an expectation with unknown tools, bad edges, a cycle or a forbidden expected call."""
    if not isinstance(expectation, Expectation):
        raise BenchError("EXPECTATION_INVALID")
    calls, count = expectation.calls, len(expectation.calls)
    well_formed = (
        count <= MAX_EXPECTED_CALLS
        and all(isinstance(call, ExpectedCall) and call.name in tools
                and isinstance(call.arguments, Mapping) for call in calls)
        and all(isinstance(edge, tuple) and len(edge) == 2
                and all(type(end) is int and 0 <= end < count for end in edge)
                and edge[0] != edge[1] for edge in expectation.edges)
        and isinstance(expectation.forbidden, frozenset)
        and not expectation.forbidden & {call.name for call in calls}
        and all(isinstance(pair, tuple) and len(pair) == 2 and all(end in tools for end in pair)
                and pair[0] != pair[1] for pair in expectation.exclusive)
        and _context_well_formed(expectation.context, tools)
    )
    if not well_formed or _has_cycle(count, expectation.edges):
        raise BenchError("EXPECTATION_INVALID")
    try:
        canonical_json([_thaw(call.arguments) for call in calls])
    except (TypeError, ValueError):
        raise BenchError("EXPECTATION_INVALID") from None  # fixed values must be plain JSON


def _context_well_formed(context: Any, tools: Mapping[str, ToolContract]) -> bool:
    if not isinstance(context, Mapping) or not set(context) <= set(CONTEXT_FIELDS):
        return False
    return all(CONTEXT_FIELDS[name](value, tools) for name, value in context.items())


def _orders_context(value: Any, _tools: Any) -> bool:
    return isinstance(value, Mapping) and all(
        isinstance(ref, str) and isinstance(row, Mapping) and set(row) == {"currency", "version"}
        and isinstance(row["currency"], str) and type(row["version"]) is int for ref, row in value.items())


# What each context field may hold; anything else makes the expectation invalid.
CONTEXT_FIELDS: Final = MappingProxyType({
    "customer": lambda value, _tools: isinstance(value, str),
    "allowed_tools": lambda value, tools: (isinstance(value, (frozenset, tuple))
                                           and all(name in tools for name in value)),
    "confirmed": lambda value, _tools: type(value) is bool,
    "orders": _orders_context,
})


@dataclass(frozen=True, slots=True)
class CallCheck:
    parsed: bool
    arguments: Any
    findings: tuple[Finding, ...]


def vet_call(call: ToolCall, index: int, tools: Mapping[str, ToolContract] = TOOLS) -> CallCheck:
    """Decode one call and check it against its tool's contract and the key policy."""
    try:
        arguments = decode_arguments(call.arguments)
    except BenchError as error:
        return CallCheck(False, None, (Finding(error.code, "", index),))
    tool = tools.get(call.name)
    if tool is None:
        return CallCheck(True, arguments, (Finding("TOOL_UNKNOWN", "", index),))
    found = [Finding(item.code, item.path, index) for item in validate_arguments(tool.schema, arguments)]
    if tool.side_effect and "idempotency_key" not in arguments:
        found.append(Finding("KEY_MISSING", "/idempotency_key", index))
    return CallCheck(True, arguments, tuple(found))


def _positional_matches(names: list[str], expectation: Expectation) -> dict[int, int]:
    """Expected index -> proposed index: the k-th expected call of a name is its k-th proposal."""
    proposed: dict[str, list[int]] = {}
    for index, name in enumerate(names):
        proposed.setdefault(name, []).append(index)
    matches: dict[int, int] = {}
    for expected_index, call in enumerate(expectation.calls):
        queue = proposed.get(call.name, [])
        if queue:
            matches[expected_index] = queue.pop(0)
    return matches


def _call_set_findings(names: list[str], expectation: Expectation) -> list[Finding]:
    wanted = Counter(call.name for call in expectation.calls)
    found = [Finding("CALL_MISSING", f"/{name}") for name in sorted(wanted)
             for _ in range(wanted[name] - names.count(name))]
    seen: Counter[str] = Counter()
    for index, name in enumerate(names):
        seen[name] += 1
        if seen[name] > wanted[name]:
            code = "CALL_FORBIDDEN" if name in expectation.forbidden else "CALL_UNEXPECTED"
            found.append(Finding(code, f"/{name}", index))
    return found


def _order_findings(names: list[str], expectation: Expectation, matches: dict[int, int]) -> list[Finding]:
    found = []
    for before, later in expectation.edges:
        if before in matches and later in matches and matches[before] > matches[later]:
            path = f"/{expectation.calls[before].name}->{expectation.calls[later].name}"
            found.append(Finding("DEPENDENCY_ORDER", path, matches[later]))
    return found


def _argument_findings(checks: list[CallCheck], expectation: Expectation,
                       matches: dict[int, int]) -> list[Finding]:
    found = []
    for expected_index, proposed_index in sorted(matches.items()):
        arguments = checks[proposed_index].arguments
        if not isinstance(arguments, dict):
            continue  # a call that did not decode already has its finding
        for name, value in sorted(expectation.calls[expected_index].arguments.items()):
            if name not in arguments or not _same_json(arguments[name], value):
                found.append(Finding("ARGUMENT_MISMATCH", f"/{name}", proposed_index))
    return found


def _key_findings(checks: list[CallCheck]) -> list[Finding]:
    found, owners = [], {}
    for index, check in enumerate(checks):
        key = _key_of(check.arguments)
        if key is not None and key in owners:
            found.append(Finding("KEY_REUSED", "/idempotency_key", index))
        owners.setdefault(key, index)
    return found


def _decoded(checks: list[CallCheck]) -> list[dict]:
    return [check.arguments if isinstance(check.arguments, dict) else {} for check in checks]


def _call_id_findings(ids: list[Any], _names: list[Any], _args: list[dict], _expectation: Expectation
                      ) -> list[Finding]:
    # A provider call id correlates a result with its call; two calls sharing one would get
    # each other's results.
    seen: set[Any] = set()
    found = []
    for index, ident in enumerate(ids):
        if ident is not None and ident in seen:
            found.append(Finding("CALL_ID_REUSED", "/id", index))
        seen.add(ident)
    return found


def _order_currency(names: list[Any], args: list[dict], context: Mapping, reference: Any) -> Any:
    for name, arguments in zip(names, args):
        if name == "create_order" and arguments.get("order_ref") == reference:
            return arguments.get("currency")  # an order this plan creates carries its own currency
    known = context.get("orders", {}).get(reference) if isinstance(reference, str) else None
    return None if known is None else known["currency"]


def _currency_findings(_ids: list[Any], names: list[Any], args: list[dict], expectation: Expectation
                       ) -> list[Finding]:
    found = []
    for index, (name, arguments) in enumerate(zip(names, args)):
        if name == "charge_payment" and "currency" in arguments:
            currency = _order_currency(names, args, expectation.context, arguments.get("order_ref"))
            if currency is not None and currency != arguments["currency"]:
                found.append(Finding("CURRENCY_MISMATCH", "/currency", index))
    return found


def _customer_findings(_ids: list[Any], names: list[Any], args: list[dict], expectation: Expectation
                       ) -> list[Finding]:
    context, found = expectation.context, []
    for index, (name, arguments) in enumerate(zip(names, args)):
        if "allowed_tools" in context and name not in context["allowed_tools"]:
            found.append(Finding("CUSTOMER_NOT_PERMITTED", f"/{name}", index))
        customer = arguments.get("customer")
        if ("customer" in context and name == "create_order" and isinstance(customer, dict)
                and customer.get("id") != context["customer"]):
            found.append(Finding("CUSTOMER_MISMATCH", "/customer/id", index))
    return found


def _confirmation_findings(_ids: list[Any], names: list[Any], args: list[dict], expectation: Expectation
                           ) -> list[Finding]:
    if expectation.context.get("confirmed") is True:
        return []
    return [Finding("CONFIRMATION_MISSING", "/amount_cents", index)
            for index, (name, arguments) in enumerate(zip(names, args))
            if name in IRREVERSIBLE_TOOLS and type(arguments.get("amount_cents")) is int
            and arguments["amount_cents"] >= HIGH_VALUE_CENTS]


def _version_findings(_ids: list[Any], names: list[Any], args: list[dict], expectation: Expectation
                      ) -> list[Finding]:
    orders, found = expectation.context.get("orders", {}), []
    for index, arguments in enumerate(args):
        reference = arguments.get("order_ref")
        known = orders.get(reference) if isinstance(reference, str) else None
        if "order_version" in arguments and known is not None and arguments["order_version"] != known["version"]:
            found.append(Finding("VERSION_STALE", "/order_version", index))
    return found


def _exclusive_findings(_ids: list[Any], names: list[Any], _args: list[dict], expectation: Expectation
                        ) -> list[Finding]:
    return [Finding("CALLS_EXCLUSIVE", f"/{first}+{second}", names.index(second))
            for first, second in expectation.exclusive if first in names and second in names]


# Money that moves out cannot be taken back quietly: above HIGH_VALUE_CENTS it needs a confirmation.
IRREVERSIBLE_TOOLS: Final = frozenset({"charge_payment", "refund_payment"})
# The checks a request's context makes possible, each over the whole plan. The guard refuses a
# plan with any finding; the scorer vetoes it with the finding's code as the named reason.
BUSINESS_CHECKS: Final = (_call_id_findings, _currency_findings, _customer_findings,
                          _confirmation_findings, _version_findings, _exclusive_findings)


def business_findings(ids: list[Any], names: list[Any], checks: list[CallCheck],
                      expectation: Expectation) -> list[Finding]:
    args = _decoded(checks)
    return [finding for check in BUSINESS_CHECKS for finding in check(ids, names, args, expectation)]


def validate_plan(calls: tuple[ToolCall, ...], expectation: Expectation,
                  tools: Mapping[str, ToolContract] = TOOLS
                  ) -> tuple[tuple[tuple[str, Any], ...], tuple[Finding, ...]]:
    """The whole plan, before any tool starts: contracts, keys, call set, order, fixed values."""
    if len(calls) > MAX_CALLS:
        return (), (Finding("PLAN_TOO_MANY_CALLS"),)
    checks = [vet_call(call, index, tools) for index, call in enumerate(calls)]
    names = [call.name for call in calls]
    matches = _positional_matches(names, expectation)
    found = [finding for check in checks for finding in check.findings]
    found += _key_findings(checks)
    found += _call_set_findings(names, expectation)
    found += _order_findings(names, expectation, matches)
    found += _argument_findings(checks, expectation, matches)
    found += business_findings([call.id for call in calls], names, checks, expectation)
    plan = tuple((call.name, check.arguments) for call, check in zip(calls, checks))
    return plan, tuple(found)


# ================================================================================================
# 9. Journal and orchestrators
# ================================================================================================

class Journal:
    """What an orchestrator knew and did: acknowledgements, unknowns, compensations, receipts."""

    def __init__(self) -> None:
        self.acks: dict[str, int] = {}
        self.receipts: list[dict] = []
        self.digests: set[str] = set()
        self.unknowns: list[dict] = []
        self.compensation: list[str] = []

    def acknowledge(self, tool: str, key: str | None, receipt: Any, *, distinct: bool) -> None:
        # The guarded side counts a receipt once however often it is replayed; the naive side
        # counts every success reply as one more effect (a reply is not a receipt).
        digest = canonical_sha256(receipt)
        if distinct and digest in self.digests:
            return
        self.digests.add(digest)
        self.receipts.append(receipt)
        if key is not None:
            ledger = f"{tool}|{key}"
            self.acks[ledger] = self.acks.get(ledger, 0) + 1

    def note_unknown(self, tool: str, key: str | None, attempt: int) -> None:
        self.unknowns.append({"attempt": attempt, "key": key, "resolution": None, "tool": tool})

    def resolve(self, tool: str, key: str | None, how: str) -> None:
        for unknown in self.unknowns:
            if unknown["tool"] == tool and unknown["key"] == key and unknown["resolution"] is None:
                unknown["resolution"] = how

    def any_pending(self) -> bool:
        return any(unknown["resolution"] is None for unknown in self.unknowns)

    def pending(self, tool: str, key: str | None) -> bool:
        return any(unknown["tool"] == tool and unknown["key"] == key and unknown["resolution"] is None
                   for unknown in self.unknowns)


@dataclass(frozen=True, slots=True)
class RunResult:
    lifecycle: str | None  # None for the naive orchestrator, which keeps no lifecycle
    transitions: list[list[str]]
    outcome: str
    findings: tuple[Finding, ...]
    manual: Mapping[str, Any] | None
    journal: Journal


# -- naive ---------------------------------------------------------------------------------------

def _with_fresh_key(arguments: dict, rng: random.Random) -> dict:
    if "idempotency_key" not in arguments:
        return arguments
    return {**arguments, "idempotency_key": f"nv-{rng.getrandbits(64):016x}"}


def _naive_step(box: Sandbox, journal: Journal, tool: str, arguments: dict, rng: random.Random) -> bool:
    for attempt in range(1, NAIVE_MAX_ATTEMPTS + 1):
        response = box.call(tool, arguments)
        if response.ok:
            journal.acknowledge(tool, _key_of(arguments), response.data, distinct=False)
            return True
        if classify(response.code) == UNKNOWN:
            journal.note_unknown(tool, _key_of(arguments), attempt)  # and never resolved
        arguments = _with_fresh_key(arguments, rng)  # "try again" with a new identity
    return False


def run_naive(calls: tuple[ToolCall, ...], box: Sandbox, _expectation: Expectation,
              rng: random.Random) -> RunResult:
    """Run calls as they come: no validation, fresh keys on retry, no compensation, no relay."""
    journal = Journal()
    outcome = "claimed_complete"
    for call in calls:
        try:
            arguments = decode_arguments(call.arguments)
        except BenchError:
            outcome = "aborted"
            break
        if not _naive_step(box, journal, call.name, arguments, rng):
            outcome = "aborted"
            break
    box.drain()
    return RunResult(None, [], outcome, (), None, journal)


# -- guarded -------------------------------------------------------------------------------------

def _resolve_by_status(box: Sandbox, journal: Journal, tool: str, key: str) -> bool:
    """True when the status query proves the effect committed (its receipt is then acknowledged)."""
    status = box.query_status(tool, key)
    if not status.ok:
        return False  # still unknown; the next attempt is a same-key replay
    state = status.data["state"]
    journal.resolve(tool, key, f"status_query:{state}")
    if state != "committed":
        return False  # proven absent: resubmitting the same key is safe
    journal.acknowledge(tool, key, status.data["receipt"], distinct=True)
    return True


def call_with_recovery(box: Sandbox, journal: Journal, tool: str, arguments: dict, *,
                       max_attempts: int = GUARDED_MAX_ATTEMPTS) -> str:
    """One step with a stable key: 'ok', 'failed' (proven not done) or 'unknown' (unresolved)."""
    key = _key_of(arguments)
    for attempt in range(1, max_attempts + 1):
        response = box.call(tool, arguments)
        if response.ok:
            journal.resolve(tool, key, "same_key_replay")
            journal.acknowledge(tool, key, response.data, distinct=True)
            return "ok"
        kind = classify(response.code)
        if kind == UNKNOWN and key is not None:
            journal.note_unknown(tool, key, attempt)
            if _resolve_by_status(box, journal, tool, key):
                return "ok"
        elif kind == PERMANENT:
            break  # refused for good; but an earlier attempt's outcome may still be unknown
        # RETRY, a resolved-absent unknown, or a timed-out read (no effect to duplicate): go again
    # A refusal now says nothing about an earlier attempt that timed out with the status service
    # down: that attempt may have committed, so the step stays unknown, never "failed".
    return "unknown" if journal.pending(tool, key) else "failed"


def _undo_key(tool: str, arguments: dict) -> str:
    # Stable across retries and restarts: derived from the step it undoes, never drawn fresh.
    return "undo-" + canonical_sha256([tool, arguments.get("idempotency_key")])[:32]


def _cancel_arguments(arguments: dict) -> dict:
    return {"idempotency_key": _undo_key("create_order", arguments),
            "order_ref": arguments["order_ref"], "reason": "saga_compensation"}


def _release_arguments(arguments: dict) -> dict:
    return {"idempotency_key": _undo_key("reserve_inventory", arguments),
            "order_ref": arguments["order_ref"]}


def _refund_arguments(arguments: dict) -> dict:
    return {"amount_cents": arguments["amount_cents"], "idempotency_key": _undo_key("charge_payment", arguments),
            "order_ref": arguments["order_ref"], "reason": "other"}


# The saga: each forward step's compensating tool and how its arguments follow from the step.
COMPENSATIONS: Final = MappingProxyType({
    "create_order": ("cancel_order", _cancel_arguments),
    "reserve_inventory": ("release_inventory", _release_arguments),
    "charge_payment": ("refund_payment", _refund_arguments),
})


def _compensate(box: Sandbox, journal: Journal, done: list[tuple[str, dict]]) -> str | None:
    """Undo the done steps in reverse order; returns the compensation that failed, if any."""
    for tool, arguments in reversed(done):
        if tool not in COMPENSATIONS:
            continue
        undo, build = COMPENSATIONS[tool]
        journal.compensation.append(undo)
        if call_with_recovery(box, journal, undo, build(arguments)) != "ok":
            return undo
    return None


def _manual_case(reason: str, tool: str | None, plan: tuple[tuple[str, Any], ...]) -> dict[str, Any]:
    orders = sorted({arguments["order_ref"] for _, arguments in plan if "order_ref" in arguments})
    return {"orders": orders, "reason": reason, "tool": tool}


def _execute_plan(box: Sandbox, journal: Journal, life: Lifecycle,
                  plan: tuple[tuple[str, Any], ...]) -> tuple[str, dict | None]:
    done: list[tuple[str, dict]] = []
    for tool, arguments in plan:
        status = call_with_recovery(box, journal, tool, arguments)
        if status == "ok":
            done.append((tool, arguments))
            continue
        if status == "unknown" or journal.any_pending():
            # Compensating while any outcome is unknown would guess; a human decides.
            return "manual", _manual_case("UNKNOWN_UNRESOLVED", tool, plan)
        life.fire("fail")
        failed = _compensate(box, journal, done)
        if failed is not None:
            return "manual", _manual_case("COMPENSATION_FAILED", failed, plan)
        return ("compensated" if done else "failed"), None
    return "completed", None


def reconcile(box: Sandbox, journal: Journal) -> list[dict[str, Any]]:
    """Compare the persisted state with the receipts; an empty list means they agree."""
    claims: dict[tuple[str, str], str] = {}
    for receipt in journal.receipts:
        for table, ident, status in receipt.get("records", ()):
            claims[(table, ident)] = status  # a later receipt supersedes an earlier claim
    found = {claim: box.table(claim[0]).get(claim[1], {}).get("status") for claim in claims}
    mismatches = [{"claimed": status, "found": found[claim], "record": f"{claim[0]}/{claim[1]}"}
                  for claim, status in sorted(claims.items()) if found[claim] != status]
    mismatches += [{"claimed": None, "found": effect["tool"], "record": f"effects/{effect['event']}"}
                   for effect in box.effects if effect["receipt"] not in journal.digests]
    mismatches += [{"claimed": 1, "found": box.consumed.get(ident, 0), "record": f"outbox/{ident}"}
                   for ident in box.outbox if box.consumed.get(ident, 0) != 1]
    return mismatches


def run_guarded(calls: tuple[ToolCall, ...], box: Sandbox, expectation: Expectation,
                _rng: random.Random) -> RunResult:
    """Validate the whole plan, execute with stable keys, compensate, relay, reconcile."""
    life, journal = Lifecycle(), Journal()
    plan, findings = validate_plan(calls, expectation)
    if findings:
        life.fire("refuse")
        return RunResult(life.state, life.history(), "refused", findings, None, journal)
    life.fire("accept")
    life.fire("start")
    outcome, manual = _execute_plan(box, journal, life, plan)
    box.relay()  # after any run, not only after a known crash: a crash is not always visible
    box.drain()
    if manual is None:
        mismatches = reconcile(box, journal)
        if mismatches:
            manual = {**_manual_case("RECONCILIATION_MISMATCH", None, plan), "mismatches": mismatches}
            outcome = "manual"
    life.fire("escalate" if manual is not None else "reconcile")
    return RunResult(life.state, life.history(), outcome, (), manual, journal)


@dataclass(frozen=True, slots=True)
class Orchestrator:
    consumer_dedup: bool
    run: Callable[..., RunResult]


ORCHESTRATORS: Final = MappingProxyType({
    "guarded": Orchestrator(True, run_guarded),
    "naive": Orchestrator(False, run_naive),
})


# -- a user's orchestrator -----------------------------------------------------------------------

class ToolPort:
    """Everything a user's orchestrator may touch, and the log the bench judges it by.

    The interface: a callable `orchestrate(calls, port) -> str`. `calls` are the proposal's
    ToolCall values (id, name, arguments as the provider's JSON text), untrusted. Through the port
    it may `call(name, arguments)` a tool, `query_status(name, key)` after a timeout, and `relay()`
    the outbox; each answer is a Response(ok, code, data). It returns what it believes happened:
    "completed", "compensated", "failed", "refused" or "manual" (an escalation to a human, naming
    every order of the plan). The bench never trusts that word: it judges the state left behind.
    Helpers, optional: `decode(text)` (the bench's strict decoder), `findings(calls)` (the bench's
    own plan validation, as codes), `compensation(name, arguments)` (the saga's undo step), and
    `schemas` (every tool's JSON Schema). The consumer deduplicates, as infrastructure would.
    """

    def __init__(self, box: Sandbox, expectation: Expectation) -> None:
        self._box = box
        self._expectation = expectation
        self.journal = Journal()
        self.schemas = tool_schemas()

    def call(self, name: str, arguments: Any) -> Response:
        arguments = copy.deepcopy(arguments)  # the orchestrator keeps no handle on sandbox state
        key = _key_of(arguments)
        response = self._box.call(name, arguments)
        if response.ok:
            self.journal.resolve(name, key, "same_key_replay")
            self.journal.acknowledge(name, key, response.data, distinct=True)
        elif classify(response.code) == UNKNOWN and key is not None:
            self.journal.note_unknown(name, key, len(self.journal.unknowns) + 1)
        return Response(response.ok, response.code, copy.deepcopy(response.data))

    def query_status(self, name: str, key: str) -> Response:
        response = self._box.query_status(name, key)
        if response.ok:
            self.journal.resolve(name, key, f"status_query:{response.data['state']}")
            if response.data["state"] == "committed":
                self.journal.acknowledge(name, key, response.data["receipt"], distinct=True)
        return Response(response.ok, response.code, copy.deepcopy(response.data))

    def relay(self) -> int:
        return self._box.relay()

    def decode(self, text: Any) -> dict[str, Any]:
        return decode_arguments(text)

    def findings(self, calls: tuple[ToolCall, ...]) -> list[str]:
        return [finding.code for finding in validate_plan(tuple(calls), self._expectation)[1]]

    def compensation(self, name: str, arguments: dict) -> tuple[str, dict] | None:
        if name not in COMPENSATIONS:
            return None
        undo, build = COMPENSATIONS[name]
        return undo, build(arguments)


USER_OUTCOMES: Final = frozenset({"completed", "compensated", "failed", "refused", "manual"})


def user_orchestrator(orchestrate: Callable[[tuple[ToolCall, ...], ToolPort], Any]) -> Orchestrator:
    """Wrap a user's `orchestrate(calls, port)` so the bench runs it like its own two."""

    def run(calls: tuple[ToolCall, ...], box: Sandbox, expectation: Expectation, _rng: random.Random) -> RunResult:
        port = ToolPort(box, expectation)
        try:
            said = orchestrate(tuple(calls), port)
        except Exception:  # noqa: BLE001  a user's bug is a finding of the run, not a crash of the bench
            said = "crashed"
        outcome = said if isinstance(said, str) and said in USER_OUTCOMES | {"crashed"} else "invalid_outcome"
        box.drain()
        manual = None
        if outcome == "manual":
            plan = tuple((call.name, _decoded_or_empty(call.arguments)) for call in calls)
            manual = _manual_case("USER_ESCALATION", None, plan)
        return RunResult(MANUAL if manual else None, [], outcome, (), manual, port.journal)

    return Orchestrator(True, run)


def _decoded_or_empty(text: Any) -> dict[str, Any]:
    try:
        return decode_arguments(text)
    except BenchError:
        return {}


def load_orchestrator(spec: Any) -> Orchestrator:
    """MODULE:CALLABLE -> the wrapped orchestrator; the module is imported by name, as Python would."""
    if not isinstance(spec, str) or spec.count(":") != 1 or not all(
            re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]{0,127}", part) for part in spec.split(":")):
        raise BenchError("ORCHESTRATOR_SPEC")
    module_name, attribute = spec.split(":")
    try:
        target: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            target = getattr(target, part)
    except Exception:  # noqa: BLE001  any import-time failure of user code is one code, never a trace
        raise BenchError("ORCHESTRATOR_UNLOADABLE") from None
    if not callable(target):
        raise BenchError("ORCHESTRATOR_UNLOADABLE")
    return user_orchestrator(target)


# ================================================================================================
# 10. Invariants
# ================================================================================================

def _single_charge(record: Mapping) -> list[dict]:
    charges = record["state_after"]["charges"].values()
    by_order = Counter(charge["order_ref"] for charge in charges)
    by_key = Counter(charge["key"] for charge in charges if charge["key"] is not None)
    return ([{"order_ref": ref, "charges": n} for ref, n in sorted(by_order.items()) if n > 1]
            + [{"key": key, "charges": n} for key, n in sorted(by_key.items()) if n > 1])


def _no_orphan_reservation(record: Mapping) -> list[dict]:
    after = record["state_after"]
    excused = set((record["manual"] or {}).get("orders", ()))  # handed to a human, by name
    held = Counter(row["order_ref"] for row in after["reservations"].values() if row["status"] == "held")
    found = []
    for reference, count in sorted(held.items()):
        status = after["orders"].get(reference, {}).get("status")
        if reference not in excused and (status != "confirmed" or count > 1):
            found.append({"order_ref": reference, "held": count, "order_status": status})
    return found


def _consumed_exactly_once(record: Mapping) -> list[dict]:
    after = record["state_after"]
    return [{"event": ident, "consumed": after["consumed"].get(ident, 0)}
            for ident in sorted(after["outbox"]) if after["consumed"].get(ident, 0) != 1]


def _key_ledger(record: Mapping) -> list[dict]:
    return [{"key": key, **row} for key, row in sorted(record["ledger"].items())
            if not row["acknowledged"] <= row["effects"] <= row["attempted"]]


def _unknown_resolved(record: Mapping) -> list[dict]:
    if record["lifecycle"] == MANUAL:
        return []  # escalated: a human owns whatever is still unknown
    return [unknown for unknown in record["unknowns"] if unknown["resolution"] is None]


@dataclass(frozen=True, slots=True)
class Invariant:
    statement: str
    check: Callable[[Mapping], list[dict]]


INVARIANTS: Final = MappingProxyType({
    "single_charge": Invariant("at most one charge per order and per key", _single_charge),
    "no_orphan_reservation": Invariant(
        "every held reservation belongs to a confirmed order, one per order", _no_orphan_reservation),
    "consumed_exactly_once": Invariant(
        "every committed state change is consumed exactly once", _consumed_exactly_once),
    "key_ledger": Invariant("acknowledged <= effects <= attempted for each key", _key_ledger),
    "unknown_resolved": Invariant("every unknown is resolved or escalated to MANUAL", _unknown_resolved),
})
# The sweep's naive side must break these, or the harness cannot see what it claims to see.
# key_ledger is not among them: naive retries draw a fresh key, so no key ever carries two replies.
NAIVE_BREAKS: Final = frozenset({"single_charge", "no_orphan_reservation", "consumed_exactly_once",
                                  "unknown_resolved"})


def check_invariants(record: Mapping) -> dict[str, list[dict]]:
    return {name: invariant.check(record) for name, invariant in INVARIANTS.items()}


# ================================================================================================
# 11. Run records: snapshots, diff, metrics, assertions
# ================================================================================================

def state_diff(before: Mapping, after: Mapping) -> list[dict[str, Any]]:
    changes = []
    for table in sorted(set(before) | set(after)):
        old, new = before.get(table, {}), after.get(table, {})
        for ident in sorted(set(old) | set(new)):
            if old.get(ident) != new.get(ident):
                changes.append({"after": new.get(ident), "before": old.get(ident), "path": f"{table}/{ident}"})
    return changes


def _ledger(box: Sandbox, journal: Journal) -> dict[str, dict[str, int]]:
    rows = {}
    for key in sorted(set(box.ledger) | set(journal.acks)):
        row = box.ledger.get(key, {"attempted": 0, "effects": 0})
        rows[key] = {**row, "acknowledged": journal.acks.get(key, 0)}
    return rows


def seal(record: dict[str, Any]) -> dict[str, Any]:
    """Add the SHA-256 of the record's canonical form (computed without that field)."""
    body = {name: value for name, value in record.items() if name != "record_sha256"}
    return {**body, "record_sha256": canonical_sha256(body)}


def execute_run(orchestrator: str, calls: tuple[ToolCall, ...], expectation: Expectation, *,
                faults: tuple[Fault, ...] = (), seed: int = SEED,
                initial: Callable[[Sandbox], None] | None = None,
                registry: Mapping[str, Orchestrator] = ORCHESTRATORS) -> dict[str, Any]:
    """One run of one orchestrator on a fresh sandbox; returns its unsealed record."""
    chosen = registry[orchestrator]
    box = Sandbox(faults, consumer_dedup=chosen.consumer_dedup)
    if initial is not None:
        initial(box)
    before = box.snapshot()
    result = chosen.run(calls, box, expectation, random.Random(seed))
    after = box.snapshot()
    record = {
        "compensation_order": list(result.journal.compensation),
        "diff": state_diff(before, after),
        "faults": [fault.to_json() for fault in faults],
        "ledger": _ledger(box, result.journal),
        "lifecycle": result.lifecycle,
        "manual": result.manual,
        "orchestrator": orchestrator,
        "outcome": result.outcome,
        "proposal_sha256": canonical_sha256([call.to_json() for call in calls]),
        "refusal": [finding.to_json() for finding in result.findings],
        "seed": seed,
        "side_effects": len(box.effects),
        "state_after": after,
        "state_before": before,
        "trace": box.trace,
        "transitions": result.transitions,
        "unknowns": result.journal.unknowns,
    }
    record["invariants"] = check_invariants(record)
    return record


def _business(state: Mapping) -> dict[str, Any]:
    return {table: state[table] for table in BUSINESS_TABLES}


def state_hash(state: Mapping) -> str:
    """The digest of the business tables only (events and deliveries are the harness's plumbing)."""
    return canonical_sha256(_business(state))


# What a run costs, simulated: every answer takes CALL_MS, except a timeout, which the caller waits
# out to its deadline; a status query is a cheap read. No clock is read: latency is a count.
CALL_MS: Final = 40
TIMEOUT_MS: Final = 2_000
STATUS_MS: Final = 15


def run_cost(record: Mapping, forward: frozenset[str]) -> dict[str, int]:
    """Calls, retries (calls beyond the first to each tool), simulated latency, unexpected effects.

    An effect is unexpected when a tool commits more than once, or when a tool commits that is
    neither in the plan nor the compensation of a step in it.
    """
    calls = [entry["tool"] for entry in record["trace"] if entry["what"] == "call"]
    latency = sum(TIMEOUT_MS if entry.get("code") == "TIMEOUT" else CALL_MS
                  for entry in record["trace"] if entry["what"] == "answer")
    latency += STATUS_MS * _trace_count(record, "status_query")
    commits = Counter(entry["tool"] for entry in record["trace"] if entry["what"] == "commit")
    allowed = forward | {COMPENSATIONS[tool][0] for tool in forward if tool in COMPENSATIONS}
    unexpected = sum(count - 1 for count in commits.values()) + sum(
        count for tool, count in commits.items() if tool not in allowed)
    return {"calls": len(calls), "latency_ms": latency, "retries": len(calls) - len(set(calls)),
            "unexpected_effects": unexpected}


def _new(record: Mapping, table: str) -> list[dict]:
    before = record["state_before"][table]
    return [row for ident, row in record["state_after"][table].items() if ident not in before]


def _trace_count(record: Mapping, what: str, **fields: Any) -> int:
    return sum(1 for entry in record["trace"] if entry["what"] == what
               and all(entry.get(name) == value for name, value in fields.items()))


# Everything an assertion may observe about a run, each a pure function of its record.
METRICS: Final = MappingProxyType({
    "lifecycle": lambda r: r["lifecycle"],
    "outcome": lambda r: r["outcome"],
    "side_effects": lambda r: r["side_effects"],
    "state_changed": lambda r: bool(r["diff"]),
    "submissions": lambda r: _trace_count(r, "call"),
    "refusal": lambda r: r["refusal"],
    "refusal_codes": lambda r: sorted({finding["code"] for finding in r["refusal"]}),
    "orders": lambda r: {ref: row["status"] for ref, row in sorted(r["state_after"]["orders"].items())},
    "new_charges": lambda r: len(_new(r, "charges")),
    "captured_charges": lambda r: sum(1 for row in _new(r, "charges") if row["status"] == "captured"),
    "held_reservations": lambda r: sum(1 for row in r["state_after"]["reservations"].values()
                                       if row["status"] == "held"),
    "inventory": lambda r: r["state_after"]["inventory"],
    "compensation_order": lambda r: r["compensation_order"],
    "unknown_resolutions": lambda r: [unknown["resolution"] for unknown in r["unknowns"]],
    "ledger": lambda r: r["ledger"],
    "relayed_events": lambda r: _trace_count(r, "publish", via="relay"),
    "max_consumption": lambda r: max(r["state_after"]["consumed"].values(), default=0),
    "unconsumed_events": lambda r: sum(1 for ident in r["state_after"]["outbox"]
                                       if r["state_after"]["consumed"].get(ident, 0) == 0),
    "duplicates_ignored": lambda r: _trace_count(r, "duplicate_ignored"),
    "violations": lambda r: {name: len(found) for name, found in r["invariants"].items()},
    "manual_reason": lambda r: (r["manual"] or {}).get("reason"),
    "state_sha256": lambda r: state_hash(r["state_after"]),
})


def judge(record: Mapping, assertions: tuple[tuple[str, Any], ...]) -> list[dict[str, Any]]:
    """Each pre-declared (metric, expected) pair with what the run showed and its verdict."""
    verdicts = []
    for metric, expected in assertions:
        observed = METRICS[metric](record)
        same = canonical_json(observed) == canonical_json(expected)
        verdicts.append({"expected": expected, "metric": metric, "observed": observed,
                         "verdict": "pass" if same else "fail"})
    return verdicts


# ================================================================================================
# 12. Scenarios and paired controls
# ================================================================================================

PLAN_ARGUMENTS: Final = _freeze({
    "create_order": {"amount_cents": 4999, "currency": "EUR", "customer": {"id": "C1042", "tier": "standard"},
                     "idempotency_key": "k-create-30417", "line": {"quantity": 2, "sku": "SKU-RED"},
                     "order_ref": PLAN_ORDER},
    "reserve_inventory": {"idempotency_key": "k-reserve-30417", "order_ref": PLAN_ORDER, "quantity": 2,
                          "sku": "SKU-RED"},
    "charge_payment": {"amount_cents": 4999, "currency": "EUR", "idempotency_key": "k-charge-30417",
                       "order_ref": PLAN_ORDER, "payment_method": {"token": "tok_4242abcd", "type": "card"}},
    "confirm_order": {"idempotency_key": "k-confirm-30417", "order_ref": PLAN_ORDER},
})

PLACE_ORDER: Final = Expectation(
    name="place_order",
    calls=(ExpectedCall("create_order", _freeze({"amount_cents": 4999, "order_ref": PLAN_ORDER})),
           ExpectedCall("reserve_inventory", _freeze({"order_ref": PLAN_ORDER, "quantity": 2,
                                                      "sku": "SKU-RED"})),
           ExpectedCall("charge_payment", _freeze({"amount_cents": 4999, "order_ref": PLAN_ORDER})),
           ExpectedCall("confirm_order", _freeze({"order_ref": PLAN_ORDER}))),
    edges=((0, 1), (0, 2), (1, 2), (1, 3), (2, 3)),  # stock before money, both before confirming
    forbidden=frozenset({"cancel_order", "refund_payment", "release_inventory"}),
    context=_freeze({"allowed_tools": PLAN_TOOLS + ("query_logistics",), "customer": "C1042"}),
)

_ABSENT: Final = object()  # a patch value that deletes the field


def _patch(arguments: dict, path: tuple[str, ...], value: Any) -> None:
    parent = arguments
    for step in path[:-1]:
        parent = parent[step]
    if value is _ABSENT:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value


def plan_calls(patches: tuple[tuple[str, tuple[str, ...], Any], ...] = (),
               order: tuple[str, ...] = PLAN_TOOLS) -> tuple[ToolCall, ...]:
    """The four-step plan as provider calls, with fields patched or deleted, in a given order."""
    calls = []
    for index, tool in enumerate(order, 1):
        arguments = _thaw(PLAN_ARGUMENTS[tool])
        for target, path, value in patches:
            if target == tool:
                _patch(arguments, path, value)
        calls.append(ToolCall(f"call_{index}", tool, canonical_json(arguments).decode("utf-8")))
    return tuple(calls)


@dataclass(frozen=True, slots=True)
class Scenario:
    id: str
    dimension: str
    title: str
    calls: tuple[ToolCall, ...]
    faults: tuple[Fault, ...]
    assertions: tuple[tuple[str, Any], ...]


@dataclass(frozen=True, slots=True)
class Control:
    id: str
    scenario: str
    shows: str
    assertions: tuple[tuple[str, Any], ...]


def _violations(**counts: int) -> dict[str, int]:
    """Violation counts per invariant: zero for every invariant not named."""
    return {**{name: 0 for name in INVARIANTS}, **counts}


# The business tables a run must leave, written out in full and compared by digest, as tau-bench
# compares database hashes: the plan completed, or the plan undone by its saga.
_ORDER_ROW: Final = {"amount_cents": 4999, "quantity": 2, "sku": "SKU-RED"}
_RESERVATION_ROW: Final = {"order_ref": PLAN_ORDER, "quantity": 2, "sku": "SKU-RED"}
EXPECTED_COMPLETED_STATE: Final = _freeze({
    "charges": {"CH-0001": {"amount_cents": 4999, "key": "k-charge-30417", "order_ref": PLAN_ORDER,
                            "status": "captured"}},
    "inventory": {"SKU-BLUE": 5, "SKU-RED": 3},
    "orders": {PLAN_ORDER: {**_ORDER_ROW, "status": "confirmed"}},
    "reservations": {"RES-0001": {**_RESERVATION_ROW, "status": "held"}},
})
EXPECTED_COMPENSATED_STATE: Final = _freeze({
    "charges": {}, "inventory": dict(INITIAL_STOCK),
    "orders": {PLAN_ORDER: {**_ORDER_ROW, "status": "cancelled"}},
    "reservations": {"RES-0001": {**_RESERVATION_ROW, "status": "released"}},
})

_REFUSED_UNTOUCHED: Final = (("lifecycle", REFUSED), ("outcome", "refused"), ("side_effects", 0),
                             ("state_changed", False), ("submissions", 0))
_COMPLETED: Final = (("lifecycle", RECONCILED), ("outcome", "completed"), ("side_effects", 4),
                     ("orders", {PLAN_ORDER: "confirmed"}), ("new_charges", 1),
                     ("held_reservations", 1), ("violations", _violations()),
                     ("state_sha256", state_hash(_thaw(EXPECTED_COMPLETED_STATE))))
_COMPENSATED: Final = (("lifecycle", RECONCILED), ("outcome", "compensated"),
                       ("orders", {PLAN_ORDER: "cancelled"}), ("new_charges", 0),
                       ("held_reservations", 0), ("inventory", {"SKU-BLUE": 5, "SKU-RED": 5}),
                       ("compensation_order", ["release_inventory", "cancel_order"]),
                       ("violations", _violations()),
                       ("state_sha256", state_hash(_thaw(EXPECTED_COMPENSATED_STATE))))


def _plain_ledger(**overrides: dict[str, int]) -> dict[str, dict[str, int]]:
    """The plan's four key rows, one attempt, effect and acknowledgement each unless overridden."""
    one = {"acknowledged": 1, "attempted": 1, "effects": 1}
    return {f"{tool}|{PLAN_ARGUMENTS[tool]['idempotency_key']}": overrides.get(tool, one) for tool in PLAN_TOOLS}


SCENARIOS: Final = (
    Scenario("S01", "schema", "required field missing (charge without amount_cents)",
             plan_calls((("charge_payment", ("amount_cents",), _ABSENT),)), (),
             _REFUSED_UNTOUCHED + (("refusal_codes", ["ARGUMENT_MISMATCH", "SCHEMA_REQUIRED"]),)),
    Scenario("S02", "schema", "wrong type (quantity as the string \"2\")",
             plan_calls((("reserve_inventory", ("quantity",), "2"),)), (),
             _REFUSED_UNTOUCHED + (("refusal_codes", ["ARGUMENT_MISMATCH", "SCHEMA_TYPE"]),)),
    Scenario("S03", "schema", "enum out of range (currency JPY)",
             plan_calls((("charge_payment", ("currency",), "JPY"),)), (),
             _REFUSED_UNTOUCHED + (("refusal_codes", ["CURRENCY_MISMATCH", "SCHEMA_ENUM"]),)),
    Scenario("S04", "schema", "side effect without idempotency key",
             plan_calls((("charge_payment", ("idempotency_key",), _ABSENT),)), (),
             _REFUSED_UNTOUCHED + (("refusal_codes", ["KEY_MISSING", "SCHEMA_REQUIRED"]),)),
    Scenario("S05", "completeness", "four-step success", plan_calls(), (),
             _COMPLETED + (("ledger", _plain_ledger()), ("unknown_resolutions", []))),
    Scenario("S06", "completeness", "confirm_order missing: detected and audited",
             plan_calls(order=PLAN_TOOLS[:3]), (),
             _REFUSED_UNTOUCHED + (("refusal", [{"call": None, "code": "CALL_MISSING",
                                                  "path": "/confirm_order"}]),)),
    Scenario("S07", "order", "dependent call first (charge before reserve)",
             plan_calls(order=("create_order", "charge_payment", "reserve_inventory", "confirm_order")), (),
             _REFUSED_UNTOUCHED + (("refusal", [{"call": 1, "code": "DEPENDENCY_ORDER",
                                                  "path": "/reserve_inventory->charge_payment"}]),)),
    Scenario("S08", "timeout", "timeout before the side effect: recovered with the same key",
             plan_calls(), (Fault("timeout_before_effect", "charge_payment"),),
             _COMPLETED + (("unknown_resolutions", ["status_query:absent"]),
                           ("ledger", _plain_ledger(charge_payment={"acknowledged": 1, "attempted": 2,
                                                                     "effects": 1})))),
    Scenario("S09", "timeout", "retries exhausted: explicit failure, zero charges",
             plan_calls(), (Fault("timeout_before_effect", "charge_payment", GUARDED_MAX_ATTEMPTS),),
             _COMPENSATED + (("unknown_resolutions", ["status_query:absent"] * GUARDED_MAX_ATTEMPTS),
                             # create, reserve, every charge attempt, release, cancel
                             ("submissions", 2 + GUARDED_MAX_ATTEMPTS + 2))),
    Scenario("S10", "idempotency", "response lost after commit: one charge",
             plan_calls(), (Fault("timeout_after_commit", "charge_payment"),),
             _COMPLETED + (("unknown_resolutions", ["status_query:committed"]),
                           ("ledger", _plain_ledger()))),
    Scenario("S11", "idempotency", "same key submitted twice: one effect",
             plan_calls(), (Fault("duplicate_submit", "charge_payment"),),
             _COMPLETED + (("ledger", _plain_ledger(charge_payment={"acknowledged": 1, "attempted": 2,
                                                                     "effects": 1})),)),
    Scenario("S12", "saga", "reserved, then payment fails for good: compensate in reverse",
             plan_calls(), (Fault("permanent_failure", "charge_payment"),),
             _COMPENSATED + (("submissions", 5),)),
    Scenario("S13", "delivery", "crash after commit: the relay publishes, consumed once",
             plan_calls(), (Fault("crash_after_commit", "confirm_order"),),
             _COMPLETED + (("relayed_events", 1), ("max_consumption", 1), ("unconsumed_events", 0))),
    Scenario("S14", "delivery", "ACK lost: redelivered, consumed once",
             plan_calls(), (Fault("ack_lost", "confirm_order"),),
             _COMPLETED + (("duplicates_ignored", 1), ("max_consumption", 1))),
)
SCENARIO_INDEX: Final = MappingProxyType({scenario.id: scenario for scenario in SCENARIOS})
DIMENSIONS: Final = ("schema", "completeness", "order", "timeout", "idempotency", "saga", "delivery")

# Each control runs the naive orchestrator on a scenario and must show the named fault: if it
# does not, the harness cannot detect that fault and the whole run fails.
CONTROLS: Final = (
    Control("C1", "S10", "double charge",
            (("new_charges", 2), ("captured_charges", 2), ("outcome", "claimed_complete"),
             ("violations", _violations(single_charge=1, unknown_resolved=1)))),
    Control("C2", "S12", "leaked reservation",
            (("held_reservations", 1), ("orders", {PLAN_ORDER: "created"}), ("compensation_order", []),
             ("outcome", "aborted"), ("violations", _violations(no_orphan_reservation=1)))),
    Control("C3", "S13", "lost event",
            (("unconsumed_events", 1), ("relayed_events", 0),
             ("violations", _violations(consumed_exactly_once=1)))),
    Control("C4", "S14", "duplicate consumption",
            (("max_consumption", 2), ("duplicates_ignored", 0),
             ("violations", _violations(consumed_exactly_once=1)))),
    Control("C5", "S04", "effect from a plan that should have been refused",
            (("side_effects", 4), ("orders", {PLAN_ORDER: "confirmed"}), ("new_charges", 1),
             ("violations", _violations()))),
)


def _judged_run(orchestrator: str, scenario: Scenario, assertions: tuple, seed: int) -> tuple[dict, bool]:
    record = execute_run(orchestrator, scenario.calls, PLACE_ORDER, faults=scenario.faults, seed=seed)
    verdicts = judge(record, assertions)
    return {**record, "assertions": verdicts}, all(item["verdict"] == "pass" for item in verdicts)


def run_scenario(scenario: Scenario, *, seed: int = SEED) -> dict[str, Any]:
    """The guarded orchestrator on one scenario, judged by the scenario's assertions."""
    record, held = _judged_run("guarded", scenario, scenario.assertions, seed)
    return seal({**record, "dimension": scenario.dimension, "kind": "scenario", "run_id": f"{scenario.id}/guarded",
                 "scenario": scenario.id, "title": scenario.title, "verdict": "pass" if held else "fail"})


def run_control(control: Control, *, seed: int = SEED) -> dict[str, Any]:
    """The naive orchestrator on a control's scenario: 'shown' only if every fault it names appears."""
    record, held = _judged_run("naive", SCENARIO_INDEX[control.scenario], control.assertions, seed)
    return seal({**record, "control": control.id, "kind": "control", "run_id": f"{control.id}/naive",
                 "scenario": control.scenario, "shows": control.shows, "verdict": "shown" if held else "not_shown"})


# ================================================================================================
# 13. Exhaustive fault sweep
# ================================================================================================

def sweep_tools(calls: tuple[ToolCall, ...]) -> tuple[str, ...]:
    """The tools a fault may strike: the plan's own, then the compensations they could need."""
    named = [call.name for call in calls if call.name in TOOLS]
    forward = tuple(dict.fromkeys(named))
    undo = tuple(dict.fromkeys(COMPENSATIONS[tool][0] for tool in forward if tool in COMPENSATIONS))
    return forward + tuple(tool for tool in undo if tool not in forward)


def sweep_atoms(tools: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """Every (fault kind, tool) point, tool-major: within one tool, kinds in catalogue order."""
    return tuple((kind, tool) for tool in tools for kind in SWEPT_KINDS)


def _fault_set(atoms: tuple[tuple[str, str], ...], picks: tuple[int, ...]) -> tuple[Fault, ...]:
    # A point picked twice strikes twice: one Fault with times=2. Points stay in atom order, so a
    # transient fault on a tool is declared before the sticky permanent failure it would hide.
    counts = Counter(picks)
    return tuple(Fault(*atoms[index], counts[index]) for index in sorted(counts))


def _depth_sets(atoms: tuple[tuple[str, str], ...], depth: int) -> list[tuple[int, ...]]:
    return list(combinations_with_replacement(range(len(atoms)), depth))


@dataclass(frozen=True, slots=True)
class SweepPlan:
    """Which fault sets a sweep runs: every set up to `exhaustive_depth` faults, then a seeded sample."""

    exhaustive_depth: int = SWEEP_EXHAUSTIVE_DEPTH
    max_depth: int = SWEEP_MAX_DEPTH
    sample: int | None = SWEEP_SAMPLE  # per sampled depth; None runs that depth whole


def _one_tool(atoms: tuple[tuple[str, str], ...], picks: tuple[int, ...]) -> bool:
    return len({atoms[index][1] for index in picks}) <= 1


def sweep_fault_sets(tools: tuple[str, ...], plan: SweepPlan = SweepPlan(), seed: int = SEED
                     ) -> list[tuple[int, tuple[Fault, ...], int]]:
    """(depth, fault set, size of that depth's whole space) for every set the sweep runs.

    Up to `exhaustive_depth` faults, every set runs. Deeper, every set whose faults all strike one
    tool still runs (they meet in one key's retries and status queries, where the subtle bugs
    live: a timeout, a status outage, then a permanent refusal), and the sets spread over
    several tools run as a fixed-seed sample of `sample` sets.
    """
    atoms, out = sweep_atoms(tools), []
    for depth in range(plan.max_depth + 1):
        space = _depth_sets(atoms, depth)
        chosen = space
        if depth > plan.exhaustive_depth and plan.sample is not None:
            spread = [picks for picks in space if not _one_tool(atoms, picks)]
            if plan.sample < len(spread):
                # A fixed seed per depth: the same sample on every run, Python and hash seed.
                kept = set(random.Random(seed * 10 + depth).sample(range(len(spread)), plan.sample))
                kept_sets = {spread[index] for index in kept}
                chosen = [picks for picks in space if _one_tool(atoms, picks) or picks in kept_sets]
        out += [(depth, _fault_set(atoms, picks), len(space)) for picks in chosen]
    return out


def _completable(faults: tuple[Fault, ...], forward: frozenset[str]) -> bool:
    # A run could have completed unless a step the plan needs is refused for good; transient faults
    # (lost answers, 429, outages, duplicates) never make completion impossible, only harder.
    return not any(fault.kind == "permanent_failure" and fault.tool in forward for fault in faults)


def run_sweep(*, seed: int = SEED, calls: tuple[ToolCall, ...] | None = None,
              expectation: Expectation | None = None, plan: SweepPlan = SweepPlan(),
              orchestrators: tuple[str, ...] = ("guarded", "naive"),
              initial: Callable[[Sandbox], None] | None = None,
              registry: Mapping[str, Orchestrator] = ORCHESTRATORS) -> list[dict[str, Any]]:
    """Every fault set under each orchestrator; one compact, sealed line per run.

    Liveness is judged by state, never by what an orchestrator says: a run is `completable` when
    no needed step is refused for good, and `live` when it left exactly the business state the
    guarded orchestrator leaves with no fault at all (the expected state, compared by hash).
    """
    calls = plan_calls() if calls is None else calls
    expectation = PLACE_ORDER if expectation is None else expectation
    reference = execute_run("guarded", calls, expectation, seed=seed, initial=initial)
    valid = reference["lifecycle"] == RECONCILED and reference["outcome"] == "completed"
    expected = state_hash(reference["state_after"])
    forward = frozenset(call.name for call in calls)
    lines = []
    for orchestrator in orchestrators:
        sets = sweep_fault_sets(sweep_tools(calls), plan, seed)
        for index, (depth, faults, _space) in enumerate(sets):
            record = seal(execute_run(orchestrator, calls, expectation, faults=faults, seed=seed,
                                      initial=initial, registry=registry))
            reached = state_hash(record["state_after"]) == expected
            lines.append({
                "completable": valid and _completable(faults, forward), "depth": depth,
                "faults": record["faults"], "kind": "sweep", "lifecycle": record["lifecycle"],
                "live": valid and _completable(faults, forward) and reached,
                "orchestrator": orchestrator, "outcome": record["outcome"],
                "record_sha256": record["record_sha256"], "run_id": f"W{index:05d}/{orchestrator}",
                "side_effects": record["side_effects"], **run_cost(record, forward),
                "violated": [name for name, found in record["invariants"].items() if found],
            })
    return lines


def sweep_table(lines: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Per invariant: how many runs of each orchestrator violate it."""
    names = sorted({line["orchestrator"] for line in lines}) or ["guarded", "naive"]
    table = {name: {orchestrator: 0 for orchestrator in names} for name in INVARIANTS}
    for line in lines:
        for name in line["violated"]:
            table[name][line["orchestrator"]] += 1
    return table


def _ratio_text(numerator: int, denominator: int) -> str:
    if denominator == 0:
        return "n/a"
    milli = (numerator * 2000 + denominator) // (2 * denominator)  # half up, exact integers
    return f"{milli // 1000}.{milli % 1000:03d}"


def depth_table(lines: list[dict[str, Any]], spaces: Mapping[int, int]) -> list[dict[str, Any]]:
    """Per fault depth and orchestrator: runs, unsafe runs, completable runs, live runs."""
    rows = []
    for depth in sorted(spaces):
        at_depth = [line for line in lines if line["depth"] == depth]
        for orchestrator in sorted({line["orchestrator"] for line in at_depth}):
            mine = [line for line in at_depth if line["orchestrator"] == orchestrator]
            completable = sum(1 for line in mine if line["completable"])
            live = sum(1 for line in mine if line["live"])
            rows.append({"completable": completable, "depth": depth, "live": live,
                         "liveness": _ratio_text(live, completable), "orchestrator": orchestrator,
                         "runs": len(mine), "space": spaces[depth],
                         "unsafe": sum(1 for line in mine if line["violated"])})
    return rows


def _percentile(values: list[int], share: int) -> int:
    """Nearest-rank percentile (share in percent) of a non-empty list: an observed value, no interpolation."""
    ordered = sorted(values)
    return ordered[max(0, -(-share * len(ordered) // 100) - 1)]


def efficiency_table(lines: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per orchestrator: call count and simulated latency at p50/p95, retries, unexpected effects."""
    out = {}
    for orchestrator in sorted({line["orchestrator"] for line in lines}):
        mine = [line for line in lines if line["orchestrator"] == orchestrator]
        calls, latency = [line["calls"] for line in mine], [line["latency_ms"] for line in mine]
        out[orchestrator] = {"calls_p50": _percentile(calls, 50), "calls_p95": _percentile(calls, 95),
                             "latency_ms_p50": _percentile(latency, 50), "latency_ms_p95": _percentile(latency, 95),
                             "retries": sum(line["retries"] for line in mine),
                             "runs_with_unexpected_effects": sum(1 for line in mine if line["unexpected_effects"])}
    return out


def sweep_verdicts(lines: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per orchestrator: safe (no violation in any run) and live (enough completable runs done).

    Safety alone cannot win: an orchestrator that refuses everything breaks no invariant and
    completes nothing, so its liveness is 0 and its verdict is fail.
    """
    out = {}
    for orchestrator in sorted({line["orchestrator"] for line in lines}):
        mine = [line for line in lines if line["orchestrator"] == orchestrator]
        unsafe = sum(1 for line in mine if line["violated"])
        completable = sum(1 for line in mine if line["completable"])
        live = sum(1 for line in mine if line["live"])
        enough = live * LIVENESS_FLOOR[1] >= completable * LIVENESS_FLOOR[0]
        verdict = "fail" if unsafe or not enough else "pass"
        if not unsafe and completable == 0:
            verdict = "n/a"  # the plan itself cannot complete (refused by the guard): only safety counts
        out[orchestrator] = {"completable": completable, "live": live,
                             "liveness": _ratio_text(live, completable), "runs": len(mine),
                             "unsafe": unsafe, "verdict": verdict}
    return out


# ================================================================================================
# 14. Full-plan scorer and its cases
# ================================================================================================

# Verdicts, strongest first: the first that applies is the verdict. Only the last two score above 0.
# A response whose shape nothing reads is "unreadable_shape" (decided before any of these).
VERDICTS: Final = ("veto", "unparseable", "refused", "incomplete", "pass")
_UNPARSED_CODES: Final = frozenset({"CALL_SHAPE", "RESPONSE_SHAPE", "RESPONSE_TOO_MANY_CALLS"}
                                   | {code for code in BENCH_CATALOG if code.startswith("ARGS_")})


def scorer_config() -> dict[str, Any]:
    """Everything that decides a score; its digest is published with the results."""
    return {
        "argument_compare": "exact canonical JSON equality: no coercion, booleans are not integers",
        "call_set": "sum of matched pair scores / max(expected calls, proposed calls)",
        "dependency": "satisfied edges / edges, on the proposed order of matched calls",
        "limits": {"max_argument_bytes": MAX_ARGUMENT_BYTES, "max_calls": MAX_CALLS,
                   "max_expected_calls": MAX_EXPECTED_CALLS, "max_name_chars": MAX_NAME_CHARS,
                   "max_nesting": MAX_NESTING, "max_safe_integer": tool_dispatcher.MAX_SAFE_INTEGER},
        "matching": "optimal assignment over all calls (maximum total, ties to the earliest pairs)",
        "pair_score": "0 unless same tool and the call is valid; else share of fixed arguments equal",
        "response_shapes": [name for name, _applies, _extract in RESPONSE_SHAPES],
        "total": "0 for veto, unparseable or refused; otherwise call_set x dependency",
        "verdicts": list(VERDICTS),
        "vetoes": {"business": sorted({"CALL_ID_REUSED", "CALLS_EXCLUSIVE", "CONFIRMATION_MISSING",
                                       "CURRENCY_MISMATCH", "CUSTOMER_MISMATCH", "CUSTOMER_NOT_PERMITTED",
                                       "VERSION_STALE"}),
                   "effect_fields": dict(EFFECT_FIELDS), "high_value_cents": HIGH_VALUE_CENTS,
                   "plan": ["DEPENDENCY_ORDER", "DUPLICATE_EFFECT", "FORBIDDEN_CALL", "KEY_REUSED",
                            "UNEXPECTED_EFFECT"]},
    }


def _object_text(value: Any) -> Any:
    # Shapes that carry arguments as an object (Anthropic `input`, Gemini `args`, a bare list) are
    # turned into text, so every call goes through the same strict decoder; ASCII escapes keep a
    # lone surrogate visible to it. Anything but an object stays as it is and is refused there.
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=True, allow_nan=False)
    return value


def _items(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise BenchError("RESPONSE_SHAPE")
    return value


def _bench_calls(response: Any) -> list[Any]:
    return _items(response["tool_calls"])


def _bare_list_calls(response: Any) -> list[Any]:
    # The seed's own example: [{"name": ..., "arguments": {...}}, ...], ids optional.
    return [{"arguments": _object_text(item.get("arguments")), "id": item.get("id", f"call_{number}"),
             "name": item.get("name")} if isinstance(item, dict) and set(item) <= {"id", "name", "arguments"}
            else item for number, item in enumerate(response, 1)]


def _chat_calls(response: Any) -> list[Any]:
    choices = _items(response["choices"])
    message = choices[0].get("message") if choices and isinstance(choices[0], dict) else None
    if not isinstance(message, dict):
        raise BenchError("RESPONSE_SHAPE")
    calls = message.get("tool_calls")
    if calls is None:
        calls = []  # a plain answer: no tool call at all
    return [{"arguments": item["function"].get("arguments"), "id": item.get("id"),
             "name": item["function"].get("name")}
            if isinstance(item, dict) and isinstance(item.get("function"), dict) else item
            for item in _items(calls)]


def _responses_calls(response: Any) -> list[Any]:
    return [{"arguments": item.get("arguments"), "id": item.get("call_id"), "name": item.get("name")}
            if isinstance(item, dict) and item.get("type") == "function_call" else item
            for item in _items(response["output"])
            if not (isinstance(item, dict) and item.get("type") != "function_call")]


def _anthropic_calls(response: Any) -> list[Any]:
    return [{"arguments": _object_text(item.get("input")), "id": item.get("id"), "name": item.get("name")}
            if isinstance(item, dict) and item.get("type") == "tool_use" else item
            for item in _items(response["content"])
            if not (isinstance(item, dict) and item.get("type") != "tool_use")]


def _gemini_calls(response: Any) -> list[Any]:
    candidates = _items(response["candidates"])
    content = candidates[0].get("content") if candidates and isinstance(candidates[0], dict) else None
    if not isinstance(content, dict):
        raise BenchError("RESPONSE_SHAPE")
    calls = [part for part in _items(content.get("parts", []))
             if not (isinstance(part, dict) and "functionCall" not in part)]
    return [{"arguments": _object_text(part["functionCall"].get("args", {})),
             "id": part["functionCall"].get("id", f"call_{number}"), "name": part["functionCall"].get("name")}
            if isinstance(part, dict) and isinstance(part["functionCall"], dict) else part
            for number, part in enumerate(calls, 1)]


def _is_object_with(*keys: str) -> Callable[[Any], bool]:
    return lambda response: isinstance(response, dict) and all(key in response for key in keys)


# The response shapes real models produce, each recognised by its top-level form and read into
# the bench's own {id, name, arguments-as-text} calls; the first that applies is the shape. A
# response none of them reads is "unreadable_shape": a harness problem, not a model error.
RESPONSE_SHAPES: Final = (
    ("bench", lambda response: isinstance(response, dict) and set(response) == {"tool_calls"}, _bench_calls),
    ("bare_list", lambda response: isinstance(response, list), _bare_list_calls),
    ("openai_chat", _is_object_with("choices"), _chat_calls),
    ("openai_responses", _is_object_with("output"), _responses_calls),
    ("anthropic_messages", _is_object_with("content", "role"), _anthropic_calls),
    ("gemini", _is_object_with("candidates"), _gemini_calls),
)


def read_response(response: Any) -> tuple[str, list[Any]]:
    """(shape name, raw calls in the bench's shape); RESPONSE_SHAPE when no shape reads it."""
    for name, applies, extract in RESPONSE_SHAPES:
        if applies(response):
            calls = extract(response)
            if len(calls) > MAX_CALLS:
                raise BenchError("RESPONSE_TOO_MANY_CALLS")
            return name, calls
    raise BenchError("RESPONSE_SHAPE")


def _response_calls(response: Any) -> list[Any]:
    return read_response(response)[1]


def _tool_call(item: Any) -> ToolCall:
    if not isinstance(item, dict) or set(item) != {"id", "name", "arguments"}:
        raise BenchError("CALL_SHAPE")
    ident, name = item["id"], item["name"]
    if not all(isinstance(text, str) and 0 < len(text) <= MAX_NAME_CHARS for text in (ident, name)):
        raise BenchError("CALL_SHAPE")
    return ToolCall(ident, name, item["arguments"])


def calls_from_response(response: Any) -> tuple[ToolCall, ...]:
    """Provider response -> calls, for the orchestrators; raises BenchError on any bad shape."""
    return tuple(_tool_call(item) for item in _response_calls(response))


def _pair_score(check: CallCheck, name: Any, expected: ExpectedCall) -> Fraction:
    if name != expected.name or not check.parsed or check.findings:
        return Fraction(0)
    fixed = expected.arguments
    if not fixed:
        return Fraction(1)
    equal = sum(1 for name, value in fixed.items()
                if name in check.arguments and _same_json(check.arguments[name], value))
    return Fraction(equal, len(fixed))


def optimal_matching(weights: list[list[Fraction]]) -> tuple[Fraction, tuple[tuple[int, int], ...]]:
    """Maximum-total one-to-one matching of proposed (rows) to expected (columns) calls."""
    best: dict[int, tuple[Fraction, tuple[tuple[int, int], ...]]] = {0: (Fraction(0), ())}
    for row, row_weights in enumerate(weights):
        grown = dict(best)
        for mask, (total, pairs) in best.items():
            for column, weight in enumerate(row_weights):
                if weight == 0 or mask & (1 << column):
                    continue
                widened, candidate = mask | (1 << column), total + weight
                if widened not in grown or candidate > grown[widened][0]:
                    grown[widened] = (candidate, pairs + ((row, column),))
        best = grown
    return max(best.values(), key=lambda entry: entry[0])


def _ratio(numerator: Fraction | int, denominator: int) -> dict[str, Any]:
    # An empty denominator is vacuous (nothing was asked of it): shown as n/a, counted as 1.
    if denominator == 0:
        return {"den": 0, "num": str(Fraction(numerator)), "value": "n/a"}
    value = Fraction(numerator) / denominator
    milli = (value.numerator * 2000 + value.denominator) // (2 * value.denominator)  # half up
    return {"den": denominator, "num": str(Fraction(numerator)), "value": f"{milli // 1000}.{milli % 1000:03d}"}


def _factor(ratio: dict[str, Any]) -> Fraction:
    return Fraction(1) if ratio["den"] == 0 else Fraction(ratio["num"]) / ratio["den"]


def _scored_calls(raw_calls: list[Any], tools: Mapping[str, ToolContract]
                  ) -> tuple[list[Any], list[Any], list[CallCheck]]:
    ids, names, checks = [], [], []
    for index, item in enumerate(raw_calls):
        try:
            call = _tool_call(item)
        except BenchError as error:
            ids.append(None)
            names.append(None)
            checks.append(CallCheck(False, None, (Finding(error.code, "", index),)))
            continue
        ids.append(call.id)
        names.append(call.name)
        checks.append(vet_call(call, index, tools))
    return ids, names, checks


def _failed_score(code: str, expected_calls: int) -> dict[str, Any]:
    # The whole response failed: it counts as one proposal that scored nothing. A shape nothing
    # reads is the harness's blind spot, not the model's error, and is reported apart.
    empty = _ratio(0, 1)
    verdict = "unreadable_shape" if code == "RESPONSE_SHAPE" else "unparseable"
    return {"calls": [], "edges": [], "error": code, "matching": [], "shape": None,
            "sub_scores": {"call_set": _ratio(0, max(expected_calls, 1)), "dependency": empty,
                           "parse": empty, "schema": empty},
            "total": _ratio(0, 1), "verdict": verdict, "vetoes": []}


def _check_configuration(expectation: Any, tools: Any) -> None:
    if not isinstance(tools, Mapping) or not all(isinstance(tool, ToolContract) for tool in tools.values()):
        raise BenchError("SCHEMA_UNSUPPORTED")
    check_expectation(expectation, tools)
    for tool in tools.values():
        check_schema(tool.schema)


def _edges(expectation: Expectation, pairs: tuple[tuple[int, int], ...]) -> list[dict[str, Any]]:
    """Each dependency edge, satisfied when both ends matched and the first was proposed first."""
    position = {column: row for row, column in pairs}
    return [{"after": later, "before": before,
             "satisfied": before in position and later in position and position[before] < position[later]}
            for before, later in expectation.edges]


# The fixed values that say what an effect does and to what: a side-effecting call that differs in
# one of them would cause a wrong effect, so it is a veto, not a lower score.
EFFECT_FIELDS: Final = MappingProxyType({
    "order_ref": "WRONG_TARGET", "sku": "WRONG_TARGET", "amount_cents": "WRONG_AMOUNT", "quantity": "WRONG_AMOUNT",
})


def _call_vetoes(names: list[Any], expectation: Expectation) -> list[str]:
    expected = {call.name for call in expectation.calls}
    out = []
    for index, name in enumerate(names):
        if name in expectation.forbidden:
            out.append(f"FORBIDDEN_CALL:{name}@{index}")
        elif name in SIDE_EFFECT_TOOLS and name not in expected:
            out.append(f"UNEXPECTED_EFFECT:{name}@{index}")  # not listed as forbidden, still an effect
    return out


def _effect_vetoes(names: list[Any], checks: list[CallCheck], expectation: Expectation,
                   pairs: tuple[tuple[int, int], ...]) -> list[str]:
    """Each side-effecting call against the expected call it stands for: a duplicate, or wrong values."""
    column_of = dict(pairs)
    spare: dict[str, list[int]] = {}
    for column, call in enumerate(expectation.calls):
        if column not in column_of.values():
            spare.setdefault(call.name, []).append(column)
    out = []
    for index, name in enumerate(names):
        if name not in SIDE_EFFECT_TOOLS or name in expectation.forbidden or checks[index].findings:
            continue  # an invalid call is refused already: it causes no effect to judge
        column = column_of.get(index)
        if column is None and spare.get(name):
            column = spare[name].pop(0)  # the expected call it failed to match: compare with it
        if column is None:
            if any(call.name == name for call in expectation.calls):
                out.append(f"DUPLICATE_EFFECT:{name}@{index}")  # one more effect than asked for
            continue
        fixed = expectation.calls[column].arguments
        arguments = checks[index].arguments
        out += [f"{EFFECT_FIELDS[field_name]}:{name}/{field_name}@{index}" for field_name in EFFECT_FIELDS
                if field_name in fixed and not _same_json(arguments[field_name], fixed[field_name])]
    return out


def _order_vetoes(names: list[Any], expectation: Expectation, pairs: tuple[tuple[int, int], ...]) -> list[str]:
    # An effect committed before the call it depends on (a charge before the stock is reserved).
    row_of = {column: row for row, column in pairs}
    return [f"DEPENDENCY_ORDER:{expectation.calls[before].name}->{expectation.calls[later].name}@{row_of[later]}"
            for before, later in expectation.edges
            if before in row_of and later in row_of and row_of[before] > row_of[later]
            and names[row_of[later]] in SIDE_EFFECT_TOOLS]


def _key_vetoes(names: list[Any], args: list[dict]) -> list[str]:
    # One key names one intent: reused across different tools or arguments, the tool would replay
    # one call's receipt for another, or refuse it.
    first: dict[str, tuple[Any, str]] = {}
    out = []
    for index, (name, arguments) in enumerate(zip(names, args)):
        key = _key_of(arguments)
        if key is None:
            continue
        intent = (name, canonical_sha256({n: v for n, v in arguments.items() if n != "idempotency_key"}))
        if key in first and first[key] != intent:
            out.append(f"KEY_REUSED:{name}@{index}")
        first.setdefault(key, intent)
    return out


def plan_vetoes(ids: list[Any], names: list[Any], checks: list[CallCheck], expectation: Expectation,
                pairs: tuple[tuple[int, int], ...]) -> list[str]:
    """Every reason the plan would cause a wrong effect, each named: any one zeroes the score."""
    args = _decoded(checks)
    out = _call_vetoes(names, expectation) + _effect_vetoes(names, checks, expectation, pairs)
    out += _order_vetoes(names, expectation, pairs) + _key_vetoes(names, args)
    out += [f"{found.code}:{names[found.call]}@{found.call}"
            for found in business_findings(ids, names, checks, expectation)]
    return out


def _verdict(checks: list[CallCheck], vetoes: list[str], sub_scores: dict[str, Any]) -> str:
    applies = {
        "veto": bool(vetoes),
        "unparseable": any(not check.parsed for check in checks),
        "refused": any(check.findings for check in checks),
        "incomplete": _factor(sub_scores["call_set"]) < 1 or _factor(sub_scores["dependency"]) < 1,
        "pass": True,
    }
    return next(name for name in VERDICTS if applies[name])


def score_response(response: Any, expectation: Expectation,
                   tools: Mapping[str, ToolContract] = TOOLS) -> dict[str, Any]:
    """Score a whole response against an expectation; hostile input yields codes, not exceptions."""
    try:
        _check_configuration(expectation, tools)
    except BenchError as error:
        return {**_failed_score(error.code, 0), "verdict": "invalid_input"}
    try:
        shape, raw_calls = read_response(response)
    except BenchError as error:
        return _failed_score(error.code, len(expectation.calls))
    ids, names, checks = _scored_calls(raw_calls, tools)
    weights = [[_pair_score(check, name, expected) for expected in expectation.calls]
               for name, check in zip(names, checks)]
    matched, pairs = optimal_matching(weights)
    edges = _edges(expectation, pairs)
    vetoes = plan_vetoes(ids, names, checks, expectation, pairs)
    count = len(checks)
    sub_scores = {
        "call_set": _ratio(matched, max(len(expectation.calls), count)),
        "dependency": _ratio(sum(1 for edge in edges if edge["satisfied"]), len(edges)),
        "parse": _ratio(sum(1 for check in checks if check.parsed), count),
        "schema": _ratio(sum(1 for check in checks if check.parsed and not check.findings), count),
    }
    verdict = _verdict(checks, vetoes, sub_scores)
    total = Fraction(0)
    if verdict in ("incomplete", "pass"):
        total = _factor(sub_scores["call_set"]) * _factor(sub_scores["dependency"])
    column_of = dict(pairs)
    return {
        "calls": [{"findings": [finding.to_json() for finding in check.findings], "index": index,
                   "matched": column_of.get(index), "name": name, "parsed": check.parsed,
                   "pair_score": str(weights[index][column_of[index]]) if index in column_of else "0"}
                  for index, (name, check) in enumerate(zip(names, checks))],
        "edges": edges, "error": None, "matching": [list(pair) for pair in pairs], "shape": shape,
        "sub_scores": sub_scores, "total": _ratio(total, 1), "verdict": verdict, "vetoes": vetoes,
    }


def _provider_call(ident: str, name: str, arguments: Any) -> dict[str, Any]:
    text = arguments if isinstance(arguments, str) else canonical_json(arguments).decode("utf-8")
    return {"arguments": text, "id": ident, "name": name}


_SEEDED_CONTEXT: Final = _freeze({"customer": "C1042", "orders": {SEEDED_ORDER: {"currency": "EUR", "version": 2}}})
_READ_ONLY: Final = Expectation("track_order", (ExpectedCall("query_logistics",
                                                             _freeze({"order_ref": SEEDED_ORDER})),),
                                forbidden=SIDE_EFFECT_TOOLS, context=_SEEDED_CONTEXT)
_REFUND: Final = Expectation("refund_damaged", (ExpectedCall("refund_payment", _freeze(
    {"amount_cents": 4999, "order_ref": SEEDED_ORDER, "reason": "damaged"})),),
    forbidden=SIDE_EFFECT_TOOLS - {"refund_payment"}, context=_SEEDED_CONTEXT)
_GOODWILL: Final = Expectation("goodwill_refund", (ExpectedCall("refund_payment", _freeze(
    {"amount_cents": 60_000, "order_ref": SEEDED_ORDER, "reason": "other"})),),
    forbidden=SIDE_EFFECT_TOOLS - {"refund_payment"}, context=_SEEDED_CONTEXT)
_SCHEDULE: Final = Expectation("schedule_delivery", (ExpectedCall("schedule_delivery", _freeze(
    {"order_ref": SEEDED_ORDER, "window_start": "2026-12-03T09:00:00Z"})),),
    forbidden=SIDE_EFFECT_TOOLS - {"schedule_delivery"}, context=_SEEDED_CONTEXT)
_QUERY: Final = {"order_ref": SEEDED_ORDER}
_REFUND_ARGS: Final = {"amount_cents": 4999, "idempotency_key": "k-refund-20481", "order_ref": SEEDED_ORDER}
_SCHEDULE_ARGS: Final = {"idempotency_key": "k-delivery-20481", "order_ref": SEEDED_ORDER,
                         "order_version": 2, "window_start": "2026-12-03T09:00:00Z"}


def _plan_response(patches: tuple = (), order: tuple[str, ...] = PLAN_TOOLS, *,
                   extra: tuple[tuple[int, str, dict], ...] = (), ids: str | None = None) -> dict[str, Any]:
    """The four-step plan as a bench-shaped response, patched, reordered, with extra calls inserted."""
    calls = [call.to_json() for call in plan_calls(patches, order)]
    for position, tool, changes in extra:
        arguments = {**_thaw(PLAN_ARGUMENTS[tool]), **changes}
        calls.insert(position, _provider_call(f"call_x{position}", tool, arguments))
    if ids is not None:
        calls = [{**call, "id": ids} for call in calls]
    return {"tool_calls": calls}


_SHARED_KEY: Final = tuple((tool, ("idempotency_key",), "k-shared-30417") for tool in PLAN_TOOLS)


@dataclass(frozen=True, slots=True)
class ScorerCase:
    id: str
    title: str
    response: Mapping[str, Any]
    expectation: Expectation
    seed_era_score: str  # what the audited first-call-only scorer gave it
    verdict: str  # the corrected verdict, a regression the bench must keep
    guarded: str  # the lifecycle the guarded orchestrator must end in


SCORER_CASES: Final = (
    ScorerCase("SC1", "correct query (baseline)",
               {"tool_calls": [_provider_call("c1", "query_logistics", _QUERY)]},
               _READ_ONLY, "-", "pass", RECONCILED),
    ScorerCase("SC2", "correct query, then cancel_order",
               {"tool_calls": [_provider_call("c1", "query_logistics", _QUERY),
                               _provider_call("c2", "cancel_order", {
                                   **_QUERY, "idempotency_key": "k-cancel-20481",
                                   "reason": "customer_request"})]},
               _READ_ONLY, "1.00", "veto", REFUSED),
    ScorerCase("SC3", "refund missing required reason",
               {"tool_calls": [_provider_call("c1", "refund_payment", _REFUND_ARGS)]},
               _REFUND, "0.75", "refused", REFUSED),
    ScorerCase("SC4", "string field given a number",
               {"tool_calls": [_provider_call("c1", "query_logistics", {"order_ref": 20481})]},
               _READ_ONLY, "1.00", "refused", REFUSED),
    ScorerCase("SC5", "unknown field force=true",
               {"tool_calls": [_provider_call("c1", "refund_payment", {
                   **_REFUND_ARGS, "force": True, "reason": "damaged"})]},
               _REFUND, "0.90", "refused", REFUSED),
    ScorerCase("SC6", "arguments are not valid JSON",
               {"tool_calls": [_provider_call("c1", "query_logistics", '{"order_ref": "20481"')]},
               _READ_ONLY, "0.50", "unparseable", REFUSED),
    # Issue 13: plans whose fault only shows across calls; each now a veto with its named reason.
    ScorerCase("SC7", "double charge under a fresh key",
               _plan_response(extra=((3, "charge_payment", {"idempotency_key": "k-charge-30417-again"}),)),
               PLACE_ORDER, "0.80", "veto", REFUSED),
    ScorerCase("SC8", "charge on the wrong order",
               _plan_response((("charge_payment", ("order_ref",), "30418"),)), PLACE_ORDER, "0.875", "veto", REFUSED),
    ScorerCase("SC9", "charge of the wrong amount",
               _plan_response((("charge_payment", ("amount_cents",), 5999),)), PLACE_ORDER, "0.875", "veto", REFUSED),
    ScorerCase("SC10", "refund on the wrong order",
               {"tool_calls": [_provider_call("c1", "refund_payment", {**_REFUND_ARGS, "order_ref": "20482",
                                                                      "reason": "damaged"})]},
               _REFUND, "0.667", "veto", REFUSED),
    ScorerCase("SC11", "charge before the stock is reserved",
               _plan_response(order=("create_order", "charge_payment", "reserve_inventory", "confirm_order")),
               PLACE_ORDER, "0.80", "veto", REFUSED),
    ScorerCase("SC12", "one idempotency key on four different calls",
               _plan_response(_SHARED_KEY), PLACE_ORDER, "1.00", "veto", REFUSED),
    ScorerCase("SC13", "USD charge on a EUR order",
               _plan_response((("charge_payment", ("currency",), "USD"),)), PLACE_ORDER, "1.00", "veto", REFUSED),
    ScorerCase("SC14", "four calls share one provider call id",
               _plan_response(ids="call_1"), PLACE_ORDER, "1.00", "veto", REFUSED),
    ScorerCase("SC15", "the seed's bare list: query, then cancel_order",
               [{"arguments": _QUERY, "name": "query_logistics"},
                {"arguments": {**_QUERY, "idempotency_key": "k-cancel-20481", "reason": "customer_request"},
                 "name": "cancel_order"}],
               _READ_ONLY, "0.00", "veto", REFUSED),
    ScorerCase("SC16", "order placed for another customer",
               _plan_response((("create_order", ("customer", "id"), "C9999"),)), PLACE_ORDER, "1.00", "veto",
               REFUSED),
    ScorerCase("SC17", "high-value refund without a second confirmation",
               {"tool_calls": [_provider_call("c1", "refund_payment", {**_REFUND_ARGS, "amount_cents": 60_000,
                                                                      "reason": "other"})]},
               _GOODWILL, "-", "veto", REFUSED),
    ScorerCase("SC18", "delivery scheduled against a stale order version",
               {"tool_calls": [_provider_call("c1", "schedule_delivery", {**_SCHEDULE_ARGS, "order_version": 1})]},
               _SCHEDULE, "-", "veto", REFUSED),
    ScorerCase("SC19", "delivery window that is not a date-time",
               {"tool_calls": [_provider_call("c1", "schedule_delivery", {
                   **_SCHEDULE_ARGS, "window_start": "2026-02-30T09:00:00Z"})]},
               _SCHEDULE, "-", "refused", REFUSED),
    ScorerCase("SC20", "delivery scheduled on the current version",
               {"tool_calls": [_provider_call("c1", "schedule_delivery", _SCHEDULE_ARGS)]},
               _SCHEDULE, "-", "pass", RECONCILED),
)


def _outcome_digest(record: Mapping) -> dict[str, Any]:
    return {"diff_paths": [change["path"] for change in record["diff"]], "lifecycle": record["lifecycle"],
            "outcome": record["outcome"], "side_effects": record["side_effects"],
            "violations": METRICS["violations"](record)}


def run_scorer_case(case: ScorerCase, *, seed: int = SEED) -> dict[str, Any]:
    """Score the proposal, then run it under both orchestrators on a sandbox with history."""
    score = score_response(_thaw(case.response), case.expectation)
    calls = calls_from_response(_thaw(case.response))
    runs = {name: seal(execute_run(name, calls, case.expectation, seed=seed, initial=seed_confirmed_order))
            for name in ("guarded", "naive")}
    regression = score["verdict"] == case.verdict and runs["guarded"]["lifecycle"] == case.guarded
    return seal({
        "case": case.id, "expected_verdict": case.verdict, "guarded": _outcome_digest(runs["guarded"]),
        "guarded_record": runs["guarded"], "kind": "scorer", "naive": _outcome_digest(runs["naive"]),
        "naive_record": runs["naive"], "run_id": f"{case.id}/scorer", "score": score,
        "seed_era_score": case.seed_era_score, "title": case.title,
        "verdict": "pass" if regression else "fail",
    })


# ================================================================================================
# 15. Bench: run_all, result files, check
# ================================================================================================

@dataclass(frozen=True, slots=True)
class BenchOutcome:
    raw: bytes  # raw_results.jsonl, exactly as written
    summary: dict[str, Any]
    failures: tuple[str, ...]  # empty when every scenario, control, sweep and scorer rule held

    @property
    def passed(self) -> bool:
        return not self.failures

    def summary_bytes(self) -> bytes:
        return (json.dumps(self.summary, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


def _failures(scenarios: list, controls: list, table: dict, scorer: list,
              verdicts: Mapping[str, Mapping[str, Any]] = MappingProxyType({})) -> tuple[str, ...]:
    found = [f"scenario {r['scenario']} failed an assertion" for r in scenarios if r["verdict"] != "pass"]
    found += [f"control {r['control']} did not show its fault: the harness is broken"
              for r in controls if r["verdict"] != "shown"]
    found += [f"sweep: the guarded orchestrator violated {name}" for name, row in table.items()
              if row["guarded"]]
    found += [f"sweep: the guarded orchestrator completed too few completable runs ({row['liveness']})"
              for name, row in verdicts.items() if name == "guarded" and row["verdict"] != "pass"]
    found += [f"sweep: the naive orchestrator never violated {name}: the harness is blind to it"
              for name in sorted(NAIVE_BREAKS) if not table[name]["naive"]]
    found += [f"scorer case {r['case']} lost its corrected verdict" for r in scorer if r["verdict"] != "pass"]
    return tuple(found)


def _scenario_rows(scenarios: list, controls: list) -> list[dict[str, Any]]:
    control_of = {record["scenario"]: record for record in controls}
    rows = []
    for record in scenarios:
        paired = control_of.get(record["scenario"], {})
        rows.append({"control": paired.get("control"), "control_verdict": paired.get("verdict"),
                     "dimension": record["dimension"], "id": record["scenario"], "title": record["title"],
                     "verdict": record["verdict"]})
    return rows


def _dimension_counts(scenarios: list) -> dict[str, dict[str, int]]:
    counts = {dimension: {"passed": 0, "scenarios": 0} for dimension in DIMENSIONS}
    for record in scenarios:
        counts[record["dimension"]]["scenarios"] += 1
        counts[record["dimension"]]["passed"] += record["verdict"] == "pass"
    return counts


def _sweep_summary(sweep: list, plan: SweepPlan = SweepPlan(), seed: int = SEED) -> dict[str, Any]:
    outcomes = {name: Counter(line["outcome"] for line in sweep if line["orchestrator"] == name)
                for name in sorted({line["orchestrator"] for line in sweep})}
    tools = sweep_tools(plan_calls())
    spaces = {depth: space for depth, _faults, space in sweep_fault_sets(tools, plan, seed)}
    return {"depths": depth_table(sweep, spaces), "exhaustive_depth": plan.exhaustive_depth,
            "fault_kinds": list(SWEPT_KINDS), "invariants": sweep_table(sweep),
            "liveness_floor": f"{LIVENESS_FLOOR[0]}/{LIVENESS_FLOOR[1]}", "max_depth": plan.max_depth,
            "naive_must_break": sorted(NAIVE_BREAKS),
            "outcomes": {name: dict(sorted(counter.items())) for name, counter in outcomes.items()},
            "plan": list(PLAN_TOOLS), "runs_per_orchestrator": len(sweep) // len(outcomes),
            "sample_per_depth": plan.sample, "sample_seed": seed,
            "statements": {name: invariant.statement for name, invariant in INVARIANTS.items()},
            "tools": list(tools), "verdicts": sweep_verdicts(sweep), "efficiency": efficiency_table(sweep)}


def _scorer_summary(scorer: list) -> dict[str, Any]:
    config = scorer_config()
    cases = [{"guarded": record["guarded"], "id": record["case"], "naive": record["naive"],
              "score": {name: record["score"][name] for name in ("sub_scores", "total", "verdict")},
              "seed_era_score": record["seed_era_score"], "title": record["title"], "verdict": record["verdict"]}
             for record in scorer]
    return {"cases": cases, "config": config, "config_sha256": canonical_sha256(config)}


def _summary(scenarios: list, controls: list, sweep: list, scorer: list, raw: bytes,
             failures: tuple[str, ...], seed: int, sweep_plan: SweepPlan) -> dict[str, Any]:
    return {
        "bench": "tool-transaction-bench", "format": BENCH_FORMAT, "passed": not failures,
        "failures": list(failures), "seed": seed,
        "runs": {"controls": len(controls), "scenarios": len(scenarios), "total": len(scenarios) + len(controls)},
        "dimensions": _dimension_counts(scenarios),
        "scenarios": _scenario_rows(scenarios, controls),
        "controls": [{"id": r["control"], "scenario": r["scenario"], "shows": r["shows"], "verdict": r["verdict"]}
                     for r in controls],
        "sweep": _sweep_summary(sweep, sweep_plan, seed),
        "scorer": _scorer_summary(scorer),
        "vetoes": [{"case": r["case"], "veto": veto} for r in scorer for veto in r["score"]["vetoes"]],
        "raw_results": {"lines": raw.count(b"\n"), "sha256": hashlib.sha256(raw).hexdigest()},
    }


def run_all(seed: int = SEED, sweep_plan: SweepPlan = SweepPlan()) -> BenchOutcome:
    """The whole bench, sweep included: 14 scenarios, 5 controls, 6 scorer cases, the fault sweep."""
    scenarios = [run_scenario(scenario, seed=seed) for scenario in SCENARIOS]
    controls = [run_control(control, seed=seed) for control in CONTROLS]
    scorer = [run_scorer_case(case, seed=seed) for case in SCORER_CASES]
    sweep = run_sweep(seed=seed, plan=sweep_plan)
    raw = b"".join(canonical_json(line) + b"\n" for line in scenarios + controls + scorer + sweep)
    failures = _failures(scenarios, controls, sweep_table(sweep), scorer, sweep_verdicts(sweep))
    summary = _summary(scenarios, controls, sweep, scorer, raw, failures, seed, sweep_plan)
    return BenchOutcome(raw, summary, failures)


def write_results(outcome: BenchOutcome, directory: Path) -> None:
    try:
        directory.mkdir(exist_ok=True)
        with open(directory / RAW_FILE, "wb") as handle:
            handle.write(outcome.raw)
        with open(directory / SUMMARY_FILE, "wb") as handle:
            handle.write(outcome.summary_bytes())
    except (OSError, ValueError):
        raise BenchError("RESULTS_UNWRITABLE") from None


def _read(path: Path) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except (OSError, ValueError):
        return None


def _first_difference(name: str, fresh: bytes, committed: bytes | None) -> str | None:
    if committed is None:
        return f"{name}: missing or unreadable"
    if committed == fresh:
        return None
    for number, (new, old) in enumerate(zip(fresh.split(b"\n"), committed.split(b"\n")), 1):
        if new != old:
            return f"{name}: line {number} differs from a fresh run"
    return f"{name}: length differs from a fresh run ({len(committed)} bytes, fresh {len(fresh)})"


def check_results(directory: Path, outcome: BenchOutcome) -> list[str]:
    """Write a fresh run to a temporary directory and compare it byte for byte with `directory`."""
    if not directory.is_dir():
        raise BenchError("RESULTS_UNREADABLE")
    with tempfile.TemporaryDirectory(prefix="txbench-") as scratch:
        write_results(outcome, Path(scratch))
        pairs = [(name, _read(Path(scratch) / name), _read(directory / name)) for name in (RAW_FILE, SUMMARY_FILE)]
    return [problem for name, fresh, committed in pairs
            if (problem := _first_difference(name, fresh, committed)) is not None]


# ================================================================================================
# 15b. Scoring a user's plans file: one raw model response per line, pass^k over trials
# ================================================================================================

MAX_PLAN_LINE_BYTES: Final = 262_144  # one raw response with its envelope: 16 calls of 16 KiB fit
MAX_PLAN_LINES: Final = 10_000  # many trials of every scenario; a larger study splits its files
MAX_TRIAL: Final = 1_000  # trial numbers are small counters
PLAN_FIELDS: Final = (frozenset({"scenario", "trial", "response"}), frozenset({"scenario", "trial", "error"}))
SMALL_SWEEP: Final = SweepPlan(exhaustive_depth=1, max_depth=1)  # a plan's own fault-recovery table

# The scenarios a plans file may name: each expectation by its name, on a sandbox with history.
SCORING_SCENARIOS: Final = MappingProxyType({expectation.name: expectation for expectation in (
    PLACE_ORDER, _READ_ONLY, _REFUND, _GOODWILL, _SCHEDULE)})


@dataclass(frozen=True, slots=True)
class PlanRecord:
    line: int
    scenario: str
    trial: int
    response: Any  # the raw response, any shape; None when the line reports a model error
    model_error: bool


def _plan_record(number: int, data: bytes) -> PlanRecord | None:
    if not data.strip():
        return None  # a blank line (a trailing newline, a separator) holds no plan
    try:
        value = tool_dispatcher.decode_strict_json(data, max_bytes=MAX_PLAN_LINE_BYTES,
                                                   max_depth=tool_dispatcher.MAX_NESTING_DEPTH,
                                                   policy=tool_dispatcher.ENVELOPE_JSON)
    except tool_dispatcher.BoundaryError:
        raise BenchError("PLANS_LINE", f"line {number}", detail="not a JSON object") from None
    if not isinstance(value, dict) or frozenset(value) not in PLAN_FIELDS:
        raise BenchError("PLANS_LINE", f"line {number}", detail="fields must be scenario, trial, response or error")
    trial = value["trial"]
    if type(trial) is not int or not 0 <= trial <= MAX_TRIAL or not isinstance(value["scenario"], str):
        raise BenchError("PLANS_LINE", f"line {number}", detail="trial must be an integer 0..1000")
    if value["scenario"] not in SCORING_SCENARIOS:
        raise BenchError("PLANS_SCENARIO_UNKNOWN", f"line {number}",
                         detail="known: " + ", ".join(sorted(SCORING_SCENARIOS)))
    if "error" in value:
        return PlanRecord(number, value["scenario"], trial, None, True)
    return PlanRecord(number, value["scenario"], trial, value["response"], False)


def read_plans(path: Any) -> list[PlanRecord]:
    """Every plan of a JSONL file, bounded per line and per file; the first bad line stops it."""
    records, seen = [], set()
    try:
        with open(path, "rb") as handle:
            for number in range(1, MAX_PLAN_LINES + 2):
                data = handle.readline(MAX_PLAN_LINE_BYTES + 2)  # the line, then room for CR LF
                if not data:
                    break
                if number > MAX_PLAN_LINES:
                    raise BenchError("PLANS_TOO_MANY_LINES", f"line {number}")
                text = data.rstrip(b"\r\n")
                if len(text) > MAX_PLAN_LINE_BYTES:
                    raise BenchError("PLANS_LINE", f"line {number}", detail="longer than the line limit")
                record = _plan_record(number, text)
                if record is None:
                    continue
                if (record.scenario, record.trial) in seen:
                    raise BenchError("PLANS_LINE", f"line {number}", detail="scenario and trial repeat a line")
                seen.add((record.scenario, record.trial))
                records.append(record)
    except (OSError, ValueError):
        raise BenchError("PLANS_UNREADABLE") from None
    return records


def _recovery_table(lines: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    efficiency = efficiency_table(lines)
    return {name: {**{key: row[key] for key in ("completable", "live", "liveness", "unsafe", "verdict")},
                   **efficiency[name]}
            for name, row in sweep_verdicts(lines).items()}


def score_plan(record: PlanRecord, *, sweep: bool = False,
               registry: Mapping[str, Orchestrator] = ORCHESTRATORS) -> dict[str, Any]:
    """One plan line: its score, sub-scores and vetoes; with `sweep`, its fault-recovery table."""
    out: dict[str, Any] = {"kind": "plan", "line": record.line, "scenario": record.scenario, "trial": record.trial}
    if record.model_error:
        return {**out, "score": "0.000", "shape": None, "sub_scores": None, "verdict": "model_error", "vetoes": []}
    expectation = SCORING_SCENARIOS[record.scenario]
    result = score_response(record.response, expectation)
    out.update({"score": result["total"]["value"], "shape": result["shape"],
                "sub_scores": {name: ratio["value"] for name, ratio in result["sub_scores"].items()},
                "verdict": result["verdict"], "vetoes": result["vetoes"]})
    if sweep and result["shape"] is not None:
        calls = tuple(ToolCall(item["id"], item["name"], item["arguments"]) if _is_call_dict(item)
                      else ToolCall("call", "unreadable", None) for item in read_response(record.response)[1])
        lines = run_sweep(calls=calls, expectation=expectation, plan=SMALL_SWEEP, orchestrators=tuple(registry),
                          initial=seed_confirmed_order, registry=registry)
        out["fault_recovery"] = _recovery_table(lines)
    return out


def _is_call_dict(item: Any) -> bool:
    return isinstance(item, dict) and set(item) == {"id", "name", "arguments"}


def pass_hat_k(trials: int, passed: int, k: int) -> Fraction:
    """tau-bench's pass^k for one task: the chance that k trials drawn from n all pass, C(c,k)/C(n,k)."""
    return Fraction(math_comb(passed, k), math_comb(trials, k))


def _scenario_aggregate(name: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    judged = [row for row in rows if row["verdict"] != "unreadable_shape"]  # the harness's blind spot
    passed = sum(1 for row in judged if row["verdict"] == "pass")
    total = sum((Fraction(row["score"]) for row in judged), Fraction(0))
    return {"kind": "scenario", "scenario": name, "trials": len(judged), "passed": passed,
            "mean_score": _ratio_text(total.numerator, total.denominator * max(len(judged), 1)) if judged else "n/a",
            "model_errors": sum(1 for row in rows if row["verdict"] == "model_error"),
            "unreadable_shapes": len(rows) - len(judged),
            "verdicts": dict(sorted(Counter(row["verdict"] for row in rows).items())),
            "pass^k": {str(k): _fraction_text(pass_hat_k(len(judged), passed, k))
                       for k in range(1, len(judged) + 1)}}


def _fraction_text(value: Fraction) -> str:
    return _ratio_text(value.numerator, value.denominator)


def aggregate_plans(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per scenario, then overall: trials, passes, mean score and pass^k (k up to the fewest trials)."""
    names = sorted({row["scenario"] for row in rows})
    scenarios = [_scenario_aggregate(name, [row for row in rows if row["scenario"] == name]) for name in names]
    fewest = min((item["trials"] for item in scenarios), default=0)
    overall = {"kind": "overall", "plans": len(rows), "scenarios": len(scenarios),
               "verdicts": dict(sorted(Counter(row["verdict"] for row in rows).items())),
               "pass^k": {str(k): _fraction_text(sum((pass_hat_k(item["trials"], item["passed"], k)
                                                      for item in scenarios), Fraction(0)) / len(scenarios))
                          for k in range(1, fewest + 1)}}
    return scenarios + [overall]


# ================================================================================================
# 16. CLI
# ================================================================================================

def _row(*cells: Any, widths: tuple[int, ...]) -> str:
    return "  ".join(str(cell).ljust(width) for cell, width in zip(cells, widths)).rstrip()


def _render_scenarios(summary: Mapping[str, Any]) -> list[str]:
    shows = {item["id"]: item["shows"] for item in summary["controls"]}
    widths = (13, 72, 8, 40)
    lines = [_row("dimension", "scenario", "guarded", "control", widths=widths)]
    for item in summary["scenarios"]:
        control = "-"
        if item["control"] is not None:
            control = f"{item['control']} {shows[item['control']]}: {item['control_verdict'].upper()}"
        lines.append(_row(item["dimension"], f"{item['id']} {item['title']}", item["verdict"].upper(), control,
                          widths=widths))
    return lines


def _render_invariants(sweep: Mapping[str, Any]) -> list[str]:
    names = list(sweep["verdicts"])
    widths = (24, 68) + (8,) * len(names)
    lines = [f"fault sweep: {sweep['runs_per_orchestrator']} fault sets x {len(names)} orchestrators, up to "
             f"{sweep['max_depth']} faults on {len(sweep['tools'])} tools (runs violating each invariant)",
             _row("invariant", "statement", *names, widths=widths)]
    lines += [_row(name, sweep["statements"][name], *(row[column] for column in names), widths=widths)
              for name, row in sweep["invariants"].items()]
    return lines


def _render_depths(sweep: Mapping[str, Any]) -> list[str]:
    widths = (5, 14, 9, 12, 7, 12, 5, 9)
    coverage = "every depth whole"
    if sweep["sample_per_depth"] is not None:
        coverage = (f"whole up to {sweep['exhaustive_depth']}; deeper: every one-tool set and a sample of "
                    f"{sweep['sample_per_depth']} spread sets, seed {sweep['sample_seed']}")
    lines = [f"per fault depth ({coverage})",
             _row("depth", "space", "runs", "orchestrator", "unsafe", "completable", "live", "liveness",
                  widths=widths)]
    lines += [_row(row["depth"], row["space"], row["runs"], row["orchestrator"], row["unsafe"],
                   row["completable"], row["live"], row["liveness"], widths=widths) for row in sweep["depths"]]
    lines += [f"sweep verdict {name}: {row['verdict'].upper()} (unsafe runs {row['unsafe']}, liveness "
              f"{row['live']}/{row['completable']} = {row['liveness']}, floor {sweep['liveness_floor']})"
              for name, row in sweep["verdicts"].items()]
    widths = (12, 10, 10, 9, 15, 15, 28)
    lines += ["", "efficiency over the sweep (latency simulated: 40 ms a call, 2 s a timeout, 15 ms a status query)",
              _row("orchestrator", "calls p50", "calls p95", "retries", "latency p50 ms", "latency p95 ms",
                   "runs with unexpected effects", widths=widths)]
    lines += [_row(name, row["calls_p50"], row["calls_p95"], row["retries"], row["latency_ms_p50"],
                   row["latency_ms_p95"], row["runs_with_unexpected_effects"], widths=widths)
              for name, row in sweep["efficiency"].items()]
    return lines


def _render_scorer(scorer: Mapping[str, Any]) -> list[str]:
    widths = (4, 50, 6, 6, 8, 10, 6, 16, 9, 14, 10)
    lines = ["full-plan scorer (proposal score, then the same proposal under each orchestrator)",
             _row("case", "proposal", "parse", "schema", "call_set", "dependency", "total", "verdict",
                  "seed-era", "naive effects", "guarded", widths=widths)]
    for case in scorer["cases"]:
        sub, score = case["score"]["sub_scores"], case["score"]
        lines.append(_row(case["id"], case["title"], sub["parse"]["value"], sub["schema"]["value"],
                          sub["call_set"]["value"], sub["dependency"]["value"], score["total"]["value"],
                          score["verdict"], case["seed_era_score"], case["naive"]["side_effects"],
                          case["guarded"]["lifecycle"], widths=widths))
    return lines


def render_summary(summary: Mapping[str, Any]) -> str:
    """The readable table: scenarios with their controls, the invariant table, the scorer cases."""
    runs = summary["runs"]
    lines = [f"tool-transaction-bench  seed {summary['seed']}  {runs['scenarios']} guarded runs + "
             f"{runs['controls']} controls  {'PASSED' if summary['passed'] else 'FAILED'}", ""]
    lines += _render_scenarios(summary) + [""] + _render_invariants(summary["sweep"]) + [""]
    lines += _render_depths(summary["sweep"]) + [""]
    lines += _render_scorer(summary["scorer"])
    lines += ["vetoes:" + ("" if summary["vetoes"] else " none")]
    lines += [f"  {item['case']:4}  {item['veto']}" for item in summary["vetoes"]]
    lines += [
              f"scorer config sha256 {summary['scorer']['config_sha256']}",
              f"raw_results.jsonl {summary['raw_results']['lines']} lines, "
              f"sha256 {summary['raw_results']['sha256']}"]
    lines += [f"FAILURE: {failure}" for failure in summary["failures"]]
    return "\n".join(lines)


def render_scenario(records: list[Mapping[str, Any]]) -> str:
    lines = []
    for record in records:
        lines.append(f"{record['run_id']}  lifecycle {record['lifecycle']}  outcome {record['outcome']}  "
                     f"verdict {record['verdict']}")
        for item in record["assertions"]:
            lines.append(f"  {item['verdict']:4}  {item['metric']}: expected "
                         f"{canonical_json(item['expected']).decode('utf-8')}, observed "
                         f"{canonical_json(item['observed']).decode('utf-8')}")
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = tool_dispatcher.CliParser(
        prog="transaction_bench.py", allow_abbrev=False,
        description="Deterministic tool-transaction bench: run, check, inspect a scenario, score plans, sweep an orchestrator.")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true",
                      help="compare a fresh run with the committed results byte for byte")
    mode.add_argument("--scenario", metavar="ID", help="run one scenario (S01..S14) and its control")
    mode.add_argument("--exhaustive", action="store_true",
                      help="run the fault sweep with every depth whole (no sample); writes nothing")
    parser.add_argument("--results", metavar="DIR", help="results directory (default: results/ here)")
    commands = parser.add_subparsers(dest="command", metavar="{score,sweep}")
    score = commands.add_parser("score", allow_abbrev=False, help="score a JSONL file of raw model responses")
    score.add_argument("--plans", metavar="FILE", required=True,
                       help="one JSON object per line: scenario, trial, response (or error)")
    score.add_argument("--sweep", action="store_true", help="also run each plan through the fault sweep")
    score.add_argument("--orchestrator", metavar="MODULE:CALLABLE",
                       help="with the sweep, also run each plan through this orchestrator")
    sweep = commands.add_parser("sweep", allow_abbrev=False, help="run the fault sweep against your orchestrator")
    sweep.add_argument("--orchestrator", metavar="MODULE:CALLABLE", required=True,
                       help="a callable orchestrate(calls, port) -> outcome (see the README)")
    return parser


def _run_one(scenario_id: str) -> int:
    scenario = SCENARIO_INDEX.get(scenario_id)
    if scenario is None:
        raise BenchError("SCENARIO_UNKNOWN", detail=f"known ids: {SCENARIOS[0].id}..{SCENARIOS[-1].id}")
    records = [run_scenario(scenario)]
    records += [run_control(control) for control in CONTROLS if control.scenario == scenario.id]
    print(render_scenario(records))
    return 0 if all(r["verdict"] in ("pass", "shown") for r in records) else 1


def _run_check(directory: Path) -> int:
    outcome = run_all()
    problems = check_results(directory, outcome)
    for problem in problems:
        print(f"check: {problem}")
    if problems:
        print("check: FAILED: the committed results differ from a fresh run")
        return 1
    print(f"check: OK: committed results match a fresh run byte for byte "
          f"(sha256 {outcome.summary['raw_results']['sha256']})")
    return 0 if outcome.passed else 1


def _run_exhaustive() -> int:
    started = time.perf_counter()
    plan = SweepPlan(sample=None)
    lines = run_sweep(plan=plan)
    summary = _sweep_summary(lines, plan)
    print("\n".join(_render_invariants(summary) + [""] + _render_depths(summary)))
    print(f"time: {time.perf_counter() - started:.1f} s for {len(lines)} runs")
    return 0 if summary["verdicts"]["guarded"]["verdict"] == "pass" else 1


def _user_registry(spec: str | None) -> dict[str, Orchestrator]:
    registry = dict(ORCHESTRATORS)
    if spec is not None:
        if os.getcwd() not in sys.path:
            sys.path.append(os.getcwd())  # a module beside the caller, after the bench's own folder
        registry["user"] = load_orchestrator(spec)
    return registry


def _run_score(options: argparse.Namespace) -> int:
    registry = _user_registry(options.orchestrator)
    rows = [score_plan(record, sweep=options.sweep or options.orchestrator is not None, registry=registry)
            for record in read_plans(options.plans)]
    for row in rows + aggregate_plans(rows):
        tool_dispatcher.emit_json(row, indent=None)
    return 0


def _run_user_sweep(options: argparse.Namespace) -> int:
    started = time.perf_counter()
    registry = _user_registry(options.orchestrator)
    lines = run_sweep(orchestrators=("user", "guarded", "naive"), registry=registry)
    summary = _sweep_summary(lines)
    print("\n".join(_render_invariants(summary) + [""] + _render_depths(summary)))
    print(f"time: {time.perf_counter() - started:.1f} s for {len(lines)} runs")
    return 0 if summary["verdicts"]["user"]["verdict"] == "pass" else 1


def _main(argv: list[str] | None) -> int:
    options = _parser().parse_args(argv)
    if options.command == "score":
        return _run_score(options)
    if options.command == "sweep":
        return _run_user_sweep(options)
    directory = RESULTS_DIR if options.results is None else Path(options.results)
    if options.scenario is not None:
        return _run_one(options.scenario)
    if options.check:
        return _run_check(directory)
    if options.exhaustive:
        return _run_exhaustive()
    started = time.perf_counter()
    outcome = run_all()
    elapsed = time.perf_counter() - started
    write_results(outcome, directory)
    print(render_summary(outcome.summary))
    print(f"time: {elapsed:.1f} s for the whole run, sweep included")
    return 0 if outcome.passed else 1


def main(argv: list[str] | None = None) -> int:
    """Every failure answers {"passed": false, "error": {...}} on stdout with exit 2 (run_cli)."""
    return tool_dispatcher.run_cli(lambda: _main(argv))


if __name__ == "__main__":
    sys.exit(main())
