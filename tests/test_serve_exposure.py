"""serve's rule that an address other machines reach needs a token holds in ``silica.serve``
itself: a program embedding the daemon gets it, not only ``silica serve``."""

from __future__ import annotations

import socket

import pytest

from silica.config import Settings
from silica.serve.app import create_app
from silica.serve.daemon import serve
from silica.serve.options import ExposedWithoutToken, ServeOptions


def options(home, host: str, token: str | None) -> ServeOptions:
    return ServeOptions.make(Settings(), home=home, cwd=home.parent, host=host, token=token)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.20"])
def test_create_app_refuses_a_reachable_address_without_a_token(home, host):
    with pytest.raises(ExposedWithoutToken, match="needs a token"):
        create_app(options(home, host, None))


def test_the_daemon_entry_point_refuses_before_it_listens(home):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started: list[str] = []
    with pytest.raises(ExposedWithoutToken):
        serve(options(home, "0.0.0.0", None), host="0.0.0.0", port=port,
              on_start=started.append)
    assert started == []
    with socket.socket() as again:  # nothing was left listening on the port
        again.bind(("0.0.0.0", port))


@pytest.mark.parametrize(("host", "token"), [("0.0.0.0", "a-long-random-token-1234"),
                                             ("127.0.0.1", None), ("localhost", None)])
def test_a_token_or_a_loopback_address_is_enough(home, host, token):
    assert create_app(options(home, host, token)).options.token == token
