"""Signed logs, tampered checkpoints and logs, for signatures/ci.sh to hand to both verifiers.

    python -B signatures/checkpoint_cases.py build LOG OUT_DIR
    python -B signatures/checkpoint_cases.py tables JS_TABLES

``build`` signs copies of LOG with a new key (and a second, other key) in OUT_DIR, tampers with
them, and writes OUT_DIR/cases.txt: one case a line, its name, the arguments of the verify command
line and the verdict expected ("passed" or a code), separated by the ASCII unit separator (0x1f).
``tables`` compares the copies verifiers/javascript/verify_audit.js holds of this layer's messages
and constants (node verifiers/javascript/cross_check.js constants) with this layer's; exit 1 on any
difference.
"""
from __future__ import annotations

import base64
import io
import json
import os
import sys
from pathlib import Path
from typing import Any, Final

sys.path.insert(0, str(Path(__file__).resolve().parent))
import audit_signatures as sig  # noqa: E402
import tool_dispatcher as td  # noqa: E402  (on the path audit_signatures put it on)

FIELD_SEPARATOR: Final = "\x1f"
EVERY: Final = 8  # the fixture's 31 chain lines: checkpoints after 8, 16, 24 and 31


def lines_of(data: bytes) -> list[bytes]:
    return data.split(b"\n")[:-1]


def joined(lines: list[bytes]) -> bytes:
    return b"".join(line + b"\n" for line in lines)


def rechained(lines: list[bytes], edit: Any) -> bytes:
    """The log with one package edited, its digests recomputed, and the chain written again: all a
    writer without the signing key can do (the log is unsealed)."""
    entries = [td.decode_strict_json(line, max_bytes=td.MAX_AUDIT_LINE_BYTES) for line in lines]
    edit(entries)
    stream = io.BytesIO()
    log = td.AuditLog(stream)
    for entry in entries[:-1]:
        package = entry["package"]
        audit = package["protected_audit"]
        audit["request_sha256"], audit["result_sha256"], audit["call_binding_sha256"] = td.package_digests(package)
        log.append(package)
    log.close()
    return stream.getvalue()


def build(log_path: str, out: str) -> None:
    with open(log_path, "rb") as stream:
        log = stream.read()
    key, other = os.path.join(out, "key"), os.path.join(out, "other")
    sig.generate_keys(key)
    sig.generate_keys(other)
    private = sig.load_signing_key(os.path.join(key, sig.PRIVATE_KEY_NAME))
    other_private = sig.load_signing_key(os.path.join(other, sig.PRIVATE_KEY_NAME))
    public = os.path.join(key, sig.PUBLIC_KEY_NAME)
    _report, checkpoints = sig.sign_log(log, private, every=EVERY)
    heads = sig.chain_heads(log)
    rows: list[str] = []

    def case(name: str, expected: str, checkpoint_lines: list[bytes] | None, *, data: bytes = log,
             raw: bytes | None = None, key_path: str = public) -> None:
        path = os.path.join(out, name + ".log")
        with open(path, "wb") as stream:
            stream.write(data)
        if checkpoint_lines is not None or raw is not None:
            with open(path + sig.CHECKPOINTS_SUFFIX, "wb") as stream:
                stream.write(joined(checkpoint_lines or []) if raw is None else raw)
        rows.append(FIELD_SEPARATOR.join((name, "--verify-audit", path, "--public-key", key_path, expected)))

    def resigned(line: bytes, signer: Any = private, **changes: Any) -> bytes:
        claims = {**json.loads(line), **changes}
        key_id = sig.key_id_of(sig.public_raw(signer))
        return sig.checkpoint_line(signer, key_id, claims["entries"], claims["head_sha256"])

    claims = json.loads(checkpoints[1])
    lines = lines_of(log)
    case("as-signed", "passed", checkpoints)
    case("middle-checkpoint-left-out", "passed", checkpoints[:1] + checkpoints[2:])
    case("closing-checkpoint-left-out", "CHECKPOINT_MISSING_CLOSE", checkpoints[:-1])
    case("empty-checkpoint-file", "CHECKPOINT_MISSING_CLOSE", [])
    case("checkpoints-swapped", "CHECKPOINT_ORDER", [checkpoints[1], checkpoints[0]] + checkpoints[2:])
    case("head-changed", "CHECKPOINT_SIGNATURE_INVALID",
         checkpoints[:1] + [td.canonical_json({**claims, "head_sha256": heads[0]})] + checkpoints[2:])
    case("entries-changed", "CHECKPOINT_SIGNATURE_INVALID",
         checkpoints[:1] + [td.canonical_json({**claims, "entries": 15})] + checkpoints[2:])
    case("signed-wrong-head", "CHECKPOINT_HEAD_MISMATCH",
         checkpoints[:1] + [resigned(checkpoints[1], head_sha256=heads[3])] + checkpoints[2:])
    case("signed-beyond-the-log", "CHECKPOINT_BEYOND_LOG", checkpoints + [resigned(checkpoints[-1], entries=len(heads) + 1)])
    case("signed-by-another-key", "CHECKPOINT_KEY_UNKNOWN", checkpoints[:2] + [resigned(checkpoints[2], other_private)] + checkpoints[3:])
    case("a-space-added", "CHECKPOINT_MALFORMED", checkpoints[:1] + [checkpoints[1].replace(b',"format"', b', "format"')] + checkpoints[2:])
    signature = claims["signature_ed25519"]
    respelled = signature[:85] + chr(ord(signature[85]) ^ 1) + "=="
    case("signature-respelled", "CHECKPOINT_MALFORMED",
         checkpoints[:1] + [td.canonical_json({**claims, "signature_ed25519": respelled})] + checkpoints[2:])
    case("file-cut-short", "CHECKPOINT_MALFORMED", None, raw=joined(checkpoints)[:-20])
    case("crlf", "CHECKPOINT_MALFORMED", None, raw=joined(checkpoints).replace(b"\n", b"\r\n", 1))
    case("no-checkpoint-file", "CHECKPOINTS_UNREADABLE", None)
    edited = joined([lines[0].replace(b"ORDER-7", b"ORDER-8", 1)] + lines[1:])
    case("log-byte-changed", "AUDIT_ENTRY_EDITED", checkpoints, data=edited)

    def edit_status(entries: list[dict[str, Any]]) -> None:
        entries[10]["package"]["model_result"]["status"] = "edited"

    case("log-edited-and-rechained", "CHECKPOINT_HEAD_MISMATCH", checkpoints, data=rechained(lines, edit_status))

    def cut(entries: list[dict[str, Any]]) -> None:
        del entries[20:-1]

    case("log-cut-and-closed-again", "CHECKPOINT_BEYOND_LOG", checkpoints, data=rechained(lines, cut))
    case("public-key-of-another-pair", "CHECKPOINT_KEY_UNKNOWN", checkpoints,
         key_path=os.path.join(other, sig.PUBLIC_KEY_NAME))
    case("private-key-as-public", "PUBLIC_KEY_INVALID", checkpoints, key_path=os.path.join(key, sig.PRIVATE_KEY_NAME))
    case("public-key-missing", "PUBLIC_KEY_UNREADABLE", checkpoints, key_path=os.path.join(out, "absent.pem"))
    # The identity point as a public key: a signature with R the identity and S zero, which anyone
    # can write without a private key, verifies under it for any message. It names no signer.
    identity = bytes([1]) + bytes(sig.ED25519_PUBLIC_KEY_BYTES - 1)
    identity_path = os.path.join(out, "identity-public-key.pem")
    with open(identity_path, "wb") as stream:
        stream.write(b"-----BEGIN PUBLIC KEY-----\n" + base64.b64encode(sig.ED25519_SPKI_PREFIX + identity)
                     + b"\n-----END PUBLIC KEY-----\n")
    forged = td.canonical_json({
        "format": sig.CHECKPOINT_FORMAT, "entries": len(heads), "head_sha256": heads[-1],
        "key_id": sig.key_id_of(identity),
        "signature_ed25519": base64.b64encode(identity + bytes(sig.ED25519_SIGNATURE_BYTES - len(identity))).decode()})
    case("public-key-of-small-order", "PUBLIC_KEY_INVALID", [forged], key_path=identity_path)
    with open(os.path.join(out, "cases.txt"), "w", encoding="utf-8") as stream:
        stream.write("".join(row + "\n" for row in rows))


def tables(path: str) -> int:
    with open(path, encoding="utf-8") as stream:
        copied = json.load(stream)
    findings = [f"FAIL message {code}: this layer's catalog says otherwise"
                for code, message in copied["checkpoint_messages"].items()
                if code not in sig.SIGNATURE_ERRORS or sig.SIGNATURE_ERRORS[code].message != message]
    for name, value in copied["checkpoint_constants"].items():
        ours = getattr(sig, name, None)
        if type(ours) is bytes:
            ours = ours.hex()
        elif type(ours) is frozenset:  # a set of byte strings: its sorted hex, as JavaScript lists it
            ours = sorted(item.hex() for item in ours)
        if ours != value:
            findings.append(f"FAIL constant {name}: this layer has {ours!r}, JavaScript {value!r}")
    print("\n".join(findings) or f"ok   {len(copied['checkpoint_messages'])} messages and "
                                  f"{len(copied['checkpoint_constants'])} constants agree")
    return 1 if findings else 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["build"] and len(argv) == 3:
        build(argv[1], argv[2])
        return 0
    if argv[:1] == ["tables"] and len(argv) == 2:
        return tables(argv[1])
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
