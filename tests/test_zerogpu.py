"""The app on a ZeroGPU Space, on the CPU: a fake `spaces` module does to each decorated call what
ZeroGPU does (read from spaces 0.51's `zero/wrappers.py`): the call runs in a forked child, its
arguments are pickled in and its result, or each item it yields, pickled back; `duration` is
called with the call's arguments and the child is killed past it; closing a generator call stops
the child's generator at its next item. This one is stricter in one way: only plain data may cross
(the app keeps gradio's objects in its own process)."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import multiprocessing
import os
import pickle
import sys
import threading
import time
import types
from typing import Any

import gradio as gr
import numpy as np
import pytest

from specviz.serving.gpu import MOST_S, gpu_seconds
from specviz.serving.limits import AppLimits
from specviz.serving.race import Race
from specviz.serving.stops import KeyedStop

FORK = multiprocessing.get_context("fork")
PAIR = "tiny-random"


def plain(value: Any) -> bool:
    """Plain data: what a ZeroGPU call may take and give (records are dataclasses of plain values)."""
    if value is None or isinstance(value, (bool, int, float, str, bytes, np.generic)):
        return True
    if isinstance(value, (list, tuple, set, frozenset)):
        return all(plain(v) for v in value)
    if isinstance(value, dict):
        return all(plain(k) and plain(v) for k, v in value.items())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return all(plain(getattr(value, f.name)) for f in dataclasses.fields(value))
    return False


def crossing(value: Any) -> bytes:
    """`value` pickled to cross into or out of a worker (TypeError if it is not plain data)."""
    if not plain(value):
        raise TypeError(f"not plain data, cannot cross to or from a ZeroGPU worker: {value!r:.200}")
    return pickle.dumps(value)


def _worker(fn, conn, payload: bytes, stop) -> None:
    """The forked child: run the call, send back each item (a generator, stopped when `stop` is set
    after an item, as ZeroGPU does) or its value, then "end"; an error as a gr.Error (ZeroGPU
    passes a gr.Error whole and replaces any other with one naming its type)."""
    try:
        args, kwargs = pickle.loads(payload)
        result = fn(*args, **kwargs)
        if inspect.isgenerator(result):
            for item in result:
                if stop.is_set():
                    result.close()
                    break
                conn.send_bytes(crossing(("item", item)))
        else:
            conn.send_bytes(crossing(("value", result)))
        conn.send_bytes(pickle.dumps(("end", None)))
    except BaseException as e:  # as ZeroGPU does: whatever the call raised goes back to the app
        error = e if isinstance(e, gr.Error) else gr.Error(f"ZeroGPU worker error: {type(e).__name__}: {e}")
        conn.send_bytes(pickle.dumps(("error", error)))
        raise  # ends in the `finally` below: the child exits at once either way
    finally:
        conn.close()
        os._exit(0)  # the child runs nothing of the parent's at exit


class FakeSpaces(types.ModuleType):
    """`spaces` on a ZeroGPU Space, as far as the app sees it."""

    def __init__(self) -> None:
        super().__init__("spaces")
        self.calls: list[tuple[str, float, tuple]] = []  # (function, seconds asked for, arguments) of every call
        self.auto_wrap = True
        self.config = types.ModuleType("spaces.config")
        self.config.Config = types.SimpleNamespace(zero_gpu=True)

    def disable_gradio_auto_wrap(self) -> None:
        self.auto_wrap = False

    def GPU(self, fn=None, *, duration=60):
        if fn is None:
            return functools.partial(self.GPU, duration=duration)

        def start(args, kwargs):
            seconds = duration(*args, **kwargs) if callable(duration) else duration
            self.calls.append((fn.__name__, seconds, args))
            payload = crossing((args, kwargs))  # in the app's process: an argument that cannot cross fails here
            parent, child = FORK.Pipe()
            stop = FORK.Event()
            process = FORK.Process(target=_worker, args=(fn, child, payload, stop), daemon=True)
            process.start()
            child.close()
            return process, parent, stop, time.monotonic() + seconds

        def receive(process, conn, deadline):
            if not conn.poll(max(0.0, deadline - time.monotonic())):
                process.kill()
                raise gr.Error("ZeroGPU worker error: GPU task aborted (past its duration)")
            kind, value = pickle.loads(conn.recv_bytes())
            if kind == "error":
                raise value
            return kind, value

        if inspect.isgeneratorfunction(fn):

            @functools.wraps(fn)
            def steps(*args, **kwargs):
                process, conn, stop, deadline = start(args, kwargs)
                try:
                    while (got := receive(process, conn, deadline))[0] != "end":
                        try:
                            yield got[1]
                        except GeneratorExit:  # the app closed the call: its generator stops at its next item
                            stop.set()
                            while receive(process, conn, deadline)[0] != "end":
                                pass
                            raise
                finally:
                    process.join(5)

            return steps

        @functools.wraps(fn)
        def call(*args, **kwargs):
            process, conn, _, deadline = start(args, kwargs)
            try:
                return receive(process, conn, deadline)[1]
            finally:
                process.join(5)

        return call


@pytest.fixture(scope="module")
def spaces():
    return FakeSpaces()


@pytest.fixture(scope="module")
def app(spaces):
    from specviz.ui import build_app

    return build_app(pair=PAIR, gpu=spaces.GPU, limits=AppLimits())


def handler(demo, module: str, name: str):
    return next(
        f.fn
        for f in demo.fns.values()
        if getattr(f.fn, "__module__", None) == module and getattr(f.fn, "__name__", None) == name
    )


def race_through(demo, methods, max_new_tokens, stop=None, seen=None) -> Race:
    """The Race tab's Run button, as gradio calls it, to the race it hands on; `seen`: a list each of
    the engine's snapshots goes into as it is drawn (the page gets its panels, not the snapshot)."""
    from specviz.ui import race as race_tab

    real = race_tab.run_race

    def watched(*args, **kwargs):
        for snapshot in real(*args, **kwargs):
            if seen is not None:
                seen.append((time.monotonic(), [(r.status, len(r.records)) for r in snapshot.runs]))
            yield snapshot

    race, race_tab.run_race = None, watched
    try:
        updates = handler(demo, "specviz.ui.race", "race")(
            PAIR, "def fibonacci(n):", list(methods), {}, max_new_tokens, 0.0, 1.0, 0, stop or KeyedStop(), {}
        )
        for update in updates:
            race = next((v for v in update.values() if isinstance(v, Race)), race)
    finally:
        race_tab.run_race = real
    return race


def test_a_race_through_zerogpu_writes_what_it_writes_in_one_process(app, spaces):
    import specviz
    from specviz.serving.racing import RaceSettings, run_race

    methods = ("autoregressive", "vanilla", "prompt_lookup", "osd")
    before = len(spaces.calls)
    race = race_through(app, methods, 24)
    assert [name for name, _, _ in spaces.calls[before:]] == ["run_method"] * 4  # one worker call per method
    here = list(
        run_race(
            specviz.load_pair(PAIR),
            RaceSettings("def fibonacci(n):", methods, max_new_tokens=24),
            {},
            threading.Event(),
        )
    )[-1]
    for forked, local in zip(race.runs, here.runs, strict=True):
        assert forked.status == local.status == "done", forked.message
        assert [r.emitted for r in forked.records] == [r.emitted for r in local.records]
        assert [r.oracle_sl for r in forked.records] == [r.oracle_sl for r in local.records]
    osd = next(r for r in race.runs if r.name == "osd")
    assert "ZeroGPU" in osd.note and "starts again" in osd.note  # the page says what a worker forgets


def test_stop_ends_the_method_running_in_the_worker(app):
    import specviz

    target = specviz.load_pair(PAIR).target  # the pair the app serves, inherited by each worker
    slow = target.register_forward_pre_hook(lambda module, args: time.sleep(0.01))
    stop, seen, out = KeyedStop(), [], {}
    try:
        racing = threading.Thread(
            target=lambda: out.update(race=race_through(app, ("autoregressive", "vanilla"), 400, stop, seen))
        )
        racing.start()
        while not any(runs[0][1] for _, runs in seen) and racing.is_alive():
            time.sleep(0.01)
        stopped_at = time.monotonic()
        stop.set()  # the Stop button
        racing.join(60)
    finally:
        slow.remove()
    assert not racing.is_alive()
    first, second = out["race"].runs
    assert first.status == "stopped" and 0 < sum(len(r.emitted) for r in first.records) < 400
    assert first.records[-1].oracle_sl is not None  # the stopped run still ended properly in its worker
    assert second.status == "skipped"
    ended = next(t for t, runs in seen if runs[0][0] == "stopped")
    assert ended - stopped_at < 1.5, f"the worker's run went on {ended - stopped_at:.2f} s after Stop"


def test_two_visitors_races_both_finish_and_no_worker_waits_for_a_turn(app, monkeypatch):
    from specviz.serving import turns

    app_pid, wait = os.getpid(), turns.Turns.wait

    def wait_here_only(self, ticket, timeout=None):
        assert os.getpid() == app_pid, "a worker waited in the models' line"
        return wait(self, ticket, timeout)

    monkeypatch.setattr(turns.Turns, "wait", wait_here_only)
    races = {}
    visitors = [
        threading.Thread(target=lambda v=v: races.update({v: race_through(app, ("autoregressive", "vanilla"), 16)}))
        for v in ("a", "b")
    ]
    for v in visitors:
        v.start()
    for v in visitors:
        v.join(120)
    assert not any(v.is_alive() for v in visitors) and set(races) == {"a", "b"}
    assert all(r.status == "done" for race in races.values() for r in race.runs)
    assert not turns.TURNS._line  # every turn given back


def test_a_page_load_and_a_pair_change_make_no_gpu_call(app, spaces):
    before = len(spaces.calls)
    for f in app.fns.values():
        if (
            f.fn is not None
            and any(event in ("load", "change") for _, event in f.targets)
            and f.fn.__module__ == "specviz.ui.blocks"
        ):
            assert "Pair **tiny-self**" in f.fn("tiny-self")
            assert "Pair **tiny-random**" in f.fn(PAIR)
    assert len(spaces.calls) == before
    with pytest.raises(gr.Error, match="listed pairs"):  # a pair not loaded at start-up is not served
        handler(app, "specviz.ui.race", "race")(
            "smollm2-360m/135m", "hi", ["vanilla"], {}, 8, 0.0, 1.0, 0, None, {}
        ).__next__()


def test_a_calls_duration_is_computed_from_its_arguments(app, spaces):
    from specviz.serving.racing import method_seconds
    from specviz.serving.runs import RunRequest

    asked = {}
    for tokens in (8, 64):
        before = len(spaces.calls)
        race_through(app, ("autoregressive",), tokens)
        ((_, seconds, args),) = spaces.calls[before:]
        assert args[0].max_new_tokens == tokens and seconds == method_seconds(*args)
        asked[tokens] = seconds
    assert asked[8] < asked[64] == gpu_seconds(64)
    huge = RunRequest(PAIR, (1, 2), "vanilla", {}, {"max_new_tokens": 10**6})
    assert method_seconds(huge, {}) == MOST_S


def test_every_tabs_model_handler_runs_in_a_worker(app, spaces):
    """Each tab's model call crosses plain data only; its page is drawn in the app's process."""
    from specviz.ui import online

    before = len(spaces.calls)
    card, table, *_ = handler(app, "specviz.ui.disco", "run")(PAIR, "def f(x):", True, 0.5, 8, 8, 1)
    assert "Classifier **" in card and len(table) == 4  # after a load flag, when timing was disturbed
    _, rows, _, steps = handler(app, "specviz.ui.pearl", "run")(PAIR, "def f(x):", 2, False, 8, 1)
    assert len(rows) == 3 and len(steps)  # the target alone, vanilla and PEARL
    state, html, *_ = handler(app, "specviz.ui.sssd_tree", "on_run")(PAIR, "def f(x): return f(x)", 8, 4, "input")
    assert state.records and "Cannot" not in html
    state, html, *_ = handler(app, "specviz.ui.streaming", "on_run")(PAIR, "def f(x):", 8, 2, 2, 0.0)
    assert state.records and "Cannot" not in html
    *_, (state, summary, _, _) = handler(app, "specviz.ui.online", "on_serve")(
        PAIR, ["gsm8k"], 2, 0, False, 1, 8, 3, 1, 3e-3, "fkl", False, 5, KeyedStop()
    )
    assert "2 / 2 requests served" in summary and "2 updates" in summary  # the draft learned in its worker
    assert (
        state["learner"] is None
        and handler(app, "specviz.ui.online", "on_analyse")(state, 5)[1] == online.NO_LEARNER_NOTE
    )
    race = race_through(app, ("vanilla",), 8)
    number, view, *_ = handler(app, "specviz.ui.stepthrough", "here")(race, PAIR, "vanilla", 2)
    assert number == 2 and "recomputed" in view
    names = [name for name, _, _ in spaces.calls[before:]]
    assert names == ["measure", "<lambda>", "<lambda>", "<lambda>", "plain_stream", "run_method", "recomputed"]


def test_the_command_line_finds_zerogpu_and_keeps_gradio_from_wrapping_every_handler(monkeypatch):
    from specviz.cli import zerogpu

    fake = FakeSpaces()
    monkeypatch.setitem(sys.modules, "spaces", fake)
    monkeypatch.setitem(sys.modules, "spaces.config", fake.config)
    assert zerogpu() == fake.GPU and not fake.auto_wrap
    fake.config.Config.zero_gpu = False  # the package installed on another machine: no worker, no GPU
    assert zerogpu() is None
