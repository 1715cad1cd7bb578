"""Run every benchmark: `python bench/run.py [--small]` (CI runs --small as a smoke)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ORDER = ["ledger", "tlog", "tiles", "trusted", "strict", "measure", "decide", "power", "fold", "plan", "runner"]


def main() -> None:
    args = sys.argv[1:]
    for name in ORDER:
        path = HERE / f"{name}.py"
        if not path.exists():
            continue
        spec = importlib.util.spec_from_file_location(f"bench_{name}", path)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        print(f"\n=== bench/{name}.py {' '.join(args)}", flush=True)
        module.main(args)


if __name__ == "__main__":
    main()
