"""A user's orchestrator for the bench's sweep; it passes.

python -B tool-transaction-bench/transaction_bench.py sweep --orchestrator examples.simple_orchestrator:orchestrate
"""


def step(port, name, arguments):
    """One call with a stable key: 'ok', 'failed' (proven not done) or 'unknown'."""
    key, unknown = arguments.get("idempotency_key"), False
    for _attempt in range(3):
        answer = port.call(name, arguments)
        if answer.ok:
            return "ok"
        if answer.code == "TIMEOUT" and key is not None:
            status = port.query_status(name, key)
            if status.ok and status.data["state"] == "committed":
                return "ok"
            unknown = not status.ok  # absent: the same key may go again; no answer: still unknown
        elif answer.code != "RATE_LIMITED":
            break
    return "unknown" if unknown else "failed"


def orchestrate(calls, port):
    if port.findings(calls):
        return "refused"
    done = []
    for call in calls:
        arguments = port.decode(call.arguments)
        outcome = step(port, call.name, arguments)
        if outcome == "unknown":
            return "manual"  # never undo while an outcome is unknown
        if outcome == "failed":
            for undo in filter(None, (port.compensation(*pair) for pair in reversed(done))):
                if step(port, *undo) != "ok":
                    return "manual"
            port.relay()
            return "compensated" if done else "failed"
        done.append((call.name, arguments))
    port.relay()
    return "completed"
