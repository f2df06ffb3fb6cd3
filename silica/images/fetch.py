"""Fetch an image a person named by URL, without letting the URL reach what it should not.

    fetched = await fetch_image(url, max_bytes=10 * 2**20, timeout=15.0, allow_private=False)
    fetched.data, fetched.mime, fetched.name

A URL from outside is a request silica makes on the sender's behalf, from inside the
network silica runs in. So, before any connection:

- only ``http`` and ``https``, with no user name or password in the URL;
- the host is resolved once and every address it resolves to is checked: loopback, private,
  link-local (the cloud metadata address 169.254.169.254), carrier-grade NAT, multicast,
  reserved, unspecified and documentation addresses are refused, and so are IPv6 forms that
  carry one of those (IPv4-mapped ``::ffff:127.0.0.1``, IPv4-compatible, NAT64, 6to4,
  Teredo), unless ``allow_private`` (``[serve] fetch_private``);
- the connection goes to an address that was checked, never through a second lookup a DNS
  server could answer differently (TLS still verifies the certificate for the host name);
- no proxy from the environment is used: it would connect to an address unchecked.

Then: at most ``MAX_REDIRECTS`` redirects, each target checked as above; a reply that is not
200 or whose ``Content-Type`` is not ``image/*`` is refused; the body is read as it arrives
and refused as soon as it passes ``max_bytes``; everything, redirects included, shares one
``timeout``. Every failure is a ``FetchError`` naming the URL (made safe to print) and saying
what to do. The bytes are not checked as an image here (``silica.images.intake`` does that).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal
from urllib.parse import unquote

import httpcore2
import httpx2

from silica import __version__
from silica.errors import SilicaError
from silica.images.intake import display_name
from silica.images.sniff import normalize_media_type
from silica.security.text import safe_text
from silica.security.urls import mask_urls

MAX_REDIRECTS = 5
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_SHOWN_URL = 200  # characters of a URL shown in a message

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], Awaitable[Sequence[str]]]
"""``resolve(host, port)`` -> the addresses ``host`` resolves to (strings), in order."""

_NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
_COMPATIBLE = ipaddress.ip_network("::/96")


@dataclass(frozen=True)
class Fetched:
    """An image's bytes as a server sent them, unchecked: ``mime`` is its ``Content-Type``
    (lower-case, no parameters), ``name`` the last segment of the URL's path (or its host),
    ``url`` where it was finally fetched from (after redirects)."""

    data: bytes
    mime: str
    name: str
    url: str = ""


class FetchError(SilicaError):
    """An image URL could not be fetched. ``str(err)`` names the URL and says what to do.

    ``reason``: ``refused`` (the URL or its address is not allowed, or the reply is no
    image), ``too_large`` (over ``max_bytes``) or ``failed`` (the network, the server or
    the time limit).
    """

    def __init__(self, message: str, *,
                 reason: Literal["refused", "too_large", "failed"] = "failed") -> None:
        super().__init__(message)
        self.reason = reason


def shown_url(url: str) -> str:
    """``url`` as messages show it: safe for a terminal, at most ``_SHOWN_URL`` long."""
    text = safe_text(mask_urls(str(url)))
    return text if len(text) <= _SHOWN_URL else text[: _SHOWN_URL - 1] + "…"


def address_refusal(address: str | IPAddress,
                    allow_private: bool | Iterable[Network] = False) -> str | None:
    """Why connecting to ``address`` is refused (``"a loopback address"``), or ``None``.

    ``allow_private``: ``True`` allows every address; a collection of networks allows the
    addresses in them (and nothing else that is not public); ``False`` allows only public
    addresses. An IPv6 address that embeds an IPv4 one is refused if either is.
    """
    if allow_private is True:
        return None
    ip = ipaddress.ip_address(str(address).split("%", 1)[0]) if isinstance(address, str) \
        else address
    allowed = () if allow_private is False else tuple(allow_private)
    for candidate in (*_embedded(ip), ip):  # what it carries first: the clearer reason
        if any(candidate.version == net.version and candidate in net for net in allowed):
            continue
        kind = _kind(candidate)
        if kind:
            return kind if candidate is ip else f"an IPv6 form of {candidate}, {kind}"
    return None


def _kind(ip: IPAddress) -> str | None:
    checks = (("is_unspecified", "an unspecified address"), ("is_loopback", "a loopback address"),
              ("is_link_local", "a link-local address"), ("is_multicast", "a multicast address"),
              ("is_reserved", "a reserved address"), ("is_private", "a private address"))
    for attribute, kind in checks:
        if getattr(ip, attribute):
            return kind
    return None if ip.is_global else "a non-public address"


def _embedded(ip: IPAddress) -> list[ipaddress.IPv4Address]:
    """IPv4 addresses an IPv6 address carries (mapped, compatible, NAT64, 6to4, Teredo)."""
    if ip.version != 6:
        return []
    assert isinstance(ip, ipaddress.IPv6Address)
    found = []
    if ip.ipv4_mapped is not None:
        found.append(ip.ipv4_mapped)
    if (ip in _COMPATIBLE and int(ip) > 1) or any(ip in net for net in _NAT64):
        found.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    if ip.sixtofour is not None:
        found.append(ip.sixtofour)
    if ip.teredo is not None:
        found.extend(ip.teredo)
    return found


async def system_resolve(host: str, port: int) -> list[str]:
    """The addresses the system resolver gives for ``host``, in its order, without repeats."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]).split("%", 1)[0] for info in infos))


class _Pinned(httpcore2.AsyncNetworkBackend):
    """Connects to the checked ``addresses`` in order, whatever host name it is asked for
    (the host name still goes into the Host header and the TLS handshake)."""

    def __init__(self, addresses: Sequence[str]) -> None:
        self.addresses = addresses
        self.inner = httpcore2.AnyIOBackend()

    async def connect_tcp(self, host, port, timeout=None, local_address=None,
                          socket_options=None):  # type: ignore[no-untyped-def]
        last: Exception | None = None
        for address in self.addresses:
            try:
                return await self.inner.connect_tcp(address, port, timeout=timeout,
                                                    local_address=local_address,
                                                    socket_options=socket_options)
            except (httpcore2.ConnectError, httpcore2.ConnectTimeout, OSError) as exc:
                last = exc
        raise httpcore2.ConnectError(str(last) if last else "no address to connect to")

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


async def fetch_image(
    url: str,
    *,
    max_bytes: int,
    timeout: float,
    allow_private: bool | Iterable[Network] = False,
    resolve: Resolver | None = None,
) -> Fetched:
    """The bytes at ``url`` if it is an allowed http(s) image URL (see the module
    docstring), else ``FetchError``.

    ``max_bytes``: most bytes of the body (``[images] max_size_bytes``); ``timeout``: seconds
    for everything, redirects included (``[serve] fetch_timeout``); ``allow_private``: see
    ``address_refusal`` (``[serve] fetch_private``); ``resolve``: the resolver to use (the
    system's by default), called once per host.
    """
    resolve = resolve or system_resolve
    allowed = allow_private if isinstance(allow_private, bool) else tuple(allow_private)
    try:
        async with asyncio.timeout(timeout):
            return await _follow(str(url), max_bytes, allowed, resolve)
    except TimeoutError:
        raise FetchError(
            f"fetching {shown_url(url)} took longer than {timeout:g} s, the time limit "
            "([serve] fetch_timeout); try a faster server, or download the image and send "
            "the file") from None


async def _follow(url: str, max_bytes: int, allowed: bool | tuple[Network, ...],
                  resolve: Resolver) -> Fetched:
    first = url
    context = _tls()
    for hop in range(MAX_REDIRECTS + 1):
        target = _parse(url, first if hop else None)
        addresses = await _addresses(target, url, first if hop else None, allowed, resolve)
        pool = httpcore2.AsyncConnectionPool(ssl_context=context, max_connections=1,
                                             network_backend=_Pinned(addresses))
        async with pool:
            try:
                request = str(target.copy_with(fragment=None))
                async with pool.stream("GET", request, headers=_headers()) as reply:
                    if reply.status in _REDIRECTS:
                        location = _header(reply, b"location")
                        if not location:
                            raise FetchError(f"{shown_url(url)} answered HTTP {reply.status} "
                                             "without saying where to; check the URL")
                        url = str(target.join(location))
                        continue
                    return await _body(reply, url, max_bytes)
            except FetchError:
                raise
            except (httpcore2.TimeoutException, httpcore2.NetworkError,
                    httpcore2.ProtocolError, httpcore2.UnsupportedProtocol, ssl.SSLError,
                    OSError) as exc:
                raise FetchError(
                    f"could not fetch {shown_url(url)}: {safe_text(str(exc) or type(exc).__name__)}"
                    "; check that the URL works in a browser, or download the image and send "
                    "the file") from None
    raise FetchError(
        f"{shown_url(first)} redirected more than {MAX_REDIRECTS} times; give the image's "
        "final URL", reason="refused")


def _parse(url: str, first: str | None) -> httpx2.URL:
    via = f" (redirected from {shown_url(first)})" if first else ""
    try:
        target = httpx2.URL(url)
    except (httpx2.InvalidURL, TypeError, ValueError) as exc:
        raise FetchError(f"{shown_url(url)}{via} is not a valid URL ({safe_text(str(exc))})",
                         reason="refused") from None
    if target.scheme not in ("http", "https"):
        raise FetchError(
            f"{shown_url(url)}{via} is not an http or https URL; only those are fetched. "
            "Give an http(s) address of the image, or send the file", reason="refused")
    if target.userinfo:
        raise FetchError(f"{shown_url(url)}{via} holds a user name or password; silica does "
                         "not send credentials: give a URL without them", reason="refused")
    if not target.host:
        raise FetchError(f"{shown_url(url)}{via} names no host", reason="refused")
    if target.port is not None and not 0 < target.port < 65536:
        raise FetchError(f"{shown_url(url)}{via} names port {target.port}, which does not "
                         "exist", reason="refused")
    return target


async def _addresses(target: httpx2.URL, url: str, first: str | None,
                     allowed: bool | tuple[Network, ...], resolve: Resolver) -> list[str]:
    """The checked addresses to connect to for ``target``, or ``FetchError``."""
    host = target.host
    port = target.port or (443 if target.scheme == "https" else 80)
    via = f" (redirected from {shown_url(first)})" if first else ""
    literal = True
    try:
        addresses = [str(ipaddress.ip_address(host))]
    except ValueError:
        literal = False
        try:
            addresses = [str(a) for a in await resolve(target.raw_host.decode("ascii"), port)]
        except (OSError, UnicodeError) as exc:
            raise FetchError(
                f"could not resolve the host of {shown_url(url)}{via} "
                f"({safe_text(str(exc))}); check the URL") from None
    if not addresses:
        raise FetchError(f"the host of {shown_url(url)}{via} has no address; check the URL")
    for address in addresses:
        try:
            refusal = address_refusal(address, allowed)
        except ValueError:
            refusal = "not an IP address"
        if refusal:
            where = f"{safe_text(host)} is" if literal else \
                f"its host {safe_text(host)} resolves to {address},"
            raise FetchError(
                f"{shown_url(url)}{via} was refused: {where} {refusal}. silica fetches "
                "images only from public addresses unless "
                "[serve] fetch_private = true in config.toml", reason="refused")
    return addresses


async def _body(reply: httpcore2.Response, url: str, max_bytes: int) -> Fetched:
    if reply.status != 200:
        raise FetchError(f"{shown_url(url)} answered HTTP {reply.status}, not an image; "
                         "check the URL")
    raw_type = _header(reply, b"content-type")
    mime = normalize_media_type(raw_type) or ""
    if not mime.startswith("image/"):
        what = safe_text(mime) if mime else "no content type"
        raise FetchError(f"{shown_url(url)} is {what}, not an image (image/*); give the "
                         "URL of the image itself", reason="refused")
    encoding = (_header(reply, b"content-encoding") or "identity").strip().lower()
    if encoding != "identity":
        raise FetchError(f"{shown_url(url)} was sent compressed ({safe_text(encoding)}); "
                         "silica takes images as they are: download it and send the file",
                         reason="refused")
    too_large = FetchError(
        f"{shown_url(url)} is over the limit of {max_bytes:,} bytes per image ([images] "
        "max_size_bytes); give a smaller image", reason="too_large")
    declared = _header(reply, b"content-length")
    if declared and declared.strip().isdigit() and int(declared) > max_bytes:
        raise too_large
    data = bytearray()
    async for chunk in reply.aiter_stream():
        if len(data) + len(chunk) > max_bytes:
            raise too_large
        data += chunk
    return Fetched(bytes(data), mime, _name(url), url)


def _name(url: str) -> str:
    target = httpx2.URL(url)
    segment = unquote(target.path.rstrip("/").rsplit("/", 1)[-1])
    return display_name(segment, fallback=target.host or "image")


def _header(reply: httpcore2.Response, name: bytes) -> str | None:
    for key, value in reply.headers:
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def _headers() -> list[tuple[bytes, bytes]]:
    return [(b"User-Agent", f"silica/{__version__}".encode()),
            (b"Accept", b"image/*"), (b"Accept-Encoding", b"identity")]


def _tls() -> ssl.SSLContext:
    return httpx2.create_ssl_context()

