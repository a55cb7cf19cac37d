"""EAGLE-2 (Li et al. 2024, "EAGLE-2: Faster Inference of Language Models with Dynamic Draft Trees").

The draft is a head over the target's own features (`specviz.models.eagle`, EAGLE-1's head). Each
iteration: the head reads the features of the tokens the last verification kept (the whole
prompt's after the first pass, as in training), then grows a tree by its confidence: from the last
committed token, the top-k tokens; at each later level the k nodes of highest cumulative draft
probability (the product of the head's probabilities along the path: EAGLE-2's estimate of the
chance the path is accepted) are expanded in one head pass into their top-k children; at the end
every candidate is reranked and the best kept (a child never scores above its parent, so they form a
tree): as many as pay for their rows in the target's pass by the cost model of this device (budget
"cost model": `cost.formulas.tree_budget` over the roofline of the device's preset, each node's score
read as its chance of acceptance through `AcceptanceBins`), at most `tree_nodes`; or exactly
`tree_nodes` (budget "fixed"). `trees.tree_step` verifies the tree in one target forward, which also
returns the features of the accepted path (no extra target pass). A deterministic draft is a one-hot
q, so sampling stays exact.

`head="auto"` drafts with the head trained for the target (assets/eagle/, found by the target's
fingerprint) and falls back to the untrained head (the target's top layer) for any other target,
e.g. the tests' tiny pairs: lossless either way, only slower.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedModel

from specviz.cost.families import HEAD_TREE
from specviz.cost.formulas import tree_budget
from specviz.cost.hardware import get_hardware, preset_for
from specviz.cost.roofline import forward_time
from specviz.cost.shapes import ModelShape, shape_from_model
from specviz.decoding import Decoding
from specviz.errors import SpecvizError
from specviz.extras import TreeExtra
from specviz.limits import MAX_SPECULATION_LENGTH
from specviz.methods import register
from specviz.methods.ngram_tree import TokenTree
from specviz.methods.options import MethodOptions, asset, choice, count
from specviz.methods.trees import TreeContext, tree_step
from specviz.models import streaming as msa
from specviz.models.devices import HOST, input_embeddings
from specviz.models.eagle import EagleHead, from_target, load_head
from specviz.models.kv import CachedLM, additive, crop_to, new_cache
from specviz.paths import ASSETS
from specviz.records import IterationRecord

HEADS = ASSETS / "eagle"  # shipped heads, each tagged with its target's fingerprint
BUDGETS = ("cost model", "fixed")


@dataclass(frozen=True)
class EagleOptions(MethodOptions):
    # Drafting sized for this 2-core CPU, where a tree pass costs ~0.05 target steps more per node (benchmarks/eagle/
    # README.md, "Tree size"): 2 wide, 3 deep, 10 candidates, of which the cost model verifies the few that pay
    # ("The node budget"). On a GPU, where a pass costs about the same up to 64 nodes, it verifies them all: draft
    # wider and deeper there.
    tree_nodes: int = count(
        10,
        limit="tree_nodes",
        help='N: most nodes the target verifies per pass (the rerank\'s budget; with budget "fixed", this many '
        "whenever the tree has them)",
    )
    budget: str = choice(
        "cost model",
        BUDGETS,
        help='"cost model": each pass verifies the n <= N best nodes that maximise expected tokens per unit of '
        'cost on this device (the roofline of its preset); "fixed": N',
    )
    tree_width: int = count(2, help="k (EAGLE-2's top-k): children per expanded node, and nodes expanded per level")
    depth: int = count(
        3,
        limit="speculation_length",
        help="most levels drafted: tokens drafted ahead (head passes per iteration, after the first)",
    )
    head: str = asset(
        "auto",
        help='"auto": the shipped head trained for this target, else "untrained" (the target\'s top layer, not '
        "trained); or a .safetensors path",
    )


SPEC: dict[str, Any] = {  # the registry entry: register("eagle", **SPEC)
    "label": "EAGLE-2 (feature head)",
    "short_label": "EAGLE-2",
    "description": (
        "A one-layer head drafts from the target's own last hidden states, not from tokens: they already hold much of"
        " what the target will say next; the tree grows where the head is confident and is verified in one pass."
    ),
    "paper": "Li et al. 2024 (EAGLE; EAGLE-2: dynamic draft trees)",
    "options": EagleOptions,
    "family": HEAD_TREE,
    "needs_draft": False,
    "rank": 45,
    "extras": (TreeExtra,),
}

_LOADED: weakref.WeakKeyDictionary[PreTrainedModel, dict[str, EagleHead]] = weakref.WeakKeyDictionary()


def eagle_head(target: PreTrainedModel, choice: str = "auto") -> EagleHead:
    """The head an option names, for `target` (loaded once per target and choice)."""
    per_target = _LOADED.setdefault(target, {})
    if choice not in per_target:
        per_target[choice] = _load(target, choice).eval()
    return per_target[choice]


def shipped_head(target: PreTrainedModel) -> Path | None:
    """The shipped head trained for exactly this target, if there is one."""
    for path in sorted(HEADS.glob("*.safetensors")):
        if msa.trained_for(msa.read_adapter_meta(path), target):
            return path
    return None


def _load(target: PreTrainedModel, choice: str) -> EagleHead:
    with torch.device(HOST):  # built on the host, then moved to the target's device (not wherever tensors default)
        return _build(target, choice)


def _build(target: PreTrainedModel, choice: str) -> EagleHead:
    if choice == "auto":
        path = shipped_head(target)
        return load_head(target, path) if path else from_target(target)
    if choice == "untrained":
        return from_target(target)
    if not Path(choice).is_file():
        raise SpecvizError(f"no EAGLE head at '{choice}': use auto, untrained or a .safetensors file")
    try:
        return load_head(target, Path(choice))
    except ValueError as e:
        raise SpecvizError(str(e)) from e


@register("eagle", **SPEC)
def eagle(dec: Decoding, opts: EagleOptions) -> Iterator[IterationRecord]:
    drafter = EagleDrafter(eagle_head(dec.pair.target, opts.head), dec.pair.target, opts)
    target = CachedLM(dec.pair.target)
    while not dec.done:
        yield tree_step(dec, target, drafter, opts.tree_nodes, all_rows=True)  # the prompt's features too


@dataclass
class Candidate:
    token: int  # index into the head's vocab_ids
    parent: int  # candidate index (-1: a child of the last committed token)
    depth: int  # 1 for the first level
    score: float  # log of the product of the head's probabilities along the path
    slot: int | None = None  # the head-cache entry of its expansion, once expanded


class EagleDrafter:
    """A TreeDrafter: the EAGLE head over the target's features, with its own one-layer KV cache
    holding an entry (f_t, x_{t+1}) per committed position t it has seen."""

    def __init__(self, head: EagleHead, target: PreTrainedModel, opts: EagleOptions) -> None:
        self.head, self.opts = head, opts
        self.vocab: list[int] = head.vocab_ids.tolist()  # the head's token index -> the target's token id
        self.embed = input_embeddings(target)  # [V, H] e(x)
        self.hidden_layer = target.config.num_hidden_layers  # hidden_states[L]: post-norm, what the LM head reads
        self.cache = new_cache(head.config)
        self.committed = 0  # head-cache entries of committed positions (the rest are the last tree's)
        self.pending: list[tuple[int, torch.Tensor]] = []  # (t, f_t) whose entries are not cached yet
        self.root_position = -1  # position of the last committed token when the tree was proposed
        self.passes = 0  # head passes in this iteration's drafting
        self.target_shape, self.device = shape_from_model(target), self.embed.device  # for the cost model
        self.acceptance = AcceptanceBins()  # what a node's score says of its chance, learned as we verify
        self.scores: list[float] = []  # each node's score in the tree proposed last (its length: the verification
        # pass's rows after the committed ones)

    def propose(self, context: TreeContext, budget: int) -> TokenTree:
        self.root_position, self.passes = len(context.ids) - 1, 0
        tree = self._draft(context, budget)
        tree.forwards, self.scores = self.passes, tree.scores
        return tree

    @torch.inference_mode()
    def _draft(self, context: TreeContext, budget: int) -> TokenTree:
        depth = min(self.opts.depth, context.depth)
        if not self.pending:
            return TokenTree()  # before the first verification no feature is known
        root = self._read_pending(context.ids)  # [H] f̂ at the last committed token
        if depth <= 0 or budget <= 0:
            return TokenTree()
        return self._grow(root, depth, budget, len(context.ids))

    def kept(self, path: list[int], hidden: torch.Tensor | None) -> None:
        """File f_t of the pass's new committed tokens (all rows: the whole prompt at first) and of the path."""
        assert hidden is not None  # hidden_layer is set, so the verification pass returns features
        self.acceptance.observe(self.scores, set(path))
        p0, m = self.root_position, hidden.shape[0] - len(self.scores)  # [m + n, H]: m committed rows, then the tree
        committed = [(p0 - m + 1 + i, hidden[i]) for i in range(m)]
        self.pending = committed + [(p0 + 1 + d, hidden[m + node]) for d, node in enumerate(path)]

    def _forward(
        self, tokens: list[int], feats: torch.Tensor, positions: list[int], visible: torch.Tensor
    ) -> torch.Tensor:
        """Head entries for (f_t, x_{t+1}) rows: feats [T, H], tokens x_{t+1}, positions t; `visible`
        bool [T, cached + T]. Returns f̂ [T, H]; the entries join the head's cache."""
        device = self.embed.device
        ids = torch.tensor(tokens, device=device)
        mask = additive(visible, self.head.fc.weight.dtype, device)[None, None]  # [1, 1, T, S]
        pos = torch.tensor([positions], device=device)  # [1, T]
        out = self.head(self.embed[ids][None], feats[None], pos, mask, self.cache)  # [1, T, H]
        self.passes += 1
        return out[0]

    def _read_pending(self, ids: list[int]) -> torch.Tensor:
        """Crop the last tree's entries, add the kept features' entries; f̂ of the last one: [H]."""
        crop_to(self.cache, self.committed)  # the last tree's entries go
        positions = [t for t, _ in self.pending]
        feats = torch.stack([f for _, f in self.pending])  # [m, H]
        m = len(positions)
        visible = torch.ones(m, self.committed + m, dtype=torch.bool, device=HOST).tril(self.committed)
        out = self._forward([ids[t + 1] for t in positions], feats, positions, visible)
        self.committed += m
        self.pending = []
        return out[-1]

    def _top(self, feats: torch.Tensor) -> list[tuple[list[float], list[int]]]:
        """The head's top-k (log-probabilities, token indices) after each row of f̂ `feats` [n, H]: one
        read of the device for a whole level (a read per candidate made a GPU wait k² times a level)."""
        logp = torch.log_softmax(self.head.logits(feats).float(), dim=-1)  # [n, K]
        top_logp, top_i = logp.topk(min(self.opts.tree_width, logp.shape[-1]), dim=-1)  # [n, k]
        values, indices = torch.stack([top_logp, top_i.float()]).tolist()  # [2, n, k]; indices < 2^24: exact
        return [(v, [int(i) for i in ix]) for v, ix in zip(values, indices, strict=True)]

    def _children(self, parent: int, depth: int, base: float, top: tuple[list[float], list[int]]) -> list[Candidate]:
        """The candidates after a node from the head's top-k there, scored by cumulative log-probability."""
        logp, tokens = top
        return [Candidate(t, parent, depth, base + lp) for lp, t in zip(logp, tokens, strict=True)]

    def _grow(self, root: torch.Tensor, depth: int, budget: int, context: int) -> TokenTree:
        """EAGLE-2: expand the top-k of each level by cumulative probability, then rerank to `budget`."""
        cands = self._children(-1, 1, 0.0, self._top(root[None])[0])
        frontier = list(range(len(cands)))
        feats = {-1: root}  # f̂ after each expanded candidate (-1: the last committed token)
        for d in range(2, depth + 1):
            outs = self._expand(cands, frontier, feats)  # [k, H] f̂ of each frontier node
            level: list[Candidate] = []
            for c, top in zip(frontier, self._top(outs), strict=True):
                level += self._children(c, d, cands[c].score, top)
            start = len(cands)
            cands += level
            best = sorted(range(len(level)), key=lambda i: -level[i].score)[: self.opts.tree_width]
            frontier = [start + i for i in sorted(best)]
        return rerank(cands, self._size(cands, budget, context), self.vocab)

    def _size(self, cands: list[Candidate], most: int, context: int) -> int:
        """The rerank's budget: `most`, or with budget "cost model" the n <= most best nodes that maximise
        expected tokens (1 + the sum of their chances of acceptance, `AcceptanceBins`) per unit of cost (the
        head passes spent, then the target's pass over n nodes), in decoding steps by this device's roofline."""
        if self.opts.budget == "fixed":
            return most
        bucket = -(-context // 128) * 128  # one cost table per 128 tokens of context
        verify, head = pass_costs(self.target_shape, self.device, len(self.vocab), self.opts.tree_width, bucket)
        scores = sorted((math.exp(c.score) for c in cands), reverse=True)[:most]
        return tree_budget([self.acceptance.chance(s) for s in scores], verify, self.passes * head)

    def _expand(self, cands: list[Candidate], frontier: list[int], feats: dict[int, torch.Tensor]) -> torch.Tensor:
        """One head pass over the frontier nodes: entry (f̂ of the parent, the node's token), each
        seeing the committed entries, its expanded ancestors and itself."""
        past = self.cache.get_seq_length()
        visible = torch.zeros(len(frontier), past + len(frontier), dtype=torch.bool, device=HOST)
        visible[:, : self.committed] = True
        for row, c in enumerate(frontier):
            a = cands[c].parent
            while a >= 0:
                slot = cands[a].slot
                assert slot is not None  # a node is expanded only after its parent was
                visible[row, slot] = True
                a = cands[a].parent
            visible[row, past + row] = True
            cands[c].slot = past + row
        inputs = torch.stack([feats[cands[c].parent] for c in frontier])  # [k, H]
        positions = [self.root_position + cands[c].depth - 1 for c in frontier]  # t: the entry reads x_{t+1}, the node
        out = self._forward([self.vocab[cands[c].token] for c in frontier], inputs, positions, visible)
        for row, c in enumerate(frontier):
            feats[c] = out[row]
        return out


class AcceptanceBins:
    """A node's chance of acceptance given its score (the product of the head's probabilities along its
    path), learned from this decoding's own verifications: per tenth of the score range, the nodes the
    target verified and those it kept, after `prior` pseudo-nodes kept at the tenth's centre (EAGLE-2's
    reading of the score as the chance). Greedy verification keeps a node whenever its token is the
    target's top one, so a head whose distribution is flatter than the target's is kept more often
    than its scores say; the bins learn by how much."""

    def __init__(self, bins: int = 10, prior: float = 2.0) -> None:
        self.bins, self.prior = bins, prior
        self.verified, self.kept = [0] * bins, [0] * bins

    def _bin(self, score: float) -> int:
        return min(int(score * self.bins), self.bins - 1)

    def chance(self, score: float) -> float:
        b = self._bin(score)
        centre = (b + 0.5) / self.bins
        return (self.kept[b] + self.prior * centre) / (self.verified[b] + self.prior)

    def observe(self, scores: list[float], kept: set[int]) -> None:
        """One verified tree: each node's score, and the nodes the target kept."""
        for node, score in enumerate(scores):
            b = self._bin(score)
            self.verified[b] += 1
            self.kept[b] += node in kept


@lru_cache(maxsize=16)
def pass_costs(
    shape: ModelShape, device: torch.device, head_vocab: int, head_rows: int, context: int
) -> tuple[tuple[float, ...], float]:
    """By the roofline of the preset standing for `device` (`cost.hardware.preset_for`), in decoding steps
    T(1) with `context` tokens cached: T(n+1)/T(1) for a pass over n nodes (n = 0 up to the option's
    limit), and one head pass over `head_rows` rows (the target's width, one layer, `head_vocab` logits)."""
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else ""
    hw = get_hardware(preset_for(device.type, gpu))
    step = forward_time(shape, hw, 1, 1, context)
    verify = tuple(forward_time(shape, hw, 1, n + 1, context) / step for n in range(MAX_SPECULATION_LENGTH + 1))
    head = forward_time(replace(shape, n_layers=1, vocab_size=head_vocab), hw, 1, head_rows, context) / step
    return verify, head


def rerank(cands: list[Candidate], budget: int, vocab_ids: list[int]) -> TokenTree:
    """The `budget` candidates of highest cumulative probability (ties: shallower, then earlier, so a
    parent always comes with its child), flattened level by level."""
    best = sorted(range(len(cands)), key=lambda i: (-cands[i].score, cands[i].depth, i))[:budget]
    tree, index = TokenTree(), {}
    for i in sorted(best, key=lambda i: (cands[i].depth, -cands[i].score, i)):
        c = cands[i]
        index[i] = len(tree)
        tree.tokens.append(vocab_ids[c.token])
        tree.parents.append(index[c.parent] if c.parent >= 0 else -1)
        tree.scores.append(math.exp(c.score))
        tree.sources.append("head")
    return tree
