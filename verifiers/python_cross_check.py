"""The Python half of the differential checks in verifiers/run.sh; the JavaScript half is
verifiers/javascript/cross_check.js, and where both print, the two outputs must be the same bytes.

    python -B verifiers/python_cross_check.py constants JS_TABLES   the JS copies equal the module's
    python -B verifiers/python_cross_check.py vectors                the module against the vectors
    python -B verifiers/python_cross_check.py decode CASES           each case's decoding
    python -B verifiers/python_cross_check.py verify-batch LOG EDITS [KEYS]

constants and vectors print an ok line or a FAIL line a finding, and exit 1 on any FAIL.
"""
from __future__ import annotations

import json
import math
import os
import re
import struct
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from python_digests import ROOT, td  # noqa: E402  (the module, loaded by path)

VECTORS = os.path.join(ROOT, "verifiers", "vectors")
NUMBERS_FORMAT = "jcs-number-vectors-v1"
_LONG_INTEGER_TEXT = re.compile(r"-?[0-9]+")


def _utf16(key: str) -> bytes:
    return key.encode("utf-16-be")


def typed_view(value: Any) -> str:
    """The decoded value with its number types visible: an integer is "i", a float "f"."""
    if value is None or value is True or value is False:
        return td.canonical_text(value)
    if type(value) is int:
        return "i" + td.number_text(value)
    if type(value) is float:
        return "f" + td.number_text(value)
    if type(value) is str:
        return td.canonical_text(value)
    if type(value) is list:
        return "[" + ",".join(typed_view(item) for item in value) + "]"
    return "{" + ",".join(td.canonical_text(key) + ":" + typed_view(value[key])
                          for key in sorted(value, key=_utf16)) + "}"


def constants_command(path: str) -> int:
    with open(path, encoding="utf-8") as stream:
        tables = json.load(stream)
    findings = [f"FAIL constant {name}: the module has {getattr(td, name, None)!r}, JavaScript {value!r}"
                for name, value in tables["constants"].items() if getattr(td, name, None) != value]
    for code, message in tables["messages"].items():
        spec = td.ERROR_CATALOG.get(code)
        if spec is None or spec.message != message or spec.retryable:
            findings.append(f"FAIL message {code}: the module's catalog says otherwise")
    # Every code the module's log verification can answer must be one the JavaScript can print.
    findings += [f"FAIL message {code}: in the module's audit scope, missing from the JavaScript"
                 for code, spec in td.ERROR_CATALOG.items() if spec.scope == "audit" and code not in tables["messages"]]
    print("\n".join(findings) or f"ok   {len(tables['constants'])} constants and {len(tables['messages'])} messages agree")
    return 1 if findings else 0


def vectors_command() -> int:
    findings = []
    with open(os.path.join(VECTORS, "numbers.json"), encoding="utf-8") as stream:
        numbers = json.load(stream)
    unreadable = 0
    if numbers["format"] != NUMBERS_FORMAT:
        findings.append("FAIL numbers.json: unknown format")
    for bits, expected in numbers["vectors"]:
        value = struct.unpack(">d", bytes.fromhex(bits))[0]
        texts = (td.number_text(value), td.canonical_text(value), td.canonical_text([value])[1:-1],
                 td.canonical_text({"n": value})[5:-1])
        if any(text != expected for text in texts) or not math.isfinite(value):
            findings.append(f"FAIL number {bits}: expected {expected}, the module writes {texts}")
            continue
        # The text reads back as the same double, unless it is a whole number beyond 2**53 - 1
        # written without a point or an exponent (from 2**53 up to 1e21): the portable decoder
        # reads that as an integer no peer holds exactly, and refuses it.
        if _LONG_INTEGER_TEXT.fullmatch(expected) and abs(value) > td.MAX_SAFE_INTEGER:
            unreadable += 1
            try:
                td.decode_strict_json(expected.encode("ascii"))
            except td.BoundaryError as error:
                if error.code == "JSON_NOT_PORTABLE":
                    continue
            findings.append(f"FAIL number {bits}: {expected} was not refused as JSON_NOT_PORTABLE")
            continue
        back = td.decode_strict_json(expected.encode("ascii"))
        if float(back) != value or td.number_text(back) != expected:
            findings.append(f"FAIL number {bits}: {expected} does not read back")
    jcs = os.path.join(VECTORS, "jcs")
    names = sorted(os.listdir(os.path.join(jcs, "input")))
    for name in names:
        with open(os.path.join(jcs, "input", name), "rb") as stream:
            document = td.decode_strict_json(stream.read())
        with open(os.path.join(jcs, "output", name), "rb") as stream:
            expected = stream.read()
        if td.canonical_json(document) != expected:
            findings.append(f"FAIL jcs {name}: the module writes {td.canonical_json(document)!r}")
    print("\n".join(findings) or f"ok   {len(numbers['vectors'])} number vectors ({unreadable} of them whole numbers "
                                  f"beyond 2**53 - 1 whose text the portable decoder refuses) and {len(names)} RFC 8785 vectors")
    return 1 if findings else 0


def _case_bytes(case: dict[str, Any]) -> bytes:
    return bytes.fromhex(case["hex"]) if "hex" in case else case["text"].encode("utf-8")


def decode_command(path: str) -> int:
    with open(path, encoding="utf-8") as stream:
        cases = json.load(stream)["cases"]
    out = []
    for case in cases:
        try:
            verdict = typed_view(td.decode_strict_json(_case_bytes(case), max_bytes=case.get("max_bytes", 65_536),
                                                       max_depth=case.get("max_depth", 32)))
        except td.BoundaryError as error:
            verdict = error.code
        out.append(f"{case['name']}\t{verdict}\n")
    sys.stdout.write("".join(out))
    return 0


def apply_edits(data: bytes, edits: list[list[Any]]) -> bytes:
    for kind, first, second in edits:
        if kind == "replace":
            data = data[:first] + bytes.fromhex(second) + data[first + len(second) // 2:]
        elif kind == "delete":
            data = data[:first] + data[first + second:]
        elif kind == "insert":
            data = data[:first] + bytes.fromhex(second) + data[first:]
        else:
            lines = data.split(b"\n")
            data = b"\n".join(lines[index] for index in first)
    return data


def verify_batch_command(log: str, edits: str, keys: str | None) -> int:
    with open(log, "rb") as stream:
        data = stream.read()
    with open(edits, encoding="utf-8") as stream:
        cases = json.load(stream)["cases"]
    seal_keys = None if keys is None else td.load_seal_keys(keys)
    out = []
    for case in cases:
        try:
            report = td.verify_audit_log(apply_edits(data, case["edits"]), seal_keys=seal_keys,
                                         require_seal=seal_keys is not None)
            verdict = {"passed": True, "entries": report.entries, "head_sha256": report.head_sha256,
                       "sealed": report.sealed}
        except td.BoundaryError as error:
            verdict = {"passed": False, **error.to_json()}
        out.append(f"{case['name']}\t{td.canonical_text(verdict)}\n")
    sys.stdout.write("".join(out))
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["constants"] and len(argv) == 2:
        return constants_command(argv[1])
    if argv == ["vectors"]:
        return vectors_command()
    if argv[:1] == ["decode"] and len(argv) == 2:
        return decode_command(argv[1])
    if argv[:1] == ["verify-batch"] and len(argv) in (3, 4):
        return verify_batch_command(argv[1], argv[2], argv[3] if len(argv) == 4 else None)
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
