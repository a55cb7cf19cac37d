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

import torch
from transformers import DynamicCache


class CachedLM:
    def __init__(self, model: torch.nn.Module):
        self.model = model
        self.cache = DynamicCache(config=model.config)
        self.tokens: list[int] = []  # ids whose keys/values are in the cache, in order
        self.device = model.get_input_embeddings().weight.device

    def __len__(self) -> int:
        return len(self.tokens)

    @torch.inference_mode()
    def forward(self, new_tokens: list[int], n_logits: int = 1) -> torch.Tensor:
        """Append `new_tokens` to the cache; return the logits of the last `n_logits` of them: [n, V]."""
        ids = torch.tensor([new_tokens], dtype=torch.long, device=self.device)  # [1, T]
        out = self.model(input_ids=ids, past_key_values=self.cache, use_cache=True, logits_to_keep=n_logits)
        self.tokens.extend(new_tokens)
        return out.logits[0]  # [n_logits, V]

    @torch.inference_mode()
    def forward_tree(self, new_tokens: list[int], tree_tokens: list[int], parents: list[int]) -> torch.Tensor:
        """Append `new_tokens` (committed, causal) and then the tree's nodes in one forward pass.

        Returns logits [1 + n, V]: row 0 scores the token after the last of `new_tokens` (the tree's
        first level), row 1 + i the token after node i. Afterwards the cache and `self.tokens` hold
        every node in the order given; call `keep_path` (or `truncate`) before the next forward.
        """
        if not new_tokens:
            raise ValueError("forward_tree needs at least one new (committed) token to hang the tree on")
        past, m, n = len(self.tokens), len(new_tokens), len(tree_tokens)
        mask = tree_attention_mask(past, m, parents, self.model.dtype, self.device)  # [1, 1, m+n, past+m+n]
        positions = past + torch.tensor(list(range(m)) + [m - 1 + d for d in tree_depths(parents)], device=self.device)
        ids = torch.tensor([new_tokens + tree_tokens], dtype=torch.long, device=self.device)  # [1, m+n]
        out = self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions[None],
            past_key_values=self.cache,
            use_cache=True,
            logits_to_keep=n + 1,
        )
        self.tokens.extend(new_tokens + tree_tokens)
        return out.logits[0]  # [n+1, V]

    def keep_path(self, tree_start: int, path: list[int]) -> None:
        """Keep the first `tree_start` cached tokens and then the tree nodes `path` (indices into
        the tree passed to `forward_tree`, root first); drop every other node's keys and values."""
        self.keep(list(range(tree_start)) + [tree_start + i for i in path])

    @torch.inference_mode()
    def keep(self, indices: list[int]) -> None:
        """Keep only the cached entries at `indices` (increasing), in that order: keep-indices."""
        if any(b <= a for a, b in zip(indices, indices[1:])) or (indices and indices[-1] >= len(self.tokens)):
            raise ValueError("keep needs increasing indices of cached tokens")
        same = next((j for j, i in enumerate(indices) if i != j), len(indices))  # entries already in place
        if same < len(indices):
            src = torch.tensor(indices[same:], device=self.device)
            for layer in self.cache.layers:
                for name in ("keys", "values"):
                    t = getattr(layer, name)  # [B, H, T, D]
                    t[:, :, same : len(indices)] = t.index_select(2, src)
        kept = [self.tokens[i] for i in indices]
        self.truncate(len(indices))
        self.tokens = kept

    @torch.inference_mode()
    def forward_hidden(self, new_tokens: list[int], n_logits: int, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """`forward`, plus the hidden states entering decoder layer `layer` for the same last
        `n_logits` tokens: logits [n, V], hidden [n, H] (speculative streaming starts its streams there)."""
        ids = torch.tensor([new_tokens], dtype=torch.long, device=self.device)  # [1, T]
        out = self.model(
            input_ids=ids, past_key_values=self.cache, use_cache=True, logits_to_keep=n_logits, output_hidden_states=True
        )
        self.tokens.extend(new_tokens)
        return out.logits[0], out.hidden_states[layer][0, -n_logits:]

    def layer_kv(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The cached keys and values of decoder layer `layer` (rotary applied): [1, kv_heads, len(self), d] each."""
        entry = self.cache.layers[layer]
        return entry.keys, entry.values

    def truncate(self, length: int) -> None:
        """Keep only the first `length` cached tokens (roll back rejected drafts)."""
        excess = len(self.tokens) - length
        if excess > 0:
            self.cache.crop(-excess)
            del self.tokens[length:]

    def cache_length(self) -> int:
        """Tokens held by the cache tensors themselves (equals len(self) unless something is broken)."""
        return self.cache.get_seq_length()


def tree_depths(parents: list[int]) -> list[int]:
    """Depth of each node (1 for children of the last committed token); parents come first."""
    depths: list[int] = []
    for i, parent in enumerate(parents):
        if not -1 <= parent < i:
            raise ValueError(f"node {i} has parent {parent}: nodes must come after their parents")
        depths.append(1 if parent < 0 else depths[parent] + 1)
    return depths


def tree_attention_mask(past: int, m: int, parents: list[int], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Additive mask [1, 1, m+n, past+m+n]: `past` cached tokens, then m committed tokens (causal),
    then n tree nodes that each see the prefix, themselves and their ancestors (0: attend, min: not)."""
    n = len(parents)
    allowed = torch.zeros(m + n, past + m + n, dtype=torch.bool)
    allowed[:, :past] = True
    allowed[:, past : past + m] = torch.ones(m + n, m, dtype=torch.bool).tril()  # pending tokens: causal
    for i, parent in enumerate(parents):
        row = m + i
        if parent >= 0:
            allowed[row, past + m :] = allowed[m + parent, past + m :]  # the parent's ancestors
        allowed[row, past + m + i] = True
    mask = torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)
    return mask[None, None].to(device)
