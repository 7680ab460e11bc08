"""The fault sweep: fault points, fault sets per depth (whole or sampled), liveness, per-depth and
efficiency tables, verdicts."""
from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import combinations_with_replacement
from typing import Any, Callable

from .limits import LIVENESS_FLOOR, SEED, SWEEP_EXHAUSTIVE_DEPTH, SWEEP_MAX_DEPTH, SWEEP_SAMPLE
from .errors import RECONCILED
from .contracts import TOOLS
from .sandbox import Fault, SWEPT_KINDS, Sandbox
from .plans import Expectation, ToolCall
from .orchestrators import COMPENSATIONS, ORCHESTRATORS, USER_FAILURES, Orchestrator
from .records import INVARIANTS, execute_run, run_cost, seal, state_hash
from .scenarios import PLACE_ORDER, plan_calls


# ================================================================================================
# 13. Fault sweep: every fault set up to two faults, three faults whole on one tool and sampled across tools
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
    guarded orchestrator leaves with no fault at all (the expected state, compared by hash) and
    the orchestrator answered at all (a crash, a hang or a broken protocol is a failed run).
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
            reached = state_hash(record["state_after"]) == expected and record["outcome"] not in USER_FAILURES
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


def ratio_text(numerator: int, denominator: int) -> str:
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
                         "liveness": ratio_text(live, completable), "orchestrator": orchestrator,
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
                             "liveness": ratio_text(live, completable), "runs": len(mine),
                             "unsafe": unsafe, "verdict": verdict}
    return out
