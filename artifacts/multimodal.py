"""Multimodal tool results: an image or a PDF that a verified package binds, in a provider's shape.

The core shapes a verified package's model_result as one text part, and the model never reads
bytes there: an artifact appears only as a reference, exactly the five keys
``{"kind", "media_type", "size", "sha256", "access"}``. ``attach`` lets a host send the
referenced bytes themselves to a provider that reads images and PDFs in a tool result. It
verifies the package as the core's ``adapt`` does (the same options, the same codes), takes only
attachments whose digest, size and media type one reference in that very model_result names,
holds each to the provider's closed table of media types and its documented inline limits (never
past the layer's artifacts.MAX_ARTIFACT_BYTES), passes each through the layer's one admission
(artifacts.admit_bytes, for its own media type alone), and builds the provider's tool result: the
core's text part first, exactly as its adapter wrote it, then one inline base64 part per
attachment, in the order given.

What this module never does:
- attach bytes that no reference in the verified model_result binds, bytes admit_bytes refuses (a
  polyglot, active content, a signature that is not their media type: a reference a host built
  by hand proves nothing about its bytes), or anything to a result whose status is not "ok" (an
  error or an unknown outcome carries no media);
- read a file, a URL or a network: the host hands the bytes in;
- change the package, or name an attachment's bytes, digest or media type in a refusal;
- judge what an image or a PDF shows: pixels and document text can carry instructions aimed at
  the model (prompt injection), and sending them at all is the host's opt-in.

Sections, in the order an attachment flows:
    1. Limits and constants    3. Values and references    5. Attaching
    2. Errors                  4. Provider tables
"""
from __future__ import annotations

import base64
import hashlib
import sys
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Final, Mapping, Sequence

_HERE: Final = Path(__file__).resolve().parent
if not __package__:  # by path from a checkout: this folder, then the repository root (the core)
    # This folder ahead of the root: there the name artifacts is this folder's artifacts.py, not
    # the folder itself read as a package.
    if str(_HERE) not in sys.path:
        sys.path.insert(0, str(_HERE))
    if str(_HERE.parent) not in sys.path:
        sys.path.insert(sys.path.index(str(_HERE)) + 1, str(_HERE.parent))

import tool_dispatcher as td  # noqa: E402
if __package__:  # a package's module (discovered from the repository root): its sibling is the package's
    from .artifacts import MAX_ARTIFACT_BYTES, ArtifactError, MediaPolicy, admit_bytes, is_reference
else:
    from artifacts import MAX_ARTIFACT_BYTES, ArtifactError, MediaPolicy, admit_bytes, is_reference  # noqa: E402

__all__ = ["MAX_ATTACHMENTS", "IMAGE_TYPES", "DOCUMENT_TYPES", "MULTIMODAL_CATALOG",
           "MultimodalError", "Attachment", "MediaRules", "MEDIA_RULES", "references", "attach"]

# ============================================================================================
# 1. Limits and constants
# ============================================================================================
# Sizes are raw bytes before base64, which adds a third. Each provider's limits are in its row of
# MEDIA_RULES (section 4), with where they come from; no attachment is ever larger than
# MAX_ARTIFACT_BYTES, the artifacts layer's ceiling of any artifact.

MAX_ATTACHMENTS: Final = 16  # per tool result: a few artifacts; Anthropic lowers each image's pixel cap past 20 images
IMAGE_TYPES: Final = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
DOCUMENT_TYPES: Final = frozenset({"application/pdf"})

# ============================================================================================
# 2. Errors
# ============================================================================================
# Fixed messages: a refusal names the attachment by its index (``at``), never its bytes, its
# digest or its media type.

MULTIMODAL_CATALOG: Final = MappingProxyType(td.error_specs(
    "multimodal", False,
    ATTACHMENT_INVALID="An attachment must be an Attachment of bytes and a media type, in a list.",
    ATTACHMENT_ERROR_RESULT="A result whose status is not ok carries no attachment.",
    ATTACHMENT_TOO_MANY="A tool result carries too many attachments.",
    ATTACHMENT_MEDIA_TYPE="The provider does not take this media type in a tool result.",
    ATTACHMENT_TOO_LARGE="An attachment exceeds the provider's inline size limit.",
    ATTACHMENT_UNBOUND="An attachment's bytes are not bound by any artifact reference in the result.",
    ATTACHMENT_MISMATCH="An attachment's digest is referenced, but with another size or media type.",
    ATTACHMENT_DUPLICATE="An artifact is attached more than once.",
    ATTACHMENT_NOT_ADMITTED="An attachment's bytes do not pass the artifact layer's admission for their media type.",
))


class MultimodalError(td.CatalogError):
    """This module's error: a stable ATTACHMENT_* code and its fixed message; ``at`` is
    ``attachments[i]`` when one attachment is refused."""

    CATALOG = MULTIMODAL_CATALOG


# ============================================================================================
# 3. Values and references
# ============================================================================================


@dataclass(frozen=True, slots=True)
class Attachment:
    """Bytes the host would send to the model, and their media type (lowercase type/subtype)."""

    data: bytes
    media_type: str


def references(model_result: Any) -> list[dict[str, Any]]:
    """Every artifact reference inside a model_result (what artifacts.is_reference takes), in
    document order (no recursion: the core already bounded its depth and size when it verified
    the package)."""
    found, stack = [], [model_result]
    while stack:
        value = stack.pop()
        if is_reference(value):
            found.append(value)
        elif type(value) is dict:
            stack.extend(reversed(list(value.values())))
        elif type(value) is list:
            stack.extend(reversed(value))
    return found


# ============================================================================================
# 4. Provider tables
# ============================================================================================
# One row per adapter revision the core knows. A row says which media types the provider takes
# in a tool result and as what part ("image" or "document"), its limits, how one part is built
# (kind, media type, base64 text, sha256) and how the core's item becomes the multimodal one.

Part = Callable[[str, str, str, str], dict[str, Any]]
Shape = Callable[[dict[str, Any], list[dict[str, Any]]], dict[str, Any]]


@dataclass(frozen=True, slots=True, kw_only=True)
class MediaRules:
    accepts: Mapping[str, str]  # media type -> "image" or "document"
    max_bytes: Mapping[str, int]  # "image" / "document" -> the most raw bytes one attachment holds
    max_total_bytes: int  # the most raw bytes all attachments of one tool result hold together
    part: Part
    shape: Shape


_AS_IMAGE: Final = MappingProxyType({media_type: "image" for media_type in IMAGE_TYPES})
_IMAGES_AND_PDF: Final = MappingProxyType({**_AS_IMAGE, "application/pdf": "document"})
_EXTENSIONS: Final = MappingProxyType({"application/pdf": "pdf"})  # a file part's name needs one


def _capped(*, image: int, document: int) -> Mapping[str, int]:
    # A row's per-attachment limits: the provider's, never past the layer's ceiling.
    return MappingProxyType({"image": min(image, MAX_ARTIFACT_BYTES), "document": min(document, MAX_ARTIFACT_BYTES)})


def _openai_part(kind: str, media_type: str, text: str, sha256: str) -> dict[str, Any]:
    url = f"data:{media_type};base64,{text}"
    if kind == "image":
        return {"type": "input_image", "image_url": url}
    return {"type": "input_file", "filename": f"sha256-{sha256[:16]}.{_EXTENSIONS[media_type]}", "file_data": url}


def _openai_shape(item: dict[str, Any], parts: list[dict[str, Any]]) -> dict[str, Any]:
    return {**item, "output": [{"type": "input_text", "text": item["output"]}, *parts]}


def _anthropic_part(kind: str, media_type: str, text: str, _sha256: str) -> dict[str, Any]:
    return {"type": kind, "source": {"type": "base64", "media_type": media_type, "data": text}}


def _anthropic_shape(block: dict[str, Any], parts: list[dict[str, Any]]) -> dict[str, Any]:
    return {**block, "content": [{"type": "text", "text": block["content"]}, *parts]}


def _gemini_part(kind: str, media_type: str, text: str, _sha256: str) -> dict[str, Any]:
    return {"type": kind, "data": text, "mime_type": media_type}


def _gemini_shape(turn: dict[str, Any], parts: list[dict[str, Any]]) -> dict[str, Any]:
    (step,) = turn["input"]
    return {**turn, "input": [{**step, "result": [*step["result"], *parts]}]}


def _mcp_part(kind: str, media_type: str, text: str, sha256: str) -> dict[str, Any]:
    if kind == "image":
        return {"type": "image", "data": text, "mimeType": media_type}
    return {"type": "resource", "resource": {"uri": f"artifact:sha256:{sha256}", "mimeType": media_type, "blob": text}}


def _mcp_shape(result: dict[str, Any], parts: list[dict[str, Any]]) -> dict[str, Any]:
    return {**result, "content": [*result["content"], *parts]}


# Each row states the provider's documented per-attachment limits, and _capped holds them to
# artifacts.MAX_ARTIFACT_BYTES (16 MiB): every attached byte passes admit_bytes, and the layer
# holds no artifact larger (an artifact is held in memory whole; is_reference refuses a larger
# size, so no reference could bind one). So OpenAI's 20 MB images and 32 MB files, Anthropic's
# 24 MB and Gemini's 50 MB documents are 16 MiB each here. The totals are the providers' own.
MEDIA_RULES: Final[Mapping[str, MediaRules]] = MappingProxyType({
    # Responses function_call_output: output as input_text / input_image (a data: URL) /
    # input_file (a data: URL and a file name) parts. Images: PNG, JPEG, WEBP and non-animated
    # GIF, up to 20 MB each and 50 MB of image bytes per request (the images guide; whether a GIF
    # is animated is not checked here: the provider refuses one). Files: the guide found holds
    # no per-file inline limit; 32 MB, its earlier bound for file content per request, is the
    # conservative pick.
    "openai-responses-v1": MediaRules(
        accepts=_IMAGES_AND_PDF, max_bytes=_capped(image=20_000_000, document=32_000_000),
        max_total_bytes=50_000_000, part=_openai_part, shape=_openai_shape),
    # Messages tool_result: content as text / image / document blocks with a base64 source. The
    # SDK's image source lists exactly these four types, its PDF source application/pdf. An
    # image's base64 text may hold 5 MiB, so 3,932,160 raw bytes; a request holds 32 MB, so at
    # most 24,000,000 raw bytes (32,000,000 as base64) for all attachments together.
    "anthropic-messages-v1": MediaRules(
        accepts=_IMAGES_AND_PDF, max_bytes=_capped(image=3_932_160, document=24_000_000),
        max_total_bytes=24_000_000, part=_anthropic_part, shape=_anthropic_shape),
    # Interactions function_result: result as text / image / document parts (data, mime_type).
    # The SDK also lists image/heic, heif, bmp and tiff and office documents; this layer's set is
    # the four image types and PDF. Inline data: 50 MB for a PDF (the file input guide); the
    # request's inline limit is 100 MB, so 75,000,000 raw bytes together.
    "gemini-interactions-v1": MediaRules(
        accepts=_IMAGES_AND_PDF, max_bytes=_capped(image=50_000_000, document=50_000_000),
        max_total_bytes=75_000_000, part=_gemini_part, shape=_gemini_shape),
    # MCP tools/call result: an image content block; a PDF as an embedded resource blob. MCP sets
    # no size limit; a client reads each message whole, so 10 MB in all is this layer's own bound.
    "mcp-tools-call-v1": MediaRules(
        accepts=_IMAGES_AND_PDF, max_bytes=_capped(image=10_000_000, document=10_000_000),
        max_total_bytes=10_000_000, part=_mcp_part, shape=_mcp_shape),
})

# ============================================================================================
# 5. Attaching
# ============================================================================================


def _checked(attachments: Sequence[Any], rules: MediaRules, max_attachments: int) -> list[str]:
    """Each attachment's part kind, after the checks that read no byte: count, types, media
    type, sizes. Hashing comes after, over a bounded number of bounded attachments."""
    if len(attachments) > max_attachments:
        raise MultimodalError("ATTACHMENT_TOO_MANY")
    kinds, total = [], 0
    for index, attachment in enumerate(attachments):
        at = f"attachments[{index}]"
        if type(attachment) is not Attachment or type(attachment.data) is not bytes \
                or type(attachment.media_type) is not str:
            raise MultimodalError("ATTACHMENT_INVALID", at)
        kind = rules.accepts.get(attachment.media_type)
        if kind is None:
            raise MultimodalError("ATTACHMENT_MEDIA_TYPE", at)
        if len(attachment.data) > rules.max_bytes[kind]:
            raise MultimodalError("ATTACHMENT_TOO_LARGE", at)
        total += len(attachment.data)
        kinds.append(kind)
    if total > rules.max_total_bytes:
        raise MultimodalError("ATTACHMENT_TOO_LARGE")
    return kinds


def _bound_digests(attachments: Sequence[Attachment], model_result: Mapping[str, Any]) -> list[str]:
    """Each attachment's sha256, which a reference in the model_result must name with the same
    size and media type; each artifact at most once."""
    named: dict[str, list[tuple[int, str]]] = {}
    for reference in references(model_result):
        named.setdefault(reference["sha256"], []).append((reference["size"], reference["media_type"]))
    digests: list[str] = []
    for index, attachment in enumerate(attachments):
        at = f"attachments[{index}]"
        digest = hashlib.sha256(attachment.data).hexdigest()
        if digest not in named:
            raise MultimodalError("ATTACHMENT_UNBOUND", at)
        if (len(attachment.data), attachment.media_type) not in named[digest]:
            raise MultimodalError("ATTACHMENT_MISMATCH", at)
        if digest in digests:
            raise MultimodalError("ATTACHMENT_DUPLICATE", at)
        digests.append(digest)
    return digests


def _admitted(attachments: Sequence[Attachment]) -> None:
    """Each attachment through the layer's one admission, for its own media type alone: its size
    was held to the row already, so the policy's bound is the layer's ceiling."""
    for index, attachment in enumerate(attachments):
        try:
            admit_bytes(attachment.data, declared_type=attachment.media_type, policy=MediaPolicy(
                allowed=frozenset({attachment.media_type}), max_bytes=MAX_ARTIFACT_BYTES))
        except ArtifactError as refused:  # its fixed code stays the cause, for the host's log
            raise MultimodalError("ATTACHMENT_NOT_ADMITTED", f"attachments[{index}]") from refused


def attach(package: Any, context: td.CallContext, adapter_revision: str, attachments: Sequence[Attachment], *,
           max_attachments: int = MAX_ATTACHMENTS, media_rules: Mapping[str, MediaRules] = MEDIA_RULES,
           **adapt_options: Any) -> dict[str, Any]:
    """The provider's tool result for a verified package, with the bound attachments inline.

    Verifies the package with td.adapt (adapt_options as it takes them: principal, approvers,
    seal_keys, require_seal, registry; its codes unchanged), then refuses with a MultimodalError,
    in this order: attachments not a list of Attachment (ATTACHMENT_INVALID); any attachment to a
    result whose status is not ok (ATTACHMENT_ERROR_RESULT); more than max_attachments (ATTACHMENT_TOO_MANY);
    a media type the provider's row does not take (ATTACHMENT_MEDIA_TYPE); one attachment, or all
    together, past the row's limits (ATTACHMENT_TOO_LARGE); bytes no reference in model_result
    names by sha256 (ATTACHMENT_UNBOUND), or names with another size or media type
    (ATTACHMENT_MISMATCH); the same artifact twice (ATTACHMENT_DUPLICATE); bytes that
    artifacts.admit_bytes refuses for their media type (ATTACHMENT_NOT_ADMITTED, the
    ArtifactError as its __cause__). The result holds the core's text first, then one part per
    attachment in the order given; the package is not changed.
    """
    item = td.adapt(package, context, adapter_revision, **adapt_options)
    rules = media_rules[adapter_revision]  # adapt accepted it: the core knows this revision
    if type(attachments) not in (list, tuple):
        raise MultimodalError("ATTACHMENT_INVALID")
    if attachments and package["model_result"]["status"] != "ok":  # an error carries no media
        raise MultimodalError("ATTACHMENT_ERROR_RESULT")
    kinds = _checked(attachments, rules, max_attachments)
    digests = _bound_digests(attachments, package["model_result"])
    _admitted(attachments)
    parts = [rules.part(kind, attachment.media_type, base64.b64encode(attachment.data).decode("ascii"), digest)
             for kind, attachment, digest in zip(kinds, attachments, digests)]
    return rules.shape(item, parts)
