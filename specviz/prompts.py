"""The four benchmark prompt suites the papers measure on, shipped in assets/prompts/.

Each suite becomes a list of `Prompt`s whose `text` is the user message given to a chat model.
These prompts are for measuring only: never train a draft, classifier or adapter on them.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from functools import lru_cache

from specviz.errors import SpecvizError
from specviz.paths import ASSETS


@dataclass(frozen=True)
class Prompt:
    suite: str  # humaneval | gsm8k | mtbench | mbpp
    id: str  # the suite's own id (task_id, question_id, or line number)
    text: str  # the user message


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


SUITES = {
    "humaneval": ("humaneval.jsonl", _humaneval),
    "gsm8k": ("gsm8k_test.jsonl", _gsm8k),
    "mtbench": ("mt_bench_question.jsonl", _mtbench),
    "mbpp": ("mbpp_test.jsonl", _mbpp),
}


@lru_cache(maxsize=None)
def load_suite(name: str) -> tuple[Prompt, ...]:
    if name not in SUITES:
        raise SpecvizError(f"unknown prompt suite '{name}'. Suites: {', '.join(SUITES)}")
    filename, make = SUITES[name]
    with (ASSETS / "prompts" / filename).open(encoding="utf-8") as f:
        return tuple(make(json.loads(line), i) for i, line in enumerate(f) if line.strip())


def take(name: str, limit: int | None = None, offset: int = 0) -> list[Prompt]:
    """The first `limit` prompts of a suite from `offset` on (a fixed, documented slice)."""
    prompts = load_suite(name)
    return list(prompts[offset : None if limit is None else offset + limit])


def shuffled(name: str, seed: int) -> Prompt:
    """One prompt of the suite, picked by `seed` (the app's shuffle button)."""
    return random.Random(seed).choice(load_suite(name))
