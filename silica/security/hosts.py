"""Which hosts a tool may reach: the user's network grants, as rules the proxy checks.

The user grants hosts per tool in config.toml; a grant is a list of these forms:

    [tools.network_grant]
    weather = ["api.example.org"]       # this host name, any port
    maps = ["*.example.com"]            # any subdomain of example.com (not example.com itself)
    local = ["127.0.0.1:8080", "[::1]"] # an IP address (IPv6 in brackets or bare), one port
    anything = ["*"]                    # every host

    rules = HostRules.parse(["api.example.org", "*.example.com:443"])
    rules.allows("API.Example.org.", 80)    # True: case and a trailing dot do not matter

What a caller may rely on:

- Names are compared in their ASCII form (an internationalised name is granted and asked for
  as its ``xn--`` form), lower case, without a trailing dot.
- The check is on the host the client names. A granted name is allowed whatever address it
  resolves to (the user granted the name); an address is allowed only when that address (or
  ``"*"``) is granted, never because some granted name resolves to it.
- A name whose last label is a number (``127.1``, ``0x7f000001``) is neither a name nor an
  address here: resolvers read such text as an IPv4 address, so it is refused.
- ``HostRules.parse`` raises ``InvalidHostGrant`` (and nothing else) for anything that is
  not one of the forms above; ``canonical_host`` and ``allows`` never raise for a ``str``.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass

from silica.errors import SilicaError

ANY = "*"

_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")
_NUMBER = re.compile(r"[0-9]+|0x[0-9a-f]*")  # what resolvers read as (part of) an IPv4 address
_PORT = re.compile(r"[0-9]{1,5}")
_MAX_NAME = 253


class InvalidHostGrant(SilicaError):
    """A network grant in config.toml is not a host, an address or ``"*"``."""

    def __init__(self, grant: object) -> None:
        super().__init__(f"{grant!r} is not a host name: grant a host such as api.example.org, "
                         '*.example.org, an IP address, or "*" for every host')


def canonical_host(host: str) -> str | None:
    """The form ``host`` is compared in: an address in its shortest form (IPv6 without
    brackets), or a name in lower-case ASCII without a trailing dot. ``None`` when ``host``
    is neither (a URL, a path, an empty label, a name ending in a number, ...)."""
    if host.startswith("[") and host.endswith("]"):
        return _ipv6(host[1:-1])
    if ":" in host:
        return _ipv6(host)
    if host.endswith("."):
        host = host[:-1]
    if not host.isascii():
        ascii_host = _to_ascii(host)
        if ascii_host is None:
            return None
        host = ascii_host
    host = host.lower()
    try:
        return str(ipaddress.IPv4Address(host))
    except ValueError:
        pass
    labels = host.split(".")
    if (len(host) > _MAX_NAME or not all(_LABEL.fullmatch(label) for label in labels)
            or _NUMBER.fullmatch(labels[-1])):
        return None
    return host


def format_host(host: str) -> str:
    """``host`` (canonical) as written before a port: IPv6 addresses in brackets."""
    return f"[{host}]" if ":" in host else host


def _ipv6(text: str) -> str | None:
    try:
        address = ipaddress.IPv6Address(text)
    except ValueError:
        return None
    return None if address.scope_id else address.compressed


def _to_ascii(name: str) -> str | None:
    import idna

    try:
        return idna.encode(name, uts46=True).decode("ascii")
    except (UnicodeError, ValueError):
        return None


@dataclass(frozen=True)
class HostRule:
    """One grant: ``host`` is ``"*"`` (every host), a canonical name or address, or with
    ``subdomains`` a name whose subdomains (only) are granted; ``port`` None is every port."""

    host: str
    port: int | None = None
    subdomains: bool = False

    def allows(self, host: str, port: int) -> bool:
        if self.port is not None and port != self.port:
            return False
        if self.host == ANY:
            return True
        if self.subdomains:
            return host.endswith("." + self.host)
        return host == self.host

    def __str__(self) -> str:
        text = ("*." if self.subdomains else "") + format_host(self.host)
        if self.port is None:
            return text
        return f"{text}:{self.port}"


@dataclass(frozen=True)
class HostRules:
    """The hosts one tool may reach (see the module docstring). Empty: none."""

    rules: tuple[HostRule, ...] = ()

    @classmethod
    def parse(cls, grants: Iterable[object]) -> HostRules:
        """The rules of a tool's grants; ``InvalidHostGrant`` names the first bad one."""
        return cls(tuple(_parse_rule(grant) for grant in grants))

    def allows(self, host: str, port: int) -> bool:
        """Whether a client may reach ``host`` (a name or an address, IPv6 with or without
        brackets) on ``port``."""
        canonical = canonical_host(host)
        if canonical is None:
            return False
        return any(rule.allows(canonical, port) for rule in self.rules)

    def __bool__(self) -> bool:
        return bool(self.rules)

    def __str__(self) -> str:
        return ", ".join(str(rule) for rule in self.rules)


def _parse_rule(grant: object) -> HostRule:
    if not isinstance(grant, str):
        raise InvalidHostGrant(grant)
    host, port = split_host_port(grant)
    if port == -1:
        raise InvalidHostGrant(grant)
    subdomains = host.startswith("*.")
    if host == ANY:
        return HostRule(ANY, port)
    canonical = canonical_host(host[2:] if subdomains else host)
    if canonical is None or (subdomains and is_address(canonical)):
        raise InvalidHostGrant(grant)
    return HostRule(canonical, port, subdomains)


def split_host_port(text: str) -> tuple[str, int | None]:
    """``host:port`` as ``(host, port)``: ``None`` without a port, ``-1`` for a port that is
    not a number from 1 to 65535. IPv6 takes a port only in brackets (``[::1]:8080``)."""
    if text.startswith("["):
        end = text.find("]")
        if end == -1 or end == len(text) - 1:
            return text, None
        host, rest = text[:end + 1], text[end + 1:]
        return (host, _port(rest[1:])) if rest.startswith(":") else (text, -1)
    if text.count(":") != 1:
        return text, None
    host, _, port = text.partition(":")
    return host, _port(port)


def _port(text: str) -> int:
    if not _PORT.fullmatch(text):
        return -1
    port = int(text)
    return port if 0 < port < 65536 else -1


def is_address(host: str) -> bool:
    """Whether ``host`` (canonical) is an IP address rather than a name."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
