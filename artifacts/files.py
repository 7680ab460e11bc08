"""Files a tool returns: a path is admitted only under a root the host declared.

A tool behind the boundary names a file by a relative path (text it chose, so untrusted). The host
declares a FileRoot: one directory, a byte limit, maybe a set of suffixes. admit_file reads the
file only if the path is plain (no '..', no '.', no empty segment, no absolute or Windows form, no
control or format character, NFC, within the length limits), every directory on the way is a real
directory under the root, and the last name is a regular file with one link, within the limit.

How the walk is made (Linux and other POSIX systems with openat): the root is opened and checked
to be the directory recorded when the FileRoot was built (device and inode); every directory is
then opened relative to its parent's descriptor with O_NOFOLLOW | O_DIRECTORY, so no component is
ever looked up by a path string again and a symbolic link anywhere fails the open itself. The last
name is lstat-ed (only a regular file goes on: a device, a FIFO or a socket is never opened), then
opened with O_NOFOLLOW | O_NONBLOCK, and the open descriptor's fstat must be the very file that
was lstat-ed (same device and inode): a swap between the two is refused, never read. The size
limit is checked on fstat before a byte is read, and the read itself stops at limit + 1 bytes
(a file that grows while it is read is refused).

Every symbolic link is refused, also one whose target stays inside the root: the file named must
be the file read, and nothing here reads a link's target. A file with more than one hard link is
refused: another name for it may live outside the root.

Names are compared as this platform's filesystem compares them; the module does not fold case.
A path must be in Unicode NFC: on Linux a name is bytes, so an NFC and an NFD spelling of the
same text are two different files, and admitting only NFC spellings means two admitted paths that
look the same are the same path. README.md beside it holds the threat table.

Sections:
    1. Limits and constants     3. The root
    2. Errors                   4. Admitting a file
"""
from __future__ import annotations

import errno
import hashlib
import os
import re
import stat
import sys
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Final

_HERE: Final = Path(__file__).resolve().parent
if not __package__:  # by path from a checkout: the repository root holds the core
    if str(_HERE.parent) not in sys.path:
        sys.path.insert(0, str(_HERE.parent))

import tool_dispatcher as td  # noqa: E402

__all__ = ["MAX_NAME_BYTES", "MAX_PATH_BYTES", "MAX_SEGMENTS", "DEFAULT_MAX_FILE_BYTES", "MAX_FILE_BYTES_CEILING",
           "MAX_SUFFIXES", "MAX_SUFFIX_LENGTH", "WALK_SUPPORTED", "FILE_CATALOG", "FileError", "FileRoot",
           "AdmittedFile", "check_path", "admit_file"]

# ============================================================================================
# 1. Limits and constants
# ============================================================================================

MAX_NAME_BYTES: Final = 255  # one segment in UTF-8 bytes: NAME_MAX on Linux and macOS
MAX_PATH_BYTES: Final = 1_024  # the whole relative path in UTF-8 bytes: deep enough for any artifact tree
MAX_SEGMENTS: Final = 32  # directories plus the file's name: one open descriptor per level
DEFAULT_MAX_FILE_BYTES: Final = 10_485_760  # 10 MiB: a document or an image a tool hands back
MAX_FILE_BYTES_CEILING: Final = 268_435_456  # 256 MiB: the whole file is held in memory
MAX_SUFFIXES: Final = 64
MAX_SUFFIX_LENGTH: Final = 32
READ_CHUNK: Final = 1_048_576  # bytes asked of one read()

# The walk needs openat (dir_fd), O_NOFOLLOW and O_DIRECTORY; without them (Windows) no root is
# built, rather than a weaker walk by path strings.
WALK_SUPPORTED: Final = (os.open in os.supports_dir_fd and os.stat in os.supports_dir_fd
                         and hasattr(os, "O_NOFOLLOW") and hasattr(os, "O_DIRECTORY"))
_CLOEXEC: Final = getattr(os, "O_CLOEXEC", 0)
_DIRECTORY_FLAGS: Final = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | _CLOEXEC
# O_NONBLOCK: a FIFO swapped in after the lstat opens at once instead of waiting for a writer
# (and fstat then refuses it); O_NOCTTY: a terminal swapped in never becomes ours.
_FILE_FLAGS: Final = (os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
                      | getattr(os, "O_NOCTTY", 0) | _CLOEXEC)

# Characters no name may hold: C0 and C1 controls and DEL (Cc, NUL among them), format characters
# such as bidirectional overrides that make a name read as another (Cf), lone surrogates (Cs),
# line and paragraph separators (Zl, Zp).
_REFUSED_CATEGORIES: Final = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
_DRIVE: Final = re.compile(r"[A-Za-z]:")  # C: or c:/... at the start: a Windows drive

# ============================================================================================
# 2. Errors
# ============================================================================================

FILE_CATALOG: Final = MappingProxyType({
    **td.error_specs(
        "file", False,
        FILE_PLATFORM_UNSUPPORTED="This platform cannot walk a path safely; no file is admitted.",
        FILE_ROOT_INVALID="The file root is not a usable directory with valid limits.",
        FILE_ROOT_CHANGED="The file root is no longer the directory it was declared as.",
        FILE_PATH_INVALID="The file path is not a non-empty UTF-8 text.",
        FILE_PATH_TOO_LONG="The file path is too long or too deep.",
        FILE_NAME_TOO_LONG="A name in the file path is too long.",
        FILE_PATH_CONTROL="The file path contains a control or format character.",
        FILE_PATH_WINDOWS="The file path has a backslash or a drive letter.",
        FILE_PATH_ABSOLUTE="The file path is absolute; only a path relative to the root is admitted.",
        FILE_PATH_EMPTY_SEGMENT="The file path has an empty segment.",
        FILE_PATH_DOT_SEGMENT="The file path has a '.' or '..' segment.",
        FILE_PATH_NOT_NFC="The file path is not in Unicode normalization form C.",
        FILE_SUFFIX_REFUSED="The file's suffix is not one the root admits.",
        FILE_NOT_FOUND="No file exists at this path under the root.",
        FILE_LINK_REFUSED="The file path goes through a symbolic link.",
        FILE_NOT_REGULAR="The path names something other than a regular file.",
        FILE_HARD_LINK="The file has more than one hard link.",
        FILE_TOO_LARGE="The file is larger than the root admits.",
        FILE_UNREADABLE="The file cannot be read.",
    ),
    **td.error_specs(
        "file", True,
        FILE_CHANGED="The file changed while it was being admitted; nothing was read.",
    ),
})


class FileError(td.CatalogError):
    """A file refused: a code from FILE_CATALOG (never a path or a word of the input)."""

    CATALOG = FILE_CATALOG


# ============================================================================================
# 3. The root
# ============================================================================================


@dataclass(frozen=True, slots=True)
class FileRoot:
    """A host-declared directory. ``directory`` is resolved once, here, and must be a directory;
    its device and inode are kept, so a root renamed or replaced later is refused, not followed.
    ``suffixes`` (None: any) are compared exactly, case included (".png" does not admit ".PNG")."""

    directory: str
    max_bytes: int = DEFAULT_MAX_FILE_BYTES
    suffixes: frozenset[str] | None = None
    identity: tuple[int, int] = field(init=False, default=(0, 0))  # (st_dev, st_ino), filled in here

    def __post_init__(self) -> None:
        if not WALK_SUPPORTED:
            raise FileError("FILE_PLATFORM_UNSUPPORTED")
        if type(self.max_bytes) is not int or not 0 <= self.max_bytes <= MAX_FILE_BYTES_CEILING:
            raise FileError("FILE_ROOT_INVALID")
        if self.suffixes is not None:
            object.__setattr__(self, "suffixes", _suffixes(self.suffixes))
        try:
            resolved = Path(self.directory).resolve(strict=True)
            info = os.stat(resolved)
        except (OSError, ValueError, TypeError, RuntimeError):
            raise FileError("FILE_ROOT_INVALID") from None
        if not stat.S_ISDIR(info.st_mode):
            raise FileError("FILE_ROOT_INVALID")
        object.__setattr__(self, "directory", str(resolved))
        object.__setattr__(self, "identity", (info.st_dev, info.st_ino))


def _suffixes(value: object) -> frozenset[str]:
    if not isinstance(value, (frozenset, set, tuple, list)) or len(value) > MAX_SUFFIXES:
        raise FileError("FILE_ROOT_INVALID")
    for suffix in value:
        if (type(suffix) is not str or not 2 <= len(suffix) <= MAX_SUFFIX_LENGTH or suffix[0] != "."
                or "/" in suffix or "\\" in suffix or _has_refused_character(suffix)):
            raise FileError("FILE_ROOT_INVALID")
    return frozenset(value)


# ============================================================================================
# 4. Admitting a file
# ============================================================================================


@dataclass(frozen=True, slots=True)
class AdmittedFile:
    relative_path: str  # the path as given (it passed check_path, so it is its own canonical form)
    data: bytes
    size: int  # len(data)
    sha256: str  # hex digest of data


def _has_refused_character(text: str) -> bool:
    return any(unicodedata.category(char) in _REFUSED_CATEGORIES for char in text)


def _segment_code(segment: str) -> str | None:
    if not segment:
        return "FILE_PATH_EMPTY_SEGMENT"
    if segment in (".", ".."):
        return "FILE_PATH_DOT_SEGMENT"
    if len(segment.encode("utf-8")) > MAX_NAME_BYTES:
        return "FILE_NAME_TOO_LONG"
    return None


def check_path(path: object) -> tuple[str, ...]:
    """The segments of a plain relative path, or FileError; the filesystem is not touched."""
    if type(path) is not str or not path:
        raise FileError("FILE_PATH_INVALID")
    try:
        encoded = path.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate
        raise FileError("FILE_PATH_INVALID") from None
    if len(encoded) > MAX_PATH_BYTES:
        raise FileError("FILE_PATH_TOO_LONG")
    if _has_refused_character(path):
        raise FileError("FILE_PATH_CONTROL")
    if "\\" in path or _DRIVE.match(path):
        raise FileError("FILE_PATH_WINDOWS")
    if path.startswith("/"):
        raise FileError("FILE_PATH_ABSOLUTE")
    segments = tuple(path.split("/"))
    if len(segments) > MAX_SEGMENTS:
        raise FileError("FILE_PATH_TOO_LONG")
    for segment in segments:
        code = _segment_code(segment)
        if code is not None:
            raise FileError(code)
    if not unicodedata.is_normalized("NFC", path):
        raise FileError("FILE_PATH_NOT_NFC")
    return segments


def admit_file(root: FileRoot, path: str) -> AdmittedFile:
    """Read the regular file at ``path`` under ``root``, or raise FileError (see the module)."""
    segments = check_path(path)
    if root.suffixes is not None and not segments[-1].endswith(tuple(root.suffixes)):
        raise FileError("FILE_SUFFIX_REFUSED")
    descriptors: list[int] = []
    try:
        directory = _open_root(root, descriptors)
        for name in segments[:-1]:
            directory = _open_directory(name, directory, descriptors)
        handle, size = _open_file(segments[-1], directory, descriptors)
        data = _read_bounded(handle, size, root.max_bytes)
    finally:
        for descriptor in reversed(descriptors):
            os.close(descriptor)
    return AdmittedFile(path, data, len(data), hashlib.sha256(data).hexdigest())


def _open_root(root: FileRoot, descriptors: list[int]) -> int:
    try:
        descriptor = os.open(root.directory, os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC)
    except OSError:
        raise FileError("FILE_ROOT_CHANGED") from None
    descriptors.append(descriptor)
    info = os.fstat(descriptor)
    if (info.st_dev, info.st_ino) != root.identity:
        raise FileError("FILE_ROOT_CHANGED")
    return descriptor


def _lstat(name: str, directory: int) -> os.stat_result:
    try:
        return os.stat(name, dir_fd=directory, follow_symlinks=False)
    except FileNotFoundError:
        raise FileError("FILE_NOT_FOUND") from None
    except OSError:
        raise FileError("FILE_UNREADABLE") from None


def _open_directory(name: str, parent: int, descriptors: list[int]) -> int:
    try:
        descriptor = os.open(name, _DIRECTORY_FLAGS, dir_fd=parent)
    except OSError as error:
        raise FileError(_directory_open_code(error, name, parent)) from None
    descriptors.append(descriptor)
    return descriptor


def _directory_open_code(error: OSError, name: str, parent: int) -> str:
    """Why a directory did not open: the open itself already refused; this only names why."""
    if error.errno == errno.ENOENT:
        return "FILE_NOT_FOUND"
    if error.errno not in (errno.ELOOP, errno.ENOTDIR):
        return "FILE_UNREADABLE"
    info = _lstat(name, parent)
    return "FILE_LINK_REFUSED" if stat.S_ISLNK(info.st_mode) else "FILE_NOT_FOUND"


def _open_file(name: str, directory: int, descriptors: list[int]) -> tuple[int, int]:
    """The open descriptor of the regular file ``name`` and its size, both from the open file."""
    seen = _lstat(name, directory)
    _check_kind(seen)
    try:
        handle = os.open(name, _FILE_FLAGS, dir_fd=directory)
    except FileNotFoundError:
        raise FileError("FILE_CHANGED") from None  # removed since the lstat
    except OSError as error:  # ELOOP: a link swapped in since the lstat
        raise FileError("FILE_CHANGED" if error.errno == errno.ELOOP else "FILE_UNREADABLE") from None
    descriptors.append(handle)
    opened = os.fstat(handle)
    if (opened.st_dev, opened.st_ino) != (seen.st_dev, seen.st_ino):
        raise FileError("FILE_CHANGED")
    _check_kind(opened)  # a hard link made since the lstat
    return handle, opened.st_size


def _check_kind(info: os.stat_result) -> None:
    if stat.S_ISLNK(info.st_mode):
        raise FileError("FILE_LINK_REFUSED")
    if not stat.S_ISREG(info.st_mode):
        raise FileError("FILE_NOT_REGULAR")
    if info.st_nlink == 0:  # removed (or renamed over) since it was named: gone, not linked twice
        raise FileError("FILE_CHANGED")
    if info.st_nlink != 1:
        raise FileError("FILE_HARD_LINK")


def _read_bounded(handle: int, size: int, max_bytes: int) -> bytes:
    if size > max_bytes:  # from fstat: refused before a byte is read
        raise FileError("FILE_TOO_LARGE")
    chunks: list[bytes] = []
    total = 0
    try:
        while total <= max_bytes:  # at most max_bytes + 1 bytes: the one past says it grew
            chunk = os.read(handle, min(READ_CHUNK, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    except OSError:
        raise FileError("FILE_UNREADABLE") from None
    if total > max_bytes:
        raise FileError("FILE_TOO_LARGE")
    return b"".join(chunks)
