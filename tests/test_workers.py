"""Model work runs on threads that live as long as the process: a race's every forward pass on the
models' thread (PEARL's target passes on its own), the same threads race after race; the other tabs'
handlers run there too, in their caller's context."""

from __future__ import annotations

import contextvars
import inspect
import os
import select
import signal
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from specviz.serving import threads
from specviz.serving.racing import RaceSettings, run_race
from specviz.serving.threads import MODELS, PEARL_TARGET


def test_a_worker_runs_calls_in_order_on_one_thread_and_hands_back_errors():
    worker = threads.on("test-worker")
    assert threads.on("test-worker") is worker
    seen: list[tuple[int, str]] = []
    futures = [worker.submit(lambda i=i: seen.append((i, threading.current_thread().name))) for i in range(5)]
    for f in futures:
        f.result(timeout=10)
    assert seen == [(i, "test-worker") for i in range(5)]
    with pytest.raises(ZeroDivisionError):
        worker.call(lambda: 1 / 0)
    assert worker.call(lambda: threading.current_thread().name) == "test-worker"  # it survived the error


def test_a_forked_child_gets_its_own_worker_threads():
    threads.on("test-forked").call(lambda: None)  # the parent's thread is running
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the parent's thread did not come along, a new one must serve
        try:
            name = threads.on("test-forked").call(lambda: threading.current_thread().name)
            os.write(write, name.encode())
        finally:
            os._exit(0)
    os.close(write)
    ready, _, _ = select.select([read], [], [], 30)
    answer = os.read(read, 100).decode() if ready else ""
    if not answer:
        os.kill(pid, signal.SIGKILL)  # a hung child fails the test, not the suite
    os.waitpid(pid, 0)
    assert answer == "test-forked", "the forked child's call never ran"


def test_every_forward_pass_of_a_race_runs_on_the_same_long_lived_threads(perturbed_pair, watch_forwards):
    calls: list[tuple[str, int]] = []
    watch_forwards(
        (perturbed_pair.target, perturbed_pair.draft),
        lambda: calls.append((threading.current_thread().name, threading.get_ident())),
    )
    settings = RaceSettings("def add(a, b):", ("autoregressive", "vanilla", "pearl"), max_new_tokens=12)
    for _ in range(2):
        race = list(run_race(perturbed_pair, settings, {}, threading.Event()))[-1]
        assert [run.status for run in race.runs] == ["done"] * 3
    assert {name for name, _ in calls} == {MODELS, PEARL_TARGET}
    assert len(set(calls)) == 2  # one thread each, for both races: no thread started per run


def test_pearl_runs_its_target_lane_on_the_executor_it_is_lent_else_on_a_thread_of_its_own(
    perturbed_pair, watch_forwards
):
    """The library lends PEARL nothing: a run starts a thread for its target lane and ends it; a
    caller's executor (the app's long-lived thread, the bench's) serves every run it is lent to."""
    import specviz

    names: list[str] = []
    watch_forwards((perturbed_pair.target,), lambda: names.append(threading.current_thread().name))
    alone = [t for r in specviz.run("pearl", perturbed_pair, "def add(a, b):", max_new_tokens=12) for t in r.emitted]
    assert any(n.startswith("pearl-target-run") for n in names)
    assert not any(t.name.startswith("pearl-target-run") for t in threading.enumerate())  # ended with the run
    names.clear()
    with ThreadPoolExecutor(1, thread_name_prefix="lent") as lent:
        for _ in range(2):
            lent_out = [
                t
                for r in specviz.run("pearl", perturbed_pair, "def add(a, b):", max_new_tokens=12, executor=lent)
                for t in r.emitted
            ]
            assert lent_out == alone
    assert "lent_0" in names and not any(n.startswith("pearl-target") for n in names)


LABEL: contextvars.ContextVar[str] = contextvars.ContextVar("label", default="unset")


def test_a_handler_runs_on_the_models_thread_in_the_callers_context():
    def handler(x: int) -> tuple[int, str, str]:
        return x + 1, threading.current_thread().name, LABEL.get()

    LABEL.set("this request")
    assert threads.running_on(MODELS, handler)(1) == (2, MODELS, "this request")
    with pytest.raises(KeyError):
        threads.running_on(MODELS, lambda: {}["missing"])()


def test_a_streaming_handler_is_stepped_on_the_models_thread_and_closed_there():
    where, closed = [], []

    def handler(n: int):
        try:
            for i in range(n):
                where.append((threading.current_thread().name, LABEL.get()))
                yield i
        finally:
            closed.append(threading.current_thread().name)

    LABEL.set("streamed")
    wrapped = threads.running_on(MODELS, handler)
    assert inspect.isgeneratorfunction(wrapped)  # gradio and one_at_a_time see a streaming handler
    assert list(wrapped(3)) == [0, 1, 2]
    assert where == [(MODELS, "streamed")] * 3 and closed == [MODELS]
    stream = wrapped(10)
    assert next(stream) == 0
    stream.close()  # the visitor left: the handler's own clean-up runs, on the models' thread
    assert closed == [MODELS, MODELS]


def test_a_call_from_the_workers_own_thread_runs_at_once():
    worker = threads.on("test-nested")
    assert worker.call(lambda: worker.call(lambda: threading.current_thread().name)) == "test-nested"


def test_the_tabs_model_handlers_run_on_the_models_thread():
    from specviz.ui.blocks import TabContext

    ctx = TabContext(pair=None, pair_status=None, race=None)
    assert ctx.run_models(lambda: threading.current_thread().name)() == MODELS
