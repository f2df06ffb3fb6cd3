"""Tool-spec helper for silica script tools. Written by silica; it will be rewritten.

Do not edit this copy: silica replaces it whenever its ``HELPER_VERSION`` is older than the
one silica ships. It is standard-library only and runs on Python 3.10 or newer, inside each
tool's own ``uv run --script`` environment.

A tool imports it from its own folder::

    sys.path.insert(0, str(Path(__file__).parent))
    from _silica_toolspec import generate_schema, generate_schemas_for_commands

What callers may rely on:

* ``generate_schema(func)`` returns ``{"name", "description", "input_schema"}``, where
  ``input_schema`` is ``{"type": "object", "properties": {...}, "required": [...]}``. Property
  names are the Python parameter names; every property has a ``"description"`` (possibly
  ``""``); every name in ``required`` is a property. The result is JSON-serialisable.
* The schema promises only what cyclopts accepts on the command line: an ``Enum`` is offered
  as its member *names* in cyclopts' spelling (``DARK_BLUE`` -> ``"dark-blue"``), never its
  values; ``Path``/``datetime``/``date`` are strings; sequences are arrays.
* A fixed-length ``tuple[A, B]`` becomes ``{"type": "array", "prefixItems": [A, B],
  "minItems": 2, "maxItems": 2}``; ``tuple[A, ...]`` becomes an array of ``A``.
* Types it does not know become ``{"type": "string"}`` (cyclopts hands such types a string).
* Imported by a tool started with ``--toolspec``, it answers for a cyclopts ``App`` the tool
  calls without answering the flag itself (see ``_answer_in_cyclopts_place``): the spec of the
  App's default command, or of each of its commands, is printed as JSON and the process exits
  0. It never imports cyclopts itself; a tool that answers ``--toolspec`` itself is left alone.
"""

# ruff: noqa: E402 - HELPER_VERSION comes first so silica can spot an outdated copy at a glance

HELPER_VERSION = "2"

import collections.abc as cabc
import contextlib
import datetime as dt
import enum
import functools
import inspect
import json
import pathlib
import re
import shlex
import sys
import types
import typing
from typing import Any

__all__ = [
    "HELPER_VERSION", "app_spec", "cli_name", "generate_schema", "generate_schemas_for_commands",
    "type_schema",
]

_PARAM_SECTIONS = {"args", "arguments", "parameters", "params", "keyword args",
                   "keyword arguments", "other parameters"}
_SECTION_RE = re.compile(
    r"^\s*(args|arguments|parameters|params|keyword args|keyword arguments|other parameters"
    r"|returns?|yields?|raises|examples?|metadata|notes?|warnings?|see also|todo|attributes)"
    r"\s*:\s*$",
    re.IGNORECASE,
)
_PARAM_LINE_RE = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_ARRAY_ORIGINS = (list, set, frozenset, cabc.Sequence, cabc.MutableSequence, cabc.Iterable,
                  cabc.Collection, cabc.Set, cabc.MutableSet)
_OBJECT_ORIGINS = (dict, cabc.Mapping, cabc.MutableMapping)
_UNION_TYPES: tuple[Any, ...] = (typing.Union, getattr(types, "UnionType", typing.Union))


def cli_name(name: str) -> str:
    """Spell a Python name as cyclopts does on the command line (``HTTPServer`` -> ``http-server``).

    Mirrors ``cyclopts.default_name_transform``, which cyclopts applies to enum member names.
    """
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    s = re.sub(r"([a-z])([A-Z])", r"\1_\2", s)
    s = re.sub(r"([0-9])([A-Z])", r"\1_\2", s)
    return s.lower().replace("_", "-").strip("-")


def _enum_names(cls: type[enum.Enum]) -> list[str]:
    return list(dict.fromkeys(cli_name(n) for n in cls.__members__))


def _cli_value(value: Any) -> Any:
    """A default or Literal value as a caller would pass it; ``None`` if it has no JSON form."""
    if isinstance(value, enum.Flag):
        return [cli_name(m.name) for m in type(value) if m.name and m.value and m & value == m]
    if isinstance(value, enum.Enum):
        return cli_name(value.name)
    if isinstance(value, pathlib.PurePath):
        return str(value)
    if isinstance(value, (dt.date, dt.datetime)):
        return value.isoformat()
    if isinstance(value, (tuple, list, set, frozenset)):
        return [_cli_value(v) for v in value]
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return None
    return value


def _literal_schema(values: tuple[Any, ...]) -> dict[str, Any]:
    vals = [_cli_value(v) for v in values if v is not None]
    schema: dict[str, Any] = {}
    if vals and all(isinstance(v, bool) for v in vals):
        schema["type"] = "boolean"
    elif vals and all(isinstance(v, int) and not isinstance(v, bool) for v in vals):
        schema["type"] = "integer"
    elif vals and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals):
        schema["type"] = "number"
    elif vals and all(isinstance(v, str) for v in vals):
        schema["type"] = "string"
    schema["enum"] = vals
    return schema


def _strip_annotated(tp: Any) -> tuple[Any, tuple[Any, ...]]:
    if typing.get_origin(tp) is typing.Annotated:
        return tp.__origin__, tuple(tp.__metadata__)
    return tp, ()


def _non_none_args(tp: Any) -> tuple[list[Any], bool] | None:
    """For a Union: (its members other than None, whether None was one). Else ``None``."""
    if typing.get_origin(tp) in _UNION_TYPES:
        args = typing.get_args(tp)
        return [a for a in args if a is not type(None)], type(None) in args
    return None


def type_schema(tp: Any) -> dict[str, Any]:
    """The JSON schema (without description) for one parameter annotation.

    ``Optional[T]`` gives ``T``'s schema; unknown types give ``{"type": "string"}``.
    """
    tp, _ = _strip_annotated(tp)
    if type(tp).__name__ == "TypeAliasType":  # Python 3.12 ``type X = ...``
        return type_schema(tp.__value__)
    if hasattr(tp, "__supertype__"):  # typing.NewType
        return type_schema(tp.__supertype__)
    if tp is None or tp is type(None):
        return {"type": "null"}
    union = _non_none_args(tp)
    if union is not None:
        members, _ = union
        schemas: list[dict[str, Any]] = []
        for m in members:
            s = type_schema(m)
            if s not in schemas:
                schemas.append(s)
        if not schemas:
            return {"type": "null"}
        return schemas[0] if len(schemas) == 1 else {"anyOf": schemas}
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Literal:
        return _literal_schema(args)
    if origin is tuple or tp is tuple:
        if not args or args == ((),):
            return {"type": "array"}
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": type_schema(args[0])}
        return {"type": "array", "prefixItems": [type_schema(a) for a in args],
                "minItems": len(args), "maxItems": len(args)}
    container = origin if origin is not None else tp
    if container in _OBJECT_ORIGINS:
        schema: dict[str, Any] = {"type": "object"}
        if len(args) == 2:
            schema["additionalProperties"] = type_schema(args[1])
        return schema
    if container in _ARRAY_ORIGINS:
        schema = {"type": "array"}
        if args:
            schema["items"] = type_schema(args[0])
        if container in (set, frozenset, cabc.Set, cabc.MutableSet):
            schema["uniqueItems"] = True
        return schema
    if not isinstance(tp, type):
        return {"type": "string"}
    if issubclass(tp, enum.Flag):
        # cyclopts takes a Flag as a repeated option, one member name per value.
        return {"type": "array", "items": {"type": "string", "enum": _enum_names(tp)},
                "uniqueItems": True}
    if issubclass(tp, enum.Enum):
        return {"type": "string", "enum": _enum_names(tp)}
    if issubclass(tp, bool):
        return {"type": "boolean"}
    if issubclass(tp, int):
        return {"type": "integer"}
    if issubclass(tp, float):
        return {"type": "number"}
    if issubclass(tp, dt.datetime):
        return {"type": "string", "format": "date-time"}
    if issubclass(tp, dt.date):
        return {"type": "string", "format": "date"}
    return {"type": "string"}  # str, Path, and whatever cyclopts builds from a string


def _is_optional(tp: Any) -> bool:
    tp, _ = _strip_annotated(tp)
    union = _non_none_args(tp)
    return tp is None or tp is type(None) or (union is not None and union[1])


def _annotated_help(tp: Any) -> str | None:
    """``help`` of a ``cyclopts.Parameter`` (duck-typed) in ``Annotated`` metadata, if any."""
    tp, metadata = _strip_annotated(tp)
    for meta in metadata:
        help_text = getattr(meta, "help", None)
        if isinstance(help_text, str) and help_text.strip():
            return help_text.strip()
    union = _non_none_args(tp)
    for member in union[0] if union else ():
        found = _annotated_help(member)
        if found:
            return found
    return None


def _type_hints(func: Any) -> dict[str, Any]:
    """Resolved annotations; one that cannot be resolved is left out, as if unannotated."""
    try:
        return typing.get_type_hints(func, include_extras=True)
    except Exception:
        pass
    try:
        raw = dict(inspect.get_annotations(inspect.unwrap(func)))
    except Exception:
        raw = dict(getattr(func, "__annotations__", None) or {})
    namespace = dict(getattr(inspect.unwrap(func), "__globals__", {}))
    hints: dict[str, Any] = {}
    for key, value in raw.items():
        if isinstance(value, str):
            try:
                value = eval(value, namespace)  # the tool's own annotation, in its own module
            except Exception:
                continue
        hints[key] = value
    return hints


def _parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into (description, {param: description})."""
    lines = inspect.cleandoc(doc or "").splitlines()
    description: list[str] = []
    sections: list[tuple[str, list[str]]] = []
    for line in lines:
        match = _SECTION_RE.match(line)
        if match:
            sections.append((match.group(1).lower(), []))
        elif sections:
            sections[-1][1].append(line)
        else:
            description.append(line)
    params: dict[str, list[str]] = {}
    for title, body in sections:
        if title not in _PARAM_SECTIONS:
            continue
        indents = [len(x) - len(x.lstrip()) for x in body if x.strip()]
        base = min(indents, default=0)
        current: list[str] | None = None
        for line in body:
            if not line.strip():
                continue
            match = _PARAM_LINE_RE.match(line.strip())
            if match and len(line) - len(line.lstrip()) == base:
                current = params.setdefault(match.group(1), [])
                current.append(match.group(2).strip())
            elif current is not None:
                current.append(line.strip())
    docs = {name: " ".join(p for p in parts if p) for name, parts in params.items()}
    return "\n".join(description).strip(), docs


def generate_schema(
    func: Any,
    name: str | None = None,
    skip_params: tuple[str, ...] = ("toolspec", "authorize"),
) -> dict[str, Any]:
    """The Anthropic tool definition for ``func``, as its cyclopts command line accepts it.

    ``name`` defaults to ``func.__name__``. The description is the docstring up to its first
    section header; parameter descriptions come from its ``Args:`` section, else from the
    ``help`` of a ``cyclopts.Parameter`` in ``Annotated``. ``*args``/``**kwargs`` and
    ``skip_params`` are left out. A parameter is required when it has no default and does not
    admit ``None``. JSON-representable defaults (``None`` aside) appear as ``"default"``.
    """
    # A functools.partial's own docstring describes partial, not the tool.
    documented = func.func if isinstance(func, functools.partial) else func
    description, param_docs = _parse_docstring(inspect.getdoc(documented))
    hints = _type_hints(func)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for pname, param in inspect.signature(func).parameters.items():
        if pname in skip_params or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        has_default = param.default is not param.empty
        if pname in hints:
            tp = hints[pname]
        elif has_default and param.default is not None:
            tp = type(param.default)  # cyclopts infers an unannotated type from its default
        else:
            tp = str
        schema = type_schema(tp)
        schema["description"] = param_docs.get(pname) or _annotated_help(tp) or ""
        if has_default and param.default is not None:
            default = _cli_value(param.default)
            if default is not None:
                schema["default"] = default
        properties[pname] = schema
        if not has_default and not _is_optional(tp):
            required.append(pname)
    return {
        "name": name or func.__name__,
        "description": description,
        "input_schema": {"type": "object", "properties": properties, "required": required},
    }


def generate_schemas_for_commands(
    commands: list[tuple[Any, ...]], prefix: str = ""
) -> list[dict[str, Any]]:
    """One ``generate_schema`` per ``(function, name)`` pair, for a multi-tool file.

    A ``None`` name means ``function.__name__``; a non-empty ``prefix`` is put in front of each
    name that does not already start with it. Each spec carries ``_subcommand``, the command
    cyclopts registers for the function (``@app.command`` on ``list_events``: ``list-events``),
    so silica runs the right command whatever the tool is called. A third item,
    ``(function, name, subcommand)``, names that command when it was registered under another
    name (``@app.command(name="list")``).
    """
    specs = []
    for command in commands:
        func = command[0]
        tool_name = (command[1] if len(command) > 1 else None) or func.__name__
        if prefix and not tool_name.startswith(prefix):
            tool_name = prefix + tool_name
        spec = generate_schema(func, tool_name)
        subcommand = command[2] if len(command) > 2 else None
        spec["_subcommand"] = subcommand or cli_name(func.__name__)
        specs.append(spec)
    return specs


# --- answering --toolspec for a cyclopts App ---------------------------------------------------
#
# A tool written the usual cyclopts way (``@app.default def weather(city: str)``, then ``app()``)
# cannot answer ``--toolspec``: cyclopts refuses the missing ``city`` before the function runs.
# So when this process was started with ``--toolspec`` (or ``--authorize``), the helper wraps
# ``cyclopts.App.__call__`` (at once if the tool imported cyclopts first, else as cyclopts is
# imported) and answers in cyclopts' place. cyclopts 3.0 to 5.x keep what is used here:
# ``App.__call__(tokens=None, ...)``, ``App.parse_args(tokens, print_error=, exit_on_error=)``,
# ``App.default_command``, iterating an App for its command names, ``app[name]`` for the App of a
# command, ``App.show``, and ``app.meta``'s ``_meta_parent`` (read with a fallback).

_TOOL_NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_FLAGS = {"--toolspec": "toolspec", "--authorize": "authorize"}
_hook_state = {"answered": False}


def _requested_flag(tokens: Any) -> str | None:
    """``"toolspec"`` or ``"authorize"`` if an App call's tokens ask for it, else ``None``."""
    if tokens is None:
        argv = sys.argv[1:]
    elif isinstance(tokens, str):
        try:
            argv = shlex.split(tokens)
        except ValueError:
            return None
    else:
        argv = [str(t) for t in tokens]
    if "--" in argv:  # what follows cyclopts' end-of-options delimiter is a value, not a flag
        argv = argv[:argv.index("--")]
    for flag in _FLAGS:  # --toolspec first: it wins when both are given
        if flag in argv:
            return _FLAGS[flag]
    return None


def _accepts(func: Any, name: str) -> bool:
    try:
        return name in inspect.signature(func).parameters
    except (TypeError, ValueError):
        return False


def _script_stem() -> str:
    """The running tool file's name without ``.py``, spelled as a tool name may be ('' if none)."""
    path = getattr(sys.modules.get("__main__"), "__file__", None)
    if not path:
        return ""
    return re.sub(r"[^a-zA-Z0-9_-]", "_", pathlib.Path(path).stem)[:40]


def _app_commands(app: Any) -> list[tuple[Any, str]]:
    """``(function, command name)`` for each command of ``app`` silica can run as one token.

    Help and version flags (registered as commands named ``--help``...), hidden commands
    (``show=False``), aliases of a listed command and groups without a function of their own
    (``app.command(App(name="cal"))``: their commands take two tokens) are left out.
    """
    found: list[tuple[Any, str]] = []
    for name in list(app):
        if not isinstance(name, str) or name.startswith("-"):
            continue
        sub = app[name]
        func = getattr(sub, "default_command", None)
        if func is None or getattr(sub, "show", True) is False:
            continue
        if any(func is seen for seen, _ in found):
            continue
        found.append((func, name))
    return found


def app_spec(app: Any) -> dict[str, Any] | list[dict[str, Any]] | None:
    """What ``--toolspec`` prints for a cyclopts ``App`` (``None``: nothing to describe).

    An App with commands gives a list, one spec per command (``_app_commands``), named
    ``<file stem>_<command>`` with ``-`` as ``_`` and carrying ``_subcommand``; its default
    command is then not listed. An App with only a default command gives that command's spec,
    named after the function, or after the file when the function is called ``main``.
    """
    app = getattr(app, "_meta_parent", None) or app  # app.meta: the commands are the parent's
    stem = _script_stem()
    commands = _app_commands(app)
    if commands:
        entries = [(func, name.replace("-", "_"), name) for func, name in commands]
        return generate_schemas_for_commands(entries, prefix=stem + "_" if stem else "")
    default = getattr(app, "default_command", None)
    if default is None:
        return None
    name = getattr(default, "__name__", None) or ""
    if name == "main" or not _TOOL_NAME_RE.match(name):
        name = stem or "main"
    return generate_schema(default, name)


def _parse_error(app: Any, tokens: Any) -> Exception | None:
    """The error cyclopts would stop ``app(tokens)`` with, without printing it or exiting."""
    try:
        app.parse_args(tokens, print_error=False, exit_on_error=False)
    except Exception as exc:  # any failure means cyclopts would not reach the function
        return exc
    return None


def _run_authorization(app: Any, func: Any) -> Any:
    """The tool's own authorization: ``func(authorize=True)``, as cyclopts would have run it.

    Required parameters cyclopts refused to do without are passed as ``None``: authorization
    code must not need them. The result is treated as cyclopts 4+ does by default (``True``/
    ``None`` exit 0, ``False`` 1, an int is the exit code, anything else is printed); under
    cyclopts 3 it is returned, as ``app()`` returned it there.
    """
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for param in inspect.signature(func).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if param.name == "authorize":
            value = True
        elif param.default is not param.empty:
            if param.kind is param.POSITIONAL_ONLY:
                args.append(param.default)
            continue
        else:
            value = None
        if param.kind is param.POSITIONAL_ONLY:
            args.append(value)
        else:
            kwargs[param.name] = value
    result = func(*args, **kwargs)
    if inspect.iscoroutine(result):
        import asyncio  # only an async command needs it

        result = asyncio.run(result)
    if not hasattr(app, "result_action"):  # cyclopts 3: app() returns what the command returned
        return result
    if isinstance(result, bool):
        sys.exit(0 if result else 1)
    if isinstance(result, int):
        sys.exit(result)
    if result is not None:
        print(result)
    sys.exit(0)


def _answer_in_cyclopts_place(app: Any, tokens: Any) -> tuple[bool, Any]:
    """Answer ``--toolspec`` (or ``--authorize``) for an App call the tool cannot answer itself.

    Returns ``(False, None)`` to let cyclopts run as usual; ``(True, value)`` when the call is
    answered and should return ``value``; or prints the spec and exits 0. Only the first App
    call that asks for one of the flags is looked at: calls the tool itself makes from there on
    are its own. A default command with a ``toolspec`` (``authorize``) parameter answers the
    flag itself whenever cyclopts can parse the call; only when cyclopts cannot (a required
    parameter, say) does the helper answer: the spec from ``app_spec``, or for ``--authorize``,
    when parameters are missing, ``_run_authorization``. ``--authorize`` is otherwise left to
    cyclopts, as before.
    """
    if _hook_state["answered"]:
        return False, None
    flag = _requested_flag(tokens)
    if flag is None:
        return False, None
    _hook_state["answered"] = True
    owner = getattr(app, "_meta_parent", None) or app
    default = getattr(owner, "default_command", None)
    handles_flag = default is not None and _accepts(default, flag)
    error = _parse_error(owner, tokens) if handles_flag else None
    if handles_flag and error is None:
        return False, None
    if flag == "authorize":
        missing = error is not None and any(
            c.__name__ == "MissingArgumentError" for c in type(error).__mro__)
        return (True, _run_authorization(app, default)) if missing else (False, None)
    spec = app_spec(owner)
    if spec is None:
        return False, None
    print(json.dumps(spec))
    sys.stdout.flush()
    sys.exit(0)


def _hook_app_class(app_class: type) -> None:
    """Wrap ``app_class.__call__`` so ``_answer_in_cyclopts_place`` sees every App call first."""
    original = app_class.__call__
    if getattr(original, "_silica_toolspec_hook", False):
        return

    @functools.wraps(original)
    def __call__(self: Any, tokens: Any = None, *args: Any, **kwargs: Any) -> Any:
        if tokens is not None and not isinstance(tokens, (str, list, tuple)):
            tokens = list(tokens)  # an iterator: read here, then again by cyclopts
        answered, value = _answer_in_cyclopts_place(self, tokens)
        if answered:
            return value
        return original(self, tokens, *args, **kwargs)

    __call__._silica_toolspec_hook = True  # type: ignore[attr-defined]
    app_class.__call__ = __call__  # type: ignore[method-assign]


def _hook_cyclopts(module: Any) -> None:
    try:
        app_class = getattr(module, "App", None)
        if isinstance(app_class, type):
            _hook_app_class(app_class)
    except Exception:
        pass  # never break the tool's import: cyclopts then behaves as it would without us


class _HookCycloptsOnImport:
    """On ``sys.meta_path`` until cyclopts is imported; hooks its ``App`` once it has loaded."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != "cyclopts":
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)  # once is enough, and the search below must not find us
        for finder in list(sys.meta_path):
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find else None
            if spec is not None:
                break
        else:
            return None
        exec_module = getattr(spec.loader, "exec_module", None)
        if exec_module is None:
            return spec

        def exec_and_hook(module: Any) -> None:
            exec_module(module)
            _hook_cyclopts(module)

        with contextlib.suppress(AttributeError):  # a loader with slots: cyclopts stays as is
            spec.loader.exec_module = exec_and_hook  # this loader serves this one module only
        return spec

    def invalidate_caches(self) -> None:
        pass


def _install_hook() -> None:
    """Hook cyclopts when this process was started to answer ``--toolspec`` or ``--authorize``."""
    if not any(flag in sys.argv[1:] for flag in _FLAGS):
        return
    module = sys.modules.get("cyclopts")
    if module is not None:
        _hook_cyclopts(module)
    elif not any(isinstance(f, _HookCycloptsOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _HookCycloptsOnImport())


if __name__ == "_silica_toolspec":  # a tool's import; silica's own copy is silica.tools.<...>
    _install_hook()
