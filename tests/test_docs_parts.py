"""docs/design.md names every module of the parts that hold silica's security, MCP, serve
and terminal display code, and the sandbox's modules in silica/tools/: a module added
without a word in the map fails here."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DESIGN = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("package", ["security", "mcp", "serve", "display"])
def test_the_design_map_names_every_module_of(package):
    row = next(line for line in DESIGN.splitlines() if line.startswith(f"| `silica/{package}/`"))
    modules = sorted(p.name for p in (ROOT / "silica" / package).glob("*.py")
                     if p.name != "__init__.py")
    assert modules
    missing = [m for m in modules if f"`{m}`" not in row]
    assert not missing, f"docs/design.md's silica/{package}/ row does not name {missing}"


@pytest.mark.parametrize("module", ["sandbox.py", "confine.py", "confined.py", "pyenv.py"])
def test_the_design_map_names_the_sandbox_module_in_tools(module):
    assert (ROOT / "silica" / "tools" / module).is_file()
    row = next(line for line in DESIGN.splitlines() if line.startswith("| `silica/tools/`"))
    assert f"`{module}`" in row, f"docs/design.md's silica/tools/ row does not name {module}"
