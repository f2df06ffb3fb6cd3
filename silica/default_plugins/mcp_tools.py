"""The tools of the MCP servers in the settings (``[mcp.servers.NAME]``), as built-in tools.

Loading this plugin changes nothing process-wide: the SIGTERM handler that stops the
servers is set where they are about to start (``silica.mcp.connections.stop_on_sigterm``).
"""

from silica.hookspecs import hookimpl


@hookimpl
def silica_builtin_tools(register, settings) -> None:
    if not settings.mcp.enabled():
        return  # no MCP server to use: the SDK is not even imported
    from silica.mcp.source import mcp_tools

    for tool in mcp_tools(settings):
        register(tool)
