"""``[sandbox] mode`` where a layer is missing, bad sandbox settings, grants, ``silica
sandbox``, ``exec --sandbox`` and the shell tool: the real CLI in real subprocesses, real
tools run by the real uv, a real (or a failing fake) bubblewrap.

A machine without bubblewrap is simulated with a fake ``bwrap`` first on PATH that fails as
bwrap does on a kernel without unprivileged user namespaces. The probe's answer is cached
per boot under ``$SILICA_HOME/cache``; each test has its own ``SILICA_HOME``, so each
probes afresh.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
from conftest import simple_spec, write_tool

CANARY = "CANARY-ssh-private-key-7f3a"
WARNING = "silica: tools run only partly confined"
NO_USERNS = ("bwrap: No permissions to creating new namespace, likely because the kernel "
             "does not allow non-privileged user namespaces. On e.g. debian this can be "
             "enabled with 'sysctl kernel.unprivileged_userns_clone=1'.")

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None or not sys.platform.startswith(
    "linux"), reason="needs bubblewrap on Linux")


def _landlock_abi() -> int:
    from silica.tools.sandbox import fresh_probe

    return fresh_probe().landlock_abi if sys.platform.startswith("linux") else 0


needs_landlock = pytest.mark.skipif(_landlock_abi() < 6, reason="the Landlock-only fallback "
                                    "tests need Landlock ABI 6 (Linux 6.12)")


class World:
    """A temporary HOME with a private key, a SILICA_HOME, a workspace and, with
    ``no_bwrap``, a failing ``bwrap`` first on PATH."""

    def __init__(self, root: Path, workspace: Path) -> None:
        self.root = root
        self.home = root / "home"
        self.silica_home = root / "silica"
        self.tools = self.silica_home / "tools"
        self.workspace = workspace
        self.fakebin = root / "fakebin"
        (self.home / ".ssh").mkdir(parents=True)
        (self.home / ".ssh" / "id_rsa").write_text(CANARY + "\n")
        (self.home / ".bashrc").write_text("# bashrc\n")
        self.tools.mkdir(parents=True)
        self.fakebin.mkdir()
        self.path = os.environ["PATH"]

    def no_bwrap(self) -> None:
        fake = self.fakebin / "bwrap"
        fake.write_text(f"#!/bin/sh\necho \"{NO_USERNS}\" >&2\nexit 1\n")
        fake.chmod(0o755)
        self.path = f"{self.fakebin}{os.pathsep}{os.environ['PATH']}"

    def config(self, text: str) -> None:
        (self.silica_home / "config.toml").write_text(textwrap.dedent(text), encoding="utf-8")

    def env(self) -> dict[str, str]:
        env = {**os.environ, "HOME": str(self.home), "SILICA_HOME": str(self.silica_home),
               "PATH": self.path, "NO_COLOR": "1", "COLUMNS": "400"}
        return env

    def silica(self, *args: str, cwd: Path | None = None,
               timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "silica", *args], capture_output=True,
                              text=True, env=self.env(), cwd=cwd or self.workspace,
                              timeout=timeout, stdin=subprocess.DEVNULL)


@pytest.fixture
def world(tmp_path, project) -> World:
    return World(tmp_path / "world", project)


@pytest.fixture
def world_off_tmp(project):
    """A World whose HOME and SILICA_HOME are outside /tmp: the Landlock-only fallback lists
    every folder on the way to a hidden path, and /tmp here holds thousands of files (see
    test_the_landlock_fallback_runs_beside_a_crowded_folder)."""
    root = Path(tempfile.mkdtemp(prefix="silica-modes-", dir="/var/tmp"))
    try:
        yield World(root, project)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def peek_tool(folder: Path, name: str = "peek", metadata: str = "") -> Path:
    """A tool that marks the workspace it ran in, then tries to read ~/.ssh/id_rsa and to
    write outside the workspace and ~/.bashrc, and prints what happened as JSON."""
    doc = f'"""{name} tool.\n\nMetadata:\n    {metadata}\n"""\n' if metadata else ""
    spec = simple_spec(name)
    return write_tool(folder, f"{name}.py", doc + textwrap.dedent(f"""\
        import json, os, sys
        from pathlib import Path
        if "--toolspec" in sys.argv:
            print(json.dumps({spec!r}))
            sys.exit(0)
        out = {{}}
        Path(os.environ["SILICA_WORKDIR"], "marker-{name}").write_text("ran")
        try:
            out["ssh"] = Path("~/.ssh/id_rsa").expanduser().read_text().strip()
        except OSError as exc:
            out["ssh"] = "denied: " + type(exc).__name__
        for key, read in (("proc", lambda: os.listdir("/proc")),
                          ("config", lambda: Path(os.environ["SILICA_HOME"],
                                                  "config.toml").read_text()),
                          ("parent_environ",
                           lambda: open(f"/proc/{{os.getppid()}}/environ", "rb").read())):
            try:
                out[key] = "read" if read() else "empty"
            except OSError as exc:
                out[key] = "denied: " + type(exc).__name__
        for key, path in (("outside", "~/outside-{name}"), ("bashrc", "~/.bashrc")):
            try:
                with open(Path(path).expanduser(), "a") as f:
                    f.write("# written by {name}\\n")
                out[key] = "written"
            except OSError as exc:
                out[key] = "denied: " + type(exc).__name__
        print(json.dumps(out))
        """), deps="")


def result_json(done: subprocess.CompletedProcess) -> dict:
    """The JSON a peek tool printed (the last line of ``tools run``'s output)."""
    line = [ln for ln in done.stdout.splitlines() if ln.startswith("{")][-1]
    return json.loads(line)


# -- require, where bubblewrap cannot run ---------------------------------------------------


def test_require_without_namespaces_runs_nothing_and_says_what_is_missing(world):
    world.no_bwrap()
    world.config('[sandbox]\nmode = "require"\n')
    peek_tool(world.tools)
    done = world.silica("tools", "run", "peek")
    assert done.returncode != 0
    assert not (world.workspace / "marker-peek").exists()  # the tool never ran
    said = done.stdout + done.stderr
    assert "Traceback" not in said
    assert "require" in said and "bubblewrap" in said
    assert "No permissions to creating new namespace" in said  # what bwrap said
    assert 'mode = "best-effort"' in said  # the other way out
    assert (world.home / ".bashrc").read_text() == "# bashrc\n"

    listed = world.silica("tools", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    [row] = [t for t in json.loads(listed.stdout) if t["name"] == "peek"]
    assert row["status"] == "error" and "bubblewrap" in row["reason"]


def test_require_without_bubblewrap_installed_names_the_package(world):
    for name in ("python", "python3", f"python3.{sys.version_info.minor}"):
        (world.fakebin / name).symlink_to(sys.executable)  # for uv to find
    world.path = str(world.fakebin)  # and no bwrap (uv comes with silica)
    world.config('[sandbox]\nmode = "require"\n')
    peek_tool(world.tools)
    done = world.silica("tools", "run", "peek")
    assert done.returncode != 0
    assert not (world.workspace / "marker-peek").exists()
    assert "bubblewrap is not installed" in done.stdout + done.stderr
    assert "apt-get install bubblewrap" in done.stdout + done.stderr
    report = world.silica("sandbox", "--json")
    assert report.returncode == 1
    assert "not installed" in json.loads(report.stdout)["layers"]["bubblewrap"]["problem"]


@needs_bwrap
def test_require_with_every_layer_runs_the_tool_confined(world):
    world.config('[sandbox]\nmode = "require"\n')
    peek_tool(world.tools)
    done = world.silica("tools", "run", "peek")
    assert done.returncode == 0, done.stderr
    seen = result_json(done)
    assert seen["ssh"].startswith("denied") and CANARY not in done.stdout
    assert seen["outside"].startswith("denied") and seen["bashrc"].startswith("denied")
    assert seen["config"].startswith("denied")
    assert (world.workspace / "marker-peek").read_text() == "ran"
    assert WARNING not in done.stderr


def test_require_refuses_the_landlock_only_fallback_too(world_off_tmp):
    """Decided: "require" needs bubblewrap. Landlock alone leaves other processes' names
    visible, a granted tool's hosts unchecked and paths inside the workspace unprotected, so
    a tool confined by it alone is a partly confined tool, which require refuses."""
    world = world_off_tmp
    world.no_bwrap()
    world.config('[sandbox]\nmode = "require"\n')
    peek_tool(world.tools)
    done = world.silica("tools", "run", "peek")
    assert done.returncode != 0
    assert not (world.workspace / "marker-peek").exists()
    assert "bubblewrap" in done.stdout + done.stderr


# -- best-effort, where bubblewrap cannot run ----------------------------------------------


@needs_landlock
def test_best_effort_without_namespaces_still_confines_files_and_warns_once(world_off_tmp):
    world = world_off_tmp
    world.no_bwrap()
    world.config('[sandbox]\nmode = "best-effort"\n')
    peek_tool(world.tools, "peek")
    peek_tool(world.tools, "poke")
    listed = world.silica("tools", "list")  # two --toolspec runs in one process
    assert listed.returncode == 0, listed.stderr
    assert listed.stderr.count(WARNING) == 1, listed.stderr
    done = world.silica("tools", "run", "peek")
    assert done.returncode == 0, done.stderr
    seen = result_json(done)
    assert seen["ssh"].startswith("denied") and CANARY not in done.stdout
    assert seen["outside"].startswith("denied") and not (world.home / "outside-peek").exists()
    assert seen["bashrc"].startswith("denied")
    assert seen["proc"].startswith("denied") and seen["parent_environ"].startswith("denied")
    assert seen["config"].startswith("denied")
    assert (world.workspace / "marker-peek").read_text() == "ran"
    [warning] = [ln for ln in done.stderr.splitlines() if WARNING in ln]
    assert "bubblewrap" in warning and "not confined" in warning


def test_mode_off_runs_unconfined_and_says_nothing(world):
    world.no_bwrap()
    world.config('[sandbox]\nmode = "off"\n')
    peek_tool(world.tools)
    done = world.silica("tools", "run", "peek")
    assert done.returncode == 0, done.stderr
    seen = result_json(done)
    assert seen["ssh"] == CANARY and seen["outside"] == "written" and seen["config"] == "read"
    assert WARNING not in done.stderr and "sandbox" not in done.stderr
    listed = world.silica("tools", "list", "--json")
    [row] = [t for t in json.loads(listed.stdout) if t["name"] == "peek"]
    assert row["sandbox"]["mode"] == "off"
    table = world.silica("tools", "list")
    [line] = [ln for ln in table.stdout.splitlines() if ln.split("│")[0].strip() == "peek"]
    assert "off (unconfined)" in line


@needs_landlock
def test_the_landlock_fallback_runs_beside_a_crowded_folder(world):
    world.no_bwrap()
    crowd = world.home  # holds ~/.ssh, so each of its entries is listed
    for i in range(3000):
        (crowd / f"uv-{i:060d}.lock").touch()
    peek_tool(world.tools)
    done = world.silica("tools", "run", "peek")
    assert "Argument list too long" not in done.stdout + done.stderr
    assert done.returncode == 0, done.stderr
    assert result_json(done)["ssh"].startswith("denied")


def test_one_warning_even_for_a_tool_granted_hosts(world_off_tmp):
    world = world_off_tmp
    world.no_bwrap()
    world.config('[tools.network_grant]\npeek = ["example.org"]\n')
    peek_tool(world.tools, metadata="network: example.org")
    done = world.silica("tools", "run", "peek")
    assert done.returncode == 0, done.stderr
    assert done.stderr.count(WARNING) == 1, done.stderr


# -- why bubblewrap cannot start -----------------------------------------------------------


def sysctls(root: Path, **values: str) -> Path:
    """A /proc/sys look-alike holding ``values`` (``kernel__x`` names kernel/x)."""
    for name, value in values.items():
        path = root / name.replace("__", "/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(value + "\n")
    return root


@pytest.mark.parametrize(("values", "named", "fix"), [
    ({"kernel__apparmor_restrict_unprivileged_userns": "1",
      "kernel__unprivileged_userns_clone": "1", "user__max_user_namespaces": "100"},
     "AppArmor restricts unprivileged user namespaces",
     "sudo sysctl kernel.apparmor_restrict_unprivileged_userns=0"),
    ({"kernel__apparmor_restrict_unprivileged_userns": "0",
      "kernel__unprivileged_userns_clone": "0", "user__max_user_namespaces": "100"},
     "unprivileged user namespaces are off",
     "sudo sysctl kernel.unprivileged_userns_clone=1"),
    ({"user__max_user_namespaces": "0"},
     "user namespaces are off (user.max_user_namespaces = 0)",
     "sudo sysctl user.max_user_namespaces=15000"),
])
def test_the_machine_setting_behind_a_failed_bwrap_is_named_with_its_fix(
        tmp_path, monkeypatch, values, named, fix):
    from silica.tools import sandbox

    monkeypatch.setattr(sandbox, "SYSCTL_ROOT", sysctls(tmp_path / "sys", **values))
    fake = tmp_path / "bin" / "bwrap"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\necho \"{NO_USERNS}\" >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    layers = sandbox.fresh_probe()
    assert layers.bwrap is None
    assert named in layers.bwrap_problem and fix in layers.bwrap_problem
    assert "No permissions to creating new namespace" in layers.bwrap_problem
    [phrase] = [m for m in layers.missing() if "bubblewrap" in m]
    assert fix in phrase


def test_a_failed_bwrap_on_a_machine_with_no_such_setting_says_what_bwrap_said(tmp_path,
                                                                               monkeypatch):
    from silica.tools import sandbox

    monkeypatch.setattr(sandbox, "SYSCTL_ROOT", sysctls(tmp_path / "sys"))
    problem = sandbox._why_no_namespaces("bwrap: setting up uid map: Permission denied")
    assert problem == "bubblewrap could not start: bwrap: setting up uid map: Permission denied"


# -- bad sandbox settings ------------------------------------------------------------------

BAD_SETTINGS = [
    ('[tools.network_grant]\nt = ["http://x/"]\n', "tools.network_grant", "'http://x/'",
     "api.example.org"),
    ('[tools.network_grant]\nt = ["a b"]\n', "tools.network_grant", "'a b'", "api.example.org"),
    ('[tools.network_grant]\nt = [""]\n', "tools.network_grant", "''", "api.example.org"),
    ('[tools.network_grant]\nt = "x.org"\n', "tools.network_grant.t", "list", ""),
    ('[tools.write_grant]\nt = ["/etc"]\n', "tools.write_grant", "'/etc'", '"~/Pictures/out"'),
    ('[tools.write_grant]\nt = ["~"]\n', "tools.write_grant", "'~'", '"~/Pictures/out"'),
    ('[tools.write_grant]\nt = ["~/../etc"]\n', "tools.write_grant", "'~/../etc'",
     '"~/Pictures/out"'),
    ('[tools.write_grant]\nt = ["~/.ssh/x"]\n', "tools.write_grant", "~/.ssh",
     "grant another folder"),
    ('[tools.write_grant]\nt = ["rel/x"]\n', "tools.write_grant", "'rel/x'", "from ~"),
    ('[tools.write_grant]\nt = ["./out"]\n', "tools.write_grant", "'./out'", "from ~"),
    ('[sandbox]\nmode = "maybe"\n', "sandbox.mode", "'require', 'best-effort' or 'off'", ""),
    ('[sandbox]\ndeny_read = ["rel"]\n', "sandbox.deny_read", "'rel'", "from / or ~"),
    ('[sandbox]\nwhat = 1\n', "sandbox.what", "unknown key", ""),
    ('[sandbox]\ndeny_read = ["/x\\u0000y"]\n', "sandbox.deny_read", "'/x\\x00y'", "NUL"),
    ('[tools.write_grant]\nt = ["~/x\\u0000y"]\n', "tools.write_grant", "'~/x\\x00y'",
     "NUL"),
    ('[shell]\nnetwork = ["x y"]\n', "shell.network", "'x y'", "api.example.org"),
    ('[mcp.servers.s]\ncommand = "srv"\nnetwork = ["http://h/"]\n', "mcp.servers.s.network",
     "'http://h/'", "api.example.org"),
    ('[mcp.servers.s]\ncommand = "srv"\nwrite = ["/etc"]\n', "mcp.servers.s.write", "'/etc'",
     '"~/Pictures/out"'),
]


BAD_KEYS = [
    ('[tools.network_grant]\n"a b" = ["x.org"]\n', "tools.network_grant", "'a b'"),
    ('[tools.write_grant]\n"weather " = ["~/out"]\n', "tools.write_grant", "'weather '"),
    ('[tools.env_grant]\n"w/x" = ["KEY"]\n', "tools.env_grant", "'w/x'"),
    ('[tools]\ndisplay_grant = ["my tool"]\n', "tools.display_grant", "'my tool'"),
    ('[tools]\ndisplay_grant = [""]\n', "tools.display_grant", "''"),
]
BAD_SETTINGS += [(config, key, named, "tool name or a pattern") for config, key, named in
                 BAD_KEYS]


@pytest.mark.parametrize(("config", "key", "named", "advice"), BAD_SETTINGS,
                         ids=[c[0].replace("\n", " ") for c in BAD_SETTINGS])
def test_a_bad_sandbox_setting_is_one_clear_line_from_any_command(world, config, key, named,
                                                                  advice):
    world.config(config)
    for args in (("tools", "list"), ("sandbox",)):
        done = world.silica(*args)
        assert done.returncode != 0
        assert "Traceback" not in done.stderr and done.stdout == ""
        [line] = done.stderr.strip().splitlines()
        assert str(world.silica_home / "config.toml") in line
        assert key in line and named in line and advice in line


@pytest.mark.parametrize("config", [
    '[tools.write_grant]\nt = ["~/.silica"]\n',
    '[tools.write_grant]\nt = ["~/.silica/tools"]\n',
    '[tools.write_grant]\nt = ["~/mytools"]\n',  # $SILICA_TOOLS_DIR
    '[mcp.servers.s]\ncommand = "srv"\nwrite = ["~/.silica/packs"]\n',
])
def test_a_write_grant_into_silicas_own_folders_is_refused(world, config):
    """A tool that may write silica's config, its tools or its packs could grant itself
    anything, or change another tool's code: never a write grant."""
    world.silica_home = world.home / ".silica"
    world.tools = world.silica_home / "tools"
    world.tools.mkdir(parents=True)
    world.config(config)
    env = {**world.env(), "SILICA_TOOLS_DIR": str(world.home / "mytools")}
    done = subprocess.run([sys.executable, "-m", "silica", "tools", "list"],
                          capture_output=True, text=True, env=env, cwd=world.workspace,
                          timeout=300, stdin=subprocess.DEVNULL)
    assert done.returncode != 0, done.stdout
    assert "Traceback" not in done.stderr
    [line] = done.stderr.strip().splitlines()
    assert "write" in line and "silica" in line and "grant another folder" in line


# -- grants --------------------------------------------------------------------------------


def writer_tool(folder: Path, name: str, metadata: str = "") -> Path:
    """A tool that tries to write ~/out/<name>.txt and prints what happened."""
    doc = f'"""{name} tool.\n\nMetadata:\n    {metadata}\n"""\n' if metadata else ""
    spec = simple_spec(name)
    return write_tool(folder, f"{name}.py", doc + textwrap.dedent(f"""\
        import json, sys
        from pathlib import Path
        if "--toolspec" in sys.argv:
            print(json.dumps({spec!r}))
            sys.exit(0)
        try:
            Path("~/out/{name}.txt").expanduser().write_text("hi")
            print("written")
        except OSError as exc:
            print("denied:", type(exc).__name__)
        """), deps="")


def make_pack(world: World, src: Path) -> None:
    manifest = 'name = "team"\nversion = "1.0.0"\ndescription = "a pack"\n'
    (src / "silica-pack.toml").write_text(manifest, encoding="utf-8")
    done = world.silica("packs", "install", str(src))
    assert done.returncode == 0, done.stderr


@needs_bwrap
def test_exact_grants_apply_unasked_and_pattern_grants_only_to_what_was_asked(world, tmp_path):
    (world.home / "out").mkdir()
    writer_tool(world.tools, "named")  # asks nothing; its name is granted
    writer_tool(world.tools, "asker", "write: ~/out")  # asks; a pattern grants
    writer_tool(world.tools, "silent")  # asks nothing; only the pattern would reach it
    src = tmp_path / "src"
    writer_tool(src, "packed", "write: ~/out\n    network: api.example.org")  # a pack's
    make_pack(world, src)
    world.config("""\
        [tools.write_grant]
        named = ["~/out"]
        "*" = ["~/out"]
        [tools.network_grant]
        named = ["api.example.org"]
        "a*" = ["*.example.org"]
        "p*" = ["*.example.org"]
        """)
    for name, expect in (("named", "written"), ("asker", "written"), ("silent", "denied"),
                         ("packed", "denied")):
        done = world.silica("tools", "run", name)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip().startswith(expect), (name, done.stdout)
        assert (world.home / "out" / f"{name}.txt").exists() == (expect == "written")

    listed = world.silica("tools", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {t["name"]: t["sandbox"] for t in json.loads(listed.stdout) if t.get("sandbox")}
    out = str(world.home / "out")
    assert rows["named"] == {"mode": "best-effort",
                             "network": {"asked": [], "granted": ["api.example.org"]},
                             "write": {"asked": [], "granted": [out]},
                             "display": {"asked": False, "granted": False}}
    assert rows["asker"]["write"] == {"asked": ["~/out"], "granted": [out]}
    assert rows["asker"]["network"] == {"asked": [], "granted": []}
    assert rows["silent"]["write"] == {"asked": [], "granted": []}
    assert rows["packed"]["write"] == {"asked": ["~/out"], "granted": []}
    assert rows["packed"]["network"] == {"asked": ["api.example.org"], "granted": []}

    table = world.silica("tools", "list")
    assert table.returncode == 0, table.stderr
    [packed] = [ln for ln in table.stdout.splitlines() if ln.split("│")[0].strip() == "packed"]
    assert "network: off; asked, not granted: api.example.org, ~/out" in packed


# -- silica sandbox and silica exec --------------------------------------------------------


@needs_bwrap
def test_silica_sandbox_reports_every_layer_working_here(world):
    done = world.silica("sandbox", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["mode"] == "best-effort" and report["platform"] == "linux"
    assert report["layers"]["bubblewrap"] == {"works": True, "path": shutil.which("bwrap"),
                                              "problem": None}
    assert report["layers"]["landlock"]["works"] and report["layers"]["landlock"]["abi"] > 0
    assert report["layers"]["seccomp"] == {"works": True}
    assert report["not_confined"] == [] and report["tools_run"] == "confined"
    assert str(world.home / ".ssh") in report["hidden"]
    assert str(world.silica_home) in report["hidden"]
    assert report["writable"][0] == str(world.workspace)
    assert str(world.workspace / ".git" / "hooks") in report["protected_in_workspace"]
    text = world.silica("sandbox")
    assert text.returncode == 0, text.stderr
    assert "bubblewrap" in text.stdout and "~/.ssh" in text.stdout


@pytest.mark.parametrize(("mode", "tools_run"), [("best-effort", "partly confined"),
                                                 ("require", "refused"),
                                                 ("off", "unconfined")])
def test_silica_sandbox_says_what_is_missing_and_exits_1(world, mode, tools_run):
    world.no_bwrap()
    world.config(f'[sandbox]\nmode = "{mode}"\n')
    done = world.silica("sandbox", "--json")
    assert done.returncode == 1
    report = json.loads(done.stdout)
    assert report["mode"] == mode and report["tools_run"] == tools_run
    assert report["layers"]["bubblewrap"]["works"] is False
    assert "No permissions to creating new namespace" in report["layers"]["bubblewrap"][
        "problem"]
    assert any("bubblewrap" in line for line in report["not_confined"])
    text = world.silica("sandbox")
    assert text.returncode == 1 and "Traceback" not in text.stderr
    assert "not confined:" in text.stdout and "No permissions" in text.stdout
    if mode == "require":
        assert "refused" in text.stdout
    # under off no tool is held to the policy, so it is not shown as if it were
    assert ("Every tool may read everything except" in text.stdout) == (mode != "off")


@needs_bwrap
def test_exec_runs_your_command_unconfined_unless_sandbox_is_given(world):
    line = "cat ~/.ssh/id_rsa"
    mine = world.silica("exec", "--shell", line)
    assert mine.returncode == 0, mine.stderr
    assert CANARY in mine.stdout
    boxed = world.silica("exec", "--sandbox", "--shell", line)
    assert boxed.returncode != 0
    assert CANARY not in boxed.stdout + boxed.stderr
    wrote = world.silica("exec", "--sandbox", "--shell",
                         "echo made > made.txt && echo x >> ~/.bashrc")
    assert wrote.returncode != 0
    assert (world.workspace / "made.txt").read_text() == "made\n"
    assert (world.home / ".bashrc").read_text() == "# bashrc\n"


# -- the shell tool ------------------------------------------------------------------------


@pytest.fixture
def web():
    """A local HTTP server on 127.0.0.1 answering every GET with "hello from the host"."""
    import http.server
    import threading

    class Hello(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = b"hello from the host"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


def shell_box(network: list[str], workspace: Path):
    from silica.config import Settings, ShellSettings
    from silica.tools.toolbox import Toolbox

    settings = Settings(shell=ShellSettings(enabled=True, allow=["*"], network=network))
    return Toolbox(settings=settings, cwd=workspace)


@needs_bwrap
def test_the_shell_tool_has_no_network_unless_shell_network_is_set(project, web):
    fetch = f"{sys.executable} -c \"import urllib.request as u; " \
            f"print(u.urlopen('{web}', timeout=10).read().decode())\""
    none = shell_box([], project).call("shell", {"command": fetch})
    assert none.is_error and "hello from the host" not in none.text
    granted = shell_box(["127.0.0.1"], project).call("shell", {"command": fetch})
    assert not granted.is_error, granted.text
    assert "hello from the host" in granted.text


@needs_bwrap
def test_the_shell_tool_writes_the_workspace_but_no_start_up_file(project, monkeypatch,
                                                                  tmp_path):
    home = tmp_path / "userhome"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text(CANARY)
    (home / ".bashrc").write_text("# mine\n")
    (project / ".bashrc").write_text("# project\n")
    (project / ".git" / "hooks").mkdir()
    monkeypatch.setenv("HOME", str(home))
    box = shell_box([], project)
    made = box.call("shell", {"command": "echo made > made.txt && cat made.txt"})
    assert not made.is_error and (project / "made.txt").read_text() == "made\n"
    for target in ("~/.bashrc", "./.bashrc", "./.git/hooks/pre-commit"):
        wrote = box.call("shell", {"command": f"echo evil >> {target}"})
        assert wrote.is_error, target
    assert (home / ".bashrc").read_text() == "# mine\n"
    assert (project / ".bashrc").read_text() == "# project\n"
    assert not (project / ".git" / "hooks" / "pre-commit").exists()
    read = box.call("shell", {"command": "cat ~/.ssh/id_rsa"})
    assert read.is_error and CANARY not in read.text


@needs_bwrap
def test_a_host_the_shell_may_not_reach_names_the_setting_that_grants_it(project, web):
    fetch = f"{sys.executable} -c \"import urllib.request as u; " \
            f"print(u.urlopen('{web}', timeout=10).read().decode())\""
    refused = shell_box(["example.org"], project).call("shell", {"command": fetch})
    assert refused.is_error and "hello from the host" not in refused.text
    assert "may not reach 127.0.0.1" in refused.text
    assert "[shell] network" in refused.text


# -- a sandbox that cannot be set up for one call ------------------------------------------


@pytest.mark.parametrize("mode", ["require", "best-effort"])
def test_a_vanished_workspace_is_a_clear_result_and_runs_nothing(project, tmp_path, mode):
    from silica.config import SandboxSettings, Settings, ShellSettings
    from silica.tools.toolbox import Toolbox

    workspace = tmp_path / "gone"
    workspace.mkdir()
    box = Toolbox(settings=Settings(sandbox=SandboxSettings(mode=mode),
                                    shell=ShellSettings(enabled=True, allow=["*"])),
                  cwd=workspace)
    assert not box.call("shell", {"command": "true"}).is_error
    workspace.rmdir()
    leak = tmp_path / "leak"
    result = box.call("shell", {"command": f"touch {leak}"})
    assert result.is_error and str(workspace) in result.text and "not a folder" in result.text
    assert not leak.exists()


@needs_bwrap
def test_a_granted_folder_that_does_not_exist_yet_is_created_or_named(world):
    world.config('[tools.write_grant]\nmaker = ["~/out"]\n')
    write_tool(world.tools, "maker.py", textwrap.dedent("""\
        import json, sys
        from pathlib import Path
        if "--toolspec" in sys.argv:
            print(json.dumps({"name": "maker", "description": "makes a file",
                              "input_schema": {"type": "object", "properties": {}}}))
            sys.exit(0)
        out = Path("~/out/sub").expanduser()
        out.mkdir(parents=True, exist_ok=True)
        (out / "made.txt").write_text("made")
        print("made")
        """), deps="")
    done = world.silica("tools", "run", "maker")
    made = (world.home / "out" / "sub" / "made.txt").exists()
    assert made or ("~/out" in done.stdout + done.stderr
                    and "does not exist" in done.stdout + done.stderr), done.stdout


def test_the_landlock_fallback_keeps_git_hooks_read_only(world_off_tmp):
    """Landlock cannot refuse beneath the workspace it allows: the hook a tool writes there
    is moved aside when the run ends, the result says so, and the warning names the gap."""
    world = world_off_tmp
    world.no_bwrap()
    (world.workspace / ".git" / "hooks").mkdir(parents=True, exist_ok=True)
    write_tool(world.tools, "hook.py", textwrap.dedent("""\
        import json, os, sys
        from pathlib import Path
        if "--toolspec" in sys.argv:
            print(json.dumps({"name": "hook", "description": "writes a git hook",
                              "input_schema": {"type": "object", "properties": {}}}))
            sys.exit(0)
        try:
            Path(os.environ["SILICA_WORKDIR"], ".git/hooks/pre-commit").write_text("evil")
            print("written")
        except OSError as exc:
            print("denied", exc)
        """), deps="")
    done = world.silica("tools", "run", "hook")
    assert not (world.workspace / ".git" / "hooks" / "pre-commit").exists(), done.stderr
    assert (world.workspace / ".git" / "hooks" / "pre-commit.silica-quarantine").exists()
    assert "which no tool may write" in done.stdout, done.stdout
    assert ".git/hooks" in done.stderr  # the one warning names what is not confined


# -- write grants, any text ----------------------------------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_PARTS = st.sampled_from(["~", "", ".", "..", "out", ".ssh", ".silica", "tools", "mytools",
                          ".config", "gh", "/", "//", "a b", "x\x00y", "~root", "é"])


@settings(max_examples=300, deadline=None)
@given(st.lists(_PARTS, min_size=1, max_size=6).map("/".join))
def test_a_write_grant_is_accepted_only_strictly_inside_home_and_off_limits_folders(path):
    from pydantic import ValidationError

    from silica.config import ToolSettings
    from silica.security.sandbox import HIDDEN_IN_HOME

    home = Path.home()
    own = (home / ".silica", home / "mytools")
    saved = os.environ["SILICA_HOME"]
    os.environ.update(SILICA_HOME=str(own[0]), SILICA_TOOLS_DIR=str(own[1]))
    try:
        try:
            ToolSettings(write_grant={"t": [path]})
        except ValidationError as exc:
            [error] = exc.errors()
            assert error["type"] == "value_error" and repr(path) in error["msg"]
            return
    finally:
        os.environ["SILICA_HOME"] = saved
        del os.environ["SILICA_TOOLS_DIR"]
    granted = Path(os.path.normpath(os.path.expanduser(path)))
    assert home in granted.parents
    for folder in (*own, *(home / rel for rel in HIDDEN_IN_HOME)):
        assert granted != folder and folder not in granted.parents
        assert granted not in folder.parents


def test_exec_sandbox_under_require_without_namespaces_runs_nothing(world):
    world.no_bwrap()
    world.config('[sandbox]\nmode = "require"\n')
    done = world.silica("exec", "--sandbox", "--shell", "touch made.txt")
    assert done.returncode == 126 and done.stdout == ""
    assert not (world.workspace / "made.txt").exists()
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("error: silica sandbox: exec was not run, because [sandbox] mode")
    assert "bubblewrap" in line
    mine = world.silica("exec", "--shell", "touch made.txt")  # your own command: unconfined
    assert mine.returncode == 0, mine.stderr
    assert (world.workspace / "made.txt").exists()


def test_require_without_namespaces_starts_no_mcp_server(world):
    world.no_bwrap()
    marker = world.root / "server-ran"
    world.config(f"""\
        [sandbox]
        mode = "require"
        [mcp.servers.files]
        command = "{sys.executable}"
        args = ["-c", "open('{marker}', 'w').write('ran')"]
        """)
    listed = world.silica("tools", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    [row] = [t for t in json.loads(listed.stdout) if t["name"].startswith("files__")]
    assert row["status"] == "error"
    assert "was not run" in row["reason"] and "bubblewrap" in row["reason"]
    assert not marker.exists()


@pytest.mark.parametrize("mode", ["require", "best-effort"])
@needs_landlock
def test_the_shell_tool_without_namespaces(world_off_tmp, monkeypatch, mode):
    """require: the command is not run, and the model is told why; best-effort: it runs
    under the Landlock-only fallback, the workspace writable, ~/.ssh unreadable."""
    world = world_off_tmp
    world.no_bwrap()
    monkeypatch.setenv("PATH", world.path)
    monkeypatch.setenv("HOME", str(world.home))
    monkeypatch.setenv("SILICA_HOME", str(world.silica_home))
    from silica.config import SandboxSettings, Settings, ShellSettings
    from silica.tools.toolbox import Toolbox

    box = Toolbox(settings=Settings(sandbox=SandboxSettings(mode=mode),
                                    shell=ShellSettings(enabled=True, allow=["*"])),
                  cwd=world.workspace)
    result = box.call("shell", {"command": "echo made > made.txt; cat ~/.ssh/id_rsa"})
    assert result.is_error and CANARY not in result.text
    if mode == "require":
        assert not (world.workspace / "made.txt").exists()
        assert "shell was not run" in result.text and "bubblewrap" in result.text
    else:
        assert (world.workspace / "made.txt").read_text() == "made\n"


@needs_bwrap
def test_after_the_machine_is_fixed_silica_sandbox_and_the_tools_agree(world):
    restricted = world.root / "userns-restricted"
    restricted.touch()
    fake = world.fakebin / "bwrap"  # fails like a restricted kernel while the flag is there
    fake.write_text(f"#!/bin/sh\nif [ -e {restricted} ]; then echo \"{NO_USERNS}\" >&2; "
                    f"exit 1; fi\nexec {shutil.which('bwrap')} \"$@\"\n")
    fake.chmod(0o755)
    world.path = f"{world.fakebin}{os.pathsep}{os.environ['PATH']}"
    world.config('[sandbox]\nmode = "require"\n')
    peek_tool(world.tools)
    assert world.silica("tools", "run", "peek").returncode != 0
    restricted.unlink()  # the user runs the sysctl silica named
    assert world.silica("sandbox").returncode == 0
    done = world.silica("tools", "run", "peek")
    assert done.returncode == 0, done.stderr
    assert (world.workspace / "marker-peek").exists()


def test_require_lists_a_tool_with_a_cached_spec_as_an_error_too(world):
    world.no_bwrap()
    world.config('[sandbox]\nmode = "off"\n')
    peek_tool(world.tools)
    assert world.silica("tools", "list").returncode == 0  # its spec is cached now
    world.config('[sandbox]\nmode = "require"\n')
    assert world.silica("tools", "run", "peek").returncode != 0
    listed = world.silica("tools", "list", "--json")
    [row] = [t for t in json.loads(listed.stdout) if t["name"] == "peek"]
    assert row["status"] == "error" and "bubblewrap" in row["reason"]


# -- the display ---------------------------------------------------------------------------


@pytest.fixture
def xserver():
    """A real X server (Xvfb) on a free display: its socket's name in /tmp/.X11-unix."""
    import time

    if shutil.which("Xvfb") is None:
        pytest.skip("needs Xvfb")
    number = next(n for n in range(140, 200) if not Path(f"/tmp/.X11-unix/X{n}").exists()
                  and not Path(f"/tmp/.X{n}-lock").exists())
    server = subprocess.Popen(["Xvfb", f":{number}", "-nolisten", "tcp"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    socket = Path(f"/tmp/.X11-unix/X{number}")
    for _ in range(200):
        if socket.exists():
            break
        time.sleep(0.05)
    try:
        yield socket.name
    finally:
        server.terminate()
        server.wait(timeout=10)


def display_tool(folder: Path, name: str, asks: bool) -> Path:
    doc = f'"""{name} tool.\n\nMetadata:\n    display: true\n"""\n' if asks else ""
    spec = simple_spec(name)
    return write_tool(folder, f"{name}.py", doc + textwrap.dedent(f"""\
        import json, os, sys
        if "--toolspec" in sys.argv:
            print(json.dumps({spec!r}))
            sys.exit(0)
        print(json.dumps(sorted(os.listdir("/tmp/.X11-unix"))))
        """), deps="")


@needs_bwrap
def test_the_display_is_visible_only_to_a_tool_granted_it(world, tmp_path, xserver):
    display_tool(world.tools, "shot", asks=False)  # its name is granted
    display_tool(world.tools, "snap", asks=True)  # asks; a pattern grants
    display_tool(world.tools, "spy", asks=False)  # the pattern matches, but it did not ask
    src = tmp_path / "src"
    display_tool(src, "sketch", asks=True)  # asks, but a pack's tool
    make_pack(world, src)
    world.config('[tools]\ndisplay_grant = ["shot", "s*"]\n')
    for name, sees in (("shot", True), ("snap", True), ("spy", False), ("sketch", False)):
        done = world.silica("tools", "run", name)
        assert done.returncode == 0, done.stderr
        assert (xserver in json.loads(done.stdout.strip().splitlines()[-1])) == sees, name
    listed = world.silica("tools", "list", "--json")
    rows = {t["name"]: t["sandbox"]["display"] for t in json.loads(listed.stdout)
            if t.get("sandbox")}
    assert rows == {"shot": {"asked": False, "granted": True},
                    "snap": {"asked": True, "granted": True},
                    "spy": {"asked": False, "granted": False},
                    "sketch": {"asked": True, "granted": False}}


@needs_bwrap
def test_a_proxy_that_cannot_start_is_a_clear_result_not_a_traceback(world, monkeypatch):
    deep = world.root / ("t" * 110)
    deep.mkdir()
    monkeypatch.setenv("TMPDIR", str(deep))
    world.config('[sandbox]\nmode = "require"\n[tools.network_grant]\npeek = ["example.org"]\n')
    peek_tool(world.tools, metadata="network: example.org")
    done = world.silica("tools", "run", "peek")
    assert not (world.workspace / "marker-peek").exists()  # never run without its proxy
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    assert "socket path" in done.stdout + done.stderr


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_a_grant_key_is_accepted_only_when_a_tool_could_be_named_by_it(key):
    import fnmatch

    from pydantic import ValidationError

    from silica.config import ToolSettings

    try:
        ToolSettings(network_grant={key: ["example.org"]}, display_grant=[key])
    except ValidationError as exc:
        assert all(repr(key[:80]) in e["msg"] for e in exc.errors())
        return
    # accepted: a tool name, or a pattern made of name characters and * ? [ ] !
    plain = key.replace("*", "a").replace("?", "a").translate({ord(c): "a" for c in "[]!"})
    assert plain and all(c.isascii() and (c.isalnum() or c in "_-") for c in plain)
    fnmatch.translate(key)  # and fnmatch reads it


@pytest.mark.parametrize(("link", "target"), [("keys", ".ssh"), ("mine", ".silica/tools"),
                                              ("up", "..")])
def test_a_write_grant_through_a_link_is_judged_by_where_it_leads(world, link, target):
    """A folder granted for writing is bound where its links lead: a link to a credential
    folder or to silica's own is refused like the folder itself."""
    world.silica_home = world.home / ".silica"
    (world.silica_home / "tools").mkdir(parents=True)
    (world.home / link).symlink_to(world.home / target)
    world.config(f'[tools.write_grant]\nt = ["~/{link}"]\n')
    done = world.silica("tools", "list")
    assert done.returncode != 0, done.stdout
    [line] = done.stderr.strip().splitlines()
    assert f"'~/{link}'" in line and "grant" in line and "Traceback" not in line
