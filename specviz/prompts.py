"""The benchmark prompt suites the papers measure on (and Spec-Bench's), shipped in assets/prompts/,
and prompt files of one's own.

Each suite becomes a list of `Prompt`s whose `text` is the user message given to a chat model.
These prompts are for measuring only: never train a draft, classifier or adapter on them.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from specviz.errors import SpecvizError
from specviz.paths import ASSETS

if TYPE_CHECKING:
    import argparse


@dataclass(frozen=True)
class Prompt:
    suite: str  # humaneval | gsm8k | mtbench | mbpp | specbench | translation | a prompt file's name
    id: str  # the suite's own id (task_id, question_id, or line number)
    text: str  # the user message
    category: str = ""  # Spec-Bench's category (one of 13), or a prompt file's `category` field


def _humaneval(r: dict, i: int) -> Prompt:
    text = f"Complete the following Python function.\n\n```python\n{r['prompt']}```"
    return Prompt("humaneval", r["task_id"], text)


def _gsm8k(r: dict, i: int) -> Prompt:
    return Prompt("gsm8k", f"gsm8k/{i}", r["question"])


def _mtbench(r: dict, i: int) -> Prompt:
    return Prompt("mtbench", f"mtbench/{r['question_id']}", r["turns"][0])  # first turn only


def _mbpp(r: dict, i: int) -> Prompt:
    tests = "\n".join(r["test_list"])
    return Prompt("mbpp", f"mbpp/{r['task_id']}", f"{r['text']} Your code should pass these tests:\n\n{tests}")


def _specbench(r: dict, i: int) -> Prompt:
    return Prompt("specbench", f"specbench/{r['question_id']}", r["turns"][0], r["category"])  # first turn only


def _translation(r: dict, i: int) -> Prompt | None:
    """Spec-Bench's translation category as a suite of its own: a domain the default draft was never distilled
    on (the Online tab's default stream)."""
    if r["category"] != "translation":
        return None
    return Prompt("translation", f"translation/{r['question_id']}", r["turns"][0], r["category"])


# Spec-Bench's leaderboard columns: its 13 categories in six groups (hemingkx/Spec-Bench Leaderboard.md).
SPEC_BENCH_COLUMNS = {
    "Multi-turn Conversation": (
        "writing",
        "roleplay",
        "reasoning",
        "math",
        "coding",
        "extraction",
        "stem",
        "humanities",
    ),
    "Translation": ("translation",),
    "Summarization": ("summarization",),
    "Question Answering": ("qa",),
    "Mathematical Reasoning": ("math_reasoning",),
    "Retrieval-aug. Generation": ("rag",),
}


def column_of(category: str) -> str:
    """The Spec-Bench leaderboard column of a category (other categories stand for themselves)."""
    return next((col for col, cats in SPEC_BENCH_COLUMNS.items() if category in cats), category)


SUITES = {
    "humaneval": ("humaneval.jsonl", _humaneval),
    "gsm8k": ("gsm8k_test.jsonl", _gsm8k),
    "mtbench": ("mt_bench_question.jsonl", _mtbench),
    "mbpp": ("mbpp_test.jsonl", _mbpp),
    "specbench": ("specbench_question.jsonl", _specbench),
    "translation": ("specbench_question.jsonl", _translation),
}


@cache
def load_suite(name: str) -> tuple[Prompt, ...]:
    """A shipped suite by name (never a file: the app passes names a visitor sent)."""
    if name not in SUITES:
        raise SpecvizError(f"unknown prompt suite '{name}'. Suites: {', '.join(SUITES)}")
    filename, make = SUITES[name]
    with (ASSETS / "prompts" / filename).open(encoding="utf-8") as f:
        made = (make(json.loads(line), i) for i, line in enumerate(f) if line.strip())
        return tuple(p for p in made if p is not None)  # a suite cut from another keeps only its own records


def load_source(name: str) -> tuple[Prompt, ...]:
    """For the command line: a shipped suite by name, or a prompt file of one's own by its path."""
    if name not in SUITES and Path(name).is_file():
        return load_prompt_file(Path(name))
    try:
        return load_suite(name)
    except SpecvizError:
        raise SpecvizError(f"unknown prompt suite '{name}', and no such file. Suites: {', '.join(SUITES)}") from None


def take(name: str, limit: int | None = None, offset: int = 0, categories: tuple[str, ...] = ()) -> list[Prompt]:
    """The first `limit` prompts of a suite (or a prompt file, by path) from `offset` on (a fixed,
    documented slice); in a suite with categories (Spec-Bench) `limit` and `offset` count within
    each category, and `categories` keeps only those. Command-line tools only (it reads files)."""
    return select(load_source(name), limit, offset, categories)


def select(
    prompts: tuple[Prompt, ...], limit: int | None = None, offset: int = 0, categories: tuple[str, ...] = ()
) -> list[Prompt]:
    """`take` for any prompts: a slice of each category (of all, when they have none)."""
    known = dict.fromkeys(p.category for p in prompts)
    unknown = [c for c in categories if c not in known]
    if unknown:
        raise SpecvizError(
            f"unknown categor{'ies' if len(unknown) > 1 else 'y'} {', '.join(unknown)}; "
            f"these prompts have: {', '.join(c or '(none)' for c in known)}"
        )
    out = []
    for category in known:
        if categories and category not in categories:
            continue
        group = [p for p in prompts if p.category == category]
        out += group[offset : None if limit is None else offset + limit]
    return out


def load_prompt_file(path: Path) -> tuple[Prompt, ...]:
    """Prompts from a file: JSON lines with a `prompt` (text) or `turns` (list: the first is asked)
    field and optionally `category` and `id`; or plain text, one prompt per line. Blank lines skip."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise SpecvizError(f"cannot read the prompt file {path}: {e}") from None
    name, out = Path(path).stem, []
    as_json = any(line.lstrip().startswith("{") for line in lines if line.strip())
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if not as_json:
            out.append(Prompt(name, f"{name}/{n}", line.strip()))
            continue
        try:
            r = json.loads(line)
            text = r["prompt"] if "prompt" in r else r["turns"][0]
        except (json.JSONDecodeError, KeyError, IndexError, TypeError):
            raise SpecvizError(f"{path} line {n}: expected a JSON object with a 'prompt' or 'turns' field") from None
        if not isinstance(text, str) or not text.strip():
            raise SpecvizError(f"{path} line {n}: the prompt is empty or not text")
        out.append(Prompt(name, f"{name}/{r.get('id', r.get('question_id', n))}", text, str(r.get("category", ""))))
    if not out:
        raise SpecvizError(f"the prompt file {path} has no prompts")
    return tuple(out)


def shuffled(name: str, seed: int) -> Prompt:
    """One prompt of the suite, picked by `seed` (the app's shuffle button)."""
    return random.Random(seed).choice(load_suite(name))


def add_prompt_args(parser: argparse.ArgumentParser, suites: str) -> None:
    """A paper experiment's --suites (shipped suites, or prompt files by path) and --prompts FILE."""
    parser.add_argument(
        "--suites",
        default=suites,
        help=f"comma-separated prompt suites ({', '.join(SUITES)}) or prompt files (default: %(default)s)",
    )
    parser.add_argument(
        "--prompts",
        metavar="FILE",
        help="a prompt file of your own instead of --suites: JSON lines with a 'prompt' or 'turns' "
        "field, or plain text, one prompt per line",
    )


def prompt_sources(args: argparse.Namespace) -> list[str]:
    """The suites (or the prompt file) an experiment's --suites / --prompts name, in order."""
    if args.prompts is not None:
        return [args.prompts]
    return [s.strip() for s in args.suites.split(",") if s.strip()]
