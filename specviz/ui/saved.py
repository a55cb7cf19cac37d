"""A race saved to a file and loaded back: the Race tab's JSON download is also what it uploads.

The file holds everything the board, the plots and the replay draw from (records, and each
token's text as the race showed it), so a race recorded elsewhere (on a GPU, with a model this
machine does not have) is shown and replayed here without loading a model. Files come from
strangers on a public page, and a bad file is one SpecvizError: the file's size is bounded, so are
its nesting and numbers' digits where the parser meets them, and so is the time its checks may
take (the load runs beside timed races, not on the models' line), and every value kept is checked
against its type (so none nests deeper, or is longer, than a record's fields), records by
`IterationRecord.from_dict`, against the run's lengths and the extra fields their method declares.
"""

from __future__ import annotations

import gzip
import json
import math
import time
from dataclasses import asdict, fields, replace
from pathlib import Path
from typing import Any

from specviz.errors import SpecvizError
from specviz.extras import INT64_MAX
from specviz.methods import get_method
from specviz.records import IterationRecord, RunBounds
from specviz.ui.panels import MethodRun, Race, resolved_options, set_options
from specviz.ui.racing import app_options
from specviz.ui.tokens import TokenSpan

FORMAT = "specviz-race"
VERSION = 1
# Above a 13-method, 1024-token race (~10 MB on the default pair; 12 methods of 512 tokens on the tiny
# pair: 3.5 MB, checked in 0.6 s of CPU here). 50 MB let a valid file cost 70 s of CPU and +860 MB (issue 41).
MAX_FILE_BYTES = 16 * 2**20
CHECK_BUDGET_S = 10.0  # wall seconds the records' checks may take; a file that needs longer is refused
STATUSES = ("done", "stopped", "skipped", "error")  # how a finished race's runs can end
KINDS = ("accepted", "target", "rejected")


def race_to_dict(race: Race) -> dict[str, Any]:
    """The saved form of a race (plain JSON values)."""
    return {
        "format": FORMAT,
        "version": VERSION,
        "pair": race.pair,
        "prompt": race.prompt,
        "prompt_ids": list(race.prompt_ids),
        "max_new_tokens": race.max_new_tokens,
        "options": race.options,
        "runs": [
            {
                "name": r.name,
                "label": r.label,
                "paper": r.paper,
                "status": r.status,
                "message": r.message,
                "note": r.note,
                "options": resolved_options(r.options, r.name),  # every option it ran with, defaults included
                "records": [x.to_dict() for x in r.records],
                "spans": [asdict(s) for s in r.spans],
                "probe_ms": r.probe_ms,
                "flags": list(r.flags),
            }
            for r in race.runs
        ],
    }


def read_bounded(path: Path) -> str:
    """A saved race's text, plain or gzipped (the shipped races are), at most MAX_FILE_BYTES once unpacked."""
    with path.open("rb") as f:
        gzipped = f.read(2) == b"\x1f\x8b"
    if not gzipped:
        return path.read_text(encoding="utf-8")
    try:
        with gzip.open(path, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except (OSError, EOFError) as e:  # a broken archive
        raise SpecvizError(f"not a saved race: the gzip file cannot be read ({e})") from None
    if len(data) > MAX_FILE_BYTES:
        raise SpecvizError(
            f"the file unpacks to more than {MAX_FILE_BYTES // 2**20} MB; a saved race here is at most that"
        )
    return data.decode("utf-8")


def load_race(path: str | Path, methods: tuple[str, ...], most_runs: int, budget_s: float = CHECK_BUDGET_S) -> Race:
    """A saved race from a file; `methods`: the registered names a run may have; `budget_s`: the
    seconds its checks may take."""
    deadline = time.monotonic() + budget_s
    path = Path(path)
    if path.stat().st_size > MAX_FILE_BYTES:
        raise SpecvizError(
            f"the file is {path.stat().st_size / 2**20:.0f} MB; a saved race here is at most "
            f"{MAX_FILE_BYTES // 2**20} MB"
        )
    try:
        data = json.loads(read_bounded(path))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SpecvizError(f"not a saved race: the file is not JSON ({e})") from None
    except RecursionError:  # lists or objects nested deeper than Python's parser goes (a saved race nests 8 deep)
        raise SpecvizError("not a saved race: nested too deep") from None
    except ValueError:  # a whole number longer than Python's digit limit (4300 digits; an int64 has at most 19)
        raise SpecvizError("not a saved race: it holds a number thousands of digits long") from None
    return race_from_dict(data, methods, most_runs, deadline)


def race_from_dict(data: Any, methods: tuple[str, ...], most_runs: int, deadline: float = math.inf) -> Race:
    """Inverse of `race_to_dict`, checking every field, by `deadline` (time.monotonic) at the latest."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise SpecvizError(
            "not a saved race: download one with the Race tab's 'Download the records' (race_records.json)"
        )
    if data.get("version") != VERSION:
        raise SpecvizError(
            f"a saved race of format version {data.get('version')!r}; this specviz reads version {VERSION}"
        )
    runs = _field(data, "runs", list)
    if not 1 <= len(runs) <= most_runs:
        raise SpecvizError(f"the saved race has {len(runs)} runs; a race here has 1 to {most_runs}")
    prompt_ids = _ints(_field(data, "prompt_ids", list), "prompt_ids")
    max_new_tokens = _field(data, "max_new_tokens", int)
    if not 1 <= max_new_tokens <= INT64_MAX:
        raise SpecvizError(
            "the saved race's 'max_new_tokens' must be a whole number from 1 to 2**63 - 1, "
            f"not {str(max_new_tokens)[:20]}"
        )
    bounds = RunBounds(prompt_tokens=len(prompt_ids), max_new_tokens=max_new_tokens)
    race = Race(
        pair=_field(data, "pair", str),
        prompt=_field(data, "prompt", str),
        prompt_ids=prompt_ids,
        max_new_tokens=max_new_tokens,
        options=_field(data, "options", dict),
        runs=[_run(r, methods, bounds, deadline) for r in runs],
    )
    if not all(isinstance(k, str) and _is_real(v) for k, v in race.options.items()):
        raise SpecvizError(
            "the saved race's 'options' must map names to numbers (speculation length, temperature, ...)"
        )
    names = [r.name for r in race.runs]
    if len(set(names)) != len(names):
        raise SpecvizError("the saved race lists a method twice")
    return race


def _run(data: Any, methods: tuple[str, ...], bounds: RunBounds, deadline: float) -> MethodRun:
    if not isinstance(data, dict):
        raise SpecvizError("a run of the saved race is not an object")
    name = _field(data, "name", str)
    if name not in methods:
        raise SpecvizError(f"the saved race has a method this specviz does not know: {name[:40]!r}")
    status = _field(data, "status", str)
    if status not in STATUSES:
        raise SpecvizError(f"run '{name}' has status {status[:20]!r}; a saved race's runs are {', '.join(STATUSES)}")
    records = _field(data, "records", list)
    bounds = replace(bounds, method=name, records=len(records), families=get_method(name).extra_families())
    return MethodRun(
        name=name,
        label=_field(data, "label", str),
        paper=_field(data, "paper", str),
        status=status,
        message=_field(data, "message", str),
        note=_field(data, "note", str),
        options=_options(data.get("options", {}), name),
        records=[_record(r, bounds, f"record {i} of '{name}'", deadline) for i, r in enumerate(records)],
        spans=[_span(s, name, len(records)) for s in _field(data, "spans", list)],
        probe_ms=_probe_ms(data.get("probe_ms"), name),
        flags=_flags(data.get("flags", []), name),
    )


def _probe_ms(value: Any, method: str) -> float | None:
    """The target alone's step time measured before the run (absent in races saved before it was kept)."""
    if value is None:
        return None
    if not (_is_real(value) and value >= 0):
        raise SpecvizError(f"run '{method}': 'probe_ms' must be a number of milliseconds, not negative, or null")
    return float(value)


def _flags(value: Any, method: str) -> list[str]:
    """Why a run's timing is not the method's own (specviz.ui.verdict): a few lines of text."""
    if not (isinstance(value, list) and len(value) <= 16 and all(isinstance(f, str) and len(f) <= 500 for f in value)):
        raise SpecvizError(f"run '{method}': 'flags' must be a list of at most 16 lines of text")
    return list(value)


def _record(data: Any, bounds: RunBounds, where: str, deadline: float) -> IterationRecord:
    if time.monotonic() > deadline:
        raise SpecvizError(
            f"the saved race took too long to check (stopped at {where}): a race from this app's "
            "Download loads well within the time allowed"
        )
    return IterationRecord.from_dict(data, bounds, where)


def _options(data: Any, method: str) -> dict[str, Any]:
    """A run's options (absent in races saved before they were kept; all of them, defaults included,
    since they are saved resolved), checked as the race checks a visitor's: a file from a stranger
    names no file path for the step-through to load. The run keeps those set away from the defaults,
    as a race's runs do (a default is the method's own value, not the file's: no check of the app's
    limits applies to it, and confidence's SL_max of 20 is above the limit of 16 on speculation length)."""
    if not (isinstance(data, dict) and all(isinstance(k, str) for k in data)):
        raise SpecvizError(f"run '{method}': 'options' must map option names to values")
    return app_options(method, set_options(data, method))


def _span(data: Any, method: str, records: int) -> TokenSpan:
    where = f"a token of '{method}'"
    if not isinstance(data, dict) or data.get("kind") not in KINDS:
        raise SpecvizError(f"{where} is not an object with a kind ({', '.join(KINDS)})")
    if not (isinstance(data.get("text"), str) and isinstance(data.get("role", ""), str)):
        raise SpecvizError(f"{where}: 'text' and 'role' must be text")
    if not (_is_int(data.get("iteration")) and data["iteration"] < records and _is_int(data.get("token_id"))):
        raise SpecvizError(
            f"{where}: 'iteration' must be one of the run's and 'token_id' a whole number from 0 to 2**63 - 1"
        )
    for flag in ("greedy", "tested"):  # absent in races saved before they were kept: true
        if not isinstance(data.get(flag, True), bool):
            raise SpecvizError(f"{where}: '{flag}' must be true or false")
    if not all(data.get(k) is None or _is_real(data[k]) for k in ("p", "q")):
        raise SpecvizError(f"{where}: 'p' and 'q' must be numbers or null")
    return TokenSpan(**{f.name: data[f.name] for f in fields(TokenSpan) if f.name in data})


def _field(data: dict, key: str, kind: type) -> Any:
    value = data.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise SpecvizError(f"the saved race's '{key}' is missing or not {kind.__name__}")
    return value


def _ints(values: list, where: str) -> list[int]:
    if not all(_is_int(v) for v in values):
        raise SpecvizError(f"{where} must be a list of whole numbers from 0 to 2**63 - 1")
    return values


def _is_int(x: Any) -> bool:
    """A whole number that fits int64, not negative (token ids, counts)."""
    return isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= INT64_MAX


def _is_real(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and abs(x) <= INT64_MAX
