"""``silica serve``: the agent as a local daemon, over HTTP, Socket.IO and SSE, with a page.

    from silica.serve import ServeOptions, create_app
    app = create_app(ServeOptions.make(settings, home=home, cwd=Path.cwd()))   # an ASGI app

The modules, top to bottom: ``app`` (the routes, thin), ``turns`` (one turn per session, run
in the background), ``asking`` (tools' requests for values put to the session's clients),
``events`` (a turn's ``AgentEvents`` made bus events, in order), ``bus``
(the event bus: in-process fan-out to SSE streams and Socket.IO rooms; ``redis_bus`` shares it
between daemons), ``sse`` and ``sio`` (two transports), ``uistream`` and ``uichat`` (the
third: the AI SDK UI message stream and its chat requests; ``replay`` keeps running turns'
events for it),
``history`` (sessions and their histories as JSON, images as refs with URLs), ``auth`` (token,
cookie, Host and Origin checks), ``workspaces`` (where a session's tools run), ``uploads``
(the message intake), ``options`` and ``errors``, ``daemon`` (uvicorn, the start line, a
clean stop). docs/serve.md describes the routes and events.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ServeOptions", "create_app"]


def __getattr__(name: str) -> Any:
    # loaded on use: importing one module of the package (the intake, the options) does not
    # bring in the web stack
    if name == "create_app":
        from silica.serve.app import create_app

        return create_app
    if name == "ServeOptions":
        from silica.serve.options import ServeOptions

        return ServeOptions
    raise AttributeError(name)
