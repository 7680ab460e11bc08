"""A small MCP server of the project's own, over stdio, standard library only: a store of notes.

    python -B mcp_bridge/demo_server.py [--dir DIR] [--lose-answer-once] [--crash-on-write]

Three tools, each with an input and an output schema the boundary's contract language compiles:

    read_note {name}                     the note's text (text content; structuredContent {name, text})
    write_note {name, text}              writes the note; structuredContent {name, revision}
    note_write_status {idempotency_key}  whether a write under that key took effect: {found: true,
                                         receipt, name, revision} or {found: false}

A write_note request may carry an idempotency key in ``params._meta["dev.tool-dispatcher/idempotency-key"]``
(an identifier: a letter or digit, then letters, digits and ``. _ : -``, 64 characters at most).
A key that is no identifier (null included) is refused, and so is a request whose ``_meta`` is no
object (-32602): neither is ever read as "no key", which would run a keyed write unkeyed.
The first write under a key takes effect and is recorded with it; the same key again, with the same
name and text, answers the recorded result and writes nothing; with another name or text it is
refused. A keyed write's result carries the server's receipt, ``"nr-"`` and 16 hex digits of the
key's SHA-256, in ``result._meta["dev.tool-dispatcher/receipt"]``. Without a key, every call writes.

note_write_status answers with authority for this server: it handles one request at a time, in the
order they arrive, so when it answers, every write it received before has taken effect or never
will (a server that stopped took its unanswered requests with it). With ``--dir`` the notes and the
key records live in DIR/notes.json, replaced whole and atomically on each write (a note and its key
record land together), so a restarted server keeps both; one server at a time holds DIR (a lock,
POSIX). Without it, the store lives and dies with the process.

Both protocol eras: ``server/discover`` (2026-07-28: every request must carry its ``_meta``) and
``initialize`` (2024-11-05 to 2025-11-25, the client's version answered when it is one of them).

Options that misbehave on purpose, for tests: ``--lose-answer-once`` performs the first write_note
call and never answers it; ``--crash-on-write`` performs every write_note call (stored, with
``--dir``) and exits with status 1 before answering.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
from typing import Any, Callable, Final, Mapping

try:
    import fcntl
except ImportError:  # not POSIX: no lock on the store's folder
    fcntl = None  # type: ignore[assignment]

MODERN: Final = "2026-07-28"
LEGACY: Final = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")  # newest first
PROTOCOL_VERSION_KEY: Final = "io.modelcontextprotocol/protocolVersion"
IDEMPOTENCY_KEY_META: Final = "dev.tool-dispatcher/idempotency-key"
RECEIPT_META: Final = "dev.tool-dispatcher/receipt"
SERVER_INFO: Final = {"name": "tool-dispatcher-notes", "version": "1"}

MAX_LINE_BYTES: Final = 1_048_576  # one request
MAX_TEXT_LENGTH: Final = 1_000  # a note's characters
MAX_NOTES: Final = 1_000
MAX_KEYS: Final = 10_000  # key records kept (none is ever dropped: a dropped key could write twice)
MAX_REVISION: Final = 1_000_000  # the boundary's bound on a resource revision
MAX_STORE_BYTES: Final = 64 * 1_048_576  # notes.json read at start
NAME: Final = re.compile(r"[a-z0-9-]{1,32}")
KEY: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,63}")
STORE_FORMAT: Final = "demo-notes-v1"

NAME_SCHEMA: Final = {"type": "string", "pattern": "^[a-z0-9-]{1,32}$"}
REVISION_SCHEMA: Final = {"type": "integer", "minimum": 1, "maximum": MAX_REVISION}
TOOLS: Final = (
    {"name": "read_note", "title": "Read a note", "description": "Read one note's text by its name.",
     "inputSchema": {"type": "object", "properties": {"name": NAME_SCHEMA}, "required": ["name"],
                     "additionalProperties": False},
     "outputSchema": {"type": "object", "properties": {"name": NAME_SCHEMA,
                                                       "text": {"type": "string", "maxLength": MAX_TEXT_LENGTH}},
                      "required": ["name", "text"], "additionalProperties": False},
     "annotations": {"readOnlyHint": True, "openWorldHint": False}},
    {"name": "write_note", "title": "Write a note",
     "description": "Create or replace a note. With an idempotency key in the request's _meta, it writes at most "
                    "once per key.",
     "inputSchema": {"type": "object", "properties": {"name": NAME_SCHEMA,
                                                      "text": {"type": "string", "maxLength": MAX_TEXT_LENGTH}},
                     "required": ["name", "text"], "additionalProperties": False},
     "outputSchema": {"type": "object", "properties": {"name": NAME_SCHEMA, "revision": REVISION_SCHEMA},
                      "required": ["name", "revision"], "additionalProperties": False},
     "annotations": {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False,
                     "openWorldHint": False}},
    {"name": "note_write_status", "title": "Status of a keyed write",
     "description": "Whether a write_note under this idempotency key took effect on this server. found: false is "
                    "final for every request the server received before this one.",
     "inputSchema": {"type": "object", "properties": {"idempotency_key": {
         "type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$"}},
         "required": ["idempotency_key"], "additionalProperties": False},
     "outputSchema": {"type": "object", "properties": {
         "found": {"type": "boolean"}, "receipt": {"type": "string", "pattern": "^nr-[0-9a-f]{16}$"},
         "name": NAME_SCHEMA, "revision": REVISION_SCHEMA},
         "required": ["found"], "additionalProperties": False},
     "annotations": {"readOnlyHint": True, "openWorldHint": False}},
)

# Fixed texts of the tool errors (isError results): never the caller's input.
REFUSALS: Final = {
    "arguments": "The arguments do not match the tool's input schema.",
    "key": "The idempotency key is not an identifier of at most 64 characters.",
    "key_reused": "The idempotency key was already used for a different write.",
    "missing": "No note has this name.",
    "full": "The note store is full.",
    "unwritable": "The note store could not be written; nothing was written.",
}


class Store:
    """The notes and the key records, in memory, and in DIR/notes.json when a folder is given."""

    def __init__(self, folder: str | None) -> None:
        self.folder = folder
        self.notes: dict[str, dict[str, Any]] = {}  # name -> {text, revision}
        self.writes: dict[str, dict[str, Any]] = {}  # key -> {name, revision, intent}
        self._lock = None
        if folder is not None:
            os.makedirs(folder, exist_ok=True)
            self._lock = _lock_folder(folder)
            self._load(os.path.join(folder, "notes.json"))

    def _load(self, path: str) -> None:
        try:
            with open(path, "rb") as handle:
                data = handle.read(MAX_STORE_BYTES + 1)
        except FileNotFoundError:
            return
        document = json.loads(data.decode("utf-8")) if len(data) <= MAX_STORE_BYTES else None
        if type(document) is not dict or document.get("format") != STORE_FORMAT:
            raise ValueError("not a note store")
        self.notes, self.writes = dict(document["notes"]), dict(document["writes"])

    def save(self) -> None:
        """Replace notes.json whole: written aside, flushed to disk, renamed over the old one."""
        if self.folder is None:
            return
        path = os.path.join(self.folder, "notes.json")
        with open(path + ".tmp", "w", encoding="ascii") as handle:
            json.dump({"format": STORE_FORMAT, "notes": self.notes, "writes": self.writes}, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(path + ".tmp", path)
        if hasattr(os, "O_DIRECTORY"):
            descriptor = os.open(self.folder, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(descriptor)
            finally:
                os.close(descriptor)


def _lock_folder(folder: str) -> Any:
    handle = open(os.path.join(folder, "lock"), "a")
    if fcntl is not None:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            raise
    return handle  # held open, and so locked, while the server runs


def receipt_of(key: str) -> str:
    return "nr-" + hashlib.sha256(key.encode("ascii")).hexdigest()[:16]


def intent_of(name: str, text: str) -> str:
    return hashlib.sha256(json.dumps([name, text], ensure_ascii=True).encode("ascii")).hexdigest()


class Server:
    def __init__(self, store: Store, *, lose_answer_once: bool = False, crash_on_write: bool = False) -> None:
        self.store = store
        self.lose_answer_once = lose_answer_once
        self.crash_on_write = crash_on_write
        self.era: str | None = None

    # -- the wire ----------------------------------------------------------------------------------

    def write(self, message: Mapping[str, Any]) -> None:
        sys.stdout.write(json.dumps(message, ensure_ascii=True, separators=(",", ":")) + "\n")
        sys.stdout.flush()

    def answer(self, request_id: Any, result: Mapping[str, Any]) -> None:
        self.write({"jsonrpc": "2.0", "id": request_id, "result": result})

    def error(self, request_id: Any, code: int, message: str) -> None:
        self.write({"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}})

    def handle_line(self, line: bytes | None) -> None:
        try:
            message = _loads(line) if line is not None else None
        except ValueError:
            message = None
        if message is None:
            self.error(None, -32700, "Parse error")
            return
        if type(message) is not dict or message.get("jsonrpc") != "2.0" or type(message.get("method")) is not str:
            if type(message) is dict and ("result" in message or "error" in message):
                return  # an answer from the client: this server asks nothing
            self.error(None, -32600, "Invalid request")
            return
        if "id" not in message:
            return  # a notification: initialized, cancelled (there is never anything in flight to stop)
        request_id, method = message["id"], message["method"]
        params = message.get("params", {})
        if type(params) is not dict:
            self.error(request_id, -32602, "Invalid params")
            return
        handler = METHODS.get(method)
        if handler is None:
            self.error(request_id, -32601, "Method not found")
            return
        if self.era == "modern" and method != "server/discover" and (
                type(params.get("_meta")) is not dict or params["_meta"].get(PROTOCOL_VERSION_KEY) != MODERN):
            self.error(request_id, -32602, "Every request carries its protocol version in _meta")
            return
        handler(self, request_id, params)

    # -- methods -----------------------------------------------------------------------------------

    def discover(self, request_id: Any, _params: dict[str, Any]) -> None:
        self.era = "modern"
        self.answer(request_id, {"supportedVersions": [MODERN], "capabilities": {"tools": {}},
                                 "_meta": {"io.modelcontextprotocol/serverInfo": dict(SERVER_INFO)}})

    def initialize(self, request_id: Any, params: dict[str, Any]) -> None:
        self.era = "legacy"
        asked = params.get("protocolVersion")
        self.answer(request_id, {"protocolVersion": asked if asked in LEGACY else LEGACY[0],
                                 "capabilities": {"tools": {}}, "serverInfo": dict(SERVER_INFO)})

    def ping(self, request_id: Any, _params: dict[str, Any]) -> None:
        self.answer(request_id, {})

    def list_tools(self, request_id: Any, _params: dict[str, Any]) -> None:
        self.answer(request_id, {"tools": [dict(tool) for tool in TOOLS]})

    def call_tool(self, request_id: Any, params: dict[str, Any]) -> None:
        tool = TOOL_CALLS.get(params.get("name")) if type(params.get("name")) is str else None
        if tool is None:
            self.error(request_id, -32602, "Unknown tool")
            return
        arguments = params.get("arguments", {})
        meta = params.get("_meta", {})
        if type(meta) is not dict:  # never read as "no key": a keyed write would run unkeyed
            self.error(request_id, -32602, "Invalid params")
            return
        result = tool(self, arguments, meta)
        if result is None:
            return  # the lost answer
        if self.era == "modern":
            result["resultType"] = "complete"
        self.answer(request_id, result)

    # -- tools -------------------------------------------------------------------------------------

    def read_note(self, arguments: Any, _meta: dict[str, Any]) -> dict[str, Any]:
        if not _fits(arguments, {"name"}) or not _is_name(arguments["name"]):
            return _refused("arguments")
        note = self.store.notes.get(arguments["name"])
        if note is None:
            return _refused("missing")
        return {"content": [{"type": "text", "text": note["text"]}],
                "structuredContent": {"name": arguments["name"], "text": note["text"]}}

    def write_note(self, arguments: Any, meta: dict[str, Any]) -> dict[str, Any] | None:
        if not _fits(arguments, {"name", "text"}) or not _is_name(arguments["name"]) or not _is_note_text(
                arguments["text"]):
            return _refused("arguments")
        key = meta.get(IDEMPOTENCY_KEY_META)
        if IDEMPOTENCY_KEY_META in meta and not _is_key(key):  # a null key too: refused, never a write unkeyed
            return _refused("key")
        name, text = arguments["name"], arguments["text"]
        intent = intent_of(name, text)
        recorded = self.store.writes.get(key) if key is not None else None
        if recorded is not None:
            if recorded["intent"] != intent:
                return _refused("key_reused")
            return _written(recorded["name"], recorded["revision"], key)  # the first result; nothing written
        revision = self.store.notes.get(name, {}).get("revision", 0) + 1
        if (name not in self.store.notes and len(self.store.notes) >= MAX_NOTES) or revision > MAX_REVISION or (
                key is not None and len(self.store.writes) >= MAX_KEYS):
            return _refused("full")
        before = self.store.notes.get(name)
        self.store.notes[name] = {"text": text, "revision": revision}
        if key is not None:
            self.store.writes[key] = {"name": name, "revision": revision, "intent": intent}
        try:
            self.store.save()
        except OSError:  # the file keeps the store as it was: so does the memory
            self.store.notes.pop(name) if before is None else self.store.notes.update({name: before})
            self.store.writes.pop(key, None) if key is not None else None
            return _refused("unwritable")
        if self.crash_on_write:
            sys.stderr.write("demo_server: crashed after a write, before its answer (--crash-on-write)\n")
            sys.stderr.flush()
            os._exit(1)
        if self.lose_answer_once:
            self.lose_answer_once = False
            return None
        return _written(name, revision, key)

    def note_write_status(self, arguments: Any, _meta: dict[str, Any]) -> dict[str, Any]:
        if not _fits(arguments, {"idempotency_key"}) or not _is_key(arguments["idempotency_key"]):
            return _refused("arguments")
        key = arguments["idempotency_key"]
        recorded = self.store.writes.get(key)
        found: dict[str, Any] = {"found": False} if recorded is None else {
            "found": True, "receipt": receipt_of(key), "name": recorded["name"], "revision": recorded["revision"]}
        return _structured(found)


def _structured(value: dict[str, Any]) -> dict[str, Any]:
    """A result whose structuredContent is also given as JSON text, as MCP asks."""
    return {"content": [{"type": "text", "text": json.dumps(value, ensure_ascii=True)}], "structuredContent": value}


def _written(name: str, revision: int, key: str | None) -> dict[str, Any]:
    result = _structured({"name": name, "revision": revision})
    if key is not None:
        result["_meta"] = {RECEIPT_META: receipt_of(key)}
    return result


def _refused(reason: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": REFUSALS[reason]}], "isError": True}


def _fits(arguments: Any, fields: set[str]) -> bool:
    return type(arguments) is dict and arguments.keys() == fields


def _is_name(value: Any) -> bool:
    return type(value) is str and NAME.fullmatch(value) is not None


def _is_key(value: Any) -> bool:
    return type(value) is str and KEY.fullmatch(value) is not None


def _is_note_text(value: Any) -> bool:
    if type(value) is not str or len(value) > MAX_TEXT_LENGTH:
        return False
    try:
        value.encode("utf-8")  # a lone surrogate is no text a file or a peer can hold
    except UnicodeEncodeError:
        return False
    return True


def _loads(line: bytes) -> Any:
    """Strict JSON: UTF-8, no duplicate key, no NaN or Infinity."""
    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        if len({key for key, _ in items}) != len(items):
            raise ValueError("duplicate key")
        return dict(items)

    def constant(_name: str) -> Any:
        raise ValueError("not JSON")

    try:
        return json.loads(line.decode("utf-8"), object_pairs_hook=pairs, parse_constant=constant)
    except (UnicodeDecodeError, RecursionError):
        raise ValueError("not JSON") from None


METHODS: Final[Mapping[str, Callable[[Server, Any, dict[str, Any]], None]]] = {
    "server/discover": Server.discover, "initialize": Server.initialize, "ping": Server.ping,
    "tools/list": Server.list_tools, "tools/call": Server.call_tool,
}
TOOL_CALLS: Final[Mapping[str, Callable[[Server, Any, dict[str, Any]], dict[str, Any] | None]]] = {
    "read_note": Server.read_note, "write_note": Server.write_note, "note_write_status": Server.note_write_status,
}


def read_lines(stream: Any) -> Any:
    """Each line of the input, None for one longer than MAX_LINE_BYTES (read to its end, dropped)."""
    while True:
        line = stream.readline(MAX_LINE_BYTES + 1)
        if not line:
            return
        if len(line) > MAX_LINE_BYTES:
            while line and not line.endswith(b"\n"):
                line = stream.readline(MAX_LINE_BYTES + 1)
            yield None
        elif line.strip():
            yield line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="A note store served as an MCP server on stdio.")
    parser.add_argument("--dir", help="keep the notes and key records in DIR/notes.json (else in memory)")
    parser.add_argument("--lose-answer-once", action="store_true",
                        help="perform the first write_note call and never answer it")
    parser.add_argument("--crash-on-write", action="store_true",
                        help="perform each write_note call, then exit with status 1 before answering")
    arguments = parser.parse_args(argv)
    try:
        store = Store(arguments.dir)
    except (OSError, ValueError, KeyError, TypeError):
        sys.stderr.write("demo_server: the note store cannot be opened (unreadable, or held by another server)\n")
        return 2
    server = Server(store, lose_answer_once=arguments.lose_answer_once, crash_on_write=arguments.crash_on_write)
    for line in read_lines(sys.stdin.buffer):
        server.handle_line(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
