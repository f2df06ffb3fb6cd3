"""Images drawn in the terminal: fitted to its cells, encoded for the protocol it speaks
(``encode``), which protocol and size the terminal takes (``detect``, ``query``), and
written in order with what is printed (``draw``).

A library the CLI uses; it imports nothing from the CLI, the servers, the agent or the
providers.
"""
