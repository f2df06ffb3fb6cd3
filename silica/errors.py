"""One exception family for errors a user can act on; each message says what to do."""

from silica.security.urls import mask_urls


class SilicaError(Exception):
    """Base of every error silica raises on purpose. ``str(err)`` is meant for the user, so
    every URL in the message is shown with its credentials masked (``silica.security.urls``):
    messages quote base URLs, pack sources and SDK errors, and reach terminals, HTTP answers
    and events. ``exit_code`` is the status the ``silica`` command exits with when this
    error ends it (``silica.cli.main`` prints the message as one line on stderr)."""

    exit_code = 1

    def __init__(self, *args: object) -> None:
        if args:
            args = (mask_urls(str(args[0])), *args[1:])
        super().__init__(*args)


class UsageError(SilicaError):
    """The command line's options cannot work as given: exit status 2, as for any usage
    error."""

    exit_code = 2


class ToolNotFound(SilicaError):
    """No discovered tool has the requested name."""


class InvalidInput(SilicaError):
    """The arguments given to a tool do not fit it."""


class UvNotFound(SilicaError):
    """No ``uv`` binary could be found."""
