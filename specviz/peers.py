"""The peers: Hugging Face `generate()` run on the same pair, prompts and settings as our methods.

Each peer has a counterpart among our methods, the one whose registry entry lists it
(`register(..., hf_peers=...)`), so the benchmark can answer "is specviz faster or slower than what
I already have?" with a ratio measured side by side:

    hf_greedy              generate(do_sample=False)                       <-> autoregressive
    hf_assisted            generate(assistant_model=draft), gamma fixed     <-> vanilla
    hf_assisted_heuristic  the same with HF's +2/-1 schedule                <-> heuristic
    hf_assisted_default    HF's own defaults (20 tokens, confidence 0.4)    <-> vanilla
    hf_prompt_lookup       generate(prompt_lookup_num_tokens=gamma)         <-> prompt_lookup

Forward passes are counted with forward hooks on the models, so peers report target and draft
calls like our records do.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from specviz.errors import SpecvizError
from specviz.methods import all_methods
from specviz.models.pair import ModelPair

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel


@dataclass(frozen=True)
class Peer:
    name: str
    label: str
    description: str
    needs_draft: bool
    assistant: dict[str, Any] | None = None  # assistant generation-config fields (None: no draft model)
    prompt_lookup: bool = False

    @property
    def counterpart(self) -> str:
        """Our method it is compared with: the one whose registry entry lists it in `hf_peers`."""
        return next(s.name for s in all_methods() if self.name in s.hf_peers)


PEERS: dict[str, Peer] = {
    p.name: p
    for p in (
        Peer("hf_greedy", "HF generate", "transformers generate(), plain decoding", False),
        Peer(
            "hf_assisted",
            "HF assisted (same γ)",
            "generate(assistant_model=draft) with num_assistant_tokens = γ, constant schedule",
            True,
            assistant={"num_assistant_tokens_schedule": "constant", "assistant_confidence_threshold": 0.0},
        ),
        Peer(
            "hf_assisted_heuristic",
            "HF assisted (heuristic)",
            "generate(assistant_model=draft) with HF's +2/-1 schedule starting at γ",
            True,
            assistant={"num_assistant_tokens_schedule": "heuristic_transient", "assistant_confidence_threshold": 0.0},
        ),
        Peer(
            "hf_assisted_default",
            "HF assisted (defaults)",
            "generate(assistant_model=draft) with transformers' default settings",
            True,
            assistant={},
        ),
        Peer(
            "hf_prompt_lookup",
            "HF prompt lookup",
            "generate(prompt_lookup_num_tokens=γ, max_matching_ngram_size=3)",
            False,
            prompt_lookup=True,
        ),
    )
}


def peers_for(methods: list[str]) -> list[str]:
    """The peers whose counterpart is among `methods` (the AR peer always: it is the reference)."""
    listed = {peer for s in all_methods() if s.name in methods for peer in s.hf_peers}
    chosen = [name for name in PEERS if name in listed]
    return ["hf_greedy", *[n for n in chosen if n != "hf_greedy"]]


@contextlib.contextmanager
def _counting(model: torch.nn.Module) -> Iterator[list[int]]:
    """Counts forward calls of `model` while the block runs."""
    calls = [0]
    handle = model.register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    try:
        yield calls
    finally:
        handle.remove()


@contextlib.contextmanager
def _assistant_config(draft: PreTrainedModel, fields: dict[str, Any]) -> Iterator[None]:
    """HF reads assisted-generation settings from the assistant's generation config: set them for
    one call and put the shared model's config back afterwards."""
    config = draft.generation_config
    saved = {k: getattr(config, k, None) for k in fields}
    for k, v in fields.items():
        setattr(config, k, v)
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(config, k, v)


def run_peer(
    name: str,
    pair: ModelPair,
    prompt_ids: list[int],
    *,
    max_new_tokens: int,
    speculation_length: int = 4,
    temperature: float = 0.0,
    top_p: float = 1.0,
    seed: int = 0,
) -> dict[str, Any]:
    """One `generate()` call of peer `name`; returns the benchmark's run fields."""
    import torch
    from transformers import GenerationMixin

    peer = PEERS[name]
    target, draft = pair.target, pair.draft
    if not isinstance(target, GenerationMixin):  # every Hugging Face causal LM is
        raise SpecvizError(f"the target of '{pair.name}' has no generate(): the peers cannot run on it")
    kwargs: dict[str, Any] = {
        "max_new_tokens": max_new_tokens,
        "eos_token_id": list(pair.eos_token_ids),
        "pad_token_id": pair.eos_token_ids[0],
        "do_sample": temperature > 0,
    }
    if temperature > 0:  # the same warping as ours: no top-k, the same top-p
        kwargs.update(temperature=temperature, top_p=top_p, top_k=0)
    settings: dict[str, Any] = {}
    if peer.prompt_lookup:
        kwargs.update(prompt_lookup_num_tokens=speculation_length, max_matching_ngram_size=3)
    if peer.assistant is not None:
        kwargs["assistant_model"] = draft
        settings = dict(peer.assistant)
        if peer.assistant:
            settings["num_assistant_tokens"] = speculation_length
    input_ids = torch.tensor([prompt_ids], device=pair.device)
    torch.manual_seed(seed)
    null = contextlib.nullcontext([0])
    with (
        _counting(target) as t_calls,
        # a peer that needs a draft is run on a pair that has one (`draft` is not None there)
        _counting(draft) if peer.needs_draft else null as d_calls,  # type: ignore[arg-type]
        _assistant_config(draft, settings) if peer.needs_draft else contextlib.nullcontext(),  # type: ignore[arg-type]
        torch.inference_mode(),
    ):
        _sync(pair.device)
        t0 = time.perf_counter()
        # transformers types generate's self as a Protocol written for the `ty` checker, which mypy
        # does not match with PreTrainedModel (GenerativePreTrainedModel in transformers/_typing.py).
        mask = torch.ones_like(input_ids)
        out = target.generate(input_ids, attention_mask=mask, **kwargs)  # type: ignore[misc]  # ty-only self type
        _sync(pair.device)
        wall = time.perf_counter() - t0
    output = out[0, len(prompt_ids) :].tolist()
    return {
        "method": name,
        "kind": "peer",
        "output_ids": output,
        "new_tokens": len(output),
        "wall_s": wall,
        "target_forwards": t_calls[0],
        "draft_forwards": d_calls[0],
        # HF does not report what it drafted; None keeps the acceptance columns honest ("-").
        "drafted": None,
        "accepted": None,
        "iterations": t_calls[0],
        "stop_reason": "eos" if output and output[-1] in pair.eos_token_ids else "max_new_tokens",
        "oracle_sl_mean": None,
    }


def _sync(device: torch.device | str) -> None:
    import torch

    if getattr(device, "type", str(device)) == "cuda":
        torch.cuda.synchronize()
