"""Build viewer/audit-viewer.html: one static file, its scripts and style inlined from their sources.

    python -B viewer/build_viewer.py           write viewer/audit-viewer.html
    python -B viewer/build_viewer.py --check   exit 1 unless the committed page is what a build writes

viewer/page.html is the page with a placeholder line for each inlined file:
``<!-- inline script: PATH -->`` becomes ``<script type="module" data-source="PATH">`` followed by
the file's bytes exactly and ``</script>``; ``<!-- inline style: PATH -->`` the same with
``<style>``. PATH is relative to the repository root. The scripts are the command-line verifier's
own (verifiers/javascript/jcs.js and audit_core.js), byte for byte, then the page's (viewer.js).
The Content-Security-Policy placeholder becomes a policy that lets nothing load or connect, and
runs only these scripts and this style, each named by its SHA-256.
"""
from __future__ import annotations

import base64
import hashlib
import re
import sys
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parent.parent
TEMPLATE: Final = ROOT / "viewer" / "page.html"
PAGE: Final = ROOT / "viewer" / "audit-viewer.html"
POLICY_PLACEHOLDER: Final = "@CONTENT_SECURITY_POLICY@"
PLACEHOLDER: Final = re.compile(r"^<!-- inline (script|style): ([A-Za-z0-9_./-]+) -->$", re.MULTILINE)
# Text that would end an inlined element early, or open a comment the HTML parser treats apart.
FORBIDDEN_IN_SOURCE: Final = re.compile(r"</script|</style|<script|<!--", re.IGNORECASE)
ELEMENT: Final = {"script": ('<script type="module" data-source="{path}">', "</script>"),
                  "style": ('<style data-source="{path}">', "</style>")}


class BuildError(Exception):
    """A source the page cannot hold as it is."""


def source_text(path: str) -> str:
    target = (ROOT / path).resolve()
    if ROOT not in target.parents:
        raise BuildError(f"{path}: outside the repository")
    with open(target, encoding="utf-8", newline="") as handle:
        text = handle.read()
    if FORBIDDEN_IN_SOURCE.search(text):
        raise BuildError(f"{path}: holds text that would end its element early")
    return text


def digest_token(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii") + "'"


def policy(scripts: list[str], styles: list[str]) -> str:
    return ("default-src 'none'; script-src " + " ".join(map(digest_token, scripts))
            + "; style-src " + " ".join(map(digest_token, styles))
            + "; img-src 'none'; connect-src 'none'; form-action 'none'; base-uri 'none'")


def build() -> str:
    with open(TEMPLATE, encoding="utf-8", newline="") as handle:
        template = handle.read()
    inlined: dict[str, list[str]] = {"script": [], "style": []}

    def inline(match: re.Match[str]) -> str:
        kind, path = match.group(1), match.group(2)
        text = source_text(path)
        inlined[kind].append(text)
        opening, closing = ELEMENT[kind]
        return opening.format(path=path) + text + closing

    page = PLACEHOLDER.sub(inline, template)
    if page.count(POLICY_PLACEHOLDER) != 1:
        raise BuildError("page.html: one Content-Security-Policy placeholder expected")
    return page.replace(POLICY_PLACEHOLDER, policy(inlined["script"], inlined["style"]))


def main(argv: list[str]) -> int:
    if argv not in ([], ["--check"]):
        sys.stderr.write(__doc__)
        return 2
    try:
        page = build()
    except (BuildError, OSError) as error:
        sys.stderr.write(f"build_viewer: {error}\n")
        return 2
    if argv == ["--check"]:
        try:
            with open(PAGE, encoding="utf-8", newline="") as handle:
                committed = handle.read()
        except OSError:
            committed = None
        if committed != page:
            print("viewer/audit-viewer.html differs from a fresh build: run python -B viewer/build_viewer.py")
            return 1
        print("viewer/audit-viewer.html is what a build writes")
        return 0
    with open(PAGE, "w", encoding="utf-8", newline="") as handle:
        handle.write(page)
    print(f"wrote viewer/audit-viewer.html ({len(page.encode('utf-8'))} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
