"""The tools of the MCP servers in the settings (``[mcp.servers.NAME]``), as built-in tools.

Loading this plugin (on the main thread, with SIGTERM at its default) makes SIGTERM close
the MCP servers silica started before the process ends as SIGTERM would: ``atexit`` does
not run on a signal, and a server must not outlive silica.
"""

import os
import signal
import sys
import threading

from silica.hookspecs import hookimpl


@hookimpl
def silica_builtin_tools(register, settings) -> None:
    if not settings.mcp.enabled():
        return  # no MCP server to use: the SDK is not even imported
    from silica.mcp.source import mcp_tools

    for tool in mcp_tools(settings):
        register(tool)


def _on_sigterm(signum, frame) -> None:
    connections = sys.modules.get("silica.mcp.connections")  # loaded once a server was used
    if connections is not None:
        connections.stop_all_then_die(signum)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


if threading.current_thread() is threading.main_thread():
    try:
        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _on_sigterm)
    except (ValueError, OSError):  # an embedding host with its own rules about signals
        pass
