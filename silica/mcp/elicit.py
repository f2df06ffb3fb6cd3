"""An MCP server's ``elicitation/create`` request, checked, and the person's answer, validated.

    request = check_request("files", params.message, params.requested_schema)
    values = check_answer(request, {"count": "3", "colour": "red"})
    values = defaults(request)  # None: a required field has no default

``check_request`` and ``check_answer`` raise ``ElicitationError`` for what does not fit.

The schema a server may send is the restricted one of the MCP specification: a flat
``{"type": "object", "properties": {...}, "required": [...]}`` whose every property is one of

- ``string``, with ``title``, ``description``, ``minLength``, ``maxLength``, ``format``
  (``email``, ``uri``, ``date``, ``date-time``) and ``default``;
- ``number`` or ``integer``, with ``minimum``, ``maximum`` and ``default``;
- ``boolean``, with ``default``;
- a single-select enum: ``{"type": "string", "enum": [...], "enumNames": [...]}`` or
  ``{"type": "string", "oneOf": [{"const": v, "title": t}, ...]}``;
- a multi-select enum: ``{"type": "array", "items": {"type": "string", "enum": [...]}}`` or
  ``{"type": "array", "items": {"anyOf": [{"const": v, "title": t}, ...]}}``, with
  ``minItems``, ``maxItems`` and a list ``default``.

Anything else (a nested object, a default of the wrong type, a ``required`` name with no
property) is an ``ElicitationError`` saying which field is wrong: the server gets an error
and the person is never asked. Sizes are bounded (``MAX_MESSAGE``, ``MAX_SCHEMA``,
``MAX_FIELDS``, ``MAX_OPTIONS``, ``MAX_VALUE``) so that a server cannot flood a terminal or a
page. Every text that will be shown (message, source, titles, descriptions, option labels)
is passed through ``safe_text``; the schema kept in the ``Elicitation`` holds only the keys
listed above, so a front end renders exactly what was checked.

``kind(prop)`` and ``choices(prop)`` tell a front end how to ask for one field; both front
ends (the terminal form, the serve page) and ``check_answer`` use them, so a field is read
one way everywhere.
"""

from __future__ import annotations

import json
import math
import re
import secrets
from collections.abc import Mapping
from datetime import date, datetime
from typing import Any, Literal
from urllib.parse import urlsplit

from silica.elicitation import Elicitation
from silica.security.text import safe_text

MAX_MESSAGE = 4_000       # characters of the request's message
MAX_SCHEMA = 32_000       # characters of the schema as JSON
MAX_FIELDS = 32           # properties in one form
MAX_OPTIONS = 100         # choices of one enum
MAX_TEXT = 1_000          # characters of one title, description or option label
MAX_NAME = 64             # characters of one property name
MAX_VALUE = 10_000        # characters of one string answer

Kind = Literal["string", "number", "integer", "boolean", "enum", "multi"]
FORMATS = ("email", "uri", "date", "date-time")
_TRUE = {"true", "yes", "y", "on", "1"}
_FALSE = {"false", "no", "n", "off", "0"}
_EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")


class ElicitationError(ValueError):
    """A request or an answer that does not fit the restricted schema; ``field`` names the
    property at fault ("" for the request as a whole). ``str(error)`` is one sentence to show."""

    def __init__(self, message: str, field: str = "") -> None:
        super().__init__(message)
        self.field = field


# --- the request ---------------------------------------------------------------------------

def check_request(source: str, message: str, schema: Any) -> Elicitation:
    """The request as an ``Elicitation`` with a fresh ``id``, its texts made safe and its schema
    reduced to the checked keys; ``ElicitationError`` if it is not the restricted schema."""
    if not isinstance(message, str):
        raise ElicitationError("the elicitation's message is not text")
    if len(message) > MAX_MESSAGE:
        raise ElicitationError(f"the elicitation's message is longer than {MAX_MESSAGE} characters")
    try:
        size = len(json.dumps(schema))
    except (TypeError, ValueError, RecursionError):
        raise ElicitationError("the elicitation's schema is not JSON") from None
    if size > MAX_SCHEMA:
        raise ElicitationError(f"the elicitation's schema is larger than {MAX_SCHEMA} characters")
    if not isinstance(schema, dict) or schema.get("type") != "object":
        raise ElicitationError('the elicitation\'s schema is not {"type": "object", ...}')
    properties = schema.get("properties", {})
    if not isinstance(properties, dict):
        raise ElicitationError("the elicitation's schema has no properties object")
    if len(properties) > MAX_FIELDS:
        raise ElicitationError(f"the elicitation asks for more than {MAX_FIELDS} fields")
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        raise ElicitationError("the elicitation's required is not a list of field names")
    for name in required:
        if name not in properties:
            raise ElicitationError(f"required field {safe_text(name)!r} is not a property", name)
    checked = {_check_name(name): _check_property(name, prop) for name, prop in properties.items()}
    kept: dict[str, Any] = {"type": "object", "properties": checked}
    if required:
        kept["required"] = list(dict.fromkeys(required))
    return Elicitation(source=safe_text(str(source))[:MAX_NAME], message=safe_text(message),
                       schema=kept, id=secrets.token_hex(8))


def _check_name(name: str) -> str:
    if not name or len(name) > MAX_NAME or safe_text(name) != name or name.isspace():
        raise ElicitationError(f"field name {safe_text(name)[:MAX_NAME]!r} is empty, too long "
                               "or holds control characters", name)
    return name


def _text(name: str, prop: Mapping[str, Any], key: str, out: dict[str, Any]) -> None:
    if key in prop:
        value = prop[key]
        if not isinstance(value, str) or len(value) > MAX_TEXT:
            raise ElicitationError(f"field {name!r}: {key} is not text of at most "
                                   f"{MAX_TEXT} characters", name)
        out[key] = safe_text(value)


def _count(name: str, prop: Mapping[str, Any], key: str, out: dict[str, Any]) -> None:
    if key in prop:
        value = prop[key]
        if not _is_int(value) or value < 0:
            raise ElicitationError(f"field {name!r}: {key} is not a whole number >= 0", name)
        out[key] = value


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


def _options(name: str, values: Any, labels: Any) -> tuple[list[str], list[str] | None]:
    if not isinstance(values, list) or not values or len(values) > MAX_OPTIONS:
        raise ElicitationError(f"field {name!r}: the choices are not a list of 1 to "
                               f"{MAX_OPTIONS} values", name)
    if not all(isinstance(v, str) and len(v) <= MAX_TEXT for v in values):
        raise ElicitationError(f"field {name!r}: every choice must be text", name)
    if len(set(values)) != len(values):
        raise ElicitationError(f"field {name!r}: a choice appears twice", name)
    if labels is None:
        return values, None
    if (not isinstance(labels, list) or len(labels) != len(values)
            or not all(isinstance(t, str) and len(t) <= MAX_TEXT for t in labels)):
        raise ElicitationError(f"field {name!r}: the choice titles do not match the choices", name)
    return values, [safe_text(t) for t in labels]


def _titled(name: str, items: Any) -> tuple[list[str], list[str]]:
    if not isinstance(items, list) or not all(
            isinstance(i, dict) and "const" in i and isinstance(i.get("title", ""), str)
            for i in items):
        raise ElicitationError(f"field {name!r}: the choices are not a list of "
                               '{"const": ..., "title": ...}', name)
    values, labels = _options(name, [i["const"] for i in items],
                              [i.get("title", i["const"]) for i in items])
    return values, labels or []


def _consts(values: list[str], labels: list[str]) -> list[dict[str, str]]:
    return [{"const": v, "title": t} for v, t in zip(values, labels, strict=True)]


def _check_property(name: str, prop: Any) -> dict[str, Any]:
    if not isinstance(prop, dict):
        raise ElicitationError(f"field {name!r} is not a schema object", name)
    kind_ = prop.get("type")
    out: dict[str, Any] = {}
    _text(name, prop, "title", out)
    _text(name, prop, "description", out)
    if kind_ == "string" and ("enum" in prop or "oneOf" in prop):
        out["type"] = "string"
        if "oneOf" in prop:
            values, labels = _titled(name, prop["oneOf"])
            out["oneOf"] = _consts(values, labels)
        else:
            values, names = _options(name, prop["enum"], prop.get("enumNames"))
            out["enum"] = values
            if names is not None:
                out["enumNames"] = names
    elif kind_ == "string":
        out["type"] = "string"
        _count(name, prop, "minLength", out)
        _count(name, prop, "maxLength", out)
        if out.get("minLength", 0) > out.get("maxLength", MAX_VALUE):
            raise ElicitationError(f"field {name!r}: minLength is above maxLength", name)
        if "format" in prop:
            if prop["format"] not in FORMATS:
                raise ElicitationError(f"field {name!r}: format must be one of "
                                       f"{', '.join(FORMATS)}", name)
            out["format"] = prop["format"]
    elif kind_ in ("number", "integer"):
        out["type"] = kind_
        for key in ("minimum", "maximum"):
            if key in prop:
                if not _is_number(prop[key]):
                    raise ElicitationError(f"field {name!r}: {key} is not a number", name)
                out[key] = prop[key]
        if out.get("minimum", -math.inf) > out.get("maximum", math.inf):
            raise ElicitationError(f"field {name!r}: minimum is above maximum", name)
    elif kind_ == "boolean":
        out["type"] = "boolean"
    elif kind_ == "array":
        out["type"] = "array"
        items = prop.get("items")
        if not isinstance(items, dict):
            raise ElicitationError(f"field {name!r}: an array must have items with its choices",
                                   name)
        if "anyOf" in items or "oneOf" in items:
            values, labels = _titled(name, items.get("anyOf", items.get("oneOf")))
            out["items"] = {"anyOf": _consts(values, labels)}
        elif items.get("type") == "string" and "enum" in items:
            values, _ = _options(name, items["enum"], None)
            out["items"] = {"type": "string", "enum": values}
        else:
            raise ElicitationError(f"field {name!r}: an array's items must be a string enum", name)
        _count(name, prop, "minItems", out)
        _count(name, prop, "maxItems", out)
        if out.get("minItems", 0) > out.get("maxItems", MAX_OPTIONS):
            raise ElicitationError(f"field {name!r}: minItems is above maxItems", name)
    else:
        raise ElicitationError(f"field {name!r}: type must be string, number, integer, boolean "
                               "or an array of choices", name)
    if "default" in prop:
        try:
            out["default"] = _value(name, out, prop["default"], coerce=False)
        except ElicitationError as e:
            raise ElicitationError(f"field {name!r}: the default is not valid ({e})",
                                   name) from None
    return out


# --- reading one field -----------------------------------------------------------------------

def kind(prop: Mapping[str, Any]) -> Kind:
    """How a checked property is asked for."""
    if prop.get("type") == "array":
        return "multi"
    if "enum" in prop or "oneOf" in prop:
        return "enum"
    return prop["type"]  # type: ignore[no-any-return]  # a checked property: one of Kind


def choices(prop: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(value, label)`` of each choice of an enum or multi-select field, in the server's
    order, the label safe to show (a value without a title is its own label); ``[]`` for
    other fields."""
    source = prop.get("items", {}) if prop.get("type") == "array" else prop
    if "enum" in source:
        names = source.get("enumNames") or source["enum"]
        return [(v, safe_text(t)) for v, t in zip(source["enum"], names, strict=True)]
    titled = source.get("oneOf") or source.get("anyOf") or []
    return [(o["const"], safe_text(o["title"])) for o in titled]


def check_value(elicitation: Elicitation, name: str, value: Any) -> Any:
    """One field's value as ``check_answer`` would take it (form text coerced), for a front
    end that asks field by field; ``ElicitationError`` naming the field if it does not fit."""
    return _value(name, elicitation.schema["properties"][name], value, coerce=True)


def _value(name: str, prop: Mapping[str, Any], value: Any, *, coerce: bool) -> Any:
    """``value`` valid for ``prop`` (a form's text turned into the schema's type when
    ``coerce``), or ``ElicitationError``."""
    k = kind(prop)
    what = "a number" if k == "number" else "a whole number"
    if k == "boolean":
        if coerce and isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        if not isinstance(value, bool):
            raise ElicitationError(f"{name!r} must be true or false", name)
        return value
    if k in ("number", "integer"):
        if coerce and isinstance(value, str):
            try:
                value = float(value.strip()) if k == "number" else int(value.strip())
            except ValueError:
                raise ElicitationError(f"{name!r} must be {what}", name) from None
        if k == "integer" and isinstance(value, float) and value.is_integer():
            value = int(value)
        if not _is_number(value) or (k == "integer" and not _is_int(value)):
            raise ElicitationError(f"{name!r} must be {what}", name)
        if "minimum" in prop and value < prop["minimum"]:
            raise ElicitationError(f"{name!r} must be at least {prop['minimum']}", name)
        if "maximum" in prop and value > prop["maximum"]:
            raise ElicitationError(f"{name!r} must be at most {prop['maximum']}", name)
        return value
    if k == "multi":
        if coerce and isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        allowed = [v for v, _ in choices(prop)]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ElicitationError(f"{name!r} must be a list of choices", name)
        for v in value:
            if v not in allowed:
                raise ElicitationError(f"{name!r}: {safe_text(v)[:MAX_NAME]!r} is not one of the "
                                       "choices", name)
        if len(set(value)) != len(value):
            raise ElicitationError(f"{name!r}: a choice is picked twice", name)
        if len(value) < prop.get("minItems", 0):
            raise ElicitationError(f"{name!r}: pick at least {prop['minItems']}", name)
        if len(value) > prop.get("maxItems", MAX_OPTIONS):
            raise ElicitationError(f"{name!r}: pick at most {prop['maxItems']}", name)
        return list(value)
    if not isinstance(value, str):
        raise ElicitationError(f"{name!r} must be text", name)
    if k == "enum":
        if value not in [v for v, _ in choices(prop)]:
            raise ElicitationError(f"{name!r}: {safe_text(value)[:MAX_NAME]!r} is not one of the "
                                   "choices", name)
        return value
    longest = min(prop.get("maxLength", MAX_VALUE), MAX_VALUE)
    if len(value) > longest:
        raise ElicitationError(f"{name!r} must be at most {longest} characters", name)
    if len(value) < prop.get("minLength", 0):
        raise ElicitationError(f"{name!r} must be at least {prop['minLength']} characters", name)
    if "format" in prop and not _formatted(prop["format"], value):
        raise ElicitationError(f"{name!r} must be {_FORMAT_NAMES[prop['format']]}", name)
    return value


_FORMAT_NAMES = {"email": "an email address", "uri": "a URI such as https://example.org/",
                 "date": "a date such as 2025-01-31",
                 "date-time": "a date and time such as 2025-01-31T12:00:00Z"}


def _formatted(fmt: str, value: str) -> bool:
    try:
        if fmt == "date":
            date.fromisoformat(value)
        elif fmt == "date-time":
            if "T" not in value.upper():
                return False
            datetime.fromisoformat(value.replace("z", "Z").replace("Z", "+00:00"))
        elif fmt == "email":
            return _EMAIL.fullmatch(value) is not None
        elif fmt == "uri":
            parts = urlsplit(value)
            return bool(parts.scheme) and bool(parts.netloc or parts.path) and " " not in value
    except ValueError:
        return False
    return True


# --- the answer ------------------------------------------------------------------------------

def check_answer(elicitation: Elicitation, content: Any) -> dict[str, Any]:
    """The person's values, valid against the request's schema: form text is turned into
    numbers and booleans where the schema says so (``"3"`` -> ``3``, ``"yes"`` -> ``True``,
    ``"a, b"`` -> ``["a", "b"]``), an empty text for a field that is not required is left
    out. ``ElicitationError`` naming the field if a value does not fit, a required field is
    missing, or a field is not in the schema."""
    if not isinstance(content, Mapping):
        raise ElicitationError("the answer is not a set of named values")
    properties: dict[str, Any] = elicitation.schema.get("properties", {})
    required = set(elicitation.schema.get("required", []))
    for name in content:
        if name not in properties:
            shown = safe_text(str(name))[:MAX_NAME]
            raise ElicitationError(f"{shown!r} is not a field of this form", str(name))
    values: dict[str, Any] = {}
    for name, prop in properties.items():
        value = content.get(name)
        blank = value is None or (isinstance(value, str) and not value.strip()
                                  and kind(prop) != "string")
        if kind(prop) == "string" and value == "" and name not in required:
            blank = True
        if blank:
            if name in required:
                raise ElicitationError(f"{name!r} is required", name)
            continue
        values[name] = _value(name, prop, value, coerce=True)
    return values


def defaults(elicitation: Elicitation) -> dict[str, Any] | None:
    """The schema's defaults as an answer (``{}`` when no field has one and none is
    required); ``None`` if a required field has no default, so nothing can be accepted on
    the person's behalf. The answer is what ``check_answer`` makes of the defaults, as a
    person's would be: an optional field whose default is empty is left out."""
    properties: dict[str, Any] = elicitation.schema.get("properties", {})
    values = {name: prop["default"] for name, prop in properties.items() if "default" in prop}
    if any(name not in values for name in elicitation.schema.get("required", [])):
        return None
    try:
        return check_answer(elicitation, values)
    except ElicitationError:  # a default that breaks its own field: nothing to accept
        return None
