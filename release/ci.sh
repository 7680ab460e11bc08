#!/usr/bin/env bash
# The artifact users get, checked as a user gets it: the README lists this script between the
# ci-extras markers, so .ci/run runs it once per CI run.
#
# 1. Builds the source distribution and, from it, the wheel (python -m build, in a virtual
#    environment outside the checkout, on a copy of the checkout: setuptools writes build/ and
#    *.egg-info beside the sources, and nothing may be written into the checkout).
# 2. Compares the wheel's files with the layers' folders (release/smoke.py contents): a module
#    missing from the package, or a test that got in, fails here.
# 3. For each of Python 3.11, 3.12 and 3.13 (pyenv's newest patch release, else pythonX.Y): a fresh
#    virtual environment with only the wheel installed (no index: it has no dependency), and, from a
#    folder outside the checkout, release/smoke.py installed: every layer's import, each command's
#    --help, its failure shape and a real job, python -m for each, examples/own_tools.py.
# 4. Once, on the newest version: the wheel with the postgres and signatures extras.
#
# It needs the package index for `build` (and setuptools, which build fetches) and for the extras'
# packages. Without it: SKIP on a developer's machine, FAIL under CI=true.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
export PYTHONDONTWRITEBYTECODE=1
root=$(pwd)
started=$(date +%s)

py=$(command -v python || command -v python3)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/td-release.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
status=0
fail() { status=1; echo "FAIL $*"; }
unavailable() {
  if [ "${CI:-}" = "true" ]; then echo "FAIL $* (needed under CI=true)"; exit 1; fi
  echo "SKIP $*"; exit 0
}

# One interpreter per minor version, as .ci/run picks it.
pick() {
  local minor=$1 full
  if command -v pyenv >/dev/null 2>&1; then
    full=$(pyenv versions --bare 2>/dev/null | grep -E "^${minor//./\\.}\.[0-9]+$" | sort -V | tail -n 1)
    if [ -n "$full" ]; then echo "pyenv:$full"; return; fi
  fi
  if command -v "python$minor" >/dev/null 2>&1; then echo "path:python$minor"; return; fi
  echo ""
}
venv_for() {  # venv_for HOW DIR: a fresh virtual environment of that interpreter
  case $1 in
    pyenv:*) PYENV_VERSION=${1#pyenv:} python -m venv "$2" ;;
    path:*) "${1#path:}" -m venv "$2" ;;
  esac
}

# 1. Build, in a copy of the checkout.
mkdir "$tmp/src" "$tmp/data" "$tmp/data/example"
tar --exclude=.git -cf - . | tar -xf - -C "$tmp/src"
"$py" -m venv "$tmp/build-venv" || { echo "FAIL python -m venv"; exit 1; }
"$tmp/build-venv/bin/python" -m pip install -q --disable-pip-version-check build >"$tmp/pip.log" 2>&1 \
  || { tail -n 5 "$tmp/pip.log"; unavailable "pip install build (the package index)"; }
if ! (cd "$tmp/src" && nice -n 10 "$tmp/build-venv/bin/python" -m build --outdir "$tmp/dist" .) >"$tmp/build.log" 2>&1; then
  tail -n 30 "$tmp/build.log"
  grep -q -i -E "could not|no matching distribution|network|connection" "$tmp/build.log" \
    && unavailable "python -m build (setuptools from the package index)"
  echo "FAIL python -m build"; exit 1
fi
wheel=$(ls "$tmp"/dist/*.whl)
sdist=$(ls "$tmp"/dist/*.tar.gz)
echo "ok   built $(basename "$sdist") and, from it, $(basename "$wheel") ($(( $(date +%s) - started ))s)"

# 2. The wheel's files.
if (cd "$tmp/src" && "$py" -B release/smoke.py contents "$wheel") >"$tmp/out" 2>&1; then
  echo "ok   the wheel holds every installed module and no test"
else
  grep -v '^ok' "$tmp/out"; fail "the wheel's files"
fi

# What the installed commands are run on, copied out of the checkout.
cp tool-cases.json tool-transaction-bench/samples/plans.jsonl artifacts/hostile-artifacts.json release/smoke.py "$tmp/data/"
cp examples/own_tools.py examples/artifact_tools.py "$tmp/data/example/"

# 3. Each version: the wheel alone in a fresh environment, used from another folder.
newest=""
for minor in ${CI_PYTHONS:-3.11 3.12 3.13}; do
  how=$(pick "$minor")
  if [ -z "$how" ]; then echo "NOTE Python $minor: not installed on this machine, skipped"; continue; fi
  newest=$how
  start=$(date +%s)
  venv=$tmp/venv-$minor work=$tmp/work-$minor
  mkdir "$work"
  cp -r tool-transaction-bench/examples "$work/examples"  # a user's orchestrator, found from the caller's folder
  if ! venv_for "$how" "$venv" >"$tmp/out" 2>&1 \
      || ! "$venv/bin/python" -m pip install -q --no-index --disable-pip-version-check "$wheel" >>"$tmp/out" 2>&1; then
    cat "$tmp/out"; fail "Python $minor: install the wheel"; continue
  fi
  version=$("$venv/bin/python" -c 'import sys; print(sys.version.split()[0])')
  if (cd "$work" && "$venv/bin/python" -B "$tmp/data/smoke.py" installed "$tmp/data") >"$tmp/out" 2>&1; then
    echo "NOTE ok $(( $(date +%s) - start ))s  Python $version: $(grep -c '^ok' "$tmp/out") checks of the installed wheel"
  else
    grep -E "^(FAIL|[0-9]+ failed)" "$tmp/out"; fail "Python $version: the installed wheel"
  fi
done
[ -z "$newest" ] && fail "no Python 3.11+ found"

# 4. The extras, once.
if [ -n "$newest" ]; then
  start=$(date +%s)
  venv=$tmp/venv-extras work=$tmp/work-extras
  mkdir "$work"
  venv_for "$newest" "$venv" >"$tmp/out" 2>&1 || { cat "$tmp/out"; fail "python -m venv"; }
  if ! "$venv/bin/python" -m pip install -q --disable-pip-version-check "$wheel[postgres,signatures]" >"$tmp/out" 2>&1; then
    tail -n 5 "$tmp/out"; unavailable "pip install the wheel's postgres and signatures extras (the package index)"
  fi
  if (cd "$work" && "$venv/bin/python" -B "$tmp/data/smoke.py" installed "$tmp/data" --extras) >"$tmp/out" 2>&1; then
    echo "NOTE ok $(( $(date +%s) - start ))s  the postgres and signatures extras ($("$venv/bin/python" -m pip list --format=freeze 2>/dev/null | grep -i -E '^(psycopg|cryptography)' | tr '\n' ' '))"
  else
    grep -v '^ok' "$tmp/out" | tail -n 40; fail "the extras"
  fi
fi

# What a build in place would leave (setuptools' build/ and *.egg-info) or an import (__pycache__).
if [ -e "$root/build" ] || [ -n "$(find "$root" \( -name __pycache__ -o -name '*.egg-info' \) -not -path '*/.git/*' -print -quit)" ]; then
  fail "something was written into the checkout (__pycache__, build/ or *.egg-info)"
fi
echo "NOTE release/ci.sh took $(( $(date +%s) - started ))s"
exit $status
