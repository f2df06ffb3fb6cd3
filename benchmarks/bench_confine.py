"""Benchmark the start of the in-sandbox stage (``silica/tools/confine.py``).

    python benchmarks/bench_confine.py [--repeat 30] [--strict]

The figures: ``python -I -S confine.py [--policy P] -- /bin/true`` against the bare
``python -I -S -c pass``, run from the source and from the bytecode ``script_command()``
keeps, with no policy, with a file policy (Landlock paths) and with the proxy forwarder.
The sides run interleaved; figures are medians. It reports; it is not a test: it exits 0
even when the target is missed, unless ``--strict`` is given.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

from common import REPO, Row, bench_parser, console, med, ms, note, report, temporary_folder

sys.path.insert(0, str(REPO))
from silica.tools import confine  # noqa: E402 - after the repository is on the path

TARGET_MS = 10.0


def timed(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, check=True, stdin=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--repeat", type=int, default=30, help="runs per figure (median)")
    opts = parser.parse_args()
    started = time.perf_counter()
    python = [sys.executable, "-I", "-S"]
    with temporary_folder("silica-bench-confine-", opts.keep) as root:
        (root / "proxy.sock").touch()  # never connected to: only the start is measured
        files = {"read": ["/usr", "/lib", "/lib64", "/bin", "/etc", "/proc", "/dev",
                          sys.prefix, sys.base_prefix], "write": [str(root)]}
        proxy = {"network": "proxy", "proxy_socket": str(root / "proxy.sock")}
        fast = confine.script_command()
        steps = {"bare python": [*python, "-c", "pass"]}
        for name, policy in (("no policy", {}), ("files", files), ("proxy", proxy)):
            args = ["--policy", json.dumps(policy), "--", "/bin/true"]
            steps[f"source, {name}"] = [*python, str(confine.__file__), *args]
            steps[f"bytecode, {name}"] = [*fast, *args]
        console.print(f"confine.py start benchmark, repeat {opts.repeat}; bytecode: "
                      f"{fast[-1]}", soft_wrap=True)
        note("warming up (one run of each)")
        for argv in steps.values():
            timed(argv)
        times: dict[str, list[float]] = {k: [] for k in steps}
        names = list(steps)
        note("measuring, interleaved")
        for r in range(opts.repeat):
            for name in names[r % len(names):] + names[:r % len(names)]:
                times[name].append(timed(steps[name]))
    bare = med(times["bare python"])
    rows = []
    for name in names[1:]:
        extra = (med(times[name]) - bare) * 1000
        rows.append(Row.judged(f"`confine.py` ({name}) − bare `python -I -S -c pass`",
                               f"{ms(med(times[name]))} − {ms(bare)}", extra,
                               f"{extra:+.1f} ms", f"≤ +{TARGET_MS:.0f} ms",
                               extra <= TARGET_MS))
    return report(rows, title="confine.py start", started=started, strict=opts.strict,
                  command=f"python benchmarks/bench_confine.py --repeat={opts.repeat}")


if __name__ == "__main__":
    sys.exit(main())
