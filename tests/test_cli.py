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
    for target in scripts.values():
        module, func = target.split(":")
        with pytest.raises(SystemExit) as exit_:
            getattr(importlib.import_module(module), func)(["--help"])
        assert exit_.value.code == 0
        assert "--pair" in capsys.readouterr().out


def test_the_space_declares_the_python_its_pins_need():
    front = (ROOT / "README.md").read_text().split("---")[1]
    assert 'python_version: "3.11"' in front
    assert 'requires-python = ">=3.11"' in (ROOT / "pyproject.toml").read_text()


def test_the_requirements_resolve_for_the_python_the_space_declares(tmp_path):
    """What a Space installs: requirements.txt, for the README's python_version, wheels only."""
    import re
    import subprocess
    import sys

    front = (ROOT / "README.md").read_text().split("---")[1]
    version = re.search(r'python_version: "([0-9.]+)"', front).group(1)
    report = tmp_path / "report.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--quiet",
            "--report",
            str(report),
            "--python-version",
            version,
            "--only-binary=:all:",
            "--target",
            str(tmp_path / "t"),
            "-r",
            str(ROOT / "requirements.txt"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    import json

    names = {i["metadata"]["name"] for i in json.loads(report.read_text())["install"]}
    assert {"torch", "transformers", "gradio", "numpy", "pandas"} <= names


def test_the_space_folder_holds_what_the_space_runs(tmp_path):
    from specviz import space

    out = tmp_path / "space"
    assert space.main([str(out)]) == 0
    assert (
        (out / "app.py").is_file() and (out / "specviz" / "cli.py").is_file() and (out / "assets" / "prompts").is_dir()
    )
    assert not list(out.rglob("__pycache__"))
    large = [p for p in out.rglob("*") if p.is_file() and p.stat().st_size > space.LFS_BYTES]
    rules = (out / ".gitattributes").read_text() if large else ""
    assert all(f"{p.relative_to(out)} filter=lfs" in rules for p in large)
    assert space.main([str(out)]) == 2  # not empty: refused, nothing overwritten


def test_a_built_wheel_carries_the_assets_and_runs_outside_the_checkout(tmp_path):
    """`pip install .` builds a wheel; installed elsewhere, specviz finds its prompts and its draft."""
    import os
    import shutil
    import subprocess
    import sys

    src = tmp_path / "src"  # build from a copy: the checkout gets no build/ folder
    src.mkdir()
    for part in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(ROOT / part, src / part)
    for part in ("specviz", "assets"):
        shutil.copytree(ROOT / part, src / part, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    run: dict = {"capture_output": True, "text": True, "timeout": 600}
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--quiet",
            "-w",
            str(tmp_path / "dist"),
            str(src),
        ],
        check=False,
        **run,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = (tmp_path / "dist").glob("specviz-*.whl")
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--quiet", "--target", str(site), str(wheel)],
        check=False,
        **run,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    probe = (
        "import torch; from specviz.paths import ASSETS; from specviz.prompts import take;"
        "from specviz.models.default import draft_dir, load_draft;"
        "draft = load_draft(draft_dir(), torch.device('cpu'), torch.float32);"
        "print(ASSETS); print(len(take('humaneval', 3))); print(sum(p.numel() for p in draft.parameters()))"
    )
    away = tmp_path / "elsewhere"
    away.mkdir()
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=away, env={**os.environ, "PYTHONPATH": str(site)}, check=False, **run
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assets, prompts, params = out.stdout.split()
    assert Path(assets) == site / "specviz" / "assets"
    assert prompts == "3" and int(params) > 1_000_000


def test_a_bad_device_or_dtype_is_one_line_before_the_app_starts(capsys):
    from specviz.cli import main

    for argv, words in (
        (["--dtype", "float8"], "unknown dtype 'float8'"),
        (["--device", "tpu"], "unknown device 'tpu'"),
    ):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and words in err and err.count("\n") == 1


@pytest.mark.parametrize(
    "argv, env, words",
    [
        (["--port", "70000"], {}, "--port (or GRADIO_SERVER_PORT) must be from 1 to 65535, got 70000"),
        (["--port", "-1"], {}, "--port (or GRADIO_SERVER_PORT) must be from 1 to 65535, got -1"),
        ([], {"GRADIO_SERVER_PORT": "http"}, "--port (or GRADIO_SERVER_PORT) must be a whole number, got 'http'"),
    ],
)
def test_a_bad_port_is_one_line_before_the_app_is_built(argv, env, words, monkeypatch, capsys):
    from specviz import cli

    def no_app(**kwargs):
        raise AssertionError("the app was built before the port was checked")

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(cli, "build_app", no_app)
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.startswith("error: ") and words in err and err.count("\n") == 1, err
