"""Hostile (and a few well-formed) artifacts, made by code: the bytes the artifact fixture and the
layer's tests feed to the checks. No third-party sample is stored anywhere; every file here is a
few lines of struct, zlib, zipfile or tarfile, so what each one is stays readable.

Each maker takes no argument and answers bytes; MAKERS is the closed table the fixture names them by.
"""
from __future__ import annotations

import gzip
import io
import stat
import struct
import tarfile
import zipfile
import warnings
import zlib
from types import MappingProxyType
from typing import Callable, Final, Iterable, Mapping

__all__ = ["MAKERS", "png_chunk", "png", "gif", "jpeg", "webp", "pdf", "zip_of", "zip_link", "tar_of", "gz"]

BOMB_BYTES: Final = 8 * 1024 * 1024  # what a bomb expands to: far past any bound, small to make (about 8 KB zipped)
FIXED_TIME: Final = (2026, 1, 1, 0, 0, 0)  # every archive entry's date: the same bytes on every run


# -- Well-formed files ---------------------------------------------------------------------------

def png_chunk(kind: bytes, body: bytes) -> bytes:
    """One PNG chunk: length, type, body and the CRC over type and body."""
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def png(*extra_chunks: bytes) -> bytes:
    """A valid 1x1 grey PNG, with any extra chunks between its header and its pixels."""
    header = png_chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0))
    pixels = png_chunk(b"IDAT", zlib.compress(b"\x00\x00"))
    return b"\x89PNG\r\n\x1a\n" + header + b"".join(extra_chunks) + pixels + png_chunk(b"IEND", b"")


def gif() -> bytes:
    """A 1x1 GIF89a with a comment block."""
    screen = b"GIF89a" + struct.pack("<HH", 1, 1) + b"\x00\x00\x00"
    comment = b"\x21\xfe\x03abc\x00"
    image = b"\x2c" + struct.pack("<HHHH", 0, 0, 1, 1) + b"\x00" + b"\x02\x02\x4c\x01\x00"
    return screen + comment + image + b"\x3b"


def jpeg() -> bytes:
    """A JPEG's frame: start of image, a JFIF segment, a scan with stuffed bytes, end of image."""
    app0 = b"\xff\xe0\x00\x10JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
    scan = b"\xff\xda\x00\x08\x01\x01\x00\x00\x3f\x00" + b"\x12\x34\xff\x00\x56\xff\xd0\x78"
    return b"\xff\xd8" + app0 + scan + b"\xff\xd9"


def webp() -> bytes:
    """A RIFF WEBP container around a lossless frame header."""
    body = b"WEBP" + b"VP8L" + struct.pack("<I", 6) + b"\x2f\x00\x00\x00\x00\x00"
    return b"RIFF" + struct.pack("<I", len(body)) + body


def pdf(body: bytes = b"1 0 obj<<>>endobj\n") -> bytes:
    """A PDF's frame around the given objects: header, trailer, end marker."""
    return b"%PDF-1.4\n" + body + b"trailer<<>>\n%%EOF\n"


def zip_of(entries: Iterable[tuple[str | zipfile.ZipInfo, bytes]], *, compression: int = zipfile.ZIP_DEFLATED) -> bytes:
    """A zip of (name or ZipInfo, data) entries, every one compressed the same way; a name may repeat."""
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns about a repeated name, which a hostile archive means
        with zipfile.ZipFile(buffer, "w", compression) as archive:
            for name, data in entries:
                info = name if isinstance(name, zipfile.ZipInfo) else zipfile.ZipInfo(name, FIXED_TIME)
                info.compress_type = compression
                archive.writestr(info, data)
    return buffer.getvalue()


def zip_link(name: str) -> zipfile.ZipInfo:
    """A zip entry whose Unix mode marks it a symbolic link (its data is the target)."""
    info = zipfile.ZipInfo(name, FIXED_TIME)
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    return info


def tar_of(entries: Iterable[tuple[str, bytes, bytes]]) -> bytes:
    """A ustar archive of (name, data, kind) entries; a link entry names "target"."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as archive:
        for name, data, kind in entries:
            info = tarfile.TarInfo(name)
            info.type, info.mtime = kind, 0
            if kind == tarfile.REGTYPE:
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
            else:
                info.linkname = "target" if kind in (tarfile.SYMTYPE, tarfile.LNKTYPE) else ""
                archive.addfile(info)
    return buffer.getvalue()


def gz(data: bytes) -> bytes:
    """gzip with no timestamp: the same bytes on every run."""
    return gzip.compress(data, mtime=0)


# -- Hostile files -------------------------------------------------------------------------------

def _file(data: bytes) -> tuple[str, bytes, bytes]:
    return ("file.txt", data, tarfile.REGTYPE)


MAKERS: Final[Mapping[str, Callable[[], bytes]]] = MappingProxyType({
    # well formed: the controls, admitted under a policy that allows them
    "png": png,
    "jpeg": jpeg,
    "gif": gif,
    "webp": webp,
    "pdf": pdf,
    "text": lambda: "a plain note, caf\u00e9\n".encode("utf-8"),
    "json": lambda: b'{"rows": [1, 2, 3]}',
    "svg": lambda: b'<svg xmlns="http://www.w3.org/2000/svg" width="1" height="1"><rect width="1" height="1"/></svg>',
    "zip": lambda: zip_of([("notes/a.txt", b"first"), ("notes/b.txt", b"second")]),
    "tar": lambda: tar_of([("notes/a.txt", b"first", tarfile.REGTYPE)]),
    "gzip": lambda: gz(b"a small log line\n" * 4),
    # bytes that lie about what they are
    "random": lambda: bytes(range(7, 256)) * 3,
    "empty": lambda: b"",
    "not_utf8": lambda: b"caf\xe9 au lait\n",
    "text_control": lambda: b"line\x1b[2Jcleared\n",
    "json_duplicate_keys": lambda: b'{"a": 1, "a": 2}',
    "json_nan": lambda: b'{"a": NaN}',
    "png_truncated": lambda: png()[:40],
    "png_bad_crc": lambda: png()[:29] + b"\x00\x00\x00\x00" + png()[33:],
    "oversize_text": lambda: b"x" * 65_537,
    # active content
    "svg_script": lambda: b'<svg xmlns="http://www.w3.org/2000/svg"><script>fetch("//x")</script></svg>',
    "svg_onload": lambda: b'<svg xmlns="http://www.w3.org/2000/svg" onload="fetch(\'//x\')"/>',
    "svg_javascript_href": lambda: (b'<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink">'
                                    b'<a xlink:href="javascript:alert(1)"><rect width="1" height="1"/></a></svg>'),
    "svg_foreign_object": lambda: (b'<svg xmlns="http://www.w3.org/2000/svg"><foreignObject><body '
                                   b'xmlns="http://www.w3.org/1999/xhtml"><iframe src="//x"/></body></foreignObject></svg>'),
    "svg_entity_script": lambda: (b'<svg xmlns="http://www.w3.org/2000/svg"><a href="&#106;avascript:alert(1)">'
                                  b'<rect width="1" height="1"/></a></svg>'),
    "html_script": lambda: b"<!doctype html><html><body><p>hi</p><script>alert(1)</script></body></html>",
    "html_onerror": lambda: b'<!doctype html><html><body><img src=x onerror="alert(1)"></body></html>',
    "pdf_javascript": lambda: pdf(b"1 0 obj<< /OpenAction << /S /JavaScript /JS (app.alert(1)) >> >>endobj\n"),
    "pdf_escaped_launch": lambda: pdf(b"1 0 obj<< /OpenAction << /S /#4Caunch /F (calc) >> >>endobj\n"),
    # polyglots: one file, two readings
    "png_zip": lambda: png() + zip_of([("payload.txt", b"second reading")]),
    "gif_zip": lambda: gif() + zip_of([("payload.txt", b"second reading")]),
    "pdf_zip": lambda: pdf() + zip_of([("payload.txt", b"second reading")]),
    "jpeg_html": lambda: jpeg() + b"<html><script>alert(1)</script></html>",
    "png_trailing_bytes": lambda: png() + b"MZ\x90\x00" + bytes(60),
    "html_after_pdf_header": lambda: b"<html><body>%PDF-1.4</body></html>",
    "pdf_zip_header": lambda: pdf() + b"PK\x03\x04" + bytes(26),
    # archives
    "zip_bomb": lambda: zip_of([("zeros.bin", bytes(BOMB_BYTES))]),
    "gzip_bomb": lambda: gz(bytes(BOMB_BYTES)),
    "zip_dotdot": lambda: zip_of([("../../outside.txt", b"escape")]),
    "zip_absolute": lambda: zip_of([("/etc/cron.d/job", b"escape")]),
    "zip_backslash": lambda: zip_of([("..\\..\\outside.txt", b"escape")]),
    "zip_drive": lambda: zip_of([("C:/Windows/evil.dll", b"escape")]),
    "zip_symlink": lambda: zip_of([("ok.txt", b"fine"), (zip_link("passwd"), b"/etc/passwd")]),
    "zip_duplicate": lambda: zip_of([("same.txt", b"one"), ("same.txt", b"two")]),
    "zip_case_duplicate": lambda: zip_of([("Readme.txt", b"one"), ("README.TXT", b"two")]),
    "zip_nested": lambda: zip_of([("inner.zip", zip_of([("inner.txt", b"inside")]))]),
    "zip_many_entries": lambda: zip_of([(f"f{index:03}.txt", b"x") for index in range(65)]),
    "zip_bzip2": lambda: zip_of([("a.txt", b"bzip2 is read unbounded")], compression=zipfile.ZIP_BZIP2),
    "zip_corrupt": lambda: zip_of([("a.txt", b"first entry")], compression=zipfile.ZIP_STORED).replace(
        b"first entry", b"FIRST ENTRY"),
    "tar_symlink": lambda: tar_of([("passwd", b"", tarfile.SYMTYPE)]),
    "tar_hardlink": lambda: tar_of([("shadow", b"", tarfile.LNKTYPE)]),
    "tar_device": lambda: tar_of([("disk", b"", tarfile.BLKTYPE)]),
    "tar_fifo": lambda: tar_of([("pipe", b"", tarfile.FIFOTYPE)]),
    "tar_dotdot": lambda: tar_of([("../outside.txt", b"escape", tarfile.REGTYPE)]),
    "tar_gz_nested": lambda: gz(tar_of([_file(b"inside a tarball")])),
})
