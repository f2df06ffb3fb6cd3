"""The in-place editors of silica.security.process, over any block the kernel could hold: they
keep its length and its argument boundaries, and erase exactly the secrets."""

from __future__ import annotations

import os
import subprocess
import sys

from hypothesis import given
from hypothesis import strategies as st

from silica.security.process import _mask_url_secrets, _zero_values
from silica.security.urls import mask_urls, secret_spans

entry_bytes = st.binary(max_size=40).map(lambda b: b.replace(b"\0", b""))
names = st.sampled_from([b"ANTHROPIC_API_KEY", b"PATH", b"HOME", b"MY_TOKEN", b"A", b"X=Y"])
env_entries = st.lists(st.one_of(
    st.tuples(names, entry_bytes).map(lambda nv: nv[0] + b"=" + nv[1]), entry_bytes),
    max_size=12)
url_like = st.one_of(
    st.text(max_size=30),
    st.builds(lambda s, u, h, q: f"{s}://{u}@{h}/p?{q}", st.sampled_from(["https", "redis"]),
              st.text(max_size=12), st.text(max_size=12), st.text(max_size=20)),
    st.builds(lambda k, v: f"https://h/?{k}={v}&x=1", st.sampled_from(["token", "api_key",
                                                                      "page", "sig"]),
              st.text(max_size=12)))


def block_of(entries: list[bytes]) -> bytes:
    return b"".join(e + b"\0" for e in entries)


@given(env_entries)
def test_zeroing_keeps_every_other_byte_and_erases_each_secret_value(entries):
    secret = frozenset({b"ANTHROPIC_API_KEY", b"MY_TOKEN"})
    block = block_of(entries)
    out = _zero_values(secret)(block)
    assert len(out) == len(block)
    at = 0
    for entry in entries:
        name, eq, value = entry.partition(b"=")
        got = out[at:at + len(entry)]
        if eq and name in secret:
            assert got == name + b"=" + bytes(len(value))
        else:
            assert got == entry
        at += len(entry) + 1


@given(st.lists(url_like, min_size=1, max_size=6))
def test_masking_keeps_the_arguments_and_masks_what_mask_urls_masks(args):
    encoded = [a.encode("utf-8", "surrogatepass") for a in args]
    block = block_of([b"/usr/bin/python", *encoded])
    out = _mask_url_secrets(block)
    assert len(out) == len(block)
    assert [i for i, b in enumerate(out) if b == 0] == [i for i, b in enumerate(block) if b == 0]
    for before, after in zip(block.split(b"\0"), out.split(b"\0"), strict=True):
        text = before.decode("latin-1")
        masked = after.decode("latin-1")
        for start, end in secret_spans(text):
            assert set(masked[start:end]) == {"*"}
        kept = [i for i in range(len(text))
                if not any(s <= i < e for s, e in secret_spans(text))]
        assert all(masked[i] == text[i] for i in kept)


@given(url_like)
def test_the_spans_cover_every_secret_mask_urls_finds(text):
    spans = secret_spans(text)
    assert all(end > start for start, end in spans)
    if any(a < d and c < b for (a, b) in spans for (c, d) in spans if (a, b) != (c, d)):
        return  # a query inside user information: masked twice over, fine either way
    out = text
    for start, end in sorted(spans, reverse=True):
        out = out[:start] + "***" + out[end:]
    assert all(out[s:e] == "***" for s, e in secret_spans(out))  # nothing left to mask
    assert mask_urls(out) == mask_urls(text)


def test_a_process_that_hardened_itself_shows_no_secret():
    code = ("import sys; from silica.security.process import harden_process; "
            "harden_process(); sys.stdout.write(open('/proc/self/environ','rb').read().decode("
            "'latin-1')); import os; sys.stdout.write('|' + os.environ['MY_API_KEY'])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "MY_API_KEY": "hunter2-secret"}, timeout=60)
    environ, _, kept = done.stdout.rpartition("|")
    assert "hunter2-secret" not in environ and "MY_API_KEY=" in environ
    assert kept == "hunter2-secret"


@given(st.text(max_size=40), st.text(max_size=40))
def test_a_secret_file_gives_its_first_line_stripped(tmp_path_factory, first, rest):
    import pytest

    from silica.errors import SilicaError
    from silica.security.tokens import check_token, read_secret

    first = first.replace("\r", "").replace("\n", "")
    path = tmp_path_factory.mktemp("secret") / "token"
    path.write_text(f"{first}\n{rest}", encoding="utf-8")
    if not first.strip():
        with pytest.raises(SilicaError, match="no token in"):
            read_secret(str(path))
        return
    assert read_secret(str(path)) == first.strip()
    token = first.strip()
    valid = len(token) <= 512 and all("\x21" <= c <= "\x7e" for c in token)
    if valid:
        assert check_token(token) == token
    else:
        with pytest.raises(SilicaError, match="printable characters"):
            check_token(token)
