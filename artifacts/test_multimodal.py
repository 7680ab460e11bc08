"""Tests for artifacts/multimodal.py: one TestCase per section, in the module's order.

    python -B -m unittest discover -s artifacts -p 'test_multimodal.py'
    python -B -m unittest discover -p 'test_multimodal.py'      (from the repository root)

Every package is a real one: a host tool declared with td.declare_tool and run through
td.Dispatcher, whose output references a PNG and a PDF the tests build here (the other image types
and the hostile bytes come from test_artifacts' builders).
"""
from __future__ import annotations

import base64
import copy
import hashlib
import json
import re
import struct
import sys
import unittest
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))  # before the repository root: the module artifacts, not the package folder

if __package__:  # discovered from the repository root, as the package artifacts
    from . import artifacts as art
    from . import multimodal as mm
    from . import test_artifacts as builders
else:
    import artifacts as art
    import multimodal as mm
    import test_artifacts as builders

import tool_dispatcher as td  # noqa: E402

NOW = 1_800_000_000
REVISIONS = ("openai-responses-v1", "anthropic-messages-v1", "gemini-interactions-v1", "mcp-tools-call-v1")
PRINCIPAL = td.Principal("tenant-a", "alice", ("reports.read",))


png_chunk = builders.png_chunk


def make_png(padding: bytes = b"") -> bytes:
    """A valid 1x1 8-bit greyscale PNG: signature, IHDR, the padding as a private ancillary chunk
    (a reader skips it) when there is any, one IDAT row (filter 0, one grey pixel), IEND."""
    header = struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", header) + (png_chunk(b"paDd", padding) if padding else b"")
            + png_chunk(b"IDAT", zlib.compress(b"\x00\x80")) + png_chunk(b"IEND", b""))


def make_pdf(padding: bytes = b"", *, open_action: bytes | None = None) -> bytes:
    """A valid one-page PDF 1.4 with its cross-reference table at the byte offsets it names; the
    padding as a comment line after the header when there is any; an /OpenAction dictionary on
    the catalog, as a sixth object, when one is given."""
    stream = b"BT /F1 12 Tf 20 20 Td (Report) Tj ET"
    catalog = b"/Type /Catalog /Pages 2 0 R" + (b"" if open_action is None else b" /OpenAction 6 0 R")
    objects = [b"<< %s >>" % catalog,
               b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
               b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 60] /Contents 4 0 R "
               b"/Resources << /Font << /F1 5 0 R >> >> >>",
               b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream),
               b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
               *(() if open_action is None else (open_action,))]
    out = bytearray(b"%PDF-1.4\n" + (b"%" + padding + b"\n" if padding else b""))
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


PNG = make_png()
PDF = make_pdf()
JPEG, GIF, WEBP = builders.jpeg(), builders.gif(), builders.webp()
BUILT = {"image/png": PNG, "image/jpeg": JPEG, "image/gif": GIF, "image/webp": WEBP, "application/pdf": PDF}


def png_of_size(size: int, fill: int = 0) -> bytes:
    """A valid PNG of exactly `size` bytes, padded with `fill` (different fills: different images)."""
    return make_png(bytes([fill]) * (size - len(PNG) - 12))


def pdf_of_size(size: int, fill: int = 0x30) -> bytes:
    """A valid PDF of exactly `size` bytes, padded with a comment of `fill` bytes."""
    padding = size - len(PDF) - 2
    while len(built := make_pdf(bytes([fill]) * padding)) != size:  # startxref may gain a digit
        padding -= len(built) - size
    return built


OF_SIZE = {"image/png": png_of_size, "application/pdf": pdf_of_size}


def reference(data: bytes, media_type: str, *, kind: str = "blob", size: int | None = None) -> dict:
    return {"kind": kind, "media_type": media_type, "size": len(data) if size is None else size,
            "sha256": hashlib.sha256(data).hexdigest(), "access": None}


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


REFERENCE_SCHEMA = td.json_copy(dict(art.REFERENCE_SCHEMA))  # the layer's own, embedded as a copy
REPORT_TOOL = td.declare_tool(
    "render_report", description="Render a report as an image and a PDF.", effect="read",
    required_role="reports.read",
    input_schema={"type": "object", "properties": {"report": {"type": "string", "maxLength": 20}},
                  "required": ["report"], "additionalProperties": False},
    output_schema={"type": "object",
                   "properties": {"title": {"type": "string", "maxLength": 40},
                                  "artifacts": {"type": "array", "maxItems": 20, "items": REFERENCE_SCHEMA}},
                   "required": ["title", "artifacts"], "additionalProperties": False})
REGISTRY = td.declare_contracts(REPORT_TOOL)


def build_turn(adapter_revision: str, refs: list[dict] | None = None, *,
               arguments: dict | None = None) -> tuple[dict, td.CallContext]:
    """A real package for one render_report call whose output references `refs` (default: the
    PNG and the PDF), and the trusted context it answers."""
    refs = [reference(PNG, "image/png"), reference(PDF, "application/pdf")] if refs is None else refs

    def render(call: td.ExecuteCall) -> td.Execution:
        return td.Execution({"title": f"Report {call.arguments['report']}", "artifacts": refs}, "none")

    profile = td.PROVIDER_PROFILES[adapter_revision]
    context = td.CallContext(profile.provider, profile.api_family, adapter_revision, "resp_mm", "call_mm",
                             "op-mm", None)
    dispatcher = td.Dispatcher(registry=REGISTRY, hooks={"render_report": td.ToolHooks(execute=render)})
    proposal = {"name": "render_report", "arguments": {"report": "q3"} if arguments is None else arguments}
    return dispatcher.dispatch(proposal, context, PRINCIPAL, now=NOW), context


def attach(package: dict, context: td.CallContext, attachments, **options) -> dict:
    return mm.attach(package, context, context.adapter_revision, attachments, principal=PRINCIPAL,
                     registry=REGISTRY, **options)


BOTH = [mm.Attachment(PNG, "image/png"), mm.Attachment(PDF, "application/pdf")]
EVERY_TYPE = [mm.Attachment(data, media_type) for media_type, data in BUILT.items()]  # each type the rows take
# Where each revision's item holds its parts, and where one media part holds its base64 text.
PARTS = {"openai-responses-v1": lambda item: item["output"], "anthropic-messages-v1": lambda item: item["content"],
         "gemini-interactions-v1": lambda item: item["input"][0]["result"], "mcp-tools-call-v1": lambda item: item["content"]}
PAYLOAD = {"openai-responses-v1": lambda part: (part.get("image_url") or part["file_data"]).split(",", 1)[1],
           "anthropic-messages-v1": lambda part: part["source"]["data"],
           "gemini-interactions-v1": lambda part: part["data"],
           "mcp-tools-call-v1": lambda part: part.get("data") or part["resource"]["blob"]}


class TestLayerRules(unittest.TestCase):

    def test_the_core_only_through_public_names_and_no_other_layer(self):
        with open(HERE / "multimodal.py", encoding="utf-8") as handle:
            source = handle.read()
        self.assertEqual(re.findall(r"\btd\._\w+", source), [])
        self.assertEqual(sorted(set(re.findall(r"\btd\.(\w+)", source)) - set(td.__all__)), [])
        self.assertEqual(re.findall(r"^\s*(?:import|from) (?!__future__)(\S+)", source, re.M),
                         ["base64", "hashlib", "sys", "dataclasses", "pathlib", "types", "typing",
                          "tool_dispatcher", ".artifacts", "artifacts"])

    def test_the_sibling_is_the_layers_one_module_loaded_once(self):
        for name in ("MAX_ARTIFACT_BYTES", "ArtifactError", "MediaPolicy", "admit_bytes", "is_reference"):
            self.assertIs(getattr(mm, name), getattr(art, name))
        for file in ("artifacts.py", "multimodal.py"):
            with self.subTest(file=file):
                loaded = [name for name, module in list(sys.modules.items())
                          if getattr(module, "__file__", None) and Path(module.__file__).resolve() == HERE / file]
                self.assertEqual(len(loaded), 1, loaded)


class TestFixtures(unittest.TestCase):

    def test_the_png_is_a_valid_one_pixel_png(self):
        self.assertEqual(PNG[:8], b"\x89PNG\r\n\x1a\n")
        chunks, at = [], 8
        while at < len(PNG):
            (length,) = struct.unpack(">I", PNG[at:at + 4])
            kind, body = PNG[at + 4:at + 8], PNG[at + 8:at + 8 + length]
            self.assertEqual(struct.unpack(">I", PNG[at + 8 + length:at + 12 + length])[0], zlib.crc32(kind + body))
            chunks.append((kind, body))
            at += 12 + length
        self.assertEqual([kind for kind, _ in chunks], [b"IHDR", b"IDAT", b"IEND"])
        self.assertEqual(struct.unpack(">II", chunks[0][1][:8]), (1, 1))
        self.assertEqual(zlib.decompress(chunks[1][1]), b"\x00\x80")

    def test_the_pdf_cross_reference_names_each_object_offset(self):
        self.assertTrue(PDF.startswith(b"%PDF-1.4\n") and PDF.endswith(b"%%EOF\n"))
        start = int(PDF.rsplit(b"startxref\n", 1)[1].split(b"\n")[0])
        rows = PDF[start:].split(b"\n")[3:8]
        for number, row in enumerate(rows, 1):
            self.assertTrue(PDF[int(row[:10]):].startswith(b"%d 0 obj" % number))


class TestValuesAndReferences(unittest.TestCase):

    def test_references_are_found_in_document_order(self):
        png, pdf = reference(PNG, "image/png"), reference(PDF, "application/pdf", kind="file")
        keys = art.ArtifactKeys("k1", {"k1": bytes(range(32))})
        pdf["access"] = art.mint_access(keys, principal=PRINCIPAL, call_id="call_mm", sha256=pdf["sha256"], now=NOW)
        found = mm.references({"data": {"a": [png, {"b": pdf}], "c": "x"}, "d": [png]})
        self.assertEqual(found, [png, pdf, png])

    def test_a_reference_is_what_the_layers_is_reference_takes(self):
        good = reference(PNG, "image/png")
        self.assertEqual(mm.references({"data": [{**good, "size": art.MAX_ARTIFACT_BYTES}]}),
                         [{**good, "size": art.MAX_ARTIFACT_BYTES}])
        changes = ({"extra": 1}, {"kind": "dir"}, {"kind": 1}, {"media_type": "Image/PNG"}, {"media_type": "png"},
                   {"media_type": "image/x-unlisted"}, {"size": True}, {"size": -1}, {"size": 1.0},
                   {"size": art.MAX_ARTIFACT_BYTES + 1}, {"sha256": good["sha256"].upper()},
                   {"sha256": good["sha256"][:63]}, {"access": "tok-1"}, {"access": 7}, {"access": ["t"]})
        for change in changes:
            with self.subTest(change=change):
                self.assertFalse(art.is_reference({**good, **change}))
                self.assertEqual(mm.references({"data": [{**good, **change}]}), [])
        missing = dict(good)
        del missing["access"]
        self.assertEqual(mm.references([missing]), [])


class TestProviderTables(unittest.TestCase):

    def test_every_core_adapter_has_one_row(self):
        self.assertEqual(set(mm.MEDIA_RULES), set(td.ADAPTERS))

    def test_each_row_takes_the_four_image_types_and_pdf_only(self):
        for revision, rules in mm.MEDIA_RULES.items():
            with self.subTest(revision=revision):
                self.assertEqual(dict(rules.accepts), {"image/png": "image", "image/jpeg": "image", "image/gif": "image",
                                                       "image/webp": "image", "application/pdf": "document"})

    def test_the_limits_are_the_documented_ones_capped_at_the_layers_ceiling(self):
        ceiling = art.MAX_ARTIFACT_BYTES
        self.assertEqual(ceiling, 16_777_216)
        self.assertEqual({revision: (dict(rules.max_bytes), rules.max_total_bytes)
                          for revision, rules in mm.MEDIA_RULES.items()}, {
            "openai-responses-v1": ({"image": ceiling, "document": ceiling}, 50_000_000),  # 20 MB, 32 MB
            "anthropic-messages-v1": ({"image": 3_932_160, "document": ceiling}, 24_000_000),  # 24 MB
            "gemini-interactions-v1": ({"image": ceiling, "document": ceiling}, 75_000_000),  # 50 MB, 50 MB
            "mcp-tools-call-v1": ({"image": 10_000_000, "document": 10_000_000}, 10_000_000)})
        # Anthropic's image limit is 5 MiB of base64 text; its request limit 32 MB of it.
        self.assertEqual(len(b64(bytes(3_932_160))), 5 * 1024 * 1024)
        self.assertEqual(4 * 24_000_000 // 3, 32_000_000)


class TestAttachingShapes(unittest.TestCase):

    def setUp(self):
        self.png_url = "data:image/png;base64," + b64(PNG)
        self.pdf_url = "data:application/pdf;base64," + b64(PDF)

    def turn(self, revision):
        package, context = build_turn(revision)
        return package, context, td.model_result_text(package)

    def test_openai_responses_output_is_text_image_file(self):
        package, context, text = self.turn("openai-responses-v1")
        self.assertEqual(attach(package, context, BOTH), {
            "type": "function_call_output", "call_id": "call_mm",
            "output": [{"type": "input_text", "text": text},
                       {"type": "input_image", "image_url": self.png_url},
                       {"type": "input_file", "filename": f"sha256-{hashlib.sha256(PDF).hexdigest()[:16]}.pdf",
                        "file_data": self.pdf_url}]})

    def test_anthropic_messages_content_is_text_image_document(self):
        package, context, text = self.turn("anthropic-messages-v1")
        self.assertEqual(attach(package, context, BOTH), {
            "type": "tool_result", "tool_use_id": "call_mm", "is_error": False,
            "content": [{"type": "text", "text": text},
                        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64(PNG)}},
                        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf",
                                                        "data": b64(PDF)}}]})

    def test_gemini_interactions_result_is_text_image_document(self):
        package, context, text = self.turn("gemini-interactions-v1")
        self.assertEqual(attach(package, context, BOTH), {
            "previous_interaction_id": "resp_mm",
            "input": [{"type": "function_result", "call_id": "call_mm", "name": "render_report", "is_error": False,
                       "result": [{"type": "text", "text": text},
                                  {"type": "image", "data": b64(PNG), "mime_type": "image/png"},
                                  {"type": "document", "data": b64(PDF), "mime_type": "application/pdf"}]}]})

    def test_mcp_content_is_text_image_resource(self):
        package, context, text = self.turn("mcp-tools-call-v1")
        self.assertEqual(attach(package, context, BOTH), {
            "isError": False,
            "content": [{"type": "text", "text": text},
                        {"type": "image", "data": b64(PNG), "mimeType": "image/png"},
                        {"type": "resource", "resource": {"uri": f"artifact:sha256:{hashlib.sha256(PDF).hexdigest()}",
                                                          "mimeType": "application/pdf", "blob": b64(PDF)}}]})

    def test_the_text_part_is_the_cores_text_exactly(self):
        core = {"openai-responses-v1": lambda item: item["output"], "anthropic-messages-v1": lambda item: item["content"],
                "gemini-interactions-v1": lambda item: item["input"][0]["result"][0]["text"],
                "mcp-tools-call-v1": lambda item: item["content"][0]["text"]}
        for revision in REVISIONS:
            with self.subTest(revision=revision):
                package, context, text = self.turn(revision)
                plain = td.adapt(package, context, revision, principal=PRINCIPAL, registry=REGISTRY)
                self.assertEqual(PARTS[revision](attach(package, context, BOTH))[0]["text"], core[revision](plain))
                self.assertEqual(core[revision](plain), text)
                self.assertIn(hashlib.sha256(PNG).hexdigest(), text)  # the model reads the reference, not bytes

    def test_attachments_keep_the_order_given_and_none_gives_the_text_alone(self):
        package, context, text = self.turn("anthropic-messages-v1")
        reordered = attach(package, context, BOTH[::-1])["content"]
        self.assertEqual([part["type"] for part in reordered], ["text", "document", "image"])
        self.assertEqual(attach(package, context, [])["content"], [{"type": "text", "text": text}])
        self.assertEqual(attach(package, context, ())["content"], [{"type": "text", "text": text}])

    def test_the_package_is_not_changed(self):
        for revision in REVISIONS:
            with self.subTest(revision=revision):
                package, context, _ = self.turn(revision)
                before = copy.deepcopy(package)
                item = attach(package, context, BOTH)
                self.assertEqual(package, before)
                self.assertNotIn(json.dumps(package["protected_audit"]["principal"]), json.dumps(item))

    def test_each_media_type_is_taken_as_its_kind(self):
        package, context = build_turn("anthropic-messages-v1", [reference(item.data, item.media_type)
                                                                 for item in EVERY_TYPE])
        content = attach(package, context, EVERY_TYPE)["content"][1:]
        self.assertEqual([(part["type"], part["source"]["media_type"], base64.b64decode(part["source"]["data"]))
                          for part in content],
                         [("image", "image/png", PNG), ("image", "image/jpeg", JPEG), ("image", "image/gif", GIF),
                          ("image", "image/webp", WEBP), ("document", "application/pdf", PDF)])


class TestAttachingRefusals(unittest.TestCase):

    def refused(self, code, package, context, attachments, at="", **options):
        with self.assertRaises(mm.MultimodalError) as caught:
            attach(package, context, attachments, **options)
        self.assertEqual((caught.exception.code, caught.exception.at), (code, at))
        return caught.exception

    def test_bytes_no_reference_names_are_unbound(self):
        package, context = build_turn("openai-responses-v1")
        other = PNG[:-1] + bytes([PNG[-1] ^ 1])  # same size and type, one bit changed
        self.refused("ATTACHMENT_UNBOUND", package, context, [mm.Attachment(other, "image/png")], "attachments[0]")
        self.refused("ATTACHMENT_UNBOUND", package, context, [BOTH[0], mm.Attachment(PDF + b"\n", "application/pdf")],
                     "attachments[1]")

    def test_a_referenced_digest_with_another_media_type_or_size_is_a_mismatch(self):
        package, context = build_turn("anthropic-messages-v1")
        self.refused("ATTACHMENT_MISMATCH", package, context, [mm.Attachment(PNG, "image/jpeg")], "attachments[0]")
        lying, context = build_turn("anthropic-messages-v1", [reference(PNG, "image/png", size=len(PNG) + 1)])
        self.refused("ATTACHMENT_MISMATCH", lying, context, [mm.Attachment(PNG, "image/png")], "attachments[0]")

    def test_a_type_the_provider_does_not_take_is_refused_even_when_bound(self):
        text = b"plain words"
        package, context = build_turn("gemini-interactions-v1", [reference(text, "text/plain"),
                                                                  reference(PNG, "image/png")])
        for media_type in ("text/plain", "image/jpg", "IMAGE/PNG", "image/png ", "image/svg+xml"):
            with self.subTest(media_type=media_type):
                self.refused("ATTACHMENT_MEDIA_TYPE", package, context, [mm.Attachment(text, media_type)],
                             "attachments[0]")

    def test_the_same_artifact_twice_is_a_duplicate(self):
        package, context = build_turn("mcp-tools-call-v1")
        self.refused("ATTACHMENT_DUPLICATE", package, context, [BOTH[0], BOTH[1], BOTH[0]], "attachments[2]")

    def test_what_is_not_a_list_of_attachments_is_invalid(self):
        package, context = build_turn("openai-responses-v1")
        self.refused("ATTACHMENT_INVALID", package, context, None)
        self.refused("ATTACHMENT_INVALID", package, context, {"a": BOTH[0]})
        self.refused("ATTACHMENT_INVALID", package, context, iter(BOTH))
        for bad in ((PNG, "image/png"), mm.Attachment(bytearray(PNG), "image/png"), mm.Attachment(PNG, b"image/png"),
                    mm.Attachment(PNG, ["image/png"])):
            with self.subTest(bad=type(bad).__name__):
                self.refused("ATTACHMENT_INVALID", package, context, [BOTH[0], bad], "attachments[1]")

    def test_attachment_count_both_sides_of_the_limit(self):
        blobs = [make_png(b"%d" % index) for index in range(mm.MAX_ATTACHMENTS + 1)]
        package, context = build_turn("openai-responses-v1", [reference(blob, "image/png") for blob in blobs])
        attachments = [mm.Attachment(blob, "image/png") for blob in blobs]
        self.assertEqual(len(attach(package, context, attachments[:mm.MAX_ATTACHMENTS])["output"]),
                         mm.MAX_ATTACHMENTS + 1)
        self.refused("ATTACHMENT_TOO_MANY", package, context, attachments)
        self.assertEqual(len(attach(package, context, attachments[:2], max_attachments=2)["output"]), 3)
        self.refused("ATTACHMENT_TOO_MANY", package, context, attachments[:3], max_attachments=2)

    def test_each_kinds_size_limit_both_sides_for_every_provider(self):
        # At the limit: a valid PNG or PDF of exactly that many bytes, bound and admitted. One
        # past: refused before a byte is read. Both at the real constants, the rows' capped limits.
        for revision, rules in mm.MEDIA_RULES.items():
            for media_type, kind in (("image/png", "image"), ("application/pdf", "document")):
                limit = rules.max_bytes[kind]
                with self.subTest(revision=revision, kind=kind):
                    blob = OF_SIZE[media_type](limit)
                    self.assertEqual(len(blob), limit)
                    package, context = build_turn(revision, [reference(blob, media_type)])
                    (_, part) = PARTS[revision](attach(package, context, [mm.Attachment(blob, media_type)]))
                    self.assertEqual(len(PAYLOAD[revision](part)), 4 * -(-limit // 3))
                    self.refused("ATTACHMENT_TOO_LARGE", package, context, [mm.Attachment(bytes(limit + 1), media_type)],
                                 "attachments[0]")

    def test_no_row_takes_an_attachment_past_the_layers_ceiling(self):
        for revision, rules in mm.MEDIA_RULES.items():
            for media_type, kind in (("image/png", "image"), ("application/pdf", "document")):
                with self.subTest(revision=revision, kind=kind):
                    self.assertLessEqual(rules.max_bytes[kind], art.MAX_ARTIFACT_BYTES)
                    package, context = build_turn(revision, [])
                    self.refused("ATTACHMENT_TOO_LARGE", package, context,
                                 [mm.Attachment(bytes(art.MAX_ARTIFACT_BYTES + 1), media_type)], "attachments[0]")

    def test_the_total_size_limit_both_sides_for_every_provider(self):
        # Exactly the total: PNGs and PDFs in turn, each at most its kind's limit and half the
        # total (so at least two attachments). One byte more: refused before a byte is read.
        for revision, rules in mm.MEDIA_RULES.items():
            with self.subTest(revision=revision):
                total, sizes = rules.max_total_bytes, []
                while sum(size for _, size in sizes) < total:
                    media_type, kind = (("image/png", "image"), ("application/pdf", "document"))[len(sizes) % 2]
                    sizes.append((media_type, min(rules.max_bytes[kind], total // 2,
                                                  total - sum(size for _, size in sizes))))
                attachments = [mm.Attachment(OF_SIZE[media_type](size, 0x30 + index), media_type)
                               for index, (media_type, size) in enumerate(sizes)]
                self.assertEqual(sum(len(item.data) for item in attachments), total)
                package, context = build_turn(revision, [reference(item.data, item.media_type)
                                                         for item in attachments])
                parts = PARTS[revision](attach(package, context, attachments))
                self.assertEqual([len(PAYLOAD[revision](part)) for part in parts[1:]],
                                 [4 * -(-size // 3) for _, size in sizes])
                self.refused("ATTACHMENT_TOO_LARGE", package, context, [*attachments, mm.Attachment(b"\0", "image/png")])

    def test_an_error_result_carries_no_media(self):
        for revision in REVISIONS:
            with self.subTest(revision=revision):
                package, context = build_turn(revision, arguments={"report": 7})
                self.assertEqual(package["model_result"]["error"]["code"], "INVALID_ARGUMENTS")
                self.refused("ATTACHMENT_ERROR_RESULT", package, context, BOTH[:1])
                plain = attach(package, context, [])
                self.assertEqual([part["text"] for part in PARTS[revision](plain)], [td.model_result_text(package)])
        package, context = build_turn("anthropic-messages-v1", arguments={"report": 7})
        self.assertEqual(attach(package, context, []), {
            "type": "tool_result", "tool_use_id": "call_mm", "is_error": True,
            "content": [{"type": "text", "text": td.model_result_text(package)}]})

    def test_a_tampered_package_is_refused_by_the_cores_verification(self):
        package, context = build_turn("openai-responses-v1")
        other = b"not the rendered report"
        tampered = copy.deepcopy(package)
        tampered["model_result"]["data"]["artifacts"][0] = reference(other, "image/png")
        with self.assertRaises(td.BoundaryError) as caught:
            attach(tampered, context, [mm.Attachment(other, "image/png")])
        self.assertEqual(caught.exception.code, "RESULT_DIGEST_MISMATCH")

    def test_the_cores_options_and_codes_pass_through(self):
        package, context = build_turn("openai-responses-v1")
        with self.assertRaises(td.BoundaryError) as caught:
            mm.attach(package, context, "anthropic-messages-v1", BOTH, principal=PRINCIPAL, registry=REGISTRY)
        self.assertEqual(caught.exception.code, "PROVIDER_MISMATCH")
        with self.assertRaises(td.BoundaryError) as caught:
            mm.attach(package, context, context.adapter_revision, BOTH,
                      principal=td.Principal("tenant-a", "bob", ("reports.read",)), registry=REGISTRY)
        self.assertEqual(caught.exception.code, "CALL_BINDING_MISMATCH")

    def test_a_refusal_names_no_byte_digest_or_media_type(self):
        package, context = build_turn("openai-responses-v1")
        other = b"secret-bytes-" * 3
        cases = (("ATTACHMENT_UNBOUND", [mm.Attachment(other, "image/png")]),
                 ("ATTACHMENT_MISMATCH", [mm.Attachment(PNG, "image/webp")]),
                 ("ATTACHMENT_MEDIA_TYPE", [mm.Attachment(other, "text/x-secret")]))
        for code, attachments in cases:
            with self.subTest(code=code):
                error = self.refused(code, package, context, attachments, "attachments[0]")
                said = json.dumps(error.to_json()) + str(error) + repr(error.args)
                for word in ("secret", hashlib.sha256(other).hexdigest()[:12], hashlib.sha256(PNG).hexdigest()[:12],
                             "image/", "text/", b64(other)[:12]):
                    self.assertNotIn(word, said)
                self.assertEqual(error.to_json(), {"code": code, "message": mm.MULTIMODAL_CATALOG[code].message,
                                                   "retryable": False, "at": "attachments[0]"})

    def test_a_refusal_of_admission_names_nothing_and_keeps_the_layers_code_as_its_cause(self):
        secret = make_png(b"secret-words") + builders.zip_of([("secret.txt", b"secret")])
        package, context = build_turn("openai-responses-v1", [reference(secret, "image/png")])
        error = self.refused("ATTACHMENT_NOT_ADMITTED", package, context, [mm.Attachment(secret, "image/png")],
                             "attachments[0]")
        self.assertEqual(error.to_json(), {"code": "ATTACHMENT_NOT_ADMITTED", "retryable": False,
                                           "message": mm.MULTIMODAL_CATALOG["ATTACHMENT_NOT_ADMITTED"].message,
                                           "at": "attachments[0]"})
        said = json.dumps(error.to_json()) + str(error) + repr(error.args)
        for word in ("secret", "POLYGLOT", "image/", hashlib.sha256(secret).hexdigest()[:12], b64(secret)[:12]):
            self.assertNotIn(word, said)
        self.assertEqual((type(error.__cause__), error.__cause__.code), (art.ArtifactError, "ARTIFACT_POLYGLOT"))

    def test_a_host_can_narrow_the_table(self):
        narrow = {**mm.MEDIA_RULES, "openai-responses-v1": mm.MediaRules(
            accepts={"image/png": "image"}, max_bytes={"image": len(PNG)}, max_total_bytes=len(PNG),
            part=mm.MEDIA_RULES["openai-responses-v1"].part, shape=mm.MEDIA_RULES["openai-responses-v1"].shape)}
        package, context = build_turn("openai-responses-v1")
        self.assertEqual(len(attach(package, context, BOTH[:1], media_rules=narrow)["output"]), 2)
        self.refused("ATTACHMENT_MEDIA_TYPE", package, context, BOTH, "attachments[1]", media_rules=narrow)


class TestAttachingAdmission(unittest.TestCase):
    """Every attached byte passes artifacts.admit_bytes for its own media type, after the binding:
    a reference a host built by hand for hostile bytes binds them, and admission still refuses."""

    def not_admitted(self, cause, attachments, revision="openai-responses-v1", media_rules=mm.MEDIA_RULES, at=1):
        package, context = build_turn(revision, [reference(item.data, item.media_type) for item in attachments])
        with self.assertRaises(mm.MultimodalError) as caught:
            attach(package, context, attachments, media_rules=media_rules)
        self.assertEqual((caught.exception.code, caught.exception.at), ("ATTACHMENT_NOT_ADMITTED", f"attachments[{at}]"))
        self.assertEqual((type(caught.exception.__cause__), caught.exception.__cause__.code), (art.ArtifactError, cause))

    def test_a_png_with_a_zip_appended_is_a_polyglot_for_every_provider(self):
        polyglot = PNG + builders.zip_of([("payload.txt", b"run me")])
        self.assertEqual(art.sniff(polyglot), "image/png")  # its signature alone says PNG
        for revision in REVISIONS:
            with self.subTest(revision=revision):
                self.not_admitted("ARTIFACT_POLYGLOT", [BOTH[1], mm.Attachment(polyglot, "image/png")], revision)

    def test_a_pdf_with_javascript_is_active_content(self):
        hostile = make_pdf(open_action=b"<< /S /JavaScript /JS (app.alert(1)) >>")
        self.assertIn(b"/JavaScript", hostile)
        self.not_admitted("ARTIFACT_ACTIVE_CONTENT", [BOTH[0], mm.Attachment(hostile, "application/pdf")])
        launch = make_pdf(open_action=b"<< /S /Launch /F (calc) >>")
        self.not_admitted("ARTIFACT_ACTIVE_CONTENT", [BOTH[0], mm.Attachment(launch, "application/pdf")],
                          "anthropic-messages-v1")
        named = make_pdf(open_action=b"<< /S /URI /URI (https://example.invalid/) >>")  # a link: no action admission refuses
        package, context = build_turn("anthropic-messages-v1", [reference(named, "application/pdf")])
        self.assertEqual(len(attach(package, context, [mm.Attachment(named, "application/pdf")])["content"]), 2)

    def test_bytes_whose_signature_is_not_their_media_type(self):
        for data, media_type in ((PNG, "image/jpeg"), (PDF, "image/png"), (GIF, "image/webp"),
                                 (JPEG, "application/pdf"), (b"plain words", "image/gif")):
            with self.subTest(media_type=media_type):
                companion = BOTH[0] if data == PDF else BOTH[1]  # other bytes, so never a duplicate
                self.not_admitted("ARTIFACT_TYPE_MISMATCH", [companion, mm.Attachment(data, media_type)])
        self.not_admitted("ARTIFACT_TYPE_UNKNOWN", [BOTH[1], mm.Attachment(bytes(64), "image/png")])

    def test_broken_or_empty_bytes(self):
        self.not_admitted("ARTIFACT_MALFORMED", [BOTH[1], mm.Attachment(PNG[:-4], "image/png")])
        self.not_admitted("ARTIFACT_EMPTY", [BOTH[1], mm.Attachment(b"", "image/png")])

    def test_an_svg_with_script_is_refused_even_by_a_row_that_takes_svg(self):
        clean = b'<svg xmlns="http://www.w3.org/2000/svg" width="1" height="1"><rect width="1" height="1"/></svg>'
        scripted = clean.replace(b"<rect", b"<script>alert(1)</script><rect")
        package, context = build_turn("mcp-tools-call-v1", [reference(scripted, "image/svg+xml")])
        with self.assertRaises(mm.MultimodalError) as caught:  # the table takes no SVG at all
            attach(package, context, [mm.Attachment(scripted, "image/svg+xml")])
        self.assertEqual((caught.exception.code, caught.exception.at), ("ATTACHMENT_MEDIA_TYPE", "attachments[0]"))
        row = mm.MEDIA_RULES["mcp-tools-call-v1"]
        wide = {**mm.MEDIA_RULES, "mcp-tools-call-v1": mm.MediaRules(
            accepts={**row.accepts, "image/svg+xml": "image"}, max_bytes=row.max_bytes,
            max_total_bytes=row.max_total_bytes, part=row.part, shape=row.shape)}
        self.not_admitted("ARTIFACT_ACTIVE_CONTENT", [BOTH[0], mm.Attachment(scripted, "image/svg+xml")],
                          "mcp-tools-call-v1", wide)
        package, context = build_turn("mcp-tools-call-v1", [reference(clean, "image/svg+xml")])
        self.assertEqual(attach(package, context, [mm.Attachment(clean, "image/svg+xml")], media_rules=wide)["content"][1],
                         {"type": "image", "data": b64(clean), "mimeType": "image/svg+xml"})

    def test_binding_comes_before_admission(self):
        polyglot = PNG + builders.zip_of([("payload.txt", b"run me")])
        package, context = build_turn("openai-responses-v1")
        with self.assertRaises(mm.MultimodalError) as caught:
            attach(package, context, [BOTH[0], mm.Attachment(polyglot, "image/png")])
        self.assertEqual((caught.exception.code, caught.exception.at), ("ATTACHMENT_UNBOUND", "attachments[1]"))


if __name__ == "__main__":
    unittest.main()
