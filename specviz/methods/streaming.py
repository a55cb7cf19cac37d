"""Speculative Streaming (Bhendawade et al. 2024): the target drafts its own future n-grams.

No draft model. The target carries gamma speculative streams in its top layers
(`specviz.models.streaming`); at the last accepted token they predict the gamma tokens after the
target's own next token. Each iteration: the streams of the last accepted node propose a draft
(top-1 of each stream), one target forward verifies it with the one acceptance rule and yields the
hidden state of the new accepted node. A deterministic draft is a one-hot q, so sampling stays exact.

Lossless with respect to the *tuned* model (base + the adapter's LoRA): its output equals
autoregressive decoding of that model, which is `speculation_length=0` here. With the untrained
adapter used for targets that have no shipped adapter, the tuned model is the target itself.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from torch import nn

from specviz.decoding import Decoding
from specviz.errors import SpecvizError
from specviz.methods import register
from specviz.models import streaming as msa
from specviz.models.kv import CachedLM
from specviz.paths import ASSETS
from specviz.records import IterationRecord
from specviz.verify import verify

ADAPTERS = ASSETS / "streaming"  # shipped adapters, each tagged with its target's fingerprint


@dataclass(frozen=True)
class StreamingOptions:
    speculation_length: int = 4  # streams used per iteration (at most the adapter's gamma); 0: AR of the tuned model
    adapter: str = "auto"  # "auto": the shipped adapter trained for this target, else "untrained"; or a .safetensors path

    def __post_init__(self) -> None:
        if isinstance(self.speculation_length, bool) or not isinstance(self.speculation_length, int) or self.speculation_length < 0:
            raise SpecvizError(f"speculation_length must be a non-negative integer, got {self.speculation_length!r}")


_LOADED: weakref.WeakKeyDictionary[nn.Module, dict[str, msa.StreamingLM]] = weakref.WeakKeyDictionary()


def streaming_model(target: nn.Module, adapter: str = "auto") -> msa.StreamingLM:
    """The MSA model over `target` with `adapter` (loaded once per target and adapter)."""
    per_target = _LOADED.setdefault(target, {})
    if adapter not in per_target:
        per_target[adapter] = _load(target, adapter)
    return per_target[adapter]


def shipped_adapter(target: nn.Module) -> Path | None:
    """The shipped adapter trained for exactly this target, if there is one."""
    mark = msa.fingerprint(target)
    for path in sorted(ADAPTERS.glob("*.safetensors")):
        if msa.read_adapter_meta(path).get("target") == mark:
            return path
    return None


def _load(target: nn.Module, adapter: str) -> msa.StreamingLM:
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
    description="The target drafts its own next tokens with extra attention streams in its top layers; no draft model.",
    paper="Bhendawade et al. 2024 (Speculative Streaming)",
    options=StreamingOptions,
    needs_draft=False,
    rank=40,
)
def streaming(dec: Decoding, opts: StreamingOptions) -> Iterator[IterationRecord]:
    lm = streaming_model(dec.pair.target, opts.adapter)
    main = CachedLM(lm.tuned)  # the main stream: the tuned target with its ordinary KV cache
    gamma = min(opts.speculation_length, lm.cfg.gamma)
    node = None  # hidden state (entering layer N - N_s) of the last accepted token, once known
    while not dec.done:
        t_start = dec.now()
        # draft: top-1 of each stream of the last accepted node; they follow the target's next token
        k = min(gamma, dec.remaining - 1) if node is not None else 0
        draft = lm.stream_logits(node, len(main) - 1, main.layer_kv)[:k].argmax(-1).tolist() if k > 0 else []
        t_drafted = dec.now()
        # verify: one forward of the main stream over the target's token + the draft
        pending = dec.ids[len(main) :]
        logits, hidden = main.forward_hidden(pending + draft, n_logits=len(draft) + 1, layer=lm.first_stream_layer)
        verdict = verify(draft, logits, None, dec.sampling, dec.generator)
        position = len(dec.ids)
        record = dec.commit(
            drafted=draft,
            verdict=verdict,
            speculation_length=len(draft),
            t_start=t_start,
            t_drafted=t_drafted,
            draft_forwards=0,
            extra={"streams": len(draft)},
        )
        main.truncate(position + verdict.accepted)  # the accepted node is the last token kept
        node = hidden[verdict.accepted]
        yield record
