#!/usr/bin/env python3
"""tool-transaction-bench: a deterministic fault-injection sandbox for tool-call transactions.

A tool call is a proposal; the persisted state is the result. The bench runs the same proposals
through a naive and a guarded orchestrator against one in-memory sandbox (orders, inventory
reservations, payment charges, a transactional outbox, a relay and a consumer with a dedup inbox),
injects faults at named points, and judges every run by the state it leaves behind, never by what
the orchestrator says about itself. A full-plan scorer grades the proposal on its own, so the
model's share and the orchestration's share of an outcome are reported apart.

What it never does: touch a network, a database, an unseeded random generator, or a clock
(except to print how long a command took, and to bound a user's orchestrator in its child process,
never into the committed results) (the
naive orchestrator's fresh keys come from `random.Random(SEED)`, and the seed is recorded);
recurse on untrusted input beyond MAX_NESTING levels (the core's decoder depth-scans argument
text before it decodes, and schema validation walks values with an explicit stack); rely on `assert` for a
runtime check; print a local path.

The code lives in the package `txbench/` beside this file, one module per part (its docstring
lists them). This file is the command-line entry point and the bench's one import surface: it
re-exports every name of the package's modules, so `transaction_bench.run_all()`, the tests and
other layers' scripts import one module, as before the split.
"""
from __future__ import annotations

if __name__ == "__main__":
    # Ctrl-C while the imports below still run (a good part of a second on a cold machine): the
    # CLI's own answer, CLI_INTERRUPTED and exit 130, never a traceback. run_cli takes SIGINT back.
    import os as _os
    import signal as _signal
    _INTERRUPTED = (b'{\n  "passed": false,\n  "error": {\n    "code": "CLI_INTERRUPTED",\n    "message": "The command '
                    b'was interrupted before it finished.",\n    "retryable": false\n  }\n}\n')
    _signal.signal(_signal.SIGINT, lambda _number, _frame: (_os.write(1, _INTERRUPTED), _os._exit(130)))

import sys
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)  # the folder's name has a hyphen: its package is imported from inside it

from txbench import cli  # noqa: E402  (first: the package puts the repository root on sys.path)
from txbench.limits import (  # noqa: E402,F401
    BENCH_FORMAT, BUSINESS_TABLES, GUARDED_MAX_ATTEMPTS, HIGH_VALUE_CENTS, INITIAL_STOCK, LIVENESS_FLOOR,
    MAX_ARGUMENT_BYTES, MAX_CALLS, MAX_DELIVERIES, MAX_EXPECTED_CALLS, MAX_FINDINGS, MAX_NAME_CHARS,
    MAX_NESTING, MAX_RESULTS_FILE_BYTES, NAIVE_MAX_ATTEMPTS, PLAN_ORDER, PLAN_TOOLS, RAW_FILE, RESULTS_DIR, SEED, SEEDED_ORDER,
    SUMMARY_FILE, HEADLINE_FILE, SWEEP_EXHAUSTIVE_DEPTH, BOX_RUN_SECONDS, BOX_START_SECONDS, BOX_SWEEP_SECONDS, MAX_BOX_DEPTH,
    MAX_BOX_LINE_BYTES, SWEEP_MAX_DEPTH, SWEEP_SAMPLE, canonical_json, canonical_sha256
)
from txbench.errors import (  # noqa: E402,F401
    BENCH_CATALOG, BenchError, COMPENSATING, ERROR_CLASSES, EXECUTING, IllegalTransition, LIFECYCLE_STATES,
    Lifecycle, MANUAL, PERMANENT, PROPOSED, RECONCILED, REFUSED, RETRY, SANDBOX_ANSWERS, TERMINAL_STATES,
    TRANSITIONS, UNKNOWN, VALIDATED, classify
)
from txbench.contracts import (  # noqa: E402,F401
    BENCH_ARGUMENTS_JSON, FORMATS, Finding, JSON_TO_ARGS, SIDE_EFFECT_TOOLS, TOOLS, ToolContract, _AMOUNT,
    _CURRENCY, _DATE_TIME, _KEY, _KEYWORD_VALUES, _MANDATORY, _ORDER_REF, _QUANTITY, _SCHEMA_KEYWORDS, _SKU,
    _TYPE_TESTS, _VALUE_CHECKS, _check_array, _check_integer, _check_object, _check_string, _compiles,
    _days_in_month, freeze, _in_enum, _object, _pointer, _strings, thaw, check_schema, decode_arguments,
    is_date_time, tool_schemas, validate_arguments, instant, _CALENDAR_BASE_YEAR, _CALENDAR_CYCLE_DAYS,
    _CALENDAR_CYCLE_YEARS
)
from txbench.sandbox import (  # noqa: E402,F401
    CARRIER_STATUS, FAULT_KINDS, Fault, FaultInjector, FaultKind, HANDLERS, ORDER_STATES, ORDER_VERSIONS,
    Response, SUBMISSIONS, SWEPT_KINDS, Sandbox, _cancel_order, _charge_payment, _confirm_order,
    _create_order, _field, key_of, _order, _owned, _positive, _query_logistics, _receipt, _refund_payment,
    _release_inventory, _reserve_inventory, _schedule_delivery, _submit_plain, _submit_refused,
    _submit_response_lost, _submit_twice, seed_confirmed_order, SEEDED_CHARGE, SEEDED_CHARGE_KEY, _intent
)
from txbench.plans import (  # noqa: E402,F401
    BUSINESS_CHECKS, CONTEXT_FIELDS, CallCheck, Expectation, ExpectedCall, IRREVERSIBLE_TOOLS, ToolCall,
    _argument_findings, _call_id_findings, _call_set_findings, _confirmation_findings, _context_well_formed,
    _currency_findings, _customer_findings, decoded_arguments, _exclusive_findings, _has_cycle, _key_findings,
    _order_currency, _order_findings, _orders_context, _positional_matches, _properties, same_json,
    _version_findings, business_findings, check_expectation, validate_plan, vet_call, _MISSING, _property,
    _same_leaf, _used_key_findings, fixed_mismatches
)
from txbench.orchestrators import (  # noqa: E402,F401
    COMPENSATIONS, Journal, ORCHESTRATORS, Orchestrator, RunResult, ToolPort, USER_OUTCOMES,
    _cancel_arguments, _compensate, _decoded_or_empty, _execute_plan, _manual_case, _naive_step,
    _recordable, _refund_arguments, _release_arguments, _resolve_by_status, _undo_key, _with_fresh_key,
    call_with_recovery, load_orchestrator, reconcile, run_guarded, run_naive, user_orchestrator, USER_FAILURES,
    check_spec, compensation_of, import_orchestrate, user_outcome, user_result
)
from txbench.isolation import (  # noqa: E402,F401
    BENCH_DIR, CHILD_BOOT, CHILD_OUTCOMES, ChildPort, GARBLED, GONE, LATE, OrchestratorBox, REQUESTS, _Child,
    _answer, _claim_channel, _decoded, _interpreter_flags, _request, _response, _send_line, _serve_findings,
    serve_child
)
from txbench.records import (  # noqa: E402,F401
    CALL_MS, INVARIANTS, Invariant, MANUAL_GROUNDS, METRICS, NAIVE_BREAKS, STATUS_MS, TIMEOUT_MS, UNDOES, _business,
    _compensation_failed, _consumed_exactly_once, _escalation_grounded, _excused, _key_ledger, _ledger, _new,
    _no_orphan_charge, _no_orphan_reservation, _single_charge, _trace_count, _unknown_left, _unknown_resolved,
    check_invariants, execute_run, judge, manual_grounds, run_cost, seal, state_diff, state_hash
)
from txbench.scenarios import (  # noqa: E402,F401
    CONTROLS, Control, DIMENSIONS, EXPECTED_COMPENSATED_STATE, EXPECTED_COMPLETED_STATE, PLACE_ORDER,
    PLAN_ARGUMENTS, SCENARIOS, SCENARIO_INDEX, Scenario, _ABSENT, _COMPENSATED, _COMPLETED, _ORDER_ROW,
    _REFUSED_UNTOUCHED, _RESERVATION_ROW, _judged_run, _patch, _plain_ledger, _violations, plan_calls,
    run_control, run_scenario
)
from txbench.sweep import (  # noqa: E402,F401
    SweepPlan, _completable, _depth_sets, _fault_set, _one_tool, _percentile, ratio_text, depth_table,
    efficiency_table, run_sweep, sweep_atoms, sweep_fault_sets, sweep_table, sweep_tools, sweep_verdicts
)
from txbench.scorer import (  # noqa: E402,F401
    ANTHROPIC_BLOCKS, ANTHROPIC_STOP, CHAT_FINISH, EFFECT_FIELDS, FINISH_FIELDS, GEMINI_FAILED_FINISH, GEMINI_FINISH,
    GEMINI_INTERACTION_STATUS, GEMINI_INTERACTION_STEPS, RESPONSES_STATUS, UNFINISHED, _check_finish,
    GEMINI_LEGACY_OUTPUTS, GEMINI_PART_KEYS, GOODWILL, LOCAL_SHELL_TOOL,
    MODEL_CHOSEN, OTHER_FIXED_FIELD, READ_ONLY, REFUND_DAMAGED, RESPONSES_ITEMS, RESPONSE_SHAPES,
    SCHEDULE_DELIVERY, SCORER_CASES, ScorerCase, TOO_DEEP_ARGUMENTS, UNKNOWN_TOOL_SHOWN, UNREADABLE_CODES,
    UNWRITABLE_ARGUMENTS, VERDICTS, _ABSENT_ID, _CANCEL_ARGS, _QUERY, _REFUND_ARGS, _SCHEDULE_ARGS,
    _SEEDED_CONTEXT, _SHARED_KEY, _anthropic_calls, _anthropic_use, _bare_list_calls, _bench_calls, _call,
    _call_vetoes, _chat_calls, _chat_tool_call, _check_configuration, _deeper_than, _edges, _effect_vetoes,
    _factor, _failed_score, _free_id, _gemini_call, _gemini_calls, _gemini_parts, _interaction_call,
    _interaction_calls, _item_table, _items,
    _key_vetoes, _missing_effect_vetoes, _object_text, _only, _order_vetoes, _outcome_digest, _pair_score,
    _plan_response, _provider_call, _ratio, _response_calls, _responses_calls, _scored_calls, _shape_of,
    _tool_call, _typed_items, _verdict, _with_ids, calls_from_response, optimal_matching, plan_vetoes,
    read_response, run_scorer_case, score_response, scorer_config
)
from txbench.chart import (  # noqa: E402,F401
    BAR_GAP, BAR_WIDTH, CHART_HEIGHT, CHART_WIDTH, FONT, GROUP_WIDTH, PANEL_LEFT, PLOT_HEIGHT, PLOT_TOP, SERIES,
    _axis, _bar, _bar_x, _depth_labels, _legend, _liveness_panel, _rows, _text, _unsafe_panel, _verdict_lines,
    headline_svg, scaled
)
from txbench.bench import (  # noqa: E402,F401
    BenchOutcome, _dimension_counts, _failures, _first_difference, _read, _scenario_rows, _scorer_summary,
    _summary, sweep_summary, check_results, run_all, write_results
)
from txbench.plansfile import (  # noqa: E402,F401
    MAX_PLAN_LINES, MAX_PLAN_LINE_BYTES, MAX_TRIAL, PLAN_FIELDS, PLAN_LINE_DETAILS, PlanRecord, SCORING_SCENARIOS,
    SMALL_SWEEP, UNREADABLE_CALL, UTF8_BOM, _fraction_text, _open_regular, _plan_record, _recovery_table,
    _scenario_aggregate, _sweep_call,
    aggregate_plans, check_plans, pass_hat_k, plan_records, read_plans, score_plan
)
from txbench.cli import (  # noqa: E402,F401
    _main, _parser, _render_depths, _render_invariants, _render_scenarios, _render_scorer, _row, _run_check,
    _run_exhaustive, _run_one, _run_score, _run_user_sweep, _user_registry, main, render_scenario,
    render_summary
)
import tool_dispatcher  # noqa: E402,F401


if __name__ == "__main__":
    sys.exit(cli.main())
