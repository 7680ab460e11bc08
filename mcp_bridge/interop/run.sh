#!/usr/bin/env bash
# Interop of the MCP bridge's import with the official MCP Python SDK (ci-extras: runs once, never skipped under CI=true).
#
# Makes a virtual environment OUTSIDE the checkout (under ${TMPDIR:-/tmp}), installs the pinned SDK
# from PyPI (requirements.txt), serves sdk_server.py with it over stdio, imports that server with
# `mcp_bridge.py import` (standard library only) in both protocol eras, and compares each draft and
# report with the checked-in expected files byte for byte; then puts the drafted tools behind the
# boundary with forward_check.py (both eras: forwarded calls, approved writes, malformed calls
# refused before the server, every package adapted for the three providers); then drives the guard
# (mcp_bridge.py guard) with the SDK's own client (guard_check.py). Last, an agent framework's own
# MCP client in front of the guard: the OpenAI Agents SDK, pinned in a second virtual environment
# (requirements-agents.txt), driven by its Runner with a scripted model (agents_check.py: no model,
# no network, no key). Nothing writes __pycache__ into the checkout.
#
#   bash mcp_bridge/interop/run.sh             compare (exit 0 on a match)
#   UPDATE=1 bash mcp_bridge/interop/run.sh    rewrite the expected files after a reviewed change
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
export PYTHONDONTWRITEBYTECODE=1
here=mcp_bridge/interop
work=$(mktemp -d "${TMPDIR:-/tmp}/mcp-interop.XXXXXX")
trap 'rm -rf "$work"' EXIT

unavailable() {
  if [ "${CI:-}" = "true" ]; then
    echo "FAIL: $1 (CI=true: the interop check must run)"
    exit 1
  fi
  echo "SKIP: $1"
  exit 0
}

py=$(command -v python || command -v python3 || true)  # "python", else "python3"
[ -n "$py" ] || unavailable "neither python nor python3 is on PATH"
"$py" -m venv "$work/venv" >/dev/null 2>&1 || unavailable "no virtual environment could be created"
"$work/venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$here/requirements.txt" \
  >"$work/pip.log" 2>&1 || { tail -n 20 "$work/pip.log"; unavailable "the pinned SDK could not be installed"; }
echo "NOTE: $("$work/venv/bin/python" -c 'import importlib.metadata as m; print("mcp", m.version("mcp"), "pydantic", m.version("pydantic"))')"

status=0
for era in modern legacy; do
  "$py" -B -W error mcp_bridge/mcp_bridge.py import \
    --server-command "\"$work/venv/bin/python\" -B $here/sdk_server.py" --protocol "$era" \
    --read-only get_order --role orders.tools \
    --out "$work/draft-$era.json" --report "$work/report-$era.json" >"$work/summary-$era.json"
  code=$?
  if [ "$code" -ne 1 ]; then  # one of the six tools (a `format`) is refused by design: exit 1
    echo "FAIL: the $era import exited $code, expected 1"
    cat "$work/summary-$era.json"
    status=1
    continue
  fi
  for kind in draft report; do
    expected="$here/expected-$kind-$era.json"
    if [ "${UPDATE:-}" = "1" ]; then
      cp "$work/$kind-$era.json" "$expected"
    elif cmp -s "$work/$kind-$era.json" "$expected"; then
      echo "ok   $kind ($era) matches $expected byte for byte"
    else
      echo "FAIL: the $era $kind differs from $expected"
      diff "$expected" "$work/$kind-$era.json" | head -n 40
      status=1
    fi
  done
done

# The same server's tools behind the boundary: forwarded, dispatched and adapted, in both eras
# (forward_check.py, standard library and the project only; its summary says what it checked).
"$py" -B -W error "$here/forward_check.py" -- "$work/venv/bin/python" -B "$here/sdk_server.py" \
  >"$work/forward.json" 2>"$work/forward.err"
code=$?
cat "$work/forward.json"
if [ "$code" -eq 0 ]; then
  echo "ok   forwarding (modern, legacy): every check passed"
else
  tail -n 20 "$work/forward.err"
  echo "FAIL: forward_check.py exited $code"
  status=1
fi
# The guard in front of the SDK's server and the project's own, driven by the SDK's own client in
# both eras (guard_check.py runs in the SDK's environment; the guard itself with the system Python).
"$work/venv/bin/python" -B "$here/guard_check.py" --python "$py" >"$work/guard.json" 2>"$work/guard.err"
code=$?
if [ "$code" -eq 0 ]; then
  echo "ok   the guard (modern, legacy) under the SDK's client: every check passed"
else
  cat "$work/guard.json"
  tail -n 20 "$work/guard.err"
  echo "FAIL: guard_check.py exited $code"
  status=1
fi

# The OpenAI Agents SDK's MCP client (MCPServerStdio, Runner) through the guard, in its own virtual
# environment; the guard and the demo server run with the system Python (agents_check.py says what
# it checked). Under CI=true a missing install fails, as above; elsewhere it is skipped.
agents_missing() {
  if [ "${CI:-}" = "true" ]; then
    echo "FAIL: $1 (CI=true: the interop check must run)"
    status=1
  else
    echo "SKIP: $1"
  fi
}
agents="$work/agents-venv/bin/python"
started=$SECONDS
if ! "$py" -m venv "$work/agents-venv" >/dev/null 2>&1; then
  agents_missing "no virtual environment could be created for the OpenAI Agents SDK"
elif ! "$agents" -m pip install --quiet --disable-pip-version-check -r "$here/requirements-agents.txt" \
    >"$work/pip-agents.log" 2>&1; then
  tail -n 20 "$work/pip-agents.log"
  agents_missing "the pinned OpenAI Agents SDK could not be installed"
else
  echo "NOTE: $("$agents" -c 'import importlib.metadata as m; print("openai-agents", m.version("openai-agents"), "mcp", m.version("mcp"))')"
  "$agents" -B "$here/agents_check.py" --python "$("$py" -c 'import sys; print(sys.executable)')" \
    >"$work/agents.json" 2>"$work/agents.err"
  code=$?
  cat "$work/agents.json"
  if [ "$code" -eq 0 ]; then
    echo "ok   the OpenAI Agents SDK through the guard: every check passed ($((SECONDS - started)) s, its install included)"
  else
    tail -n 20 "$work/agents.err"
    echo "FAIL: agents_check.py exited $code"
    status=1
  fi
fi
exit $status
