"""Run a piece of Python in a child process whose address space is capped (``RLIMIT_AS``).

The child first runs ``setup`` (imports, a warm-up on a small input, so that lazy
imports are paid before the cap), reads its own address-space size, caps it at that
size plus ``budget`` bytes, then runs ``work``. A reader that needs more than its
budget fails there with a ``MemoryError`` (the child's stderr says so), whatever the
machine's free memory. ``budget`` is what the reader may use for its input: the tests
give it a small constant per input byte plus a fixed slack.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from dataclasses import dataclass

MIB = 1 << 20
SLACK = 48 * MIB  # interpreter allocations besides the input's: frames, exceptions, allocator arenas

_CHILD = '''
import os, resource, sys

def _address_space() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize")

{setup}
_cap = _address_space() + {budget}
resource.setrlimit(resource.RLIMIT_AS, (_cap, _cap))
{work}
'''

# Run a tally command in the child, as the console script does; exits with its code.
TALLY = '''
def tally(*args: str) -> int:
    from cli.app import main
    sys.argv = ["tally", *args]
    try:
        main()
    except SystemExit as exc:
        sys.stdout.flush()
        sys.stderr.flush()
        return exc.code if isinstance(exc.code, int) else 1
    return 0
'''


@dataclass(frozen=True)
class Limited:
    returncode: int
    stdout: str
    stderr: str

    @property
    def out_of_memory(self) -> bool:
        return "MemoryError" in self.stderr or "Cannot allocate memory" in self.stderr


def run_limited(setup: str, work: str, budget: int, *, timeout: float = 300, cwd: str | None = None) -> Limited:
    """Run ``work`` capped at ``budget`` bytes of address space beyond what ``setup`` left."""
    script = _CHILD.format(setup=textwrap.dedent(setup), budget=int(budget), work=textwrap.dedent(work))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          check=False)
    return Limited(done.returncode, done.stdout, done.stderr)
