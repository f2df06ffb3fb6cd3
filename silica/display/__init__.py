"""Images drawn in the terminal: encoding (``encode``), which protocol and size the
terminal takes (``detect``, ``query``), and writing them in order (``draw``). A library the
CLI uses: nothing here imports the CLI, the agent, the servers or the providers."""
