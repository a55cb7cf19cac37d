"""The console scripts the package declares point at working entry points."""

from __future__ import annotations

import importlib
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_console_scripts_resolve_and_answer_help(capsys):
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert set(scripts) == {"specviz", "specviz-bench"}
    for name, target in scripts.items():
        module, func = target.split(":")
        with pytest.raises(SystemExit) as exit_:
            getattr(importlib.import_module(module), func)(["--help"])
        assert exit_.value.code == 0
        assert "--pair" in capsys.readouterr().out


def test_the_space_declares_the_python_its_pins_need():
    front = (ROOT / "README.md").read_text().split("---")[1]
    assert 'python_version: "3.11"' in front
    assert 'requires-python = ">=3.11"' in (ROOT / "pyproject.toml").read_text()
