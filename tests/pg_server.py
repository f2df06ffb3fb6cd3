"""A throwaway PostgreSQL server for the tests (and benchmarks) that need a real database.

    server = PostgresServer(tmp_path / "pg").start()   # on 127.0.0.1, a free port
    server.url                                          # postgresql://silica:PW@127.0.0.1:PORT/silica
    server.new_database("one")                          # the URL of a fresh, empty database
    server.stop()

``initdb`` and ``pg_ctl`` come from Debian's ``postgresql`` package
(``/usr/lib/postgresql/*/bin``). The role ``silica`` has a password (``PASSWORD``), asked
for on TCP. As root, the server runs as the package's ``postgres`` user (it refuses root),
in a folder under /tmp owned by it.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from serve_daemon import free_port

PASSWORD = "pg-Secret-7vQx"
USER = "silica"


def bin_dir() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    if not found:
        raise AssertionError("PostgreSQL is not installed: apt-get install postgresql")
    return Path(found[-1]).parent


class PostgresServer:
    """A throwaway PostgreSQL server on 127.0.0.1 (no fsync), in a temporary folder."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.port = folder, free_port()
        self.url = f"postgresql://{USER}:{PASSWORD}@127.0.0.1:{self.port}/silica"
        self.root = os.geteuid() == 0
        self.data: Path | None = None

    def _run(self, *argv: str) -> None:
        prefix = ["runuser", "-u", "postgres", "--"] if self.root else []
        done = subprocess.run([*prefix, *argv], capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=120)
        if done.returncode:
            raise AssertionError(f"{argv[0]} failed: {done.stdout}{done.stderr}")

    def start(self) -> PostgresServer:
        bins = bin_dir()
        if self.data is None:
            # the postgres user must reach its folder: pytest's own tmp folders are root's
            self.folder.mkdir(parents=True, exist_ok=True)
            top = Path(tempfile.mkdtemp(prefix="silica-pg-", dir=None if self.root
                                        else self.folder))
            if self.root:
                shutil.chown(top, "postgres", "postgres")
            self.data = top / "data"
            pwfile = top / "pw"
            pwfile.write_text(PASSWORD)
            if self.root:
                shutil.chown(pwfile, "postgres", "postgres")
            self._run(str(bins / "initdb"), "-D", str(self.data), "-U", USER,
                      f"--pwfile={pwfile}", "--auth-host=scram-sha-256", "--auth-local=trust",
                      "-E", "UTF8", "--no-sync")
        options = (f"-h 127.0.0.1 -p {self.port} -k {self.data} -c fsync=off "
                   "-c synchronous_commit=off -c full_page_writes=off")
        self._run(str(bins / "pg_ctl"), "-D", str(self.data), "-l",
                  str(self.data.parent / "server.log"), "-o", options, "-w", "start")
        if not getattr(self, "_made", False):
            self._made = True
            self._sql("postgres", "CREATE DATABASE silica")
        return self

    def _sql(self, database: str, statement: str) -> None:
        import psycopg

        url = self.url.rsplit("/", 1)[0] + "/" + database
        with psycopg.connect(url, autocommit=True) as db:
            db.execute(statement)  # type: ignore[arg-type]

    def new_database(self, name: str) -> str:
        """The URL of a new, empty database ``name`` on this server."""
        self._sql("postgres", f'CREATE DATABASE "{name}"')
        return self.url.rsplit("/", 1)[0] + "/" + name

    def stop(self) -> None:
        if self.data is not None and (self.data / "postmaster.pid").exists():
            self._run(str(bin_dir() / "pg_ctl"), "-D", str(self.data), "-m", "immediate",
                      "-w", "stop")

    def remove(self) -> None:
        """Stop the server and remove its folder."""
        self.stop()
        if self.data is not None:
            shutil.rmtree(self.data.parent, ignore_errors=True)
