"""Tampered copies of a fixture's audit logs, and the verify command lines to try on each:
what verifiers/run.sh hands to both verifiers, which must answer each the same way.

    python -B verifiers/tamper.py UNSEALED_LOG SEALED_LOG KEYS OUT_DIR

Writes OUT_DIR/*.log, a few key files, and OUT_DIR/cases.txt: one case a line, its name, the
arguments of the verify command line, and the verdict expected of the Python CLI ("passed", or
the code it must answer), which run.sh checks as well; the fields are separated by the ASCII unit
separator (0x1f), which no path holds and which, unlike a tab, keeps an empty argument. Edits that
must survive the chain (a package changed and the chain recomputed after it) are written with
the module's own public writer, so that only the package is wrong.
"""
from __future__ import annotations

import io
import json
import math
import os
import sys
from typing import Any, Final

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from python_digests import td  # noqa: E402  (the module, loaded by path)

# Floats a package may hold since the portable domain admits finite doubles: both sides of the
# notations' borders, the smallest subnormal, the largest double, a sum that is not 0.3, -0.
FLOATS: dict[str, Any] = {"half": 0.5, "tenth_sum": 0.1 + 0.2, "small": 1e-7, "above_small": 1.5e-6,
                          "large": 1e21, "tiny": 5e-324, "max": 1.7976931348623157e308, "negative_zero": -0.0,
                          "whole": 2.0}
# A whole double from 2**53 up to 1e21 has a canonical text without a point or an exponent, which
# the portable decoder reads as an integer beyond 2**53 - 1 and refuses: the boundary never writes
# one (outside the portable domain), and a log a forger writes with one is refused as malformed.
WHOLE_BEYOND_SAFE: Final = 999999999999999900000.0


def read_lines(path: str) -> list[bytes]:
    with open(path, "rb") as stream:
        return stream.read().split(b"\n")[:-1]


def decoded(lines: list[bytes]) -> list[dict[str, Any]]:
    return [td.decode_strict_json(line, max_bytes=td.MAX_AUDIT_LINE_BYTES) for line in lines]


def chain(entries: list[dict[str, Any]], keys: Any, *, keep_seals: bool = False) -> list[bytes]:
    """The entries' lines, with indices, digests and seals recomputed from the first on; with
    keep_seals, each entry keeps the seal it had (what a forger without the key can do)."""
    lines, previous = [], td.GENESIS_SHA256
    for index, entry in enumerate(entries):
        if "package" in entry:
            line, digest = td.audit_entry_line(entry["package"], index=index, previous_sha256=previous,
                                               seal_keys=None if keep_seals else keys)
        else:
            body = {"format": td.AUDIT_LOG_FORMAT, "index": index, "previous_sha256": previous, "closed": True}
            digest = td.audit_entry_sha256(body)
            seal = td.seal_view(None if keep_seals else keys, "audit-entry", digest)
            line = td.canonical_json({**body, "entry_sha256": digest, "seal": seal})
        if keep_seals:
            rebuilt = td.decode_strict_json(line, max_bytes=td.MAX_AUDIT_LINE_BYTES)
            line = td.canonical_json({**rebuilt, "seal": entry["seal"]})
        lines.append(line)
        previous = digest
    return lines


def redigest(package: dict[str, Any], keys: Any) -> None:
    """The package's own three digests (and its seal) recomputed after an edit."""
    audit = package["protected_audit"]
    audit["request_sha256"], audit["result_sha256"], audit["call_binding_sha256"] = td.package_digests(package)
    package["seal"] = td.seal_view(keys, "package", audit["call_binding_sha256"])


# A host tool with numbers in and out, dispatched through the core, each amount times each rate.
_AMOUNTS: Final = (12.5, 0.1, 1e-7, 5e-324, 123456789.125, 4e21, 1.7976931348623157e308, 0.0, 7.0)
_RATES: Final = (1e-7, 0.3, 2.5)


def _number_tool() -> Any:
    number = {"type": "number"}
    spec = td.declare_tool(
        "convert_amount", description="Convert an amount.", effect="read", required_role="fx.read",
        input_schema={"type": "object", "properties": {"amount": number, "rate": number}, "required": ["amount", "rate"]},
        output_schema={"type": "object", "properties": {"converted": number, "inputs": {"type": "array", "items": number}},
                       "required": ["converted", "inputs"]})
    return td.declare_contracts(spec)


def dispatched_numbers(keys: Any, amounts: tuple[float, ...] = _AMOUNTS) -> list[bytes]:
    """The log of a number tool's dispatches: floats in every package's arguments and data."""
    def convert(call: Any) -> Any:
        amount, rate = call.arguments["amount"], call.arguments["rate"]
        product = amount * rate
        return td.Execution({"converted": product if math.isfinite(product) else amount, "inputs": [amount, rate]}, "none")

    dispatcher = td.Dispatcher(registry=_number_tool(), hooks={"convert_amount": td.ToolHooks(execute=convert)},
                               seal_keys=keys)
    principal = td.Principal("tenant-a", "alice", ("fx.read",))
    stream = io.BytesIO()
    log = td.AuditLog(stream, seal_keys=keys)
    for number, (amount, rate) in enumerate((a, r) for a in amounts for r in _RATES):
        context = td.CallContext("OpenAI", "Responses", "openai-responses-v1", response_id=f"resp_{number}",
                                 call_id=f"call_{number}", operation_id=f"op-{number}")
        # As a model writes them: Python's repr, the shortest text, with a point or an exponent.
        try:
            arguments = td.decode_strict_json(f'{{"amount": {amount!r}, "rate": {rate!r}}}'.encode("ascii"))
        except td.BoundaryError:  # 1e20 is no portable number as text; handed over as a value, the contract refuses it
            arguments = {"amount": amount, "rate": rate}
        log.append(td.json_copy(dispatcher.dispatch({"name": "convert_amount", "arguments": arguments}, context,
                                                    principal, now=1_800_000_000)))
    log.close()
    return stream.getvalue().split(b"\n")[:-1]


def with_floats(entries: list[dict[str, Any]], keys: Any) -> list[dict[str, Any]]:
    """Every package holds floats in its arguments and its model_result, its digests recomputed."""
    for entry in entries:
        package = entry.get("package")
        if package is None:
            continue
        arguments = package["protected_audit"]["arguments"]
        if type(arguments) is dict:
            arguments["measures"] = dict(FLOATS)
        package["model_result"]["measures"] = [FLOATS["tenth_sum"], FLOATS["small"], FLOATS["large"]]
        redigest(package, keys)
    return entries


FIELD_SEPARATOR: Final = "\x1f"


class Cases:
    def __init__(self, out: str) -> None:
        self.out = out
        self.rows: list[str] = []

    def path(self, name: str) -> str:
        return os.path.join(self.out, name)

    def write(self, name: str, lines: list[bytes], *, end: bytes = b"\n") -> str:
        path = self.path(name + ".log")
        with open(path, "wb") as stream:
            stream.write(b"\n".join(lines) + (end if lines else b""))
        return path

    def json_file(self, name: str, document: Any) -> str:
        path = self.path(name)
        with open(path, "w", encoding="utf-8") as stream:
            json.dump(document, stream)
        return path

    def case(self, name: str, expected: str, *arguments: str) -> None:
        self.rows.append(FIELD_SEPARATOR.join((name, *arguments, expected)))


def key_file(key_id: str, secret_hex: str, *others: tuple[str, str]) -> dict[str, Any]:
    keys = [{"key_id": key_id, "secret_hex": secret_hex}] + [{"key_id": i, "secret_hex": s} for i, s in others]
    return {"format": td.SEAL_KEYS_FORMAT, "current": key_id, "keys": keys}


def build(unsealed_path: str, sealed_path: str, keys_path: str, out: str) -> Cases:
    cases = Cases(out)
    keys = td.load_seal_keys(keys_path)
    with open(keys_path, encoding="utf-8") as stream:
        key_document = json.load(stream)
    key_id, secret = key_document["keys"][0]["key_id"], key_document["keys"][0]["secret_hex"]
    wrong_secret = cases.json_file("wrong-secret.json", key_file(key_id, "ab" * 32))
    other_id = cases.json_file("other-id.json", key_file("k-other", "cd" * 32))
    rotated = cases.json_file("rotated.json", key_file("k-next", "ef" * 32, (key_id, secret)))
    invalid_keys = cases.json_file("invalid-keys.json", key_file(key_id, "abc"))
    missing = cases.path("missing.log")
    verify = "--verify-audit"

    for kind, path, key_args in (("unsealed", unsealed_path, ()), ("sealed", sealed_path, ("--seal-key", keys_path))):
        lines = read_lines(path)
        entries = decoded(lines)
        closing = len(lines) - 1
        seal_keys = keys if kind == "sealed" else None

        def case(name: str, expected: str, log_lines: list[bytes], *, end: bytes = b"\n", args: tuple[str, ...] = key_args) -> None:
            log = cases.write(f"{kind}-{name}", log_lines, end=end)
            cases.case(f"{kind} {name}", expected, verify, log, *args)

        case("as-written", "passed", lines)
        changed = list(lines)
        changed[0] = changed[0].replace(b'"ORDER-7"', b'"ORDER-9"', 1)
        case("byte-changed-in-package", "AUDIT_ENTRY_EDITED", changed)
        case("line-deleted", "AUDIT_ENTRY_DELETED", lines[:5] + lines[6:])
        case("lines-swapped", "AUDIT_ENTRY_REORDERED", lines[:3] + [lines[4], lines[3]] + lines[5:])
        case("last-line-truncated", "AUDIT_TRUNCATED", lines[:-1] + [lines[-1][:40]], end=b"")
        case("closing-entry-removed", "AUDIT_TRUNCATED", lines[:-1])
        case("entry-after-closing", "AUDIT_MALFORMED", lines + [lines[0]])
        case("crlf-line-ending", "AUDIT_MALFORMED", lines[:2] + [lines[2] + b"\r"] + lines[3:])
        case("duplicate-inserted", "AUDIT_ENTRY_INSERTED", lines[:8] + [lines[7]] + lines[8:])
        spaced = list(lines)
        spaced[4] = spaced[4].replace(b'","format":', b'", "format":', 1)
        case("whitespace-added", "AUDIT_ENTRY_EDITED", spaced)
        case("empty-file", "AUDIT_TRUNCATED", [])

        edited = decoded(lines)
        edited[3]["package"]["model_result"]["status"] = "edited"
        case("model-result-edited-rechained", "AUDIT_PACKAGE_DIGEST", chain(edited, seal_keys))
        # The chain is judged whole before any package: a later chain fault is named first.
        rechained = chain(edited, seal_keys)
        case("package-digest-then-closing-removed", "AUDIT_TRUNCATED", rechained[:-1])
        later = list(rechained)
        later[20] = later[20].replace(b'"ORDER-7"', b'"ORDER-9"', 1)
        case("package-digest-then-later-edit", "AUDIT_ENTRY_EDITED", later)
        edited = decoded(lines)
        edited[8]["package"]["protected_audit"]["arguments"]["order_ref"] = "ORDER-1"
        case("arguments-edited-rechained", "AUDIT_PACKAGE_DIGEST", chain(edited, seal_keys))
        edited = decoded(lines)
        del edited[2]["package"]["protected_audit"]["tool_contract"]["effect_revision"]
        case("contract-revision-removed-rechained", "AUDIT_PACKAGE_DIGEST", chain(edited, seal_keys))
        edited = decoded(lines)
        del edited[2]["package"]["execution"]
        case("execution-removed-rechained", "AUDIT_PACKAGE_DIGEST", chain(edited, seal_keys))
        edited = decoded(lines)
        edited[9]["package"]["protected_audit"]["downstream"]["request_ref"] = "forged"
        case("downstream-edited-rechained", "AUDIT_PACKAGE_DIGEST", chain(edited, seal_keys))
        # A writer who recomputes the package's digests too: only a seal can tell.
        edited = decoded(lines)
        edited[3]["package"]["model_result"]["status"] = "edited"
        redigest(edited[3]["package"], seal_keys)
        case("model-result-edited-redigested-rechained", "passed", chain(edited, seal_keys))
        case("floats-in-packages", "passed", chain(with_floats(decoded(lines), seal_keys), seal_keys))
        numbers = dispatched_numbers(seal_keys)
        case("number-tool-dispatched", "passed", numbers)
        # The dispatch refuses a whole double beyond 2**53 (no portable number): the log holds a refusal.
        case("number-tool-whole-double-beyond-2**53", "passed", dispatched_numbers(seal_keys, (1e20,)))
        edited = decoded(numbers)
        edited[4]["package"]["protected_audit"]["arguments"]["amount"] = 0.1 + 0.2
        case("number-argument-edited-rechained", "AUDIT_PACKAGE_DIGEST", chain(edited, seal_keys))
        beyond = decoded(lines)
        beyond[0]["package"]["model_result"]["measures"] = [WHOLE_BEYOND_SAFE]
        redigest(beyond[0]["package"], seal_keys)
        case("float-written-as-a-long-integer", "AUDIT_MALFORMED", chain(beyond, seal_keys))
        floats = chain(with_floats(decoded(lines), seal_keys), seal_keys)
        floats[1] = floats[1].replace(b'"half":0.5', b'"half":5e-1', 1)
        case("float-respelled", "AUDIT_ENTRY_EDITED", floats)

        if kind == "sealed":
            edited = decoded(lines)
            edited[3]["package"]["model_result"]["status"] = "edited"
            redigest(edited[3]["package"], None)
            case("rechained-without-the-key", "AUDIT_ENTRY_EDITED", chain(edited, None, keep_seals=True))
            changed = list(lines)
            at = changed[9].rindex(b'"hmac_sha256":"') + len(b'"hmac_sha256":"')
            changed[9] = changed[9][:at] + (b"0" if changed[9][at:at + 1] != b"0" else b"1") + changed[9][at + 1:]
            case("seal-edited", "AUDIT_ENTRY_EDITED", changed)
            forged = decoded(lines)
            forged.insert(8, dict(forged[7]))
            case("forged-entry-inserted", "AUDIT_ENTRY_INSERTED", chain(forged, None, keep_seals=True)[:9] + lines[8:])
            case("wrong-secret", "AUDIT_ENTRY_EDITED", lines, args=("--seal-key", wrong_secret))
            case("other-key-id", "AUDIT_KEY_UNKNOWN", lines, args=("--seal-key", other_id))
            case("rotated-keys", "passed", lines, args=("--seal-key", rotated))
            case("no-key-given", "passed", lines, args=())
            case("invalid-key-file", "SEAL_KEYS_INVALID", lines, args=("--seal-key", invalid_keys))
            case("missing-key-file", "SEAL_KEYS_UNREADABLE", lines, args=("--seal-key", missing))
            case("empty-key-path", "SEAL_KEYS_UNREADABLE", lines, args=("--seal-key", ""))
        else:
            case("checked-with-a-key", "AUDIT_UNSEALED", lines, args=("--seal-key", keys_path))

    cases.case("missing log", "AUDIT_LOG_UNREADABLE", verify, missing)
    cases.case("directory as log", "AUDIT_LOG_UNREADABLE", verify, out)
    cases.case("usage no value", "CLI_USAGE", verify)
    cases.case("usage unknown flag", "CLI_USAGE", verify, unsealed_path, "--sealkey", keys_path)
    cases.case("usage report", "CLI_USAGE", verify, unsealed_path, "--report")
    cases.case("usage value like a flag", "CLI_USAGE", verify, "-x")
    cases.case("usage stray argument", "CLI_USAGE", verify, unsealed_path, "extra")
    # argparse reads these as options, a space notwithstanding: never a file's name.
    cases.case("usage value naming an option, with a space", "CLI_USAGE", verify, "--seal-key=a b")
    cases.case("usage value that is -h and more", "CLI_USAGE", verify, unsealed_path, "--seal-key", "-h x")
    # and this as a value: a negative number in other digits.
    cases.case("value like a negative number in other digits", "AUDIT_LOG_UNREADABLE", verify, "-\u0661")
    cases.case("equals form", "passed", f"{verify}={unsealed_path}")
    cases.case("no arguments", "CLI_USAGE")
    with open(cases.path("cases.txt"), "w", encoding="utf-8") as stream:
        stream.write("".join(row + "\n" for row in cases.rows))
    return cases


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        sys.stderr.write(__doc__)
        return 2
    build(*argv)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
