"""Where specviz finds its shipped assets and keeps its cache."""

from __future__ import annotations

import os
from pathlib import Path

ASSETS = Path(__file__).resolve().parent.parent / "assets"


def cache_dir() -> Path:
    """$SPECVIZ_CACHE, else ~/.cache/specviz (created on first use)."""
    path = Path(os.environ.get("SPECVIZ_CACHE") or Path.home() / ".cache" / "specviz")
    path.mkdir(parents=True, exist_ok=True)
    return path
