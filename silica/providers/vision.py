"""Which models see images, found out rather than guessed.

The model table (``silica.providers.models``) takes a model it does not know for one that
sees images. When it is not (a text model behind an OpenAI-compatible URL, a local model),
the API answers a request holding images with an error saying so: a
``ProviderError`` whose ``image_problem`` is ``no_images`` (``silica.providers.errors``).
Then ``VisionDetection``, which ``get_provider`` installs on every provider it returns:

1. records the model as text-only in ``$SILICA_HOME/cache/models.json``, keyed by provider,
   base URL and model, so later sessions (new processes too) send it no image: its
   ``model_info(model).vision`` is false from then on;
2. tells the user once, through ``notice`` (default: a warning on the ``silica.providers``
   logger, which the command line prints on stderr);
3. sends the same request again, once, with a text stand-in for each image
   (``without_images``: the tool's own words about the image and its size).

The other image problems (too large, too many, unreadable) are ``ProviderError``s saying
what to change, raised as they come: nothing is retried. Nor is a request whose reply had
begun to stream text, or one refused although ``vision = true`` is set: ``vision = true`` or
``false`` in config (or ``SILICA_VISION``) wins over the cache and the table, and with it
set nothing is recorded.

The file::

    {"version": 1,
     "text_only": {"openai": {"http://127.0.0.1:8000/v1": {
         "house-model-7b": {"recorded": "2025-06-01T12:00:00Z"}}}}}

is written atomically (a reader sees the old file or the new) and read defensively: a file
that cannot be read, is larger than ``MAX_CACHE_BYTES``, is not JSON, is nested too deeply
to parse, or has another shape is ignored with a warning (once per version of the file) and
replaced by the next record. A model recorded while the file cannot be written is still
sent no image by this process.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from silica.blocks import ImageBlock
from silica.config import Settings
from silica.fsutil import write_atomic
from silica.paths import cache_dir
from silica.providers.base import (
    ModelInfo,
    Provider,
    ProviderError,
    Reply,
    Request,
    RequestToolResult,
)
from silica.providers.models import without_images

CACHE_NAME = "models.json"
MAX_CACHE_BYTES = 1024 * 1024
FORMAT = 1

Notice = Callable[[str], None]
"""Tells the user one sentence (a warning); must not raise."""

log = logging.getLogger("silica.providers")

# Where each built-in provider's SDK is pointed: the variable, else the SDK's default.
_ADDRESSES = {
    "anthropic": ("ANTHROPIC_BASE_URL", "https://api.anthropic.com"),
    "openai": ("OPENAI_BASE_URL", "https://api.openai.com/v1"),
    "openai-responses": ("OPENAI_BASE_URL", "https://api.openai.com/v1"),
    "gemini": ("GEMINI_BASE_URL", "https://generativelanguage.googleapis.com"),
}


def warn(message: str) -> None:
    """The default ``Notice``: a warning on the ``silica.providers`` logger."""
    log.warning("%s", message)


def cache_path(home: Path | None = None) -> Path:
    """``<silica home>/cache/models.json``."""
    return cache_dir(home) / CACHE_NAME


def base_url(provider: Provider) -> str:
    """The address ``provider`` sends its requests to, as the cache keys it: the built-in
    providers' from their environment variable (or the SDK's default), a plugin's from its
    ``base_url`` attribute or method; without a trailing ``/``."""
    name = provider.name
    if name == "ollama":
        from silica.providers.ollama import base_url as ollama_url  # imported by its factory

        url = ollama_url()
    elif name in _ADDRESSES:
        var, default = _ADDRESSES[name]
        url = os.environ.get(var, "").strip() or default
        if name == "gemini":
            url = url.rstrip("/").removesuffix("/v1beta")  # the SDK adds the version
    else:
        own = getattr(provider, "base_url", "")
        url = str((own() if callable(own) else own) or "")
    return url.rstrip("/")


class ModelCache:
    """The models known to take no images, in one file (see the module docstring);
    thread-safe. The file is read again whenever it changes on disk."""

    def __init__(self, path: Path, notice: Notice = warn) -> None:
        self.path = path
        self.notice = notice
        self._lock = threading.RLock()
        self._seen: tuple[int, int, int] | None = None  # the file as last read
        self._known: dict[str, dict[str, dict[str, Any]]] = {}
        self._warned: set[tuple[int, int, int] | None] = set()
        self._here: set[tuple[str, str, str]] = set()  # recorded by this process

    def text_only(self, provider: str, url: str, model: str) -> bool:
        """Whether ``model`` of ``provider`` at ``url`` is known to take no images."""
        if (provider, url, model) in self._here:
            return True
        return model in self._load().get(provider, {}).get(url, {})

    def record(self, provider: str, url: str, model: str) -> bool:
        """Remember that ``model`` of ``provider`` at ``url`` takes no images; whether it was
        new (not known before). A file that cannot be written is warned about; this
        process remembers the model all the same."""
        with self._lock:
            known = {p: {u: dict(m) for u, m in urls.items()}
                     for p, urls in self._load().items()}
            new = (provider, url, model) not in self._here and \
                model not in known.get(provider, {}).get(url, {})
            self._here.add((provider, url, model))
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            known.setdefault(provider, {}).setdefault(url, {})[model] = {"recorded": stamp}
            text = json.dumps({"version": FORMAT, "text_only": known}, indent=2,
                              sort_keys=True, ensure_ascii=False)
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                write_atomic(self.path, text + "\n")
            except OSError as exc:
                self.notice(f"cannot write {self.path} ({exc.strerror or exc}): a new session "
                            f"will send {model!r} images again and find out anew")
            return new

    def _load(self) -> dict[str, dict[str, dict[str, Any]]]:
        with self._lock:
            try:
                st = self.path.stat()
            except FileNotFoundError:
                self._seen, self._known = None, {}
                return self._known
            except OSError as exc:
                self._ignore(None, f"cannot be read ({exc.strerror or exc})")
                return {}
            seen = (st.st_ino, st.st_mtime_ns, st.st_size)
            if seen != self._seen:
                self._seen, self._known = seen, self._read(seen, st.st_size)
            return self._known

    def _read(self, seen: tuple[int, int, int], size: int) -> dict[str, Any]:
        if size > MAX_CACHE_BYTES:
            return self._ignore(seen, f"is larger than {MAX_CACHE_BYTES} bytes")
        try:
            doc = json.loads(self.path.read_bytes())
        except OSError as exc:
            return self._ignore(seen, f"cannot be read ({exc.strerror or exc})")
        except RecursionError:
            return self._ignore(seen, "is JSON nested too deeply to read")
        except ValueError as exc:  # UnicodeDecodeError included
            return self._ignore(seen, f"is not valid JSON ({exc})")
        problem = _shape_problem(doc)
        if problem:
            return self._ignore(seen, problem)
        return doc["text_only"]

    def _ignore(self, seen: tuple[int, int, int] | None, problem: str) -> dict[str, Any]:
        if seen not in self._warned:
            self._warned.add(seen)
            self.notice(f"ignoring {self.path}: it {problem}; models found to take no images "
                        "will be found again, and the file replaced when one is")
        return {}


def _shape_problem(doc: Any) -> str:
    """What is wrong with the shape of a decoded cache file ("" if nothing)."""
    if not isinstance(doc, dict) or doc.get("version") != FORMAT:
        return f'is not a silica model cache (an object with "version": {FORMAT})'
    known = doc.get("text_only")
    if not isinstance(known, dict):
        return 'has no "text_only" object'
    for provider, urls in known.items():
        if not isinstance(urls, dict) or not all(
                isinstance(models, dict) and all(isinstance(e, dict) for e in models.values())
                for models in urls.values()):
            return f'has a "text_only" entry for {provider[:60]!r} of another shape'
    return ""


_CACHES: dict[Path, ModelCache] = {}
_CACHES_LOCK = threading.Lock()


def model_cache(home: Path | None = None) -> ModelCache:
    """The process's one ``ModelCache`` for ``<home>/cache/models.json``."""
    path = cache_path(home)
    with _CACHES_LOCK:
        return _CACHES.setdefault(path, ModelCache(path))


def holds_images(request: Request) -> bool:
    """Whether ``request`` carries any image (tool results included)."""
    for message in request.messages:
        for block in message.content:
            inner = block.content if isinstance(block, RequestToolResult) else [block]
            if any(isinstance(b, ImageBlock) for b in inner):
                return True
    return False


class VisionDetection:
    """Detection for one provider (see the module docstring): ``model_info`` and
    ``complete`` as the provider's own, with what the cache knows applied and a request
    refused for its images sent again once with stand-ins."""

    def __init__(self, provider: Provider, settings: Settings, *,
                 home: Path | None = None, notice: Notice | None = None) -> None:
        self.provider = provider
        self.settings = settings
        self.cache = model_cache(home)
        self.notice = notice or warn
        self._model_info = provider.model_info  # the provider's own, bound
        self._complete = provider.complete

    def text_only(self, model: str) -> bool:
        """Whether the cache says ``model`` takes no images (and config does not decide)."""
        return self.settings.vision is None and \
            self.cache.text_only(self.provider.name, base_url(self.provider), model)

    def model_info(self, model: str) -> ModelInfo:
        info = self._model_info(model)
        if info.vision and self.text_only(model):
            return dataclasses.replace(info, vision=False)
        return info

    async def complete(self, request: Request,
                       on_text: Callable[[str], None] | None = None) -> Reply:
        if self.text_only(request.model):  # a provider that does not ask model_info
            request = without_images(request)
        spoke = False

        def relay(piece: str) -> None:
            nonlocal spoke
            spoke = True
            on_text(piece)  # type: ignore[misc]

        try:
            return await self._complete(request, relay if on_text is not None else None)
        except ProviderError as exc:
            if getattr(exc, "image_problem", None) != "no_images" or spoke or \
                    self.settings.vision is not None or not holds_images(request):
                raise
            self._learn(request.model)
        return await self._complete(without_images(request), on_text)

    def _learn(self, model: str) -> None:
        url = base_url(self.provider)
        if self.cache.record(self.provider.name, url, model):
            self.notice(
                f"model {model!r} at {url} takes no images: silica sends it a line of text in "
                f"place of each image from now on (remembered in {self.cache.path}); if it "
                "does see images, set `vision = true` in config.toml.")


def install(provider: Provider, settings: Settings, *, home: Path | None = None,
            notice: Notice | None = None) -> Provider:
    """``provider`` with vision detection: its ``model_info`` and ``complete`` are replaced,
    on this instance, by those of a ``VisionDetection`` (kept as ``vision_detection``), so
    the provider stays itself (its class, settings and knobs such as ``max_retries``). A
    provider that has detection already is returned as it is; one whose attributes cannot
    be set is wrapped."""
    if getattr(provider, "vision_detection", None) is not None:
        return provider
    detection = VisionDetection(provider, settings, home=home, notice=notice)
    names = {"model_info": detection.model_info, "complete": detection.complete,
             "vision_detection": detection}
    try:
        for name, value in names.items():
            setattr(provider, name, value)
    except Exception:  # __slots__, a frozen model: leave it as it was, and wrap it
        for name in names:
            getattr(provider, "__dict__", {}).pop(name, None)
        return _Detected(provider, detection)  # type: ignore[return-value]
    return provider


class _Detected:
    """A provider whose attributes cannot be set, with detection around it."""

    def __init__(self, provider: Provider, detection: VisionDetection) -> None:
        self._provider = provider
        self.vision_detection = detection
        self.name = provider.name
        self.model_info = detection.model_info
        self.complete = detection.complete

    def __getattr__(self, name: str) -> Any:
        return getattr(self._provider, name)
