"""The bench's error catalog (no code shared with the core's), BenchError, the answer classes, and the
lifecycle of a guarded run: its transition table is the spec."""
from __future__ import annotations

from types import MappingProxyType
from typing import Any, Final

import tool_dispatcher


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
    # argument fields against the bench's own tool schemas (FIELD_*: disjoint from the core's
    # SCHEMA_* codes, which refuse a schema itself, and from ARGUMENT_MISMATCH, a plan check)
    **tool_dispatcher.error_specs(
        "field", False,
        FIELD_TYPE="a value has the wrong JSON type",
        FIELD_REQUIRED="a required field is missing",
        FIELD_UNKNOWN_KEY="a field is not in the contract",
        FIELD_ENUM="a value is not one of the allowed values",
        FIELD_RANGE="an integer is outside its range",
        FIELD_LENGTH="a string is too short or too long",
        FIELD_PATTERN="a string does not match its pattern",
        FIELD_FORMAT="a string does not have its declared format",
        FIELD_ITEMS="an array has too few or too many items",
        FIELD_UNSUPPORTED="a schema uses a keyword or shape this validator does not support",
        FIELD_FORMAT_UNSUPPORTED="a schema declares a string format this validator does not check",
    ),
    # response shape, as the scorer receives it
    **tool_dispatcher.error_specs(
        "response", False,
        RESPONSE_SHAPE="the response is not exactly one of the shapes the scorer reads",
        RESPONSE_ITEM_UNREAD="the response holds an item of a kind the scorer does not read",
        RESPONSE_MALFORMED_CALL="the provider reports that the model's tool call was malformed",
        RESPONSE_UNFINISHED="the provider reports that the response did not finish",
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
        KEY_ALREADY_USED="the idempotency key was used by an operation before this request",
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
        CURRENCY_CONFLICT="the currency differs from the order's currency",
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
    "CURRENCY_CONFLICT": PERMANENT,
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
