"""Writing files so that a reader sees the old content or the new, never a part of it."""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path


def write_atomic(path: Path, data: bytes | str, *, prefix: str = ".tmp-",
                 mode: int | None = None) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder and
    ``os.replace``, flushed to disk first. ``mode`` sets the file's permissions (temporary
    files start private). Raises ``OSError``; leaves no temporary file behind either way."""
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=prefix, suffix=".part")
    try:
        if mode is not None:
            os.chmod(temp, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def keep_text_by_content(folder: Path, pieces: Iterable[str], suffix: str,
                         stem: str = "") -> Path:
    """``keep_by_content`` for text given in ``pieces`` (joined as they are), written in
    UTF-8 with ``backslashreplace``: encoded and hashed a slice at a time, so a long text
    is never copied whole. Returns the path; raises ``OSError``."""
    folder.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    fd, temp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as f:
            for piece in pieces:
                for at in range(0, len(piece), _SLICE):
                    data = piece[at : at + _SLICE].encode("utf-8", "backslashreplace")
                    digest.update(data)
                    f.write(data)
            f.flush()
            os.fsync(f.fileno())
        name = digest.hexdigest()[:16]
        path = folder / (f"{stem}-{name}{suffix}" if stem else f"{name}{suffix}")
        if path.is_file():
            Path(temp).unlink()
        else:
            os.replace(temp, path)
        return path
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


_SLICE = 1 << 20  # characters encoded at once by keep_text_by_content


def keep_by_content(folder: Path, data: bytes, suffix: str, stem: str = "") -> Path:
    """Write ``data`` once into ``folder`` (made if missing), named by its sha256 (16 hex
    digits, after ``stem-`` when given) and ``suffix``; an existing file of that name is
    kept as it is. Returns the path; raises ``OSError``."""
    digest = hashlib.sha256(data).hexdigest()[:16]
    path = folder / (f"{stem}-{digest}{suffix}" if stem else f"{digest}{suffix}")
    folder.mkdir(parents=True, exist_ok=True)
    if not path.is_file():
        write_atomic(path, data)
    return path
