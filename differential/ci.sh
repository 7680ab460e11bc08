#!/usr/bin/env bash
# CI extras for the differential layer: the contract language against an independent validator.
#
# Installs the oracle, pinned, into a virtual environment outside the checkout: jsonschema with the
# two format checkers it needs for date-time, time and uri (rfc3339-validator, rfc3986-validator;
# date, uuid, ipv4, ipv6 and email need none), and regress for ECMA-262 patterns. Fetches the
# official JSON Schema Test Suite from PyPI alone, inside the jsonschema sdist (json/tests/), checked
# against its SHA-256. Installs pydantic, pinned, for the census of typical Pydantic tool models
# (pydantic_census.py: how many compile, and a soundness spot check of those that do), which is also
# one of the uri format's readers; node (on PATH, not installed here) is the other. Installs
# email-validator, pinned, for Pydantic's EmailStr, and zod, pinned, with npm into a folder beside
# the virtual environment's Python (outside the checkout): the email format's readers. Then runs
# the seeded differential (a few seeds), the seeded URIs and addresses against the uri and email
# checks and their readers, the official suite's compiled groups, the census, and the layer's suite
# in the four test modes. Under CI=true nothing skips: a missing oracle, pydantic, email-validator,
# node or zod fails. Each command prints one "ok" or "FAIL" line; the failures are listed again at
# the end.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
export PYTHONDONTWRITEBYTECODE=1
ORACLE_PINS=(
  'jsonschema==4.26.0' 'attrs==26.1.0' 'jsonschema-specifications==2025.9.1' 'referencing==0.37.0'
  'rpds-py==2026.9.1' 'typing_extensions==4.16.0' 'rfc3339-validator==0.1.4' 'six==1.17.0'
  'rfc3986-validator==0.1.1' 'regress==2026.9.1'
)
# pydantic with its core pinned too (pydantic requires the exact core it was released with), and
# its two other dependencies; typing_extensions is pinned above.
CENSUS_PINS=('pydantic==2.14.3' 'pydantic-core==2.50.4' 'annotated-types==0.8.0' 'typing-inspection==0.4.5')
# email-validator (what pydantic's EmailStr calls) and its two dependencies.
EMAIL_PINS=('email-validator==2.4.0' 'dnspython==2.9.2' 'idna==3.20')
ZOD_PIN=zod@4.6.7  # zod's email(), run by node: installed with npm into $venv/zod
SUITE_SDIST=jsonschema-4.26.0.tar.gz  # the same release as the oracle: its json/tests/ is the official suite
SUITE_SDIST_SHA256=0c26707e2efad8aa1bfc5b7ce170f3fccc2e4918ff85989ba9ffa9facb2be326
SEEDS=(1 2 3 4)
SCHEMAS_PER_SEED=500  # and half as many overlays: about 5 s a seed on one core
URIS_PER_SEED=5000  # beside the fixed samples: about 2 s a seed, node's one subprocess included
EMAILS_PER_SEED=5000  # beside the fixed samples: about 3 s a seed, two node subprocesses included

py=$(command -v python || command -v python3)
if [ -z "$py" ]; then echo "FAIL python is needed"; exit 1; fi
venv=${TMPDIR:-/tmp}/td-differential-venv
if [ ! -x "$venv/bin/python" ]; then "$py" -m venv "$venv" || { echo "FAIL python -m venv"; exit 1; }; fi
vpy=$venv/bin/python
"$vpy" -m pip install -q --disable-pip-version-check "${ORACLE_PINS[@]}" "${CENSUS_PINS[@]}" "${EMAIL_PINS[@]}" \
  2>/dev/null || { echo "FAIL pip install ${ORACLE_PINS[*]} ${CENSUS_PINS[*]} ${EMAIL_PINS[*]}"; exit 1; }
# zod where differential.py looks for it by default (ZOD_FOLDER: the venv's prefix, then zod/).
zod=$venv/zod
zod_installed() { grep -qs "\"version\": \"${ZOD_PIN#zod@}\"" "$zod/node_modules/zod/package.json"; }
if ! zod_installed; then
  mkdir -p "$zod" && (cd "$zod" && timeout 300 npm install -s --no-save --no-package-lock --no-audit --no-fund \
    --ignore-scripts --prefix "$zod" "$ZOD_PIN" >/dev/null 2>&1)
  zod_installed || echo "FAIL npm install $ZOD_PIN (the email readers' runs will fail too)"
fi
sdist=$venv/suite/$SUITE_SDIST
if [ ! -f "$sdist" ]; then
  "$vpy" -m pip download -q --disable-pip-version-check --no-binary :all: --no-deps "${ORACLE_PINS[0]}" \
    -d "$venv/suite" >/dev/null 2>&1 || { echo "FAIL pip download ${ORACLE_PINS[0]} (the sdist)"; exit 1; }
fi
if [ "$(sha256sum "$sdist" | cut -d ' ' -f 1)" != "$SUITE_SDIST_SHA256" ]; then
  rm -f "$sdist"; echo "FAIL $SUITE_SDIST is not the pinned file (SHA-256)"; exit 1
fi
echo "NOTE the differential runs on Python $("$vpy" -c 'import sys; print(sys.version.split()[0])'), $(
  "$vpy" -c 'from importlib import metadata as m; print(", ".join(n + " " + m.version(n) for n in
  ("jsonschema", "rfc3339-validator", "rfc3986-validator", "regress", "pydantic", "pydantic-core",
   "email-validator")))'), node $(node --version 2>/dev/null || echo 'missing'), zod $(
  sed -n 's/^ *"version": "\(.*\)",$/\1/p' "$zod/node_modules/zod/package.json" 2>/dev/null || echo 'missing')"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/td-differential.XXXXXX")
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
    grep -E '^(FAIL|ERROR):|"kind":' "$tmp/out" | head -n 12 | sed 's/^/  /' >>"$failures"
  fi
}

# One line of a report's counts (the report itself is shown whole when the command fails).
summary() {
  "$vpy" -B -c '
import json, sys
report = json.load(open(sys.argv[1], encoding="utf-8"))
if "schemas" in report:
    for side in ("schemas", "overlays"):
        c = report[side]
        print("NOTE   seed %s %s: %s of %s compiled, %s refused; %s values, %s admitted, %s narrowed, %s unsound" % (
            report["seed"], side, c["compiled"], c["generated"], sum(c["refused"].values()), c["values"],
            c["admitted"], c["narrowed"], c["unsound"]))
elif report.get("format") == "pydantic-census-report-v1":
    c, s = report["counts"], report["spot_check"]
    print("NOTE   pydantic census: %s of %s models compile; refused %s; spot check: %s values, %s admitted, "
          "%s narrowed, %s unsound, %s admitted that Pydantic refuses, %s strict-only" % (
              c["compiled"], c["models"], ", ".join("%s %s" % item for item in c["refused"].items()) or "none",
              s["values"], s["admitted"], s["narrowed"], s["unsound"], s["pydantic_refuses"], s["strict_only"]))
elif report.get("format") in ("differential-uri-report-v1", "differential-email-report-v1"):
    print("NOTE   seed %s %s: %s values, %s admitted (%s); refused of the admitted: %s; %s findings" % (
        report["seed"], "uris" if report["format"] == "differential-uri-report-v1" else "emails",
        report["values"], report["admitted"],
        ", ".join("%s %s" % item for item in report["admitted_forms"].items()),
        ", ".join("%s %s" % (name, c["refuses_admitted"]) for name, c in report["verdicts"].items()),
        report["findings_total"]))
else:
    a = report["oracle_agreement"]
    print("NOTE   official suite: %s groups, %s with a remote $ref skipped, %s compiled, %s sound; %s tests, "
          "%s invalid refused, %s narrowed, %s unsound; the oracle against the suite: %s looser, %s stricter of %s"
          % (report["groups"], report["skipped_remote_ref"], report["compiled"], report["sound"], report["tests"],
             report["invalid_refused"], report["narrowed"], report["unsound"], a["looser"], a["stricter"], a["tests"]))
    t = report["typed"]
    print("NOTE   official suite, typed: %s groups, %s compiled, %s sound; %s tests, %s invalid refused, %s narrowed, "
          "%s unsound" % (t["groups"], t["compiled"], t["sound"], t["tests"], t["invalid_refused"], t["narrowed"],
                          t["unsound"]))
' "$1" 2>/dev/null || true
}

for seed in "${SEEDS[@]}"; do
  run "$vpy" -B differential/differential.py --seed "$seed" --schemas "$SCHEMAS_PER_SEED"
  summary "$tmp/out"
  run "$vpy" -B differential/differential.py --seed "$seed" --uris "$URIS_PER_SEED"
  summary "$tmp/out"
  run "$vpy" -B differential/differential.py --seed "$seed" --emails "$EMAILS_PER_SEED"
  summary "$tmp/out"
done
run "$vpy" -B differential/differential.py --suite "$sdist"
summary "$tmp/out"
run "$vpy" -B differential/pydantic_census.py
summary "$tmp/out"

for mode in "-B" "-O -B" "-B -W error" "-O -B -W error"; do
  # shellcheck disable=SC2086  # the mode is several flags
  run "$vpy" $mode -m unittest discover -s differential -p 'test_differential.py'
done

if [ -n "$(find differential -name __pycache__ -print -quit)" ]; then fail "a __pycache__ folder was written"; fi
if [ "$status" -ne 0 ]; then echo "== what failed"; cat "$failures"; fi
exit $status
