"""Benchmark the overhead ``silica exec`` adds to a command.

    python benchmarks/bench_exec.py [--repeat 15] [--command "python -c pass"] [--strict]

The figure: (``silica exec -- CMD`` − ``silica --version``) vs ``CMD`` run bare, i.e. what
running a command through silica (environment, reaper, output capture, result pipeline,
showing) costs beyond the CLI's own start, relative to the command itself. Everything runs
with its own ``SILICA_HOME`` in a fresh temporary folder (``~/.silica`` is never touched);
each side is run once before measuring, the sides run interleaved, figures are medians.

The script reports; it is not a test: it exits 0 even when the target is missed, unless
``--strict`` is given.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

from common import Row, bench_parser, console, med, note, report, temporary_folder
from common import ms as _ms

TARGET = 1.3


def ms(seconds: float) -> str:
    return _ms(seconds, digits=0)


def timed(argv: list[str], cwd: Path) -> float:
    """Wall time of ``argv`` to exit; raises if it fails."""
    started = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True)
    took = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"{shlex.join(argv)} exited with {proc.returncode}:\n"
                           f"{proc.stderr.decode(errors='replace')[-2000:]}")
    return took


def main() -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--repeat", type=int, default=15, help="runs per figure (median)")
    parser.add_argument("--command", default="python -c pass",
                        help="the command to run bare and through silica exec")
    opts = parser.parse_args()
    command = "python benchmarks/bench_exec.py " + shlex.join(
        [f"--repeat={opts.repeat}", f"--command={opts.command}"])
    cmd = shlex.split(opts.command)
    if cmd and cmd[0] == "python":
        cmd[0] = sys.executable  # the venv's: the same interpreter on both sides

    started = time.perf_counter()
    with temporary_folder("silica-bench-exec-", opts.keep) as root:
        os.environ["SILICA_HOME"] = str(root / "home")  # inherited by every run below
        exe = Path(sys.executable).parent / "silica"
        silica = [str(exe)] if exe.exists() else [sys.executable, "-m", "silica"]
        steps = {
            "exec": [*silica, "exec", "--", *cmd],
            "version": [*silica, "--version"],
            "bare": cmd,
        }
        console.print(f"silica exec benchmark: `{opts.command}`, {os.cpu_count()} CPUs, "
                      f"repeat {opts.repeat}", soft_wrap=True)
        note("warming up (one run of each)")
        for argv in steps.values():
            timed(argv, root)
        times: dict[str, list[float]] = {k: [] for k in steps}
        names = list(steps)
        note("measuring, interleaved")
        for r in range(opts.repeat):
            for name in names[r % 3:] + names[:r % 3]:
                times[name].append(timed(steps[name], root))
        e, v, b = (med(times[k]) for k in ("exec", "version", "bare"))
        ratio = (e - v) / b
        row = Row.judged(f"(`silica exec -- {opts.command}` − `silica --version`) vs bare "
                         f"`{opts.command}`", f"({ms(e)} − {ms(v)}) vs {ms(b)}", ratio,
                         f"{ratio:.2f}×", f"≤ {TARGET:.2f}×", ratio <= TARGET)
    return report([row], title="silica exec benchmark", command=command, started=started,
                  strict=opts.strict)


if __name__ == "__main__":
    sys.exit(main())
