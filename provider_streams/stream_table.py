"""Run a folder of recorded streams through parse_sse and print what each gave against what it should.

A folder holds pairs: NAME.sse (the raw text/event-stream body, byte for byte) and NAME.json (a
provider-streams-v1 fixture with one stream, whose `expect` says what the provider's official SDK
reconstructs from the same bytes: the stop reason and the calls, or an error code). For each pair
this prints one row: the stream, the provider, what was expected, what parse_sse gave, a verdict.

Verdicts, from the closed table VERDICTS:
    match     the same calls (call id, name, arguments, in order) and the same stop
    refused   a stable refusal where refusing is right (RIGHT_REFUSALS says when)
    MISMATCH  anything else: other calls, another stop, or a refusal that is not right

Exit 0 when no row is a MISMATCH, 1 otherwise, 2 when the folder or the command line cannot be
read (the project's one failure shape, through tool_dispatcher.run_cli).

    python -B provider_streams/stream_table.py ../shared/real-streams
"""
from __future__ import annotations

import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Final, Mapping, Sequence

_HERE: Final = Path(__file__).resolve().parent
# The repository root for tool_dispatcher, then this folder first of all, so that the name
# provider_streams is this folder's module and not the package the folder also is.
sys.path[:0] = [str(_HERE), str(_HERE.parent)]

if __package__:  # imported as provider_streams.stream_table (unittest discovery from the root)
    from . import provider_streams as ps
else:  # run as a script, or imported from this folder
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

# Content blocks this layer documents as unsupported (README, "What this layer refuses"): an
# Anthropic turn is echoed back whole, and these cannot be echoed faithfully without state this
# layer does not keep (thinking signatures, the provider's own tool runs and their results).
UNSUPPORTED_BLOCKS: Final = frozenset({
    "thinking", "redacted_thinking", "server_tool_use", "web_search_tool_result",
    "web_fetch_tool_result", "code_execution_tool_result", "mcp_tool_use", "mcp_tool_result",
    "container_upload",
})


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


def _cut_with_calls(pair: Pair, _code: str) -> bool:
    # The SDK keeps whatever the limit left; a call cut by the token limit is never dispatched here.
    stop = pair.expect.get("stop")
    return (bool(pair.expect.get("calls")) and type(stop) is str
            and ps.protocol_for(pair.provider).stop_rules.get(stop) == "cut")


def _holds_block(types: frozenset[str], keys: tuple[str, ...]) -> Callable[[Pair, str], bool]:
    def check(pair: Pair, _code: str) -> bool:
        for event in pair.events:
            if type(event) is not dict:
                continue
            for key in keys:
                item = event.get(key)
                if type(item) is dict and type(item.get("type")) is str and item["type"] in types:
                    return True
        return False
    return check


# When a refusal is the right answer to a stream the SDK reads: code -> the predicate that says so.
RIGHT_REFUSALS: Final[Mapping[str, Callable[[Pair, str], bool]]] = MappingProxyType({
    "STREAM_TRUNCATED": _cut_with_calls,
    "STREAM_CALL_UNANSWERABLE": _holds_block(frozenset(ps.OPENAI_CLIENT_ITEMS), ("item",)),
    "STREAM_BLOCK_UNSUPPORTED": _holds_block(UNSUPPORTED_BLOCKS, ("content_block",)),
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
        verdict = "refused" if wanted or (right is not None and right(pair, error.code)) else "MISMATCH"
        return Row(pair.name, pair.provider, expected, seen, verdict, note)
    calls = [{"call_id": call.call_id, "name": call.name, "arguments": call.arguments} for call in turn.calls]
    seen = f"{len(calls)} call(s), stop {turn.stop}"
    wanted = [{key: call.get(key) for key in ("call_id", "name", "arguments")}
              for call in pair.expect.get("calls", ()) if type(call) is dict]
    same = "error" not in pair.expect and (calls, turn.stop) == (wanted, pair.expect.get("stop"))
    return Row(pair.name, pair.provider, expected, seen, "match" if same else "MISMATCH", note)


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
