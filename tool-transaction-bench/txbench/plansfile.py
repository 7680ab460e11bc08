"""Scoring a user's JSONL plans file: bounded reading, one line per plan, aggregates with pass^k."""
from __future__ import annotations

import os
import stat
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from fractions import Fraction
from math import comb as math_comb
from types import MappingProxyType
from typing import Any, Final

import tool_dispatcher

from .errors import BenchError
from .sandbox import seed_confirmed_order
from .plans import ToolCall
from .orchestrators import ORCHESTRATORS, Orchestrator
from .scenarios import PLACE_ORDER
from .sweep import SweepPlan, ratio_text, efficiency_table, run_sweep, sweep_verdicts
from .scorer import (
    GOODWILL, READ_ONLY, REFUND_DAMAGED, SCHEDULE_DELIVERY, _tool_call, read_response, score_response
)


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
    PLACE_ORDER, READ_ONLY, REFUND_DAMAGED, GOODWILL, SCHEDULE_DELIVERY)})


# Why a line did not decode, by the core decoder's code: fixed text, never the line's. Each had
# been "not a JSON object", which sent a harness's author looking for the wrong fault.
PLAN_LINE_DETAILS: Final = MappingProxyType({
    "JSON_INVALID": "not valid JSON",
    "JSON_NOT_UTF8": "not UTF-8",
    "JSON_TOO_DEEP": "nested deeper than the limit",
    "JSON_DUPLICATE_KEY": "an object repeats a key",
    "JSON_NON_FINITE": "holds NaN or an infinite number",
    "JSON_NOT_PORTABLE": "holds an integer with too many digits",
})
UTF8_BOM: Final = b"\xef\xbb\xbf"


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
    except tool_dispatcher.BoundaryError as error:
        detail = PLAN_LINE_DETAILS.get(error.code, "not valid JSON")
        if data.startswith(UTF8_BOM):
            detail = "begins with a byte order mark"  # a Windows tool's UTF-8: the file must be written without it
        raise BenchError("PLANS_LINE", f"line {number}", detail=detail) from None
    if not isinstance(value, dict):
        raise BenchError("PLANS_LINE", f"line {number}", detail="not a JSON object")
    if frozenset(value) not in PLAN_FIELDS:
        raise BenchError("PLANS_LINE", f"line {number}", detail="fields must be scenario, trial, response or error")
    trial = value["trial"]
    if type(trial) is not int or not 0 <= trial <= MAX_TRIAL:
        raise BenchError("PLANS_LINE", f"line {number}", detail="trial must be an integer 0..1000")
    if not isinstance(value["scenario"], str):
        raise BenchError("PLANS_LINE", f"line {number}", detail="scenario must be a string")
    if value["scenario"] not in SCORING_SCENARIOS:
        raise BenchError("PLANS_SCENARIO_UNKNOWN", f"line {number}",
                         detail="known: " + ", ".join(sorted(SCORING_SCENARIOS)))
    if "error" in value:
        return PlanRecord(number, value["scenario"], trial, None, True)
    return PlanRecord(number, value["scenario"], trial, value["response"], False)


def plan_records(path: Any) -> Iterator[PlanRecord]:
    """Every plan of a JSONL file, one at a time, bounded per line and per file; the first bad line
    stops it. Nothing is kept but the (scenario, trial) pairs: a decoded line can take twenty times
    its bytes (`[{},{},...]`), so a file within the limits, held whole, would not fit in memory."""
    seen: set[tuple[str, int]] = set()
    try:
        with _open_regular(path) as handle:
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
                yield record
    except (OSError, ValueError, TypeError):
        raise BenchError("PLANS_UNREADABLE") from None


def check_plans(path: Any) -> int:
    """Read the whole file and keep nothing: the number of plans, or the first bad line's error."""
    return sum(1 for _record in plan_records(path))


def read_plans(path: Any) -> list[PlanRecord]:
    """Every plan of a JSONL file, held whole (a small file; the command line streams it)."""
    return list(plan_records(path))


def _open_regular(path: Any) -> Any:
    """A regular file opened for reading, as the core's read_bounded does it: O_NONBLOCK so that a
    FIFO with no writer cannot hold the open, then fstat refuses anything that is not a regular
    file (a directory, a device such as /dev/zero, a pipe) before a byte is read."""
    handle = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    try:
        if not stat.S_ISREG(os.fstat(handle).st_mode):
            raise BenchError("PLANS_UNREADABLE")
        return os.fdopen(handle, "rb")
    except BaseException:
        os.close(handle)
        raise


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
        calls = tuple(_sweep_call(item) for item in read_response(record.response)[1])
        lines = run_sweep(calls=calls, expectation=expectation, plan=SMALL_SWEEP, orchestrators=tuple(registry),
                          initial=seed_confirmed_order, registry=registry)
        out["fault_recovery"] = _recovery_table(lines)
    return out


# What the sweep runs for a call the scorer refuses as CALL_SHAPE: no tool has its name, so the
# guard refuses the plan (TOOL_UNKNOWN) and the naive side stops there.
UNREADABLE_CALL: Final = ToolCall("call", "unreadable", None)


def _sweep_call(item: Any) -> ToolCall:
    # The scorer's own reading (string id and name, each 1..64 characters): an id or a name of
    # another type would reach the guard's checks unhashable.
    try:
        return _tool_call(item)
    except BenchError:
        return UNREADABLE_CALL


def pass_hat_k(trials: int, passed: int, k: int) -> Fraction:
    """tau-bench's pass^k for one task: the chance that k trials drawn from n all pass, C(c,k)/C(n,k)."""
    return Fraction(math_comb(passed, k), math_comb(trials, k))


def _scenario_aggregate(name: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    # Every trial is in the denominator: a model error, a malformed call and a response the scorer
    # cannot read are failed trials (a response nobody read cannot be shown safe, and leaving it out
    # would lift pass^k exactly where a model answers in a form the harness misses). Unreadable
    # responses are also counted apart, for the harness to learn their shape.
    passed = sum(1 for row in rows if row["verdict"] == "pass")
    total = sum((Fraction(row["score"]) for row in rows), Fraction(0))
    return {"kind": "scenario", "scenario": name, "trials": len(rows), "passed": passed,
            "mean_score": ratio_text(total.numerator, total.denominator * len(rows)),
            "model_errors": sum(1 for row in rows if row["verdict"] == "model_error"),
            "unreadable_shapes": sum(1 for row in rows if row["verdict"] == "unreadable_shape"),
            "verdicts": dict(sorted(Counter(row["verdict"] for row in rows).items())),
            "pass^k": {str(k): _fraction_text(pass_hat_k(len(rows), passed, k)) for k in range(1, len(rows) + 1)}}


def _fraction_text(value: Fraction) -> str:
    return ratio_text(value.numerator, value.denominator)


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
