"""provider_streams against the providers' official Python SDKs, offline: loopback only.

Run by run.sh inside a throwaway virtual environment that holds the SDKs pinned in
requirements.txt; the project itself never imports an SDK. Three checks, for OpenAI Responses,
Anthropic Messages and Gemini Interactions:

1. payloads: every request this layer builds (the tool declarations, and the continuation of
   every well-formed fixture stream with calls) is checked against the SDK's own request type,
   strictly: every key must be one the TypedDict declares, every required key present, every
   value of a declared type (STRICT below, driven by the SDK's own annotations);
2. wire: each request goes through the SDK's real client to a loopback HTTP server, and the JSON
   body that arrives must equal the request built here;
3. streams: every well-formed fixture stream is served as SSE by that server to the SDK's
   streaming client, and the calls the SDK reconstructs (call id, name, arguments) must equal
   those of provider_streams.parse_sse (for Gemini, joined from its typed events, and equal to
   the calls its typed `steps` list after the user's input where interaction.completed lists them).
4. multimodal: the continuation holding a tool result with an image and a PDF attached
   (artifacts/multimodal.attach, over a real package whose output references them) passes the
   checks of 1 and 2, and the media types the layer's table takes for the provider are ones the
   SDK's own image and document types list.

Prints one line per check ("ok ..." or "FAIL ..."), NOTE lines for what a check cannot cover,
and exits 1 on any failure. Any connection to an address other than 127.0.0.1 is refused.
"""
from __future__ import annotations

import collections.abc
import json
import os
import socket
import sys
import threading
import types
import typing
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.metadata import version
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
# The module first; then the artifacts layer (multimodal.py, and the package its tests build), ahead
# of the repository root, where the name artifacts would be that folder read as a package.
sys.path[:0] = [str(HERE.parent), str(HERE.parent.parent / "artifacts"), str(HERE.parent.parent)]

import multimodal as mm  # noqa: E402
import provider_streams as ps  # noqa: E402
import test_multimodal as mmt  # noqa: E402
import typing_extensions  # noqa: E402  (installed with the SDKs)

LOOPBACK = "127.0.0.1"
MODELS = {"openai": "gpt-test", "anthropic": "claude-test", "gemini": "gemini-2.5-flash"}  # Gemini names its models in a closed list
HOST_TURN = {"role": "user", "content": "Where is my order ORDER-7?"}  # the host's earlier conversation


# -- no network beyond loopback --------------------------------------------------------------

_connect = socket.socket.connect


def _loopback_only(self: socket.socket, address: Any) -> Any:
    if not (isinstance(address, tuple) and address[0] in (LOOPBACK, "localhost", "::1")):
        raise ConnectionRefusedError("sdk_conformance: only loopback connections are allowed")
    return _connect(self, address)


socket.socket.connect = _loopback_only  # type: ignore[method-assign]
for _name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
    os.environ.pop(_name, None)
os.environ["NO_PROXY"] = os.environ["no_proxy"] = "*"


# -- strict checks against the SDK's request types --------------------------------------------


QUALIFIERS = (typing_extensions.Required, typing_extensions.NotRequired, typing.Required, typing.NotRequired)


def _fields(cls: type) -> tuple[dict[str, Any], frozenset[str]]:
    """A TypedDict's field types and its required keys, read from its annotations.

    Read here rather than from __required_keys__, which a TypedDict written with postponed
    annotations and NotRequired[...] may not fill in on every Python version.
    """
    hints = typing.get_type_hints(cls, include_extras=True)
    fields, required = {}, set()
    for key, hint in hints.items():
        needed = getattr(cls, "__total__", True)
        while _origin(hint) in QUALIFIERS or _origin(hint) is typing.Annotated:
            if _origin(hint) in QUALIFIERS:
                needed = _origin(hint) in (typing_extensions.Required, typing.Required)
            hint = typing.get_args(hint)[0]
        fields[key] = hint
        if needed:
            required.add(key)
    return fields, frozenset(required)


def _is_typeddict(kind: Any) -> bool:
    return typing_extensions.is_typeddict(kind)


def _origin(kind: Any) -> Any:
    return typing.get_origin(kind)


SEQUENCES = (list, collections.abc.Iterable, collections.abc.Sequence, typing.Iterable, typing.Sequence)
MAPPINGS = (dict, collections.abc.Mapping, typing.Mapping)


def strict(value: Any, kind: Any, at: str = "$") -> list[str]:
    """The ways `value` breaks the SDK type `kind` (empty: it conforms, with no unknown key)."""
    if isinstance(kind, typing_extensions.TypeAliasType):
        return strict(value, kind.__value__, at)
    if hasattr(kind, "__supertype__"):  # typing.NewType
        return strict(value, kind.__supertype__, at)
    if kind is Any or kind is object:
        return []
    origin = _origin(kind)
    if origin is typing.Annotated:
        return strict(value, typing.get_args(kind)[0], at)
    if origin in (typing.Union, types.UnionType):
        failures = [strict(value, member, at) for member in typing.get_args(kind)]
        return [] if any(not failure for failure in failures) else [f"{at}: no member of the union fits"]
    if origin is typing.Literal or origin is typing_extensions.Literal:
        return [] if value in typing.get_args(kind) else [f"{at}: {value!r} is not one of the literals"]
    if kind is type(None):
        return [] if value is None else [f"{at}: not null"]
    if kind in (str, bool):
        return [] if type(value) is kind else [f"{at}: not {kind.__name__}"]
    if kind is int:
        return [] if type(value) is int else [f"{at}: not int"]
    if kind is float:
        return [] if type(value) in (int, float) else [f"{at}: not a number"]
    if _is_typeddict(kind):
        if type(value) is not dict:
            return [f"{at}: not an object ({kind.__name__})"]
        hints, required = _fields(kind)
        problems = [f"{at}.{key}: not a field of {kind.__name__}" for key in value if key not in hints]
        problems += [f"{at}.{key}: required by {kind.__name__}" for key in sorted(required) if key not in value]
        for key in value.keys() & hints.keys():
            problems += strict(value[key], hints[key], f"{at}.{key}")
        return problems
    if origin in SEQUENCES or origin is getattr(typing_extensions, "SequenceNotStr", None) or _is_sequence_alias(kind):
        if type(value) is not list:
            return [f"{at}: not an array"]
        (item,) = typing.get_args(kind) or (Any,)
        return [problem for index, element in enumerate(value) for problem in strict(element, item, f"{at}[{index}]")]
    if origin in MAPPINGS:
        if type(value) is not dict:
            return [f"{at}: not an object"]
        _, item = typing.get_args(kind) or (str, Any)
        return [problem for key, element in value.items() for problem in strict(element, item, f"{at}.{key}")]
    return [f"{at}: the SDK type {kind!r} is not one this check reads"]


def _is_sequence_alias(kind: Any) -> bool:
    # openai's SequenceNotStr[T] is a Protocol generic: a sequence that is not a str.
    origin = _origin(kind)
    return origin is not None and getattr(origin, "__name__", "") == "SequenceNotStr"


# -- the loopback server ----------------------------------------------------------------------


class Loopback:
    """An HTTP server on 127.0.0.1 that records each request body and answers from a queue."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, Any]] = []
        self.answers: list[tuple[str, bytes]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server hook name
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                owner.requests.append((self.path, json.loads(body) if body else None))
                content_type, answer = owner.answers.pop(0) if owner.answers else ("application/json", b"{}")
                self.send_response(200)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *_args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer((LOOPBACK, 0), Handler)
        self.url = f"http://{LOOPBACK}:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, content_type: str, body: bytes) -> None:
        self.answers.append((content_type, body))

    def last(self) -> Any:
        return self.requests[-1][1]


# -- what the project builds ------------------------------------------------------------------


def well_formed(provider: str) -> list[ps.StreamCase]:
    return [case for case in ps.load_fixture(provider).cases.values() if "error" not in case.expect]


def requests(provider: str) -> list[tuple[str, dict[str, Any]]]:
    """Every request body this layer builds for a provider, as the host would send it."""
    model = MODELS[provider]
    declared = {"model": model, "tools": ps.declare_tools(provider)}
    if provider == "openai":
        declared["input"] = HOST_TURN["content"]
    elif provider == "anthropic":
        declared.update(max_tokens=1024, messages=[HOST_TURN])
    else:
        declared["input"] = HOST_TURN["content"]
    built = [("declarations", declared)]
    for case in well_formed(provider):
        run = ps.run_turn(ps.parse_stream(provider, case.events), ps.demo_dispatcher(), ps.DEMO_HOST)
        if run.payload is None:
            continue
        body: dict[str, Any] = {"model": model, **run.payload}
        if provider == "anthropic":  # the host prepends its conversation; a request needs max_tokens
            body = {"model": model, "max_tokens": 1024, "messages": [HOST_TURN, *run.payload["messages"]]}
        built.append((f"continuation of {case.name}", body))
    return built


REVISIONS = {"openai": "openai-responses-v1", "anthropic": "anthropic-messages-v1", "gemini": "gemini-interactions-v1"}


def multimodal_requests(provider: str) -> list[tuple[str, dict[str, Any]]]:
    """The continuation a host sends with a multimodal tool result, as it would send it."""
    revision, model = REVISIONS[provider], MODELS[provider]
    built = []
    for label, attachments in (("png + pdf", mmt.BOTH), ("every media type", mmt.EVERY_TYPE)):
        package, context = mmt.build_turn(revision, [mmt.reference(item.data, item.media_type) for item in attachments])
        item = mm.attach(package, context, revision, attachments, principal=mmt.PRINCIPAL, registry=mmt.REGISTRY)
        if provider == "openai":
            body = {"model": model, "previous_response_id": context.response_id, "input": [item]}
        elif provider == "anthropic":
            call = {"type": "tool_use", "id": context.call_id, "name": "render_report", "input": {"report": "q3"}}
            body = {"model": model, "max_tokens": 1024, "messages": [
                HOST_TURN, {"role": "assistant", "content": [call]}, {"role": "user", "content": [item]}]}
        else:
            body = {"model": model, **item}
        built.append((f"multimodal tool result ({label})", body))
    return built


def media_parts(provider: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The media parts of a multimodal continuation (the text part is the first of its list)."""
    if provider == "openai":
        return body["input"][0]["output"][1:]
    if provider == "anthropic":
        return body["messages"][-1]["content"][0]["content"][1:]
    return body["input"][0]["result"][1:]


def sdk_media_types(provider: str) -> dict[str, frozenset[str]] | None:
    """The media types the SDK's own image and document part types list (None: it lists none)."""
    if provider == "anthropic":
        from anthropic.types import Base64ImageSourceParam, Base64PDFSourceParam
        kinds = {"image": Base64ImageSourceParam, "document": Base64PDFSourceParam}
        return {kind: _literals(_fields(cls)[0]["media_type"]) for kind, cls in kinds.items()}
    if provider == "gemini":
        from google.genai import interactions
        kinds = {"image": interactions.ImageContentParam, "document": interactions.DocumentContentParam}
        return {kind: _literals(_fields(cls)[0]["mime_type"]) for kind, cls in kinds.items()}
    return None  # openai: input_image takes any image_url, input_file any file_data


def _literals(kind: Any) -> frozenset[str]:
    found, stack = set(), [kind]
    while stack:
        item = stack.pop()
        if _origin(item) in (typing.Literal, typing_extensions.Literal):
            found.update(typing.get_args(item))
        elif _origin(item) in (typing.Union, types.UnionType):
            stack.extend(typing.get_args(item))
    return frozenset(found)


# -- one provider at a time: its request type, its client, its stream reader ------------------


def openai_sdk(server: Loopback) -> tuple[Any, Callable[[dict[str, Any]], Any], Callable[[bytes], list[tuple]]]:
    import openai
    from openai.types.responses import response_create_params

    client = openai.OpenAI(base_url=server.url + "/v1", api_key="sk-loopback", max_retries=0)

    def send(body: dict[str, Any]) -> Any:
        server.answer("application/json", json.dumps({"id": "resp_x", "object": "response", "output": []}).encode())
        return client.responses.create(**body)

    def stream(sse: bytes) -> list[tuple]:
        server.answer("text/event-stream", sse)
        with client.responses.stream(model=MODELS["openai"], input="x") as events:
            for _ in events:
                pass
            final = events.get_final_response()
        return [(item.call_id, item.name, json.loads(item.arguments))
                for item in final.output if item.type == "function_call"]

    return response_create_params.ResponseCreateParamsNonStreaming, send, stream


def anthropic_sdk(server: Loopback) -> tuple[Any, Callable[[dict[str, Any]], Any], Callable[[bytes], list[tuple]]]:
    import anthropic
    from anthropic.types import message_create_params

    client = anthropic.Anthropic(base_url=server.url, api_key="sk-loopback", max_retries=0)

    def send(body: dict[str, Any]) -> Any:
        server.answer("application/json", json.dumps({
            "id": "msg_x", "type": "message", "role": "assistant", "model": MODELS["anthropic"], "content": [],
            "stop_reason": "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": 1, "output_tokens": 1}}).encode())
        return client.messages.create(**body)

    def stream(sse: bytes) -> list[tuple]:
        server.answer("text/event-stream", sse)
        with client.messages.stream(model=MODELS["anthropic"], max_tokens=1024, messages=[HOST_TURN]) as events:
            for _ in events:
                pass
            final = events.get_final_message()
        return [(block.id, block.name, block.input) for block in final.content if block.type == "tool_use"]

    return message_create_params.MessageCreateParamsNonStreaming, send, stream


def gemini_sdk(server: Loopback) -> tuple[Any, Callable[[dict[str, Any]], Any], Callable[[bytes], list[tuple]]]:
    from google import genai
    from google.genai import interactions

    client = genai.Client(api_key="loopback", http_options={"base_url": server.url})

    def send(body: dict[str, Any]) -> Any:
        server.answer("application/json", json.dumps({"id": "v1_x", "status": "completed"}).encode())
        return client.interactions.create(**body)

    def stream(sse: bytes) -> list[tuple]:
        # The SDK parses each event into its typed model but keeps no running interaction: the
        # calls are joined here from its typed step.start / step.delta events, by index. Where
        # interaction.completed lists the steps, the SDK's typed list is the turn (the user's
        # input first); the calls it holds after the last user_input step must be the same.
        server.answer("text/event-stream", sse)
        calls: dict[int, list[Any]] = {}
        listed: list[Any] = []
        for event in client.interactions.create(model=MODELS["gemini"], input="x", stream=True):
            kind = getattr(event, "event_type", None)
            if kind == "step.start" and getattr(event.step, "type", None) == "function_call":
                calls[event.index] = [event.step.id, event.step.name, ""]
            elif kind == "step.delta" and event.index in calls and getattr(event.delta, "type", None) == "arguments_delta":
                calls[event.index][2] += event.delta.arguments
            elif kind == "interaction.completed":
                listed = list(getattr(event.interaction, "steps", None) or [])
        joined = [(call_id, name, json.loads(text) if text else {}) for call_id, name, text in
                  (calls[index] for index in sorted(calls))]
        inputs = [at for at, step in enumerate(listed) if getattr(step, "type", None) == "user_input"]
        named = [(step.id, step.name, step.arguments) for step in listed[inputs[-1] + 1 if inputs else 0:]
                 if getattr(step, "type", None) == "function_call"]
        if listed and named != joined:
            raise ValueError(f"its typed steps list {named!r:.120}, its typed events give {joined!r:.120}")
        return joined

    return interactions.CreateModelInteractionParam, send, stream


SDKS = {"openai": openai_sdk, "anthropic": anthropic_sdk, "gemini": gemini_sdk}
DONE = {"gemini": b"event: done\ndata: [DONE]\n\n"}  # Google's documented terminator, served as it is sent


def check_provider(provider: str, server: Loopback, report: Callable[[bool, str], None]) -> None:
    request_type, send, stream = SDKS[provider](server)
    for label, body in requests(provider) + multimodal_requests(provider):
        problems = strict(body, request_type)
        report(not problems, f"{provider} payload  {label}: " + ("; ".join(problems[:3]) or "conforms"))
        send(body)
        wire = server.last()
        report(wire == body, f"{provider} wire     {label}: " + ("same body" if wire == body else "the body differs"))
    # Controls: the check must refuse what the SDK's types refuse, or a pass would mean nothing.
    declared = requests(provider)[0][1]
    tool = declared["tools"][0]
    for label, body in (("an unknown key on a tool", {**declared, "tools": [{**tool, "unknown_key": True}]}),
                        ("an unknown key on the request", {**declared, "unknown_key": True}),
                        ("a name that is not a string", {**declared, "tools": [{**tool, "name": 7}]})):
        problems = strict(body, request_type)
        report(bool(problems), f"{provider} control  {label}: " + ("refused" if problems else "ACCEPTED"))
    check_media(provider, request_type, report)
    for case in well_formed(provider):
        sse = ps.render_sse(provider, case.events).encode("utf-8") + DONE.get(provider, b"")
        ours = [(call.call_id, call.name, call.arguments) for call in ps.parse_sse(provider, sse).calls]
        try:
            theirs = stream(sse)
        except Exception as error:  # noqa: BLE001 - an SDK failing on our stream is a finding to print
            report(False, f"{provider} stream   {case.name}: the SDK failed ({type(error).__name__}: {error})"[:300])
            continue
        report(theirs == ours, f"{provider} stream   {case.name}: {len(ours)} call(s)"
               + ("" if theirs == ours else f", the SDK reconstructs {theirs!r:.200}"))


def check_media(provider: str, request_type: Any, report: Callable[[bool, str], None]) -> None:
    """The layer's media table against the SDK's lists, and controls on a multimodal payload."""
    listed = sdk_media_types(provider)
    rules = mm.MEDIA_RULES[REVISIONS[provider]]
    for kind in ("image", "document") if listed is not None else ():
        ours = frozenset(media_type for media_type, taken in rules.accepts.items() if taken == kind)
        report(ours <= listed[kind], f"{provider} media    {kind} types {sorted(ours)}: "
               + ("listed by the SDK" if ours <= listed[kind] else f"the SDK lists only {sorted(listed[kind])}"))
    _, body = multimodal_requests(provider)[0]
    image = media_parts(provider, body)[0]
    for label, change in (("an unknown key on a media part", lambda part: {**part, "unknown_key": True}),
                          MEDIA_CONTROLS[provider]):
        problems = strict(_replaced(body, image, change(image)), request_type)
        report(bool(problems), f"{provider} control  multimodal: {label}: " + ("refused" if problems else "ACCEPTED"))


# A change to a multimodal payload's image part that the SDK's types must refuse, per provider.
MEDIA_CONTROLS: dict[str, tuple[str, Callable[[dict[str, Any]], dict[str, Any]]]] = {
    "openai": ("an image_url that is not a string", lambda part: {**part, "image_url": 7}),
    "anthropic": ("an image media type its source does not list",
                  lambda part: {**part, "source": {**part["source"], "media_type": "image/bmp"}}),
    "gemini": ("a mime type its image part does not list", lambda part: {**part, "mime_type": "image/x-unlisted"}),
}


def _replaced(root: Any, old: Any, new: Any) -> Any:
    """A copy of `root` with the one object that is `old` replaced by `new`."""
    if root is old:
        return new
    if type(root) is dict:
        return {key: _replaced(value, old, new) for key, value in root.items()}
    if type(root) is list:
        return [_replaced(value, old, new) for value in root]
    return root


def main() -> int:
    failures = 0
    count = 0

    def report(passed: bool, line: str) -> None:
        nonlocal failures, count
        count += 1
        failures += not passed
        print(("ok   " if passed else "FAIL ") + line)

    print("NOTE SDKs: " + ", ".join(f"{name} {version(name)}" for name in ("openai", "anthropic", "google-genai")))
    server = Loopback()
    for provider in SDKS:
        check_provider(provider, server, report)
    server.server.shutdown()
    print("NOTE gemini streams: google-genai parses each Interactions event into its typed model but keeps no "
          "running interaction; the calls are joined from its typed events, and checked against its typed "
          "steps where interaction.completed lists them")
    print("NOTE multimodal: openai's input_image and input_file types list no media type (any data: URL is "
          "typed str), so its media types are held to the provider's documentation only; no MCP SDK is pinned, so "
          "the MCP shape is checked by artifacts/test_multimodal.py alone; no check here sends bytes to a provider, "
          "so its size limits and what a model makes of an image are not covered")
    print(f"{count - failures}/{count} checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
