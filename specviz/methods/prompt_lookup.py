"""Prompt lookup decoding: drafts copied from earlier in the prompt and output, no draft model.

Match the last n tokens (n = max_ngram down to min_ngram) against everything before them and
propose what followed the most recent match. A deterministic drafter has no q: verification treats
it as one-hot, which stays lossless (Saxena 2023; Hugging Face `prompt_lookup_num_tokens`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from specviz.cost.families import CHAIN
from specviz.decoding import Decoding
from specviz.extras import NgramExtra
from specviz.methods import register
from specviz.methods.drafting import Draft, SpeculationPolicy, StaticLength
from specviz.methods.options import MethodOptions, count
from specviz.methods.speculative import speculative_decoding


@dataclass(frozen=True)
class PromptLookupOptions(MethodOptions):
    speculation_length: int = count(4, limit="speculation_length", help="most tokens copied per iteration")
    max_ngram: int = count(3, help="longest suffix to match")
    min_ngram: int = count(1, at_most="max_ngram", help="shortest suffix to fall back to")


def ngram_continuation(ids: list[int], k: int, max_ngram: int, min_ngram: int) -> tuple[list[int], int]:
    """Up to k tokens that followed the most recent earlier occurrence of the longest matching
    suffix of `ids`, and the n of that suffix (0 when nothing matches)."""
    seq = np.asarray(ids)
    for n in range(min(max_ngram, len(seq) - 1), min_ngram - 1, -1):
        windows = np.lib.stride_tricks.sliding_window_view(seq[:-1], n)  # [L-n, n]: every earlier n-gram
        hits = np.flatnonzero((windows == seq[-n:]).all(axis=1))
        if hits.size:
            start = int(hits[-1]) + n
            return seq[start : start + k].tolist(), n
    return [], 0


class PromptLookupDrafter:
    def __init__(self, dec: Decoding, opts: PromptLookupOptions) -> None:
        self.dec, self.opts = dec, opts

    def propose(self, k: int, policy: SpeculationPolicy) -> Draft:
        tokens, n = ngram_continuation(self.dec.ids, k, self.opts.max_ngram, self.opts.min_ngram)
        return Draft(tokens, None, forwards=0, extra=(NgramExtra(ngram=n),))

    def rollback(self, position: int, accepted: int) -> None:
        pass  # stateless: it reads the committed ids afresh every time


@register(
    "prompt_lookup",
    label="Prompt lookup",
    short_label="Lookup",
    description=(
        "Drafts by copying what followed the last matching n-gram of the prompt (as the model reads it: with the chat"
        " template and its system prompt) and output; no draft model."
    ),
    paper="Saxena 2023 (prompt lookup decoding)",
    options=PromptLookupOptions,
    family=CHAIN,
    needs_draft=False,
    in_default_race=True,
    hf_peers=("hf_prompt_lookup",),
    rank=30,
    extras=(NgramExtra,),
    drafts_nothing_when=(
        "no n-gram at the end of the text recurred earlier in the prompt or the output, so there was nothing to copy"
    ),
)
def prompt_lookup(dec: Decoding, opts: PromptLookupOptions) -> Iterator:
    return speculative_decoding(dec, PromptLookupDrafter(dec, opts), StaticLength(opts.speculation_length))
