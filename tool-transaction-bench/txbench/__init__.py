"""txbench: the tool-transaction bench as a package, one module per part, in the order data flows.

    limits         limits and constants; the core's canonical JSON and digest
    errors         the bench's error catalog, BenchError, answer classes, the lifecycle table
    contracts      argument decoding (the core's strict decoder), tool contracts, schema validation
    sandbox        fault catalogue and injector; the in-memory sandbox (it knows nothing of the scorer)
    plans          expectations, whole-plan validation, business checks
    orchestrators  journal; naive, guarded, and a user's orchestrator through the ToolPort
    isolation      a user's orchestrator in a child process, the port as JSON lines over a pipe
    records        invariants, run records, expected-state digests, run cost, metrics
    scenarios      the 14 scenarios and 5 paired controls
    sweep          the fault sweep per depth, liveness, efficiency, verdicts
    scorer         the full-plan scorer: response shapes, matching, vetoes, its cases
    chart          the sweep's headline as an SVG chart, from the summary (integer geometry)
    bench          run_all, result files, the byte-for-byte check
    plansfile      scoring a user's JSONL plans file with pass^k
    cli            the command line (transaction_bench.py beside this folder is its entry point)

Each module imports only the modules above it. In a checkout (the package named txbench) the
repository root goes on sys.path here, so the core (`tool_dispatcher`) imports wherever the package
is imported from. Installed, the same folder is the package `tool_dispatcher_bench` (its command is
`tool-dispatcher-bench`, or `python -m tool_dispatcher_bench`), and the core is installed beside it.
"""
from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "txbench":  # a checkout: the core is at the repository root
    _REPO_ROOT = str(Path(__file__).resolve().parent.parent.parent)
    if _REPO_ROOT not in sys.path:
        sys.path.insert(0, _REPO_ROOT)
