"""Provider stream contracts: a provider's tool-call stream, parsed offline, driven through the
trusted boundary, and answered with the provider's continuation payload.

A tool call reaches an application as a stream of events: in fragments, sometimes interleaved,
sometimes cut off. This layer turns one stream into one turn (the response or interaction id and
its calls: call id, tool name, arguments object) for three provider revisions, hands each call to
``tool_dispatcher`` with a context the trusted host supplies, and shapes the verified results into
what goes back to the provider. Everything the boundary decides stays in ``tool_dispatcher``.

What this layer never does:
- talk to a network, an SDK or a model: a stream is a list of events as decoded from SSE ``data:``
  lines (or raw SSE text, through a small bounded splitter), written from the documented shapes;
- hand on half a turn: a parser yields a turn only from a complete, consistent stream, and any
  other stream raises one StreamError with a stable code, before a single call is dispatched;
- recurse over untrusted input: each parser is a flat state machine driven by a closed table of
  event handlers, and arguments are decoded by ``tool_dispatcher.decode_strict_json``;
- take identity from the stream: the principal, operation ids, idempotency keys and approvals
  come from the Host; the stream supplies only the provider's own response and call ids;
- rely on a bare ``assert`` or emit a warning.

The unknown-event rule, the same for all three providers: an event whose type a parser's table
does not list is skipped while no call is open, and refused (STREAM_UNKNOWN_EVENT) while one is,
because there it could carry part of a call's arguments. Unknown keys on known events are
ignored: providers add fields. Nothing at all may follow the terminal event.

Two decoding policies: a provider's frame is its envelope, decoded under ENVELOPE_JSON (floats,
nulls, long counters, bounded in bytes and depth); what becomes a proposal is decoded again under
PORTABLE_JSON, and every id, name and text this layer uses or echoes is checked where it is used.
No item the client must answer is ever dropped: it is parsed and answered, or the turn is refused.

Sections, in the order data flows:
    1. Limits and constants               9. Continuation payloads
    2. Errors and the code catalog       10. Synthetic streams (tests and benchmarks)
    3. Value types                       11. The provider registry
    4. Turn state, shared by the parsers 12. Parsing: events and SSE text
    5. OpenAI Responses events           13. Host binding, dispatch and the audit guard
    6. Anthropic Messages events         14. Fixtures
    7. Gemini Interactions events        15. CLI
    8. Tool declarations
"""
from __future__ import annotations

if __name__ == "__main__":
    # Ctrl-C while the imports below still run (a good part of a second on a cold machine): the
    # CLI's own answer, CLI_INTERRUPTED and exit 130, never a traceback. run_cli takes SIGINT back.
    import os as _os
    import signal as _signal
    _INTERRUPTED = (b'{\n  "passed": false,\n  "error": {\n    "code": "CLI_INTERRUPTED",\n    "message": "The command '
                    b'was interrupted before it finished.",\n    "retryable": false\n  }\n}\n')
    _signal.signal(_signal.SIGINT, lambda _number, _frame: (_os.write(1, _INTERRUPTED), _os._exit(130)))

import argparse
import functools
import json
import re
import sys
from fractions import Fraction
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Final, Mapping, NoReturn, Sequence

_REPOSITORY: Final = str(Path(__file__).resolve().parent.parent)
if not __package__ and _REPOSITORY not in sys.path:  # by path from a checkout; installed, the core is beside it
    sys.path.insert(0, _REPOSITORY)

import tool_dispatcher  # noqa: E402  (the trusted boundary this layer drives; never copied)
from tool_dispatcher import (  # noqa: E402
    ERROR_CATALOG,
    MAX_SAFE_INTEGER,
    PROVIDER_PROFILES,
    REGISTRY,
    Approval,
    ArrayRule,
    BooleanRule,
    IntegerRule,
    MapRule,
    NumberRule,
    NullableRule,
    ObjectRule,
    StringRule,
    UnionRule,
    ENVELOPE_JSON,
    BoundaryError,
    CallContext,
    CatalogError,
    CliParser,
    Dispatcher,
    ErrorSpec,
    Order,
    Principal,
    ProviderProfile,
    ToolSpec,
    canonical_sha256,
    canonical_text,
    decode_strict_json,
    emit_json,
    error_specs,
    is_identifier,
    json_copy,
    read_bounded,
    run_cli,
    verify_result_set,
)

# ============================================================================================
# 1. Limits and constants
# ============================================================================================
# Every limit is a keyword-only parameter of the function that enforces it, so tests probe both
# sides. Teaching limits, not a production gateway's denial-of-service defence.

MAX_EVENTS: Final = 10_000  # events in one stream: a tool turn needs tens, a long answer thousands
MAX_CALLS: Final = 64  # calls in one turn: providers emit a handful, and each one is a dispatch
MAX_FRAGMENT_BYTES: Final = 4_096  # UTF-8 bytes of one delta: providers send a few tokens at a time
MAX_ARGUMENT_BYTES: Final = 32_768  # UTF-8 bytes of all the turn's arguments together, held in memory
MAX_ARGUMENT_DEPTH: Final = 10  # containers deep in one call's arguments: OpenAI strict's own cap
MAX_TEXT_BYTES: Final = 65_536  # UTF-8 bytes of assistant text kept to echo an Anthropic turn
MAX_SSE_BYTES: Final = 8_388_608  # raw SSE bytes handed to the splitter
MAX_SSE_EVENT_BYTES: Final = 262_144  # one event's data: a terminal event repeats every argument
MAX_SSE_EVENT_DEPTH: Final = 32  # containers deep in one event: real envelopes carry tool schemas
MAX_FIXTURE_BYTES: Final = 262_144  # one stream fixture file
APPROVAL_TTL_SECONDS: Final = 300  # how long a host approval stays live for the call it names

SSE_DEFAULT_EVENT: Final = "message"  # the SSE rules' type for an event with no (or an empty) event line
FIXTURE_FORMAT: Final = "provider-streams-v1"
FIXTURE_DIR: Final = Path(__file__).resolve().parent / "fixtures"
CALL_KEY_DOMAIN: Final = "provider-streams/call-keys/v1"

# The portable tool name all three providers accept (PROVIDERS.md); used with fullmatch.
TOOL_NAME_PATTERN: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")
STREAM_NAME_PATTERN: Final = re.compile(r"[a-z][a-z0-9_]{0,47}")
DATE_PATTERN: Final = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")

# ============================================================================================
# 2. Errors and the code catalog
# ============================================================================================
# One error type for this layer, a subclass of the project's one base (tool_dispatcher.CatalogError),
# with its own closed catalog and fixed messages: nothing from a stream is formatted into them, and
# no code is one of the core's (a test holds both catalogs apart).

def _stream_specs(retryable: bool, **messages: str) -> dict[str, ErrorSpec]:
    return error_specs("stream", retryable, **messages)


# Retryable: the same request, sent again, may well give a whole stream (a cut, a provider error).
STREAM_CATALOG: Final[Mapping[str, ErrorSpec]] = MappingProxyType({
    **_stream_specs(
        True,
        STREAM_INCOMPLETE="The stream ended before its terminal event, or with an item still open.",
        STREAM_PROVIDER_ERROR="The provider reported an error in the stream.",
        STREAM_TRUNCATED="The provider stopped at a limit while the turn held calls.",
    ),
    **_stream_specs(
        False,
        # the stream as a whole
        STREAM_PROVIDER_UNKNOWN="The provider is not one this layer parses.",
        STREAM_EVENTS_INVALID="A stream must be a list of events.",
        STREAM_TOO_MANY_EVENTS="The stream has more events than its limit.",
        STREAM_REVISION_MISMATCH="The stream has the shape of another API revision.",
        # one event
        STREAM_EVENT_MALFORMED="An event, or a field it needs, has the wrong type or value.",
        STREAM_UNKNOWN_EVENT="An event type this revision does not know arrived while a call was open.",
        STREAM_OUT_OF_ORDER="An event arrived where the protocol does not allow it.",
        STREAM_SEQUENCE_INVALID="A sequence number was repeated or went backwards.",
        STREAM_NOT_OPEN="An event refers to an item, block or step that is not open.",
        STREAM_DUPLICATE="An item, block, step or call id was opened twice.",
        STREAM_INCONSISTENT="An event contradicts what the stream said before.",
        STREAM_BLOCK_UNSUPPORTED="An item or content block of a type this revision does not handle.",
        STREAM_CALL_UNANSWERABLE="The turn holds a client-executed item this layer cannot answer.",
        STREAM_ID_INVALID="A response, item or call id is not a portable identifier.",
        STREAM_NAME_INVALID="A tool name is not a portable tool name.",
        # the calls
        STREAM_TOO_MANY_CALLS="The turn has more calls than its limit.",
        STREAM_FRAGMENT_TOO_LARGE="One fragment is larger than its limit.",
        STREAM_ARGUMENTS_TOO_LARGE="The turn's arguments together are larger than their limit.",
        STREAM_TEXT_TOO_LARGE="The turn's text is larger than its limit.",
        STREAM_ARGUMENTS_INVALID="A call's arguments are not strict, portable JSON.",
        STREAM_ARGUMENTS_NOT_OBJECT="A call's arguments are not a JSON object.",
        STREAM_STOP_MISMATCH="The stop reason contradicts the calls in the turn.",
        # raw SSE text
        STREAM_SSE_INVALID="The SSE text or one of its events is not valid.",
        STREAM_SSE_TOO_LARGE="The SSE text or one of its events is larger than its limit.",
        # after parsing
        STREAM_CONTINUATION_REFUSED="The boundary refused to dispatch, verify or adapt the turn's results.",
        STREAM_AUDIT_LEAK="A continuation payload holds a value that only the protected audit may hold.",
        # fixtures and the command line (usage and internal errors are the core's CLI codes)
        STREAM_FIXTURE_INVALID="The stream fixture could not be read or has the wrong structure.",
        STREAM_CLI_UNKNOWN_STREAM="The fixture has no stream of that name.",
    ),
})


class StreamError(CatalogError):
    """The one error type of this layer: a code from STREAM_CATALOG and its fixed message.

    `event` is the position of the offending event in the stream; `detail` the code of the
    tool_dispatcher catalog underneath (a JSON_* refusal of the arguments, say), never free text.
    """

    CATALOG = STREAM_CATALOG

    def __init__(self, code: str, *, event: int | None = None, detail: str | None = None) -> None:
        if detail is not None and detail not in ERROR_CATALOG:
            raise ValueError("unknown error code")  # a programming error, not an input error
        super().__init__(code)
        self.event = event
        self.detail = detail

    def details(self) -> dict[str, Any]:
        view: dict[str, Any] = {}
        if self.detail is not None:
            view["detail"] = self.detail
        if self.event is not None:
            view["event"] = self.event
        return view


# ============================================================================================
# 3. Value types
# ============================================================================================


@dataclass(frozen=True, slots=True)
class Limits:
    events: int = MAX_EVENTS
    calls: int = MAX_CALLS
    fragment_bytes: int = MAX_FRAGMENT_BYTES
    argument_bytes: int = MAX_ARGUMENT_BYTES
    text_bytes: int = MAX_TEXT_BYTES
    depth: int = MAX_ARGUMENT_DEPTH


@dataclass(frozen=True, slots=True)
class ParsedCall:
    """One call of a complete turn. `index` is its place in the provider's output."""

    index: int
    call_id: str
    name: str
    arguments: dict[str, Any]

    def proposal(self) -> dict[str, Any]:
        """The untrusted proposal the dispatcher receives: a fresh copy every time."""
        return {"name": self.name, "arguments": json_copy(self.arguments)}

    def view(self) -> dict[str, Any]:
        return {"index": self.index, "call_id": self.call_id, "name": self.name,
                "arguments": json_copy(self.arguments)}


@dataclass(frozen=True, slots=True)
class Turn:
    """A complete provider turn. `content` is the assistant content to echo (Anthropic only)."""

    adapter_revision: str
    response_id: str
    stop: str
    calls: tuple[ParsedCall, ...]
    content: tuple[Mapping[str, Any], ...] = ()

    def view(self) -> dict[str, Any]:
        return {
            "adapter_revision": self.adapter_revision,
            "response_id": self.response_id,
            "stop": self.stop,
            "calls": [call.view() for call in self.calls],
            "content": [json_copy(dict(block)) for block in self.content],
        }


# ============================================================================================
# 4. Turn state, shared by the parsers
# ============================================================================================
# A stream moves through phases: before its start event, open, closing (Anthropic only: after
# message_delta, before message_stop), ended. Items, blocks and steps are "slots", kept by the
# provider's index, which must count up from 0 as they open: a slot is never keyed by arrival
# order, and a gap means an opening event went missing. Fragments are kept as UTF-8 bytes and
# joined and decoded once, after the terminal event, when the stop reason is known.

_BEFORE: Final = "before"
_OPEN: Final = "open"
_CLOSING: Final = "closing"
_ENDED: Final = "ended"
_ANY: Final = "any"  # a rule phase: any phase before the end

_CALL: Final = "call"
_TEXT: Final = "text"  # text kept for an echo
_OTHER: Final = "other"  # an item whose content this layer does not need
_GAP: Final = "gap"  # an index the stream skipped: never open, checked against the terminal event's list

# Where a provider's indexes may skip (Protocol.index_gaps): only where the terminal event can
# show what stood at a skipped index, so that no call can hide there.
_GAPS_NONE: Final = "none"  # Anthropic: nothing is listed at the end
_GAPS_ANYWHERE: Final = "anywhere"  # OpenAI: the final response lists every output item again
_GAPS_LEADING: Final = "leading"  # Gemini: before the first step only, for the user's input

_OVER_BUDGET: Final = MappingProxyType({_CALL: "STREAM_ARGUMENTS_TOO_LARGE", _TEXT: "STREAM_TEXT_TOO_LARGE"})

# What a stop reason allows, and the code for a turn that breaks it, by (rule, has calls).
_STOP_VERDICTS: Final = MappingProxyType({
    ("calls", False): "STREAM_STOP_MISMATCH",
    ("no_calls", True): "STREAM_STOP_MISMATCH",
    ("cut", True): "STREAM_TRUNCATED",
    ("failed", False): "STREAM_PROVIDER_ERROR",
    ("failed", True): "STREAM_PROVIDER_ERROR",
})
_UNLISTED_STOP: Final = "no_calls"  # a stop reason no table lists can never carry calls


class _Slot:
    __slots__ = ("kind", "item_type", "item_id", "call_id", "name", "fragments", "open", "done")

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.item_type = ""  # the provider's type of the item, block or step
        self.item_id: str | None = None
        self.call_id = ""
        self.name = ""
        self.fragments: list[bytes] = []
        self.open = True
        self.done = False  # OpenAI: the arguments' done event has arrived

    def data(self) -> bytes:
        if len(self.fragments) != 1:
            self.fragments = [b"".join(self.fragments)]
        return self.fragments[0]


class _State:
    __slots__ = ("protocol", "limits", "phase", "response_id", "stop", "slots", "call_ids",
                 "open_calls", "spent", "budget", "sequence")

    def __init__(self, protocol: Protocol, limits: Limits) -> None:
        self.protocol = protocol
        self.limits = limits
        self.phase = _BEFORE
        self.response_id = ""
        self.stop = ""
        self.slots: list[_Slot] = []
        self.call_ids: set[str] = set()
        self.open_calls = 0
        self.spent = {_CALL: 0, _TEXT: 0}
        self.budget = {_CALL: limits.argument_bytes, _TEXT: limits.text_bytes}
        self.sequence = -1

    def start(self, response_id: Any) -> None:
        self.response_id = _identifier(response_id)
        self.phase = _OPEN

    def add_slot(self, index: int, kind: str) -> _Slot:
        count = len(self.slots)
        if index < count:
            raise StreamError("STREAM_DUPLICATE")
        if index > count:
            # A skipped index is accepted only where the terminal event can list what stood there
            # (OpenAI: every item; Gemini: the user's input before the first step), so a call
            # whose opening went missing is still caught there; and never wider than the stream
            # could have filled, so a hostile index allocates nothing.
            gaps = self.protocol.index_gaps
            if gaps == _GAPS_NONE or (gaps == _GAPS_LEADING and count) or index >= self.limits.events:
                raise StreamError("STREAM_OUT_OF_ORDER")
            for _ in range(index - count):
                gap = _Slot(_GAP)
                gap.open = False
                self.slots.append(gap)
        slot = _Slot(kind)
        self.slots.append(slot)
        return slot

    def add_call(self, index: int, *, call_id: Any, name: Any, item_id: str | None = None) -> None:
        call_id = _identifier(call_id)
        name = _tool_name(name)
        if call_id in self.call_ids:
            raise StreamError("STREAM_DUPLICATE")
        if len(self.call_ids) >= self.limits.calls:
            raise StreamError("STREAM_TOO_MANY_CALLS")
        slot = self.add_slot(index, _CALL)
        slot.call_id, slot.name, slot.item_id = call_id, name, item_id
        self.call_ids.add(call_id)
        self.open_calls += 1

    def slot(self, index: int) -> _Slot:
        if index >= len(self.slots) or not self.slots[index].open:
            raise StreamError("STREAM_NOT_OPEN")
        return self.slots[index]

    def close(self, slot: _Slot) -> None:
        slot.open = False
        if slot.kind == _CALL:
            self.open_calls -= 1

    def append(self, slot: _Slot, fragment: Any) -> None:
        if type(fragment) is not str:
            raise StreamError("STREAM_EVENT_MALFORMED")
        # surrogatepass: a lone surrogate becomes bytes the strict decoder refuses as not UTF-8.
        data = fragment.encode("utf-8", "surrogatepass")
        if len(data) > self.limits.fragment_bytes and not (slot.kind == _CALL and self.protocol.whole_arguments):
            raise StreamError("STREAM_FRAGMENT_TOO_LARGE")
        self.spent[slot.kind] += len(data)
        if self.spent[slot.kind] > self.budget[slot.kind]:
            raise StreamError(_OVER_BUDGET[slot.kind])
        slot.fragments.append(data)

    def finish(self, stop: Any) -> None:
        """The terminal event: the stop reason must fit the calls, and every slot be closed."""
        if type(stop) is not str:
            raise StreamError("STREAM_EVENT_MALFORMED")
        rule = self.protocol.stop_rules.get(stop, _UNLISTED_STOP)
        code = _STOP_VERDICTS.get((rule, bool(self.call_ids)))
        if code is not None:
            raise StreamError(code)
        if any(slot.open for slot in self.slots):
            raise StreamError("STREAM_INCOMPLETE")
        self.stop = stop
        self.phase = _ENDED


def _identifier(value: Any) -> str:
    if not is_identifier(value):
        raise StreamError("STREAM_ID_INVALID")
    return value


def _tool_name(value: Any) -> str:
    if type(value) is not str or TOOL_NAME_PATTERN.fullmatch(value) is None:
        raise StreamError("STREAM_NAME_INVALID")
    return value


def _index(event: Mapping[str, Any], key: str) -> int:
    value = event.get(key)
    if type(value) is not int or value < 0:
        raise StreamError("STREAM_EVENT_MALFORMED")
    return value


def _object(event: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = event.get(key)
    if type(value) is not dict:
        raise StreamError("STREAM_EVENT_MALFORMED")
    return value


def _same_text(value: Any, slot: _Slot) -> bool:
    return type(value) is str and value.encode("utf-8", "surrogatepass") == slot.data()


def _ignore(_state: _State, _event: Mapping[str, Any]) -> None:
    return None


def _provider_error(_state: _State, _event: Mapping[str, Any]) -> NoReturn:
    # The provider's own message is untrusted text: it is not carried on.
    raise StreamError("STREAM_PROVIDER_ERROR")


def _other_revision(_state: _State, _event: Mapping[str, Any]) -> NoReturn:
    raise StreamError("STREAM_REVISION_MISMATCH")


def _close_indexed(state: _State, event: Mapping[str, Any]) -> None:
    state.close(state.slot(_index(event, "index")))


def _indexed_delta(state: _State, event: Mapping[str, Any], *, fields: Mapping[tuple[str, Any], str]) -> None:
    # The delta's type must be the one its slot's kind takes; slots of other kinds drop theirs.
    slot = state.slot(_index(event, "index"))
    delta = _object(event, "delta")
    if slot.kind == _OTHER:
        return
    kind = delta.get("type")
    if type(kind) is not str:  # a list or an object here would be unhashable: refused first
        raise StreamError("STREAM_EVENT_MALFORMED")
    field = fields.get((slot.kind, kind))
    if field is None:
        raise StreamError("STREAM_INCONSISTENT")
    state.append(slot, delta.get(field))


def _decode_arguments(data: bytes, limits: Limits, *, empty_is_object: bool) -> dict[str, Any]:
    if not data and empty_is_object:
        return {}  # no fragment at all: the provider's own reading of empty input
    try:
        value = decode_strict_json(data, max_bytes=limits.argument_bytes, max_depth=limits.depth)
    except BoundaryError as refusal:
        raise StreamError("STREAM_ARGUMENTS_INVALID", detail=refusal.code) from None
    if type(value) is not dict:
        raise StreamError("STREAM_ARGUMENTS_NOT_OBJECT")
    return value


def _decode_text(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise StreamError("STREAM_EVENT_MALFORMED") from None


def _build_turn(state: _State) -> Turn:
    calls: list[ParsedCall] = []
    content: list[dict[str, Any]] = []
    for index, slot in enumerate(state.slots):
        if slot.kind == _CALL:
            arguments = _decode_arguments(slot.data(), state.limits,
                                          empty_is_object=state.protocol.empty_is_object)
            calls.append(ParsedCall(index, slot.call_id, slot.name, arguments))
            content.append({"type": "tool_use", "id": slot.call_id, "name": slot.name,
                            "input": json_copy(arguments)})
        elif slot.kind == _TEXT:
            text = _decode_text(slot.data())
            if text.strip():  # the Messages API refuses a text block of nothing but whitespace in a request
                content.append({"type": "text", "text": text})
    protocol = state.protocol
    return Turn(protocol.profile.adapter_revision, state.response_id, state.stop, tuple(calls),
                tuple(content) if protocol.echoes_content else ())


@dataclass(frozen=True, slots=True)
class _Rule:
    phase: str
    handle: Callable[[_State, dict[str, Any]], None]


@dataclass(frozen=True, slots=True)
class _Opening:
    """How a provider opens an item, block or step, and what a call looks like when it opens."""

    index_key: str
    item_key: str
    call_type: str
    call_id_key: str
    arguments_key: str
    empty_arguments: tuple[Any, ...]  # what a call may start with (None: the key is absent)
    item_id_key: str | None = None  # OpenAI keys deltas by the item's own id as well
    kinds: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))  # types with a kind of their own
    unlisted: str | None = _OTHER  # the kind of any other type; None refuses it
    refused: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))  # type -> its refusal code


def _open(state: _State, event: Mapping[str, Any], *, opening: _Opening) -> None:
    index = _index(event, opening.index_key)
    item = _object(event, opening.item_key)
    kind = item.get("type")
    if type(kind) is not str:
        raise StreamError("STREAM_EVENT_MALFORMED")
    if kind == opening.call_type:
        if item.get(opening.arguments_key) not in opening.empty_arguments:
            raise StreamError("STREAM_EVENT_MALFORMED")  # arguments arrive only through deltas
        item_id = None if opening.item_id_key is None else _identifier(item.get(opening.item_id_key))
        state.add_call(index, call_id=item.get(opening.call_id_key), name=item.get("name"), item_id=item_id)
        return
    refusal = opening.refused.get(kind)
    if refusal is not None:
        raise StreamError(refusal)
    slot_kind = opening.kinds.get(kind, opening.unlisted)
    if slot_kind is None:
        raise StreamError("STREAM_BLOCK_UNSUPPORTED")
    slot = state.add_slot(index, slot_kind)
    slot.item_type = kind
    if slot_kind == _TEXT:
        state.append(slot, item.get("text"))


# ============================================================================================
# 5. OpenAI Responses events (openai-responses-v1)
# ============================================================================================
# response.created, then per output item: output_item.added, for a function call its arguments'
# delta events and one done event, output_item.done; finally response.completed. Every event
# carries a sequence_number, which must only go up. Deltas are keyed by output_index and item_id.


def _openai_sequence(state: _State, event: Mapping[str, Any]) -> None:
    number = event.get("sequence_number")
    if type(number) is not int or number < 0:
        raise StreamError("STREAM_EVENT_MALFORMED")
    if number <= state.sequence:
        raise StreamError("STREAM_SEQUENCE_INVALID")
    state.sequence = number


def _openai_created(state: _State, event: Mapping[str, Any]) -> None:
    state.start(_object(event, "response").get("id"))


# Output items: a function call is answered; an item the provider ran itself (or a message,
# reasoning) needs no answer and is tracked only as open or closed; an item the client must run
# (a shell, a computer, a patch, a custom tool, an MCP approval) has no answer this layer can give,
# so the turn is refused rather than left with a call unanswered. Any other type is refused too:
# a new type might be one the client must answer.
OPENAI_SILENT_ITEMS: Final = frozenset({
    "message", "reasoning", "compaction",
    "web_search_call", "file_search_call", "code_interpreter_call", "image_generation_call",
    "mcp_call", "mcp_list_tools",
})
OPENAI_CLIENT_ITEMS: Final = frozenset({
    "custom_tool_call", "computer_call", "local_shell_call", "shell_call", "apply_patch_call",
    "mcp_approval_request",
})
_OPENAI_OPENING: Final = _Opening(
    "output_index", "item", "function_call", "call_id", "arguments", ("",), item_id_key="id",
    kinds=MappingProxyType(dict.fromkeys(OPENAI_SILENT_ITEMS, _OTHER)), unlisted=None,
    refused=MappingProxyType(dict.fromkeys(OPENAI_CLIENT_ITEMS, "STREAM_CALL_UNANSWERABLE")))


def _openai_added(state: _State, event: Mapping[str, Any]) -> None:
    # An "empty added" event (no item at all, which OpenAI's own stream helper skips) opens
    # nothing the stream can use: its index becomes a gap, which the final output must explain.
    if event.get("item") is None:
        gap = state.add_slot(_index(event, "output_index"), _GAP)
        gap.open = False
        return
    _open(state, event, opening=_OPENAI_OPENING)


def _openai_call(state: _State, event: Mapping[str, Any]) -> _Slot:
    slot = state.slot(_index(event, "output_index"))
    if slot.kind != _CALL or event.get("item_id") != slot.item_id:
        raise StreamError("STREAM_NOT_OPEN")
    if slot.done:
        raise StreamError("STREAM_OUT_OF_ORDER")
    return slot


def _openai_arguments_delta(state: _State, event: Mapping[str, Any]) -> None:
    state.append(_openai_call(state, event), event.get("delta"))


def _openai_arguments_done(state: _State, event: Mapping[str, Any]) -> None:
    slot = _openai_call(state, event)
    if not _same_text(event.get("arguments"), slot) or event.get("name", slot.name) != slot.name:
        raise StreamError("STREAM_INCONSISTENT")
    slot.done = True


def _openai_matches(item: Any, slot: _Slot) -> bool:
    """Whether a finished output item says what the stream said about its slot."""
    if type(item) is not dict:
        raise StreamError("STREAM_EVENT_MALFORMED")
    kind = item.get("type")
    if slot.kind == _GAP:  # never streamed: only an item that needs no answer may stand there
        return type(kind) is str and kind in OPENAI_SILENT_ITEMS
    if slot.kind != _CALL:
        return kind == slot.item_type
    return ((item.get("type"), item.get("id"), item.get("call_id"), item.get("name"))
            == ("function_call", slot.item_id, slot.call_id, slot.name)) and _same_text(item.get("arguments"), slot)


def _openai_item_done(state: _State, event: Mapping[str, Any]) -> None:
    slot = state.slot(_index(event, "output_index"))
    item = _object(event, "item")
    if slot.kind == _CALL:
        if item.get("status") == "incomplete":
            raise StreamError("STREAM_TRUNCATED")  # the call was cut where the output stopped
        if not slot.done:
            raise StreamError("STREAM_OUT_OF_ORDER")
    if not _openai_matches(item, slot):
        raise StreamError("STREAM_INCONSISTENT")
    state.close(slot)


def _openai_terminal(stop: str) -> Callable[[_State, dict[str, Any]], None]:
    def handle(state: _State, event: Mapping[str, Any]) -> None:
        response = _object(event, "response")
        if response.get("id") != state.response_id or response.get("status", stop) != stop:
            raise StreamError("STREAM_INCONSISTENT")
        state.finish(stop)
        # The final response lists every output item again: it must agree, item by item. After a
        # skipped index it is required: only it can show that no call hid in the gap.
        if "output" in response or any(slot.kind == _GAP for slot in state.slots):
            output = response.get("output")
            if type(output) is not list or len(output) != len(state.slots) or not all(
                    _openai_matches(item, slot) for item, slot in zip(output, state.slots)):
                raise StreamError("STREAM_INCONSISTENT")
    return handle


def _openai_content(state: _State, event: Mapping[str, Any]) -> None:
    # Content and progress of items that are not calls: not read, but one that names a call's
    # output index would be a second channel into that call, so it is refused. An event that
    # repeats the response (queued, in_progress) must name this one: another id mid-stream is
    # two streams spliced together.
    if "response" in event and _object(event, "response").get("id") != state.response_id:
        raise StreamError("STREAM_INCONSISTENT")
    index = event.get("output_index")
    if type(index) is int and 0 <= index < len(state.slots) and state.slots[index].kind == _CALL:
        raise StreamError("STREAM_INCONSISTENT")


# Content of items other than function calls, and progress of the provider's own tools: known,
# and not needed to answer the calls.
_OPENAI_CONTENT_EVENTS: Final = (
    "response.in_progress", "response.queued",
    "response.content_part.added", "response.content_part.done",
    "response.output_text.delta", "response.output_text.done", "response.output_text.annotation.added",
    "response.refusal.delta", "response.refusal.done",
    "response.reasoning_summary_part.added", "response.reasoning_summary_part.done",
    "response.reasoning_summary_text.delta", "response.reasoning_summary_text.done",
    "response.reasoning_text.delta", "response.reasoning_text.done",
    "response.web_search_call.in_progress", "response.web_search_call.searching",
    "response.web_search_call.completed",
    "response.file_search_call.in_progress", "response.file_search_call.searching",
    "response.file_search_call.completed",
    "response.code_interpreter_call.in_progress", "response.code_interpreter_call.interpreting",
    "response.code_interpreter_call.completed",
    "response.code_interpreter_call_code.delta", "response.code_interpreter_call_code.done",
    "response.image_generation_call.in_progress", "response.image_generation_call.generating",
    "response.image_generation_call.partial_image", "response.image_generation_call.completed",
    "response.mcp_call.in_progress", "response.mcp_call.completed", "response.mcp_call.failed",
    "response.mcp_call_arguments.delta", "response.mcp_call_arguments.done",
    "response.mcp_list_tools.in_progress", "response.mcp_list_tools.completed",
    "response.mcp_list_tools.failed",
)

OPENAI_RULES: Final[Mapping[str, _Rule]] = MappingProxyType({
    "response.created": _Rule(_BEFORE, _openai_created),
    "response.output_item.added": _Rule(_OPEN, _openai_added),
    "response.function_call_arguments.delta": _Rule(_OPEN, _openai_arguments_delta),
    "response.function_call_arguments.done": _Rule(_OPEN, _openai_arguments_done),
    "response.output_item.done": _Rule(_OPEN, _openai_item_done),
    "response.completed": _Rule(_OPEN, _openai_terminal("completed")),
    "response.incomplete": _Rule(_OPEN, _openai_terminal("incomplete")),
    "response.failed": _Rule(_ANY, _provider_error),
    "error": _Rule(_ANY, _provider_error),
    **{kind: _Rule(_OPEN, _openai_content) for kind in _OPENAI_CONTENT_EVENTS},
})
OPENAI_STOPS: Final = MappingProxyType({"completed": "any", "incomplete": "cut"})

# ============================================================================================
# 6. Anthropic Messages events (anthropic-messages-v1)
# ============================================================================================
# message_start, then per content block: content_block_start, content_block_delta (text_delta
# for text, input_json_delta for tool_use), content_block_stop; message_delta with the stop
# reason; message_stop. ping may come anywhere. The assistant turn is echoed back, so every
# block must be one this layer can echo: text and tool_use.


def _anthropic_message_start(state: _State, event: Mapping[str, Any]) -> None:
    # Blocks arrive only through content_block events. The SDK starts its message from this
    # content and indexes every later block after it, so a block here would be one this parser
    # never saw (a call, or a shift of every index): refused, never skipped.
    message = _object(event, "message")
    if message.get("content", []) != []:
        raise StreamError("STREAM_EVENT_MALFORMED")
    state.start(message.get("id"))


# Only text and tool_use blocks can be echoed; thinking, server tool and other blocks are refused.
_ANTHROPIC_OPENING: Final = _Opening("index", "content_block", "tool_use", "id", "input", ({},),
                                     kinds=MappingProxyType({"text": _TEXT}), unlisted=None)


def _anthropic_message_delta(state: _State, event: Mapping[str, Any]) -> None:
    reason = _object(event, "delta").get("stop_reason")
    if type(reason) is not str:
        raise StreamError("STREAM_EVENT_MALFORMED")
    state.stop = reason
    state.phase = _CLOSING


def _anthropic_message_stop(state: _State, _event: Mapping[str, Any]) -> None:
    state.finish(state.stop)


ANTHROPIC_RULES: Final[Mapping[str, _Rule]] = MappingProxyType({
    "message_start": _Rule(_BEFORE, _anthropic_message_start),
    "content_block_start": _Rule(_OPEN, functools.partial(_open, opening=_ANTHROPIC_OPENING)),
    "content_block_delta": _Rule(_OPEN, functools.partial(_indexed_delta, fields=MappingProxyType({
        (_TEXT, "text_delta"): "text", (_CALL, "input_json_delta"): "partial_json"}))),
    "content_block_stop": _Rule(_OPEN, _close_indexed),
    "message_delta": _Rule(_OPEN, _anthropic_message_delta),
    "message_stop": _Rule(_CLOSING, _anthropic_message_stop),
    "ping": _Rule(_ANY, _ignore),
    "error": _Rule(_ANY, _provider_error),
})
ANTHROPIC_STOPS: Final = MappingProxyType({
    "tool_use": "calls", "max_tokens": "cut", "model_context_window_exceeded": "cut",
    "end_turn": "no_calls", "stop_sequence": "no_calls", "pause_turn": "no_calls", "refusal": "no_calls",
})

# ============================================================================================
# 7. Gemini Interactions events (gemini-interactions-v1)
# ============================================================================================
# interaction.created, interaction.status_update, then per step: step.start, step.delta (for a
# function call {"type": "arguments_delta", "arguments": "<partial JSON>"}), step.stop; finally
# interaction.completed, whose status says whether the turn waits on calls. The pre-May-2026
# revision streamed `content.*` events and `outputs`: that is another revision, refused here.
#
# Two numberings of steps are in use. Google's documented streams count the model's steps from 0
# and list nothing at the end. Google's SDK counts the user's input too: the model's first step
# streams at index 1, and interaction.completed lists every step, the user_input first. The second
# is accepted only where that list shows it: the indexes skipped before the first step must hold
# user_input steps there, never a call that did not stream.

GEMINI_LEGACY_EVENTS: Final = ("content.start", "content.delta", "content.stop")


def _gemini_interaction(event: Mapping[str, Any]) -> dict[str, Any]:
    interaction = _object(event, "interaction")
    if "outputs" in interaction:
        raise StreamError("STREAM_REVISION_MISMATCH")
    return interaction


def _gemini_created(state: _State, event: Mapping[str, Any]) -> None:
    state.start(_gemini_interaction(event).get("id"))


# Steps: a function call is answered; the model's own output, its thoughts, the user's input and
# the tools the provider runs itself (each a call step and its result step) need no answer and are
# tracked only as open or closed (the step types of google-genai 3.6.1). Any other type is refused,
# as OpenAI's are: a new type might be one the client must answer, and a streamed function_result
# would be a call the server answered itself, which this layer must not run again.
GEMINI_SILENT_STEPS: Final = frozenset({
    "model_output", "thought", "user_input",
    *(f"{tool}_{part}" for tool in ("code_execution", "file_search", "google_maps", "google_search",
                                    "mcp_server_tool", "processing", "retrieval", "tool_search", "url_context")
      for part in ("call", "result")),
})
_GEMINI_OPENING: Final = _Opening("index", "step", "function_call", "id", "arguments", (None, {}),
                                  kinds=MappingProxyType(dict.fromkeys(GEMINI_SILENT_STEPS, _OTHER)), unlisted=None)


def _gemini_status_update(state: _State, event: Mapping[str, Any]) -> None:
    # Not read, but one naming another interaction mid-stream is two streams spliced together.
    if event.get("interaction_id", state.response_id) != state.response_id:
        raise StreamError("STREAM_INCONSISTENT")


GEMINI_INPUT_STEP: Final = "user_input"  # the only step that may stand at an index skipped before the first


def _gemini_step_matches(step: Any, slot: _Slot, limits: Limits) -> bool:
    """Whether a step the final interaction lists says what the stream said about its slot."""
    if type(step) is not dict:
        raise StreamError("STREAM_EVENT_MALFORMED")
    if slot.kind == _GAP:  # never streamed: only the user's input may stand there
        return step.get("type") == GEMINI_INPUT_STEP
    if slot.kind != _CALL:
        return step.get("type") == slot.item_type
    if (step.get("type"), step.get("id"), step.get("name")) != ("function_call", slot.call_id, slot.name):
        return False
    if "arguments" not in step:
        return True
    # Compared as canonical JSON text, where 1, 1.0 and true differ (under == they are equal).
    arguments = _decode_arguments(slot.data(), limits, empty_is_object=True)
    return _json_text(step["arguments"]) == _json_text(arguments)


def _json_text(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _gemini_completed(state: _State, event: Mapping[str, Any]) -> None:
    interaction = _gemini_interaction(event)
    if interaction.get("id") != state.response_id:
        raise StreamError("STREAM_INCONSISTENT")
    state.finish(interaction.get("status"))
    # The final interaction need not list its steps; when it does, they must be the streamed ones,
    # step by step (after the user's input where the indexes counted it), so that a call listed
    # there and never streamed is not dropped. Indexes skipped before the first step need that
    # list: without it, nothing shows that no call stood there.
    if "steps" in interaction:
        steps = interaction["steps"]
        if type(steps) is not list or len(steps) != len(state.slots) or not all(
                _gemini_step_matches(step, slot, state.limits) for step, slot in zip(steps, state.slots)):
            raise StreamError("STREAM_INCONSISTENT")
    elif state.slots and state.slots[0].kind == _GAP:
        raise StreamError("STREAM_OUT_OF_ORDER")


GEMINI_RULES: Final[Mapping[str, _Rule]] = MappingProxyType({
    "interaction.created": _Rule(_BEFORE, _gemini_created),
    "interaction.status_update": _Rule(_OPEN, _gemini_status_update),
    "step.start": _Rule(_OPEN, functools.partial(_open, opening=_GEMINI_OPENING)),
    "step.delta": _Rule(_OPEN, functools.partial(_indexed_delta, fields=MappingProxyType({
        (_CALL, "arguments_delta"): "arguments"}))),
    "step.stop": _Rule(_OPEN, _close_indexed),
    "interaction.completed": _Rule(_OPEN, _gemini_completed),
    "error": _Rule(_ANY, _provider_error),
    **{kind: _Rule(_ANY, _other_revision) for kind in GEMINI_LEGACY_EVENTS},
})
# requires_continuation and budget_exceeded stop the turn at a limit, like incomplete: calls
# in such a turn are refused as cut, and a turn without calls keeps its status as its stop, so
# the host sees that the turn is unfinished (nothing is dispatched either way).
GEMINI_STOPS: Final = MappingProxyType({
    "requires_action": "calls", "completed": "no_calls", "incomplete": "cut",
    "requires_continuation": "cut", "budget_exceeded": "cut",
    "failed": "failed", "cancelled": "failed",
})

# ============================================================================================
# 8. Tool declarations
# ============================================================================================
# Generated from the compiled contracts of the registry (ToolSpec.input_schema(), the schema the
# compiled check admits exactly), never written by hand, so the declared schema and the enforced
# contract cannot drift apart (the tests check both directions value by value, for every kind).
#
# Strict modes. OpenAI's strict function tools require every property in `required`; both
# OpenAI's and Anthropic's strict modes leave out length, numeric and count keywords (Anthropic
# rejects them; this layer uses the one subset both accept). A tool is declared strict only when
# its strict form admits exactly what its contract admits: every property of every object
# required, every string bounded by its enum or by its pattern's own length range
# (tool_dispatcher.pattern_length_bounds), every integer bounded only by its enum or by the
# portable domain, no array (the host bounds every array's length). Any other tool is declared
# non-strict, with its whole schema: the provider may then send what the contract refuses, and
# the boundary refuses it with INVALID_ARGUMENTS. An optional field is never rewritten as a
# required nullable one: the model would send null where the contract wants the field absent.

_STRICT_DROPPED: Final = frozenset({"minLength", "maxLength", "minimum", "maximum", "exclusiveMinimum",
                                    "exclusiveMaximum", "multipleOf", "minItems", "maxItems", "uniqueItems"})


def _exact_string(rule: Any, _rules: Sequence[Any]) -> bool:
    if rule.choices is not None:
        return all(rule.min_length <= len(choice) <= rule.max_length for choice in rule.choices)
    if rule.pattern is None:
        return False
    low, high = tool_dispatcher.pattern_length_bounds(rule.pattern)
    return high is not None and rule.min_length <= low and high <= rule.max_length


def _exact_integer(rule: Any, _rules: Sequence[Any]) -> bool:
    def admitted(value: int) -> bool:
        return rule.minimum <= value <= rule.maximum and (rule.multiple_of is None or value % rule.multiple_of == 0)

    if rule.choices is not None:
        return all(admitted(choice) for choice in rule.choices)
    return (rule.minimum, rule.maximum, rule.multiple_of) == (-MAX_SAFE_INTEGER, MAX_SAFE_INTEGER, None)


def _exact_number(rule: Any, _rules: Sequence[Any]) -> bool:
    def admitted(value: int | float) -> bool:
        above = rule.minimum is None or value > rule.minimum or (value == rule.minimum and not rule.minimum_exclusive)
        below = rule.maximum is None or value < rule.maximum or (value == rule.maximum and not rule.maximum_exclusive)
        return above and below and (rule.multiple_of is None or Fraction(value) % Fraction(rule.multiple_of) == 0)

    if rule.choices is not None:
        return all(admitted(choice) for choice in rule.choices)
    return (rule.minimum, rule.maximum, rule.multiple_of) == (None, None, None)


def _exact_object(rule: Any, _rules: Sequence[Any]) -> bool:
    return rule.required == frozenset(name for name, _ in rule.properties)


_STRICT_EXACT: Final[Mapping[type, Callable[[Any, Sequence[Any]], bool]]] = MappingProxyType({
    StringRule: _exact_string,
    IntegerRule: _exact_integer,
    NumberRule: _exact_number,
    BooleanRule: lambda _rule, _rules: True,
    ObjectRule: _exact_object,
    ArrayRule: lambda _rule, _rules: False,
    MapRule: lambda _rule, _rules: False,  # strict modes require every object closed
    NullableRule: lambda _rule, _rules: True,
    UnionRule: lambda _rule, _rules: True,  # emitted as anyOf, which strict modes keep; its branches are rules too
})


def strict_exact(spec: ToolSpec) -> bool:
    """Whether the strict form of the tool's input contract admits exactly what the contract does."""
    rules = spec.input_contract.rules
    return all(_STRICT_EXACT[type(rule)](rule, rules) for rule in rules)


def _strict_form(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema without _STRICT_DROPPED, at every schema level (never inside a properties table's
    names); iterative, over a schema whose depth the compiler bounded."""
    stack = [schema]
    while stack:
        node = stack.pop()
        for keyword in _STRICT_DROPPED & node.keys():
            del node[keyword]
        stack.extend(node.get("properties", {}).values())
        stack.extend(node.get("$defs", {}).values())
        stack.extend(node.get("anyOf", ()))
        if "items" in node:
            stack.append(node["items"])
    return schema


def _parameters(spec: ToolSpec, strict: bool) -> dict[str, Any]:
    schema = spec.input_schema()  # a fresh value on every call
    return _strict_form(schema) if strict else schema


def _openai_tool(spec: ToolSpec) -> dict[str, Any]:
    strict = strict_exact(spec)
    return {"type": "function", "name": spec.name, "description": spec.description,
            "parameters": _parameters(spec, strict), "strict": strict}


def _anthropic_tool(spec: ToolSpec) -> dict[str, Any]:
    strict = strict_exact(spec)
    return {"name": spec.name, "description": spec.description,
            "input_schema": _parameters(spec, strict), "strict": strict}


def _gemini_tool(spec: ToolSpec) -> dict[str, Any]:
    return {"type": "function", "name": spec.name, "description": spec.description,
            "parameters": _parameters(spec, False)}


# ============================================================================================
# 9. Continuation payloads
# ============================================================================================
# Each item comes from the dispatcher's own adapter for that provider; these functions only
# put the items where the provider expects them.


def _openai_continuation(turn: Turn, items: Sequence[dict[str, Any]]) -> dict[str, Any]:
    return {"previous_response_id": turn.response_id, "input": list(items)}


def _anthropic_continuation(turn: Turn, items: Sequence[dict[str, Any]]) -> dict[str, Any]:
    # The assistant turn as it streamed, then one user message whose content starts with a
    # tool_result for every tool_use, all in that one message. Earlier messages are the host's.
    return {"messages": [
        {"role": "assistant", "content": [json_copy(dict(block)) for block in turn.content]},
        {"role": "user", "content": list(items)},
    ]}


def _gemini_continuation(turn: Turn, items: Sequence[dict[str, Any]]) -> dict[str, Any]:
    # The adapter shapes one continuation per result; one turn sends them as one input.
    if any(item["previous_interaction_id"] != turn.response_id for item in items):
        raise StreamError("STREAM_CONTINUATION_REFUSED")
    return {"previous_interaction_id": turn.response_id,
            "input": [step for item in items for step in item["input"]]}


# ============================================================================================
# 10. Synthetic streams (tests and benchmarks)
# ============================================================================================
# Well-formed streams built from (call_id, name, arguments text): each call's arguments are cut
# into fragments of `fragment_chars` characters, so no character is ever split. One call after
# another, never interleaved (the fixtures hold the interleaved streams).


def _chunks(text: str, size: int) -> list[str]:
    return [text[start:start + size] for start in range(0, len(text), size)]


def _openai_events(response_id: str, calls: Sequence[tuple[str, str, str]], size: int) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = [{"type": "response.created",
                                     "response": {"id": response_id, "status": "in_progress"}}]
    output = []
    for index, (call_id, name, text) in enumerate(calls):
        item = {"type": "function_call", "id": f"fc_{index}", "call_id": call_id, "name": name,
                "arguments": "", "status": "in_progress"}
        keys = {"item_id": item["id"], "output_index": index}
        events.append({"type": "response.output_item.added", "output_index": index, "item": item})
        events.extend({"type": "response.function_call_arguments.delta", **keys, "delta": chunk}
                      for chunk in _chunks(text, size))
        events.append({"type": "response.function_call_arguments.done", **keys, "name": name, "arguments": text})
        done = {**item, "arguments": text, "status": "completed"}
        events.append({"type": "response.output_item.done", "output_index": index, "item": done})
        output.append(done)
    events.append({"type": "response.completed",
                   "response": {"id": response_id, "status": "completed", "output": output}})
    return [{**event, "sequence_number": number} for number, event in enumerate(events)]


def _anthropic_events(response_id: str, calls: Sequence[tuple[str, str, str]], size: int) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = [{"type": "message_start", "message": {
        "id": response_id, "type": "message", "role": "assistant", "content": [], "stop_reason": None}}]
    for index, (call_id, name, text) in enumerate(calls):
        events.append({"type": "content_block_start", "index": index,
                       "content_block": {"type": "tool_use", "id": call_id, "name": name, "input": {}}})
        events.extend({"type": "content_block_delta", "index": index,
                       "delta": {"type": "input_json_delta", "partial_json": chunk}} for chunk in _chunks(text, size))
        events.append({"type": "content_block_stop", "index": index})
    reason = "tool_use" if calls else "end_turn"
    events.append({"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": None}})
    events.append({"type": "message_stop"})
    return events


def _gemini_events(response_id: str, calls: Sequence[tuple[str, str, str]], size: int) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = [{"event_type": "interaction.created",
                                     "interaction": {"id": response_id, "status": "in_progress"}}]
    for index, (call_id, name, text) in enumerate(calls):
        events.append({"event_type": "step.start", "index": index,
                       "step": {"type": "function_call", "id": call_id, "name": name}})
        events.extend({"event_type": "step.delta", "index": index,
                       "delta": {"type": "arguments_delta", "arguments": chunk}} for chunk in _chunks(text, size))
        events.append({"event_type": "step.stop", "index": index})
    status = "requires_action" if calls else "completed"
    events.append({"event_type": "interaction.completed", "interaction": {"id": response_id, "status": status}})
    return events


def build_events(provider: str, calls: Sequence[tuple[str, str, str]], *, response_id: str = "resp_synthetic",
                 fragment_chars: int = 8) -> list[dict[str, Any]]:
    """A well-formed stream of one provider holding these (call_id, name, arguments text) calls."""
    return protocol_for(provider).build(response_id, calls, fragment_chars)


def synthetic_stream(provider: str, event_count: int) -> list[dict[str, Any]]:
    """A well-formed stream of exactly `event_count` events: one call, one character per delta."""
    overhead = len(build_events(provider, [("call_synthetic", "get_order", "")]))
    fragments = event_count - overhead
    if fragments < 0:
        raise ValueError("event_count is below the protocol's fixed events")
    if fragments >= 2:  # an object padded with insignificant whitespace, one character a delta
        text, size = "{" + " " * (fragments - 2) + "}", 1
    else:  # one delta holding "{}", or none at all
        text, size = "{}" * fragments, 2
    return build_events(provider, [("call_synthetic", "get_order", text)], fragment_chars=size)


def render_sse(provider: str, events: Sequence[Mapping[str, Any]]) -> str:
    """The SSE text of a stream: an `event:` line naming each event's type, then its data."""
    key = protocol_for(provider).type_key
    return "".join(f"event: {event[key]}\ndata: {json.dumps(event, separators=(',', ':'))}\n\n"
                   for event in events)


# ============================================================================================
# 11. The provider registry
# ============================================================================================
# One closed table: a provider's parser rules, stop rules, declaration, adapter and
# continuation live together, so a provider revision is one entry.


@dataclass(frozen=True, slots=True)
class Protocol:
    name: str
    profile: ProviderProfile
    type_key: str  # the event field naming its type
    rules: Mapping[str, _Rule]
    stop_rules: Mapping[str, str]
    check_event: Callable[[_State, dict[str, Any]], None]  # run on every event before its rule
    echoes_content: bool  # whether the continuation echoes the assistant content
    index_gaps: str  # where an index may be skipped: _GAPS_NONE, _GAPS_ANYWHERE or _GAPS_LEADING
    empty_is_object: bool  # whether a call with no argument fragment at all reads as {}
    done_frame: str | None  # the SSE data that ends the stream after its terminal event, if any
    # Whether a call's arguments may come whole, in one delta (Gemini's do): its argument deltas are
    # then bounded by the turn's argument budget, not by the fragment limit meant for token deltas.
    whole_arguments: bool
    build: Callable[[str, Sequence[tuple[str, str, str]], int], list[dict[str, Any]]]
    declare: Callable[[ToolSpec], dict[str, Any]]
    adapt: Callable[..., dict[str, Any]]
    continue_turn: Callable[[Turn, Sequence[dict[str, Any]]], dict[str, Any]]


PROTOCOLS: Final[Mapping[str, Protocol]] = MappingProxyType({
    protocol.name: protocol
    for protocol in (
        Protocol("openai", PROVIDER_PROFILES["openai-responses-v1"], "type", OPENAI_RULES, OPENAI_STOPS,
                 _openai_sequence, False, _GAPS_ANYWHERE, False, None, False, _openai_events, _openai_tool,
                 tool_dispatcher.to_openai_responses, _openai_continuation),
        Protocol("anthropic", PROVIDER_PROFILES["anthropic-messages-v1"], "type", ANTHROPIC_RULES,
                 ANTHROPIC_STOPS, _ignore, True, _GAPS_NONE, True, None, False, _anthropic_events, _anthropic_tool,
                 tool_dispatcher.to_anthropic_messages, _anthropic_continuation),
        Protocol("gemini", PROVIDER_PROFILES["gemini-interactions-v1"], "event_type", GEMINI_RULES,
                 GEMINI_STOPS, _ignore, False, _GAPS_LEADING, True, "[DONE]", True, _gemini_events, _gemini_tool,
                 tool_dispatcher.to_gemini_interactions, _gemini_continuation),
    )
})


_BY_REVISION: Final[Mapping[str, Protocol]] = MappingProxyType(
    {protocol.profile.adapter_revision: protocol for protocol in PROTOCOLS.values()})


def protocol_for(provider: Any) -> Protocol:
    """The protocol of a provider name ("openai", ...) or of an adapter revision."""
    protocol = (PROTOCOLS.get(provider) or _BY_REVISION.get(provider)) if type(provider) is str else None
    if protocol is None:
        raise StreamError("STREAM_PROVIDER_UNKNOWN")
    return protocol


def declare_tools(provider: str, *, registry: Mapping[str, ToolSpec] = REGISTRY) -> list[dict[str, Any]]:
    """The provider's tool declarations for every registered tool, in registry order.

    STREAM_NAME_INVALID for a registry that holds a name outside the providers' one alphabet
    (TOOL_NAME_PATTERN: a contract also takes MCP's dotted names): OpenAI and Anthropic refuse it
    in a declaration, and the parser refuses a call that comes back under it."""
    protocol = protocol_for(provider)
    for spec in registry.values():
        _tool_name(spec.name)
    return [protocol.declare(spec) for spec in registry.values()]


# ============================================================================================
# 12. Parsing: events and SSE text
# ============================================================================================


def parse_stream(provider: str, events: Sequence[Any], *, max_events: int = MAX_EVENTS,
                 max_calls: int = MAX_CALLS, max_fragment_bytes: int = MAX_FRAGMENT_BYTES,
                 max_argument_bytes: int = MAX_ARGUMENT_BYTES, max_text_bytes: int = MAX_TEXT_BYTES,
                 max_depth: int = MAX_ARGUMENT_DEPTH) -> Turn:
    """Parse one provider stream (a list of decoded events) into a complete Turn, or raise.

    Linear in the number of events and the bytes of the fragments. Raises StreamError, whose
    `event` names the position of the offending event when there is one.
    """
    protocol = protocol_for(provider)
    if type(events) is not list and type(events) is not tuple:
        raise StreamError("STREAM_EVENTS_INVALID")
    if len(events) > max_events:
        raise StreamError("STREAM_TOO_MANY_EVENTS")
    state = _State(protocol, Limits(max_events, max_calls, max_fragment_bytes, max_argument_bytes,
                                    max_text_bytes, max_depth))
    for position, event in enumerate(events):
        try:
            _step(state, event)
        except StreamError as error:
            raise StreamError(error.code, event=position, detail=error.detail) from None
    if state.phase != _ENDED:
        raise StreamError("STREAM_INCOMPLETE")
    return _build_turn(state)


def _step(state: _State, event: Any) -> None:
    protocol = state.protocol
    if type(event) is not dict or type(event.get(protocol.type_key)) is not str:
        raise StreamError("STREAM_EVENT_MALFORMED")
    if state.phase == _ENDED:
        raise StreamError("STREAM_OUT_OF_ORDER")
    protocol.check_event(state, event)
    rule = protocol.rules.get(event[protocol.type_key])
    if rule is None:
        if state.open_calls:
            raise StreamError("STREAM_UNKNOWN_EVENT")
        return
    if rule.phase != _ANY and rule.phase != state.phase:
        raise StreamError("STREAM_OUT_OF_ORDER")
    rule.handle(state, event)


def split_sse(data: bytes | str, *, max_bytes: int = MAX_SSE_BYTES, max_event_bytes: int = MAX_SSE_EVENT_BYTES,
              max_events: int = MAX_EVENTS, done_frame: str | None = None) -> list[tuple[str | None, Any]]:
    """Split SSE text into (event name or None, decoded data) pairs, as the SSE spec reads it.

    Data lines of one event are joined by newlines; `id:`, `retry:`, comments and unknown fields
    are ignored; an event with no data line dispatches nothing; an event not ended by a blank
    line when the text ends is dropped, as the spec says, so a cut-off stream loses it whole (the
    unfinished last line is never decoded, even cut inside a character); `event:` with no value
    is no name, and so is `event: message`, the default type named.
    Each event's data is the provider's envelope, decoded under ENVELOPE_JSON (floats, nulls,
    long counters), bounded in bytes and depth. An event whose data is exactly `done_frame`
    (Gemini's `[DONE]`) ends the text: it is not returned, and no event may follow it.
    """
    if type(data) is str:
        data = data.encode("utf-8", "surrogatepass")
    if type(data) is not bytes:
        raise StreamError("STREAM_SSE_INVALID")
    if len(data) > max_bytes:
        raise StreamError("STREAM_SSE_TOO_LARGE")
    # The piece after the last line break is not a line yet, and the SSE rules drop it whatever it
    # holds: so it is never decoded, and a cut inside a multi-byte character is a cut like any other.
    # (A line break is one ASCII byte, never part of a multi-byte character.)
    finished = max(data.rfind(b"\n"), data.rfind(b"\r")) + 1
    try:
        text = data[:finished].decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError:
        raise StreamError("STREAM_SSE_INVALID", detail="JSON_NOT_UTF8") from None
    pairs: list[tuple[str | None, Any]] = []
    name: str | None = None
    lines: list[str] = []
    size = 0
    done = False
    for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")[:-1]:
        if not line:
            if lines:
                payload = "\n".join(lines)
                if done:
                    raise StreamError("STREAM_OUT_OF_ORDER", event=len(pairs))
                if payload == done_frame:
                    done = True
                else:
                    if len(pairs) >= max_events:
                        raise StreamError("STREAM_TOO_MANY_EVENTS")
                    pairs.append((name, _sse_payload(payload, max_event_bytes, len(pairs))))
            name, lines, size = None, [], 0
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "data":
            size += len(value) + 1
            if size > max_event_bytes + 1:  # characters never outnumber bytes: an early, safe cut
                raise StreamError("STREAM_SSE_TOO_LARGE", event=len(pairs))
            lines.append(value)
        elif field == "event":
            # An empty type, or the default type named, is as if no event line came (the SSE rules
            # dispatch both as "message"): the data's own type decides, as for an unnamed event.
            name = None if value in ("", SSE_DEFAULT_EVENT) else value
    return pairs


def _sse_payload(text: str, max_bytes: int, position: int) -> Any:
    try:
        return decode_strict_json(text.encode("utf-8"), max_bytes=max_bytes, max_depth=MAX_SSE_EVENT_DEPTH,
                                  policy=ENVELOPE_JSON)
    except BoundaryError as refusal:
        code = "STREAM_SSE_TOO_LARGE" if refusal.code == "JSON_TOO_LARGE" else "STREAM_SSE_INVALID"
        raise StreamError(code, event=position, detail=refusal.code) from None


def parse_sse(provider: str, data: bytes | str, *, max_bytes: int = MAX_SSE_BYTES,
              max_event_bytes: int = MAX_SSE_EVENT_BYTES, **limits: int) -> Turn:
    """Split raw SSE text and parse its events; an `event:` name must agree with the data's type."""
    protocol = protocol_for(provider)
    pairs = split_sse(data, max_bytes=max_bytes, max_event_bytes=max_event_bytes,
                      max_events=limits.get("max_events", MAX_EVENTS), done_frame=protocol.done_frame)
    for position, (name, payload) in enumerate(pairs):
        if name is not None and type(payload) is dict and payload.get(protocol.type_key) != name:
            raise StreamError("STREAM_SSE_INVALID", event=position)
    return parse_stream(provider, [payload for _, payload in pairs], **limits)


# ============================================================================================
# 13. Host binding, dispatch and the audit guard
# ============================================================================================
# The stream supplies the provider's ids and the model's proposal; everything else comes from
# the Host. Operation id and idempotency key are derived by the host from its own session and
# the provider call identity: the same provider call processed twice keeps its key (so it is
# answered from the record, never run twice), and the model can choose neither.


@dataclass(frozen=True, slots=True)
class Host:
    """What the trusted host supplies for a turn; nothing here is read from the stream."""

    principal: Principal
    now: int
    session: str  # the host's own name for this conversation, part of every derived key
    approver: str | None = None  # the person whose approvals `approved` records
    approved: tuple[tuple[str, Mapping[str, Any]], ...] = ()  # (tool, exact arguments) approved


@dataclass(frozen=True, slots=True)
class TurnRun:
    turn: Turn
    contexts: tuple[CallContext, ...]
    packages: tuple[dict[str, Any], ...]  # verified, in call order
    payload: dict[str, Any] | None  # None when the turn has no call to answer

    def results(self) -> list[dict[str, Any]]:
        rows = []
        for context, package in zip(self.contexts, self.packages):
            result = package["model_result"]
            rows.append({"call_id": context.call_id, "status": result["status"],
                         "error_code": result["error"]["code"] if "error" in result else None,
                         "outcome": result["outcome"], "delivery": result["delivery"]})
        return rows


def bind_call(turn: Turn, call: ParsedCall, host: Host) -> CallContext:
    """The trusted context of one parsed call: the parser's profile and ids, the host's keys."""
    profile = protocol_for(turn.adapter_revision).profile
    digest = canonical_sha256({"domain": CALL_KEY_DOMAIN, "session": host.session,
                               "adapter_revision": profile.adapter_revision,
                               "response_id": turn.response_id, "call_id": call.call_id})
    return CallContext(profile.provider, profile.api_family, profile.adapter_revision, turn.response_id,
                       call.call_id, operation_id="op-" + digest[:24], idempotency_key="key-" + digest[24:48])


def _approved_text(arguments: Any) -> str | None:
    """The canonical JSON of arguments a person approved; None (approving nothing) for a host value
    JSON cannot carry exactly."""
    try:
        return canonical_text(dict(arguments))
    except (TypeError, ValueError, tool_dispatcher.BoundaryError):
        return None


def host_approval(host: Host, context: CallContext, call: ParsedCall, *,
                  registry: Mapping[str, ToolSpec] = REGISTRY) -> Approval | None:
    """The host's approval for a write whose exact arguments a person approved, else None."""
    spec = registry.get(call.name)
    if spec is None or spec.effect != "write" or host.approver is None:
        return None
    # JSON equality, never Python's: an approved 1 does not approve a proposed true (1 == True).
    proposed = canonical_text(call.arguments)  # portable by construction: decoded by the strict decoder
    if not any(name == call.name and _approved_text(arguments) == proposed for name, arguments in host.approved):
        return None
    return tool_dispatcher.approval_for_call(approver=host.approver, principal=host.principal, context=context,
                                             spec=spec, arguments=call.arguments,
                                             expires_at=host.now + APPROVAL_TTL_SECONDS)


def run_turn(turn: Turn, dispatcher: Dispatcher, host: Host, *,
             registry: Mapping[str, ToolSpec] = REGISTRY) -> TurnRun:
    """Dispatch every call of a complete turn and build the provider's continuation payload
    (``registry``: the contract set the dispatcher was built with)."""
    protocol = protocol_for(turn.adapter_revision)
    try:
        contexts = tuple(bind_call(turn, call, host) for call in turn.calls)
        packages = [dispatcher.dispatch(call.proposal(), context, host.principal,
                                        approval=host_approval(host, context, call, registry=registry),
                                        now=host.now)
                    for call, context in zip(turn.calls, contexts)]
        ordered = verify_result_set(contexts, packages, principal=host.principal, registry=registry)
        items = [protocol.adapt(package, context, principal=host.principal, registry=registry)
                 for package, context in zip(ordered, contexts)]
    except BoundaryError as refusal:
        raise StreamError("STREAM_CONTINUATION_REFUSED", detail=refusal.code) from None
    payload = protocol.continue_turn(turn, items) if turn.calls else None
    if audit_leaks(payload, ordered, turn):
        raise StreamError("STREAM_AUDIT_LEAK")
    return TurnRun(turn, contexts, tuple(ordered), payload)


def audit_leaks(payload: Any, packages: Sequence[Mapping[str, Any]], turn: Turn) -> frozenset[str]:
    """The strings only a protected_audit holds that appear in the payload (should be none).

    Visible strings are those the model produced or may see: the turn (ids, names, arguments,
    text) and every model_result. JSON text inside a payload string is read too, so a value
    hidden in a serialized output is still found.
    """
    visible = _strings([turn.view(), [package["model_result"] for package in packages]])
    hidden = _strings([package["protected_audit"] for package in packages]) - visible
    return frozenset(hidden & _strings(payload, wire_words=_WIRE_WORD_KEYS))


# The payload's own words: a role or a block type the builder writes as a constant ("user",
# "text", "tool_result", "function_call_output"), never a value it copies. A host may name a role
# or a tenant the same: that is no leak.
_WIRE_WORD_KEYS: Final = frozenset({"role", "type"})


def _strings(root: Any, *, wire_words: frozenset[str] = frozenset()) -> set[str]:
    found: set[str] = set()
    stack = [root]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is dict:
            stack.extend(value for key, value in item.items() if key not in wire_words or type(value) is not str)
        elif kind is list:
            stack.extend(item)
        elif kind is str:
            found.add(item)
            if item[:1] == "{":
                data = item.encode("utf-8", "surrogatepass")
                try:
                    stack.append(decode_strict_json(data, max_bytes=len(data)))
                except BoundaryError:
                    pass  # not JSON: the string itself is already counted
    return found


# ============================================================================================
# 14. Fixtures
# ============================================================================================
# One file per provider revision, named after it, holding named streams and what each must
# give: the calls, the stop reason and each dispatch result, or the error code (and detail).
# The demo world and host below are the trusted side every fixture stream is run against.

_FIXTURE_FIELDS: Final = frozenset({"format", "adapter_revision", "checked", "source", "streams"})
_STREAM_FIELDS: Final = frozenset({"description", "events", "expect"})
_EXPECT_CALLS: Final = frozenset({"stop", "calls", "results"})
_EXPECT_ERROR: Final = frozenset({"error", "detail"})


@dataclass(frozen=True, slots=True)
class StreamCase:
    name: str
    description: str
    events: list[Any]
    expect: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class StreamFixture:
    adapter_revision: str
    checked: str
    source: str
    cases: Mapping[str, StreamCase]


DEMO_PRINCIPAL: Final = Principal("tenant-a", "alice", ("orders.read", "refunds.draft"))
DEMO_NOW: Final = 1_796_040_000  # 2026-11-30T12:00:00Z
DEMO_HOST: Final = Host(
    principal=DEMO_PRINCIPAL, now=DEMO_NOW, session="demo-session-1", approver="approver-lee",
    approved=(("create_refund_draft", MappingProxyType({"order_ref": "ORDER-7", "reason": "damaged"})),),
)


def demo_dispatcher() -> Dispatcher:
    """A fresh boundary over the demo world: alice's paid ORDER-7 and pending ORDER-11, bob's ORDER-8."""
    return Dispatcher((Order("tenant-a", "ORDER-7", "alice", "paid", 3),
                       Order("tenant-a", "ORDER-8", "bob", "paid", 1),
                       Order("tenant-a", "ORDER-11", "alice", "pending", 2)),
                      approvers=("approver-lee",))


def load_fixture(provider: str, *, path: Any = None, max_bytes: int = MAX_FIXTURE_BYTES) -> StreamFixture:
    """Read and check the stream fixture of a provider revision (its shipped file by default)."""
    protocol = protocol_for(provider)
    source = FIXTURE_DIR / f"{protocol.profile.adapter_revision}.json" if path is None else path
    try:
        # A fixture's events are provider envelopes, read as a live stream's are (ENVELOPE_JSON: a
        # temperature of 1.0, a long usage counter); the calls in them are decoded again, strictly.
        root = decode_strict_json(read_bounded(source, max_bytes=max_bytes), max_bytes=max_bytes, policy=ENVELOPE_JSON)
    except BoundaryError as refusal:
        raise StreamError("STREAM_FIXTURE_INVALID", detail=refusal.code) from None
    if (type(root) is not dict or root.keys() != _FIXTURE_FIELDS or root["format"] != FIXTURE_FORMAT
            or root["adapter_revision"] != protocol.profile.adapter_revision
            or type(root["checked"]) is not str or DATE_PATTERN.fullmatch(root["checked"]) is None
            or type(root["source"]) is not str or type(root["streams"]) is not dict or not root["streams"]):
        raise StreamError("STREAM_FIXTURE_INVALID")
    cases = {name: _stream_case(name, raw) for name, raw in root["streams"].items()}
    return StreamFixture(root["adapter_revision"], root["checked"], root["source"], MappingProxyType(cases))


def _stream_case(name: str, raw: Any) -> StreamCase:
    if (STREAM_NAME_PATTERN.fullmatch(name) is None or type(raw) is not dict or raw.keys() != _STREAM_FIELDS
            or type(raw["description"]) is not str or type(raw["events"]) is not list):
        raise StreamError("STREAM_FIXTURE_INVALID")
    check_expectation(raw["expect"])
    return StreamCase(name, raw["description"], raw["events"], MappingProxyType(raw["expect"]))


def check_expectation(expect: Any) -> None:
    """Refuse (STREAM_FIXTURE_INVALID) an expectation that is neither calls and stop nor an error."""
    if type(expect) is dict and expect.keys() == _EXPECT_ERROR:
        detail = expect["detail"]
        valid = expect["error"] in STREAM_CATALOG and (detail is None or detail in ERROR_CATALOG)
    else:
        valid = (type(expect) is dict and expect.keys() == _EXPECT_CALLS and type(expect["stop"]) is str
                 and type(expect["calls"]) is list and type(expect["results"]) is list
                 and len(expect["results"]) == len(expect["calls"]))
    if not valid:
        raise StreamError("STREAM_FIXTURE_INVALID")


def run_case(provider: str, case: StreamCase) -> dict[str, Any]:
    """Run one fixture stream end to end on a fresh demo boundary; report what happened."""
    report: dict[str, Any] = {"provider": protocol_for(provider).profile.adapter_revision,
                              "stream": case.name, "description": case.description,
                              "event_count": len(case.events), "expect": dict(case.expect)}
    try:
        turn = parse_stream(provider, case.events)
        run = run_turn(turn, demo_dispatcher(), DEMO_HOST)
    except StreamError as error:
        report.update(error=error.to_json(), dispatched=False)
        report["passed"] = case.expect.keys() == _EXPECT_ERROR and (
            case.expect["error"], case.expect["detail"]) == (error.code, error.detail)
        return report
    results = run.results()
    report.update(turn=turn.view(), results=results, continuation=run.payload, dispatched=bool(turn.calls))
    seen_calls = [{"call_id": call.call_id, "name": call.name, "arguments": call.arguments} for call in turn.calls]
    seen_results = [{"status": row["status"], "error_code": row["error_code"], "delivery": row["delivery"]}
                    for row in results]
    report["passed"] = case.expect.keys() == _EXPECT_CALLS and (
        case.expect["stop"], case.expect["calls"], case.expect["results"]) == (turn.stop, seen_calls, seen_results)
    return report


# ============================================================================================
# 15. CLI
# ============================================================================================
# Exit 0: the stream did what its fixture declares (its calls and results, or its error code).
# Exit 1: it did something else. Exit 2: the command line or a fixture was rejected. Whatever
# the arguments, the output never holds a traceback, a local path or the arguments themselves.


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = CliParser(prog="provider_streams", description=(
        "Parse one recorded provider stream, dispatch its calls through the boundary and print "
        "the continuation payload."))
    parser.add_argument("--provider", choices=sorted(PROTOCOLS), help="which provider revision's fixture")
    parser.add_argument("--stream", help="the name of a stream in that fixture (see --list)")
    parser.add_argument("--list", action="store_true", help="list the fixture streams and what each must give")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of readable text")
    arguments = parser.parse_args(argv)
    if not arguments.list and (arguments.provider is None or arguments.stream is None):
        parser.error("--provider and --stream are required without --list")
    return arguments


def list_streams(provider: str | None) -> dict[str, Any]:
    listing = {}
    for name in sorted(PROTOCOLS) if provider is None else [provider]:
        fixture = load_fixture(name)
        listing[name] = {"adapter_revision": fixture.adapter_revision, "checked": fixture.checked,
                         "streams": {case.name: _expected_summary(case.expect) for case in fixture.cases.values()}}
    return {"providers": listing}


def _expected_summary(expect: Mapping[str, Any]) -> str:
    if "error" in expect:
        return expect["error"] + (f" ({expect['detail']})" if expect["detail"] else "")
    return f"{len(expect['calls'])} call(s), stop {expect['stop']}"


def run_named_stream(provider: str, name: str) -> dict[str, Any]:
    case = load_fixture(provider).cases.get(name)
    if case is None:
        raise StreamError("STREAM_CLI_UNKNOWN_STREAM")
    return run_case(provider, case)


def render_listing(listing: Mapping[str, Any]) -> str:
    lines = []
    for name, entry in listing["providers"].items():
        lines.append(f"{name}  {entry['adapter_revision']}  (shapes checked {entry['checked']})")
        lines.extend(f"  {stream:<32} {summary}" for stream, summary in entry["streams"].items())
    return "\n".join(lines)


def render_report(report: Mapping[str, Any]) -> str:
    lines = [f"stream        {report['provider']} / {report['stream']}  ({report['event_count']} events)",
             f"              {report['description']}"]
    if "error" in report:
        error = report["error"]
        where = f" at event {error['event']}" if "event" in error else ""
        detail = f" ({error['detail']})" if "detail" in error else ""
        lines += [f"refused       {error['code']}{detail}{where}: {error['message']}",
                  "              no call was dispatched"]
    else:
        turn = report["turn"]
        lines.append(f"turn          {turn['response_id']}  stop={turn['stop']}  calls={len(turn['calls'])}")
        for call, row in zip(turn["calls"], report["results"]):
            arguments = json.dumps(call["arguments"], separators=(",", ":"))
            lines.append(f"call {call['index']:<8} {call['call_id']}  {call['name']}  {arguments}")
            lines.append(f"  result      {row['status']}  {row['error_code'] or '-'}  "
                         f"outcome={row['outcome']}  delivery={row['delivery']}")
        payload = report["continuation"]
        if payload is None:
            lines.append("continuation  none: the turn has no call to answer")
        else:
            lines.append("continuation")
            lines.extend("  " + line for line in json.dumps(payload, indent=2).splitlines())
    lines.append(f"expected      {_expected_summary(report['expect'])}: {'PASS' if report['passed'] else 'FAIL'}")
    return "\n".join(lines)


def _emit(text: str) -> None:
    sys.stdout.write(text.encode("ascii", "backslashreplace").decode("ascii") + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    """The CLI: any failure is the project's one shape, {"passed": false, "error": {...}}, exit 2."""
    return run_cli(lambda: _run(argv))


def _run(argv: Sequence[str] | None) -> int:
    arguments = _arguments(argv)
    if arguments.list:
        listing = list_streams(arguments.provider)
        if arguments.json:
            emit_json(listing)
        else:
            _emit(render_listing(listing))
        return 0
    report = run_named_stream(arguments.provider, arguments.stream)
    if arguments.json:
        emit_json(report)
    else:
        _emit(render_report(report))
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
