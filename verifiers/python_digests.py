"""Every digest of an audit log, recomputed by the Python module: the twin of
``node verifiers/javascript/verify_audit.js --digests LOG``, for a diff of the two.

    python -B verifiers/python_digests.py LOG

One canonical JSON line a line of the log: {"call_binding_sha256", "entry_sha256", "index",
"request_sha256", "result_sha256"}, where index is the line's position in the file and a digest
is null when the line does not decode as an object, or its package lacks what the digest is
computed from. Exit 0; 2 with the module's one failure shape when the log cannot be read.

The module is loaded by path from the checkout root, and only its public names are used.
"""
from __future__ import annotations

import importlib.util
import os
import sys
from typing import Any, Iterator

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_core() -> Any:
    """tool_dispatcher.py of this checkout, whatever the current directory and sys.path."""
    spec = importlib.util.spec_from_file_location("tool_dispatcher", os.path.join(ROOT, "tool_dispatcher.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules["tool_dispatcher"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


td = load_core()
_NOT_COMPUTABLE = (KeyError, TypeError, ValueError)  # package_digests' answer to a package that lacks a member


def digest_rows(data: bytes) -> Iterator[dict[str, Any]]:
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    for index, line in enumerate(lines):
        row = {"index": index, "entry_sha256": None, "request_sha256": None, "result_sha256": None,
               "call_binding_sha256": None}
        try:
            entry = td.decode_strict_json(line, max_bytes=td.MAX_AUDIT_LINE_BYTES)
        except td.BoundaryError:
            yield row
            continue
        if type(entry) is dict:
            body = {key: value for key, value in entry.items() if key not in ("entry_sha256", "seal")}
            row["entry_sha256"] = td.audit_entry_sha256(body)
            if "package" in entry:
                try:
                    row["request_sha256"], row["result_sha256"], row["call_binding_sha256"] = (
                        td.package_digests(entry["package"]))
                except _NOT_COMPUTABLE:
                    pass
        yield row


def _digests_command(path: str) -> int:
    data = td.read_audit_log(path)
    sys.stdout.write("".join(td.canonical_text(row) + "\n" for row in digest_rows(data)))
    return 0


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        return td.cli_failure(td.BoundaryError("CLI_USAGE"))
    return td.run_cli(lambda: _digests_command(argv[0]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
