"""The app under load, on loopback: concurrent gradio_client sessions racing, the server's memory,
and how fast Stop stops.

    python -m specviz.bench load --pair tiny-random --sessions 8 --races 25 --out benchmarks/reliability/8x25
    python -m specviz.bench load --pair tiny-random --sessions 1 --races 200 --fresh --out benchmarks/reliability/200

The app runs in a child process (its memory is its own, read from /proc), with its log in the
output folder. After one untimed warm-up race (models load, caches fill), every session runs its
races one after another, the sessions at once, each a new gradio_client (--fresh: a new client,
so a new visitor, for every race). Then Stop: a long race is submitted, Stop is pressed once the
first method streams, and the time until the race's last update is measured; a new visitor's short
race is sent while a long race runs (it should go between the long race's methods, and its page
should show where it waits); and a visitor closes the page during a long race (the time until a
new visitor's short race is done says whether the abandoned race was stopped). Last, every visitor
has left: the app drops a session --session-ttl seconds after its last event (set for its child
process), so the tool waits that long and two rounds of the app's janitor, and reads the RSS again.
Reported: races done and failed, latency p50/p95 (queueing included), server RSS after the
warm-up, after the first race, at the end of the races and once the visitors have left, those
three timings, and the tracebacks in the server log (user errors must not leave any).
Each race's row (with the server's RSS when it ended) is written to races.jsonl as it finishes.

--hostile N: beside the honest sessions, one more client runs up to N rounds of what a careless or
hostile visitor tries (issue 41), while the honest sessions race: an upload past the size bound,
saved races nested 100k deep or holding a 5000-digit number, out-of-range and malformed inputs
(0 new tokens, seed "abc", a temperature of 1e-45, a learning rate of 1e308, a 1 MB prompt), six
races at once from one page, and an Online-tab stream whose draft is downloaded three times, analysed,
then served again and stopped, and once more cancelled by its client (a short race is timed
from the cancel). Each probe is one row of hostile.jsonl: what it expected (a one-line
refusal, or done), what came back, how long it took. The app's temporary folder (TMPDIR and
GRADIO_TEMP_DIR point into --out) is measured after the warm-up, at its largest (sampled each
second) and at the end: the disk a visitor can fill.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import re
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specviz.errors import SpecvizError
from specviz.methods import BASELINE, default_race
from specviz.serving.visitors import TRUSTED_PROXIES_ENV
from specviz.tools.clients import BUG, PROMPTS, address, client, probe, race_args

log = logging.getLogger(__name__)
SECOND_ROUND = 65  # the address block of issue 41's hostile client (issue 53's: specviz.tools.hostile)
PHASES = 54  # the address block of the Stop, fair-share, closed-page and warm-up visitors (`address`)


def rss_mb(pid: int) -> float:
    """Resident memory of a process, from /proc (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise SpecvizError(f"no VmRSS for process {pid}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def folder_mb(folder: Path) -> float:
    """MB that `folder` takes on disk, as the disk sees it: the blocks of its files and folders (a
    file of 8 bytes takes a block; files that vanish while counted are skipped)."""
    total = 0
    for top, folders, files in os.walk(folder):  # a folder removed while walked is skipped (rglob raised)
        for name in (*folders, *files):
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(top, name)).st_blocks * 512
    return total / 2**20


def start_app(pair: str, log: Path, env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    """The app (as app.py runs it) in a child process on a free loopback port; returns once it answers."""
    import urllib.request

    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "specviz.cli", "--pair", pair, "--host", "127.0.0.1", "--port", str(port)],
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        env={**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", **env},
    )
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SpecvizError(f"the app exited with status {proc.returncode}; its log: {log}")
        try:
            urllib.request.urlopen(url, timeout=2)
            return proc, url
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise SpecvizError(f"the app did not answer within 300 s; its log: {log}")


def one_race(client: Any, args: tuple) -> tuple[bool, float, str]:
    """(finished, seconds, problem) of one race through the API."""
    start = time.perf_counter()
    try:
        status = client.predict(*args, api_name="/race")[0]
    except Exception as e:  # a failed request is a figure here, not a crash
        log.debug("a race failed", exc_info=e)
        return False, time.perf_counter() - start, f"{type(e).__name__}: {e}"[:200]
    seconds = time.perf_counter() - start
    from specviz.ui.race import FAILED_NOTE

    ok = "Race finished" in status and FAILED_NOTE not in status  # a method's error fails the race too
    return ok, seconds, "" if ok else status[:200]


def hostile_files(folder: Path) -> dict[str, Path]:
    """The crafted uploads: a saved race nested 100k deep, one holding a 5000-digit number."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {"deep": folder / "deep.json", "digits": folder / "digits.json"}
    files["deep"].write_text("[" * 100_000 + "]" * 100_000)
    files["digits"].write_text('{"format": "specviz-race", "version": 1, "max_new_tokens": ' + "9" * 5000 + "}")
    return files


def upload(url: str, size: int, visitor: str) -> str:
    """POST `size` bytes to gradio's upload route from `visitor`'s address; a refusal raises with the
    server's one line."""
    import httpx

    answer = httpx.post(
        f"{url}gradio_api/upload",
        files={"files": ("x.json", b" " * size)},
        headers={"X-Forwarded-For": visitor},
        timeout=120,
    )
    if answer.status_code != 200:
        raise SpecvizError(f"HTTP {answer.status_code}: {answer.text[:200]}")
    return answer.text


def online_args(pair: str, requests: int, tokens: int, lr: float = 3e-5) -> tuple:
    """The /on_serve API's inputs: pair, suites, requests, shift, mixed, distinct, max new tokens, γ,
    update interval, learning rate, loss, background, window."""
    return pair, ["gsm8k"], requests, 0, False, 1, tokens, 4, 1, lr, "fkl", False, 5


def hostile_round(url: str, cfg: argparse.Namespace, files: dict[str, Path]) -> list[dict[str, Any]]:
    """One round of what issue 41's hostile visitor tried; one row per probe."""
    from gradio_client import handle_file

    from specviz.serving.saved import MAX_FILE_BYTES

    page = client(url, 0, SECOND_ROUND)
    pair, race = cfg.pair, lambda *args: page.predict(*args, api_name="/race")[0]
    rows = [
        probe("upload past the bound", "refused", lambda: upload(url, MAX_FILE_BYTES + 1, address(0, SECOND_ROUND))),
        probe(
            "saved race nested 100k deep",
            "refused",
            lambda: page.predict(handle_file(str(files["deep"])), api_name="/load_race"),
        ),
        probe(
            "saved race with a 5000-digit number",
            "refused",
            lambda: page.predict(handle_file(str(files["digits"])), api_name="/load_race"),
        ),
        probe("race of 0 new tokens", "refused", lambda: race(pair, "hi", [BASELINE], {}, 0, 0.0, 1.0, 0)),
        probe("race of -5 new tokens", "refused", lambda: race(pair, "hi", [BASELINE], {}, -5, 0.0, 1.0, 0)),
        probe('race with seed "abc"', "refused", lambda: race(pair, "hi", [BASELINE], {}, 8, 0.0, 1.0, "abc")),
        probe("race at temperature 1e-45", "refused", lambda: race(pair, "hi", [BASELINE], {}, 8, 1e-45, 1.0, 0)),
        probe(
            "1 MB prompt on the DISCO tab",
            "refused",
            lambda: page.predict(pair, "x " * 500_000, True, 0.5, 8, 8, 1, api_name="/disco"),
        ),
        probe(
            "learning rate 1e308",
            "refused",
            lambda: page.predict(*online_args(pair, 2, 8, 1e308), api_name="/on_serve"),
        ),
    ]
    jobs = [page.submit(pair, PROMPTS[0], [BASELINE], {}, 8, 0.0, 1.0, 0, api_name="/race") for _ in range(6)]
    outcomes = [probe("one of six races at once", "done", lambda job=job: job.result(timeout=600)[0]) for job in jobs]
    refused = [o for o in outcomes if o["outcome"] == "refused"]
    rows.append(
        {
            "probe": "six races at once from one page",
            "expected": "each served or refused in one line (a page holds at most 2 places in the line)",
            "outcome": f"{len(outcomes) - len(refused)} served, {len(refused)} refused",
            "ok": all(o["outcome"] == "done" or o["ok"] or "\n" not in o["message"] for o in outcomes)
            and all(not any(b in o["message"] for b in BUG) for o in outcomes),
            "seconds": max(o["seconds"] for o in outcomes),
            "message": refused[0]["message"] if refused else "",
        }
    )
    rows.append(
        probe(
            "online stream of 2 requests",
            "done",
            lambda: page.predict(*online_args(pair, 2, 8), api_name="/on_serve")[0],
        )
    )
    rows.extend(  # written once per draft version: three clicks, one file; the honest visitors' Online runs
        probe(  # share the pool of adapted drafts, and may take this learner's place between two clicks
            f"download the draft ({i + 1})",
            "done",
            lambda: page.predict(api_name="/save_draft"),
            fair="SPECVIZ_LIMIT_ADAPTED_DRAFTS",
        )
        for i in range(3)
    )
    rows.append(probe("which tokens did the draft learn", "done", lambda: page.predict(5, api_name="/on_analyse")[1]))
    job = page.submit(*online_args(pair, 40, 64), api_name="/on_serve")
    deadline = time.monotonic() + 300
    while not job.outputs() and not job.done() and time.monotonic() < deadline:
        time.sleep(0.05)
    pressed = time.perf_counter()
    page.predict(api_name="/stop_stream")
    stopped = probe("Stop on an online stream", "done", lambda: job.result(timeout=600)[0])
    stopped["seconds"] = round(time.perf_counter() - pressed, 2)
    stopped["ok"] = stopped["ok"] and "40 / 40" not in stopped["message"]
    rows.append(stopped)
    rows.append(cancelled_stream(page, pair))
    page.close()
    return rows


def cancelled_stream(client: Any, pair: str) -> dict[str, Any]:
    """A 40-request Online stream cancelled by its client once it streams (job.cancel, as a closed
    request does), then a one-method 8-token race: seconds from the cancel until that race is done
    (the models stayed busy 6-39 s after a cancel: issue 41)."""
    job = client.submit(*online_args(pair, 40, 64), api_name="/on_serve")
    deadline = time.monotonic() + 300
    while not job.outputs() and not job.done() and time.monotonic() < deadline:
        time.sleep(0.05)
    cancelled = time.perf_counter()
    job.cancel()
    row = probe(
        "a race right after a cancelled online stream",
        "done",
        lambda: client.predict(pair, PROMPTS[0], [BASELINE], {}, 8, 0.0, 1.0, 0, api_name="/race")[0],
    )
    row["seconds"] = round(time.perf_counter() - cancelled, 2)
    return row


def run_hostile(url: str, cfg: argparse.Namespace, honest_done: threading.Event) -> list[dict[str, Any]]:
    """Up to cfg.hostile rounds while the honest sessions race (none starts once they are done)."""
    from specviz.serving.limits import app_limits
    from specviz.tools.hostile import crafted_races, third_round

    files = hostile_files(cfg.out / "hostile")
    races = crafted_races(cfg.out / "hostile", app_limits())  # the child app reads the same environment
    rows: list[dict[str, Any]] = []
    with (cfg.out / "hostile.jsonl").open("w") as progress:
        for r in range(cfg.hostile):
            if r and honest_done.is_set():
                break
            for row in [*hostile_round(url, cfg, files), *third_round(url, cfg, races, r)]:
                rows.append({"round": r, **row})
                progress.write(json.dumps(rows[-1]) + "\n")
                progress.flush()
    return rows


def sample_folder(folder: Path, done: threading.Event, every_s: float = 1.0) -> dict[str, float]:
    """The largest size of `folder` seen until `done` (sampled every `every_s` seconds), in a thread;
    the returned dict fills in as it runs."""
    seen = {"largest_mb": folder_mb(folder)}

    def loop() -> None:
        while not done.wait(every_s):
            seen["largest_mb"] = max(seen["largest_mb"], folder_mb(folder))

    threading.Thread(target=loop, name="temp-folder", daemon=True).start()
    return seen


def run_sessions(url: str, cfg: argparse.Namespace, methods: list[str], pid: int) -> list[dict[str, Any]]:
    """cfg.sessions threads, each racing cfg.races times; one row per race, with the server's RSS
    when it ended. Each row is also appended to races.jsonl as it comes, so a run cut short still
    leaves its figures (and the RSS curve says whether memory grows with races or levels off)."""
    rows: list[dict[str, Any]] = []
    lock = threading.Lock()
    progress = (cfg.out / "races.jsonl").open("w")
    started = time.perf_counter()

    def session(s: int) -> None:
        session_client = None
        for r in range(cfg.races):
            if cfg.minutes and time.perf_counter() - started > 60 * cfg.minutes:
                return  # the time budget is spent: no new race (the report says how many ran)
            if session_client is None or cfg.fresh:
                session_client = client(url, s * cfg.races + r if cfg.fresh else s)
            ok, seconds, problem = one_race(session_client, race_args(cfg.pair, methods, cfg.max_new_tokens, s + r))
            with lock:
                row = {
                    "n": len(rows) + 1,
                    "session": s,
                    "race": r,
                    "ok": ok,
                    "seconds": round(seconds, 3),
                    "at_s": round(time.perf_counter() - started, 1),
                    "rss_mb": round(rss_mb(pid), 1),
                    "problem": problem,
                }
                rows.append(row)
                progress.write(json.dumps(row) + "\n")
                progress.flush()

    threads = [threading.Thread(target=session, args=(s,)) for s in range(cfg.sessions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    progress.close()
    return rows


def long_race(client: Any, cfg: argparse.Namespace, methods: list[str]) -> Any:
    """Submit a long race; return its job once a method streams (None: it finished first)."""
    job = client.submit(
        cfg.pair,
        "Write a long story about a lighthouse keeper.",
        methods,
        {},
        cfg.stop_tokens,
        0.0,
        1.0,
        0,
        api_name="/race",
    )
    deadline = time.monotonic() + 300
    while len(job.outputs()) < 3 and not job.done() and time.monotonic() < deadline:  # warm-up, then a method streams
        time.sleep(0.05)
    return None if job.done() else job


TOO_SHORT = "the long race finished before the test could interrupt it: raise --stop-tokens"


def stop_latency(url: str, cfg: argparse.Namespace, methods: list[str]) -> dict[str, Any]:
    """Seconds from pressing Stop (once a long race streams) to the race's last update."""
    page = client(url, 0, PHASES)
    if (job := long_race(page, cfg, methods)) is None:
        return {"stop_s": None, "stop_note": TOO_SHORT}
    pressed = time.perf_counter()
    page.predict(api_name="/stop")
    status = job.result(timeout=300)[0]
    return {"stop_s": round(time.perf_counter() - pressed, 3), "stopped": "Stopped by the Stop button" in status}


def short_race(url: str, cfg: argparse.Namespace) -> tuple[float, list[str]]:
    """A new visitor's one-method, 8-token race: (seconds to finish, the status lines it showed)."""
    start = time.perf_counter()
    job = client(url, 1, PHASES).submit(*race_args(cfg.pair, [BASELINE], 8, 0), api_name="/race")
    final = job.result(timeout=600)[0]
    return time.perf_counter() - start, [o[0] for o in job.outputs()] + [final]


def fair_share(url: str, cfg: argparse.Namespace, methods: list[str]) -> dict[str, Any]:
    """While one visitor's long race runs, another's short race: does it go between the long race's
    methods (finishing first), and does its page say where it waits?"""
    page = client(url, 2, PHASES)
    if (job := long_race(page, cfg, methods)) is None:
        return {"short_race_s": None, "fair_note": TOO_SHORT}
    seconds, lines = short_race(url, cfg)
    long_done = job.done()
    page.predict(api_name="/stop")
    job.result(timeout=300)
    return {
        "short_race_s": round(seconds, 2),
        "short_race_first": not long_done,
        "queue_position_shown": any("ahead of you" in line for line in lines),
    }


def leave_latency(url: str, cfg: argparse.Namespace, methods: list[str], log: Path) -> dict[str, Any]:
    """A visitor closes the page (the client's heartbeat ends) during a long race: seconds until
    the server stops that race (its log says so), up to a minute."""
    page = client(url, 3, PHASES)
    if (job := long_race(page, cfg, methods)) is None:
        return {"leave_s": None, "leave_note": TOO_SHORT}
    left = time.perf_counter()
    page.close()
    from specviz.ui.blocks import LEFT_LOG

    while time.perf_counter() - left < 60 and not logged(LEFT_LOG, log.read_text(errors="replace")):
        time.sleep(0.2)
    seconds = time.perf_counter() - left
    job.cancel()
    return {"leave_s": round(seconds, 2) if seconds < 60 else None}


def after_visitors_left(pid: int, log: Path, ttl_s: int) -> dict[str, Any]:
    """The server's RSS once every visitor's session has expired (its state, online learners
    included, dropped), and how many sessions its janitor says it dropped."""
    from specviz.serving.janitor import DROPPED_LOG, JANITOR_EVERY_S

    time.sleep(ttl_s + 2 * JANITOR_EVERY_S + 2)
    dropped = logged(DROPPED_LOG, log.read_text(errors="replace"))
    return {"rss_visitors_left_mb": round(rss_mb(pid), 1), "sessions_dropped": sum(dropped)}


def logged(line: str, text: str) -> list[int]:
    """The number in each line of `text` that the server logged as `line` (a %d format)."""
    return [int(n) for n in re.findall(re.escape(line).replace("%d", r"(\d+)"), text)]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else float("nan")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line, its bounds checked (loopback only, bounded)."""
    p = argparse.ArgumentParser(prog="python -m specviz.bench load", description=__doc__.split("\n\n")[0])
    p.add_argument("--pair", default="tiny-random")
    p.add_argument("--methods", default="", help="comma-separated registry names (default: the Race tab's defaults)")
    p.add_argument("--sessions", type=int, default=8, help="concurrent clients")
    p.add_argument("--races", type=int, default=25, help="races per client")
    p.add_argument("--fresh", action="store_true", help="a new client (a new visitor) for every race")
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--stop-tokens", type=int, default=512, help="max new tokens of the race that Stop interrupts")
    p.add_argument(
        "--session-ttl",
        type=int,
        default=60,
        help="seconds after its last event the app drops a visitor's session; then RSS once all have left "
        "(0: the app's own, no wait)",
    )
    p.add_argument(
        "--minutes", type=float, default=0.0, help="time budget for the races (0: none); no race starts after it"
    )
    p.add_argument(
        "--hostile",
        type=int,
        default=0,
        help="rounds of a hostile client's probes beside the honest sessions (0: none; none starts after the races)",
    )
    p.add_argument("--out", type=Path, required=True, help="folder for results.json, summary.md and the server log")
    cfg = p.parse_args(argv)
    if not (1 <= cfg.sessions <= 64 and 1 <= cfg.races <= 1000 and 0 <= cfg.hostile <= 100):
        raise SpecvizError(
            "--sessions must be from 1 to 64, --races from 1 to 1000 and --hostile from 0 to 100 "
            "(loopback only, bounded)"
        )
    return cfg


def app_env(cfg: argparse.Namespace, temp: Path) -> dict[str, str]:
    """The child app's environment: its session TTL (when set), its temporary folders under `temp`,
    and one trusted proxy in front (this tool's clients say which visitor they are, as a proxy would)."""
    ttl = {"SPECVIZ_LIMIT_SESSION_TTL_S": str(cfg.session_ttl)} if cfg.session_ttl else {}
    folders = {"TMPDIR": str(temp.resolve()), "GRADIO_TEMP_DIR": str((temp / "gradio").resolve())}
    return {**ttl, **folders, TRUSTED_PROXIES_ENV: "1"}


def warm_up(url: str, cfg: argparse.Namespace, methods: list[str]) -> None:
    """One untimed race (models load, caches fill); its failure ends the run."""
    warm = one_race(client(url, 4, PHASES), race_args(cfg.pair, methods, cfg.max_new_tokens, 0))
    if not warm[0]:
        raise SpecvizError(f"the warm-up race failed: {warm[2]}")


@dataclass
class RaceFigures:
    """What the races left: the honest sessions' rows, the hostile client's, and the server's RSS and
    temporary folder around them."""

    rows: list[dict[str, Any]]
    hostile: list[dict[str, Any]]
    wall_s: float
    rss_before_mb: float
    rss_after_mb: float
    temp_before_mb: float
    temp_after_mb: float
    temp_seen: dict[str, float]  # sample_folder's dict: the largest size of the temporary folder seen


def run_races(url: str, cfg: argparse.Namespace, methods: list[str], pid: int, temp: Path) -> RaceFigures:
    """The honest sessions' races, with the hostile client's rounds beside them when asked."""
    rss_before, temp_before = rss_mb(pid), folder_mb(temp)
    honest_done = threading.Event()
    temp_seen = sample_folder(temp, honest_done)
    hostile: list[dict[str, Any]] = []
    hostile_thread = threading.Thread(target=lambda: hostile.extend(run_hostile(url, cfg, honest_done)))
    if cfg.hostile:
        hostile_thread.start()
    started = time.perf_counter()
    rows = run_sessions(url, cfg, methods, pid)
    wall = time.perf_counter() - started
    honest_done.set()
    if cfg.hostile:
        hostile_thread.join()
    rss_after, temp_after = rss_mb(pid), folder_mb(temp)
    return RaceFigures(rows, hostile, wall, rss_before, rss_after, temp_before, temp_after, temp_seen)


def measure(
    cfg: argparse.Namespace, methods: list[str], log: Path, temp: Path
) -> tuple[RaceFigures, dict[str, Any], dict[str, Any]]:
    """The app in a child process through every phase: warm-up, races, Stop, visitors left. Returns
    (the races' figures, the Stop timings, the RSS once the visitors have left)."""
    proc, url = start_app(cfg.pair, log, app_env(cfg, temp))
    try:
        warm_up(url, cfg, methods)
        races = run_races(url, cfg, methods, proc.pid, temp)
        stop = {
            **stop_latency(url, cfg, methods),
            **fair_share(url, cfg, methods),
            **leave_latency(url, cfg, methods, log),
        }
        left = after_visitors_left(proc.pid, log, cfg.session_ttl) if cfg.session_ttl else {}
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return races, stop, left


def rss_figures(races: RaceFigures, left: dict[str, Any]) -> dict[str, Any]:
    """The server's RSS: after the warm-up, after the first race, at the end of the races and once
    the visitors have left, and its growth between them."""
    rows, rss_before, rss_after = races.rows, races.rss_before_mb, races.rss_after_mb
    return {
        "rss_before_mb": round(rss_before, 1),
        "rss_after_mb": round(rss_after, 1),
        "rss_growth_mb": round(rss_after - rss_before, 1),
        "rss_growth_pct": round(100 * (rss_after / rss_before - 1), 2),
        "rss_growth_second_half_mb": round(rss_after - rows[len(rows) // 2]["rss_mb"], 1),
        # the steady state (issue 41's goal: < 1 MB per 10 races), read over the second half of the races
        "rss_growth_per_10_races_second_half_mb": round(
            10 * (rss_after - rows[len(rows) // 2]["rss_mb"]) / max(1, len(rows) - len(rows) // 2), 2
        ),
        # from the first race's end (concurrent sessions have all arrived by then: their one-time costs are in)
        "rss_first_race_mb": rows[0]["rss_mb"],
        "rss_growth_from_first_race_pct": round(100 * (rss_after / rows[0]["rss_mb"] - 1), 2),
        **left,
        **(
            {"rss_growth_visitors_left_pct": round(100 * (left["rss_visitors_left_mb"] / rss_before - 1), 2)}
            if left
            else {}
        ),
    }


def build_result(
    cfg: argparse.Namespace,
    argv: list[str] | None,
    methods: list[str],
    log: Path,
    races: RaceFigures,
    stop: dict[str, Any],
    left: dict[str, Any],
) -> dict[str, Any]:
    """results.json: the run's settings, its figures, the server log's findings and every row."""
    rows, hostile = races.rows, races.hostile
    seconds = [r["seconds"] for r in rows if r["ok"]]
    from specviz.ui.blocks import LEFT_LOG

    text = log.read_text(errors="replace")
    return {
        "command": "python -m specviz.bench load " + " ".join(sys.argv[2:] if argv is None else argv),
        "pair": cfg.pair,
        "methods": methods,
        "sessions": cfg.sessions,
        "races_per_session": cfg.races,
        "fresh": cfg.fresh,
        "max_new_tokens": cfg.max_new_tokens,
        "minutes": cfg.minutes,
        "races": len(rows),
        "done": sum(r["ok"] for r in rows),
        "failed": sum(not r["ok"] for r in rows),
        "wall_s": round(races.wall_s, 1),
        "latency_p50_s": round(percentile(seconds, 0.5), 2),
        "latency_p95_s": round(percentile(seconds, 0.95), 2),
        **rss_figures(races, left),
        **stop,
        "temp_before_mb": round(races.temp_before_mb, 1),
        "temp_largest_mb": round(max(races.temp_seen["largest_mb"], races.temp_after_mb), 1),
        "temp_after_mb": round(races.temp_after_mb, 1),
        "temp_growth_mb": round(races.temp_after_mb - races.temp_before_mb, 1),
        "hostile_rounds": len({h["round"] for h in hostile}),
        "hostile_probes": len(hostile),
        "hostile_unexpected": sorted({h["probe"] for h in hostile if not h["ok"]}),
        "hostile_missed_goals": sorted({h["probe"] for h in hostile if h.get("within_goal") is False}),
        "hostile_stop_s": [h["seconds"] for h in hostile if h["probe"] == "Stop on an online stream"],
        "visitor_left_logged": bool(logged(LEFT_LOG, text)),
        "tracebacks_in_log": text.count("Traceback (most recent call last)"),
        "problems": sorted({r["problem"] for r in rows if r["problem"]})[:10],
        "rows": rows,
        "hostile": hostile,
    }


def write_result(out: Path, result: dict[str, Any]) -> None:
    """results.json, summary.md (the figures without the rows), and the summary printed."""
    (out / "results.json").write_text(json.dumps(result, indent=1))
    summary = {k: v for k, v in result.items() if k not in ("rows", "methods", "problems", "hostile")}
    (out / "summary.md").write_text(
        "| figure | value |\n|---|---|\n" + "".join(f"| {k} | {v} |\n" for k, v in summary.items())
    )
    print(json.dumps(summary, indent=1))


def main(argv: list[str] | None = None) -> int:
    cfg = parse_args(argv)
    methods = [m.strip() for m in cfg.methods.split(",") if m.strip()] or default_race()
    cfg.out.mkdir(parents=True, exist_ok=True)
    log = cfg.out / "server.log"
    temp = cfg.out / "tmp"  # the app's temporary folder and gradio's cache: the disk a visitor can fill
    temp.mkdir(exist_ok=True)
    races, stop, left = measure(cfg, methods, log, temp)
    result = build_result(cfg, argv, methods, log, races, stop, left)
    write_result(cfg.out, result)
    return 0 if result["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
