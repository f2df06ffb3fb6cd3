"""A session's objects in any S3-compatible object store, through boto3.

    store = object_store("s3://silica-images/prod")    # from [storage] images
    store.check()                                      # the bucket answers: or ObjectStoreError
    store.put("SESSION", "SHA256.png", data, "image/png")
    store.get("SESSION", "SHA256.png", max_bytes=N)    # the bytes, or None when there is none
    store.presign("SESSION", "SHA256.png")             # a GET URL that works for a few minutes
    store.delete_session("SESSION")                    # every object of the session

boto3 is the field's S3 client: AWS S3 and every S3-compatible store speak to it, and it
brings the credential chain, SigV4 signing, retries and presigning that would otherwise be
written by hand. It is silica's ``s3`` extra.

What callers may rely on:

- Configuration comes from the URL (``s3://BUCKET/PREFIX``) and the usual AWS variables:
  credentials from boto3's chain (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
  ``AWS_SESSION_TOKEN``, a profile, an instance role), the region from ``AWS_REGION`` or
  ``AWS_DEFAULT_REGION``, and a self-hosted store's address from ``AWS_ENDPOINT_URL_S3`` or
  ``AWS_ENDPOINT_URL`` (then addressed path-style: ``ENDPOINT/BUCKET/KEY``).
- Every request has bounded timeouts (``CONNECT_TIMEOUT``, ``READ_TIMEOUT``) and at most
  ``ATTEMPTS`` tries, so a store that is down costs seconds, never a hung turn.
- Keys are ``PREFIX/SESSION/NAME``, built only from a checked prefix, a session name of
  ``SESSION_PATTERN`` and an object name of ``NAME_PATTERN`` (a sha256 and an extension):
  anything else is ``ObjectStoreError`` before a request is made.
- Every failure is ``ObjectStoreError``, one line saying what to do (the bucket is missing,
  the credentials were refused, the store cannot be reached), never a secret.

It knows nothing of images' meaning, sessions' contents or the agent: ``silica.images.cached``
builds the image store on it.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from silica.errors import SilicaError

SESSION_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
NAME_PATTERN = re.compile(r"^[0-9a-f]{64}\.[a-z0-9]{1,8}$")
_START = re.compile(r"^(?:[0-9a-f]{64}\.)?$")
_SEGMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
_URL = re.compile(r"^s3://([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(?:/(.*))?$")

CONNECT_TIMEOUT = 5.0  # seconds to open a connection to the store
READ_TIMEOUT = 30.0  # seconds the store may stay silent mid-request
ATTEMPTS = 3  # tries of one request (boto3's "standard" retries: throttling, 5xx, resets)
PRESIGN_SECONDS = 300  # how long a presigned URL works
ENDPOINT_VARS = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
REGION_VARS = ("AWS_REGION", "AWS_DEFAULT_REGION")
_REFUSED = {"InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken",
            "TokenRefreshRequired", "InvalidClientTokenId", "AuthorizationHeaderMalformed",
            "UnrecognizedClientException"}
_DENIED = {"AccessDenied", "AllAccessDisabled", "AccountProblem"}
_USE = "use the object store"  # what check() does, in messages
_FORBIDDEN = {"403", "Forbidden"}  # a HEAD's answer has no body: refused key, or no right


class ObjectStoreError(SilicaError):
    """The object store cannot do what was asked; the message says what to do."""


@dataclass(frozen=True)
class Location:
    """Where a store's objects go: ``bucket`` and ``prefix`` ("" or "a/b", no slashes at
    either end)."""

    bucket: str
    prefix: str

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"


def parse_url(url: str) -> Location:
    """``s3://BUCKET`` or ``s3://BUCKET/PREFIX`` as a ``Location``; ``ObjectStoreError`` for
    anything else (a prefix is segments of letters, digits, ``.``, ``_``, ``-``, each starting
    with a letter or digit, joined by single slashes)."""
    found = _URL.fullmatch(url) if isinstance(url, str) else None
    if found is None:
        raise ObjectStoreError(f"{str(url)[:200]!r} is not an object store URL: use "
                               "s3://BUCKET or s3://BUCKET/PREFIX in [storage] images or "
                               "SILICA_IMAGES")
    bucket, prefix = found.group(1), (found.group(2) or "").strip("/")
    segments = prefix.split("/") if prefix else []
    if not all(_SEGMENT.fullmatch(s) for s in segments):
        raise ObjectStoreError(f"the prefix {prefix[:200]!r} of {url[:300]!r} cannot be used: "
                               "give segments of letters, digits, '.', '_' or '-' (each "
                               "starting with a letter or digit), joined by '/'")
    return Location(bucket, "/".join(segments))


def endpoint(environ: Mapping[str, str]) -> str | None:
    """The self-hosted store's address from the environment (``None``: AWS itself)."""
    return next((environ[v].strip() for v in ENDPOINT_VARS if environ.get(v, "").strip()),
                None)


class ObjectStore:
    """The objects of every session under one ``Location`` (see the module docstring).
    Constructing one makes no request; the client is made on first use."""

    def __init__(self, location: Location, environ: Mapping[str, str] | None = None) -> None:
        self.location = location
        environ = os.environ if environ is None else environ
        self.endpoint = endpoint(environ)
        self.region = next((environ[v].strip() for v in REGION_VARS
                            if environ.get(v, "").strip()), None)
        self._client: Any = None

    def __repr__(self) -> str:
        return f"ObjectStore({self.location.url!r})"

    @property
    def where(self) -> str:
        """The bucket and the store, for messages: ``bucket B at http://host:9000``."""
        return f"bucket {self.location.bucket!r} at {self.endpoint or 'AWS S3'}"

    # -- keys -------------------------------------------------------------------------------

    def session_prefix(self, session: str) -> str:
        """``PREFIX/SESSION/``: the keys of ``session``'s objects start with it."""
        if not isinstance(session, str) or not SESSION_PATTERN.fullmatch(session):
            raise ObjectStoreError(f"invalid session name {str(session)[:100]!r}: no object "
                                   "key is made from it")
        return f"{self.location.prefix}/{session}/" if self.location.prefix else f"{session}/"

    def key(self, session: str, name: str) -> str:
        """``PREFIX/SESSION/NAME``, from checked parts only."""
        if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
            raise ObjectStoreError(f"invalid object name {str(name)[:100]!r}: expected a "
                                   "sha256 in lowercase hex and an extension")
        return self.session_prefix(session) + name

    # -- requests ---------------------------------------------------------------------------

    def check(self) -> None:
        """One cheap request (HEAD of the bucket): ``ObjectStoreError`` saying what to do when
        the bucket is missing, the credentials are refused or the store cannot be reached."""
        self._call(_USE, lambda c: c.head_bucket(Bucket=self.location.bucket))

    def put(self, session: str, name: str, data: bytes, content_type: str) -> None:
        """Store ``data`` as ``name`` of ``session`` (replacing what was there)."""
        key = self.key(session, name)
        self._call(f"store image {name[:12]} in the object store", lambda c: c.put_object(
            Bucket=self.location.bucket, Key=key, Body=data, ContentType=content_type,
            ContentLength=len(data)))

    def get(self, session: str, name: str, *, max_bytes: int) -> bytes | None:
        """The bytes of ``name`` in ``session``; ``None`` if there is no such object. An
        object over ``max_bytes`` is ``ObjectStoreError``, and is not read."""
        key = self.key(session, name)

        def fetch(client: Any) -> bytes | None:
            try:
                answer = client.get_object(Bucket=self.location.bucket, Key=key)
            except Exception as exc:
                if _code(exc) in ("NoSuchKey", "404", "NotFound"):
                    return None
                raise
            body = answer["Body"]
            try:
                if int(answer.get("ContentLength") or 0) > max_bytes:
                    raise ObjectStoreError(
                        f"object {key} is {answer['ContentLength']:,} bytes, over the "
                        f"{max_bytes:,} an image may have (store.max_image_bytes); it was "
                        "not read")
                data: bytes = body.read(max_bytes + 1)
            finally:
                body.close()
            if len(data) > max_bytes:
                raise ObjectStoreError(f"object {key} is over the {max_bytes:,} bytes an image "
                                       "may have (store.max_image_bytes); it was not read")
            return data

        return self._call(f"read image {name[:12]} from the object store", fetch)

    def names(self, session: str, *, start: str = "") -> dict[str, int]:
        """``{name: size}`` of the objects ``session`` holds (names of ``NAME_PATTERN`` only);
        ``start``: only names that start with it (a sha256 and a dot, ``SHA256.``)."""
        if not _START.fullmatch(start):
            raise ObjectStoreError(f"invalid object name start {start[:100]!r}: expected a "
                                   "sha256 in lowercase hex and a dot")
        prefix = self.session_prefix(session)

        def listing(client: Any) -> dict[str, int]:
            found: dict[str, int] = {}
            pages = client.get_paginator("list_objects_v2").paginate(
                Bucket=self.location.bucket, Prefix=prefix + start)
            for page in pages:
                for item in page.get("Contents", ()):
                    name = item["Key"][len(prefix):]
                    if NAME_PATTERN.fullmatch(name):
                        found[name] = int(item.get("Size", 0))
            return found

        return self._call("list the session's images in the object store", listing)

    def delete_session(self, session: str) -> int:
        """Remove every object of ``session``; how many there were."""
        names = list(self.names(session))
        prefix = self.session_prefix(session)
        for start in range(0, len(names), 1000):  # DeleteObjects takes 1000 keys at most
            batch = [{"Key": prefix + n} for n in names[start:start + 1000]]
            self._call("delete the session's images from the object store",
                       lambda c, b=batch: c.delete_objects(
                           Bucket=self.location.bucket, Delete={"Objects": b, "Quiet": True}))
        return len(names)

    def presign(self, session: str, name: str, *, seconds: int = PRESIGN_SECONDS,
                content_type: str | None = None) -> str:
        """A URL that GETs ``name`` of ``session`` for ``seconds`` (made here, no request)."""
        params = {"Bucket": self.location.bucket, "Key": self.key(session, name)}
        if content_type:
            params["ResponseContentType"] = content_type
        url: str = self._call("presign a URL of the object store",
                              lambda c: c.generate_presigned_url(
                                  "get_object", Params=params, ExpiresIn=seconds))
        return url

    def origin(self) -> str:
        """The scheme, host and port presigned URLs point at (for a Content-Security-Policy):
        taken from a URL presigned here, so it is exactly what browsers will be sent to."""
        from urllib.parse import urlsplit

        probe = urlsplit(self.presign("origin", "0" * 64 + ".png", seconds=60))
        return f"{probe.scheme}://{probe.netloc}"

    # -- the client -------------------------------------------------------------------------

    def client(self) -> Any:
        """The boto3 client (made once per store, shared by threads: boto3's clients are)."""
        if self._client is None:
            self._client = _client(self.endpoint, self.region)
        return self._client

    def _call(self, what: str, call: Any) -> Any:
        """``call(client)``, each failure as one ``ObjectStoreError`` saying what to do."""
        from silica.extras import MissingExtra, require

        try:
            require("s3")
        except MissingExtra as exc:
            raise ObjectStoreError(str(exc)) from None
        try:
            return call(self.client())
        except ObjectStoreError:
            raise
        except Exception as exc:
            raise self.explain(what, exc) from None

    def explain(self, what: str, exc: Exception) -> ObjectStoreError:
        """``exc`` (from boto3) as one line a user can act on, naming no secret."""
        name = type(exc).__name__
        code = _code(exc)
        verb = f"cannot {what} ({self.where})"
        if name in ("NoCredentialsError", "PartialCredentialsError",
                    "CredentialRetrievalError"):
            return ObjectStoreError(f"{verb}: no credentials were found; set "
                                    "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or "
                                    "AWS_PROFILE) for silica")
        if code in ("NoSuchBucket",) or (code in ("404", "NotFound") and what == _USE):
            return ObjectStoreError(f"{verb}: the bucket does not exist; create it, or name "
                                    "another in [storage] images (or SILICA_IMAGES)")
        if code in _REFUSED:
            return ObjectStoreError(f"{verb}: the store refused the credentials ({code}); "
                                    "check AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and "
                                    "AWS_SESSION_TOKEN")
        if code in _FORBIDDEN:
            return ObjectStoreError(f"{verb}: the store refused these credentials or their "
                                    "access (403); check AWS_ACCESS_KEY_ID, "
                                    "AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN, and that "
                                    "they may read, write, list and delete objects under "
                                    f"{self.location.url}")
        if code in _DENIED:
            return ObjectStoreError(f"{verb}: access denied ({code}); give these credentials "
                                    "the right to read, write, list and delete objects under "
                                    f"{self.location.url}")
        if name in ("EndpointConnectionError", "ConnectTimeoutError", "ReadTimeoutError",
                    "ConnectionClosedError", "ProxyConnectionError", "SSLError",
                    "ConnectionError", "HTTPClientError"):
            hint = "AWS_ENDPOINT_URL" if self.endpoint else "the network and AWS_REGION"
            return ObjectStoreError(f"{verb}: the store cannot be reached ({name}); check "
                                    f"that it runs and {hint}")
        if name in ("NoRegionError", "InvalidRegionError"):
            return ObjectStoreError(f"{verb}: set AWS_REGION to the bucket's region")
        if code:
            message = _message(exc)
            return ObjectStoreError(f"{verb}: the store answered {code}"
                                    + (f" ({message})" if message else ""))
        return ObjectStoreError(f"{verb}: {name}")


def _code(exc: Exception) -> str:
    """The error code of a boto3 ``ClientError`` ("" for other exceptions)."""
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return ""
    return str(response.get("Error", {}).get("Code", "") or "")


def _message(exc: Exception) -> str:
    response = getattr(exc, "response", None)
    message = response.get("Error", {}).get("Message", "") if isinstance(response, dict) else ""
    return " ".join(str(message).split())[:200]


@functools.lru_cache(maxsize=8)
def _client(endpoint_url: str | None, region: str | None) -> Any:
    """A boto3 S3 client for the store (cached: making one costs tens of milliseconds);
    credentials from boto3's own chain, read as the client is made."""
    import boto3  # type: ignore[import-untyped]  # the package ships no type hints
    from botocore.config import Config  # type: ignore[import-untyped]  # as boto3

    config = Config(connect_timeout=CONNECT_TIMEOUT, read_timeout=READ_TIMEOUT,
                    retries={"total_max_attempts": ATTEMPTS, "mode": "standard"},
                    signature_version="s3v4",
                    # a self-hosted store rarely has a DNS name per bucket
                    s3={"addressing_style": "path" if endpoint_url else "auto"})
    session = boto3.session.Session()
    return session.client("s3", endpoint_url=endpoint_url,
                          region_name=region or ("us-east-1" if endpoint_url else None),
                          config=config)


def object_store(url: str, environ: Mapping[str, str] | None = None) -> ObjectStore:
    """The store of ``url`` (``s3://BUCKET/PREFIX``) with the endpoint and region of
    ``environ`` (default: this process's environment)."""
    return ObjectStore(parse_url(url), environ)

