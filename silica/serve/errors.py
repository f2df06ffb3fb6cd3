"""The daemon's errors: JSON ``{"error": {"code": ..., "message": ...}}`` with a message that
says what to do. A route raises ``ApiError``; the message intake raises ``UploadRefused``
(same three attributes); both become the same response."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from starlette.responses import JSONResponse

from silica.errors import SilicaError
from silica.security.urls import mask_urls


class ApiError(SilicaError):
    """A request the daemon refuses: ``status`` (HTTP), ``code`` (snake_case), ``message``."""

    def __init__(self, status: int, code: str, message: str, **extra: Any) -> None:
        message = mask_urls(message)  # it is sent: no URL's credentials go with it
        super().__init__(message)
        self.status, self.code, self.message, self.extra = status, code, message, extra


def error_body(code: str, message: str, **extra: Any) -> dict:
    return {"error": {"code": code, "message": mask_urls(message), **extra}}


def error_response(status: int, code: str, message: str,
                   headers: Mapping[str, str] | None = None, **extra: Any) -> JSONResponse:
    return JSONResponse(error_body(code, message, **extra), status_code=status,
                        headers=headers)


def response_for(exc: Exception) -> JSONResponse:
    """The response for an ``ApiError`` or an ``UploadRefused`` (anything with ``status``,
    ``code`` and ``message``)."""
    return error_response(getattr(exc, "status", 400), getattr(exc, "code", "refused"),
                          getattr(exc, "message", str(exc)), **getattr(exc, "extra", {}))


def no_session(session_id: str) -> ApiError:
    return ApiError(404, "no_session", f"there is no session {session_id}; GET /sessions "
                    "lists them, POST /sessions starts one")


def turn_running(session_id: str) -> ApiError:
    return ApiError(409, "turn_running", f"session {session_id} is running a turn (here or "
                    "in silica chat); wait for its turn_end event, or start a new session")
