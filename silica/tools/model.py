"""The data of the toolbox: folders, specs, metadata, discovered tools, raw subprocess output."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from silica.security.env import EnvAccess
from silica.security.sandbox import SandboxAccess

if TYPE_CHECKING:
    from silica.tools.builtin import BuiltinTool

TOOL_NAME_PATTERN = r"^[a-zA-Z0-9_-]{1,64}$"
_JSON_SCHEMA_TYPES = {"string", "integer", "number", "boolean", "array", "object", "null"}


@dataclass(frozen=True)
class ToolFolder:
    """A folder of tool files. Lower ``precedence`` wins a name clash."""

    path: Path
    origin: str  # "project", "user", "pack:<name>", ...
    precedence: int
    trusted: bool = True  # an untrusted folder's files are listed, never read or run


class ToolStatus(StrEnum):
    OK = "ok"
    INVALID_SPEC = "invalid spec"
    ERROR = "error"
    NEEDS_AUTHORIZATION = "needs authorization"
    SHADOWED = "shadowed"
    UNTRUSTED = "untrusted"


class ToolSpec(BaseModel):
    """What a model is told about a tool. Keys starting with ``_`` are silica's own."""

    model_config = ConfigDict(extra="allow")

    name: str = Field(pattern=TOOL_NAME_PATTERN)
    description: str = Field(min_length=1)
    input_schema: dict[str, Any]
    subcommand: str | None = Field(default=None, alias="_subcommand")
    # the JSON schema of the tool's result (MCP's outputSchema): its printed JSON object
    output_schema: dict[str, Any] | None = None

    @field_validator("input_schema")
    @classmethod
    def _object_schema(cls, schema: dict[str, Any]) -> dict[str, Any]:
        if schema.get("type") != "object":
            raise ValueError('must be a JSON schema with "type": "object"')
        props = schema.get("properties", {})
        if not isinstance(props, dict):
            raise ValueError('"properties" must be an object')
        for pname, pschema in props.items():
            if not isinstance(pschema, dict):
                raise ValueError(f"property {pname!r} must be an object schema")
            ptype = pschema.get("type")
            types = ptype if isinstance(ptype, list) else [ptype] if ptype else []
            bad = [t for t in types if t not in _JSON_SCHEMA_TYPES]
            if bad:
                raise ValueError(f"property {pname!r} has unknown type {bad[0]!r}")
        required = schema.get("required", [])
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise ValueError('"required" must be a list of property names')
        missing = [r for r in required if r not in props]
        if missing:
            raise ValueError(f'"required" names {missing[0]!r}, which is not a property')
        return schema

    @field_validator("output_schema")
    @classmethod
    def _object_output(cls, schema: dict[str, Any] | None) -> dict[str, Any] | None:
        if schema is not None and schema.get("type") != "object":
            raise ValueError('must be a JSON schema with "type": "object"')
        if schema is not None:
            from jsonschema import Draft202012Validator, SchemaError

            try:
                Draft202012Validator.check_schema(schema)
            except SchemaError as exc:
                raise ValueError(f"is not a valid JSON schema: {exc.message}") from None
        return schema

    def for_model(self) -> dict[str, Any]:
        """The spec as a model sees it: name, description, input_schema, nothing of ours."""
        return {"name": self.name, "description": self.description,
                "input_schema": self.input_schema}


def explain_validation_error(err: ValidationError) -> str:
    """One line per problem, naming the field, for a user to fix their ``--toolspec``."""
    parts = []
    for e in err.errors():
        loc = ".".join(str(x) for x in e["loc"]) or "spec"
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "string_pattern_mismatch":
            msg = "must be 1-64 letters, digits, '_' or '-'"
        parts.append(f"{loc}: {msg}")
    return "; ".join(parts)


class ToolMetadata(BaseModel):
    """The ``Metadata:`` block of a tool file's docstring."""

    category: str = "uncategorized"
    tags: list[str] = Field(default_factory=list)
    long_running: bool = False
    requires_auth: bool = False
    timeout: float | None = None
    env: list[str] = Field(default_factory=list)  # secret variables the tool asks for
    network: list[str] = Field(default_factory=list)  # hosts it asks to reach
    write: list[str] = Field(default_factory=list)  # paths outside the workspace it asks for
    display: bool = False  # it asks for the X display (a screenshot tool)
    title: str = ""  # a name for people (MCP's title)
    # what the tool does to the world, as MCP's annotations say it; None: not said
    read_only: bool | None = None
    destructive: bool | None = None
    idempotent: bool | None = None
    open_world: bool | None = None
    icon: str = ""  # an https: or data:image/ URL of the tool's icon
    extra: dict[str, str] = Field(default_factory=dict)


@dataclass
class Tool:
    """One discovered tool: where it lives, its spec if it could be read, and its status."""

    name: str
    path: Path
    folder: ToolFolder
    status: ToolStatus
    reason: str = ""
    spec: ToolSpec | None = None
    metadata: ToolMetadata = field(default_factory=ToolMetadata)
    file_hash: str = ""
    multi: bool = False  # declared in a multi-tool file (runs through a subcommand)
    builtin: BuiltinTool | None = None  # a built-in tool runs in-process, not from ``path``
    env_access: EnvAccess | None = None  # secrets asked for and granted (set by discovery)
    sandbox: SandboxAccess | None = None  # network, writes, display asked and granted

    @property
    def ok(self) -> bool:
        return self.status is ToolStatus.OK

    @property
    def broken(self) -> bool:
        """True for statuses a user has to fix (shadowed tools are not broken)."""
        return self.status in (ToolStatus.INVALID_SPEC, ToolStatus.ERROR)

    def to_row(self) -> dict[str, Any]:
        """The ``tools list --json`` row."""
        return {
            "name": self.name,
            "path": str(self.path),
            "origin": self.folder.origin,
            "status": str(self.status),
            "reason": self.reason,
            "description": self.spec.description if self.spec else "",
            "category": self.metadata.category,
            "tags": self.metadata.tags,
            "env": (self.env_access or EnvAccess()).to_json(),
            "sandbox": self.sandbox.to_json() if self.sandbox else None,
        }


DEFAULT_STDOUT_CAP = 64 * 1024 * 1024  # a tool printing more is stopped there
DEFAULT_STDERR_CAP = 256 * 1024  # the tail of stderr that is kept


@dataclass
class RawOutput:
    """What a subprocess left behind. Its repr leaves out the output (up to the cap: a repr
    would copy it several times over)."""

    stdout: bytes = field(repr=False)
    stderr: bytes = field(repr=False)
    exit_code: int | None
    duration: float
    timed_out: bool = False
    timeout: float | None = None
    stdout_cut: bool = False  # stdout passed its cap; the tool was stopped there
    stderr_dropped: int = 0  # leading stderr bytes not kept (the tail is kept)
    error: str = ""  # why the process could not run at all
    notes: list[str] = field(default_factory=list)  # silica's own words on the run (sandbox)
    subject: str = "the tool"  # what ran, as the messages name it ("the command": exec, shell)

    @property
    def failed(self) -> bool:
        return bool(self.error) or self.timed_out or self.stdout_cut or self.exit_code != 0

    def stderr_tail(self, limit: int = 2000) -> str:
        text = self.stderr.decode("utf-8", errors="replace").strip()
        text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", text)  # colour codes help nobody here
        # cyclopts draws its errors in a box; the model and the user need only the words.
        text = re.sub(r"[ \t]*[╭╮╰╯─│]+[ \t]*", " ", text)
        text = "\n".join(line.strip() for line in text.splitlines() if line.strip())
        return text if len(text) <= limit else "..." + text[-limit:]

    def problems(self) -> list[str]:
        """Sentences for what went wrong, for the model and the user, and silica's notes
        (e.g. hosts the sandbox refused); empty on a clean success."""
        out = []
        if self.error:
            out.append(f"[{self.error}]")
        elif self.timed_out:
            out.append(f"[{self.subject} timed out after {self.timeout:g} s and was stopped]")
        elif self.stdout_cut:
            out.append(f"[output cut: {self.subject} printed more than the "
                       f"{len(self.stdout)}-byte cap and was stopped there]")
        elif self.exit_code is not None and self.exit_code < 0:
            out.append(f"[{self.subject} was ended by signal {_signal_name(-self.exit_code)}]")
        elif self.exit_code != 0:
            out.append(f"[{self.subject} exited with code {self.exit_code}]")
        if self.failed and self.stderr.strip():
            out.append("stderr:\n" + self.stderr_tail())
        return [*out, *self.notes]


def _signal_name(number: int) -> str:
    """``9 (SIGKILL)``; the bare number for a signal this system does not name."""
    import signal

    try:
        return f"{number} ({signal.Signals(number).name})"
    except ValueError:
        return str(number)
