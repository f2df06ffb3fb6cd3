"""The head of one request to silica's network proxy: what the client asks to reach, and the
head to send there.

Two forms are read (HTTP/1.0 or 1.1):

- ``CONNECT host:port HTTP/1.1``: a tunnel (HTTPS, or any TCP protocol).
- ``METHOD http://host[:port]/path HTTP/1.1`` (absolute form, plain HTTP): the head sent on is
  the same request in origin form (``METHOD /path HTTP/1.1``) with ``Host`` set from the URL,
  every ``Proxy-*``, ``Connection``, ``Keep-Alive`` and ``Upgrade`` header left out, and
  ``Connection: close`` added, so one connection carries one request.

Anything else (origin form, ``https://`` URLs, bytes that are not HTTP, a bad host or port)
raises ``BadRequest``; ``parse_head`` raises nothing else for any ``bytes``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from silica.security.hosts import canonical_host, format_host, split_host_port

_TOKEN = rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_REQUEST_LINE = re.compile(rb"(" + _TOKEN + rb") ([!-~]+) HTTP/1\.[01]")
_HEADER = re.compile(rb"(" + _TOKEN + rb"):[ \t]*([\t\x20-\x7e\x80-\xff]*?)[ \t]*")
# A byte no request line holds (a request line is visible ASCII, spaces and its CR LF).
_NOT_LINE = re.compile(rb"[^\x20-\x7e\r]")
_HEAD_END = re.compile(rb"\r?\n\r?\n")
_LINE_END = re.compile(rb"\r?\n")
_HOP_BY_HOP = frozenset((b"connection", b"keep-alive", b"upgrade", b"host"))


class BadRequest(ValueError):
    """The head is not a proxy request silica serves; ``str()`` says why, in one line."""


@dataclass(frozen=True)
class ProxyRequest:
    """``host`` in canonical form (``silica.security.hosts.canonical_host``); ``forward`` is
    the head to send to the host (empty for CONNECT)."""

    host: str
    port: int
    tunnel: bool
    forward: bytes = b""

    @property
    def target(self) -> str:
        return f"{format_host(self.host)}:{self.port}"


class HeadScanner:
    """Finds where a request head ends in bytes that arrive in pieces, in time linear in
    their length (a client sending one byte at a time costs no more than one sending all)."""

    def __init__(self) -> None:
        self.data = bytearray()
        self._line_done = False

    def feed(self, chunk: bytes) -> int:
        """Add ``chunk``; return where the head ends in ``data`` (the first byte after its
        blank line), or -1 while it has not ended. Raises ``BadRequest`` as soon as the first
        line cannot be a request line, so a client speaking another protocol is answered at
        once rather than after a timeout."""
        start = len(self.data)
        self.data += chunk
        if not self._line_done:
            newline = self.data.find(b"\n", start)
            if _NOT_LINE.search(self.data, start, len(self.data) if newline == -1 else newline):
                raise BadRequest("this is not an HTTP request")
            if newline != -1:
                self._line_done = True
                line_end = newline - 1 if self.data[newline - 1:newline] == b"\r" else newline
                if not _REQUEST_LINE.fullmatch(self.data, 0, line_end):
                    raise BadRequest("this is not an HTTP request")
        end = _HEAD_END.search(self.data, max(0, start - 3))
        return end.end() if end else -1


def parse_head(head: bytes) -> ProxyRequest:
    """The request in ``head`` (its bytes up to and including the blank line)."""
    lines = _LINE_END.split(head.rstrip(b"\r\n"))
    request = _REQUEST_LINE.fullmatch(lines[0])
    if request is None:
        raise BadRequest("this is not an HTTP request")
    method, target = request.group(1), request.group(2).decode("ascii")
    headers = []
    for line in lines[1:]:
        header = _HEADER.fullmatch(line)
        if header is None:
            raise BadRequest("a header line is malformed")
        headers.append((header.group(1), header.group(2)))
    if method == b"CONNECT":
        host, port = _authority(target, default_port=None)
        return ProxyRequest(host, port, tunnel=True)
    scheme, sep, rest = target.partition("://")
    if not sep or scheme.lower() != "http":
        if scheme.lower() == "https" and sep:
            raise BadRequest("https:// URLs go through CONNECT")
        raise BadRequest("ask with an absolute http:// URL or CONNECT (this is a proxy)")
    cut = min((i for i in (rest.find("/"), rest.find("?")) if i != -1), default=len(rest))
    authority, path = rest[:cut], rest[cut:]
    host, port = _authority(authority, default_port=80)
    path = "/" + path if not path.startswith("/") else path
    out = [method + b" " + path.encode("ascii") + b" " + lines[0].rsplit(b" ", 1)[1],
           b"Host: " + authority.encode("ascii")]
    out += [name + b": " + value for name, value in headers
            if not _hop_by_hop(name.lower())]
    out.append(b"Connection: close")
    return ProxyRequest(host, port, tunnel=False, forward=b"\r\n".join(out) + b"\r\n\r\n")


def _hop_by_hop(name: bytes) -> bool:
    return name in _HOP_BY_HOP or name.startswith(b"proxy-")


def _authority(text: str, default_port: int | None) -> tuple[str, int]:
    if "@" in text:
        raise BadRequest("user information in the URL is not accepted")
    host, port = split_host_port(text)
    if host.startswith("[") != host.endswith("]") or (":" in host and not host.startswith("[")):
        raise BadRequest(f"{text!r} is not host:port")
    if port is None:
        port = default_port
    if port is None or port == -1:
        raise BadRequest(f"{text!r} is not host:port")
    canonical = canonical_host(host)
    if canonical is None:
        raise BadRequest(f"{text!r} does not name a host")
    return canonical, port
