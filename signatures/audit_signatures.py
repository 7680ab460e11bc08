"""Signed checkpoints of an audit log: Ed25519 signatures over its hash chain's head.

The core's digests show a change to anyone who recomputes them, and its HMAC seals show it to
whoever holds the seal key, who can also forge them. A checkpoint is a third kind of evidence: the
chain's head after a number of entries, signed with an Ed25519 private key that only the writer
holds, and checked with its public key, which anyone may hold. A verifier with the public key can
tell a log the writer signed from any other, and cannot sign one itself.

    python -B signatures/audit_signatures.py keygen --out DIR
    python -B signatures/audit_signatures.py sign LOG --sign-key DIR/signing-key.pem [--every N]
    python -B signatures/audit_signatures.py --verify-audit LOG --public-key DIR/public-key.pem

``sign`` writes LOG.checkpoints: one canonical JSON line a checkpoint, in order of entries,
{"entries", "format", "head_sha256", "key_id", "signature_ed25519"}, one after every N chain
entries and one at the closing entry's head. ``entries`` counts chain lines, the closing entry
included; the signature is over the canonical JSON of {"domain", "entries", "head_sha256",
"key_id"}. ``key_id`` is the first 16 hex digits of SHA-256 of the raw 32-byte public key.

What this layer never does:
- change the core: tool_dispatcher never imports this module nor ``cryptography``; this module uses
  the core's public names only, and its own catalog of codes, which the core's does not hold;
- sign or accept a chain the core refuses: the log is verified by tool_dispatcher.verify_audit_log
  first, and its refusal is answered as the core's CLI answers it;
- print a key, a path or a file's text; overwrite a key or a checkpoint file;
- rely on a bare assert (``python -O`` deletes them).

Exit 0 passed; 1 the log or a checkpoint was refused (the first bad line, by position); 2 the
command line, a key or a file was refused. Sections: 1. limits and constants; 2. errors; 3. keys;
4. checkpoints; 5. verification; 6. CLI.
"""
from __future__ import annotations

if __name__ == "__main__":
    # Ctrl-C while the imports below still run (a good part of a second on a cold machine): the
    # CLI's own answer, CLI_INTERRUPTED and exit 130, never a traceback. run_cli takes SIGINT back.
    import os as _os
    import signal as _signal
    _INTERRUPTED = (b'{\n  "passed": false,\n  "error": {\n    "code": "CLI_INTERRUPTED",\n    "message": "The command '
                    b'was interrupted before it finished.",\n    "retryable": false\n  }\n}\n')
    _signal.signal(_signal.SIGINT, lambda _number, _frame: (_os.write(1, _INTERRUPTED), _os._exit(130)))

import base64
import contextlib
import hashlib
import os
import re
import sys
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final, Mapping, NamedTuple, Sequence

if not __package__:  # by path from a checkout: the core is at the repository root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import tool_dispatcher as td  # noqa: E402  (the chain this layer signs)

# ============================================================================================
# 1. Limits and constants
# ============================================================================================

CHECKPOINT_FORMAT: Final = "audit-checkpoint-v1"
CHECKPOINT_DOMAIN: Final = "tool-dispatcher/checkpoint/v1"
CHECKPOINTS_SUFFIX: Final = ".checkpoints"  # the file beside the log it signs
PRIVATE_KEY_NAME: Final = "signing-key.pem"
PUBLIC_KEY_NAME: Final = "public-key.pem"
MAX_CHAIN_LINES: Final = td.MAX_AUDIT_ENTRIES + 1  # the entries a log may hold, and its closing entry
MAX_CHECKPOINT_LINE_BYTES: Final = 512  # the longest checkpoint is 270 bytes
MAX_CHECKPOINTS_BYTES: Final = MAX_CHAIN_LINES * (MAX_CHECKPOINT_LINE_BYTES + 1)  # one a chain line at most
MAX_KEY_FILE_BYTES: Final = 4_096  # an Ed25519 PEM is about 120 bytes
DEFAULT_EVERY: Final = 1_000  # chain entries between checkpoints: a thousand signatures for the largest log
KEY_ID_HEX: Final = 16  # hex digits of the public key's SHA-256 that name it
# The DER of an Ed25519 SubjectPublicKeyInfo is this prefix and the 32 key bytes (RFC 8410).
ED25519_SPKI_PREFIX: Final = bytes.fromhex("302a300506032b6570032100")
ED25519_PUBLIC_KEY_BYTES: Final = 32
ED25519_SIGNATURE_BYTES: Final = 64
# The points of small order (the curve's cofactor is 8), as the 32 bytes of their y coordinate with
# x's sign bit cleared, the spellings y + p included: libsodium's list. Under such a "public key" a
# signature anyone can compute verifies (the identity: R the identity, S zero; cryptography and
# node:crypto both accept it), so it names no signer: refused as no key at all.
ED25519_SMALL_ORDER_Y: Final = frozenset(bytes.fromhex(y) for y in (
    "00" * 32,  # 0: order 4
    "01" + "00" * 31,  # 1: the identity
    "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05",  # order 8
    "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a",  # order 8
    "ec" + "ff" * 30 + "7f",  # p - 1: order 2
    "ed" + "ff" * 30 + "7f",  # p, that is 0: order 4
    "ee" + "ff" * 30 + "7f",  # p + 1, that is 1: the identity
))

_PUBLIC_PEM: Final = re.compile(rb"-----BEGIN PUBLIC KEY-----\n([A-Za-z0-9+/=\n]{1,200})-----END PUBLIC KEY-----\n?")
_BASE64: Final = re.compile(rb"(?:[A-Za-z0-9+/]{4})+(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?")
_SIGNATURE_TEXT: Final = re.compile(r"[A-Za-z0-9+/]{86}==")  # 64 bytes, standard alphabet, padded
_KEY_ID: Final = re.compile(r"[0-9a-f]{%d}" % KEY_ID_HEX)
_EVERY: Final = re.compile(r"[1-9][0-9]{0,6}")  # ASCII digits only: int() would take " 5", "+5", "٥"
_CHECKPOINT_FIELDS: Final = frozenset({"format", "entries", "head_sha256", "key_id", "signature_ed25519"})

# ============================================================================================
# 2. Errors
# ============================================================================================

SIGNATURE_ERRORS: Final[Mapping[str, td.ErrorSpec]] = MappingProxyType({
    **td.error_specs(
        "signature", False,
        CHECKPOINTS_UNREADABLE="The checkpoint file could not be read.",
        CHECKPOINTS_UNWRITABLE="The checkpoint file could not be written; an existing one is never replaced.",
        CHECKPOINT_MALFORMED="A checkpoint line is not a canonical checkpoint of this format.",
        CHECKPOINT_KEY_UNKNOWN="A checkpoint names a key other than the public key given.",
        CHECKPOINT_SIGNATURE_INVALID="A checkpoint signature does not verify under the public key.",
        CHECKPOINT_HEAD_MISMATCH="A checkpoint's head is not the chain's head after its entries.",
        CHECKPOINT_ORDER="Checkpoints are not in increasing order of entries.",
        CHECKPOINT_BEYOND_LOG="A checkpoint counts more entries than the log holds.",
        CHECKPOINT_MISSING_CLOSE="No checkpoint signs the closing head of the log.",
        PUBLIC_KEY_INVALID="The public key is not an Ed25519 SubjectPublicKeyInfo PEM.",
        PUBLIC_KEY_UNREADABLE="The public key could not be read.",
        SIGNING_KEY_INVALID="The signing key is not an unencrypted Ed25519 PKCS8 PEM.",
        SIGNING_KEY_UNREADABLE="The signing key could not be read.",
        KEY_FILES_UNWRITABLE="The key files could not be written; existing ones are never replaced.",
        SIGNATURES_UNAVAILABLE="The cryptography package is not installed; the signature layer needs it.",
    ),
})


class SignatureError(td.CatalogError):
    """This layer's error: a stable code from SIGNATURE_ERRORS and its fixed message."""

    CATALOG = SIGNATURE_ERRORS


# ============================================================================================
# 3. Keys
# ============================================================================================


class _Crypto(NamedTuple):
    ed25519: Any
    serialization: Any
    invalid_signature: type[Exception]
    unsupported: type[Exception]


def _crypto() -> _Crypto:
    """The parts of the cryptography package this layer uses, imported on first use only."""
    try:
        from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:
        raise SignatureError("SIGNATURES_UNAVAILABLE") from None
    return _Crypto(ed25519, serialization, InvalidSignature, UnsupportedAlgorithm)


class PublicKey(NamedTuple):
    key: Any  # cryptography's Ed25519PublicKey
    key_id: str


def key_id_of(raw: bytes) -> str:
    """A public key's name: the first 16 hex digits of SHA-256 of its 32 raw bytes."""
    return hashlib.sha256(raw).hexdigest()[:KEY_ID_HEX]


def parse_public_key(data: bytes) -> PublicKey:
    """Exactly one Ed25519 SubjectPublicKeyInfo PEM block: parsed here, byte for byte, so that
    every verifier accepts the same files (a private key, or text around the block, is refused)."""
    match = _PUBLIC_PEM.fullmatch(data)
    body = b"" if match is None else match.group(1).replace(b"\n", b"")
    if _BASE64.fullmatch(body) is None:
        raise SignatureError("PUBLIC_KEY_INVALID")
    der = base64.b64decode(body)
    raw = der[len(ED25519_SPKI_PREFIX):]
    if not (base64.b64encode(der) == body and der.startswith(ED25519_SPKI_PREFIX)
            and len(raw) == ED25519_PUBLIC_KEY_BYTES and not is_small_order(raw)):
        raise SignatureError("PUBLIC_KEY_INVALID")
    try:
        key = _crypto().ed25519.Ed25519PublicKey.from_public_bytes(raw)
    except ValueError:
        raise SignatureError("PUBLIC_KEY_INVALID") from None
    return PublicKey(key, key_id_of(raw))


def is_small_order(raw: bytes) -> bool:
    """Whether 32 raw key bytes spell a point of small order: a key every signature verifies under."""
    return raw[:-1] + bytes([raw[-1] & 0x7F]) in ED25519_SMALL_ORDER_Y


def load_public_key(path: str) -> PublicKey:
    return parse_public_key(_read(path, MAX_KEY_FILE_BYTES, "PUBLIC_KEY_UNREADABLE", "PUBLIC_KEY_INVALID"))


def parse_signing_key(data: bytes) -> Any:
    crypto = _crypto()
    try:
        key = crypto.serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError, crypto.unsupported):  # not a PEM key; encrypted; an unknown algorithm
        raise SignatureError("SIGNING_KEY_INVALID") from None
    if not isinstance(key, crypto.ed25519.Ed25519PrivateKey):
        raise SignatureError("SIGNING_KEY_INVALID")
    return key


def load_signing_key(path: str) -> Any:
    return parse_signing_key(_read(path, MAX_KEY_FILE_BYTES, "SIGNING_KEY_UNREADABLE", "SIGNING_KEY_INVALID"))


def public_raw(private_key: Any) -> bytes:
    serialization = _crypto().serialization
    return private_key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def generate_keys(out: str) -> str:
    """A new key pair in the folder ``out``: the private key PKCS8 PEM, unencrypted, readable by its
    owner only; the public key SubjectPublicKeyInfo PEM. Neither file may exist. Answers the key id."""
    crypto = _crypto()
    serialization = crypto.serialization
    private_key = crypto.ed25519.Ed25519PrivateKey.generate()
    private_pem = private_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                            serialization.NoEncryption())
    public_pem = private_key.public_key().public_bytes(serialization.Encoding.PEM,
                                                       serialization.PublicFormat.SubjectPublicKeyInfo)
    private_path = os.path.join(out, PRIVATE_KEY_NAME)
    try:
        os.makedirs(out, mode=0o700, exist_ok=True)
        _write_new(private_path, private_pem, 0o600)
    except OSError:
        raise SignatureError("KEY_FILES_UNWRITABLE") from None
    try:
        _write_new(os.path.join(out, PUBLIC_KEY_NAME), public_pem, 0o644)
    except OSError:
        # Never half a pair: a private key whose public key was not written (the public key's file
        # was there already) would be left for the next keygen to refuse, and nobody to check it.
        with contextlib.suppress(OSError):
            os.remove(private_path)  # ours: _write_new created it, O_EXCL
        raise SignatureError("KEY_FILES_UNWRITABLE") from None
    return key_id_of(public_raw(private_key))


def _write_new(path: str, data: bytes, mode: int) -> None:
    """A new file (O_EXCL: never an existing one, nor through a link); removed again if the write fails."""
    handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), mode)
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
    except OSError:
        os.remove(path)  # a cut-short key or checkpoint file would be refused later as malformed
        raise


def _read(path: str, max_bytes: int, unreadable: str, too_large: str) -> bytes:
    try:
        data = td.read_bounded(path, max_bytes=max_bytes)
    except td.BoundaryError:
        raise SignatureError(unreadable) from None
    if len(data) > max_bytes:
        raise SignatureError(too_large)
    return data


# ============================================================================================
# 4. Checkpoints
# ============================================================================================


def signed_message(entries: int, head_sha256: str, key_id: str) -> bytes:
    """What a checkpoint's signature is over: canonical JSON of its domain and its three claims."""
    return td.canonical_json({"domain": CHECKPOINT_DOMAIN, "entries": entries, "head_sha256": head_sha256,
                              "key_id": key_id})


def checkpoint_line(private_key: Any, key_id: str, entries: int, head_sha256: str) -> bytes:
    signature = private_key.sign(signed_message(entries, head_sha256, key_id))
    return td.canonical_json({"format": CHECKPOINT_FORMAT, "entries": entries, "head_sha256": head_sha256,
                              "key_id": key_id, "signature_ed25519": base64.b64encode(signature).decode("ascii")})


def checkpoint_counts(total: int, every: int) -> list[int]:
    """After every ``every`` chain lines, and after the last one (the closing entry)."""
    return list(range(every, total, every)) + [total]


def chain_heads(data: bytes) -> list[str]:
    """The chain's head after each of its lines, for a log the core has verified: each line's own
    entry_sha256, which the verification recomputed and found equal."""
    return [td.decode_strict_json(line, max_bytes=td.MAX_AUDIT_LINE_BYTES)["entry_sha256"]
            for line in data.split(b"\n")[:-1]]


def sign_log(data: bytes, private_key: Any, *, every: int = DEFAULT_EVERY) -> tuple[td.AuditReport, list[bytes]]:
    """The core's report on a log and the checkpoint lines for it; the core's BoundaryError when it
    refuses the log, which is then not signed."""
    report = td.verify_audit_log(data)
    heads = chain_heads(data)
    key_id = key_id_of(public_raw(private_key))
    return report, [checkpoint_line(private_key, key_id, count, heads[count - 1])
                    for count in checkpoint_counts(len(heads), every)]


# ============================================================================================
# 5. Verification
# ============================================================================================
# Every line is read before any is judged, as the core reads a log; then each checkpoint in order:
# its key, its signature, its place after the one before, within the log, and its head.


def _checkpoint(line: bytes, position: int) -> dict[str, Any]:
    at = f"checkpoints[{position}]"
    try:
        checkpoint = td.decode_strict_json(line, max_bytes=MAX_CHECKPOINT_LINE_BYTES)
    except td.BoundaryError:
        raise SignatureError("CHECKPOINT_MALFORMED", at=at) from None
    if not (type(checkpoint) is dict and checkpoint.keys() == _CHECKPOINT_FIELDS
            and checkpoint["format"] == CHECKPOINT_FORMAT
            and type(checkpoint["entries"]) is int and 1 <= checkpoint["entries"] <= MAX_CHAIN_LINES
            and type(checkpoint["head_sha256"]) is str and td.DIGEST_PATTERN.fullmatch(checkpoint["head_sha256"])
            and type(checkpoint["key_id"]) is str and _KEY_ID.fullmatch(checkpoint["key_id"])
            and _is_signature_text(checkpoint["signature_ed25519"])
            and td.canonical_json(checkpoint) == line):
        raise SignatureError("CHECKPOINT_MALFORMED", at=at)
    return checkpoint


def _is_signature_text(text: Any) -> bool:
    # One spelling per signature: the standard base64 of 64 bytes, its unused bits zero.
    return (type(text) is str and _SIGNATURE_TEXT.fullmatch(text) is not None
            and base64.b64encode(base64.b64decode(text)).decode("ascii") == text)


def verify_checkpoints(data: bytes, heads: Sequence[str], public_key: PublicKey) -> int:
    """Check every checkpoint against the chain's heads; the count, or SignatureError at its first
    bad line. The last checkpoint must sign the head after the last line (the closing entry)."""
    invalid_signature = _crypto().invalid_signature
    lines = data.split(b"\n")
    if lines[-1] != b"":
        raise SignatureError("CHECKPOINT_MALFORMED", at=f"checkpoints[{len(lines) - 1}]")  # cut short
    lines.pop()
    checkpoints = [_checkpoint(line, position) for position, line in enumerate(lines)]
    last = 0
    for position, checkpoint in enumerate(checkpoints):
        at = f"checkpoints[{position}]"
        if checkpoint["key_id"] != public_key.key_id:
            raise SignatureError("CHECKPOINT_KEY_UNKNOWN", at=at)
        try:
            public_key.key.verify(base64.b64decode(checkpoint["signature_ed25519"]),
                                  signed_message(checkpoint["entries"], checkpoint["head_sha256"], checkpoint["key_id"]))
        except invalid_signature:
            raise SignatureError("CHECKPOINT_SIGNATURE_INVALID", at=at) from None
        if checkpoint["entries"] <= last:
            raise SignatureError("CHECKPOINT_ORDER", at=at)
        if checkpoint["entries"] > len(heads):
            raise SignatureError("CHECKPOINT_BEYOND_LOG", at=at)
        if checkpoint["head_sha256"] != heads[checkpoint["entries"] - 1]:
            raise SignatureError("CHECKPOINT_HEAD_MISMATCH", at=at)
        last = checkpoint["entries"]
    if last != len(heads):
        raise SignatureError("CHECKPOINT_MISSING_CLOSE", at=f"checkpoints[{len(checkpoints)}]")
    return len(checkpoints)


def verify_signed_log(data: bytes, checkpoints: bytes, public_key: PublicKey) -> tuple[td.AuditReport, int]:
    """The core's verification of the log (no seal key: a third party holds none), then every
    checkpoint. Raises the core's BoundaryError or this layer's SignatureError."""
    report = td.verify_audit_log(data)
    return report, verify_checkpoints(checkpoints, chain_heads(data), public_key)


# ============================================================================================
# 6. CLI
# ============================================================================================


def _every(text: str) -> int:
    if _EVERY.fullmatch(text) is None or int(text) > MAX_CHAIN_LINES:
        raise td.BoundaryError("CLI_USAGE")
    return int(text)


def _arguments(argv: Sequence[str]) -> Any:
    command = argv[0] if argv else ""
    if command == "keygen":
        parser = td.CliParser(prog="audit_signatures.py keygen", description="Write a new Ed25519 key pair.")
        parser.add_argument("--out", required=True, metavar="DIR")
    elif command == "sign":
        parser = td.CliParser(prog="audit_signatures.py sign", description="Sign an audit log's chain.")
        parser.add_argument("log", metavar="LOG")
        parser.add_argument("--sign-key", required=True, metavar="KEY.pem")
        parser.add_argument("--every", type=_every, default=DEFAULT_EVERY, metavar="N")
    else:
        parser = td.CliParser(prog="audit_signatures.py", description="Verify an audit log and its checkpoints.",
                              usage="%(prog)s --verify-audit LOG --public-key PUB.pem\n"
                                    "       %(prog)s keygen --out DIR\n"
                                    "       %(prog)s sign LOG --sign-key KEY.pem [--every N]",
                              epilog="keygen --help and sign --help describe the other two commands.")
        parser.add_argument("--verify-audit", required=True, metavar="LOG")
        parser.add_argument("--public-key", required=True, metavar="PUB.pem")
        return parser.parse_args(argv)
    arguments = parser.parse_args(argv[1:])
    arguments.command = command
    return arguments


def _refused(error: td.CatalogError) -> int:
    # The first bad line, by its position in its file: the core's CLI shape, exit 1.
    index = int(error.at[error.at.index("[") + 1:-1])
    td.emit_json({"passed": False, "failure": {"index": index, **error.to_json()}})
    return 1


def _keygen_command(out: str) -> int:
    key_id = generate_keys(out)
    td.emit_json({"passed": True, "key_id": key_id, "private_key": PRIVATE_KEY_NAME, "public_key": PUBLIC_KEY_NAME})
    return 0


def _sign_command(log: str, key_path: str, every: int) -> int:
    private_key = load_signing_key(key_path)
    data = td.read_audit_log(log)
    try:
        report, lines = sign_log(data, private_key, every=every)
    except td.BoundaryError as error:
        return _refused(error)
    try:
        _write_new(log + CHECKPOINTS_SUFFIX, b"".join(line + b"\n" for line in lines), 0o644)
    except OSError:
        raise SignatureError("CHECKPOINTS_UNWRITABLE") from None
    td.emit_json({"passed": True, "entries": report.entries, "head_sha256": report.head_sha256,
                  "checkpoints": len(lines), "key_id": key_id_of(public_raw(private_key))})
    return 0


def _verify_command(log: str, key_path: str) -> int:
    public_key = load_public_key(key_path)
    data = td.read_audit_log(log)
    try:
        report = td.verify_audit_log(data)
    except td.BoundaryError as error:
        return _refused(error)
    checkpoints = _read(log + CHECKPOINTS_SUFFIX, MAX_CHECKPOINTS_BYTES, "CHECKPOINTS_UNREADABLE", "CHECKPOINTS_UNREADABLE")
    try:
        count = verify_checkpoints(checkpoints, chain_heads(data), public_key)
    except SignatureError as error:
        return _refused(error)
    td.emit_json({"passed": True, "entries": report.entries, "head_sha256": report.head_sha256,
                  "checkpoints": count, "key_id": public_key.key_id})
    return 0


def _run(argv: Sequence[str]) -> int:
    arguments = _arguments(argv)
    command = getattr(arguments, "command", "verify")
    if command == "keygen":
        return _keygen_command(arguments.out)
    if command == "sign":
        return _sign_command(arguments.log, arguments.sign_key, arguments.every)
    return _verify_command(arguments.verify_audit, arguments.public_key)


def main(argv: Sequence[str] | None = None) -> int:
    return td.run_cli(lambda: _run(sys.argv[1:] if argv is None else list(argv)))


if __name__ == "__main__":
    sys.exit(main())
