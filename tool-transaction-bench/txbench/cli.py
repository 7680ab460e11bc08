"""The command line: tables, scenario inspection, check, score, sweep; every failure through run_cli."""
from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import tool_dispatcher

from .limits import RESULTS_DIR, canonical_json
from .errors import BenchError
from .orchestrators import ORCHESTRATORS, Orchestrator
from .isolation import OrchestratorBox
from .scenarios import CONTROLS, SCENARIOS, SCENARIO_INDEX, run_control, run_scenario
from .sweep import SweepPlan, run_sweep
from .bench import sweep_summary, check_results, run_all, write_results
from .plansfile import aggregate_plans, check_plans, plan_records, score_plan


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
        description="Deterministic tool-transaction bench: run, check, inspect a scenario, score plans, "
                    "sweep an orchestrator.")
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
    summary = sweep_summary(lines, plan)
    print("\n".join(_render_invariants(summary) + [""] + _render_depths(summary)))
    print(f"time: {time.perf_counter() - started:.1f} s for {len(lines)} runs")
    return 0 if summary["verdicts"]["guarded"]["verdict"] == "pass" else 1


@contextlib.contextmanager
def _user_registry(spec: str | None) -> Iterator[tuple[dict[str, Orchestrator], OrchestratorBox | None]]:
    # A user's orchestrator runs in a child process (its own module path: the bench's folder, then
    # the caller's directory) and ends with the command.
    if spec is None:
        yield dict(ORCHESTRATORS), None
        return
    with OrchestratorBox(spec) as box:
        yield {**ORCHESTRATORS, "user": box.orchestrator()}, box


def _run_score(options: argparse.Namespace) -> int:
    # Read twice, one line at a time: first whole, so that a bad line stops the run before a plan is
    # scored or an orchestrator started, then to score. The second reading checks every line again,
    # so a file changed in between is scored as it then reads, or refused.
    check_plans(options.plans)
    rows = []
    with _user_registry(options.orchestrator) as (registry, box):
        for record in plan_records(options.plans):
            if box is not None:
                box.begin_sweep()  # each plan's sweep has its own wall-clock bound
            rows.append(score_plan(record, sweep=options.sweep or box is not None, registry=registry))
    for row in rows + aggregate_plans(rows):
        tool_dispatcher.emit_json(row, indent=None)
    return 0


def _run_user_sweep(options: argparse.Namespace) -> int:
    started = time.perf_counter()
    with _user_registry(options.orchestrator) as (registry, _box):
        lines = run_sweep(orchestrators=("user", "guarded", "naive"), registry=registry)
    summary = sweep_summary(lines)
    print("\n".join(_render_invariants(summary) + [""] + _render_depths(summary)))
    print(f"time: {time.perf_counter() - started:.1f} s for {len(lines)} runs")
    return 0 if summary["verdicts"]["user"]["verdict"] == "pass" else 1


def _main(argv: list[str] | None) -> int:
    options = _parser().parse_args(argv)
    if options.command is not None and (options.check or options.exhaustive or options.scenario is not None
                                        or options.results is not None):
        raise tool_dispatcher.BoundaryError("CLI_USAGE")  # a command runs alone: a run's option beside it did nothing
    if options.results is not None and (options.exhaustive or options.scenario is not None):
        raise tool_dispatcher.BoundaryError("CLI_USAGE")  # neither reads nor writes a results directory
    if options.command == "score":
        return _run_score(options)
    if options.command == "sweep":
        return _run_user_sweep(options)
    if options.results == "":
        raise tool_dispatcher.BoundaryError("CLI_USAGE")  # Path("") is ".": an unset "$OUT" names no directory
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
    if sys.stdout is None:
        # Started with stdout closed (`>&-`): no table, score or failure can be said, and the run
        # would end 0 having said nothing (print writes nowhere) or in a traceback (the failure's
        # own answer cannot be written). Exit 2 before anything runs, as after a reader went away.
        return 2
    return tool_dispatcher.run_cli(lambda: _main(argv))


if __name__ == "__main__":
    sys.exit(main())
