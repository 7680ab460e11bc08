"""Headless Chromium driven over the DevTools protocol, with the standard library only.

Chromium is started with --remote-debugging-pipe: it reads commands from its file descriptor 3 and
writes answers and events to its descriptor 4, one JSON message each, ended by a NUL byte. Nothing
listens on a port. The viewer's tests and its screenshot use this to open the page, hand files to
its file inputs as a person's picker would (DOM.setFileInputFiles), read what the page shows, and
collect every console error, failed load and uncaught exception.
"""
from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Final

CHROMIUM_NAMES: Final = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
CHROMIUM_FLAGS: Final = (
    "--headless", "--disable-gpu", "--no-sandbox", "--disable-dev-shm-usage", "--no-first-run",
    "--no-default-browser-check", "--disable-extensions", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--disable-default-apps", "--mute-audio",
    "--hide-scrollbars", "--remote-debugging-pipe",
)
COMMAND_SECONDS: Final = 30.0  # one protocol command's answer; a page's verification takes milliseconds
START_SECONDS: Final = 60.0  # a cold start on a busy two-core machine
MAX_MESSAGE_BYTES: Final = 64 * 1024 * 1024  # the largest answer is a screenshot of a few hundred KiB
HIGH_FD: Final = 10  # the pipe ends are moved above 3 and 4 before the child takes those numbers
# A child that puts the pipe ends on 3 and 4, closes the originals and becomes Chromium (a shell
# could not: dash takes no descriptor above 9).
_PIPE_SHIM: Final = ("import os, sys; r, w = int(sys.argv[1]), int(sys.argv[2]); os.dup2(r, 3); os.dup2(w, 4); "
                     "os.close(r); os.close(w); os.execv(sys.argv[3], sys.argv[3:])")


class BrowserError(Exception):
    """Chromium did not start, answered an error, went away, or took too long."""


def find_chromium() -> str | None:
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found is not None:
            return found
    return None


def _high(fd: int) -> int:
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD, HIGH_FD)
    os.close(fd)
    return moved


class Browser:
    """One Chromium process with a throwaway profile; use it as a context manager."""

    def __init__(self, executable: str | None = None) -> None:
        self.executable = executable or find_chromium()
        if self.executable is None:
            raise BrowserError("no Chromium found")
        self.profile = tempfile.mkdtemp(prefix="td-viewer-chromium-")
        command_read, self._command_write = (_high(fd) for fd in os.pipe())
        self._answer_read, answer_write = (_high(fd) for fd in os.pipe())
        self._stderr = open(Path(self.profile) / "stderr.txt", "wb")  # noqa: SIM115  (closed in close())
        argv = [self.executable, *CHROMIUM_FLAGS, f"--user-data-dir={self.profile}", "about:blank"]
        shim = [sys.executable, "-I", "-B", "-c", _PIPE_SHIM, str(command_read), str(answer_write)]
        self.process = subprocess.Popen([*shim, *argv], pass_fds=(command_read, answer_write),
                                        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._stderr)
        os.close(command_read)
        os.close(answer_write)
        self._buffer = b""
        self._next_id = 0
        self._pending: list[dict[str, Any]] = []
        try:
            self.version = self.send("Browser.getVersion", timeout=START_SECONDS)["product"]
        except BrowserError:
            self.close()
            raise

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                self.send("Browser.close", timeout=10)
            except BrowserError:
                pass
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        for fd in (self._command_write, self._answer_read):
            try:
                os.close(fd)
            except OSError:
                pass
        self._stderr.close()
        shutil.rmtree(self.profile, ignore_errors=True)

    # ---- the protocol ---------------------------------------------------------------------

    def send(self, method: str, params: dict[str, Any] | None = None, *, session: str | None = None,
             timeout: float = COMMAND_SECONDS) -> dict[str, Any]:
        self._next_id += 1
        ident = self._next_id
        message = {"id": ident, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        try:
            os.write(self._command_write, json.dumps(message).encode("utf-8") + b"\0")
        except OSError:
            raise BrowserError(f"{method}: Chromium is gone") from None
        answer = self.wait_for_message(lambda m: m.get("id") == ident, timeout)
        if "error" in answer:
            raise BrowserError(f"{method}: {answer['error'].get('message', 'error')}")
        return answer.get("result", {})

    def wait_for_message(self, wanted: Any, timeout: float) -> dict[str, Any]:
        for position, message in enumerate(self._pending):
            if wanted(message):
                return self._pending.pop(position)
        deadline = time.monotonic() + timeout
        while True:
            message = self._read_message(deadline)
            if wanted(message):
                return message
            self._pending.append(message)

    def take_events(self, session: str, methods: frozenset[str]) -> list[dict[str, Any]]:
        """The events of these kinds received so far for a session, removed from the queue."""
        self._drain()
        taken = [m for m in self._pending if m.get("sessionId") == session and m.get("method") in methods]
        self._pending = [m for m in self._pending if not (m.get("sessionId") == session and m.get("method") in methods)]
        return taken

    def _drain(self) -> None:
        while True:
            ready, _, _ = select.select([self._answer_read], [], [], 0)
            if not ready and b"\0" not in self._buffer:
                return
            self._pending.append(self._read_message(time.monotonic() + COMMAND_SECONDS))

    def _read_message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self._answer_read], [], [], max(left, 0))
            if not ready:
                raise BrowserError("Chromium did not answer in time")
            chunk = os.read(self._answer_read, 1 << 20)
            if not chunk:
                raise BrowserError(f"Chromium went away: {self.stderr_tail()}")
            self._buffer += chunk
            if len(self._buffer) > MAX_MESSAGE_BYTES:
                raise BrowserError("a message from Chromium is too long")
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def stderr_tail(self) -> str:
        try:
            with open(Path(self.profile) / "stderr.txt", "rb") as handle:
                return handle.read()[-600:].decode("utf-8", "replace")
        except OSError:
            return ""

    def new_page(self) -> Page:
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        page = Page(self, target, session)
        for method in ("Page.enable", "Runtime.enable", "Log.enable", "DOM.enable"):
            page.send(method)
        return page


PROBLEM_EVENTS: Final = frozenset({"Runtime.exceptionThrown", "Runtime.consoleAPICalled", "Log.entryAdded"})


class Page:
    """One tab. Its problems are the console errors and warnings, failed loads, policy violations
    and uncaught exceptions seen since the last call to problems()."""

    def __init__(self, browser: Browser, target: str, session: str) -> None:
        self.browser, self.target, self.session = browser, target, session

    def send(self, method: str, params: dict[str, Any] | None = None, **options: Any) -> dict[str, Any]:
        return self.browser.send(method, params, session=self.session, **options)

    def navigate(self, url: str) -> None:
        self.browser.take_events(self.session, frozenset({"Page.loadEventFired"}))
        answer = self.send("Page.navigate", {"url": url})
        if answer.get("errorText"):
            raise BrowserError(f"navigation failed: {answer['errorText']}")
        self.browser.wait_for_message(
            lambda m: m.get("sessionId") == self.session and m.get("method") == "Page.loadEventFired", COMMAND_SECONDS)

    def evaluate(self, expression: str) -> Any:
        answer = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in answer:
            raise BrowserError(f"evaluation failed: {answer['exceptionDetails'].get('text', '')}")
        return answer["result"].get("value")

    def wait_until(self, expression: str, timeout: float = COMMAND_SECONDS) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise BrowserError(f"timed out waiting for {expression}")
            time.sleep(0.01)

    def set_files(self, selector: str, paths: list[str]) -> None:
        root = self.send("DOM.getDocument", {"depth": 0})["root"]["nodeId"]
        node = self.send("DOM.querySelector", {"nodeId": root, "selector": selector})["nodeId"]
        if not node:
            raise BrowserError(f"no element {selector}")
        self.send("DOM.setFileInputFiles", {"files": paths, "nodeId": node})

    def drop_files(self, x: float, y: float, paths: list[str]) -> None:
        """Files dragged over the page and dropped at (x, y), as a person's drag from a file manager."""
        data = {"items": [], "files": paths, "dragOperationsMask": 1}
        for kind in ("dragEnter", "dragOver", "drop"):
            self.send("Input.dispatchDragEvent", {"type": kind, "x": x, "y": y, "data": data})

    def screenshot(self, width: int, height: int) -> bytes:
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
        data = self.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": False})["data"]
        return base64.b64decode(data)

    def problems(self) -> list[str]:
        found = []
        for event in self.browser.take_events(self.session, PROBLEM_EVENTS):
            params = event.get("params", {})
            if event["method"] == "Runtime.exceptionThrown":
                details = params.get("exceptionDetails", {})
                found.append("exception: " + str(details.get("exception", {}).get("description") or details.get("text")))
            elif event["method"] == "Runtime.consoleAPICalled":
                if params.get("type") in ("error", "assert", "warning"):
                    texts = [str(arg.get("value", arg.get("description", ""))) for arg in params.get("args", [])]
                    found.append(f"console.{params['type']}: " + " ".join(texts))
            elif params.get("entry", {}).get("level") in ("error", "warning"):
                entry = params["entry"]
                found.append(f"{entry.get('source')} {entry['level']}: {entry.get('text')}")
        return found
