"""Images in an S3-compatible object store (``[storage] images = "s3://..."``), against a real
process speaking the S3 API (``tests/s3_server.py``) and silica's real commands.

One ``silica ask`` stores a tool's image in the bucket; other silica homes, whose image
folders are empty as on another machine, then show it (``sessions show``) and serve it
(``silica serve``, through the daemon or by a presigned URL). An object changed in the
bucket is refused, never shown or sent to the model; a store that cannot be used is one
clear line, at start or as the notice of the image it could not keep.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import httpx2
import pytest
from conftest import script_tool, simple_spec
from s3_server import S3Server
from serve_daemon import PROVIDER_VARS, free_port, picture_tool, start_daemon
from test_serve_api import png
from wire import anthropic_server, text, tool_call

IMAGE = png((64, 48), (10, 200, 30))
NAME = hashlib.sha256(IMAGE).hexdigest() + ".png"

PEEK = """
import os
secrets = [{secret!r}, {token!r}]
names = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
seen = [n for n in names if n in os.environ] + \\
    [k for k, v in os.environ.items() if any(s in v for s in secrets)]
print("env:", "seen " + ",".join(seen) if seen else "clean")
pid, found, read = os.getppid(), [], 0
while pid > 1:
    try:
        block = open(f"/proc/{{pid}}/environ", "rb").read()
        read += 1
        found += [pid for s in secrets if s.encode() in block]
    except OSError:
        pass
    pid = int(open(f"/proc/{{pid}}/stat").read().rsplit(")", 1)[1].split()[1])
print("proc:", f"seen in {{found}}" if found else "clean", f"({{read}} read)")
"""


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    server = S3Server(tmp_path_factory.mktemp("s3")).start()
    yield server
    server.stop()


def store_env(s3: S3Server, **more: str) -> dict[str, str]:
    """``s3``'s AWS variables, silica's images in it, and nothing of this machine's AWS."""
    return {**s3.env, "SILICA_IMAGES": s3.url,
            "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
            "AWS_EC2_METADATA_DISABLED": "true", **more}


def silica(home: Path, *args: str, env: dict[str, str], stdin: str | None = None,
           timeout: float = 300) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items()
            if k not in PROVIDER_VARS and not k.startswith("AWS_")}
    return subprocess.run([sys.executable, "-m", "silica", *args], input=stdin,
                          capture_output=True, text=True, timeout=timeout, cwd=home.parent,
                          env={**base, "SILICA_HOME": str(home), "SILICA_RESIDENT": "0",
                               "SILICA_PROVIDER": "anthropic", **env})


def elsewhere(home: Path, to: Path) -> Path:
    """``home`` as another machine sees it: the same sessions, no image folder."""
    shutil.copytree(home, to, ignore=shutil.ignore_patterns("images", "run"))
    return to


def tool_text(request: dict) -> str:
    """The text of the tool result in a request to the fake Anthropic API."""
    result = next(b for b in request["messages"][-1]["content"] if b["type"] == "tool_result")
    content = result["content"]
    return content if isinstance(content, str) else "".join(c.get("text", "") for c in content)


@contextlib.contextmanager
def writes_denied(s3: S3Server):
    """The bucket refuses every new object for a while (a bucket policy), as a store whose
    writes fail mid-turn; reads and the bucket's HEAD still work."""
    policy = {"Version": "2012-10-17", "Statement": [{
        "Effect": "Deny", "Principal": "*", "Action": "s3:PutObject",
        "Resource": f"arn:aws:s3:::{s3.bucket}/*"}]}
    client = s3.client()
    client.put_bucket_policy(Bucket=s3.bucket, Policy=json.dumps(policy))
    try:
        yield
    finally:
        client.delete_bucket_policy(Bucket=s3.bucket)


@contextlib.contextmanager
def changed_in_bucket(s3: S3Server, key: str, data: bytes):
    """The object ``key`` holds ``data`` for a while (then its bytes as they were)."""
    client = s3.client()
    before = client.get_object(Bucket=s3.bucket, Key=key)["Body"].read()
    client.put_object(Bucket=s3.bucket, Key=key, Body=data)
    try:
        yield
    finally:
        client.put_object(Bucket=s3.bucket, Key=key, Body=before)


@pytest.fixture(scope="module")
def asked(s3, tmp_path_factory):
    """``silica ask`` with a tool that returns ``IMAGE`` and one that looks for the AWS
    secrets in its environment and its ancestors' ``/proc/<pid>/environ``."""
    home = tmp_path_factory.mktemp("asked") / "home"
    picture_tool(home / "tools", IMAGE)
    script_tool(home / "tools", "peek.py", simple_spec("peek"),
                body=PEEK.format(secret=s3.secret, token=s3.token))
    # the peek walks its ancestors: the hardening layer, without the sandbox's PID namespace
    (home / "config.toml").write_text('[sandbox]\nmode = "off"\n')
    with anthropic_server([tool_call("picture"), tool_call("peek"), text("Done.")]) as srv:
        done = silica(home, "ask", "--json", "draw", env={**srv.env, **store_env(s3)})
    assert done.returncode == 0, done.stderr
    return {"home": home, "sid": json.loads(done.stdout)["session"], "srv": srv,
            "done": done}


def test_ask_keeps_a_tools_image_in_the_bucket(s3, asked):
    key = s3.key(asked["sid"], NAME)
    kept = s3.client().get_object(Bucket=s3.bucket, Key=key)
    assert kept["Body"].read() == IMAGE and kept["ContentType"] == "image/png"
    assert "[image not kept" not in tool_text(asked["srv"].requests[1])
    assert asked["srv"].requests[1]["messages"][-1]["content"][0]["content"][-1]["type"] == \
        "image"  # the model got the image itself


def test_a_tool_sees_no_aws_secret(asked):
    report = tool_text(asked["srv"].requests[2])
    assert "env: clean" in report and "proc: clean" in report, report


def test_another_home_shows_the_image_from_the_store(s3, asked, tmp_path):
    other = elsewhere(asked["home"], tmp_path / "other")
    shown = silica(other, "sessions", "show", asked["sid"], "--no-images", env=store_env(s3))
    assert shown.returncode == 0, shown.stderr
    assert f"image/png, 64x48 px, {len(IMAGE):,} bytes" in shown.stdout + shown.stderr
    assert "image not shown" not in shown.stdout + shown.stderr
    assert (other / "images" / asked["sid"] / NAME).read_bytes() == IMAGE  # now cached


def test_a_changed_object_is_never_shown_nor_sent_to_the_model(s3, asked, tmp_path):
    other = elsewhere(asked["home"], tmp_path / "other")
    forged = png((64, 48), (250, 0, 0))
    with changed_in_bucket(s3, s3.key(asked["sid"], NAME), forged):
        shown = silica(other, "sessions", "show", asked["sid"], "--no-images",
                       env=store_env(s3))
        with anthropic_server([text("Seen.")]) as srv:
            chat = silica(other, "chat", "--resume", asked["sid"], stdin="again\n/exit\n",
                          env={**srv.env, **store_env(s3)})
    said = shown.stdout + shown.stderr
    assert shown.returncode == 0, said
    assert "[image not shown:" in said and "was changed after it was stored" in said
    assert chat.returncode == 0, chat.stderr
    sent = json.dumps(srv.requests[0])
    assert "was changed after it was stored" in sent  # the model is told it was dropped
    assert '"type": "image"' not in sent
    assert not (other / "images" / asked["sid"] / NAME).exists()  # nothing cached


# -- the daemon ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def daemon(s3, asked, tmp_path_factory):
    """``silica serve`` on a home with the asked session and no image folder."""
    home = elsewhere(asked["home"], tmp_path_factory.mktemp("served") / "home")
    with anthropic_server([]) as srv, \
            start_daemon(home, env={**srv.env, "SILICA_PROVIDER": "anthropic",
                                    **store_env(s3)}) as running:
        yield running, srv
        assert "Traceback" not in running.stderr()


def test_the_daemon_serves_an_image_it_never_had_from_the_store(asked, daemon):
    running, _ = daemon
    sid = asked["sid"]
    with running.client() as http:
        got = http.get(f"/sessions/{sid}/images/{NAME[:64]}")
        again = http.get(f"/sessions/{sid}/images/{NAME[:64]}",
                         headers={"If-None-Match": got.headers["etag"]})
        listed = {s["id"]: s for s in http.get("/sessions").json()["sessions"]}
        page = http.get("/")
    assert got.status_code == 200 and got.content == IMAGE
    assert got.headers["content-type"] == "image/png"
    assert got.headers["etag"] == f'"{NAME[:64]}"' and "immutable" in got.headers["cache-control"]
    assert again.status_code == 304
    assert listed[sid]["images"] == 1
    assert "img-src 'self' blob: data:;" in page.headers["content-security-policy"]


def test_the_daemon_refuses_an_object_whose_bytes_are_not_its_name(s3, asked, daemon):
    running, _ = daemon
    sid = asked["sid"]
    claimed = hashlib.sha256(b"what the name promises").hexdigest()
    s3.client().put_object(Bucket=s3.bucket, Key=s3.key(sid, f"{claimed}.png"),
                           Body=png((8, 8), (1, 2, 3)))
    with running.client() as http:
        got = http.get(f"/sessions/{sid}/images/{claimed}")
    assert got.status_code == 502, got.text
    error = got.json()["error"]
    assert error["code"] == "image_unavailable" and "was changed" in error["message"]
    assert not list((running.home / "images").rglob(f"{claimed}*"))


def test_an_upload_goes_to_the_store_and_leaves_it_with_its_session(s3, daemon):
    running, srv = daemon
    srv.script.clear()
    srv.add(text("A square."))
    upload = png((20, 20), (5, 5, 250))
    key_name = hashlib.sha256(upload).hexdigest() + ".png"
    with running.client() as http:
        sid = http.post("/sessions", json={}).json()["session_id"]
        sent = http.post(f"/sessions/{sid}/messages?wait=true",
                         files={"images[]": ("square.png", upload, "image/png")},
                         data={"message": "what is it?"})
        assert sent.status_code == 200, sent.text
        key = s3.key(sid, key_name)
        assert s3.client().get_object(Bucket=s3.bucket, Key=key)["Body"].read() == upload
        assert http.delete(f"/sessions/{sid}").status_code == 200
    left = s3.client().list_objects_v2(Bucket=s3.bucket, Prefix=s3.key(sid, ""))
    assert left.get("KeyCount", 0) == 0


def test_an_upload_the_store_refuses_is_a_507(s3, daemon):
    running, _ = daemon
    with running.client() as http:
        sid = http.post("/sessions", json={}).json()["session_id"]
        with writes_denied(s3):
            sent = http.post(f"/sessions/{sid}/messages",
                             files={"images[]": ("x.png", png((9, 9)), "image/png")},
                             data={"message": "what is it?"})
    assert sent.status_code == 507, sent.text
    error = sent.json()["error"]
    assert error["code"] == "image_not_stored" and "nothing was sent" in error["message"]
    assert s3.secret not in sent.text


def test_presigned_urls_send_the_page_to_the_store(s3, asked, tmp_path):
    home = elsewhere(asked["home"], tmp_path / "presigned")
    (home / "config.toml").write_text('[storage]\nimage_urls = "presigned"\n')
    sid = asked["sid"]
    with start_daemon(home, env={"SILICA_PROVIDER": "anthropic", **store_env(s3)}) as running, \
            running.client() as http:
        moved = http.get(f"/sessions/{sid}/images/{NAME[:64]}")
        page = http.get("/")
    assert moved.status_code == 307, moved.text
    location = moved.headers["location"]
    assert location.startswith(f"{s3.endpoint}/{s3.bucket}/{s3.key(sid, NAME)}?")
    assert moved.headers["cache-control"] == "no-store"
    assert f"img-src 'self' blob: data: {s3.endpoint};" in \
        page.headers["content-security-policy"]
    s3.signatures(False)  # moto cannot check a presigned URL's signature (s3_server.py)
    try:
        fetched = httpx2.get(location, timeout=30)
    finally:
        s3.signatures(True)
    assert fetched.status_code == 200 and fetched.content == IMAGE
    assert fetched.headers["content-type"] == "image/png"


# -- a store that cannot be used ----------------------------------------------------------


def test_a_store_that_refuses_writes_mid_turn_is_the_images_notice(s3, tmp_path):
    home = tmp_path / "home"
    picture_tool(home / "tools", png((30, 30), (99, 99, 0)))
    with anthropic_server([tool_call("picture"), text("No image.")]) as srv, writes_denied(s3):
        done = silica(home, "ask", "draw", env={**srv.env, **store_env(s3)})
    assert done.returncode == 0, done.stderr
    said = tool_text(srv.requests[1])
    assert "[image not kept:" in said and "could not be written to the image store" in said
    assert "(403)" in said and s3.secret not in said + done.stderr + done.stdout


def _no_bucket(s3: S3Server) -> dict[str, str]:
    return store_env(s3, SILICA_IMAGES="s3://no-such-bucket/images")


def _bad_secret(s3: S3Server) -> dict[str, str]:
    return store_env(s3, AWS_SECRET_ACCESS_KEY="wrong-secret-" + "x" * 28)


def _store_down(s3: S3Server) -> dict[str, str]:
    return store_env(s3, AWS_ENDPOINT_URL=f"http://127.0.0.1:{free_port()}")


@pytest.mark.parametrize(("broken", "says"), [
    (_no_bucket, "the bucket does not exist; create it, or name another in [storage] images"),
    (_bad_secret, "the store refused these credentials or their access (403); check "
                  "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN"),
    (_store_down, "the store cannot be reached (EndpointConnectionError); check that it "
                  "runs and AWS_ENDPOINT_URL"),
])
def test_ask_says_at_start_what_to_do_about_the_store(s3, tmp_path, broken, says):
    env = broken(s3)
    done = silica(tmp_path / "home", "ask", "hello",
                  env={**env, "ANTHROPIC_API_KEY": "sk-ant-unused"})
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cannot use the object store")
    assert says in lines[0]
    printed = done.stdout + done.stderr
    for secret in (env["AWS_SECRET_ACCESS_KEY"], env["AWS_SESSION_TOKEN"]):
        assert secret not in printed
    assert "Traceback" not in printed


def test_serve_says_at_start_what_to_do_about_the_store(s3, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    # (a serve that does not check would serve until killed: 60 s is ample for the check)
    done = silica(home, "serve", "--port", str(free_port()), env=_no_bucket(s3), timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "error: cannot use the object store (bucket 'no-such-bucket' at "
        f"{s3.endpoint}): the bucket does not exist; create it, or name another in "
        "[storage] images (or SILICA_IMAGES)"]
    assert s3.secret not in done.stdout + done.stderr

