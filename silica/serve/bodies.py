"""JSON a client sent, read one way: every route that takes a JSON body and every Socket.IO
event payload goes through ``json_object`` (or ``JSON``, the same rules as a ``json``
module for python-socketio), so malformed input is a 400 everywhere and never a traceback.
Large bodies are read into memory only within one budget shared by all requests.

    body = json_object(raw, example='{"message": "..."}')   # a dict, or ApiError (400)
    with budget.hold(size):                                  # or ApiError (413, 503)
        ...read and parse the body...

Malformed means: not UTF-8 (``invalid_text``), not JSON, nested too deeply, integers too
long to convert, or not an object (``invalid_json``). What the fields must hold is the route's
business; it answers ``invalid_field`` the same way.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

from silica.security.text import safe_text
from silica.serve.errors import ApiError


class MalformedJson(ValueError):
    """Client JSON that cannot be read: ``code`` (``invalid_text`` or ``invalid_json``) and a
    ``reason`` a person can act on."""

    def __init__(self, code: str, reason: str) -> None:
        super().__init__(reason)
        self.code, self.reason = code, reason


def parse(raw: bytes | bytearray | memoryview | str) -> Any:
    """The JSON value in ``raw`` (UTF-8 bytes or text); ``MalformedJson`` for anything else.
    Never raises another exception for any input."""
    if isinstance(raw, str):
        text = raw
    else:
        try:
            text = bytes(raw).decode("utf-8")
        except UnicodeDecodeError:
            raise MalformedJson("invalid_text", "the body is not valid UTF-8 text; encode "
                                "it as UTF-8") from None
    try:
        return json.loads(text)
    except RecursionError:  # json's C scanner stops at the interpreter's recursion limit
        raise MalformedJson("invalid_json", "the JSON is nested too deeply (arrays or "
                            "objects inside each other hundreds of times)") from None
    except ValueError as exc:  # JSONDecodeError, an integer of more than 4300 digits
        raise MalformedJson("invalid_json", f"the body is not valid JSON "
                            f"({safe_text(str(exc))[:200]})") from None


def json_object(raw: bytes | bytearray | memoryview | str, *, example: str) -> dict:
    """The JSON object in ``raw``; ``ApiError`` (400) saying what to send, shaped like
    ``example``, for anything else."""
    try:
        value = parse(raw)
    except MalformedJson as exc:
        raise ApiError(400, exc.code, f"{exc.reason}; send a JSON object like {example}") \
            from None
    if not isinstance(value, dict):
        raise ApiError(400, "invalid_json", f"the JSON body must be an object like {example}")
    return value


class JSON:
    """``parse`` and ``json.dumps`` as a ``json`` module (python-socketio's ``json=``):
    a malformed payload is a ``ValueError``, never a ``RecursionError``."""

    loads = staticmethod(parse)
    dumps = staticmethod(json.dumps)
    JSONDecodeError = MalformedJson


class BodyBudget:
    """Bytes of request bodies read into memory at once, across all requests (``[serve]
    max_body_memory``). Parsing a JSON body takes about three times its size, so this
    bounds the memory large bodies can take whatever many arrive together; a body that
    does not fit now is refused at once (503) rather than queued, since its sender can
    retry or stream its images instead."""

    def __init__(self, total: int) -> None:
        self.total, self.used = total, 0

    @contextlib.contextmanager
    def hold(self, size: int) -> Iterator[None]:
        """``size`` bytes of the budget while the block runs; ``ApiError`` 413 if a body
        of ``size`` could never fit, 503 if it does not fit while others are read."""
        if size > self.total:
            raise ApiError(413, "body_too_large", (
                f"the JSON body is {size:,} bytes, more than this daemon reads into memory "
                f"at once ([serve] max_body_memory, {self.total:,}); send the images as "
                "multipart/form-data (streamed to disk), or raise max_body_memory"))
        if self.used + size > self.total:
            raise ApiError(503, "busy", (
                f"the daemon is reading other large bodies ({self.used:,} of {self.total:,} "
                "bytes of [serve] max_body_memory in use); retry in a few seconds, or send "
                "the images as multipart/form-data, which is streamed to disk"))
        self.used += size
        try:
            yield
        finally:
            self.used -= size
