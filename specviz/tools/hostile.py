"""The load tool's hostile client, third round (issue 53): what the probe of the landed app tried,
so the next probe is a command (`python -m specviz.bench load --hostile N`, `specviz.tools.load`).

Each round, from addresses of its own (the app runs behind one trusted proxy in the load tool, and
a client says which visitor it is as a proxy would): saved races as large as the loader takes, and
some past what a race here can hold, each loaded while another visitor's short race is timed; saved
races carrying token ids past the vocabulary, a 15 MB prompt, a time of 1e308 or HTML in a label;
six raw `POST /gradio_api/call/race` at once (each a new gradio session) while another visitor's
short race is timed; empty uploads, two files in one request, and a flood of 8-byte uploads from
one address; the tree tabs given a 1 MB and a 3,000-token prompt; and values of the wrong type
(a pair name of 5 or null, a prompt of 123, a list or a dict, 16.7 new tokens, a seed of 1.5, a
checkbox of 'yes', a methods list of null, too few values, an unknown endpoint, a server path).
Every row says what came back and whether it is what a safe host answers.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path
from typing import Any

from specviz.errors import SpecvizError
from specviz.methods import BASELINE
from specviz.tools.clients import address, client, probe, race_args

log = logging.getLogger(__name__)
HOSTILE = 66  # the address block of the hostile client (`specviz.tools.load.address`)
OTHER = 67  # the block of the other visitor whose short races the round times
FLOOD = 150  # 8-byte uploads one address sends in a round (the app takes AppLimits.uploads_per_address)
TINY_MB = 0.05  # the small saved race the crafted ones are made from


def raw_call(url: str, api: str, data: list, visitor: str) -> Any:
    """One raw call (no gradio_client: a new gradio session, as curl makes) from `visitor`'s address:
    what it returned, or a SpecvizError with the app's refusal."""
    import httpx

    headers = {"X-Forwarded-For": visitor}
    posted = httpx.post(f"{url}gradio_api/call/{api}", json={"data": data}, headers=headers, timeout=60)
    if posted.status_code != 200:
        raise SpecvizError(f"HTTP {posted.status_code}: {posted.text[:200]}")
    stream = httpx.get(f"{url}gradio_api/call/{api}/{posted.json()['event_id']}", headers=headers, timeout=600)
    event, _, rest = stream.text.strip().rpartition("event: ")[2].partition("\n")
    body = json.loads(rest.removeprefix("data: ").strip() or "null")
    if event != "complete":
        raise SpecvizError(str(body.get("error") if isinstance(body, dict) else body))
    return body


def uploads(url: str, files: list[tuple[str, bytes]], visitor: str) -> str:
    """POST `files` to gradio's upload route in one request from `visitor`; a refusal raises with its line."""
    import httpx

    parts = [("files", f) for f in files]
    answer = httpx.post(f"{url}gradio_api/upload", files=parts, headers={"X-Forwarded-For": visitor}, timeout=120)
    if answer.status_code != 200:
        raise SpecvizError(f"HTTP {answer.status_code}: {answer.text[:200]}")
    return answer.text


def streamed_load(url: str, path: Path, visitor: str) -> str:
    """A saved race uploaded and loaded by raw HTTP from `visitor`'s address, its answer streamed
    and counted, not parsed (parsing tens of MB in this process would slow the short race timed
    beside it, in the same process): 'N MB to the page', or a SpecvizError with the refusal."""
    import httpx

    headers = {"X-Forwarded-For": visitor}
    uploaded = uploads(url, [(path.name, path.read_bytes())], visitor)
    entry = {"path": json.loads(uploaded)[0], "meta": {"_type": "gradio.FileData"}}
    posted = httpx.post(f"{url}gradio_api/call/load_race", json={"data": [entry]}, headers=headers, timeout=60)
    size, tail, events = 0, b"", []
    with httpx.stream(
        "GET", f"{url}gradio_api/call/load_race/{posted.json()['event_id']}", headers=headers, timeout=600
    ) as answer:
        for chunk in answer.iter_bytes():
            seen = tail + chunk  # an event's name may straddle two chunks
            events += [w for w in (b"event: complete", b"event: error") if w in seen]
            size, tail = size + len(chunk), seen[-4096:]
    if b"event: complete" not in events:
        raise SpecvizError(tail.decode(errors="replace").rpartition("data: ")[2].strip()[:300])
    return f"{size / 2**20:.1f} MB to the page"


def crafted_races(folder: Path, limits: Any) -> dict[str, Path]:
    """The round's saved races: 16 MB ones (one run of one-token records, past what a race here
    holds, and the heaviest race the app's `limits` let a file be: specviz.tools.hostile_races), and
    small ones carrying a bad value or HTML in a label."""
    from specviz.tools.hostile_races import big_race

    folder.mkdir(parents=True, exist_ok=True)
    files = {
        "16 MB, one run of one-token records": big_race(folder / "big-ar.json", BASELINE, 16.0),
        "16 MB, the heaviest race within the app's limits": big_race(
            folder / "big-vanilla.json", "vanilla", 16.0, limits=limits
        ),
    }
    small = json.loads(big_race(folder / "small.json", "vanilla", TINY_MB, most_records=8).read_text())

    def variant(name: str, change: Any) -> None:
        data = json.loads(json.dumps(small))
        change(data)
        files[name] = folder / f"{name.replace(' ', '-').replace(',', '')[:40]}.json"
        files[name].write_text(json.dumps(data))

    variant("token id 99,999", lambda d: d["runs"][0]["records"][0]["emitted"].__setitem__(0, 99_999))
    variant("token id 10^15", lambda d: d["prompt_ids"].__setitem__(0, 10**15))
    variant("a 15 MB prompt", lambda d: d.__setitem__("prompt", "x" * (15 * 2**20)))
    variant("t_end 1e308", lambda d: d["runs"][0]["records"][-1].__setitem__("t_end", 1e308))
    variant("HTML in a label", lambda d: d["runs"][0].__setitem__("label", "<img src=x onerror=alert(4)>"))
    return files


Timed = tuple[float, float]  # a race's call in seconds, and its run's on the models (without its wait in the line)


def timed_beside(url: str, pair: str, other: int, work: Any) -> tuple[Any, Timed, Timed]:
    """(what `work()` returned, another visitor's short race alone, the same race while `work` runs):
    how much `work` delays the models' line, each race timed as (its call's seconds, its run's
    seconds on the models: `run_s`)."""
    short = client(url, other, OTHER)

    def race() -> Timed:
        start = time.perf_counter()
        outputs = short.predict(*race_args(pair, [BASELINE], 8, 0), api_name="/race")
        return time.perf_counter() - start, run_s(outputs)

    alone = race()
    outcome: list[Any] = []
    worker = threading.Thread(target=lambda: outcome.append(work()))
    worker.start()
    time.sleep(0.2)  # the work has started
    beside = race()
    worker.join()
    short.close()
    return outcome[0], alone, beside


def run_s(outputs: Any) -> float:
    """A finished race's time on the models: its summary table's 'wall (s)', summed over its methods
    (the call's time less its wait in the line behind other visitors' races)."""
    table = next(o for o in outputs if isinstance(o, dict) and "wall (s)" in o.get("headers", []))
    column = table["headers"].index("wall (s)")
    return float(sum(row[column] for row in table["data"]))


def _outcome(work: Any) -> Any:
    try:
        return work()
    except Exception as e:  # a refusal or a failure: the row reports it
        log.debug("a hostile call ended in %s", type(e).__name__, exc_info=e)
        return e


def saved_race_rows(url: str, cfg: Any, files: dict[str, Path], r: int) -> list[dict[str, Any]]:
    """Each crafted saved race loaded through /load_race; the 16 MB ones beside a timed short race."""
    from gradio_client import handle_file

    page = client(url, r, HOSTILE)
    load = lambda path: page.predict(handle_file(str(path)), api_name="/load_race")  # noqa: E731
    rows, visitor = [], address(400 + r, HOSTILE)
    for name, path in files.items():
        if name.startswith("16 MB"):  # loaded or refused in one line within 10 s, another's race held up < 2 s
            row, alone, beside = timed_beside(
                url,
                cfg.pair,
                r,
                lambda name=name, path=path: probe(
                    f"saved race: {name}", "any", lambda: streamed_load(url, path, visitor)
                ),
            )
            row.update(beside_figures(alone, beside))
            # held up on the models: beside honest visitors the call's time is mostly its wait in their line.
            # A speed goal, reported (load's `hostile_missed_goals`), not a fault: `ok` stays the answer's
            row["within_goal"] = row["seconds"] <= 10 and beside[1] - alone[1] <= 2
        elif name == "HTML in a label":  # loaded, the label shown as text
            row = probe(
                f"saved race: {name}", "done", lambda path=path: "escaped" if _escaped(load(path)) else "AS HTML"
            )
            row["ok"] = row["ok"] and row["message"] == "escaped"
        else:
            row = probe(f"saved race: {name}", "refused", lambda path=path: load(path))
        rows.append(row)
    page.close()
    return rows


def _escaped(outputs: Any) -> bool:
    """Whether a loaded race's page shows the label's HTML as text, never as an element: no HTML or
    Markdown output (a text) carries it unescaped (a table's cells and a dropdown's choices are shown
    as text by gradio, so they carry it as it is; tests/test_app_browser.py counts the elements)."""
    texts = [o for o in outputs if isinstance(o, str)]
    return not any("<img src=x" in t for t in texts) and any("&lt;img src=x" in t for t in texts)


def six_at_once_row(url: str, cfg: Any, r: int) -> dict[str, Any]:
    """Six raw races at once from one address (six gradio sessions), while another visitor's short
    race is timed: the address's places served at once, the rest refused in one line."""
    visitor = address(r, HOSTILE)
    data = list(race_args(cfg.pair, [BASELINE], 32, 0))
    answers: list[Any] = []

    def six() -> list[Any]:
        threads = [
            threading.Thread(target=lambda: answers.append(_outcome(lambda: raw_call(url, "race", data, visitor))))
            for _ in range(6)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return answers

    _, alone, beside = timed_beside(url, cfg.pair, 100 + r, six)
    served = len(answers) - len(refused := [a for a in answers if isinstance(a, Exception)])
    messages = [str(a) for a in refused]
    return {
        "probe": "six raw races at once from one address",
        "expected": "the address's places served at once, the rest refused in one line",
        "outcome": f"{served} served, {len(refused)} refused",
        # a quiet app serves two and refuses four; beside other visitors a call may wait in gradio's queue
        # until this address's first two are done, then take a free place, as an address's share allows
        # (six overlapping calls on the old, per-session share were all served)
        "ok": bool(refused) and all("\n" not in m and "This is a bug" not in m for m in messages),
        "seconds": round(beside[0], 2),
        **beside_figures(alone, beside),
        "message": messages[0] if messages else "",
    }


def beside_figures(alone: Timed, beside: Timed) -> dict[str, float]:
    """A row's figures of the short race timed alone and beside its probe (seconds)."""
    return {
        "short_race_alone_s": round(alone[0], 2),
        "short_race_beside_s": round(beside[0], 2),
        "short_run_alone_s": round(alone[1], 2),
        "short_run_beside_s": round(beside[1], 2),
    }


def upload_rows(url: str, r: int) -> list[dict[str, Any]]:
    """An empty upload, two files in one request, and FLOOD 8-byte uploads from one address."""
    visitor = address(200 + r, HOSTILE)
    rows = [
        probe("an empty upload", "refused", lambda: uploads(url, [("x.json", b"")], visitor)),
        probe(
            "two files in one upload", "refused", lambda: uploads(url, [("a.json", b"{}"), ("b.json", b"{}")], visitor)
        ),
    ]
    taken = refused = 0
    start = time.perf_counter()
    message = ""
    for _ in range(FLOOD):
        try:
            uploads(url, [("x.json", b"12345678")], visitor)
            taken += 1
        except SpecvizError as e:
            refused, message = refused + 1, str(e)
    rows.append(
        {
            "probe": f"{FLOOD} uploads of 8 bytes from one address",
            "expected": "taken up to the address's bound, the rest refused in one line",
            "outcome": f"{taken} taken, {refused} refused",
            "ok": refused > 0 and "\n" not in message,
            "seconds": round(time.perf_counter() - start, 2),
            "message": message[:300],
        }
    )
    return rows


def typed_rows(url: str, cfg: Any, r: int) -> list[dict[str, Any]]:
    """Values of the wrong type or past a limit, through gradio_client and raw calls; the tree tabs'
    prompt limits; an endpoint the app lacks."""
    page, visitor = client(url, 300 + r, HOSTILE), address(300 + r, HOSTILE)
    rows = [*_race_rows(page, cfg.pair), *_tab_rows(page, cfg.pair), *_edge_rows(url, cfg.pair, visitor)]
    page.close()
    return rows


def _race_rows(page: Any, pair: str) -> list[dict[str, Any]]:
    """/race with one value changed from a good race's (its arguments in the API's order)."""
    good = {"pair": pair, "prompt": "hi", "methods": [BASELINE], "options": {}, "max_new_tokens": 8}
    good |= {"temperature": 0.0, "top_p": 1.0, "seed": 0}
    race = lambda **change: page.predict(*{**good, **change}.values(), api_name="/race")[0]  # noqa: E731
    lookup = {"prompt_lookup.min_ngram": 5, "prompt_lookup.max_ngram": 2}
    return [
        probe("race of pair 5", "refused", lambda: race(pair=5)),
        probe("race of pair null", "refused", lambda: race(pair=None)),
        probe("race with prompt 123", "refused", lambda: race(prompt=123)),
        probe("race with a list prompt", "refused", lambda: race(prompt=["a"])),
        probe("race with a dict prompt", "refused", lambda: race(prompt={"a": 1})),
        probe("race of 16.7 new tokens", "refused", lambda: race(max_new_tokens=16.7)),
        probe("race with seed 1.5", "refused", lambda: race(seed=1.5)),
        probe("race with methods null", "refused", lambda: race(methods=None)),
        probe(
            "speculation length 0",
            "refused",
            lambda: race(methods=["vanilla"], options={"vanilla.speculation_length": 0}),
            says="vanilla.speculation_length must be from 1 to 16",
        ),
        probe(
            "prompt lookup with min_ngram 5 > max_ngram 2",
            "refused",
            lambda: race(methods=["prompt_lookup"], options=lookup),
        ),
    ]


def _tab_rows(page: Any, pair: str) -> list[dict[str, Any]]:
    """The other tabs' endpoints: wrong types, and prompts past the limits on the tree tabs."""
    big, long = "x " * 500_000, "word " * 3000
    sssd = lambda prompt: page.predict(pair, prompt, 16, 4, "both", api_name="/on_run")[0]  # noqa: E731
    streaming = lambda prompt: page.predict(pair, prompt, 16, 4, 4, 0.05, api_name="/on_run_1")[0]  # noqa: E731
    roofline = ("H100 SXM", "Llama-2-7B", ["1", "4"], 256, "HF eager", pair)
    return [
        probe(
            "DISCO with 12.5 new tokens",
            "refused",
            lambda: page.predict(pair, "hi", True, 0.5, 8, 12.5, 1, api_name="/disco"),
        ),
        probe(
            "PEARL with threads 'yes'", "refused", lambda: page.predict(pair, "hi", 4, "yes", 8, 1, api_name="/pearl")
        ),
        probe(
            "roofline with batch sizes as the schema's text",
            "done",
            lambda: page.predict(*roofline, api_name="/on_roofline")[1],
        ),
        probe("SSSD tree, a 1 MB prompt", "done", lambda: sssd(big), says="a prompt here is at most"),
        probe("SSSD tree, a 3,000-token prompt", "done", lambda: sssd(long), says="a prompt here takes at most"),
        probe("Streaming tree, a 1 MB prompt", "done", lambda: streaming(big), says="a prompt here is at most"),
        probe(
            "Streaming tree, a 3,000-token prompt", "done", lambda: streaming(long), says="a prompt here takes at most"
        ),
    ]


def _edge_rows(url: str, pair: str, visitor: str) -> list[dict[str, Any]]:
    """Raw calls the API's edge refuses: too few values, a server path, an endpoint the app lacks."""
    raw = lambda api, data: raw_call(url, api, data, visitor)  # noqa: E731
    return [
        probe("raw race with one value", "refused", lambda: raw("race", [pair]), says="takes 10 values"),
        probe(
            "saved race named by a server path",
            "refused",
            lambda: raw("load_race", [{"path": "/etc/hosts", "meta": {"_type": "gradio.FileData"}}]),
            says="must be uploaded",
        ),
        probe("an endpoint the app lacks", "refused", lambda: raw("nosuch", []), says="HTTP 404"),
    ]


def third_round(url: str, cfg: Any, files: dict[str, Path], r: int) -> list[dict[str, Any]]:
    """One round of what issue 53's probe tried; one row per probe."""
    return [
        *typed_rows(url, cfg, r),
        *saved_race_rows(url, cfg, files, r),
        six_at_once_row(url, cfg, r),
        *upload_rows(url, r),
    ]
