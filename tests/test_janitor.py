"""What gradio keeps per visitor stays bounded: the copies every gr.update leaves in a session are
dropped, and so are sessions no event has touched for the time-to-live."""

from __future__ import annotations

import datetime
import os
import subprocess
import sys

import gradio as gr
import pytest

from specviz.serving.janitor import drop_deep_link_configs, drop_idle_sessions, drop_update_copies, tidy
from specviz.tools.load import free_port


@pytest.fixture(scope="module")
def served():
    def show(n):  # streams as the race does: an update (it shows the box), then plain values
        yield gr.update(value="…", visible=True), None
        yield f"<b>{n}</b>", n

    with gr.Blocks() as demo:
        box = gr.HTML(visible=False)
        kept = gr.State(None, time_to_live=3600)
        gr.Button("show").click(show, gr.Number(1), [box, kept], api_name="show")
    port = free_port()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True, ssr_mode=False)
    yield demo, f"http://127.0.0.1:{port}/"
    demo.close()


def _session(demo, client):
    return demo.state_holder.session_data[client.session_hash]


def test_every_update_leaves_a_copy_and_the_janitor_drops_them(served):
    from gradio_client import Client

    demo, url = served
    client = Client(url, verbose=False)
    for n in range(5):
        client.predict(n, api_name="/show")
    session = _session(demo, client)
    copies = [k for k in session.blocks_config.blocks if k not in demo.blocks]
    assert len(copies) >= 5  # gradio's behaviour that makes this module necessary
    assert drop_update_copies(demo) >= len(copies)
    assert set(session.blocks_config.blocks) <= set(demo.blocks) and set(session.config_values) <= set(demo.blocks)
    assert client.predict(7, api_name="/show") is not None  # the visitor's session still works
    assert session.state_data  # and keeps its State


def test_deep_link_configs_are_dropped_and_stay_dropped(served):
    from gradio_client import Client

    demo, url = served
    client = Client(url, verbose=False)
    client.predict(1, api_name="/show")
    session = _session(demo, client)
    assert session.config_values  # gradio's copy of every component's config, for deep links
    assert drop_deep_link_configs(demo) >= 1 and not session.config_values
    assert drop_deep_link_configs(demo) == 0  # already dropped
    assert client.predict(3, api_name="/show") == "<b>3</b>"  # updates and plain values still go through
    assert not session.config_values  # and leave nothing behind
    assert session.state_data


def test_idle_sessions_are_dropped_and_recent_ones_kept(served):
    from gradio_client import Client

    demo, url = served
    client = Client(url, verbose=False)
    client.predict(1, api_name="/show")
    holder = demo.state_holder
    assert drop_idle_sessions(demo, idle_s=3600) == 0 and client.session_hash in holder.session_data
    later = datetime.datetime.now() + datetime.timedelta(seconds=3601)
    assert drop_idle_sessions(demo, idle_s=3600, now=later) >= 1
    assert client.session_hash not in holder.session_data and client.session_hash not in holder.time_last_used
    client.predict(2, api_name="/show")  # a returning visitor starts a fresh session
    assert client.session_hash in holder.session_data


def test_tidy_before_serving_does_nothing():
    with gr.Blocks() as demo:
        gr.HTML()
    assert tidy(demo, 60) == (0, 0)


TRIM = """
import os
from specviz.tools.load import rss_mb
from specviz.serving.janitor import give_back_freed_memory
blocks = [bytes(100_000) for _ in range(3000)]  # ~300 MB in pieces below glibc's mmap threshold: on the heap
keep = blocks[::50]; del blocks  # survivors pin the heap's top, so free() alone leaves the rest resident
before = rss_mb(os.getpid()); give_back_freed_memory(); print(before - rss_mb(os.getpid()))
"""


def test_freed_memory_goes_back_to_the_system():
    """What a dropped session or a released learner freed leaves the RSS only after a trim (the janitor's).
    Linux with glibc, like every machine the tests run on (`make test` installs Debian's Chromium)."""
    out = subprocess.run([sys.executable, "-c", TRIM], capture_output=True, text=True, check=True)
    assert float(out.stdout) > 100, f"only {out.stdout.strip()} MB given back"


ARENAS = """
import sys, threading
from specviz.serving.janitor import _glibc, limit_malloc_arenas
if sys.argv[1] == "limit":
    assert limit_malloc_arenas(2)
ready, go = threading.Barrier(9), threading.Event()
def allocate():
    ready.wait()  # all eight threads alive at once, as a server's are
    keep = [bytearray(1000) for _ in range(100)]  # above pymalloc's 512 bytes: glibc's malloc
    go.wait()
threads = [threading.Thread(target=allocate) for _ in range(8)]
[t.start() for t in threads]; ready.wait(); go.set(); [t.join() for t in threads]
_glibc().malloc_stats()  # one "Arena N:" block per heap, on stderr
"""


@pytest.mark.parametrize("mode, most", [("default", None), ("limit", 2)])
def test_threads_share_few_malloc_heaps_once_limited(mode, most):
    """glibc gives each of eight live threads a heap of its own unless the launch limits them."""
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    out = subprocess.run([sys.executable, "-c", ARENAS, mode], capture_output=True, text=True, check=True, env=env)
    arenas = out.stderr.count("Arena ")
    if most is None:
        assert arenas > 2, out.stderr  # the unlimited case, so the limit's test can tell
    else:
        assert 1 <= arenas <= most, out.stderr


def _files(folder, sizes_mb):
    """Files of the given sizes, oldest first (their modification times a second apart)."""
    paths = []
    for i, mb in enumerate(sizes_mb):
        path = folder / f"upload-{i}" / "x.json"
        path.parent.mkdir()
        path.write_bytes(b" " * int(mb * 2**20))
        os.utime(path, (1_000_000 + i, 1_000_000 + i))
        paths.append(path)
    return paths


def test_gradios_file_cache_is_kept_under_its_bound_oldest_first(tmp_path):
    """gradio bounds each upload's size, not their number: a stream of 15 MB uploads filled the disk."""
    from specviz.serving.janitor import bound_folder

    paths = _files(tmp_path, [3, 2, 2, 1])
    assert bound_folder(tmp_path, most_mb=4) == 2  # 8 MB: the two oldest go, 3 MB stay
    assert [p.exists() for p in paths] == [False, False, True, True]
    assert bound_folder(tmp_path, most_mb=4) == 0


def test_the_janitor_bounds_the_file_cache(tmp_path, monkeypatch):
    import time

    from specviz.serving import janitor

    monkeypatch.setattr(janitor, "CACHE_MOST_MB", 1)
    monkeypatch.setattr(janitor, "gradio_cache", lambda: tmp_path)
    paths = _files(tmp_path, [1, 1, 0.5])
    done = janitor.start_janitor(object(), idle_s=3600, every_s=0.05)
    try:
        deadline = time.monotonic() + 10
        while paths[1].exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        done.set()
    assert [p.exists() for p in paths] == [False, False, True]
