"""The tool-spec helper silica writes beside user tools (``_silica_toolspec.py``).

Each test is an example: a tool function, and the exact schema a model is shown for it.
The last tests run real tool files with ``uv run --script`` to prove that cyclopts accepts
what the schema promises.
"""

import ast
import importlib.util
import inspect
import json
import math
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from datetime import date, datetime
from enum import Enum, Flag, IntEnum, auto
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal, Optional, Union

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from silica.tools.model import ToolSpec

HELPER_PATH = Path(__file__).resolve().parents[1] / "silica" / "tools" / "_silica_toolspec.py"


def load_helper() -> Any:
    """Import the helper the way a tool does: as a standalone file, not as part of silica."""
    spec = importlib.util.spec_from_file_location("_silica_toolspec", HELPER_PATH)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


helper = load_helper()
generate_schema = helper.generate_schema
generate_schemas_for_commands = helper.generate_schemas_for_commands


def props(func: Any) -> dict[str, Any]:
    return generate_schema(func)["input_schema"]["properties"]


def required(func: Any) -> list[str]:
    return generate_schema(func)["input_schema"]["required"]


class Color(Enum):
    RED = "red"
    DARK_BLUE = "navy"


class Level(IntEnum):
    LOW = 1
    HTTPServer = 2


class Perm(Flag):
    READ = auto()
    WRITE = auto()


class FakeParameter:
    """Stands in for ``cyclopts.Parameter``: the helper only looks at ``.help``."""

    def __init__(self, help: str) -> None:
        self.help = help


# --- the original helper's contract --------------------------------------------------------


def test_the_original_hello_tool_keeps_its_spec():
    def main(name: str = "World", excited: bool = False, *, toolspec: bool = False,
             authorize: bool = False):
        """Say hello to someone.

        Args:
            name: Who to greet.
            excited: Whether to add an exclamation mark.
        """

    assert generate_schema(main) == {
        "name": "main",
        "description": "Say hello to someone.",
        "input_schema": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": "Who to greet.", "default": "World"},
                "excited": {"type": "boolean",
                            "description": "Whether to add an exclamation mark.",
                            "default": False},
            },
            "required": [],
        },
    }


def test_helper_version_is_the_first_statement_after_the_docstring():
    module = ast.parse(HELPER_PATH.read_text())
    docstring, first = module.body[0], module.body[1]
    assert "written by silica" in ast.get_docstring(module).lower()
    assert isinstance(docstring, ast.Expr)
    assert isinstance(first, ast.Assign) and first.targets[0].id == "HELPER_VERSION"
    assert helper.HELPER_VERSION == "2"


def test_name_argument_overrides_the_function_name():
    def search(query: str):
        """Search."""

    assert generate_schema(search)["name"] == "search"
    assert generate_schema(search, "web_search")["name"] == "web_search"


# --- docstrings ----------------------------------------------------------------------------


def test_description_stops_at_the_first_section_and_returns_is_not_a_parameter():
    def fetch(url: str, retries: int = 3):
        """Fetch a web page.

        Follows redirects.

        Args:
            url (str): The address to fetch,
                including the scheme.
            retries: How often to retry.

        Returns:
            text: the page body.
        """

    spec = generate_schema(fetch)
    assert spec["description"] == "Fetch a web page.\n\nFollows redirects."
    assert spec["input_schema"]["properties"] == {
        "url": {"type": "string", "description": "The address to fetch, including the scheme."},
        "retries": {"type": "integer", "description": "How often to retry.", "default": 3},
    }
    assert spec["input_schema"]["required"] == ["url"]


@pytest.mark.parametrize("header", ["Arguments:", "Parameters:"])
def test_other_names_for_the_args_section(header):
    def f(x: int):
        pass

    f.__doc__ = f"Do it.\n\n{header}\n    x: The x.\n\nMetadata:\n    y: not a param\n"
    spec = generate_schema(f)
    assert spec["description"] == "Do it."
    assert spec["input_schema"]["properties"]["x"]["description"] == "The x."


def test_annotated_help_describes_a_parameter_the_docstring_leaves_out():
    def f(
        a: Annotated[int, FakeParameter(help="From Parameter.")],
        b: Annotated[int, FakeParameter(help="Ignored: the docstring wins.")] = 1,
        c: Annotated[str | None, "unrelated metadata"] = None,
    ):
        """F.

        Args:
            b: From the docstring.
        """

    assert props(f) == {
        "a": {"type": "integer", "description": "From Parameter."},
        "b": {"type": "integer", "description": "From the docstring.", "default": 1},
        "c": {"type": "string", "description": ""},
    }


def test_a_function_without_docstring_gets_empty_descriptions():
    def bare(x, y=2.5):
        pass

    assert generate_schema(bare) == {
        "name": "bare",
        "description": "",
        "input_schema": {
            "type": "object",
            "properties": {
                "x": {"type": "string", "description": ""},
                "y": {"type": "number", "description": "", "default": 2.5},
            },
            "required": ["x"],
        },
    }


# --- types ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("annotation", "schema"),
    [
        (str, {"type": "string"}),
        (int, {"type": "integer"}),
        (float, {"type": "number"}),
        (bool, {"type": "boolean"}),
        (Path, {"type": "string"}),
        (PurePosixPath, {"type": "string"}),
        (datetime, {"type": "string", "format": "date-time"}),
        (date, {"type": "string", "format": "date"}),
        (list, {"type": "array"}),
        (list[str], {"type": "array", "items": {"type": "string"}}),
        (tuple[int, ...], {"type": "array", "items": {"type": "integer"}}),
        (set[int], {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}),
        (Sequence[Path], {"type": "array", "items": {"type": "string"}}),
        (Iterable[float], {"type": "array", "items": {"type": "number"}}),
        (list[list[int]], {"type": "array", "items": {"type": "array",
                                                       "items": {"type": "integer"}}}),
        (dict, {"type": "object"}),
        (dict[str, int], {"type": "object", "additionalProperties": {"type": "integer"}}),
        (Mapping[str, bool], {"type": "object", "additionalProperties": {"type": "boolean"}}),
        (Literal["a", "b"], {"type": "string", "enum": ["a", "b"]}),
        (Literal[1, 2], {"type": "integer", "enum": [1, 2]}),
        (Literal["a", 1], {"enum": ["a", 1]}),
        (Optional[int], {"type": "integer"}),  # noqa: UP045 - the spelling under test
        (int | None, {"type": "integer"}),
        (Union[int, str], {"anyOf": [{"type": "integer"}, {"type": "string"}]}),  # noqa: UP007
        (int | str | None, {"anyOf": [{"type": "integer"}, {"type": "string"}]}),
        (Annotated[list[int], "meta"], {"type": "array", "items": {"type": "integer"}}),
        (bytes, {"type": "string"}),  # anything else: cyclopts builds it from a string
    ],
)
def test_type_mapping(annotation, schema):
    def f(x: annotation):  # type: ignore[valid-type]
        pass

    assert helper.type_schema(annotation) == schema
    assert props(f)["x"] == {**schema, "description": ""}


def test_fixed_tuple_lists_each_position():
    def move(offset: tuple[int, str]):
        pass

    assert props(move)["offset"] == {
        "type": "array",
        "prefixItems": [{"type": "integer"}, {"type": "string"}],
        "minItems": 2,
        "maxItems": 2,
        "description": "",
    }


def test_enums_offer_the_member_names_cyclopts_accepts_not_their_values():
    def paint(color: Color = Color.DARK_BLUE, level: Level = Level.HTTPServer):
        pass

    # cyclopts matches `--color dark-blue` (the name, lower-case, `_` -> `-`), never "navy".
    assert props(paint) == {
        "color": {"type": "string", "enum": ["red", "dark-blue"], "description": "",
                  "default": "dark-blue"},
        "level": {"type": "string", "enum": ["low", "http-server"], "description": "",
                  "default": "http-server"},
    }


def test_flag_enums_are_repeatable_names():
    def chmod(perm: Perm = Perm.READ | Perm.WRITE):
        pass

    assert props(chmod)["perm"] == {
        "type": "array",
        "items": {"type": "string", "enum": ["read", "write"]},
        "uniqueItems": True,
        "description": "",
        "default": ["read", "write"],
    }


# --- required and defaults -----------------------------------------------------------------


def test_required_means_no_default_and_not_optional():
    def f(a: int, b: int | None, c: int = 0, *, d: str, e: Optional[str] = None):  # noqa: UP045
        pass

    assert required(f) == ["a", "d"]


def test_defaults_appear_when_json_can_carry_them():
    def f(
        n: int = 3,
        names: tuple[str, ...] = ("a", "b"),
        out: Path = Path("out/x.png"),
        when: date = date(2024, 5, 1),
        color: Color = Color.RED,
        nothing: str | None = None,
        ratio: float = math.nan,
        thing: object = object(),  # no JSON form: left out
    ):
        pass

    defaults = {k: v.get("default", "<none>") for k, v in props(f).items()}
    assert defaults == {
        "n": 3,
        "names": ["a", "b"],
        "out": "out/x.png",
        "when": "2024-05-01",
        "color": "red",
        "nothing": "<none>",
        "ratio": "<none>",
        "thing": "<none>",
    }


def test_keyword_only_kept_var_args_and_skip_params_dropped():
    def f(a: int, *args: int, b: bool = True, toolspec: bool = False, authorize: bool = False,
          secret: str = "", **kwargs: str):
        pass

    assert list(props(f)) == ["a", "b", "secret"]
    assert list(generate_schema(f, skip_params=("secret",))["input_schema"]["properties"]) == [
        "a", "b", "toolspec", "authorize"]


def test_unannotated_parameters_take_the_type_of_their_default():
    def f(count=1, label="x", flag=False, anything=None):
        pass

    assert {k: v["type"] for k, v in props(f).items()} == {
        "count": "integer", "label": "string", "flag": "boolean", "anything": "string"}


def test_tools_using_future_annotations_are_read_too():
    source = (
        "from __future__ import annotations\n"
        "from pathlib import Path\n"
        "def tool(paths: list[Path], limit: int | None = None, odd: NotDefined = 2):\n"
        "    '''Tool.\n\n    Args:\n        paths: Files.\n    '''\n"
    )
    namespace: dict[str, Any] = {}
    exec(compile(source, "tool.py", "exec"), namespace)
    # `NotDefined` cannot be resolved: that parameter falls back to its default's type.
    assert generate_schema(namespace["tool"])["input_schema"] == {
        "type": "object",
        "properties": {
            "paths": {"type": "array", "items": {"type": "string"}, "description": "Files."},
            "limit": {"type": "integer", "description": ""},
            "odd": {"type": "integer", "description": "", "default": 2},
        },
        "required": ["paths"],
    }


# --- several tools in one file -------------------------------------------------------------


def test_schemas_for_commands_name_and_prefix():
    def add(a: int, b: int):
        """Add."""

    def notes_list():
        """List."""

    specs = generate_schemas_for_commands(
        [(add, None), (add, "plus"), (notes_list, "notes_list")], prefix="notes_")
    assert [s["name"] for s in specs] == ["notes_add", "notes_plus", "notes_list"]
    assert specs[0]["input_schema"]["required"] == ["a", "b"]
    assert [s["name"] for s in generate_schemas_for_commands([(add, None)])] == ["add"]


def test_schemas_for_commands_take_the_registered_command_name():
    def list_events(day: str):
        """List events."""

    [default, named] = generate_schemas_for_commands(
        [(list_events, None), (list_events, "events_list", "list")])
    assert (default["name"], default["_subcommand"]) == ("list_events", "list-events")
    assert (named["name"], named["_subcommand"]) == ("events_list", "list")


def test_a_partial_is_described_by_its_function():
    import functools

    def scale(image: str, factor: float = 2.0, *, fast: bool = False):
        """Scale an image.

        Args:
            image: The image.
        """

    spec = generate_schema(functools.partial(scale, fast=True), "scale")
    assert spec["description"] == "Scale an image."
    assert spec["input_schema"]["properties"]["image"]["description"] == "The image."


# --- property: any mix of supported annotations gives a valid object schema ----------------

_LEAVES = [str, int, float, bool, Path, datetime, date, Color, Level, Perm, list, dict, tuple,
           Literal["a", "b"], Literal[1, 2], Literal["a", 1], Any]


def _compose(inner: st.SearchStrategy) -> st.SearchStrategy:
    pairs = st.tuples(inner, inner)
    return st.one_of(
        inner.map(lambda t: list[t]),
        inner.map(lambda t: tuple[t, ...]),
        inner.map(lambda t: Sequence[t]),
        inner.map(lambda t: dict[str, t]),
        inner.map(lambda t: Optional[t]),  # noqa: UP045
        inner.map(lambda t: Annotated[t, FakeParameter(help="h")]),
        pairs.map(lambda ab: Union[ab[0], ab[1]]),  # noqa: UP007
        pairs.map(lambda ab: tuple[ab[0], ab[1]]),
    )


annotations = st.recursive(st.sampled_from(_LEAVES), _compose, max_leaves=5)
defaults = st.one_of(
    st.just(inspect.Parameter.empty), st.none(), st.integers(), st.floats(), st.text(),
    st.just(Color.DARK_BLUE), st.just(Perm.WRITE), st.just(Path("p")), st.just(("x", 1)),
)


@st.composite
def tool_functions(draw: st.DrawFn) -> Any:
    drawn = draw(st.lists(st.tuples(annotations, defaults, st.booleans()), max_size=6))
    kinds = inspect.Parameter
    params = [
        inspect.Parameter(f"p{i}", kinds.KEYWORD_ONLY if kw_only else kinds.POSITIONAL_OR_KEYWORD,
                          annotation=ann, default=default)
        for i, (ann, default, kw_only) in enumerate(drawn)
    ]
    # A valid signature: positional without default, positional with default, keyword-only.
    params.sort(key=lambda p: (p.kind, p.default is not p.empty))

    def tool(*args: Any, **kwargs: Any) -> None:
        """A generated tool."""

    tool.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    tool.__annotations__ = {p.name: p.annotation for p in params}
    return tool


@settings(max_examples=300, deadline=None)
@given(tool_functions())
def test_any_supported_annotations_give_an_object_schema_silica_accepts(tool):
    spec = generate_schema(tool)
    schema = spec["input_schema"]
    assert schema["type"] == "object"
    assert list(schema["properties"]) == list(inspect.signature(tool).parameters)
    assert set(schema["required"]) <= set(schema["properties"])
    assert all("description" in p for p in schema["properties"].values())
    json.dumps(spec, allow_nan=False)
    ToolSpec.model_validate(spec)


# --- real tools, run the way silica runs them ----------------------------------------------

SCRIPT_HEADER = """\
# /// script
# requires-python = ">=3.11"
# dependencies = ["cyclopts"]
# ///
"""

PAINT_TOOL = SCRIPT_HEADER + '''
import json
import sys
from datetime import datetime
from enum import Enum
from pathlib import Path
from typing import Literal

import cyclopts

sys.path.insert(0, str(Path(__file__).parent))
from _silica_toolspec import generate_schema


class Color(Enum):
    RED = "red"
    DARK_BLUE = "navy"


app = cyclopts.App()


@app.default
def paint(
    target: Path = Path("canvas.png"),
    color: Color = Color.RED,
    sizes: list[int] | None = None,
    offset: tuple[int, int] = (0, 0),
    mode: Literal["fast", "careful"] = "fast",
    when: datetime | None = None,
    dry_run: bool = False,
    *,
    toolspec: bool = False,
    authorize: bool = False,
):
    """Paint a target file.

    Args:
        target: File to paint.
        color: Paint colour.
        sizes: Brush sizes, one per stroke.
        offset: Where to start, as x and y.
        mode: How carefully to paint.
        when: When to paint.
        dry_run: Only say what would happen.
    """
    if toolspec:
        print(json.dumps(generate_schema(paint, "paint")))
        return
    print(json.dumps({"target": str(target), "color": color.name, "sizes": sizes,
                      "offset": list(offset), "mode": mode,
                      "when": when and when.isoformat(), "dry_run": dry_run}))


if __name__ == "__main__":
    app()
'''

NOTES_TOOL = SCRIPT_HEADER + '''
import json
import sys
from pathlib import Path

import cyclopts

sys.path.insert(0, str(Path(__file__).parent))
from _silica_toolspec import generate_schemas_for_commands

app = cyclopts.App()


@app.command
def add_note(text: str, tags: list[str] | None = None):
    """Add a note.

    Args:
        text: The note itself.
        tags: Labels to file it under.
    """
    print(json.dumps({"text": text, "tags": tags}))


@app.command
def count_words(text: str, unique: bool = False):
    """Count the words in a text."""
    words = text.split()
    print(len(set(words)) if unique else len(words))


@app.default
def main(*, toolspec: bool = False):
    if toolspec:
        commands = [(add_note, None), (count_words, None)]
        print(json.dumps(generate_schemas_for_commands(commands, prefix="notes_")))


if __name__ == "__main__":
    app()
'''


def uv_bin() -> str:
    uv = pytest.importorskip("uv")
    return uv.find_uv_bin()


def write_tool(folder: Path, name: str, source: str) -> Path:
    tool = folder / name
    tool.write_text(source)
    shutil.copy(HELPER_PATH, folder / "_silica_toolspec.py")
    return tool


def run_tool(tool: Path, *args: str) -> str:
    done = subprocess.run([uv_bin(), "run", "--script", str(tool), *args],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def argv_for(schema: dict[str, Any], values: dict[str, Any]) -> list[str]:
    """A command line from schema-shaped input, one flag per property (as silica builds it)."""
    argv: list[str] = []
    for name, value in values.items():
        flag = "--" + name.replace("_", "-")
        kind = schema["properties"][name].get("type")
        if kind == "boolean":
            argv.append(flag if value else "--no-" + flag[2:])
        elif kind == "array" and "prefixItems" in schema["properties"][name]:
            argv += [flag, *map(str, value)]
        elif kind == "array":
            for item in value:
                argv += [flag, str(item)]
        else:
            argv += [flag, str(value)]
    return argv


def test_a_real_tool_spec_and_cyclopts_accepts_what_it_promises(tmp_path):
    tool = write_tool(tmp_path, "paint.py", PAINT_TOOL)

    spec = json.loads(run_tool(tool, "--toolspec"))
    ToolSpec.model_validate(spec)
    schema = spec["input_schema"]
    assert spec["name"] == "paint"
    assert spec["description"] == "Paint a target file."
    assert schema["required"] == []
    assert schema["properties"]["color"] == {
        "type": "string", "enum": ["red", "dark-blue"], "description": "Paint colour.",
        "default": "red"}
    assert schema["properties"]["sizes"] == {
        "type": "array", "items": {"type": "integer"},
        "description": "Brush sizes, one per stroke."}
    assert schema["properties"]["offset"]["prefixItems"] == [{"type": "integer"}] * 2
    assert schema["properties"]["when"]["format"] == "date-time"
    assert "toolspec" not in schema["properties"]

    # What a model might send, using only what the schema offers.
    call = {"target": "out/a.png", "color": schema["properties"]["color"]["enum"][-1],
            "sizes": [1, 2, 3], "offset": [4, 5], "mode": "careful",
            "when": "2024-05-01T10:30:00", "dry_run": True}
    assert json.loads(run_tool(tool, *argv_for(schema, call))) == {
        "target": "out/a.png", "color": "DARK_BLUE", "sizes": [1, 2, 3], "offset": [4, 5],
        "mode": "careful", "when": "2024-05-01T10:30:00", "dry_run": True}


def test_a_real_multi_command_tool(tmp_path):
    tool = write_tool(tmp_path, "notes.py", NOTES_TOOL)

    specs = json.loads(run_tool(tool, "--toolspec"))
    for spec in specs:
        ToolSpec.model_validate(spec)
    assert [s["name"] for s in specs] == ["notes_add_note", "notes_count_words"]
    add = specs[0]["input_schema"]
    assert add == {
        "type": "object",
        "properties": {
            "text": {"type": "string", "description": "The note itself."},
            "tags": {"type": "array", "items": {"type": "string"},
                     "description": "Labels to file it under."},
        },
        "required": ["text"],
    }
    assert specs[1]["description"] == "Count the words in a text."

    out = run_tool(tool, "add-note", *argv_for(add, {"text": "buy milk", "tags": ["home", "x"]}))
    assert json.loads(out) == {"text": "buy milk", "tags": ["home", "x"]}
    count = specs[1]["input_schema"]
    assert run_tool(tool, "count-words", *argv_for(count, {"text": "a b a", "unique": True})) \
        .strip() == "2"
