"""Artifacts: files, URLs and binary objects a tool returns, seen by the model only as a reference.

A tool behind the boundary may produce bytes (an image, a PDF, an export). The model never sees
them: the tool's output carries an artifact reference, exactly

    {"kind": "file"|"url"|"blob", "media_type": ..., "size": ..., "sha256": ..., "access": null|token}

inside its output contract (REFERENCE_SCHEMA), so the core's result digest, the package seal and
the audit chain cover it. Before a reference exists, the bytes pass admit_bytes: their size, their
own signature against the declared type, a per-tool allowlist, polyglots, active content, and
archives opened in memory with bounds. The access token and the page cursor are short-lived keyed
tokens (HMAC-SHA256, one primitive, a domain per purpose) bound to the trusted principal.

What this module never does: write to disk, reach a network, put a byte of an artifact, a
principal or a key into a token or a message, recurse over untrusted input (archives are walked
with a work list), or rely on a bare ``assert``. Signature sniffing is not a parser: a valid PNG
can still carry a payload in a chunk (README.md, the threat table).

Sections, in the order bytes flow:
    1. Limits and constants      5. Polyglots             9. Keys and tokens
    2. Errors                    6. Active content       10. Access references
    3. Media types and policy    7. Archives             11. Page cursors
    4. Sniffing                  8. Admission and references
"""
from __future__ import annotations

import bisect
import contextlib
import hashlib
import hmac
import html
import io
import re
import struct
import sys
import tarfile
import unicodedata
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Final, Iterator, Mapping, NamedTuple, Sequence

_HERE: Final = Path(__file__).resolve().parent
if not __package__:  # by path from a checkout: the repository root (the core) and this folder
    for _path in (str(_HERE.parent), str(_HERE)):
        if _path not in sys.path:
            sys.path.insert(0, _path)

import tool_dispatcher as td  # noqa: E402

__all__ = [
    "MAX_ARTIFACT_BYTES", "SNIFF_HEAD", "MAX_TOKEN_LENGTH", "MIN_KEY_BYTES", "MAX_KEY_BYTES", "MAX_KEYS",
    "DEFAULT_ACCESS_LIFETIME", "MAX_ACCESS_LIFETIME", "DEFAULT_CURSOR_LIFETIME", "MAX_CURSOR_LIFETIME",
    "MIN_PAGE_SIZE", "MAX_PAGE_SIZE", "DEFAULT_PAGE_SIZE", "MAX_POSITION", "CURSOR_FIELD",
    "MAX_ARCHIVE_ENTRIES", "MAX_ARCHIVE_TOTAL", "MAX_ARCHIVE_RATIO", "MAX_ARCHIVE_DEPTH", "MAX_ENTRY_NAME",
    "MAX_TAR_METADATA", "MAX_TAR_METADATA_RUN", "MAX_PAX_DIGITS",
    "KINDS", "MEDIA_TYPES", "ARCHIVE_TYPES", "MARKUP_TYPES", "TEXT_TYPES",
    "ARTIFACT_CATALOG", "ArtifactError", "MediaType", "ArchivePolicy", "MediaPolicy", "Admitted", "sniff",
    "admit_bytes",
    "REFERENCE_SCHEMA", "ACCESS_PATTERN", "CURSOR_PATTERN", "CURSOR_SCHEMA", "reference", "is_reference",
    "ArtifactKeys", "mint_access", "open_access",
    "mint_cursor", "open_cursor", "Page", "page_of",
]

# ============================================================================================
# 1. Limits and constants
# ============================================================================================

MAX_ARTIFACT_BYTES: Final = 16_777_216  # the ceiling of any policy: an artifact is held in memory whole
SNIFF_HEAD: Final = 1_024  # bytes PDF readers search for their header: a second format's start counts there
MAX_TOKEN_LENGTH: Final = 256  # characters of an access token or a cursor: both fit far below it
MIN_KEY_BYTES: Final = 32  # HMAC-SHA256 keys no shorter than its output (as the core's seal keys)
MAX_KEY_BYTES: Final = 64  # SHA-256's block: a longer key is hashed first and gains nothing
MAX_KEYS: Final = 16  # the current key and those rotated out, still accepted
DEFAULT_ACCESS_LIFETIME: Final = 300  # seconds: the host fetches an artifact right after the call
MAX_ACCESS_LIFETIME: Final = 3_600  # an hour at most: a leaked reference dies soon
DEFAULT_CURSOR_LIFETIME: Final = 600  # seconds: a model asks for the next page within its turn or the next
MAX_CURSOR_LIFETIME: Final = 3_600
MIN_PAGE_SIZE: Final = 1
MAX_PAGE_SIZE: Final = 100  # items on one page: a page must fit one tool output (the core's MAX_OUTPUT_NODES)
DEFAULT_PAGE_SIZE: Final = 20
MAX_POSITION: Final = 9_999_999  # a cursor's position: seven digits, far beyond any listing a tool pages
CURSOR_FIELD: Final = "cursor"  # the input field a paged tool reads its cursor from
# Archives, when a policy opens them at all: the ceilings a policy's own bounds stay under.
MAX_ARCHIVE_ENTRIES: Final = 4_096  # entries across every level: each costs a header parse
MAX_ARCHIVE_TOTAL: Final = 67_108_864  # uncompressed bytes read across every level, in memory
MAX_ARCHIVE_RATIO: Final = 1_000  # uncompressed / compressed of one entry: past it, a decompression bomb
MAX_ARCHIVE_DEPTH: Final = 2  # archives inside archives: .tar.gz is one level, more is rarely honest
MAX_ENTRY_NAME: Final = 255  # characters of an entry name: a file name on common file systems
MAX_TAR_METADATA: Final = 8_192  # bytes of one pax or GNU long-name header: a 4 KiB path (PATH_MAX) and its records
MAX_TAR_METADATA_RUN: Final = 8  # such headers before one member: writers use at most four (g, x, K, L); tarfile
#                                  reads each one by recursion
MAX_PAX_DIGITS: Final = 32  # digits in a row in a pax header: a record's number needs at most 20; a longer run makes
#                             the pax parse of CPython before 3.11.10 quadratic (CVE-2024-6232)
READ_CHUNK: Final = 65_536  # bytes one bounded read asks for

KINDS: Final = frozenset({"file", "url", "blob"})
TOKEN_VERSION: Final = "v1"
ACCESS_DOMAIN: Final = "tool-dispatcher/artifact-access/v1"
CURSOR_DOMAIN: Final = "tool-dispatcher/page-cursor/v1"
BINDING_DOMAIN: Final = "tool-dispatcher/artifact-binding/v1"
KEY_ID: Final = re.compile(r"[a-z0-9]{1,16}")  # no capital, no '-': a token never takes a secret's shape
BINDING_HEX: Final = 32  # hex characters of a keyed binding digest in a token: 128 bits

# ============================================================================================
# 2. Errors
# ============================================================================================

ARTIFACT_CATALOG: Final = MappingProxyType({
    **td.error_specs(
        "artifact", False,
        ARTIFACT_POLICY_INVALID="The artifact policy is not valid.",
        ARTIFACT_TYPE_UNSUPPORTED="The declared media type is not one this layer knows.",
        ARTIFACT_TYPE_NOT_ALLOWED="This tool may not return artifacts of the declared media type.",
        ARTIFACT_EMPTY="The artifact holds no bytes.",
        ARTIFACT_TOO_LARGE="The artifact exceeds its size limit.",
        ARTIFACT_TYPE_UNKNOWN="The artifact's bytes match no known media type.",
        ARTIFACT_TYPE_MISMATCH="The artifact's bytes are not of its declared media type.",
        ARTIFACT_MALFORMED="The artifact's bytes do not hold the structure their media type requires.",
        ARTIFACT_POLYGLOT="The artifact's bytes can be read as more than one format.",
        ARTIFACT_TEXT_INVALID="The artifact is not valid UTF-8 text without control characters.",
        ARTIFACT_JSON_INVALID="The artifact is not strict JSON.",
        ARTIFACT_ACTIVE_CONTENT="The artifact holds active content (script, event handlers, external loads).",
        ARTIFACT_ARCHIVE_INVALID="The archive cannot be read.",
        ARTIFACT_ARCHIVE_ENTRIES="The archive holds more entries than its limit.",
        ARTIFACT_ARCHIVE_TOO_LARGE="The archive's contents exceed their size limit.",
        ARTIFACT_ARCHIVE_RATIO="An archive entry expands past its compression ratio limit.",
        ARTIFACT_ARCHIVE_NAME="An archive entry's name is not a plain relative path.",
        ARTIFACT_ARCHIVE_LINK="The archive holds a link entry.",
        ARTIFACT_ARCHIVE_SPECIAL="The archive holds an entry that is neither a file nor a folder.",
        ARTIFACT_ARCHIVE_DUPLICATE="The archive holds two entries with the same name.",
        ARTIFACT_ARCHIVE_NESTED="The archive holds archives nested deeper than its limit.",
        ARTIFACT_ARCHIVE_ENCRYPTED="The archive holds an encrypted entry, which cannot be inspected.",
        ARTIFACT_ARCHIVE_METHOD="The archive holds an entry compressed by a method read here only unbounded.",
        ARTIFACT_REFERENCE_INVALID="The artifact reference is not valid.",
        ARTIFACT_KEYS_INVALID="The artifact keys are not valid.",
    ),
    **td.error_specs(
        "access", False,
        ACCESS_INVALID="The access reference is not valid.",
        ACCESS_EXPIRED="The access reference has expired.",
        ACCESS_OTHER_PRINCIPAL="The access reference was issued to another caller.",
        ACCESS_OTHER_CALL="The access reference was issued for another call.",
        ACCESS_OTHER_ARTIFACT="The access reference was issued for another artifact.",
        ACCESS_LIFETIME_INVALID="The access lifetime is outside its bounds.",
    ),
    **td.error_specs(
        "page", False,
        PAGE_CURSOR_INVALID="The page cursor is not valid.",
        PAGE_CURSOR_EXPIRED="The page cursor has expired.",
        PAGE_CURSOR_OTHER_PRINCIPAL="The page cursor was issued to another caller.",
        PAGE_CURSOR_OTHER_QUERY="The page cursor was issued for another tool or other arguments.",
        PAGE_CURSOR_STALE="The page cursor points past the end of the results.",
        PAGE_SIZE_INVALID="The page size is outside its bounds.",
        PAGE_ARGUMENTS_INVALID="The paged call's arguments are not a JSON object.",
        PAGE_LIFETIME_INVALID="The cursor lifetime is outside its bounds.",
    ),
})


class ArtifactError(td.CatalogError):
    """This layer's error: a stable code from ARTIFACT_CATALOG and its fixed message."""

    CATALOG = ARTIFACT_CATALOG


# ============================================================================================
# 3. Media types and policy
# ============================================================================================


class MediaType(NamedTuple):
    family: str  # "binary", "archive", "text" or "markup": which checks its bytes go through
    sniffed_as: str  # what sniff() answers for bytes of this type (JSON is text to a sniffer)


MEDIA_TYPES: Final[Mapping[str, MediaType]] = MappingProxyType({
    "image/png": MediaType("binary", "image/png"),
    "image/jpeg": MediaType("binary", "image/jpeg"),
    "image/gif": MediaType("binary", "image/gif"),
    "image/webp": MediaType("binary", "image/webp"),
    "application/pdf": MediaType("binary", "application/pdf"),
    "application/zip": MediaType("archive", "application/zip"),
    "application/gzip": MediaType("archive", "application/gzip"),
    "application/x-tar": MediaType("archive", "application/x-tar"),
    "text/plain": MediaType("text", "text/plain"),
    "application/json": MediaType("text", "text/plain"),
    "image/svg+xml": MediaType("markup", "image/svg+xml"),
    "text/html": MediaType("markup", "text/html"),
})
ARCHIVE_TYPES: Final = frozenset(name for name, kind in MEDIA_TYPES.items() if kind.family == "archive")
MARKUP_TYPES: Final = frozenset(name for name, kind in MEDIA_TYPES.items() if kind.family == "markup")
TEXT_TYPES: Final = frozenset(name for name, kind in MEDIA_TYPES.items() if kind.family == "text")


@dataclass(frozen=True, slots=True, kw_only=True)
class ArchivePolicy:
    """How an archive is opened, when a tool's policy opens archives at all."""

    max_entries: int = 64
    max_total_bytes: int = 8_388_608
    max_ratio: int = 100
    max_depth: int = 0  # 0: an archive inside an archive is refused

    def __post_init__(self) -> None:
        if not (_count_in(self.max_entries, 1, MAX_ARCHIVE_ENTRIES)
                and _count_in(self.max_total_bytes, 1, MAX_ARCHIVE_TOTAL)
                and _count_in(self.max_ratio, 1, MAX_ARCHIVE_RATIO)
                and _count_in(self.max_depth, 0, MAX_ARCHIVE_DEPTH)):
            raise ArtifactError("ARTIFACT_POLICY_INVALID")


@dataclass(frozen=True, slots=True, kw_only=True)
class MediaPolicy:
    """One tool's allowlist: the media types it may return, its byte limit, whether markup and
    PDFs may hold active content, and how archives are opened (None: archives refused)."""

    allowed: frozenset[str]
    max_bytes: int
    allow_active: bool = False
    archives: ArchivePolicy | None = None

    def __post_init__(self) -> None:
        if not (type(self.allowed) is frozenset and self.allowed and self.allowed <= MEDIA_TYPES.keys()
                and _count_in(self.max_bytes, 1, MAX_ARTIFACT_BYTES) and type(self.allow_active) is bool
                and (self.archives is None or type(self.archives) is ArchivePolicy)):
            raise ArtifactError("ARTIFACT_POLICY_INVALID")
        if self.archives is None and self.allowed & ARCHIVE_TYPES:
            raise ArtifactError("ARTIFACT_POLICY_INVALID")  # archives are opened with bounds, or not allowed


def _count_in(value: Any, low: int, high: int) -> bool:
    return type(value) is int and low <= value <= high


# ============================================================================================
# 4. Sniffing
# ============================================================================================
# The bytes' own leading signature decides their type. Binary signatures sit at fixed offsets
# and do not overlap each other; bytes with none are text when they are strict UTF-8 without
# control characters, and text is markup when it opens with a tag.

_SIGNATURES: Final[tuple[tuple[str, int, bytes], ...]] = (  # (type, offset, bytes)
    ("image/png", 0, b"\x89PNG\r\n\x1a\n"),
    ("image/jpeg", 0, b"\xff\xd8\xff"),
    ("image/gif", 0, b"GIF87a"),
    ("image/gif", 0, b"GIF89a"),
    ("application/pdf", 0, b"%PDF-"),
    ("application/zip", 0, b"PK\x03\x04"),
    ("application/zip", 0, b"PK\x05\x06"),  # an empty archive: the end record alone
    ("application/gzip", 0, b"\x1f\x8b\x08"),
    ("application/x-tar", 257, b"ustar\x0000"),  # POSIX
    ("application/x-tar", 257, b"ustar  \x00"),  # GNU
)
_CONTROL: Final = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_MARKUP_START: Final = re.compile(r"<[a-z!?/]")  # a tag, a declaration, a processing instruction
# What may come before an SVG's root element: an XML declaration, a comment, a doctype, spaces.
_PROLOG: Final = re.compile(r"\s*+(?:<\?xml[^>]*+>|<!--(?:[^-]|-(?!->))*+-->|<!doctype[^>\[]*+(?:\[[^\]]*+\])?+\s*+>)")
_SVG_ROOT: Final = re.compile(r"\s*+<svg[\s>/]")


def _leading(data: bytes) -> str | None:
    for name, offset, signature in _SIGNATURES:
        if data.startswith(signature, offset):
            return name
    if data.startswith(b"RIFF") and data.startswith(b"WEBP", 8):
        return "image/webp"
    return None


def _text(data: bytes) -> str | None:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return None if _CONTROL.search(text) else text


def _text_kind(text: str) -> str:
    head = text.lstrip(" \t\r\n\ufeff").lower()
    if _MARKUP_START.match(head) is None:
        return "text/plain"
    position = 0
    while (found := _PROLOG.match(head, position)) is not None and found.end() > position:
        position = found.end()
    # Markup whose first element is <svg> is SVG; any other markup is HTML (inline SVG too).
    return "image/svg+xml" if _SVG_ROOT.match(head, position) else "text/html"


def sniff(data: bytes) -> str:
    """The media type the bytes' own signature says (JSON sniffs as text/plain), or
    ARTIFACT_TYPE_UNKNOWN for bytes with no signature that are not text either."""
    found = _leading(data)
    if found is not None:
        return found
    text = _text(data)
    if text is None:
        raise ArtifactError("ARTIFACT_TYPE_UNKNOWN")
    return _text_kind(text)


# ============================================================================================
# 5. Polyglots
# ============================================================================================
# Refused as polyglots, precisely:
#   1. trailing bytes: a PNG after its IEND chunk, a GIF after its trailer, a JPEG after the EOI
#      that ends its segment walk, a WEBP past its RIFF size, a PDF after its last %%EOF and line
#      end, a ZIP whose end record is not its last 22 bytes (a comment or appended bytes) or whose
#      central directory does not end where the end record starts (prepended bytes), a gzip with
#      bytes after its one member, a tar with non-zero bytes after its end (section 7);
#   2. a second format's start inside the bytes (_FOREIGN): a PNG, GIF, WEBP, ZIP (local header,
#      central directory, end record) or markup start anywhere in an image or a PDF; a PDF header
#      in the first SNIFF_HEAD bytes of text or an archive; an archive whose first bytes, after
#      spaces, open markup (a tar whose first name is "<script>...", which a browser may sniff as HTML).
# Not detected: a JPEG, gzip or tar start inside other bytes (their signatures are too short or
# not at offset 0 to tell from chance), a payload inside a valid chunk or segment that no reader
# runs, a format that needs no signature (a script in a PNG text chunk, read as text).

_FOREIGN: Final[tuple[tuple[str, bytes], ...]] = (  # (the format it starts, its bytes), case-sensitive
    ("image/png", b"\x89PNG\r\n\x1a\n"),
    ("image/gif", b"GIF87a"),
    ("image/gif", b"GIF89a"),
    ("image/webp", b"WEBPVP8"),
    ("application/pdf", b"%PDF-"),
    ("application/zip", b"PK\x03\x04"),
    ("application/zip", b"PK\x01\x02"),
    ("application/zip", b"PK\x05\x06"),
)
_MARKUP_IN_BINARY: Final = re.compile(rb"<(?:script|html|svg|iframe|!doctype|body|object|embed)", re.IGNORECASE)
_MARKUP_LEAD: Final = re.compile(rb"[\t\n\x0c\r ]*+<[A-Za-z!?]")  # what a browser's sniffer skips, then a tag
_PDF_TAIL_SPACE: Final = b"\r\n\t \x0c\x00"


def _malformed() -> ArtifactError:
    return ArtifactError("ARTIFACT_MALFORMED")


def _png_end(data: bytes) -> int:
    position = 8
    while True:
        if position + 12 > len(data):
            raise _malformed()
        length = int.from_bytes(data[position:position + 4], "big")
        end = position + 12 + length
        if length > 0x7FFFFFFF or end > len(data):
            raise _malformed()
        if zlib.crc32(data[position + 4:end - 4]) != int.from_bytes(data[end - 4:end], "big"):
            raise _malformed()
        if data[position + 4:position + 8] == b"IEND":
            return end
        position = end


def _gif_table(flags: int) -> int:
    return 3 * 2 ** ((flags & 7) + 1) if flags & 0x80 else 0


def _gif_sub_blocks(data: bytes, position: int) -> int:
    while True:
        if position >= len(data):
            raise _malformed()
        size = data[position]
        position += 1 + size
        if size == 0:
            return position


def _gif_end(data: bytes) -> int:
    if len(data) < 13:
        raise _malformed()
    position = 13 + _gif_table(data[10])
    while position < len(data):
        block = data[position]
        if block == 0x3B:  # the trailer
            return position + 1
        if block == 0x21:  # an extension: its label, then sub-blocks
            position = _gif_sub_blocks(data, position + 2)
        elif block == 0x2C and position + 10 <= len(data):  # an image: descriptor, table, code size, data
            position = _gif_sub_blocks(data, position + 11 + _gif_table(data[position + 9]))
        else:
            raise _malformed()
    raise _malformed()


def _jpeg_scan_end(data: bytes, position: int) -> int:
    """Past a scan's entropy-coded data: the next 0xFF that starts a marker (not a stuffed 0x00
    or a restart marker)."""
    while True:
        position = data.find(b"\xff", position)
        if position < 0 or position + 1 >= len(data):
            raise _malformed()
        following = data[position + 1]
        if following != 0x00 and not 0xD0 <= following <= 0xD7:
            return position
        position += 2


def _jpeg_end(data: bytes) -> int:
    position = 2
    while position < len(data):
        if data[position] != 0xFF:
            raise _malformed()
        while position < len(data) and data[position] == 0xFF:  # fill bytes
            position += 1
        if position + 1 > len(data):
            raise _malformed()
        marker = data[position]
        position += 1
        if marker == 0xD9:  # end of image
            return position
        if 0xD0 <= marker <= 0xD7 or marker == 0x01:  # stand-alone markers
            continue
        length = int.from_bytes(data[position:position + 2], "big")
        if position + 2 > len(data) or length < 2 or position + length > len(data):
            raise _malformed()
        position += length
        if marker == 0xDA:  # start of scan: its entropy-coded data follows the header
            position = _jpeg_scan_end(data, position)
    raise _malformed()


def _webp_end(data: bytes) -> int:
    end = 8 + int.from_bytes(data[4:8], "little")
    if end > len(data) or end < 12:
        raise _malformed()
    return end


def _pdf_end(data: bytes) -> int:
    marker = data.rfind(b"%%EOF")
    if marker < 0:
        raise _malformed()
    end = marker + 5
    return len(data) if not data[end:].strip(_PDF_TAIL_SPACE) else end


def _zip_end(data: bytes) -> int:
    record = data.rfind(b"PK\x05\x06")
    if record < 0:
        raise _malformed()
    if record != len(data) - 22:
        return record + 22  # a comment, or bytes after the end record
    disk, start_disk, on_disk, total = (int.from_bytes(data[record + at:record + at + 2], "little")
                                        for at in (4, 6, 8, 10))
    size = int.from_bytes(data[record + 12:record + 16], "little")
    offset = int.from_bytes(data[record + 16:record + 20], "little")
    if disk or start_disk or on_disk != total or total == 0xFFFF or 0xFFFFFFFF in (size, offset):
        raise _malformed()  # split archives and ZIP64 are not read here
    if offset + size != record:
        return -1  # bytes before the archive, or between its directory and its end record
    _zip_directory(data, offset, total)
    return len(data)


_ZIP_END_REACH: Final = 22 + 65_535  # bytes from the end where readers search for a zip's end record
_ZIP64_MARKS: Final = (b"PK\x06\x06", b"PK\x06\x07")  # a ZIP64 end record, its locator
_ZIP64_REACH: Final = 76  # bytes before the end record where a locator (20) and its ZIP64 end record (56) sit


_ZIP64_FIELD: Final = 0x0001
_UNICODE_PATH_FIELD: Final = 0x7075  # Info-ZIP's UTF-8 name: unzip, and zipfile from 3.13, extract to it


def _zip_extra_fields(extra: bytes) -> Iterator[tuple[int, bytes]]:
    """A directory record's extra fields, (kind, body), walked as zipfile walks them."""
    position = 0
    while position + 4 <= len(extra):
        kind, length = struct.unpack_from("<2H", extra, position)
        yield kind, extra[position + 4:position + 4 + length]
        position += 4 + length


def _unicode_path(body: bytes) -> str | None:
    """The name a Unicode path field holds (version 1, the header name's CRC, then the name), when it
    is a non-empty UTF-8 name; None for any other body (zipfile from 3.13 warns on an empty name and
    raises on a bad one). The CRC is not compared: the name is checked whether readers use it or not."""
    if len(body) <= 5 or body[0] != 1:
        return None
    try:
        return body[5:].decode("utf-8")
    except UnicodeDecodeError:
        return None


def _zip_extra_holds(extra: bytes) -> bool:
    """No ZIP64 field, and every Unicode path field well formed."""
    return all(kind != _ZIP64_FIELD and (kind != _UNICODE_PATH_FIELD or _unicode_path(body) is not None)
               for kind, body in _zip_extra_fields(extra))


def _zip_directory(data: bytes, offset: int, total: int) -> list[int]:
    """The local header offsets of the directory the end record (the last 22 bytes) names: exactly
    ``total`` records filling the bytes from ``offset`` to it. ARTIFACT_MALFORMED for any other count,
    any gap, a split archive, or anything of ZIP64 (an end record or locator where a reader looks for
    one, sizes or offsets saturated, a ZIP64 extra field), or a Unicode path field not well formed:
    zipfile follows a ZIP64 locator to another directory than the one the end record names, which
    other readers use."""
    record = len(data) - 22
    if any(mark in data[max(0, min(offset, record - _ZIP64_REACH)):record] for mark in _ZIP64_MARKS):
        raise _malformed()
    headers, position = [], offset
    for _ in range(total):
        if position + 46 > record or not data.startswith(b"PK\x01\x02", position):
            raise _malformed()
        compressed, size, name, extra, comment, start_disk, _, _, local = struct.unpack_from(
            "<2I5H2I", data, position + 20)
        extra_at = position + 46 + name
        if (0xFFFFFFFF in (compressed, size, local) or start_disk or local >= offset
                or not _zip_extra_holds(data[extra_at:extra_at + extra])):
            raise _malformed()
        headers.append(local)
        position = extra_at + extra + comment
    if position != record:
        raise _malformed()
    return headers


def _tar_end(data: bytes) -> int:
    if len(data) % 512:
        raise _malformed()
    return len(data)  # what follows its end blocks is checked when it is opened (section 7)


def _no_end(data: bytes) -> int:
    return len(data)


# Where each type's structure ends; anything but len(data) is a polyglot.
_STRUCTURE_ENDS: Final[Mapping[str, Callable[[bytes], int]]] = MappingProxyType({
    "image/png": _png_end, "image/gif": _gif_end, "image/jpeg": _jpeg_end, "image/webp": _webp_end,
    "application/pdf": _pdf_end, "application/zip": _zip_end, "application/x-tar": _tar_end,
    "application/gzip": _no_end,  # one member and nothing after it: checked when it is decompressed
    "text/plain": _no_end, "image/svg+xml": _no_end, "text/html": _no_end,
})


def _foreign_start(data: bytes, sniffed: str) -> bool:
    family = MEDIA_TYPES[sniffed].family
    if family == "binary":
        return (any(name != sniffed and marker in data for name, marker in _FOREIGN)
                or _MARKUP_IN_BINARY.search(data) is not None)
    if family == "archive" and _MARKUP_LEAD.match(data) is not None:
        return True
    return sniffed != "application/pdf" and b"%PDF-" in data[:SNIFF_HEAD]


def _check_polyglot(data: bytes, sniffed: str) -> None:
    if _STRUCTURE_ENDS[sniffed](data) != len(data) or _foreign_start(data, sniffed):
        raise ArtifactError("ARTIFACT_POLYGLOT")


# ============================================================================================
# 6. Active content
# ============================================================================================
# Markup (SVG, HTML) is active when it could run script or load anything once rendered: found on
# the text with character references decoded and lower-cased, URL schemes also with every space
# and control character removed (a browser drops them: "java&#9;script:"), and every rule also with
# CSS escapes decoded when a backslash occurs ("\75rl(" is url( to CSS). A PDF is active when
# it names an action or an embedded payload, found on its bytes with #xx name escapes decoded.
# Refused unless the policy allows active content; admitted or not, markup never becomes text a
# model reads (Admitted.text is None for it). Not seen: a PDF name inside a compressed object
# stream, markup that a renderer's quirks turn active without any of these spellings.

# An element's name may carry a namespace prefix: in XML, <s:script> is a script whenever s names
# the SVG or XHTML namespace, so every element rule reads "<", any prefix, then the name. The
# prefix stops at the first character a name cannot hold, so the look stays linear.
_ELEMENT: Final = r"<(?:[^\s<>/:=\"']++:)?+"
_ACTIVE_MARKUP: Final[Mapping[str, re.Pattern[str]]] = MappingProxyType({
    "script_element": re.compile(_ELEMENT + r"script"),
    "event_attribute": re.compile(r"[\s/\"']on[a-z]++\s*+="),
    "foreign_object": re.compile(_ELEMENT + r"foreignobject"),
    "embedded_document": re.compile(_ELEMENT + r"(?:iframe|frame|object|embed|applet|portal)"),
    "external_load": re.compile(r"(?:href|src|srcset|action|formaction|data|poster|background|manifest|ping)"
                                r"\s*+=\s*+[\"']?+(?![\"'#])"),
    "page_control": re.compile(_ELEMENT + r"(?:meta|base|link|form)[\s/>]|<\?xml-stylesheet"),
    # image-set() loads a quoted URL without url(): image-set("https://...") and -webkit-image-set.
    "style_load": re.compile(r"url\s*+\(\s*+[\"']?+(?![\"'#])|@import|expression\s*+\(|image-set\s*+\("),
    # The attribute animated may carry any prefix bound to the XLink namespace, not only "xlink:".
    "animated_link": re.compile(r"attributename\s*+=\s*+[\"']?+\s*+(?:[^\s<>/:=\"']++:)?+href"),
    "event_element": re.compile(_ELEMENT + r"(?:handler|listener)"),
    "entity_declaration": re.compile(r"<!entity"),
})
_ACTIVE_SCHEMES: Final = re.compile(r"(?<![a-z])(?:javascript|vbscript|livescript|data):")
_SPACES_AND_CONTROLS: Final = re.compile(r"[\x00-\x20\x7f]+")
# An embedded file needs none of its own names: a name tree (/EmbeddedFiles) or an attachment
# annotation (/FileAttachment) holds a file specification whose /EF names the stream. /GoToR opens
# another file, a UNC path on a remote host among them (which leaks the reader's credentials).
_ACTIVE_PDF: Final = re.compile(rb"/(?:JavaScript|JS|Launch|RichMedia|EmbeddedFiles?|EF|FileAttachment|XFA"
                                rb"|SubmitForm|ImportData|GoToE|GoToR)(?![A-Za-z0-9])")
_PDF_NAME_ESCAPE: Final = re.compile(rb"#([0-9A-Fa-f]{2})")


# A CSS escape: a backslash and one to six hex digits (and one space after them), or a backslash and
# any other character, which stands for itself. "\75rl(" is url( and "@\69mport" is @import to CSS.
_CSS_ESCAPE: Final = re.compile(r"\\(?:([0-9a-f]{1,6})[ \t\n\r\f]?|([^0-9a-f\n\r\f]))")


def _css_unescape(match: re.Match[str]) -> str:
    if match.group(2) is not None:
        return match.group(2)
    code = int(match.group(1), 16)
    return chr(code) if 0 < code <= 0x10FFFF and not 0xD800 <= code <= 0xDFFF else "\ufffd"


def _markup_findings(text: str) -> tuple[str, ...]:
    view = html.unescape(text).lower()
    # Each rule reads the markup as HTML does and, where a backslash occurs, as CSS does too.
    views = (view, _CSS_ESCAPE.sub(_css_unescape, view).lower()) if "\\" in view else (view,)
    found = [name for name, pattern in _ACTIVE_MARKUP.items() if any(pattern.search(each) for each in views)]
    if any(_ACTIVE_SCHEMES.search(_SPACES_AND_CONTROLS.sub("", each)) for each in views):
        found.append("script_url")
    return tuple(found)


def _pdf_findings(data: bytes) -> tuple[str, ...]:
    names = _PDF_NAME_ESCAPE.sub(lambda match: bytes.fromhex(match.group(1).decode("ascii")), data)
    return ("pdf_action",) if _ACTIVE_PDF.search(names) else ()


# ============================================================================================
# 7. Archives
# ============================================================================================
# Opened from memory (io.BytesIO), never extracted. One work list walks every level, so nesting
# costs no recursion; one budget of entries and uncompressed bytes spans all levels. Every entry
# is read in full with a bounded read: its size is what came out, never what a header said, and
# its ratio is to the bytes it spans in the archive, never more than they are. A zip entry's stream
# must hold exactly what zipfile read (zipfile stops at the declared size; unzip does not), and its
# name is checked in every spelling a reader extracts to. A tar's headers are walked before tarfile
# reads any: its pax and GNU long-name headers count as entries, are bounded, and must be records
# tarfile reads in linear time.

_DRIVE: Final = re.compile(r"[A-Za-z]:")
_ARCHIVE_FAULTS: Final = (zipfile.BadZipFile, zipfile.LargeZipFile, tarfile.TarError, zlib.error, struct.error,
                          EOFError, OSError, ValueError, UnicodeError, NotImplementedError, OverflowError, KeyError,
                          IndexError, RecursionError)  # the last: tar headers are bounded first (_tar_headers)
# zipfile bounds each read of a deflated entry by the bytes asked for; a bzip2 or LZMA entry it
# decompresses a whole input chunk at a time, which a crafted chunk makes gigabytes.
_ZIP_METHODS: Final = frozenset({zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED})


@dataclass(slots=True)
class _Budget:
    policy: ArchivePolicy
    entries: int = 0
    total: int = 0

    def count(self) -> None:
        self.entries += 1
        if self.entries > self.policy.max_entries:
            raise ArtifactError("ARTIFACT_ARCHIVE_ENTRIES")

    def allowance(self, compressed: int) -> int:
        """Bytes one entry may expand to: its ratio and what is left of the total, whichever is less."""
        return min(self.policy.max_ratio * max(compressed, 1), self.policy.max_total_bytes - self.total)

    def spend(self, size: int, compressed: int) -> None:
        if size > self.policy.max_ratio * max(compressed, 1):
            raise ArtifactError("ARTIFACT_ARCHIVE_RATIO")
        self.total += size
        if self.total > self.policy.max_total_bytes:
            raise ArtifactError("ARTIFACT_ARCHIVE_TOO_LARGE")


def _check_entry_name(names: set[str], *spellings: str) -> None:
    """A plain relative name in every spelling a reader may extract an entry to (a zip's header name
    and its Unicode path), none seen before in the same archive (``names``: that archive's own)."""
    keys = set()
    for name in spellings:
        parts = name.rstrip("/").split("/")
        if (not 0 < len(name) <= MAX_ENTRY_NAME or name.startswith("/") or "\\" in name or _CONTROL.search(name)
                or not td.is_portable_text(name) or _DRIVE.match(name)
                or any(part in ("", ".", "..") for part in parts)):
            raise ArtifactError("ARTIFACT_ARCHIVE_NAME")
        # Compared caseless and canonically (Unicode's canonical caseless match): a case-insensitive file
        # system folds "A" and "a" together, and macOS folds the NFC and NFD spellings of one name.
        keys.add(unicodedata.normalize("NFD", unicodedata.normalize("NFD", name.rstrip("/")).casefold()))
    if keys & names:
        raise ArtifactError("ARTIFACT_ARCHIVE_DUPLICATE")
    names |= keys


def _bounded_read(stream: Any, allowance: int) -> bytes:
    """At most allowance + 1 bytes: one more than allowed proves the limit crossed."""
    chunks, held = [], 0
    while held <= allowance:
        chunk = stream.read(min(READ_CHUNK, allowance + 1 - held))
        if not chunk:
            break
        chunks.append(chunk)
        held += len(chunk)
    return b"".join(chunks)


def _read_entry(stream: Any, compressed: int, budget: _Budget) -> bytes:
    data = _bounded_read(stream, budget.allowance(compressed))
    budget.spend(len(data), compressed)  # one byte past the allowance crosses the ratio or the total
    return data


def _zip_entries(data: bytes, budget: _Budget) -> Iterator[bytes]:
    record = len(data) - 22  # its end record, held to its structure already (_zip_end)
    directory = int.from_bytes(data[record + 16:record + 20], "little")
    headers = _zip_directory(data, directory, int.from_bytes(data[record + 10:record + 12], "little"))
    # An entry spans its bytes from its local header to the next local header or the directory: a
    # compressed size the directory claims is believed only up to that (a bigger one would widen its ratio).
    bounds = sorted({*headers, directory})
    names: set[str] = set()
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        infos = archive.infolist()
        if [info.header_offset for info in infos] != headers:
            raise ArtifactError("ARTIFACT_ARCHIVE_INVALID")  # zipfile read another directory than the end record's
        for info in infos:
            budget.count()
            # The raw header name (zipfile cuts the name it reports at a NUL) and the Unicode path.
            _check_entry_name(names, info.filename, info.orig_filename,
                              *(_unicode_path(body) or "" for kind, body in _zip_extra_fields(info.extra)
                                if kind == _UNICODE_PATH_FIELD))
            if (info.external_attr >> 16) & 0o170000 == 0o120000:
                raise ArtifactError("ARTIFACT_ARCHIVE_LINK")
            if info.flag_bits & 0x1:
                raise ArtifactError("ARTIFACT_ARCHIVE_ENCRYPTED")
            if info.compress_type not in _ZIP_METHODS:
                raise ArtifactError("ARTIFACT_ARCHIVE_METHOD")
            span = bounds[bisect.bisect_right(bounds, info.header_offset)] - info.header_offset
            with archive.open(info) as stream:  # a folder too: zipfile then checks its local header's name
                entry = _read_entry(stream, min(info.compress_size, span), budget)
            if not _zip_stream_holds(data, info, len(entry)) or (info.is_dir() and entry):
                raise ArtifactError("ARTIFACT_ARCHIVE_INVALID")
            if not info.is_dir():
                yield entry


def _zip_stream_holds(data: bytes, info: zipfile.ZipInfo, size: int) -> bool:
    """Whether an entry's compressed bytes hold exactly the ``size`` bytes zipfile read from them: stored
    bytes of that size, or a deflate stream that yields that many and ends where its compressed size
    does. zipfile stops at the size the directory declares; unzip inflates the whole stream, so a
    declared size below the stream's is a bomb the ratio would never see."""
    name, extra = struct.unpack_from("<2H", data, info.header_offset + 26)
    start = info.header_offset + 30 + name + extra
    held = data[start:start + info.compress_size]
    if info.compress_type == zipfile.ZIP_STORED:
        return len(held) == size
    inflater = zlib.decompressobj(-zlib.MAX_WBITS)
    out = inflater.decompress(held, size + 1)  # one byte more than zipfile read proves the stream longer
    return len(out) == size and inflater.eof and not inflater.unused_data


_TAR_BLOCK: Final = 512
_TAR_METADATA: Final = frozenset({b"x", b"g", b"X", b"L", b"K"})  # pax (POSIX, global, Solaris), GNU long name/link
_TAR_PAX: Final = frozenset({b"x", b"g", b"X"})
_TAR_NO_DATA: Final = frozenset({b"1", b"2", b"3", b"4", b"5", b"6"})  # links, devices, folders, FIFOs: tarfile
#                                                                         skips no data blocks after their header
_PAX_LENGTH: Final = re.compile(rb"([0-9]{1,20}) ")
_PAX_DIGIT_RUN: Final = re.compile(rb"[0-9]{%d}" % (MAX_PAX_DIGITS + 1))


def _tar_number(field: bytes) -> int | None:
    """A header's number as tarfile reads it (octal text up to a NUL), or None where tarfile finds
    none and ends the archive there. Base-256, which no number of an artifact this size needs, is refused."""
    if field[0] in (0o200, 0o377):
        raise ArtifactError("ARTIFACT_ARCHIVE_INVALID")
    try:
        return int(field.split(b"\x00", 1)[0].decode("ascii").strip() or "0", 8)
    except ValueError:
        return None


_HIGH_BYTES: Final = bytes(range(0x80, 0x100))


def _tar_checksum_holds(block: bytes) -> bool:
    """The checksum as tarfile checks it: the header's bytes summed unsigned or signed, the field as spaces."""
    stored = _tar_number(block[148:156])
    rest = block[:148] + block[156:]
    unsigned = 256 + sum(rest)
    high = len(rest) - len(rest.translate(None, _HIGH_BYTES))  # each counts 256 less when signed
    return stored is not None and stored in (unsigned, unsigned - 256 * high)


def _pax_records_hold(payload: bytes) -> bool:
    """Whether a pax header is only "<length> <keyword>=<value>\\n" records that fill it exactly, with
    no run of digits past MAX_PAX_DIGITS and no "size" (tarfile would move the next header by it)."""
    if _PAX_DIGIT_RUN.search(payload) is not None:
        return False
    position = 0
    while position < len(payload):
        length = _PAX_LENGTH.match(payload, position)
        if length is None:
            return False
        end = position + int(length.group(1))
        record = payload[length.end():end]
        if end > len(payload) or not record.endswith(b"\n") or record.find(b"=") < 1 or record.startswith(b"size="):
            return False
        position = end
    return True


def _tar_headers(data: bytes, budget: _Budget) -> None:
    """Walk a tar's headers as tarfile will, before it reads one: every pax or GNU long-name header
    counts as an entry, holds at most MAX_TAR_METADATA bytes (zero-padded), at most MAX_TAR_METADATA_RUN
    of them in a row (tarfile reads each by recursion), and a pax header's records are well formed.
    The walk ends where tarfile ends the archive (an end block, a header whose numbers or checksum do
    not read), or at a sparse member (refused when tarfile reaches it, before it reads further)."""
    position = run = 0
    while position + _TAR_BLOCK <= len(data):
        block = data[position:position + _TAR_BLOCK]
        size = _tar_number(block[124:136])
        if not block.strip(b"\x00") or size is None or not _tar_checksum_holds(block):
            return
        if size < 0:
            raise ArtifactError("ARTIFACT_ARCHIVE_INVALID")
        kind, start = block[156:157], position + _TAR_BLOCK
        end = start + -(-size // _TAR_BLOCK) * _TAR_BLOCK
        if kind in _TAR_METADATA:
            budget.count()
            run += 1
            if (run > MAX_TAR_METADATA_RUN or size > MAX_TAR_METADATA or end > len(data)
                    or data[start + size:end].strip(b"\x00")
                    or (kind in _TAR_PAX and not _pax_records_hold(data[start:start + size]))):
                raise ArtifactError("ARTIFACT_ARCHIVE_INVALID")
        elif kind == b"S":
            return
        else:
            run = 0
            folder = kind == b"5" or (kind == b"\x00" and block[:100].split(b"\x00", 1)[0].endswith(b"/"))
            if folder and size:
                # Readers disagree on where the next header is: tarfile reads it right after a V7 folder's
                # header, GNU tar lists it past the size (and what it lists there, tarfile reads as data).
                raise ArtifactError("ARTIFACT_ARCHIVE_INVALID")
            if kind in _TAR_NO_DATA or folder:
                end = start  # tarfile reads the next header right after this one (a V7 folder too)
        position = end


def _tar_entries(data: bytes, budget: _Budget) -> Iterator[bytes]:
    _tar_headers(data, budget)
    names: set[str] = set()
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as archive:
        while True:
            member = archive.next()
            if member is None:
                break
            budget.count()
            _check_entry_name(names, member.name)
            if member.issym() or member.islnk():
                raise ArtifactError("ARTIFACT_ARCHIVE_LINK")
            if member.isdir():
                continue
            if not member.isreg() or member.issparse():
                raise ArtifactError("ARTIFACT_ARCHIVE_SPECIAL")
            stream = archive.extractfile(member)
            if stream is None:
                raise ArtifactError("ARTIFACT_ARCHIVE_SPECIAL")
            with stream:
                yield _read_entry(stream, member.size, budget)
        end = archive.offset
    if data[end:].strip(b"\x00"):
        raise ArtifactError("ARTIFACT_POLYGLOT")  # bytes after the archive's end blocks


def _gzip_entries(data: bytes, budget: _Budget) -> Iterator[bytes]:
    budget.count()
    allowance = budget.allowance(len(data))
    inflater = zlib.decompressobj(wbits=31)  # one gzip member, header and trailer checked
    out = inflater.decompress(data, allowance + 1)
    if len(out) <= allowance and not inflater.eof:
        raise ArtifactError("ARTIFACT_ARCHIVE_INVALID")  # cut short
    budget.spend(len(out), len(data))
    if inflater.unused_data:
        raise ArtifactError("ARTIFACT_POLYGLOT")  # a second member, or bytes after the first
    yield out


_OPENERS: Final[Mapping[str, Callable[[bytes, _Budget], Iterator[bytes]]]] = MappingProxyType({
    "application/zip": _zip_entries, "application/x-tar": _tar_entries, "application/gzip": _gzip_entries,
})


def _open_archive(data: bytes, media_type: str, policy: ArchivePolicy) -> tuple[int, int]:
    """Walk an archive and every archive inside it; (entries, uncompressed bytes) on success."""
    budget = _Budget(policy)
    work = [(data, media_type, 0)]
    while work:
        held, kind, level = work.pop()
        try:
            with contextlib.closing(_OPENERS[kind](held, budget)) as entries:  # its archive closed at once
                for entry in entries:
                    inner = _leading(entry)
                    if inner not in ARCHIVE_TYPES and b"PK\x05\x06" in entry[-_ZIP_END_REACH:]:
                        inner = "application/zip"  # unzip and zipfile open a zip behind any prefix
                    if inner in ARCHIVE_TYPES:
                        if level >= policy.max_depth:
                            raise ArtifactError("ARTIFACT_ARCHIVE_NESTED")
                        if _STRUCTURE_ENDS[inner](entry) != len(entry):
                            raise ArtifactError("ARTIFACT_POLYGLOT")
                        work.append((entry, inner, level + 1))
        except _ARCHIVE_FAULTS:
            raise ArtifactError("ARTIFACT_ARCHIVE_INVALID") from None
    return budget.entries, budget.total


# ============================================================================================
# 8. Admission and references
# ============================================================================================


@dataclass(frozen=True, slots=True)
class Admitted:
    """Bytes admit_bytes let through, and what it found. ``text`` is the decoded text of plain
    text and JSON only: markup and binaries never become text a model reads."""

    media_type: str
    size: int
    sha256: str
    data: bytes = field(repr=False)
    text: str | None = field(default=None, repr=False)
    active: tuple[str, ...] = ()  # active content found, when the policy allowed it
    entries: int = 0  # archive entries across every level
    unpacked: int = 0  # their uncompressed bytes


def _content_checks(data: bytes, media_type: str,
                    policy: MediaPolicy) -> tuple[str | None, tuple[str, ...], int, int]:
    family = MEDIA_TYPES[media_type].family
    text = _text(data) if family in ("text", "markup") else None
    if media_type == "application/json":
        try:
            td.decode_strict_json(data, max_bytes=policy.max_bytes)
        except td.BoundaryError:
            raise ArtifactError("ARTIFACT_JSON_INVALID") from None
    active: tuple[str, ...] = ()
    if family == "markup" and text is not None:
        active = _markup_findings(text)
    elif media_type == "application/pdf":
        active = _pdf_findings(data)
    if active and not policy.allow_active:
        raise ArtifactError("ARTIFACT_ACTIVE_CONTENT")
    entries = unpacked = 0
    if family == "archive" and policy.archives is not None:
        entries, unpacked = _open_archive(data, media_type, policy.archives)
    return (text if family == "text" else None), active, entries, unpacked


def admit_bytes(data: bytes, *, declared_type: str, policy: MediaPolicy) -> Admitted:
    """The one admission of an artifact's bytes, or the ArtifactError that refuses them.

    In order: the policy; the declared type known, then allowed; the size (before anything is
    parsed); the sniffed type against the declared one; polyglots; then per type: text, strict
    JSON, active content, archives opened with bounds.
    """
    if type(policy) is not MediaPolicy:
        raise ArtifactError("ARTIFACT_POLICY_INVALID")
    if type(declared_type) is not str or declared_type not in MEDIA_TYPES:
        raise ArtifactError("ARTIFACT_TYPE_UNSUPPORTED")
    if declared_type not in policy.allowed:
        raise ArtifactError("ARTIFACT_TYPE_NOT_ALLOWED")
    if type(data) is not bytes:
        raise ArtifactError("ARTIFACT_TYPE_UNKNOWN")
    if len(data) > policy.max_bytes:
        raise ArtifactError("ARTIFACT_TOO_LARGE")
    if not data:
        raise ArtifactError("ARTIFACT_EMPTY")
    try:
        sniffed = sniff(data)
    except ArtifactError:
        if MEDIA_TYPES[declared_type].family in ("text", "markup"):
            raise ArtifactError("ARTIFACT_TEXT_INVALID") from None
        raise
    if sniffed != MEDIA_TYPES[declared_type].sniffed_as:
        raise ArtifactError("ARTIFACT_TYPE_MISMATCH")
    _check_polyglot(data, sniffed)
    text, active, entries, unpacked = _content_checks(data, declared_type, policy)
    return Admitted(declared_type, len(data), hashlib.sha256(data).hexdigest(), data, text, active, entries, unpacked)


# The reference, the only thing of an artifact a model sees: exactly five members.
_REFERENCE_FIELDS: Final = frozenset({"kind", "media_type", "size", "sha256", "access"})
ACCESS_PATTERN: Final = (r"^a" + TOKEN_VERSION + r"\.[a-z0-9]{1,16}\.[0-9]{1,10}\.[0-9a-f]{%d}\.[0-9a-f]{%d}"
                         r"\.[0-9a-f]{%d}\.[0-9a-f]{64}$") % ((BINDING_HEX,) * 3)
CURSOR_PATTERN: Final = (r"^c" + TOKEN_VERSION + r"\.[a-z0-9]{1,16}\.[0-9]{1,10}\.[0-9]{1,7}\.[0-9a-f]{%d}"
                         r"\.[0-9a-f]{%d}\.[0-9a-f]{64}$") % ((BINDING_HEX,) * 2)
_ACCESS_TOKEN: Final = re.compile(ACCESS_PATTERN)
_CURSOR_TOKEN: Final = re.compile(CURSOR_PATTERN)

# A JSON-Schema fragment for a tool's output contract, in the core's contract language.
REFERENCE_SCHEMA: Final[Mapping[str, Any]] = MappingProxyType({
    "type": "object",
    "properties": {
        "kind": {"type": "string", "enum": sorted(KINDS)},
        "media_type": {"type": "string", "enum": sorted(MEDIA_TYPES)},
        "size": {"type": "integer", "minimum": 0, "maximum": MAX_ARTIFACT_BYTES},
        "sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
        "access": {"type": ["string", "null"], "maxLength": MAX_TOKEN_LENGTH, "pattern": ACCESS_PATTERN},
    },
    "required": sorted(_REFERENCE_FIELDS),
    "additionalProperties": False,
})
# A paged tool's cursor input field: null (or absent) asks for the first page.
CURSOR_SCHEMA: Final[Mapping[str, Any]] = MappingProxyType({
    "type": ["string", "null"], "maxLength": MAX_TOKEN_LENGTH, "pattern": CURSOR_PATTERN,
})


def reference(admitted: Admitted, *, kind: str, access: str | None = None) -> dict[str, Any]:
    """The reference to admitted bytes; ARTIFACT_REFERENCE_INVALID for a kind or token it cannot hold."""
    if type(admitted) is not Admitted:
        raise ArtifactError("ARTIFACT_REFERENCE_INVALID")
    built = {"kind": kind, "media_type": admitted.media_type, "size": admitted.size, "sha256": admitted.sha256,
             "access": access}
    if not is_reference(built):
        raise ArtifactError("ARTIFACT_REFERENCE_INVALID")
    return built


def is_reference(value: Any) -> bool:
    """Whether a value is exactly a reference: five members, each of its exact type and shape."""
    return (type(value) is dict and value.keys() == _REFERENCE_FIELDS
            and type(value["kind"]) is str and value["kind"] in KINDS
            and type(value["media_type"]) is str and value["media_type"] in MEDIA_TYPES
            and _count_in(value["size"], 0, MAX_ARTIFACT_BYTES)
            and type(value["sha256"]) is str and td.DIGEST_PATTERN.fullmatch(value["sha256"]) is not None
            and (value["access"] is None or _token_shape(value["access"], _ACCESS_TOKEN) is not None))


# ============================================================================================
# 9. Keys and tokens
# ============================================================================================
# One primitive: HMAC-SHA256 under the host's key over canonical JSON that names its domain, its
# key and its purpose. A token carries a key id, an expiry, keyed digests of what it binds (never
# a principal, an argument or a secret in plain text) and its MAC; hex and digits only, so it can
# never take the shape of a secret the core's output scan refuses. It is checked in this order:
# shape, key, MAC (one code for all three: no oracle for a forger), then what it binds, each with
# its own code (only a genuine token gets that far), then its expiry.


@dataclass(frozen=True, slots=True)
class ArtifactKeys:
    """The host's token keys: the one it mints with now, and every key it still accepts."""

    current: str
    secrets: Mapping[str, bytes] = field(repr=False)  # key id -> key; never printed

    def __post_init__(self) -> None:
        secrets = dict(self.secrets) if isinstance(self.secrets, Mapping) else {}
        if not (1 <= len(secrets) <= MAX_KEYS and type(self.current) is str and self.current in secrets and all(
                type(key_id) is str and KEY_ID.fullmatch(key_id) and type(secret) is bytes
                and MIN_KEY_BYTES <= len(secret) <= MAX_KEY_BYTES for key_id, secret in secrets.items())):
            raise ArtifactError("ARTIFACT_KEYS_INVALID")
        object.__setattr__(self, "secrets", MappingProxyType(secrets))  # a copy: later changes reach nothing

    def mac(self, key_id: str, domain: str, body: Mapping[str, Any]) -> str:
        message = td.canonical_json({**body, "domain": domain, "key_id": key_id})
        return hmac.new(self.secrets[key_id], message, hashlib.sha256).hexdigest()

    def binding(self, key_id: str, purpose: str, value: Any) -> str:
        """A keyed digest of a bound value: compared, never reversed or guessed offline."""
        return self.mac(key_id, BINDING_DOMAIN, {"purpose": purpose, "value": value})[:BINDING_HEX]


def _checked_keys(keys: Any) -> ArtifactKeys:
    if type(keys) is not ArtifactKeys:
        raise ArtifactError("ARTIFACT_KEYS_INVALID")
    return keys


def _token_shape(token: Any, shape: re.Pattern[str], numbers: int = 1) -> list[str] | None:
    """A token's parts when it has the shape; its first ``numbers`` parts after the key id are
    integers, in one spelling only ("0300" and "300" would be two tokens with one MAC)."""
    if type(token) is not str or len(token) > MAX_TOKEN_LENGTH or shape.fullmatch(token) is None:
        return None
    parts = token.split(".")
    if any(part != str(int(part)) for part in parts[2:2 + numbers]):
        return None
    return parts


def _principal_value(principal: td.Principal) -> list[str]:
    td.check_principal(principal)
    return [principal.tenant, principal.subject]


def _time(now: Any) -> int:
    if type(now) is not int or not td.MIN_TIME <= now <= td.MAX_TIME:
        raise td.BoundaryError("CONTEXT_INVALID")  # the host's clock, not the token, is at fault
    return now


def _open_token(keys: ArtifactKeys, token: Any, shape: re.Pattern[str], invalid: str,
                body_of: Callable[[list[str]], dict[str, Any]], domain: str, numbers: int) -> tuple[str, list[str]]:
    parts = _token_shape(token, shape, numbers)
    if parts is None or parts[1] not in keys.secrets:
        raise ArtifactError(invalid)
    if not hmac.compare_digest(parts[-1], keys.mac(parts[1], domain, body_of(parts))):
        raise ArtifactError(invalid)
    return parts[1], parts


def _check_bound(keys: ArtifactKeys, key_id: str, checks: Sequence[tuple[str, Any, str, str]]) -> None:
    for purpose, value, carried, code in checks:
        if not hmac.compare_digest(carried, keys.binding(key_id, purpose, value)):
            raise ArtifactError(code)


# ============================================================================================
# 10. Access references
# ============================================================================================
# An execute hook mints access for the call it runs (ExecuteCall.call_id, the provider's id of
# the call, which the trusted context carries); the host opens it for the same caller and call.


def _access_body(parts: list[str]) -> dict[str, Any]:
    return {"expires_at": int(parts[2]), "principal": parts[3], "call": parts[4], "artifact": parts[5]}


def mint_access(keys: ArtifactKeys, *, principal: td.Principal, call_id: str, sha256: str, now: int,
                lifetime: int = DEFAULT_ACCESS_LIFETIME) -> str:
    """A short-lived token for one artifact, one caller, one call."""
    keys = _checked_keys(keys)
    if not _count_in(lifetime, 1, MAX_ACCESS_LIFETIME):
        raise ArtifactError("ACCESS_LIFETIME_INVALID")
    if not td.is_identifier(call_id) or type(sha256) is not str or td.DIGEST_PATTERN.fullmatch(sha256) is None:
        raise ArtifactError("ACCESS_INVALID")
    key_id = keys.current
    parts = ["a" + TOKEN_VERSION, key_id, str(_time(now) + lifetime),
             keys.binding(key_id, "access.principal", _principal_value(principal)),
             keys.binding(key_id, "access.call", call_id), keys.binding(key_id, "access.artifact", sha256)]
    return ".".join([*parts, keys.mac(key_id, ACCESS_DOMAIN, _access_body(parts))])


def open_access(keys: ArtifactKeys, token: Any, *, principal: td.Principal, call_id: str, sha256: str,
                now: int) -> int:
    """Check a token for this caller, call and artifact at ``now``; its expiry, or the refusal."""
    keys = _checked_keys(keys)
    who, now = _principal_value(principal), _time(now)
    key_id, parts = _open_token(keys, token, _ACCESS_TOKEN, "ACCESS_INVALID", _access_body, ACCESS_DOMAIN, 1)
    _check_bound(keys, key_id, (("access.principal", who, parts[3], "ACCESS_OTHER_PRINCIPAL"),
                                ("access.call", call_id, parts[4], "ACCESS_OTHER_CALL"),
                                ("access.artifact", sha256, parts[5], "ACCESS_OTHER_ARTIFACT")))
    expires_at = int(parts[2])
    if now >= expires_at:
        raise ArtifactError("ACCESS_EXPIRED")
    return expires_at


# ============================================================================================
# 11. Page cursors
# ============================================================================================


def _query_value(tool: Any, arguments: Any, cursor_field: str) -> dict[str, Any]:
    if type(arguments) is not dict or type(tool) is not str or td.TOOL_NAME.fullmatch(tool) is None:
        raise ArtifactError("PAGE_ARGUMENTS_INVALID")
    query = {"tool": tool, "arguments": {name: value for name, value in arguments.items() if name != cursor_field}}
    try:
        td.canonical_json(query)
    except (td.CatalogError, TypeError, ValueError, RecursionError):
        raise ArtifactError("PAGE_ARGUMENTS_INVALID") from None
    return query


def _cursor_body(parts: list[str]) -> dict[str, Any]:
    return {"expires_at": int(parts[2]), "position": int(parts[3]), "principal": parts[4], "query": parts[5]}


def mint_cursor(keys: ArtifactKeys, *, principal: td.Principal, tool: str, arguments: Mapping[str, Any],
                position: int, now: int, lifetime: int = DEFAULT_CURSOR_LIFETIME,
                cursor_field: str = CURSOR_FIELD) -> str:
    """An opaque cursor to ``position`` of this caller's listing from this tool with these arguments."""
    keys = _checked_keys(keys)
    if not _count_in(lifetime, 1, MAX_CURSOR_LIFETIME):
        raise ArtifactError("PAGE_LIFETIME_INVALID")
    if not _count_in(position, 0, MAX_POSITION):
        raise ArtifactError("PAGE_CURSOR_STALE")
    query = _query_value(tool, dict(arguments) if isinstance(arguments, Mapping) else arguments, cursor_field)
    key_id = keys.current
    parts = ["c" + TOKEN_VERSION, key_id, str(_time(now) + lifetime), str(position),
             keys.binding(key_id, "page.principal", _principal_value(principal)),
             keys.binding(key_id, "page.query", query)]
    return ".".join([*parts, keys.mac(key_id, CURSOR_DOMAIN, _cursor_body(parts))])


def open_cursor(keys: ArtifactKeys, cursor: Any, *, principal: td.Principal, tool: str,
                arguments: Mapping[str, Any], now: int, cursor_field: str = CURSOR_FIELD) -> int:
    """The position a cursor points to, for this caller, tool and arguments at ``now``; or the refusal."""
    keys = _checked_keys(keys)
    who, now = _principal_value(principal), _time(now)
    query = _query_value(tool, dict(arguments) if isinstance(arguments, Mapping) else arguments, cursor_field)
    key_id, parts = _open_token(keys, cursor, _CURSOR_TOKEN, "PAGE_CURSOR_INVALID", _cursor_body,
                                    CURSOR_DOMAIN, 2)
    _check_bound(keys, key_id, (("page.principal", who, parts[4], "PAGE_CURSOR_OTHER_PRINCIPAL"),
                                ("page.query", query, parts[5], "PAGE_CURSOR_OTHER_QUERY")))
    if now >= int(parts[2]):
        raise ArtifactError("PAGE_CURSOR_EXPIRED")
    return int(parts[3])


class Page(NamedTuple):
    items: list[Any]
    next_cursor: str | None  # None: this is the last page
    position: int  # where this page starts


def page_of(items: Sequence[Any], *, keys: ArtifactKeys, principal: td.Principal, tool: str,
            arguments: Mapping[str, Any], now: int, page_size: int = DEFAULT_PAGE_SIZE,
            lifetime: int = DEFAULT_CURSOR_LIFETIME, cursor_field: str = CURSOR_FIELD) -> Page:
    """One bounded page of a tool's result list, from the cursor in its arguments (none or null:
    the first page), with the cursor to the next page. An execute hook returns it in its output."""
    if not _count_in(page_size, MIN_PAGE_SIZE, MAX_PAGE_SIZE):
        raise ArtifactError("PAGE_SIZE_INVALID")
    if not isinstance(arguments, Mapping):
        raise ArtifactError("PAGE_ARGUMENTS_INVALID")
    cursor = arguments.get(cursor_field)
    position = 0 if cursor is None else open_cursor(keys, cursor, principal=principal, tool=tool,
                                                    arguments=arguments, now=now, cursor_field=cursor_field)
    if position and position >= len(items):
        raise ArtifactError("PAGE_CURSOR_STALE")  # the listing shrank since the cursor was minted
    end = position + page_size
    following = None if end >= len(items) else mint_cursor(
        keys, principal=principal, tool=tool, arguments=arguments, position=end, now=now, lifetime=lifetime,
        cursor_field=cursor_field)
    return Page(list(items[position:end]), following, position)
