"""A throwaway S3-compatible store for the tests that need one: ``moto_server``, a real
process speaking the S3 API over HTTP, with credentials it checks.

    server = S3Server(tmp_path / "s3").start()   # on 127.0.0.1, a free port, bucket made
    server.env        # AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION,
                      # AWS_ENDPOINT_URL
    server.url        # s3://silica-test/images  (for SILICA_IMAGES)
    server.client()   # a boto3 client for the test's own look at the bucket
    server.stop()

The server is made to check signatures once it is set up: temporary credentials of its own
(a role allowed everything, with a session token) sign every request after that, so a wrong
key or secret is refused as a real store refuses it (``signatures(False)`` turns that off,
for presigned URLs).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import boto3
import httpx2
from serve_daemon import free_port

BUCKET = "silica-test"
PREFIX = "images"
REGION = "us-east-1"
_EVERYTHING = json.dumps({"Version": "2012-10-17", "Statement": [
    {"Effect": "Allow", "Action": "*", "Resource": "*"}]})
_TRUST = json.dumps({"Version": "2012-10-17", "Statement": [
    {"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "sts:AssumeRole"}]})


class S3Server:
    """A ``moto_server`` on 127.0.0.1 with ``BUCKET`` made (see the module docstring)."""

    def __init__(self, folder: Path, *, bucket: str = BUCKET, prefix: str = PREFIX) -> None:
        self.folder, self.port = folder, free_port()
        self.bucket, self.prefix = bucket, prefix
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.url = f"s3://{bucket}/{prefix}" if prefix else f"s3://{bucket}"
        self.proc: subprocess.Popen | None = None
        self.key_id = self.secret = self.token = ""

    @property
    def env(self) -> dict[str, str]:
        """The AWS variables that point silica at this store, with its credentials."""
        return {"AWS_ACCESS_KEY_ID": self.key_id, "AWS_SECRET_ACCESS_KEY": self.secret,
                "AWS_SESSION_TOKEN": self.token, "AWS_REGION": REGION,
                "AWS_ENDPOINT_URL": self.endpoint}

    def start(self) -> S3Server:
        self.folder.mkdir(parents=True, exist_ok=True)
        server = Path(sys.executable).with_name("moto_server")
        with open(self.folder / "moto.log", "ab") as log:
            self.proc = subprocess.Popen(
                [str(server), "-H", "127.0.0.1", "-p", str(self.port)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx2.get(f"{self.endpoint}/moto-api/", timeout=2)
                break
            except httpx2.TransportError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError("moto_server did not start: "
                                         + (self.folder / "moto.log").read_text()) from None
                time.sleep(0.05)
        # set up unauthenticated (moto's default), then every request must be signed
        setup = {"AWS_ACCESS_KEY_ID": "setup", "AWS_SECRET_ACCESS_KEY": "setup"}
        self._client("s3", setup).create_bucket(Bucket=self.bucket)
        iam = self._client("iam", setup)
        role = iam.create_role(RoleName="silica", AssumeRolePolicyDocument=_TRUST)["Role"]
        iam.put_role_policy(RoleName="silica", PolicyName="all", PolicyDocument=_EVERYTHING)
        given = self._client("sts", setup).assume_role(
            RoleArn=role["Arn"], RoleSessionName="tests", DurationSeconds=43200)["Credentials"]
        self.key_id, self.secret = given["AccessKeyId"], given["SecretAccessKey"]
        self.token = given["SessionToken"]
        self.signatures(True)
        return self

    def signatures(self, checked: bool) -> None:
        """Whether the server checks each request's signature against its keys (on from
        ``start``). moto cannot check a presigned URL's (it fails them all with a 500), so
        a test that fetches one turns the checks off for that while."""
        httpx2.post(f"{self.endpoint}/moto-api/reset-auth",
                    content=b"0" if checked else b"inf", timeout=10).raise_for_status()

    def client(self, service: str = "s3") -> Any:
        """A boto3 client of this store with its credentials."""
        return self._client(service, self.env)

    def key(self, session: str, name: str) -> str:
        return f"{self.prefix}/{session}/{name}" if self.prefix else f"{session}/{name}"

    def _client(self, service: str, env: dict[str, str]) -> Any:
        return boto3.client(service, endpoint_url=self.endpoint, region_name=REGION,
                            aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                            aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
                            aws_session_token=env.get("AWS_SESSION_TOKEN"))

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)
