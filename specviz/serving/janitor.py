"""What gradio keeps for each visitor, kept bounded.

Gradio holds one SessionState per visitor (a copy of every component's config, ~1-2 MB here, plus
the visitor's gr.State values) and drops it only when `state_session_capacity` more recent visitors
have come; a visitor's State values expire after their time-to-live, the rest of the session does
not. Each session also holds a serialised copy of every component's config with the visitor's
latest values (`config_values`, ~0.4 MB when the page opens here, more once a race's plots are in
it), kept only for gradio's deep links, which this app does not offer. Worse, every
`gr.update(...)` a handler returns builds a new copy of the component for that
visitor, and when the component next takes a plain value (or is an input), gradio 6 files the copy
under the copy's own id, next to the original, and never drops it: a race adds ~28 such copies
(~2 MB with their configs) that nothing reads again. Measured by `python -m specviz.bench load`:
~2 MB more server memory per race, linear, before this module.

A janitor thread (started by `specviz.ui.blocks.launch`) does every few seconds what gradio does
not: it drops those orphaned copies (a block id this app never built; the app uses no gr.render,
so every such id is a copy), the deep-link configs, and whole sessions that no event has touched
for the time-to-live, then hands the freed memory back to the operating system. It also keeps
gradio's file cache (uploads and the files handed to visitors) under `CACHE_MOST_MB`, the oldest
files going first, counted as the disk counts them (blocks, a folder per upload too), and removes
the folders left empty: gradio bounds each upload's size (the app sets it to a saved race's bound),
not their number (the app's bounds on that: `specviz.serving.uploads`), and keeps them for the
time-to-live.

glibc gives each new thread that allocates while other threads are alive a heap ("arena") of its
own, up to eight per core, and keeps every arena for the life of the process; a server's threads
are many (gradio's workers, the models' thread and PEARL's, online learners). `limit_malloc_arenas`,
called at launch, makes them share `MALLOC_ARENAS` (PEARL runs its draft and its target in two
threads at once; with one arena it was ~15 % slower). Measured with `python -m specviz.bench load`
(8 visitors x 25 races, tiny pair): +40 MB of RSS from the first race to the last with glibc's
default, +26 MB with two arenas.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import datetime
import logging
import os
import threading
import time
from collections import Counter
from functools import cache
from pathlib import Path
from stat import S_ISDIR
from typing import Any

log = logging.getLogger(__name__)
JANITOR_EVERY_S = 10.0
DROPPED_LOG = "dropped %d idle visitor session(s)"  # the janitor's log line (the load tool counts them)
MALLOC_ARENAS = 2  # heaps all threads share: PEARL's two model threads each have one
M_ARENA_MAX = -8  # glibc's mallopt parameter (malloc.h)
# gradio's file cache kept under this: four adapted default-pair drafts (~96 MB each) and the visitors'
# race downloads (a saved race is at most 16 MB) fit; a stream of uploads does not fill the disk
CACHE_MOST_MB = 1024
CACHE_LOG = "gradio's file cache was over %d MB: deleted %d file(s), oldest first"
BLOCK_BYTES = 4096  # the least an entry is counted to take on disk (ext4's and tmpfs's block)
# an empty folder in the cache is removed this long after its last change: gradio makes a folder per
# upload (named by its content's hash), then moves the file into it
EMPTY_FOLDER_AGE_S = 60.0


def drop_update_copies(demo: Any) -> int:
    """Drop, from every visitor's session, the components gradio built for past updates; returns how many."""
    built = demo.blocks  # the app's own components (the default config)
    dropped = 0
    for session in list(demo.state_holder.session_data.values()):
        for key in list(session.blocks_config.blocks):  # list(): a snapshot; handlers may add copies meanwhile
            if key not in built:
                session.blocks_config.blocks.pop(key, None)
                session.config_values.pop(key, None)
                dropped += 1
    return dropped


class NoDeepLinkConfig(dict):
    """A session's deep-link configs once dropped: gradio's writes to it are ignored and a read
    finds an empty config, so a handler updating a component at the moment it is swapped in
    still works (gradio writes a key, then reads it back)."""

    def __setitem__(self, key: Any, value: Any) -> None:
        pass

    def __missing__(self, key: Any) -> dict:
        return {}


def drop_deep_link_configs(demo: Any) -> int:
    """Swap every visitor's deep-link configs (gradio's `config_values`, read only by its deep-link
    route; this app has no DeepLinkButton) for a `NoDeepLinkConfig`; returns how many were dropped."""
    dropped = 0
    for session in list(demo.state_holder.session_data.values()):
        if not isinstance(session.config_values, NoDeepLinkConfig):
            session.config_values = NoDeepLinkConfig()
            dropped += 1
    return dropped


def drop_idle_sessions(demo: Any, idle_s: float, now: datetime.datetime | None = None) -> int:
    """Drop the sessions of visitors with no event for `idle_s` seconds (their State values first,
    through gradio's delete callbacks); returns how many."""
    holder = demo.state_holder
    now = now or datetime.datetime.now()
    idle = [sid for sid, last in list(holder.time_last_used.items()) if (now - last).total_seconds() > idle_s]
    for sid in idle:
        holder.delete_state(sid)
        with holder.lock:
            holder.session_data.pop(sid, None)
            holder.time_last_used.pop(sid, None)
    return len(idle)


def give_back_freed_memory() -> None:
    """Return the heap pages freed since the last call to the OS (glibc's malloc_trim; elsewhere
    nothing). Without it a dropped session or an online learner that gave its weights back
    leaves the server's RSS as high as before (most of a freed default-pair learner stayed resident
    without a trim: measured in benchmarks/reliability/README.md)."""
    if libc := _glibc():
        libc.malloc_trim(0)


def limit_malloc_arenas(arenas: int = MALLOC_ARENAS) -> bool:
    """Let all threads started from now on share at most `arenas` malloc heaps (glibc; elsewhere,
    or when the operator set MALLOC_ARENA_MAX, nothing). Returns whether the limit was set."""
    if os.environ.get("MALLOC_ARENA_MAX") or not (libc := _glibc()):
        return False
    return bool(libc.mallopt(M_ARENA_MAX, arenas))


@cache
def _glibc() -> Any:
    """The C library, if it is glibc (found once: find_library may run ldconfig)."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return libc if libc is not None and hasattr(libc, "malloc_trim") else None


def bound_folder(folder: Path, most_mb: float, now: float | None = None) -> int:
    """Delete the oldest files under `folder` (by modification time) until the rest take at most
    `most_mb` MB of disk, with the folders that leaves empty, and any other folder empty for
    `EMPTY_FOLDER_AGE_S` (gradio makes one, then fills it); returns how many files went. A file or
    folder costs its blocks, at least one (`on_disk`): 300 uploads of 8 bytes took 2.4 MB of disk,
    counted by their sizes 2.4 KB, and none went (issue 53)."""
    now = time.time() if now is None else now
    try:
        itself = folder.lstat()
    except OSError:  # not made yet (gradio makes it at the first upload), or gone
        return 0
    files, folders = [], {}
    for path in folder.rglob("*"):
        try:
            stat = path.lstat()
        except OSError:  # gone meanwhile (gradio's own cleanup, a download's rewrite)
            continue
        if S_ISDIR(stat.st_mode):
            folders[path] = stat
        else:
            files.append((stat.st_mtime, on_disk(stat), path))
    # the folder itself too: a folder that once held many entries keeps their blocks (ext4 never shrinks one)
    total = on_disk(itself) + sum(cost for _, cost, _ in files) + sum(map(on_disk, folders.values()))
    left_in = Counter(path.parent for _, _, path in files)  # folder -> its files not deleted
    deleted = 0
    for _, cost, path in sorted(files):
        if total <= most_mb * 2**20:
            break
        path.unlink(missing_ok=True)
        total, deleted = total - cost, deleted + 1
        left_in[path.parent] -= 1
        if not left_in[path.parent] and path.parent in folders and _removed(path.parent):
            total -= on_disk(folders.pop(path.parent))
    for path in sorted(folders, key=lambda p: len(p.parts), reverse=True):  # the deepest first
        if now - folders[path].st_mtime >= EMPTY_FOLDER_AGE_S:
            _removed(path)
    return deleted


def _removed(folder: Path) -> bool:
    """Remove `folder` if it is empty; whether it went."""
    try:
        folder.rmdir()
    except OSError:  # not empty (or gone)
        return False
    return True


def on_disk(stat: os.stat_result) -> int:
    """Bytes an entry takes on disk as the file system counts them (`du`), at least a block: an empty
    file or a tmpfs folder is an inode and a directory entry, and says 0."""
    return max(stat.st_blocks * 512, BLOCK_BYTES)


def gradio_cache() -> Path:
    """Where gradio keeps uploads and the files it hands out (GRADIO_TEMP_DIR, else the temp folder's 'gradio')."""
    from gradio.utils import get_upload_folder

    return Path(get_upload_folder())


def tidy(demo: Any, idle_s: float) -> tuple[int, int]:
    """One round of the janitor: (update copies dropped, idle sessions dropped)."""
    if getattr(demo, "state_holder", None) is None:  # not serving yet
        return 0, 0
    drop_deep_link_configs(demo)
    return drop_update_copies(demo), drop_idle_sessions(demo, idle_s)


def start_janitor(demo: Any, idle_s: float, every_s: float = JANITOR_EVERY_S) -> threading.Event:
    """Run `tidy` every `every_s` seconds in a daemon thread; set the returned event to end it."""
    done = threading.Event()

    def loop() -> None:
        while not done.wait(every_s):
            try:
                copies, sessions = tidy(demo, idle_s)
                give_back_freed_memory()
                files = bound_folder(gradio_cache(), CACHE_MOST_MB)
            except Exception:  # a janitor round must never take the server down; the next round retries
                log.exception("tidying the visitors' sessions failed")
                continue
            if sessions:
                log.info(DROPPED_LOG, sessions)
            if files:
                log.info(CACHE_LOG, CACHE_MOST_MB, files)
            log.debug("dropped %d component copies", copies)

    threading.Thread(target=loop, name="specviz-sessions", daemon=True).start()
    return done
