"""A race saved to a file and loaded back: the Race tab's JSON download is also what it uploads.

The file holds everything the board, the plots and the replay draw from (records, and each
token's text as the race showed it), so a race recorded elsewhere (on a GPU, with a model this
machine does not have) is shown and replayed here without loading a model. Files come from
strangers on a public page, and a bad file is one SpecvizError: the file's size is bounded, so are
its nesting and numbers' digits where the parser meets them, and so is the time its checks may
take (the load runs beside timed races, not on the models' line). The work a file asks for is
bounded before any record is checked: it holds no more than a race here can (the app's limits,
`AppLimits`: its prompt, its new tokens, a run's iterations and tokens), and everything drawn from
it afterwards is linear in its size. Every value kept is checked against its type (so none nests
deeper, or is longer, than a record's fields), records by `IterationRecord.from_dict`, against the
run's lengths, the pair's vocabulary and the extra fields their method declares, and a run's
records in order on its clock. Its texts (labels, messages, token texts) are text: every page that
shows them escapes them.
"""

from __future__ import annotations

import gzip
import json
import math
import sys
import time
from collections.abc import Mapping
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from specviz.errors import SpecvizError
from specviz.extras import INT64_MAX, MOST_RUN_S
from specviz.limits import MAX_SEED, check_count, check_number, check_temperature
from specviz.methods import get_method
from specviz.records import IterationRecord, RunBounds
from specviz.serving.limits import AppLimits, check_prompt_text, check_prompt_tokens
from specviz.serving.race import MethodRun, Race, resolved_options, set_options
from specviz.serving.racing import DEFAULT_LIMITS, app_options
from specviz.spans import TokenSpan

FORMAT = "specviz-race"
VERSION = 1
# Above a 13-method, 1024-token race (~10 MB on the default pair; 12 methods of 512 tokens on the tiny
# pair: 3.5 MB, checked in 0.6 s of CPU here). 50 MB let a valid file cost 70 s of CPU and +860 MB (issue 41).
MAX_FILE_BYTES = 16 * 2**20
CHECK_BUDGET_S = 10.0  # wall seconds the records' checks may take; a file that needs longer is refused
STATUSES = ("done", "stopped", "skipped", "error")  # how a finished race's runs can end
KINDS = ("accepted", "target", "rejected")
SPAN_FIELDS = tuple(f.name for f in fields(TokenSpan))
# characters of the pair's name and of a run's label, paper, message or note: a name, a line, a paragraph (each is
# drawn several times a load: a label of megabytes made the board, the verdict and every plot that large)
MOST_TEXT = 2000
MOST_OPTIONS = 16  # the race's sampling settings (temperature, top_p, seed, max_new_tokens)
# The vocabulary of each pair this server knows by name, without loading a model (a saved race's token ids are
# below it): the tiny pairs' byte-level BPE (specviz.models.tiny.TINY_VOCAB), SmolLM2's (the default pair and its
# presets), Qwen2.5's and GPT-2's (the targets' configs: specviz.cost.shapes). A pair named by its hub ids
# ("TARGET,DRAFT") is not known until it is loaded, which a file must not cause: its ids are bounded by the largest
# vocabulary here (so a race of a hub pair with a larger vocabulary than Qwen2.5's does not load).
VOCABULARIES = {
    **dict.fromkeys(("tiny-random", "tiny-self", "tiny-perturbed", "tiny-reduced"), 512),
    **dict.fromkeys(("default", "smollm2-1.7b/135m", "smollm2-1.7b/360m", "smollm2-360m/135m"), 49152),
    "qwen2.5-1.5b/0.5b": 151936,
    "qwen2.5-7b/0.5b": 152064,
    "gpt2-large/gpt2": 50257,
}


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
                "spans": [{name: getattr(s, name) for name in SPAN_FIELDS} for s in r.spans],  # asdict, quicker
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


def load_race(
    path: str | Path,
    methods: tuple[str, ...],
    most_runs: int,
    budget_s: float = CHECK_BUDGET_S,
    limits: AppLimits = DEFAULT_LIMITS,
) -> Race:
    """A saved race from a file; `methods`: the registered names a run may have; `budget_s`: the
    seconds its checks may take; `limits`: the app's, which bound what the file may hold."""
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
    return race_from_dict(data, methods, most_runs, deadline, limits)


def race_from_dict(
    data: Any,
    methods: tuple[str, ...],
    most_runs: int,
    deadline: float = math.inf,
    limits: AppLimits = DEFAULT_LIMITS,
) -> Race:
    """Inverse of `race_to_dict`, checking every field, by `deadline` (time.monotonic) at the latest,
    and what the file holds against the app's `limits` before any record."""
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
    pair = _text(data, "pair", "the saved race")
    vocab_size = VOCABULARIES.get(pair, max(VOCABULARIES.values()))
    prompt = _field(data, "prompt", str)
    prompt_ids = _ints(_field(data, "prompt_ids", list), "prompt_ids")
    try:
        check_prompt_text(prompt, limits)
        check_prompt_tokens(prompt_ids, limits)
    except SpecvizError as e:
        raise SpecvizError(f"the saved race's prompt does not fit this app's limits: {e}") from None
    if any(t >= vocab_size for t in prompt_ids):
        raise SpecvizError(f"the saved race's 'prompt_ids' must be below {_vocabulary(pair, vocab_size)}")
    max_new_tokens = _field(data, "max_new_tokens", int)
    if not 1 <= max_new_tokens <= limits.max_new_tokens:
        raise SpecvizError(
            f"the saved race's 'max_new_tokens' must be a whole number from 1 to {limits.max_new_tokens} "
            f"(the most new tokens a race here generates), not {str(max_new_tokens)[:20]}"
        )
    _check_work(runs, max_new_tokens, limits)
    bounds = RunBounds(prompt_tokens=len(prompt_ids), max_new_tokens=max_new_tokens, vocab_size=vocab_size)
    race = Race(
        pair=pair,
        prompt=prompt,
        prompt_ids=tuple(prompt_ids),
        max_new_tokens=max_new_tokens,
        options=_field(data, "options", dict),
        runs=tuple(_run(r, methods, bounds, deadline) for r in runs),
    )
    if not (
        len(race.options) <= MOST_OPTIONS and all(isinstance(k, str) and _is_real(v) for k, v in race.options.items())
    ):
        raise SpecvizError(
            "the saved race's 'options' must map names to numbers (speculation length, temperature, ...)"
        )
    _sampling(race.options)
    names = [r.name for r in race.runs]
    if len(set(names)) != len(names):
        raise SpecvizError("the saved race lists a method twice")
    return race


def _sampling(options: Mapping[str, Any]) -> None:
    """The race's sampling settings within the ranges a race here takes (the step-through samples with them)."""
    try:
        check_temperature(options.get("temperature", 0.0))
        check_number("top_p", options.get("top_p", 1.0), 0.0, 1.0)
        check_count("seed", options.get("seed", 0), most=MAX_SEED, least=0)
    except SpecvizError as e:
        raise SpecvizError(f"the saved race's 'options': {e}") from None


def _vocabulary(pair: str, vocab_size: int) -> str:
    """The bound on a saved race's token ids, in words."""
    if pair in VOCABULARIES:
        return f"the vocabulary of the pair '{pair}' ({vocab_size} tokens)"
    return f"{vocab_size}, the largest vocabulary of the pairs this server knows (the pair '{pair[:80]}' is not one)"


def _check_work(runs: list, max_new_tokens: int, limits: AppLimits) -> None:
    """Refuse, before any record is checked, a file that holds more than a race here can: a run of at most
    `max_new_tokens` new tokens has at most that many iterations (each writes a token or more: `Decoding.commit`),
    and its token spans (each token written and each rejected draft) are at most `max_new_tokens` times one more
    than the drafts an iteration may hold (γ, or a tree's nodes, within the app's limits)."""
    most_spans = max_new_tokens * (1 + max(limits.speculation_length, limits.tree_nodes))
    for i, run in enumerate(runs):
        if not isinstance(run, dict):
            continue  # refused as it is checked
        name = str(run.get("name"))[:40]
        records, spans = run.get("records"), run.get("spans")
        if isinstance(records, list) and len(records) > max_new_tokens:
            raise SpecvizError(
                f"run {i} ('{name}') has {len(records)} iterations; a run of at most {max_new_tokens} new tokens "
                "has at most that many (each writes a token or more)"
            )
        if isinstance(spans, list) and len(spans) > most_spans:
            raise SpecvizError(
                f"run {i} ('{name}') has {len(spans)} tokens to show; a run of {max_new_tokens} new tokens here "
                f"shows at most {most_spans} (each new token, and at most "
                f"{max(limits.speculation_length, limits.tree_nodes)} rejected drafts an iteration)"
            )


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
    texts = {key: _text(data, key, f"run '{name}'") for key in ("label", "paper", "message", "note")}
    options = _options(data.get("options", {}), name)
    checked = [_record(r, bounds, f"record {i} of '{name}'", deadline) for i, r in enumerate(records)]
    _in_order(checked, name)
    return MethodRun(
        name=name,
        label=texts["label"],
        paper=texts["paper"],
        status=status,
        message=texts["message"],
        note=texts["note"],
        options=options,
        records=tuple(checked),
        spans=tuple(_span(s, name, len(records), bounds.vocab_size) for s in _field(data, "spans", list)),
        probe_ms=_probe_ms(data.get("probe_ms"), name),
        flags=tuple(_flags(data.get("flags", []), name)),
    )


def _in_order(records: list[IterationRecord], method: str) -> None:
    """A run's records one after another, as its method wrote them: record i is iteration i, and it starts
    once the one before it ended (on the run's clock)."""
    for i, r in enumerate(records):
        before = records[i - 1] if i else None
        if r.iteration != i or (before is not None and r.t_start < before.t_end):
            after = f" and 't_start' not before the previous record's 't_end' ({before.t_end})" if before else ""
            raise SpecvizError(
                f"record {i} of '{method}': a run's records follow one another: 'iteration' must be {i}{after}"
            )


def _probe_ms(value: Any, method: str) -> float | None:
    """The target alone's step time measured before the run (absent in races saved before it was kept)."""
    if value is None:
        return None
    if not (_is_real(value) and 0 <= value <= MOST_RUN_S * 1e3):
        raise SpecvizError(
            f"run '{method}': 'probe_ms' must be a number of milliseconds from 0 to a day ({MOST_RUN_S * 1e3:.0f}), "
            "or null"
        )
    return float(value)


def _flags(value: Any, method: str) -> list[str]:
    """Why a run's timing is not the method's own (specviz.serving.timing): a few lines of text."""
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


def _span(data: Any, method: str, records: int, vocab_size: int | None = None) -> TokenSpan:
    where = f"a token of '{method}'"
    if not isinstance(data, dict) or data.get("kind") not in KINDS:
        raise SpecvizError(f"{where} is not an object with a kind ({', '.join(KINDS)})")
    if not (isinstance(data.get("text"), str) and isinstance(data.get("role", ""), str)):
        raise SpecvizError(f"{where}: 'text' and 'role' must be text")
    most = INT64_MAX if vocab_size is None else vocab_size - 1
    if not (_is_int(data.get("iteration")) and data["iteration"] < records and _is_int(data.get("token_id"))):
        raise SpecvizError(
            f"{where}: 'iteration' must be one of the run's and 'token_id' a whole number from 0 to {most}"
        )
    if data["token_id"] > most:
        raise SpecvizError(f"{where}: 'token_id' must be a whole number from 0 to {most} (the pair's vocabulary)")
    for flag in ("greedy", "tested"):  # absent in races saved before they were kept: true
        if not isinstance(data.get(flag, True), bool):
            raise SpecvizError(f"{where}: '{flag}' must be true or false")
    if not all(data.get(k) is None or (_is_real(data[k]) and 0.0 <= data[k] <= 1.0 + 1e-6) for k in ("p", "q")):
        raise SpecvizError(f"{where}: 'p' and 'q' must be probabilities (0 to 1) or null")
    span = {name: data[name] for name in SPAN_FIELDS if name in data}
    for key in ("text", "kind", "role"):  # one object a distinct text: the parser makes one for each occurrence
        if key in span:
            span[key] = sys.intern(span[key])
    return TokenSpan(**span)


def _field(data: dict, key: str, kind: type) -> Any:
    value = data.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise SpecvizError(f"the saved race's '{key}' is missing or not {kind.__name__}")
    return value


def _text(data: dict, key: str, where: str) -> str:
    text = _field(data, key, str)
    if len(text) > MOST_TEXT:
        raise SpecvizError(f"{where}: '{key}' is {len(text)} characters long; it is at most {MOST_TEXT}")
    return text


def _ints(values: list, where: str) -> list[int]:
    if not all(_is_int(v) for v in values):
        raise SpecvizError(f"{where} must be a list of whole numbers from 0 to 2**63 - 1")
    return values


def _is_int(x: Any) -> bool:
    """A whole number that fits int64, not negative (token ids, counts)."""
    return isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= INT64_MAX


def _is_real(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and abs(x) <= INT64_MAX
