"""Where specviz finds its shipped assets and keeps its cache."""

from __future__ import annotations

import os
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent
# An installed wheel carries the assets inside the package (see setup.py); a checkout or an
# editable install reads the repository's assets/ folder.
ASSETS = _PACKAGE / "assets" if (_PACKAGE / "assets").is_dir() else _PACKAGE.parent / "assets"


def cache_dir() -> Path:
    """$SPECVIZ_CACHE, else ~/.cache/specviz (created on first use)."""
    path = Path(os.environ.get("SPECVIZ_CACHE") or Path.home() / ".cache" / "specviz")
    path.mkdir(parents=True, exist_ok=True)
    return path
