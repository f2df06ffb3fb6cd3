"""What the bundled providers share to start fast: one TLS context, one SDK client per
provider per process, and the SDK imported ahead of the first request.

    client = shared(("anthropic", environment("ANTHROPIC_"), ...), make)   # made once
    thread = warm_up(provider)        # the SDK's import, in a thread, while tools are found

- ``tls()`` is the process's one TLS context (``SSL_CERT_FILE`` and ``SSL_CERT_DIR``
  honoured): loading the certificates is most of what an HTTP client costs to make.
- ``shared(key, make)`` is the process's client for ``key`` (the provider, what its SDK
  reads from the environment, its retry, timeout and size bounds), made once by ``make``
  and reused by every request and turn: ``silica chat`` runs its whole session in one
  event loop, and ``silica serve`` all its sessions. ``close_all()`` closes them before
  the loop ends.
- ``warm_up(provider)`` runs ``provider.warm()`` in a daemon thread: the SDK's import
  overlaps whatever the caller does next. A process that ends before the import does
  (a refused image, a bad flag) waits for it at exit: an import cut off by the
  interpreter's shutdown, inside an extension module, crashes the process instead of
  letting it exit with its own status.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import contextlib
import functools
import importlib
import inspect
import os
import threading
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any, TypeVar, cast

if TYPE_CHECKING:
    import ssl

T = TypeVar("T")
MAX_CLIENTS = 16  # clients kept (a test suite points the SDKs at many local servers)

_CLIENTS: collections.OrderedDict[Hashable, tuple[asyncio.AbstractEventLoop | None, Any]] = \
    collections.OrderedDict()
_LOCK = threading.Lock()
_WARMING: set[threading.Thread] = set()
WARM_UP_EXIT_WAIT = 30.0  # seconds a process at exit waits for an unfinished warm-up


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
    ``MAX_CLIENTS`` most recently used are kept). A client belongs to the event loop it is
    asked for on, since its pooled connections do: a program that runs loops one after
    another (or one in a thread of its own, as ``anthropic_files`` may) gets one for each,
    and the clients of a loop that has ended are dropped."""
    loop = _running_loop()
    with _LOCK:
        for gone in [k for k, (owner, _) in _CLIENTS.items() if owner and owner.is_closed()]:
            del _CLIENTS[gone]
        if (key, loop) in _CLIENTS:
            _CLIENTS.move_to_end((key, loop))
            return cast(T, _CLIENTS[key, loop][1])
    client = make()  # outside the lock: making one may import an SDK
    with _LOCK:
        client = cast(T, _CLIENTS.setdefault((key, loop), (loop, client))[1])
        _CLIENTS.move_to_end((key, loop))
        while len(_CLIENTS) > MAX_CLIENTS:
            _CLIENTS.popitem(last=False)
        return client


async def close_all() -> None:
    """Close the clients that belong to the running loop and forget them: what a program
    does before its loop ends (``silica ask`` and ``chat`` do), so no connection is left to
    be closed by the garbage collector after the loop is gone."""
    loop = asyncio.get_running_loop()
    with _LOCK:
        mine = [key for key, (owner, _) in _CLIENTS.items() if owner is loop]
        clients = [_CLIENTS.pop(key)[1] for key in mine]
    for client in clients:
        aio = getattr(client, "aio", None)  # google-genai's async half closes apart
        for close in (getattr(aio, "aclose", None), getattr(client, "close", None)):
            with contextlib.suppress(Exception):  # a broken connection: nothing to close
                result = close() if close is not None else None
                if inspect.isawaitable(result):
                    await result


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


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
        try:
            with contextlib.suppress(Exception):  # the first request says what went wrong
                warm()
        finally:
            with _LOCK:
                _WARMING.discard(threading.current_thread())

    thread = threading.Thread(target=run, name="silica-warm-up", daemon=True)
    with _LOCK:
        if not _WARMING:
            atexit.register(_finish_warming)
        _WARMING.add(thread)
    thread.start()
    return thread


def _finish_warming() -> None:
    """At exit, before the interpreter stops its daemon threads: wait for the warm-ups
    still importing, so that none is stopped inside an extension module's code."""
    atexit.unregister(_finish_warming)
    with _LOCK:
        threads = list(_WARMING)
    for thread in threads:
        thread.join(WARM_UP_EXIT_WAIT)
