"""Invariants, run records (snapshots, diff, ledger, seal), expected-state digests, run cost, metrics."""
from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Callable, Final

from .limits import BUSINESS_TABLES, SEED, canonical_json, canonical_sha256
from .errors import MANUAL
from .sandbox import Fault, Sandbox
from .plans import Expectation, ToolCall
from .orchestrators import COMPENSATIONS, Journal, ORCHESTRATORS, Orchestrator


# ================================================================================================
# 10. Invariants
# ================================================================================================

# The saga read backwards: each compensating tool and the forward step it undoes.
UNDOES: Final = MappingProxyType({undo: forward for forward, (undo, _build) in COMPENSATIONS.items()})


def _unknown_left(record: Mapping) -> bool:
    return any(unknown["resolution"] is None for unknown in record["unknowns"])


def _compensation_failed(record: Mapping) -> bool:
    # An undo sent after the step it undoes committed, that never took effect: no commit of it and
    # no successful answer to it (a replayed receipt is one). An undo sent before its step
    # committed has nothing to undo, and one sent again after it took effect changes nothing:
    # neither refusal is a failed compensation.
    committed: set[str] = set()
    pending: set[str] = set()
    undone: set[str] = set()
    for entry in record["trace"]:
        tool, what = entry.get("tool"), entry["what"]
        if tool in UNDOES and UNDOES[tool] in committed:
            if what == "call" and tool not in undone:
                pending.add(tool)
            elif what == "commit" or (what == "answer" and entry["ok"]):
                pending.discard(tool)
                undone.add(tool)
        elif what == "commit":
            committed.add(tool)
    return bool(pending)


# Why a person may take a run over: the two cases the seed sends to a human, an outcome nobody
# could resolve and a compensation that failed (UNKNOWN 与补偿失败进入人工). Each is read from
# what the run did (its journal of unknowns, its trace), never from what the orchestrator says.
MANUAL_GROUNDS: Final = MappingProxyType({
    "unknown_unresolved": _unknown_left,
    "compensation_failed": _compensation_failed,
})


def manual_grounds(record: Mapping) -> tuple[str, ...]:
    """The grounds a run shows for handing it to a person, in MANUAL_GROUNDS order."""
    return tuple(name for name, shown in MANUAL_GROUNDS.items() if shown(record))


def _excused(record: Mapping) -> set[str]:
    # The orders a MANUAL escalation hands over, by name, when the run shows grounds for it. Without
    # grounds every outcome was known and every compensation worked: the saga could have undone
    # the leftovers, so handing them to a person hides them instead.
    manual = record["manual"]
    if manual is None or not manual_grounds(record):
        return set()
    return set(manual.get("orders", ()))


def _single_charge(record: Mapping) -> list[dict]:
    charges = record["state_after"]["charges"].values()
    by_order = Counter(charge["order_ref"] for charge in charges)
    by_key = Counter(charge["key"] for charge in charges if charge["key"] is not None)
    return ([{"order_ref": ref, "charges": n} for ref, n in sorted(by_order.items()) if n > 1]
            + [{"key": key, "charges": n} for key, n in sorted(by_key.items()) if n > 1])


def _no_orphan_reservation(record: Mapping) -> list[dict]:
    after = record["state_after"]
    excused = _excused(record)
    held = Counter(row["order_ref"] for row in after["reservations"].values() if row["status"] == "held")
    found = []
    for reference, count in sorted(held.items()):
        status = after["orders"].get(reference, {}).get("status")
        if reference not in excused and (status != "confirmed" or count > 1):
            found.append({"order_ref": reference, "held": count, "order_status": status})
    return found


def _no_orphan_charge(record: Mapping) -> list[dict]:
    # Money kept for an order that is not confirmed: a saga that cancels and releases but never
    # refunds. A grounded escalation that names the order excuses it, as it does a reservation.
    after = record["state_after"]
    excused = _excused(record)
    captured = Counter(row["order_ref"] for row in after["charges"].values() if row["status"] == "captured")
    found = []
    for reference, count in sorted(captured.items()):
        status = after["orders"].get(reference, {}).get("status")
        if reference not in excused and status != "confirmed":
            found.append({"captured": count, "order_ref": reference, "order_status": status})
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


def _escalation_grounded(record: Mapping) -> list[dict]:
    # MANUAL is a safe end only where the orchestrator could not finish the saga itself. An
    # escalation with every outcome known and every compensation working abandons a run it could
    # have completed or undone, whether it leaves debris or a finished order on a person's desk.
    manual = record["manual"]
    if manual is None or manual_grounds(record):
        return []
    return [{"orders": list(manual.get("orders", ())), "reason": manual.get("reason")}]


@dataclass(frozen=True, slots=True)
class Invariant:
    statement: str
    check: Callable[[Mapping], list[dict]]


INVARIANTS: Final = MappingProxyType({
    "single_charge": Invariant("at most one charge per order and per key", _single_charge),
    "no_orphan_reservation": Invariant(
        "every held reservation belongs to a confirmed order, one per order", _no_orphan_reservation),
    "no_orphan_charge": Invariant("every captured charge belongs to a confirmed order", _no_orphan_charge),
    "consumed_exactly_once": Invariant(
        "every committed state change is consumed exactly once", _consumed_exactly_once),
    "key_ledger": Invariant("acknowledged <= effects <= attempted for each key", _key_ledger),
    "unknown_resolved": Invariant("every unknown is resolved or escalated to MANUAL", _unknown_resolved),
    "escalation_grounded": Invariant(
        "MANUAL only after an unresolved unknown or a failed compensation", _escalation_grounded),
})
# The sweep's naive side must break these, or the harness cannot see what it claims to see.
# key_ledger is not among them: naive retries draw a fresh key, so no key ever carries two replies.
# Nor is escalation_grounded: the naive side never escalates; the tests' always-manual
# orchestrator is the case that shows it.
NAIVE_BREAKS: Final = frozenset({"single_charge", "no_orphan_reservation", "no_orphan_charge",
                                  "consumed_exactly_once", "unknown_resolved"})


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
