"""The models' line counts a visitor by network address, not by gradio session (issue 53): six raw
`POST /gradio_api/call/race` were six sessions, all admitted. The address is the peer, or behind
`SPECVIZ_TRUSTED_PROXIES` proxies the X-Forwarded-For hop that many from the right; what a client
writes in that header itself is never read."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import gradio as gr
import httpx
import pytest
from starlette.requests import Request

from specviz.errors import SpecvizError
from specviz.serving.limits import AppLimits, app_limits
from specviz.serving.turns import TURNS, Turns
from specviz.serving.visitors import trusted_proxies, visitor_address

RACE = ["tiny-random", "def f(x):", ["autoregressive"], {}, 8, 0.0, 1.0, 0]  # /race's inputs
REFUSED = "2 runs waiting for the models or running already come from your network address"


def test_the_address_is_the_peer_unless_proxies_are_trusted():
    spoofed = ["10.9.9.9, 10.8.8.8"]  # what a client may write in X-Forwarded-For itself
    assert visitor_address("203.0.113.5", spoofed, trusted=0) == "203.0.113.5"
    assert visitor_address("203.0.113.5", [], trusted=0) == "203.0.113.5"
    # one proxy (a Space's) appends the address it was reached from: the rightmost entry
    assert visitor_address("10.16.3.80", [*spoofed, "198.51.100.7"], trusted=1) == "198.51.100.7"
    assert visitor_address("10.16.3.80", ["10.9.9.9, 198.51.100.7"], trusted=1) == "198.51.100.7"
    assert visitor_address("10.0.0.2", ["10.9.9.9, 198.51.100.7, 10.0.0.1"], trusted=2) == "198.51.100.7"
    assert visitor_address("127.0.0.1", [], trusted=1) == "127.0.0.1"  # fewer hops than proxies: the leftmost
    assert visitor_address("10.16.3.80", ["198.51.100.7:51234"], trusted=1) == "198.51.100.7"  # a port is no visitor
    assert visitor_address("10.16.3.80", ["[2001:db8:1:2::5]:443"], trusted=1) == "2001:db8:1:2::/64"
    assert visitor_address("2001:db8:1:2:aaaa::1", [], trusted=0) == visitor_address("2001:db8:1:2::9", [], 0)
    assert visitor_address(None, [], trusted=0) is None


def test_the_trusted_proxies_default_to_one_on_a_space():
    assert trusted_proxies({}) == 0
    assert trusted_proxies({"SPACE_ID": "someone/specviz"}) == 1
    assert trusted_proxies({"SPACE_ID": "someone/specviz", "SPECVIZ_TRUSTED_PROXIES": "0"}) == 0
    assert trusted_proxies({"SPECVIZ_TRUSTED_PROXIES": " 2 "}) == 2
    for bad in ("-1", "one", "1.5"):
        with pytest.raises(SpecvizError, match="SPECVIZ_TRUSTED_PROXIES must be a whole number from 0"):
            trusted_proxies({"SPECVIZ_TRUSTED_PROXIES": bad})
    assert app_limits({"SPECVIZ_LIMIT_PLACES_PER_ADDRESS": "30"}).places_per_address == 30


def gradio_request(session: str, peer: str, forwarded: str | None = None) -> gr.Request:
    """gradio's Request of an event from `peer` (what the queue hands a handler), of session `session`."""
    headers = [(b"x-forwarded-for", forwarded.encode())] if forwarded else []
    scope = {"type": "http", "method": "POST", "path": "/", "headers": headers, "client": (peer, 50000)}
    return gr.Request(Request(scope), session_hash=session)


def joined(turns: Turns, request: gr.Request):
    """A ticket joined while gradio serves `request`, or the SpecvizError of its refusal."""
    from gradio.context import LocalContext

    token = LocalContext.request.set(request)
    try:
        return turns.join()
    except SpecvizError as e:
        return e
    finally:
        LocalContext.request.reset(token)


def test_new_sessions_from_one_address_share_its_two_places(monkeypatch):
    monkeypatch.delenv("SPECVIZ_TRUSTED_PROXIES", raising=False)
    monkeypatch.delenv("SPACE_ID", raising=False)
    turns = Turns()
    # three sessions, one address; what each claims in X-Forwarded-For changes nothing without a trusted proxy
    first, second, third = (joined(turns, gradio_request(f"page-{i}", "203.0.113.5", f"10.0.0.{i}")) for i in range(3))
    assert first.visitor == second.visitor == "203.0.113.5"
    assert isinstance(third, SpecvizError) and REFUSED in str(third)
    other = joined(turns, gradio_request("page-9", "198.51.100.7"))  # another address: a first run, ahead
    assert turns.ahead(other) == 1
    for t in (first, second, other):
        turns.leave(t)


def test_behind_a_trusted_proxy_the_hop_it_appended_is_the_visitor(monkeypatch):
    monkeypatch.setenv("SPECVIZ_TRUSTED_PROXIES", "1")
    turns = Turns()
    proxy = "10.16.3.80"  # every request comes through it
    a = [joined(turns, gradio_request(f"a-{i}", proxy, f"10.9.9.{i}, 198.51.100.7")) for i in range(3)]
    b = joined(turns, gradio_request("b", proxy, "198.51.100.8"))
    assert [t.visitor for t in a[:2]] == ["198.51.100.7"] * 2 and isinstance(a[2], SpecvizError)
    assert b.visitor == "198.51.100.8" and turns.ahead(b) == 1  # not behind the proxy's other visitor
    for t in (*a[:2], b):
        turns.leave(t)


@pytest.fixture(scope="module")
def app_url():
    """The app on the tiny pair, served in this process (its line is TURNS: a test may hold it)."""
    from specviz.ui import build_app, launch

    demo = build_app(pair="tiny-random", limits=AppLimits())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    launch(demo, server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    yield f"http://127.0.0.1:{port}/"
    demo.close()


def raw_race(url: str, headers: dict[str, str], outcomes: list) -> None:
    """One race through the raw API (a new gradio session each): its last event, 'complete' or 'error'."""
    call = f"{url}gradio_api/call/race"
    event_id = httpx.post(call, json={"data": RACE}, headers=headers, timeout=60).json()["event_id"]
    with httpx.stream("GET", f"{call}/{event_id}", headers=headers, timeout=300) as events:
        event = None
        for line in events.iter_lines():
            if line.startswith("event:"):
                event = line.split(":", 1)[1].strip()
            elif line.startswith("data:") and event in ("complete", "error"):
                outcomes.append((event, line))
                return


def six_at_once(url: str, headers: list[dict[str, str]]) -> list[tuple[str, str]]:
    """Six raw races started while the models are busy: how each ended once they are free."""
    outcomes: list[tuple[str, str]] = []
    holder = TURNS.join()  # the models are busy: admitted races wait in the line
    threads = [threading.Thread(target=raw_race, args=(url, h, outcomes)) for h in headers]
    try:
        for t in threads:
            t.start()
        deadline = time.monotonic() + 120
        while len(outcomes) + len(TURNS._line) - 1 < len(headers) and time.monotonic() < deadline:
            time.sleep(0.1)  # until every race is refused or waits in the line
    finally:
        TURNS.leave(holder)
    for t in threads:
        t.join(300)
    return outcomes


def test_the_served_app_hands_the_interpreter_to_a_waiting_run_quickly(app_url):
    """Issue 53: beside a 16 MB saved race being checked and drawn (seconds of pure Python), each torch call of
    another visitor's race waited Python's default 5 ms to take the interpreter back, and the race took
    several times as long; the app serves with GIL_SWITCH_S (benchmarks/reliability/README.md)."""
    import sys

    from specviz.serving.turns import GIL_SWITCH_S

    assert sys.getswitchinterval() <= GIL_SWITCH_S < 0.005


def test_six_raw_calls_from_one_address_hold_two_places(app_url, monkeypatch):
    monkeypatch.delenv("SPECVIZ_TRUSTED_PROXIES", raising=False)
    monkeypatch.delenv("SPACE_ID", raising=False)
    spoofed = [{"X-Forwarded-For": f"10.0.0.{i}"} for i in range(6)]  # with no trusted proxy: nobody's word
    outcomes = six_at_once(app_url, spoofed)
    assert sorted(event for event, _ in outcomes) == ["complete"] * 2 + ["error"] * 4, outcomes
    assert all(REFUSED in line and "\\n" not in line for event, line in outcomes if event == "error")


def test_six_visitors_behind_a_trusted_proxy_each_get_their_places(app_url, monkeypatch):
    monkeypatch.setenv("SPECVIZ_TRUSTED_PROXIES", "1")  # loopback plays the proxy
    outcomes = six_at_once(app_url, [{"X-Forwarded-For": f"10.0.0.{i}"} for i in range(6)])
    assert [event for event, _ in outcomes] == ["complete"] * 6, outcomes


def test_gradio_client_sends_its_headers_on_every_request():
    """What the load tool relies on to race honest visitors from loopback behind a 'proxy':
    Client(headers=...) sends them on the config, the upload, the queue join and its event stream."""
    from gradio_client import Client, handle_file

    seen: list[tuple[str, str | None]] = []

    class Spy:  # a middleware on a real gradio app: each request's path and X-Forwarded-For
        def __init__(self, app):
            self.app = app

        async def __call__(self, scope, receive, send):
            if scope["type"] == "http":
                forwarded = dict(scope["headers"]).get(b"x-forwarded-for")
                seen.append((scope["path"], forwarded.decode() if forwarded else None))
            await self.app(scope, receive, send)

    def count(text: str):
        yield from range(len(text))

    def size(file: str) -> int:
        return len(Path(file).read_bytes())

    from starlette.middleware import Middleware

    with gr.Blocks() as demo:
        box, number, upload = gr.Textbox(), gr.Number(), gr.File()
        box.submit(count, box, number, api_name="count")
        upload.upload(size, upload, number, api_name="size")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    demo.queue().launch(
        server_name="127.0.0.1",
        server_port=port,
        prevent_thread_lock=True,
        quiet=True,
        app_kwargs={"middleware": [Middleware(Spy)]},
    )
    try:
        del seen[:]  # gradio's own requests at launch
        client = Client(f"http://127.0.0.1:{port}/", headers={"X-Forwarded-For": "10.0.0.3"}, verbose=False)
        assert client.predict("abc", api_name="/count") == 2
        assert client.predict(handle_file(__file__), api_name="/size") > 0  # any small file: this module
        client.close()
    finally:
        demo.close()
    paths = {path for path, _ in seen}
    assert {"/gradio_api/queue/join", "/gradio_api/queue/data", "/gradio_api/upload"} <= paths, paths
    assert all(forwarded == "10.0.0.3" for path, forwarded in seen if path != "/gradio_api/startup-events"), seen
