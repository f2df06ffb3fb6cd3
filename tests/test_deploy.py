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

import asyncio
import base64
import contextlib
import hashlib
import io
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

import pg_server
import pytest
import redis
import yaml
from PIL import Image
from redis_server import RedisServer
from s3_server import S3Server
from serve_daemon import Daemon, SseReader, free_port, picture_tool, wait_until_ready
from wire import anthropic_server, text, tool_call

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
COMPOSE = DEPLOY / "compose.yaml"
COMPOSE_BIN = shutil.which("docker-compose")
FRONTS = ("front-1", "front-2")
WORKERS = ("worker-1", "worker-2")
ENGINES = ("postgres", "redis", "objects")
SECRETS = ("POSTGRES_PASSWORD", "REDIS_PASSWORD", "S3_ACCESS_KEY", "S3_SECRET_KEY",
           "SILICA_SERVE_TOKEN")

def env_file(folder: Path, values: dict[str, str]) -> Path:
    path = folder / "compose.env"
    path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    return path


def compose(env: Path, *args: str) -> subprocess.CompletedProcess:
    """``docker-compose -f deploy/compose.yaml --env-file ENV ARGS``, as a user runs it."""
    assert COMPOSE_BIN, "docker-compose is not installed: apt-get install docker-compose"
    return subprocess.run([COMPOSE_BIN, "-f", str(COMPOSE), "--env-file", str(env), *args],
                          capture_output=True, text=True, timeout=120, cwd=DEPLOY)


def resolved(env: Path) -> dict:
    """The compose file as compose resolves it: anchors merged, ``${...}`` filled from
    ``env``."""
    done = compose(env, "config")
    assert done.returncode == 0, done.stderr
    return yaml.safe_load(done.stdout)


# -- the file is valid ---------------------------------------------------------------------


def test_compose_accepts_the_file_with_its_secrets_and_names_a_missing_one(tmp_path):
    given = {name: f"value-of-{name.lower()}" for name in SECRETS}
    done = compose(env_file(tmp_path, given), "config", "-q")
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""

    def without(missing: str) -> subprocess.CompletedProcess:
        folder = tmp_path / missing
        folder.mkdir()
        partial = {k: v for k, v in given.items() if k != missing}
        return compose(env_file(folder, partial), "config", "-q")

    with ThreadPoolExecutor(len(SECRETS)) as pool:
        refused = dict(zip(SECRETS, pool.map(without, SECRETS), strict=True))
    for missing, done in refused.items():
        assert done.returncode != 0
        assert f"set {missing} in .env" in done.stderr, done.stderr


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


def test_the_image_installs_every_extra_it_names_and_bubblewrap():
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"])
    [named] = re.findall(r"pip install [^\n]*\"\.\[([\w,]+)\]\"", dockerfile)
    assert set(named.split(",")) == {"serve", "redis", "postgres", "s3"}
    assert set(named.split(",")) <= extras, extras
    assert re.search(r"apt-get install [^\n]*\bbubblewrap\b", dockerfile)
    assert re.search(r"^USER (?!root)\w+", dockerfile, re.M)
    copied = re.findall(r"^COPY (\S+)", dockerfile, re.M)
    for path in copied:
        assert (ROOT / path).exists(), path


# -- its silica services run ------------------------------------------------------------------
#
# What a container gives a service, and what the test gives its local process instead.

CONTAINER_HOME = "/home/silica/.silica"
CONTAINER_TOOLS = "/srv/silica/tools"
CONTAINER_HEALTHCHECK = "/srv/silica/healthcheck.py"
CONTAINER_PORT = "8700"
WITHHELD = ("SILICA_", "AWS_", "PG", "ANTHROPIC_", "OPENAI_", "OLLAMA_", "GEMINI_", "GOOGLE_")


def card_png(size=(240, 160), color=(200, 60, 40)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="PNG")
    return buf.getvalue()


class Localised:
    """A compose service as a local process: ``argv``, ``env``, ``cwd`` and its ``port``."""

    def __init__(self, name: str, service: dict, root: Path, hosts: dict[str, str],
                 tools: Path) -> None:
        self.name, self.port = name, free_port()
        self.home = root / name / "home"  # each container has a SILICA_HOME of its own
        self.cwd = root / name / "workspace"  # the image's WORKDIR
        self.home.mkdir(parents=True)
        self.cwd.mkdir(parents=True)
        paths = {CONTAINER_HOME: str(self.home), CONTAINER_TOOLS: str(tools)}
        volumes = [v.split(":")[1] for v in service.get("volumes", [])]
        assert CONTAINER_TOOLS in volumes, volumes

        def local(value: str) -> str:
            for container, here in hosts.items():
                value = value.replace(f"@{container}", f"@{here}").replace(
                    f"//{container}", f"//{here}")
            return paths.get(value, value)

        base = {k: v for k, v in os.environ.items() if not k.startswith(WITHHELD)}
        self.env = {**base, "PYTHONUNBUFFERED": "1",
                    **{k: local(str(v)) for k, v in service["environment"].items()}}
        command = list(service["command"])
        assert command[0] == "silica", command
        argv = [sys.executable, "-m", "silica", *command[1:]]
        for flag, value in (("--host", "127.0.0.1"), ("--port", str(self.port))):
            if flag in argv:
                argv[argv.index(flag) + 1] = value
        self.argv = argv
        self.healthcheck = [local(str(a)) for a in service.get("healthcheck", {}).get("test", [])]

    def start(self) -> subprocess.Popen:
        """The process, its output in ``stdout`` and ``stderr`` beside its home."""
        self.logs = self.home.parent
        with open(self.logs / "stdout", "wb") as out, open(self.logs / "stderr", "wb") as err:
            self.proc = subprocess.Popen(self.argv, cwd=self.cwd, env=self.env, stdout=out,
                                         stderr=err, stdin=subprocess.DEVNULL)
        return self.proc

    def said(self) -> str:
        return (self.logs / "stderr").read_text(errors="replace")

    def health(self) -> subprocess.CompletedProcess:
        """The service's own healthcheck command, run here."""
        check = self.healthcheck
        assert check[:2] == ["CMD", "python"], check
        argv = [sys.executable, *(str(DEPLOY / "healthcheck.py") if a == CONTAINER_HEALTHCHECK
                                  else a.replace(f":{CONTAINER_PORT}", f":{self.port}")
                                  for a in check[2:])]
        return subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=60)


def wait_for_worker(service: Localised) -> None:
    """Until the worker says it takes turns (it has reached Redis)."""
    deadline = time.monotonic() + 120
    while "takes turns from" not in service.said():
        assert service.proc.poll() is None, f"{service.name} exited:\n{service.said()}"
        assert time.monotonic() < deadline, f"{service.name} did not start:\n{service.said()}"
        time.sleep(0.05)


def stop(services: list[Localised], grace: float = 15.0) -> None:
    """SIGTERM to every one at once, as ``docker compose down`` does; SIGKILL to any still
    running after ``grace`` seconds (the test is not about how they stop)."""
    for service in services:
        if service.proc.poll() is None:
            service.proc.terminate()
    deadline = time.monotonic() + grace
    for service in services:
        try:
            service.proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            service.proc.kill()
            service.proc.wait()
        said = service.said()
        if said.strip():
            sys.stderr.write(f"--- {service.name}, stderr ---\n{said}")


@contextlib.contextmanager
def engines(root: Path, secret: dict[str, str], config: dict):
    """Postgres, Redis and the S3 server, set up as the compose file sets up its own: the
    database and user of ``SILICA_DATABASE`` with ``POSTGRES_PASSWORD``, Redis with
    ``REDIS_PASSWORD``, the bucket of ``SILICA_IMAGES`` (the ``buckets`` service's work),
    whose credentials go into ``secret``. Yields the address of each compose host name."""
    env = config["services"]["front-1"]["environment"]
    database = urlsplit(env["SILICA_DATABASE"])
    images = urlsplit(env["SILICA_IMAGES"])
    running: list = []
    try:
        redis_server = RedisServer(root / "redis").start()
        running.append(redis_server)
        with redis.Redis(port=redis_server.port) as client:
            client.config_set("requirepass", secret["REDIS_PASSWORD"])
        pg = pg_server.PostgresServer(root / "pg").start()
        running.append(pg)
        assert database.username == pg_server.USER, database
        if database.path.lstrip("/") != "silica":
            pg.new_database(database.path.lstrip("/"))
        secret["POSTGRES_PASSWORD"] = pg_server.PASSWORD
        s3 = S3Server(root / "s3", bucket=images.hostname, prefix=images.path.strip("/"))
        running.append(s3.start())
        # the store's own user for silica, as the compose file's store has (its root user)
        iam = s3.client("iam")
        iam.create_user(UserName="compose")
        iam.put_user_policy(UserName="compose", PolicyName="all", PolicyDocument=json.dumps({
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}))
        key = iam.create_access_key(UserName="compose")["AccessKey"]
        secret.update(S3_ACCESS_KEY=key["AccessKeyId"], S3_SECRET_KEY=key["SecretAccessKey"])
        queue = urlsplit(env["SILICA_SERVE_REDIS"])
        yield {f"{queue.hostname}:{queue.port}": f"127.0.0.1:{redis_server.port}",
               f"{database.hostname}:{database.port}": f"127.0.0.1:{pg.port}",
               urlsplit(env["AWS_ENDPOINT_URL"]).netloc: f"127.0.0.1:{s3.port}"}
    finally:
        for server in reversed(running):
            getattr(server, "remove", server.stop)()


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    """The compose file's two fronts and two workers as local processes, over a real
    Postgres, Redis and S3 server set up as the compose file's engines are (the same user,
    database, passwords and bucket), and a scripted model."""
    root = tmp_path_factory.mktemp("deploy")
    secret = {name: secrets.token_urlsafe(12) for name in SECRETS}
    tools = root / "tools"
    picture_tool(tools, card_png())
    started: list[Localised] = []
    placeholders = resolved(env_file(root, {name: "x" for name in SECRETS}))
    with anthropic_server([]) as model, engines(root, secret, placeholders) as hosts:
        values = {**secret, **model.env, "SILICA_PROVIDER": "anthropic"}
        config = resolved(env_file(root, values))
        services = {name: Localised(name, config["services"][name], root, hosts, tools)
                    for name in (*WORKERS, *FRONTS)}
        try:
            for service in services.values():
                service.start()
                started.append(service)
            fronts = {}
            for name in FRONTS:
                service = services[name]
                daemon = Daemon(service.home, service.port, service.proc,
                                secret["SILICA_SERVE_TOKEN"], service.logs)
                wait_until_ready(daemon)
                fronts[name] = daemon
            for name in WORKERS:
                wait_for_worker(services[name])
            yield {"fronts": fronts, "services": services, "model": model,
                   "secret": secret, "root": root}
        finally:
            stop(started)


def test_a_turn_sent_to_one_front_is_seen_whole_through_the_other(deployment):
    one, other = deployment["fronts"]["front-1"], deployment["fronts"]["front-2"]
    deployment["model"].add(text("Drawing it. ") + tool_call("picture"), text("A red card."))
    upload = card_png((120, 80), (20, 90, 200))
    with one.client() as http:
        sid = http.post("/sessions", json={}).json()["session_id"]

    async def turn():
        async with SseReader(other, sid) as sse:
            async with one.async_client() as http:
                sent = await http.post(f"/sessions/{sid}/messages", json={
                    "message": "draw a card", "images": [{
                        "data": base64.b64encode(upload).decode(), "mime": "image/png",
                        "name": "mine.png"}]})
            assert sent.status_code == 202, sent.text
            return await sse.until("turn_end")

    events = asyncio.run(turn())
    names = [name for name, _ in events]
    assert names[0] == "message" and names[-1] == "turn_end", names
    for once in ("message", "tool_call", "tool_result", "image", "turn_end"):
        assert names.count(once) == 1, names
    assert names.index("tool_call") < names.index("tool_result") < names.index("image")
    data = dict(events)
    assert data["turn_end"]["text"] == "A red card."
    assert data["turn_end"]["stop_reason"] == "end_turn"
    assert "".join(d["text"] for n, d in events if n == "text_delta") == \
        "Drawing it. A red card."

    # the other front reads the whole session, and serves both images from the store
    with other.client() as http:
        history = http.get(f"/sessions/{sid}/history").json()
        assert history["turns"][-1]["status"] == "complete"
        items = [item for m in history["messages"] for item in m["content"]]
        [result] = [item for item in items if item["type"] == "tool_result"]
        [tool_image] = [part for part in result["content"] if part["type"] == "image_ref"]
        [sent_image] = [item for item in items if item["type"] == "image_ref"]
        for image in (tool_image, sent_image):
            for front in (other, one):
                with front.client() as client:
                    got = client.get(image["url"])
                assert got.status_code == 200, got.text
                assert hashlib.sha256(got.content).hexdigest() == image["image_id"]
    assert (tool_image["width"], tool_image["height"]) == (240, 160)
    assert (sent_image["width"], sent_image["height"]) == (120, 80)
    assert data["image"]["image_id"] == tool_image["image_id"]


def test_each_front_passes_its_healthcheck_and_a_wrong_token_fails_it(deployment):
    for name in FRONTS:
        service = deployment["services"][name]
        done = service.health()
        assert done.returncode == 0, done.stderr
        service.env["SILICA_SERVE_TOKEN"], token = "wrong", service.env["SILICA_SERVE_TOKEN"]
        try:
            done = service.health()
        finally:
            service.env["SILICA_SERVE_TOKEN"] = token
        assert done.returncode == 1
        assert "HTTP 401" in done.stderr, done.stderr
