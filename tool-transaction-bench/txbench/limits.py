"""Limits and constants of the whole bench, and the core's canonical JSON and digest it uses."""
from __future__ import annotations

from pathlib import Path
from types import MappingProxyType
from typing import Final

import tool_dispatcher


canonical_json = tool_dispatcher.canonical_json
canonical_sha256 = tool_dispatcher.canonical_sha256


# ================================================================================================
# 1. Limits and constants
# ================================================================================================

BENCH_FORMAT: Final = "tool-transaction-bench/results-v1"
SEED: Final = 20240531  # the only randomness: the naive orchestrator's fresh keys per retry
GUARDED_MAX_ATTEMPTS: Final = 3  # one try plus two same-key retries outlast any single transient fault
NAIVE_MAX_ATTEMPTS: Final = 3  # the same budget, so the two differ in key policy, not in persistence
MAX_ARGUMENT_BYTES: Final = 16_384  # real arguments are a few hundred bytes; counted before decoding
MAX_NESTING: Final = 16  # the deepest contract has 3 levels; scanned before the decoder can recurse
MAX_CALLS: Final = 16  # a longer response is refused whole, never truncated to a convenient prefix
MAX_EXPECTED_CALLS: Final = 8  # optimal matching walks 2**n subsets; 256 of them stay instant
MAX_FINDINGS: Final = 32  # hostile arguments cannot grow a record without bound
MAX_NAME_CHARS: Final = 64  # call ids and tool names are short identifiers echoed into records
MAX_DELIVERIES: Final = 4  # the broker dead-letters an event it has delivered this many times
# A charge or refund of this many cents or more cannot be undone quietly: it needs the customer's
# second confirmation in the request context (500.00 in the order's currency).
HIGH_VALUE_CENTS: Final = 50_000
# The sweep: every fault set of up to two faults runs whole (1,653 sets on the seven tools); three
# faults make 30,856 sets, so that depth runs its 840 one-tool sets whole and a fixed-seed sample of
# the rest, which keeps the whole bench, tests included, within seconds. `--exhaustive` runs every
# depth whole and prints its time.
SWEEP_EXHAUSTIVE_DEPTH: Final = 2
SWEEP_MAX_DEPTH: Final = 3
SWEEP_SAMPLE: Final = 1_500
# An orchestrator passes the sweep only if it also completes at least 9 in 10 of the runs that
# could complete: refusing everything is safe and worthless.
LIVENESS_FLOOR: Final = (9, 10)
BUSINESS_TABLES: Final = ("charges", "inventory", "orders", "reservations")
# A user's orchestrator from the command line runs in a child process and reaches the sandbox only
# through the tool port, one JSON line per request and per answer. Its wall-clock bounds: a run of
# the four-step plan takes milliseconds, so one still going after 10 s is hung; the whole sweep
# (3,993 runs) takes tens of seconds; a start imports the bench and the user's module.
BOX_RUN_SECONDS: Final = 10.0
BOX_SWEEP_SECONDS: Final = 600.0
BOX_START_SECONDS: Final = 30.0
# A line holds one request or answer: a plan of 16 calls of 16 KiB, the largest, fits four times.
MAX_BOX_LINE_BYTES: Final = 1_048_576
# A call's arguments (MAX_NESTING deep) inside one request object; deeper, the port answers
# BAD_REQUEST in the child and nothing is sent.
MAX_BOX_DEPTH: Final = MAX_NESTING + 2

# The committed results beside this package in a checkout (tool-transaction-bench/results). Installed
# as tool_dispatcher_bench, results/ in the current directory: a run never writes into site-packages.
RESULTS_DIR: Final = (Path(__file__).resolve().parent.parent / "results" if __package__ == "txbench"
                      else Path("results"))
RAW_FILE: Final = "raw_results.jsonl"
SUMMARY_FILE: Final = "summary.json"
HEADLINE_FILE: Final = "headline.svg"  # the sweep's headline as a chart, drawn from the summary
MAX_RESULTS_FILE_BYTES: Final = 64 * 1024 * 1024  # the raw results are under 4 MiB; --check reads no more

# The four-step plan every completeness, timeout, idempotency, saga and delivery scenario uses.
PLAN_TOOLS: Final = ("create_order", "reserve_inventory", "charge_payment", "confirm_order")
PLAN_ORDER: Final = "30417"
SEEDED_ORDER: Final = "20481"  # the scorer cases act on an order that already exists
INITIAL_STOCK: Final = MappingProxyType({"SKU-BLUE": 5, "SKU-RED": 5})
