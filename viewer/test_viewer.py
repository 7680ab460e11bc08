"""Tests for the audit viewer (viewer/audit-viewer.html), in the order a page comes to be and is used.

The page is built from its sources, inlines the command-line verifier's JavaScript byte for byte,
and holds no markup sink and no network call. In a real headless Chromium it gives every log the
answer the command line gives (the same bytes and status): the shipped fixture's log, sealed and
unsealed, every tampered copy verifiers/tamper.py builds, hostile files, signed checkpoints and
their tampered copies; it marks the entry where a log breaks, shows no file's text as markup,
never shows a secret, and writes nothing to the console.

The command line is called in this process (tool_dispatcher.main and audit_signatures.main, the
functions the scripts run), which keeps about a hundred comparisons within seconds. Without
Chromium the browser tests are skipped, and without the cryptography package the checkpoint
tests; under CI=true either is a failure instead (viewer/ci.sh installs both).
"""
from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import random
import re
import shutil
import sys
import tempfile
import unittest
from pathlib import Path
from typing import Any, Final
from unittest import mock

HERE: Final = Path(__file__).resolve().parent
ROOT: Final = HERE.parent
for folder in (HERE, ROOT / "verifiers", ROOT / "signatures"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

import browser  # noqa: E402
import build_viewer  # noqa: E402
import tamper  # noqa: E402  (loads the checkout's tool_dispatcher by path, as run.sh's checks do)

td = tamper.td
IN_CI: Final = os.environ.get("CI") == "true"
PAGE_URL: Final = build_viewer.PAGE.as_uri()
FIXTURE: Final = str(ROOT / "tool-cases.json")
SOURCES: Final = ("verifiers/javascript/jcs.js", "verifiers/javascript/audit_core.js", "viewer/viewer.js")
DONE: Final = "document.documentElement.dataset.state === 'done'"
RUNS: Final = "Number(document.documentElement.dataset.runs || 0)"
# What a person sees, read from the page in one go.
SEEN: Final = """(() => {
  const data = document.documentElement.dataset;
  const rows = [...document.querySelectorAll('#timeline > li.entry')];
  return {
    output: document.getElementById('cli-output').textContent,
    status: data.status === undefined ? null : Number(data.status),
    verdict: data.verdict === undefined ? null : data.verdict,
    checkpoints: data.checkpoints === undefined ? null : data.checkpoints,
    title: document.getElementById('verdict-title').textContent,
    note: document.getElementById('note').textContent,
    broken: rows.filter((row) => row.classList.contains('broken')).map((row) => [Number(row.dataset.position), row.dataset.code]),
    positions: rows.map((row) => Number(row.dataset.position)),
    deliveries: [...document.querySelectorAll('#timeline .badge.delivery')].map((badge) => badge.dataset.value),
    gaps: [...document.querySelectorAll('#timeline > li.gap')].map((gap) => gap.textContent),
    showBreak: !document.getElementById('show-break').hidden,
    resources: performance.getEntriesByType('resource').length,
  };
})()"""
# The page's whole text and markup, for the tests that look for something in them.
CONTENT: Final = """(() => ({
  elements: [...new Set([...document.querySelectorAll('#run *')].map((node) => node.tagName.toLowerCase()))],
  text: document.getElementById('run').textContent,
  html: document.documentElement.outerHTML,
}))()"""


def cli(main: Any, *argv: str) -> tuple[int, str]:
    """A command line's exit status and stdout, run in this process with no seal keys from the
    environment (the CLI reads TOOL_DISPATCHER_SEAL_KEYS when --seal-key is absent)."""
    out = io.StringIO()
    environment = {name: value for name, value in os.environ.items() if name != "TOOL_DISPATCHER_SEAL_KEYS"}
    with mock.patch.dict(os.environ, environment, clear=True), contextlib.redirect_stdout(out):
        status = main(list(argv))
    return status, out.getvalue()


def verdict_of(output: str) -> str:
    answer = json.loads(output)
    return "passed" if answer["passed"] else (answer.get("failure") or answer["error"])["code"]


def write(path: Path, data: bytes) -> str:
    with open(path, "wb") as handle:
        handle.write(data)
    return str(path)


def read(path: str | Path) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def page_text() -> str:
    with open(build_viewer.PAGE, encoding="utf-8", newline="") as handle:
        return handle.read()


def chromium_or_skip(test: unittest.TestCase) -> None:
    if browser.find_chromium() is None:
        if IN_CI:
            test.fail("no Chromium: viewer/ci.sh installs Debian's chromium")
        test.skipTest("no Chromium on this machine (apt-get install -y chromium)")


# ================================================================================================
# 1. The page as built
# ================================================================================================

class TestBuild(unittest.TestCase):
    def test_the_committed_page_is_what_a_build_writes(self):
        self.assertEqual(page_text(), build_viewer.build())

    def test_the_verifiers_scripts_are_inlined_byte_for_byte(self):
        inlined = re.findall(r'<script type="module" data-source="([^"]+)">(.*?)</script>', page_text(), re.DOTALL)
        self.assertEqual([path for path, _ in inlined], list(SOURCES))
        for path, text in inlined:
            with self.subTest(path=path):
                self.assertEqual(text.encode("utf-8"), read(ROOT / path))
        self.assertEqual(page_text().count("<script"), 3)

    def test_the_style_is_inlined_byte_for_byte(self):
        styles = re.findall(r'<style data-source="([^"]+)">(.*?)</style>', page_text(), re.DOTALL)
        self.assertEqual([(path, text.encode("utf-8")) for path, text in styles],
                         [("viewer/viewer.css", read(HERE / "viewer.css"))])

    def test_the_policy_runs_only_the_inlined_elements_and_allows_no_connection(self):
        policy = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]+)">', page_text()).group(1)
        scripts = [build_viewer.digest_token(read(ROOT / path).decode("utf-8")) for path in SOURCES]
        style = build_viewer.digest_token(read(HERE / "viewer.css").decode("utf-8"))
        self.assertEqual(policy, f"default-src 'none'; script-src {' '.join(scripts)}; style-src {style}; "
                                 "img-src 'none'; connect-src 'none'; form-action 'none'; base-uri 'none'")

    def test_no_script_writes_markup_or_reaches_the_network(self):
        sinks = re.compile(r"\.(innerHTML|outerHTML)\b|insertAdjacentHTML|document\.write|\beval\s*\(|new Function"
                           r"|\bfetch\s*\(|XMLHttpRequest|WebSocket|sendBeacon|EventSource|\bimport\s*\(|\bsrc\s*="
                           r"|\bhref\s*=|https?:|<link|<img|<iframe|<object|<embed|<form|<base")
        for path in (*SOURCES, "viewer/page.html", "viewer/viewer.css"):
            with self.subTest(path=path):
                self.assertEqual(sinks.findall(read(ROOT / path).decode("utf-8")), [])

    def test_a_source_that_would_end_its_element_early_is_refused(self):
        with tempfile.TemporaryDirectory() as scratch:
            for text in ("x = '</script>';", "/* </STYLE> */", "<!-- a comment -->", "s = '<script';"):
                with self.subTest(text=text), mock.patch.object(build_viewer, "ROOT", Path(scratch).resolve()):
                    write(Path(scratch) / "bad.js", text.encode("utf-8"))
                    with self.assertRaises(build_viewer.BuildError):
                        build_viewer.source_text("bad.js")

    def test_a_source_outside_the_repository_is_refused(self):
        with self.assertRaises(build_viewer.BuildError):
            build_viewer.source_text("../outside.js")

    def test_check_fails_on_a_stale_page(self):
        with tempfile.TemporaryDirectory() as scratch:
            stale = Path(scratch) / "audit-viewer.html"
            write(stale, page_text().replace("tool-dispatcher audit viewer", "stale", 1).encode("utf-8"))
            with mock.patch.object(build_viewer, "PAGE", stale), contextlib.redirect_stdout(io.StringIO()) as out:
                self.assertEqual(build_viewer.main(["--check"]), 1)
            self.assertIn("differs from a fresh build", out.getvalue())
            with contextlib.redirect_stdout(io.StringIO()):
                self.assertEqual(build_viewer.main(["--check"]), 0)


# ================================================================================================
# 2. The page in a browser: the logs and their tampered copies
# ================================================================================================

class BrowserCase(unittest.TestCase):
    """One Chromium for the class, one tab, and the fixture's logs in a temporary directory."""

    @classmethod
    def setUpClass(cls):
        cls.scratch = Path(tempfile.mkdtemp(prefix="td-viewer-test-"))
        cls.browser = None
        if browser.find_chromium() is None:
            return
        cls.unsealed = str(cls.scratch / "unsealed.log")
        cls.sealed = str(cls.scratch / "sealed.log")
        cls.secret = random.Random(20251206).randbytes(32).hex()
        cls.keys = write(cls.scratch / "keys.json", json.dumps(
            {"format": "seal-keys-v1", "current": "k-viewer", "keys": [{"key_id": "k-viewer", "secret_hex": cls.secret}]})
            .encode("utf-8"))
        for path, extra in ((cls.unsealed, ()), (cls.sealed, ("--seal-key", cls.keys))):
            status, _ = cli(td.main, "--fixture", FIXTURE, "--audit-log", path, *extra)
            if status != 0:
                raise RuntimeError("the fixture did not run")
        cls.browser = browser.Browser()
        cls.page = cls.browser.new_page()

    @classmethod
    def tearDownClass(cls):
        if cls.browser is not None:
            cls.browser.close()
        shutil.rmtree(cls.scratch, ignore_errors=True)

    def setUp(self):
        chromium_or_skip(self)

    def seen(self, **files: str) -> dict[str, Any]:
        """Open the page, hand it the files (the log last) as its pickers would, and read it."""
        self.page.navigate(PAGE_URL)
        self.page.wait_until(DONE)
        for role in ("keys", "publicKey", "checkpoints", "log"):
            if role in files:
                runs = self.page.evaluate(RUNS)
                self.page.set_files(f'input[data-role="{role}"]', [files[role]])
                self.page.wait_until(f"{DONE} && {RUNS} > {runs}")
        seen = self.page.evaluate(SEEN)
        seen["problems"] = self.page.problems()
        return seen

    def content(self) -> dict[str, Any]:
        return self.page.evaluate(CONTENT)

    def assertAgrees(self, seen: dict[str, Any], status: int, output: str, expected: str | None = None) -> None:
        """The page printed the command line's bytes and status, marked where the log breaks, and
        nothing went to the console."""
        self.assertEqual((seen["output"], seen["status"]), (output, status))
        self.assertEqual(seen["verdict"], verdict_of(output))
        if expected is not None:
            self.assertEqual(seen["verdict"], expected)
        failure = json.loads(output).get("failure")
        if failure is not None and failure["at"].startswith("entries["):
            self.assertEqual((seen["broken"], seen["showBreak"]), ([[failure["index"], failure["code"]]], True))
        else:
            self.assertEqual((seen["broken"], seen["showBreak"]), ([], False))
        self.assertEqual(seen["problems"], [])
        self.assertEqual(seen["resources"], 0)


class TestFixtureLogs(BrowserCase):
    def test_the_unsealed_log_is_verified_and_shown_call_by_call(self):
        seen = self.seen(log=self.unsealed)
        self.assertAgrees(seen, *cli(td.main, "--verify-audit", self.unsealed), "passed")
        self.assertEqual(seen["positions"], list(range(31)))  # 30 calls and the closing entry
        self.assertEqual(seen["title"], "Verified: 30 entries")
        self.assertEqual(sorted(set(seen["deliveries"])), ["fresh", "local_replay", "none", "receipt_reconciled"])
        text = self.content()["text"]
        for shown in ("create_refund_draft", "approver-lee, valid until 2027-01-15 08:05:00 UTC (1800000300)",
                      "IDEMPOTENCY_CONFLICT", '{"order_ref":"ORDER-7","status":"paid"}', "the writer closed the log here"):
            self.assertIn(shown, text)

    def test_the_sealed_log_is_verified_with_its_key_and_the_key_is_never_shown(self):
        seen = self.seen(keys=self.keys, log=self.sealed)
        self.assertAgrees(seen, *cli(td.main, "--verify-audit", self.sealed, "--seal-key", self.keys), "passed")
        self.assertIn("every one sealed with a key given", seen["title"])
        content = self.content()
        self.assertIn("key k-viewer", content["text"])
        self.page.evaluate("document.querySelectorAll('details').forEach((details) => { details.open = true; })")
        self.assertNotIn(self.secret, self.content()["html"])

    def test_the_sealed_log_without_its_key_is_consistent_only(self):
        seen = self.seen(log=self.sealed)
        self.assertAgrees(seen, *cli(td.main, "--verify-audit", self.sealed), "passed")
        self.assertIn("consistency only", self.page.evaluate("document.getElementById('verdict-detail').textContent"))

    def test_a_dropped_file_is_the_log(self):
        self.page.navigate(PAGE_URL)
        self.page.wait_until(DONE)
        runs = self.page.evaluate(RUNS)
        self.page.drop_files(200, 20, [self.unsealed])  # on the page's title, no field's drop zone
        self.page.wait_until(f"{DONE} && {RUNS} > {runs}")
        self.assertEqual(self.page.evaluate("document.documentElement.dataset.verdict"), "passed")
        self.assertEqual(self.page.problems(), [])

    def test_seal_keys_and_a_public_key_together_are_refused_as_the_command_line_refuses_them(self):
        seen = self.seen(keys=self.keys, publicKey=self.keys, log=self.unsealed)
        self.assertEqual((seen["verdict"], seen["status"], seen["positions"], seen["problems"]), ("CLI_USAGE", 2, [], []))
        status, output = cli(td.main, "--verify-audit", self.unsealed, "--seal-key", self.keys, "--public-key", self.keys)
        self.assertEqual((seen["output"], seen["status"]), (output, status))

    def test_the_page_without_a_log_asks_for_one(self):
        self.page.navigate(PAGE_URL)
        self.page.wait_until(DONE)
        self.assertEqual(self.page.evaluate("document.getElementById('verdict-title').textContent"),
                         "Drop an audit log on this page, or pick one above.")
        self.assertEqual(self.page.problems(), [])


class TestTamperedCopies(BrowserCase):
    # Cases of tamper.py that exercise the command line's own syntax, which the page does not have.
    COMMAND_LINE_ONLY: Final = frozenset({"usage no value", "usage unknown flag", "usage report", "usage value like a flag",
                                          "usage stray argument", "equals form", "no arguments", "sealed empty-key-path",
                                          "usage value naming an option, with a space", "usage value that is -h and more",
                                          "value like a negative number in other digits"})

    def test_every_tampered_copy_gets_the_command_lines_answer_and_mark(self):
        out = self.scratch / "tampered"
        out.mkdir()
        cases = tamper.build(self.unsealed, self.sealed, self.keys, str(out))
        checked = 0
        for row in cases.rows:
            name, *arguments, expected = row.split(tamper.FIELD_SEPARATOR)
            files = self.files_of(arguments)
            if files is None:
                self.assertIn(name, self.COMMAND_LINE_ONLY)
                continue
            with self.subTest(case=name):
                self.assertAgrees(self.seen(**files), *cli(td.main, *arguments), expected)
                checked += 1
        self.assertEqual(checked, len(cases.rows) - len(self.COMMAND_LINE_ONLY))
        self.assertGreaterEqual(checked, 60)

    @staticmethod
    def files_of(arguments: list[str]) -> dict[str, str] | None:
        """The files a command line names, or None when it is about the command line's own syntax."""
        paths = arguments[1::2]
        if arguments[0::2] not in (["--verify-audit"], ["--verify-audit", "--seal-key"]) or len(paths) * 2 != len(arguments) \
                or not all(paths) or any(path.startswith("-") for path in paths):
            return None
        return dict(zip(("log", "keys"), paths))


# ================================================================================================
# 3. The page in a browser: hostile files
# ================================================================================================

class TestHostileLogs(BrowserCase):
    def log_lines(self) -> list[bytes]:
        return tamper.read_lines(self.unsealed)

    def agree(self, name: str, data: bytes, expected: str) -> dict[str, Any]:
        path = write(self.scratch / f"{name}.log", data)
        seen = self.seen(log=path)
        self.assertAgrees(seen, *cli(td.main, "--verify-audit", path), expected)
        return seen

    def test_markup_in_a_log_is_shown_as_text_and_never_runs(self):
        markup = '<img src=x onerror="document.title=\'owned\'"><script>document.title="owned"</script><b>bold</b>'
        entries = tamper.decoded(self.log_lines())
        entries[0]["package"]["model_result"]["data"]["status"] = markup
        entries[0]["package"]["protected_audit"]["arguments"]["order_ref"] = markup
        tamper.redigest(entries[0]["package"], None)
        self.agree("markup", b"".join(line + b"\n" for line in tamper.chain(entries, None)), "passed")
        self.page.evaluate("document.querySelectorAll('details').forEach((details) => { details.open = true; })")
        content = self.content()
        for shown in ("<img src=x onerror=", "<script>document.title=", "<b>bold</b>"):
            self.assertIn(shown, content["text"])  # as text, in the JSON that escapes its quotes
        self.assertFalse({"img", "script", "b"} & set(content["elements"]))
        self.assertEqual(self.page.evaluate("document.title"), "tool-dispatcher audit viewer")

    def test_a_proto_member_in_a_log_pollutes_nothing(self):
        entries = tamper.decoded(self.log_lines())
        entries[1]["package"]["protected_audit"]["arguments"] = {"__proto__": {"polluted": True}}
        tamper.redigest(entries[1]["package"], None)
        self.agree("proto", b"".join(line + b"\n" for line in tamper.chain(entries, None)), "passed")
        self.assertIsNone(self.page.evaluate("({}).polluted === undefined ? null : 'polluted'"))

    def test_files_that_are_no_log_are_answered_with_the_command_lines_code(self):
        lines = self.log_lines()
        junk = random.Random(7).randbytes(4096)
        cases = {
            "binary": (junk + b"\n", "AUDIT_MALFORMED"),
            "nul-bytes": (b"\0" * 64 + b"\n", "AUDIT_MALFORMED"),
            "deep-nesting": (b"[" * 5000 + b"\n", "AUDIT_MALFORMED"),
            "byte-order-mark": (b"\xef\xbb\xbf" + b"".join(line + b"\n" for line in lines), "AUDIT_MALFORMED"),
            "line-over-64-kib": (lines[0][:-1] + b',"x":"' + b"a" * 65_536 + b'"}\n' + b"\n".join(lines[1:]) + b"\n",
                                 "AUDIT_MALFORMED"),
            "lone-surrogate": (lines[0].replace(b'"ORDER-7"', b'"\\ud800"', 1) + b"\n", "AUDIT_MALFORMED"),
            "newline-only": (b"\n", "AUDIT_MALFORMED"),
            "no-newline-at-all": (b"{}", "AUDIT_TRUNCATED"),
            "html-document": (b"<!doctype html><script>document.title='owned'</script>\n", "AUDIT_MALFORMED"),
        }
        for name, (data, expected) in cases.items():
            with self.subTest(case=name):
                self.agree(name, data, expected)
                self.assertNotIn("script", self.content()["elements"])
        self.assertEqual(self.page.evaluate("document.title"), "tool-dispatcher audit viewer")

    def test_a_log_over_the_size_limit_is_refused_unread(self):
        path = self.scratch / "too-large.log"
        with open(path, "wb") as handle:
            handle.truncate(td.MAX_AUDIT_LOG_BYTES + 1)  # sparse: no disk, and the page never reads it
        seen = self.seen(log=str(path))
        self.assertAgrees(seen, *cli(td.main, "--verify-audit", str(path)), "AUDIT_LOG_UNREADABLE")
        self.assertEqual(seen["positions"], [])

    def test_a_file_that_cannot_be_read_is_unreadable(self):
        for name, files, expected in (("log", {"log": str(self.scratch / "absent.log")}, "AUDIT_LOG_UNREADABLE"),
                                      ("folder", {"log": str(self.scratch)}, "AUDIT_LOG_UNREADABLE"),
                                      ("keys", {"keys": str(self.scratch / "absent.json"), "log": self.sealed},
                                       "SEAL_KEYS_UNREADABLE")):
            with self.subTest(case=name):
                argv = ["--verify-audit", files["log"]] + (["--seal-key", files["keys"]] if "keys" in files else [])
                self.assertAgrees(self.seen(**files), *cli(td.main, *argv), expected)

    def test_a_long_log_shows_a_bounded_timeline_around_its_break(self):
        entries = tamper.decoded(self.log_lines())
        lines = tamper.chain(entries[:-1] * 70 + entries[-1:], None)  # 2,100 calls: over the page's 2,000 rows
        whole = self.agree("long", b"".join(line + b"\n" for line in lines), "passed")
        self.assertEqual(whole["positions"], list(range(1000)) + list(range(1101, 2101)))
        self.assertEqual(whole["gaps"], ["101 entries not shown"])
        edited = lines[1550].replace(b'"ORDER-7"', b'"ORDER-9"', 1)
        self.assertNotEqual(edited, lines[1550])
        lines[1550] = edited
        broken = self.agree("long-broken", b"".join(line + b"\n" for line in lines), "AUDIT_ENTRY_EDITED")
        self.assertEqual(broken["positions"], list(range(1000)) + list(range(1050, 2050)))
        self.assertEqual(broken["gaps"], ["50 entries not shown", "51 entries not shown"])
        self.assertEqual(broken["broken"], [[1550, "AUDIT_ENTRY_EDITED"]])


# ================================================================================================
# 4. The page in a browser: signed checkpoints
# ================================================================================================

class TestCheckpoints(BrowserCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.cases = None
        if cls.browser is None or importlib.util.find_spec("cryptography") is None:
            return
        import checkpoint_cases  # noqa: PLC0415  (needs the cryptography package)
        cls.sig = checkpoint_cases.sig
        out = cls.scratch / "checkpoints"
        out.mkdir()
        checkpoint_cases.build(cls.unsealed, str(out))
        with open(out / "cases.txt", encoding="utf-8") as handle:
            cls.cases = [line.rstrip("\n").split(checkpoint_cases.FIELD_SEPARATOR) for line in handle]

    def setUp(self):
        super().setUp()
        if self.cases is None:
            if IN_CI:
                self.fail("no cryptography package: viewer/ci.sh installs it")
            self.skipTest("the cryptography package signs the checkpoints (pip install cryptography)")

    def files_of(self, arguments: list[str]) -> dict[str, str]:
        log, public_key = arguments[1], arguments[3]
        files = {"log": log, "publicKey": public_key}
        if os.path.exists(log + ".checkpoints"):
            files["checkpoints"] = log + ".checkpoints"
        return files

    def test_every_checkpoint_case_gets_the_signature_layers_answer(self):
        for name, *arguments, expected in self.cases:
            with self.subTest(case=name):
                self.assertAgrees(self.seen(**self.files_of(arguments)), *cli(self.sig.main, *arguments), expected)
        self.assertGreaterEqual(len(self.cases), 20)

    def test_a_browser_without_ed25519_says_the_checkpoints_are_unverified(self):
        name, *arguments, _expected = self.cases[0]
        self.page.navigate(PAGE_URL)
        self.page.wait_until(DONE)
        self.page.evaluate("""(() => {
          const subtle = crypto.subtle, importKey = subtle.importKey.bind(subtle);
          subtle.importKey = (format, data, algorithm, ...rest) => (algorithm && algorithm.name === 'Ed25519'
            ? Promise.reject(new DOMException('no Ed25519 here', 'NotSupportedError'))
            : importKey(format, data, algorithm, ...rest));
        })()""")
        files = self.files_of(arguments)
        for role in ("publicKey", "checkpoints", "log"):
            runs = self.page.evaluate(RUNS)
            self.page.set_files(f'input[data-role="{role}"]', [files[role]])
            self.page.wait_until(f"{DONE} && {RUNS} > {runs}")
        seen = self.page.evaluate(SEEN)
        self.assertEqual((name, seen["verdict"], seen["checkpoints"]), ("as-signed", "passed", "unverified"))
        self.assertIn("checkpoints are not verified", seen["note"])
        self.assertEqual(self.page.problems(), [])


if __name__ == "__main__":
    unittest.main()
