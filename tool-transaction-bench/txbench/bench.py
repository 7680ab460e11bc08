"""The whole bench (run_all), its result files and the byte-for-byte check."""
from __future__ import annotations

import hashlib
import json
import tempfile
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import tool_dispatcher

from .limits import (
    BENCH_FORMAT, HEADLINE_FILE, LIVENESS_FLOOR, MAX_RESULTS_FILE_BYTES, PLAN_TOOLS, RAW_FILE, SEED, SUMMARY_FILE,
    canonical_json, canonical_sha256
)
from .errors import BenchError
from .sandbox import SWEPT_KINDS
from .records import INVARIANTS, NAIVE_BREAKS
from .scenarios import CONTROLS, DIMENSIONS, SCENARIOS, plan_calls, run_control, run_scenario
from .sweep import (
    SweepPlan, depth_table, efficiency_table, run_sweep, sweep_fault_sets, sweep_table, sweep_tools,
    sweep_verdicts
)
from .scorer import SCORER_CASES, run_scorer_case, scorer_config
from .chart import headline_svg


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

    def headline_bytes(self) -> bytes:
        """The sweep's headline as an SVG chart, drawn from the summary alone."""
        return headline_svg(self.summary)

    def files(self) -> tuple[tuple[str, bytes], ...]:
        """Each results file's name and bytes, in the order they are written and checked."""
        return ((RAW_FILE, self.raw), (SUMMARY_FILE, self.summary_bytes()), (HEADLINE_FILE, self.headline_bytes()))


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


def sweep_summary(sweep: list, plan: SweepPlan = SweepPlan(), seed: int = SEED) -> dict[str, Any]:
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
        "sweep": sweep_summary(sweep, sweep_plan, seed),
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
        for name, data in outcome.files():
            with open(directory / name, "wb") as handle:
                handle.write(data)
    except (OSError, ValueError):
        raise BenchError("RESULTS_UNWRITABLE") from None


def _read(path: Path) -> bytes | None:
    """A committed file's bytes, or None: missing, not a regular file (a FIFO is never waited on,
    a device never read), or longer than any results file."""
    try:
        data = tool_dispatcher.read_bounded(path, max_bytes=MAX_RESULTS_FILE_BYTES)
    except tool_dispatcher.BoundaryError:
        return None
    return None if len(data) > MAX_RESULTS_FILE_BYTES else data


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
        pairs = [(name, _read(Path(scratch) / name), _read(directory / name)) for name, _data in outcome.files()]
    return [problem for name, fresh, committed in pairs
            if (problem := _first_difference(name, fresh, committed)) is not None]
