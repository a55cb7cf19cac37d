"""One tree inspector for the tabs that show a method's token trees (SSSD, Speculative Streaming): a
run's records and the text of every token they name, the output coloured by where each accepted
token came from, and the record of the iteration the slider picks (counted from 1, as everywhere in
the app). A tab adds its method's run and what its summary says; no torch at import."""

from __future__ import annotations

import html
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from specviz.plots.tree import record_tree
from specviz.serving.limits import AppLimits, prompt_ids
from specviz.ui.feedback import problem_text

if TYPE_CHECKING:
    from specviz.records import IterationRecord

TARGET_COLOUR = "#555555"  # the target's own token (a correction or the bonus)
TARGET = "target"  # the source of a token the target emitted itself


@dataclass(frozen=True)
class TreeRun:
    """A run to inspect: its records and the text of each token in their trees and output. Plain data
    a model call (a ZeroGPU worker) hands back to the page."""

    records: tuple[IterationRecord, ...]
    text: dict[int, str]

    def decode(self, token: int) -> str:
        return self.text.get(token, str(token))

    def index(self, iteration: Any) -> int:
        """The 0-based index of `iteration`, counted from 1 (a slider's value) and held within the run."""
        return min(max(1, int(iteration)), len(self.records)) - 1

    def at(self, iteration: Any) -> IterationRecord:
        return self.records[self.index(iteration)]

    def first_accepted(self) -> int:
        """The first iteration (from 1) that accepted a draft: where the slider starts (1 if none did)."""
        return next((i + 1 for i, r in enumerate(self.records) if r.accepted), 1)

    def sources(self) -> Iterable[tuple[int, str]]:
        """Each emitted token and where it came from: its tree node's source, or the target's own."""
        for r in self.records:
            path = record_tree(r).sources
            for i, token in enumerate(r.emitted):
                yield token, path[i] if i < r.accepted and i < len(path) else TARGET


def tree_run(
    method: str,
    pair_name: str,
    prompt: str,
    max_new_tokens: int,
    options: dict[str, Any],
    load_pair: Callable[[str], Any] | None,
    limits: AppLimits | None,
) -> tuple[Any, dict[str, Any]]:
    """One greedy run of `method` on `prompt` (within `limits`) to inspect: the pair, and `TreeRun`'s
    fields (a tab's run adds its own to them)."""
    import specviz

    pair = (load_pair or specviz.load_pair)(pair_name)
    ids = prompt_ids(pair, prompt, limits or AppLimits())
    records = list(specviz.run(method, pair, ids, max_new_tokens=int(max_new_tokens), **options))
    vocab = {t for r in records for t in (*record_tree(r).tree_tokens, *r.emitted)}
    return pair, {"records": tuple(records), "text": {t: pair.tokenizer.decode([t]) for t in vocab}}


def cannot_run(e: BaseException) -> str:
    """The output box's HTML for a run refused (a user's input, a pair that cannot load): the reason, escaped."""
    return f"<p><b>Cannot run:</b> {html.escape(problem_text(e))}</p>"


def coloured_output(run: TreeRun, colour_of: Callable[[str], str], legend: Sequence[str] | None = None) -> str:
    """HTML of the emitted text, each token coloured by its source (`colour_of`), and a legend of
    `legend`'s sources (default: the sources that occur, in order of name)."""
    spans, used = [], set()
    for token, source in run.sources():
        used.add(source)
        spans.append(
            f'<span style="color:{colour_of(source)}" title="{source}">{html.escape(run.decode(token))}</span>'
        )
    shown = legend if legend is not None else sorted(used)
    key = " · ".join(f'<span style="color:{colour_of(s)}">■ {s}</span>' for s in shown)
    return f'<div style="white-space:pre-wrap;font-family:monospace">{"".join(spans)}</div><p>{key}</p>'
