"""Small uploads must not fill the disk (issue 53): 300 uploads of 8 bytes took 2.4 MB of disk in
1.1 s, the janitor counted 2.4 KB and deleted nothing, and left every upload's folder behind. Now the
janitor counts what the disk counts and removes emptied folders, and the app refuses an empty file,
a request of many files and an address's files past its bound, each in one line."""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from pathlib import Path

import httpx
import pytest

from specviz.serving.janitor import BLOCK_BYTES, EMPTY_FOLDER_AGE_S, bound_folder
from specviz.serving.limits import AppLimits


def du_bytes(folder: Path) -> int:
    """What the entries under `folder` take on disk (as `du` counts: blocks)."""
    return sum(p.lstat().st_blocks * 512 for p in folder.rglob("*"))


def test_the_janitor_counts_blocks_and_removes_the_folders_it_empties(tmp_path):
    """Gradio's layout: each upload in a folder named by its content's hash."""
    now = time.time()
    for i in range(300):  # 300 uploads of 8 bytes, the oldest first
        folder = tmp_path / f"{i:040x}"
        folder.mkdir()
        (folder / "x.json").write_bytes(b"8 bytes!")
        os.utime(folder / "x.json", (now - 1000 + i, now - 1000 + i))
        os.utime(folder, (now - 1000 + i, now - 1000 + i))
    (tmp_path / "left-empty").mkdir()  # a folder a past deletion left behind
    os.utime(tmp_path / "left-empty", (now - EMPTY_FOLDER_AGE_S - 1,) * 2)
    (tmp_path / "just-made").mkdir()  # gradio made it a moment ago and is about to fill it
    sizes = sum(p.stat().st_size for p in tmp_path.rglob("*") if p.is_file())
    assert sizes == 2400 and du_bytes(tmp_path) >= 300 * BLOCK_BYTES  # 2.4 KB of bytes, >= 1.2 MB of disk

    deleted = bound_folder(tmp_path, most_mb=1.0, now=now)

    folders = sorted(p.name for p in tmp_path.iterdir())
    assert 0 < deleted < 300
    assert du_bytes(tmp_path) <= 2**20  # as the disk counts it, under the bound
    kept = [int(name, 16) for name in folders if name != "just-made"]
    assert kept == list(range(300 - len(kept), 300)) and len(kept) == 300 - deleted  # the oldest went, folders too
    assert "left-empty" not in folders and "just-made" in folders


def test_the_janitor_leaves_a_folder_under_its_bound_alone(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "race.json").write_bytes(b"{}")
    (tmp_path / "b").mkdir()
    assert bound_folder(tmp_path, most_mb=1.0) == 0
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a", "b", "race.json"]
    assert bound_folder(tmp_path / "not-made-yet", most_mb=1.0) == 0  # gradio makes its cache at the first upload


@pytest.fixture
def app(tmp_path, monkeypatch):
    """The app on the tiny pair with gradio's cache in `tmp_path / 'cache'`, at most 4 uploads an
    address in 10 minutes: (upload URL, cache folder)."""
    from specviz.ui import build_app, launch

    monkeypatch.delenv("SPECVIZ_TRUSTED_PROXIES", raising=False)
    monkeypatch.delenv("SPACE_ID", raising=False)
    cache = tmp_path / "cache"
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(cache))
    demo = build_app(pair="tiny-random", limits=AppLimits(upload_files=1, uploads_per_address=4, upload_window_s=600))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    launch(demo, server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    yield f"http://127.0.0.1:{port}/gradio_api/upload", cache
    demo.close()


def stored(cache: Path, name: str) -> list[Path]:
    return [p for p in cache.rglob(name) if p.is_file()] if cache.exists() else []


def one_line_refusals(caplog, capfd) -> list[str]:
    """The app's log lines of the test, each an INFO line without a traceback; nothing else logged a
    warning (gradio, python-multipart), nor a traceback on the server's stderr (uvicorn's own log)."""
    assert "Traceback" not in capfd.readouterr().err
    lines = [r for r in caplog.records if r.name.startswith("specviz")]
    assert all(r.levelno == logging.INFO and r.exc_info is None for r in lines), [r.getMessage() for r in lines]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    return [r.getMessage() for r in lines]


def test_an_empty_file_is_refused_in_one_line(app, caplog, capfd):
    url, cache = app
    caplog.set_level(logging.INFO)
    name = f"{uuid.uuid4().hex}.json"
    answer = httpx.post(url, files={"files": (name, b"")}, timeout=60)
    assert (
        answer.status_code == 400 and answer.text == f"the file {name!r} is empty (0 bytes): there is nothing to upload"
    )
    assert not stored(cache, name)
    assert one_line_refusals(caplog, capfd) == [f"refused: {answer.text}"]


def test_a_request_of_many_files_is_refused_and_nothing_of_it_kept(app, caplog, capfd):
    url, cache = app
    caplog.set_level(logging.INFO)
    names = [f"{uuid.uuid4().hex}.json" for _ in range(1000)]
    first = (names[0], b" " * 300_000)  # read in many chunks: gradio stores it before the second begins
    answer = httpx.post(url, files=[("files", first)] + [("files", (n, b"8 bytes!")) for n in names[1:]], timeout=120)
    assert answer.status_code == 413 and "at most 1 file(s) here (SPECVIZ_LIMIT_UPLOAD_FILES)" in answer.text
    assert not any(stored(cache, name) for name in names[:2])  # the first was stored, then deleted
    assert not [p for p in cache.rglob("*") if p.is_file()]  # nor anything else of the request
    assert one_line_refusals(caplog, capfd) == [f"refused: {answer.text}"]
    ok = httpx.post(url, files={"files": (names[0], b"8 bytes!")}, timeout=60)  # the refused files counted nothing
    assert ok.status_code == 200 and stored(cache, names[0])


def test_an_address_past_its_uploads_is_refused_whatever_it_claims(app, caplog, capfd):
    url, cache = app
    caplog.set_level(logging.INFO)
    for i in range(4):
        answer = httpx.post(url, files={"files": (f"{i}.json", f"upload {i}".encode())}, timeout=60)
        assert answer.status_code == 200
    # a fifth from the same address, posing as another behind no trusted proxy: refused before it is read
    answer = httpx.post(url, files={"files": ("5.json", b"upload 5")}, headers={"X-Forwarded-For": "10.0.0.5"})
    assert answer.status_code == 429 and int(answer.headers["retry-after"]) > 0
    assert answer.text.startswith("4 files came from your network address in the last 600 s, the most one address")
    assert not stored(cache, "5.json") and len(list(cache.rglob("*.json"))) == 4
    assert one_line_refusals(caplog, capfd) == [f"refused: {answer.text}"]


def test_a_screen_recording_is_refused_and_leaves_nothing_in_the_temp_folder(app, caplog, capfd):
    """/gradio_api/process_recording kept every upload in the system's temp folder, where no janitor looks."""
    import tempfile

    url, _ = app
    caplog.set_level(logging.INFO)
    marker = uuid.uuid4().hex.encode()
    before = set(Path(tempfile.gettempdir()).glob("tmp*"))
    recording = url.replace("/upload", "/process_recording")
    answer = httpx.post(recording, files={"video": ("v.mp4", marker * 1000)}, timeout=60)
    assert answer.status_code == 404 and answer.text == "this app takes files at /gradio_api/upload only"
    new = [p for p in set(Path(tempfile.gettempdir()).glob("tmp*")) - before if p.is_file()]
    assert not [p for p in new if marker in p.read_bytes()[:100]]
    assert one_line_refusals(caplog, capfd) == [f"refused: {answer.text}"]
