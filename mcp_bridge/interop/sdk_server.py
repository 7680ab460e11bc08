"""A test MCP server written with the official `mcp` SDK (pinned in requirements.txt), served over stdio.

Its tools are declared the way SDK users declare them, through Python types (pydantic emits the
JSON Schemas), so the import meets what real SDK servers publish: nullable `anyOf` forms,
`$defs` and `$ref`, `title` annotations, no `additionalProperties: false`, one `number`, one
`format`. The run.sh script imports it with `mcp_bridge.py import` and compares each draft byte for
byte with its expected-draft-*.json. The handlers are never called by the import; they return fixed data.
When SDK_SERVER_CALLS names a file, each call a handler receives is appended to it (guard_check.py
counts what reached the server).
"""
from __future__ import annotations

import json
import os

from enum import Enum
from typing import Annotated, Literal

from mcp.server import MCPServer
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

server = MCPServer("interop-orders", version="1.0.0")


def _seen(tool: str, **arguments: object) -> None:
    path = os.environ.get("SDK_SERVER_CALLS")
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"tool": tool, "arguments": arguments}, default=str) + "\n")


class Reason(str, Enum):
    duplicate = "duplicate"
    damaged = "damaged"
    other = "other"


class Address(BaseModel):
    street: Annotated[str, Field(max_length=80)]
    postcode: Annotated[str, Field(pattern=r"^[0-9]{5}$")]


class OrderView(BaseModel):
    order_ref: str
    status: Literal["paid", "pending", "refunded"]


@server.tool(description="Read one order and its payment status.",
             annotations=ToolAnnotations(readOnlyHint=True, idempotentHint=True))
def get_order(order_ref: Annotated[str, Field(pattern=r"^ORDER-[0-9]{1,12}$", max_length=18)]) -> OrderView:
    _seen("get_order", order_ref=order_ref)
    return OrderView(order_ref=order_ref, status="paid")


@server.tool(description="Create a refund draft; submits nothing.",
             annotations=ToolAnnotations(destructiveHint=False))
def create_refund_draft(order_ref: Annotated[str, Field(pattern=r"^ORDER-[0-9]{1,12}$")], reason: Reason,
                        note: Annotated[str | None, Field(max_length=200)] = None) -> str:
    _seen("create_refund_draft", order_ref=order_ref, reason=reason, note=note)
    return "DRAFT-0000000000000000"


@server.tool(description="List orders, newest first.")
def list_orders(limit: Annotated[int, Field(ge=1, le=50)] = 10, include_refunded: bool = False,
                tags: Annotated[list[str], Field(max_length=5)] = []) -> str:  # noqa: B006
    _seen("list_orders", limit=limit)
    return "[]"


@server.tool(description="Change the shipping address of an order.")
def set_address(order_ref: str, address: Address) -> str:
    _seen("set_address", order_ref=order_ref)
    return "ok"


@server.tool(description="Refund a partial amount.")
def partial_refund(order_ref: str, amount: float) -> str:
    _seen("partial_refund", order_ref=order_ref)
    return "ok"


@server.tool(description="Schedule a callback.")
def schedule_callback(when: Annotated[str, Field(json_schema_extra={"format": "duration"})]) -> str:
    _seen("schedule_callback")
    return "ok"


if __name__ == "__main__":
    server.run()
