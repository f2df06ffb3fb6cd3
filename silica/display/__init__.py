"""Images drawn in the terminal: fitted to its cells, encoded for the protocol it speaks.

A library the CLI uses (``silica.display.encode``); it imports nothing from the CLI, the
servers, the agent or the providers.
"""
