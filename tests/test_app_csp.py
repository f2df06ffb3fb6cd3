"""MCP Apps, the parts without a browser: the sandbox's CSP built from what a server declared
(never wider), a tool's ``_meta.ui``, the checks of an app resource, the result an app gets."""

from __future__ import annotations

import base64
import json
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from silica.blocks import TextBlock
from silica.mcp.apps import MAX_APP_BYTES, MIME, AppRefused, app_resource, result_for_app, tool_ui
from silica.serve.app_csp import DOMAIN_KEYS, app_csp
from silica.serve.apps import daemon_origins, sandbox_origin

PAGE = "http://127.0.0.1:8700"
DAEMON = daemon_origins("localhost:8700")
# what each directive allows whatever was declared, and the declared list that may widen it
FIXED = {
    "default-src": ({"'none'"}, None),
    "script-src": ({"'self'", "'unsafe-inline'"}, "resourceDomains"),
    "style-src": ({"'self'", "'unsafe-inline'"}, "resourceDomains"),
    "img-src": ({"'self'", "data:"}, "resourceDomains"),
    "media-src": ({"'self'", "data:"}, "resourceDomains"),
    "font-src": ({"'none'"}, "resourceDomains"),
    "connect-src": ({"'none'"}, "connectDomains"),
    "frame-src": ({"'none'"}, "frameDomains"),
    "base-uri": ({"'self'"}, "baseUriDomains"),
    "object-src": ({"'none'"}, None),
    "form-action": ({"'none'"}, None),
    "frame-ancestors": ({PAGE}, None),
}


def directives(policy: str) -> dict[str, list[str]]:
    parts = [d.split(" ") for d in policy.split("; ")]
    return {name: sources for name, *sources in parts}


def test_an_app_that_declares_nothing_gets_the_restrictive_default():
    got = directives(app_csp(None, frame_ancestor=PAGE))
    assert got["default-src"] == ["'none'"]
    assert got["connect-src"] == ["'none'"] and got["frame-src"] == ["'none'"]
    assert got["script-src"] == ["'self'", "'unsafe-inline'"]
    assert got["img-src"] == ["'self'", "data:"] and got["object-src"] == ["'none'"]
    assert got["frame-ancestors"] == [PAGE]


def test_declared_domains_widen_their_directives_only_and_the_daemon_is_never_allowed():
    policy = app_csp({"connectDomains": ["https://api.example.com", "http://127.0.0.1:8700",
                                         "ws://localhost:8700", "https://a.com; script-src *"],
                      "resourceDomains": ["https://*.cdn.example.org"],
                      "frameDomains": ["https://player.example.net"]},
                     frame_ancestor=PAGE, refused=DAEMON)
    got = directives(policy)
    assert got["connect-src"] == ["https://api.example.com"]
    assert got["script-src"] == ["'self'", "'unsafe-inline'", "https://*.cdn.example.org"]
    assert got["font-src"] == ["https://*.cdn.example.org"]
    assert got["frame-src"] == ["https://player.example.net"]
    assert "'unsafe-eval'" not in policy


# Hosts as (\*\.)?[a-z0-9-]{1,12}(\.[a-z]{2,5}){0,2}, or a loopback name; built from plain
# text strategies (a regex strategy took seconds to start on a loaded machine).
LABEL = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=12)
SUFFIX = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=2, max_size=5)
HOST = st.one_of(
    st.builds(lambda wild, label, more: "*." * wild + label + "".join("." + x for x in more),
              st.booleans(), LABEL, st.lists(SUFFIX, max_size=2)),
    st.sampled_from(["[::1]", "127.0.0.1", "localhost"]))
ORIGIN = st.builds(lambda scheme, host, port: f"{scheme}://{host}{port}",
                   st.sampled_from(["http", "https", "ws", "wss", "ftp", "javascript", "HTTPS"]),
                   HOST, st.sampled_from(["", ":80", ":8700", ":*", "/path", "/"]))
TRICKS = st.sampled_from(["*", "'unsafe-eval'", "'none'", "https:", "data:", "blob:",
                          "https://a.com; script-src *", "https://a.com 'unsafe-eval'",
                          "https://a.com,https://b.com", "'self'", "http://127.0.0.1:8700",
                          "ws://localhost:8700", " https://ok.example ", "https://x.com\n"])
VALUES = st.lists(st.one_of(ORIGIN, TRICKS, st.text(max_size=30)), max_size=6)
DECLARED = st.fixed_dictionaries({}, optional={key: VALUES for key in DOMAIN_KEYS})


@given(DECLARED)
def test_the_policy_never_allows_more_than_the_server_declared(declared):
    got = directives(app_csp(declared, frame_ancestor=PAGE, refused=DAEMON))
    assert list(got) == list(FIXED)  # no directive added, none dropped
    for name, sources in got.items():
        fixed, key = FIXED[name]
        said = {v.strip().lower().rstrip("/") for v in declared.get(key, [])} if key else set()
        for source in sources:
            assert source in fixed or source in said, (name, source)
            assert source not in DAEMON or name == "frame-ancestors"  # the page may frame it
            if source not in fixed:  # a declared origin: one plain source, no keyword
                assert "'" not in source and "," not in source and ";" not in source
                assert source.split("://", 1)[0] in ("http", "https", "ws", "wss")
        if len(sources) > 1:
            assert "'none'" not in sources


def test_the_sandbox_is_the_other_loopback_name_on_the_same_port():
    assert sandbox_origin("127.0.0.1:8700") == "http://localhost:8700"
    assert sandbox_origin("localhost:8700") == "http://127.0.0.1:8700"
    assert sandbox_origin("[::1]:8700") == "http://localhost:8700"
    assert sandbox_origin("example.com:8700") is None
    assert sandbox_origin("127.0.0.1") is None


# -- a tool's _meta.ui ----------------------------------------------------------------------


def test_a_tools_meta_ui_names_its_app_and_who_sees_it():
    ui = tool_ui(SimpleNamespace(meta={"ui": {"resourceUri": "ui://a/b",
                                              "visibility": ["app"]}}))
    assert ui.resource_uri == "ui://a/b" and not ui.for_model and ui.for_app
    old = tool_ui(SimpleNamespace(meta={"ui/resourceUri": "ui://old"}))
    assert old.resource_uri == "ui://old" and old.for_model and old.for_app
    assert tool_ui(SimpleNamespace(meta=None)).visibility == ("model", "app")
    assert tool_ui(SimpleNamespace(meta={"ui": {"resourceUri": "https://x"}})).resource_uri == ""


JSONISH = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=10),
                       lambda inner: st.lists(inner, max_size=4)
                       | st.dictionaries(st.text(max_size=12), inner, max_size=4), max_leaves=20)


@given(st.dictionaries(st.sampled_from(["ui", "ui/resourceUri", "other"]), JSONISH, max_size=3)
       | JSONISH)
def test_any_meta_is_read_without_failing(meta):
    ui = tool_ui(SimpleNamespace(meta=meta))
    assert set(ui.visibility) <= {"model", "app"}
    assert ui.resource_uri == "" or ui.resource_uri.startswith("ui://")


# -- an app resource ------------------------------------------------------------------------


def read(mime: str | None, *, text: str | None = None, blob: str | None = None,
         meta: dict | None = None, uri: str = "ui://a/app"):
    item = SimpleNamespace(uri=uri, mime_type=mime, text=text, blob=blob, meta=meta)
    return SimpleNamespace(contents=[item])


def test_an_app_resource_is_html_of_the_apps_type_with_its_declarations():
    meta = {"ui": {"csp": {"connectDomains": ["https://api.example.com", 3]},
                   "permissions": {"camera": {}}, "prefersBorder": False}}
    app = app_resource("ui://a/app", read("text/html; profile=mcp-app", text="<p>hi</p>",
                                          meta=meta))
    assert app.html == "<p>hi</p>" and app.prefers_border is False
    assert app.csp == {"connectDomains": ["https://api.example.com"]}
    assert app.permissions == {"camera": {}}
    blob = base64.b64encode(b"<p>blob</p>").decode()
    assert app_resource("ui://a/app", read(MIME, blob=blob)).html == "<p>blob</p>"


@pytest.mark.parametrize(("mime", "status"), [("text/plain", 415), ("text/html", 415),
                                              (None, 415), ("application/json", 415)])
def test_a_resource_that_is_not_an_app_is_refused(mime, status):
    with pytest.raises(AppRefused) as refused:
        app_resource("ui://a/app", read(mime, text="<p>hi</p>"))
    assert refused.value.status == status and "not an MCP App" in refused.value.message


def test_a_resource_over_the_cap_is_refused():
    with pytest.raises(AppRefused) as refused:
        app_resource("ui://a/app", read(MIME, text="x" * (MAX_APP_BYTES + 1)))
    assert refused.value.status == 413
    with pytest.raises(AppRefused) as refused:
        app_resource("ui://a/app", read(MIME, blob="QUFB" * (MAX_APP_BYTES // 2)))
    assert refused.value.status == 413


def test_an_app_gets_the_text_and_the_structured_content_of_its_result():
    blocks = [TextBlock(text="It is noon."), TextBlock(text=json.dumps({"time": "12:00"}))]
    got = result_for_app(blocks, False)
    assert got["content"][0] == {"type": "text", "text": "It is noon."}
    assert got["structuredContent"] == {"time": "12:00"} and got["isError"] is False
    assert "structuredContent" not in result_for_app([TextBlock(text="[1, 2]")], True)
