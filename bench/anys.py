"""How much of tally is typed ``Any``: uses of the name ``Any`` per thousand lines of code.

    python bench/anys.py                 # the packages (ledger, runner, cli), each and in all
    python bench/anys.py --max 10        # exit 1 when the packages' figure is 10 or more
    python bench/anys.py runner/state    # any directories or files

A use is a ``NAME`` token ``Any`` (``typing.Any`` in an annotation, a cast, an alias;
the import line counts too, once per module); a line of code is a line with a token
other than a comment, a newline or indentation (docstrings count: they are code the
reader reads). Tokens, not text: ``Any`` inside a string or a comment is not counted.
"""

from __future__ import annotations

import argparse
import io
import sys
import tokenize
from collections.abc import Iterable, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("ledger", "runner", "cli")
_LAYOUT = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
           tokenize.ENDMARKER, tokenize.ENCODING}


def count(text: str) -> tuple[int, int]:
    """(uses of ``Any``, lines of code) of one module's source."""
    anys = 0
    lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type in _LAYOUT:
            continue
        lines.update(range(token.start[0], token.end[0] + 1))
        if token.type == tokenize.NAME and token.string == "Any":
            anys += 1
    return anys, len(lines)


def modules(paths: Iterable[Path]) -> Iterable[Path]:
    for path in paths:
        if path.is_file():
            yield path
        else:
            yield from sorted(p for p in path.rglob("*.py") if p.is_file() and not p.is_symlink())


def figure(paths: Sequence[Path]) -> tuple[int, int, float]:
    """(uses, lines of code, uses per thousand lines) over every module under ``paths``."""
    anys = lines = 0
    for module in modules(paths):
        a, n = count(module.read_text(encoding="utf-8"))
        anys, lines = anys + a, lines + n
    return anys, lines, (1000.0 * anys / lines if lines else 0.0)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", help="directories or files (default: the packages)")
    parser.add_argument("--max", type=float, default=None, help="fail (exit 1) at or above this figure")
    args = parser.parse_args(argv)
    paths = [Path(p) for p in args.paths] or [REPO / name for name in PACKAGES]
    for path in paths:
        anys, lines, per_kloc = figure([path])
        print(f"{path.relative_to(REPO) if path.is_relative_to(REPO) else path}: {anys} Any in {lines} lines "
              f"of code, {per_kloc:.1f} per kloc")
    anys, lines, per_kloc = figure(paths)
    print(f"all: {anys} Any in {lines} lines of code, {per_kloc:.1f} per kloc"
          + ("" if args.max is None else f" (target < {args.max:g})"))
    return 1 if args.max is not None and per_kloc >= args.max else 0


if __name__ == "__main__":
    sys.exit(main())
