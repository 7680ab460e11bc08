"""A census of typical Pydantic v2 tool-argument models against the contract language.

Tools written in Python often take their arguments as a Pydantic model and publish
``Model.model_json_schema()`` as the tool's input schema. This census writes 36 such models, of the
kinds people write for LLM tools (search parameters, calendar events, payments, tagged unions of
actions, trees, uploads), compiles each one's schema with ``tool_dispatcher.compile_schema`` and
counts what compiles and what is refused, by code and place. It is a census, not a gate: a refusal
is a number to read, not a failure.

For each model that compiles it then spot-checks soundness. Values are made from a few valid
instances (``model_dump(mode="json")``, whole and without defaults) and from mutations of them,
one place at a time; each value the compiled check admits is put to:

- the oracle of ``differential.py`` (JSON Schema 2020-12, formats asserted, ECMA-262 patterns) on
  the model's own schema. A refusal there is UNSOUND: the core promises that whatever it admits,
  the schema admits. That is the one finding that makes the census exit 1;
- Pydantic itself, ``model_validate_json(text, strict=True)``, and when that refuses, the same in
  lax mode. A refusal is a disagreement to investigate, not a failure of the core: the schema
  Pydantic published is looser than the validator behind it (the boundary admits a call the tool's
  own model then refuses), or, refused in strict mode only, a coercion Pydantic makes in lax mode.

A value the compiled check refuses and Pydantic (lax) admits is a narrowing, counted.

    python -B differential/pydantic_census.py

What this census never does:
- change the core, or reach past ``tool_dispatcher.__all__``;
- read a clock or the network: the report is the same bytes on every run (a set is dumped sorted);
- rely on a bare assert (``python -O`` deletes them).

Exit 0: the census ran (whatever it counted); 1: something raised where it should answer (a
model's schema, a sample, the compiler, a check, Pydantic) or a compiled check admitted a value its
schema refuses; 2: Pydantic is not installed.
Sections: 1. limits and constants; 2. the models; 3. samples and mutations; 4. the census; 5. CLI.
"""
from __future__ import annotations

import datetime as dt
import enum
import ipaddress
import json
import re
import sys
import uuid
from decimal import Decimal
from importlib import metadata
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any, Final, Literal, Mapping, Optional, Sequence, Union

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import differential as dif  # noqa: E402  (the oracle, JSON helpers and the report's layout)
import tool_dispatcher as td  # noqa: E402  (the compiler under census)

# pydantic, and email-validator (with dnspython and idna) for EmailStr, which pydantic imports on first use.
PYDANTIC_PACKAGES: Final = ("pydantic", "pydantic_core", "annotated_types", "typing_inspection", "email_validator",
                            "dns", "idna")
try:
    import email_validator  # noqa: F401
    import pydantic
    from pydantic import (AnyUrl, AwareDatetime, BaseModel, ConfigDict, EmailStr, Field, HttpUrl, SecretStr,
                          StringConstraints, UUID4, condecimal, confloat, conint, conlist, constr)
except ModuleNotFoundError as missing:
    if __name__ == "__main__" and missing.name in PYDANTIC_PACKAGES:
        sys.stdout.write("the census needs pydantic and email-validator: run bash differential/ci.sh\n")
        sys.exit(2)
    raise

# ============================================================================================
# 1. Limits and constants
# ============================================================================================

REPORT_FORMAT: Final = "pydantic-census-report-v1"
MAX_VALUES_PER_MODEL: Final = 1000  # samples and mutations put to the check, in a fixed order
MAX_MUTATED_NODES: Final = 48  # places in one sample that are mutated, breadth first
MAX_FINDINGS_PER_MODEL: Final = 8  # per model: the first value of each kind and each Pydantic error
TOO_LONG: Final = "a" * (td.DEFAULT_MAX_LENGTH + 1)  # past the host's string bound
TOO_MANY: Final = td.DEFAULT_MAX_ITEMS + 1  # past the host's item bound

# What the spot check counts, per compiled model and in all.
SPOT_COUNTS: Final = ("values", "admitted", "narrowed", "unsound", "pydantic_refuses", "strict_only")

# What each kind of finding means, and so which way the two sides disagree; the report lists them.
FINDING_KINDS: Final[Mapping[str, str]] = MappingProxyType({
    "unsound": "the compiled check admits a value the model's JSON Schema refuses: the core's promise broken",
    "pydantic-refuses": "the check and the schema admit a value Pydantic refuses, strict and lax: "
                        "the published schema is looser than the model",
    "strict-only": "the check admits a value Pydantic refuses in strict mode and takes in lax mode",
    "raised": "a schema, a sample, the compiler, a check or Pydantic raised instead of answering",
})

# ============================================================================================
# 2. The models
# ============================================================================================
# Written as people write tool arguments, not to make the count look good: Optional fields with
# defaults, Literal and Enum choices, constrained types, nested models and lists of them, maps,
# unions (plain, discriminated, of scalars), formats, and the types that have no JSON Schema of
# their own (Decimal, bytes, timedelta, tuples, sets, URLs, secrets, recursion).


class Priority(str, enum.Enum):
    low = "low"
    normal = "normal"
    high = "high"
    urgent = "urgent"


class Severity(enum.IntEnum):
    sev1 = 1
    sev2 = 2
    sev3 = 3
    sev4 = 4


class RuleAction(str, enum.Enum):
    allow = "allow"
    deny = "deny"


class WebSearch(BaseModel):
    """Search the web."""

    query: constr(min_length=1, max_length=400) = Field(description="What to search for")
    max_results: conint(ge=1, le=50) = 10
    safe_search: Literal["off", "moderate", "strict"] = "moderate"
    site: Optional[str] = Field(None, description="Restrict results to one site, e.g. docs.python.org")
    recency_days: Optional[int] = Field(None, ge=1, le=365)


class GetWeather(BaseModel):
    city: str = Field(description="City name, e.g. Berlin")
    country_code: Optional[constr(pattern=r"^[A-Z]{2}$")] = None
    units: Literal["metric", "imperial"] = "metric"
    days: Annotated[int, Field(ge=1, le=14, description="Forecast days")] = 3


class ListFiles(BaseModel):
    path: Annotated[str, Field(description="Directory to list", min_length=1, max_length=1024)]
    recursive: Annotated[bool, Field(description="Descend into subdirectories")] = False
    glob: Annotated[Optional[str], Field(description="Only names matching this glob")] = None
    limit: Annotated[int, Field(ge=1, le=1000)] = 100
    include_hidden: bool = False


class SendChatMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    channel: constr(pattern=r"^#[a-z0-9_-]{1,80}$")
    text: constr(min_length=1, max_length=4000)
    thread_ts: Optional[constr(pattern=r"^[0-9]{10}\.[0-9]{6}$")] = None
    mention_users: list[constr(pattern=r"^U[A-Z0-9]{8,10}$")] = []


class SearchTickets(BaseModel):
    text: Optional[str] = None
    status: list[Literal["open", "pending", "resolved", "closed"]] = ["open"]
    priority: Optional[Priority] = None
    min_severity: Optional[Severity] = None
    created_after: Optional[dt.date] = None
    sort: Literal["created", "updated", "priority"] = "updated"
    order: Literal["asc", "desc"] = "desc"
    page: conint(ge=1) = 1
    page_size: conint(ge=1, le=100) = 25


class Contact(BaseModel):
    name: str
    phone: Optional[constr(pattern=r"^\+[1-9][0-9]{6,14}$")] = None


class CreateTicket(BaseModel):
    title: constr(min_length=3, max_length=200)
    body: str = ""
    priority: Priority = Priority.normal
    labels: set[str] = set()
    assignee: Optional[str] = None
    due: Optional[dt.date] = None
    reporter: Optional[Contact] = None


class CreateCalendarEvent(BaseModel):
    title: str
    start: dt.datetime
    end: dt.datetime
    attendees: conlist(str, max_length=50) = []
    all_day: bool = False
    location: Optional[str] = None
    reminder_minutes: Optional[conint(ge=0, le=10080)] = 10


class BookMeetingRoom(BaseModel):
    room_id: uuid.UUID
    day: dt.date
    start: dt.time
    duration_minutes: conint(ge=15, le=240, multiple_of=15) = 30
    attendees: conint(ge=1, le=40) = 2


class FirewallRule(BaseModel):
    source: ipaddress.IPv4Address
    destination: Optional[ipaddress.IPv6Address] = None
    port: conint(ge=1, le=65535)
    protocol: Literal["tcp", "udp", "icmp"] = "tcp"
    action: RuleAction = RuleAction.deny
    comment: Optional[constr(max_length=120)] = None


class HttpRequest(BaseModel):
    url: HttpUrl
    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE"] = "GET"
    headers: dict[str, str] = {}
    body: Optional[str] = None
    timeout_s: confloat(gt=0, le=120) = 30.0


class FetchPage(BaseModel):
    url: AnyUrl
    render_javascript: bool = False
    max_chars: conint(ge=100, le=100_000) = 20_000


class TransferFunds(BaseModel):
    from_account: constr(pattern=r"^[0-9]{8,12}$")
    to_account: constr(pattern=r"^[0-9]{8,12}$")
    amount: confloat(gt=0, multiple_of=0.01)
    currency: Literal["USD", "EUR", "GBP"] = "USD"
    memo: Optional[constr(max_length=140)] = None


class InvoiceLine(BaseModel):
    description: str
    quantity: conint(ge=1) = 1
    unit_price: Decimal


class CreateInvoice(BaseModel):
    customer_id: uuid.UUID
    currency: constr(pattern=r"^[A-Z]{3}$") = "USD"
    lines: conlist(InvoiceLine, min_length=1)
    tax_rate: condecimal(ge=0, le=1, max_digits=5, decimal_places=4) = Decimal("0")
    due_date: Optional[dt.date] = None


class Point(BaseModel):
    x: float
    y: float


class Circle(BaseModel):
    kind: Literal["circle"]
    center: Point
    radius: confloat(gt=0)


class Rectangle(BaseModel):
    kind: Literal["rectangle"]
    top_left: Point
    width: confloat(gt=0)
    height: confloat(gt=0)


class Polygon(BaseModel):
    kind: Literal["polygon"]
    points: conlist(Point, min_length=3, max_length=64)


class DrawShape(BaseModel):
    shape: Annotated[Union[Circle, Rectangle, Polygon], Field(discriminator="kind")]
    stroke: constr(pattern=r"^#[0-9a-f]{6}$") = "#000000"
    fill: Optional[constr(pattern=r"^#[0-9a-f]{6}$")] = None


class Card(BaseModel):
    type: Literal["card"] = "card"
    number: constr(pattern=r"^[0-9]{12,19}$")
    exp_month: conint(ge=1, le=12)
    exp_year: conint(ge=2024, le=2100)


class BankAccount(BaseModel):
    type: Literal["bank_account"] = "bank_account"
    iban: constr(pattern=r"^[A-Z]{2}[0-9]{2}[A-Z0-9]{11,30}$")


class AddPaymentMethod(BaseModel):
    customer_id: str
    method: Union[Card, BankAccount] = Field(discriminator="type")
    make_default: bool = False


class SlackTarget(BaseModel):
    channel: str


class WebhookTarget(BaseModel):
    webhook_url: str
    secret: Optional[str] = None


class SmsTarget(BaseModel):
    phone: constr(pattern=r"^\+[1-9][0-9]{6,14}$")


class Notify(BaseModel):
    target: Union[SlackTarget, WebhookTarget, SmsTarget]
    message: constr(min_length=1, max_length=1000)
    urgent: bool = False


class Click(BaseModel):
    action: Literal["click"]
    selector: str
    button: Literal["left", "right", "middle"] = "left"


class TypeText(BaseModel):
    action: Literal["type"]
    selector: str
    text: str
    submit: bool = False


class Scroll(BaseModel):
    action: Literal["scroll"]
    dx: int = 0
    dy: int


class Wait(BaseModel):
    action: Literal["wait"]
    seconds: confloat(gt=0, le=30)


BrowserStep = Annotated[Union[Click, TypeText, Scroll, Wait], Field(discriminator="action")]


class BrowserActions(BaseModel):
    url: Optional[str] = None
    steps: conlist(BrowserStep, min_length=1, max_length=20)
    screenshot: bool = True


class LookupUser(BaseModel):
    user: Union[int, str] = Field(description="A numeric id or a handle")
    include: list[Literal["profile", "groups", "activity"]] = ["profile"]


class SetThreshold(BaseModel):
    metric: str
    comparison: Literal["gt", "ge", "lt", "le"] = "gt"
    value: Optional[Union[int, float]] = None
    for_minutes: conint(ge=0, le=1440) = 5


class GetDocuments(BaseModel):
    ids: Union[str, list[str]]
    fields: Optional[list[str]] = None
    with_content: bool = True


class QueryRange(BaseModel):
    series: str
    since: Optional[Union[dt.datetime, dt.date]] = None
    until: Optional[Union[dt.datetime, dt.date]] = None
    granularity: Literal["minute", "hour", "day"] = "hour"


class SqlQuery(BaseModel):
    sql: constr(min_length=1, max_length=10_000)
    params: list[Union[str, int, float, bool, None]] = []
    max_rows: conint(ge=1, le=10_000) = 500
    timeout_s: float = 10.0


class UpsertDocument(BaseModel):
    id: str
    text: str
    metadata: dict[str, Any] = {}
    namespace: Optional[str] = None


class GeoSearch(BaseModel):
    location: tuple[float, float] = Field(description="(latitude, longitude)")
    radius_km: confloat(gt=0, le=500) = 5.0
    categories: list[str] = []


class Slot(BaseModel):
    model_config = ConfigDict(frozen=True)

    day: dt.date
    hour: conint(ge=0, le=23)


class ScheduleSlots(BaseModel):
    resource: str
    slots: set[Slot]


class UploadFile(BaseModel):
    filename: constr(min_length=1, max_length=255)
    content: bytes
    content_type: Optional[str] = None


class RunCode(BaseModel):
    language: Literal["python", "javascript", "bash"]
    code: constr(max_length=20_000)
    timeout: dt.timedelta = dt.timedelta(seconds=30)


class ConnectDatabase(BaseModel):
    host: str
    port: conint(ge=1, le=65535) = 5432
    user: str
    password: SecretStr
    database: str


class Category(BaseModel):
    name: str
    children: list[Category] = []


class Filter(BaseModel):
    field: str
    op: Literal["eq", "ne", "lt", "gt", "contains"] = "eq"
    value: Union[str, int, bool, None] = None
    any_of: Optional[list[Filter]] = None


class SearchWithFilter(BaseModel):
    collection: str
    filter: Optional[Filter] = None
    limit: conint(ge=1, le=100) = 10


class GetStockQuote(BaseModel):
    symbol: Annotated[str, StringConstraints(strip_whitespace=True, to_upper=True, pattern=r"^[A-Z]{1,5}$")]
    exchange: Optional[Literal["NYSE", "NASDAQ", "LSE"]] = None
    fields: frozenset[Literal["price", "volume", "change", "market_cap"]] = frozenset({"price"})


class SetLabels(BaseModel):
    resource_id: uuid.UUID
    labels: dict[str, constr(max_length=63)] = Field(default_factory=dict, max_length=64)
    overwrite: bool = False


class CancelRequest(BaseModel):
    request_id: UUID4
    reason: Optional[str] = None


class ForwardMessage(BaseModel):
    from_: str = Field(alias="from")
    to: conlist(str, min_length=1)
    message_id: str
    note: Optional[str] = None


class CreatePoll(BaseModel):
    question: str
    options: dict[str, conint(ge=0)] = Field(min_length=2)
    closes_at: AwareDatetime
    anonymous: bool = True


class SendEmail(BaseModel):
    """Send an email."""

    to: conlist(EmailStr, min_length=1, max_length=50)
    cc: list[EmailStr] = []
    reply_to: Optional[EmailStr] = None
    subject: constr(min_length=1, max_length=200)
    body: constr(max_length=50_000)
    html: bool = False


# The census: each model with a few valid inputs (JSON as a model would send them), in a fixed order.
CENSUS: Final[Mapping[str, tuple[type[BaseModel], tuple[Mapping[str, Any], ...]]]] = MappingProxyType({
    "WebSearch": (WebSearch, (
        {"query": "pydantic json schema"},
        {"query": "rust regex", "max_results": 5, "safe_search": "strict", "site": "docs.rs", "recency_days": 30})),
    "GetWeather": (GetWeather, (
        {"city": "Berlin"}, {"city": "Austin", "country_code": "US", "units": "imperial", "days": 7})),
    "ListFiles": (ListFiles, ({"path": "/srv/data"}, {"path": "src", "recursive": True, "glob": "*.py", "limit": 20})),
    "SendChatMessage": (SendChatMessage, (
        {"channel": "#general", "text": "Deploy finished"},
        {"channel": "#ops", "text": "ack", "thread_ts": "1712345678.123456", "mention_users": ["U01ABCDEF2"]})),
    "SearchTickets": (SearchTickets, (
        {}, {"text": "login", "status": ["open", "pending"], "priority": "high", "min_severity": 2,
             "created_after": "2024-03-01", "sort": "created", "order": "asc", "page": 2, "page_size": 50})),
    "CreateTicket": (CreateTicket, (
        {"title": "Printer on fire"},
        {"title": "VPN drops", "body": "Every hour", "priority": "urgent", "labels": ["network", "vpn"],
         "assignee": "ana", "due": "2024-06-30", "reporter": {"name": "Bo", "phone": "+4915112345678"}})),
    "CreateCalendarEvent": (CreateCalendarEvent, (
        {"title": "Standup", "start": "2024-05-06T09:00:00Z", "end": "2024-05-06T09:15:00Z"},
        {"title": "Offsite", "start": "2024-05-07T09:00:00+02:00", "end": "2024-05-07T17:00:00+02:00",
         "attendees": ["ana", "bo"], "location": "Lisbon", "reminder_minutes": None},
        {"title": "Lunch", "start": "2024-05-08T12:00:00", "end": "2024-05-08T13:00:00"})),
    "BookMeetingRoom": (BookMeetingRoom, (
        {"room_id": "6f1c2a8e-3b4d-4e5f-9a0b-1c2d3e4f5a6b", "day": "2024-05-06", "start": "14:30:00"},
        {"room_id": "6f1c2a8e-3b4d-4e5f-9a0b-1c2d3e4f5a6b", "day": "2024-02-29", "start": "09:00:00Z",
         "duration_minutes": 90, "attendees": 8})),
    "FirewallRule": (FirewallRule, (
        {"source": "10.0.0.1", "port": 443},
        {"source": "192.168.1.20", "destination": "2001:db8::1", "port": 53, "protocol": "udp", "action": "allow",
         "comment": "DNS"})),
    "HttpRequest": (HttpRequest, (
        {"url": "https://api.example.com/v1/items"},
        {"url": "https://api.example.com/v1/items", "method": "POST", "headers": {"Content-Type": "application/json"},
         "body": "{}", "timeout_s": 5})),
    "FetchPage": (FetchPage, ({"url": "https://example.com/"}, {"url": "https://example.org/a", "max_chars": 500})),
    "TransferFunds": (TransferFunds, (
        {"from_account": "12345678", "to_account": "87654321", "amount": 25.5},
        {"from_account": "123456789012", "to_account": "87654321", "amount": 0.01, "currency": "EUR", "memo": "rent"})),
    "CreateInvoice": (CreateInvoice, (
        {"customer_id": "0b0e5a52-9d0f-4b8e-8f51-2f1d9c1e7a10",
         "lines": [{"description": "Widget", "unit_price": "9.99"}]},
        {"customer_id": "0b0e5a52-9d0f-4b8e-8f51-2f1d9c1e7a10", "currency": "EUR", "tax_rate": "0.19",
         "lines": [{"description": "Hours", "quantity": 3, "unit_price": 120}], "due_date": "2024-07-01"})),
    "DrawShape": (DrawShape, (
        {"shape": {"kind": "circle", "center": {"x": 0, "y": 0}, "radius": 2.5}},
        {"shape": {"kind": "rectangle", "top_left": {"x": 1, "y": 2}, "width": 3, "height": 4}, "fill": "#ff8800"},
        {"shape": {"kind": "polygon", "points": [{"x": 0, "y": 0}, {"x": 1, "y": 0}, {"x": 0, "y": 1}]}})),
    "AddPaymentMethod": (AddPaymentMethod, (
        {"customer_id": "cus_1", "method": {"type": "card", "number": "4242424242424242", "exp_month": 12,
                                            "exp_year": 2030}},
        {"customer_id": "cus_2", "method": {"type": "bank_account", "iban": "DE89370400440532013000"}})),
    "Notify": (Notify, (
        {"target": {"channel": "#alerts"}, "message": "disk full"},
        {"target": {"phone": "+15555550123"}, "message": "call me", "urgent": True})),
    "BrowserActions": (BrowserActions, (
        {"steps": [{"action": "click", "selector": "#login"}]},
        {"url": "https://example.com", "steps": [
            {"action": "type", "selector": "input[name=q]", "text": "shoes", "submit": True},
            {"action": "scroll", "dy": 600}, {"action": "wait", "seconds": 1.5}], "screenshot": False})),
    "LookupUser": (LookupUser, ({"user": 42}, {"user": "ana", "include": ["profile", "groups"]})),
    "SetThreshold": (SetThreshold, (
        {"metric": "cpu"}, {"metric": "latency_ms", "comparison": "ge", "value": 250},
        {"metric": "ratio", "value": 0.75})),
    "GetDocuments": (GetDocuments, (
        {"ids": "doc-1"}, {"ids": ["doc-1", "doc-2"], "fields": ["title"], "with_content": False})),
    "QueryRange": (QueryRange, (
        {"series": "requests"},
        {"series": "errors", "since": "2024-05-01", "until": "2024-05-02T12:00:00Z", "granularity": "minute"})),
    "SqlQuery": (SqlQuery, (
        {"sql": "select 1"}, {"sql": "select * from t where a = ? and b > ?", "params": ["x", 3, 2.5, True, None]})),
    "UpsertDocument": (UpsertDocument, ({"id": "d1", "text": "hello", "metadata": {"lang": "en", "pages": 3}},)),
    "GeoSearch": (GeoSearch, (
        {"location": [52.52, 13.405]}, {"location": [0, 0], "radius_km": 1, "categories": ["cafe"]})),
    "ScheduleSlots": (ScheduleSlots, ({"resource": "room-1", "slots": [{"day": "2024-05-06", "hour": 9}]},)),
    "UploadFile": (UploadFile, ({"filename": "notes.txt", "content": "hello"},)),
    "RunCode": (RunCode, (
        {"language": "python", "code": "print(1)"}, {"language": "bash", "code": "ls", "timeout": 5})),
    "ConnectDatabase": (ConnectDatabase, ({"host": "db", "user": "app", "password": "s3cret", "database": "main"},)),
    "Category": (Category, (
        {"name": "root", "children": [{"name": "a"}, {"name": "b", "children": [{"name": "c"}]}]},)),
    "SearchWithFilter": (SearchWithFilter, (
        {"collection": "orders", "filter": {"field": "status", "value": "open"}},
        {"collection": "orders", "filter": {"field": "x", "any_of": [{"field": "a", "op": "gt", "value": 3}]}})),
    "GetStockQuote": (GetStockQuote, (
        {"symbol": "AAPL"}, {"symbol": "MSFT", "exchange": "NASDAQ", "fields": ["price", "volume"]})),
    "SetLabels": (SetLabels, (
        {"resource_id": "6f1c2a8e-3b4d-4e5f-9a0b-1c2d3e4f5a6b", "labels": {"team": "infra", "env": "prod"}},
        {"resource_id": "6f1c2a8e-3b4d-4e5f-9a0b-1c2d3e4f5a6b", "overwrite": True})),
    "CancelRequest": (CancelRequest, ({"request_id": "9b2f6c1e-4a3d-4f8e-b1c2-d3e4f5a6b7c8"},)),
    "ForwardMessage": (ForwardMessage, ({"from": "ana", "to": ["bo", "cy"], "message_id": "m-1"},)),
    "CreatePoll": (CreatePoll, (
        {"question": "Lunch?", "options": {"pizza": 0, "sushi": 0}, "closes_at": "2024-05-06T12:00:00Z"},)),
    "SendEmail": (SendEmail, (
        {"to": ["ana@example.com"], "subject": "Hello", "body": "Lunch at noon?"},
        {"to": ["o'brien@mail.example.org", "bo+news@example.co.uk"], "cc": ["cy_d-e@example.io"],
         "reply_to": "Team.Lead@Example.COM", "subject": "Q3", "body": "<p>Numbers attached.</p>", "html": True})),
})

# ============================================================================================
# 3. Samples and mutations
# ============================================================================================
# A valid input is validated (lax) into an instance and dumped as JSON, whole and without its
# defaults; each dump is then mutated one place at a time: every string, number, boolean, null,
# list and object in it (breadth first) is replaced by its edges and by wrong types, objects lose
# and gain a member, and each place takes the value the same place holds in another sample (a
# union's tag from another branch). Strings that look like a format take that format's samples
# from differential.py (leap seconds, lower-case t and z, leading zeros, zones, ...).

_LOOKS_LIKE: Final[Mapping[str, re.Pattern[str]]] = MappingProxyType({
    "date": re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}\Z"),
    "date-time": re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T"),
    "time": re.compile(r"[0-9]{2}:[0-9]{2}:[0-9]{2}"),
    "uuid": re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-"),
    "ipv4": re.compile(r"[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}\Z"),
    "ipv6": re.compile(r"[0-9a-f:]*::?[0-9a-f:]*\Z"),
    "decimal": re.compile(r"-?[0-9]+(?:\.[0-9]+)?\Z"),
    "uri": re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://"),
    "email": re.compile(r"[^@\s]+@[^@\s]+\.[A-Za-z]+\Z"),
})
# Beside differential.py's samples: offsets at their ends, many fraction digits, the last day, and
# decimal text that a number-or-string schema admits and a Decimal may not (NaN, exponents, spaces).
_MORE_SAMPLES: Final[Mapping[str, tuple[str, ...]]] = MappingProxyType({
    "date-time": ("2024-01-01T00:00:00+23:59", "2024-01-01T00:00:00-23:59", "9999-12-31T23:59:59-23:59",
                  "0001-01-01T00:00:00+23:59", "2024-01-01T00:00:00.0000000001Z", "2024-12-31T23:59:60Z"),
    "time": ("00:00:00+23:59", "23:59:59.999999999Z", "12:00:00.0000000001-00:00", "23:59:60Z"),
    "date": ("0001-01-01", "2024-12-31"),
    "uuid": ("6F1C2A8E-3B4D-4E5F-9A0B-1C2D3E4F5A6B", "ffffffff-ffff-ffff-ffff-ffffffffffff"),
    "ipv4": ("127.0.0.1", "224.0.0.1"),
    "ipv6": ("::1.2.3.4", "::ffff:0:1.2.3.4", "ff02::1", "fe80::1"),
    "uri": ("http://example.com:65535/a?b#c", "https://a.b.c/", "ftp://example.com/", "ws://[::1]:1/",
            "file:///etc/hosts", "mailto:a@b.c", "urn:isbn:0451450523"),
    "email": ("a@example.com", "A@EXAMPLE.COM", "o'brien@example.co.uk", "a'@example.com", "a@b.TEST",
              "a@xn--p1ai.co", "a@a-.co", "\"a\"@example.com", "Name <a@example.com>", "a@b.c"),
    "decimal": ("NaN", "-Infinity", "1e3", "1E-3", " 1", "1_000", "-0", "-1", "1.5", "0.00001", "123456.789", "1" * 40),
})
_ARABIC_INDIC: Final = str.maketrans("0123456789", "\u0660\u0661\u0662\u0663\u0664\u0665\u0666\u0667\u0668\u0669")


def dumps(model: type[BaseModel], inputs: Sequence[Mapping[str, Any]]) -> list[Any]:
    """Each input validated (lax) and dumped as JSON: whole, then without its defaults; sets sorted."""
    found = []
    for data in inputs:
        instance = model.model_validate(data)
        for exclude_defaults in (False, True):
            dumped = instance.model_dump(mode="json", by_alias=True, exclude_defaults=exclude_defaults)
            found.append(_sorted_sets(instance, dumped))
    return dif.unique_values(found)


def _sorted_sets(instance: Any, dumped: Any) -> Any:
    """The dump with each set's items in one order (a set of strings iterates in hash order)."""
    stack = [(instance, dumped)]
    while stack:
        value, out = stack.pop()
        if isinstance(value, BaseModel) and type(out) is dict:
            for name, info in type(value).model_fields.items():
                key = info.alias or name
                if key not in out:
                    continue
                item = getattr(value, name)
                if isinstance(item, (set, frozenset)) and type(out[key]) is list:
                    out[key] = sorted(out[key], key=dif.json_text)
                else:
                    stack.append((item, out[key]))
        elif isinstance(value, (list, tuple)) and type(out) is list:
            stack.extend(zip(value, out))
        elif isinstance(value, dict) and type(out) is dict:
            stack.extend((value[key], out[key]) for key in value if key in out)
    return dumped


def mutations(samples: Sequence[Any], *, limit: int = MAX_VALUES_PER_MODEL) -> list[Any]:
    """The samples, then each changed at one place at a time, each JSON text once, at most limit."""
    found = list(samples)
    for sample in samples:
        others = [other for other in samples if other is not sample]
        for path, node in _places(sample):
            replacements = _replacements(node) + [_at(other, path) for other in others if _has(other, path)]
            found.extend(_replace(sample, path, replacement) for replacement in replacements)
    return dif.unique_values(found)[:limit]


def _places(value: Any) -> list[tuple[tuple[Any, ...], Any]]:
    """(path, node) for the value and its members, breadth first, at most MAX_MUTATED_NODES."""
    found, queue = [], [((), value)]
    while queue and len(found) < MAX_MUTATED_NODES:
        path, node = queue.pop(0)
        found.append((path, node))
        if type(node) is dict:
            queue.extend((path + (key,), item) for key, item in node.items())
        elif type(node) is list:
            queue.extend((path + (index,), item) for index, item in enumerate(node))
    return found


def _replacements(node: Any) -> list[Any]:
    if type(node) is str:
        return _string_edges(node)
    if type(node) is bool:
        return [not node, 0, 1, "true", None]
    if type(node) is int:
        return [node + 1, node - 1, -node, 0, node * 1000, float(node), True, str(node), td.MAX_SAFE_INTEGER + 1, None]
    if type(node) is float:
        spelled = [int(node)] if node.is_integer() else [node * 3, node / 3]
        return [node + 0.5, -node, 0.0, node * 1000, node + 0.001, str(node), None, *spelled]
    if node is None:
        return [0, "", "null", False, {}, []]
    if type(node) is list:
        return [[], node + node[:1], node + [None], node + ["x"], node[:1] * TOO_MANY, {}, "x"]
    # an object: each member missing, one unknown member, empty, and a wrong type
    return [{key: item for key, item in node.items() if key != name} for name in node] + [
        {**node, "extra": 1}, {}, [], "x"]


def _string_edges(text: str) -> list[Any]:
    edges = ["", text + "\n", " " + text, text + " ", text.upper(), text.lower(), text + dif.ASTRAL,
             text.translate(_ARABIC_INDIC), TOO_LONG, text * 2, 7, None, ["x"]]
    for name, shape in _LOOKS_LIKE.items():
        if shape.match(text):
            edges.extend(dif.FORMAT_SAMPLES.get(name, ()) + _MORE_SAMPLES[name])
    return edges


def _has(value: Any, path: Sequence[Any]) -> bool:
    for step in path:
        if type(value) is dict and type(step) is str and step in value:
            value = value[step]
        elif type(value) is list and type(step) is int and step < len(value):
            value = value[step]
        else:
            return False
    return True


def _at(value: Any, path: Sequence[Any]) -> Any:
    for step in path:
        value = value[step]
    return value


def _replace(value: Any, path: Sequence[Any], replacement: Any) -> Any:
    """A copy of value with replacement at path (the path exists)."""
    if not path:
        return replacement
    head = path[0]
    if type(value) is dict:
        return {key: (_replace(item, path[1:], replacement) if key == head else item) for key, item in value.items()}
    return [(_replace(item, path[1:], replacement) if index == head else item) for index, item in enumerate(value)]


# ============================================================================================
# 4. The census
# ============================================================================================


def schema_of(model: type[BaseModel]) -> dict[str, Any]:
    """The schema a tool publishes: Pydantic's validation-mode JSON Schema, through a JSON round trip."""
    return json.loads(json.dumps(model.model_json_schema(mode="validation"), allow_nan=False))


def pydantic_verdict(model: type[BaseModel], value: Any) -> tuple[str, str]:
    """("strict", "") when Pydantic admits the JSON text in strict mode, else ("lax", why) when lax
    mode admits it, else ("refused", why): why is the first error's type and place."""
    text = dif.json_text(value)
    why = ""
    for mode, strict in (("strict", True), ("lax", False)):
        try:
            model.model_validate_json(text, strict=strict)
        except pydantic.ValidationError as refusal:
            if not why:
                first = refusal.errors(include_url=False)[0]
                why = first["type"] + " at " + (".".join(str(step) for step in first["loc"]) or "the root")
            continue
        return mode, why
    return "refused", why


def census_model(name: str, model: type[BaseModel], inputs: Sequence[Mapping[str, Any]],
                 oracle: dif.Oracle | None) -> dict[str, Any]:
    """One model's line of the report, its findings and its refused dumps."""
    try:
        schema = schema_of(model)
        samples = dumps(model, inputs)
    except Exception as error:  # a model of this file that Pydantic cannot take is this file's bug
        return _raised(name, error)
    try:
        compiled = td.compile_schema(schema)
    except td.BoundaryError as refusal:
        return {"line": {"name": name, "code": refusal.code, "at": refusal.at}, "findings": [], "dumps_refused": []}
    except Exception as error:  # the compiler must refuse with a code, never crash
        return _raised(name, error)
    return spot_check(name, model, schema, compiled, samples, oracle)


def _raised(name: str, error: BaseException) -> dict[str, Any]:
    error_name = dif._error_name(error)
    return {"line": {"name": name, "raised": error_name},
            "findings": [{"model": name, "kind": "raised", "error": error_name}], "dumps_refused": []}


def spot_check(name: str, model: type[BaseModel], schema: Any, compiled: Any, samples: Sequence[Any],
               oracle: dif.Oracle | None) -> dict[str, Any]:
    """Each sample and mutation put to the compiled check; what it admits, to the oracle and to Pydantic."""
    judge = oracle.judge(schema) if oracle is not None else None
    counts = dict.fromkeys(SPOT_COUNTS, 0)
    findings: list[dict[str, Any]] = []
    refused_dumps: list[dict[str, Any]] = []

    def find(kind: str, value: Any, **detail: Any) -> None:
        # the first value of each kind and Pydantic error (its type and place), a few per model
        seen = {(found["kind"], found.get("pydantic")) for found in findings}
        if len(findings) < MAX_FINDINGS_PER_MODEL and (kind, detail.get("pydantic")) not in seen:
            findings.append({"model": name, "kind": kind, **detail, "value": value})

    for value in mutations(samples):
        counts["values"] += 1
        try:
            admitted = compiled.admits(value)
            verdict, why = pydantic_verdict(model, value)
            schema_admits = judge(value) if judge is not None and admitted else True
        except Exception as error:  # a check, the oracle or Pydantic must answer every JSON value
            find("raised", value, error=dif._error_name(error))
            continue
        if not admitted:
            counts["narrowed"] += verdict != "refused"
            if any(dif.same_json(value, sample) for sample in samples):
                refused_dumps.append({"model": name, **_refusal(compiled, value), "value": value})
            continue
        counts["admitted"] += 1
        if not schema_admits:
            counts["unsound"] += 1
            find("unsound", value)
        if verdict == "refused":
            counts["pydantic_refuses"] += 1
            find("pydantic-refuses", value, pydantic=why)
        elif verdict == "lax":
            counts["strict_only"] += 1
            find("strict-only", value, pydantic=why)
    line = {"name": name, "compiled": True, **counts, "dumps": len(samples), "dumps_refused": len(refused_dumps)}
    return {"line": line, "findings": findings, "dumps_refused": refused_dumps[:1]}


def _refusal(compiled: Any, value: Any) -> dict[str, str]:
    try:
        compiled.check(value)
    except td.BoundaryError as refusal:
        return {"code": refusal.code, "at": refusal.at}
    return {}


def run_census(*, census: Mapping[str, tuple[type[BaseModel], Sequence[Mapping[str, Any]]]] = CENSUS,
               oracle: dif.Oracle | None = None) -> dict[str, Any]:
    """The census report: counts, a line per model, the findings, and each model's first refused dump."""
    lines, findings, refused_dumps, refused = [], [], [], {}
    for name, (model, inputs) in census.items():
        result = census_model(name, model, inputs, oracle)
        lines.append(result["line"])
        findings.extend(result["findings"])
        refused_dumps.extend(result["dumps_refused"])
        if "code" in result["line"]:
            refused[result["line"]["code"]] = refused.get(result["line"]["code"], 0) + 1
    return {
        "format": REPORT_FORMAT,
        "versions": {package: metadata.version(package)
                     for package in ("pydantic", "pydantic-core", "email-validator")},
        "oracle": oracle.versions if oracle is not None else None,
        "counts": {"models": len(lines), "compiled": sum(1 for line in lines if line.get("compiled")),
                   "refused": dict(sorted(refused.items())), "raised": sum(1 for line in lines if "raised" in line)},
        "spot_check": {key: sum(line.get(key, 0) for line in lines) for key in SPOT_COUNTS},
        "models": lines,
        "finding_kinds": dict(FINDING_KINDS),
        "findings_total": len(findings),
        "findings": findings,
        "dumps_refused": refused_dumps,
    }


def exit_status(report: Mapping[str, Any]) -> int:
    """1 when something raised or a check admitted what its schema refuses; else 0, whatever was refused."""
    failing = [found for found in report["findings"] if found["kind"] in ("raised", "unsound")]
    return 1 if failing or report["counts"]["raised"] else 0


# ============================================================================================
# 5. CLI
# ============================================================================================


def main(argv: Sequence[str] | None = None) -> int:
    if argv:
        sys.stdout.write("usage: pydantic_census.py (no arguments)\n")
        return 2
    report = run_census(oracle=dif.load_oracle())
    sys.stdout.write(dif.render(report))
    return exit_status(report)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
