#!/usr/bin/env bash
# CI extras for the signature layer: Ed25519 checkpoints over the audit chain.
#
# Installs the cryptography package, pinned, into a virtual environment outside the checkout; runs
# the layer's suite in the four test modes; signs the fixture's log; and requires the Python layer
# (signatures/audit_signatures.py) and the JavaScript verifier (node:crypto) to print the same bytes
# and exit with the same status on the signed log and on each tampered copy (checkpoint_cases.py),
# and the Python layer to give the verdict each case expects. Under CI=true the suite fails rather
# than skips. Each command prints one "ok" or "FAIL" line; the failures are listed again at the end.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
export PYTHONDONTWRITEBYTECODE=1
CRYPTOGRAPHY_PIN='cryptography==50.0.2'

py=$(command -v python || command -v python3)
if ! command -v node >/dev/null 2>&1 || [ -z "$py" ]; then
  echo "FAIL node and python are both needed"; exit 1
fi
venv=${TMPDIR:-/tmp}/td-signatures-venv
if [ ! -x "$venv/bin/python" ]; then "$py" -m venv "$venv" || { echo "FAIL python -m venv"; exit 1; }; fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check "$CRYPTOGRAPHY_PIN" 2>/dev/null \
  || { echo "FAIL pip install $CRYPTOGRAPHY_PIN"; exit 1; }
vpy=$venv/bin/python
echo "NOTE the signature suite runs on Python $("$vpy" -c 'import sys; print(sys.version.split()[0])'), $("$vpy" -c 'import cryptography; print("cryptography", cryptography.__version__)'), node $(node --version)"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/td-signatures.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
status=0
failures=$tmp/failures
: >"$failures"
fail() { status=1; echo "FAIL $*"; echo "FAIL $*" >>"$failures"; }

# A command that must exit 0; its output is shown whole when it fails, a SKIP or NOTE line always.
run() {
  local start=$(date +%s)
  if "$@" >"$tmp/out" 2>&1; then
    grep -E '^(SKIP|NOTE)' "$tmp/out"; echo "ok   $(( $(date +%s) - start ))s  ${*:2}"
  else
    cat "$tmp/out"; fail "$(( $(date +%s) - start ))s  ${*:2}"
    grep -E '^(FAIL|ERROR):' "$tmp/out" | head -n 12 | sed 's/^/  /' >>"$failures"
  fi
}

# Both verifiers of checkpoints on one command line: the same stdout, the same exit status, and
# the Python layer's verdict the expected one ("passed" or a code).
both() {
  local name=$1 expected=$2; shift 2
  "$vpy" -B signatures/audit_signatures.py "$@" >"$tmp/py.out" 2>"$tmp/py.err" & local pid=$!
  node verifiers/javascript/verify_audit.js "$@" >"$tmp/js.out" 2>"$tmp/js.err"; local js_status=$?
  wait "$pid"; local py_status=$?
  local verdict  # "passed", or the first code in the output (the failure's or the error's)
  verdict=$(grep -q '^  "passed": true' "$tmp/py.out" && echo passed || sed -n 's/^    "code": "\([A-Z_]*\)",$/\1/p' "$tmp/py.out" | head -n 1)
  if [ "$py_status" = "$js_status" ] && cmp -s "$tmp/py.out" "$tmp/js.out" && [ "$verdict" = "$expected" ] \
     && [ ! -s "$tmp/py.err" ] && [ ! -s "$tmp/js.err" ]; then
    echo "ok   $name: $verdict, exit $py_status, both"
  else
    fail "$name: Python $verdict exit $py_status, JavaScript exit $js_status, expected $expected"
    diff "$tmp/py.out" "$tmp/js.out" | head -n 10 | sed 's/^/     | /'
    cat "$tmp/py.err" "$tmp/js.err" | head -n 10 | sed 's/^/     | /'
  fi
}

for mode in "-B" "-O -B" "-B -W error" "-O -B -W error"; do
  # shellcheck disable=SC2086  # the mode is several flags
  run "$vpy" $mode -m unittest discover -s signatures -p 'test_audit_signatures.py'
done

node verifiers/javascript/cross_check.js constants >"$tmp/tables.json"
run "$vpy" -B signatures/checkpoint_cases.py tables "$tmp/tables.json"
run "$vpy" -B tool_dispatcher.py --fixture tool-cases.json --audit-log "$tmp/fixture.log"
run "$vpy" -B -W error signatures/audit_signatures.py keygen --out "$tmp/keys"
run "$vpy" -B -W error signatures/audit_signatures.py sign "$tmp/fixture.log" --sign-key "$tmp/keys/signing-key.pem" --every 8
both "the fixture's log, signed" passed --verify-audit "$tmp/fixture.log" --public-key "$tmp/keys/public-key.pem"
mkdir "$tmp/cases"
if "$vpy" -B signatures/checkpoint_cases.py build "$tmp/fixture.log" "$tmp/cases" >"$tmp/out" 2>&1; then
  while IFS=$'\x1f' read -r -a row; do
    count=${#row[@]}
    both "${row[0]}" "${row[count - 1]}" "${row[@]:1:count - 2}"
  done <"$tmp/cases/cases.txt"
else
  fail "checkpoint_cases.py build"; tail -n 20 "$tmp/out" | sed 's/^/     | /'
fi

if [ "$status" -ne 0 ]; then echo "== what failed"; cat "$failures"; fi
exit $status
