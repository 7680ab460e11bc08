"""The viewer's screenshot for its README: the shipped fixture's log, sealed, verified with its key.

    python -B viewer/screenshot.py [OUT.png]      (default: viewer/screenshot.png)

Runs the fixture through the command line into a temporary directory, sealed with a fixed key
(the 32 bytes 00..1f under id k-a: never use a key like it), so every run draws the same page;
opens viewer/audit-viewer.html in headless Chromium, picks the two files as a person would, and
captures the top of the page. Nothing is written but OUT.png.
"""
from __future__ import annotations

import contextlib
import io
import json
import sys
import tempfile
from pathlib import Path
from typing import Final

HERE: Final = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(HERE.parent))

import browser  # noqa: E402
import tool_dispatcher  # noqa: E402

WIDTH: Final = 960
HEIGHT: Final = 1180
DONE: Final = "document.documentElement.dataset.state === 'done'"
RUNS: Final = "Number(document.documentElement.dataset.runs || 0)"


def sealed_log(folder: Path) -> tuple[str, str]:
    keys = folder / "keys.json"
    with open(keys, "w", encoding="utf-8") as handle:
        json.dump({"format": "seal-keys-v1", "current": "k-a",
                   "keys": [{"key_id": "k-a", "secret_hex": bytes(range(32)).hex()}]}, handle)
    log = folder / "audit.jsonl"
    with contextlib.redirect_stdout(io.StringIO()):
        status = tool_dispatcher.main(["--fixture", str(HERE.parent / "tool-cases.json"), "--audit-log", str(log),
                                       "--seal-key", str(keys)])
    if status != 0:
        raise SystemExit("the fixture did not run")
    return str(log), str(keys)


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else HERE / "screenshot.png"
    with tempfile.TemporaryDirectory(prefix="td-viewer-shot-") as scratch, browser.Browser() as chromium:
        log, keys = sealed_log(Path(scratch))
        page = chromium.new_page()
        page.send("Emulation.setDeviceMetricsOverride", {"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1,
                                                         "mobile": False})
        page.navigate(build_url())
        page.wait_until(DONE)
        for role, path in (("keys", keys), ("log", log)):
            runs = page.evaluate(RUNS)
            page.set_files(f'input[data-role="{role}"]', [path])
            page.wait_until(f"{DONE} && {RUNS} > {runs}")
        if page.evaluate("document.documentElement.dataset.verdict") != "passed" or page.problems():
            raise SystemExit("the page did not verify the fixture's log cleanly")
        png = page.screenshot(WIDTH, HEIGHT)
    with open(out, "wb") as handle:
        handle.write(png)
    print(f"wrote {out.name} ({len(png)} bytes)")
    return 0


def build_url() -> str:
    return (HERE / "audit-viewer.html").as_uri()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
