"""The tools silica ships, written against the same hook a third party would use."""

from silica.hookspecs import hookimpl
from silica.tools.read_file import READ_FILE


@hookimpl
def silica_builtin_tools(register) -> None:
    register(READ_FILE)
