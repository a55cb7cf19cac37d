"""The one module that touches KV caches.

`CachedLM` is a causal LM plus its KV cache plus the token ids that cache holds. Methods feed it
tokens and roll it back after rejections (`truncate`): every token's keys and values are computed
once, so each speculative iteration costs one target forward pass and no recomputation of the
prefix (gpt-fast and Hugging Face's assisted generation work the same way).

Token trees (SSSD, SpecInfer, Medusa): `forward_tree` scores a whole candidate tree in one pass.
The nodes are flattened in topological order, `parents[i]` names node i's parent (-1: a child of
the last committed token); each node's position id is the prefix length plus its depth and a 4D
attention mask lets it see the cached prefix, the pending tokens and its own ancestors only. The
cache then holds every node; `keep` compacts it to the prefix plus the accepted path.
"""

from __future__ import annotations

import itertools
from typing import Protocol, TypeVar, runtime_checkable

import torch
from transformers import DynamicCache, PreTrainedConfig, PreTrainedModel
from transformers.cache_utils import CacheLayerMixin

from specviz.models.devices import HOST, input_embeddings, to_device
from specviz.models.fast import FastLlama, engine_name
from specviz.models.fast import decoder as fast_decoder

R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)


class KVAppend(Protocol):
    def __call__(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]: ...


class TreePass(Protocol[R_co]):
    """A caller's own tree pass (`CachedLM.forward_tree_by`): (ids, position ids, mask, append) -> anything."""

    def __call__(self, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, append: KVAppend) -> R_co: ...


@runtime_checkable
class LeanDecoder(Protocol):
    """A model with a decoding pass of its own over a `StaticKV` (specviz's drafts)."""

    def new_cache(self) -> StaticKV: ...

    def step(self, ids: list[int], cache: StaticKV, n_logits: int = 1) -> torch.Tensor: ...


class CachedLM:
    """A causal LM, its KV cache and the ids that cache holds. Three forwards, one interface: a model
    with a lean decoding pass of its own (`step` over a `StaticKV`, as specviz's drafts have) decodes
    through it; a float32 CPU Llama-family model through `fast.FastLlama` over a `StaticKV`; any
    other model through transformers' forward with a `DynamicCache`. Trees need one of the last two."""

    def __init__(self, model: PreTrainedModel) -> None:
        self.model = model
        self.lean = model if isinstance(model, LeanDecoder) else None  # decodes through its own `step`
        self.fast = None if self.lean is not None else fast_decoder(model)
        self.cache: StaticKV | DynamicCache = (
            self.lean.new_cache()
            if self.lean is not None
            else StaticKV.of(self.fast)
            if self.fast is not None
            else new_cache(model.config)
        )
        self.tokens: list[int] = []  # ids whose keys/values are in the cache, in order
        self.device = input_embeddings(model).device

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def engine(self) -> str:
        """Which forward this runs, in words (`fast.engine_name`, or the lean model's own step)."""
        return "the model's own lean step" if self.lean is not None else engine_name(self.model)

    @torch.inference_mode()
    def forward(self, new_tokens: list[int], n_logits: int = 1) -> torch.Tensor:
        """Append `new_tokens` to the cache; return the logits of the last `n_logits` of them: [n, V]."""
        if (decoder := self.lean or self.fast) is not None:
            assert isinstance(self.cache, StaticKV)  # the lean or fast forward's cache
            logits = decoder.step(new_tokens, self.cache, n_logits)  # [n_logits, V]
            self.tokens.extend(new_tokens)
            return logits
        ids = to_device(torch.tensor([new_tokens], dtype=torch.long, device=HOST), self.device)  # [1, T]
        out = self.model(input_ids=ids, past_key_values=self.cache, use_cache=True, logits_to_keep=n_logits)
        self.tokens.extend(new_tokens)
        return out.logits[0]  # [n_logits, V]

    def forward_tree(self, new_tokens: list[int], tree_tokens: list[int], parents: list[int]) -> torch.Tensor:
        """Append `new_tokens` (committed, causal) and then the tree's nodes in one forward pass.

        Returns logits [1 + n, V]: row 0 scores the token after the last of `new_tokens` (the tree's
        first level), row 1 + i the token after node i. Afterwards the cache and `self.tokens` hold
        every node in the order given; call `keep_path` (or `truncate`) before the next forward.
        """
        return self._tree_pass(new_tokens, tree_tokens, parents, None)[0]

    def forward_tree_hidden(
        self, new_tokens: list[int], tree_tokens: list[int], parents: list[int], layer: int, all_rows: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`forward_tree`, plus the hidden states entering decoder layer `layer` for the same rows:
        logits [1 + n, V], hidden [1 + n, H] (speculative streaming starts its streams there). With
        `all_rows`, hidden holds every new committed token's row too: [m + n, H] (an EAGLE head's
        cache starts from the whole prompt)."""
        logits, hidden = self._tree_pass(new_tokens, tree_tokens, parents, layer, all_rows)
        assert hidden is not None  # a layer was asked for
        return logits, hidden

    @torch.inference_mode()
    def forward_tree_by(
        self, new_tokens: list[int], tree_tokens: list[int], parents: list[int], tree_pass: TreePass[R]
    ) -> R:
        """`forward_tree` through the caller's own layers (speculative streaming's fused pass): `tree_pass`
        gets the inputs transformers' forward would (ids [1, m+n], position ids [m+n], the additive
        mask [1, 1, m+n, past+m+n]) and `append(layer, k, v)`, which stores a layer's keys and values of
        the pass [1, kv_heads, m+n, d] and returns that layer's whole keys and values. Afterwards the
        cache holds every node, as after `forward_tree`."""
        ids, positions, allowed = self._tree_inputs(new_tokens, tree_tokens, parents)
        mask = additive(allowed, self.model.dtype, self.device)[None, None]  # [1, 1, m+n, past+m+n]
        if isinstance(self.cache, StaticKV):
            out = tree_pass(ids, positions, mask, self.cache.append)
            self.cache.advance(ids.shape[1])
        else:
            out = tree_pass(ids, positions, mask, lambda layer, k, v: self._dynamic().update(k, v, layer))
        self.tokens.extend(new_tokens + tree_tokens)
        return out

    def _tree_inputs(
        self, new_tokens: list[int], tree_tokens: list[int], parents: list[int]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """ids [1, m+n] and position ids [m+n] on the model's device, and which of the past+m+n
        positions each row sees: bool [m+n, past+m+n] on the host."""
        if self.lean is not None:
            raise ValueError("tree passes run through a target's forward: not on a lean-decoding model")
        position_ids, allowed = self._tree_layout(len(new_tokens), parents)
        ids_positions = to_device(
            torch.tensor([new_tokens + tree_tokens, position_ids], dtype=torch.long, device=HOST), self.device
        )
        return ids_positions[:1], ids_positions[1], allowed

    def _tree_layout(self, m: int, parents: list[int]) -> tuple[list[int], torch.Tensor]:
        """m committed tokens then a tree after the cache: each row's position id, and which of the
        past+m+n positions each row sees (bool [m+n, past+m+n], on the host)."""
        if not m:
            raise ValueError("forward_tree needs at least one new (committed) token to hang the tree on")
        past = len(self.tokens)
        positions = [past + i for i in range(m)] + [past + m - 1 + d for d in tree_depths(parents)]
        return positions, tree_allowed(past, m, parents)

    def _fast_tree_pass(
        self, new_tokens: list[int], tree_tokens: list[int], parents: list[int], layer: int | None, rows: int
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`_tree_pass` on the fast step: RoPE positions from the host, no device read."""
        assert self.fast is not None and isinstance(self.cache, StaticKV)  # the fast forward's cache
        positions, allowed = self._tree_layout(len(new_tokens), parents)
        ids = torch.tensor([new_tokens + tree_tokens], device=self.device)
        visible = to_device(allowed, self.device)[None]  # [1, m+n, past+m+n]
        logits, hidden = self.fast.forward(ids, self.cache, positions, visible, len(tree_tokens) + 1, layer)
        self.tokens.extend(new_tokens + tree_tokens)
        return logits[0], None if hidden is None else hidden[0, -rows:]

    @torch.inference_mode()
    def _tree_pass(
        self,
        new_tokens: list[int],
        tree_tokens: list[int],
        parents: list[int],
        layer: int | None,
        all_rows: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        m, n = len(new_tokens), len(tree_tokens)
        rows = m + n if all_rows else n + 1
        if self.fast is not None:
            return self._fast_tree_pass(new_tokens, tree_tokens, parents, layer, rows)
        ids, positions, allowed = self._tree_inputs(new_tokens, tree_tokens, parents)
        out = self.model(
            input_ids=ids,
            attention_mask=additive(allowed, self.model.dtype, self.device)[None, None],
            position_ids=positions[None],
            past_key_values=self.cache,
            use_cache=True,
            logits_to_keep=n + 1,
            output_hidden_states=layer is not None,
        )
        self.tokens.extend(new_tokens + tree_tokens)
        return out.logits[0], out.hidden_states[layer][0, -rows:] if layer is not None else None  # [n+1, V], [rows, H]

    def keep_path(self, tree_start: int, path: list[int]) -> None:
        """Keep the first `tree_start` cached tokens and then the tree nodes `path` (indices into
        the tree passed to `forward_tree`, root first); drop every other node's keys and values."""
        self.keep(list(range(tree_start)) + [tree_start + i for i in path])

    @torch.inference_mode()
    def keep(self, indices: list[int]) -> None:
        """Keep only the cached entries at `indices` (increasing), in that order: keep-indices."""
        if any(b <= a for a, b in itertools.pairwise(indices)) or (indices and indices[-1] >= len(self.tokens)):
            raise ValueError("keep needs increasing indices of cached tokens")
        kept = [self.tokens[i] for i in indices]
        if isinstance(self.cache, StaticKV):
            self.cache.keep(indices)
        else:
            keep_dynamic(self._dynamic(), indices)
            self.truncate(len(indices))
        self.tokens = kept

    def layer_kv(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The cached keys and values of decoder layer `layer` (rotary applied): [1, kv_heads, len(self), d] each."""
        if self.fast is not None:
            assert isinstance(self.cache, StaticKV)  # the fast forward's cache
            return self.cache.layer(layer)
        entry = self._dynamic().layers[layer]
        if not isinstance(entry, CacheLayerMixin) or entry.keys is None or entry.values is None:
            raise ValueError(f"layer {layer} holds no keys and values (a linear-attention layer, or an empty cache)")
        return entry.keys, entry.values

    def _dynamic(self) -> DynamicCache:
        """The transformers cache, which per-layer reads need here (not a lean-decoding model's)."""
        if not isinstance(self.cache, DynamicCache):
            raise ValueError("per-layer cache access runs on a target's cache: not on a lean-decoding model")
        return self.cache

    def truncate(self, length: int) -> None:
        """Keep only the first `length` cached tokens (roll back rejected drafts)."""
        excess = len(self.tokens) - length
        if excess > 0:
            self.cache.crop(-excess)
            del self.tokens[length:]

    def cache_length(self) -> int:
        """Tokens held by the cache tensors themselves (equals len(self) unless something is broken)."""
        return self.cache.get_seq_length()


def keep_dynamic(cache: DynamicCache, indices: list[int]) -> None:
    """Move the entries at `indices` (increasing) of every layer to the front, in that order (the
    caller then crops to len(indices))."""
    same = in_place(indices)
    if same == len(indices):
        return
    src = {}  # the indices on each device that holds a layer (a device_map spreads them)
    for layer in cache.layers:
        for name in ("keys", "values"):
            t = getattr(layer, name)  # [B, H, T, D]
            if t.device not in src:
                src[t.device] = to_device(torch.tensor(indices[same:], device=HOST), t.device)
            t[:, :, same : len(indices)] = t.index_select(2, src[t.device])


def in_place(indices: list[int]) -> int:
    """How many of the kept `indices` (increasing) are already where keeping puts them: 0, 1, 2, ..."""
    return next((j for j, i in enumerate(indices) if i != j), len(indices))


def tree_depths(parents: list[int]) -> list[int]:
    """Depth of each node (1 for children of the last committed token); parents come first."""
    depths: list[int] = []
    for i, parent in enumerate(parents):
        if not -1 <= parent < i:
            raise ValueError(f"node {i} has parent {parent}: nodes must come after their parents")
        depths.append(1 if parent < 0 else depths[parent] + 1)
    return depths


def tree_visibility(m: int, parents: list[int]) -> torch.Tensor:
    """Bool [m+n, m+n] over a block of m committed tokens (causal) then n tree nodes: each node
    sees the m tokens, itself and its ancestors (True: may attend). Built on the host."""
    n = len(parents)
    allowed = torch.zeros(m + n, m + n, dtype=torch.bool, device=HOST)
    allowed[:, :m] = torch.ones(m + n, m, dtype=torch.bool, device=HOST).tril()
    for i, parent in enumerate(parents):
        if parent >= 0:
            allowed[m + i, m:] = allowed[m + parent, m:]  # the parent and its ancestors
        allowed[m + i, m + i] = True
    return allowed


def additive(allowed: torch.Tensor, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A host bool attend-mask as the additive float mask attention adds to its scores (0 or min), on `device`."""
    mask = torch.zeros(allowed.shape, dtype=dtype, device=HOST).masked_fill(~allowed, torch.finfo(dtype).min)
    return to_device(mask, device)


def tree_allowed(past: int, m: int, parents: list[int]) -> torch.Tensor:
    """Bool [m+n, past+m+n] on the host: `past` cached tokens, then m committed tokens (causal), then
    n tree nodes that each see the prefix, themselves and their ancestors (True: may attend)."""
    block = tree_visibility(m, parents)
    return torch.cat([torch.ones(len(block), past, dtype=torch.bool, device=HOST), block], dim=1)


def new_cache(config: PreTrainedConfig) -> DynamicCache:
    """An empty Hugging Face cache for a model of `config` (a drafting head's too: EAGLE's)."""
    return DynamicCache(config=config)


def crop_to(cache: DynamicCache | StaticKV, length: int) -> None:
    """Keep the first `length` positions of `cache`: drop what a rejected draft or tree left."""
    excess = cache.get_seq_length() - length
    if excess > 0:
        cache.crop(-excess)


class StaticKV:
    """Keys and values of every layer in tensors allocated once (gpt-fast's static cache): appending
    writes in place, rolling back only moves `length`, `keep` compacts (a tree's accepted path).
    Grows by doubling when full. keys[l] [B, Hkv, capacity, hd]."""

    def __init__(
        self,
        layers: int,
        kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device,
        capacity: int = 512,
        batch: int = 1,
    ) -> None:
        self.keys = torch.zeros(layers, batch, kv_heads, capacity, head_dim, dtype=dtype, device=device)
        self.values = torch.zeros_like(self.keys)
        self.length = 0  # positions held

    @property
    def device(self) -> torch.device:
        return self.keys.device

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write k, v [B, Hkv, T, hd] of `layer` after the held positions; its keys and values so far:
        [B, Hkv, length + T, hd] each (a `KVAppend`). Call `advance(T)` once every layer has appended."""
        end = self.length + k.shape[2]
        if end > self.keys.shape[3]:
            self._grow(end)
        self.keys[layer, :, :, self.length : end] = k
        self.values[layer, :, :, self.length : end] = v
        return self.keys[layer, :, :, :end], self.values[layer, :, :, :end]

    def advance(self, n: int) -> None:
        self.length += n

    def crop(self, n: int) -> None:
        """As `DynamicCache.crop`: n < 0 drops the last -n positions, n >= 0 keeps the first n."""
        self.length = max(0, self.length + n) if n < 0 else min(self.length, n)

    def keep(self, indices: list[int]) -> None:
        """Keep only the positions at `indices` (increasing), in that order."""
        same = in_place(indices)
        if same < len(indices):
            src = to_device(torch.tensor(indices[same:], device=HOST), self.device)
            for t in (self.keys, self.values):
                t[:, :, :, same : len(indices)] = t.index_select(3, src)
        self.length = len(indices)

    def layer(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The held keys and values of `layer`: [B, Hkv, length, hd] each."""
        return self.keys[layer, :, :, : self.length], self.values[layer, :, :, : self.length]

    def get_seq_length(self) -> int:
        return self.length

    def _grow(self, end: int) -> None:
        size = max(end, 2 * self.keys.shape[3])
        for name in ("keys", "values"):
            old = getattr(self, name)
            new = old.new_zeros(*old.shape[:3], size, old.shape[4])
            new[:, :, :, : old.shape[3]] = old
            setattr(self, name, new)

    @classmethod
    def of(cls, fast: FastLlama, batch: int = 1) -> StaticKV:
        """An empty cache for `fast`'s model."""
        return cls(fast.n_layers, fast.n_kv, fast.head_dim, fast.dtype, fast.device, batch=batch)


class BatchCachedLM:
    """A static batch of B sequences in one KV cache, each with its own token tree per step.

    Rows grow by different amounts (each keeps its own accepted path), so the cache columns are
    shared but every row has its own validity mask over them: `valid[b, j]` says whether row b
    attends to column j. A step appends a block of W columns (each row's new tokens and tree,
    left-padded to the widest row); `keep_paths` compacts that block to each row's committed tokens
    plus accepted path, and the holes left in shorter rows stay masked. Position ids count only a
    row's own tokens, so every row computes exactly what it would alone.
    """

    def __init__(self, model: PreTrainedModel) -> None:
        self.model = model
        self.cache = new_cache(model.config)
        self.device = input_embeddings(model).device
        self.valid = torch.zeros(0, 0, dtype=torch.bool, device=HOST)  # [B, width], on the host
        self.lengths: list[int] = []  # tokens each row holds: its next position id
        self._block: tuple[int, list[int], list[int]] | None = None  # width before the step, pads, m per row

    @torch.inference_mode()
    def forward_trees(
        self, new_tokens: list[list[int]], trees: list[tuple[list[int], list[int]]]
    ) -> list[torch.Tensor]:
        """Row b appends new_tokens[b] (committed, at least one) and the tree trees[b] = (tokens,
        parents), all rows in one forward pass. Returns per row logits [1 + n_b, V] as in
        `CachedLM.forward_tree`; call `keep_paths` before the next step."""
        B = len(new_tokens)
        if not self.lengths:
            self.valid, self.lengths = torch.zeros(B, 0, dtype=torch.bool, device=HOST), [0] * B
        width = self.valid.shape[1]
        sizes = [len(new) + len(tree[0]) for new, tree in zip(new_tokens, trees, strict=True)]
        W, n_max = max(sizes), max(len(tree[0]) for tree in trees)
        ids = torch.zeros(B, W, dtype=torch.long, device=HOST)
        positions = torch.zeros(B, W, dtype=torch.long, device=HOST)
        allowed = torch.zeros(B, W, width + W, dtype=torch.bool, device=HOST)
        pads = [W - size for size in sizes]
        for b, (new, (tokens, parents)) in enumerate(zip(new_tokens, trees, strict=True)):
            s, m = pads[b], len(new)
            ids[b, s:] = torch.tensor(new + tokens, device=HOST)
            positions[b, s:] = torch.tensor(
                [self.lengths[b] + i for i in range(m)] + [self.lengths[b] + m - 1 + d for d in tree_depths(parents)],
                device=HOST,
            )
            allowed[b, s:, :width] = self.valid[b]
            allowed[b, s:, width + s :] = tree_visibility(m, parents)
            allowed[b, torch.arange(s, device=HOST), width + torch.arange(s, device=HOST)] = (
                True  # padding sees itself only
            )
        out = self.model(
            input_ids=to_device(ids, self.device),
            attention_mask=additive(allowed, self.model.dtype, self.device)[:, None],  # [B, 1, W, width+W]
            position_ids=to_device(positions, self.device),
            past_key_values=self.cache,
            use_cache=True,
            logits_to_keep=n_max + 1,
        )
        self._block = (width, pads, [len(new) for new in new_tokens])
        return [out.logits[b, n_max - len(tree[0]) :] for b, tree in enumerate(trees)]  # [1+n_b, V] each

    @torch.inference_mode()
    def keep_paths(self, paths: list[list[int]]) -> None:
        """Keep each row's committed tokens of the last step plus the tree nodes on its `path`."""
        if self._block is None:
            raise ValueError("keep_paths follows a forward_trees step")
        width, pads, ms = self._block
        kept = [
            [pads[b] + j for j in range(ms[b])] + [pads[b] + ms[b] + i for i in path] for b, path in enumerate(paths)
        ]
        K = max(len(k) for k in kept)
        index = to_device(
            torch.tensor([k + [0] * (K - len(k)) for k in kept], device=HOST), self.device
        )  # [B, K] block columns
        for layer in self.cache.layers:
            for name in ("keys", "values"):
                t = getattr(layer, name)  # [B, H, width+W, D]
                block = t[:, :, width:].gather(2, index[:, None, :, None].expand(-1, t.shape[1], -1, t.shape[3]))
                t[:, :, width : width + K] = block
        crop_to(self.cache, width + K)
        new_valid = torch.tensor([[j < len(k) for j in range(K)] for k in kept], dtype=torch.bool, device=HOST).reshape(
            len(kept), K
        )
        self.valid = torch.cat([self.valid, new_valid], dim=1)
        self.lengths = [n + len(k) for n, k in zip(self.lengths, kept, strict=True)]
        self._block = None

    def select_rows(self, rows: list[int]) -> None:
        """Keep only these rows (finished sequences leave the batch)."""
        self.cache.batch_select_indices(to_device(torch.tensor(rows, device=HOST), self.device))
        self.valid = self.valid[rows]
        self.lengths = [self.lengths[r] for r in rows]


class BatchedLM:
    """B sequences of equal length in one KV cache, fed [B, T] at a time (no trees, no masks): what
    a server batching B requests does. Times batched forward passes for the cost model
    (`specviz.cost.measure`) through the forward `CachedLM` would use (fast or transformers');
    `BatchCachedLM` is the one for decoding batches of token trees."""

    def __init__(self, model: PreTrainedModel) -> None:
        self.model = model
        self.fast = fast_decoder(model)
        self.cache: StaticKV | DynamicCache | None = None if self.fast is not None else new_cache(model.config)
        self.device = input_embeddings(model).device

    @torch.inference_mode()
    def forward(self, ids: torch.Tensor, n_logits: int = 1) -> torch.Tensor:
        """Append `ids` [B, T] to every sequence's cache; return logits of the last `n_logits`: [B, n, V]."""
        if self.fast is not None:
            if self.cache is None:
                self.cache = StaticKV.of(self.fast, batch=ids.shape[0])
            assert isinstance(self.cache, StaticKV)  # the fast forward's cache
            return self.fast.forward(ids.to(self.device), self.cache, n_logits=n_logits)[0]
        out = self.model(
            input_ids=ids.to(self.device), past_key_values=self.cache, use_cache=True, logits_to_keep=n_logits
        )
        return out.logits

    def truncate(self, length: int) -> None:
        """Keep only the first `length` positions of every sequence."""
        if self.cache is not None:
            crop_to(self.cache, length)

    def cache_length(self) -> int:
        return 0 if self.cache is None else self.cache.get_seq_length()
