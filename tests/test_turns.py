"""Turns on the models: first come first served, a race's methods interleave with other visitors'
runs, the page says where a run waits, Stop and a closed tab end a waiting or running race."""

from __future__ import annotations

import threading
import time

import pytest

from specviz.errors import SpecvizError
from specviz.serving.racing import RaceSettings, run_race
from specviz.serving.stops import LeftPages
from specviz.serving.turns import Turns, one_at_a_time


def test_turns_are_served_in_arrival_order():
    turns, served = Turns(), []
    first = turns.join()
    assert turns.wait(first, 0)

    def visitor(i: int, ticket: object) -> None:
        assert turns.wait(ticket, 10)
        served.append(i)
        turns.leave(ticket)

    tickets = [turns.join() for _ in range(4)]
    assert [turns.ahead(t) for t in tickets] == [1, 2, 3, 4]
    threads = [threading.Thread(target=visitor, args=(i, t)) for i, t in reversed(list(enumerate(tickets)))]
    for t in threads:
        t.start()
    assert not turns.wait(tickets[0], 0.05)  # the first still holds the models
    turns.leave(first)
    for t in threads:
        t.join(10)
    assert served == [0, 1, 2, 3]


def test_the_waiting_note_counts_runs_ahead_and_estimates_from_past_turns():
    turns = Turns()
    holder, waiting = turns.join(), turns.join()
    assert turns.waiting_note(waiting) == "1 run ahead of you"  # nothing served yet: no estimate
    time.sleep(0.05)
    turns.leave(holder)  # one turn of ~0.05 s on record
    third, fourth = turns.join(), turns.join()
    assert turns.waiting_note(fourth).startswith("2 runs ahead of you (about ")
    for t in (waiting, third, fourth):
        turns.leave(t)


def test_a_waiting_run_is_redrawn_when_its_note_changes_not_every_poll():
    turns = Turns()
    first, second, mine = turns.join(), turns.join(), turns.join()
    threading.Timer(0.8, turns.leave, args=(first,)).start()  # one run ahead fewer after 0.8 s
    threading.Timer(1.6, turns.leave, args=(second,)).start()  # then the models are mine
    notes = list(turns.waiting(mine, every_s=0.0))
    assert len(notes) == 2, notes  # ~10 polls, two different notes
    assert notes[0] == "2 runs ahead of you" and notes[1] == "1 run ahead of you (about 1 s)"
    turns.leave(mine)


def test_a_waiting_run_that_is_stopped_leaves_the_line():
    turns, stop = Turns(), threading.Event()
    holder = turns.join()
    stop.set()
    with turns.turn(stop) as served:
        assert not served
    assert turns.ahead(holder) == 0 and turns.wait(holder, 0)


def test_wrapped_handlers_hold_a_turn_for_their_whole_run():
    turns = Turns()

    def plain(x: int) -> int:
        return len(turns._line) + x

    def streamed(n: int):
        for i in range(n):
            yield len(turns._line) + i

    assert one_at_a_time(plain, turns)(0) == 1
    assert list(one_at_a_time(streamed, turns)(3)) == [1, 2, 3]
    assert len(turns._line) == 0


def test_a_closed_page_stops_its_visitors_runs_only():
    mine, other, left = threading.Event(), threading.Event(), LeftPages()
    with left.watching("visitor-a", mine), left.watching("visitor-b", other):
        assert left.stop("visitor-a") == 1
    assert mine.is_set() and not other.is_set()
    assert left.stop("visitor-a") == 0  # gone once the race ended
    assert LeftPages().stop("visitor-b") == 0  # another app's registry: its visitors are not this one's


def _race(pair, methods, turns, stop, log, name):
    """Race `methods`; log (race name, method, status, message) each time a method starts waiting or running."""
    settings, last = RaceSettings("def add(a, b):", tuple(methods), max_new_tokens=8), None
    for race in run_race(pair, settings, {}, stop, turns=turns):
        for run in race.runs:
            if run.status in ("running", "waiting") and last != (run.name, run.status):
                last = (run.name, run.status)
                log.append((name, run.name, run.status, run.message))


def test_a_short_race_goes_between_a_long_races_methods(random_pair):
    turns, log, stop = Turns(), [], threading.Event()
    holder = turns.join()  # the models are busy when both races arrive
    long = threading.Thread(
        target=_race, args=(random_pair, ["autoregressive", "vanilla", "prompt_lookup"], turns, stop, log, "long")
    )
    long.start()
    while not any(name == "long" and status == "waiting" for name, _, status, _ in log):
        time.sleep(0.01)
    short = threading.Thread(target=_race, args=(random_pair, ["autoregressive"], turns, stop, log, "short"))
    short.start()
    while not any(name == "short" and status == "waiting" for name, _, status, _ in log):
        time.sleep(0.01)
    turns.leave(holder)
    long.join(60)
    short.join(60)
    running = [(name, method) for name, method, status, _ in log if status == "running"]
    assert running == [
        ("long", "autoregressive"),
        ("short", "autoregressive"),
        ("long", "vanilla"),
        ("long", "prompt_lookup"),
    ]
    notes = [message for name, _, status, message in log if name == "short" and status == "waiting"]
    assert notes and notes[0].startswith("waiting for the models: 2 runs ahead of you")


def test_stop_while_waiting_skips_the_methods_without_running_them(random_pair):
    turns, stop = Turns(), threading.Event()
    holder = turns.join()
    settings = RaceSettings("def add(a, b):", ("autoregressive", "vanilla"), max_new_tokens=8)
    race_iter = run_race(random_pair, settings, {}, stop, turns=turns)
    for race in race_iter:
        if race.runs[0].status == "waiting":
            stop.set()
    assert [r.status for r in race.runs] == ["skipped", "skipped"]
    assert all(not r.records for r in race.runs) and turns.ahead(holder) == 0


def test_a_visitors_runs_sharing_one_stop_signal_each_leave_cleanly():
    """The Race tab's Stop is one signal per page: two races of one visitor at once share it. The
    second to end found the visitor's entry gone (KeyError: the session hash), issue 41."""
    shared, left = threading.Event(), LeftPages()
    with left.watching("visitor-a", shared):
        with left.watching("visitor-a", shared):
            pass
        assert left.stop("visitor-a") == 1  # the outer run still listens
    assert left.stop("visitor-a") == 0


def test_a_visitors_second_run_waits_behind_other_visitors_first():
    turns = Turns()
    a1, a2, a3 = turns.join("a"), turns.join("a"), None
    b1, c1 = turns.join("b"), turns.join("c")
    assert [turns.ahead(t) for t in (a1, b1, c1, a2)] == [0, 1, 2, 3]
    b2 = turns.join("b")  # b's second goes behind a's second, which came first
    assert turns.ahead(b2) == 4
    anonymous = turns.join()  # no visitor (a test, the command line): a first run, behind the other first ones
    assert turns.ahead(anonymous) == 3 and turns.ahead(b2) == 5
    with pytest.raises(SpecvizError, match="2 runs waiting for the models or running already"):
        a3 = turns.join("a")
    assert a3 is None and len(turns._line) == 6
    for t in (a1, a2, b1, c1, b2, anonymous):
        turns.leave(t)


def test_the_visitor_is_read_from_gradios_request():
    from types import SimpleNamespace

    from gradio.context import LocalContext

    turns = Turns()
    token = LocalContext.request.set(SimpleNamespace(session_hash="page-1"))
    try:
        first, second = turns.join(), turns.join()
        with pytest.raises(SpecvizError):
            turns.join()
    finally:
        LocalContext.request.reset(token)
    assert first.visitor == second.visitor == "page-1"
    for t in (first, second):
        turns.leave(t)


def test_a_run_past_a_typical_turn_is_not_given_a_made_up_estimate():
    """After a cancel the run on the models may take tens of seconds more: waiting visitors were told
    'about 1 s' (issue 41). Past a typical turn, the note says how long the run has held them."""
    turns = Turns()
    quick = turns.join()
    time.sleep(0.05)
    turns.leave(quick)  # a typical turn: ~0.05 s
    holder, mine = turns.join(), turns.join()
    time.sleep(0.3)
    note = turns.waiting_note(mine)
    assert "about" not in note and note.startswith("1 run ahead of you (the run on the models has taken 0 s so far")
    for t in (holder, mine):
        turns.leave(t)


class FakeQueue:
    """gradio's queue as far as `event_live` reads it: the events of the jobs running now."""

    def __init__(self, *event_ids: str):
        self.active_jobs = [[type("Event", (), {"_id": e})() for e in event_ids], None]


def in_event(event_id: str, queue: FakeQueue):
    """A context in which gradio is handling `event_id` (what its function wrapper sets)."""
    import contextvars
    from types import SimpleNamespace

    from gradio.context import LocalContext

    context = contextvars.copy_context()
    context.run(LocalContext.blocks.set, SimpleNamespace(_queue=queue))
    context.run(LocalContext.event_id.set, event_id)
    return context


def test_a_cancelled_request_sets_its_runs_stop():
    """gradio cannot interrupt a call running in a thread: after a client cancelled, the models stayed
    busy 6-39 s (issue 41). The watcher sets the run's Stop once gradio drops the event's job."""
    from specviz.serving.stops import stop_when_cancelled

    queue, stop = FakeQueue("ev-1", "ev-2"), threading.Event()

    def run() -> None:
        with stop_when_cancelled(stop, every_s=0.02):
            assert not stop.wait(0.2)  # still running: no stop
            queue.active_jobs[0] = [e for e in queue.active_jobs[0] if e._id != "ev-1"]  # the client cancelled
            assert stop.wait(5)

    in_event("ev-1", queue).run(run)


def test_a_request_cancelled_while_it_waits_leaves_the_line_without_running():
    turns, queue, ran = Turns(), FakeQueue("ev-1"), []
    holder = turns.join()  # the models are busy
    call = one_at_a_time(lambda: ran.append(1), turns)
    failed: list[BaseException] = []

    def waiting() -> None:
        try:
            in_event("ev-1", queue).run(call)
        except SpecvizError as e:
            failed.append(e)

    worker = threading.Thread(target=waiting)
    worker.start()
    while len(turns._line) < 2:
        time.sleep(0.01)
    queue.active_jobs[0] = []  # cancelled
    worker.join(10)
    assert not worker.is_alive() and not ran and "cancelled before its turn" in str(failed[0])
    assert len(turns._line) == 1
    turns.leave(holder)
