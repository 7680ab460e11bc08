"""The ``tool-contracts-v1`` file: tools declared as data, their schemas compiled into exact checks.

A contracts file declares each tool the boundary may guard: its name, description, effect (read
or write), required role, the input field that names the resource, input and output schemas (in
the exact subset of schema_subset.py), the output fields bound to the input, revisions, the
producer, where the declaration came from (provenance) and the server's annotations, kept as
hints that nothing trusts.

It is loaded with the fixture loader's discipline, through the core's own functions: a bounded
read of a regular file (``tool_dispatcher.read_bounded``), then the strict decoder
(``tool_dispatcher.decode_strict_json``: byte cap, depth pre-scan, duplicate keys, the portable
domain), then exact fields at every level. Every failure is a stable code with an ``at`` path
built from known field names and indices, never text from the file.

Sections, in the order data flows:
    1. Limits and constants    3. Value types
    2. Errors                  4. Loading
"""
from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final, Mapping

_HERE: Final = Path(__file__).resolve().parent
for _path in (str(_HERE.parent), str(_HERE)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import tool_dispatcher  # noqa: E402
from tool_dispatcher import BoundaryError, CatalogError, error_specs, is_identifier  # noqa: E402

import schema_subset  # noqa: E402
from schema_subset import CompiledSchema, ObjectRule, SchemaRefusal, StringRule  # noqa: E402

# ============================================================================================
# 1. Limits and constants
# ============================================================================================

CONTRACTS_FORMAT: Final = "tool-contracts-v1"
MAX_CONTRACTS_BYTES: Final = 1_048_576  # a file of up to 32 tools at the schema byte limit each
MAX_CONTRACTS_DEPTH: Final = schema_subset.MAX_SCHEMA_DEPTH + 4  # file, tools, tool, schema: then the schema's own
MAX_TOOLS: Final = 128  # tools in one file; providers cap a request's tools at 128
MAX_DESCRIPTION_LENGTH: Final = 2_048  # characters of a tool description: untrusted text shown to a model
TOOL_NAME: Final = re.compile(r"[A-Za-z0-9_.-]{1,64}")  # MCP's alphabet, at the providers' 64 characters
DIGEST: Final = re.compile(r"[0-9a-f]{64}")
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

# ============================================================================================
# 2. Errors
# ============================================================================================

CONTRACTS_CATALOG: Final = MappingProxyType({
    **error_specs(
        "contracts", False,
        CONTRACTS_UNREADABLE="The contracts file could not be read.",
        CONTRACTS_VERSION="The contracts file is not in the format this module speaks.",
        CONTRACTS_FIELDS="A contracts object has an unknown or a missing field.",
        CONTRACTS_VALUE="A contracts value has the wrong type or form.",
        CONTRACTS_LIMIT="A contracts collection or text exceeds its limit.",
        CONTRACTS_DUPLICATE="Two tools of the contracts file have the same name.",
        CONTRACTS_REFERENCE="A field list names no field of the tool's schemas.",
    ),
})


class ContractsError(CatalogError):
    """A contracts file refused after decoding; ``at`` names the place by field names and indices."""

    CATALOG = CONTRACTS_CATALOG


# ============================================================================================
# 3. Value types
# ============================================================================================


@dataclass(frozen=True, slots=True)
class ToolContract:
    """One tool, its schemas compiled; everything else as the file declared it."""

    name: str
    description: str
    effect: str
    required_role: str
    resource_field: str | None
    input_schema: CompiledSchema
    output_schema: CompiledSchema | None
    bound_fields: tuple[str, ...]
    revisions: Mapping[str, str]
    producer: str
    provenance: Mapping[str, Any]
    hints: Mapping[str, bool | None]  # the server's annotations: shown to the host, never trusted

    def check_input(self, arguments: Any) -> None:
        """Raise schema_subset.ValueRefusal unless the input schema admits the arguments exactly."""
        self.input_schema.check(arguments)

    def contract_view(self) -> dict[str, str]:
        """The same view of revisions the core puts in protected_audit (ToolSpec.contract_view)."""
        return {
            "tool": self.name,
            "effect": self.effect,
            "contract_revision": self.revisions["contract"],
            "input_revision": self.revisions["input"],
            "output_revision": self.revisions["output"],
            "effect_revision": self.revisions["effect"],
            "handler_revision": self.revisions["handler"],
            "producer": self.producer,
            "producer_revision": self.revisions["producer"],
        }


@dataclass(frozen=True, slots=True)
class ContractSet:
    tools: Mapping[str, ToolContract]  # by name, in file order


# ============================================================================================
# 4. Loading
# ============================================================================================


def load_contracts(path: str | os.PathLike[str], *, max_bytes: int = MAX_CONTRACTS_BYTES) -> ContractSet:
    """Read and compile a contracts file; every failure is a CatalogError without the path."""
    try:
        data = tool_dispatcher.read_bounded(path, max_bytes=max_bytes)
    except BoundaryError:
        raise ContractsError("CONTRACTS_UNREADABLE") from None
    return parse_contracts(data, max_bytes=max_bytes)


def parse_contracts(data: bytes, *, max_bytes: int = MAX_CONTRACTS_BYTES) -> ContractSet:
    """Decode strictly (JSON_* codes from the core), then exact fields and compiled schemas."""
    root = _fields(tool_dispatcher.decode_strict_json(data, max_bytes=max_bytes, max_depth=MAX_CONTRACTS_DEPTH),
                   _ROOT_FIELDS, "contracts")
    if root["format"] != CONTRACTS_FORMAT or type(root["format"]) is not str:
        raise ContractsError("CONTRACTS_VERSION", "format")
    raw_tools = root["tools"]
    if type(raw_tools) is not list:
        raise ContractsError("CONTRACTS_VALUE", "tools")
    if not 1 <= len(raw_tools) <= MAX_TOOLS:
        raise ContractsError("CONTRACTS_LIMIT", "tools")
    tools: dict[str, ToolContract] = {}
    for index, raw in enumerate(raw_tools):
        tool = parse_tool(raw, f"tools[{index}]")
        if tool.name in tools:
            raise ContractsError("CONTRACTS_DUPLICATE", f"tools[{index}].name")
        tools[tool.name] = tool
    return ContractSet(MappingProxyType(tools))


def parse_tool(raw: Any, at: str) -> ToolContract:
    """One tool entry: exact fields, then its schemas compiled, then the references between them."""
    body = _fields(raw, _TOOL_FIELDS, at)
    _require(type(body["name"]) is str and TOOL_NAME.fullmatch(body["name"]) is not None, f"{at}.name")
    _require(type(body["description"]) is str, f"{at}.description")
    if len(body["description"]) > MAX_DESCRIPTION_LENGTH:
        raise ContractsError("CONTRACTS_LIMIT", f"{at}.description")
    _require(body["effect"] in EFFECTS and type(body["effect"]) is str, f"{at}.effect")
    _require(is_identifier(body["required_role"]), f"{at}.required_role")
    _require(is_identifier(body["producer"]), f"{at}.producer")
    input_schema = _compile(body["input_schema"], f"{at}.input_schema")
    output_schema = None if body["output_schema"] is None else _compile(body["output_schema"], f"{at}.output_schema")
    revisions = _fields(body["revisions"], frozenset(_REVISION_FIELDS), f"{at}.revisions")
    for name in _REVISION_FIELDS:
        _require(is_identifier(revisions[name]), f"{at}.revisions.{name}")
    return ToolContract(
        name=body["name"],
        description=body["description"],
        effect=body["effect"],
        required_role=body["required_role"],
        resource_field=_resource_field(body["resource_field"], input_schema, f"{at}.resource_field"),
        input_schema=input_schema,
        output_schema=output_schema,
        bound_fields=_bound_fields(body["bound_fields"], input_schema, output_schema, f"{at}.bound_fields"),
        revisions=MappingProxyType({name: revisions[name] for name in _REVISION_FIELDS}),
        producer=body["producer"],
        provenance=_provenance(body["provenance"], f"{at}.provenance"),
        hints=_hints(body["hints"], f"{at}.hints"),
    )


def _compile(schema: Any, at: str) -> CompiledSchema:
    try:
        return schema_subset.compile_schema(schema)
    except SchemaRefusal as refusal:  # the same code, its place moved inside the file
        raise SchemaRefusal(refusal.code, at + refusal.at[len(schema_subset.SCHEMA_ROOT):]) from None


def _resource_field(value: Any, input_schema: CompiledSchema, at: str) -> str | None:
    """None, or a required string field of the input: authorization needs it on every call."""
    if value is None:
        return None
    _require(type(value) is str, at)
    root = input_schema.rules[0]
    entry = root.index.get(value) if type(root) is ObjectRule else None
    if entry is None or value not in root.required or type(input_schema.rules[entry[1]]) is not StringRule:
        raise ContractsError("CONTRACTS_REFERENCE", at)
    return value


def _bound_fields(value: Any, input_schema: CompiledSchema, output_schema: CompiledSchema | None,
                  at: str) -> tuple[str, ...]:
    """Output fields that must echo an input field of the same name: both sides declare it."""
    # Unique names of declared input properties: bounded by MAX_PROPERTIES without a limit of its own.
    _require(type(value) is list and all(type(name) is str for name in value) and len(set(value)) == len(value), at)
    for name in value:
        if output_schema is None or name not in output_schema.rules[0].index or name not in input_schema.rules[0].index:
            raise ContractsError("CONTRACTS_REFERENCE", at)
    return tuple(value)


def _provenance(raw: Any, at: str) -> Mapping[str, Any]:
    body = _fields(raw, _PROVENANCE_FIELDS, at)
    _require(body["source"] in SOURCES and type(body["source"]) is str, f"{at}.source")
    for name in ("server_name", "server_version", "protocol_version"):
        value = body[name]
        _require(value is None or (type(value) is str and len(value) <= tool_dispatcher.MAX_TEXT_LENGTH), f"{at}.{name}")
    for name in ("input_schema_sha256", "output_schema_sha256"):
        value = body[name]
        _require(value is None or (type(value) is str and DIGEST.fullmatch(value) is not None), f"{at}.{name}")
    return MappingProxyType(dict(body))


def _hints(raw: Any, at: str) -> Mapping[str, bool | None]:
    body = _fields(raw, frozenset(HINT_FIELDS), at)
    for name in HINT_FIELDS:
        _require(body[name] is None or type(body[name]) is bool, f"{at}.{name}")
    return MappingProxyType({name: body[name] for name in HINT_FIELDS})


def _fields(value: Any, fields: frozenset[str], at: str) -> dict[str, Any]:
    if type(value) is not dict:
        raise ContractsError("CONTRACTS_VALUE", at)
    if value.keys() != fields:
        raise ContractsError("CONTRACTS_FIELDS", at)
    return value


def _require(condition: bool, at: str) -> None:
    if not condition:
        raise ContractsError("CONTRACTS_VALUE", at)
