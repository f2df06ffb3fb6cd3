"""Shell command lines as ``/bin/sh -c`` reads them, for the shell tool's allow-list.

``parse(line)`` gives a ``CommandLine``: pipelines of simple commands (``Stage``: words and
redirections) joined by list operators (``;`` ``&`` ``&&`` ``||``), or ``None`` when the line
is anything else or anything this module cannot vouch for. ``matches(command, pattern)``
says whether a parsed command is an instance of a parsed pattern; ``literal_pattern`` gives
the narrow pattern a person's "always" stands for.

The parser is tree-sitter's bash grammar. The line runs under ``/bin/sh`` (often dash), so
whatever the grammar reads one way and a POSIX shell another is refused, not guessed at:

- a tree with an error or a missing token; a node type not listed here (compound commands,
  functions, ``[[``, ``case``, declarations, ...);
- text the parser skipped as blank that a POSIX shell reads as a character (only space,
  tab, newline and a backslash-newline are blanks there: a CR, form feed or non-breaking
  space between tokens would let the parser see a comment or a word break sh does not);
  and so any line holding a control character other than tab and newline, or a Unicode
  blank, wherever it is; and a comment that does not start a word;
- bash-only syntax: ``$'...'``, ``$"..."``, ``<(...)``, ``|&``, ``&>``, ``>&file``, ``<<<``;
- a line longer than ``MAX_LINE`` bytes (Linux would not pass it to sh);
- a line holding a character outside Unicode's Basic Multilingual Plane (four bytes in
  UTF-8: emoji, rarer scripts, private use): the grammar's native code reads out of bounds
  on some of them (``{`` then such a character crashed the whole process), so they never
  reach it.
"""

from __future__ import annotations

import fnmatch
import re
import shlex
from dataclasses import dataclass, field
from functools import cache, lru_cache

# Linux's limit on one argument (MAX_ARG_STRLEN): a longer line cannot reach sh -c at all, so
# it is not read either (reading stays within milliseconds and a few MB whatever the line).
MAX_LINE = 128 * 1024
STAR = "*"  # a pattern word that stands for one or more whole words (never a substitution)
_PARENT = ".."  # a path segment a pattern word's "*" never stands for

_BLANKS = re.compile(rb"(?:[ \t\n]|\\\n)*")
# Controls other than tab and newline, and blanks sh does not take for blanks: where the
# grammar and sh part ways (a CR before "#" made a comment for one and a word for the other),
# so a line holding one is never vouched for, quoted or not.
_UNUSUAL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u00a0\u1680\u2000-\u200f\u2028-\u202f"
                      r"\u205f-\u2064\u3000\ufeff]")
# A character the native grammar must never see (see the module docstring): a crash there is
# not an exception but the end of the process asking (chat, the daemon, mcp serve).
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")
_WORD_ESCAPE = re.compile(r"\\(\n|.)", re.DOTALL)
_STRING_ESCAPE = re.compile(r"\\([$`\"\\\n])")
_LIST_OPERATORS = frozenset({"&&", "||"})
_SEPARATORS = frozenset({";", "&"})
_CONTINUED = frozenset({"|", "&&", "||", ";", "&"})  # a newline after these is a blank
# Unquoted tokens of the tree: none may hold a character that ends a word in sh.
_PLAIN_TOKENS = frozenset({"word", "number", "variable_name", "special_variable_name",
                           "file_descriptor", "heredoc_start"})
_METACHARACTERS = re.compile(rb"[ \t\n;&|<>()]")
_ESCAPED = re.compile(rb"\\.", re.DOTALL)
_REDIRECTS = frozenset({">", ">>", "<", ">|", "<>", ">&", "<&", ">&-", "<&-"})
_DUPLICATIONS = frozenset({">&", "<&"})  # their target must be a descriptor number or "-"
# Whole subtrees whose text is data (quoted) or kept verbatim (a here-document).
_OPAQUE = frozenset({"string", "raw_string", "heredoc_redirect", "comment"})


class _Refused(Exception):
    """The line holds something this module does not vouch for."""


@dataclass(frozen=True)
class Word:
    """One word of a simple command. ``text``: after quote removal, with expansions as
    written (``$HOME`` stays ``$HOME``); ``active``: it holds a command or arithmetic
    substitution or a parameter expansion beyond ``$NAME``/``${NAME}`` (such a word matches
    only the very same ``source`` in a pattern)."""

    kind: str  # "assign" (a NAME=value before the program) or "word"
    text: str
    source: str
    active: bool = False
    start: int = field(default=0, compare=False)  # where it is in the line


@dataclass(frozen=True)
class Redirect:
    fd: str  # the descriptor written before the operator, "" if none
    op: str
    target: Word | None  # None for ">&-" and "<&-"


@dataclass(frozen=True)
class Stage:
    """A simple command: its words (assignments first, then the program and its
    arguments), its redirections in order, and its here-documents verbatim."""

    words: tuple[Word, ...]
    redirects: tuple[Redirect, ...] = ()
    heredocs: tuple[str, ...] = ()


@dataclass(frozen=True)
class Pipeline:
    stages: tuple[Stage, ...]
    negated: bool = False


@dataclass(frozen=True)
class CommandLine:
    """Pipelines and the operator after each (``;`` ``&`` ``&&`` ``||``; the last one
    ``""`` or ``"&"``: a final ``;`` or line end is dropped)."""

    pipelines: tuple[Pipeline, ...]
    operators: tuple[str, ...]

    @property
    def stages(self) -> list[Stage]:
        return [stage for pipeline in self.pipelines for stage in pipeline.stages]


@cache
def _language():
    import tree_sitter_bash
    from tree_sitter import Language

    return Language(tree_sitter_bash.language())


def _parser():
    from tree_sitter import Parser

    return Parser(_language())  # one per line: a parser is not to be shared across threads


def parse(line: str) -> CommandLine | None:
    """``line`` as pipelines of simple commands, or ``None`` if it is anything else or
    anything sh might read differently from the grammar (see the module docstring)."""
    try:
        source = line.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: not a line sh gets as the model wrote it
        return None
    if len(source) > MAX_LINE or _UNUSUAL.search(line) or _ASTRAL.search(line):
        return None
    root = _parser().parse(source).root_node
    if root.has_error:
        return None
    try:
        _check_blanks(root, source)
        return _Reader(source).program(root)
    except (_Refused, ValueError, RecursionError):  # a node without the children it needs,
        return None  # or thousands of nested stages


@lru_cache(maxsize=256)
def parse_pattern(pattern: str) -> CommandLine | None:
    """``parse`` for the allow-list's patterns, which are few and read on every call."""
    return parse(pattern)


def _check_blanks(root, source: bytes) -> None:
    """Refuse a line whose text between tokens is not blank to a POSIX shell as the tree
    has it. A backslash-newline is no blank there: sh removes it, joining what is on either
    side (``evil\\<newline>#x`` is the word ``evil#x``, not a word and a comment), so between
    two tokens it counts only beside a real blank. A newline ends a command in sh: between
    two tokens it must be where the tree ends a statement or after ``|``, ``&&``, ``||``,
    ``;`` or ``&`` (the grammar reads ``ok<newline>\\<newline>evil`` as ``ok evil``)."""
    end, previous = 0, ""
    statements = {child.start_byte for child in root.children}

    def gap(start: int, stop: int, between: bool) -> None:
        if stop < start or not _BLANKS.fullmatch(source, start, stop):
            raise _Refused
        real = source[start:stop].replace(b"\\\n", b"")
        if not between:
            return
        if start < stop and not real:
            raise _Refused
        if b"\n" in real and stop not in statements and previous not in _CONTINUED:
            raise _Refused

    def walk(node) -> None:
        nonlocal end, previous
        if node.type in _OPAQUE or node.child_count == 0:
            gap(end, node.start_byte, between=end > 0)
            if node.type in _PLAIN_TOKENS:  # sh would split it, or read a comment
                bare = _ESCAPED.sub(b"x", source[node.start_byte:node.end_byte])
                starts_word = node.start_byte == 0 or node.start_byte > end
                if _METACHARACTERS.search(bare) or (starts_word and bare.startswith(b"#")):
                    raise _Refused
            if node.type == "comment" and (b"\n" in source[node.start_byte:node.end_byte]
                                           or 0 < node.start_byte == end):
                raise _Refused  # sh reads "#" as a comment only at the start of a word
            end, previous = node.end_byte, node.type
            return
        for child in node.children:
            walk(child)

    walk(root)
    gap(end, len(source), between=False)


class _Reader:
    """Turns a tree-sitter tree into a ``CommandLine`` (raising ``_Refused``)."""

    def __init__(self, source: bytes) -> None:
        self.source = source

    def text(self, node) -> str:
        return self.source[node.start_byte:node.end_byte].decode("utf-8")

    def program(self, root) -> CommandLine:
        pipelines: list[Pipeline] = []
        operators: list[str] = []
        for child in root.children:
            if child.type == "comment":
                continue
            if child.type in _SEPARATORS:
                if len(operators) != len(pipelines) - 1:  # "a & ;", "; a"
                    raise _Refused
                operators.append(child.type)
                continue
            if len(operators) == len(pipelines) - 1:
                operators.append(";")  # a line end between two statements
            more, joins = self.chain(child)
            pipelines += more
            operators += joins
        if not pipelines:
            raise _Refused
        if len(operators) == len(pipelines) - 1:
            operators.append("")
        elif operators[-1] == ";":
            operators[-1] = ""
        return CommandLine(tuple(pipelines), tuple(operators))

    def chain(self, node) -> tuple[list[Pipeline], list[str]]:
        """A statement: pipelines and the ``&&``/``||`` between them. The grammar's nesting
        of ``|``, ``&&`` and ``||`` is not sh's (it reads ``a | b | c && d`` as ``a | (b |
        c && d)``), so the statement is read as the sequence it is in the text and grouped
        as sh groups it: ``|`` first, then ``&&`` and ``||`` from left to right."""
        items: list[Stage | str] = []
        self.sequence(node, items)
        pipelines: list[Pipeline] = []
        operators: list[str] = []
        stages: list[Stage] = []
        negated = False
        previous: Stage | str = ""  # "" at the start of a pipeline
        for item in items:
            if isinstance(item, Stage):
                if isinstance(previous, Stage):
                    raise _Refused
                stages.append(item)
            elif item == "!":
                if previous != "" or negated:  # "a | ! b" is not sh
                    raise _Refused
                negated = True
            elif not isinstance(previous, Stage):  # "|", "&&", "||" after a stage only
                raise _Refused
            elif item in _LIST_OPERATORS:
                pipelines.append(Pipeline(tuple(stages), negated))
                operators.append(item)
                stages, negated, item = [], False, ""
            previous = item
        if not isinstance(previous, Stage):
            raise _Refused
        pipelines.append(Pipeline(tuple(stages), negated))
        return pipelines, operators

    def sequence(self, node, items: list[Stage | str]) -> None:
        """Append the stages and connectors (``|``, ``&&``, ``||``, ``!``) of ``node``."""
        kind = node.type
        if kind in ("list", "pipeline", "negated_command"):
            for child in node.children:
                if child.type == "comment":
                    continue
                if child.type in ("|", "&&", "||", "!"):
                    items.append(child.type)
                elif child.is_named:
                    self.sequence(child, items)
                else:  # "|&" (bash: stderr too), anything else
                    raise _Refused
        elif kind == "redirected_statement":
            # Redirections written after a statement belong to its last simple command.
            [body, *redirections] = node.children
            if body.type.endswith("_redirect"):
                raise _Refused
            self.sequence(body, items)
            last = items[-1]
            if not isinstance(last, Stage):
                raise _Refused
            extra = self.parts(redirections)
            words = tuple(sorted(last.words + extra.words, key=lambda w: w.start))
            items[-1] = Stage(words, last.redirects + extra.redirects,
                              last.heredocs + extra.heredocs)
        else:
            items.append(self.stage(node))

    def stage(self, node) -> Stage:
        if node.type == "command":
            return self.parts(node.children)
        if node.type == "variable_assignment":
            return self.parts([node])
        if node.type == "variable_assignments":
            return self.parts(node.children)
        raise _Refused

    def parts(self, nodes) -> Stage:
        words: list[Word] = []
        redirects: list[Redirect] = []
        heredocs: list[str] = []
        for node in nodes:
            kind = node.type
            if kind == "comment":
                continue
            if kind == "variable_assignment":
                if any(w.kind == "word" for w in words):
                    raise _Refused
                words.append(self.assignment(node))
            elif kind == "command_name":
                [inner] = node.children
                words.append(self.word(inner))
            elif kind == "file_redirect":
                redirect, extra = self.file_redirect(node)
                redirects.append(redirect)
                words += extra
            elif kind == "heredoc_redirect":
                heredocs.append(self.text(node))
            else:
                words.append(self.word(node))
        return Stage(tuple(words), tuple(redirects), tuple(heredocs))

    def file_redirect(self, node) -> tuple[Redirect, list[Word]]:
        fd, op, targets = "", None, []
        for child in node.children:
            if child.type == "file_descriptor":
                fd = self.text(child)
            elif child.type in _REDIRECTS:
                op = child.type
            elif child.is_named:
                targets.append(child)
            else:  # "&>", "&>>" (bash: both streams; sh: a background job)
                raise _Refused
        if op is None:
            raise _Refused
        words = [self.word(t) for t in targets]
        if op in (">&-", "<&-"):
            return Redirect(fd, op, None), words
        if not words:
            raise _Refused
        target, *extra = words  # "a > f x": x is an argument of a
        if op in _DUPLICATIONS and not re.fullmatch(r"[0-9]+|-", target.source):
            raise _Refused  # ">&file" is bash's "&>file"
        return Redirect(fd, op, target), extra

    def assignment(self, node) -> Word:
        name, value = "", Word("word", "", "")
        for child in node.children:
            if child.type == "variable_name":
                name = self.text(child)
            elif child.type != "=":
                value = self.word(child)
        if not name:
            raise _Refused
        return Word("assign", f"{name}={value.text}", self.text(node), value.active,
                    node.start_byte)

    def word(self, node) -> Word:
        text, active = self.value(node)
        return Word("word", text, self.text(node), active, node.start_byte)

    def value(self, node) -> tuple[str, bool]:
        """The word ``node`` after quote removal, and whether it is active."""
        kind, text = node.type, self.text(node)
        if kind == "word":
            return _WORD_ESCAPE.sub(lambda m: "" if m.group(1) == "\n" else m.group(1),
                                    text), False
        if kind == "number":
            if not re.fullmatch(r"[0-9A-Za-z#_-]+", text):
                raise _Refused
            return text, False
        if kind == "raw_string":
            return text[1:-1], False
        if kind == "string":
            active = False
            for child in node.children:
                if child.type in ('"', "string_content"):
                    continue
                active = self.value(child)[1] or active
            inner = _STRING_ESCAPE.sub(lambda m: "" if m.group(1) == "\n" else m.group(1),
                                       text[1:-1])
            return inner, active
        if kind == "concatenation":
            parts = [self.value(child) for child in node.children]
            return "".join(p for p, _ in parts), any(a for _, a in parts)
        if kind == "simple_expansion":
            names = [c.type for c in node.children]
            if names not in (["$", "variable_name"], ["$", "special_variable_name"]):
                raise _Refused
            return text, False
        if kind == "expansion":
            names = [c.type for c in node.children]
            plain = names in (["${", "variable_name", "}"],
                              ["${", "special_variable_name", "}"])
            return text, not plain
        if kind in ("command_substitution", "arithmetic_expansion"):
            return text, True
        raise _Refused  # $'...', $"...", <(...), a lone $, anything not listed


def matches(command: CommandLine, pattern: CommandLine) -> bool:
    """Whether ``command`` is an instance of ``pattern``: the same operators between the
    same number of pipelines, each of as many stages, negated alike; stage by stage, the
    same redirections (operators, descriptors; targets matched as words), the same
    here-documents verbatim, and words matched in order: a pattern word ``*`` stands for one
    or more words, any other is an ``fnmatch`` pattern for one word of the same kind (a
    ``..`` path segment in the word only where the pattern word has one too); an active
    word matches only the same text in the pattern."""
    if command.operators != pattern.operators:
        return False
    for ours, theirs in zip(command.pipelines, pattern.pipelines, strict=True):
        if ours.negated != theirs.negated or len(ours.stages) != len(theirs.stages):
            return False
        if not all(_stage_matches(c, p) for c, p in zip(ours.stages, theirs.stages,
                                                         strict=True)):
            return False
    return True


def _stage_matches(command: Stage, pattern: Stage) -> bool:
    if command.heredocs != pattern.heredocs or len(command.redirects) != len(pattern.redirects):
        return False
    for ours, theirs in zip(command.redirects, pattern.redirects, strict=True):
        if (ours.fd, ours.op) != (theirs.fd, theirs.op):
            return False
        if (ours.target is None) != (theirs.target is None):
            return False
        if (ours.target is not None and theirs.target is not None
                and not _word_matches(ours.target, theirs.target)):
            return False
    return _words_match(command.words, pattern.words)


def _word_matches(command: Word, pattern: Word) -> bool:
    if command.kind != pattern.kind:
        return False
    if command.active or pattern.active:
        return command.source == pattern.source
    if _PARENT in command.text.split("/") and _PARENT not in pattern.text.split("/"):
        return False  # "./tools/*" is a folder: no "*" climbs out of it with ".."
    return fnmatch.fnmatchcase(command.text, pattern.text)


def _words_match(command: tuple[Word, ...], pattern: tuple[Word, ...]) -> bool:
    n, m = len(command), len(pattern)
    # rest[i][j]: command[i:] matches pattern[j:]
    rest = [[False] * (m + 1) for _ in range(n + 1)]
    rest[n][m] = True
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            if _is_star(pattern[j]):  # takes command[i], then stops or takes more
                rest[i][j] = not command[i].active and (rest[i + 1][j + 1] or rest[i + 1][j])
            else:
                rest[i][j] = _word_matches(command[i], pattern[j]) and rest[i + 1][j + 1]
    return rest[0][0]


def _is_star(word: Word) -> bool:
    return word.kind == "word" and word.text == STAR and not word.active


def literal_pattern(command: CommandLine) -> str | None:
    """The narrowest useful pattern for ``command``: its structure, each stage's
    assignments and program word kept literally, then `` *`` where the stage has arguments
    (``FOO=bar rm -rf x | head -n 1`` gives ``FOO=bar rm * | head *``). ``None`` if any
    stage has a redirection, a here-document or an active word: such a line is approved one
    at a time."""
    shown: list[str] = []
    joins = {";": "; ", "&": " & ", "&&": " && ", "||": " || ", "": ""}
    for pipeline, operator in zip(command.pipelines, command.operators, strict=True):
        stages = []
        for stage in pipeline.stages:
            if stage.redirects or stage.heredocs or any(w.active for w in stage.words):
                return None
            kept: list[str] = []
            rest = list(stage.words)
            while rest and rest[0].kind == "assign":
                name, _, value = rest.pop(0).text.partition("=")
                kept.append(f"{name}={_literal(value)}")
            if rest:
                kept.append(_literal(rest.pop(0).text))
            if rest:
                kept.append(STAR)
            stages.append(" ".join(kept))
        text = " | ".join(stages)
        shown.append(("! " if pipeline.negated else "") + text + joins[operator])
    return "".join(shown).rstrip()


def _literal(text: str) -> str:
    """``text`` as one shell word that, after quote removal, ``fnmatch`` reads literally."""
    return shlex.quote(re.sub(r"([*?\[])", r"[\1]", text))
