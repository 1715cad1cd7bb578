"""``tally sim``: the vLLM simulator: serve it, print its config, write demo prompt families."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ledger.errors import FormatError

from .common import OutDir, command, print_json

if TYPE_CHECKING:
    from runner.sim.config import SimConfig


def read_sim_config(path: Path) -> SimConfig:
    """A simulator config file (TOML, or JSON for ``.json``) read as hostile input, then validated.

    Bounded in size and nesting (``ledger.stricttoml``, ``ledger.strictjson``):
    every bad file is one ``FormatError`` line, never a traceback.
    """
    from runner.sim.config import load_config

    return load_config(path)


def sim_serve(
    host: Annotated[str, typer.Option(help="Address to listen on (loopback by default).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port (0 picks a free one; the URL is printed).")] = 0,
    config: Annotated[Path | None, typer.Option(help="Simulator config (TOML or JSON); defaults otherwise.")] = None,
    seed: Annotated[int | None, typer.Option(help="Seed (overrides the config's).")] = None,
    time_scale: Annotated[float | None, typer.Option(help="Multiply model times by this (0.01: 100x faster).")] = None,
) -> None:
    """Serve a simulated vLLM host in the foreground until SIGINT/SIGTERM.

    Prints `tally sim: serving URL (...)`; the OpenAI API is at URL/v1, metrics at
    URL/metrics, the host control API at URL/_sim (see docs/sim.md).
    """
    from ledger.errors import ExternalError
    from runner.sim.process import serve

    loaded = read_sim_config(config) if config is not None else None
    try:
        serve(loaded, host=host, port=port, seed=seed, time_scale=time_scale)
    except OSError as exc:
        raise ExternalError(f"cannot serve on {host}:{port}: {exc.strerror}") from None


def sim_config() -> None:
    """Print the default simulator config (TOML, every field with its default)."""
    from importlib.resources import files

    sys.stdout.write(files("runner.sim").joinpath("default.toml").read_text(encoding="utf-8"))


def sim_families(
    out: Annotated[Path, typer.Argument(help="Directory to write opinions.jsonl and filings.jsonl into.")],
    seed: Annotated[int, typer.Option(help="Generator seed (same seed, same files, same sha256).")] = 0,
    short: Annotated[int, typer.Option(help="Short prompts per family.")] = 4,
    long: Annotated[int, typer.Option(help="Long prompts per family.")] = 2,
    long_words: Annotated[int, typer.Option(help="Upper bound of words in a long prompt.")] = 2500,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Write the deterministic synthetic prompt families (demo/test data) and their sha256."""
    from runner.measure import FAMILIES, synthetic_family
    from runner.measure.family import family_bytes

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
    if as_json:
        print_json({"families": written})
        return
    for item in written:
        print(f"{item['sha256']}  {item['path']}  ({item['prompts']} prompts)")


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    sim = typer.Typer(help="The vLLM simulator: serve it, print its config, write demo prompt families.",
                      no_args_is_help=True)
    command(sim, "serve")(sim_serve)
    command(sim, "config")(sim_config)
    command(sim, "families")(sim_families)
    app.add_typer(sim, name="sim")
