"""Default plugin: a deleted session's images leave the Anthropic Files API too."""

from silica.hookspecs import hookimpl


@hookimpl
def silica_session_deleted(session_id, home, settings) -> None:
    # no SDK is imported unless the session uploaded files
    from silica.providers.anthropic_files import delete_session_files

    delete_session_files(session_id, home, settings)
