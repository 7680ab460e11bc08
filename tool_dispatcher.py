"""Tool Result v2 trusted boundary: from a model's tool-call proposal to the provider message.

A model only *proposes* ``{"name": ..., "arguments": {...}}``. This module is everything the
application does between that proposal and the message that goes back to the provider: it binds
the trusted call context, checks the registry and an exact input contract, authorizes the trusted
principal, requires idempotency, approval, the current business state and a live deadline for
writes, runs a mock handler, checks an exact output contract, and splits the result into what the
model may see (``model_result``) and what it never sees (``protected_audit``, with three SHA-256
digests). Adapters then shape a verified package for three provider APIs, or as the result an
MCP server answers its client.

What this module never does:
- talk to a network, an SDK, a model or a real business service: handlers are mocks over an
  in-memory world that the fixture declares;
- recurse over untrusted input: nesting is bounded by iterative scans before any decoder or
  encoder sees a hostile value;
- rely on a bare ``assert`` (``python -O`` deletes them) or emit a warning;
- take identity from the model: principal, approval, call ids and idempotency keys come from the
  trusted host only;
- guess an outcome: an operation whose effect may have happened stays ``unknown`` until an
  explicit status query reconciles it against a downstream receipt.

Sections, in the order data flows:
    1. Limits and constants          12. The demo host: orders, refunds
    2. Errors and the code catalog   13. Output contracts
    3. Value types                   14. Projections
    4. Canonical JSON                15. Digests and seals
    5. Strict bounded JSON decoding  16. The dispatcher
    6. Fixture loading               17. Package verification
    7. Proposal and context binding  18. Result sets
    8. The contract language         19. Provider adapters
    9. Registry and input contracts  20. The audit log
   10. Host hooks and authorization  21. Fixture runner
   11. Operation lifecycle, approval, business state, deadline                22. CLI

Reading it first: the boundary proper is sections 7, 9-11 and 13-19, the path a call takes from
proposal to provider item; 1-6 are its vocabulary (limits, codes, values, canonical JSON, the
strict decoder, the fixture), 20-22 what a host builds around it (audit log, fixture runner, CLI).
Section 8, the contract language, is nearly a third of the file, support a first reader may skip: it
turns JSON Schema into the exact checks section 9 calls (CompiledSchema.check), and nothing else
in the boundary depends on how. It stands where the data flows (the registry is compiled from
it), not later in the file, so that every name is defined before it is used.
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
import hashlib
import hmac
import ipaddress
import json
import math
import operator
import os
import re
import signal
import stat
import sys
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from types import MappingProxyType
from typing import Any, ClassVar, Final, NamedTuple, NoReturn, Protocol

__all__ = [  # what other layers and readers may use; every other name is this module's own
    # 1. Limits and constants
    "MAX_FIXTURE_BYTES", "MAX_NESTING_DEPTH", "MAX_SAFE_INTEGER", "MAX_INTEGER_DIGITS", "PORTABLE_FLOAT_GAP",
    "MAX_ENVELOPE_INTEGER_DIGITS", "MAX_CASES", "MAX_STEPS_PER_CASE", "MAX_ROLES", "MAX_ORDERS",
    "MAX_APPROVERS", "MAX_WORLD_CHANGES", "MAX_IDENTIFIER_LENGTH", "MAX_TEXT_LENGTH", "MIN_TIME",
    "MAX_TIME", "MAX_REVISION", "MAX_OUTPUT_BYTES", "MAX_OUTPUT_DEPTH", "MAX_OUTPUT_NODES",
    "MAX_OUTPUT_BYTES_CEILING", "MAX_OUTPUT_NODES_CEILING",
    "MAX_RESULT_SET", "SUBJECT_REF_CACHE", "TEMPLATE_CACHE", "PACKAGE_FORMAT", "MODEL_RESULT_VERSION",
    "AUDIT_VERSION", "FIXTURE_FORMAT", "BOUNDARY_PRODUCER", "REQUEST_DIGEST_DOMAIN", "RESULT_DIGEST_DOMAIN",
    "CALL_BINDING_DIGEST_DOMAIN", "CALL_FINGERPRINT_DOMAIN", "SUBJECT_REF_DOMAIN", "DOWNSTREAM_REF_DOMAIN",
    "APPROVAL_REF_DOMAIN", "SEAL_DOMAIN", "AUDIT_ENTRY_DOMAIN", "SEAL_KEYS_FORMAT", "AUDIT_LOG_FORMAT",
    "SEAL_KEYS_ENVIRONMENT", "MAX_SEAL_KEYS", "MIN_SEAL_KEY_BYTES", "MAX_SEAL_KEY_BYTES", "MAX_SEAL_KEYS_BYTES",
    "MAX_AUDIT_LINE_BYTES", "MAX_AUDIT_ENTRIES", "MAX_AUDIT_LOG_BYTES",
    "IDENTIFIER_PATTERN", "ORDER_REF_PATTERN", "DIGEST_PATTERN", "STATUSES", "OUTCOMES", "DELIVERIES",
    "RECOVERIES", "ORDER_STATUSES", "OPERATION_STATES", "PURPOSES",
    # 2. Errors and the code catalog
    "ErrorSpec", "error_specs", "ERROR_CATALOG", "CatalogError", "BoundaryError", "error_view",
    # 3. Value types
    "ProviderProfile", "PROVIDER_PROFILES", "registered_profile", "CallContext", "Principal", "Approval",
    "Order",
    # 4. Canonical JSON
    "canonical_text", "jcs_text", "canonical_json", "number_text", "package_digests", "canonical_sha256", "SLOT", "CanonicalTemplate", "json_copy",
    # 5. Strict bounded JSON decoding
    "exceeds_nesting", "is_portable_text", "is_portable_number", "refuse_float", "finite_float", "portable_float", "is_portable_float", "safe_int", "short_int", "JsonPolicy",
    "PORTABLE_JSON", "ENVELOPE_JSON", "decode_strict_json",
    # 6. Fixture loading
    "WorldChange", "Expectation", "Step", "Case", "World", "Fixture",
    "plain_keys", "is_identifier", "load_fixture", "read_bounded", "parse_fixture",
    # 7. Proposal and context binding
    "check_context", "check_principal", "principal_view",
    # 8. The contract language
    "MAX_SCHEMA_BYTES", "MAX_SCHEMA_DEPTH", "MAX_SCHEMA_NODES", "MAX_PROPERTIES", "MAX_DEFINITIONS",
    "MAX_ENUM", "MAX_PATTERN_LENGTH", "MAX_NAME_LENGTH", "MAX_QUANTIFIER", "MAX_BRANCHES",
    "PATTERN_CACHE", "OUTPUT_BOUNDS", "DEFAULT_MAX_LENGTH", "DEFAULT_MAX_ITEMS", "SCHEMA_ROOT", "VALUE_ROOT", "ANNOTATIONS",
    "ROOT_ONLY",
    "REFUSED_KEYWORDS", "TYPE_KEYWORDS", "SCALAR_KINDS", "DEFINITION_PREFIXES", "CONTRACTS_FORMAT",
    "MAX_CONTRACTS_BYTES", "MAX_CONTRACTS_DEPTH", "MAX_TOOLS", "MAX_DESCRIPTION_LENGTH", "TOOL_NAME",
    "EFFECTS", "SOURCES", "HINT_FIELDS", "OVERLAY_FORMAT", "MAX_OVERLAY_PATHS", "MAX_OVERLAY_PATH_LENGTH",
    "StringRule", "IntegerRule", "NumberRule", "BooleanRule", "ObjectRule", "ArrayRule", "MapRule", "NullableRule", "UnionRule", "Rule", "compile_pattern",
    "FORMATS", "MAX_URI_PORT", "MAX_EMAIL_LENGTH", "UNIONS", "DISCRIMINATOR", "MAX_UNION_BRANCHES", "DEFAULT_MAX_ENTRIES",
    "pattern_length_bounds", "prescan", "Bounds", "compile_schema", "CompiledSchema", "narrow", "ToolSpec",
    "ContractSet", "load_contracts", "parse_contracts", "declare_tool", "declare_contracts", "ContractOverlay", "load_overlay", "parse_overlay",
    # 9. Registry and input contracts
    "shipped_contracts_document", "REGISTRY", "check_input",
    # 10. Host hooks and authorization
    "MAX_RESOURCE_REF_LENGTH", "PRECONDITION_CODES", "EFFECT_REPORTS", "STATUS_FINDINGS", "Resource",
    "ExecuteCall", "Execution", "StatusQuery", "StatusAnswer", "ToolHooks", "authorize", "check_precondition",
    # 11. Operation lifecycle, approval, business state, deadline
    "LIFECYCLE", "LIFECYCLE_STATES", "LEASED_STATES", "FREE_STATES", "MODEL_STATE", "REPEAT_ANSWER",
    "transition", "OperationRecord", "advance", "check_approval", "approval_ref", "approval_for_call",
    "approval_view", "check_deadline",
    # 12. The demo host: orders, refunds and their hooks; injected faults
    "Receipt", "MockDownstream", "refund_draft_receipt", "derived_ref", "HandlerCall", "HandlerResult",
    "handle_get_order", "handle_create_refund_draft", "receipt_output", "Handler", "HANDLERS",
    "REFUNDABLE_STATUS", "check_refundable", "receipt_fits", "OrderDesk", "ResponseLost",
    "InjectedHandlerFailure", "FAULTS_BEFORE_HANDLER", "FAULTS_AFTER_HANDLER", "FAULTS_BEFORE_RECEIPT",
    "FAULTS_INSTEAD_OF_HANDLER", "FAULTS",
    # 13. Output contracts
    "SECRET_KEY_WORDS", "SECRET_WORD_ENDINGS", "SECRET_KEY_PAIRS", "SECRET_WORD_QUALIFIERS", "MIN_SECRET_KEY_BODY",
    "SECRET_KEY_PREFIXES", "SECRET_VALUE_SHAPES", "SECRET_KEY_VERDICTS", "is_secret_key", "is_secret_text",
    "scan_output", "check_output", "check_output_fields",
    "TEXT_OUTPUT_SCHEMA", "TEXT_OUTPUT", "output_contract",
    # 14. Projections
    "Answer", "ANSWERS", "recovery_for", "project_model_result",
    # 15. Digests and seals
    "request_sha256", "result_sha256", "call_binding_sha256", "spec_request_sha256", "model_result_sha256",
    "spec_call_binding_sha256", "project_data_result", "evidence_view", "SealKeys", "UNSEALED", "seal_view", "seal_holds",
    "load_seal_keys", "parse_seal_keys", "checked_seal_keys", "seal_keys_from_environment",
    # 16. The dispatcher
    "AdmittedCall", "RecordKey", "same_intent", "receipt_binds", "downstream_refs", "Claim",
    "OperationStore", "OPERATION_STORE_METHODS", "CountingDownstream", "MemoryOperations", "AdaptedDispatch",
    "Dispatcher", "withheld",
    # 17. Package verification
    "REDACTIONS", "verify_package",
    # 18. Result sets
    "verify_result_set",
    # 19. Provider adapters
    "UNREGISTERED_TOOL_NAME", "model_result_text", "ModelView", "model_view", "SHAPES", "ADAPTERS", "adapt", "to_openai_responses",
    "to_anthropic_messages", "to_gemini_interactions", "to_mcp_tool_result",
    # 20. The audit log
    "GENESIS_SHA256", "audit_entry_sha256", "audit_entry_line", "audit_entry_from_text", "AuditLog",
    "AuditReport", "read_audit_log", "verify_audit_log",
    # 21. Fixture runner
    "EXPECTATION_FIELDS", "StepReport", "run_step", "fresh_dispatcher", "DispatcherFactory", "run_case",
    "run_fixture", "render_report",
    # 22. CLI
    "CliParser", "command_name", "emit_json", "cli_failure", "EXIT_INTERRUPTED", "run_cli", "main",
]

# ============================================================================================
# 1. Limits and constants
# ============================================================================================
# Teaching limits that tests replay on both sides; they are not a production gateway's defence
# against denial of service.

MAX_FIXTURE_BYTES: Final = 65_536  # counted on the raw bytes, before any decoding
MAX_NESTING_DEPTH: Final = 32  # containers deep; enforced by a scan before the JSON decoder runs
MAX_SAFE_INTEGER: Final = 2**53 - 1  # the integers every JSON peer (JavaScript too) reads exactly
MAX_INTEGER_DIGITS: Final = len(str(MAX_SAFE_INTEGER))  # a longer digit run is refused unparsed
# Doubles whose canonical text is a digit run beyond MAX_SAFE_INTEGER: outside the portable domain
# (is_portable_float), from 2**53 up to, not including, 1e21, where ECMAScript switches to exponents.
PORTABLE_FLOAT_GAP: Final = (float(MAX_SAFE_INTEGER + 1), 1e21)
MAX_ENVELOPE_INTEGER_DIGITS: Final = 39  # 2**128 has 39 digits: any provider counter, never a slow int()
MAX_CASES: Final = 64  # cases in one fixture
MAX_STEPS_PER_CASE: Final = 8  # steps run on one dispatcher instance
MAX_ROLES: Final = 8  # roles on one principal
MAX_ORDERS: Final = 64  # orders in the fixture's world
MAX_APPROVERS: Final = 16  # entries on the trusted approver allowlist
MAX_WORLD_CHANGES: Final = 8  # trusted order-status changes applied before one step
MAX_IDENTIFIER_LENGTH: Final = 64  # ids, keys, tenants, subjects, roles
MAX_TEXT_LENGTH: Final = 160  # case titles and proposed tool names
MIN_TIME: Final = 0  # times are whole Unix seconds ...
MAX_TIME: Final = 4_102_444_800  # ... up to 2100-01-01T00:00:00Z, far inside the safe integers
MAX_REVISION: Final = 1_000_000  # an order's resource revision
MAX_OUTPUT_BYTES: Final = 4_096  # canonical bytes of one tool output, unless its host sets another limit
MAX_OUTPUT_DEPTH: Final = 8  # containers deep in one tool output
MAX_OUTPUT_NODES: Final = 256  # values in one tool output, unless its host sets another limit
# The ceilings a host's per-tool output limits stay under: a package, arguments and evidence
# included, must fit one audit line (MAX_AUDIT_LINE_BYTES), and the model reads it whole.
MAX_OUTPUT_BYTES_CEILING: Final = 32_768
MAX_OUTPUT_NODES_CEILING: Final = 4_096
MAX_RESULT_SET: Final = 1_024  # results answered in one provider turn
SUBJECT_REF_CACHE: Final = 1_024  # subject references remembered; a cache of a pure function, not a limit
TEMPLATE_CACHE: Final = 64  # tool contracts whose digest templates are kept; a cache too, not a limit
MAX_SEAL_KEYS: Final = 16  # keys a verifier accepts at once: the current one and those it rotated out
MIN_SEAL_KEY_BYTES: Final = 32  # HMAC-SHA256 keys no shorter than its output
MAX_SEAL_KEY_BYTES: Final = 64  # SHA-256's block: a longer key is hashed first, and gains nothing
MAX_SEAL_KEYS_BYTES: Final = 8_192  # a seal-keys file: 16 keys of 64 bytes in hex fit with room
MAX_AUDIT_LINE_BYTES: Final = 65_536  # one audit entry: a package is at most a few KiB
MAX_AUDIT_ENTRIES: Final = 1_000_000  # entries one verification reads
MAX_AUDIT_LOG_BYTES: Final = 256 * 1024 * 1024  # a log that one verification reads, whole

PACKAGE_FORMAT: Final = "tool-result-package-v4"
MODEL_RESULT_VERSION: Final = "model-result-v2"
AUDIT_VERSION: Final = "protected-audit-v3"
FIXTURE_FORMAT: Final = "tool-cases-v2"
BOUNDARY_PRODUCER: Final = "tool-dispatcher"  # the producer of every result no handler produced

REQUEST_DIGEST_DOMAIN: Final = "tool-dispatcher/request/v3"
RESULT_DIGEST_DOMAIN: Final = "tool-dispatcher/result/v3"
CALL_BINDING_DIGEST_DOMAIN: Final = "tool-dispatcher/call-binding/v4"
CALL_FINGERPRINT_DOMAIN: Final = "tool-dispatcher/call-fingerprint/v3"
SUBJECT_REF_DOMAIN: Final = "tool-dispatcher/subject-ref/v3"
SEAL_DOMAIN: Final = "tool-dispatcher/seal/v2"
AUDIT_ENTRY_DOMAIN: Final = "tool-dispatcher/audit-entry/v2"
SEAL_KEYS_FORMAT: Final = "seal-keys-v1"
AUDIT_LOG_FORMAT: Final = "audit-log-v2"
SEAL_KEYS_ENVIRONMENT: Final = "TOOL_DISPATCHER_SEAL_KEYS"  # names a seal-keys file; never the key itself
DOWNSTREAM_REF_DOMAIN: Final = "tool-dispatcher/downstream-ref/v3"
APPROVAL_REF_DOMAIN: Final = "tool-dispatcher/approval-ref/v2"

# Whole-string patterns, always used with fullmatch: a regex "$" would let "ORDER-7\n" through.
# [0-9] rather than \d, which also matches digits of other scripts.
IDENTIFIER_PATTERN: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]*")
ORDER_REF_PATTERN: Final = re.compile(r"ORDER-[0-9]{1,12}")
DIGEST_PATTERN: Final = re.compile(r"[0-9a-f]{64}")

STATUSES: Final = frozenset({"ok", "error", "unknown"})
OUTCOMES: Final = frozenset({"succeeded", "not_executed", "failed", "unknown"})
DELIVERIES: Final = frozenset({"fresh", "local_replay", "receipt_reconciled", "none"})
RECOVERIES: Final = frozenset({"none", "retry", "query_status"})
ORDER_STATUSES: Final = frozenset({"paid", "pending", "refunded"})
OPERATION_STATES: Final = frozenset({"none", "succeeded", "unknown", "reconciled"})
PURPOSES: Final = frozenset({"dispatch", "query_status"})

# ============================================================================================
# 2. Errors and the code catalog
# ============================================================================================
# One error type, one closed catalog. Messages are fixed: nothing from the input (no path, no
# value, no key name) is ever formatted into them. Scope says where a code may surface:
#   tool    inside a model_result, shown to the model
#   verify  raised by package, result-set and adapter verification
#   host    raised to the trusted host when it hands the boundary an invalid context
#   json    raised by the strict decoder (the fixture loader and later layers share it)
#   fixture raised by the fixture loader after decoding
#   schema  a schema (or a host overlay) the contract language will not compile (section 8)
#   value   a value a compiled schema refuses; the dispatcher never shows one to a model: it
#           answers INVALID_ARGUMENTS or OUTPUT_CONTRACT_VIOLATION instead
#   contracts a contracts (or overlay) file refused after decoding; it stops the host first
#   audit   the first fault an audit-log verification finds
#   cli     printed by the command line


@dataclass(frozen=True, slots=True)
class ErrorSpec:
    message: str
    retryable: bool
    scope: str


def error_specs(scope: str, retryable: bool, **messages: str) -> dict[str, ErrorSpec]:
    """Catalog entries that share a scope and a retryability: code=fixed message, ..."""
    return {code: ErrorSpec(message, retryable, scope) for code, message in messages.items()}


ERROR_CATALOG: Final[Mapping[str, ErrorSpec]] = MappingProxyType({
    **error_specs(
        "tool", False,
        INVALID_PROPOSAL="The tool call proposal must be exactly a name and an arguments object.",
        UNKNOWN_TOOL="The requested tool is not registered.",
        INVALID_ARGUMENTS="The tool arguments do not match the tool's input contract.",
        CALL_CONFLICT="This provider call identity is already bound to a different request.",
        PERMISSION_DENIED="The caller is not allowed to use this tool.",
        NOT_FOUND="The requested resource was not found.",
        IDEMPOTENCY_KEY_REQUIRED="A write requires an idempotency key.",
        IDEMPOTENCY_CONFLICT="The idempotency key is already bound to a different request.",
        OUTCOME_UNKNOWN="The operation may have taken effect; query its status instead of retrying.",
        APPROVAL_REQUIRED="This write requires an approval.",
        APPROVER_NOT_TRUSTED="The approval was not given by a trusted approver.",
        APPROVAL_MISMATCH="The approval does not match this exact call.",
        APPROVAL_EXPIRED="The approval has expired.",
        APPROVAL_CONSUMED="The approval was already used by a write; a new write needs a new approval.",
        ORDER_NOT_REFUNDABLE="The order is not in a refundable state.",
        HANDLER_FAILED="The tool failed while running.",
        OUTPUT_CONTRACT_VIOLATION="The tool output does not match the tool's output contract.",
        OUTPUT_SENSITIVE_FIELD="The tool output contained a sensitive field and was withheld.",
        OUTPUT_TOO_LARGE="The tool output exceeded its size limit and was withheld.",
        OUTPUT_TOO_DEEP="The tool output exceeded its nesting limit and was withheld.",
        OUTPUT_BINDING_MISMATCH="The tool output is not bound to this request and was withheld.",
        STATUS_CONFLICT="The status query does not match the recorded operation.",
        PRECONDITION_FAILED="The resource is not in a state this tool accepts.",
        TOOL_FAILED="The tool reported that it failed, and that it committed nothing.",
        RECONCILIATION_REQUIRED="This tool offers no status check: the operation's outcome stays unknown "
                                "until the host settles it.",
    ),
    **error_specs(
        "tool", True,
        DEADLINE_EXCEEDED="The deadline passed before the tool could answer; no effect was committed.",
        RATE_LIMITED="The tool is rate limited; nothing was executed.",
        RECEIPT_UNAVAILABLE="The operation's receipt is not available yet; its outcome stays unknown.",
        OPERATION_NOT_EXECUTED="The downstream confirmed that the operation took no effect; it may be "
                               "dispatched again, with a new approval.",
    ),
    **error_specs(
        "verify", False,
        PACKAGE_MALFORMED="The result package does not have the exact expected structure.",
        PACKAGE_INCONSISTENT="The result package combines fields the dispatcher never combines.",
        PACKAGE_APPROVER_UNKNOWN="The package's approver is not on the host's approver allowlist.",
        SEAL_REQUIRED="The package is not sealed, and this verifier requires a seal.",
        SEAL_KEY_UNKNOWN="The package is sealed with a key this verifier does not hold.",
        SEAL_MISMATCH="The package's seal does not match its call binding.",
        DIGEST_MALFORMED="A digest is not 64 lowercase hexadecimal characters.",
        REQUEST_DIGEST_MISMATCH="The request digest does not match its recomputation.",
        RESULT_DIGEST_MISMATCH="The result digest does not match its recomputation.",
        CALL_BINDING_MISMATCH="The package is not bound to this provider call.",
        PROVENANCE_MISMATCH="The result's source or tool contract does not match the registry.",
        ERROR_CATALOG_MISMATCH="The result's error does not match the error catalog.",
        PROVIDER_MISMATCH="The package belongs to another provider profile.",
        RESULT_SET_MISSING="A call of the provider turn has no result.",
        RESULT_SET_DUPLICATE="A call of the provider turn has more than one result.",
        RESULT_SET_UNKNOWN="A result answers a call that is not in the provider turn.",
        RESULT_SET_MIXED_TURN="The calls do not belong to one provider turn.",
        RESULT_SET_TOO_LARGE="The provider turn has too many results.",
    ),
    **error_specs(
        "host", False,
        CONTEXT_INVALID="The trusted call context is malformed.",
        PROVIDER_PROFILE_UNKNOWN="The provider profile is not registered.",
        PRINCIPAL_INVALID="The trusted principal is malformed.",
        LIFECYCLE_VIOLATION="The operation cannot make this lifecycle transition.",
        SEAL_KEYS_INVALID="The seal keys are malformed.",
        SEAL_KEYS_UNREADABLE="The seal keys could not be read.",
        TOOL_HANDLER_MISSING="A tool of the registry has no handler.",
        REGISTRY_INVALID="The registry is not a mapping of tool names to the tools of those names.",
        TOOL_NOT_DISPATCHABLE="A tool of the registry and its hooks disagree on its resource: a resource field "
                              "needs a resolve hook, and a resolve hook a resource field.",
        HOOK_INVALID="A host hook answered outside its contract.",
        HOOK_FAILED="A host hook raised an error.",
    ),
    **error_specs(
        "host", True,
        OPERATION_IN_PROGRESS="Another caller holds this operation and is running it; nothing ran for this "
                              "call. Dispatch again later to read its answer.",
    ),
    **error_specs(
        "json", False,
        JSON_TOO_LARGE="The document exceeds the byte limit.",
        JSON_NOT_UTF8="The document is not valid UTF-8.",
        JSON_TOO_DEEP="The document exceeds the nesting limit.",
        JSON_INVALID="The document is not valid JSON.",
        JSON_DUPLICATE_KEY="The document repeats a key inside one object.",
        JSON_NON_FINITE="The document contains NaN or Infinity.",
        JSON_NOT_PORTABLE="The document leaves the portable JSON domain.",
    ),
    **error_specs(
        "fixture", False,
        FIXTURE_UNREADABLE="The fixture file could not be read.",
        FIXTURE_FIELDS="A fixture object has an unknown or a missing field.",
        FIXTURE_VALUE="A fixture value has the wrong type or form.",
        FIXTURE_LIMIT="A fixture collection exceeds its limit.",
        FIXTURE_REFERENCE="A fixture reference does not name an earlier step or a known value.",
        FIXTURE_PROFILE="The fixture names a provider profile that is not registered.",
        FIXTURE_VERSION="The fixture format or contract version is not the one this module speaks.",
    ),
    **error_specs(
        "schema", False,
        SCHEMA_TOO_LARGE="The schema exceeds its byte limit.",
        SCHEMA_TOO_DEEP="The schema exceeds its nesting limit.",
        SCHEMA_TOO_MANY_NODES="The schema has too many values.",
        SCHEMA_TOO_MANY_PROPERTIES="An object schema has too many properties.",
        SCHEMA_ENUM_TOO_LARGE="An enum has too many choices.",
        SCHEMA_PATTERN_TOO_LONG="A pattern exceeds its length limit.",
        SCHEMA_NOT_PORTABLE="The schema holds a value outside the portable JSON domain.",
        SCHEMA_MALFORMED="A schema keyword has a value of the wrong form.",
        SCHEMA_TYPE="A schema has no single supported type.",
        SCHEMA_NUMBER="A number schema is refused: its multipleOf is no double exactly (0.1, 0.01).",
        SCHEMA_NULL="null is accepted only as a nullable form of another type.",
        SCHEMA_FORMAT="A format is refused: it has no one exact reading, or stands on a type other than string.",
        SCHEMA_COMBINATOR="A combinator is refused unless its branches are told apart by JSON type or by a tag.",
        SCHEMA_CONDITIONAL="Conditional schemas are refused.",
        SCHEMA_OPEN_OBJECT="An object schema must be closed, or a map with one schema for its values.",
        SCHEMA_TUPLE="Tuple and contains forms of arrays are refused.",
        SCHEMA_ITEMS="An array schema must declare exactly one items schema.",
        SCHEMA_KEYWORD="A schema keyword is unknown or does not apply to its type.",
        SCHEMA_BOUNDS="A bound is not an integer in range, or the bounds admit nothing.",
        SCHEMA_ENUM="An enum or const is empty, repeated, or of another type.",
        SCHEMA_REQUIRED="A required name is repeated or names no declared property.",
        SCHEMA_NAME="A property or definition name is empty or too long.",
        SCHEMA_REF_REMOTE="Only local references into $defs or definitions are followed.",
        SCHEMA_REF_UNKNOWN="A reference names no definition.",
        SCHEMA_REF_RECURSIVE="A recursive reference is refused.",
        SCHEMA_REF_SIBLING="A reference has constraining keywords beside it.",
        SCHEMA_ROOT="The root schema must be an object schema.",
        SCHEMA_PATTERN_UNANCHORED="A pattern must be anchored as a whole string: ^...$.",
        SCHEMA_PATTERN_UNSUPPORTED="A pattern uses a construct outside the portable subset.",
        SCHEMA_PATTERN_NESTED_QUANTIFIER="A pattern repeats a group that holds a quantifier or an alternation.",
        SCHEMA_PATTERN_AMBIGUOUS="A pattern lets a repeated atom overlap what follows it.",
        OVERLAY_WIDENS="The host overlay is not provably narrower than the server's schema.",
        OVERLAY_PATH="The host overlay names no property of the server's schema.",
    ),
    **error_specs(
        "value", False,
        VALUE_TYPE="A value has the wrong type.",
        VALUE_FIELDS="An object has an unknown or a missing field.",
        VALUE_ENUM="A value is not one of the allowed choices.",
        VALUE_LENGTH="A string's length is out of its bounds.",
        VALUE_PATTERN="A string does not match its pattern.",
        VALUE_FORMAT="A string is not in its format.",
        VALUE_UNION="A value matches no branch of its union.",
        VALUE_ENTRIES="A map has too few or too many entries.",
        VALUE_RANGE="A number is out of its bounds or not a multiple of its step.",
        VALUE_ITEMS="An array has too few or too many items, or repeats one.",
        VALUE_NOT_PORTABLE="A value is outside the portable JSON domain.",
    ),
    **error_specs(
        "contracts", False,
        CONTRACTS_UNREADABLE="The contracts file could not be read.",
        CONTRACTS_VERSION="The contracts file is not in the format this module speaks.",
        CONTRACTS_FIELDS="A contracts object has an unknown or a missing field.",
        CONTRACTS_VALUE="A contracts value has the wrong type or form.",
        CONTRACTS_LIMIT="A contracts collection or text exceeds its limit.",
        CONTRACTS_DUPLICATE="Two tools of the contracts file have the same name.",
        CONTRACTS_REFERENCE="A reference names no tool or field that the contracts declare.",
        CONTRACTS_SECRET_FIELD="An output field is named like a secret: every output that held it would be withheld.",
    ),
    **error_specs(
        "audit", False,
        AUDIT_LOG_UNREADABLE="The audit log could not be read.",
        AUDIT_LOG_EXISTS="The audit log already exists: a run writes a new file, never over one.",
        AUDIT_MALFORMED="An audit log line is not a canonical entry of this format.",
        AUDIT_ENTRY_EDITED="An audit entry was changed after it was written.",
        AUDIT_ENTRY_DELETED="An audit entry is missing from the chain.",
        AUDIT_ENTRY_INSERTED="An audit entry was added to the chain.",
        AUDIT_ENTRY_REORDERED="Audit entries are out of order.",
        AUDIT_TRUNCATED="The audit log ends before its closing entry.",
        AUDIT_PACKAGE_DIGEST="A package's digests do not match the package itself.",
        AUDIT_KEY_UNKNOWN="An audit entry is sealed with a key this verifier does not hold.",
        AUDIT_UNSEALED="An audit entry is not sealed, and this verifier requires seals.",
    ),
    **error_specs(
        "cli", False,
        CLI_USAGE="The command line is not valid; see --help.",
        CLI_UNKNOWN_CASE="No case in the fixture has that id.",
        CLI_INTERRUPTED="The command was interrupted before it finished.",
        INTERNAL_ERROR="The dispatcher failed unexpectedly.",
    ),
})


class CatalogError(Exception):
    """The base of every error this project raises: a code from a closed catalog, a fixed message.

    Each layer subclasses it with its own CATALOG (codes that no other layer's catalog holds) and,
    when it has more to say, with details(). ``at`` optionally names a place inside a document,
    built from known field names and indices only, never from the input's own text. to_json() is
    the one JSON form of every error: code, message, retryable, then ``at`` and the details.
    """

    CATALOG: ClassVar[Mapping[str, ErrorSpec]] = MappingProxyType({})

    def __init__(self, code: str, at: str = "") -> None:
        if type(code) is not str or code not in self.CATALOG:
            raise ValueError("unknown error code")  # a programming error, not an input error
        super().__init__(code)
        self.code = code
        self.at = at

    @property
    def message(self) -> str:
        return self.CATALOG[self.code].message

    @property
    def retryable(self) -> bool:
        return self.CATALOG[self.code].retryable

    @property
    def scope(self) -> str:
        """Where the code belongs (ErrorSpec.scope): what a handler tells refusals apart by."""
        return self.CATALOG[self.code].scope

    def details(self) -> dict[str, Any]:
        """What a subclass adds to the JSON form (never text taken from the input)."""
        return {}

    def to_json(self) -> dict[str, Any]:
        view: dict[str, Any] = {"code": self.code, "message": self.message, "retryable": self.retryable}
        if self.at:
            view["at"] = self.at
        view.update(self.details())
        return view


class BoundaryError(CatalogError):
    """The boundary's error: a stable code from ERROR_CATALOG and its fixed message."""

    CATALOG = ERROR_CATALOG


def error_view(code: str) -> dict[str, Any]:
    """The model-facing error object of a tool-scope code: code, fixed message, retryable."""
    spec = ERROR_CATALOG[code]
    return {"code": code, "message": spec.message, "retryable": spec.retryable}


# ============================================================================================
# 3. Value types
# ============================================================================================


@dataclass(frozen=True, slots=True)
class ProviderProfile:
    provider: str
    api_family: str
    adapter_revision: str


PROVIDER_PROFILES: Final[Mapping[str, ProviderProfile]] = MappingProxyType({
    profile.adapter_revision: profile
    for profile in (
        ProviderProfile("OpenAI", "Responses", "openai-responses-v1"),
        ProviderProfile("Anthropic", "Messages", "anthropic-messages-v1"),
        ProviderProfile("Google", "Interactions", "gemini-interactions-v1"),
        # A model behind an MCP client: the answer is a tools/call result (mcp_bridge's guard).
        ProviderProfile("MCP", "ToolsCall", "mcp-tools-call-v1"),
    )
})


def registered_profile(provider: Any, api_family: Any, adapter_revision: Any) -> ProviderProfile | None:
    """The registered profile these three values name exactly, or None. Field by field: no
    ProviderProfile is built to compare, and an unhashable revision is never looked up."""
    if not (type(provider) is str and type(api_family) is str and type(adapter_revision) is str):
        return None  # exact types first: a str subclass can claim to equal any registered name
    profile = PROVIDER_PROFILES.get(adapter_revision)
    if profile is None or profile.provider != provider or profile.api_family != api_family:
        return None
    return profile


@dataclass(frozen=True, slots=True)
class CallContext:
    """What the trusted adapter knows about one provider call; never taken from the model."""

    provider: str
    api_family: str
    adapter_revision: str
    response_id: str
    call_id: str
    operation_id: str
    idempotency_key: str | None = None

    @property
    def profile(self) -> ProviderProfile:
        return ProviderProfile(self.provider, self.api_family, self.adapter_revision)

    def view(self, purpose: str) -> dict[str, Any]:
        return {
            "provider": self.provider,
            "api_family": self.api_family,
            "adapter_revision": self.adapter_revision,
            "response_id": self.response_id,
            "call_id": self.call_id,
            "operation_id": self.operation_id,
            "idempotency_key": self.idempotency_key,
            "purpose": purpose,
        }


@dataclass(frozen=True, slots=True)
class Principal:
    """The trusted caller: tenant, subject and sorted unique roles."""

    tenant: str
    subject: str
    roles: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Approval:
    """A human approval of one write, granted on the trusted side, and used at most once.

    It binds the principal, the whole provider call identity (adapter revision, response id,
    call id), the operation, the idempotency key, the exact arguments and the contract revision.
    Executing the write consumes it: the same approval presented again, under any key, response
    or operation, is APPROVAL_CONSUMED.
    """

    approver: str
    tenant: str
    subject: str
    provider: str
    api_family: str
    adapter_revision: str
    response_id: str
    call_id: str
    operation_id: str
    idempotency_key: str
    arguments: Any
    contract_revision: str
    expires_at: int


@dataclass(frozen=True, slots=True)
class Order:
    tenant: str
    order_ref: str
    owner: str
    status: str
    revision: int = 1


_PLAIN_MAPPINGS: Final = (dict, MappingProxyType)  # what a host or a store may hand over as a mapping


# ============================================================================================
# 4. Canonical JSON
# ============================================================================================
# The encoding of every digest, seal and chain entry is the JSON Canonicalization Scheme (RFC 8785,
# "JCS"), which a second implementation in another language can reproduce byte for byte: no
# insignificant whitespace, UTF-8, object members sorted by the UTF-16 code units of their keys,
# strings escaped as ECMAScript's JSON.stringify escapes them, and every number written as
# ECMAScript writes an IEEE double (Number::toString: 1e+21, 1e-7, 4.5, -0 as 0). NaN, Infinity
# and lone surrogates are no JSON a peer reads the same way, and are refused (ValueError: the
# boundary never builds them, its decoders refuse them first); so are integers no double holds
# exactly, by jcs_text, and wherever the boundary reads a value.
#
# Speed, without changing a byte. Python's C encoder, built once here (JSONEncoder.encode() builds
# a new one on every call), already writes JCS for almost every value the boundary digests: its
# string escaping is JCS's, its integers are JCS's within +/-(2**53 - 1), and its key order (by
# code point) differs from UTF-16 order only between a key holding a character above U+FFFF and
# one holding a character in U+E000..U+FFFF. So the C text is kept unless it can differ: when it
# holds a character above U+FFFF (a key might), or something that may be a float. Those values,
# rare at the boundary, are encoded again by the exact encoder below.

_CANONICAL_ENCODER: Final = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False, check_circular=False
)
# The arguments JSONEncoder.iterencode passes: markers (None: no circular check), default,
# the string encoder (UTF-8 kept, not \u-escaped), indent, key and item separators, sort_keys,
# skipkeys, allow_nan.
_C_ENCODER: Final = None if json.encoder.c_make_encoder is None else json.encoder.c_make_encoder(
    None, _CANONICAL_ENCODER.default, json.encoder.encode_basestring, None, ":", ",", True, False, False
)
# Where a C text may differ from JCS, found by methods that cost little beside the encoding (a
# regex that scans every character would cost more than the encoding itself): a float's repr
# holds a "." between digits, or an exponent "e-"/"e+" after a digit, and no text without "." or
# an exponent holds a float. Each pattern starts with its literal, which the regex engine finds as
# fast as str.find. A string may show the same ("v1.5"); only then are the strings emptied to
# tell, and only a real float costs the exact encoder.
#
# An integer beyond +/-(2**53 - 1) has no canonical text (jcs_text refuses it), and the C encoder
# writes one like any other. The boundary never encodes one of its own: every integer it digests
# was proved within the range first (the decoders, the contracts, the output scan, the package
# verifier's tables), so its own digests take _portable_text, which does not look. What a host or
# a layer hands canonical_text directly was proved nothing: there the text is looked at too. A
# long integer's text is a run of at least 16 digits, found by mapping every digit byte to "0"
# (bytes.translate, one C pass) and looking for sixteen of them, in the same two steps as a float
# (a string may hold such a run too: a digest, a long id). That look costs about a nanosecond a
# byte, which is why the boundary's own digests do without it.
_FLOAT_POINT: Final = re.compile(r"\.(?<=[0-9]\.)[0-9]")
_FLOAT_EXPONENT_DOWN: Final = re.compile(r"-(?<=[0-9]e-)[0-9]")
_FLOAT_EXPONENT_UP: Final = re.compile(r"\+(?<=[0-9]e\+)[0-9]")
_JSON_STRING: Final = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_DIGITS_AS_ZERO: Final = bytes.maketrans(b"123456789", b"000000000")
_LONG_DIGIT_RUN: Final = b"0" * len(str(MAX_SAFE_INTEGER))  # 16: every integer beyond the safe range has as many


def canonical_text(value: Any) -> str:
    """The canonical (RFC 8785) JSON text of a JSON value (str); canonical_json is its UTF-8
    encoding. ValueError for what has none (NaN, infinities, integers beyond +/-(2**53 - 1), lone
    surrogates) and TypeError for what is no JSON, whatever else the value holds. A whole double
    from 2**53 up to 1e21 is written in plain digits, as RFC 8785 writes it, though the strict
    decoder refuses that text (is_portable_float); keys are taken as json.dumps takes them (only
    jcs_text refuses a key that is not a str)."""
    text = _portable_text(value)
    if _may_hold_long_integer(text) and _may_hold_long_integer(_JSON_STRING.sub('""', text)):
        return jcs_text(value)  # which refuses an integer beyond the safe range (a long double is no int)
    return text


def _portable_text(value: Any) -> str:
    # canonical_text of a value whose integers were proved within +/-(2**53 - 1): they are not
    # looked for. The boundary's own digests only.
    if _C_ENCODER is None:
        return jcs_text(value)
    text = "".join(_C_ENCODER(value, 0))
    if not text.isascii() and max(text) > "\uffff":
        return jcs_text(value)  # a key above U+FFFF may sort elsewhere in UTF-16
    if _may_hold_float(text) and _may_hold_float(_JSON_STRING.sub('""', text)):
        return jcs_text(value)
    return text


def _may_hold_long_integer(text: str) -> bool:
    # A lone surrogate has no UTF-8: the encoding refuses it here (UnicodeEncodeError, a ValueError).
    return _LONG_DIGIT_RUN in text.encode("utf-8").translate(_DIGITS_AS_ZERO)


def _may_hold_float(text: str) -> bool:
    # A one-character `in` is a memchr; a two-character one ("e-") walks the text several times
    # slower than the regex's own scan for its first literal, so "-", common in identifiers,
    # is left to the regex.
    return (("." in text and _FLOAT_POINT.search(text) is not None)
            or ("+" in text and _FLOAT_EXPONENT_UP.search(text) is not None)
            or _FLOAT_EXPONENT_DOWN.search(text) is not None)


def _utf16_order(key: str) -> bytes:
    # Big-endian UTF-16 bytes compare as the code units do; "surrogatepass" leaves a lone
    # surrogate to the string encoder, which refuses it.
    return key.encode("utf-16-be", "surrogatepass")


def number_text(value: int | float) -> str:
    """A number as RFC 8785 (ECMAScript's Number::toString) writes it; ValueError where JSON
    peers would not read the same double: NaN, infinities, integers beyond +/-(2**53 - 1)."""
    if type(value) is int or type(value) is bool:
        if type(value) is bool or not -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
            raise ValueError("not a portable JSON number")
        return str(value)
    value = float(value)
    if not math.isfinite(value):
        raise ValueError("not a portable JSON number")
    if value == 0:
        return "0"  # -0 too
    # repr gives the shortest digits that read back as this double, as ECMAScript requires;
    # only the layout differs. digits holds them without zeros at either end, point is where
    # the decimal point falls among them (ECMAScript's k and n).
    mantissa, _, exponent = repr(abs(value)).partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = (whole + fraction).lstrip("0")
    point = len(whole) + int(exponent or 0) - (len(whole + fraction) - len(digits))
    digits = digits.rstrip("0")
    sign = "-" if value < 0 else ""
    count = len(digits)
    if count <= point <= 21:
        return sign + digits + "0" * (point - count)
    if 0 < point <= 21:
        return sign + digits[:point] + "." + digits[point:]
    if -6 < point <= 0:
        return sign + "0." + "0" * -point + digits
    power = point - 1
    exponent_text = ("e+" if power >= 0 else "e-") + str(abs(power))
    return sign + digits[0] + ("." + digits[1:] if count > 1 else "") + exponent_text


def jcs_text(value: Any) -> str:
    """The exact RFC 8785 encoder, in Python alone: the definition canonical_text's fast path is
    held to, and its fallback. canonical_text gives the same text, faster."""
    kind = type(value)
    if kind is str:
        if not is_portable_text(value):
            raise ValueError("a lone surrogate has no canonical encoding")
        return json.encoder.encode_basestring(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if kind is int or kind is float:
        return number_text(value)
    if kind is dict:
        keys = list(value)
        if any(type(key) is not str for key in keys):
            raise TypeError("keys must be str")
        return "{" + ",".join(jcs_text(key) + ":" + jcs_text(value[key])
                              for key in sorted(keys, key=_utf16_order)) + "}"
    if kind is list or kind is tuple:
        return "[" + ",".join(jcs_text(item) for item in value) + "]"
    raise TypeError(f"Object of type {kind.__name__} is not JSON serializable")  # json's own words


def _string_text(text: str) -> str:
    # The canonical text of a str, without the encoder's call: the same C function quotes it.
    if type(text) is not str:
        return canonical_text(text)
    return json.encoder.encode_basestring(text)


def canonical_json(value: Any) -> bytes:
    """Encode a JSON value canonically (RFC 8785): its canonical text as UTF-8 bytes."""
    return canonical_text(value).encode("utf-8")


def canonical_sha256(value: Any) -> str:
    """SHA-256, 64 lowercase hex characters, of the canonical JSON encoding of a value."""
    return hashlib.sha256(canonical_text(value).encode("utf-8")).hexdigest()


class _TemplateSlot:
    """Marks a member of a CanonicalTemplate that is filled on every use."""


SLOT: Final = _TemplateSlot()


class CanonicalTemplate:
    """The canonical text of an object whose fixed members are encoded once, at build time.

    Canonical JSON is compositional: an object is "{", its members in sorted key order as
    "key":value joined by ",", then "}"; a member's text never depends on its neighbours. So the
    text around the variable members (SLOT) is fixed, kept as one %-format with a %s at each
    slot, and each use only encodes the variable values, passed in the template's sorted slot
    order. The digest functions in section 15 stay the definition; tests hold every template to
    them byte for byte.
    """

    __slots__ = ("slots", "_format")

    def __init__(self, members: Mapping[str, Any]) -> None:
        pieces: list[str] = []
        text = "{"
        for index, key in enumerate(sorted(members, key=_utf16_order)):
            text += ("," if index else "") + canonical_text(key) + ":"
            if members[key] is SLOT:
                pieces.append(text)
                text = ""
            else:
                text += canonical_text(members[key])
        pieces.append(text + "}")
        self.slots: tuple[str, ...] = tuple(key for key in sorted(members, key=_utf16_order) if members[key] is SLOT)
        self._format = "%s".join(piece.replace("%", "%%") for piece in pieces)

    def text(self, *texts: str) -> str:
        """The whole object's canonical text, given the canonical text of each slot, in slot order."""
        # A wrong count raises TypeError from the % operator itself.
        return self._format % texts

    def sha256(self, *texts: str) -> str:
        """SHA-256 of the whole object, given the canonical text of each slot, in slot order."""
        return hashlib.sha256((self._format % texts).encode("utf-8")).hexdigest()


def json_copy(value: Any) -> Any:
    """A deep copy of a JSON value the boundary built itself (bounded depth, JSON types only)."""
    kind = type(value)
    if kind is dict:
        return {key: json_copy(item) for key, item in value.items()}
    if kind is list:
        return [json_copy(item) for item in value]
    return value


# ============================================================================================
# 5. Strict bounded JSON decoding
# ============================================================================================
# Five stages in this order, so that hostile input meets a limit before it meets a decoder:
# byte cap, UTF-8, a non-recursive nesting scan, the decoder with refusing hooks, the portable
# domain. Later layers (streams, durable state) decode through the same function.
#
# The decoder runs first with cheap hooks: C builds the dicts, a hook counts their members. A
# valid text holds one colon outside its strings per member, so fewer members than colons means
# a repeated key. On any fault at all the text is decoded again with the refusing hooks, which
# raise the first fault in text order, exactly as if they had been the only decoder.

# The outline of a JSON text is what lies outside its strings: its brackets, each folded to "["
# or "]" (depth does not care which kind), and, for the decoder, its colons.
_FOLD_BRACKETS: Final = bytes.maketrans(b"{}", b"[]")
_NOT_BRACKET_OR_QUOTE: Final = bytes(byte for byte in range(256) if byte not in b'"[]{}')
_NOT_OUTLINE: Final = bytes(byte for byte in range(256) if byte not in b'"[]{}:')
_OPENER: Final = ord("[")
# One left-to-right pass removes an escaped backslash or an escaped quote, exactly as removing
# every escaped backslash and then every escaped quote would.
_ESCAPED_PAIR: Final = re.compile(rb'\\[\\"]')
# The decoded text is valid UTF-8, so a lone surrogate can only come from a \uD800-\uDFFF escape.
_SURROGATE_ESCAPE: Final = re.compile(rb"\\u[dD][89a-fA-F]")


def exceeds_nesting(data: bytes, max_depth: int = MAX_NESTING_DEPTH) -> bool:
    """True when the containers of a JSON text nest deeper than max_depth; no recursion.

    Escaped backslashes and escaped quotes are removed; only quotes and brackets are kept; empty
    quote pairs are dropped (which only removes or joins string bodies); splitting on quotes leaves
    string bodies at the odd positions, which are dropped. What is left is the bracket sequence
    outside strings. Malformed text is the decoder's business: this scan only has to be right
    about well-formed depth and finish quickly on anything.
    """
    return _too_deep(_outline(_without_escaped_pairs(data), _NOT_BRACKET_OR_QUOTE), max_depth)


def _without_escaped_pairs(data: bytes) -> bytes:
    return _ESCAPED_PAIR.sub(b"", data) if b"\\" in data else data


def _outline(unescaped: bytes, drop: bytes) -> bytes:
    outline = unescaped.translate(_FOLD_BRACKETS, drop)
    if b'"' in outline:
        outline = b"".join(outline.replace(b'""', b"").split(b'"')[::2])
    return outline


def _too_deep(brackets: bytes, max_depth: int) -> bool:
    """The nesting scan on a sequence of "[" and "]": True once the depth exceeds max_depth."""
    if len(brackets) <= max_depth:
        return False
    if brackets.find(b"]", 0, max_depth + 1) == -1:
        return True  # more than max_depth openers before the first closer
    # Each pass deletes every innermost "[]" at C speed, one nesting level a pass: a sequence
    # that empties within max_depth passes is balanced and no deeper than max_depth. A pass that
    # leaves over three quarters of its input stops them, which bounds their work to four lengths.
    remaining = brackets
    for _ in range(max_depth):
        shorter = remaining.replace(b"[]", b"")
        if not shorter:
            return False
        if 4 * len(shorter) > 3 * len(remaining):
            break
        remaining = shorter
    # Deeper, unbalanced or slow to shrink: the exact count decides, on the whole sequence.
    depth = 0
    for byte in brackets:
        if byte == _OPENER:
            depth += 1
            if depth > max_depth:
                return True
        else:
            depth -= 1
    return False


def _unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise BoundaryError("JSON_DUPLICATE_KEY")
    return obj


def _refuse_constant(_name: str) -> NoReturn:
    raise BoundaryError("JSON_NON_FINITE")


# The number hooks a policy chooses from; each has json.loads's hook signature.


def refuse_float(_text: str) -> NoReturn:
    """For a reader that wants integers only: any number with a fraction or an exponent."""
    raise BoundaryError("JSON_NOT_PORTABLE")


def finite_float(text: str) -> float:
    """A float, unless it overflows to infinity (1e400), which no canonical encoding can hold."""
    value = float(text)
    if math.isfinite(value):
        return value
    raise BoundaryError("JSON_NON_FINITE")


def portable_float(text: str) -> float:
    """A finite float whose canonical text reads back as a number of the portable domain."""
    value = finite_float(text)
    if is_portable_float(value):
        return value
    raise BoundaryError("JSON_NOT_PORTABLE")


def is_portable_float(value: float) -> bool:
    """Finite, and not a whole double from 2**53 up to 1e21: ECMAScript writes those as plain digits
    (1e20 as 100000000000000000000), which every reader takes for an integer no double holds
    exactly, and the decoder refuses. Below 2**53 the digits read back exactly; from 1e21 on they
    carry an exponent and read back as a float."""
    return math.isfinite(value) and not PORTABLE_FLOAT_GAP[0] <= abs(value) < PORTABLE_FLOAT_GAP[1]


def safe_int(text: str) -> int:
    """An integer that every JSON peer reads exactly: within +/-(2**53 - 1)."""
    if len(text) < MAX_INTEGER_DIGITS:  # at most 15 digits: always within range (most integers)
        return int(text)
    # The length test comes first, so a 60,000-digit integer is never converted at all.
    if len(text.lstrip("-")) > MAX_INTEGER_DIGITS:
        raise BoundaryError("JSON_NOT_PORTABLE")
    value = int(text)
    if -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
        return value
    raise BoundaryError("JSON_NOT_PORTABLE")


def short_int(text: str) -> int:
    """Any integer of at most MAX_ENVELOPE_INTEGER_DIGITS digits (a provider's own counters)."""
    if len(text.lstrip("-")) > MAX_ENVELOPE_INTEGER_DIGITS:
        raise BoundaryError("JSON_NOT_PORTABLE")
    return int(text)


@dataclass(frozen=True, slots=True)
class JsonPolicy:
    """What the decoder makes of the values JSON leaves to its reader, in json.loads's hook shape.

    The caller chooses; the decoder holds no policy of its own. Whatever the policy, the decoder
    keeps its bounds (bytes, nesting), refuses duplicate keys (two peers would read two different
    objects) and refuses NaN and Infinity (not JSON).
    """

    name: str
    parse_float: Callable[[str], Any]
    parse_int: Callable[[str], Any]
    portable_text: bool  # refuse lone surrogates in strings and keys


# Fixtures, tool arguments, stored rows and everything that is digested or echoed: the numbers
# every peer reads as the same IEEE double, and so writes with the same canonical text (section 4).
# A float is a double read to the nearest (0.1, 1e-7, 1.0: a float, never the integer 1); an
# integer is exact or refused (9007199254740993 would be read as ...992).
PORTABLE_JSON: Final = JsonPolicy("portable", portable_float, safe_int, portable_text=True)
# A provider's frames around the arguments (temperature: 1.0, logprobs, usage counters): read,
# never forwarded or digested. What becomes a proposal is decoded again, under PORTABLE_JSON.
ENVELOPE_JSON: Final = JsonPolicy("envelope", finite_float, short_int, portable_text=False)


def _check_portable_strings(value: Any) -> None:
    """Refuse lone surrogates in any string or key; iterative, the depth is already bounded."""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is dict:
            for key, child in item.items():
                if not is_portable_text(key):
                    raise BoundaryError("JSON_NOT_PORTABLE")
                stack.append(child)
        elif kind is list:
            stack.extend(item)
        elif kind is str and not is_portable_text(item):
            raise BoundaryError("JSON_NOT_PORTABLE")


def is_portable_text(text: str) -> bool:
    """Text UTF-8 can carry: no lone surrogate (a Python str, but no canonical encoding, and no
    peer can read it). The decoder refuses one in a document, the output scan in an output."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def decode_strict_json(
    data: bytes, *, max_bytes: int = MAX_FIXTURE_BYTES, max_depth: int = MAX_NESTING_DEPTH,
    policy: JsonPolicy = PORTABLE_JSON,
) -> Any:
    """Decode untrusted JSON bytes through all five stages; raise BoundaryError(JSON_*).

    ``policy`` says what numbers and text may be (PORTABLE_JSON unless the caller says otherwise).
    """
    if type(data) is not bytes:
        raise BoundaryError("JSON_INVALID")
    if len(data) > max_bytes:
        raise BoundaryError("JSON_TOO_LARGE")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise BoundaryError("JSON_NOT_UTF8") from None
    unescaped = _without_escaped_pairs(data)
    outline = _outline(unescaped, _NOT_OUTLINE)
    if _too_deep(outline.replace(b":", b""), max_depth):
        raise BoundaryError("JSON_TOO_DEEP")
    value = _decode_counting(text, members=outline.count(b":"), policy=policy)
    if value is _FAULT:
        value = _decode_refusing(text, policy)
    # Only a backslash that is not half of an escaped pair can start a surrogate escape.
    if policy.portable_text and b"\\" in unescaped and _SURROGATE_ESCAPE.search(unescaped) is not None:
        _check_portable_strings(value)
    return value


_FAULT: Final = object()  # what _decode_counting answers for a text with any fault


def _decode_counting(text: str, *, members: int, policy: JsonPolicy) -> Any:
    """The value of a text with `members` object members and no fault at all; _FAULT otherwise."""
    held = 0

    def count_members(obj: dict[str, Any]) -> dict[str, Any]:
        nonlocal held
        held += len(obj)
        return obj

    try:
        # object_hook rather than object_pairs_hook: the dict is built in C, with no list of
        # pairs to build and copy first; this is a third of the cost of the refusing hooks.
        value = json.loads(text, object_hook=count_members, parse_constant=_refuse_constant,
                           parse_float=policy.parse_float, parse_int=policy.parse_int)
    except (ValueError, BoundaryError, RecursionError):
        return _FAULT
    return value if held == members else _FAULT


def _decode_refusing(text: str, policy: JsonPolicy) -> Any:
    """Decode with every refusing hook, so that the first fault in the text is the one raised."""
    try:
        return json.loads(
            text,
            object_pairs_hook=_unique_object,
            parse_constant=_refuse_constant,
            parse_float=policy.parse_float,
            parse_int=policy.parse_int,
        )
    except ValueError:  # json.JSONDecodeError, and the UTF-8 BOM refusal
        raise BoundaryError("JSON_INVALID") from None
    except RecursionError:  # only with a max_depth far above MAX_NESTING_DEPTH: deeper than Python goes
        raise BoundaryError("JSON_TOO_DEEP") from None


# ============================================================================================
# 6. Fixture loading
# ============================================================================================
# After decoding: exact fields at every level, bounded collections, identifiers by whole-string
# pattern, integer times in range, sorted unique roles, references to earlier dispatch steps,
# registered provider profiles. `at` names a place by known field names and indices only.
#
# A flat object is a closed table of field -> check, read in order: the first check that fails
# names the place. Checks answer True or False; the place of a field is formatted only when its
# check fails (a fixture has thousands of fields and, at most, one fault worth naming).

@dataclass(frozen=True, slots=True)
class WorldChange:
    tenant: str
    order_ref: str
    status: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Expectation:
    status: str
    error_code: str | None
    outcome: str
    delivery: str
    recovery: str
    effect_count: int
    data: Any
    request_sha256: str
    result_sha256: str
    call_binding_sha256: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Step:
    id: str
    kind: str
    of_step: str | None
    proposal: Any
    context: CallContext
    principal: Principal
    approval: Approval | None
    fault: str
    now: int
    deadline: int | None
    world_changes: tuple[WorldChange, ...]
    expect: Expectation


@dataclass(frozen=True, slots=True)
class Case:
    id: str
    title: str
    steps: tuple[Step, ...]


@dataclass(frozen=True, slots=True)
class World:
    orders: tuple[Order, ...]
    approvers: frozenset[str]


@dataclass(frozen=True, slots=True)
class Fixture:
    world: World
    cases: tuple[Case, ...]

    @property
    def step_count(self) -> int:
        return sum(len(case.steps) for case in self.cases)


_Check = Callable[[Any], bool]  # True when a decoded value is acceptable in its field


def plain_keys(mapping: Mapping[Any, Any]) -> bool:
    """Every key is exactly a str: a str subclass can hash like a field name and equal anything.

    A loop rather than all(...) over a generator: it runs on every proposal, and costs a third.
    """
    for key in mapping:
        if type(key) is not str:
            return False
    return True


def is_identifier(value: Any) -> bool:
    """An identifier: a plain str of at most 64 characters, matching IDENTIFIER_PATTERN whole."""
    return (type(value) is str and len(value) <= MAX_IDENTIFIER_LENGTH
            and IDENTIFIER_PATTERN.fullmatch(value) is not None)


def _is_order_ref(value: Any) -> bool:
    return type(value) is str and ORDER_REF_PATTERN.fullmatch(value) is not None


def _is_digest(value: Any) -> bool:
    return type(value) is str and DIGEST_PATTERN.fullmatch(value) is not None


def _is_text(value: Any) -> bool:
    return type(value) is str and 0 < len(value) <= MAX_TEXT_LENGTH


def _is_object(value: Any) -> bool:
    return type(value) is dict


def _is_time(value: Any) -> bool:
    # type() and not isinstance(): True is an int to Python, never a time or a count here.
    return type(value) is int and MIN_TIME <= value <= MAX_TIME


def _integer_in(low: int, high: int) -> _Check:
    return lambda value: type(value) is int and low <= value <= high


def _is_exactly(value: Any, expected: str) -> bool:
    # The type test first: an object whose __eq__ always says yes must not pass for a string.
    return type(value) is str and value == expected


def _member(value: Any, choices: frozenset[str]) -> bool:
    # The type test first: a hostile list or dict is unhashable and must not raise TypeError.
    return type(value) is str and value in choices


def _fixture_one_of(choices: frozenset[str]) -> _Check:
    return lambda value: type(value) is str and value in choices


def _is_fault(purpose: str) -> _Check:
    # FAULTS, with the handler's fault tables (section 12), is the one list of injectable faults.
    return lambda value: type(value) is str and value in FAULTS[purpose]


def _or_null(check: _Check) -> _Check:
    return lambda value: value is None or check(value)


@dataclass(frozen=True, slots=True)
class _Table:
    """The closed table of a flat object: its exact fields, and each field's check."""

    fields: frozenset[str]
    # In the order faults are named: a tuple, as a set's order would change with PYTHONHASHSEED.
    checks: tuple[tuple[str, _Check], ...]


def _table(**checks: _Check) -> _Table:
    return _Table(fields=frozenset(checks), checks=tuple(checks.items()))


_FIXTURE_SHAPE_CODES: Final = ("FIXTURE_VALUE", "FIXTURE_FIELDS")  # not an object; other fields than these


def _exact_fields(value: Any, fields: frozenset[str], at: str,
                  codes: tuple[str, str] = _FIXTURE_SHAPE_CODES) -> dict[str, Any]:
    """An object with exactly these fields; else codes[0] (not an object) or codes[1] (other fields)."""
    if type(value) is not dict:
        raise BoundaryError(codes[0], at)
    if value.keys() != fields:
        raise BoundaryError(codes[1], at)
    return value


def _check(body: dict[str, Any], table: _Table, at: str) -> None:
    for name, check in table.checks:
        if not check(body[name]):
            raise BoundaryError("FIXTURE_VALUE", f"{at}.{name}")


def _flat(value: Any, table: _Table, at: str) -> dict[str, Any]:
    """A flat object: exactly the table's fields, each passing its check."""
    body = _exact_fields(value, table.fields, at)
    _check(body, table, at)
    return body


def _array(value: Any, at: str, limit: int) -> list[Any]:
    if type(value) is not list:
        raise BoundaryError("FIXTURE_VALUE", at)
    if len(value) > limit:
        raise BoundaryError("FIXTURE_LIMIT", at)
    return value


_FIXTURE_ROOT_FIELDS: Final = frozenset({"format", "model_result_version", "audit_version", "world", "cases"})
_WORLD_FIELDS: Final = frozenset({"orders", "approvers"})
_CASE_FIELDS: Final = frozenset({"id", "title", "steps"})
_STEP_COMMON: Final = frozenset({
    "id", "kind", "proposal", "context", "principal", "fault", "now", "world_changes", "expect",
})
_STEP_FIELDS: Final = MappingProxyType({
    "dispatch": _STEP_COMMON | {"approval", "deadline"},
    "query_status": _STEP_COMMON | {"of_step"},
})
_PRINCIPAL_FIELDS: Final = frozenset({"tenant", "subject", "roles"})
_TOOL_ERROR_CODES: Final = frozenset(code for code, spec in ERROR_CATALOG.items() if spec.scope == "tool")
_VERSIONS: Final = MappingProxyType({
    "format": FIXTURE_FORMAT, "model_result_version": MODEL_RESULT_VERSION, "audit_version": AUDIT_VERSION,
})

# The flat objects, each a closed table of every field it holds.
_ORDER: Final = _table(
    tenant=is_identifier, order_ref=_is_order_ref, owner=is_identifier, status=_fixture_one_of(ORDER_STATUSES),
    revision=_integer_in(1, MAX_REVISION),
)
# The model's part: hostile names and arguments are its point, so only its outer shape is fixed
# here; the dispatcher judges the rest.
_PROPOSAL: Final = _table(name=_is_text, arguments=_is_object)
_CONTEXT: Final = _table(
    provider=is_identifier, api_family=is_identifier, adapter_revision=is_identifier,
    response_id=is_identifier, call_id=is_identifier, operation_id=is_identifier,
    idempotency_key=_or_null(is_identifier),
)
_APPROVAL: Final = _table(
    approver=is_identifier, tenant=is_identifier, subject=is_identifier, provider=is_identifier,
    api_family=is_identifier, adapter_revision=is_identifier, response_id=is_identifier, call_id=is_identifier,
    operation_id=is_identifier, idempotency_key=is_identifier, contract_revision=is_identifier,
    arguments=_is_object, expires_at=_is_time,
)
_CHANGE: Final = _table(tenant=is_identifier, order_ref=_is_order_ref, status=_fixture_one_of(ORDER_STATUSES))
_EXPECT: Final = _table(
    status=_fixture_one_of(STATUSES), error_code=_or_null(_fixture_one_of(_TOOL_ERROR_CODES)),
    outcome=_fixture_one_of(OUTCOMES),
    delivery=_fixture_one_of(DELIVERIES), recovery=_fixture_one_of(RECOVERIES),
    effect_count=_integer_in(0, MAX_STEPS_PER_CASE), data=_or_null(_is_object),
    request_sha256=_is_digest, result_sha256=_is_digest, call_binding_sha256=_is_digest,
)
# Proposal binding (section 7) and package verification (section 17) read these field sets too.
_PROPOSAL_FIELDS: Final = _PROPOSAL.fields
_CONTEXT_FIELDS: Final = _CONTEXT.fields
# The scalar fields of objects that also hold arrays or objects, checked after those.
_PRINCIPAL_NAMES: Final = _table(tenant=is_identifier, subject=is_identifier)  # after the roles
_STEP_SCALARS: Final = MappingProxyType({  # after the approval, before the world changes
    "dispatch": _table(fault=_is_fault("dispatch"), now=_is_time, deadline=_or_null(_is_time)),
    "query_status": _table(fault=_is_fault("query_status"), now=_is_time),
})


def load_fixture(path: str | os.PathLike[str], *, max_bytes: int = MAX_FIXTURE_BYTES) -> Fixture:
    """Read and validate a fixture file; every failure is a BoundaryError without the path."""
    return parse_fixture(read_bounded(path, max_bytes=max_bytes), max_bytes=max_bytes)


def read_bounded(path: str | os.PathLike[str], *, max_bytes: int = MAX_FIXTURE_BYTES) -> bytes:
    """Read at most max_bytes + 1 bytes of a regular file; FIXTURE_UNREADABLE otherwise."""
    # O_NONBLOCK: opening a FIFO must not wait for a writer; fstat then refuses anything that is
    # not a regular file (a directory, a device, a pipe) before a single byte is read.
    try:
        handle = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except (OSError, ValueError, TypeError):
        raise BoundaryError("FIXTURE_UNREADABLE") from None
    try:
        if not stat.S_ISREG(os.fstat(handle).st_mode):
            raise BoundaryError("FIXTURE_UNREADABLE")
        with os.fdopen(handle, "rb", closefd=False) as stream:
            return stream.read(max_bytes + 1)
    except OSError:
        raise BoundaryError("FIXTURE_UNREADABLE") from None
    finally:
        os.close(handle)


def parse_fixture(data: bytes, *, max_bytes: int = MAX_FIXTURE_BYTES, quick: bool = True) -> Fixture:
    """Validate fixture bytes: the strict decoder first, then exact fields at every level.

    ``quick=False`` reads the fixture field by field only, without the quick walk first: the
    same answer, slower, and the reference tests hold the quick walk to.
    """
    root = _exact_fields(decode_strict_json(data, max_bytes=max_bytes), _FIXTURE_ROOT_FIELDS, "fixture")
    for field, expected in _VERSIONS.items():
        if root[field] != expected:
            raise BoundaryError("FIXTURE_VERSION", field)
    fixture = _quick_fixture(root) if quick else None
    return fixture if fixture is not None else _walk_fixture(root)


def _walk_fixture(root: dict[str, Any]) -> Fixture:
    """The fixture below its header, field by field in document order: the first fault is named."""
    world = _parse_world(root["world"])
    raw_cases = _array(root["cases"], "cases", MAX_CASES)
    if not raw_cases:
        raise BoundaryError("FIXTURE_VALUE", "cases")
    known = frozenset((order.tenant, order.order_ref) for order in world.orders)
    cases = tuple(_parse_case(raw, f"cases[{index}]", known) for index, raw in enumerate(raw_cases))
    if len({case.id for case in cases}) != len(cases):
        raise BoundaryError("FIXTURE_VALUE", "cases")
    return Fixture(world=world, cases=cases)


def _parse_world(raw: Any) -> World:
    body = _exact_fields(raw, _WORLD_FIELDS, "world")
    orders = tuple(_parse_order(item, f"world.orders[{index}]")
                   for index, item in enumerate(_array(body["orders"], "world.orders", MAX_ORDERS)))
    if len({(order.tenant, order.order_ref) for order in orders}) != len(orders):
        raise BoundaryError("FIXTURE_VALUE", "world.orders")
    approvers = _array(body["approvers"], "world.approvers", MAX_APPROVERS)
    for index, approver in enumerate(approvers):
        if not is_identifier(approver):
            raise BoundaryError("FIXTURE_VALUE", f"world.approvers[{index}]")
    if len(set(approvers)) != len(approvers):  # a repeated approver, like a repeated order, is refused
        raise BoundaryError("FIXTURE_VALUE", "world.approvers")
    return World(orders=orders, approvers=frozenset(approvers))


# The flat objects are built with their fields spelled out: Order(**body) would cost more, as
# the decoded keys are not the interned names that keyword arguments are matched against first.
def _parse_order(raw: Any, at: str) -> Order:
    body = _flat(raw, _ORDER, at)
    return Order(tenant=body["tenant"], order_ref=body["order_ref"], owner=body["owner"], status=body["status"],
                 revision=body["revision"])


def _parse_case(raw: Any, at: str, known: frozenset[tuple[str, str]]) -> Case:
    body = _exact_fields(raw, _CASE_FIELDS, at)
    if not is_identifier(body["id"]):
        raise BoundaryError("FIXTURE_VALUE", at + ".id")
    raw_steps = _array(body["steps"], at + ".steps", MAX_STEPS_PER_CASE)
    if not raw_steps:
        raise BoundaryError("FIXTURE_VALUE", at + ".steps")
    steps: list[Step] = []
    earlier: dict[str, str] = {}  # the kind of every earlier step of the case, by id
    for index, item in enumerate(raw_steps):
        step = _parse_step(item, f"{at}.steps[{index}]", known, earlier)
        earlier[step.id] = step.kind
        steps.append(step)
    if not _is_text(body["title"]):
        raise BoundaryError("FIXTURE_VALUE", at + ".title")
    return Case(id=body["id"], title=body["title"], steps=tuple(steps))


def _parse_step(raw: Any, at: str, known: frozenset[tuple[str, str]], earlier: Mapping[str, str]) -> Step:
    if type(raw) is not dict:
        raise BoundaryError("FIXTURE_VALUE", at)
    kind = raw.get("kind")
    if type(kind) is not str or kind not in _STEP_FIELDS:
        raise BoundaryError("FIXTURE_VALUE", at + ".kind")
    body = _exact_fields(raw, _STEP_FIELDS[kind], at)
    step_id = body["id"]
    if not is_identifier(step_id) or step_id in earlier:
        raise BoundaryError("FIXTURE_VALUE", at + ".id")
    of_step = None
    if kind == "query_status":
        of_step = body["of_step"]
        if not is_identifier(of_step):
            raise BoundaryError("FIXTURE_VALUE", at + ".of_step")
        # Only an earlier dispatch step can be queried: never itself, never a later step.
        if earlier.get(of_step) != "dispatch":
            raise BoundaryError("FIXTURE_REFERENCE", at + ".of_step")
    proposal = _flat(body["proposal"], _PROPOSAL, at + ".proposal")
    context = _parse_context(body["context"], at + ".context")
    principal = _parse_principal(body["principal"], at + ".principal")
    approval = body.get("approval")
    if approval is not None:
        approval = _parse_approval(approval, at + ".approval")
    _check(body, _STEP_SCALARS[kind], at)
    return Step(
        id=step_id,
        kind=kind,
        of_step=of_step,
        proposal=proposal,
        context=context,
        principal=principal,
        approval=approval,
        fault=body["fault"],
        now=body["now"],
        deadline=body.get("deadline"),
        world_changes=_parse_changes(body["world_changes"], at + ".world_changes", known),
        expect=_parse_expect(body["expect"], at + ".expect"),
    )


def _parse_context(raw: Any, at: str) -> CallContext:
    body = _flat(raw, _CONTEXT, at)
    if registered_profile(body["provider"], body["api_family"], body["adapter_revision"]) is None:
        raise BoundaryError("FIXTURE_PROFILE", at)
    return CallContext(
        provider=body["provider"], api_family=body["api_family"], adapter_revision=body["adapter_revision"],
        response_id=body["response_id"], call_id=body["call_id"], operation_id=body["operation_id"],
        idempotency_key=body["idempotency_key"],
    )


def _parse_principal(raw: Any, at: str) -> Principal:
    body = _exact_fields(raw, _PRINCIPAL_FIELDS, at)
    roles = _array(body["roles"], at + ".roles", MAX_ROLES)
    for index, role in enumerate(roles):
        if not is_identifier(role):
            raise BoundaryError("FIXTURE_VALUE", f"{at}.roles[{index}]")
    if roles != sorted(set(roles)):
        raise BoundaryError("FIXTURE_VALUE", at + ".roles")
    _check(body, _PRINCIPAL_NAMES, at)
    return Principal(tenant=body["tenant"], subject=body["subject"], roles=tuple(roles))


def _parse_approval(raw: Any, at: str) -> Approval:
    body = _flat(raw, _APPROVAL, at)
    return Approval(
        approver=body["approver"], tenant=body["tenant"], subject=body["subject"], provider=body["provider"],
        api_family=body["api_family"], adapter_revision=body["adapter_revision"], response_id=body["response_id"],
        call_id=body["call_id"], operation_id=body["operation_id"], idempotency_key=body["idempotency_key"],
        arguments=body["arguments"], contract_revision=body["contract_revision"], expires_at=body["expires_at"],
    )


def _parse_changes(raw: Any, at: str, known: frozenset[tuple[str, str]]) -> tuple[WorldChange, ...]:
    changes = []
    for index, item in enumerate(_array(raw, at, MAX_WORLD_CHANGES)):
        place = f"{at}[{index}]"
        body = _flat(item, _CHANGE, place)
        if (body["tenant"], body["order_ref"]) not in known:
            raise BoundaryError("FIXTURE_REFERENCE", place)
        changes.append(WorldChange(tenant=body["tenant"], order_ref=body["order_ref"], status=body["status"]))
    return tuple(changes)


def _parse_expect(raw: Any, at: str) -> Expectation:
    body = _flat(raw, _EXPECT, at)
    return Expectation(
        status=body["status"], error_code=body["error_code"], outcome=body["outcome"], delivery=body["delivery"],
        recovery=body["recovery"], effect_count=body["effect_count"], data=body["data"],
        request_sha256=body["request_sha256"], result_sha256=body["result_sha256"],
        call_binding_sha256=body["call_binding_sha256"],
    )


# -- the quick walk --------------------------------------------------------------------------
# A fixture is read a second way first, which only answers "valid" (with the same Fixture the
# walk above builds) or None. Values of one kind are checked together once the whole fixture is
# read: the distinct identifiers by one regex over their joined text, the order references
# likewise, the distinct digests by one length test and one pass over their characters, the
# times by one type test with their minimum and maximum. An expectation's four words are one
# tuple looked up in the set of their allowed combinations; every other check is spelled out
# inline, not a call a field. On None, for any fault or doubt (a value of another type, an
# unhashable value: TypeError or KeyError), the walk above reads the fixture again from the start
# and names the first fault in document order. So the quick walk decides only how fast a valid
# fixture loads, never an outcome: it accepts exactly what the walk accepts, and tests hold the
# two to the same answer and the same Fixture. Its values come from the strict decoder, so a str
# is exactly a str, and a join refuses anything else.


def _run_of(pattern: re.Pattern[str]) -> re.Pattern[str]:
    """A whole-string pattern for values each matching `pattern` whole, each followed by a newline."""
    return re.compile(r"(?:(?:%s)\n)+" % pattern.pattern)


_IDENTIFIER_RUN: Final = _run_of(IDENTIFIER_PATTERN)
_ORDER_REF_RUN: Final = _run_of(ORDER_REF_PATTERN)
_ORDER_REF_LENGTH: Final = len("ORDER-") + 12  # the longest text ORDER_REF_PATTERN matches
# DIGEST_PATTERN as a length and an alphabet, for one C pass over all digests at once (the regex
# engine reads the class [0-9a-f] several times slower); a test holds the two to the same answer
# for every character and length.
_DIGEST_LENGTH: Final = 64
_DIGEST_ALPHABET: Final = b"0123456789abcdef"
_EXPECT_WORDS: Final = frozenset(  # status, outcome, delivery, recovery: each checked against its own set
    (status, outcome, delivery, recovery)
    for status in STATUSES for outcome in OUTCOMES for delivery in DELIVERIES for recovery in RECOVERIES
)


def _quick_type(cls: type) -> Callable[..., Any]:
    """A constructor of `cls` values (a frozen dataclass with slots) by plain slot stores, its
    fields given by position in their declared order.

    A frozen dataclass's __init__ sets each field through object.__setattr__, several times the
    cost of a slot store, and a keyword call costs about three positional ones; the quick walk
    builds about 1,200 fields of a 60 KiB fixture, and a write builds four operation records, a
    receipt and a handler's call. The twin holds the same slots and nothing else, so once its
    fields are stored its instance may take `cls` as its class (the value is then the one cls(...)
    builds, frozen from there on). A value type with a __post_init__ (a check of its own) or other
    slots than its fields cannot have a twin: the module refuses to load, rather than let a twin
    skip that check unseen.
    """
    names = tuple(cls.__dataclass_fields__)
    if hasattr(cls, "__post_init__") or getattr(cls, "__slots__", None) != names:
        raise RuntimeError(f"{cls.__name__} cannot be built by slot stores")

    def become(self: Any) -> None:
        self.__class__ = cls

    twin = type(f"_{cls.__name__}Twin", (), {
        "__module__": __name__, "__annotations__": dict.fromkeys(names, Any), "__post_init__": become,
    })
    return dataclass(slots=True, eq=False, repr=False)(twin)


def _field_values(cls: type, table: _Table) -> Callable[[Mapping[str, Any]], tuple[Any, ...]]:
    """The values of an object the walk's `table` admits, in the order cls declares its fields:
    what cls's twin takes by position, derived from the type instead of listed at a call site.
    The table's field names must be cls's, and more than one (itemgetter of one name answers the
    value itself, not a tuple)."""
    names = tuple(cls.__dataclass_fields__)
    if frozenset(names) != table.fields or len(names) < 2:
        raise RuntimeError(f"{cls.__name__} is not read by position from its table's fields")
    return operator.itemgetter(*names)


_QUICK_ORDER: Final = _quick_type(Order)
_QUICK_CASE: Final = _quick_type(Case)
_QUICK_STEP: Final = _quick_type(Step)
_QUICK_CONTEXT: Final = _quick_type(CallContext)
_QUICK_PRINCIPAL: Final = _quick_type(Principal)
_QUICK_APPROVAL: Final = _quick_type(Approval)
_QUICK_CHANGE: Final = _quick_type(WorldChange)
_QUICK_EXPECTATION: Final = _quick_type(Expectation)
# The objects whose fields all come from the fixture as they are (checked inline, or together later).
_ORDER_VALUES: Final = _field_values(Order, _ORDER)
_CONTEXT_VALUES: Final = _field_values(CallContext, _CONTEXT)
_APPROVAL_VALUES: Final = _field_values(Approval, _APPROVAL)
_CHANGE_VALUES: Final = _field_values(WorldChange, _CHANGE)
_EXPECTATION_VALUES: Final = _field_values(Expectation, _EXPECT)


class _Quick(NamedTuple):
    """The values the quick walk checks together once the whole fixture is read."""

    identifiers: list[Any]
    digests: list[Any]
    order_refs: list[Any]
    times: list[Any]


def _all_match(values: list[Any], run: re.Pattern[str], longest: int) -> bool:
    """Each value a str of at most `longest` characters matching run's pattern whole.

    Each distinct value is matched once (identifiers repeat). The patterns match no newline, and
    the text holds one newline a value only when no value holds one: "a\nb" is one value, never
    two identifiers.
    """
    distinct = set(values)  # TypeError for a list or an object: the walk names it
    if not distinct or max(map(len, distinct)) > longest:
        return False
    text = "\n".join(distinct) + "\n"  # TypeError for a number, null or a boolean
    return text.count("\n") == len(distinct) and run.fullmatch(text) is not None


def _all_digests(values: list[Any]) -> bool:
    """Each value a str DIGEST_PATTERN matches whole."""
    distinct = set(values)
    text = "".join(distinct)  # TypeError for anything but a str
    return (bool(distinct) and set(map(len, distinct)) == {_DIGEST_LENGTH} and text.isascii()
            and not text.encode("ascii").translate(None, _DIGEST_ALPHABET))


def _quick_fixture(root: dict[str, Any]) -> Fixture | None:
    """The fixture below its header when every check passes; None on any fault or doubt."""
    found = _Quick([], [], [], [])
    try:
        world = _quick_world(root["world"], found)
        if world is None:
            return None
        cases = _quick_cases(root["cases"], frozenset((order.tenant, order.order_ref) for order in world.orders),
                             found)
        if cases is None or not _all_found_valid(found):
            return None
    except (TypeError, KeyError):
        return None
    return Fixture(world=world, cases=cases)


def _all_found_valid(found: _Quick) -> bool:
    times = found.times
    return (_all_match(found.identifiers, _IDENTIFIER_RUN, MAX_IDENTIFIER_LENGTH) and _all_digests(found.digests)
            and _all_match(found.order_refs, _ORDER_REF_RUN, _ORDER_REF_LENGTH)
            and set(map(type, times)) == {int} and MIN_TIME <= min(times) and max(times) <= MAX_TIME)


def _quick_world(raw: Any, found: _Quick) -> World | None:
    if type(raw) is not dict or raw.keys() != _WORLD_FIELDS:
        return None
    raw_orders = raw["orders"]
    approvers = raw["approvers"]
    if (type(raw_orders) is not list or len(raw_orders) > MAX_ORDERS or type(approvers) is not list
            or len(approvers) > MAX_APPROVERS or len(set(approvers)) != len(approvers)):
        return None
    orders = []
    for body in raw_orders:
        if type(body) is not dict or body.keys() != _ORDER.fields:
            return None
        revision = body["revision"]
        if body["status"] not in ORDER_STATUSES or type(revision) is not int or not 1 <= revision <= MAX_REVISION:
            return None
        order = _QUICK_ORDER(*_ORDER_VALUES(body))
        found.identifiers.extend((order.tenant, order.owner))
        found.order_refs.append(order.order_ref)
        orders.append(order)
    if len({(order.tenant, order.order_ref) for order in orders}) != len(orders):
        return None
    found.identifiers.extend(approvers)
    return World(orders=tuple(orders), approvers=frozenset(approvers))


def _quick_cases(raw: Any, known: frozenset[tuple[str, str]], found: _Quick) -> tuple[Case, ...] | None:
    if type(raw) is not list or not raw or len(raw) > MAX_CASES:
        return None
    cases = []
    for body in raw:
        if type(body) is not dict or body.keys() != _CASE_FIELDS:
            return None
        raw_steps = body["steps"]
        title = body["title"]
        if (type(raw_steps) is not list or not raw_steps or len(raw_steps) > MAX_STEPS_PER_CASE
                or type(title) is not str or not 0 < len(title) <= MAX_TEXT_LENGTH):
            return None
        found.identifiers.append(body["id"])
        steps = []
        earlier: dict[str, str] = {}
        for item in raw_steps:
            step = _quick_step(item, known, earlier, found)
            if step is None:
                return None
            earlier[step.id] = step.kind
            steps.append(step)
        cases.append(_QUICK_CASE(body["id"], title, tuple(steps)))
    if len({case.id for case in cases}) != len(cases):
        return None
    return tuple(cases)


def _quick_step(raw: Any, known: frozenset[tuple[str, str]], earlier: Mapping[str, str],
                found: _Quick) -> Step | None:
    if type(raw) is not dict:
        return None
    kind = raw.get("kind")
    if type(kind) is not str or raw.keys() != _STEP_FIELDS.get(kind):
        return None
    step_id = raw["id"]
    fault = raw["fault"]
    if step_id in earlier or fault not in FAULTS[kind]:
        return None
    found.identifiers.append(step_id)
    of_step = raw.get("of_step")
    if kind == "query_status" and earlier.get(of_step) != "dispatch":
        return None  # the earlier step's id is an identifier already
    deadline = raw.get("deadline")
    found.times.extend((raw["now"], deadline) if deadline is not None else (raw["now"],))
    proposal = raw["proposal"]
    if type(proposal) is not dict or proposal.keys() != _PROPOSAL.fields:
        return None
    name = proposal["name"]
    if type(name) is not str or not 0 < len(name) <= MAX_TEXT_LENGTH or type(proposal["arguments"]) is not dict:
        return None
    raw_approval = raw.get("approval")
    approval = _quick_approval(raw_approval, found) if raw_approval is not None else None
    context = _quick_context(raw["context"], found)
    principal = _quick_principal(raw["principal"], found)
    changes = _quick_changes(raw["world_changes"], known)
    expect = _quick_expect(raw["expect"], found)
    if ((approval is None and raw_approval is not None) or context is None or principal is None or changes is None
            or expect is None):
        return None
    return _QUICK_STEP(step_id, kind, of_step, proposal, context, principal, approval, fault, raw["now"], deadline,
                       changes, expect)


def _quick_context(body: Any, found: _Quick) -> CallContext | None:
    if (type(body) is not dict or body.keys() != _CONTEXT.fields
            or registered_profile(body["provider"], body["api_family"], body["adapter_revision"]) is None):
        return None
    context = _QUICK_CONTEXT(*_CONTEXT_VALUES(body))
    found.identifiers.extend((context.provider, context.api_family, context.adapter_revision, context.response_id,
                              context.call_id, context.operation_id))
    if context.idempotency_key is not None:
        found.identifiers.append(context.idempotency_key)
    return context


def _quick_principal(body: Any, found: _Quick) -> Principal | None:
    if type(body) is not dict or body.keys() != _PRINCIPAL_FIELDS:
        return None
    roles = body["roles"]
    # One role is sorted and unique: it is an identifier (checked with the others) or refused.
    if type(roles) is not list or len(roles) > MAX_ROLES or (len(roles) > 1 and roles != sorted(set(roles))):
        return None
    principal = _QUICK_PRINCIPAL(body["tenant"], body["subject"], tuple(roles))
    identifiers = found.identifiers
    identifiers.append(principal.tenant)
    identifiers.append(principal.subject)
    identifiers.extend(roles)
    return principal


def _quick_approval(body: Any, found: _Quick) -> Approval | None:
    if type(body) is not dict or body.keys() != _APPROVAL.fields or type(body["arguments"]) is not dict:
        return None
    approval = _QUICK_APPROVAL(*_APPROVAL_VALUES(body))
    found.identifiers.extend((
        approval.approver, approval.tenant, approval.subject, approval.provider, approval.api_family,
        approval.adapter_revision, approval.response_id, approval.call_id, approval.operation_id,
        approval.idempotency_key, approval.contract_revision,
    ))
    found.times.append(approval.expires_at)
    return approval


def _quick_changes(raw: Any, known: frozenset[tuple[str, str]]) -> tuple[WorldChange, ...] | None:
    if type(raw) is not list or len(raw) > MAX_WORLD_CHANGES:
        return None
    changes = []
    for body in raw:
        # A known (tenant, order_ref) is an order's, whose values the quick walk checks already.
        if (type(body) is not dict or body.keys() != _CHANGE.fields or (body["tenant"], body["order_ref"]) not in known
                or body["status"] not in ORDER_STATUSES):
            return None
        changes.append(_QUICK_CHANGE(*_CHANGE_VALUES(body)))
    return tuple(changes)


def _quick_expect(body: Any, found: _Quick) -> Expectation | None:
    if type(body) is not dict or body.keys() != _EXPECT.fields:
        return None
    code = body["error_code"]
    count = body["effect_count"]
    data = body["data"]
    if ((body["status"], body["outcome"], body["delivery"], body["recovery"]) not in _EXPECT_WORDS
            or (code is not None and code not in _TOOL_ERROR_CODES)
            or type(count) is not int or not 0 <= count <= MAX_STEPS_PER_CASE
            or (data is not None and type(data) is not dict)):
        return None
    expect = _QUICK_EXPECTATION(*_EXPECTATION_VALUES(body))
    found.digests.extend((expect.request_sha256, expect.result_sha256, expect.call_binding_sha256))
    return expect


# ============================================================================================
# 7. Proposal and context binding
# ============================================================================================
# The context, the principal, the clock and the faults come from the trusted host. A malformed
# one is the host's bug, so it raises (host scope) rather than becoming a model-facing result.
# The proposal comes from the model: a malformed one is answered inside a model_result.


_CONTEXT_IDENTIFIERS: Final = ("response_id", "call_id", "operation_id")  # the place a refusal names, in this order


def check_context(context: Any) -> ProviderProfile:
    """Validate a trusted call context; return its registered provider profile."""
    if type(context) is not CallContext:
        raise BoundaryError("CONTEXT_INVALID")
    if not (is_identifier(context.response_id) and is_identifier(context.call_id)
            and is_identifier(context.operation_id)):
        raise BoundaryError("CONTEXT_INVALID", next(name for name in _CONTEXT_IDENTIFIERS
                                                    if not is_identifier(getattr(context, name))))
    if context.idempotency_key is not None and not is_identifier(context.idempotency_key):
        raise BoundaryError("CONTEXT_INVALID", "idempotency_key")
    profile = registered_profile(context.provider, context.api_family, context.adapter_revision)
    if profile is None:
        raise BoundaryError("PROVIDER_PROFILE_UNKNOWN")
    return profile


def check_principal(principal: Any) -> None:
    # Exact types first: the cache below compares its keys with ==, which a str subclass can fake.
    if (type(principal) is not Principal or type(principal.tenant) is not str
            or type(principal.subject) is not str or type(principal.roles) is not tuple
            or len(principal.roles) > MAX_ROLES or not all(type(role) is str for role in principal.roles)
            or not _valid_principal(principal.tenant, principal.subject, principal.roles)):
        raise BoundaryError("PRINCIPAL_INVALID")


@functools.lru_cache(maxsize=SUBJECT_REF_CACHE)
def _valid_principal(tenant: str, subject: str, roles: tuple[str, ...]) -> bool:
    # A pure function of plain strings: a host that reuses its principal checks it once.
    return (is_identifier(tenant) and is_identifier(subject) and all(is_identifier(role) for role in roles)
            and list(roles) == sorted(set(roles)))


def _check_clock(now: Any, deadline: Any) -> None:
    for moment in (now, deadline):
        if moment is not None and not (type(moment) is int and MIN_TIME <= moment <= MAX_TIME):
            raise BoundaryError("CONTEXT_INVALID")
    if now is None:
        raise BoundaryError("CONTEXT_INVALID")


def _proposal_parts(proposal: Any) -> tuple[str, dict[str, Any]]:
    if (type(proposal) is not dict or not plain_keys(proposal) or proposal.keys() != _PROPOSAL_FIELDS
            or type(proposal["name"]) is not str or type(proposal["arguments"]) is not dict):
        raise BoundaryError("INVALID_PROPOSAL")
    return proposal["name"], proposal["arguments"]


def principal_view(principal: Principal) -> dict[str, Any]:
    """The principal as the audit keeps it: tenant, a subject reference, the roles.

    The subject reference is a teaching hash, not production pseudonymization: anyone who can
    guess a subject can recompute it. A real system would use a keyed function.
    """
    tenant, subject = principal.tenant, principal.subject
    # Only plain strings are cached; anything else (a hostile value under verification) is
    # hashed as it is, every time, with the same result or the same exception as before.
    subject_ref = (_subject_ref(tenant, subject) if type(tenant) is str and type(subject) is str
                   else _subject_ref.__wrapped__(tenant, subject))
    return {"tenant": tenant, "subject_ref": subject_ref, "roles": list(principal.roles)}


@functools.lru_cache(maxsize=SUBJECT_REF_CACHE)
def _subject_ref(tenant: Any, subject: Any) -> str:
    return canonical_sha256({"domain": SUBJECT_REF_DOMAIN, "tenant": tenant, "subject": subject})


@functools.lru_cache(maxsize=SUBJECT_REF_CACHE)
def _principal_text(tenant: str, subject: str, roles: tuple[str, ...]) -> str:
    # Only called on a checked principal: plain strings, a tuple of roles.
    return _portable_text(principal_view(Principal(tenant, subject, roles)))


# ============================================================================================
# 8. The contract language
# ============================================================================================
# Tools are declared as data: a ``tool-contracts-v1`` file (name, description, effect, role,
# resource field, input and output schemas, bound fields, revisions, provenance, hints), loaded
# with the fixture loader's discipline, whose schemas are written in an exact subset of JSON
# Schema (2020-12 and draft-07 spellings). The compiler turns the part of JSON Schema whose
# meaning it can hold exactly into a closed table of rules and refuses everything else with a
# SCHEMA_* code; it never loosens: what a compiled check admits, the schema admits too (a closed
# object where the schema left additionalProperties out, a host bound where it gave none, are
# narrowings). It never recurses over untrusted depth (one iterative walk checks the limits
# before compiling, the compiler is a work list, the value check a stack), never follows a
# remote or recursive $ref or expands a shared definition twice, never runs a pattern it cannot
# prove linear (patterns are parsed into a small portable subset and re-emitted, ASCII only, for
# fullmatch), and never puts text from a schema or a value into a message or an ``at`` path:
# ``at`` is built from known keywords and indices (schema.properties[1].items, value.properties[0]).
# mcp_bridge/README.md has the table of what is accepted and what is refused, and why.

# -- Limits and constants ----------------------------------------------------------------------
# Checked before compiling, on the raw schema, by one iterative walk that stops at the first
# limit crossed: a hostile schema costs at most one pass over what the limits let through.

MAX_SCHEMA_BYTES: Final = 32_768  # canonical bytes of one tool schema; the largest seen in a census is ~6 KiB
MAX_SCHEMA_DEPTH: Final = 32  # JSON containers deep; one schema level is two (properties, then the field)
MAX_SCHEMA_NODES: Final = 4_096  # JSON values in one schema, annotations included
MAX_PROPERTIES: Final = 64  # properties of one object schema
MAX_DEFINITIONS: Final = 64  # entries of $defs / definitions
MAX_ENUM: Final = 256  # choices of one enum
MAX_PATTERN_LENGTH: Final = 256  # characters of one pattern, before it is parsed
MAX_NAME_LENGTH: Final = 64  # a property or definition name
MAX_QUANTIFIER: Final = 1_000  # the largest count a pattern's {m,n} may name
MAX_BRANCHES: Final = 32  # alternatives at the pattern's one alternation site
MAX_UNION_BRANCHES: Final = 16  # branches of one anyOf / oneOf; a value may be tried against each scalar one
PATTERN_CACHE: Final = 1_024  # pattern texts whose proof is remembered; a cache of a pure function, not a limit

# Host bounds: where a schema is silent, the host bounds it, and the compiled form records it.
# Also the ceilings of a declared bound, but in a tool's output (OUTPUT_BOUNDS, after Bounds).
DEFAULT_MAX_LENGTH: Final = 4_096  # characters of a string with no maxLength
DEFAULT_MAX_ITEMS: Final = 256  # items of an array with no maxItems
DEFAULT_MAX_ENTRIES: Final = 256  # entries of a map with no maxProperties

SCHEMA_ROOT: Final = "schema"
VALUE_ROOT: Final = "value"

# Keywords that say nothing about which values are valid: allowed anywhere and ignored.
ANNOTATIONS: Final = frozenset({
    "title", "description", "examples", "default", "$comment", "deprecated", "readOnly", "writeOnly",
    "$schema",
})
ROOT_ONLY: Final = frozenset({"$id", "$defs", "definitions"})  # a nested $id would move what "#" means

# Keywords refused by name, each with the code that says why.
REFUSED_KEYWORDS: Final[Mapping[str, str]] = MappingProxyType({
    "format": "SCHEMA_FORMAT",
    "allOf": "SCHEMA_COMBINATOR", "oneOf": "SCHEMA_COMBINATOR", "not": "SCHEMA_COMBINATOR",
    "if": "SCHEMA_CONDITIONAL", "then": "SCHEMA_CONDITIONAL", "else": "SCHEMA_CONDITIONAL",
    "dependentSchemas": "SCHEMA_CONDITIONAL", "dependentRequired": "SCHEMA_CONDITIONAL",
    "dependencies": "SCHEMA_CONDITIONAL",
    "patternProperties": "SCHEMA_OPEN_OBJECT", "propertyNames": "SCHEMA_OPEN_OBJECT",
    "unevaluatedProperties": "SCHEMA_OPEN_OBJECT",
    "prefixItems": "SCHEMA_TUPLE", "additionalItems": "SCHEMA_TUPLE", "contains": "SCHEMA_TUPLE",
    "minContains": "SCHEMA_TUPLE", "maxContains": "SCHEMA_TUPLE", "unevaluatedItems": "SCHEMA_TUPLE",
    "$dynamicRef": "SCHEMA_REF_REMOTE", "$recursiveRef": "SCHEMA_REF_REMOTE",
    "$dynamicAnchor": "SCHEMA_REF_REMOTE", "$recursiveAnchor": "SCHEMA_REF_REMOTE", "$anchor": "SCHEMA_REF_REMOTE",
})

# The constraining keywords each type understands (beyond "type" itself).
TYPE_KEYWORDS: Final[Mapping[str, frozenset[str]]] = MappingProxyType({
    "string": frozenset({"enum", "const", "minLength", "maxLength", "pattern", "format"}),
    "integer": frozenset({"enum", "const", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                          "multipleOf"}),
    "number": frozenset({"enum", "const", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                         "multipleOf"}),
    "boolean": frozenset({"enum", "const"}),
    "object": frozenset({"properties", "required", "additionalProperties", "minProperties", "maxProperties"}),
    "array": frozenset({"items", "minItems", "maxItems", "uniqueItems"}),
})
SCALAR_KINDS: Final[Mapping[type, str]] = MappingProxyType({str: "string", int: "integer", float: "number",
                                                              bool: "boolean"})
DEFINITION_PREFIXES: Final[Mapping[str, str]] = MappingProxyType({"#/$defs/": "$defs", "#/definitions/": "definitions"})
UNIONS: Final = ("anyOf", "oneOf")  # the union keywords; a union node may also carry OpenAPI's annotation:
DISCRIMINATOR: Final = "discriminator"  # Pydantic's, naming the tag; read by nothing, the tag is found in the branches

# The contracts file.

CONTRACTS_FORMAT: Final = "tool-contracts-v1"
MAX_CONTRACTS_BYTES: Final = 16_777_216  # what an import reads of a server's listing at most, so its draft fits
MAX_CONTRACTS_DEPTH: Final = MAX_SCHEMA_DEPTH + 4  # file, tools, tool, schema: then the schema's own
MAX_TOOLS: Final = 128  # tools in one file; providers cap a request's tools at 128
MAX_DESCRIPTION_LENGTH: Final = 8_192  # characters of a tool description: untrusted text shown to a model (the import drafts 2,048 unless its host raises it)
TOOL_NAME: Final = re.compile(r"[A-Za-z0-9_.-]{1,64}")  # MCP's alphabet, at the providers' 64 characters
EFFECTS: Final = frozenset({"read", "write"})
SOURCES: Final = frozenset({"host", "mcp_import"})

_ROOT_FIELDS: Final = frozenset({"format", "tools"})
_TOOL_FIELDS: Final = frozenset({
    "name", "description", "effect", "required_role", "resource_field", "input_schema", "output_schema",
    "bound_fields", "revisions", "producer", "provenance", "hints",
})
_REVISION_FIELDS: Final = ("contract", "input", "output", "effect", "handler", "producer")
_PROVENANCE_FIELDS: Final = frozenset({
    "source", "server_name", "server_version", "protocol_version", "input_schema_sha256", "output_schema_sha256",
})
HINT_FIELDS: Final = ("read_only", "destructive", "idempotent", "open_world")

# The host's overlay file: per tool, per property path, the host's narrower schema.
OVERLAY_FORMAT: Final = "tool-contract-overlay-v1"
MAX_OVERLAY_PATHS: Final = 64  # narrowed properties of one side of one tool: an object's property limit
MAX_OVERLAY_PATH_LENGTH: Final = 16  # names in one path: two schema levels per object, under the depth limit
_OVERLAY_ROOT_FIELDS: Final = frozenset({"format", "tools"})
_OVERLAY_TOOL_FIELDS: Final = frozenset({"name", "input", "output"})
_OVERLAY_ENTRY_FIELDS: Final = frozenset({"path", "schema"})
_OVERLAY_SIDES: Final = (("input", "input_schema"), ("output", "output_schema"))

# -- Errors --------------------------------------------------------------------------------------
# The contract language raises BoundaryError with codes of ERROR_CATALOG's scopes schema, value
# and contracts (section 2); a handler tells a refused schema, value or file apart by its scope.
# The dispatcher never shows these codes to a model: a refused value there is INVALID_ARGUMENTS
# (or OUTPUT_CONTRACT_VIOLATION), a refused schema or file stops the host before anything runs.

# -- Rules -------------------------------------------------------------------------------------
# A compiled schema is a flat tuple of frozen rules; a container names its children by index,
# so a shared definition is one rule however often it is used.


@dataclass(frozen=True, slots=True)
class StringRule:
    min_length: int
    max_length: int
    max_length_from: str  # "schema" or "host": who set the upper bound
    choices: frozenset[str] | None
    pattern: str | None  # the schema's own pattern text, kept for the emitted schema
    regex: _LazyRegex | None = field(compare=False)  # the Python regex is built on first use (Patterns)
    description: str | None = field(compare=False)
    format: str | None = None  # a name of FORMATS: one exact reading of a string's text


@dataclass(frozen=True, slots=True)
class IntegerRule:
    minimum: int
    maximum: int
    multiple_of: int | None
    choices: frozenset[int] | None
    description: str | None = field(compare=False)


@dataclass(frozen=True, slots=True)
class NumberRule:
    """Any JSON number, an exact integer or a finite double, within bounds (None: unbounded on
    that side; exclusive or not); 1 and 1.0 are one number here, as in JSON Schema."""
    minimum: int | float | None
    minimum_exclusive: bool
    maximum: int | float | None
    maximum_exclusive: bool
    multiple_of: int | float | None  # only a step whose decimal text is exactly its double (0.5, not 0.1)
    choices: frozenset[int | float] | None
    description: str | None = field(compare=False)


@dataclass(frozen=True, slots=True)
class BooleanRule:
    choices: frozenset[bool] | None
    description: str | None = field(compare=False)


@dataclass(frozen=True, slots=True)
class ObjectRule:
    properties: tuple[tuple[str, int], ...]  # (name, rule index) in declaration order
    required: frozenset[str]
    description: str | None = field(compare=False)
    index: Mapping[str, tuple[int, int]] = field(init=False, compare=False, repr=False)  # name -> (position, rule)

    def __post_init__(self) -> None:
        object.__setattr__(self, "index", MappingProxyType(
            {name: (position, rule) for position, (name, rule) in enumerate(self.properties)}))


@dataclass(frozen=True, slots=True)
class ArrayRule:
    items: int
    min_items: int
    max_items: int
    max_items_from: str  # "schema" or "host"
    unique: bool
    description: str | None = field(compare=False)


@dataclass(frozen=True, slots=True)
class MapRule:
    """An object of any string keys, each value under one rule: additionalProperties as a schema."""
    values: int
    min_entries: int
    max_entries: int
    max_entries_from: str  # "schema" or "host"
    description: str | None = field(compare=False)


@dataclass(frozen=True, slots=True)
class NullableRule:
    inner: int
    description: str | None = field(compare=False)


@dataclass(frozen=True, slots=True)
class UnionRule:
    """anyOf / oneOf over branches no two of which admit one value (different JSON types, or
    objects with distinct tags), so both keywords mean the same; or, for anyOf only, several
    scalar branches of one type, each tried. null is never a branch: a NullableRule wraps the union.

    The compiler fills the dispatch once every branch is compiled (``routes`` and ``tags`` are
    empty until then): by a value's Python type, the (slot, rule) pairs that may admit it; for
    tagged objects, the tag's name and each tag value's branch slot."""
    branches: tuple[int, ...]  # rule slots, in declaration order
    exclusive: bool  # oneOf: its branches must be proved apart; anyOf may try scalar ones in turn
    description: str | None = field(compare=False)
    routes: Mapping[type, tuple[tuple[int, Rule], ...]] = field(default_factory=lambda: _NO_ROUTES, compare=False)
    tag: str | None = field(default=None, compare=False)
    tags: Mapping[str, int] = field(default_factory=lambda: _NO_ROUTES, compare=False)


_NO_ROUTES: Final[Mapping[Any, Any]] = MappingProxyType({})
Rule = (StringRule | IntegerRule | NumberRule | BooleanRule | ObjectRule | ArrayRule | MapRule | NullableRule
        | UnionRule)
_SCALAR_RULES: Final = (StringRule, IntegerRule, NumberRule, BooleanRule)

# -- Patterns ----------------------------------------------------------------------------------
# ECMA-262 (what JSON Schema means) and Python's re agree exactly on this subset, because every
# atom is a set of ASCII characters: no '.', no negated class, no \w \s \b \D, no non-ASCII literal
# (ECMA counts UTF-16 code units, Python code points), no lookaround, no backreference, no lazy
# quantifier. The pattern is re-emitted with every character as \xHH, so Python never reads a
# construct the parser did not mean (and never warns about "[[" or "--" in a class).
#
# Linear time: at most one alternation site (the top level, or one group); groups do not nest;
# a group repeated more than once holds neither a quantifier nor an alternation; a quantified
# group cannot match the empty text; and a repeated atom never overlaps the first characters of
# what may follow it, so a backtracking engine never has two ways to split the text between them.
#
# Proving is one pass with a small constant, since a contracts file may hold thousands of
# patterns: a set of characters is an int with one bit per ASCII code (a union or an overlap is
# one operation, a range one subtraction, whatever its width); what may follow each item is
# carried from the end of its sequence, each item looked at once; and a pattern text met again
# (the same field in many tools) is proved once (PATTERN_CACHE). Python's regex is built the first
# time a value meets the pattern, not when the schema is compiled: re.compile parses in Python, at
# microseconds a character of the emitted text, which over a file of many distinct patterns costs
# more than all the rest of loading.

_SYNTAX: Final = frozenset("^$\\.*+?()[]{}|/-")  # what an escape may name
_SPECIAL: Final = frozenset("^$\\.*+?()[]{}|")  # never a literal outside a class
_PRINTABLE: Final = frozenset(chr(code) for code in range(0x20, 0x7F))
_DIGITS: Final = sum(1 << code for code in range(ord("0"), ord("9") + 1))
# Each character as the set of itself, for the three places a character may stand.
_LITERALS: Final[Mapping[str, int]] = MappingProxyType({
    char: 1 << ord(char) for char in _PRINTABLE - _SPECIAL})
_CLASS_MEMBERS: Final[Mapping[str, int]] = MappingProxyType({  # a backslash starts an escape instead
    char: 1 << ord(char) for char in _PRINTABLE - {"[", "\\"}})
_ESCAPES: Final[Mapping[str, int]] = MappingProxyType({"d": _DIGITS, **{char: 1 << ord(char) for char in _SYNTAX}})
_SEQUENCE_ENDS: Final = frozenset("$|)")
_REPEATS: Final[Mapping[str, tuple[int, int | None]]] = MappingProxyType({"?": (0, 1), "*": (0, None), "+": (1, None)})
_QUANTIFIER: Final = re.compile(r"\{([0-9]{1,4})(,([0-9]{0,4}))?\}")


# An item: an atom or a group, repeated from low to high times, as a plain tuple
#   (first, branches, low, high, empty)
# first: the characters it may start with, one bit per code (an atom's own set); branches: a
# group's alternatives, () for an atom; high None: unbounded; empty: a group one of whose branches
# may match the empty text, never an atom. A pattern builds one per atom: a NamedTuple's
# constructor cost about a third of the whole proof (measured), a tuple's next to nothing.
_Item = tuple[int, tuple[tuple["_Item", ...], ...], int, int | None, bool]


class _PatternParser:
    """One pass over an anchored pattern; raises a schema-scope BoundaryError with the pattern's `at`."""

    def __init__(self, text: str, at: str) -> None:
        self.text = text
        self.at = at
        self.position = 0
        self.alternations = 0

    def refuse(self, code: str = "SCHEMA_PATTERN_UNSUPPORTED") -> BoundaryError:
        return BoundaryError(code, self.at)

    def peek(self) -> str:
        return self.text[self.position] if self.position < len(self.text) else ""

    def take(self) -> str:
        char = self.peek()
        self.position += 1
        return char

    def parse(self) -> tuple[tuple[_Item, ...], ...]:
        """The top-level branches, each anchored ^...$ on its own."""
        branches = []
        while True:
            if self.take() != "^":
                raise self.refuse("SCHEMA_PATTERN_UNANCHORED")
            branches.append(self.sequence(in_group=False))
            if self.take() != "$":
                raise self.refuse("SCHEMA_PATTERN_UNANCHORED")
            if self.position == len(self.text):
                break
            if self.take() != "|":
                raise self.refuse("SCHEMA_PATTERN_UNANCHORED")  # "$" before the end: not a whole-string anchor
        if len(branches) > 1:
            self.count_alternation(len(branches))
        return tuple(branches)

    def count_alternation(self, branches: int) -> None:
        self.alternations += 1
        if self.alternations > 1 or branches > MAX_BRANCHES:
            raise self.refuse()  # one alternation site, of a bounded width

    def sequence(self, *, in_group: bool) -> tuple[_Item, ...]:
        """Atoms, each with its quantifier, up to the end of the sequence."""
        items: list[_Item] = []
        text, end = self.text, len(self.text)
        while self.position < end:
            char = text[self.position]
            if char in _SEQUENCE_ENDS:
                break
            self.position += 1
            bits = _LITERALS.get(char)
            if bits is not None:
                items.append(self.quantified(bits))
            elif char == "\\":
                items.append(self.quantified(self.escape()))
            elif char == "[":
                items.append(self.quantified(self.char_class()))
            elif char != "(":
                raise self.refuse()  # ".", "^" inside, a stray quantifier, "]", "{", a control or non-ASCII char
            elif in_group:
                raise self.refuse("SCHEMA_PATTERN_NESTED_QUANTIFIER")
            else:
                items.append(self.group())
        if in_group and self.peek() == "$":
            raise self.refuse("SCHEMA_PATTERN_UNANCHORED")
        return tuple(items)

    def escape(self) -> int:
        bits = _ESCAPES.get(self.take())
        if bits is None:
            raise self.refuse()  # \w \s \b \D \1 \u0041 ...: not the same meaning in both engines
        return bits

    def char_class(self) -> int:
        text, position = self.text, self.position
        if text[position:position + 1] in ("^", "]"):
            raise self.refuse()  # negated (matches non-ASCII, counted differently) or empty
        members = 0
        while text[position:position + 1] != "]":
            low, position = self.class_member(position)
            if text[position:position + 1] == "-" and text[position + 1:position + 2] not in ("]", ""):
                high, position = self.class_member(position + 1)
                if low & (low - 1) or high & (high - 1) or low > high:
                    raise self.refuse()  # an end that is a set (\d), or a range backwards
                members |= (high << 1) - low  # the bits from low's up to high's
            else:
                members |= low
        self.position = position + 1
        return members

    def class_member(self, position: int) -> tuple[int, int]:
        """The member of a class at the position, and the position after it."""
        char = self.text[position:position + 1]
        if char == "\\":
            bits = _ESCAPES.get(self.text[position + 1:position + 2])
            position += 1
        else:
            bits = _CLASS_MEMBERS.get(char)
        if bits is None:
            raise self.refuse()  # "[", the end of the text, a control or non-ASCII char, an escape of nothing here
        return bits, position + 1

    def group(self) -> _Item:
        text = self.text
        if text.startswith("?:", self.position):
            self.position += 2
        elif self.peek() == "?":
            raise self.refuse()  # lookaround, named group, inline flags
        branches = [self.sequence(in_group=True)]
        while text[self.position:self.position + 1] == "|":
            self.position += 1
            branches.append(self.sequence(in_group=True))
        if self.take() != ")":
            raise self.refuse()
        if len(branches) > 1:
            self.count_alternation(len(branches))
        first, empty = 0, False
        for branch in branches:
            branch_first, branch_empty = _first(branch)
            first |= branch_first
            empty = empty or branch_empty
        return self.quantified(first, tuple(branches), empty)

    def quantified(self, first: int, branches: tuple[tuple[_Item, ...], ...] = (), empty: bool = False) -> _Item:
        """The item, with the quantifier that follows it (if any)."""
        text, position = self.text, self.position
        char = text[position] if position < len(text) else ""
        if char in _REPEATS:
            low, high = _REPEATS[char]
            self.position += 1
        elif char == "{":
            low, high = self.counts()
        else:
            return first, branches, 1, 1, empty
        if low == 1 and high == 1:
            return first, branches, 1, 1, empty
        if text[self.position:self.position + 1] in ("?", "+"):
            raise self.refuse()  # lazy or possessive: refused rather than reasoned about
        if branches and ((high != 1 and _has_choice(branches)) or empty):
            # A repeated group with a choice inside, or a quantified group that can match the empty
            # text (skipped, or entered and empty: two paths each, 2**n for n such groups).
            raise self.refuse("SCHEMA_PATTERN_NESTED_QUANTIFIER")
        return first, branches, low, high, empty

    def counts(self) -> tuple[int, int | None]:
        """The {m}, {m,} or {m,n} at the position."""
        found = _QUANTIFIER.match(self.text, self.position)
        if found is None:
            raise self.refuse()
        self.position = found.end()
        low = int(found.group(1))
        high = low if found.group(2) is None else (int(found.group(3)) if found.group(3) else None)
        if low > MAX_QUANTIFIER or (high is not None and (high > MAX_QUANTIFIER or high < low)):
            raise self.refuse()
        return low, high


def _has_choice(branches: tuple[tuple[_Item, ...], ...]) -> bool:
    """A group whose repetition could split a text two ways: an alternation or a quantifier inside."""
    return len(branches) > 1 or any(low != 1 or high != 1 for _, _, low, high, _ in branches[0])


def _first(items: Sequence[_Item]) -> tuple[int, bool]:
    """The characters the sequence may start with, and whether it may match the empty text."""
    chars = 0
    for first, _, low, _, empty in items:
        chars |= first
        if not (empty or low == 0):
            return chars, False
    return chars, True


def _check_unambiguous(items: Sequence[_Item], after: int, at: str) -> None:
    """No variable-count item may share a character with what can follow it: what may follow an
    item is the first characters of the next one, and of the one after it while they may be
    skipped, and `after` (what follows the sequence) when all of them may be; so it is carried
    from the end, one step an item."""
    follow = after
    for first, branches, low, high, empty in reversed(items):
        for branch in branches:
            _check_unambiguous(branch, follow, at)  # groups do not nest: one level only
        if high != low and first & follow:
            raise BoundaryError("SCHEMA_PATTERN_AMBIGUOUS", at)
        follow = first | follow if empty or low == 0 else first


def _emit_items(items: Sequence[_Item]) -> str:
    parts = []
    for first, branches, low, high, _ in items:
        body = "(?:" + "|".join(map(_emit_items, branches)) + ")" if branches else _emit_chars(first)
        parts.append(body + _emit_quantifier(low, high))
    return "".join(parts)


def _emit_chars(chars: int) -> str:
    """A set as one \\xHH, or a class of \\xHH and \\xHH-\\xHH runs in code order."""
    if not chars & (chars - 1):
        return f"\\x{chars.bit_length() - 1:02x}"
    runs = []
    while chars:
        start = (chars & -chars).bit_length() - 1
        above = chars >> start
        length = (~above & (above + 1)).bit_length() - 1  # the run of set bits from start
        end = start + length - 1
        runs.append(f"\\x{start:02x}" if length == 1 else f"\\x{start:02x}-\\x{end:02x}")
        chars = above >> length << (start + length)
    return "[" + "".join(runs) + "]"


def _emit_quantifier(low: int, high: int | None) -> str:
    if (low, high) == (1, 1):
        return ""
    return f"{{{low},}}" if high is None else f"{{{low},{high}}}"


class _LazyRegex:
    """A proved pattern's Python regex, built the first time a value meets it and kept: from then
    on ``fullmatch`` is the compiled regex's own method, as cheap to call as before."""

    __slots__ = ("text", "fullmatch", "_regex")

    def __init__(self, text: str) -> None:
        self.text = text  # the pattern as the schema wrote it, already proved
        self._regex: re.Pattern[str] | None = None
        self.fullmatch: Callable[[str], re.Match[str] | None] = self._build_then_fullmatch

    def compiled(self) -> re.Pattern[str]:
        if self._regex is None:
            branches = _PatternParser(self.text, SCHEMA_ROOT).parse()
            self._regex = re.compile("|".join(f"(?:{_emit_items(branch)})" for branch in branches), re.ASCII)
            self.fullmatch = self._regex.fullmatch
        return self._regex

    def _build_then_fullmatch(self, value: str) -> re.Match[str] | None:
        return self.compiled().fullmatch(value)


@functools.lru_cache(maxsize=PATTERN_CACHE)
def _proof(text: str) -> _LazyRegex | str:
    """The lazy regex of a pattern text, or the code that refuses it: a function of the text
    alone (the caller places the refusal), so a text met again is proved once."""
    try:
        for branch in _PatternParser(text, SCHEMA_ROOT).parse():
            _check_unambiguous(branch, 0, SCHEMA_ROOT)
    except BoundaryError as refusal:
        return refusal.code
    return _LazyRegex(text)


def _proved_pattern(text: Any, at: str) -> _LazyRegex:
    """A pattern proved (or refused, at `at`), its Python regex not built yet."""
    if type(text) is not str:  # an exact str: a subclass could hash and compare as it liked in the cache
        raise BoundaryError("SCHEMA_MALFORMED", at)
    if len(text) > MAX_PATTERN_LENGTH:
        raise BoundaryError("SCHEMA_PATTERN_TOO_LONG", at)
    proved = _proof(text)
    if type(proved) is str:
        raise BoundaryError(proved, at)
    return proved


def compile_pattern(text: Any, at: str = SCHEMA_ROOT) -> re.Pattern[str]:
    """The Python regex (for fullmatch, ASCII) of an anchored pattern in the portable subset."""
    return _proved_pattern(text, at).compiled()


def pattern_length_bounds(text: Any) -> tuple[int, int | None]:
    """The shortest and the longest text an accepted pattern matches (None: no longest).

    What lets a declaration leave a length bound out when the pattern already implies it (strict
    provider modes take no maxLength). Refuses as compile_pattern does.
    """
    _proved_pattern(text, SCHEMA_ROOT)
    low, high = None, 0
    for branch in _PatternParser(text, SCHEMA_ROOT).parse():
        branch_low, branch_high = _sequence_lengths(branch)
        low = branch_low if low is None else min(low, branch_low)
        high = None if high is None or branch_high is None else max(high, branch_high)
    return low or 0, high


def _sequence_lengths(items: Sequence[_Item]) -> tuple[int, int | None]:
    low, high = 0, 0
    for _, branches, item_low, item_high, _ in items:  # groups do not nest: one level below this loop at most
        if not branches:
            one_low, one_high = 1, 1
        else:
            bounds = [_sequence_lengths(branch) for branch in branches]
            one_low = min(bound[0] for bound in bounds)
            one_high = None if any(bound[1] is None for bound in bounds) else max(bound[1] for bound in bounds)
        low += one_low * item_low
        high = None if high is None or one_high is None or item_high is None else high + one_high * item_high
    return low, high

# -- Formats -----------------------------------------------------------------------------------
# A format is compiled only where its standard gives one exact reading of a text, and the check
# reads it at its narrowest: what every reader of the standard admits (JSON Schema validators,
# Python's date and address parsers, Pydantic), never what only a lenient one does. So ASCII
# digits only; "T" and "Z" upper case; no leap second (60), which most parsers refuse; no year 0;
# an IPv6 address without a zone (%eth0). A host needing more narrows the string with a pattern.
#
# A "uri" is read as what both of its readers admit: RFC 3986's URI (what JSON Schema validators
# check) and the WHATWG URL parser (what browsers, Node, zod's url() and Pydantic's AnyUrl parse),
# which differ at the edges: ports above 65535, hosts that end in a number (0x7f.1 reads as
# 127.0.0.1, 1.2.3.999 fails), punycode labels that do not decode, an empty host, userinfo in a
# file URL, a file URL without "//" (Pydantic's strict mode refuses it) or with a host before a
# drive letter (file://host/C:/x: Node keeps the host, Pydantic drops it), and a "." or ".."
# path segment, which RFC 3986 leaves in the text and a URL parser resolves away (so
# /pub/../etc, or /pub/%2e%2e/etc, is /etc to the tool, and escapes a host's /pub/ pattern).
# So: ASCII, a scheme,
# and either an authority or a path (not both "//"); an authority is a host and an optional port
# of one to five digits up to 65535, never userinfo (user:password@ is where a credential or a
# look-alike host hides); a host is a bracketed IPv6 address, a dotted-quad IPv4 address without
# leading zeros, or letter-digit-hyphen labels of 1 to 63 characters whose last begins with a
# letter and none begins "xn--" (an internationalized host is refused: its punycode is valid
# only as IDNA decodes it); http, https, ws, wss, ftp need a host; a file URL has an authority,
# no port, and no host before a drive letter; no dot segment; percent escapes are whole (%41,
# never %4 or %zz). Which URLs a model may send is no format's to say: a host adds a pattern (an
# overlay keeps the format). Where a tool's request then goes (a redirect) no check of the URL
# can see.
#
# An "email" is read as what all of its readers admit: RFC 5321's mailbox and RFC 5322's
# addr-spec (JSON Schema validators), HTML's form field, zod's email() (a narrow alphabet before
# the @) and Pydantic's EmailStr (email-validator: no reserved domain). So ASCII; a local part of
# 1 to 64 characters, letters, digits and _ ' + -, in dot-separated runs, not ending in '; a domain
# of two or more letter-digit-hyphen labels (1 to 63 characters, none with -- as its third and
# fourth, xn-- included) whose last is 2 to 63 letters and not arpa, invalid, local, localhost,
# onion or test; 254 characters at most. No quoted local part, no comment, no address literal.
#
# Refused, each for its own reason: "uri-reference" and "iri" (a relative reference resolves
# against a base the boundary does not know), "idn-email" and "hostname" (IDNA readings differ),
# and any name not listed here.

_TWO: Final = "[0-9][0-9]"
_DATE: Final = re.compile(f"([0-9]{{4}})-({_TWO})-({_TWO})", re.ASCII)
_TIME: Final = re.compile(f"({_TWO}):({_TWO}):({_TWO})(?:\\.[0-9]+)?(?:Z|[+-]({_TWO}):({_TWO}))", re.ASCII)
_UUID: Final = re.compile("[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}", re.ASCII)
_OCTET: Final = "(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"  # no leading zero: 010 reads as octal elsewhere
_IPV4: Final = re.compile(f"{_OCTET}(?:\\.{_OCTET}){{3}}", re.ASCII)
_DAYS_IN_MONTH: Final = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
# RFC 3986's pchar and the characters a query or a fragment adds; the quantifiers are possessive,
# so a 4,096-character text costs one pass whatever it holds.
_URI_CHARS: Final = r"(?:[A-Za-z0-9._~!$&'()*+,;=:@/?-]|%[0-9A-Fa-f]{2})*+"
_URI_PATH_CHARS: Final = r"(?:[A-Za-z0-9._~!$&'()*+,;=:@/-]|%[0-9A-Fa-f]{2})*+"
_URI: Final = re.compile(
    r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*+):"
    r"(?:(?P<authority>//(?P<host>\[[0-9A-Fa-f:.]++\]|[A-Za-z0-9.-]*+)(?::(?P<port>[0-9]{1,5}+))?+)(?=[/?#]|\Z)"
    f"|(?!//))(?P<path>{_URI_PATH_CHARS})(?:\\?{_URI_CHARS})?+(?:#{_URI_CHARS})?+", re.ASCII)
_DRIVE_LETTER: Final = re.compile(r"/[A-Za-z]:(?:/|\Z)", re.ASCII)  # file://host/C:/x: readers disagree on the host
# A "." or ".." segment, in any spelling the WHATWG parser resolves (%2e is a dot to it).
_DOT_SEGMENT: Final = re.compile(r"(?:\A|/)(?:\.|%2[eE]){1,2}(?=/|\Z)", re.ASCII)
_HOST_LABEL: Final = re.compile(r"(?!xn--)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?", re.ASCII | re.IGNORECASE)
_HOST_NEEDED: Final = frozenset({"http", "https", "ws", "wss", "ftp"})  # WHATWG's special schemes, but file
MAX_URI_PORT: Final = 65535  # a TCP or UDP port: the WHATWG parser refuses a larger one
_EMAIL: Final = re.compile(r"(?P<local>[A-Za-z0-9_'+-]++(?:\.[A-Za-z0-9_'+-]++)*+)@(?P<domain>[A-Za-z0-9.-]++)", re.ASCII)
# Top-level names email-validator refuses as never globally deliverable (RFC 6761, 6762, 7686).
_RESERVED_DOMAINS: Final = frozenset({"arpa", "invalid", "local", "localhost", "onion", "test"})
MAX_EMAIL_LENGTH: Final = 254  # RFC 5321's path limit less its brackets: what email-validator admits


def _is_format_date(text: str) -> bool:
    """RFC 3339 full-date: YYYY-MM-DD, a real day of the proleptic Gregorian calendar, year 1-9999."""
    found = _DATE.fullmatch(text)
    if found is None:
        return False
    year, month, day = int(found[1]), int(found[2]), int(found[3])
    if year == 0 or not 1 <= month <= 12:
        return False
    leap = month == 2 and year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    return 1 <= day <= _DAYS_IN_MONTH[month - 1] + leap


def _is_format_time(text: str) -> bool:
    """RFC 3339 full-time: HH:MM:SS, an optional fraction, and Z or a numeric offset."""
    found = _TIME.fullmatch(text)
    if found is None:
        return False
    hour, minute, second = int(found[1]), int(found[2]), int(found[3])
    if hour > 23 or minute > 59 or second > 59:
        return False
    return found[4] is None or (int(found[4]) <= 23 and int(found[5]) <= 59)


def _is_format_date_time(text: str) -> bool:
    """RFC 3339 date-time: a full-date, "T", a full-time."""
    return len(text) > 11 and text[10] == "T" and _is_format_date(text[:10]) and _is_format_time(text[11:])


def _is_format_ipv6(text: str) -> bool:
    """RFC 4291's text forms (compressed, and with a dotted IPv4 tail), without a zone."""
    if not text.isascii() or "%" in text:
        return False
    try:
        ipaddress.IPv6Address(text)
    except ValueError:  # AddressValueError is a ValueError
        return False
    return True


def _is_format_uri(text: str) -> bool:
    """An absolute URI that RFC 3986 and the WHATWG URL parser both admit (the reading above)."""
    found = _URI.fullmatch(text)
    if found is None:
        return False
    scheme, host, port = found["scheme"].lower(), found["host"], found["port"]
    if _DOT_SEGMENT.search(found["path"]) is not None:
        return False
    if found["authority"] is None:
        return scheme not in _HOST_NEEDED and scheme != "file"
    if port is not None and (int(port) > MAX_URI_PORT or scheme == "file" or not host):
        return False
    if scheme == "file" and host and _DRIVE_LETTER.match(found["path"]) is not None:
        return False
    if not host:
        return scheme not in _HOST_NEEDED
    if host[0] == "[":
        return _is_format_ipv6(host[1:-1])
    if _IPV4.fullmatch(host) is not None:
        return True
    labels = host.split(".")
    return (len(host) <= 253 and labels[-1][:1].isalpha()
            and all(_HOST_LABEL.fullmatch(label) is not None for label in labels))


def _is_format_email(text: str) -> bool:
    """A mailbox that every reader above admits (the reading above)."""
    found = _EMAIL.fullmatch(text)
    if found is None or len(text) > MAX_EMAIL_LENGTH:
        return False
    local, labels = found["local"], found["domain"].split(".")
    return (len(local) <= 64 and local[-1] != "'" and len(labels) >= 2
            and all(_HOST_LABEL.fullmatch(label) is not None and label[2:4] != "--" for label in labels)
            and labels[-1].isalpha() and len(labels[-1]) >= 2 and labels[-1].lower() not in _RESERVED_DOMAINS)


FORMATS: Final[Mapping[str, Callable[[str], bool]]] = MappingProxyType({
    "date": _is_format_date,
    "time": _is_format_time,
    "date-time": _is_format_date_time,
    "uuid": lambda text: _UUID.fullmatch(text) is not None,
    "ipv4": lambda text: _IPV4.fullmatch(text) is not None,
    "ipv6": _is_format_ipv6,
    "uri": _is_format_uri,
    "email": _is_format_email,
})

# -- The compiler ------------------------------------------------------------------------------


def prescan(schema: Any, *, max_bytes: int = MAX_SCHEMA_BYTES, max_depth: int = MAX_SCHEMA_DEPTH,
            max_nodes: int = MAX_SCHEMA_NODES) -> None:
    """The limits, checked on the raw value before compiling: one iterative pass, stopping early."""
    stack: list[tuple[Any, int]] = [(schema, 1)]
    nodes = 1
    text = 0  # characters of strings and keys: the canonical size cannot be smaller
    long_integer = False
    while stack:
        value, depth = stack.pop()
        kind = type(value)
        if kind is dict or kind is list:
            if depth > max_depth:
                raise BoundaryError("SCHEMA_TOO_DEEP", SCHEMA_ROOT)
            nodes += len(value)  # counted before a single member is looked at
            if nodes > max_nodes:
                raise BoundaryError("SCHEMA_TOO_MANY_NODES", SCHEMA_ROOT)
            members = value.items() if kind is dict else enumerate(value)
            for key, child in members:
                if kind is dict:
                    if type(key) is not str:  # a host's Python value: an int key, or a str that claims other text
                        raise BoundaryError("SCHEMA_NOT_PORTABLE", SCHEMA_ROOT)
                    text += len(key)
                stack.append((child, depth + 1))
        elif kind is str:
            text += len(value)
        elif kind is int and not -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
            long_integer = True
        elif kind not in (int, float, bool, type(None)):  # floats may sit in annotations; bounds refuse them
            raise BoundaryError("SCHEMA_NOT_PORTABLE", SCHEMA_ROOT)
        if text > max_bytes:
            raise BoundaryError("SCHEMA_TOO_LARGE", SCHEMA_ROOT)
    if long_integer:
        # No canonical text to measure (the walk's own bounds hold the compiler's work): the
        # compiler names the keyword that holds it (a bound, an enum), and compile_schema refuses
        # one anywhere else (SCHEMA_NOT_PORTABLE).
        return
    try:
        size = len(canonical_json(schema))
    except ValueError:  # a lone surrogate (UnicodeEncodeError), or NaN from a caller without the strict decoder
        raise BoundaryError("SCHEMA_NOT_PORTABLE", SCHEMA_ROOT) from None
    if size > max_bytes:
        raise BoundaryError("SCHEMA_TOO_LARGE", SCHEMA_ROOT)


@dataclass(frozen=True, slots=True)
class Bounds:
    """The host's bounds where a schema is silent, and the ceilings of what it declares: by
    default the same (a declared maxLength of 10,000 compiles as 4,096); None is that default."""

    max_length: int = DEFAULT_MAX_LENGTH
    max_items: int = DEFAULT_MAX_ITEMS
    max_entries: int = DEFAULT_MAX_ENTRIES
    length_ceiling: int | None = None
    items_ceiling: int | None = None
    entries_ceiling: int | None = None

    def ceilings(self) -> "Bounds":
        """The same bounds with each ceiling as its default too: what a schema that is silent
        admits at most, which is what a narrowing proof holds a host's rule to."""
        return Bounds(self.length_ceiling or self.max_length, self.items_ceiling or self.max_items,
                      self.entries_ceiling or self.max_entries)


# A tool output's declared bounds may reach what its own limits can hold (its bytes and values,
# which a host raises per tool up to these ceilings, and which are checked first); where its
# schema is silent, the defaults hold as on the input side.
OUTPUT_BOUNDS: Final = Bounds(length_ceiling=MAX_OUTPUT_BYTES_CEILING, items_ceiling=MAX_OUTPUT_NODES_CEILING,
                              entries_ceiling=MAX_OUTPUT_NODES_CEILING)


class _Compiler:
    """A work list: each entry compiles one schema node into a preassigned slot of the table."""

    def __init__(self, root: dict[str, Any], bounds: Bounds) -> None:
        self.root = root
        self.bounds = bounds
        self.rules: list[Rule | None] = []
        self.paths: list[str] = []  # where each rule was declared, for the host-bound record
        self.work: deque[tuple[dict[str, Any], str, int]] = deque()  # first in, first out: declaration order
        self.definitions = self.read_definitions()
        self.definition_slots: dict[tuple[str, str], int] = {}
        self.definition_order: list[int] = []
        self.nullable_unions: list[tuple[int, str]] = []  # (branch slot, place): a oneOf-or-anyOf [T, null]

    def read_definitions(self) -> dict[str, tuple[dict[str, Any], list[str]]]:
        found: dict[str, tuple[dict[str, Any], list[str]]] = {}
        for keyword in DEFINITION_PREFIXES.values():
            if keyword not in self.root:
                continue
            table = self.root[keyword]
            if type(table) is not dict:
                raise BoundaryError("SCHEMA_MALFORMED", f"{SCHEMA_ROOT}.{keyword}")
            if len(table) > MAX_DEFINITIONS:
                raise BoundaryError("SCHEMA_TOO_MANY_PROPERTIES", f"{SCHEMA_ROOT}.{keyword}")
            names = list(table)
            for index, name in enumerate(names):
                _check_name(name, f"{SCHEMA_ROOT}.{keyword}[{index}]")
            found[keyword] = (table, names)
        return found

    def run(self) -> tuple[Rule, ...]:
        self.child(self.root, SCHEMA_ROOT, root=True)  # always slot 0, a bare root $ref too
        while self.work:
            raw, at, slot = self.work.popleft()
            self.rules[slot] = self.compile_node(raw, at, root=slot == 0 and at == SCHEMA_ROOT)
        _route_unions(self.rules, self.paths, self.nullable_unions)  # every slot is filled by now
        rules = tuple(self.rules)
        _refuse_cycles(rules)
        _check_unique_items(rules)
        return rules

    # -- slots and references ----------------------------------------------------------------

    def slot(self, raw: Any, at: str) -> int:
        self.rules.append(None)
        self.paths.append(at)
        self.work.append((raw, at, len(self.rules) - 1))
        return len(self.rules) - 1

    def built(self, rule: Rule, at: str) -> int:
        """The slot of a rule built here, not from a work entry (a union behind its nullable rule)."""
        self.rules.append(rule)
        self.paths.append(at)
        return len(self.rules) - 1

    def child(self, raw: Any, at: str, *, root: bool = False) -> int:
        """The slot of a subschema: a reference's definition (compiled once), or a new slot."""
        if type(raw) is not dict:
            raise BoundaryError("SCHEMA_TYPE" if type(raw) is bool else "SCHEMA_MALFORMED", at)
        seen: set[tuple[str, str]] = set()
        while "$ref" in raw:
            _check_keywords(raw, at, allowed=frozenset({"$ref"}), root=root, sibling_code="SCHEMA_REF_SIBLING")
            key, raw, at = self.resolve(raw["$ref"], at)
            if key in self.definition_slots:
                return self.definition_slots[key]
            if key in seen:
                raise BoundaryError("SCHEMA_REF_RECURSIVE", at)
            seen.add(key)
            root = False
            if type(raw) is not dict:
                raise BoundaryError("SCHEMA_TYPE" if type(raw) is bool else "SCHEMA_MALFORMED", at)
        slot = self.slot(raw, at)
        for key in seen:
            self.definition_slots[key] = slot
        if seen:
            self.definition_order.append(slot)
        return slot

    def resolve(self, ref: Any, at: str) -> tuple[tuple[str, str], Any, str]:
        if type(ref) is not str:
            raise BoundaryError("SCHEMA_MALFORMED", at)
        for prefix, keyword in DEFINITION_PREFIXES.items():
            if ref.startswith(prefix):
                name = ref[len(prefix):]
                if any(char in name for char in "/~%") or keyword not in self.definitions:
                    raise BoundaryError("SCHEMA_REF_UNKNOWN" if keyword not in self.definitions else
                                        "SCHEMA_REF_REMOTE", at)
                table, names = self.definitions[keyword]
                if name not in table:
                    raise BoundaryError("SCHEMA_REF_UNKNOWN", at)
                return (keyword, name), table[name], f"{SCHEMA_ROOT}.{keyword}[{names.index(name)}]"
        raise BoundaryError("SCHEMA_REF_REMOTE", at)

    # -- one node -----------------------------------------------------------------------------

    def compile_node(self, raw: dict[str, Any], at: str, *, root: bool) -> Rule:
        description = raw.get("description") if type(raw.get("description")) is str else None
        keyword = next((keyword for keyword in UNIONS if keyword in raw), None)
        if keyword is not None:
            return self.compile_union(raw, keyword, at, root=root, description=description)
        declared = raw.get("type")
        if type(declared) is list and sum(name != "null" for name in declared) > 1:
            return self.compile_type_list(raw, declared, at, root=root, description=description)
        kind, nullable = _schema_type(raw, at)
        _check_keywords(raw, at, allowed=TYPE_KEYWORDS[kind] | {"type"}, root=root, sibling_code="SCHEMA_KEYWORD")
        if nullable:  # "type": [T, "null"]: the same node, without null, behind a nullable rule
            inner = {key: value for key, value in raw.items() if key != "type" and key not in ROOT_ONLY}
            inner["type"] = kind
            if "enum" in raw or "const" in raw:
                # An enum and a const together admit what both admit: their intersection, null
                # included only when both admit it.
                allowed = _allowed_choices(raw, at)
                inner.pop("const", None)
                inner["enum"] = [choice for choice in allowed if choice is not None]
                if None not in allowed:
                    if not inner["enum"]:
                        raise BoundaryError("SCHEMA_ENUM", at)  # nothing is admitted at all
                    return self.compile_node(inner, at, root=root)  # the choices leave null out
                if not inner["enum"]:
                    raise BoundaryError("SCHEMA_NULL", at)
            return NullableRule(self.slot(inner, at), description)
        return _TYPE_COMPILERS[kind](self, raw, at, description)

    def compile_type_list(self, raw: dict[str, Any], names: list[Any], at: str, *, root: bool,
                          description: str | None) -> Rule:
        """"type": [T1, T2, ...] (zod-to-json-schema's spelling of a union of types): what JSON
        Schema means by it, an anyOf of one branch per type. Each branch takes the node's keywords
        its type reads (a type ignores the others: maxLength says nothing of a number) and the
        node's choices of its type; a type none of the choices is drops out, "null" makes the
        union nullable. Every branch is placed at the node itself, where its keywords are written."""
        if (any(type(name) is not str or (name not in TYPE_KEYWORDS and name != "null") for name in names)
                or len(set(names)) != len(names)):
            raise BoundaryError("SCHEMA_TYPE", at)
        kinds = [name for name in names if name != "null"]
        _check_keywords(raw, at, allowed=frozenset({"type"}).union(*(TYPE_KEYWORDS[kind] for kind in kinds)),
                        root=root, sibling_code="SCHEMA_KEYWORD")
        choices = _allowed_choices(raw, at) if "enum" in raw or "const" in raw else None
        branches: list[dict[str, Any]] = []
        for kind in kinds:
            branch = {key: value for key, value in raw.items() if key in TYPE_KEYWORDS[kind] and key not in _CHOICE_KEYS}
            branch["type"] = kind
            if choices is not None:
                mine = [value for value in choices if type(value) in _KIND_TYPES[kind]]
                if not mine:
                    continue  # no choice is of this type: no value of it is admitted
                if kind in _CONTAINER_KINDS:
                    raise BoundaryError("SCHEMA_ENUM", at)  # an object or array choice: no exact rule holds one
                branch["enum"] = mine
            branches.append(branch)
        nullable = "null" in names and (choices is None or None in choices)
        if not branches:
            raise BoundaryError("SCHEMA_NULL" if nullable else "SCHEMA_ENUM", at)
        if len(branches) == 1 and not nullable:
            return self.compile_node(branches[0], at, root=False)
        if nullable:
            branches.append({"type": "null"})
        return self.compile_union({"anyOf": branches}, "anyOf", at, root=False, description=description,
                                  placed_at_node=True)

    def compile_union(self, raw: dict[str, Any], keyword: str, at: str, *, root: bool,
                      description: str | None, placed_at_node: bool = False) -> Rule:
        """anyOf / oneOf: null branches become a nullable rule around the others; two or more
        others become a union, whose branches are proved apart once they are compiled.
        placed_at_node: the branches were written in the node itself (a type list), and their
        faults are placed there."""
        _check_keywords(raw, at, allowed=frozenset({keyword, DISCRIMINATOR}), root=root,
                        sibling_code="SCHEMA_COMBINATOR")
        branches = raw[keyword]
        if type(branches) is not list or not branches:
            raise BoundaryError("SCHEMA_MALFORMED", f"{at}.{keyword}")
        if len(branches) > MAX_UNION_BRANCHES:
            raise BoundaryError("SCHEMA_COMBINATOR", f"{at}.{keyword}")
        nulls = sum(map(_is_null_schema, branches))
        others = [(position, branch) for position, branch in enumerate(branches) if not _is_null_schema(branch)]
        if not others:
            raise BoundaryError("SCHEMA_NULL", at)
        if nulls > 1 and keyword == "oneOf":
            raise BoundaryError("SCHEMA_COMBINATOR", f"{at}.{keyword}")  # null matches two branches: never admitted
        slots = tuple(self.child(branch, at if placed_at_node else f"{at}.{keyword}[{position}]")
                      for position, branch in others)
        if len(slots) == 1 and nulls:
            # Its branch may not admit null as well: under oneOf null would then match twice
            # (anyOf means the same either way); UnionRule's routing checks that too.
            self.nullable_unions.append((slots[0], at))
            return NullableRule(slots[0], description)
        union = UnionRule(slots, keyword == "oneOf", description)
        return NullableRule(self.built(union, at), description) if nulls else union

    def compile_string(self, raw: dict[str, Any], at: str, description: str | None) -> StringRule:
        low = _count(raw, "minLength", 0, at)
        declared = _count(raw, "maxLength", None, at)
        high, source = _host_bound(declared, self.bounds.max_length, self.bounds.length_ceiling)
        if low > high:
            raise BoundaryError("SCHEMA_BOUNDS", f"{at}.minLength")
        choices = _choices(raw, (str,), at)
        pattern = raw.get("pattern")
        regex = None if "pattern" not in raw else _proved_pattern(pattern, f"{at}.pattern")
        form = raw.get("format")
        if form is not None and (type(form) is not str or form not in FORMATS):
            raise BoundaryError("SCHEMA_FORMAT", f"{at}.format")
        return StringRule(low, high, source, choices, pattern, regex, description, form)

    def compile_integer(self, raw: dict[str, Any], at: str, description: str | None) -> IntegerRule:
        low = max(_bound(raw, "minimum", -MAX_SAFE_INTEGER, 0, at),
                  _bound(raw, "exclusiveMinimum", -MAX_SAFE_INTEGER - 1, 1, at))
        high = min(_bound(raw, "maximum", MAX_SAFE_INTEGER, 0, at),
                   _bound(raw, "exclusiveMaximum", MAX_SAFE_INTEGER + 1, -1, at))
        if low > high:
            raise BoundaryError("SCHEMA_BOUNDS", at)
        step = raw.get("multipleOf")
        if step is not None and (type(step) is not int or not 1 <= step <= MAX_SAFE_INTEGER):
            raise BoundaryError("SCHEMA_BOUNDS", f"{at}.multipleOf")
        choices = _choices(raw, (int,), at)
        if choices is not None and any(not -MAX_SAFE_INTEGER <= choice <= MAX_SAFE_INTEGER for choice in choices):
            raise BoundaryError("SCHEMA_ENUM", at)
        return IntegerRule(low, high, step, choices, description)

    def compile_number(self, raw: dict[str, Any], at: str, description: str | None) -> NumberRule:
        low, low_open = _number_bound(raw, "minimum", "exclusiveMinimum", at, lower=True)
        high, high_open = _number_bound(raw, "maximum", "exclusiveMaximum", at, lower=False)
        if low is not None and high is not None and (low > high or (low == high and (low_open or high_open))):
            raise BoundaryError("SCHEMA_BOUNDS", at)  # no number lies between them
        step = raw.get("multipleOf")
        if step is not None:
            if not is_portable_number(step) or not step > 0:
                raise BoundaryError("SCHEMA_BOUNDS", f"{at}.multipleOf")
            if Fraction(step) != Fraction(number_text(step)):
                # 0.1 is read as a double a little above one tenth, of which 0.3 is no exact
                # multiple: validators answer by their arithmetic, so no answer is refused here.
                raise BoundaryError("SCHEMA_NUMBER", f"{at}.multipleOf")
        choices = _choices(raw, (int, float), at)
        if choices is not None and not all(map(is_portable_number, choices)):
            raise BoundaryError("SCHEMA_ENUM", at)
        return NumberRule(low, low_open, high, high_open, step, choices, description)

    def compile_boolean(self, raw: dict[str, Any], at: str, description: str | None) -> BooleanRule:
        return BooleanRule(_choices(raw, (bool,), at), description)

    def compile_object(self, raw: dict[str, Any], at: str, description: str | None) -> ObjectRule | MapRule:
        values = raw.get("additionalProperties", False)
        if type(values) is dict and "properties" not in raw and "required" not in raw:
            return self.compile_map(raw, values, at, description)
        if values is not False or "minProperties" in raw or "maxProperties" in raw:
            raise BoundaryError("SCHEMA_OPEN_OBJECT", at)
        declared = raw.get("properties", {})
        if type(declared) is not dict:
            raise BoundaryError("SCHEMA_MALFORMED", f"{at}.properties")
        if len(declared) > MAX_PROPERTIES:
            raise BoundaryError("SCHEMA_TOO_MANY_PROPERTIES", f"{at}.properties")
        properties = []
        for position, (name, child) in enumerate(declared.items()):
            child_at = f"{at}.properties[{position}]"
            _check_name(name, child_at)
            properties.append((name, self.child(child, child_at)))
        required = raw.get("required", [])
        if (type(required) is not list or any(type(name) is not str or name not in declared for name in required)
                or len(set(required)) != len(required)):
            raise BoundaryError("SCHEMA_REQUIRED", f"{at}.required")
        return ObjectRule(tuple(properties), frozenset(required), description)

    def compile_map(self, raw: dict[str, Any], values: dict[str, Any], at: str, description: str | None) -> MapRule:
        """A map: any string keys (no propertyNames), every value under one schema, a bounded count."""
        low = _count(raw, "minProperties", 0, at)
        high, source = _host_bound(_count(raw, "maxProperties", None, at), self.bounds.max_entries,
                                   self.bounds.entries_ceiling)
        if low > high:
            raise BoundaryError("SCHEMA_BOUNDS", f"{at}.minProperties")
        return MapRule(self.child(values, f"{at}.additionalProperties"), low, high, source, description)

    def compile_array(self, raw: dict[str, Any], at: str, description: str | None) -> ArrayRule:
        items = raw.get("items")
        if type(items) is list:
            raise BoundaryError("SCHEMA_TUPLE", f"{at}.items")
        if type(items) is not dict:
            raise BoundaryError("SCHEMA_ITEMS", at)
        low = _count(raw, "minItems", 0, at)
        high, source = _host_bound(_count(raw, "maxItems", None, at), self.bounds.max_items,
                                   self.bounds.items_ceiling)
        if low > high:
            raise BoundaryError("SCHEMA_BOUNDS", f"{at}.minItems")
        unique = raw.get("uniqueItems", False)
        if type(unique) is not bool:
            raise BoundaryError("SCHEMA_MALFORMED", f"{at}.uniqueItems")
        return ArrayRule(self.child(items, f"{at}.items"), low, high, source, unique, description)


_TYPE_COMPILERS: Final = MappingProxyType({
    "string": _Compiler.compile_string,
    "integer": _Compiler.compile_integer,
    "number": _Compiler.compile_number,
    "boolean": _Compiler.compile_boolean,
    "object": _Compiler.compile_object,
    "array": _Compiler.compile_array,
})


def _check_keywords(raw: dict[str, Any], at: str, *, allowed: frozenset[str], root: bool, sibling_code: str) -> None:
    """Every key is an annotation, allowed here, or refused by name; never named in the message."""
    for key in raw:
        if key in allowed or key in ANNOTATIONS or (root and key in ROOT_ONLY):
            continue
        code = REFUSED_KEYWORDS.get(key)
        if code is None and key == "anyOf":
            code = "SCHEMA_COMBINATOR"
        raise BoundaryError(code or (sibling_code if _constrains(key) else "SCHEMA_KEYWORD"), at)


def _constrains(key: str) -> bool:
    return any(key in keywords for keywords in TYPE_KEYWORDS.values()) or key == "type"


def _check_name(name: str, at: str) -> None:
    if not 1 <= len(name) <= MAX_NAME_LENGTH:
        raise BoundaryError("SCHEMA_NAME", at)


def _is_null_schema(branch: Any) -> bool:
    return (type(branch) is dict and branch.get("type") == "null" and type(branch["type"]) is str
            and all(key == "type" or key in ANNOTATIONS for key in branch))


def _schema_type(raw: dict[str, Any], at: str) -> tuple[str, bool]:
    """(kind, nullable) from "type", or from the values of an enum/const without one."""
    declared = raw.get("type")
    if declared is None:
        if "enum" not in raw and "const" not in raw:
            # No type: a keyword refused by name says why better than the missing type does
            # (a oneOf union, an allOf, a format), in the node's own key order.
            refused = [REFUSED_KEYWORDS[key] for key in raw if key in REFUSED_KEYWORDS]
            raise BoundaryError(refused[0] if refused else "SCHEMA_TYPE", at)
        values = _raw_choices(raw, at)
        kinds = {SCALAR_KINDS.get(type(value), "") for value in values if value is not None}
        if not kinds and values:
            raise BoundaryError("SCHEMA_NULL", at)  # null alone: only a nullable form of a type
        if len(kinds) != 1 or "" in kinds:
            raise BoundaryError("SCHEMA_TYPE", at)
        return kinds.pop(), None in values
    names = [declared] if type(declared) is str else declared
    if type(names) is not list or not names or any(type(name) is not str for name in names):
        raise BoundaryError("SCHEMA_TYPE", at)
    nullable = "null" in names
    others = [name for name in names if name != "null"]
    if len(others) != 1 or len(names) != len(set(names)):
        raise BoundaryError("SCHEMA_NULL" if nullable and not others else "SCHEMA_TYPE", at)
    kind = others[0]
    if kind not in TYPE_KEYWORDS:
        raise BoundaryError("SCHEMA_TYPE", at)
    return kind, nullable


_CHOICE_KEYS: Final = frozenset({"enum", "const"})
# The Python types of the decoded values each JSON Schema type admits, as the rules check them:
# never a bool for a number, never 1.0 for an integer.
_KIND_TYPES: Final[Mapping[str, tuple[type, ...]]] = MappingProxyType({
    "string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,), "object": (dict,),
    "array": (list,),
})
_CONTAINER_KINDS: Final = frozenset({"object", "array"})


def _allowed_choices(raw: dict[str, Any], at: str) -> list[Any]:
    """The values an enum and a const admit together, in the enum's order; JSON equality (1 is
    1.0, never true), through canonical text, which the prescan has shown every value has."""
    values = _enum_list(raw, at) if "enum" in raw else [raw["const"]]
    if "enum" in raw and "const" in raw:
        wanted = canonical_text(raw["const"])
        values = [value for value in values if canonical_text(value) == wanted]
    return values


def _raw_choices(raw: dict[str, Any], at: str) -> list[Any]:
    if "const" in raw:
        return [raw["const"]] + (_enum_list(raw, at) if "enum" in raw else [])
    return _enum_list(raw, at)


def _enum_list(raw: dict[str, Any], at: str) -> list[Any]:
    values = raw["enum"]
    if type(values) is not list or not values:
        raise BoundaryError("SCHEMA_ENUM", f"{at}.enum")
    if len(values) > MAX_ENUM:
        raise BoundaryError("SCHEMA_ENUM_TOO_LARGE", f"{at}.enum")
    return values


def _choices(raw: dict[str, Any], kinds: tuple[type, ...], at: str) -> frozenset[Any] | None:
    """An enum and a const together mean their intersection; every value of an exact type."""
    if "enum" not in raw and "const" not in raw:
        return None
    enum = _enum_list(raw, at) if "enum" in raw else None
    const = [raw["const"]] if "const" in raw else None
    for values in (enum, const):
        if values is not None and any(type(value) not in kinds for value in values):
            raise BoundaryError("SCHEMA_ENUM", at)
    if enum is not None and len(set(enum)) != len(enum):
        raise BoundaryError("SCHEMA_ENUM", f"{at}.enum")
    chosen = frozenset(enum if enum is not None else const)  # type: ignore[arg-type]
    if const is not None:
        chosen &= frozenset(const)
    if not chosen:
        raise BoundaryError("SCHEMA_ENUM", at)
    return chosen


def _count(raw: dict[str, Any], keyword: str, default: int | None, at: str) -> Any:
    if keyword not in raw:
        return default
    value = raw[keyword]
    if type(value) is not int or not 0 <= value <= MAX_SAFE_INTEGER:
        raise BoundaryError("SCHEMA_BOUNDS", f"{at}.{keyword}")
    return value


def _host_bound(declared: int | None, default: int, ceiling: int | None) -> tuple[int, str]:
    if declared is None:
        return default, "host"
    if declared > (ceiling or default):
        return ceiling or default, "host"
    return declared, "schema"


def _bound(raw: dict[str, Any], keyword: str, default: int, shift: int, at: str) -> int:
    """An inclusive integer bound; an exclusive one moves by one. Floats and bools are refused."""
    if keyword not in raw:
        return default
    value = raw[keyword]
    if type(value) is not int or not -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
        raise BoundaryError("SCHEMA_BOUNDS", f"{at}.{keyword}")
    return value + shift


def _number_bound(raw: dict[str, Any], inclusive: str, exclusive: str, at: str, *,
                  lower: bool) -> tuple[int | float | None, bool]:
    """The tighter of a number's inclusive and exclusive bound on one side, as (value, exclusive);
    (None, False) when neither is given. At a tie the exclusive one is the tighter."""
    tightest: tuple[int | float, bool] | None = None
    for keyword, is_open in ((inclusive, False), (exclusive, True)):
        if keyword not in raw:
            continue
        value = raw[keyword]
        if not is_portable_number(value):
            raise BoundaryError("SCHEMA_BOUNDS", f"{at}.{keyword}")
        if tightest is None or (value > tightest[0] if lower else value < tightest[0]) or (
                value == tightest[0] and is_open):
            tightest = (value, is_open)
    return tightest or (None, False)


def is_portable_number(value: Any) -> bool:
    """A JSON number every peer reads alike: a safe integer or a portable float (never a bool)."""
    kind = type(value)
    if kind is int:
        return -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER
    return kind is float and is_portable_float(value)


def _children(rule: Rule) -> tuple[int, ...]:
    if type(rule) is ObjectRule:
        return tuple(index for _, index in rule.properties)
    if type(rule) is ArrayRule:
        return (rule.items,)
    if type(rule) is NullableRule:
        return (rule.inner,)
    if type(rule) is MapRule:
        return (rule.values,)
    if type(rule) is UnionRule:
        return rule.branches
    return ()


# A union's branches by the JSON type they admit (integer and number are one: 1 is both), and the
# Python types of decoded values each JSON type routes.
_UNION_KINDS: Final[Mapping[type, str]] = MappingProxyType({
    StringRule: "string", IntegerRule: "number", NumberRule: "number", BooleanRule: "boolean",
    ObjectRule: "object", MapRule: "object", ArrayRule: "array",
})
_KIND_VALUES: Final[Mapping[str, tuple[type, ...]]] = MappingProxyType({
    "string": (str,), "number": (int, float), "boolean": (bool,), "object": (dict,), "array": (list,),
})
_SCALAR_KINDS: Final = frozenset({"string", "number", "boolean"})


def _route_unions(rules: list[Any], paths: Sequence[str], nullable: Sequence[tuple[int, str]]) -> None:
    """Prove each union's branches apart and fill its dispatch, in place; refuse what cannot be.

    Told apart: each JSON type by one branch, or objects by a tag (a property every object branch
    requires, a string whose choices no other branch shares). Two scalar branches of one type only
    under anyOf, where trying each is exactly what anyOf means; never under oneOf, whose count of
    matching branches the compiled checks, narrower than the schema's, would get wrong.
    """
    for slot, at in nullable:  # [T, null] where T admits null too: oneOf admits it nowhere
        if type(rules[slot]) is NullableRule:
            raise BoundaryError("SCHEMA_COMBINATOR", at)
    for slot, rule in enumerate(rules):
        if type(rule) is not UnionRule:
            continue
        at = paths[slot]
        groups: dict[str, list[int]] = {}
        for branch in rule.branches:
            kind = _UNION_KINDS.get(type(rules[branch]))
            if kind is None:  # a nullable branch (null belongs to a null branch), or a union in a union
                raise BoundaryError("SCHEMA_COMBINATOR", at)
            groups.setdefault(kind, []).append(branch)
        tag, tags = None, {}
        for kind, members in groups.items():
            if len(members) == 1:
                continue
            if kind == "object":
                tag, tags = _union_tag(members, rules, at)
            elif kind not in _SCALAR_KINDS or rule.exclusive:
                raise BoundaryError("SCHEMA_COMBINATOR", at)
        routes = {value_type: tuple((branch, rules[branch]) for branch in members)
                  for kind, members in groups.items() for value_type in _KIND_VALUES[kind]}
        rules[slot] = replace(rule, routes=MappingProxyType(routes), tag=tag, tags=MappingProxyType(tags))


def _union_tag(members: Sequence[int], rules: list[Any], at: str) -> tuple[str, dict[str, int]]:
    """The first property, in the first branch's order, that tells every object branch apart: a
    string with choices in each, no choice in two. A branch that leaves it optional (pydantic's
    Literal tag with a default) is made to require it, in place: the dispatch refuses an object
    without its tag anyway, as pydantic does, and the rule and its emitted schema then say so."""
    first = rules[members[0]]
    for name, _ in first.properties if type(first) is ObjectRule else ():
        tags: dict[str, int] = {}
        for member in members:
            rule = rules[member]
            entry = rule.index.get(name) if type(rule) is ObjectRule else None
            choices = rules[entry[1]].choices if entry and type(rules[entry[1]]) is StringRule else None
            if choices is None or not tags.keys().isdisjoint(choices):
                break
            tags.update(dict.fromkeys(choices, member))
        else:
            for member in members:
                if name not in rules[member].required:
                    rules[member] = replace(rules[member], required=rules[member].required | {name})
            return name, tags
    raise BoundaryError("SCHEMA_COMBINATOR", at)


def _refuse_cycles(rules: Sequence[Rule]) -> None:
    """An iterative depth-first search over the rule graph: any cycle is a recursive $ref."""
    state = [0] * len(rules)  # 0 unseen, 1 on the path, 2 done
    for start in range(len(rules)):
        if state[start]:
            continue
        stack = [(start, iter(_children(rules[start])))]
        state[start] = 1
        while stack:
            node, pending = stack[-1]
            child = next(pending, None)
            if child is None:
                state[node] = 2
                stack.pop()
            elif state[child] == 1:
                raise BoundaryError("SCHEMA_REF_RECURSIVE", SCHEMA_ROOT)
            elif state[child] == 0:
                state[child] = 1
                stack.append((child, iter(_children(rules[child]))))


def _check_unique_items(rules: Sequence[Rule]) -> None:
    """uniqueItems only over scalars (or nullable scalars): their equality is exact and cheap."""
    for rule in rules:
        if type(rule) is ArrayRule and rule.unique:
            items = rules[rule.items]
            if type(items) is NullableRule:
                items = rules[items.inner]
            if not isinstance(items, _SCALAR_RULES):
                raise BoundaryError("SCHEMA_KEYWORD", SCHEMA_ROOT)


def compile_schema(schema: Any, *, bounds: Bounds = Bounds(), require_object: bool = True) -> CompiledSchema:
    """Compile an untrusted schema (a decoded JSON value) into an exact check, or refuse it (scope schema)."""
    prescan(schema)
    if type(schema) is not dict:
        raise BoundaryError("SCHEMA_ROOT" if require_object else "SCHEMA_MALFORMED", SCHEMA_ROOT)
    compiler = _Compiler(schema, bounds)
    rules = compiler.run()
    if require_object and type(rules[0]) is not ObjectRule:
        raise BoundaryError("SCHEMA_ROOT", SCHEMA_ROOT)
    try:
        source_sha256 = canonical_sha256(schema)
    except ValueError:  # an integer beyond the safe range where no rule reads it (an annotation)
        raise BoundaryError("SCHEMA_NOT_PORTABLE", SCHEMA_ROOT) from None
    return CompiledSchema(rules, tuple(compiler.definition_order), source_sha256, tuple(compiler.paths))


# -- Compiled schemas: check, admits, emit -----------------------------------------------------


@dataclass(frozen=True, slots=True)
class CompiledSchema:
    """The exact check of one schema: rules[0] is the root; shared definitions are shared rules."""

    rules: tuple[Rule, ...]
    definitions: tuple[int, ...]  # slots that were reached through a $ref, in discovery order
    source_sha256: str  # SHA-256 of the canonical JSON of the schema as the server sent it
    paths: tuple[str, ...]  # where each rule was declared in that schema (schema.properties[0]...)
    # An object of scalar properties (every shipped contract, most tool inputs) is checked without
    # the work stack: name -> (its value check, its rule, its place), the places rendered once.
    _flat: Mapping[str, tuple[Any, Rule, str]] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        root = self.rules[0]
        flat = None
        if type(root) is ObjectRule and all(type(self.rules[index]) in _SCALAR_RULES for _, index in root.properties):
            flat = MappingProxyType({
                name: (_RULE_CHECKS[type(self.rules[index])], self.rules[index], f"{VALUE_ROOT}.properties[{position}]")
                for position, (name, index) in enumerate(root.properties)})
        object.__setattr__(self, "_flat", flat)

    def secret_field(self) -> str | None:
        """Where the first declared property whose name reads as a secret (is_secret_key) is
        written (schema.properties[1]...), or None. As an output contract, every output that held
        it would be withheld: a contracts file may not declare one (CONTRACTS_SECRET_FIELD)."""
        for index, rule in enumerate(self.rules):
            if type(rule) is ObjectRule:
                for position, (name, _) in enumerate(rule.properties):
                    if is_secret_key(name):
                        return f"{self.paths[index]}.properties[{position}]"
        return None

    def check(self, value: Any) -> None:
        """Refuse (a value-scope code, at) unless the schema admits value exactly; iterative."""
        flat = self._flat
        if flat is not None and type(value) is dict:
            # The same checks in the same order as the stack below: every key first, then the
            # required names, then each value, the last one first (the stack pops it first).
            for key in value:
                if type(key) is not str or key not in flat:
                    raise _refuse("VALUE_FIELDS", VALUE_ROOT)
            if not self.rules[0].required <= value.keys():
                raise _refuse("VALUE_FIELDS", VALUE_ROOT)
            for key, item in reversed(value.items()):
                check, rule, at = flat[key]
                check(rule, item, at, None)
            return
        rules = self.rules
        stack: list[tuple[int, Any, Any]] = [(0, value, VALUE_ROOT)]
        while stack:
            index, item, at = stack.pop()
            rule = rules[index]
            _RULE_CHECKS[type(rule)](rule, item, at, stack)

    def admits(self, value: Any) -> bool:
        try:
            self.check(value)
        except BoundaryError as refusal:
            if refusal.scope != "value":
                raise
            return False
        return True

    def host_bounds(self) -> tuple[str, ...]:
        """Where the host bounded what the schema left open (or bounded above the host's ceiling).

        An enum needs no length bound: its choices are the bound, so it is not listed.
        """
        found = []
        for rule, path in zip(self.rules, self.paths):
            if type(rule) is StringRule and rule.max_length_from == "host" and rule.choices is None:
                found.append(f"{path}.maxLength")
            elif type(rule) is ArrayRule and rule.max_items_from == "host":
                found.append(f"{path}.maxItems")
            elif type(rule) is MapRule and rule.max_entries_from == "host":
                found.append(f"{path}.maxProperties")
        return tuple(found)

    def to_schema(self) -> dict[str, Any]:
        """The normalized JSON Schema (2020-12) of exactly what this check admits."""
        shared = [slot for slot in self.definitions if slot != 0]  # a bare root $ref is emitted inline
        names = {slot: f"d{position}" for position, slot in enumerate(shared)}
        schema = _emit_rule(self.rules, 0, names, top=True)
        if names:
            schema["$defs"] = {names[slot]: _emit_rule(self.rules, slot, names, top=True) for slot in self.definitions
                               if slot in names}
        return schema


def _refuse(code: str, at: Any) -> BoundaryError:
    """The refusal, its ``at`` rendered only now: a checked value's place is a chain of
    (parent, keyword, index) tuples until then, since formatting a path per value costs more
    than the check itself."""
    parts = []
    while type(at) is tuple:
        at, keyword, position = at
        parts.append(f"{keyword}{position}]")
    return BoundaryError(code, at + "".join(reversed(parts)))


def _rule_string(rule: StringRule, value: Any, at: Any, _stack: list[Any]) -> None:
    if type(value) is not str:
        raise _refuse("VALUE_TYPE", at)
    if not (value.isascii() or is_portable_text(value)):  # the ASCII test first: no call
        raise _refuse("VALUE_NOT_PORTABLE", at)
    if not rule.min_length <= len(value) <= rule.max_length:
        raise _refuse("VALUE_LENGTH", at)
    if rule.choices is not None and value not in rule.choices:
        raise _refuse("VALUE_ENUM", at)
    regex = rule.regex
    if regex is not None and regex.fullmatch(value) is None:
        raise _refuse("VALUE_PATTERN", at)
    if rule.format is not None and not FORMATS[rule.format](value):
        raise _refuse("VALUE_FORMAT", at)


def _rule_integer(rule: IntegerRule, value: Any, at: Any, _stack: list[Any]) -> None:
    if type(value) is not int:  # bool, float (1.0) and int subclasses are not integers here
        raise _refuse("VALUE_TYPE", at)
    if not -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
        raise _refuse("VALUE_NOT_PORTABLE", at)
    if not rule.minimum <= value <= rule.maximum or (rule.multiple_of is not None and value % rule.multiple_of):
        raise _refuse("VALUE_RANGE", at)
    if rule.choices is not None and value not in rule.choices:
        raise _refuse("VALUE_ENUM", at)


def _rule_number(rule: NumberRule, value: Any, at: Any, _stack: list[Any]) -> None:
    kind = type(value)
    if kind is not int and kind is not float:  # bool is no number here, nor an int or float subclass
        raise _refuse("VALUE_TYPE", at)
    if not is_portable_number(value):
        raise _refuse("VALUE_NOT_PORTABLE", at)
    if not _number_within(rule, value) or (
            rule.multiple_of is not None and Fraction(value) % Fraction(rule.multiple_of)):  # exact, as rationals
        raise _refuse("VALUE_RANGE", at)
    if rule.choices is not None and value not in rule.choices:  # 1 and 1.0 are one number
        raise _refuse("VALUE_ENUM", at)


def _number_within(rule: NumberRule, value: int | float) -> bool:
    # Python compares an int with a float exactly, as a peer comparing two doubles does: every
    # integer here is a safe one, which a double holds exactly.
    if rule.minimum is not None and (value < rule.minimum or (rule.minimum_exclusive and value == rule.minimum)):
        return False
    return rule.maximum is None or not (value > rule.maximum or (rule.maximum_exclusive and value == rule.maximum))


def _rule_boolean(rule: BooleanRule, value: Any, at: Any, _stack: list[Any]) -> None:
    if type(value) is not bool:
        raise _refuse("VALUE_TYPE", at)
    if rule.choices is not None and value not in rule.choices:
        raise _refuse("VALUE_ENUM", at)


def _rule_object(rule: ObjectRule, value: Any, at: Any, stack: list[Any]) -> None:
    if type(value) is not dict:
        raise _refuse("VALUE_TYPE", at)
    index = rule.index
    for key, item in value.items():  # children are only queued: every key is seen before any is checked
        entry = index.get(key) if type(key) is str else None
        if entry is None:
            raise _refuse("VALUE_FIELDS", at)
        stack.append((entry[1], item, (at, ".properties[", entry[0])))
    if not rule.required <= value.keys():
        raise _refuse("VALUE_FIELDS", at)


def _rule_array(rule: ArrayRule, value: Any, at: Any, stack: list[Any]) -> None:
    if type(value) is not list:
        raise _refuse("VALUE_TYPE", at)
    if not rule.min_items <= len(value) <= rule.max_items:
        raise _refuse("VALUE_ITEMS", at)
    # The compiler allows uniqueItems over scalar items only; a container item fails its own check
    # below. The key's kind keeps 1 and true apart, and makes 1 and 1.0 (and 0 and -0.0) one number.
    if rule.unique and all(type(item) in _HASHABLE for item in value):
        if len({(_UNIQUE_KIND.get(type(item), type(item)), item) for item in value}) != len(value):
            raise _refuse("VALUE_ITEMS", at)
    for position in range(len(value) - 1, -1, -1):
        stack.append((rule.items, value[position], (at, ".items[", position)))


def _rule_map(rule: MapRule, value: Any, at: Any, stack: list[Any]) -> None:
    if type(value) is not dict:
        raise _refuse("VALUE_TYPE", at)
    if not rule.min_entries <= len(value) <= rule.max_entries:
        raise _refuse("VALUE_ENTRIES", at)
    for key in value:  # every key before any value, as an object's
        if type(key) is not str or not (key.isascii() or is_portable_text(key)):
            raise _refuse("VALUE_NOT_PORTABLE", at)
    items = list(value.values())
    for position in range(len(items) - 1, -1, -1):
        stack.append((rule.values, items[position], (at, ".additionalProperties[", position)))


def _rule_nullable(rule: NullableRule, value: Any, at: Any, stack: list[Any]) -> None:
    if value is not None:
        stack.append((rule.inner, value, at))


def _rule_union(rule: UnionRule, value: Any, at: Any, stack: list[Any]) -> None:
    """One branch by the value's type, or by its tag; only anyOf's scalar branches are tried in turn."""
    route = rule.routes.get(type(value))
    if route is None:
        raise _refuse("VALUE_TYPE", at)
    if len(route) == 1:
        stack.append((route[0][0], value, at))
        return
    if rule.tag is not None and type(value) is dict:
        tag = value.get(rule.tag)
        branch = rule.tags.get(tag) if type(tag) is str else None
        if branch is None:
            raise _refuse("VALUE_UNION", at)
        stack.append((branch, value, at))
        return
    for _, branch_rule in route:  # scalar rules: they check at once and push nothing
        try:
            _RULE_CHECKS[type(branch_rule)](branch_rule, value, at, stack)
        except BoundaryError:
            continue
        return
    raise _refuse("VALUE_UNION", at)


_HASHABLE: Final = frozenset({str, int, float, bool, type(None)})
_UNIQUE_KIND: Final = MappingProxyType({float: int})  # JSON has one number type
_RULE_CHECKS: Final = MappingProxyType({
    StringRule: _rule_string,
    IntegerRule: _rule_integer,
    NumberRule: _rule_number,
    BooleanRule: _rule_boolean,
    ObjectRule: _rule_object,
    ArrayRule: _rule_array,
    MapRule: _rule_map,
    NullableRule: _rule_nullable,
    UnionRule: _rule_union,
})


def _emit_rule(rules: Sequence[Rule], index: int, names: Mapping[int, str], *, top: bool = False) -> dict[str, Any]:
    """One rule as JSON Schema; a shared definition becomes a $ref. Depth is bounded by the prescan."""
    if not top and index in names:
        return {"$ref": f"#/$defs/{names[index]}"}
    rule = rules[index]
    body = _EMITTERS[type(rule)](rule, rules, names)
    if rule.description is not None:
        body["description"] = rule.description
    return body


def _scalar(kind: str, choices: frozenset[Any] | None) -> dict[str, Any]:
    return {"type": kind} if choices is None else {"type": kind, "enum": sorted(choices)}


def _emit_string(rule: StringRule, _rules: Sequence[Rule], _names: Mapping[int, str]) -> dict[str, Any]:
    body = _scalar("string", rule.choices)
    if rule.min_length:
        body["minLength"] = rule.min_length
    if rule.choices is None or rule.max_length_from == "schema":  # an enum is bounded by its choices
        body["maxLength"] = rule.max_length
    if rule.pattern is not None:
        body["pattern"] = rule.pattern
    if rule.format is not None:
        body["format"] = rule.format
    return body


def _emit_integer(rule: IntegerRule, _rules: Sequence[Rule], _names: Mapping[int, str]) -> dict[str, Any]:
    body = _scalar("integer", rule.choices)
    body["minimum"] = rule.minimum
    body["maximum"] = rule.maximum
    if rule.multiple_of is not None:
        body["multipleOf"] = rule.multiple_of
    return body


def _emit_number(rule: NumberRule, _rules: Sequence[Rule], _names: Mapping[int, str]) -> dict[str, Any]:
    body = _scalar("number", rule.choices)
    if rule.minimum is not None:
        body["exclusiveMinimum" if rule.minimum_exclusive else "minimum"] = rule.minimum
    if rule.maximum is not None:
        body["exclusiveMaximum" if rule.maximum_exclusive else "maximum"] = rule.maximum
    if rule.multiple_of is not None:
        body["multipleOf"] = rule.multiple_of
    return body


def _emit_boolean(rule: BooleanRule, _rules: Sequence[Rule], _names: Mapping[int, str]) -> dict[str, Any]:
    return _scalar("boolean", rule.choices)


def _emit_object(rule: ObjectRule, rules: Sequence[Rule], names: Mapping[int, str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {name: _emit_rule(rules, child, names) for name, child in rule.properties},
        "required": [name for name, _ in rule.properties if name in rule.required],
        "additionalProperties": False,
    }


def _emit_array(rule: ArrayRule, rules: Sequence[Rule], names: Mapping[int, str]) -> dict[str, Any]:
    body: dict[str, Any] = {"type": "array", "items": _emit_rule(rules, rule.items, names)}
    if rule.min_items:
        body["minItems"] = rule.min_items
    body["maxItems"] = rule.max_items
    if rule.unique:
        body["uniqueItems"] = True
    return body


def _emit_map(rule: MapRule, rules: Sequence[Rule], names: Mapping[int, str]) -> dict[str, Any]:
    body: dict[str, Any] = {"type": "object", "additionalProperties": _emit_rule(rules, rule.values, names)}
    if rule.min_entries:
        body["minProperties"] = rule.min_entries
    body["maxProperties"] = rule.max_entries
    return body


def _emit_nullable(rule: NullableRule, rules: Sequence[Rule], names: Mapping[int, str]) -> dict[str, Any]:
    inner = rules[rule.inner]
    if type(inner) is UnionRule and rule.inner not in names:  # one anyOf, null its last branch
        return {"anyOf": [*_emit_union(inner, rules, names)["anyOf"], {"type": "null"}]}
    return {"anyOf": [_emit_rule(rules, rule.inner, names), {"type": "null"}]}


def _emit_union(rule: UnionRule, rules: Sequence[Rule], names: Mapping[int, str]) -> dict[str, Any]:
    # anyOf for oneOf too: its branches were proved apart, so the two mean the same, and strict
    # provider modes take anyOf only.
    return {"anyOf": [_emit_rule(rules, branch, names) for branch in rule.branches]}


_EMITTERS: Final = MappingProxyType({
    StringRule: _emit_string,
    IntegerRule: _emit_integer,
    NumberRule: _emit_number,
    BooleanRule: _emit_boolean,
    ObjectRule: _emit_object,
    ArrayRule: _emit_array,
    MapRule: _emit_map,
    NullableRule: _emit_nullable,
    UnionRule: _emit_union,
})


# -- Host narrowing (overlays) -----------------------------------------------------------------
# A host may replace the server's rule for a property by its own, only when the compiler can
# prove the host's rule admits a subset of what the server's admits. The proof is structural and
# conservative: an enum is proved value by value against the server's own rule; bounds must be
# tighter; a pattern may be added to a string the server left without one, never changed (a
# format likewise); a server's `number` may become an `integer` inside the number's bounds; a
# union narrows to branches each inside one of the server's (found by type, by tag, or for
# scalars by trying each); a map to a map or a closed object within its counts. Anything else is
# OVERLAY_WIDENS, even when it happens to be narrower: the boundary never admits what the
# server's own schema would not.



def narrow(server_schema: Any, overlay: Mapping[tuple[str, ...], Any], *,
           bounds: Bounds = Bounds()) -> CompiledSchema:
    """Compile the server's schema with the host's rules in place of some properties' rules.

    ``overlay`` maps a path of property names (trusted host text) to the host's schema for that
    property. Each replacement is proved narrower before the patched schema is compiled.
    """
    prescan(server_schema)
    if type(server_schema) is not dict:
        raise BoundaryError("SCHEMA_ROOT", SCHEMA_ROOT)
    if not isinstance(overlay, Mapping):
        raise BoundaryError("OVERLAY_PATH", "overlay")  # no path at all
    patched = json_copy(server_schema)  # depth bounded by the prescan
    definitions = {keyword: patched[keyword] for keyword in DEFINITION_PREFIXES.values() if keyword in patched}
    for number, (path, host) in enumerate(overlay.items()):
        at = f"overlay[{number}]"
        parent, name = _overlay_parent(patched, path, at)
        server_node = parent[name]
        host_rules = compile_schema(host, bounds=bounds, require_object=False)
        if _has_ref(host):
            raise BoundaryError("OVERLAY_WIDENS", at)
        resolved = _resolved(server_node, patched, at)
        if not resolved.keys().isdisjoint(ROOT_ONLY):
            # A nested $defs or $id: JSON Schema resolves the node's references against the
            # document (or a new base), not against the node, so no proof here reads it as the
            # server does.
            raise BoundaryError("OVERLAY_WIDENS", at)
        _prove_narrower(host_rules, {**resolved, **definitions}, bounds, at)
        parent[name] = json_copy(host)
    return compile_schema(patched, bounds=bounds)


def _has_ref(schema: Any) -> bool:
    stack = [schema]
    while stack:
        item = stack.pop()
        if type(item) is dict:
            if "$ref" in item:
                return True
            stack.extend(item.values())
        elif type(item) is list:
            stack.extend(item)
    return False


def _resolved(node: Any, root: dict[str, Any], at: str) -> dict[str, Any]:
    """A node with a bare local $ref replaced by a copy of its definition (one chain, bounded)."""
    for _ in range(MAX_DEFINITIONS + 1):
        if type(node) is not dict:
            raise BoundaryError("OVERLAY_PATH", at)
        if "$ref" not in node:
            return node
        if any(key != "$ref" and key not in ANNOTATIONS for key in node):
            # A reference with constraining siblings (refused alone, SCHEMA_REF_SIBLING): the
            # definition without them would be the wrong server rule to prove against.
            raise BoundaryError("OVERLAY_WIDENS", at)
        ref = node["$ref"]
        keyword = next((kw for prefix, kw in DEFINITION_PREFIXES.items()
                        if type(ref) is str and ref.startswith(prefix)), None)
        table = root.get(keyword) if keyword else None
        name = ref[len("#/" + str(keyword) + "/"):] if keyword else ""
        if type(table) is not dict or name not in table:
            raise BoundaryError("OVERLAY_PATH", at)
        node = table[name]
    raise BoundaryError("SCHEMA_REF_RECURSIVE", at)


def _overlay_parent(root: dict[str, Any], path: tuple[str, ...], at: str) -> tuple[dict[str, Any], str]:
    """The properties table holding the path's last name; referenced objects on the way are inlined."""
    if type(path) is not tuple or not path or any(type(name) is not str for name in path):
        raise BoundaryError("OVERLAY_PATH", at)
    node = root
    for name in path[:-1]:
        properties = _overlay_properties(node, name, at)
        child = properties[name]
        if type(child) is dict and "$ref" in child:
            child = json_copy(_resolved(child, root, at))  # this use only: the definition stays
            properties[name] = child
        node = child
    return _overlay_properties(node, path[-1], at), path[-1]


def _overlay_properties(node: Any, name: str, at: str) -> dict[str, Any]:
    """The properties table of a schema node that names ``name``, or OVERLAY_PATH."""
    properties = node.get("properties") if type(node) is dict else None
    if type(properties) is not dict or name not in properties:
        raise BoundaryError("OVERLAY_PATH", at)
    return properties


def _prove_narrower(host: CompiledSchema, server_node: dict[str, Any], bounds: Bounds, at: str) -> None:
    """The host's rule inside the server's, or OVERLAY_WIDENS. A server node the compiler refuses
    has no rule to be inside of: a format it does not read (email, uri) may assert anything a
    reader of that format likes, so no pattern or enum of the host's is proved to lie within it."""
    try:
        # Silent, the server's schema admits any length: up to the ceiling is inside it.
        server = compile_schema(server_node, bounds=bounds.ceilings(), require_object=False)
    except BoundaryError as refusal:
        if refusal.scope != "schema":
            raise
        raise BoundaryError("OVERLAY_WIDENS", at) from None
    if not _is_subset(host, server):
        raise BoundaryError("OVERLAY_WIDENS", at)


def _is_subset(host: CompiledSchema, server: CompiledSchema, start: tuple[int, int] = (0, 0)) -> bool:
    """Structural proof that every value the host's rules admit, the server's rules admit too."""
    stack = [start]
    seen: set[tuple[int, int]] = set()
    while stack:
        pair = stack.pop()
        if pair in seen:
            continue
        seen.add(pair)
        host_rule, server_rule = host.rules[pair[0]], server.rules[pair[1]]
        if type(host_rule) is UnionRule:  # each of the host's branches inside the server's rule
            stack.extend((branch, pair[1]) for branch in host_rule.branches)
            continue
        if type(server_rule) is NullableRule:
            inner = host_rule.inner if type(host_rule) is NullableRule else pair[0]
            stack.append((inner, server_rule.inner))
            continue
        if type(server_rule) is UnionRule:
            branch = _server_branch(host, pair[0], server, server_rule)
            if branch is None:
                return False
            stack.append((pair[0], branch))
            continue
        proof = _SUBSET_RULES.get((type(host_rule), type(server_rule)))
        if proof is None or not proof(host_rule, server, pair[1], stack):
            return False  # other kinds, and a nullable host under a non-nullable server, land here too
    return True


# A rule's kind as the Python type of a value it admits: the key of a union's routes.
_ROUTE_TYPE: Final[Mapping[type, type]] = MappingProxyType({
    StringRule: str, IntegerRule: int, NumberRule: float, BooleanRule: bool, ObjectRule: dict, MapRule: dict,
    ArrayRule: list,
})


def _server_branch(host: CompiledSchema, index: int, server: CompiledSchema, union: UnionRule) -> int | None:
    """The server union's branch a host rule lies inside: the one its type routes to, the one all
    its tags name, or the first scalar branch proved to hold it; None when none is."""
    rule = host.rules[index]
    route = union.routes.get(_ROUTE_TYPE.get(type(rule)))  # type: ignore[arg-type]
    if route is None:
        return None
    if len(route) == 1:
        return route[0][0]
    if union.tag is not None:
        entry = rule.index.get(union.tag) if type(rule) is ObjectRule and union.tag in rule.required else None
        tag_rule = host.rules[entry[1]] if entry else None
        if type(tag_rule) is not StringRule or tag_rule.choices is None:
            return None
        targets = {union.tags.get(choice) for choice in tag_rule.choices}
        return targets.pop() if len(targets) == 1 and None not in targets else None
    return next((branch for branch, _ in route if _is_subset(host, server, (index, branch))), None)


def _choices_admitted(host_rule: Any, server: CompiledSchema, index: int) -> bool | None:
    """With host choices: True when the server's rule admits each one; None when there are none."""
    if host_rule.choices is None:
        return None
    rule = server.rules[index]
    for choice in host_rule.choices:
        try:
            _RULE_CHECKS[type(rule)](rule, choice, VALUE_ROOT, [])
        except BoundaryError:  # a rule's check refuses with value codes only; any refusal is "not admitted"
            return False
    return True


def _string_subset(rule: StringRule, server: CompiledSchema, index: int, _stack: list[Any]) -> bool:
    other = server.rules[index]
    proved = _choices_admitted(rule, server, index)
    if proved is not None:
        return proved
    return (other.choices is None and rule.min_length >= other.min_length and rule.max_length <= other.max_length
            and (other.pattern is None or other.pattern == rule.pattern)
            and (other.format is None or other.format == rule.format))


def _integer_subset(rule: IntegerRule, server: CompiledSchema, index: int, _stack: list[Any]) -> bool:
    other = server.rules[index]
    proved = _choices_admitted(rule, server, index)
    if proved is not None:
        return proved
    step_ok = other.multiple_of is None or (rule.multiple_of is not None and rule.multiple_of % other.multiple_of == 0)
    return other.choices is None and rule.minimum >= other.minimum and rule.maximum <= other.maximum and step_ok


def _boolean_subset(rule: BooleanRule, server: CompiledSchema, index: int, _stack: list[Any]) -> bool:
    proved = _choices_admitted(rule, server, index)
    return server.rules[index].choices is None if proved is None else proved


def _object_subset(rule: ObjectRule, server: CompiledSchema, index: int, stack: list[Any]) -> bool:
    other = server.rules[index]
    if not other.required <= rule.required:
        return False
    for name, child in rule.properties:
        if name not in other.index:
            return False
        stack.append((child, other.index[name][1]))
    return True


def _array_subset(rule: ArrayRule, server: CompiledSchema, index: int, stack: list[Any]) -> bool:
    other = server.rules[index]
    if rule.min_items < other.min_items or rule.max_items > other.max_items or (other.unique and not rule.unique):
        return False
    stack.append((rule.items, other.items))
    return True


def _map_subset(rule: MapRule, server: CompiledSchema, index: int, stack: list[Any]) -> bool:
    other = server.rules[index]
    if rule.min_entries < other.min_entries or rule.max_entries > other.max_entries:
        return False
    stack.append((rule.values, other.values))
    return True


def _object_in_map(rule: ObjectRule, server: CompiledSchema, index: int, stack: list[Any]) -> bool:
    """A closed object inside a map: its entry counts within the map's, each value within its values'."""
    other = server.rules[index]
    if len(rule.required) < other.min_entries or len(rule.properties) > other.max_entries:
        return False
    stack.extend((child, other.values) for _, child in rule.properties)
    return True


def _number_subset(rule: IntegerRule | NumberRule, server: CompiledSchema, index: int, _stack: list[Any]) -> bool:
    """A host number, or a host integer, inside a server number: its bounds within the server's,
    its step a multiple of the server's (an integer's step is at least 1)."""
    other = server.rules[index]
    proved = _choices_admitted(rule, server, index)
    if proved is not None:
        return proved
    if type(rule) is IntegerRule:
        low, low_open, high, high_open, step = rule.minimum, False, rule.maximum, False, rule.multiple_of or 1
    else:
        low, low_open, high, high_open, step = (rule.minimum, rule.minimum_exclusive, rule.maximum,
                                                rule.maximum_exclusive, rule.multiple_of)
    if other.choices is not None:
        return False
    if other.minimum is not None and (low is None or low < other.minimum or (
            low == other.minimum and other.minimum_exclusive and not low_open)):
        return False
    if other.maximum is not None and (high is None or high > other.maximum or (
            high == other.maximum and other.maximum_exclusive and not high_open)):
        return False
    return other.multiple_of is None or (step is not None and Fraction(step) % Fraction(other.multiple_of) == 0)


# (host rule, server rule) -> the proof that the host's admits no value the server's refuses.
_SUBSET_RULES: Final = MappingProxyType({
    (StringRule, StringRule): _string_subset,
    (IntegerRule, IntegerRule): _integer_subset,
    (IntegerRule, NumberRule): _number_subset,
    (NumberRule, NumberRule): _number_subset,
    (BooleanRule, BooleanRule): _boolean_subset,
    (ObjectRule, ObjectRule): _object_subset,
    (ArrayRule, ArrayRule): _array_subset,
    (MapRule, MapRule): _map_subset,
    (ObjectRule, MapRule): _object_in_map,
})
# -- The contracts file: Value types -----------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolSpec:
    """One tool of a contract set: its compiled input and output contracts and its revisions, and
    what its declaration says of it (provenance; hints nothing trusts)."""

    name: str
    description: str
    effect: str  # "read" or "write"
    required_role: str
    resource_field: str | None  # the required string input field naming the resource authorization checks
    input_contract: CompiledSchema
    output_contract: CompiledSchema | None  # None: no output schema was declared, so no output is data
    bound_fields: tuple[str, ...]  # output fields that must echo the input exactly
    contract_revision: str
    input_revision: str
    output_revision: str
    effect_revision: str
    handler_revision: str
    producer: str
    producer_revision: str
    provenance: Mapping[str, Any] = field(default_factory=lambda: _HOST_PROVENANCE)
    hints: Mapping[str, bool | None] = field(default_factory=lambda: _NO_HINTS)  # the server's: never trusted
    # The audit's view of this contract, built once; only ever read or copied, never handed out.
    _contract: dict[str, Any] = field(init=False, repr=False, compare=False)
    _contract_items: tuple[tuple[str, str], ...] = field(init=False, repr=False, compare=False)
    # Whether admitted input (output) holds only scalars, so a shallow copy owns every value.
    _flat_input: bool = field(init=False, repr=False, compare=False)
    _flat_output: bool = field(init=False, repr=False, compare=False)
    # check_output's quick path for an object of scalars (built when first needed, since the secret
    # words are defined with the output checks): name -> (check, rule, at, frame bytes), or None.
    _quick_output: Any = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_contract", {
            "tool": self.name,
            "effect": self.effect,
            "contract_revision": self.contract_revision,
            "input_revision": self.input_revision,
            "output_revision": self.output_revision,
            "effect_revision": self.effect_revision,
            "handler_revision": self.handler_revision,
            "producer": self.producer,
            "producer_revision": self.producer_revision,
        })
        object.__setattr__(self, "_contract_items", tuple(self._contract.items()))  # its digest templates' key
        object.__setattr__(self, "_flat_input", _holds_only_scalars(self.input_contract))
        object.__setattr__(self, "_flat_output", self.output_contract is None
                           or _holds_only_scalars(self.output_contract))
        object.__setattr__(self, "_quick_output", _UNBUILT)

    def contract_view(self) -> dict[str, Any]:
        return dict(self._contract)

    @property
    def input_fields(self) -> Mapping[str, Rule]:
        """A thin view: each input property's compiled rule, by name, in declaration order."""
        return _root_fields(self.input_contract)

    @property
    def output_fields(self) -> Mapping[str, Rule]:
        """The same view of the output contract (empty when none was declared)."""
        return MappingProxyType({}) if self.output_contract is None else _root_fields(self.output_contract)

    def input_schema(self) -> dict[str, Any]:
        """The exact input contract as a JSON Schema, emitted from its compiled check."""
        return self.input_contract.to_schema()

    def output_schema(self) -> dict[str, Any] | None:
        return None if self.output_contract is None else self.output_contract.to_schema()


_HOST_PROVENANCE: Final[Mapping[str, Any]] = MappingProxyType({
    "source": "host", "server_name": None, "server_version": None, "protocol_version": None,
    "input_schema_sha256": None, "output_schema_sha256": None,
})
_NO_HINTS: Final[Mapping[str, bool | None]] = MappingProxyType({name: None for name in HINT_FIELDS})


def _root_fields(contract: CompiledSchema) -> Mapping[str, Rule]:
    root = contract.rules[0]
    return MappingProxyType({name: contract.rules[index] for name, index in root.properties})


_UNBUILT: Final = object()  # a ToolSpec's table that is built when first needed


def _holds_only_scalars(contract: CompiledSchema) -> bool:
    rules = contract.rules
    for _, index in rules[0].properties:
        rule = rules[index]
        if type(rule) is NullableRule:
            rule = rules[rule.inner]
        if type(rule) not in _SCALAR_RULES:
            return False
    return True


@dataclass(frozen=True, slots=True, eq=False)
class ContractSet(Mapping[str, ToolSpec]):
    """The tools a boundary guards, by name in declaration order: a read-only mapping."""

    tools: Mapping[str, ToolSpec]

    def __getitem__(self, name: str) -> ToolSpec:
        return self.tools[name]

    def __iter__(self) -> Any:
        return iter(self.tools)

    def __len__(self) -> int:
        return len(self.tools)

    def get(self, name: Any, default: Any = None) -> Any:
        return self.tools.get(name, default)  # one call: the dispatcher looks a tool up on every proposal


# -- Output field names that read as secrets ---------------------------------------------------
# The output scan (section 13) withholds every output that holds such a key, and a contracts
# file may not declare one as an output field (CONTRACTS_SECRET_FIELD): the tool could never show
# the model an output that has it.
#
# Keys. A key is split into lower-case ASCII words at case changes, digits and every other
# character ("sessionToken", "X-Api-Key", "aws.secret_access_key", "db password"), and names a
# secret when one word is in SECRET_KEY_WORDS or ends with one of SECRET_WORD_ENDINGS
# ("authtoken", "clientsecret"), or when two adjacent words form a pair of SECRET_KEY_PAIRS, in
# the singular or the plural, written apart or as one word ("api_key", "apiKeys", "apikey",
# "PassWord").
# Qualifier rule: a secret word or pair with a word of SECRET_WORD_QUALIFIERS right before or
# right after it names a number or a kind of secret, not the secret itself, and passes
# ("token_count", "max_token", "token_type", "password_min_length", "api_key_count"); every
# other secret word of the key must be qualified too ("max_session_token" is refused by its
# "token"). The plurals "tokens" and "sessions" are not secret words: "max_tokens",
# "prompt_tokens", "sessions" count an LLM's tokens or a user's sessions. A listing's cursor is
# qualified the same way: "nextPageToken", "NextToken", "continuationToken" and "syncToken" name
# a place in a listing that the server gave out, not a credential. Whatever a key passes for, the
# value under it is still scanned.
SECRET_KEY_WORDS: Final = frozenset({
    "pwd", "passphrase", "credential", "credentials", "session", "sessionid", "cookie", "cookies",
    "authorization", "auth", "bearer", "jwt",
})
SECRET_WORD_ENDINGS: Final = ("token", "secret", "secrets", "password", "passwords", "passwd")
SECRET_KEY_PAIRS: Final = frozenset({
    ("api", "key"), ("access", "key"), ("private", "key"), ("signing", "key"), ("encryption", "key"),
    ("ssh", "key"), ("connection", "string"), ("pass", "word"), ("pass", "phrase"),
})
SECRET_WORD_QUALIFIERS: Final = frozenset({
    "count", "limit", "max", "min", "usage", "used", "type", "kind", "length", "size", "total", "num",
    "page", "next", "continuation", "sync",
})
_SECRET_PAIRS: Final = SECRET_KEY_PAIRS | {(first, second + "s") for first, second in SECRET_KEY_PAIRS}
_SECRET_WORDS: Final = SECRET_KEY_WORDS | {first + second for first, second in _SECRET_PAIRS}
# ASCII words: an upper-case run not followed by a lower-case letter ("API" of "APIKey"), a word
# with at most one leading capital, or a run of digits. Each alternative backtracks at most one
# character, so splitting is linear in the key.
_KEY_WORD: Final = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")


def _names_a_secret(key: str) -> bool:
    words = ["", *map(str.lower, _KEY_WORD.findall(key)), ""]  # padded: every word has two neighbours
    for at in range(1, len(words) - 1):
        word = words[at]
        if word in _SECRET_WORDS or word.endswith(SECRET_WORD_ENDINGS):
            end = at + 1
        elif (word, words[at + 1]) in _SECRET_PAIRS:
            end = at + 2
        else:
            continue
        if words[at - 1] not in SECRET_WORD_QUALIFIERS and words[end] not in SECRET_WORD_QUALIFIERS:
            return True
    return False


# Key verdicts are cached: a tool's field names repeat from output to output, and splitting a key
# into words costs more than the rest of the scan of a small output. Only short keys are cached,
# so the cache holds at most 1,024 keys of 64 characters, whatever handlers send.
SECRET_KEY_VERDICTS: Final = functools.lru_cache(maxsize=1_024)(_names_a_secret)
_MAX_CACHED_KEY: Final = 64


def is_secret_key(key: str) -> bool:
    """Whether an output key names a secret: split into words (case, camelCase, snake_case,
    kebab-case, dots, spaces), a secret word or pair not qualified by a counting or cursor word."""
    return SECRET_KEY_VERDICTS(key) if len(key) <= _MAX_CACHED_KEY else _names_a_secret(key)


# -- The contracts file: Loading ---------------------------------------------------------------


def load_contracts(path: str | os.PathLike[str], *, max_bytes: int = MAX_CONTRACTS_BYTES,
                   overlay: ContractOverlay | None = None) -> ContractSet:
    """Read and compile a contracts file (narrowed by the host's overlay, when given); every
    failure is a CatalogError without the path."""
    try:
        data = read_bounded(path, max_bytes=max_bytes)
    except BoundaryError:
        raise BoundaryError("CONTRACTS_UNREADABLE") from None
    return parse_contracts(data, max_bytes=max_bytes, overlay=overlay)


def parse_contracts(data: bytes, *, max_bytes: int = MAX_CONTRACTS_BYTES,
                    overlay: ContractOverlay | None = None) -> ContractSet:
    """Decode strictly (JSON_* codes from the core), then exact fields and compiled schemas."""
    root = _contract_fields(decode_strict_json(data, max_bytes=max_bytes, max_depth=MAX_CONTRACTS_DEPTH),
                            _ROOT_FIELDS, "contracts")
    if not _is_exactly(root["format"], CONTRACTS_FORMAT):
        raise BoundaryError("CONTRACTS_VERSION", "format")
    raw_tools = root["tools"]
    if type(raw_tools) is not list:
        raise BoundaryError("CONTRACTS_VALUE", "tools")
    if not 1 <= len(raw_tools) <= MAX_TOOLS:
        raise BoundaryError("CONTRACTS_LIMIT", "tools")
    narrowing = overlay.tools if overlay is not None else MappingProxyType({})
    tools: dict[str, ToolSpec] = {}
    for index, raw in enumerate(raw_tools):
        tool = _parse_tool(raw, f"tools[{index}]", narrowing)
        if tool.name in tools:
            raise BoundaryError("CONTRACTS_DUPLICATE", f"tools[{index}].name")
        tools[tool.name] = tool
    for index, name in enumerate(narrowing):
        if name not in tools:  # an overlay for a tool the file does not declare narrows nothing: refused
            raise BoundaryError("CONTRACTS_REFERENCE", f"overlay.tools[{index}].name")
    return ContractSet(MappingProxyType(tools))


def declare_tool(name: str, *, description: str, effect: str, required_role: str, input_schema: Any,
                 output_schema: Any = None, resource_field: str | None = None,
                 bound_fields: Sequence[str] = (), producer: str = "host") -> dict[str, Any]:
    """A host's own tool as a tool-contracts-v1 entry: its JSON Schemas as they are, its revisions
    derived from what it declares (so any change to it is a new contract revision), host
    provenance, no hints. Nothing is checked here: declare_contracts compiles the set."""
    declared = {"tool": name, "description": description, "effect": effect, "role": required_role,
                "input": input_schema, "output": output_schema, "resource_field": resource_field,
                "bound_fields": list(bound_fields), "producer": producer}
    try:
        digests = {part: canonical_sha256(value)[:16] for part, value in (
            ("contract", declared), ("input", input_schema), ("output", output_schema))}
    except (BoundaryError, TypeError, ValueError, RecursionError):
        digests = {"contract": "undeclared", "input": "undeclared", "output": "undeclared"}  # refused when compiled
    effect_name = effect if type(effect) is str and is_identifier(effect) else "undeclared"
    return {"name": name, "description": description, "effect": effect, "required_role": required_role,
            "resource_field": resource_field, "input_schema": input_schema, "output_schema": output_schema,
            "bound_fields": list(bound_fields), "producer": producer,
            "revisions": {"contract": f"contract.{digests['contract']}", "input": f"input.{digests['input']}",
                          "output": f"output.{digests['output']}", "effect": f"effect.{effect_name}.v1",
                          "handler": "handler.host.v1", "producer": f"producer.{digests['contract']}"},
            "provenance": dict(_HOST_PROVENANCE), "hints": dict(_NO_HINTS)}


def declare_contracts(*tools: Mapping[str, Any], overlay: ContractOverlay | None = None) -> ContractSet:
    """A contract set from declare_tool entries (or any tool-contracts-v1 entries), compiled
    exactly as a contracts file is: the same codes, placed at tools[i], and each object's members
    in the order written (a schema's properties keep their declared order, as in a file)."""
    try:
        data = json.dumps({"format": CONTRACTS_FORMAT, "tools": [dict(tool) for tool in tools]},
                          ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8")
    except (TypeError, ValueError, RecursionError):
        raise BoundaryError("CONTRACTS_VALUE", "tools") from None
    return parse_contracts(data, overlay=overlay)


def _parse_tool(raw: Any, at: str, narrowing: Mapping[str, _ToolOverlay]) -> ToolSpec:
    """One tool entry: exact fields, then its schemas compiled (through the host's overlay for
    it, when there is one), then the references between them."""
    body = _contract_fields(raw, _TOOL_FIELDS, at)
    _require(type(body["name"]) is str and TOOL_NAME.fullmatch(body["name"]) is not None, f"{at}.name")
    _require(type(body["description"]) is str, f"{at}.description")
    if len(body["description"]) > MAX_DESCRIPTION_LENGTH:
        raise BoundaryError("CONTRACTS_LIMIT", f"{at}.description")
    _require(_member(body["effect"], EFFECTS), f"{at}.effect")  # a list or an object is unhashable: type first
    _require(is_identifier(body["required_role"]), f"{at}.required_role")
    _require(is_identifier(body["producer"]), f"{at}.producer")
    host = narrowing.get(body["name"])
    input_schema = _compile_at(body["input_schema"], f"{at}.input_schema", host, "input")
    output_schema = (None if body["output_schema"] is None
                     else _compile_at(body["output_schema"], f"{at}.output_schema", host, "output"))
    if host is not None and body["output_schema"] is None and host.output:
        raise BoundaryError("OVERLAY_PATH", f"overlay.tools[{host.index}].output[0]")
    secret = None if output_schema is None else output_schema.secret_field()
    if secret is not None:
        raise BoundaryError("CONTRACTS_SECRET_FIELD", f"{at}.output_schema{secret[len(SCHEMA_ROOT):]}")
    revisions = _contract_fields(body["revisions"], frozenset(_REVISION_FIELDS), f"{at}.revisions")
    for name in _REVISION_FIELDS:
        _require(is_identifier(revisions[name]), f"{at}.revisions.{name}")
    return ToolSpec(
        name=body["name"],
        description=body["description"],
        effect=body["effect"],
        required_role=body["required_role"],
        resource_field=_resource_field(body["resource_field"], input_schema, f"{at}.resource_field"),
        input_contract=input_schema,
        output_contract=output_schema,
        bound_fields=_bound_fields(body["bound_fields"], input_schema, output_schema, f"{at}.bound_fields"),
        contract_revision=revisions["contract"],
        input_revision=revisions["input"],
        output_revision=revisions["output"],
        effect_revision=revisions["effect"],
        handler_revision=revisions["handler"],
        producer=body["producer"],
        producer_revision=revisions["producer"],
        provenance=_provenance(body["provenance"], f"{at}.provenance"),
        hints=_hints(body["hints"], f"{at}.hints"),
    )


def _compile_at(schema: Any, at: str, host: _ToolOverlay | None = None, side: str = "input") -> CompiledSchema:
    entries = () if host is None else getattr(host, side)
    places = [f"overlay.tools[{host.index}].{side}[{number}]" for number in range(len(entries))] if host else []
    bounds = OUTPUT_BOUNDS if side == "output" else Bounds()
    try:
        if not entries:
            return compile_schema(schema, bounds=bounds)
        return narrow(schema, MappingProxyType(dict(entries)), bounds=bounds)
    except BoundaryError as refusal:  # the same code, its place moved inside the file it is about
        if refusal.scope != "schema":
            raise
        if refusal.at.startswith("overlay["):
            raise BoundaryError(refusal.code, places[int(refusal.at[len("overlay["):-1])]) from None
        raise BoundaryError(refusal.code, at + refusal.at[len(SCHEMA_ROOT):]) from None


def _resource_field(value: Any, input_schema: CompiledSchema, at: str) -> str | None:
    """None, or a required string field of the input: authorization needs it on every call."""
    if value is None:
        return None
    _require(type(value) is str, at)
    root = input_schema.rules[0]
    entry = root.index.get(value) if type(root) is ObjectRule else None
    if entry is None or value not in root.required or type(input_schema.rules[entry[1]]) is not StringRule:
        raise BoundaryError("CONTRACTS_REFERENCE", at)
    return value


def _bound_fields(value: Any, input_schema: CompiledSchema, output_schema: CompiledSchema | None,
                  at: str) -> tuple[str, ...]:
    """Output fields that must echo an input field of the same name: both sides require it."""
    # Unique names of declared input properties: bounded by MAX_PROPERTIES without a limit of its own.
    _require(type(value) is list and all(type(name) is str for name in value) and len(set(value)) == len(value), at)
    for name in value:
        if (output_schema is None or name not in output_schema.rules[0].required
                or name not in input_schema.rules[0].required):
            raise BoundaryError("CONTRACTS_REFERENCE", at)
    return tuple(value)


def _provenance(raw: Any, at: str) -> Mapping[str, Any]:
    body = _contract_fields(raw, _PROVENANCE_FIELDS, at)
    _require(_member(body["source"], SOURCES), f"{at}.source")
    for name in ("server_name", "server_version", "protocol_version"):
        value = body[name]
        _require(value is None or (type(value) is str and len(value) <= MAX_TEXT_LENGTH), f"{at}.{name}")
    for name in ("input_schema_sha256", "output_schema_sha256"):
        value = body[name]
        _require(value is None or (type(value) is str and DIGEST_PATTERN.fullmatch(value) is not None), f"{at}.{name}")
    return MappingProxyType(dict(body))


def _hints(raw: Any, at: str) -> Mapping[str, bool | None]:
    body = _contract_fields(raw, frozenset(HINT_FIELDS), at)
    for name in HINT_FIELDS:
        _require(body[name] is None or type(body[name]) is bool, f"{at}.{name}")
    return MappingProxyType({name: body[name] for name in HINT_FIELDS})


def _contract_fields(value: Any, fields: frozenset[str], at: str) -> dict[str, Any]:
    return _exact_fields(value, fields, at, ("CONTRACTS_VALUE", "CONTRACTS_FIELDS"))


def _require(condition: bool, at: str) -> None:
    if not condition:
        raise BoundaryError("CONTRACTS_VALUE", at)


# -- The overlay file ---------------------------------------------------------------------------
# A host narrows a server's contract without editing it: per tool and side (input, output), a
# path of property names and the host's schema for that property, applied by narrow() when the
# contracts file is compiled, so that each replacement is proved a subset of the server's rule
# (OVERLAY_WIDENS otherwise, OVERLAY_PATH for a path that names nothing). Loaded like the
# contracts file; its places are "overlay.tools[0].input[1]...", the contracts file's "tools[0]...".


@dataclass(frozen=True, slots=True)
class _ToolOverlay:
    index: int  # the tool's position in the overlay file, for `at`
    input: tuple[tuple[tuple[str, ...], Any], ...]  # (path, host schema), in file order
    output: tuple[tuple[tuple[str, ...], Any], ...]


@dataclass(frozen=True, slots=True)
class ContractOverlay:
    """A parsed tool-contract-overlay-v1 file: the host's narrower schemas, by tool name."""

    tools: Mapping[str, _ToolOverlay]


def load_overlay(path: str | os.PathLike[str], *, max_bytes: int = MAX_CONTRACTS_BYTES) -> ContractOverlay:
    """Read an overlay file; every failure is a CatalogError without the path."""
    try:
        data = read_bounded(path, max_bytes=max_bytes)
    except BoundaryError:
        raise BoundaryError("CONTRACTS_UNREADABLE", "overlay") from None
    return parse_overlay(data, max_bytes=max_bytes)


def parse_overlay(data: bytes, *, max_bytes: int = MAX_CONTRACTS_BYTES) -> ContractOverlay:
    """Decode strictly, then exact fields; each host schema is compiled here already, so that a
    schema the compiler refuses is placed in this file (its subset proof comes with the contracts)."""
    root = _contract_fields(decode_strict_json(data, max_bytes=max_bytes, max_depth=MAX_CONTRACTS_DEPTH),
                            _OVERLAY_ROOT_FIELDS, "overlay")
    if not _is_exactly(root["format"], OVERLAY_FORMAT):
        raise BoundaryError("CONTRACTS_VERSION", "overlay.format")
    raw_tools = root["tools"]
    _require(type(raw_tools) is list, "overlay.tools")
    if not 1 <= len(raw_tools) <= MAX_TOOLS:
        raise BoundaryError("CONTRACTS_LIMIT", "overlay.tools")
    tools: dict[str, _ToolOverlay] = {}
    for index, raw in enumerate(raw_tools):
        at = f"overlay.tools[{index}]"
        body = _contract_fields(raw, _OVERLAY_TOOL_FIELDS, at)
        _require(type(body["name"]) is str and TOOL_NAME.fullmatch(body["name"]) is not None, f"{at}.name")
        if body["name"] in tools:
            raise BoundaryError("CONTRACTS_DUPLICATE", f"{at}.name")
        sides = {side: _overlay_entries(body[side], f"{at}.{side}") for side, _ in _OVERLAY_SIDES}
        if not sides["input"] and not sides["output"]:
            raise BoundaryError("CONTRACTS_LIMIT", at)  # an entry that narrows nothing is a mistake
        tools[body["name"]] = _ToolOverlay(index, sides["input"], sides["output"])
    return ContractOverlay(MappingProxyType(tools))


def _overlay_entries(raw: Any, at: str) -> tuple[tuple[tuple[str, ...], Any], ...]:
    _require(type(raw) is list, at)
    if len(raw) > MAX_OVERLAY_PATHS:
        raise BoundaryError("CONTRACTS_LIMIT", at)
    entries: dict[tuple[str, ...], Any] = {}
    for number, item in enumerate(raw):
        place = f"{at}[{number}]"
        body = _contract_fields(item, _OVERLAY_ENTRY_FIELDS, place)
        path = body["path"]
        _require(type(path) is list and 1 <= len(path) <= MAX_OVERLAY_PATH_LENGTH
                 and all(type(name) is str and 1 <= len(name) <= MAX_NAME_LENGTH for name in path), f"{place}.path")
        if tuple(path) in entries:
            raise BoundaryError("CONTRACTS_DUPLICATE", f"{place}.path")
        try:
            compile_schema(body["schema"], require_object=False)
        except BoundaryError as refusal:
            if refusal.scope != "schema":
                raise
            raise BoundaryError(refusal.code, f"{place}.schema" + refusal.at[len(SCHEMA_ROOT):]) from None
        entries[tuple(path)] = body["schema"]
    return tuple(entries.items())


# ============================================================================================
# 9. Registry and input contracts
# ============================================================================================
# The shipped tools are a contract set like any other, declared here in the contracts file's own
# format (tool-contracts-v1) and loaded by the loader a host's file goes through, bytes and all: so
# the module runs alone, copied beside tool-cases.json, with no other file. tool-contracts.json in
# the repository is this document written out (a test holds the two equal): the template a host
# copies for its own tools, and what --check-contracts shows.

# A tool the host declares itself: no server to name, and no hints for anyone to trust.
_HOST_DECLARED: Final = {
    "provenance": {"source": "host", "server_name": None, "server_version": None, "protocol_version": None,
                   "input_schema_sha256": None, "output_schema_sha256": None},
    "hints": {"read_only": None, "destructive": None, "idempotent": None, "open_world": None},
}
_SHIPPED_DOCUMENT: Final = {
    "format": "tool-contracts-v1",
    "tools": [
        {
            "name": "get_order",
            "description": "Read one of the caller's orders and its payment status.",
            "effect": "read",
            "required_role": "orders.read",
            "resource_field": "order_ref",
            "input_schema": {
                "type": "object",
                "properties": {"order_ref": {"type": "string", "pattern": "^ORDER-[0-9]{1,12}$", "maxLength": 18}},
                "required": ["order_ref"],
                "additionalProperties": False,
            },
            "output_schema": {
                "type": "object",
                "properties": {
                    "order_ref": {"type": "string", "pattern": "^ORDER-[0-9]{1,12}$", "maxLength": 18},
                    "status": {"type": "string", "enum": ["paid", "pending", "refunded"], "maxLength": 64},
                },
                "required": ["order_ref", "status"],
                "additionalProperties": False,
            },
            "bound_fields": ["order_ref"],
            "revisions": {
                "contract": "get_order.contract.v2",
                "input": "get_order.input.v2",
                "output": "get_order.output.v2",
                "effect": "effect.none.v1",
                "handler": "get_order.handler.v1",
                "producer": "orders-producer-v3",
            },
            "producer": "orders-service",
            **_HOST_DECLARED,
        },
        {
            "name": "create_refund_draft",
            "description": "Create a refund draft for one of the caller's paid orders; submits nothing.",
            "effect": "write",
            "required_role": "refunds.draft",
            "resource_field": "order_ref",
            "input_schema": {
                "type": "object",
                "properties": {
                    "order_ref": {"type": "string", "pattern": "^ORDER-[0-9]{1,12}$", "maxLength": 18},
                    "reason": {"type": "string", "enum": ["damaged", "duplicate", "other"], "maxLength": 64},
                },
                "required": ["order_ref", "reason"],
                "additionalProperties": False,
            },
            "output_schema": {
                "type": "object",
                "properties": {
                    "draft_id": {"type": "string", "pattern": "^DRAFT-[0-9a-f]{16}$", "maxLength": 22},
                    "order_ref": {"type": "string", "pattern": "^ORDER-[0-9]{1,12}$", "maxLength": 18},
                    "reason": {"type": "string", "enum": ["damaged", "duplicate", "other"], "maxLength": 64},
                },
                "required": ["draft_id", "order_ref", "reason"],
                "additionalProperties": False,
            },
            "bound_fields": ["order_ref", "reason"],
            "revisions": {
                "contract": "create_refund_draft.contract.v2",
                "input": "create_refund_draft.input.v2",
                "output": "create_refund_draft.output.v2",
                "effect": "effect.refund_draft.v1",
                "handler": "create_refund_draft.handler.v1",
                "producer": "refunds-producer-v2",
            },
            "producer": "refunds-service",
            **_HOST_DECLARED,
        },
    ],
}


def shipped_contracts_document() -> dict[str, Any]:
    """The shipped tools' contracts as a decoded tool-contracts-v1 document: a fresh copy each call."""
    return json_copy(_SHIPPED_DOCUMENT)


REGISTRY: Final[ContractSet] = parse_contracts(canonical_json(_SHIPPED_DOCUMENT))


def check_input(spec: ToolSpec, arguments: Any) -> dict[str, Any]:
    """Exactly what the compiled input contract admits; a fresh copy on success."""
    # Exact key types first: a str subclass that hashes like a field name and equals anything
    # would ride into the admitted copy (the compiled check refuses one too; this is cheaper).
    if type(arguments) is not dict or not plain_keys(arguments):
        raise BoundaryError("INVALID_ARGUMENTS")
    try:
        spec.input_contract.check(arguments)
    except BoundaryError as refusal:
        if refusal.scope != "value":
            raise
        raise BoundaryError("INVALID_ARGUMENTS") from None
    return dict(arguments) if spec._flat_input else json_copy(arguments)


# ============================================================================================
# 10. Host hooks and authorization
# ============================================================================================
# The boundary knows nothing of any business: a host puts each tool behind it with hooks (ToolHooks).
#   resolve(principal, arguments)    the resource a call names (Resource), or None
#   precondition(resource, args)     None, or one of the refusals the host declared for the tool
#   execute(call)                    the downstream call: the tool's output and what it committed
#   status(query)                    a write's receipt, its authoritative absence, or "unavailable"
# The boundary, not a hook, decides: the role is checked before any hook runs, and a resource
# that is missing, another tenant's or another subject's is the same NOT_FOUND (no existence
# oracle). A tool whose contract names no resource field has no resource: it is role-gated only.
# A hook that answers outside its contract is HOOK_INVALID, and one that raises HOOK_FAILED, both
# to the host (nothing ran), except execute and status: their failures are the downstream's,
# contained as the model's HANDLER_FAILED, an unknown outcome, or an unavailable status.

MAX_RESOURCE_REF_LENGTH: Final = 1_024  # a resource's name (an order reference, a path); never in a package
# The refusals a precondition may answer: each tool declares which of them it uses (ToolHooks.refusals).
PRECONDITION_CODES: Final = frozenset({"PRECONDITION_FAILED", "ORDER_NOT_REFUNDABLE"})
# What an execute hook may report of its effect, by the tool's effect: "none" for a read;
# for a write "committed", "not_committed" (it failed, and committed nothing) or "unknown".
EFFECT_REPORTS: Final[Mapping[str, frozenset[str]]] = MappingProxyType({
    "read": frozenset({"none", "not_committed"}),
    "write": frozenset({"committed", "not_committed", "unknown"}),
})
# What a status hook may find: the write's receipt; its absence, with authority (it took no
# effect and never will); a receipt that contradicts the record; or no answer now.
STATUS_FINDINGS: Final = frozenset({"receipt", "absent", "conflict", "unavailable"})


@dataclass(frozen=True, slots=True, kw_only=True)
class Resource:
    """What a resolve hook answers: the resource a call names, as the host's records say."""

    kind: str  # an identifier: "order", "file", "note"
    ref: str  # its name in the host's terms
    tenant: str
    owner: str  # the subject it belongs to
    revision: int  # 1..MAX_REVISION: the package's resource_revision
    state: str  # an identifier: what a precondition reads ("paid")


class ExecuteCall(NamedTuple):
    """What an execute hook receives: the admitted arguments (its own copy), never the proposal.
    A NamedTuple, as AdmittedCall is: one is built for every call, and a frozen dataclass of ten
    fields costs four times as much to build."""

    tool: str
    principal: Principal
    arguments: dict[str, Any]
    request_ref: str | None  # a write's downstream request reference, derived from its key and intent
    status_ref: str | None  # the reference its status is asked under later
    idempotency_key: str | None  # a write's key; None for a read
    now: int
    deadline: int | None  # the host's deadline, on the clock of `now`
    resource: Resource | None
    downstream: Any  # the operation store's view of its own downstream (the demo's ledger)
    call_id: str = ""  # the provider's id of the call answered (the context's): what a hook binds a token to


class Execution(NamedTuple):
    """What an execute hook answers: the output, and what it committed (EFFECT_REPORTS). A
    NamedTuple, built once per call like ExecuteCall; the boundary accepts exactly this type (a
    plain tuple of the same values is no Execution)."""

    output: Any
    effect: str
    receipt_ref: str | None = None  # the downstream's own receipt, when it issues one: never invented
    producer_revision: str | None = None  # None: the contract's producer revision
    resource_revision: int | None = None  # None: the resolved resource's revision


@dataclass(frozen=True, slots=True)
class StatusQuery:
    """What a status hook receives: the recorded write, by its references and key."""

    tool: str
    arguments: dict[str, Any]
    request_ref: str
    status_ref: str
    idempotency_key: str
    downstream: Any


@dataclass(frozen=True, slots=True)
class StatusAnswer:
    """What a status hook answers: one of STATUS_FINDINGS; a receipt carries the write's output."""

    found: str
    receipt_ref: str | None = None
    output: Any = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolHooks:
    """One tool's host hooks. Only execute is required; resolve is required when the contract
    names a resource field. Without status, a write whose outcome is unknown never settles as
    not executed: it stays unknown until the host reconciles it, with a status hook that answers
    what the host found out (a Dispatcher built over the same operation store may carry it)."""

    execute: Callable[[ExecuteCall], Execution]
    resolve: Callable[[Principal, dict[str, Any]], Resource | None] | None = None
    precondition: Callable[[Resource | None, dict[str, Any]], str | None] | None = None
    status: Callable[[StatusQuery], StatusAnswer] | None = None
    refusals: frozenset[str] = frozenset()  # the PRECONDITION_CODES its precondition may answer
    max_output_bytes: int = MAX_OUTPUT_BYTES  # 1..MAX_OUTPUT_BYTES_CEILING: canonical bytes of one output
    max_output_nodes: int = MAX_OUTPUT_NODES  # 1..MAX_OUTPUT_NODES_CEILING: values in one output


def _is_hooks(hooks: Any) -> bool:
    return (type(hooks) is ToolHooks and callable(hooks.execute)
            and all(hook is None or callable(hook) for hook in (hooks.resolve, hooks.precondition, hooks.status))
            and type(hooks.refusals) is frozenset and all(_member(code, PRECONDITION_CODES)
                                                          for code in hooks.refusals)
            and _integer_in(1, MAX_OUTPUT_BYTES_CEILING)(hooks.max_output_bytes)
            and _integer_in(1, MAX_OUTPUT_NODES_CEILING)(hooks.max_output_nodes))


def _is_resource(resource: Any) -> bool:
    return (type(resource) is Resource and is_identifier(resource.kind) and type(resource.ref) is str
            and 0 < len(resource.ref) <= MAX_RESOURCE_REF_LENGTH and type(resource.tenant) is str
            and type(resource.owner) is str and type(resource.revision) is int
            and 1 <= resource.revision <= MAX_REVISION and is_identifier(resource.state))


def _owned_by(resource: Resource, principal: Principal) -> bool:
    # Exact str types were checked first (_is_resource): equal to the checked principal's tenant
    # and subject, they are identifiers too.
    return resource.tenant == principal.tenant and resource.owner == principal.subject


def authorize(spec: ToolSpec, principal: Principal, arguments: Mapping[str, Any],
              resolve: Callable[[Principal, dict[str, Any]], Resource | None] | None) -> Resource | None:
    """The role first, then the resource the call names, inside the caller's tenant and owned by
    the caller's subject: anything else is NOT_FOUND. None for a tool with no resource."""
    if spec.required_role not in principal.roles:
        raise BoundaryError("PERMISSION_DENIED")
    if spec.resource_field is None:
        return None
    if resolve is None:
        raise BoundaryError("HOOK_INVALID")
    try:
        resource = resolve(principal, _own_copy(spec, arguments))
    except Exception as error:  # the host's lookup failed: the host hears it, the model nothing
        raise BoundaryError("HOOK_FAILED") from error
    if resource is None:
        raise BoundaryError("NOT_FOUND")
    if not _is_resource(resource):
        raise BoundaryError("HOOK_INVALID")
    if not _owned_by(resource, principal):
        # Another tenant's or subject's: NOT_FOUND, unless the hook named no tenant or owner at all.
        raise BoundaryError("NOT_FOUND" if is_identifier(resource.tenant) and is_identifier(resource.owner)
                            else "HOOK_INVALID")
    return resource


def check_precondition(hooks: ToolHooks, resource: Resource | None, arguments: Mapping[str, Any]) -> None:
    """The host's rule on the resource's current state, read at execution time: nothing, or one
    of the refusals the tool declared."""
    if hooks.precondition is None:
        return
    try:
        refusal = hooks.precondition(resource, json_copy(dict(arguments)))
    except Exception as error:
        raise BoundaryError("HOOK_FAILED") from error
    if refusal is None:
        return
    if not _member(refusal, hooks.refusals):
        raise BoundaryError("HOOK_INVALID")
    raise BoundaryError(refusal)


# ============================================================================================
# 11. Operation lifecycle, approval, business state, deadline
# ============================================================================================
# The lifecycle of a write, keyed by tenant + subject + tool + idempotency key, one table for
# every store (the in-memory one here, the durable ones in durable/). Any move it does not list
# is refused. A write claims its key before anything can reach the downstream, so a second
# caller with the same key (another thread, another process, a handler that dispatches again)
# finds the claim and never runs a second effect.
#
#   none | released --claim--> claimed            the key is this caller's; nothing has run yet
#   claimed --take_over--> claimed                an expired claim never reached the downstream
#   claimed --release--> released                 a retryable refusal before the downstream
#   claimed --start--> in_progress                from here the downstream may act
#   in_progress --committed--> succeeded          the handler ran and its output passed
#   in_progress --outcome_lost--> unknown         the effect may have happened; its answer was lost
#   in_progress --failed--> released              the tool failed and committed nothing (approval spent)
#   in_progress --take_over--> unknown            an expired holder may have reached the downstream
#   unknown --receipt_confirmed--> reconciled     an explicit status query found the receipt
#   unknown --receipt_absent--> released          the downstream said, with authority, "no effect"
#   unknown --receipt_mismatch--> escalated       the receipt contradicts the record: an operator decides

LIFECYCLE: Final[Mapping[tuple[str, str], str]] = MappingProxyType({
    ("none", "claim"): "claimed",
    ("released", "claim"): "claimed",
    ("claimed", "take_over"): "claimed",
    ("claimed", "release"): "released",
    ("claimed", "start"): "in_progress",
    ("in_progress", "committed"): "succeeded",
    ("in_progress", "outcome_lost"): "unknown",
    ("in_progress", "failed"): "released",
    ("in_progress", "take_over"): "unknown",
    ("unknown", "receipt_confirmed"): "reconciled",
    ("unknown", "receipt_absent"): "released",
    ("unknown", "receipt_mismatch"): "escalated",
})
LIFECYCLE_STATES: Final = frozenset(state for move in LIFECYCLE.items() for state in (move[0][0], move[1]))
LEASED_STATES: Final = frozenset({"claimed", "in_progress"})  # a holder is running it: answer "in progress"
FREE_STATES: Final = frozenset({"none", "released"})  # a write may claim the key
# What the model (and a package's execution.operation_state) sees of a settled state. Escalated
# reads as unknown: only the protected store says that an operator is needed.
MODEL_STATE: Final[Mapping[str, str]] = MappingProxyType({
    "succeeded": "succeeded", "reconciled": "reconciled", "unknown": "unknown", "escalated": "unknown",
})

# What a repeat of the same intent answers, by the settled record's state as the model sees it:
# one of ANSWERS (section 14) and its error code. Nothing runs again.
REPEAT_ANSWER: Final[Mapping[str, tuple[str, str | None]]] = MappingProxyType({
    "succeeded": ("replayed", None),
    "reconciled": ("replayed", None),
    "unknown": ("still_unknown", "OUTCOME_UNKNOWN"),
})


def transition(state: str, event: str) -> str:
    """The state LIFECYCLE gives (state, event), or LIFECYCLE_VIOLATION."""
    try:
        return LIFECYCLE[(state, event)]
    except (KeyError, TypeError):  # TypeError: an unhashable state or event from a damaged store
        raise BoundaryError("LIFECYCLE_VIOLATION") from None


@dataclass(frozen=True, slots=True, kw_only=True)
class OperationRecord:
    """One write's record in a store: its state, the intent it is bound to, and its evidence."""

    state: str
    request_sha256: str
    profile: ProviderProfile
    operation_id: str
    contract: Mapping[str, Any]
    refs: Mapping[str, str | None]
    data: Any = None
    approval: Mapping[str, Any] | None = None  # who approved the execution, and until when
    arguments: Mapping[str, Any] | None = None  # the admitted arguments: what a receipt must echo
    resource_revision: int | None = None  # the revision of the resource the first answer came from


# The fields advance may change (all but the state, which only LIFECYCLE moves).
_RECORD_CHANGES: Final = frozenset(OperationRecord.__slots__) - {"state"}
# Every write builds four records (new, claimed, started, settled): by slot stores, through the
# record's twin (_quick_type, section 6), which builds the value OperationRecord(...) builds, in
# about a third of the time. Positional, in the field order; the fields after the state, read
# as one tuple.
_QUICK_RECORD: Final = _quick_type(OperationRecord)
_RECORD_VALUES: Final = operator.attrgetter(*OperationRecord.__slots__[1:])
_RECORD_INDEX: Final = MappingProxyType({name: index for index, name in enumerate(OperationRecord.__slots__)})


def advance(record: OperationRecord, event: str, **changes: Any) -> OperationRecord:
    """Move a record along LIFECYCLE, or refuse with LIFECYCLE_VIOLATION."""
    state = transition(record.state, event)
    if type(record) is not OperationRecord or not changes.keys() <= _RECORD_CHANGES:
        return replace(record, state=state, **changes)  # a subclass, or a change replace refuses (TypeError)
    # What replace() builds: replace() reads every field's metadata on each call and costs three
    # times as much, three times per write. OperationRecord has no __post_init__ to skip (the twin
    # would refuse to be made); a test holds this to replace() on every field.
    if not changes:
        return _QUICK_RECORD(state, *_RECORD_VALUES(record))
    values = [state, *_RECORD_VALUES(record)]
    for name, value in changes.items():
        values[_RECORD_INDEX[name]] = value
    return _QUICK_RECORD(*values)


# The fields an approval binds. Each must equal exactly the trusted value of the same name, as
# _trusted_binding lists them in this order: the principal's, the call context's, the contract's.
_APPROVAL_BINDING: Final = ("tenant", "subject", "provider", "api_family", "adapter_revision", "response_id",
                            "call_id", "operation_id", "idempotency_key", "contract_revision")


_APPROVAL_BOUND: Final = operator.attrgetter(*_APPROVAL_BINDING)  # an approval's bound fields, as one tuple


def _trusted_binding(principal: Principal, context: CallContext, spec: ToolSpec) -> tuple[Any, ...]:
    return (principal.tenant, principal.subject, context.provider, context.api_family, context.adapter_revision,
            context.response_id, context.call_id, context.operation_id, context.idempotency_key,
            spec.contract_revision)


def check_approval(approval: Any, *, principal: Principal, context: CallContext, spec: ToolSpec,
                   arguments: Mapping[str, Any], approvers: frozenset[str], now: int,
                   consumed: Callable[[str], bool] = lambda _ref: False) -> str:
    """An approval must come from a listed approver, be unused, bind this exact call, and be
    live; answer its reference (approval_ref), which the write then consumes.

    Every path that is not a clean match fails closed, and every field is tested for its exact
    type before its value: a str subclass that claims to equal anything matches nothing. Expiry
    is exclusive: at the expiry instant itself the approval is already dead.
    """
    if approval is None:
        raise BoundaryError("APPROVAL_REQUIRED")
    if type(approval) is not Approval:
        raise BoundaryError("APPROVAL_MISMATCH")
    if not is_identifier(approval.approver) or approval.approver not in approvers:
        raise BoundaryError("APPROVER_NOT_TRUSTED")
    if not (type(approval.expires_at) is int and MIN_TIME <= approval.expires_at <= MAX_TIME):
        raise BoundaryError("APPROVAL_EXPIRED")  # outside the clock's domain: no instant it is live at
    # Every field its reference digests must have a canonical encoding first: a NaN, a cycle or
    # a lone surrogate is a mismatch, not an encoder's exception.
    if not _is_json_exact(approval.arguments):
        raise BoundaryError("APPROVAL_MISMATCH")
    bound = _APPROVAL_BOUND(approval)
    for value in bound:
        if type(value) is not str:
            raise BoundaryError("APPROVAL_MISMATCH")
    if not is_portable_text("".join(bound)):  # exactly when every field is
        raise BoundaryError("APPROVAL_MISMATCH")
    reference = _checked_approval_ref(approval)
    if consumed(reference):
        raise BoundaryError("APPROVAL_CONSUMED")
    if bound != _trusted_binding(principal, context, spec):  # plain strs (above), compared in order
        raise BoundaryError("APPROVAL_MISMATCH")
    if type(approval.arguments) is not dict or not _same_value(approval.arguments, arguments):
        raise BoundaryError("APPROVAL_MISMATCH")  # JSON equality: an approved 1 is no true
    if now >= approval.expires_at:
        raise BoundaryError("APPROVAL_EXPIRED")
    return reference


def _is_json_exact(value: Any) -> bool:
    """A tree of exactly dict (str keys), list, str, int, float, bool and None, no deeper than the
    output limit, in the portable domain (safe integers, finite floats, text UTF-8 can carry): the only values
    an approval's arguments may hold, compared and digested without surprises."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        kind = type(item)
        if depth > MAX_OUTPUT_DEPTH:
            return False
        if kind is dict:
            for key, child in item.items():
                if type(key) is not str or not is_portable_text(key):
                    return False
                stack.append((child, depth + 1))
        elif kind is list:
            stack.extend((child, depth + 1) for child in item)
        elif not _portable_scalar(kind, item) or (kind is str and not is_portable_text(item)):
            return False
    return True


def approval_ref(approval: Approval) -> str:
    """The approval's identity, which a write consumes: domain-separated SHA-256 of every field."""
    return canonical_sha256({"domain": APPROVAL_REF_DOMAIN, "approval": {
        name: getattr(approval, name) for name in Approval.__slots__}})


# approval_ref's envelope, and the approval inside it, with every fixed member encoded once.
_APPROVAL_REF_TEMPLATE: Final = CanonicalTemplate({"domain": APPROVAL_REF_DOMAIN, "approval": SLOT})
_APPROVAL_FIELDS_TEMPLATE: Final = CanonicalTemplate({name: SLOT for name in Approval.__slots__})
_QUOTE: Final = json.encoder.encode_basestring  # a str's canonical text (what _string_text calls)


def _checked_approval_ref(approval: Approval) -> str:
    """approval_ref of an approval check_approval has read: every field a portable str, JSON-exact
    arguments (so no integer beyond +/-(2**53 - 1) to look for), a time. Canonical JSON is
    compositional, so each field's own canonical text fills its slot, in the template's (sorted)
    slot order; tests hold this to approval_ref byte for byte."""
    quote = _QUOTE
    return _APPROVAL_REF_TEMPLATE.sha256(_APPROVAL_FIELDS_TEMPLATE.text(
        quote(approval.adapter_revision), quote(approval.api_family), quote(approval.approver),
        _portable_text(approval.arguments), quote(approval.call_id), quote(approval.contract_revision),
        str(approval.expires_at), quote(approval.idempotency_key), quote(approval.operation_id),
        quote(approval.provider), quote(approval.response_id), quote(approval.subject), quote(approval.tenant)))


def approval_for_call(*, approver: str, principal: Principal, context: CallContext, spec: ToolSpec,
                      arguments: Mapping[str, Any], expires_at: int) -> Approval:
    """The approval a trusted approver gives for exactly this call (what a host's approval flow
    builds once a person said yes to these arguments)."""
    check_principal(principal)
    check_context(context)
    if type(spec) is not ToolSpec:
        raise BoundaryError("REGISTRY_INVALID")
    if type(arguments) not in _PLAIN_MAPPINGS or not _is_json_exact(dict(arguments)):
        raise BoundaryError("APPROVAL_MISMATCH")  # no call's admitted arguments: no approval can bind them
    return Approval(approver=approver, tenant=principal.tenant, subject=principal.subject,
                    provider=context.provider, api_family=context.api_family,
                    adapter_revision=context.adapter_revision, response_id=context.response_id,
                    call_id=context.call_id, operation_id=context.operation_id,
                    idempotency_key=context.idempotency_key or "", arguments=json_copy(dict(arguments)),
                    contract_revision=spec.contract_revision, expires_at=expires_at)


def approval_view(approval: Approval) -> dict[str, Any]:
    """The approval as the audit keeps it: who approved, and until when (the rest it binds is
    already in the call binding: principal, provider call, operation, arguments, contract)."""
    return {"approver": approval.approver, "expires_at": approval.expires_at}


def check_deadline(now: int, deadline: int | None) -> None:
    if deadline is not None and now >= deadline:
        raise BoundaryError("DEADLINE_EXCEEDED")


# ============================================================================================
# 12. The demo host: orders, refunds and their hooks; injected faults
# ============================================================================================
# The shipped tools' host, one host among any: its orders are resources, "paid" is the refund's
# precondition, a mock refund service is the downstream, and its receipts answer status
# queries. Its handlers take a HandlerCall and answer a HandlerResult; OrderDesk turns each into
# ToolHooks. Nothing outside this section knows what an order is.


@dataclass(frozen=True, slots=True)
class Receipt:
    receipt_ref: str
    request_ref: str
    status_ref: str
    effect_revision: str
    producer_revision: str
    draft_id: str
    order_ref: str
    reason: str


_QUICK_RECEIPT: Final = _quick_type(Receipt)


class MockDownstream:
    """The refund service behind the tool: an effect ledger and receipts by status reference.

    It is idempotent on its own request reference, as a careful downstream would be, so a second
    commit of the same request returns the first receipt and adds no effect.
    """

    def __init__(self) -> None:
        self._effects: list[Receipt] = []
        self._by_status: dict[str, Receipt] = {}

    @property
    def effect_count(self) -> int:
        return len(self._effects)

    def effects_for(self, request_ref: str) -> int:
        return sum(1 for receipt in self._effects if receipt.request_ref == request_ref)

    def commit_refund_draft(self, *, request_ref: str, status_ref: str, order_ref: str,
                            reason: str, effect_revision: str, producer_revision: str) -> Receipt:
        existing = self._by_status.get(status_ref)
        if existing is not None:
            return existing
        receipt = refund_draft_receipt(request_ref=request_ref, status_ref=status_ref, order_ref=order_ref,
                                       reason=reason, effect_revision=effect_revision,
                                       producer_revision=producer_revision)
        self._effects.append(receipt)
        self._by_status[status_ref] = receipt
        return receipt

    def receipt(self, status_ref: str | None) -> Receipt | None:
        return None if status_ref is None else self._by_status.get(status_ref)


def refund_draft_receipt(*, request_ref: str, status_ref: str, order_ref: str, reason: str,
                         effect_revision: str, producer_revision: str) -> Receipt:
    """The receipt the mock refund service gives a request: its references derived from the
    request reference, so any store that keeps the mock's effects on disk gives the same one."""
    # Positional, in the field order (receipt_ref, request_ref, status_ref, effect_revision,
    # producer_revision, draft_id, order_ref, reason), through Receipt's twin (_quick_type): one per write.
    return _QUICK_RECEIPT(derived_ref("rc-", "receipt", request_ref), request_ref, status_ref, effect_revision,
                          producer_revision, "DRAFT-" + derived_ref("", "draft", request_ref)[:16], order_ref, reason)


def derived_ref(prefix: str, kind: str, *parts: Any) -> str:
    """A deterministic opaque reference: domain-separated SHA-256 of its parts, 32 hex.

    The digest is canonical_sha256({"domain": DOWNSTREAM_REF_DOMAIN, "kind": kind, "parts": [...]}).
    When the kind and every part are plain portable strings (every write's are: a key, names, a
    digest) each one's canonical text is its quoted self, filled into the envelope's template;
    anything else is encoded whole. Tests hold both ways to the definition byte for byte.
    """
    for part in (kind, *parts):
        if type(part) is not str:
            break
    else:
        text = _DERIVED_REF_TEMPLATE.text(_QUOTE(kind), "[" + ",".join(map(_QUOTE, parts)) + "]")
        if is_portable_text(text):  # exactly when every part is
            return prefix + hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]
    return prefix + canonical_sha256({"domain": DOWNSTREAM_REF_DOMAIN, "kind": kind, "parts": list(parts)})[:32]


_DERIVED_REF_TEMPLATE: Final = CanonicalTemplate({"domain": DOWNSTREAM_REF_DOMAIN, "kind": SLOT, "parts": SLOT})


@dataclass(frozen=True, slots=True)
class HandlerCall:
    spec: ToolSpec
    principal: Principal
    arguments: Mapping[str, Any]
    order: Order
    downstream: Any  # the store's view of the refund service: a claim's own, or read-only for a read
    request_ref: str | None
    status_ref: str | None


_QUICK_HANDLER_CALL: Final = _quick_type(HandlerCall)


@dataclass(frozen=True, slots=True)
class HandlerResult:
    output: Any
    producer_revision: str
    resource_revision: int
    receipt_ref: str | None = None


def handle_get_order(call: HandlerCall) -> HandlerResult:
    order = call.order
    return HandlerResult(
        output={"order_ref": order.order_ref, "status": order.status},
        producer_revision=call.spec.producer_revision,
        resource_revision=order.revision,
    )


def handle_create_refund_draft(call: HandlerCall) -> HandlerResult:
    receipt = call.downstream.commit_refund_draft(
        request_ref=call.request_ref or "",
        status_ref=call.status_ref or "",
        order_ref=call.arguments["order_ref"],
        reason=call.arguments["reason"],
        effect_revision=call.spec.effect_revision,
        producer_revision=call.spec.producer_revision,
    )
    return HandlerResult(
        output=receipt_output(receipt),
        producer_revision=receipt.producer_revision,
        resource_revision=call.order.revision,
        receipt_ref=receipt.receipt_ref,
    )


def receipt_output(receipt: Receipt) -> dict[str, str]:
    return {"draft_id": receipt.draft_id, "order_ref": receipt.order_ref, "reason": receipt.reason}


Handler = Callable[[HandlerCall], HandlerResult]

HANDLERS: Final[Mapping[str, Handler]] = MappingProxyType({
    "get_order": handle_get_order,
    "create_refund_draft": handle_create_refund_draft,
})


REFUNDABLE_STATUS: Final = "paid"  # the one order status a refund draft accepts


def check_refundable(order: Order) -> None:
    # Re-read at execution time: an approval given while the order was paid cannot outlive a
    # change of its state (the demo host's write precondition holds its resource to the same rule).
    if order.status != REFUNDABLE_STATUS:
        raise BoundaryError("ORDER_NOT_REFUNDABLE")


def receipt_fits(receipt: Any, refs: Mapping[str, Any], arguments: Any, spec: ToolSpec) -> bool:
    """A refund receipt is this write's: its request and status references, the tool's effect
    and producer revisions, and on every bound field the write's own arguments (a receipt for
    another order or another reason reconciles nothing); its own reference is an identifier and
    its output passes the tool's output contract. Exact types first: a downstream's object that
    claims to equal anything matches nothing."""
    if (type(receipt) is not Receipt or type(arguments) not in _PLAIN_MAPPINGS
            or not is_identifier(receipt.receipt_ref) or spec.output_contract is None
            or not spec.output_contract.admits(receipt_output(receipt))):
        return False
    wanted = (refs["request_ref"], refs["status_ref"], spec.effect_revision, spec.producer_revision)
    seen = (receipt.request_ref, receipt.status_ref, receipt.effect_revision, receipt.producer_revision)
    # Both sides by exact type (_same_value): the record's values come from a store, and a str
    # subclass there would equal any receipt's; a 1 never matches a true.
    if not all(type(value) is str and _same_value(value, want) for value, want in zip(seen, wanted)):
        return False
    output = receipt_output(receipt)
    return all(_same_value(output[name], arguments.get(name)) for name in spec.bound_fields if name in output)


# The demo host's world, by exact container type: a mapping is never read as the list of its keys.
_ORDER_COLLECTIONS: Final = (list, tuple)


def _world_orders(orders: Any) -> dict[tuple[str, str], Order]:
    """The host's orders by (tenant, order_ref), each held to the fixture's order table (section 6):
    a status that claims to equal "paid", or a revision no package may carry, is refused here."""
    if type(orders) not in _ORDER_COLLECTIONS:
        raise BoundaryError("CONTEXT_INVALID", "orders")
    by_key: dict[tuple[str, str], Order] = {}
    for index, order in enumerate(orders):
        if type(order) is not Order or not all(check(getattr(order, name)) for name, check in _ORDER.checks):
            raise BoundaryError("CONTEXT_INVALID", f"orders[{index}]")
        by_key[(order.tenant, order.order_ref)] = order
    if len(by_key) != len(orders):  # a repeated order: which one is the business state?
        raise BoundaryError("CONTEXT_INVALID", "orders")
    return by_key


class OrderDesk:
    """The demo host: the world's orders by (tenant, order_ref), and the hooks of every tool that
    has an order handler (the shipped two, and a host's own through ``handlers``).

    resolve     the order the tool's resource field names, in the caller's tenant
    precondition  a write needs a paid order (ORDER_NOT_REFUNDABLE), read again before it runs
    execute     the handler, over the store's view of the refund service; a write is committed
                when that view saw its one effect, and unknown when it saw none
    status      the refund service's receipt under the write's status reference: its absence is
                authoritative, since the mock commits inside the handler or not at all
    """

    def __init__(self, orders: Sequence[Order] = (), handlers: Mapping[str, Handler] | None = None) -> None:
        self._orders = _world_orders(orders)
        # Each order as a Resource, built once per revision: (the order, its resource) by key.
        self._resources: dict[tuple[str, str], tuple[Order, Resource]] = {}
        if handlers is not None and not (isinstance(handlers, Mapping) and plain_keys(handlers)):
            raise BoundaryError("TOOL_HANDLER_MISSING", "handlers")  # no tool name can find a handler there
        self._handlers: Mapping[str, Handler] = MappingProxyType({**HANDLERS, **(handlers or {})})

    def set_status(self, tenant: str, order_ref: str, status: str) -> None:
        """A trusted change of business state; the order's resource revision moves on."""
        order = self._orders.get((tenant, order_ref)) if type(tenant) is str and type(order_ref) is str else None
        if order is None or not _member(status, ORDER_STATUSES) or order.revision >= MAX_REVISION:
            raise BoundaryError("CONTEXT_INVALID")  # an order's revision stays inside what a package may say
        self._orders[(tenant, order_ref)] = replace(order, status=status, revision=order.revision + 1)

    def hooks(self, registry: Mapping[str, ToolSpec]) -> dict[str, ToolHooks]:
        """ToolHooks for each registry tool with a callable handler and a resource field (an order)."""
        return {name: self._tool_hooks(spec, handler) for name, spec in registry.items()
                if spec.resource_field is not None and callable(handler := self._handlers.get(name))}

    def _tool_hooks(self, spec: ToolSpec, handler: Handler) -> ToolHooks:
        field_name = spec.resource_field

        def resolve(principal: Principal, arguments: dict[str, Any]) -> Resource | None:
            key = (principal.tenant, arguments[field_name])
            order = self._orders.get(key)
            if order is None:
                return None
            cached = self._resources.get(key)
            if cached is None or cached[0] is not order:
                cached = (order, Resource(kind="order", ref=order.order_ref, tenant=order.tenant, owner=order.owner,
                                          revision=order.revision, state=order.status))
                self._resources[key] = cached
            return cached[1]

        def precondition(resource: Resource | None, _arguments: dict[str, Any]) -> str | None:
            return None if resource is not None and resource.state == REFUNDABLE_STATUS else "ORDER_NOT_REFUNDABLE"

        def execute(call: ExecuteCall) -> Execution:
            resource = call.resource
            cached = self._resources.get((resource.tenant, resource.ref))
            order = cached[0] if cached is not None and cached[1] is resource else Order(
                resource.tenant, resource.ref, resource.owner, resource.state, resource.revision)
            result = handler(_QUICK_HANDLER_CALL(spec, call.principal, call.arguments, order, call.downstream,
                                                 call.request_ref, call.status_ref))  # HandlerCall's twin
            if type(result) is not HandlerResult:
                return result  # no Execution: refused as an output outside the contract
            effect = "none"
            receipt_ref = result.receipt_ref
            if spec.effect == "write":
                effect = "committed" if getattr(call.downstream, "created", 0) == 1 else "unknown"
                receipt_ref = receipt_ref if receipt_ref is not None else ""  # the service always issues one
            return Execution(result.output, effect, receipt_ref, result.producer_revision, result.resource_revision)

        def status(query: StatusQuery) -> StatusAnswer:
            receipt = query.downstream.receipt(query.status_ref)
            if receipt is None:
                return StatusAnswer("absent")
            if not receipt_fits(receipt, {"request_ref": query.request_ref, "status_ref": query.status_ref},
                                query.arguments, spec):
                return StatusAnswer("conflict")
            return StatusAnswer("receipt", receipt.receipt_ref, receipt_output(receipt))

        write = spec.effect == "write"
        return ToolHooks(execute=execute, resolve=resolve, precondition=precondition if write else None,
                         status=status if write else None,
                         refusals=frozenset({"ORDER_NOT_REFUNDABLE"}) if write else frozenset())


# -- Injected faults ---------------------------------------------------------------------------
# Faults the trusted host (fixture or test) injects around any tool's execute hook. An execute
# hook may raise ResponseLost itself to say that its answer was lost.


class ResponseLost(Exception):
    """The tool may have committed, but its answer never came back: the outcome is unknown."""


class InjectedHandlerFailure(Exception):
    """Injected: the handler raised after it had already committed."""


def _fail_before_commit(_call: ExecuteCall) -> NoReturn:
    raise InjectedHandlerFailure


def _lose_response(_result: Execution) -> NoReturn:
    raise ResponseLost


def _fail_after_commit(_result: Execution) -> NoReturn:
    raise InjectedHandlerFailure


def _corrupt_output(result: Execution) -> Execution:
    # A control field smuggled into the output: the exact output contract must refuse it.
    return result._replace(output={**result.output, "status": "submitted"})


# Faults injected by the trusted host (fixture or test), before or after the handler runs.
FAULTS_BEFORE_HANDLER: Final[Mapping[str, str]] = MappingProxyType({
    "timeout_before_execution": "DEADLINE_EXCEEDED",
    "rate_limited": "RATE_LIMITED",
})
FAULTS_AFTER_HANDLER: Final[Mapping[str, Callable[[Execution], Execution]]] = MappingProxyType({
    "timeout_after_commit": _lose_response,
    "handler_raises": _fail_after_commit,
    "invalid_output": _corrupt_output,
})
# Injected instead of the handler: it fails before it reaches the downstream (no effect, but the
# boundary cannot know that: the outcome is unknown until a status query asks the downstream).
FAULTS_INSTEAD_OF_HANDLER: Final[Mapping[str, Callable[[ExecuteCall], Execution]]] = MappingProxyType({
    "handler_fails_before_commit": _fail_before_commit,
})
# A status query's one fault: the receipt store does not answer.
FAULTS_BEFORE_RECEIPT: Final = frozenset({"receipt_unavailable"})
# Every fault a host may inject, by purpose, derived from the tables above ("none": no fault).
FAULTS: Final[Mapping[str, frozenset[str]]] = MappingProxyType({
    "dispatch": frozenset({"none", *FAULTS_BEFORE_HANDLER, *FAULTS_INSTEAD_OF_HANDLER, *FAULTS_AFTER_HANDLER}),
    "query_status": frozenset({"none", *FAULTS_BEFORE_RECEIPT}),
})


# ============================================================================================
# 13. Output contracts
# ============================================================================================
# Checked in an order that keeps every step bounded: a non-recursive scan for depth, width,
# JSON types and sensitive fields; then the canonical size; then the exact fields and values;
# then the binding to the request (input fields echoed, producer and resource revisions).

# The secret scan. A handler's output must never carry a credential to the model, whatever its
# contract says: a free-text tool has no exact field list to refuse an extra key, so the scan is
# the only guard there. Two rules, both linear in the text: keys, read from the tables of
# section 8 ("Output field names that read as secrets"), and values, from the tables below.
#
# Values. A string is a secret when it contains one of SECRET_VALUE_SHAPES anywhere, except the
# authorization header shape, which must be the whole value. A key or token shape counts only at
# a word start (the character before it is not one of A-Z a-z 0-9 _ -): "ask-me" is no "sk-" key.
# Linear time: every repeat is possessive or of a fixed or closed length, and a repeat that
# follows a word start stays inside that word (a JWT: inside two dot-separated segments; a URL:
# before the next "/"), so no character is read by more than a few attempts, whatever the string.
# Every shape but the anchored header begins with a literal, which keeps the combined search fast.
# Provider keys carry 20 or more random characters after their prefix; asking for 16 keeps a
# margin and leaves words such as "sk-learn" alone. Their characters are random letters of both
# cases and digits, so a body of only lower-case letters, "_" and "-" is prose or a name
# ("sk-learn-cross-validation-guide"): the body must hold a capital or a digit (16 random
# characters lack both about once in a million keys). The look for it stays inside the body.
MIN_SECRET_KEY_BODY: Final = 16
SECRET_KEY_PREFIXES: Final = (
    "sk-", "sk_live_", "sk_test_", "rk_live_", "rk_test_", "ghp_", "gho_", "ghu_", "ghs_", "github_pat_",
    "xoxb-", "xoxp-", "glpat-",
)


def _at_word_start(literal: str) -> str:
    """A pattern for `literal` where no word character comes right before it."""
    return re.escape(literal) + "(?<![A-Za-z0-9_-]" + re.escape(literal) + ")"


_WORD_END: Final = r"(?![A-Za-z0-9_-])"
SECRET_VALUE_SHAPES: Final[Mapping[str, str]] = MappingProxyType({
    # The whole value is an HTTP authorization header value, or the header line itself: a scheme,
    # spaces or tabs or a colon, one credential (token68); "Bearer: x" and "bearer<TAB>x" are how
    # logs and configs write it too. "Basic support is included" is prose and passes; "Basic plan"
    # does not.
    "authorization_header": (r"\A\s*+(?i:authorization[ \t]*+:[ \t]*+)?(?i:bearer|basic)(?::[ \t]*+|[ \t]++)"
                             r"[A-Za-z0-9._~+/=-]++\s*+\Z"),
    # A JSON Web Token: base64url header and payload, both JSON objects ("eyJ" is '{"'), then a dot.
    "jwt": _at_word_start("eyJ") + r"[A-Za-z0-9_-]++\.eyJ[A-Za-z0-9_-]++\.",
    # A PEM private key block of any key type that writes one.
    "pem_private_key": r"-----BEGIN (?:RSA |EC |DSA |OPENSSH |ENCRYPTED |PGP )?PRIVATE KEY",
    # A URL whose userinfo carries a password: scheme://user:password@host.
    "url_password": r"://[^\s/?#@:]*+:[^\s/?#@]++@",
    # OpenAI, Stripe, GitHub, Slack and GitLab keys: a documented prefix, then the key body.
    "provider_key": ("(?:" + "|".join(map(_at_word_start, SECRET_KEY_PREFIXES)) + ")"
                     + "(?=[a-z_-]*+[A-Z0-9])[A-Za-z0-9_-]{%d,}+" % MIN_SECRET_KEY_BODY),
    # An AWS access key id (long-term AKIA, temporary ASIA): exactly 20 upper-case alphanumerics.
    "aws_access_key_id": "(?:" + _at_word_start("AKIA") + "|" + _at_word_start("ASIA") + ")[A-Z0-9]{16}" + _WORD_END,
    # A Google API key: AIza and 35 more characters.
    "google_api_key": _at_word_start("AIza") + "[A-Za-z0-9_-]{35}" + _WORD_END,
})
_SECRET_VALUE: Final = re.compile("|".join(f"(?:{shape})" for shape in SECRET_VALUE_SHAPES.values()))
_SCALARS: Final = frozenset({str, int, bool, type(None)})


def _portable_scalar(kind: type, item: Any) -> bool:
    """A JSON scalar of the portable domain: a safe integer, a portable float, a str, a bool, null."""
    if kind is float:
        return is_portable_float(item)
    return kind in _SCALARS and (kind is not int or -MAX_SAFE_INTEGER <= item <= MAX_SAFE_INTEGER)


def is_secret_text(text: str) -> bool:
    """Whether an output string carries one of SECRET_VALUE_SHAPES; linear in the text."""
    return _SECRET_VALUE.search(text) is not None


# Upper bounds of canonical bytes, for a size check that rarely needs to encode: a character
# takes at most 6 bytes (a control character becomes \u001f; UTF-8 takes at most 4), a scalar
# other than a string at most 24 (a double's canonical text: 17 digits, a sign, a point, and
# "e-308"; no safe integer is longer), and every value, key or container adds at most 3 more
# (quotes or brackets, and the comma or colon after it).
_MAX_BYTES_PER_CHAR: Final = 6
_MAX_SCALAR_BYTES: Final = len("-2.2250738585072014e-308")
_MAX_FRAME_BYTES: Final = 3


def scan_output(value: Any, *, max_depth: int = MAX_OUTPUT_DEPTH, max_nodes: int = MAX_OUTPUT_NODES) -> int:
    """Walk a handler output without recursion; refuse depth, width, non-JSON types, text UTF-8
    cannot carry and secrets. Return an upper bound of the output's canonical size in bytes."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    nodes = 0
    bound = 0
    while stack:
        item, depth = stack.pop()
        nodes += 1
        if nodes > max_nodes:
            raise BoundaryError("OUTPUT_TOO_LARGE")
        bound += _MAX_FRAME_BYTES
        kind = type(item)
        if kind is dict or kind is list:
            if depth >= max_depth:
                raise BoundaryError("OUTPUT_TOO_DEEP")
            if kind is list:
                stack.extend((child, depth + 1) for child in item)
                continue
            for key, child in item.items():
                if type(key) is not str or not (key.isascii() or is_portable_text(key)):
                    raise BoundaryError("OUTPUT_CONTRACT_VIOLATION")
                if is_secret_key(key):
                    raise BoundaryError("OUTPUT_SENSITIVE_FIELD")
                bound += _MAX_FRAME_BYTES + _MAX_BYTES_PER_CHAR * len(key)
                stack.append((child, depth + 1))
        elif kind is str:
            if not (item.isascii() or is_portable_text(item)):  # the ASCII test first: no call
                raise BoundaryError("OUTPUT_CONTRACT_VIOLATION")
            if is_secret_text(item):
                raise BoundaryError("OUTPUT_SENSITIVE_FIELD")
            bound += _MAX_BYTES_PER_CHAR * len(item)
        elif not _portable_scalar(kind, item):
            raise BoundaryError("OUTPUT_CONTRACT_VIOLATION")
        else:
            bound += _MAX_SCALAR_BYTES
    return bound


def check_output(spec: ToolSpec, result: Any, arguments: Mapping[str, Any], revision: int | None,
                 *, max_bytes: int = MAX_OUTPUT_BYTES, max_nodes: int = MAX_OUTPUT_NODES) -> dict[str, Any]:
    """Admit an execute hook's Execution as model data, or raise the OUTPUT_* code that refuses it.
    ``revision`` is the resolved resource's (None: a tool with no resource). A tool that declares
    no output schema answers text (a str), admitted as the data {"text": ...} (TEXT_OUTPUT)."""
    if type(result) is not Execution:
        raise BoundaryError("OUTPUT_CONTRACT_VIOLATION")
    output = None if type(result.output) is not dict else _quick_checked_output(spec, result.output, max_bytes,
                                                                                  max_nodes)
    if output is None:
        output = _fully_checked_output(spec, result.output, max_bytes, max_nodes)
    for field in spec.bound_fields:  # required on both sides (the contract loader checks it)
        if not _same_value(output[field], arguments[field]):
            raise BoundaryError("OUTPUT_BINDING_MISMATCH")
    # Exact types first: a revision that claims to equal anything binds nothing. A receipt
    # reference becomes the package's downstream evidence, so it must be an identifier too.
    producer = spec.producer_revision if result.producer_revision is None else result.producer_revision
    resource_revision = revision if result.resource_revision is None else result.resource_revision
    if (type(producer) is not str or producer != spec.producer_revision
            or type(resource_revision) is not type(revision) or resource_revision != revision
            or not _member(result.effect, EFFECT_REPORTS[spec.effect])
            or (result.receipt_ref is not None and not is_identifier(result.receipt_ref))
            or (spec.effect == "read" and result.receipt_ref is not None)):
        raise BoundaryError("OUTPUT_BINDING_MISMATCH")
    return output  # the copy that was checked: nobody else holds it


def _fully_checked_output(spec: ToolSpec, output: Any, max_bytes: int, max_nodes: int) -> Any:
    """The checked copy of any output, or the OUTPUT_* code that refuses it: its scan (shape,
    text, secrets), its size, then its contract."""
    if spec.output_contract is None:
        if type(output) is not str:
            raise BoundaryError("OUTPUT_CONTRACT_VIOLATION")
        output = _as_data(spec, output)
    else:
        output = _hook_output_copy(spec, output, max_nodes=max_nodes)
    # Encoded only when the scan's upper bound does not already prove the size within the limit.
    if scan_output(output, max_nodes=max_nodes) > max_bytes and len(canonical_json(output)) > max_bytes:
        raise BoundaryError("OUTPUT_TOO_LARGE")
    check_output_fields(spec, output)
    return output


def _quick_checked_output(spec: ToolSpec, output: dict[str, Any], max_bytes: int, max_nodes: int) -> Any:
    """check_output's quick path for a contract whose properties are all scalars (most tools):
    the same checks of the same copy in one pass (the node count, the contract's key set and each
    value's rule, the secret shapes, the size bound, as scan_output counts it), which returns the
    checked copy, or None at the first doubt, and the full path then names the fault in its own
    order. It never admits what the full path refuses: a key is one of the contract's names
    (portable, and none of them names a secret, or there is no quick path), and a value that
    passes its scalar rule is a portable scalar."""
    table = spec._quick_output
    if table is _UNBUILT:
        table = _quick_output_table(spec.output_contract)
        object.__setattr__(spec, "_quick_output", table)
    if table is None:
        return None
    copy = dict(output)  # first: what is checked is what the model gets
    if len(copy) >= max_nodes or not spec.output_contract.rules[0].required <= copy.keys():
        return None
    bound = _MAX_FRAME_BYTES
    try:
        for key, value in copy.items():
            if type(key) is not str:  # before the lookup: a str subclass may hash like a name
                return None
            entry = table.get(key)
            if entry is None:
                return None
            check, rule, at, frame = entry
            check(rule, value, at, None)
            if type(value) is str:
                if is_secret_text(value):
                    return None
                bound += frame + _MAX_BYTES_PER_CHAR * len(value)
            else:
                bound += frame + _MAX_SCALAR_BYTES
    except BoundaryError:
        return None
    return copy if bound <= max_bytes else None


def _quick_output_table(contract: CompiledSchema | None) -> Mapping[str, tuple[Any, Rule, str, int]] | None:
    flat = None if contract is None else contract._flat
    if flat is None or any(is_secret_key(name) for name in flat):
        return None
    return MappingProxyType({
        name: (check, rule, at, 2 * _MAX_FRAME_BYTES + _MAX_BYTES_PER_CHAR * len(name))
        for name, (check, rule, at) in flat.items()})


def _hook_output_copy(spec: ToolSpec, output: Any, *, max_nodes: int = MAX_OUTPUT_NODES) -> Any:
    """The copy of an execute or a status hook's output that is checked and then given to the
    model, taken before any check: the host may still hold the object it returned, and change it
    (another thread, a shared cache), so what was checked is what the model gets. An object of
    scalars is copied at once; a nested one is scanned first (scan_output: its codes), so the
    copy's walk is bounded. Anything but an object is left as it is, for the checks to refuse."""
    if type(output) is not dict:
        return output
    if spec._flat_output:
        return dict(output)
    scan_output(output, max_nodes=max_nodes)
    try:
        return json_copy(output)
    except RecursionError:  # grown deeper than its scan saw: changed while it was read
        raise BoundaryError("OUTPUT_TOO_DEEP") from None


def check_output_fields(spec: ToolSpec, output: Any) -> None:
    """Exactly what the compiled output contract admits (TEXT_OUTPUT for a tool that declares none)."""
    contract = output_contract(spec)
    try:
        contract.check(output)
    except BoundaryError as refusal:
        if refusal.scope != "value":
            raise
        raise BoundaryError("OUTPUT_CONTRACT_VIOLATION") from None


# What a tool that declares no output schema answers, as its package's data: one text, bounded by
# the tool's output limits (MAX_OUTPUT_BYTES_CEILING at most), UTF-8 clean and secret-scanned like
# any output, and shown to the model as untrusted data. Most real tools declare no output schema.
TEXT_OUTPUT_SCHEMA: Final[Mapping[str, Any]] = MappingProxyType({
    "type": "object", "properties": {"text": {"type": "string", "maxLength": MAX_OUTPUT_BYTES_CEILING}},
    "required": ["text"], "additionalProperties": False,
})


def _text_output_contract() -> CompiledSchema:
    # The contract language caps a string at DEFAULT_MAX_LENGTH; a text output's own cap is the
    # output ceiling, so the compiled rule is widened to it (the output byte limit binds first).
    compiled = compile_schema({**json_copy(dict(TEXT_OUTPUT_SCHEMA)), "properties": {
        "text": {"type": "string", "maxLength": DEFAULT_MAX_LENGTH}}})
    rules = tuple(replace(rule, max_length=MAX_OUTPUT_BYTES_CEILING) if type(rule) is StringRule else rule
                  for rule in compiled.rules)
    return replace(compiled, rules=rules, source_sha256=canonical_sha256(dict(TEXT_OUTPUT_SCHEMA)))


TEXT_OUTPUT: Final = _text_output_contract()


def output_contract(spec: ToolSpec) -> CompiledSchema:
    """The contract a tool's output is held to: its own, or TEXT_OUTPUT for a tool without one."""
    return TEXT_OUTPUT if spec.output_contract is None else spec.output_contract


def _same_value(first: Any, second: Any) -> bool:
    """JSON equality of two JSON values: 1 and true differ here (Python's == says they are equal)."""
    kind = type(first)
    if kind is not type(second):
        return False
    if kind is dict and _only_text(first):  # every shipped tool's arguments: no encoding needed
        return first == second and _only_text(second)
    if kind is dict or kind is list:
        return canonical_text(first) == canonical_text(second)
    return first == second


def _only_text(mapping: dict[Any, Any]) -> bool:
    for item in mapping.values():
        if type(item) is not str:
            return False
    return True


# ============================================================================================
# 14. Projections
# ============================================================================================
# model_result: what the model may see. Its top-level `status` is the control plane's verdict;
# a business `data.status` (an order's "paid") lives inside `data` and can never stand in for it.
# protected_audit: what the model never sees (built in section 16, digested in section 15).

_NO_REFS: Final[Mapping[str, None]] = MappingProxyType(
    {"request_ref": None, "receipt_ref": None, "status_ref": None}
)


@dataclass(frozen=True, slots=True)
class Answer:
    """One kind of package the dispatcher builds: every field a verifier can hold it to."""

    status: str
    outcome: str
    delivery: str
    codes: frozenset[str]  # the error codes it may carry; empty: it carries data
    states: frozenset[str]  # execution.operation_state
    effect: str  # the tool's effect: "read", "write", or "any" (refused before it mattered)
    handler_invoked: bool
    effects: frozenset[int]  # execution.effects
    approved: bool  # the audit names the approval that let the write run
    refs: str  # downstream evidence, _REFS_PRESENT: "none", "pending" (request and status refs), "issued"
    # (request and status refs, and the receipt when the downstream issued one)
    purposes: frozenset[str]


# Refusals before anything ran (the dispatcher's own verdicts), and what a failed execution says.
_REFUSAL_CODES: Final = frozenset({
    "INVALID_PROPOSAL", "UNKNOWN_TOOL", "INVALID_ARGUMENTS", "CALL_CONFLICT", "PERMISSION_DENIED", "NOT_FOUND",
    "IDEMPOTENCY_KEY_REQUIRED", "IDEMPOTENCY_CONFLICT", "APPROVAL_REQUIRED", "APPROVER_NOT_TRUSTED",
    "APPROVAL_MISMATCH", "APPROVAL_EXPIRED", "APPROVAL_CONSUMED", "STATUS_CONFLICT", "DEADLINE_EXCEEDED",
    "RATE_LIMITED", *PRECONDITION_CODES,
})
_OUTPUT_REFUSALS: Final = frozenset({
    "OUTPUT_CONTRACT_VIOLATION", "OUTPUT_SENSITIVE_FIELD", "OUTPUT_TOO_LARGE", "OUTPUT_TOO_DEEP",
    "OUTPUT_BINDING_MISMATCH",
})
_EXECUTION_FAILURES: Final = _OUTPUT_REFUSALS | {"HANDLER_FAILED"}
_ANY_PURPOSE: Final = frozenset({"dispatch", "query_status"})
_DISPATCH_ONLY: Final = frozenset({"dispatch"})
_QUERY_ONLY: Final = frozenset({"query_status"})
_NONE: Final = frozenset({"none"})
_ZERO: Final = frozenset({0})
_ZERO_OR_ONE: Final = frozenset({0, 1})

# Every package the dispatcher can build, and only those: the projection builds each model_result
# from its row, and package verification refuses any combination outside the table.
ANSWERS: Final[Mapping[str, Answer]] = MappingProxyType({
    "refused": Answer("error", "not_executed", "none", _REFUSAL_CODES, _NONE, "any", False, _ZERO, False,
                      "none", _ANY_PURPOSE),
    "read": Answer("ok", "succeeded", "fresh", frozenset(), _NONE, "read", True, _ZERO, False, "none",
                   _DISPATCH_ONLY),
    "read_failed": Answer("error", "failed", "none", _EXECUTION_FAILURES | {"DEADLINE_EXCEEDED", "TOOL_FAILED"},
                          _NONE, "read", True, _ZERO, False, "none", _DISPATCH_ONLY),
    # fresh for a write: its hook reported the effect committed, so there is exactly one.
    "written": Answer("ok", "succeeded", "fresh", frozenset(), frozenset({"succeeded"}), "write", True,
                      frozenset({1}), True, "issued", _DISPATCH_ONLY),
    "write_failed": Answer("error", "failed", "none", frozenset({"TOOL_FAILED"}), _NONE, "write", True, _ZERO, True,
                           "pending", _DISPATCH_ONLY),
    "write_unknown": Answer("unknown", "unknown", "none", _EXECUTION_FAILURES | {"OUTCOME_UNKNOWN"},
                            frozenset({"unknown"}), "write", True, _ZERO_OR_ONE, True, "pending", _DISPATCH_ONLY),
    "replayed": Answer("ok", "succeeded", "local_replay", frozenset(), frozenset({"succeeded", "reconciled"}),
                       "write", False, _ZERO, True, "issued", _ANY_PURPOSE),
    "still_unknown": Answer("unknown", "unknown", "none", frozenset({"OUTCOME_UNKNOWN"}), frozenset({"unknown"}),
                            "write", False, _ZERO, True, "pending", _DISPATCH_ONLY),
    "receipt_unavailable": Answer("unknown", "unknown", "none",
                                  frozenset({"RECEIPT_UNAVAILABLE", "RECONCILIATION_REQUIRED"}),
                                  frozenset({"unknown"}), "write", False, _ZERO, True, "pending", _QUERY_ONLY),
    "reconciled": Answer("ok", "succeeded", "receipt_reconciled", frozenset(), frozenset({"reconciled"}), "write",
                         False, _ZERO, True, "issued", _QUERY_ONLY),
    "not_executed": Answer("error", "not_executed", "none", frozenset({"OPERATION_NOT_EXECUTED"}), _NONE, "write",
                           False, _ZERO, True, "pending", _QUERY_ONLY),
})
# Where a package's downstream references must be present, by Answer.refs.
_REFS_PRESENT: Final[Mapping[str, frozenset[tuple[bool, bool, bool]]]] = MappingProxyType({
    # (request_ref, status_ref, receipt_ref)
    "none": frozenset({(False, False, False)}), "pending": frozenset({(True, True, False)}),
    "issued": frozenset({(True, True, False), (True, True, True)}),
})
# ANSWERS by what a model_result says first (status, outcome, delivery): a verifier compares a
# package with these few rows only, rather than with every row.
_ANSWERS_BY_HEAD: Final[Mapping[tuple[str, str, str], tuple[Answer, ...]]] = MappingProxyType({
    head: tuple(answer for answer in ANSWERS.values() if (answer.status, answer.outcome, answer.delivery) == head)
    for head in {(answer.status, answer.outcome, answer.delivery) for answer in ANSWERS.values()}
})


def recovery_for(status: str, code: str | None) -> str:
    if status == "unknown":
        return "query_status"
    if code is not None and ERROR_CATALOG[code].retryable:
        return "retry"
    return "none"


def project_model_result(spec: ToolSpec | None, answer: str, *, data: Any = None,
                         code: str | None = None) -> dict[str, Any]:
    """The model_result of one of ANSWERS: its status, outcome and delivery, with data or an error."""
    return _project(answer, None if spec is None else (spec.name, spec.producer), data, code)


def _project(answer: str, tool: tuple[str, str] | None, data: Any, code: str | None) -> dict[str, Any]:
    # tool: the spec's name and producer, None before the registry named one.
    row = ANSWERS[answer]
    status = row.status
    succeeded = status == "ok"
    result: dict[str, Any] = {
        "version": MODEL_RESULT_VERSION,
        "status": status,
        "outcome": row.outcome,
        "delivery": row.delivery,
        "complete": succeeded,
        "truncated": False,  # outputs over their limit are refused, never cut
        "recovery": recovery_for(status, code),
        "source": {
            "tool": None if tool is None else tool[0],
            "producer": tool[1] if succeeded and tool is not None else BOUNDARY_PRODUCER,
        },
        "trust": "untrusted_data" if succeeded else "boundary_control",
    }
    if succeeded:
        result["data"] = data
    else:
        result["error"] = error_view(code or "HANDLER_FAILED")
    return result


# ============================================================================================
# 15. Digests and seals
# ============================================================================================
# Each digest is SHA-256 over the canonical JSON of a domain-separated envelope. They detect
# change; they are not signatures: whoever can rewrite a package can recompute them. A seal is:
# HMAC-SHA256 under a key the host holds, over the call-binding digest (which binds everything
# else), so a verifier holding the key knows the package came from a key holder.

_NULL_CONTRACT: Final[Mapping[str, None]] = MappingProxyType(
    {"tool": None, "input_revision": None, "output_revision": None, "effect_revision": None}
)


def request_sha256(principal: Mapping[str, Any], tool_contract: Mapping[str, Any] | None,
                   arguments: Mapping[str, Any] | None) -> str:
    """The business intent: principal + tool + arguments + input/output/effect revisions.

    The idempotency key is left out on purpose: two keys can carry the same intent, and the key
    belongs to the call's execution identity, which call_binding_sha256 binds.
    """
    return canonical_sha256(_request_envelope(principal, tool_contract or _NULL_CONTRACT, arguments))


def result_sha256(model_result: Mapping[str, Any]) -> str:
    """The whole model_result, exactly as the model will see it."""
    return canonical_sha256(_result_envelope(model_result))


def call_binding_sha256(provider_context: Mapping[str, Any], tool_contract: Mapping[str, Any] | None,
                        request_digest: str, result_digest: str, downstream: Mapping[str, Any],
                        approval: Mapping[str, Any] | None, evidence: Mapping[str, Any]) -> str:
    """Ties the result to one provider call: turn, ids, key, contracts, digests, downstream refs,
    the approver whose approval let the effect happen (null when no write ran on one), and the
    evidence of what happened (evidence_view: execution, redactions, resource revision)."""
    return canonical_sha256(_binding_envelope(provider_context, tool_contract, request_digest, result_digest,
                                              downstream, approval, evidence))


def evidence_view(package: Mapping[str, Any]) -> dict[str, Any]:
    """What a package says happened, as the call binding binds it: the execution block (did an
    effect happen), the audit's redactions and the resource revision the data came from."""
    audit = package["protected_audit"]
    return {"execution": package["execution"], "redactions": audit["redactions"],
            "resource_revision": audit["resource_revision"]}


def _request_envelope(principal: Any, contract: Mapping[str, Any], arguments: Any) -> dict[str, Any]:
    return {
        "domain": REQUEST_DIGEST_DOMAIN,
        "principal": principal,
        "tool": contract["tool"],
        "arguments": arguments,
        "input_revision": contract["input_revision"],
        "output_revision": contract["output_revision"],
        "effect_revision": contract["effect_revision"],
    }


def _result_envelope(model_result: Any) -> dict[str, Any]:
    return {"domain": RESULT_DIGEST_DOMAIN, "model_result": model_result}


def _binding_envelope(provider_context: Any, tool_contract: Any, request_digest: Any, result_digest: Any,
                      downstream: Any, approval: Any, evidence: Any) -> dict[str, Any]:
    return {
        "domain": CALL_BINDING_DIGEST_DOMAIN,
        "provider_context": provider_context,
        "tool_contract": tool_contract,
        "request_sha256": request_digest,
        "result_sha256": result_digest,
        "downstream": downstream,
        "approval": approval,
        "evidence": evidence,
    }


# The same three digests for a registered tool, from templates: each envelope above with its
# fixed members (domain, tool, revisions, the whole contract) encoded once per contract. This is
# where a dispatch and a verification spend most of their time; tests hold every template to the
# definitions above byte for byte.

_RESULT_TEMPLATE: Final = CanonicalTemplate(_result_envelope(SLOT))  # slots: model_result
_DATA_ANSWERS: Final = frozenset(name for name, answer in ANSWERS.items() if answer.status == "ok")


@functools.lru_cache(maxsize=TEMPLATE_CACHE * len(_DATA_ANSWERS))
def _data_frame(answer: str, tool: tuple[str, str]) -> CanonicalTemplate:
    # A data answer's model_result with its data as the one slot, built by the projection itself:
    # every other member is fixed by the answer and the tool (a registered spec's name and
    # producer, plain strings).
    return CanonicalTemplate(_project(answer, tool, SLOT, None))


def project_data_result(spec: ToolSpec, answer: str, data: Any) -> tuple[dict[str, Any], str]:
    """project_model_result of a data answer (one whose status is "ok"), and its canonical text:
    only the data is encoded, inside a frame built once per answer and tool. The data is what the
    tool's output contract admitted (every integer within +/-(2**53 - 1))."""
    if answer not in _DATA_ANSWERS:
        raise ValueError("not a data answer")  # a programming error, never a package
    tool = (spec.name, spec.producer)
    model_result = _project(answer, tool, data, None)
    if type(tool[0]) is not str or type(tool[1]) is not str:
        # Never a cache key: a str subclass can hash and compare like a registered tool's name.
        return model_result, _portable_text(model_result)
    return model_result, _data_frame(answer, tool).text(_portable_text(data))


@functools.lru_cache(maxsize=TEMPLATE_CACHE)
def _contract_templates(contract: tuple[tuple[str, str], ...]) -> tuple[CanonicalTemplate, str]:
    view = dict(contract)
    # The call binding's one fixed member that varies by tool, "tool_contract", sorts after every
    # other member of its envelope: the envelope's text is the text of the other members, its
    # closing "}" replaced by this tail. One encoding of the varying members, not one each.
    tail = "," + _string_text(_BINDING_TAIL_KEY) + ":" + canonical_text(view) + "}"
    return CanonicalTemplate(_request_envelope(SLOT, view, SLOT)), tail  # slots: arguments, principal


_BINDING_TAIL_KEY: Final = "tool_contract"
if sorted(_binding_envelope(*[None] * 7), key=_utf16_order)[-1] != _BINDING_TAIL_KEY:  # not an assert: -O keeps it
    raise RuntimeError("the call binding's tool_contract must sort last for its tail")


def spec_request_sha256(spec: ToolSpec, principal_text: str, arguments: Mapping[str, Any]) -> str:
    """request_sha256 for a registered spec, given the principal view's canonical text, of arguments
    its input contract admitted."""
    return _contract_templates(spec._contract_items)[0].sha256(_portable_text(arguments), principal_text)


def model_result_sha256(model_result: Mapping[str, Any]) -> str:
    """result_sha256, from the template, of a model_result whose data its output contract admitted."""
    return _RESULT_TEMPLATE.sha256(_portable_text(model_result))


def spec_call_binding_sha256(spec: ToolSpec, provider_context: Mapping[str, Any], request_digest: str,
                             result_digest: str, downstream: Mapping[str, Any],
                             approval: Mapping[str, Any] | None, evidence: Mapping[str, Any]) -> str:
    """call_binding_sha256 for a registered spec, of values the boundary checked (identifiers,
    references, a checked approval, the evidence's bounded integers)."""
    head = _portable_text({
        "domain": CALL_BINDING_DIGEST_DOMAIN, "provider_context": provider_context, "request_sha256": request_digest,
        "result_sha256": result_digest, "downstream": downstream, "approval": approval, "evidence": evidence,
    })
    return hashlib.sha256((head[:-1] + _contract_templates(spec._contract_items)[1]).encode("utf-8")).hexdigest()


# The same call binding, for the package the dispatcher builds and the one the verifier has just
# checked, written straight into its canonical text. There every string is an identifier, a
# digest or a name from a closed set (the provider profiles, the purposes, the operation states,
# the redactions), each checked where it came from: the call context, the approval, the store's
# record, the verifier's tables. None of those can hold a character JSON escapes (the module
# checks this when it loads, in section 17), so each one's canonical text is itself in quotes; every
# integer is a bounded int and every boolean a bool. Filling the format costs about 3 us where
# the encoder spends about 7 (a read's package). The definition and spec_call_binding_sha256
# take anything, and the tests hold all three to the same bytes.
_BINDING_HEAD: Final = (
    '{"approval":%s,"domain":' + _string_text(CALL_BINDING_DIGEST_DOMAIN).replace("%", "%%") + ','
    '"downstream":{"receipt_ref":%s,"request_ref":%s,"status_ref":%s},'
    '"evidence":{"execution":{"effects":%d,"handler_invoked":%s,"operation_state":"%s"},"redactions":[%s],'
    '"resource_revision":%s},'
    '"provider_context":{"adapter_revision":"%s","api_family":"%s","call_id":"%s","idempotency_key":%s,'
    '"operation_id":"%s","provider":"%s","purpose":"%s","response_id":"%s"},'
    '"request_sha256":"%s","result_sha256":"%s"'
)  # the envelope's members but tool_contract, without the closing "}" (tool_contract's tail follows)
_APPROVAL_VIEW_TEXT: Final = '{"approver":"%s","expires_at":%d}'
_JSON_ESCAPED: Final = re.compile(r'["\\\x00-\x1f]')  # what a JSON string escapes: the rest is written as is


def _checked_binding_sha256(spec: ToolSpec, provider_context: Mapping[str, Any], request_digest: str,
                            result_digest: str, downstream: Mapping[str, Any], approval: Mapping[str, Any] | None,
                            evidence: Mapping[str, Any]) -> str:
    """spec_call_binding_sha256 of values the dispatcher built or the verifier checked (above)."""
    execution, redactions, revision = evidence["execution"], evidence["redactions"], evidence["resource_revision"]
    key = provider_context["idempotency_key"]
    receipt, request, status = downstream["receipt_ref"], downstream["request_ref"], downstream["status_ref"]
    head = _BINDING_HEAD % (
        "null" if approval is None else _APPROVAL_VIEW_TEXT % (approval["approver"], approval["expires_at"]),
        "null" if receipt is None else '"' + receipt + '"',
        "null" if request is None else '"' + request + '"',
        "null" if status is None else '"' + status + '"',
        execution["effects"], "true" if execution["handler_invoked"] else "false", execution["operation_state"],
        '"' + '","'.join(redactions) + '"' if redactions else "",
        "null" if revision is None else revision,
        provider_context["adapter_revision"], provider_context["api_family"], provider_context["call_id"],
        "null" if key is None else '"' + key + '"',
        provider_context["operation_id"], provider_context["provider"], provider_context["purpose"],
        provider_context["response_id"], request_digest, result_digest,
    )
    return hashlib.sha256((head + _contract_templates(spec._contract_items)[1]).encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class SealKeys:
    """The host's seal keys: the one it seals with now, and every key it still accepts."""

    current: str
    secrets: Mapping[str, bytes] = field(repr=False)  # key id -> key; never printed

    def mac(self, key_id: str, purpose: str, digest: str) -> str:
        """HMAC-SHA256, under the named key, of a domain-separated envelope naming what is sealed."""
        message = canonical_json({"domain": SEAL_DOMAIN, "key_id": key_id, "purpose": purpose, "digest": digest})
        return hmac.new(self.secrets[key_id], message, hashlib.sha256).hexdigest()

    def seal(self, purpose: str, digest: str) -> dict[str, str]:
        return {"key_id": self.current, "hmac_sha256": self.mac(self.current, purpose, digest)}


# What a package or a log entry carries when no key was configured: it says so, plainly.
UNSEALED: Final[Mapping[str, None]] = MappingProxyType({"key_id": None, "hmac_sha256": None})


def seal_view(keys: SealKeys | None, purpose: str, digest: str) -> dict[str, Any]:
    # UNSEALED spelled as a literal: dict() of a read-only view costs a microsecond more.
    return {"key_id": None, "hmac_sha256": None} if keys is None else keys.seal(purpose, digest)


def seal_holds(keys: SealKeys, seal: Mapping[str, Any], purpose: str, digest: str) -> bool | None:
    """True when the seal is the named key's MAC of the digest, False when it is not, None when
    this verifier holds no such key. The comparison is constant-time."""
    key_id = seal["key_id"]
    if type(key_id) is not str or key_id not in keys.secrets:
        return None
    # The hex shape first: compare_digest raises TypeError on a str that is not ASCII ("\u00e9").
    mac = seal["hmac_sha256"]
    return _is_digest(mac) and hmac.compare_digest(mac, keys.mac(key_id, purpose, digest))


def load_seal_keys(path: str | os.PathLike[str]) -> SealKeys:
    """Read a seal-keys-v1 file: {"format", "current", "keys": [{"key_id", "secret_hex"}]}.

    Bounded and strict like the fixture; any fault is SEAL_KEYS_INVALID (SEAL_KEYS_UNREADABLE
    when the file cannot be read), never a message with a key, a path or the file's text.
    """
    try:
        data = read_bounded(path, max_bytes=MAX_SEAL_KEYS_BYTES)
        document = decode_strict_json(data, max_bytes=MAX_SEAL_KEYS_BYTES)
    except BoundaryError as error:
        raise BoundaryError("SEAL_KEYS_UNREADABLE" if error.code == "FIXTURE_UNREADABLE"
                            else "SEAL_KEYS_INVALID") from None
    return parse_seal_keys(document)


def parse_seal_keys(document: Any) -> SealKeys:
    if not (type(document) is dict and plain_keys(document) and document.keys() == {"format", "current", "keys"}
            and _is_exactly(document["format"], SEAL_KEYS_FORMAT) and type(document["keys"]) is list
            and 1 <= len(document["keys"]) <= MAX_SEAL_KEYS):
        raise BoundaryError("SEAL_KEYS_INVALID")
    secrets: dict[str, bytes] = {}
    for entry in document["keys"]:
        if not (type(entry) is dict and plain_keys(entry) and entry.keys() == {"key_id", "secret_hex"}
                and is_identifier(entry["key_id"]) and entry["key_id"] not in secrets
                and type(entry["secret_hex"]) is str and _HEX.fullmatch(entry["secret_hex"]) is not None
                and MIN_SEAL_KEY_BYTES * 2 <= len(entry["secret_hex"]) <= MAX_SEAL_KEY_BYTES * 2):
            raise BoundaryError("SEAL_KEYS_INVALID")
        secrets[entry["key_id"]] = bytes.fromhex(entry["secret_hex"])
    if not _member(document["current"], frozenset(secrets)):
        raise BoundaryError("SEAL_KEYS_INVALID")
    return SealKeys(document["current"], MappingProxyType(secrets))


_HEX: Final = re.compile(r"(?:[0-9a-f]{2})+")


def checked_seal_keys(keys: Any) -> SealKeys | None:
    """None, or the host's keys held to the rules of a seal-keys file, as a read-only copy: a
    SealKeys built by hand, or whose secrets change later, seals and checks nothing else."""
    if keys is None:
        return None
    if type(keys) is not SealKeys or type(keys.secrets) not in _PLAIN_MAPPINGS:
        raise BoundaryError("SEAL_KEYS_INVALID")
    secrets = dict(keys.secrets)
    if not (1 <= len(secrets) <= MAX_SEAL_KEYS and _member(keys.current, frozenset(secrets)) and all(
            is_identifier(key_id) and type(secret) is bytes and MIN_SEAL_KEY_BYTES <= len(secret) <= MAX_SEAL_KEY_BYTES
            for key_id, secret in secrets.items())):
        raise BoundaryError("SEAL_KEYS_INVALID")
    return SealKeys(keys.current, MappingProxyType(secrets))


def seal_keys_from_environment(environ: Mapping[str, str] = os.environ) -> SealKeys | None:
    """The keys in the file SEAL_KEYS_ENVIRONMENT names, or None when it names none."""
    path = environ.get(SEAL_KEYS_ENVIRONMENT)
    return None if not path else load_seal_keys(path)


# ============================================================================================
# 16. The dispatcher
# ============================================================================================


class AdmittedCall(NamedTuple):
    """One call as it moves through the pipeline; each stage returns a richer copy.

    Once the registry knows its tool and its arguments passed the input contract, it is what
    every store sees. A NamedTuple rather than a frozen dataclass: it is built twice per call,
    and a frozen dataclass pays for every field it sets.
    """

    context: CallContext
    principal: Principal
    purpose: str
    principal_text: str  # the canonical text of principal_view(principal), for the request digest
    spec: ToolSpec | None = None
    arguments: dict[str, Any] | None = None
    request_sha256: str | None = None

    @property
    def record_key(self) -> RecordKey:
        # The idempotency namespace: tenant + subject + tool + key.
        return (self.principal.tenant, self.principal.subject, self.spec.name if self.spec else "",
                self.context.idempotency_key)


RecordKey = tuple[str, str, str, "str | None"]


def same_intent(record: OperationRecord, call: AdmittedCall) -> bool:
    """The repeat rule of every store: a key answers only the intent it was first bound to, under
    the same provider profile and the same contract revisions."""
    spec = call.spec
    return (spec is not None and record.request_sha256 == call.request_sha256
            and record.profile == call.context.profile and record.contract == spec._contract)


def receipt_binds(record: OperationRecord, receipt: Receipt, spec: ToolSpec) -> bool:
    """The demo downstream's receipt is this record's (receipt_fits, section 12): what recovery
    checks before a receipt it found settles a stored write."""
    return receipt_fits(receipt, record.refs, record.arguments, spec)


def downstream_refs(call: AdmittedCall) -> dict[str, str | None]:
    """The downstream references of a write, derived from its key and intent (so a retry of the
    same operation reaches the same downstream request, and the downstream dedupes it)."""
    principal = call.principal
    request_ref = derived_ref("rq-", "request", principal.tenant, principal.subject,
                              call.spec.name if call.spec else "", call.context.idempotency_key, call.request_sha256)
    return {"request_ref": request_ref, "receipt_ref": None, "status_ref": derived_ref("st-", "status", request_ref)}


_SETTLED_STATES: Final = frozenset(MODEL_STATE)  # the states a store may answer a write or a query from


def _settled(call: AdmittedCall, record: Any) -> OperationRecord:
    """What a store answered for this call, held to what a settled record must be before a
    package is built from it: an OperationRecord in a settled state, whose evidence and data a
    package can carry. Anything else is a damaged store's answer: LIFECYCLE_VIOLATION, to the host."""
    if not (type(record) is OperationRecord and _member(record.state, _SETTLED_STATES)
            and type(record.refs) in _PLAIN_MAPPINGS and record.refs.keys() == _NO_REFS.keys()):
        raise BoundaryError("LIFECYCLE_VIOLATION")
    # What the repeat rule compares, by exact type: an agreeable profile or contract matches nothing.
    profile, contract = record.profile, record.contract
    if not (type(profile) is ProviderProfile
            and registered_profile(profile.provider, profile.api_family, profile.adapter_revision) is not None
            and _is_digest(record.request_sha256) and is_identifier(record.operation_id)
            and type(contract) in _PLAIN_MAPPINGS and all(type(value) is str for value in contract.values())):
        raise BoundaryError("LIFECYCLE_VIOLATION")
    refs, approval = record.refs, record.approval
    if not (all(refs[name] is None or is_identifier(refs[name]) for name in _NO_REFS)
            and (approval is None or (type(approval) in _PLAIN_MAPPINGS and _nested(_APPROVAL_VIEW)(dict(approval))))
            and (record.resource_revision is None or _integer_in(1, MAX_REVISION)(record.resource_revision))
            and (REPEAT_ANSWER[MODEL_STATE[record.state]][1] is not None
                 or output_contract(call.spec).admits(record.data))):
        raise BoundaryError("LIFECYCLE_VIOLATION")
    return record


def _check_own_key(call: AdmittedCall, record: OperationRecord) -> None:
    """Once a record's intent is this call's: its downstream references derive from this very
    key and intent, so a store's record of another key is never replayed as this key's answer."""
    wanted = downstream_refs(call)
    if not (_is_exactly(record.refs["request_ref"], wanted["request_ref"])
            and _is_exactly(record.refs["status_ref"], wanted["status_ref"])):
        raise BoundaryError("LIFECYCLE_VIOLATION")


# The OperationStore's methods, checked on a host's store when a Dispatcher is built: a store
# that lacks one would fail at the first call that needs it, perhaps after an effect.
OPERATION_STORE_METHODS: Final = ("answer", "approval_used", "claim", "release", "start", "downstream_for",
                                  "settle", "find", "reconcile", "confirm_absent", "bind_call", "finish")


class Claim(NamedTuple):
    """A caller's hold on a key: the record as claimed, and what the store needs to fence its
    later moves (the durable stores keep a lease epoch there; the in-memory store needs none)."""

    key: RecordKey
    record: OperationRecord
    token: Any = None


class OperationStore(Protocol):
    """Where a Dispatcher keeps its operations and call identities, and the downstream its
    handlers reach. The write path is written once, in Dispatcher, against these operations;
    a store decides only where records live and who may move them.

    Every method raises a CatalogError (never another exception type) when it cannot answer:
    BoundaryError IDEMPOTENCY_CONFLICT or OPERATION_IN_PROGRESS from answer/claim/find, and the
    store's own codes (a lost lease, a busy or damaged database) from anything. What answer, claim
    and find return is checked before it is trusted: anything but a settled OperationRecord of
    this very key, whose evidence a package can carry, is LIFECYCLE_VIOLATION to the host.
    """

    downstream: Any  # the downstream reads and status queries see: receipt(status_ref), effect_count

    def answer(self, call: AdmittedCall) -> OperationRecord | None:
        """The settled record a write with this key is answered from, or None when the key is
        free; IDEMPOTENCY_CONFLICT or OPERATION_IN_PROGRESS when another intent or a live holder has it."""

    def approval_used(self, approval_ref: str) -> bool:
        """Whether a write already consumed this approval (approval_ref)."""

    def claim(self, call: AdmittedCall, record: OperationRecord, approval_ref: str) -> Claim | OperationRecord:
        """Claim the key for ``record`` (state claimed) and consume the approval, atomically: a
        Claim, or, when another caller got there first, what answer() would now give;
        APPROVAL_CONSUMED when the approval was used meanwhile (nothing claimed)."""

    def release(self, claim: Claim) -> None:
        """claimed -> released: a retryable refusal before the downstream; the key is free again,
        and the approval unused (nothing ran)."""

    def start(self, claim: Claim) -> Claim:
        """claimed -> in_progress: from here the downstream may act."""

    def downstream_for(self, claim: Claim) -> Any:
        """The downstream this claim's handler commits through; its ``created`` counts the
        effects this claim created (a package's execution.effects)."""

    def settle(self, claim: Claim, event: str, record: OperationRecord, package: dict[str, Any]) -> None:
        """in_progress -> succeeded | unknown: the record as advanced by ``event``, with the first
        answer's package; refused when the claim is no longer the holder."""

    def find(self, key: RecordKey) -> OperationRecord | None:
        """The settled record a status query reads (None: nothing to query); OPERATION_IN_PROGRESS
        while a live holder runs it."""

    def reconcile(self, key: RecordKey, record: OperationRecord, package: dict[str, Any]) -> None:
        """unknown -> reconciled, with the receipt's data and references, and the package that
        answers it (a store that keeps evidence stores it, as settle() does)."""

    def confirm_absent(self, key: RecordKey, record: OperationRecord) -> bool:
        """unknown -> released when the downstream proves, with authority, that the operation took
        no effect and never will (a store whose holders may still be running fences them first);
        False when a receipt exists or the record moved. The approval stays consumed."""

    def bind_call(self, identity: tuple[str, str, str], fingerprint: tuple[Any, ...]) -> tuple[Any, ...]:
        """Bind a provider call identity to its fingerprint, once: the fingerprint it is bound to."""

    def finish(self) -> None:
        """The end of one dispatch, before its answer leaves (or its error is raised): a store
        that deferred work to join a later commit (a call binding) writes or drops it here."""


class CountingDownstream:
    """One claim's view of a MockDownstream: the same ledger, counting the effects it created, and
    committing only the claim's own request (its derived references). The mock is idempotent per
    status reference, so a claim makes at most one effect: a second one, under other references,
    is refused before it is made (a package could not report it; the handler's failure is
    contained as HANDLER_FAILED, with nothing created)."""

    def __init__(self, downstream: MockDownstream, request_ref: str, status_ref: str) -> None:
        self._downstream = downstream
        self._own = (request_ref, status_ref)
        self.created = 0

    @property
    def effect_count(self) -> int:
        return self._downstream.effect_count

    def receipt(self, status_ref: str | None) -> Receipt | None:
        return self._downstream.receipt(status_ref)

    def commit_refund_draft(self, **request: str) -> Receipt:
        refs = (request.get("request_ref"), request.get("status_ref"))
        if type(refs[0]) is not str or type(refs[1]) is not str or refs != self._own:
            raise BoundaryError("OUTPUT_BINDING_MISMATCH")  # another request's effect, under this claim
        # This claim's own effect, by its own status reference: the mock's ledger is shared, and a
        # difference of its whole count would take in another thread's commit meanwhile.
        existed = self._downstream.receipt(refs[1]) is not None
        receipt = self._downstream.commit_refund_draft(**request)
        if not existed and self._downstream.receipt(refs[1]) is not None:
            self.created += 1
        return receipt


class _ReadOnlyDownstream:
    """What a read handler sees of a store's downstream: what the OperationStore's ``downstream``
    promises reads (its receipts and its effect count), and no way to commit: a read cannot make
    an effect that its package, which reports none, would hide."""

    __slots__ = ("_downstream",)

    def __init__(self, downstream: Any) -> None:
        self._downstream = downstream

    @property
    def effect_count(self) -> int:
        return self._downstream.effect_count

    def receipt(self, status_ref: str | None) -> Receipt | None:
        return self._downstream.receipt(status_ref)


class MemoryOperations:
    """The in-memory OperationStore: records and call identities in dicts, a MockDownstream.

    Safe to share between threads: one lock per store guards every read-decide-write of a record
    or a call identity, and is never held while a handler runs (the claim is what keeps a second
    caller out, so a handler that dispatches the same key again gets an answer, not a deadlock).
    """

    def __init__(self, downstream: MockDownstream | None = None) -> None:
        self.downstream = downstream if downstream is not None else MockDownstream()
        self._records: dict[RecordKey, OperationRecord] = {}
        self._calls: dict[tuple[str, str, str], tuple[Any, ...]] = {}
        self._approvals: dict[str, RecordKey] = {}  # consumed approval -> the key that consumed it
        self._claimed_with: dict[RecordKey, str] = {}  # a live claim's approval, freed by a release
        self._lock = threading.Lock()

    def answer(self, call: AdmittedCall) -> OperationRecord | None:
        with self._lock:
            return self._answer(call, call.record_key)

    def _answer(self, call: AdmittedCall, key: RecordKey) -> OperationRecord | None:
        record = self._records.get(key)
        if record is None or record.state in FREE_STATES:
            return None
        if record.state in LEASED_STATES:
            if not same_intent(record, call):
                raise BoundaryError("IDEMPOTENCY_CONFLICT")
            raise BoundaryError("OPERATION_IN_PROGRESS")
        return record

    def approval_used(self, approval_ref: str) -> bool:
        with self._lock:
            return approval_ref in self._approvals

    def claim(self, call: AdmittedCall, record: OperationRecord, approval_ref: str) -> Claim | OperationRecord:
        key = call.record_key
        with self._lock:
            existing = self._answer(call, key)
            if existing is not None:
                return existing
            if approval_ref in self._approvals:
                raise BoundaryError("APPROVAL_CONSUMED")
            previous = self._records.get(key)
            claimed = advance(record, "claim") if previous is None else replace(
                record, state=transition(previous.state, "claim"))
            self._records[key] = claimed
            self._approvals[approval_ref] = key
            self._claimed_with[key] = approval_ref
        return Claim(key, claimed)

    def release(self, claim: Claim) -> None:
        # Nothing ran: the approval this claim consumed is unused again, in the step that frees
        # the key (a claim that takes the key next records its own approval under it).
        self._move(claim, advance(claim.record, "release"), free_approval=True)

    def start(self, claim: Claim) -> Claim:
        started = advance(claim.record, "start")
        self._move(claim, started)
        # Built directly when it is this store's own Claim: NamedTuple._replace is Python code.
        return Claim(claim.key, started, claim.token) if type(claim) is Claim else claim._replace(record=started)

    def downstream_for(self, claim: Claim) -> CountingDownstream:
        refs = claim.record.refs
        return CountingDownstream(self.downstream, refs["request_ref"], refs["status_ref"])

    def settle(self, claim: Claim, event: str, record: OperationRecord, package: dict[str, Any]) -> None:
        if transition(claim.record.state, event) != record.state:
            raise BoundaryError("LIFECYCLE_VIOLATION")
        self._move(claim, record)

    def _move(self, claim: Claim, record: OperationRecord, *, free_approval: bool = False) -> None:
        with self._lock:
            if self._records.get(claim.key) is not claim.record:
                raise BoundaryError("LIFECYCLE_VIOLATION")  # the claim no longer holds the key
            self._records[claim.key] = record
            if free_approval:
                self._approvals.pop(self._claimed_with.pop(claim.key, ""), None)

    def find(self, key: RecordKey) -> OperationRecord | None:
        with self._lock:
            record = self._records.get(key)
        if record is None or record.state in FREE_STATES:
            return None
        if record.state in LEASED_STATES:
            raise BoundaryError("OPERATION_IN_PROGRESS")
        return record

    def reconcile(self, key: RecordKey, record: OperationRecord, package: dict[str, Any]) -> None:
        with self._lock:
            current = self._records.get(key)
            if (current is not None and current.state == "reconciled" and record.state == "reconciled"
                    and dict(current.refs) == dict(record.refs) and _same_value(current.data, record.data)):
                return  # another status query reconciled it first, from the same receipt: left as it is
            if current is None or transition(current.state, "receipt_confirmed") != record.state:
                raise BoundaryError("LIFECYCLE_VIOLATION")
            self._records[key] = record

    def confirm_absent(self, key: RecordKey, record: OperationRecord) -> bool:
        # The mock downstream commits synchronously inside the handler: once a record is unknown
        # no holder can still reach it, so its answer of "no receipt" is final.
        with self._lock:
            current = self._records.get(key)
            if (current is None or current.state != "unknown"
                    or self.downstream.receipt(current.refs["status_ref"]) is not None):
                return False
            self._records[key] = advance(current, "receipt_absent")
            self._claimed_with.pop(key, None)
            return True

    def bind_call(self, identity: tuple[str, str, str], fingerprint: tuple[Any, ...]) -> tuple[Any, ...]:
        # One dict.setdefault is atomic on its own (the dict's own lock): no store lock needed.
        return self._calls.setdefault(identity, fingerprint)

    def finish(self) -> None:
        """Nothing is deferred in memory."""


# The approver allowlist, by exact container type: a single string is never read as an allowlist
# of its characters.
_APPROVER_COLLECTIONS: Final = (list, tuple, set, frozenset)


def _registry_snapshot(registry: Any) -> Mapping[str, ToolSpec]:
    """The host's registry, read once: a mapping whose views disagree, or that the host changes
    later, cannot move what was checked. Each tool sits under its own exact name, and every
    field a package digests or the pipeline branches on is a plain identifier or choice."""
    if not isinstance(registry, Mapping):
        raise BoundaryError("REGISTRY_INVALID", "registry")
    tools: dict[str, ToolSpec] = {}
    for index, (name, spec) in enumerate(registry.items()):
        if not _is_registered_tool(name, spec):
            raise BoundaryError("REGISTRY_INVALID", f"registry[{index}]")
        tools[name] = spec
    return MappingProxyType(tools)


def _is_registered_tool(name: Any, spec: Any) -> bool:
    return (type(spec) is ToolSpec and type(name) is str and TOOL_NAME.fullmatch(name) is not None
            and type(spec.name) is str and spec.name == name and _member(spec.effect, EFFECTS)
            and is_identifier(spec.required_role) and type(spec.input_contract) is CompiledSchema
            and all(is_identifier(value) for key, value in spec._contract_items if key not in ("tool", "effect")))


def _host_hooks(hooks: Any, registry: Mapping[str, ToolSpec]) -> dict[str, ToolHooks]:
    """The host's hooks by tool name, read once: a ToolHooks per registry tool it names, each hook
    callable and each declared refusal one of PRECONDITION_CODES. Hooks for a tool the registry
    does not name are a host's mistake (a typo would leave the tool unhooked): refused too."""
    if hooks is None:
        return {}
    if not (isinstance(hooks, Mapping) and plain_keys(hooks)):
        raise BoundaryError("HOOK_INVALID", "hooks")
    checked = {}
    for index, (name, tool_hooks) in enumerate(hooks.items()):
        if name not in registry or not _is_hooks(tool_hooks):
            raise BoundaryError("HOOK_INVALID", f"hooks[{index}]")
        checked[name] = tool_hooks
    return checked


def _registry_hooks(registry: Mapping[str, ToolSpec], hooks: Mapping[str, ToolHooks]) -> Mapping[str, ToolHooks]:
    """Every tool the registry names must be runnable, or the host hears it now, not at a call:
    it has hooks, and a resolve hook exactly when its contract names a resource."""
    for index, spec in enumerate(registry.values()):
        tool_hooks = hooks.get(spec.name)
        if tool_hooks is None:
            raise BoundaryError("TOOL_HANDLER_MISSING", f"registry[{index}]")
        if (spec.resource_field is None) != (tool_hooks.resolve is None):
            # A resolve hook on a tool with no resource would never run: its host would believe
            # the tool guarded by a resource check that the boundary never makes.
            raise BoundaryError("TOOL_NOT_DISPATCHABLE", f"registry[{index}]")
    return MappingProxyType({name: hooks[name] for name in registry})


def _approver_allowlist(approvers: Any) -> frozenset[str]:
    if type(approvers) not in _APPROVER_COLLECTIONS or not all(is_identifier(name) for name in approvers):
        raise BoundaryError("CONTEXT_INVALID", "approvers")
    return frozenset(approvers)


class _BuiltPackages(threading.local):
    """Per thread: the list dispatch_for_provider collects packages in, or None. A class-level
    None, so a plain dispatch finds it without the exception a missing attribute raises."""

    packages: list[tuple[dict[str, Any], Any]] | None = None


class AdaptedDispatch(NamedTuple):
    """What Dispatcher.dispatch_for_provider returns: the result package, and the provider's item."""

    package: dict[str, Any]
    item: dict[str, Any]


class Dispatcher:
    """The trusted boundary over one world and one operation store.

    ``dispatch`` and ``query_operation_status`` always return a new result package (a dict with
    ``format``, ``model_result``, ``protected_audit`` and ``execution``) for anything the model
    controls, and raise a CatalogError only to the trusted host: a malformed context, principal
    or clock, an operation another holder is running (OPERATION_IN_PROGRESS), or a store error.
    The operations store (MemoryOperations unless the host plugs in another, as durable/ does)
    holds records and call identities; the write path itself is written once, here.
    """

    def __init__(self, orders: Sequence[Order] = (), *, approvers: frozenset[str] | Sequence[str] = (),
                 hooks: Mapping[str, ToolHooks] | None = None, handlers: Mapping[str, Handler] | None = None,
                 registry: Mapping[str, ToolSpec] = REGISTRY,
                 operations: OperationStore | None = None, seal_keys: SealKeys | None = None) -> None:
        # The demo host (section 12) hooks the tools it has handlers for; a host's own hooks come
        # after, and win for the tools they name.
        self._desk = OrderDesk(orders, handlers)
        self._approvers = _approver_allowlist(approvers)
        self._registry = _registry_snapshot(registry)
        self._hooks = _registry_hooks(self._registry, {**self._desk.hooks(self._registry), **_host_hooks(hooks, self._registry)})
        if operations is not None and not all(callable(getattr(operations, name, None))
                                              for name in OPERATION_STORE_METHODS):
            raise BoundaryError("CONTEXT_INVALID", "operations")
        self.operations: OperationStore = operations if operations is not None else MemoryOperations()
        # What a store answers is checked before a package is built from it (_settled, the own-key
        # check), except from this module's own in-memory store: it holds only the frozen records
        # this dispatcher wrote, under their own keys, and a replay must stay cheaper than a read.
        self._checks_answers = type(self.operations) is not MemoryOperations
        self._seal_keys = checked_seal_keys(seal_keys)  # None: every package says plainly that it is unsealed
        # Per thread: while dispatch_for_provider runs, the list _package puts each package it
        # builds in, with the ModelView of the values it built it from.
        self._built = _BuiltPackages()

    @classmethod
    def from_world(cls, world: World, **options: Any) -> Dispatcher:
        if type(world) is not World:
            raise BoundaryError("CONTEXT_INVALID", "world")
        return cls(world.orders, approvers=world.approvers, **options)

    # -- trusted host events and read-only views ---------------------------------------------

    @property
    def downstream(self) -> Any:
        return self.operations.downstream

    @property
    def effect_count(self) -> int:
        return self.operations.downstream.effect_count

    def set_order_status(self, tenant: str, order_ref: str, status: str) -> None:
        """The demo host's trusted change of business state; the order's resource revision moves on."""
        self._desk.set_status(tenant, order_ref, status)

    def operation_state(self, principal: Principal, tool: str, idempotency_key: str) -> str:
        check_principal(principal)
        if type(tool) is not str or not is_identifier(idempotency_key):
            raise BoundaryError("CONTEXT_INVALID")  # a key no call could have: never an unhashable one
        try:
            record = self.operations.find((principal.tenant, principal.subject, tool, idempotency_key))
        except BoundaryError as error:
            if error.code != "OPERATION_IN_PROGRESS":
                raise
            return "in_progress"
        return "none" if record is None else record.state

    # -- entry points ------------------------------------------------------------------------

    def dispatch(self, proposal: Any, context: CallContext, principal: Principal, *,
                 approval: Approval | None = None, now: int, deadline: int | None = None,
                 fault: str = "none") -> dict[str, Any]:
        """Run one proposal through the whole boundary and return its result package."""
        call = self._bind(context, principal, "dispatch", now, deadline, fault)
        try:
            call = self._admit(call, proposal)
            hooks = self._hooks[call.spec.name]
            resource = authorize(call.spec, principal, call.arguments, hooks.resolve)
            if call.spec.effect == "write":
                return self._write(call, hooks, resource, approval=approval, now=now, deadline=deadline, fault=fault)
            return self._read(call, hooks, resource, now=now, deadline=deadline, fault=fault)
        except BoundaryError as refusal:
            return self._refused(call, refusal)
        finally:
            self.operations.finish()

    def dispatch_for_provider(self, proposal: Any, context: CallContext, principal: Principal, *,
                              approval: Approval | None = None, now: int, deadline: int | None = None,
                              fault: str = "none") -> AdaptedDispatch:
        """dispatch(), and the provider's item for the package, as the adapter of the context's
        profile shapes it (adapt() with this principal, this dispatcher's registry and its seal keys).

        The item is shaped from the values the package was built from, inside this call, before
        the package is handed to anyone but the operation store: nothing the caller does to the
        package afterwards can reach the item, so the package is not verified again. A package
        this call did not see built (a subclass's dispatch that returns another one) is verified
        in full, as adapt() does.
        """
        local = self._built
        outer = local.packages  # a hook that dispatches again, on this thread
        local.packages = built = []
        try:
            package = self.dispatch(proposal, context, principal, approval=approval, now=now, deadline=deadline,
                                    fault=fault)
        finally:
            local.packages = outer
        if built and built[-1][0] is package:
            return AdaptedDispatch(package, SHAPES[context.adapter_revision](built[-1][1], context))
        return AdaptedDispatch(package, adapt(package, context, context.adapter_revision, principal=principal,
                                              registry=self._registry, seal_keys=self._seal_keys,
                                              require_seal=self._seal_keys is not None))

    def query_operation_status(self, proposal: Any, context: CallContext, principal: Principal, *,
                               now: int, fault: str = "none") -> dict[str, Any]:
        """Resolve an operation whose outcome is unknown, by the tool's status hook only.

        The checks run in this order: current authorization; the recomputed request digest;
        tenant/subject/tool/key, operation, effect and producer binding; the status hook's
        answer, a receipt held to the record; the provider profile of the recorded operation;
        then this call identity is bound to the query purpose, so it can never start a dispatch.
        Only after that binding does a query answer, even when the answer is RECEIPT_UNAVAILABLE.
        A tool without a status hook answers RECONCILIATION_REQUIRED: nobody was asked, so its
        outcome stays unknown and is never guessed to be "not executed".
        """
        call = self._bind(context, principal, "query_status", now, None, fault)
        try:
            call = self._admit(call, proposal, bind_identity=False)
            hooks = self._hooks[call.spec.name]
            authorize(call.spec, principal, call.arguments, hooks.resolve)
            record = self._recorded_operation(call)
            found = self._status(call, hooks, record, fault) if record.state == "unknown" else None
            if record.profile != context.profile:
                raise BoundaryError("STATUS_CONFLICT")
            self._bind_identity(call)  # before any answer: an unavailable receipt still used it for a query
            if record.state != "unknown":  # already settled: the local record answers
                return self._recorded_answer(call, record)
            if found is not None and found.found == "receipt":
                return self._reconciled(call, record, found)
            if found is not None and found.found == "absent" and self.operations.confirm_absent(call.record_key,
                                                                                              record):
                # The downstream has no receipt, with authority: nothing happened, the key is free.
                return self._package(
                    call, project_model_result(call.spec, "not_executed", code="OPERATION_NOT_EXECUTED"),
                    refs=record.refs, approval=record.approval, revision=record.resource_revision)
            code = "RECONCILIATION_REQUIRED" if found is None else "RECEIPT_UNAVAILABLE"
            return self._package(call, project_model_result(call.spec, "receipt_unavailable", code=code),
                                 state=record.state, refs=record.refs, approval=record.approval,
                                 revision=record.resource_revision)
        except BoundaryError as refusal:
            return self._refused(call, refusal)

    def _recorded_operation(self, call: AdmittedCall) -> OperationRecord:
        # Another key or subject finds nothing; the same namespace with another intent, another
        # operation or other contract revisions is a conflict. Never a guessed success.
        record = None if call.spec.effect != "write" else self.operations.find(call.record_key)
        if record is None:
            raise BoundaryError("NOT_FOUND")
        record = replace(self._answered(call, record), state=MODEL_STATE[record.state])
        if (record.request_sha256 != call.request_sha256 or record.contract != call.spec._contract
                or record.operation_id != call.context.operation_id):
            raise BoundaryError("STATUS_CONFLICT")
        self._own_key(call, record)
        return record

    def _answered(self, call: AdmittedCall, record: Any) -> OperationRecord:
        return _settled(call, record) if self._checks_answers else record

    def _own_key(self, call: AdmittedCall, record: OperationRecord) -> None:
        if self._checks_answers:
            _check_own_key(call, record)

    def _status(self, call: AdmittedCall, hooks: ToolHooks, record: OperationRecord,
                fault: str) -> StatusAnswer | None:
        """The status hook's finding on an unknown write (None: the tool has no status hook). A
        hook that raises has not answered (unavailable); a contradicting receipt, or one whose
        output is not this write's, is STATUS_CONFLICT."""
        if hooks.status is None:
            return None
        if fault in FAULTS_BEFORE_RECEIPT:
            return StatusAnswer("unavailable")
        refs = record.refs
        query = StatusQuery(call.spec.name, _own_copy(call.spec, call.arguments), refs["request_ref"],
                            refs["status_ref"], call.context.idempotency_key, self.operations.downstream)
        try:
            found = hooks.status(query)
        except BoundaryError:
            return StatusAnswer("unavailable")
        except CatalogError:
            raise  # the host's own store failed under the hook (a damaged row): the host hears it
        except Exception:  # the downstream's status service is foreign code: it did not answer
            return StatusAnswer("unavailable")
        if type(found) is not StatusAnswer or not _member(found.found, STATUS_FINDINGS):
            raise BoundaryError("HOOK_INVALID")
        if found.found == "receipt":
            try:  # the receipt's output is checked, then kept, as a copy nobody else holds
                found = StatusAnswer(found="receipt", receipt_ref=found.receipt_ref,
                                     output=_hook_output_copy(call.spec, found.output))
            except BoundaryError:
                raise BoundaryError("STATUS_CONFLICT") from None
        if found.found == "conflict" or (found.found == "receipt" and not _receipt_holds(call, found)):
            raise BoundaryError("STATUS_CONFLICT")
        return found

    def _reconciled(self, call: AdmittedCall, record: OperationRecord, found: StatusAnswer) -> dict[str, Any]:
        data = _as_data(call.spec, found.output)  # _status's own copy of the receipt's output: nobody else holds it
        refs = {**record.refs, "receipt_ref": found.receipt_ref}
        record = advance(record, "receipt_confirmed", refs=MappingProxyType(refs), data=data)
        model_result, result_text = project_data_result(call.spec, "reconciled", json_copy(data))
        package = self._package(call, model_result, state=record.state, refs=refs, approval=record.approval,
                                revision=record.resource_revision, result_text=result_text)
        self.operations.reconcile(call.record_key, record, package)  # it answers only once the store moved
        return package

    # -- pipeline stages -----------------------------------------------------------------------

    def _bind(self, context: CallContext, principal: Principal, purpose: str, now: Any, deadline: Any,
              fault: Any) -> AdmittedCall:
        check_context(context)
        check_principal(principal)
        _check_clock(now, deadline)
        if type(fault) is not str or fault not in FAULTS[purpose]:
            raise BoundaryError("CONTEXT_INVALID")
        return AdmittedCall(context, principal, purpose,
                            _principal_text(principal.tenant, principal.subject, principal.roles))

    def _admit(self, call: AdmittedCall, proposal: Any, *, bind_identity: bool = True) -> AdmittedCall:
        # The registry comes first: an unknown tool is refused before its arguments are read.
        name, arguments = _proposal_parts(proposal)
        spec = self._registry.get(name)
        if spec is None:
            raise BoundaryError("UNKNOWN_TOOL")
        try:
            checked = check_input(spec, arguments)
        except BoundaryError as refusal:
            raise _AdmittedRefusal(call._replace(spec=spec), refusal.code) from None
        # Built directly: NamedTuple._replace is Python code, and costs a microsecond more here.
        call = AdmittedCall(call.context, call.principal, call.purpose, call.principal_text, spec, checked,
                            spec_request_sha256(spec, call.principal_text, checked))
        if bind_identity:
            try:
                self._bind_identity(call)
            except BoundaryError as refusal:  # admitted: the audit keeps its tool, contract and arguments
                raise _AdmittedRefusal(call, refusal.code) from None
        return call

    def _bind_identity(self, call: AdmittedCall) -> None:
        # One provider call identity answers one request for one purpose. The same call coming
        # back unchanged is fine; changed in any way (another request, key, operation, or the
        # other purpose), it conflicts.
        context = call.context
        identity = (context.adapter_revision, context.response_id, context.call_id)
        fingerprint = (call.purpose, call.request_sha256, context.operation_id, context.idempotency_key)
        if self.operations.bind_call(identity, fingerprint) != fingerprint:
            raise BoundaryError("CALL_CONFLICT")

    def _read(self, call: AdmittedCall, hooks: ToolHooks, resource: Resource | None, *, now: int,
              deadline: int | None, fault: str) -> dict[str, Any]:
        check_precondition(hooks, resource, call.arguments)
        check_deadline(now, deadline)
        _raise_fault_before(fault)
        revision = None if resource is None else resource.revision
        data, code, _receipt = self._execute(call, hooks, resource, _NO_REFS, fault,
                                             _ReadOnlyDownstream(self.operations.downstream), now, deadline)
        if code is not None:
            # A read has no effect to be unsure about: a failure is a plain failure, and a lost
            # answer a retryable one.
            code = "DEADLINE_EXCEEDED" if code == "OUTCOME_UNKNOWN" else code
            return self._package(call, project_model_result(call.spec, "read_failed", code=code),
                                 handler_invoked=True, redactions=withheld(code), revision=revision)
        model_result, result_text = project_data_result(call.spec, "read", data)
        return self._package(call, model_result, handler_invoked=True, revision=revision, result_text=result_text)

    def _write(self, call: AdmittedCall, hooks: ToolHooks, resource: Resource | None, *, approval: Any, now: int,
               deadline: int | None, fault: str) -> dict[str, Any]:
        if call.context.idempotency_key is None:
            raise BoundaryError("IDEMPOTENCY_KEY_REQUIRED")
        operations = self.operations
        record = operations.answer(call)
        if record is not None:
            return self._repeat(call, self._answered(call, record))
        try:
            reference = check_approval(approval, principal=call.principal, context=call.context, spec=call.spec,
                                       arguments=call.arguments, approvers=self._approvers, now=now,
                                       consumed=operations.approval_used)
        except BoundaryError as refusal:
            return self._consumed_by_this_key(call, refusal)
        check_precondition(hooks, resource, call.arguments)
        check_deadline(now, deadline)
        refs = downstream_refs(call)
        granted = approval_view(approval)
        revision = None if resource is None else resource.revision
        try:
            claim = operations.claim(call, self._new_record(call, refs, granted, revision), reference)
        except BoundaryError as refusal:
            return self._consumed_by_this_key(call, refusal)
        if type(claim) is not Claim:  # another caller claimed the key between answer() and claim()
            return self._repeat(call, self._answered(call, claim))
        refusal = FAULTS_BEFORE_HANDLER.get(fault)
        if refusal is not None:
            # A retryable refusal before anything reached the downstream frees the key again.
            operations.release(claim)
            raise BoundaryError(refusal)
        claim = operations.start(claim)
        downstream = operations.downstream_for(claim)
        data, code, receipt_ref = self._execute(call, hooks, resource, refs, fault, downstream, now, deadline)
        created = downstream.created
        if type(created) is not int or not 0 <= created <= 1:
            # A host store's view that counts otherwise: no package can say it, and nothing is settled.
            raise BoundaryError("LIFECYCLE_VIOLATION")
        if code == "TOOL_FAILED" and created == 0:
            # The tool failed and committed nothing: the key is free again, the approval spent.
            package = self._package(call, project_model_result(call.spec, "write_failed", code=code),
                                    handler_invoked=True, refs=refs, approval=granted, revision=revision)
            operations.settle(claim, "failed", advance(claim.record, "failed"), package)
            return package
        if code is not None:
            # The effect may have been committed: record `unknown`, keep the status reference in
            # the audit only, and block blind replay until a status query reconciles it.
            code = "OUTCOME_UNKNOWN" if code == "TOOL_FAILED" else code  # "nothing", yet the store saw one
            package = self._package(call, project_model_result(call.spec, "write_unknown", code=code),
                                    state="unknown", handler_invoked=True, effects=created, refs=refs,
                                    redactions=withheld(code), approval=granted, revision=revision)
            operations.settle(claim, "outcome_lost", advance(claim.record, "outcome_lost"), package)
            return package
        # Committed, as the hook reported: its one effect, and the downstream's receipt when it issued one.
        refs["receipt_ref"] = receipt_ref
        record = advance(claim.record, "committed", refs=MappingProxyType(refs), data=data)
        model_result, result_text = project_data_result(call.spec, "written", json_copy(data))
        package = self._package(call, model_result, state=record.state, handler_invoked=True, effects=1, refs=refs,
                                approval=granted, revision=revision, result_text=result_text)
        operations.settle(claim, "committed", record, package)
        return package

    def _execute(self, call: AdmittedCall, hooks: ToolHooks, resource: Resource | None,
                 refs: Mapping[str, str | None], fault: str, downstream: Any, now: int,
                 deadline: int | None) -> tuple[Any, str | None, str | None]:
        """Run the execute hook and its output contract.

        Returns (data, None, receipt reference) when it succeeded (a read) or committed (a
        write), and (None, code, None) otherwise: TOOL_FAILED when it reported that it failed and
        committed nothing, OUTCOME_UNKNOWN when it could not say, or the code that refused it.
        """
        execute = FAULTS_INSTEAD_OF_HANDLER.get(fault) or hooks.execute
        spec = call.spec
        key = call.context.idempotency_key if spec.effect == "write" else None
        try:
            # Positional: a frozen dataclass takes keywords measurably slower.
            result = execute(ExecuteCall(spec.name, call.principal, _own_copy(spec, call.arguments), refs["request_ref"],
                                         refs["status_ref"], key, now, deadline, resource, downstream,
                                         call.context.call_id))
            inject = FAULTS_AFTER_HANDLER.get(fault)
            if inject is not None:
                result = inject(result)
        except ResponseLost:
            return None, "OUTCOME_UNKNOWN", None
        except Exception:  # the handler is foreign code: whatever it raises is contained here
            # (not a BaseException: KeyboardInterrupt and SystemExit stand for a crash, settle
            # nothing and reach the host; the in-memory store, with no lease, keeps the key in progress)
            return None, "HANDLER_FAILED", None
        if (type(result) is Execution and _member(result.effect, EFFECT_REPORTS[spec.effect])
                and result.effect in _UNSUCCESSFUL):
            return None, _UNSUCCESSFUL[result.effect], None  # a failed tool's output is not its contract's
        try:
            data = check_output(spec, result, call.arguments, None if resource is None else resource.revision,
                                max_bytes=hooks.max_output_bytes, max_nodes=hooks.max_output_nodes)
        except BoundaryError as refusal:
            return None, refusal.code, None
        return data, None, result.receipt_ref

    def _consumed_by_this_key(self, call: AdmittedCall, refusal: BoundaryError) -> dict[str, Any]:
        """An approval found consumed after this key was found free: when the same call was
        delivered twice at once, the other copy consumed it for this very key, so this copy is
        answered as a repeat of that write (OPERATION_IN_PROGRESS while it runs, then its
        replay), never told that nothing ran. Any other refusal stands."""
        if refusal.code != "APPROVAL_CONSUMED":
            raise refusal
        record = self.operations.answer(call)
        if record is None:
            raise refusal  # another key's write consumed it
        return self._repeat(call, self._answered(call, record))

    def _repeat(self, call: AdmittedCall, record: OperationRecord) -> dict[str, Any]:
        # Same key: only the same intent, under the same provider profile and the same
        # contract revisions, may see the recorded answer. Nothing runs again.
        if not same_intent(record, call):
            raise BoundaryError("IDEMPOTENCY_CONFLICT")
        self._own_key(call, record)
        return self._recorded_answer(call, record)

    def _recorded_answer(self, call: AdmittedCall, record: OperationRecord) -> dict[str, Any]:
        # What a settled record answers (REPEAT_ANSWER), with the first answer's evidence.
        state = MODEL_STATE[record.state]
        answer, code = REPEAT_ANSWER[state]
        if code is None:  # data, as a copy: the caller cannot reach the record
            model_result, result_text = project_data_result(call.spec, answer, json_copy(record.data))
        else:
            model_result, result_text = project_model_result(call.spec, answer, code=code), None
        return self._package(call, model_result, state=state, refs=record.refs, approval=record.approval,
                             revision=record.resource_revision, result_text=result_text)

    def _new_record(self, call: AdmittedCall, refs: Mapping[str, str | None],
                    approval: Mapping[str, Any] | None, revision: int | None) -> OperationRecord:
        # The registered profile, which equals the context's (dispatch checked it; check_context):
        # no ProviderProfile is built per write.
        context = call.context
        # By position, in OperationRecord's field order (state, request_sha256, profile,
        # operation_id, contract, refs, data, approval, arguments, resource_revision).
        return _QUICK_RECORD("none", call.request_sha256 or "", PROVIDER_PROFILES[context.adapter_revision],
                             context.operation_id, MappingProxyType(call.spec.contract_view()),
                             MappingProxyType(dict(refs)), None,
                             None if approval is None else MappingProxyType(dict(approval)),
                             MappingProxyType(dict(call.arguments or {})), revision)

    # -- packaging -----------------------------------------------------------------------------

    def _refused(self, call: AdmittedCall, refusal: BoundaryError) -> dict[str, Any]:
        if type(refusal) is _AdmittedRefusal:
            call = refusal.call
        if ERROR_CATALOG[refusal.code].scope != "tool":
            raise refusal
        return self._package(call, project_model_result(call.spec, "refused", code=refusal.code),
                             redactions=("rejected_arguments",) if refusal.code in _ARGUMENT_REFUSALS else ())

    def _package(self, call: AdmittedCall, model_result: dict[str, Any], *, state: str = "none",
                 handler_invoked: bool = False, effects: int = 0,
                 refs: dict[str, str | None] | MappingProxyType[str, str | None] = _NO_REFS,
                 redactions: Sequence[str] = (), approval: Mapping[str, Any] | None = None,
                 revision: int | None = None, result_text: str | None = None) -> dict[str, Any]:
        # result_text: model_result's canonical text when the caller has it (project_data_result).
        spec = call.spec
        contract = None if spec is None else spec.contract_view()
        provider_context = call.context.view(call.purpose)
        principal = principal_view(call.principal)
        downstream = refs.copy()  # a dict, from a dict or a read-only view: copy() is the cheaper spelling
        granted = None if approval is None else dict(approval)
        execution = {"operation_state": state, "handler_invoked": handler_invoked, "effects": effects}
        redacted = sorted(redactions)
        evidence = {"execution": execution, "redactions": redacted, "resource_revision": revision}
        if result_text is None:
            result_text = _portable_text(model_result)
        result_digest = _RESULT_TEMPLATE.sha256(result_text)
        if spec is None:  # refused before the registry named a tool: the definitions, no template
            request_digest = request_sha256(principal, None, None)
            binding_digest = call_binding_sha256(provider_context, None, request_digest, result_digest, downstream,
                                                 granted, evidence)
        else:
            request_digest = call.request_sha256 or request_sha256(principal, contract, call.arguments)
            binding_digest = _checked_binding_sha256(spec, provider_context, request_digest, result_digest,
                                                     downstream, granted, evidence)
        audit = {
            "version": AUDIT_VERSION,
            "principal": principal,
            "provider_context": provider_context,
            "tool_contract": contract,
            "arguments": None if call.arguments is None else _own_copy(spec, call.arguments),
            "downstream": downstream,
            "approval": granted,
            "redactions": redacted,
            "resource_revision": revision,
            "request_sha256": request_digest,
            "result_sha256": result_digest,
            "call_binding_sha256": binding_digest,
        }
        package = {
            "format": PACKAGE_FORMAT,
            "model_result": model_result,
            "protected_audit": audit,
            "execution": execution,
            "seal": seal_view(self._seal_keys, "package", binding_digest),
        }
        built = self._built.packages
        if built is not None:  # nothing has left the dispatcher yet: these are its own values
            built.append((package, ModelView(result_text, model_result["status"] != "ok",
                                             model_result["source"]["tool"])))
        return package


def _as_data(spec: ToolSpec, output: Any) -> Any:
    """A tool output as its package's data: a text tool's str becomes {"text": ...} (TEXT_OUTPUT)."""
    return {"text": output} if spec.output_contract is None and type(output) is str else output


def _receipt_holds(call: AdmittedCall, found: StatusAnswer) -> bool:
    """A status hook's receipt is this write's: its reference, when it has one, is an identifier,
    and its output passes the tool's output contract and echoes the call on every bound field."""
    spec = call.spec
    output = _as_data(spec, found.output)
    if found.receipt_ref is not None and not is_identifier(found.receipt_ref):
        return False
    try:
        scan_output(output)
        check_output_fields(spec, output)
    except BoundaryError:
        return False
    return all(_same_value(output[name], call.arguments[name]) for name in spec.bound_fields)


def _own_copy(spec: ToolSpec | None, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """Admitted arguments as a handler or a package gets them: never sharing a nested value with
    the call, whose request digest was taken at admission, nor with the record a store keeps."""
    return dict(arguments) if spec is None or spec._flat_input else json_copy(dict(arguments))


class _AdmittedRefusal(BoundaryError):
    """A tool-scope refusal that carries the most complete call known when it happened."""

    def __init__(self, call: AdmittedCall, code: str) -> None:
        super().__init__(code)
        self.call = call


_ARGUMENT_REFUSALS: Final = frozenset({"INVALID_ARGUMENTS"})
# An execute hook's reports that carry no output, and the code each answers with.
_UNSUCCESSFUL: Final[Mapping[str, str]] = MappingProxyType({"not_committed": "TOOL_FAILED",
                                                            "unknown": "OUTCOME_UNKNOWN"})
# _OUTPUT_REFUSALS (section 14): the refusals after which the handler's output is withheld from
# the model (only the audit says so).


def withheld(code: str) -> tuple[str, ...]:
    """The audit's redactions for a failed execution: the handler's output, when a check refused it."""
    return ("handler_output",) if code in _OUTPUT_REFUSALS else ()


def _raise_fault_before(fault: str) -> None:
    code = FAULTS_BEFORE_HANDLER.get(fault)
    if code is not None:
        raise BoundaryError(code)


# ============================================================================================
# 17. Package verification
# ============================================================================================
# A package is untrusted once it leaves the dispatcher. The verifier checks, in this order:
# exact fields and types at every level (so nothing below ever walks a hostile shape); the
# registry's provenance and the error catalog (a forger could recompute digests, but not change
# the registry); the three digests, recomputed from the package; and, when the caller names
# them, the trusted call context and principal the package must answer.

# Every object of a package is a closed table of field -> check, as the fixture loader's objects
# are (section 6); the checks are the loader's where the rule is the same.

def _exactly(expected: Any) -> _Check:
    # The type test first: an object whose __eq__ always says yes must not pass for the constant.
    return lambda value: type(value) is type(expected) and value == expected


def _is_plain_str(value: Any) -> bool:
    return type(value) is str


def _is_bool(value: Any) -> bool:
    return type(value) is bool


def _sorted_set_of(check: _Check, limit: int) -> _Check:
    """A list of at most `limit` items, each passing `check`, sorted and without repeats."""
    def holds(value: Any) -> bool:
        if type(value) is not list or len(value) > limit:
            return False
        for item in value:
            if not check(item):
                return False
        return value == sorted(set(value))
    return holds


def _nested(table: _Table) -> _Check:
    """An object inside a table, as one check: exactly its fields (plain keys), each passing."""
    fields, checks = table.fields, table.checks

    def holds(value: Any) -> bool:
        if type(value) is not dict or not plain_keys(value) or value.keys() != fields:
            return False
        for name, check in checks:
            if not check(value[name]):
                return False
        return True
    return holds


def _checked_later(_value: Any) -> bool:
    return True  # data and error have rules of their own, applied after provenance is known


_PACKAGE_FIELDS: Final = frozenset({"format", "model_result", "protected_audit", "execution", "seal"})
_SEAL_FIELDS: Final = frozenset(UNSEALED)
_EXECUTION: Final = _table(operation_state=_fixture_one_of(OPERATION_STATES), handler_invoked=_is_bool,
                           effects=_integer_in(0, 1))
_SOURCE: Final = _table(tool=_or_null(_is_plain_str), producer=_is_plain_str)
_TRUST_BY_STATUS: Final = MappingProxyType({"ok": "untrusted_data", "error": "boundary_control",
                                            "unknown": "boundary_control"})
_RESULTS: Final[Mapping[str, _Table]] = MappingProxyType({
    status: _table(
        version=_exactly(MODEL_RESULT_VERSION), status=_checked_later, outcome=_fixture_one_of(OUTCOMES),
        delivery=_fixture_one_of(DELIVERIES), recovery=_fixture_one_of(RECOVERIES), complete=_exactly(status == "ok"),
        truncated=_exactly(False), trust=_exactly(_TRUST_BY_STATUS[status]), source=_nested(_SOURCE),
        **{("data" if status == "ok" else "error"): _checked_later},
    )
    for status in STATUSES
})
_ERROR_FIELDS: Final = frozenset({"code", "message", "retryable"})
_AUDIT_FIELDS: Final = frozenset({
    "version", "principal", "provider_context", "tool_contract", "arguments", "downstream", "approval",
    "redactions", "resource_revision", "request_sha256", "result_sha256", "call_binding_sha256",
})
_AUDIT_PRINCIPAL: Final = _table(tenant=is_identifier, subject_ref=_is_digest,
                                 roles=_sorted_set_of(is_identifier, MAX_ROLES))
_AUDIT_CONTEXT: Final = _table(
    provider=_is_plain_str, api_family=_is_plain_str, adapter_revision=_is_plain_str, response_id=is_identifier,
    call_id=is_identifier, operation_id=is_identifier, idempotency_key=_or_null(is_identifier),
    purpose=_fixture_one_of(PURPOSES),
)
_DOWNSTREAM: Final = _table(request_ref=_or_null(is_identifier), receipt_ref=_or_null(is_identifier),
                            status_ref=_or_null(is_identifier))
_APPROVAL_VIEW: Final = _table(approver=is_identifier, expires_at=_is_time)
REDACTIONS: Final = frozenset({"handler_output", "rejected_arguments"})
# Not an assert (-O keeps it): the checked call binding's format writes these strings, and every
# identifier, as they are (section 15). An identifier is probed for each escaped character first,
# inside and last; the closed names are read whole.
if (any(IDENTIFIER_PATTERN.fullmatch(probe) for character in ['"', "\\", *map(chr, range(0x20))]
        for probe in (character, "A" + character, "A" + character + "A"))
        or _JSON_ESCAPED.search("".join([*(name for profile in PROVIDER_PROFILES.values()
                                           for name in (profile.provider, profile.api_family, profile.adapter_revision)),
                                         *PURPOSES, *OPERATION_STATES, *REDACTIONS])) is not None):
    raise RuntimeError("the checked call binding's strings must need no JSON escape")
# The audit's own scalars and objects, in the order their faults are named; then its digests.
_AUDIT: Final = _table(
    version=_exactly(AUDIT_VERSION), principal=_nested(_AUDIT_PRINCIPAL), provider_context=_nested(_AUDIT_CONTEXT),
)
_AUDIT_EVIDENCE: Final = _table(
    downstream=_nested(_DOWNSTREAM), approval=_or_null(_nested(_APPROVAL_VIEW)),
    redactions=_sorted_set_of(_fixture_one_of(REDACTIONS), len(REDACTIONS)),
    resource_revision=_or_null(_integer_in(1, MAX_REVISION)),
)
_AUDIT_DIGESTS: Final = _table(request_sha256=_is_digest, result_sha256=_is_digest, call_binding_sha256=_is_digest)
_TOOL_CONTRACT_FIELDS: Final = frozenset({  # the keys of ToolSpec.contract_view()
    "tool", "effect", "contract_revision", "input_revision", "output_revision", "effect_revision", "handler_revision",
    "producer", "producer_revision",
})


def _verified(body: dict[str, Any], table: _Table, code: str = "PACKAGE_MALFORMED") -> None:
    for name, check in table.checks:
        if not check(body[name]):
            raise BoundaryError(code)


def _shape(value: Any, fields: frozenset[str]) -> dict[str, Any]:
    # Exact key types first: a str subclass that hashes like "status" and equals anything would
    # otherwise pass for it, and ride into a verified payload.
    if type(value) is not dict or not plain_keys(value) or value.keys() != fields:
        raise BoundaryError("PACKAGE_MALFORMED")
    return value


def _require_in_package(condition: bool, code: str = "PACKAGE_MALFORMED") -> None:
    if not condition:
        raise BoundaryError(code)


def verify_package(package: Any, *, context: CallContext | None = None, principal: Principal | None = None,
                   registry: Mapping[str, ToolSpec] = REGISTRY,
                   approvers: frozenset[str] | Sequence[str] | None = None,
                   seal_keys: SealKeys | None = None, require_seal: bool = False) -> None:
    """Verify a result package completely, or raise the BoundaryError naming the first fault.

    ``approvers``, the host's approver allowlist, when given: the audited approver must be on it.
    It is taken as Dispatcher takes it (a list, tuple, set or frozenset of identifiers); anything
    else is the host's fault (CONTEXT_INVALID), never the package's.
    ``seal_keys``: a sealed package's seal is checked whenever the keys are given; with
    ``require_seal`` an unsealed package is refused (SEAL_REQUIRED), and so is any package when no
    keys were given to check it with. Never a silent pass.
    """
    # The host's own values first: their faults are not the package's.
    seal_keys = checked_seal_keys(seal_keys)
    allowed = None if approvers is None else _approver_allowlist(approvers)
    body = _shape(package, _PACKAGE_FIELDS)
    _require_in_package(_is_exactly(body["format"], PACKAGE_FORMAT))
    _check_execution(body["execution"])
    result = body["model_result"]
    _require_in_package(type(result) is dict and _member(result.get("status"), STATUSES))
    status = result["status"]
    _shape(result, _RESULTS[status].fields)
    audit = _shape(body["protected_audit"], _AUDIT_FIELDS)
    _check_result_fields(result, status)
    provider_context = _check_audit_fields(audit)
    spec = _check_provenance(result, audit, status, registry)
    _check_error_or_data(result, status, spec)
    _check_digests(result, audit, body["execution"], provider_context, spec)
    # After the digests: what is left to catch is a package whose digests were recomputed over a
    # combination the dispatcher never builds.
    _check_answer(result, audit, body["execution"], provider_context, spec)
    _check_seal(body["seal"], audit["call_binding_sha256"], seal_keys, require_seal)
    if context is not None:
        _check_expected_context(provider_context, context)
    if principal is not None:
        check_principal(principal)  # the host's own value, checked like the context: never a TypeError
        if audit["principal"] != principal_view(principal):
            raise BoundaryError("CALL_BINDING_MISMATCH")
    if allowed is not None and audit["approval"] is not None:
        _require_in_package(_member(audit["approval"]["approver"], allowed), "PACKAGE_APPROVER_UNKNOWN")


def _check_seal(seal: Any, binding_digest: str, keys: SealKeys | None, required: bool) -> None:
    body = _shape(seal, _SEAL_FIELDS)
    sealed = body["key_id"] is not None
    _require_in_package(sealed == (body["hmac_sha256"] is not None))
    if sealed:
        _require_in_package(is_identifier(body["key_id"]) and type(body["hmac_sha256"]) is str
                            and DIGEST_PATTERN.fullmatch(body["hmac_sha256"]) is not None)
    if required and (not sealed or keys is None):
        raise BoundaryError("SEAL_REQUIRED")
    if sealed and keys is not None:
        holds = seal_holds(keys, body, "package", binding_digest)
        _require_in_package(holds is not None, "SEAL_KEY_UNKNOWN")
        _require_in_package(bool(holds), "SEAL_MISMATCH")


def _check_execution(execution: Any) -> None:
    _verified(_shape(execution, _EXECUTION.fields), _EXECUTION)


def _check_result_fields(result: dict[str, Any], status: str) -> None:
    _verified(result, _RESULTS[status])


def _check_audit_fields(audit: dict[str, Any]) -> dict[str, Any]:
    _verified(audit, _AUDIT)
    context = audit["provider_context"]
    _require_in_package(registered_profile(context["provider"], context["api_family"], context["adapter_revision"])
                        is not None, "PROVIDER_MISMATCH")
    _verified(audit, _AUDIT_EVIDENCE)
    _verified(audit, _AUDIT_DIGESTS, "DIGEST_MALFORMED")
    return context


def _check_provenance(result: dict[str, Any], audit: dict[str, Any], status: str,
                      registry: Mapping[str, ToolSpec]) -> ToolSpec | None:
    contract = audit["tool_contract"]
    source = result["source"]
    if contract is None:
        _require_in_package(source["tool"] is None and source["producer"] == BOUNDARY_PRODUCER and status != "ok",
                            "PROVENANCE_MISMATCH")
        _require_in_package(audit["arguments"] is None and audit["approval"] is None)
        return None
    _shape(contract, _TOOL_CONTRACT_FIELDS)
    if not isinstance(registry, Mapping):
        raise BoundaryError("REGISTRY_INVALID", "registry")
    spec = registry.get(contract["tool"]) if type(contract["tool"]) is str else None
    if spec is not None and type(spec) is not ToolSpec:
        raise BoundaryError("REGISTRY_INVALID", "registry")  # the host's registry, not the package, is at fault
    # Plain strings only: then equal means the same canonical bytes, and the spec's own digest
    # templates may stand for the package's contract.
    _require_in_package(spec is not None and _only_text(contract) and contract == spec._contract and source["tool"] == spec.name
                        and source["producer"] == (spec.producer if status == "ok" else BOUNDARY_PRODUCER),
                        "PROVENANCE_MISMATCH")
    _require_in_package(audit["approval"] is None or spec.effect == "write")  # only a write is ever approved
    arguments = audit["arguments"]
    if arguments is not None:
        _require_in_package(type(arguments) is dict)
        try:
            check_input(spec, arguments)
        except BoundaryError:
            raise BoundaryError("PACKAGE_MALFORMED") from None
    return spec


def _check_error_or_data(result: dict[str, Any], status: str, spec: ToolSpec | None) -> None:
    if status == "ok":
        _require_in_package(result["recovery"] == "none" and spec is not None)
        check_output_fields(spec, result["data"])
        return
    error = _shape(result["error"], _ERROR_FIELDS)
    code = error["code"]
    catalog = ERROR_CATALOG.get(code) if type(code) is str else None
    _require_in_package(catalog is not None and catalog.scope == "tool"
                        and _is_exactly(error["message"], catalog.message)
                        and error["retryable"] is catalog.retryable, "ERROR_CATALOG_MISMATCH")
    _require_in_package(result["recovery"] == recovery_for(status, code))


def _check_answer(result: dict[str, Any], audit: dict[str, Any], execution: dict[str, Any],
                  provider_context: dict[str, Any], spec: ToolSpec | None) -> None:
    """The package is one of ANSWERS, whole: the same table the projection builds from."""
    code = result["error"]["code"] if "error" in result else None
    downstream = audit["downstream"]
    present = (downstream["request_ref"] is not None, downstream["status_ref"] is not None,
               downstream["receipt_ref"] is not None)
    effect = "any" if spec is None else spec.effect
    # The three were checked to be plain strings (_RESULTS), so they are a key like any other.
    for answer in _ANSWERS_BY_HEAD.get((result["status"], result["outcome"], result["delivery"]), ()):
        if ((code in answer.codes if code is not None else not answer.codes)
                and execution["operation_state"] in answer.states
                and execution["handler_invoked"] is answer.handler_invoked and execution["effects"] in answer.effects
                and (audit["approval"] is not None) is answer.approved and present in _REFS_PRESENT[answer.refs]
                and provider_context["purpose"] in answer.purposes
                and answer.effect in ("any", effect)):
            break
    else:
        raise BoundaryError("PACKAGE_INCONSISTENT")
    # Refused before the registry named a tool: exactly the two codes that can say so.
    _require_in_package((spec is None) == (code in _BEFORE_THE_REGISTRY), "PACKAGE_INCONSISTENT")
    if spec is not None and code is None:
        # Data echoes the audited arguments on every bound field.
        arguments = audit["arguments"]
        _require_in_package(type(arguments) is dict and all(
            _same_value(result["data"].get(name), arguments.get(name)) for name in spec.bound_fields
            if name in arguments), "PACKAGE_INCONSISTENT")


_BEFORE_THE_REGISTRY: Final = frozenset({"INVALID_PROPOSAL", "UNKNOWN_TOOL"})


def _check_digests(result: dict[str, Any], audit: dict[str, Any], execution: dict[str, Any],
                   provider_context: dict[str, Any], spec: ToolSpec | None) -> None:
    # Recomputed from the package alone. With a spec, the audit's contract is exactly the spec's
    # (checked above), so the spec's templates compute the same bytes as the definitions.
    if spec is None:
        request_digest = request_sha256(audit["principal"], None, audit["arguments"])
    else:
        principal = audit["principal"]  # exact strings and a list of them, checked above: cacheable
        request_digest = spec_request_sha256(
            spec, _audited_principal_text(principal["tenant"], principal["subject_ref"], tuple(principal["roles"])),
            audit["arguments"])
    _require_in_package(request_digest == audit["request_sha256"], "REQUEST_DIGEST_MISMATCH")
    # Every member but the data or the error was checked above to be a plain string, an exact
    # bool or the source's two strings: the frame of those values, with the one slot encoded.
    source = result["source"]
    result_digest = _RESULT_TEMPLATE.sha256(_result_frame(
        result["status"], result["outcome"], result["delivery"], result["recovery"], source["tool"], source["producer"],
    ).text(_portable_text(result["data"] if "data" in result else result["error"])))
    _require_in_package(result_digest == audit["result_sha256"], "RESULT_DIGEST_MISMATCH")
    evidence = {"execution": execution, "redactions": audit["redactions"],
                "resource_revision": audit["resource_revision"]}
    if spec is None:
        binding = call_binding_sha256(provider_context, None, request_digest, result_digest, audit["downstream"],
                                      audit["approval"], evidence)
    else:
        binding = _checked_binding_sha256(spec, provider_context, request_digest, result_digest,
                                          audit["downstream"], audit["approval"], evidence)
    _require_in_package(binding == audit["call_binding_sha256"], "CALL_BINDING_MISMATCH")


@functools.lru_cache(maxsize=TEMPLATE_CACHE * len(ANSWERS))
def _result_frame(status: str, outcome: str, delivery: str, recovery: str, tool: str | None,
                  producer: str) -> CanonicalTemplate:
    # A checked model_result with its data or its error as the one slot. Its other members follow
    # from these six (_RESULTS fixes the version, complete, truncated and trust by the status).
    succeeded = status == "ok"
    return CanonicalTemplate({
        "version": MODEL_RESULT_VERSION, "status": status, "outcome": outcome, "delivery": delivery,
        "complete": succeeded, "truncated": False, "recovery": recovery,
        "source": {"tool": tool, "producer": producer}, "trust": _TRUST_BY_STATUS[status],
        ("data" if succeeded else "error"): SLOT,
    })


@functools.lru_cache(maxsize=SUBJECT_REF_CACHE)
def _audited_principal_text(tenant: str, subject_ref: str, roles: tuple[str, ...]) -> str:
    # Only called on an audit's principal once its fields are known to be plain strings: a
    # verifier that meets the same principal again encodes it once.
    return _portable_text({"tenant": tenant, "subject_ref": subject_ref, "roles": list(roles)})


def _check_expected_context(provider_context: dict[str, Any], context: CallContext) -> None:
    check_context(context)
    expected = context.view(provider_context["purpose"])
    # The profile's three fields, compared as ProviderProfile compares them, without building two.
    _require_in_package((provider_context["provider"], provider_context["api_family"],
                         provider_context["adapter_revision"])
                        == (context.provider, context.api_family, context.adapter_revision), "PROVIDER_MISMATCH")
    _require_in_package(provider_context == expected, "CALL_BINDING_MISMATCH")


# ============================================================================================
# 18. Result sets
# ============================================================================================
# A provider turn's calls must each be answered exactly once, whatever order the results come
# in. Matching goes through a dictionary by call id, so a turn of n results costs O(n).


_TURN_SEQUENCES: Final = (list, tuple)  # sized, and read once: never a generator len() cannot count


def verify_result_set(calls: Sequence[CallContext], packages: Sequence[Any], *,
                      principal: Principal | None = None,
                      registry: Mapping[str, ToolSpec] = REGISTRY,
                      approvers: frozenset[str] | Sequence[str] | None = None,
                      seal_keys: SealKeys | None = None, require_seal: bool = False) -> list[dict[str, Any]]:
    """Verify every package against the turn's calls (and the contract set they were made with);
    return the packages in call order. approvers, seal_keys and require_seal as verify_package
    takes them, for every package of the turn."""
    seal_keys = checked_seal_keys(seal_keys)  # the host's own values first, as verify_package checks them
    allowed = None if approvers is None else _approver_allowlist(approvers)
    if type(calls) not in _TURN_SEQUENCES:
        raise BoundaryError("CONTEXT_INVALID")  # the host's list of the turn's calls
    if type(packages) not in _TURN_SEQUENCES:
        raise BoundaryError("PACKAGE_MALFORMED")
    if len(calls) > MAX_RESULT_SET or len(packages) > MAX_RESULT_SET:
        raise BoundaryError("RESULT_SET_TOO_LARGE")
    by_call: dict[str, CallContext] = {}
    turn = None
    for context in calls:
        check_context(context)
        if turn is None:
            turn = (context.adapter_revision, context.response_id)
        elif (context.adapter_revision, context.response_id) != turn:
            raise BoundaryError("RESULT_SET_MIXED_TURN")
        if context.call_id in by_call:  # by id, not identity: the same object listed twice is a duplicate too
            raise BoundaryError("RESULT_SET_DUPLICATE")
        by_call[context.call_id] = context
    answered: dict[str, dict[str, Any]] = {}
    for package in packages:
        call_id = _claimed_call_id(package)
        context = by_call.get(call_id)
        if context is None:
            raise BoundaryError("RESULT_SET_UNKNOWN")
        if call_id in answered:
            raise BoundaryError("RESULT_SET_DUPLICATE")
        verify_package(package, context=context, principal=principal, registry=registry, approvers=allowed,
                       seal_keys=seal_keys, require_seal=require_seal)
        answered[call_id] = package
    if len(answered) != len(by_call):
        raise BoundaryError("RESULT_SET_MISSING")
    return [answered[context.call_id] for context in calls]


def _claimed_call_id(package: Any) -> str:
    audit = package.get("protected_audit") if type(package) is dict else None
    context = audit.get("provider_context") if type(audit) is dict else None
    call_id = context.get("call_id") if type(context) is dict else None
    if type(call_id) is not str:
        raise BoundaryError("PACKAGE_MALFORMED")
    return call_id


# ============================================================================================
# 19. Provider adapters
# ============================================================================================
# Adapters only shape a verified package into a provider's final message; every rule stays in
# the dispatcher. Each checks its own profile, verifies the whole package against the trusted
# context of the call it answers, and reads nothing but model_result and the context: no
# protected_audit field can reach a payload. Schema-level teaching adapters, not SDK-tested.

UNREGISTERED_TOOL_NAME: Final = "unregistered_tool"  # a model-invented name is never echoed back


def model_result_text(package: Mapping[str, Any]) -> str:
    """The model_result as the text the model reads: canonical JSON."""
    return canonical_text(package["model_result"])


class ModelView(NamedTuple):
    """All an adapter reads of a package: the model_result's canonical text, whether it is an
    error, and the tool its source names. Nothing of protected_audit is in it."""

    text: str
    is_error: bool
    tool: str | None


def model_view(package: Mapping[str, Any]) -> ModelView:
    result = package["model_result"]
    return ModelView(model_result_text(package), result["status"] != "ok", result["source"]["tool"])


def _openai_item(view: ModelView, context: CallContext) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": context.call_id, "output": view.text}


def _anthropic_block(view: ModelView, context: CallContext) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": context.call_id, "content": view.text, "is_error": view.is_error}


def _gemini_turn(view: ModelView, context: CallContext) -> dict[str, Any]:
    return {
        "previous_interaction_id": context.response_id,
        "input": [{
            "type": "function_result",
            "call_id": context.call_id,
            "name": view.tool or UNREGISTERED_TOOL_NAME,
            "result": [{"type": "text", "text": view.text}],
            "is_error": view.is_error,
        }],
    }


def _mcp_result(view: ModelView, _context: CallContext) -> dict[str, Any]:
    # The JSON-RPC id and the request it answers are the MCP server's to pair: the result is all.
    return {"content": [{"type": "text", "text": view.text}], "isError": view.is_error}


# Each adapter's shape, from the ModelView alone: adapt() takes the view from a package it has
# verified, Dispatcher.dispatch_for_provider from the values it built the package from.
SHAPES: Final[Mapping[str, Callable[[ModelView, CallContext], dict[str, Any]]]] = MappingProxyType({
    "openai-responses-v1": _openai_item,
    "anthropic-messages-v1": _anthropic_block,
    "gemini-interactions-v1": _gemini_turn,
    "mcp-tools-call-v1": _mcp_result,
})


def _on_package(shape: Callable[[ModelView, CallContext], dict[str, Any]]
                ) -> Callable[[Mapping[str, Any], CallContext], dict[str, Any]]:
    return lambda package, context: shape(model_view(package), context)


# The same shapes over a (verified) package.
ADAPTERS: Final[Mapping[str, Callable[[Mapping[str, Any], CallContext], dict[str, Any]]]] = MappingProxyType({
    revision: _on_package(shape) for revision, shape in SHAPES.items()
})


def adapt(package: Any, context: CallContext, adapter_revision: str, *,
          principal: Principal | None = None, approvers: frozenset[str] | Sequence[str] | None = None,
          seal_keys: SealKeys | None = None, require_seal: bool = False,
          registry: Mapping[str, ToolSpec] = REGISTRY) -> dict[str, Any]:
    """Verify a package for the call it answers and shape it with the named adapter (with the
    contract set it was made with, the host's approver allowlist and seal keys, as
    verify_package takes them)."""
    check_context(context)
    if not _is_exactly(adapter_revision, context.adapter_revision):  # never an agreeable str's adapter
        raise BoundaryError("PROVIDER_MISMATCH")
    verify_package(package, context=context, principal=principal, registry=registry, approvers=approvers,
                   seal_keys=seal_keys, require_seal=require_seal)
    return SHAPES[adapter_revision](model_view(package), context)


def to_openai_responses(package: Any, context: CallContext, **options: Any) -> dict[str, Any]:
    """A Responses `function_call_output` item: the original call_id, output as a JSON string.
    Options as adapt() takes them: principal, approvers, seal_keys, require_seal, registry."""
    return adapt(package, context, "openai-responses-v1", **options)


def to_anthropic_messages(package: Any, context: CallContext, **options: Any) -> dict[str, Any]:
    """A Messages `tool_result` block: the original tool_use_id, text content, is_error.
    Options as adapt() takes them: principal, approvers, seal_keys, require_seal, registry."""
    return adapt(package, context, "anthropic-messages-v1", **options)


def to_gemini_interactions(package: Any, context: CallContext, **options: Any) -> dict[str, Any]:
    """An Interactions continuation: previous_interaction_id and one `function_result` step.
    Options as adapt() takes them: principal, approvers, seal_keys, require_seal, registry."""
    return adapt(package, context, "gemini-interactions-v1", **options)


def to_mcp_tool_result(package: Any, context: CallContext, **options: Any) -> dict[str, Any]:
    """An MCP ``tools/call`` result: one text block and isError, as an MCP server answers its
    client. Options as adapt() takes them: principal, approvers, seal_keys, require_seal, registry."""
    return adapt(package, context, "mcp-tools-call-v1", **options)


# ============================================================================================
# 20. The audit log
# ============================================================================================
# An append-only log of packages, one canonical JSON line each, hash-chained: every entry holds
# the previous entry's digest, its own digest (over its index, the previous digest and the whole
# package) and its seal; a closing entry ends the log, so a log cut short is told from a whole
# one. Anyone can recompute an unsealed chain; only a key holder can seal one. The verifier reads
# a bounded log in one pass and names the first bad entry and why. A chain still being written
# (a store's, one entry per row) is built entry by entry and verified open, without the closing entry.

GENESIS_SHA256: Final = "0" * 64  # the "previous entry" of the first one
_ENTRY_FIELDS: Final = frozenset({"format", "index", "previous_sha256", "package", "entry_sha256", "seal"})
_CLOSING_FIELDS: Final = frozenset({"format", "index", "previous_sha256", "closed", "entry_sha256", "seal"})


def audit_entry_sha256(body: Mapping[str, Any]) -> str:
    """The digest of an entry's body (every member but entry_sha256 and seal), domain-separated."""
    return canonical_sha256({"domain": AUDIT_ENTRY_DOMAIN, **body})


# A package entry's body and line, with the package encoded once into both (tests hold them to
# audit_entry_sha256 and canonical_json of the whole entry).
_ENTRY_BODY: Final = CanonicalTemplate({"domain": AUDIT_ENTRY_DOMAIN, "format": AUDIT_LOG_FORMAT, "index": SLOT,
                                        "package": SLOT, "previous_sha256": SLOT})
_ENTRY_LINE: Final = CanonicalTemplate({"entry_sha256": SLOT, "format": AUDIT_LOG_FORMAT, "index": SLOT,
                                        "package": SLOT, "previous_sha256": SLOT, "seal": SLOT})


def audit_entry_line(package: Mapping[str, Any], *, index: int, previous_sha256: str,
                     seal_keys: SealKeys | None = None) -> tuple[bytes, str]:
    """One package's entry at ``index`` after ``previous_sha256``: its canonical line (without the
    newline) and its digest. A store that keeps its chain in rows (durable/) appends these."""
    if type(package) is not dict:
        raise BoundaryError("AUDIT_MALFORMED")
    try:
        text = canonical_text(package)
    except (TypeError, ValueError, RecursionError):  # no canonical text: an object, NaN, 10**5000, a cycle
        raise BoundaryError("AUDIT_MALFORMED") from None
    return audit_entry_from_text(text, index=index, previous_sha256=previous_sha256, seal_keys=seal_keys)


def audit_entry_from_text(package_text: str, *, index: int, previous_sha256: str,
                          seal_keys: SealKeys | None = None) -> tuple[bytes, str]:
    """audit_entry_line, for a caller that already holds the package's canonical text
    (canonical_text(package), which it stores too): the package is encoded once, not twice."""
    if not is_portable_text(package_text):  # a lone surrogate: no UTF-8 line can carry it
        raise BoundaryError("AUDIT_MALFORMED")
    # Only an entry its own verifier accepts: an index in range (not a bool, not NaN), a digest.
    if type(index) is not int or not 0 <= index < MAX_AUDIT_ENTRIES or not _is_digest(previous_sha256):
        raise BoundaryError("AUDIT_MALFORMED")
    texts = (canonical_text(index), package_text, canonical_text(previous_sha256))
    digest = _ENTRY_BODY.sha256(*texts)
    seal = canonical_text(seal_view(checked_seal_keys(seal_keys), "audit-entry", digest))
    return _ENTRY_LINE.text(f'"{digest}"', *texts, seal).encode("utf-8"), digest


class AuditLog:
    """Writes packages to a binary stream as a hash chain; close() writes the closing entry.

    ``index`` and ``head`` continue a chain whose first ``index`` entries ended at ``head``.
    """

    def __init__(self, stream: Any, *, seal_keys: SealKeys | None = None, index: int = 0,
                 head: str = GENESIS_SHA256) -> None:
        if type(index) is not int or not 0 <= index <= MAX_AUDIT_ENTRIES or not _is_digest(head) or (
                (index == 0) != (head == GENESIS_SHA256)):
            raise BoundaryError("AUDIT_MALFORMED")  # a chain starts at the genesis digest, and only there
        self._stream = stream
        self._seal_keys = checked_seal_keys(seal_keys)
        self.index = index
        self.head = head  # the digest of the last entry written

    def append(self, package: Mapping[str, Any]) -> str:
        line, digest = audit_entry_line(package, index=self.index, previous_sha256=self.head,
                                        seal_keys=self._seal_keys)
        return self._write(line, digest)

    def close(self) -> str:
        body = {"format": AUDIT_LOG_FORMAT, "index": self.index, "previous_sha256": self.head, "closed": True}
        digest = audit_entry_sha256(body)
        entry = {**body, "entry_sha256": digest, "seal": seal_view(self._seal_keys, "audit-entry", digest)}
        return self._write(canonical_json(entry), digest)

    def _write(self, line: bytes, digest: str) -> str:
        self._stream.write(line + b"\n")
        self.index += 1
        self.head = digest
        return digest


@dataclass(frozen=True, slots=True)
class AuditReport:
    entries: int  # packages in the log (the closing entry not counted)
    head_sha256: str  # the closing entry's digest (an open chain: its last entry's), for a second implementation
    sealed: bool  # every entry sealed and checked


def read_audit_log(path: str | os.PathLike[str]) -> bytes:
    try:
        data = read_bounded(path, max_bytes=MAX_AUDIT_LOG_BYTES)
    except BoundaryError:
        raise BoundaryError("AUDIT_LOG_UNREADABLE") from None
    if len(data) > MAX_AUDIT_LOG_BYTES:
        raise BoundaryError("AUDIT_LOG_UNREADABLE")
    return data


def verify_audit_log(data: bytes, *, seal_keys: SealKeys | None = None, require_seal: bool = False,
                     closed: bool = True) -> AuditReport:
    """Verify a whole log, or raise BoundaryError(AUDIT_*, at="entries[i]") for its first bad entry.

    Linear: each line is decoded once, checked to be canonical, and its digest recomputed once.
    With seal keys every sealed entry's seal is checked; with ``require_seal`` an unsealed entry
    is refused too. The packages inside are bound by the entry digest and seal; once the chain
    holds, each is held to its own three digests (package_digests), as a verifier in another
    language recomputes them. The rest of a package's consistency (registry, answer table, its
    own seal) is verify_package's business, not re-run here. ``closed=False`` verifies a chain
    still being written (a ledger's): it has no closing entry, may not hold one, may be empty, and
    its head is its last entry's digest.
    """
    seal_keys = checked_seal_keys(seal_keys)
    if type(data) is not bytes or len(data) > MAX_AUDIT_LOG_BYTES:
        raise BoundaryError("AUDIT_LOG_UNREADABLE")
    lines = data.split(b"\n")
    if lines[-1] != b"":
        raise BoundaryError("AUDIT_TRUNCATED", at=f"entries[{len(lines) - 1}]")  # the last line was cut
    lines.pop()
    if len(lines) > MAX_AUDIT_ENTRIES + 1:
        raise BoundaryError("AUDIT_MALFORMED", at=f"entries[{MAX_AUDIT_ENTRIES + 1}]")
    # Each package is held to its own digests as its line is decoded, then dropped: a line's
    # decoded values can weigh many times its bytes, so no more than one line's are kept at once.
    # A package that fails is named only once the chain holds, as the first one in the log.
    entries = []
    unbound = None  # the first position whose package breaks its own digests
    for position, line in enumerate(lines):
        entry = _audit_entry(line, position)
        package = entry.pop("package", None)
        if package is not None and unbound is None and not _package_digests_hold(package):
            unbound = position
        entries.append(entry)
    indices = [entry["index"] for entry in entries]
    later = {}  # index -> the last position it appears at
    for position, index in enumerate(indices):
        later[index] = position
    previous = GENESIS_SHA256
    for position, entry in enumerate(entries):
        at = f"entries[{position}]"
        index = entry["index"]
        if index < position:
            raise BoundaryError("AUDIT_ENTRY_INSERTED", at=at)  # an index seen again
        if index > position:
            moved = later.get(position, -1) > position  # the expected index comes later
            raise BoundaryError("AUDIT_ENTRY_REORDERED" if moved else "AUDIT_ENTRY_DELETED", at=at)
        if entry["previous_sha256"] != previous:
            # This entry still names the digest its predecessor had: the predecessor changed.
            raise BoundaryError("AUDIT_ENTRY_EDITED", at=f"entries[{max(position - 1, 0)}]")
        digest = _line_digest(lines[position])
        if digest != entry["entry_sha256"]:
            raise BoundaryError("AUDIT_ENTRY_EDITED", at=at)
        _check_entry_seal(entry, digest, seal_keys, require_seal, at,
                          inserted=position + 1 < len(indices) and indices[position + 1] == index)
        if "closed" in entry and (position != len(entries) - 1 or not closed):
            raise BoundaryError("AUDIT_MALFORMED", at=at)  # nothing follows the closing entry; an open chain has none
        previous = digest
    if closed and (not entries or "closed" not in entries[-1]):
        raise BoundaryError("AUDIT_TRUNCATED", at=f"entries[{len(entries)}]")
    # The chain holds: every package is as written. Only a writer's fault, or an edit re-chained
    # where no seal guards the log, can have left one that breaks its own digests.
    if unbound is not None:
        raise BoundaryError("AUDIT_PACKAGE_DIGEST", at=f"entries[{unbound}]")
    return AuditReport(entries=len(entries) - (1 if closed else 0), head_sha256=previous,
                       sealed=seal_keys is not None and all(entry["seal"]["key_id"] is not None for entry in entries))


_DOMAIN_MEMBER: Final = b'"domain":' + canonical_json(AUDIT_ENTRY_DOMAIN) + b","
_DIGEST_MEMBER: Final = b'"entry_sha256":"'


def _line_digest(line: bytes) -> str:
    """audit_entry_sha256 of a line's body, hashed from the line's own bytes.

    The writer writes canonical lines, whose members are sorted: the body is the line with its
    entry_sha256 member (first, or second after "closed") replaced by the domain member, which
    sorts right there, and its seal member (always last) dropped. A body in any other spelling
    hashes to another digest and is an edit: one spelling per entry, and no encoding again
    (which would cost more than the decoding); the seal member and the line's ends, outside the
    digest, are held to the canonical spelling by _audit_entry. Tests hold this to the definition.
    """
    start = line.index(_DIGEST_MEMBER)
    end = line.rindex(b',"seal":')
    body = line[:start] + _DOMAIN_MEMBER + line[start + len(_DIGEST_MEMBER) + 66:end] + b"}"
    return hashlib.sha256(body).hexdigest()


_DIGESTED_AUDIT_FIELDS: Final = frozenset({"principal", "tool_contract", "arguments", "provider_context", "downstream",
                                          "approval", "redactions", "resource_revision", "request_sha256",
                                          "result_sha256", "call_binding_sha256"})


def package_digests(package: Mapping[str, Any]) -> tuple[str, str, str]:
    """request_sha256, result_sha256 and call_binding_sha256 of a package, recomputed from the
    package alone (its own tool contract, no registry): what a log verifier in any language can
    recompute. KeyError or TypeError where the package lacks what they are computed from."""
    audit = package["protected_audit"]
    contract = audit["tool_contract"]
    if type(audit) is not dict or not (contract is None or (type(contract) is dict and contract.keys() >= _NULL_CONTRACT.keys())):
        raise TypeError("not a package")  # {} would digest as no contract at all
    request = request_sha256(audit["principal"], contract, audit["arguments"])
    result = result_sha256(package["model_result"])
    return request, result, call_binding_sha256(audit["provider_context"], contract, request, result,
                                                audit["downstream"], audit["approval"], evidence_view(package))


def _package_digests_hold(package: dict[str, Any]) -> bool:
    # The log's entry digest and seal bind a package as written; this holds the package to its
    # own digests, so that a verifier in another language recomputes every one of them from the
    # same bytes. The rest of a package's consistency is verify_package's, with a registry.
    audit = package.get("protected_audit")
    if type(audit) is not dict or not audit.keys() >= _DIGESTED_AUDIT_FIELDS:
        return False
    try:
        digests = package_digests(package)
    except (KeyError, TypeError, ValueError):  # a contract without its revisions; a value with no canonical text
        return False
    return digests == (audit["request_sha256"], audit["result_sha256"], audit["call_binding_sha256"])


def _audit_entry(line: bytes, position: int) -> dict[str, Any]:
    at = f"entries[{position}]"
    try:
        entry = decode_strict_json(line, max_bytes=MAX_AUDIT_LINE_BYTES)
    except BoundaryError:
        raise BoundaryError("AUDIT_MALFORMED", at=at) from None
    fields = _CLOSING_FIELDS if type(entry) is dict and "closed" in entry else _ENTRY_FIELDS
    if not (type(entry) is dict and plain_keys(entry) and entry.keys() == fields
            and _is_exactly(entry["format"], AUDIT_LOG_FORMAT)
            and type(entry["index"]) is int and 0 <= entry["index"] <= MAX_AUDIT_ENTRIES
            and _is_digest(entry["previous_sha256"]) and _is_digest(entry["entry_sha256"])
            and entry.get("closed", True) is True and entry.get("package", {}).__class__ is dict
            and type(entry["seal"]) is dict and plain_keys(entry["seal"]) and entry["seal"].keys() == _SEAL_FIELDS
            and _DIGEST_MEMBER in line and line[:1] == b"{"
            and line.endswith(b',"seal":' + canonical_json(entry["seal"]) + b"}")):
        # The seal member is outside the entry's digest: its bytes, and whatever follows them (a
        # tab, a CR of a CRLF ending), are held to the canonical spelling here instead.
        raise BoundaryError("AUDIT_MALFORMED", at=at)
    return entry


def _check_entry_seal(entry: dict[str, Any], digest: str, keys: SealKeys | None, required: bool, at: str,
                      *, inserted: bool) -> None:
    seal = entry["seal"]
    if seal["key_id"] is None:
        if required:
            raise BoundaryError("AUDIT_UNSEALED", at=at)
        return
    if keys is None:
        return
    holds = seal_holds(keys, seal, "audit-entry", digest)
    if holds is None:
        raise BoundaryError("AUDIT_KEY_UNKNOWN", at=at)
    if not holds:
        # Recomputed by someone without the key: a forged entry beside a real one, or an edit.
        raise BoundaryError("AUDIT_ENTRY_INSERTED" if inserted else "AUDIT_ENTRY_EDITED", at=at)


# ============================================================================================
# 21. Fixture runner
# ============================================================================================
# The runner holds no per-case branch: each step's expectation is compared field by field with
# what the boundary did, after the package has passed verification and its provider adapter.

EXPECTATION_FIELDS: Final = tuple(Expectation.__slots__)


@dataclass(frozen=True, slots=True)
class StepReport:
    case_id: str
    step_id: str
    kind: str
    tool: str
    seen: Mapping[str, Any]
    expected: Mapping[str, Any]
    payload: Mapping[str, Any] | None = None  # what goes back to the provider for this step
    package: Mapping[str, Any] | None = None  # the step's whole result package (what an audit log keeps)

    @property
    def mismatches(self) -> tuple[str, ...]:
        return tuple(field for field in self.expected if self.seen.get(field) != self.expected[field]
                     or type(self.seen.get(field)) is not type(self.expected[field]))


def run_step(dispatcher: Dispatcher, step: Step, *, seal_keys: SealKeys | None = None) -> dict[str, Any]:
    """Run one fixture step on a dispatcher; return what was seen, in expectation fields."""
    return _run_step(dispatcher, step, seal_keys)[0]


def _run_step(dispatcher: Dispatcher, step: Step, seal_keys: SealKeys | None = None
              ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any] | None]:
    for change in step.world_changes:
        dispatcher.set_order_status(change.tenant, change.order_ref, change.status)
    if step.kind == "dispatch":
        package = dispatcher.dispatch(step.proposal, step.context, step.principal, approval=step.approval,
                                      now=step.now, deadline=step.deadline, fault=step.fault)
    else:
        package = dispatcher.query_operation_status(step.proposal, step.context, step.principal,
                                                    now=step.now, fault=step.fault)
    seen: dict[str, Any] = {}
    payload = None
    try:
        payload = adapt(package, step.context, step.context.adapter_revision, principal=step.principal,
                        seal_keys=seal_keys, require_seal=seal_keys is not None)
    except BoundaryError as error:
        seen["verification"] = error.code
    result = package["model_result"]
    audit = package["protected_audit"]
    seen.update({
        "status": result["status"],
        "error_code": result["error"]["code"] if "error" in result else None,
        "outcome": result["outcome"],
        "delivery": result["delivery"],
        "recovery": result["recovery"],
        "effect_count": dispatcher.effect_count,
        "data": result.get("data"),
        "request_sha256": audit["request_sha256"],
        "result_sha256": audit["result_sha256"],
        "call_binding_sha256": audit["call_binding_sha256"],
    })
    return seen, package, payload


def fresh_dispatcher(case: Case, world: World) -> Dispatcher:
    """The default dispatcher of a case: in memory, over the fixture's world, one per case."""
    return Dispatcher.from_world(world)


DispatcherFactory = Callable[[Case, World], Dispatcher]


def run_case(case: Case, world: World, *, dispatcher_for: DispatcherFactory = fresh_dispatcher,
             seal_keys: SealKeys | None = None) -> list[StepReport]:
    """Run one case's steps in order on one dispatcher (another layer passes its own factory).

    With seal keys, the default dispatcher seals every package and every package must verify
    with its seal.
    """
    if seal_keys is not None and dispatcher_for is fresh_dispatcher:
        dispatcher = Dispatcher.from_world(world, seal_keys=seal_keys)
    else:
        dispatcher = dispatcher_for(case, world)
    reports = []
    for step in case.steps:
        expected = {field: getattr(step.expect, field) for field in EXPECTATION_FIELDS}
        expected["verification"] = None
        seen, package, payload = _run_step(dispatcher, step, seal_keys)
        seen.setdefault("verification", None)
        reports.append(StepReport(case.id, step.id, step.kind, str(step.proposal["name"]), seen, expected, payload,
                                  package))
    return reports


def run_fixture(fixture: Fixture, *, case_id: str | None = None, dispatcher_for: DispatcherFactory = fresh_dispatcher,
                seal_keys: SealKeys | None = None) -> tuple[dict[str, Any], list[StepReport]]:
    """Run every case (or one) on a fresh dispatcher each; return the summary and step reports."""
    cases = [case for case in fixture.cases if case_id is None or case.id == case_id]
    if not cases:
        raise BoundaryError("CLI_UNKNOWN_CASE")
    reports = [report for case in cases
               for report in run_case(case, fixture.world, dispatcher_for=dispatcher_for, seal_keys=seal_keys)]
    failures = [
        {"case": report.case_id, "step": report.step_id, "field": field,
         "expected": report.expected[field], "seen": report.seen.get(field)}
        for report in reports for field in report.mismatches
    ]
    summary = {
        "passed": not failures,
        "format": FIXTURE_FORMAT,
        "case_count": len(cases),
        "step_count": len(reports),
        "failures": failures,
    }
    return summary, reports


def render_report(reports: Sequence[StepReport], *, payloads: bool = False) -> str:
    """A per-step table for people learning from the fixture; optionally each provider payload."""
    lines = []
    current = None
    for report in reports:
        if report.case_id != current:
            current = report.case_id
            lines.append(f"case {current}")
        seen = report.seen
        verdict = "PASS" if not report.mismatches else "FAIL " + ",".join(report.mismatches)
        lines.append(
            f"  {report.step_id:<4} {report.kind:<12} {report.tool[:24]:<24} status={seen['status']:<7} "
            f"error={seen['error_code'] or '-':<24} outcome={seen['outcome']:<12} "
            f"delivery={seen['delivery']:<18} effects={seen['effect_count']}  {verdict}"
        )
        if payloads and report.payload is not None:
            lines.append("       payload " + json.dumps(report.payload, ensure_ascii=False, sort_keys=True))
    passed = sum(1 for report in reports if not report.mismatches)
    lines.append(f"{passed}/{len(reports)} steps as expected")
    return "\n".join(lines)


# ============================================================================================
# 22. CLI
# ============================================================================================
# Exit 0: every expectation held. Exit 1: the fixture loaded but an expectation failed. Exit 2:
# the fixture or the command line was rejected. --check-contracts: exit 0 every tool compiled and
# can be dispatched, 1 it compiled but some tool cannot be (no resource field or output schema),
# 2 the file or its overlay was refused. Whatever the input, the output is one JSON
# object (or, with --report, the readable table) and never a traceback or a local path.


# Every command line of the project answers a failure the same way, through these two: one JSON
# object {"passed": false, "error": {...}} on stdout, exit 2, and INTERNAL_ERROR for anything
# unforeseen, never a traceback. Ctrl-C is the one other exit: CLI_INTERRUPTED in the same shape.

EXIT_INTERRUPTED: Final = 130  # 128 + SIGINT: the status a shell gives a command stopped by Ctrl-C


_GIVEN: Final = "_options_given"  # kept on the namespace while one command line is parsed, then removed


class _StoreOnce(argparse.Action):
    """argparse's plain store, for a value given at most once: of `--db a --db b` argparse keeps the
    last without a word (a wrapper's option after the user's wins), so a second one is CLI_USAGE."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        given = namespace.__dict__.setdefault(_GIVEN, set())
        if self.dest in given:
            raise BoundaryError("CLI_USAGE")
        given.add(self.dest)
        setattr(namespace, self.dest, values)


# The commands pyproject.toml installs ([project.scripts]); a test holds the two to each other.
_INSTALLED_COMMANDS: Final = frozenset({
    "tool-dispatcher", "tool-dispatcher-durable", "tool-dispatcher-streams", "tool-dispatcher-bench",
    "tool-dispatcher-mcp", "tool-dispatcher-signatures", "tool-dispatcher-artifacts",
})


def command_name(own: str) -> str:
    """The name a command line's usage shows: ``own`` (the file's, "mcp_bridge.py guard") as it
    is, unless the process runs as an installed command, whose name then takes the first word's
    place ("tool-dispatcher-mcp guard"): the name the user typed, and can type again."""
    argv = getattr(sys, "argv", None)  # an embedding interpreter may give none
    invoked = os.path.basename(argv[0]).removesuffix(".exe") if argv else ""  # .exe: Windows' launchers
    if invoked not in _INSTALLED_COMMANDS:
        return own
    _first, space, rest = own.partition(" ")
    return invoked + space + rest


class CliParser(argparse.ArgumentParser):
    """argparse, except that a bad command line is CLI_USAGE (argparse would print and exit), a
    flag is its whole name ("--fix" is no "--fixture", so adding a flag never changes an old
    command), an option that stores a value takes it once (a repeat is CLI_USAGE), and its name
    is the installed command's when it runs as one (command_name)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if type(kwargs.get("prog")) is str:
            kwargs["prog"] = command_name(kwargs["prog"])
        super().__init__(*args, **{"allow_abbrev": False, **kwargs})
        for name in (None, "store"):  # what add_argument uses unless told otherwise; subparsers are CliParsers too
            self.register("action", name, _StoreOnce)

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        parsed, rest = super().parse_known_args(args, namespace)
        parsed.__dict__.pop(_GIVEN, None)
        return parsed, rest

    def error(self, message: str) -> NoReturn:
        raise BoundaryError("CLI_USAGE")


def emit_json(value: Any, *, indent: int | None = 2) -> None:
    """One JSON document on stdout, ASCII only (a terminal of any encoding shows it)."""
    sys.stdout.write(json.dumps(value, indent=indent, ensure_ascii=True) + "\n")


def cli_failure(error: CatalogError) -> int:
    """Print the one failure shape of every CLI and answer its exit status, 2."""
    emit_json({"passed": False, "error": error.to_json()})
    return 2


def run_cli(command: Callable[[], int]) -> int:
    """Run a CLI body: its own exit status, or 2 and the failure shape for any error at all."""
    if sys.stdout is None:
        return 2  # started with stdout closed (`>&-`): no answer could be given, so nothing runs
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C is KeyboardInterrupt, below
    try:
        try:
            return command()
        except CatalogError as error:
            return cli_failure(error)
        except KeyboardInterrupt:
            # Whatever the run had written stays written (a store recovers it); no traceback.
            cli_failure(BoundaryError("CLI_INTERRUPTED"))
            return EXIT_INTERRUPTED
        except BrokenPipeError:
            raise
        except Exception:  # the last line of defence: a bug must still not print a traceback
            return cli_failure(BoundaryError("INTERNAL_ERROR"))
    except BrokenPipeError:
        # Whoever read stdout went away (`| head`): nothing more can be said there. Exit 2, and
        # point stdout at nothing, so the interpreter's last flush does not complain either.
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 2


def _cli_arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = CliParser(prog="tool-dispatcher", description="Run a tool-cases-v2 fixture through the boundary.")
    task = parser.add_mutually_exclusive_group(required=True)
    task.add_argument("--fixture", help="path of the tool-cases-v2 JSON fixture")
    task.add_argument("--verify-audit", metavar="FILE", help="verify an audit log's chain (and seals, with keys)")
    task.add_argument("--check-contracts", metavar="FILE",
                      help=f"compile a {CONTRACTS_FORMAT} file and print the compiled set")
    parser.add_argument("--overlay", metavar="FILE", help=f"with --check-contracts: a {OVERLAY_FORMAT} file")
    parser.add_argument("--case", help="run only the case with this id")
    parser.add_argument("--report", action="store_true",
                        help="print a readable per-step table instead of JSON (with --case: each provider payload too)")
    parser.add_argument("--audit-log", metavar="FILE",
                        help="write the run's packages as a hash-chained log (new file)")
    parser.add_argument("--seal-key", metavar="FILE", help=f"a {SEAL_KEYS_FORMAT} file: seal packages and log "
                                                           f"entries, or require and check their seals "
                                                           f"(default: the file ${SEAL_KEYS_ENVIRONMENT} names)")
    arguments = parser.parse_args(argv)
    # "Given" is "not None" throughout: an empty value ("--seal-key $UNSET") is given, and refused
    # where it is read, never taken for an absent flag (which would run unsealed).
    given = {name for name in ("case", "audit_log", "seal_key") if getattr(arguments, name) is not None}
    if arguments.verify_audit is not None and (arguments.report or given & {"case", "audit_log"}):
        raise BoundaryError("CLI_USAGE")
    if arguments.overlay is not None and arguments.check_contracts is None:
        raise BoundaryError("CLI_USAGE")  # an overlay narrows a contracts file: alone it checks nothing
    if arguments.check_contracts is not None and (arguments.report or given):
        raise BoundaryError("CLI_USAGE")
    return arguments


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli(lambda: _cli_run(argv))


def _cli_run(argv: Sequence[str] | None) -> int:
    arguments = _cli_arguments(argv)
    if arguments.check_contracts is not None:
        return _check_contracts_command(arguments.check_contracts, arguments.overlay)
    seal_keys = seal_keys_from_environment() if arguments.seal_key is None else load_seal_keys(arguments.seal_key)
    if arguments.verify_audit is not None:
        return _verify_audit_command(arguments.verify_audit, seal_keys)
    fixture = load_fixture(arguments.fixture)
    summary, reports = run_fixture(fixture, case_id=arguments.case, seal_keys=seal_keys)
    if arguments.audit_log is not None:
        summary["audit_log"] = _write_audit_log(arguments.audit_log, reports, seal_keys)
    if arguments.report:
        text = render_report(reports, payloads=arguments.case is not None)
        sys.stdout.write(text.encode("ascii", "backslashreplace").decode("ascii") + "\n")
    else:
        emit_json(summary)
    return 0 if summary["passed"] else 1


def _check_contracts_command(path: str, overlay_path: str | None) -> int:
    """Exit 0: every tool compiled, and a Dispatcher runs each given the hooks its view names."""
    overlay = load_overlay(overlay_path) if overlay_path is not None else None
    contracts = load_contracts(path, overlay=overlay)
    tools = [_compiled_view(spec) for spec in contracts.values()]
    emit_json({"passed": True, "format": CONTRACTS_FORMAT, "overlay": overlay is not None,
               "tool_count": len(tools), "tools": tools})
    return 0


def _compiled_view(spec: ToolSpec) -> dict[str, Any]:
    output = spec.output_contract
    return {
        "name": spec.name,
        "effect": spec.effect,
        "required_role": spec.required_role,
        "resource_field": spec.resource_field,
        "bound_fields": list(spec.bound_fields),
        "hooks_needed": ["execute"] if spec.resource_field is None else ["execute", "resolve"],
        "output": "text" if output is None else "schema",
        "contract": spec.contract_view(),
        "input_schema": spec.input_schema(),
        "output_schema": spec.output_schema(),
        "host_bounds": {"input": list(spec.input_contract.host_bounds()),
                        "output": [] if output is None else list(output.host_bounds())},
    }


def _write_audit_log(path: str, reports: Sequence[StepReport], seal_keys: SealKeys | None) -> dict[str, Any]:
    # A new file only (O_EXCL): an audit log is appended to by its writer, never overwritten by a
    # run. Its owner's only: it holds every package's arguments and answers.
    new_file = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    try:
        with os.fdopen(os.open(path, new_file, 0o600), "wb") as stream:
            log = AuditLog(stream, seal_keys=seal_keys)
            for report in reports:
                log.append(report.package)
            head = log.close()
    except FileExistsError:
        raise BoundaryError("AUDIT_LOG_EXISTS") from None
    except OSError:
        raise BoundaryError("AUDIT_LOG_UNREADABLE") from None
    return {"entries": len(reports), "head_sha256": head, "sealed": seal_keys is not None}


def _verify_audit_command(path: str, seal_keys: SealKeys | None) -> int:
    try:
        report = verify_audit_log(read_audit_log(path), seal_keys=seal_keys, require_seal=seal_keys is not None)
    except BoundaryError as error:
        if error.code == "AUDIT_LOG_UNREADABLE":
            raise
        index = int(error.at[len("entries["):-1])  # the first bad entry, by its position in the file
        emit_json({"passed": False, "failure": {"index": index, **error.to_json()}})
        return 1
    emit_json({"passed": True, "entries": report.entries, "head_sha256": report.head_sha256,
               "sealed": report.sealed})
    return 0


if __name__ == "__main__":
    sys.exit(main())
