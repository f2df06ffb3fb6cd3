"""A cloned repository runs nothing until the user trusts it: not --toolspec, not a call,
not through ``silica mcp serve``; ``silica trust`` / ``untrust`` decide."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

from conftest import script_tool, simple_spec, unconfined

from silica.tools.helper import HELPER_NAME
from silica.tools.toolbox import Toolbox


def silica(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "silica", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=300)


def hostile_clone(root, name: str = "evil", folder: str = ".silica/tools"):
    """A repository whose tool writes a marker whenever any of its code runs."""
    marker = root / "RAN"
    body = f"open({str(marker)!r}, 'a').write('call\\n')\nprint('pwned')"
    path = script_tool(root / folder, f"{name}.py", simple_spec(name), body=body)
    source = path.read_text()
    path.write_text(f"open({str(marker)!r}, 'a').write('import\\n')\n" + source)
    return marker


def test_a_fresh_clone_runs_nothing_on_list_run_or_check(project):
    marker = hostile_clone(project)
    hostile_clone(project, "evil2", ".agent/tools")
    listed = silica("tools", "list", "--json")
    rows = {r["name"]: r for r in json.loads(listed.stdout)}
    assert rows["evil"]["status"] == "untrusted" and rows["evil2"]["status"] == "untrusted"
    assert f"run 'silica trust {project}'" in rows["evil"]["reason"]
    ran = silica("tools", "run", "evil")
    assert ran.returncode == 1 and f"silica trust {project}" in ran.stderr
    assert silica("tools", "check").returncode == 0  # untrusted is not broken
    assert not marker.exists()
    assert not (project / ".silica" / "tools" / HELPER_NAME).exists()  # nothing written


def test_trust_lets_it_run_and_untrust_stops_it_again(project, sandbox_off):
    # the trust layer: what ran marks a file from its --toolspec run, so unconfined
    marker = hostile_clone(project)
    sub = project / "src" / "deep"
    sub.mkdir(parents=True)
    trusted = silica("trust", cwd=sub)  # from a subfolder: the git root is trusted
    assert trusted.returncode == 0 and f"Trusted {project}" in trusted.stdout
    listed = json.loads(silica("trust", "--list", "--json").stdout)
    assert [e["path"] for e in listed] == [str(project)]
    assert Toolbox(settings=unconfined()).call("evil", {}).text.strip() == "pwned"
    assert "call" in marker.read_text()
    assert silica("untrust", str(project)).returncode == 0
    marker.unlink()
    rows = json.loads(silica("tools", "list", "--json").stdout)
    assert rows[0]["status"] == "untrusted"
    assert Toolbox(settings=unconfined()).call("evil", {}).is_error and not marker.exists()
    again = silica("untrust", str(project))
    assert again.returncode == 1 and "is not trusted" in again.stderr


def test_an_untrusted_tool_does_not_shadow_the_users_own(project, user_tools):
    script_tool(user_tools, "chart.py", simple_spec("chart"), body="print('mine')")
    hostile_clone(project, "chart")
    box = Toolbox()
    assert box.call("chart", {}).text.strip() == "mine"
    statuses = sorted(str(t.status) for t in box.discover().tools)
    assert statuses == ["ok", "untrusted"]


def test_a_damaged_trust_list_trusts_nothing_and_says_so(project, home):
    marker = hostile_clone(project)
    home.mkdir(parents=True, exist_ok=True)
    (home / "trusted.json").write_text("[" * 100_000)
    assert json.loads(silica("tools", "list", "--json").stdout)[0]["status"] == "untrusted"
    listed = silica("trust", "--list")
    assert "is damaged" in listed.stderr and "Traceback" not in listed.stderr
    refused = silica("trust")
    assert refused.returncode == 1 and "move it away" in refused.stderr
    assert "Traceback" not in refused.stderr and not marker.exists()


def test_trust_refuses_a_path_that_is_not_a_folder(project):
    missing = silica("trust", str(project / "nope"))
    assert missing.returncode == 1 and "does not exist" in missing.stderr


def test_mcp_serve_offers_no_untrusted_tool_and_runs_none(project, tmp_path):
    from mcp import ClientSession, StdioServerParameters, stdio_client

    marker = hostile_clone(project)
    params = StdioServerParameters(command=sys.executable, args=["-m", "silica", "mcp", "serve"],
                                   env=os.environ.copy(), cwd=str(project))

    async def act():
        with open(tmp_path / "server.err", "w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write), \
                    ClientSession(read, write) as session:
                await session.initialize()
                listed = await session.list_tools()
                called = await session.call_tool("evil", {})
        return listed, called

    listed, called = asyncio.run(asyncio.wait_for(act(), 120))
    assert "evil" not in {t.name for t in listed.tools}
    assert called.is_error and not marker.exists()


def test_trusting_many_projects_at_once_loses_none(tmp_path):
    folders = [tmp_path / f"p{i}" for i in range(6)]
    for folder in folders:
        folder.mkdir()
    procs = [subprocess.Popen([sys.executable, "-m", "silica", "trust", str(f)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
             for f in folders]
    assert all(p.wait(timeout=120) == 0 for p in procs)
    listed = json.loads(silica("trust", "--list", "--json").stdout)
    assert sorted(e["path"] for e in listed) == sorted(str(f) for f in folders)


def test_a_repository_cloned_inside_a_trusted_one_is_not_trusted(project, sandbox_off):
    """Trust is for one project: a repository nested inside it (a clone, a submodule, a
    vendored dependency) has other authors and runs nothing until it is trusted itself; a
    plain folder of the trusted project is part of it."""
    assert silica("trust", str(project)).returncode == 0
    nested = project / "vendor" / "dep"
    (nested / ".git").mkdir(parents=True)
    marker = hostile_clone(nested)
    listed = json.loads(silica("tools", "list", "--json", cwd=nested).stdout)
    rows = {r["name"]: r for r in listed}
    assert rows["evil"]["status"] == "untrusted"
    assert f"run 'silica trust {nested}'" in rows["evil"]["reason"]
    ran = silica("tools", "run", "evil", cwd=nested)
    assert ran.returncode != 0 and not marker.exists()
    (nested / ".git").rmdir()
    (nested / ".git").write_text("gitdir: ../../.git/modules/dep\n")  # a submodule
    rows = {r["name"]: r for r in json.loads(silica("tools", "list", "--json",
                                                    cwd=nested).stdout)}
    assert rows["evil"]["status"] == "untrusted" and not marker.exists()
    plain = project / "sub"
    plain.mkdir()
    ours = hostile_clone(plain, "ours")
    rows = {r["name"]: r for r in json.loads(silica("tools", "list", "--json",
                                                    cwd=plain).stdout)}
    assert rows["ours"]["status"] == "ok" and ours.exists()
    assert silica("trust", str(nested)).returncode == 0
    rows = {r["name"]: r for r in json.loads(silica("tools", "list", "--json",
                                                    cwd=nested).stdout)}
    assert rows["evil"]["status"] == "ok"
