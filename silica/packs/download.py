"""Downloading a pack's archive over http(s): capped in size, and in time as a whole.

A server may be slow, lie about the size, or trickle a byte a second forever; none of these
hangs an install or shows a traceback. The size is checked as the bytes arrive (and against
``Content-Length`` first); the whole download, connecting included, has a deadline.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import os
import re
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import silica
from silica.packs.errors import PackError, UnsafePack
from silica.packs.safety import MAX_DOWNLOAD_BYTES
from silica.security.urls import mask_urls

DOWNLOAD_TIMEOUT = 60.0  # seconds to connect, and for each read
DOWNLOAD_DEADLINE = 600.0  # seconds for the whole download: 50 MiB at ~90 KiB/s
_CHUNK = 256 * 1024


def download(url: str, dest: Path, say: Callable[[str], None],
             deadline: float | None = None) -> str:
    """Download ``url`` into the new file ``dest``; returns ``"sha256:<hex>"`` of its bytes.

    Raises ``UnsafePack`` past ``MAX_DOWNLOAD_BYTES`` and ``PackError`` for an HTTP error, a
    network error, a bad or untrue ``Content-Length``, or a download still running after
    ``deadline`` seconds (default ``DOWNLOAD_DEADLINE``). Nothing but ``dest`` is written.
    """
    limit = DOWNLOAD_DEADLINE if deadline is None else deadline
    job = _Download(url, dest, say)
    # In a thread, so that the deadline holds even while a read is blocked on the network.
    worker = threading.Thread(target=job.run, name="silica-pack-download", daemon=True)
    worker.start()
    try:
        worker.join(limit)
    except BaseException:
        job.cancel()
        raise
    if worker.is_alive():
        job.cancel()
        raise PackError(f"downloading {url} did not finish within {limit:g} s (the limit); "
                        "check your connection and try again, or download the archive "
                        "yourself and install the file")
    if job.error is not None:
        raise job.error
    return job.digest


class _Download:
    """One download, run in a worker thread; its result or error is read once it ends."""

    def __init__(self, url: str, dest: Path, say: Callable[[str], None]) -> None:
        self.url, self.dest, self.say = url, dest, say
        self.digest = ""
        self.error: BaseException | None = None
        self.cancelled = False
        self.response: http.client.HTTPResponse | None = None

    def run(self) -> None:
        try:
            self.digest = self._fetch()
        except BaseException as exc:  # handed to the caller's thread, which raises it
            self.error = exc

    def cancel(self) -> None:
        """Stop the download: a read blocked on the network returns at once.

        Still connecting or reading headers, the thread ends at its next per-read timeout.
        """
        self.cancelled = True
        response = self.response
        if response is None:
            return
        with contextlib.suppress(OSError, ValueError):
            # shutdown (not close) wakes a recv blocked in the other thread.
            sock = socket.socket(fileno=os.dup(response.fileno()))
            try:
                sock.shutdown(socket.SHUT_RDWR)
            finally:
                sock.close()

    def _fetch(self) -> str:
        url = self.url
        request = urllib.request.Request(
            url, headers={"User-Agent": f"silica/{silica.__version__}"})
        digest = hashlib.sha256()
        try:
            with urllib.request.urlopen(request, timeout=DOWNLOAD_TIMEOUT) as response:
                self.response = response
                if self.cancelled:
                    raise PackError("the download was cancelled")
                chunked = "chunked" in response.headers.get("Transfer-Encoding", "").lower()
                # With chunked encoding, Content-Length is to be ignored (RFC 9112 6.3).
                expected = None if chunked else \
                    _content_length(url, response.headers.get_all("Content-Length"))
                got = 0
                with open(self.dest, "xb") as out:
                    while chunk := response.read1(_CHUNK):
                        got += len(chunk)
                        if got > MAX_DOWNLOAD_BYTES:
                            raise UnsafePack(_too_big(url))
                        digest.update(chunk)
                        out.write(chunk)
                        self.say(f"downloading {mask_urls(url)} ({got / (1024 * 1024):.1f} MiB)")
                if expected is not None and got != expected:
                    raise PackError(f"the download of {url} ended after {got:,} bytes, but the "
                                    f"server announced {expected:,} (Content-Length); try "
                                    "again, or tell the server's owner")
        except urllib.error.HTTPError as exc:
            raise PackError(f"downloading {url} failed: HTTP {exc.code} {exc.reason}; check "
                            "the URL") from None
        except urllib.error.URLError as exc:
            raise PackError(f"cannot download {url}: {exc.reason}; check the URL and your "
                            "connection") from None
        except (TimeoutError, ConnectionError, http.client.HTTPException) as exc:
            reason = str(exc) or type(exc).__name__
            raise PackError(f"downloading {url} failed ({reason}); try again") from None
        return "sha256:" + digest.hexdigest()


def _content_length(url: str, values: list[str] | None) -> int | None:
    """The size the server announced, or None; ``PackError`` if it makes no sense."""
    if not values:
        return None
    texts = {v.strip() for v in values}
    if len(texts) > 1 or not re.fullmatch(r"\d{1,19}", next(iter(texts))):
        shown = ", ".join(repr(v) for v in values)[:80]
        raise PackError(f"the server of {url} sent a bad Content-Length ({shown}), so the "
                        "download cannot be checked; try again later, or tell the server's "
                        "owner")
    length = int(next(iter(texts)))
    if length > MAX_DOWNLOAD_BYTES:
        raise UnsafePack(_too_big(url))
    return length


def _too_big(url: str) -> str:
    return (f"{url} is larger than {MAX_DOWNLOAD_BYTES // (1024 * 1024)} MiB (the download "
            "limit); a pack should hold tools, not data")
