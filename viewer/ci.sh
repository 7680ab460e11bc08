#!/usr/bin/env bash
# CI extras for the audit viewer: viewer/audit-viewer.html in a real headless Chromium.
#
# Installs what is missing: Debian's chromium when no Chromium is found, and the cryptography
# package (pinned as signatures/ci.sh pins it) into a virtual environment outside the checkout, to
# sign the checkpoints the page checks. Then checks that the committed page is what
# viewer/build_viewer.py writes, and runs the viewer's suite in the four test modes: the page and
# the command line on the fixture's logs, every tampered copy, hostile files and signed checkpoints.
# Under CI=true the suite fails rather than skips. Each command prints one "ok" or "FAIL" line; the
# failures are listed again at the end.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
export PYTHONDONTWRITEBYTECODE=1
CRYPTOGRAPHY_PIN=$(sed -n "s/^CRYPTOGRAPHY_PIN='\(.*\)'$/\1/p" signatures/ci.sh)

py=$(command -v python || command -v python3)
if [ -z "$py" ] || [ -z "$CRYPTOGRAPHY_PIN" ]; then
  echo "FAIL python, and the pin in signatures/ci.sh, are both needed"; exit 1
fi
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1 \
   && ! command -v google-chrome >/dev/null 2>&1 && ! command -v google-chrome-stable >/dev/null 2>&1; then
  echo "NOTE installing Debian's chromium (no Chromium on this machine)"
  apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null || {
    echo "FAIL could not install chromium"; exit 1; }
fi
venv=${TMPDIR:-/tmp}/td-viewer-venv
if [ ! -x "$venv/bin/python" ]; then "$py" -m venv "$venv" || { echo "FAIL python -m venv"; exit 1; }; fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check "$CRYPTOGRAPHY_PIN" 2>/dev/null \
  || { echo "FAIL pip install $CRYPTOGRAPHY_PIN"; exit 1; }
vpy=$venv/bin/python
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || command -v google-chrome-stable)
echo "NOTE the viewer's suite runs on Python $("$vpy" -c 'import sys; print(sys.version.split()[0])'), $("$browser" --version 2>/dev/null | head -n 1)"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/td-viewer.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
status=0
failures=$tmp/failures
: >"$failures"

# A command that must exit 0; its output is shown whole when it fails, a SKIP or NOTE line always.
run() {
  local start=$(date +%s)
  if "$@" >"$tmp/out" 2>&1; then
    grep -E '^(SKIP|NOTE)' "$tmp/out"; echo "ok   $(( $(date +%s) - start ))s  ${*:2}"
  else
    status=1; cat "$tmp/out"; echo "FAIL $(( $(date +%s) - start ))s  ${*:2}"
    { echo "FAIL ${*:2}"; grep -E '^(FAIL|ERROR):' "$tmp/out" | head -n 12 | sed 's/^/  /'; } >>"$failures"
  fi
}

run "$vpy" -B viewer/build_viewer.py --check
for mode in "-B" "-O -B" "-B -W error" "-O -B -W error"; do
  # shellcheck disable=SC2086  # the mode is several flags
  run "$vpy" $mode -m unittest discover -s viewer -p 'test_viewer.py'
done

if [ "$status" -ne 0 ]; then echo "== what failed"; cat "$failures"; fi
exit $status
