"""The compose file of docs/deploy.md (``deploy/compose.yaml``) is valid, and its silica
services run.

No container engine or registry is reachable here, so nothing is pulled, built or run in a
container. The file is checked by ``docker-compose config`` and by reading it; then each of
its two fronts and two workers runs as a local process with the ``command`` and
``environment`` the file gives it (as ``docker-compose config`` resolves them), with only
what a container would give replaced: the service host names point at real local servers
(``postgresql``, ``redis-server``, a process speaking the S3 API), container paths at
temporary folders, the listen address and port at local ones, and the provider at a
scripted model server.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
COMPOSE = DEPLOY / "compose.yaml"
COMPOSE_BIN = shutil.which("docker-compose")
FRONTS = ("front-1", "front-2")
WORKERS = ("worker-1", "worker-2")
ENGINES = ("postgres", "redis", "objects")
SECRETS = ("POSTGRES_PASSWORD", "REDIS_PASSWORD", "S3_ACCESS_KEY", "S3_SECRET_KEY",
           "SILICA_SERVE_TOKEN")

needs_compose = pytest.mark.skipif(
    COMPOSE_BIN is None, reason="docker-compose is not installed (apt-get install docker-compose)")


def env_file(folder: Path, values: dict[str, str]) -> Path:
    path = folder / "compose.env"
    path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    return path


def compose(env: Path, *args: str) -> subprocess.CompletedProcess:
    """``docker-compose -f deploy/compose.yaml --env-file ENV ARGS``, as a user runs it."""
    return subprocess.run([COMPOSE_BIN, "-f", str(COMPOSE), "--env-file", str(env), *args],
                          capture_output=True, text=True, timeout=120, cwd=DEPLOY)


def resolved(env: Path) -> dict:
    """The compose file as compose resolves it: anchors merged, ``${...}`` filled from
    ``env``."""
    done = compose(env, "config")
    assert done.returncode == 0, done.stderr
    return yaml.safe_load(done.stdout)


# -- the file is valid ---------------------------------------------------------------------


@needs_compose
def test_compose_accepts_the_file_with_its_secrets_and_names_a_missing_one(tmp_path):
    secrets = {name: f"value-of-{name.lower()}" for name in SECRETS}
    done = compose(env_file(tmp_path, secrets), "config", "-q")
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    for missing in SECRETS:
        partial = {k: v for k, v in secrets.items() if k != missing}
        done = compose(env_file(tmp_path, partial), "config", "-q")
        assert done.returncode != 0
        assert f"set {missing} in .env" in done.stderr, done.stderr


@needs_compose
def test_every_service_is_there_started_in_order_with_healthchecks(tmp_path):
    config = resolved(env_file(tmp_path, {name: "x" for name in SECRETS}))
    services = config["services"]
    assert set(services) >= {*ENGINES, *FRONTS, *WORKERS}
    for engine in ENGINES:
        assert services[engine]["healthcheck"]["test"][0] == "CMD", engine
    for name in (*FRONTS, *WORKERS):
        waits = services[name]["depends_on"]
        for engine in ("postgres", "redis"):
            assert waits[engine] == {"condition": "service_healthy"}, (name, engine)
        # the bucket exists before any silica process starts
        assert waits["buckets"] == {"condition": "service_completed_successfully"}, name
        assert services["buckets"]["depends_on"]["objects"] == {
            "condition": "service_healthy"}
        env = services[name]["environment"]
        assert env["SILICA_DATABASE"].startswith("postgresql://")
        assert env["SILICA_IMAGES"].startswith("s3://")
        assert env["SILICA_SERVE_REDIS"].startswith("redis://")
    fronts = [services[name] for name in FRONTS]
    for front in fronts:
        assert front["command"][:2] == ["silica", "serve"]
        assert "--no-worker" in front["command"]
        assert front["healthcheck"]["test"][0] == "CMD"
    published = [front["ports"][0] for front in fronts]
    assert len({port.split(":")[-2] for port in published}) == 2, published
    for name in WORKERS:
        assert services[name]["command"][:2] == ["silica", "worker"]
    # every front and worker gets the same token and the same stores
    shared = ("SILICA_DATABASE", "SILICA_IMAGES", "SILICA_SERVE_REDIS", "AWS_ENDPOINT_URL")
    for key in shared:
        assert len({services[name]["environment"][key] for name in (*FRONTS, *WORKERS)}) == 1


def test_no_secret_is_written_in_the_file():
    """Every password, key and token is a ``${...}`` of the .env file, never a value."""
    text = COMPOSE.read_text()
    raw = yaml.safe_load(text)
    secretish = re.compile(r"PASSWORD|SECRET|TOKEN|_KEY|AUTH", re.I)
    found = []

    def walk(node) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if isinstance(key, str) and secretish.search(key) and isinstance(value, str):
                    found.append((key, value))
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(raw)
    assert len(found) >= 8
    assert [(k, v) for k, v in found if not re.fullmatch(r"\$\{\w+(:[-?][^}]*)?\}", v)] == []
    # a password inside a URL is a ${...} as well
    for url in re.findall(r"\w+://[^\s\"']+", text):
        if "@" in url:
            userinfo = url.split("://", 1)[1].rsplit("@", 1)[0]
            assert ":" not in userinfo or re.search(r":\$\{\w+", userinfo), url
    # .env is where they live, and it is never committed
    ignored = subprocess.run(["git", "check-ignore", "-q", str(DEPLOY / ".env")], cwd=ROOT)
    assert ignored.returncode == 0
    listed = set(re.findall(r"^(\w+)=", (DEPLOY / "env.example").read_text(), re.M))
    assert listed >= set(SECRETS)
