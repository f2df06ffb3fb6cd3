"""``silica sandbox``: which confinement layers work on this machine, why not, and the policy
every tool runs under."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from cyclopts import Parameter

from silica.cli.output import err, out, plain, print_json, print_table, say, table


def sandbox(*, json_: Annotated[bool, Parameter(name="--json", negative="")] = False):
    """Show how tools are confined here: each layer, whether it works (and how to fix it when
    it does not), the mode, and what every tool may read, write and reach.

    Exits 1 when a layer is missing (tools then run only partly confined, or not at all
    under [sandbox] mode = "require"). The JSON's "tools_run" says which: "confined",
    "partly confined", "refused" or "unconfined" (mode "off").

    Parameters
    ----------
    json_
        Print the report as JSON.
    """
    from silica.cli.tools import user_settings
    from silica.paths import cache_dir, silica_home
    from silica.security.sandbox import SandboxPolicy, tilde
    from silica.tools.sandbox import fresh_probe

    settings = user_settings()
    policy = SandboxPolicy.from_settings(settings, silica_home())
    layers = fresh_probe(cache_dir())
    conf = policy.confinement(label="a tool", workspace=Path.cwd(),
                              network=settings.shell.network)
    missing = layers.missing()
    tools_run = ("unconfined" if policy.mode == "off" else
                 "confined" if not missing else
                 "refused" if policy.mode == "require" else "partly confined")
    report = {
        "mode": policy.mode,
        "tools_run": tools_run,
        "layers": {
            "bubblewrap": {"works": bool(layers.bwrap), "path": layers.bwrap,
                           "problem": layers.bwrap_problem or None},
            "landlock": {"works": layers.landlock_abi > 0, "abi": layers.landlock_abi},
            "seccomp": {"works": layers.seccomp},
        },
        "not_confined": missing,
        "hidden": [str(p) for p in conf.hidden],
        "writable": [str(Path.cwd()), "$TMPDIR (the call's own folder)"],
        "protected_in_workspace": [str(p) for p in conf.protected],
        "platform": layers.platform,
    }
    if json_:
        print_json(report)
    else:
        grid = table("layer", "works", "detail")
        grid.add_row("bubblewrap (PID, network and mount namespaces)",
                     plain("yes", "green") if layers.bwrap else plain("no", "red"),
                     plain(layers.bwrap or layers.bwrap_problem))
        grid.add_row("Landlock (files, signals)",
                     plain("yes", "green") if layers.landlock_abi else plain("no", "red"),
                     plain(f"ABI {layers.landlock_abi}" if layers.landlock_abi else
                           "needs Linux 5.13 or later with Landlock enabled"))
        grid.add_row("seccomp (ptrace, keyring, terminal input, sockets)",
                     plain("yes", "green") if layers.seccomp else plain("no", "red"), "")
        print_table(grid)
        say(f"[sandbox] mode = \"{policy.mode}\": " + _CONSEQUENCE[tools_run])
        if policy.mode != "off":  # else nothing below holds: tools have your rights
            say("Every tool may read everything except: " +
                ", ".join(tilde(p) for p in conf.hidden if p.exists()) + ".")
            say(f"It may write only the workspace ({Path.cwd()}), its own temporary folder "
                "and the folders granted to it ([tools.write_grant]); no network unless "
                "granted ([tools.network_grant]).")
        for line in missing:
            out.print(plain(f"not confined: {line}", "yellow"))
    if missing:
        if not json_:
            err.print(plain("Some layers are missing: see the lines above for what to do.",
                            "yellow"))
        raise SystemExit(1)


_CONSEQUENCE = {
    "confined": "tools run confined by every layer",
    "partly confined": "tools run confined by the layers that work (see below what is not)",
    "refused": "tools are refused here, none runs until the missing layers below work",
    "unconfined": "tools run unconfined, with your full rights",
}
