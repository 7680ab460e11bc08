"""A user's orchestrator that hands every run to a person; the sweep fails it.

It runs the plan forward with stable keys, never compensates, and answers "manual" whatever
happened. A person is a safe end only for an outcome nobody could resolve or a compensation that
failed, so the sweep names every other escalation: escalation_grounded.

python -B tool-transaction-bench/transaction_bench.py sweep --orchestrator examples.never_compensates:manual
"""
from examples.simple_orchestrator import step


def manual(calls, port):
    if not port.findings(calls):
        for call in calls:
            if step(port, call.name, port.decode(call.arguments)) != "ok":
                break  # no saga: what was done stays done, for a person to find
    port.relay()
    return "manual"
