"""Tests of the provider stream layer, one TestCase per section of provider_streams.py.

Run from the repository root (any of -O, -W error, both):
    python -B -m unittest discover -s provider_streams -p 'test_provider_streams.py'
"""
from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
from fractions import Fraction
from pathlib import Path
from types import MappingProxyType
from unittest import mock

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))  # before the repository root: the module, not the package folder

if __package__:  # discovered from the repository root, as the package provider_streams
    from . import provider_streams as ps
    from . import stream_table
else:
    import provider_streams as ps
    import stream_table

import tool_dispatcher  # noqa: E402

PROVIDERS = ("openai", "anthropic", "gemini")
ORDER7 = '{"order_ref":"ORDER-7"}'
REFUND7 = '{"order_ref":"ORDER-7","reason":"damaged"}'


# -- helpers ---------------------------------------------------------------------------------


def stream(provider, calls=(("call_1", "get_order", ORDER7),), **options):
    return ps.build_events(provider, list(calls), **options)


def kind_of(provider, event):
    return event[ps.PROTOCOLS[provider].type_key]


def position(provider, events, kind, nth=0):
    found = [index for index, event in enumerate(events) if kind_of(provider, event) == kind]
    return found[nth]


def renumber(events):
    """OpenAI: give every event a fresh rising sequence number after an edit."""
    return [{**event, "sequence_number": number} for number, event in enumerate(events)]


def edited(provider, events, kind, nth=0, **changes):
    events = [dict(event) for event in events]
    at = position(provider, events, kind, nth)
    events[at] = {**events[at], **changes}
    return events


def inserted(provider, events, at, event):
    events = list(events[:at]) + [event] + list(events[at:])
    return renumber(events) if provider == "openai" else events


def without(provider, events, at):
    events = list(events[:at]) + list(events[at + 1:])
    return renumber(events) if provider == "openai" else events


def openai_items(items, call=("call_1", "get_order", ORDER7), *, call_index=None, output=None):
    """An OpenAI stream: `items` (type -> extra fields) open and close first, then one function call.

    `call_index` places the call at another output index (a gap); `output` replaces the final
    response's output list.
    """
    events = [{"type": "response.created", "response": {"id": "resp_1", "status": "in_progress"}}]
    listed = []
    for index, kind in enumerate(items):
        item = {"type": kind, "id": f"it_{index}", "status": "completed"}
        events.append({"type": "response.output_item.added", "output_index": index, "item": item})
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
        listed.append(item)
    index = len(items) if call_index is None else call_index
    call_id, name, text = call
    item = {"type": "function_call", "id": "fc_1", "call_id": call_id, "name": name, "arguments": ""}
    keys = {"item_id": "fc_1", "output_index": index}
    done = {**item, "arguments": text, "status": "completed"}
    events += [{"type": "response.output_item.added", "output_index": index, "item": item},
               {"type": "response.function_call_arguments.delta", **keys, "delta": text},
               {"type": "response.function_call_arguments.done", **keys, "arguments": text},
               {"type": "response.output_item.done", "output_index": index, "item": done},
               {"type": "response.completed", "response": {
                   "id": "resp_1", "status": "completed", "output": listed + [done] if output is None else output}}]
    return renumber(events)


class StreamTestCase(unittest.TestCase):
    def assertRefused(self, provider, events, code, detail=None, *, event=..., **limits):
        with self.assertRaises(ps.StreamError) as caught:
            ps.parse_stream(provider, events, **limits)
        self.assertEqual((caught.exception.code, caught.exception.detail), (code, detail))
        if event is not ...:
            self.assertEqual(caught.exception.event, event)
        return caught.exception

    def assertCalls(self, turn, expected):
        self.assertEqual([(call.call_id, call.name, call.arguments) for call in turn.calls], expected)


# ============================================================================================
# 2. Errors and the code catalog
# ============================================================================================


class TestErrors(unittest.TestCase):
    def test_unknown_code_is_a_programming_error(self):
        with self.assertRaises(ValueError):
            ps.StreamError("STREAM_NOT_A_CODE")

    def test_unknown_detail_is_a_programming_error(self):
        with self.assertRaises(ValueError):
            ps.StreamError("STREAM_ARGUMENTS_INVALID", detail="JSON_SOMETHING")

    def test_view_has_code_fixed_message_retryable_detail_and_event(self):
        error = ps.StreamError("STREAM_ARGUMENTS_INVALID", event=4, detail="JSON_INVALID")
        self.assertEqual(error.to_json(), {"code": "STREAM_ARGUMENTS_INVALID",
                                           "message": "A call's arguments are not strict, portable JSON.",
                                           "retryable": False, "detail": "JSON_INVALID", "event": 4})
        self.assertEqual(ps.StreamError("STREAM_INCOMPLETE").to_json(),
                         {"code": "STREAM_INCOMPLETE", "message": ps.STREAM_CATALOG["STREAM_INCOMPLETE"].message,
                          "retryable": True})
        self.assertEqual(list(ps.StreamError("STREAM_TRUNCATED", event=0).to_json()),
                         ["code", "message", "retryable", "event"])

    def test_stream_error_is_the_project_error_base(self):
        self.assertTrue(issubclass(ps.StreamError, tool_dispatcher.CatalogError))
        self.assertIs(ps.StreamError.CATALOG, ps.STREAM_CATALOG)
        self.assertEqual(ps.StreamError("STREAM_NOT_OPEN").message, ps.STREAM_CATALOG["STREAM_NOT_OPEN"].message)

    def test_catalog_shares_no_code_with_the_core(self):
        # Every code of every catalog the core exports, the contract language's included.
        core = {code for name in tool_dispatcher.__all__ if name.endswith("_CATALOG")
                for code in getattr(tool_dispatcher, name)}
        self.assertLessEqual({"INVALID_ARGUMENTS", "SCHEMA_TYPE", "VALUE_TYPE", "CONTRACTS_FIELDS"}, core)
        self.assertEqual(set(ps.STREAM_CATALOG) & core, set())
        self.assertEqual({spec.scope for spec in ps.STREAM_CATALOG.values()}, {"stream"})
        self.assertEqual(sorted(code for code, spec in ps.STREAM_CATALOG.items() if spec.retryable),
                         ["STREAM_INCOMPLETE", "STREAM_PROVIDER_ERROR", "STREAM_TRUNCATED"])

    def test_catalog_is_closed_and_messages_are_sentences(self):
        with self.assertRaises(TypeError):
            ps.STREAM_CATALOG["STREAM_NEW"] = "x"  # type: ignore[index]
        for code, spec in ps.STREAM_CATALOG.items():
            with self.subTest(code=code):
                self.assertRegex(code, r"^STREAM_[A-Z_]+$")
                self.assertTrue(spec.message.endswith(".") and "{" not in spec.message)

    def test_only_public_names_of_the_core_are_used(self):
        for path in (HERE / "provider_streams.py", HERE / "stream_table.py", HERE / "sdk_conformance" / "conformance.py"):
            with self.subTest(path=path.name), open(path, encoding="utf-8") as source:
                text = source.read()
                self.assertEqual(re.findall(r"tool_dispatcher\._\w+|td\._\w+", text), [])
                found = re.search(r"from tool_dispatcher import \((.*?)\)", text, re.S)
                names = [name.strip() for name in found.group(1).split(",") if name.strip()] if found else []
                self.assertEqual([name for name in names if name.startswith("_")], [])
                if path.name != "conformance.py":  # it imports this layer only
                    self.assertIn("decode_strict_json", names)

    def test_event_position_names_the_offending_event(self):
        events = stream("anthropic")
        events.insert(2, 7)
        error = ps.StreamError  # the position is the index in the list handed in
        with self.assertRaises(error) as caught:
            ps.parse_stream("anthropic", events)
        self.assertEqual((caught.exception.code, caught.exception.event), ("STREAM_EVENT_MALFORMED", 2))


# ============================================================================================
# 4-7. Parsers: shared turn state, then each provider's events
# ============================================================================================


class TestSharedTurnState(StreamTestCase):
    def test_well_formed_synthetic_streams_yield_their_calls(self):
        for provider in PROVIDERS:
            with self.subTest(provider=provider):
                turn = ps.parse_stream(provider, stream(provider, [("call_1", "get_order", ORDER7),
                                                                   ("call_2", "create_refund_draft", REFUND7)]))
                self.assertCalls(turn, [
                    ("call_1", "get_order", {"order_ref": "ORDER-7"}),
                    ("call_2", "create_refund_draft", {"order_ref": "ORDER-7", "reason": "damaged"})])
                self.assertEqual([call.index for call in turn.calls], [0, 1])
                self.assertEqual(turn.adapter_revision, ps.PROTOCOLS[provider].profile.adapter_revision)

    def test_turn_without_calls_is_a_turn(self):
        stops = {"openai": "completed", "anthropic": "end_turn", "gemini": "completed"}
        for provider in PROVIDERS:
            with self.subTest(provider=provider):
                turn = ps.parse_stream(provider, stream(provider, []))
                self.assertEqual((turn.calls, turn.stop), ((), stops[provider]))

    def test_empty_stream_is_incomplete(self):
        for provider in PROVIDERS:
            with self.subTest(provider=provider):
                self.assertRefused(provider, [], "STREAM_INCOMPLETE", event=None)

    def test_missing_terminal_event_is_incomplete(self):
        for provider in PROVIDERS:
            with self.subTest(provider=provider):
                self.assertRefused(provider, stream(provider)[:-1], "STREAM_INCOMPLETE")

    def test_anything_after_the_terminal_event_is_out_of_order(self):
        for provider in PROVIDERS:
            events = stream(provider)
            key = ps.PROTOCOLS[provider].type_key
            for extra in ({key: "totally.unknown"}, {key: "error"}, events[0]):
                with self.subTest(provider=provider, extra=extra[key]):
                    self.assertRefused(provider, inserted(provider, events, len(events), extra),
                                       "STREAM_OUT_OF_ORDER", event=len(events))

    def test_event_that_is_not_an_object_or_lacks_its_type_is_malformed(self):
        for provider in PROVIDERS:
            key = ps.PROTOCOLS[provider].type_key
            for bad in ([], "message_start", None, {}, {key: 7}, {key: None}):
                with self.subTest(provider=provider, bad=bad):
                    self.assertRefused(provider, [bad] + stream(provider), "STREAM_EVENT_MALFORMED", event=0)

    def test_duplicate_call_id_is_refused(self):
        for provider in PROVIDERS:
            with self.subTest(provider=provider):
                events = stream(provider, [("call_1", "get_order", ORDER7)] * 2)
                self.assertRefused(provider, events, "STREAM_DUPLICATE")

    def test_invalid_call_ids_and_names_are_refused(self):
        for provider in PROVIDERS:
            for call_id in ("", "call 1", "_call", "c" * 65, "call\n"):
                with self.subTest(provider=provider, call_id=call_id):
                    events = stream(provider, [(call_id, "get_order", ORDER7)])
                    self.assertRefused(provider, events, "STREAM_ID_INVALID")
            for name in ("", "get order", "get.order", "g" * 65, "get_order\n"):
                with self.subTest(provider=provider, name=name):
                    self.assertRefused(provider, stream(provider, [("call_1", name, ORDER7)]), "STREAM_NAME_INVALID")

    def test_longest_portable_ids_and_names_are_accepted(self):
        for provider in PROVIDERS:
            with self.subTest(provider=provider):
                turn = ps.parse_stream(provider, stream(provider, [("c" * 64, "g" * 64, ORDER7)], response_id="r" * 64))
                self.assertEqual((turn.response_id, turn.calls[0].call_id, turn.calls[0].name),
                                 ("r" * 64, "c" * 64, "g" * 64))

    def test_invalid_response_id_is_refused(self):
        for provider in PROVIDERS:
            for response_id in ("", "resp 1", "r" * 65):
                with self.subTest(provider=provider, response_id=response_id):
                    events = stream(provider, response_id=response_id)
                    self.assertRefused(provider, events, "STREAM_ID_INVALID", event=0)

    def test_unregistered_but_portable_tool_name_is_parsed_for_the_boundary_to_refuse(self):
        turn = ps.parse_stream("openai", stream("openai", [("call_1", "delete_everything", "{}")]))
        self.assertCalls(turn, [("call_1", "delete_everything", {})])

    def test_arguments_refused_like_the_strict_decoder_refuses_them(self):
        cases = {'{"n": 1e400}': "JSON_NON_FINITE", '{"n": NaN}': "JSON_NON_FINITE",
                 '{"n": 9007199254740992}': "JSON_NOT_PORTABLE", '{"a":1,"a":1}': "JSON_DUPLICATE_KEY",
                 '{"a":1} x': "JSON_INVALID", " ": "JSON_INVALID", '{"s":"\\ud800"}': "JSON_NOT_PORTABLE"}
        for provider in PROVIDERS:
            for text, detail in cases.items():
                with self.subTest(provider=provider, text=text):
                    self.assertRefused(provider, stream(provider, [("call_1", "get_order", text)]),
                                       "STREAM_ARGUMENTS_INVALID", detail, event=None)

    def test_arguments_that_are_not_an_object_are_refused(self):
        for provider in PROVIDERS:
            for text in ("[]", '"ORDER-7"', "7", "null", "true"):
                with self.subTest(provider=provider, text=text):
                    self.assertRefused(provider, stream(provider, [("call_1", "get_order", text)]),
                                       "STREAM_ARGUMENTS_NOT_OBJECT")

    def test_lone_surrogate_fragments_never_pair_up(self):
        # A character split at the UTF-16 level is refused, not silently joined.
        for provider in PROVIDERS:
            with self.subTest(provider=provider):
                events = stream(provider, [("call_1", "get_order", '{"n":"\ud83d\ude00"}')], fragment_chars=7)
                self.assertRefused(provider, events, "STREAM_ARGUMENTS_INVALID", "JSON_NOT_UTF8")

    def test_escapes_and_multibyte_characters_split_across_fragments(self):
        text = '{"order_ref":"ORDER-\\u0037","note":"caf\u00e9 \\"\u65e5\u672c\\" \U0001f600 \\\\"}'
        for provider in PROVIDERS:
            with self.subTest(provider=provider):
                turn = ps.parse_stream(provider, stream(provider, [("call_1", "get_order", text)], fragment_chars=1))
                self.assertEqual(turn.calls[0].arguments,
                                 {"order_ref": "ORDER-7", "note": 'caf\u00e9 "\u65e5\u672c" \U0001f600 \\'})

    def test_parsed_calls_hand_out_copies(self):
        turn = ps.parse_stream("anthropic", stream("anthropic"))
        proposal = turn.calls[0].proposal()
        proposal["arguments"]["order_ref"] = "ORDER-8"
        turn.view()["calls"][0]["arguments"]["order_ref"] = "ORDER-9"
        self.assertEqual(turn.calls[0].arguments, {"order_ref": "ORDER-7"})
        self.assertEqual(turn.content[1 - 1]["input"], {"order_ref": "ORDER-7"})


class TestOpenAIEvents(StreamTestCase):
    def test_sequence_numbers_may_skip_but_never_repeat_or_fall(self):
        events = [{**event, "sequence_number": 10 * number + 3} for number, event in enumerate(stream("openai"))]
        self.assertEqual(len(ps.parse_stream("openai", events).calls), 1)
        for at, number in ((3, 23), (3, 13), (1, 0)):
            with self.subTest(at=at, number=number):
                bad = [dict(event) for event in events]
                bad[at]["sequence_number"] = number
                self.assertRefused("openai", bad, "STREAM_SEQUENCE_INVALID", event=at)

    def test_missing_or_malformed_sequence_number_is_refused(self):
        for number in (None, -1, "3", True, 1.0):
            with self.subTest(number=number):
                events = stream("openai")
                events[2] = {**events[2], "sequence_number": number}
                self.assertRefused("openai", events, "STREAM_EVENT_MALFORMED", event=2)
        events = stream("openai")
        del events[0]["sequence_number"]
        self.assertRefused("openai", events, "STREAM_EVENT_MALFORMED", event=0)

    def test_first_sequence_number_zero_is_accepted(self):
        self.assertEqual(stream("openai")[0]["sequence_number"], 0)
        self.assertEqual(ps.parse_stream("openai", stream("openai")).stop, "completed")

    def test_added_call_must_start_with_empty_arguments(self):
        for arguments in ("{}", None, 0):
            with self.subTest(arguments=arguments):
                events = stream("openai")
                events[1] = {**events[1], "item": {**events[1]["item"], "arguments": arguments}}
                self.assertRefused("openai", events, "STREAM_EVENT_MALFORMED", event=1)

    def test_added_item_needs_a_string_type_and_a_valid_item_id(self):
        events = stream("openai")
        events[1] = {**events[1], "item": {**events[1]["item"], "type": None}}
        self.assertRefused("openai", events, "STREAM_EVENT_MALFORMED", event=1)
        events = stream("openai")
        events[1] = {**events[1], "item": {**events[1]["item"], "id": "fc 1"}}
        self.assertRefused("openai", events, "STREAM_ID_INVALID", event=1)
        events = stream("openai")
        events[1] = {**events[1], "item": "function_call"}
        self.assertRefused("openai", events, "STREAM_EVENT_MALFORMED", event=1)

    def test_output_index_must_be_a_natural_number(self):
        for index, code in ((-1, "STREAM_EVENT_MALFORMED"), ("0", "STREAM_EVENT_MALFORMED"),
                            (False, "STREAM_EVENT_MALFORMED"), ([0], "STREAM_EVENT_MALFORMED")):
            with self.subTest(index=index):
                self.assertRefused("openai", edited("openai", stream("openai"), "response.output_item.added",
                                                    output_index=index), code, event=1)

    def test_output_index_opened_twice_is_a_duplicate(self):
        events = stream("openai", [("call_1", "get_order", ORDER7), ("call_2", "get_order", ORDER7)])
        events = edited("openai", events, "response.output_item.added", 1, output_index=0)
        self.assertRefused("openai", events, "STREAM_DUPLICATE")

    def test_delta_keyed_by_another_item_id_is_not_open(self):
        events = edited("openai", stream("openai"), "response.function_call_arguments.delta", item_id="fc_9")
        self.assertRefused("openai", events, "STREAM_NOT_OPEN", event=2)

    def test_delta_for_a_message_item_is_not_open(self):
        events = stream("openai")
        message = {"type": "response.output_item.added", "output_index": 1,
                   "item": {"type": "message", "id": "msg_1", "role": "assistant", "content": []}}
        events = inserted("openai", events, 2, message)
        events = edited("openai", events, "response.function_call_arguments.delta", output_index=1, item_id="msg_1")
        self.assertRefused("openai", events, "STREAM_NOT_OPEN", event=3)

    def test_delta_after_the_arguments_are_done_is_out_of_order(self):
        events = stream("openai")
        at = position("openai", events, "response.function_call_arguments.done")
        late = {**events[at - 1]}
        self.assertRefused("openai", inserted("openai", events, at + 1, late), "STREAM_OUT_OF_ORDER", event=at + 1)

    def test_delta_after_the_item_is_done_is_not_open(self):
        events = stream("openai")
        at = position("openai", events, "response.output_item.done")
        late = {**events[at - 2]}
        self.assertRefused("openai", inserted("openai", events, at + 1, late), "STREAM_NOT_OPEN", event=at + 1)

    def test_delta_that_is_not_a_string_is_malformed(self):
        for delta in (None, 7, ["{"]):
            with self.subTest(delta=delta):
                events = edited("openai", stream("openai"), "response.function_call_arguments.delta", delta=delta)
                self.assertRefused("openai", events, "STREAM_EVENT_MALFORMED", event=2)

    def test_done_must_repeat_the_deltas_and_the_name(self):
        events = edited("openai", stream("openai"), "response.function_call_arguments.done", name="create_refund_draft")
        self.assertRefused("openai", events, "STREAM_INCONSISTENT")
        events = edited("openai", stream("openai"), "response.function_call_arguments.done", arguments=None)
        self.assertRefused("openai", events, "STREAM_INCONSISTENT")
        events = stream("openai")
        at = position("openai", events, "response.function_call_arguments.done")
        del events[at]["name"]  # the name is optional on this event
        self.assertEqual(len(ps.parse_stream("openai", events).calls), 1)

    def test_item_done_before_its_arguments_are_done_is_out_of_order(self):
        events = stream("openai")
        events = without("openai", events, position("openai", events, "response.function_call_arguments.done"))
        self.assertRefused("openai", events, "STREAM_OUT_OF_ORDER")

    def test_item_done_must_agree_with_the_stream(self):
        events = stream("openai")
        at = position("openai", events, "response.output_item.done")
        for field, value in (("arguments", '{"order_ref":"ORDER-8"}'), ("call_id", "call_2"), ("name", "other"),
                             ("id", "fc_9"), ("type", "message")):
            with self.subTest(field=field):
                bad = [dict(event) for event in events]
                bad[at] = {**bad[at], "item": {**bad[at]["item"], field: value}}
                self.assertRefused("openai", bad, "STREAM_INCONSISTENT", event=at)

    def test_item_done_marked_incomplete_is_truncated(self):
        events = stream("openai")
        at = position("openai", events, "response.output_item.done")
        events[at] = {**events[at], "item": {**events[at]["item"], "status": "incomplete"}}
        self.assertRefused("openai", events, "STREAM_TRUNCATED", event=at)

    def test_message_item_finishing_as_a_function_call_is_inconsistent(self):
        events = renumber([
            {"type": "response.created", "response": {"id": "resp_1"}},
            {"type": "response.output_item.added", "output_index": 0, "item": {"type": "message", "id": "msg_1"}},
            {"type": "response.output_item.done", "output_index": 0, "item": {"type": "function_call", "id": "msg_1"}},
            {"type": "response.completed", "response": {"id": "resp_1"}},
        ])
        self.assertRefused("openai", events, "STREAM_INCONSISTENT", event=2)
        events[2]["item"]["type"] = "message"
        self.assertEqual(ps.parse_stream("openai", events).calls, ())

    def test_completed_must_name_the_same_response_and_status(self):
        for change in ({"id": "resp_other"}, {"status": "incomplete"}):
            with self.subTest(change=change):
                events = stream("openai")
                events[-1] = {**events[-1], "response": {**events[-1]["response"], **change}}
                self.assertRefused("openai", events, "STREAM_INCONSISTENT", event=len(events) - 1)

    def test_completed_output_must_list_every_item_as_streamed(self):
        events = stream("openai")
        output = events[-1]["response"]["output"]
        for bad in ([], output * 2, "output", [{**output[0], "arguments": "{}"}], [{**output[0], "type": "message"}]):
            with self.subTest(bad=bad):
                changed = [dict(event) for event in events]
                changed[-1] = {**changed[-1], "response": {**changed[-1]["response"], "output": bad}}
                self.assertRefused("openai", changed, "STREAM_INCONSISTENT", event=len(events) - 1)
        changed = [dict(event) for event in events]
        changed[-1] = {**changed[-1], "response": {**changed[-1]["response"], "output": [7]}}
        self.assertRefused("openai", changed, "STREAM_EVENT_MALFORMED", event=len(events) - 1)

    def test_completed_without_output_is_accepted(self):
        events = stream("openai")
        del events[-1]["response"]["output"]
        self.assertEqual(len(ps.parse_stream("openai", events).calls), 1)

    def test_completed_while_an_item_is_open_is_incomplete(self):
        events = stream("openai")
        events = without("openai", events, position("openai", events, "response.output_item.done"))
        self.assertRefused("openai", events, "STREAM_INCOMPLETE")

    def test_incomplete_response_without_calls_is_a_turn(self):
        events = stream("openai", [])
        events[-1] = {**events[-1], "type": "response.incomplete",
                      "response": {**events[-1]["response"], "status": "incomplete"}}
        self.assertEqual(ps.parse_stream("openai", events).stop, "incomplete")

    def test_failed_response_is_a_provider_error(self):
        events = edited("openai", stream("openai"), "response.completed", type="response.failed")
        self.assertRefused("openai", events, "STREAM_PROVIDER_ERROR")

    def test_known_text_events_may_come_while_a_call_is_open(self):
        events = stream("openai")
        text = {"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 1, "delta": "hi"}
        self.assertEqual(len(ps.parse_stream("openai", inserted("openai", events, 3, text)).calls), 1)

    def test_items_the_provider_ran_itself_are_skipped(self):
        silent = ("message", "reasoning", "web_search_call", "file_search_call", "code_interpreter_call",
                  "image_generation_call", "mcp_call", "mcp_list_tools", "compaction")
        self.assertEqual(ps.OPENAI_SILENT_ITEMS, frozenset(silent))
        turn = ps.parse_stream("openai", openai_items(silent))
        self.assertCalls(turn, [("call_1", "get_order", {"order_ref": "ORDER-7"})])
        self.assertEqual(turn.calls[0].index, len(silent))

    def test_client_executed_items_are_refused_never_dropped(self):
        for kind in ("custom_tool_call", "computer_call", "local_shell_call", "shell_call", "apply_patch_call",
                     "mcp_approval_request"):
            with self.subTest(kind=kind):
                self.assertRefused("openai", openai_items([kind]), "STREAM_CALL_UNANSWERABLE", event=1)
                # the same with no function call at all: still never a turn with 0 calls
                events = openai_items([kind])
                self.assertRefused("openai", events[:3] + events[-1:], "STREAM_CALL_UNANSWERABLE", event=1)

    def test_an_unlisted_item_type_is_refused(self):
        for kind in ("program", "future_tool_call", "function_call_output"):
            with self.subTest(kind=kind):
                self.assertRefused("openai", openai_items([kind]), "STREAM_BLOCK_UNSUPPORTED", event=1)

    def test_item_done_must_keep_its_type(self):
        events = openai_items(["message"])
        events[2] = {**events[2], "item": {**events[2]["item"], "type": "reasoning"}}
        self.assertRefused("openai", events, "STREAM_INCONSISTENT", event=2)

    def test_an_index_gap_is_accepted_when_the_final_output_shows_what_stood_there(self):
        silent = {"type": "web_search_call", "id": "ws_0", "status": "completed"}
        events = openai_items([], call_index=1)
        events[-1]["response"]["output"].insert(0, silent)
        turn = ps.parse_stream("openai", events)
        self.assertCalls(turn, [("call_1", "get_order", {"order_ref": "ORDER-7"})])
        self.assertEqual(turn.calls[0].index, 1)

    def test_an_index_gap_never_hides_a_call(self):
        hidden = {"type": "function_call", "id": "fc_0", "call_id": "call_0", "name": "get_order",
                  "arguments": ORDER7, "status": "completed"}
        for name, first in (("a function call", hidden), ("a client-executed call", {**hidden, "type": "shell_call"}),
                            ("a type that is not a string", {**hidden, "type": ["message"]}),
                            ("an unlisted type", {**hidden, "type": "program"})):
            with self.subTest(gap=name):
                events = openai_items([], call_index=1)
                events[-1]["response"]["output"].insert(0, first)
                self.assertRefused("openai", events, "STREAM_INCONSISTENT", event=len(events) - 1)
        events = openai_items([], call_index=1)  # the output lists only what streamed: the gap is unexplained
        self.assertRefused("openai", events, "STREAM_INCONSISTENT", event=len(events) - 1)
        events = openai_items([], call_index=1)
        del events[-1]["response"]["output"]  # without the output a gap cannot be checked at all
        self.assertRefused("openai", events, "STREAM_INCONSISTENT", event=len(events) - 1)

    def test_an_empty_added_event_is_a_gap_the_final_output_must_explain(self):
        silent = {"type": "message", "id": "m_0", "status": "completed"}
        call_like = {"type": "function_call", "id": "fc_0", "call_id": "call_0", "name": "get_order",
                     "arguments": ORDER7, "status": "completed"}
        for empty in ({"type": "response.output_item.added", "output_index": 0, "item": None},
                      {"type": "response.output_item.added", "output_index": 0}):
            with self.subTest(empty=empty):
                base = openai_items([], call_index=1)
                events = inserted("openai", base, 1, empty)
                events[-1]["response"]["output"].insert(0, silent)
                turn = ps.parse_stream("openai", events)
                self.assertCalls(turn, [("call_1", "get_order", {"order_ref": "ORDER-7"})])
                events = inserted("openai", base, 1, empty)
                events[-1]["response"]["output"].insert(0, call_like)  # a call stood there: never lost
                self.assertRefused("openai", events, "STREAM_INCONSISTENT", event=len(events) - 1)
                events = inserted("openai", base, 1, empty)
                at = position("openai", events, "response.function_call_arguments.delta")
                stray = {"type": "response.function_call_arguments.delta", "output_index": 0, "item_id": "fc_0",
                         "delta": "{}"}
                self.assertRefused("openai", inserted("openai", events, at, stray), "STREAM_NOT_OPEN", event=at)
        events = inserted("openai", openai_items([]), 1,
                          {"type": "response.output_item.added", "output_index": 0, "item": None})
        self.assertRefused("openai", events, "STREAM_DUPLICATE", event=2)  # the call then opens at a taken index

    def test_an_index_gap_is_bounded_by_the_event_limit(self):
        silent = {"type": "message", "id": "m", "status": "completed"}
        for index, accepted in ((19, True), (20, False), (10**30, False)):
            with self.subTest(index=index):
                events = openai_items([], call_index=index)
                events[-1]["response"]["output"][:0] = [silent] * (index if accepted else 0)
                if accepted:
                    self.assertEqual(ps.parse_stream("openai", events, max_events=20).calls[0].index, index)
                else:
                    self.assertRefused("openai", events, "STREAM_OUT_OF_ORDER", event=1, max_events=20)

    def test_an_opened_index_below_the_highest_is_a_duplicate(self):
        events = openai_items([], call_index=2)
        late = {"type": "response.output_item.added", "output_index": 0,
                "item": {"type": "message", "id": "m", "status": "in_progress"}}
        self.assertRefused("openai", inserted("openai", events, 2, late), "STREAM_DUPLICATE", event=2)

    def test_interleaved_events_pass_while_a_call_is_open(self):
        kinds = ("response.queued", "response.reasoning_summary_part.added", "response.reasoning_summary_text.delta",
                 "response.reasoning_summary_text.done", "response.reasoning_summary_part.done",
                 "response.content_part.added", "response.output_text.delta", "response.output_text.annotation.added",
                 "response.output_text.done", "response.content_part.done", "response.web_search_call.searching",
                 "response.file_search_call.completed", "response.code_interpreter_call_code.delta",
                 "response.mcp_call_arguments.delta", "response.image_generation_call.partial_image")
        events = openai_items(["reasoning"])
        at = position("openai", events, "response.function_call_arguments.delta")
        for kind in kinds:
            events = inserted("openai", events, at, {"type": kind, "output_index": 0, "item_id": "it_0",
                                                     "delta": "{\"x\":", "summary_index": 0})
        self.assertCalls(ps.parse_stream("openai", events), [("call_1", "get_order", {"order_ref": "ORDER-7"})])

    def test_content_events_that_name_a_call_are_inconsistent(self):
        events = openai_items([])
        at = position("openai", events, "response.function_call_arguments.delta")
        for kind in ("response.output_text.delta", "response.web_search_call.completed"):
            with self.subTest(kind=kind):
                bad = inserted("openai", events, at, {"type": kind, "output_index": 0, "item_id": "fc_1", "delta": "}"})
                self.assertRefused("openai", bad, "STREAM_INCONSISTENT", event=at)
        for index in (1, -1, "0", None):  # an index that names no call is only content
            with self.subTest(index=index):
                ok = inserted("openai", events, at, {"type": "response.output_text.delta", "output_index": index})
                self.assertEqual(len(ps.parse_stream("openai", ok).calls), 1)

    def test_empty_string_arguments_are_not_json(self):
        events = openai_items([], call=("call_1", "get_order", ""))
        events = without("openai", events, position("openai", events, "response.function_call_arguments.delta"))
        self.assertRefused("openai", events, "STREAM_ARGUMENTS_INVALID", "JSON_INVALID")
        events = openai_items([], call=("call_1", "get_order", "{}"))
        self.assertCalls(ps.parse_stream("openai", events), [("call_1", "get_order", {})])

    def test_events_before_response_created_are_out_of_order(self):
        events = stream("openai")
        self.assertRefused("openai", renumber([events[1]] + events), "STREAM_OUT_OF_ORDER", event=0)
        self.assertRefused("openai", inserted("openai", events, 1, events[0]), "STREAM_OUT_OF_ORDER", event=1)

    def test_created_needs_a_response_object(self):
        events = edited("openai", stream("openai"), "response.created", response="resp_1")
        self.assertRefused("openai", events, "STREAM_EVENT_MALFORMED", event=0)

    def test_an_event_repeating_another_response_is_inconsistent(self):
        # response.queued and response.in_progress repeat the response: one naming another response
        # mid-stream is two streams spliced together, wherever it comes.
        events = stream("openai")
        for kind in ("response.queued", "response.in_progress"):
            for at in (1, 3):
                with self.subTest(kind=kind, at=at):
                    for response, code in (({"id": "resp_other"}, "STREAM_INCONSISTENT"),
                                           ({}, "STREAM_INCONSISTENT"), ("resp_synthetic", "STREAM_EVENT_MALFORMED")):
                        bad = inserted("openai", events, at, {"type": kind, "response": response})
                        self.assertRefused("openai", bad, code, event=at)
                    same = inserted("openai", events, at, {"type": kind, "response": {"id": "resp_synthetic"}})
                    self.assertEqual(len(ps.parse_stream("openai", same).calls), 1)


class TestAnthropicEvents(StreamTestCase):
    def turn_events(self, blocks, reason="tool_use"):
        events = [{"type": "message_start", "message": {"id": "msg_1", "content": []}}]
        for index, block in enumerate(blocks):
            events += [{"type": "content_block_start", "index": index, "content_block": block[0]}]
            events += [{"type": "content_block_delta", "index": index, "delta": delta} for delta in block[1]]
            events += [{"type": "content_block_stop", "index": index}]
        return events + [{"type": "message_delta", "delta": {"stop_reason": reason}}, {"type": "message_stop"}]

    def tool(self, call_id="toolu_1", parts=(ORDER7,)):
        return ({"type": "tool_use", "id": call_id, "name": "get_order", "input": {}},
                [{"type": "input_json_delta", "partial_json": part} for part in parts])

    def text(self, start="", parts=()):
        return ({"type": "text", "text": start}, [{"type": "text_delta", "text": part} for part in parts])

    def test_content_echoes_text_and_tool_use_in_index_order(self):
        turn = ps.parse_stream("anthropic", self.turn_events([self.text("On it", [": ", "checking."]), self.tool()]))
        self.assertEqual(list(turn.content), [
            {"type": "text", "text": "On it: checking."},
            {"type": "tool_use", "id": "toolu_1", "name": "get_order", "input": {"order_ref": "ORDER-7"}}])

    def test_empty_text_block_is_left_out_of_the_echo(self):
        turn = ps.parse_stream("anthropic", self.turn_events([self.text(), self.tool()]))
        self.assertEqual([block["type"] for block in turn.content], ["tool_use"])
        self.assertEqual(turn.calls[0].index, 1)

    def test_whitespace_only_text_blocks_are_left_out_and_text_around_whitespace_kept(self):
        # Claude streams "\n\n" before a tool_use; the Messages API refuses such a block in a request.
        for block in (self.text("", ["\n\n"]), self.text(" ", ["\t", "\r\n"]), self.text("\u3000")):
            with self.subTest(block=block):
                turn = ps.parse_stream("anthropic", self.turn_events([block, self.tool()]))
                self.assertEqual([item["type"] for item in turn.content], ["tool_use"])
        turn = ps.parse_stream("anthropic", self.turn_events([self.text("\n", [" a ", "\n"]), self.tool()]))
        self.assertEqual(turn.content[0], {"type": "text", "text": "\n a \n"})

    def test_block_types_this_layer_cannot_echo_are_refused(self):
        for block in ({"type": "thinking", "thinking": ""}, {"type": "server_tool_use", "id": "srvtoolu_1"},
                      {"type": "redacted_thinking", "data": "x"}):
            with self.subTest(block=block):
                self.assertRefused("anthropic", self.turn_events([(block, [])]), "STREAM_BLOCK_UNSUPPORTED", event=1)
        for block in ({"type": None}, {}, {"type": ["text"]}):
            with self.subTest(block=block):
                self.assertRefused("anthropic", self.turn_events([(block, [])]), "STREAM_EVENT_MALFORMED", event=1)

    def test_every_block_the_readme_lists_as_unsupported_is_refused_where_it_opens(self):
        with open(HERE / "README.md", encoding="utf-8") as handle:
            section = handle.read().split("### Unsupported content blocks")[1].split("\n## ")[0]
        rows = [line.split(" | ")[0] for line in section.splitlines() if line.startswith("| `")]
        listed = [name for row in rows for name in re.findall(r"`([a-z_]+)`", row)]
        self.assertEqual(len(listed), len(set(listed)))
        self.assertLessEqual({"thinking", "server_tool_use", "compaction", "fallback"}, set(listed))
        self.assertFalse({"text", "tool_use"} & set(listed))
        deltas = {"compaction": [{"type": "compaction_delta", "content": "Summary."}]}
        for kind in listed + ["block_added_later"]:
            with self.subTest(block=kind):
                events = self.turn_events([({"type": kind}, deltas.get(kind, [])), self.tool()])
                self.assertRefused("anthropic", events, "STREAM_BLOCK_UNSUPPORTED", event=1)

    def test_tool_use_must_start_with_empty_input(self):
        for start in ({"order_ref": "ORDER-7"}, None, "{}"):
            with self.subTest(start=start):
                tool = self.tool()
                events = self.turn_events([({**tool[0], "input": start}, tool[1])])
                self.assertRefused("anthropic", events, "STREAM_EVENT_MALFORMED", event=1)
        tool = self.tool()
        block = dict(tool[0])
        del block["input"]
        self.assertRefused("anthropic", self.turn_events([(block, tool[1])]), "STREAM_EVENT_MALFORMED", event=1)

    def test_delta_type_must_match_its_block(self):
        text_on_tool = (self.tool()[0], [{"type": "text_delta", "text": ORDER7}])
        json_on_text = (self.text()[0], [{"type": "input_json_delta", "partial_json": "x"}])
        unknown = (self.tool()[0], [{"type": "citations_delta", "citation": {}}])
        for block in (text_on_tool, json_on_text, unknown):
            with self.subTest(block=block[1][0]["type"]):
                self.assertRefused("anthropic", self.turn_events([block]), "STREAM_INCONSISTENT", event=2)

    def test_delta_needs_an_object_and_a_string_fragment(self):
        for delta in ("x", None):
            with self.subTest(delta=delta):
                events = self.turn_events([self.tool()])
                events[2] = {**events[2], "delta": delta}
                self.assertRefused("anthropic", events, "STREAM_EVENT_MALFORMED", event=2)
        events = self.turn_events([self.tool()])
        events[2] = {**events[2], "delta": {"type": "input_json_delta", "partial_json": 7}}
        self.assertRefused("anthropic", events, "STREAM_EVENT_MALFORMED", event=2)

    def test_block_stopped_twice_is_not_open(self):
        events = self.turn_events([self.tool()])
        events.insert(4, {"type": "content_block_stop", "index": 0})
        self.assertRefused("anthropic", events, "STREAM_NOT_OPEN", event=4)

    def test_block_index_must_count_up_from_zero(self):
        events = self.turn_events([self.tool()])
        for event in events[1:4]:
            event["index"] = 1
        self.assertRefused("anthropic", events, "STREAM_OUT_OF_ORDER", event=1)

    def test_message_stop_without_message_delta_is_out_of_order(self):
        events = self.turn_events([self.tool()])
        del events[-2]
        self.assertRefused("anthropic", events, "STREAM_OUT_OF_ORDER", event=len(events) - 1)

    def test_no_block_may_start_after_message_delta(self):
        events = self.turn_events([self.tool()])
        events.insert(-1, {"type": "content_block_start", "index": 1, "content_block": self.tool("toolu_2")[0]})
        self.assertRefused("anthropic", events, "STREAM_OUT_OF_ORDER", event=len(events) - 2)

    def test_empty_input_reads_as_an_empty_object(self):
        events = stream("anthropic", [("call_1", "get_order", "")])
        self.assertCalls(ps.parse_stream("anthropic", events), [("call_1", "get_order", {})])

    def test_a_delta_type_that_is_not_a_string_is_malformed(self):
        for kind in (["input_json_delta"], {"a": 1}, None, 7):
            with self.subTest(kind=kind):
                events = edited("anthropic", stream("anthropic"), "content_block_delta",
                                delta={"type": kind, "partial_json": "{"})
                self.assertRefused("anthropic", events, "STREAM_EVENT_MALFORMED",
                                   event=position("anthropic", events, "content_block_delta"))

    def test_the_first_block_must_be_at_index_zero(self):
        events = stream("anthropic")
        events = [{**event, "index": 1} if "index" in event else event for event in events]
        self.assertRefused("anthropic", events, "STREAM_OUT_OF_ORDER", event=1)

    def test_stop_reason_must_be_a_string(self):
        events = self.turn_events([self.tool()], reason=None)
        self.assertRefused("anthropic", events, "STREAM_EVENT_MALFORMED", event=len(events) - 2)

    def test_message_stop_with_a_block_open_is_incomplete(self):
        events = self.turn_events([self.tool()])
        del events[3]
        self.assertRefused("anthropic", events, "STREAM_INCOMPLETE", event=len(events) - 1)

    def test_stop_reasons_against_calls(self):
        cases = (("tool_use", [], "STREAM_STOP_MISMATCH"), ("end_turn", [self.tool()], "STREAM_STOP_MISMATCH"),
                 ("stop_sequence", [self.tool()], "STREAM_STOP_MISMATCH"),
                 ("max_tokens", [self.tool()], "STREAM_TRUNCATED"),
                 ("model_context_window_exceeded", [self.tool()], "STREAM_TRUNCATED"),
                 ("a_future_reason", [self.tool()], "STREAM_STOP_MISMATCH"))
        for reason, blocks, code in cases:
            with self.subTest(reason=reason):
                self.assertRefused("anthropic", self.turn_events(blocks, reason), code)

    def test_stop_reasons_without_calls_give_a_turn(self):
        for reason in ("end_turn", "max_tokens", "refusal", "pause_turn", "a_future_reason"):
            with self.subTest(reason=reason):
                turn = ps.parse_stream("anthropic", self.turn_events([self.text("x")], reason))
                self.assertEqual((turn.stop, turn.calls), (reason, ()))

    def test_ping_may_come_before_message_start_and_while_closing(self):
        events = self.turn_events([self.tool()])
        events = [{"type": "ping"}] + events[:-1] + [{"type": "ping"}, events[-1]]
        self.assertEqual(ps.parse_stream("anthropic", events).stop, "tool_use")

    def test_unknown_event_while_only_a_text_block_is_open_is_skipped(self):
        events = self.turn_events([self.text("a", ["b"])], "end_turn")
        events.insert(2, {"type": "content_block_shimmer", "index": 0})
        self.assertEqual(ps.parse_stream("anthropic", events).content, ({"type": "text", "text": "ab"},))

    def test_text_with_a_lone_surrogate_is_malformed(self):
        events = self.turn_events([self.text("\ud800")], "end_turn")
        self.assertRefused("anthropic", events, "STREAM_EVENT_MALFORMED", event=None)

    def test_message_start_needs_a_message_object(self):
        events = self.turn_events([self.tool()])
        events[0] = {"type": "message_start", "message": "msg_1"}
        self.assertRefused("anthropic", events, "STREAM_EVENT_MALFORMED", event=0)

    def test_message_start_with_content_is_malformed(self):
        # The SDK starts its message from message_start's content and indexes every later block
        # after it: a block there would be a call (or a shift of every index) this parser never saw.
        block = {"type": "tool_use", "id": "toolu_0", "name": "get_order", "input": {"order_ref": "ORDER-8"}}
        for content in ([block], [{"type": "text", "text": "x"}], None, {}):
            with self.subTest(content=content):
                events = self.turn_events([self.tool()])
                events[0]["message"]["content"] = content
                self.assertRefused("anthropic", events, "STREAM_EVENT_MALFORMED", event=0)
        events = self.turn_events([self.tool()])
        del events[0]["message"]["content"]
        self.assertEqual(len(ps.parse_stream("anthropic", events).calls), 1)


class TestGeminiEvents(StreamTestCase):
    def test_outputs_on_an_interaction_is_the_other_revision(self):
        for kind in ("interaction.created", "interaction.completed"):
            with self.subTest(kind=kind):
                events = stream("gemini")
                at = position("gemini", events, kind)
                events[at] = {**events[at], "interaction": {**events[at]["interaction"], "outputs": []}}
                self.assertRefused("gemini", events, "STREAM_REVISION_MISMATCH", event=at)

    def test_legacy_content_events_are_refused_anywhere(self):
        for kind in ("content.start", "content.delta", "content.stop"):
            with self.subTest(kind=kind):
                events = [{"event_type": kind}] + stream("gemini")
                self.assertRefused("gemini", events, "STREAM_REVISION_MISMATCH", event=0)
                events = stream("gemini")
                self.assertRefused("gemini", inserted("gemini", events, 2, {"event_type": kind}),
                                   "STREAM_REVISION_MISMATCH", event=2)

    def test_function_call_step_must_start_without_arguments(self):
        events = stream("gemini")
        events[1] = {**events[1], "step": {**events[1]["step"], "arguments": {"order_ref": "ORDER-7"}}}
        self.assertRefused("gemini", events, "STREAM_EVENT_MALFORMED", event=1)
        events[1]["step"]["arguments"] = {}
        self.assertEqual(len(ps.parse_stream("gemini", events).calls), 1)

    def test_step_needs_a_string_type(self):
        for kind in (3, None, {"type": "function_call"}):
            with self.subTest(kind=kind):
                events = stream("gemini")
                events[1] = {**events[1], "step": {"type": kind}}
                self.assertRefused("gemini", events, "STREAM_EVENT_MALFORMED", event=1)

    def test_function_call_step_may_omit_its_empty_arguments(self):
        events = stream("gemini")
        self.assertNotIn("arguments", events[1]["step"])
        self.assertEqual(ps.parse_stream("gemini", events).calls[0].arguments, {"order_ref": "ORDER-7"})
        events[1] = {**events[1], "step": {**events[1]["step"], "arguments": ""}}
        self.assertRefused("gemini", events, "STREAM_EVENT_MALFORMED", event=1)

    def test_call_delta_must_be_an_arguments_delta(self):
        events = edited("gemini", stream("gemini"), "step.delta", delta={"type": "text", "text": ORDER7})
        self.assertRefused("gemini", events, "STREAM_INCONSISTENT", event=2)

    def test_deltas_of_other_steps_are_not_read(self):
        events = stream("gemini")
        thought = [{"event_type": "step.start", "index": 0, "step": {"type": "thought"}},
                   {"event_type": "step.delta", "index": 0, "delta": {"type": "thought_summary", "text": 7}},
                   {"event_type": "step.stop", "index": 0}]
        for event in events[1:-1]:
            event["index"] = 1
        turn = ps.parse_stream("gemini", events[:1] + thought + events[1:])
        self.assertEqual([call.index for call in turn.calls], [1])
        self.assertEqual(turn.content, ())

    def test_completed_must_name_the_same_interaction(self):
        events = stream("gemini")
        events[-1] = {**events[-1], "interaction": {**events[-1]["interaction"], "id": "other"}}
        self.assertRefused("gemini", events, "STREAM_INCONSISTENT", event=len(events) - 1)

    def test_completed_steps_must_list_every_step_as_streamed(self):
        # The final interaction need not list its steps; when it does, they must be exactly the
        # streamed ones: a call listed there and never streamed would otherwise be dropped.
        def with_steps(calls, steps, thought=False):
            events = stream("gemini", calls)
            if thought:
                for event in events[1:-1]:
                    event["index"] += 1
                events[1:1] = [{"event_type": "step.start", "index": 0, "step": {"type": "thought"}},
                               {"event_type": "step.stop", "index": 0}]
            events[-1]["interaction"]["steps"] = steps
            return events

        call = {"type": "function_call", "id": "call_1", "name": "get_order", "arguments": {"order_ref": "ORDER-7"}}
        other = {**call, "id": "call_2", "name": "create_refund_draft",
                 "arguments": {"order_ref": "ORDER-7", "reason": "damaged"}}
        one = [("call_1", "get_order", ORDER7)]
        for events in (with_steps(one, [call]), with_steps(one, [{**call, "arguments": {"order_ref": "ORDER-7"}}]),
                       with_steps(one, [{key: value for key, value in call.items() if key != "arguments"}]),
                       with_steps(one, [{"type": "thought"}, call], thought=True), with_steps([], [])):
            steps = events[-1]["interaction"]["steps"]
            self.assertEqual(len(ps.parse_stream("gemini", events).calls),
                             sum(step["type"] == "function_call" for step in steps))
        numbered = [("call_1", "get_order", '{"n":1}')]
        for events in (with_steps(one, [call, other]), with_steps(one, []), with_steps([], [call]),
                       with_steps(one, [{**call, "arguments": {"order_ref": "ORDER-8"}}]),
                       with_steps(one, [{**call, "id": "call_2"}]), with_steps(one, [{**call, "name": "get_orders"}]),
                       with_steps(one, [{**call, "type": "thought"}]), with_steps(one, {"0": call}),
                       with_steps(numbered, [{**call, "arguments": {"n": True}}]),
                       with_steps(numbered, [{**call, "arguments": {"n": 1.0}}]),
                       with_steps(one, [{"type": "google_search_call"}, call], thought=True)):
            with self.subTest(steps=events[-1]["interaction"]["steps"]):
                self.assertRefused("gemini", events, "STREAM_INCONSISTENT", event=len(events) - 1)
        self.assertRefused("gemini", with_steps(one, ["call_1"]), "STREAM_EVENT_MALFORMED", event=len(stream("gemini")) - 1)

    def test_statuses_against_calls(self):
        cases = (("failed", True, "STREAM_PROVIDER_ERROR"), ("cancelled", False, "STREAM_PROVIDER_ERROR"),
                 ("incomplete", True, "STREAM_TRUNCATED"), ("completed", True, "STREAM_STOP_MISMATCH"),
                 ("requires_action", False, "STREAM_STOP_MISMATCH"), (None, True, "STREAM_EVENT_MALFORMED"))
        for status, with_call, code in cases:
            with self.subTest(status=status, with_call=with_call):
                events = stream("gemini", [("call_1", "get_order", ORDER7)] if with_call else [])
                events[-1] = {**events[-1], "interaction": {**events[-1]["interaction"], "status": status}}
                self.assertRefused("gemini", events, code, event=len(events) - 1)

    def test_a_delta_type_that_is_not_a_string_is_malformed(self):
        for kind in (["arguments_delta"], {"a": 1}, None):
            with self.subTest(kind=kind):
                events = edited("gemini", stream("gemini"), "step.delta", delta={"type": kind, "arguments": "{"})
                self.assertRefused("gemini", events, "STREAM_EVENT_MALFORMED",
                                   event=position("gemini", events, "step.delta"))

    def test_statuses_that_stop_at_a_limit_are_cut(self):
        for status in ("requires_continuation", "budget_exceeded", "incomplete"):
            with self.subTest(status=status):
                events = stream("gemini")
                events[-1] = {**events[-1], "interaction": {**events[-1]["interaction"], "status": status}}
                self.assertRefused("gemini", events, "STREAM_TRUNCATED", event=len(events) - 1)
                events = stream("gemini", [])
                events[-1] = {**events[-1], "interaction": {**events[-1]["interaction"], "status": status}}
                turn = ps.parse_stream("gemini", events)
                self.assertEqual((turn.stop, turn.calls), (status, ()))

    USER_INPUT = {"type": "user_input", "content": [{"type": "text", "text": "Where is ORDER-7?"}]}
    LISTED_CALL = {"type": "function_call", "id": "call_1", "name": "get_order", "arguments": {"order_ref": "ORDER-7"}}

    def counted_input(self, skipped=1, steps=None, calls=(("call_1", "get_order", ORDER7),)):
        """A stream numbered as Google's SDK numbers it: its steps start at `skipped`; `steps`, if
        given, is what interaction.completed lists."""
        events = stream("gemini", calls)
        events = [{**event, "index": event["index"] + skipped} if "index" in event else event for event in events]
        if steps is not None:
            events[-1] = {**events[-1], "interaction": {**events[-1]["interaction"], "steps": steps}}
        return events

    def test_steps_counting_the_users_input_are_read_where_the_final_list_shows_it(self):
        # Google's SDK (google-genai 3.6.1, its test of streamed events feeding the next turn)
        # counts the user's input as step 0 and lists it first in interaction.completed: the
        # skipped index is shown to hold the input, so no call can have stood there.
        turn = ps.parse_stream("gemini", self.counted_input(1, [self.USER_INPUT, self.LISTED_CALL]))
        self.assertCalls(turn, [("call_1", "get_order", {"order_ref": "ORDER-7"})])
        self.assertEqual((turn.stop, turn.response_id, turn.calls[0].index), ("requires_action", "resp_synthetic", 1))
        run = ps.run_turn(turn, ps.demo_dispatcher(), ps.DEMO_HOST)
        self.assertEqual(run.payload["previous_interaction_id"], "resp_synthetic")
        self.assertEqual([(step["type"], step["call_id"], step["name"]) for step in run.payload["input"]],
                         [("function_result", "call_1", "get_order")])
        # Two inputs, then a text step and two calls, at indexes 2 to 4.
        two = [("call_1", "get_order", ORDER7), ("call_2", "create_refund_draft", REFUND7)]
        events = self.counted_input(2, calls=two, steps=[
            self.USER_INPUT, self.USER_INPUT, {"type": "model_output"}, self.LISTED_CALL,
            {"type": "function_call", "id": "call_2", "name": "create_refund_draft"}])
        events[1:1] = [{"event_type": "step.start", "index": 2, "step": {"type": "model_output"}},
                       {"event_type": "step.delta", "index": 2, "delta": {"type": "text", "text": "Checking."}},
                       {"event_type": "step.stop", "index": 2}]
        events = [{**event, "index": event["index"] + 1} if "index" in event and position > 3 else event
                  for position, event in enumerate(events)]
        turn = ps.parse_stream("gemini", events)
        self.assertCalls(turn, [("call_1", "get_order", {"order_ref": "ORDER-7"}),
                                ("call_2", "create_refund_draft", {"order_ref": "ORDER-7", "reason": "damaged"})])
        self.assertEqual([call.index for call in turn.calls], [3, 4])
        # The SDK test's own turn: one text step at index 1, status completed.
        events = [{"event_type": "interaction.created", "interaction": {"id": "v1_turn", "status": "in_progress"}},
                  {"event_type": "step.start", "index": 1, "step": {"type": "model_output", "content": []}},
                  {"event_type": "step.delta", "index": 1, "delta": {"type": "text", "text": "Hello"}},
                  {"event_type": "step.stop", "index": 1},
                  {"event_type": "interaction.completed", "interaction": {
                      "id": "v1_turn", "status": "completed", "steps": [self.USER_INPUT, {"type": "model_output"}]}}]
        self.assertEqual((ps.parse_stream("gemini", events).stop, ps.parse_stream("gemini", events).calls),
                         ("completed", ()))

    def test_skipped_indexes_the_final_list_does_not_show_as_input_are_refused(self):
        last = len(stream("gemini")) - 1
        model_output = {"type": "model_output", "content": [{"type": "text", "text": "Hi"}]}
        # No list: nothing shows that no call stood at index 0 (a refusal is a retry, a lost call is not).
        self.assertRefused("gemini", self.counted_input(1), "STREAM_OUT_OF_ORDER", event=last)
        text_only = [{"event_type": "interaction.created", "interaction": {"id": "v1_turn", "status": "in_progress"}},
                     {"event_type": "step.start", "index": 1, "step": {"type": "model_output"}},
                     {"event_type": "step.stop", "index": 1},
                     {"event_type": "interaction.completed", "interaction": {"id": "v1_turn", "status": "completed"}}]
        self.assertRefused("gemini", text_only, "STREAM_OUT_OF_ORDER", event=3)
        refused = {
            "a call never streamed at index 0": self.counted_input(1, [{**self.LISTED_CALL, "id": "call_0"},
                                                                       self.LISTED_CALL]),
            "model output at index 0": self.counted_input(1, [model_output, self.LISTED_CALL]),
            "a thought at index 0": self.counted_input(1, [{"type": "thought"}, self.LISTED_CALL]),
            "two inputs for one skipped index": self.counted_input(1, [self.USER_INPUT, self.USER_INPUT,
                                                                       self.LISTED_CALL]),
            "one input for two skipped indexes": self.counted_input(2, [self.USER_INPUT, self.LISTED_CALL]),
            "input listed, indexes from 0": self.counted_input(0, [self.USER_INPUT, self.LISTED_CALL]),
            "a listed step that never streamed": self.counted_input(1, [self.USER_INPUT, self.LISTED_CALL,
                                                                        {"type": "future_step_kind"}]),
            "input listed after the call": self.counted_input(1, [self.LISTED_CALL, self.USER_INPUT]),
        }
        for label, events in refused.items():
            with self.subTest(label):
                self.assertRefused("gemini", events, "STREAM_INCONSISTENT", event=last)
        self.assertRefused("gemini", self.counted_input(1, {"0": self.USER_INPUT}), "STREAM_INCONSISTENT", event=last)

    def test_only_the_indexes_before_the_first_step_may_be_skipped(self):
        events = self.counted_input(1, calls=(("call_1", "get_order", ORDER7), ("call_2", "get_order", ORDER7)))
        second = position("gemini", events, "step.start", 1)
        events[second:] = [{**event, "index": 3} if "index" in event else event for event in events[second:]]
        self.assertRefused("gemini", events, "STREAM_OUT_OF_ORDER", event=second)
        events = self.counted_input(1, [self.USER_INPUT, self.LISTED_CALL])
        self.assertRefused("gemini", inserted("gemini", events, 2, {"event_type": "step.delta", "index": 0,
                                                                    "delta": {"type": "arguments_delta", "arguments": "{}"}}),
                           "STREAM_NOT_OPEN", event=2)
        self.assertRefused("gemini", inserted("gemini", events, 2, {"event_type": "step.start", "index": 0,
                                                                    "step": {"type": "thought"}}),
                           "STREAM_DUPLICATE", event=2)
        # Never wider than the stream could have filled: a hostile index allocates nothing, and the
        # event limit bounds the skip (both sides).
        size = len(stream("gemini"))
        for skipped in (size - 1, size, 10 ** 30):
            with self.subTest(skipped=skipped):
                events = self.counted_input(skipped, [self.USER_INPUT] * min(skipped, size) + [self.LISTED_CALL])
                if skipped < size:
                    self.assertEqual(ps.parse_stream("gemini", events, max_events=size).calls[0].index, skipped)
                else:
                    self.assertRefused("gemini", events, "STREAM_OUT_OF_ORDER", event=1, max_events=size)

    def test_server_steps_and_thoughts_pass_before_a_call(self):
        steps = [({"type": "google_search_call", "id": "s1"}, {"type": "google_search_call", "arguments": {"q": ["x"]}}),
                 ({"type": "google_search_result", "call_id": "s1"}, {"type": "google_search_result", "is_error": False}),
                 ({"type": "thought"}, {"type": "thought_signature", "signature": "abc"})]
        events = stream("gemini")
        head, tail = events[:1], events[1:]
        extra = []
        for index, (step, delta) in enumerate(steps):
            extra += [{"event_type": "step.start", "index": index, "step": step},
                      {"event_type": "step.delta", "index": index, "delta": delta},
                      {"event_type": "step.stop", "index": index}]
        tail = [{**event, "index": event["index"] + len(steps)} if "index" in event else event for event in tail]
        turn = ps.parse_stream("gemini", head + extra + tail)
        self.assertCalls(turn, [("call_1", "get_order", {"order_ref": "ORDER-7"})])
        self.assertEqual(turn.calls[0].index, 3)

    def test_every_step_the_provider_runs_is_tracked_beside_a_call(self):
        for kind in sorted(ps.GEMINI_SILENT_STEPS):
            with self.subTest(kind=kind):
                events = stream("gemini")
                tail = [{**event, "index": event["index"] + 1} if "index" in event else event for event in events[1:]]
                steps = [{"event_type": "step.start", "index": 0, "step": {"type": kind, "id": "s1"}},
                         {"event_type": "step.delta", "index": 0, "delta": {"type": kind}},
                         {"event_type": "step.stop", "index": 0}]
                turn = ps.parse_stream("gemini", events[:1] + steps + tail)
                self.assertCalls(turn, [("call_1", "get_order", {"order_ref": "ORDER-7"})])

    def test_a_step_type_the_table_does_not_list_is_refused_never_dropped(self):
        # The second call's step under a type the table does not list: tracked silently, it would
        # leave a step the client may have to answer unanswered while the other calls run. A
        # function_result streamed in the turn would be a call the server answered itself.
        events = stream("gemini", PARALLEL)
        at = position("gemini", events, "step.start", 1)
        for kind in ("function_call_v2", "Function_call", "", "function_result", "client_tool_call"):
            with self.subTest(kind=kind):
                changed = [dict(event) for event in events]
                changed[at] = {**changed[at], "step": {**changed[at]["step"], "type": kind}}
                self.assertRefused("gemini", changed, "STREAM_BLOCK_UNSUPPORTED", event=at)

    def test_incomplete_without_calls_is_a_turn(self):
        events = stream("gemini", [])
        events[-1]["interaction"]["status"] = "incomplete"
        self.assertEqual(ps.parse_stream("gemini", events).stop, "incomplete")

    def test_status_update_before_created_is_out_of_order(self):
        events = [{"event_type": "interaction.status_update", "status": "in_progress"}] + stream("gemini")
        self.assertRefused("gemini", events, "STREAM_OUT_OF_ORDER", event=0)

    def test_status_update_for_another_interaction_is_inconsistent(self):
        events = stream("gemini")
        for at in (1, 3):
            with self.subTest(at=at):
                for other in ("v1_other", None, 7):
                    bad = inserted("gemini", events, at, {"event_type": "interaction.status_update",
                                                          "interaction_id": other, "status": "in_progress"})
                    self.assertRefused("gemini", bad, "STREAM_INCONSISTENT", event=at)
                for update in ({"interaction_id": "resp_synthetic"}, {}):
                    same = inserted("gemini", events, at, {"event_type": "interaction.status_update", **update})
                    self.assertEqual(len(ps.parse_stream("gemini", same).calls), 1)


class TestUnknownEventRule(StreamTestCase):
    """Skipped while no call is open; refused while one is; nothing after the end."""

    def unknown(self, provider):
        return {ps.PROTOCOLS[provider].type_key: "a.future.event", "index": 0, "delta": {"x": 1}}

    def test_skipped_before_the_start_and_between_calls(self):
        for provider in PROVIDERS:
            with self.subTest(provider=provider):
                events = stream(provider, [("call_1", "get_order", ORDER7), ("call_2", "get_order", ORDER7)])
                first_close = position(provider, events, {"openai": "response.output_item.done",
                                                          "anthropic": "content_block_stop",
                                                          "gemini": "step.stop"}[provider])
                events = inserted(provider, events, first_close + 1, self.unknown(provider))
                events = inserted(provider, events, 0, self.unknown(provider))
                self.assertEqual(len(ps.parse_stream(provider, events).calls), 2)

    def test_refused_while_a_call_is_open(self):
        for provider in PROVIDERS:
            with self.subTest(provider=provider):
                events = inserted(provider, stream(provider), 2, self.unknown(provider))
                self.assertRefused(provider, events, "STREAM_UNKNOWN_EVENT", event=2)

    def test_openai_call_counts_as_open_until_its_item_is_done(self):
        events = stream("openai")
        at = position("openai", events, "response.output_item.done")
        self.assertRefused("openai", inserted("openai", events, at, self.unknown("openai")), "STREAM_UNKNOWN_EVENT")
        after = inserted("openai", events, at + 1, self.unknown("openai"))
        self.assertEqual(len(ps.parse_stream("openai", after).calls), 1)

    def test_unknown_keys_on_known_events_are_tolerated(self):
        for provider in PROVIDERS:
            with self.subTest(provider=provider):
                events = [{**event, "added_later": {"x": [1, 2]}} for event in stream(provider)]
                self.assertEqual(len(ps.parse_stream(provider, events).calls), 1)


class TestParseStream(StreamTestCase):
    def test_unknown_provider_is_refused(self):
        for provider in ("OpenAI", "openai-responses-v2", "", None, 7):
            with self.subTest(provider=provider):
                with self.assertRaises(ps.StreamError) as caught:
                    ps.parse_stream(provider, stream("openai"))
                self.assertEqual(caught.exception.code, "STREAM_PROVIDER_UNKNOWN")

    def test_adapter_revision_names_the_provider_too(self):
        turn = ps.parse_stream("gemini-interactions-v1", stream("gemini"))
        self.assertEqual(turn.adapter_revision, "gemini-interactions-v1")

    def test_events_must_be_a_list_or_tuple(self):
        self.assertEqual(len(ps.parse_stream("anthropic", tuple(stream("anthropic"))).calls), 1)
        for events in (iter(stream("anthropic")), {"events": []}, "message_start", None):
            with self.subTest(events=type(events).__name__):
                self.assertRefused("anthropic", events, "STREAM_EVENTS_INVALID", event=None)


# ============================================================================================
# Bounds: every limit on both sides, for every provider
# ============================================================================================


class TestBounds(StreamTestCase):
    def test_event_limit(self):
        for provider in PROVIDERS:
            with self.subTest(provider=provider):
                events = stream(provider)
                self.assertEqual(len(ps.parse_stream(provider, events, max_events=len(events)).calls), 1)
                self.assertRefused(provider, events, "STREAM_TOO_MANY_EVENTS", event=None, max_events=len(events) - 1)

    def test_default_event_limit_admits_exactly_ten_thousand(self):
        self.assertEqual(ps.MAX_EVENTS, 10_000)
        for provider in PROVIDERS:
            with self.subTest(provider=provider):
                self.assertEqual(len(ps.parse_stream(provider, ps.synthetic_stream(provider, 10_000)).calls), 1)
                self.assertRefused(provider, ps.synthetic_stream(provider, 10_001), "STREAM_TOO_MANY_EVENTS")

    def test_call_limit(self):
        calls = [(f"call_{n}", "get_order", ORDER7) for n in range(3)]
        for provider in PROVIDERS:
            with self.subTest(provider=provider):
                self.assertEqual(len(ps.parse_stream(provider, stream(provider, calls), max_calls=3).calls), 3)
                self.assertRefused(provider, stream(provider, calls), "STREAM_TOO_MANY_CALLS", max_calls=2)

    def test_default_call_limit(self):
        calls = [(f"call_{n}", "get_order", "{}") for n in range(ps.MAX_CALLS + 1)]
        for provider in PROVIDERS:
            with self.subTest(provider=provider):
                self.assertEqual(len(ps.parse_stream(provider, stream(provider, calls[:-1])).calls), ps.MAX_CALLS)
                self.assertRefused(provider, stream(provider, calls), "STREAM_TOO_MANY_CALLS")

    def test_fragment_limit_counts_utf8_bytes(self):
        text = '{"order_ref":"ORDER-7","note":"\u00e9\u65e5\U0001f600"}'
        size = len(text.encode("utf-8"))
        self.assertGreater(size, len(text))
        for provider in ("openai", "anthropic"):
            with self.subTest(provider=provider):
                events = stream(provider, [("call_1", "get_order", text)], fragment_chars=len(text))
                self.assertEqual(len(ps.parse_stream(provider, events, max_fragment_bytes=size).calls), 1)
                self.assertRefused(provider, events, "STREAM_FRAGMENT_TOO_LARGE", max_fragment_bytes=size - 1)
        # Gemini sends a call's arguments whole, in one delta: the turn's argument budget bounds them.
        events = stream("gemini", [("call_1", "get_order", text)], fragment_chars=len(text))
        self.assertEqual(len(ps.parse_stream("gemini", events, max_fragment_bytes=size - 1).calls), 1)
        self.assertRefused("gemini", events, "STREAM_ARGUMENTS_TOO_LARGE", max_argument_bytes=size - 1)

    def test_default_fragment_limit(self):
        limit = ps.MAX_FRAGMENT_BYTES
        for provider in PROVIDERS:
            whole = ps.PROTOCOLS[provider].whole_arguments
            self.assertIs(whole, provider == "gemini")
            for pad, verdict in ((limit - 8, None), (limit - 7, None if whole else "STREAM_FRAGMENT_TOO_LARGE")):
                with self.subTest(provider=provider, pad=pad):
                    text = '{"n":"' + "x" * pad + '"}'  # 8 bytes around the padding
                    events = stream(provider, [("call_1", "get_order", text)], fragment_chars=len(text))
                    if verdict is None:
                        self.assertEqual(len(ps.parse_stream(provider, events).calls), 1)
                    else:
                        self.assertRefused(provider, events, verdict)

    def test_argument_limit_is_for_the_whole_turn(self):
        total = len(ORDER7) + len(REFUND7)
        calls = [("call_1", "get_order", ORDER7), ("call_2", "create_refund_draft", REFUND7)]
        for provider in PROVIDERS:
            with self.subTest(provider=provider):
                events = stream(provider, calls)
                self.assertEqual(len(ps.parse_stream(provider, events, max_argument_bytes=total).calls), 2)
                self.assertRefused(provider, events, "STREAM_ARGUMENTS_TOO_LARGE", max_argument_bytes=total - 1)

    def test_default_argument_limit(self):
        for provider in PROVIDERS:
            for extra, verdict in ((0, None), (1, "STREAM_ARGUMENTS_TOO_LARGE")):
                with self.subTest(provider=provider, extra=extra):
                    text = '{"n":"' + "x" * (ps.MAX_ARGUMENT_BYTES - 8 + extra) + '"}'
                    events = stream(provider, [("call_1", "get_order", text)], fragment_chars=4_000)
                    if verdict is None:
                        self.assertEqual(len(ps.parse_stream(provider, events).calls), 1)
                    else:
                        self.assertRefused(provider, events, verdict)

    def test_depth_limit(self):
        text = '{"a":[[["x"]]]}'  # four containers deep
        for provider in PROVIDERS:
            with self.subTest(provider=provider):
                events = stream(provider, [("call_1", "get_order", text)])
                self.assertEqual(ps.parse_stream(provider, events, max_depth=4).calls[0].arguments, {"a": [[["x"]]]})
                self.assertRefused(provider, events, "STREAM_ARGUMENTS_INVALID", "JSON_TOO_DEEP", max_depth=3)

    def test_default_depth_limit(self):
        for depth, verdict in ((ps.MAX_ARGUMENT_DEPTH, None), (ps.MAX_ARGUMENT_DEPTH + 1, "JSON_TOO_DEEP")):
            text = '{"a":' + "[" * (depth - 1) + "]" * (depth - 1) + "}"
            with self.subTest(depth=depth):
                events = stream("gemini", [("call_1", "get_order", text)])
                if verdict is None:
                    self.assertEqual(len(ps.parse_stream("gemini", events).calls), 1)
                else:
                    self.assertRefused("gemini", events, "STREAM_ARGUMENTS_INVALID", verdict)

    def test_text_limit_for_the_anthropic_echo(self):
        text = "Checking \u00e9\u65e5 now."
        size = len(text.encode("utf-8"))
        events = [{"type": "message_start", "message": {"id": "msg_1"}},
                  {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
                  {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text[:5]}},
                  {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text[5:]}},
                  {"type": "content_block_stop", "index": 0},
                  {"type": "message_delta", "delta": {"stop_reason": "end_turn"}}, {"type": "message_stop"}]
        self.assertEqual(ps.parse_stream("anthropic", events, max_text_bytes=size).content[0]["text"], text)
        self.assertRefused("anthropic", events, "STREAM_TEXT_TOO_LARGE", event=3, max_text_bytes=size - 1)
        self.assertRefused("anthropic", events, "STREAM_FRAGMENT_TOO_LARGE", event=3,
                           max_fragment_bytes=len(text[5:].encode("utf-8")) - 1)

    def test_text_and_arguments_have_separate_budgets(self):
        events = stream("anthropic")
        text = [{"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": "x" * 30}},
                {"type": "content_block_stop", "index": 0}]
        for event in events[1:-2]:
            event["index"] = 1
        events = events[:1] + text + events[1:]
        turn = ps.parse_stream("anthropic", events, max_argument_bytes=len(ORDER7), max_text_bytes=30)
        self.assertEqual(len(turn.content), 2)


# ============================================================================================
# 8. Tool declarations: generated from the registry, and no drift from the enforced contract
# ============================================================================================

# A reader of the JSON Schema subset the declarations use, written apart from the core's compiler
# (JSON Schema's own meaning: ECMA-262 patterns, code-point lengths). Any other keyword fails the
# tests, so a new keyword in a declaration cannot be silently ignored here. Values are taken from
# the portable domain the boundary decodes: no floats, integers within +/-(2**53-1).
SCHEMA_KEYWORDS = frozenset({"type", "properties", "required", "additionalProperties", "enum", "pattern", "maxLength",
                             "minLength", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
                             "items", "minItems", "maxItems", "uniqueItems", "anyOf", "$ref", "$defs", "description"})
LENGTH_KEYWORDS = frozenset({"maxLength", "minLength", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                             "multipleOf", "maxItems", "minItems", "uniqueItems", "minProperties", "maxProperties"})
JSON_TYPES = {"string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,), "object": (dict,),
              "array": (list,), "null": (type(None),)}


def same_json(value, choice):
    """JSON Schema's equality: numbers by value (1 is 1.0), anything else of one type."""
    numbers = (int, float)
    if type(value) in numbers and type(choice) in numbers:
        return value == choice
    return type(value) is type(choice) and value == choice


def schema_admits(schema, value, root=None):
    root = schema if root is None else root
    unknown = set(schema) - SCHEMA_KEYWORDS
    if unknown:
        raise ValueError(f"the test reader does not know {sorted(unknown)}")
    if "$ref" in schema:
        return schema_admits(root["$defs"][schema["$ref"][len("#/$defs/"):]], value, root)
    if "anyOf" in schema:
        return any(schema_admits(branch, value, root) for branch in schema["anyOf"])
    kinds = schema["type"] if type(schema["type"]) is list else [schema["type"]]
    if not any(type(value) in JSON_TYPES[kind] for kind in kinds):
        return False
    if "enum" in schema and not any(same_json(value, choice) for choice in schema["enum"]):
        return False
    if type(value) is dict:
        if not set(schema.get("required", ())) <= value.keys():
            return False
        if schema.get("additionalProperties") is False and not value.keys() <= schema["properties"].keys():
            return False
        return all(schema_admits(schema["properties"][key], item, root) for key, item in value.items())
    if type(value) is list:
        if not schema.get("minItems", 0) <= len(value) <= schema.get("maxItems", len(value)):
            return False
        if schema.get("uniqueItems") and len({json.dumps(item) for item in value}) != len(value):
            return False
        return all(schema_admits(schema["items"], item, root) for item in value)
    if type(value) in (int, float):  # exact arithmetic: Fraction holds every double exactly
        return (schema.get("minimum", value) <= value <= schema.get("maximum", value)
                and ("exclusiveMinimum" not in schema or value > schema["exclusiveMinimum"])
                and ("exclusiveMaximum" not in schema or value < schema["exclusiveMaximum"])
                and ("multipleOf" not in schema or Fraction(value) % Fraction(schema["multipleOf"]) == 0))
    if type(value) is str:
        if not schema.get("minLength", 0) <= len(value) <= schema.get("maxLength", len(value)):
            return False
        if "pattern" in schema:
            # ECMA-262: `$` is the very end (Python's `$` also matches before a final newline), and
            # \d is ASCII only.
            return re.search(re.sub(r"(?<!\\)\$", r"\\Z", schema["pattern"]), value, re.ASCII) is not None
    return True


def contract_admits(spec, arguments):
    try:
        tool_dispatcher.check_input(spec, arguments)
    except tool_dispatcher.BoundaryError as refusal:
        if refusal.code != "INVALID_ARGUMENTS":
            raise
        return False
    return True


# Pattern examples: valid ones at both length ends, and near misses.
PATTERN_EXAMPLES = {
    "^ORDER-[0-9]{1,12}$": (["ORDER-7", "ORDER-0", "ORDER-" + "9" * 12],
                           ["ORDER-" + "9" * 13, "ORDER-7\n", "\nORDER-7", " ORDER-7", "order-7", "ORDER-", "ORDER-\u0667",
                            "ORDER-\uff17", "ORDER-7a", "ORDER--7", "XORDER-7"]),
    "^[a-z]{1,8}$": (["a", "abcdefgh"], ["", "abcdefghi", "A", "a\n", "\u00e9"]),
    "^[a-z]{2,12}$": (["ab", "abcdefghijkl"], ["a", "abcdefghijklm", "ab1"]),
}
COMMON_PROBES = ["", "x", 7, 0, -1, None, True, False, [], {}, "damaged ", "Damaged", "DUPLICATE", "\u0000"]
MAX_SAFE = tool_dispatcher.MAX_SAFE_INTEGER


def valid_value(compiled, index):
    """One value the rule admits (the shortest that comes to mind)."""
    rule = compiled.rules[index]
    if isinstance(rule, tool_dispatcher.NullableRule):
        return valid_value(compiled, rule.inner)
    if isinstance(rule, tool_dispatcher.ObjectRule):
        return {name: valid_value(compiled, child) for name, child in rule.properties}
    if isinstance(rule, tool_dispatcher.ArrayRule):
        return [valid_value(compiled, rule.items)] * rule.min_items
    if isinstance(rule, tool_dispatcher.BooleanRule):
        return sorted(rule.choices)[0] if rule.choices else True
    if isinstance(rule, tool_dispatcher.IntegerRule):
        return sorted(rule.choices)[0] if rule.choices else max(rule.minimum, 0) // (rule.multiple_of or 1) * (
            rule.multiple_of or 1) or max(rule.minimum, 0)
    if isinstance(rule, tool_dispatcher.NumberRule):
        if rule.choices:
            return sorted(rule.choices)[0]
        step = rule.multiple_of or 0.5
        return next(value for value in (step, 2 * step, 3 * step, 10 * step, 0) if number_rule_admits(rule, value))
    if rule.choices:
        return sorted(rule.choices)[0]
    if rule.pattern is not None:
        return PATTERN_EXAMPLES[rule.pattern][0][0]
    return "x" * max(rule.min_length, 1)


def number_rule_admits(rule, value):
    """A number rule's bounds and step, read from its fields (the test's own reading)."""
    return ((rule.minimum is None or value > rule.minimum or (value == rule.minimum and not rule.minimum_exclusive))
            and (rule.maximum is None or value < rule.maximum or (value == rule.maximum and not rule.maximum_exclusive))
            and (rule.multiple_of is None or Fraction(value) % Fraction(rule.multiple_of) == 0))


def probe_values(compiled, index):
    """Values on both sides of every keyword of the rule, and values of every other type."""
    rule = compiled.rules[index]
    values = list(COMMON_PROBES)
    if isinstance(rule, tool_dispatcher.NullableRule):
        return probe_values(compiled, rule.inner) + [None]
    if isinstance(rule, tool_dispatcher.ObjectRule):
        base = valid_value(compiled, index)
        return values + [base, {**base, "extra": 1}] + [{k: v for k, v in base.items() if k != name} for name in base]
    if isinstance(rule, tool_dispatcher.ArrayRule):
        item = valid_value(compiled, rule.items)
        others = [value for value in probe_values(compiled, rule.items) if value != item or type(value) is not type(item)]
        lengths = {0, 1, rule.min_items, max(rule.min_items - 1, 0), rule.max_items, rule.max_items + 1}
        return values + [[item] * length for length in sorted(lengths)] + [[other] for other in others[:12]] + [
            [item, other] for other in others[:12]]
    if isinstance(rule, tool_dispatcher.BooleanRule):
        return values + [1, "true"]
    if isinstance(rule, tool_dispatcher.IntegerRule):
        step = rule.multiple_of or 1
        ends = [rule.minimum, rule.maximum, rule.minimum - 1, rule.maximum + 1, rule.minimum + step, 2, 3, 4, 5, 6]
        return values + [value for value in ends if -MAX_SAFE <= value <= MAX_SAFE] + sorted(rule.choices or ()) + ["3"]
    if isinstance(rule, tool_dispatcher.NumberRule):
        ends = [bound for bound in (rule.minimum, rule.maximum) if bound is not None]
        ends += [math.nextafter(bound, direction) for bound in ends for direction in (-math.inf, math.inf)]
        return values + ends + [0.5, 1.5, 2.0, 2.25, -0.0, 1e308, 5e-324, 3, "1.5"] + sorted(rule.choices or ())
    choices = sorted(rule.choices or ())
    values += choices + [choice.upper() for choice in choices] + [choice + " " for choice in choices]
    if rule.pattern is not None:
        valid, near = PATTERN_EXAMPLES[rule.pattern]
        values += valid + near
    else:
        values += ["x" * length for length in {max(rule.min_length - 1, 0), rule.min_length, rule.max_length,
                                               rule.max_length + 1} if length <= 5000]
    return values


def candidates(spec):
    """Argument objects: a full valid base, the required fields alone, each field left out or
    replaced by each of its probes, and an extra field."""
    compiled = spec.input_contract
    root = compiled.rules[0]
    base = valid_value(compiled, 0)
    found = [base, {name: base[name] for name in base if name in root.required}, {**base, "extra": "x"}]
    found += [{key: value for key, value in base.items() if key != name} for name in base]
    for name, index in root.properties:
        found += [{**base, name: value} for value in probe_values(compiled, index)]
    return found


def declared_parameters(provider, declaration):
    return declaration["parameters"] if provider != "anthropic" else declaration["input_schema"]


def contract_document(*tools):
    revisions = {part: "kinds.v1" for part in ("contract", "input", "output", "effect", "handler", "producer")}
    provenance = {"source": "host", "server_name": None, "server_version": None, "protocol_version": None,
                  "input_schema_sha256": None, "output_schema_sha256": None}
    hints = {"read_only": None, "destructive": None, "idempotent": None, "open_world": None}
    return {"format": "tool-contracts-v1", "tools": [
        {"name": name, "description": f"The {name} tool.", "effect": "read", "required_role": "orders.read",
         "resource_field": None, "input_schema": schema, "output_schema": None, "bound_fields": [],
         "revisions": revisions, "producer": "kinds", "provenance": provenance, "hints": hints}
        for name, schema in tools]}


def closed(properties, required=None):
    return {"type": "object", "properties": properties,
            "required": list(properties) if required is None else required, "additionalProperties": False}


# Every kind the contract language compiles, each on both sides of the strict decision.
KINDS = tool_dispatcher.parse_contracts(json.dumps(contract_document(
    ("kinds_strict", closed({"count": {"type": "integer", "enum": [1, 2, 3]}, "flag": {"type": "boolean"},
                             "ratio": {"type": "number"}, "pick": {"type": "number", "enum": [0.5, 2]},
                             "code": {"type": ["string", "null"], "pattern": "^[a-z]{1,8}$", "maxLength": 8},
                             "mode": {"anyOf": [{"type": "string", "enum": ["a", "bb"]}, {"type": "null"}]},
                             "wide": {"type": "integer"}})),
    ("kinds_bounds", closed({"amount": {"type": "integer", "minimum": 1, "maximum": 20, "multipleOf": 2},
                             "name": {"type": "string", "minLength": 2, "maxLength": 5},
                             "tags": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9},
                                      "maxItems": 3, "uniqueItems": True},
                             "flag": {"type": "boolean"}, "note": {"type": ["string", "null"], "maxLength": 4},
                             "price": {"type": "number", "exclusiveMinimum": 0, "maximum": 10.5, "multipleOf": 0.5}},
                            ["amount", "name"])),
    ("kinds_optional", closed({"code": {"type": "string", "pattern": "^[a-z]{1,8}$"},
                               "flag": {"type": "boolean"}}, ["code"])),
    ("kinds_nested", {**closed({"item": {"$ref": "#/$defs/Item"}, "more": {"$ref": "#/$defs/Item"},
                                "names": {"type": "array", "items": {"type": "string", "pattern": "^[a-z]{2,12}$"},
                                          "minItems": 1, "maxItems": 2}}),
                      "$defs": {"Item": closed({"kind": {"enum": ["x", "y"]}, "size": {"type": ["integer", "null"]}})}}),
)).encode("utf-8"))
STRICT = {"get_order": True, "create_refund_draft": True, "kinds_strict": True, "kinds_bounds": False,
          "kinds_optional": False, "kinds_nested": False}
ALL_SPECS = [*tool_dispatcher.REGISTRY.values(), *KINDS.values()]


def schema_nodes(schema):
    """Every subschema of a declared schema (never a properties table's names)."""
    stack, found = [schema], []
    while stack:
        node = stack.pop()
        found.append(node)
        stack += list(node.get("properties", {}).values()) + list(node.get("$defs", {}).values())
        stack += list(node.get("anyOf", ())) + ([node["items"]] if "items" in node else [])
    return found


class TestDeclarations(unittest.TestCase):
    def test_one_declaration_per_registered_tool_in_registry_order(self):
        for provider in PROVIDERS:
            with self.subTest(provider=provider):
                declarations = ps.declare_tools(provider)
                self.assertEqual([(item["name"], item["description"]) for item in declarations],
                                 [(spec.name, spec.description) for spec in tool_dispatcher.REGISTRY.values()])
                for item in declarations:
                    self.assertRegex(item["name"], r"^[a-zA-Z0-9_-]{1,64}$")
                self.assertEqual([item["name"] for item in ps.declare_tools(provider, registry=KINDS)], list(KINDS))

    def test_a_name_outside_the_providers_alphabet_is_never_declared(self):
        # A contract takes MCP's dotted names; no call could come back under one (the parser
        # refuses it), and OpenAI and Anthropic refuse it in a declaration: refused for all three.
        spec = tool_dispatcher.REGISTRY["get_order"]
        for name, declared in (("notes.read", False), ("a" * 64, True), ("a" * 65, False), ("read-note_2", True)):
            registry = {**tool_dispatcher.REGISTRY, name: dataclasses.replace(spec, name=name)}
            for provider in PROVIDERS:
                with self.subTest(name=name, provider=provider):
                    if declared:
                        self.assertEqual(ps.declare_tools(provider, registry=registry)[-1]["name"], name)
                        continue
                    with self.assertRaises(ps.StreamError) as caught:
                        ps.declare_tools(provider, registry=registry)
                    self.assertEqual(caught.exception.code, "STREAM_NAME_INVALID")

    def test_strict_exactly_when_the_strict_form_loses_nothing(self):
        self.assertEqual({spec.name: ps.strict_exact(spec) for spec in ALL_SPECS}, STRICT)
        for provider in ("openai", "anthropic"):
            for registry in (tool_dispatcher.REGISTRY, KINDS):
                for item, spec in zip(ps.declare_tools(provider, registry=registry), registry.values()):
                    with self.subTest(provider=provider, tool=spec.name):
                        self.assertIs(item["strict"], STRICT[spec.name])

    def test_openai_declarations_are_function_tools_strict_when_exact(self):
        for registry in (tool_dispatcher.REGISTRY, KINDS):
            for item, spec in zip(ps.declare_tools("openai", registry=registry), registry.values()):
                with self.subTest(tool=item["name"]):
                    self.assertEqual(set(item), {"type", "name", "description", "parameters", "strict"})
                    self.assertEqual(item["type"], "function")
                    schema = item["parameters"]
                    if not item["strict"]:
                        self.assertEqual(schema, spec.input_schema())
                        continue
                    for node in schema_nodes(schema):
                        self.assertFalse(set(node) & LENGTH_KEYWORDS)
                        if node.get("type") == "object":  # every property required: strict's own rule
                            self.assertEqual((node["required"], node["additionalProperties"]),
                                             (list(node["properties"]), False))

    def test_anthropic_declarations_are_strict_when_exact_with_no_length_constraints(self):
        declarations = ps.declare_tools("anthropic")
        self.assertLessEqual(len(declarations), 20)
        for registry in (tool_dispatcher.REGISTRY, KINDS):
            for item, spec in zip(ps.declare_tools("anthropic", registry=registry), registry.values()):
                with self.subTest(tool=item["name"]):
                    self.assertEqual(set(item), {"name", "description", "input_schema", "strict"})
                    schema = item["input_schema"]
                    self.assertEqual((schema["type"], schema["additionalProperties"]), ("object", False))
                    if item["strict"]:
                        for node in schema_nodes(schema):
                            self.assertFalse(set(node) & LENGTH_KEYWORDS)
                    else:
                        self.assertEqual(schema, spec.input_schema())

    def test_gemini_declarations_are_function_declarations_with_the_full_schema(self):
        for registry in (tool_dispatcher.REGISTRY, KINDS):
            for item, spec in zip(ps.declare_tools("gemini", registry=registry), registry.values()):
                with self.subTest(tool=item["name"]):
                    self.assertEqual(set(item), {"type", "name", "description", "parameters"})
                    self.assertEqual(item["type"], "function")
                    self.assertEqual(item["parameters"], spec.input_schema())

    def test_declarations_are_fresh_copies(self):
        first = ps.declare_tools("openai")
        first[0]["parameters"]["properties"].clear()
        self.assertTrue(ps.declare_tools("openai")[0]["parameters"]["properties"])

    def test_declared_schema_and_enforced_contract_agree_value_by_value(self):
        checked = {True: 0, False: 0}
        for provider in PROVIDERS:
            for registry in (tool_dispatcher.REGISTRY, KINDS):
                for declaration, spec in zip(ps.declare_tools(provider, registry=registry), registry.values()):
                    schema = declared_parameters(provider, declaration)
                    for arguments in candidates(spec):
                        with self.subTest(provider=provider, tool=spec.name, arguments=arguments):
                            expected = contract_admits(spec, arguments)
                            self.assertEqual(schema_admits(schema, arguments), expected)
                            checked[expected] += 1
        self.assertGreater(checked[True], 100)  # both sides of every tool's contract were reached
        self.assertGreater(checked[False], 1000)

    def test_each_tool_declared_non_strict_has_its_reason(self):
        # The strict form of kinds_bounds and kinds_nested admits a value their contracts refuse
        # (a length, a bound, an item count left out); kinds_optional's loses nothing, but OpenAI's
        # strict mode needs every property required, and absence is not null.
        loosened = {spec.name: any(schema_admits(ps._strict_form(spec.input_schema()), arguments)
                                   and not contract_admits(spec, arguments) for arguments in candidates(spec))
                    for spec in KINDS.values()}
        self.assertEqual(loosened, {"kinds_strict": False, "kinds_bounds": True, "kinds_optional": False,
                                    "kinds_nested": True})
        root = KINDS["kinds_optional"].input_contract.rules[0]
        self.assertEqual((sorted(root.required), [name for name, _ in root.properties]), (["code"], ["code", "flag"]))

    def test_reader_refuses_keywords_it_does_not_know(self):
        with self.assertRaises(ValueError):
            schema_admits({"type": "string", "format": "date"}, "2026-11-30")


# ============================================================================================
# 9-13. Host binding, dispatch, continuation payloads and the audit guard
# ============================================================================================


def run(provider, calls, host=ps.DEMO_HOST, dispatcher=None):
    turn = ps.parse_stream(provider, stream(provider, calls))
    return ps.run_turn(turn, dispatcher or ps.demo_dispatcher(), host)


PARALLEL = [("call_1", "get_order", ORDER7), ("call_2", "create_refund_draft", REFUND7),
            ("call_3", "get_order", '{"order_ref":"ORDER-8"}')]


class TestHostBinding(unittest.TestCase):
    def test_a_turn_of_an_imported_tool_verifies_against_its_own_contract_set(self):
        order_ref = {"type": "string", "pattern": "^ORDER-[0-9]{1,12}$", "maxLength": 18}
        document = contract_document(("order_lines", closed({"order_ref": order_ref,
                                                             "limit": {"type": "integer", "minimum": 1, "maximum": 3}},
                                                            ["order_ref"])))
        document["tools"][0].update(resource_field="order_ref", bound_fields=["order_ref"],
                                    output_schema=closed({"order_ref": order_ref, "count": {"type": "integer"}}))
        contracts = tool_dispatcher.parse_contracts(json.dumps(document).encode("utf-8"))

        def order_lines(call):
            return tool_dispatcher.HandlerResult(
                output={"order_ref": call.arguments["order_ref"], "count": call.arguments.get("limit", 1)},
                producer_revision=call.spec.producer_revision, resource_revision=call.order.revision)

        def dispatcher():
            return tool_dispatcher.Dispatcher([tool_dispatcher.Order("tenant-a", "ORDER-7", "alice", "paid", 3)],
                                              registry=contracts, handlers={"order_lines": order_lines})

        for provider in PROVIDERS:
            with self.subTest(provider=provider):
                turn = ps.parse_stream(provider, stream(provider, [("call_1", "order_lines",
                                                                    '{"order_ref":"ORDER-7","limit":2}')]))
                run = ps.run_turn(turn, dispatcher(), ps.DEMO_HOST, registry=contracts)
                self.assertEqual(run.packages[0]["model_result"]["data"], {"order_ref": "ORDER-7", "count": 2})
                with self.assertRaises(ps.StreamError) as caught:
                    ps.run_turn(turn, dispatcher(), ps.DEMO_HOST)  # verified against the shipped set
                self.assertEqual((caught.exception.code, caught.exception.detail),
                                 ("STREAM_CONTINUATION_REFUSED", "PROVENANCE_MISMATCH"))

    def test_context_takes_the_parser_profile_and_ids_and_the_host_keys(self):
        for provider in PROVIDERS:
            with self.subTest(provider=provider):
                turn = ps.parse_stream(provider, stream(provider))
                context = ps.bind_call(turn, turn.calls[0], ps.DEMO_HOST)
                profile = ps.PROTOCOLS[provider].profile
                self.assertEqual((context.provider, context.api_family, context.adapter_revision),
                                 (profile.provider, profile.api_family, profile.adapter_revision))
                self.assertEqual((context.response_id, context.call_id), (turn.response_id, "call_1"))
                self.assertRegex(context.operation_id, r"^op-[0-9a-f]{24}$")
                self.assertRegex(context.idempotency_key, r"^key-[0-9a-f]{24}$")
                self.assertIs(tool_dispatcher.check_context(context),
                              tool_dispatcher.PROVIDER_PROFILES[profile.adapter_revision])

    def test_keys_depend_on_the_host_session_and_the_call_identity(self):
        turn = ps.parse_stream("openai", stream("openai", PARALLEL))
        contexts = [ps.bind_call(turn, call, ps.DEMO_HOST) for call in turn.calls]
        other_session = ps.bind_call(turn, turn.calls[0], ps.Host(ps.DEMO_PRINCIPAL, ps.DEMO_NOW, "session-2"))
        again = ps.bind_call(turn, turn.calls[0], ps.DEMO_HOST)
        self.assertEqual(len({context.idempotency_key for context in contexts}), 3)
        self.assertEqual(again, contexts[0])
        self.assertNotEqual(other_session.idempotency_key, contexts[0].idempotency_key)
        self.assertNotEqual(other_session.operation_id, contexts[0].operation_id)

    def test_the_stream_cannot_choose_operation_id_or_key(self):
        # A call id that looks like a key does not become one.
        turn = ps.parse_stream("anthropic", stream("anthropic", [("key-attacker", "get_order", ORDER7)]))
        context = ps.bind_call(turn, turn.calls[0], ps.DEMO_HOST)
        self.assertNotIn("attacker", context.idempotency_key + context.operation_id)

    def test_approval_only_for_a_write_with_exactly_approved_arguments(self):
        turn = ps.parse_stream("gemini", stream("gemini", PARALLEL + [
            ("call_4", "create_refund_draft", '{"order_ref":"ORDER-7","reason":"other"}')]))
        approvals = [ps.host_approval(ps.DEMO_HOST, ps.bind_call(turn, call, ps.DEMO_HOST), call)
                     for call in turn.calls]
        self.assertEqual([approval is not None for approval in approvals], [False, True, False, False])
        approval = approvals[1]
        self.assertEqual((approval.approver, approval.call_id, approval.arguments, approval.expires_at),
                         ("approver-lee", "call_2", {"order_ref": "ORDER-7", "reason": "damaged"},
                          ps.DEMO_NOW + ps.APPROVAL_TTL_SECONDS))

    def test_approved_arguments_are_compared_as_json_values(self):
        # A write tool with a boolean field: a person approved flag 1, the model proposes flag true.
        spec = dataclasses.replace(KINDS["kinds_optional"], effect="write")
        call = ps.ParsedCall(0, "call_1", "kinds_optional", {"code": "ab", "flag": True})
        turn = ps.parse_stream("openai", stream("openai", PARALLEL))
        context = ps.bind_call(turn, turn.calls[0], ps.DEMO_HOST)
        cases = (
            (({"code": "ab", "flag": 1},), False),  # 1 == True in Python, not in JSON
            (({"code": "ab", "flag": 1.0},), False),
            (({"flag": True, "code": "ab"},), True),  # the same JSON object, its keys in another order
            ((float("nan"), {"code": "ab", "flag": True}), True),  # an entry JSON cannot carry approves nothing
        )
        for approved, granted in cases:
            with self.subTest(approved=approved):
                host = dataclasses.replace(ps.DEMO_HOST, approved=tuple(("kinds_optional", a) for a in approved))
                approval = ps.host_approval(host, context, call, registry={"kinds_optional": spec})
                self.assertEqual(approval is not None, granted)

    def test_no_approval_without_an_approver(self):
        host = ps.Host(ps.DEMO_PRINCIPAL, ps.DEMO_NOW, "s", approver=None, approved=ps.DEMO_HOST.approved)
        turn = ps.parse_stream("openai", stream("openai", PARALLEL))
        call = turn.calls[1]
        self.assertIsNone(ps.host_approval(host, ps.bind_call(turn, call, host), call))


class TestDispatchAndContinuation(unittest.TestCase):
    def test_results_in_call_order_through_the_boundary(self):
        for provider in PROVIDERS:
            with self.subTest(provider=provider):
                result = run(provider, PARALLEL)
                self.assertEqual([(row["call_id"], row["status"], row["error_code"], row["delivery"])
                                  for row in result.results()],
                                 [("call_1", "ok", None, "fresh"), ("call_2", "ok", None, "fresh"),
                                  ("call_3", "error", "NOT_FOUND", "none")])

    def test_openai_continuation(self):
        result = run("openai", PARALLEL)
        self.assertEqual(set(result.payload), {"previous_response_id", "input"})
        self.assertEqual(result.payload["previous_response_id"], "resp_synthetic")
        for item, package in zip(result.payload["input"], result.packages):
            self.assertEqual(set(item), {"type", "call_id", "output"})
            self.assertEqual(item["type"], "function_call_output")
            self.assertEqual(json.loads(item["output"]), package["model_result"])
        self.assertEqual([item["call_id"] for item in result.payload["input"]], ["call_1", "call_2", "call_3"])

    def test_anthropic_continuation_echoes_the_turn_and_answers_every_tool_use_first(self):
        result = run("anthropic", PARALLEL)
        assistant, user = result.payload["messages"]
        self.assertEqual(set(result.payload), {"messages"})
        self.assertEqual(assistant, {"role": "assistant", "content": [dict(block) for block in result.turn.content]})
        tool_uses = [block["id"] for block in assistant["content"] if block["type"] == "tool_use"]
        self.assertEqual(user["role"], "user")
        self.assertEqual([block["type"] for block in user["content"]], ["tool_result"] * 3)
        self.assertEqual([block["tool_use_id"] for block in user["content"]], tool_uses)
        self.assertEqual([block["is_error"] for block in user["content"]], [False, False, True])

    def test_gemini_continuation(self):
        result = run("gemini", PARALLEL)
        self.assertEqual(set(result.payload), {"previous_interaction_id", "input"})
        self.assertEqual(result.payload["previous_interaction_id"], "resp_synthetic")
        steps = result.payload["input"]
        self.assertEqual([(step["type"], step["call_id"], step["name"], step["is_error"]) for step in steps],
                         [("function_result", "call_1", "get_order", False),
                          ("function_result", "call_2", "create_refund_draft", False),
                          ("function_result", "call_3", "get_order", True)])

    def test_gemini_items_for_another_interaction_are_refused(self):
        turn = ps.parse_stream("gemini", stream("gemini"))
        item = {"previous_interaction_id": "other", "input": []}
        with self.assertRaises(ps.StreamError) as caught:
            ps.PROTOCOLS["gemini"].continue_turn(turn, [item])
        self.assertEqual(caught.exception.code, "STREAM_CONTINUATION_REFUSED")

    def test_turn_without_calls_has_no_continuation(self):
        for provider in PROVIDERS:
            with self.subTest(provider=provider):
                result = run(provider, [])
                self.assertEqual((result.payload, result.packages, result.results()), (None, (), []))

    def test_unregistered_tool_is_answered_not_dropped(self):
        result = run("gemini", [("call_1", "delete_everything", "{}")])
        self.assertEqual(result.results()[0]["error_code"], "UNKNOWN_TOOL")
        self.assertEqual(result.payload["input"][0]["name"], tool_dispatcher.UNREGISTERED_TOOL_NAME)

    def test_the_same_turn_processed_twice_runs_its_write_once(self):
        dispatcher = ps.demo_dispatcher()
        first = run("openai", PARALLEL, dispatcher=dispatcher)
        second = run("openai", PARALLEL, dispatcher=dispatcher)
        self.assertEqual([row["delivery"] for row in first.results()], ["fresh", "fresh", "none"])
        self.assertEqual([row["delivery"] for row in second.results()], ["fresh", "local_replay", "none"])
        self.assertEqual(dispatcher.effect_count, 1)

    def test_another_host_session_cannot_rerun_a_provider_call(self):
        dispatcher = ps.demo_dispatcher()
        run("anthropic", PARALLEL, dispatcher=dispatcher)
        other = ps.Host(ps.DEMO_PRINCIPAL, ps.DEMO_NOW, "session-2", "approver-lee", ps.DEMO_HOST.approved)
        again = run("anthropic", PARALLEL, host=other, dispatcher=dispatcher)
        self.assertEqual([row["error_code"] for row in again.results()], ["CALL_CONFLICT"] * 3)
        self.assertEqual(dispatcher.effect_count, 1)

    def test_write_without_approval_is_refused_by_the_boundary(self):
        host = ps.Host(ps.DEMO_PRINCIPAL, ps.DEMO_NOW, "s")
        result = run("openai", [("call_2", "create_refund_draft", REFUND7)], host=host)
        self.assertEqual(result.results()[0]["error_code"], "APPROVAL_REQUIRED")

    def test_boundary_refusing_the_host_becomes_a_continuation_refusal(self):
        host = ps.Host(tool_dispatcher.Principal("tenant-a", "alice", ("z", "a")), ps.DEMO_NOW, "s")
        with self.assertRaises(ps.StreamError) as caught:
            run("openai", [("call_1", "get_order", ORDER7)], host=host)
        self.assertEqual((caught.exception.code, caught.exception.detail),
                         ("STREAM_CONTINUATION_REFUSED", "PRINCIPAL_INVALID"))

    def test_turn_of_an_unknown_revision_is_refused(self):
        turn = ps.Turn("openai-responses-v9", "resp_1", "completed", ())
        with self.assertRaises(ps.StreamError) as caught:
            ps.run_turn(turn, ps.demo_dispatcher(), ps.DEMO_HOST)
        self.assertEqual(caught.exception.code, "STREAM_PROVIDER_UNKNOWN")


class TestAuditGuard(unittest.TestCase):
    def test_no_payload_holds_an_audit_value(self):
        for provider in PROVIDERS:
            with self.subTest(provider=provider):
                result = run(provider, PARALLEL)
                self.assertEqual(ps.audit_leaks(result.payload, result.packages, result.turn), frozenset())
                text = json.dumps(result.payload)
                for package in result.packages:
                    audit = package["protected_audit"]
                    context = audit["provider_context"]
                    hidden = (audit["request_sha256"], audit["call_binding_sha256"], audit["principal"]["subject_ref"],
                              context["operation_id"], context["idempotency_key"])
                    for value in hidden:
                        self.assertNotIn(value, text)

    def test_guard_finds_an_audit_value_inside_a_serialized_output(self):
        result = run("openai", PARALLEL)
        digest = result.packages[0]["protected_audit"]["request_sha256"]
        payload = json.loads(json.dumps(result.payload))
        output = json.loads(payload["input"][0]["output"])
        output["data"]["trace"] = digest
        payload["input"][0]["output"] = json.dumps(output)
        self.assertEqual(ps.audit_leaks(payload, result.packages, result.turn), frozenset({digest}))

    def test_guard_finds_an_audit_value_in_a_plain_field(self):
        result = run("anthropic", PARALLEL)
        key = result.packages[1]["protected_audit"]["provider_context"]["idempotency_key"]
        payload = json.loads(json.dumps(result.payload))
        payload["messages"][1]["content"].append({"type": "text", "text": key})
        self.assertEqual(ps.audit_leaks(payload, result.packages, result.turn), frozenset({key}))

    def test_values_the_model_may_see_are_not_leaks(self):
        result = run("gemini", PARALLEL)
        payload = json.loads(json.dumps(result.payload))
        payload["input"].append({"text": "ORDER-7", "also": result.turn.response_id, "tool": "get_order"})
        self.assertEqual(ps.audit_leaks(payload, result.packages, result.turn), frozenset())

    def test_a_role_named_like_a_wire_word_is_no_leak_but_the_same_text_elsewhere_is(self):
        # The payload's own roles and block types ("user", "text", "function_call_output") are
        # constants the builder writes; a host's role of the same name leaks nothing through them.
        roles = {"anthropic": ("orders.read", "refunds.draft", "user"),
                 "gemini": ("orders.read", "refunds.draft", "text"),
                 "openai": ("function_call_output", "orders.read", "refunds.draft")}
        for provider, granted in roles.items():
            with self.subTest(provider=provider):
                host = dataclasses.replace(ps.DEMO_HOST, principal=dataclasses.replace(ps.DEMO_HOST.principal,
                                                                                       roles=granted))
                result = ps.run_turn(ps.parse_stream(provider, stream(provider, PARALLEL)), ps.demo_dispatcher(), host)
                self.assertEqual(len(result.packages), len(PARALLEL))
                word = (set(granted) - {"orders.read", "refunds.draft"}).pop()
                payload = json.loads(json.dumps(result.payload))
                planted = {"note": word}  # the same text, where no constant of the wire stands
                (payload["messages"][1]["content"] if provider == "anthropic" else payload["input"]).append(planted)
                self.assertEqual(ps.audit_leaks(payload, result.packages, result.turn), frozenset({word}))

    def test_run_turn_refuses_a_payload_with_a_leak(self):
        turn = ps.parse_stream("openai", stream("openai"))
        with mock.patch.object(ps, "audit_leaks", return_value=frozenset({"x"})):
            with self.assertRaises(ps.StreamError) as caught:
                ps.run_turn(turn, ps.demo_dispatcher(), ps.DEMO_HOST)
        self.assertEqual(caught.exception.code, "STREAM_AUDIT_LEAK")


# ============================================================================================
# 10. Synthetic streams
# ============================================================================================


class TestSyntheticStreams(unittest.TestCase):
    def test_exact_event_counts(self):
        for provider in PROVIDERS:
            overhead = len(stream(provider, [("c", "get_order", "")]))
            for count in (overhead, overhead + 1, overhead + 2, overhead + 3, 100, 10_000):
                with self.subTest(provider=provider, count=count):
                    events = ps.synthetic_stream(provider, count)
                    self.assertEqual(len(events), count)
                    if provider == "openai" and count == overhead:  # no fragment: "" is not JSON there
                        with self.assertRaises(ps.StreamError) as caught:
                            ps.parse_stream(provider, events)
                        self.assertEqual((caught.exception.code, caught.exception.detail),
                                         ("STREAM_ARGUMENTS_INVALID", "JSON_INVALID"))
                        continue
                    self.assertEqual(ps.parse_stream(provider, events).calls[0].arguments, {})

    def test_below_the_fixed_events_is_a_programming_error(self):
        for provider in PROVIDERS:
            overhead = len(stream(provider, [("c", "get_order", "")]))
            with self.subTest(provider=provider):
                with self.assertRaises(ValueError):
                    ps.synthetic_stream(provider, overhead - 1)

    def test_fragments_never_split_a_character(self):
        text = '{"n":"\U0001f600\u00e9"}'
        events = stream("anthropic", [("call_1", "get_order", text)], fragment_chars=1)
        fragments = [event["delta"]["partial_json"] for event in events if event["type"] == "content_block_delta"]
        self.assertEqual(fragments, list(text))


# ============================================================================================
# 12. SSE text
# ============================================================================================


class TestSSE(StreamTestCase):
    def test_rendered_streams_parse_as_their_events_do(self):
        for provider in PROVIDERS:
            with self.subTest(provider=provider):
                events = stream(provider, PARALLEL)
                self.assertEqual(ps.parse_sse(provider, ps.render_sse(provider, events)),
                                 ps.parse_stream(provider, events))

    def test_fixture_streams_parse_the_same_through_sse(self):
        for provider in PROVIDERS:
            for case in ps.load_fixture(provider).cases.values():
                with self.subTest(provider=provider, stream=case.name):
                    text = ps.render_sse(provider, case.events).encode("utf-8")
                    try:
                        expected = ps.parse_stream(provider, case.events)
                    except ps.StreamError as error:
                        with self.assertRaises(ps.StreamError) as caught:
                            ps.parse_sse(provider, text)
                        self.assertEqual((caught.exception.code, caught.exception.event), (error.code, error.event))
                    else:
                        self.assertEqual(ps.parse_sse(provider, text), expected)

    def test_line_endings_comments_ids_and_multiline_data(self):
        text = ("\ufeff: keep-alive\r\nid: 7\r\nretry: 1000\r\nevent: a\r\ndata: {\"type\":\r\ndata:  \"a\"}\r\n\r\n"
                "data:[1]\r\r: only a comment\n\nevent: no data\n\n")
        self.assertEqual(ps.split_sse(text), [("a", {"type": "a"}), (None, [1])])

    def test_unfinished_last_event_is_dropped(self):
        self.assertEqual(ps.split_sse('data: {"a":1}\n\ndata: {"b":2}\n'), [(None, {"a": 1})])
        self.assertEqual(ps.split_sse('data: {"a":1}\n\ndata: {"b":2}'), [(None, {"a": 1})])
        self.assertEqual(ps.split_sse('data: {"a":1}\r\n\r\n'), [(None, {"a": 1})])

    def test_a_stream_cut_inside_a_character_is_a_cut_stream(self):
        # The SSE rules drop the unfinished last line whatever it holds, so a cut that falls inside
        # a multi-byte character is a cut like any other: STREAM_INCOMPLETE (retryable), not bad UTF-8.
        events = self.anthropic_text_turn("d\u00e9j\u00e0 \u20ac \U0001f600")
        data = "".join(f"data: {json.dumps(event, ensure_ascii=False)}\n\n" for event in events).encode("utf-8")
        cuts = [at for at in range(len(data)) if data[at] & 0xC0 == 0x80]  # inside a character
        self.assertEqual(len(cuts), 1 + 1 + 2 + 3)
        for at in cuts:
            with self.subTest(at=at):
                with self.assertRaises(ps.StreamError) as caught:
                    ps.parse_sse("anthropic", data[:at])
                self.assertEqual((caught.exception.code, caught.exception.detail), ("STREAM_INCOMPLETE", None))
        self.assertEqual(ps.split_sse(b'data: {"a":1}\n\ndata: "\xe2\x82'), [(None, {"a": 1})])
        self.assertEqual(ps.split_sse(b'data: {"a":1}\r\xff'), [])
        with self.assertRaises(ps.StreamError) as caught:  # bad UTF-8 on a finished line is still refused
            ps.split_sse(b'data: "\xe2\x82"\n')
        self.assertEqual((caught.exception.code, caught.exception.detail), ("STREAM_SSE_INVALID", "JSON_NOT_UTF8"))

    @staticmethod
    def anthropic_text_turn(text):
        return [{"type": "message_start", "message": {"id": "msg_1", "content": []}},
                {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
                {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}},
                {"type": "content_block_stop", "index": 0},
                {"type": "message_delta", "delta": {"stop_reason": "end_turn"}}, {"type": "message_stop"}]

    def test_an_empty_event_name_is_no_name(self):
        # "event:" with no value leaves the type the default one, exactly as if no event line came.
        for provider in PROVIDERS:
            with self.subTest(provider=provider):
                plain = "".join(f"data: {json.dumps(event)}\n\n" for event in stream(provider))
                for line in ("event:\n", "event: \n", "event: x\nevent:\n"):
                    text = plain.replace("data: ", line + "data: ")
                    self.assertEqual(ps.parse_sse(provider, text), ps.parse_sse(provider, plain))
        self.assertEqual(ps.split_sse("event:\ndata: 1\n\nevent:  \ndata: 2\n\n"), [(None, 1), (" ", 2)])

    def test_the_default_event_name_written_out_is_no_name(self):
        # "event: message" names the SSE default type, the one a missing or empty event line gives;
        # a proxy that writes it on every event must not make a whole stream invalid. Any other
        # name still has to agree with the data's type.
        for provider in PROVIDERS:
            with self.subTest(provider=provider):
                plain = "".join(f"data: {json.dumps(event)}\n\n" for event in stream(provider))
                text = plain.replace("data: ", "event: message\ndata: ")
                self.assertEqual(ps.parse_sse(provider, text), ps.parse_sse(provider, plain))
        self.assertEqual(ps.split_sse("event: message\ndata: 1\n\nevent: Message\ndata: 2\n\n"),
                         [(None, 1), ("Message", 2)])
        with self.assertRaises(ps.StreamError) as caught:
            ps.parse_sse("anthropic", ps.render_sse("anthropic", stream("anthropic")).replace(
                "event: ping", "event: messages", 1).replace("event: message_start", "event: messages", 1))
        self.assertEqual((caught.exception.code, caught.exception.event), ("STREAM_SSE_INVALID", 0))

    def test_event_name_must_match_the_data_type(self):
        events = stream("anthropic")
        text = ps.render_sse("anthropic", events).replace("event: message_stop", "event: ping")
        with self.assertRaises(ps.StreamError) as caught:
            ps.parse_sse("anthropic", text)
        self.assertEqual((caught.exception.code, caught.exception.event), ("STREAM_SSE_INVALID", len(events) - 1))

    def test_events_without_a_name_are_read_by_their_data(self):
        text = "".join(f"data: {json.dumps(event)}\n\n" for event in stream("gemini"))
        self.assertEqual(len(ps.parse_sse("gemini", text).calls), 1)

    def test_invalid_text_and_data(self):
        cases = ((b"data: {\xff}\n\n", "STREAM_SSE_INVALID", "JSON_NOT_UTF8", None),
                 (b"data: {nope}\n\n", "STREAM_SSE_INVALID", "JSON_INVALID", 0),
                 (b'data: {"a":1}\n\ndata: {"a":1,"a":2}\n\n', "STREAM_SSE_INVALID", "JSON_DUPLICATE_KEY", 1),
                 (b"data: 1e400\n\n", "STREAM_SSE_INVALID", "JSON_NON_FINITE", 0),
                 (b"data: " + b"9" * 40 + b"\n\n", "STREAM_SSE_INVALID", "JSON_NOT_PORTABLE", 0))
        for data, code, detail, event in cases:
            with self.subTest(data=data):
                with self.assertRaises(ps.StreamError) as caught:
                    ps.split_sse(data)
                error = caught.exception
                self.assertEqual((error.code, error.detail, error.event), (code, detail, event))
        for data in (None, 7, ["data: 1"]):
            with self.subTest(data=data):
                with self.assertRaises(ps.StreamError) as caught:
                    ps.split_sse(data)
                self.assertEqual(caught.exception.code, "STREAM_SSE_INVALID")

    def test_envelopes_carry_floats_nulls_and_unknown_fields(self):
        envelope = {"temperature": 1.0, "top_p": 0.95, "usage": None, "logprobs": [{"logprob": -0.25, "bytes": [104]}],
                    "created_at": 1764777657, "counter": 10**30, "new_field": {"nested": [1.5e-7, None, True]}}
        for provider in PROVIDERS:
            with self.subTest(provider=provider):
                events = stream(provider)
                events = [{**event, **envelope} for event in events]
                turn = ps.parse_sse(provider, ps.render_sse(provider, events))
                self.assertCalls(turn, [("call_1", "get_order", {"order_ref": "ORDER-7"})])

    def test_arguments_stay_in_the_portable_domain_inside_a_float_envelope(self):
        for provider in PROVIDERS:
            for text, detail in (('{"order_ref":1e999}', "JSON_NON_FINITE"),
                                 ('{"order_ref":9007199254740992}', "JSON_NOT_PORTABLE"),
                                 ('{"order_ref":"\\ud800"}', "JSON_NOT_PORTABLE")):
                with self.subTest(provider=provider, text=text):
                    events = [{**event, "temperature": 1.0} for event in stream(provider, [("c", "get_order", text)])]
                    with self.assertRaises(ps.StreamError) as caught:
                        ps.parse_sse(provider, ps.render_sse(provider, events))
                    self.assertEqual((caught.exception.code, caught.exception.detail),
                                     ("STREAM_ARGUMENTS_INVALID", detail))

    def test_echoed_strings_from_the_envelope_must_be_portable(self):
        # The envelope policy lets a lone surrogate through the decoder; where a value is used it is refused.
        surrogate = "\ud800"
        for provider in PROVIDERS:
            for field, code in (("call_id", "STREAM_ID_INVALID"), ("name", "STREAM_NAME_INVALID")):
                with self.subTest(provider=provider, field=field):
                    calls = [("call_1" + surrogate if field == "call_id" else "call_1",
                              "get_order" + surrogate if field == "name" else "get_order", ORDER7)]
                    text = ps.render_sse(provider, stream(provider, calls))  # the surrogate as a \\ud800 escape
                    self.assertIn("\\ud800", text)
                    with self.assertRaises(ps.StreamError) as caught:
                        ps.parse_sse(provider, text)
                    self.assertEqual(caught.exception.code, code)
        events = stream("openai")
        events[1] = {**events[1], "item": {**events[1]["item"], "id": "fc" + surrogate}}
        with self.assertRaises(ps.StreamError) as caught:
            ps.parse_sse("openai", ps.render_sse("openai", events))
        self.assertEqual(caught.exception.code, "STREAM_ID_INVALID")
        events = stream("anthropic")
        events.insert(1, {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": surrogate}})
        events = [{**event, "index": event["index"] + 1} if "index" in event and event is not events[1] else event
                  for event in events]
        events.insert(2, {"type": "content_block_stop", "index": 0})
        with self.assertRaises(ps.StreamError) as caught:
            ps.parse_sse("anthropic", ps.render_sse("anthropic", events))
        self.assertEqual(caught.exception.code, "STREAM_EVENT_MALFORMED")

    def test_float_heavy_and_deep_envelopes_keep_their_bounds(self):
        heavy = {"type": "ping", "logprobs": [-0.123456789] * 20_000}
        text = "data: " + json.dumps(heavy, separators=(",", ":")) + "\n\n"
        size = len(text) - len("data: \n\n")
        self.assertEqual(ps.split_sse(text, max_event_bytes=size)[0][1]["logprobs"][0], -0.123456789)
        with self.assertRaises(ps.StreamError) as caught:
            ps.split_sse(text, max_event_bytes=size - 1)
        self.assertEqual(caught.exception.code, "STREAM_SSE_TOO_LARGE")
        for depth, detail in ((ps.MAX_SSE_EVENT_DEPTH, None), (ps.MAX_SSE_EVENT_DEPTH + 1, "JSON_TOO_DEEP")):
            with self.subTest(depth=depth):
                data = "data: " + "[" * (depth - 1) + '{"a":1.5}' + "]" * (depth - 1) + "\n\n"
                if detail is None:
                    self.assertEqual(len(ps.split_sse(data)), 1)
                    continue
                with self.assertRaises(ps.StreamError) as caught:
                    ps.split_sse(data)
                self.assertEqual((caught.exception.code, caught.exception.detail), ("STREAM_SSE_INVALID", detail))
        for number, detail in (("1e400", "JSON_NON_FINITE"), ("1" * 40, "JSON_NOT_PORTABLE"), ("NaN", "JSON_NON_FINITE")):
            with self.subTest(number=number):
                with self.assertRaises(ps.StreamError) as caught:
                    ps.split_sse('data: {"temperature":' + number + "}\n\n")
                self.assertEqual((caught.exception.code, caught.exception.detail), ("STREAM_SSE_INVALID", detail))
        self.assertEqual(ps.split_sse('data: {"n":' + "1" * 39 + "}\n\n")[0][1]["n"], int("1" * 39))

    def test_done_frame_ends_a_gemini_stream(self):
        text = ps.render_sse("gemini", stream("gemini"))
        done = "event: done\ndata: [DONE]\n\n"
        self.assertEqual(ps.parse_sse("gemini", text + done), ps.parse_sse("gemini", text))
        with self.assertRaises(ps.StreamError) as caught:  # nothing may follow it
            ps.parse_sse("gemini", text + done + "data: {}\n\n")
        self.assertEqual((caught.exception.code, caught.exception.event), ("STREAM_OUT_OF_ORDER", len(stream("gemini"))))
        early = ps.render_sse("gemini", stream("gemini")[:-1]) + done  # it ends the text, not the turn
        with self.assertRaises(ps.StreamError) as caught:
            ps.parse_sse("gemini", early)
        self.assertEqual(caught.exception.code, "STREAM_INCOMPLETE")
        for provider in ("openai", "anthropic"):  # not their terminator: not JSON
            with self.subTest(provider=provider):
                with self.assertRaises(ps.StreamError) as caught:
                    ps.parse_sse(provider, ps.render_sse(provider, stream(provider)) + done)
                self.assertEqual((caught.exception.code, caught.exception.detail), ("STREAM_SSE_INVALID", "JSON_INVALID"))
        self.assertEqual(ps.split_sse("data: [DONE]\n\n", done_frame="[DONE]"), [])
        self.assertEqual(ps.split_sse('data: "[DONE]"\n\n', done_frame="[DONE]"), [(None, "[DONE]")])

    def test_text_limit(self):
        text = ps.render_sse("openai", stream("openai")).encode("utf-8")
        self.assertEqual(len(ps.parse_sse("openai", text, max_bytes=len(text)).calls), 1)
        with self.assertRaises(ps.StreamError) as caught:
            ps.parse_sse("openai", text, max_bytes=len(text) - 1)
        self.assertEqual(caught.exception.code, "STREAM_SSE_TOO_LARGE")

    def test_event_data_limit(self):
        data = '{"type":"x","text":"\u00e9\u00e9"}'
        size = len(data.encode("utf-8"))
        text = f"data: {data}\n\n"
        self.assertEqual(ps.split_sse(text, max_event_bytes=size), [(None, json.loads(data))])
        # size - 1: enough characters, too many bytes, so the decoder refuses it; fewer characters
        # than the data has: the splitter stops early, before the decoder runs.
        for limit, detail in ((size - 1, "JSON_TOO_LARGE"), (len(data) - 1, None)):
            with self.subTest(limit=limit):
                with self.assertRaises(ps.StreamError) as caught:
                    ps.split_sse(text, max_event_bytes=limit)
                self.assertEqual((caught.exception.code, caught.exception.event, caught.exception.detail),
                                 ("STREAM_SSE_TOO_LARGE", 0, detail))

    def test_multiline_data_counts_its_joining_newlines(self):
        text = "data: [1,\ndata: 2]\n\n"  # "[1,\n2]" is six characters
        self.assertEqual(ps.split_sse(text, max_event_bytes=6), [(None, [1, 2])])
        with self.assertRaises(ps.StreamError) as caught:
            ps.split_sse(text, max_event_bytes=5)
        self.assertEqual(caught.exception.code, "STREAM_SSE_TOO_LARGE")

    def test_event_count_limit(self):
        text = "data: {}\n\n" * 3
        self.assertEqual(len(ps.split_sse(text, max_events=3)), 3)
        with self.assertRaises(ps.StreamError) as caught:
            ps.split_sse(text, max_events=2)
        self.assertEqual(caught.exception.code, "STREAM_TOO_MANY_EVENTS")
        events = stream("gemini")
        with self.assertRaises(ps.StreamError) as caught:
            ps.parse_sse("gemini", ps.render_sse("gemini", events), max_events=len(events) - 1)
        self.assertEqual(caught.exception.code, "STREAM_TOO_MANY_EVENTS")

    def test_parse_sse_forwards_the_parser_limits(self):
        with self.assertRaises(ps.StreamError) as caught:
            ps.parse_sse("anthropic", ps.render_sse("anthropic", stream("anthropic")), max_argument_bytes=3)
        self.assertEqual(caught.exception.code, "STREAM_ARGUMENTS_TOO_LARGE")


# ============================================================================================
# 12. Parsing, fuzzed: hostile bytes and values never escape as anything but StreamError
# ============================================================================================
# A bounded, seeded run in every suite run; a longer one, for instance
#   PROVIDER_STREAMS_FUZZ_ROUNDS=200000 PROVIDER_STREAMS_FUZZ_SEED=7 \
#       python -B -m unittest discover -s provider_streams -p 'test_provider_streams.py' -k Fuzz
# takes a few minutes. A failure names the seed, the round and the mutation, so it replays exactly.

FUZZ_SEED = int(os.environ.get("PROVIDER_STREAMS_FUZZ_SEED", "20261201"))
FUZZ_ROUNDS = int(os.environ.get("PROVIDER_STREAMS_FUZZ_ROUNDS", "1500"))  # per provider, per layer
HOSTILE_VALUES = ([], {}, ["x"], {"type": []}, {"a": {"b": [None]}}, None, True, False, 0, -1, 1.5, 2**64, -0.0,
                  "", "x" * 300, "\ud800", "call_1", "get_order", "{", '{"order_ref":1.0}', "function_call",
                  "tool_use", "text_delta", "input_json_delta", "arguments_delta", "requires_action", "tool_use")


def fuzz_bases(provider):
    bases = [stream(provider, PARALLEL), stream(provider, []), stream(provider, PARALLEL[:1], fragment_chars=3)]
    bases += [case.events for case in ps.load_fixture(provider).cases.values()]
    return bases


def mutate_value(rng, root):
    """Replace, delete or retype one value somewhere inside a decoded event (a random walk down)."""
    node = root
    while True:
        keys = list(node) if type(node) is dict else list(range(len(node)))
        if not keys:
            return "empty"
        key = rng.choice(keys)
        child = node[key]
        if type(child) in (dict, list) and child and rng.random() < 0.6:
            node = child
            continue
        move = rng.random()
        if move < 0.15 and type(node) is dict:
            del node[key]
            return f"delete {key!r}"
        if move < 0.3 and type(child) is str and child:  # cut a string, as a stream cut mid-value would
            node[key] = child[:rng.randrange(len(child))]
            return f"cut {key!r}"
        node[key] = json.loads(json.dumps(rng.choice(HOSTILE_VALUES)))
        return f"set {key!r}={node[key]!r:.30}"


def mutate_events(rng, events):
    events = json.loads(json.dumps(events))
    move = rng.random()
    if move < 0.1 and events:
        cut = rng.randrange(len(events))
        return events[:cut], f"truncate at {cut}"
    if move < 0.2 and len(events) > 1:
        i, j = rng.randrange(len(events)), rng.randrange(len(events))
        events[i], events[j] = events[j], events[i]
        return events, f"swap {i} {j}"
    if move < 0.27 and events:
        i = rng.randrange(len(events))
        events.insert(rng.randrange(len(events) + 1), json.loads(json.dumps(events[i])))
        return events, f"repeat {i}"
    if move < 0.32 and events:
        i = rng.randrange(len(events))
        events[i] = json.loads(json.dumps(rng.choice(HOSTILE_VALUES)))
        return events, f"replace event {i}"
    i = rng.randrange(len(events)) if events else 0
    if not events:
        return events, "empty"
    steps = [mutate_value(rng, events[i]) for _ in range(rng.choice((1, 1, 2, 3)))]
    return events, f"event {i}: " + "; ".join(steps)


def mutate_bytes(rng, data):
    data = bytearray(data)
    move = rng.random()
    if move < 0.2:
        return bytes(data[:rng.randrange(len(data) + 1)]), "truncate"
    for _ in range(rng.choice((1, 1, 2, 4, 8))):
        at = rng.randrange(len(data) + 1)
        kind = rng.random()
        if kind < 0.4 and at < len(data):
            data[at] = rng.randrange(256)
        elif kind < 0.7:
            data[at:at] = rng.choice((b"\n", b"\r", b"\n\n", b":", b"[", b"]", b"{", b"}", b'"', b"\\",
                                      b"1.5", b"null", b"[]", b"data: ", b"event: x\n", b"\xed\xa0\x80",
                                      b"\\ud800", b"[DONE]"))
        elif at < len(data):
            del data[at:at + rng.randrange(1, 16)]
    return bytes(data), "bytes"


class TestFuzz(unittest.TestCase):
    def assertOnlyStreamErrors(self, run, label):
        try:
            turn = run()
        except ps.StreamError as error:
            self.assertIn(error.code, ps.STREAM_CATALOG)
            return "refused"
        except Exception as error:  # noqa: BLE001 - this is what the test exists to catch
            self.fail(f"{label}: {type(error).__name__} escaped")
        try:  # a turn that parsed is dispatched too: the host's next step must not crash either
            ps.run_turn(turn, ps.demo_dispatcher(), ps.DEMO_HOST)
        except ps.StreamError:
            pass
        except Exception as error:  # noqa: BLE001
            self.fail(f"{label}: {type(error).__name__} escaped from run_turn")
        return "parsed"

    def test_mutated_events_raise_only_stream_errors(self):
        for provider in PROVIDERS:
            rng = random.Random(f"{FUZZ_SEED}/events/{provider}")
            bases = fuzz_bases(provider)
            seen = {"parsed": 0, "refused": 0}
            for round_ in range(FUZZ_ROUNDS):
                events, how = mutate_events(rng, rng.choice(bases))
                label = f"seed {FUZZ_SEED} {provider} round {round_} ({how})"
                seen[self.assertOnlyStreamErrors(lambda: ps.parse_stream(provider, events), label)] += 1
            with self.subTest(provider=provider):  # both outcomes occur: the mutations reach past the first check
                self.assertGreater(seen["parsed"], 0)
                self.assertGreater(seen["refused"], FUZZ_ROUNDS // 2)

    def test_mutated_sse_bytes_raise_only_stream_errors(self):
        for provider in PROVIDERS:
            rng = random.Random(f"{FUZZ_SEED}/sse/{provider}")
            texts = [ps.render_sse(provider, events).encode("utf-8") for events in fuzz_bases(provider)]
            for round_ in range(FUZZ_ROUNDS):
                data, how = mutate_bytes(rng, rng.choice(texts))
                label = f"seed {FUZZ_SEED} {provider} round {round_} ({how})"
                self.assertOnlyStreamErrors(lambda: ps.parse_sse(provider, data), label)

    def test_known_crash_shapes_are_refused(self):
        # Found by coverage-guided fuzzing: a delta whose type is an array or an object on an open
        # block or step raised TypeError (unhashable) instead of a StreamError.
        for provider, kind in (("anthropic", "content_block_delta"), ("gemini", "step.delta")):
            for bad in ([], {}, ["input_json_delta"]):
                with self.subTest(provider=provider, bad=bad):
                    events = edited(provider, stream(provider), kind, delta={"type": bad})
                    with self.assertRaises(ps.StreamError) as caught:
                        ps.parse_sse(provider, ps.render_sse(provider, events))
                    self.assertEqual(caught.exception.code, "STREAM_EVENT_MALFORMED")


# ============================================================================================
# 14. Fixtures: every named stream does what its file declares
# ============================================================================================

REQUIRED_STREAMS = {"text_only", "one_call", "parallel_calls", "split_fragments", "empty_arguments", "cut_off",
                    "provider_error", "unopened_delta", "arguments_not_json", "arguments_not_object",
                    "unknown_event_outside_call", "unknown_event_inside_call"}
PROVIDER_STREAMS = {"openai": {"sequence_repeated", "sequence_backwards"},
                    "anthropic": {"max_tokens_in_tool_input"}, "gemini": {"legacy_outputs_shape"}}


class TestFixtures(unittest.TestCase):
    def test_files_name_their_revision_and_the_date_checked(self):
        for provider in PROVIDERS:
            with self.subTest(provider=provider):
                fixture = ps.load_fixture(provider)
                self.assertEqual(fixture.adapter_revision, ps.PROTOCOLS[provider].profile.adapter_revision)
                self.assertEqual(fixture.checked, "2026-11-30")
                self.assertIn("PROVIDERS.md", fixture.source)
                self.assertTrue((ps.FIXTURE_DIR / f"{fixture.adapter_revision}.json").is_file())

    def test_every_required_stream_is_present(self):
        for provider in PROVIDERS:
            with self.subTest(provider=provider):
                names = set(ps.load_fixture(provider).cases)
                self.assertLessEqual(REQUIRED_STREAMS | PROVIDER_STREAMS[provider], names)

    def test_every_stream_parses_to_exactly_what_it_declares(self):
        count = 0
        for provider in PROVIDERS:
            for case in ps.load_fixture(provider).cases.values():
                with self.subTest(provider=provider, stream=case.name):
                    count += 1
                    if "error" in case.expect:
                        with self.assertRaises(ps.StreamError) as caught:
                            ps.parse_stream(provider, case.events)
                        self.assertEqual((caught.exception.code, caught.exception.detail),
                                         (case.expect["error"], case.expect["detail"]))
                        continue
                    turn = ps.parse_stream(provider, case.events)
                    self.assertEqual(turn.stop, case.expect["stop"])
                    self.assertEqual([{"call_id": call.call_id, "name": call.name, "arguments": call.arguments}
                                      for call in turn.calls], case.expect["calls"])
        self.assertGreaterEqual(count, 45)

    def test_every_stream_runs_end_to_end_as_declared(self):
        for provider in PROVIDERS:
            for case in ps.load_fixture(provider).cases.values():
                with self.subTest(provider=provider, stream=case.name):
                    report = ps.run_case(provider, case)
                    self.assertIs(report["passed"], True)
                    self.assertIs(report["dispatched"], bool(case.expect.get("calls")))

    def test_well_formed_streams_leak_no_audit_value_and_answer_every_call_once(self):
        for provider in PROVIDERS:
            for case in ps.load_fixture(provider).cases.values():
                if "error" in case.expect or not case.expect["calls"]:
                    continue
                with self.subTest(provider=provider, stream=case.name):
                    turn = ps.parse_stream(provider, case.events)
                    result = ps.run_turn(turn, ps.demo_dispatcher(), ps.DEMO_HOST)
                    self.assertEqual(ps.audit_leaks(result.payload, result.packages, turn), frozenset())
                    self.assertEqual(tool_dispatcher.verify_result_set(result.contexts, list(result.packages),
                                                                       principal=ps.DEMO_PRINCIPAL),
                                     list(result.packages))

    def test_a_report_that_misses_its_expectation_fails(self):
        case = ps.load_fixture("openai").cases["one_call"]
        wrong = ps.StreamCase(case.name, case.description, case.events, {**case.expect, "stop": "incomplete"})
        self.assertIs(ps.run_case("openai", wrong)["passed"], False)
        errors = ps.load_fixture("openai").cases["cut_off"]
        wrong = ps.StreamCase(errors.name, errors.description, errors.events,
                              {"error": "STREAM_NOT_OPEN", "detail": None})
        self.assertIs(ps.run_case("openai", wrong)["passed"], False)
        wrong = ps.StreamCase(errors.name, errors.description, errors.events, case.expect)
        self.assertIs(ps.run_case("openai", wrong)["passed"], False)

    def write(self, directory, value):
        path = Path(directory) / "fixture.json"
        path.write_text(value if isinstance(value, str) else json.dumps(value), encoding="utf-8")
        return path

    def assertFixtureRefused(self, value, detail=None, **options):
        with tempfile.TemporaryDirectory() as directory:
            with self.assertRaises(ps.StreamError) as caught:
                ps.load_fixture("openai", path=self.write(directory, value), **options)
        self.assertEqual((caught.exception.code, caught.exception.detail), ("STREAM_FIXTURE_INVALID", detail))

    def good(self):
        with open(ps.FIXTURE_DIR / "openai-responses-v1.json", encoding="utf-8") as handle:
            return json.load(handle)

    def test_loader_refuses_unreadable_or_invalid_files(self):
        with tempfile.TemporaryDirectory() as directory:
            for path in (Path(directory) / "missing.json", Path(directory)):
                with self.subTest(path=path.name):
                    with self.assertRaises(ps.StreamError) as caught:
                        ps.load_fixture("openai", path=path)
                    self.assertEqual(caught.exception.detail, "FIXTURE_UNREADABLE")
        self.assertFixtureRefused("{", "JSON_INVALID")
        self.assertFixtureRefused('{"a":1,"a":1}', "JSON_DUPLICATE_KEY")

    def test_loader_reads_events_as_envelopes(self):
        # What a recorded stream holds around the calls: a float, a counter longer than any safe
        # integer. The fixture loads; its cases still run to their expectation.
        good = self.good()
        name = next(iter(good["streams"]))
        case = good["streams"][name]
        case["events"] = [{**event, "temperature": 1.0, "usage_total": 123456789012345678901} for event in case["events"]]
        with tempfile.TemporaryDirectory() as directory:
            fixture = ps.load_fixture("openai", path=self.write(directory, good))
        self.assertEqual(fixture.cases[name].events[0]["temperature"], 1.0)
        self.assertIs(ps.run_case("openai", fixture.cases[name])["passed"], True)
        self.assertFixtureRefused(json.dumps(good).replace("1.0", "1e999", 1), "JSON_NON_FINITE")

    def test_loader_size_limit(self):
        text = json.dumps(self.good())
        with tempfile.TemporaryDirectory() as directory:
            path = self.write(directory, text)
            size = len(text.encode("utf-8"))
            fixture = ps.load_fixture("openai", path=path, max_bytes=size)
            self.assertEqual(fixture.adapter_revision, "openai-responses-v1")
        self.assertFixtureRefused(text, "JSON_TOO_LARGE", max_bytes=size - 1)

    def test_loader_refuses_the_wrong_structure(self):
        good = self.good()
        stream_case = good["streams"]["one_call"]
        bad_roots = [[], {**good, "extra": 1}, {**good, "format": "provider-streams-v2"},
                     {**good, "adapter_revision": "anthropic-messages-v1"}, {**good, "checked": "30.11.2026"},
                     {**good, "checked": 2026}, {**good, "source": None}, {**good, "streams": {}},
                     {**good, "streams": []}, {**good, "streams": {"Bad Name": stream_case}},
                     {**good, "streams": {"x": {**stream_case, "extra": 1}}},
                     {**good, "streams": {"x": {**stream_case, "events": {}}}},
                     {**good, "streams": {"x": {**stream_case, "description": 7}}},
                     {**good, "streams": {"x": {**stream_case, "expect": []}}},
                     {**good, "streams": {"x": {**stream_case, "expect": {"error": "NOPE", "detail": None}}}},
                     {**good, "streams": {"x": {**stream_case,
                                                "expect": {"error": "STREAM_INCOMPLETE", "detail": "NOPE"}}}},
                     {**good, "streams": {"x": {**stream_case, "expect": {"stop": "x", "calls": [{}], "results": []}}}},
                     {**good, "streams": {"x": {**stream_case, "expect": {"stop": 1, "calls": [], "results": []}}}},
                     {**good, "streams": {"x": {**stream_case, "expect": {"stop": "x", "calls": {}, "results": []}}}},
                     {**good, "streams": {"x": {**stream_case, "expect": {"stop": "x", "calls": [], "results": {}}}}},
                     {**good, "streams": {"x": {**stream_case, "expect": {"stop": "x"}}}}]
        for root in bad_roots:
            with self.subTest(root=str(root)[:80]):
                self.assertFixtureRefused(root)

    def test_loader_accepts_a_minimal_valid_file(self):
        good = self.good()
        minimal = {**good, "streams": {"x": {"description": "", "events": [],
                                             "expect": {"error": "STREAM_INCOMPLETE", "detail": None}}}}
        with tempfile.TemporaryDirectory() as directory:
            fixture = ps.load_fixture("openai", path=self.write(directory, minimal))
        self.assertEqual(list(fixture.cases), ["x"])
        self.assertIs(ps.run_case("openai", fixture.cases["x"])["passed"], True)


# ============================================================================================
# The stream table: a folder of recorded NAME.sse + NAME.json pairs against parse_sse
# ============================================================================================


def write_pair(folder, name, provider, events, expect, *, text=None):
    revision = ps.protocol_for(provider).profile.adapter_revision
    body = ps.render_sse(provider, events) if text is None else text
    with open(Path(folder) / f"{name}.sse", "w", encoding="utf-8", newline="") as handle:
        handle.write(body)
    fixture = {"format": "provider-streams-v1", "adapter_revision": revision, "checked": "2026-12-01",
               "source": "synthetic", "streams": {name: {"description": "", "events": events, "expect": expect}}}
    with open(Path(folder) / f"{name}.json", "w", encoding="utf-8") as handle:
        json.dump(fixture, handle)


def sdk_expect(calls, stop):
    return {"stop": stop, "calls": [{"call_id": c, "name": n, "arguments": json.loads(a)} for c, n, a in calls],
            "results": [{"status": "error", "error_code": "UNKNOWN_TOOL", "delivery": "none"} for _ in calls]}


def cli_of(main, *argv):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(list(argv))
    return status, out.getvalue()


class TestStreamTable(unittest.TestCase):
    def table(self, folder):
        return {row.name: row for row in map(stream_table.judge, stream_table.read_pairs(folder))}

    def test_verdicts(self):
        calls = [("call_1", "get_order", ORDER7)]
        with tempfile.TemporaryDirectory() as folder:
            floats = [{**event, "temperature": 1.0} for event in stream("openai")]
            write_pair(folder, "a_match", "openai", floats, sdk_expect(calls, "completed"))
            write_pair(folder, "b_other_call", "openai", stream("openai"),
                       sdk_expect([("call_2", "get_order", ORDER7)], "completed"))
            write_pair(folder, "c_other_stop", "gemini", stream("gemini"), sdk_expect(calls, "completed"))
            cut = stream("anthropic")
            cut[-2] = {**cut[-2], "delta": {"stop_reason": "max_tokens"}}
            write_pair(folder, "d_cut", "anthropic", cut, sdk_expect(calls, "max_tokens"))
            write_pair(folder, "e_client_item", "openai", openai_items(["custom_tool_call"]),
                       sdk_expect(calls, "completed"))
            server = stream("anthropic", [])
            server[1:1] = [{"type": "content_block_start", "index": 0,
                            "content_block": {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search"}},
                           {"type": "content_block_stop", "index": 0}]
            write_pair(folder, "f_server_block", "anthropic", server, sdk_expect([], "end_turn"))
            broken = without("openai", stream("openai"), 1)
            write_pair(folder, "g_wrong_refusal", "openai", broken, sdk_expect(calls, "completed"))
            write_pair(folder, "h_expected_error", "openai", broken, {"error": "STREAM_NOT_OPEN", "detail": None})
            text = ps.render_sse("anthropic", stream("anthropic")).rstrip("\n")
            write_pair(folder, "i_no_final_blank_line", "anthropic", stream("anthropic"), sdk_expect(calls, "tool_use"),
                       text=text)
            write_pair(folder, "j_cut_mid_event", "anthropic", stream("anthropic"), sdk_expect(calls, "tool_use"),
                       text=text[:-5])
            rows = self.table(folder)
        self.assertEqual({name: (row.verdict, row.seen, row.note) for name, row in rows.items()}, {
            "a_match": ("match", "1 call(s), stop completed", ""),
            "b_other_call": ("MISMATCH", "1 call(s), stop completed", ""),
            "c_other_stop": ("MISMATCH", "1 call(s), stop requires_action", ""),
            "d_cut": ("refused", "STREAM_TRUNCATED", ""),
            "e_client_item": ("refused", "STREAM_CALL_UNANSWERABLE", ""),
            "f_server_block": ("refused", "STREAM_BLOCK_UNSUPPORTED", ""),
            "g_wrong_refusal": ("MISMATCH", "STREAM_NOT_OPEN", ""),
            "h_expected_error": ("refused", "STREAM_NOT_OPEN", ""),
            "i_no_final_blank_line": ("match", "1 call(s), stop tool_use", "file lacked its final blank line"),
            "j_cut_mid_event": ("MISMATCH", "STREAM_SSE_INVALID (JSON_INVALID)", "file lacked its final blank line"),
        })

    def documented_refusals(self):
        """One small stream for each refusal the layer documents, with what the SDK would read."""
        calls = [("call_1", "get_order", ORDER7)]

        def anthropic_block(kind):
            events = stream("anthropic", [])
            events[1:1] = [{"type": "content_block_start", "index": 0, "content_block": {"type": kind}},
                           {"type": "content_block_stop", "index": 0}]
            return events

        legacy = stream("gemini", [])
        legacy[-1] = {**legacy[-1], "interaction": {**legacy[-1]["interaction"], "outputs": []}}
        inside = stream("anthropic")
        inside = inserted("anthropic", inside, position("anthropic", inside, "content_block_delta"),
                          {"type": "content_block_future", "index": 0})
        unlisted = openai_items([], call_index=1)
        unlisted[-1] = {**unlisted[-1], "response": {"id": "resp_1", "status": "completed"}}
        started = stream("anthropic")
        started[0] = {**started[0], "message": {**started[0]["message"], "content": [{"type": "text", "text": "Hi"}]}}
        step_later = stream("gemini", [])
        step_later[1:1] = [{"event_type": "step.start", "index": 0, "step": {"type": "step_added_later"}},
                           {"event_type": "step.stop", "index": 0}]
        empty = {"stop": "completed", "calls": [{"call_id": "call_1", "name": "get_order", "arguments": ""}],
                 "results": [{"status": "error", "error_code": "UNKNOWN_TOOL", "delivery": "none"}]}
        return {
            "compaction": ("anthropic", anthropic_block("compaction"), sdk_expect([], "end_turn")),
            "fallback": ("anthropic", anthropic_block("fallback"), sdk_expect([], "end_turn")),
            "thinking": ("anthropic", anthropic_block("thinking"), sdk_expect([], "end_turn")),
            "unlisted_block": ("anthropic", anthropic_block("block_added_later"), sdk_expect([], "end_turn")),
            "unlisted_item": ("openai", openai_items(["item_added_later"]), sdk_expect(calls, "completed")),
            "unlisted_step": ("gemini", step_later, sdk_expect([], "completed")),
            "client_item": ("openai", openai_items(["apply_patch_call"]), sdk_expect(calls, "completed")),
            "unknown_event_in_call": ("anthropic", inside, sdk_expect(calls, "tool_use")),
            "another_revision": ("gemini", legacy, sdk_expect([], "completed")),
            "skip_nothing_lists": ("anthropic", [{**event, "index": event["index"] + 1} if "index" in event else event
                                                 for event in stream("anthropic")], sdk_expect(calls, "tool_use")),
            "skip_output_missing": ("openai", unlisted, sdk_expect(calls, "completed")),
            "skip_input_unlisted": ("gemini", [{**event, "index": event["index"] + 1} if "index" in event else event
                                               for event in stream("gemini")], sdk_expect(calls, "requires_action")),
            "empty_openai_arguments": ("openai", stream("openai", [("call_1", "get_order", "")]), empty),
            "content_in_message_start": ("anthropic", started, sdk_expect(calls, "tool_use")),
        }

    def test_every_documented_refusal_is_reported_as_refused(self):
        with tempfile.TemporaryDirectory() as folder:
            for name, (provider, events, expect) in self.documented_refusals().items():
                write_pair(folder, name, provider, events, expect)
            rows = self.table(folder)
        self.assertEqual({name: (row.seen, row.verdict) for name, row in rows.items()}, {
            "compaction": ("STREAM_BLOCK_UNSUPPORTED", "refused"),
            "fallback": ("STREAM_BLOCK_UNSUPPORTED", "refused"),
            "thinking": ("STREAM_BLOCK_UNSUPPORTED", "refused"),
            "unlisted_block": ("STREAM_BLOCK_UNSUPPORTED", "refused"),
            "unlisted_item": ("STREAM_BLOCK_UNSUPPORTED", "refused"),
            "unlisted_step": ("STREAM_BLOCK_UNSUPPORTED", "refused"),
            "client_item": ("STREAM_CALL_UNANSWERABLE", "refused"),
            "unknown_event_in_call": ("STREAM_UNKNOWN_EVENT", "refused"),
            "another_revision": ("STREAM_REVISION_MISMATCH", "refused"),
            "skip_nothing_lists": ("STREAM_OUT_OF_ORDER", "refused"),
            "skip_output_missing": ("STREAM_INCONSISTENT", "refused"),
            "skip_input_unlisted": ("STREAM_OUT_OF_ORDER", "refused"),
            "empty_openai_arguments": ("STREAM_ARGUMENTS_INVALID (JSON_INVALID)", "refused"),
            "content_in_message_start": ("STREAM_EVENT_MALFORMED", "refused"),
        })

    def test_the_same_codes_for_other_reasons_stay_mismatches(self):
        # Each code of RIGHT_REFUSALS, raised for a stream that breaks the protocol rather than for
        # what the layer refuses by policy: the table must not excuse it.
        calls = [("call_1", "get_order", ORDER7)]
        explained = openai_items(["message"], call_index=2)
        listed = explained[-1]["response"]["output"]
        explained[-1] = {**explained[-1], "response": {
            **explained[-1]["response"], "output": [listed[0], {"type": "reasoning"}, {**listed[1], "arguments": "{}"}]}}
        after_end = stream("gemini")
        after_end.append(dict(after_end[-1]))
        malformed = edited("anthropic", stream("anthropic"), "content_block_start", index="0")
        not_json = stream("openai", [("call_1", "get_order", '{"order_ref":')])
        gap_malformed = openai_items(["message"], call_index=2)
        gap_malformed.insert(-1, {"type": "response.output_text.delta", "output_index": 2, "delta": "x"})
        input_then_other_call = stream("gemini")
        input_then_other_call = [{**event, "index": event["index"] + 1} if "index" in event else event
                                 for event in input_then_other_call]
        input_then_other_call[-1]["interaction"]["steps"] = [
            {"type": "user_input"}, {"type": "function_call", "id": "call_2", "name": "get_order"}]
        cases = {
            "gap_explained_other_contradiction": ("openai", explained, "STREAM_INCONSISTENT"),
            "input_explained_other_contradiction": ("gemini", input_then_other_call, "STREAM_INCONSISTENT"),
            "event_after_the_end": ("gemini", after_end, "STREAM_OUT_OF_ORDER"),
            "index_not_an_integer": ("anthropic", malformed, "STREAM_EVENT_MALFORMED"),
            "arguments_cut_json": ("openai", not_json, "STREAM_ARGUMENTS_INVALID (JSON_INVALID)"),
            "second_channel_into_a_call": ("openai", renumber(gap_malformed), "STREAM_INCONSISTENT"),
        }
        with tempfile.TemporaryDirectory() as folder:
            for name, (provider, events, _seen) in cases.items():
                write_pair(folder, name, provider, events,
                           sdk_expect(calls, "requires_action" if provider == "gemini" else
                                      "tool_use" if provider == "anthropic" else "completed"))
            rows = self.table(folder)
        self.assertEqual({name: (row.seen, row.verdict) for name, row in rows.items()},
                         {name: (seen, "MISMATCH") for name, (_provider, _events, seen) in cases.items()})

    def test_a_cut_turn_without_calls_expected_is_not_a_right_truncation(self):
        cut = stream("anthropic")
        cut[-2] = {**cut[-2], "delta": {"stop_reason": "max_tokens"}}
        with tempfile.TemporaryDirectory() as folder:
            write_pair(folder, "cut", "anthropic", cut, sdk_expect([], "max_tokens"))
            write_pair(folder, "used", "anthropic", cut, sdk_expect([("call_1", "get_order", ORDER7)], "tool_use"))
            rows = self.table(folder)
        self.assertEqual((rows["cut"].verdict, rows["used"].verdict), ("MISMATCH", "MISMATCH"))

    def test_cli_prints_the_table_and_counts(self):
        with tempfile.TemporaryDirectory() as folder:
            write_pair(folder, "one", "gemini", stream("gemini"), sdk_expect([("call_1", "get_order", ORDER7)],
                                                                             "requires_action"))
            status, text = cli_of(stream_table.main, folder)
            self.assertEqual(status, 0)
            self.assertTrue(text.splitlines()[0].startswith("stream"))
            self.assertEqual(text.splitlines()[-1], "1 streams: 1 match, 0 refused, 0 MISMATCH")
            status, text = cli_of(stream_table.main, folder, "--json")
            self.assertEqual((status, json.loads(text)["rows"][0]["verdict"]), (0, "match"))
            write_pair(folder, "two", "gemini", stream("gemini"), sdk_expect([], "completed"))
            status, text = cli_of(stream_table.main, folder)
            self.assertEqual((status, text.splitlines()[-1]), (1, "2 streams: 1 match, 0 refused, 1 MISMATCH"))

    def test_unreadable_folders_and_pairs_give_the_one_failure_shape(self):
        with tempfile.TemporaryDirectory() as folder:
            cases = [((str(Path(folder) / "missing"),), "STREAM_FIXTURE_INVALID"), ((folder,), "STREAM_FIXTURE_INVALID"),
                     ((), "CLI_USAGE"), ((folder, "--bogus"), "CLI_USAGE")]
            for argv, code in cases:
                with self.subTest(argv=argv):
                    status, text = cli_of(stream_table.main, *argv)
                    self.assertEqual((status, list(json.loads(text)), json.loads(text)["error"]["code"]),
                                     (2, ["passed", "error"], code))
                    self.assertNotIn(folder, text)
            write_pair(folder, "x", "openai", stream("openai"), sdk_expect([], "completed"))
            with open(Path(folder) / "x.json", "w", encoding="utf-8") as handle:
                handle.write('{"format": 1, "format": 2}')
            status, text = cli_of(stream_table.main, folder)
            self.assertEqual((status, json.loads(text)["error"]),
                             (2, ps.StreamError("STREAM_FIXTURE_INVALID", detail="JSON_DUPLICATE_KEY").to_json()))
            with open(Path(folder) / "x.json", "w", encoding="utf-8") as handle:
                handle.write('{"format": "provider-streams-v1", "adapter_revision": "x", "streams": {"x": {}}}')
            status, text = cli_of(stream_table.main, folder)
            self.assertEqual((status, json.loads(text)["error"]["code"]), (2, "STREAM_FIXTURE_INVALID"))

    def test_pair_and_byte_limits(self):
        with tempfile.TemporaryDirectory() as folder:
            write_pair(folder, "x", "gemini", stream("gemini"), sdk_expect([], "completed"))
            write_pair(folder, "y", "gemini", stream("gemini"), sdk_expect([], "completed"))
            self.assertEqual([pair.name for pair in stream_table.read_pairs(folder, max_pairs=2)], ["x", "y"])
            with self.assertRaises(ps.StreamError) as caught:
                stream_table.read_pairs(folder, max_pairs=1)
            self.assertEqual(caught.exception.code, "STREAM_FIXTURE_INVALID")
            size = max((Path(folder) / "x.json").stat().st_size, (Path(folder) / "x.sse").stat().st_size)
            self.assertEqual(len(stream_table.read_pairs(folder, max_bytes=size + 1000)), 2)
            with self.assertRaises(ps.StreamError) as caught:
                stream_table.read_pairs(folder, max_bytes=size - 1)
            self.assertEqual((caught.exception.code, caught.exception.detail), ("STREAM_FIXTURE_INVALID", "JSON_TOO_LARGE"))


class TestSdkConformanceSetup(unittest.TestCase):
    """The SDK check itself runs from .ci/run's extras (it needs the SDKs); here, what it stands on."""

    def test_the_sdks_are_pinned_exactly_and_nothing_else_is_installed(self):
        with open(HERE / "sdk_conformance" / "requirements.txt", encoding="utf-8") as handle:
            lines = [line.strip() for line in handle if line.strip() and not line.startswith("#")]
        pins = dict(line.split("==") for line in lines)
        self.assertEqual(sorted(pins), ["anthropic", "google-genai", "openai"])
        for name, version in pins.items():
            with self.subTest(name=name):
                self.assertRegex(version, r"^[0-9]+\.[0-9]+\.[0-9]+$")

    def test_the_environment_lives_outside_the_checkout_and_ci_runs_it(self):
        with open(HERE / "sdk_conformance" / "run.sh", encoding="utf-8") as handle:
            script = handle.read()
        self.assertIn('mktemp -d "${TMPDIR:-/tmp}/', script)
        self.assertIn("trap 'rm -rf \"$venv\"' EXIT", script)
        self.assertIn("PYTHONDONTWRITEBYTECODE=1", script)
        with open(HERE.parent / "README.md", encoding="utf-8") as handle:
            readme = handle.read()
        extras = readme.split("<!-- ci-extras:start -->")[1].split("<!-- ci-extras:end -->")[0]
        self.assertIn("\nbash provider_streams/sdk_conformance/run.sh\n", extras)

    def run_script_with(self, interpreters):
        """run.sh with a PATH holding only these stub interpreters (each records how it was called
        and fails, so nothing is installed) and the few tools the script needs."""
        bash = shutil.which("bash")
        if bash is None:
            self.skipTest("bash is not installed")
        with tempfile.TemporaryDirectory() as work:
            tools, scratch = Path(work) / "bin", Path(work) / "tmp"
            tools.mkdir()
            scratch.mkdir()
            for tool in ("dirname", "mktemp", "rm"):
                (tools / tool).symlink_to(shutil.which(tool))
            for name in interpreters:
                stub = tools / name
                stub.write_text(f'#!{bash}\necho "{name} $*" >"{work}/called"\nexit 3\n', encoding="utf-8")
                stub.chmod(0o755)
            done = subprocess.run([bash, str(HERE / "sdk_conformance" / "run.sh")], capture_output=True, text=True,
                                  env={"PATH": str(tools), "TMPDIR": str(scratch)}, timeout=60)
            called = (Path(work) / "called").read_text(encoding="utf-8") if (Path(work) / "called").exists() else ""
            return done.returncode, done.stderr, called.replace(str(scratch), "TMPDIR"), sorted(os.listdir(scratch))

    def test_the_script_finds_python_or_python3_and_leaves_no_environment(self):
        status, _stderr, called, left = self.run_script_with(["python3"])
        self.assertEqual((status, left), (3, []))
        self.assertRegex(called, r"^python3 -m venv TMPDIR/provider-streams-sdk\.[A-Za-z0-9]{6}\n$")
        status, _stderr, called, left = self.run_script_with(["python", "python3"])
        self.assertEqual((status, called.split(" ")[:3], left), (3, ["python", "-m", "venv"], []))
        status, stderr, called, left = self.run_script_with([])
        self.assertEqual((status, stderr, called, left), (1, "FAIL neither python nor python3 is on PATH\n", "", []))

    def test_the_layer_itself_imports_no_sdk(self):
        for path in (HERE / "provider_streams.py", HERE / "stream_table.py"):
            with self.subTest(path=path.name), open(path, encoding="utf-8") as handle:
                self.assertEqual(re.findall(r"^\s*(?:import|from) (?:openai|anthropic|google)\b", handle.read(), re.M), [])


# ============================================================================================
# 15. CLI
# ============================================================================================


def cli(*argv):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = ps.main(list(argv))
    return status, out.getvalue()


class TestCLI(unittest.TestCase):
    def test_readable_run_of_one_stream(self):
        status, text = cli("--provider", "anthropic", "--stream", "parallel_calls")
        self.assertEqual(status, 0)
        self.assertIn("turn          msg_01XFDUDYJgAACzvnptvVoYEN  stop=tool_use  calls=3", text)
        self.assertIn("result      error  NOT_FOUND", text)
        self.assertIn('"tool_use_id": "toolu_01Par3"', text)
        self.assertTrue(text.rstrip().endswith("PASS"))
        self.assertTrue(text.isascii())

    def test_json_run_of_one_stream(self):
        status, text = cli("--provider", "openai", "--stream", "one_call", "--json")
        report = json.loads(text)
        self.assertEqual((status, report["passed"], report["dispatched"]), (0, True, True))
        self.assertEqual(report["continuation"]["input"][0]["call_id"], "call_Kx81")

    def test_refused_stream_says_so_and_dispatches_nothing(self):
        status, text = cli("--provider", "gemini", "--stream", "legacy_outputs_shape")
        self.assertEqual(status, 0)
        self.assertIn("refused       STREAM_REVISION_MISMATCH at event 1", text)
        self.assertIn("no call was dispatched", text)
        status, text = cli("--provider", "openai", "--stream", "arguments_duplicate_key", "--json")
        self.assertEqual(json.loads(text)["error"]["detail"], "JSON_DUPLICATE_KEY")

    def test_readable_output_escapes_non_ascii_as_json_does(self):
        status, text = cli("--provider", "gemini", "--stream", "split_fragments")
        self.assertEqual(status, 0)
        self.assertIn('"note":"caf\\u00e9 \\"\\u65e5\\u672c\\" \\ud83d\\ude00 \\\\ \\u00e9"', text)

    def test_text_only_stream_has_no_continuation(self):
        status, text = cli("--provider", "openai", "--stream", "text_only")
        self.assertEqual(status, 0)
        self.assertIn("continuation  none", text)

    def test_list_streams(self):
        status, text = cli("--list")
        self.assertEqual(status, 0)
        self.assertIn("max_tokens_in_tool_input", text)
        self.assertIn("STREAM_TRUNCATED", text)
        status, text = cli("--list", "--provider", "gemini", "--json")
        listing = json.loads(text)
        self.assertEqual(list(listing["providers"]), ["gemini"])
        self.assertEqual(listing["providers"]["gemini"]["streams"]["one_call"], "1 call(s), stop requires_action")

    def test_hostile_arguments_exit_2_without_echo(self):
        hostile = "../../etc/passwd\u202e\x1b[31m" + "A" * 5000
        cases = (("--provider", "nope", "--stream", "one_call"), ("--provider", "openai", "--stream", hostile),
                 ("--provider", "openai"), ("--stream", "one_call"), (), ("--bogus",),
                 ("--provider", hostile, "--stream", "x"))
        for argv in cases:
            with self.subTest(argv=[arg[:20] for arg in argv]):
                status, text = cli(*argv)
                self.assertEqual(status, 2)
                report = json.loads(text)
                self.assertEqual(list(report), ["passed", "error"])
                self.assertIn(report["error"]["code"], ("CLI_USAGE", "STREAM_CLI_UNKNOWN_STREAM"))
                self.assertNotIn("etc/passwd", text)
                self.assertNotIn("Traceback", text)
        status, text = cli("--provider", "openai", "--stream", hostile, "--json")
        report = json.loads(text)
        self.assertEqual((status, report["passed"], report["error"]["code"]), (2, False, "STREAM_CLI_UNKNOWN_STREAM"))

    def test_any_unrecognised_argument_is_refused_even_beside_valid_ones(self):
        status, text = cli("--provider", "openai", "--stream", "one_call", "--verbose")
        self.assertEqual((status, json.loads(text)),
                         (2, {"passed": False, "error": tool_dispatcher.BoundaryError("CLI_USAGE").to_json()}))

    def test_mismatch_exits_1(self):
        case = ps.load_fixture("openai").cases["one_call"]
        report = ps.run_case("openai", ps.StreamCase(case.name, case.description, case.events,
                                                     {**case.expect, "stop": "other"}))
        with mock.patch.object(ps, "run_named_stream", return_value=report):
            status, text = cli("--provider", "openai", "--stream", "one_call")
        self.assertEqual(status, 1)
        self.assertTrue(text.rstrip().endswith("FAIL"))

    def test_unexpected_failure_is_contained(self):
        with mock.patch.object(ps, "run_named_stream", side_effect=RuntimeError("/secret/path")):
            status, text = cli("--provider", "openai", "--stream", "one_call", "--json")
        report = json.loads(text)
        self.assertEqual((status, report["passed"], report["error"]["code"]), (2, False, "INTERNAL_ERROR"))
        self.assertNotIn("secret", text)
        with mock.patch.object(ps, "run_named_stream", side_effect=TypeError("unhashable")):
            status, text = cli("--provider", "openai", "--stream", "one_call")  # readable mode: the same shape
        self.assertEqual((status, json.loads(text)["error"]["code"]), (2, "INTERNAL_ERROR"))

    def test_broken_fixture_exits_2(self):
        with mock.patch.object(ps, "FIXTURE_DIR", Path(tempfile.gettempdir()) / "no-such-fixture-dir"):
            status, text = cli("--provider", "openai", "--stream", "one_call")
        self.assertEqual((status, json.loads(text)),
                         (2, {"passed": False, "error": ps.StreamError("STREAM_FIXTURE_INVALID",
                                                                       detail="FIXTURE_UNREADABLE").to_json()}))

    def test_script_runs_from_the_repository_root_without_traceback_or_bytecode(self):
        environment = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
        done = subprocess.run([sys.executable, "-B", "-W", "error", "provider_streams/provider_streams.py",
                               "--provider", "gemini", "--stream", "one_call"],
                              cwd=HERE.parent, capture_output=True, text=True, env=environment, timeout=60)
        self.assertEqual((done.returncode, done.stderr), (0, ""))
        self.assertIn("function_result", done.stdout)
        done = subprocess.run([sys.executable, "-B", "provider_streams/provider_streams.py", "--provider", "x"],
                              cwd=HERE.parent, capture_output=True, text=True, env=environment, timeout=60)
        self.assertEqual((done.returncode, done.stderr), (2, ""))
        self.assertNotIn(str(HERE), done.stdout)
        self.assertFalse((HERE / "__pycache__").exists())


if __name__ == "__main__":
    unittest.main()
