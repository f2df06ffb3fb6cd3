"""``silica mcp serve`` with the conformance fixtures: what the harness's server scenarios
call (tools, resources and prompts of fixed names) comes from the plugin modules in
``fixtures/``, registered here and never shipped to users.

    python tests/conformance/serve_fixtures.py --http --no-token --port 8765

Every argument is passed on to ``silica mcp serve``.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def register_fixtures() -> list[str]:
    """Register every module in ``fixtures/`` as a silica plugin; their names."""
    from silica.plugins import get_plugin_manager

    pm = get_plugin_manager()
    names = []
    for path in sorted(FIXTURES.glob("*.py")):
        if path.name.startswith("_"):
            continue
        name = f"conformance_{path.stem}"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        pm.register(module, name=name)
        names.append(name)
    return names


if __name__ == "__main__":
    import os

    os.environ.setdefault("SILICA_RESIDENT", "0")  # this process holds the plugins
    register_fixtures()
    sys.argv = ["silica", "mcp", "serve", *sys.argv[1:]]
    from silica.cli import main

    main()
