"""The vLLM simulator as a command: serve it, its default config, the synthetic prompt families.

::

    from runner.app import write_families

    for family in write_families(Path("families"), seed=0, short=4, long=2, long_words=2500):
        family["path"], family["sha256"]
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ledger.errors import ExternalError, FormatError

from .outdir import OutDir

if TYPE_CHECKING:
    from ..sim import SimConfig

__all__ = ["calibrate_sim", "default_sim_config", "plan_sim_config", "read_sim_config", "serve_sim", "write_families"]


def read_sim_config(path: Path) -> SimConfig:
    """A simulator config file (TOML, or JSON for ``.json``) read as hostile input, then validated.

    Bounded in size and nesting (``ledger.stricttoml``, ``ledger.strictjson``):
    every bad file is one ``FormatError`` line, never a traceback.
    """
    from ..sim import load_config

    return load_config(path)


def serve_sim(config: Path | None, *, host: str, port: int, seed: int | None, time_scale: float | None) -> None:
    """Serve a simulated vLLM host in the foreground until SIGINT/SIGTERM (``runner.sim.serve``)."""
    from .. import sim

    loaded = read_sim_config(config) if config is not None else None
    try:
        sim.serve(loaded, host=host, port=port, seed=seed, time_scale=time_scale)
    except OSError as exc:
        raise ExternalError(f"cannot serve on {host}:{port}: {exc.strerror}") from None


def calibrate_sim(runs: list[str], out: Path, *, seed: int = 0) -> dict[str, Any]:
    """Fit the step model and acceptance from ``tally measure --out`` runs (``ARM=DIR`` each), write the twin's
    config to ``out`` (TOML) and return the fit and its residuals (``runner.sim.calibrate``).

    Too little data (a run with fewer than three successful requests, an arm measured at one concurrency
    level) or a malformed run is one ``FormatError`` line, and nothing is written."""
    from .. import sim
    from .outdir import write_out_file

    parsed = []
    for spec in runs:
        arm, sep, directory = spec.partition("=")
        if not sep or not arm or not directory:
            raise FormatError(f"--run {spec!r}: give ARM=DIR (a tally measure --out directory)")
        parsed.append(sim.read_run(arm, Path(directory)))
    fit = sim.calibrate(parsed, seed=seed)
    header = ["A twin calibrated by tally sim calibrate from:", *(f"  {r.arm} = {r.path} (concurrency "
                                                                    f"{r.concurrency}, family {r.family})"
                                                                    for r in parsed)]
    header.append("The first arm given is also the twin's production; other settings keep their defaults.")
    written = write_out_file(out, sim.config_toml(fit.table, header).encode("utf-8"))
    return {"config": str(written), **fit.to_json()}


def default_sim_config() -> str:
    """The default simulator config (TOML, every field with its default)."""
    from importlib.resources import files

    return files("runner.sim").joinpath("default.toml").read_text(encoding="utf-8")


def plan_sim_config(plan: Path, *, time_scale: float = 1.0, seed: int = 7) -> dict[str, Any]:
    """A simulator config serving exactly the arms of a plan file (named as the plan names them).

    What ``tally sim config --plan`` prints (JSON, which ``tally sim serve --config`` reads as it reads
    TOML): an arm's ``sim`` table where the plan gives one, otherwise an engine derived from what the
    arm declares, and a production arm; hosts are the simulator's own.
    """
    from ..demo import sim_config_for
    from ..plan import read_plan_file
    from ..sim import config_from_dict

    if not time_scale > 0:
        raise FormatError("--time-scale must be positive")
    derived: list[str] = []
    config = sim_config_for([read_plan_file(plan).plan], time_scale=time_scale, seed=seed, derived=derived)
    config_from_dict(config)   # the simulator accepts it (a FormatError otherwise: one line)
    return config


def write_families(out: Path, *, seed: int, short: int, long: int, long_words: int) -> list[dict[str, Any]]:
    """Write the deterministic synthetic prompt families (demo/test data) into ``out``; each file's path,
    prompt count and sha256."""
    from ..measure import FAMILIES, family_bytes, synthetic_family

    if short < 0 or long < 0 or short + long == 0:
        raise FormatError("--short and --long must be >= 0 and not both 0")
    if long_words < 2:
        raise FormatError("--long-words must be at least 2")
    written = []
    with OutDir.open(out, "DIR") as target:  # never through a symlink; each file whole
        for name in FAMILIES:
            prompts = synthetic_family(name, seed=seed, short=short, long=long,
                                       long_words=(max(1, long_words * 3 // 5), long_words))
            data = family_bytes(prompts)
            path = target.write(f"{name}.jsonl", data)
            written.append({"family": name, "path": str(path), "prompts": len(prompts),
                            "sha256": hashlib.sha256(data).hexdigest()})
    return written
