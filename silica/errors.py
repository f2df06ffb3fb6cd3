"""One exception family for errors a user can act on; each message says what to do."""


class SilicaError(Exception):
    """Base of every error silica raises on purpose. ``str(err)`` is meant for the user."""


class ToolNotFound(SilicaError):
    """No discovered tool has the requested name."""


class InvalidInput(SilicaError):
    """The arguments given to a tool do not fit it."""


class UvNotFound(SilicaError):
    """No ``uv`` binary could be found."""
