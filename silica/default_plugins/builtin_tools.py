"""The tools silica ships, written against the same hook a third party would use."""

from silica.config import Settings
from silica.hookspecs import hookimpl


@hookimpl
def silica_builtin_tools(register, settings: Settings) -> None:
    # imported here: commands that never list tools (silica exec) do not load them
    from silica.tools.read_file import READ_FILE

    register(READ_FILE)
    if settings.shell.enabled:  # off unless asked for: the model is not even offered it
        from silica.tools.shell import shell_tool

        register(shell_tool(settings))
