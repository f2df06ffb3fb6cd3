"""Which tool runs when several claim one name."""

from __future__ import annotations

from silica.tools.model import Tool, ToolStatus

BUILTIN_ORIGIN = "builtin"


def resolve_clashes(tools: list[Tool], allow_shadow_builtins: bool = False) -> list[str]:
    """Closest folder wins, built-in tools last, except that silica's own built-ins win
    unless ``allow_shadow_builtins``; a same-named tool in the same folder is a duplicate.
    Returns a warning for each clash that involves a pack or a protected built-in: which
    tool runs is decided by precedence, but a user should hear that two sources claim one
    name. Untrusted rows take no part: their names are unknown until they are trusted."""
    warnings: list[str] = []
    winners: dict[str, Tool] = {}

    def protected(t: Tool) -> bool:
        return t.builtin is not None and t.folder.origin == BUILTIN_ORIGIN \
            and not allow_shadow_builtins

    def rank(t: Tool) -> tuple[bool, bool, int, str]:
        return not protected(t), t.builtin is not None, t.folder.precedence, str(t.path)

    for tool in sorted(tools, key=rank):
        if tool.status is ToolStatus.UNTRUSTED:
            continue
        first = winners.get(tool.name)
        if first is None:
            winners[tool.name] = tool
        elif first.path == tool.path:
            continue  # declared twice in one file (or registered twice): already marked
        elif protected(first):
            tool.status = ToolStatus.SHADOWED
            tool.reason = (f"silica's built-in {tool.name!r} is used instead; rename this "
                           "tool, or set allow_shadow_builtins = true under [tools] in "
                           "config.toml to let it replace the built-in")
            warnings.append(f"name clash: {tool.path} ({tool.folder.origin}) names a tool "
                            f"{tool.name!r}, like silica's built-in; the built-in is used. "
                            "Rename the tool, or set allow_shadow_builtins = true under "
                            "[tools] in config.toml.")
        elif rank(first)[:3] == rank(tool)[:3]:
            tool.status = ToolStatus.INVALID_SPEC
            tool.reason = f"duplicate name {tool.name!r}: {first.path.name} declares it too"
        else:
            tool.status = ToolStatus.SHADOWED
            tool.reason = f"shadowed by {first.path} ({first.folder.origin})"
            if "pack:" in first.folder.origin + tool.folder.origin and \
                    tool.folder.origin != "builtin":
                warnings.append(f"name clash: {tool.name!r} from {first.folder.origin} "
                                f"({first.path}) is used; the one from {tool.folder.origin} "
                                f"({tool.path}) is shadowed. Rename one of them.")
    return warnings
