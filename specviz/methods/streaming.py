"""Speculative Streaming (Bhendawade et al. 2024): the target drafts its own future n-grams.

No draft model. The target carries gamma speculative streams in its top layers
(`specviz.models.streaming`); at a token they predict the gamma tokens after the target's own next
token. Each iteration is one forward pass of the target (the paper's Figure 1(b), section 3.2.2):
it verifies the tree the last pass proposed (`trees.tree_step`) and, in the top N_s layers, runs
the gamma streams of every row that may end up the accepted node (the last committed token and each
tree node), each with the mask of eq. 2 for that node. Once the main stream's logits have decided
the accepted path, only that node's streams go through the head; their top-`tree_width` tokens form
the next tree (stream j's are the children of stream j-1's, pruned to the `tree_nodes` best by the
product of stream probabilities; `StreamDrafter`, a `trees.TreeDrafter`). The cache keeps the
accepted path's main-stream entries only. With `prune_threshold` > 0 and an adapter that carries a
tree-pruning layer (section 3.2.3, `models.tree_pruning`), the pass drops the nodes whose early-exit
probability at their parent is below the threshold, with their subtrees, partway up: they run no
layer above it and carry no streams, and verification sees the kept subtree only (a pruned node is a
node never drafted). A deterministic draft is a one-hot q, so sampling stays exact.
`passes="two-pass"` is the earlier build, kept for the benchmark's comparison: verify, then a second
pass of the top N_s layers at the accepted node (the same streams, computed again).

Lossless with respect to the *tuned* model (base + the adapter's LoRA): its output equals
autoregressive decoding of that model, which is `speculation_length=0` here. When the adapter's
LoRA acts on the streams only (`lora_main=False`), and with the untrained
adapter used for targets that have no shipped adapter, the tuned model is the target itself.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from transformers import PreTrainedModel

from specviz.cost.families import SELF_DRAFTING_TREE
from specviz.decoding import Decoding
from specviz.errors import SpecvizError
from specviz.extras import StreamingPassExtra, TreeExtra
from specviz.methods import register
from specviz.methods.ngram_tree import TokenTree
from specviz.methods.options import MethodOptions, asset, choice, count, number
from specviz.methods.trees import TreeContext, tree_step
from specviz.models import streaming as msa
from specviz.models.devices import host_values, output_embeddings
from specviz.models.kv import CachedLM
from specviz.models.tree_pruning import pruned, transition_probs
from specviz.paths import ASSETS
from specviz.records import IterationRecord

if TYPE_CHECKING:
    from specviz.models.modelpair import ModelPair

ADAPTERS = ASSETS / "streaming"  # shipped adapters, each tagged with its target's fingerprint
PASSES = ("fused", "two-pass")  # the iteration's layout (`StreamingOptions.passes`)
STREAM_VOCABS = ("frequent", "full")  # what the streams' head scores (`StreamingOptions.stream_vocab`)


@dataclass(frozen=True)
class StreamingOptions(MethodOptions):
    speculation_length: int = count(
        4,
        least=0,
        limit="speculation_length",
        help="streams used per iteration (at most the adapter's γ); 0: the tuned model alone",
    )
    tree_width: int = count(
        2, help="top tokens taken from each stream (1: a single path; 2 with 6 nodes is fastest on a CPU)"
    )
    tree_nodes: int = count(
        6, limit="tree_nodes", help="most nodes in the tree (the best by product of stream probabilities)"
    )
    adapter: str = asset(
        "auto", help='"auto": the shipped adapter trained for this target, else "untrained"; or a .safetensors path'
    )
    passes: str = choice(
        "fused",
        PASSES,
        widget=False,
        help='"fused": one target pass per iteration verifies the tree and runs the streams (the paper); '
        '"two-pass": verify, then the accepted node\'s streams in a second pass of the top layers (the earlier '
        "build, for comparison)",
    )
    stream_vocab: str = choice(
        "frequent",
        STREAM_VOCABS,
        widget=False,
        help="\"frequent\": the streams' head scores only the tokens the target uses most (the v2 draft's 8k set, "
        'where it fits the target), so trees hold only those; "full": every token',
    )
    prune_threshold: float = number(
        0.0,
        0.0,
        0.5,
        help="the tree-pruning layer (the paper's section 3.2.3): partway up the pass a node whose early-exit "
        "probability given its parent is below this is dropped with its subtree, so fewer rows run the layers "
        "above; needs an adapter with a pruning layer (the shipped one has one); 0: no pruning",
    )

    def check(self) -> None:
        if self.prune_threshold > 0 and self.passes != "fused":
            raise SpecvizError(
                "the tree-pruning layer works inside the fused pass: prune_threshold needs passes='fused'"
            )


_LOADED: weakref.WeakKeyDictionary[PreTrainedModel, dict[str, msa.StreamingLM]] = weakref.WeakKeyDictionary()


def streaming_model(target: PreTrainedModel, adapter: str = "auto") -> msa.StreamingLM:
    """The MSA model over `target` with `adapter` (loaded once per target and adapter)."""
    per_target = _LOADED.setdefault(target, {})
    if adapter not in per_target:
        per_target[adapter] = _load(target, adapter)
    return per_target[adapter]


def tuned_target(pair: ModelPair, adapter: str = "auto") -> str:
    """What streaming with `adapter` is lossless against: "" (the target itself) when the adapter leaves
    the main stream untouched (LoRA on the streams only, or none trained), else the tuned model."""
    if not streaming_model(pair.target, adapter).changes_main_stream():
        return ""
    return "its own fine-tuned target (the base model with its streaming adapter)"


def shipped_adapter(target: PreTrainedModel) -> Path | None:
    """The shipped adapter trained for exactly this target, if there is one."""
    for path in sorted(ADAPTERS.glob("*.safetensors")):
        if msa.trained_for(msa.read_adapter_meta(path), target):
            return path
    return None


def _load(target: PreTrainedModel, adapter: str) -> msa.StreamingLM:
    if adapter == "auto":
        path = shipped_adapter(target)
        return msa.load_adapter(target, path) if path else msa.untrained(target)
    if adapter == "untrained":
        return msa.untrained(target)
    if not Path(adapter).is_file():
        raise SpecvizError(f"no streaming adapter at '{adapter}': use auto, untrained or a .safetensors file")
    try:
        return msa.load_adapter(target, adapter)
    except ValueError as e:
        raise SpecvizError(str(e)) from e


@register(
    "streaming",
    label="Speculative Streaming",
    short_label="Stream.",
    description="The target drafts its own next tokens with extra attention streams in its top layers; no draft model.",
    paper="Bhendawade et al. 2024 (Speculative Streaming)",
    options=StreamingOptions,
    family=SELF_DRAFTING_TREE,
    needs_draft=False,
    rank=40,
    extras=(TreeExtra, StreamingPassExtra),
    lossless_against=lambda pair, options: tuned_target(pair, options.get("adapter", "auto")),
)
def streaming(dec: Decoding, opts: StreamingOptions) -> Iterator[IterationRecord]:
    lm = streaming_model(dec.pair.target, opts.adapter)
    main = CachedLM(lm.tuned)  # the main stream: the tuned target with its ordinary KV cache
    gamma = min(opts.speculation_length, lm.cfg.gamma)
    if opts.passes == "two-pass":
        two = TwoPassDrafter(lm, main, gamma, opts.tree_width)
        while not dec.done:
            yield tree_step(dec, main, two, opts.tree_nodes)
        return
    if len(set(getattr(lm.tuned, "hf_device_map", {}).values())) > 1:
        raise SpecvizError(
            "the fused streaming pass runs its own layers on one device, and this target is spread over several"
            " (device_map): use passes='two-pass', or load the target on one device"
        )
    vocab = frequent_vocab(len(output_embeddings(lm.tuned))) if opts.stream_vocab == "frequent" else None
    drafter = StreamDrafter(lm, gamma, opts.tree_width, vocab, opts.prune_threshold)
    while not dec.done:
        yield tree_step(dec, main, drafter, opts.tree_nodes, verify=drafter.verify, extra=drafter.pass_extra)


class StreamDrafter:
    """A TreeDrafter whose tree comes out of the verification pass itself: `verify` is the fused pass
    (every candidate node's streams ride along), `kept` keeps the accepted node's streams, `propose`
    scores them with the streams' head. A pass runs the streams the next tree can use: the γ in use
    (`gamma`, not the adapter's), fewer near the end of the output budget, none in the run's last pass."""

    hidden_layer = None  # `verify` hands `kept` the streams, not a layer's hidden states

    def __init__(
        self,
        lm: msa.StreamingLM,
        gamma: int,
        width: int,
        vocab_ids: torch.Tensor | None = None,
        prune_threshold: float = 0.0,
    ) -> None:
        self.lm, self.gamma, self.width = lm, gamma, width
        self.vocab_ids: torch.Tensor | None = None  # [K] the tokens the streams' head scores (None: every token)
        self.rows: torch.Tensor | None = None  # [K, H] their LM head rows
        if vocab_ids is not None:
            self.rows = lm.head_rows(vocab_ids)
            self.vocab_ids = vocab_ids.to(self.rows.device)
        self.prune_threshold = prune_threshold if lm.pruner is not None else 0.0  # 0: no pruning
        self.streams: torch.Tensor | None = None  # [gamma, H]: the last accepted node's streams, once run
        self.pass_gamma = gamma  # streams the next pass runs per node (`propose` bounds it by the budget)
        self.shape: StreamingPassExtra | None = None  # the last pass's shape, for its record

    def pass_extra(self) -> tuple[StreamingPassExtra]:
        """The last pass's shape, for its record (`tree_step` asks once the pass ran)."""
        assert self.shape is not None  # an invariant: `verify` ran, every iteration is one pass
        return (self.shape,)

    def verify(
        self, target: CachedLM, new_tokens: list[int], tree: TokenTree
    ) -> tuple[torch.Tensor, torch.Tensor | None, list[int] | None]:
        """The one target forward of an iteration: tree logits [1 + n, V], every candidate node's
        streams [1 + n, gamma, H] (row 0: the last committed token's) and the nodes the pruning layer
        kept (None: all; a pruned node's rows are zeros); no streams when none are used
        (speculation_length 0: the tuned model alone, as autoregressive decoding runs it)."""
        gamma, rows = (self.pass_gamma if self.gamma else 0), 1 + len(tree)
        layers, stream_layers = len(self.lm.layers), self.lm.cfg.stream_layers
        self.shape = StreamingPassExtra(layers, stream_layers, gamma, len(new_tokens))
        if self.gamma == 0:
            return target.forward_tree(new_tokens, tree.tokens, tree.parents), None, None
        prune = (lambda h: self.kept_rows(h, tree)) if self.prune_threshold > 0 and len(tree) else None
        logits, streams, kept = target.forward_tree_by(
            new_tokens,
            tree.tokens,
            tree.parents,
            lambda ids, positions, mask, append: self.lm.fused_tree_pass(
                ids, positions, mask, append, rows, gamma, prune
            ),
        )
        if len(kept) == rows:
            return logits, streams, None
        assert self.lm.pruner is not None  # an invariant: only a pruner drops rows
        nodes = [r - 1 for r in kept[1:]]
        verified = set(nodes)
        self.shape = StreamingPassExtra(
            layers,
            stream_layers,
            gamma,
            len(new_tokens),
            prune_layer=self.lm.pruner.layer,
            pruned=tuple(i for i in range(len(tree)) if i not in verified),
        )
        index = torch.tensor(kept, device=logits.device)
        return (
            logits.new_zeros(rows, logits.shape[1]).index_copy_(0, index, logits),
            streams.new_zeros(rows, *streams.shape[1:]).index_copy_(0, index, streams),
            nodes,
        )

    def kept_rows(self, hidden: torch.Tensor, tree: TokenTree) -> list[int]:
        """The pruning layer's choice (section 3.2.3): hidden [1 + n, H], the candidate rows after the
        pruner's layer -> the rows kept (row 0, the last committed token, always): a node goes when
        its early-exit probability at its parent is below the threshold, with its subtree."""
        assert self.lm.pruner is not None
        parent_rows = sorted({1 + p for p in tree.parents})  # only rows with children are read
        where = {r: i for i, r in enumerate(parent_rows)}
        head = self.rows if self.rows is not None else output_embeddings(self.lm.tuned)
        early = self.lm.pruner.early_logits(hidden[parent_rows], self.lm.tuned.get_decoder().norm, head)
        probs = transition_probs(early, [where[1 + p] for p in tree.parents], self.columns(tree.tokens))
        gone = pruned(tree.parents, host_values(probs)[0], self.prune_threshold)
        return [0] + [1 + i for i, g in enumerate(gone) if not g]

    def columns(self, tokens: list[int]) -> torch.Tensor:
        """The early-exit head's columns of these tokens (their index in `vocab_ids`, or the id itself)."""
        ids = torch.tensor(tokens, device=self.lm.stream_embed.device)
        if self.vocab_ids is None:
            return ids
        return (self.vocab_ids.unsqueeze(0) == ids.unsqueeze(1)).float().argmax(1)

    def stream_logits(self, context: TreeContext) -> torch.Tensor | None:
        """What the accepted node's streams say follows the target's next token: [gamma, V], or
        [gamma, K] over `vocab_ids` (None before the first pass)."""
        return None if self.streams is None else self.lm.stream_head(self.streams, self.rows)

    def propose(self, context: TreeContext, budget: int) -> TokenTree:
        depth = min(self.gamma, context.depth)
        # this pass commits at least one token, so the next tree has at most depth - 1 levels: the
        # streams past that are never read (all of them in the run's last pass)
        self.pass_gamma = max(0, min(self.gamma, context.depth - 1))
        logits = self.stream_logits(context) if depth > 0 else None
        if logits is None:
            return TokenTree()
        # an invariant, not an input: each pass commits a token, so depth is at most the last pass's pass_gamma
        assert depth <= logits.shape[0]  # the last pass ran the streams this tree can use
        return stream_tree(logits[:depth].softmax(-1), self.width, budget, self.vocab_ids)

    def kept(self, path: list[int], hidden: torch.Tensor | None) -> None:
        if hidden is not None:  # the streams of every row, from `verify`
            self.streams = hidden[1 + path[-1]] if path else hidden[0]  # the accepted node is the last token kept


class TwoPassDrafter:
    """The two-pass build: the verification pass returns the accepted node's hidden state entering
    layer N - N_s; `propose` runs that node's streams in a pass of their own over the top N_s layers,
    reading the main stream's KV cache."""

    def __init__(self, lm: msa.StreamingLM, main: CachedLM, gamma: int, width: int) -> None:
        self.lm, self.main, self.gamma, self.width = lm, main, gamma, width
        self.hidden_layer = lm.first_stream_layer
        self.node: torch.Tensor | None = None  # hidden state of the last accepted token, once known

    def propose(self, context: TreeContext, budget: int) -> TokenTree:
        depth = min(self.gamma, context.depth)
        if self.node is None or depth <= 0:
            return TokenTree()
        logits = self.lm.stream_logits(self.node, len(self.main) - 1, self.main.layer_kv)  # [gamma, V]
        return stream_tree(logits[:depth].softmax(-1), self.width, budget)

    def kept(self, path: list[int], hidden: torch.Tensor | None) -> None:
        assert hidden is not None  # hidden_layer is set, so the verification pass returns hidden states
        self.node = hidden[1 + path[-1]] if path else hidden[0]  # the accepted node is the last token kept


def frequent_vocab(vocab: int) -> torch.Tensor | None:
    """The frequent-token set the streams' head may score (the v2 draft's 8k ids), None where it does
    not fit this vocabulary (then the head scores every token)."""
    ids = _frequent_tokens(vocab)
    return None if len(ids) == vocab else ids


@cache
def _frequent_tokens(vocab: int) -> torch.Tensor:
    from specviz.models.eagle import frequent_tokens  # reads the shipped draft's head ids once

    return frequent_tokens(vocab)


def stream_tree(probs: torch.Tensor, width: int, max_nodes: int, token_ids: torch.Tensor | None = None) -> TokenTree:
    """The tree of the streams' top tokens: stream j's top-`width` are the children of every kept
    node of stream j-1; keep the `max_nodes` best by the product of stream probabilities (a child
    never scores above its parent, so the kept nodes form a tree). probs [depth, V], or [depth, K]
    over the tokens `token_ids` [K]."""
    top_p, top_x = probs.topk(width, dim=-1)  # [depth, width]
    if token_ids is not None:
        top_x = token_ids.to(top_x.device)[top_x]  # head index -> token id
    depth = top_p.shape[0]
    p_h, x_h = host_values(top_p, top_x)  # one host sync for every candidate
    cands: list[tuple[float, int, int, int]] = []  # (score, parent candidate, token, stream)
    frontier = [(-1, 1.0)]
    for j in range(depth):
        level = [
            (score * p_h[j * width + w], parent, int(x_h[j * width + w]), j)
            for parent, score in frontier
            for w in range(width)
        ]
        level = sorted(level, key=lambda c: -c[0])[:max_nodes]  # no deeper node can beat these
        frontier = [(len(cands) + i, c[0]) for i, c in enumerate(level)]
        cands += level
    best = sorted(range(len(cands)), key=lambda i: (-cands[i][0], cands[i][3], i))[:max_nodes]
    tree, index = TokenTree(), {}
    for i in sorted(best):  # candidates are level by level, so parents come first
        score, parent, token, j = cands[i]
        index[i] = len(tree)
        tree.tokens.append(token)
        tree.parents.append(index[parent] if parent >= 0 else -1)
        tree.scores.append(score)
        tree.sources.append(f"stream {j + 1}")
    return tree
