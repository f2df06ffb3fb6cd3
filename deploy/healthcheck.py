"""The front daemon's health check: ``python healthcheck.py [URL]`` exits 0 when the daemon at
URL (default http://127.0.0.1:8700) answers with the token of ``$SILICA_SERVE_TOKEN`` and
reaches the sessions database, 1 otherwise (with one line on stderr saying why).

It asks for the history of a session that does not exist: a daemon that is up and reaches its
database answers 404 ``no_session`` after one cheap read (200 if a client did make a session
of that name); one whose database is gone answers 5xx or not at all. Standard library only,
so it runs in the image as it is.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request

PROBE = "/sessions/healthcheck/history"  # silica names its own sessions by date and time


def main(argv: list[str]) -> int:
    url = (argv[1] if len(argv) > 1 else "http://127.0.0.1:8700").rstrip("/") + PROBE
    token = os.environ.get("SILICA_SERVE_TOKEN", "")
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=4) as answer:
            status, body = answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        status, body = exc.code, exc.read()
    except OSError as exc:
        print(f"healthcheck: {url}: {exc}", file=sys.stderr)
        return 1
    try:
        code = json.loads(body)["error"]["code"]
    except (ValueError, KeyError, TypeError):
        code = ""
    if status == 200 or (status == 404 and code == "no_session"):
        return 0
    print(f"healthcheck: {url}: HTTP {status} {code or body[:200]!r}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
