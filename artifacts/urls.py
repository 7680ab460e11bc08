"""URLs a tool would fetch or return: checked before anything reaches a network.

check_url parses a URL strictly and decides where it may lead: a scheme the host allows (https
only by default), no user information, a host that is a name in plain letters-digits-hyphens, a
canonical dotted-quad IPv4 address or a bracketed IPv6 address, a port in range. An address is
refused when it falls in a range of REFUSED_NETWORKS (this module's own table, the same on every
Python version) unless the host's policy lists a network holding it. A name is resolved only
through a resolver the host hands in (a callable from a name to address strings); every answer is
checked and one refused answer refuses the name. Without a resolver every name is refused:
nothing here ever calls the system resolver or opens a socket by default.

Numeric hosts. A C resolver reads 2130706433, 0177.0.0.1, 0x7f.1, 127.1 and 127.0.0.1. all as
127.0.0.1. A host whose last label is numeric (digits, or 0x and hex digits, the rule the WHATWG
URL standard uses to call a host IPv4) must be the canonical a.b.c.d form without a trailing dot,
or it is refused outright (URL_HOST_NONCANONICAL), never reinterpreted. A trailing dot on a name
is refused the same way: it makes one host two spellings.

fetch follows the URL: it connects to the checked address (the name goes only into the Host
header and the TLS server name, so a second DNS answer cannot redirect the connection), sends a
fixed set of headers (no cookie, no authorization, ever), re-checks every redirect's Location
through check_url and the resolver, up to policy.max_redirects, and reads at most
policy.max_response_bytes (a declared length past it is refused before reading; an undeclared
body past it after reading one byte more). A total deadline covers the whole fetch, redirects
included, and a watchdog shuts the socket when it passes, so a slow server cannot hold a fetch
longer, headers included.

The URL is split with RFC 3986's own pattern (appendix B) rather than urllib.parse.urlsplit,
whose bracket checks differ between 3.11 patch releases; urllib.parse.urljoin resolves a relative
Location, and its result is checked again from the start.

Sections:
    1. Limits and constants     4. Addresses
    2. Errors                   5. Checking a URL
    3. The policy               6. Fetching
"""
from __future__ import annotations

import http.client
import ipaddress
import re
import socket
import ssl
import sys
import threading
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Final, Sequence

_HERE: Final = Path(__file__).resolve().parent
if not __package__:  # by path from a checkout: the repository root holds the core
    if str(_HERE.parent) not in sys.path:
        sys.path.insert(0, str(_HERE.parent))

import tool_dispatcher as td  # noqa: E402

__all__ = ["DEFAULT_PORTS", "MAX_URL_LENGTH", "MAX_HOST_LENGTH", "MAX_LABEL_LENGTH", "MAX_ANSWERS",
           "DEFAULT_MAX_REDIRECTS", "MAX_REDIRECTS_CEILING", "DEFAULT_MAX_RESPONSE_BYTES",
           "MAX_RESPONSE_BYTES_CEILING", "DEFAULT_TIMEOUT", "DEFAULT_DEADLINE", "MAX_DEADLINE",
           "MAX_ALLOWED_NETWORKS", "MAX_SCHEMES_AND_PORTS", "REDIRECT_STATUSES", "BODILESS_STATUSES",
           "REQUEST_HEADERS", "REFUSED_NETWORKS", "GLOBAL_UNICAST_V6", "URL_CATALOG", "UrlError", "UrlPolicy",
           "CheckedUrl", "Fetched", "Resolver", "address_class", "check_url", "fetch"]

# ============================================================================================
# 1. Limits and constants
# ============================================================================================

DEFAULT_PORTS: Final = MappingProxyType({"http": 80, "https": 443})  # the only schemes fetch speaks
MAX_URL_LENGTH: Final = 2_048  # characters: what browsers and servers reliably carry
MAX_HOST_LENGTH: Final = 253  # characters of a DNS name in text form (RFC 1035)
MAX_LABEL_LENGTH: Final = 63  # characters of one DNS label (RFC 1035)
MAX_ANSWERS: Final = 32  # addresses one resolver answer may hold; more is a resolver out of bounds
DEFAULT_MAX_REDIRECTS: Final = 5  # a login or CDN hop or two; a longer chain is a loop or a maze
MAX_REDIRECTS_CEILING: Final = 20
DEFAULT_MAX_RESPONSE_BYTES: Final = 10_485_760  # 10 MiB: a document or an image
MAX_RESPONSE_BYTES_CEILING: Final = 268_435_456  # 256 MiB: the whole body is held in memory
DEFAULT_TIMEOUT: Final = 10.0  # seconds one connect or one read may wait
DEFAULT_DEADLINE: Final = 30.0  # seconds for the whole fetch, every redirect included
MAX_DEADLINE: Final = 600.0
MAX_ALLOWED_NETWORKS: Final = 64
MAX_SCHEMES_AND_PORTS: Final = 64
READ_CHUNK: Final = 65_536
REDIRECT_STATUSES: Final = frozenset({301, 302, 303, 307, 308})
BODILESS_STATUSES: Final = frozenset({204, 304})
REQUEST_HEADERS: Final = MappingProxyType({  # every header fetch sends, besides Host
    "User-Agent": "tool-dispatcher-artifacts/1",
    "Accept": "*/*",
    "Accept-Encoding": "identity",  # the limit counts the bytes the server sends, not an expansion
    "Connection": "close",
})

# RFC 3986: every character a URL may hold (unreserved, reserved and '%'); anything else (space,
# control, backslash, quote, angle bracket, non-ASCII) is refused, never cleaned up.
_URL_CHARACTERS: Final = re.compile(r"[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]*")
_BAD_PERCENT: Final = re.compile(r"%(?![0-9A-Fa-f]{2})")
_URL_PARTS: Final = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*):(?://([^/?#]*))?([^?#]*)(?:\?([^#]*))?(?:#.*)?")
_PORT: Final = re.compile(r"[1-9][0-9]{0,4}")
_LABEL: Final = re.compile(r"[a-z0-9](?:[a-z0-9\-]*[a-z0-9])?")
_NUMERIC_LABEL: Final = re.compile(r"[0-9]+|0x[0-9a-f]*")
_IPV4_OCTET: Final = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_CANONICAL_IPV4: Final = re.compile(rf"{_IPV4_OCTET}(?:\.{_IPV4_OCTET}){{3}}")
_IPV6_CHARACTERS: Final = re.compile(r"[0-9a-fA-F:.]+")

# ============================================================================================
# 2. Errors
# ============================================================================================

URL_CATALOG: Final = MappingProxyType({
    **td.error_specs(
        "url", False,
        URL_POLICY_INVALID="The URL policy is not valid.",
        URL_INVALID="The URL is not a valid absolute URL.",
        URL_TOO_LONG="The URL is too long.",
        URL_CHARACTER="The URL contains a character a URL may not hold (space, control, backslash, non-ASCII).",
        URL_SCHEME_REFUSED="The URL's scheme is not allowed.",
        URL_USERINFO="The URL carries user information; credentials are never sent in a URL.",
        URL_HOST_MISSING="The URL has no host.",
        URL_HOST_INVALID="The URL's host is not a valid name or address.",
        URL_HOST_TOO_LONG="The URL's host, or one of its labels, is too long.",
        URL_HOST_NONCANONICAL="The URL's host is a numeric address in a non-canonical spelling, or ends with a dot.",
        URL_PORT_INVALID="The URL's port is not a number from 1 to 65535 in plain digits.",
        URL_PORT_REFUSED="The URL's port is not allowed.",
        URL_ADDRESS_REFUSED="The URL's address is in a range that is never fetched.",
        URL_NO_RESOLVER="The URL names a host, and no resolver was given to check it.",
        URL_RESOLVE_FAILED="The URL's host name could not be resolved to valid addresses.",
        URL_NAME_REFUSED="The URL's host name resolves to an address in a range that is never fetched.",
        URL_TLS_FAILED="The TLS connection failed or the server's certificate was not accepted.",
        URL_RESPONSE_INVALID="The server's response is not valid HTTP.",
        URL_RESPONSE_TOO_LARGE="The response body is larger than the policy allows.",
        URL_REDIRECT_INVALID="A redirect has no single Location.",
        URL_TOO_MANY_REDIRECTS="The URL redirects more times than the policy allows.",
    ),
    **td.error_specs(
        "url", True,
        URL_CONNECTION_FAILED="The connection to the server failed or was closed.",
        URL_TIMEOUT="The server did not answer in time.",
    ),
})


class UrlError(td.CatalogError):
    """A URL refused or a fetch failed: a code from URL_CATALOG (never a word of the URL).
    ``at`` is "location" when the refused URL came from a redirect."""

    CATALOG = URL_CATALOG


# ============================================================================================
# 3. The policy
# ============================================================================================

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str], Sequence[str]]


@dataclass(frozen=True, slots=True)
class UrlPolicy:
    """What the host lets a URL reach. ``ports`` None: any port. ``allowed_networks`` (texts or
    networks) reopen ranges REFUSED_NETWORKS closes: a test server on loopback needs
    "127.0.0.1/32" here; nothing is reopened by default."""

    schemes: frozenset[str] = frozenset({"https"})
    ports: frozenset[int] | None = None
    max_redirects: int = DEFAULT_MAX_REDIRECTS
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    allowed_networks: tuple[Network, ...] = ()
    timeout: float = DEFAULT_TIMEOUT
    deadline: float = DEFAULT_DEADLINE

    def __post_init__(self) -> None:
        object.__setattr__(self, "schemes", _collection(self.schemes, _is_scheme))
        if self.ports is not None:
            object.__setattr__(self, "ports", _collection(self.ports, _is_port))
        _bounded_int(self.max_redirects, MAX_REDIRECTS_CEILING)
        _bounded_int(self.max_response_bytes, MAX_RESPONSE_BYTES_CEILING)
        for seconds in (self.timeout, self.deadline):
            if type(seconds) not in (int, float) or not 0 < seconds <= MAX_DEADLINE:
                raise UrlError("URL_POLICY_INVALID")
        object.__setattr__(self, "allowed_networks", _networks(self.allowed_networks))


def _is_scheme(value: object) -> bool:
    return type(value) is str and value in DEFAULT_PORTS


def _is_port(value: object) -> bool:
    return type(value) is int and 1 <= value <= 65_535


def _collection(value: object, valid: Callable[[object], bool]) -> frozenset[Any]:
    if not isinstance(value, (frozenset, set, tuple, list)) or not 0 < len(value) <= MAX_SCHEMES_AND_PORTS:
        raise UrlError("URL_POLICY_INVALID")
    if not all(valid(item) for item in value):
        raise UrlError("URL_POLICY_INVALID")
    return frozenset(value)


def _bounded_int(value: object, ceiling: int) -> None:
    if type(value) is not int or not 0 <= value <= ceiling:
        raise UrlError("URL_POLICY_INVALID")


def _networks(value: object) -> tuple[Network, ...]:
    if not isinstance(value, (tuple, list)) or len(value) > MAX_ALLOWED_NETWORKS:
        raise UrlError("URL_POLICY_INVALID")
    try:
        return tuple(ipaddress.ip_network(item, strict=True) for item in value)
    except (ValueError, TypeError):
        raise UrlError("URL_POLICY_INVALID") from None


# ============================================================================================
# 4. Addresses
# ============================================================================================

# Every range no fetch may reach, most specific first, with the class a test or a report names.
# Pinned here rather than read from ipaddress's is_global/is_private: those moved between 3.11
# and 3.13 (192.0.0.8/32, 2001:1::/32 to 2001:30::/28, 2002::/16 and 64:ff9b:1::/48 changed
# sides), and a refusal must not depend on the interpreter. Whole blocks are refused where
# ipaddress carves out exceptions (192.0.0.0/24, 2001::/23), and the IPv6 transition prefixes
# (IPv4-mapped, -compatible, -translated, NAT64, Teredo, 6to4) are refused whole: each can carry
# an IPv4 address a relay or the host's own stack would reach.
REFUSED_NETWORKS: Final[tuple[tuple[Network, str], ...]] = tuple(
    (ipaddress.ip_network(network), name) for network, name in (
        ("0.0.0.0/8", "unspecified"),
        ("10.0.0.0/8", "private"),
        ("100.64.0.0/10", "shared"),
        ("127.0.0.0/8", "loopback"),
        ("169.254.0.0/16", "link-local"),
        ("172.16.0.0/12", "private"),
        ("192.0.0.0/24", "protocol-assignments"),
        ("192.0.2.0/24", "documentation"),
        ("192.88.99.0/24", "6to4-relay"),
        ("192.168.0.0/16", "private"),
        ("198.18.0.0/15", "benchmarking"),
        ("198.51.100.0/24", "documentation"),
        ("203.0.113.0/24", "documentation"),
        ("224.0.0.0/4", "multicast"),
        ("240.0.0.0/4", "reserved"),  # 255.255.255.255, the broadcast address, among them
        ("::/128", "unspecified"),
        ("::1/128", "loopback"),
        ("::ffff:0:0/96", "ipv4-mapped"),
        ("::ffff:0:0:0/96", "ipv4-translated"),
        ("::/96", "ipv4-compatible"),
        ("64:ff9b::/96", "nat64"),
        ("64:ff9b:1::/48", "nat64"),
        ("100::/64", "discard"),
        ("2001::/32", "teredo"),
        ("2001:db8::/32", "documentation"),
        ("2001::/23", "protocol-assignments"),
        ("2002::/16", "6to4"),
        ("3fff::/20", "documentation"),
        ("fc00::/7", "unique-local"),
        ("fe80::/10", "link-local"),
        ("fec0::/10", "site-local"),
        ("ff00::/8", "multicast"),
    ))
GLOBAL_UNICAST_V6: Final = ipaddress.IPv6Network("2000::/3")  # any IPv6 address outside it is "reserved"


def address_class(address: str | Address) -> str | None:
    """The class of REFUSED_NETWORKS an address falls in, "reserved" for IPv6 outside 2000::/3,
    or None for an address a fetch may reach (before a policy's allowed networks)."""
    if isinstance(address, str):
        address = ipaddress.ip_address(address)
    for network, name in REFUSED_NETWORKS:
        if address in network:  # False across versions: an IPv4 address is in no IPv6 network
            return name
    if address.version == 6 and address not in GLOBAL_UNICAST_V6:
        return "reserved"
    return None


def _refused(address: Address, policy: UrlPolicy) -> bool:
    return address_class(address) is not None and not any(address in network
                                                           for network in policy.allowed_networks)


# ============================================================================================
# 5. Checking a URL
# ============================================================================================


@dataclass(frozen=True, slots=True)
class CheckedUrl:
    url: str  # scheme://host[:port]/path[?query]: lower-case scheme and host, no default port, no fragment
    scheme: str
    host: str  # a lower-case name, or an address in its canonical text (IPv6 without brackets)
    port: int
    target: str  # what the request line asks for: /path[?query]
    addresses: tuple[str, ...]  # every address checked; fetch connects to the first


def _check_text(url: object) -> None:
    if type(url) is not str or not url:
        raise UrlError("URL_INVALID")
    if len(url) > MAX_URL_LENGTH:
        raise UrlError("URL_TOO_LONG")
    if not _URL_CHARACTERS.fullmatch(url):
        raise UrlError("URL_CHARACTER")
    if _BAD_PERCENT.search(url):
        raise UrlError("URL_INVALID")


def check_url(url: str, policy: UrlPolicy, resolver: Resolver | None = None) -> CheckedUrl:
    """The URL checked and resolved (see the module), or UrlError; no socket is opened."""
    _check_text(url)
    parts = _URL_PARTS.fullmatch(url)
    if parts is None:
        raise UrlError("URL_INVALID")
    scheme, netloc, path, query = parts.group(1).lower(), parts.group(2), parts.group(3), parts.group(4)
    if scheme not in policy.schemes:
        raise UrlError("URL_SCHEME_REFUSED")
    if not netloc:  # None (no //) or empty (http:///path)
        raise UrlError("URL_HOST_MISSING")
    if "@" in netloc:
        raise UrlError("URL_USERINFO")
    host_text, bracketed, port_text = _split_netloc(netloc)
    port = _port(port_text, scheme, policy)
    host, addresses = (_ipv6_host if bracketed else _host)(host_text, policy, resolver)
    target = (path or "/") + (f"?{query}" if query else "")
    return CheckedUrl(f"{scheme}://{_authority(scheme, host, port)}{target}", scheme, host, port, target, addresses)


def _authority(scheme: str, host: str, port: int) -> str:
    """host[:port] as a URL and the Host header write it: IPv6 in brackets, no default port."""
    authority = f"[{host}]" if ":" in host else host
    return authority if port == DEFAULT_PORTS[scheme] else f"{authority}:{port}"


def _split_netloc(netloc: str) -> tuple[str, bool, str | None]:
    """(host, bracketed, port text or None) of an authority without user information."""
    if netloc.startswith("["):
        end = netloc.find("]")
        rest = netloc[end + 1:]
        if end < 0 or (rest and not rest.startswith(":")):
            raise UrlError("URL_HOST_INVALID")
        return netloc[1:end], True, rest[1:] if rest else None
    if "[" in netloc or "]" in netloc:
        raise UrlError("URL_HOST_INVALID")
    host, colon, port_text = netloc.partition(":")
    return host, False, port_text if colon else None


def _port(text: str | None, scheme: str, policy: UrlPolicy) -> int:
    if text is None:
        port = DEFAULT_PORTS[scheme]
    elif _PORT.fullmatch(text) and int(text) <= 65_535:  # no sign, no leading zero, no second colon
        port = int(text)
    else:
        raise UrlError("URL_PORT_INVALID")
    if policy.ports is not None and port not in policy.ports:
        raise UrlError("URL_PORT_REFUSED")
    return port


def _ipv6_host(text: str, policy: UrlPolicy, _resolver: Resolver | None) -> tuple[str, tuple[str, ...]]:
    # a zone (%25eth0) and IPvFuture (v1.x) never pass: only hex digits, colons and dots
    if not _IPV6_CHARACTERS.fullmatch(text):
        raise UrlError("URL_HOST_INVALID")
    try:
        address = ipaddress.IPv6Address(text)
    except ValueError:
        raise UrlError("URL_HOST_INVALID") from None
    if _refused(address, policy):
        raise UrlError("URL_ADDRESS_REFUSED")
    return str(address), (str(address),)


def _host(text: str, policy: UrlPolicy, resolver: Resolver | None) -> tuple[str, tuple[str, ...]]:
    if not text:
        raise UrlError("URL_HOST_MISSING")
    if len(text) > MAX_HOST_LENGTH:
        raise UrlError("URL_HOST_TOO_LONG")
    host = text.lower()
    labels = host.split(".")
    last = labels[-2] if len(labels) > 1 and not labels[-1] else labels[-1]  # past one trailing dot
    if _NUMERIC_LABEL.fullmatch(last):
        return _ipv4_host(host, policy)
    if not labels[-1]:
        raise UrlError("URL_HOST_NONCANONICAL")  # a trailing dot
    for label in labels:
        if len(label) > MAX_LABEL_LENGTH:
            raise UrlError("URL_HOST_TOO_LONG")
        if not _LABEL.fullmatch(label):
            raise UrlError("URL_HOST_INVALID")
    return host, _resolve(host, policy, resolver)


def _ipv4_host(host: str, policy: UrlPolicy) -> tuple[str, tuple[str, ...]]:
    if not _CANONICAL_IPV4.fullmatch(host):
        raise UrlError("URL_HOST_NONCANONICAL")
    address = ipaddress.IPv4Address(host)
    if _refused(address, policy):
        raise UrlError("URL_ADDRESS_REFUSED")
    return host, (host,)


def _resolve(name: str, policy: UrlPolicy, resolver: Resolver | None) -> tuple[str, ...]:
    if resolver is None:
        raise UrlError("URL_NO_RESOLVER")
    try:
        answers = resolver(name)
    except Exception:  # the host's resolver failing is no answer, whatever it raised
        raise UrlError("URL_RESOLVE_FAILED") from None
    if not isinstance(answers, (list, tuple)) or not 0 < len(answers) <= MAX_ANSWERS:
        raise UrlError("URL_RESOLVE_FAILED")
    addresses = tuple(_answer(answer) for answer in answers)
    if any(_refused(address, policy) for address in addresses):
        raise UrlError("URL_NAME_REFUSED")  # one refused answer refuses the name: no picking
    return tuple(str(address) for address in addresses)


def _answer(answer: object) -> Address:
    if type(answer) is not str or "%" in answer:  # a zone would choose an interface
        raise UrlError("URL_RESOLVE_FAILED")
    try:
        return ipaddress.ip_address(answer)
    except ValueError:
        raise UrlError("URL_RESOLVE_FAILED") from None


# ============================================================================================
# 6. Fetching
# ============================================================================================


@dataclass(frozen=True, slots=True)
class Fetched:
    final_url: str  # the checked URL the body came from (after redirects)
    status: int
    content_type: str | None  # the Content-Type header as sent, None without one
    data: bytes
    address: str  # the address connected to for final_url
    redirects: int  # redirects followed


@dataclass(frozen=True, slots=True)
class _Answer:
    status: int
    content_type: str | None
    location: str | None
    data: bytes


class _PinnedConnection(http.client.HTTPConnection):
    """A connection to one checked address. The name is only the Host header and the TLS server
    name: nothing resolves it again, so a second DNS answer cannot move the connection."""

    def __init__(self, checked: CheckedUrl, timeout: float, tls: ssl.SSLContext | None) -> None:
        super().__init__(checked.addresses[0], checked.port, timeout=timeout)
        self._server_name = checked.host
        self._tls = tls
        self._lock = threading.Lock()
        self._socket: socket.socket | None = None  # what abort shuts, kept past http.client's close()
        self.timed_out = False

    def connect(self) -> None:
        sock = socket.create_connection((self.host, self.port), self.timeout)
        if self._tls is not None:
            try:  # the handshake waits until the watchdog can shut the socket it runs on
                sock = self._tls.wrap_socket(sock, server_hostname=self._server_name, do_handshake_on_connect=False)
            except BaseException:
                sock.close()
                raise
        with self._lock:
            self.sock = self._socket = sock
            if self.timed_out:
                raise TimeoutError
        if self._tls is not None:
            sock.do_handshake()

    def abort(self) -> None:
        """The deadline passed: shut the socket, so a read blocked on it returns at once. A
        response that ends at the connection's close owns the socket after http.client set
        ``sock`` to None: the socket kept at connect is the one shut."""
        with self._lock:
            self.timed_out = True
            if self._socket is not None:
                try:
                    self._socket.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


# What a failure inside one exchange means, most specific class first (SSLError is an OSError,
# a malformed chunk size surfaces as a ValueError).
_FAILURES: Final = (
    (ssl.SSLError, "URL_TLS_FAILED"),
    (TimeoutError, "URL_TIMEOUT"),
    (http.client.HTTPException, "URL_RESPONSE_INVALID"),
    (ValueError, "URL_RESPONSE_INVALID"),
    (OSError, "URL_CONNECTION_FAILED"),
)


def fetch(url: str, policy: UrlPolicy, resolver: Resolver | None = None, *,
          ssl_context: ssl.SSLContext | None = None) -> Fetched:
    """GET the URL under the policy (see the module): Fetched, or UrlError. https uses
    ``ssl_context``, by default ssl.create_default_context() (certificates and names verified)."""
    deadline = time.monotonic() + policy.deadline
    checked = check_url(url, policy, resolver)
    redirects = 0
    while True:
        answer = _exchange(checked, policy, deadline, ssl_context)
        if answer.status not in REDIRECT_STATUSES:
            return Fetched(checked.url, answer.status, answer.content_type, answer.data, checked.addresses[0],
                           redirects)
        if redirects == policy.max_redirects:
            raise UrlError("URL_TOO_MANY_REDIRECTS")
        redirects += 1
        checked = _follow(checked, answer.location, policy, resolver)


def _follow(checked: CheckedUrl, location: str | None, policy: UrlPolicy, resolver: Resolver | None) -> CheckedUrl:
    if not location:
        raise UrlError("URL_REDIRECT_INVALID")
    try:
        _check_text(location)  # before urljoin, which would drop what it does not understand
        return check_url(urllib.parse.urljoin(checked.url, location), policy, resolver)
    except UrlError as error:
        raise UrlError(error.code, "location") from None


def _exchange(checked: CheckedUrl, policy: UrlPolicy, deadline: float, context: ssl.SSLContext | None) -> _Answer:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise UrlError("URL_TIMEOUT")
    tls = None if checked.scheme == "http" else context or ssl.create_default_context()
    connection = _PinnedConnection(checked, min(policy.timeout, remaining), tls)
    watchdog = threading.Timer(remaining, connection.abort)
    watchdog.start()
    try:
        answer = _request(connection, checked, policy)
    except (OSError, ValueError, http.client.HTTPException) as error:
        code = next(code for kind, code in _FAILURES if isinstance(error, kind))
        raise UrlError("URL_TIMEOUT" if connection.timed_out else code) from None
    except UrlError:
        if connection.timed_out:  # a body the shut socket cut short of its declared length
            raise UrlError("URL_TIMEOUT") from None
        raise
    finally:
        watchdog.cancel()
        watchdog.join()  # the socket is never shut by a late watchdog once closed below
        connection.close()
    if connection.timed_out:  # the shut socket read as an end of body
        raise UrlError("URL_TIMEOUT")
    return answer


def _request(connection: _PinnedConnection, checked: CheckedUrl, policy: UrlPolicy) -> _Answer:
    host = _authority(checked.scheme, checked.host, checked.port)
    connection.request("GET", checked.target, headers={"Host": host, **REQUEST_HEADERS})
    response = connection.getresponse()
    content_type = _single(response.headers.get_all("Content-Type"), "URL_RESPONSE_INVALID")
    if response.status in REDIRECT_STATUSES:
        location = _single(response.headers.get_all("Location"), "URL_REDIRECT_INVALID")
        return _Answer(response.status, content_type, location, b"")
    declared = _single(response.headers.get_all("Content-Length"), "URL_RESPONSE_INVALID")
    if declared is not None:
        if not declared.isascii() or not declared.isdigit():
            raise UrlError("URL_RESPONSE_INVALID")
        if int(declared) > policy.max_response_bytes:
            raise UrlError("URL_RESPONSE_TOO_LARGE")  # before a byte of the body is read
    data = _read_bounded(response, policy.max_response_bytes)
    # http.client reads a body cut short of its length as if it were whole; 1xx, 204 and 304 never
    # have a body, whatever length they declare (RFC 9110, 6.4.1)
    if declared is not None and len(data) != int(declared) and response.status >= 200 \
            and response.status not in BODILESS_STATUSES:
        raise UrlError("URL_RESPONSE_INVALID")
    return _Answer(response.status, content_type, None, data)


def _single(values: list[str] | None, code: str) -> str | None:
    if values is None:
        return None
    if len(values) != 1:
        raise UrlError(code)
    return values[0]


def _read_bounded(response: http.client.HTTPResponse, limit: int) -> bytes:
    chunks: list[bytes] = []
    total = 0
    while True:
        chunk = response.read(min(READ_CHUNK, limit + 1 - total))  # at most limit + 1 bytes in all
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        total += len(chunk)
        if total > limit:
            raise UrlError("URL_RESPONSE_TOO_LARGE")
