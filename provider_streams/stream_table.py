"""Run a folder of recorded streams through parse_sse and print what each gave against what it should.

A folder holds pairs: NAME.sse (the raw text/event-stream body, byte for byte) and NAME.json (a
provider-streams-v1 fixture with one stream, whose `expect` says what the provider's official SDK
reconstructs from the same bytes: the stop reason and the calls, or an error code). For each pair
this prints one row: the stream, the provider, what was expected, what parse_sse gave, a verdict.

Verdicts, from the closed table VERDICTS:
    match     the same calls (call id, name, arguments, in order) and the same stop
    refused   a refusal the layer documents, for what the event it names really holds (a call cut
              at a limit, a block or item type it does not handle, ...: RIGHT_REFUSALS), or the
              error the fixture itself expects
    MISMATCH  anything else: other calls, another stop, or a refusal that is not right

Exit 0 when no row is a MISMATCH, 1 otherwise, 2 when the folder or the command line cannot be
read (the project's one failure shape, through tool_dispatcher.run_cli).

    python -B provider_streams/stream_table.py DIR
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

import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Final, Mapping, Sequence

_HERE: Final = Path(__file__).resolve().parent
if __package__:  # imported as tool_dispatcher_streams.stream_table (installed), or as
    # provider_streams.stream_table (unittest discovery from the root): no folder goes on sys.path
    from . import provider_streams as ps
else:  # run as a script, or imported from this folder
    # The repository root for tool_dispatcher, then this folder first of all, so that the name
    # provider_streams is this folder's module and not the package the folder also is.
    sys.path[:0] = [str(_HERE), str(_HERE.parent)]
    import provider_streams as ps  # noqa: E402
from tool_dispatcher import (  # noqa: E402
    ENVELOPE_JSON,
    BoundaryError,
    CliParser,
    decode_strict_json,
    emit_json,
    read_bounded,
    run_cli,
)

MAX_PAIRS: Final = 512  # pairs in one folder: a corpus, not a data lake
MAX_PAIR_BYTES: Final = ps.MAX_SSE_BYTES  # one .sse body or .json fixture (a fixture repeats every event)
MAX_FIXTURE_DEPTH: Final = 64  # a fixture nests its events, whose envelopes carry tool schemas


@dataclass(frozen=True, slots=True)
class Pair:
    name: str
    provider: str
    body: bytes
    expect: Mapping[str, Any]
    events: Sequence[Any]


@dataclass(frozen=True, slots=True)
class Row:
    name: str
    provider: str
    expected: str
    seen: str
    verdict: str
    note: str


# -- When a refusal is the layer's documented answer ----------------------------------------
# A refusal is right when it is a policy the README documents for something a provider really
# sends, and the event the refusal names holds that very thing: a call cut at a limit, an item or
# block the layer does not handle, an unknown event inside a call, an index skip nothing checks,
# another revision, OpenAI's "" arguments, content in an Anthropic message_start. A refusal for
# anything else (a stream that breaks the protocol, or a reading the SDK does not share) is a
# MISMATCH: against a recorded stream it means the layer misreads the provider.

# What the layer handles, as its README states it; it refuses every other type by policy.
ANTHROPIC_ECHOED_BLOCKS: Final = frozenset({"text", "tool_use"})  # "Unsupported content blocks"
OPENAI_HANDLED_ITEMS: Final = frozenset({"function_call"}) | ps.OPENAI_SILENT_ITEMS | ps.OPENAI_CLIENT_ITEMS
HANDLED_TYPES: Final[Mapping[str, frozenset[str]]] = MappingProxyType({
    "openai": OPENAI_HANDLED_ITEMS, "anthropic": ANTHROPIC_ECHOED_BLOCKS,
    "gemini": frozenset({"function_call"}) | ps.GEMINI_SILENT_STEPS,
})


@dataclass(frozen=True, slots=True)
class Shape:
    """Where a provider's stream opens its items, and what its terminal event lists again."""

    opening: str  # the event type that opens an item, block or step
    index_key: str
    item_key: str
    terminal: frozenset[str]  # terminal event types that may list every item again
    listing: tuple[str, str] | None  # (envelope key, list key) of that list
    fills_skip: frozenset[str]  # the types that list may show at a skipped index


SHAPES: Final[Mapping[str, Shape]] = MappingProxyType({
    "openai": Shape("response.output_item.added", "output_index", "item",
                    frozenset({"response.completed", "response.incomplete"}), ("response", "output"),
                    frozenset(ps.OPENAI_SILENT_ITEMS)),
    "anthropic": Shape("content_block_start", "index", "content_block", frozenset(), None, frozenset()),
    "gemini": Shape("step.start", "index", "step", frozenset({"interaction.completed"}), ("interaction", "steps"),
                    frozenset({ps.GEMINI_INPUT_STEP})),
})


def _named_event(error: ps.StreamError, events: Sequence[Any]) -> dict[str, Any] | None:
    at = error.event
    if at is None or not 0 <= at < len(events) or type(events[at]) is not dict:
        return None
    return events[at]


def _event_type(pair: Pair, event: Mapping[str, Any]) -> Any:
    return event.get(ps.protocol_for(pair.provider).type_key)


def _opened_item(pair: Pair, event: Mapping[str, Any]) -> dict[str, Any] | None:
    shape = SHAPES[pair.provider]
    item = event.get(shape.item_key)
    return item if _event_type(pair, event) == shape.opening and type(item) is dict else None


def _cut_with_calls(pair: Pair, _error: ps.StreamError, _events: Sequence[Any]) -> bool:
    # The SDK keeps whatever the limit left; a call cut by the token limit is never dispatched here.
    stop = pair.expect.get("stop")
    return (bool(pair.expect.get("calls")) and type(stop) is str
            and ps.protocol_for(pair.provider).stop_rules.get(stop) == "cut")


def _opens_client_item(pair: Pair, error: ps.StreamError, events: Sequence[Any]) -> bool:
    event = _named_event(error, events)
    item = None if event is None or pair.provider != "openai" else _opened_item(pair, event)
    return item is not None and item.get("type") in ps.OPENAI_CLIENT_ITEMS


def _opens_unhandled_type(pair: Pair, error: ps.StreamError, events: Sequence[Any]) -> bool:
    event = _named_event(error, events)
    item = None if event is None else _opened_item(pair, event)
    handled = HANDLED_TYPES[pair.provider]
    return item is not None and type(item.get("type")) is str and item["type"] not in handled


def _unknown_event_type(pair: Pair, error: ps.StreamError, events: Sequence[Any]) -> bool:
    event = _named_event(error, events)
    kind = None if event is None else _event_type(pair, event)
    return type(kind) is str and kind not in ps.protocol_for(pair.provider).rules


def _other_revision(pair: Pair, error: ps.StreamError, events: Sequence[Any]) -> bool:
    event = _named_event(error, events)
    if event is None or pair.provider != "gemini":
        return False
    interaction = event.get("interaction")
    return (_event_type(pair, event) in ps.GEMINI_LEGACY_EVENTS
            or (type(interaction) is dict and "outputs" in interaction))


def _unchecked_skip(pair: Pair, error: ps.StreamError, events: Sequence[Any]) -> bool:
    # An index skipped, refused where it opens, or at a terminal event that does not show an item
    # needing no answer at every skipped index: no call could be ruled out there.
    event = _named_event(error, events)
    if event is None:
        return False
    shape = SHAPES[pair.provider]
    before = [earlier for earlier in events[:error.event]
              if type(earlier) is dict and _event_type(pair, earlier) == shape.opening]
    indexes = [earlier.get(shape.index_key) for earlier in before]
    if not all(type(index) is int for index in indexes):
        return False
    if _opened_item(pair, event) is not None:
        index = event.get(shape.index_key)
        return type(index) is int and index > (max(indexes) + 1 if indexes else 0)
    if _event_type(pair, event) not in shape.terminal or shape.listing is None or not indexes:
        return False
    # An opening event without an item (OpenAI's "empty added") opens nothing: its index is skipped too.
    opened = {earlier[shape.index_key] for earlier in before if _opened_item(pair, earlier) is not None}
    skipped = sorted(set(range(max(indexes) + 1)) - opened)
    envelope = event.get(shape.listing[0])
    listing = envelope.get(shape.listing[1]) if type(envelope) is dict else None
    if not skipped:
        return False
    if type(listing) is not list:
        return True
    return any(position >= len(listing) or type(listing[position]) is not dict
               or listing[position].get("type") not in shape.fills_skip for position in skipped)


def _empty_openai_arguments(pair: Pair, error: ps.StreamError, events: Sequence[Any]) -> bool:
    # OpenAI's "" is no JSON: the first call, in output order, whose arguments do not decode
    # must be one whose arguments are exactly "".
    if pair.provider != "openai" or error.detail != "JSON_INVALID":
        return False
    done = {event.get("output_index"): event.get("arguments") for event in events
            if type(event) is dict and event.get("type") == "response.function_call_arguments.done"}
    for index in sorted(key for key in done if type(key) is int):
        text = done[index]
        if type(text) is not str:
            return False
        try:
            decode_strict_json(text.encode("utf-8", "surrogatepass"))
        except BoundaryError:
            return text == ""
    return False


def _content_in_message_start(pair: Pair, error: ps.StreamError, events: Sequence[Any]) -> bool:
    event = _named_event(error, events)
    if event is None or pair.provider != "anthropic" or _event_type(pair, event) != "message_start":
        return False
    message = event.get("message")
    return type(message) is dict and type(message.get("content")) is list and bool(message["content"])


# When a refusal is the right answer to a stream the SDK reads: code -> the predicate that says so.
RIGHT_REFUSALS: Final[Mapping[str, Callable[[Pair, ps.StreamError, Sequence[Any]], bool]]] = MappingProxyType({
    "STREAM_TRUNCATED": _cut_with_calls,
    "STREAM_CALL_UNANSWERABLE": _opens_client_item,
    "STREAM_BLOCK_UNSUPPORTED": _opens_unhandled_type,
    "STREAM_UNKNOWN_EVENT": _unknown_event_type,
    "STREAM_REVISION_MISMATCH": _other_revision,
    "STREAM_OUT_OF_ORDER": _unchecked_skip,
    "STREAM_INCONSISTENT": _unchecked_skip,
    "STREAM_ARGUMENTS_INVALID": _empty_openai_arguments,
    "STREAM_EVENT_MALFORMED": _content_in_message_start,
})
VERDICTS: Final = ("match", "refused", "MISMATCH")


def read_pairs(folder: Any, *, max_pairs: int = MAX_PAIRS, max_bytes: int = MAX_PAIR_BYTES) -> list[Pair]:
    """Every NAME.sse with its NAME.json in a folder, in name order; StreamError if one is unreadable."""
    try:
        mode = os.stat(folder).st_mode
    except (OSError, TypeError, ValueError):
        raise ps.StreamError("STREAM_FIXTURE_INVALID") from None
    if not stat.S_ISDIR(mode):
        raise ps.StreamError("STREAM_FIXTURE_INVALID")
    bodies = sorted(Path(folder).glob("*.sse"))
    if not bodies or len(bodies) > max_pairs:
        raise ps.StreamError("STREAM_FIXTURE_INVALID")
    return [_read_pair(body, max_bytes) for body in bodies]


def _read_pair(body_path: Path, max_bytes: int) -> Pair:
    try:
        body = read_bounded(body_path, max_bytes=max_bytes)
        root = decode_strict_json(read_bounded(body_path.with_suffix(".json"), max_bytes=max_bytes),
                                  max_bytes=max_bytes, max_depth=MAX_FIXTURE_DEPTH, policy=ENVELOPE_JSON)
    except BoundaryError as refusal:
        raise ps.StreamError("STREAM_FIXTURE_INVALID", detail=refusal.code) from None
    streams = root.get("streams") if type(root) is dict else None
    if (type(streams) is not dict or len(streams) != 1 or root.get("format") != ps.FIXTURE_FORMAT
            or type(root.get("adapter_revision")) is not str):
        raise ps.StreamError("STREAM_FIXTURE_INVALID")
    case = next(iter(streams.values()))
    if type(case) is not dict or type(case.get("events")) is not list:
        raise ps.StreamError("STREAM_FIXTURE_INVALID")
    ps.check_expectation(case.get("expect"))
    provider = ps.protocol_for(root["adapter_revision"]).name
    return Pair(body_path.stem, provider, body, MappingProxyType(case["expect"]), case["events"])


def judge(pair: Pair) -> Row:
    """Parse one pair's body and compare what came out with what the SDK reconstructs."""
    expected = _summary(pair.expect)
    note = ""
    body = pair.body
    try:
        try:
            turn = ps.parse_sse(pair.provider, body)
        except ps.StreamError as error:
            # A recorded file that lost its final blank line: by the SSE rules its last event is
            # not finished, so the stream has no terminal event. Said so in the row, then read
            # with the line end the transport would have sent.
            if error.code != "STREAM_INCOMPLETE" or body.endswith((b"\n\n", b"\r\n\r\n", b"\r\r")):
                raise
            body = body.rstrip(b"\r\n") + b"\n\n"
            note = "file lacked its final blank line"
            turn = ps.parse_sse(pair.provider, body)
    except ps.StreamError as error:
        seen = error.code + (f" ({error.detail})" if error.detail else "")
        right = RIGHT_REFUSALS.get(error.code)
        wanted = pair.expect.get("error") == error.code and pair.expect.get("detail") == error.detail
        verdict = ("refused" if wanted or (right is not None and right(pair, error, _events(pair.provider, body)))
                   else "MISMATCH")
        return Row(pair.name, pair.provider, expected, seen, verdict, note)
    calls = [{"call_id": call.call_id, "name": call.name, "arguments": call.arguments} for call in turn.calls]
    seen = f"{len(calls)} call(s), stop {turn.stop}"
    wanted = [{key: call.get(key) for key in ("call_id", "name", "arguments")}
              for call in pair.expect.get("calls", ()) if type(call) is dict]
    same = "error" not in pair.expect and (calls, turn.stop) == (wanted, pair.expect.get("stop"))
    return Row(pair.name, pair.provider, expected, seen, "match" if same else "MISMATCH", note)


def _events(provider: str, body: bytes) -> list[Any]:
    """The events parse_sse read from a body (none when the SSE text itself was refused)."""
    try:
        pairs = ps.split_sse(body, done_frame=ps.protocol_for(provider).done_frame)
    except ps.StreamError:
        return []
    return [payload for _, payload in pairs]


def _summary(expect: Mapping[str, Any]) -> str:
    if "error" in expect:
        return str(expect["error"])
    return f"{len(expect['calls'])} call(s), stop {expect['stop']}"


def render(rows: Sequence[Row]) -> str:
    header = ("stream", "provider", "SDK reconstructs", "parse_sse gives", "verdict")
    table = [header] + [(row.name, row.provider, row.expected, row.seen, row.verdict + (f" ({row.note})" if row.note else ""))
                        for row in rows]
    widths = [max(len(line[column]) for line in table) for column in range(4)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(line[:4], widths)) + "  " + line[4]
             for line in table]
    counts = {verdict: sum(1 for row in rows if row.verdict == verdict) for verdict in VERDICTS}
    lines.append(f"{len(rows)} streams: " + ", ".join(f"{count} {verdict}" for verdict, count in counts.items()))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli(lambda: _run(argv))


def _run(argv: Sequence[str] | None) -> int:
    parser = CliParser(prog="stream_table", description="Run NAME.sse + NAME.json pairs through parse_sse.")
    parser.add_argument("folder", help="a folder of NAME.sse + NAME.json pairs")
    parser.add_argument("--json", action="store_true", help="print the rows as one JSON object")
    arguments = parser.parse_args(argv)
    rows = [judge(pair) for pair in read_pairs(arguments.folder)]
    if arguments.json:
        emit_json({"passed": all(row.verdict != "MISMATCH" for row in rows),
                   "rows": [{"stream": row.name, "provider": row.provider, "expected": row.expected,
                             "seen": row.seen, "verdict": row.verdict, "note": row.note} for row in rows]})
    else:
        sys.stdout.write(render(rows).encode("ascii", "backslashreplace").decode("ascii") + "\n")
    return 0 if all(row.verdict != "MISMATCH" for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
