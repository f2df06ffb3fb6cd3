"""``silica worker``: run the turns that front daemons queue in Redis."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

from silica.cli.agent import AllowShell
from silica.cli.output import fail
from silica.security.text import safe_text


def worker(*, redis: str | None = None, allow_shell: AllowShell = False):
    """Run the turns that silica serve --redis URL --no-worker daemons queue.

    Turns are taken from Redis (at most [worker] concurrency at once) and run here, tools
    under the sandbox, their events sent to every front's clients. A turn whose worker died
    is ended as interrupted by another worker after [worker] lease seconds. SIGTERM or
    Ctrl-C: no more turns are taken, and the running ones end as interrupted.

    Parameters
    ----------
    redis
        The redis:// URL the front daemons use (default: $SILICA_SERVE_REDIS, else [serve]
        redis). Put a password in the variable or the config, not on the command line.
    """
    from silica.cli.serve import REDIS_VAR, _log_to_stderr, _redis
    from silica.config import load_settings
    from silica.extras import require
    from silica.plugins import get_plugin_manager
    from silica.serve.options import ServeOptions

    require("redis")
    settings = load_settings()
    url = _redis(redis) or settings.serve.redis
    if not url:
        fail(f"silica worker takes turns from Redis: give --redis URL (or ${REDIS_VAR}, or "
             "[serve] redis in config.toml), the one the silica serve --no-worker daemons "
             "use", 2)
    _log_to_stderr("silica worker")
    options = ServeOptions.make(settings, cwd=Path.cwd(), allow_shell=allow_shell, redis=url)
    get_plugin_manager()  # plugins load now, before the first turn
    asyncio.run(_run(options))


async def _run(options) -> None:
    from silica.serve.worker import Worker

    def say(line: str) -> None:
        sys.stderr.write(f"silica worker: {safe_text(line)}\n")
        sys.stderr.flush()

    found = Worker(options, say=say)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, found.stop)
    await found.run()
