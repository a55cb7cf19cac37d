"""A race saved to a file and loaded back: the Race tab's JSON download is also what it uploads.

The file holds everything the board, the plots and the replay draw from (records, and each
token's text as the race showed it), so a race recorded elsewhere (on a GPU, with a model this
machine does not have) is shown and replayed here without loading a model. Files come from
strangers on a public page: every field is checked, and a bad file is one SpecvizError.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from specviz.errors import SpecvizError
from specviz.records import IterationRecord
from specviz.ui.panels import MethodRun, Race
from specviz.ui.racing import app_options
from specviz.ui.tokens import TokenSpan

FORMAT = "specviz-race"
VERSION = 1
MAX_FILE_BYTES = 50 * 2**20  # far above a 13-method, 1024-token race (~10 MB)
STATUSES = ("done", "stopped", "skipped", "error")  # how a finished race's runs can end
KINDS = ("accepted", "target", "rejected")
RECORD_INTS = ("iteration", "position", "speculation_length", "accepted", "draft_forwards", "target_forwards")
RECORD_REALS = ("t_start", "t_end", "draft_ms", "verify_ms")


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
            {"name": r.name, "label": r.label, "paper": r.paper, "status": r.status, "message": r.message, "note": r.note,
             "options": r.options, "records": [x.to_dict() for x in r.records], "spans": [asdict(s) for s in r.spans]}
            for r in race.runs
        ],
    }  # fmt: skip


def load_race(path: str | Path, methods: tuple[str, ...], most_runs: int) -> Race:
    """A saved race from a file; `methods`: the registered names a run may have."""
    path = Path(path)
    if path.stat().st_size > MAX_FILE_BYTES:
        raise SpecvizError(f"the file is {path.stat().st_size / 2**20:.0f} MB; a saved race here is at most {MAX_FILE_BYTES // 2**20} MB")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SpecvizError(f"not a saved race: the file is not JSON ({e})") from None
    return race_from_dict(data, methods, most_runs)


def race_from_dict(data: Any, methods: tuple[str, ...], most_runs: int) -> Race:
    """Inverse of `race_to_dict`, checking every field."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise SpecvizError("not a saved race: download one with the Race tab's 'Download the records' (race_records.json)")
    if data.get("version") != VERSION:
        raise SpecvizError(f"a saved race of format version {data.get('version')!r}; this specviz reads version {VERSION}")
    runs = _field(data, "runs", list)
    if not 1 <= len(runs) <= most_runs:
        raise SpecvizError(f"the saved race has {len(runs)} runs; a race here has 1 to {most_runs}")
    race = Race(
        pair=_field(data, "pair", str),
        prompt=_field(data, "prompt", str),
        prompt_ids=_ints(_field(data, "prompt_ids", list), "prompt_ids"),
        max_new_tokens=_field(data, "max_new_tokens", int),
        options=_field(data, "options", dict),
        runs=[_run(r, methods) for r in runs],
    )
    if not all(isinstance(k, str) and _is_real(v) for k, v in race.options.items()):
        raise SpecvizError("the saved race's 'options' must map names to numbers (speculation length, temperature, ...)")
    names = [r.name for r in race.runs]
    if len(set(names)) != len(names):
        raise SpecvizError("the saved race lists a method twice")
    return race


def _run(data: Any, methods: tuple[str, ...]) -> MethodRun:
    if not isinstance(data, dict):
        raise SpecvizError("a run of the saved race is not an object")
    name = _field(data, "name", str)
    if name not in methods:
        raise SpecvizError(f"the saved race has a method this specviz does not know: {name[:40]!r}")
    status = _field(data, "status", str)
    if status not in STATUSES:
        raise SpecvizError(f"run '{name}' has status {status[:20]!r}; a saved race's runs are {', '.join(STATUSES)}")
    return MethodRun(
        name=name, label=_field(data, "label", str), paper=_field(data, "paper", str), status=status,
        message=_field(data, "message", str), note=_field(data, "note", str), options=_options(data.get("options", {}), name),
        records=[_record(r, name) for r in _field(data, "records", list)],
        spans=[_span(s, name) for s in _field(data, "spans", list)],
    )  # fmt: skip


def _options(data: Any, method: str) -> dict[str, Any]:
    """A run's own options (absent in races saved before they were kept), checked as the race checks
    a visitor's: a file from a stranger names no file path for the step-through to load."""
    if not (isinstance(data, dict) and all(isinstance(k, str) for k in data)):
        raise SpecvizError(f"run '{method}': 'options' must map option names to values")
    return app_options(method, data)


def _record(data: Any, method: str) -> IterationRecord:
    where = f"a record of '{method}'"
    if not isinstance(data, dict):
        raise SpecvizError(f"{where} is not an object")
    for key in RECORD_INTS:
        if not _is_int(data.get(key)) or data[key] < 0:
            raise SpecvizError(f"{where}: '{key}' must be a whole number, not negative")
    for key in RECORD_REALS:
        if not _is_real(data.get(key)):
            raise SpecvizError(f"{where}: '{key}' must be a finite number")
    for key in ("drafted", "emitted"):
        _ints(_field(data, key, list), f"{where}: '{key}'")
    for key in ("p_target", "q_draft"):
        if data.get(key) is not None and not all(_is_real(x) for x in _field(data, key, list)):
            raise SpecvizError(f"{where}: '{key}' must be a list of numbers or null")
    if data.get("oracle_sl") is not None and not isinstance(data["oracle_sl"], int):
        raise SpecvizError(f"{where}: 'oracle_sl' must be a whole number or null")
    extra = data.get("extra", {})
    if not isinstance(extra, dict):
        raise SpecvizError(f"{where}: 'extra' must be an object")
    for key in ("u", "tree_tokens"):  # the extras the page reads (the step-through)
        if key in extra and not (isinstance(extra[key], list) and all(_is_real(x) for x in extra[key])):
            raise SpecvizError(f"{where}: extra '{key}' must be a list of numbers")
    if data.get("method") != method or not 0 <= data["accepted"] <= len(data["drafted"]):
        raise SpecvizError(f"{where} belongs to another method or accepts more tokens than it drafted")
    return IterationRecord.from_dict(data)


def _span(data: Any, method: str) -> TokenSpan:
    where = f"a token of '{method}'"
    if not isinstance(data, dict) or data.get("kind") not in KINDS:
        raise SpecvizError(f"{where} is not an object with a kind ({', '.join(KINDS)})")
    if not (isinstance(data.get("text"), str) and isinstance(data.get("role", ""), str)):
        raise SpecvizError(f"{where}: 'text' and 'role' must be text")
    if not (_is_int(data.get("iteration")) and _is_int(data.get("token_id"))):
        raise SpecvizError(f"{where}: 'iteration' and 'token_id' must be whole numbers")
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
        raise SpecvizError(f"{where} must be a list of whole numbers")
    return values


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_real(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
