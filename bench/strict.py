"""What reading hostile JSON and TOML costs, per input byte: memory (address space) and time.

    python bench/strict.py [--small] [--mib N]

For each reader (the nesting guard ``strictjson.nesting_depth``, ``strictjson.read_json``,
``stricttoml.read_toml``, the family reader ``runner.measure.family.parse_family``) and
each shape of document (one long string, a string of escapes, a string outside the
Basic Multilingual Plane, many short strings, dense arrays, dense objects / tables),
one child process builds an N MiB document (default 16, ``--small`` 2), reads it, and
reports the growth of its address space during the read (``VmPeak`` after minus
``VmSize`` before; what ``RLIMIT_AS`` limits) per input byte, and the time per byte.
``before`` is the nesting guard this replaced (a regular expression over the whole
text and a list of its brackets), on the long string, for the ratio. Never asserts.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

SHAPES = {  # name -> Python expression building an n-byte document (JSON; TOML where the reader is TOML)
    "long string": '\'{"a": "\' + "x" * (n - 10) + \'"}\'',
    "escapes": '\'{"a": "\' + "\\\\n" * ((n - 10) // 2) + \'"}\'',
    "non-BMP string": '\'{"a": "\' + "\\U0001F600" * ((n - 10) // 4) + \'"}\'',
    "short strings": '"[" + \'"ab",\' * (n // 5) + \'"x"]\'',
    "dense arrays": '"[" + "[1]," * (n // 4) + "[]]"',
    "dense objects": '"[" + \'{"a":1},\' * (n // 8) + "{}]"',
}
TOML_SHAPES = {
    "long string": '\'a = "\' + "x" * (n - 10) + \'"\\n\'',
    "escapes": '\'a = "\' + "\\\\n" * ((n - 10) // 2) + \'"\\n\'',
    "dense arrays": '"a = [" + "[1]," * ((n - 8) // 4) + "]\\n"',
    "dense tables": '"".join(f"[t{i}]\\n" for i in range(n // 12))',
}
FAMILY_SHAPES = {
    "one long line": '(\'{"id": "p", "prompt": "\' + "x" * (n - 30) + \'"}\\n\')',
    "many short lines": '"".join(f\'{{"id": "p{i}", "prompt": "hello world"}}\\n\' for i in range(n // 40))',
}
READERS = {
    "nesting_depth": ("from ledger.strictjson import nesting_depth", "nesting_depth(doc)", SHAPES),
    "read_json": ("from ledger.strictjson import read_json", "read_json(doc.encode(), 'doc')", SHAPES),
    "read_toml": ("from ledger.stricttoml import read_toml", "read_toml(doc.encode(), 'doc')", TOML_SHAPES),
    "parse_family": ("from runner.measure.family import parse_family", "parse_family(doc.encode(), 'f')",
                     FAMILY_SHAPES),
}
BEFORE = '''
import re
from itertools import accumulate
_S = re.compile(r'"(?:[^"\\\\]|\\\\.)*"', re.S)
_B = re.compile(r"[\\[\\]{}]")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}
def before(text):
    return max(accumulate([_STEP[c] for c in _B.findall(_S.sub("", text))]), default=0)
'''

CHILD = '''
import sys, time
sys.path.insert(0, {repo!r})
def vm(field):
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
{imports}
n = {size}
doc = {shape}
size = len(doc.encode("utf-8"))
base = vm("VmSize")
began = time.perf_counter()
refused = ""
try:
    {call}
except Exception as exc:
    refused = "refused: " + str(exc)[:60]
took = time.perf_counter() - began
print(size, vm("VmPeak") - base, took, refused)
'''


def measure(imports: str, call: str, shape: str, size: int) -> tuple[float, float, str]:
    """(address-space growth per input byte, ns per input byte, a refusal if any) of one read in a fresh process."""
    code = CHILD.format(repo=str(REPO), imports=imports, size=size, shape=shape, call=call)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=1800)
    got, grown, took, *refused = done.stdout.split(maxsplit=3)
    return int(grown) / int(got), float(took) / int(got) * 1e9, " ".join(refused)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--small", action="store_true")
    parser.add_argument("--mib", type=int, default=None)
    args = parser.parse_args(argv)
    mib = args.mib or (2 if args.small else 16)
    size = mib << 20
    print(f"documents of {mib} MiB; bytes of address space and ns of time per input byte")
    print(f"{'reader':<14} {'shape':<17} {'B/byte':>7} {'ns/byte':>8}")
    for reader, (imports, call, shapes) in READERS.items():
        for name, shape in shapes.items():
            per_byte, ns, refused = measure(imports, call, shape, size)
            print(f"{reader:<14} {name:<17} {per_byte:7.2f} {ns:8.1f} {refused}".rstrip(), flush=True)
    before_size = min(size, 4 << 20)  # the old guard needs ~125 bytes per byte: keep it affordable
    old, old_ns, _ = measure(BEFORE, "before(doc)", SHAPES["long string"], before_size)
    new, new_ns, _ = measure("from ledger.strictjson import nesting_depth", "nesting_depth(doc)",
                          SHAPES["long string"], before_size)
    print(f"nesting guard on a {before_size >> 20} MiB string: before {old:.1f} B/byte {old_ns:.1f} ns/byte, "
          f"now {new:.2f} B/byte {new_ns:.1f} ns/byte (memory ratio {old / max(new, 1e-3):.0f}x)")


if __name__ == "__main__":
    main()
