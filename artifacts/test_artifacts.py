"""Tests of the artifacts layer: admission, polyglots, active content, archives, tokens, and the
whole path through the core's dispatcher, package verification, seal and audit log.

Run from the repository root (any of -O, -W error, both):
    python -B -m unittest discover -s artifacts -p 'test_*.py'
    python -B -m unittest discover -p 'test_artifacts.py'
"""
from __future__ import annotations

import copy
import io
import random
import struct
import sys
import tarfile
import unicodedata
import unittest
import zipfile
import zlib
from pathlib import Path
from unittest import mock

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))  # before the repository root: the module, not the package folder

if __package__:  # discovered from the repository root, as the package artifacts
    from . import artifacts as art
else:
    import artifacts as art

import tool_dispatcher as td  # noqa: E402

NOW = 1_800_000_000
ALICE = td.Principal("tenant-a", "alice", ("files.read",))
BOB = td.Principal("tenant-a", "bob", ("files.read",))
KEYS = art.ArtifactKeys("k1", {"k1": bytes(range(32))})
SEAL_KEYS = td.SealKeys("s1", {"s1": bytes(range(32, 64))})
SHA = "ab" * 32


# -- Building valid and hostile bytes: makers.py, shared with the hostile-artifact fixture --------

if __package__:
    from .makers import gif, gz, jpeg, pdf, png, png_chunk, tar_of, webp, zip_of
else:
    from makers import gif, gz, jpeg, pdf, png, png_chunk, tar_of, webp, zip_of  # noqa: E402


def policy(*types: str, max_bytes: int = 65_536, **options) -> art.MediaPolicy:
    return art.MediaPolicy(allowed=frozenset(types), max_bytes=max_bytes, **options)


ALL_PLAIN = policy(*(art.TEXT_TYPES | art.MARKUP_TYPES | {"image/png", "image/jpeg", "image/gif", "image/webp",
                                                          "application/pdf"}))
ARCHIVES = art.ArchivePolicy(max_entries=8, max_total_bytes=4_096, max_ratio=50, max_depth=0)


def archive_policy(archives: art.ArchivePolicy = ARCHIVES) -> art.MediaPolicy:
    return policy(*art.ARCHIVE_TYPES, archives=archives)


# Zips and tars written field by field, for the structures no writer makes.

def zip_local(name: bytes, body: bytes) -> bytes:
    return struct.pack("<4s5H3I2H", b"PK\x03\x04", 20, 0, 0, 0, 0, zlib.crc32(body), len(body), len(body),
                       len(name), 0) + name + body


def zip_central(name: bytes, body: bytes, offset: int, *, sizes: tuple[int, int] | None = None, extra: bytes = b"",
                comment: bytes = b"") -> bytes:
    compressed, size = sizes or (len(body), len(body))
    return struct.pack("<4s6H3I5H2I", b"PK\x01\x02", 20, 20, 0, 0, 0, 0, zlib.crc32(body), compressed, size,
                       len(name), len(extra), len(comment), 0, 0, 0, offset) + name + extra + comment


def zip_end(entries: int, size: int, offset: int) -> bytes:
    return struct.pack("<4s4H2IH", b"PK\x05\x06", 0, 0, entries, entries, size, offset, 0)


def zip_single(name: bytes, stored: bytes, size: int, crc: int, *, method: int = zipfile.ZIP_DEFLATED,
               local_name: bytes | None = None, extra: bytes = b"") -> bytes:
    """A one-entry zip whose directory says ``size`` and ``crc`` of ``stored`` (its compressed bytes)."""
    local_name = name if local_name is None else local_name
    local = struct.pack("<4s5H3I2H", b"PK\x03\x04", 20, 0, method, 0, 0, crc, len(stored), size,
                        len(local_name), 0) + local_name + stored
    central = struct.pack("<4s6H3I5H2I", b"PK\x01\x02", 20, 20, 0, method, 0, 0, crc, len(stored), size,
                          len(name), len(extra), 0, 0, 0, 0, 0) + name + extra
    return local + central + zip_end(1, len(central), len(local))


def deflated(data: bytes) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    return packer.compress(data) + packer.flush()


def unicode_path(header_name: bytes, name: bytes, *, version: int = 1) -> bytes:
    """Info-ZIP's Unicode path extra field (0x7075) naming ``name`` for ``header_name``."""
    body = struct.pack("<BI", version, zlib.crc32(header_name)) + name
    return struct.pack("<2H", 0x7075, len(body)) + body


def tar_header(name: bytes, kind: bytes, size: int, *, size_field: bytes | None = None) -> bytes:
    block = bytearray(512)
    block[0:len(name)] = name
    for at, field in ((100, b"0000644\x00"), (108, b"0000000\x00"), (116, b"0000000\x00"),
                      (124, size_field or b"%011o\x00" % size), (136, b"00000000000\x00"), (148, b" " * 8),
                      (156, kind), (257, b"ustar\x0000")):
        block[at:at + len(field)] = field
    block[148:156] = b"%06o\x00 " % sum(block)
    return bytes(block)


def tar_raw(*members: tuple[bytes, bytes, bytes], padding: bytes = b"\x00") -> bytes:
    """A tar of (name, kind, data) headers written as given, each data block padded with ``padding``."""
    out = b"".join(tar_header(name, kind, len(data)) + data + padding * (-len(data) % 512)
                   for name, kind, data in members)
    return out + bytes(1_024)


def pax(*records: tuple[str, str]) -> bytes:
    """Pax records, each "<length> <keyword>=<value>\\n" with the length counting itself."""
    out = b""
    for keyword, value in records:
        body = f" {keyword}={value}\n".encode()
        length = len(body) + len(str(len(body)))
        length += len(str(length)) - len(str(len(body)))
        out += str(length).encode() + body
    return out


class Refusals(unittest.TestCase):
    def assertRefused(self, code, call, *args, **kwargs):
        with self.assertRaises(art.ArtifactError) as caught:
            call(*args, **kwargs)
        self.assertEqual(caught.exception.code, code)
        return caught.exception


# ============================================================================================
# 2. Errors
# ============================================================================================


class TestErrors(Refusals):
    def test_codes_carry_the_layer_prefixes_and_fixed_messages(self):
        for code, spec in art.ARTIFACT_CATALOG.items():
            self.assertTrue(code.startswith(("ARTIFACT_", "ACCESS_", "PAGE_")), code)
            self.assertTrue(spec.message.endswith("."))
            self.assertNotIn(code, td.ERROR_CATALOG)

    def test_a_refusal_never_echoes_the_input(self):
        error = self.assertRefused("ARTIFACT_TYPE_MISMATCH", art.admit_bytes, b"secret-words-here",
                                   declared_type="application/pdf", policy=ALL_PLAIN)
        self.assertEqual(error.to_json(), {"code": "ARTIFACT_TYPE_MISMATCH", "retryable": False,
                                           "message": "The artifact's bytes are not of its declared media type."})

    def test_an_unknown_code_is_a_programming_error(self):
        with self.assertRaises(ValueError):
            art.ArtifactError("NOT_A_CODE")


# ============================================================================================
# 3. Media types and policy
# ============================================================================================


class TestMediaPolicy(Refusals):
    def test_policy_bounds_both_sides(self):
        self.assertEqual(policy("text/plain", max_bytes=1).max_bytes, 1)
        self.assertEqual(policy("text/plain", max_bytes=art.MAX_ARTIFACT_BYTES).max_bytes, art.MAX_ARTIFACT_BYTES)
        self.assertRefused("ARTIFACT_POLICY_INVALID", policy, "text/plain", max_bytes=0)
        self.assertRefused("ARTIFACT_POLICY_INVALID", policy, "text/plain", max_bytes=art.MAX_ARTIFACT_BYTES + 1)
        self.assertRefused("ARTIFACT_POLICY_INVALID", policy, "text/plain", max_bytes=True)

    def test_policy_types_come_from_the_closed_table(self):
        self.assertRefused("ARTIFACT_POLICY_INVALID", policy, "image/bmp")
        self.assertRefused("ARTIFACT_POLICY_INVALID", policy)
        self.assertRefused("ARTIFACT_POLICY_INVALID", art.MediaPolicy, allowed={"text/plain"}, max_bytes=10)

    def test_an_archive_type_needs_an_archive_policy(self):
        self.assertRefused("ARTIFACT_POLICY_INVALID", policy, "application/zip")
        self.assertEqual(archive_policy().archives, ARCHIVES)

    def test_archive_policy_bounds_both_sides(self):
        for name, ceiling, floor in (("max_entries", art.MAX_ARCHIVE_ENTRIES, 1),
                                     ("max_total_bytes", art.MAX_ARCHIVE_TOTAL, 1),
                                     ("max_ratio", art.MAX_ARCHIVE_RATIO, 1), ("max_depth", art.MAX_ARCHIVE_DEPTH, 0)):
            with self.subTest(name):
                self.assertEqual(getattr(art.ArchivePolicy(**{name: ceiling}), name), ceiling)
                self.assertEqual(getattr(art.ArchivePolicy(**{name: floor}), name), floor)
                self.assertRefused("ARTIFACT_POLICY_INVALID", art.ArchivePolicy, **{name: ceiling + 1})
                self.assertRefused("ARTIFACT_POLICY_INVALID", art.ArchivePolicy, **{name: floor - 1})


# ============================================================================================
# 4. Sniffing and 8. Admission
# ============================================================================================


class TestAdmission(Refusals):
    def test_each_valid_type_is_admitted_as_declared(self):
        cases = [("image/png", png()), ("image/jpeg", jpeg()), ("image/gif", gif()), ("image/webp", webp()),
                 ("application/pdf", pdf()), ("text/plain", "héllo\tworld\n".encode()),
                 ("application/json", b'{"a": [1, 2.5, null]}'),
                 ("image/svg+xml", b'<?xml version="1.0"?>\n<svg xmlns="http://www.w3.org/2000/svg">'
                                   b'<defs><linearGradient id="g"/></defs><rect fill="url(#g)"/></svg>'),
                 ("text/html", b"<!doctype html><html><body><p>hi <a href='#top'>top</a></p></body></html>")]
        for declared, data in cases:
            with self.subTest(declared):
                admitted = art.admit_bytes(data, declared_type=declared, policy=ALL_PLAIN)
                self.assertEqual((admitted.media_type, admitted.size, admitted.active), (declared, len(data), ()))
                self.assertEqual(admitted.sha256, __import__("hashlib").sha256(data).hexdigest())

    def test_only_plain_text_and_json_become_text(self):
        self.assertEqual(art.admit_bytes(b"hi", declared_type="text/plain", policy=ALL_PLAIN).text, "hi")
        self.assertEqual(art.admit_bytes(b"[1]", declared_type="application/json", policy=ALL_PLAIN).text, "[1]")
        self.assertIsNone(art.admit_bytes(b"<p>hi</p>", declared_type="text/html", policy=ALL_PLAIN).text)
        self.assertIsNone(art.admit_bytes(png(), declared_type="image/png", policy=ALL_PLAIN).text)

    def test_size_limit_both_sides(self):
        tight = policy("text/plain", max_bytes=5)
        self.assertEqual(art.admit_bytes(b"12345", declared_type="text/plain", policy=tight).size, 5)
        self.assertRefused("ARTIFACT_TOO_LARGE", art.admit_bytes, b"123456", declared_type="text/plain", policy=tight)
        self.assertEqual(art.admit_bytes(b"1", declared_type="text/plain", policy=tight).size, 1)
        self.assertRefused("ARTIFACT_EMPTY", art.admit_bytes, b"", declared_type="text/plain", policy=tight)

    def test_size_is_checked_before_any_parse(self):
        # Bytes that would fail every later check still answer the size first.
        self.assertRefused("ARTIFACT_TOO_LARGE", art.admit_bytes, b"\x00" * 11, declared_type="image/png",
                           policy=policy("image/png", max_bytes=10))

    def test_declared_type_known_then_allowed(self):
        self.assertRefused("ARTIFACT_TYPE_UNSUPPORTED", art.admit_bytes, png(), declared_type="image/bmp",
                           policy=ALL_PLAIN)
        self.assertRefused("ARTIFACT_TYPE_UNSUPPORTED", art.admit_bytes, png(), declared_type="IMAGE/PNG",
                           policy=ALL_PLAIN)
        self.assertRefused("ARTIFACT_TYPE_NOT_ALLOWED", art.admit_bytes, pdf(), declared_type="application/pdf",
                           policy=policy("image/png"))
        self.assertRefused("ARTIFACT_TYPE_NOT_ALLOWED", art.admit_bytes, zip_of([("a", b"a")]),
                           declared_type="application/zip", policy=ALL_PLAIN)
        self.assertRefused("ARTIFACT_POLICY_INVALID", art.admit_bytes, png(), declared_type="image/png",
                           policy={"allowed": ["image/png"]})

    def test_declared_type_must_match_the_sniffed_one(self):
        for data, declared in ((png(), "image/jpeg"), (jpeg(), "image/png"), (gif(), "image/webp"),
                               (pdf(), "text/plain"), (b"<html><p>x</p></html>", "text/plain"),
                               (b"<svg></svg>", "text/html"), (b"<p>x</p>", "image/svg+xml"),
                               (b"plain", "image/svg+xml"), (b"plain", "text/html")):
            with self.subTest(declared):
                self.assertRefused("ARTIFACT_TYPE_MISMATCH", art.admit_bytes, data, declared_type=declared,
                                   policy=ALL_PLAIN)

    def test_only_bytes_are_admitted(self):
        for data in (bytearray(png()), memoryview(png()), "plain text"):
            with self.subTest(type(data).__name__):
                self.assertRefused("ARTIFACT_TYPE_UNKNOWN", art.admit_bytes, data, declared_type="image/png",
                                   policy=ALL_PLAIN)

    def test_bytes_with_no_signature(self):
        self.assertRefused("ARTIFACT_TYPE_UNKNOWN", art.admit_bytes, b"\x00\x01\x02", declared_type="image/png",
                           policy=ALL_PLAIN)
        for data in (b"\xff\xfe", b"a\x00b", b"a\x1bb", b"\xed\xa0\x80"):  # not UTF-8, NUL, ESC, a surrogate
            with self.subTest(data):
                self.assertRefused("ARTIFACT_TEXT_INVALID", art.admit_bytes, data, declared_type="text/plain",
                                   policy=ALL_PLAIN)

    def test_json_is_strict(self):
        for data in (b'{"a": 1, "a": 2}', b"{'a': 1}", b"[NaN]", b"[1,]", b"[9007199254740993]"):
            with self.subTest(data):
                self.assertRefused("ARTIFACT_JSON_INVALID", art.admit_bytes, data, declared_type="application/json",
                                   policy=ALL_PLAIN)

    def test_truncated_or_broken_structures_are_malformed(self):
        broken_crc = bytearray(png())
        broken_crc[30] ^= 1  # inside IHDR
        for data, declared in ((png()[:-12], "image/png"), (bytes(broken_crc), "image/png"),
                               (gif()[:-1], "image/gif"), (jpeg()[:-2], "image/jpeg"),
                               (webp()[:-2], "image/webp"), (pdf()[:-7], "application/pdf")):
            with self.subTest(declared):
                self.assertRefused("ARTIFACT_MALFORMED", art.admit_bytes, data, declared_type=declared,
                                   policy=ALL_PLAIN)

    def test_webp_needs_both_riff_and_its_form_type(self):
        self.assertRefused("ARTIFACT_TYPE_UNKNOWN", art.sniff, b"RIFF" + struct.pack("<I", 4) + b"WAVE")
        self.assertEqual(art.sniff(b"abcdefghWEBP, a word"), "text/plain")

    def test_sniff_names_the_leading_signature(self):
        self.assertEqual([art.sniff(data) for data in (png(), jpeg(), gif(), webp(), pdf(), zip_of([]),
                                                       gz(b"x"), tar_of([("a", b"a", tarfile.REGTYPE)]),
                                                       b"{}", b"  <svg>", b"<div>", b"<3 you",
                                                       b"<!-- x --><html><svg></svg></html>")],
                         ["image/png", "image/jpeg", "image/gif", "image/webp", "application/pdf", "application/zip",
                          "application/gzip", "application/x-tar", "text/plain", "image/svg+xml", "text/html",
                          "text/plain", "text/html"])


# ============================================================================================
# 5. Polyglots
# ============================================================================================


class TestPolyglots(Refusals):
    def test_hostile_polyglots_are_refused(self):
        zip_tail = zip_of([("a.txt", b"payload")])
        cases = {
            "png then zip": (png() + zip_tail, "image/png"),
            "png with zip directory in a chunk": (png(png_chunk(b"tEXt", b"c\x00PK\x05\x06" + b"\x00" * 18)),
                                                  "image/png"),
            "png then html": (png() + b"<html><script>x()</script></html>", "image/png"),
            "png with script in a text chunk": (png(png_chunk(b"tEXt", b"c\x00<script>x()</script>")), "image/png"),
            "gif then zip": (gif() + zip_tail, "image/gif"),
            "jpeg then zip": (jpeg() + zip_tail, "image/jpeg"),
            "jpeg with zip inside a segment": (jpeg()[:2] + b"\xff\xe1\x00\x1aPK\x03\x04" + b"\x00" * 20 + jpeg()[2:],
                                               "image/jpeg"),
            "webp past its riff size": (webp() + b"\x00\x00", "image/webp"),
            "pdf then zip": (pdf() + zip_tail, "application/pdf"),
            "pdf holding a png": (pdf(b"1 0 obj<<>>stream\n" + png() + b"\nendstream endobj\n"), "application/pdf"),
            "text with a pdf header": (b"notes\n%PDF-1.4\n", "text/plain"),
            "zip with a comment": (zip_tail[:-2] + b"\x03\x00abc", "application/zip"),
            "zip then bytes": (zip_tail + b"junk", "application/zip"),
            "zip with a pdf header at its start": (zip_of([("a.pdf", pdf())], compression=zipfile.ZIP_STORED),
                                                   "application/zip"),
        }
        pol = policy(*(ALL_PLAIN.allowed | art.ARCHIVE_TYPES), archives=ARCHIVES)
        for name, (data, declared) in cases.items():
            with self.subTest(name):
                self.assertRefused("ARTIFACT_POLYGLOT", art.admit_bytes, data, declared_type=declared, policy=pol)

    def admit(self, data, declared):
        return art.admit_bytes(data, declared_type=declared, policy=archive_policy() if declared in art.ARCHIVE_TYPES
                               else ALL_PLAIN)

    def test_an_archive_that_opens_as_markup_is_a_polyglot(self):
        # A tar's first bytes are its first name: "<script>..." there is a page a browser may sniff as HTML.
        for name in ("<script>alert(document.domain)<", "<!-- x", "<?php x", "<Svg x", "  <html"):
            with self.subTest(name):
                self.assertRefused("ARTIFACT_POLYGLOT", self.admit, tar_of([(name, b"x", tarfile.REGTYPE)]),
                                   "application/x-tar")
        for name in ("<1.txt", "< x.txt", "notes<b>.txt", "<"):  # no tag at the very start
            with self.subTest(name):
                self.assertEqual(self.admit(tar_of([(name, b"x", tarfile.REGTYPE)]), "application/x-tar").entries, 1)

    def test_png_chunk_past_the_end_is_malformed_even_when_its_crc_fits(self):
        # IEND cut one byte short: the three bytes left of its CRC read as the whole CRC when it is below 2**24.
        body = next(n.to_bytes(4, "big") for n in range(1 << 16) if zlib.crc32(b"IEND" + n.to_bytes(4, "big")) < 1 << 24)
        cut = png()[:-12] + struct.pack(">I", 4) + b"IEND" + body + zlib.crc32(b"IEND" + body).to_bytes(3, "big")
        self.assertRefused("ARTIFACT_MALFORMED", self.admit, cut, "image/png")
        whole = png()[:-12] + struct.pack(">I", 4) + b"IEND" + body + zlib.crc32(b"IEND" + body).to_bytes(4, "big")
        self.assertEqual(self.admit(whole, "image/png").size, len(whole))

    def test_gif_screen_and_blocks(self):
        self.assertRefused("ARTIFACT_MALFORMED", self.admit, gif()[:10], "image/gif")  # shorter than its screen
        unknown = bytearray(gif())
        self.assertEqual(unknown[20], 0x2C)  # the image descriptor, after the 13-byte screen and the comment
        unknown[20] = 0x2D
        self.assertRefused("ARTIFACT_MALFORMED", self.admit, bytes(unknown), "image/gif")
        self.assertRefused("ARTIFACT_MALFORMED", self.admit, gif()[:29], "image/gif")  # a descriptor cut short

    def test_jpeg_marker_walk(self):
        frame = jpeg()[:20]  # start of image and the JFIF segment
        for name, data in {
            "a stray byte where a marker belongs": frame + b"\x01" + jpeg()[20:],
            "fill bytes to the end": frame + b"\xff\xff",
            "no end of image": frame,
            "a scan whose segment length is 0": b"\xff\xd8\xff\xda\x00\x00\xff\xd9",
            "a scan whose segment length is 1": b"\xff\xd8\xff\xda\x00\x01\xff\xd9",
            "a segment past the end": frame + b"\xff\xe1\x00\x10abc",
            "scan data ending in 0xff": jpeg()[:-2] + b"\xff",
        }.items():
            with self.subTest(name):
                self.assertRefused("ARTIFACT_MALFORMED", self.admit, data, "image/jpeg")
        for name, data in {
            "stand-alone markers between segments": b"\xff\xd8\xff\x01\xff\xd0\xff\xd7" + jpeg()[2:],
            "a table segment (marker below the restarts)": b"\xff\xd8\xff\xc4\x00\x04\x00\x00" + jpeg()[2:],
            "fill bytes before a marker": frame + b"\xff\xff" + jpeg()[20:],
        }.items():
            with self.subTest(name):
                self.assertEqual(self.admit(data, "image/jpeg").size, len(data))

    def test_zip_end_record(self):
        data = zip_of([("a", b"a")])
        record = len(data) - 22
        self.assertRefused("ARTIFACT_MALFORMED", self.admit, data[:record], "application/zip")  # no end record
        for name, at, value in (("disk", 4, b"\x01\x00"), ("directory's disk", 6, b"\x01\x00"),
                                ("entries on this disk", 8, b"\x02\x00"), ("directory size", 12, b"\xff" * 4),
                                ("directory offset", 16, b"\xff" * 4)):
            with self.subTest(name):
                changed = data[:record + at] + value + data[record + at + len(value):]
                self.assertRefused("ARTIFACT_MALFORMED", self.admit, changed, "application/zip")
        self.assertEqual(self.admit(data, "application/zip").entries, 1)

    def test_zip_with_bytes_inserted_before_its_directory(self):
        data = zip_of([("a", b"a")])
        directory = data.index(b"PK\x01\x02")
        shifted = data[:directory] + b"\x00\x00" + data[directory:]  # the end record still names the old offset
        self.assertRefused("ARTIFACT_POLYGLOT", art.admit_bytes, shifted, declared_type="application/zip",
                           policy=archive_policy())

    def test_a_zip64_end_record_or_locator_is_refused_where_a_reader_finds_it(self):
        # Two directories: the end record names the first (a traversal), a ZIP64 end record and its
        # locator just before it name the second (a plain file). zipfile follows the locator; unzip does not.
        good, evil = (b"readme.txt", b"harmless\n"), (b"../../evil.sh", b"#!/bin/sh\n")
        locals_ = zip_local(*good) + zip_local(*evil)
        first, second = zip_central(*evil, len(zip_local(*good))), zip_central(*good, 0)
        second_at = len(locals_) + len(first)
        zip64 = struct.pack("<4sQ2H2I4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, 1, 1, len(second), second_at)
        locator = struct.pack("<4sIQI", b"PK\x06\x07", 0, second_at + len(second), 1)
        tail = first + second + zip64 + locator
        split = locals_ + tail + zip_end(1, len(tail), len(locals_))
        self.assertEqual(zipfile.ZipFile(io.BytesIO(split)).namelist(), ["readme.txt"])  # what zipfile alone reads
        self.assertRefused("ARTIFACT_MALFORMED", self.admit, split, "application/zip")
        # The locator alone, as the last 20 bytes of the directory (a record's comment): refused too.
        plain = zip_local(*good)
        for mark in (b"PK\x06\x07", b"PK\x06\x06"):
            with self.subTest(mark):
                directory = zip_central(*good, 0, comment=mark + bytes(16))
                self.assertRefused("ARTIFACT_MALFORMED", self.admit,
                                   plain + directory + zip_end(1, len(directory), len(plain)), "application/zip")
        directory = zip_central(*good, 0, comment=b"PK\x06\x08" + bytes(16))  # any other marker is a comment
        self.assertEqual(self.admit(plain + directory + zip_end(1, len(directory), len(plain)),
                                    "application/zip").entries, 1)

    def test_the_directory_read_is_exactly_the_one_the_end_record_names(self):
        plain, other = (b"a.txt", b"first"), (b"b.txt", b"second")
        locals_ = zip_local(*plain) + zip_local(*other)
        directory = zip_central(*plain, 0) + zip_central(*other, len(zip_local(*plain)))
        honest = locals_ + directory + zip_end(2, len(directory), len(locals_))
        self.assertEqual(self.admit(honest, "application/zip").entries, 2)
        for count in (1, 3):  # zipfile reads every record in the directory's bytes, whatever the count says
            with self.subTest(count):
                self.assertRefused("ARTIFACT_MALFORMED", self.admit,
                                   locals_ + directory + zip_end(count, len(directory), len(locals_)),
                                   "application/zip")
        gap = directory + bytes(4)  # bytes after the last record, inside the size the end record gives
        self.assertRefused("ARTIFACT_MALFORMED", self.admit, locals_ + gap + zip_end(2, len(gap), len(locals_)),
                           "application/zip")

    def test_zip64_entries_are_refused(self):
        name, body = b"a.txt", b"hello zip64"
        local = zip_local(name, body)
        zip64 = struct.pack("<2H2Q", 1, 16, len(body), len(body))
        for label, record in (
                ("saturated sizes and a zip64 field",
                 zip_central(name, body, 0, sizes=(0xFFFFFFFF, 0xFFFFFFFF), extra=zip64)),
                ("a zip64 field alone", zip_central(name, body, 0, extra=zip64)),
                ("a zip64 field after another", zip_central(name, body, 0, extra=struct.pack("<2H", 0x5455, 1)
                                                            + b"\x00" + zip64)),
                ("a saturated size alone", zip_central(name, body, 0, sizes=(len(body), 0xFFFFFFFF)))):
            with self.subTest(label):
                self.assertRefused("ARTIFACT_MALFORMED", self.admit,
                                   local + record + zip_end(1, len(record), len(local)), "application/zip")
        record = zip_central(name, body, 0, extra=struct.pack("<2H", 0x5455, 1) + b"\x00")  # a timestamp field
        self.assertEqual(self.admit(local + record + zip_end(1, len(record), len(local)), "application/zip").unpacked,
                         len(body))


# ============================================================================================
# 6. Active content
# ============================================================================================


class TestActiveContent(Refusals):
    HOSTILE = {
        "svg script": b'<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>',
        "svg onload": b'<svg onload="alert(1)"></svg>',
        "svg event after slash": b'<svg/onload=alert(1)>',
        "svg javascript href": b'<svg><a href="javascript:alert(1)"><text>x</text></a></svg>',
        "svg obfuscated scheme": b'<svg><a href="#" xlink:href="java&#x09;script:alert(1)"/></svg>',
        "svg entity scheme": b'<svg><a href="#x" data-x="&#106;avascript:alert(1)"/></svg>',
        "svg foreignObject": b'<svg><foreignObject><div>x</div></foreignObject></svg>',
        "svg external image": b'<svg><image href="https://example.test/p.png"/></svg>',
        "svg animated href": b'<svg><a><set attributeName="href" to="x"/></a></svg>',
        "svg style import": b'<svg><style>@import "x.css";</style></svg>',
        "svg entity declaration": b'<?xml version="1.0"?><!DOCTYPE svg [<!ENTITY a "b">]><svg>&a;</svg>',
        "html iframe": b'<html><iframe src="x"></iframe></html>',
        "html meta refresh": b'<html><meta http-equiv="refresh" content="0;url=x"></html>',
        "html data url": b'<html><a href="#" style="background: URL( data:text/html,x)">x</a></html>',
        "html form": b'<html><form><input></form></html>',
        "svg prefixed script": b'<svg xmlns="http://www.w3.org/2000/svg" xmlns:s="http://www.w3.org/2000/svg">'
                               b'<s:script>alert(1)</s:script></svg>',
        "svg xhtml iframe": b'<svg xmlns:h="http://www.w3.org/1999/xhtml"><h:iframe/></svg>',
        "svg xhtml script": b'<svg xmlns:h="http://www.w3.org/1999/xhtml"><h:script>alert(1)</h:script></svg>',
        "svg prefixed foreignObject": b'<svg xmlns:s="http://www.w3.org/2000/svg"><s:foreignObject/></svg>',
        "svg prefixed handler": b'<svg xmlns:ev="http://www.w3.org/2001/xml-events"><ev:listener/></svg>',
        "svg xhtml meta": b'<svg xmlns:h="http://www.w3.org/1999/xhtml"><h:meta http-equiv="refresh"/></svg>',
        "html srcset": b'<html><img srcset="https://evil.example/pixel.png 1x"></html>',
        "html manifest": b'<html manifest="https://evil.example/app.appcache"></html>',
        "svg css escaped url": b'<svg><style>rect{fill:\\75rl(https://evil.example/p#a)}</style></svg>',
        "svg css escaped url, six digits": b'<svg><rect style="fill:\\000055 RL(https://evil.example/p)"/></svg>',
        "svg css escaped import": b'<svg><style>@\\69mport "https://evil.example/x.css";</style></svg>',
        "svg css escaped character": b'<svg><style>@im\\port "https://evil.example/x.css";</style></svg>',
        "svg image-set": b'<svg><style>rect{fill:image-set("https://evil.example/p.png" 1x)}</style></svg>',
        "html webkit-image-set": b'<html><p style="background:-webkit-image-set(\'//evil.example/p\' 1x)">x</p></html>',
        "svg animated prefixed href": b'<svg xmlns:l="http://www.w3.org/1999/xlink"><image><set attributeName="l:href" '
                                      b'to="https://evil.example/p.png"/></image></svg>',
        "html ping": b'<html><a href="#top" ping="https://evil.example/track">x</a></html>',
    }

    def test_active_markup_is_refused_by_default(self):
        for name, data in self.HOSTILE.items():
            declared = "text/html" if name.startswith("html") else "image/svg+xml"
            with self.subTest(name):
                self.assertRefused("ARTIFACT_ACTIVE_CONTENT", art.admit_bytes, data, declared_type=declared,
                                   policy=ALL_PLAIN)

    def test_allowed_active_content_is_admitted_with_its_findings_and_never_as_text(self):
        allowing = policy("image/svg+xml", allow_active=True)
        admitted = art.admit_bytes(self.HOSTILE["svg onload"], declared_type="image/svg+xml", policy=allowing)
        self.assertEqual((admitted.active, admitted.text), (("event_attribute",), None))
        admitted = art.admit_bytes(self.HOSTILE["svg script"], declared_type="image/svg+xml", policy=allowing)
        self.assertEqual(admitted.active, ("script_element",))  # an xmlns URL names a namespace, it loads nothing

    def test_text_naming_markup_is_text_not_active_content(self):
        for data, declared in ((b"note: <script>alert(1)</script>", "text/plain"),
                               (b'{"snippet": "<iframe src=x>"}', "application/json")):
            with self.subTest(declared):
                admitted = art.admit_bytes(data, declared_type=declared, policy=ALL_PLAIN)
                self.assertEqual((admitted.active, admitted.text), ((), data.decode()))

    def test_prefixed_elements_that_run_nothing_are_not_active(self):
        for data in (b'<svg xmlns:s="http://www.w3.org/2000/svg"><s:rect width="1"/><s:g/></svg>',
                     b'<svg><text>a:script b:iframe</text><g:metadata/></svg>'):
            with self.subTest(data=data):
                self.assertEqual(art.admit_bytes(data, declared_type="image/svg+xml", policy=ALL_PLAIN).active, ())

    def test_prose_that_names_schemes_is_not_active(self):
        data = b'<svg><text>metadata: on the one hand</text><rect fill="url(#g)"/></svg>'
        self.assertEqual(art.admit_bytes(data, declared_type="image/svg+xml", policy=ALL_PLAIN).active, ())

    def test_backslashes_read_as_css_escapes_find_only_what_css_would_load(self):
        data = b'<svg><text>C:\\temp\\new \\75 nits</text><rect style="fill:url(#g)"/></svg>'
        self.assertEqual(art.admit_bytes(data, declared_type="image/svg+xml", policy=ALL_PLAIN).active, ())
        allowing = policy("image/svg+xml", allow_active=True)
        escaped = b'<svg><rect style="fill:\\75rl(//x)"/><text>\\0 \\110000 \\d800</text></svg>'
        self.assertEqual(art.admit_bytes(escaped, declared_type="image/svg+xml", policy=allowing).active,
                         ("style_load",))

    def test_pdf_actions_are_active(self):
        for body in (b"1 0 obj<</S/JavaScript/JS(app.alert(1))>>endobj\n", b"1 0 obj<</S/J#61vaScript>>endobj\n",
                     b"1 0 obj<</Type/Action/S/Launch>>endobj\n", b"1 0 obj<</EmbeddedFile 2 0 R>>endobj\n",
                     # an attachment with no /EmbeddedFile name: the name tree, the annotation, the /EF key
                     b"1 0 obj<</Names<</EmbeddedFiles<</Names[(a.exe)2 0 R]>>>>>>endobj\n",
                     b"1 0 obj<</Type/Annot/Subtype/FileAttachment/FS 2 0 R>>endobj\n",
                     b"2 0 obj<</Type/Filespec/F(a.exe)/#45F<</F 3 0 R>>>>endobj\n",
                     b"1 0 obj<</OpenAction<</S/GoToR/F(\\\\\\\\host\\\\share\\\\a.pdf)/D[0/Fit]>>>>endobj\n"):
            with self.subTest(body):
                self.assertRefused("ARTIFACT_ACTIVE_CONTENT", art.admit_bytes, pdf(body),
                                   declared_type="application/pdf", policy=ALL_PLAIN)
        for body in (b"1 0 obj<</JSON 1>>endobj\n", b"1 0 obj<</EFG 1/GoToRemote 2/S/GoTo>>endobj\n"):
            self.assertEqual(art.admit_bytes(pdf(body), declared_type="application/pdf", policy=ALL_PLAIN).active, ())


# ============================================================================================
# 7. Archives
# ============================================================================================


class TestArchives(Refusals):
    def admit(self, data, declared="application/zip", archives=ARCHIVES):
        return art.admit_bytes(data, declared_type=declared, policy=archive_policy(archives))

    def test_a_plain_archive_of_each_kind_is_opened(self):
        self.assertEqual((self.admit(zip_of([("a/", b""), ("a/b.txt", b"hello")])).entries,
                          self.admit(zip_of([("a/b.txt", b"hello")])).unpacked), (2, 5))
        tar = tar_of([("d", b"", tarfile.DIRTYPE), ("d/f", b"hi", tarfile.REGTYPE)])
        self.assertEqual(self.admit(tar, "application/x-tar").entries, 2)
        self.assertEqual(self.admit(gz(b"hello"), "application/gzip").unpacked, 5)
        self.assertEqual(self.admit(zip_of([])).entries, 0)

    def test_an_archive_policy_opens_only_archives(self):
        both = policy("image/png", "application/zip", archives=ARCHIVES)
        admitted = art.admit_bytes(png(), declared_type="image/png", policy=both)
        self.assertEqual((admitted.media_type, admitted.entries, admitted.unpacked), ("image/png", 0, 0))

    def test_entry_count_both_sides(self):
        limit = art.ArchivePolicy(max_entries=3, max_ratio=1_000)
        self.assertEqual(self.admit(zip_of([(str(n), b"x") for n in range(3)]), archives=limit).entries, 3)
        self.assertRefused("ARTIFACT_ARCHIVE_ENTRIES", self.admit, zip_of([(str(n), b"x") for n in range(4)]),
                           archives=limit)

    def test_total_size_both_sides(self):
        limit = art.ArchivePolicy(max_total_bytes=100, max_ratio=1_000)
        stored = zipfile.ZIP_STORED
        self.assertEqual(self.admit(zip_of([("a", b"x" * 60), ("b", b"y" * 40)], compression=stored),
                                    archives=limit).unpacked, 100)
        self.assertRefused("ARTIFACT_ARCHIVE_TOO_LARGE", self.admit,
                           zip_of([("a", b"x" * 60), ("b", b"y" * 41)], compression=stored), archives=limit)
        self.assertEqual(self.admit(gz(b"x" * 100), "application/gzip", archives=limit).unpacked, 100)
        self.assertRefused("ARTIFACT_ARCHIVE_TOO_LARGE", self.admit, gz(b"x" * 101), "application/gzip",
                           archives=limit)

    def test_compression_ratio_both_sides_measured_by_reading(self):
        data = zip_of([("bomb", b"\x00" * 4_000)])
        compressed = zipfile.ZipFile(io.BytesIO(data)).infolist()[0].compress_size
        ratio = -(-4_000 // compressed)  # the smallest whole ratio that admits it
        self.assertEqual(self.admit(data, archives=art.ArchivePolicy(max_ratio=ratio)).unpacked, 4_000)
        self.assertRefused("ARTIFACT_ARCHIVE_RATIO", self.admit, data, archives=art.ArchivePolicy(max_ratio=ratio - 1))
        packed = gz(b"\x00" * 4_000)
        ratio = -(-4_000 // len(packed))
        self.assertEqual(self.admit(packed, "application/gzip", archives=art.ArchivePolicy(max_ratio=ratio)).unpacked,
                         4_000)
        self.assertRefused("ARTIFACT_ARCHIVE_RATIO", self.admit, packed, "application/gzip",
                           archives=art.ArchivePolicy(max_ratio=ratio - 1))

    def test_the_ratio_is_to_the_bytes_an_entry_spans_not_to_what_its_directory_claims(self):
        def forge(data):  # the first directory record's compressed size, raised far past the entry
            directory = data.index(b"PK\x01\x02")
            return data[:directory + 20] + struct.pack("<I", 0x00FFFFFF) + data[directory + 24:]

        for label, data in (("an entry before another", zip_of([("bomb", b"\x00" * 4_000), ("pad", b"p")])),
                            ("the last entry", zip_of([("bomb", b"\x00" * 4_000)]))):
            # From its local header to the next local header, or to the directory for the last one.
            span = data.index(b"PK\x03\x04", 1) if b"PK\x03\x04" in data[1:] else data.index(b"PK\x01\x02")
            ratio, forged = -(-4_000 // span), forge(data)
            with self.subTest(label):
                self.assertRefused("ARTIFACT_ARCHIVE_RATIO", self.admit, data,
                                   archives=art.ArchivePolicy(max_ratio=ratio - 1))
                # The claimed bytes do not end where the entry's deflate stream does: refused on every
                # version (zipfile from 3.13 refuses the overlap itself; 3.11 reads the stream only).
                self.assertRefused("ARTIFACT_ARCHIVE_INVALID", self.admit, forged,
                                   archives=art.ArchivePolicy(max_ratio=ratio))

    def test_overlapping_entries_are_measured_against_the_bytes_before_the_next(self):
        # A deflate stream that quotes the next entry's local header in a stored block, then expands:
        # it ends exactly at its compressed size, and that size reaches past the next local header.
        second = zip_local(b"pad", b"p")
        quoted = b"x" + second
        content = quoted + bytes(4_000)
        stream = b"\x00" + struct.pack("<2H", len(quoted), len(quoted) ^ 0xFFFF) + quoted + deflated(bytes(4_000))
        first = zip_single(b"bomb", stream, len(content), zlib.crc32(content))
        local = first[:first.index(b"PK\x01\x02")]
        at = local.index(second)  # the second entry's local header, inside the first entry's stream
        directory = first[len(local):-22] + zip_central(b"pad", b"p", at)
        data = local + directory + zip_end(2, len(directory), len(local))
        by_span, by_stream = -(-len(content) // at), -(-len(content) // len(stream))
        self.assertLess(by_stream, by_span)
        try:  # zipfile from 3.12 refuses overlapped entries itself
            reads = len(zipfile.ZipFile(io.BytesIO(data)).open("bomb").read()) == len(content)
        except zipfile.BadZipFile:
            reads = False
        for ratio in (by_stream, by_span - 1):
            with self.subTest(ratio=ratio):
                self.assertRefused("ARTIFACT_ARCHIVE_RATIO" if reads else "ARTIFACT_ARCHIVE_INVALID", self.admit,
                                   data, archives=art.ArchivePolicy(max_ratio=ratio))
        if reads:
            self.assertEqual(self.admit(data, archives=art.ArchivePolicy(max_ratio=by_span)).entries, 2)
        else:
            self.assertRefused("ARTIFACT_ARCHIVE_INVALID", self.admit, data,
                               archives=art.ArchivePolicy(max_ratio=by_span))

    def test_a_header_that_lies_about_the_size_is_not_trusted(self):
        data = bytearray(zip_of([("a", b"x" * 500)], compression=zipfile.ZIP_STORED))
        directory = data.index(b"PK\x01\x02")
        for at in (22, directory + 24):  # the local header's and the directory's uncompressed size
            data[at:at + 4] = struct.pack("<I", 5)
        self.assertRefused("ARTIFACT_ARCHIVE_INVALID", self.admit, bytes(data))

    def test_a_deflate_stream_longer_than_its_declared_size_is_refused(self):
        # zipfile stops at the size the directory declares (and checks the CRC of what it read); unzip
        # inflates the whole stream and writes all of it. 8 MiB of zeros declared as 100 bytes.
        zeros = bytes(8 * 1024 * 1024)
        stream = deflated(zeros)
        self.assertEqual(zlib.decompressobj(-zlib.MAX_WBITS).decompress(stream), zeros)  # what unzip writes
        lying = zip_single(b"a.bin", stream, 100, zlib.crc32(zeros[:100]))
        roomy = art.ArchivePolicy(max_ratio=art.MAX_ARCHIVE_RATIO)
        self.assertRefused("ARTIFACT_ARCHIVE_INVALID", self.admit, lying, archives=roomy)
        honest = zip_single(b"a.bin", deflated(zeros[:100]), 100, zlib.crc32(zeros[:100]))
        self.assertEqual(self.admit(honest, archives=roomy).unpacked, 100)
        # The stream must end where its compressed size does: nothing hides behind it.
        padded = zip_single(b"a.bin", deflated(b"hello") + b"<html>", 5, zlib.crc32(b"hello"))
        self.assertRefused("ARTIFACT_ARCHIVE_INVALID", self.admit, padded)
        stored = zip_single(b"s.txt", b"hello world", 5, zlib.crc32(b"hello"), method=zipfile.ZIP_STORED)
        self.assertRefused("ARTIFACT_ARCHIVE_INVALID", self.admit, stored)
        empty = zip_single(b"e.txt", deflated(b""), 0, 0)
        self.assertEqual(self.admit(empty).entries, 1)

    def test_a_folder_entry_is_read_and_must_hold_nothing(self):
        hidden = zip_single(b"d/", b"payload", 7, zlib.crc32(b"payload"), method=zipfile.ZIP_STORED)
        self.assertRefused("ARTIFACT_ARCHIVE_INVALID", self.admit, hidden)
        renamed = zip_single(b"d/", b"", 0, 0, method=zipfile.ZIP_STORED, local_name=b"../x/")
        self.assertRefused("ARTIFACT_ARCHIVE_INVALID", self.admit, renamed)  # its local header names another path
        self.assertEqual(self.admit(zip_single(b"d/", b"", 0, 0, method=zipfile.ZIP_STORED)).entries, 1)
        self.assertEqual(self.admit(zip_single(b"d/", deflated(b""), 0, 0)).entries, 1)

    def test_a_nul_in_a_zip_name_is_refused_where_zipfile_would_cut_it(self):
        name = b"notes.txt\x00../../evil.sh"
        data = zip_single(name, b"hi", 2, zlib.crc32(b"hi"), method=zipfile.ZIP_STORED)
        self.assertEqual(zipfile.ZipFile(io.BytesIO(data)).namelist(), ["notes.txt"])
        self.assertRefused("ARTIFACT_ARCHIVE_NAME", self.admit, data)

    def test_the_unicode_path_field_is_a_name_too(self):
        # unzip (and zipfile from 3.13) extract to the name in the 0x7075 field, whatever the header says.
        def entry(unicode_name, *, header=b"safe.txt", version=1):
            return zip_single(header, b"hi", 2, zlib.crc32(b"hi"), method=zipfile.ZIP_STORED,
                              extra=unicode_path(header, unicode_name, version=version))

        for name in (b"../../evil.sh", b"/etc/cron.d/job", b"a\\b", b"C:x"):
            with self.subTest(name):
                self.assertRefused("ARTIFACT_ARCHIVE_NAME", self.admit, entry(name))
        self.assertEqual(self.admit(entry(b"safe.txt")).entries, 1)
        self.assertEqual(self.admit(entry("café.txt".encode(), header="caf\u00e9.txt".encode("cp437"))).entries, 1)
        # Two entries extracted to one path: the second header names another file, its field the first.
        first = zip_local(b"a.txt", b"1")
        second = zip_local(b"b.txt", b"2")
        directory = (zip_central(b"a.txt", b"1", 0)
                     + zip_central(b"b.txt", b"2", len(first), extra=unicode_path(b"b.txt", b"A.TXT")))
        self.assertRefused("ARTIFACT_ARCHIVE_DUPLICATE", self.admit,
                           first + second + directory + zip_end(2, len(directory), len(first + second)))
        # A field that is not a name: zipfile from 3.13 warns on an empty one and raises on bad UTF-8.
        for label, data in (("empty", entry(b"")), ("not UTF-8", entry(b"\xff.txt")), ("version 2", entry(b"x", version=2)),
                            ("cut short", zip_single(b"x", b"hi", 2, zlib.crc32(b"hi"), method=zipfile.ZIP_STORED,
                                                     extra=struct.pack("<2HB", 0x7075, 1, 1)))):
            with self.subTest(label):
                self.assertRefused("ARTIFACT_MALFORMED", self.admit, data)

    def test_entry_names_must_be_plain_relative_paths(self):
        for name in ("../x", "a/../../x", "/etc/passwd", "C:x", "c:/x", "a\\b", "a//b", "./a", "a/./b",
                     "x" * 256, "a\x01b"):
            with self.subTest(name):
                self.assertRefused("ARTIFACT_ARCHIVE_NAME", self.admit, zip_of([(name, b"x")]))
        self.assertEqual(self.admit(zip_of([("x" * 255, b"x")])).entries, 1)
        self.assertRefused("ARTIFACT_ARCHIVE_NAME", self.admit, tar_of([("../x", b"x", tarfile.REGTYPE)]),
                           "application/x-tar")

    def test_links_and_special_entries(self):
        link = zipfile.ZipInfo("link")
        link.external_attr = 0o120777 << 16
        self.assertRefused("ARTIFACT_ARCHIVE_LINK", self.admit, zip_of([(link, b"target")]))
        for kind, code in ((tarfile.SYMTYPE, "ARTIFACT_ARCHIVE_LINK"), (tarfile.LNKTYPE, "ARTIFACT_ARCHIVE_LINK"),
                           (tarfile.FIFOTYPE, "ARTIFACT_ARCHIVE_SPECIAL"),
                           (tarfile.CHRTYPE, "ARTIFACT_ARCHIVE_SPECIAL"),
                           (tarfile.GNUTYPE_SPARSE, "ARTIFACT_ARCHIVE_SPECIAL")):  # regular, but holes to fill
            with self.subTest(kind):
                self.assertRefused(code, self.admit, tar_of([("x", b"", kind)]), "application/x-tar")

    def test_duplicate_names_exact_and_case_folded(self):
        self.assertRefused("ARTIFACT_ARCHIVE_DUPLICATE", self.admit, zip_of([("a", b"1"), ("a", b"2")]))
        self.assertRefused("ARTIFACT_ARCHIVE_DUPLICATE", self.admit, zip_of([("Read.me", b"1"), ("READ.ME", b"2")]))
        self.assertRefused("ARTIFACT_ARCHIVE_DUPLICATE", self.admit,
                           tar_of([("a", b"1", tarfile.REGTYPE), ("a", b"2", tarfile.REGTYPE)]), "application/x-tar")

    def test_duplicate_names_in_unicode_normal_forms(self):
        # One file on macOS: NFC and NFD spellings, and case folded beyond ASCII.
        for first, second in ((unicodedata.normalize("NFC", "café.txt"), unicodedata.normalize("NFD", "café.txt")),
                              (unicodedata.normalize("NFD", "Café.txt"), unicodedata.normalize("NFC", "CAFÉ.TXT")),
                              ("straße.txt", "STRASSE.txt")):
            with self.subTest(second):
                self.assertNotEqual(first, second)
                self.assertRefused("ARTIFACT_ARCHIVE_DUPLICATE", self.admit, zip_of([(first, b"1"), (second, b"2")]))
                self.assertRefused("ARTIFACT_ARCHIVE_DUPLICATE", self.admit,
                                   tar_of([(first, b"1", tarfile.REGTYPE), (second, b"2", tarfile.REGTYPE)]),
                                   "application/x-tar")
        self.assertEqual(self.admit(zip_of([("café.txt", b"1"), ("cafe.txt", b"2")])).entries, 2)

    def test_duplicates_are_per_containing_archive(self):
        roomy = art.ArchivePolicy(max_depth=1, max_ratio=1_000)
        bundle = zip_of([("a.zip", zip_of([("README.txt", b"one")])), ("b.zip", zip_of([("README.txt", b"two")])),
                         ("README.txt", b"outer")])
        self.assertEqual(self.admit(bundle, archives=roomy).entries, 5)
        twice = zip_of([("a.zip", zip_of([("README.txt", b"one"), ("readme.TXT", b"two")]))])
        self.assertRefused("ARTIFACT_ARCHIVE_DUPLICATE", self.admit, twice, archives=roomy)

    def test_tar_metadata_headers_count_as_entries(self):
        member = (b"f.txt", b"0", b"x")
        with_pax = tar_raw((b"pax", b"x", pax(("comment", "fine"))), member)
        self.assertEqual(self.admit(with_pax, "application/x-tar",
                                    archives=art.ArchivePolicy(max_entries=2)).entries, 2)
        self.assertRefused("ARTIFACT_ARCHIVE_ENTRIES", self.admit, with_pax, "application/x-tar",
                           archives=art.ArchivePolicy(max_entries=1))
        long_name = (b"././@LongLink", b"L", b"x.txt\x00")

        def admit(run, archives):  # 1 KiB a header: room for a chain of 2,000 (tarfile recurses once a header)
            return art.admit_bytes(tar_raw(*[long_name] * run, member), declared_type="application/x-tar",
                                   policy=policy("application/x-tar", max_bytes=4_194_304, archives=archives))

        many = art.ArchivePolicy(max_entries=art.MAX_ARCHIVE_ENTRIES)
        self.assertEqual(admit(art.MAX_TAR_METADATA_RUN, many).entries, art.MAX_TAR_METADATA_RUN + 1)
        for run in (art.MAX_TAR_METADATA_RUN + 1, 2_000):
            with self.subTest(run):
                self.assertRefused("ARTIFACT_ARCHIVE_INVALID", admit, run, many)
        # Under the suite's policy (8 entries) the ninth header is past the entry budget first.
        self.assertRefused("ARTIFACT_ARCHIVE_ENTRIES", admit, 2_000, ARCHIVES)

    def test_tar_metadata_headers_are_bounded_and_well_formed(self):
        member = (b"f.txt", b"0", b"x")

        def admit(*headers, padding=b"\x00"):
            return self.admit(tar_raw(*headers, member, padding=padding), "application/x-tar")

        at_limit = pax(("comment", "y" * (art.MAX_TAR_METADATA - 14)))  # "8192 comment=" + value + newline
        self.assertEqual(len(at_limit), art.MAX_TAR_METADATA)
        self.assertEqual(admit((b"pax", b"x", at_limit)).entries, 2)
        over = pax(("comment", "y" * (art.MAX_TAR_METADATA - 13)))
        self.assertRefused("ARTIFACT_ARCHIVE_INVALID", admit, (b"pax", b"x", over))
        self.assertRefused("ARTIFACT_ARCHIVE_INVALID", admit, (b"././@LongLink", b"L", b"f.txt".ljust(8_193, b"\x00")))
        self.assertEqual(admit((b"pax", b"x", pax(("comment", "1" * art.MAX_PAX_DIGITS)))).entries, 2)
        for label, headers, padding in (
                ("a run of digits past the limit", [(b"pax", b"x", pax(("comment", "1" * (art.MAX_PAX_DIGITS + 1))))],
                 b"\x00"),
                ("digits only (quadratic to CPython 3.11.7)", [(b"pax", b"x", b"1" * 4_000)], b"\x00"),
                ("records that overlap", [(b"pax", b"x", b"2 " * 1_000 + b"k=v\n")], b"\x00"),
                ("a record without its newline", [(b"pax", b"x", b"9 comment")], b"\x00"),
                ("a record without its length", [(b"pax", b"x", b"comment=x\n")], b"\x00"),
                ("a record longer than the header", [(b"pax", b"x", b"99 comment=x\n")], b"\x00"),
                ("an empty keyword", [(b"pax", b"x", b"5 =xy\n")], b"\x00"),
                ("a size that moves the next header", [(b"pax", b"x", pax(("size", "0")))], b"\x00"),
                ("a global size", [(b"pax", b"g", pax(("size", "0")))], b"\x00"),
                ("records in the padding", [(b"pax", b"x", pax(("comment", "a")))], b"7"),
                ("a long name read past its size", [(b"././@LongLink", b"L", b"f.txt")], b"x")):
            with self.subTest(label):
                self.assertRefused("ARTIFACT_ARCHIVE_INVALID", admit, *headers, padding=padding)
        for field in (b"-0000001000\x00", b"\x80" + bytes(10) + b"\x01", b"\xff" * 12):  # negative, base-256
            with self.subTest(field):
                self.assertRefused("ARTIFACT_ARCHIVE_INVALID", self.admit,
                                   tar_header(b"f.txt", b"0", 0, size_field=field) + bytes(1_024), "application/x-tar")

    def test_the_tar_walk_skips_data_exactly_where_tarfile_does(self):
        # A folder's or a link's header carries no data blocks to tarfile, whatever its size field says:
        # the blocks after it are headers. A folder with a size is refused outright; after a link, a chain
        # hidden there is walked and seen.
        chain = b"".join(tar_header(b"././@LongLink", b"L", 6) + b"x.txt\x00".ljust(512, b"\x00")
                         for _ in range(art.MAX_TAR_METADATA_RUN + 1))
        rest = chain + tar_header(b"x.txt", b"0", 1) + b"x".ljust(512, b"\x00") + bytes(1_024)
        many = art.ArchivePolicy(max_entries=art.MAX_ARCHIVE_ENTRIES)
        for name, kind in ((b"d/", b"5"), (b"v7/", b"\x00")):
            with self.subTest(kind):
                data = tar_header(name, kind, len(chain)) + rest
                self.assertRefused("ARTIFACT_ARCHIVE_INVALID", self.admit, data, "application/x-tar", archives=many)
        fewer = art.MAX_TAR_METADATA_RUN * 1_024  # one header fewer: the link is left for tarfile to refuse
        self.assertRefused("ARTIFACT_ARCHIVE_INVALID", self.admit, tar_header(b"l", b"2", len(chain)) + rest,
                           "application/x-tar", archives=many)
        self.assertRefused("ARTIFACT_ARCHIVE_LINK", self.admit, tar_header(b"l", b"2", fewer) + rest[1_024:],
                           "application/x-tar", archives=many)

    def test_a_folder_header_with_a_size_is_refused(self):
        # GNU tar (1.34) lists past a V7 folder's size; tarfile reads the next header right after it.
        # Here GNU tar lists a symbolic link that tarfile reads as the data of a plain file.
        link = bytearray(tar_header(b"evil", b"2", 0))
        link[157:168], link[257:265], link[148:156] = b"/etc/passwd", bytes(8), b" " * 8
        link[148:156] = b"%06o\x00 " % sum(link)
        for kind in (b"\x00", b"5"):
            with self.subTest(kind):
                data = tar_header(b"d/", kind, 512) + tar_header(b"ok.txt", b"0", 512) + bytes(link) + bytes(1_024)
                self.assertRefused("ARTIFACT_ARCHIVE_INVALID", self.admit, data, "application/x-tar")
                self.assertEqual(self.admit(tar_header(b"d/", kind, 0) + bytes(1_024), "application/x-tar").entries, 1)
        # A V7 header (kind NUL) names a folder only by its final "/": without one it is a file, its data read.
        v7_file = tar_header(b"v7.txt", b"\x00", 2) + b"hi".ljust(512, b"\x00") + bytes(1_024)
        self.assertEqual(self.admit(v7_file, "application/x-tar").entries, 1)

    def test_the_tar_walk_reads_checksums_as_tarfile_does(self):
        header = bytearray(tar_header("café.txt".encode(), b"0", 1))  # bytes past 0x7f: two sums differ
        header[148:156] = b" " * 8
        rest = bytes(header[:148] + header[156:])
        for label, checksum in (("unsigned", 256 + sum(rest)),
                                ("signed", 256 + sum(byte - 256 if byte > 127 else byte for byte in rest))):
            with self.subTest(label):
                header[148:156] = b"%06o\x00 " % checksum
                data = bytes(header) + b"x".ljust(512, b"\x00")
                self.assertEqual(self.admit(data + bytes(1_024), "application/x-tar").entries, 1)
                chain = tar_raw(*[(b"././@LongLink", b"L", b"x.txt\x00")] * (art.MAX_TAR_METADATA_RUN + 1),
                                (b"x.txt", b"0", b"x"))  # read by tarfile after it: so by the walk too
                self.assertRefused("ARTIFACT_ARCHIVE_INVALID", self.admit, data + chain, "application/x-tar",
                                   archives=art.ArchivePolicy(max_entries=art.MAX_ARCHIVE_ENTRIES))
        # A header whose checksum fails ends the archive for tarfile and for the walk: what follows it
        # is bytes after the end, whatever it holds (here a chain the walk never counts).
        broken = bytearray(tar_header(b"g.txt", b"0", 0))
        broken[148:156] = b"0000000\x00"
        chain = b"".join(tar_header(b"././@LongLink", b"L", 6) + b"x.txt\x00".ljust(512, b"\x00") for _ in range(20))
        data = tar_header(b"f.txt", b"0", 1) + b"x".ljust(512, b"\x00") + bytes(broken) + chain + bytes(1_024)
        self.assertRefused("ARTIFACT_POLYGLOT", self.admit, data, "application/x-tar")

    def test_a_recursion_error_in_a_reader_is_an_archive_fault(self):
        data = tar_of([("f", b"x", tarfile.REGTYPE)])
        with mock.patch.object(art.tarfile, "open", side_effect=RecursionError):
            self.assertRefused("ARTIFACT_ARCHIVE_INVALID", self.admit, data, "application/x-tar")

    def test_encrypted_entries_cannot_be_inspected(self):
        data = bytearray(zip_of([("a", b"x")]))
        for at in (6, data.index(b"PK\x01\x02") + 8):  # both general-purpose flags
            data[at] |= 1
        self.assertRefused("ARTIFACT_ARCHIVE_ENCRYPTED", self.admit, bytes(data))

    def test_nesting_is_depth_bounded(self):
        tar = tar_of([("f", b"hello", tarfile.REGTYPE)])  # 10,240 bytes, mostly zeros
        roomy = art.ArchivePolicy(max_ratio=1_000)
        self.assertRefused("ARTIFACT_ARCHIVE_NESTED", self.admit, gz(tar), "application/gzip", archives=roomy)
        self.assertEqual(self.admit(gz(tar), "application/gzip",
                                    archives=art.ArchivePolicy(max_depth=1, max_ratio=1_000)).entries, 2)
        twice = zip_of([("in.tar.gz", gz(tar))])  # a zip, a gzip inside it, a tar inside that
        self.assertRefused("ARTIFACT_ARCHIVE_NESTED", self.admit, twice,
                           archives=art.ArchivePolicy(max_depth=1, max_ratio=1_000))
        self.assertEqual(self.admit(twice, archives=art.ArchivePolicy(max_depth=2, max_ratio=1_000)).entries, 3)
        thrice = zip_of([("in.zip", twice)])
        self.assertRefused("ARTIFACT_ARCHIVE_NESTED", self.admit, thrice,
                           archives=art.ArchivePolicy(max_depth=art.MAX_ARCHIVE_DEPTH, max_ratio=1_000))

    def test_a_nested_zip_behind_a_prefix_is_still_a_nested_archive(self):
        # unzip and zipfile find a zip by its end record, whatever comes before it (a self-extracting
        # stub, one byte): such an entry is nested, and held to its own structure.
        inner = zip_of([("../../evil.sh", b"escape")])
        for label, prefix in (("a stub", b"MZ" + bytes(62)), ("one byte", b"\x00"), ("an image", png())):
            with self.subTest(label):
                bundle = zip_of([("setup.bin", prefix + inner)])
                self.assertEqual(zipfile.ZipFile(io.BytesIO(prefix + inner)).namelist(), ["../../evil.sh"])
                self.assertRefused("ARTIFACT_ARCHIVE_NESTED", self.admit, bundle)
                self.assertRefused("ARTIFACT_POLYGLOT", self.admit, bundle,
                                   archives=art.ArchivePolicy(max_depth=1, max_ratio=1_000))
        self.assertEqual(self.admit(zip_of([("data.bin", bytes(range(256)) * 4)])).entries, 1)

    def test_methods_read_only_unbounded_are_refused(self):
        self.assertRefused("ARTIFACT_ARCHIVE_METHOD", self.admit, zip_of([("a", b"x")], compression=zipfile.ZIP_BZIP2))
        self.assertRefused("ARTIFACT_ARCHIVE_METHOD", self.admit, zip_of([("a", b"x")], compression=zipfile.ZIP_LZMA))
        self.assertEqual(self.admit(zip_of([("a", b"x")], compression=zipfile.ZIP_STORED)).entries, 1)

    def test_a_nested_archive_is_held_to_its_own_structure(self):
        roomy = art.ArchivePolicy(max_depth=1, max_ratio=1_000)
        self.assertRefused("ARTIFACT_POLYGLOT", self.admit, zip_of([("in.zip", zip_of([("a", b"a")]) + b"tail")]),
                           archives=roomy)
        self.assertRefused("ARTIFACT_POLYGLOT", self.admit, zip_of([("in.gz", gz(b"a") + b"tail")]), archives=roomy)

    def test_broken_and_padded_archives(self):
        data = bytearray(zip_of([("a", b"x" * 50)]))
        data[30 + 1 + 2] ^= 0xFF  # inside the compressed data (after the local header and the name "a")
        self.assertRefused("ARTIFACT_ARCHIVE_INVALID", self.admit, bytes(data))
        data = bytearray(zip_of([("a", b"x" * 50)]))
        data[data.index(b"PK\x01\x02") + 3] ^= 0xFF  # the directory record's signature
        self.assertRefused("ARTIFACT_MALFORMED", self.admit, bytes(data))
        self.assertRefused("ARTIFACT_ARCHIVE_INVALID", self.admit, gz(b"hello")[:-4], "application/gzip")
        self.assertRefused("ARTIFACT_POLYGLOT", self.admit, gz(b"a") + gz(b"b"), "application/gzip")
        self.assertRefused("ARTIFACT_POLYGLOT", self.admit, gz(b"a") + b"junk", "application/gzip")
        tar = tar_of([("f", b"hi", tarfile.REGTYPE)])
        self.assertRefused("ARTIFACT_POLYGLOT", self.admit, tar[:-512] + b"PK" + b"\x00" * 510, "application/x-tar")
        self.assertRefused("ARTIFACT_MALFORMED", self.admit, tar[:-1], "application/x-tar")
        bad_checksum = bytearray(tar)
        bad_checksum[148:156] = b"0000000\x00"
        self.assertRefused("ARTIFACT_ARCHIVE_INVALID", self.admit, bytes(bad_checksum), "application/x-tar")


class TestMutatedBytes(unittest.TestCase):
    def test_mutated_artifacts_are_admitted_or_refused_with_a_code(self):
        # Seeded, so every run mutates the same bytes: each answer is an Admitted or an ArtifactError.
        samples = [("image/png", png()), ("image/jpeg", jpeg()), ("image/gif", gif()), ("image/webp", webp()),
                   ("application/pdf", pdf()), ("application/zip", zip_of([("a/b", b"hello" * 20), ("c", b"x")])),
                   ("application/x-tar", tar_of([("a", b"hello", tarfile.REGTYPE)])),
                   ("application/gzip", gz(b"hello" * 50)), ("image/svg+xml", b"<svg><rect/></svg>")]
        everything = policy(*art.MEDIA_TYPES, archives=art.ArchivePolicy(max_depth=2, max_ratio=1_000))
        chance = random.Random(20_260_101)
        answers = {"admitted": 0, "refused": 0}
        for declared, data in samples:
            for _ in range(150):
                mutated = bytearray(data)
                for _ in range(chance.randint(1, 4)):
                    mutated[chance.randrange(len(mutated))] = chance.randrange(256)
                try:
                    art.admit_bytes(bytes(mutated), declared_type=declared, policy=everything)
                    answers["admitted"] += 1
                except art.ArtifactError as refusal:
                    self.assertIn(refusal.code, art.ARTIFACT_CATALOG)
                    answers["refused"] += 1
        self.assertEqual(sum(answers.values()), 150 * len(samples))
        self.assertGreater(answers["refused"], 0)


# ============================================================================================
# 8. References
# ============================================================================================


class TestReferences(Refusals):
    def test_a_reference_has_exactly_five_members(self):
        admitted = art.admit_bytes(png(), declared_type="image/png", policy=ALL_PLAIN)
        built = art.reference(admitted, kind="blob")
        self.assertEqual(built, {"kind": "blob", "media_type": "image/png", "size": len(png()),
                                 "sha256": admitted.sha256, "access": None})
        self.assertTrue(art.is_reference(built))
        token = art.mint_access(KEYS, principal=ALICE, call_id="call-1", sha256=admitted.sha256, now=NOW)
        self.assertTrue(art.is_reference(art.reference(admitted, kind="file", access=token)))

    def test_is_reference_refuses_every_other_shape(self):
        good = {"kind": "url", "media_type": "text/plain", "size": 3, "sha256": SHA, "access": None}
        for change in ({"extra": 1}, {"kind": "link"}, {"media_type": "Text/Plain"}, {"size": True}, {"size": -1},
                       {"size": art.MAX_ARTIFACT_BYTES + 1}, {"sha256": SHA.upper()}, {"sha256": SHA[:-1]},
                       {"access": "token"}, {"access": 1}):
            with self.subTest(change):
                self.assertFalse(art.is_reference({**good, **change}))
        self.assertFalse(art.is_reference({key: value for key, value in good.items() if key != "access"}))
        self.assertTrue(art.is_reference({**good, "size": art.MAX_ARTIFACT_BYTES}))
        self.assertFalse(art.is_reference([good]))

    def test_reference_needs_admitted_bytes_and_a_known_kind(self):
        admitted = art.admit_bytes(b"x", declared_type="text/plain", policy=ALL_PLAIN)
        self.assertRefused("ARTIFACT_REFERENCE_INVALID", art.reference, admitted, kind="path")
        self.assertRefused("ARTIFACT_REFERENCE_INVALID", art.reference, admitted, kind="blob", access="forged")
        self.assertRefused("ARTIFACT_REFERENCE_INVALID", art.reference, {"media_type": "text/plain"}, kind="blob")

    def test_the_schemas_compile_in_the_core_contract_language(self):
        compiled = td.compile_schema(td.json_copy(dict(art.REFERENCE_SCHEMA)))
        reference = {"kind": "blob", "media_type": "image/png", "size": 1, "sha256": SHA, "access": None}
        compiled.check(reference)
        with self.assertRaises(td.BoundaryError) as caught:
            compiled.check({**reference, "data": "iVBORw0KGgo="})
        self.assertEqual(caught.exception.code, "VALUE_FIELDS")
        cursor = td.compile_schema({"type": "object", "properties": {"cursor": td.json_copy(dict(art.CURSOR_SCHEMA))},
                                    "additionalProperties": False})
        cursor.check({"cursor": None})
        cursor.check({"cursor": art.mint_cursor(KEYS, principal=ALICE, tool="t", arguments={}, position=5, now=NOW)})


# ============================================================================================
# 9. Keys and tokens, 10. Access references
# ============================================================================================


class TestKeys(Refusals):
    def test_key_length_both_sides(self):
        for size in (art.MIN_KEY_BYTES, art.MAX_KEY_BYTES):
            self.assertEqual(len(art.ArtifactKeys("k", {"k": b"k" * size}).secrets["k"]), size)
        for size in (art.MIN_KEY_BYTES - 1, art.MAX_KEY_BYTES + 1):
            self.assertRefused("ARTIFACT_KEYS_INVALID", art.ArtifactKeys, "k", {"k": b"k" * size})

    def test_key_count_and_ids(self):
        many = {f"k{n}": b"k" * 32 for n in range(art.MAX_KEYS)}
        self.assertEqual(len(art.ArtifactKeys("k0", many).secrets), art.MAX_KEYS)
        self.assertRefused("ARTIFACT_KEYS_INVALID", art.ArtifactKeys, "k0", {**many, "extra": b"k" * 32})
        for current, secrets in (("K1", {"K1": b"k" * 32}), ("sk-1", {"sk-1": b"k" * 32}), ("k2", {"k1": b"k" * 32}),
                                 ("k1", {}), ("k1", {"k1": "k" * 32}), ("k" * 17, {"k" * 17: b"k" * 32})):
            with self.subTest(current):
                self.assertRefused("ARTIFACT_KEYS_INVALID", art.ArtifactKeys, current, secrets)

    def test_keys_are_copied_and_never_printed(self):
        secrets = {"k1": b"s" * 32}
        keys = art.ArtifactKeys("k1", secrets)
        secrets["k1"] = b"t" * 32
        self.assertEqual(keys.secrets["k1"], b"s" * 32)
        self.assertNotIn("sss", repr(keys))


class TestAccess(Refusals):
    def mint(self, **changes):
        return art.mint_access(KEYS, **{"principal": ALICE, "call_id": "call-1", "sha256": SHA, "now": NOW, **changes})

    def open(self, token, **changes):
        return art.open_access(KEYS, token, **{"principal": ALICE, "call_id": "call-1", "sha256": SHA,
                                               "now": NOW, **changes})

    def test_round_trip_until_the_expiry(self):
        token = self.mint(lifetime=60)
        self.assertEqual(self.open(token, now=NOW + 59), NOW + 60)
        self.assertRefused("ACCESS_EXPIRED", self.open, token, now=NOW + 60)

    def test_token_text_is_bounded_ascii_and_names_no_one(self):
        token = self.mint()
        self.assertTrue(token.isascii() and len(token) <= art.MAX_TOKEN_LENGTH)
        for word in ("tenant-a", "alice", "call-1", SHA[:16]):
            self.assertNotIn(word, token)
        self.assertFalse(td.is_secret_text(token))

    def test_each_binding_has_its_own_code_once_the_mac_holds(self):
        token = self.mint()
        self.assertRefused("ACCESS_OTHER_PRINCIPAL", self.open, token, principal=BOB)
        self.assertRefused("ACCESS_OTHER_PRINCIPAL", self.open, token,
                           principal=td.Principal("tenant-b", "alice", ("files.read",)))
        self.assertEqual(self.open(token, principal=td.Principal("tenant-a", "alice", ())), NOW + 300)  # roles unbound
        self.assertRefused("ACCESS_OTHER_CALL", self.open, token, call_id="call-2")
        self.assertRefused("ACCESS_OTHER_ARTIFACT", self.open, token, sha256="cd" * 32)

    def test_forged_malformed_and_unknown_key_are_one_code(self):
        token = self.mint()
        parts = token.split(".")
        forgeries = [
            token[:-1] + ("0" if token[-1] != "0" else "1"),  # the MAC
            ".".join([*parts[:2], str(NOW + 10_000), *parts[3:]]),  # a later expiry
            ".".join([*parts[:2], "0" + parts[2], *parts[3:]]),  # the same expiry spelled twice
            ".".join([parts[0], "k9", *parts[2:]]),  # a key this host never had
            token + "0", token.upper(), "", None, 7, "x" * 300,
            art.mint_cursor(KEYS, principal=ALICE, tool="t", arguments={}, position=0, now=NOW),
        ]
        for forged in forgeries:
            with self.subTest(forged):
                self.assertRefused("ACCESS_INVALID", self.open, forged)
        # A forgery for another principal still answers ACCESS_INVALID: no binding is read before the MAC.
        self.assertRefused("ACCESS_INVALID", self.open, forgeries[0], principal=BOB)

    def test_rotation_keeps_old_tokens_until_their_key_is_dropped(self):
        old = art.ArtifactKeys("k1", {"k1": b"1" * 32})
        token = art.mint_access(old, principal=ALICE, call_id="c", sha256=SHA, now=NOW)
        rotated = art.ArtifactKeys("k2", {"k1": b"1" * 32, "k2": b"2" * 32})
        self.assertEqual(art.open_access(rotated, token, principal=ALICE, call_id="c", sha256=SHA, now=NOW), NOW + 300)
        minted = art.mint_access(rotated, principal=ALICE, call_id="c", sha256=SHA, now=NOW)
        self.assertEqual(minted.split(".")[:2], ["av1", "k2"])
        dropped = art.ArtifactKeys("k2", {"k2": b"2" * 32})
        self.assertRefused("ACCESS_INVALID", art.open_access, dropped, token, principal=ALICE, call_id="c",
                           sha256=SHA, now=NOW)
        same_id_other_key = art.ArtifactKeys("k1", {"k1": b"3" * 32})
        self.assertRefused("ACCESS_INVALID", art.open_access, same_id_other_key, token, principal=ALICE,
                           call_id="c", sha256=SHA, now=NOW)

    def test_lifetime_both_sides(self):
        self.assertEqual(self.open(self.mint(lifetime=1)), NOW + 1)
        self.assertEqual(self.open(self.mint(lifetime=art.MAX_ACCESS_LIFETIME)), NOW + art.MAX_ACCESS_LIFETIME)
        self.assertRefused("ACCESS_LIFETIME_INVALID", self.mint, lifetime=0)
        self.assertRefused("ACCESS_LIFETIME_INVALID", self.mint, lifetime=art.MAX_ACCESS_LIFETIME + 1)

    def test_host_values_are_checked(self):
        self.assertRefused("ACCESS_INVALID", self.mint, call_id="")
        self.assertRefused("ACCESS_INVALID", self.mint, sha256=SHA.upper())
        self.assertRefused("ARTIFACT_KEYS_INVALID", art.mint_access, None, principal=ALICE, call_id="c", sha256=SHA,
                           now=NOW)
        for bad, code in (({"now": -1}, "CONTEXT_INVALID"), ({"principal": "alice"}, "PRINCIPAL_INVALID")):
            with self.subTest(code), self.assertRaises(td.BoundaryError) as caught:
                self.mint(**bad)
            self.assertEqual(caught.exception.code, code)

    def test_tokens_never_take_a_secret_shape(self):
        for seed in range(200):
            keys = art.ArtifactKeys("z9", {"z9": seed.to_bytes(2, "big") * 16})
            token = art.mint_access(keys, principal=ALICE, call_id=f"c{seed}", sha256=SHA, now=NOW)
            self.assertFalse(td.is_secret_text(token))



# ============================================================================================
# 11. Page cursors
# ============================================================================================


class TestCursors(Refusals):
    ARGS = {"folder": "docs", "cursor": None}

    def mint(self, **changes):
        return art.mint_cursor(KEYS, **{"principal": ALICE, "tool": "list_files", "arguments": self.ARGS,
                                        "position": 3, "now": NOW, **changes})

    def open(self, cursor, **changes):
        return art.open_cursor(KEYS, cursor, **{"principal": ALICE, "tool": "list_files", "arguments": self.ARGS,
                                                "now": NOW, **changes})

    def test_round_trip_ignores_the_cursor_field_itself(self):
        cursor = self.mint(lifetime=10)
        self.assertEqual(self.open(cursor, arguments={"folder": "docs", "cursor": cursor}), 3)
        self.assertEqual(self.open(cursor, arguments={"folder": "docs"}, now=NOW + 9), 3)
        self.assertRefused("PAGE_CURSOR_EXPIRED", self.open, cursor, now=NOW + 10)

    def test_bound_to_the_principal_tool_and_arguments(self):
        cursor = self.mint()
        self.assertRefused("PAGE_CURSOR_OTHER_PRINCIPAL", self.open, cursor, principal=BOB)
        self.assertRefused("PAGE_CURSOR_OTHER_QUERY", self.open, cursor, arguments={"folder": "other"})
        self.assertRefused("PAGE_CURSOR_OTHER_QUERY", self.open, cursor, arguments={"folder": "docs", "limit": 1})
        self.assertRefused("PAGE_CURSOR_OTHER_QUERY", self.open, cursor, tool="list_mail")

    def test_forged_cursors_are_one_code(self):
        cursor = self.mint()
        parts = cursor.split(".")
        for forged in (".".join([*parts[:3], "0", *parts[4:]]), ".".join([*parts[:3], "03", *parts[4:]]),
                       cursor[:-1] + ("0" if cursor[-1] != "0" else "1"), "", None, cursor + "x",
                       art.mint_access(KEYS, principal=ALICE, call_id="c", sha256=SHA, now=NOW)):
            with self.subTest(forged):
                self.assertRefused("PAGE_CURSOR_INVALID", self.open, forged)

    def test_cursor_text_names_no_one(self):
        cursor = self.mint(arguments={"folder": "secret-folder"})
        self.assertTrue(cursor.isascii() and len(cursor) <= art.MAX_TOKEN_LENGTH)
        for word in ("alice", "tenant-a", "secret-folder", "list_files"):
            self.assertNotIn(word, cursor)

    def test_position_and_lifetime_bounds(self):
        self.assertEqual(self.open(self.mint(position=art.MAX_POSITION)), art.MAX_POSITION)
        self.assertRefused("PAGE_CURSOR_STALE", self.mint, position=art.MAX_POSITION + 1)
        self.assertRefused("PAGE_CURSOR_STALE", self.mint, position=-1)
        self.assertEqual(self.open(self.mint(lifetime=art.MAX_CURSOR_LIFETIME)), 3)
        self.assertRefused("PAGE_LIFETIME_INVALID", self.mint, lifetime=art.MAX_CURSOR_LIFETIME + 1)
        self.assertRefused("PAGE_LIFETIME_INVALID", self.mint, lifetime=0)
        self.assertRefused("PAGE_ARGUMENTS_INVALID", self.mint, arguments={"x": float("nan")})
        self.assertRefused("PAGE_ARGUMENTS_INVALID", self.mint, arguments=["docs"])

    def test_page_of_walks_a_list(self):
        items = list(range(7))
        seen, cursor = [], None
        while True:
            page = art.page_of(items, keys=KEYS, principal=ALICE, tool="list_files", now=NOW, page_size=3,
                               arguments={"folder": "docs", "cursor": cursor})
            seen.append((page.position, page.items))
            cursor = page.next_cursor
            if cursor is None:
                break
        self.assertEqual(seen, [(0, [0, 1, 2]), (3, [3, 4, 5]), (6, [6])])

    def test_page_of_needs_a_mapping_of_arguments(self):
        for arguments in (["cursor", None], None, "cursor"):
            with self.subTest(arguments):
                self.assertRefused("PAGE_ARGUMENTS_INVALID", art.page_of, [1, 2], keys=KEYS, principal=ALICE,
                                   tool="t", arguments=arguments, now=NOW)

    def test_page_size_both_sides(self):
        items = list(range(art.MAX_PAGE_SIZE + 1))
        for size in (art.MIN_PAGE_SIZE, art.MAX_PAGE_SIZE):
            page = art.page_of(items, keys=KEYS, principal=ALICE, tool="t", arguments={}, now=NOW, page_size=size)
            self.assertEqual(len(page.items), size)
        for size in (art.MIN_PAGE_SIZE - 1, art.MAX_PAGE_SIZE + 1, True):
            self.assertRefused("PAGE_SIZE_INVALID", art.page_of, items, keys=KEYS, principal=ALICE, tool="t",
                               arguments={}, now=NOW, page_size=size)
        last = art.page_of(items[:3], keys=KEYS, principal=ALICE, tool="t", arguments={}, now=NOW, page_size=3)
        self.assertEqual((last.items, last.next_cursor), ([0, 1, 2], None))

    def test_a_cursor_past_a_shrunken_list_is_stale(self):
        cursor = art.mint_cursor(KEYS, principal=ALICE, tool="t", arguments={}, position=3, now=NOW)
        self.assertRefused("PAGE_CURSOR_STALE", art.page_of, [1, 2, 3], keys=KEYS, principal=ALICE, tool="t",
                           arguments={"cursor": cursor}, now=NOW)
        self.assertEqual(art.page_of([1, 2, 3, 4], keys=KEYS, principal=ALICE, tool="t", arguments={"cursor": cursor},
                                     now=NOW).items, [4])


# ============================================================================================
# The whole path: a tool behind the core's dispatcher
# ============================================================================================

CHART = png(png_chunk(b"tEXt", b"Title\x00Quarterly revenue"))
PNG_ONLY = policy("image/png", max_bytes=4_096)
EXPORT = td.declare_tool(
    "export_chart", description="Renders a chart and returns it as an artifact.", effect="read",
    required_role="files.read",
    input_schema={"type": "object", "properties": {"name": {"type": "string", "maxLength": 32}},
                  "required": ["name"], "additionalProperties": False},
    output_schema={"type": "object", "properties": {"chart": td.json_copy(dict(art.REFERENCE_SCHEMA))}, "required": ["chart"],
                   "additionalProperties": False})
LISTING = td.declare_tool(
    "list_files", description="Lists a folder's files, a page at a time.", effect="read", required_role="files.read",
    input_schema={"type": "object", "properties": {"folder": {"type": "string", "maxLength": 32},
                                                   "cursor": td.json_copy(dict(art.CURSOR_SCHEMA))},
                  "required": ["folder"], "additionalProperties": False},
    output_schema={"type": "object", "properties": {
        "files": {"type": "array", "items": {"type": "string", "maxLength": 32}, "maxItems": art.MAX_PAGE_SIZE},
        "next_cursor": td.json_copy(dict(art.CURSOR_SCHEMA))}, "required": ["files", "next_cursor"], "additionalProperties": False})
REGISTRY = td.declare_contracts(EXPORT, LISTING)
FILES = [f"report-{n}.pdf" for n in range(7)]


class TestThroughTheDispatcher(unittest.TestCase):
    def setUp(self):
        self.refusals = []
        self.dispatcher = td.Dispatcher(registry=REGISTRY, seal_keys=SEAL_KEYS, hooks={
            "export_chart": td.ToolHooks(execute=self.export_chart),
            "list_files": td.ToolHooks(execute=self.list_files)})
        self.calls = 0

    def export_chart(self, call):
        admitted = art.admit_bytes(CHART, declared_type="image/png", policy=PNG_ONLY)
        access = art.mint_access(KEYS, principal=call.principal, call_id=call.call_id,
                                 sha256=admitted.sha256, now=call.now)
        return td.Execution({"chart": art.reference(admitted, kind="blob", access=access)}, "none")

    def list_files(self, call):
        try:
            page = art.page_of(FILES, keys=KEYS, principal=call.principal, tool=call.tool, arguments=call.arguments,
                               now=call.now, page_size=3)
        except art.ArtifactError as refusal:  # the host keeps the code; the model hears TOOL_FAILED
            self.refusals.append(refusal.code)
            return td.Execution(None, "not_committed")
        return td.Execution({"files": page.items, "next_cursor": page.next_cursor}, "none")

    def dispatch(self, proposal, principal=ALICE):
        self.calls += 1
        context = td.CallContext("OpenAI", "Responses", "openai-responses-v1", f"resp-{self.calls}",
                                 f"call-{self.calls}", f"op-{self.calls}")
        package = self.dispatcher.dispatch(proposal, context, principal, now=NOW, deadline=NOW + 10)
        return context, package

    def verify(self, package, context=None):
        td.verify_package(package, context=context, registry=REGISTRY, seal_keys=SEAL_KEYS, require_seal=True)

    def assertPackageRefused(self, code, package):
        with self.assertRaises(td.BoundaryError) as caught:
            self.verify(package)
        self.assertEqual(caught.exception.code, code)

    def test_the_model_sees_only_the_reference(self):
        context, package = self.dispatch({"name": "export_chart", "arguments": {"name": "q3"}})
        self.verify(package, context)
        result = package["model_result"]
        self.assertEqual(result["status"], "ok")
        chart = result["data"]["chart"]
        self.assertTrue(art.is_reference(chart))
        self.assertEqual((chart["kind"], chart["media_type"], chart["size"]), ("blob", "image/png", len(CHART)))
        text = td.model_result_text(package)
        for leaked in ("Quarterly", "IHDR", "tenant-a", "alice", KEYS.secrets["k1"].hex()):
            self.assertNotIn(leaked, text)
        # The host (never the model) opens the access for this very call.
        self.assertEqual(art.open_access(KEYS, chart["access"], principal=ALICE, call_id=context.call_id,
                                         sha256=chart["sha256"], now=NOW + 1), NOW + art.DEFAULT_ACCESS_LIFETIME)
        with self.assertRaises(art.ArtifactError) as caught:
            art.open_access(KEYS, chart["access"], principal=ALICE, call_id="call-2", sha256=chart["sha256"], now=NOW)
        self.assertEqual(caught.exception.code, "ACCESS_OTHER_CALL")

    def test_a_changed_reference_breaks_the_package(self):
        _context, package = self.dispatch({"name": "export_chart", "arguments": {"name": "q3"}})
        for member, value in (("sha256", "cd" * 32), ("size", 1), ("access", None)):
            with self.subTest(member):
                changed = copy.deepcopy(package)
                changed["model_result"]["data"]["chart"][member] = value
                self.assertPackageRefused("RESULT_DIGEST_MISMATCH", changed)

    def test_the_seal_covers_the_reference_even_with_digests_recomputed(self):
        _context, package = self.dispatch({"name": "export_chart", "arguments": {"name": "q3"}})
        changed = copy.deepcopy(package)
        changed["model_result"]["data"]["chart"]["sha256"] = "cd" * 32
        audit = changed["protected_audit"]
        _request, audit["result_sha256"], audit["call_binding_sha256"] = td.package_digests(changed)
        self.assertPackageRefused("SEAL_MISMATCH", changed)

    def test_the_audit_log_chains_the_reference(self):
        _context, package = self.dispatch({"name": "export_chart", "arguments": {"name": "q3"}})
        stream = io.BytesIO()
        log = td.AuditLog(stream, seal_keys=SEAL_KEYS)
        log.append(package)
        log.close()
        data = stream.getvalue()
        report = td.verify_audit_log(data, seal_keys=SEAL_KEYS, require_seal=True)
        self.assertEqual((report.entries, report.sealed), (1, True))
        sha = package["model_result"]["data"]["chart"]["sha256"].encode()
        self.assertEqual(data.count(sha), 1)  # the model_result's data: the audit keeps no copy of it
        with self.assertRaises(td.BoundaryError) as caught:
            td.verify_audit_log(data.replace(sha, b"cd" * 32), seal_keys=SEAL_KEYS, require_seal=True)
        self.assertEqual((caught.exception.code, caught.exception.at), ("AUDIT_ENTRY_EDITED", "entries[0]"))

    def test_a_refused_artifact_never_reaches_the_model(self):
        self.dispatcher = td.Dispatcher(registry=REGISTRY, hooks={"export_chart": td.ToolHooks(
            execute=lambda call: td.Execution({"chart": art.reference(art.admit_bytes(
                png() + zip_of([("a", b"a")]), declared_type="image/png", policy=PNG_ONLY), kind="blob")}, "none")),
            "list_files": td.ToolHooks(execute=self.list_files)})
        _context, package = self.dispatch({"name": "export_chart", "arguments": {"name": "q3"}})
        self.assertEqual(package["model_result"]["error"]["code"], "HANDLER_FAILED")
        self.assertNotIn("data", package["model_result"])

    def test_a_cursor_round_trips_for_the_next_page(self):
        first_context, first = self.dispatch({"name": "list_files", "arguments": {"folder": "docs"}})
        self.verify(first, first_context)
        self.assertEqual(first["model_result"]["data"]["files"], FILES[:3])
        cursor = first["model_result"]["data"]["next_cursor"]
        _context, second = self.dispatch({"name": "list_files", "arguments": {"folder": "docs", "cursor": cursor}})
        self.verify(second)
        self.assertEqual(second["model_result"]["data"]["files"], FILES[3:6])
        cursor = second["model_result"]["data"]["next_cursor"]
        _context, third = self.dispatch({"name": "list_files", "arguments": {"folder": "docs", "cursor": cursor}})
        self.assertEqual(third["model_result"]["data"], {"files": FILES[6:], "next_cursor": None})
        self.assertEqual(self.refusals, [])

    def test_a_cursor_is_refused_for_another_principal_or_other_arguments(self):
        _context, first = self.dispatch({"name": "list_files", "arguments": {"folder": "docs"}})
        cursor = first["model_result"]["data"]["next_cursor"]
        codes = []
        for principal, arguments in ((BOB, {"folder": "docs", "cursor": cursor}),
                                     (ALICE, {"folder": "other", "cursor": cursor}),
                                     (ALICE, {"folder": "docs", "cursor": cursor[:-1] + "x"})):
            _context, package = self.dispatch({"name": "list_files", "arguments": arguments}, principal)
            self.verify(package)
            codes.append(package["model_result"]["error"]["code"])
        # The last never reached the hook: a cursor's shape is part of the input contract.
        self.assertEqual(codes, ["TOOL_FAILED", "TOOL_FAILED", "INVALID_ARGUMENTS"])
        self.assertEqual(self.refusals, ["PAGE_CURSOR_OTHER_PRINCIPAL", "PAGE_CURSOR_OTHER_QUERY"])


if __name__ == "__main__":
    unittest.main()
