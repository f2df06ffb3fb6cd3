"""The message intake of `silica serve`: every bad upload is a clear 4xx JSON error before
anything is stored, and a 1 GB upload is cut off early while the daemon's memory stays flat.

Two servers, both real uvicorn processes on 127.0.0.1 spoken to over HTTP:

- the daemon itself (``python -m silica serve``, ``tests/serve_daemon.py``), its model the
  suite's Anthropic wire server: the issue's list of bad inputs, each checked as a person
  sees it (status, error JSON, the session's image folder and history unchanged);
- a one-route app that answers with what ``read_message`` returned or refused, so every
  refusal code, the JSON body, URL images and the session limit are seen in detail.

Memory is read from ``/proc/<pid>/status`` (VmHWM, VmRSS); no test asserts a time.
"""

from __future__ import annotations

import base64
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx2
import images_corpus as corpus
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from serve_daemon import Daemon, start_daemon
from wire import WireServer, anthropic_server, text

REPO = Path(__file__).resolve().parent.parent
MB = 1024 * 1024
CAP = 10 * MB  # [images] max_size_bytes, the default

INTAKE_APP = '''
import json, os
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route
from silica.config import load_settings
from silica.images.limits import ANTHROPIC
from silica.serve.uploads import UploadRefused, read_message

SETTINGS = load_settings()


async def messages(request):
    stored = int(request.query_params.get("stored", "0"))
    try:
        incoming = await read_message(request, settings=SETTINGS, limits=ANTHROPIC,
                                      stored_images=stored)
    except UploadRefused as exc:
        return JSONResponse({"error": {"code": exc.code, "message": exc.message}},
                            status_code=exc.status)
    return JSONResponse({"text": incoming.text, "workspace": incoming.workspace, "images": [
        {"mime": b.media_type, "width": b.width, "height": b.height, "source": b.source,
         "bytes": len(b.data)} for b in incoming.images]})


async def memory(request):
    status = open("/proc/self/status").read()
    return JSONResponse({k: int(status.split(k + ":")[1].split()[0]) * 1024
                         for k in ("VmHWM", "VmRSS")})


app = Starlette(routes=[Route("/messages", messages, methods=["POST"]),
                        Route("/memory", memory)])
'''


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen) -> None:
    for _ in range(600):
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited: {proc.stderr.read() if proc.stderr else ''}")
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError("the server did not start")


@pytest.fixture(scope="module")
def intake(tmp_path_factory) -> Iterator[str]:
    """The one-route intake app under uvicorn; its URL. Config: fetch_private on."""
    folder = tmp_path_factory.mktemp("intake")
    (folder / "intake_app.py").write_text(INTAKE_APP)
    home = folder / "home"
    home.mkdir()
    (home / "config.toml").write_text("[serve]\nfetch_private = true\nfetch_timeout = 5\n")
    port = free_port()
    env = {**os.environ, "SILICA_HOME": str(home), "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "intake_app:app", "--app-dir",
                             str(folder), "--port", str(port), "--log-level", "warning"],
                            cwd=folder, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        wait_for_port(port, proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def refused(response: httpx2.Response, status: int, code: str, *words: str) -> str:
    """The error's message, after checking the status, the JSON shape and the words."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and body["error"]["code"] == code, body
    message = body["error"]["message"]
    for word in words:
        assert word in message, message
    return message


def post_json(url: str, body, **params) -> httpx2.Response:
    return httpx2.post(f"{url}/messages", json=body, params=params, timeout=60)


def post_form(url: str, message: str | None = "look", files=(), **fields) -> httpx2.Response:
    data = dict(fields)
    if message is not None:
        data["message"] = message
    return httpx2.post(f"{url}/messages", data=data, files=list(files), timeout=60)


def post_raw(url: str, body, content_type: str) -> httpx2.Response:
    return httpx2.post(f"{url}/messages", content=body, timeout=120,
                       headers={"content-type": content_type})


# -- the intake: what it takes ----------------------------------------------------------------


def test_a_multipart_message_with_images_comes_back_checked_and_fitted(intake):
    files = [("images[]", ("shot.png", corpus.screenshot_png(), "image/png")),
             ("images[]", ("photo.jpg", corpus.photo_jpeg(), "image/jpeg"))]
    answer = post_form(intake, "what is wrong here?", files, workspace="/srv/app").json()
    assert answer["text"] == "what is wrong here?" and answer["workspace"] == "/srv/app"
    shot, photo = answer["images"]
    assert shot == {**shot, "mime": "image/png", "width": 1429, "height": 804,
                    "source": "shot.png"}
    assert photo["mime"] == "image/jpeg" and photo["width"] * photo["height"] <= 1_150_000


def test_a_json_message_takes_base64_data_urls_and_image_urls(intake):
    with image_server() as root:
        answer = post_json(intake, {"message": "", "images": [
            {"data": b64(corpus.small_png()), "name": "a.png"},
            {"data": "data:image/webp;base64," + b64(corpus.small_webp())},
            {"data": "\n".join(textwrap.wrap(b64(corpus.small_jpeg()), 76)), "mime": "image/jpeg"},
            {"url": f"{root}/shot.png"},
        ]}).json()
    assert [i["mime"] for i in answer["images"]] == ["image/png", "image/webp", "image/jpeg",
                                                     "image/png"]
    assert [i["source"] for i in answer["images"]] == ["a.png", "image 2", "image 3", "shot.png"]
    assert answer["text"] == "" and answer["workspace"] is None


def test_an_image_without_text_is_a_message_but_nothing_at_all_is_not(intake):
    files = [("images[]", ("a.png", corpus.small_png(), "image/png"))]
    assert post_form(intake, "", files).status_code == 200
    blank = b'--b\r\nContent-Disposition: form-data; name="message"\r\n\r\n  \r\n--b--\r\n'
    refused(post_raw(intake, blank, "multipart/form-data; boundary=b"), 400, "empty_message",
            "write something")
    refused(post_json(intake, {"message": ""}), 400, "empty_message")


# -- the intake: every refusal ----------------------------------------------------------------


@pytest.mark.parametrize(("name", "data", "mime", "words"), [
    ("cut.png", corpus.truncated_png(), "image/png", ("cut.png", "truncated")),
    ("photo.png", corpus.small_jpeg(), "image/png", ("photo.png", "labelled image/png", "JPEG")),
    ("logo.svg", corpus.svg(), "image/svg+xml", ("logo.svg", "not a raster image")),
    ("bomb.png", corpus.bomb_png(), "image/png", ("bomb.png", "megapixels", "not decoded")),
    ("notes.txt", b"just some text", "text/plain", ("notes.txt", "not in any image format")),
])
def test_a_bad_image_is_refused_by_name_in_either_body(intake, name, data, mime, words):
    message = refused(post_form(intake, "look", [("images[]", (name, data, mime))]), 422,
                      "invalid_image", "image 1", *words)
    assert message == refused(post_json(intake, {"message": "look", "images": [
        {"data": b64(data), "mime": mime, "name": name}]}), 422, "invalid_image")


def test_a_mime_its_data_url_contradicts_is_refused(intake):
    """Two types declared for one image must agree, whatever the bytes are: the route and
    the AI SDK's file parts read them through this one intake."""
    refused(post_json(intake, {"message": "look", "images": [
        {"data": "data:image/jpeg;base64," + b64(corpus.small_png()), "mime": "image/png",
         "name": "shot.png"}]}), 422, "invalid_image", 'image 1 ("shot.png")', "image/jpeg")
    agreeing = post_json(intake, {"message": "look", "images": [
        {"data": "data:image/png;base64," + b64(corpus.small_png()), "mime": "IMAGE/PNG"}]})
    assert agreeing.status_code == 200, agreeing.text
    assert [i["mime"] for i in agreeing.json()["images"]] == ["image/png"]


def test_the_eleventh_image_is_refused(intake):
    files = [("images[]", (f"{n}.png", corpus.small_png(), "image/png")) for n in range(11)]
    refused(post_form(intake, "look", files), 422, "too_many_images", "more than 10",
            "max_per_message")
    ten = {"message": "x", "images": [{"data": b64(corpus.small_png())}] * 10}
    assert len(post_json(intake, ten).json()["images"]) == 10
    refused(post_json(intake, {**ten, "images": ten["images"] * 2}), 422, "too_many_images")


def test_the_session_limit_counts_the_images_it_holds(intake):
    two = [("images[]", (f"{n}.png", corpus.small_png(), "image/png")) for n in range(2)]
    assert httpx2.post(f"{intake}/messages", params={"stored": 98}, data={"message": "x"},
                       files=two).status_code == 200
    response = httpx2.post(f"{intake}/messages", params={"stored": 99}, data={"message": "x"},
                           files=two)
    refused(response, 422, "session_image_limit", "holds 99 images", "1 more",
            "start a new session")


def test_an_image_over_the_byte_limit_is_refused_in_either_body(intake):
    big = b"\x89PNG\r\n\x1a\n" + bytes(12 * MB)
    refused(post_form(intake, "x", [("images[]", ("big.png", big, "image/png"))]), 413,
            "image_too_large", 'image 1 ("big.png")', "10,485,760 bytes")
    refused(post_json(intake, {"message": "x", "images": [{"data": b64(big), "name": "big"}]}),
            413, "image_too_large", "max_size_bytes")


@pytest.mark.parametrize(("body", "status", "code", "words"), [
    ({"images": []}, 400, "missing_message", ('"message"',)),
    ({"message": "x", "attachments": []}, 400, "unknown_field", ('"attachments"',)),
    ({"message": "x", "images": [{"data": "AAAA", "width": 3}]}, 400, "unknown_field",
     ('"images[0].width"',)),
    ({"message": "x", "images": [{"url": "http://x/", "data": "AAAA"}]}, 400, "invalid_field",
     ('both "url" and "data"',)),
    ({"message": 3}, 400, "invalid_field", ('"message" must be a string',)),
    ({"message": "x", "images": "a.png"}, 400, "invalid_field", ('"images" must be a list',)),
    ({"message": "x", "images": [{"data": "not base64!"}]}, 400, "invalid_base64",
     ("image 1", "base64")),
    ({"message": "x", "images": [{"url": "ftp://example.com/a.png"}]}, 422,
     "image_url_refused", ("image 1", "not an http or https URL")),
    ({"message": "x", "images": [{"url": "http://127.0.0.1:1/a.png"}]}, 422,
     "image_fetch_failed", ("image 1", "could not fetch http://127.0.0.1:1/a.png")),
    (["message"], 400, "invalid_json", ("must be an object",)),
])
def test_bad_json_bodies_are_refused(intake, body, status, code, words):
    refused(post_json(intake, body), status, code, *words)


def test_text_that_is_not_utf8_is_refused(intake):
    refused(post_raw(intake, b'{"message": "caf\xe9"}', "application/json"), 400,
            "invalid_text", "UTF-8")
    refused(post_raw(intake, b'{"message": "\\ud800"}', "application/json"), 400,
            "invalid_text", "lone surrogate")
    form = (b'--b\r\nContent-Disposition: form-data; name="message"\r\n\r\ncaf\xe9\r\n'
            b"--b--\r\n")
    refused(post_raw(intake, form, "multipart/form-data; boundary=b"), 400, "invalid_text",
            '"message"', "UTF-8")


@pytest.mark.parametrize(("body", "words"), [
    (b"this is not a form at all", ("malformed",)),
    (b'--b\r\nContent-Disposition: form-data; name="message"\r\n\r\nhello', ("ended before",)),
    (b"--b\r\nContent-Type: text/plain\r\n\r\nhello\r\n--b--\r\n", ("name=",)),
    (b"", ("ended before",)),
])
def test_malformed_multipart_is_refused(intake, body, words):
    refused(post_raw(intake, body, "multipart/form-data; boundary=b"), 400,
            "invalid_multipart", *words)


def test_unknown_duplicate_and_missing_form_fields_are_refused(intake):
    png = [("images[]", ("a.png", corpus.small_png(), "image/png"))]
    refused(post_form(intake, "x", png, model="other"), 400, "unknown_field", '"model"')
    refused(post_form(intake, "x", [("images", ("a.png", corpus.small_png(), "image/png"))]),
            400, "unknown_field", '"images"', 'files go in "images[]"')
    refused(post_form(intake, None, png), 400, "missing_message")
    twice = (b'--b\r\nContent-Disposition: form-data; name="message"\r\n\r\na\r\n'
             b'--b\r\nContent-Disposition: form-data; name="message"\r\n\r\nb\r\n--b--\r\n')
    refused(post_raw(intake, twice, "multipart/form-data; boundary=b"), 400,
            "duplicate_field", '"message"')


def test_a_body_of_another_type_is_refused(intake):
    refused(post_raw(intake, b"hello", "text/plain"), 415, "unsupported_media_type",
            "application/json or multipart/form-data")
    refused(post_form(intake, "a form without files"), 415, "unsupported_media_type",
            "not application/x-www-form-urlencoded")
    refused(post_raw(intake, b"--b--", "multipart/form-data"), 400, "invalid_multipart",
            "no boundary")


def test_a_declared_length_past_the_cap_is_refused_unread(intake):
    with socket.create_connection(("127.0.0.1", int(intake.rsplit(":", 1)[1]))) as conn:
        conn.sendall(b"POST /messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 1000000000000\r\n\r\n{")
        conn.settimeout(30)
        answer = b""
        while b"body_too_large" not in answer:  # the answer, however the reads split it
            piece = conn.recv(65536)
            if not piece:
                break
            answer += piece
    assert answer.startswith(b"HTTP/1.1 413") and b"body_too_large" in answer


def gigabyte_form() -> Iterator[bytes]:
    """A multipart body with one image part of 1 GiB, made as it is sent."""
    yield (b'--b\r\nContent-Disposition: form-data; name="message"\r\n\r\nlook\r\n'
           b'--b\r\nContent-Disposition: form-data; name="images[]"; filename="huge.png"\r\n'
           b"Content-Type: image/png\r\n\r\n\x89PNG\r\n\x1a\n")
    chunk = bytes(MB)
    for _ in range(1024):
        yield chunk
    yield b"\r\n--b--\r\n"


def test_a_gigabyte_upload_is_cut_off_and_memory_stays_flat(intake):
    before = httpx2.get(f"{intake}/memory").json()
    response = httpx2.post(f"{intake}/messages", content=gigabyte_form(), timeout=120,
                           headers={"content-type": "multipart/form-data; boundary=b"})
    refused(response, 413, "image_too_large", 'image 1 ("huge.png")')
    after = httpx2.get(f"{intake}/memory").json()
    assert after["VmHWM"] - before["VmHWM"] < 40 * MB, (before, after)


def gigabyte_json() -> Iterator[bytes]:
    """A JSON body whose one image is 1 GiB of base64, made as it is sent."""
    yield b'{"message": "look", "images": [{"name": "huge.png", "data": "'
    chunk = b"A" * MB
    for _ in range(1024):
        yield chunk
    yield b'"}]}'


def test_a_gigabyte_json_body_is_cut_off_at_its_cap_and_memory_stays_flat(intake):
    before = httpx2.get(f"{intake}/memory").json()
    response = httpx2.post(f"{intake}/messages", content=gigabyte_json(), timeout=120,
                           headers={"content-type": "application/json"})
    refused(response, 413, "body_too_large", "max_per_message, max_size_bytes")
    after = httpx2.get(f"{intake}/memory").json()
    assert after["VmHWM"] - before["VmHWM"] < 40 * MB, (before, after)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.sampled_from([
    b"--b\r\n", b"--b--\r\n", b"\r\n", b'Content-Disposition: form-data; name="message"\r\n',
    b'Content-Disposition: form-data; name="images[]"; filename="a.png"\r\n',
    b"Content-Type: image/png\r\n", b"hello", b"\x89PNG\r\n\x1a\n", b"\xff\xfe",
    b'name="workspace"', b"--", b";", b"\x00"]), max_size=14))
def test_any_multipart_body_gets_an_answer_never_a_crash(intake, pieces):
    response = post_raw(intake, b"".join(pieces), "multipart/form-data; boundary=b")
    assert response.status_code in (200, 400, 413, 422), response.text
    if response.status_code != 200:
        assert response.json()["error"]["message"]


# -- a server of images for URL uploads -------------------------------------------------------


class _Images(BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        body = corpus.screenshot_png()
        self.send_response(200)
        self.send_header("Content-Type", "image/png")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class image_server:
    def __enter__(self) -> str:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Images)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def test_an_image_url_is_fetched_through_the_same_checks(intake):
    with image_server() as root:
        answer = post_json(intake, {"message": "x", "images": [{"url": f"{root}/a/shot.png"}]})
    assert answer.json()["images"][0]["source"] == "shot.png"
    refused(post_json(intake, {"message": "x", "images": [{"url": "gopher://x/"}]}), 422,
            "image_url_refused")



# -- the daemon: the bad inputs ---------------------------------------------------------


@pytest.fixture(scope="module")
def model() -> Iterator[WireServer]:
    with anthropic_server() as srv:
        yield srv


@pytest.fixture(scope="module")
def daemon(model, tmp_path_factory) -> Iterator[Daemon]:
    home = tmp_path_factory.mktemp("serve-uploads") / "home"
    home.mkdir()
    with start_daemon(home, env={**model.env, "SILICA_PROVIDER": "anthropic"}) as running:
        yield running


@pytest.fixture(scope="module")
def session(daemon, model) -> str:
    """A session that already holds one message with an image, and its answer."""
    with daemon.client() as http:
        sid = http.post("/sessions", json={}).json()["session_id"]
        model.add(text("A blue box on a grey page."))
        done = http.post(f"/sessions/{sid}/messages", params={"wait": "true"},
                         data={"message": "what is this?"},
                         files=[("images[]", ("shot.png", corpus.screenshot_png(), "image/png"))])
    assert done.status_code == 200, done.text
    assert done.json()["text"] == "A blue box on a grey page."
    return sid


def snapshot(daemon: Daemon, sid: str) -> tuple[dict, dict]:
    """The session's image folder (name -> bytes) and its history, as a person finds them."""
    folder = daemon.home / "images" / sid
    files = {p.name: p.stat().st_size for p in folder.iterdir()} if folder.is_dir() else {}
    with daemon.client() as http:
        history = http.get(f"/sessions/{sid}/history").json()
    return files, history


def memory(pid: int) -> dict[str, int]:
    status = Path(f"/proc/{pid}/status").read_text()
    return {key: int(status.split(key + ":")[1].split()[0]) * 1024 for key in ("VmHWM", "VmRSS")}


def form(*images: tuple[str, bytes, str], message: str | None = "look", **fields) -> dict:
    data = {**fields, **({"message": message} if message is not None else {})}
    return {"data": data, "files": [("images[]", image) for image in images]}


TWELVE_MB = b"\x89PNG\r\n\x1a\n" + bytes(12 * MB)
BAD_UPLOADS = {
    "truncated PNG": (form(("cut.png", corpus.truncated_png(), "image/png")), 422,
                      "invalid_image", ("cut.png", "truncated")),
    "JPEG labelled PNG": (form(("photo.png", corpus.small_jpeg(), "image/png")), 422,
                          "invalid_image", ("photo.png", "labelled image/png", "JPEG")),
    "SVG": (form(("logo.svg", corpus.svg(), "image/svg+xml")), 422, "invalid_image",
            ("logo.svg", "not a raster image")),
    "30000x30000 bomb": (form(("bomb.png", corpus.bomb_png(), "image/png")), 422,
                         "invalid_image", ("bomb.png", "megapixels")),
    "11 images": (form(*[(f"{n}.png", corpus.small_png(), "image/png") for n in range(11)]),
                  422, "too_many_images", ("more than 10", "max_per_message")),
    "12 MB image": (form(("big.png", TWELVE_MB, "image/png")), 413, "image_too_large",
                    ("big.png", "10,485,760 bytes")),
    "missing message": (form(("a.png", corpus.small_png(), "image/png"), message=None), 400,
                        "missing_message", ('"message"',)),
    "unknown field": (form(("a.png", corpus.small_png(), "image/png"), model="x"), 400,
                      "unknown_field", ('"model"',)),
    "JSON unknown field": ({"json": {"message": "x", "attachments": []}}, 400,
                           "unknown_field", ('"attachments"',)),
    "JSON missing message": ({"json": {"images": [{"data": b64(corpus.small_png())}]}}, 400,
                             "missing_message", ()),
    "JSON bad base64": ({"json": {"message": "x", "images": [{"data": "%%%%"}]}}, 400,
                        "invalid_base64", ("image 1",)),
    "private image URL": ({"json": {"message": "x", "images": [
        {"url": "http://169.254.169.254/latest/meta-data/"}]}}, 422, "image_url_refused",
        ("169.254.169.254", "link-local", "fetch_private")),
    "non-UTF-8 text": ({"content": b'--b\r\nContent-Disposition: form-data; name="message"'
                                  b"\r\n\r\n\xff\xfe\r\n--b--\r\n",
                       "headers": {"content-type": "multipart/form-data; boundary=b"}}, 400,
                       "invalid_text", ("UTF-8",)),
    "malformed multipart": ({"content": b"--b\r\nno headers end here",
                             "headers": {"content-type": "multipart/form-data; boundary=b"}},
                            400, "invalid_multipart", ()),
}


@pytest.mark.parametrize("kind", list(BAD_UPLOADS))
def test_a_bad_upload_is_a_clear_4xx_and_nothing_is_stored(daemon, session, kind):
    request, status, code, words = BAD_UPLOADS[kind]
    before = snapshot(daemon, session)
    with daemon.client() as http:
        response = http.post(f"/sessions/{session}/messages", **request)
    refused(response, status, code, *words)
    assert snapshot(daemon, session) == before


@pytest.mark.parametrize(("body", "content_type", "code"), [
    (gigabyte_form, "multipart/form-data; boundary=b", "image_too_large"),
    (gigabyte_json, "application/json", "body_too_large")])
def test_a_gigabyte_streamed_to_the_daemon_is_cut_off_and_its_memory_stays_flat(
        daemon, session, body, content_type, code):
    before, stored = memory(daemon.proc.pid), snapshot(daemon, session)
    with daemon.client(timeout=300) as http:
        response = http.post(f"/sessions/{session}/messages", content=body(),
                             headers={"content-type": content_type})
    refused(response, 413, code)
    after = memory(daemon.proc.pid)
    # cut off at the cap (10 MB of the image part, or the JSON body's), held in a temporary
    # file, not in memory
    assert after["VmHWM"] - before["VmHWM"] < 40 * MB, (before, after)
    assert after["VmRSS"] < before["VmRSS"] + 40 * MB
    assert snapshot(daemon, session) == stored


def test_the_session_takes_a_good_message_after_every_refusal(daemon, session, model):
    model.add(text("Two pictures."))
    with daemon.client() as http:
        done = http.post(f"/sessions/{session}/messages", params={"wait": "true"}, json={
            "message": "and these?", "images": [
                {"data": b64(corpus.small_png()), "name": "a.png"},
                {"data": b64(corpus.small_webp()), "mime": "image/webp", "name": "b.webp"}]})
        assert done.status_code == 200, done.text
        history = http.get(f"/sessions/{session}/history").json()
    user = [m for m in history["messages"] if m["role"] == "user"]
    last = [c for c in user[-1]["content"] if c["type"] == "image_ref"]
    assert [(c["mime"], c["width"], c["height"]) for c in last] == [
        ("image/png", 64, 48), ("image/webp", 64, 48)]
    assert len(user) == 2  # the first message and this one: no refused one left a trace
