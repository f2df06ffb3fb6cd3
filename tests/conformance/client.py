"""The command the conformance harness runs for its client scenarios: silica as a user runs it.

    conformance client --command "python tests/conformance/client.py" --scenario NAME

The harness gives the server's URL as the last argument, the scenario in
``MCP_CONFORMANCE_SCENARIO``, its data in ``MCP_CONFORMANCE_CONTEXT`` (JSON) and the revision
in ``MCP_CONFORMANCE_PROTOCOL_VERSION``. This writes a ``config.toml`` naming the URL as
``[mcp.servers.test]`` in a fresh ``SILICA_HOME`` and runs the real ``silica tools list
--json`` and ``silica tools run test__TOOL`` commands the scenario needs, as subprocesses:

- the context's ``toolCalls`` when it names some (the arguments the scenario checks);
- ``json-schema-2020-12-preservation``: the focal tool's schema as silica holds it, echoed;
- ``initialize`` and ``json-schema-ref-no-deref``: the listing alone (their servers
  answer no ``tools/call``);
- otherwise every tool silica lists for the server, with arguments made from its schema
  (silica's own filtering decides which tools there are to call); these commands run a few
  at a time, as several programs would use silica at once.

Auth scenarios add an ``[mcp.servers.test.oauth]`` table from the context (``client_id``,
``client_secret``, ``scopes``, ``client_metadata_url``) with ``approve = "direct"``; with no
``client_id`` given, silica's client id is the harness's metadata document URL
(``CLIENT_METADATA_URL``), and dynamic registration is the fallback where it is refused; the
scenarios whose servers ask for values (elicitation, ``sep-2322``) set ``[mcp]
elicitation = "defaults"``. Exits non-zero when a command
failed, with what it said on stderr.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

SERVER = "test"
PREFIX = f"{SERVER}__"
FOCAL, ECHO = "json_schema_2020_12_tool", "json_schema_echo"
LIST_ONLY = {"initialize", "json-schema-ref-no-deref"}  # their servers answer no tools/call
ELICITING = ("elicitation", "sep-2322")  # scenarios whose servers ask for values
# The client metadata document the harness's authorization servers accept as a client id.
CLIENT_METADATA_URL = "https://conformance-test.local/client-metadata.json"
TIMEOUT = 120  # seconds for one silica command (the harness's --timeout bounds them all)
PARALLEL = 4  # silica commands at once: the harness gives a client 30 s in all


def toml_string(value: str) -> str:
    return json.dumps(value)  # a JSON string is a TOML basic string


def config_text(url: str, scenario: str, context: dict[str, Any]) -> str:
    lines = ["[mcp]", "timeout = 20"]
    if scenario.startswith(ELICITING):
        lines.append('elicitation = "defaults"')
    lines += ["", f"[mcp.servers.{SERVER}]", f"url = {toml_string(url)}"]
    if scenario.startswith("auth/"):
        lines += ["", f"[mcp.servers.{SERVER}.oauth]", 'approve = "direct"']
        for key, name in (("client_id", "client_id"), ("client_secret", "client_secret"),
                          ("client_metadata_url", "client_metadata_url")):
            if isinstance(context.get(key), str):
                lines.append(f"{name} = {toml_string(context[key])}")
        if not isinstance(context.get("client_id"), str):  # none given: silica names itself
            lines.append(f"client_metadata_url = {toml_string(CLIENT_METADATA_URL)}")
        scopes = context.get("scopes") or context.get("scope")
        if isinstance(scopes, str):
            scopes = scopes.split()
        if isinstance(scopes, list) and scopes:
            lines.append("scopes = [" + ", ".join(toml_string(str(s)) for s in scopes) + "]")
    return "\n".join(lines) + "\n"


def example(schema: dict[str, Any]) -> Any:
    """A value that fits ``schema`` (its default, first enum member, or a plain one)."""
    if "default" in schema:
        return schema["default"]
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    return {"integer": 1, "number": 1, "boolean": True, "array": [], "null": None,
            "object": arguments(schema)}.get(kind or "string", "x")


def arguments(schema: dict[str, Any]) -> dict[str, Any]:
    """Arguments for a tool: a value for each required property."""
    props = schema.get("properties") or {}
    return {name: example(props.get(name) or {}) for name in schema.get("required") or []
            if isinstance(props.get(name, {}), dict)}


class Silica:
    """Runs silica commands in one fresh home; remembers whether any failed."""

    def __init__(self, home: Path) -> None:
        self.env = {**os.environ, "SILICA_HOME": str(home), "SILICA_RESIDENT": "0",
                    "NO_COLOR": "1"}
        self.failed = False

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "silica", *args]
        try:
            done = subprocess.run(argv, env=self.env, capture_output=True, text=True,
                                  timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            print(f"silica {' '.join(args)} did not finish within {TIMEOUT} s", file=sys.stderr)
            self.failed = True
            return subprocess.CompletedProcess(argv, 124, "", "")
        print(f"$ silica {' '.join(args)} -> {done.returncode}\n{done.stdout}", flush=True)
        if done.stderr:
            print(done.stderr, file=sys.stderr, flush=True)
        if done.returncode != 0:
            self.failed = True
        return done

    def tools(self) -> list[dict[str, Any]]:
        done = self.run("tools", "list", "--json", "--refresh")
        if done.returncode != 0:
            return []
        listed = json.loads(done.stdout)
        return [t for t in listed if str(t.get("name", "")).startswith(PREFIX)]

    def spec(self, tool: str) -> dict[str, Any]:
        done = self.run("tools", "spec", PREFIX + tool)
        return json.loads(done.stdout) if done.returncode == 0 else {}

    def call(self, tool: str, args: dict[str, Any]) -> None:
        self.run("tools", "run", PREFIX + tool, "--json", "--input", json.dumps(args))


def schema_of(spec: dict[str, Any]) -> dict[str, Any]:
    for key in ("input_schema", "inputSchema", "parameters"):
        if isinstance(spec.get(key), dict):
            return spec[key]
    return {}


def main() -> int:
    url = sys.argv[-1]
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    with tempfile.TemporaryDirectory(prefix="silica-conformance-") as tmp:
        home = Path(tmp)
        (home / "config.toml").write_text(config_text(url, scenario, context))
        silica = Silica(home)
        listed = silica.tools()
        names = [str(t["name"])[len(PREFIX):] for t in listed]
        if context.get("toolCalls"):
            for call in context["toolCalls"]:
                silica.call(call["name"], call.get("arguments") or {})
        elif scenario in LIST_ONLY:
            pass
        elif scenario == "json-schema-2020-12-preservation":
            silica.call(ECHO, {"schema": schema_of(silica.spec(FOCAL))})
        else:  # each tool's schema, then each call: at once, every one its own process
            with ThreadPoolExecutor(PARALLEL) as pool:
                schemas = list(pool.map(lambda n: schema_of(silica.spec(n)), names))
                list(pool.map(lambda n, s: silica.call(n, arguments(s)), names, schemas))
        return 1 if silica.failed else 0


if __name__ == "__main__":
    sys.exit(main())
