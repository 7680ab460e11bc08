"""Expectations (what a request needs) and whole-plan validation before any tool starts, with the
business checks the guard refuses on and the scorer vetoes on."""
from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

from .limits import HIGH_VALUE_CENTS, MAX_CALLS, MAX_EXPECTED_CALLS, canonical_json
from .errors import BenchError
from .contracts import Finding, TOOLS, ToolContract, thaw, decode_arguments, instant, validate_arguments
from .sandbox import key_of


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
    # What the request knows that the calls must agree with; every key optional (CONTEXT_FIELDS):
    # customer (who asks), allowed_tools (what they may call), confirmed (a second confirmation
    # was given), orders ({order_ref: {currency, version}} for orders that exist already),
    # used_keys (idempotency keys that operations before this request already used).
    context: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))


def same_json(left: Any, right: Any) -> bool:
    # Exact: canonical bytes differ for 1 and true, for 1 and 1.0, for "1" and 1.
    return canonical_json(thaw(left)) == canonical_json(thaw(right))


_MISSING: Final = object()  # a fixed field the arguments do not have at all


def _property(schema: Any, name: str) -> Any:
    properties = schema.get("properties") if isinstance(schema, Mapping) else None
    return properties.get(name) if isinstance(properties, Mapping) else None


def _same_leaf(schema: Any, value: Any, fixed: Any) -> bool:
    # A date-time names an instant: another spelling of it (an offset, ".000", a lower-case t or z)
    # is the same value, and another instant is another value however close its text.
    if isinstance(schema, Mapping) and schema.get("format") == "date-time":
        left, right = instant(value), instant(fixed)
        if left is not None and right is not None:
            return left == right
    return same_json(value, fixed)


def fixed_mismatches(schema: Any, fixed: Mapping[str, Any], arguments: Any, path: str = "") -> list[str]:
    """The path of every value the request fixed that the arguments do not hold, depth first.

    A fixed object names only the fields it lists (the contract already refuses unknown ones);
    date-times compare as instants; everything else exactly.
    """
    out = []
    for name, value in sorted(fixed.items()):
        proposed = arguments.get(name, _MISSING) if isinstance(arguments, Mapping) else _MISSING
        if isinstance(value, Mapping) and isinstance(proposed, Mapping):
            out += fixed_mismatches(_property(schema, name), value, proposed, f"{path}/{name}")
        elif proposed is _MISSING or isinstance(value, Mapping) or not _same_leaf(
                _property(schema, name), proposed, value):
            out.append(f"{path}/{name}")
    return out


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
        and all(isinstance(call, ExpectedCall) and call.name in tools and isinstance(call.arguments, Mapping)
                and set(call.arguments) <= _properties(tools[call.name]) for call in calls)
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
        canonical_json([thaw(call.arguments) for call in calls])
    except (TypeError, ValueError):
        raise BenchError("EXPECTATION_INVALID") from None  # fixed values must be plain JSON


def _properties(tool: Any) -> set[Any]:
    # The top-level fields a tool's contract has; a malformed contract has none (check_schema says why).
    schema = getattr(tool, "schema", None)
    properties = schema.get("properties") if isinstance(schema, Mapping) else None
    return set(properties) if isinstance(properties, Mapping) else set()


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
    "used_keys": lambda value, _tools: (isinstance(value, (frozenset, tuple))
                                        and all(isinstance(key, str) for key in value)),
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


def _argument_findings(checks: list[CallCheck], expectation: Expectation, matches: dict[int, int],
                       tools: Mapping[str, ToolContract]) -> list[Finding]:
    found = []
    for expected_index, proposed_index in sorted(matches.items()):
        arguments = checks[proposed_index].arguments
        if not isinstance(arguments, dict):
            continue  # a call that did not decode already has its finding
        expected = expectation.calls[expected_index]
        schema = getattr(tools.get(expected.name), "schema", None)
        differing = {path.split("/")[1] for path in fixed_mismatches(schema, expected.arguments, arguments)}
        found += [Finding("ARGUMENT_MISMATCH", f"/{name}", proposed_index) for name in sorted(differing)]
    return found


def _key_findings(checks: list[CallCheck]) -> list[Finding]:
    found, owners = [], {}
    for index, check in enumerate(checks):
        key = key_of(check.arguments)
        if key is not None and key in owners:
            found.append(Finding("KEY_REUSED", "/idempotency_key", index))
        owners.setdefault(key, index)
    return found


def decoded_arguments(checks: list[CallCheck]) -> list[dict]:
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
        # Exact, as every fixed value: true and 1.0 are not version 1 (Python's == says they are).
        if "order_version" in arguments and known is not None and not same_json(arguments["order_version"],
                                                                                 known["version"]):
            found.append(Finding("VERSION_STALE", "/order_version", index))
    return found


def _used_key_findings(_ids: list[Any], _names: list[Any], args: list[dict], expectation: Expectation
                       ) -> list[Finding]:
    # A key names one operation for as long as the tool remembers it: a key an earlier operation
    # used is replayed (that operation's receipt, not this call's effect) or refused, and a tool
    # that keeps keys per order would run the call twice under one name.
    used = expectation.context.get("used_keys", ())
    return [Finding("KEY_ALREADY_USED", "/idempotency_key", index)
            for index, arguments in enumerate(args) if key_of(arguments) in used]


def _exclusive_findings(_ids: list[Any], names: list[Any], _args: list[dict], expectation: Expectation
                        ) -> list[Finding]:
    return [Finding("CALLS_EXCLUSIVE", f"/{first}+{second}", names.index(second))
            for first, second in expectation.exclusive if first in names and second in names]


# Money that moves out cannot be taken back quietly: above HIGH_VALUE_CENTS it needs a confirmation.
IRREVERSIBLE_TOOLS: Final = frozenset({"charge_payment", "refund_payment"})
# The checks a request's context makes possible, each over the whole plan. The guard refuses a
# plan with any finding; the scorer vetoes it with the finding's code as the named reason.
BUSINESS_CHECKS: Final = (_call_id_findings, _currency_findings, _customer_findings,
                          _confirmation_findings, _version_findings, _used_key_findings, _exclusive_findings)


def business_findings(ids: list[Any], names: list[Any], checks: list[CallCheck],
                      expectation: Expectation) -> list[Finding]:
    args = decoded_arguments(checks)
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
    found += _argument_findings(checks, expectation, matches, tools)
    found += business_findings([call.id for call in calls], names, checks, expectation)
    plan = tuple((call.name, check.arguments) for call, check in zip(calls, checks))
    return plan, tuple(found)
