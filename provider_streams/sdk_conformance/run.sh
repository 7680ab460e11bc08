#!/usr/bin/env bash
# provider_streams against the official SDKs (openai, anthropic, google-genai), offline.
#
# Creates a throwaway virtual environment outside the checkout (under ${TMPDIR:-/tmp}), installs
# the SDKs pinned in requirements.txt from the package registry, runs conformance.py (loopback
# only: it refuses any other connection), and removes the environment again. Writes no
# __pycache__ into the checkout. Run from anywhere:
#     bash provider_streams/sdk_conformance/run.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export PYTHONDONTWRITEBYTECODE=1
venv=$(mktemp -d "${TMPDIR:-/tmp}/provider-streams-sdk.XXXXXX")
trap 'rm -rf "$venv"' EXIT
python -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$here/requirements.txt"
"$venv/bin/python" -B "$here/conformance.py"
