"""silica's network proxy for a granted tool: the host rules it checks."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from silica.security.hosts import HostRules, InvalidHostGrant

GRANT_HELP = ('is not a host name: grant a host such as api.example.org, *.example.org, an IP '
              'address, or "*" for every host')


# --- host rules -----------------------------------------------------------------------------

@pytest.mark.parametrize(("grant", "host", "port", "allowed"), [
    ("api.example.org", "api.example.org", 443, True),
    ("api.example.org", "API.Example.ORG.", 80, True),
    ("API.example.org.", "api.example.org", 80, True),
    ("api.example.org", "example.org", 443, False),
    ("api.example.org", "x.api.example.org", 443, False),
    ("*.example.com", "a.example.com", 443, True),
    ("*.example.com", "a.b.example.com", 443, True),
    ("*.example.com", "example.com", 443, False),
    ("*.example.com", "example.com.evil.org", 443, False),
    ("*.example.com", "evilexample.com", 443, False),
    ("127.0.0.1", "127.0.0.1", 9, True),
    ("127.0.0.1", "127.1", 9, False),
    ("127.0.0.1", "2130706433", 9, False),
    ("127.0.0.1", "localhost", 9, False),
    ("localhost", "127.0.0.1", 9, False),
    ("[::1]", "::1", 9, True),
    ("::1", "[0:0::1]", 9, True),
    ("[::1]", "127.0.0.1", 9, False),
    ("127.0.0.1:8080", "127.0.0.1", 8080, True),
    ("127.0.0.1:8080", "127.0.0.1", 8081, False),
    ("[::1]:8080", "[::1]", 8080, True),
    ("api.example.org:443", "api.example.org", 80, False),
    ("*", "anything.example", 1, True),
    ("*", "10.0.0.1", 65535, True),
    ("*:443", "anything.example", 80, False),
    ("bücher.example", "xn--bcher-kva.example", 443, True),
    ("*", "not a host", 80, False),
])
def test_host_rules(grant, host, port, allowed):
    assert HostRules.parse([grant]).allows(host, port) is allowed


@pytest.mark.parametrize("grant", [
    "http://api.example.org/", "api.example.org/v1", "user@api.example.org", "api example.org",
    "", "*.", "a.*.example.org", "*example.org", "127.1", "0x7f000001", "*.10.0.0.1", "*.[::1]",
    "api.example.org:0", "api.example.org:65536", "api.example.org:https", "[::1]:", "fe80::1%eth0",
    "a..example.org", "-a.example.org", "x" * 64 + ".example.org",
])
def test_a_grant_that_is_not_a_host_is_refused_with_what_to_grant(grant):
    with pytest.raises(InvalidHostGrant) as refused:
        HostRules.parse(["api.example.org", grant])
    assert str(refused.value) == f"{grant!r} {GRANT_HELP}"


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(st.text(max_size=40), st.text("*.[]:0123456789abcdefx-_/@ü",
                                                        max_size=30))),
       st.text(max_size=40), st.integers(1, 65535))
def test_parsing_grants_raises_only_invalid_host_grant(grants, host, port):
    try:
        rules = HostRules.parse(grants)
    except InvalidHostGrant:
        return
    rules.allows(host, port)
    # a rule written back reads as the same rule
    assert HostRules.parse(str(rule) for rule in rules.rules) == rules
