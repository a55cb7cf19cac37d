"""SSSD: Simply-Scalable Speculative Decoding (Marzollo et al. 2024), training-free.

Each iteration: build a candidate tree from n-gram matches in the prompt + own output and in a
datastore (`ngram_tree`; `NgramTreeDrafter` is a `trees.TreeDrafter`), then `trees.tree_step`: score
the whole tree in one target forward pass, walk it with the tree acceptance rule and keep only the
accepted path's keys and values. No draft model; drafting runs on the CPU in well under a
millisecond next to the target's forward pass (the record's `draft_ms`).

`decode_batch` runs a static batch of prompts together (per-sequence trees, one forward per
iteration for all of them), sized by the roofline's speculation budget for that batch size.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specviz.cost.families import TREE
from specviz.datastore import DEFAULT_PATH, Datastore, load_datastore, tokenizer_fingerprint
from specviz.decoding import Decoding
from specviz.errors import SpecvizError
from specviz.extras import TreeExtra
from specviz.methods import register
from specviz.methods.ngram_tree import FusionWeights, InputIndex, SourceConfig, TokenTree, scored_candidates, top_tree
from specviz.methods.options import MethodOptions, asset, choice, count, number
from specviz.methods.trees import TreeContext, commit_tree, tree_step
from specviz.models.kv import BatchCachedLM, CachedLM
from specviz.records import IterationRecord
from specviz.sampling import SamplingConfig

if TYPE_CHECKING:
    from specviz.models.pair import ModelPair

SOURCES = ("both", "input", "datastore")
GREEDY = SamplingConfig()  # decode_batch's default (frozen: one instance serves every call)


@dataclass(frozen=True)
class SSSDOptions(MethodOptions):
    speculation_length: int = count(
        8,
        limit="tree_nodes",
        help="S: tree nodes the target verifies per iteration (8 is fastest on a CPU, 16-64 on a GPU)",
    )
    max_depth: int = count(8, help="longest path in the tree (tokens drafted ahead)")
    sources: str = choice("both", SOURCES, help='"input" (prompt + own output), "datastore", or "both" fused')
    datastore: str = asset("auto", help='"auto": the shipped one if it fits the tokenizer; "none"; or a .npz path')
    max_ngram: int = count(3, help="longest suffix matched in the prompt + own output")
    input_scale: float = number(
        FusionWeights.input_scale,
        0.01,
        10.0,
        help="weight on the input source's n-gram probabilities, below 1 to damp its over-confidence (the SSSD "
        "paper's fusion weight)",
    )
    input_depth_decay: float = number(
        FusionWeights.input_depth_decay, 0.01, 1.0, help="input-source damping per tree level"
    )

    def weights(self) -> FusionWeights:
        return FusionWeights(input_scale=self.input_scale, input_depth_decay=self.input_depth_decay)


@lru_cache(maxsize=8)
def _fingerprint(tokenizer: Any) -> str:
    return tokenizer_fingerprint(tokenizer)


def resolve_datastore(choice: str, tokenizer: Any) -> Datastore | None:
    """The datastore an option names; "auto" falls back to none when the shipped one does not fit."""
    if choice == "none":
        return None
    path = DEFAULT_PATH if choice == "auto" else Path(choice)
    if not path.exists():
        if choice == "auto":
            return None
        raise SpecvizError(f"no datastore at {path}: build one with `python -m specviz.train.datastore`")
    store = load_datastore(str(path))
    if store.fingerprint != _fingerprint(tokenizer):
        if choice == "auto":
            return None
        raise SpecvizError(f"the datastore {path} was built with another tokenizer than this pair's")
    return store


class NgramTreeDrafter:
    """A TreeDrafter: a token tree for one sequence from its own n-grams and a datastore."""

    hidden_layer = None

    def __init__(self, datastore: Datastore | None, opts: SSSDOptions, weights: FusionWeights | None = None) -> None:
        self.index = InputIndex(opts.max_ngram) if opts.sources != "datastore" else None
        self.datastore = datastore if opts.sources != "input" else None
        self.cfg = SourceConfig(max_ngram=opts.max_ngram)
        self.weights = weights or opts.weights()
        self.max_depth = opts.max_depth

    def propose(self, context: TreeContext, budget: int) -> TokenTree:
        if self.index is not None:
            self.index.extend(context.ids)
        candidates = scored_candidates(
            context.ids, self.index, self.datastore, min(context.depth, self.max_depth), self.cfg, self.weights
        )
        return top_tree(candidates, budget)

    def kept(self, path: list[int], hidden: Any) -> None:
        pass  # the index reads the committed ids at the next proposal


@register(
    "sssd",
    label="SSSD (n-gram tree)",
    short_label="SSSD",
    description=(
        "Training-free: a token tree from n-gram matches in the prompt, its own output and a datastore, verified in"
        " one pass."
    ),
    paper="Marzollo et al. 2024 (SSSD: Simply-Scalable Speculative Decoding)",
    options=SSSDOptions,
    family=TREE,
    needs_draft=False,
    in_default_race=True,
    rank=40,
    extras=(TreeExtra,),
)
def sssd(dec: Decoding, opts: SSSDOptions) -> Iterator[IterationRecord]:
    datastore = resolve_datastore(opts.datastore, dec.pair.tokenizer) if opts.sources != "input" else None
    drafter = NgramTreeDrafter(datastore, opts)
    target = CachedLM(dec.pair.target)
    while not dec.done:
        yield tree_step(dec, target, drafter, opts.speculation_length)


def batch_tree_size(pair: ModelPair, batch_size: int, context_len: int, hardware: str, tolerance: float = 0.25) -> int:
    """Tree nodes per sequence that the roofline says are almost free at this batch size (SSSD
    section 3.2): verification with S+1 tokens per sequence costs at most (1 + tolerance) x a
    plain decoding step. Shrinks as B grows and the pass turns compute-bound."""
    from specviz.cost.hardware import get_hardware
    from specviz.cost.roofline import speculation_budget
    from specviz.cost.shapes import shape_from_model

    shape = shape_from_model(pair.target)
    return speculation_budget(shape, get_hardware(hardware), batch_size, context_len, tolerance)


def decode_batch(
    pair: ModelPair,
    prompts: list[list[int]],
    tree_size: int,
    *,
    max_new_tokens: int = 128,
    sampling: SamplingConfig = GREEDY,
    seed: int = 0,
    opts: SSSDOptions = SSSDOptions(),
) -> list[list[IterationRecord]]:
    """Decode a static batch together: per-sequence trees of `tree_size` nodes (0: plain batched
    autoregressive decoding), one target forward per iteration for every unfinished sequence;
    a finished sequence leaves the batch. Returns each prompt's records."""
    datastore = resolve_datastore(opts.datastore, pair.tokenizer) if opts.sources != "input" else None
    decs = [
        Decoding(pair, list(p), "sssd" if tree_size else "autoregressive", max_new_tokens, sampling, seed + i)
        for i, p in enumerate(prompts)
    ]
    drafters = [NgramTreeDrafter(datastore, opts) for _ in prompts]
    records: list[list[IterationRecord]] = [[] for _ in prompts]
    target, active = BatchCachedLM(pair.target), list(range(len(prompts)))
    for dec in decs:
        dec.now()  # every request arrives at once: start all clocks together
    while active:
        t_start = [decs[b].now() for b in active]
        trees = [drafters[b].propose(TreeContext.of(decs[b]), tree_size) if tree_size else TokenTree() for b in active]
        t_drafted = [decs[b].now() for b in active]
        new = [decs[b].ids[target.lengths[i] if target.lengths else 0 :] for i, b in enumerate(active)]
        logits = target.forward_trees(new, [(t.tokens, t.parents) for t in trees])
        paths = []
        for i, b in enumerate(active):
            record, tv = commit_tree(decs[b], trees[i], logits[i], t_start[i], t_drafted[i], batch_size=len(active))
            records[b].append(record)
            paths.append(list(tv.path[: record.accepted]))
        target.keep_paths(paths)
        still = [i for i, b in enumerate(active) if not decs[b].done]
        if len(still) < len(active) and still:
            target.select_rows(still)
        active = [active[i] for i in still]
    return records
