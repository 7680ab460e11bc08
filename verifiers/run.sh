#!/usr/bin/env bash
# The second implementation's checks, for CI: the JavaScript verifier (node's standard library
# only) must agree with the Python module on every canonical text, every digest and every verdict.
#
#   bash verifiers/run.sh
#
# Needs node (20 or later) and Python 3.11 or later ("python", else "python3"); writes only to a
# temporary directory. Each check prints one "ok" or "FAIL" line; the failures are listed again
# at the very end, where a reader of only the last lines finds them. Exit 0 when all passed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
export PYTHONDONTWRITEBYTECODE=1
unset TOOL_DISPATCHER_SEAL_KEYS  # the CLI reads seal keys from it; only the case that tests it sets it

py=$(command -v python || command -v python3)
if ! command -v node >/dev/null 2>&1 || [ -z "$py" ]; then
  echo "FAIL node and python are both needed"; exit 1
fi
js=verifiers/javascript
tmp=$(mktemp -d "${TMPDIR:-/tmp}/td-verifiers.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
status=0
failures=$tmp/failures
: >"$failures"

ok() { echo "ok   $*"; }
fail() { status=1; echo "FAIL $*"; echo "FAIL $*" >>"$failures"; }

# A command that must exit 0; its output is shown only when it fails.
run() {
  local name=$1; shift
  if "$@" >"$tmp/out" 2>&1; then ok "$name"; else fail "$name"; tail -n 20 "$tmp/out" | sed 's/^/     | /'; fi
}

# Two files that must be the same bytes.
same() {
  local name=$1 first=$2 second=$3
  if cmp -s "$first" "$second"; then ok "$name"; else fail "$name"; diff "$first" "$second" | head -n 10 | sed 's/^/     | /'; fi
}

# Both verifiers on one command line, side by side: the same stdout and the same exit status.
# With an expected verdict ("passed" or a code), the Python CLI must also answer that.
both() {
  local name=$1 expected=$2; shift 2
  "$py" -B tool_dispatcher.py "$@" >"$tmp/py.out" 2>"$tmp/py.err" & local pid=$!
  node "$js/verify_audit.js" "$@" >"$tmp/js.out" 2>"$tmp/js.err"; local js_status=$?
  wait "$pid"; local py_status=$?
  local verdict  # "passed", or the first code in the output (the failure's or the error's)
  verdict=$(grep -q '^  "passed": true' "$tmp/py.out" && echo passed || sed -n 's/^    "code": "\([A-Z_]*\)",$/\1/p' "$tmp/py.out" | head -n 1)
  if [ "$py_status" = "$js_status" ] && cmp -s "$tmp/py.out" "$tmp/js.out" && [ ! -s "$tmp/js.err" ] \
     && { [ -z "$expected" ] || [ "$verdict" = "$expected" ]; }; then
    ok "$name: $verdict, exit $py_status, both"
  else
    fail "$name: Python $verdict exit $py_status, JavaScript exit $js_status, expected ${expected:-agreement}"
    diff "$tmp/py.out" "$tmp/js.out" | head -n 10 | sed 's/^/     | /'
    head -n 5 "$tmp/js.err" | sed 's/^/     | /'
  fi
}

echo "== vectors and the canonical form"
node verifiers/vectors/make_numbers.js "$tmp/numbers.json"
recorded=$(sed -n 's/^"source":"node \([^ ]*\) .*/\1/p' verifiers/vectors/numbers.json)
if [ "$recorded" = "$(node --version)" ]; then
  same "numbers.json is what make_numbers.js writes, byte for byte" "$tmp/numbers.json" verifiers/vectors/numbers.json
else
  echo "NOTE numbers.json was written by node $recorded, this is $(node --version): the vectors are compared, not the source line"
  grep -v '^"source":' "$tmp/numbers.json" >"$tmp/numbers.new"
  grep -v '^"source":' verifiers/vectors/numbers.json >"$tmp/numbers.old"
  same "numbers.json's vectors are what make_numbers.js writes" "$tmp/numbers.new" "$tmp/numbers.old"
fi
run "node --test verifiers/javascript/test.js" node --test "$js/test.js"
run "the module writes every number and RFC 8785 vector as node does" "$py" -B verifiers/python_cross_check.py vectors
node "$js/cross_check.js" constants >"$tmp/tables.json"
run "the JavaScript's constants and messages are the module's" "$py" -B verifiers/python_cross_check.py constants "$tmp/tables.json"
"$py" -B verifiers/python_cross_check.py decode verifiers/vectors/strict_json.json >"$tmp/decode.py"
node "$js/cross_check.js" decode verifiers/vectors/strict_json.json >"$tmp/decode.js"
same "strict decoding: $(wc -l <"$tmp/decode.py") hand-written cases decode to the same value or code" "$tmp/decode.py" "$tmp/decode.js"

echo "== the fixture's logs"
"$py" -c 'import json, secrets
print(json.dumps({"format": "seal-keys-v1", "current": "k-ci", "keys": [{"key_id": "k-ci", "secret_hex": secrets.token_hex(32)}]}))' >"$tmp/keys.json"
run "write the unsealed log" "$py" -B tool_dispatcher.py --fixture tool-cases.json --audit-log "$tmp/unsealed.log"
run "write the sealed log" "$py" -B tool_dispatcher.py --fixture tool-cases.json --audit-log "$tmp/sealed.log" --seal-key "$tmp/keys.json"
both "unsealed log" passed --verify-audit "$tmp/unsealed.log"
both "sealed log, with its key" passed --verify-audit "$tmp/sealed.log" --seal-key "$tmp/keys.json"
both "sealed log, no key" passed --verify-audit "$tmp/sealed.log"
TOOL_DISPATCHER_SEAL_KEYS=$tmp/keys.json both "sealed log, the key named by the environment" passed --verify-audit "$tmp/sealed.log"
TOOL_DISPATCHER_SEAL_KEYS=$tmp/keys.json both "unsealed log, the key named by the environment" AUDIT_UNSEALED --verify-audit "$tmp/unsealed.log"
TOOL_DISPATCHER_SEAL_KEYS=$tmp/absent.json both "the environment names no file" SEAL_KEYS_UNREADABLE --verify-audit "$tmp/sealed.log"
for log in unsealed sealed; do
  "$py" -B verifiers/python_digests.py "$tmp/$log.log" >"$tmp/digests.py"
  node "$js/verify_audit.js" --digests "$tmp/$log.log" >"$tmp/digests.js"
  same "$log log: every digest recomputed by both ($(wc -l <"$tmp/digests.py") lines)" "$tmp/digests.py" "$tmp/digests.js"
done

echo "== tampered copies"
mkdir "$tmp/tampered"
if "$py" -B verifiers/tamper.py "$tmp/unsealed.log" "$tmp/sealed.log" "$tmp/keys.json" "$tmp/tampered" >"$tmp/out" 2>&1; then
  while IFS=$'\x1f' read -r -a row; do
    count=${#row[@]}
    both "${row[0]}" "${row[count - 1]}" "${row[@]:1:count - 2}"
  done <"$tmp/tampered/cases.txt"
  for log in "$tmp"/tampered/*-model-result-edited-*.log "$tmp"/tampered/*-floats-in-packages.log \
             "$tmp"/tampered/*-number-tool-dispatched.log; do
    "$py" -B verifiers/python_digests.py "$log" >"$tmp/digests.py"
    node "$js/verify_audit.js" --digests "$log" >"$tmp/digests.js"
    same "digests of $(basename "$log" .log)" "$tmp/digests.py" "$tmp/digests.js"
  done
else
  fail "verifiers/tamper.py"; tail -n 20 "$tmp/out" | sed 's/^/     | /'
fi

echo "== random edits"
node "$js/cross_check.js" mutate-lines "$tmp/unsealed.log" 2000 20251206 >"$tmp/lines.json"
"$py" -B verifiers/python_cross_check.py decode "$tmp/lines.json" >"$tmp/decode.py"
node "$js/cross_check.js" decode "$tmp/lines.json" >"$tmp/decode.js"
same "2000 log lines with one random fault each decode to the same value or code" "$tmp/decode.py" "$tmp/decode.js"
node "$js/cross_check.js" mutate-log "$tmp/unsealed.log" 300 1206 >"$tmp/edits.json"
for setup in "unsealed:" "sealed:$tmp/keys.json" "unsealed:$tmp/keys.json"; do
  log=${setup%%:*} keys=${setup#*:}
  "$py" -B verifiers/python_cross_check.py verify-batch "$tmp/$log.log" "$tmp/edits.json" ${keys:+"$keys"} >"$tmp/batch.py"
  node "$js/cross_check.js" verify-batch "$tmp/$log.log" "$tmp/edits.json" ${keys:+"$keys"} >"$tmp/batch.js"
  same "300 randomly edited copies of the $log log${keys:+ (with the key)}: the same verdicts" "$tmp/batch.py" "$tmp/batch.js"
done

if [ "$status" -ne 0 ]; then
  echo "== what failed"
  cat "$failures"
else
  echo "== all verifier checks passed"
fi
exit $status
