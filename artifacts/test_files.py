"""Tests of files.py: every refused class of path, both sides of every limit, and a real tree per
test (tempfile) with links, a FIFO, a socket, a device, hard links and swaps made mid-admission."""
from __future__ import annotations

import errno
import os
import socket
import stat
import sys
import tempfile
import unittest
from pathlib import Path
from unittest import mock

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import files  # noqa: E402
from files import FileError, FileRoot, admit_file, check_path  # noqa: E402

LINUX = sys.platform.startswith("linux")


class Tree(unittest.TestCase):
    """A temporary folder per test: ``outside`` beside ``root``, both with a file."""

    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.base = Path(tmp.name)
        self.top = self.base / "root"
        self.top.mkdir()
        self.outside = self.base / "outside.txt"
        self.outside.write_bytes(b"secret")
        self.root = FileRoot(str(self.top), max_bytes=64)

    def write(self, relative, data=b"data"):
        path = self.top / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return path

    def refuses(self, path, code, root=None):
        with self.assertRaises(FileError) as caught:
            admit_file(root or self.root, path)
        self.assertEqual(caught.exception.code, code)
        return caught.exception


class TestRoot(Tree):
    def test_root_is_resolved_once_and_kept_by_identity(self):
        link = self.base / "root-link"
        link.symlink_to(self.top)
        root = FileRoot(str(link))
        self.assertEqual(root.directory, str(self.top.resolve()))
        info = os.stat(self.top)
        self.assertEqual(root.identity, (info.st_dev, info.st_ino))
        self.assertEqual(root.max_bytes, files.DEFAULT_MAX_FILE_BYTES)

    def test_invalid_roots_are_refused(self):
        self.write("f.txt")
        cases = {
            "missing": dict(directory=str(self.base / "missing")),
            "a file": dict(directory=str(self.top / "f.txt")),
            "NUL in the path": dict(directory="a\x00b"),
            "not a path": dict(directory=7),
            "negative limit": dict(directory=str(self.top), max_bytes=-1),
            "limit past the ceiling": dict(directory=str(self.top), max_bytes=files.MAX_FILE_BYTES_CEILING + 1),
            "limit not an int": dict(directory=str(self.top), max_bytes=True),
            "suffixes a string": dict(directory=str(self.top), suffixes=".txt"),
            "suffix without a dot": dict(directory=str(self.top), suffixes={"txt"}),
            "suffix only a dot": dict(directory=str(self.top), suffixes={"."}),
            "suffix with a slash": dict(directory=str(self.top), suffixes={".a/b"}),
            "suffix with a control": dict(directory=str(self.top), suffixes={".a\x00"}),
            "suffix too long": dict(directory=str(self.top), suffixes={"." + "a" * files.MAX_SUFFIX_LENGTH}),
            "too many suffixes": dict(directory=str(self.top),
                                      suffixes={f".s{index}" for index in range(files.MAX_SUFFIXES + 1)}),
        }
        for name, arguments in cases.items():
            with self.subTest(name), self.assertRaises(FileError) as caught:
                FileRoot(**arguments)
            self.assertEqual(caught.exception.code, "FILE_ROOT_INVALID")

    def test_a_root_through_a_missing_directory_is_refused_not_shortened(self):
        # "missing/.." would shorten to the root itself by text; the walk the kernel makes fails
        (self.top / "sub").mkdir()
        self.assertEqual(FileRoot(str(self.top / "sub" / "..")).directory, str(self.top.resolve()))
        with self.assertRaises(FileError) as caught:
            FileRoot(str(self.top / "missing" / ".."))
        self.assertEqual(caught.exception.code, "FILE_ROOT_INVALID")

    def test_limits_at_their_bounds_are_accepted(self):
        root = FileRoot(str(self.top), max_bytes=files.MAX_FILE_BYTES_CEILING,
                        suffixes=[f".s{index}" for index in range(files.MAX_SUFFIXES - 1)]
                        + ["." + "a" * (files.MAX_SUFFIX_LENGTH - 1)])
        self.assertEqual(len(root.suffixes), files.MAX_SUFFIXES)
        self.assertEqual(FileRoot(str(self.top), max_bytes=0).max_bytes, 0)

    def test_root_replaced_after_declaration_is_refused(self):
        self.write("f.txt")
        self.top.rename(self.base / "moved")
        self.refuses("f.txt", "FILE_ROOT_CHANGED")
        self.top.mkdir()
        self.write("f.txt")
        self.refuses("f.txt", "FILE_ROOT_CHANGED")

    def test_platform_without_openat_builds_no_root(self):
        with mock.patch.object(files, "WALK_SUPPORTED", False), self.assertRaises(FileError) as caught:
            FileRoot(str(self.top))
        self.assertEqual(caught.exception.code, "FILE_PLATFORM_UNSUPPORTED")

    def test_this_platform_walks(self):
        self.assertEqual(files.WALK_SUPPORTED, os.name == "posix")


class TestCheckPath(unittest.TestCase):
    """Every refused class of path text, decided before the filesystem is touched."""

    REFUSED = (
        ("", "FILE_PATH_INVALID"),
        (None, "FILE_PATH_INVALID"),
        (b"a.txt", "FILE_PATH_INVALID"),
        ("a\ud800.txt", "FILE_PATH_INVALID"),  # a lone surrogate is no UTF-8
        ("a\x00b", "FILE_PATH_CONTROL"),
        ("a\nb", "FILE_PATH_CONTROL"),
        ("a\tb", "FILE_PATH_CONTROL"),
        ("a\x7fb", "FILE_PATH_CONTROL"),
        ("a\x85b", "FILE_PATH_CONTROL"),  # C1 control
        ("txt.\u202eexe", "FILE_PATH_CONTROL"),  # right-to-left override: reads as another name
        ("a\u200bb", "FILE_PATH_CONTROL"),  # zero-width space (a format character)
        ("a\u2028b", "FILE_PATH_CONTROL"),
        ("a\\b", "FILE_PATH_WINDOWS"),
        ("\\\\server\\share\\f", "FILE_PATH_WINDOWS"),
        ("C:f.txt", "FILE_PATH_WINDOWS"),
        ("c:/f.txt", "FILE_PATH_WINDOWS"),
        ("/etc/passwd", "FILE_PATH_ABSOLUTE"),
        ("/", "FILE_PATH_ABSOLUTE"),
        ("//f", "FILE_PATH_ABSOLUTE"),
        ("a//b", "FILE_PATH_EMPTY_SEGMENT"),
        ("a/", "FILE_PATH_EMPTY_SEGMENT"),
        (".", "FILE_PATH_DOT_SEGMENT"),
        ("..", "FILE_PATH_DOT_SEGMENT"),
        ("../f", "FILE_PATH_DOT_SEGMENT"),
        ("a/../a/f", "FILE_PATH_DOT_SEGMENT"),  # stays inside, refused all the same
        ("a/./f", "FILE_PATH_DOT_SEGMENT"),
        ("a/..", "FILE_PATH_DOT_SEGMENT"),
        ("cafe\u0301.txt", "FILE_PATH_NOT_NFC"),  # e + combining acute: NFD
        ("\u212b.txt", "FILE_PATH_NOT_NFC"),  # the angstrom sign, whose NFC is U+00C5
    )
    ACCEPTED = ("f", "a/b/c.txt", "...", "..f", "f..", ".hidden", "ab:c", "1:f", "caf\u00e9.txt", "a b.txt",
                "\u00c5.txt", "\u65e5\u672c.txt")

    def test_every_refused_class(self):
        for path, code in self.REFUSED:
            with self.subTest(path=repr(path)), self.assertRaises(FileError) as caught:
                check_path(path)
            self.assertEqual(caught.exception.code, code)

    def test_plain_paths_are_split_into_segments(self):
        for path in self.ACCEPTED:
            with self.subTest(path=path):
                self.assertEqual(check_path(path), tuple(path.split("/")))

    def test_name_length_both_sides(self):
        self.assertEqual(check_path("a" * files.MAX_NAME_BYTES), ("a" * 255,))
        self.assertEqual(len(check_path("\u00e9" * 127 + "a")[0].encode()), files.MAX_NAME_BYTES)
        for name in ("a" * (files.MAX_NAME_BYTES + 1), "\u00e9" * 128):  # 256 bytes
            with self.subTest(length=len(name)), self.assertRaises(FileError) as caught:
                check_path("d/" + name)
            self.assertEqual(caught.exception.code, "FILE_NAME_TOO_LONG")

    def test_path_length_both_sides(self):
        at_limit = "/".join(["a" * 200] * 5) + "/" + "b" * (files.MAX_PATH_BYTES - 1005)
        self.assertEqual(len(at_limit.encode()), files.MAX_PATH_BYTES)
        self.assertEqual(len(check_path(at_limit)), 6)
        with self.assertRaises(FileError) as caught:
            check_path(at_limit + "b")
        self.assertEqual(caught.exception.code, "FILE_PATH_TOO_LONG")

    def test_depth_both_sides(self):
        self.assertEqual(len(check_path("/".join(["d"] * files.MAX_SEGMENTS))), files.MAX_SEGMENTS)
        with self.assertRaises(FileError) as caught:
            check_path("/".join(["d"] * (files.MAX_SEGMENTS + 1)))
        self.assertEqual(caught.exception.code, "FILE_PATH_TOO_LONG")

    def test_messages_are_fixed(self):
        for path, code in self.REFUSED:
            with self.subTest(code=code), self.assertRaises(FileError) as caught:
                check_path(path)
            self.assertEqual(caught.exception.message, files.FILE_CATALOG[code].message)
            self.assertEqual(caught.exception.to_json(), {"code": code, "message": caught.exception.message,
                                                           "retryable": False})


class TestAdmit(Tree):
    def test_regular_file_is_admitted(self):
        self.write("sub/dir/report.txt", b"hello")
        admitted = admit_file(self.root, "sub/dir/report.txt")
        self.assertEqual(admitted, files.AdmittedFile(
            "sub/dir/report.txt", b"hello", 5, "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"))

    def test_size_both_sides(self):
        self.write("at.bin", b"x" * 64)
        self.write("over.bin", b"x" * 65)
        self.assertEqual(admit_file(self.root, "at.bin").size, 64)
        self.refuses("over.bin", "FILE_TOO_LARGE")

    def test_a_size_past_the_limit_is_refused_before_any_read(self):
        self.write("at.bin", b"x" * 64)
        self.write("over.bin", b"x" * 65)
        with mock.patch.object(files.os, "read", wraps=os.read) as reads:
            self.refuses("over.bin", "FILE_TOO_LARGE")
            self.assertEqual(reads.call_count, 0)
            self.assertEqual(admit_file(self.root, "at.bin").size, 64)
            self.assertEqual(reads.call_count, 2)  # 64 bytes, then the end of the file

    def test_the_fstat_size_alone_refuses_a_file_that_shrank(self):
        # the size handed in is the open file's fstat size; past the limit, nothing is read at all
        path = self.write("shrunk", b"x" * 5)
        descriptor = os.open(path, os.O_RDONLY)
        self.addCleanup(os.close, descriptor)
        with self.assertRaises(FileError) as caught:
            files._read_bounded(descriptor, 11, 10)
        self.assertEqual(caught.exception.code, "FILE_TOO_LARGE")
        self.assertEqual(files._read_bounded(descriptor, 10, 10), b"x" * 5)

    def test_zero_limit_admits_only_empty_files(self):
        root = FileRoot(str(self.top), max_bytes=0)
        self.write("empty", b"")
        self.write("one", b"x")
        self.assertEqual(admit_file(root, "empty").data, b"")
        self.refuses("one", "FILE_TOO_LARGE", root)

    def test_a_file_that_grows_past_its_fstat_size_is_refused(self):
        # the size checked before reading came from fstat; the read itself stops at limit + 1
        path = self.write("growing", b"x" * 11)
        descriptor = os.open(path, os.O_RDONLY)
        self.addCleanup(os.close, descriptor)
        with self.assertRaises(FileError) as caught:
            files._read_bounded(descriptor, 5, 10)
        self.assertEqual(caught.exception.code, "FILE_TOO_LARGE")
        os.lseek(descriptor, 1, os.SEEK_SET)
        self.assertEqual(files._read_bounded(descriptor, 5, 10), b"x" * 10)

    def test_suffixes_are_compared_exactly(self):
        root = FileRoot(str(self.top), suffixes=frozenset({".txt", ".png"}))
        for name in ("a.txt", "b.png", "a.TXT", "a.txt.sh", "txt", "a"):
            self.write(name)
        self.assertEqual(admit_file(root, "a.txt").data, b"data")
        self.assertEqual(admit_file(root, "b.png").data, b"data")
        for name in ("a.TXT", "a.txt.sh", "txt", "a"):
            with self.subTest(name):
                self.refuses(name, "FILE_SUFFIX_REFUSED", root)

    def test_missing_files_and_directories(self):
        self.write("f.txt")
        self.refuses("missing.txt", "FILE_NOT_FOUND")
        self.refuses("missing/f.txt", "FILE_NOT_FOUND")
        self.refuses("f.txt/f.txt", "FILE_NOT_FOUND")  # a file where a directory is named

    def test_read_failure_is_unreadable(self):
        self.write("f.txt")
        with mock.patch.object(files.os, "read", side_effect=OSError(errno.EIO, "I/O error")):
            self.refuses("f.txt", "FILE_UNREADABLE")

    def test_lstat_failure_is_unreadable(self):
        self.write("f.txt")
        with mock.patch.object(files.os, "stat", side_effect=OSError(errno.EACCES, "denied")):
            self.refuses("f.txt", "FILE_UNREADABLE")

    def test_unopenable_directory_is_unreadable(self):
        self.write("d/f.txt")
        real_open = os.open

        def denied(name, flags, *args, **kwargs):
            if name == "d":
                raise PermissionError(errno.EACCES, "denied")
            return real_open(name, flags, *args, **kwargs)

        with mock.patch.object(files.os, "open", side_effect=denied):
            self.refuses("d/f.txt", "FILE_UNREADABLE")

    def test_descriptors_are_closed_on_every_outcome(self):
        self.write("a/b/f.txt")
        self.write("a/b/big", b"x" * 65)
        before = len(os.listdir("/proc/self/fd")) if LINUX else 0
        admit_file(self.root, "a/b/f.txt")
        self.refuses("a/b/big", "FILE_TOO_LARGE")
        self.refuses("a/b/missing", "FILE_NOT_FOUND")
        if LINUX:
            self.assertEqual(len(os.listdir("/proc/self/fd")), before)


class TestLinks(Tree):
    """Every symbolic link on the path is refused, wherever it points."""

    def link(self, relative, target):
        path = self.top / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.symlink_to(target)

    def test_links_anywhere_are_refused(self):
        self.write("inside.txt")
        (self.base / "outdir").mkdir()
        (self.base / "outdir" / "f.txt").write_bytes(b"secret")
        self.write("real/f.txt")
        self.link("absolute.txt", self.outside)
        self.link("relative.txt", "../outside.txt")
        self.link("inside-link.txt", "inside.txt")
        self.link("chain1", "chain2")
        self.link("chain2", "chain3")
        self.link("chain3", "inside.txt")
        self.link("dangling.txt", "nowhere.txt")
        self.link("null", "/dev/null")
        self.link("outdir", self.base / "outdir")
        self.link("relative-dir", "../outdir")
        self.link("inside-dir", "real")
        self.link("deep/er/link", "../../inside.txt")
        cases = ("absolute.txt", "relative.txt", "inside-link.txt", "chain1", "dangling.txt", "null",
                 "outdir/f.txt", "relative-dir/f.txt", "inside-dir/f.txt", "deep/er/link")
        for path in cases:
            with self.subTest(path):
                self.refuses(path, "FILE_LINK_REFUSED")
        self.assertEqual(admit_file(self.root, "real/f.txt").data, b"data")
        self.assertEqual(admit_file(self.root, "inside.txt").data, b"data")

    def test_hard_link_is_refused_until_it_is_the_only_name(self):
        target = self.write("f.txt", b"shared")
        other = self.base / "other-name.txt"
        os.link(target, other)
        self.refuses("f.txt", "FILE_HARD_LINK")
        other.unlink()
        self.assertEqual(admit_file(self.root, "f.txt").data, b"shared")


class TestSpecialFiles(Tree):
    def test_directory_is_refused(self):
        (self.top / "d").mkdir()
        self.refuses("d", "FILE_NOT_REGULAR")

    def test_fifo_is_refused_without_waiting_for_a_writer(self):
        os.mkfifo(self.top / "pipe")
        self.refuses("pipe", "FILE_NOT_REGULAR")

    def test_socket_is_refused(self):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
            server.bind(str(self.top / "sock"))
            self.refuses("sock", "FILE_NOT_REGULAR")

    def test_device_is_refused(self):
        try:
            os.mknod(self.top / "null", stat.S_IFCHR | 0o600, os.makedev(1, 3))
        except OSError:
            self.skipTest("no privilege to make a device node here")
        self.refuses("null", "FILE_NOT_REGULAR")


class TestRaces(Tree):
    """Swaps between two admissions, and between the lstat and the open of one admission."""

    def test_file_swapped_for_a_link_between_calls(self):
        path = self.write("f.txt", b"first")
        self.assertEqual(admit_file(self.root, "f.txt").data, b"first")
        path.unlink()
        path.symlink_to(self.outside)
        self.refuses("f.txt", "FILE_LINK_REFUSED")

    def test_directory_swapped_for_a_link_between_calls(self):
        self.write("d/f.txt", b"first")
        (self.base / "evil").mkdir()
        (self.base / "evil" / "f.txt").write_bytes(b"secret")
        self.assertEqual(admit_file(self.root, "d/f.txt").data, b"first")
        (self.top / "d").rename(self.base / "old-d")
        (self.top / "d").symlink_to(self.base / "evil")
        self.refuses("d/f.txt", "FILE_LINK_REFUSED")

    def swap_after_lstat(self, swap):
        real = files._lstat

        def lstat_then_swap(name, directory):
            seen = real(name, directory)
            swap(self.top / name)
            return seen

        return mock.patch.object(files, "_lstat", side_effect=lstat_then_swap)

    def test_swaps_between_lstat_and_open_are_refused(self):
        def to_link(path):
            path.unlink()
            path.symlink_to(self.outside)

        def to_other_file(path):
            other = self.top / "other"
            other.write_bytes(b"other")
            other.replace(path)

        def to_fifo(path):
            os.mkfifo(self.top / "pipe")  # made while the file still exists: another inode
            (self.top / "pipe").replace(path)  # opened with O_NONBLOCK: no wait for a writer

        def removed(path):
            path.unlink()

        def hard_linked(path):
            os.link(path, self.base / "second-name")

        for swap in (to_link, to_other_file, to_fifo, removed, hard_linked):
            with self.subTest(swap.__name__):
                self.write("f.txt", b"first")
                (self.base / "second-name").unlink(missing_ok=True)
                try:
                    with self.swap_after_lstat(swap):
                        error = self.refuses("f.txt", "FILE_HARD_LINK" if swap is hard_linked else "FILE_CHANGED")
                finally:
                    (self.top / "f.txt").unlink(missing_ok=True)
                self.assertEqual(error.retryable, swap is not hard_linked)


    def test_a_file_renamed_over_right_after_the_open_is_changed_not_hard_linked(self):
        # The open descriptor holds the old file, now with no name at all (st_nlink 0): a writer's
        # atomic replace, which a retry reads whole.
        self.write("f.txt", b"first")
        real_open = os.open

        def open_then_replace(path, flags, *args, **kwargs):
            descriptor = real_open(path, flags, *args, **kwargs)
            if path == "f.txt":
                (self.top / "new").write_bytes(b"second")
                (self.top / "new").replace(self.top / "f.txt")
            return descriptor

        with mock.patch.object(files.os, "open", open_then_replace):
            error = self.refuses("f.txt", "FILE_CHANGED")
        self.assertTrue(error.retryable)
        self.assertEqual(admit_file(self.root, "f.txt").data, b"second")


@unittest.skipUnless(LINUX, "what Linux filesystems do with case and Unicode")
class TestLinuxNames(Tree):
    def test_nfc_and_nfd_spellings_are_two_files_and_only_nfc_is_admitted(self):
        nfc, nfd = "caf\u00e9.txt", "cafe\u0301.txt"
        (self.top / nfc).write_bytes(b"composed")
        (self.top / nfd).write_bytes(b"decomposed")
        self.assertEqual(sorted(os.listdir(self.top)), sorted([nfc, nfd]))
        self.assertEqual(admit_file(self.root, nfc).data, b"composed")
        self.refuses(nfd, "FILE_PATH_NOT_NFC")

    def test_an_nfd_name_on_disk_is_not_reached_by_its_nfc_spelling(self):
        (self.top / "cafe\u0301.txt").write_bytes(b"decomposed")
        self.refuses("caf\u00e9.txt", "FILE_NOT_FOUND")

    def test_names_differing_in_case_are_two_files(self):
        (self.top / "Report.txt").write_bytes(b"upper")
        (self.top / "report.txt").write_bytes(b"lower")
        self.assertEqual(admit_file(self.root, "Report.txt").data, b"upper")
        self.assertEqual(admit_file(self.root, "report.txt").data, b"lower")
        self.refuses("REPORT.txt", "FILE_NOT_FOUND")


if __name__ == "__main__":
    unittest.main()
