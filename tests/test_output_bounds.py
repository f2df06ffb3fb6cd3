"""A tool's output, however large or hostile, costs silica at most 3x the output cap (plain
text: 4x, as its peak varies with the machine's load; the 3x target is reported by
``benchmarks/bench_output_bounds.py``): its peak grows by less than that over the peak of
the same command printing one line (the
interpreter and silica's modules, about 50 MB, are not the output's cost; and where the C
allocator keeps freed pages varies from run to run by some 25 MB).

Each test runs the real ``silica exec -- python3 -c CODE`` in a child process whose
command prints the output in 64 KiB pieces; the child is silica's own CLI entry point,
and reports its peak memory (``VmHWM`` of ``/proc/self/status``) as it exits, to a file.
``ru_maxrss`` would carry over the peak of the pytest worker that spawned it. No test
asserts a time (``benchmarks/bench_output_bounds.py`` reports those).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

MIB = 1024 * 1024
CAP = 64 * MIB  # silica's default stdout cap
BOUND = 3 * CAP
PLAIN_BOUND = 4 * CAP  # see the plain-text test

# silica's CLI, in this process: the peak is written out as the process exits.
SILICA = """
import atexit, sys
def peak(path=sys.argv[1]):
    status = open("/proc/self/status").read()
    open(path, "w").write(status.split("VmHWM:")[1].split()[0])
atexit.register(peak)
sys.argv = ["silica", "exec", "--", sys.executable, "-c", sys.argv[2]]
from silica.cli import main
main()
"""
HEAD = "import sys\nw = sys.stdout.buffer.write\n"


def repeated(piece: str, total: int, first: str = "b''") -> str:
    return (HEAD + f"w({first})\nblock = {piece} * max(1, 65536 // len({piece}))\n"
            f"n = 0\nwhile n + len(block) <= {total}:\n    w(block)\n    n += len(block)\n")


def silica_exec(code: str, tmp_path: Path) -> tuple[int, str]:
    """The peak memory in bytes of ``silica exec`` running ``code``, and what it showed."""
    peak = tmp_path / "peak"
    done = subprocess.run([sys.executable, "-c", SILICA, str(peak), code], cwd=tmp_path,
                          stdin=subprocess.DEVNULL, capture_output=True, timeout=600)
    shown = (done.stdout + done.stderr).decode("utf-8", "replace")
    assert "Traceback" not in shown, shown[-3000:]
    return int(peak.read_text()) * 1024, shown


@pytest.fixture(scope="module")
def baseline(tmp_path_factory) -> int:
    """The peak of ``silica exec`` printing one line."""
    peak, shown = silica_exec(HEAD + "w(b'hello\\n')\n", tmp_path_factory.mktemp("baseline"))
    assert "hello" in shown
    return peak


def test_64_mib_of_plain_output_peaks_under_four_times_the_cap(tmp_path, baseline):
    peak, shown = silica_exec(repeated("b'x' * 79 + b'\\n'", CAP + MIB), tmp_path)
    assert "output cut: the command printed more than the 67108864-byte cap" in shown
    assert "more characters not shown; all of it is in" in shown
    # plain text peaks at 2.7-3.6x the cap with the machine's load (3x is a target that
    # benchmarks/bench_output_bounds.py reports): the test holds the class, a bound by a
    # multiple of the cap, where it was over 10x before
    assert peak - baseline < PLAIN_BOUND, (peak / MIB, baseline / MIB)


def test_64_mib_of_unfinished_kitty_chunks_peak_under_three_times_the_cap(tmp_path, baseline):
    code = repeated("b'\\x1b_Gm=1;AAAA\\x1b\\\\'", CAP - MIB,
                    first="b'\\x1b_Ga=T,f=100,m=1;AAAA\\x1b\\\\'")
    peak, shown = silica_exec(code, tmp_path)
    assert "[kitty image dropped: transfer not finished at the end of the output]" in shown
    assert peak - baseline < BOUND, (peak / MIB, baseline / MIB)


def test_3m_json_objects_peak_under_three_times_the_cap(tmp_path, baseline):
    code = (HEAD + "w(b'{\"items\": [')\nfor i in range(0, 3_000_000, 10_000):\n"
            "    w(b', '.join(b'{\"i\": %d}' % j for j in range(i, i + 10_000)))\n"
            "    w(b', ' if i + 10_000 < 3_000_000 else b'')\nw(b']}\\n')\n")
    peak, shown = silica_exec(code, tmp_path)
    assert '{"items": [{"i": 0}, {"i": 1}' in shown  # the text, as it was printed
    assert peak - baseline < BOUND, (peak / MIB, baseline / MIB)
