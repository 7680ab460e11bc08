"""The fault catalogue and injector, and the in-memory sandbox: orders, stock, charges, outbox, relay,
consumer. It knows nothing of orchestrators, scenarios or the scorer."""
from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Callable, Final

from .limits import INITIAL_STOCK, MAX_DELIVERIES, SEEDED_ORDER, canonical_sha256
from .errors import BenchError
from .contracts import TOOLS, freeze, thaw


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


def key_of(arguments: Any) -> str | None:
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
    amount, currency = _positive(arguments, "amount_cents"), _field(arguments, "currency", str)
    if reference in box.orders:
        raise BenchError("ORDER_EXISTS")  # the one unique constraint a real order table has
    box.orders[reference] = {"amount_cents": amount, "currency": currency, "quantity": quantity, "sku": sku,
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
    amount, currency = _positive(arguments, "amount_cents"), _field(arguments, "currency", str)
    if amount != order["amount_cents"]:
        raise BenchError("AMOUNT_MISMATCH")
    if currency != order["currency"]:
        raise BenchError("CURRENCY_CONFLICT")  # 4999 USD is not the 4999 EUR the order is for
    ident = box.next_id("CH")
    box.charges[ident] = {"amount_cents": amount, "currency": currency, "key": key_of(arguments),
                          "order_ref": reference, "status": "captured"}
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
        key = key_of(arguments)
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
        intent = _intent(arguments)
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

    def remember(self, tool: str, arguments: dict, receipt: dict) -> None:
        """An operation committed before this run: the tool's idempotency store keeps its key."""
        self._store[(tool, arguments["idempotency_key"])] = {"intent": _intent(arguments),
                                                             "receipt": copy.deepcopy(receipt)}

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


def _intent(arguments: dict) -> str:
    # What a key is bound to: every argument but the key itself.
    return canonical_sha256({name: value for name, value in arguments.items() if name != "idempotency_key"})


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


# The charge the seeded order was paid with, as its caller sent it: its key is remembered by the
# payment tool like any other, so a later call under that key replays it or conflicts with it.
SEEDED_CHARGE_KEY: Final = "seed-charge-20481"
SEEDED_CHARGE: Final = freeze({
    "amount_cents": 4999, "currency": "EUR", "idempotency_key": SEEDED_CHARGE_KEY, "order_ref": SEEDED_ORDER,
    "payment_method": {"token": "tok_4242abcd", "type": "card"},
})


def seed_confirmed_order(box: Sandbox) -> None:
    """History for the scorer cases: one confirmed, paid order whose events were consumed."""
    box.orders[SEEDED_ORDER] = {"amount_cents": 4999, "currency": "EUR", "quantity": 1, "sku": "SKU-BLUE",
                                "status": "confirmed"}
    box.reservations[box.next_id("RES")] = {"order_ref": SEEDED_ORDER, "quantity": 1,
                                            "sku": "SKU-BLUE", "status": "held"}
    charge = box.next_id("CH")
    box.charges[charge] = {"amount_cents": 4999, "currency": "EUR", "key": SEEDED_CHARGE_KEY,
                           "order_ref": SEEDED_ORDER, "status": "captured"}
    box.inventory["SKU-BLUE"] -= 1
    box.remember("charge_payment", thaw(SEEDED_CHARGE), _receipt(SEEDED_ORDER, ("charges", charge, "captured")))
