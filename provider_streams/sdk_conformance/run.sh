#!/usr/bin/env bash
# provider_streams against the official SDKs (openai, anthropic, google-genai), offline.
#
# Creates a throwaway virtual environment outside the checkout (under ${TMPDIR:-/tmp}), installs
# the SDKs pinned in requirements.txt from the package registry, runs conformance.py (loopback
# only: it refuses any other connection), and removes the environment again. Writes no
# __pycache__ into the checkout. Needs `python` or `python3` (3.11 or newer) on PATH. Run from
# anywhere:
#     bash provider_streams/sdk_conformance/run.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export PYTHONDONTWRITEBYTECODE=1
py=$(command -v python || command -v python3 || true)
if [ -z "$py" ]; then
  echo "FAIL neither python nor python3 is on PATH" >&2
  exit 1
fi
venv=$(mktemp -d "${TMPDIR:-/tmp}/provider-streams-sdk.XXXXXX")
trap 'rm -rf "$venv"' EXIT
"$py" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$here/requirements.txt"
"$venv/bin/python" -B "$here/conformance.py"
