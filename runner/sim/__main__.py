"""``python -m runner.sim``: serve the simulator in the foreground."""

from __future__ import annotations

import sys

from .process import main

sys.exit(main())
