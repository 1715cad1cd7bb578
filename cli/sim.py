"""``tally sim``: the vLLM simulator: serve it, print its config, write demo prompt families."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from runner.app import calibrate_sim, default_sim_config, plan_sim_config, serve_sim, write_families

from .common import command, print_json


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
    serve_sim(config, host=host, port=port, seed=seed, time_scale=time_scale)


def sim_config(
    plan: Annotated[Path | None, typer.Option(
        help="A plan file: print a config (JSON) serving exactly its arms, for `tally sim serve --config`.")] = None,
    time_scale: Annotated[float, typer.Option(help="With --plan: the config's time scale.")] = 1.0,
) -> None:
    """Print the default simulator config (TOML, every field with its default), or with --plan one whose
    arms are the plan's (JSON; `tally sim serve --config FILE` reads both)."""
    if plan is None:
        sys.stdout.write(default_sim_config())
        return
    print_json(plan_sim_config(plan, time_scale=time_scale))


def sim_families(
    out: Annotated[Path, typer.Argument(help="Directory to write opinions.jsonl and filings.jsonl into.")],
    seed: Annotated[int, typer.Option(help="Generator seed (same seed, same files, same sha256).")] = 0,
    short: Annotated[int, typer.Option(help="Short prompts per family.")] = 4,
    long: Annotated[int, typer.Option(help="Long prompts per family.")] = 2,
    long_words: Annotated[int, typer.Option(help="Upper bound of words in a long prompt.")] = 2500,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Write the deterministic synthetic prompt families (demo/test data) and their sha256."""
    written = write_families(out, seed=seed, short=short, long=long, long_words=long_words)
    if as_json:
        print_json({"families": written})
        return
    for item in written:
        print(f"{item['sha256']}  {item['path']}  ({item['prompts']} prompts)")


def sim_calibrate(
    run: Annotated[list[str], typer.Option("--run", help="ARM=DIR: a tally measure --out directory measured "
                                                         "on that arm (repeat: each arm, a few concurrency levels; the "
                                                         "first arm given is also the twin's production).")],
    out: Annotated[Path, typer.Option(help="Where to write the calibrated simulator config (TOML).")],
    seed: Annotated[int, typer.Option(help="Seed of the twin's predictions (the residuals).")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the fit and its residuals as JSON.")] = False,
) -> None:
    """Fit the simulator's step model and acceptance to measured runs; write the twin's config (docs/sim.md)."""
    report = calibrate_sim(run, out, seed=seed)
    if as_json:
        print_json(report)
        return
    print(f"tally sim: calibrated twin written to {report['config']}")
    for name, arm in report["arms"].items():
        print(f"arm {name}: k {arm['k']}, step {arm['fixed_ms']:.3f} ms + {arm['per_token_ms']:.4f} ms/token "
              f"+ {arm['per_kv_token_us']:.4f} us/KV token (residual {arm['step_residual']:.1%}), prefill "
              f"{arm['prefill_fixed_ms']:.3f} ms + {arm['per_prefill_token_ms']:.4f} ms/token "
              f"(residual {arm['ttft_residual']:.1%}), max_num_seqs {arm['max_num_seqs']}")
        for family, acc in arm["families"].items():
            print(f"  family {family}: acceptance rate {acc['rate']:.3f}, concentration {acc['concentration']:.1f}")
        for note in arm["notes"]:
            print(f"  note: {note}")
    for row in report["residuals"]:
        parts = [f"{name} {err['p50']:+.1%}/{err['p95']:+.1%}" for name, err in row["error"].items()
                 if err is not None and err["p50"] is not None and err["p95"] is not None]
        print(f"residual {row['arm']} c={row['concurrency']} {row['family']}: " + ", ".join(parts)
              + "  (p50/p95, twin vs measured)")


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    sim = typer.Typer(help="The vLLM simulator: serve it, print its config, write demo prompt families.",
                      no_args_is_help=True)
    command(sim, "serve")(sim_serve)
    command(sim, "config")(sim_config)
    command(sim, "families")(sim_families)
    command(sim, "calibrate")(sim_calibrate)
    app.add_typer(sim, name="sim")
