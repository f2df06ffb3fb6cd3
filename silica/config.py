"""Settings: ``$SILICA_HOME/config.toml``, then environment variables on top.

    provider = "anthropic"          # anthropic, openai, ollama, or a plugin's provider
    model = "claude-sonnet-4-5"
    vision = true                   # omit to use the model table
    max_result_chars = 100000       # of a tool result's text, for the model (head and tail)

    [aging]
    full_turns = 1                  # turns whose images are sent at full size
    lowres_turns = 4                # then this many turns at low resolution
    lowres_px = 512                 # long side of a low-resolution image
    step_turns = 4                  # aging moves every 4 turns (1: every turn) ...
    step_bytes = 2500000            # ... or when a request's images would pass this (base64)
    lowres_lossy = true             # low-resolution copies may be JPEG or 256 colours

    [images]                        # override the provider's image limits
    target_long_side = 1568
    max_per_message = 10            # images a person may send at once (serve, ask)
    max_size_bytes = 10485760       # bytes of one sent image
    max_per_session = 100
    lossy = false                   # true: fitting may pick JPEG or 256 colours when smaller

    [tools]
    timeout = 60
    env_withhold = ["DEPLOY_*"]     # withheld on top of the secrets no tool ever sees
    allow_shadow_builtins = false   # true: a tool file may replace a built-in tool
    display_grant = ["screenshot"]  # tools that may use the X display (its socket visible)
    [tools.env_grant]               # secrets a tool may see (see silica.security.env)
    weather = ["OPENWEATHER_KEY"]
    [tools.network_grant]           # hosts a tool may reach, through silica's proxy
    weather = ["api.openweathermap.org"]   # "*": the whole network
    [tools.write_grant]             # folders (in your home) a tool may write besides the
    charts = ["~/Pictures/charts"]  # workspace and its own /tmp

    [sandbox]                       # how tools are confined (see docs/security.md)
    mode = "best-effort"            # "require": never run a tool unconfined; "off"
    deny_read = ["~/private"]       # hidden from tools, on top of the credential folders

    [shell]                         # the agent's shell tool (off unless enabled)
    enabled = true
    allow = ["chafa *"]             # run without asking; others ask (chat, serve) or are refused
    network = ["pypi.org"]          # hosts its commands may reach (default: none)

    [openai]
    api = "responses"               # "chat" (chat completions, the default) or "responses"
    image_detail = "high"           # Responses API: "auto", "low" or "high"

    [anthropic]
    files_api = true                # upload each image once per session (Files API, beta)

    [agents.reviewer]               # a profile: `silica ask --agent reviewer`, "agent" in serve
    provider = "openai"             # each key optional: unset ones come from above
    model = "gpt-4.1"
    vision = false                  # this agent gets a line of text in place of each image
    system = "You review code. Be brief."
    tools = ["read_file", "git_*"]  # names or patterns; others are neither offered nor run

    [serve]                         # silica serve (see docs/serve.md)
    allowed_workspaces = ["~/src"]  # default: the folder serve started in
    fetch_private = false           # true: image URLs may point at private addresses
    approval_timeout = 300          # seconds a shell command waits for a person's approval

    [display]
    images = "auto"                 # images in the terminal: "kitty", "iterm2", "sixel",
                                    # "blocks" (half-block cells) or "off"

    [storage]                       # where sessions and images are kept (docs/deploy.md)
    database = "postgresql://silica@db/silica"  # default: SQLite in SILICA_HOME; password
                                    # from PGPASSWORD (or the whole URL in SILICA_DATABASE)
    images = "s3://silica-images/prod"   # default: the folder SILICA_HOME/images
    image_urls = "presigned"        # the page fetches images from the store ("daemon": through it)

    [worker]                        # silica worker: turns taken from Redis
    lease = 30                      # seconds before a silent worker's turn is claimed by another
    concurrency = 8                 # turns one worker runs at once

    [resident]                      # ask, chat, tools run/list hand their run to a warm process
    enabled = true                  # false: never (so does SILICA_RESIDENT=0)
    idle = 600                      # seconds with no run before it exits

    [mcp]
    timeout = 60                    # seconds for a server to start, and for one call
    elicitation = "decline"         # a server's request for input in `ask`: or "defaults"
    elicitation_timeout = 300       # seconds the person has to answer one, then declined
    [mcp.servers.files]             # a server started as a command (stdio) ...
    command = "uvx"
    args = ["some-mcp-server", "--root", "."]
    env = { LOG_LEVEL = "warning" }
    cwd = "/srv/files"              # default: silica's working directory
    timeout = 120                   # per call; startup_timeout for start + first listing
    [mcp.servers.remote]            # ... or one reached over HTTP (transport = "sse": old SSE)
    url = "http://127.0.0.1:9000/mcp"
    headers = { Authorization = "Bearer ${REMOTE_TOKEN}" }   # ${VAR}: from the environment
    enabled = false                 # not started, not listed
    [mcp.servers.tracker]           # a server behind OAuth 2.1: `silica mcp login tracker`
    url = "https://mcp.example.com/mcp"
    [mcp.servers.tracker.oauth]     # optional: without it silica registers itself
    client_id = "silica-at-acme"    # a client registered beforehand (client_secret = "${VAR}")
    scopes = ["issues:read"]        # default: what the server asks for
    approve = "browser"             # "direct": follow the authorization redirect, no browser

Environment: ``SILICA_PROVIDER``, ``SILICA_MODEL``, ``SILICA_VISION`` (true/false),
``SILICA_MAX_TURNS``, ``SILICA_DATABASE`` (``[storage] database``), ``SILICA_IMAGES``
(``[storage] images``). A bad file or value raises ``ConfigError`` naming the key and the
problem.
"""

from __future__ import annotations

import os
import re
import tomllib
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from silica.errors import SilicaError
from silica.paths import silica_home

CONFIG_NAME = "config.toml"
# Upper bounds: a value past them is a typo or an attack, and would overflow where used.
_MIB = 1024 * 1024
_GIB = 1024 * _MIB
_MAX_SECONDS = 7 * 24 * 3600.0
_MAX_COUNT = 10_000
_GRANT_NAME = re.compile(r"^[A-Za-z0-9_*?\[\]!]{1,128}$")


class ConfigError(SilicaError):
    """The configuration cannot be used; the message names the key and the problem."""


class _Section(BaseModel):
    # inf and nan would pass "gt=0" and then overflow where the value is used
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class ImageOverrides(_Section):
    """Fields of ``ImageLimits`` to change for every provider (``None``: keep the provider's)."""

    max_base64_bytes: int | None = Field(default=None, gt=0)
    max_side: int | None = Field(default=None, gt=0)
    max_side_many: int | None = Field(default=None, gt=0)
    target_long_side: int | None = Field(default=None, gt=0)
    target_megapixels: float | None = Field(default=None, gt=0)
    max_images_per_request: int | None = Field(default=None, gt=0)
    # The budgets against decompression bombs (see silica.images.limits); capped at 64 GiB
    # and 10,000 images, past which a value is a typo.
    max_decoded_bytes: int | None = Field(default=None, gt=0, le=64 * 1024**3)
    max_images_per_result: int | None = Field(default=None, gt=0, le=10_000)
    max_result_decoded_bytes: int | None = Field(default=None, gt=0, le=64 * 1024**3)
    # What a person may send (``silica serve`` uploads, ``ask --image``): images in one
    # message, bytes of one image as sent, images kept in one session.
    max_per_message: int = Field(default=10, gt=0, le=_MAX_COUNT)
    max_size_bytes: int = Field(default=10 * _MIB, gt=0, le=_GIB)
    max_per_session: int = Field(default=100, gt=0, le=100 * _MAX_COUNT)
    # How images are fitted (``ImageLimits.lossy``). False: a lossless image is sent
    # lossless unless nothing else fits the byte limit.
    lossy: bool = False

    def apply(self, limits):
        changes = {k: v for k, v in self.model_dump(exclude=_UPLOAD_KEYS).items()
                   if v is not None}
        return limits.replace(**changes) if changes else limits


# Keys of [images] that are no field of ImageLimits: what a person may send.
_UPLOAD_KEYS = {"max_per_message", "max_size_bytes", "max_per_session"}


class AgingSettings(_Section):
    """How old images are sent (see ``silica.agent.render``): full size, then low resolution,
    then a line of text. Aging moves in steps, every ``step_turns`` turns (turn numbers that
    are multiples of it), or at once when a request's images would pass ``step_bytes`` of
    base64; in between, every image keeps its bytes, so requests share their prefix and a
    prompt cache can reuse it. With the defaults an image is whole until the next step, at
    low resolution until the one after (``lowres_turns`` = ``step_turns``), then text. A turn
    that starts more than ``cache_seconds`` after the one before ended is a step too: the
    provider's prompt cache has expired by then, so the step rewrites nothing it still had."""

    full_turns: int = Field(default=1, ge=1, le=_MAX_COUNT)
    lowres_turns: int = Field(default=4, ge=0, le=_MAX_COUNT)
    lowres_px: int = Field(default=512, ge=64, le=4096)
    step_turns: int = Field(default=4, ge=1, le=_MAX_COUNT)  # 1: images age every turn
    step_bytes: int = Field(default=2_500_000, gt=0, le=_GIB)
    # how long a provider's prompt cache lasts idle (Anthropic's: 5 minutes); 0: never
    cache_seconds: float = Field(default=300.0, ge=0, le=_MAX_SECONDS)
    # a low-resolution copy may change pixels (JPEG, 256 colours) when that is smaller
    lowres_lossy: bool = True


class ToolSettings(_Section):
    timeout: float = Field(default=60.0, gt=0, le=_MAX_SECONDS)
    env_withhold: list[str] = Field(default_factory=list)
    env_grant: dict[str, list[str]] = Field(default_factory=dict)
    network_grant: dict[str, list[str]] = Field(default_factory=dict)
    write_grant: dict[str, list[str]] = Field(default_factory=dict)
    display_grant: list[str] = Field(default_factory=list)
    allow_shadow_builtins: bool = False

    @field_validator("env_grant", "network_grant", "write_grant")
    @classmethod
    def _tool_keys(cls, grants: dict[str, list[str]]) -> dict[str, list[str]]:
        _check_tool_names(grants)
        return grants

    @field_validator("display_grant")
    @classmethod
    def _display_tools(cls, names: list[str]) -> list[str]:
        _check_tool_names(names)
        return names

    @field_validator("network_grant")
    @classmethod
    def _hosts(cls, grants: dict[str, list[str]]) -> dict[str, list[str]]:
        for tool, hosts in grants.items():
            _check_hosts(f"{tool}: ", hosts)
        return grants

    @field_validator("write_grant")
    @classmethod
    def _paths(cls, grants: dict[str, list[str]]) -> dict[str, list[str]]:
        for tool, paths in grants.items():
            _check_writes(f"{tool}: ", paths)
        return grants

    @field_validator("env_grant")
    @classmethod
    def _grant_names(cls, grants: dict[str, list[str]]) -> dict[str, list[str]]:
        for tool, names in grants.items():
            bad = [n for n in names if not _GRANT_NAME.match(n)]
            if bad:
                raise ValueError(f"{tool}: {bad[0]!r} is not a variable name or pattern "
                                 "(letters, digits, '_', and * ? [ ] for patterns)")
        return grants


class ReadFileSettings(_Section):
    max_text_bytes: int = Field(default=256 * 1024, gt=0, le=256 * _MIB)
    max_image_bytes: int = Field(default=20 * _MIB, gt=0, le=_GIB)
    allow_outside_workspace: bool = False
    allowed_paths: list[Path] = Field(default_factory=list)


class StoreSettings(_Section):
    max_image_bytes: int = Field(default=20 * _MIB, gt=0, le=_GIB)
    max_images_per_message: int = Field(default=20, gt=0, le=_MAX_COUNT)
    max_session_bytes: int = Field(default=512 * _MIB, gt=0, le=1024 * _GIB)
    keep_days: int = Field(default=30, ge=1, le=36500)


class McpOAuthSettings(_Section):
    """How silica logs in to an HTTP MCP server with OAuth 2.1 (``silica.mcp.oauth``);
    every key optional. ``client_id`` (with ``client_secret``, ``${VAR}`` allowed) names a
    client registered with the authorization server beforehand; else ``client_metadata_url``
    (an HTTPS client ID metadata document) is the client's id where the server supports it;
    else silica registers itself. ``scopes`` asks for these scopes instead of the server's.
    ``approve``: ``"browser"`` (``silica mcp login`` opens the authorization page) or
    ``"direct"`` (the page is fetched and its redirect followed without a browser, for an
    authorization server that approves at once; any command may then log in)."""

    client_id: str | None = Field(default=None, min_length=1)
    client_secret: str | None = Field(default=None, min_length=1)
    scopes: list[str] = Field(default_factory=list)
    client_metadata_url: str | None = Field(default=None, pattern=r"^https://")
    approve: Literal["browser", "direct"] = "browser"

    @model_validator(mode="after")
    def _secret_needs_id(self) -> McpOAuthSettings:
        if self.client_secret is not None and self.client_id is None:
            raise ValueError('"client_secret" goes with a "client_id"')
        return self


class McpServerSettings(_Section):
    """One MCP server: ``command`` (with ``args``, ``env`` and ``cwd``) runs it over stdio,
    ``url`` reaches it over HTTP (``headers`` sent with every request; ``${VAR}`` in a value
    is taken from the environment when silica connects). Exactly one of the two is given.

    Where a stdio server starts is ``silica.security.server_start``'s decision: its ``cwd``
    (a relative one is taken from the silica home), else the current folder in a trusted
    project, else a private folder of its own; a relative ``command`` is taken from there.

    ``transport`` picks the HTTP protocol: ``"streamable-http"`` (the default) or ``"sse"``
    (the older HTTP+SSE transport; also chosen when ``url`` ends in ``/sse``). ``timeout``
    bounds one call (default ``[mcp] timeout``), ``startup_timeout`` the start, handshake and
    first listing (default ``[mcp] timeout``); ``enabled = false`` keeps the server out.

    A stdio server runs in the sandbox like a tool (``silica.security.sandbox``), its start
    folder writable: ``network`` lists the hosts it may reach (``["*"]``: all; default none)
    and ``write`` the folders in your home it may write besides.

    ``oauth`` (``McpOAuthSettings``) sets how an HTTP server's OAuth login goes; a server
    that answers 401 with OAuth metadata is logged in to even without it.
    """

    command: str | None = Field(default=None, min_length=1)
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: Path | None = None
    url: str | None = Field(default=None, pattern=r"^https?://")
    headers: dict[str, str] = Field(default_factory=dict)
    transport: Literal["stdio", "streamable-http", "sse"] | None = None
    timeout: float | None = Field(default=None, gt=0, le=_MAX_SECONDS)
    startup_timeout: float | None = Field(default=None, gt=0, le=_MAX_SECONDS)
    enabled: bool = True
    network: list[str] = Field(default_factory=list)
    write: list[str] = Field(default_factory=list)
    oauth: McpOAuthSettings | None = None

    @field_validator("network")
    @classmethod
    def _hosts(cls, hosts: list[str]) -> list[str]:
        _check_hosts("", hosts)
        return hosts

    @field_validator("write")
    @classmethod
    def _paths(cls, paths: list[str]) -> list[str]:
        _check_writes("", paths)
        return paths

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerSettings:
        if (self.command is None) == (self.url is None):
            raise ValueError('give either "command" (a server run over stdio) or "url" '
                             "(streamable HTTP or SSE), not both or neither")
        if self.url is not None and (self.args or self.env or self.cwd is not None):
            raise ValueError('"args", "env" and "cwd" go with "command", not with "url"')
        if self.command is not None and self.oauth is not None:
            raise ValueError('"oauth" goes with "url" (HTTP), not with "command"')
        if self.command is not None and self.headers:
            raise ValueError('"headers" go with "url" (HTTP), not with "command"; '
                             'give a stdio server its secrets in "env"')
        if self.command is not None and self.transport not in (None, "stdio"):
            raise ValueError(f'transport "{self.transport}" needs a "url", not a "command"')
        if self.url is not None and self.transport == "stdio":
            raise ValueError('transport "stdio" needs a "command", not a "url"')
        return self

    @property
    def kind(self) -> str:
        """``stdio``, ``streamable-http`` or ``sse``: the transport silica uses."""
        if self.command is not None:
            return "stdio"
        if self.transport:
            return self.transport
        return "sse" if (self.url or "").rstrip("/").endswith("/sse") else "streamable-http"


class McpSettings(_Section):
    """MCP servers whose tools silica offers, by name (the prefix of their tools' names);
    ``timeout`` is each server's default for a call and for its start. A server's request
    for input (elicitation) waits at most ``elicitation_timeout`` seconds for the person,
    then is declined; where nobody can be asked (``silica ask``) ``elicitation`` says what
    silica answers: ``"decline"``, or ``"defaults"`` (accept the form's defaults, or
    decline when a required field has none)."""

    servers: dict[str, McpServerSettings] = Field(default_factory=dict)
    timeout: float = Field(default=60.0, gt=0, le=_MAX_SECONDS)
    elicitation: Literal["decline", "defaults"] = "decline"
    elicitation_timeout: float = Field(default=300.0, gt=0, le=_MAX_SECONDS)

    def enabled(self) -> dict[str, McpServerSettings]:
        """The servers to start and list: those without ``enabled = false``."""
        return {name: s for name, s in self.servers.items() if s.enabled}


class ShellSettings(_Section):
    """The agent's ``shell`` tool: offered only when ``enabled``; commands matching an
    ``allow`` pattern (fnmatch on the whole line; ``"*"`` alone: every command) run without
    asking (see ``silica.tools.shell``)."""

    enabled: bool = False
    allow: list[str] = Field(default_factory=list)
    network: list[str] = Field(default_factory=list)

    @field_validator("network")
    @classmethod
    def _hosts(cls, hosts: list[str]) -> list[str]:
        _check_hosts("", hosts)
        return hosts

    @field_validator("allow")
    @classmethod
    def _patterns(cls, patterns: list[str]) -> list[str]:
        if any(not p.strip() for p in patterns):
            raise ValueError('an empty pattern allows nothing; write e.g. "chafa *"')
        return patterns


class SandboxSettings(_Section):
    """How tool processes are confined (``silica.security.sandbox``)."""

    mode: Literal["require", "best-effort", "off"] = "best-effort"
    deny_read: list[str] = Field(default_factory=list)

    @field_validator("deny_read")
    @classmethod
    def _absolute(cls, paths: list[str]) -> list[str]:
        for path in paths:
            if "\0" in path:
                raise ValueError(f"{path!r} holds a NUL character: write a path, e.g. "
                                 "\"~/private\"")
            if not os.path.isabs(os.path.expanduser(path)):
                raise ValueError(f"{path!r} is not an absolute path (write it from / or ~)")
        return paths


_TOOL_KEY = re.compile(r"^[A-Za-z0-9_*?\[\]!-]{1,128}$")


def _check_tool_names(names) -> None:
    """Each of ``names`` (grant keys) can name a tool: a name or an fnmatch pattern of one;
    else a ValueError (a typo would grant nothing, without a word)."""
    for name in names:
        if not _TOOL_KEY.match(name):
            raise ValueError(f"{name[:80]!r} is not a tool name or a pattern (letters, "
                             "digits, '_' and '-', and * ? [ ] for patterns, e.g. "
                             "\"weather\" or \"git_*\")")


def _check_writes(prefix: str, paths: list[str]) -> None:
    """Each of ``paths`` may be granted for writing (``check_write_grant``) and is neither in
    nor around silica's own folders: whoever writes there changes silica's config (its
    grants), its tools or its packs, code that runs later with other grants."""
    from silica.paths import user_tools_dir
    from silica.security.sandbox import check_write_grant, tilde

    own = [Path(os.path.normpath(p.expanduser().absolute()))
           for p in (silica_home(), user_tools_dir())]
    own += [Path(os.path.realpath(p)) for p in own]
    home = Path.home().resolve()
    for path in paths:
        if "\0" in path:
            raise ValueError(f"{prefix}{path!r} holds a NUL character: write a folder, "
                             "e.g. \"~/Pictures/out\"")
        try:
            granted = check_write_grant(path)
        except ValueError as exc:
            raise ValueError(f"{prefix}{exc}") from None
        real = Path(os.path.realpath(granted))
        if real != granted:  # judged again where its links lead: the folder the tool gets
            try:
                check_write_grant(str(real), home=home)
            except ValueError as exc:
                raise ValueError(f"{prefix}{path!r} leads to {exc}") from None
        for folder in own:
            if any(p == folder or folder in p.parents or p in folder.parents
                   for p in (granted, real)):
                raise ValueError(f"{prefix}{path!r} holds or is inside {tilde(folder)}, "
                                 "silica's own config, tools and packs, which no tool may "
                                 "write; grant another folder")


def _check_hosts(prefix: str, hosts: list[str]) -> None:
    """Each of ``hosts`` is a host rule the proxy understands; else a ValueError."""
    from silica.security.netproxy import HostRules, InvalidHostGrant

    try:
        HostRules.parse(hosts)
    except InvalidHostGrant as exc:
        raise ValueError(f"{prefix}{exc}") from None


class OpenAISettings(_Section):
    """``provider = "openai"``: which OpenAI API to speak (``"responses"`` is the same as
    ``provider = "openai-responses"``), and the ``detail`` of images sent to the Responses
    API."""

    api: Literal["chat", "responses"] = "chat"
    image_detail: Literal["auto", "low", "high"] = "high"


class AnthropicSettings(_Section):
    """``provider = "anthropic"``: with ``files_api``, each image is uploaded once per session
    to the Files API (beta) and requests name it by its file id instead of carrying its
    base64 (see ``silica.providers.anthropic_files``)."""

    files_api: bool = False


class AgentProfile(_Section):
    """One ``[agents.NAME]``: what an agent of that name uses in place of the top-level
    ``provider``, ``model``, ``vision`` and ``system`` (each optional), and ``tools``, the
    names or fnmatch patterns of the tools it may use (unset: every tool; ``[]``: none).
    Applied by ``silica.agent.profiles``."""

    provider: str | None = Field(default=None, min_length=1, max_length=100)
    model: str | None = None
    vision: bool | None = None
    system: str | None = None
    tools: list[str] | None = None

    @field_validator("model")
    @classmethod
    def _model_name(cls, model: str | None) -> str | None:
        if model is not None and not re.fullmatch(r"[\x21-\x7e]{1,200}", model):
            raise ValueError("a model name is 1-200 printable characters without spaces, "
                             'e.g. "claude-sonnet-4-5"')
        return model

    @field_validator("tools")
    @classmethod
    def _patterns(cls, patterns: list[str] | None) -> list[str] | None:
        if patterns is not None and any(not p.strip() for p in patterns):
            raise ValueError('an empty name allows no tool; write a tool name or a pattern '
                             'such as "git_*"')
        return patterns


_AGENT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class ServeSettings(_Section):
    """``silica serve``: where it listens, who may reach it, what it may fetch."""

    host: str = "127.0.0.1"
    port: int = Field(default=8700, ge=0, le=65535)
    # folders a session's ``workspace`` may be in (empty: the folder serve started in)
    allowed_workspaces: list[Path] = Field(default_factory=list)
    # image URLs on loopback, private and link-local addresses are refused unless true
    fetch_private: bool = False
    fetch_timeout: float = Field(default=15.0, gt=0, le=3600)
    # origins allowed to call the API from another page (none by default)
    cors_origins: list[str] = Field(default_factory=list)
    redis: str | None = Field(default=None, pattern=r"^rediss?://")
    # seconds a client has to send a request's headers, and a body may pause
    header_timeout: float = Field(default=10.0, gt=0, le=3600)
    body_timeout: float = Field(default=30.0, gt=0, le=3600)
    # connections (and Socket.IO clients) that have not yet shown the token
    max_pending_connections: int = Field(default=64, ge=1, le=_MAX_COUNT)
    max_pending_socketio: int = Field(default=32, ge=1, le=_MAX_COUNT)
    # bytes of JSON request bodies read into memory at once, across requests
    max_body_memory: int = Field(default=256 * _MIB, ge=_MIB, le=64 * _GIB)
    # seconds a shell command outside [shell] allow waits for a person, then is denied
    approval_timeout: float = Field(default=300.0, gt=0, le=_MAX_SECONDS)


class StorageSettings(_Section):
    """``[storage]``: where sessions and images are kept (``silica.storage``; docs/deploy.md).
    Unset, both stay under ``SILICA_HOME``: sessions in SQLite, images in a folder."""

    # sessions: unset -> SQLite under SILICA_HOME; "postgresql://user:password@host/db"
    database: str | None = None
    # images: unset -> the content-addressed folder; "s3://bucket/prefix" (credentials and
    # endpoint from the usual AWS variables)
    images: str | None = None
    # how the page gets an image kept in object storage: through the daemon, or redirected
    # to a presigned URL of the store
    image_urls: Literal["daemon", "presigned"] = "daemon"

    @field_validator("database", mode="before")
    @classmethod
    def _database(cls, value: object) -> object:
        if isinstance(value, str) and not re.match(r"^(postgres|postgresql)://", value):
            raise ValueError('must be a PostgreSQL URL such as "postgresql://HOST:5432/DBNAME" '
                             "(leave it unset to keep sessions in SQLite under SILICA_HOME)")
        return value

    @field_validator("images", mode="before")
    @classmethod
    def _images(cls, value: object) -> object:
        if isinstance(value, str) and not re.match(
                r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?$", value):
            raise ValueError('must be "s3://BUCKET" or "s3://BUCKET/PREFIX" with a bucket name '
                             "of 3-63 lowercase letters, digits, '.' or '-' (leave it unset to "
                             "keep images in SILICA_HOME/images)")
        return value


class WorkerSettings(_Section):
    """``[worker]``: ``silica worker`` processes, which take turns from Redis."""

    # seconds a turn stays owned by a worker that stopped beating; then another claims it
    lease: float = Field(default=30.0, ge=1, le=_MAX_SECONDS)
    # turns one worker runs at once
    concurrency: int = Field(default=8, ge=1, le=_MAX_COUNT)


class ResidentSettings(_Section):
    """``[resident]``: whether ``ask``, ``chat``, ``tools run`` and ``tools list`` use a
    resident process (read with the stdlib alone before the CLI loads, by
    ``silica.resident.settings``; checked here)."""

    enabled: bool = True
    idle: int = Field(default=600, ge=1, le=_MAX_COUNT)


ImagesSetting = Literal["auto", "kitty", "iterm2", "sixel", "blocks", "off"]
"""What ``[display] images`` may say: how images are drawn in the terminal."""


class DisplaySettings(_Section):
    """``[display]``: how images are drawn in the terminal (``silica.display.detect``):
    ``"auto"`` (the terminal's own protocol, found from its environment and answers, else
    half-block cells), one protocol by name, or ``"off"`` (a line of text per image)."""

    images: ImagesSetting = "auto"


class Settings(_Section):
    provider: str = "anthropic"
    model: str | None = None
    vision: bool | None = None
    max_turns: int = Field(default=25, ge=1, le=_MAX_COUNT)
    max_tokens: int = Field(default=4096, ge=1, le=10_000_000)
    # characters of one tool result's text the model gets; the rest is saved to a file
    max_result_chars: int = Field(default=100_000, ge=1_000, le=1_000_000_000)
    system: str | None = None
    images: ImageOverrides = Field(default_factory=ImageOverrides)
    aging: AgingSettings = Field(default_factory=AgingSettings)
    tools: ToolSettings = Field(default_factory=ToolSettings)
    read_file: ReadFileSettings = Field(default_factory=ReadFileSettings)
    store: StoreSettings = Field(default_factory=StoreSettings)
    mcp: McpSettings = Field(default_factory=McpSettings)
    shell: ShellSettings = Field(default_factory=ShellSettings)
    sandbox: SandboxSettings = Field(default_factory=SandboxSettings)
    serve: ServeSettings = Field(default_factory=ServeSettings)
    resident: ResidentSettings = Field(default_factory=ResidentSettings)
    openai: OpenAISettings = Field(default_factory=OpenAISettings)
    anthropic: AnthropicSettings = Field(default_factory=AnthropicSettings)
    display: DisplaySettings = Field(default_factory=DisplaySettings)
    storage: StorageSettings = Field(default_factory=StorageSettings)
    worker: WorkerSettings = Field(default_factory=WorkerSettings)
    agents: dict[str, AgentProfile] = Field(default_factory=dict)

    @field_validator("agents")
    @classmethod
    def _agent_names(cls, agents: dict[str, AgentProfile]) -> dict[str, AgentProfile]:
        bad = [name for name in agents if not _AGENT_NAME.match(name)]
        if bad:
            raise ValueError(f"{bad[0][:80]!r} is not an agent name (1-64 letters, digits, "
                             "'_', '.' or '-', starting with a letter or digit)")
        return agents


_ENV = {
    "SILICA_PROVIDER": "provider",
    "SILICA_MODEL": "model",
    "SILICA_VISION": "vision",
    "SILICA_MAX_TURNS": "max_turns",
    "SILICA_DATABASE": "storage.database",
    "SILICA_IMAGES": "storage.images",
}


def load_settings(home: Path | None = None,
                  environ: Mapping[str, str] | None = None) -> Settings:
    """Settings from ``<home>/config.toml`` (if present) with the environment on top."""
    environ = os.environ if environ is None else environ
    path = (home or silica_home()) / CONFIG_NAME
    data: dict[str, Any] = {}
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        pass
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}; fix the file or move it away") \
            from exc
    for var, key in _ENV.items():
        if environ.get(var):
            section, _, name = key.rpartition(".")
            target = data
            if section:
                found = data.get(section)
                target = data[section] = dict(found) if isinstance(found, dict) else {}
            target[name] = environ[var]
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_explain(exc, path, environ)) from exc


def _explain(exc: ValidationError, path: Path, environ: Mapping[str, str]) -> str:
    env_by_key = {v: k for k, v in _ENV.items()}
    problems = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"])
        from_env = key in env_by_key and environ.get(env_by_key[key])
        where = f"${env_by_key[key]}" if from_env else str(path)
        if err["type"] == "extra_forbidden":
            msg = "unknown key" + _did_you_mean(err["loc"])
        elif err["type"] in _BOUNDS:  # "must be greater than 0, not -1"
            msg = (err["msg"].replace("Input should be", "must be") +
                   f", not {_plain_value(err['input'])}")
        else:
            msg = err["msg"].removeprefix("Value error, ")
        problems.append(f"{where}: {key}: {msg}")
    return "; ".join(problems)


_BOUNDS = {"greater_than", "greater_than_equal", "less_than", "less_than_equal"}


def _plain_value(value: object) -> str:
    """A number as a person writes it (``-1``, not ``-1.0``); anything else as TOML would
    show it, quoted when a string."""
    if isinstance(value, float):
        return f"{value:g}"
    return repr(value) if isinstance(value, str) else str(value)


def _did_you_mean(loc: tuple[int | str, ...]) -> str:
    """"; did you mean 'KEY'?" for the known key of ``loc``'s section closest to its last
    part, or "" when none is close."""
    import difflib

    known = _section_keys(loc[:-1])
    close = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _section_keys(loc: tuple[int | str, ...]) -> list[str]:
    """The keys the section at ``loc`` (a path of keys into ``Settings``) may hold; a table
    of named entries (``agents.NAME``) is walked through to its entries' section."""
    model: type[BaseModel] | None = Settings
    entries = False  # the previous key was a table of named entries: this part is a name
    for part in loc:
        if model is None:
            return []
        if entries:
            entries = False
            continue
        field = model.model_fields.get(str(part))
        if field is None:
            return []
        model, entries = _section_of(field.annotation)
    return list(model.model_fields) if model is not None else []


def _section_of(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    """The section model an annotation holds, and whether it holds it as a table of named
    entries (``dict[str, Model]``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    args = typing.get_args(annotation)
    for arg in args:
        model, _ = _section_of(arg)
        if model is not None:
            return model, typing.get_origin(annotation) is dict
    return None, False
