"""The package's front door: `specviz.__all__` names exactly the lazily loaded exports, each resolves,
and the package says it is typed (py.typed)."""

from __future__ import annotations

from pathlib import Path

import specviz


def test_all_lists_exactly_the_lazy_exports_and_each_resolves():
    assert specviz.__all__ == sorted(specviz._EXPORTS)
    for name in specviz.__all__:
        assert getattr(specviz, name).__name__ == name


def test_the_package_ships_its_types_marker():
    """PEP 561: py.typed tells a type checker that specviz's annotations are meant for its users
    (pyproject.toml's package-data lists it)."""
    assert (Path(specviz.__file__).parent / "py.typed").is_file()
    assert "py.typed" in (Path(specviz.__file__).parents[1] / "pyproject.toml").read_text()
