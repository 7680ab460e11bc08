"""The journal and the orchestrators: naive, guarded, and a user's own through the ToolPort interface."""
from __future__ import annotations

import copy
import importlib
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Callable, Final

from .limits import GUARDED_MAX_ATTEMPTS, NAIVE_MAX_ATTEMPTS, canonical_json, canonical_sha256
from .errors import BenchError, Lifecycle, MANUAL, PERMANENT, UNKNOWN, classify
from .contracts import Finding, decode_arguments, tool_schemas
from .sandbox import Response, Sandbox, key_of
from .plans import Expectation, ToolCall, validate_plan


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
            journal.acknowledge(tool, key_of(arguments), response.data, distinct=False)
            return True
        if classify(response.code) == UNKNOWN:
            journal.note_unknown(tool, key_of(arguments), attempt)  # and never resolved
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
    key = key_of(arguments)
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
    `schemas` (every tool's JSON Schema). The consumer deduplicates, as infrastructure would. A
    name, key or arguments that are not plain JSON never reach a tool: the port answers BAD_REQUEST.
    """

    def __init__(self, box: Sandbox, expectation: Expectation) -> None:
        self._box = box
        self._expectation = expectation
        self.journal = Journal()
        self.schemas = tool_schemas()

    def call(self, name: str, arguments: Any) -> Response:
        if not (isinstance(name, str) and _recordable([name, arguments])):
            return Response(False, "BAD_REQUEST")  # never reaches the sandbox: the record could not hold it
        arguments = copy.deepcopy(arguments)  # the orchestrator keeps no handle on sandbox state
        key = key_of(arguments)
        response = self._box.call(name, arguments)
        if response.ok:
            self.journal.resolve(name, key, "same_key_replay")
            self.journal.acknowledge(name, key, response.data, distinct=True)
        elif classify(response.code) == UNKNOWN and key is not None:
            self.journal.note_unknown(name, key, len(self.journal.unknowns) + 1)
        return Response(response.ok, response.code, copy.deepcopy(response.data))

    def query_status(self, name: str, key: str) -> Response:
        if not (isinstance(name, str) and isinstance(key, str) and _recordable([name, key])):
            return Response(False, "BAD_REQUEST")
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
        return compensation_of(name, arguments)


def compensation_of(name: str, arguments: dict) -> tuple[str, dict] | None:
    """The saga's undo step for a forward step (tool and arguments), or None when it has none."""
    if name not in COMPENSATIONS:
        return None
    undo, build = COMPENSATIONS[name]
    return undo, build(arguments)


def _recordable(value: Any) -> bool:
    # What a port call puts in the run's trace, ledger and digests must be plain JSON: an object, a
    # set, NaN or a lone surrogate would make the record unsealable and stop the whole sweep.
    try:
        canonical_json(value)
    except (TypeError, ValueError, RecursionError):
        return False
    return True


USER_OUTCOMES: Final = frozenset({"completed", "compensated", "failed", "refused", "manual"})
# How a user's orchestrator can fail to answer at all, each recorded as the run's outcome: never
# live, whatever state it left (the sweep judges that state for safety all the same).
USER_FAILURES: Final = frozenset({"crashed", "invalid_outcome", "timed_out", "sweep_timed_out",
                                  "protocol_violation"})


def user_outcome(said: Any) -> str:
    """The outcome a user's answer records: one of its five words, "crashed", or "invalid_outcome"."""
    return said if isinstance(said, str) and said in USER_OUTCOMES | {"crashed"} else "invalid_outcome"


def user_result(outcome: str, calls: tuple[ToolCall, ...], box: Sandbox, port: ToolPort) -> RunResult:
    """A user's run as the bench records it: the consumer drains, "manual" hands the plan's orders over."""
    box.drain()
    manual = None
    if outcome == "manual":
        plan = tuple((call.name, _decoded_or_empty(call.arguments)) for call in calls)
        manual = _manual_case("USER_ESCALATION", None, plan)
    return RunResult(MANUAL if manual else None, [], outcome, (), manual, port.journal)


def user_orchestrator(orchestrate: Callable[[tuple[ToolCall, ...], ToolPort], Any]) -> Orchestrator:
    """Wrap a user's `orchestrate(calls, port)` so the bench runs it like its own two, in this process."""

    def run(calls: tuple[ToolCall, ...], box: Sandbox, expectation: Expectation, _rng: random.Random) -> RunResult:
        port = ToolPort(box, expectation)
        try:
            said = orchestrate(tuple(calls), port)
        except (Exception, SystemExit):  # noqa: BLE001  a user's bug is a finding of the run, not a crash of the bench
            # sys.exit() inside it too: it ended the whole command with status 0 and no verdict.
            # A KeyboardInterrupt still reaches the command (CLI_INTERRUPTED); os._exit cannot be caught.
            said = "crashed"
        return user_result(user_outcome(said), calls, box, port)

    return Orchestrator(True, run)


def _decoded_or_empty(text: Any) -> dict[str, Any]:
    try:
        return decode_arguments(text)
    except BenchError:
        return {}


def check_spec(spec: Any) -> tuple[str, str]:
    """MODULE:CALLABLE -> (module, attribute path), or ORCHESTRATOR_SPEC; nothing is imported."""
    if not isinstance(spec, str) or spec.count(":") != 1 or not all(
            re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]{0,127}", part) for part in spec.split(":")):
        raise BenchError("ORCHESTRATOR_SPEC")
    module_name, attribute = spec.split(":")
    return module_name, attribute


def import_orchestrate(spec: Any) -> Callable[..., Any]:
    """The callable a spec names, imported by name as Python would, or ORCHESTRATOR_UNLOADABLE."""
    module_name, attribute = check_spec(spec)
    try:
        target: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            target = getattr(target, part)
    except Exception:  # noqa: BLE001  any import-time failure of user code is one code, never a trace
        raise BenchError("ORCHESTRATOR_UNLOADABLE") from None
    if not callable(target):
        raise BenchError("ORCHESTRATOR_UNLOADABLE")
    return target


def load_orchestrator(spec: Any) -> Orchestrator:
    """MODULE:CALLABLE -> the wrapped orchestrator, run in this process (the CLI runs it in a box)."""
    return user_orchestrator(import_orchestrate(spec))
