"""Tests for artifacts/multimodal.py: one TestCase per section, in the module's order.

    python -B -m unittest discover -s artifacts -p 'test_multimodal.py'

Every package is a real one: a host tool declared with td.declare_tool and run through
td.Dispatcher, whose output references a PNG and a PDF the tests build here.
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
sys.path.insert(0, str(HERE))

import tool_dispatcher as td  # noqa: E402
import multimodal as mm  # noqa: E402

NOW = 1_800_000_000
REVISIONS = ("openai-responses-v1", "anthropic-messages-v1", "gemini-interactions-v1", "mcp-tools-call-v1")
PRINCIPAL = td.Principal("tenant-a", "alice", ("reports.read",))


def png_chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def make_png() -> bytes:
    """A valid 1x1 8-bit greyscale PNG: signature, IHDR, one IDAT row (filter 0, one grey pixel), IEND."""
    header = struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", header) + png_chunk(b"IDAT", zlib.compress(b"\x00\x80"))
            + png_chunk(b"IEND", b""))


def make_pdf() -> bytes:
    """A valid one-page PDF 1.4 with its cross-reference table at the byte offsets it names."""
    stream = b"BT /F1 12 Tf 20 20 Td (Report) Tj ET"
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>",
               b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
               b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 60] /Contents 4 0 R "
               b"/Resources << /Font << /F1 5 0 R >> >> >>",
               b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream),
               b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    out = bytearray(b"%PDF-1.4\n")
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


def reference(data: bytes, media_type: str, *, kind: str = "blob", size: int | None = None) -> dict:
    return {"kind": kind, "media_type": media_type, "size": len(data) if size is None else size,
            "sha256": hashlib.sha256(data).hexdigest(), "access": None}


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


REFERENCE_SCHEMA = {
    "type": "object",
    "properties": {"kind": {"type": "string", "enum": ["file", "url", "blob"]},
                   "media_type": {"type": "string", "maxLength": 100},
                   "size": {"type": "integer", "minimum": 0, "maximum": 1_000_000_000},
                   "sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
                   "access": {"type": ["string", "null"], "maxLength": 200}},
    "required": ["kind", "media_type", "size", "sha256", "access"],
    "additionalProperties": False,
}
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
                         ["base64", "hashlib", "re", "sys", "dataclasses", "pathlib", "types", "typing",
                          "tool_dispatcher"])


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
        pdf["access"] = "tok-1"
        found = mm.references({"data": {"a": [png, {"b": pdf}], "c": "x"}, "d": [png]})
        self.assertEqual(found, [png, pdf, png])

    def test_only_the_exact_five_key_shape_is_a_reference(self):
        good = reference(PNG, "image/png")
        self.assertTrue(mm._is_reference(good))
        changes = ({"extra": 1}, {"kind": "dir"}, {"kind": 1}, {"media_type": "Image/PNG"}, {"media_type": "png"},
                   {"size": True}, {"size": -1}, {"size": 1.0}, {"sha256": good["sha256"].upper()},
                   {"sha256": good["sha256"][:63]}, {"access": 7}, {"access": ["t"]})
        for change in changes:
            with self.subTest(change=change):
                self.assertFalse(mm._is_reference({**good, **change}))
                self.assertEqual(mm.references({"data": [{**good, **change}]}), [])
        missing = dict(good)
        del missing["access"]
        self.assertFalse(mm._is_reference(missing))


class TestProviderTables(unittest.TestCase):

    def test_every_core_adapter_has_one_row(self):
        self.assertEqual(set(mm.MEDIA_RULES), set(td.ADAPTERS))

    def test_each_row_takes_the_four_image_types_and_pdf_only(self):
        for revision, rules in mm.MEDIA_RULES.items():
            with self.subTest(revision=revision):
                self.assertEqual(dict(rules.accepts), {"image/png": "image", "image/jpeg": "image", "image/gif": "image",
                                                       "image/webp": "image", "application/pdf": "document"})

    def test_the_limits_are_the_documented_ones(self):
        self.assertEqual({revision: (dict(rules.max_bytes), rules.max_total_bytes)
                          for revision, rules in mm.MEDIA_RULES.items()}, {
            "openai-responses-v1": ({"image": 20_000_000, "document": 32_000_000}, 50_000_000),
            "anthropic-messages-v1": ({"image": 3_932_160, "document": 24_000_000}, 24_000_000),
            "gemini-interactions-v1": ({"image": 50_000_000, "document": 50_000_000}, 75_000_000),
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

    def test_each_image_type_is_taken_as_an_image(self):
        blobs = {"image/jpeg": b"\xff\xd8\xff\xe0jpeg", "image/gif": b"GIF89a", "image/webp": b"RIFF\0\0\0\0WEBP"}
        refs = [reference(data, media_type) for media_type, data in blobs.items()]
        package, context = build_turn("anthropic-messages-v1", refs)
        content = attach(package, context, [mm.Attachment(data, media_type) for media_type, data in blobs.items()])
        self.assertEqual([(part["type"], part["source"]["media_type"]) for part in content["content"][1:]],
                         [("image", "image/jpeg"), ("image", "image/gif"), ("image", "image/webp")])


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
        blobs = [b"artifact-%d" % index for index in range(mm.MAX_ATTACHMENTS + 1)]
        package, context = build_turn("openai-responses-v1", [reference(blob, "image/png") for blob in blobs])
        attachments = [mm.Attachment(blob, "image/png") for blob in blobs]
        self.assertEqual(len(attach(package, context, attachments[:mm.MAX_ATTACHMENTS])["output"]),
                         mm.MAX_ATTACHMENTS + 1)
        self.refused("ATTACHMENT_TOO_MANY", package, context, attachments)
        self.assertEqual(len(attach(package, context, attachments[:2], max_attachments=2)["output"]), 3)
        self.refused("ATTACHMENT_TOO_MANY", package, context, attachments[:3], max_attachments=2)

    def test_each_kinds_size_limit_both_sides_for_every_provider(self):
        for revision, rules in mm.MEDIA_RULES.items():
            for media_type, kind in (("image/png", "image"), ("application/pdf", "document")):
                limit = rules.max_bytes[kind]
                with self.subTest(revision=revision, kind=kind):
                    blob = bytes(limit)
                    package, context = build_turn(revision, [reference(blob, media_type)])
                    (_, part) = PARTS[revision](attach(package, context, [mm.Attachment(blob, media_type)]))
                    self.assertEqual(len(PAYLOAD[revision](part)), 4 * -(-limit // 3))
                    self.refused("ATTACHMENT_TOO_LARGE", package, context, [mm.Attachment(bytes(limit + 1), media_type)],
                                 "attachments[0]")

    def test_the_total_size_limit_both_sides_for_every_provider(self):
        for revision, rules in mm.MEDIA_RULES.items():
            with self.subTest(revision=revision):
                total = rules.max_total_bytes
                image = min(rules.max_bytes["image"], total // 2)
                document = total - image
                self.assertLessEqual(document, rules.max_bytes["document"])
                blobs = [(bytes(image), "image/png"), (b"\1" * document, "application/pdf"),
                         (b"\2", "image/png")]
                package, context = build_turn(revision, [reference(data, media_type) for data, media_type in blobs])
                attachments = [mm.Attachment(data, media_type) for data, media_type in blobs]
                parts = PARTS[revision](attach(package, context, attachments[:2]))
                self.assertEqual(sum(len(base64.b64decode(PAYLOAD[revision](part))) for part in parts[1:]), total)
                self.refused("ATTACHMENT_TOO_LARGE", package, context, attachments)

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

    def test_a_host_can_narrow_the_table(self):
        narrow = {**mm.MEDIA_RULES, "openai-responses-v1": mm.MediaRules(
            accepts={"image/png": "image"}, max_bytes={"image": len(PNG)}, max_total_bytes=len(PNG),
            part=mm.MEDIA_RULES["openai-responses-v1"].part, shape=mm.MEDIA_RULES["openai-responses-v1"].shape)}
        package, context = build_turn("openai-responses-v1")
        self.assertEqual(len(attach(package, context, BOTH[:1], media_rules=narrow)["output"]), 2)
        self.refused("ATTACHMENT_MEDIA_TYPE", package, context, BOTH, "attachments[1]", media_rules=narrow)


if __name__ == "__main__":
    unittest.main()
