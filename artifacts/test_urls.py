"""Tests of urls.py: every refused class of URL and address with one case each, both sides of
every limit, and fetches from a loopback HTTP server these tests start (127.0.0.1, port 0) that
counts every request it sees, so a refused target is shown never to have been asked."""
from __future__ import annotations

import http.server
import ipaddress
import random
import socket
import ssl
import sys
import threading
import time
import unittest
import urllib.parse
from pathlib import Path
from unittest import mock

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import urls  # noqa: E402
from urls import UrlError, UrlPolicy, check_url, fetch  # noqa: E402

WAIT = 60.0  # seconds a fetch may take on a loaded machine: a safety net, never a measure
SERVER_CAP = 30.0  # seconds an endless route keeps going if nobody stops it
NAMES = {
    "ok.test": ["127.0.0.1"],
    "public.test": ["93.184.216.34"],
    "private.test": ["10.0.0.1"],
    "metadata.test": ["169.254.169.254"],
    "loop6.test": ["::1"],
    "mixed.test": ["127.0.0.1", "10.0.0.1"],  # one good answer and one refused: the name is refused
}


class DictResolver:
    """The test's resolver: NAMES (or its own table), every call counted."""

    def __init__(self, table=None):
        self.table = NAMES if table is None else table
        self.calls = []

    def __call__(self, name):
        self.calls.append(name)
        return list(self.table[name])


def refused(test, code, call, *args, at="", **kwargs):
    with test.assertRaises(UrlError) as caught:
        call(*args, **kwargs)
    test.assertEqual((caught.exception.code, caught.exception.at), (code, at))
    test.assertEqual(caught.exception.message, urls.URL_CATALOG[code].message)
    return caught.exception


# ============================================================================================
# The policy
# ============================================================================================


class TestPolicy(unittest.TestCase):
    def test_defaults_reach_https_only_and_reopen_nothing(self):
        policy = UrlPolicy()
        self.assertEqual(policy.schemes, frozenset({"https"}))
        self.assertIsNone(policy.ports)
        self.assertEqual(policy.allowed_networks, ())
        self.assertEqual((policy.max_redirects, policy.max_response_bytes), (5, 10_485_760))

    def test_values_are_normalized(self):
        policy = UrlPolicy(schemes=["http"], ports=[80, 8080], allowed_networks=["127.0.0.1/32", "::1/128"])
        self.assertEqual(policy.schemes, frozenset({"http"}))
        self.assertEqual(policy.ports, frozenset({80, 8080}))
        self.assertEqual(policy.allowed_networks, (ipaddress.ip_network("127.0.0.1/32"),
                                                   ipaddress.ip_network("::1/128")))

    def test_invalid_policies(self):
        cases = {
            "no scheme": dict(schemes=frozenset()),
            "ftp": dict(schemes={"ftp"}),
            "schemes a string": dict(schemes="https"),
            "port 0": dict(ports={0}),
            "port 65536": dict(ports={65_536}),
            "port a string": dict(ports={"443"}),
            "no port": dict(ports=frozenset()),
            "redirects past the ceiling": dict(max_redirects=urls.MAX_REDIRECTS_CEILING + 1),
            "negative redirects": dict(max_redirects=-1),
            "redirects a bool": dict(max_redirects=True),
            "bytes past the ceiling": dict(max_response_bytes=urls.MAX_RESPONSE_BYTES_CEILING + 1),
            "zero timeout": dict(timeout=0),
            "deadline past the ceiling": dict(deadline=urls.MAX_DEADLINE + 1),
            "timeout a string": dict(timeout="1"),
            "network with host bits": dict(allowed_networks=("127.0.0.1/8",)),
            "network not a network": dict(allowed_networks=("loopback",)),
            "networks a string": dict(allowed_networks="127.0.0.1/32"),
            "too many networks": dict(allowed_networks=tuple(f"10.0.0.{index}/32"
                                                             for index in range(urls.MAX_ALLOWED_NETWORKS + 1))),
        }
        for name, arguments in cases.items():
            with self.subTest(name):
                refused(self, "URL_POLICY_INVALID", UrlPolicy, **arguments)

    def test_scheme_and_port_lists_both_sides(self):
        ports = list(range(1, urls.MAX_SCHEMES_AND_PORTS + 2))
        self.assertEqual(len(UrlPolicy(ports=ports[:-1]).ports), urls.MAX_SCHEMES_AND_PORTS)
        refused(self, "URL_POLICY_INVALID", UrlPolicy, ports=list(ports))

    def test_limits_at_their_ceilings_are_accepted(self):
        policy = UrlPolicy(max_redirects=urls.MAX_REDIRECTS_CEILING, max_response_bytes=urls.MAX_RESPONSE_BYTES_CEILING,
                           timeout=urls.MAX_DEADLINE, deadline=urls.MAX_DEADLINE,
                           allowed_networks=tuple(f"10.0.0.{index}/32" for index in range(urls.MAX_ALLOWED_NETWORKS)))
        self.assertEqual(len(policy.allowed_networks), urls.MAX_ALLOWED_NETWORKS)
        self.assertEqual(UrlPolicy(max_redirects=0, max_response_bytes=0).max_redirects, 0)


# ============================================================================================
# Addresses
# ============================================================================================


class TestAddresses(unittest.TestCase):
    def test_every_network_is_refused_at_both_ends_and_not_past_them(self):
        # a network nested in another is named by the more specific entry: only refusal is asserted
        # at the edges; a neighbour outside every entry is reachable (IPv4) or "reserved" (IPv6
        # outside 2000::/3), so no entry is wider than written
        for network, _name in urls.REFUSED_NETWORKS:
            with self.subTest(str(network)):
                first, last = network.network_address, network.broadcast_address
                self.assertIsNotNone(urls.address_class(first))
                self.assertIsNotNone(urls.address_class(last))
                top = 2 ** network.max_prefixlen - 1
                neighbours = ([first - 1] if int(first) > 0 else []) + ([last + 1] if int(last) < top else [])
                for neighbour in neighbours:
                    if not any(neighbour in other for other, _ in urls.REFUSED_NETWORKS):
                        outside = neighbour.version == 6 and neighbour not in urls.GLOBAL_UNICAST_V6
                        self.assertEqual(urls.address_class(neighbour), "reserved" if outside else None)

    def test_one_address_of_every_class(self):
        cases = {
            "0.0.0.0": "unspecified", "10.0.0.1": "private", "100.64.0.1": "shared", "127.0.0.1": "loopback",
            "169.254.169.254": "link-local", "172.31.255.255": "private", "192.0.0.9": "protocol-assignments",
            "192.0.2.1": "documentation", "192.88.99.1": "6to4-relay", "192.168.1.1": "private",
            "198.19.0.1": "benchmarking", "198.51.100.7": "documentation", "203.0.113.9": "documentation",
            "224.0.0.251": "multicast", "255.255.255.255": "reserved", "::": "unspecified", "::1": "loopback",
            "::ffff:127.0.0.1": "ipv4-mapped", "::ffff:0:7f00:1": "ipv4-translated", "::127.0.0.1": "ipv4-compatible",
            "64:ff9b::7f00:1": "nat64", "64:ff9b:1::1": "nat64", "100::1": "discard", "2001:0:4136:e378::1": "teredo",
            "2001:db8::1": "documentation", "2001:1::1": "protocol-assignments", "2001:20::1": "protocol-assignments",
            "2002:7f00:1::1": "6to4", "2002:808:808::1": "6to4", "3fff::1": "documentation",
            "fd00::1": "unique-local", "fe80::1": "link-local", "fec0::1": "site-local", "ff02::1": "multicast",
            "5f00::1": "reserved", "4000::1": "reserved", "1::1": "reserved",
        }
        for text, name in cases.items():
            with self.subTest(text):
                self.assertEqual(urls.address_class(text), name)
        for text in ("8.8.8.8", "93.184.216.34", "1.1.1.1", "2606:4700::1111", "2a00:1450::1", "3ffe::1"):
            with self.subTest(text):
                self.assertIsNone(urls.address_class(text))

    def test_table_refuses_everything_this_pythons_ipaddress_calls_non_global(self):
        # the table is pinned; on every version it must still cover what ipaddress refuses
        rng = random.Random(20261206)
        samples = [ipaddress.IPv4Address(rng.getrandbits(32)) for _ in range(20_000)]
        samples += [ipaddress.IPv6Address(rng.getrandbits(128)) for _ in range(5_000)]
        samples += [ipaddress.IPv6Address((0x2 << 125) | rng.getrandbits(125)) for _ in range(5_000)]
        for network in ("192.0.0.0/24", "2001::/23", "64:ff9b::/96", "2002::/16", "100::/64", "::ffff:0:0/96"):
            net = ipaddress.ip_network(network)
            samples += [net.network_address + rng.getrandbits(net.max_prefixlen - net.prefixlen)
                        for _ in range(500)]
        missed = [address for address in samples
                  if (not address.is_global or address.is_private or address.is_reserved or address.is_multicast
                      or address.is_link_local or address.is_loopback or address.is_unspecified)
                  and urls.address_class(address) is None]
        self.assertEqual(missed, [])

    def test_allowed_networks_reopen_exactly_what_they_hold(self):
        policy = UrlPolicy(schemes={"http"}, allowed_networks=("127.0.0.1/32",))
        self.assertEqual(check_url("http://127.0.0.1/", policy).addresses, ("127.0.0.1",))
        for url in ("http://127.0.0.2/", "http://[::ffff:127.0.0.1]/", "http://[::1]/"):
            with self.subTest(url):
                refused(self, "URL_ADDRESS_REFUSED", check_url, url, policy)


# ============================================================================================
# Checking a URL
# ============================================================================================


class TestCheckUrl(unittest.TestCase):
    HTTPS = UrlPolicy()
    BOTH = UrlPolicy(schemes={"http", "https"})

    REFUSED = (  # (url, code): every refused class, resolver = DictResolver()
        (None, "URL_INVALID"),
        ("", "URL_INVALID"),
        (b"https://public.test/", "URL_INVALID"),  # bytes, not text: refused before anything reads them
        (7, "URL_INVALID"),
        ("example.test/path", "URL_INVALID"),
        ("//public.test/", "URL_INVALID"),
        ("https://public.test/%zz", "URL_INVALID"),
        ("https://public.test/%4", "URL_INVALID"),
        ("https://public.test/a b", "URL_CHARACTER"),
        ("https://public.test/\ta", "URL_CHARACTER"),
        ("https://public.test/\na", "URL_CHARACTER"),
        ("https://public.test/\x00", "URL_CHARACTER"),
        ("https://public.test/\x7f", "URL_CHARACTER"),
        ("https://public.test\\@private.test/", "URL_CHARACTER"),
        ("https://public.test/<script>", "URL_CHARACTER"),
        ("https://ex\u00e4mple.test/", "URL_CHARACTER"),
        (" https://public.test/", "URL_CHARACTER"),
        ("http://public.test/", "URL_SCHEME_REFUSED"),
        ("ftp://public.test/", "URL_SCHEME_REFUSED"),
        ("file:///etc/passwd", "URL_SCHEME_REFUSED"),
        ("javascript:alert(1)", "URL_SCHEME_REFUSED"),
        ("https:///path", "URL_HOST_MISSING"),
        ("https:public.test", "URL_HOST_MISSING"),
        ("https://:443/", "URL_HOST_MISSING"),
        ("https://user@public.test/", "URL_USERINFO"),
        ("https://user:pass@public.test/", "URL_USERINFO"),
        ("https://@public.test/", "URL_USERINFO"),
        ("https://public.test@private.test/", "URL_USERINFO"),
        ("https://a_b.test/", "URL_HOST_INVALID"),
        ("https://-a.test/", "URL_HOST_INVALID"),
        ("https://a-.test/", "URL_HOST_INVALID"),
        ("https://a..test/", "URL_HOST_INVALID"),
        ("https://.a.test/", "URL_HOST_INVALID"),
        ("https://a%41.test/", "URL_HOST_INVALID"),
        ("https://[::1/", "URL_HOST_INVALID"),
        ("https://[v1.x]/", "URL_HOST_INVALID"),
        ("https://[fe80::1%25eth0]/", "URL_HOST_INVALID"),
        ("https://[1.2.3.4]/", "URL_HOST_INVALID"),
        ("https://[::1]x/", "URL_HOST_INVALID"),
        ("https://a[b]/", "URL_HOST_INVALID"),
        ("https://public.test:443]/", "URL_HOST_INVALID"),  # one bracket alone, even where a port goes
        ("https://public.test:[443/", "URL_HOST_INVALID"),
        ("https://" + "a" * 64 + ".test/", "URL_HOST_TOO_LONG"),
        ("https://" + "a." * 125 + "test/", "URL_HOST_TOO_LONG"),  # 254 characters
        ("https://2130706433/", "URL_HOST_NONCANONICAL"),  # decimal 127.0.0.1
        ("https://0177.0.0.1/", "URL_HOST_NONCANONICAL"),  # octal
        ("https://0x7f.1/", "URL_HOST_NONCANONICAL"),  # hex, short
        ("https://0x7f000001/", "URL_HOST_NONCANONICAL"),
        ("https://0X7F.0.0.1/", "URL_HOST_NONCANONICAL"),
        ("https://127.1/", "URL_HOST_NONCANONICAL"),  # short form
        ("https://10.1/", "URL_HOST_NONCANONICAL"),
        ("https://127.0.0.1./", "URL_HOST_NONCANONICAL"),  # trailing dot
        ("https://127.0.0.01/", "URL_HOST_NONCANONICAL"),  # leading zero
        ("https://1.2.3.4.5/", "URL_HOST_NONCANONICAL"),
        ("https://256.0.0.1/", "URL_HOST_NONCANONICAL"),
        ("https://0x/", "URL_HOST_NONCANONICAL"),
        ("https://8.8.8.8./", "URL_HOST_NONCANONICAL"),  # public, refused all the same
        ("https://name.test.1/", "URL_HOST_NONCANONICAL"),  # a numeric last label makes the host IPv4
        ("https://public.test./", "URL_HOST_NONCANONICAL"),
        ("https://./", "URL_HOST_NONCANONICAL"),
        ("https://public.test:0/", "URL_PORT_INVALID"),
        ("https://public.test:65536/", "URL_PORT_INVALID"),
        ("https://public.test:0443/", "URL_PORT_INVALID"),
        ("https://public.test:+443/", "URL_PORT_INVALID"),
        ("https://public.test:/", "URL_PORT_INVALID"),
        ("https://public.test:443:443/", "URL_PORT_INVALID"),
        ("https://public.test:44a/", "URL_PORT_INVALID"),
        ("https://[2606:4700::1111]:/", "URL_PORT_INVALID"),
        ("https://10.0.0.1/", "URL_ADDRESS_REFUSED"),
        ("https://127.0.0.1/", "URL_ADDRESS_REFUSED"),
        ("https://169.254.169.254/", "URL_ADDRESS_REFUSED"),
        ("https://100.64.0.1/", "URL_ADDRESS_REFUSED"),
        ("https://0.0.0.0/", "URL_ADDRESS_REFUSED"),
        ("https://192.0.2.1/", "URL_ADDRESS_REFUSED"),
        ("https://224.0.0.1/", "URL_ADDRESS_REFUSED"),
        ("https://255.255.255.255/", "URL_ADDRESS_REFUSED"),
        ("https://[::1]/", "URL_ADDRESS_REFUSED"),
        ("https://[::]/", "URL_ADDRESS_REFUSED"),
        ("https://[fd12:3456::1]/", "URL_ADDRESS_REFUSED"),
        ("https://[fe80::1]/", "URL_ADDRESS_REFUSED"),
        ("https://[::ffff:127.0.0.1]/", "URL_ADDRESS_REFUSED"),
        ("https://[::ffff:7f00:1]/", "URL_ADDRESS_REFUSED"),
        ("https://[::127.0.0.1]/", "URL_ADDRESS_REFUSED"),
        ("https://[64:ff9b::a00:1]/", "URL_ADDRESS_REFUSED"),
        ("https://[2002:a00:1::1]/", "URL_ADDRESS_REFUSED"),
        ("https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/", "URL_ADDRESS_REFUSED"),
        ("https://[ff02::1]/", "URL_ADDRESS_REFUSED"),
        ("https://[2001:db8::1]/", "URL_ADDRESS_REFUSED"),
        ("https://unknown.test/", "URL_RESOLVE_FAILED"),
        ("https://private.test/", "URL_NAME_REFUSED"),
        ("https://metadata.test/", "URL_NAME_REFUSED"),
        ("https://loop6.test/", "URL_NAME_REFUSED"),
        ("https://mixed.test/", "URL_NAME_REFUSED"),
        ("https://ok.test/", "URL_NAME_REFUSED"),  # loopback, and this policy reopens nothing
    )

    def test_every_refused_class(self):
        for url, code in self.REFUSED:
            with self.subTest(url=url):
                error = refused(self, code, check_url, url, self.HTTPS, DictResolver())
                self.assertEqual(error.to_json(), {"code": code, "message": urls.URL_CATALOG[code].message,
                                                   "retryable": False})

    def test_checked_urls_are_canonical(self):
        cases = {
            "HTTPS://Public.TEST:443/a/b?q=1#frag": ("https://public.test/a/b?q=1", "public.test", 443, "/a/b?q=1"),
            "https://public.test": ("https://public.test/", "public.test", 443, "/"),
            "https://public.test:8443?x": ("https://public.test:8443/?x", "public.test", 8443, "/?x"),
            "https://8.8.8.8:65535/": ("https://8.8.8.8:65535/", "8.8.8.8", 65_535, "/"),
            "https://1.1.1.1:1/": ("https://1.1.1.1:1/", "1.1.1.1", 1, "/"),
            "https://[2606:4700:0:0::1111]/%41": ("https://[2606:4700::1111]/%41", "2606:4700::1111", 443, "/%41"),
            "http://public.test:80/": ("http://public.test/", "public.test", 80, "/"),
            "https://a-b.x1.test/": ("https://a-b.x1.test/", "a-b.x1.test", 443, "/"),
            "https://1e3.test/": ("https://1e3.test/", "1e3.test", 443, "/"),  # hex-free, not numeric: a name
        }
        resolver = DictResolver({"public.test": ["93.184.216.34"], "a-b.x1.test": ["93.184.216.34"],
                                 "1e3.test": ["93.184.216.34"]})
        for url, (canonical, host, port, target) in cases.items():
            with self.subTest(url):
                checked = check_url(url, self.BOTH, resolver)
                self.assertEqual((checked.url, checked.host, checked.port, checked.target),
                                 (canonical, host, port, target))

    def test_url_length_both_sides(self):
        prefix = "https://public.test/"
        at_limit = prefix + "a" * (urls.MAX_URL_LENGTH - len(prefix))
        self.assertEqual(check_url(at_limit, self.HTTPS, DictResolver()).url, at_limit)
        refused(self, "URL_TOO_LONG", check_url, at_limit + "a", self.HTTPS, DictResolver())

    def test_host_and_label_length_both_sides(self):
        label = "a" * urls.MAX_LABEL_LENGTH
        host = ".".join([label] * 3) + "." + "b" * 61  # 253 characters
        self.assertEqual(len(host), urls.MAX_HOST_LENGTH)
        resolver = DictResolver({host: ["93.184.216.34"]})
        self.assertEqual(check_url(f"https://{host}/", self.HTTPS, resolver).host, host)
        refused(self, "URL_HOST_TOO_LONG", check_url, f"https://{host}b/", self.HTTPS, resolver)

    def test_ports_both_sides_and_the_policy_list(self):
        policy = UrlPolicy(ports={443, 8443})
        resolver = DictResolver()
        self.assertEqual(check_url("https://public.test/", policy, resolver).port, 443)
        self.assertEqual(check_url("https://public.test:8443/", policy, resolver).port, 8443)
        refused(self, "URL_PORT_REFUSED", check_url, "https://public.test:8444/", policy, resolver)

    def test_names_are_refused_without_a_resolver(self):
        refused(self, "URL_NO_RESOLVER", check_url, "https://public.test/", self.HTTPS)
        self.assertEqual(check_url("https://8.8.8.8/", self.HTTPS).addresses, ("8.8.8.8",))

    def test_resolver_answers(self):
        def raising(_name):
            raise OSError("no answer")

        bad_answers = {"empty": [], "a string": "93.184.216.34", "a number": [1234], "not an address": ["x"],
                       "a zone": ["fe80::1%eth0"], "leading zeros": ["093.184.216.34"],
                       "too many": ["93.184.216.34"] * (urls.MAX_ANSWERS + 1)}
        for name, answer in bad_answers.items():
            with self.subTest(name):
                refused(self, "URL_RESOLVE_FAILED", check_url, "https://public.test/", self.HTTPS,
                        lambda _name, answer=answer: answer)
        refused(self, "URL_RESOLVE_FAILED", check_url, "https://public.test/", self.HTTPS, raising)
        many = ["93.184.216.34"] * urls.MAX_ANSWERS
        self.assertEqual(check_url("https://public.test/", self.HTTPS, lambda _name: many).addresses, tuple(many))
        both = check_url("https://public.test/", self.HTTPS, lambda _name: ("2606:4700:0::1111", "8.8.8.8"))
        self.assertEqual(both.addresses, ("2606:4700::1111", "8.8.8.8"))

    def test_the_resolver_sees_names_only_lower_case_and_never_literals(self):
        resolver = DictResolver()
        check_url("https://PUBLIC.test/", self.HTTPS, resolver)
        check_url("https://8.8.8.8/", self.HTTPS, resolver)
        check_url("https://[2606:4700::1111]/", self.HTTPS, resolver)
        self.assertEqual(resolver.calls, ["public.test"])


# ============================================================================================
# Fetching: a loopback server that counts what it is asked
# ============================================================================================


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    state: "LoopbackServer"

    def log_message(self, *_args):
        pass

    def do_GET(self):
        parts = urllib.parse.urlsplit(self.path)
        self.state.record(parts.path, self.headers)
        name, _, argument = parts.path[1:].partition("/")
        query = dict(urllib.parse.parse_qsl(parts.query))
        try:
            ROUTES[name](self, argument, query)
        except OSError:  # the client closed first: what an endless route waits for
            self.close_connection = True

    def plain(self, status, body=b"", headers=()):
        self.send_response(status)
        for header, value in headers:
            self.send_header(header, value)
        if not any(header == "Content-Length" for header, _ in headers):
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def chunked(self, chunks):
        self.send_response(200)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for chunk in chunks:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        self.wfile.write(b"0\r\n\r\n")

    def endless(self, chunk, interval):
        self.send_response(200)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        while not self.state.stop.wait(interval):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))


def route_redirect_chain(handler, argument, _query):
    left = int(argument)
    if left == 0:
        handler.plain(200, b"end of chain", [("Content-Type", "text/plain")])
    else:
        handler.plain(302, headers=[("Location", f"/chain/{left - 1}")])


def route_trickle_to_close(handler, _argument, _query):
    # no length and no chunks: the body ends when the connection closes, so a shut socket reads
    # as a whole body
    handler.send_response(200)
    handler.send_header("Connection", "close")
    handler.end_headers()
    while not handler.state.stop.wait(0.02):
        handler.wfile.write(b"t")


def route_trickle_short_of_length(handler, _argument, _query):
    handler.send_response(200)
    handler.send_header("Content-Length", "100000")
    handler.end_headers()
    while not handler.state.stop.wait(0.02):
        handler.wfile.write(b"t")


def route_slow_headers(handler, _argument, _query):
    handler.wfile.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
    while not handler.state.stop.wait(0.02):
        handler.wfile.write(b"a")


ROUTES = {
    "ok": lambda h, _a, _q: h.plain(200, b"hello", [("Content-Type", "text/plain; charset=utf-8")]),
    "chain": route_redirect_chain,
    "go": lambda h, _a, q: h.plain(int(q.get("status", "302")), headers=[
        ("Location", q["to"]), *([("Set-Cookie", "session=secret")] if "cookie" in q else [])]),
    "status": lambda h, a, _q: h.plain(int(a), b"status body"),
    "no-location": lambda h, _a, _q: h.plain(302),
    "two-locations": lambda h, _a, _q: h.plain(302, headers=[("Location", "/ok"), ("Location", "/ok")]),
    "size": lambda h, a, _q: h.plain(200, b"x" * int(a)),
    "chunked": lambda h, a, _q: h.chunked([b"y" * 7] * (int(a) // 7) + [b"y" * (int(a) % 7)] * (int(a) % 7 > 0)),
    "declares-more-than-the-limit": lambda h, _a, _q: h.plain(200, b"small", [("Content-Length", "1000")]),
    "declares-less": lambda h, _a, _q: h.plain(200, b"x" * 20, [("Content-Length", "5")]),
    "declares-more-and-closes": lambda h, _a, _q: h.plain(200, b"x" * 10, [("Content-Length", "50")]),
    "two-lengths": lambda h, _a, _q: h.plain(200, b"abc", [("Content-Length", "3"), ("Content-Length", "4")]),
    "signed-length": lambda h, _a, _q: h.plain(200, b"abc", [("Content-Length", "+3")]),
    "two-types": lambda h, _a, _q: h.plain(200, b"abc", [("Content-Type", "text/plain"),
                                                         ("Content-Type", "text/html")]),
    "endless": lambda h, _a, _q: h.endless(b"z" * 4096, 0),
    "trickle": lambda h, _a, _q: h.endless(b"t", 0.02),
    "stall": lambda h, _a, _q: (h.plain(200, b"", [("Content-Length", "10")]), h.state.stop.wait(SERVER_CAP)),
    "slow-headers": route_slow_headers,
    "trickle-to-close": route_trickle_to_close,
    "trickle-short-of-length": route_trickle_short_of_length,
    "not-http": lambda h, _a, _q: h.wfile.write(b"NOT HTTP AT ALL\r\n\r\n"),
    "bad-chunk": lambda h, _a, _q: h.wfile.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"),
}


class LoopbackServer:
    """A ThreadingHTTPServer on 127.0.0.1, port 0. close() stops every endless route and joins
    every handler thread, so nothing outlives a test class."""

    def __init__(self, address="127.0.0.1"):
        self.lock = threading.Lock()
        self.requests = []  # (path, header names in order, headers)
        self.stop = threading.Event()
        handler = type("BoundHandler", (Handler,), {"state": self})
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        server_class = type("Server", (http.server.ThreadingHTTPServer,), {"address_family": family})
        self.httpd = server_class((address, 0), handler)
        self.httpd.daemon_threads = False
        self.httpd.block_on_close = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05})
        self.thread.start()

    def record(self, path, headers):
        with self.lock:
            self.requests.append((path, list(headers.keys()), dict(headers.items())))

    def paths(self):
        with self.lock:
            return [path for path, _names, _headers in self.requests]

    def reset(self):
        with self.lock:
            self.requests.clear()

    def close(self):
        self.stop.set()
        self.httpd.shutdown()
        self.thread.join()
        self.httpd.server_close()


class FetchCase(unittest.TestCase):
    server: LoopbackServer

    @classmethod
    def setUpClass(cls):
        cls.server = LoopbackServer()

    @classmethod
    def tearDownClass(cls):
        cls.server.close()

    def setUp(self):
        self.server.reset()
        self.base = f"http://127.0.0.1:{self.server.port}"
        self.policy = UrlPolicy(schemes={"http"}, allowed_networks=("127.0.0.1/32",), timeout=WAIT, deadline=WAIT)

    def policy_with(self, **changes):
        fields = dict(schemes=self.policy.schemes, allowed_networks=self.policy.allowed_networks, timeout=WAIT,
                      deadline=WAIT)
        fields.update(changes)
        return UrlPolicy(**fields)

    def redirect(self, location, **query):
        return f"{self.base}/go?" + urllib.parse.urlencode({"to": location, **query})

    def fails(self, code, url, policy=None, resolver=None, at="", requests=None, **kwargs):
        refused(self, code, fetch, url, policy or self.policy, resolver, at=at, **kwargs)
        if requests is not None:
            self.assertEqual(self.server.paths(), requests)


class TestFetch(FetchCase):
    def test_ok(self):
        fetched = fetch(f"{self.base}/ok", self.policy)
        self.assertEqual(fetched, urls.Fetched(f"{self.base}/ok", 200, "text/plain; charset=utf-8", b"hello",
                                               "127.0.0.1", 0))
        self.assertEqual(self.server.paths(), ["/ok"])

    def test_only_the_fixed_headers_are_sent(self):
        fetch(self.redirect("/ok", cookie="1"), self.policy)
        self.assertEqual(len(self.server.requests), 2)
        for _path, names, headers in self.server.requests:
            self.assertEqual(names, ["Host", "User-Agent", "Accept", "Accept-Encoding", "Connection"])
            self.assertEqual(headers["Host"], f"127.0.0.1:{self.server.port}")
        self.assertNotIn("Cookie", self.server.requests[1][2])  # the redirect's Set-Cookie is never sent back

    def test_the_connection_goes_to_the_checked_address_under_the_name(self):
        answers = iter([["127.0.0.1"], ["10.0.0.1"]])  # a rebinding resolver: a second answer differs
        calls = []

        def rebinding(name):
            calls.append(name)
            return next(answers)

        fetched = fetch(f"http://rebind.test:{self.server.port}/ok", self.policy, rebinding)
        self.assertEqual((fetched.data, fetched.address, calls), (b"hello", "127.0.0.1", ["rebind.test"]))
        self.assertEqual(self.server.requests[0][2]["Host"], f"rebind.test:{self.server.port}")

    def test_a_redirect_is_resolved_again_and_refused_on_a_rebound_answer(self):
        answers = iter([["127.0.0.1"], ["10.0.0.1"]])
        location = f"http://rebind.test:{self.server.port}/ok"
        self.fails("URL_NAME_REFUSED", f"http://rebind.test:{self.server.port}/go?to=" + urllib.parse.quote(location),
                   resolver=lambda _name: next(answers), at="location", requests=["/go"])

    def test_statuses_other_than_redirects_are_returned(self):
        for status in (200, 204, 300, 304, 404, 500):
            with self.subTest(status):
                self.server.reset()
                fetched = fetch(f"{self.base}/status/{status}", self.policy)
                body = b"" if status in urls.BODILESS_STATUSES else b"status body"
                self.assertEqual((fetched.status, fetched.data, fetched.redirects), (status, body, 0))
                self.assertEqual(self.server.paths(), [f"/status/{status}"])

    def test_refused_before_any_request(self):
        self.fails("URL_NO_RESOLVER", f"http://ok.test:{self.server.port}/ok", requests=[])
        self.fails("URL_SCHEME_REFUSED", f"https://127.0.0.1:{self.server.port}/ok", requests=[])
        self.fails("URL_ADDRESS_REFUSED", f"http://127.0.0.2:{self.server.port}/ok", requests=[])

    def test_connection_refused(self):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        error = refused(self, "URL_CONNECTION_FAILED", fetch, f"http://127.0.0.1:{port}/", self.policy)
        self.assertTrue(error.retryable)

    def test_a_server_that_does_not_speak_http(self):
        for route in ("not-http", "bad-chunk"):
            with self.subTest(route):
                self.server.reset()
                self.fails("URL_RESPONSE_INVALID", f"{self.base}/{route}", requests=[f"/{route}"])


class TestFetchSeams(FetchCase):
    """The pieces fetch is made of, each at the seam where it decides."""

    def test_the_system_resolver_never_sees_a_name(self):
        real = socket.getaddrinfo
        asked = []

        def recording(host, *args, **kwargs):
            asked.append(host)
            return real(host, *args, **kwargs)

        with mock.patch.object(socket, "getaddrinfo", side_effect=recording):
            fetched = fetch(f"http://ok.test:{self.server.port}/ok", self.policy, DictResolver())
            refused(self, "URL_NO_RESOLVER", fetch, f"http://ok.test:{self.server.port}/ok", self.policy)
        self.assertEqual((fetched.data, asked), (b"hello", ["127.0.0.1"]))

    def test_an_undeclared_body_is_read_to_one_byte_past_the_limit_and_no_further(self):
        class Endless:
            asked = 0

            def read(self, amount):
                self.asked += amount
                return b"e" * amount

        body = Endless()
        with self.assertRaises(UrlError) as caught:
            urls._read_bounded(body, 100_000)
        self.assertEqual((caught.exception.code, body.asked), ("URL_RESPONSE_TOO_LARGE", 100_001))

    def test_a_deadline_already_passed_sends_nothing(self):
        checked = check_url(f"{self.base}/ok", self.policy)
        with mock.patch.object(urls, "_PinnedConnection", wraps=urls._PinnedConnection) as connections:
            with self.assertRaises(UrlError) as caught:
                urls._exchange(checked, self.policy, time.monotonic() - 1, None)
            self.assertEqual((caught.exception.code, self.server.paths(), connections.call_count),
                             ("URL_TIMEOUT", [], 0))  # not even a connection object, nor its watchdog
            self.assertEqual(urls._exchange(checked, self.policy, time.monotonic() + WAIT, None).data, b"hello")
            self.assertEqual((self.server.paths(), connections.call_count), (["/ok"], 1))

    def test_a_watchdog_that_fires_before_the_socket_exists_stops_the_connect(self):
        connection = urls._PinnedConnection(check_url(f"{self.base}/ok", self.policy), WAIT, None)
        connection.abort()
        with self.assertRaises(TimeoutError):
            connection.connect()
        self.assertIsNotNone(connection.sock)
        connection.close()
        self.assertIsNone(connection.sock)


class TestRedirects(FetchCase):
    def test_chain_both_sides_of_the_limit(self):
        limit = urls.DEFAULT_MAX_REDIRECTS
        fetched = fetch(f"{self.base}/chain/{limit}", self.policy)
        self.assertEqual((fetched.final_url, fetched.data, fetched.redirects), (f"{self.base}/chain/0", b"end of chain",
                                                                                limit))
        self.assertEqual(self.server.paths(), [f"/chain/{left}" for left in range(limit, -1, -1)])
        self.server.reset()
        self.fails("URL_TOO_MANY_REDIRECTS", f"{self.base}/chain/{limit + 1}",
                   requests=[f"/chain/{left}" for left in range(limit + 1, 0, -1)])

    def test_no_redirect_allowed(self):
        policy = self.policy_with(max_redirects=0)
        self.assertEqual(fetch(f"{self.base}/chain/0", policy).redirects, 0)
        self.server.reset()
        self.fails("URL_TOO_MANY_REDIRECTS", f"{self.base}/chain/1", policy, requests=["/chain/1"])

    def test_every_redirect_status_is_followed(self):
        for status in sorted(urls.REDIRECT_STATUSES):
            with self.subTest(status):
                self.server.reset()
                fetched = fetch(self.redirect("/ok", status=str(status)), self.policy)
                self.assertEqual((fetched.status, fetched.data, fetched.redirects), (200, b"hello", 1))
                self.assertEqual(self.server.paths(), ["/go", "/ok"])

    def test_relative_locations(self):
        for location in ("/ok", "ok", f"//127.0.0.1:{self.server.port}/ok", "./ok?"):
            with self.subTest(location):
                self.server.reset()
                fetched = fetch(self.redirect(location), self.policy)
                self.assertEqual((fetched.final_url, fetched.data), (f"{self.base}/ok", b"hello"))

    def test_redirects_to_forbidden_names_never_reach_them(self):
        port = self.server.port
        for name in ("private.test", "metadata.test", "loop6.test", "mixed.test"):
            with self.subTest(name):
                self.server.reset()
                resolver = DictResolver()
                self.fails("URL_NAME_REFUSED", self.redirect(f"http://{name}:{port}/ok"), resolver=resolver,
                           at="location", requests=["/go"])
                self.assertEqual(resolver.calls, [name])

    def test_redirects_refused_by_their_location(self):
        port = self.server.port
        cases = (
            (f"http://10.0.0.1:{port}/ok", "URL_ADDRESS_REFUSED"),
            (f"http://[::ffff:127.0.0.1]:{port}/ok", "URL_ADDRESS_REFUSED"),
            ("http://169.254.169.254/latest/meta-data/", "URL_ADDRESS_REFUSED"),
            (f"http://2130706433:{port}/ok", "URL_HOST_NONCANONICAL"),
            ("ftp://127.0.0.1/ok", "URL_SCHEME_REFUSED"),
            (f"https://127.0.0.1:{port}/ok", "URL_SCHEME_REFUSED"),  # not allowed by this policy
            ("file:///etc/passwd", "URL_SCHEME_REFUSED"),
            (f"http://user:pass@127.0.0.1:{port}/ok", "URL_USERINFO"),
            (f"http://user@127.0.0.1:{port}/ok", "URL_USERINFO"),
            ("/o k", "URL_CHARACTER"),
            (f"http://ok.test:{port}/ok", "URL_NO_RESOLVER"),
        )
        for location, code in cases:
            with self.subTest(location):
                self.server.reset()
                self.fails(code, self.redirect(location), at="location", requests=["/go"])

    def test_redirect_without_a_single_location(self):
        self.fails("URL_REDIRECT_INVALID", f"{self.base}/no-location", requests=["/no-location"])
        self.server.reset()
        self.fails("URL_REDIRECT_INVALID", f"{self.base}/two-locations", requests=["/two-locations"])

    def test_a_redirect_to_another_allowed_scheme_is_followed(self):
        # http to https, both allowed: followed, and the TLS handshake with this plain server fails
        policy = self.policy_with(schemes={"http", "https"})
        self.fails("URL_TLS_FAILED", self.redirect(f"https://127.0.0.1:{self.server.port}/ok"), policy,
                   requests=["/go"])


class TestBodies(FetchCase):
    LIMIT = 100

    def setUp(self):
        super().setUp()
        self.policy = self.policy_with(max_response_bytes=self.LIMIT)

    def test_declared_length_both_sides(self):
        self.assertEqual(fetch(f"{self.base}/size/{self.LIMIT}", self.policy).data, b"x" * self.LIMIT)
        self.fails("URL_RESPONSE_TOO_LARGE", f"{self.base}/size/{self.LIMIT + 1}")

    def test_chunked_length_both_sides(self):
        self.assertEqual(fetch(f"{self.base}/chunked/{self.LIMIT}", self.policy).data, b"y" * self.LIMIT)
        self.fails("URL_RESPONSE_TOO_LARGE", f"{self.base}/chunked/{self.LIMIT + 1}")

    def test_zero_limit(self):
        policy = self.policy_with(max_response_bytes=0)
        self.assertEqual(fetch(f"{self.base}/size/0", policy).data, b"")
        self.fails("URL_RESPONSE_TOO_LARGE", f"{self.base}/chunked/1", policy)

    def test_lying_lengths(self):
        self.fails("URL_RESPONSE_TOO_LARGE", f"{self.base}/declares-more-than-the-limit")
        self.assertEqual(fetch(f"{self.base}/declares-less", self.policy).data, b"x" * 5)
        self.fails("URL_RESPONSE_INVALID", f"{self.base}/declares-more-and-closes")

    def test_malformed_headers(self):
        for name in ("two-lengths", "signed-length", "two-types"):
            with self.subTest(name):
                self.fails("URL_RESPONSE_INVALID", f"{self.base}/{name}")

    def test_endless_body_stops_at_the_limit(self):
        self.fails("URL_RESPONSE_TOO_LARGE", f"{self.base}/endless", requests=["/endless"])


class TestDeadlines(FetchCase):
    """A deadline may pass before the server has logged the request: these tests count nothing,
    and have a server of their own, so a late log never lands in another test's count."""

    def test_slow_endless_body_stops_at_the_deadline(self):
        policy = self.policy_with(max_response_bytes=urls.MAX_RESPONSE_BYTES_CEILING, deadline=0.5)
        self.fails("URL_TIMEOUT", f"{self.base}/trickle", policy)

    def test_a_body_read_to_the_close_is_not_whole_when_the_deadline_shut_it(self):
        policy = self.policy_with(max_response_bytes=urls.MAX_RESPONSE_BYTES_CEILING, deadline=0.5)
        self.fails("URL_TIMEOUT", f"{self.base}/trickle-to-close", policy)

    def test_a_body_with_a_length_cut_by_the_deadline_is_a_timeout(self):
        self.fails("URL_TIMEOUT", f"{self.base}/trickle-short-of-length", self.policy_with(deadline=0.5))

    def test_slow_headers_stop_at_the_deadline(self):
        self.fails("URL_TIMEOUT", f"{self.base}/slow-headers", self.policy_with(deadline=0.5))

    def test_a_silent_server_stops_at_the_read_timeout(self):
        error = refused(self, "URL_TIMEOUT", fetch, f"{self.base}/stall", self.policy_with(timeout=0.3))
        self.assertTrue(error.retryable)


class TestIpv6(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        try:
            cls.server = LoopbackServer("::1")
        except OSError:
            raise unittest.SkipTest("no IPv6 loopback here") from None

    @classmethod
    def tearDownClass(cls):
        cls.server.close()

    def setUp(self):
        self.server.reset()
        self.policy = UrlPolicy(schemes={"http"}, allowed_networks=("::1/128",), timeout=WAIT, deadline=WAIT)

    def test_a_bracketed_literal_is_sent_bracketed_in_host(self):
        fetched = fetch(f"http://[0:0::1]:{self.server.port}/ok", self.policy)
        self.assertEqual((fetched.final_url, fetched.address), (f"http://[::1]:{self.server.port}/ok", "::1"))
        self.assertEqual(self.server.requests[0][2]["Host"], f"[::1]:{self.server.port}")

    def test_a_name_answering_ipv6_is_connected_to_its_address(self):
        fetched = fetch(f"http://loop6.test:{self.server.port}/ok", self.policy, DictResolver())
        self.assertEqual((fetched.data, fetched.address), (b"hello", "::1"))
        self.assertEqual(self.server.requests[0][2]["Host"], f"loop6.test:{self.server.port}")

    def test_reopening_ipv6_loopback_reopens_no_ipv4_spelling_of_it(self):
        refused(self, "URL_ADDRESS_REFUSED", fetch, f"http://[::ffff:127.0.0.1]:{self.server.port}/ok", self.policy)
        self.assertEqual(self.server.paths(), [])


class TestTls(FetchCase):
    def test_default_context_refuses_a_server_without_tls(self):
        policy = self.policy_with(schemes={"https"})
        self.fails("URL_TLS_FAILED", f"https://127.0.0.1:{self.server.port}/ok", policy, requests=[])

    def test_the_server_name_is_the_checked_name_and_the_socket_the_checked_address(self):
        seen = []

        class RecordingContext:
            def wrap_socket(self, sock, server_hostname, do_handshake_on_connect):
                seen.append((server_hostname, sock.getpeername()[0], do_handshake_on_connect))
                raise ssl.SSLError("refused by the test")

        policy = self.policy_with(schemes={"https"})
        self.fails("URL_TLS_FAILED", f"https://ok.test:{self.server.port}/ok", policy, DictResolver(),
                   ssl_context=RecordingContext(), requests=[])
        self.assertEqual(seen, [("ok.test", "127.0.0.1", False)])

    def test_a_handshake_that_never_ends_stops_at_the_deadline(self):
        with socket.socket() as silent:  # accepts at the kernel's level, never answers a byte
            silent.bind(("127.0.0.1", 0))
            silent.listen(1)
            policy = self.policy_with(schemes={"https"}, timeout=urls.MAX_DEADLINE, deadline=0.5)
            refused(self, "URL_TIMEOUT", fetch, f"https://127.0.0.1:{silent.getsockname()[1]}/", policy)


if __name__ == "__main__":
    unittest.main()
