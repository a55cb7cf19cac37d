"""The one module that touches KV caches.

`CachedLM` is a causal LM plus its KV cache plus the token ids that cache holds. Methods feed it
tokens and roll it back after rejections (`truncate`): every token's keys and values are computed
once, so each speculative iteration costs one target forward pass and no recomputation of the
prefix (gpt-fast and Hugging Face's assisted generation work the same way).
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

    def truncate(self, length: int) -> None:
        """Keep only the first `length` cached tokens (roll back rejected drafts)."""
        excess = len(self.tokens) - length
        if excess > 0:
            self.cache.crop(-excess)
            del self.tokens[length:]

    def cache_length(self) -> int:
        """Tokens held by the cache tensors themselves (equals len(self) unless something is broken)."""
        return self.cache.get_seq_length()
