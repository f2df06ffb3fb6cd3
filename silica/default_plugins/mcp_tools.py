"""The tools of the MCP servers in the settings (``[mcp.servers.NAME]``), as built-in tools."""

from silica.hookspecs import hookimpl


@hookimpl
def silica_builtin_tools(register, settings) -> None:
    if not settings.mcp.servers:
        return  # no MCP server configured: the SDK is not even imported
    from silica.mcp.source import mcp_tools

    for tool in mcp_tools(settings):
        register(tool)
