"""The npm packages tests run (``tests/npm``: package.json and package-lock.json, exact
versions), installed once per test session with ``npm ci`` into a temporary folder (the npm
cache makes later runs quick).

    prefix = install_npm(tmp_path_factory)      # prefix / "node_modules" / ...

node and npm are required (``.ci/run`` installs them): a test that needs them fails without
them, it never skips.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

PINNED = Path(__file__).with_name("npm")  # the exact versions, a lock file, and scripts


def install_npm(tmp_path_factory) -> Path:
    """The folder the packages are installed in (its ``node_modules``), with the scripts of
    ``tests/npm`` beside them, so ``node SCRIPT`` there finds the packages."""
    missing = [tool for tool in ("node", "npm") if shutil.which(tool) is None]
    if missing:  # a failure, not a skip: CI must run these
        pytest.fail(f"{' and '.join(missing)} not on PATH; .ci/run installs them "
                    "(apt-get install nodejs npm)")
    prefix = tmp_path_factory.mktemp("npm")
    for path in PINNED.iterdir():
        if path.is_file():
            shutil.copy(path, prefix / path.name)
    proc = subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--prefix", str(prefix)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"npm ci failed:\n{proc.stderr[-3000:]}"
    return prefix
