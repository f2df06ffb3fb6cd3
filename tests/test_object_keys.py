"""The object store's URL parser and key builder (``silica.storage.objects``): whatever text
they are given, a key is made only of checked parts, and never climbs out of its prefix."""

from __future__ import annotations

import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from silica.storage.objects import (
    NAME_PATTERN,
    SESSION_PATTERN,
    Location,
    ObjectStore,
    ObjectStoreError,
    parse_url,
)

SHA = "ab" * 32
LOOSE = st.text(alphabet=string.ascii_letters + string.digits + "./-_%:\\ \x00é", max_size=80)


def store(prefix: str = "images") -> ObjectStore:
    return ObjectStore(Location("silica-test", prefix), environ={})


@given(st.one_of(LOOSE, LOOSE.map(lambda s: "s3://" + s),
                 LOOSE.map(lambda s: "s3://silica-test/" + s)))
def test_a_url_is_a_location_or_one_clear_error(url):
    try:
        location = parse_url(url)
    except ObjectStoreError as exc:
        assert "s3://" in str(exc) or "prefix" in str(exc)
        return
    assert parse_url(location.url) == location  # the parsed form reads back as itself
    segments = location.prefix.split("/") if location.prefix else []
    assert all(s and s not in (".", "..") and not s.startswith(".") for s in segments)


@given(st.text(max_size=80), st.text(max_size=80))
def test_a_key_is_built_from_checked_parts_only(session, name):
    try:
        key = store().key(session, name)
    except ObjectStoreError:
        assert not (SESSION_PATTERN.fullmatch(session) and NAME_PATTERN.fullmatch(name))
        return
    assert key == f"images/{session}/{name}"
    assert ".." not in key.split("/") and "\\" not in key and "\x00" not in key


@pytest.mark.parametrize(("url", "bucket", "prefix"), [
    ("s3://silica-images", "silica-images", ""),
    ("s3://silica-images/", "silica-images", ""),
    ("s3://silica-images/prod/eu", "silica-images", "prod/eu"),
    ("s3://silica-images/prod/", "silica-images", "prod"),
])
def test_urls_that_name_a_place(url, bucket, prefix):
    assert parse_url(url) == Location(bucket, prefix)


@pytest.mark.parametrize("url", [
    "s3://silica-images/../other", "s3://silica-images/a//b", "s3://silica-images/.hidden",
    "s3://Silica", "https://silica-images/x", "s3://x", "s3://silica-images/a b",
])
def test_urls_that_do_not(url):
    with pytest.raises(ObjectStoreError):
        parse_url(url)


def test_keys_without_a_prefix_and_names_by_session():
    assert store("").key("s1", f"{SHA}.png") == f"s1/{SHA}.png"
    assert store("a/b").session_prefix("s1") == "a/b/s1/"
    with pytest.raises(ObjectStoreError):
        store().names("s1", start="../")
