"""The pack manifest, ``silica-pack.toml``: read, validate, write.

    name = "team-tools"            # ^[a-z0-9][a-z0-9_-]{0,63}$
    version = "0.1.0"
    description = "Tools our team shares."
    tools = ["weather", "chart"]   # optional: file stems to expose (default: every tool file)
    min_silica = "0.2"             # optional: the oldest silica that can run the pack
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

import silica
from silica.packs.errors import ManifestError
from silica.packs.folders import PACK_NAME_PATTERN

MANIFEST_NAME = "silica-pack.toml"
_TOOL_STEM_PATTERN = r"^[a-zA-Z0-9][a-zA-Z0-9_-]{0,63}$"
_VERSION_PATTERN = r"^\d+(\.\d+)*$"


class PackManifest(BaseModel):
    """What a pack says about itself."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=PACK_NAME_PATTERN)
    version: str = Field(min_length=1, max_length=64, pattern=r"^\S+$")
    description: str = Field(min_length=1)
    tools: list[str] | None = None
    min_silica: str | None = Field(default=None, pattern=_VERSION_PATTERN)

    @field_validator("tools")
    @classmethod
    def _tool_stems(cls, tools: list[str] | None) -> list[str] | None:
        if tools is None:
            return None
        for stem in tools:
            if not re.match(_TOOL_STEM_PATTERN, stem):
                raise ValueError(f"{stem!r} is not a tool file stem (write 'chart' for "
                                 "chart.py: letters, digits, '_' or '-', not starting with '_')")
        dupes = sorted({t for t in tools if tools.count(t) > 1})
        if dupes:
            raise ValueError(f"{dupes[0]!r} is listed twice")
        return tools


_FIELD_HINTS = {
    ("name", "string_pattern_mismatch"):
        "must be 1-64 lowercase letters, digits, '_' or '-', starting with a letter or digit",
    ("version", "string_pattern_mismatch"): "must be one word, like \"1.2.0\"",
    ("min_silica", "string_pattern_mismatch"): "must be a version like \"0.2\" or \"1.0.3\"",
}


def parse_manifest(text: str, where: str = MANIFEST_NAME) -> PackManifest:
    """Validate manifest text; ``ManifestError`` names ``where`` and every bad field."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ManifestError(f"{where} is not valid TOML ({exc}); fix the syntax") from exc
    try:
        return PackManifest.model_validate(data)
    except ValidationError as exc:
        parts = []
        for e in exc.errors():
            field = ".".join(str(x) for x in e["loc"]) or "manifest"
            msg = _FIELD_HINTS.get((field, e["type"]), e["msg"].removeprefix("Value error, "))
            if e["type"] == "extra_forbidden":
                msg = "is not a manifest field (the fields are name, version, description, " \
                      "tools, min_silica)"
            if e["type"] == "missing":
                parts.append(f"field {field!r} is missing")
            else:
                parts.append(f"field {field!r}: {msg[:1].lower() + msg[1:]}")
        raise ManifestError(f"{where}: " + "; ".join(parts)) from exc


def read_manifest(folder: Path, label: str | None = None) -> PackManifest:
    """The manifest of the pack in ``folder`` (validated, not yet checked against silica).

    Errors name ``label`` (default: the manifest's path) as where the manifest came from.
    """
    path = folder / MANIFEST_NAME
    label = label or str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ManifestError(f"{label} is missing; a pack needs a manifest (start a pack with "
                            "'silica packs new NAME')") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ManifestError(f"cannot read {label}: {exc}") from exc
    return parse_manifest(text, label)


def check_compatible(manifest: PackManifest, where: str = MANIFEST_NAME) -> None:
    """Refuse a pack that needs a newer silica than this one."""
    if manifest.min_silica and _version(manifest.min_silica) > _version(silica.__version__):
        raise ManifestError(
            f"{where}: pack {manifest.name!r} needs silica {manifest.min_silica} or newer, and "
            f"this is silica {silica.__version__}; upgrade silica first")


def _version(text: str) -> tuple[int, ...]:
    """``"1.2.0"`` and ``"1.2"`` compare equal; a pre-release tag (``.dev1``) is ignored."""
    found = re.match(r"\d+(\.\d+)*", text)
    parts = [int(p) for p in found.group(0).split(".")] if found else [0]
    while parts and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def manifest_toml(manifest: PackManifest) -> str:
    """The manifest as TOML text."""
    lines = [f"{key} = {_toml_string(getattr(manifest, key))}"
             for key in ("name", "version", "description")]
    if manifest.tools is not None:
        lines.append(f"tools = [{', '.join(_toml_string(t) for t in manifest.tools)}]")
    if manifest.min_silica:
        lines.append(f"min_silica = {_toml_string(manifest.min_silica)}")
    return "\n".join(lines) + "\n"


def _toml_string(text: str) -> str:
    # A JSON string is a TOML basic string, once DEL (raw in JSON, not in TOML) is escaped.
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")
