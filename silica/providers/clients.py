"""What the bundled providers share to start fast: one TLS context, one SDK client per
provider per process, and the SDK imported ahead of the first request.

    client = shared(("anthropic", environment("ANTHROPIC_"), ...), make)   # made once
    thread = warm_up(provider)        # the SDK's import, in a thread, while tools are found

- ``tls()`` is the process's one TLS context (``SSL_CERT_FILE`` and ``SSL_CERT_DIR``
  honoured): loading the certificates is most of what an HTTP client costs to make.
- ``per_loop(cls, **options)`` is one ``httpx2.AsyncClient`` that sends through an inner
  client (a ``cls``) per running event loop, since pooled connections belong to the loop that
  opened them and ``silica chat`` runs each turn in a loop of its own. Its ``aclose()`` closes
  the inner client of the running loop once no response of that loop is open (so a request
  that ends never cuts another one of the same loop short, as in ``silica serve``); the
  client itself stays usable, and the next request opens a new inner client. The inner
  client of a loop that has ended is dropped.
- ``shared(key, make)`` is the process's client for ``key`` (the provider, what its SDK
  reads from the environment, its retry, timeout and size bounds), made once by ``make``.
- ``warm_up(provider)`` runs ``provider.warm()`` in a daemon thread: the SDK's import
  overlaps whatever the caller does next, and the process never waits for it at exit.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import importlib
import os
import threading
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import ssl

    import httpx2

T = TypeVar("T")
MAX_CLIENTS = 16  # clients kept (a test suite points the SDKs at many local servers)

_CLIENTS: collections.OrderedDict[Hashable, Any] = collections.OrderedDict()
_LOCK = threading.Lock()


@functools.cache
def tls() -> ssl.SSLContext:
    """The process's one TLS context (``SSL_CERT_FILE`` and ``SSL_CERT_DIR`` honoured)."""
    import httpx2

    return httpx2.create_ssl_context()


def environment(*prefixes: str) -> tuple[tuple[str, str], ...]:
    """The environment variables starting with ``prefixes`` (what an SDK reads when its
    client is made), for a ``shared`` key: a changed key or address gets a new client."""
    return tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith(prefixes)))


def shared(key: Hashable, make: Callable[[], T]) -> T:
    """The process's client for ``key``, made by ``make`` the first time (thread-safe; the
    ``MAX_CLIENTS`` most recently used are kept)."""
    with _LOCK:
        if key in _CLIENTS:
            _CLIENTS.move_to_end(key)
            return _CLIENTS[key]
    client = make()  # outside the lock: making one may import an SDK
    with _LOCK:
        client = _CLIENTS.setdefault(key, client)
        _CLIENTS.move_to_end(key)
        while len(_CLIENTS) > MAX_CLIENTS:
            _CLIENTS.popitem(last=False)
        return client


def per_loop(cls: Callable[..., httpx2.AsyncClient] | None = None,
             **options: Any) -> httpx2.AsyncClient:
    """An ``httpx2.AsyncClient`` that sends through one ``cls(**options)`` per running event
    loop (see the module docstring); ``verify`` defaults to ``tls()``."""
    import httpx2

    options.setdefault("verify", tls())
    make = cls or httpx2.AsyncClient

    class LoopClient(httpx2.AsyncClient):
        def __init__(self) -> None:
            super().__init__(**options)
            self.inner: dict[asyncio.AbstractEventLoop, httpx2.AsyncClient] = {}
            self.open: dict[asyncio.AbstractEventLoop, int] = {}  # responses not closed
            self.closing: set[asyncio.AbstractEventLoop] = set()

        async def send(self, request: httpx2.Request, **kwargs: Any) -> httpx2.Response:
            loop = asyncio.get_running_loop()
            for gone in [old for old in self.inner if old.is_closed()]:
                self._forget(gone)  # its connections cannot be used (nor closed) any more
            client = self.inner.get(loop)
            if client is None or client.is_closed:
                client = self.inner[loop] = make(**options)
            self.open[loop] = self.open.get(loop, 0) + 1
            try:
                response = await client.send(request, **kwargs)
            except BaseException:
                await self._done(loop)
                raise
            if not kwargs.get("stream"):
                await self._done(loop)  # read whole: nothing left open
                return response
            close, closed = response.aclose, False

            async def aclose() -> None:
                nonlocal closed
                try:
                    await close()
                finally:
                    if not closed:
                        closed = True
                        await self._done(loop)

            response.aclose = aclose  # this response only
            return response

        async def aclose(self) -> None:
            loop = asyncio.get_running_loop()
            if self.open.get(loop):
                self.closing.add(loop)  # closed when its last response is
            else:
                await self._close(loop)

        async def _done(self, loop: asyncio.AbstractEventLoop) -> None:
            self.open[loop] = max(0, self.open.get(loop, 0) - 1)
            if not self.open[loop] and loop in self.closing:
                await self._close(loop)

        async def _close(self, loop: asyncio.AbstractEventLoop) -> None:
            self.closing.discard(loop)
            client = self.inner.pop(loop, None)
            if client is not None:
                await client.aclose()

        def _forget(self, loop: asyncio.AbstractEventLoop) -> None:
            self.inner.pop(loop, None)
            self.open.pop(loop, None)
            self.closing.discard(loop)

    return LoopClient()


def import_sdk(*modules: str) -> None:
    """Import ``modules`` (an SDK) and build the TLS context: what a provider's first
    request needs. What fails here fails again, with its message, on the first request."""
    with contextlib.suppress(Exception):
        tls()  # first: loading certificates lets the other thread run meanwhile
        for name in modules:
            importlib.import_module(name)


def warm_up(provider: Any) -> threading.Thread | None:
    """Run ``provider.warm()`` (if it has one) in a daemon thread; the thread, or None."""
    warm = getattr(provider, "warm", None)
    if not callable(warm):
        return None

    def run() -> None:
        with contextlib.suppress(Exception):  # the first request says what went wrong
            warm()

    thread = threading.Thread(target=run, name="silica-warm-up", daemon=True)
    thread.start()
    return thread
