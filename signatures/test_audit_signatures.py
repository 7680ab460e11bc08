"""Signed checkpoints: every check of signatures/audit_signatures.py, on both sides.

Needs the ``cryptography`` package: ``bash signatures/ci.sh`` installs it into a virtual environment
outside the checkout and runs this file. Without it the suite is skipped with one SKIP line; under
CI=true it fails instead, never skips.
"""
from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import subprocess
import sys
import tempfile
import unittest
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any
from unittest import mock

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import audit_signatures as sig  # noqa: E402
import tool_dispatcher as td  # noqa: E402

try:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, x25519
except ImportError:
    serialization = None  # type: ignore[assignment]

FIXTURE = HERE.parent / "tool-cases.json"
EVERY = 8  # the fixture's 31 chain lines: checkpoints after 8, 16, 24 and 31


def setUpModule() -> None:
    if serialization is not None:
        return
    if os.environ.get("CI") == "true":
        raise RuntimeError("the signature suite must run under CI: cryptography is not installed")
    sys.stdout.write("SKIP signature suite: cryptography is not installed (run bash signatures/ci.sh)\n")
    raise unittest.SkipTest("cryptography is not installed")


def fixture_log(seal_keys: Any = None) -> bytes:
    """The fixture's packages, as the core's CLI writes them into a log."""
    _summary, reports = td.run_fixture(td.load_fixture(FIXTURE), seal_keys=seal_keys)
    stream = io.BytesIO()
    log = td.AuditLog(stream, seal_keys=seal_keys)
    for report in reports:
        log.append(report.package)
    log.close()
    return stream.getvalue()


def new_key() -> Any:
    return ed25519.Ed25519PrivateKey.generate()


def public_pem(private_key: Any) -> bytes:
    return private_key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def private_pem(private_key: Any, encryption: Any = None) -> bytes:
    return private_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                     encryption or serialization.NoEncryption())


def lines_of(data: bytes) -> list[bytes]:
    return data.split(b"\n")[:-1]


def joined(lines: list[bytes]) -> bytes:
    return b"".join(line + b"\n" for line in lines)


def resigned(private_key: Any, line: bytes, **changes: Any) -> bytes:
    """A checkpoint line with some claims changed and signed again by ``private_key``."""
    claims = {**json.loads(line), **changes}
    return sig.checkpoint_line(private_key, claims["key_id"], claims["entries"], claims["head_sha256"])


ED_P = 2 ** 255 - 19
ED_D = -121665 * pow(121666, ED_P - 2, ED_P) % ED_P


def spki_pem(raw: bytes) -> bytes:
    return (b"-----BEGIN PUBLIC KEY-----\n" + base64.b64encode(sig.ED25519_SPKI_PREFIX + raw)
            + b"\n-----END PUBLIC KEY-----\n")


def edwards_add(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
    """RFC 8032's addition on edwards25519, affine, for the test's own check of the small-order list."""
    t = ED_D * a[0] * b[0] * a[1] * b[1] % ED_P
    x = (a[0] * b[1] + b[0] * a[1]) * pow(1 + t, ED_P - 2, ED_P) % ED_P
    y = (a[1] * b[1] + a[0] * b[0]) * pow(1 - t, ED_P - 2, ED_P) % ED_P
    return x, y


def edwards_x(y: int) -> int | None:
    return edwards_sqrt((y * y - 1) * pow(ED_D * y * y + 1, ED_P - 2, ED_P) % ED_P)


def small_order(encoded: bytes) -> bool:
    y = int.from_bytes(encoded, "little") & ((1 << 255) - 1)
    x = edwards_x(y % ED_P)
    if x is None:
        return False
    point = (x, y % ED_P)
    for _ in range(3):
        point = edwards_add(point, point)
    return point == (0, 1)


def edwards_sqrt(a: int) -> int | None:
    root = pow(a, (ED_P + 3) // 8, ED_P)
    if (root * root - a) % ED_P:
        root = root * pow(2, (ED_P - 1) // 4, ED_P) % ED_P
    return root if (root * root - a) % ED_P == 0 else None


def order_8_ys() -> set[int]:
    # Derived, not read from the list under test: 2P has y = 0 (order 4), so x^2 = -y^2, and the
    # curve's equation gives d*y^4 + 2*y^2 - 1 = 0, that is y^2 = (-1 +- sqrt(1 + d)) / d.
    root = edwards_sqrt((1 + ED_D) % ED_P)
    ys: set[int] = set()
    for square in ((-1 + root) * pow(ED_D, ED_P - 2, ED_P) % ED_P, (-1 - root) * pow(ED_D, ED_P - 2, ED_P) % ED_P):
        y = edwards_sqrt(square)
        if y is not None:
            ys |= {y, ED_P - y}
    return ys


class SignatureCase(unittest.TestCase):
    log: bytes
    key: Any
    public: sig.PublicKey
    checkpoints: list[bytes]

    @classmethod
    def setUpClass(cls) -> None:
        cls.log = fixture_log()
        cls.key = new_key()
        cls.public = sig.parse_public_key(public_pem(cls.key))
        _report, cls.checkpoints = sig.sign_log(cls.log, cls.key, every=EVERY)

    def heads(self) -> list[str]:
        return sig.chain_heads(self.log)

    def refusal(self, lines: list[bytes], *, raw: bytes | None = None, public: sig.PublicKey | None = None) -> tuple[str, str]:
        with self.assertRaises(sig.SignatureError) as caught:
            sig.verify_checkpoints(joined(lines) if raw is None else raw, self.heads(), public or self.public)
        return caught.exception.code, caught.exception.at

    def passes(self, lines: list[bytes]) -> None:
        self.assertEqual(sig.verify_checkpoints(joined(lines), self.heads(), self.public), len(lines))


class TestKeys(SignatureCase):
    def test_keygen_writes_a_pair_whose_id_names_the_public_key(self) -> None:
        with tempfile.TemporaryDirectory() as folder:
            key_id = sig.generate_keys(folder)
            public = sig.load_public_key(os.path.join(folder, sig.PUBLIC_KEY_NAME))
            private = sig.load_signing_key(os.path.join(folder, sig.PRIVATE_KEY_NAME))
            raw = public.key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
            self.assertEqual(key_id, hashlib.sha256(raw).hexdigest()[:16])
            self.assertEqual(public.key_id, key_id)
            self.assertEqual(sig.key_id_of(sig.public_raw(private)), key_id)
            self.assertEqual(os.stat(os.path.join(folder, sig.PRIVATE_KEY_NAME)).st_mode & 0o777, 0o600)

    def test_keygen_never_replaces_a_key_file(self) -> None:
        with tempfile.TemporaryDirectory() as folder:
            sig.generate_keys(folder)
            with open(os.path.join(folder, sig.PRIVATE_KEY_NAME), "rb") as stream:
                before = stream.read()
            with self.assertRaises(sig.SignatureError) as caught:
                sig.generate_keys(folder)
            self.assertEqual(caught.exception.code, "KEY_FILES_UNWRITABLE")
            with open(os.path.join(folder, sig.PRIVATE_KEY_NAME), "rb") as stream:
                self.assertEqual(stream.read(), before)

    def test_keygen_leaves_no_half_pair_when_the_public_key_file_exists(self) -> None:
        with tempfile.TemporaryDirectory() as folder:
            with open(os.path.join(folder, sig.PUBLIC_KEY_NAME), "wb") as stream:
                stream.write(b"theirs\n")
            with self.assertRaises(sig.SignatureError) as caught:
                sig.generate_keys(folder)
            self.assertEqual(caught.exception.code, "KEY_FILES_UNWRITABLE")
            self.assertEqual(sorted(os.listdir(folder)), [sig.PUBLIC_KEY_NAME])  # no private key left behind
            with open(os.path.join(folder, sig.PUBLIC_KEY_NAME), "rb") as stream:
                self.assertEqual(stream.read(), b"theirs\n")

    def test_a_file_whose_write_fails_is_removed(self) -> None:
        class Full(io.BytesIO):
            def write(self, _data: Any) -> int:
                raise OSError(28, "No space left on device")

        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "new")
            with mock.patch.object(sig.os, "fdopen", lambda handle, _mode: (os.close(handle), Full())[1]), \
                    self.assertRaises(OSError):
                sig._write_new(path, b"data", 0o600)
            self.assertEqual(os.listdir(folder), [])

    def test_a_public_key_of_small_order_is_refused(self) -> None:
        # Every point of order 1, 2, 4 or 8, each spelling: a key under which anyone can sign.
        for y in sorted(sig.ED25519_SMALL_ORDER_Y):
            self.assertTrue(small_order(y), y.hex())
            for sign in (0, 0x80):
                raw = y[:-1] + bytes([y[-1] | sign])
                with self.subTest(raw=raw.hex()), self.assertRaises(sig.SignatureError) as caught:
                    sig.parse_public_key(spki_pem(raw))
                self.assertEqual(caught.exception.code, "PUBLIC_KEY_INVALID")
        # Each y of the eight points (1, -1, 0 and two of order 8), and each that has a second spelling
        # below 2^255 (y + p, for y < 19): 0 and 1.
        self.assertEqual(len(order_8_ys()), 2)
        self.assertEqual({int.from_bytes(y, "little") for y in sig.ED25519_SMALL_ORDER_Y},
                         {0, 1, ED_P - 1, ED_P, ED_P + 1, *order_8_ys()})
        self.assertFalse(sig.is_small_order(sig.public_raw(self.key)))

    def test_a_checkpoint_anyone_can_make_under_the_identity_key_fails(self) -> None:
        # R the identity, S zero: it verifies under the identity point as a key, whatever it claims.
        identity = bytes([1]) + bytes(31)
        with tempfile.TemporaryDirectory() as folder:
            log = os.path.join(folder, "audit.log")
            with open(log, "wb") as stream:
                stream.write(self.log)
            heads = self.heads()
            forged = td.canonical_json({"entries": len(heads), "format": sig.CHECKPOINT_FORMAT, "head_sha256": heads[-1],
                                        "key_id": sig.key_id_of(identity),
                                        "signature_ed25519": base64.b64encode(identity + bytes(32)).decode("ascii")})
            with open(log + sig.CHECKPOINTS_SUFFIX, "wb") as stream:
                stream.write(forged + b"\n")
            with open(os.path.join(folder, "identity.pem"), "wb") as stream:
                stream.write(spki_pem(identity))
            out = io.StringIO()
            with redirect_stdout(out):
                status = sig.main(["--verify-audit", log, "--public-key", os.path.join(folder, "identity.pem")])
            self.assertEqual((status, json.loads(out.getvalue())["error"]["code"]), (2, "PUBLIC_KEY_INVALID"))

    def test_a_public_key_is_exactly_one_ed25519_spki_block(self) -> None:
        pem = public_pem(self.key)
        self.assertEqual(sig.parse_public_key(pem).key_id, self.public.key_id)
        self.assertEqual(sig.parse_public_key(pem.rstrip(b"\n")).key_id, self.public.key_id)
        x25519_pem = x25519.X25519PrivateKey.generate().public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        body = pem.split(b"\n")[1]
        refused = {
            "a private key": private_pem(self.key),
            "text before the block": b"key:\n" + pem,
            "two blocks": pem + pem,
            "another algorithm": x25519_pem,
            "a body that is not canonical base64": pem.replace(body, body[:-2] + b"F="),
            "a body cut short": pem.replace(body, body[:-4]),
            "a body whose length is no multiple of four": pem.replace(body, body[:-1]),  # padding: never decoded
            "a CRLF": pem.replace(b"\n", b"\r\n"),
            "empty": b"",
        }
        for name, data in refused.items():
            with self.subTest(name), self.assertRaises(sig.SignatureError) as caught:
                sig.parse_public_key(data)
            self.assertEqual(caught.exception.code, "PUBLIC_KEY_INVALID")
        # 32 bytes that spell no point: this cryptography takes them (every signature then fails),
        # one that checks the point refuses them with ValueError, answered as the same code.
        with mock.patch.object(ed25519.Ed25519PublicKey, "from_public_bytes", side_effect=ValueError), \
                self.assertRaises(sig.SignatureError) as caught:
            sig.parse_public_key(pem)
        self.assertEqual(caught.exception.code, "PUBLIC_KEY_INVALID")

    def test_a_key_file_is_read_up_to_its_limit_and_no_further(self) -> None:
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "key.pem")
            for size, expected in ((sig.MAX_KEY_FILE_BYTES, None), (sig.MAX_KEY_FILE_BYTES + 1, "PUBLIC_KEY_INVALID")):
                with open(path, "wb") as stream:
                    stream.write(public_pem(self.key).ljust(size, b"\n"))
                with self.subTest(size=size), self.assertRaises(sig.SignatureError) as caught:
                    sig.load_public_key(path)
                self.assertEqual(caught.exception.code, "PUBLIC_KEY_INVALID")  # trailing lines: not one block
                if expected is None:
                    self.assertEqual(len(sig._read(path, sig.MAX_KEY_FILE_BYTES, "PUBLIC_KEY_UNREADABLE", "PUBLIC_KEY_INVALID")), size)
            with self.assertRaises(sig.SignatureError) as caught:
                sig.load_public_key(os.path.join(folder, "absent.pem"))
            self.assertEqual(caught.exception.code, "PUBLIC_KEY_UNREADABLE")

    def test_a_signing_key_is_an_unencrypted_ed25519_pkcs8_pem(self) -> None:
        self.assertEqual(sig.key_id_of(sig.public_raw(sig.parse_signing_key(private_pem(self.key)))), self.public.key_id)
        refused = {
            "a public key": public_pem(self.key),
            "an encrypted key": private_pem(self.key, serialization.BestAvailableEncryption(b"secret")),
            "another algorithm": ec.generate_private_key(ec.SECP256R1()).private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
            "not a key": b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
        }
        for name, data in refused.items():
            with self.subTest(name), self.assertRaises(sig.SignatureError) as caught:
                sig.parse_signing_key(data)
            self.assertEqual(caught.exception.code, "SIGNING_KEY_INVALID")
        with self.assertRaises(sig.SignatureError) as caught:
            sig.load_signing_key("/nonexistent/signing-key.pem")
        self.assertEqual(caught.exception.code, "SIGNING_KEY_UNREADABLE")


class TestCheckpoints(SignatureCase):
    def test_checkpoints_fall_after_every_n_lines_and_at_the_closing_head(self) -> None:
        self.assertEqual(sig.checkpoint_counts(31, 8), [8, 16, 24, 31])
        self.assertEqual(sig.checkpoint_counts(32, 8), [8, 16, 24, 32])
        self.assertEqual(sig.checkpoint_counts(31, 31), [31])
        self.assertEqual(sig.checkpoint_counts(31, 32), [31])
        self.assertEqual(sig.checkpoint_counts(3, 1), [1, 2, 3])

    def test_a_checkpoint_is_canonical_and_signed_over_its_domain_and_claims(self) -> None:
        heads = self.heads()
        self.assertEqual([json.loads(line)["entries"] for line in self.checkpoints], [8, 16, 24, 31])
        for line in self.checkpoints:
            claims = json.loads(line)
            self.assertEqual(td.canonical_json(claims), line)
            self.assertEqual(claims["head_sha256"], heads[claims["entries"] - 1])
            message = td.canonical_json({"domain": "tool-dispatcher/checkpoint/v1", "entries": claims["entries"],
                                         "head_sha256": claims["head_sha256"], "key_id": claims["key_id"]})
            self.key.public_key().verify(base64.b64decode(claims["signature_ed25519"]), message)

    def test_the_last_checkpoint_signs_the_head_the_core_reports(self) -> None:
        report, lines = sig.sign_log(self.log, self.key, every=1000)
        self.assertEqual(len(lines), 1)
        self.assertEqual(json.loads(lines[0])["head_sha256"], report.head_sha256)

    def test_a_log_the_core_refuses_is_not_signed(self) -> None:
        lines = lines_of(self.log)
        with self.assertRaises(td.BoundaryError) as caught:
            sig.sign_log(joined(lines[:3] + lines[4:]), self.key)
        self.assertEqual((caught.exception.code, caught.exception.at), ("AUDIT_ENTRY_DELETED", "entries[3]"))


class TestVerification(SignatureCase):
    def test_the_signed_checkpoints_pass(self) -> None:
        self.passes(self.checkpoints)
        report, count = sig.verify_signed_log(self.log, joined(self.checkpoints), self.public)
        self.assertEqual((report.entries, count), (30, 4))

    def test_a_line_must_be_a_canonical_checkpoint(self) -> None:
        good = self.checkpoints[1]
        claims = json.loads(good)
        signature = claims["signature_ed25519"]
        malformed = {
            "a space": good.replace(b',"format"', b', "format"'),
            "an extra member": td.canonical_json({**claims, "extra": 1}),
            "a missing member": td.canonical_json({k: v for k, v in claims.items() if k != "key_id"}),
            "another format": td.canonical_json({**claims, "format": "audit-checkpoint-v2"}),
            "entries as a float": good.replace(b'"entries":16', b'"entries":16.0'),
            "entries zero": td.canonical_json({**claims, "entries": 0}),
            "entries beyond any log": td.canonical_json({**claims, "entries": sig.MAX_CHAIN_LINES + 1}),
            "a head that is no digest": td.canonical_json({**claims, "head_sha256": claims["head_sha256"].upper()}),
            "a key id of another length": td.canonical_json({**claims, "key_id": claims["key_id"] + "0"}),
            "a signature in another spelling": td.canonical_json(
                {**claims, "signature_ed25519": signature[:85] + chr(ord(signature[85]) ^ 1) + "=="}),
            "a signature cut short": td.canonical_json({**claims, "signature_ed25519": signature[:84] + "=="}),
            "not JSON": b"{",
            "too long": good[:-1] + b',"pad":"' + b"x" * sig.MAX_CHECKPOINT_LINE_BYTES + b'"}',
        }
        for name, line in malformed.items():
            with self.subTest(name):
                self.assertEqual(self.refusal([self.checkpoints[0], line] + self.checkpoints[2:]),
                                 ("CHECKPOINT_MALFORMED", "checkpoints[1]"))

    def test_entries_pass_at_both_ends_of_their_range(self) -> None:
        # 1 is a checkpoint of the first line; MAX_CHAIN_LINES is well formed, and beyond this log.
        first = resigned(self.key, self.checkpoints[0], entries=1, head_sha256=self.heads()[0])
        self.passes([first] + self.checkpoints)
        last = resigned(self.key, self.checkpoints[-1], entries=sig.MAX_CHAIN_LINES)
        self.assertEqual(self.refusal(self.checkpoints + [last]), ("CHECKPOINT_BEYOND_LOG", "checkpoints[4]"))

    def test_a_file_cut_short_is_malformed_at_its_last_line(self) -> None:
        raw = joined(self.checkpoints)[:-1]
        self.assertEqual(self.refusal([], raw=raw), ("CHECKPOINT_MALFORMED", "checkpoints[3]"))

    def test_a_checkpoint_of_another_key_is_named(self) -> None:
        other = new_key()
        _report, lines = sig.sign_log(self.log, other, every=EVERY)
        self.assertEqual(self.refusal(self.checkpoints[:2] + lines[2:]), ("CHECKPOINT_KEY_UNKNOWN", "checkpoints[2]"))
        # and under their own public key they pass
        self.assertEqual(sig.verify_checkpoints(joined(lines), self.heads(), sig.parse_public_key(public_pem(other))), 4)

    def test_a_changed_claim_breaks_the_signature(self) -> None:
        claims = json.loads(self.checkpoints[2])
        changed = td.canonical_json({**claims, "head_sha256": self.heads()[0]})
        self.assertEqual(self.refusal(self.checkpoints[:2] + [changed, self.checkpoints[3]]),
                         ("CHECKPOINT_SIGNATURE_INVALID", "checkpoints[2]"))
        moved = td.canonical_json({**claims, "entries": 23})
        self.assertEqual(self.refusal(self.checkpoints[:2] + [moved, self.checkpoints[3]]),
                         ("CHECKPOINT_SIGNATURE_INVALID", "checkpoints[2]"))

    def test_checkpoints_must_come_in_increasing_order(self) -> None:
        swapped = [self.checkpoints[1], self.checkpoints[0]] + self.checkpoints[2:]
        self.assertEqual(self.refusal(swapped), ("CHECKPOINT_ORDER", "checkpoints[1]"))
        repeated = self.checkpoints[:2] + [self.checkpoints[1]] + self.checkpoints[2:]
        self.assertEqual(self.refusal(repeated), ("CHECKPOINT_ORDER", "checkpoints[2]"))
        self.passes(self.checkpoints[1:])  # one left out is no fault: only the closing one is required

    def test_a_checkpoint_beyond_the_log_is_named(self) -> None:
        beyond = resigned(self.key, self.checkpoints[-1], entries=32)
        self.assertEqual(self.refusal(self.checkpoints + [beyond]), ("CHECKPOINT_BEYOND_LOG", "checkpoints[4]"))

    def test_a_signed_head_that_is_not_the_chains_is_named(self) -> None:
        wrong = resigned(self.key, self.checkpoints[1], head_sha256=self.heads()[14])
        self.assertEqual(self.refusal([self.checkpoints[0], wrong] + self.checkpoints[2:]),
                         ("CHECKPOINT_HEAD_MISMATCH", "checkpoints[1]"))

    def test_the_closing_head_must_be_signed(self) -> None:
        self.assertEqual(self.refusal(self.checkpoints[:3]), ("CHECKPOINT_MISSING_CLOSE", "checkpoints[3]"))
        self.assertEqual(self.refusal([]), ("CHECKPOINT_MISSING_CLOSE", "checkpoints[0]"))

    def test_checkpoints_of_a_longer_log_do_not_sign_a_shorter_one(self) -> None:
        # The log cut after 20 packages and closed again: the checkpoints name heads it does not hold.
        lines = lines_of(self.log)
        stream = io.BytesIO()
        log = td.AuditLog(stream)
        for line in lines[:20]:
            log.append(td.decode_strict_json(line, max_bytes=td.MAX_AUDIT_LINE_BYTES)["package"])
        log.close()
        shorter = stream.getvalue()
        with self.assertRaises(sig.SignatureError) as caught:
            sig.verify_signed_log(shorter, joined(self.checkpoints), self.public)
        self.assertEqual((caught.exception.code, caught.exception.at), ("CHECKPOINT_BEYOND_LOG", "checkpoints[2]"))

    def test_a_log_the_core_refuses_fails_before_any_checkpoint(self) -> None:
        lines = lines_of(self.log)
        edited = joined([lines[0].replace(b"ORDER-7", b"ORDER-8", 1)] + lines[1:])
        with self.assertRaises(td.BoundaryError) as caught:
            sig.verify_signed_log(edited, joined(self.checkpoints), self.public)
        self.assertEqual((caught.exception.code, caught.exception.at), ("AUDIT_ENTRY_EDITED", "entries[0]"))


class TestCli(SignatureCase):
    def run_cli(self, *argv: str) -> tuple[int, dict[str, Any]]:
        out = io.StringIO()
        with redirect_stdout(out):
            status = sig.main(list(argv))
        return status, json.loads(out.getvalue())

    def signed_copy(self, folder: str) -> tuple[str, str]:
        log = os.path.join(folder, "audit.log")
        with open(log, "wb") as stream:
            stream.write(self.log)
        status, made = self.run_cli("keygen", "--out", folder)
        self.assertEqual((status, made), (0, {"passed": True, "key_id": made["key_id"], "private_key": sig.PRIVATE_KEY_NAME,
                                              "public_key": sig.PUBLIC_KEY_NAME}))
        status, view = self.run_cli("sign", log, "--sign-key", os.path.join(folder, sig.PRIVATE_KEY_NAME), "--every", "8")
        report = td.verify_audit_log(self.log)
        self.assertEqual((status, view), (0, {"passed": True, "entries": 30, "head_sha256": report.head_sha256,
                                              "checkpoints": 4, "key_id": made["key_id"]}))
        return log, os.path.join(folder, sig.PUBLIC_KEY_NAME)

    def test_keygen_sign_and_verify(self) -> None:
        with tempfile.TemporaryDirectory() as folder:
            log, public = self.signed_copy(folder)
            status, view = self.run_cli("--verify-audit", log, "--public-key", public)
            self.assertEqual(status, 0)
            self.assertEqual(list(view), ["passed", "entries", "head_sha256", "checkpoints", "key_id"])
            self.assertEqual((view["passed"], view["checkpoints"]), (True, 4))

    def test_refusals_name_the_first_bad_line_and_exit_1(self) -> None:
        with tempfile.TemporaryDirectory() as folder:
            log, public = self.signed_copy(folder)
            with open(log + sig.CHECKPOINTS_SUFFIX, "rb") as stream:
                lines = lines_of(stream.read())
            with open(log + sig.CHECKPOINTS_SUFFIX, "wb") as stream:
                stream.write(joined(lines[:-1]))
            status, view = self.run_cli("--verify-audit", log, "--public-key", public)
            self.assertEqual((status, view), (1, {"passed": False, "failure": {
                "index": 3, **sig.SignatureError("CHECKPOINT_MISSING_CLOSE", at="checkpoints[3]").to_json()}}))
            with open(log, "wb") as stream:
                stream.write(self.log[:-1])
            status, view = self.run_cli("--verify-audit", log, "--public-key", public)
            self.assertEqual((status, view["failure"]["code"], view["failure"]["at"]), (1, "AUDIT_TRUNCATED", "entries[30]"))

    def test_a_log_the_core_refuses_is_not_signed_and_exits_1(self) -> None:
        with tempfile.TemporaryDirectory() as folder:
            log = os.path.join(folder, "audit.log")
            with open(log, "wb") as stream:
                stream.write(self.log[:-1])
            self.assertEqual(self.run_cli("keygen", "--out", folder)[0], 0)
            status, view = self.run_cli("sign", log, "--sign-key", os.path.join(folder, sig.PRIVATE_KEY_NAME))
            self.assertEqual((status, view["passed"], view["failure"]["code"]), (1, False, "AUDIT_TRUNCATED"))
            self.assertFalse(os.path.exists(log + sig.CHECKPOINTS_SUFFIX))

    def test_a_checkpoint_file_is_read_up_to_its_limit_and_no_further(self) -> None:
        with tempfile.TemporaryDirectory() as folder:
            log, public = self.signed_copy(folder)
            size = os.path.getsize(log + sig.CHECKPOINTS_SUFFIX)
            for limit, status, passed in ((size, 0, True), (size - 1, 2, False)):
                with self.subTest(limit=limit), mock.patch.object(sig, "MAX_CHECKPOINTS_BYTES", limit):
                    answer = self.run_cli("--verify-audit", log, "--public-key", public)
                    self.assertEqual((answer[0], answer[1]["passed"]), (status, passed))
                    if not passed:
                        self.assertEqual(answer[1]["error"]["code"], "CHECKPOINTS_UNREADABLE")

    def test_files_that_cannot_be_used_exit_2(self) -> None:
        with tempfile.TemporaryDirectory() as folder:
            log, public = self.signed_copy(folder)
            key = os.path.join(folder, sig.PRIVATE_KEY_NAME)
            cases = {
                "CHECKPOINTS_UNWRITABLE": ("sign", log, "--sign-key", key),
                "SIGNING_KEY_INVALID": ("sign", log, "--sign-key", public),
                "PUBLIC_KEY_INVALID": ("--verify-audit", log, "--public-key", key),
                "PUBLIC_KEY_UNREADABLE": ("--verify-audit", log, "--public-key", os.path.join(folder, "absent.pem")),
                "AUDIT_LOG_UNREADABLE": ("--verify-audit", os.path.join(folder, "absent.log"), "--public-key", public),
                "KEY_FILES_UNWRITABLE": ("keygen", "--out", folder),
            }
            for code, argv in cases.items():
                with self.subTest(code):
                    status, view = self.run_cli(*argv)
                    self.assertEqual((status, view["error"]["code"]), (2, code))
            os.remove(log + sig.CHECKPOINTS_SUFFIX)
            status, view = self.run_cli("--verify-audit", log, "--public-key", public)
            self.assertEqual((status, view["error"]["code"]), (2, "CHECKPOINTS_UNREADABLE"))

    def test_a_bad_command_line_is_cli_usage(self) -> None:
        for argv in ((), ("sign", "log"), ("sign", "log", "--sign-key", "k", "--every", "0"),
                     ("sign", "log", "--sign-key", "k", "--every", "+5"),
                     ("sign", "log", "--sign-key", "k", "--every", "\u0665"),
                     ("sign", "log", "--sign-key", "k", "--every", str(sig.MAX_CHAIN_LINES + 1)),
                     ("--verify-audit", "log"), ("--public-key", "k"), ("keygen",), ("verify", "log")):
            with self.subTest(argv=argv):
                status, view = self.run_cli(*argv)
                self.assertEqual((status, view["error"]["code"]), (2, "CLI_USAGE"))

    def test_help_names_all_three_commands(self) -> None:
        out = io.StringIO()
        with redirect_stdout(out), self.assertRaises(SystemExit) as stopped:
            sig.main(["--help"])
        self.assertEqual(stopped.exception.code, 0)
        usage = out.getvalue().split("\n\n")[0].splitlines()
        self.assertEqual([line.split("audit_signatures.py ")[1].split()[0] for line in usage],
                         ["--verify-audit", "keygen", "sign"])

    def test_every_takes_both_ends_of_its_range(self) -> None:
        self.assertEqual(sig._every("1"), 1)
        self.assertEqual(sig._every(str(sig.MAX_CHAIN_LINES)), sig.MAX_CHAIN_LINES)


class TestIsolation(unittest.TestCase):
    def python(self, code: str) -> str:
        result = subprocess.run([sys.executable, "-B", "-c", code], capture_output=True, text=True, cwd=HERE.parent,
                                timeout=60, check=False)
        self.assertEqual(result.returncode, 0, result.stderr)
        return result.stdout.strip()

    def test_the_core_never_imports_cryptography(self) -> None:
        self.assertEqual(self.python("import sys, tool_dispatcher; print('cryptography' in sys.modules)"), "False")

    def test_this_layer_imports_cryptography_only_when_it_signs_or_verifies(self) -> None:
        code = ("import sys; sys.path.insert(0, 'signatures'); import audit_signatures; "
                "print('cryptography' in sys.modules)")
        self.assertEqual(self.python(code), "False")

    def test_without_cryptography_the_cli_says_so(self) -> None:
        code = ("import sys; sys.modules['cryptography'] = None; sys.path.insert(0, 'signatures'); "
                "import audit_signatures, io, contextlib; out = io.StringIO()\n"
                "with contextlib.redirect_stdout(out): status = audit_signatures.main(['keygen', '--out', '/nonexistent'])\n"
                "print(status, __import__('json').loads(out.getvalue())['error']['code'])")
        self.assertEqual(self.python(code), "2 SIGNATURES_UNAVAILABLE")


if __name__ == "__main__":
    unittest.main()
