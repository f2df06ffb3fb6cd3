"""The sandbox's docs say what the code does: every hidden and protected path, every
``[sandbox]`` key and mode, every grant and every metadata key is named where a user looks
for it, and the config example in ``silica.config``'s docstring loads as it says."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

import silica.config
from silica.config import SandboxSettings, ToolSettings, load_settings
from silica.security.sandbox import HIDDEN_IN_HOME, HIDDEN_IN_TMP, MODES, PROTECTED
from silica.tools.metadata import parse_metadata
from silica.tools.model import ToolMetadata

ROOT = Path(__file__).resolve().parent.parent
SECURITY = (ROOT / "docs" / "security.md").read_text(encoding="utf-8")
TOOLS = (ROOT / "docs" / "tools.md").read_text(encoding="utf-8")
CLI = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")


def paragraph(text: str, start: str) -> str:
    """The paragraph of ``text`` that begins with ``start``."""
    at = text.index(start)
    end = text.find("\n\n", at)
    return text[at:] if end < 0 else text[at:end]


def test_the_hidden_paths_in_the_docs_are_the_ones_the_sandbox_hides():
    named = set(re.findall(r"`~/([^`]+)`", paragraph(SECURITY, "**Hidden**")))
    assert named == set(HIDDEN_IN_HOME), (
        f"docs/security.md's **Hidden** paragraph lacks {sorted(set(HIDDEN_IN_HOME) - named)}"
        f" and names {sorted(named - set(HIDDEN_IN_HOME))} that the code does not hide")


def test_the_session_sockets_hidden_in_tmp_are_named():
    hidden = paragraph(SECURITY, "**Hidden**")
    assert [p for p in HIDDEN_IN_TMP if f"`{p}`" not in hidden] == []


def test_the_protected_paths_in_the_docs_are_the_ones_kept_read_only():
    named = set(re.findall(r"`(\.[^`]+)`", paragraph(SECURITY, "**Protected**")))
    assert named == set(PROTECTED), (
        f"docs/security.md's **Protected** paragraph lacks {sorted(set(PROTECTED) - named)}"
        f" and names {sorted(named - set(PROTECTED))} that the code does not protect")


@pytest.mark.parametrize("key", sorted(SandboxSettings.model_fields))
def test_every_sandbox_key_is_documented(key):
    assert f"{key} = " in SECURITY and "[sandbox]" in SECURITY


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_has_a_row_in_the_modes_table(mode):
    assert f'| `"{mode}"` |' in SECURITY


@pytest.mark.parametrize("key", sorted(k for k in ToolSettings.model_fields
                                       if k.endswith("_grant")))
def test_every_grant_key_is_documented(key):
    assert key in SECURITY


@pytest.mark.parametrize("key", ["[shell]\nnetwork = ", "network = [", "write = ["])
def test_the_shell_and_mcp_server_grants_are_in_the_example(key):
    grants = SECURITY[SECURITY.index("### Grants"):SECURITY.index("### What runs outside")]
    assert key in grants


@pytest.mark.parametrize("key", sorted(set(ToolMetadata.model_fields) - {"extra"}))
def test_every_metadata_key_has_a_row_in_the_tools_page(key):
    assert f"| `{key}` |" in TOOLS


@pytest.mark.parametrize("key", ["network", "write", "display"])
def test_the_sandbox_metadata_keys_in_the_example_are_read_as_documented(key):
    example = SECURITY[SECURITY.index("### Grants"):]
    start = example.index("```python\n") + len("```python\n")
    block = example[start:example.index("\n```", start)]
    meta = parse_metadata(block)
    assert getattr(meta, key), f"the example's {key}: was not read from {block!r}"


@pytest.mark.parametrize("words", ["`silica sandbox [--json]`", "`silica exec --sandbox"])
def test_the_sandbox_commands_have_rows_in_the_cli_page(words):
    assert words in CLI


def config_example() -> str:
    """The TOML example of ``silica.config``'s docstring (between its summary and
    ``Environment:``)."""
    doc = silica.config.__doc__
    body = doc.split("\n\n", 1)[1].split("\nEnvironment:", 1)[0]
    return textwrap.dedent(body)


def test_the_config_example_in_the_docstring_loads_with_its_sandbox_settings(home):
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(config_example(), encoding="utf-8")
    settings = load_settings(home, {})
    assert settings.sandbox.mode == "best-effort"
    assert settings.sandbox.deny_read == ["~/private"]
    assert settings.tools.network_grant == {"weather": ["api.openweathermap.org"]}
    assert settings.tools.write_grant == {"charts": ["~/Pictures/charts"]}
    assert settings.tools.display_grant == ["screenshot"]
    assert settings.shell.network == ["pypi.org"]
