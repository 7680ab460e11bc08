"""The seed's 14 scenarios with their pre-declared assertions, and the 5 paired naive controls."""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from .limits import GUARDED_MAX_ATTEMPTS, INITIAL_STOCK, PLAN_ORDER, PLAN_TOOLS, SEED, canonical_json
from .errors import RECONCILED, REFUSED
from .contracts import freeze, thaw
from .sandbox import Fault, SEEDED_CHARGE_KEY
from .plans import Expectation, ExpectedCall, ToolCall
from .records import INVARIANTS, execute_run, judge, seal, state_hash


# ================================================================================================
# 12. Scenarios and paired controls
# ================================================================================================

PLAN_ARGUMENTS: Final = freeze({
    "create_order": {"amount_cents": 4999, "currency": "EUR", "customer": {"id": "C1042", "tier": "standard"},
                     "idempotency_key": "k-create-30417", "line": {"quantity": 2, "sku": "SKU-RED"},
                     "order_ref": PLAN_ORDER},
    "reserve_inventory": {"idempotency_key": "k-reserve-30417", "order_ref": PLAN_ORDER, "quantity": 2,
                          "sku": "SKU-RED"},
    "charge_payment": {"amount_cents": 4999, "currency": "EUR", "idempotency_key": "k-charge-30417",
                       "order_ref": PLAN_ORDER, "payment_method": {"token": "tok_4242abcd", "type": "card"}},
    "confirm_order": {"idempotency_key": "k-confirm-30417", "order_ref": PLAN_ORDER},
})

# The request names every value the plan's effects carry: the goods, the price and its currency,
# the customer's tier and the card on file. The customer's id comes from the context and the
# charge's currency is its order's (MODEL_CHOSEN says where each unnamed value comes from); only
# the idempotency keys are the model's to mint.
PLACE_ORDER: Final = Expectation(
    name="place_order",
    calls=(ExpectedCall("create_order", freeze({"amount_cents": 4999, "currency": "EUR",
                                                 "customer": {"tier": "standard"},
                                                 "line": {"quantity": 2, "sku": "SKU-RED"},
                                                 "order_ref": PLAN_ORDER})),
           ExpectedCall("reserve_inventory", freeze({"order_ref": PLAN_ORDER, "quantity": 2,
                                                      "sku": "SKU-RED"})),
           ExpectedCall("charge_payment", freeze({"amount_cents": 4999, "order_ref": PLAN_ORDER,
                                                   "payment_method": {"token": "tok_4242abcd", "type": "card"}})),
           ExpectedCall("confirm_order", freeze({"order_ref": PLAN_ORDER}))),
    edges=((0, 1), (0, 2), (1, 2), (1, 3), (2, 3)),  # stock before money, both before confirming
    forbidden=frozenset({"cancel_order", "refund_payment", "release_inventory"}),
    context=freeze({"allowed_tools": PLAN_TOOLS + ("query_logistics",), "customer": "C1042",
                    "used_keys": (SEEDED_CHARGE_KEY,)}),
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
        arguments = thaw(PLAN_ARGUMENTS[tool])
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
_ORDER_ROW: Final = {"amount_cents": 4999, "currency": "EUR", "quantity": 2, "sku": "SKU-RED"}
_RESERVATION_ROW: Final = {"order_ref": PLAN_ORDER, "quantity": 2, "sku": "SKU-RED"}
EXPECTED_COMPLETED_STATE: Final = freeze({
    "charges": {"CH-0001": {"amount_cents": 4999, "currency": "EUR", "key": "k-charge-30417",
                            "order_ref": PLAN_ORDER, "status": "captured"}},
    "inventory": {"SKU-BLUE": 5, "SKU-RED": 3},
    "orders": {PLAN_ORDER: {**_ORDER_ROW, "status": "confirmed"}},
    "reservations": {"RES-0001": {**_RESERVATION_ROW, "status": "held"}},
})
EXPECTED_COMPENSATED_STATE: Final = freeze({
    "charges": {}, "inventory": dict(INITIAL_STOCK),
    "orders": {PLAN_ORDER: {**_ORDER_ROW, "status": "cancelled"}},
    "reservations": {"RES-0001": {**_RESERVATION_ROW, "status": "released"}},
})

_REFUSED_UNTOUCHED: Final = (("lifecycle", REFUSED), ("outcome", "refused"), ("side_effects", 0),
                             ("state_changed", False), ("submissions", 0))
_COMPLETED: Final = (("lifecycle", RECONCILED), ("outcome", "completed"), ("side_effects", 4),
                     ("orders", {PLAN_ORDER: "confirmed"}), ("new_charges", 1),
                     ("held_reservations", 1), ("violations", _violations()),
                     ("state_sha256", state_hash(thaw(EXPECTED_COMPLETED_STATE))))
_COMPENSATED: Final = (("lifecycle", RECONCILED), ("outcome", "compensated"),
                       ("orders", {PLAN_ORDER: "cancelled"}), ("new_charges", 0),
                       ("held_reservations", 0), ("inventory", {"SKU-BLUE": 5, "SKU-RED": 5}),
                       ("compensation_order", ["release_inventory", "cancel_order"]),
                       ("violations", _violations()),
                       ("state_sha256", state_hash(thaw(EXPECTED_COMPENSATED_STATE))))


def _plain_ledger(**overrides: dict[str, int]) -> dict[str, dict[str, int]]:
    """The plan's four key rows, one attempt, effect and acknowledgement each unless overridden."""
    one = {"acknowledged": 1, "attempted": 1, "effects": 1}
    return {f"{tool}|{PLAN_ARGUMENTS[tool]['idempotency_key']}": overrides.get(tool, one) for tool in PLAN_TOOLS}


SCENARIOS: Final = (
    Scenario("S01", "schema", "required field missing (charge without amount_cents)",
             plan_calls((("charge_payment", ("amount_cents",), _ABSENT),)), (),
             _REFUSED_UNTOUCHED + (("refusal_codes", ["ARGUMENT_MISMATCH", "FIELD_REQUIRED"]),)),
    Scenario("S02", "schema", "wrong type (quantity as the string \"2\")",
             plan_calls((("reserve_inventory", ("quantity",), "2"),)), (),
             _REFUSED_UNTOUCHED + (("refusal_codes", ["ARGUMENT_MISMATCH", "FIELD_TYPE"]),)),
    Scenario("S03", "schema", "enum out of range (currency JPY)",
             plan_calls((("charge_payment", ("currency",), "JPY"),)), (),
             _REFUSED_UNTOUCHED + (("refusal_codes", ["CURRENCY_MISMATCH", "FIELD_ENUM"]),)),
    Scenario("S04", "schema", "side effect without idempotency key",
             plan_calls((("charge_payment", ("idempotency_key",), _ABSENT),)), (),
             _REFUSED_UNTOUCHED + (("refusal_codes", ["FIELD_REQUIRED", "KEY_MISSING"]),)),
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
